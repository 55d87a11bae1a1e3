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
import glob
from pathlib import Path

import torch
from safetensors import safe_open

from specviz.bench import load_prompts
from specviz.engine import SpeculativeDecoder
from specviz.heads.io import load_head, shipped_head_dir
from specviz.methods import make_drafter
from specviz.sampling import SamplingParams
from specviz.target import load_target


def heldout_argmax(data_dir: str) -> torch.Tensor:
    """The target's argmax at each response position of the greedy held-out rows."""
    out = []
    for path in sorted(glob.glob(str(Path(data_dir).expanduser() / "heldout-*.safetensors"))):
        f = safe_open(path, "pt")
        top1, temp, start = f.get_tensor("topk_ids")[:, 0], f.get_tensor("temp"), f.get_tensor("lab_start")
        out += [top1[start[i] : start[i + 1]] for i in range(len(temp)) if temp[i] == 0]
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.long)


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

    sets: dict[str, dict[str, torch.Tensor]] = {}
    vanilla = make_drafter("vanilla", target)
    for p in load_prompts(args.prompts, args.limit):
        dec = SpeculativeDecoder(target, vanilla, SamplingParams(), detail=False)
        dec.start(target.tokenizer.chat_ids(p["prompt"]), args.max_new_tokens)
        toks = torch.tensor(dec.generate().tokens)
        cat = p.get("category", "all")
        sets.setdefault(Path(args.prompts).stem, {}).setdefault(cat, torch.zeros(0, dtype=torch.long))
        sets[Path(args.prompts).stem][cat] = torch.cat([sets[Path(args.prompts).stem][cat], toks])
    if args.data:
        sets["held-out greedy"] = {"all": heldout_argmax(args.data)}
    for name, cats in sets.items():
        for label, mask in vocabs.items():
            every = torch.cat(list(cats.values()))
            parts = " ".join(f"{c[:12]} {(~mask[t]).float().mean():.3f}" for c, t in sorted(cats.items()) if len(cats) > 1)
            print(f"{name} ({len(every)} tokens), {label}: outside {(~mask[every]).float().mean():.3f}  {parts}")


if __name__ == "__main__":
    main()
