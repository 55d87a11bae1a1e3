"""Training pipeline on a tiny random target: data shards, loss goes down, resume, export/load."""

from __future__ import annotations

import json

import pytest
import torch

from specviz import SpecVizError
from specviz.heads import load_head
from specviz.train.data import GenConfig, SeqData, generate_batch, iter_sharegpt, save_shard
from specviz.train.trainers import TrainConfig, train


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_target, tiny_data):
    folder = tmp_path_factory.mktemp("data")
    model = tiny_target()
    tiny_data(folder, model, n_train=16, n_held=8, new=12)
    return model, folder


def test_batched_generation_matches_single_rows(tiny_target):
    """Left-padded batched greedy decoding == decoding each prompt alone (taps and labels too)."""
    model = tiny_target(seed=3)
    taps = tuple(model.cfg.eagle3_layers()) + ("final",)
    prompts = [[5, 9, 17, 33, 2], [7, 8], [40, 41, 42, 43, 44, 45, 46, 47, 48]]
    cfg = GenConfig(max_new_tokens=6, topk=4)
    g = torch.Generator().manual_seed(0)
    batch = generate_batch(model, prompts, [0.0] * 3, cfg, {1}, taps, g)
    for p, s in zip(prompts, batch):
        alone = generate_batch(model, [p], [0.0], cfg, {1}, taps, g)[0]
        assert s["tokens"] == alone["tokens"]
        for t in taps:
            assert torch.allclose(s["feats"][t].float(), alone["feats"][t].float(), atol=0.05, rtol=0.02), t
        assert torch.equal(s["topk_ids"][:, 0], alone["topk_ids"][:, 0])
        assert s["feats"]["final"].shape[0] == len(s["tokens"]) - 1


def test_prefill_model_hands_its_cache_to_the_decoder(tiny_target):
    """A separate prefill model (data --prefill-dtype) gives the same rows as prefilling in place:
    exactly with a same-precision twin (so the K/V copy, positions and padding are right), and up to
    bf16 rounding with a bf16 twin (sampled rows too: the draws come from the same generator)."""
    model = tiny_target(seed=3)
    taps = tuple(model.cfg.eagle3_layers()) + ("final",)
    prompts = [[5, 9, 17, 33, 2], [7, 8], [40, 41, 42, 43, 44, 45, 46, 47, 48]]
    cfg = GenConfig(max_new_tokens=6, topk=4)
    temps = [0.0, 0.8, 0.0]
    run = lambda pre: generate_batch(model, prompts, temps, cfg, {1}, taps, torch.Generator().manual_seed(0),
                                     prefill_model=pre)
    base, twin, half = run(None), run(tiny_target(seed=3)), run(tiny_target(seed=3, dtype=torch.bfloat16))
    for a, b, c in zip(base, twin, half):
        assert a["tokens"] == b["tokens"] and torch.equal(a["topk_ids"], b["topk_ids"])
        assert torch.equal(a["topk_logp"], b["topk_logp"])
        for t in taps:
            assert torch.equal(a["feats"][t], b["feats"][t]), t
        assert c["tokens"][: len(a["tokens"])] == a["tokens"][: len(c["tokens"])]  # bf16 context, same answer here
        assert torch.allclose(c["topk_logp"][:, 0].float(), a["topk_logp"][:, 0].float(), atol=0.05)
        assert not torch.equal(c["feats"][2], a["feats"][2])  # the bf16 twin did compute the context


def test_shards_round_trip(tmp_path, tiny_target):
    model = tiny_target()
    taps = tuple(model.cfg.eagle3_layers()) + ("final",)
    g = torch.Generator().manual_seed(0)
    seqs = generate_batch(model, [[3, 4, 5], [6, 7]], [0.0, 0.8], GenConfig(max_new_tokens=5, topk=4), {1}, taps, g)
    save_shard(tmp_path / "train-00000.safetensors", seqs, taps)
    back = SeqData(tmp_path, "train")
    assert len(back) == 2
    for a, b in zip(seqs, back.seqs):
        assert a["tokens"] == b["tokens"].tolist() and a["prompt_len"] == b["prompt_len"]
        assert torch.equal(a["topk_ids"].long(), b["topk_ids"])
        assert b["feats"]["final"].shape == a["feats"]["final"].shape
    assert back.seqs[1]["temp"] == pytest.approx(0.8)


def test_sharegpt_truncated_file_parses():
    convs = list(iter_sharegpt(limit=20))
    assert len(convs) == 20 and all("conversations" in c for c in convs)


@pytest.mark.parametrize("method", ["eagle3", "eagle1", "medusa"])
def test_tiny_training_lowers_loss_and_exports(tiny, tmp_path, method):
    model, data = tiny
    cfg = TrainConfig(method=method, data_dir=str(data), out=str(tmp_path / "head"), ckpt_dir=str(tmp_path / "ck"),
                      max_steps=40, lr=3e-3, warmup=3, max_tokens=256, draft_vocab=96, steps_ttt=3, medusa_heads=2,
                      log_every=5)
    head, ev = train(cfg, model=model, log=lambda s: None)
    hist = [h for h in json.loads((tmp_path / "head" / "train_info.json").read_text())["history"] if "loss" in h]
    assert hist[-1]["loss"] < 0.8 * hist[0]["loss"], hist
    back = load_head(tmp_path / "head", target=model)
    assert type(back) is type(head)
    assert "acc" in ev and len(ev["acc"]) == 6


def test_training_resumes(tiny, tmp_path):
    model, data = tiny
    kw = dict(method="eagle3", data_dir=str(data), out=str(tmp_path / "head"), ckpt_dir=str(tmp_path / "ck"),
              lr=3e-3, warmup=3, max_tokens=256, draft_vocab=96, steps_ttt=2, log_every=5)
    logs = []
    train(TrainConfig(max_steps=6, **kw), model=model, log=logs.append)
    train(TrainConfig(max_steps=10, **kw), model=model, log=logs.append)
    assert any("resumed" in line and "step 6" in line for line in logs)
    info = json.loads((tmp_path / "head" / "train_info.json").read_text())
    assert info["steps"] == 10


@pytest.mark.parametrize("has_bf16", [False, True])
def test_autocast_runs_in_fp32_on_a_cpu_without_native_bf16(tiny, tmp_path, monkeypatch, has_bf16):
    """Emulated bf16 made a step >20x slower than fp32 on a Zen 3: there `--autocast` is refused
    with a note and the run trains in fp32; with AVX-512 BF16 / AMX it stays on."""
    from specviz.train import trainers

    model, data = tiny
    monkeypatch.setattr(trainers, "cpu_has_bf16", lambda: has_bf16)
    seen = []
    real = torch.autocast
    monkeypatch.setattr(trainers.torch, "autocast", lambda *a, **k: seen.append(k["enabled"]) or real(*a, **k))
    logs = []
    cfg = TrainConfig(method="eagle3", data_dir=str(data), out=str(tmp_path / "head"), ckpt_dir=str(tmp_path / "ck"),
                      max_steps=2, lr=3e-3, warmup=1, max_tokens=256, draft_vocab=96, steps_ttt=2, autocast=True)
    train(cfg, model=model, log=logs.append)
    assert seen and all(e == has_bf16 for e in seen)
    assert any("--autocast ignored" in line for line in logs) == (not has_bf16)


def test_cpu_has_bf16_reads_the_flags():
    from specviz.runtime.machine import cpu_has_bf16

    zen3 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
    zen5 = "processor\t: 0\nflags\t\t: fpu avx2 fma avx512f avx512_bf16 avx512_vnni\n"
    assert cpu_has_bf16(zen3) is False and cpu_has_bf16(zen5) is True
    assert cpu_has_bf16("model name\t: something\n") is None  # no flags line: unknown, left alone


@pytest.mark.parametrize("method", ["eagle3", "eagle1"])
def test_init_fine_tunes_an_exported_head(tiny, tmp_path, method):
    """--init starts from the exported weights (and EAGLE-3's draft vocabulary), not from a fresh head."""
    model, data = tiny
    kw = dict(method=method, data_dir=str(data), lr=3e-3, warmup=3, max_tokens=256, draft_vocab=96, steps_ttt=2,
              log_every=5)
    first, _ = train(TrainConfig(out=str(tmp_path / "a"), ckpt_dir=str(tmp_path / "cka"), max_steps=20, **kw),
                     model=model, log=lambda s: None)
    start = load_head(tmp_path / "a", target=model)
    zero_steps = TrainConfig(out=str(tmp_path / "b"), ckpt_dir=str(tmp_path / "ckb"), max_steps=0, **kw)
    zero_steps.max_steps, zero_steps.minutes = 0, 0.0  # no optimiser step: the export must equal the init
    again, _ = train(TrainConfig(**{**zero_steps.__dict__, "init": str(tmp_path / "a")}), model=model,
                     log=lambda s: None)
    for (name, a), b in zip(start.state_dict().items(), again.state_dict().values()):
        assert torch.equal(a.float(), b.float().cpu()), name
    with pytest.raises(Exception, match="not medusa"):
        train(TrainConfig(**{**zero_steps.__dict__, "method": "medusa", "init": str(tmp_path / "a")}), model=model,
              log=lambda s: None)


# --------------------------------------------------------------------------- sources: every turn, scored answers
def _records(convs):
    return [{"conversations": [t for h, g in c for t in ({"from": "human", "value": h}, {"from": "gpt", "value": g})]}
            for c in convs]


def test_every_turn_is_a_chat_template_context_without_heldout_or_benchmark_prompts(target):
    from specviz.examples import EXAMPLE_PROMPTS
    from specviz.train.sources import benchmark_texts, load_conversations, split_items

    tok = target.tokenizer  # the default model's chat tokenizer (converted on first load)
    bench = EXAMPLE_PROMPTS[0]
    raw = [
        [("Name three primary colours please.", "Red, blue and yellow."), ("And secondary ones?", "Green, orange, purple.")],
        [("What is the capital of France today?", "Paris."), ("How big is it, roughly?", "About 2 million people."),
         ("And its metro area population?", "About 12 million.")],
        [("Tell me a fact about owls at night.", "They hunt at night."), ("  " + bench.upper() + " ", "Something.")],
        [("Write a haiku about the sea please.", "Waves fold into foam."), ("And secondary ones?", "Leaked from held-out.")],
        [("Give me one word that rhymes with cat.", "Hat."), ("Another one, please?", "Bat.")],
    ]
    convs = load_conversations(_records(raw), seed=0)
    assert sorted(c[0][0] for c in convs) == sorted(c[0][0] for c in raw)  # all parsed, first turns intact
    convs = [next(c for c in convs if c[0][0] == r[0][0]) for r in raw]  # the order above: conversation 0 held out
    held, items = split_items(convs, tok, 1, 100, 160, turns="all", exclude=benchmark_texts())
    assert held == [tok.chat_ids(raw[0][0][0])]
    contexts = [tok.decode(c) for c, _ in items]
    want = [tok.chat_ids(raw[1][0][0]),
            tok.encode(tok.render_chat([{"role": "user", "content": raw[1][0][0]},
                                        {"role": "assistant", "content": raw[1][0][1]},
                                        {"role": "user", "content": raw[1][1][0]}]))]
    assert [c for c, _ in items[:2]] == want and len(items) == 3 + 2  # conversation 1's 3 turns, 4's 2 turns
    assert items[2][0][-len(tok.chat_ids("x")) :] != items[1][0][-1:]  # turn 2 is its own context
    assert "<|im_start|>assistant" in contexts[1] and contexts[1].count("<|im_start|>user") == 2
    # the benchmark conversation (every turn) and the one sharing a turn with held-out are gone
    assert not any("owls" in c or "haiku" in c or bench[:30] in c for c in contexts)
    assert all(tok.decode(held[0]) not in c for c in contexts)
    # a tight context budget drops the oldest exchanges whole, never the asked turn
    _, short = split_items(convs, tok, 1, 100, 160, turns="all", max_context_tokens=40)
    third = [c for c, _ in short if "metro area" in tok.decode(c)]
    assert third and tok.decode(third[0]).count("<|im_start|>user") < 3
    # first turns only: exactly the old prompt rule
    _, firsts = split_items(convs, tok, 1, 100, 160, turns="first", exclude=benchmark_texts())
    assert [c for c, _ in firsts] == [tok.chat_ids(raw[1][0][0]), tok.chat_ids(raw[4][0][0])]
    # scored: the original answer as the template writes it, ending with the end-of-turn token
    eos = {tok.token_to_id("<|im_end|>")}
    _, scored = split_items(convs, tok, 1, 100, 160, turns="all", scored=True, eos_ids=eos, max_new=64)
    ctx, ans = scored[1]
    assert tok.decode(ans) == raw[1][1][1] + "<|im_end|>" and ans[-1] in eos
    full = tok.encode(tok.render_chat([{"role": "user", "content": raw[1][0][0]},
                                       {"role": "assistant", "content": raw[1][0][1]},
                                       {"role": "user", "content": raw[1][1][0]},
                                       {"role": "assistant", "content": raw[1][1][1]}], add_generation_prompt=False))
    assert full[: len(ctx) + len(ans)] == ctx + ans


def test_a_first_turn_range_takes_the_long_first_turns_and_keeps_the_heldout_rule(target):
    from specviz.train.cli import first_turn_range
    from specviz.train.sources import load_conversations, split_items

    tok = target.tokenizer
    long_doc = "Summarise this text for me in two sentences please." + " The river ran past the old mill." * 12
    raw = [
        [("Name three primary colours please.", "Red, blue and yellow.")],  # held out
        [("What is the capital of France today?", "Paris.")],  # short
        [(long_doc, "A river and a mill.")],  # long
        [("Write a haiku about the sea please.", "Waves.")],  # short
    ]
    convs = load_conversations(_records(raw), seed=0)
    convs = [next(c for c in convs if c[0][0] == r[0][0]) for r in raw]
    n_long = len(tok.chat_ids(long_doc))
    assert 40 < n_long < 160
    held0, default = split_items(convs, tok, 1, 100, 160, turns="first")
    held, longs = split_items(convs, tok, 1, 100, 160, turns="first", first_turn_tokens=(40, 0))
    assert held == held0 == [tok.chat_ids(raw[0][0][0])]  # the held-out rule ignores the range
    assert [c for c, _ in default] == [tok.chat_ids(raw[i][0][0]) for i in (1, 2, 3)]
    assert [c for c, _ in longs] == [tok.chat_ids(long_doc)]  # only the one of >= 40 tokens
    # above max_prompt_tokens: a long turn the default rule (<= 40 here) leaves out
    _, none = split_items(convs, tok, 1, 100, 40, turns="first")
    _, wide = split_items(convs, tok, 1, 100, 40, turns="first", first_turn_tokens=(41, n_long))
    assert all(len(c) <= 40 for c, _ in none) and len(none) == 2
    assert [c for c, _ in wide] == [tok.chat_ids(long_doc)]
    _, cut = split_items(convs, tok, 1, 100, 40, turns="first", first_turn_tokens=(41, n_long - 1))
    assert cut == []
    assert first_turn_range("161:1024") == dict(min_first_turn_tokens=161, max_first_turn_tokens=1024)
    for bad in ("161", "a:b", "0:10", "50:10"):
        with pytest.raises(SpecVizError):
            first_turn_range(bad)


def test_train_conversations_with_longer_first_turns_leave_the_heldout_set_alone(target):
    from specviz.train.cli import first_turn_chars
    from specviz.train.sources import load_conversations, split_items

    tok = target.tokenizer
    doc = ("Summarise this for me please. " + "The river ran past the old mill while the miller watched. " * 25).strip()
    assert len(doc) > 1200
    raw = [
        [("Name three primary colours please.", "Red, blue and yellow.")],  # held out
        [("What is the capital of France today?", "Paris.")],
        [(doc, "A river and a mill.")],  # a pasted document: the default 16..1200-character list drops it
    ]
    convs = load_conversations(_records(raw), seed=0)
    assert all(c[0][0] != doc for c in convs) and len(convs) == 2
    convs = [next(c for c in convs if c[0][0] == r[0][0]) for r in raw[:2]]
    pool = load_conversations(_records(raw), min_chars=1, max_chars=10**9, seed=0)
    longs = [c for c in pool if 1201 <= len(c[0][0]) <= 4000]
    held0, default = split_items(convs, tok, 1, 100, 160)
    held, items = split_items(convs, tok, 1, 100, 160, first_turn_tokens=(161, 1024), train_convs=longs)
    assert held == held0 == [tok.chat_ids(raw[0][0][0])]
    assert [c for c, _ in default] == [tok.chat_ids(raw[1][0][0])]
    assert [c for c, _ in items] == [tok.chat_ids(doc)]
    # the held-out conversation is never a train item, whichever list the train items come from
    _, again = split_items(convs, tok, 1, 100, 160, train_convs=pool)
    assert tok.chat_ids(raw[0][0][0]) not in [c for c, _ in again] and len(again) == 1
    assert first_turn_chars("1201:4000") == dict(min_first_turn_chars=1201, max_first_turn_chars=4000)
    for bad in ("1201", "x:y", "0:10", "50:10"):
        with pytest.raises(SpecVizError):
            first_turn_chars(bad)


def _regen_and_scored(model, n=3):
    from specviz.train.sources import score_batch

    taps = tuple(model.cfg.eagle3_layers()) + ("final",)
    prompts = [[5, 9, 17, 33, 2], [7, 8, 11], [40, 41, 42, 43, 44, 45, 46, 47, 48]][:n]
    g = torch.Generator().manual_seed(0)
    regen = generate_batch(model, prompts, [0.0] * n, GenConfig(max_new_tokens=6, topk=4), {1}, taps, g)
    items = [(s["tokens"][: s["prompt_len"]], s["tokens"][s["prompt_len"] :]) for s in regen]
    return taps, regen, score_batch(model, items, taps, topk=4)


def test_scored_shards_have_the_regenerated_layout(tmp_path, tiny_target):
    from safetensors import safe_open

    model = tiny_target(seed=3)
    taps, regen, scored = _regen_and_scored(model)
    save_shard(tmp_path / "train-00000.safetensors", regen, taps)
    save_shard(tmp_path / "train-s00000.safetensors", scored, taps)
    with safe_open(str(tmp_path / "train-00000.safetensors"), "pt") as a, \
            safe_open(str(tmp_path / "train-s00000.safetensors"), "pt") as b:
        assert set(a.keys()) == set(b.keys()) and a.metadata() == b.metadata()
        for k in a.keys():
            x, y = a.get_tensor(k), b.get_tensor(k)
            assert x.dtype == y.dtype and x.shape == y.shape, k  # the same sequences: the same shapes
            if k in ("tokens", "seq_start", "prompt_len", "feat_start", "lab_start"):
                assert torch.equal(x, y), k
        assert torch.equal(b.get_tensor("temp"), torch.full((3,), -1.0))
    data = SeqData(tmp_path, "train")  # the trainers' reader takes both sources as they are
    assert len(data) == 6 and data.n_response() == 2 * sum(len(s["topk_ids"]) for s in regen)


def test_scored_labels_are_the_targets_own_distribution(tiny_target):
    """Scoring the target's own greedy answer gives back the labels it had while writing it, and each
    scored row equals a lone forward of that sequence (so right padding leaks nothing)."""
    model = tiny_target(seed=3)
    taps, regen, scored = _regen_and_scored(model)
    for r, s in zip(regen, scored):
        P, seq = s["prompt_len"], s["tokens"]
        assert torch.equal(s["topk_ids"][:, 0], r["topk_ids"][:, 0])
        assert torch.allclose(s["topk_logp"].float(), r["topk_logp"].float(), atol=2e-2)
        for t in taps:
            assert torch.allclose(s["feats"][t].float(), r["feats"][t].float(), atol=0.05, rtol=0.02), t
        cache = model.new_cache(len(seq))
        out = model.forward(torch.tensor([seq]), cache, taps=("final",))
        logp = torch.log_softmax(out.logits[0, P - 1 : len(seq) - 1].float(), -1)
        v, i = logp.topk(4, -1)
        assert torch.equal(s["topk_ids"], i.int()) and torch.allclose(s["topk_logp"].float(), v, atol=1e-3, rtol=1e-3)  # fp16 labels


def test_exported_conversations_keep_the_order(tmp_path, monkeypatch):
    """The portable copy a GPU run reads holds the same conversations in the same order (so the same
    held-out split), texts cut at max_chars."""
    import specviz.train.sources as sources_mod
    from specviz.train.sources import export_conversations, load_conversations, read_conversations

    raw = [[(f"question number {i} is here", f"answer {i} " * 5), (f"follow-up {i}?", "ok")] for i in range(12)]
    monkeypatch.setattr(sources_mod, "iter_sharegpt", lambda: iter(_records(raw)))
    assert export_conversations(tmp_path / "c.json.gz", limit=5, max_chars=20) == 5
    want = [[(h[:20], g[:20]) for h, g in c] for c in load_conversations(_records(raw))[:5]]
    assert read_conversations(tmp_path / "c.json.gz") == want


# --------------------------------------------------------------------------- growing data: several folders, follow
def test_seqdata_reads_several_folders_skips_placeholders_and_refreshes(tiny, tmp_path):
    """`--data a,b`: train shards of both folders, held-out from the first only (never counted twice);
    empty placeholder files are skipped; refresh() picks up a shard written later, once."""
    import shutil

    model, data = tiny
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    for f in data.glob("*.safetensors"):
        shutil.copy(f, a / f.name)
    (a / "train-00099.safetensors").touch()  # a placeholder of a resumed data run
    first = sorted(data.glob("train-*.safetensors"))[0]
    shutil.copy(first, b / "train-00007.safetensors")
    shutil.copy(sorted(data.glob("heldout-*.safetensors"))[0], b / first.name.replace("train", "heldout"))
    one, both = SeqData(a, "train"), SeqData(f"{a},{b}", "train")
    extra = SeqData(b, "train")
    assert len(both) == len(one) + len(extra) and len(extra) > 0
    assert len(SeqData(f"{a},{b}", "heldout")) == len(SeqData(a, "heldout"))
    assert both.refresh() == 0
    shutil.copy(first, b / "train-00008.safetensors")
    assert both.refresh() == 1 and len(both) == len(one) + 2 * len(extra) and both.refresh() == 0
    with pytest.raises(SpecVizError, match="No train shards"):
        SeqData(tmp_path / "empty", "train")


def test_follow_trains_on_shards_written_after_the_start(tiny, tmp_path):
    """A trainer with follow=True reads, at its next epoch, a shard that a data run wrote meanwhile."""
    import shutil

    model, data = tiny
    live = tmp_path / "live"
    live.mkdir()
    shards = sorted(data.glob("train-*.safetensors"))
    for f in list(data.glob("heldout-*.safetensors")) + shards[:1]:
        shutil.copy(f, live / f.name)
    kw = dict(method="eagle3", data_dir=str(live), out=str(tmp_path / "head"), ckpt_dir=str(tmp_path / "ck"),
              lr=3e-3, warmup=3, max_tokens=64, draft_vocab=96, steps_ttt=2, log_every=5)
    logs = []

    def log(line):  # the data run writes the other shards while the trainer is at step 5
        if '"step": 5,' in line:
            for f in shards[1:]:
                shutil.copy(f, live / f.name)
        logs.append(line)

    train(TrainConfig(max_steps=40, follow=True, **kw), model=model, log=log)
    assert any(f"{len(shards) - 1} new shards" in line for line in logs), logs
    info = json.loads((tmp_path / "head" / "train_info.json").read_text())
    assert info["train_sequences"] == len(SeqData(data, "train")), info.keys()


def test_resample_writes_new_sampled_answers_and_leaves_the_heldout_split_alone(tmp_path, monkeypatch, tiny_target):
    """`train data --resample 1`: the same train contexts, every row sampled at --temperature with other
    seeds (so other answers), and the held-out shards bit for bit those of the first run."""
    import gzip
    from types import SimpleNamespace

    import specviz.train.data as data_mod
    from _tiny import TinyTokenizer
    from specviz.train.data import build

    class Tok(TinyTokenizer):
        def render_chat(self, msgs, add_generation_prompt=True):
            return " ".join(m["content"] for m in msgs)

    target = SimpleNamespace(model=tiny_target(seed=3), tokenizer=Tok(), eos_ids=[1])
    monkeypatch.setattr(data_mod, "load_target", lambda *a, **k: target)
    convs = [[[" ".join(str(2 + (7 * i + 3 * j) % 90) for j in range(8 + i % 6)), "an answer"]] for i in range(40)]
    path = tmp_path / "c.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(convs, f)
    kw = dict(n_train=16, n_heldout=8, dtype="fp32", conversations=path, log=lambda s: None)
    cfg = dict(max_new_tokens=5, batch=8, topk=4, temperature=20.0)  # the tiny model is peaked
    build(tmp_path / "a", cfg=GenConfig(**cfg), **kw)
    build(tmp_path / "b", cfg=GenConfig(resample=1, **cfg), **kw)
    for split in ("heldout", "train"):
        a, b = SeqData(tmp_path / "a", split).seqs, SeqData(tmp_path / "b", split).seqs
        assert len(a) == len(b) > 0
        prompts = lambda ss: [s["tokens"][: s["prompt_len"]].tolist() for s in ss]
        assert prompts(a) == prompts(b)
        same = [torch.equal(x["tokens"], y["tokens"]) and torch.equal(x["topk_logp"], y["topk_logp"]) for x, y in zip(a, b)]
        if split == "heldout":
            assert all(same)
        else:
            assert not all(same) and all(s["temp"] == pytest.approx(20.0) for s in b)
            assert any(s["temp"] == 0.0 for s in a)  # the first run had greedy rows
    with pytest.raises(SpecVizError, match="resample"):
        build(tmp_path / "c", cfg=GenConfig(resample=1, **cfg), source="scored", **kw)
    with pytest.raises(SpecVizError, match="resample=0"):  # a folder keeps the answers it was built with
        build(tmp_path / "a", cfg=GenConfig(resample=2, **cfg), **kw)


def test_eval_tree_options_parse_and_refuse_what_a_drafter_does_not_take():
    from specviz.train.evaluate import tree_options

    assert tree_options("depth=6 top_k=8 total_tokens=24 min_prob=0.1") == dict(depth=6, top_k=8, total_tokens=24,
                                                                                 min_prob=0.1)
    assert tree_options("") == {}
    for bad in ("depth", "width=3", "depth=six"):
        with pytest.raises(SpecVizError, match="--tree"):
            tree_options(bad)


# ----------------------------------------------------------------------------- token-only data (the GPU run's)
def test_online_batch_gives_the_cached_states_and_labels(tiny):
    """The target's states and labels recomputed for token-only sequences are those the data build cached
    (up to the shards' bf16 taps and fp16 log-probabilities)."""
    from specviz.train.batches import index_map, make_batch, online_batch

    model, folder = tiny
    data = SeqData(folder, "train")
    seqs = data.seqs[:6]
    taps = [str(t) for t in model.cfg.eagle3_layers()] + ["final"]
    imap = index_map(torch.arange(0, model.cfg.vocab_size, 2), model.cfg.vocab_size)  # half the vocabulary
    cached = make_batch(seqs, taps, imap, steps=3)
    bare = [dict(tokens=s["tokens"], prompt_len=s["prompt_len"], temp=s["temp"]) for s in seqs]
    online = online_batch(bare, model, taps, imap, steps=3, topk=seqs[0]["topk_ids"].shape[1])
    assert torch.equal(online.tokens, cached.tokens) and online.Tf == cached.Tf
    assert torch.equal(online.valid, cached.valid) and torch.equal(online.greedy, cached.greedy)
    assert torch.equal(online.start, cached.start)
    for t in taps:
        assert torch.allclose(online.feats[t], cached.feats[t], atol=0.02 * float(cached.feats[t].abs().max())), t
    v = cached.valid
    assert torch.equal(online.lab_top1[v], cached.lab_top1[v])
    assert torch.allclose(online.lab_p[v], cached.lab_p[v], rtol=0.01, atol=1e-3)  # the shards keep fp16 log-probabilities


def test_token_only_data_trains_with_states_recomputed(tmp_path, tiny_target):
    model = tiny_target()
    cfg = GenConfig(max_new_tokens=12, batch=8, topk=8, tokens_only=True)
    g = torch.Generator().manual_seed(0)
    for i, split in enumerate(["heldout", "train", "train"]):
        prompts = [torch.randint(2, 128, (6 + b,), generator=g).tolist() for b in range(8)]
        seqs = generate_batch(model, prompts, [0.0, 0.8] * 4, cfg, {1}, (2, "final"), g)
        assert set(seqs[0]) == {"tokens", "prompt_len", "temp"}
        save_shard(tmp_path / f"{split}-{i:05d}.safetensors", seqs, (2, "final"))
    data = SeqData(tmp_path, "train")
    assert data.tokens_only and len(data) == 16 and "feats" not in data.seqs[0]
    assert data.n_response() == sum(len(s["tokens"]) - s["prompt_len"] for s in data.seqs)
    out = tmp_path / "head"
    cfg = TrainConfig(method="eagle3", data_dir=str(tmp_path), out=str(out), ckpt_dir=str(tmp_path / "ck"), max_steps=30,
                      lr=3e-3, warmup=3, max_tokens=256, draft_vocab=96, steps_ttt=2, log_every=5)
    head, ev = train(cfg, model=model, log=lambda s: None)
    hist = [h for h in json.loads((out / "train_info.json").read_text())["history"] if "loss" in h]
    assert hist[-1]["loss"] < 0.8 * hist[0]["loss"], hist
    assert ev["anchors"] > 0


def test_mapped_rows_follow_the_map_that_training_applied_to_the_old_rows():
    """A grown head's new rows: if training moved every old row by the same linear map (here a scale of 3
    and a rotation), the new tokens' target rows are moved by it too, not left on the target's scale."""
    from specviz.train.head_init import mapped_rows

    g = torch.Generator().manual_seed(0)
    source, fresh = torch.randn(300, 24, generator=g), torch.randn(50, 24, generator=g)
    m = 3.0 * torch.linalg.qr(torch.randn(24, 24, generator=g))[0]
    trained = source @ m + 0.01 * torch.randn(300, 24, generator=g)
    got = mapped_rows(source, trained, fresh)
    assert torch.allclose(got, fresh @ m, atol=0.05), (got - fresh @ m).abs().max()
    assert not torch.allclose(got, fresh, atol=0.5)  # the raw target rows are what the old init used


def test_grow_vocab_keeps_the_trained_rows_and_adds_frequent_tokens(tiny, tmp_path):
    from specviz.heads import Eagle3Head, head_config_from_target
    from specviz.train.head_init import grow_vocab, mapped_rows

    model, folder = tiny
    data = SeqData(folder, "train")
    head = Eagle3Head(head_config_from_target(model.cfg, draft_vocab_size=40))
    torch.nn.init.normal_(head.lm_head.weight)
    head.set_vocab(torch.arange(3, 123, 3))
    head.config["specviz"] = {"draft_window": 512}
    grown = grow_vocab(head, model.cfg, 64, data, model)
    old, new = head.target_ids(), grown.target_ids()
    assert len(new) == 64 and set(old.tolist()) <= set(new.tolist())
    assert grown.config["specviz"]["draft_window"] == 512  # it still reads only the prompt's last 512 tokens
    at = torch.searchsorted(new, old)
    assert torch.equal(grown.lm_head.weight[at], head.lm_head.weight)
    added = sorted(set(new.tolist()) - set(old.tolist()))
    # the added tokens' rows: the target's rows mapped as training moved the old ones (mapped_rows)
    expect = mapped_rows(model.lm_head[old].float(), head.lm_head.weight.float(), model.lm_head[added].float())
    assert torch.allclose(grown.lm_head.weight[torch.searchsorted(new, torch.tensor(added))], expect, atol=1e-6)
    assert torch.equal(grown.fc.weight, head.fc.weight)
    # the added tokens are the most frequent response tokens the old vocabulary lacked
    from specviz.train.batches import token_frequencies

    counts = token_frequencies(data, model.cfg.vocab_size)
    counts[old] = -1
    assert min(int(counts[a]) for a in added) >= int(counts.sort(descending=True).values[len(added)])


def test_ablation_arms_share_init_data_and_steps_and_differ_only_in_the_idea(tiny, tmp_path):
    """The five arms on the tiny target: one init digest, one data fingerprint and one step budget per
    pair; the token-less head reads zeros for the token; the top-only arm reads other states than
    the fused one (from the same init its fc learns other weights); a pair that differs in anything else is reported."""
    from specviz.heads.eagle import Eagle1Head
    from specviz.train.ablations import ARMS, PAIRS, check_pairs, run

    model, data = tiny
    out = tmp_path / "abl.json"
    res = run(str(data), tmp_path / "work", out, [a.name for a in ARMS], steps=4, lr=3e-3, max_tokens=256,
              draft_vocab=96, log=lambda s: None, model=model, warmup=2)
    assert json.loads(out.read_text()) == res
    arms = res["arms"]
    assert set(arms) == {a.name for a in ARMS}
    assert check_pairs(res) == []
    for pair, (a, b) in PAIRS.items():
        assert arms[a]["init"]["sha256"] and arms[a]["init"] == arms[b]["init"], pair
        assert arms[a]["steps"] == arms[b]["steps"] == 4
        assert arms[a]["data"] == arms[b]["data"] and arms[a]["data"]["shards"] == 3
        assert len(arms[a]["heldout"]["acc"]) == 6
    assert arms["eagle3-no-ttt"]["ttt_steps"] == 1 and arms["eagle3"]["ttt_steps"] == 4
    fused, top = (load_head(tmp_path / "work" / n / "head", target=model) for n in ("eagle3", "eagle3-top"))
    assert not torch.equal(fused.fc.weight, top.fc.weight)  # same init, other inputs: other gradients
    no_tok = load_head(tmp_path / "work" / "eagle1-no-token" / "head", target=model)
    with_tok = load_head(tmp_path / "work" / "eagle1" / "head", target=model)
    assert isinstance(no_tok, Eagle1Head) and not no_tok.token_input and with_tok.token_input
    t = torch.tensor([[3, 5]])
    assert not no_tok.embed(t).any() and with_tok.embed(t).any()
    arms["eagle1-no-token"]["steps"] = 5
    assert check_pairs(res) == ["token: steps differs (4 vs 5)"]
