"""Losslessness: speculative decoding must produce exactly the target's distribution.

Two kinds of evidence, both usable from tests, the command line and the app:

* **Exact.** :func:`exact_first_token_dist` and :func:`exact_dist_k` enumerate one round's
  acceptance walk analytically (no sampling) and give the distribution of the first token(s) the
  round emits. For a correct rule it equals the warped target distribution to rounding; a broken
  variant (``variant=``, see :mod:`specviz.bugs`) differs. Deterministic trees are fixed, so any
  k up to the tree depth + 1 is covered; sampled trees are random, so they are marginalised over
  the draws: with a :class:`DraftTree` that is possible for the first token (it needs q at the
  root only), with a :class:`PrefixModel` (distributions after every prefix) for any k.
  Tokens after the round ends are taken from the target (vanilla), so ``exact_dist_k`` isolates
  this round's contribution.
* **Empirical.** :func:`run_check` draws N samples of the first k tokens with vanilla sampling and
  with speculative sampling on a real model. A :class:`TargetOracle` memoises the target's logits
  per prefix (tuple of generated tokens) and computes missing ones in batched tree-masked
  forwards, so both samplers see the very same target distributions; samples advance in lockstep
  waves so each wave costs a few batched forwards. Then a chi-square test of the two histograms
  and the total-variation distance with a confidence bound.

Drafters for the check: the engine's own (prompt lookup, ``--method pld``; any deterministic
Drafter is memoised per prefix) and weightless toy drafters built on the target's logits
(``toy-sps`` sampled chain, ``toy-specinfer`` sampled tree, ``toy-topk`` deterministic tree), which
always have drafts and rejections. Trees are pruned to the tokens still missing, as the engine
does near its budget, so no target row beyond the horizon is ever computed.

Speed: torch.multinomial (used by ``sampling.sample`` for every bonus/resampled token) costs about
1.7 ms on a 49k vocabulary here, most of a check's time; and on the shared 2-core box the many
tiny vector ops are ~10x faster on one thread, so ``run_check`` sets torch to one thread while it
runs (``threads=``).

Command line (prints the exact difference, p-value, TV and bound; last line PASS or FAIL,
exit 0/1; bad input exits 2)::

    python -m specviz.lossless --samples 10000 --horizon 3 --temperature 1.0
    python -m specviz.lossless --method toy-topk --top-k 20 --samples 10000
    python -m specviz.lossless --method pld --prompt "I flipped a coin and it landed on heads. \
        I flipped a coin and it landed on" --samples 10000 --broken            # negative control
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable

import torch

from . import SpecVizError
from .sampling import SamplingParams, probs, sample
from .tree import DraftTree
from .verify import Policy, _drop, _onehot, get_policy, verify

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
        self.kids: list[list[int]] = [[] for _ in range(len(tree))]
        for i in range(1, len(tree)):
            self.kids[tree.parents[i]].append(i)
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
        self.without_replacement = bool(getattr(tree, "without_replacement", False))

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
        d = self.tree.dists if source == "dists" else (getattr(self.tree, "raw_dists", None) or {})
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
        tree = DraftTree(tokens=[0], parents=[-1], q=[1.0], sampled=self.sampled and not self.greedy)
        tree.raw_dists = {}
        tree.without_replacement = self.without_replacement
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
            q_used = _onehot(x, w) if qvec is None else qvec
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
                        new.append((float(rj[x]), wx, _drop(qd, x) if wo else qd, _drop(qr, x) if wo else qr))
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
        from .verify import CORRECT

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


# =============================================================================== the real model
class TargetOracle:
    """The target's next-token distributions after every prefix of a prompt, memoised.

    A prefix is the tuple of tokens generated after the prompt. The prompt is prefilled once;
    missing prefixes are computed in batched forwards: the trie of their tokens is fed as one
    tree-masked block after the prompt's cached keys and values (each node attends to the prompt
    and its own ancestors, at position prompt length + depth), so one pass scores up to `block`
    prefixes. The first value computed for a prefix is kept forever: vanilla and speculative
    sampling see bit-identical target distributions, whatever batch a row was computed in.
    """

    def __init__(self, model, prompt_ids, params: SamplingParams, block: int = 128):
        model = getattr(model, "model", model)  # a Target or a TargetModel
        prompt_ids = [int(t) for t in prompt_ids]
        if not prompt_ids:
            raise SpecVizError("The prompt is empty: give at least one token.")
        self.model, self.prompt, self.params, self.block = model, prompt_ids, params, block
        self.L0 = len(prompt_ids)
        self.cache = model.new_cache(self.L0 + block + 64)
        out = model.forward(torch.tensor([prompt_ids]), self.cache, last_only=True)
        self.cache.commit()
        self._logits: dict[tuple, torch.Tensor] = {(): out.logits[0, -1].float().cpu().clone()}
        self._p: dict[tuple, torch.Tensor] = {}
        self._p_raw: dict[tuple, torch.Tensor] = {}
        self.forwards, self.tokens_forwarded, self.forward_seconds = 1, self.L0, 0.0

    @property
    def vocab_size(self) -> int:
        return self._logits[()].numel()

    def __len__(self) -> int:
        return len(self._logits)

    def ensure(self, prefixes) -> None:
        """Compute the logits of every prefix not seen yet, in as few forwards as possible."""
        missing = sorted({tuple(s) for s in prefixes if tuple(s) not in self._logits})
        block: dict[tuple, int] = {}
        for s in missing:
            need = [s[:i] for i in range(1, len(s) + 1) if s[:i] not in block]
            if block and len(block) + len(need) > self.block:
                self._run(block)
                block = {}
                need = [s[:i] for i in range(1, len(s) + 1)]
            for pre in need:
                block[pre] = len(block)
        if block:
            self._run(block)

    def _run(self, block: dict) -> None:
        pres = list(block)
        n = len(pres)
        parents = [block.get(pre[:-1], -1) for pre in pres]
        mask = torch.zeros(n, n, dtype=torch.bool)
        for i, par in enumerate(parents):
            if par >= 0:
                mask[i] = mask[par]
            mask[i, i] = True
        tokens = torch.tensor([[pre[-1] for pre in pres]])
        positions = torch.tensor([self.L0 + len(pre) - 1 for pre in pres])
        if self.L0 + n > self.cache.max_len:
            self.cache = self._grow(self.L0 + n + 64)
        t0 = time.perf_counter()
        self.cache.truncate(self.L0)
        out = self.model.forward(tokens, self.cache, positions=positions, tree_mask=mask)
        self.cache.truncate(self.L0)
        self.forward_seconds += time.perf_counter() - t0
        self.forwards += 1
        self.tokens_forwarded += n
        logits = out.logits[0].float().cpu()
        for i, pre in enumerate(pres):
            if pre not in self._logits:
                self._logits[pre] = logits[i].clone()

    def _grow(self, max_len):
        cache = self.model.new_cache(max_len)
        L = self.L0
        cache.k[:, :, :, :L] = self.cache.k[:, :, :, :L]
        cache.v[:, :, :, :L] = self.cache.v[:, :, :, :L]
        cache.length = L
        return cache

    def logits(self, prefix) -> torch.Tensor:
        prefix = tuple(prefix)
        if prefix not in self._logits:
            self.ensure([prefix])
        return self._logits[prefix]

    def p(self, prefix) -> torch.Tensor:
        """Warped target distribution after prompt + prefix (one-hot argmax when greedy)."""
        prefix = tuple(prefix)
        d = self._p.get(prefix)
        if d is None:
            d = self._p[prefix] = probs(self.logits(prefix), self.params)
        return d

    def p_raw(self, prefix) -> torch.Tensor:
        """softmax of the raw logits (what the unwarped-bonus bug samples from)."""
        prefix = tuple(prefix)
        d = self._p_raw.get(prefix)
        if d is None:
            d = self._p_raw[prefix] = self.logits(prefix).softmax(-1)
        return d


class ToyDrafter:
    """A drafter with no weights of its own, for tests and the check page.

    Its logits are the target's, distorted: ``logits / scale + noise * bias`` with a fixed random
    bias per token, so q differs from p (rejections happen) yet stays on plausible tokens (few
    distinct prefixes, so memoisation pays). ``widths[d]`` children per node at depth d:
    ``sampled`` draws them from the warped q (Leviathan chain / SpecInfer tree), otherwise they are
    q's top tokens (deterministic, EAGLE-2/3 rule). Trees carry ``dists`` (warped q) and
    ``raw_dists`` (softmax of the draft logits, for the raw-logit-q bug).
    """

    name = "toy"

    def __init__(self, oracle: TargetOracle, widths=(1, 1), sampled: bool = True, scale: float = 0.5,
                 noise: float = 1.0, seed: int = 1234, without_replacement: bool = False):
        self.oracle, self.widths, self.sampled = oracle, list(widths), sampled
        self.scale, self.noise, self.without_replacement = scale, noise, without_replacement
        g = torch.Generator().manual_seed(seed)
        self.bias = noise * torch.randn(oracle.vocab_size, generator=g)
        self._q: dict[tuple, torch.Tensor] = {}
        self._q_raw: dict[tuple, torch.Tensor] = {}
        self._trees: dict[tuple, DraftTree] = {}
        self.name = ("toy-sps" if widths_is_chain(self.widths) else "toy-specinfer") if sampled else "toy-topk"

    def draft_logits(self, prefix) -> torch.Tensor:
        return self.oracle.logits(prefix) / self.scale + self.bias

    def q(self, prefix, params: SamplingParams) -> torch.Tensor:
        d = self._q.get(prefix)
        if d is None:
            d = self._q[prefix] = probs(self.draft_logits(prefix), params)
        return d

    def q_raw(self, prefix) -> torch.Tensor:
        d = self._q_raw.get(prefix)
        if d is None:
            d = self._q_raw[prefix] = self.draft_logits(prefix).softmax(-1)
        return d

    def propose_many(self, prefixes: list[tuple], params: SamplingParams, generator, max_depth: int | None = None) -> list[DraftTree]:
        """One tree per committed prefix, grown level by level in lockstep (one batched target
        forward per level), at most `max_depth` deep. Deterministic trees are memoised."""
        sampled = self.sampled and not params.greedy
        widths = self.widths if max_depth is None else self.widths[: max(max_depth, 0)]
        prefixes = [tuple(g) for g in prefixes]
        key = lambda g: (g, len(widths))
        todo = list(range(len(prefixes))) if sampled else sorted({prefixes.index(g) for g in prefixes if key(g) not in self._trees})
        root_of = lambda g: (self.oracle.prompt + list(g))[-1]
        trees = {i: DraftTree(tokens=[root_of(prefixes[i])], parents=[-1], q=[1.0], sampled=sampled) for i in todo}
        node_prefix = {i: [tuple(prefixes[i])] for i in todo}
        frontier = {i: [0] for i in todo}
        for width in widths:
            self.oracle.ensure({node_prefix[i][n] for i in todo for n in frontier[i]})
            for i in todo:
                tree, nxt = trees[i], []
                for node in frontier[i]:
                    h = node_prefix[i][node]
                    q = self.q(h, params)
                    tree.dists[node] = q
                    if sampled and self.without_replacement:
                        k = min(width, int((q > 0).sum()))
                        toks = torch.multinomial(q, k, replacement=False, generator=generator).tolist()
                    elif sampled:
                        toks = _draw(q.double().cumsum(0), width, generator)
                    else:
                        v, ix = torch.topk(q, width)
                        toks = [int(t) for t, x in zip(ix.tolist(), v.tolist()) if x > 0]
                    for x in toks:
                        tree.tokens.append(int(x))
                        tree.parents.append(node)
                        tree.q.append(float(q[x]))
                        tree.scores.append(tree.scores[node] + math.log(max(float(q[x]), 1e-30)))
                        node_prefix[i].append(h + (int(x),))
                        nxt.append(len(tree.tokens) - 1)
                frontier[i] = nxt
        for i in todo:
            trees[i].raw_dists = _LazyDists(self.q_raw, {n: node_prefix[i][n] for n in trees[i].dists})
            trees[i].without_replacement = self.without_replacement
            if not sampled:
                self._trees[key(prefixes[i])] = trees[i]
        if sampled:
            return [trees[i] for i in range(len(prefixes))]
        return [self._trees[key(g)] for g in prefixes]


class _LazyDists(Mapping):
    """node -> distribution, computed on first access (raw draft dists are rarely needed)."""

    def __init__(self, fn, prefixes: dict):
        self._fn, self._pre = fn, prefixes

    def __getitem__(self, node):
        return self._fn(self._pre[node])

    def __iter__(self):
        return iter(self._pre)

    def __len__(self):
        return len(self._pre)


def _draw(cdf: torch.Tensor, n: int, generator) -> list[int]:
    """n independent draws by inverse CDF (17x faster than torch.multinomial on 49k tokens here).
    `right=True` never lands on a zero-probability token."""
    u = torch.rand(n, generator=generator, dtype=torch.float64) * cdf[-1]
    idx = torch.searchsorted(cdf, u, right=True).clamp(max=cdf.numel() - 1)
    return [int(i) for i in idx]


def widths_is_chain(widths) -> bool:
    return all(w == 1 for w in widths)


def prune_tree(tree: DraftTree, max_depth: int) -> DraftTree:
    """The tree without nodes deeper than max_depth (what the engine does near its token budget)."""
    depths = tree.depths
    if max(depths) <= max_depth:
        return tree
    keep = [i for i in range(len(tree)) if depths[i] <= max_depth]
    new_id = {old: k for k, old in enumerate(keep)}
    out = DraftTree(
        tokens=[tree.tokens[i] for i in keep],
        parents=[new_id.get(tree.parents[i], -1) for i in keep],
        q=[tree.q[i] for i in keep],
        sampled=tree.sampled,
        dists={new_id[i]: d for i, d in tree.dists.items() if i in new_id},
        scores=[tree.scores[i] for i in keep],
    )
    raw = getattr(tree, "raw_dists", None)
    if raw is not None:
        out.raw_dists = {new_id[i]: d for i, d in raw.items() if i in new_id}
    if hasattr(tree, "without_replacement"):
        out.without_replacement = tree.without_replacement
    return out


def _node_prefixes(tree: DraftTree, g: tuple) -> list[tuple]:
    pre = [tuple(g)] * len(tree)
    for i in range(1, len(tree)):
        pre[i] = pre[tree.parents[i]] + (tree.tokens[i],)
    return pre


class _GenericProposer:
    """Adapts an engine Drafter (propose(context, root, params, generator)) to lockstep waves.

    Deterministic drafters (``sampled`` False) are called once per prefix and memoised; the
    drafter must then be stateless between calls (prompt lookup is)."""

    def __init__(self, drafter, oracle: TargetOracle):
        self.drafter, self.oracle = drafter, oracle
        self.name = getattr(drafter, "name", type(drafter).__name__)
        self._trees: dict[tuple, DraftTree] = {}

    def propose_many(self, prefixes, params, generator, max_depth: int | None = None):
        out = []
        for g in prefixes:
            g = tuple(g)
            tree = self._trees.get((g, max_depth))
            if tree is None:
                seq = self.oracle.prompt + list(g)
                tree = self.drafter.propose(seq[:-1], seq[-1], params, generator)
                if max_depth is not None:
                    tree = prune_tree(tree, max_depth)
                if not getattr(self.drafter, "sampled", False):
                    self._trees[(g, max_depth)] = tree
            out.append(tree)
        return out


def _propose_grouped(proposer, gs, params, generator, horizon):
    """propose_many with max_depth = horizon - len(g) - 1, one call per prefix length."""
    out = [None] * len(gs)
    by_len: dict[int, list[int]] = {}
    for i, g in enumerate(gs):
        by_len.setdefault(len(g), []).append(i)
    for L in sorted(by_len):
        idx = by_len[L]
        trees = proposer.propose_many([gs[i] for i in idx], params, generator, max_depth=horizon - L - 1)
        for i, t in zip(idx, trees):
            out[i] = t
    return out


def _proposer(drafter, oracle):
    return drafter if hasattr(drafter, "propose_many") else _GenericProposer(drafter, oracle)


# =============================================================================== samplers
def vanilla_samples(oracle: TargetOracle, params: SamplingParams, n: int, horizon: int, generator) -> Counter:
    """Histogram of the first `horizon` tokens over n vanilla samples, drawn level by level."""
    groups = Counter({(): n})
    for _ in range(horizon):
        oracle.ensure(groups)
        new = Counter()
        for g in sorted(groups):
            c = groups[g]
            if params.greedy:
                new[g + (int(oracle.p(g).argmax()),)] += c
                continue
            toks = torch.multinomial(oracle.p(g), c, replacement=True, generator=generator).tolist()
            for t, m in Counter(toks).items():
                new[g + (t,)] += m
        groups = new
    return groups


@dataclass
class SpecStats:
    rounds: int = 0
    tokens: int = 0  # tokens committed by those rounds (accepted drafts + extra)
    drafted: int = 0
    accepted: int = 0


def speculative_samples(oracle: TargetOracle, drafter, params: SamplingParams, n: int, horizon: int, generator,
                        variant: str = "correct", progress=None, stats: SpecStats | None = None) -> Counter:
    """Histogram of the first `horizon` tokens over n speculative samples.

    Every sample runs real rounds (draft, target rows, `verify`) until it has `horizon` tokens;
    all unfinished samples advance together, so each wave needs only a few batched forwards.
    Trees are pruned to the tokens still missing, exactly as the engine prunes them near its
    token budget (max_new_tokens = horizon), so no target row beyond the horizon is needed.
    """
    pol = get_policy(variant)
    proposer = _proposer(drafter, oracle)
    outs: list[tuple] = [()] * n
    active = list(range(n))
    rows_memo: dict[int, tuple] = {}
    stats = stats if stats is not None else SpecStats()
    done = 0
    while active:
        gs = [outs[i] for i in active]
        trees = _propose_grouped(proposer, gs, params, generator, horizon)
        pres = [_node_prefixes(t, g) for t, g in zip(trees, gs)]
        oracle.ensure({s for pre in pres for s in pre})
        for i, g, tree, pre in zip(active, gs, trees, pres):
            key = id(tree)
            cached = rows_memo.get(key) if not tree.sampled else None
            if cached is not None and cached[0] is tree:
                P, P_raw = cached[1], cached[2]
            else:
                P = torch.stack([oracle.p(s) for s in pre])
                P_raw = torch.stack([oracle.p_raw(s) for s in pre]) if pol.needs_p_raw else None
                if not tree.sampled:
                    rows_memo[key] = (tree, P, P_raw)
            if len(tree) == 1:  # nothing drafted: a vanilla step
                tok = int(P[0].argmax()) if params.greedy else sample(P[0], generator)
                new = (tok,)
            else:
                res = verify(tree, P, params, generator, p_raw=P_raw, variant=variant)
                new = tuple(tree.tokens[j] for j in res.accepted) + (res.extra_token,)
                stats.drafted += len(tree) - 1
                stats.accepted += len(res.accepted)
            stats.rounds += 1
            stats.tokens += len(new)
            outs[i] = g + new
        still = [i for i in active if len(outs[i]) < horizon]
        done += len(active) - len(still)
        active = still
        if progress:
            progress(done, n)
    return Counter(o[:horizon] for o in outs)


# =============================================================================== statistics
def compare_histograms(h1: Counter, h2: Counter, min_count: int = 10, delta: float = 0.05) -> dict:
    """Chi-square test of homogeneity and total-variation distance of two histograms.

    Outcomes seen fewer than `min_count` times in both samples together are merged into one
    "other" bin (so expected counts stay near 5 or more; the merged bin is dropped if it is
    still too small). `tv` is the plug-in distance 0.5 * sum |f1 - f2| over those bins; merging
    can only lower it. `tv_bound` is a (1 - delta) upper confidence bound on the true distance
    over the same bins, from Weissman et al. (2003): P(||P^ - P||_1 >= e) <= (2^B - 2) exp(-n e^2 / 2)
    for each sample (delta/2 each), so TV <= tv + (e1 + e2) / 2. It is distribution-free and
    therefore loose (about 0.1 for 10,000 samples and 50 bins).
    """
    from scipy.stats import chi2_contingency

    n1, n2 = sum(h1.values()), sum(h2.values())
    keys = set(h1) | set(h2)
    big = sorted((k for k in keys if h1.get(k, 0) + h2.get(k, 0) >= min_count), key=lambda k: -(h1.get(k, 0) + h2.get(k, 0)))
    rows = [[h1.get(k, 0) for k in big], [h2.get(k, 0) for k in big]]
    o1, o2 = n1 - sum(rows[0]), n2 - sum(rows[1])
    if o1 + o2 > 0:
        rows[0].append(o1)
        rows[1].append(o2)
    bins = len(rows[0])
    if bins < 2 or n1 == 0 or n2 == 0:
        chi2, pval, dof = 0.0, 1.0, 0
    else:
        res = chi2_contingency(rows, correction=False)
        chi2, pval, dof = float(res.statistic), float(res.pvalue), int(res.dof)
    tv = 0.5 * sum(abs(a / max(n1, 1) - b / max(n2, 1)) for a, b in zip(*rows))

    def eps(n):
        return math.sqrt(2 * (bins * math.log(2) + math.log(2 / delta)) / max(n, 1))

    return {
        "chi2": chi2,
        "dof": dof,
        "p_value": pval,
        "tv": tv,
        "tv_bound": min(1.0, tv + 0.5 * (eps(n1) + eps(n2))),
        "bins": bins,
        "outcomes": len(keys),
    }


# =============================================================================== the check
METHODS = {
    "toy-sps": dict(widths=(1, 1), sampled=True),
    "toy-specinfer": dict(widths=(2, 1), sampled=True),
    "toy-topk": dict(widths=(2, 1), sampled=False),
}


def make_drafter(method: str, oracle: TargetOracle, **toy_options):
    """A drafter for the check by name: the toy drafters above (`toy_options` go to ToyDrafter:
    scale, noise, seed), or prompt lookup ("pld")."""
    if method in METHODS:
        return ToyDrafter(oracle, **METHODS[method], **toy_options)
    if method == "pld":
        try:
            from .drafters.pld import PromptLookupDrafter
        except ImportError as e:  # pragma: no cover - depends on the tree being complete
            raise SpecVizError("The prompt-lookup drafter (specviz/drafters/pld.py) is not available.") from e
        return PromptLookupDrafter()
    raise SpecVizError(f"Unknown method {method!r} for the losslessness check; choose one of: pld, {', '.join(METHODS)}.")


@dataclass
class CheckResult:
    method: str
    variant: str
    sampling: dict
    samples: int
    horizon: int
    seed: int
    vanilla: dict  # outcome tuple -> count
    speculative: dict
    p_value: float
    chi2: float
    dof: int
    tv: float
    tv_bound: float
    bins: int
    exact_max_diff: float | None  # exact round distribution vs target at the prompt (None: not computable)
    exact_k: int  # tokens covered by the exact check
    drafted_at_prompt: int  # draft tokens in the tree at the prompt (0: the exact check is trivial)
    passed: bool
    alpha: float
    seconds: float
    samples_per_s: float  # vanilla + speculative samples drawn per second (whole check)
    forwards: int
    forward_seconds: float  # of `seconds`, time spent in target forwards
    prefixes: int
    tau: float  # mean tokens per speculative round
    acceptance: float  # accepted / drafted tokens
    notes: list = field(default_factory=list)


def _check_params(samples, horizon, params):
    if not isinstance(samples, int) or samples < 1:
        raise SpecVizError(f"samples must be a whole number >= 1, got {samples!r}.")
    if not isinstance(horizon, int) or not 1 <= horizon <= 8:
        raise SpecVizError(f"horizon must be a whole number from 1 to 8, got {horizon!r}.")
    if not isinstance(params, SamplingParams):
        raise SpecVizError("params must be a SamplingParams.")


def exact_at_prompt(oracle: TargetOracle, drafter, params: SamplingParams, horizon: int, variant: str, generator=None):
    """(max difference, k covered, draft tokens) of the exact check for the round at the prompt."""
    proposer = _proposer(drafter, oracle)
    g = torch.Generator().manual_seed(0) if generator is None else generator
    tree = proposer.propose_many([()], params, g, max_depth=horizon - 1)[0]
    pre = _node_prefixes(tree, ())
    oracle.ensure(pre)
    P = torch.stack([oracle.p(s) for s in pre])
    pol = get_policy(variant)
    P_raw = torch.stack([oracle.p_raw(s) for s in pre]) if pol.needs_p_raw else None
    kmax = 1 if (tree.sampled and not params.greedy) else min(horizon, tree.max_depth + 1)
    diff = max(exact_max_diff(tree, P, params, k=k, variant=variant, p_raw=P_raw) for k in range(1, kmax + 1))
    return diff, kmax, len(tree) - 1


class torch_threads:
    """Temporarily set torch's intra-op threads. On a small shared CPU the many tiny vector ops of
    sampling (and even the forwards) run far faster on one thread than with OpenMP contention."""

    def __init__(self, n):
        self.n = n

    def __enter__(self):
        self.old = torch.get_num_threads()
        if self.n:
            torch.set_num_threads(self.n)

    def __exit__(self, *exc):
        torch.set_num_threads(self.old)


def run_check(target, drafter, prompt_ids, params: SamplingParams, samples: int = 10000, horizon: int = 3,
              seed: int = 0, variant: str = "correct", progress=None, alpha: float = 1e-3, exact_tol: float = 1e-6,
              oracle: TargetOracle | None = None, threads: int | None = 1) -> CheckResult:
    """Vanilla vs speculative sampling of the first `horizon` tokens on a real model.

    `target`: a Target or TargetModel; `drafter`: a method name (see :func:`make_drafter`), an
    engine Drafter, or a ToyDrafter; `progress(done, total)` is called as samples finish.
    Passes when the chi-square p-value exceeds `alpha` and the exact check (where computable) is
    within `exact_tol`. Pass `oracle` to reuse memoised target rows across checks of one prompt.
    `threads`: torch threads during the check (None: leave as is).
    """
    with torch_threads(threads):
        return _run_check(target, drafter, prompt_ids, params, samples, horizon, seed, variant, progress, alpha,
                          exact_tol, oracle)


def _run_check(target, drafter, prompt_ids, params, samples, horizon, seed, variant, progress, alpha, exact_tol,
               oracle) -> CheckResult:
    _check_params(samples, horizon, params)
    get_policy(variant)  # fail early on a bad name
    t0 = time.perf_counter()
    if oracle is None or oracle.params != params or oracle.prompt != [int(t) for t in prompt_ids]:
        oracle = TargetOracle(target, prompt_ids, params)
    if isinstance(drafter, str):
        method = drafter
        drafter = make_drafter(drafter, oracle)
    else:
        method = getattr(drafter, "name", type(drafter).__name__)
    notes = []
    try:
        diff, k_exact, drafted = exact_at_prompt(oracle, drafter, params, horizon, variant)
    except SpecVizError as e:
        diff, k_exact, drafted = None, 0, 0
        notes.append(f"exact check skipped: {e}")
    if drafted == 0 and diff is not None:
        notes.append("the drafter proposed nothing at the prompt: the exact check is trivial there")
    gen = torch.Generator().manual_seed(seed)
    van = vanilla_samples(oracle, params, samples, horizon, gen)
    gen = torch.Generator().manual_seed(seed + 1)
    st = SpecStats()
    spec = speculative_samples(oracle, drafter, params, samples, horizon, gen, variant, progress, st)
    cmp = compare_histograms(van, spec)
    secs = time.perf_counter() - t0
    passed = cmp["p_value"] > alpha and (diff is None or diff <= exact_tol)
    return CheckResult(
        method=method, variant=variant, sampling=params.as_dict(), samples=samples, horizon=horizon, seed=seed,
        vanilla=dict(van), speculative=dict(spec), p_value=cmp["p_value"], chi2=cmp["chi2"], dof=cmp["dof"],
        tv=cmp["tv"], tv_bound=cmp["tv_bound"], bins=cmp["bins"], exact_max_diff=diff, exact_k=k_exact,
        drafted_at_prompt=drafted, passed=passed, alpha=alpha, seconds=secs, samples_per_s=2 * samples / secs,
        forwards=oracle.forwards, forward_seconds=oracle.forward_seconds, prefixes=len(oracle), tau=st.tokens / max(st.rounds, 1),
        acceptance=st.accepted / max(st.drafted, 1), notes=notes,
    )


# =============================================================================== command line
DEFAULT_PROMPT = "I flipped a coin and it landed on"


def _parser() -> argparse.ArgumentParser:
    from .bugs import DEFAULT_BROKEN, POLICIES

    ap = argparse.ArgumentParser(
        prog="python -m specviz.lossless",
        description="Check that speculative sampling reproduces vanilla sampling: exact round "
        "distribution at the prompt, then a chi-square test of N samples of the first tokens.",
    )
    ap.add_argument("--method", default="toy-sps", help="pld, toy-sps (sampled chain), toy-specinfer "
                    "(sampled tree), toy-topk (deterministic tree); default toy-sps")
    ap.add_argument("--prompt", default=DEFAULT_PROMPT, help=f"prompt text (default {DEFAULT_PROMPT!r})")
    ap.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    ap.add_argument("--samples", type=int, default=10000)
    ap.add_argument("--horizon", type=int, default=3, help="tokens per sample (1-8)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--broken", nargs="?", const=DEFAULT_BROKEN, default=None, choices=list(POLICIES),
                    metavar="NAME", help=f"use a broken rule (negative control; bare: {DEFAULT_BROKEN}); "
                    f"one of {', '.join(POLICIES)}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--alpha", type=float, default=1e-3, help="fail when the p-value is at or below this")
    ap.add_argument("--draft-scale", type=float, default=None, help="toy drafters: logits divisor")
    ap.add_argument("--draft-noise", type=float, default=None, help="toy drafters: random bias strength")
    ap.add_argument("--model", default=None, help="target model (default: the bundled SmolLM2)")
    return ap


def _validate(args) -> SamplingParams:
    if not args.prompt or not args.prompt.strip():
        raise SpecVizError("The prompt is empty: pass some text with --prompt.")
    if args.temperature < 0 or math.isnan(args.temperature):
        raise SpecVizError(f"--temperature must be >= 0 (0 = greedy), got {args.temperature}.")
    if args.top_k is not None and args.top_k < 1:
        raise SpecVizError(f"--top-k must be a whole number >= 1 (leave it out to switch top-k off), got {args.top_k}.")
    if not (0 < args.top_p <= 1):
        raise SpecVizError(f"--top-p must lie in (0, 1], got {args.top_p}.")
    if args.samples < 1:
        raise SpecVizError(f"--samples must be >= 1, got {args.samples}.")
    if not 1 <= args.horizon <= 8:
        raise SpecVizError(f"--horizon must be between 1 and 8, got {args.horizon}.")
    if args.method not in METHODS and args.method != "pld":
        raise SpecVizError(f"Unknown --method {args.method!r}; choose one of: pld, {', '.join(METHODS)}.")
    return SamplingParams(temperature=args.temperature, top_k=args.top_k or 0, top_p=args.top_p)


def format_result(r: CheckResult, text=None) -> list[str]:
    s = r.sampling
    text = text or (lambda toks: str(list(toks)))
    lines = [
        f"method {r.method} | rule variant {r.variant} | temperature {s['temperature']} top-k "
        f"{s['top_k'] or 'off'} top-p {s['top_p']} | {r.samples} samples x {r.horizon} tokens | seed {r.seed}",
    ]
    if r.exact_max_diff is None:
        lines.append("exact check: not computable here")
    else:
        lines.append(
            f"exact check (round at the prompt, first {r.exact_k} token(s), {r.drafted_at_prompt} drafted): "
            f"max |P_spec - P_target| = {r.exact_max_diff:.3g}"
        )
    lines.append(f"chi-square: {r.chi2:.2f} on {r.dof} dof ({r.bins} bins), p-value = {r.p_value:.3g} (fail at <= {r.alpha:g})")
    lines.append(f"total variation: {r.tv:.4f} (95% upper bound on the true distance {r.tv_bound:.4f})")
    lines.append(
        f"speculative: {r.tau:.2f} tokens/round, acceptance {r.acceptance:.2f}; {r.prefixes} target rows in "
        f"{r.forwards} forwards ({r.forward_seconds:.1f} s); {r.seconds:.1f} s total, {r.samples_per_s:.0f} samples/s"
    )
    top = sorted(set(r.vanilla) | set(r.speculative), key=lambda k: -(r.vanilla.get(k, 0) + r.speculative.get(k, 0)))[:5]
    for k in top:
        lines.append(f"  {text(k)!r:40.40} vanilla {r.vanilla.get(k, 0):6d}  speculative {r.speculative.get(k, 0):6d}")
    lines.extend(f"note: {n}" for n in r.notes)
    lines.append("PASS" if r.passed else "FAIL")
    return lines


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    try:
        params = _validate(args)
        from .target import load_target

        target = load_target(args.model, dtype=torch.float32)
        ids = target.tokenizer.chat_ids(args.prompt) if args.chat else target.tokenizer.encode(args.prompt)
        if not ids:
            raise SpecVizError("The prompt encodes to no tokens.")
        variant = args.broken or "correct"
        with torch_threads(1):
            oracle = TargetOracle(target, ids, params)
            toy = {k: v for k, v in (("scale", args.draft_scale), ("noise", args.draft_noise)) if v is not None}
            if toy and args.method not in METHODS:
                raise SpecVizError("--draft-scale/--draft-noise only apply to the toy drafters.")
            drafter = make_drafter(args.method, oracle, **toy)
        res = run_check(target, drafter, ids, params, args.samples, args.horizon, args.seed, variant,
                        alpha=args.alpha, oracle=oracle)
        res.method = args.method
    except (SpecVizError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    tok = target.tokenizer
    for line in format_result(res, lambda ks: "".join(tok.token_text(t) for t in ks)):
        print(line)
    return 0 if res.passed else 1


if __name__ == "__main__":
    sys.exit(main())
