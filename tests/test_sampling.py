"""Warping equals Hugging Face's logits processors exactly; bad settings give clear errors."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from specviz import SpecVizError
from specviz.core.sampling import SamplingParams, probs, sample, warp_logits


def hf_warp(logits, t, k, p):
    scores = logits.clone()
    if t not in (0, 1):
        scores = TemperatureLogitsWarper(t)(None, scores)
    if k:
        scores = TopKLogitsWarper(k)(None, scores)
    if p < 1:
        scores = TopPLogitsWarper(p)(None, scores)
    return scores


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    vocab=st.integers(2, 300),
    t=st.sampled_from([0.3, 0.7, 1.0, 1.5]),
    k=st.sampled_from([0, 1, 2, 5, 20, 1000]),
    p=st.sampled_from([1.0, 0.95, 0.9, 0.5, 0.1]),
    ties=st.booleans(),
)
def test_warping_matches_hf(seed, vocab, t, k, p, ties):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, vocab, generator=g) * 3
    if ties:  # quantised logits create ties at the top-k / top-p boundaries
        logits = logits.round()
    ours = warp_logits(logits, SamplingParams(t, k, p))
    ref = hf_warp(logits, t, k, p)
    assert torch.equal(torch.isinf(ours), torch.isinf(ref))
    finite = ~torch.isinf(ref)
    assert torch.allclose(ours[finite], ref[finite], atol=0, rtol=1e-6)


def test_warped_distribution_on_real_logits(target):
    ids = target.tokenizer.chat_ids("Tell me a joke.")
    logits = target.model(torch.tensor([ids]), target.model.new_cache(128), last_only=True).logits[0, -1]
    for t, k, p in [(1.0, 0, 1.0), (0.7, 0, 0.9), (1.0, 20, 1.0), (0.5, 50, 0.8)]:
        d = probs(logits, SamplingParams(t, k, p))
        ref = hf_warp(logits[None], t, k, p).softmax(-1)[0]
        assert (d - ref).abs().max().item() < 1e-7
        assert abs(d.double().sum().item() - 1) < 1e-4  # fp32 softmax over 49k entries
        if k:
            assert int((d > 0).sum()) <= k


def test_greedy_is_one_hot_argmax():
    logits = torch.tensor([0.1, 3.0, -1.0, 2.9])
    d = probs(logits, SamplingParams(0.0))
    assert d.tolist() == [0.0, 1.0, 0.0, 0.0]


def test_sample_is_reproducible_with_seed():
    d = torch.softmax(torch.randn(1000), -1)
    a = [sample(d, torch.Generator().manual_seed(3)) for _ in range(5)]
    b = [sample(d, torch.Generator().manual_seed(3)) for _ in range(5)]
    assert a == b


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(temperature=-0.5), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-1), "top_k"),
        (dict(top_k=2.5), "top_k"),
    ],
)
def test_bad_settings_are_refused_clearly(kwargs, words):
    with pytest.raises(SpecVizError, match=words):
        SamplingParams(**kwargs)


def test_sample_matches_its_distribution_and_never_draws_zero_mass():
    """Chi-square of 20k draws against the distribution; zero-probability tokens never appear."""
    from scipy.stats import chisquare

    d = torch.tensor([0.0, 0.5, 0.0, 0.25, 0.125, 0.125, 0.0])
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(7)
    for _ in range(20_000):
        counts[sample(d, g)] += 1
    assert counts[[0, 2, 6]].sum() == 0
    nz = d > 0
    assert chisquare(counts[nz].numpy(), (d[nz] * 20_000).numpy()).pvalue > 0.001


@pytest.fixture(params=["numpy", "kernel"])
def sort_path(request, monkeypatch):
    """Run a test with each value sort `sampling.sorted_values` may use."""
    from specviz.runtime import qkernel

    lib = qkernel.library() if request.param == "kernel" else None
    if request.param == "kernel" and lib is None:
        pytest.skip(f"no kernel library: {qkernel.error()}")
    monkeypatch.setattr(qkernel, "loaded", lambda: lib)
    return request.param


def test_kernel_sort_equals_numpy_sort(sort_path):
    """The radix sort gives numpy's sorted values: negatives, -inf from a top-k cut, duplicates,
    zeros of both signs, subnormals and huge magnitudes, rows of several lengths."""
    import numpy as np

    from specviz.core.sampling import sorted_values

    g = torch.Generator().manual_seed(11)
    rows = torch.randn(6, 49152, generator=g) * 5
    rows[0, :300] = -float("inf")
    rows[1] = rows[1].round()  # many equal values
    rows[2, ::7] = 0.0
    rows[2, 1::7] = -0.0
    rows[3, :50] = torch.tensor([1e-42, -1e-42, 3e38, -3e38, float("inf")] * 10)
    for x in (rows, rows[:, :16384].contiguous(), rows[4, :5].clone(), rows[5, :1].clone()):
        got = sorted_values(x)
        want = torch.from_numpy(np.sort(x.numpy(), axis=-1))
        assert got.shape == x.shape and got.dtype == torch.float32
        assert torch.equal(got, want)
        nz = got != 0  # bit for bit, except that -0.0 and +0.0 may trade places
        assert torch.equal(got.view(torch.int32)[nz], want.view(torch.int32)[nz])


@pytest.mark.parametrize("shape", [(49152,), (7, 49152), (5, 16384)])
@pytest.mark.parametrize("p", [0.9, 0.5, 0.999])
def test_fast_top_p_mask_equals_the_sorting_reference(shape, p, sort_path):
    """The value sort path must give the reference's mask bit for bit (and actually run)."""
    from specviz.core.sampling import _top_p_remove, _top_p_remove_fast

    g = torch.Generator().manual_seed(len(shape) * 100 + int(p * 1000))
    logits = torch.randn(*shape, generator=g) * 4
    logits[..., :100] = -float("inf")  # a top-k cut before top-p
    fast = _top_p_remove_fast(logits, p)
    assert fast is not None
    assert torch.equal(fast, _top_p_remove(logits, p))
    assert 0 < int(fast.sum()) < logits.numel()


def test_fast_top_p_steps_aside_on_a_tie_at_the_boundary(sort_path):
    """Equal values straddling the cut: which one goes depends on the sort's index order, so the
    fast path must refuse and the warper must still equal HF's."""
    from specviz.core.sampling import _top_p_remove_fast

    logits = torch.tensor([[0.0, 0.0, 5.0, 5.0, 1.0]])
    # ascending cumulative mass ~[.003, .007, .016, .508, 1]: with p = 0.4 the cut (<= 0.6) falls
    # between the two 5.0s
    assert _top_p_remove_fast(logits, 0.4) is None
    ours = warp_logits(logits, SamplingParams(1.0, 0, 0.4))
    assert torch.equal(torch.isinf(ours), torch.isinf(hf_warp(logits, 1.0, 0, 0.4)))
    assert int(torch.isinf(ours).sum()) == 4
