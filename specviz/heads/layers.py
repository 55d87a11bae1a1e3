"""Llama building blocks for the draft heads, as plain `torch.nn` modules.

The attention module only projects and rotates (`qkv`) and mixes (`attend`/`attend_ttt`), so the
same weights serve three callers: training (causal over a sequence), EAGLE-3's training-time
test (step-k queries see step-0 keys up to their position plus their own earlier steps), and
drafting (the head's own KV cache plus a tree mask).
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..runtime import qkernel
from ..runtime.blockweights import MAX_BLOCK_ROWS, BlockWeight, LayerBlocks, quantize_q8_0
from ..core.ops import keep_entries, rms_norm, rope_cos_sin, rotate_half


class FusedLinears:
    """Linear layers that read the same input (q/k/v, gate/up) as ONE Q8_0 block matmul.

    Only for layers `blockweights.speed_up_linears` already runs on Q8_0 copies: Q8_0 rounds each
    row's blocks on their own and the kernel sums every output row the same way whatever rows sit
    beside it, so the stacked matrix gives the same bits as the separate calls, with one call
    instead of several. `__call__` returns None where the separate layers would take their dense
    path (training, other devices or dtypes, long inputs); the caller then runs those.
    """

    def __init__(self, lins: list[nn.Linear], lib):
        self.lins, self.lib = lins, lib
        self.blocks = BlockWeight.stack([quantize_q8_0(lin.weight) for lin in lins])
        self.sizes = [lin.out_features for lin in lins]

    @classmethod
    def of(cls, lins: list[nn.Linear]) -> "FusedLinears | None":
        """The fused copy, or None unless every layer already drafts on Q8_0 copies."""
        lib = qkernel.library()
        if lib is None or not all("forward" in vars(lin) for lin in lins):
            return None
        return cls(lins, lib)

    def __call__(self, x: torch.Tensor) -> list[torch.Tensor] | None:
        grad = torch.is_grad_enabled() and (x.requires_grad or any(lin.weight.requires_grad for lin in self.lins))
        if grad or x.device.type != "cpu" or x.dtype != torch.float32 or x.numel() > MAX_BLOCK_ROWS * x.shape[-1]:
            return None
        parts = self.blocks.matmul(x, self.lib).split(self.sizes, dim=-1)
        return [y if lin.bias is None else y + lin.bias for y, lin in zip(parts, self.lins)]


class KernelLayer:
    """A draft head's decoder layer as ONE call of the compiled kernel (`head_layer_forward`).

    Why: drafting a tree level ran ~25 small torch ops (norms, rotary, cache writes, a masked
    attention, residuals), each a dispatch, and the level cost several times its multiply-adds.
    The kernel does the same arithmetic on the same Q8_0 blocks the fused drafting path uses
    (q/k/v and gate/up stacked by `FusedLinears`; o and down rounded the way `speed_up_linears`
    rounds them); attention, rotary and norms sum in another order, so a draft agrees with the
    torch path to ~1e-6 (a drafter's numbers change what is proposed, never what is accepted).
    `of` returns None unless both fused groups exist and no projection has a bias.
    """

    def __init__(self, attn: "Attention", mlp: "MLP", mlp_norm: "RMSNorm", cfg, lib):
        self.lib, self.cfg = lib, cfg
        self.blocks = LayerBlocks(attn.fused.blocks, quantize_q8_0(attn.o_proj.weight), mlp.fused.blocks,
                                  quantize_q8_0(mlp.down_proj.weight))
        norm = mlp_norm.weight.detach().float().contiguous()
        # the attention's input comes in normed already (`attn_in`): attn_norm is never read
        self.blocks.layer_args(SimpleNamespace(attn_norm=norm, mlp_norm=norm), cfg)
        self.work_per_token = cfg.hidden_size + 2 * cfg.n_heads * cfg.head_dim + 2 * cfg.n_kv_heads * cfg.head_dim \
            + 3 * mlp.down_proj.in_features

    @classmethod
    def of(cls, attn: "Attention", mlp: "MLP", mlp_norm: "RMSNorm", cfg) -> "KernelLayer | None":
        lib = qkernel.library()
        lins = [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]
        if lib is None or attn.fused is None or mlp.fused is None or any(lin.bias is not None for lin in lins):
            return None
        return cls(attn, mlp, mlp_norm, cfg, lib)

    def usable(self, T: int, cache: "HeadCache") -> bool:
        """Short fp32 inference passes on a CPU cache of batch 1 (the rest keeps the torch path)."""
        return (T <= MAX_BLOCK_ROWS and not torch.is_grad_enabled() and cache.k.device.type == "cpu"
                and cache.k.dtype == torch.float32 and cache.k.shape[0] == 1 and cache.k.is_contiguous())

    def __call__(self, x: torch.Tensor, attn_in: torch.Tensor, cos, sin, cache: "HeadCache", offset: int,
                 block: torch.Tensor | None) -> torch.Tensor:
        """x [T, H] (the residual stream, updated in place and returned), attn_in [T, K] the
        attention's input; cos/sin [T, head_dim]; block [T, offset + T] bool or None (causal)."""
        T = x.shape[0]
        mask = None if block is None else block.to(torch.uint8).contiguous()
        work = torch.empty(T * self.work_per_token)
        self.lib.head_layer_forward(
            ctypes.addressof(self.blocks.args), x.data_ptr(), attn_in.data_ptr(), T, cache.length, offset,
            cos.data_ptr(), sin.data_ptr(), None if mask is None else mask.data_ptr(), cache.k.data_ptr(),
            cache.v.data_ptr(), cache.max_len, work.data_ptr(), torch.get_num_threads())
        return x


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        # drafting: torch's fused op (the same bits); training keeps the written-out one for autograd
        return rms_norm(x, self.weight, self.eps, fused=not torch.is_grad_enabled())


class Rotary(nn.Module):
    def __init__(self, inv_freq: torch.Tensor):
        super().__init__()
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)

    def forward(self, positions: torch.Tensor, dtype):
        """cos/sin [B, 1, T, hd] for positions [B, T]."""
        return rope_cos_sin(positions, self.inv_freq, dtype)


class Attention(nn.Module):
    def __init__(self, in_dim: int, hidden: int, n_heads: int, n_kv: int, head_dim: int, bias: bool = False):
        super().__init__()
        self.nh, self.nkv, self.hd = n_heads, n_kv, head_dim
        self.q_proj = nn.Linear(in_dim, n_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(in_dim, n_kv * head_dim, bias=bias)
        self.v_proj = nn.Linear(in_dim, n_kv * head_dim, bias=bias)
        self.o_proj = nn.Linear(n_heads * head_dim, hidden, bias=False)
        self.fused = None  # FusedLinears over q/k/v for drafting (`fuse_for_drafting`)

    def fuse_for_drafting(self) -> bool:
        self.fused = FusedLinears.of([self.q_proj, self.k_proj, self.v_proj])
        return self.fused is not None

    def qkv(self, x, cos, sin):
        """q [B, nh, T, hd]; k, v [B, nkv, T, hd] (rotated)."""
        B, T, _ = x.shape
        qkv = self.fused(x) if self.fused is not None else None
        if qkv is None:
            qkv = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = qkv[0].view(B, T, self.nh, self.hd).transpose(1, 2)
        k = qkv[1].view(B, T, self.nkv, self.hd).transpose(1, 2)
        v = qkv[2].view(B, T, self.nkv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        return q, k, v

    def out(self, a):
        B, _, T, _ = a.shape
        return self.o_proj(a.transpose(1, 2).reshape(B, T, self.nh * self.hd))

    def attend(self, q, k, v, mask=None, causal=False):
        """Plain attention; mask [B or 1, 1, T, S] bool (True = may attend)."""
        a = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal and mask is None, enable_gqa=self.nkv != self.nh
        )
        return self.out(a)

    def attend_ttt(self, q, ks, vs, q_idx=None):
        """Training-time test: query t at step j sees step-0 keys <= t and keys at t of steps 1..j.

        ks/vs: lists (step 0 first); ks[0] [B, nkv, T, hd] covers the whole sequence, later steps
        cover the queries only. q_idx [B, Tq]: the sequence index of each query (default 0..T-1).
        """
        rep = self.nh // self.nkv
        ex = lambda t: t.repeat_interleave(rep, dim=1) if rep > 1 else t
        scale = self.hd ** -0.5
        T = ks[0].shape[2]
        k0, v0 = ex(ks[0]), ex(vs[0])
        s0 = (q @ k0.transpose(-1, -2)) * scale  # [B, nh, Tq, T]
        if q_idx is None:
            causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        else:
            causal = (torch.arange(T, device=q.device)[None, None, :] <= q_idx[:, :, None])[:, None]
        s0 = s0.masked_fill(~causal, float("-inf"))
        diag = [((q * ex(k)).sum(-1, keepdim=True) * scale) for k in ks[1:]]  # [B, nh, T, 1] each
        s = torch.cat([s0] + diag, dim=-1).float().softmax(-1).to(q.dtype)
        a = s[..., :T] @ v0
        for j, v in enumerate(vs[1:]):
            a = a + s[..., T + j : T + j + 1] * ex(v)
        return self.out(a)


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)
        self.fused = None  # FusedLinears over gate/up for drafting (`fuse_for_drafting`)

    def fuse_for_drafting(self) -> bool:
        self.fused = FusedLinears.of([self.gate_proj, self.up_proj])
        return self.fused is not None

    def forward(self, x):
        gu = self.fused(x) if self.fused is not None else None
        if gu is None:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return self.down_proj(F.silu(gu[0]) * gu[1])


class HeadCache:
    """The head's own keys/values: [B, nkv, max_len, hd], `length` committed entries.

    Like the target's cache, a forward writes its block after `length` without committing;
    `commit(keep)` moves the kept block entries to contiguous slots.
    """

    def __init__(self, batch, n_kv, max_len, head_dim, dtype, device):
        self.k = torch.zeros(batch, n_kv, max_len, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.length = 0
        self.max_len = max_len
        self.graphs = None  # cudagraph.HeadGraphRunner over this storage (CUDA), dropped when it grows

    def write(self, k, v):
        L, T = self.length, k.shape[2]
        if L + T > self.max_len:
            self.grow(L + T)
        self.k[:, :, L : L + T] = k
        self.v[:, :, L : L + T] = v
        return self.k[:, :, : L + T], self.v[:, :, : L + T]

    def grow(self, need):
        new = max(need, 2 * self.max_len)
        k = torch.zeros(*self.k.shape[:2], new, self.k.shape[3], dtype=self.k.dtype, device=self.k.device)
        v = torch.zeros_like(k)
        k[:, :, : self.max_len] = self.k
        v[:, :, : self.max_len] = self.v
        self.k, self.v, self.max_len = k, v, new

    def commit(self, keep):
        self.length += keep_entries(self.k, self.v, self.length, keep, axis=2)

    def truncate(self, length):
        self.length = min(self.length, length)


def block_mask(length: int, block: torch.Tensor | None, T: int, device) -> torch.Tensor:
    """[1, 1, T, length + T] mask: every query sees the committed entries and `block` (default causal)."""
    if block is None:
        block = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    prefix = torch.ones(T, length, dtype=torch.bool, device=device)
    return torch.cat([prefix, block.to(device, torch.bool)], dim=-1)[None, None]
