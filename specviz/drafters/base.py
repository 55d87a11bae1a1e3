"""The interface every drafter implements, and the context the engine hands it.

The engine owns the target and its KV cache; a drafter only sees committed tokens, the
target's hidden-state taps it asked for (`taps`), the sampling settings and the round's
random generator. Whatever state a drafter keeps (its own KV cache, say) it must keep
consistent through `commit`, which reports exactly what the target accepted, and hand out and take
back through `snapshot` / `restore` (the engine replays rounds with them).

A drafter that drafts a tree of a tunable shape (EAGLE, Medusa) exposes it as `shape` (a
`TreeShape`) and takes a new one through `reshape`: the tuner, the benchmark and the pages read
and set the shape only this way. `sampled_shape` is the shape it drafts at T > 0 when the tuner
timed one there (None: `shape` at every temperature).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from .. import SpecVizError
from ..core.sampling import SamplingParams
from ..core.tree import DraftTree
from .shape import TreeShape


DRAFT_VOCAB = 8192  # tuned drafters that read the target's LM head draft over this many first ids, as many as EAGLE-3's


LOOKUP_TOKENS = 3  # the lookup branch of a tuned tree (EAGLE, Medusa): tokens copied (docs/tuning.md)
LOOKUP_NGRAM = (2, 3)  # the tails it matches: 2 to 3 tokens (one token matched too often by chance)


@dataclass(frozen=True)
class TreeTiming:
    """What the tuner measured for one tree on built-in prompts (tau, tokens/s, vanilla's tokens/s and
    the ratio, at `temperature`) beside what its cost model predicted; None where the record lacks it."""

    tau: float | None = None
    tok_s: float | None = None
    vanilla_tok_s: float | None = None
    speedup: float | None = None
    model_tau: float | None = None
    model_tok_s: float | None = None
    temperature: float | None = None

    @classmethod
    def of(cls, record: dict) -> "TreeTiming":
        return cls(**{f.name: record.get(f.name) for f in dataclasses.fields(cls)})

    def describe(self) -> dict:
        """The measured values present, as plain JSON (what the benchmark's files record)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass(frozen=True)
class TreePick:
    """The tuner's choice for one drafter on this device, read by name: the greedy tree and the tree timed
    at T = 1 (it serves every T > 0), their timings, and what a tuned tree drafts with besides its shape:
    the draft vocabulary of a drafter that reads the target's LM head (DRAFT_VOCAB: the fastest setting
    we know, docs/tuning.md), the lookup branch's tokens, and how drafts are picked at T > 0 ("sample":
    drawn from q; "top": EAGLE's top-k). specviz.methods builds it from `specviz.tuning`'s stored record
    (`from_record`); drafters never import the tuner."""

    greedy: TreeShape
    sampled: TreeShape | None = None
    greedy_timing: TreeTiming = TreeTiming()
    sampled_timing: TreeTiming | None = None
    draft_vocab: int = DRAFT_VOCAB
    lookup: int = LOOKUP_TOKENS
    draw: str = "top"

    @classmethod
    def from_record(cls, record: dict, draw: str = "top") -> "TreePick":
        """The tuner's record as stored (the greedy tree: `paths`, or `depth`, `total_tokens`, `top_k`,
        `min_prob`; the tree timed at T = 1 under `sampled`, its top-k the greedy one's when absent)."""
        greedy = _shape_of(record, draw, top_k=8)
        s = record.get("sampled")
        return cls(greedy=greedy, sampled=_shape_of(s, draw, greedy.top_k) if s else None,
                   greedy_timing=TreeTiming.of(record), sampled_timing=TreeTiming.of(s) if s else None, draw=draw)

    def shape_at(self, greedy: bool) -> TreeShape:
        """The tree drafted greedy, or at T > 0 (the greedy one when none was timed there)."""
        return self.greedy if greedy or self.sampled is None else self.sampled

    def timing_at(self, greedy: bool) -> TreeTiming:
        return self.greedy_timing if greedy or self.sampled_timing is None else self.sampled_timing

    def sampled_for(self, greedy: TreeShape) -> TreeShape | None:
        """The T > 0 tree for a drafter whose greedy shape is `greedy` (a dynamic tree keeps its top-k and
        its way of drawing; None: none was timed)."""
        s = self.sampled
        if s is None or s.kind == "static":
            return s
        return greedy.replace(depth=s.depth, total_tokens=s.total_tokens, min_prob=s.min_prob)


def _shape_of(record: dict, draw: str, top_k: int) -> TreeShape:
    if "paths" in record:
        return TreeShape.static(record["paths"])
    return TreeShape.dynamic(record["depth"], record.get("top_k", top_k), record["total_tokens"],
                             record.get("min_prob", 0.0), draw=draw)


def default_draft_vocab(draft_vocab, pick: TreePick | None):
    """The draft vocabulary of a drafter that reads the target's LM head (EAGLE-1/2, Medusa): `draft_vocab`
    when given (0: all ids), else the pick's on a tuned tree and all ids on the papers' trees, as the papers draft."""
    return (pick.draft_vocab if pick else 0) if draft_vocab is None else draft_vocab


def default_lookup(lookup, pick: TreePick | None) -> int:
    """The lookup branch of a tree drafter (drafters.lookup): `lookup` copied tokens when given (0: none), else
    the pick's on a tuned tree and none on the papers' trees, as the papers draft."""
    return (pick.lookup if pick else 0) if lookup is None else lookup


def cut_vocabulary(draft_vocab, vocab_size: int) -> int | None:
    """`draft_vocab` checked: draft over the first that many token ids, or None for all of them (None, 0,
    or at least the whole vocabulary). A BPE vocabulary lists its most frequent tokens first."""
    if draft_vocab is None:
        return None
    if isinstance(draft_vocab, bool) or not isinstance(draft_vocab, int) or draft_vocab < 0:
        raise ValueError(f"draft_vocab must be a whole number >= 0 (0: the whole vocabulary), got {draft_vocab!r}")
    return draft_vocab if 0 < draft_vocab < vocab_size else None


class Drafter:
    name = "base"
    taps: tuple = ()  # target taps needed: layer indices (their inputs) and/or "final"
    # q is the drafter's probability of each token (a head or a draft model), not a placeholder
    # 1.0 (prompt lookup): the engine then computes the target's rows on the likeliest path at once
    q_is_probability = False
    tuning: TreePick | None = None  # the tuner's pick this drafter was built from (None: a fixed tree)

    def reset(self, context: list[int], taps: dict) -> None:
        """Start a sequence. `context` = tokens the target has processed (the prompt minus its
        last token, which becomes the first root); `taps[k]` = [len(context), H] tensors."""

    def propose(self, context: list[int], root: int, params: SamplingParams, generator: torch.Generator) -> DraftTree:
        """Draft a tree whose root is `root` (the last committed token, not yet processed)."""
        raise NotImplementedError

    def commit(self, processed: list[int], taps: dict) -> None:
        """The target processed and kept `processed` (root + accepted drafts) this round;
        `taps[k]` holds their hidden states [len(processed), H]."""

    def snapshot(self):
        """The per-sequence state `restore` needs to return here (None: the drafter keeps none)."""
        return None

    def restore(self, snap) -> None:
        """Return to the state of `snapshot()`."""

    _shape: TreeShape | None = None  # a tree drafter sets its shape in __init__ (then reshape keeps its kind)
    _sampled: TreeShape | None = None

    @property
    def shape(self) -> TreeShape | None:
        """The tree this drafter drafts (None: no tunable tree)."""
        return self._shape

    @property
    def sampled_shape(self) -> TreeShape | None:
        return self._sampled

    def reshape(self, shape: TreeShape, sampled: TreeShape | None = None) -> None:
        """Draft `shape` from now on (and `sampled` at T > 0, when given); the tree's kind stays."""
        if self._shape is None:
            raise SpecVizError(f"{self.name} drafts no tree whose shape can be changed.")
        if shape.kind != self._shape.kind or (sampled is not None and sampled.kind != shape.kind):
            raise ValueError(f"{self.name} drafts a {self._shape.kind} tree, not a {shape.kind} one.")
        self._shape, self._sampled = shape, sampled

    def shape_at(self, params: SamplingParams) -> TreeShape | None:
        """The shape drafted at these sampling settings."""
        return (None if params.greedy else self.sampled_shape) or self.shape

    def describe(self, params: SamplingParams = SamplingParams()) -> dict:
        """What the drafter is, as plain values: its name and, when it has one, its tree at `params`."""
        shape = self.shape_at(params)
        return {"name": self.name, **(shape.describe() if shape else {})}


class WrappedDrafter(Drafter):
    """A drafter that hands its sequence state to `inner` and changes only what it proposes (a recorder,
    a mistake of specviz.mistakes): reset, commit, snapshot and restore go to `inner` unchanged."""

    def __init__(self, inner: Drafter):
        self.inner = inner
        self.name, self.taps, self.q_is_probability = inner.name, inner.taps, inner.q_is_probability

    def reset(self, context, taps):
        self.inner.reset(context, taps)

    def commit(self, processed, taps):
        self.inner.commit(processed, taps)

    def snapshot(self):
        return self.inner.snapshot()

    def restore(self, snap):
        self.inner.restore(snap)


class NoDraft(Drafter):
    """Vanilla decoding as a degenerate drafter: the tree is the root alone."""

    name = "vanilla"

    def propose(self, context, root, params, generator):
        return DraftTree(tokens=[int(root)], parents=[-1], q=[1.0])


def describe_tree(drafter, params: SamplingParams = SamplingParams()) -> dict | None:
    """The tree a drafter uses at `params`, and why: device-tuned (with the tuner's timing on built-in
    prompts, greedy or at T = 1, and the model's predictions) or fixed."""
    shape = drafter.shape
    if shape is None:
        return None
    # how it drafts besides its tree: a cut vocabulary, a lookup branch (drafters.base), if any
    vocab = {k: v for k, v in drafter.describe(params).items() if k in ("draft_vocab", "lookup")}
    pick = drafter.tuning
    if pick:
        tree = {k: v for k, v in pick.shape_at(params.greedy).describe().items() if k != "top_k"}
        return {"source": "device-tuned", **tree, **pick.timing_at(params.greedy).describe(), "draw": shape.draw, **vocab}
    out = {k: v for k, v in shape.describe().items() if k != "top_k"}
    return {"source": "fixed", **out, **vocab}
