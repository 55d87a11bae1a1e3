"""What a trainer feeds its head: the reduced draft vocabulary and token-budget batches of cached states.

A batch holds, per sequence, the target's features and soft labels for `steps` draft steps from
each anchor (training-time test), padded to one tensor; `batches` groups sequences up to a token
budget in a seeded random order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from ..core.target import KVCache
from .data import SeqData


# --------------------------------------------------------------------------- vocab
def token_frequencies(data: SeqData, vocab_size: int) -> torch.Tensor:
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for s in data.seqs:
        r = s["tokens"][s["prompt_len"] :]
        counts += torch.bincount(r, minlength=vocab_size)
    return counts


def draft_vocab(data: SeqData, vocab_size: int, size: int) -> torch.Tensor:
    """The `size` most frequent response tokens (ties broken by id), sorted by id."""
    counts = token_frequencies(data, vocab_size)
    order = sorted(range(vocab_size), key=lambda i: (-int(counts[i]), i))[:size]
    return torch.tensor(sorted(order), dtype=torch.long)


def index_map(ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    m = torch.full((vocab_size,), -1, dtype=torch.long)
    m[ids] = torch.arange(len(ids))
    return m


# --------------------------------------------------------------------------- batches
@dataclass
class Batch:
    tokens: torch.Tensor  # [B, Tf + S + 1]
    feats: dict  # tap -> [B, Tf, H] float
    lab_idx: torch.Tensor  # [B, Tf + S + 1, K] index into the loss vocab (-1 = outside)
    lab_p: torch.Tensor  # [B, Tf + S + 1, K] renormalised probabilities over the loss vocab
    lab_top1: torch.Tensor  # [B, Tf + S + 1] target argmax (full-vocab id)
    valid: torch.Tensor  # [B, Tf + S + 1] a label exists at this position
    greedy: torch.Tensor  # [B] row decoded greedily
    Tf: int
    start: torch.Tensor  # [B] first anchor index (prompt_len - 2): drafting starts there

    def step(self, j: int):
        """Tokens, label index/probs/top1 and validity seen by index t at unroll step j (position t+1+j)."""
        sl = slice(1 + j, 1 + j + self.Tf)
        return self.tokens[:, sl], self.lab_idx[:, sl], self.lab_p[:, sl], self.lab_top1[:, sl], self.valid[:, sl]

    def step_at(self, j: int, idx):
        """`step(j)` gathered at indices idx [B, W] (None = all)."""
        out = self.step(j)
        if idx is None:
            return out
        g2 = lambda x: x.gather(1, idx)
        g3 = lambda x: x.gather(1, idx[..., None].expand(-1, -1, x.shape[-1]))
        return g2(out[0]), g3(out[1]), g3(out[2]), g2(out[3]), g2(out[4])


def make_batch(seqs, taps, imap: torch.Tensor, steps: int, device="cpu", dtype=torch.float32) -> Batch:
    B = len(seqs)
    Tf = max(len(s["tokens"]) for s in seqs) - 1
    W = Tf + steps + 1
    K = seqs[0]["topk_ids"].shape[1]
    tokens = torch.zeros(B, W, dtype=torch.long)
    lab_ids = torch.zeros(B, W, K, dtype=torch.long)
    lab_lp = torch.full((B, W, K), -float("inf"))
    valid = torch.zeros(B, W, dtype=torch.bool)
    feats = {t: torch.zeros(B, Tf, seqs[0]["feats"][t].shape[1], dtype=dtype) for t in taps}
    greedy = torch.zeros(B, dtype=torch.bool)
    start = torch.tensor([max(s["prompt_len"] - 2, 0) for s in seqs], dtype=torch.long)
    for b, s in enumerate(seqs):
        n, P = len(s["tokens"]), s["prompt_len"]
        tokens[b, :n] = s["tokens"]
        m = s["topk_ids"].shape[0]
        lab_ids[b, P - 1 : P - 1 + m] = s["topk_ids"]
        lab_lp[b, P - 1 : P - 1 + m] = s["topk_logp"]
        valid[b, P - 1 : P - 1 + m] = True
        for t in taps:
            f = s["feats"][t]
            feats[t][b, : f.shape[0]] = f.to(dtype)
        greedy[b] = s.get("temp", 0.0) == 0.0
    return _batch(tokens, feats, lab_ids, lab_lp, valid, greedy, Tf, start, imap, device)


def _batch(tokens, feats, lab_ids, lab_lp, valid, greedy, Tf, start, imap, device) -> Batch:
    """The labels restricted to the loss vocabulary (renormalised), everything on `device`."""
    lab_ids, lab_lp, valid = lab_ids.to(device), lab_lp.to(device), valid.to(device)
    top1 = lab_ids[..., 0].clone()
    idx = imap.to(device)[lab_ids]
    p = lab_lp.exp() * (idx >= 0)
    z = p.sum(-1, keepdim=True)
    valid = valid & (z[..., 0] > 0)
    p = p / z.clamp(min=1e-12)
    return Batch(
        tokens.to(device), {t: f.to(device) for t, f in feats.items()}, idx.clamp(min=0), p,
        top1, valid, greedy.to(device), Tf, start.to(device),
    )


@torch.no_grad()
def online_batch(seqs, model, taps, imap: torch.Tensor, steps: int, topk: int = 32, dtype=torch.float32,
                 chunk_rows: int = 8192) -> Batch:
    """`make_batch` for token-only sequences: the target computes their taps and soft labels now.

    On a GPU one padded pass over a batch costs less than reading its cached states: the data
    is then token ids only (a few bytes a position instead of ~5 KB of taps), and any amount of
    it fits in memory. Same layout as `make_batch` (taps of the padding zeroed, labels = the
    target's top-k log-probabilities after each prompt-or-response token that precedes a response
    token). The pass runs in `model`'s precision; its states are handed over in `dtype`.
    """
    dev = model.device
    B = len(seqs)
    n = torch.tensor([len(s["tokens"]) for s in seqs])
    P = torch.tensor([s["prompt_len"] for s in seqs])
    T = int(n.max())
    Tf, W = T - 1, T + steps
    tokens = torch.zeros(B, W, dtype=torch.long)
    for b, s in enumerate(seqs):
        tokens[b, : n[b]] = s["tokens"]
    tokens = tokens.to(dev)
    # right padding (causal attention never lets a real token see it); a plain cache, never the CUDA-graph
    # pool's: a graphed pass returns logits, not the hidden states this needs
    cache = KVCache(model.cfg, T, B, model.dtype, dev)
    out = model.forward(tokens[:, :T], cache, positions=torch.arange(T, device=dev), taps=tuple(_tap(t) for t in taps),
                        blocks=False, head=False)
    j = torch.arange(Tf, device=dev)[None]
    real = (j < (n - 1).to(dev)[:, None])[..., None]
    feats = {t: (out.taps[_tap(t)][:, :Tf] * real).to(dtype) for t in taps}
    # a label at position t of row b when P_b - 1 <= t <= n_b - 2 (it scores response token t + 1)
    jw = torch.arange(W, device=dev)[None]
    valid = (jw >= (P - 1).to(dev)[:, None]) & (jw <= (n - 2).to(dev)[:, None])
    rows = out.hidden[:, :T][valid[:, :T]]  # [R, H]
    ids, lps = [], []
    for r0 in range(0, rows.shape[0], chunk_rows):
        logp = torch.log_softmax(model.logits(rows[r0 : r0 + chunk_rows], blocks=False).float(), -1)
        v, i = logp.topk(topk, -1)
        ids.append(i)
        lps.append(v)
    lab_ids = torch.zeros(B, W, topk, dtype=torch.long, device=dev)
    lab_lp = torch.full((B, W, topk), -float("inf"), device=dev)
    if ids:
        lab_ids[valid] = torch.cat(ids)
        lab_lp[valid] = torch.cat(lps)
    greedy = torch.tensor([s.get("temp", 0.0) == 0.0 for s in seqs])
    start = (P - 2).clamp(min=0)
    return _batch(tokens, feats, lab_ids, lab_lp, valid, greedy, Tf, start, imap, dev)


def _tap(t):
    """A tap's name in shards and batches ("8", "final") as the model's forward takes it (8, "final")."""
    return int(t) if str(t).isdigit() else t


def batches(data: SeqData, max_tokens: int, rng: random.Random):
    """Length-bucketed batches of whole sequences, about `max_tokens` tokens each, shuffled."""
    order = sorted(range(len(data)), key=lambda i: len(data.seqs[i]["tokens"]))
    out, cur, cur_max = [], [], 0
    for i in order:
        n = len(data.seqs[i]["tokens"])
        if cur and max(cur_max, n) * (len(cur) + 1) > max_tokens:
            out.append(cur)
            cur, cur_max = [], 0
        cur.append(i)
        cur_max = max(cur_max, n)
    if cur:
        out.append(cur)
    rng.shuffle(out)
    return out


def soft_ce(logits, lab_idx, lab_p):
    """-sum p * log softmax(logits)[idx] per row; logits [N, V], lab_idx/lab_p [N, K]."""
    logq = torch.log_softmax(logits.float(), -1)
    return -(lab_p * logq.gather(-1, lab_idx)).sum(-1)
