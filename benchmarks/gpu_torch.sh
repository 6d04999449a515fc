#!/usr/bin/env bash
# gemmgen inside PyTorch on the GPU (issue 14): the GPU tests of gemmgen.torch, then the GPT-2
# example twice on one fresh cubin cache (cold: nvcc compiles; warm: none), results into $OUT.
# Usage from the repo root on a GPU machine with PyTorch, transformers, PyCUDA and nvcc:
#   OUT=/some/dir bash benchmarks/gpu_torch.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-/tmp/gemmgen-torch-out}
mkdir -p "$OUT"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | tr -c 'A-Za-z0-9\n' '_' | sed 's/_*$//')
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/nvidia_smi.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee "$OUT/versions.txt"

echo "== pytest -m gpu tests/test_gpu_torch.py"
timeout 180 python3 -m pytest -q -m gpu tests/test_gpu_torch.py --durations=10 > "$OUT/pytest_gpu_torch.log" 2>&1
echo "pytest exit $?"; tail -n 25 "$OUT/pytest_gpu_torch.log"

# One fresh cache directory for both runs, so the first run shows the compiles and the second none.
export GEMMGEN_CACHE_DIR=$(mktemp -d /tmp/gemmgen-gpt2-cache-XXXX)
echo "== train_gpt2 (cold cache, 40 steps, no torch.compile)"
timeout 110 python3 examples/train_gpt2.py --steps 40 --no-compile \
    --out "$OUT/torch_gpt2_cold_${GPU}.json" > "$OUT/train_gpt2_cold.log" 2>&1
echo "exit $?"; tail -n 30 "$OUT/train_gpt2_cold.log"
echo "== train_gpt2 (warm cache, 200 steps, torch.compile)"
timeout 170 python3 examples/train_gpt2.py --steps 200 \
    --out "$OUT/torch_gpt2_${GPU}.json" > "$OUT/train_gpt2.log" 2>&1
echo "exit $?"; tail -n 40 "$OUT/train_gpt2.log"
