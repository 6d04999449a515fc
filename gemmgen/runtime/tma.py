"""TMA from Python: tensor-map geometry for A, B and C, ``cuTensorMapEncodeTiled`` through ctypes,
kernel parameter offsets read from the cubin, and the parameter block a launch passes.

PyCUDA has no tensor-map API, and its argument packing places a 128-byte-aligned
``CUtensorMap`` at the wrong offset (the driver aligns parameters in absolute constant-bank
addresses: measured on an H200, see ``../shared/reference/hopper-gemm-notes.md`` section 4). So
the offsets come from the cubin's ``.nv.info.<kernel>`` section (EIATTR_KPARAM_INFO, the same
table ``cuFuncGetParamInfo`` reports) and the whole block is packed here, then launched with
``cuLaunchKernel``'s ``CU_LAUNCH_PARAM_BUFFER_POINTER``. Everything but ``encode`` runs without a
GPU, so CI tests it.
"""
from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from functools import lru_cache

from ..model.dtypes import ELEM_BYTES
from .recipe import MapRef, Ref

TENSOR_MAP_BYTES = 128
# CUtensorMapDataType, CUtensorMapSwizzle, CUtensorMapL2promotion (cuda.h, CUDA 12/13).
DATA_TYPES = {"fp16": 6, "fp32": 7, "tf32": 7, "bf16": 9, "e4m3": 0, "e5m2": 0}
"""FP8 operands are described as UINT8 (0): TMA moves bytes, wgmma reads them as FP8."""
SWIZZLE_ENUM = {0: 0, 32: 1, 64: 2, 128: 3}
L2_PROMOTION_256B = 3
OOB_FILL_ZERO = 0
MAX_BOX = 256


class TmaError(ValueError):
    """An operand TMA cannot describe: a base address or stride that is not a multiple of 16
    bytes, or a box beyond the encoder's limits. The message names the operand."""


@dataclass(frozen=True)
class MapSpec:
    """One rank-3 tiled tensor map: dims (elements, innermost first), strides (bytes, of dims 1
    and 2), box (elements) and swizzle (bytes, 0 for none)."""

    dtype: str
    ptr: int
    dims: tuple[int, int, int]
    strides: tuple[int, int]
    box: tuple[int, int, int]
    swizzle: int

    def problems(self, name: str) -> list[str]:
        """Why ``cuTensorMapEncodeTiled`` would refuse this map (empty when it would not)."""
        out = []
        if self.ptr % 16:
            out.append(f"{name}'s address is not 16-byte aligned (offset {self.ptr % 16})")
        for i, s in enumerate(self.strides):
            if i == 1 and self.dims[2] == 1:
                continue  # one matrix: its "batch stride" is a multiple of the leading one
            if s % 16:
                what = "leading dimension" if i == 0 else "batch stride"
                out.append(f"{name}'s {what} is {s} bytes, not a multiple of 16")
            if s >= 2 ** 40:
                out.append(f"{name}'s stride {s} bytes is 2^40 or more")
        if any(b > MAX_BOX or b < 1 for b in self.box):
            out.append(f"{name}'s box {self.box} has a dimension outside 1..{MAX_BOX}")
        if any(d < 1 or d >= 2 ** 32 for d in self.dims):
            out.append(f"{name}'s extents {self.dims} are outside 1..2^32-1")
        return out


def operand_map(dtype: str, ptr: int, rows: int, cols: int, ld: int, col_major: bool,
                batch: int, batch_stride: int, box_inner: int, box_outer: int,
                swizzle: int) -> MapSpec:
    """The tensor map of a rows x cols matrix (or a batch of them) of gemmgen dtype ``dtype``
    stored row- or column-major with leading dimension ``ld`` and ``batch_stride`` elements
    between matrices (0: one matrix for every batch entry). Dimension 0 is the contiguous one
    (cols if row-major, rows if column-major); ``box_inner`` runs along it."""
    item = ELEM_BYTES[dtype]
    inner, outer = (rows, cols) if col_major else (cols, rows)
    nb = batch if batch_stride else 1
    stride_b = batch_stride * item if batch_stride else max(ld * outer, 1) * item
    return MapSpec(dtype, ptr, (max(inner, 1), max(outer, 1), max(nb, 1)),
                   (ld * item, stride_b), (box_inner, box_outer, 1), swizzle)


# ---- kernel parameters from the cubin -----------------------------------------------------
EIATTR_KPARAM_INFO = 0x17
EIATTR_CBANK_PARAM_SIZE = 0x19
_EIFMT_SIZES = {1: 0, 2: 1, 3: 2}  # NVAL, BVAL, HVAL: bytes of value after the 2-byte header


@dataclass(frozen=True)
class ParamLayout:
    """Offsets and sizes (bytes) of a kernel's parameters, by ordinal, and the block size."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    total: int


def elf_sections(elf: bytes) -> dict[str, tuple[int, int]]:
    """{section name: (file offset, size in bytes)} of a cubin (``.nv.info.<kernel>``,
    ``.text.<kernel>``, ...). Raises ``ValueError`` if ``elf`` is not a 64-bit ELF file."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2:
        raise ValueError("not a 64-bit ELF cubin")
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names_at = heads[shstrndx][4]

    def name(off: int) -> str:
        end = elf.index(b"\0", names_at + off)
        return elf[names_at + off:end].decode()
    return {name(h[0]): (h[4], h[5]) for h in heads}


def _sections(elf: bytes) -> dict[str, bytes]:
    return {name: elf[at:at + size] for name, (at, size) in elf_sections(elf).items()}


def param_layout(cubin: bytes, kernel: str) -> ParamLayout:
    """Parameter offsets of ``kernel`` from ``cubin``'s ``.nv.info.<kernel>`` attributes.

    Raises ``ValueError`` when the cubin has no such kernel or no parameter table.
    """
    info = _sections(cubin).get(f".nv.info.{kernel}")
    if info is None:
        raise ValueError(f"no .nv.info.{kernel} section in the cubin")
    params: dict[int, tuple[int, int]] = {}
    total = None
    i = 0
    while i + 2 <= len(info):
        fmt, attr = info[i], info[i + 1]
        if fmt == 4:  # EIFMT_SVAL: u16 size, then the value
            size = struct.unpack_from("<H", info, i + 2)[0]
            value = info[i + 4:i + 4 + size]
            if attr == EIATTR_KPARAM_INFO:
                _, ordinal, offset, flags = struct.unpack_from("<IHHI", value)
                params[ordinal] = (offset, (flags >> 18) & 0x3FFF)
            i += 4 + size
        else:
            if fmt == 3 and attr == EIATTR_CBANK_PARAM_SIZE:
                total = struct.unpack_from("<H", info, i + 2)[0]
            i += 2 + _EIFMT_SIZES.get(fmt, 0)
    if not params:
        raise ValueError(f"kernel {kernel} has no parameter table in its cubin")
    ordered = [params[k] for k in range(len(params))]
    end = max(o + s for o, s in ordered)
    return ParamLayout(tuple(o for o, _ in ordered), tuple(s for _, s in ordered),
                       total if total is not None else end)


class ParamPacker:
    """Packs a kernel's parameters into one block at the offsets of its ``ParamLayout``:
    ``kinds`` gives each parameter's struct code ("128s" for a tensor map, "i", "f", "q", "Q"
    for pointers). One ``struct.Struct`` with explicit padding, built once per kernel."""

    def __init__(self, layout: ParamLayout, kinds: tuple[str, ...]):
        if len(kinds) != len(layout.offsets):
            raise ValueError(f"the kernel has {len(layout.offsets)} parameters, the packer "
                             f"{len(kinds)}")
        fmt, at = "<", 0
        for kind, off, size in zip(kinds, layout.offsets, layout.sizes):
            width = struct.calcsize("<" + kind)
            if width != size:
                raise ValueError(f"parameter of kind {kind!r} is {size} bytes in the cubin")
            if off < at:
                raise ValueError("parameter offsets overlap")
            fmt += f"{off - at}x{kind}" if off > at else kind
            at = off + size
        fmt += f"{layout.total - at}x" if layout.total > at else ""
        self.struct = struct.Struct(fmt)

    def pack(self, *values) -> bytes:
        """The parameter block: ``values`` in the kernel's parameter order, each at its offset,
        zero padding between them. Raises ``struct.error`` for a value of the wrong kind."""
        return self.struct.pack(*values)


def driver_param_layout(cubin: bytes, kernel: str) -> tuple[tuple[int, int], ...]:
    """(offset, size) of each parameter as the driver reports it (``cuFuncGetParamInfo``, CUDA
    12.4+) for ``kernel`` of ``cubin``, loaded into the current context: the check on
    ``param_layout``. Needs a GPU."""
    lib = ctypes.CDLL("libcuda.so.1")
    module, func = ctypes.c_void_p(), ctypes.c_void_p()
    buf = ctypes.create_string_buffer(cubin)
    if lib.cuModuleLoadData(ctypes.byref(module), buf) != 0:
        raise RuntimeError("cuModuleLoadData failed")
    try:
        if lib.cuModuleGetFunction(ctypes.byref(func), module, kernel.encode()) != 0:
            raise RuntimeError(f"cuModuleGetFunction({kernel}) failed")
        out = []
        offset, size = ctypes.c_size_t(), ctypes.c_size_t()
        while lib.cuFuncGetParamInfo(func, ctypes.c_size_t(len(out)), ctypes.byref(offset),
                                     ctypes.byref(size)) == 0:
            out.append((offset.value, size.value))
        return tuple(out)
    finally:
        lib.cuModuleUnload(module)


# ---- the driver -------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _driver():
    """libcuda's cuTensorMapEncodeTiled (the library PyCUDA has already loaded)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise RuntimeError(f"the CUDA driver library (libcuda.so.1) is not available: {exc}") from exc
    fn = lib.cuTensorMapEncodeTiled
    u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p,
                   u32p, u32p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_CACHE: dict[MapSpec, bytes] = {}
CACHE_LIMIT = 4096


def encode(spec: MapSpec, name: str = "operand") -> bytes:
    """The 128-byte CUtensorMap of ``spec`` (cached by the whole spec: pointer, dims, strides,
    box, swizzle). Raises ``TmaError`` naming ``name`` when TMA cannot describe it."""
    found = _CACHE.get(spec)
    if found is not None:
        return found
    problems = spec.problems(name)
    if problems:
        raise TmaError("; ".join(problems))
    buf = ctypes.create_string_buffer(TENSOR_MAP_BYTES * 2)  # per call: threads may encode
    base = ctypes.addressof(buf)
    out = base + (-base % TENSOR_MAP_BYTES)  # the encoder wants an aligned CUtensorMap
    dims = (ctypes.c_uint64 * 3)(*spec.dims)
    strides = (ctypes.c_uint64 * 2)(*spec.strides)
    box = (ctypes.c_uint32 * 3)(*spec.box)
    ones = (ctypes.c_uint32 * 3)(1, 1, 1)
    err = _driver()(out, DATA_TYPES[spec.dtype], 3, spec.ptr, dims, strides, box, ones, 0,
                    SWIZZLE_ENUM[spec.swizzle], L2_PROMOTION_256B, OOB_FILL_ZERO)
    if err != 0:
        raise TmaError(f"cuTensorMapEncodeTiled refused {name} (CUresult {err}): {spec}")
    data = ctypes.string_at(out, TENSOR_MAP_BYTES)
    if len(_CACHE) >= CACHE_LIMIT:
        _CACHE.clear()
    _CACHE[spec] = data
    return data


def encoded(spec: MapSpec, name: str, ptr):
    """The tensor map of ``spec`` (``encode``; ``TmaError`` naming ``name`` when TMA cannot
    describe it), as a ``recipe.MapRef`` when its address ``ptr`` is a ``recipe.Ref`` (a
    launch plan patches the address per call), else as its 128 bytes."""
    data = encode(spec, name)
    return MapRef(data, ptr) if isinstance(ptr, Ref) else data
