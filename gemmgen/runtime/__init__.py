"""Running kernels: the device (``device``), the driver API for raw streams (``driver``), loading
cubins into ``Kernel`` objects (``build``, ``kernel``), TMA maps and the Hopper launches
(``tma``, ``hopper``), operand checks (``operands``), launches (``launch``), launch plans
(``plans``) and ``gemm`` (``api``). PyCUDA is imported only when a kernel is loaded.
"""
