"""Prompt lookup's question, answered from an index: what followed the last n-gram earlier on?

PLD and the EAGLE drafters' lookup branch ask it every round. Scanning the whole context for the
tail took ~0.2-0.3 ms a round in Python at 1,200 tokens (a round of the 135M target is ~6 ms), so
the n-grams are indexed once, as the context grows, and a round only reads the index. The answer is
the scan's, exactly: the longest matching tail first, its most recent earlier occurrence first, the
tokens that followed it cut at the first stop id, and an earlier occurrence when that leaves none.
"""

from __future__ import annotations

from .base import LOOKUP_NGRAM, default_lookup


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
        self._seq.extend(prefix[m:])  # only the new tokens (a round adds a few to a long context)

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


class LookupBranch:
    """A tree drafter's lookup branch: at T = 0, prompt lookup's next `tokens` tokens (what followed
    the last 2-3 tokens earlier in the context) join the drafted tree as a copied chain
    (DraftTree.with_chain). Outputs that quote their input (summaries, RAG, translation's names and
    numbers) are where a head trained on chat answers guesses worst and the copy best. At T > 0 the
    tree stays the head's: verify keeps a copied chain exact there too (a one-hot draft), but it was
    accepted too rarely to pay for its verify tokens (docs/tuning.md)."""

    def __init__(self, tokens: int = 0, stop_ids=()):
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"lookup must be a whole number >= 0 (0: no lookup branch), got {tokens!r}")
        self.tokens = tokens
        self.index = NgramIndex(LOOKUP_NGRAM[1], LOOKUP_NGRAM[0], tokens, stop_ids) if tokens else None

    def graft(self, tree, context, root, params):
        if not self.tokens or not params.greedy:
            return tree
        return tree.with_chain(self.index.follow(list(context) + [int(root)]))

    def describe(self, params) -> dict:
        return {"lookup": self.tokens} if self.tokens and params.greedy else {}


def stop_ids_of(target) -> tuple:
    """The token ids prompt lookup never copies: the tokenizer's special tokens (chat-template markers);
    none for a bare model."""
    return tuple(getattr(getattr(target, "tokenizer", None), "special_ids", ()) or ())


def lookup_options(target, lookup, pick) -> dict:
    """A tree drafter factory's lookup arguments (`lookup`, `pick`: see `base.default_lookup`)."""
    n = default_lookup(lookup, pick)
    return {"lookup": n, "stop_ids": stop_ids_of(target) if n else ()}
