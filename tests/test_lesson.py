"""The lesson: every recorded round replays live to the identical trace, and the Lesson page
steps through all its steps in English and Chinese without an exception."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz.teaching import lesson as LS
from specviz.runtime import agreement, machine
from specviz.core.trace import RoundTrace

ROUNDS = LS.load_rounds()
ROOT = Path(__file__).resolve().parent.parent


def test_every_spec_is_recorded_small_and_self_describing():
    assert set(ROUNDS) == {s.key for s in LS.SPECS}
    total = sum(LS.lesson_path(k).stat().st_size for k in ROUNDS) + (LS.LESSON_DIR / LS.MACHINE_FILE).stat().st_size
    assert total < 1_000_000, total
    for key, rec in ROUNDS.items():
        spec = LS.SPEC_BY_KEY[key]
        assert rec.spec["prompt"] == spec.prompt and rec.spec["method"] == spec.method and rec.spec["options"] == spec.options
        assert rec.heads and all(len(v) == 64 for v in rec.heads.values())  # sha256 of the shipped head
        assert LS.picks(rec.trace, spec.pick, spec.min_accept), key  # still the kind of round its step needs
        assert rec.trace.rng_state_before is not None and rec.trace.tree_mask


def test_recordings_are_paper_sized_branching_trees():
    sizes = {k: len(r.trace.nodes) - 1 for k, r in ROUNDS.items()}
    assert sizes["eagle1-greedy"] == 25  # the EAGLE-1 paper's static tree
    assert 20 <= sizes["eagle3-greedy"] <= 24 and 20 <= sizes["eagle2-greedy"] <= 24
    assert 50 <= sizes["eagle3-60"] <= 60
    assert ROUNDS["eagle3-sampled-reject"].trace.extra_source == "resampled"
    assert any(not s.accepted and s.u is not None for s in ROUNDS["eagle3-sampled-reject"].trace.steps)
    assert ROUNDS["eagle3-sampled-bonus"].trace.extra_source == "bonus"
    m = LS.load_machine()
    assert m["lossless"]["identical"] and int(min(m["forward_ms"], key=int)) == 1


def test_heads_are_the_ones_recorded(target):
    for rec in ROUNDS.values():
        assert LS.head_checksums(target, rec.spec["method"]) == rec.heads, "the shipped head changed: re-record"


@pytest.mark.parametrize("key", [s.key for s in LS.SPECS])
def test_replays_live_to_the_identical_trace(target, key):
    """Every field but the three timings, judged by specviz.runtime.agreement's policy: floats exactly where
    this machine computes as the recording one did (same torch vector kernels and vendor, same
    block-kernel width), elsewhere to the fp32 model tolerance; tokens, tree, decisions and draws
    exactly everywhere."""
    rec = ROUNDS[key]
    _, check = LS.check_replay(target, rec)
    assert check.differences == []
    same = rec.recorded.get("numerics") == machine.numerics()
    assert check.tolerance == (0.0 if same else agreement.model_tolerance(target.model.cfg))
    if same:
        assert check.exact


def test_the_replay_policy_holds_floats_to_the_tolerance_and_the_rest_exactly(target):
    """compare_replay on a recording against itself with planted changes: a float moved within the
    cross-machine tolerance passes only when the numerics differ; a token never passes."""
    rec = ROUNDS["eagle3-greedy"]
    tol = agreement.model_tolerance(target.model.cfg)
    assert 1e-4 < tol < 1e-2  # fp32, 30 layers of k = 1536: about 1e-3
    moved = RoundTrace.from_dict(json.loads(rec.trace.to_json()))
    node = next(n for n in moved.nodes if n.p)
    node.p *= 1 + tol / 4
    same = LS.compare_replay([rec.trace], [moved], machine.numerics(), target.model.cfg)
    assert not same.exact and same.differences and same.tolerance == 0.0
    other = LS.compare_replay([rec.trace], [moved], "another CPU", target.model.cfg)
    assert not other.exact and other.agrees and other.tolerance == tol
    node.p *= 1 + 4 * tol  # beyond the tolerance
    assert LS.compare_replay([rec.trace], [moved], "another CPU", target.model.cfg).differences
    token = RoundTrace.from_dict(json.loads(rec.trace.to_json()))
    token.nodes[1].token += 1
    assert LS.compare_replay([rec.trace], [token], "another CPU", target.model.cfg).differences


def test_numerics_name_the_cpu_vendor():
    """Two CPUs with the same vector width still differ in torch's MKL kernels (chosen by vendor):
    the string that decides an exact replay must tell an AMD EPYC from an Intel Xeon."""
    assert machine.cpu_vendor("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t: avx2") == "AMD"
    assert machine.cpu_vendor("vendor_id : GenuineIntel") == "Intel"
    assert machine.cpu_vendor("vendor_id : HygonGenuine") == "HygonGenuine"
    assert machine.cpu_vendor("model name : a CPU") == ""
    vendor = machine.cpu_vendor()
    if vendor:
        assert f"({vendor})" in machine.numerics()


def test_differences_sees_a_change_and_ignores_timings():
    rec = ROUNDS["eagle3-greedy"]
    other = RoundTrace.from_dict(json.loads(rec.trace.to_json()))
    other.total_time_s += 1.0
    assert LS.differences(rec.trace, other) == []
    other.nodes[3].p = (other.nodes[3].p or 0) + 1e-3
    other.steps[0].u = 0.5
    d = LS.differences(rec.trace, other)
    assert any(x.startswith("nodes[3].p") for x in d)
    assert any(x.startswith("steps[0].u") for x in d)


# ---------------------------------------------------------------------- the page
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_lesson_page_steps_through_every_step(lang, new_app):
    from test_zh import english_left

    at = new_app("views/lesson.py", timeout=60)
    at.session_state["lang"] = lang
    at.run()
    assert not at.exception, at.exception
    n = len(at.selectbox(key="lesson_step").options)
    assert 6 <= n <= 11
    seen = []
    for i in range(n):
        assert at.session_state["lesson_step"] == i + 1
        assert not at.exception, (i, at.exception)
        assert not at.error, (i, [e.value for e in at.error])
        seen.append(at.header[0].value)
        if lang == "zh":  # the page's own text (the shared sidebar is checked by test_zh)
            assert not english_left(at.main), (i + 1, english_left(at.main))
        text = " ".join(m.value for m in at.markdown)
        assert "None" not in text
        for df in at.dataframe:
            assert "None" not in df.value.astype(str).to_string()
        if i + 1 < n:
            at.button(key="lesson_next").click().run()
    assert len(set(seen)) == n
    if lang == "zh":
        assert "附加 token" in seen  # the bonus token, never 奖励
        assert not any("奖励" in s for s in seen)


def test_run_it_live_button_replays_the_step(new_app):
    """Step 2's button runs the recorded settings through the engine and says the round is identical."""
    at = new_app("views/lesson.py")
    at.run()
    at.button(key="lesson_next").click().run()
    assert at.session_state["lesson_step"] == 2
    at.button(key="lesson_live_s2").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    said = [s.value for s in at.success]
    same = LS.load_round("eagle3-greedy").recorded.get("numerics") == machine.numerics()  # step 2's round
    expect = "identical to the recording" if same else "identical tokens, tree, accept/reject decisions and random draws"
    assert any(expect in s for s in said), said


def test_deep_link_opens_a_step(new_app):
    at = new_app("views/lesson.py", timeout=60)
    at.query_params["step"] = "6"
    at.run()
    assert not at.exception and at.session_state["lesson_step"] == 6
    fresh = new_app("views/lesson.py", timeout=60)  # a bad value is ignored
    fresh.query_params["step"] = "zz"
    fresh.run()
    assert not fresh.exception and fresh.session_state["lesson_step"] == 1


def test_trace_json_equals_dataclasses_asdict():
    """`RoundTrace.to_json` skips asdict's deep copy; the text must stay the same, key order too."""
    import dataclasses
    import json

    for key in ("eagle3-greedy", "eagle3-sampled-reject", "eagle1-greedy"):
        tr = LS.load_round(key).trace
        assert tr.to_json() == json.dumps(dataclasses.asdict(tr), ensure_ascii=False)
        assert tr.to_dict()["nodes"][0] is not vars(tr.nodes[0])  # a copy: editing it leaves the trace alone


def test_step_one_names_the_machine_its_curve_was_measured_on(new_app):
    """The cost curve comes from a benchmark file: the caption names that file's CPU, not the
    machine that recorded the lesson rounds."""
    m = LS.load_machine()
    src = m["forward_source"]
    bench = json.loads((Path(LS.__file__).resolve().parents[2] / "assets" / src["file"]).read_text())
    assert src["machine"]["cpu"] == bench["machine"]["cpu"]
    at = new_app("views/lesson.py", timeout=60)
    at.run()
    caption = " ".join(c.value for c in at.caption)
    assert f"{src['machine']['cpu']}, {src['machine']['threads']} threads" in caption, caption
