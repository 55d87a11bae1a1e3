"""Prompt lookup's question, answered from an index: what followed the last n-gram earlier on?

PLD and the EAGLE drafters' lookup branch ask it every round. Scanning the whole context for the
tail took ~0.2-0.3 ms a round in Python at 1,200 tokens (a round of the 135M target is ~6 ms), so
the n-grams are indexed once, as the context grows, and a round only reads the index. The answer is
the scan's, exactly: the longest matching tail first, its most recent earlier occurrence first, the
tokens that followed it cut at the first stop id, and an earlier occurrence when that leaves none.
"""

from __future__ import annotations


class NgramIndex:
    """Where each n-gram (min_ngram <= n <= max_ngram) of a growing token sequence starts."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, num_tokens: int = 10, stop_ids=()):
        if not 1 <= min_ngram <= max_ngram or num_tokens < 1:
            raise ValueError("prompt lookup needs 1 <= min_ngram <= max_ngram and num_tokens >= 1")
        self.max_ngram, self.min_ngram, self.num_tokens = max_ngram, min_ngram, num_tokens
        # special tokens (chat-template markers): copying them would only draft the template
        self.stop_ids = frozenset(int(t) for t in stop_ids if t is not None)
        self._seq: list[int] = []  # the tokens indexed so far
        self._starts: dict[int, dict[tuple, list[int]]] = {}  # n -> n-gram -> its starts, ascending

    def _index(self, prefix: list[int]) -> None:
        """Index every n-gram inside `prefix`; start again when it does not extend what was indexed
        (a new sequence, or the engine went back to a snapshot)."""
        m = len(self._seq)
        if len(prefix) < m or prefix[:m] != self._seq:
            self._seq, self._starts, m = [], {}, 0
        for n in range(self.min_ngram, self.max_ngram + 1):
            starts = self._starts.setdefault(n, {})
            for s in range(max(0, m - n + 1), len(prefix) - n + 1):
                starts.setdefault(tuple(prefix[s : s + n]), []).append(s)
        self._seq = list(prefix)

    def follow(self, seq: list[int]) -> list[int]:
        """Tokens that followed the most recent earlier occurrence of the longest matching tail of `seq`."""
        n_seq = len(seq)
        if n_seq < 2:
            return []
        self._index(seq[: n_seq - 1])  # an earlier occurrence ends before the tail's last token
        for n in range(min(self.max_ngram, n_seq - 1), self.min_ngram - 1, -1):
            for start in reversed(self._starts[n].get(tuple(seq[n_seq - n :]), ())):
                follow = seq[start + n : start + n + self.num_tokens]
                for j, t in enumerate(follow):
                    if t in self.stop_ids:
                        follow = follow[:j]
                        break
                if follow:
                    return follow
        return []
