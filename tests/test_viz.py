"""Figure builders on synthetic and real round traces (no browser, no Streamlit)."""

from __future__ import annotations

import json

import numpy as np
import plotly.graph_objects as go
import pytest

from specviz import i18n
from specviz.i18n import S, t
from specviz.core.trace import AcceptStep, NodeTrace, RoundTrace
from specviz.viz import figures as F
from specviz.viz import toy


def synthetic_trace(round_index=0) -> RoundTrace:
    """Root -> {a (accepted), b (rejected, tried)}; a -> {c (rejected), d (untried)}; extra bonus
    from the residual after c: 'e' resampled."""
    top = lambda *xs: [[i, s, p] for i, s, p in xs]  # noqa: E731
    nodes = [
        NodeTrace(0, -1, 0, 10, " The", None, None, 0.0, 0, 50, "root", top((11, " cat", 0.6), (12, " dog", 0.3)), top((11, " cat", 0.5), (12, " dog", 0.4))),
        NodeTrace(1, 0, 1, 11, " cat", 0.6, 0.5, -0.51, 0, 51, "accepted", top((13, " sat", 0.7), (14, "\n", 0.2)), top((13, " sat", 0.3), (15, " ran", 0.6))),
        NodeTrace(2, 0, 1, 12, " dog", 0.3, 0.4, -1.2, 1, 51, "untried"),
        NodeTrace(3, 1, 2, 13, " sat", 0.7, 0.3, -0.87, 0, 52, "rejected"),
        NodeTrace(4, 1, 2, 14, "\n", 0.2, None, -2.1, 1, 52, "untried"),
    ]
    mask = [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 1, 0, 0, 1]]
    steps = [
        AcceptStep(1, 1, 11, " cat", 0.5, 0.6, 0.8333, 0.41, True),
        AcceptStep(2, 3, 13, " sat", 0.3, 0.7, 0.4286, 0.77, False, top((15, " ran", 0.9), (16, " is", 0.1))),
    ]
    return RoundTrace(
        round_index=round_index, method="synthetic", rule="chain", sampling={"temperature": 1.0, "top_k": 0, "top_p": 1.0},
        prefix_len=50, nodes=nodes, tree_mask=mask, position_ids=[50, 51, 51, 52, 52], steps=steps, accepted_nodes=[1],
        extra_token=15, extra_text=" ran", extra_source="resampled", extra_top=top((15, " ran", 0.9), (16, " is", 0.1)),
        committed=[11, 15], committed_text=[" cat", " ran"], draft_time_s=0.01, verify_time_s=0.05, total_time_s=0.07,
    )


def root_only_trace() -> RoundTrace:
    n = NodeTrace(0, -1, 0, 5, "Hi", None, None, 0.0, 0, 7, "root", [], [[6, "!", 0.8]])
    return RoundTrace(0, "vanilla", "greedy", {"temperature": 0}, 7, [n], [[1]], [7], [], [], 6, "!", "vanilla", [[6, "!", 0.8]], [6], ["!"], 0.0, 0.02, 0.02)


def _is_fig(f):
    assert isinstance(f, go.Figure)
    json.loads(f.to_json())  # serialisable for the browser
    # builders may skip Plotly's validators (viz.figures.spec_figure): every property must still
    # be one Plotly knows, with a valid value (this constructor raises ValueError otherwise)
    go.Figure(f.to_dict())
    return f


# ---------------------------------------------------------------------- i18n
def test_every_string_has_both_languages():
    for key, pair in S.items():
        assert len(pair) == 2 and pair[0] and pair[1], key


def test_t_formats_and_falls_back():
    assert t("toy.max_err", "zh", e=1e-9).startswith("最大")
    assert t("no.such.key", "zh") == "no.such.key"
    assert set(i18n.LANGS) == {"en", "zh"}


# ---------------------------------------------------------------------- tree
def test_tree_layout_is_tidy():
    tr = synthetic_trace()
    pos = F.tree_layout(tr)
    assert pos[0][0] == 0 and pos[1][0] == 1 and pos[3][0] == 2
    # rank 0 above rank 1, parent between its children
    assert pos[1][1] > pos[2][1]
    assert min(pos[3][1], pos[4][1]) <= pos[1][1] <= max(pos[3][1], pos[4][1])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_tree_figure_colours_and_customdata(lang):
    tr = synthetic_trace()
    fig = _is_fig(F.tree_figure(tr, lang=lang, selected=3))
    ids = {}
    for tr_ in fig.data:
        if tr_.customdata is not None:
            for cd, col in zip(tr_.customdata, [tr_.marker.color] * len(tr_.customdata)):
                ids[int(cd[0])] = col
    assert set(ids) == {0, 1, 2, 3, 4, F.EXTRA_ID}
    assert ids[1] == F.STATUS_COLORS["accepted"] and ids[3] == F.STATUS_COLORS["rejected"]
    assert ids[2] == F.STATUS_COLORS["untried"]
    # hover carries p, q and score
    hov = " ".join(h for d in fig.data if d.hovertext is not None for h in d.hovertext)
    assert "p = 0.5000" in hov and "q = 0.6000" in hov


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_copied_nodes_are_diamonds_with_a_legend_and_say_so(lang):
    tr = synthetic_trace()
    fig = _is_fig(F.tree_figure(tr, lang=lang))
    assert t("tree.copied_legend", lang) not in [d.name for d in fig.data]  # nothing copied: no entry
    tr.nodes[3].copied = True
    fig = _is_fig(F.tree_figure(tr, lang=lang))
    symbols = {int(cd[0]): sym for d in fig.data if d.customdata is not None and d.marker.symbol is not None
               for cd, sym in zip(d.customdata, d.marker.symbol)}
    assert symbols[3] == "diamond" and symbols[1] == symbols[2] == "circle"
    assert t("tree.copied_legend", lang) in [d.name for d in fig.data]
    hov = [h for d in fig.data if d.hovertext is not None for h in d.hovertext]
    assert sum(t("round.copied", lang) in h for h in hov) == 1
    from specviz.viz.round import round_table
    table = round_table(tr, lang, stage="draft")
    assert list(table[t("round.col_q", lang)]) == ["0.600", "0.300", t("round.copied", lang), "0.200"]


def test_tree_figure_draft_stage_grows():
    tr = synthetic_trace()
    f1 = F.tree_figure(tr, max_depth=1, reveal=False)
    pts = [cd[0] for d in f1.data if d.customdata is not None for cd in d.customdata]
    assert sorted(pts) == [0, 1, 2]  # no outcome colours, no extra token
    assert all(d.marker.color in (F.STATUS_COLORS["drafted"], F.STATUS_COLORS["root"]) for d in f1.data if d.customdata is not None)


def test_ancestors():
    tr = synthetic_trace()
    assert F.ancestors(tr, 3) == [0, 1, 3]
    assert F.ancestors(tr, 0) == [0]


# ---------------------------------------------------------------------- p vs q
def test_pq_bars_union_and_missing():
    tr = synthetic_trace()
    fig = _is_fig(F.node_pq_figure(tr, 3))  # parent = node 1
    p_bar, q_bar = fig.data
    assert len(p_bar.x) == 3  # sat, \n, ran
    xs = list(p_bar.x)
    ran = xs.index("␣ran (15)")
    assert p_bar.y[ran] == 0.6 and q_bar.y[ran] is None
    _is_fig(F.node_pq_figure(tr, 0))
    ex = _is_fig(F.node_pq_figure(tr, F.EXTRA_ID))
    assert len(ex.data) == 1


# ---------------------------------------------------------------------- text
def test_coloured_text_sources_and_escaping():
    tr = synthetic_trace()
    tr.committed_text = [" <cat>", " ran"]
    src = F.token_sources([tr, root_only_trace()])
    assert [s for _, s, _ in src] == ["accepted", "resampled", "vanilla"]
    h = F.colored_text_html([tr])
    assert "&lt;cat&gt;" in h and "<cat>" not in h
    assert F.SOURCE_BG["resampled"] in h


def test_root_only_round():
    tr = root_only_trace()
    _is_fig(F.tree_figure(tr))
    _is_fig(M.attention_figure(tr))
    _is_fig(R.walk_u_figure(tr))
    assert len(R.round_table(tr, "en", "accept")) == 0  # no drafted node: nothing to try


# ---------------------------------------------------------------------- stats and latency
def test_stats_figures():
    a, b = synthetic_trace(0), synthetic_trace(1)
    b.accepted_nodes = [1, 3]
    assert F.acceptance_by_depth([a, b]) == [1.0, 0.5]
    _is_fig(F.accept_length_hist({"x": [1, 2, 2, 3], "y": []}))
    _is_fig(F.depth_acceptance_figure({"x": [1.0, 0.5]}))
    _is_fig(F.samples_hist_figure(["a", "b"], {"v": [3, 7], "s": [4, 6]}, expected=[0.35, 0.65]))
    f = _is_fig(F.latency_curve_figure([1, 2, 4], [10.0, 11.0, 13.0]))
    assert list(f.data[1].y) == [10.0, 20.0, 40.0]
    _is_fig(F.latency_grid_figure([1, 4], [1, 8], [[10, 12], [20, 30]]))
    from specviz.viz.compare import whatif_speedup

    assert whatif_speedup(3.0, 10.0, 15.0) == pytest.approx(2.0)  # any unit: a ratio of times
    _is_fig(F.speedup_by_batch_figure([1, 8], [2.0, 1.2]))
    assert "<html" in F.figure_html(F.tree_figure(a)).lower()


# ---------------------------------------------------------------------- toy rule
@pytest.mark.parametrize("name", list(toy.PRESETS))
def test_toy_chain_outputs_p(name):
    p, q = toy.PRESETS[name]
    parts = toy.chain_rule(p, q)
    assert np.allclose(parts.output, parts.p, atol=1e-12)
    assert parts.alpha == pytest.approx(np.minimum(parts.p, parts.q).sum())
    sim = toy.simulate_chain(p, q, 20000, seed=1)
    assert toy.tv_distance(sim["counts"], parts.p) < 0.02
    assert sim["acceptance_rate"] == pytest.approx(parts.alpha, abs=0.02)
    _is_fig(F.toy_chain_figure(toy.TOY_VOCAB, parts))
    _is_fig(F.toy_sim_figure(toy.TOY_VOCAB, sim["counts"], parts.p))


def test_toy_two_candidates_outputs_p():
    p = [0.1, 0.5, 0.2, 0.15, 0.05]
    parts = toy.two_candidates(p, 0, 2)
    assert np.allclose(parts.output, toy.normalise(p), atol=1e-12)
    sim = toy.simulate_two_candidates(p, 0, 2, 20000, seed=3)
    assert toy.tv_distance(sim["counts"], p) < 0.02
    assert sim["accepted_first"] == pytest.approx(0.1, abs=0.01)
    _is_fig(F.toy_two_figure(toy.TOY_VOCAB, parts))
    with pytest.raises(ValueError):
        toy.two_candidates(p, 1, 1)


def test_toy_degenerate_inputs():
    parts = toy.chain_rule([0, 0, 0], [1, 0, 0])  # all-zero p becomes uniform
    assert np.allclose(parts.output, [1 / 3] * 3)
    parts = toy.chain_rule([1, 0], [1, 0])  # identical: no residual
    assert parts.alpha == pytest.approx(1.0) and parts.residual.sum() == 0


# ---------------------------------------------------------------------- real traces
@pytest.fixture(scope="module")
def target():
    from specviz.core.target import load_target

    return load_target()


def _real_traces(target, drafter, prompt, temperature=0.0, rounds=3):
    from specviz.core.engine import SpeculativeDecoder
    from specviz.core.sampling import SamplingParams

    dec = SpeculativeDecoder(target, drafter, SamplingParams(temperature=temperature), seed=0)
    dec.start(prompt, 24)
    return [dec.step() for _ in range(rounds) if not dec.done]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_real_vanilla_trace(target, lang):
    trs = _real_traces(target, None, "Name three colours.", temperature=0.8)
    for tr in trs:
        _is_fig(F.tree_figure(tr, lang=lang, selected=0))
        _is_fig(M.attention_figure(tr, lang))
        _is_fig(F.node_pq_figure(tr, 0, lang=lang))
        _is_fig(F.node_pq_figure(tr, F.EXTRA_ID, lang=lang))
        _is_fig(R.walk_u_figure(tr, lang))
        R.round_table(tr, lang, "accept")
    assert [s for _, s, _ in F.token_sources(trs)] == ["vanilla"] * len(trs)
    assert F.colored_text_html(trs, lang=lang).count("<span") == len(trs)


def test_real_pld_trace(target):
    pytest.importorskip("specviz.core.verify")
    from specviz.drafters.pld import PromptLookupDrafter

    prompt = "Repeat exactly: the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the lazy dog."
    trs = _real_traces(target, PromptLookupDrafter(), prompt, temperature=0.0, rounds=6)
    assert any(len(tr.nodes) > 1 for tr in trs)
    for tr in trs:
        fig = _is_fig(F.tree_figure(tr))
        ids = [cd[0] for d in fig.data if d.customdata is not None for cd in d.customdata]
        assert set(ids) == {n.id for n in tr.nodes} | {F.EXTRA_ID}
        for n in tr.nodes:
            _is_fig(F.node_pq_figure(tr, n.id))
        _is_fig(M.attention_figure(tr, selected=len(tr.nodes) - 1))
        assert len(R.round_table(tr, "en", "accept")) == len(tr.nodes) - 1
    srcs = {s for _, s, _ in F.token_sources(trs)}
    assert srcs <= {"accepted", "bonus", "greedy-correction", "resampled", "vanilla"} and "accepted" in srcs


def test_every_literal_string_key_exists():
    """Keys written literally in the app (tr("...") / t("...")) all exist, so no page shows a raw key."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    files = [root / "app.py", *sorted((root / "views").glob("*.py")), *sorted((root / "specviz" / "app").glob("*.py")),
             *sorted((root / "specviz" / "viz").glob("*.py"))]
    missing = set()
    for f in files:
        for key in re.findall(r"""\btr?\(\s*["']([A-Za-z0-9_.\-]+)["']""", f.read_text()):
            if key not in S and not key.endswith((".", "_")):
                missing.add(f"{f.name}: {key}")
    assert not missing, sorted(missing)
    # keys built at run time from fixed parts
    for prefix, names in {"status.": ["root", "accepted", "rejected", "untried", "drafted"],
                          "source.": ["accepted", "bonus", "resampled", "greedy-correction", "vanilla"],
                          "rule.": ["greedy", "chain", "tree-deterministic", "tree-sampled"],
                          "m.": ["vanilla", "pld", "sps", "medusa", "eagle1", "eagle2", "eagle3"],
                          "dec.stage_": ["draft", "verify", "accept"], "toy.preset.": list(toy.PRESETS)}.items():
        for n in names:
            assert prefix + n in S, prefix + n


def test_round_time_figure_stacks_the_measured_parts():
    methods = {
        "vanilla": {"tau": 1.0, "tokens_per_s": 26.0, "per_round_ms": {"draft": 0.1, "verify": 37.0, "other": 1.0, "nodes": 1}},
        "eagle3": {"tau": 2.5, "tokens_per_s": 40.0, "per_round_ms": {"draft": 12.0, "verify": 48.0, "other": 2.0, "nodes": 10}},
        "hf": {"tau": None, "tokens_per_s": 25.0},  # HF peers have no rounds: left out
    }
    fig = F.round_time_figure(methods, "zh")
    _is_fig(fig)
    assert [tr.name for tr in fig.data] == ["起草", "目标模型前向 + 接受判定", "其他"]
    assert list(fig.data[0].y) == ["vanilla", "eagle3"]
    assert list(fig.data[0].x) == [0.1, 12.0] and list(fig.data[1].x) == [37.0, 48.0]
    assert any("2.50" in a.text and "40.0" in a.text for a in fig.layout.annotations)
    for s in ("vanilla", "eagle3"):  # newer bench files list the prompt's prefill apart
        methods[s]["per_round_ms"]["prefill"] = 3.0
    fig = F.round_time_figure(methods, "en")
    assert [tr.name for tr in fig.data][-1].startswith("prompt prefill") and list(fig.data[-1].x) == [3.0, 3.0]


# ---------------------------------------------------------------------- one view of a whole round
from specviz.viz import mask as M  # noqa: E402
from specviz.viz import round as R  # noqa: E402


def onehot_trace() -> RoundTrace:
    """The synthetic tree verified by the deterministic (EAGLE-2/3) rule: step q is the draft's q,
    but the rule used a one-hot q, so a = p_res(x)."""
    tr = synthetic_trace()
    tr.rule = "tree-deterministic"
    tr.steps[0].ratio, tr.steps[1].ratio = tr.steps[0].p, tr.steps[1].p
    return tr


def _cells(df):
    return df.astype(str).to_numpy().ravel().tolist()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_round_table_is_stage_correct_and_never_none(lang):
    tr = synthetic_trace()
    draft = R.round_table(tr, lang, "draft")
    assert t("round.col_p", lang) not in draft.columns and t("round.col_q", lang) in draft.columns  # no p before verify
    verify = R.round_table(tr, lang, "verify")
    assert t("round.col_p", lang) in verify.columns and "u" not in verify.columns
    acc = R.round_table(tr, lang, "accept")
    assert len(acc) == len(tr.nodes) - 1
    for df in (draft, verify, acc):
        assert not any(c in ("None", "nan") for c in _cells(df))
    assert list(acc[t("round.col_node", lang)]) == ["#1", "#3", "#2", "#4"]  # the walk first, in its order
    assert list(acc[t("round.col_step", lang)]) == ["1", "2", R.DASH, R.DASH]
    row = acc.iloc[1]  # node 3: tried second, rejected: a = min(1, 0.3 / 0.7)
    assert row[t("round.col_accept", lang)] == "0.429" and row["u"] == "0.770"
    assert acc.iloc[3]["u"] == R.DASH  # node 4 was never tried


def test_round_table_one_hot_rule_uses_p_residual_not_draft_q():
    tr = onehot_trace()
    acc = R.round_table(tr, "en", "accept")
    row = acc.iloc[1]  # node 3
    assert row[t("round.col_q_rule")] == t("round.onehot")
    assert row[t("round.col_accept")] == "0.300"  # p_res(x), not p/q_draft = 0.429
    assert row[t("round.col_q")] == "0.700"  # the draft's q still shown, as the draft's
    assert R.accept_probability(tr, tr.steps[1]) == pytest.approx(0.3)
    assert "one-hot" in R.rule_caption(tr)


def test_walk_u_figure_zones_and_draws():
    tr = synthetic_trace()
    fig = _is_fig(R.walk_u_figure(tr))
    acc, rej, u = fig.data
    assert list(acc.x) == pytest.approx([0.8333, 0.4286], abs=1e-3) and list(rej.x) == pytest.approx([1 - 0.8333, 1 - 0.4286], abs=1e-3)
    assert list(u.x) == [0.41, 0.77]


def test_extra_dist_figure_highlights_the_drawn_token_with_its_probability():
    tr = synthetic_trace()
    fig = _is_fig(R.extra_dist_figure(tr))
    bars = fig.data[0]
    i = list(bars.x).index("␣ran (15)")
    assert bars.text[i] == "0.900" and bars.marker.line.width[i] == 3
    assert "0.900" in R.extra_title(tr)
    tr.extra_token, tr.extra_text = 99, " far"  # drawn from outside the recorded top entries
    fig = _is_fig(R.extra_dist_figure(tr))
    assert fig.data[0].x[-1] == "␣far (99)"
    assert "0.100" in R.extra_title(tr)  # "below 0.100"


def test_attention_mask_prefix_siblings_and_selection():
    tr = synthetic_trace()
    z = M.mask_cells(tr, selected=None, n_prefix=3)
    assert z.shape == (5, 8) and (z[:, :3] == 1).all()  # every node sees the committed prefix
    assert z[1, 3 + 2] == 4 and z[3, 3 + 4] == 4  # siblings masked and marked
    assert z[3, 3 + 1] == 2 and z[3, 3 + 3] == 3  # ancestor, self
    sel = M.mask_cells(tr, selected=3, n_prefix=3)
    assert [sel[3, 3 + j] for j in (0, 1, 3)] == [5, 5, 5] and sel[3, 3 + 2] == 0
    fig = _is_fig(M.attention_figure(tr, "zh", selected=3, prefix_tail=[[1, "a"], [2, " b"], [3, "c"]]))
    assert list(fig.data[0].x[:3]) == ["ctx a @47", "ctx ␣b @48", "ctx c @49"]
    names = [d.name for d in fig.data[1:]]
    assert t("mask.k_sibling", "zh") in names and t("mask.k_path", "zh") in names  # a legend
    assert len(fig.layout.shapes) == 1 + 1 + 3  # prefix divider, selected row, 3 ancestor columns


def test_big_tree_is_readable():
    """A 60-node tree: labels carry node ids, untried nodes fade, height grows with the leaves."""
    nodes = [NodeTrace(0, -1, 0, 1, "r", None, None, 0.0, 0, 10, "root")]
    for i in range(1, 61):
        par = 0 if i <= 6 else (i - 1) // 6
        nodes.append(NodeTrace(i, par, nodes[par].depth + 1, 100 + i, f"t{i}", 0.1, 0.1, -1.0, 0, 10, "accepted" if i == 1 else "untried"))
    tr = synthetic_trace()
    tr.nodes, tr.accepted_nodes, tr.steps = nodes, [1], []
    tr.tree_mask, tr.position_ids = [], [10 + n.depth for n in nodes]
    fig = _is_fig(F.tree_figure(tr))
    untried = next(d for d in fig.data if d.name == t("status.untried"))
    assert untried.marker.opacity < 1 and untried.text[0].startswith("#")
    assert fig.layout.height >= 1000


def test_tree_hover_follows_the_stage_and_the_rule():
    def hovers(fig):
        return " ".join(h for d in fig.data if d.hovertext is not None for h in d.hovertext)

    tr = synthetic_trace()
    draft = hovers(F.tree_figure(tr, reveal=False))
    assert "q = 0.6000" in draft and "p =" not in draft  # no p before the verify pass
    verify = hovers(F.tree_figure(tr, reveal=False, show_p=True))
    assert "p = 0.5000" in verify and t("status.accepted") not in verify  # p known, outcome not yet
    accept = hovers(F.tree_figure(tr))
    assert "p/q" in accept and "u = 0.770" in accept  # the chain rule divides by the drawn q
    one = hovers(F.tree_figure(onehot_trace()))
    assert "p/q" not in one and "a = 0.300" in one  # one-hot q: a = p_res(x), no ratio to the draft's q


def test_unvalidated_figure_properties_are_still_checked():
    """`_is_fig` catches a misspelt property or a bad value in a figure built without Plotly's
    validators, so every builder test above also checks its figure's properties."""
    with pytest.raises(ValueError):
        _is_fig(F.spec_figure([dict(type="scatter", x=[1], colour="red")], {}))
    with pytest.raises(ValueError):
        _is_fig(F.spec_figure([dict(type="bar", x=[1], y=[2])], dict(height="tall")))
    _is_fig(F.spec_figure([dict(type="bar", x=[1], y=[2])], dict(height=300)))
