"""A Llama-style decode loop, batch 1, PyTorch beside the same model patched by
``gemmgen.torch.patch``: time per token, eager (host included) and CUDA-graph-captured.

The model: ``LAYERS`` decoder layers of Llama-3-8B's dimensions (hidden 4096, 32 query and 8
key/value heads of 128, SwiGLU MLP of 14336), bf16, RMSNorm, no rotary embedding, a static KV
cache of ``CACHE`` positions read through a mask (so one step is one graph whatever its
position). Patched, every projection is ``gemmgen.torch.Linear`` and the MLP's gate and up run
as ``gemmgen.torch.swiglu`` (M = 1: PyTorch's formula, called from the compiled launcher).
Each step's output is checked against the unpatched model's (relative error, bf16).

Eager: ``TOKENS`` steps back to back between CUDA events, median of 5. Graph: one step
captured, replayed ``TOKENS`` times between CUDA events, median of 5. Each model's figure is
the median of ``ROUNDS`` rounds that alternate the two. Both under ``torch.no_grad()`` (as
transformers' ``generate`` runs) and under ``torch.inference_mode()``.

Usage on the GPU machine, from the repository root:
    PYTHONPATH=$PWD python3 benchmarks/investigations/decode_loop.py
writes $OUT/decode_loop.json when $OUT is set."""
import copy
import json
import os
import statistics

import torch
from torch import nn
from torch.nn import functional as F

import gemmgen.torch as gt

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER = 4096, 32, 8, 128, 14336
LAYERS = int(os.environ.get("DECODE_LAYERS", "6"))
CACHE = 512
TOKENS = 64
ROUNDS = 3


class MLP(nn.Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)), as transformers' LlamaMLP."""

    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.up_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.down_proj = nn.Linear(INTER, HIDDEN, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(HIDDEN), nn.RMSNorm(HIDDEN)
        self.q_proj = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        self.k_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)
        self.mlp = MLP()
        self.register_buffer("k_cache", torch.zeros(1, KV_HEADS, CACHE, HEAD_DIM))
        self.register_buffer("v_cache", torch.zeros(1, KV_HEADS, CACHE, HEAD_DIM))

    def forward(self, x, pos, mask):
        h = self.norm1(x)
        q = self.q_proj(h).view(1, 1, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k_proj(h).view(1, 1, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v_proj(h).view(1, 1, KV_HEADS, HEAD_DIM).transpose(1, 2)
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        a = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask,
                                           enable_gqa=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(1, 1, HEADS * HEAD_DIM))
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))

    def forward(self, x, pos):
        mask = (torch.arange(CACHE, device=x.device) <= pos).view(1, 1, 1, CACHE)
        for layer in self.layers:
            x = layer(x, pos, mask)
        return x


def per_token_ms(step, pos) -> float:
    """Milliseconds per token of ``step()`` run TOKENS times between CUDA events (``pos`` set
    to each token's place first), median of 5."""
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for t in range(TOKENS):
            pos.fill_(t)
            step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / TOKENS)
    return statistics.median(times)


def eager_ms(model, x, pos) -> float:
    """Milliseconds per token, the model called step by step (host included)."""
    return per_token_ms(lambda: model(x, pos), pos)


def graph_ms(model, x, pos) -> float:
    """Milliseconds per token, one step captured and replayed."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            model(x, pos)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            model(x, pos)
    torch.cuda.synchronize()
    ms = per_token_ms(graph.replay, pos)
    del graph
    return ms


def timings(base, ours, x, pos) -> dict:
    """Per-token milliseconds of both models, eager and graph, each the median of ROUNDS
    rounds that alternate the two (the host's pace drifts)."""
    row = {}
    for mode, fn in (("eager", eager_ms), ("graph", graph_ms)):
        theirs, mine = [], []
        for _ in range(ROUNDS):
            theirs.append(fn(base, x, pos))
            mine.append(fn(ours, x, pos))
        row[f"{mode}_ms_per_token"] = statistics.median(mine)
        row[f"{mode}_torch_ms_per_token"] = statistics.median(theirs)
        row[f"{mode}_time_x_torch"] = statistics.median(mine) / statistics.median(theirs)
    return row


def main():
    torch.manual_seed(0)
    base = Model().to("cuda", torch.bfloat16)
    ours = copy.deepcopy(base)
    summary = gt.patch(ours, swiglu_mlp=(MLP,))
    x = torch.randn(1, 1, HIDDEN, device="cuda").to(torch.bfloat16)
    pos = torch.zeros(1, dtype=torch.long, device="cuda")
    rows = []
    for mode, ctx in (("no_grad", torch.no_grad), ("inference_mode", torch.inference_mode)):
        with ctx():
            errs = []
            for t in range(8):
                pos.fill_(t)
                want, got = base(x, pos).double(), ours(x, pos).double()
                errs.append(float((got - want).norm() / want.norm()))
            row = {"mode": mode, "layers": LAYERS, "swapped": len(summary.swapped),
                   "max_error_vs_pytorch": max(errs),
                   "ok": all(e == e and e < 2e-2 for e in errs), **timings(base, ours, x, pos)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    out = {"gpu": torch.cuda.get_device_name(), "rows": rows,
           "what": "Llama-3-8B-sized decode step, batch 1, bf16: time per token, gemmgen-"
                   "patched over PyTorch (below 1.0: gemmgen faster)"}
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "decode_loop.json"), "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
