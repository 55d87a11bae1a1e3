"""The interface every drafter implements, and the context the engine hands it.

The engine owns the target and its KV cache; a drafter only sees committed tokens, the
target's hidden-state taps it asked for (`taps`), the sampling settings and the round's
random generator. Whatever state a drafter keeps (its own KV cache, say) it must keep
consistent through `commit`, which reports exactly what the target accepted.
"""

from __future__ import annotations

import torch

from ..sampling import SamplingParams
from ..tree import DraftTree


class Drafter:
    name = "base"
    taps: tuple = ()  # target taps needed: layer indices (their inputs) and/or "final"
    sampled = False  # True when the drafter *draws* tokens from q (stochastic drafts)
    # q is the drafter's probability of each token (a head or a draft model), not a placeholder
    # 1.0 (prompt lookup): the engine then computes the target's rows on the likeliest path at once
    q_is_probability = False

    def reset(self, context: list[int], taps: dict) -> None:
        """Start a sequence. `context` = tokens the target has processed (the prompt minus its
        last token, which becomes the first root); `taps[k]` = [len(context), H] tensors."""

    def propose(self, context: list[int], root: int, params: SamplingParams, generator: torch.Generator) -> DraftTree:
        """Draft a tree whose root is `root` (the last committed token, not yet processed)."""
        raise NotImplementedError

    def commit(self, processed: list[int], taps: dict) -> None:
        """The target processed and kept `processed` (root + accepted drafts) this round;
        `taps[k]` holds their hidden states [len(processed), H]."""


class NoDraft(Drafter):
    """Vanilla decoding as a degenerate drafter: the tree is the root alone."""

    name = "vanilla"

    def propose(self, context, root, params, generator):
        return DraftTree(tokens=[int(root)], parents=[-1], q=[1.0])
