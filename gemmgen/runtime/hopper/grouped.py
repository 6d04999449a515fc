"""The grouped family's launches: every group of a grouped call in one persistent launch (on the
FP8 axis, after a copy of A's block scales into K-contiguous rows where that pays), its tensor
maps built once per operand signature and its recipe patched with the operands' addresses (A,
B, C, the group offsets and the scales are ``Ref``s), so a repeated call, or a CUDA-graph
replay, reads the offsets on the device only."""
from __future__ import annotations

from ...heuristics.grouped import grid_bound
from .. import driver
from ..operands import OperandError
from ..operands.scales import BLOCK
from ..recipe import KernelArgs, Launch, Recipe, Scale, pack
from ..tma import encoded, operand_map
from .base import GROUPED_MODES, HopperLaunch
from .fp8 import queue_transpose

SCALES_MIN_FLOP = 1.5e11
"""A grouped FP8 call copies M-major block scales of A into K-contiguous rows first (the
module's ``<name>_scales``) only when it does at least this many FLOP (2 x rows x N x K). The
K-contiguous scales let each consumer thread load a window of four K blocks' scales in one
16-byte load per row instead of four scalar loads: on an H200 the call, copy included, ran
about 2% faster on DeepGEMM's 8 x 4096 problem (N 7168, K 2048, 9.6e11 FLOP;
benchmarks/results/grouped_fp8_scale_layout_NVIDIA_H200.json). The copy is one more launch of
a few microseconds, more than 2% of a call below about 1.5e11 FLOP (150 us at 1000 TFLOP/s)."""


class GroupedLaunch(HopperLaunch):
    """The grouped family's calls: ``launches(args)`` gives the ``Recipe`` of one grouped call
    (the GEMM's launch, after the copy of A's scales where ``transposes_scales``; none when
    there is nothing to write). ``grouped_gemm``
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
        """One launch of the persistent kernel (none when C is empty), after ``<name>_scales``
        where ``transposes_scales``. Raises ``OperandError`` naming an operand TMA cannot
        read."""
        bad = self.problems(args)
        if bad:
            raise OperandError("; ".join(bad))
        if not (args.m and args.n and args.groups):
            return Recipe(dev, [], "grouped: nothing to write")
        maps = [encoded(spec, name, ptr) for spec, name, ptr in
                zip(self.maps(args), ("A", "B", "C"), (args.a, args.b, args.c))]
        scales, before, work, path = (), [], [], f"grouped {args.grouping} {args.mode}"
        if self.config.fp8:  # the FP8 axis: block scales of A and of each expert's B
            sa, sb = args.scale_a, args.scale_b
            if self.transposes_scales(args):
                sa = self._scales_k_major(dev, before, work, args)
                path += " + scales K-contiguous"
            scales = (sa.ptr, sa.s0, sa.s1, sa.s2, sb.ptr, sb.s0, sb.s1, sb.s2)
        params, patches = pack(self._packer.struct, self._offsets, (
            *maps, args.offs, args.groups, args.m, args.n, args.k, GROUPED_MODES[args.mode], args.c,
            args.ldc, args.stride_c, *scales))
        run = Launch(self.function(dev), self.grid(args, driver.device_attribute(dev, "sms")),
                     (self.config.threads, 1, 1), params, patches, pdl=self.config.pdl)
        return Recipe(dev, [*before, run], path, tuple(work))

    def transposes_scales(self, args: KernelArgs) -> bool:
        """Whether a call copies A's block scales into K-contiguous rows before the GEMM: an
        FP8 kernel with windows of scales (two partial sets), A 2-D with offsets, A's scales
        M-major (one row apart per row; the copy reads that layout, and other strides stay as
        the kernel reads them), B's K-contiguous in rows of whole 16-byte units (else the
        windows' 16-byte loads do not apply), at least four K blocks and ``SCALES_MIN_FLOP``
        of work."""
        cfg, sa, sb = self.config, args.scale_a, args.scale_b
        kb = -(-args.k // BLOCK)
        return (cfg.fp8 and cfg.scaling == "block" and cfg.partials == 2
                and args.mode == "offs" and sa.s0 == 1 and sa.s1 != 1
                and sb.s1 == 1 and sb.s0 % 4 == 0 and sb.s2 % 4 == 0 and kb >= 4
                and 2.0 * args.m * args.n * args.k >= SCALES_MIN_FLOP)

    def _scales_k_major(self, dev, before: list, work: list, args: KernelArgs) -> Scale:
        """Queue ``<name>_scales``: A's scales (rows x kb, element (r, c) at r * s0 + c * s1)
        into a workspace of rows of ``ceil(kb / 4) * 4`` floats; their ``Scale`` there."""
        sa, kb = args.scale_a, -(-args.k // BLOCK)
        ldd = -(-kb // 4) * 4
        buf = queue_transpose(self, dev, before, work, "scales", "A scales K-contiguous", sa.ptr,
                              (sa.s0, sa.s1), args.m, kb, ldd, 4)
        return Scale(buf, ldd, 1, 0)
