"""The target's states at every position of a token sequence, in one causal pass (no cache kept)."""
from __future__ import annotations

import torch


@torch.no_grad()
def target_states(model, ids: list[int], taps=("final",)) -> dict:
    """{tap: [T, H] float32} for `taps` (layer indices: the inputs of those layers; "final": the
    normed last state, what the heads read and the LM head turns into logits)."""
    T = len(ids)
    cache = model.new_cache(T)
    causal = torch.ones(T, T, dtype=torch.bool, device=model.device).tril()
    out = model.forward(torch.tensor([ids], device=model.device), cache, tree_mask=causal, taps=tuple(taps), head=False)
    return {t: out.taps[t][0].float() for t in taps}


@torch.no_grad()
def next_probs(model, final: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """The target's next-token distribution from "final" states [.., H] (softmax at `temperature`)."""
    logits = model.logits(final.to(model.dtype)).float()
    return torch.softmax(logits / max(temperature, 1e-6), -1)


def greedy_continue(model, ids: list[int], n: int) -> list[int]:
    """n greedy tokens after `ids` (a full pass per token: short continuations only)."""
    out = list(ids)
    for _ in range(n):
        final = target_states(model, out)["final"][-1]
        out.append(int(next_probs(model, final).argmax()))
    return out[len(ids):]


def top(probs: torch.Tensor, tok, k: int = 5) -> list:
    """[[token id, text, probability], ...] of the k likeliest tokens."""
    v, i = probs.float().topk(min(k, probs.shape[-1]))
    return [[int(t), tok.token_text(int(t)), round(float(p), 4)] for p, t in zip(v, i)]


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return round(float(torch.nn.functional.cosine_similarity(a.float().flatten(), b.float().flatten(), dim=0)), 4)
