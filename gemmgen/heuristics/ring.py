"""The shape rules' last step: the shaped config's ring of shared-memory stages made as deep as
shared memory allows, staging C through chunk buffers where that leaves room for a deeper ring
(``deepen``), and the config settled into the family's rules (``settle``)."""
from __future__ import annotations

from ..model.families.hopper.waiter import takes_waiter

MAX_STAGES = 8
"""The deepest ring the shape rules ask for (6 against 3 stages: 363 against 220 TFLOP/s at
128 x 8192 x 8192 swapped; 8 stages, 409 TFLOP/s; paths_NVIDIA_H200.json)."""
C_STAGES = (2, 1)
"""C staging buffers the rules try where the whole staged tile limits the ring (``deepen``):
a fourth stage at 128 x 192 ran 1.06-1.09x the third's speed on an H100 (M = 4096, 8192;
stages_probe_NVIDIA_H100_80GB_HBM3.json); the rules with them ran the layers whose kernel
changed 1.029x (H100) and 1.013x (H200) faster than without (c_stages_*.json)."""
ONE_CONSUMER = {"consumers": 1, "regs_producer": 0, "regs_consumer": 0}
"""A 64-row tile's warpgroups: one consumer, no setmaxnreg split."""
MAX_STAGES_WAITER = 16
"""The deepest ring the shape rules ask for where one consumer meets the waiter warp: with the
consumer's own poll gone the loads set the pace, and more of them in flight keep it. The
layers whose kernel changed with the waiter and this ring (241 of 328 at M = 1 to 512) ran
1.025x / 1.022x (training / held-out geomean) as fast as before (waiter_ab_NVIDIA_H200.json);
the waiter alone, 1.004x / 1.001x (waiter_NVIDIA_H200.json)."""


def deepen(cfg, changes, reasons) -> None:
    """The deepest ring (up to MAX_STAGES; MAX_STAGES_WAITER for one consumer, which then
    meets the waiter warp) the shaped config's shared memory allows: every candidate of the
    table builder measured fastest at its deepest ring. Where staging C
    through C_STAGES chunk buffers instead of the whole tile leaves room for a deeper ring,
    it does so, with the most buffers that give that ring; not for an epilogue with vectors
    (a bias, scales) nor a tree (or the dual GEMM, or the overlap). At 128 x 256 two buffers
    leave no room for the vectors, which the epilogue then reads from global memory (acc *
    col_scale + bias: 26.8% over the plain kernel at 4096^3 against -1.5% with the whole tile
    staged), and one buffer, which room is left beside, serializes the chunks' stores: a bias
    cost 2.3% and 5.2% over the plain kernel at 4096^3 and 4096 x 14336 x 4096 with one
    buffer and 4 stages, 1.2% and 0.6% with the whole tile and 3 (H200, the mean of three
    runs of epilogue_cost.py)."""
    shaped = waited(cfg.replace(check=False, **changes), reasons)
    most = most_stages(shaped)
    if shaped.waiter:  # its ring already as deep as fits, up to MAX_STAGES_WAITER
        changes["waiter"] = True
    whole = shaped.stages if shaped.waiter else max(deepest(shaped, most), cfg.stages)
    trial = shaped.replace(check=False, stages=whole)
    ring, buffers = deepest_buffered(  # none deeper than the deepest there is
        shaped, () if trial.extended or trial.vectors or whole >= most else C_STAGES, most)
    if ring > whole:
        changes.update(stages=ring, c_stages=buffers)
        reasons.append(f"{ring} stages: the ring as deep as shared memory allows with C "
                       f"staged through {buffers} chunk buffer{'s' if buffers > 1 else ''} "
                       f"({whole} with the whole tile staged)")
    elif whole != cfg.stages:
        changes["stages"] = whole
        reasons.append(f"{whole} stages: the ring as deep as shared memory allows")


def most_stages(cfg) -> int:
    """The deepest ring the shape rules ask for ``cfg``'s kind: MAX_STAGES_WAITER with the
    waiter warp, else MAX_STAGES."""
    return MAX_STAGES_WAITER if getattr(cfg, "waiter", False) else MAX_STAGES


def waited(cfg, reasons):
    """``cfg`` with the waiter warp and the deepest ring of up to MAX_STAGES_WAITER stages that
    fits where its rules allow the waiter (``takes_waiter``: one consumer warpgroup beside a
    producer; for the fp8 family, fast accumulation), else ``cfg`` as it is. The wgmma rules
    (``deepen``) and the fp8 decode rules ask it (fp8_waiter_NVIDIA_H200.json: see the fp8
    family's docs)."""
    if not takes_waiter(cfg):
        return cfg
    out = cfg.replace(check=False, waiter=True)
    reasons.append("a waiter warp tells the one consumer when a stage is full")
    return out.replace(check=False, stages=max(deepest(out, MAX_STAGES_WAITER), cfg.stages))


def deepest(cfg, most: int = MAX_STAGES) -> int:
    """The most stages, up to ``most``, at which ``cfg`` breaks no rule; 0 where none does.
    The search starts at the most stages whose shared memory fits (a Hopper config's bytes
    grow by one stage's with each stage: H09), where a deeper ring would break that rule."""
    one, two = (cfg.replace(check=False, stages=st).env() for st in (1, 2))
    if "SMEM_OPTIN" in one and two["SMEM_BYTES"] > one["SMEM_BYTES"]:
        stage = two["SMEM_BYTES"] - one["SMEM_BYTES"]
        most = min(most, max(1 + (one["SMEM_OPTIN"] - one["SMEM_BYTES"]) // stage, 0))
    return next((st for st in range(most, 0, -1)
                 if not cfg.replace(check=False, stages=st).violations()), 0)


def deepest_buffered(cfg, buffers, most: int = MAX_STAGES) -> tuple[int, int]:
    """(stages, c_stages): the deepest ring (up to ``most`` stages) that ``cfg`` fits with C
    staged through one of ``buffers`` chunk buffers, with the most buffers among those giving
    it; (0, 0) where none fits or ``buffers`` is empty. The wgmma shape rules' ``deepen`` and
    the fp8 rules' weigh it against the whole staged tile."""
    return max(((deepest(cfg.replace(check=False, c_stages=b), most), b) for b in buffers),
               default=(0, 0))


def settle(cfg, changes, reasons):
    """``cfg`` with ``changes``, its tile N rounded up to whole swizzle blocks where a rule asks;
    None (with the reason) when the shaped config still breaks a rule."""
    out = cfg.replace(check=False, **changes)
    broken = out.violations()
    if broken and "bn" in changes:  # e.g. a row-major B loads whole 128-byte blocks
        sw = out.sw_elems
        out = out.replace(check=False, bn=min(cfg.bn, -(-out.bn // sw) * sw))
        reasons.append(f"tile N rounded up to {out.bn}: "
                       f"{', '.join(v.rule.name for v in broken)}")
        # the wider tile may no longer fit its rows' registers or its ring: fewer rows, then
        # the deepest ring that fits
        for rows in (out.bm, 128, 64):
            one = ONE_CONSUMER if rows == 64 else {}
            trial = out.replace(check=False, bm=min(rows, out.bm), **one)
            fit = next((trial.replace(check=False, stages=st) for st in range(trial.stages, 0, -1)
                        if not trial.replace(check=False, stages=st).violations()), None)
            if fit is not None:
                out = fit
                break
    if out.violations():
        broken = ", ".join(f"{v.rule.id} {v.rule.name}" for v in out.violations())
        reasons.append(f"shaping the preset broke {broken}: the preset runs as it is")
        return None
    return out
