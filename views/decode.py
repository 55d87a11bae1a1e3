"""Decode round: step through single rounds, stage by stage (draft, verify, accept or correct).

The stepper and its figures are one `st.fragment`: pressing Next round reruns only that part
(not the sidebar, the prompt box or the other pages' code), and each round's figures are built
once per (round, language, options) and reused while the student looks at it."""

from __future__ import annotations

import streamlit as st

from specviz import SpecVizError
from specviz.serving.concurrency import draw_gate
from specviz.app.clicks import clicked_node
from specviz.app.figcache import cached
from specviz.app.prompts import current_prompt, prompt_box
from specviz.app.session import config_key, same_trace, start_session
from specviz.app.sidebar import current_method_ok, page_setup, round_param
from specviz.app.model import get_target
from specviz.app.state import lang, settings, tr
from specviz.viz import (
    EXTRA_ID,
    colored_text_html,
    figure_html,
    legend_html,
    node_pq_panel,
    token_sources,
    tree_figure,
)
from specviz.viz.mask import attention_figure
from specviz.viz.round import extra_dist_figure, extra_title, round_table, rule_caption, walk_u_figure

page_setup()
st.title(tr("dec.title"))
st.caption(tr("dec.intro"))

target = get_target()
prompt_box("decode")
ok, _ = current_method_ok()


def _err(e: Exception):
    st.session_state["dec_error"] = str(e)


def _set_round_param(n: int | None):
    if n is None:
        st.query_params.pop("round", None)
    else:
        st.query_params["round"] = str(n)


def do_start(rounds: int = 0):
    st.session_state.pop("dec_error", None)
    st.session_state.pop("dec_replay", None)
    st.session_state["sel_node"] = None
    try:
        sess = start_session(target, settings(), current_prompt("decode"))
        for _ in range(rounds):
            if sess.done:
                break
            sess.step()
        st.session_state["dec_view"] = len(sess.traces) - 1
        _set_round_param(len(sess.traces) or None)
    except SpecVizError as e:  # the previous sequence (if any) stays as it was
        _err(e)


def do_next():
    sess = st.session_state.get("dec")
    st.session_state.pop("dec_replay", None)
    st.session_state["sel_node"] = None
    if sess is None:
        return do_start(1)
    try:
        if sess.done:
            raise SpecVizError(tr("dec.finished"))
        # stepping from an earlier viewed round continues from the end
        sess.step()
        st.session_state["dec_view"] = len(sess.traces) - 1
        _set_round_param(len(sess.traces))
    except SpecVizError as e:
        _err(e)


def do_replay():
    sess = st.session_state.get("dec")
    if sess is None or not sess.traces:
        return
    i = st.session_state.get("dec_view", len(sess.traces) - 1)
    old = sess.traces[i]
    try:
        new = sess.replay(i)
    except SpecVizError as e:
        return _err(e)
    st.session_state["dec_replay"] = (i, same_trace(old, new))
    st.session_state["dec_view"] = i
    _set_round_param(i + 1)


ACTIONS = {"start": do_start, "next": do_next, "replay": do_replay}


def _request(action: str):
    """Button callback: only records the press. The engine work runs in the fragment's body,
    where the queue notice can be drawn (a callback of a fragment must not draw elements)."""
    st.session_state["dec_action"] = action


# ---------------------------------------------------------------- deep link: ?round=N reopens a round
if target is not None and ok and not st.session_state.get("_deep_link_done"):
    st.session_state["_deep_link_done"] = True
    want = round_param(st.query_params.get("round"))
    if want and "dec" not in st.session_state:
        with st.spinner("…"):
            do_start(want)


def tree_chart(trace, make_fig, key):
    """Draw the tree; a click selects a node. The selection is read from session state *before*
    drawing, so the highlight and the p-vs-q bars follow in the same run (no st.rerun)."""
    node = clicked_node(key)
    if node is not None and node != st.session_state.get("_last_click", {}).get(key):
        st.session_state["sel_node"] = node
    st.session_state.setdefault("_last_click", {})[key] = node
    sel_now = st.session_state.get("sel_node")
    if sel_now is not None and sel_now != EXTRA_ID and sel_now >= len(trace.nodes):
        sel_now = None
    fig = make_fig(sel_now)
    st.plotly_chart(fig, key=key, on_select="rerun", selection_mode="points", config={"displaylogo": False})
    return fig, sel_now


def round_view(sess, view: int, L: str):
    """One round, stage by stage: the tree (click a node), its p-vs-q bars, mask or acceptance walk."""
    traces = sess.traces
    n = len(traces)
    trace = traces[view]
    if st.session_state.get("dec_replay") and st.session_state["dec_replay"][0] == view:
        same = st.session_state["dec_replay"][1]
        (st.success if same else st.error)(tr("dec.replayed", i=view + 1, same=tr("home.yes") if same else tr("home.no")))

    st.subheader(tr("dec.round", i=view + 1, n=n))
    st.caption(tr("dec.timing", d=1000 * trace.draft_time_s, v=1000 * trace.verify_time_s, tt=1000 * trace.total_time_s)
               + f" · {trace.method} · " + tr("rule." + trace.rule))

    stage = st.radio(tr("dec.stage"), ["draft", "verify", "accept"], horizontal=True, key="dec_stage",
                     format_func=lambda k: tr("dec.stage_" + k))
    max_depth = max(nd.depth for nd in trace.nodes)

    # a paper-sized tree (25-60 nodes) takes the full width, its p-vs-q panel goes below it
    left, right = (st.container(), st.container()) if len(trace.nodes) > 16 else st.columns([3, 2])
    with left:
        if stage == "draft":
            if len(trace.nodes) == 1:
                st.info(tr("dec.no_draft"))
                fig, sel = tree_chart(trace, lambda sl: cached("tree", trace, L, sl, "draft", build=lambda: tree_figure(trace, L, selected=sl, reveal=False)),
                                      f"tree_draft_{view}")
            else:
                lvl = st.slider(tr("dec.grow"), 1, max_depth, max_depth, key=f"grow_{view}") if max_depth > 1 else 1
                st.caption(tr("dec.draft_text", n=len(trace.nodes) - 1, ms=1000 * trace.draft_time_s, d=max_depth))
                fig, sel = tree_chart(trace, lambda sl: cached("tree", trace, L, sl, "draft", lvl,
                                                               build=lambda: tree_figure(trace, L, selected=sl, max_depth=lvl, reveal=False)),
                                      f"tree_draft_{view}_{lvl}")
        elif stage == "verify":
            st.caption(tr("dec.verify_text", n=len(trace.nodes), L=trace.prefix_len, ms=1000 * trace.verify_time_s))
            fig, sel = tree_chart(trace, lambda sl: cached("tree", trace, L, sl, "verify", build=lambda: tree_figure(trace, L, selected=sl, reveal=False, show_p=True)),
                                  f"tree_verify_{view}")
        else:
            fig, sel = tree_chart(trace, lambda sl: cached("tree", trace, L, sl, "accept", build=lambda: tree_figure(trace, L, selected=sl)),
                                  f"tree_accept_{view}")
        st.caption(tr("dec.click"))
    with right:
        shown = sel if sel is not None else 0
        reveal = stage == "accept" or (stage == "verify" and shown != EXTRA_ID)
        title, pq = cached("pq", trace, L, shown, reveal, build=lambda: node_pq_panel(trace, shown, L, reveal))
        if sel is not None:
            st.markdown(f"**{tr('dec.selected', id='★' if sel == EXTRA_ID else sel)}**")
        st.markdown(title)
        st.plotly_chart(pq, key=f"pq_{view}_{shown}_{int(reveal)}", config={"displaylogo": False})
        st.caption(tr("pq.top_note"))

    if stage == "verify":
        msel = sel if sel is not None and sel >= 0 else None
        mfig = cached("attention", trace, L, msel, build=lambda: attention_figure(trace, L, selected=msel))
        st.plotly_chart(mfig, key=f"mask_{view}", config={"displaylogo": False})
        st.download_button(tr("c.download_html") + " (mask)", lambda: figure_html(mfig), file_name=f"round{view + 1}_mask.html",
                           mime="text/html", key="dl_mask")
    elif stage == "accept":
        acc = len(trace.accepted_nodes)
        st.markdown(tr("dec.accept_text", rule=tr("rule." + trace.rule), a=acc, tok=trace.extra_text.replace("\n", "↵"),
                       src=tr("source." + trace.extra_source), c=len(trace.committed)))
        wcol, xcol = st.columns(2)
        with wcol:
            if trace.steps:
                st.plotly_chart(cached("walk_u", trace, L, build=lambda: walk_u_figure(trace, L)), key=f"walk_{view}", config={"displaylogo": False})
            else:
                st.caption(tr("dec.no_steps"))
        with xcol:
            st.markdown(extra_title(trace, L))
            st.plotly_chart(cached("extra", trace, L, build=lambda: extra_dist_figure(trace, L)), key=f"extra_{view}", config={"displaylogo": False})
        st.caption(rule_caption(trace, L))
        st.dataframe(cached("round_table", trace, L, build=lambda: round_table(trace, L, "accept")), hide_index=True, width="stretch")

    st.subheader(tr("dec.text_so_far"))
    upto = traces[: view + 1]
    st.html(cached("text_by_round", trace, L, view, build=lambda: colored_text_html(upto, L, by_round=True)))
    with st.expander(tr("home.legend")):
        present = {src for _, src, _ in token_sources(upto)}
        st.html(legend_html(L, [x for x in ("accepted", "bonus", "resampled", "greedy-correction", "vanilla") if x in present]))
        st.html(cached("text", trace, L, view, build=lambda: colored_text_html(upto, L)))

    d = st.columns(3)
    d[0].download_button(tr("c.download_json"), cached("json", trace, build=trace.to_json), file_name=f"specviz_round{view + 1}.json",
                         mime="application/json", key="dl_json")
    d[1].download_button(tr("c.download_html") + " (tree)", lambda: figure_html(fig), file_name=f"round{view + 1}_tree.html",
                         mime="text/html", key="dl_tree")
    d[2].caption(tr("dec.link_help"))


@st.fragment
def stepper():
    """Start / Next round / Replay and the round on view: a press reruns only this fragment."""
    L = lang()
    action = st.session_state.pop("dec_action", None)
    if action in ACTIONS:
        ACTIONS[action]()
    sess = st.session_state.get("dec")
    stale = sess is not None and sess.key != config_key(settings(), current_prompt("decode"))

    b = st.columns([1, 1, 1, 3])
    b[0].button(tr("dec.start"), on_click=_request, args=("start",), type="primary" if sess is None or stale else "secondary",
                disabled=target is None or not ok, key="dec_start")
    b[1].button(tr("dec.next"), on_click=_request, args=("next",), type="primary" if sess is not None and not stale else "secondary",
                disabled=target is None or not ok or stale or (sess is not None and sess.done), key="dec_next")
    b[2].button(tr("dec.replay"), on_click=_request, args=("replay",), disabled=sess is None or stale or not sess.traces, key="dec_replay_btn")

    if st.session_state.get("dec_error"):
        st.error(tr("c.error", err=st.session_state["dec_error"]))
        st.session_state.pop("dec_error")

    if sess is None:
        st.info(tr("dec.not_started"))
        return
    if stale:
        st.info(tr("dec.not_started"))
    if not sess.traces:
        st.info(tr("dec.press_next"))
        return
    if sess.done:
        st.success(tr("dec.finished"))

    n = len(sess.traces)
    view = min(max(0, st.session_state.get("dec_view", n - 1)), n - 1)
    if n > 1:
        view = st.slider(tr("dec.pick_round"), 1, n, view + 1, key=f"dec_pick_{n}") - 1
        st.session_state["dec_view"] = view
    with draw_gate().slot():  # drawing takes its turn (FIFO); the engine gate is separate
        round_view(sess, view, L)


stepper()
