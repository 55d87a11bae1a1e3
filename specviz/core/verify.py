"""Verification: which drafted tokens the target keeps, and the token it adds.

Three exact rules, chosen from the tree and the sampling settings:

* greedy (temperature 0): walk from the root; at each node take the child whose token is the
  target's argmax; stop at the first mismatch; the extra token is that argmax ("greedy-correction"
  after a mismatch, "bonus" after a full path).
* deterministic drafts (``tree.sampled`` False: top-k / argmax / prompt lookup; EAGLE-2/3): at each
  node try the children in rank order; accept child x with probability p_res(x) under the current
  residual p_res (start: p); on rejection set p_res(x) = 0 and renormalise. If every child fails,
  the extra token is drawn from p_res ("resampled"); after a full path from p of the leaf ("bonus").
* sampled drafts (``tree.sampled`` True: children were *drawn* from q = ``tree.dists[parent]``;
  Leviathan/Chen chain, SpecInfer tree): accept x with probability min(1, p_res(x) / q(x)); on
  rejection p_res <- norm(max(p_res - q, 0)). Children drawn *without* replacement
  (``tree.without_replacement`` True) also drop x from q and renormalise it. A child copied from the
  context by prompt lookup (``tree.copied``) is a deterministic draft in any tree: q = one-hot(x).

The deterministic rule is the sampled rule with q = one-hot(x): min(1, p/1) = p(x) and
max(p - onehot(x), 0) = p with x zeroed. So one walk serves both; the difference is only which
q vector the rule uses. That vector, the residual, the acceptance probability and the sources of
the extra token make up a :class:`Policy`; the correct one is :data:`CORRECT`, the deliberately
broken ones live in :mod:`specviz.teaching.bugs` (``bugs.get_policy(name)``) and are passed as ``policy=``.

p and q are always the *warped* distributions (same temperature, top-k, top-p). Uniform draws come
from ``torch.rand(1, generator=generator)`` and tokens from :func:`specviz.core.sampling.sample`, so the
same generator state replays the same result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .. import SpecVizError
from .sampling import SamplingParams, sample
from .trace import AcceptStep
from .tree import DraftTree


@dataclass
class VerifyResult:
    accepted: list[int]  # node ids of the accepted path, root excluded, in order
    extra_token: int  # the token the target adds after the accepted path
    extra_source: str  # greedy-correction | bonus | resampled
    extra_dist: torch.Tensor  # [V] the distribution the extra token was drawn from
    # one per tried node, in order (text and residual_top are left for the engine to fill in):
    # p under the current residual; q the draft's probability (tree.q for deterministic drafts,
    # where the rule itself uses one-hot q); ratio p / q_rule (None for greedy); u (None for greedy)
    steps: list[AcceptStep] = field(default_factory=list)
    rule: str = ""  # greedy | chain | tree-deterministic | tree-sampled
    residuals: dict[int, torch.Tensor] = field(default_factory=dict)  # node -> residual after its rejection


# ---------------------------------------------------------------------------- the correct rule
# Each piece below is one line of the algorithm; bugs.py swaps single pieces out.


def accept_prob_correct(px: float, qx: float) -> float:
    """min(1, p(x) / q(x)); q(x) = 0 cannot have been drafted, accept then iff p(x) > 0."""
    if qx <= 0:
        return 1.0 if px > 0 else 0.0
    return min(1.0, px / qx)


def accept_vec_correct(w: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """accept_prob for every token at once (used by the exact enumeration)."""
    safe = torch.where(q > 0, q, torch.ones_like(q))
    return torch.where(q > 0, (w / safe).clamp(max=1.0), (w > 0).to(w.dtype))


def residual_correct(w: torch.Tensor, q: torch.Tensor, x: int, drawn: bool) -> torch.Tensor:
    """norm(max(p_res - q, 0)). With one-hot q this zeroes x (the deterministic rule).

    If nothing is left (p_res <= q everywhere, i.e. p_res == q up to rounding, when a rejection has
    probability 0 in exact arithmetic) we keep p_res: any choice is exact up to that null event.
    """
    r = (w - q).clamp(min=0)
    s = r.sum()
    if not s > 0:
        return w
    return r / s


def reject_dist_correct(w_res: torch.Tensor, p_row: torch.Tensor) -> torch.Tensor:
    """After every child of a node failed: draw from the residual."""
    return w_res


def bonus_dist_correct(p_row: torch.Tensor, p_raw_row: torch.Tensor | None) -> torch.Tensor:
    """After a full path: draw from the *warped* target distribution of the leaf."""
    return p_row


def q_source_correct(drawn: bool) -> str:
    """Which q vector the rule uses: the warped draft distribution for drawn children, one-hot
    for children chosen deterministically."""
    return "dists" if drawn else "onehot"


@dataclass(frozen=True)
class Policy:
    name: str
    accept_prob: Callable = accept_prob_correct
    accept_vec: Callable = accept_vec_correct
    residual: Callable = residual_correct
    residual_depends_on_x: bool = False  # whether residual(w, q, x) varies with x (for q fixed)
    reject_dist: Callable = reject_dist_correct
    bonus_dist: Callable = bonus_dist_correct
    q_source: Callable = q_source_correct
    needs_p_raw: bool = False


CORRECT = Policy("correct")


# ---------------------------------------------------------------------------- helpers
def rule_name(tree: DraftTree, params: SamplingParams) -> str:
    if params.greedy:
        return "greedy"
    if tree.sampled:
        return "tree-sampled" if tree.branching else "chain"
    return "tree-deterministic"


def rule_q(tree: DraftTree, node: int, source: str) -> torch.Tensor | None:
    """The q vector (over the vocabulary) the rule uses for the children of `node`; None = one-hot."""
    if source == "onehot":
        return None
    if source == "dists":
        d = tree.dists.get(node)
        what = "tree.dists"
    elif source == "raw_dists":
        d = tree.raw_dists.get(node)
        what = "tree.raw_dists (the draft's unprocessed distribution)"
    else:  # pragma: no cover - programming error
        raise ValueError(source)
    if d is None:
        raise SpecVizError(f"This verification rule needs {what} for node {node}, but the drafter did not provide it.")
    return d


def onehot(x: int, like: torch.Tensor) -> torch.Tensor:
    o = torch.zeros_like(like)
    o[x] = 1.0
    return o


def drop_token(q: torch.Tensor, x: int) -> torch.Tensor:
    """Sampling without replacement: remove x from q and renormalise."""
    q = q.clone()
    q[x] = 0
    s = q.sum()
    return q / s if s > 0 else q


# ---------------------------------------------------------------------------- the walk
def verify(
    tree: DraftTree,
    p: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
    *,
    p_raw: torch.Tensor | None = None,
    policy: Policy = CORRECT,
    best: list[int] | None = None,
) -> VerifyResult:
    """Verify one draft tree. `p` [N, V]: warped target distribution after each node; `best`
    (greedy only, optional): the argmax of each row of p, when the caller already has it."""
    n = len(tree)
    if p.dim() != 2 or p.shape[0] != n:
        raise SpecVizError(f"verify needs one target row per tree node: got p of shape {tuple(p.shape)} for {n} nodes.")
    if params.greedy:
        return _verify_greedy(tree, p, p_raw, policy, best)
    if policy.needs_p_raw and p_raw is None:
        raise SpecVizError(f"variant {policy.name!r} needs p_raw (the softmax of the raw target logits).")
    rule = rule_name(tree, params)
    kids = tree.children_lists()
    drawn = bool(tree.sampled)
    source = policy.q_source(drawn)
    depths = tree.depths
    cur, accepted, steps, residuals = 0, [], [], {}
    while True:
        if not kids[cur]:
            # a full path: the bonus token comes from the leaf's WARPED target distribution p
            dist = policy.bonus_dist(p[cur], None if p_raw is None else p_raw[cur])
            return VerifyResult(accepted, sample(dist, generator), "bonus", dist, steps, rule, residuals)
        w = p[cur]  # the current (residual) target distribution at this node
        # None: one-hot q of a deterministic draft. A child copied by prompt lookup is one at any rule:
        # it depends on the context alone, not on this node's draws (exact in any place among them)
        qvec = rule_q(tree, cur, source) if any(c not in tree.copied for c in kids[cur]) else None
        nxt = None
        for j, c in enumerate(kids[cur]):
            x = tree.tokens[c]
            q_c = None if c in tree.copied else qvec
            q_used = onehot(x, w) if q_c is None else q_c
            px, qx = float(w[x]), float(q_used[x])
            a = policy.accept_prob(px, qx)  # accept x with probability min(1, p(x) / q(x))
            u = float(torch.rand(1, generator=generator))
            ok = u < a
            steps.append(AcceptStep(depth=depths[c], node=c, token=x, text="", p=px,
                                    q=float(tree.q[c]) if q_c is None else qx,
                                    ratio=(px / qx) if qx > 0 else None, u=u, accepted=ok))
            if ok:
                nxt = c
                break
            w = policy.residual(w, q_used, x, drawn)  # on rejection: p <- norm(max(p - q, 0))
            residuals[c] = w
            if q_c is not None and tree.without_replacement and any(d not in tree.copied for d in kids[cur][j + 1 :]):
                qvec = drop_token(qvec, x)  # drawn without replacement: x cannot come again (for a drawn sibling still to try)
        if nxt is None:
            # every child rejected: the correction is drawn from the residual
            dist = policy.reject_dist(w, p[cur])
            return VerifyResult(accepted, sample(dist, generator), "resampled", dist, steps, rule, residuals)
        accepted.append(nxt)
        cur = nxt


def _verify_greedy(tree: DraftTree, p: torch.Tensor, p_raw, policy: Policy, argmax=None) -> VerifyResult:
    """Accept the longest path of target argmaxes. No randomness is consumed."""
    kids = tree.children_lists()
    depths = tree.depths
    accept_all = policy.name == "no-rejection"
    if argmax is None:
        argmax = p.argmax(-1).tolist()  # one op for every row, not one per visited node
    shown = p if p_raw is None else p_raw
    cur, accepted, steps = 0, [], []
    while True:
        if not kids[cur]:
            return VerifyResult(accepted, argmax[cur], "bonus", p[cur], steps, "greedy")
        best = argmax[cur]
        nxt = None
        for c in kids[cur]:
            x = tree.tokens[c]
            ok = accept_all or x == best  # greedy: keep the draft iff it is the target's argmax
            steps.append(AcceptStep(depth=depths[c], node=c, token=x, text="", p=float(shown[cur, x]),
                                    q=float(tree.q[c]), ratio=None, u=None, accepted=ok))
            if ok:
                nxt = c
                break
        if nxt is None:
            return VerifyResult(accepted, best, "greedy-correction", p[cur], steps, "greedy")
        accepted.append(nxt)
        cur = nxt
