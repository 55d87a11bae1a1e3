"""Small tensor operations the target and the draft heads share, written once."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float, fused: bool = True) -> torch.Tensor:
    """RMSNorm computed in fp32 as Hugging Face's LlamaRMSNorm does. `fused`: torch's one op when x
    is already fp32 (the same bits as the lines below, checked on random inputs; 1 dispatch instead of 7)."""
    dtype = x.dtype
    if fused and dtype == torch.float32:
        return F.rms_norm(x, w.shape, w, eps)
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(dtype)


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary cos/sin [B, 1, T, head_dim] for positions [B, T], computed in fp32 like Hugging Face."""
    freqs = positions[..., None].float() * inv_freq.to(positions.device)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def keep_entries(k: torch.Tensor, v: torch.Tensor, length: int, keep, axis: int) -> int:
    """Move the kept entries of a block written after `length` (indices `keep` into that block, in
    order) to the slots right after it, along the sequence axis `axis` of the key and value caches;
    returns how many are kept. A kept prefix is already in place: nothing moves."""
    if isinstance(keep, (list, tuple, range)) and all(j == i for i, j in enumerate(keep)):
        return len(keep)
    idx = torch.as_tensor(keep, dtype=torch.long, device=k.device)
    n = int(idx.numel())
    if n and not torch.equal(idx, torch.arange(n, device=idx.device)):
        src = idx + length
        dst = torch.arange(length, length + n, device=k.device)
        k.index_copy_(axis, dst, k.index_select(axis, src))
        v.index_copy_(axis, dst, v.index_select(axis, src))
    return n
