"""A small batched measurement on this machine, for the page's "Run it here": the benchmark's
batched runs (specviz.bench.batched) over a few built-in prompts, returned in the benchmark's own
report format (`by_batch`), so the page draws it with the same figures as the shipped curves."""

from __future__ import annotations

import datetime as dt
from typing import Callable

from ..drafters.base import describe_tree
from .batched import measure as measure_batches
from ..runtime.machine import machine
from ..core.sampling import SamplingParams


def measure(target, makers: dict[str, Callable], prompts: list[str], sizes: list[int], max_new: int = 24,
            params: SamplingParams = SamplingParams(), seed: int = 0, progress: Callable[[float], None] | None = None) -> dict:
    """Decode `prompts` in full batches of every B in `sizes` with each method of `makers` (name ->
    a function building a fresh drafter): `specviz.bench.batched.measure`, as a report the page draws."""
    ids = [target.tokenizer.chat_ids(p) for p in prompts]
    sizes = sorted(set(int(b) for b in sizes))
    report = {"kind": "batch", "machine": machine(), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "settings": {"max_new_tokens": max_new, "temperature": params.temperature, "prompts": len(prompts), "live": True},
              "batch_sizes": sizes, "trees": {s: describe_tree(make(), params) for s, make in makers.items()}}
    report["by_batch"] = measure_batches(target, makers, ids, sizes, max_new, params, seed, progress=progress)
    return report
