"""Losslessness: exact (property tests over random p, q, trees, warping) and empirical (real model).

The exact enumeration must reproduce the warped target distribution to 1e-6 for every correct
rule: greedy, deterministic trees (EAGLE-2/3), sampled chains (Leviathan) and sampled trees
(SpecInfer, with and without replacement). The real-model checks compare N vanilla and N
speculative samples of the first 3 tokens with a chi-square test.
"""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specviz.lossless import (
    DEFAULT_PROMPT,
    PrefixModel,
    TargetOracle,
    compare_histograms,
    exact_dist_k,
    exact_first_token_dist,
    exact_max_diff,
    main,
    make_drafter,
    run_check,
)
from specviz.core.sampling import SamplingParams, probs
from specviz.core.tree import DraftTree

TOL = 1e-6

warping = st.builds(
    SamplingParams,
    temperature=st.sampled_from([0.0, 0.3, 0.7, 1.0, 1.6]),
    top_k=st.sampled_from([0, 1, 2, 3, 5]),
    top_p=st.sampled_from([1.0, 0.95, 0.8, 0.5]),
)


def tables(seed, V, scale, same=False):
    """Random logits per prefix; `same` makes the draft equal the target (ties everywhere)."""
    cache = {}

    def f(kind, h):
        kind = 1 if same else kind
        if (kind, h) not in cache:
            g = torch.Generator().manual_seed(hash((seed, kind) + h) % (2**31))
            x = torch.randn(V, generator=g) * scale
            if seed % 3 == 0:  # exact ties and hard zeros after warping
                x = x.round()
            cache[(kind, h)] = x
        return cache[(kind, h)]

    return f


def prefix_model(seed, V, widths, sampled, wo, params, scale=2.0, same=False):
    t = tables(seed, V, scale, same)
    return PrefixModel(
        p_fn=lambda h: probs(t(1, h), params),
        q_fn=lambda h: probs(t(2, h), params),
        widths=widths,
        sampled=sampled,
        without_replacement=wo,
        p_raw_fn=lambda h: t(1, h).softmax(-1),
        q_raw_fn=lambda h: t(2, h).softmax(-1),
    )


# ------------------------------------------------------------------------------ exact, property tests
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    V=st.integers(2, 5),
    widths=st.sampled_from([[1], [1, 1], [1, 1, 1], [2], [2, 1], [3, 2], [1, 3], [4]]),
    sampled=st.booleans(),
    wo=st.booleans(),
    params=warping,
    same=st.booleans(),
    scale=st.sampled_from([0.5, 2.0, 6.0]),
)
def test_exact_distribution_equals_warped_target(seed, V, widths, sampled, wo, params, same, scale):
    """Every correct rule, on chains and trees, sampled and deterministic, emits warped p exactly."""
    model = prefix_model(seed, V, widths, sampled, wo, params, scale, same)
    for k in range(1, min(3, len(widths) + 1) + 1):
        assert exact_max_diff(model, params=params, k=k) < TOL


def random_tree(seed, V, n_nodes, sampled):
    """Random shape and tokens (duplicate siblings allowed); rows depend on the token path only,
    as they do for a real target (the same prefix has the same next-token distribution)."""
    g = torch.Generator().manual_seed(seed)
    parents = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, n_nodes)]
    tokens = [int(t) for t in torch.randint(0, V, (n_nodes,), generator=g)]
    tree = DraftTree(tokens=tokens, parents=parents, q=[1.0] * n_nodes, sampled=sampled)
    paths = [()] * n_nodes
    for i in range(1, n_nodes):
        paths[i] = paths[parents[i]] + (tokens[i],)
    rows, dists = {}, {}
    for path in paths:
        if path not in rows:
            rows[path] = torch.randn(V, generator=g) * 3
            dists[path] = torch.softmax(torch.randn(V, generator=g) * 2, -1)
    tree.dists = {i: dists[paths[i]] for i in range(n_nodes)}
    logits = torch.stack([rows[path] for path in paths])
    return tree, logits


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), V=st.integers(2, 6), n=st.integers(1, 9), params=warping, sampled=st.booleans())
def test_exact_on_draft_trees(seed, V, n, params, sampled):
    """DraftTree input: any deterministic tree (duplicate siblings included) for k up to depth + 1;
    a sampled tree's first token (marginalised over the draws at the root)."""
    tree, logits = random_tree(seed, V, n, sampled)
    p = probs(logits, params)
    p_raw = logits.softmax(-1)
    first = exact_first_token_dist(tree, p, params, p_raw=p_raw)
    assert float((first - p[0].double() / p[0].double().sum()).abs().max()) < TOL
    kmax = 1 if (sampled and not params.greedy) else min(3, tree.max_depth + 1)
    for k in range(1, kmax + 1):
        assert exact_max_diff(tree, p, params, k=k, p_raw=p_raw) < TOL


def test_sampled_draft_tree_beyond_first_token_needs_a_model():
    from specviz import SpecVizError

    tree, logits = random_tree(1, 3, 8, True)
    p = probs(logits, SamplingParams(temperature=1.0))
    with pytest.raises(SpecVizError, match="PrefixModel"):
        exact_max_diff(tree, p, SamplingParams(temperature=1.0), k=2)


def test_exact_dist_k_is_a_distribution_and_matches_products():
    params = SamplingParams(temperature=0.9, top_k=3)
    model = prefix_model(7, 4, [2, 1], True, False, params)
    d = exact_dist_k(model, params=params, k=2)
    assert math.isclose(sum(d.values()), 1.0, abs_tol=1e-9)
    for (a, b), x in d.items():
        want = float(model.p(())[a]) * float(model.p((a,))[b])
        assert abs(x - want) < TOL


def test_exact_check_can_fail():
    """The exact check is not vacuous: a biased rule shows up at once."""
    params = SamplingParams(temperature=1.0)
    model = prefix_model(8, 5, [1, 1], True, False, params)
    assert exact_max_diff(model, params=params, k=1, variant="no-rejection") > 1e-2


# ------------------------------------------------------------------------------ statistics
def test_compare_histograms():
    from collections import Counter

    a = Counter({(1,): 500, (2,): 300, (3,): 200})
    same = compare_histograms(a, Counter(a))
    assert same["p_value"] > 0.99 and same["tv"] == 0 and 0 < same["tv_bound"] < 0.2
    other = compare_histograms(a, Counter({(1,): 300, (2,): 300, (3,): 400}))
    assert other["p_value"] < 1e-6 and abs(other["tv"] - 0.2) < 1e-12
    rare = compare_histograms(Counter({(1,): 990, (9,): 5, (8,): 5}), Counter({(1,): 1000}))
    assert rare["bins"] == 2  # rare outcomes merged into one "other" bin
    assert compare_histograms(Counter({(1,): 10}), Counter({(1,): 10}))["p_value"] == 1.0


# ------------------------------------------------------------------------------ real model
PROMPT = DEFAULT_PROMPT  # "I flipped a coin and it landed on": ~4 likely first tokens
N = 2000

SETTINGS = {
    "t1": SamplingParams(temperature=1.0),
    "t07p09": SamplingParams(temperature=0.7, top_p=0.9),
    "k20": SamplingParams(temperature=1.0, top_k=20),
}


@pytest.fixture(scope="module")
def real(target):
    ids = target.tokenizer.encode(PROMPT)
    oracles = {}

    def oracle(name):
        if name not in oracles:
            oracles[name] = TargetOracle(target, ids, SETTINGS[name])
        return oracles[name]

    return target, ids, oracle


@pytest.mark.slow
@pytest.mark.parametrize(
    "setting,method",
    [("t1", "toy-specinfer"), ("t07p09", "toy-sps"), ("k20", "toy-topk")],
)
def test_speculative_matches_vanilla_on_the_real_model(real, setting, method):
    target, ids, oracle = real
    o = oracle(setting)
    r = run_check(target, make_drafter(method, o), ids, SETTINGS[setting], samples=N, horizon=3, seed=1, oracle=o)
    print(f"{setting} {method}: p={r.p_value:.3g} tv={r.tv:.4f} (<= {r.tv_bound:.3f}) exact={r.exact_max_diff:.2g} "
          f"k={r.exact_k} tau={r.tau:.2f} acc={r.acceptance:.2f} {r.seconds:.1f}s {r.samples_per_s:.0f}/s")
    assert r.drafted_at_prompt > 0 and r.acceptance > 0.05 and r.acceptance < 0.98  # real drafts, real rejections
    assert r.exact_max_diff is not None and r.exact_max_diff < TOL
    assert r.p_value > 1e-3 and r.passed
    assert sum(r.vanilla.values()) == sum(r.speculative.values()) == N
    assert all(len(k) == 3 for k in r.speculative)


def test_negative_control_fails_on_the_real_model(real):
    from specviz.teaching.bugs import DEFAULT_BROKEN

    target, ids, oracle = real
    o = oracle("t1")
    r = run_check(target, make_drafter("toy-sps", o), ids, SETTINGS["t1"], samples=1500, horizon=3, seed=1,
                  variant=DEFAULT_BROKEN, oracle=o)
    print(f"negative control {DEFAULT_BROKEN}: p={r.p_value:.3g} tv={r.tv:.4f} exact={r.exact_max_diff:.3g}")
    assert r.p_value < 1e-6 and r.exact_max_diff > 1e-3 and not r.passed


def test_prompt_lookup_is_lossless(real):
    """An engine Drafter (PLD) through the generic proposer: deterministic chain, EAGLE rule."""
    pld = pytest.importorskip("specviz.drafters.pld")
    target, _, _ = real
    ids = target.tokenizer.encode("I flipped a coin and it landed on heads. I flipped a coin and it landed on")
    params = SETTINGS["t1"]
    r = run_check(target, pld.PromptLookupDrafter(), ids, params, samples=1000, horizon=3, seed=2)
    print(f"pld: p={r.p_value:.3g} tv={r.tv:.4f} exact={r.exact_max_diff:.2g} k={r.exact_k} drafted={r.drafted_at_prompt}")
    assert r.drafted_at_prompt > 0 and r.exact_k >= 2
    assert r.exact_max_diff < TOL and r.p_value > 1e-3


def test_greedy_check_is_degenerate_and_passes(real):
    target, ids, _ = real
    r = run_check(target, "toy-topk", ids, SamplingParams(temperature=0.0), samples=50, horizon=3)
    assert len(r.vanilla) == 1 and r.vanilla == r.speculative and r.passed and r.exact_max_diff < TOL


# ------------------------------------------------------------------------------ command line
@pytest.mark.parametrize(
    "argv,msg",
    [
        (["--prompt", "  "], "prompt is empty"),
        (["--temperature", "-0.5"], "temperature"),
        (["--top-p", "0"], "top-p"),
        (["--top-p", "1.2"], "top-p"),
        (["--top-k", "0"], "top-k"),
        (["--samples", "0"], "samples"),
        (["--method", "nope"], "Unknown --method"),
    ],
)
def test_cli_rejects_bad_input(argv, msg, capsys):
    assert main(argv) == 2
    assert msg in capsys.readouterr().err


@pytest.mark.slow
def test_cli_pass_and_fail(target, capsys):
    assert main(["--samples", "300", "--seed", "3"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "PASS" and any("p-value" in line for line in out) and any("exact check" in line for line in out)
    assert main(["--samples", "300", "--broken", "no-rejection"]) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1] == "FAIL"


@pytest.mark.slow
@pytest.mark.parametrize("method,options", [("eagle3", {}), ("eagle3", {"draw": "sample", "depth": 2, "top_k": 1, "total_tokens": 3}), ("sps", {})])
def test_shipped_drafters_are_lossless_and_a_broken_rule_is_caught(real, method, options):
    """The real drafters with their shipped weights at T > 0 (issue 15): EAGLE-3's deterministic
    tree (reset on each prefix from the target's hidden states), EAGLE-3's drafts drawn from q
    (draw="sample", one child a node: the exact check marginalises the root's draws over the whole
    vocabulary, which two draws without replacement would square; tests/test_verify.py checks wider
    drawn trees) and SpS's sampled chain pass the exact check and the sample test; resampling from p
    instead of the residual fails both checks."""
    from specviz.teaching.bugs import DEFAULT_BROKEN

    target, ids, oracle = real
    o = oracle("t1")
    drafter = make_drafter(method, o, **options)
    from specviz.lossless.oracle import proposer_for

    tree = proposer_for(drafter, o).propose_many([()], SETTINGS["t1"], torch.Generator().manual_seed(0), max_depth=1)[0]
    assert tree.sampled == (method == "sps" or bool(options)) and len(tree) > 1
    ok = run_check(target, drafter, ids, SETTINGS["t1"], samples=400, horizon=2, seed=3, oracle=o)
    print(f"{method}: p={ok.p_value:.3g} exact={ok.exact_max_diff:.2g} k={ok.exact_k} acc={ok.acceptance:.2f} {ok.seconds:.1f}s")
    assert ok.drafted_at_prompt > 0 and 0 < ok.acceptance < 1  # real drafts, real rejections
    assert ok.exact_max_diff is not None and ok.exact_max_diff < TOL and ok.passed
    bad = run_check(target, drafter, ids, SETTINGS["t1"], samples=400, horizon=2, seed=3, variant=DEFAULT_BROKEN, oracle=o)
    print(f"{method} {DEFAULT_BROKEN}: p={bad.p_value:.3g} exact={bad.exact_max_diff:.3g}")
    assert bad.exact_max_diff > 1e-3 and not bad.passed
