"""A sequence's KV cache, and its share of a pass that scores several sequences at once."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import SpecVizError
from ..runtime.config import ModelConfig
from .ops import keep_entries


class KVCache:
    """Keys and values of all layers, preallocated: [layers, batch, kv_heads, max_len, head_dim].

    `length` counts committed positions. A forward writes its T new entries at
    [length, length+T) without committing them; `commit(keep)` then moves the kept block
    entries (indices into that block, in order) to contiguous slots and advances `length`.
    `key_mask` ([batch, max_len] bool, optional) hides left padding in batched use.
    """

    def __init__(self, cfg: ModelConfig, max_len: int, batch: int = 1, dtype=torch.float32, device="cpu"):
        shape = (cfg.n_layers, batch, cfg.n_kv_heads, max_len, cfg.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_len = max_len
        self.length = 0
        self.pending = 0
        self.key_mask: torch.Tensor | None = None
        self.graphs = None  # cudagraph.GraphRunner captured over this storage (CUDA only)

    @classmethod
    def over(cls, k: torch.Tensor, v: torch.Tensor, graphs=None) -> "KVCache":
        """An empty cache on existing storage (a pooled one, with the CUDA graphs captured over it)."""
        c = cls.__new__(cls)
        c.k, c.v, c.max_len = k, v, k.shape[3]
        c.length, c.pending, c.key_mask, c.graphs = 0, 0, None, graphs
        return c

    def commit(self, keep=None) -> None:
        """Keep block entries `keep` (default: all pending) as the next committed positions."""
        L = self.length
        n = self.pending if keep is None else keep_entries(self.k, self.v, L, keep, axis=3)
        self.length = L + n
        self.pending = 0

    def truncate(self, length: int) -> None:
        """Forget everything after `length` (e.g. to replay a round)."""
        self.length = min(self.length, length)
        self.pending = 0

    def attention_mask(self, B: int, T: int, tree_mask):
        """Torch's attention mask for T new tokens over [committed context | new block], [B, 1, T, L+T] bool,
        and whether to ask for a causal mask instead ((None, False): attend to all)."""
        L, device = self.length, self.k.device
        if tree_mask is None and self.key_mask is None:
            if T == 1:
                return None, False
            if L == 0:
                return None, True  # plain causal prefill
            block = torch.ones(T, T, dtype=torch.bool, device=device).tril()
        else:
            block = (torch.ones(T, T, dtype=torch.bool, device=device).tril() if tree_mask is None
                     else tree_mask.to(device, torch.bool))
        if block.dim() == 2:
            block = block[None].expand(B, T, T)
        if self.key_mask is not None:
            prefix = self.key_mask[:, None, :L].expand(B, T, L)
        else:
            prefix = torch.ones(B, T, L, dtype=torch.bool, device=device)
        return torch.cat([prefix, block], dim=-1)[:, None], False

    def clone(self) -> "KVCache":
        c = KVCache.__new__(KVCache)
        c.k, c.v = self.k.clone(), self.v.clone()
        c.max_len, c.length, c.pending = self.max_len, self.length, self.pending
        c.key_mask = None if self.key_mask is None else self.key_mask.clone()
        c.graphs = None  # graphs are bound to the storage they were captured over
        return c


@dataclass
class PassPart:
    """One sequence's share of a target pass: its new tokens after its cache's committed ones. A batch
    of rounds is a list of parts (`TargetModel.forward_batch`); a solo pass is a batch of one."""

    tokens: list[int]
    cache: KVCache
    positions: list[int] | None = None  # None: consecutive after the committed context
    tree_mask: list[list[bool]] | None = None  # [T, T], row t = which new tokens t sees; None: causal

    def __post_init__(self):
        T = len(self.tokens)
        if T == 0:
            raise SpecVizError("A sequence in a batched pass has no tokens.")
        if self.cache.length + T > self.cache.max_len:
            raise SpecVizError(f"Context too long: {self.cache.length + T} tokens exceed the cache of {self.cache.max_len}.")
        if self.positions is None:
            self.positions = list(range(self.cache.length, self.cache.length + T))
        if len(self.positions) != T or (self.tree_mask is not None and len(self.tree_mask) != T):
            raise SpecVizError("A batched pass part needs one position and one mask row per token.")
