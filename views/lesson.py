"""Lesson: eleven steps of speculative decoding over recorded real rounds (specviz.teaching.lesson; step 11's
batched round: specviz.teaching.lesson_batch).

Nothing here runs the model unless a step's "Run it live" button is pressed: the recordings in
assets/lessons/ are real engine rounds, re-checked by tests/test_lesson.py.
"""

from __future__ import annotations

import streamlit as st

from specviz import SpecVizError
from specviz.teaching import lesson as LS
from specviz.teaching import lesson_batch as LB
from specviz.bench import measured
from specviz.bench.results import crossover_sentence, crossover_summary, report_caption
from specviz.i18n import t
from specviz.app.clicks import clicked_node
from specviz.app.gate import heavy_work
from specviz.app.model import load_shared_target
from specviz.app.sidebar import page_setup
from specviz.app.state import lang, tr
from specviz.runtime.machine import numerics as machine_numerics
from specviz.viz import EXTRA_ID, ancestors, node_pq_panel, show_token, tree_figure
from specviz.viz.batch import batch_mask_figure, batch_trees_figure, throughput_figure
from specviz.viz.lesson import bottleneck_figure, pass_ratio, predicted_rows
from specviz.viz.mask import attention_figure
from specviz.viz.round import committed_html, extra_dist_figure, extra_title, round_table, rule_caption, walk_u_figure

page_setup()
L = lang()
CFG = {"displaylogo": False}

# step -> the recording it shows (step 1 draws the cost curve; step 8 shows all three EAGLE trees;
# step 11 shows the batched recording of specviz.teaching.lesson_batch, loaded apart: None here)
STEPS = (
    ("s1", "eagle3-greedy"),
    ("s2", "eagle3-greedy"),
    ("s3", "eagle3-greedy"),
    ("s4", "eagle3-greedy"),
    ("s5", "eagle3-sampled-reject"),
    ("s6", "eagle3-sampled-reject"),
    ("s7", "eagle3-sampled-bonus"),
    ("s8", "eagle3-greedy"),
    ("s9", "eagle3-greedy"),
    ("s10", "eagle3-60"),
    ("s11", None),
)
N = len(STEPS)


@st.cache_resource(show_spinner=False)
def recordings():
    return LS.load_rounds(), LS.load_machine()


@st.cache_resource(show_spinner=False)
def batch_recording():
    try:
        return LB.load()
    except (OSError, ValueError, KeyError, TypeError):
        return None


rounds, machine = recordings()
st.title(tr("lesson.title"))
st.caption(tr("lesson.intro"))
if not rounds or machine is None:
    st.error(tr("lesson.missing"))
    st.stop()

if "lesson_step" not in st.session_state:  # a deep link such as /lesson?step=5 opens that step
    try:
        st.session_state["lesson_step"] = min(N, max(1, int(st.query_params.get("step", 1))))
    except (TypeError, ValueError):
        st.session_state["lesson_step"] = 1


def _go(delta: int):
    st.session_state["lesson_step"] = min(N, max(1, st.session_state["lesson_step"] + delta))


nav = st.columns([1, 1, 4])
nav[0].button(tr("lesson.prev"), on_click=_go, args=(-1,), disabled=st.session_state["lesson_step"] <= 1, key="lesson_prev")
nav[1].button(tr("lesson.next"), on_click=_go, args=(1,), disabled=st.session_state["lesson_step"] >= N, key="lesson_next", type="primary")
nav[2].selectbox(tr("lesson.jump"), list(range(1, N + 1)), key="lesson_step", label_visibility="collapsed",
                 format_func=lambda i, _lang=L: f"{i}. {t('lesson.' + STEPS[i - 1][0] + '.title', _lang)}")
step = st.session_state["lesson_step"]
sid, key = STEPS[step - 1]
rec = rounds.get(key) if key else None
brec = batch_recording() if sid == "s11" else None

st.caption(tr("lesson.step_of", i=step, n=N))
st.header(tr(f"lesson.{sid}.title"))
st.progress(step / N)


# ---------------------------------------------------------------- live runs
def _live_state() -> dict:
    return st.session_state.setdefault("lesson_live", {})


def recorded_target():
    """The model the recordings were made with (the default model in fp32), whatever the sidebar
    has loaded: a replay in another precision or of another model could not match."""
    with st.spinner("…"):
        return load_shared_target("fp32", None)


def run_live():
    """Replay this step's recording through the engine now; step 1 measures the forward curve."""
    try:
        target = recorded_target()
        if target is None:
            return
        with st.spinner("…"), heavy_work():
            if sid == "s1":
                curve = LS.forward_curve(target.model, sizes=(1, 4, 16, 25, 64), context=300, repeats=3)
                _live_state()[sid] = {"curve": {str(k): 1000 * v for k, v in curve.items()}}
            elif sid == "s11":
                _live_state()[sid] = replay_batch(target)
            else:
                # exact where this CPU computes as the recording's did; elsewhere (AVX2 vs AVX-512)
                # probabilities may move within specviz.runtime.agreement's tolerance, tokens and draws may not
                live, check = LS.check_replay(target, rec)
                _live_state()[sid] = {"trace": live, "exact": check.exact, "diff": check.differences}
    except Exception as e:  # noqa: BLE001 - shown on the page, the recording stays on view
        _live_state()[sid] = {"error": f"{type(e).__name__}: {e}" if not isinstance(e, SpecVizError) else str(e)}


def replay_batch(target) -> dict:
    """Step 11: the batched round again, every user's trace judged against the recording as
    `LS.compare_replay` does (exact, or to the agreement policy's tolerance on another CPU)."""
    rnd, check = LB.check_replay(target, brec)
    return {"batch": True, "exact": check.exact, "diff": check.differences,
            "ms": dict(d=1000 * rnd.draft_s, v=1000 * rnd.pass_s)}


live = _live_state().get(sid)
trace = rec.trace if rec else None
if live and live.get("trace") is not None:
    trace = live["trace"]


# ---------------------------------------------------------------- shared pieces
def tree_method_text(r) -> str:
    tree = r.tree
    if tree.get("kind") == "static":
        return tr("lesson.tree_static", n=tree["nodes"], d=max(n.depth for n in r.trace.nodes))
    return tr("lesson.tree_dynamic", n=tree["nodes"], d=tree["depth"], k=tree["top_k"])


def provenance(r):
    sha = ", ".join(f"`{k} sha256 {v[:12]}`" for k, v in r.heads.items()) or "–"
    T = r.spec["temperature"]
    rule = tr("rule." + r.trace.rule).split(":")[0] + (f", T = {T}" if T else "")
    st.caption(tr("lesson.recorded", method=tr("m." + r.spec["method"]), tree=tree_method_text(r), rule=rule, seed=r.seed,
                  r=r.round_index + 1, prompt=r.spec["prompt"], cpu=r.recorded.get("cpu", "?"), utc=r.recorded.get("utc", "?"), sha=sha))


def before_and_after(tr_):
    if rec.context_text.strip():
        st.markdown(tr("lesson.written_so_far", text=rec.context_text.strip().replace("\n", " ↵ ")[-160:]))
    st.markdown(tr("lesson.this_round"))
    st.html(committed_html(tr_, L))


def tree_chart(tr_, chart_key, reveal=True, selected=None, height=None, show_p=None):
    fig = tree_figure(tr_, L, selected=selected, reveal=reveal, height=height, show_p=show_p)
    st.plotly_chart(fig, key=chart_key, on_select="rerun", selection_mode="points", config=CFG)


sfx = "_live" if live and live.get("trace") is not None else ""


def pq_beside_table(tr_, sel, stage: str, chart_key: str):
    """The selected node's p-vs-q bars (q only while drafting) beside the round table at `stage`."""
    cols = st.columns([2, 3])
    with cols[0]:
        shown = sel if sel is not None and sel != EXTRA_ID else 0
        title, pq = node_pq_panel(tr_, shown, L, reveal=stage != "draft")
        st.markdown(title)
        st.plotly_chart(pq, key=f"{chart_key}_{shown}{sfx}", config=CFG)
    with cols[1]:
        st.dataframe(round_table(tr_, L, stage=stage), hide_index=True, width="stretch", height=380)


# ---------------------------------------------------------------- the steps
if sid == "s1":
    curve = dict(machine["forward_ms"])
    if live and live.get("curve"):
        curve = live["curve"]
        st.info(tr("lesson.live_curve", ms=", ".join(f"N={k}: {v:.1f} ms" for k, v in curve.items())))
    c = {int(k): float(v) for k, v in curve.items()}
    t1, t25 = c[1], c[1] * pass_ratio(c, 25)
    st.markdown(tr("lesson.s1.body", t1=t1, t25=t25, r25=t25 / t1, n25=25 * t1))
    st.plotly_chart(bottleneck_figure(c, L), key=f"l_curve{sfx}", config=CFG)
    src = machine.get("forward_source") or {}
    curve_machine = src.get("machine") or {}  # the machine the curve was measured on, not the lesson's recording machine
    st.caption(tr("lesson.curve_src", cpu=curve_machine.get("cpu", "?"), th=curve_machine.get("threads", "?"),
                  file=src.get("file", "?"), date=src.get("date", "?"),
                  w=tr("lesson.w_blocks") if src.get("weights") == "blocks" else tr("lesson.w_dense")))

elif sid == "s2":
    d = max(n.depth for n in trace.nodes)
    st.markdown(tr("lesson.s2.body", d=d, n=len(trace.nodes) - 1))
    sel = clicked_node(f"l_tree2{sfx}")
    tree_chart(trace, f"l_tree2{sfx}", reveal=False, selected=sel)
    pq_beside_table(trace, sel, "draft", "l_pq2")
    provenance(rec)

elif sid == "s3":
    st.markdown(tr("lesson.s3.body", n=len(trace.nodes)))
    sel = clicked_node(f"l_tree3{sfx}")
    sel = sel if sel is not None and 0 <= sel < len(trace.nodes) else None
    cols = st.columns([2, 3])
    with cols[0]:
        tree_chart(trace, f"l_tree3{sfx}", reveal=False, selected=sel, height=None)
        st.caption(tr("lesson.click"))
        if sel is not None:
            anc = ancestors(trace, sel)
            st.markdown(tr("lesson.selected", id=sel, tok=show_token(trace.nodes[sel].text),
                           path=" → ".join(f"#{i} {show_token(trace.nodes[i].text)}" for i in anc)))
    with cols[1]:
        st.plotly_chart(attention_figure(trace, L, selected=sel, prefix_tail=rec.prefix_tail), key=f"l_mask{sfx}_{sel}", config=CFG)
    provenance(rec)

elif sid == "s4":
    c = {int(k): float(v) for k, v in machine["forward_ms"].items()}
    r_n = pass_ratio(c, len(trace.nodes))
    st.markdown(tr("lesson.s4.body", ms=r_n * c[min(c)], r=r_n, n=len(trace.nodes)))
    sel = clicked_node(f"l_tree4{sfx}")
    tree_chart(trace, f"l_tree4{sfx}", reveal=False, selected=sel, show_p=True)
    pq_beside_table(trace, sel, "verify", "l_pq4")
    provenance(rec)

elif sid in ("s5", "s6", "s7"):
    st.markdown(tr(f"lesson.{sid}.body", T=rec.spec["temperature"]))
    tree_chart(trace, f"l_tree{sid}{sfx}")
    cols = st.columns([3, 2])
    with cols[0]:
        if sid == "s5":
            st.plotly_chart(walk_u_figure(trace, L), key=f"l_walk{sfx}", config=CFG)
        else:
            st.markdown(extra_title(trace, L))
            st.plotly_chart(extra_dist_figure(trace, L), key=f"l_extra{sid}{sfx}", config=CFG)
    with cols[1]:
        before_and_after(trace)
    st.caption(rule_caption(trace, L))
    st.dataframe(round_table(trace, L, stage="accept"), hide_index=True, width="stretch", height=300)
    provenance(rec)

elif sid == "s8":
    st.markdown(tr("lesson.s8.body"))
    for k in ("eagle1-greedy", "eagle2-greedy", "eagle3-greedy"):
        r = rounds.get(k)
        if r is None:
            continue
        st.markdown(f"**{tr('m.' + r.spec['method'])}** · {tree_method_text(r)} · "
                    + tr("lesson.tau_round", c=len(r.trace.committed), a=len(r.trace.accepted_nodes)))
        st.plotly_chart(tree_figure(r.trace, L), key=f"l_cmp_{k}", config=CFG)
    st.markdown(tr("lesson.s8.more"))
    provenance(rec)

elif sid == "s9":
    ll = machine["lossless"]
    st.markdown(tr("lesson.s9.body", n=ll["new_tokens"], same=tr("lesson.s9.same" if ll["identical"] else "lesson.s9.differ"),
                   r=ll["eagle3_rounds"]))
    st.code(ll["text"], language=None)
    van, got = ll["vanilla"], list(trace.committed)
    at_ = next((i for i in range(len(van) - len(got) + 1) if van[i:i + len(got)] == got), None)
    st.markdown(tr("lesson.s9.round_same", a=at_ + 1, b=at_ + len(got)) if at_ is not None else tr("lesson.s9.round_beyond"))
    tree_chart(trace, f"l_tree9{sfx}")
    provenance(rec)

elif sid == "s10":
    c = {int(k): float(v) for k, v in machine["forward_ms"].items()}
    st.markdown(tr("lesson.s10.body", r25=pass_ratio(c, 25), r60=pass_ratio(c, 60), c60=len(trace.committed)))
    rows = predicted_rows([r for r in rounds.values()], c, L)
    st.dataframe(rows, hide_index=True, width="stretch")
    tree_chart(trace, f"l_tree10{sfx}")
    provenance(rec)

elif sid == "s11":
    if brec is None:
        st.error(tr("batch.round_missing"))
    else:
        st.markdown(tr("lesson.s11.body", n=len(brec.traces), rows=brec.pass_rows, ms=brec.pass_ms,
                       sizes=" + ".join(str(len(x.nodes)) for x in brec.traces)))
        titles = [tr("batch.tree_title", user=tr("batch.user", n=i + 1), c=len(x.committed)) for i, x in enumerate(brec.traces)]
        st.plotly_chart(batch_trees_figure(brec.traces, L, titles), key="l_batch_trees", config=CFG)
        st.markdown(f"**{tr('batch.mask_title')}**")
        st.plotly_chart(batch_mask_figure(brec.traces, L), key="l_batch_mask", config=CFG)
        shipped = next((r for r in measured.shipped_batch_results() if not r["gpu"]), None)
        if shipped is not None:
            cross = crossover_summary(shipped["by_batch"])
            st.markdown(tr("lesson.s11.curve") + " " + crossover_sentence(shipped, L))
            st.plotly_chart(throughput_figure(shipped["by_batch"], L, cross["b"] if cross else None, shipped.get("trees")),
                            key="l_batch_curve", config=CFG)
            st.caption(report_caption(shipped, L))
        st.markdown(tr("lesson.s11.more"))
        st.caption(tr("batch.round_caption", r=brec.spec["round_index"] + 1, m=tr("m." + brec.spec["method"]),
                      cpu=brec.recorded.get("cpu", "?"), utc=brec.recorded.get("utc", "?")))

# ---------------------------------------------------------------- run it live
st.divider()
if st.button(tr("lesson.run_live"), help=tr("lesson.run_live_help"), key=f"lesson_live_{sid}"):
    run_live()
    st.rerun()
if live and live.get("error"):
    st.error(tr("c.error", err=live["error"]))
if live and (live.get("trace") is not None or live.get("batch")):
    if live.get("batch"):
        ms, recorded_on = live["ms"], brec.recorded
    else:
        ms, recorded_on = dict(d=1000 * live["trace"].draft_time_s, v=1000 * live["trace"].verify_time_s), rec.recorded
    if not live["diff"]:
        if live.get("exact"):
            st.success(tr("lesson.live_same", **ms))
        else:
            st.success(tr("lesson.live_close", rec=recorded_on.get("numerics", "?"), now=machine_numerics(), **ms))
    else:
        st.error(tr("lesson.live_differs", diff="; ".join(live["diff"][:4])))
    if not live.get("batch"):
        st.caption(tr("lesson.live_showing"))
