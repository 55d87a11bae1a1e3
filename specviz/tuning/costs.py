"""This device's costs, measured once and cached in the user cache: the target's pass for n tree
tokens, the drafter's time at each tree shape and the engine's other cost per round."""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import time
from pathlib import Path

import torch

from .. import SpecVizError
from ..drafters.base import NoDraft
from ..drafters.shape import TreeShape
from ..core.engine import PREFETCH_ROWS, SpeculativeDecoder
from ..examples import EXAMPLE_PROMPTS
from ..runtime.loading import cache_root
from ..runtime.machine import device_key, forward_curve, machine, runtime_id, sync

GRID = (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 64)
COSTS_VERSION = 4  # 2: drafting timed right after a target pass (cold caches), as in a real round;
# 3: the pass with the LM head over the rows the engine computes (root + likely path), not all of them;
# 4: sizes (and drafting configs) timed in turns, and the engine's per-round cost measured by tree size
STALE_FACTOR = 2.0  # cached one-token pass more than this many times slower than now: measured busy


OVERHEAD_SIZES = (2, 4, 8, 16, 24)  # tree sizes whose per-round engine cost is kept (and 1: vanilla)


class _PassClock:
    """Times, per round, the target pass and its first LM-head call (what the forward curve prices)
    by wrapping the model's two methods on the instance while a measurement runs."""

    def __init__(self, model):
        self.model, self.spent, self.heads = model, 0.0, 0

    def _timed(self, fn, head: bool):
        def run(*a, **k):
            if head and self.heads:  # later LM-head calls (rows past the prefetched ones) are overhead
                return fn(*a, **k)
            sync(self.model)
            t0 = time.perf_counter()
            out = fn(*a, **k)
            sync(self.model)
            self.spent += time.perf_counter() - t0
            self.heads += head
            return out
        return run

    def __enter__(self):
        self.model.forward = self._timed(type(self.model).forward.__get__(self.model), False)
        self.model.logits = self._timed(type(self.model).logits.__get__(self.model), True)
        return self

    def __exit__(self, *exc):
        del self.model.forward, self.model.logits

    def lap(self) -> float:
        spent, self.spent, self.heads = self.spent, 0.0, 0
        return spent


@torch.no_grad()
def _round_costs(target, drafter, configure, configs: list, sizes: dict, rounds: int = 6) -> tuple[dict, dict]:
    """Drafting seconds per config and the engine's other cost per round by tree size, both from
    real rounds of the engine (a short built-in prompt, decoded again whenever it ends), every
    config and vanilla taking turns (a warm-up turn first; each timed turn starts one further on) so
    that a drift in the machine's speed hits all alike.

    Why real rounds: the head's weights are cold after the target's pass, and proposals timed in a
    loop are several times cheaper than that; with the caches flushed by a bare weight pass instead they
    came out dearer than the same proposal inside a round (docs/runtime.md, "Measured reasons behind code
    choices"). The other cost ("overhead": LM-head rows
    past the prefetched ones, the acceptance walk, the commits, the trace) is the round minus its
    drafting, its target pass and that pass's first LM-head call (what the forward curve prices);
    "1" is a vanilla round's. It grows with the tree (~1 ms from 2 to 24 nodes here); one number
    taken at the papers' tree as round minus the curve came out 0 and priced every tree alike.
    `sizes`: tree size -> the config whose rounds give it."""
    order = [None, *dict.fromkeys([*configs, *sizes.values()])]  # None: a vanilla round
    dec, vanilla = None, None
    draft, other = {c: [] for c in order}, {c: [] for c in order}
    with _PassClock(target.model) as clock:
        for r in range(rounds + 1):
            k = r % len(order)
            for cfg in order[k:] + order[:k]:
                run = vanilla if cfg is None else dec
                if run is None or run.done:  # (a new decoder's prefill and first round are not timed)
                    run = SpeculativeDecoder(target, NoDraft() if cfg is None else drafter, seed=0, detail=False)
                    run.start(EXAMPLE_PROMPTS[0], 96)
                    run.step()
                    if cfg is None:
                        vanilla = run
                    else:
                        dec = run
                if cfg is not None:
                    configure(cfg)
                clock.lap()
                t = run.step()
                passes = clock.lap()
                if r:
                    draft[cfg].append(t.draft_time_s)
                    other[cfg].append(max(0.0, t.total_time_s - t.draft_time_s - passes))
    drafts = {c: statistics.median(draft[c]) for c in configs}
    over = {"1": statistics.median(other[None]), **{str(n): statistics.median(other[c]) for n, c in sizes.items()}}
    return drafts, over


def cost_file(model) -> Path:
    """This device's cost file for `model`: in `$SPECVIZ_TUNING_DIR` where set (the test suite points
    it at fixture costs, so no page under test times trees), else in the user cache."""
    folder = os.environ.get("SPECVIZ_TUNING_DIR") or cache_root() / "tuning"
    return Path(folder) / f"{device_key(model)}.json"


_HOLDS: set = set()  # (cost file, runtime, cached one-token time) this process already found current


def _stale(model, data: dict, path: Path, log=None) -> bool:
    """Cached costs no longer describe this machine: measured with another runtime (kernel source,
    fused-layer limit, torch), or measured while the machine was busy - a one-token pass timed then is
    more than twice what it takes now. A first measurement under load would otherwise pick bad trees
    for good. (Slower now than cached is kept: the machine is busy now, the cached costs are better.)
    The timing check runs once per process and cached entry, not on every tuned drafter."""
    key = (str(path), data.get("runtime"), data["forward"].get("1"))
    if key in _HOLDS or data.get("fixture"):  # a fixture table (tests) is held as it is: never re-timed
        return False
    if data.get("version", 1) != COSTS_VERSION:
        why = "they were measured the old way (drafting with warm caches)"
    elif data.get("runtime") != runtime_id(model):
        why = "the runtime changed since they were measured"
    else:
        now = forward_curve(model, (1,), context=256, repeats=3)[1]
        if float(data["forward"]["1"]) <= STALE_FACTOR * now:
            _HOLDS.add(key)
            return False
        why = f"a one-token pass took {1000 * float(data['forward']['1']):.1f} ms then, {1000 * now:.1f} ms now"
    if log:
        log(f"measuring this device's costs again: {why}")
    return True


def device_costs(target, method: str, profile: dict, remeasure: bool = False, log=None, build=None,
                 measure: bool = True) -> dict | None:
    """Measured costs (seconds) for `method` on this device; cached after the first call.
    `build()` makes the method's drafter with the papers' tree (specviz.methods passes it).
    `measure=False`: the cached costs, or None when any is missing."""
    model = target.model
    f = cost_file(model)
    data = {}
    if f.is_file() and not remeasure:
        try:
            data = json.loads(f.read_text())
        except ValueError:
            data = {}
    if not measure:  # what was measured for this runtime, checked without timing anything
        complete = "forward" in data and f"draft.{method}" in data
        same = data.get("version", 1) == COSTS_VERSION and data.get("runtime") == runtime_id(model)
        return data if complete and same else None
    if "forward" in data and _stale(model, data, f, log):
        data = {}
    changed = False
    if "forward" not in data:
        if log:
            log("measuring the target's forward cost for 1..64 tree tokens on this device (once)")
        # the LM head only over the rows a round computes up front (engine.PREFETCH_ROWS): over all n
        # rows it would price a big tree's pass higher than the engine ever spends
        curve = forward_curve(model, GRID, context=256, repeats=5, head_rows=PREFETCH_ROWS)
        data["forward"] = {str(n): t for n, t in curve.items()}
        data["machine"], data["date"] = machine(), dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        data["runtime"] = runtime_id(model)
        data["version"] = COSTS_VERSION
        changed = True
    key = f"draft.{method}"
    if key not in data:
        if log:
            log(f"measuring {method}'s drafting cost on this device (once)")
        if build is None:
            raise SpecVizError(f"Measuring {method}'s drafting cost needs its drafter: use specviz.methods.tuned_tree.")
        drafter = build()
        if profile["kind"] == "dynamic":
            # depth d at full width ("d"), and the trees of n <= top_k nodes, which expand only
            # n - 1 nodes per level (tree_build.build_dynamic_tree) and so draft for less ("d:n")
            def configure(c):
                d, n = (int(c), profile["n_max"]) if ":" not in str(c) else map(int, str(c).split(":"))
                drafter.reshape(drafter.shape.replace(depth=d, total_tokens=n))

            top = profile.get("top_k", drafter.shape.top_k)
            small = range(2, min(top, profile["n_max"]) + 1)
            configs = [str(d) for d in range(1, profile["max_depth"] + 1)]
            configs += [f"{d}:{n}" for d in range(1, profile["max_depth"] + 1) for n in small]
            sizes = {n: f"1:{n}" if n <= top + 1 else f"3:{n}" for n in OVERHEAD_SIZES if n <= profile["n_max"]}
        else:
            def configure(n):
                drafter.reshape(TreeShape.static(profile["paths"][: n - 1]))

            configs = list(range(2, len(profile["paths"]) + 2))
            sizes = {n: n for n in OVERHEAD_SIZES if n <= len(profile["paths"]) + 1}
        drafts, over = _round_costs(target, drafter, configure, configs, sizes)
        data[key] = {str(k): v for k, v in drafts.items()}
        data[f"overhead.{method}"] = over
        # one number for the what-if page: a small tree's round (the size a CPU ends up tuned to)
        data.setdefault("overhead", over.get("2", over["1"]))
        changed = True
    if changed:
        save_costs(model, data)
    return data


def save_costs(model, data: dict) -> None:
    f = cost_file(model)
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(data, indent=1))


