"""Prompt lookup decoding (PLD): draft by copying what followed the last n-gram earlier on.

No model at all: if the tail of the text already occurred in the context, guess that what
came after it then comes again. Shines on summarisation and RAG, where outputs quote inputs.
"""

from __future__ import annotations

from ..tree import DraftTree
from .base import Drafter
from .lookup import NgramIndex


class PromptLookupDrafter(Drafter):
    name = "pld"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, num_tokens: int = 10, stop_ids=()):
        if not 1 <= min_ngram <= max_ngram or num_tokens < 1:
            raise ValueError("PLD needs 1 <= min_ngram <= max_ngram and num_tokens >= 1")
        self.max_ngram, self.min_ngram, self.num_tokens = max_ngram, min_ngram, num_tokens
        self.index = NgramIndex(max_ngram, min_ngram, num_tokens, stop_ids)
        self.stop_ids = self.index.stop_ids

    def lookup(self, seq: list[int]) -> list[int]:
        """Tokens that followed the most recent earlier occurrence of the longest matching tail."""
        return self.index.follow(seq)

    def propose(self, context, root, params, generator):
        return DraftTree.chain(root, self.lookup(list(context) + [int(root)]), copied=True)
