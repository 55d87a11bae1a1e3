"""EAGLE-1 and EAGLE-3 draft heads (the public SafeAILab/EAGLE architecture and key names).

EAGLE-1/2: `x = fc(cat(embed(t_{i+1}), f_i))`, one Llama decoder layer without input norm;
its output is a predicted feature, turned into logits by the target's own LM head.

EAGLE-3: `g = fc(cat(low, mid, high))`; the layer's attention input is
`cat(input_layernorm(embed(t)), hidden_norm(g))` (2H wide) with residual g; logits come from
the head's own `lm_head(norm(x))` over a reduced draft vocabulary, mapped back with
`target_id = draft_id + d2t[draft_id]`. At later steps the head's own output replaces g.

The embedding (and EAGLE-1's LM head) are the target's: `bind()` attaches them; they are never
part of the head's state dict.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..runtime import cudagraph
from ..runtime.blockweights import MAX_BLOCK_ROWS
from ..runtime.config import ModelConfig, rope_inv_freq
from .draft_kernel import DraftKernel
from .layers import MLP, Attention, KernelLayer, RMSNorm, Rotary, block_mask


def _mcfg(c: dict) -> ModelConfig:
    hidden = c["hidden_size"]
    nh = c["num_attention_heads"]
    return ModelConfig(
        vocab_size=c["vocab_size"],
        hidden_size=hidden,
        intermediate_size=c["intermediate_size"],
        n_layers=1,
        n_heads=nh,
        n_kv_heads=c.get("num_key_value_heads") or nh,
        head_dim=c.get("head_dim") or hidden // nh,
        rope_theta=float(c.get("rope_theta", 10000.0)),
        rms_eps=float(c.get("rms_norm_eps", 1e-5)),
        rope_scaling=c.get("rope_scaling") if (c.get("rope_scaling") or {}).get("rope_type", "default") == "llama3" else None,
    )


def head_config_from_target(tcfg: ModelConfig, **extra) -> dict:
    """A Llama-style config.json for a one-layer head on top of `tcfg`."""
    d = dict(
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        hidden_size=tcfg.hidden_size,
        intermediate_size=tcfg.intermediate_size,
        num_attention_heads=tcfg.n_heads,
        num_key_value_heads=tcfg.n_kv_heads,
        head_dim=tcfg.head_dim,
        num_hidden_layers=1,
        rms_norm_eps=tcfg.rms_eps,
        rope_theta=tcfg.rope_theta,
        max_position_embeddings=tcfg.max_position,
        vocab_size=tcfg.vocab_size,
        tie_word_embeddings=False,
        torch_dtype="float16",
    )
    if tcfg.rope_scaling:
        d["rope_scaling"] = dict(tcfg.rope_scaling)
    d.update(extra)
    return d


class _Eagle1Layer(nn.Module):
    def __init__(self, m: ModelConfig):
        super().__init__()
        H = m.hidden_size
        self.self_attn = Attention(H, H, m.n_heads, m.n_kv_heads, m.head_dim)
        self.mlp = MLP(H, m.intermediate_size)
        self.post_attention_layernorm = RMSNorm(H, m.rms_eps)


class _Eagle3Layer(nn.Module):
    def __init__(self, m: ModelConfig):
        super().__init__()
        H = m.hidden_size
        self.self_attn = Attention(2 * H, H, m.n_heads, m.n_kv_heads, m.head_dim)
        self.mlp = MLP(H, m.intermediate_size)
        self.hidden_norm = RMSNorm(H, m.rms_eps)
        self.input_layernorm = RMSNorm(H, m.rms_eps)
        self.post_attention_layernorm = RMSNorm(H, m.rms_eps)


def lm_blocks_fit(x: torch.Tensor) -> bool:
    """Whether the target's LM head blocks should serve these features (few fp32 rows, no gradient)."""
    return (x.device.type == "cpu" and x.dtype == torch.float32 and x.numel() <= MAX_BLOCK_ROWS * x.shape[-1]
            and not torch.is_grad_enabled())


def tied_logits(feats: torch.Tensor, lm_head: torch.Tensor, lm_blocks=None, vocab_ids=None) -> torch.Tensor:
    """Target-vocab logits of predicted features through the target's own LM head (EAGLE and
    Medusa alike): its GGUF blocks when they fit, else the dense rows (only `vocab_ids` if given)."""
    if vocab_ids is None and lm_blocks is not None and lm_blocks_fit(feats):
        return lm_blocks.matmul(feats)
    w = lm_head if vocab_ids is None else lm_head[vocab_ids.to(lm_head.device)]
    return F.linear(feats.to(w.device), w.to(feats.dtype))


class EagleHeadBase(nn.Module):
    method = "eagle"

    def __init__(self, config: dict):
        super().__init__()
        self.config = dict(config)
        self.m = _mcfg(config)
        self.rotary = Rotary(rope_inv_freq(self.m))
        self._embed = None
        self._lm_head = None
        self._lm_blocks = None
        self.graphs: bool | None = None  # drafting passes as CUDA graphs: None = on CUDA devices
        self.kernel_layer: KernelLayer | None = None  # the layer as one kernel call (`fuse_for_drafting`)
        self.draft_kernel: DraftKernel | None = None  # a whole tree level as one kernel call (`fuse_for_drafting`)

    @property
    def hidden_size(self):
        return self.m.hidden_size

    def fuse_for_drafting(self) -> int:
        """One block matmul for q/k/v and one for gate/up where the head drafts on Q8_0 copies
        (same bits, fewer calls: `layers.FusedLinears`). Returns how many groups were fused; once
        per head (drafters share a loaded head)."""
        if getattr(self, "_fused_groups", None) is None:
            self._fused_groups = sum(m.fuse_for_drafting() for m in self.modules() if isinstance(m, (Attention, MLP)))
            lay = self.decoder_layer()
            self.kernel_layer = KernelLayer.of(lay.self_attn, lay.mlp, lay.post_attention_layernorm, self.m)
            self.draft_kernel = DraftKernel.of(self)
        return self._fused_groups

    def draft_kernel_for(self, vocab: int | None) -> DraftKernel | None:
        """The tree-level kernel drafting over the first `vocab` token ids (None: the head's own
        vocabulary), built once per size; None where the kernel cannot serve the head."""
        if not vocab or self.draft_kernel is None:
            return self.draft_kernel
        kernels = self.__dict__.setdefault("_vocab_kernels", {})
        if vocab not in kernels:
            kernels[vocab] = DraftKernel.of(self, vocab)
        return kernels[vocab]

    def bind(self, embed: torch.Tensor, lm_head: torch.Tensor | None = None, lm_head_blocks=None):
        """Attach the target's embedding (and LM head, optionally as GGUF blocks) without making them parameters."""
        self._embed = embed
        self._lm_head = embed if lm_head is None else lm_head
        self._lm_blocks = lm_head_blocks
        return self

    @property
    def lm_blocks(self):
        """The target's LM head as GGUF blocks when `bind` was given them (None: the dense matrix)."""
        return self._lm_blocks

    @property
    def token_input(self) -> bool:
        """Whether the head reads the shifted token beside the feature (False: an ablation that
        feeds zeros in the token's place, to measure what the token buys; `specviz.train.ablations`)."""
        return (self.config.get("specviz") or {}).get("token_input", True)

    def embed(self, tokens):
        """The target's embedding of `tokens`, on the head's device and in its dtype (zeros for a
        head trained without the token input)."""
        w = self.fc.weight
        emb = F.embedding(tokens.to(self._embed.device), self._embed).to(w.device, w.dtype)
        return emb if self.token_input else torch.zeros_like(emb)

    # per-architecture pieces -------------------------------------------------
    def decoder_layer(self) -> nn.Module:
        raise NotImplementedError

    def layer_qkv(self, emb, hidden, cos, sin):
        raise NotImplementedError

    def kernel_inputs(self, emb, hidden) -> tuple[torch.Tensor, torch.Tensor]:
        """(residual stream x [T, H], a fresh tensor the kernel updates in place; the attention's
        input [T, K]) for `KernelLayer`, from emb and hidden [T, *]."""
        raise NotImplementedError

    def layer_post(self, attn_out, residual):
        raise NotImplementedError

    # uses --------------------------------------------------------------------
    def forward_seq(self, tokens, hidden, positions):
        """One causal pass over sequences: tokens [B, T] (the token after each feature), hidden [B, T, *]."""
        emb = self.embed(tokens)
        cos, sin = self.rotary(positions, emb.dtype)
        q, k, v, res, lay = self.layer_qkv(emb, hidden, cos, sin)
        return self.layer_post(lay.self_attn.attend(q, k, v, causal=True), res)

    def unroll(self, tokens_by_step, hidden0, positions0, steps: int, start=None):
        """Training-time test: step j feeds step j-1's output back (teacher-forced tokens).

        tokens_by_step[j] [B, T]: the token paired with index t at step j (t + 1 + j in the
        sequence); positions of step j are positions0 + j. Step 0 runs over all T indices; with
        `start` [B] the later steps only run for indices start_b.. (the anchors that matter,
        e.g. the response), saving the prompt's share of the work. Returns (outputs, idx): step 0
        output [B, T, H], later ones [B, W, H] for the indices idx [B, W] (None without start).
        """
        B, T = tokens_by_step[0].shape
        emb = self.embed(tokens_by_step[0])
        cos, sin = self.rotary(positions0, emb.dtype)
        q, k, v, res, lay = self.layer_qkv(emb, hidden0, cos, sin, first=True)
        ks, vs = [k], [v]
        out = self.layer_post(lay.self_attn.attend_ttt(q, ks, vs), res)
        outs = [out]
        idx = None
        if steps > 1 and start is not None:
            W = int((T - start.clamp(max=T - 1)).max())
            idx = (start[:, None] + torch.arange(W, device=start.device)[None]).clamp(max=T - 1)
            g = lambda x: x.gather(1, idx) if x.dim() == 2 else x.gather(1, idx[..., None].expand(-1, -1, x.shape[-1]))
            hidden = g(out)
            pos = g(positions0)
        else:
            g = lambda x: x
            hidden, pos = out, positions0
        for j in range(1, steps):
            emb = self.embed(g(tokens_by_step[j]))
            cos, sin = self.rotary(pos + j, emb.dtype)
            q, k, v, res, lay = self.layer_qkv(emb, hidden, cos, sin, first=False)
            ks.append(k)
            vs.append(v)
            out = self.layer_post(lay.self_attn.attend_ttt(q, ks, vs, q_idx=idx), res)
            outs.append(out)
            hidden = out
        return outs, idx

    def forward_cached(self, tokens, hidden, positions, cache, block=None, first=True, offset: int = 0):
        """Drafting: T new entries after the head's committed cache (plus `offset` uncommitted
        tree entries already written after it). `block` [T, offset + T] says which of those
        tree entries and new entries each new one sees (default: all earlier + causal)."""
        T = tokens.shape[1]
        L = cache.length
        if L + offset + T > cache.max_len:
            cache.grow(L + offset + T)
        if self.graphs if self.graphs is not None else cudagraph.wanted(cache.k.device):
            out = cudagraph.head_forward(self, tokens, hidden, positions, cache, block, first, offset)
            if out is not None:
                return out
        emb = self.embed(tokens)
        cos, sin = self.rotary(positions, emb.dtype)
        if self.kernel_layer is not None and self.kernel_layer.usable(T, cache):
            x, attn_in = self.kernel_inputs(emb[0], hidden[0].to(emb.dtype))
            cos, sin = cos.reshape(T, -1).contiguous(), sin.reshape(T, -1).contiguous()
            return self.kernel_layer(x, attn_in, cos, sin, cache, offset, block)[None]
        q, k, v, res, lay = self.layer_qkv(emb, hidden, cos, sin, first=first)
        cache.k[:, :, L + offset : L + offset + T] = k
        cache.v[:, :, L + offset : L + offset + T] = v
        keys, vals = cache.k[:, :, : L + offset + T], cache.v[:, :, : L + offset + T]
        if block is None:  # every committed and tree entry, then causal: one op
            mask = torch.ones(T, L + offset + T, dtype=torch.bool, device=emb.device).tril(L + offset)[None, None]
        else:
            mask = block_mask(L, block, T, emb.device)
        return self.layer_post(lay.self_attn.attend(q, keys, vals, mask=mask), res)


class Eagle1Head(EagleHeadBase):
    """EAGLE-1/2 head. State keys: fc.weight/bias, layers.0.{self_attn,mlp,post_attention_layernorm}.*"""

    method = "eagle1"

    def __init__(self, config: dict):
        super().__init__(config)
        H = self.m.hidden_size
        self.fc = nn.Linear(2 * H, H, bias=bool(config.get("bias", True)))
        self.layers = nn.ModuleList([_Eagle1Layer(self.m)])

    def decoder_layer(self):
        return self.layers[0]

    def kernel_inputs(self, emb, hidden):
        x = self.fc(torch.cat([emb, hidden], dim=-1)).contiguous()
        return x, x  # no input norm: the attention reads x before the kernel adds to it

    def layer_qkv(self, emb, hidden, cos, sin, first=True):
        x = self.fc(torch.cat([emb, hidden.to(emb.dtype)], dim=-1))
        lay = self.layers[0]
        q, k, v = lay.self_attn.qkv(x, cos, sin)
        return q, k, v, x, lay

    def layer_post(self, attn_out, residual):
        lay = self.layers[0]
        h = residual + attn_out
        return h + lay.mlp(lay.post_attention_layernorm(h))

    def logits(self, out, vocab_ids=None):
        """Target-vocab logits of predicted features (optionally only for `vocab_ids`)."""
        return tied_logits(out, self._lm_head, self._lm_blocks, vocab_ids)


class Eagle3Head(EagleHeadBase):
    """EAGLE-3 head. State keys: fc.weight, midlayer.*, norm.weight, lm_head.weight, d2t, t2d."""

    method = "eagle3"

    def __init__(self, config: dict):
        super().__init__(config)
        H = self.m.hidden_size
        Vd = int(config.get("draft_vocab_size") or config["vocab_size"])
        self.draft_vocab_size = Vd
        tdim = int(config.get("target_hidden_size") or H)
        self.fc = nn.Linear(3 * tdim, H, bias=False)
        self.midlayer = _Eagle3Layer(self.m)
        self.norm = RMSNorm(H, self.m.rms_eps)
        self.lm_head = nn.Linear(H, Vd, bias=False)
        self.register_buffer("d2t", torch.zeros(Vd, dtype=torch.long))
        self.register_buffer("t2d", torch.ones(self.m.vocab_size, dtype=torch.bool) if Vd == self.m.vocab_size
                             else torch.zeros(self.m.vocab_size, dtype=torch.bool))

    def set_vocab(self, draft_ids: torch.Tensor):
        """Install the draft vocabulary: target ids sorted ascending."""
        ids = torch.as_tensor(draft_ids, dtype=torch.long, device=self.d2t.device).sort().values
        self.d2t.copy_(ids - torch.arange(len(ids), device=ids.device))
        self.t2d.zero_()
        self.t2d[ids] = True

    def draft_to_target(self, draft_ids):
        return draft_ids + self.d2t[draft_ids]

    def target_ids(self) -> torch.Tensor:
        return torch.arange(self.draft_vocab_size, device=self.d2t.device) + self.d2t

    def fuse(self, low, mid, high):
        return self.fc(torch.cat([low, mid, high], dim=-1).to(self.fc.weight.dtype))

    def decoder_layer(self):
        return self.midlayer

    def kernel_inputs(self, emb, hidden):
        lay = self.midlayer
        attn_in = torch.cat([lay.input_layernorm(emb), lay.hidden_norm(hidden)], dim=-1)
        return hidden.clone(memory_format=torch.contiguous_format), attn_in

    def layer_qkv(self, emb, hidden, cos, sin, first=True):
        lay = self.midlayer
        hidden = hidden.to(emb.dtype)
        x = torch.cat([lay.input_layernorm(emb), lay.hidden_norm(hidden)], dim=-1)
        q, k, v = lay.self_attn.qkv(x, cos, sin)
        return q, k, v, hidden, lay

    def layer_post(self, attn_out, residual):
        lay = self.midlayer
        h = residual + attn_out
        return h + lay.mlp(lay.post_attention_layernorm(h))

    def logits(self, out):
        """Draft-vocab logits [.., draft_vocab]."""
        return self.lm_head(self.norm(out))
