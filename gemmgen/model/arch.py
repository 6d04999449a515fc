"""Per-architecture limits used by the occupancy figures (CUDA C Programming Guide, compute capabilities table)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Arch:
    """Limits of one SM generation. Memory figures are bytes."""

    name: str
    smem_per_sm: int          # shared memory per SM usable by blocks
    smem_per_block_optin: int  # largest dynamic shared memory one block may opt in to
    smem_reserved_per_block: int  # reserved by the system for each resident block
    threads_per_sm: int
    blocks_per_sm: int
    registers_per_sm: int = 65536


ARCHS = {
    "sm_80": Arch("sm_80", 164 * 1024, 163 * 1024, 1024, 2048, 32),
    "sm_86": Arch("sm_86", 100 * 1024, 99 * 1024, 1024, 1536, 16),
    "sm_89": Arch("sm_89", 100 * 1024, 99 * 1024, 1024, 1536, 24),
    "sm_90": Arch("sm_90", 228 * 1024, 227 * 1024, 1024, 2048, 32),
}

STATIC_SMEM_LIMIT = 48 * 1024
"""Largest static ``__shared__`` allocation per block on every architecture (bytes)."""


def get_arch(name: str) -> Arch:
    """The limits of ``name`` (``sm_80``, ``sm_86``, ``sm_89``, ``sm_90``; ``sm_90a`` maps to ``sm_90``).

    Raises ``ValueError`` naming the known architectures for anything else.
    """
    key = name.rstrip("a") if name.endswith("a") else name
    if key not in ARCHS:
        raise ValueError(f"unknown arch {name!r}; known: {', '.join(ARCHS)}")
    return ARCHS[key]


def cc_of(arch: str) -> int:
    """Compute capability as major*10+minor from ``sm_XY`` (``sm_90a`` -> 90).
    Raises ``ValueError`` for another spelling."""
    digits = arch[3:].rstrip("a") if arch.startswith("sm_") else ""
    if not digits.isdigit():
        raise ValueError(f"expected an architecture like sm_90, got {arch!r}")
    return int(digits)


def fit_problem(cfg, arch: str) -> str | None:
    """Why no block of ``cfg`` (a family config) can be resident on an SM of ``arch``, naming
    that arch and its limit; None when at least one block fits. Registers are not counted:
    ``__launch_bounds__`` makes ptxas fit them (spilling if it must)."""
    a = get_arch(arch)
    smem = cfg.smem_bytes
    if smem > a.smem_per_block_optin:
        return (f"needs {smem} bytes of shared memory per block; {arch} allows at most "
                f"{a.smem_per_block_optin} ({a.smem_per_block_optin // 1024} KiB)")
    if smem + a.smem_reserved_per_block > a.smem_per_sm:
        return (f"needs {smem} bytes of shared memory per block plus {a.smem_reserved_per_block} "
                f"reserved; an SM of {arch} has {a.smem_per_sm}")
    if cfg.threads > a.threads_per_sm:
        return f"{cfg.threads} threads per block exceed the {a.threads_per_sm} of an SM of {arch}"
    return None
