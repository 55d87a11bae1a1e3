"""Home: the idea in one paragraph, then generate with the chosen method and measure it."""

from __future__ import annotations

import streamlit as st

from specviz import SpecVizError
from specviz.teaching import lesson as LS
from specviz.app.model import device_name, get_target
from specviz.app.methods import method_label
from specviz.app.prompts import current_prompt, prompt_box
from specviz.app.session import TIMED_REPEATS, run_alternating
from specviz.app.sidebar import current_method_ok, page_setup
from specviz.app.state import lang, settings, tr
from specviz.viz import colored_text_html, legend_html, token_sources, tree_figure
from specviz.viz.round import committed_html

page_setup()
st.title(tr("home.title"))
st.markdown(tr("home.idea"))


@st.cache_resource(show_spinner=False)
def _recorded_round():
    """The lesson's recorded EAGLE-3 round: a real branching tree on screen before anything runs."""
    try:
        return LS.load_round("eagle3-greedy")
    except (OSError, ValueError, KeyError):
        return None


demo = _recorded_round()
if demo is not None:
    st.subheader(tr("home.demo_title"))
    d_tr = demo.trace
    st.markdown(tr("home.demo_lead", n=len(d_tr.nodes) - 1, d=max(n.depth for n in d_tr.nodes), acc=len(d_tr.accepted_nodes),
                   k=len(d_tr.committed)))
    st.plotly_chart(tree_figure(d_tr, lang()), key="home_demo_tree", config={"displaylogo": False})
    st.html(committed_html(d_tr, lang()))
    st.caption(tr("home.demo_caption", prompt=demo.spec["prompt"]))
    st.markdown(tr("home.demo_link"))
    st.divider()
    st.subheader(tr("home.try_title"))

target = get_target()
prompt = prompt_box("home")
ok, _ = current_method_ok()


def _rates(xs) -> str:
    """Every timed run's tokens/s, for the caption."""
    return ", ".join(f"{x:.0f}" for x in xs)


def _generate():
    s = settings()
    try:
        methods = [s["method"]] if s["method"] == "vanilla" else [s["method"], "vanilla"]
        text = tr("home.running_both", method=method_label(s["method"]), n=TIMED_REPEATS)
        bar = st.progress(0.0, text=text)
        runs = run_alternating(target, s, current_prompt("home"), methods,
                               progress=lambda n, total: bar.progress(min(1.0, n / total), text=text))
        (res, res_tps), (van, van_tps) = runs[s["method"]], runs["vanilla"]
        bar.empty()
    except SpecVizError as e:
        st.session_state["home_error"] = str(e)  # the previous result stays on screen
        return
    st.session_state.pop("home_error", None)
    st.session_state["home_result"] = {
        "method": s["method"],
        "greedy": float(s["temperature"]) == 0,
        "dtype": s["dtype"],
        "traces": res.traces,
        "text": res.text,
        "tau": res.tau,
        "tps": res.tokens_per_s,
        "tps_runs": res_tps,
        "vanilla_runs": van_tps,
        "tokens": len(res.tokens),
        "rounds": res.rounds,
        "seconds": res.seconds,
        "vanilla_tps": van.tokens_per_s,
        "vanilla_tokens": van.tokens,
        "identical": van.tokens == res.tokens,
        "draft_ms": 1000 * sum(tc.draft_time_s for tc in res.traces) / max(1, res.rounds),
    }
    # shared with the "Why it is free" page (its prediction uses the measured tau and draft cost)
    st.session_state["last_run"] = {"method": s["method"], "tau": res.tau, "draft_ms": st.session_state["home_result"]["draft_ms"]}


if st.button(tr("c.generate"), type="primary", disabled=target is None or not ok, key="home_generate"):
    if target is not None:
        _generate()

if st.session_state.get("home_error"):
    st.error(tr("c.error", err=st.session_state["home_error"]))

r = st.session_state.get("home_result")
if r:
    # what was accepted and why comes first; the speed (measured on a possibly busy machine) after it
    st.subheader(tr("home.result") + f" · {method_label(r['method'])}")
    sources = [src for _, src, _ in token_sources(r["traces"])]
    n_acc = sources.count("accepted")
    st.markdown(tr("home.accepted_lead", tau=r["tau"], acc=n_acc, n=len(sources), rest=len(sources) - n_acc))
    order = ["accepted", "bonus", "resampled", "greedy-correction", "vanilla"]
    st.html(legend_html(lang(), [x for x in order if x in set(sources)] or order[:3]))
    st.html(colored_text_html(r["traces"], lang()))
    st.caption(tr("home.legend"))
    if r["greedy"]:
        st.caption(tr("home.vanilla_same", same=tr("home.yes") if r["identical"] else tr("home.no")))
        if not r["identical"]:
            st.warning(tr("home.greedy_diff"))
    else:
        st.caption(tr("home.differs_note"))

    st.markdown(f"**{tr('home.speed')}**")
    c = st.columns(5)
    c[0].metric(tr("c.tau"), f"{r['tau']:.2f}")
    c[1].metric(tr("c.tokens_per_s"), f"{r['tps']:.1f}")
    c[2].metric(tr("c.vanilla_tps"), f"{r['vanilla_tps']:.1f}")
    c[3].metric(tr("c.speedup"), f"{r['tps'] / r['vanilla_tps']:.2f}x" if r["vanilla_tps"] else "–")
    c[4].metric(tr("c.rounds"), f"{r['rounds']}")
    st.caption(tr("home.speed_note", page=tr("nav.free"), n=len(r["tps_runs"]), runs=_rates(r["tps_runs"]),
                  van=_rates(r["vanilla_runs"])) + " · " + tr("c.measured_note", device=device_name())
               + f" · {r['dtype']} · {r['tokens']} tokens in {r['seconds']:.2f} s")
