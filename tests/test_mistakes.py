"""Spot the mistake: every variant shows its class's signature on the real model, beside the correct engine.

breaks: the greedy output leaves vanilla's or the exact one-round check fails; slower: both pass and
tau, acceptance or work per token is worse; misreports: output and true tau are the correct run's and
only the printed figure differs. The correct engine passes every check in the same runs.
"""

from __future__ import annotations

import pytest

from specviz import SpecVizError
from specviz.i18n import S
from specviz.mistakes import CLASSES, MISTAKES, get, run_case, shown_class
from specviz.mistakes.run import EXACT_TOL, CaseResult, Printed, Run, vanilla_run
from specviz.viz.mistakes import evidence_rows, verdict

PROMPT = "Write a Python function that returns the factorial of n."  # long accepted chains: full-path rounds happen
N = 24


@pytest.fixture(scope="module")
def reference(target):
    ids = target.tokenizer.safe_chat_ids(PROMPT)
    return ids, vanilla_run(target, ids, N)


@pytest.mark.parametrize("name", [m.name for m in MISTAKES])
def test_each_mistake_shows_its_class_signature(target, reference, name):
    ids, van = reference
    r = run_case(target, name, ids, N, vanilla=van)
    kind = get(name).kind
    # the correct engine passes every check
    assert r.identical_correct
    assert r.exact_correct is None or r.exact_correct <= EXACT_TOL
    if kind == "breaks":
        assert not r.identical_mistaken or r.exact_mistaken > EXACT_TOL
    elif kind == "slower":
        assert r.identical_mistaken and (r.exact_mistaken is None or r.exact_mistaken <= EXACT_TOL)
        worse_accept = r.accept_mistaken is not None and r.accept_mistaken < r.accept_correct - 1e-6
        assert r.mistaken.tau < r.correct.tau or r.mistaken.work_per_token > r.correct.work_per_token or worse_accept
    else:
        assert r.mistaken.tokens == r.correct.tokens == van.tokens and r.mistaken.tau == r.correct.tau
        assert r.printed is not None and r.printed.printed != pytest.approx(r.printed.true, rel=1e-6)
    assert shown_class(r) == kind


def test_the_misreported_figures_are_the_formulas_on_the_correct_run(target, reference):
    ids, van = reference
    counted = run_case(target, "correction-counted", ids, N, vanilla=van)
    c = counted.correct
    assert counted.printed.true == pytest.approx(c.accepted / c.drafted)
    assert counted.printed.printed == pytest.approx((c.accepted + c.rounds) / c.drafted)
    over = run_case(target, "rate-over-k-plus-1", ids, N, vanilla=van)
    assert over.printed.true == pytest.approx(over.correct.tau) and over.printed.printed < 1 <= over.printed.true


def test_the_uncached_baseline_does_the_quadratic_work_it_is_blamed_for(target, reference):
    ids, van = reference
    r = run_case(target, "uncached-baseline", ids, 8, vanilla=vanilla_run(target, ids, 8))
    b = r.baselines
    assert b["uncached"].tokens == b["cached"].tokens  # the same output, decoded two ways
    n = len(b["uncached"].tokens)
    assert b["uncached"].target_tokens == sum(len(ids) + i for i in range(n)) - (len(ids) - 1)  # beyond the prefill
    assert b["cached"].target_tokens == n


def test_unknown_case_is_a_clear_error(target, reference):
    with pytest.raises(SpecVizError, match="Unknown mistake"):
        run_case(target, "nope", reference[0], 4)


def test_every_case_has_its_texts_in_both_languages():
    for m in MISTAKES:
        for part in ("title", "desc", "code", "why"):
            en, zh = S[m.key(part)]
            assert en and zh and en != zh, m.key(part)
    assert {m.kind for m in MISTAKES} == set(CLASSES)


def _result(**changes) -> CaseResult:
    van = Run([1, 2, 3, 4], 4, 1.0, 7)
    base = dict(name="x", kind="slower", vanilla=van, correct=Run([1, 2, 3, 4], 2, 0.5, 6, 8, 2),
                mistaken=Run([1, 2, 3, 4], 4, 1.0, 8, 16, 0), exact_correct=1e-9, exact_mistaken=2e-9)
    base.update(changes)
    return CaseResult(**base)


def test_evidence_rows_are_drawn_from_the_result():
    rows = evidence_rows(_result())
    assert [r["with the mistake"] for r in rows][:4] == ["yes", "2.0e-09 (pass)", "n/a", "1.00"]
    assert rows[3]["correct engine"] == "2.00"
    assert shown_class(_result()) == "slower" and "only slower" in verdict(_result())
    changed = _result(mistaken=Run([1, 2, 9, 4], 4, 1.0, 8))
    assert evidence_rows(changed)[0]["with the mistake"] == "no: differs from token 3"
    assert shown_class(changed) == "breaks"
    failing = _result(exact_mistaken=3e-4)
    assert evidence_rows(failing, "zh")[1]["带错误的版本"] == "3.0e-04（不通过）"
    same = _result(mistaken=Run([1, 2, 3, 4], 2, 0.5, 6), printed=Printed("acceptance", 0.75, 0.25))
    assert shown_class(same) == "misreports" and evidence_rows(same)[-1]["with the mistake"] == "0.750"
    assert shown_class(_result(mistaken=Run([1, 2, 3, 4], 2, 0.5, 6))) == "none"
