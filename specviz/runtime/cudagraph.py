"""CUDA graphs for short passes: decoding, tree verification and EAGLE drafting without launch overhead.

On a GPU a 135M model's pass is a few hundred small kernels; launching them from Python costs
more than running them (13-22 ms per pass whatever its size, measured on an H200). A CUDA graph
records the kernels of one pass once and replays them with a single launch. Graphs need fixed
shapes and fixed addresses, so (as in gpt-fast) a graphed pass:

- has one of a few padded sizes (`BUCKETS`: 1, 8, 16, 32, 64 new tokens). Padding rows carry
  any token, attend only to themselves, and nobody attends to them; their keys land in cache
  slots after the real ones, which are pending (uncommitted) anyway;
- attends over the whole static KV cache with a mask computed on the device from the cache
  length (a tensor), and writes its keys/values with `index_copy_` at `length + row`;
- reads its inputs from, and leaves its outputs in, static buffers owned by the graph;
- runs over a cache from the model's pool (`TargetModel.new_cache` on CUDA), so the next prompt
  replays the last one's graphs; other caches (a `clone()`, batches) run eagerly.

An EAGLE head's drafting pass is graphed the same way over its own cache (`head_forward`; the
mask over the whole head cache is built on the host, and the graphs go when the cache grows).

The passes themselves (`static_pass`, `static_head_pass`) are plain torch and run on any device:
the tests check on a CPU that a padded pass gives the unpadded eager pass's logits, taps and
cache entries, and run the engine through the same glue uncaptured (`capture=False`). Only the
capture needs CUDA; the CPU path never uses any of this. Switch graphs off with
SPECVIZ_CUDA_GRAPHS=0.
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref

import torch
import torch.nn.functional as F

BUCKETS = (1, 8, 16, 32, 64)
POOL_MIN = 1024  # pooled caches hold 1024, 2048, 4096... positions: few sizes, so few captures
NOTE = "CUDA graphs for passes of up to 64 tokens"


def wanted(device) -> bool:
    """Graphs on CUDA devices unless SPECVIZ_CUDA_GRAPHS=0; never on a CPU."""
    return torch.device(device).type == "cuda" and os.environ.get("SPECVIZ_CUDA_GRAPHS", "1") != "0"


def bucket_for(n: int, buckets=BUCKETS) -> int | None:
    """The smallest padded size holding n tokens, or None when n is too big to be graphed."""
    return next((b for b in buckets if b >= n), None)


# ----------------------------------------------------------------------------- pure functions
def pad_inputs(tokens: torch.Tensor, positions: torch.Tensor, tree_mask: torch.Tensor | None, bucket: int):
    """Pad one pass of T tokens to `bucket` rows: tokens [1, Tb], positions [1, Tb], block [Tb, Tb].

    block[i, j]: row i may see new row j (the tree mask, default causal); a padding row sees only
    itself (so its softmax is defined) and no real row sees a padding row.
    """
    tokens = tokens.reshape(1, -1)
    T, dev = tokens.shape[1], tokens.device
    positions = positions.reshape(1, -1).to(dev)
    pad = bucket - T
    if pad < 0:
        raise ValueError(f"{T} tokens do not fit a bucket of {bucket}")
    block = torch.eye(bucket, dtype=torch.bool, device=dev)
    if tree_mask is None:
        block[:T, :T] = torch.ones(T, T, dtype=torch.bool, device=dev).tril()
    else:
        block[:T, :T] = tree_mask.reshape(T, T).to(dev, torch.bool)
    if pad:
        tokens = torch.cat([tokens, tokens.new_zeros(1, pad)], dim=1)
        positions = torch.cat([positions, positions[:, -1:].expand(1, pad)], dim=1)
    return tokens, positions, block


def static_mask(length: torch.Tensor, block: torch.Tensor, key_index: torch.Tensor) -> torch.Tensor:
    """[1, 1, Tb, S] attention mask over the whole cache: committed keys (< length) plus the new
    block's keys at length + j as `block` allows. `length` is a 0-d tensor, so no host sync."""
    Tb = block.shape[0]
    rel = key_index - length  # [S]: key slot relative to the new block
    committed = rel < 0
    inside = (rel >= 0) & (rel < Tb)
    from_block = block[:, rel.clamp(0, Tb - 1)] & inside  # [Tb, S]
    return (committed[None] | from_block)[None, None]


def static_pass(model, k_cache, v_cache, tokens, positions, length, block, key_index, taps=()):
    """One shape-static target pass: tokens/positions [1, Tb], `length` a 0-d long tensor, block
    [Tb, Tb]. Writes the new keys/values at slots length .. length+Tb-1 of k_cache/v_cache
    ([layers, 1, kv_heads, S, head_dim]) and returns (logits [1, Tb, V] fp32, taps)."""
    cfg = model.cfg
    nh, nkv = cfg.n_heads, cfg.n_kv_heads
    Tb = tokens.shape[1]
    slots = key_index[:Tb] + length
    mask = static_mask(length, block, key_index)
    cos, sin = model.rope(positions)
    x = F.embedding(tokens, model.embed)

    def attend(i, q, k, v):
        k_cache[i].index_copy_(2, slots, k)
        v_cache[i].index_copy_(2, slots, v)
        return F.scaled_dot_product_attention(q, k_cache[i], v_cache[i], attn_mask=mask, enable_gqa=nkv != nh)

    out_taps = {}
    for i in range(cfg.n_layers):
        if i in taps:
            out_taps[i] = x
        x = model.layer(i, x, cos, sin, attend)
    x = model.final_norm(x)
    if "final" in taps:
        out_taps["final"] = x
    return model.logits(x, blocks=False), out_taps


# ----------------------------------------------------------------------------- capture and replay
class Captured:
    """One pass `run()` over static input buffers: captured as a CUDA graph and replayed with one
    launch (capture=True), or run as it is at each replay (the same glue, testable on a CPU)."""

    def __init__(self, run, capture: bool, pool=None, device=None):
        self.run, self.graph, self.out = run, None, None
        if capture:
            stream = torch.cuda.Stream(device)
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):  # warm up off the capture (library handles, kernel choice)
                for _ in range(2):
                    run()
            torch.cuda.current_stream(device).wait_stream(stream)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, pool=pool, capture_error_mode="thread_local"):
                self.out = run()

    def replay(self):
        """The outputs, in buffers the next replay overwrites."""
        if self.graph is not None:
            self.graph.replay()
        else:
            self.out = self.run()
        return self.out


class _Graph:
    """One target pass size: static inputs and the captured pass. Warm-up and capture write keys
    at length .. length+bucket-1: pending slots, which the real replay right after overwrites."""

    def __init__(self, runner: "GraphRunner", bucket: int, taps: tuple, length: int):
        dev = runner.k.device
        self.tokens = torch.zeros(1, bucket, dtype=torch.long, device=dev)
        self.positions = torch.zeros(1, bucket, dtype=torch.long, device=dev)
        self.block = torch.eye(bucket, dtype=torch.bool, device=dev)
        self.length = torch.full((), length, dtype=torch.long, device=dev)
        run = lambda: static_pass(runner.model, runner.k, runner.v, self.tokens, self.positions,  # noqa: E731
                                  self.length, self.block, runner.key_index, taps)
        self.captured = Captured(run, runner.capture, runner.pool, dev)


class GraphRunner:
    """The CUDA graphs of one model over one KV cache's storage, one per (bucket, taps).

    Captured lazily on first use of a size. Graphs of one runner share a memory pool; runners do
    not, so two sessions on two caches can replay at the same time.
    """

    def __init__(self, model, k: torch.Tensor, v: torch.Tensor, capture: bool | None = None):
        self.model, self.k, self.v = model, k, v
        self.capture = k.is_cuda if capture is None else capture  # False: the same glue, run eagerly (CPU tests)
        self.key_index = torch.arange(k.shape[3], device=k.device)
        self.pool = torch.cuda.graph_pool_handle() if self.capture else None
        self.graphs: dict[tuple, _Graph] = {}
        self.lock = threading.Lock()

    def run(self, tokens, positions, tree_mask, length: int, taps: tuple):
        T = tokens.shape[-1]
        bucket = bucket_for(T)
        key = (bucket, taps)
        with self.lock:
            g = self.graphs.get(key)
            if g is None:
                g = self.graphs[key] = _Graph(self, bucket, taps, length)
            tok, pos, block = pad_inputs(tokens, positions, tree_mask, bucket)
            g.tokens.copy_(tok, non_blocking=True)
            g.positions.copy_(pos, non_blocking=True)
            g.block.copy_(block, non_blocking=True)
            g.length.fill_(length)
            logits, taps_out = g.captured.replay()
            # outputs are overwritten by the next replay: hand out copies of the real rows
            return logits[:, :T].clone(), {k: v[:, :T].clone() for k, v in taps_out.items()}


# ----------------------------------------------------------------------------- draft heads
def head_mask(length: int, offset: int, block: torch.Tensor | None, T: int, bucket: int, size: int) -> torch.Tensor:
    """[1, 1, bucket, size] mask of an EAGLE head's drafting pass over its whole cache: every row sees
    the committed entries (< length); real row r sees the tree entries and new rows `block[r]`
    allows (default: all earlier + causal); padding row r sees itself (slot length+offset+r) only."""
    m = torch.zeros(bucket, size, dtype=torch.bool)
    m[:, :length] = True
    if block is None:
        block = torch.cat([torch.ones(T, offset, dtype=torch.bool), torch.ones(T, T, dtype=torch.bool).tril()], dim=1)
    m[:T, length : length + offset + T] = block.to("cpu", torch.bool)
    pad = torch.arange(T, bucket)
    m[pad, length + offset + pad] = True
    m[pad, :length] = False
    return m[None, None]


def static_head_pass(head, k_cache, v_cache, tokens, hidden, positions, start, mask, key_index, first=False):
    """An EAGLE head's shape-static drafting pass: writes its keys/values at slots start ..
    start+Tb-1 of the head cache ([1, kv_heads, S, head_dim]) and attends over all of it."""
    emb = head.embed(tokens)
    cos, sin = head.rotary(positions, emb.dtype)
    q, k, v, res, lay = head.layer_qkv(emb, hidden, cos, sin, first=first)
    slots = key_index[: tokens.shape[1]] + start
    k_cache.index_copy_(2, slots, k)
    v_cache.index_copy_(2, slots, v)
    return head.layer_post(lay.self_attn.attend(q, k_cache, v_cache, mask=mask), res)


class HeadGraphRunner:
    """The graphs of one EAGLE head over one head cache's storage, one per (bucket, first)."""

    def __init__(self, head, k: torch.Tensor, v: torch.Tensor, capture: bool | None = None):
        self.head, self.k, self.v = head, k, v
        self.capture = k.is_cuda if capture is None else capture
        self.key_index = torch.arange(k.shape[2], device=k.device)
        self.pool = torch.cuda.graph_pool_handle() if self.capture else None
        self.graphs: dict[tuple, tuple] = {}

    def run(self, tokens, hidden, positions, length: int, offset: int, block, first: bool):
        T, dev = tokens.shape[1], self.k.device
        bucket = bucket_for(T)
        g = self.graphs.get((bucket, first))
        if g is None:
            H = hidden.shape[-1]
            bufs = dict(tokens=torch.zeros(1, bucket, dtype=torch.long, device=dev),
                        hidden=torch.zeros(1, bucket, H, dtype=self.k.dtype, device=dev),
                        positions=torch.zeros(1, bucket, dtype=torch.long, device=dev),
                        start=torch.full((), length + offset, dtype=torch.long, device=dev),
                        mask=head_mask(length, offset, None, 0, bucket, self.k.shape[2]).to(dev))
            run = lambda b=bufs: static_head_pass(self.head, self.k, self.v, b["tokens"], b["hidden"],  # noqa: E731
                                                  b["positions"], b["start"], b["mask"], self.key_index, first)
            g = self.graphs[(bucket, first)] = (bufs, Captured(run, self.capture, self.pool, dev))
        bufs, captured = g
        bufs["tokens"][:, :T].copy_(tokens.reshape(1, T), non_blocking=True)
        bufs["hidden"][:, :T].copy_(hidden.reshape(1, T, -1), non_blocking=True)
        bufs["positions"][:, :T].copy_(positions.reshape(1, T), non_blocking=True)
        bufs["start"].fill_(length + offset)
        bufs["mask"].copy_(head_mask(length, offset, block, T, bucket, self.k.shape[2]), non_blocking=True)
        return captured.replay()[:, :T].clone()


def head_forward(head, tokens, hidden, positions, cache, block, first: bool, offset: int):
    """A graphed drafting pass of an EAGLE head when this one can be (batch 1, <= 64 rows, room in
    its cache), else None. The graphs live on the cache and are dropped when it grows."""
    T = tokens.shape[1]
    bucket = bucket_for(T)
    if bucket is None or tokens.shape[0] != 1 or cache.length + offset + bucket > cache.max_len:
        return None
    try:
        runner = cache.graphs
        if runner is None or runner.k is not cache.k:
            runner = cache.graphs = HeadGraphRunner(head, cache.k, cache.v)
        return runner.run(tokens, hidden, positions, cache.length, offset, block, first)
    except Exception as e:  # never take drafting down: this head runs eagerly from now on
        warnings.warn(f"CUDA graph capture of the draft head failed ({type(e).__name__}: {e}).", stacklevel=2)
        head.graphs = False
        return None


def try_forward(model, tokens, cache, positions, tree_mask, taps):
    """A graphed pass when this one can be (a pooled cache, batch 1, <= 64 tokens, room in the
    cache), else None: the caller runs it eagerly."""
    T = tokens.shape[-1]
    bucket = bucket_for(T)
    L = cache.length
    if (cache.graphs is None or bucket is None or tokens.shape[0] != 1 or cache.key_mask is not None
            or L + bucket > cache.max_len):
        return None
    try:
        return cache.graphs.run(tokens, positions, tree_mask, L, tuple(taps))
    except Exception as e:  # a capture that fails must not take the engine down: run eagerly from now on
        warnings.warn(f"CUDA graph capture failed ({type(e).__name__}: {e}); running without graphs.", stacklevel=2)
        model.cuda_graphs = False
        model.kernel_note = model.kernel_note.replace(f", {NOTE}", "") + " (CUDA graphs failed)"
        return None


def pool_size(max_len: int) -> int:
    """The pooled cache size serving `max_len` positions: a power of two, at least POOL_MIN.
    Attention runs over the whole static cache, which on a GPU costs little next to a launch."""
    size = POOL_MIN
    while size < max_len:
        size *= 2
    return size


class CachePool:
    """Reuses KV cache storage (and the graphs captured over it) across decoders of one model.

    A cache handed out here returns its storage to the pool when it is garbage-collected, so the
    next prompt replays the graphs of the last instead of capturing new ones.
    """

    def __init__(self, model, make_cache):
        self.model = model
        self.make_cache = make_cache  # KVCache.over, passed in: cudagraph never imports target
        self.free: dict[int, list] = {}
        self.lock = threading.Lock()

    def acquire(self, max_len: int):
        size = pool_size(max_len)
        with self.lock:
            free = self.free.setdefault(size, [])
            k, v, graphs = free.pop() if free else (None, None, None)
        if k is None:
            m = self.model
            shape = (m.cfg.n_layers, 1, m.cfg.n_kv_heads, size, m.cfg.head_dim)
            k = torch.zeros(shape, dtype=m.dtype, device=m.device)
            v = torch.zeros(shape, dtype=m.dtype, device=m.device)
            graphs = GraphRunner(self.model, k, v)
        cache = self.make_cache(k, v, graphs)
        weakref.finalize(cache, self._release, size, (k, v, graphs))  # must not reference `cache`
        return cache

    def _release(self, size, entry):
        with self.lock:
            self.free.setdefault(size, []).append(entry)
