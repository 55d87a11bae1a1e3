"""The batched-serving figures, their words and the shipped batched results, without a browser:
"When speculation stops paying" (views/serving.py) and the lesson's step 11."""

from __future__ import annotations

import json

import numpy as np
import plotly.graph_objects as go
import pytest

from specviz.teaching import lesson_batch
from specviz.bench import measured
from specviz.bench.results import crossover_sentence, crossover_summary, machine_label, tree_words
from specviz.bench.batched import crossover
from specviz.i18n import t
from specviz.core.trace import NodeTrace, RoundTrace
from specviz.viz import STATUS_COLORS
from specviz.viz import batch as vb


def _is_fig(f):
    assert isinstance(f, go.Figure)
    json.loads(f.to_json())
    go.Figure(f.to_dict())  # every property one Plotly knows (the builders skip its validators)
    return f


def entry(tps, per, tau=1.0, rows=1.0, verify=5.0, same=True):
    return {"throughput_tok_s": tps, "per_seq_tok_s": per, "tau": tau, "identical_to_vanilla": same,
            "per_round_ms": {"draft": 0.1, "verify": verify, "head": 1.0, "walk": 0.2, "rows": rows, "sequences": 1.0}}


def by_batch(eagle3=(120, 190, 280, 400), vanilla=(100, 180, 300, 520), sizes=(1, 2, 4, 8)):
    """EAGLE-3 ahead at B = 1 and 2, behind from B = 4: the crossover is 4."""
    out = {}
    for b, e, v in zip(sizes, eagle3, vanilla):
        out[str(b)] = {"vanilla": entry(v, v / b), "eagle3": entry(e, e / b, tau=1.7, rows=2.5 * b),
                       "eagle3@paper": entry(e / 3, e / 3 / b, tau=2.0, rows=24.0 * b)}
        for m in out[str(b)].values():
            m["speedup_vs_vanilla"] = m["throughput_tok_s"] / v
    return out


TREES = {"vanilla": None, "eagle3": {"source": "device-tuned", "kind": "dynamic", "depth": 5, "total_tokens": 64, "min_prob": 0.15},
         "eagle3@paper": {"source": "fixed", "kind": "dynamic", "depth": 6, "total_tokens": 24}}


# ---------------------------------------------------------------------- labels
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_method_labels(lang):
    assert vb.method_label("vanilla", lang, TREES) == t("m.vanilla", lang)
    assert vb.method_label("eagle3", lang, TREES) == t("batch.m_tuned", lang, m="EAGLE-3")
    assert vb.method_label("eagle3", lang) == "EAGLE-3"  # no tree info: no claim that it was tuned
    assert vb.method_label("eagle3@paper", lang) == t("batch.m_paper", lang, m="EAGLE-3")
    assert vb.methods_of({"1": {"pld": {}, "eagle3": {}, "zz": {}, "vanilla": {}}}) == ["vanilla", "eagle3", "pld", "zz"]


# ---------------------------------------------------------------------- the curves
def test_throughput_lines_and_the_crossover_marker():
    bb = by_batch()
    b = crossover(bb, "eagle3")
    assert b == 4
    fig = _is_fig(vb.throughput_figure(bb, "en", b, TREES))
    names = [d.name for d in fig.data]
    assert names == ["Vanilla (no draft)", "EAGLE-3 (tuned tree)", "EAGLE-3 (papers' tree)"]
    e3 = fig.data[1]
    assert list(e3.x) == ["1", "2", "4", "8"] and list(e3.y) == [120, 190, 280, 400]
    assert list(fig.data[0].y) == [100, 180, 300, 520]
    assert list(fig.layout.xaxis.categoryarray) == ["1", "2", "4", "8"]
    (line,) = fig.layout.shapes  # at the index of the category "4": Plotly reads a number-like string as an index
    assert line.x0 == line.x1 == 2 and line.line.dash == "dash" and line.yref == "paper"
    (note,) = fig.layout.annotations
    assert note.x == 2 and "B = 4" in note.text
    assert not _is_fig(vb.throughput_figure(bb, "en", None)).layout.shapes  # no crossover: nothing marked


def test_gpu_curves_are_dashed_beside_the_cpu_ones():
    cpu, gpu = by_batch(), by_batch(eagle3=(300, 560, 1000, 1500, 1800), vanilla=(100, 200, 400, 800, 1900), sizes=(1, 2, 4, 8, 16))
    fig = _is_fig(vb.throughput_figure(cpu, "en", 4, TREES, gpu_by_batch=gpu, gpu_crossover_b=crossover(gpu, "eagle3")))
    dashed = [d for d in fig.data if d.line.dash == "dash"]
    assert len(dashed) == 3 and all(d.name.endswith(" · GPU") for d in dashed)
    assert all(d.line.dash == "solid" for d in fig.data if d not in dashed)
    assert list(fig.layout.xaxis.categoryarray) == ["1", "2", "4", "8", "16"]
    assert sorted(s.x0 for s in fig.layout.shapes) == [2, 4]  # CPU at B = 4, GPU at B = 16 (crossover of the GPU lines)


def test_per_user_speed_and_ratio_bars():
    bb = by_batch()
    fig = _is_fig(vb.per_user_figure(bb, "en", TREES))
    assert list(fig.data[1].y) == pytest.approx([120, 95, 70, 50])  # per_seq_tok_s, not throughput
    ratio = _is_fig(vb.ratio_figure(bb, "en", TREES))
    assert [d.name for d in ratio.data] == ["EAGLE-3 (tuned tree)", "EAGLE-3 (papers' tree)"]  # vanilla is the base, no bar
    assert list(ratio.data[0].y) == pytest.approx([1.2, 190 / 180, 280 / 300, 400 / 520])
    assert list(ratio.data[0].text)[2] == "0.93x"
    (hline,) = ratio.layout.shapes
    assert hline.y0 == hline.y1 == 1


def test_table_holds_every_measured_number():
    df = vb.batch_table(by_batch(), "en", TREES)
    assert len(df) == 12
    row = df[(df["B"] == 4) & (df["method"] == "EAGLE-3 (tuned tree)")].iloc[0]
    assert row["all users, tokens/s"] == 280 and row["one user, tokens/s"] == 70 and row["throughput vs vanilla"] == "0.93x"
    assert row["tokens in the shared pass"] == 10 and row["identical to vanilla"] == "yes"
    assert "方法" in vb.batch_table(by_batch(), "zh").columns


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_titles_follow_the_language(lang):
    bb = by_batch()
    fig = vb.throughput_figure(bb, lang, 4, TREES)
    assert fig.layout.xaxis.title.text == t("batch.ax_batch", lang)
    assert fig.layout.yaxis.title.text == t("batch.ax_throughput", lang)
    assert fig.layout.annotations[0].text == t("batch.cross_mark", lang, b=4)
    assert vb.per_user_figure(bb, lang).layout.yaxis.title.text == t("batch.ax_per_user", lang)
    if lang == "zh":
        assert "批大小" in fig.layout.xaxis.title.text and fig.data[1].name == "EAGLE-3（调优的树）"


# ---------------------------------------------------------------------- one batched round
def small_trace(tokens: list[str], parents: list[int], statuses: list[str]) -> RoundTrace:
    depth = [0] * len(parents)
    for i, p in enumerate(parents):
        depth[i] = 0 if p < 0 else depth[p] + 1
    nodes = [NodeTrace(i, p, depth[i], 100 + i, tok, None if p < 0 else 0.5, None, 0.0, 0, 10 + depth[i], st)
             for i, (tok, p, st) in enumerate(zip(tokens, parents, statuses))]
    mask = [[1 if j == i or j in _anc(parents, i) else 0 for j in range(len(parents))] for i in range(len(parents))]
    acc = [i for i, s in enumerate(statuses) if s == "accepted"]
    return RoundTrace(0, "eagle3", "greedy", {"temperature": 0}, 10, nodes, mask, [n.position for n in nodes], [], acc,
                      7, "!", "greedy-correction", [[7, "!", 0.9]], [100 + i for i in acc] + [7], [tokens[i] for i in acc] + ["!"], 0, 0, 0)


def _anc(parents, i):
    out = []
    while parents[i] >= 0:
        i = parents[i]
        out.append(i)
    return out


def traces():
    return [small_trace(["a", "b", "c", "d"], [-1, 0, 0, 1], ["root", "accepted", "untried", "rejected"]),
            small_trace(["e", "f"], [-1, 0], ["root", "rejected"]),
            small_trace(["g", "h", "i"], [-1, 0, 1], ["root", "accepted", "accepted"])]


def check_block_diagonal(trs, mask):
    at = 0
    for tr_ in trs:
        k = len(tr_.nodes)
        assert (mask[at:at + k, at:at + k] == np.array(tr_.tree_mask)).all()
        assert not mask[at:at + k, :at].any() and not mask[at:at + k, at + k:].any()  # nothing of another user
        at += k
    assert at == mask.shape[0] == mask.shape[1]


def test_batch_mask_is_block_diagonal_of_the_tree_masks():
    trs = traces()
    mask = vb.batch_mask(trs)
    check_block_diagonal(trs, mask)
    fig = _is_fig(vb.batch_mask_figure(trs, "en"))
    z = np.array(fig.data[0].z)
    assert ((z > 0) == (mask > 0)).all()
    assert set(z[4:6, 4:6].ravel()) == {0, 2} and set(z[6:, 6:].ravel()) == {0, 3}  # a visible cell: its user's number
    assert list(fig.data[0].y)[4] == "U2 #0 e" and len(set(fig.data[0].x)) == 9
    hover = fig.data[0].hovertext
    assert t("batch.mask_other_user", "en") in hover[0][5] and hover[4][4].startswith("User 2: U2 #0 e")
    assert t("batch.mask_other_branch", "en") in hover[2][1]  # c and b: siblings in user 1's tree
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    assert [(r.x0, r.x1) for r in rects] == [(-0.5, 3.5), (3.5, 5.5), (5.5, 8.5)]
    assert fig.layout.xaxis.title.text == "key token: every token of the one pass"
    assert _is_fig(vb.batch_mask_figure(trs, "zh")).layout.xaxis.title.text == t("batch.mask_cols", "zh")


def test_recorded_batched_round_mask_and_trees():
    rec = lesson_batch.load()
    assert rec is not None and len(rec.traces) == 3
    mask = vb.batch_mask(rec.traces)
    assert mask.shape == (rec.pass_rows, rec.pass_rows)
    check_block_diagonal(rec.traces, mask)
    fig = _is_fig(vb.batch_trees_figure(rec.traces, "en"))
    assert [a.text for a in fig.layout.annotations] == ["<b>User 1</b>", "<b>User 2</b>", "<b>User 3</b>"]
    for k, tr_ in enumerate(rec.traces):  # each tree in its own subplot, its nodes coloured by status
        ax = "x" if k == 0 else f"x{k + 1}"
        for status in ("accepted", "untried", "rejected"):
            want = sorted(n.id for n in tr_.nodes if n.status == status)
            got = [d for d in fig.data if d.xaxis == ax and d.marker is not None and d.marker.color == STATUS_COLORS[status]]
            assert sorted(c[0] for d in got for c in d.customdata) == want, (k, status)
    names = [d.name for d in fig.data if d.showlegend]
    assert len(names) == len(set(names))  # a status once in the legend, not once per user
    zh = _is_fig(vb.batch_trees_figure(rec.traces, "zh", titles=["甲", "乙", "丙"]))
    assert [a.text for a in zh.layout.annotations] == ["<b>甲</b>", "<b>乙</b>", "<b>丙</b>"]


# ---------------------------------------------------------------------- words and shipped files
def report(bb, cpu="Test CPU", cuda=None, device=None):
    return {"by_batch": bb, "trees": TREES, "machine": {"cpu": cpu, "threads": 2, "cuda": cuda}, "settings": {"device": device}}


def test_crossover_in_words_with_the_measured_numbers():
    s = crossover_summary(by_batch())
    assert s == {"b": 4, "at": 4, "tps": 280, "base_tps": 300, "last_ahead": 2, "last_tps": 190, "last_base": 180,
                 "smallest": 1, "largest": 8, "largest_tps": 400, "largest_base": 520}
    text = crossover_sentence(report(by_batch()), "en")
    assert text == ("On Test CPU (2 threads), EAGLE-3 (tuned tree) is ahead up to B = 2 (190 against vanilla's 180 tokens/s, all users "
                    "together) and stops paying at **B = 4**: 280 against 300. At B = 8: 400 against 520 (0.77x).")
    at_1 = crossover_sentence(report(by_batch(eagle3=(120, 170, 280, 400))), "en")
    assert "is ahead at B = 1 (120 against vanilla's 100" in at_1 and "**B = 2**: 170 against 180" in at_1
    never = crossover_sentence(report(by_batch(eagle3=(200, 300, 400, 600))), "en")
    assert "every measured batch size up to B = 8" in never
    first = crossover_sentence(report(by_batch(eagle3=(90, 100, 110, 120))), "zh")
    assert "**B = 1**" in first and "90" in first and "None" not in first
    assert "no EAGLE-3" in crossover_sentence(report({"1": {"vanilla": entry(1, 1)}}), "en")
    assert machine_label(report({}, cuda="NVIDIA H200", device="cuda")) == "NVIDIA H200"
    assert machine_label(report({}, cuda="NVIDIA H200", device="cpu"), "zh") == "Test CPU（2 个线程）"
    assert tree_words(TREES["eagle3"]) == "a dynamic tree of depth 5, at most 64 nodes, paths kept above probability 0.15 (tuned for the measuring machine)"
    assert tree_words(dict(TREES["eagle3"], lookup=3)) == (
        "a dynamic tree of depth 5, at most 64 nodes, paths kept above probability 0.15, plus up to 3 tokens copied "
        "from the context (prompt lookup) (tuned for the measuring machine)")


def test_shipped_batch_results_read_only_measurements(tmp_path):
    def write(name, data):
        (tmp_path / name).write_text(json.dumps(data))

    write("batch_cpu.json", {**report(by_batch()), "date": "2026-12-01"})
    write("batch_cuda.json", {**report(by_batch(), cuda="NVIDIA H200"), "date": "2026-12-02"})
    write("batch_empty.json", {**report({}), "date": "2026-12-03"})
    write("batch_broken.json", {"by_batch": {"1": {}}})
    (tmp_path / "batch_bad.json").write_text("{not json")
    write("specbench_fp32_t0.json", report(by_batch()))
    got = measured.shipped_batch_results(tmp_path)
    assert [(r["file"], r["gpu"]) for r in got] == [("batch_cpu.json", False), ("batch_cuda.json", True)]  # CPU first


def test_the_shipped_batched_benchmark():
    """What the page reads: a CPU run with vanilla and EAGLE-3 at every measured B, identical outputs."""
    shipped = measured.shipped_batch_results()
    assert shipped, "no assets/results/batch_*.json with measurements"
    r = shipped[0]
    assert not r["gpu"] and r["kind"] == "batch"
    assert [int(b) for b in r["by_batch"]] == r["batch_sizes"]
    for b, e in r["by_batch"].items():
        assert {"vanilla", "eagle3"} <= set(e), b
        assert all(m.get("identical_to_vanilla") is not False for m in e.values()), b
    assert "None" not in crossover_sentence(r, "en")
