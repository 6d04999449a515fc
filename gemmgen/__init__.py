"""gemmgen: generate specialized CUDA GEMM kernels from a validated tile configuration."""
__version__ = "0.1.0"

from .model import ConfigError  # noqa: E402
from .families import FAMILIES, config_from_dict  # noqa: E402
from .families.simt import SIMT_RULES, SimtConfig  # noqa: E402
from .families.wmma import WMMA_RULES, WmmaConfig  # noqa: E402
from .presets import PRESETS, get_preset  # noqa: E402
from .render import config_from_source, emit, render  # noqa: E402
from .build import Kernel, build, load  # noqa: E402
from .nvcc import BuildError  # noqa: E402
from .operands import OperandError  # noqa: E402
from .dispatch import gemm  # noqa: E402

__all__ = ["gemm", "BuildError", "Kernel", "OperandError", "build", "load", "ConfigError",
           "FAMILIES", "SimtConfig", "SIMT_RULES", "WmmaConfig", "WMMA_RULES", "PRESETS",
           "config_from_dict", "config_from_source", "emit", "get_preset", "render",
           "__version__"]
