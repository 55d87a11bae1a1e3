"""Prompt lookup decoding (PLD): draft by copying what followed the last n-gram earlier on.

No model at all: if the tail of the text already occurred in the context, guess that what
came after it then comes again. Shines on summarisation and RAG, where outputs quote inputs.
"""

from __future__ import annotations

from ..tree import DraftTree
from .base import Drafter


class PromptLookupDrafter(Drafter):
    name = "pld"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, num_tokens: int = 10, stop_ids=()):
        if not 1 <= min_ngram <= max_ngram or num_tokens < 1:
            raise ValueError("PLD needs 1 <= min_ngram <= max_ngram and num_tokens >= 1")
        self.max_ngram, self.min_ngram, self.num_tokens = max_ngram, min_ngram, num_tokens
        # special tokens (chat-template markers): copying them would only draft the template
        self.stop_ids = frozenset(int(t) for t in stop_ids if t is not None)

    def lookup(self, seq: list[int]) -> list[int]:
        """Tokens that followed the most recent earlier occurrence of the longest matching tail."""
        n_seq = len(seq)
        for n in range(min(self.max_ngram, n_seq - 1), self.min_ngram - 1, -1):
            tail = seq[n_seq - n :]
            for start in range(n_seq - n - 1, -1, -1):  # most recent match first
                if seq[start : start + n] == tail:
                    follow = seq[start + n : start + n + self.num_tokens]
                    for j, t in enumerate(follow):
                        if t in self.stop_ids:
                            follow = follow[:j]
                            break
                    if follow:
                        return follow
        return []

    def propose(self, context, root, params, generator):
        return DraftTree.chain(root, self.lookup(list(context) + [int(root)]))
