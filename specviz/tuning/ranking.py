"""The model: every tree ranked by tau(N, d) / (overhead(N) + draft(N, d) + forward(N)), and the
shortlist of its best few that is timed before one is picked."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..drafters.shape import TreeShape
from ..heads.io import shipped_head_dir
from ..runtime.machine import interpolate
from .profiles import PROFILE_FILE, load_profile

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


def profile_dir(model_name: str, method: str) -> Path | None:
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


FLOORS_ABOVE = 2  # how many probability floors above the model's best one are timed too


def shortlist(ranked: list[dict]) -> list[dict]:
    """The model's best tree, its best trees at the next FLOORS_ABOVE probability floors above its
    best floor, its best tree of a fixed size (no floor) and its best 2-node tree: kinds whose
    predictions fail differently, timed before one is picked. Why the higher floors: the model
    prices a low floor's marginal nodes by how often the profile's prompts kept them, and where
    they are kept less (longer contexts, other tasks) each costs a verified token for little;
    neighbouring floors sit within the model's error, so the clock chooses (docs/tuning.md)."""
    picks = [ranked[0]]
    kinds = []
    floors = [r["min_prob"] for r in ranked if "min_prob" in r]
    if floors:
        kinds.append(lambda r: "min_prob" in r)  # the best floored tree, when a fixed-size one ranks first
        for f in sorted({f for f in floors if f > floors[0]})[:FLOORS_ABOVE]:
            kinds.append(lambda r, f=f: r.get("min_prob") == f)
    kinds += [lambda r: "min_prob" not in r, lambda r: r["total_tokens"] == 2 and "min_prob" not in r]
    for kind in kinds:
        r = next((r for r in ranked if kind(r)), None)
        if r is not None and r not in picks:
            picks.append(r)
    return picks


def shape_key(cand: dict) -> tuple:
    """What identifies a candidate tree (a cached pick is re-timed when its candidates differ)."""
    return cand.get("depth"), cand["total_tokens"], cand.get("min_prob")


def candidate_shape(profile: dict, cand: dict) -> TreeShape:
    """The tree of a ranked candidate; a dynamic tree draws its drafts from q at T > 0, as every tuned
    EAGLE-2/3 drafter does (specviz.methods)."""
    if profile["kind"] == "dynamic":
        return TreeShape.dynamic(cand["depth"], profile["top_k"], cand["total_tokens"], float(cand.get("min_prob", 0.0)),
                                 draw="sample")
    return TreeShape.static(profile["paths"][: cand["total_tokens"] - 1])


