"""Prompt lookup decoding (PLD): draft by copying what followed the last n-gram earlier on.

No model at all: if the tail of the text already occurred in the context, guess that what
came after it then comes again. Shines on summarisation and RAG, where outputs quote inputs.
"""

from __future__ import annotations

from ..core.tree import DraftTree
from .base import Drafter
from .lookup import NgramIndex


class PromptLookupDrafter(Drafter):
    name = "pld"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, num_tokens: int = 10, stop_ids=()):
        self.index = NgramIndex(max_ngram, min_ngram, num_tokens, stop_ids)  # checks the settings

    def lookup(self, seq: list[int]) -> list[int]:
        """Tokens that followed the most recent earlier occurrence of the longest matching tail."""
        return self.index.follow(seq)

    def propose(self, context, root, params, generator):
        return DraftTree.chain(root, self.lookup(list(context) + [int(root)]), copied=True)
