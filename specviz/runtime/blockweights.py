"""Weights kept in their GGUF blocks (Q4_1, Q8_0) and multiplied in fp32 by the compiled kernel.

The dense fp32 model that transformers builds from the GGUF has exactly the weights d*q (+ m) of
these blocks; `attach_blocks` checks that bit for bit, matrix by matrix, before it lets the target
use them, so the model is the same and only the order of the additions inside a dot product
changes (as it already does between matmul kernels).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import qkernel

BLOCK = 32


@dataclass
class BlockWeight:
    """One [N, K] weight matrix as GGUF blocks. q4_1: qs [N, K/32, 16] uint8, scales [N, K/32, 2] (d, m);
    q8_0: qs [N, K/32, 32] int8, scales [N, K/32] (d)."""

    kind: str
    qs: torch.Tensor
    scales: torch.Tensor

    def __post_init__(self):
        self.qs, self.scales = self.qs.contiguous(), self.scales.contiguous()
        if self.kind == "q4_1":
            d = self.scales[..., 0]
            if not torch.equal(d, d.half().float()):  # the kernel's decode is exact only for these (blockmm.cpp, Q41)
                raise ValueError("Q4_1 scales must be fp16 values, as GGUF stores them")
        self.n, self.k = self.qs.shape[0], self.qs.shape[1] * BLOCK
        self._ptrs = (self.qs.data_ptr(), self.scales.data_ptr())  # the tensors live as long as self

    @property
    def shape(self) -> tuple[int, int]:
        return self.n, self.k

    def dequantize(self) -> torch.Tensor:
        """The dense fp32 matrix, rounded the way gguf-py rounds it (d*q, then + m)."""
        n, k = self.shape
        if self.kind == "q4_1":
            q = torch.cat([self.qs & 15, self.qs >> 4], dim=-1).float()
            w = self.scales[..., :1] * q + self.scales[..., 1:]
        else:
            w = self.scales[..., None] * self.qs.float()
        return w.reshape(n, k)

    def rows(self, index) -> "BlockWeight":
        index = torch.as_tensor(index, dtype=torch.long, device=self.qs.device)
        return BlockWeight(self.kind, self.qs[index].contiguous(), self.scales[index].contiguous())

    @staticmethod
    def stack(parts: list["BlockWeight"]) -> "BlockWeight":
        """Rows of several matrices, one under the other (the fused q/k/v and gate/up projections)."""
        kinds = {p.kind for p in parts}
        if len(kinds) != 1:
            raise ValueError(f"cannot fuse matrices of kinds {sorted(kinds)}")
        return BlockWeight(parts[0].kind, torch.cat([p.qs for p in parts]).contiguous(),
                           torch.cat([p.scales for p in parts]).contiguous())

    def mat(self) -> "qkernel.Mat":
        """The C struct the compiled kernel reads (pointers into tensors this object keeps alive)."""
        return qkernel.Mat(0 if self.kind == "q4_1" else 1, self._ptrs[0], self._ptrs[1], self.n, self.k)

    def matmul(self, x: torch.Tensor, lib=None, out: torch.Tensor | None = None) -> torch.Tensor:
        """x [..., K] fp32 -> x @ W^T [..., N]. The kernel reads host memory: CPU tensors only.
        `out`: a contiguous fp32 [rows, N] tensor to write into (a slice of a buffer: no copy after)."""
        if x.device.type != "cpu":
            raise ValueError(f"the block kernel runs on the CPU only, got a tensor on {x.device}")
        lib = lib or qkernel.library()
        n, k = self.n, self.k
        x2 = x.reshape(-1, k)
        if not x2.is_contiguous() or x2.dtype != torch.float32:
            x2 = x2.float().contiguous()
        rows = x2.shape[0]
        if out is None:
            y = torch.empty(rows, n, dtype=torch.float32, device=x2.device)
        elif out.shape != (rows, n) or out.dtype != torch.float32 or not out.is_contiguous() or out.device.type != "cpu":
            raise ValueError(f"out must be a contiguous fp32 CPU tensor of shape {(rows, n)}, got {tuple(out.shape)}")
        else:
            y = out
        fn = lib.q4_1_mm if self.kind == "q4_1" else lib.q8_0_mm
        fn(x2.data_ptr(), rows, k, self._ptrs[0], self._ptrs[1], n, y.data_ptr(), torch.get_num_threads())
        return y.view(*x.shape[:-1], n)


def quantize_q8_0(w: torch.Tensor) -> BlockWeight:
    """Round a dense [N, K] matrix to Q8_0 blocks (int8 with one fp16-representable scale per 32)."""
    n, k = w.shape
    b = w.detach().float().reshape(n, k // BLOCK, BLOCK)
    d = (b.abs().amax(-1) / 127).half().float()
    safe = torch.where(d > 0, d, torch.ones_like(d))
    q = (b / safe[..., None]).round().clamp(-127, 127).to(torch.int8)
    return BlockWeight("q8_0", q, d)


MAX_BLOCK_ROWS = 24  # longer inputs (prefill, training) keep the dense matmul


def speed_up_linears(module: torch.nn.Module) -> int:
    """Let a draft head's nn.Linear layers run short fp32 inputs through Q8_0 copies of their weights.

    For drafters only: their weights decide what is proposed, never what is accepted, so rounding
    them to Q8_0 cannot change the output, only (by a hair) how often a guess is right. The
    module's parameters and state dict stay as they are. Returns how many layers were changed.
    """
    lib = qkernel.library()
    if lib is None:
        return 0
    count = 0
    for lin in module.modules():
        if not isinstance(lin, torch.nn.Linear) or lin.in_features % BLOCK or lin.weight.dtype != torch.float32:
            continue
        if lin.weight.device.type != "cpu" or "forward" in vars(lin):
            continue
        blocks = quantize_q8_0(lin.weight)

        def forward(x, lin=lin, blocks=blocks, dense=lin.forward):
            training = torch.is_grad_enabled() and (x.requires_grad or lin.weight.requires_grad)
            if training or x.device.type != "cpu" or x.dtype != torch.float32 or x.numel() > MAX_BLOCK_ROWS * x.shape[-1]:
                return dense(x)
            y = blocks.matmul(x, lib)
            return y if lin.bias is None else y + lin.bias

        lin.forward = forward
        count += 1
    return count


def _from_gguf_tensor(t) -> BlockWeight | None:
    """Our BlockWeight from a gguf-py ReaderTensor, or None for a type we keep dense."""
    kind = t.tensor_type.name
    raw = np.asarray(t.data)
    n = raw.shape[0]
    if kind == "Q4_1":
        b = raw.reshape(n, -1, 20)
        d = b[..., 0:2].copy().view(np.float16).astype(np.float32)
        m = b[..., 2:4].copy().view(np.float16).astype(np.float32)
        return BlockWeight("q4_1", torch.from_numpy(b[..., 4:].copy()),
                           torch.from_numpy(np.concatenate([d, m], axis=-1)))
    if kind == "Q8_0":
        b = raw.reshape(n, -1, 34)
        d = b[..., 0:2].copy().view(np.float16).astype(np.float32)[..., 0]
        return BlockWeight("q8_0", torch.from_numpy(b[..., 2:].copy().view(np.int8)), torch.from_numpy(d))
    return None


def read_gguf_blocks(path: Path) -> dict[str, BlockWeight]:
    """Every Q4_1 / Q8_0 matrix of a GGUF file, by GGUF tensor name."""
    from gguf import GGUFReader  # not at the top: every target import would pay for it, only the GGUF block path reads one

    out = {}
    for t in GGUFReader(str(path)).tensors:
        bw = _from_gguf_tensor(t)
        if bw is not None:
            out[t.name] = bw
    return out


def _head_orders(n_rows: int, heads: list[int]) -> list[torch.Tensor]:
    """Row orders to try for q/k: as stored, or undoing llama.cpp's rotary permutation for each head count."""
    orders = [torch.arange(n_rows, device="cpu")]  # GGUF blocks are read into host memory
    for h in heads:
        if h and n_rows % (2 * h) == 0:
            half = n_rows // h // 2
            orders.append(torch.arange(n_rows).reshape(h, half, 2).transpose(1, 2).reshape(-1))  # transformers' unpermute
            orders.append(torch.arange(n_rows).reshape(h, 2, half).transpose(1, 2).reshape(-1))
    return orders


def _match(bw: BlockWeight, dense: torch.Tensor, orders=None) -> BlockWeight | None:
    """bw reordered so it equals `dense` bit for bit, or None."""
    if bw.shape != tuple(dense.shape):
        return None
    for order in orders or [None]:
        cand = bw if order is None else bw.rows(order)
        if torch.equal(cand.dequantize(), dense):
            return cand
    return None


@dataclass
class LayerBlocks:
    wqkv: BlockWeight
    wo: BlockWeight
    w13: BlockWeight
    w2: BlockWeight
    args: object = None  # qkernel.LayerArgs for the fused one-call layer, set by `layer_args`

    def layer_args(self, layer, cfg) -> "qkernel.LayerArgs":
        """The C struct the fused layer kernel reads (pointers into tensors this object keeps alive)."""
        self._norms = (layer.attn_norm.contiguous(), layer.mlp_norm.contiguous())
        self.args = qkernel.LayerArgs(self.wqkv.mat(), self.wo.mat(), self.w13.mat(), self.w2.mat(),
                                      self._norms[0].data_ptr(), self._norms[1].data_ptr(), float(cfg.rms_eps),
                                      cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, self.w2.k)
        return self.args


def attach_blocks(model, gguf_path: Path) -> str | None:
    """Give `model` (a fp32 CPU TargetModel) the GGUF's block weights; returns why not, or None on success."""
    if model.dtype != torch.float32 or model.device.type != "cpu":
        return "block weights serve fp32 on CPU only"
    lib = qkernel.library()
    if lib is None:
        return f"kernel unavailable: {qkernel.error() or 'disabled by SPECVIZ_KERNEL=0'}"
    cfg = model.cfg
    try:
        blocks = read_gguf_blocks(gguf_path)
    except Exception as e:
        return f"cannot read {gguf_path.name}: {e}"
    layers = []
    with torch.inference_mode():
        for i, L in enumerate(model.layers):
            if L.bqkv is not None:
                return "attention biases are not supported by the block kernel"
            p = f"blk.{i}."
            names = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
            if any(p + n + ".weight" not in blocks for n in names):
                return f"layer {i} is not stored as Q4_1/Q8_0 blocks"
            get = {n: blocks[p + n + ".weight"] for n in names}
            q_rows, kv_rows = model.q_dim, model.kv_dim
            dense_q, dense_k, dense_v = L.wqkv.split([q_rows, kv_rows, kv_rows])
            q = _match(get["attn_q"], dense_q, _head_orders(q_rows, [cfg.n_heads]))
            k = _match(get["attn_k"], dense_k, _head_orders(kv_rows, [cfg.n_kv_heads, cfg.n_heads]))
            v = _match(get["attn_v"], dense_v)
            gate_rows = L.w13.shape[0] // 2
            gate = _match(get["ffn_gate"], L.w13[:gate_rows])
            up = _match(get["ffn_up"], L.w13[gate_rows:])
            wo = _match(get["attn_output"], L.wo)
            w2 = _match(get["ffn_down"], L.w2)
            if None in (q, k, v, gate, up, wo, w2):
                return f"layer {i}: the GGUF blocks do not reproduce the loaded weights exactly"
            try:
                layers.append(LayerBlocks(BlockWeight.stack([q, k, v]), wo, BlockWeight.stack([gate, up]), w2))
            except ValueError as e:
                return f"layer {i}: {e}"
        head_name = "output.weight" if "output.weight" in blocks else "token_embd.weight"
        head = blocks.get(head_name)
        head = _match(head, model.lm_head) if head is not None else None
    model.blocks = layers
    model.lm_head_blocks = head  # None: the LM head stays dense
    return None
