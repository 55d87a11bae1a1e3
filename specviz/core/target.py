"""The target runtime: a compact Llama-family forward with a KV cache and tree attention.

In the spirit of gpt-fast: plain tensors, fused q/k/v and gate/up projections, a preallocated
KV cache, and one `forward` that serves prefill, incremental decoding and draft-tree
verification alike. A draft tree is scored in *one* pass: its nodes are appended after the
committed context, each attends to the context plus its own ancestors (the tree mask) at
position `prefix_len + depth`; afterwards `KVCache.commit` keeps only the accepted path.
"""

from __future__ import annotations

import ctypes

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .. import SpecVizError
from ..runtime import cudagraph, qkernel
from ..runtime.blockweights import LayerBlocks, attach_blocks, quantize_q8_0
from ..runtime.config import ModelConfig, rope_inv_freq
from ..runtime.loading import DEFAULT_MODEL, default_device, default_dtype, default_gguf_path, load_checkpoint
from ..runtime.machine import cpu_vendor
from .kv_cache import KVCache, PassPart
from .ops import rms_norm, rope_cos_sin, rotate_half
from ..runtime.tokenizer import ChatTokenizer


@dataclass
class ForwardOut:
    logits: torch.Tensor | None  # [B, T, V] (or [B, 1, V] with last_only); None with head=False
    taps: dict = field(default_factory=dict)  # layer index -> input of that layer; "final" -> normed output
    hidden: torch.Tensor | None = None  # [B, T, H] normed last hidden state, with head=False (LM head: `logits`)


# With block weights, short passes (decoding) and every draft tree's verify pass run all layers in one
# C++ call (`TargetModel._fuses` says when); longer passes (prefill, data generation) run layer by
# layer in torch. The C++ layers are also the faster ones for trees (docs/runtime.md).
FUSED_MAX_TOKENS = 32
FUSED_LAYERS = True
# Long passes (prefill): from how many rows the dense fp32 weights (torch's GEMM, MKL; the same weights,
# bit for bit) are faster than the blocks, by the block kernel's vector width and the CPU's vendor (MKL
# picks its kernels by vendor; docs/runtime.md has the measurements; no entry: the blocks won at every
# size). A fixed rule, not a timing at start-up: the choice changes a prefill's bits, and two machines
# with the same `machine.numerics()` must compute the same.
DENSE_FROM_ROWS = {(256, None): 64, (512, "Intel"): 128}


def dense_from_rows(simd: int, vendor: str) -> int | None:
    """DENSE_FROM_ROWS for this vector width and CPU vendor (a width's None entry: any vendor)."""
    rows = DENSE_FROM_ROWS.get((simd, vendor))
    return rows if rows is not None else DENSE_FROM_ROWS.get((simd, None))


def _linear(x, dense, blocks, lib, bias=None):
    return blocks.matmul(x, lib) if blocks is not None else F.linear(x, dense, bias)


def _uses_kernel(device) -> bool:
    """The compiled block kernel reads host memory: it is armed for CPU models only."""
    return torch.device(device).type == "cpu"


class Layer:
    __slots__ = ("attn_norm", "wqkv", "bqkv", "wo", "mlp_norm", "w13", "w2")


class TargetModel:
    """Weights plus a forward pass. Read-only after construction, so sessions can share it."""

    def __init__(self, cfg: ModelConfig, state: dict, dtype=torch.float32, device="cpu", name: str = "model"):
        self.cfg, self.dtype, self.device, self.name = cfg, dtype, torch.device(device), name

        def w(key):
            if key not in state:
                raise SpecVizError(f"Checkpoint is missing weight {key!r}; is it a {cfg.model_type} model?")
            return state[key].to(device=device, dtype=dtype).contiguous()

        self.embed = w("embed_tokens.weight")
        if self.embed.shape != (cfg.vocab_size, cfg.hidden_size):
            raise SpecVizError(f"Embedding shape {tuple(self.embed.shape)} does not match config.json.")
        self.lm_head = self.embed if cfg.tie_embeddings or "lm_head.weight" not in state else w("lm_head.weight")
        self.norm = w("norm.weight")
        self.layers: list[Layer] = []
        for i in range(cfg.n_layers):
            p = f"layers.{i}."
            L = Layer()
            L.attn_norm = w(p + "input_layernorm.weight")
            L.wqkv = torch.cat([w(p + f"self_attn.{n}_proj.weight") for n in "qkv"]).contiguous()
            L.bqkv = (
                torch.cat([w(p + f"self_attn.{n}_proj.bias") for n in "qkv"]).contiguous()
                if cfg.attention_bias
                else None
            )
            L.wo = w(p + "self_attn.o_proj.weight")
            L.mlp_norm = w(p + "post_attention_layernorm.weight")
            L.w13 = torch.cat([w(p + "mlp.gate_proj.weight"), w(p + "mlp.up_proj.weight")]).contiguous()
            L.w2 = w(p + "mlp.down_proj.weight")
            self.layers.append(L)
        self.inv_freq = rope_inv_freq(cfg).to(self.device)
        self.q_dim = cfg.n_heads * cfg.head_dim
        self.kv_dim = cfg.n_kv_heads * cfg.head_dim
        # Optional GGUF block weights (see blockweights.py), used by every pass when present.
        self.blocks = None
        self.lm_head_blocks = None
        self.fused_max_tokens = FUSED_MAX_TOKENS
        self.dense_from_rows = None  # set with GGUF block weights (DENSE_FROM_ROWS)
        self._lib = None
        self.cuda_graphs = cudagraph.wanted(self.device)  # capture short passes as CUDA graphs
        self._cache_pool = cudagraph.CachePool(self, KVCache.over) if self.cuda_graphs else None
        self.kernel_note = "dense weights" + (f", {cudagraph.NOTE}" if self.cuda_graphs else "")

    def set_cuda_graphs(self, on: bool) -> None:
        """Capture short passes as CUDA graphs, or not (the GPU timing compares both)."""
        self.cuda_graphs = on
        if on and self._cache_pool is None:
            self._cache_pool = cudagraph.CachePool(self, KVCache.over)

    def use_block_weights(self, gguf_path) -> bool:
        """Multiply every pass straight from the GGUF's blocks (same weights, 6x fewer bytes)."""
        if not _uses_kernel(self.device):
            self.kernel_note += " (block weights serve fp32 on CPU only)"
            return False
        why = attach_blocks(self, gguf_path)
        self._lib = qkernel.library() if why is None else None
        if why is None:
            self._arm_fused_layers()
            self.dense_from_rows = dense_from_rows(self._lib.blockmm_simd(), cpu_vendor())
        self.kernel_note = "GGUF block weights (fp32 compute)" if why is None else f"dense weights ({why})"
        return why is None

    def use_rounded_blocks(self) -> bool:
        """For draft models only: Q8_0 copies of the dense weights for every pass. A drafter's
        weights change what it guesses, never what the target accepts, so rounding them is safe."""
        lib = qkernel.library()
        mats = [w for L in self.layers for w in (L.wqkv, L.wo, L.w13, L.w2)] + [self.lm_head]
        if lib is None or self.dtype != torch.float32 or not _uses_kernel(self.device) or any(w.shape[1] % 32 for w in mats):
            return False
        if any(L.bqkv is not None for L in self.layers):
            return False
        self.blocks = [LayerBlocks(*(quantize_q8_0(w) for w in (L.wqkv, L.wo, L.w13, L.w2))) for L in self.layers]
        self.lm_head_blocks = quantize_q8_0(self.lm_head)
        self._lib = lib
        self._arm_fused_layers()
        self.kernel_note = "Q8_0 copies of the weights (draft model)"
        return True

    def _arm_fused_layers(self) -> None:
        """Build each layer's C argument struct once (weights never move afterwards), and the
        array of their addresses that the one-call pass reads."""
        for lb, layer in zip(self.blocks, self.layers):
            lb.layer_args(layer, self.cfg)
        self._layer_array = (ctypes.c_void_p * len(self.blocks))(*[ctypes.addressof(lb.args) for lb in self.blocks])

    # ------------------------------------------------------------------ helpers
    @property
    def pooled_caches(self) -> bool:
        """Whether batch-1 caches come from the CUDA-graph pool (shared storage: not to be deep-copied)."""
        return self._cache_pool is not None

    def new_cache(self, max_len: int, batch: int = 1) -> KVCache:
        """An empty KV cache; on CUDA with graphs, pooled storage whose captured graphs are reused."""
        if self._cache_pool is not None and batch == 1:
            return self._cache_pool.acquire(max_len)
        return KVCache(self.cfg, max_len, batch, self.dtype, self.device)

    def rope(self, positions: torch.Tensor):
        """cos/sin for positions [B, T], computed in fp32 like Hugging Face."""
        return rope_cos_sin(positions, self.inv_freq, self.dtype)

    # ------------------------------------------------------------------ which layers run a pass
    @property
    def kernel_armed(self) -> bool:
        """Whether the compiled block kernel multiplies this model's passes (block weights on the CPU).
        Only then does a row round the same in any batch (specviz.serving.step_batcher batches on it)."""
        return self.blocks is not None and self._lib is not None and _uses_kernel(self.device)

    def fuses(self, parts) -> bool:
        """Whether a batch of parts runs in the one-call C++ layers (`_fuses` for each)."""
        return all(self._fuses(len(p.tokens), p.tree_mask is not None, p.cache) for p in parts)

    def _fuses(self, T: int, tree: bool, cache: KVCache) -> bool:
        """The one rule for the one-call C++ layers: an armed kernel, and a draft tree or a short pass
        (<= fused_max_tokens) on a plain cache. Trees always go there: only those layers compute a row
        exactly as vanilla's one-token pass does, and the greedy identity rests on it."""
        return (FUSED_LAYERS and self.kernel_armed and (tree or T <= self.fused_max_tokens)
                and cache.key_mask is None and cache.k.is_contiguous())

    def _torch_lib(self, rows: int, exact_rows: bool):
        """The kernel for the torch layers' matmuls, or None for the dense copy of the same weights: the
        blocks, except in a long pass (a prefill, training data) whose rows need not round as a one-token
        pass does, where the dense GEMM is faster (DENSE_FROM_ROWS). Trees and batches of rounds keep them."""
        if not self.kernel_armed:
            return None
        if not exact_rows and self.dense_from_rows is not None and rows >= self.dense_from_rows:
            return None
        return self._lib

    # ------------------------------------------------------------------ forward
    @torch.inference_mode()
    def forward(
        self,
        tokens: torch.Tensor,
        cache: KVCache,
        positions: torch.Tensor | None = None,
        tree_mask: torch.Tensor | None = None,
        taps=(),
        last_only: bool = False,
        blocks: bool = True,
        head: bool = True,
    ) -> ForwardOut:
        """Run T new tokens after the committed context.

        tokens [B, T]; positions [B, T] or [T] (default: consecutive after the context);
        tree_mask [T, T] or [B, T, T] bool, row i = which block tokens token i may see
        (default causal); taps: layer indices whose *input* to return, plus "final" for the
        normed last hidden state. The new K/V stay pending until `cache.commit`.
        `blocks=False` forces the dense weights (to compare costs; the results agree to ~1e-5).
        `head=False` skips the LM head and returns the normed hidden states instead (the caller
        applies `logits` to the rows it needs; a captured CUDA graph still returns logits).
        """
        if tokens.dim() == 1:
            tokens = tokens[None]
        tokens = tokens.to(self.device)
        B, T = tokens.shape
        L = cache.length
        if L + T > cache.max_len:
            raise SpecVizError(f"Context too long: {L + T} tokens exceed the cache of {cache.max_len}.")
        if positions is None:
            positions = torch.arange(L, L + T, device=self.device)
        positions = positions.to(self.device)
        if positions.dim() == 1:
            positions = positions[None].expand(B, T)
        if self.cuda_graphs:
            graphed = cudagraph.try_forward(self, tokens, cache, positions, tree_mask, taps)
            if graphed is not None:
                logits, out_taps = graphed
                if last_only:
                    logits = logits[:, -1:]
                cache.pending = T
                return ForwardOut(logits=logits, taps=out_taps)
        cos, sin = self.rope(positions)
        out_taps = {}
        if blocks and B == 1 and self._fuses(T, tree_mask is not None, cache):
            if tree_mask is not None:
                mask = tree_mask.to(self.device, torch.uint8).reshape(T, T).contiguous()
            else:
                mask = torch.ones(T, T, dtype=torch.uint8, device=self.device).tril() if T > 1 else None
            x = self._layers_fused(F.embedding(tokens[0], self.embed), [(T, cache, mask)], cos, sin, taps, out_taps)
        else:
            lib = self._torch_lib(B * T, exact_rows=tree_mask is not None and B == 1) if blocks else None
            spans = [(0, T, cache, cache.attention_mask(B, T, tree_mask))]
            x = self._layers_torch(F.embedding(tokens, self.embed), spans, cos, sin, taps, out_taps, lib)
        x = self.final_norm(x)
        if "final" in taps:
            out_taps["final"] = x
        if last_only:
            x = x[:, -1:]
        cache.pending = T
        if not head:
            return ForwardOut(logits=None, taps=out_taps, hidden=x)
        return ForwardOut(logits=self.logits(x, blocks), taps=out_taps)

    @torch.inference_mode()
    def forward_batch(self, parts: list[PassPart], taps=()) -> list[ForwardOut]:
        """Several sequences' new tokens in one pass (a batch of rounds: specviz.serving.batch): the rows side by
        side, each weight read once for all, each token attending to its own cache and its own tree (a
        block-diagonal mask, no padding). Every row comes out as in its sequence's pass alone. Returns one
        ForwardOut per part: `hidden` [1, T, H] (normed, no LM head) and the taps; K/V stay pending."""
        if not parts:
            return []
        tokens = torch.tensor([t for p in parts for t in p.tokens], device=self.device)
        positions = torch.tensor([i for p in parts for i in p.positions], device=self.device)
        cos, sin = self.rope(positions[None])
        out_taps: dict = {}
        if self.fuses(parts):
            seqs = [(len(p.tokens), p.cache, None if p.tree_mask is None else torch.tensor(p.tree_mask, dtype=torch.uint8))
                    for p in parts]
            x = self._layers_fused(F.embedding(tokens, self.embed), seqs, cos, sin, taps, out_taps)
        else:
            spans, r0 = [], 0
            for p in parts:
                T = len(p.tokens)
                mask = None if p.tree_mask is None else torch.tensor(p.tree_mask, dtype=torch.bool, device=self.device)
                spans.append((r0, r0 + T, p.cache, p.cache.attention_mask(1, T, mask)))
                r0 += T
            x = self._layers_torch(F.embedding(tokens[None], self.embed), spans, cos, sin, taps, out_taps,
                                   self._torch_lib(len(tokens), exact_rows=True))
        x = self.final_norm(x)
        if "final" in taps:
            out_taps["final"] = x
        outs, r0 = [], 0
        for p in parts:
            T = len(p.tokens)
            p.cache.pending = T
            sl = slice(r0, r0 + T)
            outs.append(ForwardOut(logits=None, hidden=x[:, sl], taps={k: v[:, sl] for k, v in out_taps.items()}))
            r0 += T
        return outs

    def _layers_fused(self, x, seqs, cos, sin, taps, out_taps) -> torch.Tensor:
        """All decoder layers in one C++ call (blockmm.cpp `layers_forward_batch`) over x [N, H] (updated in
        place): the rows of seqs = [(T, cache, uint8 mask [T, T] or None for causal)] side by side."""
        cfg, n, N = self.cfg, len(seqs), x.shape[0]
        x = x.contiguous()
        cos, sin = cos[0, 0].contiguous(), sin[0, 0].contiguous()
        i64, ptrs = ctypes.c_int64 * n, ctypes.c_void_p * n
        caches = [c for _, c, _ in seqs]
        masks = ptrs(*[None if m is None else m.data_ptr() for _, _, m in seqs])
        work = torch.empty(N * (cfg.hidden_size + self.q_dim + 2 * self.kv_dim + self.q_dim + 3 * self.blocks[0].w2.k))
        self._lib.layers_forward_batch(
            self._layer_array, len(self.blocks), x.data_ptr(), n, i64(*[T for T, _, _ in seqs]),
            i64(*[c.length for c in caches]), cos.data_ptr(), sin.data_ptr(), masks, ptrs(*[c.k.data_ptr() for c in caches]),
            ptrs(*[c.v.data_ptr() for c in caches]), i64(*[c.k[0].numel() for c in caches]), i64(*[c.max_len for c in caches]),
            work.data_ptr(), torch.get_num_threads(), self.tap_buffers(taps, N, out_taps))
        return x[None]

    def tap_buffers(self, taps, rows: int, out_taps: dict):
        """For the fused kernel: a [1, rows, H] tensor in `out_taps` per tapped layer (x as it enters
        that layer, copied by the kernel) and the array of their addresses (None: no layer tapped)."""
        n = len(self.blocks)
        layer_taps = [i for i in range(n) if i in taps]
        if not layer_taps:
            return None
        ptrs = (ctypes.c_void_p * n)()
        for i in layer_taps:
            out_taps[i] = torch.empty(1, rows, self.cfg.hidden_size)
            ptrs[i] = out_taps[i].data_ptr()
        return ptrs

    def _layers_torch(self, x, spans, cos, sin, taps, out_taps, lib) -> torch.Tensor:
        """Layer by layer in torch over x [B, N, H]: the projections over all rows at once, attention span
        by span, a span = (first row, end row, its sequence's cache, (mask, causal))."""
        gqa = self.cfg.n_kv_heads != self.cfg.n_heads

        def attend(i, q, k, v):
            outs = []
            for a, b, cache, (mask, causal) in spans:
                L, T = cache.length, b - a
                cache.k[i, :, :, L : L + T] = k[:, :, a:b]
                cache.v[i, :, :, L : L + T] = v[:, :, a:b]
                outs.append(F.scaled_dot_product_attention(q[:, :, a:b], cache.k[i, :, :, : L + T], cache.v[i, :, :, : L + T],
                                                           attn_mask=mask, is_causal=causal, enable_gqa=gqa))
            return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)

        for i in range(self.cfg.n_layers):
            if i in taps:
                out_taps[i] = x
            x = self.layer(i, x, cos, sin, attend, self.blocks[i] if lib is not None else None, lib)
        return x

    def layer(self, i, x, cos, sin, attend, lb=None, lib=None) -> torch.Tensor:
        """Decoder layer i on x [B, T, H]; `attend(i, q, k, v)` stores k/v in a cache and mixes
        (the eager pass slices the cache, a CUDA graph writes and attends over static storage)."""
        cfg, layer = self.cfg, self.layers[i]
        B, T = x.shape[:2]
        nh, nkv, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        h = rms_norm(x, layer.attn_norm, cfg.rms_eps)
        qkv = _linear(h, layer.wqkv, lb and lb.wqkv, lib, layer.bqkv)
        qk = qkv[..., : self.q_dim + self.kv_dim].reshape(B, T, nh + nkv, hd).transpose(1, 2)
        qk = qk * cos + rotate_half(qk) * sin  # q and k heads rotated together
        q, k = qk[:, :nh], qk[:, nh:]
        v = qkv[..., self.q_dim + self.kv_dim :].reshape(B, T, nkv, hd).transpose(1, 2)
        a = attend(i, q, k, v)
        x = x + _linear(a.transpose(1, 2).reshape(B, T, self.q_dim), layer.wo, lb and lb.wo, lib)
        h = rms_norm(x, layer.mlp_norm, cfg.rms_eps)
        gate, up = _linear(h, layer.w13, lb and lb.w13, lib).chunk(2, dim=-1)
        return x + _linear(F.silu(gate) * up, layer.w2, lb and lb.w2, lib)

    @torch.inference_mode()
    def weight_pass(self, x: torch.Tensor) -> torch.Tensor:
        """The bare matrix products of one pass over x [T, H] (every weight read once, no
        attention), with the weights the runtime uses: what bench's weight-read floor times."""
        lib = self._lib if self.kernel_armed else None
        for i, L in enumerate(self.layers):
            lb = self.blocks[i] if lib is not None else None
            _linear(x, L.wqkv, lb and lb.wqkv, lib)
            _linear(x, L.wo, lb and lb.wo, lib)
            _linear(x, L.w13, lb and lb.w13, lib)
            _linear(x.new_zeros(x.shape[0], L.w2.shape[1]), L.w2, lb and lb.w2, lib)
        return self.logits(x)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        """The norm after the last layer (its output is the "final" tap the heads read)."""
        return rms_norm(x, self.norm, self.cfg.rms_eps)

    def logits(self, x: torch.Tensor, blocks: bool = True) -> torch.Tensor:
        """The LM head (fp32 out); from the GGUF blocks when the model has them."""
        if blocks and self.lm_head_blocks is not None and _uses_kernel(x.device):
            return self.lm_head_blocks.matmul(x, self._lib)
        # as 2-D rows: a strided 3-D input (x[:, -1:] of a batch) makes matmul copy the weight once
        # per batch row (docs/runtime.md#measured-reasons-behind-code-choices)
        return F.linear(x.reshape(-1, x.shape[-1]), self.lm_head).float().view(*x.shape[:-1], -1)

    __call__ = forward


def load_target(spec=None, dtype=None, device=None, progress=None, block_weights: bool = True) -> "Target":
    """Load a checkpoint (default: SmolLM2) into the runtime together with its tokenizer.

    Defaults: the GPU when there is one, and that device's precision (`loading.default_dtype`:
    bf16 on a GPU, fp32 on a CPU). The default model in fp32 on CPU also multiplies from its GGUF
    blocks (`block_weights`).
    """
    if device is None:
        device = default_device()
    if dtype is None:
        dtype = default_dtype(device)
    ck = load_checkpoint(spec, progress=progress)
    model = TargetModel(ck.config, ck.state_dict, dtype=dtype, device=device, name=ck.name)
    if block_weights and ck.name == DEFAULT_MODEL and model.dtype == torch.float32 and _uses_kernel(model.device):
        model.use_block_weights(default_gguf_path())
    return Target(model=model, tokenizer=ChatTokenizer(ck.folder), folder=ck.folder)


@dataclass
class Target:
    """A runtime model with its tokenizer and the folder it came from."""

    model: TargetModel
    tokenizer: object
    folder: object

    @property
    def cfg(self) -> ModelConfig:
        return self.model.cfg

    @property
    def eos_ids(self) -> set[int]:
        ids = set(self.cfg.eos_token_ids)
        if getattr(self.tokenizer, "eos_token", None):
            t = self.tokenizer.token_to_id(self.tokenizer.eos_token)
            if t is not None:
                ids.add(t)
        return ids
