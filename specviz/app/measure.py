"""Latency of one target pass for the "Why it is free" page: `specviz.runtime.machine`'s measurement
(shared with the tree tuner and the benchmark), run inside the engine gate, in milliseconds."""

from __future__ import annotations

import statistics

from ..runtime.machine import pass_times
from .gate import heavy_work


def measure_forward(target, n_tokens: list[int], context: int = 128, batch: int = 1, repeats: int = 5, progress=None,
                    blocks: bool = True) -> list[dict]:
    """For each N: median, min and max ms of one target pass of `batch` x N new tokens after
    `context` tokens (a warm-up pass first; the cache is rewound between repeats). `blocks=False`:
    dense weights."""
    with heavy_work():
        times = pass_times(target.model, n_tokens, context, repeats, batch=batch, blocks=blocks, progress=progress)
    return [{"n": n, "batch": batch, "ms": 1000 * statistics.median(ts), "min": 1000 * min(ts), "max": 1000 * max(ts)}
            for n, ts in times.items()]
