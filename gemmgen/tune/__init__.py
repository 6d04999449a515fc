"""Measuring: float64 verification (``verify``), CUDA-event benchmarks beside cuBLAS (``bench``),
the tuner (``search``, with worker processes in ``measure``), its reports (``report``) and
results files (``results``).
"""
