"""The wgmma family's launches: tensor maps of A, B and C, the 3xTF32 split, repacks of operands
TMA cannot describe (or the fallback kernel), split-K partials and their reduction, epilogue-tree
structs and the dual GEMM's B."""
from __future__ import annotations

import struct
from itertools import product

from ...heuristics.cost import stored_shape, unaligned
from ...model.dtypes import ELEM_BYTES
from .. import driver
from ..dual import dual_b
from ..epilogue_args import STRUCT as EPI_STRUCT, takes_args, tree_of
from ..operands import OperandError
from ..recipe import (GRID_LIMIT_YZ, Block, KernelArgs, Launch, Recipe, field_offsets, grid_pieces,
                      offset, pack, workspace)
from ..tma import ParamPacker, TmaError, encoded, operand_map, param_layout
from .base import NO_MAP, HopperLaunch, split_label


class WgmmaLaunch(HopperLaunch):
    """The wgmma family's calls. ``launches`` encodes the tensor maps of A, B and C from the
    pointers, extents, leading dimensions and batch strides, packs the parameter block at the
    offsets the cubin records, and adds the module's helper kernels around the GEMM where the
    configuration or the operands need them:

    - ``math="3xtf32"``: ``<name>_split3`` writes A and B as tf32 big/small parts (K-major,
      any caller layout or alignment) into a workspace; the GEMM runs over 3x K.
    - operands TMA cannot describe (a base address, row or batch stride that is not a
      multiple of 16 bytes): ``<name>_pack`` copies A and/or B into 16-byte-padded rows when
      ``gemmgen.heuristics.cost.unaligned`` predicts that beats the ``fallback`` kernel (WMMA,
      same dtypes, layout and epilogue), else the fallback runs. A C that TMA cannot store to
      (a ``store="tma"`` kernel) always takes the fallback.
    - ``split_k > 1``: the GEMM stores fp32 partial sums per slice into a workspace and
      ``<name>_reduce`` sums them in order and applies alpha, beta, bias and the activation;
      an inline split-K sums them in the GEMM kernel (a workspace and counters), a cluster
      split-K (``split_cluster``) through distributed shared memory (nothing more).

    ``last_path`` says what the last ``launch_raw`` ran: "tma", or "tma" with "+repack A",
    "+repack B", "+3xtf32", "+split-K <n>", or "fallback: <reason>" (a recipe's ``path``
    says the same). Workspaces are slots of the recipe (``gemmgen.runtime.workspaces``): each
    stream a recipe runs on has its own buffers, so launches on several streams may overlap.
    The fallback kernel is the Kernel's (``Kernel.fallback``, built by its ``builder``).
    """

    def __init__(self, kernel):
        super().__init__(kernel)
        self._tree = tree_of(self.config)
        epi_kind = (f"{EPI_STRUCT.size}s",) if takes_args(self.config) else ()
        self._epi = bool(epi_kind)
        if self._epi and self.config.split_apart:  # <name>_reduce takes the struct too
            reduce = param_layout(kernel.cubin, self.config.name + "_reduce")
            self._reduce = ParamPacker(reduce, tuple(HELPER_SIGNATURES["reduce"].replace(
                "P", "Q")) + epi_kind), reduce.offsets
        self._block = (self.config.threads, 1, 1)
        env = self.config.env()
        self._a_box = (env["A_BOX_INNER"], env["A_BOX_ROWS"])
        self._b_box = (env["B_BOX_INNER"], env["B_BOX_ROWS"])
        self._c_box = (env["C_CHUNK"], self.config.template_constants()["C_BOX_ROWS"])

    def _a_map(self, ptr, m, k, lda, batch, stride):
        cfg = self.config
        return operand_map(cfg.dtype, int(ptr), m, k, lda, cfg.a_mn_major, batch, stride,
                           *self._a_box, cfg.swizzle)

    def _b_map(self, ptr, k, n, ldb, batch, stride):
        cfg = self.config
        return operand_map(cfg.dtype, int(ptr), k, n, ldb, not cfg.b_mn_major, batch, stride,
                           *self._b_box, cfg.swizzle)

    def _c_map(self, ptr, m, n, ldc, batch, stride):
        cfg = self.config
        return operand_map(cfg.out, int(ptr), m, n, ldc, cfg.layout[2] == "c", batch, stride,
                           *self._c_box, cfg.c_swizzle)

    def grid(self, args: KernelArgs, sms: int) -> tuple[int, int, int]:
        """(x, 1, z): every cluster tile (of every batch entry and split-K slice), or,
        persistent, at most one CTA per SM (``sms`` of them) in whole clusters; with stream-K
        and a split tail, one CTA per SM (the kernel shares the tail among as many of them as
        its ranges need; the others exit)."""
        cfg = self.config
        tiles = -(-args.m // (cfg.bm * cfg.cluster_m)) * -(-args.n // (cfg.bn * cfg.cluster_n))
        if cfg.stream_k and cfg.split_tiles(tiles * args.batch, sms):
            return sms, 1, 1   # clusters of one CTA (rule H40)
        if cfg.persistent:
            units = cfg.work_units(tiles * args.batch, sms // cfg.cluster)
            return max(1, min(units, sms // cfg.cluster)) * cfg.cluster, 1, 1
        return tiles * cfg.cluster, 1, args.batch * cfg.split_k

    def launches(self, args: KernelArgs, dev: int) -> Recipe:
        """The ``Recipe`` of one call (pointers: ints or ``Ref``s, those inside ``args.epi``
        too): the helper launches, the GEMM, and the path taken; the fallback kernel's recipe
        when TMA cannot describe an operand (for an epilogue tree: the same tree with direct
        stores; a plain fallback computes a shorthand epilogue itself and ignores ``epi``)."""
        try:
            return self._recipe(args, dev)
        except TmaError as exc:
            if self._tree is not None and self.fallback.name == self.name:
                raise
            fb = self.fallback.launches(args, dev)
            return Recipe(dev, fb.launches, f"fallback: {exc}", fb.workspaces)

    def _recipe(self, args: KernelArgs, dev: int) -> Recipe:
        cfg = self.config
        m, n, k, batch, alpha, beta = args.m, args.n, args.k, args.batch, args.alpha, args.beta
        a_ptr, lda, stride_a = args.a, args.lda, args.stride_a
        b_ptr, ldb, stride_b = args.b, args.ldb, args.stride_b
        c_ptr, ldc, stride_c, bias_ptr = args.c, args.ldc, args.stride_c, args.bias
        before, after, path, work = [], [], ["tma"], []
        # A and B are read unless K == 0, or alpha == 0 where the epilogue reads alpha
        reads = k > 0 and (alpha != 0 or (self._tree is not None and not self._tree.count("alpha")))
        k_run = cfg.packed_k(k)
        b_spec = None
        if cfg.dual and reads:
            (b_ptr, ldb, stride_b), b_spec, note = dual_b(
                self, dev, before, work, k, n, batch, (b_ptr, ldb, stride_b),
                args.up or (0, 0, 0), PACK_THREADS)
            path += [note] if note else []
        if reads and cfg.math == "3xtf32":
            (a_ptr, lda, stride_a), (b_ptr, ldb, stride_b) = self._split3(
                dev, before, work, m, n, k, batch, a_ptr, lda, stride_a, b_ptr, ldb, stride_b)
            path.append("3xtf32")
        elif reads:
            (a_ptr, lda, stride_a), (b_ptr, ldb, stride_b), repacked = self._repack_unaligned(
                dev, before, work, m, n, k, batch, a_ptr, lda, stride_a, b_ptr, ldb, stride_b)
            if repacked:
                path.append("repack " + "+".join(repacked))
        out = (c_ptr, ldc, stride_c, beta, bias_ptr, alpha)
        extra = ()
        if cfg.split_k > 1 and cfg.split_inline:
            extra = self._split_inline(dev, work, path, m, n, batch)
        elif cfg.split_k > 1 and cfg.split_cluster:  # summed in the cluster: no workspace
            path.append(f"split-K {cfg.split_k} in a cluster")
        elif cfg.split_k > 1:
            c_ptr, ldc, stride_c = self._split_k(dev, after, work, m, n, batch, alpha, out,
                                                 args.epi)
            beta, bias_ptr, alpha = 0.0, 0, 1.0 if alpha != 0 else 0.0
            path.append(f"split-K {cfg.split_k}")
        if self._epi:
            extra += (args.epi if args.epi is not None else Block(bytes(EPI_STRUCT.size)),)
        maps = self._maps(m, n, k_run, reads, a_ptr, lda, b_ptr, ldb, c_ptr, ldc, stride_a,
                          stride_b, stride_c, batch, b_spec)
        params, patches = pack(self._packer.struct, self._offsets,
                               (*maps, m, n, k_run, alpha, a_ptr, lda, b_ptr, ldb, beta, c_ptr,
                                ldc, stride_a, stride_b, stride_c, bias_ptr, batch, *extra))
        gemm = Launch(self.function(dev), self.grid(args, driver.device_attribute(
            dev, "sms")), self._block, params, patches, pdl=cfg.pdl)
        launches = before + ([gemm] if m and n else []) + after
        return Recipe(dev, launches, " + ".join(path), tuple(work))

    def _maps(self, m, n, k, reads, a_ptr, lda, b_ptr, ldb, c_ptr, ldc, stride_a, stride_b,
              stride_c, batch, b_spec=None) -> tuple:
        """The three tensor maps of the GEMM kernel itself (A and B as the kernel reads them:
        K-major after a 3xTF32 split), each a ``MapRef`` where its address is a ``Ref``.
        Raises ``TmaError`` naming the operand TMA cannot describe."""
        ta = tb = tc = NO_MAP
        if reads:  # otherwise the kernel reads neither A nor B
            ta = encoded(self._a_map(a_ptr, m, k, lda, batch, stride_a), "A", a_ptr)
            tb = encoded(b_spec or self._b_map(b_ptr, k, n, ldb, batch, stride_b), "B", b_ptr)
        if self.config.store == "tma":
            tc = encoded(self._c_map(c_ptr, m, n, ldc, batch, stride_c), "C", c_ptr)
        return ta, tb, tc

    def _repack_unaligned(self, dev, before, work, m, n, k, batch, a_ptr, lda, stride_a, b_ptr,
                          ldb, stride_b) -> tuple:
        """Queue ``<name>_pack`` of each operand TMA cannot describe when the cost model
        prefers that to the fallback (else raise ``TmaError``); the (pointer, ld, batch
        stride) of A and of B the GEMM reads, and the names repacked."""
        bad = {name: spec for name, spec in (
            ("A", self._a_map(a_ptr, m, k, lda, batch, stride_a)),
            ("B", self._b_map(b_ptr, k, n, ldb, batch, stride_b))) if spec.problems(name)}
        a, b = (a_ptr, lda, stride_a), (b_ptr, ldb, stride_b)
        if not bad:
            return a, b, []
        packs = {name: self._pack_shape(name, m, n, k, batch, stride)
                 for name, stride in (("A", stride_a), ("B", stride_b)) if name in bad}
        best = unaligned(m, n, k, batch, self.config.dtype, packs)[0]
        if best.path != "repack" and self._tree is None:  # a tree's fallback repacks too
            reasons = "; ".join(p for name, spec in bad.items() for p in spec.problems(name))
            raise TmaError(f"{reasons} (repack predicted slower: {best})")
        if "A" in bad:
            a = self._repack(dev, before, work, "A", *a, *packs["A"])
        if "B" in bad:
            b = self._repack(dev, before, work, "B", *b, *packs["B"])
        return a, b, list(bad)

    def _helper(self, dev, suffix: str, grid, block, args) -> Launch:
        params, patches = pack(HELPER_STRUCTS[suffix], HELPER_OFFSETS[suffix], args)
        return Launch(self.function(dev, suffix), grid, block, params, patches)

    def _pack_shape(self, name: str, m: int, n: int, k: int, batch: int, stride: int) -> tuple:
        """(rows, cols, batch) of operand ``name`` as stored: cols is the contiguous one."""
        return (*stored_shape(name, self.config.layout, m, n, k), batch if stride else 1)

    def _repack(self, dev, before: list, work: list, name: str, ptr, ld: int, stride: int,
                rows: int, cols: int, nb: int) -> tuple[int, int, int]:
        """Queue ``<name>_pack`` of one operand into 16-byte-padded rows; its new (pointer,
        leading dimension, batch stride)."""
        item = ELEM_BYTES[self.config.dtype]
        vec = 16 // item
        ld_new = -(-cols // vec) * vec
        stride_new = rows * ld_new if stride else 0
        buf = workspace(work, f"pack {name}", rows * ld_new * nb * item)
        for z0, nz in grid_pieces(nb):  # rows loop in the kernel; batches beyond 65535 here
            grid = (-(-(-(-cols // vec)) // PACK_THREADS), min(rows, GRID_LIMIT_YZ), nz)
            before.append(self._helper(dev, "pack", grid, (PACK_THREADS, 1, 1), (
                offset(ptr, z0 * stride * item), ld, stride,
                offset(buf, z0 * stride_new * item), ld_new, stride_new, rows, cols)))
        return buf, ld_new, stride_new

    def _split3(self, dev, before: list, work: list, m, n, k, batch, a_ptr, lda, stride_a,
                b_ptr, ldb, stride_b) -> list:
        """Queue the 3xTF32 split of A and B; the (pointer, ld, batch stride) of each."""
        cfg = self.config
        kp = -(-k // cfg.bk) * cfg.bk
        ld = 3 * kp
        env = cfg.env()
        tile, rows_per = env["PACK_TILE"], env["PACK_ROWS"]
        out = []
        for role, (name, ptr, ldx, stride, outer) in enumerate(
                (("A", a_ptr, lda, stride_a, m), ("B", b_ptr, ldb, stride_b, n))):
            col = cfg.layout[role] == "c"
            # element (o, k): A (m, k) at m*lda + k (row-major); B (k, n) at k*ldb + n
            if name == "A":
                so, sk = (1, ldx) if col else (ldx, 1)
            else:
                so, sk = (ldx, 1) if col else (1, ldx)
            nb = batch if stride else 1
            buf = workspace(work, f"split3 {name}", outer * ld * nb * 4)
            sbd = outer * ld if stride else 0
            for (z0, nz), (o0, no) in product(grid_pieces(nb), grid_pieces(outer, tile)):
                # grid y and z do not loop in the kernel: one launch per piece of each
                before.append(self._helper(dev, "split3", (-(-kp // tile), -(-no // tile), nz),
                                           (tile, rows_per, 1), (
                    offset(ptr, (z0 * stride + o0 * so) * 4), so, sk, stride,
                    offset(buf, (z0 * sbd + o0 * ld) * 4), ld, sbd, no, k, kp, role)))
            out.append((buf, ld, sbd))
        return out

    def _split_inline(self, dev, work: list, path: list, m, n, batch) -> tuple:
        """The extra parameters of an inline split-K: a workspace of fp32 partials (each split
        tile's ``split_k`` slices of BM x BN, in fragment order), one zeroed arrival counter
        per (split tile, consumer), which the last slice zeroes again, and how many of the
        last tiles are split (``WgmmaConfig.split_tiles``), which ``path`` gets."""
        cfg = self.config
        tiles = -(-m // cfg.bm) * -(-n // cfg.bn) * batch
        sms = driver.device_attribute(dev, "sms")
        split = cfg.split_tiles(tiles, sms)
        path.append(split_label(cfg.split_k, split, tiles,
                                " inline, stream-K" if cfg.stream_k else " inline"))
        w_bytes, c_bytes = cfg.workspace_bytes(tiles, sms)
        buf = workspace(work, "split-K", w_bytes)
        counters = workspace(work, "split-K counters", c_bytes, zero=True)
        return buf, counters, split

    def _split_k(self, dev, after: list, work: list, m, n, batch, alpha, out, epi=None) -> tuple:
        """Queue the split-K reduction into the caller's C; the workspace the GEMM writes its
        partial sums to, as (pointer, leading dimension, slice stride)."""
        cfg = self.config
        c_ptr, ldc, stride_c, beta, bias_ptr, alpha_ = out
        col = cfg.layout[2] == "c"
        inner, outer = (m, n) if col else (n, m)
        ldp = -(-inner // 4) * 4
        slice_ = outer * ldp
        buf = workspace(work, "split-K", slice_ * batch * cfg.split_k * 4)
        grid = (-(-inner // REDUCE_THREADS), min(outer, GRID_LIMIT_YZ), batch)
        if batch > GRID_LIMIT_YZ and not self._epi:  # rows loop; batches go in pieces
            item = ELEM_BYTES[cfg.out]
            for b0, nz in grid_pieces(batch):
                after.append(self._helper(dev, "reduce", (*grid[:2], nz), (REDUCE_THREADS, 1, 1), (
                    offset(buf, b0 * slice_ * 4), ldp, slice_, m, n, alpha_, beta,
                    offset(c_ptr, b0 * stride_c * item), ldc, stride_c, bias_ptr, batch)))
            return buf, ldp, slice_
        if batch > GRID_LIMIT_YZ:
            raise OperandError(f"a batch of {batch} exceeds the grid limit of {GRID_LIMIT_YZ} "
                               f"for the split-K reduction of an epilogue tree")
        args = (buf, ldp, slice_, m, n, alpha_, beta, c_ptr, ldc, stride_c, bias_ptr, batch)
        if self._epi:  # the tree's struct, at the offset the cubin gives it
            packer, offsets = self._reduce
            params, patches = pack(packer.struct, offsets, (*args, epi or Block(
                bytes(EPI_STRUCT.size))))
            after.append(Launch(self.function(dev, "reduce"), grid, (REDUCE_THREADS, 1, 1),
                                params, patches))
        else:
            after.append(self._helper(dev, "reduce", grid, (REDUCE_THREADS, 1, 1), args))
        return buf, ldp, slice_


# Parameter lists of the helper kernels (P pointer, q long long, i int, f float).
HELPER_SIGNATURES = {"pack": "PqqPqqii", "split3": "PqqqPqqiiii", "reduce": "PiqiiffPiqPi"}
HELPER_STRUCTS = {k: struct.Struct("@" + v) for k, v in HELPER_SIGNATURES.items()}
"""The parameter lists packed for a driver-API launch (natural alignment, as nvcc lays out
kernel parameters)."""
HELPER_OFFSETS = {k: field_offsets(v) for k, v in HELPER_STRUCTS.items()}
PACK_THREADS = 256    # <name>_pack: threads per block, one 16-byte vector each
REDUCE_THREADS = 256  # <name>_reduce: threads per block, one element of C each


