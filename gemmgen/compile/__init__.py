"""Compiling: nvcc and ptxas reports, SASS (``nvcc``), and the on-disk cubin cache
(``cache``). Imports ``gemmgen.codegen`` and ``gemmgen.model``.
"""
