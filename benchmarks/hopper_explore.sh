#!/usr/bin/env bash
# One device-tool call: the GPU tests, the wgmma candidate sweep at two sizes, the call-overhead
# benchmark and compute-sanitizer on the TMA path. On the GPU machine, from the repo root:
#   source .whl/install.sh && bash benchmarks/hopper_explore.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gemmgen-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader

echo "== pytest -m gpu"
timeout 300 python3 -m pytest -q -m gpu -x -p no:cacheprovider tests/ > "$OUT/pytest_gpu.log" 2>&1
echo "exit $?"; tail -n 8 "$OUT/pytest_gpu.log"

echo "== sanitizer (memcheck) on the TMA path: 200x136x104"
for p in ${SANITIZE:-wgmma_cluster wgmma_tf32}; do
    timeout 200 compute-sanitizer --tool memcheck --print-limit 5 python3 benchmarks/probe.py "$p" 200 136 104 \
        > "$OUT/sanitize.log" 2>&1
    echo "$p exit $?: $(grep -E 'ERROR SUMMARY' "$OUT/sanitize.log") $(grep -E 'rel error' "$OUT/sanitize.log")"
done

echo "== overhead"
timeout 120 python3 benchmarks/overhead.py --json "$OUT/overhead.json" 2>&1 | tail -n 6

echo "== explore ${SIZES:-4096 8192}"
args=""
for s in ${SIZES:-4096 8192}; do args="$args --size $s"; done
timeout 420 python3 benchmarks/explore.py --family wgmma $args ${EXPLORE_ARGS:-} --json "$OUT/explore.json" 2>&1 \
    | tee "$OUT/explore.log" | tail -n 70
