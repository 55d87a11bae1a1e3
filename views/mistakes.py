"""Spot the mistake: the student files a mistake under a class, then runs it beside the correct engine."""

from __future__ import annotations

import streamlit as st

from specviz import SpecVizError
from specviz.app.gate import heavy_work
from specviz.app.model import get_target
from specviz.app.prompts import prompt_ids
from specviz.app.sidebar import page_setup
from specviz.app.state import lang, tr
from specviz.i18n import t
from specviz.mistakes import CLASSES, MISTAKES, run_case
from specviz.mistakes.run import vanilla_run
from specviz.viz.mistakes import evidence_rows, verdict

page_setup()
L = lang()
st.title(tr("mis.title"))
st.markdown(tr("mis.intro"))
st.markdown(tr("mis.classes"))

target = get_target()
if target is None:
    st.stop()

DEFAULT_PROMPT = "Write a Python function that returns the factorial of n."
answers: dict = st.session_state.setdefault("mis_answers", {})  # case -> the class the student picked
results: dict = st.session_state.setdefault("mis_results", {})  # case -> CaseResult of its last run

names = [m.name for m in MISTAKES]
if "mis_case" not in st.session_state and st.query_params.get("case") in names:
    st.session_state["mis_case"] = st.query_params["case"]
# labels bound to this run's language (a format_func is also called outside the run, e.g. by AppTest)
case = st.selectbox(tr("mis.pick_case"), names, format_func=lambda n, lang=L: t(f"mis.{n}.title", lang), key="mis_case")
mistake = next(m for m in MISTAKES if m.name == case)

st.caption(tr(f"mis.drafter.{mistake.drafter}"))
st.markdown(tr(f"mis.{case}.desc"))
st.markdown(f"**{tr('mis.pseudo')}**")
st.code(tr(f"mis.{case}.code"), language="python")
if mistake.zoo:
    st.caption(tr("mis.zoo_link") + f" ([→](/lossless?variant={mistake.zoo}&check_method=sps))")

c = st.columns([3, 1])
prompt = c[0].text_input(tr("mis.prompt"), value=DEFAULT_PROMPT, max_chars=2000, key="mis_prompt")
n_new = c[1].number_input(tr("mis.tokens"), 8, 64, 32, step=8, key="mis_tokens")

guess = st.radio(tr("mis.your_guess"), CLASSES, index=None, format_func=lambda k, lang=L: t(f"mis.class.{k}", lang),
                 key=f"mis_guess_{case}", horizontal=True, disabled=case in answers)


def run() -> None:
    """Run the case (and vanilla, once per prompt and length: the output every run is held to)."""
    st.session_state.pop("mis_error", None)
    try:
        ids = prompt_ids(target, prompt)
        key = (tuple(ids), int(n_new))
        with heavy_work(), st.spinner(tr("mis.running")):
            ref = st.session_state.get("mis_reference")  # (prompt and length, vanilla's run on them)
            if ref is None or ref[0] != key:
                ref = (key, vanilla_run(target, ids, int(n_new)))
            result = run_case(target, case, ids, int(n_new), vanilla=ref[1])
            st.session_state["mis_reference"] = ref
        results[case] = result
    except SpecVizError as e:
        st.session_state["mis_error"] = str(e)


first_try = case not in answers
if first_try:
    if st.button(tr("mis.submit"), type="primary", disabled=guess is None, key="mis_submit"):
        answers[case] = guess
        run()
        st.rerun()  # draw the page as answered: "Run it again" instead of the submit button
elif st.button(tr("mis.run_again"), key="mis_again"):
    run()

if st.session_state.get("mis_error"):
    st.error(tr("mis.error", e=st.session_state["mis_error"]))

if case in answers:
    cls = tr(f"mis.class.{mistake.kind}")
    if answers[case] == mistake.kind:
        st.success(tr("mis.right", cls=cls))
    else:
        st.warning(tr("mis.wrong", guess=tr(f"mis.class.{answers[case]}"), cls=cls))

result = results.get(case)
if result is not None:
    st.subheader(tr("mis.evidence"))
    st.table(evidence_rows(result, L))
    st.markdown(verdict(result, L))
    for note in result.notes:
        st.caption(tr(note))
    if result.baselines:
        b = result.baselines
        st.caption(tr("mis.baselines", cached=b["cached"].tokens_per_s, uncached=b["uncached"].tokens_per_s))
    with st.expander(tr("mis.outputs")):
        tok = target.tokenizer
        st.text(f"{tr('mis.vanilla_out')}: {tok.decode(result.vanilla.tokens, skip_special_tokens=True)[:200]}")
        st.text(f"{tr('mis.col.correct')}: {tok.decode(result.correct.tokens, skip_special_tokens=True)[:200]}")
        st.text(f"{tr('mis.col.mistaken')}: {tok.decode(result.mistaken.tokens, skip_special_tokens=True)[:200]}")
if case in answers:
    st.markdown(f"**{tr('mis.answer')}**: {tr(f'mis.{case}.why')}")

st.divider()
if answers:
    right = sum(answers[n] == next(m.kind for m in MISTAKES if m.name == n) for n in answers)
    st.markdown(tr("mis.tally", right=right, n=len(answers)))
    if st.button(tr("mis.reset_tally"), key="mis_reset"):
        answers.clear()
        results.clear()
        st.rerun()
else:
    st.caption(tr("mis.tally_none"))
