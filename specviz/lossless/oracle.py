"""The target's distributions after every prefix of a prompt, and drafters adapted to ask for them.

A :class:`TargetOracle` memoises the target's logits per prefix and computes missing ones in
batched tree-masked forwards, so vanilla and speculative sampling see the very same target rows.
Proposers turn any drafter into `propose_many(prefixes, ...)`: the toy drafters do it natively;
engine drafters are called once per prefix (and reset on that prefix's context first when they
keep state: EAGLE and Medusa read the target's hidden states, SpS keeps its own cache).
"""

from __future__ import annotations

import time

import torch

from .. import SpecVizError
from ..drafters.base import Drafter
from ..core.sampling import SamplingParams, probs
from ..core.tree import DraftTree

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


def node_prefixes(tree: DraftTree, g: tuple) -> list[tuple]:
    """The generated-token prefix each node's target row belongs to (node 0: g itself)."""
    pre = [tuple(g)] * len(tree)
    for i in range(1, len(tree)):
        pre[i] = pre[tree.parents[i]] + (tree.tokens[i],)
    return pre


class EngineProposer:
    """Adapts an engine Drafter (propose(context, root, params, generator)) to lockstep waves.

    A drafter that keeps state between rounds (it overrides `reset`: EAGLE and Medusa read the
    target's hidden states, SpS keeps its own KV cache) is first reset on the prefix's context,
    with the taps of one target prefill, exactly as the engine starts a sequence; a stateless one
    (prompt lookup) is called directly. Trees that were not drawn at random are memoised per prefix.
    """

    def __init__(self, drafter: Drafter, oracle: TargetOracle):
        self.drafter, self.oracle = drafter, oracle
        self.name = drafter.name
        self.stateful = type(drafter).reset is not Drafter.reset
        self._trees: dict[tuple, DraftTree] = {}
        self._ready: tuple | None = None  # the prefix the drafter was last reset on

    def _reset(self, context: list[int]) -> None:
        taps = {}
        if context and self.drafter.taps:
            model = self.oracle.model
            out = model.forward(torch.tensor([context]), model.new_cache(len(context) + 1), taps=self.drafter.taps,
                                last_only=True)
            taps = {k: v[0] for k, v in out.taps.items()}
        self.drafter.reset(list(context), taps)

    def _propose(self, g: tuple, params, generator, max_depth: int | None) -> DraftTree:
        seq = self.oracle.prompt + list(g)
        if self.stateful and max_depth is not None and max_depth <= 0:
            return DraftTree(tokens=[seq[-1]], parents=[-1], q=[1.0])  # nothing may be drafted: skip the prefill
        if not self.stateful:
            return self.drafter.propose(seq[:-1], seq[-1], params, generator)
        if self._ready != g:
            self._reset(seq[:-1])
            self._ready = g
        snap = self.drafter.snapshot()
        tree = self.drafter.propose(seq[:-1], seq[-1], params, generator)
        self.drafter.restore(snap)  # the next sample from this prefix drafts from the same state
        return tree

    def propose_many(self, prefixes, params, generator, max_depth: int | None = None):
        # a stateful drafter is reset once per prefix: take the samples of one prefix together
        order = sorted(range(len(prefixes)), key=lambda i: tuple(prefixes[i])) if self.stateful else range(len(prefixes))
        out = [None] * len(prefixes)
        for i in order:
            g = tuple(prefixes[i])
            tree = self._trees.get((g, max_depth))
            if tree is None:
                tree = self._propose(g, params, generator, max_depth)
                if max_depth is not None:
                    tree = tree.prune(max_depth)
                if not tree.sampled:
                    self._trees[(g, max_depth)] = tree
            out[i] = tree
        return out


def propose_grouped(proposer, gs, params, generator, horizon):
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


def proposer_for(drafter, oracle):
    """The toy drafters propose in waves themselves; engine drafters go through EngineProposer."""
    return drafter if hasattr(drafter, "propose_many") else EngineProposer(drafter, oracle)
