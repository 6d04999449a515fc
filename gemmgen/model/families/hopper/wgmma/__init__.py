"""The Hopper tensor-core family: ``wgmma.mma_async`` fed by TMA (``cp.async.bulk.tensor``)
through an mbarrier ring, with warp specialization, ``setmaxnreg``, a persistent tile scheduler,
TMA multicast across a 2-CTA cluster and a TMA-store epilogue. sm_90a only.

Techniques and the figures they are checked against come from public Hopper kernels (see
``../shared/reference/hopper-gemm-notes.md``): fast.cu kernels 2-12 (the ladder), CUTLASS's
sm90 warp-specialized cooperative and ping-pong kernels, DeepGEMM (stage count from the
shared-memory budget, BK = 128 bytes / element size) and ThunderKittens (wgmma descriptors for
MN-major operands).

Layout: ``rules`` (constants and the rule table), ``config`` (the frozen config and its
geometry), ``env`` (what the template and header read), ``space`` (ladder presets, search
space, the fallback family, the ``FAMILY`` descriptor).
"""
from .config import WgmmaConfig
from .rules import WGMMA_RULES
from .space import FAMILY, PRESETS, fallback, space

__all__ = ["WgmmaConfig", "WGMMA_RULES", "FAMILY", "PRESETS", "fallback", "space"]
