"""Where a decode round's time goes: vanilla's and an EAGLE tree's rounds split into drafting, the
target pass, the LM head, the acceptance walk, the commits, the trace and the rest (run it on an
idle machine).

    python scripts/round_anatomy.py                                # EAGLE-3, 2-node and 3-node chains
    python scripts/round_anatomy.py --method eagle2 --tree 1:2 --tree 3:8 --prompts 20
    python scripts/round_anatomy.py --method eagle2 --draft-vocab 0 --draft-vocab 8192   # whole vs cut vocabulary
    SPECVIZ_KERNEL_ISA=avx2 python scripts/round_anatomy.py --out avx2.json

Each prompt is decoded by vanilla and then by every tree, in turn, so that a drift in the machine's
speed hits all of them alike. A phase's time is exclusive: the LM head's rows that the walk asks for
count as LM head, not as walk. Every greedy output is checked against vanilla's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specviz.core import engine  # noqa: E402
from specviz.bench.prompts import load_prompts  # noqa: E402
from specviz.drafters.base import NoDraft  # noqa: E402
from specviz.core.engine import SpeculativeDecoder  # noqa: E402
from specviz.runtime.machine import machine  # noqa: E402
from specviz.methods import make_drafter  # noqa: E402
from specviz.core.sampling import SamplingParams  # noqa: E402
from specviz.core.target import load_target  # noqa: E402
from specviz.core.target_rows import TargetRows  # noqa: E402

PHASES = ("draft", "pass", "lm_head", "rows", "walk", "commit", "trace")


class Clock:
    """Exclusive time per phase: a phase running inside another is taken out of the outer one."""

    def __init__(self):
        self.spent = defaultdict(float)
        self._stack: list[list] = []  # [phase, start, time in inner phases]

    def wrap(self, fn, phase: str):
        def timed(*a, **k):
            frame = [phase, time.perf_counter(), 0.0]
            self._stack.append(frame)
            try:
                return fn(*a, **k)
            finally:
                self._stack.pop()
                took = time.perf_counter() - frame[1]
                self.spent[phase] += took - frame[2]
                if self._stack:
                    self._stack[-1][2] += took
        return timed


def instrument(clock: Clock, model, cache_cls) -> list:
    """Wrap the engine's phases; returns what to undo."""
    undo = []

    def patch(owner, name, phase):
        undo.append((owner, name, owner.__dict__.get(name)))
        setattr(owner, name, clock.wrap(getattr(owner, name), phase))

    patch(model, "forward", "pass")
    patch(model, "logits", "lm_head")
    patch(TargetRows, "_store", "rows")
    patch(engine, "verify", "walk")
    patch(cache_cls, "commit", "commit")
    patch(SpeculativeDecoder, "_trace", "trace")
    return undo


def restore(undo) -> None:
    for owner, name, old in reversed(undo):
        if old is None:
            delattr(owner, name)
        else:
            setattr(owner, name, old)


def decode(target, drafter, ids, clock: Clock, max_new: int, params: SamplingParams = SamplingParams()
           ) -> tuple[list[int], int, float, dict]:
    """One decode after its prefill (not timed): tokens, rounds, seconds and time per phase."""
    dec = SpeculativeDecoder(target, drafter, params=params, seed=0, detail=False)
    dec.start(ids, max_new)
    drafter.propose = clock.wrap(type(drafter).propose.__get__(drafter), "draft")
    drafter.commit = clock.wrap(type(drafter).commit.__get__(drafter), "commit")
    clock.spent.clear()
    t0 = time.perf_counter()
    res = dec.generate()
    secs = time.perf_counter() - t0
    del drafter.propose, drafter.commit
    return res.tokens, res.rounds, secs, dict(clock.spent)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", default="eagle3", choices=["eagle2", "eagle3"])
    ap.add_argument("--tree", action="append", default=None, metavar="DEPTH:NODES",
                    help="a dynamic tree (top-k 8, no floor), or 'tuned' (the device-tuned tree with its lookup branch); "
                         "repeatable (default: 1:2 and 2:3)")
    ap.add_argument("--draft-vocab", type=int, action="append", default=None, metavar="N",
                    help="EAGLE-2: draft over the first N token ids (0: all); repeatable, each with every tree")
    ap.add_argument("--prompts", type=int, default=12, help="Spec-Bench dev prompts (spread over its categories)")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="0: greedy (outputs checked against vanilla's); > 0: sampled, each decode seeded alike")
    ap.add_argument("--out", help="write the table as JSON here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    params = SamplingParams(temperature=args.temperature)
    target = load_target()
    trees = [None if t == "tuned" else tuple(int(x) for x in t.split(":")) for t in (args.tree or ["1:2", "2:3"])]
    runs = {"vanilla": NoDraft()}
    vocabs = args.draft_vocab if args.method == "eagle2" and args.draft_vocab else [None]
    for tree in trees:
        for vocab in vocabs:
            extra = {} if vocab is None else {"draft_vocab": vocab}
            suffix = "" if vocab is None else f", vocab {vocab or 'all'}"
            if tree is None:  # the device-tuned tree, lookup branch included, as the benchmark runs it
                runs[f"{args.method} tuned tree{suffix}"] = make_drafter(args.method, target, **extra)
                continue
            depth, nodes = tree
            draw = {} if params.greedy else {"draw": "sample"}  # at T > 0 drafts drawn from q, as the tuned trees do
            runs[f"{args.method} depth {depth}, {nodes} nodes{suffix}"] = make_drafter(
                args.method, target, depth=depth, total_tokens=nodes, top_k=8, **extra, **draw)
    prompts = load_prompts(str(ROOT.parent / "shared" / "data" / "spec_bench_dev.jsonl"), args.prompts)
    ids = [target.tokenizer.safe_chat_ids(p["prompt"]) for p in prompts]
    clock = Clock()
    undo = instrument(clock, target.model, type(target.model.new_cache(8)))
    total = {name: dict(tokens=0, rounds=0, seconds=0.0, phases=defaultdict(float)) for name in runs}
    identical = True
    try:
        decode(target, runs["vanilla"], ids[0], clock, 16, params)  # warm-up
        for prompt_ids in ids:
            reference = None
            for name, drafter in runs.items():
                toks, rounds, secs, spent = decode(target, drafter, prompt_ids, clock, args.tokens, params)
                reference = toks if reference is None else reference
                identical &= toks == reference or not params.greedy  # a sampled decode draws differently
                t = total[name]
                t["tokens"], t["rounds"], t["seconds"] = t["tokens"] + len(toks), t["rounds"] + rounds, t["seconds"] + secs
                for k, v in spent.items():
                    t["phases"][k] += v
    finally:
        restore(undo)
    rows = {}
    base = total["vanilla"]["seconds"] / total["vanilla"]["tokens"]
    for name, t in total.items():
        per_round = {k: 1000 * t["phases"].get(k, 0.0) / t["rounds"] for k in PHASES}
        per_round["other"] = 1000 * t["seconds"] / t["rounds"] - sum(per_round.values())
        rows[name] = dict(tau=t["tokens"] / t["rounds"], round_ms=1000 * t["seconds"] / t["rounds"],
                          ms_per_token=1000 * t["seconds"] / t["tokens"],
                          decode_vs_vanilla=base / (t["seconds"] / t["tokens"]), phases_ms=per_round)
    mode = "greedy" if params.greedy else f"temperature {args.temperature}"
    print(f"{len(ids)} Spec-Bench dev prompts x {args.tokens} new tokens, {mode}, {args.threads} threads"
          + (f"; outputs identical to vanilla: {identical}" if params.greedy else ""))
    print(f"{'':40s} {'tau':>5s} {'round':>6s} {'/token':>6s} {'vs van':>6s} " + " ".join(f"{k:>7s}" for k in (*PHASES, "other")))
    for name, r in rows.items():
        print(f"{name:40s} {r['tau']:5.2f} {r['round_ms']:6.2f} {r['ms_per_token']:6.2f} {r['decode_vs_vanilla']:5.2f}x "
              + " ".join(f"{r['phases_ms'][k]:7.3f}" for k in (*PHASES, "other")))
    if args.out:
        Path(args.out).write_text(json.dumps(dict(
            settings=dict(method=args.method, temperature=args.temperature,
                          trees=["tuned" if t is None else f"{t[0]}:{t[1]}" for t in trees], draft_vocab=vocabs, prompts=len(ids),
                          tokens=args.tokens,
                          threads=args.threads), machine=machine(),
            date=time.strftime("%Y-%m-%dT%H:%M:%S%z"), identical_to_vanilla=identical, methods=rows), indent=1) + "\n")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
