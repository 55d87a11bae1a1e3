"""The mistakes themselves: each one change from the correct engine, small enough to read at once.

Output-changing: :func:`trained_along` (the target's final norm took one optimizer step of the draft
head's loss), :func:`padded_greedy` (a right-padded row decoded with its padding mask dropped). The
third, the residual built from the scalar q(x), is the bug zoo's ``scalar-residual`` (specviz.teaching.bugs).
Only slower: :class:`StaleFeatureEagle` (every draft step reads the prefix's last feature),
:class:`HotDraftSpS` (SpS drafting and verifying with a q at another temperature),
:class:`NoBonusDecoder` (the bonus token thrown away), :class:`UncachedTargetDrafter` (a fresh
uncached target pass before every draft step). The misreporting ones change no computation: their
figures are worked out from the correct run in :mod:`specviz.mistakes.run`.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import torch

from ..drafters.base import Drafter, WrappedDrafter
from ..drafters.eagle import EagleDrafter
from ..drafters.sps import SpSDrafter
from ..core.engine import SpeculativeDecoder
from ..core.sampling import SamplingParams
from ..core.target import Target
from ..core.tree import DraftTree
from ..core.verify import VerifyResult

CHAIN_4 = [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]]  # EAGLE-1 drafting a chain of k = 4 tokens: the tutorials' shape
PAD = 8  # padding tokens after the prompt in the padded-batch case


# ------------------------------------------------------------------------- changes the output
def trained_along(target: Target, drafter: EagleDrafter, ids: list[int], lr: float = 1e-3) -> tuple[Target, float]:
    """The target after one Adam step of the EAGLE-1 head's token loss taken through its final norm.

    The smallest real version of "the target was not frozen while the head trained": the head reads
    the target's normed last hidden state, so its loss has a gradient on the final norm's weight; a
    tutorial that hands every parameter with ``requires_grad`` to the optimizer updates that weight
    too. One step on one training sequence `ids` (Adam's first step moves every entry by `lr`
    against the sign of its gradient). Returns (a copy of the target whose final norm is updated,
    the head's loss before the step). The user's target is untouched.
    """
    model, head = target.model, drafter.head
    with torch.no_grad():
        out = model.forward(torch.tensor([ids]), model.new_cache(len(ids) + 1), taps=("final",), head=False)
    normed = out.taps["final"][0].float()
    w0 = model.norm.float()
    unit = normed / w0  # the final norm's input divided by its RMS: what the weight multiplies
    w = w0.clone().requires_grad_(True)
    feats = unit * w
    T = len(ids)
    tokens = torch.tensor([ids[1:]])
    pos = torch.arange(T - 1)[None]
    with torch.enable_grad():
        pred = head.forward_seq(tokens, feats[None, : T - 1].to(next(head.parameters()).dtype), pos)[0]
        logits = pred[:-1].float() @ head._lm_head.float().T  # the target's own LM head turns features into q
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[2:]))
        (grad,) = torch.autograd.grad(loss, w)
    new_norm = (w0 - lr * torch.sign(grad)).to(model.norm.dtype)
    changed = copy.copy(model)  # shares every other weight; only `norm` is rebound
    changed.norm = new_norm
    return replace(target, model=changed), float(loss.detach())


def padded_greedy(target: Target, ids: list[int], max_new_tokens: int, pad: int = PAD, mask_pads: bool = False) -> list[int]:
    """Greedy decoding of one row of a right-padded batch: the prompt, then `pad` padding tokens.

    The first token is read at the prompt's real last position, as such code does; the next ones are
    appended after the padding. Without the mask (`mask_pads` False) every later token attends to
    the padding and sits `pad` positions too far; with it (the padding's keys masked out, here
    dropped from the cache, which is the same) the output is vanilla's. The prompt's last token goes
    through the model alone, as vanilla's first round does, so with the mask the numbers are
    vanilla's bit for bit.
    """
    model = target.model
    pad_id = _pad_id(target)
    cache = model.new_cache(len(ids) + pad + max_new_tokens + 8)
    with torch.no_grad():
        if len(ids) > 1:
            model.forward(torch.tensor([ids[:-1]]), cache, last_only=True, head=False)
            cache.commit()
        out = model.forward(torch.tensor([[ids[-1]]]), cache)
        cache.commit()
        tok = int(out.logits[0, -1].argmax())
        model.forward(torch.tensor([[pad_id] * pad]), cache, last_only=True, head=False)  # the batch's padding
        cache.commit()
        if mask_pads:
            cache.truncate(len(ids))
        produced = [tok]
        while len(produced) < max_new_tokens and tok not in target.eos_ids:
            out = model.forward(torch.tensor([[tok]]), cache)
            cache.commit()
            tok = int(out.logits[0, -1].argmax())
            produced.append(tok)
    return produced


def _pad_id(target: Target) -> int:
    tok = target.tokenizer
    for name in ("<|endoftext|>", getattr(tok, "eos_token", None)):
        if name and tok.token_to_id(name) is not None:
            return int(tok.token_to_id(name))
    return 0


# ------------------------------------------------------------------------------ only slower
def same_drafter_as(cls, drafter):
    """`drafter` as an instance of `cls` (a subclass that changes behaviour, never state): the same
    head, tree and settings."""
    new = cls.__new__(cls)
    new.__dict__.update(drafter.__dict__)
    return new


class StaleFeatureEagle(EagleDrafter):
    """EAGLE drafting where every draft step reads the prefix's last real feature, never the head's own
    output: step 2 pairs the drafted token with a feature from two positions back. Drafts in torch
    (the kernel holds the correct wiring); build it with ``same_drafter_as``."""

    in_kernel = False

    def step_feature(self, outs, parent):
        return self.feats[-1]


class HotDraftSpS(SpSDrafter):
    """SpS whose draft model samples, and reports q, at `factor` x the target's temperature.

    q is wrong for the target but used consistently (the tokens are drawn from the very q the rule
    divides by), so the rule stays exact and only acceptance drops. At T = 0 it drafts the argmax as
    before."""

    def __init__(self, draft_model, gamma: int = 4, factor: float = 2.0):
        super().__init__(draft_model, gamma)
        self.factor = float(factor)

    def propose(self, context, root, params, generator):
        hot = params if params.greedy else replace(params, temperature=params.temperature * self.factor)
        return super().propose(context, root, hot, generator)


class NoBonusDecoder(SpeculativeDecoder):
    """A decoder that throws the bonus token away: after a fully accepted path the round ends with the
    last drafted token, and the next round starts from it. Still exact (that token was accepted by
    the correct rule); a full-path round just yields one token less."""

    def walk(self, tree: DraftTree, p, p_raw, best) -> VerifyResult:
        res = super().walk(tree, p, p_raw, best)
        if res.extra_source != "bonus" or not res.accepted:
            return res
        last = res.accepted[-1]
        return replace(res, accepted=res.accepted[:-1], extra_token=int(tree.tokens[last]), extra_source="no-bonus",
                       extra_dist=p[tree.parents[last]])


class UncachedTargetDrafter(WrappedDrafter):
    """`inner`'s drafts, each draft step preceded by a target pass over the whole sequence with no KV
    cache (how code that calls the model for fresh hidden states on every step runs). The features
    those passes give are the ones the cache already holds, so they are thrown away and the drafts
    stay `inner`'s: what changes is the work, counted in `extra_passes` and `extra_tokens`."""

    def __init__(self, inner: Drafter, model):
        super().__init__(inner)
        self.model = model
        self.extra_passes = self.extra_tokens = 0

    @property
    def shape(self):
        return self.inner.shape

    def propose(self, context, root, params: SamplingParams, generator):
        tree = self.inner.propose(context, root, params, generator)
        seq = list(context) + [int(root)]
        with torch.no_grad():
            for _ in range(tree.max_depth):
                self.model.forward(torch.tensor([seq]), self.model.new_cache(len(seq) + 1), last_only=True, head=False)
                self.extra_passes += 1
                self.extra_tokens += len(seq)
        return tree


def uncached_greedy(target: Target, ids: list[int], max_new_tokens: int) -> list[int]:
    """Greedy decoding without a KV cache: every token recomputes the whole sequence (a baseline that
    makes any cached method look fast)."""
    model, seq, produced = target.model, list(ids), []
    with torch.no_grad():
        while len(produced) < max_new_tokens:
            out = model.forward(torch.tensor([seq]), model.new_cache(len(seq) + 1), last_only=True)
            tok = int(out.logits[0, -1].argmax())
            produced.append(tok)
            seq.append(tok)
            if tok in target.eos_ids:
                break
    return produced
