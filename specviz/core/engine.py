"""The decode loop: draft a tree, verify it in one target pass, accept, repeat.

`SpeculativeDecoder.step()` runs one round and returns a `RoundTrace`; `generate()` loops
rounds to EOS or the token budget. The prompt's last token is the first round's root, so every
generated token comes out of a speculative round (vanilla is the tree with only a root).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .. import SpecVizError
from ..drafters.base import Drafter, NoDraft
from .sampling import SamplingParams, sample
from .target_rows import TargetRows
from .trace import RoundTrace, record_round
from .tree import DraftTree
from .verify import CORRECT, Policy, VerifyResult, rule_name, verify

PREFETCH_ROWS = 3  # target rows at most in a round's first LM-head call (root + likely path)
PREFETCH_MIN_PROB = 0.25  # ... for path nodes the drafter reaches with at least this probability


class TokenRates:
    """tau and tokens/s of a decode that has `tokens`, `rounds` (target passes) and `seconds`."""

    tokens: list[int]
    rounds: int
    seconds: float

    @property
    def tau(self) -> float:
        """Mean tokens per target pass (the bonus token counts), as in the EAGLE papers."""
        return len(self.tokens) / self.rounds if self.rounds else 0.0

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else 0.0


@dataclass
class GenerationResult(TokenRates):
    tokens: list[int]
    text: str
    traces: list[RoundTrace] = field(default_factory=list)
    rounds: int = 0
    seconds: float = 0.0
    prefill_seconds: float = 0.0


@dataclass
class RoundPlan:
    """A drafted round waiting for its verify pass: the tree, where it goes in the cache, and the
    pass's positions and mask rows (None for a root-only plain round)."""

    tree: DraftTree
    L: int
    positions: list[int]
    rows: list[list[bool]] | None
    rng_state: torch.Tensor | None
    t_start: float
    t_draft: float


class SpeculativeDecoder:
    """One sequence's decoding state: target KV cache, drafter state, RNG, produced tokens.

    The target and drafter weights are shared read-only; everything mutable lives here, so
    each user session owns one decoder.
    """

    def __init__(
        self,
        target,
        drafter: Drafter | None = None,
        params: SamplingParams = SamplingParams(),
        seed: int = 0,
        max_len: int | None = None,
        policy: Policy = CORRECT,
        detail: bool = True,
    ):
        self.target, self.model, self.tok = target, target.model, target.tokenizer
        if drafter is not None and not isinstance(drafter, Drafter):  # what a drafter can do is declared there
            raise TypeError(f"drafter must be a specviz.drafters.base.Drafter, got {type(drafter).__name__}")
        self.drafter = drafter or NoDraft()
        if not isinstance(policy, Policy):  # a bug of the zoo is passed as specviz.teaching.bugs.get_policy(name)
            raise TypeError(f"policy must be a specviz.core.verify.Policy, got {type(policy).__name__}")
        self.params, self.seed, self.policy, self.detail = params, int(seed), policy, detail
        self.max_len = min(max_len or 4096, self.model.cfg.max_position)
        self.eos = target.eos_ids
        self.cache = None

    # ------------------------------------------------------------------ set-up
    def prompt_ids(self, prompt, chat: bool = True) -> list[int]:
        """Token ids of a prompt given as text (chat-formatted by default, user text never read as
        chat markers: `ChatTokenizer.safe_chat_ids`) or as token ids (checked against the vocabulary)."""
        if isinstance(prompt, str):
            if not prompt.strip():
                raise SpecVizError("The prompt is empty: type something for the model to answer.")
            return self.tok.safe_chat_ids(prompt) if chat else self.tok.encode(prompt)
        if prompt is None or not hasattr(prompt, "__iter__"):
            raise SpecVizError(f"The prompt must be text or a list of token ids, got {type(prompt).__name__}.")
        ids = list(prompt)
        if not ids:
            raise SpecVizError("The prompt is empty.")
        vocab = self.model.cfg.vocab_size
        bad = [t for t in ids if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab]
        if bad:
            raise SpecVizError(f"Token ids must be whole numbers in [0, {vocab}); got {bad[:5]!r}.")
        return ids

    def start(self, prompt, max_new_tokens: int = 128, chat: bool = True) -> None:
        """Tokenise, prefill all but the last prompt token, and reset the drafter."""
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise SpecVizError(f"max_new_tokens must be a whole number >= 1, got {max_new_tokens!r}.")
        ids = self.prompt_ids(prompt, chat)
        if len(ids) + max_new_tokens + 1 > self.max_len:
            raise SpecVizError(
                f"Prompt ({len(ids)} tokens) plus {max_new_tokens} new tokens exceeds the context "
                f"limit of {self.max_len} tokens: shorten the prompt or ask for fewer tokens."
            )
        self.prompt = ids
        self.max_new_tokens = max_new_tokens
        self.generator = torch.Generator().manual_seed(self.seed)
        self.cache = self.model.new_cache(len(ids) + max_new_tokens + 64)
        t0 = time.perf_counter()
        ctx = ids[:-1]
        taps = {}
        if ctx:
            out = self.model.forward(torch.tensor([ctx]), self.cache, taps=self.drafter.taps, last_only=True)
            self.cache.commit()
            taps = {k: v[0] for k, v in out.taps.items()}
        self.drafter.reset(list(ctx), taps)
        self.prefill_seconds = time.perf_counter() - t0
        self.context = list(ctx)  # tokens the target has processed
        self.root = ids[-1]
        self.generated: list[int] = []
        self.traces: list[RoundTrace] = []
        self.done = False

    # ------------------------------------------------------------------ snapshots
    def snapshot(self) -> dict:
        """Everything needed to replay from here: a round's draws repeat exactly."""
        return {
            "length": self.cache.length,
            "context": list(self.context),
            "root": self.root,
            "generated": list(self.generated),
            "n_traces": len(self.traces),
            "rng": self.generator.get_state(),
            "drafter": self.drafter.snapshot(),
            "done": self.done,
        }

    def restore(self, snap: dict) -> None:
        self.cache.truncate(snap["length"])
        self.context, self.root = list(snap["context"]), snap["root"]
        self.generated = list(snap["generated"])
        self.traces = self.traces[: snap["n_traces"]]
        self.generator.set_state(snap["rng"])
        self.drafter.restore(snap["drafter"])
        self.done = snap["done"]

    # ------------------------------------------------------------------ one round
    def step(self) -> RoundTrace:
        """One round: draft a tree, score all of it in one target pass, accept, commit, record."""
        plan = self.draft()
        # 2. verify: one target forward over every node under the tree mask gives p after each node
        tree, n = plan.tree, len(plan.tree)
        out = self.model.forward(
            torch.tensor([tree.tokens]), self.cache,
            positions=None if n == 1 else torch.tensor(plan.positions),  # None: the one next position, L
            tree_mask=None if n == 1 else torch.tensor(plan.rows, dtype=torch.bool), taps=self.drafter.taps, head=False,
        )
        target_rows = self.target_rows(plan, out)
        target_rows.ensure(self.first_rows(plan))
        return self.finish(plan, out, target_rows)

    def draft(self) -> "RoundPlan":
        """A round's first phase: the drafter's tree, and the positions and mask of its verify pass
        (built as Python lists and made tensors once: every small torch op costs more than the list work).
        `step` runs the three phases for one sequence; `specviz.serving.batch` runs them for many with one pass."""
        if self.cache is None:
            raise SpecVizError("Call start(prompt) before step().")
        if self.done:
            raise SpecVizError("Generation has finished: start again for more.")
        t_start = time.perf_counter()
        rng_state = self.generator.get_state() if self.detail else None  # only a detailed trace keeps it
        # 1. draft: the drafter proposes a tree rooted at the last committed token; nodes deeper
        #    than the remaining budget could never count
        tree = self.drafter.propose(self.context, self.root, self.params, self.generator)
        tree = tree.prune(self.max_new_tokens - len(self.generated) - 1)
        L, n = self.cache.length, len(tree)
        positions = tree.position_list(L)
        rows = tree.attention_rows() if n > 1 or self.detail else None
        return RoundPlan(tree, L, positions, rows, rng_state, t_start, time.perf_counter())

    def first_rows(self, plan: "RoundPlan") -> list[int]:
        """The target rows a round computes in its first LM-head call: the root's, the likely path's,
        and in a detailed trace every inner node's (the p of each drafted token comes from its parent)."""
        return [0] + self._likely_rows(plan.tree) + (plan.tree.inner_nodes() if self.detail else [])

    def finish(self, plan: "RoundPlan", out, target_rows: TargetRows, pass_start: float | None = None) -> RoundTrace:
        """A round's last phases, after its verify pass `out`: accept (the walk), commit, record.
        `pass_start`: when the (shared) pass began, if not right after this round's drafting."""
        res = self.accept(plan.tree, target_rows)
        committed = self.commit(plan.tree, res, out)
        t_verify = time.perf_counter()
        return self.record(plan, res, committed, target_rows, (plan.t_start, plan.t_draft,
                                                               plan.t_draft if pass_start is None else pass_start, t_verify))

    def accept(self, tree: DraftTree, target_rows: TargetRows) -> VerifyResult:
        """Which drafts the target keeps, and its own next token: the acceptance walk over p after each
        node (computed only where it is used: specviz.core.target_rows); a vanilla round draws from p."""
        p, p_raw = target_rows.p, target_rows.raw
        best = target_rows.argmax if self.params.greedy else None
        if len(tree) == 1:  # vanilla: nothing to verify, just draw the next token from p
            return _vanilla_result(tree, p[0], self.params, self.generator, best)
        return self.walk(tree, p, p_raw, best)

    def commit(self, tree: DraftTree, res: VerifyResult, out) -> list[int]:
        """Keep the root and the accepted path in the target's cache and the drafter's state; append the
        new tokens (cut at an end-of-sequence token) and return them."""
        keep = [0] + list(res.accepted)
        self.cache.commit(keep)
        processed = [tree.tokens[i] for i in keep]
        if out.taps:
            prefix = keep == list(range(len(keep)))  # a chain's path: a slice, no gather
            self.drafter.commit(processed, {k: v[0, : len(keep)] if prefix else v[0, keep] for k, v in out.taps.items()})
        else:
            self.drafter.commit(processed, {})
        committed = [tree.tokens[i] for i in res.accepted] + [res.extra_token]
        for j, t in enumerate(committed):
            if t in self.eos:
                committed = committed[: j + 1]
                self.done = True
                break
        self.context.extend(processed)
        self.root = res.extra_token
        self.generated.extend(committed)
        if len(self.generated) >= self.max_new_tokens:
            self.done = True
        return committed

    def record(self, plan: "RoundPlan", res: VerifyResult, committed: list[int], target_rows: TargetRows,
               times: tuple) -> RoundTrace:
        """The round's trace (specviz.core.trace.record_round builds it from what the round computed)."""
        trace = record_round(plan.tree, res, committed, round_index=len(self.traces), method=self.drafter.name,
                             sampling=self.params, L=plan.L, target_rows=target_rows, detail=self.detail,
                             times=times, finished=self.done, rng_state=plan.rng_state, positions=plan.positions,
                             rows=plan.rows)
        if self.detail:  # a detailed round is for people: its tokens as text (trace.render_texts)
            trace.render_texts(self.tok.token_text)
        self.traces.append(trace)
        return trace

    def walk(self, tree: DraftTree, p, p_raw, best) -> VerifyResult:
        """The acceptance walk (specviz.core.verify): min(1, p/q), residual norm(max(p - q, 0)), the bonus
        from p after a full path. specviz.mistakes overrides it for a decoder that drops the bonus."""
        return verify(tree, p, self.params, self.generator, p_raw=p_raw, policy=self.policy, best=best)

    def _likely_rows(self, tree: DraftTree) -> list[int]:
        """Rows the walk will probably need after the root's, computed in the root's LM-head call.

        On a CPU the LM head reads its whole 49k x 576 matrix from memory for one row or three
        (docs/runtime.md has the timings), so a row the walk reaches costs a second full read if
        asked for later and a fraction of one if asked for now. A row is taken while the drafter's
        own probability of reaching it is >= PREFETCH_MIN_PROB: an expected saving (~prob x one call)
        above its cost.
        Which rows are computed never changes a number (rows are computed row by row)."""
        if self.detail or not self.drafter.q_is_probability or len(tree) == 1:
            return []  # a detailed trace keeps "no p row" meaning "the walk never used it"
        return tree.likely_path(PREFETCH_MIN_PROB, PREFETCH_ROWS - 1)

    def target_rows(self, plan: "RoundPlan", out) -> TargetRows:
        """The lazy p (and raw softmax) rows of one verify pass."""
        tree = plan.tree
        if out.logits is not None:  # a captured CUDA graph computed the LM head already
            full = out.logits[0]
            logits_of = lambda rows: full[rows]  # noqa: E731
            device = full.device
        else:
            hidden = out.hidden[0]
            logits_of = lambda rows: self.model.logits(hidden[rows])  # noqa: E731
            device = hidden.device
        want_raw = self.policy is not CORRECT or (self.detail and self.params.greedy)
        # drawn drafts keep their q rows on the CPU: verify there
        return TargetRows(logits_of, len(tree), self.model.cfg.vocab_size, self.params, raw=want_raw,
                          device="cpu" if tree.sampled else device)

    def generate(self, prompt=None, max_new_tokens: int = 128, chat: bool = True, progress=None) -> GenerationResult:
        """Run rounds until EOS or the budget; `progress(n_tokens, budget)` is called per round."""
        if prompt is not None:
            self.start(prompt, max_new_tokens, chat)
        t0 = time.perf_counter()
        while not self.done:
            self.step()
            if progress:
                progress(len(self.generated), self.max_new_tokens)
        return GenerationResult(
            tokens=list(self.generated),
            text=self.tok.decode(self.generated, skip_special_tokens=True),
            traces=list(self.traces),
            rounds=len(self.traces),
            seconds=time.perf_counter() - t0,
            prefill_seconds=self.prefill_seconds,
        )


def _vanilla_result(tree: DraftTree, dist: torch.Tensor, params: SamplingParams, generator, best=None) -> VerifyResult:
    """What `verify` would return for a root-only tree, without the walk (`best`: the argmax
    per row when the caller already has it)."""
    if params.greedy:
        tok = best[0] if best is not None else int(dist.argmax())
    else:
        tok = sample(dist, generator)
    return VerifyResult([], tok, "vanilla", dist, [], rule_name(tree, params))


def vanilla_generate(target, prompt, max_new_tokens=128, params=SamplingParams(), seed=0, chat=True) -> GenerationResult:
    """Plain autoregressive decoding on our runtime: the baseline every method must match."""
    return SpeculativeDecoder(target, NoDraft(), params, seed=seed, detail=False).generate(prompt, max_new_tokens, chat)
