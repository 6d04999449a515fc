#!/usr/bin/env bash
# FP8 on the GPU, one session of under 9 minutes, from the repository root on an H100/H200:
#   source .whl/install.sh && bash benchmarks/investigations/fp8_gpu.sh
# 0. a smoke check of every fp8 preset in its own process (a hung kernel is left out after);
# 1. the FP8 GPU tests (tests/test_gpu_fp8.py: every preset on odd shapes, every scaling and
#    accumulation mode, packs, split-K, quantization, graph capture, the error beside
#    torch._scaled_mm at K = 16384) under `timeout`;
# 2. the fp8 benchmark suite (benchmarks/suites/fp8.toml) beside torch._scaled_mm, with the copy
#    bandwidth of the same run, bounded by the time left;
# 3. with time to spare, `gemmgen tune` of the blockwise bar shape into a database under $OUT.
# Everything goes to $OUT (default /tmp/gemmgen-out): fp8_env.txt, fp8_smoke.txt, fp8_tests.txt (+ .xml),
# fp8_errors.json, fp8_suite.txt, results/fp8_<GPU>.json and .png, fp8_bars.txt (the bars, read
# from the suite's results), fp8_tune.txt and fp8_tune.json. Nothing is written into the
# checkout: results are committed only after reading them.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gemmgen-out}
mkdir -p "$OUT/results"
T0=$(date +%s)
LIMIT=${LIMIT:-525}                                    # seconds for the whole session
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
export GEMMGEN_CACHE_DIR=${GEMMGEN_CACHE_DIR:-/tmp/gemmgen-fp8-cache}  # tests and suite share cubins
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! python3 -c "import pycuda" 2>/dev/null && [[ -f .whl/install.sh ]]; then
    source .whl/install.sh
fi

{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv
  nvcc --version | tail -1
  python3 -c "import torch, pycuda; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| pycuda', pycuda.VERSION)"
  git log --oneline -1; } > "$OUT/fp8_env.txt" 2>&1
cat "$OUT/fp8_env.txt"

# 0. smoke: every fp8 preset (compiled at once first) verified in its own process under
#    `timeout`, so a kernel that hangs costs 60 s and is left out of the steps below
python3 -c "
from gemmgen.compile.cache import compile_many
from gemmgen.model.families import fallback_config
from gemmgen.model.presets import PRESETS
cfgs = [p.config for p in PRESETS.values() if p.config.family == 'fp8']
cfgs += [fallback_config(c) for c in cfgs if c.store == 'tma']
bad = [str(d)[:300] for d in compile_many(cfgs, 'sm_90') if isinstance(d, Exception)]
print('compiled', len(cfgs), 'fp8 kernels;', 'errors:', bad or 'none')" > "$OUT/fp8_smoke.txt" 2>&1
hung=()
for p in $(python3 -m gemmgen list --names | grep '^fp8_'); do
    timeout 60 python3 -m gemmgen verify --preset "$p" > "$OUT/.smoke_$p.txt" 2>&1
    rc=$?
    echo "$p: exit $rc$([[ $rc -eq 124 ]] && echo ' (TIMEOUT: hung?)')" >> "$OUT/fp8_smoke.txt"
    grep -E "FAIL|passed" "$OUT/.smoke_$p.txt" | head -8 >> "$OUT/fp8_smoke.txt"
    [[ $rc -eq 124 ]] && hung+=("$p")
    rm -f "$OUT/.smoke_$p.txt"
done
cat "$OUT/fp8_smoke.txt"
deselect=()
for p in "${hung[@]}"; do deselect+=(--deselect "tests/test_gpu_fp8.py::test_preset_on_odd_shapes[$p]"); done
suite=benchmarks/suites/fp8.toml
if [[ ${#hung[@]} -gt 0 ]]; then  # the suite without the presets that hung
    suite="$OUT/fp8_without_hung.toml"
    cp benchmarks/suites/llm.toml "$OUT/llm.toml"         # its models = "llm"
    python3 - "$suite" "${hung[@]}" <<'PY'
import re, sys
text = open("benchmarks/suites/fp8.toml").read()
for name in sys.argv[2:]:
    text = re.sub(r'\s*"%s",?' % name, "", text)
open(sys.argv[1], "w").write(text)
PY
fi

# 1. GPU tests (the session's kernels compile in parallel in their fixtures)
GEMMGEN_FP8_ERRORS="$OUT/fp8_errors.json" timeout 300 python3 -m pytest -q -m gpu -rs \
    tests/test_gpu_fp8.py "${deselect[@]}" --junitxml="$OUT/fp8_tests.xml" \
    > "$OUT/fp8_tests.txt" 2>&1
echo "tests exit $? after $(( $(date +%s) - T0 )) s" >> "$OUT/fp8_tests.txt"
tail -25 "$OUT/fp8_tests.txt"

# 2. the fp8 suite, full if there is time, else --quick (no new problem after the deadline)
budget=$(( $(left) - 25 ))
if [[ $budget -gt 240 ]]; then quick=(); else quick=(--quick); fi
if [[ $budget -gt 60 ]]; then
    minutes=$(python3 -c "print(round(($budget - 45) / 60, 2))")
    timeout "$budget" python3 benchmarks/run.py "$suite" "${quick[@]}" --max-minutes "$minutes" \
        --results-dir "$OUT/results" > "$OUT/fp8_suite.txt" 2>&1
    echo "suite exit $? after $(( $(date +%s) - T0 )) s" >> "$OUT/fp8_suite.txt"
else
    echo "suite skipped: $budget s left" > "$OUT/fp8_suite.txt"
fi
tail -12 "$OUT/fp8_suite.txt"

# the bars, from the suite's results
python3 - "$OUT" > "$OUT/fp8_bars.txt" 2>&1 <<'PY'
import glob, json, sys
files = glob.glob(f"{sys.argv[1]}/results/fp8_*.json")
if not files:
    sys.exit("no fp8 results file")
doc = json.load(open(files[0]))
rows = [r for r in doc["rows"] if r.get("tflops")]
print(f"{doc['gpu']}, {doc['date']}, commit {doc['git_commit'][:7]}, copy bandwidth "
      f"{rows[0]['copy_gbps'] if rows else '?'} GB/s; complete: {doc['complete']}")
bars = [((4096, 4096, 4096), "tensor", "fast", "ratio >= 1.05"), ((4096, 4096, 4096), "row", "fast", "ratio >= 1.05"),
        ((8192, 8192, 8192), "tensor", "fast", "ratio >= 1.05"), ((8192, 8192, 8192), "row", "fast", "ratio >= 1.05"),
        ((4096, 7168, 16384), "block", "promoted", ">= 1400 TFLOP/s and ratio >= 1.0"),
        ((64, 2112, 7168), "block", "promoted", ">= 85% of copy"),
        ((128, 7168, 16384), "block", "promoted", ">= 85% of copy")]
print(f"{'kernel':<22} {'shape':<17} {'scaling':<8} {'accum':<9} {'TFLOP/s':>8} {'torch':>8} "
      f"{'ratio':>6} {'GB/s':>7} {'%copy':>6} {'err':>9} {'torch err':>9}  bar")
for r in sorted(rows, key=lambda r: (r["M"], r["N"], r["K"], r.get("scaling", ""), r["kernel"])):
    shape = (r["M"], r["N"], r["K"])
    bar = next((b[3] for b in bars if b[0] == shape and b[1] == r.get("scaling")
                and b[2] == r.get("accum")), "")
    if not bar and shape not in [b[0] for b in bars]:
        continue
    fmt = lambda v, f: format(v, f) if isinstance(v, (int, float)) else "-"
    print(f"{r['kernel']:<22} {'x'.join(map(str, shape)):<17} {r.get('scaling', ''):<8} "
          f"{r.get('accum', ''):<9} {fmt(r['tflops'], '8.1f')} {fmt(r.get('cublas_tflops'), '8.1f')} "
          f"{fmt(r.get('ratio'), '6.3f')} {fmt(r.get('gbps'), '7.0f')} {fmt(r.get('pct_copy'), '6.1f')} "
          f"{fmt(r.get('rel_error'), '9.2e')} {fmt(r.get('cublas_rel_error'), '9.2e')}  {bar}")
failed = [r for r in doc["rows"] if not r["passed"]]
print(f"{len(doc['rows'])} rows, {len(failed)} failed")
for r in failed[:30]:
    print("FAIL", r.get("case"), r.get("error") or f"rel_error {r.get('rel_error')}")
PY
cat "$OUT/fp8_bars.txt"

# 3. tune the blockwise bar shape with what is left
budget=$(( $(left) - 15 ))
if [[ $budget -gt 90 ]]; then
    timeout "$budget" python3 -m gemmgen tune --dtype e4m3 --scaling block --m 4096 --n 7168 \
        --k 16384 --max-configs 16 --budget $(( budget - 40 )) --db "$OUT/fp8_tune.json" \
        > "$OUT/fp8_tune.txt" 2>&1
    echo "tune exit $? after $(( $(date +%s) - T0 )) s" >> "$OUT/fp8_tune.txt"
    tail -14 "$OUT/fp8_tune.txt"
else
    echo "tune skipped: $budget s left" > "$OUT/fp8_tune.txt"
fi
echo "total $(( $(date +%s) - T0 )) s; outputs in $OUT"
