"""Launching FP8 kernels (the fp8 family): the tensor maps of A, B and D, the parameter block at
the cubin's offsets, the scales, the split-K workspace and counters, and the module's
transposing pack for operands FP8 wgmma cannot read as they are.

A call's operands are numbered as ``gemmgen.runtime.recipe`` patches them: 0 A, 1 B, 2 D,
3 bias, 4 scale_a, 5 scale_b.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from . import driver
from .fp8_blas import call_fp8
from .fp8_operands import Matrix, Scale
from .kernel import Kernel
from .recipe import Launch, MapRef, Recipe, Ref, field_offsets, pack, workspace
from .tma import MapSpec, ParamPacker, encode, operand_map, param_layout

OPERANDS = ("A", "B", "D", "bias", "scale_a", "scale_b")
"""Operand numbers of an FP8 recipe (its patches name them by position)."""
ORDER = tuple(range(len(OPERANDS)))
NO_MAP = bytes(128)
PACK_SIGNATURE = "PqqPqii"   # src, s_row, s_col, dst, ldd, rows, cols
MAX_GRID_Y = 65535
LAUNCH_CACHE = 1024


@dataclass
class Fp8Kernel(Kernel):
    """An fp8-family kernel. ``launches`` packs the parameter block and adds, before the GEMM,
    the module's ``<name>_pack`` for each of A and B that is not K-major or whose address or
    rows TMA cannot describe (a transposing copy into 16-byte-padded K-major rows, in a
    workspace), and declares the split-K workspace and counters (zeroed when allocated; the
    kernel leaves the counters at zero). A D that a TMA store cannot take runs the fallback
    (the same kernel with direct stores). ``last_path`` says what the last call ran: "fp8",
    "fp8 + pack A", "fp8 + split-K 7", "fallback (<why>): fp8 ..." (a recipe's ``path``).
    Workspaces are slots of the recipe, with buffers per stream (``gemmgen.runtime.
    workspaces``): launches on several streams may overlap."""

    def __post_init__(self):
        super().__post_init__()
        layout = param_layout(self.cubin, self.config.name)
        self._packer = ParamPacker(layout, tuple(p.kind for p in self.config.params()))
        self._offsets = layout.offsets
        self._recipes: dict[tuple, Recipe] = {}
        env = self.config.template_constants()
        self._a_box, self._b_box = env["A_BOX_ROWS"], env["B_BOX_ROWS"]
        self._c_box = (env["C_CHUNK"], env["CONSUMER_ROWS"])

    def grid(self, m: int, n: int, sms: int) -> tuple[int, int, int]:
        """Persistent: at most one CTA per SM, in whole clusters, no more than the units."""
        cfg = self.config
        clusters = max(1, min(cfg.grid(m, n)[0] // cfg.cluster, sms // cfg.cluster))
        return clusters * cfg.cluster, 1, 1

    def launches(self, m: int, n: int, k: int, a: Matrix, b: Matrix, d_ptr, ldd: int,
                 scale_a: Scale, scale_b: Scale, bias_ptr=0, device: int | None = None
                 ) -> Recipe:
        """The ``Recipe`` of one call (pointers: ints or ``Ref``s): packs, the GEMM, and the
        path taken; the fallback's recipe when a TMA store cannot take D."""
        dev = driver.current_device() if device is None else device
        bad = self._d_problems(m, n, d_ptr, ldd)
        if bad:
            fb = self.fallback.launches(m, n, k, a, b, d_ptr, ldd, scale_a, scale_b, bias_ptr,
                                        device=dev)
            return Recipe(dev, fb.launches, f"fallback ({'; '.join(bad)}): {fb.path}",
                          fb.workspaces)
        return self._recipe(dev, m, n, k, a, b, d_ptr, ldd, scale_a, scale_b, bias_ptr)

    def _d_spec(self, m, n, d_ptr, ldd) -> MapSpec:
        return operand_map(self.config.out, int(d_ptr), m, n, ldd, False, 1, 0, *self._c_box,
                           128)

    def _d_problems(self, m, n, d_ptr, ldd) -> list[str]:
        """Why a TMA store cannot take D (empty for direct stores or an empty D)."""
        if self.config.store != "tma" or not (m and n):
            return []
        return self._d_spec(m, n, d_ptr, ldd).problems("D")

    def launch_raw(self, m: int, n: int, k: int, a: Matrix, b: Matrix, d_ptr: int, ldd: int,
                   scale_a: Scale, scale_b: Scale, bias_ptr: int = 0, stream=None) -> None:
        """One call on device pointers of the current context's device (no operand checks;
        asynchronous); recipes are cached by the whole argument list."""
        dev = driver.current_device()
        key = (m, n, k, a, b, d_ptr, ldd, scale_a, scale_b, bias_ptr, dev)
        recipe = self._recipes.get(key)
        if recipe is None:
            recipe = self.launches(*key[:-1], device=dev)
            if len(self._recipes) >= LAUNCH_CACHE:
                self._recipes.clear()
            self._recipes[key] = recipe
        self.last_path = recipe.path
        recipe.run((), driver.stream_handle(stream))

    def _recipe(self, dev, m, n, k, a, b, d_ptr, ldd, scale_a, scale_b, bias_ptr) -> Recipe:
        cfg = self.config
        before, work, path = [], [], ["fp8"]
        packs = {}
        if k > 0 and m and n:
            a, b, packs = self._packed(dev, before, work, m, n, k, a, b)
        if packs:
            path.append("pack " + "+".join(packs))
        ws = cnt = 0
        if cfg.split_k > 1:
            w_bytes, c_bytes = cfg.workspace_bytes(m, n)
            ws = workspace(work, "split-K", w_bytes)
            cnt = workspace(work, "split-K counters", c_bytes, zero=True)
            path.append(f"split-K {cfg.split_k}")
        ta, tb, td = self._maps(m, n, k, a, b, d_ptr, ldd)
        params, patches = pack(self._packer.struct, self._offsets, (
            ta, tb, td, m, n, k, scale_a.ptr, scale_a.s0, scale_a.s1, scale_b.ptr, scale_b.s0,
            scale_b.s1, d_ptr, ldd, bias_ptr, ws, cnt))
        gemm = Launch(self.function(dev), self.grid(m, n, driver.device_attribute(dev, "sms")),
                      (cfg.threads, 1, 1), params, patches)
        return Recipe(dev, before + ([gemm] if m and n else []), " + ".join(path), tuple(work))

    def _maps(self, m, n, k, a: Matrix, b: Matrix, d_ptr, ldd) -> tuple:
        """Tensor maps of A (K x M, box 128 x A_BOX_ROWS), B (K x N) and, for a TMA store, D;
        each a ``MapRef`` where its address is a ``Ref``. Raises ``TmaError`` naming the
        operand."""
        cfg = self.config
        ta = tb = td = NO_MAP
        if k > 0 and m and n:
            ta = _encoded(self._map(cfg.dtype, a, m, k, self._a_box), "A", a.ptr)
            tb = _encoded(self._map(cfg.b_dtype, b, n, k, self._b_box), "B", b.ptr)
        if cfg.store == "tma" and m and n:
            td = _encoded(self._d_spec(m, n, d_ptr, ldd), "D", d_ptr)
        return ta, tb, td

    @staticmethod
    def _map(dtype: str, x: Matrix, rows: int, k: int, box_rows: int) -> MapSpec:
        return operand_map(dtype, int(x.ptr), rows, k, x.ld, False, 1, 0, 128, box_rows, 128)

    def _packed(self, dev, before: list, work: list, m, n, k, a: Matrix, b: Matrix) -> tuple:
        """A and B as the GEMM reads them, queueing ``<name>_pack`` for each that is not
        K-major or that TMA cannot describe; and {name: (rows, cols)} of the packed ones."""
        out, packs = [], {}
        for name, x, rows, dtype, box in (("A", a, m, self.config.dtype, self._a_box),
                                          ("B", b, n, self.config.b_dtype, self._b_box)):
            if x.k_major and not self._map(dtype, x, rows, k, box).problems(name):
                out.append(x)
                continue
            packs[name] = (rows, k)
            out.append(self._pack(dev, before, work, name, x, rows, k))
        return out[0], out[1], packs

    def _pack(self, dev, before: list, work: list, name: str, x: Matrix, rows: int,
              k: int) -> Matrix:
        """Queue the transposing pack of one operand into K-major rows of ceil(K/16)*16 bytes
        (element (r, kk) of a K-major operand at r*ld + kk, of an MN-major one at kk*ld + r)."""
        ld_new = -(-k // 16) * 16
        buf = workspace(work, f"pack {name}", rows * ld_new)
        s_row, s_col = (x.ld, 1) if x.k_major else (1, x.ld)
        tile = self.config.template_constants()["PACK_TILE"]
        threads = self.config.template_constants()["PACK_THREADS"]
        grid = (-(-k // tile), min(-(-rows // tile), MAX_GRID_Y), 1)
        params, patches = pack(PACK_STRUCT, PACK_OFFSETS,
                               (x.ptr, s_row, s_col, buf, ld_new, rows, k))
        before.append(Launch(self.function(dev, "pack"), grid, (threads, 1, 1), params, patches))
        return Matrix(buf, ld_new, True)

    def __call__(self, A, B, C=None, *, alpha: float = 1.0, beta: float = 0.0, bias=None,
                 stream=None, scale_a=1.0, scale_b=1.0):
        """C = act(alpha * scale_a * scale_b * (A @ B) + beta * C + bias): every kernel's call
        contract (``Kernel.__call__``), with the FP8 scales as keywords (numbers, row vectors
        or block grids; see ``gemmgen.runtime.fp8_operands``). See ``gemmgen.runtime.fp8_blas``
        for how alpha, beta, K = 0 and batches map onto the kernel."""
        return call_fp8(self, A, B, C, alpha=alpha, beta=beta, bias=bias, stream=stream,
                        scale_a=scale_a, scale_b=scale_b)


def _encoded(spec: MapSpec, name: str, ptr):
    data = encode(spec, name)
    return MapRef(data, ptr) if isinstance(ptr, Ref) else data


PACK_STRUCT = struct.Struct("@" + PACK_SIGNATURE)
PACK_OFFSETS = field_offsets(PACK_STRUCT)
