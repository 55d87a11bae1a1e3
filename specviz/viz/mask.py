"""Tree attention as it is: the mask of one verify pass, with the committed prefix, siblings
and a selected node's path made visible. A pure function of a `RoundTrace`.

Rows are the tree's nodes (queries); columns are the last few committed tokens (every node sees
all of them) followed by the tree's nodes (keys). A node sees its ancestors and itself; nodes
that share a parent are *siblings*: they sit at the same position but must not see each other,
which is what makes one pass score many alternative continuations at once.
"""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from ..i18n import t
from ..core.trace import RoundTrace
from .figures import LEGEND_TOP, ancestors, show_token

# cell kinds: value, colour, i18n key of the legend entry
KINDS = (
    (0, "#f2f2f2", "mask.k_hidden"),
    (1, "#c6dbef", "mask.k_prefix"),
    (2, "#6baed6", "mask.k_ancestor"),
    (3, "#2171b5", "mask.k_self"),
    (4, "#fdae6b", "mask.k_sibling"),
    (5, "#08306b", "mask.k_path"),
)


def _colorscale():
    n = len(KINDS)
    out = []
    for v, col, _ in KINDS:
        out += [[v / n, col], [(v + 1) / n, col]]
    return out


def mask_cells(trace: RoundTrace, selected: int | None = None, n_prefix: int = 3) -> np.ndarray:
    """[N, n_prefix + N] cell kinds (see KINDS). The selected node's row shows its visible cells
    as 'path'."""
    n = len(trace.nodes)
    m = np.array(trace.tree_mask, dtype=int) if trace.tree_mask else np.eye(n, dtype=int)
    parent = [nd.parent for nd in trace.nodes]
    z = np.zeros((n, n_prefix + n), dtype=int)
    z[:, :n_prefix] = 1
    for i in range(n):
        for j in range(n):
            if i == j:
                z[i, n_prefix + j] = 3
            elif m[i, j]:
                z[i, n_prefix + j] = 2
            elif parent[i] >= 0 and parent[i] == parent[j]:
                z[i, n_prefix + j] = 4
    if selected is not None and 0 <= selected < n:
        for j in ancestors(trace, selected):
            z[selected, n_prefix + j] = 5
        z[selected, :n_prefix] = 5
    return z


def attention_figure(trace: RoundTrace, lang: str = "en", selected: int | None = None, prefix_tail=None, n_prefix: int = 3) -> go.Figure:
    """The tree-attention mask with `n_prefix` committed-prefix columns (labelled with
    `prefix_tail` = [[token id, text], ...] when known), siblings in orange, a legend, and for a
    selected node: its row and its ancestors' columns outlined, its visible cells dark."""
    n = len(trace.nodes)
    L = trace.prefix_len
    n_prefix = max(0, min(n_prefix, L))
    tail = [x[1] for x in list(prefix_tail or [])[-n_prefix:]] if n_prefix else []
    texts = [""] * (n_prefix - len(tail)) + tail
    pre_labels = [f"ctx {show_token(txt)[:8]} @{L - n_prefix + k}" if txt else f"ctx @{L - n_prefix + k}" for k, txt in enumerate(texts)]
    labels = [f"#{nd.id} {show_token(nd.text)[:10]} @{trace.position_ids[i] if i < len(trace.position_ids) else nd.position}"
              for i, nd in enumerate(trace.nodes)]
    cols = pre_labels + labels
    z = mask_cells(trace, selected, n_prefix)
    kind_text = {v: t(key, lang) for v, _, key in KINDS}
    hover = [[f"{t('mask.row', lang)} {html.escape(labels[i])}<br>{t('mask.col', lang)} {html.escape(cols[j])}<br>{kind_text[z[i, j]]}"
              for j in range(len(cols))] for i in range(n)]
    fig = go.Figure(go.Heatmap(z=z, x=cols, y=labels, zmin=0, zmax=len(KINDS), colorscale=_colorscale(), showscale=False,
                               hovertext=hover, hoverinfo="text", xgap=1, ygap=1))
    for v, col, key in KINDS:  # legend entries for a heatmap: one invisible marker per kind
        if v == 5 and selected is None:
            continue
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", marker=dict(symbol="square", size=12, color=col,
                                 line=dict(color="#999", width=1)), name=t(key, lang), showlegend=True))
    shapes = []
    if n_prefix:
        shapes.append(dict(type="line", x0=n_prefix - 0.5, x1=n_prefix - 0.5, y0=-0.5, y1=n - 0.5, line=dict(color="#333", width=2)))
    if selected is not None and 0 <= selected < n:
        shapes.append(dict(type="rect", x0=-0.5, x1=len(cols) - 0.5, y0=selected - 0.5, y1=selected + 0.5,
                           line=dict(color="#d62728", width=2)))
        for j in ancestors(trace, selected):
            shapes.append(dict(type="rect", x0=n_prefix + j - 0.5, x1=n_prefix + j + 0.5, y0=-0.5, y1=n - 0.5,
                               line=dict(color="#d62728", width=1.5, dash="dot")))
    size = max(320, min(1300, 160 + 22 * n))
    fig.update_layout(
        height=size, shapes=shapes, margin=dict(l=10, r=10, t=80, b=10), plot_bgcolor="white",
        yaxis=dict(autorange="reversed", title=dict(text=t("mask.row_axis", lang), standoff=4), tickfont=dict(size=10), automargin=True),
        xaxis=dict(title=dict(text=t("mask.col_axis_prefix", lang, k=n_prefix, L=L), standoff=4), tickangle=-60, tickfont=dict(size=10),
                   side="bottom", automargin=True),
        legend={**LEGEND_TOP, "font": dict(size=11)},
    )
    return fig
