#!/usr/bin/env bash
# One GPU session's work in one command (device tool): GPU tests, verify, bench.
# Usage on the GPU machine, from the repo root:  source .whl/install.sh && bash benchmarks/gpu_run.sh [bench args]
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gemmgen-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
python3 -m pytest -q -m gpu tests/test_gpu.py 2>&1 | tee "$OUT/pytest_gpu.log" | tail -n 15
python3 -m gemmgen verify --json "$OUT/verify.json" > "$OUT/verify.log" 2>&1; echo "verify exit $?"
tail -n 1 "$OUT/verify.log"; grep FAIL "$OUT/verify.log" | head -n 20
python3 -m gemmgen bench --json "$OUT/results.json" --plot "$OUT/plot.png" "$@" 2>/dev/null | tee "$OUT/bench.log"
