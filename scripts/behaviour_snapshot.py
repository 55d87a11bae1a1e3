"""Tokens and traces (timings aside) of every engine method x (greedy, T = 0.8 top-p 0.9) x 2 built-in
prompts, as one JSON: run it before and after a refactor and compare the files (they must be equal).

    PYTHONPATH=. .venv/bin/python scripts/behaviour_snapshot.py before.json   # then after.json; cmp them
"""

from __future__ import annotations

import dataclasses
import json
import sys

import torch

from specviz.core.engine import SpeculativeDecoder
from specviz.examples import EXAMPLE_PROMPTS
from specviz.methods import ENGINE_METHODS, get, make_drafter
from specviz.core.sampling import SamplingParams
from specviz.core.target import load_target


def plain(o):
    """A trace as JSON values without its timings (they differ run to run)."""
    if dataclasses.is_dataclass(o):
        o = dataclasses.asdict(o)
    if isinstance(o, dict):
        return {k: plain(v) for k, v in o.items() if "time" not in k and not k.endswith(("_s", "_ms"))}
    if isinstance(o, (list, tuple)):
        return [plain(v) for v in o]
    if isinstance(o, float):
        return round(o, 6)
    return o if isinstance(o, (int, str, bool, type(None))) else str(o)


def main(out: str, new_tokens: int = 24) -> None:
    torch.set_num_threads(1)
    target = load_target(None)
    runs = {}
    for m in ENGINE_METHODS:
        options = {"tree_size": "paper"} if get(m).tunable else {}  # fixed trees: tuning picks vary by machine
        for name, params in (("greedy", SamplingParams()), ("t08", SamplingParams(temperature=0.8, top_p=0.9))):
            for i, prompt in enumerate(EXAMPLE_PROMPTS[:2]):
                res = SpeculativeDecoder(target, make_drafter(m, target, **options), params, seed=3).generate(prompt, new_tokens)
                runs[f"{m}/{name}/{i}"] = {"tokens": res.tokens, "traces": plain(res.traces)}
                print(m, name, i, len(res.tokens), file=sys.stderr)
    with open(out, "w") as f:
        json.dump(runs, f)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
