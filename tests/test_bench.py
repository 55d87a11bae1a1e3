"""The benchmark CLI's contract: the JSON others script against, identity checks, per category."""

import json
import sys

import pytest

from specviz.bench import cli as bench
from specviz import tuning


@pytest.fixture
def specbench_file(tmp_path):
    rows = [
        {"question_id": 1, "category": "translation", "turns": ["Translate German to English: Guten Morgen, wie geht es dir?"]},
        {"question_id": 2, "category": "math_reasoning", "turns": ["What is 12 times 7? Answer briefly."]},
    ]
    f = tmp_path / "q.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows))
    return f


@pytest.mark.slow
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


# ----------------------------------------------------------------------------- the llama.cpp peers
@pytest.fixture
def one_prompt(tmp_path):
    f = tmp_path / "one.jsonl"
    # an answer the model is sure of (its first token leads by ~3 logits), so llama.cpp's own numerics
    # (~1 logit from ours) cannot flip its start; "What is the capital of France?" is a near-tie (0.08)
    f.write_text(json.dumps({"question_id": 7, "category": "qa", "turns": ["Name the largest planet in the solar system."]}))
    return f


@pytest.mark.slow
def test_llamacpp_peers_are_skipped_with_the_install_command_when_missing(one_prompt, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` now fails as if it were not installed
    ok, why = bench.llamacpp.available()
    assert not ok and "pip install llama-cpp-python" in why
    out = tmp_path / "r.json"
    rc = bench.main(["--methods", "vanilla,llamacpp,llamacpp-pld", "--prompts", str(one_prompt), "--max-new-tokens", "4",
                     "--out", str(out)])
    assert rc == 0  # the other methods still run
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "skipped" in ln]
    assert len(lines) == 1 and "llamacpp, llamacpp-pld" in lines[0] and "pip install llama-cpp-python" in lines[0]
    rep = json.loads(out.read_text())
    assert list(rep["by_dtype"]["fp32"]["methods"]) == ["vanilla"]
    assert set(rep["skipped"]) == {"llamacpp", "llamacpp-pld"}
    # nothing else to run: an error that says how to install it
    assert bench.main(["--methods", "llamacpp", "--prompts", str(one_prompt), "--max-new-tokens", "4"]) == 2
    assert "pip install llama-cpp-python" in capsys.readouterr().err


def test_llamacpp_peers_run_on_the_same_gguf_and_prompt_ids(one_prompt, tmp_path, target):
    pytest.importorskip("llama_cpp")
    from specviz.runtime.loading import default_gguf_path

    out = tmp_path / "r.json"
    methods = ["vanilla", "llamacpp", "llamacpp-pld"]
    rc = bench.main(["--methods", ",".join(methods), "--prompts", str(one_prompt), "--max-new-tokens", "8",
                     "--threads", "2", "--out", str(out)])
    assert rc == 0
    rep = json.loads(out.read_text())
    assert rep["skipped"] == {}
    res = rep["by_dtype"]["fp32"]["methods"]
    assert list(res) == methods
    vocab, eos = target.cfg.vocab_size, target.eos_ids
    for m in ("llamacpp", "llamacpp-pld"):
        s = res[m]
        for key in ("tokens_per_s", "speedup_vs_vanilla", "identical_to_vanilla", "vanilla_match", "per_prompt", "llamacpp"):
            assert key in s, (m, key)
        assert s["llamacpp"]["gguf"] == default_gguf_path().name and s["llamacpp"]["n_threads"] == 2
        assert s["tokens_per_s"] > 0 and s["decode_tokens_per_s"] is None  # timed whole, prefill included
        (row,) = s["per_prompt"]
        ids = row["ids"]
        assert 1 <= len(ids) <= 8 and row["n_tokens"] == len(ids) == s["new_tokens"]
        assert all(isinstance(t, int) and 0 <= t < vocab for t in ids)
        assert len(ids) == 8 or ids[-1] in eos  # stops at EOS like our engine, or at the cap
        assert not any(t in eos for t in ids[:-1])
        assert row["tokens_per_s"] == pytest.approx(row["n_tokens"] / row["seconds"])
        assert 0 < row["first_token_s"] <= row["seconds"]
        vm = s["vanilla_match"]
        assert vm["n_prompts"] == 1 and vm["identical_prompts"] == int(row["identical_to_vanilla"])
        assert s["identical_to_vanilla"] is row["identical_to_vanilla"]
        # the same chat-formatted prompt ids: llama.cpp starts its answer as our vanilla does
        assert row["common_prefix"] >= 4, (ids, m)
    assert res["llamacpp-pld"]["llamacpp"]["pld"] == {"max_ngram_size": 3, "num_pred_tokens": 10}


@pytest.mark.slow
def test_bench_batch_writes_by_batch(specbench_file, tmp_path):
    """`--batch`: every method at every B on the same prompts (the 2 prompts repeat to fill B = 4),
    identical to vanilla, with throughput, per-user speed and the batched round's split."""
    out = tmp_path / "b.json"
    rc = bench.main(["--batch", "1,4", "--methods", "vanilla,pld,eagle3@paper", "--prompts", str(specbench_file),
                     "--max-new-tokens", "10", "--out", str(out)])
    assert rc == 0
    rep = json.loads(out.read_text())
    assert rep["kind"] == "batch" and rep["batch_sizes"] == [1, 4]
    assert rep["trees"]["eagle3@paper"]["total_tokens"] == 24 and rep["trees"]["vanilla"] is None
    for B, entry in rep["by_batch"].items():
        assert list(entry) == ["vanilla", "pld", "eagle3@paper"]
        for m, e in entry.items():
            assert e["identical_to_vanilla"] is True, (B, m)
            assert e["sequences"] == max(2, int(B)) and e["new_tokens"] > 0
            assert e["throughput_tok_s"] > 0 and e["per_seq_tok_s"] > 0
            r = e["per_round_ms"]
            assert r["verify"] > 0 and r["sequences"] <= int(B)
        assert entry["vanilla"]["tau"] == pytest.approx(1.0)
        assert entry["vanilla"]["speedup_vs_vanilla"] == pytest.approx(1.0)
        assert entry["eagle3@paper"]["per_round_ms"]["rows"] > entry["vanilla"]["per_round_ms"]["rows"]
    # four sequences share each pass at B = 4 (until the first ones finish)
    assert rep["by_batch"]["4"]["vanilla"]["per_round_ms"]["sequences"] > 2


@pytest.mark.parametrize("args,msg", [
    (["--batch", "0,2"], "from 1 to 64"),
    (["--batch", "two"], "batch sizes like"),
    (["--batch", "2", "--methods", "vanilla,hf"], "Unknown method 'hf'"),
    (["--batch", "2", "--methods", "pld@paper"], "only a tunable method"),
])
def test_bench_batch_rejects_bad_input(args, msg, capsys):
    assert bench.main([*args, "--limit", "1"]) == 2
    assert msg in capsys.readouterr().err


def test_crossover_is_the_first_batch_where_speculation_no_longer_pays():
    from specviz.bench.batched import crossover

    by = {str(b): {"vanilla": {"throughput_tok_s": v}, "eagle3": {"throughput_tok_s": e}}
          for b, v, e in ((1, 100, 120), (2, 150, 160), (4, 200, 190), (8, 260, 270))}
    assert crossover(by, "eagle3") == 4
    by["4"]["eagle3"]["throughput_tok_s"] = 210
    assert crossover(by, "eagle3") is None


def test_round_anatomy_counts_a_phase_inside_another_once(monkeypatch):
    """scripts/round_anatomy.py: time spent in a phase running inside another (the LM-head rows the
    walk asks for) counts for the inner phase only, so the phases add up to the round."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("round_anatomy", Path(__file__).parent.parent / "scripts" / "round_anatomy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ticks = iter([0.0, 1.0, 4.0, 10.0, 20.0, 22.0])  # walk starts, head starts, head ends, walk ends; then a lone head
    monkeypatch.setattr(mod.time, "perf_counter", lambda: next(ticks))
    clock = mod.Clock()
    head = clock.wrap(lambda: "logits", "lm_head")
    walk = clock.wrap(lambda: head(), "walk")
    assert walk() == "logits"
    assert head() == "logits"
    assert dict(clock.spent) == {"lm_head": 3.0 + 2.0, "walk": 10.0 - 3.0}


def test_a_llamacpp_build_is_named_by_its_version_and_instruction_sets():
    """The bench records which llama.cpp build ran (its speed depends on it); the README's table prints
    `build` as it is (test_docs checks the table against scripts/results_table.py)."""
    from specviz.bench import llamacpp as P

    info = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | AVX512 = 0 | LLAMAFILE = 1 | OPENMP = 1 |"
    assert P.simd_flags(info) == ["SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "LLAMAFILE", "OPENMP"]

    class Fake:
        __version__ = "0.3.36"

        @staticmethod
        def llama_print_system_info():
            return info.encode()

    rec = P.build_info(Fake)
    assert rec["llama_cpp_python"] == "0.3.36" and rec["system_info"] == info and "AVX512" not in rec["simd"]
    assert rec["build"] == "llama-cpp-python 0.3.36: SSE3, SSSE3, AVX, AVX2, F16C, FMA, LLAMAFILE, OPENMP"
    assert P.build_text({"llama_cpp_python": "0.3.36"}) == "build not recorded"  # runs made before builds were kept
