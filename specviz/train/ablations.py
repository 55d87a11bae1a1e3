"""Ablations trained here: each idea of EAGLE measured with and without it, on our target.

Three pairs of arms, every arm a fresh head from the same seed (so the same initial weights: the
arms of a pair differ only in what the head reads or how it trains), the same data, the same step
budget and learning-rate schedule:
  - token:  EAGLE-1 reading feature + shifted token  vs  the feature alone (zeros for the token);
  - ttt:    EAGLE-3 trained on its own unrolled outputs  vs  step 1 only (no training-time test);
  - fusion: EAGLE-3 fusing low, middle and high taps  vs  the final state in all three slots.
Each arm is judged on one held-out set by the trainer's `evaluate`: top-1 agreement with the
target by draft step (the head unrolled on its own outputs, as drafting does) and the expected
accepted length of a greedy chain (tau_chain). `python -m specviz.train ablate` runs the arms one by
one (each resumable) and writes one JSON that the Inside EAGLE page draws.
"""
from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import SpecVizError
from ..runtime.loading import cache_root
from .trainers import TrainConfig, train

SHIPPED = Path(__file__).resolve().parents[2] / "assets" / "ablations" / "ablations.json"


@dataclass(frozen=True)
class Arm:
    name: str
    method: str
    idea: str  # what the arm keeps or removes, in a few words
    ttt_steps: int = 4
    token_input: bool = True
    taps: str = "three"


ARMS = (
    Arm("eagle1", "eagle1", "feature + shifted token"),
    Arm("eagle1-no-token", "eagle1", "feature alone", token_input=False),
    Arm("eagle3", "eagle3", "three taps fused, training-time test (4 steps)"),
    Arm("eagle3-no-ttt", "eagle3", "three taps fused, trained on step 1 only", ttt_steps=1),
    Arm("eagle3-top", "eagle3", "final state only, training-time test (4 steps)", taps="top"),
)
PAIRS = {  # pair -> (with the idea, without it)
    "token": ("eagle1", "eagle1-no-token"),
    "ttt": ("eagle3", "eagle3-no-ttt"),
    "fusion": ("eagle3", "eagle3-top"),
}


def arm(name: str) -> Arm:
    for a in ARMS:
        if a.name == name:
            return a
    raise SpecVizError(f"No ablation arm {name!r}: choose from {', '.join(a.name for a in ARMS)}.")


def data_fingerprint(data_dir: str) -> dict:
    """What the arms trained on, in a form two runs can compare: the data's meta and a digest of
    its shard names and sizes."""
    root = Path(data_dir)
    shards = sorted(p for p in root.glob("*.safetensors"))
    h = hashlib.sha256()
    for p in shards:
        h.update(f"{p.name}:{p.stat().st_size};".encode())
    meta = json.loads((root / "meta.json").read_text()) if (root / "meta.json").exists() else {}
    keep = ("model", "source", "turns", "n_train", "n_heldout", "max_new_tokens", "max_prompt_tokens", "seed", "dtype")
    return dict(folder=root.name, shards=len(shards), shards_sha256=h.hexdigest()[:16],
                meta={k: meta.get(k) for k in keep})


def arm_config(a: Arm, data_dir: str, work: Path, steps: int, lr: float, max_tokens: int, draft_vocab: int,
               seed: int) -> TrainConfig:
    return TrainConfig(method=a.method, data_dir=data_dir, out=str(work / a.name / "head"), ckpt_dir=str(work / a.name),
                       max_steps=steps, lr=lr, max_tokens=max_tokens, steps_ttt=a.ttt_steps, draft_vocab=draft_vocab,
                       seed=seed, device="cpu", token_input=a.token_input, taps=a.taps)


def arm_result(a: Arm, info: dict, fingerprint: dict, command: str) -> dict:
    """One arm's entry in the ablation JSON, from the trainer's train_info.json."""
    cfg = info["config"]
    return dict(arm=a.name, method=a.method, idea=a.idea, ttt_steps=a.ttt_steps, token_input=a.token_input,
                taps=a.taps, steps=info["steps"], wall_minutes=info["wall_minutes"], seed=cfg["seed"],
                init=dict(kind="fresh head", seed=cfg["seed"], sha256=info.get("init_sha256")),
                lr=cfg["lr"], max_tokens=cfg["max_tokens"], draft_vocab=cfg["draft_vocab"],
                data=dict(fingerprint, train_sequences=info["train_sequences"], train_tokens=info["train_tokens"]),
                heldout=info["heldout_greedy"], heldout_all=info["heldout_all"],
                train_curve=[dict(step=h["step"], loss=h["loss"], acc=h["acc"]) for h in info["history"] if "loss" in h],
                command=command)


def run(data_dir: str, work: Path, out_json: Path, names, steps: int, lr: float, max_tokens: int, draft_vocab: int,
        seed: int = 0, log=print, model=None, warmup: int = 30) -> dict:
    """Train the named arms one after another (an arm with a finished head is read back, not retrained)
    and write `out_json` with every finished arm."""
    fp = data_fingerprint(data_dir)
    results = json.loads(out_json.read_text()) if out_json.exists() else {"arms": {}}
    for name in names:
        a = arm(name)
        cfg = arm_config(a, data_dir, work, steps, lr, max_tokens, draft_vocab, seed)
        cfg.warmup = warmup
        info_path = Path(cfg.out) / "train_info.json"
        if not info_path.exists():
            t0 = time.time()
            log(f"arm {a.name} ({a.idea}): {steps} steps")
            train(cfg, log=log, model=model)
            log(f"arm {a.name} done in {(time.time() - t0) / 60:.1f} min")
        info = json.loads(info_path.read_text())
        if info["steps"] != steps:
            raise SpecVizError(f"{info_path} holds {info['steps']} steps, not {steps}: remove {work / a.name} to retrain.")
        results["arms"][a.name] = arm_result(a, info, fp, command_line())
        results.update(pairs={k: list(v) for k, v in PAIRS.items()}, note="CPU-sized: a few hundred steps on a few thousand conversations; "
                       "the papers trained on ~68k conversations on GPUs")
        out_json.parent.mkdir(parents=True, exist_ok=True)
        out_json.write_text(json.dumps(results, indent=1))
    return results


def command_line() -> str:
    """This run's command as a reader would type it: the user's cache folder written as <cache>."""
    return ("python -m specviz.train " + " ".join(sys.argv[1:])).replace(str(cache_root()), "<cache>")


def check_pairs(results: dict) -> list[str]:
    """What differs between the arms of each pair besides the idea itself (should be nothing)."""
    problems = []
    for pair, (a, b) in PAIRS.items():
        ra, rb = results["arms"].get(a), results["arms"].get(b)
        if not (ra and rb):
            continue
        for key in ("steps", "seed", "lr", "max_tokens", "draft_vocab", "data", "init"):
            if ra[key] != rb[key]:
                problems.append(f"{pair}: {key} differs ({ra[key]} vs {rb[key]})")
    return problems
