"""Launching kernels that read their operands through TMA (the wgmma family): tensor maps of A, B
and C, the parameter block at the cubin's offsets, the persistent grid, and the slower path for
operands TMA cannot describe.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Callable

from ..heuristics.cost import stored_shape, unaligned
from ..model.dtypes import ELEM_BYTES
from .device import sm_count
from .driver import RawFunction
from .kernel import Kernel, raw_stream
from .tma import MapSpec, ParamPacker, TmaError, encode, operand_map, param_layout

# The kernel's parameters, in order: tensor maps of A, B, C; M, N, K, alpha, A, lda, B, ldb,
# beta, C, ldc, stride_a, stride_b, stride_c, bias, batch.
PARAM_KINDS = ("128s", "128s", "128s", "i", "i", "i", "f", "Q", "i", "Q", "i", "f", "Q", "i",
               "q", "q", "q", "Q", "i")
NO_MAP = bytes(128)
LAUNCH_CACHE = 1024  # prepared launches kept per kernel
@dataclass
class TmaKernel(Kernel):
    """A wgmma-family kernel. ``launch_raw`` encodes (and caches) the tensor maps of A, B and C
    from the pointers, extents, leading dimensions and batch strides, packs the parameter
    block at the offsets the cubin records, and launches, with the module's helper kernels
    around it where the configuration or the operands need them:

    - ``math="3xtf32"``: ``<name>_split3`` writes A and B as tf32 big/small parts (K-major,
      any caller layout or alignment) into a workspace; the GEMM runs over 3x K.
    - operands TMA cannot describe (a base address, row or batch stride that is not a
      multiple of 16 bytes): ``<name>_pack`` copies A and/or B into 16-byte-padded rows when
      ``gemmgen.heuristics.cost.unaligned`` predicts that beats the ``fallback`` kernel (WMMA, same
      dtypes, layout and epilogue), else the fallback runs. A C that TMA cannot store to (a
      ``store="tma"`` kernel) always takes the fallback.
    - ``split_k > 1``: the GEMM stores fp32 partial sums per slice into a workspace and
      ``<name>_reduce`` sums them in order and applies alpha, beta, bias and the activation.

    ``last_path`` says what the last launch ran: "tma", or "tma" with "+repack A", "+repack
    B", "+3xtf32", "+split-K <n>", or "fallback: <reason>". Workspaces belong to the kernel
    object and grow as needed; launches of one kernel on several streams must not overlap.
    """

    cubin: bytes = field(default=b"", repr=False)
    last_path: str = ""
    build_fallback: Callable[[], Kernel] | None = field(default=None, repr=False)

    def __post_init__(self):
        self._packer = ParamPacker(param_layout(self.cubin, self.config.name), PARAM_KINDS)
        self._fallback = None
        self._launches: dict[tuple, tuple] = {}
        self._block = (self.config.threads, 1, 1)
        self._smem = self.config.dynamic_smem_bytes
        self._sms = sm_count() if self.config.persistent else 0
        env = self.config.env()
        self._a_box = (env["A_BOX_INNER"], env["A_BOX_ROWS"])
        self._b_box = (env["B_BOX_INNER"], env["B_BOX_ROWS"])
        self._c_box = (env["C_CHUNK"], self.config.template_constants()["C_BOX_ROWS"])
        self._helpers: dict[str, object] = {}
        self._raw_helpers: dict[str, object] = {}
        self._work: dict[str, object] = {}

    @property
    def fallback(self) -> Kernel:
        """The kernel for operands TMA cannot take (built on first use by ``build_fallback``,
        which ``gemmgen.runtime.build`` sets: the family's ``fallback`` configuration). Raises
        ``RuntimeError`` for a TmaKernel made without it."""
        if self._fallback is None:
            if self.build_fallback is None:
                raise RuntimeError(f"{self.name}: no fallback kernel for operands TMA cannot "
                                   f"describe (made without build_fallback)")
            self._fallback = self.build_fallback()
        return self._fallback

    def helper(self, suffix: str):
        """The module's helper kernel ``<name>_<suffix>`` (pack, split3, reduce), prepared."""
        if suffix not in self._helpers:
            fn = self.module.get_function(f"{self.config.name}_{suffix}")
            fn.prepare(HELPER_SIGNATURES[suffix])
            self._helpers[suffix] = fn
        return self._helpers[suffix]

    def workspace(self, tag: str, nbytes: int) -> int:
        """Device address of this kernel's workspace ``tag`` of at least ``nbytes`` (grown, and
        the prepared launches that held the old one dropped, when too small)."""
        held = self._work.get(tag)
        if held is None or held[0] < nbytes:
            import pycuda.driver as drv
            self._work[tag] = (nbytes, drv.mem_alloc(max(nbytes, 256)))
            if held is not None:
                self._launches.clear()
        return int(self._work[tag][1])

    def maps(self, m, n, k, alpha, a_ptr, lda, b_ptr, ldb, c_ptr, ldc, stride_a, stride_b,
             stride_c, batch) -> tuple[bytes, bytes, bytes]:
        """The three tensor maps of one launch of the GEMM kernel itself (A and B as the
        kernel reads them: K-major after a 3xTF32 split). Raises ``TmaError`` naming the
        operand TMA cannot describe."""
        cfg = self.config
        ta = tb = tc = NO_MAP
        if k > 0 and alpha != 0:  # otherwise the kernel reads neither A nor B
            ta = encode(self._a_map(a_ptr, m, k, lda, batch, stride_a), "A")
            tb = encode(self._b_map(b_ptr, k, n, ldb, batch, stride_b), "B")
        if cfg.store == "tma":
            tc = encode(operand_map(cfg.out, c_ptr, m, n, ldc, cfg.layout[2] == "c", batch,
                                    stride_c, *self._c_box, 128), "C")
        return ta, tb, tc

    def _a_map(self, ptr, m, k, lda, batch, stride):
        cfg = self.config
        return operand_map(cfg.dtype, ptr, m, k, lda, cfg.a_mn_major, batch, stride,
                           *self._a_box, cfg.swizzle)

    def _b_map(self, ptr, k, n, ldb, batch, stride):
        cfg = self.config
        return operand_map(cfg.dtype, ptr, k, n, ldb, not cfg.b_mn_major, batch, stride,
                           *self._b_box, cfg.swizzle)

    def grid(self, m: int, n: int, batch: int) -> tuple[int, int, int]:
        """(x, 1, z): every cluster tile (of every batch entry and split-K slice), or,
        persistent, at most one CTA per SM in whole clusters."""
        cfg = self.config
        tiles = -(-m // (cfg.bm * cfg.cluster_m)) * -(-n // (cfg.bn * cfg.cluster_n))
        z = batch * cfg.split_k
        if cfg.persistent:
            clusters = max(1, min(tiles * z, self._sms // cfg.cluster))
            return clusters * cfg.cluster, 1, 1
        return tiles * cfg.cluster, 1, z

    def launch_raw(self, m: int, n: int, k: int, alpha: float, a_ptr: int, lda: int, b_ptr: int,
                   ldb: int, beta: float, c_ptr: int, ldc: int, stride_a: int = 0,
                   stride_b: int = 0, stride_c: int = 0, bias_ptr: int = 0, batch: int = 1,
                   stream=None) -> None:
        """One launch on device pointers (no operand checks; asynchronous). The grid, the
        packed parameter block and the helper launches are cached by the whole argument list,
        so a repeated call (the same tensors, or a caching allocator's reused buffers) is one
        dict lookup and the launch."""
        key = (m, n, k, alpha, a_ptr, lda, b_ptr, ldb, beta, c_ptr, ldc, stride_a, stride_b,
               stride_c, bias_ptr, batch)
        ready = self._launches.get(key)
        if ready is None:
            ready = self._prepare(key)
        path, grid, params, before, after = ready
        self.last_path = path
        if grid is None:  # TMA cannot describe an operand: the fallback kernel runs instead
            self.fallback.launch_raw(*key, stream)
            return
        handle = raw_stream(stream)
        raw = handle is not None  # a PyTorch/CuPy stream or a CUstream: the driver API launches
        if raw:
            stream = handle
        for step in before:
            self._helper_launch(step, stream, raw)
        if raw:
            self.raw_function().launch(grid, self._block, params, stream)
        else:
            self.function._launch_kernel(grid, self._block, params, self._smem, stream)
        for step in after:
            self._helper_launch(step, stream, raw)

    def _helper_launch(self, step: tuple, stream, raw: bool) -> None:
        """One helper kernel launch (suffix, grid, block, args) on a PyCUDA stream or None,
        or, ``raw``, on a CUstream handle through the driver API."""
        suffix, grid, block, args = step
        if raw:
            fn = self._raw_helpers.get(suffix)
            if fn is None:
                fn = self._raw_helpers[suffix] = RawFunction(
                    self.cubin, f"{self.config.name}_{suffix}")
            fn.launch(grid, block, HELPER_STRUCTS[suffix].pack(*args), stream)
        else:
            self.helper(suffix).prepared_async_call(grid, block, stream, *args)

    def _prepare(self, key: tuple) -> tuple:
        """(path, grid, parameter block, helper launches before, after), or (reason, None,
        ...) for the fallback; cached."""
        try:
            ready = self._plan(*key)
        except TmaError as exc:
            ready = (f"fallback: {exc}", None, None, (), ())
        if len(self._launches) >= LAUNCH_CACHE:
            self._launches.clear()
        self._launches[key] = ready
        return ready

    def _plan(self, m, n, k, alpha, a_ptr, lda, b_ptr, ldb, beta, c_ptr, ldc, stride_a,
              stride_b, stride_c, bias_ptr, batch) -> tuple:
        cfg = self.config
        before, after, path = [], [], ["tma"]
        reads = k > 0 and alpha != 0
        k_run = cfg.packed_k(k)
        if reads and cfg.math == "3xtf32":
            (a_ptr, lda, stride_a), (b_ptr, ldb, stride_b) = self._split3(
                before, m, n, k, batch, a_ptr, lda, stride_a, b_ptr, ldb, stride_b)
            path.append("3xtf32")
        elif reads:
            bad = {name: spec for name, spec in (
                ("A", self._a_map(a_ptr, m, k, lda, batch, stride_a)),
                ("B", self._b_map(b_ptr, k, n, ldb, batch, stride_b))) if spec.problems(name)}
            if bad:
                packs = {name: self._pack_shape(name, m, n, k, batch, stride)
                         for name, stride in (("A", stride_a), ("B", stride_b)) if name in bad}
                best = unaligned(m, n, k, batch, cfg.dtype, packs)[0]
                if best.path != "repack":
                    reasons = "; ".join(p for name, spec in bad.items()
                                        for p in spec.problems(name))
                    raise TmaError(f"{reasons} (repack predicted slower: {best})")
                if "A" in bad:
                    a_ptr, lda, stride_a = self._repack(before, "A", a_ptr, lda, stride_a,
                                                        *packs["A"])
                if "B" in bad:
                    b_ptr, ldb, stride_b = self._repack(before, "B", b_ptr, ldb, stride_b,
                                                       *packs["B"])
                path.append("repack " + "+".join(bad))
        out = (c_ptr, ldc, stride_c, beta, bias_ptr, alpha)
        if cfg.split_k > 1:
            c_ptr, ldc, stride_c = self._split_k(after, m, n, batch, alpha, out)
            beta, bias_ptr, alpha = 0.0, 0, 1.0 if alpha != 0 else 0.0
            path.append(f"split-K {cfg.split_k}")
        ta, tb, tc = self.maps(m, n, k_run, alpha, a_ptr, lda, b_ptr, ldb, c_ptr, ldc,
                               stride_a, stride_b, stride_c, batch)
        params = self._packer.pack(ta, tb, tc, m, n, k_run, alpha, a_ptr, lda, b_ptr, ldb, beta,
                                   c_ptr, ldc, stride_a, stride_b, stride_c, bias_ptr, batch)
        return " + ".join(path), self.grid(m, n, batch), params, tuple(before), tuple(after)

    def _pack_shape(self, name: str, m: int, n: int, k: int, batch: int, stride: int) -> tuple:
        """(rows, cols, batch) of operand ``name`` as stored: cols is the contiguous one."""
        return (*stored_shape(name, self.config.layout, m, n, k), batch if stride else 1)

    def _repack(self, before: list, name: str, ptr: int, ld: int, stride: int, rows: int,
                cols: int, nb: int) -> tuple[int, int, int]:
        """Queue ``<name>_pack`` of one operand into 16-byte-padded rows; its new (pointer,
        leading dimension, batch stride)."""
        item = ELEM_BYTES[self.config.dtype]
        vec = 16 // item
        ld_new = -(-cols // vec) * vec
        stride_new = rows * ld_new if stride else 0
        dst = self.workspace(f"pack {name}", rows * ld_new * nb * item)
        grid = (-(-(-(-cols // vec)) // PACK_THREADS), min(rows, MAX_GRID_Y), nb)
        before.append(("pack", grid, (PACK_THREADS, 1, 1),
                       (ptr, ld, stride, dst, ld_new, stride_new, rows, cols)))
        return dst, ld_new, stride_new

    def _split3(self, before: list, m, n, k, batch, a_ptr, lda, stride_a, b_ptr, ldb,
                stride_b) -> tuple:
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
            dst = self.workspace(f"split3 {name}", outer * ld * nb * 4)
            grid = (-(-kp // tile), -(-outer // tile), nb)
            sbd = outer * ld if stride else 0
            before.append(("split3", grid, (tile, rows_per, 1),
                           (ptr, so, sk, stride, dst, ld, sbd, outer, k, kp, role)))
            out.append((dst, ld, sbd))
        return out

    def _split_k(self, after: list, m, n, batch, alpha, out) -> tuple[int, int, int]:
        """Queue the split-K reduction into the caller's C; the workspace the GEMM writes its
        partial sums to, as (pointer, leading dimension, slice stride)."""
        cfg = self.config
        c_ptr, ldc, stride_c, beta, bias_ptr, alpha_ = out
        col = cfg.layout[2] == "c"
        inner, outer = (m, n) if col else (n, m)
        ldp = -(-inner // 4) * 4
        slice_ = outer * ldp
        ws = self.workspace("split-K", slice_ * batch * cfg.split_k * 4)
        grid = (-(-inner // REDUCE_THREADS), min(outer, MAX_GRID_Y), batch)
        after.append(("reduce", grid, (REDUCE_THREADS, 1, 1),
                      (ws, ldp, slice_, m, n, alpha_, beta, c_ptr, ldc, stride_c, bias_ptr, batch)))
        return ws, ldp, slice_


# PyCUDA signatures of the helper kernels (P pointer, q long long, i int, f float).
HELPER_SIGNATURES = {"pack": "PqqPqqii", "split3": "PqqqPqqiiii", "reduce": "PiqiiffPiqPi"}
HELPER_STRUCTS = {k: struct.Struct("@" + v) for k, v in HELPER_SIGNATURES.items()}
"""The same parameter lists packed for a driver-API launch (natural alignment, as nvcc lays
out kernel parameters)."""
PACK_THREADS = 256    # <name>_pack: threads per block, one 16-byte vector each
REDUCE_THREADS = 256  # <name>_reduce: threads per block, one element of C each
MAX_GRID_Y = 65535    # helper kernels loop over rows beyond it


__all__ = ["TmaKernel", "MapSpec"]
