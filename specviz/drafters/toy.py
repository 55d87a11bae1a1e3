"""Toy drafters for the losslessness check: the target's own logits, distorted, and no weights.

They always have drafts and rejections, so a broken acceptance rule shows at once. They draft
from a `TargetOracle` (specviz.lossless), which memoises the target's logits per prefix.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from ..core.sampling import SamplingParams, probs
from ..core.tree import DraftTree


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

    def __init__(self, oracle, widths=(1, 1), sampled: bool = True, scale: float = 0.5,
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
        trees = {i: DraftTree(tokens=[root_of(prefixes[i])], parents=[-1], q=[1.0], sampled=sampled,
                              without_replacement=self.without_replacement) for i in todo}
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
    """n independent draws by inverse CDF (much faster than torch.multinomial over a large vocabulary).
    `right=True` never lands on a zero-probability token."""
    u = torch.rand(n, generator=generator, dtype=torch.float64) * cdf[-1]
    idx = torch.searchsorted(cdf, u, right=True).clamp(max=cdf.numel() - 1)
    return [int(i) for i in idx]


def widths_is_chain(widths) -> bool:
    return all(w == 1 for w in widths)
