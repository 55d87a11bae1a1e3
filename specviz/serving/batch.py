"""Batched speculative decoding: B sequences, each with its own drafter and tree, one target pass.

What a serving engine does with EAGLE. Every round, each unfinished sequence drafts its own tree
(its own size: ragged), all the trees go through the target in one pass (`TargetModel.forward_batch`: one read of
the weights for the whole batch, a block-diagonal tree mask, each sequence's own KV cache), the
target's rows the walks need first come from one LM-head call for the batch, and then each
sequence walks its tree, commits its accepted path to its own cache and drafter, and traces its
round exactly as it would alone (`SpeculativeDecoder.finish`).

A sequence's output is the one it gets alone: its drafter, random generator and cache are its
own, and on the CPU every row of the shared pass has its solo bits (tests/test_batch.py), so a
greedy batch is token-identical to B solo decodes and a sampled one draws from the same
distribution with the same draws.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .. import SpecVizError
from ..core.engine import GenerationResult, SpeculativeDecoder
from ..core.kv_cache import PassPart
from ..core.sampling import SamplingParams
from ..core.trace import RoundTrace
from ..core.verify import CORRECT, Policy


@dataclass
class BatchRound:
    """One batched round as plain values: which sequences took part, each one's tree size and
    committed tokens, and where its time went (drafting summed over the sequences, the shared
    target pass, the first LM-head call, the walks and commits)."""

    index: int
    sequences: list[int]  # indices of the sequences in this round (finished ones drop out)
    nodes: list[int]  # tree size of each
    committed: list[int]  # tokens each committed
    draft_s: float
    pass_s: float
    head_s: float
    walk_s: float
    traces: list[RoundTrace] = field(default_factory=list)
    plans: list = field(default_factory=list, repr=False)  # each sequence's RoundPlan (its tree) ...
    target_rows: list = field(default_factory=list, repr=False)  # ... and its TargetRows (the exact check)


class BatchDecoder:
    """B `SpeculativeDecoder`s over one target, stepped together.

    Each decoder keeps everything per-sequence (cache, drafter, RNG, sampling settings, acceptance
    rule); the batch owns only the shared pass. Build it from decoders (`BatchDecoder(decs)`),
    or from a drafter factory with `BatchDecoder.of(target, make, n)`.
    """

    def __init__(self, decoders: list[SpeculativeDecoder]):
        if not decoders:
            raise SpecVizError("A batch needs at least one sequence.")
        models = {id(d.model) for d in decoders}
        if len(models) != 1:
            raise SpecVizError("Every sequence of a batch must decode with the same target model.")
        self.decoders = list(decoders)
        self.model = decoders[0].model
        self.rounds: list[BatchRound] = []

    @classmethod
    def of(cls, target, make_drafter, n: int, params: SamplingParams = SamplingParams(), seeds=None,
           detail: bool = False, policy: Policy = CORRECT) -> "BatchDecoder":
        """n decoders, each with a fresh drafter from `make_drafter()` (drafters keep per-sequence state)."""
        seeds = list(range(n)) if seeds is None else list(seeds)
        if len(seeds) != n:
            raise SpecVizError(f"{n} sequences need {n} seeds, got {len(seeds)}.")
        return cls([SpeculativeDecoder(target, make_drafter(), params, seed=s, detail=detail, policy=policy)
                    for s in seeds])

    def __len__(self) -> int:
        return len(self.decoders)

    @property
    def done(self) -> bool:
        return all(d.done for d in self.decoders)

    def start(self, prompts: list, max_new_tokens: int = 128, chat: bool = True) -> None:
        """Prefill each sequence's prompt (one by one: prefill is not what a round batches)."""
        if len(prompts) != len(self.decoders):
            raise SpecVizError(f"The batch has {len(self.decoders)} sequences but got {len(prompts)} prompts.")
        for d, p in zip(self.decoders, prompts):
            d.start(p, max_new_tokens, chat)
        self.rounds = []

    def step(self) -> BatchRound:
        """One round for every unfinished sequence, with one target pass for all their trees."""
        live = [i for i, d in enumerate(self.decoders) if not d.done]
        if not live:
            raise SpecVizError("Every sequence of the batch has finished: start again for more.")
        decs = [self.decoders[i] for i in live]
        t0 = time.perf_counter()
        plans = [d.draft() for d in decs]
        t1 = time.perf_counter()
        taps = sorted({t for d in decs for t in d.drafter.taps}, key=str)
        parts = [PassPart(p.tree.tokens, d.cache, p.positions, p.rows if len(p.tree) > 1 else None)
                 for d, p in zip(decs, plans)]
        outs = self.model.forward_batch(parts, taps=tuple(taps))
        for d, o in zip(decs, outs):  # each drafter gets only the taps it asked for
            o.taps = {k: v for k, v in o.taps.items() if k in d.drafter.taps}
        t2 = time.perf_counter()
        rows = [d.target_rows(p, o) for d, p, o in zip(decs, plans, outs)]
        self._first_rows(decs, plans, outs, rows)
        t3 = time.perf_counter()
        traces = [d.finish(p, o, r, pass_start=t1) for d, p, o, r in zip(decs, plans, outs, rows)]
        t4 = time.perf_counter()
        rnd = BatchRound(len(self.rounds), live, [len(p.tree) for p in plans], [len(t.committed) for t in traces],
                         draft_s=t1 - t0, pass_s=t2 - t1, head_s=t3 - t2, walk_s=t4 - t3, traces=traces,
                         plans=plans, target_rows=rows)
        if self.rounds:  # only the latest round keeps its trees and target rows (they hold p rows of 49k floats)
            self.rounds[-1].plans, self.rounds[-1].target_rows = [], []
        self.rounds.append(rnd)
        return rnd

    def _first_rows(self, decs, plans, outs, rows) -> None:
        """Every sequence's first target rows (root, likely path, ...) from one LM-head call: the
        49k-row head is read once for the batch, as the layers were. A row's numbers do not depend
        on the rows beside it (the block LM head sums each row alone), so each sequence's p is its
        solo p. A walk that needs another row computes it on its own later, as a solo round does."""
        wanted = [d.first_rows(p) for d, p in zip(decs, plans)]
        wanted = [sorted(set(w)) for w in wanted]
        if len(decs) == 1 or any(o.logits is not None for o in outs):
            for r, w in zip(rows, wanted):
                r.ensure(w)
            return
        hidden = torch.cat([o.hidden[0, w] for o, w in zip(outs, wanted)])
        logits = self.model.logits(hidden)
        at = 0
        for r, w in zip(rows, wanted):
            r.fill(w, logits[at: at + len(w)])
            at += len(w)

    def generate(self, prompts: list | None = None, max_new_tokens: int = 128, chat: bool = True,
                 progress=None) -> list[GenerationResult]:
        """Rounds until every sequence ends; `progress(tokens_so_far, budget)` per round."""
        if prompts is not None:
            self.start(prompts, max_new_tokens, chat)
        t0 = time.perf_counter()
        ended = {}
        while not self.done:
            self.step()
            now = time.perf_counter()
            for i, d in enumerate(self.decoders):
                if d.done and i not in ended:
                    ended[i] = now - t0  # a user's wait ends when their own sequence does
            if progress:
                progress(sum(len(d.generated) for d in self.decoders), sum(d.max_new_tokens for d in self.decoders))
        results = []
        for i, d in enumerate(self.decoders):
            results.append(GenerationResult(
                tokens=list(d.generated), text=d.tok.decode(d.generated, skip_special_tokens=True),
                traces=list(d.traces), rounds=len(d.traces), seconds=ended.get(i, 0.0),
                prefill_seconds=d.prefill_seconds))
        return results
