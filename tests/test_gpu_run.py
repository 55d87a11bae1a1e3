"""The GPU run, rehearsed: its payload staging, and all three device commands end to end on a CPU.

A GPU is lent rarely and briefly, so `scripts/gpu_run.sh` must finish the first time one is
there: these tests run every step of it here, on a tiny random model (`--rehearse`), and check
that the real payload still fits the device tool's 64 MiB per command.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_stage  # noqa: E402


def test_staged_files_arrive_whole_part_by_part(tmp_path):
    src = tmp_path / "src"
    (src / "head").mkdir(parents=True)
    sizes = {"big.bin": 2500, "head/a.bin": 700, "head/empty.bin": 0, "last.bin": 300}
    for name, n in sizes.items():
        (src / name).write_bytes(os.urandom(n))
    plans = gpu_stage.pack(tmp_path / "stage", 1000, [("big.bin", src / "big.bin"), ("head", src / "head"),
                                                      ("last.bin", src / "last.bin")])
    assert len(plans) == 4 and all(p["bytes"] <= 1000 + (tmp_path / "stage/p1/manifest.json").stat().st_size
                                   for p in plans)
    there = tmp_path / "there"
    ready, missing = gpu_stage.unpack(tmp_path / "stage/p1", there)
    assert ready == [] and "big.bin" in missing  # its pieces span three parts
    gpu_stage.unpack(tmp_path / "stage/p2", there)
    ready, missing = gpu_stage.unpack(tmp_path / "stage/p3", there)
    assert "big.bin" in ready and "last.bin" in missing
    ready, missing = gpu_stage.unpack(tmp_path / "stage/p4", there)
    assert missing == [] and sorted(ready) == sorted(sizes)
    for name in sizes:
        assert (there / "files" / name).read_bytes() == (src / name).read_bytes()


def test_a_damaged_piece_is_refused(tmp_path):
    (tmp_path / "f.bin").write_bytes(os.urandom(3000))
    gpu_stage.pack(tmp_path / "stage", 2000, [("f.bin", tmp_path / "f.bin")])
    piece = next((tmp_path / "stage/p2").glob("*.bin"))
    piece.write_bytes(b"x" + piece.read_bytes()[1:])
    gpu_stage.unpack(tmp_path / "stage/p1", tmp_path / "there")
    with pytest.raises(SystemExit, match="sha256"):
        gpu_stage.unpack(tmp_path / "stage/p2", tmp_path / "there")
    assert not (tmp_path / "there/files/f.bin").exists()


@pytest.mark.slow
@pytest.mark.skipif(not (ROOT / ".venv/bin/python").exists(), reason="the rehearsal runs the project's .venv")
@pytest.mark.skipif(not (ROOT.parent / "shared" / "data" / "spec_bench_dev.jsonl").is_file() and not os.environ.get("CI"),
                    reason="the GPU payload carries ../shared/data (the project's shared folder beside the checkout)")
def test_rehearsal_runs_every_step_of_the_three_commands(tmp_path):
    r = subprocess.run(["bash", "scripts/gpu_run.sh", "rehearse"], cwd=ROOT, capture_output=True, text=True,
                       timeout=900, env=dict(os.environ, REHEARSAL_DIR=str(tmp_path)))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # the real payload: three parts, each beside the working tree under the tool's limit
    sizes = [float(x) for x in re.findall(r"p\d \+ tree = +([\d.]+) MiB of 64", r.stdout)]
    assert len(sizes) == 3 and max(sizes) <= 64, r.stdout
    steps = {1: ("device", 5), 2: ("check", 6), 3: ("train", 5)}
    for part, (task, n_steps) in steps.items():
        log = (tmp_path / f"out{part}" / f"{task}.log").read_text()
        assert len(re.findall(r" exit 0 in ", log)) == n_steps, log[-3000:]
        assert not re.search(r" exit [1-9]\d* in |skipped", log), log[-3000:]
        assert len(list((tmp_path / f"out{part}").iterdir())) <= 8  # the device tool brings back 8 files
    # every method the check ran gave vanilla's tokens
    bench = json.loads((tmp_path / "out2" / "bench_fp32_t0.json").read_text())
    rows = next(iter(bench["by_dtype"].values()))["methods"]
    assert {"vanilla", "eagle1", "eagle2", "eagle3", "pld", "hf"} <= set(rows)
    assert all(s.get("identical_to_vanilla", True) for m, s in rows.items()), rows
    batched = json.loads((tmp_path / "out2" / "bench_batch.json").read_text())["by_batch"]  # batched rounds too
    assert set(batched) == {"1", "2", "4", "8", "16"}
    assert all(e["identical_to_vanilla"] for b in batched.values() for e in b.values()), batched
    # the EAGLE-3 head came back, fine-tuned from the staged one and keeping its draft vocabulary (192 tokens,
    # not the 256 of DRAFT_VOCAB: part 3 grows it only when E3_GROW asks)
    with tarfile.open(tmp_path / "out3" / "eagle3.tar.part00") as tar:
        cfg = json.load(tar.extractfile("eagle3/config.json"))
        info = json.load(tar.extractfile("eagle3/train_info.json"))
    assert info["config"]["init"].endswith("eagle3") and not info["config"]["grow_vocab"]
    assert info["config"]["data_dir"].split(",")[1].endswith("train-tasks")  # the task-style answers too
    assert list((tmp_path / "there" / "train-tasks").glob("train-*.safetensors"))  # ... which the task step wrote
    assert cfg["draft_vocab_size"] == 192 and info["heldout_greedy"]["anchors"] > 0
