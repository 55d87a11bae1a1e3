"""Logits warping shared by every decoding path: temperature, then top-k, then top-p.

The order and the tie rules follow Hugging Face's TemperatureLogitsWarper, TopKLogitsWarper and
TopPLogitsWarper exactly, so a warped distribution here equals `generate`'s. Speculative
verification uses the *same* function for p (target) and q (draft): losslessness needs both
warped identically.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .. import SpecVizError
from ..runtime import qkernel


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 means greedy
    top_k: int = 0  # 0 means off
    top_p: float = 1.0  # 1 means off

    def __post_init__(self):
        t, k, p = self.temperature, self.top_k, self.top_p
        if not isinstance(t, (int, float)) or math.isnan(t) or t < 0 or math.isinf(t):
            raise SpecVizError(f"temperature must be a number >= 0 (0 = greedy), got {t!r}.")
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise SpecVizError(f"top_k must be a whole number >= 1 (or 0 to switch it off), got {k!r}.")
        if not isinstance(p, (int, float)) or math.isnan(p) or not (0 < p <= 1):
            raise SpecVizError(f"top_p must lie in (0, 1], got {p!r}.")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def as_dict(self) -> dict:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}


def warp_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Warped logits (-inf where removed), over the last dimension, like HF's warpers."""
    scores = logits.float()
    if params.temperature not in (0, 1):
        scores = scores / params.temperature
    if params.top_k:
        k = min(params.top_k, scores.shape[-1])
        kth = torch.topk(scores, k)[0][..., -1, None]
        scores = scores.masked_fill(scores < kth, -float("inf"))
    if params.top_p < 1.0:
        remove = _top_p_remove_fast(scores, params.top_p)
        if remove is None:
            remove = _top_p_remove(scores, params.top_p)
        scores = scores.masked_fill(remove, -float("inf"))
    return scores


def _top_p_remove(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """HF's TopPLogitsWarper rule: sort ascending, drop the prefix whose cumulative mass <= 1 - p."""
    sorted_logits, sorted_idx = torch.sort(scores, descending=False)
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove_sorted = cum <= (1 - top_p)
    remove_sorted[..., -1:] = False  # keep at least one token
    return remove_sorted.scatter(-1, sorted_idx, remove_sorted)


def _top_p_remove_fast(scores: torch.Tensor, top_p: float) -> torch.Tensor | None:
    """The same mask as `_top_p_remove`, bit for bit, without torch's index sort on the CPU.

    Why it is the same: the cumulative sums depend only on the ascending *values* (any sort
    gives the same array), and they never decrease, so the removed set is a prefix of length r
    of the sorted order: exactly the tokens below the first kept value v[r]. Only when v[r-1]
    equals v[r] does it depend on how the sort ordered equal values; then this returns None
    and the caller takes the reference path. A value-only sort (`sorted_values`) is 4-40x
    faster than `torch.sort` here, and top-p runs on every node of a sampled draft tree."""
    if scores.device.type != "cpu" or scores.dtype != torch.float32 or scores.dim() == 0 or scores.shape[-1] == 0:
        return None
    if bool(torch.isnan(scores).any()):
        return None
    values = sorted_values(scores)
    cum = values.softmax(dim=-1).cumsum(dim=-1)
    remove_sorted = cum <= (1 - top_p)
    remove_sorted[..., -1:] = False
    r = remove_sorted.sum(dim=-1, keepdim=True)  # length of the removed prefix
    first_kept = values.gather(-1, r)
    last_removed = values.gather(-1, (r - 1).clamp(min=0))
    if bool(((r > 0) & (last_removed == first_kept)).any()) or bool(torch.isnan(first_kept).any()):
        return None
    return scores < first_kept


def sorted_values(scores: torch.Tensor) -> torch.Tensor:
    """Each row of a float32 CPU tensor sorted ascending, values only: the kernel's radix sort
    when the kernel library is loaded (several times faster on a 49k row), else numpy's sort; equal
    values either way (only -0.0/+0.0 may trade places, which no sum can tell apart)."""
    x = scores.detach().contiguous()
    lib = qkernel.loaded()
    if lib is None:
        return torch.from_numpy(np.sort(x.numpy(), axis=-1))
    out = torch.empty_like(x)
    n = x.shape[-1]
    lib.sort_rows_f32(x.data_ptr(), out.data_ptr(), x.numel() // n, n, torch.get_num_threads())
    return out


def probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution a token is drawn from: warped softmax, or one-hot argmax when greedy."""
    if params.greedy:
        out = torch.zeros_like(logits, dtype=torch.float32)
        return out.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    return warp_logits(logits, params).softmax(-1)


def new_generator(seed: int, device="cpu") -> torch.Generator:
    """A seeded generator on `device`. Its state (`get_state`) is what a replay restores."""
    return torch.Generator(device=torch.device(device)).manual_seed(int(seed))


def uniform(generator: torch.Generator | None, n: int = 1, device=None) -> torch.Tensor:
    """n float64 uniforms in [0, 1), drawn on the generator's own device and moved to `device`
    (default: the CPU, where the acceptance walk reads them). Any generator works with tensors
    on any device, and the same generator state always gives the same numbers."""
    gen_device = generator.device if generator is not None else torch.device("cpu")
    u = torch.rand(n, generator=generator, dtype=torch.float64, device=gen_device)
    return u.to(device if device is not None else "cpu")


def sample(dist: torch.Tensor, generator: torch.Generator | None = None) -> int:
    """Draw one token id from a probability vector (need not be normalised).

    Inverse-CDF with one uniform: an order of magnitude faster than `torch.multinomial` on a
    49k vocabulary, and a token of probability 0 can never come out (the search is strict).
    The vector may live on any device; the uniform comes from the generator wherever it lives.
    """
    cdf = dist.double().cumsum(-1)
    u = uniform(generator, 1, cdf.device) * cdf[-1]
    i = int(torch.searchsorted(cdf, u, right=True).item())
    if i >= dist.numel():  # u * total rounded up to the total: take the last token with mass
        i = int(torch.nonzero(dist > 0)[-1].item())
    return i
