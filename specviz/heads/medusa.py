"""Medusa heads: K residual blocks on the target's last normed hidden state.

Head i predicts the token i + 2 positions ahead (the target itself gives the next one):
`logits_i = lm_head(h + SiLU(W_i h + b_i))`. Unlike Medusa-1, the heads share the target's own
(tied) LM head instead of carrying a 49k x H copy each, which keeps the shipped file tiny.
State keys follow Medusa's layout: `{i}.0.linear.weight`, `{i}.0.linear.bias`.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .eagle import tied_logits


class ResBlock(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)

    def forward(self, x):
        return x + F.silu(self.linear(x))


class MedusaHeads(nn.Module):
    method = "medusa"

    def __init__(self, config: dict):
        super().__init__()
        self.config = dict(config)
        H = config["hidden_size"]
        n, layers = config["medusa_num_heads"], config.get("medusa_num_layers", 1)
        self.heads = nn.ModuleList([nn.Sequential(*[ResBlock(H) for _ in range(layers)]) for _ in range(n)])
        self._lm_head = None
        self._lm_blocks = None

    @property
    def hidden_size(self):
        return self.config["hidden_size"]

    @property
    def n_heads(self):
        return len(self.heads)

    def bind(self, embed, lm_head=None, lm_head_blocks=None):
        self._lm_head = embed if lm_head is None else lm_head
        self._lm_blocks = lm_head_blocks
        return self

    def forward(self, h, n: int | None = None):
        """[K, ..., H] predicted features, one per head (of the first `n` heads: a tree n deep reads no more)."""
        return torch.stack([head(h) for head in self.heads[:n]])

    def logits(self, feats, vocab_ids=None, vocab: int | None = None):
        """Target-vocab logits of the heads' features: for `vocab_ids` only, or for the first `vocab` ids
        (from GGUF blocks of those rows, built once, when the target's LM head has blocks)."""
        if vocab:
            cut = self.__dict__.setdefault("_cut_blocks", {})
            if self._lm_blocks is not None and vocab not in cut:
                cut[vocab] = self._lm_blocks.rows(torch.arange(vocab))
            return tied_logits(feats, self._lm_head[:vocab], cut.get(vocab))
        return tied_logits(feats, self._lm_head, self._lm_blocks, vocab_ids)

    # Medusa's key names are "{i}.{j}.linear.*"; ours live under "heads."
    def public_state(self):
        return {k[len("heads."):]: v for k, v in self.state_dict().items()}
