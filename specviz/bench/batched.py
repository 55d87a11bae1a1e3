"""Batched benchmark: throughput and per-user speed against the batch size B, per method.

Why: a server decodes many requests in one batch, and the spare compute that makes a draft
tree's extra tokens nearly free at B = 1 is spent on the batch instead; past some B speculation
stops paying. `python -m specviz.bench --batch 1,2,4,8 ...` measures where, on this machine, with
real batched rounds (specviz.serving.batch): every method at every B in the same process, on the same
prompts, and writes `by_batch` into the result JSON (drawn by the lesson page "When speculation
stops paying").

Methods are engine methods; a tunable one runs at this device's tuned tree (`eagle3`) or at the
papers' tree (`eagle3@paper`). With more B than prompts the prompts repeat, so every batch is full.
"""

from __future__ import annotations

import sys

from tqdm import tqdm

from .. import SpecVizError
from ..serving.batch import BatchDecoder
from ..drafters.base import describe_tree
from ..methods import ENGINE_METHODS, get, make_drafter, tune
from ..core.sampling import SamplingParams

PAPER = "@paper"


def parse_batches(text: str) -> list[int]:
    try:
        sizes = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise SpecVizError(f"--batch takes batch sizes like 1,2,4,8, got {text!r}.") from None
    if not sizes or any(b < 1 or b > 64 for b in sizes):
        raise SpecVizError(f"--batch sizes must be whole numbers from 1 to 64, got {text!r}.")
    return sorted(set(sizes))


def parse_method(spec: str) -> tuple[str, str]:
    """'eagle3' -> ('eagle3', 'auto'); 'eagle3@paper' -> ('eagle3', 'paper')."""
    name, _, tree = spec.partition("@")
    if name not in ENGINE_METHODS:
        raise SpecVizError(f"Unknown method {name!r} for a batched run; choose from {', '.join(ENGINE_METHODS)}.")
    if tree and (tree != "paper" or not get(name).tunable):
        raise SpecVizError(f"{spec!r}: only a tunable method takes '@paper' (its papers' tree).")
    return name, tree or "auto"


def drafter_factory(spec: str, target, tree: str = "auto"):
    """A function that builds fresh drafters of `spec` (one per sequence), tuning first if needed."""
    name, spec_tree = parse_method(spec)
    tree = "paper" if spec_tree == "paper" else tree
    if tree == "auto" and get(name).tunable:
        tune(name, target)  # times this device's trees once (cached); drafters then read the pick
    return lambda: make_drafter(name, target, tree_size=tree)


def batches(ids: list, B: int) -> list[list]:
    """The prompts in full batches of B (cycling from the start when they run out)."""
    n = max(len(ids), B)
    n = -(-n // B) * B
    seq = [ids[i % len(ids)] for i in range(n)]
    return [seq[i: i + B] for i in range(0, n, B)]


def run_batch(target, make, prompt_ids: list, max_new: int, params: SamplingParams, seed: int) -> dict:
    """Decode one batch; returns its tokens and times (prefill apart: it is not what a round batches)."""
    batch = BatchDecoder.of(target, make, len(prompt_ids), params, seeds=[seed + i for i in range(len(prompt_ids))])
    results = batch.generate(prompt_ids, max_new, chat=False)  # prefill apart: generate times the rounds
    return {"tokens": [r.tokens for r in results], "seconds": max(r.seconds for r in results),
            "user_seconds": [r.seconds for r in results], "seq_rounds": [r.rounds for r in results],
            "rounds": batch.rounds}


def summarise(runs: list[dict], B: int) -> dict:
    toks = [len(t) for r in runs for t in r["tokens"]]
    secs = sum(r["seconds"] for r in runs)
    rounds = [rd for r in runs for rd in r["rounds"]]
    n = len(rounds)
    per_user = [len(t) / s for r in runs for t, s in zip(r["tokens"], r["user_seconds"]) if s > 0]
    return {
        "batch": B,
        "sequences": len(toks),
        "new_tokens": sum(toks),
        "seconds": secs,
        "throughput_tok_s": sum(toks) / secs if secs else 0.0,  # every sequence's tokens per second of decoding
        "per_seq_tok_s": sum(per_user) / len(per_user) if per_user else 0.0,  # what one user sees
        "tau": sum(toks) / sum(x for r in runs for x in r["seq_rounds"]),
        "batched_rounds": n,
        "per_round_ms": {  # one batched round: drafting (all sequences), the shared pass, LM head, walks
            "draft": 1000 * sum(r.draft_s for r in rounds) / n,
            "verify": 1000 * sum(r.pass_s for r in rounds) / n,
            "head": 1000 * sum(r.head_s for r in rounds) / n,
            "walk": 1000 * sum(r.walk_s for r in rounds) / n,
            "rows": sum(sum(r.nodes) for r in rounds) / n,  # tokens in the shared pass
            "sequences": sum(len(r.nodes) for r in rounds) / n,
        },
    }


def measure(target, makers: dict, prompt_ids: list[list[int]], sizes: list[int], max_new: int,
            params: SamplingParams, seed: int = 0, progress=None, on_batch=None) -> dict:
    """`by_batch` for every B in `sizes` and every method of `makers` (name -> a function building a
    fresh drafter), after one short warm-up batch per method. The first B's vanilla run (each
    prompt once) is the reference of `identical_to_vanilla` (greedy) and of the throughput ratio.
    `progress(fraction)` after every batch; `on_batch(B, entry)` after every B (the CLI prints it)."""
    sizes = sorted(set(int(b) for b in sizes))
    total = len(makers) * (1 + sum(len(batches(prompt_ids, b)) for b in sizes))
    done = 0

    def tick():
        nonlocal done
        done += 1
        if progress is not None:
            progress(min(1.0, done / total))

    for make in makers.values():  # warm-up: one short batch of each method
        run_batch(target, make, prompt_ids[:2], 8, params, seed)
        tick()
    by_batch: dict = {}
    vanilla_out: list | None = None
    for B in sizes:
        entry, outs = {}, {}
        groups = batches(prompt_ids, B)
        for s, make in makers.items():
            runs = []
            for g in tqdm(groups, desc=f"B={B} {s}", file=sys.stderr, disable=progress is not None):
                runs.append(run_batch(target, make, g, max_new, params, seed))
                tick()
            entry[s] = summarise(runs, B)
            outs[s] = [t for r in runs for t in r["tokens"]]
        if "vanilla" in outs and vanilla_out is None:
            vanilla_out = outs["vanilla"][: len(prompt_ids)]  # the first B's vanilla: each prompt once
        for s in makers:
            if params.greedy and vanilla_out is not None:
                got = outs[s]
                entry[s]["identical_to_vanilla"] = all(got[i] == vanilla_out[i % len(prompt_ids)] for i in range(len(got)))
            if "vanilla" in entry:
                entry[s]["speedup_vs_vanilla"] = entry[s]["throughput_tok_s"] / entry["vanilla"]["throughput_tok_s"]
        by_batch[str(B)] = entry
        if on_batch is not None:
            on_batch(B, entry)
    return by_batch


def run(args, target, prompt_ids: list[list[int]], report: dict) -> dict:
    """The batched part of `python -m specviz.bench --batch ...`: fills report['by_batch']."""
    sizes = parse_batches(args.batch)
    specs = [m.strip() for m in args.methods.split(",") if m.strip()]
    for s in specs:
        parse_method(s)
    params = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    makers = {s: drafter_factory(s, target, args.tree) for s in specs}
    report["batch_sizes"] = sizes
    report["trees"] = {s: describe_tree(makers[s](), params) for s in specs}
    report["by_batch"] = measure(target, makers, prompt_ids, sizes, args.max_new_tokens, params, args.seed,
                                 on_batch=print_batch)
    return report


def print_batch(B: int, entry: dict) -> None:
    print(f"\n== batch {B} ==")
    print(f"{'method':14} {'tok/s':>8} {'per user':>9} {'tau':>5} {'vs vanilla':>10} {'pass ms':>8} {'rows':>5} {'identical':>9}")
    for s, e in entry.items():
        r = e["per_round_ms"]
        vs = f"{e['speedup_vs_vanilla']:.2f}x" if "speedup_vs_vanilla" in e else "-"
        print(f"{s:14} {e['throughput_tok_s']:8.1f} {e['per_seq_tok_s']:9.1f} {e['tau']:5.2f} {vs:>10} "
              f"{r['verify']:8.2f} {r['rows']:5.1f} {str(e.get('identical_to_vanilla', '-')):>9}")


def crossover(by_batch: dict, method: str, base: str = "vanilla") -> int | None:
    """The smallest measured B at which `method`'s throughput is no longer above `base`'s (None: it
    stays above at every measured B)."""
    for B in sorted(by_batch, key=int):
        e = by_batch[B]
        if method in e and base in e and e[method]["throughput_tok_s"] <= e[base]["throughput_tok_s"]:
            return int(B)
    return None

