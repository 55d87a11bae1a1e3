"""Compare EAGLE-1/2/3 and Medusa: acceptance at equal trees (shipped measurements), speed on
this machine (live), a hardware what-if, how the three EAGLEs differ, shipped benchmarks."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import streamlit as st

from specviz import SpecVizError
from specviz.bench import measured
from specviz import methods as registry
from specviz.app.gate import heavy_work
from specviz.app.measure import measure_forward
from specviz.app.methods import EAGLE, APP_METHODS, method_label, method_status, status_note
from specviz.app.model import device_name, get_target
from specviz.app.prompts import current_prompt, prompt_box
from specviz.app.session import TIMED_REPEATS, first_round, run_alternating
from specviz.app.sidebar import page_setup
from specviz.app.state import lang, settings, tr
from specviz.runtime.machine import interpolate
from specviz.viz import accept_length_hist, acceptance_by_depth, depth_acceptance_figure, round_time_figure, tree_figure
from specviz.viz.compare import (
    METHOD_COLORS,
    bar_with_values,
    benchmark_tree_size,
    profile_tau_curve,
    recorded_depth_rates,
    recorded_lengths,
    tau_at,
    tau_by_size_figure,
    whatif_figure,
    whatif_series,
)

page_setup()
L = lang()
RESULTS = Path(__file__).resolve().parent.parent / "assets" / "results"


def newest_greedy_bench() -> tuple[str, dict | None]:
    """(file name, run) of the newest shipped greedy fp32 Spec-Bench run: the one made with the current heads."""
    best = ("", None)
    for f in sorted(RESULTS.glob("specbench_fp32_t0*.json")):
        try:
            run = json.loads(f.read_text())
            if not isinstance(run["by_dtype"]["fp32"]["methods"], dict):
                continue
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if best[1] is None or str(run.get("date", "")) > str(best[1].get("date", "")):
            best = (f.name, run)
    return best


HEADS = sorted((m for m in registry.TUNABLE if registry.get(m).reads_features), key=lambda m: m == "medusa")  # EAGLEs first
EQUAL_N, EQUAL_DEPTH, EQUAL_TOPK = 26, 5, 8  # EAGLE-1's paper tree: 25 draft nodes + root, depth 5
st.title(tr("cmp.title"))
st.markdown(tr("cmp.intro"))
tab_acc, tab_speed, tab_whatif, tab_diff, tab_shipped = st.tabs(
    [tr("cmpx.tab_acc"), tr("cmpx.tab_speed"), tr("cmpx.tab_whatif"), tr("cmpx.tab_diff"), tr("cmp.shipped")])

profiles = measured.acceptance_profiles()
recording = measured.equal_tree_recording()
curves = {m: profile_tau_curve(profiles[m], EQUAL_DEPTH) for m in HEADS if m in profiles}


def _labels(d: dict) -> dict:
    return {method_label(m): v for m, v in d.items()}


def _coloured(fig):
    """One colour per method across every chart of the page."""
    by_label = {method_label(m): c for m, c in METHOD_COLORS.items()}
    for trace in fig.data:
        if trace.name in by_label:
            trace.marker.color = by_label[trace.name]
            if getattr(trace, "line", None) is not None:
                trace.line.color = by_label[trace.name]
    return fig


# ---------------------------------------------------------------------- acceptance at equal trees
with tab_acc:
    st.markdown(tr("cmpx.acc_intro", n=EQUAL_N))
    if not curves:
        st.info(tr("cmpx.no_profiles"))
    else:
        p0 = next(iter(profiles.values()))
        dates = sorted({str(p.get("date", "?"))[:10] for p in profiles.values()})  # heads re-profiled on other days
        st.caption(tr("cmpx.acc_source", prompts=p0.get("prompts", "?"), tokens=p0.get("max_new_tokens", "?"),
                      date=dates[0] if len(dates) == 1 else f"{dates[0]} – {dates[-1]}", d=EQUAL_DEPTH))
        cols = st.columns(len(curves))
        for col, (m, cv) in zip(cols, curves.items()):
            n_here = min(EQUAL_N, cv[0][-1])
            col.metric(tr("cmpx.tau_at", method=method_label(m), n=n_here), f"{tau_at(cv, EQUAL_N):.2f}")
        if "medusa" in curves and curves["medusa"][0][-1] < EQUAL_N:
            st.caption(tr("cmpx.medusa_size", n=curves["medusa"][0][-1]))
        st.plotly_chart(tau_by_size_figure(_labels(curves), L, mark_n=EQUAL_N,
                                           colors={method_label(m): METHOD_COLORS[m] for m in curves}),
                        key="cmp_tau_size", config={"displaylogo": False})
    if recording:
        rec = {m: recording["methods"][m] for m in HEADS if m in recording["methods"]}
        st.markdown(f"**{tr('cmpx.rec_title', n=recording.get('paper_nodes', EQUAL_N))}**")
        st.caption(tr("cmpx.rec_source", prompts=recording.get("prompts", "?"), tokens=recording.get("max_new_tokens", "?"),
                      date=recording.get("date", "?"), rounds=sum(len(r["rounds"]) for r in rec.values())))
        c = st.columns(2)
        with c[0]:
            st.markdown(f"**{tr('cmp.hist')}**")
            st.plotly_chart(_coloured(accept_length_hist(_labels({m: recorded_lengths(r["rounds"]) for m, r in rec.items()}), L)),
                            key="cmp_rec_hist", config={"displaylogo": False})
        with c[1]:
            st.markdown(f"**{tr('cmp.depth')}**")
            st.plotly_chart(_coloured(depth_acceptance_figure(_labels({m: recorded_depth_rates(r["rounds"]) for m, r in rec.items()}), L)),
                            key="cmp_rec_depth", config={"displaylogo": False})
        st.plotly_chart(bar_with_values([method_label(m) for m in rec], [r["tau"] for r in rec.values()], L,
                                        colors=[METHOD_COLORS[m] for m in rec]), key="cmp_rec_tau", config={"displaylogo": False})
        st.caption(tr("cmpx.rec_tau_note"))
    else:
        st.info(tr("cmpx.no_recording"))

# ---------------------------------------------------------------------- speed on this machine (live)
with tab_speed:
    st.markdown(tr("cmpx.speed_intro"))
    target = get_target()
    s = settings()
    prompt = prompt_box("compare")
    status = {m: method_status(m, s["dtype"]) for m in APP_METHODS}
    avail = [m for m in APP_METHODS if status[m][0]]
    for m in EAGLE + ["sps", "medusa"]:
        if not status[m][0]:
            st.caption(f"{method_label(m)}: {tr('sb.unavailable', note=status_note(status[m][1]))}")
    default = [m for m in avail if m in EAGLE] or avail
    chosen = st.multiselect(tr("cmp.methods"), avail, default=default, format_func=method_label, key="cmp_methods")
    trees = st.radio(tr("cmpx.trees"), ["tuned", "equal", "sidebar"], horizontal=True, key="cmp_trees",
                     format_func=lambda k: tr(f"cmpx.trees.{k}", n=EQUAL_N))

    def run():
        st.session_state.pop("cmp_error", None)
        s = settings()
        if trees == "equal":
            s = dict(s, depth=EQUAL_DEPTH, total_tokens=EQUAL_N, tree_topk=EQUAL_TOPK, min_prob=0.0)
        elif trees == "tuned":
            s = dict(s, tree_mode="tuned")
        text = current_prompt("compare")
        rows, first, lengths, depth, draft_ms = [], {}, {}, {}, {}
        todo = ["vanilla"] + [m for m in chosen if m != "vanilla"]
        bar = st.progress(0.0)
        try:
            tuned_here = (measured.cached_costs(target.model) or {}) if trees == "tuned" else {}
            for m in todo:  # a tree tuned for this machine is measured once, before any timing
                if trees == "tuned" and registry.get(m).tunable and f"pick.{m}.sampled" not in tuned_here:
                    bar.progress(0.0, text=tr("cmpx.tuning_once", m=method_label(m)))
                    with heavy_work():
                        registry.tune(m, target)
            timing = tr("cmpx.timing_turns", n=TIMED_REPEATS)
            runs = run_alternating(target, s, text, todo, progress=lambda n, total: bar.progress(min(1.0, n / total), text=timing))
            base = runs["vanilla"][0]
            for m in todo:
                res = runs[m][0]
                # one detailed round for the picture (the timed runs above keep detail off)
                first[m] = first_round(target, s, text, m)
                lengths[m] = [tc.accept_length for tc in res.traces]
                draft_ms[m] = 1000 * sum(tc.draft_time_s for tc in res.traces) / max(1, res.rounds)
                depth[m] = acceptance_by_depth(res.traces)
                rows.append({
                    tr("cmp.col_method"): method_label(m),
                    "tau": round(res.tau, 3),
                    tr("c.tokens_per_s"): round(res.tokens_per_s, 2),
                    tr("c.speedup"): round(res.tokens_per_s / base.tokens_per_s, 3) if base and base.tokens_per_s else None,
                    tr("cmp.col_tokens"): len(res.tokens),
                    tr("c.rounds"): res.rounds,
                    tr("cmp.col_seconds"): round(res.seconds, 2),
                    tr("cmpx.col_runs"): " / ".join(f"{x:.0f}" for x in runs[m][1]),
                    tr("cmp.col_identical"): (res.tokens == base.tokens) if float(s["temperature"]) == 0 else tr("cmpx.na_sampling"),
                })
        except SpecVizError as e:
            st.session_state["cmp_error"] = str(e)
        bar.empty()
        st.session_state["cmp_result"] = {"rows": rows, "first": first, "lengths": lengths, "depth": depth,
                                          "order": [m for m in todo if m in first], "device": device_name(),
                                          "dtype": s["dtype"], "trees": trees}
        spec = [m for m in todo if m != "vanilla" and m in first]
        if spec:
            r0 = next(r for r in rows if r[tr("cmp.col_method")] == method_label(spec[0]))
            st.session_state["last_run"] = {"method": spec[0], "tau": r0["tau"], "draft_ms": draft_ms[spec[0]]}

    if st.button(tr("cmp.run"), type="primary", disabled=target is None or not chosen, key="cmp_run"):
        run()
    if not chosen:
        st.info(tr("cmp.none"))
    if st.session_state.get("cmp_error"):
        st.error(tr("c.error", err=st.session_state["cmp_error"]))

    r = st.session_state.get("cmp_result")
    if r and r["rows"]:
        st.subheader(tr("cmp.table"))
        st.dataframe(pd.DataFrame(r["rows"]), hide_index=True)
        st.caption(tr("cmpx.median_note", n=TIMED_REPEATS) + " " + tr("c.measured_note", device=r["device"]) + f" · {r['dtype']} · "
                   + tr(f"cmpx.trees.{r.get('trees', 'sidebar')}", n=EQUAL_N))
        slower = [row[tr("cmp.col_method")] for row in r["rows"]
                  if (row.get(tr("c.speedup")) or 1) < 1 and row[tr("cmp.col_method")] != method_label("vanilla")]
        if slower:
            st.info(tr("cmp.slower_tuned" if r.get("trees") == "tuned" else "cmp.slower", methods=", ".join(slower)))
        st.subheader(tr("cmp.first_trees"))
        for m in [m for m in r["order"] if m != "vanilla"] or r["order"]:
            st.markdown(f"**{method_label(m)}**")
            n_nodes = len(r["first"][m].nodes)
            st.plotly_chart(tree_figure(r["first"][m], L, height=max(360, min(760, 28 * n_nodes))),
                            key=f"cmp_tree_{m}", config={"displaylogo": False})
        c = st.columns(2)
        with c[0]:
            st.markdown(f"**{tr('cmp.hist')}**")
            st.plotly_chart(_coloured(accept_length_hist({method_label(m): v for m, v in r["lengths"].items()}, L)), key="cmp_hist")
        with c[1]:
            st.markdown(f"**{tr('cmp.depth')}**")
            st.plotly_chart(_coloured(depth_acceptance_figure({method_label(m): v for m, v in r["depth"].items() if m != "vanilla"}, L)),
                            key="cmp_depth")

# ---------------------------------------------------------------------- hardware what-if
with tab_whatif:
    st.markdown(tr("cmpx.whatif_intro"))
    target = get_target()
    costs = measured.cached_costs(target.model) if target is not None else None
    have = [m for m in HEADS if m in curves]

    def measure_here():
        try:
            with heavy_work():
                measured.measure_costs(target, have)
        except (SpecVizError, OSError, ValueError) as e:
            st.session_state["cmp_costs_error"] = str(e)

    unmeasured = [m for m in have if costs is None or f"draft.{m}" not in costs]
    if unmeasured:  # all unmeasured, or only some methods' drafting (their curves are left out)
        st.info(tr("cmpx.no_costs") if costs is None else
                tr("cmpx.some_costs", methods=", ".join(method_label(m) for m in unmeasured)))
        st.button(tr("cmpx.measure_costs"), key="cmp_measure_costs", on_click=measure_here, disabled=target is None,
                  type="primary")
        if st.session_state.get("cmp_costs_error"):
            st.error(tr("c.error", err=st.session_state["cmp_costs_error"]))
    gpu = measured.shipped_curves()
    if not gpu:
        st.info(tr("cmpx.no_gpu_curve"))
    if costs is not None:
        wc = st.columns(2)
        batch = wc[0].select_slider(tr("free.batch_axis"), [1, 2, 4, 8], value=1, key="cmp_batch")
        pick = wc[1].multiselect(tr("cmp.methods"), have, default=have, format_func=method_label, key="cmp_whatif_methods")
        forward = costs["forward"]
        if batch > 1:
            bc = st.session_state.get("cmp_batch_curves", {})

            def measure_batch(b=batch):
                rows = measure_forward(target, [1, 2, 4, 8, 16, 32], 256, b, 2)
                st.session_state.setdefault("cmp_batch_curves", {})[b] = {str(x["n"]): x["ms"] / 1000 for x in rows}

            if batch not in bc:
                st.button(tr("cmpx.measure_batch", b=batch), key="cmp_measure_batch", on_click=measure_batch)
                st.caption(tr("cmpx.batch_needed", b=batch))
            else:
                forward = bc[batch]
                st.caption(tr("cmpx.batch_note", b=batch))
        series, dash, colors, best_rows = {}, {}, {}, []
        over = float(costs.get("overhead", 0.0))
        machines = [(tr("cmpx.this_machine"), forward, costs, "solid")]
        machines += [(g["label"], g["forward"], g, "dash") for g in gpu]
        for mname, fwd, cst, style in machines:
            for m in pick:
                draft = cst.get(f"draft.{m}")
                if not isinstance(draft, dict):
                    continue
                if profiles[m]["kind"] == "dynamic":
                    def d_s(n, draft=draft):
                        return float(draft.get(str(EQUAL_DEPTH), 0.0))
                else:
                    def d_s(n, draft=draft):
                        return float(draft.get(str(n), draft[max(draft, key=lambda k: int(k))]))
                by_size = cst.get(f"overhead.{m}")  # the engine's other cost by tree size, where measured
                ns, sp = whatif_series(curves[m], fwd, d_s, by_size if isinstance(by_size, dict) and by_size
                                       else float(cst.get("overhead", over)))
                name = f"{method_label(m)} · {mname}"
                series[name], dash[name], colors[name] = (ns, sp), style, METHOD_COLORS[m]
                k = max(range(len(sp)), key=lambda i: sp[i])
                best_rows.append({tr("cmp.col_method"): method_label(m), tr("cmpx.col_machine"): mname,
                                  tr("cmpx.col_best_n"): ns[k], "tau": round(tau_at(curves[m], ns[k]), 2),
                                  tr("cmpx.col_speedup"): round(sp[k], 2),
                                  tr("cmpx.col_speedup_at", n=EQUAL_N): round(sp[ns.index(EQUAL_N)], 2) if EQUAL_N in ns else None})
        if series:
            st.plotly_chart(whatif_figure(series, L, dash=dash, colors=colors), key="cmp_whatif", config={"displaylogo": False})
            st.dataframe(pd.DataFrame(best_rows), hide_index=True)
            t1 = 1000 * interpolate(forward, 1)
            t16 = 1000 * interpolate(forward, 16)
            st.caption(tr("cmpx.whatif_note", t1=t1, t16=t16, r=t16 / t1 if t1 else float("nan"), d=EQUAL_DEPTH,
                          device=(costs.get("machine") or {}).get("cpu") or device_name(), date=costs.get("date", "?")))

# ---------------------------------------------------------------------- how EAGLE-1/2/3 differ
with tab_diff:
    st.markdown(tr("cmpx.diff_table"))
    st.markdown(f"**{tr('cmpx.paper_title')}**")
    st.markdown(tr("cmpx.paper_table"))
    st.markdown(f"**{tr('cmpx.ours_title')}**")
    ours = []
    bench_file, bench_run = newest_greedy_bench()
    bench = bench_run["by_dtype"]["fp32"]["methods"] if bench_run else {}
    rec = (recording or {}).get("methods", {})
    for m in HEADS:
        b = bench.get(m) or {}
        ours.append({
            tr("cmp.col_method"): method_label(m),
            tr("cmpx.col_tau_equal", n=EQUAL_N): round(tau_at(curves[m], EQUAL_N), 2) if m in curves else None,
            tr("cmpx.col_tau_recorded", n=EQUAL_N): round(rec[m]["tau"], 2) if m in rec else None,
            tr("cmpx.col_tau_bench"): round(b["tau"], 2) if isinstance(b.get("tau"), (int, float)) else None,
            tr("cmpx.col_tree_bench"): benchmark_tree_size(b),
            tr("cmpx.col_speedup_bench"): round(b["speedup_vs_vanilla"], 2) if isinstance(b.get("speedup_vs_vanilla"), (int, float)) else None,
        })
    st.dataframe(pd.DataFrame(ours), hide_index=True)
    settings = (bench_run or {}).get("settings") or {}
    st.caption(tr("cmpx.ours_note", file=bench_file or "-", n=settings.get("limit") or "-",
                  tokens=settings.get("max_new_tokens") or "-",
                  cpu=((bench_run or {}).get("machine") or {}).get("cpu") or "-", date=str((bench_run or {}).get("date", "-"))[:10]))
    st.markdown(f"**{tr('cmpx.gap_title')}**")
    st.markdown(tr("cmpx.gap"))

# ---------------------------------------------------------------------- shipped benchmark files
with tab_shipped:
    files = sorted(RESULTS.glob("*.json")) if RESULTS.is_dir() else []
    if not files:
        st.info(tr("cmp.no_shipped"))
    for f in files:
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            st.error(tr("c.error", err=f"{f.name}: {e}"))
            continue
        st.markdown(f"#### {f.name}")
        meta = {k: v for k, v in data.items() if not isinstance(v, (dict, list))}
        for k in ("settings", "machine"):
            if isinstance(data.get(k), dict):
                meta.update({f"{k}.{a}": b for a, b in data[k].items() if not isinstance(b, (dict, list))})
        if meta:
            with st.expander(tr("cmpx.run_settings")):
                st.json(meta, expanded=True)
        # specviz.bench nests results per precision: {"by_dtype": {"fp32": {"methods": {...}}}}
        if isinstance(data.get("by_dtype"), dict):
            def weights(w):  # the bench writes an English description; show ours in the page's language
                return tr("free.weights.blocks" if "block" in w.lower() or "gguf" in w.lower() else "free.weights.dense")

            sections = [(f"{d} · {weights(e['weights'])}" if isinstance(e.get("weights"), str) else d, e.get("methods"))
                        for d, e in data["by_dtype"].items() if isinstance(e, dict)]
        else:
            sections = [("", data.get("methods") or data.get("results"))]
        shown = False
        for dname, methods in sections:
            if not isinstance(methods, dict):
                continue
            shown = True
            if dname:
                st.markdown(f"**{dname}**")
            rows = []
            for name, m in methods.items():
                if isinstance(m, dict):
                    rows.append({"method": name, **{k: v for k, v in m.items() if not isinstance(v, (dict, list))}})
            if rows:
                for row, (name, m) in zip(rows, ((n, m) for n, m in methods.items() if isinstance(m, dict))):
                    tree = m.get("tree")
                    if isinstance(tree, dict) and tree.get("min_prob"):
                        row["tree"] = tr("cmpx.tree_desc_floor", p=tree["min_prob"], d=tree.get("depth", "–"), src=tree.get("source"))
                    elif isinstance(tree, dict):
                        row["tree"] = tr("cmpx.tree_desc", n=tree.get("total_tokens"), d=tree.get("depth", "–"),
                                         src=tree.get("source"))
                st.dataframe(pd.DataFrame(rows), hide_index=True)
                if any(isinstance(m, dict) and m.get("per_round_ms") for m in methods.values()):
                    st.markdown(f"**{tr('bench.round_time')}**")
                    st.plotly_chart(round_time_figure(methods, L), key=f"rt_{f.name}_{dname}")
            cats = {name: m.get("by_category") or m.get("per_category") or m.get("categories")
                    for name, m in methods.items() if isinstance(m, dict)}
            cat_rows = [{"method": n, "category": c, **{k: v for k, v in d.items() if not isinstance(v, (dict, list))}}
                        for n, cs in cats.items() if isinstance(cs, dict) for c, d in cs.items() if isinstance(d, dict)]
            if len(cat_rows) > len(rows):
                st.dataframe(pd.DataFrame(cat_rows), hide_index=True)
        if not shown:
            st.json(data, expanded=False)
