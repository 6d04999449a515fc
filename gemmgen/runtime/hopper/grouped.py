"""The grouped family's launches: every group of a grouped call in one persistent launch, its
tensor maps built once per operand signature and its recipe patched with the operands'
addresses (A, B, C and the group offsets are ``Ref``s), so a repeated call, or a CUDA-graph
replay, reads the offsets on the device only."""
from __future__ import annotations

from ...heuristics.grouped import grid_bound
from .. import driver
from ..operands import OperandError
from ..recipe import KernelArgs, Launch, Recipe, pack
from ..tma import encoded, operand_map
from .base import GROUPED_MODES, HopperLaunch


class GroupedLaunch(HopperLaunch):
    """The grouped family's calls: ``launches(args)`` gives the ``Recipe`` of one grouped call
    (one launch; none when there is nothing to write). ``grouped_gemm``
    (``gemmgen.runtime.grouped``) checks operands and runs it. What ``args``
    (``KernelArgs``) holds, by grouping (extents in elements; strides are elements between
    consecutive matrices):

    - grouping "m", mode "offs": A [M, K] (lda), B [groups] x (K x N) (ldb, stride_b), C
      [M, N] (ldc); ``offs`` the groups' cumulative row ends.
    - grouping "m", mode "masked": A [groups] x (M x K) (lda, stride_a), C likewise
      (stride_c); ``offs`` per-group row counts, or 0 for every row.
    - grouping "k": A (M x K) column-major (lda), B (K x N) row-major (ldb), C [groups] x
      (M x N) (stride_c); ``offs`` cumulative ends of the groups' rows of K.
    """

    def __init__(self, kernel):
        super().__init__(kernel)
        env = self.config.env()
        self._a_box = (env["A_BOX_INNER"], env["A_BOX_ROWS"])
        self._b_box = (env["B_BOX_INNER"], env["B_BOX_ROWS"])
        self._c_box = (env["C_CHUNK"], env["CONSUMER_ROWS"])

    def maps(self, args: KernelArgs) -> tuple:
        """The ``MapSpec``s of A, B and C for ``args`` (see ``KernelArgs``)."""
        cfg, x = self.config, args
        many = x.mode == "masked" or x.grouping == "k"
        if x.grouping == "k":
            a = operand_map(cfg.dtype, int(x.a), x.m, x.k, x.lda, True, 1, 0, *self._a_box, 128)
            b = operand_map(cfg.dtype, int(x.b), x.k, x.n, x.ldb, False, 1, 0, *self._b_box, 128)
        else:
            a = operand_map(cfg.dtype, int(x.a), x.m, x.k, x.lda, False, x.groups if many else 1,
                            x.stride_a if many else 0, *self._a_box, 128)
            b = operand_map(cfg.dtype, int(x.b), x.k, x.n, x.ldb, not cfg.b_mn_major, x.groups,
                            x.stride_b, *self._b_box, 128)
        c = operand_map(cfg.out, int(x.c), x.m, x.n, x.ldc, False, x.groups if many else 1,
                        x.stride_c if many else 0, *self._c_box, 128)
        return a, b, c

    def problems(self, args: KernelArgs) -> list[str]:
        """Why TMA or the epilogue cannot take the operands of ``args`` (empty when they can):
        16-byte aligned addresses, leading dimensions and group strides, and C's rows in
        whole 16-byte units."""
        out = []
        for name, spec in zip(("A", "B", "C"), self.maps(args)):
            out += spec.problems(name)
        if args.grouping == "m" and args.groups > 1 and not args.stride_b:
            out.append("B's group stride is 0 (an expanded tensor): each group needs its own "
                       "matrix (pass B.contiguous())")
        item = 16 // (4 if self.config.out == "fp32" else 2)
        if args.n % item:
            out.append(f"C's rows hold N = {args.n} values, not a multiple of {item} (16 bytes)")
        return out

    def grid(self, args: KernelArgs, sms: int) -> tuple[int, int, int]:
        """At most one CTA per SM, no more than an upper bound of the tiles."""
        bound = grid_bound(self.config, args.groups, args.m, args.n, args.mode == "masked")
        return max(1, min(sms, bound)), 1, 1

    def launches(self, args: KernelArgs, dev: int) -> Recipe:
        """One launch of the persistent kernel (none when C is empty). Raises
        ``OperandError`` naming an operand TMA cannot read."""
        bad = self.problems(args)
        if bad:
            raise OperandError("; ".join(bad))
        if not (args.m and args.n and args.groups):
            return Recipe(dev, [], "grouped: nothing to write")
        maps = [encoded(spec, name, ptr) for spec, name, ptr in
                zip(self.maps(args), ("A", "B", "C"), (args.a, args.b, args.c))]
        scales = ()
        if self.config.fp8:  # the FP8 axis: block scales of A and of each expert's B
            sa, sb = args.scale_a, args.scale_b
            scales = (sa.ptr, sa.s0, sa.s1, sa.s2, sb.ptr, sb.s0, sb.s1, sb.s2)
        params, patches = pack(self._packer.struct, self._offsets, (
            *maps, args.offs, args.groups, args.m, args.n, args.k, GROUPED_MODES[args.mode], args.c,
            args.ldc, args.stride_c, *scales))
        run = Launch(self.function(dev), self.grid(args, driver.device_attribute(dev, "sms")),
                     (self.config.threads, 1, 1), params, patches)
        return Recipe(dev, [run], f"grouped {args.grouping} {args.mode}")
