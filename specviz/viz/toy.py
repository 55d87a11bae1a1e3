"""The acceptance rule on a toy vocabulary: exact numbers and a simulation, no model needed.

Pure numpy. `chain_rule` is the Leviathan/Chen test for one sampled draft token (accept x ~ q
with probability min(1, p(x)/q(x)), otherwise draw from norm(max(p - q, 0))); `two_candidates`
is the tree rule EAGLE-2/3 use for deterministic top-2 children (try the draft's best token x1
with probability p(x1), on rejection zero it in p and renormalise, try x2 likewise, otherwise
draw from what is left). Both produce exactly p; the functions return the pieces the page draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def normalise(v) -> np.ndarray:
    """Non-negative vector scaled to sum 1 (all-zero input gives uniform)."""
    v = np.clip(np.asarray(v, dtype=float), 0, None)
    s = v.sum()
    if s <= 0:
        return np.full(len(v), 1.0 / len(v))
    return v / s


@dataclass
class ChainParts:
    p: np.ndarray
    q: np.ndarray
    accepted: np.ndarray  # min(p, q): mass emitted as an accepted draft, per token
    alpha: float  # acceptance probability = sum min(p, q)
    residual: np.ndarray  # norm(max(p - q, 0)) (what a rejection samples from)
    from_residual: np.ndarray  # (1 - alpha) * residual = max(p - q, 0)
    output: np.ndarray  # accepted + from_residual (equals p)


def chain_rule(p, q) -> ChainParts:
    p, q = normalise(p), normalise(q)
    acc = np.minimum(p, q)
    alpha = float(acc.sum())
    excess = np.clip(p - q, 0, None)
    residual = normalise(excess) if excess.sum() > 0 else np.zeros_like(p)
    from_res = (1 - alpha) * residual
    return ChainParts(p, q, acc, alpha, residual, from_res, acc + from_res)


def simulate_chain(p, q, n: int, seed: int = 0) -> dict:
    """Draw n tokens with the chain rule; return output counts, accepted counts and the draws."""
    rng = np.random.default_rng(seed)
    parts = chain_rule(p, q)
    V = len(parts.p)
    x = rng.choice(V, size=n, p=parts.q)
    u = rng.random(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(parts.q[x] > 0, parts.p[x] / parts.q[x], 0.0)
    acc = u < np.minimum(1.0, ratio)
    out = x.copy()
    n_rej = int((~acc).sum())
    if n_rej:
        res = parts.residual if parts.residual.sum() > 0 else parts.p
        out[~acc] = rng.choice(V, size=n_rej, p=res)
    return {
        "counts": np.bincount(out, minlength=V),
        "accepted_counts": np.bincount(out[acc], minlength=V),
        "acceptance_rate": float(acc.mean()),
        "n": n,
    }


@dataclass
class TwoCandParts:
    p: np.ndarray
    x1: int
    x2: int
    a1: float  # P(accept x1) = p(x1)
    p_after1: np.ndarray  # p with x1 zeroed, renormalised
    a2: float  # P(accept x2 | x1 rejected) = p_after1(x2)
    p_after2: np.ndarray  # residual after both rejections
    via1: np.ndarray  # output mass through accepting x1
    via2: np.ndarray  # through accepting x2
    via_res: np.ndarray  # through the final residual draw
    output: np.ndarray  # sum of the three (equals p)


def two_candidates(p, x1: int, x2: int) -> TwoCandParts:
    """Deterministic top-2 children (EAGLE-2/3 tree rule) against target p."""
    p = normalise(p)
    V = len(p)
    if x1 == x2:
        raise ValueError("the two candidates must be different tokens")
    a1 = float(p[x1])
    r1 = p.copy()
    r1[x1] = 0
    r1 = normalise(r1) if r1.sum() > 0 else np.zeros(V)
    a2 = float(r1[x2])
    r2 = r1.copy()
    r2[x2] = 0
    r2 = normalise(r2) if r2.sum() > 0 else np.zeros(V)
    via1 = np.zeros(V)
    via1[x1] = a1
    via2 = np.zeros(V)
    via2[x2] = (1 - a1) * a2
    via_res = (1 - a1) * (1 - a2) * r2
    return TwoCandParts(p, x1, x2, a1, r1, a2, r2, via1, via2, via_res, via1 + via2 + via_res)


def simulate_two_candidates(p, x1: int, x2: int, n: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    parts = two_candidates(p, x1, x2)
    V = len(parts.p)
    u1, u2 = rng.random(n), rng.random(n)
    acc1 = u1 < parts.a1
    acc2 = ~acc1 & (u2 < parts.a2)
    out = np.where(acc1, x1, x2)
    rest = ~acc1 & ~acc2
    if rest.any():
        res = parts.p_after2 if parts.p_after2.sum() > 0 else parts.p
        out[rest] = rng.choice(V, size=int(rest.sum()), p=res)
    return {
        "counts": np.bincount(out, minlength=V),
        "accepted_first": float(acc1.mean()),
        "accepted_second": float(acc2.mean()),
        "n": n,
    }


def tv_distance(a, b) -> float:
    return 0.5 * float(np.abs(normalise(a) - normalise(b)).sum())


PRESETS = {
    # name: (p, q) over the toy vocabulary
    "close": ([0.40, 0.25, 0.15, 0.12, 0.08], [0.35, 0.30, 0.15, 0.10, 0.10]),
    "overconfident": ([0.40, 0.25, 0.15, 0.12, 0.08], [0.85, 0.05, 0.04, 0.03, 0.03]),
    "wrong_token": ([0.05, 0.60, 0.15, 0.12, 0.08], [0.70, 0.10, 0.10, 0.05, 0.05]),
    "identical": ([0.40, 0.25, 0.15, 0.12, 0.08], [0.40, 0.25, 0.15, 0.12, 0.08]),
}
TOY_VOCAB = ["cat", "dog", "bird", "fish", "frog"]


@dataclass
class SingleDraw:
    """One pass of the chain rule with its random numbers, for the step-by-step view."""

    x: int  # draft token, x ~ q
    px: float
    qx: float
    threshold: float  # min(1, p(x)/q(x))
    u: float  # uniform draw: accept when u < threshold
    accepted: bool
    residual: np.ndarray  # norm(max(p - q, 0)): where a rejection draws from
    y: int | None  # the correction drawn from the residual (None when accepted)
    bonus: int | None  # after an accepted last draft: the target's own next token (None when rejected)
    bonus_dist: np.ndarray  # the distribution the bonus is drawn from


def single_draw(p, q, seed: int = 0, p_next=None) -> SingleDraw:
    """Draw x ~ q, u ~ U(0, 1); accept when u < min(1, p(x)/q(x)), else draw from the residual.
    After an accepted last draft the target adds a bonus token from its next position's
    distribution `p_next` (a toy has no next position: p itself by default)."""
    parts = chain_rule(p, q)
    rng = np.random.default_rng(seed)
    V = len(parts.p)
    x = int(rng.choice(V, p=parts.q))
    u = float(rng.random())
    px, qx = float(parts.p[x]), float(parts.q[x])
    thr = min(1.0, px / qx) if qx > 0 else 0.0
    accepted = u < thr
    res = parts.residual if parts.residual.sum() > 0 else parts.p
    nxt = parts.p if p_next is None else normalise(p_next)
    y = None if accepted else int(rng.choice(V, p=res))
    bonus = int(rng.choice(V, p=nxt)) if accepted else None
    return SingleDraw(x, px, qx, thr, u, accepted, res, y, bonus, nxt)
