"""EAGLE-3's reduced draft vocabulary: what it cannot draft, and what covers those tokens.

The head's LM head has rows for a subset of the target's vocabulary (the training answers' most
frequent tokens); `d2t[i]` maps draft id i to target id i + d2t[i]. Where the target's next token
lies outside the subset, every draft of the head is wrong there. The lookup branch of a tuned tree
copies from the context (`drafters.lookup`), which reaches tokens whatever the vocabulary.
"""
from __future__ import annotations

from collections import Counter

import torch

from ..drafters.base import LOOKUP_NGRAM, LOOKUP_TOKENS
from ..drafters.lookup import NgramIndex


def coverage(head, sequences: list[tuple[list[int], list[int]]], token_text, stop_ids=(), top: int = 12) -> dict:
    """`sequences`: (prompt ids, the target's greedy answer) pairs. Counts over the answer tokens:
    outside the draft vocabulary; of those, present earlier in the context; and copied right by the
    lookup branch (its first copied token after the previous token is this one). Plus the commonest
    outside tokens and a few rows of the d2t map."""
    in_vocab = torch.zeros(head.m.vocab_size, dtype=torch.bool)
    in_vocab[head.target_ids().cpu()] = True
    n = outside = earlier = copied = 0
    missing = Counter()
    for prompt, answer in sequences:
        index = NgramIndex(LOOKUP_NGRAM[1], LOOKUP_NGRAM[0], LOOKUP_TOKENS, stop_ids)
        seq = list(prompt)
        for t in answer:
            n += 1
            if not in_vocab[t]:
                outside += 1
                missing[t] += 1
                earlier += t in seq
                follow = index.follow(seq)
                copied += bool(follow) and follow[0] == t
            seq.append(t)
    d2t = head.d2t.cpu()
    ids = head.target_ids().cpu()
    rows = sorted({0, 1, 2, len(ids) // 2, len(ids) - 2, len(ids) - 1})
    return dict(
        draft_vocab=int(len(ids)), target_vocab=int(head.m.vocab_size), answer_tokens=n, outside=outside,
        outside_share=round(outside / max(n, 1), 4), earlier_in_context=earlier, copied_by_lookup=copied,
        lookup_tokens=LOOKUP_TOKENS,
        commonest_outside=[[int(t), token_text(int(t)), c] for t, c in missing.most_common(top)],
        d2t_rows=[[i, int(d2t[i]), int(ids[i]), token_text(int(ids[i]))] for i in rows],
        highest_kept=int(ids.max()), lowest_missing=int((~in_vocab).nonzero()[0, 0]) if (~in_vocab).any() else None)
