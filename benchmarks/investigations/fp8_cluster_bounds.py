"""The fp8 family's blockwise kernel with a 1 x 2 cluster (A multicast across two CTAs along
N) on N = 384: three column tiles make two cluster tiles, so the last cluster's second CTA
starts at column 384, past N. It loads zeros and stores nothing; its B scale block index must
still stay inside scale_b. Run under compute-sanitizer with PyTorch's caching allocator off,
so that scale_b (3 x 4 floats, 48 bytes) is an allocation of its own:

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck \\
        python3 benchmarks/investigations/fp8_cluster_bounds.py

Prints the kernel and its relative error against float64 on the dequantized inputs (output
NaN-poisoned first); memcheck reports any read past scale_b."""
import torch

import gemmgen
import gemmgen.torch as gt
from gemmgen import PRESETS

cfg = PRESETS["fp8_block"].config.replace(cluster_n=2)
kernel = gemmgen.build(cfg)
m, n, k = 256, 384, 512
x, w = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda")
a, sa = gt.quantize(x, (1, 128))
q, sw = gt.quantize(w, (128, 128))
ref = gt.dequantize(a, sa, (1, 128)).double() @ gt.dequantize(q, sw, (128, 128)).double().t()
d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
kernel(a, q.t(), d, scale_a=sa, scale_b=sw.t())      # scale_b: a (K/128, N/128) view
torch.cuda.synchronize()
err = float(torch.linalg.norm(d.double() - ref) / torch.linalg.norm(ref))
print(cfg.name, "rel error", err, "finite", bool(torch.isfinite(d).all()))
