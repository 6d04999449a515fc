"""Search space: enumerate valid configurations, prune what the device cannot run, rank by a cheap model."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .arch import get_arch
from .config import ConfigBase
from .families import get_family
from .registers import REG_ALLOC_UNIT, estimated_registers, register_cap, registers_needed


@dataclass(frozen=True)
class DeviceLimits:
    """What a GPU offers one kernel: SMs, and per SM shared memory (bytes), registers, threads
    and blocks; ``smem_per_block`` is the largest opt-in allocation of one block."""

    name: str
    arch: str
    sms: int
    smem_per_sm: int
    smem_per_block: int
    regs_per_sm: int = 65536
    threads_per_sm: int = 2048
    blocks_per_sm: int = 32
    smem_reserved: int = 1024

    @classmethod
    def from_arch(cls, arch: str, sms: int, name: str = "") -> "DeviceLimits":
        """Limits from the architecture table (for planning without a GPU)."""
        a = get_arch(arch)
        return cls(name or arch, a.name, sms, a.smem_per_sm, a.smem_per_block_optin,
                   a.registers_per_sm, a.threads_per_sm, a.blocks_per_sm,
                   a.smem_reserved_per_block)


def enumerate_configs(family: str, dtype: str = "fp32") -> list[ConfigBase]:
    """Every configuration of ``family``'s search space for A/B ``dtype`` that passes the
    family's rules. Raises ``ValueError`` for an unknown family or a dtype it does not take."""
    fam = get_family(family)
    if dtype not in fam.dtypes:
        raise ValueError(f"the {family} family takes {', '.join(fam.dtypes)}, not {dtype}")
    return fam.space(dtype)


def unfit_reason(cfg: ConfigBase, dev: DeviceLimits) -> str | None:
    """Why ``dev`` cannot run ``cfg`` at all (None if it can)."""
    if cfg.smem_bytes > dev.smem_per_block:
        return f"needs {cfg.smem_bytes} bytes of shared memory; {dev.name} allows {dev.smem_per_block}"
    if cfg.threads > dev.threads_per_sm:
        return f"{cfg.threads} threads exceed {dev.threads_per_sm} per SM"
    return None


def blocks_per_sm(cfg: ConfigBase, dev: DeviceLimits, registers: int | None = None) -> int:
    """Resident blocks per SM allowed by threads, shared memory and registers (per warp, in
    units of 256); ``registers`` from the compiled kernel, else estimated."""
    regs = registers if registers is not None else estimated_registers(cfg)
    per_warp = math.ceil(regs * 32 / REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    by_regs = dev.regs_per_sm // max(1, per_warp * cfg.warps)
    by_smem = dev.smem_per_sm // (cfg.smem_bytes + dev.smem_reserved)
    return min(dev.blocks_per_sm, dev.threads_per_sm // cfg.threads, by_smem, by_regs)


def predict(cfg: ConfigBase, m: int, n: int, k: int, dev: DeviceLimits,
            registers: int | None = None) -> dict:
    """The cheap model: occupancy, waves over the SMs, arithmetic intensity and a score.

    score = tail efficiency x latency hiding x global reuse x shared reuse, each in (0, 1]:
    tail = waves / ceil(waves); hiding = min(1, resident warps / 16); global reuse =
    I_g / (I_g + 8) and shared reuse = I_s / (I_s + 4) with I the FLOP per byte at the block
    and warp tile. It orders candidates for measurement; the measurement decides.
    """
    bps = blocks_per_sm(cfg, dev, registers)
    blocks = math.ceil(m / cfg.bm) * math.ceil(n / cfg.bn)
    slots = max(1, dev.sms * bps)
    waves = blocks / slots
    tail = waves / math.ceil(waves) if blocks else 0.0
    warps = bps * cfg.warps
    fpb = cfg.flops_per_byte
    i_g, i_s = fpb["global"], fpb.get("shared") or fpb["global"]
    spill = min(1.0, register_cap(cfg) / registers_needed(cfg)) ** 4 if registers is None else 1.0
    score = tail * min(1.0, warps / 16) * i_g / (i_g + 8) * i_s / (i_s + 4) * spill if bps else 0.0
    return {"blocks_per_sm": bps, "resident_warps": warps, "blocks": blocks,
            "waves": round(waves, 3), "tail_efficiency": round(tail, 3),
            "flops_per_byte_global": round(i_g, 2), "flops_per_byte_shared": round(i_s, 2),
            "registers": registers if registers is not None else estimated_registers(cfg),
            "registers_measured": registers is not None, "score": round(score, 4)}


def rank(configs: list[ConfigBase], m: int, n: int, k: int, dev: DeviceLimits) -> list[tuple]:
    """(config, prediction) for the configs ``dev`` can run, best score first (ties by name)."""
    scored = [(c, predict(c, m, n, k, dev)) for c in configs if unfit_reason(c, dev) is None]
    scored = [item for item in scored if item[1]["blocks_per_sm"] > 0]
    return sorted(scored, key=lambda item: (-item[1]["score"], item[0].name))


def select(ranked: list[tuple], count: int, seeds: tuple = ()) -> list[tuple]:
    """Up to ``count`` of ``ranked`` for measurement: ``seeds`` (config names, e.g. the presets;
    in their order, cut at ``count``) first, then breadth over tile shapes. Round r takes the r-th best variant of every
    ``cfg.tile_shape()`` group (BM, BN, BK and how the block is split among warps or
    warpgroups), groups in order of their best score."""
    groups: dict[tuple, list[tuple]] = {}
    for item in ranked:
        c = item[0]
        groups.setdefault(c.tile_shape(), []).append(item)
    order = {name: i for i, name in enumerate(seeds)}
    chosen = sorted((item for item in ranked if item[0].name in order),
                    key=lambda item: order[item[0].name])[:count]  # never over count
    names = {item[0].name for item in chosen}
    depth = max((len(g) for g in groups.values()), default=0)
    for r in range(depth):
        for group in groups.values():
            if len(chosen) >= count:
                return chosen
            if r < len(group) and group[r][0].name not in names:
                chosen.append(group[r])
                names.add(group[r][0].name)
    return chosen
