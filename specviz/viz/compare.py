"""Pure figure builders (and the small sums behind them) for the Compare, Why-it-is-free,
Losslessness and acceptance-rule pages.

Measured numbers in, Plotly figures out: nothing here runs a model or touches Streamlit.
Acceptance (how many tokens a round keeps: a property of drafter and target) and speed (what a
round costs: a property of the machine) are kept in separate functions on purpose; the
*what-if* combines them with one formula, `speedup = tau(N) * t(1) / (t(N) + t_draft(N))`.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..i18n import t
from ..runtime.machine import interpolate  # the one reader of a measured cost curve

LEGEND = dict(orientation="h", yanchor="bottom", y=1.02, x=0, xanchor="left")
MARGIN = dict(l=10, r=10, t=50, b=10)
METHOD_COLORS = {"eagle1": "#4c78a8", "eagle2": "#f58518", "eagle3": "#54a24b", "medusa": "#b279a2",
                 "sps": "#9d755d", "pld": "#72b7b2", "vanilla": "#888888"}


# ---------------------------------------------------------------------- acceptance (device independent)
def profile_tau_curve(profile: dict, depth: int = 5) -> tuple[list[int], list[float]]:
    """Tree sizes N (nodes incl. the root) and the mean accepted length tau(N) of a shipped
    acceptance profile (`specviz.tuning`): a dynamic tree at the given depth, a static tree
    cut to its N-1 most useful nodes."""
    if profile["kind"] == "dynamic":
        d = max(1, min(int(depth), int(profile["max_depth"])))
        row = profile["tau"][d - 1]
    else:
        row = profile["tau"]
    return list(range(1, len(row) + 1)), [float(x) for x in row]


def tau_at(curve: tuple[list[int], list[float]], n: int) -> float:
    """tau of a curve at size n (its largest tree when n is beyond it)."""
    sizes, taus = curve
    return taus[min(max(n, sizes[0]), sizes[-1]) - sizes[0]]


def benchmark_tree_size(entry: dict) -> float | None:
    """The tree a benchmark entry verified: the measured mean nodes a round (to 0.1), else its
    tree's total_tokens. A tree with a probability floor has no size of its own: its total_tokens
    is only the cap (64 for ~2 nodes a round)."""
    nodes = (entry.get("per_round_ms") or {}).get("nodes")
    if isinstance(nodes, (int, float)):
        return round(nodes, 1)
    return (entry.get("tree") or {}).get("total_tokens")


def tau_by_size_figure(curves: dict[str, tuple[list[int], list[float]]], lang: str = "en", mark_n: int | None = None,
                       colors: dict[str, str] | None = None) -> go.Figure:
    """tau against tree size, one line per method; a dotted line at the compared size."""
    fig = go.Figure()
    for name, (sizes, taus) in curves.items():
        fig.add_trace(go.Scatter(x=sizes, y=taus, mode="lines+markers", name=name, marker=dict(size=5),
                                 line=dict(color=(colors or {}).get(name))))
    if mark_n:
        fig.add_vline(x=mark_n, line_dash="dot", line_color="#666",
                      annotation_text=t("cmpx.size_mark", lang, n=mark_n), annotation_position="top left")
    fig.update_layout(height=360, margin=MARGIN, legend=LEGEND, xaxis=dict(title=t("cmpx.size_axis", lang)),
                      yaxis=dict(title=t("cmpx.tau_axis", lang), rangemode="tozero"))
    return fig


def recorded_lengths(rounds: list) -> list[int]:
    """Tokens per round (accepted drafts + 1) from recorded rounds [accepted, tree depth, nodes]."""
    return [int(r[0]) + 1 for r in rounds]


def recorded_depth_rates(rounds: list) -> list[float]:
    """Per depth d: of the rounds that reached depth d (accepted d-1 tokens and the tree had a node
    at depth d), the fraction that accepted a token there. Same definition as the live view."""
    max_d = max((int(r[1]) for r in rounds), default=0)
    out = []
    for d in range(1, max_d + 1):
        tried = [r for r in rounds if r[0] >= d - 1 and r[1] >= d]
        out.append(sum(r[0] >= d for r in tried) / len(tried) if tried else float("nan"))
    return out


def bar_with_values(labels: list[str], values: list[float], lang: str = "en", title_key: str = "cmpx.tau_axis",
                    colors: list[str] | None = None, fmt: str = "{:.2f}") -> go.Figure:
    """One bar per method with its value written on it."""
    fig = go.Figure(go.Bar(x=labels, y=values, marker_color=colors, text=[fmt.format(v) for v in values],
                           textposition="outside", cliponaxis=False))
    fig.update_layout(height=300, margin=MARGIN, yaxis=dict(title=t(title_key, lang), rangemode="tozero"),
                      xaxis=dict(type="category"))
    return fig


# ---------------------------------------------------------------------- the hardware what-if
def whatif_speedup(tau: float, t1: float, tn: float, t_draft: float = 0.0, overhead: float = 0.0,
                   overhead_1: float | None = None) -> float:
    """Predicted speedup over vanilla: tau tokens per round of t(N) + t_draft, against one token
    per vanilla step of t(1) (both plus the engine's other cost per round: `overhead` for the
    tree's round, `overhead_1` for vanilla's, default the same)."""
    denom = tn + t_draft + overhead
    van = t1 + (overhead if overhead_1 is None else overhead_1)
    return float(tau * van / denom) if denom > 0 else float("nan")


def whatif_series(curve: tuple[list[int], list[float]], forward: dict, draft_s, overhead: float | dict = 0.0,
                  sizes: list[int] | None = None) -> tuple[list[int], list[float]]:
    """Predicted speedup at every tree size; `draft_s(n)` gives the drafting seconds at size n;
    `overhead`: one number, or the engine's other cost measured by tree size ({n: s}, "1" vanilla's)."""
    ns = sizes or [n for n in curve[0] if n >= 2]
    t1 = interpolate(forward, 1)
    over = (lambda n: interpolate(overhead, n)) if isinstance(overhead, dict) else (lambda n: float(overhead))  # noqa: E731
    return ns, [whatif_speedup(tau_at(curve, n), t1, interpolate(forward, n), draft_s(n), over(n), over(1)) for n in ns]


def whatif_figure(series: dict[str, tuple[list[int], list[float]]], lang: str = "en", dash: dict[str, str] | None = None,
                  colors: dict[str, str] | None = None) -> go.Figure:
    """Predicted speedup against tree size, one line per (method, machine); 1x marked."""
    fig = go.Figure()
    for name, (ns, sp) in series.items():
        fig.add_trace(go.Scatter(x=ns, y=sp, mode="lines+markers", name=name, marker=dict(size=5),
                                 line=dict(dash=(dash or {}).get(name, "solid"), color=(colors or {}).get(name))))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#888", annotation_text=t("cmpx.vanilla_line", lang),
                  annotation_position="bottom right")
    fig.update_layout(height=380, margin=MARGIN, legend=LEGEND, xaxis=dict(title=t("cmpx.size_axis", lang)),
                      yaxis=dict(title=t("free.speedup_axis", lang), rangemode="tozero"))
    return fig


# ---------------------------------------------------------------------- losslessness
def outcome_probability(outcome: tuple, p_of_prefix) -> float:
    """Exact target probability of a sampled outcome (t1, ..., tk): the product of p(t_i | prompt,
    t_1..t_{i-1}); `p_of_prefix(prefix)` returns the target's (warped) next-token distribution."""
    prob = 1.0
    for i, tok in enumerate(outcome):
        prob *= float(p_of_prefix(tuple(outcome[:i]))[tok])
    return prob


# ---------------------------------------------------------------------- the single-draw stepper
def draw_bars_figure(vocab: list[str], probs, chosen: int | None, lang: str = "en", name: str = "",
                     color: str = "#1f77b4", note_key: str = "toyx.chosen") -> go.Figure:
    """A distribution as bars, the drawn token highlighted and its probability written on it."""
    probs = np.asarray(probs, dtype=float)
    colors = [color if i != chosen else "#d62728" for i in range(len(vocab))]
    fig = go.Figure(go.Bar(x=vocab, y=probs, marker_color=colors, name=name, text=[f"{v:.3f}" for v in probs],
                           textposition="outside", cliponaxis=False))
    if chosen is not None:
        fig.add_annotation(x=vocab[chosen], y=float(probs[chosen]), yshift=28, showarrow=False,
                           text=t(note_key, lang, tok=vocab[chosen], p=float(probs[chosen])), font=dict(color="#d62728"))
    fig.update_layout(height=280, margin=dict(l=10, r=10, t=40, b=10), title=dict(text=name, font=dict(size=14)),
                      yaxis=dict(title=t("pq.prob", lang), range=[0, max(0.05, float(probs.max())) * 1.35]),
                      xaxis=dict(type="category"), showlegend=False)
    return fig


def u_threshold_figure(u: float, threshold: float, lang: str = "en") -> go.Figure:
    """The unit interval split at the acceptance probability, with the uniform draw u on it."""
    fig = go.Figure()
    fig.add_trace(go.Bar(y=[""], x=[threshold], orientation="h", marker_color="#2ca02c",
                         name=t("toyx.accept_zone", lang, a=threshold)))
    fig.add_trace(go.Bar(y=[""], x=[1 - threshold], orientation="h", marker_color="#f4b6b6",
                         name=t("toyx.reject_zone", lang)))
    fig.add_vline(x=u, line_color="#111", line_width=3)
    right = u > 0.5  # the label sits beside the line, on the side with room
    fig.add_annotation(x=u, y=-0.5, yref="y", text=f"u = {u:.3f}", showarrow=False, yshift=-6, font=dict(size=13),
                       xanchor="right" if right else "left", xshift=-6 if right else 6)
    fig.update_layout(barmode="stack", height=190, margin=dict(l=10, r=10, t=40, b=10), legend=LEGEND,
                      xaxis=dict(range=[0, 1], title=t("walk.prob_axis", lang)))
    return fig


# ---------------------------------------------------------------------- why extra tokens are (not) free
def relative_cost_figure(curves: dict[str, tuple[list[int], list[float]]], lang: str = "en",
                         dash: dict[str, str] | None = None) -> go.Figure:
    """t(N) / t(1) for each measured machine: 1 everywhere means extra tokens are free; the
    dotted diagonal is N separate one-token passes (no gain at all)."""
    fig = go.Figure()
    top = 1
    for name, (ns, ms) in curves.items():
        if not ns or not ms or ms[0] <= 0:
            continue
        top = max(top, max(ns))
        fig.add_trace(go.Scatter(x=ns, y=[m / ms[0] for m in ms], mode="lines+markers", name=name,
                                 line=dict(dash=(dash or {}).get(name, "solid")),
                                 customdata=ms, hovertemplate="N=%{x}<br>%{y:.2f}x · %{customdata:.2f} ms<extra></extra>"))
    fig.add_trace(go.Scatter(x=[1, top], y=[1, top], mode="lines", line=dict(dash="dot", color="#999"),
                             name=t("free.n_passes", lang)))
    fig.add_hline(y=1.0, line_dash="dash", line_color="#2ca02c", annotation_text=t("freex.free_line", lang),
                  annotation_position="top left")
    ticks = [n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256) if n <= top]
    fig.update_layout(height=380, margin=MARGIN, legend=LEGEND,
                      xaxis=dict(title=t("free.tokens_axis", lang), type="log", tickvals=ticks, ticktext=[str(n) for n in ticks]),
                      yaxis=dict(title=t("free.rel_axis", lang), rangemode="tozero"))
    return fig
