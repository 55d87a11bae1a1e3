"""Decode-time speed of draft-tree settings against vanilla, alternated prompt by prompt.

Why: `specviz.bench` includes the prompt's prefill (the same for every method) and runs each method
at one tree. To see what a tree setting buys, this times only the decode rounds and rotates the
order of the settings on every prompt, so drift in the machine's speed hits all of them alike.

    .venv/bin/python scripts/compare_trees.py --prompts ../shared/data/spec_bench_dev.jsonl --limit 20 \\
        --tree "eagle3 depth=1 total_tokens=2" --tree "eagle3 depth=1 total_tokens=64 min_prob=0.25"

Each --tree is a method name and key=value drafter options (none: the device-tuned tree).
Greedy unless --temperature; prints tokens/s, the ratio to vanilla and tau (tokens per round) for each setting, then the
same with the prefill counted (an EAGLE head's prompt pass is part of it; `window=` changes it).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specviz import methods  # noqa: E402
from specviz.bench.prompts import load_prompts  # noqa: E402
from specviz.core.engine import SpeculativeDecoder  # noqa: E402
from specviz.core.sampling import SamplingParams  # noqa: E402
from specviz.core.target import load_target  # noqa: E402


def parse_tree(text: str) -> tuple[str, str, dict]:
    name, *pairs = text.split()
    opts = {}
    for pair in pairs:
        key, _, val = pair.partition("=")
        try:
            opts[key] = float(val) if "." in val else int(val)
        except ValueError:
            opts[key] = val  # e.g. draw=sample
    return text, name, opts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", default="builtin")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--tree", action="append", default=[], help='e.g. "eagle3 depth=1 total_tokens=64 min_prob=0.25"')
    ap.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (e.g. 1 with draw=sample)")
    args = ap.parse_args(argv)
    params = SamplingParams(temperature=args.temperature)
    target = load_target()
    prompts = [p.get("ids") or p["prompt"] for p in load_prompts(args.prompts, args.limit)]
    settings = [("vanilla", "vanilla", {})] + [parse_tree(t) for t in args.tree]
    seconds, tokens, rounds = collections.Counter(), collections.Counter(), collections.Counter()
    prefill = collections.Counter()
    for _ in range(args.repeats):
        for j, prompt in enumerate(prompts):
            k = j % len(settings)
            for label, name, opts in settings[k:] + settings[:k]:
                dec = SpeculativeDecoder(target, methods.make_drafter(name, target, **opts), params, seed=0,
                                         detail=False)
                t0 = time.perf_counter()
                dec.start(prompt, args.max_new_tokens)
                prefill[label] += time.perf_counter() - t0
                while not dec.done:
                    r = dec.step()
                    seconds[label] += r.total_time_s
                    tokens[label] += len(r.committed)
                    rounds[label] += 1
    base = tokens["vanilla"] / seconds["vanilla"]
    whole = tokens["vanilla"] / (seconds["vanilla"] + prefill["vanilla"])
    for label, _, _ in settings:
        rate = tokens[label] / seconds[label]
        with_prefill = tokens[label] / (seconds[label] + prefill[label])
        print(f"{label:50s} {rate:8.1f} tok/s  x{rate / base:.3f}  tau {tokens[label] / rounds[label]:.3f}"
              f"  | with prefill {with_prefill:6.1f} tok/s x{with_prefill / whole:.3f} (prefill {prefill[label]:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
