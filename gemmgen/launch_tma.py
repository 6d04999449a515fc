"""Launching kernels that read their operands through TMA (the wgmma family): tensor maps of A, B
and C, the parameter block at the cubin's offsets, the persistent grid, and the slower path for
operands TMA cannot describe.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .build import Kernel, raw_stream
from .tma import MapSpec, ParamPacker, TmaError, encode, operand_map, param_layout

# The kernel's parameters, in order: tensor maps of A, B, C; M, N, K, alpha, A, lda, B, ldb,
# beta, C, ldc, stride_a, stride_b, stride_c, bias, batch.
PARAM_KINDS = ("128s", "128s", "128s", "i", "i", "i", "f", "Q", "i", "Q", "i", "f", "Q", "i",
               "q", "q", "q", "Q", "i")
NO_MAP = bytes(128)
LAUNCH_CACHE = 1024  # prepared launches kept per kernel
_SMS: dict[int, int] = {}


def sm_count() -> int:
    """Multiprocessors of the current device (cached per device)."""
    import pycuda.driver as drv
    dev = drv.Context.get_device()
    key = dev.pci_bus_id() if hasattr(dev, "pci_bus_id") else 0
    if key not in _SMS:
        _SMS[key] = dev.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
    return _SMS[key]


def fallback_config(cfg):
    """A configuration of another family that computes what ``cfg`` computes (dtypes, layout,
    epilogue, specialization) without TMA: the family's ``fallback``, for operands a tensor
    map cannot describe."""
    from .families import get_family
    return get_family(cfg.family).fallback(cfg)


@dataclass
class TmaKernel(Kernel):
    """A wgmma-family kernel. ``launch_raw`` encodes (and caches) the tensor maps of A, B and C
    from the pointers, extents, leading dimensions and batch strides, packs the parameter
    block at the offsets the cubin records, and launches. Operands TMA cannot describe (a
    base address or a row or batch stride that is not a multiple of 16 bytes) run on
    ``fallback``, a WMMA kernel of the same dtypes, layout and epilogue; ``last_path`` says
    which ran ("tma" or "fallback: <reason>")."""

    cubin: bytes = field(default=b"", repr=False)
    last_path: str = ""

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

    @property
    def fallback(self) -> Kernel:
        """The WMMA kernel for operands TMA cannot take (built on first use)."""
        if self._fallback is None:
            from .build import build
            self._fallback = build(fallback_config(self.config))
        return self._fallback

    def maps(self, m, n, k, alpha, a_ptr, lda, b_ptr, ldb, c_ptr, ldc, stride_a, stride_b,
             stride_c, batch) -> tuple[bytes, bytes, bytes]:
        """The three tensor maps of one launch. Raises ``TmaError`` naming the operand TMA
        cannot describe."""
        cfg = self.config
        lay = cfg.layout
        ta = tb = tc = NO_MAP
        if k > 0 and alpha != 0:  # otherwise the kernel reads neither A nor B
            ta = encode(operand_map(cfg.dtype, a_ptr, m, k, lda, lay[0] == "c", batch, stride_a,
                                    *self._a_box, cfg.swizzle), "A")
            tb = encode(operand_map(cfg.dtype, b_ptr, k, n, ldb, lay[1] == "c", batch, stride_b,
                                    *self._b_box, cfg.swizzle), "B")
        if cfg.store == "tma":
            tc = encode(operand_map(cfg.out, c_ptr, m, n, ldc, lay[2] == "c", batch, stride_c,
                                    *self._c_box, 128), "C")
        return ta, tb, tc

    def grid(self, m: int, n: int, batch: int) -> tuple[int, int, int]:
        """(x, 1, z): every cluster tile, or, persistent, at most one CTA per SM in whole
        clusters."""
        cfg = self.config
        tiles = -(-m // (cfg.bm * cfg.cluster_m)) * -(-n // (cfg.bn * cfg.cluster_n))
        if cfg.persistent:
            clusters = max(1, min(tiles * batch, self._sms // cfg.cluster))
            return clusters * cfg.cluster, 1, 1
        return tiles * cfg.cluster, 1, batch

    def launch_raw(self, m: int, n: int, k: int, alpha: float, a_ptr: int, lda: int, b_ptr: int,
                   ldb: int, beta: float, c_ptr: int, ldc: int, stride_a: int = 0,
                   stride_b: int = 0, stride_c: int = 0, bias_ptr: int = 0, batch: int = 1,
                   stream=None) -> None:
        """One launch on device pointers (no operand checks; asynchronous). The grid and the
        packed parameter block are cached by the whole argument list, so a repeated call (the
        same tensors, or a caching allocator's reused buffers) is one dict lookup and the
        launch."""
        key = (m, n, k, alpha, a_ptr, lda, b_ptr, ldb, beta, c_ptr, ldc, stride_a, stride_b,
               stride_c, bias_ptr, batch)
        ready = self._launches.get(key)
        if ready is None:
            ready = self._prepare(key)
        if ready[0] is None:  # TMA cannot describe an operand: the WMMA kernel runs instead
            self.last_path = ready[1]
            self.fallback.launch_raw(*key, stream)
            return
        self.last_path = "tma"
        if stream is not None and not type(stream).__module__.startswith("pycuda"):
            self.raw_function().launch(ready[0], self._block, ready[1], raw_stream(stream))
            return
        self.function._launch_kernel(ready[0], self._block, ready[1], self._smem, stream)

    def _prepare(self, key: tuple) -> tuple:
        """(grid, parameter block), or (None, reason) for the fallback; cached."""
        (m, n, k, alpha, a_ptr, lda, b_ptr, ldb, beta, c_ptr, ldc, stride_a, stride_b,
         stride_c, bias_ptr, batch) = key
        try:
            ta, tb, tc = self.maps(m, n, k, alpha, a_ptr, lda, b_ptr, ldb, c_ptr, ldc,
                                   stride_a, stride_b, stride_c, batch)
            ready = (self.grid(m, n, batch), self._packer.pack(ta, tb, tc, *key))
        except TmaError as exc:
            ready = (None, f"fallback: {exc}")
        if len(self._launches) >= LAUNCH_CACHE:
            self._launches.clear()
        self._launches[key] = ready
        return ready


__all__ = ["TmaKernel", "fallback_config", "sm_count", "MapSpec"]
