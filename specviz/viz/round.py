"""One view of a whole round: per-node table, the u draws against the rule, the extra token's
distribution. Pure functions of a `RoundTrace` (no engine, no Streamlit).

The columns follow the rule the engine actually applied (`trace.rule`):

* greedy: accept x iff x is the target's argmax; no draw, no ratio;
* tree-deterministic (EAGLE-2/3, Medusa, PLD at T > 0): the draft *chose* its children, so the
  rule is min(1, p/q) with a one-hot q: accept x with probability p_res(x), the target's current
  residual. The draft's own probability q is shown, but the rule does not use it;
* chain / tree-sampled (SpS, toy SpecInfer): children were *drawn* from q; accept with
  min(1, p_res(x)/q(x)).

Stages hide what was not known yet: no p in the draft stage, no outcome before acceptance.
Every cell is text ("–" where a value does not exist), so no table shows "None".
"""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from ..i18n import t
from ..core.trace import RoundTrace
from .figures import LEGEND_TOP, SOURCE_COLORS, STATUS_COLORS, show_token, target_p

DASH = "–"
STAGES = ("draft", "verify", "accept")


def _f(x, digits: int = 3) -> str:
    return DASH if x is None else f"{x:.{digits}f}"


def uses_draft_q(trace: RoundTrace) -> bool:
    """True when the rule divides by the draft's q (children were drawn from q)."""
    return trace.rule in ("chain", "tree-sampled")


def accept_probability(trace: RoundTrace, step) -> float:
    """The probability with which the applied rule accepted this tried token."""
    if trace.rule == "greedy" or step.u is None:
        return 1.0 if step.accepted else 0.0
    if uses_draft_q(trace):
        return 1.0 if not step.q else min(1.0, step.p / step.q)
    return min(1.0, step.p)  # one-hot q: min(1, p_res(x) / 1)


def round_table(trace: RoundTrace, lang: str = "en", stage: str = "accept") -> pd.DataFrame:
    """One row per drafted node: id, parent, depth, token, the draft's q; from the verify stage
    the target's p; at the accept stage the walk order (tried nodes first), what the rule used
    (q of the rule, acceptance probability, u) and the outcome. All cells are strings."""
    steps = {s.node: s for s in trace.steps}
    order = {s.node: i for i, s in enumerate(trace.steps)}
    greedy = trace.rule == "greedy"
    onehot = not greedy and not uses_draft_q(trace)
    rows = []
    nodes = trace.nodes[1:]
    if stage == "accept":  # the walk first, in the order the rule tried the nodes
        nodes = sorted(nodes, key=lambda n: (order.get(n.id, len(order)), n.id))
    for n in nodes:
        row = {} if stage != "accept" else {t("round.col_step", lang): str(order[n.id] + 1) if n.id in order else DASH}
        row |= {
            t("round.col_node", lang): f"#{n.id}",
            t("round.col_parent", lang): f"#{n.parent}",
            t("tree.depth", lang): str(n.depth),
            t("walk.token", lang): show_token(n.text),
            t("round.col_q", lang): t("round.copied", lang) if n.copied else _f(n.q),
        }
        if stage in ("verify", "accept"):
            p = target_p(trace, n)
            row[t("round.col_p_greedy" if greedy else "round.col_p", lang)] = _f(p) if p is not None else t("round.below_top", lang)
        if stage == "accept":
            s = steps.get(n.id)
            if s is None:
                row[t("round.col_q_rule", lang)] = DASH
                row[t("round.col_p_res", lang)] = DASH
                row[t("round.col_accept", lang)] = DASH
                row["u"] = DASH
            else:
                row[t("round.col_q_rule", lang)] = (t("round.argmax", lang) if greedy else
                                                    t("round.onehot", lang) if onehot else _f(s.q))
                row[t("round.col_p_res", lang)] = DASH if greedy else _f(s.p)
                row[t("round.col_accept", lang)] = _f(accept_probability(trace, s))
                row["u"] = DASH if s.u is None else _f(s.u)
            row[t("walk.result", lang)] = t("status." + n.status, lang)
        rows.append(row)
    return pd.DataFrame(rows)


def rule_caption(trace: RoundTrace, lang: str = "en") -> str:
    """One sentence: which rule this round used and what its columns mean."""
    key = "greedy" if trace.rule == "greedy" else "sampled" if uses_draft_q(trace) else "onehot"
    return t("round.rule_" + key, lang)


# ---------------------------------------------------------------------- u draws
def walk_u_figure(trace: RoundTrace, lang: str = "en") -> go.Figure:
    """One horizontal bar per tried token, in walk order: the accept zone [0, a) in green and the
    reject zone [a, 1) in red, with the uniform draw u marked. u in green: accepted. Greedy
    rounds draw nothing: the bar is all green (the argmax) or all red."""
    steps = trace.steps
    ys = [f"{i + 1}. #{s.node} {show_token(s.text)[:12]}" for i, s in enumerate(steps)]
    acc = [accept_probability(trace, s) for s in steps]
    fig = go.Figure()
    fig.add_trace(go.Bar(y=ys, x=acc, orientation="h", name=t("round.accept_zone", lang), marker_color=STATUS_COLORS["accepted"],
                         opacity=0.75, text=[f"a = {a:.3f}" for a in acc], textposition="inside", insidetextanchor="start",
                         hovertemplate="%{y}<br>" + t("round.col_accept", lang) + " %{x:.4f}<extra></extra>"))
    fig.add_trace(go.Bar(y=ys, x=[1 - a for a in acc], orientation="h", name=t("round.reject_zone", lang),
                         marker_color=STATUS_COLORS["rejected"], opacity=0.35, hoverinfo="skip"))
    us = [(y, s.u, s.accepted) for y, s in zip(ys, steps) if s.u is not None]
    if us:
        fig.add_trace(go.Scatter(y=[y for y, _, _ in us], x=[u for _, u, _ in us], mode="markers+text", name=t("round.u_draw", lang),
                                 marker=dict(symbol="diamond", size=14, color="#111", line=dict(color="white", width=1)),
                                 text=[f"u = {u:.3f} {'✓' if ok else '✗'}" for _, u, ok in us], textposition="middle right",
                                 hovertemplate="%{y}<br>u = %{x:.4f}<extra></extra>"))
    fig.update_layout(barmode="stack", height=130 + 44 * max(1, len(steps)), margin=dict(l=10, r=10, t=70, b=10),
                      xaxis=dict(range=[0, 1], title=t("round.u_axis", lang), dtick=0.1),
                      yaxis=dict(autorange="reversed", automargin=True), legend=LEGEND_TOP, plot_bgcolor="white")
    return fig


# ---------------------------------------------------------------------- the extra token
def extra_distribution(trace: RoundTrace) -> list:
    """Top entries of the distribution the extra token came from. Greedy rounds take the argmax,
    whose 'distribution' is one-hot: show the target's plain softmax at that node instead."""
    if trace.rule == "greedy":
        anchor = trace.accepted_nodes[-1] if trace.accepted_nodes else trace.nodes[0].id
        raw = trace.nodes[anchor].next_p_raw_top
        if raw:
            return raw
    return trace.extra_top


def extra_probability(trace: RoundTrace) -> float | None:
    """The extra token's probability in the distribution it was drawn from (None when it is
    outside the recorded top entries)."""
    for tid, _, pp in extra_distribution(trace):
        if int(tid) == trace.extra_token:
            return float(pp)
    return None


def extra_title(trace: RoundTrace, lang: str = "en") -> str:
    pp = extra_probability(trace)
    prob = f"{pp:.3f}" if pp is not None else t("round.below", lang, p=f"{min((e[2] for e in extra_distribution(trace)), default=0):.3f}")
    return t("round.extra_" + trace.extra_source.replace("-", "_"), lang, tok=show_token(trace.extra_text), p=prob)


def extra_dist_figure(trace: RoundTrace, lang: str = "en") -> go.Figure:
    """The distribution the extra token came from (residual after a rejection, or the target's
    p after a full path) as bars, the drawn token highlighted with its probability. A drawn token
    outside the recorded top entries gets its own bar marked 'below the top entries'."""
    top = [(int(a), b, float(c)) for a, b, c in extra_distribution(trace)]
    color = SOURCE_COLORS.get(trace.extra_source, "#555")
    xs = [f"{show_token(s)[:14]} ({i})" for i, s, _ in top]
    ys = [c for _, _, c in top]
    chosen = [i == trace.extra_token for i, _, _ in top]
    if not any(chosen):
        xs.append(f"{show_token(trace.extra_text)[:14]} ({trace.extra_token})")
        ys.append(0.0)
        chosen.append(True)
    fig = go.Figure()
    fig.add_trace(go.Bar(x=xs, y=ys, name=t("round.dist_" + ("residual" if trace.extra_source == "resampled" else "softmax" if trace.rule == "greedy" else "target"), lang),
                         marker_color=["#1f77b4" if not c else color for c in chosen],
                         marker_line=dict(color=["#111" if c else "rgba(0,0,0,0)" for c in chosen], width=[3 if c else 0 for c in chosen]),
                         text=[f"{y:.3f}" if (y > 0 or not c) else "?" for y, c in zip(ys, chosen)], textposition="outside", cliponaxis=False,
                         hovertemplate="%{x}<br>%{y:.4f}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[x for x, c in zip(xs, chosen) if c], y=[max(ys) * 1.12 + 0.02], mode="markers",
                             marker=dict(symbol="star", size=16, color=color), name=t("round.drawn", lang, src=t("source." + trace.extra_source, lang)),
                             hoverinfo="skip"))
    fig.update_layout(height=350, margin=dict(l=10, r=10, t=70, b=10), yaxis=dict(title=t("pq.prob", lang), rangemode="tozero"),
                      legend=LEGEND_TOP, plot_bgcolor="white", xaxis=dict(tickangle=-30))
    return fig


def committed_html(trace: RoundTrace, lang: str = "en") -> str:
    """This round's output as coloured chips: accepted drafts green, the extra token by source."""
    chips = []
    n_acc = len(trace.committed) - 1
    for j, txt in enumerate(trace.committed_text):
        src = "accepted" if j < n_acc else trace.extra_source
        col = STATUS_COLORS["accepted"] if src == "accepted" else SOURCE_COLORS.get(src, "#555")
        chips.append(f'<span title="{html.escape(t("source." + src, lang), quote=True)}" style="border:2px solid {col};'
                     f'border-radius:4px;padding:1px 5px;margin-right:4px;font-family:monospace">{html.escape(show_token(txt))}</span>')
    return '<div style="line-height:2.1">' + "".join(chips) + "</div>"
