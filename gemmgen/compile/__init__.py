"""Compiling: nvcc and ptxas reports, SASS (``nvcc``), the on-disk cubin cache (``cache``)
and its private, checked files (``store``). Imports ``gemmgen.codegen`` and ``gemmgen.model``.
"""
