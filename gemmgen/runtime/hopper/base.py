"""What every Hopper kernel's launches share: the parameter block the configuration declares,
at the offsets the cubin's parameter info gives, and the operand numbering of each call kind."""
from __future__ import annotations

from ..recipe import Launcher
from ..tma import ParamPacker, param_layout

NO_MAP = bytes(128)
"""The parameter of a tensor map the kernel does not read."""
FP8_OPERANDS = ("A", "B", "D", "bias", "scale_a", "scale_b")
"""Operand numbers of an FP8 recipe (its patches name them by position)."""
FP8_ORDER = tuple(range(len(FP8_OPERANDS)))
GROUPED_OPERANDS = ("A", "B", "C", "offs")
"""Operand numbers of a grouped recipe: 0 A, 1 B, 2 C, 3 the offsets (or counts)."""
GROUPED_MODES = {"offs": 0, "masked": 1}


class HopperLaunch(Launcher):
    """What every Hopper kernel's launches share: the parameter block the configuration
    declares, at the offsets the cubin's parameter info gives (``gemmgen.runtime.tma``)."""

    def __init__(self, kernel):
        super().__init__(kernel)
        layout = param_layout(kernel.cubin, self.config.name)
        # the parameters as the config declares them (its template writes the same list)
        self._packer = ParamPacker(layout, tuple(p.kind for p in self.config.params()))
        self._offsets = layout.offsets


def split_label(split_k: int, split: int, tiles: int, how: str = "") -> str:
    """A recipe's path for a split-K of ``split_k`` slices (``how``: " inline") that splits
    ``split`` of a launch's ``tiles`` tiles: all of them, the last ones, or none (whole
    waves)."""
    head = f"split-K {split_k}{how}"
    return (head if split == tiles else f"{head} on the last {split} of {tiles} tiles" if split
            else f"{head}: whole waves, none split")
