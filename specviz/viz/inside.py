"""Pure figure builders for the Inside-the-drafter page (`specviz.inside` data in, Plotly figures
or Graphviz DOT text out; nothing here runs a model or touches Streamlit)."""

from __future__ import annotations

import plotly.graph_objects as go

from ..i18n import t
from .compare import METHOD_COLORS

MARGIN = dict(l=10, r=10, t=95, b=10)  # room for the title above a horizontal legend
LEGEND = dict(orientation="h", yanchor="bottom", y=1.02, x=0, xanchor="left")


def _title(text: str) -> dict:
    """A title at the very top, clear of the legend drawn just above the plot."""
    return dict(text=text, y=0.98, yanchor="top", x=0.01, xanchor="left")

KEPT, EXPANDED, PRUNED = "#54a24b", "#f58518", "#c8c8c8"
ARM_COLORS = {True: "#4c78a8", False: "#e45756"}  # with the idea / without it


def _short(text: str, n: int = 10) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= n else text[: n - 1] + "…"


# ------------------------------------------------------------------------------ 1a features
def feature_strips(chain: dict, lang: str = "en") -> go.Figure:
    """Each draft step's input and output feature (their first dimensions) as heatmap rows, so a
    class sees the head's output at step k become the input of step k + 1."""
    rows, labels = [], []
    for s in chain["steps"]:
        src = t("ins.f.src_target" if s["reads"] == "target" else "ins.f.src_head", lang)
        rows.append(s["feature_in"])
        labels.append(t("ins.f.row_in", lang, k=s["step"], src=src, tok=_short(s["token_in_text"])))
        rows.append(s["feature_out"])
        labels.append(t("ins.f.row_out", lang, k=s["step"], tok=_short(s["drafted_text"])))
    fig = go.Figure(go.Heatmap(z=rows, y=labels, colorscale="RdBu", zmid=0, showscale=False,
                               hovertemplate="%{y}<br>dim %{x}: %{z:.3f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title=_title(t("ins.f.strips_title", lang, n=chain["strip"])), height=90 + 34 * len(rows), margin=MARGIN,
                      xaxis_title=t("ins.f.dim", lang))
    return fig


def feature_drift(chain: dict, lang: str = "en") -> go.Figure:
    """Cosine of each written feature with the target's true feature at that position."""
    xs = [s["step"] for s in chain["steps"] if s["cos_to_target"] is not None]
    ys = [s["cos_to_target"] for s in chain["steps"] if s["cos_to_target"] is not None]
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="lines+markers+text", text=[f"{y:.2f}" for y in ys],
                               textposition="top center", line=dict(color=METHOD_COLORS["eagle1"])))
    fig.update_layout(title=_title(t("ins.f.drift_title", lang)), xaxis_title=t("ins.step", lang), yaxis_title="cos",
                      yaxis_range=[min(ys + [0.5]) - 0.05, 1.02], height=300, margin=MARGIN, xaxis_dtick=1)
    return fig


def uncertainty_figure(u: dict, lang: str = "en") -> go.Figure:
    """Per sampled branch: how close each head's written feature is to the target's true one."""
    fig = go.Figure()
    names = [f"{b['text']!r} (p = {b['p']:.2f})" for b in u["branches"]]
    for key, color in (("with_token", ARM_COLORS[True]), ("without_token", ARM_COLORS[False])):
        if not all(key in b for b in u["branches"]):
            continue
        ys = [b[key]["cos_to_target"] for b in u["branches"]]
        fig.add_trace(go.Bar(x=names, y=ys, name=t(f"ins.u.{key}", lang), marker_color=color,
                             text=[f"{y:.2f}" for y in ys], textposition="outside"))
    fig.update_layout(barmode="group", title=_title(t("ins.u.fig_title", lang)), yaxis_title="cos", yaxis_range=[0, 1.1],
                      height=320, margin=MARGIN, legend=LEGEND)
    return fig


# ------------------------------------------------------------------------------ 1b expansion
def expansion_figure(levels: list[list[dict]], lang: str = "en", max_rank: int = 16) -> go.Figure:
    """Every level's scored candidates (best first, up to `max_rank`), coloured by fate: expanded,
    kept by the final rerank, or pruned; lines join each shown candidate to its parent."""
    fig = go.Figure()
    pos = {}
    for d, lv in enumerate(levels, start=1):
        for r, c in enumerate(lv[:max_rank]):
            pos[c["id"]] = (d, r)
    for d, lv in enumerate(levels, start=1):
        for c in lv[:max_rank]:
            if c["parent"] in pos:
                (x0, y0), (x1, y1) = pos[c["parent"]], pos[c["id"]]
                fig.add_trace(go.Scatter(x=[x0, x1], y=[y0, y1], mode="lines", hoverinfo="skip", showlegend=False,
                                         line=dict(color=KEPT if c["kept"] else PRUNED, width=1.5 if c["kept"] else 0.7)))
    for fate, color in (("kept", KEPT), ("expanded", EXPANDED), ("pruned", PRUNED)):
        xs, ys, texts, hover = [], [], [], []
        for d, lv in enumerate(levels, start=1):
            for r, c in enumerate(lv[:max_rank]):
                f = "kept" if c["kept"] else ("expanded" if c["expanded"] else "pruned")
                if f != fate:
                    continue
                xs.append(d)
                ys.append(r)
                texts.append(_short(c["text"], 9))
                hover.append(t("ins.e.hover", lang, tok=c["text"].replace("\n", "\\n"), q=c["q"], s=c["score"],
                               pp=c["path_prob"], ex=t("ins.yes" if c["expanded"] else "ins.no", lang)))
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers+text", text=texts, textposition="middle right",
                                 name=t(f"ins.e.{fate}", lang), hovertext=hover, hoverinfo="text",
                                 marker=dict(size=11, color=color, line=dict(width=1, color="#333"))))
    fig.update_yaxes(autorange="reversed", title=t("ins.e.rank", lang), dtick=1)
    fig.update_xaxes(title=t("ins.e.level", lang), dtick=1, range=[0.6, len(levels) + 0.9])
    fig.update_layout(title=_title(t("ins.e.title", lang, n=max_rank)), height=560, margin=MARGIN, legend=LEGEND)
    return fig


def calibration_figure(cal: dict, kind: str = "token", lang: str = "en") -> go.Figure:
    """Measured acceptance against the head's confidence, one line per head, binned (counts on hover,
    bins with fewer than 5 nodes left out); the diagonal is perfect calibration."""
    fig = go.Figure(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", line=dict(dash="dot", color="#999"),
                               name=t("ins.c.diagonal", lang), hoverinfo="skip"))
    for method in ("eagle2", "eagle3"):
        if method not in cal:
            continue
        bs = [b for b in cal[method][kind] if b["count"] >= 5]
        fig.add_trace(go.Scatter(
            x=[b["mean_conf"] for b in bs], y=[b["rate"] for b in bs], mode="lines+markers",
            name=t(f"ins.c.{method}", lang), marker=dict(size=[6 + min(b["count"], 2000) ** 0.5 / 3 for b in bs]),
            line=dict(color=METHOD_COLORS[method]),
            hovertext=[t("ins.c.hover", lang, lo=b["lo"], hi=b["hi"], n=b["count"], a=b["accepted"], r=b["rate"]) for b in bs],
            hoverinfo="text"))
    fig.update_layout(title=_title(t(f"ins.c.title_{kind}", lang)), xaxis_title=t(f"ins.c.x_{kind}", lang),
                      yaxis_title=t(f"ins.c.y_{kind}", lang), xaxis_range=[0, 1], yaxis_range=[0, 1.02], height=420,
                      margin=MARGIN, legend=LEGEND)
    return fig


def calibration_rows(cal: dict, method: str, kind: str = "token", lang: str = "en") -> list[dict]:
    """The bins as table rows (every bin, counts included)."""
    return [{t("ins.c.bin", lang): f"{b['lo']:.1f}–{b['hi']:.1f}", t("ins.c.count", lang): b["count"],
             t("ins.c.accepted", lang): b["accepted"], t("ins.c.rate", lang): "–" if b["rate"] is None else f"{b['rate']:.3f}"}
            for b in cal[method][kind]]


# ------------------------------------------------------------------------------ 1c fusion
def fusion_dot(lens: dict, lang: str = "en") -> str:
    """The target's layers with the three taps, the concat (3H) and the fc (-> H) as Graphviz DOT."""
    H, n = lens["hidden"], lens["n_layers"]
    low, mid, high = lens["layers"]
    lines = ["digraph G {", "rankdir=LR; node [shape=box, style=rounded, fontsize=11];",
             f'emb [label="{t("ins.u.embed", lang)}"];']
    blocks = [(0, low - 1), (low, low), (low + 1, mid - 1), (mid, mid), (mid + 1, high - 1), (high, high), (high + 1, n - 1)]
    prev = "emb"
    for a, b in blocks:
        name = f"L{a}_{b}"
        tap = a == b and a in (low, mid, high)
        label = f"layer {a}" if a == b else f"layers {a}–{b}"
        style = ', style="rounded,filled", fillcolor="#fde2b8"' if tap else ""
        lines.append(f'{name} [label="{label}"{style}];')
        lines.append(f"{prev} -> {name};")
        prev = name
    lines.append(f'final [label="{t("ins.fu.final", lang)}"]; {prev} -> final;')
    lines.append(f'cat [label="concat  3 × {H} = {3 * H}", style="rounded,filled", fillcolor="#d6e9c6"];')
    lines.append(f'fc [label="fc  {3 * H} → {H}", style="rounded,filled", fillcolor="#d6e9c6"];')
    lines.append(f'head [label="{t("ins.fu.head", lang)}", style="rounded,filled", fillcolor="#d6e9c6"];')
    for layer, name in ((low, "low"), (mid, "mid"), (high, "high")):
        lines.append(f'L{layer}_{layer} -> cat [label="{name}: {t("ins.fu.input_of", lang, n=layer)}", color="#e07b00"];')
    lines += ["cat -> fc; fc -> head;", "}"]
    return "\n".join(lines)


def lens_figure(lens: dict, lang: str = "en") -> go.Figure:
    """What each tap already predicts: the probability its logit lens gives the target's next token,
    and its cosine with the final state (what the top of the network has become)."""
    names = [f"{x['tap']} (L{x['layer']})" for x in lens["taps"]] + [t("ins.fu.final", lang)]
    p_next = [x["p_next"] for x in lens["taps"]] + [lens["final"]["p_next"]]
    cos = [x["cos_to_final"] for x in lens["taps"]] + [1.0]
    fig = go.Figure([go.Bar(x=names, y=p_next, name=t("ins.fu.p_next", lang, tok=_short(lens["next_text"])),
                            marker_color="#e07b00", text=[f"{v:.2f}" for v in p_next], textposition="outside"),
                     go.Bar(x=names, y=cos, name=t("ins.fu.cos", lang), marker_color="#4c78a8",
                            text=[f"{v:.2f}" for v in cos], textposition="outside")])
    fig.update_layout(barmode="group", title=_title(t("ins.fu.lens_title", lang)), yaxis_range=[0, 1.15], height=340,
                      margin=MARGIN, legend=LEGEND)
    return fig


# ------------------------------------------------------------------------------ 1d training-time test
def ttt_dot(steps: int = 3, lang: str = "en") -> str:
    """The unroll: step 1 reads the target's fused features, step k the head's own output of step k-1."""
    lines = ["digraph G {", "rankdir=LR; node [shape=box, style=rounded, fontsize=11];",
             f'g [label="{t("ins.t.target_feats", lang)}", style="rounded,filled", fillcolor="#fde2b8"];']
    prev = "g"
    for k in range(1, steps + 1):
        lines.append(f'h{k} [label="{t("ins.t.head_step", lang, k=k)}", style="rounded,filled", fillcolor="#d6e9c6"];')
        lines.append(f'loss{k} [label="{t("ins.t.loss", lang, k=k, w=round(0.8 ** (k - 1), 2))}", shape=note];')
        lines.append(f'{prev} -> h{k} [label="{t("ins.t.reads", lang) if k > 1 else ""}"]; h{k} -> loss{k};')
        prev = f"h{k}"
    lines.append("}")
    return "\n".join(lines)


def ttt_mask_figure(mask: list[list[int]], T: int, steps: int, lang: str = "en") -> go.Figure:
    """The attention mask of the unroll: rows are queries (step, index), columns keys."""
    labels = [f"s{j + 1}·t{i}" for j in range(steps) for i in range(T)]
    fig = go.Figure(go.Heatmap(z=mask, x=labels, y=labels, colorscale=[[0, "#f4f4f4"], [1, "#4c78a8"]], showscale=False,
                               xgap=1, ygap=1, hovertemplate="query %{y} → key %{x}: %{z}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", title=t("ins.t.queries", lang))
    fig.update_xaxes(title=t("ins.t.keys", lang), side="top")
    fig.update_layout(title=_title(t("ins.t.mask_title", lang, T=T, S=steps)), height=460, margin=dict(l=10, r=10, t=110, b=10))
    return fig


def accuracy_by_step(series: dict[str, list[float]], lang: str = "en", title_key: str = "ins.t.acc_title",
                     dashes: dict[str, str] | None = None) -> go.Figure:
    """Held-out top-1 agreement with the target by draft step, one line per head or arm."""
    fig = go.Figure()
    for name, acc in series.items():
        fig.add_trace(go.Scatter(x=list(range(1, len(acc) + 1)), y=acc, mode="lines+markers", name=name,
                                 line=dict(dash=(dashes or {}).get(name, "solid"))))
    fig.update_layout(title=_title(t(title_key, lang)), xaxis_title=t("ins.step", lang), yaxis_title=t("ins.t.acc", lang),
                      yaxis_range=[0, 1], xaxis_dtick=1, height=360, margin=MARGIN, legend=LEGEND)
    return fig


# ------------------------------------------------------------------------------ ablations
def ablation_figure(abl: dict, lang: str = "en") -> go.Figure:
    """tau_chain with and without each idea (pairs side by side)."""
    fig = go.Figure()
    pairs = abl["pairs"]
    for with_idea, idx in ((True, 0), (False, 1)):
        xs, ys, hover = [], [], []
        for pair, arms in pairs.items():
            if not all(a in abl["arms"] for a in arms):
                continue  # a pair with an arm not trained yet is not drawn half
            arm = abl["arms"][arms[idx]]
            xs.append(t(f"ins.a.pair.{pair}", lang))
            ys.append(arm["heldout"]["tau_chain"])
            hover.append(f"{arm['arm']}: {arm['idea']}<br>tau_chain {arm['heldout']['tau_chain']:.3f}, "
                         f"{arm['steps']} steps")
        fig.add_trace(go.Bar(x=xs, y=ys, name=t("ins.a.with" if with_idea else "ins.a.without", lang),
                             marker_color=ARM_COLORS[with_idea], text=[f"{y:.3f}" for y in ys], textposition="outside",
                             hovertext=hover, hoverinfo="text"))
    fig.update_layout(barmode="group", title=_title(t("ins.a.title", lang)), yaxis_title="tau_chain", height=360,
                      margin=MARGIN, legend=LEGEND)
    return fig


def ablation_rows(abl: dict, lang: str = "en") -> list[dict]:
    """One row per arm: the idea, held-out accuracy at steps 1 and 6, tau_chain, steps, data."""
    out = []
    for name, a in abl["arms"].items():
        acc = a["heldout"]["acc"]
        out.append({t("ins.a.arm", lang): name, t("ins.a.idea", lang): a["idea"], "acc@1": f"{acc[0]:.3f}",
                    "acc@6": f"{acc[-1]:.3f}", "tau_chain": f"{a['heldout']['tau_chain']:.3f}",
                    t("ins.a.steps", lang): a["steps"], t("ins.a.anchors", lang): a["heldout"]["anchors"]})
    return out


# ------------------------------------------------------------------------------ 1e vocabulary
def vocab_figure(v: dict, lang: str = "en") -> go.Figure:
    """Where the target's answer tokens fall: inside the draft vocabulary, outside but copied by the
    lookup branch, outside but earlier in the context, outside and new."""
    n, out = v["answer_tokens"], v["outside"]
    parts = [("ins.v.inside", n - out), ("ins.v.copied", v["copied_by_lookup"]),
             ("ins.v.earlier", v["earlier_in_context"] - v["copied_by_lookup"]),
             ("ins.v.unseen", out - v["earlier_in_context"])]
    colors = ["#54a24b", "#72b7b2", "#f58518", "#e45756"]
    fig = go.Figure([go.Bar(y=[""], x=[c], name=t(k, lang, n=c), orientation="h", marker_color=col,
                            hovertext=f"{c} / {n} = {c / max(n, 1):.1%}", hoverinfo="text")
                     for (k, c), col in zip(parts, colors)])
    fig.update_layout(barmode="stack", title=_title(t("ins.v.title", lang, n=n, share=v["outside_share"])), height=230,
                      margin=MARGIN, legend=LEGEND, xaxis_title=t("ins.v.tokens", lang))
    return fig


def tau_se(heldout: dict) -> float:
    """Standard error of tau_chain over its anchors: with L the accepted chain length at an anchor,
    P(L > j) = chain[j], so E[L] = sum chain[j] and E[L^2] = sum (2j + 1) chain[j]."""
    ch, n = heldout["chain"], max(heldout["anchors"], 1)
    mean = sum(ch)
    second = sum((2 * j + 1) * c for j, c in enumerate(ch))
    return (max(second - mean * mean, 0.0) / n) ** 0.5


def pair_verdict(abl: dict, pair: str) -> dict | None:
    """tau_chain with (w) and without (wo) the pair's idea, the difference, and whether it is beyond
    two standard errors of the difference (holds / reversed) or not (tie); None when an arm is missing."""
    a, b = (abl["arms"].get(n) for n in abl["pairs"][pair])
    if a is None or b is None:
        return None
    w, wo = a["heldout"]["tau_chain"], b["heldout"]["tau_chain"]
    eps = 2 * (tau_se(a["heldout"]) ** 2 + tau_se(b["heldout"]) ** 2) ** 0.5
    d = w - wo
    verdict = "tie" if abs(d) < eps else ("holds" if d > 0 else "reversed")
    return dict(w=w, wo=wo, d=d, eps=round(eps, 3), verdict=verdict)
