"""When speculation stops paying: batched serving. The shipped batched benchmark (throughput and
per-user speed against B, the crossover), one recorded batched round (the users' trees side by
side and the shared pass's block-diagonal mask), and a small live batched run on this machine."""

from __future__ import annotations

import streamlit as st

from specviz import SpecVizError
from specviz.teaching import lesson_batch
from specviz.bench import measured
from specviz.app.gate import heavy_work
from specviz.app.methods import make_drafter
from specviz.app.model import device_name, get_target
from specviz.app.sidebar import page_setup
from specviz.app.state import lang, sampling_params, settings, tr
from specviz.bench.live import measure
from specviz.bench.results import SPEC, crossover_sentence, crossover_summary, report_caption, tree_words
from specviz.examples import EXAMPLE_PROMPTS
from specviz.viz.batch import (batch_mask_figure, batch_table, batch_trees_figure, method_label, per_user_figure,
                               ratio_figure, throughput_figure)
from specviz.viz.round import committed_html

page_setup()
L = lang()
CFG = {"displaylogo": False}
LIVE_TOKENS = 24
st.title(tr("batch.title"))
st.markdown(tr("batch.intro"))


def crossover_b(report: dict | None) -> int | None:
    s = crossover_summary(report["by_batch"]) if report else None
    return s["b"] if s else None


def draw_report(report: dict, key: str, gpu: dict | None = None) -> None:
    """A batched report's three figures and its table (a GPU report, when given, drawn dashed)."""
    by_batch, trees = report["by_batch"], report.get("trees")
    st.markdown(crossover_sentence(report, L))
    if gpu:
        st.markdown(crossover_sentence(gpu, L))
    g = dict(gpu_by_batch=gpu["by_batch"], gpu_trees=gpu.get("trees")) if gpu else {}
    st.markdown(f"**{tr('batch.throughput_title')}**")
    st.plotly_chart(throughput_figure(by_batch, L, crossover_b(report), trees, gpu_crossover_b=crossover_b(gpu), **g),
                    key=f"{key}_throughput", config=CFG)
    cols = st.columns(2)
    with cols[0]:
        st.markdown(f"**{tr('batch.per_user_title')}**")
        st.plotly_chart(per_user_figure(by_batch, L, trees, **g), key=f"{key}_per_user", config=CFG)
        st.caption(tr("batch.per_user_note"))
    with cols[1]:
        st.markdown(f"**{tr('batch.ratio_title')}**")
        st.plotly_chart(ratio_figure(by_batch, L, trees), key=f"{key}_ratio", config=CFG)
    st.markdown(f"**{tr('batch.table_title')}**")
    st.dataframe(batch_table(by_batch, L, trees), hide_index=True, width="stretch")
    named = {m: d for m, d in (trees or {}).items() if d}
    if named:
        st.caption(tr("batch.trees_used", trees="; ".join(tr("batch.tree_of", m=method_label(m, L, trees), tree=tree_words(d, L))
                                                        for m, d in named.items())))


# ---------------------------------------------------------------------- the shipped measurement
st.subheader(tr("batch.shipped_title"))
shipped = measured.shipped_batch_results()
cpu = next((r for r in shipped if not r["gpu"]), None)
gpu = next((r for r in shipped if r["gpu"]), None)
main = cpu or gpu
if main is None:
    st.info(tr("batch.none_shipped"))
else:
    draw_report(main, "batch_shipped", gpu if main is cpu else None)
    st.caption(report_caption(main, L) + (" · " + report_caption(gpu, L) if gpu and main is cpu else ""))
if main is not None and gpu is None:
    st.info(tr("batch.no_gpu"))


# ---------------------------------------------------------------------- the recorded batched round
@st.cache_resource(show_spinner=False)
def recorded_batch():
    try:
        return lesson_batch.load()
    except (OSError, ValueError, KeyError, TypeError):
        return None


st.divider()
st.subheader(tr("batch.round_title"))
rec = recorded_batch()
if rec is None:
    st.warning(tr("batch.round_missing"))
else:
    users = [tr("batch.user", n=i + 1) for i in range(len(rec.traces))]
    opts = rec.spec["options"]
    st.markdown(tr("batch.round_body", n=len(rec.traces), m=tr("m." + rec.spec["method"]), d=opts.get("depth", "?"),
                   k=opts.get("total_tokens", "?"), rows=rec.pass_rows, ms=rec.pass_ms))
    st.markdown(f"**{tr('batch.trees_title')}**")
    st.plotly_chart(batch_trees_figure(rec.traces, L, [tr("batch.tree_title", user=u, c=len(x.committed)) for u, x in zip(users, rec.traces)]),
                    key="batch_rec_trees", config=CFG)
    cols = st.columns(len(rec.traces))
    for c, u, x, prompt, before in zip(cols, users, rec.traces, rec.spec["prompts"], rec.context_texts):
        with c:
            st.markdown(tr("batch.user_prompt", user=u, prompt=prompt))
            if before.strip():
                st.markdown(tr("lesson.written_so_far", text=before.strip().replace("\n", " ↵ ")[-120:]))
            st.markdown(tr("lesson.this_round"))
            st.html(committed_html(x, L))
    st.markdown(f"**{tr('batch.mask_title')}**")
    st.plotly_chart(batch_mask_figure(rec.traces, L), key="batch_rec_mask", config=CFG)
    st.caption(tr("batch.round_caption", r=rec.spec["round_index"] + 1, m=tr("m." + rec.spec["method"]),
                  cpu=rec.recorded.get("cpu", "?"), utc=rec.recorded.get("utc", "?")))


# ---------------------------------------------------------------------- run it here
st.divider()
st.subheader(tr("batch.live_title"))
st.markdown(tr("batch.live_intro", tokens=LIVE_TOKENS))
c = st.columns(3)
sizes = c[0].multiselect(tr("batch.live_sizes"), [1, 2, 4, 8], default=[1, 2, 4], key="batch_sizes")
n_prompts = c[1].select_slider(tr("batch.live_prompts"), [2, 3, 4], value=4, key="batch_prompts")


def run_live():
    """Measure vanilla and EAGLE-3 batched on this machine; errors are shown, never a traceback."""
    s = settings()
    bar = st.progress(0.0)
    try:
        target = get_target()
        if target is None:
            return
        with heavy_work():
            makers = {"vanilla": lambda: make_drafter("vanilla", target, s), SPEC: lambda: make_drafter(SPEC, target, s)}
            report = measure(target, makers, EXAMPLE_PROMPTS[: int(n_prompts)], sizes, LIVE_TOKENS, sampling_params(s),
                             int(s["seed"]), progress=bar.progress)
        st.session_state["batch_live"] = dict(report, device=device_name())
    except SpecVizError as e:
        st.error(tr("c.error", err=e))
    except Exception as e:  # noqa: BLE001 - shown on the page, never a traceback
        st.error(tr("c.error", err=f"{type(e).__name__}: {e}"))
    finally:
        bar.empty()


if c[2].button(tr("batch.live_button"), type="primary", key="batch_live_btn", disabled=not sizes):
    run_live()
if not sizes:
    st.caption(tr("batch.live_need_b"))

live = st.session_state.get("batch_live")
if live:
    st.markdown(f"**{tr('batch.live_result')}**")
    draw_report(live, "batch_live")
    st.caption(tr("c.measured_note", device=live["device"]))
