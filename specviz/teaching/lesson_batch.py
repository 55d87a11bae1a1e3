"""A recorded batched round: three users' EAGLE-3 rounds scored in one target pass.

Like the lesson's solo recordings (specviz.teaching.lesson), it is a real round of the engine
(specviz.serving.batch), saved with everything needed to make it again, so the page "When speculation
stops paying" and the lesson draw a batch without running one; tests/test_lesson.py replays it
live and must get the identical traces. Small trees (depth 3, 6 drafts each) keep three trees and
their block-diagonal mask readable side by side.

    python -m specviz.teaching.lesson_batch record   # writes assets/lessons/batch-eagle3.json
    python -m specviz.teaching.lesson_batch check    # replays it and compares
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..serving.batch import BatchDecoder
from ..core.engine import SpeculativeDecoder
from .lesson import LESSON_DIR, PROMPT_CODE, PROMPT_STORY, compare_replay, head_checksums
from ..runtime.machine import machine as _machine
from ..methods import make_drafter
from ..core.sampling import SamplingParams
from ..core.target import load_target
from ..core.trace import RoundTrace

KEY = "batch-eagle3"
SPEC = {
    "method": "eagle3",
    "options": {"depth": 3, "top_k": 4, "total_tokens": 6},  # explicit: no device tuning is read
    "temperature": 0.0,
    "prompts": [PROMPT_CODE, PROMPT_STORY, "Explain in one paragraph why the sky is blue."],
    "seeds": [0, 1, 2],
    "max_new_tokens": 48,
    "round_index": 3,  # the fourth batched round: every sequence still running, each accepts 2-3 drafts
}


@dataclass
class BatchLessonRound:
    """The recording: settings, each sequence's round, and the shared pass's shape and cost."""

    spec: dict
    traces: list[RoundTrace]
    context_texts: list[str]  # what each user's answer was before this round
    pass_rows: int  # tokens in the one target pass (all the trees)
    pass_ms: float  # that pass on the recording machine (not compared on replay)
    heads: dict
    model: str
    recorded: dict = field(default_factory=dict)

    def to_json(self) -> str:
        d = {k: v for k, v in self.__dict__.items() if k != "traces"}
        d["traces"] = [json.loads(t.to_json()) for t in self.traces]
        return json.dumps(d, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict) -> "BatchLessonRound":
        d = dict(d)
        d["traces"] = [RoundTrace.from_dict(t) for t in d["traces"]]
        return cls(**d)


def _batch(target, spec: dict) -> BatchDecoder:
    params = SamplingParams(temperature=float(spec["temperature"]))
    decs = [SpeculativeDecoder(target, make_drafter(spec["method"], target, **spec["options"]), params, seed=s)
            for s in spec["seeds"]]
    batch = BatchDecoder(decs)
    batch.start(spec["prompts"], int(spec["max_new_tokens"]))
    return batch


def run(target, spec: dict = SPEC):
    """Step the batch to the recorded round; returns (that BatchRound, the texts before it)."""
    batch = _batch(target, spec)
    rnd = None
    for _ in range(int(spec["round_index"]) + 1):
        texts = [d.tok.decode(d.generated, skip_special_tokens=True) for d in batch.decoders]
        rnd = batch.step()
    return rnd, texts


def record(target, spec: dict = SPEC) -> BatchLessonRound:
    rnd, texts = run(target, spec)
    if len(rnd.sequences) != len(spec["prompts"]):
        raise RuntimeError("a sequence finished before the recorded round: pick an earlier round_index")
    return BatchLessonRound(
        spec=dict(spec), traces=rnd.traces, context_texts=texts, pass_rows=sum(rnd.nodes), pass_ms=1000 * rnd.pass_s,
        heads=head_checksums(target, spec["method"]), model=target.model.name,
        recorded={**_machine(), "dtype": "fp32", "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})


def path(folder: Path = LESSON_DIR) -> Path:
    return Path(folder) / f"{KEY}.json"


def load(folder: Path = LESSON_DIR) -> BatchLessonRound | None:
    p = path(folder)
    return BatchLessonRound.from_dict(json.loads(p.read_text())) if p.is_file() else None


def check_replay(target, rec: BatchLessonRound):
    """Replay the batched round live; returns (that BatchRound, its `lesson.ReplayCheck`): exact
    where this machine computes as the recording's did, to the agreement policy's tolerance elsewhere."""
    rnd, _ = run(target, rec.spec)
    return rnd, compare_replay(rec.traces, rnd.traces, rec.recorded.get("numerics"), target.model.cfg)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specviz.teaching.lesson_batch", description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["record", "check"])
    ap.add_argument("--out", default=str(LESSON_DIR))
    a = ap.parse_args(argv)
    target = load_target(dtype=torch.float32, device="cpu")
    if a.command == "record":
        rec = record(target)
        path(Path(a.out)).write_text(rec.to_json())
        print(f"{KEY}: {len(rec.traces)} sequences, {rec.pass_rows} tokens in one pass, "
              f"committed {[len(t.committed) for t in rec.traces]}")
        return 0
    rec = load(Path(a.out))
    if rec is None:
        print(f"no recording at {path(Path(a.out))}")
        return 1
    _, check = check_replay(target, rec)
    print(f"{KEY}: {check.verdict()}")
    return 0 if check.agrees else 1


if __name__ == "__main__":
    raise SystemExit(main())
