"""EAGLE-2's expansion, level by level, and the calibration that justifies it.

A dynamic tree keeps every candidate it scored (`DraftTree.candidates`: score = cumulative log q,
parent candidate, token). From them: each level's candidates, which were expanded (they have
children), and which the final rerank kept (`tree_build.kept_candidates`). Calibration: over real
greedy rounds, how often a drafted token is the target's own choice, against the head's confidence
in it; EAGLE-2 expands and reranks by confidence because the two track each other.
"""
from __future__ import annotations

import math

from ..core.tree_build import kept_candidates


def levels(candidates: list, total_tokens: int, token_text=str) -> list[list[dict]]:
    """[level][rank] -> candidate dicts: id, parent, token, text, q, score (cumulative log q), path
    probability, expanded (has children), kept (in the final tree). Level 1 = the root's children."""
    parents = {c[1] for c in candidates[1:]}
    kept = set(kept_candidates(candidates, total_tokens))
    depth = {0: 0}
    out: dict[int, list] = {}
    for i, (score, parent, token) in enumerate(candidates[1:], start=1):
        depth[i] = depth[parent] + 1
        q = math.exp(score - candidates[parent][0])
        out.setdefault(depth[i], []).append(dict(
            id=i, parent=parent, token=int(token), text=token_text(int(token)), q=round(q, 4), score=round(score, 4),
            path_prob=round(math.exp(score), 5), expanded=i in parents, kept=i in kept))
    return [sorted(out[d], key=lambda c: -c["score"]) for d in sorted(out)]


def summary(lv: list[list[dict]]) -> list[dict]:
    """Per level: how many candidates were scored, expanded and kept."""
    return [dict(level=d + 1, scored=len(c), expanded=sum(x["expanded"] for x in c), kept=sum(x["kept"] for x in c))
            for d, c in enumerate(lv)]


# ------------------------------------------------------------------------------ calibration
def outcomes(traces: list[dict]) -> dict:
    """(confidence, outcome) pairs from greedy round traces (RoundTrace.to_dict() form).

    At T = 0 a node's p is 1 exactly when its token is the target's choice after its parent's path,
    so every drafted node tells whether it would be accepted once its parent is: per token, x = q
    (the head's probability for the token given its parent), y = p == 1. Per path, x = the product of
    q along the path (exp of the score), y = every node on the path is the target's choice (the node
    would be accepted). Sampled rounds are skipped: there p is a probability, not a verdict."""
    token, path = [], []
    for tr in traces:
        if tr["sampling"].get("temperature", 0.0) > 0:
            continue
        good = {0: True}
        for n in tr["nodes"][1:]:  # parents come first
            if n.get("copied") or n["q"] is None or n["p"] is None:
                good[n["id"]] = False
                continue
            right = n["p"] >= 1.0
            good[n["id"]] = good[n["parent"]] and right
            token.append((float(n["q"]), bool(right)))
            path.append((math.exp(float(n["score"])), good[n["id"]]))
    return dict(token=token, path=path)


def bins(pairs: list[tuple], n_bins: int = 10) -> list[dict]:
    """Equal-width confidence bins over [0, 1]: count, accepted, mean confidence, acceptance rate."""
    out = [dict(lo=i / n_bins, hi=(i + 1) / n_bins, count=0, accepted=0, conf_sum=0.0) for i in range(n_bins)]
    for x, y in pairs:
        b = out[min(int(x * n_bins), n_bins - 1)]
        b["count"] += 1
        b["accepted"] += int(y)
        b["conf_sum"] += x
    for b in out:
        c = b.pop("conf_sum")
        b["mean_conf"] = round(c / b["count"], 4) if b["count"] else None
        b["rate"] = round(b["accepted"] / b["count"], 4) if b["count"] else None
    return out


def calibration(traces: list[dict], n_bins: int = 10) -> dict:
    """Binned calibration per token and per path, with the number of rounds and nodes it rests on."""
    oc = outcomes(traces)
    greedy = [t for t in traces if t["sampling"].get("temperature", 0.0) <= 0]
    return dict(rounds=len(greedy), nodes=len(oc["token"]), token=bins(oc["token"], n_bins),
                path=bins(oc["path"], n_bins))
