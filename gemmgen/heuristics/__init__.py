"""Which kernel runs a problem, without a GPU: the tuning database (``tunedb``), the choice of a
family and preset (``select``), the shape rules that fit the preset to M, N and K
(``shapes``) and make its ring as deep as shared memory allows (``ring``), the cost model of
the slower paths (``cost``) and ``explain``. Imports only ``gemmgen.model``.
"""
