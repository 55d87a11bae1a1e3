"""The bug zoo: every broken rule is caught, exactly and empirically, where its page says it shows;
and its explanations exist in both languages."""

import re

import pytest
import torch

from specviz.teaching.bugs import BUGS, DEFAULT_BROKEN, POLICIES, VARIANTS, explain, get_policy
from specviz.i18n import S
from specviz.lossless import PrefixModel, TargetOracle, exact_max_diff, make_drafter, run_check
from specviz.core.sampling import SamplingParams, probs
from specviz.core.verify import verify

NAMES = ["unwarped-bonus", "greedy-draft", "raw-logit-q", "scalar-residual", "resample-from-p", "no-rejection"]
CJK = re.compile(r"[\u4e00-\u9fff]")


def test_zoo_names_and_explanations():
    assert list(POLICIES) == NAMES and VARIANTS == ["correct", *NAMES]
    assert DEFAULT_BROKEN == "resample-from-p"
    for name in NAMES:
        # the bilingual text lives in specviz.i18n under the keys BUGS names
        en, zh = explain(name, "en"), explain(name, "zh")
        assert set(BUGS[name]) == {"title", "explain", "when"} and all(k in S for k in BUGS[name].values())
        assert set(en) == set(zh) == {"title", "explain", "visible_when"}
        assert len(en["explain"]) > 200 and CJK.search(zh["explain"]) and CJK.search(zh["title"])
        assert CJK.search(zh["visible_when"]) and not CJK.search(en["visible_when"])
        assert not CJK.search(en["explain"]) and not CJK.search(en["title"])


def model(seed, V, widths, sampled, params, scale=2.0):
    cache = {}

    def t(kind, h):
        if (kind, h) not in cache:
            g = torch.Generator().manual_seed(hash((seed, kind) + h) % (2**31))
            cache[(kind, h)] = torch.randn(V, generator=g) * scale
        return cache[(kind, h)]

    return PrefixModel(
        p_fn=lambda h: probs(t(1, h), params),
        q_fn=lambda h: probs(t(2, h), params),
        widths=widths,
        sampled=sampled,
        p_raw_fn=lambda h: t(1, h).softmax(-1),
        q_raw_fn=lambda h: t(2, h).softmax(-1),
    )


T1 = SamplingParams(temperature=1.0)
WARPED = SamplingParams(temperature=0.5, top_k=3)

# (variant, widths, sampled, params, k): a case chosen to expose the bug
EXPOSING = [
    ("unwarped-bonus", [1], True, WARPED, 2),  # bonus = 2nd token after a full path of depth 1
    ("greedy-draft", [1], False, T1, 1),  # argmax draft verified with min(1, p/q)
    ("raw-logit-q", [1], True, WARPED, 1),  # q_raw != q only when warping does something
    ("scalar-residual", [1], True, T1, 1),
    ("resample-from-p", [1], True, T1, 1),
    ("resample-from-p", [2, 1], False, T1, 1),
    ("no-rejection", [1, 1], False, T1, 1),
]


@pytest.mark.parametrize("variant,widths,sampled,params,k", EXPOSING)
def test_each_bug_fails_the_exact_check(variant, widths, sampled, params, k):
    m = model(4, 6, widths, sampled, params)
    assert exact_max_diff(m, params=params, k=k) < 1e-9  # the correct rule on the same case
    assert exact_max_diff(m, params=params, k=k, variant=variant) > 1e-3


# (variant, widths, sampled, params, k): where the page says the bug is invisible
INVISIBLE = [
    ("unwarped-bonus", [1], True, T1, 2),  # T = 1, no top-k/top-p: raw == warped
    ("raw-logit-q", [1, 1], True, T1, 2),
    ("greedy-draft", [2, 1], True, WARPED, 2),  # drafts really were sampled: no change
    ("scalar-residual", [2, 1], False, WARPED, 2),  # deterministic drafts: one-hot q, same residual
]


@pytest.mark.parametrize("variant,widths,sampled,params,k", INVISIBLE)
def test_bugs_are_invisible_where_documented(variant, widths, sampled, params, k):
    m = model(4, 6, widths, sampled, params)
    assert exact_max_diff(m, params=params, k=k, variant=variant) < 1e-9


def test_no_rejection_also_breaks_greedy():
    m = model(4, 6, [1], False, SamplingParams(temperature=0.0))
    tree, p, _ = m.draw_tree()
    tree.tokens[1] = (int(p[0].argmax()) + 1) % 6  # a wrong draft
    r = verify(tree, p, SamplingParams(temperature=0.0), None, policy=get_policy("no-rejection"))
    assert r.accepted == [1]
    assert verify(tree, p, SamplingParams(temperature=0.0), None).accepted == []


# ------------------------------------------------------------------------------ real model
PROMPT = "I flipped a coin and it landed on"
T07 = SamplingParams(temperature=0.7, top_p=0.9)
K20 = SamplingParams(temperature=1.0, top_k=20)

# variant, settings, method, toy options: where each bug shows on the real model
REAL = [
    ("unwarped-bonus", T07, "toy-sps", {}),
    ("greedy-draft", K20, "toy-topk", {}),
    ("raw-logit-q", T07, "toy-sps", {"scale": 1.5}),
    ("scalar-residual", T1, "toy-sps", {}),
    ("resample-from-p", T1, "toy-sps", {}),
    ("no-rejection", K20, "toy-topk", {}),
]


@pytest.fixture(scope="module")
def oracles(target):
    ids = target.tokenizer.encode(PROMPT)
    cache = {}

    def get(params):
        if params not in cache:
            cache[params] = TargetOracle(target, ids, params)
        return cache[params]

    return target, ids, get


@pytest.mark.slow
@pytest.mark.parametrize("variant,params,method,opts", REAL, ids=[r[0] for r in REAL])
def test_each_bug_fails_the_statistical_check_on_the_real_model(oracles, variant, params, method, opts):
    target, ids, get = oracles
    o = get(params)
    r = run_check(target, make_drafter(method, o, **opts), ids, params, samples=1200, horizon=3, seed=4,
                  variant=variant, oracle=o)
    print(f"{variant}: p={r.p_value:.3g} tv={r.tv:.3f} exact={r.exact_max_diff:.3g} (k={r.exact_k}) {r.seconds:.1f}s")
    assert r.p_value < 1e-6 and not r.passed
