"""Held-out numbers of the shipped heads (`python -m specviz.train eval`).

1. Per-step top-1 acceptance on held-out regenerated ShareGPT (greedy rows): unroll each head on
   its own states with teacher-forced tokens and compare its top-1 with the target's argmax; the
   chain columns give P(first j+1 drafts all right) and tau_chain = 1 + sum of them.
2. The mean accepted length tau of the real drafters on the engine at temperature 0 (tokens per
   target forward, bonus token included), on held-out prompts and on a Spec-Bench-style JSONL.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from .. import SpecVizError
from ..core.engine import SpeculativeDecoder
from ..heads.io import load_head, shipped_head_dir
from ..methods import make_drafter
from ..core.sampling import SamplingParams
from ..core.target import load_target
from .data import SeqData, default_data_dir
from .sps import evaluate_sps
from .trainers import TrainConfig, evaluate


def per_step(methods, data_dir, model, steps=6, log=print):
    out = {}
    for m in methods:
        folder = shipped_head_dir(model.name, m)
        if not (folder / "config.json").is_file():
            log(f"{m}: no shipped head in {folder}")
            continue
        if m == "sps":
            from transformers import LlamaForCausalLM  # slow to import; only the SpS row of the evaluation needs it

            held = SeqData(data_dir, "heldout", taps=[])
            sps = LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
            out[m] = evaluate_sps(sps, held, steps=steps)
        else:
            head = load_head(folder, target=model)
            taps = [str(t) for t in model.cfg.eagle3_layers()] if m == "eagle3" else ["final"]
            held = SeqData(data_dir, "heldout", taps=taps)
            cfg = TrainConfig(method=m, data_dir=str(data_dir), out="", ckpt_dir="")
            vocab = head.target_ids() if m == "eagle3" else torch.arange(model.cfg.vocab_size)
            out[m] = evaluate(m, head, held, taps, cfg, vocab, steps=steps)
        log(f"{m}: {json.dumps(out[m])}")
    return out


def prompts_from(source, data_dir, limit, tokenizer):
    if source == "heldout":
        held = SeqData(data_dir, "heldout", taps=[])
        seqs = [s for s in held.seqs if s.get("temp", 0.0) == 0.0][:limit]
        return [("heldout", s["tokens"][: s["prompt_len"]].tolist()) for s in seqs]
    rows = [json.loads(line) for line in Path(source).read_text().splitlines() if line.strip()]
    # spread over categories: round-robin
    by = {}
    for r in rows:
        by.setdefault(r.get("category", "all"), []).append(r)
    picked = []
    while len(picked) < limit and any(by.values()):
        for c in list(by):
            if by[c] and len(picked) < limit:
                picked.append(by[c].pop(0))
    return [(r.get("category", "all"), tokenizer.chat_ids(r["turns"][0])) for r in picked]


def engine_tau(methods, target, prompts, max_new_tokens=64, log=print, options=None):
    res = {}
    for m in methods:
        try:
            drafter = make_drafter(m, target, **(options or {}).get(m, {}))
        except Exception as e:  # noqa: BLE001
            log(f"{m}: unavailable ({e})")
            continue
        new = rounds = 0
        t0 = time.perf_counter()
        acc_hist = {}
        for cat, ids in prompts:
            dec = SpeculativeDecoder(target, drafter, SamplingParams(), seed=0, detail=False)
            r = dec.generate(ids, max_new_tokens=max_new_tokens, chat=False)
            new += len(r.tokens)
            rounds += r.rounds
            for t in r.traces:
                a = len(t.accepted_nodes)
                acc_hist[a] = acc_hist.get(a, 0) + 1
        secs = time.perf_counter() - t0
        res[m] = {"tau": round(new / max(rounds, 1), 3), "tokens": new, "rounds": rounds,
                  "tokens_per_s": round(new / secs, 2), "accept_hist": dict(sorted(acc_hist.items()))}
        log(f"{m}: {json.dumps(res[m])}")
    return res


def tree_options(text: str) -> dict:
    """'depth=6 top_k=8 total_tokens=24 min_prob=0.1' -> drafter options (ints, or floats where a dot is)."""
    opts = {}
    for pair in text.split():
        key, eq, val = pair.partition("=")
        if not eq or key not in ("depth", "top_k", "total_tokens", "min_prob"):
            raise SpecVizError(f"--tree takes depth=, top_k=, total_tokens= and min_prob=, got {pair!r}")
        try:
            opts[key] = float(val) if "." in val else int(val)
        except ValueError:
            raise SpecVizError(f"--tree: {key} needs a number, got {val!r}") from None
    return opts


def main(args, log=print):
    torch.set_num_threads(args.threads or torch.get_num_threads())
    target = load_target(dtype=torch.float32, device="cpu")
    data_dir = Path(args.data or default_data_dir())
    methods = [m for m in args.methods.split(",") if m]
    report = {"model": target.model.name, "date": time.strftime("%Y-%m-%d %H:%M")}
    heads = [m for m in methods if m in ("eagle1", "eagle3", "medusa", "sps")]
    tree = tree_options(getattr(args, "tree", ""))
    options = {m: tree for m in ("eagle2", "eagle3")} if tree else None
    if tree:
        report["tree"] = tree
    if not args.skip_per_step:
        log("== held-out per-step top-1 acceptance (greedy rows of held-out regenerated ShareGPT)")
        report["per_step"] = per_step(heads, data_dir, target.model, log=log)
    if args.tau_prompts:
        for src in args.tau_prompts.split(","):
            log(f"== tau on the engine, temperature 0, {args.limit} prompts from {src}, {args.max_new_tokens} new tokens")
            prompts = prompts_from(src, data_dir, args.limit, target.tokenizer)
            report.setdefault("tau", {})[Path(src).name] = engine_tau(
                [m for m in methods], target, prompts, args.max_new_tokens, log=log, options=options)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return report
