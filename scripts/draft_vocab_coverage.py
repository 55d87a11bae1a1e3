"""How often the target's greedy token lies outside the EAGLE-3 head's draft vocabulary.

Why: EAGLE-3 drafts over its own vocabulary (d2t); where the target's next token is not in it, the
first draft is wrong whatever the head learnt. This prints that share on Spec-Bench-style prompts
(the target's own greedy answers) and, with --data, on the held-out regenerated positions (the
target's argmax at every response position of the greedy rows), for the shipped vocabulary and for
larger ones (the shipped tokens plus the lowest ids missing, the tokenizer's most frequent merges).

    PYTHONPATH=. .venv/bin/python scripts/draft_vocab_coverage.py --prompts ../shared/data/spec_bench_dev.jsonl \
        --limit 20 --data ~/.cache/specviz/train/data-mtC
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import torch

from specviz.bench.prompts import load_prompts
from specviz.core.engine import SpeculativeDecoder
from specviz.heads.io import load_head, shipped_head_dir
from specviz.methods import make_drafter
from specviz.core.sampling import SamplingParams
from specviz.core.target import load_target
from specviz.train.data import SeqData


def heldout_argmax(data_dir: str) -> torch.Tensor:
    """The target's argmax at each response position of the greedy held-out rows."""
    held = SeqData(Path(data_dir).expanduser(), "heldout", taps=[])
    return torch.cat([s["topk_ids"][:, 0] for s in held.seqs if s.get("temp", 0.0) == 0.0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", default="../shared/data/spec_bench_dev.jsonl")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--data", default="", help="a training-data folder with heldout-*.safetensors shards")
    ap.add_argument("--sizes", default="16384,32768")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target()
    head = load_head(shipped_head_dir(target.model.name, "eagle3"), target=target.model)
    V = target.cfg.vocab_size
    shipped = torch.zeros(V, dtype=torch.bool)
    shipped[head.target_ids()] = True
    vocabs = {f"shipped {int(shipped.sum())}": shipped}
    for n in (int(s) for s in args.sizes.split(",") if s):
        grown = shipped.clone()
        grown[(~shipped).nonzero()[:, 0][: max(n - int(shipped.sum()), 0)]] = True
        vocabs[f"shipped + lowest ids to {n}"] = grown

    by_category = defaultdict(list)  # the target's greedy tokens per prompt category
    vanilla = make_drafter("vanilla", target)
    for p in load_prompts(args.prompts, args.limit):
        dec = SpeculativeDecoder(target, vanilla, SamplingParams(), detail=False)
        dec.start(target.tokenizer.chat_ids(p["prompt"]), args.max_new_tokens)
        by_category[p.get("category", "all")] += dec.generate().tokens
    sets = {Path(args.prompts).stem: {c: torch.tensor(t) for c, t in by_category.items()}}
    if args.data:
        sets["held-out greedy"] = {"all": heldout_argmax(args.data)}
    for name, cats in sets.items():
        every = torch.cat(list(cats.values()))
        for label, mask in vocabs.items():
            parts = " ".join(f"{c[:12]} {(~mask[t]).float().mean():.3f}" for c, t in sorted(cats.items()) if len(cats) > 1)
            print(f"{name} ({len(every)} tokens), {label}: outside {(~mask[every]).float().mean():.3f}  {parts}")


if __name__ == "__main__":
    main()
