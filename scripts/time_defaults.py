"""Speed of what Home and Compare show with their default settings, against vanilla, on this machine.

Why: the issue's question is what a teacher sees when pressing the buttons without touching a setting:
Home's EAGLE-3 with the sidebar's default tree (depth 6, top-4, 24 nodes, path floor 0.25 on a CPU)
and Compare's EAGLE-3 at its device-tuned tree, both on the default prompt. Runs alternate with
vanilla so drift in the machine's speed hits both alike; prints the median ratio over the repeats,
tau, and whether every output equals vanilla's.

    PYTHONPATH=. .venv/bin/python scripts/time_defaults.py --repeats 6 --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from specviz import methods  # noqa: E402
from specviz.app.prompts import EXAMPLES  # noqa: E402
from specviz.app.state import DEFAULTS  # noqa: E402
from specviz.core.engine import SpeculativeDecoder  # noqa: E402
from specviz.core.target import load_target  # noqa: E402


def timed(target, drafter, prompt, max_new) -> tuple[float, float, list[int]]:
    """(tokens/s of the whole generation, tau, tokens) with detail off, as the pages' timed runs."""
    dec = SpeculativeDecoder(target, drafter, seed=0, detail=False)
    t0 = time.perf_counter()
    r = dec.generate(prompt, max_new_tokens=max_new)
    secs = time.perf_counter() - t0
    return len(r.tokens) / secs, len(r.tokens) / max(1, r.rounds), r.tokens


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=DEFAULTS["max_new"])
    ap.add_argument("--prompt", default=EXAMPLES[0])
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    target = load_target()
    home_tree = dict(depth=DEFAULTS["depth"], top_k=DEFAULTS["tree_topk"], total_tokens=DEFAULTS["total_tokens"],
                     min_prob=DEFAULTS["min_prob"])
    pages = {"Home (sidebar default tree)": home_tree, "Compare (device-tuned tree)": {}}
    timed(target, None, args.prompt, 8)  # warm-up: kernels, caches, the tuner's cost file
    for opts in pages.values():
        timed(target, methods.make_drafter("eagle3", target, **opts), args.prompt, 8)
    for page, opts in pages.items():
        ratios, taus, same = [], [], True
        for _ in range(args.repeats):
            van, _, ref = timed(target, None, args.prompt, args.max_new_tokens)
            spec, tau, toks = timed(target, methods.make_drafter("eagle3", target, **opts), args.prompt,
                                    args.max_new_tokens)
            ratios.append(spec / van)
            taus.append(tau)
            same &= toks == ref
        print(f"{page}: EAGLE-3 median {statistics.median(ratios):.2f}x vanilla (runs {min(ratios):.2f}-"
              f"{max(ratios):.2f}x), tau {statistics.median(taus):.2f}, {args.max_new_tokens} tokens, "
              f"outputs identical to vanilla: {'yes' if same else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
