#!/usr/bin/env bash
# One device call for the mma family (issue 13): compile, smoke, verify, bench the ladder.
# On the GPU machine, from the repo root:   bash benchmarks/gpu_mma.sh
# Every step runs under `timeout` (60 + 100 + 100 + 45 + 135 s = 7 min at worst), so a kernel
# that hangs costs its limit, not the call. The bench runs before pytest so that a slow test
# run cannot cost the numbers. Logs and JSON go to $OUT; a summary is printed last.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gemmgen-out}
mkdir -p "$OUT"
SIZE=${SIZE:-4096}
LADDER="mma_base mma_vec mma_bfco mma_ldgsts mma_reg mma_prefetch mma_ldmatrix mma_swizzle mma_epilogue"
TUNED="mma_tuned mma_tuned_bf16 mma_tuned_tf32 mma_fp16 mma_bf16 mma_tf32"
WGMMA="wgmma_tma_store wgmma_bf16 wgmma_tf32"   # the Hopper family's defaults, same run
echo "commit ${GEMMGEN_GIT_COMMIT:-unknown}" | tee "$OUT/commit.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader \
    | tee "$OUT/gpu.txt"

echo "== emit three tuned variants; compile every preset (parallel, into the cubin cache)"
python3 -m gemmgen emit --family mma --bm 128 --bn 256 --bk 64 --wm 64 --wn 64 --stages 3 \
    --out fp16 -o "$OUT/mma_tuned_bk64.cu" > /dev/null
python3 -m gemmgen emit --family mma --bm 256 --bn 128 --bk 32 --wm 64 --wn 64 --stages 4 \
    --out fp16 -o "$OUT/mma_tuned_256x128.cu" > /dev/null
python3 -m gemmgen emit --family mma --dtype tf32 --bm 128 --bn 256 --bk 16 --wm 64 --wn 64 \
    --stages 4 --layout rcr -o "$OUT/mma_tuned_tf32_rcr.cu" > /dev/null  # K-major B: ldmatrix
timeout 60 python3 - $LADDER $TUNED $WGMMA <<'EOF' 2>&1 | tee "$OUT/compile.log"
import sys, time
from gemmgen import PRESETS
from gemmgen.compile.cache import compile_many
t = time.time()
names = sys.argv[1:]
for name, res in zip(names, compile_many([PRESETS[n].config for n in names])):
    print(name, f"ok {res[1]}" if isinstance(res, tuple) else f"FAIL {str(res)[-600:]}")
print(f"{time.time() - t:.1f} s")
EOF

echo "== smoke: each mma preset in its own process (ragged, alpha/beta, batch, 4096^3)"
timeout 100 python3 benchmarks/smoke.py --family mma-presets --jobs 6 --limit 60 \
    2>&1 | tee "$OUT/smoke.log"
passed=$(awk '$3 == "ok" {printf " %s", $1}' "$OUT/smoke.log")  # lines even if cut short
echo "smoke passed:$passed"

echo "== bench ${SIZE}^3: ladder (fp16), tuned presets (fp16, bf16, tf32), wgmma, cuBLAS"
args=""
for p in $LADDER $TUNED; do
    case " $passed " in *" $p "*) args="$args --preset $p";; esac
done
for p in $WGMMA; do args="$args --preset $p"; done
timeout 100 python3 -m gemmgen bench $args --size "$SIZE" --json "$OUT/bench_mma.json" \
    2> "$OUT/bench.err" | tee "$OUT/bench.log"
echo "bench exit $?"; tail -n 5 "$OUT/bench.err"
echo "== bench the tuned variants (emitted files; verified like the presets)"
timeout 45 python3 -m gemmgen bench "$OUT/mma_tuned_bk64.cu" "$OUT/mma_tuned_256x128.cu" \
    "$OUT/mma_tuned_tf32_rcr.cu" \
    --preset mma_tuned --size "$SIZE" --json "$OUT/bench_mma_variants.json" \
    2> "$OUT/bench_variants.err" | tee "$OUT/bench_variants.log"
echo "variants exit $?"; tail -n 5 "$OUT/bench_variants.err"

echo "== pytest -m gpu tests/test_gpu_mma.py"
timeout 135 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_mma.py \
    > "$OUT/pytest_gpu_mma.log" 2>&1
echo "pytest exit $?"; tail -n 15 "$OUT/pytest_gpu_mma.log"

echo "== summary"
grep -E "FAIL" "$OUT/compile.log" | head -n 5
grep -vE "^PASSED" "$OUT/smoke.log" | grep -vE " ok " | head -n 10
grep -E "passed|failed" "$OUT/pytest_gpu_mma.log" | tail -n 1
