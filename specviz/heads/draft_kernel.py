"""A draft head's whole tree level as ONE call of the compiled kernel (`draft_level` in blockmm.cpp).

Why: on a CPU, drafting an EAGLE tree level through torch ran ~40 small operations and Python
steps (the input's norms and concatenation, rotary, the decoder layer, the LM head, softmax,
top-k), each a dispatch of a few microseconds, and together they cost several times the level's
multiply-adds: a sixth of an EAGLE-3 round. The kernel does the same arithmetic on the same Q8_0
blocks the torch drafting path uses (`layers.KernelLayer`, `blockweights.speed_up_linears`), so
the drafts are the torch path's up to float rounding in the norms and the softmax (a summation
order): a draft probability may move by ~1e-7, which can change what is proposed, never what is
accepted (the target decides).

`DraftKernel.of(head)` returns None where the kernel cannot serve the head (no compiler, not fp32
on the CPU, a layer with biases, EAGLE-1 without the target's LM head as blocks): the drafter then
keeps the torch path.
"""

from __future__ import annotations

import ctypes
import threading

import torch

from ..runtime import qkernel
from ..runtime.blockweights import MAX_BLOCK_ROWS, quantize_q8_0
from ..core.sampling import SamplingParams
from .layers import FusedLinears


def _ptr(t: torch.Tensor | None):
    return None if t is None else t.data_ptr()


class DraftKernel:
    """The head's weights as the kernel reads them; `level` drafts one tree level."""

    def __init__(self, head, lib, vocab: int | None = None):
        self.lib, self.head = lib, head
        m = head.m
        self.H, self.hd = m.hidden_size, m.head_dim
        lay = head.decoder_layer()
        self.eagle3 = head.method == "eagle3"
        f32 = lambda w: w.detach().float().contiguous()
        self._embed = head._embed.contiguous()
        if self.eagle3:
            self._fc, self._bias = None, None
            self._norms = (f32(lay.input_layernorm.weight), f32(lay.hidden_norm.weight), f32(head.norm.weight))
            self._lm = quantize_q8_0(head.lm_head.weight)  # as speed_up_linears rounds it
            self._ids = head.target_ids().cpu().contiguous()
            # the fc that fuses the target's three taps into a feature, as head.fuse runs it (`fuse_taps`)
            fc = FusedLinears.of([head.fc])
            self._tap_fc = None if fc is None or head.fc.bias is not None else fc.blocks
        else:
            self._fc = quantize_q8_0(head.fc.weight)
            self._bias = None if head.fc.bias is None else f32(head.fc.bias)
            self._tap_fc = None
            self._norms = (None, None, None)
            self._lm, self._ids = head.lm_blocks, None
            if vocab:  # the target's LM head rows of the first `vocab` ids only (EagleDrafter's draft_vocab)
                self._ids = torch.arange(vocab)
                self._lm = head.lm_blocks.rows(self._ids)
        self.vocab_rows = self._lm.n
        self.args = qkernel.DraftArgs(
            head.kernel_layer.blocks.args, self._embed.data_ptr(), int(self.eagle3),
            qkernel.Mat() if self._fc is None else self._fc.mat(), _ptr(self._bias), _ptr(self._norms[0]), _ptr(self._norms[1]), _ptr(self._norms[2]), self._lm.mat(), _ptr(self._ids))
        self.work_per_token = head.kernel_layer.work_per_token + 5 * self.H + 2 * self.hd
        self._rope = (torch.empty(0, self.hd), torch.empty(0, self.hd))
        self._rope_lock = threading.Lock()

    @classmethod
    def of(cls, head, vocab: int | None = None) -> "DraftKernel | None":
        """The kernel for `head` (an EAGLE-1 head's with its LM head cut to the first `vocab` ids), or None."""
        lib = qkernel.library()
        if lib is None or head.kernel_layer is None or head._embed is None:
            return None
        p = next(head.parameters())
        if p.device.type != "cpu" or p.dtype != torch.float32 or head._embed.dtype != torch.float32:
            return None
        if head._embed.device.type != "cpu":
            return None
        if head.method != "eagle3" and head.lm_blocks is None:
            return None
        if head.method == "eagle3" and head.lm_head.in_features % 32:
            return None
        return cls(head, lib, None if head.method == "eagle3" else vocab)

    @staticmethod
    def serves(params: SamplingParams) -> bool:
        """Greedy, or a temperature alone: the kernel divides by it; top-k / top-p warps stay in torch."""
        return params.greedy or (not params.top_k and params.top_p >= 1.0)

    def usable(self, T: int, cache) -> bool:
        return (T <= MAX_BLOCK_ROWS and not torch.is_grad_enabled() and cache.k.device.type == "cpu"
                and cache.k.dtype == torch.float32 and cache.k.shape[0] == 1 and cache.k.is_contiguous())

    def fuse_taps(self, taps: list[torch.Tensor], out: torch.Tensor) -> bool:
        """EAGLE-3's features of committed tokens: head.fuse(low, mid, high) written into `out`
        [T, H] (a slice of the drafter's feature buffer), on the Q8_0 copy of head.fc that
        speed_up_linears runs head.fuse on, so the same bits. Why: head.fuse's conversions, module
        call and output tensor, and the copy into the buffer after it, cost a round several times
        the multiply-adds of its ~1 MB of weights (docs/runtime.md has the timings). False (nothing written)
        where that copy does not serve (then the caller runs head.fuse). Features are never trained
        through: nothing here is recorded by autograd."""
        T = out.shape[0]
        if (self._tap_fc is None or not 0 < T <= MAX_BLOCK_ROWS
                or any(t.dtype != torch.float32 or t.device.type != "cpu" for t in taps)):
            return False
        self._tap_fc.matmul(torch.cat(taps, dim=-1), self.lib, out=out)
        return True

    def rope(self, need: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotary cos/sin tables [P, head_dim] for positions 0..P-1 (P >= need), torch's own values."""
        cos, sin = self._rope
        if cos.shape[0] < need:
            with self._rope_lock:
                cos, sin = self._rope
                if cos.shape[0] < need:
                    P = max(need, 2 * cos.shape[0], 1024)
                    c, s = self.head.rotary(torch.arange(P)[None], torch.float32)
                    self._rope = cos, sin = c.reshape(P, self.hd).contiguous(), s.reshape(P, self.hd).contiguous()
        return cos, sin

    def level(self, tokens: list[int], hidden_ptrs: list[int], positions: list[int], cache, offset: int,
              mask: bytes | None, rows: int, temperature: float, k: int):
        """T = len(tokens) new head entries after the cache's committed ones and `offset` tree entries
        (mask: T x (offset + T) bytes, which of those each sees; None: all, then causal), fed with the
        feature rows at `hidden_ptrs` (fp32 [H] each). Returns (outputs [T, H], probs [rows, N] of the
        last `rows` entries, their top-k values [rows, k] and target ids [rows, k])."""
        T = len(tokens)
        L = cache.length
        if L + offset + T > cache.max_len:
            cache.grow(L + offset + T)
        cos, sin = self.rope(max(positions) + 1)
        out = torch.empty(T, self.H)
        probs = torch.empty(rows, self.vocab_rows)
        top_v = torch.empty(rows, max(k, 1))
        top_i = torch.empty(rows, max(k, 1), dtype=torch.long)
        work = torch.empty(T * self.work_per_token)
        i64s = ctypes.c_int64 * T
        self.lib.draft_level(
            ctypes.addressof(self.args), i64s(*tokens), (ctypes.c_void_p * T)(*hidden_ptrs), i64s(*positions), T, L,
            offset, cos.data_ptr(), sin.data_ptr(), mask, cache.k.data_ptr(), cache.v.data_ptr(), cache.max_len,
            out.data_ptr(), rows, float(temperature), probs.data_ptr(), k, top_v.data_ptr(), top_i.data_ptr(),
            work.data_ptr(), torch.get_num_threads())
        return out, probs, top_v, top_i

    def tree(self, tokens: list[int], hidden_ptrs: list[int], positions: list[int], cache, root: int,
             base_position: int, temperature: float, k: int, width: int, depth: int, floor: float):
        """A chosen (not drawn) dynamic tree's whole expansion in one call (`draft_tree` in blockmm.cpp): the
        commit of `tokens` (as `level` with offset 0 and one row, for the root) and then every level of
        `tree_build.build_dynamic_tree`'s loop (`width`: `tree_build.tree_width`, `floor`: `tree_build.log_floor`), the tree's
        entries at positions base_position + depth. Returns
        (candidates [(score, parent, token, q)], the distribution rows and their top-k as (probs, top_v,
        top_i), candidate -> row for the expanded ones). The caller commits the first len(tokens) entries.
        The candidates come back in ctypes arrays, read as lists: a torch op costs microseconds each."""
        if not 1 <= width <= max(k, 1) or depth < 1:
            raise ValueError(f"a tree of width {width} needs 1 <= width <= k = {k} and depth >= 1 (got depth {depth})")
        T0, L = len(tokens), cache.length
        extra = width * (depth - 1)
        if L + T0 + extra > cache.max_len:
            cache.grow(L + T0 + extra)
        cos, sin = self.rope(max(max(positions), base_position + depth - 1) + 1)
        rows, most, kk = 1 + extra, 1 + width * width * depth, max(k, 1)
        probs = torch.empty(rows, self.vocab_rows)
        top_v = torch.empty(rows, kk)
        top_i = torch.empty(rows, kk, dtype=torch.long)
        score, prob = (ctypes.c_double * most)(), (ctypes.c_float * most)()
        parent, token, row = (ctypes.c_int64 * most)(), (ctypes.c_int64 * most)(), (ctypes.c_int64 * most)()
        level_work = max(T0, width) * self.work_per_token
        work = torch.empty(level_work + (T0 + extra) * self.H)
        i64s = ctypes.c_int64 * T0
        n = self.lib.draft_tree(
            ctypes.addressof(self.args), i64s(*tokens), (ctypes.c_void_p * T0)(*hidden_ptrs), i64s(*positions), T0, L,
            int(root), base_position, cos.data_ptr(), sin.data_ptr(), cache.k.data_ptr(), cache.v.data_ptr(),
            cache.max_len, float(temperature), kk, width, depth, float(floor),
            probs.data_ptr(), top_v.data_ptr(), top_i.data_ptr(), score, parent, token, prob, row, work.data_ptr(),
            level_work, torch.get_num_threads())
        rows_of = {c: r for c, r in enumerate(row[:n]) if r >= 0}
        used = len(rows_of)  # rows are handed out in order, one per expanded candidate
        if used < rows:
            probs, top_v, top_i = probs[:used], top_v[:used], top_i[:used]
        return list(zip(score[:n], parent[:n], token[:n], prob[:n])), (probs, top_v, top_i), rows_of
