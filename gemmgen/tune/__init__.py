"""Measuring: float64 verification (``verify``), CUDA-event benchmarks (``bench``) beside the
baseline (``baseline``: F.linear / torch.matmul, else cublasGemmEx through CuPy),
the tuner (``search``, with worker processes in ``measure``), its reports (``report``) and
results files (``results``).
"""
