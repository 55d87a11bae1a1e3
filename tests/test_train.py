"""Training pipeline on a tiny random target: data shards, loss goes down, resume, export/load."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _tiny import tiny_target  # noqa: E402

from specviz.heads import load_head  # noqa: E402
from specviz.train.data import GenConfig, SeqData, generate_batch, iter_sharegpt, save_shard  # noqa: E402
from specviz.train.trainers import TrainConfig, train  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from _tiny import tiny_data

    folder = tmp_path_factory.mktemp("data")
    model = tiny_target()
    tiny_data(folder, model, n_train=16, n_held=8, new=12)
    return model, folder


def test_batched_generation_matches_single_rows():
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


def test_shards_round_trip(tmp_path):
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
