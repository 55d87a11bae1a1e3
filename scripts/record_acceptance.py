"""Record the acceptance of EAGLE-1/2/3 and Medusa at one equal, paper-sized tree.

The Compare page's *Acceptance* view reads the result (assets/acceptance/equal_trees.json), so a
class never waits on a slow CPU for it. Acceptance does not depend on the machine: greedy fp32
decoding of the same built-in prompts the heads' acceptance profiles were calibrated on, with
every method's tree at the size of EAGLE-1's paper tree (25 draft nodes + root, depth 5; Medusa's
tree is that tree cut to its number of heads). Per round it keeps the accepted length and how
deep the tree reached, so the page can draw tau, acceptance by depth and the length histogram.

    .venv/bin/python scripts/record_acceptance.py [--limit 12] [--max-new-tokens 96]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specviz.core.engine import SpeculativeDecoder  # noqa: E402
from specviz.examples import EXAMPLE_PROMPTS  # noqa: E402
from specviz.methods import make_drafter  # noqa: E402
from specviz.core.target import load_target  # noqa: E402

OUT = ROOT / "assets" / "acceptance" / "equal_trees.json"
PAPER_NODES = 26  # EAGLE-1's static tree: 25 drafted nodes + the root
PAPER_DEPTH = 5
TOP_K = 8  # children expanded per node when the profiles were calibrated


def drafter_options(method: str) -> dict:
    if method in ("eagle2", "eagle3"):
        return dict(depth=PAPER_DEPTH, top_k=TOP_K, total_tokens=PAPER_NODES)
    return dict(tree_size="paper")


def record(target, method: str, prompts: list[str], max_new: int) -> dict:
    rounds = []
    for prompt in prompts:
        dec = SpeculativeDecoder(target, make_drafter(method, target, **drafter_options(method)), seed=0, detail=False)
        res = dec.generate(prompt, max_new)
        for tr in res.traces:
            rounds.append([len(tr.accepted_nodes), max((n.depth for n in tr.nodes), default=0), len(tr.nodes)])
        print(f"  {method}: {len(rounds)} rounds so far", file=sys.stderr, flush=True)
    tokens = sum(a + 1 for a, _, _ in rounds)
    return {"rounds": rounds, "tau": round(tokens / len(rounds), 4), "tree_nodes": max(n for _, _, n in rounds),
            "options": drafter_options(method)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--methods", default="eagle1,eagle2,eagle3,medusa")
    ap.add_argument("--limit", type=int, default=12)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--out", default=str(OUT), help="JSON to write; methods already in it are kept (so methods "
                    "can be recorded by separate processes one after another)")
    args = ap.parse_args(argv)
    target = load_target(dtype=torch.float32)
    prompts = EXAMPLE_PROMPTS[: args.limit]
    out = {"what": "greedy fp32 decoding, every method at the size of EAGLE-1's paper tree",
           "model": target.model.name, "prompts": len(prompts), "prompt_source": "specviz.examples.EXAMPLE_PROMPTS",
           "max_new_tokens": args.max_new_tokens, "paper_nodes": PAPER_NODES, "date": dt.date.today().isoformat(),
           "command": f"python scripts/record_acceptance.py --limit {args.limit} --max-new-tokens {args.max_new_tokens}",
           "methods": {}}
    for m in args.methods.split(","):
        out["methods"][m] = record(target, m, prompts, args.max_new_tokens)
        print(f"{m}: tau {out['methods'][m]['tau']:.3f} over {len(out['methods'][m]['rounds'])} rounds, "
              f"{out['methods'][m]['tree_nodes']} nodes", flush=True)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(path.read_text()) if path.is_file() else {}
    if old.get("command") == out["command"]:  # same conditions: keep the methods recorded before (and how)
        out["methods"] = {**old.get("methods", {}), **out["methods"]}
        if "note" in old:
            out["note"] = old["note"]
    path.write_text(json.dumps(out, separators=(",", ":")))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
