"""Recorded lesson rounds: real rounds of the engine, saved so a class never waits on the CPU.

Each recording is one `RoundTrace` made by `SpeculativeDecoder` from the shipped heads at the
papers' tree sizes, stored as JSON in `assets/lessons/` together with everything needed to make
it again: prompt, method, drafter options, sampling, seed, round index, and the checksums of the
head weights and of this module's pick rule. `replay()` runs the same settings live and
`differences()` says where a live round departs from the recording (timings excluded), which is
what tests/test_lesson.py checks for every file.

    python -m specviz.teaching.lesson record   # regenerate assets/lessons/*.json (a minute on 2 cores)
    python -m specviz.teaching.lesson check    # replay every recording live and compare
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..core.engine import SpeculativeDecoder, vanilla_generate
from ..heads.io import shipped_head_dir
from ..runtime.agreement import replay_tolerance, value_close
from ..runtime.machine import forward_curve, numerics
from ..runtime.machine import machine as _machine
from ..methods import head_method, make_drafter
from ..core.sampling import SamplingParams
from ..core.target import load_target
from ..core.trace import RoundTrace
from ..core.tree_build import EAGLE1_TREE

LESSON_DIR = Path(__file__).resolve().parents[2] / "assets" / "lessons"
TIMING_FIELDS = ("draft_time_s", "verify_time_s", "total_time_s")
MACHINE_FILE = "machine.json"

PROMPT_STORY = "Write a short story about a robot who learns to paint."
PROMPT_CODE = "Write a Python function that returns the sum of a list of numbers."


@dataclass(frozen=True)
class RoundSpec:
    """How one lesson round is made: settings, then which round of the run to keep (`pick`)."""

    key: str
    method: str
    options: dict  # drafter factory options (`specviz.methods.make_drafter(method, target, **options)`)
    temperature: float
    seed: int
    prompt: str
    pick: str  # first-branching | rejection-residual | bonus
    max_rounds: int = 16
    min_accept: int = 2  # accepted drafts the picked round must have
    max_new_tokens: int = 64
    seeds_to_try: int = 8  # sampled picks: the first seed (from `seed` on) whose run has such a round


# the papers' trees, spelled out (explicit shapes: no device tuning is consulted, so a replay
# builds the very same drafter on any machine)
EAGLE1_PAPER = {"static_tree": [list(p) for p in EAGLE1_TREE]}  # 25 nodes, depth 5
EAGLE2_PAPER = {"depth": 5, "top_k": 8, "total_tokens": 24}
EAGLE3_PAPER = {"depth": 6, "top_k": 8, "total_tokens": 24}
SPECS: tuple[RoundSpec, ...] = (
    # the main thread of the lesson: EAGLE-3 at the papers' depth 6 / 24 nodes
    RoundSpec("eagle3-greedy", "eagle3", EAGLE3_PAPER, 0.0, 0, PROMPT_CODE, "first-branching", min_accept=3),
    RoundSpec("eagle3-sampled-reject", "eagle3", EAGLE3_PAPER, 0.8, 0, PROMPT_STORY, "rejection-residual"),
    RoundSpec("eagle3-sampled-bonus", "eagle3", EAGLE3_PAPER, 0.8, 0, PROMPT_STORY, "bonus", max_rounds=6),
    # EAGLE-1 vs 2 vs 3 on one prompt: static 25-node tree, dynamic depth 5 / 24, dynamic depth 6 / 24
    RoundSpec("eagle1-greedy", "eagle1", EAGLE1_PAPER, 0.0, 0, PROMPT_CODE, "first-branching", min_accept=3),
    RoundSpec("eagle2-greedy", "eagle2", EAGLE2_PAPER, 0.0, 0, PROMPT_CODE, "first-branching", min_accept=3),
    # the public code's default size, 60 nodes: how a large tree reads
    RoundSpec("eagle3-60", "eagle3", {"depth": 6, "top_k": 10, "total_tokens": 60}, 0.0, 0, PROMPT_CODE, "first-branching", min_accept=3),
)
SPEC_BY_KEY = {s.key: s for s in SPECS}


@dataclass
class LessonRound:
    """A recording: the settings it was made with and the round itself."""

    spec: dict
    seed: int  # the seed actually used (sampled picks may move past spec.seed)
    round_index: int
    context_text: str  # what the model had written before this round (for the narration)
    prefix_tail: list  # the last committed tokens before the round: [[token id, text], ...]
    trace: RoundTrace
    heads: dict  # head folder -> sha256 of model.safetensors
    model: str
    tree: dict = field(default_factory=dict)  # the drafter's tree settings (depth, top_k, total_tokens, kind)
    recorded: dict = field(default_factory=dict)  # machine, torch version, time

    @property
    def key(self) -> str:
        return self.spec["key"]

    def to_json(self) -> str:
        d = asdict(self)
        d["trace"] = json.loads(self.trace.to_json())
        return json.dumps(d, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict) -> "LessonRound":
        d = dict(d)
        d["trace"] = RoundTrace.from_dict(d["trace"])
        return cls(**d)


# ---------------------------------------------------------------------------- running rounds
def head_checksums(target, method: str) -> dict:
    if method in ("vanilla", "pld"):
        return {}
    folder = shipped_head_dir(target.model.name, head_method(method))
    f = folder / "model.safetensors"
    return {f"{folder.parent.name}/{folder.name}": hashlib.sha256(f.read_bytes()).hexdigest()} if f.is_file() else {}


def _decoder(target, spec: RoundSpec | dict, seed: int):
    s = spec if isinstance(spec, dict) else asdict(spec)
    drafter = make_drafter(s["method"], target, **s["options"])
    params = SamplingParams(temperature=float(s["temperature"]))
    dec = SpeculativeDecoder(target, drafter, params, seed=seed)
    dec.start(s["prompt"], int(s["max_new_tokens"]))
    return dec


def _branching(tr: RoundTrace) -> bool:
    kids: dict[int, int] = {}
    for n in tr.nodes[1:]:
        kids[n.parent] = kids.get(n.parent, 0) + 1
    return any(v > 1 for v in kids.values())


def _extra_in_top(tr: RoundTrace) -> bool:
    return any(int(e[0]) == tr.extra_token for e in tr.extra_top)


def picks(tr: RoundTrace, pick: str, min_accept: int = 2) -> bool:
    """Whether round `tr` is the kind of round a lesson step needs."""
    if pick == "first-branching":
        return _branching(tr) and len(tr.accepted_nodes) >= min_accept
    if pick == "rejection-residual":  # a rejection, then a correction drawn from the residual
        return (_branching(tr) and any(not s.accepted for s in tr.steps) and tr.extra_source == "resampled"
                and len(tr.steps) >= 2 and _extra_in_top(tr))
    if pick == "bonus":  # a path accepted to its leaf, then the bonus token
        return _branching(tr) and tr.extra_source == "bonus" and len(tr.accepted_nodes) >= min_accept and _extra_in_top(tr)
    raise ValueError(pick)


def _tree_of(drafter) -> dict:
    """The recorded tree settings, as lessons have kept them: kind, depth, top_k, total_tokens
    (None where the drafter has no tree shape or the kind no such number)."""
    s = drafter.shape
    if s is None:
        return {"kind": "", "depth": None, "top_k": None, "total_tokens": None}
    if s.kind == "static":
        return {"kind": "static", "depth": max(len(p) for p in s.paths), "top_k": None, "total_tokens": s.total_tokens}
    return {"kind": "dynamic", "depth": s.depth, "top_k": s.top_k, "total_tokens": s.total_tokens}


def record_one(target, spec: RoundSpec, log=print) -> LessonRound:
    """Run `spec` from its first seed on; keep the first round that `picks` accepts."""
    seeds = [spec.seed] if spec.temperature == 0 else range(spec.seed, spec.seed + spec.seeds_to_try)
    for seed in seeds:
        dec = _decoder(target, spec, seed)
        for i in range(spec.max_rounds):
            if dec.done:
                break
            before = list(dec.context) + [dec.root]
            tr = dec.step()
            if picks(tr, spec.pick, spec.min_accept):
                gen_before = before[len(dec.prompt):]
                tail = before[-4:]
                d = dec.drafter
                log(f"{spec.key}: seed {seed}, round {i}, {len(tr.nodes) - 1} nodes, accepted {len(tr.accepted_nodes)}, {tr.extra_source}")
                return LessonRound(
                    spec=asdict(spec),
                    seed=seed,
                    round_index=i,
                    context_text=dec.tok.decode(gen_before, skip_special_tokens=True),
                    prefix_tail=[[int(x), dec.tok.token_text(x)] for x in tail[:-1]],
                    trace=tr,
                    heads=head_checksums(target, spec.method),
                    model=target.model.name,
                    tree={**_tree_of(d), "nodes": len(tr.nodes) - 1},
                    recorded={**_machine(), "dtype": "fp32", "blocks": getattr(target.model, "blocks", None) is not None,
                              "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                )
    raise RuntimeError(f"{spec.key}: no round of the kind {spec.pick!r} in {spec.max_rounds} rounds of seeds {list(seeds)}")


def replay(target, rec: LessonRound) -> RoundTrace:
    """Run the recording's settings live up to its round and return that round's trace."""
    dec = _decoder(target, rec.spec, rec.seed)
    tr = None
    for _ in range(rec.round_index + 1):
        tr = dec.step()
    return tr


def differences(a: RoundTrace, b: RoundTrace, tol: float = 0.0, limit: int = 10) -> list[str]:
    """Where two traces differ (timings ignored): paths like 'nodes[3].p: 0.41 != 0.42'.
    `tol` is a relative tolerance for floats (0: exact; `specviz.runtime.agreement.value_close`); every
    other field (tokens, tree, decisions, draws) is always compared exactly."""
    out: list[str] = []

    def walk(x, y, path):
        if len(out) >= limit:
            return
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                if k in TIMING_FIELDS:
                    continue
                walk(x.get(k), y.get(k), f"{path}.{k}" if path else k)
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                out.append(f"{path}: length {len(x)} != {len(y)}")
                return
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, f"{path}[{i}]")
        elif isinstance(x, float) and isinstance(y, float) and tol > 0:
            if not value_close(x, y, tol):
                out.append(f"{path}: {x!r} != {y!r}")
        elif x != y:
            out.append(f"{path}: {x!r} != {y!r}")

    walk(json.loads(a.to_json()), json.loads(b.to_json()), "")
    return out


@dataclass
class ReplayCheck:
    """A live replay against its recording, judged by `specviz.runtime.agreement`'s policy."""

    exact: bool  # every field bit for bit
    differences: list[str]  # what departs beyond the policy's tolerance ([]: the replay agrees)
    tolerance: float  # the relative tolerance floats were held to (0.0: this machine's numerics are the recording's)

    @property
    def agrees(self) -> bool:
        return not self.differences

    def verdict(self) -> str:
        """One line for the command line: identical, agrees to a tolerance, or where it differs."""
        if self.exact:
            return "identical"
        return f"agrees to {self.tolerance:.1e}" if self.agrees else "DIFFERS: " + "; ".join(self.differences)


def compare_replay(recorded: list[RoundTrace], live: list[RoundTrace], recorded_numerics: str | None, cfg) -> ReplayCheck:
    """Recorded rounds against live ones: exact where this machine computes with the recording's
    numerics (`machine.numerics()`), floats to `agreement.model_tolerance` elsewhere, and tokens,
    tree, decisions and draws exactly everywhere."""
    if len(recorded) != len(live):
        return ReplayCheck(False, [f"{len(live)} sequences live, {len(recorded)} recorded"], 0.0)

    def diffs(tol: float) -> list[str]:
        many = len(recorded) > 1
        return [f"sequence {i}: {d}" if many else d for i, (a, b) in enumerate(zip(recorded, live)) for d in differences(a, b, tol)]

    exact = not diffs(0.0)
    tol = replay_tolerance(recorded_numerics, numerics(), cfg)
    return ReplayCheck(exact, [] if exact else diffs(tol), tol)


def check_replay(target, rec: LessonRound) -> tuple[RoundTrace, ReplayCheck]:
    """Replay a recording live and judge it (`compare_replay`)."""
    live = replay(target, rec)
    return live, compare_replay([rec.trace], [live], rec.recorded.get("numerics"), target.model.cfg)


# ---------------------------------------------------------------------------- files
def lesson_path(key: str, folder: Path = LESSON_DIR) -> Path:
    return Path(folder) / f"{key}.json"


def load_round(key: str, folder: Path = LESSON_DIR) -> LessonRound:
    return LessonRound.from_dict(json.loads(lesson_path(key, folder).read_text()))


def load_rounds(folder: Path = LESSON_DIR) -> dict[str, LessonRound]:
    """Every recording that exists, by key (in SPECS order)."""
    out = {}
    for s in SPECS:
        p = lesson_path(s.key, folder)
        if p.is_file():
            out[s.key] = LessonRound.from_dict(json.loads(p.read_text()))
    return out


def load_machine(folder: Path = LESSON_DIR) -> dict | None:
    p = Path(folder) / MACHINE_FILE
    return json.loads(p.read_text()) if p.is_file() else None


BENCH_CURVE = Path(__file__).resolve().parents[2] / "assets" / "results" / "specbench_fp32_t0.json"


def cost_curve(target, measure: bool = False) -> tuple[dict, dict]:
    """ms of one target pass over N tokens after 300 cached ones, and where it comes from. The
    benchmark's curve (`python -m specviz.bench --forward-curve`, measured on an idle machine) is
    preferred: a curve measured while other work shares the two cores is meaningless."""
    if not measure and BENCH_CURVE.is_file():
        d = json.loads(BENCH_CURVE.read_text())
        curve = d.get("by_dtype", {}).get("fp32", {}).get("forward_ms")
        if curve:
            return dict(curve), {"file": f"{BENCH_CURVE.parent.name}/{BENCH_CURVE.name}", "date": d.get("date", "?")[:10],
                                 "weights": d.get("settings", {}).get("weights", "?"), "machine": d.get("machine") or {}}
    curve = forward_curve(target.model, sizes=(1, 4, 16, 25, 64), context=300, repeats=5)
    return ({str(k): 1000 * v for k, v in curve.items()},
            {"file": "python -m specviz.teaching.lesson record --measure", "date": time.strftime("%Y-%m-%d"), "weights": "fp32",
             "machine": _machine()})


def record_machine(target, measure: bool = False, log=print) -> dict:
    """The cost curve the 'bottleneck' and 'when is it fast' steps draw, and greedy EAGLE-3 vs
    vanilla on the lesson prompt (the same tokens?) for the 'lossless' step."""
    curve, source = cost_curve(target, measure)
    n_new = 48
    van = vanilla_generate(target, PROMPT_CODE, n_new)
    spec = SpeculativeDecoder(target, make_drafter("eagle3", target, **EAGLE3_PAPER)).generate(PROMPT_CODE, n_new)
    out = {
        "machine": _machine(),
        "forward_ms": curve,
        "forward_source": source,
        "context": 300,
        "lossless": {"prompt": PROMPT_CODE, "new_tokens": n_new, "vanilla": van.tokens, "eagle3": spec.tokens,
                     "identical": van.tokens == spec.tokens, "eagle3_rounds": spec.rounds, "eagle3_tau": spec.tau,
                     "text": van.text},
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    log(f"forward ms: {curve} ({source}); identical {out['lossless']['identical']}, tau {spec.tau:.2f}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specviz.teaching.lesson", description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["record", "check"])
    ap.add_argument("--only", default="", help="comma-separated keys (default: all)")
    ap.add_argument("--out", default=str(LESSON_DIR))
    ap.add_argument("--no-machine", action="store_true", help="record: skip machine.json (cost curve, lossless check)")
    ap.add_argument("--measure", action="store_true", help="record: measure the cost curve now instead of reading the benchmark's")
    a = ap.parse_args(argv)
    target = load_target(dtype=torch.float32, device="cpu")
    keys = [k for k in a.only.split(",") if k] or [s.key for s in SPECS]
    out = Path(a.out)
    if a.command == "record":
        out.mkdir(parents=True, exist_ok=True)
        for k in keys:
            rec = record_one(target, SPEC_BY_KEY[k])
            lesson_path(k, out).write_text(rec.to_json())
        if not a.no_machine:
            (out / MACHINE_FILE).write_text(json.dumps(record_machine(target, a.measure), indent=1))
        return 0
    bad = 0
    for k in keys:
        rec = load_round(k, out)
        _, check = check_replay(target, rec)
        print(f"{k}: {check.verdict()}")
        bad += not check.agrees
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
