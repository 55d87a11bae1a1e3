"""Compare EAGLE-1/2/3 (and the baselines) on the same prompt; shipped benchmark results."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import streamlit as st

from specviz import SpecVizError
from specviz.appstate import (
    heavy_work,
    prompt_ids,
    page_setup,
    EAGLE,
    METHODS,
    current_prompt,
    device_name,
    get_target,
    lang,
    make_drafter,
    method_label,
    method_status,
    prompt_box,
    run_generation,
    sampling_params,
    settings,
    status_note,
    tr,
)
from specviz.viz import accept_length_hist, acceptance_by_depth, depth_acceptance_figure, round_time_figure, tree_figure

page_setup()
L = lang()
RESULTS = Path(__file__).resolve().parent.parent / "assets" / "results"
st.title(tr("cmp.title"))
st.markdown(tr("cmp.intro"))
live, shipped = st.tabs([tr("cmp.live"), tr("cmp.shipped")])

with live:
    target = get_target()
    s = settings()
    prompt = prompt_box("compare")
    status = {m: method_status(m, s["dtype"]) for m in METHODS}
    avail = [m for m in METHODS if status[m][0]]
    for m in EAGLE + ["sps", "medusa"]:
        if not status[m][0]:
            st.caption(f"{method_label(m)}: {tr('sb.unavailable', note=status_note(status[m][1]))}")
    default = [m for m in avail if m in EAGLE] or avail
    chosen = st.multiselect(tr("cmp.methods"), avail, default=default, format_func=method_label, key="cmp_methods")

    def run():
        st.session_state.pop("cmp_error", None)
        s = settings()
        text = current_prompt("compare")
        rows, first, lengths, depth, draft_ms = [], {}, {}, {}, {}
        todo = ["vanilla"] + [m for m in chosen if m != "vanilla"]
        bar = st.progress(0.0)
        try:
            from specviz.engine import SpeculativeDecoder

            base = None
            for k, m in enumerate(todo):
                bar.progress(k / len(todo), text=method_label(m))
                res = run_generation(target, s, text, m)
                if m == "vanilla":
                    base = res
                # one detailed round for the picture (the timed run above keeps detail off)
                with heavy_work():
                    dec = SpeculativeDecoder(target, make_drafter(m, target, s), sampling_params(s), seed=int(s["seed"]))
                    dec.start(prompt_ids(target, text), int(s["max_new"]))
                    first[m] = dec.step()
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
                    tr("cmp.col_identical"): (res.tokens == base.tokens) if float(s["temperature"]) == 0 else "n/a (sampling)",
                })
        except SpecVizError as e:
            st.session_state["cmp_error"] = str(e)
        bar.empty()
        st.session_state["cmp_result"] = {"rows": rows, "first": first, "lengths": lengths, "depth": depth,
                                          "order": [m for m in todo if m in first], "device": device_name(), "dtype": s["dtype"]}
        runs = [m for m in todo if m != "vanilla" and m in first]
        if runs:
            r0 = next(r for r in rows if r[tr("cmp.col_method")] == method_label(runs[0]))
            st.session_state["last_run"] = {"method": runs[0], "tau": r0["tau"], "draft_ms": draft_ms[runs[0]]}

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
        st.caption(tr("c.measured_note", device=r["device"]) + f" · {r['dtype']}")
        slower = [row[tr("cmp.col_method")] for row in r["rows"]
                  if (row.get(tr("c.speedup")) or 1) < 1 and row[tr("cmp.col_method")] != method_label("vanilla")]
        if slower:
            st.info(tr("cmp.slower", methods=", ".join(slower)))
        st.subheader(tr("cmp.first_trees"))
        shown = [m for m in r["order"] if m != "vanilla"] or r["order"]
        cols = st.columns(min(3, len(shown)))
        for i, m in enumerate(shown):
            with cols[i % len(cols)]:
                st.markdown(f"**{method_label(m)}**")
                st.plotly_chart(tree_figure(r["first"][m], L, height=360), key=f"cmp_tree_{m}", config={"displaylogo": False})
        c = st.columns(2)
        with c[0]:
            st.markdown(f"**{tr('cmp.hist')}**")
            st.plotly_chart(accept_length_hist({method_label(m): v for m, v in r["lengths"].items()}, L), key="cmp_hist")
        with c[1]:
            st.markdown(f"**{tr('cmp.depth')}**")
            st.plotly_chart(depth_acceptance_figure({method_label(m): v for m, v in r["depth"].items() if m != "vanilla"}, L), key="cmp_depth")

with shipped:
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
            st.caption(" · ".join(f"{k}: {v}" for k, v in meta.items()))
        # specviz.bench nests results per precision: {"by_dtype": {"fp32": {"methods": {...}}}}
        if isinstance(data.get("by_dtype"), dict):
            sections = [(f"{d} · {e['weights']}" if isinstance(e.get("weights"), str) else d, e.get("methods"))
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
                    if isinstance(tree, dict):
                        shape = f"depth {tree['depth']}, " if "depth" in tree else ""
                        row["tree"] = f"{shape}{tree.get('total_tokens')} nodes ({tree.get('source')})"
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
