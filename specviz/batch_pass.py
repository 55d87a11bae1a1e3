"""One target pass over the draft trees of several sequences (a batch of speculative rounds).

Each sequence keeps its own KV cache, context length and tree. Their trees are laid side by side
as one long row of tokens: the norms and matrix products run once over all of them (each weight
is read from memory once for the whole batch: the reason servers batch), and each token attends
only to its own sequence's cache and its own tree's ancestors. Drawn as one matrix, that is a
block-diagonal tree mask; no sequence is padded to another's length.

Every row comes out as in its sequence's pass alone: on the CPU the fused kernel
(`layers_forward_batch`) keeps each sum's order whatever the batch, so a batched greedy decode is
token-identical to the solo one (tests/test_batch.py). The torch path (CUDA, long trees) batches
the same way; its dense matmuls may round a row differently with more rows, as any BLAS may.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import SpecVizError
from .core.target import ForwardOut, KVCache, TargetModel, _uses_kernel


@dataclass
class PassPart:
    """One sequence's share of a batched pass: its new tokens after its cache's committed ones."""

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


def fused(model: TargetModel, parts: list[PassPart]) -> bool:
    """Whether the one-call kernel runs this pass: block weights on the CPU and every part a tree or short
    enough for the kernel (the same rule as a solo pass, so a row's arithmetic matches its solo one)."""
    return (model.blocks is not None and model._lib is not None and _uses_kernel(model.device)
            and all((p.tree_mask is not None or len(p.tokens) <= model.fused_max_tokens) and p.cache.key_mask is None
                    and p.cache.k.is_contiguous() for p in parts))


@torch.inference_mode()
def forward_batch(model: TargetModel, parts: list[PassPart], taps=()) -> list[ForwardOut]:
    """Score every part's tokens in one pass; the new K/V stay pending in each part's cache until its
    `commit`. Returns one ForwardOut per part: `hidden` [1, T, H] (normed, no LM head: callers take
    the rows they need through `model.logits`) and the requested taps [1, T, H]."""
    if not parts:
        return []
    sizes = [len(p.tokens) for p in parts]
    tokens = torch.tensor([t for p in parts for t in p.tokens], device=model.device)
    positions = torch.tensor([i for p in parts for i in p.positions], device=model.device)
    cos, sin = model.rope(positions[None])
    out_taps: dict = {}
    if fused(model, parts):
        x = _layers_fused(model, parts, tokens, cos, sin, taps, out_taps)
    else:
        x = _layers_torch(model, parts, tokens, cos, sin, taps, out_taps)
    x = model.final_norm(x)
    if "final" in taps:
        out_taps["final"] = x
    outs, r0 = [], 0
    for part, T in zip(parts, sizes):
        part.cache.pending = T
        sl = slice(r0, r0 + T)
        outs.append(ForwardOut(logits=None, hidden=x[:, sl], taps={k: v[:, sl] for k, v in out_taps.items()}))
        r0 += T
    return outs


def _layers_fused(model, parts, tokens, cos, sin, taps, out_taps) -> torch.Tensor:
    """All layers for all parts in one C++ call (blockmm.cpp `layers_forward_batch`)."""
    cfg, n, N = model.cfg, len(parts), tokens.shape[0]
    x = F.embedding(tokens, model.embed).contiguous()  # [N, H], updated in place
    cos, sin = cos[0, 0].contiguous(), sin[0, 0].contiguous()
    i64 = ctypes.c_int64 * n
    ptrs = ctypes.c_void_p * n
    T = i64(*[len(p.tokens) for p in parts])
    L = i64(*[p.cache.length for p in parts])
    masks = [None if p.tree_mask is None else torch.tensor(p.tree_mask, dtype=torch.uint8) for p in parts]
    mask_ptrs = ptrs(*[None if m is None else m.data_ptr() for m in masks])
    kc = ptrs(*[p.cache.k.data_ptr() for p in parts])
    vc = ptrs(*[p.cache.v.data_ptr() for p in parts])
    stride = i64(*[p.cache.k[0].numel() for p in parts])
    max_len = i64(*[p.cache.max_len for p in parts])
    work = torch.empty(N * (cfg.hidden_size + model.q_dim + 2 * model.kv_dim + model.q_dim + 3 * model.blocks[0].w2.k))
    layers = len(model.blocks)
    tap_ptrs = model.tap_buffers(taps, N, out_taps)
    model._lib.layers_forward_batch(model._layer_array, layers, x.data_ptr(), n, T, L, cos.data_ptr(), sin.data_ptr(),
                                    mask_ptrs, kc, vc, stride, max_len, work.data_ptr(), torch.get_num_threads(), tap_ptrs)
    return x[None]


def _layers_torch(model, parts, tokens, cos, sin, taps, out_taps) -> torch.Tensor:
    """Layer by layer in torch: the projections over all rows at once, attention part by part."""
    # the blocks however many rows: each row must round as in its sequence's pass alone (the dense GEMM's
    # sums may depend on the batch); a batch never holds a prefill (specviz.batch prefills one by one)
    lib = model._lib if model.blocks is not None and _uses_kernel(model.device) else None
    spans, r0 = [], 0
    for p in parts:
        T = len(p.tokens)
        mask = None if p.tree_mask is None else torch.tensor(p.tree_mask, dtype=torch.bool, device=model.device)
        spans.append((r0, r0 + T, p.cache, p.cache.length, model._mask(p.cache, 1, T, mask)))
        r0 += T
    gqa = model.cfg.n_kv_heads != model.cfg.n_heads

    def attend(i, q, k, v):
        outs = []
        for a, b, cache, L, (mask, causal) in spans:
            T = b - a
            cache.k[i, :, :, L : L + T] = k[:, :, a:b]
            cache.v[i, :, :, L : L + T] = v[:, :, a:b]
            outs.append(F.scaled_dot_product_attention(q[:, :, a:b], cache.k[i, :, :, : L + T], cache.v[i, :, :, : L + T],
                                                       attn_mask=mask, is_causal=causal, enable_gqa=gqa))
        return torch.cat(outs, dim=2)

    x = F.embedding(tokens[None], model.embed)
    for i in range(model.cfg.n_layers):
        if i in taps:
            out_taps[i] = x
        x = model.layer(i, x, cos, sin, attend, model.blocks[i] if lib is not None else None, lib)
    return x
