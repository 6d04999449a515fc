"""Launching grouped kernels (the grouped family): one persistent launch per call, its tensor
maps built once per operand signature and its recipe patched with the operands' addresses (A,
B, C and the group offsets are ``Ref``s), so a repeated call, or a CUDA-graph replay, reads
the offsets on the device only.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..heuristics.grouped import grid_bound
from . import driver
from .kernel import Kernel
from .operands import OperandError
from .recipe import Launch, MapRef, Recipe, Ref, pack
from .tma import ParamPacker, encode, operand_map, param_layout

MODES = {"offs": 0, "masked": 1}
OPERANDS = ("A", "B", "C", "offs")
"""Operand numbers of a grouped recipe: 0 A, 1 B, 2 C, 3 the offsets (or counts)."""


@dataclass(frozen=True)
class GroupedProblem:
    """One grouped call as the kernel sees it (extents in elements; pointers are ints or
    ``Ref``s; strides are elements between consecutive matrices):

    - grouping "m", mode "offs": A [rows, K] (lda), B [groups] x (K x N) (ldb, stride_b), C
      [rows, N] (ldc); ``offs`` the groups' cumulative row ends.
    - grouping "m", mode "masked": A [groups] x (rows x K) (lda, stride_a), C likewise
      (stride_c); ``offs`` per-group row counts, or 0 for every row.
    - grouping "k": A (rows x K) column-major (lda), B (K x N) row-major (ldb), C [groups] x
      (rows x N) (stride_c); ``offs`` cumulative ends of the groups' rows of K.
    """

    grouping: str
    mode: str
    groups: int
    rows: int
    n: int
    k: int
    a: object
    lda: int
    b: object
    ldb: int
    c: object
    ldc: int
    offs: object
    stride_a: int = 0
    stride_b: int = 0
    stride_c: int = 0


@dataclass
class GroupedKernel(Kernel):
    """A grouped-family kernel: ``launches(problem)`` gives the ``Recipe`` of a
    ``GroupedProblem`` (one launch; none when there is nothing to write). ``grouped_gemm``
    (``gemmgen.runtime.grouped_api``) checks operands and runs it."""

    def __post_init__(self):
        super().__post_init__()
        layout = param_layout(self.cubin, self.config.name)
        self._packer = ParamPacker(layout, tuple(p.kind for p in self.config.params()))
        self._offsets = layout.offsets
        env = self.config.env()
        self._a_box = (env["A_BOX_INNER"], env["A_BOX_ROWS"])
        self._b_box = (env["B_BOX_INNER"], env["B_BOX_ROWS"])
        self._c_box = (env["C_CHUNK"], env["CONSUMER_ROWS"])

    def maps(self, p: GroupedProblem) -> tuple:
        """The ``MapSpec``s of A, B and C for problem ``p`` (see ``GroupedProblem``)."""
        cfg = self.config
        many = p.mode == "masked" or p.grouping == "k"
        if p.grouping == "k":
            a = operand_map(cfg.dtype, int(p.a), p.rows, p.k, p.lda, True, 1, 0, *self._a_box,
                            128)
            b = operand_map(cfg.dtype, int(p.b), p.k, p.n, p.ldb, False, 1, 0, *self._b_box,
                            128)
        else:
            a = operand_map(cfg.dtype, int(p.a), p.rows, p.k, p.lda, False,
                            p.groups if many else 1, p.stride_a if many else 0, *self._a_box,
                            128)
            b = operand_map(cfg.dtype, int(p.b), p.k, p.n, p.ldb, not cfg.b_mn_major, p.groups,
                            p.stride_b, *self._b_box, 128)
        c = operand_map(cfg.out, int(p.c), p.rows, p.n, p.ldc, False, p.groups if many else 1,
                        p.stride_c if many else 0, *self._c_box, 128)
        return a, b, c

    def problems(self, p: GroupedProblem) -> list[str]:
        """Why TMA or the epilogue cannot take problem ``p``'s operands (empty when they can):
        16-byte aligned addresses, leading dimensions and group strides, and C's rows in
        whole 16-byte units."""
        out = []
        for name, spec in zip(("A", "B", "C"), self.maps(p)):
            out += spec.problems(name)
        if p.grouping == "m" and p.groups > 1 and not p.stride_b:
            out.append("B's group stride is 0 (an expanded tensor): each group needs its own "
                       "matrix (pass B.contiguous())")
        item = 16 // (4 if self.config.out == "fp32" else 2)
        if p.n % item:
            out.append(f"C's rows hold N = {p.n} values, not a multiple of {item} (16 bytes)")
        return out

    def grid(self, p: GroupedProblem, sms: int) -> tuple[int, int, int]:
        """At most one CTA per SM, no more than an upper bound of the tiles."""
        bound = grid_bound(self.config, p.groups, p.rows, p.n, p.mode == "masked")
        return max(1, min(sms, bound)), 1, 1

    def launches(self, p: GroupedProblem, device: int | None = None) -> Recipe:
        """The ``Recipe`` of problem ``p`` on ``device``: one launch of the persistent kernel
        (none when C is empty). Raises ``OperandError`` naming an operand TMA cannot read."""
        dev = driver.current_device() if device is None else device
        bad = self.problems(p)
        if bad:
            raise OperandError("; ".join(bad))
        if not (p.rows and p.n and p.groups) or (p.grouping == "m" and p.mode == "offs"
                                                 and not p.rows):
            return Recipe(dev, [], "grouped: nothing to write")
        maps = [_encoded(spec, name, ptr) for spec, name, ptr in
                zip(self.maps(p), ("A", "B", "C"), (p.a, p.b, p.c))]
        params, patches = pack(self._packer.struct, self._offsets,
                               (*maps, p.offs, p.groups, p.rows, p.n, p.k, MODES[p.mode],
                                p.c, p.ldc, p.stride_c))
        run = Launch(self.function(dev), self.grid(p, driver.device_attribute(dev, "sms")),
                     (self.config.threads, 1, 1), params, patches)
        return Recipe(dev, [run], f"grouped {p.grouping} {p.mode}")

    def launch_raw(self, *args, **kwargs) -> None:
        raise TypeError(f"{self.name} is a grouped kernel: run it with "
                        f"gemmgen.grouped_gemm(..., config=kernel.config)")


def _encoded(spec, name: str, ptr):
    data = encode(spec, name)
    return MapRef(data, ptr) if isinstance(ptr, Ref) else data


__all__ = ["OPERANDS", "GroupedKernel", "GroupedProblem"]
