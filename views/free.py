"""When extra tokens are (nearly) free: target forward latency vs tokens per pass, measured here
and, where shipped, on a GPU; and how batching eats the gain."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from specviz import SpecVizError
from specviz.bench import measured
from specviz.app.measure import measure_forward
from specviz.app.methods import method_label
from specviz.app.model import device_name, get_target
from specviz.app.sidebar import page_setup
from specviz.app.state import lang, tr
from specviz.viz import figure_html, latency_curve_figure, latency_grid_figure, speedup_by_batch_figure
from specviz.runtime.machine import interpolate
from specviz.viz.compare import profile_tau_curve, relative_cost_figure, tau_at, whatif_speedup

page_setup()
L = lang()
st.title(tr("free.title"))
st.markdown(tr("free.intro"))
target = get_target()
if target is None:
    st.stop()

# ---------------------------------------------------------------------- what is already measured
costs = measured.cached_costs(target.model)
gpu = measured.shipped_curves()
known = {}
if costs:
    fwd = costs["forward"]
    ns = sorted(int(k) for k in fwd)
    known[tr("freex.this_cached")] = (ns, [1000 * float(fwd[str(n)]) for n in ns])
for g in gpu:
    ns = sorted(int(k) for k in g["forward"])
    known[g["label"]] = (ns, [1000 * float(g["forward"][str(n)]) for n in ns])
live = st.session_state.get("free_curve")
if live or costs:  # the measurement just made wins over the tree tuner's cached one
    curve = {str(r["n"]): r["ms"] / 1000 for r in live["rows"]} if live else costs["forward"]
    t1, t16 = interpolate(curve, 1), interpolate(curve, 16)
    st.warning(tr("freex.not_free_here", r=t16 / t1, t1=1000 * t1, t16=1000 * t16))
else:
    st.warning(tr("freex.not_free_general"))
if not gpu:
    st.info(tr("freex.no_gpu"))

# ---------------------------------------------------------------------- live measurement
c = st.columns(3)
ctx = c[0].select_slider(tr("free.context"), [16, 64, 128, 256, 512], value=128, key="free_ctx")
reps = c[1].number_input(tr("free.repeats"), 1, 20, 5, key="free_reps")
N_LIST = [1, 2, 4, 8, 16, 32, 64]
has_blocks = getattr(target.model, "blocks", None) is not None
use_blocks = has_blocks and st.radio(
    tr("free.weights"), ["blocks", "dense"], format_func=lambda k: tr(f"free.weights.{k}"), horizontal=True,
    key="free_weights",
) == "blocks"
if has_blocks:
    st.caption(tr("free.weights_note"))


def run_curve():
    bar = st.progress(0.0)
    try:
        st.session_state["free_curve"] = {"ctx": ctx, "rows": measure_forward(target, N_LIST, int(ctx), 1, int(reps), progress=bar.progress,
                                                                            blocks=use_blocks),
                                          "device": device_name(), "dtype": st.session_state.get("dtype", "fp32"),
                                          "weights": tr("free.weights.blocks" if use_blocks else "free.weights.dense")}
    except SpecVizError as e:
        st.error(tr("c.error", err=e))
    bar.empty()


c[2].button(tr("free.measure"), type="primary", key="free_measure", on_click=run_curve)  # before the page: the top reads it

cur = st.session_state.get("free_curve")
if cur:
    rows = cur["rows"]
    ns, ms = [r["n"] for r in rows], [r["ms"] for r in rows]
    fig = latency_curve_figure(ns, ms, L, ms_min=[r["min"] for r in rows], ms_max=[r["max"] for r in rows])
    if any(r["max"] > 1.5 * r["min"] for r in rows):
        st.warning(tr("free.noisy"))
    st.plotly_chart(fig, key="free_curve_fig", config={"displaylogo": False})
    st.caption(" · ".join(tr("free.ratio", n=r["n"], r=r["ms"] / ms[0]) for r in rows if r["n"] in (4, 16, 64)))
    st.caption(tr("c.measured_note", device=cur["device"]) + " · " + tr("freex.settings", dtype=cur["dtype"], ctx=cur["ctx"],
                                                                          weights=cur.get("weights", "")))
    st.dataframe(pd.DataFrame(rows).round(2), hide_index=True)
    st.download_button(tr("c.download_html"), lambda: figure_html(fig), file_name="latency_vs_tokens.html", mime="text/html", key="dl_free")
    known = {tr("freex.this_live"): (ns, ms), **known}

if known:
    st.markdown(f"**{tr('freex.rel_title')}**")
    st.plotly_chart(relative_cost_figure(known, L, dash={g["label"]: "dash" for g in gpu}), key="free_rel_fig",
                    config={"displaylogo": False})
    st.caption(tr("freex.rel_note"))

last = st.session_state.get("last_run")
st.markdown(f"**{tr('free.draft_cost')}**")
if last and cur:
    st.caption(tr("free.draft_measured", ms=last["draft_ms"], method=method_label(last["method"]))
               + f" = {last['draft_ms'] / cur['rows'][0]['ms']:.2f} × t(1)")
elif last:
    st.caption(tr("free.draft_measured", ms=last["draft_ms"], method=method_label(last["method"])))
else:
    st.caption(tr("freex.draft_none"))

# ---------------------------------------------------------------------- the batch lesson
st.divider()
st.subheader(tr("free.grid"))
st.markdown(tr("freex.grid_intro"))
g = st.columns(3)
batches = g[0].multiselect(tr("free.batch_axis"), [1, 2, 4, 8, 16], default=[1, 2, 4, 8], key="free_batches")
n_tree = g[1].select_slider(tr("free.tree_n"), [2, 4, 8, 16, 32], value=8, key="free_n")


def run_grid():
    bar = st.progress(0.0)
    res = {}
    bs = sorted(batches)
    try:
        for k, b in enumerate(bs):
            res[b] = measure_forward(target, [1, int(n_tree)], 64, b, max(1, int(reps) // 2 + 1),
                                     progress=lambda f, k=k: bar.progress((k + f) / len(bs)))
    except (SpecVizError, RuntimeError) as e:
        st.error(tr("c.error", err=e))
        bar.empty()
        return
    bar.empty()
    st.session_state["free_grid"] = {"batches": bs, "n": int(n_tree), "res": res, "device": device_name()}


if g[2].button(tr("free.grid"), key="free_grid_btn", disabled=not batches):
    run_grid()

grid = st.session_state.get("free_grid")
if grid:
    bs, n = grid["batches"], grid["n"]
    ms = [[r["ms"] for r in grid["res"][b]] for b in bs]
    st.plotly_chart(latency_grid_figure(bs, [1, n], ms, L), key="free_grid_fig", config={"displaylogo": False})
    # tau and draft cost: the last run when there is one, else the shipped acceptance profile and
    # this machine's cached drafting cost, so the lesson needs no prior run
    profiles = measured.acceptance_profiles(methods=("eagle3",))
    if last:
        default_tau, draft_ms = float(round(last["tau"], 2)), float(last["draft_ms"])
        st.caption(tr("free.tau_from", tau=last["tau"], method=method_label(last["method"])))
    elif "eagle3" in profiles:
        default_tau = round(tau_at(profile_tau_curve(profiles["eagle3"], 5), n), 2)
        draft = (costs or {}).get("draft.eagle3") or {}
        draft_ms = 1000 * float(draft.get("5", 0.0))
        st.caption(tr("freex.tau_profile", tau=default_tau, n=n, method=method_label("eagle3"))
                   + " " + (tr("freex.draft_cached", ms=draft_ms) if draft else tr("freex.draft_zero")))
    else:
        default_tau, draft_ms = 1.0, 0.0
        st.caption(tr("freex.draft_zero"))
    tau = st.number_input(tr("free.tau_input"), 1.0, float(n), min(default_tau, float(n)), 0.05, key="free_tau")
    sp = [whatif_speedup(tau, row[0], row[1], draft_ms) for row in ms]
    st.plotly_chart(speedup_by_batch_figure(bs, sp, L), key="free_speedup_fig", config={"displaylogo": False})
    st.caption(tr("free.predicted"))
    st.dataframe(pd.DataFrame({tr("free.batch_axis"): bs, "t(B,1) ms": [round(r[0], 2) for r in ms],
                               f"t(B,{n}) ms": [round(r[1], 2) for r in ms],
                               tr("free.speedup_axis"): [round(x, 3) for x in sp]}), hide_index=True)
    st.caption(tr("c.measured_note", device=grid["device"]) + " · " + tr("freex.ctx64"))
