"""gemmgen: generate specialized CUDA GEMM kernels from a validated tile configuration.

The package is built in stages, each importing only the stages below it:
``model`` (configurations, rules, families, presets, search space) -> ``heuristics`` (which
kernel for a problem) and ``codegen`` (Jinja rendering) -> ``compile`` (nvcc, cubin cache) ->
``runtime`` (loading, launching, ``gemm``, ``grouped_gemm``) -> ``tune`` (verify, bench, tune) -> ``cli``;
``gemmgen.torch`` sits beside the command line, over the runtime.
"""
from ._version import __version__
from .codegen.render import config_from_source, emit, render
from .compile.nvcc import BuildError
from .model.config import ConfigError
from .model.families import FAMILIES, config_from_dict
from .model.families.simt import SIMT_RULES, SimtConfig
from .model.families.wmma import WMMA_RULES, WmmaConfig
from .model.presets import PRESETS, get_preset
from .runtime.api import gemm
from .runtime.build import build, load
from .runtime.grouped import grouped_gemm
from .runtime.kernel import Kernel
from .runtime.operands import OperandError

__all__ = ["gemm", "grouped_gemm", "BuildError", "Kernel", "OperandError", "build", "load", "ConfigError",
           "FAMILIES", "SimtConfig", "SIMT_RULES", "WmmaConfig", "WMMA_RULES", "PRESETS",
           "config_from_dict", "config_from_source", "emit", "get_preset", "render",
           "__version__"]
