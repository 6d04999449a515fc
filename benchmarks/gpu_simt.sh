#!/usr/bin/env bash
# Issue 12, "SIMT: the last 15%": smoke, verify and bench the SIMT ladder's new steps and the
# alternatives to simt_best, beside cuBLAS SGEMM. On the GPU machine, from the repo root:
#   bash benchmarks/gpu_simt.sh
# Every step runs under `timeout` (a hung kernel costs its limit, not the call); about 6
# minutes in all on an H200. Writes to $OUT: resources.txt (registers, spills per kernel),
# smoke.log, verify.log + verify.json (the new presets: shape sweep with batches; variants:
# every layout x epilogue the rules accept), pytest_gpu.log, bench_4096.json/.log (whole SIMT
# ladder + alternatives), bench_big.json/.log (best few at 8192^3 and 4095x4097x4093), and
# summary.txt (the bench tables, sorted).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gemmgen-out}
mkdir -p "$OUT" "$OUT/kernels"
START=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - START )) s]"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader \
    | tee "$OUT/gpu.txt"
echo "commit ${GEMMGEN_GIT_COMMIT:-unknown}" | tee -a "$OUT/gpu.txt"

NEW="simt_cs simt_swizzle simt_fragdb simt_256x128 simt_peel simt_best"
LADDER="naive coalesced smem tile1d tile2d vectorized warptile warptile_db warptile_tuned $NEW"

echo "== compile the ladder and the alternatives (parallel, into the cubin cache); emit the alternatives $(elapsed)"
timeout 240 python3 - "$OUT" $LADDER <<'EOF' 2>&1 | tee "$OUT/resources.txt"
import runpy, sys, time
from gemmgen import PRESETS, emit
from gemmgen.runtime.build import build_many
out, names = sys.argv[1], sys.argv[2:]
pool = runpy.run_path("benchmarks/explore.py", run_name="explore")
alts = pool["X12_ALTERNATIVES"]
t = time.time()
labels = names + list(alts)
cfgs = [PRESETS[n].config for n in names] + list(alts.values())
for label, cfg, k in zip(labels, cfgs, build_many(cfgs)):
    if isinstance(k, Exception):
        print(f"{label:<22} BUILD FAILED {str(k)[:300]}")
    else:
        print(f"{label:<22} regs {k.registers:>3} local {k.local_bytes:>3} smem {k.smem_bytes:>6}  {cfg.name}")
for label, cfg in alts.items():  # gemmgen bench takes emitted files
    emit(cfg, f"{out}/kernels/{label}.cu")
print(f"{time.time() - t:.1f} s")
EOF

echo "== smoke: each new step and alternative in its own process, 75 s limit $(elapsed)"
timeout 200 python3 benchmarks/smoke.py --family simt --only x12_ --jobs 6 --limit 75 \
    2>&1 | tee "$OUT/smoke.log"
passed=$(grep '^PASSED' "$OUT/smoke.log" | sed 's/^PASSED *//')
ok_presets=""
for p in $NEW; do case " $passed " in *" x12_$p "*) ok_presets="$ok_presets $p";; esac; done
ok_alts=""
for f in "$OUT"/kernels/*.cu; do
    l=$(basename "$f" .cu)
    case " $passed " in *" $l "*) ok_alts="$ok_alts $l";; esac
done
echo "smoke passed: presets [$ok_presets ] alternatives [$ok_alts ]"

if [ -n "$ok_presets" ]; then
    args=""; for p in $ok_presets; do args="$args --preset $p"; done
    echo "== verify: shape sweep (odd shapes, alpha/beta, beta = 0 over NaN, K = 0, batches) $(elapsed)"
    timeout 120 python3 -m gemmgen verify $args --json "$OUT/verify.json" > "$OUT/verify.log" 2>&1
    echo "exit $?: $(tail -n 1 "$OUT/verify.log")"; grep -E "FAIL" "$OUT/verify.log" | head -n 6
    echo "== verify --variants: every layout x epilogue the rules accept $(elapsed)"
    timeout 120 python3 -m gemmgen verify --variants --preset simt_cs --preset simt_best \
        > "$OUT/verify_variants.log" 2>&1
    echo "exit $?: $(tail -n 1 "$OUT/verify_variants.log")"; grep -E "FAIL" "$OUT/verify_variants.log" | head -n 6
    # (alpha = 0 over NaN is in the verify sweep; test_gpu's alpha test builds every preset)
    echo "== pytest -m gpu: the new steps in each layout their rules accept $(elapsed)"
    timeout 90 python3 -m pytest -q -m gpu tests/test_gpu.py -k "simt_last_steps" \
        > "$OUT/pytest_gpu.log" 2>&1
    echo "exit $?: $(tail -n 1 "$OUT/pytest_gpu.log")"
fi

# The ladder's earlier steps are known good (committed results); the new ones only if smoked.
bench_presets="naive coalesced smem tile1d tile2d vectorized warptile warptile_db warptile_tuned $ok_presets"
args=""; for p in $bench_presets; do args="$args --preset $p"; done
files=""; for l in $ok_alts; do files="$files $OUT/kernels/$l.cu"; done
echo "== bench 4096^3: the SIMT ladder + alternatives beside cuBLAS SGEMM $(elapsed)"
timeout 150 python3 -m gemmgen bench $files $args --size 4096 --json "$OUT/bench_4096.json" \
    > "$OUT/bench_4096.log" 2>"$OUT/bench_4096.err"
echo "exit $?"; tail -n 3 "$OUT/bench_4096.err"

# The best few at 4096^3 (new steps and alternatives, plus warptile_tuned as the old best).
best=$(python3 - "$OUT/bench_4096.json" <<'EOF'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))["rows"]
except Exception:
    rows = []
old = {"naive", "coalesced", "smem", "tile1d", "tile2d", "vectorized", "warptile", "warptile_db"}
rows = [r for r in rows if r["kernel"] not in old and r.get("tflops") and r.get("passed", True)]
rows.sort(key=lambda r: -r["tflops"])
print(" ".join(dict.fromkeys(r["kernel"] for r in rows[:4])))
EOF
)
echo "best at 4096^3: $best"
args=""; files=""
for b in $best warptile_tuned; do
    if [ -f "$OUT/kernels/$b.cu" ]; then files="$files $OUT/kernels/$b.cu";
    elif python3 -c "import sys; from gemmgen import PRESETS; sys.exit(0 if '$b' in PRESETS else 1)"; then
        case " $args " in *" --preset $b "*) ;; *) args="$args --preset $b";; esac
    fi
done
echo "== bench 8192^3 and 4095x4097x4093:$files$args $(elapsed)"
timeout 150 python3 -m gemmgen bench $files $args --size 8192 --size 4095x4097x4093 \
    --json "$OUT/bench_big.json" > "$OUT/bench_big.log" 2>"$OUT/bench_big.err"
echo "exit $?"; tail -n 3 "$OUT/bench_big.err"

python3 - "$OUT" <<'EOF' 2>&1 | tee "$OUT/summary.txt"
import json, sys
for name in ("bench_4096.json", "bench_big.json"):
    try:
        rows = json.load(open(f"{sys.argv[1]}/{name}"))["rows"]
    except Exception as exc:
        print(f"{name}: none ({exc})")
        continue
    print(f"== {name}")
    for r in sorted(rows, key=lambda r: (r["M"] * r["N"] * r["K"], -(r["tflops"] or 0))):
        print(f"{r['kernel']:<24} {r['M']}x{r['N']}x{r['K']:<6} {r['tflops'] or 0:8.2f} TFLOP/s  "
              f"cuBLAS {r.get('cublas_tflops') or 0:8.2f}  {r.get('pct_cublas')}%  "
              f"err {r.get('rel_error', 0):.1e}  {'ok' if r.get('passed', True) else 'WRONG'}")
EOF
echo "done $(elapsed)"
