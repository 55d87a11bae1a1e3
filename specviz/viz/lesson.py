"""Figures and tables of the lesson's cost steps: a measured forward curve in, Plotly out."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from ..i18n import t
from ..runtime.machine import interpolate  # the one piecewise-linear reader of a measured cost curve
from .figures import LEGEND_TOP


def pass_ratio(curve: dict[int, float], n: int) -> float:
    """Cost of one pass over n tokens in one-token passes: t(n) / t(1)."""
    return interpolate(curve, n) / curve[min(curve)]


def bottleneck_figure(curve: dict[int, float], lang: str = "en") -> go.Figure:
    """ms of one target pass over N tokens (measured) against N separate one-token passes."""
    xs = sorted(curve)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=[curve[x] for x in xs], mode="lines+markers", name=t("lesson.curve_one", lang),
                             line=dict(color="#1f77b4", width=3),
                             text=[f"{curve[x] / curve[xs[0]]:.1f}x" for x in xs], textposition="top left",
                             hovertemplate="N=%{x}: %{y:.1f} ms (%{text})<extra></extra>"))
    fig.add_trace(go.Scatter(x=xs, y=[curve[xs[0]] * x for x in xs], mode="lines", name=t("lesson.curve_n", lang),
                             line=dict(color="#999", dash="dot")))
    fig.update_layout(height=380, margin=dict(l=10, r=10, t=50, b=10), legend=LEGEND_TOP, plot_bgcolor="white",
                      xaxis=dict(title=t("lesson.curve_x", lang), gridcolor="#eee"),
                      yaxis=dict(title=t("lesson.curve_y", lang), rangemode="tozero", gridcolor="#eee"))
    return fig


def predicted_rows(rounds: list, curve: dict[int, float], lang: str = "en") -> pd.DataFrame:
    """Per recorded round: the tokens it yielded (its tau), its verify cost t(N)/t(1) from the
    measured curve, and the speedup bound that implies here, tau x t(1) / t(N) (drafting not
    counted, so the real figure is lower); the last column is the bound when a pass is free, tau."""
    t1 = curve[min(curve)]
    rows = []
    for r in rounds:
        tr = r.trace
        n = len(tr.nodes)
        ratio = interpolate(curve, n) / t1
        tau = len(tr.committed)
        rows.append({
            t("lesson.col_round", lang): r.key,
            t("lesson.col_nodes", lang): str(n - 1),
            t("lesson.col_tokens", lang): str(tau),
            t("lesson.col_cost", lang): f"{ratio:.1f}x",
            t("lesson.col_here", lang): f"{tau / ratio:.2f}x",
            t("lesson.col_free", lang): f"{tau:.0f}x",
        })
    return pd.DataFrame(rows)
