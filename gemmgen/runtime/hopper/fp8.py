"""The fp8 family's launches: FP8 A and B with tensor, row or blockwise scales, transposing packs
into K-major rows, split-K reduced in the kernel, and the fallback for a D a TMA store cannot
take."""
from __future__ import annotations

import struct

from .. import driver
from ..recipe import GRID_LIMIT_YZ, KernelArgs, Launch, Recipe, field_offsets, pack, workspace
from ..tma import MapSpec, encoded, operand_map
from .base import NO_MAP, HopperLaunch, split_label


class Fp8Launch(HopperLaunch):
    """The fp8 family's calls. ``launches`` packs the parameter block and adds, before the GEMM,
    the module's ``<name>_pack`` for each of A and B that is not K-major or whose address or
    rows TMA cannot describe (a transposing copy into 16-byte-padded K-major rows, in a
    workspace), and declares the split-K workspace and counters (zeroed when allocated; the
    kernel leaves the counters at zero). A D that a TMA store cannot take runs the fallback
    (the same kernel with direct stores). ``last_path`` says what the last call ran: "fp8",
    "fp8 + pack A", "fp8 + split-K 7", "fallback (<why>): fp8 ..." (a recipe's ``path``).
    Workspaces are slots of the recipe, with buffers per stream (``gemmgen.runtime.
    workspaces``): launches on several streams may overlap."""

    def __init__(self, kernel):
        super().__init__(kernel)
        env = self.config.template_constants()
        self._a_box, self._b_box = env["A_BOX_ROWS"], env["B_BOX_ROWS"]
        self._c_box = (env["C_CHUNK"], env["CONSUMER_ROWS"])

    def grid(self, args: KernelArgs, sms: int) -> tuple[int, int, int]:
        """Persistent: at most one CTA per SM, in whole clusters, no more than the work units
        (``Fp8Config.work_units``)."""
        cfg = self.config
        clusters = max(1, min(cfg.work_units(args.m, args.n, sms), sms // cfg.cluster))
        return clusters * cfg.cluster, 1, 1

    def launches(self, args: KernelArgs, dev: int) -> Recipe:
        """The ``Recipe`` of one call (``args``: M, N, K, A and B with ``a_k_major`` and
        ``b_k_major``, D as ``c``/``ldc``, ``scale_a``, ``scale_b``, ``bias``, for an e4m3 D
        ``scale_d`` and ``amax``; pointers are
        ints or ``Ref``s): packs, the GEMM, and the path taken; the fallback's recipe when a
        TMA store cannot take D."""
        bad = self._d_problems(args)
        if bad:
            fb = self.fallback.launches(args, dev)
            return Recipe(dev, fb.launches, f"fallback ({'; '.join(bad)}): {fb.path}",
                          fb.workspaces)
        return self._recipe(args, dev)

    def _d_spec(self, args: KernelArgs) -> MapSpec:
        return operand_map(self.config.out, int(args.c), args.m, args.n, args.ldc, False, 1, 0,
                           *self._c_box, 128)

    def _d_problems(self, args: KernelArgs) -> list[str]:
        """Why a TMA store cannot take D (empty for direct stores or an empty D)."""
        if self.config.store != "tma" or not (args.m and args.n):
            return []
        return self._d_spec(args).problems("D")

    def _recipe(self, args: KernelArgs, dev: int) -> Recipe:
        cfg = self.config
        m, n, k = args.m, args.n, args.k
        before, work, path = [], [], ["fp8"]
        a, b = (args.a, args.lda, args.a_k_major), (args.b, args.ldb, args.b_k_major)
        packs = {}
        if k > 0 and m and n:
            a, b, packs = self._packed(dev, before, work, m, n, k, a, b)
        if packs:
            path.append("pack " + "+".join(packs))
        sms = driver.device_attribute(dev, "sms")
        ws = cnt = 0
        split = ()
        if cfg.split_k > 1:
            ws, cnt, split = self._split(work, path, m, n, sms)
        ta, tb, td = self._maps(args, a, b)
        grid = self.grid(args, sms)
        sa, sb, sd = args.scale_a, args.scale_b, args.scale_d
        quant = ()
        if cfg.out == "e4m3":  # amax gathered in a slot per CTA and a counter (zero between calls)
            quant = (sd.ptr, sd.s0, sd.s1, args.amax,
                     workspace(work, "amax slots", grid[0] * 4, zero=True),
                     workspace(work, "amax counter", 4, zero=True))
        params, patches = pack(self._packer.struct, self._offsets, (
            ta, tb, td, m, n, k, sa.ptr, sa.s0, sa.s1, sb.ptr, sb.s0, sb.s1, args.c, args.ldc,
            args.bias, ws, cnt, *split, *quant))
        gemm = Launch(self.function(dev), grid, (cfg.threads, 1, 1), params, patches, pdl=cfg.pdl)
        return Recipe(dev, before + ([gemm] if m and n else []), " + ".join(path), tuple(work))

    def _split(self, work: list, path: list, m: int, n: int, sms: int) -> tuple:
        """The split-K parameters: a workspace of fp32 partials (each split CTA tile's slices),
        one zeroed arrival counter per split CTA tile and consumer (the last slice zeroes it
        again), and (how many of the last cluster tiles are split,), which ``path`` gets."""
        cfg = self.config
        tm, tn = cfg.tiles(m, n)
        split = cfg.split_tiles(m, n, sms)
        path.append(split_label(cfg.split_k, split, tm * tn))
        w_bytes, c_bytes = cfg.workspace_bytes(m, n, sms)
        return (workspace(work, "split-K", w_bytes),
                workspace(work, "split-K counters", c_bytes, zero=True), (split,))

    def _maps(self, args: KernelArgs, a: tuple, b: tuple) -> tuple:
        """Tensor maps of A (K x M, box 128 x A_BOX_ROWS) and B (K x N), each given as
        (pointer, ld, K-major) as the GEMM reads them, and, for a TMA store, D; each a
        ``MapRef`` where its address is a ``Ref``. Raises ``TmaError`` naming the operand."""
        cfg = self.config
        m, n, k = args.m, args.n, args.k
        ta = tb = td = NO_MAP
        if k > 0 and m and n:
            ta = encoded(self._map(cfg.dtype, a, m, k, self._a_box), "A", a[0])
            tb = encoded(self._map(cfg.b_dtype, b, n, k, self._b_box), "B", b[0])
        if cfg.store == "tma" and m and n:
            td = encoded(self._d_spec(args), "D", args.c)
        return ta, tb, td

    @staticmethod
    def _map(dtype: str, x: tuple, rows: int, k: int, box_rows: int) -> MapSpec:
        return operand_map(dtype, int(x[0]), rows, k, x[1], False, 1, 0, 128, box_rows, 128)

    def _packed(self, dev, before: list, work: list, m, n, k, a: tuple, b: tuple) -> tuple:
        """A and B (pointer, ld, K-major) as the GEMM reads them, queueing ``<name>_pack``
        for each that is not K-major or that TMA cannot describe; and {name: (rows, cols)} of
        the packed ones."""
        out, packs = [], {}
        for name, x, rows, dtype, box in (("A", a, m, self.config.dtype, self._a_box),
                                          ("B", b, n, self.config.b_dtype, self._b_box)):
            if x[2] and not self._map(dtype, x, rows, k, box).problems(name):
                out.append(x)
                continue
            packs[name] = (rows, k)
            out.append(self._pack(dev, before, work, name, x, rows, k))
        return out[0], out[1], packs

    def _pack(self, dev, before: list, work: list, name: str, x: tuple, rows: int,
              k: int) -> tuple:
        """Queue the transposing pack of one operand into K-major rows of ceil(K/16)*16 bytes
        (element (r, kk) of a K-major operand at r*ld + kk, of an MN-major one at kk*ld + r)."""
        ld_new = -(-k // 16) * 16
        ptr, ld, k_major = x
        strides = (ld, 1) if k_major else (1, ld)
        buf = queue_transpose(self, dev, before, work, "pack", f"pack {name}", ptr, strides,
                              rows, k, ld_new, 1)
        return buf, ld_new, True


TRANSPOSE_SIGNATURE = "PqqPqii"   # src, s_row, s_col, dst, ldd, rows, cols
TRANSPOSE_STRUCT = struct.Struct("@" + TRANSPOSE_SIGNATURE)
TRANSPOSE_OFFSETS = field_offsets(TRANSPOSE_STRUCT)
"""The FP8 axis' transposing copy (``<name>_pack``, ``<name>_scales``; _fp8_aux.cu.j2)."""


def queue_transpose(launcher, dev, before: list, work: list, suffix: str, tag: str, src,
                    strides: tuple, rows: int, cols: int, ldd: int, item: int):
    """Queue the module's transposing copy ``<name>_<suffix>`` (_fp8_aux.cu.j2) on ``before``:
    ``rows`` x ``cols`` elements of ``item`` bytes at ``src`` (element (r, c) at r * strides[0]
    + c * strides[1]; one of the two strides is 1) into rows of ``ldd`` elements in the
    workspace slot ``tag`` of ``work``, which it returns (a ``WorkRef``). ``launcher`` is the
    kernel's ``HopperLaunch`` (its function and PACK_TILE x PACK_TILE tiles, PACK_THREADS)."""
    buf = workspace(work, tag, rows * ldd * item)
    env = launcher.config.template_constants()
    tile, threads = env["PACK_TILE"], env["PACK_THREADS"]
    grid = (-(-cols // tile), min(-(-rows // tile), GRID_LIMIT_YZ), 1)
    params, patches = pack(TRANSPOSE_STRUCT, TRANSPOSE_OFFSETS,
                           (src, *strides, buf, ldd, rows, cols))
    before.append(Launch(launcher.function(dev, suffix), grid, (threads, 1, 1), params, patches))
    return buf


