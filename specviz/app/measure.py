"""Latency of one target pass for the "Why it is free" page, run inside the engine gate."""

from __future__ import annotations

import statistics
import time

import torch

from .gate import heavy_work


def measure_forward(target, n_tokens: list[int], context: int = 128, batch: int = 1, repeats: int = 5, progress=None,
                    blocks: bool = True) -> list[dict]:
    """Median wall time of one target forward of `batch` x N new tokens after a context of
    `context` tokens, for each N (the cache is rewound between repeats). Tokens are fixed
    pseudo-random ids: latency does not depend on which tokens they are. `blocks=False`: dense weights."""
    with heavy_work():
        return _measure_forward(target, n_tokens, context, batch, repeats, progress, blocks)


def _measure_forward(target, n_tokens, context, batch, repeats, progress, blocks=True):
    model = target.model
    gen = torch.Generator().manual_seed(0)
    V = model.cfg.vocab_size
    ctx = torch.randint(0, V, (batch, context), generator=gen)
    cache = model.new_cache(context + max(n_tokens) + 1, batch=batch)
    model.forward(ctx, cache, last_only=True)
    cache.commit()
    out = []
    total = len(n_tokens) * (repeats + 1)
    done = 0
    for n in n_tokens:
        toks = torch.randint(0, V, (batch, n), generator=gen)
        times = []
        for r in range(repeats + 1):  # first run is a warm-up, not counted
            t0 = time.perf_counter()
            model.forward(toks, cache, blocks=blocks)
            dt = time.perf_counter() - t0
            cache.truncate(context)
            if r:
                times.append(dt * 1000)
            done += 1
            if progress:
                progress(done / total)
        out.append({"n": n, "batch": batch, "ms": statistics.median(times), "min": min(times), "max": max(times)})
    return out
