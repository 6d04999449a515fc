"""The waiter warp's rules, shared by the Hopper families that take it (wgmma, fp8): the
producer warpgroup's second warp waits for each full stage and meets the one consumer
warpgroup at a named barrier, so the consumer does not poll the stage's mbarrier itself."""
from __future__ import annotations

from dataclasses import fields

from ...rules import Rule, equal, violations

BAR_WAITER = 15
"""The named barrier the waiter and the consumer meet at: the last of the SM's 16."""

WAITER_RULES: tuple[Rule, ...] = (
    Rule("H60", "waiter-producer", equal("PRODUCER", 1),
         "the waiter is the producer warpgroup's second warp"),
    Rule("H61", "waiter-one-consumer", equal("CONSUMERS", 1),
         "the waiter meets one consumer warpgroup: two held in step at its barrier ran slower "
         "than each polling its own (128 x 128 tiles: 546 cycles a stage against 527)"),
)
"""Rules of the waiter (a config's ``waiter``): part of a config's table, and its kernel's
asserts, only when it uses it."""


def takes_waiter(cfg) -> bool:
    """Whether ``cfg`` can take the waiter: its family has the field and none of the rules the
    waiter brings (H60, H61 and the family's own, e.g. the fp8 family's F32) breaks with it.
    The other rules are not asked: the ring is chosen after."""
    if "waiter" not in {f.name for f in fields(cfg)}:
        return False
    trial, plain = cfg.replace(check=False, waiter=True), cfg.replace(check=False, waiter=False)
    brought = set(trial.feature_rules()) - set(plain.feature_rules())
    return not violations(tuple(brought), trial.env())
