"""Device-tuned draft trees: the tree size that maximises expected tokens per second *here*.

Two measurements, kept apart because they change for different reasons:

* the head's **acceptance profile** (greedy, device independent, shipped beside the head as
  `tree_profile.json`): for every tree size N and depth d, the mean accepted length tau(N, d)
  that tree would have had. One calibration run answers every size. An EAGLE-2 tree of N nodes
  and depth d is the best N-1 of the same scored candidates, and a greedy walk accepts exactly
  the longest prefix of the target's own continuation that lies in the tree. Static trees
  (EAGLE-1, Medusa) rank their nodes by how often each was on the target's path, so a smaller
  static tree keeps the nodes that earn the most.
* the device's **costs** (measured once, cached per device, precision and model in the user
  cache): the target's forward time for n tree tokens after a few hundred cached ones (sizes
  timed in turns), and, from real rounds of the engine, the drafter's time at each tree shape
  and the engine's other cost per round at each size.

The model ranks every tree by tau(N, d) / (overhead(N) + draft(N, d) + forward(N)); its best few
(`shortlist`) and vanilla are then timed on a few built-in prompts and the fastest measured tree
is the choice (cached with the costs). Dynamic trees are also
profiled with a floor on the path probability (`min_prob`, tree.build_dynamic_tree): the tree is
then as large as the head is sure, so each round's size varies and the profile keeps, per floor
and depth, how often each (levels drafted, frontier width, tree size) occurred, to price it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import statistics
import time
from pathlib import Path

import torch

from .. import SpecVizError
from ..drafters.base import Drafter, NoDraft
from ..drafters.shape import TreeShape
from ..engine import PREFETCH_ROWS, SpeculativeDecoder
from ..examples import EXAMPLE_PROMPTS
from ..heads.io import shipped_head_dir
from ..loading import cache_root
from ..machine import device_key, forward_curve, interpolate, machine, runtime_id, sync
from ..sampling import SamplingParams
from ..tree import DraftTree

GRID = (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 64)
MAX_DEPTH = 8  # deepest dynamic tree profiled
MIN_PROBS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8)  # path-probability floors profiled
PROFILE_FILE = "tree_profile.json"
COSTS_VERSION = 4  # 2: drafting timed right after a target pass (cold caches), as in a real round;
# 3: the pass with the LM head over the rows the engine computes (root + likely path), not all of them;
# 4: sizes (and drafting configs) timed in turns, and the engine's per-round cost measured by tree size
STALE_FACTOR = 2.0  # cached one-token pass more than this many times slower than now: measured busy


# ----------------------------------------------------------------------------- profiles
class _Recorder(Drafter):
    """Wraps a drafter: keeps each proposed tree but hands the engine the root alone.

    The engine then decodes one token per round (vanilla speed and output), and every position
    of the output becomes a calibration sample for every tree size at once.
    """

    sampled = False

    def __init__(self, inner: Drafter):
        self.inner, self.trees = inner, []
        self.name, self.taps = inner.name, inner.taps

    def reset(self, context, taps):
        self.inner.reset(context, taps)

    def commit(self, processed, taps):
        self.inner.commit(processed, taps)

    def snapshot(self):
        return self.inner.snapshot()

    def restore(self, snap):
        self.inner.restore(snap)

    def propose(self, context, root, params, generator):
        self.trees.append(self.inner.propose(context, root, params, generator))
        return DraftTree(tokens=[int(root)], parents=[-1], q=[1.0])


def _chain(children: dict, cont: list[int]) -> list[int]:
    """Node ids along the target's own continuation, as far as the candidates reach."""
    out, node = [], 0
    for tok in cont:
        node = children.get((node, tok))
        if node is None:
            break
        out.append(node)
    return out


def _depths_and_chain(cands: list, cont: list[int], max_depth: int) -> tuple[list[int], list[int]]:
    """Each candidate's depth, and the candidates along the target's continuation (its first
    max_depth tokens)."""
    depth = [0] * len(cands)
    children = {}
    for i in range(1, len(cands)):
        depth[i] = depth[cands[i][1]] + 1
        children.setdefault((cands[i][1], cands[i][2]), i)
    return depth, _chain(children, cont[:max_depth])


def dynamic_accepts(cands: list, cont: list[int], max_depth: int, n_max: int) -> list[list[int]]:
    """acc[d-1][N-1] = tokens a greedy walk accepts in the tree of N nodes and depth <= d."""
    depth, chain = _depths_and_chain(cands, cont, max_depth)
    acc = [[0] * n_max for _ in range(max_depth)]
    for d in range(1, max_depth + 1):
        # same order as build_dynamic_tree's final selection: score desc, then index
        elig = sorted((i for i in range(1, len(cands)) if depth[i] <= d), key=lambda i: (-cands[i][0], i))
        rank = {i: r for r, i in enumerate(elig)}
        worst = -1
        for k, node in enumerate(chain[:d]):
            worst = max(worst, rank[node])  # a node stays only with all its ancestors
            for n in range(worst + 2, n_max + 1):  # kept when N - 1 > worst
                acc[d - 1][n - 1] += 1
    return acc


def floor_rounds(cands: list, cont: list[int], max_depth: int, n_max: int, min_prob: float, top_k: int = 8) -> list[tuple]:
    """For depth caps d = 1..max_depth, what tree.build_dynamic_tree(min_prob=...) would do with
    these candidates: (levels drafted, widest frontier expanded after the root, tree size, tokens a
    greedy walk accepts). The candidates come from a full-width run: a node at least `min_prob`
    likely has a parent that is too, so the floored tree's candidates are the same nodes."""
    floor = math.log(min_prob)
    depth, chain = _depths_and_chain(cands, cont, max_depth)
    # candidates at least min_prob likely, in build_dynamic_tree's keep order (score desc, index)
    sure = sorted((i for i in range(1, len(cands)) if cands[i][0] >= floor and depth[i] <= max_depth),
                  key=lambda i: (-cands[i][0], i))
    sure_at = [0] * (max_depth + 2)  # how many per depth
    for i in sure:
        sure_at[depth[i]] += 1
    out = []
    for cap in range(1, max_depth + 1):
        levels = 1
        while levels < cap and sure_at[levels] > 0:
            levels += 1
        width = min(top_k, max([sure_at[k] for k in range(1, levels)] + [1]))
        kept = set([i for i in sure if depth[i] <= levels][: n_max - 1])
        acc = 0
        for node in chain:
            if node not in kept:
                break
            acc += 1
        out.append((levels, width, len(kept) + 1, acc))
    return out


def _walk(acc_at: list) -> tuple[int, int, list[int]]:
    """Decode one output with a tree whose round starting at position s accepts `acc_at[s]` drafts
    (the list ends where the known continuation does): (tokens, rounds, round starts)."""
    s = tokens = 0
    starts = []
    while s < len(acc_at):
        starts.append(s)
        tokens += acc_at[s] + 1
        s += acc_at[s] + 1
    return tokens, len(starts), starts


def collect_profile(target, inner, prompts: list, max_new_tokens: int = 96, n_max: int = 64,
                    progress=None) -> dict:
    """Calibrate the drafter `inner` (built with the papers' tree; greedy) on `prompts` and return
    its tree profile.

    tau is what a decode with that tree would get: the recorded output is walked round by round
    (a round at position s accepts what the tree drafted there, the next starts after it), not
    averaged over every position. Why: rounds land more often on the positions that are hard to
    draft (an accepted run skips the easy ones), so the average over positions was 1-2% too high
    for small trees and ~5% for the floored ones, and the tuner favoured them."""
    method = inner.name
    dynamic = inner.shape.kind == "dynamic"
    if dynamic:
        inner.reshape(inner.shape.replace(depth=MAX_DEPTH, total_tokens=n_max))
    else:
        paths = inner.shape.paths
        # node k of a static tree is the k-th path in (length, path) order (tree.static_tree_shape)
        paths = sorted((list(p) for p in paths), key=lambda p: (len(p), p))
        count = [0] * (len(paths) + 1)
    rec = _Recorder(inner)
    samples = 0
    per_prompt = []  # per prompt, per position with a known continuation: what every tree would accept there
    for j, prompt in enumerate(prompts):
        dec = SpeculativeDecoder(target, rec, seed=0, detail=False)
        dec.start(prompt, max_new_tokens)
        rec.trees = []
        dec.generate()
        gen = dec.generated
        ended = gen and gen[-1] in target.eos_ids
        horizon = MAX_DEPTH if dynamic else max(len(p) for p in paths)
        here = []
        for s, tree in enumerate(rec.trees):
            cont = gen[s : s + horizon]
            if len(cont) < horizon and not ended:
                break  # the continuation past the budget is unknown
            if dynamic and tree.candidates is None:
                here.append(0)  # a root-only tree (nothing to condition on yet): a vanilla step
                continue
            samples += 1
            if dynamic:
                floors = {p: floor_rounds(tree.candidates, cont, MAX_DEPTH, n_max, p, inner.shape.top_k) for p in MIN_PROBS}
                here.append((dynamic_accepts(tree.candidates, cont, MAX_DEPTH, n_max), floors))
            else:
                children = {(tree.parents[i], tree.tokens[i]): i for i in range(len(tree) - 1, 0, -1)}
                chain = _chain(children, cont)
                for node in chain:
                    count[node] += 1
                here.append(chain)
        per_prompt.append(here)
        if progress:
            progress(j + 1, len(prompts))
    if not samples:
        raise SpecVizError("No calibration samples: use longer generations or more prompts.")
    base = dict(method=method, samples=samples, prompts=len(prompts), max_new_tokens=max_new_tokens,
                date=dt.date.today().isoformat(), tau_from="decode walk")

    def walked(accepted) -> tuple[int, int, list]:
        """Tokens, rounds and each round's position sample over all prompts; `accepted(x)` reads
        one position's sample (0 where only a root was proposed)."""
        tokens = rounds = 0
        kept = []
        for here in per_prompt:
            t, r, starts = _walk([0 if x == 0 else accepted(x) for x in here])
            tokens, rounds = tokens + t, rounds + r
            kept += [here[s] for s in starts]
        return tokens, rounds, kept

    if dynamic:
        def tau_of(d, n):
            tokens, rounds, _ = walked(lambda x: x[0][d][n])
            return round(tokens / max(1, rounds), 4)

        tau = [[tau_of(d, n) if n else 1.0 for n in range(n_max)] for d in range(MAX_DEPTH)]
        floors = []
        for p in MIN_PROBS:
            for d in range(MAX_DEPTH):
                tokens, rounds, kept = walked(lambda x: x[1][p][d][3])
                tally = {}
                for x in kept:
                    key = (1, 1, 1) if x == 0 else x[1][p][d][:3]
                    tally[key] = tally.get(key, 0) + 1
                floors.append(dict(min_prob=p, depth=d + 1, tau=round(tokens / max(1, rounds), 4),
                                   rounds=[[*k, c] for k, c in sorted(tally.items())]))
        return dict(base, kind="dynamic", top_k=inner.shape.top_k, max_depth=MAX_DEPTH, n_max=n_max, tau=tau, floors=floors)
    order = sorted(range(1, len(paths) + 1), key=lambda i: (-count[i], i))
    rank = {node: r for r, node in enumerate(order)}  # ancestors first: a node is on the path only with them

    def accepted_with(n):
        # a tree of the first n - 1 ranked nodes accepts the chain's prefix inside it
        return lambda chain: next((k for k, node in enumerate(chain) if rank[node] >= n - 1), len(chain))

    tau = [1.0]
    for n in range(2, len(paths) + 2):
        tokens, rounds, _ = walked(accepted_with(n))
        tau.append(round(tokens / max(1, rounds), 4))
    return dict(base, kind="static", paths=[paths[i - 1] for i in order], tau=tau)


def load_profile(head_dir, method: str) -> dict | None:
    f = Path(head_dir) / PROFILE_FILE
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text()).get(method)
    except (OSError, ValueError):
        return None


def save_profile(head_dir, profile: dict) -> Path:
    f = Path(head_dir) / PROFILE_FILE
    data = json.loads(f.read_text()) if f.is_file() else {}
    data[profile["method"]] = profile
    f.write_text(json.dumps(data, indent=1))
    return f


# ----------------------------------------------------------------------------- drafting costs
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
    loop are ~3x cheaper than that; with the caches flushed by a bare weight pass instead they came
    out ~0.4 ms dearer than the same proposal inside a round. The other cost ("overhead": LM-head rows
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
    return cache_root() / "tuning" / f"{device_key(model)}.json"


_HOLDS: set = set()  # (cost file, runtime, cached one-token time) this process already found current


def _stale(model, data: dict, path: Path, log=None) -> bool:
    """Cached costs no longer describe this machine: measured with another runtime (kernel source,
    fused-layer limit, torch), or measured while the machine was busy - a one-token pass timed then is
    more than twice what it takes now. A first measurement under load would otherwise pick bad trees
    for good. (Slower now than cached is kept: the machine is busy now, the cached costs are better.)
    The timing check runs once per process and cached entry, not on every tuned drafter."""
    key = (str(path), data.get("runtime"), data["forward"].get("1"))
    if key in _HOLDS:
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
        # rows it cost a 24-node tree ~4 ms more here than the engine ever spends
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
            # n - 1 nodes per level (tree.build_dynamic_tree) and so draft for less ("d:n")
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
        _save_costs(model, data)
    return data


def _save_costs(model, data: dict) -> None:
    f = cost_file(model)
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(data, indent=1))


# ----------------------------------------------------------------------------- the choice
def rank_trees(profile: dict, costs: dict, method: str) -> list[dict]:
    """Every candidate tree with its expected tau, seconds per round and tokens per second."""
    fwd, draft = costs["forward"], costs[f"draft.{method}"]
    over = lambda n: overhead_at(costs, method, n)  # noqa: E731
    out = []
    if profile["kind"] == "dynamic":
        for d in range(1, profile["max_depth"] + 1):
            for n in range(2, profile["n_max"] + 1):
                tau = profile["tau"][d - 1][n - 1]
                sec = over(n) + float(draft.get(f"{d}:{n}", draft[str(d)])) + interpolate(fwd, n)
                out.append(dict(depth=d, total_tokens=n, tau=tau, seconds=sec, tok_s=tau / sec))
        for f in profile.get("floors", []):
            # the mean round: each recorded (levels drafted, frontier width, size) at its own cost
            sec = sum(c * (over(size) + _floor_draft(draft, levels, width) + interpolate(fwd, size))
                      for levels, width, size, c in f["rounds"]) / sum(c for *_, c in f["rounds"])
            out.append(dict(depth=f["depth"], total_tokens=profile["n_max"], min_prob=f["min_prob"], tau=f["tau"],
                            seconds=sec, tok_s=f["tau"] / sec))
    else:
        for n in range(2, len(profile["paths"]) + 2):
            tau = profile["tau"][n - 1]
            sec = over(n) + float(draft[str(n)]) + interpolate(fwd, n)
            out.append(dict(total_tokens=n, tau=tau, seconds=sec, tok_s=tau / sec))
    return sorted(out, key=lambda r: -r["tok_s"])


def overhead_at(costs: dict, method: str, n: int) -> float:
    """The engine's per-round cost outside drafting and the forward pass for an n-node tree
    (n = 1: a vanilla round), from the method's costs by size; older cost files: one number."""
    by_size = costs.get(f"overhead.{method}")
    return interpolate(by_size, n) if isinstance(by_size, dict) and by_size else float(costs.get("overhead", 0.0))


def _floor_draft(draft: dict, levels: int, width: int) -> float:
    """Drafting `levels` levels expanding `width` frontier nodes per level after the root: the
    measured small-tree cost of that width ("d:n" expands n - 1), else the full-width cost."""
    return float(draft.get(f"{levels}:{width + 1}", draft[str(levels)]))


def _profile_dir(model_name: str, method: str) -> Path | None:
    """The shipped head folder whose profile file holds `method` (EAGLE-2's lives with EAGLE-1's head)."""
    for f in sorted(shipped_head_dir(model_name, "").glob(f"*/{PROFILE_FILE}")):
        if load_profile(f.parent, method) is not None:
            return f.parent
    return None


SHORTLIST_PROMPTS, SHORTLIST_TOKENS = 8, 64  # the built-in prompts the shortlisted trees are timed on


def profile_id(profile: dict) -> str:
    """Which profile a cached pick was made from: a digest of the whole profile, so a refreshed head
    or a re-made profile (even on the same day, with as many samples) gets its trees timed again."""
    return hashlib.sha256(json.dumps(profile, sort_keys=True).encode()).hexdigest()[:16]


def shortlist(ranked: list[dict]) -> list[dict]:
    """The model's best tree, its best tree of a fixed size (no probability floor) and its best
    2-node tree: three kinds whose predictions fail differently, timed before one is picked."""
    picks = [ranked[0]]
    for kind in (lambda r: "min_prob" not in r, lambda r: r["total_tokens"] == 2 and "min_prob" not in r):
        r = next((r for r in ranked if kind(r)), None)
        if r is not None and r not in picks:
            picks.append(r)
    return picks


def candidate_shape(profile: dict, cand: dict) -> TreeShape:
    """The tree of a ranked candidate; a dynamic tree draws its drafts from q at T > 0, as every tuned
    EAGLE-2/3 drafter does (specviz.methods)."""
    if profile["kind"] == "dynamic":
        return TreeShape.dynamic(cand["depth"], profile["top_k"], cand["total_tokens"], float(cand.get("min_prob", 0.0)),
                                 draw="sample")
    return TreeShape.static(profile["paths"][: cand["total_tokens"] - 1])


@torch.no_grad()
def time_candidates(target, drafter, profile: dict, cands: list[dict], prompts, max_new_tokens: int,
                    params: SamplingParams = SamplingParams()) -> tuple[list, dict]:
    """Decode-time tokens/s and tau of each candidate tree and of vanilla (at `params`), the prompts
    taking turns and each prompt starting one method further on; `speedup`: the geometric mean over
    the prompts of each candidate's rate over vanilla's on the same prompt. Why paired: this VM's
    speed wanders by 10-20% from one second to the next, and runs of one prompt sit close in time."""
    runs = [*cands, None]  # None: vanilla
    secs, toks, rounds = [0.0] * len(runs), [0] * len(runs), [0] * len(runs)
    log_ratio = [0.0] * len(cands)
    for j, prompt in enumerate(prompts):
        k = j % len(runs)
        rate = [0.0] * len(runs)
        for i in [*range(k, len(runs)), *range(k)]:
            if runs[i] is not None:
                drafter.reshape(candidate_shape(profile, runs[i]))
            dec = SpeculativeDecoder(target, drafter if runs[i] is not None else NoDraft(), params, seed=0, detail=False)
            dec.start(prompt, max_new_tokens)
            s = n = 0
            while not dec.done:
                t = dec.step()
                s, n, rounds[i] = s + t.total_time_s, n + len(t.committed), rounds[i] + 1
            secs[i], toks[i], rate[i] = secs[i] + s, toks[i] + n, n / s
        for i in range(len(cands)):
            log_ratio[i] += math.log(rate[i] / rate[-1])
    out = [dict(c, measured_tok_s=toks[i] / secs[i], measured_tau=toks[i] / rounds[i],
                speedup=math.exp(log_ratio[i] / len(prompts))) for i, c in enumerate(cands)]
    return out, dict(tok_s=toks[-1] / secs[-1])


SAMPLED_AT = SamplingParams(temperature=1.0)  # the temperature the trees for T > 0 are timed at


def tuned_tree(target, method: str, head_dir=None, log=None, build=None, measure: bool = True) -> dict | None:
    """The best tree for `method` here, or None when the head ships no profile. The head's shipped
    profile x this device's costs rank every tree; the shortlist (`shortlist`) and vanilla are then
    timed on real rounds of a few built-in prompts (once per device and profile, cached with the
    costs) and the fastest measured tree wins. Why both: the model is cheap and covers every size,
    but its errors (~0.5 ms a round, a few % of tau) are as large as the differences between the
    best trees on a CPU, where it once picked a tree 10% slower than a 2-node one.
    The profile is greedy, so the shortlist is timed twice: greedy (the returned tree) and at
    T = 1 (`best["sampled"]`, the tree a drafter uses at any T > 0). Why: sampled rounds accept
    less, and the greedy pick (depth 2 with a path floor, session 21) ran 0.92x vanilla at T = 1
    where a 2-node tree ran 1.00x.
    `head_dir`: default, the shipped folder holding the method's profile; `build`: see
    `device_costs` (specviz.methods.tune passes both). `measure=False`: only what was measured
    before (None when anything is missing): building a drafter never starts a timing run."""
    head_dir = head_dir or _profile_dir(target.model.name, method)
    profile = load_profile(head_dir, method) if head_dir else None
    if profile is None:
        return None
    costs = device_costs(target, method, profile, log=log, build=build, measure=measure)
    if costs is None:
        return None
    ranked = rank_trees(profile, costs, method)
    picks = [_timed_pick(target, method, profile, costs, ranked, build, p, log, measure) for p in (SamplingParams(), SAMPLED_AT)]
    if None in picks:
        return None
    best = _measured_best(profile, picks[0])
    best["sampled"] = _measured_best(profile, picks[1])
    return best


def _timed_pick(target, method, profile, costs, ranked, build, params: SamplingParams, log, measure=True) -> dict | None:
    """The shortlist and vanilla timed at `params` (greedy: key `pick.<method>`, else
    `pick.<method>.sampled`), once per device and profile, cached with the costs."""
    key = f"pick.{method}" + ("" if params.greedy else ".sampled")
    pick = costs.get(key)
    if isinstance(pick, dict) and pick.get("profile") == profile_id(profile):
        return pick
    if not measure:
        return None
    if build is None:
        raise SpecVizError(f"Timing {method}'s best trees needs its drafter: use specviz.methods.tuned_tree.")
    if log:
        log(f"timing {method}'s best trees against vanilla on this device (once, at temperature {params.temperature:g})")
    cands, vanilla = time_candidates(target, build(), profile, shortlist(ranked),
                                     EXAMPLE_PROMPTS[:SHORTLIST_PROMPTS], SHORTLIST_TOKENS, params)
    pick = dict(profile=profile_id(profile), candidates=cands, vanilla_tok_s=vanilla["tok_s"],
                prompts=SHORTLIST_PROMPTS, max_new_tokens=SHORTLIST_TOKENS, temperature=params.temperature)
    costs[key] = pick
    _save_costs(target.model, costs)
    return pick


def _measured_best(profile: dict, pick: dict) -> dict:
    """The fastest timed candidate, with what the pages say is measured: tau and tokens/s of the
    timed runs (the model's guesses kept beside)."""
    best = max(pick["candidates"], key=lambda c: c.get("speedup", c["measured_tok_s"]))
    best = dict(best, model_tau=best["tau"], model_tok_s=best["tok_s"], tau=best["measured_tau"],
                tok_s=best["measured_tok_s"], vanilla_tok_s=pick["vanilla_tok_s"], kind=profile["kind"],
                temperature=pick.get("temperature", 0.0))
    best["speedup"] = best.get("speedup", best["tok_s"] / best["vanilla_tok_s"])
    if profile["kind"] == "static":
        best["paths"] = profile["paths"][: best["total_tokens"] - 1]
    else:
        best["top_k"] = profile["top_k"]  # the candidates were ranked with this many children per node
    return best


def tree_for(target, method: str, head_dir, tree_size, build=None, measure: bool = False, log=None) -> dict | None:
    """What the registry hands a drafter factory: the tuned tree for `tree_size="auto"`, None for
    the papers' fixed trees (or when `target` is a bare model without the engine's tokenizer).
    `measure=False` (building a drafter): only a tree tuned before; `specviz.methods.tune` measures."""
    if tree_size != "auto" or not hasattr(target, "tokenizer"):
        return None
    return tuned_tree(target, method, head_dir, build=build, measure=measure, log=log)
