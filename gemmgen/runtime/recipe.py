"""Launch recipes: the launches one GEMM call makes, with the places its operands' addresses go.

A kernel's launches (helper kernels, the GEMM) for one operand signature never change but for
the operands' addresses. A ``Recipe`` keeps each launch's function, grid, block, shared memory
and packed parameter block, plus ``Patch``es: where an operand's address (plus a byte offset)
goes, as a raw pointer or as the global address of a tensor map. A repeated call only patches
and launches: ``run`` does that from Python, and the compiled PyTorch launcher
(``gemmgen.torch``) from C++, reading ``Recipe.to_bytes()``.

Operands are numbered by the caller (``gemm``: 0 A, 1 B, 2 C, 3 bias); a ``Ref`` names one
while the launches are built. Scratch memory is not part of a recipe: it declares workspace
slots (``Workspace``: tag, size, zeroed or not), a ``WorkRef`` names one (patch index
``WORK_BASE + slot``), and each run takes the buffers of the stream it launches on
(``gemmgen.runtime.workspaces`` from Python, the launcher's own pool from C++), so one recipe
runs on several streams at once.
"""
from __future__ import annotations

import functools
import re
import struct
from dataclasses import dataclass, field
from typing import NamedTuple

from . import driver, workspaces
from .operands import OperandError
from .workspaces import Workspace

PATCH_POINTER, PATCH_MAP = 0, 1
FORMAT_VERSION = 3
"""``to_bytes`` layout version, checked by the C++ launcher."""
WORK_BASE = 16
"""Patch index of workspace slot 0 (above every operand index)."""
WORK_ADDRESS = 0x7E0000000000
"""Where a ``WorkRef`` says its slot is while the launches are built (a 4 GiB-aligned
placeholder per slot: tensor maps are encoded with it, and every run patches in the
stream's buffer)."""


@dataclass(frozen=True)
class Ref:
    """Operand ``index``'s address plus ``delta`` bytes; ``value`` is its address at the call
    that builds the recipe (encoded into the first parameter block)."""

    index: int
    value: int
    delta: int = 0

    def __int__(self) -> int:
        return self.value + self.delta

    def __index__(self) -> int:
        return self.value + self.delta

    def shifted(self, nbytes: int) -> "Ref":
        return type(self)(self.index, self.value, self.delta + nbytes)


class WorkRef(Ref):
    """Workspace slot ``slot`` of the recipe being built (``delta`` bytes in): packed as a
    patch of index ``WORK_BASE + slot``; made by ``workspace``."""

    @classmethod
    def of(cls, slot: int, delta: int = 0) -> "WorkRef":
        return cls(WORK_BASE + slot, WORK_ADDRESS + (slot << 32), delta)

    @property
    def slot(self) -> int:
        return self.index - WORK_BASE

    @property
    def ptr(self) -> "WorkRef":  # reads like the buffer it stands for
        return self


def workspace(slots: list, tag: str, nbytes: int, zero: bool = False) -> WorkRef:
    """Declare a workspace slot of the recipe being built (appended to ``slots``, its
    ``Workspace`` list; one per ``tag``) and return its ``WorkRef``."""
    if any(w.tag == tag for w in slots):
        raise ValueError(f"workspace {tag!r} declared twice in one recipe")
    slots.append(Workspace(tag, nbytes, zero))
    return WorkRef.of(len(slots) - 1)


@dataclass(frozen=True)
class Scale:
    """A scale operand as an FP8 kernel reads it: its address (int or ``Ref``) and strides in
    elements: ``s0`` per row of A (per column of B for row scaling, per 128-column block of B
    for block scaling), ``s1`` per 128-element K block, ``s2`` per group (a grouped kernel's
    matrix of A, expert of B). A stride of 0 broadcasts one value."""

    ptr: object
    s0: int = 0
    s1: int = 0
    s2: int = 0


class KernelArgs(NamedTuple):
    """One call as every kernel takes it (``Kernel.launches``): C (M x N) = alpha * A (M x K)
    @ B (K x N) + beta * C + bias, on device pointers (ints, or ``recipe.Ref``s where later
    calls patch in other addresses); extents and leading dimensions in elements, in the
    layout of the kernel's configuration. What a family does not read keeps its default.

    - ``stride_a/b/c``: elements between consecutive matrices of a batch (0 broadcasts) or of
      a group; ``batch``: matrices per call.
    - FP8 (the fp8 family): ``a_k_major``/``b_k_major`` whether A / B are K-major as given
      (A row-major M x K, B column-major: N rows of K), ``scale_a``/``scale_b`` their
      ``Scale``s; C is D, ``bias`` D's bias; an e4m3 D's ``scale_d`` (read per tensor,
      written per 1 x 128) and ``amax`` (one float's bits).
    - Groups (the grouped family): ``grouping`` "m" or "k", ``mode`` "offs" or "masked",
      ``groups``, and ``offs`` the device array of cumulative ends or per-group counts (0:
      every row). M is the rows of A (grouping "m", mode "offs": every group's rows).
    - Epilogue trees (wgmma): ``epi`` the packed ``EpilogueArgs`` ``recipe.Block``; ``up``
      the dual GEMM's (Bu pointer, ld, batch stride).

    A named tuple (immutable, hashable, compared by value): it is the key of a kernel's
    recipe cache, and made on every ``launch_raw``, where a frozen dataclass's construction
    alone cost 2.5 us of host time per launch.
    """

    m: int
    n: int
    k: int
    a: object = 0
    lda: int = 0
    b: object = 0
    ldb: int = 0
    c: object = 0
    ldc: int = 0
    alpha: float = 1.0
    beta: float = 0.0
    stride_a: int = 0
    stride_b: int = 0
    stride_c: int = 0
    bias: object = 0
    batch: int = 1
    a_k_major: bool = True
    b_k_major: bool = True
    scale_a: Scale | None = None
    scale_b: Scale | None = None
    scale_d: Scale | None = None
    amax: object = 0
    grouping: str = "none"
    mode: str = ""
    groups: int = 1
    offs: object = 0
    epi: object = None
    up: tuple | None = None

    @classmethod
    def blas(cls, m: int, n: int, k: int, alpha: float, a, lda: int, b, ldb: int, beta: float,
             c, ldc: int, stride_a: int = 0, stride_b: int = 0, stride_c: int = 0, bias=0,
             batch: int = 1, **fields) -> "KernelArgs":
        """The arguments in cuBLAS's order (``cublasGemmStridedBatchedEx``: M, N, K, alpha,
        A, lda, B, ldb, beta, C, ldc, then the batch strides, bias and batch count); other
        fields as keywords."""
        return cls(m, n, k, a, lda, b, ldb, c, ldc, alpha, beta, stride_a, stride_b, stride_c,
                   bias, batch, **fields)


class Launcher:
    """How one kernel's calls become recipes, by its family (``Kernel.launcher``): ``grid``
    of the GEMM launch and ``launches``, the whole recipe. Made once per kernel, it keeps
    what the kernel's cubin and configuration fix (parameter offsets, tensor-map boxes)."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.config = kernel.config

    def function(self, device: int | None = None, suffix: str = ""):
        """The kernel (or its helper ``<name>_<suffix>``) on ``device``."""
        return self.kernel.function(device, suffix)

    @property
    def fallback(self):
        """The kernel's fallback (``Kernel.fallback``)."""
        return self.kernel.fallback

    @property
    def name(self) -> str:
        return self.kernel.name

    def grid(self, args: KernelArgs, sms: int) -> tuple[int, int, int]:
        raise NotImplementedError

    def launches(self, args: KernelArgs, dev: int) -> "Recipe":
        raise NotImplementedError


GRID_LIMIT_YZ = 65535
"""CUDA's limit on gridDim.y and gridDim.z (gridDim.x: 2^31 - 1)."""


def grid_pieces(extent: int, per_block: int = 1, limit: int = GRID_LIMIT_YZ) -> list:
    """(first, count) pieces of ``extent`` items, each covered by at most ``limit`` blocks of
    ``per_block`` items: the launches of a helper kernel whose grid y or z does not loop
    (one piece when it fits, none for no items)."""
    step = limit * per_block
    return [(s, min(step, extent - s)) for s in range(0, extent, step)]


def offset(ptr, nbytes: int):
    """The address ``nbytes`` past ``ptr`` (an int, or a ``Ref`` that stays patchable)."""
    if not nbytes:
        return ptr
    return ptr.shifted(nbytes) if isinstance(ptr, Ref) else int(ptr) + nbytes


@dataclass(frozen=True)
class Patch:
    """At byte ``offset`` of a parameter block: operand ``index``'s address + ``delta``,
    written as a 64-bit pointer (``kind`` PATCH_POINTER) or as the global address of the
    128-byte tensor map there (PATCH_MAP, ``cuTensorMapReplaceAddress``)."""

    offset: int
    kind: int
    index: int
    delta: int


@dataclass
class Launch:
    """One kernel launch: ``function`` (a ``driver.Function`` on the recipe's device), grid,
    block, dynamic shared memory (bytes), the parameter block and its patches; ``pdl``: launched
    with programmatic dependent launch (the kernel waits for its predecessor itself)."""

    function: driver.Function
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    params: bytes
    patches: tuple[Patch, ...] = ()
    pdl: bool = False

    @property
    def smem(self) -> int:
        return self.function.dynamic_smem

    @functools.cached_property
    def ready(self) -> driver.Params:
        """``params`` made ready for the driver once (a launch without patches sends it as
        it is on every call)."""
        return driver.Params(self.params)


def _patched(ln: Launch, ptrs: tuple[int, ...], work: tuple[int, ...]) -> bytes:
    """``ln``'s parameter block with each patch's address written in: operand ``ptrs[i]``
    or workspace ``work[i - WORK_BASE]``, plus the patch's delta, as a pointer or as a tensor
    map's global address."""
    params = bytearray(ln.params)
    for p in ln.patches:
        base = ptrs[p.index] if p.index < WORK_BASE else work[p.index - WORK_BASE]
        addr = base + p.delta
        if p.kind == PATCH_POINTER:
            struct.pack_into("<Q", params, p.offset, addr)
        else:
            params[p.offset:p.offset + 128] = driver.replace_map_address(
                bytes(params[p.offset:p.offset + 128]), addr)
    return bytes(params)


@dataclass
class Recipe:
    """The launches of one call, in order, on ``device``; ``path`` says what they do (e.g.
    "tma + split-K 2") and ``workspaces`` the slots its ``WorkRef`` patches name."""

    device: int
    launches: list[Launch]
    path: str = ""
    workspaces: tuple[Workspace, ...] = field(default=(), repr=False)

    def run(self, ptrs: tuple[int, ...], stream: int | None = None) -> None:
        """Patch in the operands' addresses ``ptrs`` (by operand index) and the workspaces of
        the raw stream handle ``stream`` (``gemmgen.runtime.workspaces``), and launch on it;
        the current context must be ``device``'s."""
        if not (self.workspaces and self.launches):
            self._launch(ptrs, (), stream)
            return
        with workspaces.leased(self.device, stream, self.workspaces) as work:
            self._launch(ptrs, work, stream)  # queued before another thread may free them

    def _launch(self, ptrs: tuple[int, ...], work: tuple[int, ...], stream) -> None:
        for ln in self.launches:
            params = _patched(ln, ptrs, work) if ln.patches else ln.ready
            driver.launch(ln.function.handle, ln.grid, ln.block, ln.smem, params, stream, ln.pdl)

    def to_bytes(self, order: tuple[int, ...] | None = None) -> bytes:
        """The recipe for the C++ launcher (little-endian): a header (version, launch count),
        then per launch: CUfunction handle (u64), grid and block (6 x u32), shared memory
        (u32), flags (u32: 1 = programmatic dependent launch), parameter bytes (u32 length +
        bytes), patches (u32 count + count x (offset u32, kind u32, index u32, delta i64));
        then the workspace slots (u32 count + count x (nbytes u64, zero u32)). Operand ``i``
        of the recipe is the launcher's operand ``order[i]`` (default: operand ``i``, for
        every operand the recipe patches); a patch index ``WORK_BASE + s`` names slot ``s``
        (not mapped)."""
        out = bytearray(struct.pack("<II", FORMAT_VERSION, len(self.launches)))
        for ln in self.launches:
            out += struct.pack("<Q6IIIi", ln.function.handle, *ln.grid, *ln.block, ln.smem,
                               int(ln.pdl), len(ln.params))
            out += ln.params
            out += struct.pack("<I", len(ln.patches))
            for p in ln.patches:
                index = order[p.index] if order and p.index < WORK_BASE else p.index
                out += struct.pack("<IIIq", p.offset, p.kind, index, p.delta)
        out += struct.pack("<I", len(self.workspaces))
        for w in self.workspaces:
            out += struct.pack("<QI", w.nbytes, int(w.zero))
        return bytes(out)


def pack(fmt: struct.Struct, offsets: tuple[int, ...], values: tuple,
         names: tuple[str, ...] | None = None) -> tuple[bytes, tuple]:
    """(parameter block, patches) of ``values`` packed by ``fmt`` whose fields sit at
    ``offsets``: a ``Ref`` (a ``WorkRef`` too) is packed as its current address and patched
    as a pointer; a
    ``MapRef`` as its encoded tensor map and patched as one; a ``Block`` as its bytes, with
    its own patches moved to its offset. Raises ``OperandError`` naming the field (by
    ``names``, else its number) whose value does not fit it, e.g. an M of 2^31 in an int."""
    plain, patches = [], []
    for v, off in zip(values, offsets):
        if isinstance(v, Ref):
            patches.append(Patch(off, PATCH_POINTER, v.index, v.delta))
            plain.append(int(v))
        elif isinstance(v, MapRef):
            patches.append(Patch(off, PATCH_MAP, v.ref.index, v.ref.delta))
            plain.append(v.data)
        elif isinstance(v, Block):
            patches += [Patch(off + p.offset, p.kind, p.index, p.delta) for p in v.patches]
            plain.append(v.data)
        else:
            plain.append(v)
    try:
        return fmt.pack(*plain), tuple(patches)
    except struct.error as exc:
        raise _misfit(fmt, plain, names, exc) from None


C_TYPES = {"i": ("int", -2 ** 31, 2 ** 31 - 1), "I": ("unsigned int", 0, 2 ** 32 - 1),
           "q": ("long long", -2 ** 63, 2 ** 63 - 1), "Q": ("unsigned long long", 0, 2 ** 64 - 1),
           "P": ("pointer", 0, 2 ** 64 - 1)}
"""struct codes of integer kernel parameters: (C type, least, greatest value)."""


def struct_fields(fmt: struct.Struct) -> list[str]:
    """The struct code of each value ``fmt`` packs, in order: padding (``x``) skipped, a
    repeat count expanded, ``128s`` one field."""
    out = []
    for count, code in re.findall(r"(\d*)([a-zA-Z?])", fmt.format.lstrip("@=<>!")):
        if code == "x":
            continue
        out += [count + code] if code in "sp" else [code] * int(count or 1)
    return out


def _misfit(fmt: struct.Struct, plain: list, names, exc: struct.error) -> Exception:
    """The ``OperandError`` naming the first field of ``plain`` that ``fmt`` cannot pack."""
    for i, (c, v) in enumerate(zip(struct_fields(fmt), plain)):
        try:
            struct.pack("@" + c, v)
        except struct.error:
            ctype, lo, hi = C_TYPES.get(c, (c, None, None))
            name = names[i] if names and i < len(names) else f"parameter {i} ({ctype})"
            limit = f" ({lo}..{hi})" if lo is not None else ""
            return OperandError(f"{name} = {v!r} does not fit the kernel's {ctype}{limit}")
    return OperandError(f"the kernel's parameters do not pack: {exc}")


@dataclass(frozen=True)
class Block:
    """A struct parameter packed as bytes (``data``, e.g. ``EpilogueArgs``) with the patches of
    the pointers inside it (offsets from its start); ``pack`` places them at the parameter's
    offset."""

    data: bytes
    patches: tuple[Patch, ...] = ()

    @classmethod
    def of(cls, fmt: struct.Struct, values) -> "Block":
        data, patches = pack(fmt, field_offsets(fmt), tuple(values))
        return cls(data, patches)


@dataclass(frozen=True)
class MapRef:
    """An encoded tensor map (``data``, 128 bytes) whose global address is ``ref``."""

    data: bytes
    ref: Ref


def field_offsets(fmt: struct.Struct) -> tuple[int, ...]:
    """Offset of each field of a struct without explicit padding codes (``"@iiifP..."``, native
    alignment), as nvcc lays out kernel parameters."""
    code = fmt.format
    prefix = code[0] if code[0] in "@=<>!" else ""
    fields = code[len(prefix):]
    return tuple(struct.calcsize(prefix + fields[:i + 1]) - struct.calcsize(prefix + fields[i])
                 for i in range(len(fields)))
