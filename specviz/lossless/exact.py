"""The exact distribution of one round's output, by enumerating the acceptance walk (no sampling).

For a correct rule it equals the warped target distribution to rounding; a broken rule (a
:mod:`specviz.teaching.bugs` policy) differs. Deterministic trees are fixed, so any k up to the tree depth
+ 1 is covered; sampled trees are random, so they are marginalised over the draws: with a
:class:`DraftTree` that is possible for the first token (it needs q at the root only), with a
:class:`PrefixModel` (distributions after every prefix) for any k. Tokens after the round ends
are taken from the target (vanilla), so ``exact_dist_k`` isolates this round's contribution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from .. import SpecVizError
from ..teaching.bugs import get_policy
from ..core.sampling import SamplingParams
from ..core.tree import DraftTree
from ..core.verify import CORRECT, Policy, drop_token, onehot

DTYPE = torch.float64  # the exact enumeration runs in double precision


def _d(x: torch.Tensor) -> torch.Tensor:
    """To double precision, renormalised (float32 rows sum to 1 only within ~1e-7)."""
    x = x.to(DTYPE)
    s = x.sum(-1, keepdim=True)
    return torch.where(s > 0, x / s, x)


# =============================================================================== exact: views
class _TreeView:
    """A fixed DraftTree with target rows p [N, V] seen by the exact enumeration (handle = node id)."""

    def __init__(self, tree: DraftTree, p, p_raw=None, greedy=False):
        self.tree, self.greedy = tree, greedy
        self._p = _d(p)
        self._p_raw = None if p_raw is None else _d(p_raw)
        self.kids = tree.children_lists()
        self.node_of: dict[tuple, int] = {(): 0}
        self.prefix_of: list[tuple] = [()] * len(tree)
        for i in range(1, len(tree)):
            pre = self.prefix_of[tree.parents[i]] + (tree.tokens[i],)
            self.prefix_of[i] = pre
            self.node_of.setdefault(pre, i)
        # tokens z with prefix + (z,) somewhere in the tree (duplicate siblings: several subtrees)
        self.next_tokens: dict[tuple, list[int]] = {}
        for pre in self.node_of:
            if pre:
                self.next_tokens.setdefault(pre[:-1], []).append(pre[-1])
        self.without_replacement = tree.without_replacement

    root = 0

    def p(self, h):
        return self._p[h]

    def p_raw(self, h):
        return None if self._p_raw is None else self._p_raw[h]

    def kind(self, h):
        if not self.kids[h]:
            return "leaf"
        return "drawn" if (self.tree.sampled and not self.greedy) else "fixed"

    def fixed_children(self, h):
        return [(self.tree.tokens[c], c) for c in self.kids[h]]

    def n_draws(self, h):
        return len(self.kids[h])

    def q(self, h, source):
        d = self.tree.dists if source == "dists" else self.tree.raw_dists
        if h not in d:
            what = "tree.dists" if source == "dists" else "tree.raw_dists"
            raise SpecVizError(f"The exact check needs {what} for node {h}, which the drafter did not provide.")
        return _d(d[h])

    def child(self, h, x):
        # only reached below a *drawn* level: the subtree under a drawn token is itself random,
        # and this one tree shows a single draw of it
        raise SpecVizError(
            "A sampled tree is random: the exact distribution beyond its first token needs the draft and "
            "target distributions after every possible draw (use a PrefixModel)."
        )

    def available(self, prefix):
        return prefix in self.node_of

    def next_available(self, prefix):
        return self.next_tokens.get(prefix, [])

    def p_prefix(self, prefix):
        return self._p[self.node_of[prefix]]


@dataclass
class PrefixModel:
    """A synthetic target + drafter given by distributions after every prefix (for small vocabularies).

    ``p_fn(prefix)``: warped target distribution; ``q_fn(prefix)``: warped draft distribution;
    optional ``p_raw_fn``/``q_raw_fn``: their unwarped versions. ``widths[d]``: children per node at
    depth d (the tree's shape). ``sampled``: children are drawn from q (with replacement unless
    ``without_replacement``) instead of being q's top-``width`` tokens.
    """

    p_fn: Callable
    q_fn: Callable
    widths: list[int]
    sampled: bool = True
    without_replacement: bool = False
    p_raw_fn: Callable | None = None
    q_raw_fn: Callable | None = None
    greedy: bool = False

    root = ()

    def p(self, h):
        return _d(self.p_fn(h))

    def p_raw(self, h):
        return None if self.p_raw_fn is None else _d(self.p_raw_fn(h))

    def kind(self, h):
        d = len(h)
        if d >= len(self.widths) or self.widths[d] == 0:
            return "leaf"
        return "drawn" if (self.sampled and not self.greedy) else "fixed"

    def fixed_children(self, h):
        q = self.q_fn(h)
        top = _top_tokens(q, self.widths[len(h)])
        return [(x, h + (x,)) for x in top]

    def n_draws(self, h):
        return self.widths[len(h)]

    def q(self, h, source):
        f = self.q_fn if source == "dists" else self.q_raw_fn
        if f is None:
            raise SpecVizError("This variant needs the draft's raw distribution (q_raw_fn).")
        return _d(f(h))

    def child(self, h, x):
        return h + (int(x),)

    def available(self, prefix):
        return True

    def next_available(self, prefix):
        return list(range(self.p(prefix).numel()))

    def p_prefix(self, prefix):
        return self.p(prefix)

    def draw_tree(self, generator: torch.Generator | None = None):
        """One random draft tree with its target rows: (tree, p [N, V], p_raw or None)."""
        tree = DraftTree(tokens=[0], parents=[-1], q=[1.0], sampled=self.sampled and not self.greedy,
                         without_replacement=self.without_replacement)
        prefixes = [()]
        frontier = [0]
        for d, width in enumerate(self.widths):
            nxt = []
            for node in frontier:
                h = prefixes[node]
                q = self.q_fn(h).float()
                tree.dists[node] = q
                if self.q_raw_fn is not None:
                    tree.raw_dists[node] = self.q_raw_fn(h).float()
                if tree.sampled:
                    k = min(width, int((q > 0).sum())) if self.without_replacement else width
                    toks = torch.multinomial(q, k, replacement=not self.without_replacement, generator=generator).tolist()
                else:
                    toks = _top_tokens(q, width)
                for x in toks:
                    tree.tokens.append(int(x))
                    tree.parents.append(node)
                    tree.q.append(float(q[x]))
                    tree.scores.append(tree.scores[node] + math.log(max(float(q[x]), 1e-30)))
                    prefixes.append(h + (int(x),))
                    nxt.append(len(tree.tokens) - 1)
            frontier = nxt
        p = torch.stack([self.p_fn(h).float() for h in prefixes])
        p_raw = None if self.p_raw_fn is None else torch.stack([self.p_raw_fn(h).float() for h in prefixes])
        return tree, p, p_raw


def _top_tokens(q: torch.Tensor, width: int) -> list[int]:
    """q's `width` most likely tokens (ties: lower id first), only those with q > 0."""
    order = sorted(range(q.numel()), key=lambda i: (-float(q[i]), i)) if q.numel() <= 4096 else None
    if order is None:
        v, i = torch.topk(q, width)
        return [int(t) for t, x in zip(i.tolist(), v.tolist()) if x > 0]
    return [i for i in order[:width] if float(q[i]) > 0]


# =============================================================================== exact: walk
def _enumerate(view, h, prefix: tuple, weight: float, k: int, pol: Policy, out: dict) -> None:
    """Add this round's emission probabilities below node h into `out`.

    out[prefix][y] = probability that the round's output starts with prefix + (y,) and the round
    says nothing more about later tokens (it ended there, or prefix + (y,) already has k tokens).
    """
    pv = view.p(h)
    vec = out.get(prefix)
    if vec is None:
        vec = out[prefix] = torch.zeros_like(pv)
    kind = view.kind(h)
    if kind == "leaf":
        d = pol.bonus_dist(pv, view.p_raw(h))
        if d is None:
            raise SpecVizError(f"variant {pol.name!r} needs the raw target distribution (p_raw).")
        vec += weight * d
        return
    last_level = len(prefix) + 1 >= k
    if kind == "fixed":
        source = "onehot" if view.greedy else pol.q_source(False)
        qvec = None if source == "onehot" else view.q(h, source)
        w, coef = pv, weight
        for x, ch in view.fixed_children(h):
            q_used = onehot(x, w) if qvec is None else qvec
            a = pol.accept_prob(float(w[x]), float(q_used[x]))
            if a > 0 and coef > 0:
                if last_level:
                    vec[x] += coef * a
                else:
                    _enumerate(view, ch, prefix + (x,), coef * a, k, pol, out)
            coef *= 1 - a
            w = pol.residual(w, q_used, x, False)
        if coef > 0:
            vec += coef * pol.reject_dist(w, pv)
        return
    # drawn: m children drawn from q; marginalise over the draws
    m = view.n_draws(h)
    wo = view.without_replacement
    q_draw = view.q(h, "dists")
    source = pol.q_source(True)
    q_rule = q_draw if source == "dists" else view.q(h, source)
    collapse = not wo and not pol.residual_depends_on_x
    states = [(weight, pv, q_draw, q_rule)]
    acc = torch.zeros_like(pv)
    for r in range(m):
        new = []
        final = r == m - 1
        for coef, w, qd, qr in states:
            if not qd.sum() > 0:
                new.append((coef, w, qd, qr))
                continue
            av = pol.accept_vec(w, qr)
            acc += coef * qd * av
            rj = coef * qd * (1 - av)
            if collapse:
                tot = float(rj.sum())
                if tot > 0:
                    new.append((tot, pol.residual(w, qr, int(rj.argmax()), True), qd, qr))
            else:
                for x in torch.nonzero(rj > 0).flatten().tolist():
                    wx = pol.residual(w, qr, x, True)
                    if final:  # only the end distribution matters: fold it in now
                        vec += float(rj[x]) * pol.reject_dist(wx, pv)
                    else:
                        new.append((float(rj[x]), wx, drop_token(qd, x) if wo else qd, drop_token(qr, x) if wo else qr))
        states = new
    for coef, w, _, _ in states:
        vec += coef * pol.reject_dist(w, pv)
    if last_level:
        vec += acc
    else:
        for x in torch.nonzero(acc > 0).flatten().tolist():
            _enumerate(view, view.child(h, x), prefix + (x,), float(acc[x]), k, pol, out)


def _round_vectors(view, k: int, variant: str) -> dict:
    pol = get_policy(variant)
    if view.greedy and pol.name != "no-rejection":
        pol = CORRECT
    out: dict = {}
    _enumerate(view, view.root, (), 1.0, k, pol, out)
    return out


def _spread(view, entries: dict, k: int) -> dict:
    """First-k-token distribution from round emissions, continuing with the target after the round.

    Returns {c: Tensor[V]} with c a (k-1)-token prefix and [y] = P(first k tokens = c + (y,)),
    for every c the view covers (all of c's prefixes have target rows).
    """
    res: dict = {}

    def add(c, vec):
        if c in res:
            res[c] += vec
        else:
            res[c] = vec.clone()

    def go(base, mass):
        if not view.available(base):
            return
        pb = view.p_prefix(base)
        if len(base) == k - 1:
            add(base, mass * pb)
            return
        for z in view.next_available(base):
            if pb[z] > 0:
                go(base + (z,), mass * float(pb[z]))

    for prefix, vec in entries.items():
        if len(prefix) == k - 1:
            add(prefix, vec)
        else:
            for y in view.next_available(prefix):
                if vec[y] > 0:
                    go(prefix + (y,), float(vec[y]))
    return res


def _target_vectors(view, keys, k: int) -> dict:
    out = {}
    for c in keys:
        mass = 1.0
        for i in range(len(c)):
            mass *= float(view.p_prefix(c[:i])[c[i]])
        out[c] = mass * view.p_prefix(c)
    return out


def _covered_prefixes(view, k: int) -> list:
    if isinstance(view, _TreeView):
        return [pre for pre in view.node_of if len(pre) == k - 1]
    V = view.p(()).numel()
    keys = [()]
    for _ in range(k - 1):
        keys = [c + (z,) for c in keys for z in range(V)]
    return keys


def _make_view(tree_or_model, p, params: SamplingParams, p_raw):
    if isinstance(tree_or_model, PrefixModel):
        tree_or_model.greedy = params.greedy
        return tree_or_model
    if p is None:
        raise SpecVizError("exact check of a DraftTree needs the target rows p [N, V].")
    return _TreeView(tree_or_model, p, p_raw, greedy=params.greedy)


def exact_first_token_dist(tree, p=None, params: SamplingParams | None = None, variant: str = "correct", p_raw=None):
    """Distribution (float64 [V]) of the first token one round emits, computed without sampling.

    `tree` is a DraftTree (with its target rows `p` [N, V], warped; `p_raw` for unwarped-bonus)
    or a PrefixModel. For a correct rule this equals warped p[0].
    """
    params = params or SamplingParams(temperature=1.0)
    view = _make_view(tree, p, params, p_raw)
    return _round_vectors(view, 1, variant)[()]


def exact_dist_k(tree, p=None, params: SamplingParams | None = None, k: int = 2, variant: str = "correct", p_raw=None) -> dict:
    """{(t1..tk): probability} of the first k emitted tokens (target continues after the round).

    Covers every k-token sequence whose first k-1 tokens have target rows: with a DraftTree those
    that follow a path of the tree, with a PrefixModel all of them.
    """
    params = params or SamplingParams(temperature=1.0)
    view = _make_view(tree, p, params, p_raw)
    vecs = _spread(view, _round_vectors(view, k, variant), k)
    out = {}
    for c, vec in vecs.items():
        for y in torch.nonzero(vec > 0).flatten().tolist():
            out[c + (y,)] = float(vec[y])
    return out


def exact_max_diff(tree, p=None, params: SamplingParams | None = None, k: int = 1, variant: str = "correct", p_raw=None) -> float:
    """max |P_spec(s) - P_target(s)| over all covered k-token sequences s."""
    params = params or SamplingParams(temperature=1.0)
    view = _make_view(tree, p, params, p_raw)
    spec = _spread(view, _round_vectors(view, k, variant), k)
    keys = set(_covered_prefixes(view, k))
    tgt = _target_vectors(view, keys, k)
    diff = 0.0
    for c in keys | set(spec):
        if c not in keys:
            continue
        a = spec.get(c)
        b = tgt[c]
        d = float((b - (a if a is not None else 0)).abs().max())
        diff = max(diff, d)
    return diff


def exact_round_diff(tree: DraftTree, rows, params: SamplingParams, variant: str = "correct",
                     horizon: int = 3) -> tuple[float, int]:
    """(max difference, k covered) of the exact check for one engine round: its tree with the target
    rows of its own verify pass (`rows`: the round's `TargetRows`, missing rows computed now). It
    checks a sequence of a batched round as it checks a solo one, so a batch cannot hide a wrong
    distribution: each sequence's round must reproduce its own target distribution."""
    n = len(tree)
    P = rows.matrix(list(range(n)))
    P_raw = rows.matrix(list(range(n)), "raw") if get_policy(variant).needs_p_raw and rows.raw is not None else None
    kmax = 1 if (tree.sampled and not params.greedy) else min(horizon, tree.max_depth + 1)
    diff = max(exact_max_diff(tree, P, params, k=k, variant=variant, p_raw=P_raw) for k in range(1, kmax + 1))
    return diff, kmax
