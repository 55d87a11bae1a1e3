"""Tree profiles: how much a head's trees of every size and depth would accept (device independent).

One calibration run with the papers' tree records, at every position, what each smaller tree
would have accepted; the profile ships beside the head as `tree_profile.json`.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

from .. import SpecVizError
from ..drafters.base import Drafter, WrappedDrafter
from ..core.engine import SpeculativeDecoder
from ..core.tree import DraftTree

MAX_DEPTH = 8  # deepest dynamic tree profiled
MIN_PROBS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8)  # path-probability floors profiled
PROFILE_FILE = "tree_profile.json"


class Recorder(WrappedDrafter):
    """Wraps a drafter: keeps each proposed tree but hands the engine the root alone.

    The engine then decodes one token per round (vanilla speed and output), and every position
    of the output becomes a calibration sample for every tree size at once.
    """

    def __init__(self, inner: Drafter):
        super().__init__(inner)
        self.trees = []

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
    """For depth caps d = 1..max_depth, what tree_build.build_dynamic_tree(min_prob=...) would do with
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
        # node k of a static tree is the k-th path in (length, path) order (tree_build.static_tree_shape)
        paths = sorted((list(p) for p in paths), key=lambda p: (len(p), p))
        count = [0] * (len(paths) + 1)
    rec = Recorder(inner)
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


