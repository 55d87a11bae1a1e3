"""The benchmark CLI's contract: the JSON others script against, identity checks, per category."""

import json

import pytest

from specviz import bench, tuning


@pytest.fixture
def specbench_file(tmp_path):
    rows = [
        {"question_id": 1, "category": "translation", "turns": ["Translate German to English: Guten Morgen, wie geht es dir?"]},
        {"question_id": 2, "category": "math_reasoning", "turns": ["What is 12 times 7? Answer briefly."]},
    ]
    f = tmp_path / "q.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows))
    return f


def test_bench_cli_writes_the_contracted_json(specbench_file, tmp_path, monkeypatch, pinned_costs):
    # a fixed cost table: the tuned tree is then a pure function of the shipped profile
    costs = {"forward": {"1": 0.03, "16": 0.06, "64": 0.15}, "overhead": 0.002,
             **{f"draft.{m}": {str(i): 0.003 * i for i in range(1, 30)} for m in ("eagle1", "eagle2", "eagle3", "medusa")}}
    pick = pinned_costs(costs)
    out = tmp_path / "r.json"
    methods = "vanilla,hf,hf-pld,hf-assisted,pld,eagle3,eagle1"
    rc = bench.main(["--methods", methods, "--prompts", str(specbench_file), "--max-new-tokens", "12",
                     "--out", str(out)])
    assert rc == 0
    rep = json.loads(out.read_text())
    assert {"settings", "machine", "date", "by_dtype"} <= set(rep)
    res = rep["by_dtype"]["fp32"]["methods"]
    assert rep["by_dtype"]["fp32"]["weights"].startswith("GGUF block weights")  # default: the block kernel
    assert list(res) == methods.split(",")
    for m, s in res.items():
        for key in ("tau", "tokens_per_s", "speedup_vs_vanilla", "speedup_vs_hf", "alpha_by_depth", "by_category"):
            assert key in s, (m, key)
        assert set(s["by_category"]) == {"translation", "math_reasoning"}
        assert s["identical_to_vanilla"] is True, m  # greedy: every method reproduces vanilla
        assert s["tokens_per_s"] > 0
    assert res["vanilla"]["speedup_vs_vanilla"] == pytest.approx(1.0)
    assert res["vanilla"]["tau"] == pytest.approx(1.0)
    assert res["eagle3"]["tau"] >= 1.0 and res["eagle3"]["tree"]["source"] == "device-tuned"
    from specviz.heads.io import shipped_head_dir

    prof = tuning.load_profile(shipped_head_dir("smollm2-135m-instruct", "eagle3"), "eagle3")
    best = pick(prof, "eagle3")
    assert res["eagle3"]["tree"]["total_tokens"] == best["total_tokens"]
    br = res["eagle3"]["per_round_ms"]
    assert br["draft"] > 0 and br["verify"] > 0 and br["nodes"] >= 1
    assert br["prefill"] > 0 and br["other"] >= 0  # the prompt's prefill is not counted as per-round overhead
    # decode-only rates: the rounds' time without the prefill, which is the same pass for every method
    for m in ("vanilla", "pld", "eagle3", "eagle1"):
        s = res[m]
        assert 0 < s["prefill_seconds"] < s["seconds"], m
        assert s["decode_tokens_per_s"] == pytest.approx(s["new_tokens"] / (s["seconds"] - s["prefill_seconds"]))
        assert s["decode_tokens_per_s"] > s["tokens_per_s"]
        assert s["decode_speedup_vs_vanilla"] == pytest.approx(s["decode_tokens_per_s"] / res["vanilla"]["decode_tokens_per_s"])
    assert res["hf"]["decode_tokens_per_s"] is None and "decode_speedup_vs_vanilla" not in res["hf"]  # generate() is timed whole
    v = res["vanilla"]
    assert v["speedup_ceiling"] == pytest.approx(v["seconds"] / v["prefill_seconds"]) and v["speedup_ceiling"] > 1


def test_bench_rejects_bad_input(capsys):
    assert bench.main(["--methods", "vanilla,nonsense", "--limit", "1"]) == 2
    assert "nonsense" in capsys.readouterr().err
    assert bench.main(["--dtype", "fp64"]) == 2


def test_bench_reports_a_broken_prompt_file(tmp_path, capsys):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"turns": ["fine"]}\nnot json\n')
    assert bench.main(["--methods", "vanilla", "--prompts", str(f)]) == 2
    assert "line 2" in capsys.readouterr().err


def test_heldout_prompts_need_the_training_data(tmp_path, monkeypatch):
    from specviz import SpecVizError
    from specviz.train import data

    monkeypatch.setattr(data, "default_data_dir", lambda: tmp_path)
    with pytest.raises(SpecVizError, match="python -m specviz.train data"):
        bench.load_prompts("heldout", 2)
