"""The wgmma family's constants and rule table: the rules every Hopper kernel obeys
(``families.hopper``) and those of this family's own axes."""
from __future__ import annotations

from ....rules import Rule, at_least, at_most, equal, multiple_of, one_of
from .. import C_STAGED, HOPPER_RULES, OUTPUT_RULES
from .. import C_STAGES_RULES as HOPPER_C_STAGES_RULES

MATHS = ("native", "3xtf32")
"""``math``: the dtype's own products, or 3xTF32 (three tf32 products per float32 product)."""
PACK_TILE = 32                     # the pack kernels move 32 x 32 element tiles
PACK_ROWS = 8                      # ... with 32 x 8 threads
PTX_TYPES = {"fp16": "f16", "bf16": "bf16", "tf32": "tf32"}
DEFER_UNITS = 2                    # overlap: 16-byte units of the staged tile per thread per pass
OVERLAP_RESERVE = 24               # overlap: registers of a deferred pass beside the accumulators

C_STAGES_RULES: tuple[Rule, ...] = HOPPER_C_STAGES_RULES + (
    Rule("H59", "c-stages-whole-tile", equal("C_WHOLE_TILE", 0),
         "the overlap's deferred passes and a staged residual read the whole staged tile: "
         "c_stages 0", when=C_STAGED),
)
"""The rules of C staged in chunk buffers (``c_stages``), which only such kernels assert."""

WGMMA_RULES: tuple[Rule, ...] = HOPPER_RULES + OUTPUT_RULES + (
    Rule("H18", "a-mn-major-16bit", equal("A_MN_MAJOR", 0),
         "an MN-major (column-major) A exists only for 16-bit wgmma inputs, not tf32",
         when=equal("DTYPE_TF32", 1)),
    Rule("H19", "b-mn-major-16bit", equal("B_MN_MAJOR", 0),
         "an MN-major (row-major) B exists only for 16-bit wgmma inputs, not tf32: take "
         "layout 'rc?' or the WMMA family", when=equal("DTYPE_TF32", 1)),
    Rule("H23", "cluster-persistent", equal("PERSISTENT", 1),
         "a cluster launch uses the persistent grid, whose size is a multiple of the cluster",
         when=at_least("CLUSTER", 2)),
    Rule("H24", "b-multicast-split", multiple_of("B_SPLIT_UNITS", "CLUSTER_M"),
         "the CTAs of a cluster along M each load an equal share of the B tile they multicast"),
    Rule("H25", "a-multicast-split", multiple_of("A_SPLIT_UNITS", "CLUSTER_N"),
         "the CTAs of a cluster along N each load an equal share of the A tile they multicast"),
    Rule("H26", "pingpong-consumers", equal("CONSUMERS", 2),
         "ping-pong alternates tiles between two consumer warpgroups",
         when=equal("PINGPONG", 1)),
    Rule("H27", "pingpong-persistent", equal("PERSISTENT", 1),
         "ping-pong hands out tiles from the persistent scheduler", when=equal("PINGPONG", 1)),
    Rule("H28", "persistent-producer", equal("PRODUCER", 1),
         "a persistent kernel loads the next tile while consumers finish this one: it needs "
         "the producer warpgroup", when=equal("PERSISTENT", 1)),
    Rule("H29", "no-producer-one-consumer", equal("CONSUMERS", 1),
         "without a producer warpgroup one warpgroup both loads and computes",
         when=equal("PRODUCER", 0)),
    Rule("H36", "split-k-direct", equal("STORE_TMA", 0),
         "split-K slices store fp32 partial sums from registers (store direct); the reduction "
         "kernel applies alpha, beta, bias and the activation once (an inline reduction stores "
         "C as an unsplit kernel does)", when=equal("SPLIT_APART", 1)),
    Rule("H37", "3xtf32-dtype", equal("DTYPE_TF32", 1),
         "3xTF32 splits float32 operands into tf32 big + small parts: dtype tf32",
         when=equal("MATH_3XTF32", 1)),
    Rule("H39", "split-inline-slices", at_least("SPLIT_K", 2),
         "an inline split-K reduction needs two or more slices of K",
         when=equal("SPLIT_INLINE", 1)),
    Rule("H40", "split-inline-cluster", equal("CLUSTER", 1),
         "an inline split-K reduction counts the slices of each CTA tile: clusters of one CTA",
         when=equal("SPLIT_INLINE", 1)),
    Rule("H41", "split-inline-cooperative", equal("PINGPONG", 0),
         "an inline split-K reduction sums the slices in the consumers' registers: a ping-pong "
         "consumer holds a whole tile and spills (ptxas: 3.6 KB at 128x128)",
         when=equal("SPLIT_INLINE", 1)),
    Rule("H38", "flush-range", one_of("FLUSH", (1, 2, 4, 8)),
         "3xTF32 adds the tensor core's sums into the FP32 accumulators every 1, 2, 4 or 8 "
         "chunks of K"),
    Rule("H52", "c-col-scatter-rows", at_most("M_ITERS", 1),
         "a consumer writing a column-major C one element at a time (into the TMA store's "
         "staging tile, or as split-K partials) holds one 64-row wgmma slice: with two (128 "
         "rows) ptxas spills, whatever the registers (72 bytes of stack at 256x128 "
         "cooperative, TMA store, cluster 2x1; 32 at split-K 2)",
         when=equal("C_COL_SCATTER", 1)),
) + C_STAGES_RULES

_DUAL = equal("DUAL", 1)
_OVERLAP = equal("OVERLAP", 1)
WGMMA_FEATURE_RULES: tuple[Rule, ...] = (
    Rule("H42", "dual-k-major-b", equal("B_MN_MAJOR", 0),
         "a dual GEMM reads Bg and Bu as nn.Linear weights, N x K with K contiguous (layout "
         "'?c?')", when=_DUAL),
    Rule("H43", "dual-split-k", equal("SPLIT_K", 1),
         "a dual GEMM's epilogue combines both whole products: no split-K", when=_DUAL),
    Rule("H44", "dual-native", equal("MATH_3XTF32", 0),
         "a dual GEMM multiplies in the inputs' own precision (no 3xTF32)", when=_DUAL),
    Rule("H45", "overlap-persistent", equal("PERSISTENT", 1),
         "the epilogue of tile i overlaps the main loop of the CTA's next tile: a persistent "
         "kernel", when=_OVERLAP),
    Rule("H46", "overlap-tma-store", equal("STORE_TMA", 1),
         "the deferred part of the epilogue runs on the staged tile that the TMA store writes",
         when=_OVERLAP),
    Rule("H47", "overlap-16bit", equal("OUT_16BIT", 1),
         "the pre-activation is staged in C's 16-bit dtype", when=_OVERLAP),
    Rule("H48", "overlap-cooperative", equal("PINGPONG", 0),
         "ping-pong already overlaps one warpgroup's epilogue with the other's main loop",
         when=_OVERLAP),
    Rule("H49", "overlap-deferrable", equal("EPI_DEFERRABLE", 1),
         "the overlap defers the activation: the epilogue needs one whose argument holds every "
         "accumulator (gelu(acc + bias), not acc + bias)", when=_OVERLAP),
    Rule("H50", "overlap-passes", multiple_of("DEFER_UNITS_TOTAL", ("WARPGROUP", "DEFER_UNITS")),
         "each deferred pass takes DEFER_UNITS 16-byte units of a consumer's staged tile per "
         "thread", when=_OVERLAP),
    Rule("H51", "tree-split-inline", equal("SPLIT_INLINE", 0),
         "an epilogue tree, the dual GEMM and the overlap render the epilogue from the tree's "
         "program, which has no inline split-K reduction: split-K through <name>_reduce"),
)
"""Rules of the features a config may add to the family's table (an epilogue tree, the dual
GEMM, the overlap): part of a config's table, and its kernel's asserts, only when it uses one
of them, so the kernels without them keep their sources."""

STREAM_K_RULES: tuple[Rule, ...] = (
    Rule("H54", "stream-k-inline", equal("SPLIT_INLINE", 1),
         "stream-K reduces a tile's pieces as the inline split-K reduces its slices (split_k "
         "bounds the pieces of a tile)"),
    Rule("H55", "stream-k-persistent", equal("PERSISTENT", 1),
         "stream-K shares the split tail's K tiles among the persistent grid's CTAs"),
    Rule("H56", "stream-k-pieces", at_least("SPLIT_K", 3),
         "with at most two pieces a tile, every CTA of the tail would take one whole tile: "
         "split_k 3 or more"),
)
"""Rules of stream-K (``stream_k``): part of a config's table, and its kernel's asserts, only
when it uses it."""

_SPLIT_CLUSTER = "a cluster split-K"
SPLIT_CLUSTER_RULES: tuple[Rule, ...] = (
    Rule("H62", "split-cluster-slices", one_of("SPLIT_K", tuple(range(2, 9))),
         f"{_SPLIT_CLUSTER} runs each tile's slices as one cluster: 2 to 8 slices (the portable "
         "cluster size)"),
    Rule("H63", "split-cluster-alone", equal("CLUSTER", 1),
         f"{_SPLIT_CLUSTER}'s cluster holds the slices of one tile: no multicast cluster"),
    Rule("H64", "split-cluster-one-tile", equal("PERSISTENT", 0),
         f"{_SPLIT_CLUSTER} leaves the partials in the ring, free once the CTA's only tile is "
         "done: one tile per CTA (not persistent)"),
    Rule("H65", "split-cluster-apart", equal("SPLIT_INLINE", 0),
         f"{_SPLIT_CLUSTER} and the inline split-K are two ways of one reduction: one of them"),
    Rule("H66", "split-cluster-direct", equal("STORE_TMA", 0),
         f"{_SPLIT_CLUSTER} stores each CTA's share of the tile from registers (store direct)"),
    Rule("H67", "split-cluster-plain", equal("EXTENDED", 0),
         f"{_SPLIT_CLUSTER} sums and stores in the family's epilogue: not an epilogue tree, the "
         "dual GEMM or the overlap"),
    Rule("H68", "split-cluster-ring", at_most("SPLIT_PARTIAL_BYTES", "RING_BYTES"),
         f"{_SPLIT_CLUSTER} leaves the tile's fp32 partials (BM x BN x 4 bytes) in the ring"),
    Rule("H69", "split-cluster-cooperative", equal("PINGPONG", 0),
         f"{_SPLIT_CLUSTER} sums a tile whose rows the consumers split (cooperative)"),
    Rule("H70", "split-cluster-producer", equal("PRODUCER", 1),
         f"{_SPLIT_CLUSTER} runs beside a producer warpgroup"),
    Rule("H71", "split-cluster-native", equal("MATH_3XTF32", 0),
         f"{_SPLIT_CLUSTER} sums the inputs' own products (no 3xTF32)"),
)
"""Rules of the cluster split-K (``split_cluster``): part of a config's table, and its
kernel's asserts, only when it uses it."""
