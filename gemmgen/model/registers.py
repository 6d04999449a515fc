"""Register estimates before compiling: what a config needs, what its launch bounds leave, and
whether ptxas would spill. They keep spilling configurations out of the tuning space and out of
ConfigError's suggestions."""
from __future__ import annotations

REG_ALLOC_UNIT = 256  # registers are allocated per warp in units of 256


def register_cap(cfg) -> int:
    """Registers per thread ptxas may use: 255, or less under __launch_bounds__(threads,
    min_blocks). A family whose kernels set their own limit (setmaxnreg) defines
    ``cfg.register_cap()``, which is used instead."""
    own = getattr(cfg, "register_cap", None)
    if callable(own):
        return own()
    return min(255, 65536 // max(1, cfg.threads * cfg.min_blocks) // 8 * 8)


def registers_needed(cfg) -> int:
    """Registers per thread the kernel needs to run without spilling, estimated before
    compiling by the family (``cfg.registers_needed()``, calibrated against ptxas)."""
    return cfg.registers_needed()


def spill_risk(cfg) -> str | None:
    """Why ptxas would likely spill ``cfg`` (the estimate exceeds the register cap that its
    threads and min_blocks leave, or the family's ``cfg.stack_risk()`` names a stack frame
    ptxas would give it whatever its registers), or None. Keeps spilling configurations out of the tuning
    space and out of suggestions."""
    stack = getattr(cfg, "stack_risk", None)
    reason = stack() if callable(stack) else None
    if reason:
        return reason
    need, cap = registers_needed(cfg), register_cap(cfg)
    if need <= cap:
        return None
    return (f"needs about {need} registers/thread; {cfg.threads} threads x min_blocks "
            f"{cfg.min_blocks} leave {cap}")


def estimated_registers(cfg) -> int:
    """Registers per thread at launch, before compiling: what it needs, within its cap. A
    family whose kernels reassign registers after launch (setmaxnreg) defines
    ``cfg.launch_registers()``, the count the block is launched with."""
    own = getattr(cfg, "launch_registers", None)
    if callable(own):
        return own()
    return min(register_cap(cfg), registers_needed(cfg))
