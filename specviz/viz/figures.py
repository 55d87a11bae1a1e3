"""Pure figure builders: a `RoundTrace` (or measured numbers) in, a Plotly figure out.

Nothing here touches the engine, Streamlit or the model: every number drawn comes from the
arguments. Labels go through `specviz.i18n.t` so the figures follow the app's language.
"""

from __future__ import annotations

import html
import math

import networkx as nx
import numpy as np
import plotly.graph_objects as go

from ..i18n import t
from ..core.trace import NodeTrace, RoundTrace

STATUS_COLORS = {
    "root": "#6c757d",
    "accepted": "#2ca02c",
    "rejected": "#d62728",
    "untried": "#c7c7c7",
    "drafted": "#1f77b4",  # draft stage: outcome not known yet
}
SOURCE_COLORS = {
    "accepted": "#2ca02c",  # accepted draft token
    "bonus": "#1f77b4",  # bonus token after a fully accepted path
    "resampled": "#ff7f0e",  # correction drawn from the residual
    "greedy-correction": "#ff7f0e",
    "vanilla": "#9467bd",  # plain target sample (root-only tree)
}
SOURCE_BG = {
    "accepted": "rgba(44,160,44,0.22)",
    "bonus": "rgba(31,119,180,0.22)",
    "resampled": "rgba(255,127,14,0.30)",
    "greedy-correction": "rgba(255,127,14,0.30)",
    "vanilla": "rgba(148,103,189,0.18)",
}
LEGEND_TOP = dict(orientation="h", yanchor="bottom", y=1.02, x=0, xanchor="left")  # clear of the modebar
EXTRA_ID = -1  # customdata id of the extra (bonus / corrected) token drawn after the tree


def spec_figure(data: list[dict], layout: dict) -> go.Figure:
    """A figure from plain Plotly JSON (traces with their "type"), not validated property by
    property: the figures drawn on every stepped round are costly through Plotly's validators and
    `update_layout` path parsing, under the one GIL a classroom server shares (docs/runtime.md,
    "Measured reasons behind code choices"). tests/test_viz.py validates every builder's output."""
    return go.Figure({"data": data, "layout": layout}, _validate=False)


def show_token(text: str) -> str:
    """A token's text made visible in a label: spaces as ␣, newlines as ↵, tabs as ⇥."""
    if text is None:
        return ""
    s = text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")
    return s if s else "∅"


def _fmt(x, digits=3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}"


# ---------------------------------------------------------------------- tree
def tree_graph(trace: RoundTrace) -> nx.DiGraph:
    g = nx.DiGraph()
    for n in trace.nodes:
        g.add_node(n.id, depth=n.depth)
        if n.parent >= 0:
            g.add_edge(n.parent, n.id)
    return g


def tree_layout(trace: RoundTrace) -> dict[int, tuple[float, float]]:
    """Tidy layered layout: x = depth, leaves stacked in draft-rank order, parents centred.

    The graph is a networkx tree; its depth-first order gives the vertical order of leaves so
    siblings appear top-down by rank (rank 0 on top) and edges never cross.
    """
    g = tree_graph(trace)
    order = {n.id: (n.rank, n.id) for n in trace.nodes}
    y: dict[int, float] = {}
    next_leaf = [0.0]

    def place(v):
        kids = sorted(g.successors(v), key=lambda c: order[c])
        if not kids:
            y[v] = next_leaf[0]
            next_leaf[0] += 1.0
            return
        for c in kids:
            place(c)
        y[v] = (y[kids[0]] + y[kids[-1]]) / 2

    root = trace.nodes[0].id
    # iterative-safe: trees are at most a few hundred nodes deep-wise 10, recursion is fine
    place(root)
    depth = nx.shortest_path_length(g, root)
    return {v: (float(depth[v]), -y[v]) for v in g.nodes}


def ancestors(trace: RoundTrace, node_id: int) -> list[int]:
    """Node ids from the root to `node_id` inclusive."""
    parent = {n.id: n.parent for n in trace.nodes}
    out = []
    v = node_id
    while v is not None and v >= 0 and v in parent:
        out.append(v)
        v = parent[v]
    return out[::-1]


def target_p(trace: RoundTrace, node: NodeTrace) -> float | None:
    """The target's probability of a node's token given its parent's path, as a reader expects
    it: the warped p when sampling; in greedy rounds the T = 1 softmax (the greedy 'p' is one-hot),
    None when that token is outside the recorded top entries."""
    if node.parent < 0:
        return None
    if trace.rule != "greedy":
        return node.p
    for tid, _, pp in trace.nodes[node.parent].next_p_raw_top:
        if int(tid) == node.token:
            return float(pp)
    return None


def _node_hover(n: NodeTrace, lang: str, reveal: bool = True, trace: RoundTrace | None = None, show_p: bool | None = None) -> str:
    """Hover text that follows the stage: draft (q only), verify (p and q, no outcome), accept
    (what the rule used: a and u for tried nodes; p/q only where the rule divides by the draft's q)."""
    if n.parent < 0:
        return (
            f"<b>{html.escape(show_token(n.text))}</b> (id {n.token})<br>"
            f"{t('tree.root_hover', lang)}<br>{t('tree.position', lang)} {n.position}"
        )
    head = f"<b>{html.escape(show_token(n.text))}</b> (id {n.token}) · node {n.id}<br>"
    where = (f"{t('tree.score', lang)} = {n.score:.3f} · {t('tree.rank', lang)} {n.rank} · "
             f"{t('tree.depth', lang)} {n.depth} · {t('tree.position', lang)} {n.position}")
    show_p = reveal if show_p is None else show_p
    q = t("round.copied", lang) if n.copied else _fmt(n.q, 4)  # prompt lookup's copy: a deterministic draft
    if not show_p:  # draft stage: the target has not spoken yet
        return head + f"q = {q}<br>" + where
    pv = target_p(trace, n) if trace is not None else n.p
    line = f"p = {_fmt(pv, 4)} · q = {q}"
    if trace is None or trace.rule in ("chain", "tree-sampled"):
        ratio = "–" if not n.q or pv is None else f"{pv / n.q:.3f}"
        line += f" · p/q = {ratio}"
    if not reveal:  # verify stage: p is known, the outcome is not yet
        return head + line + "<br>" + where
    step = next((s for s in trace.steps if s.node == n.id), None) if trace is not None else None
    if step is not None and step.u is not None:
        a = min(1.0, step.p / step.q) if trace.rule in ("chain", "tree-sampled") and step.q else min(1.0, step.p)
        line += f"<br>a = {a:.3f} · u = {step.u:.3f}"
    return head + line + "<br>" + where + f"<br>{t('status.' + n.status, lang)}"


def tree_figure(
    trace: RoundTrace,
    lang: str = "en",
    selected: int | None = None,
    max_depth: int | None = None,
    reveal: bool = True,
    show_extra: bool = True,
    height: int | None = None,
    show_p: bool | None = None,
) -> go.Figure:
    """The draft tree, left to right. Nodes coloured by outcome (or all 'drafted' when
    `reveal` is False, for the draft stage); `max_depth` hides deeper levels (the tree growing);
    the selected node and its ancestors get a thick outline; the extra token (bonus or
    correction) hangs off the last accepted node with a dashed edge. customdata[0] = node id
    (EXTRA_ID for the extra token) for click selection. `show_p` (default: `reveal`) puts the
    target's p in the hover: True with `reveal` False is the verify stage.
    """
    pos = tree_layout(trace)
    shown = [n for n in trace.nodes if max_depth is None or n.depth <= max_depth]
    shown_ids = {n.id for n in shown}
    path = set(ancestors(trace, selected)) if selected is not None and selected >= 0 else set()
    data = []
    ex, ey, px_, py_ = [], [], [], []
    for n in shown:
        if n.parent >= 0 and n.parent in shown_ids:
            (x0, y0), (x1, y1) = pos[n.parent], pos[n.id]
            tgt = (px_, py_) if (n.id in path and n.parent in path) else (ex, ey)
            tgt[0].extend([x0, x1, None])
            tgt[1].extend([y0, y1, None])
    data.append(dict(type="scatter", x=ex, y=ey, mode="lines", line=dict(color="#b0b0b0", width=1.5), hoverinfo="skip", showlegend=False))
    if px_:
        data.append(dict(type="scatter", x=px_, y=py_, mode="lines", line=dict(color="#08306b", width=3, dash="dot"), hoverinfo="skip",
                         showlegend=False))
    statuses = ["root", "accepted", "rejected", "untried"] if reveal else ["root", "drafted"]
    big = len(shown) > 16  # 25-60 node trees: smaller markers and labels, untried nodes faded
    for st in statuses:
        group = [n for n in shown if (n.status if reveal else ("root" if n.parent < 0 else "drafted")) == st]
        if not group:
            continue
        data.append(dict(
            type="scatter",
            x=[pos[n.id][0] for n in group],
            y=[pos[n.id][1] for n in group],
            mode="markers+text",
            marker=dict(
                size=[(20 if big else 30) if n.id == selected else (13 if big else 22) for n in group],
                symbol=["diamond" if n.copied else "circle" for n in group],  # copied by prompt lookup
                color=STATUS_COLORS[st],
                opacity=0.45 if (st == "untried" and big) else 1.0,
                line=dict(
                    color=["#08306b" if n.id in path else "white" for n in group],
                    width=[3 if n.id in path else 1 for n in group],
                ),
            ),
            text=[f"#{n.id} {show_token(n.text)[:12]}" for n in group],
            textposition="top center",
            textfont=dict(size=10 if big else 12, color="#999" if (st == "untried" and big) else "#222"),
            customdata=[[n.id] for n in group],
            hovertext=[_node_hover(n, lang, reveal, trace, show_p) for n in group],
            hoverinfo="text",
            name=t("status." + st, lang),
        ))
    if any(n.copied for n in shown):  # a legend entry for the diamonds (no point of its own)
        data.append(dict(type="scatter", x=[None], y=[None], mode="markers", name=t("tree.copied_legend", lang),
                         marker=dict(symbol="diamond", size=12, color="#ffffff", line=dict(color="#555", width=1.5))))
    if show_extra and reveal and (max_depth is None or max_depth >= trace.nodes[-1].depth):
        anchor = trace.accepted_nodes[-1] if trace.accepted_nodes else trace.nodes[0].id
        ax, ay = pos[anchor]
        if big:  # beside its anchor, between two depth columns: no long edge across the tree
            xx, yy = ax + 0.5, ay - 0.5
        else:  # one level right of its anchor, just below whatever the tree has at that depth
            same_x = [py for (px, py) in pos.values() if px == ax + 1]
            xx, yy = ax + 1, (min(same_x) - 0.8) if same_x else ay
        src = trace.extra_source
        color = SOURCE_COLORS.get(src, "#555")
        data.append(dict(type="scatter", x=[ax, xx], y=[ay, yy], mode="lines", line=dict(color=color, width=2, dash="dot"),
                         hoverinfo="skip", showlegend=False))
        top = ", ".join(f"{html.escape(show_token(s))} {pp:.3f}" for _, s, pp in trace.extra_top[:5])
        data.append(dict(
            type="scatter",
            x=[xx],
            y=[yy],
            mode="markers+text",
            marker=dict(size=26, symbol="star", color=color, line=dict(color="white", width=1)),
            text=[show_token(trace.extra_text)[:12]],
            textposition="bottom center",
            customdata=[[EXTRA_ID]],
            hovertext=[f"<b>{html.escape(show_token(trace.extra_text))}</b> (id {trace.extra_token})<br>{t('source.' + src, lang)}<br>"
                       f"{t('tree.from_dist', lang)}: {top}"],
            hoverinfo="text",
            name=t("source." + src, lang),
        ))
    n_leaves = sum(1 for n in trace.nodes if not any(m.parent == n.id for m in trace.nodes))
    ys = [yy for d in data for yy in d["y"] if yy is not None]
    xs = [xx_ for d in data for xx_ in d["x"] if xx_ is not None]
    return spec_figure(data, dict(
        height=height or max(280, min(1600, 140 + (36 if big else 38) * n_leaves)),
        margin=dict(l=10, r=10, t=36, b=10),  # room above for the top labels, clear of the modebar
        xaxis=dict(title=dict(text=t("tree.depth", lang)), dtick=1, showgrid=False, zeroline=False,
                   range=[min(xs) - 0.4, max(xs) + 0.4] if xs else None),
        yaxis=dict(visible=False, range=[min(ys) - 0.7, max(ys) + 0.7] if ys else None),
        legend=dict(orientation="h", yanchor="top", y=-0.22, x=0),
        clickmode="event+select",
        dragmode="zoom",  # a "select" dragmode would swallow single clicks
        plot_bgcolor="white",
        hoverlabel=dict(align="left"),
    ))


# ---------------------------------------------------------------------- p vs q
def pq_bars_figure(p_top, q_top, lang: str = "en", highlight=(), title: str = "") -> go.Figure:
    """Target p and draft q over the union of their top tokens (entries [id, text, prob]).
    A token outside one of the top lists has no bar there (its value was not recorded)."""
    toks: dict[int, str] = {}
    for tid, txt, _ in list(p_top) + list(q_top):
        toks.setdefault(int(tid), txt)
    pmap = {int(a): c for a, _, c in p_top}
    qmap = {int(a): c for a, _, c in q_top}
    ids = sorted(toks, key=lambda i: -(max(pmap.get(i, 0), qmap.get(i, 0))))
    xs = [f"{show_token(toks[i])[:12]} ({i})" for i in ids]
    hl = set(int(h) for h in highlight)

    def bars(values: dict, name: str, color: str) -> dict:
        return dict(type="bar", x=xs, y=[values.get(i, None) for i in ids], name=name,
                    marker=dict(color=color, line=dict(color=["#111" if i in hl else color for i in ids],
                                                       width=[3 if i in hl else 0 for i in ids])))

    data = []
    if p_top or not q_top:  # the draft stage passes no p: the target has not run yet
        data.append(bars(pmap, t("pq.p", lang), "#1f77b4"))
    if q_top:
        data.append(bars(qmap, t("pq.q", lang), "#ff7f0e"))
    layout = dict(
        barmode="group",
        height=340,
        margin=dict(l=10, r=10, t=60 if title else 20, b=10),
        yaxis=dict(title=dict(text=t("pq.prob", lang)), rangemode="tozero"),
        legend=dict(orientation="h", yanchor="top", y=-0.25, x=0),
        showlegend=True,  # also with one series (q only in the draft stage): say what the bars are
    )
    if title:
        layout["title"] = dict(text=title, font=dict(size=13), x=0, xanchor="left", y=0.97, yanchor="top")
    return spec_figure(data, layout)


def _node_pq(trace: RoundTrace, node_id: int, lang: str, reveal: bool):
    """(title, p_top, q_top, highlighted token ids) of a node's p-vs-q bars."""
    nodes = {n.id: n for n in trace.nodes}
    if not reveal:
        n = nodes.get(node_id, trace.nodes[0])
        par = n if n.parent < 0 else nodes[n.parent]
        hl = [m.token for m in trace.nodes if m.parent == n.id] if n.parent < 0 else [n.token]
        title = (t("pq.q_only_root", lang, tok=show_token(n.text)) if n.parent < 0 else
                 t("pq.q_only_title", lang, tok=show_token(n.text), parent=show_token(par.text), q=_fmt(n.q)))
        return title, [], par.next_q_top, hl
    if node_id == EXTRA_ID:
        return (t("pq.extra_title", lang, tok=show_token(trace.extra_text), src=t("source." + trace.extra_source, lang)),
                trace.extra_top, [], [trace.extra_token])
    n = nodes[node_id]
    if n.parent < 0:
        return (t("pq.root_title", lang, tok=show_token(n.text)), n.next_p_top, n.next_q_top,
                [m.token for m in trace.nodes if m.parent == n.id])
    par = nodes[n.parent]
    return (t("pq.node_title", lang, tok=show_token(n.text), parent=show_token(par.text), p=_fmt(n.p), q=_fmt(n.q)),
            par.next_p_top, par.next_q_top, [n.token])


def node_pq_figure(trace: RoundTrace, node_id: int, lang: str = "en", reveal: bool = True) -> go.Figure:
    """For a drafted node: the distributions at its parent (where its token was chosen), the
    node's token outlined. For the root: the distributions for its children. For the extra
    token: the distribution it was drawn from. `reveal` False (the draft stage): q only."""
    title, p_top, q_top, hl = _node_pq(trace, node_id, lang, reveal)
    return pq_bars_figure(p_top, q_top, lang, highlight=hl, title=title)


def node_pq_panel(trace: RoundTrace, node_id: int, lang: str = "en", reveal: bool = True) -> tuple[str, go.Figure]:
    """`node_pq_figure` with its title returned beside the figure instead of inside it (pages
    put it above the chart, clear of the modebar)."""
    title, p_top, q_top, hl = _node_pq(trace, node_id, lang, reveal)
    return title, pq_bars_figure(p_top, q_top, lang, highlight=hl)


# ---------------------------------------------------------------------- text by source
def token_sources(traces: list[RoundTrace]) -> list[tuple[str, str, int]]:
    """(token text, source, round index) for every committed token, in order."""
    out = []
    for tr in traces:
        n_acc = len(tr.committed) - 1
        for j, txt in enumerate(tr.committed_text):
            if j < n_acc:
                src = "accepted"
            elif j == n_acc and tr.committed[-1] == tr.extra_token:
                src = tr.extra_source
            else:  # cut at EOS before the extra token
                src = "accepted"
            out.append((txt, src, tr.round_index))
    return out


def colored_text_html(traces: list[RoundTrace], lang: str = "en", by_round: bool = False) -> str:
    """The generated text as HTML spans coloured by how each token was produced (or by round)."""
    parts = []
    for txt, src, r in token_sources(traces):
        if by_round:
            bg = "rgba(31,119,180,0.16)" if r % 2 == 0 else "rgba(255,187,120,0.30)"
        else:
            bg = SOURCE_BG.get(src, "transparent")
        title = html.escape(f"{t('source.' + src, lang)} · {t('text.round', lang)} {r + 1}", quote=True)
        body = html.escape(txt).replace("\n", "<br>")
        parts.append(f'<span title="{title}" style="background:{bg};border-radius:3px;padding:1px 0">{body}</span>')
    return '<div style="line-height:1.9;font-size:1.02rem;white-space:pre-wrap">' + "".join(parts) + "</div>"


def legend_html(lang: str = "en", sources=("accepted", "bonus", "resampled", "vanilla")) -> str:
    items = [f'<span style="background:{SOURCE_BG[s]};padding:2px 6px;border-radius:3px;margin-right:6px">{html.escape(t("source." + s, lang))}</span>' for s in sources]
    return '<div style="font-size:0.85rem">' + "".join(items) + "</div>"


# ---------------------------------------------------------------------- statistics of runs
def accept_length_hist(lengths_by_method: dict[str, list[int]], lang: str = "en") -> go.Figure:
    """Histogram of tokens per round (accepted drafts + 1) per method, as fractions of rounds."""
    fig = go.Figure()
    top = max([max(v) for v in lengths_by_method.values() if v] + [1])
    for name, v in lengths_by_method.items():
        if not v:
            continue
        c = np.bincount(np.asarray(v, dtype=int), minlength=top + 1)[1:]
        fig.add_trace(go.Bar(x=list(range(1, top + 1)), y=c / max(1, len(v)), name=name))
    fig.update_layout(barmode="group", height=320, margin=dict(l=10, r=10, t=50, b=10),
                      xaxis=dict(title=t("stats.tokens_per_round", lang), dtick=1), yaxis=dict(title=t("stats.fraction_rounds", lang)),
                      legend=LEGEND_TOP)
    return fig


def acceptance_by_depth(traces: list[RoundTrace]) -> list[float]:
    """Fraction of rounds reaching depth d whose path got accepted at depth d (d = 1, 2, ...).

    A round 'reaches' depth d when its accepted path has length >= d-1 and the tree holds a
    node at depth d; it is accepted at d when the accepted path has length >= d."""
    max_d = max((n.depth for tr in traces for n in tr.nodes), default=0)
    out = []
    for d in range(1, max_d + 1):
        tried = acc = 0
        for tr in traces:
            if len(tr.accepted_nodes) >= d - 1 and any(n.depth == d for n in tr.nodes):
                tried += 1
                acc += len(tr.accepted_nodes) >= d
        out.append(acc / tried if tried else float("nan"))
    return out


def depth_acceptance_figure(rates_by_method: dict[str, list[float]], lang: str = "en") -> go.Figure:
    fig = go.Figure()
    for name, r in rates_by_method.items():
        if r:
            fig.add_trace(go.Scatter(x=list(range(1, len(r) + 1)), y=r, mode="lines+markers", name=name))
    fig.update_layout(height=320, margin=dict(l=10, r=10, t=50, b=10), xaxis=dict(title=t("tree.depth", lang), dtick=1),
                      yaxis=dict(title=t("stats.accept_rate", lang), range=[0, 1.05]), legend=LEGEND_TOP)
    return fig


def round_time_figure(methods: dict, lang: str = "en") -> go.Figure:
    """Where each method's round goes, from a `specviz.bench` result: stacked ms per round
    (drafting, target pass + acceptance, the rest, and the prompt's prefill spread over the rounds), labelled with tau and tokens/s. A method
    pays off when tau outgrows its round time measured in vanilla rounds."""
    names = [m for m, s in methods.items() if isinstance(s, dict) and isinstance(s.get("per_round_ms"), dict)]
    parts = (("draft", "#f58518"), ("verify", "#4c78a8"), ("other", "#bab0ac"), ("prefill", "#e0dcd6"))
    parts = tuple(p for p in parts if all(p[0] in methods[m]["per_round_ms"] for m in names))  # older files: no prefill
    fig = go.Figure()
    for key, color in parts:
        fig.add_trace(go.Bar(y=names, x=[max(0.0, methods[m]["per_round_ms"][key]) for m in names], orientation="h",
                             name=t("bench." + key, lang), marker_color=color))
    for m in names:
        s = methods[m]
        total = sum(max(0.0, s["per_round_ms"][k]) for k, _ in parts)
        tau = s.get("tau") or 1.0
        fig.add_annotation(x=total, y=m, xanchor="left", showarrow=False,
                           text=f"  tau {tau:.2f} · {s.get('tokens_per_s', 0):.1f} {t('bench.tok_s', lang)}")
    fig.update_layout(barmode="stack", height=70 + 34 * max(1, len(names)), margin=dict(l=10, r=150, t=50, b=10),
                      xaxis=dict(title=t("bench.ms_round", lang)), legend=LEGEND_TOP)
    return fig


def samples_hist_figure(labels: list[str], counts: dict[str, list[float]], lang: str = "en", expected: list[float] | None = None) -> go.Figure:
    """Side-by-side frequencies of sampled outcomes per sampler (counts normalised), with the
    exact target probabilities as markers when given."""
    fig = go.Figure()
    for name, c in counts.items():
        c = np.asarray(c, dtype=float)
        fig.add_trace(go.Bar(x=labels, y=c / max(1.0, c.sum()), name=name))
    if expected is not None:
        fig.add_trace(go.Scatter(x=labels, y=expected, mode="markers", name=t("loss.exact_p", lang),
                                 marker=dict(symbol="diamond", size=9, color="#111")))
    fig.update_layout(barmode="group", height=360, margin=dict(l=10, r=10, t=50, b=10),
                      yaxis=dict(title=t("stats.frequency", lang)), xaxis=dict(tickangle=-45),
                      legend=LEGEND_TOP)
    return fig


# ---------------------------------------------------------------------- latency
def latency_curve_figure(n_tokens: list[int], ms: list[float], lang: str = "en", ms_spread=None, label: str | None = None,
                         ms_min=None, ms_max=None) -> go.Figure:
    """Target forward latency vs tokens in one pass (median; whiskers from min to max when
    given), with the 'N separate passes' line."""
    fig = go.Figure()
    err = None if ms_spread is None else dict(type="data", array=ms_spread, visible=True)
    if ms_min is not None and ms_max is not None:
        err = dict(type="data", symmetric=False, array=[hi - m for hi, m in zip(ms_max, ms)],
                   arrayminus=[m - lo for lo, m in zip(ms_min, ms)], visible=True, thickness=1)
    fig.add_trace(go.Scatter(x=n_tokens, y=ms, mode="lines+markers", name=label or t("free.one_pass", lang), error_y=err))
    if n_tokens and n_tokens[0] == 1:
        fig.add_trace(go.Scatter(x=n_tokens, y=[ms[0] * n for n in n_tokens], mode="lines", line=dict(dash="dot", color="#999"),
                                 name=t("free.n_passes", lang)))
    fig.update_layout(height=360, margin=dict(l=10, r=10, t=50, b=10), xaxis=dict(title=t("free.tokens_axis", lang)),
                      yaxis=dict(title=t("free.ms_axis", lang), rangemode="tozero"), legend=LEGEND_TOP)
    return fig


def latency_grid_figure(batches: list[int], n_tokens: list[int], ms: list[list[float]], lang: str = "en") -> go.Figure:
    """One line per batch size: latency of a pass of B sequences x N tokens, relative to N=1."""
    fig = go.Figure()
    for b, row in zip(batches, ms):
        fig.add_trace(go.Scatter(x=n_tokens, y=[m / row[0] for m in row], mode="lines+markers", name=f"B={b}",
                                 customdata=row, hovertemplate="N=%{x}<br>%{y:.2f}x · %{customdata:.1f} ms<extra>B=" + str(b) + "</extra>"))
    fig.update_layout(height=360, margin=dict(l=10, r=10, t=50, b=10), xaxis=dict(title=t("free.tokens_axis", lang)),
                      yaxis=dict(title=t("free.rel_axis", lang), rangemode="tozero"), legend=LEGEND_TOP)
    return fig


def speedup_by_batch_figure(batches: list[int], speedups: list[float], lang: str = "en") -> go.Figure:
    fig = go.Figure(go.Bar(x=[str(b) for b in batches], y=speedups, marker_color="#2ca02c", text=[f"{s:.2f}x" for s in speedups], textposition="outside"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#888")
    fig.update_layout(height=320, margin=dict(l=10, r=10, t=50, b=10), xaxis=dict(title=t("free.batch_axis", lang), type="category"),
                      yaxis=dict(title=t("free.speedup_axis", lang), rangemode="tozero"))
    return fig


# ---------------------------------------------------------------------- toy acceptance rule
def toy_chain_figure(vocab: list[str], parts, lang: str = "en") -> go.Figure:
    """Stacked bars per token: accepted draft mass min(p,q) + mass from the residual = p; q as
    an outline marker."""
    fig = go.Figure()
    fig.add_trace(go.Bar(x=vocab, y=parts.accepted, name=t("toy.accepted_mass", lang), marker_color="#2ca02c"))
    fig.add_trace(go.Bar(x=vocab, y=parts.from_residual, name=t("toy.residual_mass", lang), marker_color="#ff7f0e"))
    fig.add_trace(go.Scatter(x=vocab, y=parts.p, mode="markers", name="p", marker=dict(symbol="line-ew", size=40, line=dict(width=3, color="#1f77b4"))))
    fig.add_trace(go.Scatter(x=vocab, y=parts.q, mode="markers", name="q", marker=dict(symbol="circle-open", size=13, color="#111", line=dict(width=2, color="#111"))))
    fig.update_layout(barmode="stack", height=360, margin=dict(l=10, r=10, t=50, b=10), yaxis=dict(title=t("pq.prob", lang), rangemode="tozero"),
                      legend=LEGEND_TOP)
    return fig


def toy_two_figure(vocab: list[str], parts, lang: str = "en") -> go.Figure:
    fig = go.Figure()
    fig.add_trace(go.Bar(x=vocab, y=parts.via1, name=t("toy.via1", lang, tok=vocab[parts.x1]), marker_color="#2ca02c"))
    fig.add_trace(go.Bar(x=vocab, y=parts.via2, name=t("toy.via2", lang, tok=vocab[parts.x2]), marker_color="#98df8a"))
    fig.add_trace(go.Bar(x=vocab, y=parts.via_res, name=t("toy.via_res", lang), marker_color="#ff7f0e"))
    fig.add_trace(go.Scatter(x=vocab, y=parts.p, mode="markers", name="p", marker=dict(symbol="line-ew", size=40, line=dict(width=3, color="#1f77b4"))))
    fig.update_layout(barmode="stack", height=360, margin=dict(l=10, r=10, t=50, b=10), yaxis=dict(title=t("pq.prob", lang), rangemode="tozero"),
                      legend=LEGEND_TOP)
    return fig


def toy_sim_figure(vocab: list[str], counts, p, lang: str = "en") -> go.Figure:
    c = np.asarray(counts, dtype=float)
    fig = go.Figure()
    fig.add_trace(go.Bar(x=vocab, y=c / max(1.0, c.sum()), name=t("toy.simulated", lang), marker_color="#9467bd"))
    fig.add_trace(go.Scatter(x=vocab, y=p, mode="markers", name="p", marker=dict(symbol="diamond", size=11, color="#1f77b4")))
    fig.update_layout(height=300, margin=dict(l=10, r=10, t=50, b=10), yaxis=dict(title=t("stats.frequency", lang), rangemode="tozero"),
                      legend=LEGEND_TOP)
    return fig


def figure_html(fig: go.Figure) -> str:
    """A standalone HTML page of the figure (Plotly JS inlined: works offline, for slides)."""
    return fig.to_html(include_plotlyjs=True, full_html=True)
