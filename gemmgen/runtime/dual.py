"""The dual GEMM's B operand (docs-notes/epilogue_abi.md section 5): Bg and Bu, nn.Linear
weights (K x N column-major views, K contiguous), read through B's tensor map as a 3-D box at
z = 2 x batch entry + 0 (gate) or 1 (up). Read in place when Bu lies a positive multiple of
16 bytes after Bg with the same leading dimension (one weight pair, e.g. a fused gate_up
weight); otherwise both are packed into a [batch][2][N][K] workspace first (slower, works for
any pair)."""
from __future__ import annotations

from ..model.dtypes import ELEM_BYTES
from .recipe import GRID_LIMIT_YZ, grid_pieces, offset, workspace
from .tma import MapSpec


def dual_b(kernel, dev, before: list, work: list, k: int, n: int, batch: int, b: tuple,
           up: tuple, pack_threads: int) -> tuple:
    """((pointer, ld, batch-stride flag) of B for the kernel's parameters, the tensor map's
    ``MapSpec``, the path note). ``b`` and ``up``: (pointer, ld, batch stride) of Bg and Bu;
    pointers may be ``Ref``s (the map's address is Bg's, patched per call; the distance to Bu
    is then part of the caller's signature). ``work``: the recipe's workspace slots (the
    packed pair is one)."""
    cfg = kernel.config
    item = ELEM_BYTES[cfg.dtype]
    box = (*kernel._b_box, 1)
    (b_ptr, ldb, sb), (u_ptr, ldu, su) = b, up
    d = int(u_ptr) - int(b_ptr)  # bytes from Bg to Bu
    if not sb and not su and ldb == ldu and d > 0:
        spec = MapSpec(cfg.dtype, int(b_ptr), (max(k, 1), max(n, 1), 2), (ldb * item, d), box,
                       cfg.swizzle)
        if not spec.problems("B"):
            return (b_ptr, ldb, 0), spec, ""
    vec = 16 // item
    ld_new = -(-k // vec) * vec
    nb = batch if (sb or su) else 1
    per = 2 * n * ld_new
    buf = workspace(work, "dual B", per * nb * item)
    units = -(-k // vec)  # 16-byte vectors per row
    for part, (ptr, ld, stride) in enumerate(((b_ptr, ldb, sb), (u_ptr, ldu, su))):
        dst = buf.shifted(part * n * ld_new * item)
        for z0, nz in grid_pieces(nb):  # rows loop in the kernel; batches beyond 65535 here
            grid = (-(-units // pack_threads), min(n, GRID_LIMIT_YZ), nz)
            before.append(kernel._helper(dev, "pack", grid, (pack_threads, 1, 1), (
                offset(ptr, z0 * stride * item), ld, stride, offset(dst, z0 * per * item),
                ld_new, per if nb > 1 else 0, n, k)))
    spec = MapSpec(cfg.dtype, int(buf), (max(k, 1), max(n, 1), 2 * nb),
                   (ld_new * item, n * ld_new * item), box, cfg.swizzle)
    return (buf, ld_new, per if nb > 1 else 0), spec, "pack B+up"
