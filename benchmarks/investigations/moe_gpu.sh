#!/usr/bin/env bash
# Grouped GEMM (mixture-of-experts) on the GPU, in one go, under 9 minutes: the GPU tests of
# the grouped kernels, the moe suite (gemmgen.grouped_gemm beside torch._grouped_mm and a loop of
# torch.matmul) with the issue's bars, and the expert-MLP example.
# Usage on the GPU machine, from the repository root:
#   source .whl/install.sh && bash benchmarks/investigations/moe_gpu.sh
# Writes into $OUT (default /tmp/gemmgen-out): env.txt, tests.txt, moe_<GPU>.json/.png,
# suite.txt, bars.txt, moe_mlp_*.json/.txt. QUICK=1 runs the suite's [quick] subset only;
# TUNE=1 adds gemmgen tune --groups on one shape (about 2 more minutes: then use QUICK=1).
set -uo pipefail
OUT=${OUT:-/tmp/gemmgen-out}; mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"   # this checkout's gemmgen
start=$(date +%s)
step() { echo "== $1 ($(( $(date +%s) - start )) s)" | tee -a "$OUT/log.txt"; }

step "environment"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, gemmgen, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gemmgen', gemmgen.__version__, gemmgen.__file__); print('torch._grouped_mm:', hasattr(torch, '_grouped_mm'))"
  git rev-parse HEAD 2>/dev/null; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

step "GPU tests of the grouped kernels (correctness first)"
timeout 170 python3 -m pytest -q --maxfail=15 -p no:cacheprovider -m gpu tests/test_gpu_grouped.py \
    > "$OUT/tests.txt" 2>&1
echo "tests exit $?" | tee -a "$OUT/log.txt"
tail -n 25 "$OUT/tests.txt"

step "moe suite"
quick=(); [ "${QUICK:-0}" = 1 ] && quick=(--quick)
timeout 270 python3 benchmarks/run.py moe ${quick[@]+"${quick[@]}"} --max-minutes 3.5 --results-dir "$OUT" \
    > "$OUT/suite.txt" 2>&1
echo "suite exit $?" | tee -a "$OUT/log.txt"
tail -n 50 "$OUT/suite.txt"
results=$(ls -t "$OUT"/moe_*.json 2>/dev/null | head -n 1)
if [ -n "$results" ]; then
  python3 -m gemmgen.tune.suite_moe "$results" | tee "$OUT/bars.txt"
  python3 - "$results" <<'PY' | tee -a "$OUT/bars.txt"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
print(f"{'case':<62} {'ours':>7} {'_grouped_mm':>11} {'loop':>7}  kernel")
for r in rows:
    print(f"{r['case'][:62]:<62} {r['tflops']:7.1f} {r.get('cublas_tflops') or 0:11.1f} "
          f"{r.get('loop_tflops') or 0:7.1f}  {r.get('name') or r.get('error')}")
PY
fi

step "expert-MLP example"
for args in "--model qwen3_30b_a3b --tokens 4096" "--model mixtral_8x7b --tokens 4096 --skew 0.3"; do
  name=$(echo "$args" | awk '{print $2 "_" $4}')
  timeout 45 python3 examples/moe_mlp.py $args --reps 10 --json "$OUT/moe_mlp_$name.json" \
      > "$OUT/moe_mlp_$name.txt" 2>&1
  echo "example $name exit $?" | tee -a "$OUT/log.txt"
  tail -n 6 "$OUT/moe_mlp_$name.txt"
done
if [ "${TUNE:-0}" = 1 ]; then  # optional: the grouped space on Mixtral's skewed shape (~2 min)
  step "tune --groups (Mixtral-like, skew65)"
  GEMMGEN_GROUPED_DB="$OUT/grouped_tune.json" timeout 150 python3 -m gemmgen tune --m 8192 \
      --n 14336 --k 4096 --groups 8 --dtype bf16 --dist skew65 --budget 120 \
      > "$OUT/tune.txt" 2>&1
  tail -n 15 "$OUT/tune.txt"
fi
step "done"
