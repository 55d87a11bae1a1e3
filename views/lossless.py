"""Losslessness: the exact check of one round leads, the sampling test backs it up; common bugs."""

from __future__ import annotations

import streamlit as st

from specviz import SpecVizError, lossless
from specviz.teaching import bugs
from specviz.app.gate import heavy_work
from specviz.app.methods import make_drafter, method_label, method_status
from specviz.methods import TOY_METHODS
from specviz.core.sampling import SamplingParams
from specviz.app.model import get_target
from specviz.app.prompts import prompt_ids
from specviz.app.session import run_generation
from specviz.app.sidebar import page_setup
from specviz.app.state import lang, settings, tr
from specviz.viz import figure_html, samples_hist_figure, show_token
from specviz.viz.compare import outcome_probability

page_setup()
L = lang()
st.title(tr("loss.title"))
st.markdown(tr("loss.intro"))

target = get_target()
if target is None:
    st.stop()
LOSS_PROMPTS = ["Tell me a story.", "Write a random word.", "Name a colour."]
EXACT_TOL = 1e-6  # the exact check passes when max |P_spec - P_target| is at most this (rounding)
ALPHA = 1e-3  # the sampling test fails when the chi-square p-value is at or below this
if "loss_prompt" not in st.session_state:
    st.session_state["loss_prompt"] = LOSS_PROMPTS[0]
st.text_area(tr("c.prompt"), key="loss_prompt", height=70, max_chars=4000, persist_state="session")
st.caption(tr("loss.prompt_hint"))

TOY = list(TOY_METHODS)  # the check's weightless toy drafters, from the one registry
s = settings()
engine_methods = [m for m in ("eagle3", "eagle2", "eagle1", "medusa", "sps", "pld") if method_status(m, s["dtype"])[0]]
options = engine_methods + TOY

# deep link: ?variant=NAME&check_method=M opens the page on a bug
if "loss_variant" not in st.session_state and st.query_params.get("variant") in bugs.VARIANTS:
    st.session_state["loss_variant"] = st.query_params["variant"]
if "loss_method" not in st.session_state and st.query_params.get("check_method") in options:
    st.session_state["loss_method"] = st.query_params["check_method"]

# the sampling settings start from the sidebar's; a greedy sidebar gets T = 0.7 here, said aloud
if "loss_temp" not in st.session_state:
    side_t = float(s["temperature"])
    st.session_state["loss_temp"] = side_t if side_t > 0 else 0.7
    st.session_state["loss_topk"] = int(s["top_k"])
    st.session_state["loss_topp"] = float(s["top_p"])

c = st.columns(4)
method = c[0].selectbox(tr("loss.method"), options, format_func=method_label, key="loss_method")
temperature = c[1].slider(tr("sb.temperature"), 0.0, 2.0, step=0.05, key="loss_temp")
top_k = c[2].number_input(tr("sb.top_k"), 0, 1000, key="loss_topk", disabled=temperature == 0)
top_p = c[3].slider(tr("sb.top_p"), 0.05, 1.0, step=0.05, key="loss_topp", disabled=temperature == 0)
here = (float(temperature), int(top_k), float(top_p))
side = (float(s["temperature"]), int(s["top_k"]), float(s["top_p"]))
if here != side:
    st.info(tr("loss.settings_differ", t=here[0], k=here[1] or "–", p=here[2], st=side[0], sk=side[1] or "–", sp=side[2]))
else:
    st.caption(tr("loss.settings_same"))
c = st.columns(4)
samples = c[0].select_slider(tr("loss.samples"), [200, 500, 1000, 2000, 5000, 10000], value=1000, key="loss_n")
horizon = c[1].select_slider(tr("loss.horizon"), [1, 2, 3], value=2, key="loss_h")
seed = c[2].number_input(tr("sb.seed"), 0, 2**31 - 1, 0, key="loss_seed")
variant = c[3].selectbox(tr("loss.variant"), bugs.VARIANTS, key="loss_variant",
                         format_func=lambda v: tr("loss.correct") if v == "correct" else f"✗ {bugs.explain(v, L)['title']}")
if variant != "correct":
    e = bugs.explain(variant, L)
    st.warning(f"**{e['title']}** (`{variant}`) — {e['explain']}\n\n*{e['visible_when']}*")
st.caption(tr("c.stop_hint"))


def _params():
    return SamplingParams(temperature=float(temperature), top_k=int(top_k), top_p=float(top_p))


def _drafter_for(m, oracle):
    """The check's own drafter by name (toy drafters, engine drafters with their shipped heads);
    an engine drafter from the app's registry where this build's check does not know the name."""
    try:
        return lossless.make_drafter(m, oracle)
    except SpecVizError:
        if m in TOY:
            raise
        return make_drafter(m, target, settings())


def _expected(oracle, outcomes):
    """Exact target probability of each outcome (product of the oracle's warped p along it)."""
    return {o: outcome_probability(o, oracle.p) for o in outcomes}


def run():
    st.session_state.pop("loss_error", None)
    try:
        text = st.session_state.get("loss_prompt", "")
        if not text.strip():
            raise SpecVizError(tr("c.empty_prompt"))
        params = _params()
        if params.greedy:
            s2 = dict(settings(), temperature=0.0, seed=int(seed))
            if method in TOY:
                raise SpecVizError(tr("loss.greedy_toy"))
            a = run_generation(target, s2, text, method)
            b = run_generation(target, s2, text, "vanilla")
            st.session_state["loss_result"] = {"greedy": True, "same": a.tokens == b.tokens, "n": len(a.tokens), "method": method}
            return
        ids = prompt_ids(target, text)
        runs, expected = {}, {}
        todo = ["correct"] if variant == "correct" else ["correct", variant]
        bar = st.progress(0.0)
        with heavy_work():
            oracle = lossless.TargetOracle(target, ids, params)
            drafter = _drafter_for(method, oracle)
            for k, v in enumerate(todo):
                def prog(done, total, k=k):
                    bar.progress(min(1.0, (k + done / max(1, total)) / len(todo)), text=f"{v}: {done}/{total}")

                runs[v] = lossless.run_check(target, drafter, ids, params, samples=int(samples), horizon=int(horizon),
                                             seed=int(seed), variant=v, progress=prog, oracle=oracle, alpha=ALPHA,
                                             exact_tol=EXACT_TOL)
                expected[v] = _expected(oracle, set(runs[v].vanilla) | set(runs[v].speculative))
        bar.empty()
        st.session_state["loss_result"] = {"greedy": False, "runs": runs, "expected": expected, "method": method,
                                           "variant": variant, "sampling": here}
    except SpecVizError as e:
        st.session_state["loss_error"] = str(e)


if st.button(tr("loss.run"), type="primary", key="loss_run"):
    run()

if st.session_state.get("loss_error"):
    st.error(tr("c.error", err=st.session_state["loss_error"]))


def show_histogram(v, r, expected):
    tok = target.tokenizer

    def outcome_label(o):
        return "".join(show_token(tok.token_text(x)) for x in o)[:24]

    van, spec = r.vanilla, r.speculative
    keys = sorted(set(van) | set(spec), key=lambda o: -(van.get(o, 0) + spec.get(o, 0)))
    top, rest = keys[:25], keys[25:]
    labels = [outcome_label(o) for o in top] + ([tr("loss.other", n=len(rest))] if rest else [])
    cv = [van.get(o, 0) for o in top] + ([sum(van.get(o, 0) for o in rest)] if rest else [])
    cs = [spec.get(o, 0) for o in top] + ([sum(spec.get(o, 0) for o in rest)] if rest else [])
    exact = [expected.get(o, 0.0) for o in top] + ([max(0.0, 1 - sum(expected.get(o, 0.0) for o in top))] if rest else [])
    seen, uniq = {}, []
    for lab in labels:  # unique labels for the x axis
        seen[lab] = seen.get(lab, 0) + 1
        uniq.append(lab if seen[lab] == 1 else f"{lab} [{seen[lab]}]")
    fig = samples_hist_figure(uniq, {tr("loss.vanilla"): cv, tr("loss.spec"): cs}, L, expected=exact)
    st.plotly_chart(fig, key=f"loss_hist_{v}", config={"displaylogo": False})
    st.caption(tr("loss.markers"))
    st.download_button(tr("c.download_html"), lambda fig=fig: figure_html(fig), file_name=f"lossless_{v}.html",
                       mime="text/html", key=f"dl_loss_{v}")


res = st.session_state.get("loss_result")
if res and res["greedy"]:
    st.info(tr("loss.greedy_note"))
    (st.success if res["same"] else st.error)(tr("loss.greedy_identical", same=tr("home.yes") if res["same"] else tr("home.no"))
                                              + " " + tr("loss.greedy_count", n=res["n"], method=method_label(res["method"])))
elif res:
    runs = res["runs"]
    st.caption(tr("loss.ran_with", method=method_label(res["method"]), t=res["sampling"][0], k=res["sampling"][1] or "–",
                  p=res["sampling"][2]))
    cols = st.columns(len(runs))
    for col, (v, r) in zip(cols, runs.items()):
        with col:
            name = tr("loss.correct") if v == "correct" else f"✗ {bugs.explain(v, L)['title']}"
            st.markdown(f"#### {name}")
            # 1. the exact check decides
            st.markdown(f"**{tr('loss.exact')}**")
            if r.exact_max_diff is None:
                st.warning(tr("loss.exact_none"))
            elif r.drafted_at_prompt == 0:
                st.info(tr("loss.exact_trivial", d=r.exact_max_diff, tol=EXACT_TOL))
            else:
                ok = r.exact_max_diff <= EXACT_TOL
                (st.success if ok else st.error)(
                    tr("loss.exact_verdict", d=r.exact_max_diff, tol=EXACT_TOL, k=r.exact_k, n=r.drafted_at_prompt,
                       v=tr("loss.pass") if ok else tr("loss.fail")))
            # 2. the sampling test backs it up
            st.markdown(f"**{tr('loss.empirical')}**")
            ok = r.p_value > ALPHA
            (st.success if ok else st.error)(tr("loss.chi2_verdict", p=r.p_value, a=ALPHA, chi2=r.chi2, dof=r.dof,
                                                 v=tr("loss.pass") if ok else tr("loss.fail")))
            st.caption(tr("loss.chi2_note", a=ALPHA))
            st.caption(tr("loss.run_stats", tau=r.tau, acc=r.acceptance, n=r.samples, s=r.seconds))
            with st.expander(tr("loss.tv_title")):
                st.markdown(tr("loss.tv_explain", tv=r.tv, bound=r.tv_bound, bins=r.bins, n=r.samples))
            for note in r.notes:
                st.caption("ℹ️ " + note)
            show_histogram(v, r, res["expected"].get(v, {}))
            verdict = r.passed
            st.markdown(f"**{tr('loss.overall')}: {tr('loss.pass') if verdict else tr('loss.fail')}**")

st.divider()
st.subheader(tr("loss.bug_zoo"))
for v in bugs.VARIANTS:
    if v == "correct":
        continue
    e = bugs.explain(v, L)
    with st.expander(f"✗ {e['title']} · `{v}`"):
        st.markdown(e["explain"])
        st.caption(e["visible_when"])
