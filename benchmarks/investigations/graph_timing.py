"""The timings the investigation scripts share: CUDA-graph (kernel time only) and eager (host
included); the suites time through ``gemmgen.tune.measure``."""
from __future__ import annotations

import statistics

import torch

from gemmgen.runtime.workspaces import release_captures


def graph_ms(launch, reps: int, replays: int, warmup: int = 2, stream=None) -> float:
    """Milliseconds per launch: ``launch(0)`` .. ``launch(reps - 1)`` captured into one CUDA
    graph on ``stream`` (a new side stream by default) after ``warmup`` launches there, the graph
    replayed ``replays`` times between CUDA events, the median. The graph is then dropped, and
    with it the gemmgen workspaces its capture kept (``release_captures``): a script that
    captures thousands of graphs would otherwise run out of device memory."""
    stream = stream or torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(warmup):
            launch(i)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for i in range(reps):
                launch(i)
    torch.cuda.synchronize()
    ms = _events_ms(graph.replay, reps, replays)
    del graph
    torch.cuda.synchronize()
    release_captures(torch.cuda.current_device(), stream.cuda_stream)
    return ms


def eager_ms(launch, reps: int, replays: int, warmup: int = 3) -> float:
    """Milliseconds per launch, host included: ``launch(0)`` .. ``launch(reps - 1)`` back to
    back on a side stream between CUDA events after ``warmup`` launches, ``replays`` times, the
    median."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(warmup):
            launch(i)
        torch.cuda.synchronize()

        def calls():
            for i in range(reps):
                launch(i)
        return _events_ms(calls, reps, replays, stream)


def _events_ms(body, per: int, replays: int, stream=None) -> float:
    """The median over ``replays`` runs of ``body()`` between two CUDA events on ``stream``
    (the current one by default), in milliseconds divided by ``per``."""
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(stream)
        body()
        b.record(stream)
        b.synchronize()
        times.append(a.elapsed_time(b) / per)
    return statistics.median(times)
