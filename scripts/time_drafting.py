"""Time a drafter's `propose` (the drafting part of a round) with each tree level in one kernel call
and through torch, in the same process on the same rounds (run it on an idle machine).

    python scripts/time_drafting.py eagle3                       # the papers' tree
    python scripts/time_drafting.py eagle3 --depth 3 --nodes 8 --min-prob 0.1
    python scripts/time_drafting.py eagle2 --prompts 6 --tokens 64 --threads 2

Each round is drafted twice from the same state (torch path, then kernel), so both time the same
trees; the tree the kernel drafted is the one the round verifies.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specviz.drafters.shape import TreeShape  # noqa: E402
from specviz.core.engine import SpeculativeDecoder  # noqa: E402
from specviz.methods import make_drafter  # noqa: E402
from specviz.core.target import load_target  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("method", choices=["eagle1", "eagle2", "eagle3"])
    ap.add_argument("--depth", type=int, default=0, help="a dynamic tree's depth (0: the papers' tree)")
    ap.add_argument("--nodes", type=int, default=24)
    ap.add_argument("--min-prob", type=float, default=0.0)
    ap.add_argument("--prompts", type=int, default=6, help="Spec-Bench dev prompts")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    target = load_target()
    drafter = make_drafter(args.method, target, tree_size="paper")
    if args.depth:
        drafter.reshape(TreeShape.dynamic(args.depth, 8, args.nodes, args.min_prob))
    kernel = drafter.head.draft_kernel
    if kernel is None:
        print("no compiled kernel here: nothing to compare", file=sys.stderr)
        return 2
    data = ROOT.parent / "shared" / "data" / "spec_bench_dev.jsonl"
    prompts = [json.loads(line)["turns"][0] for line in data.read_text().splitlines()[: args.prompts]]
    propose, times = drafter.propose, {"torch": [], "kernel": []}

    def both(context, root, params, generator):
        snap, rng = drafter.snapshot(), generator.get_state()
        drafter.head.draft_kernel = None
        t0 = time.perf_counter()
        propose(context, root, params, generator)
        times["torch"].append(time.perf_counter() - t0)
        drafter.head.draft_kernel = kernel
        drafter.restore(snap)
        generator.set_state(rng)
        t0 = time.perf_counter()
        tree = propose(context, root, params, generator)
        times["kernel"].append(time.perf_counter() - t0)
        return tree

    drafter.propose = both
    dec = SpeculativeDecoder(target, drafter, detail=False)
    for warm in (True, False):
        for v in times.values():
            v.clear()
        for p in prompts[:1] if warm else prompts:
            dec.start(p, max_new_tokens=args.tokens)
            while not dec.done:
                dec.step()
    t, k = (1000 * statistics.mean(times[x]) for x in ("torch", "kernel"))
    print(f"{args.method} {drafter.describe()}: propose over {len(times['kernel'])} rounds, {args.threads} threads: "
          f"torch {t:.2f} ms, kernel {k:.2f} ms ({t / k:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
