"""The relative error the GPU tests check PyTorch outputs with: ||out - ref|| / ||ref||
(Frobenius) in float64, infinite where ``out`` holds a NaN or an infinity (so NaN never
passes)."""
import math


def rel_error(out, ref) -> float:
    """||out - ref|| / ||ref|| of two torch tensors, in float64; inf if ``out`` is not all
    finite."""
    import torch
    out = out.double()
    if not bool(torch.isfinite(out).all()):
        return math.inf
    return float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref))
