"""Pure figure builders for batched serving: a batched benchmark's `by_batch` (specviz.bench.batched)
or a recorded batched round (specviz.teaching.lesson_batch) in, Plotly figures and tables out.

Why these figures: at B = 1 a draft tree's extra tokens ride on compute the one sequence leaves
idle; a batch spends that compute on other users, so speculation's edge shrinks as B grows. The
throughput lines show where it vanishes (the crossover), the per-user lines what one user feels,
and the recorded round shows why: every user's tree goes through one pass under a block-diagonal
mask, so the pass grows with the sum of the trees.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..i18n import t
from ..core.trace import RoundTrace
from .compare import METHOD_COLORS
from .figures import LEGEND_TOP, show_token, spec_figure, tree_figure

ORDER = ("vanilla", "eagle3", "eagle3@paper", "pld")  # the lines' order; other methods follow
COLORS = {**METHOD_COLORS, "eagle3@paper": "#4c78a8"}
USER_COLORS = ("#4c78a8", "#f58518", "#b279a2", "#72b7b2", "#9d755d", "#e45756", "#eeca3b", "#ff9da6")
HIDDEN = "#f2f2f2"
MARGIN = dict(l=10, r=10, t=50, b=10)
LEGEND_BELOW = dict(orientation="h", yanchor="top", y=-0.3, x=0)  # half-width charts: a legend on top would run under the modebar


def method_label(spec: str, lang: str = "en", trees: dict | None = None) -> str:
    """'eagle3@paper' -> "EAGLE-3, papers' tree"; a method whose tree the benchmark tuned for its
    device (trees[spec]['source'] == 'device-tuned') -> "EAGLE-3, tuned tree"; else its plain label."""
    name, _, tree = spec.partition("@")
    base = t("m." + name, lang)
    if tree == "paper":
        return t("batch.m_paper", lang, m=base)
    if ((trees or {}).get(spec) or {}).get("source") == "device-tuned":
        return t("batch.m_tuned", lang, m=base)
    return base


def methods_of(by_batch: dict) -> list[str]:
    """Every method measured at some B, in ORDER (vanilla first), others after by name."""
    seen = {m for entry in by_batch.values() for m in entry}
    return [m for m in ORDER if m in seen] + sorted(seen - set(ORDER))


def batch_sizes(by_batch: dict) -> list[int]:
    return sorted(int(b) for b in by_batch)


def _color(spec: str) -> str:
    return COLORS.get(spec) or COLORS.get(spec.partition("@")[0], "#555")


def _lines(by_batch: dict, key: str, lang: str, trees, dash: str | None, suffix: str, unit: str) -> list[dict]:
    out = []
    for m in methods_of(by_batch):
        bs = [b for b in batch_sizes(by_batch) if m in by_batch[str(b)]]
        name = method_label(m, lang, trees) + suffix
        out.append(dict(
            type="scatter", x=[str(b) for b in bs], y=[by_batch[str(b)][m][key] for b in bs], mode="lines+markers", name=name,
            line=dict(color=_color(m), width=3 if m == "eagle3" else 2, dash=dash or "solid"),
            marker=dict(size=8), hovertemplate=f"B=%{{x}}: %{{y:.1f}} {unit}<extra>{html.escape(name)}</extra>",
        ))
    return out


def _categories(*by_batches) -> list[str]:
    return [str(b) for b in sorted({int(b) for bb in by_batches if bb for b in bb})]


def _crossover_marks(b: int | None, cats: list[str], lang: str, text_key: str, y: float, color: str) -> tuple[list[dict], list[dict]]:
    """A dashed vertical line and its label at batch size `b`. On a category axis Plotly reads a
    number-like string ("2") in a shape or an annotation as the index of a category, so they are
    placed by the index of b's category."""
    if b is None or str(b) not in cats:
        return [], []
    x = cats.index(str(b))
    line = dict(type="line", xref="x", yref="paper", x0=x, x1=x, y0=0, y1=1, line=dict(color=color, width=2, dash="dash"))
    note = dict(x=x, xref="x", y=y, yref="paper", xanchor="left", yanchor="top", showarrow=False, xshift=6,
                text=t(text_key, lang, b=b), font=dict(size=12, color=color), bgcolor="rgba(255,255,255,0.85)")
    return [line], [note]


def _by_batch_figure(key: str, axis_key: str, unit: str, by_batch: dict, lang: str, trees, gpu_by_batch, gpu_trees,
                     crossover_b=None, gpu_crossover_b=None, legend: dict = LEGEND_TOP) -> go.Figure:
    data = _lines(by_batch, key, lang, trees, None, "", unit)
    if gpu_by_batch:
        data += _lines(gpu_by_batch, key, lang, gpu_trees, "dash", t("batch.on_gpu", lang), unit)
    cats = _categories(by_batch, gpu_by_batch)
    shapes, notes = _crossover_marks(crossover_b, cats, lang, "batch.cross_mark", 0.98, "#333")
    s2, n2 = _crossover_marks(gpu_crossover_b, cats, lang, "batch.cross_mark_gpu", 0.86, "#777")
    return spec_figure(data, dict(
        height=400, margin=MARGIN, legend=legend, plot_bgcolor="white", shapes=shapes + s2, annotations=notes + n2,
        xaxis=dict(title=dict(text=t("batch.ax_batch", lang)), type="category", categoryorder="array",
                   categoryarray=cats, gridcolor="#eee"),
        yaxis=dict(title=dict(text=t(axis_key, lang)), rangemode="tozero", gridcolor="#eee"),
    ))


def throughput_figure(by_batch: dict, lang: str = "en", crossover_b: int | None = None, trees: dict | None = None,
                      gpu_by_batch: dict | None = None, gpu_trees: dict | None = None, gpu_crossover_b: int | None = None) -> go.Figure:
    """Every user's tokens per second together against the batch size B, one line per method (a
    GPU measurement, when given, dashed), with a dashed vertical line at `crossover_b`: the
    smallest B where EAGLE-3 no longer beats vanilla (specviz.bench.batched.crossover)."""
    return _by_batch_figure("throughput_tok_s", "batch.ax_throughput", t("bench.tok_s", lang), by_batch, lang, trees,
                            gpu_by_batch, gpu_trees, crossover_b, gpu_crossover_b)


def per_user_figure(by_batch: dict, lang: str = "en", trees: dict | None = None, gpu_by_batch: dict | None = None,
                    gpu_trees: dict | None = None) -> go.Figure:
    """What one user sees: a sequence's own tokens per second against B (each user waits for the
    whole batch's pass, so it falls as B grows while the server's throughput rises)."""
    return _by_batch_figure("per_seq_tok_s", "batch.ax_per_user", t("bench.tok_s", lang), by_batch, lang, trees,
                            gpu_by_batch, gpu_trees, legend=LEGEND_BELOW)


def ratio_figure(by_batch: dict, lang: str = "en", trees: dict | None = None, base: str = "vanilla") -> go.Figure:
    """Each speculative method's throughput over vanilla's at the same B, as bars, with the
    break-even line at 1.0: a bar below it is a batch size where drafting costs throughput."""
    data = []
    for m in methods_of(by_batch):
        if m == base:
            continue
        bs = [b for b in batch_sizes(by_batch) if m in by_batch[str(b)] and base in by_batch[str(b)]]
        r = [by_batch[str(b)][m]["throughput_tok_s"] / by_batch[str(b)][base]["throughput_tok_s"] for b in bs]
        data.append(dict(type="bar", x=[str(b) for b in bs], y=r, name=method_label(m, lang, trees), marker=dict(color=_color(m)),
                         text=[f"{x:.2f}x" for x in r], textposition="outside", cliponaxis=False,
                         hovertemplate="B=%{x}: %{y:.2f}x<extra></extra>"))
    top = max([y for d in data for y in d["y"]] + [1.0])
    return spec_figure(data, dict(
        height=400, margin=MARGIN, legend=LEGEND_BELOW, plot_bgcolor="white", barmode="group",
        shapes=[dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=1, y1=1, line=dict(color="#333", width=1.5, dash="dot"))],
        annotations=[dict(xref="paper", x=1, y=1, yref="y", xanchor="right", yanchor="bottom", showarrow=False,
                          text=t("batch.break_even", lang), font=dict(size=11, color="#333"))],
        xaxis=dict(title=dict(text=t("batch.ax_batch", lang)), type="category", categoryarray=_categories(by_batch),
                   categoryorder="array"),
        yaxis=dict(title=dict(text=t("batch.ax_ratio", lang)), range=[0, top * 1.18], gridcolor="#eee"),
    ))


def batch_table(by_batch: dict, lang: str = "en", trees: dict | None = None) -> pd.DataFrame:
    """The measured numbers behind the figures, one row per batch size and method."""
    rows = []
    for b in batch_sizes(by_batch):
        for m in methods_of(by_batch):
            e = by_batch[str(b)].get(m)
            if e is None:
                continue
            same = e.get("identical_to_vanilla")
            rows.append({
                t("batch.col_b", lang): b,
                t("batch.col_method", lang): method_label(m, lang, trees),
                t("batch.col_throughput", lang): round(e["throughput_tok_s"], 1),
                t("batch.col_per_user", lang): round(e["per_seq_tok_s"], 1),
                t("batch.col_ratio", lang): f"{e['speedup_vs_vanilla']:.2f}x" if "speedup_vs_vanilla" in e else "–",
                t("batch.col_tau", lang): round(e["tau"], 2),
                t("batch.col_rows", lang): round(e["per_round_ms"]["rows"], 1),
                t("batch.col_pass_ms", lang): round(e["per_round_ms"]["verify"], 1),
                t("batch.col_same", lang): "–" if same is None else t("batch.yes" if same else "batch.no", lang),
            })
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------- one batched round
def batch_trees_figure(traces: list[RoundTrace], lang: str = "en", titles: list[str] | None = None) -> go.Figure:
    """Each user's draft tree of one batched round side by side (the solo tree figure's nodes,
    colours and hover in one subplot per user); a status appears once in the legend."""
    n = max(1, len(traces))
    gap = 0.04
    data, layout, notes, seen, heights = [], {}, [], set(), []
    for i, tr_ in enumerate(traces):
        f = tree_figure(tr_, lang).to_dict()
        ax = "" if i == 0 else str(i + 1)
        for d in f["data"]:
            d = dict(d, xaxis="x" + ax, yaxis="y" + ax)
            name = d.get("name")
            if name is not None:
                d["legendgroup"] = name
                d["showlegend"] = name not in seen
                seen.add(name)
            data.append(d)
        fl = f["layout"]
        lo, hi = fl["xaxis"]["range"]  # room on the left for the root's label, centred on its node
        layout["xaxis" + ax] = dict(fl["xaxis"], range=[lo - 0.35, hi], domain=[i / n + gap / 2, (i + 1) / n - gap / 2], anchor="y" + ax)
        layout["yaxis" + ax] = dict(fl["yaxis"], anchor="x" + ax)
        heights.append(fl.get("height") or 300)
        title = titles[i] if titles and i < len(titles) else t("batch.user", lang, n=i + 1)
        notes.append(dict(text=f"<b>{html.escape(title)}</b>", x=(i + 0.5) / n, xref="paper", y=1.0, yref="paper", yanchor="bottom",
                          showarrow=False, font=dict(size=13)))
    return spec_figure(data, dict(
        layout, height=max(heights, default=300) + 30, margin=dict(l=10, r=10, t=60, b=10), annotations=notes, plot_bgcolor="white",
        legend=dict(orientation="h", yanchor="top", y=-0.3, x=0), hoverlabel=dict(align="left"),
    ))


def batch_mask(traces: list[RoundTrace]) -> np.ndarray:
    """The attention mask of the one shared pass over every user's tree: block-diagonal, block k
    is user k's own tree mask (a token sees its ancestors and itself, in its own tree only)."""
    sizes = [len(tr_.nodes) for tr_ in traces]
    m = np.zeros((sum(sizes), sum(sizes)), dtype=int)
    at = 0
    for tr_, k in zip(traces, sizes):
        m[at:at + k, at:at + k] = np.array(tr_.tree_mask, dtype=int) if tr_.tree_mask else np.eye(k, dtype=int)
        at += k
    return m


def batch_mask_figure(traces: list[RoundTrace], lang: str = "en") -> go.Figure:
    """The shared pass's mask as a heatmap: rows (queries) and columns (keys) are every token of the
    pass, grouped per user with separators; a visible cell takes its user's colour (z = user + 1),
    a hidden one is grey (z = 0). Each user's committed text sits in its own cache, not drawn here."""
    mask = batch_mask(traces)
    owner = [u for u, tr_ in enumerate(traces) for _ in tr_.nodes]
    nodes = [nd for tr_ in traces for nd in tr_.nodes]
    labels = [f"U{u + 1} #{nd.id} {show_token(nd.text)[:10]}" for u, nd in zip(owner, nodes)]
    z = (mask * (np.array(owner)[:, None] + 1)).tolist()
    users = [t("batch.user", lang, n=u + 1) for u in range(len(traces))]

    def why(i: int, j: int) -> str:
        if owner[i] != owner[j]:
            return t("batch.mask_other_user", lang)
        if mask[i, j]:
            return t("mask.k_self" if i == j else "mask.k_ancestor", lang)
        return t("batch.mask_other_branch", lang)

    hover = [[f"{html.escape(users[owner[i]])}: {html.escape(labels[i])}<br>{t('mask.col', lang)} {html.escape(labels[j])}<br>{why(i, j)}"
              for j in range(len(nodes))] for i in range(len(nodes))]
    k = len(traces)
    scale = []
    for v, col in enumerate([HIDDEN] + [USER_COLORS[u % len(USER_COLORS)] for u in range(k)]):
        scale += [[v / (k + 1), col], [(v + 1) / (k + 1), col]]
    data = [dict(type="heatmap", z=z, x=labels, y=labels, zmin=0, zmax=k + 1, colorscale=scale, showscale=False, hovertext=hover,
                 hoverinfo="text", xgap=1, ygap=1)]
    for u in range(k):  # legend entries for a heatmap: one invisible marker per user, and hidden
        data.append(dict(type="scatter", x=[None], y=[None], mode="markers", name=t("batch.mask_user_sees", lang, user=users[u]),
                         marker=dict(symbol="square", size=12, color=USER_COLORS[u % len(USER_COLORS)])))
    data.append(dict(type="scatter", x=[None], y=[None], mode="markers", name=t("mask.k_hidden", lang),
                     marker=dict(symbol="square", size=12, color=HIDDEN, line=dict(color="#999", width=1))))
    shapes, at, n = [], 0, len(nodes)
    for tr_ in traces:
        a, b = at - 0.5, at + len(tr_.nodes) - 0.5
        shapes.append(dict(type="rect", x0=a, x1=b, y0=a, y1=b, line=dict(color="#333", width=1.5)))
        if at:
            shapes.append(dict(type="line", x0=a, x1=a, y0=-0.5, y1=n - 0.5, line=dict(color="#999", width=1, dash="dot")))
            shapes.append(dict(type="line", x0=-0.5, x1=n - 0.5, y0=a, y1=a, line=dict(color="#999", width=1, dash="dot")))
        at += len(tr_.nodes)
    return spec_figure(data, dict(
        height=max(360, min(1300, 200 + 24 * n)), shapes=shapes, margin=dict(l=10, r=10, t=60, b=10), plot_bgcolor="white",
        legend={**LEGEND_TOP, "font": dict(size=11)},
        yaxis=dict(autorange="reversed", title=dict(text=t("batch.mask_rows", lang), standoff=4), tickfont=dict(size=10), automargin=True),
        xaxis=dict(title=dict(text=t("batch.mask_cols", lang), standoff=4), tickangle=-60, tickfont=dict(size=10), automargin=True),
        hoverlabel=dict(align="left"),
    ))
