"""How closely two fp32 computations of the same thing must agree: the one policy for every
comparison between machines (a recording replayed on another CPU) and between code paths (the C++
kernel against torch, a batch against solo passes).

- Tokens, tree shapes, accept/reject decisions and random draws: always exactly equal.
- Floats computed with the same numerics (same code path, same `machine.numerics()`): exactly equal.
- Floats computed with other numerics: within a tolerance derived from fp32 rounding, never from
  what one machine happened to print. Two summation orders of the same k products differ by at most
  about 2 lambda sqrt(k) u sum|a_i b_i| (u = 2^-24; Higham & Mary's probabilistic bound, which fails
  with probability below 2 exp(-lambda^2 / 2), 5e-11 for lambda = 7). A value made by `depth`
  chained reductions carries that once per reduction (first order: amplification ignored).
  Tolerances are relative to the largest magnitude compared (`max_norm_error`), or per value with a
  small absolute floor (`LessonTrace`-style walks: `value_close`).

Why one module: AVX2 and AVX-512 builds, MKL's Intel and AMD kernels and our block kernel all sum in
other orders; a test that picked its own bound from one machine's output failed on the other.
"""

from __future__ import annotations

import math

import torch

U = 2.0 ** -24  # fp32 unit roundoff
LAMBDA = 7.0  # the probabilistic bound's confidence factor (see above)


def reduction_tolerance(k: int) -> float:
    """Relative difference between two summation orders of k fp32 products."""
    if k < 1:
        raise ValueError(f"a reduction sums at least one term, got k={k}")
    return 2.0 * LAMBDA * math.sqrt(k) * U


def path_tolerance(k: int, depth: int = 1) -> float:
    """Relative difference between two code paths that each compute `depth` chained reductions of at
    most k terms in their own order (a matmul: depth 1; a decoder layer and an LM head: about 2-3)."""
    if depth < 1:
        raise ValueError(f"depth counts reductions, got {depth}")
    return depth * reduction_tolerance(k)


def model_tolerance(cfg) -> float:
    """A whole target pass on other numerics: one reduction of the model's widest kind per layer, plus
    the LM head. For SmolLM2-135M (30 layers, k = 1536) about 1e-3; the AVX2 EPYC replaying the
    AVX-512 Xeon's recordings is ~100x inside it, and a real change (a token, a wrong mask) is far
    outside it."""
    return path_tolerance(max(cfg.hidden_size, cfg.intermediate_size), cfg.n_layers + 1)


def replay_tolerance(recorded_numerics: str | None, here_numerics: str, cfg) -> float:
    """0.0 (exact) where the recording's numerics are this machine's, else `model_tolerance`."""
    return 0.0 if recorded_numerics == here_numerics else model_tolerance(cfg)


def value_close(a: float, b: float, tol: float) -> bool:
    """Two floats of a trace (probabilities, ratios, scores): equal when tol is 0, else relatively
    close, with an absolute floor of tol x 1e-3 for values that are ~0 on one side."""
    if tol <= 0:
        return a == b
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol * 1e-3)


def max_norm_error(got, ref) -> float:
    """max|got - ref| / max(max|ref|, 1e-30), computed in float64 (tensors or arrays)."""
    got, ref = torch.as_tensor(got).double(), torch.as_tensor(ref).double()
    return float((got - ref).abs().max()) / max(float(ref.abs().max()), 1e-30)

