"""Benchmark: tau, acceptance by depth, tokens/s and speedups, against our vanilla and HF peers.

All methods run in the same process on the same prompts and settings, so the printed ratios
compare like with like. Timings include prefill (per_round_ms lists it apart: the target's pass is the same
for every method; an EAGLE method adds its head's pass over the prompt). Run with the machine otherwise idle.
The llama.cpp peers (`llamacpp`, `llamacpp-pld`: specviz/bench/llamacpp.py) run when llama-cpp-python is
installed and are skipped, with a note, when it is not.

    python -m specviz.bench --methods vanilla,hf,hf-pld,pld --prompts FILE.jsonl --limit 10
    python -m specviz.bench --methods vanilla,hf --dtype fp32,bf16 --forward-curve
    python -m specviz.bench --methods vanilla,llamacpp,llamacpp-pld --threads 2
    python -m specviz.bench --batch 1,2,4,8 --methods vanilla,eagle3,eagle3@paper --limit 8   (specviz.bench.batched)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from tqdm import tqdm

from .. import SpecVizError
from . import batched, llamacpp
from .prompts import load_prompts
from ..drafters import sps
from ..drafters.base import describe_tree  # noqa: F401  (the benchmark's files record it; tests read it here)
from ..core.engine import SpeculativeDecoder
from ..runtime.machine import forward_curve, machine, weight_floor
from ..methods import DRAWABLE, ENGINE_METHODS, get, make_drafter, tune
from ..core.sampling import SamplingParams
from ..core.target import load_target

HF_METHODS = ("hf", "hf-pld", "hf-assisted")
LLAMACPP_METHODS = llamacpp.METHODS  # optional: need llama-cpp-python
PEER_METHODS = (*HF_METHODS, *LLAMACPP_METHODS)  # not our engine: no drafter, tree, rounds or prefill apart
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


# ----------------------------------------------------------------------------- runners
class Runner:
    """Runs one method on one prompt: returns (new token ids, seconds, rounds, per-round accepted lengths)."""

    def __init__(self, method: str, target, params: SamplingParams, hf=None, seed: int = 0, tree: str = "auto",
                 draw: str = "", peer=None):
        self.method, self.target, self.params, self.hf, self.seed = method, target, params, hf, seed
        self.peer = peer  # a llama.cpp peer (llamacpp.LlamaCppPeer) for the llamacpp methods
        self.tree = None
        self.last_prefill_s = 0.0
        if method not in PEER_METHODS:
            extra = {"draw": draw} if draw and method in DRAWABLE else {}
            if tree == "auto" and get(method).tunable:
                tune(method, target)  # times this device's trees once (cached); the drafter then reads the pick
            self.drafter = make_drafter(method, target, tree_size=tree, **extra)
            self.tree = describe_tree(self.drafter, params)

    def run(self, prompt_ids: list[int], max_new: int):
        if self.method in HF_METHODS:
            return self._run_hf(prompt_ids, max_new)
        if self.method in LLAMACPP_METHODS:  # timed whole, prefill included, like the HF peers
            toks, secs, self.last_prefill_s = self.peer.run(prompt_ids, max_new)  # to its first token: per_prompt only
            return toks, secs, None, [], [], []
        dec = SpeculativeDecoder(self.target, self.drafter, self.params, seed=self.seed, detail=False)
        t0 = time.perf_counter()
        dec.start(prompt_ids, max_new)
        # the target's prefill (the same for every method; EAGLE adds its head's prompt pass), apart from the rounds
        self.last_prefill_s = time.perf_counter() - t0
        res = dec.generate()
        secs = time.perf_counter() - t0
        depths = [max((n.depth for n in tr.nodes), default=0) for tr in res.traces]
        return res.tokens, secs, res.rounds, [len(tr.committed) for tr in res.traces], depths, res.traces

    def _run_hf(self, prompt_ids, max_new):
        kw = dict(max_new_tokens=max_new, pad_token_id=self.target.cfg.eos_token_ids[0] if self.target.cfg.eos_token_ids else 0)
        if self.params.greedy:
            kw.update(do_sample=False)
        else:
            kw.update(do_sample=True, temperature=self.params.temperature, top_k=self.params.top_k or None, top_p=self.params.top_p)
        if self.method == "hf-pld":
            kw.update(prompt_lookup_num_tokens=10)
        if self.method == "hf-assisted":
            kw.update(assistant_model=self.hf["assistant"])
        dev = self.hf["model"].device
        ids = torch.tensor([prompt_ids], device=dev)
        torch.manual_seed(self.seed)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = self.hf["model"].generate(ids, attention_mask=torch.ones_like(ids), **kw)
        if ids.is_cuda:
            torch.cuda.synchronize(dev)
        secs = time.perf_counter() - t0
        toks = out[0, ids.shape[1] :].tolist()
        return toks, secs, None, [], [], []


def load_hf(target, dtype, need_assistant: bool):
    from transformers import LlamaForCausalLM  # slow to import; only the HF peers need it

    dev = target.model.device  # the peers run where our runtime runs
    hf = {"model": LlamaForCausalLM.from_pretrained(str(target.folder), dtype=dtype).to(dev).eval()}
    if need_assistant:
        hf["assistant"] = LlamaForCausalLM.from_pretrained(str(sps.default_sps_dir(target.model.name)), dtype=dtype).to(dev).eval()
    return hf


# ----------------------------------------------------------------------------- metrics
def alpha_by_depth(accept_lens: list[int], depths: list[int]) -> list[float]:
    """Acceptance rate per depth d: of the rounds that reached depth d-1 with a draft at depth d,
    the fraction that accepted a draft token at depth d."""
    if not accept_lens:
        return []
    out = []
    for d in range(1, max(depths, default=0) + 1):
        tried = [a for a, dep in zip(accept_lens, depths) if a - 1 >= d - 1 and dep >= d]
        if not tried:
            break
        out.append(sum(1 for a in tried if a - 1 >= d) / len(tried))
    return out


def summarise(rows: list[dict]) -> dict:
    toks = sum(r["n_tokens"] for r in rows)
    secs = sum(r["seconds"] for r in rows)
    rounds = [r["rounds"] for r in rows if r["rounds"]]
    acc = [a for r in rows for a in r["accept_lens"]]
    dep = [d for r in rows for d in r["depths"]]
    prefill = sum(r.get("prefill_s", 0.0) for r in rows)
    return {
        "n_prompts": len(rows),
        "new_tokens": toks,
        "seconds": secs,
        "tokens_per_s": toks / secs if secs else 0.0,
        # our engine times its prefill apart (the target's pass, plus an EAGLE head's): tokens/s of the
        # rounds alone, where a method differs (HF peers time generate() whole: None)
        "prefill_seconds": prefill if rounds else None,
        "decode_tokens_per_s": toks / (secs - prefill) if rounds and secs > prefill else None,
        "tau": (sum(len(r["accept_lens"]) and r["n_tokens"] for r in rows) / sum(rounds)) if rounds else None,
        "alpha_by_depth": alpha_by_depth(acc, dep),
        # where a round's time goes (our engine only): drafting, the target pass + acceptance, the rest
        **({"per_round_ms": {
            "draft": 1000 * sum(r["draft_s"] for r in rows) / sum(rounds),
            "verify": 1000 * sum(r["verify_s"] for r in rows) / sum(rounds),
            "other": 1000 * (secs - sum(r["draft_s"] + r["verify_s"] + r.get("prefill_s", 0.0) for r in rows)) / sum(rounds),
            "prefill": 1000 * sum(r.get("prefill_s", 0.0) for r in rows) / sum(rounds),
            "nodes": sum(r["nodes"] for r in rows) / sum(rounds),
        }} if rounds else {}),
    }


# ----------------------------------------------------------------------------- main
def run(args) -> dict:
    if args.batch:
        return run_batched(args)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in ENGINE_METHODS and m not in PEER_METHODS]
    if bad:
        raise SpecVizError(f"Unknown methods {bad}; choose from {', '.join([*ENGINE_METHODS, *PEER_METHODS])}.")
    skipped = {}
    wanted = [m for m in methods if m in LLAMACPP_METHODS]
    if wanted:
        ok, why = llamacpp.available()
        if not ok:
            skip(skipped, wanted, why)
            methods = [m for m in methods if m not in wanted]
    if not methods:
        raise SpecVizError(f"No method left to run: {'; '.join(sorted(set(skipped.values())))}.")
    if args.threads:
        torch.set_num_threads(args.threads)
    params = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    prompts = load_prompts(args.prompts, args.limit)
    report = {
        "settings": {k: v for k, v in vars(args).items()},
        "machine": None,  # filled once a target has loaded (the block kernel's width is known then)
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "by_dtype": {},
        "skipped": skipped,  # method -> why it did not run (an optional peer whose package is missing)
    }
    for dname in args.dtype.split(","):
        dtype = DTYPES[dname]
        target = load_target(args.model, dtype=dtype, device=args.device, block_weights=args.weights == "blocks")
        print(f"{dname}: target runs on {target.model.kernel_note}", file=sys.stderr)
        report["machine"] = machine()
        hf = load_hf(target, dtype, "hf-assisted" in methods) if set(methods) & set(HF_METHODS) else None
        ids = [p["ids"] if p.get("ids") else target.tokenizer.chat_ids(p["prompt"]) for p in prompts]
        peers = llamacpp_peers(methods, target, params, ids, args, skipped)
        run_methods = [m for m in methods if m not in LLAMACPP_METHODS or m in peers]
        runners = {m: Runner(m, target, params, hf, args.seed, tree=args.tree, draw=args.draw, peer=peers.get(m))
                   for m in run_methods}
        for m, r in runners.items():
            if r.tree:
                print(f"{m}: tree {json.dumps(r.tree)}", file=sys.stderr)
        # warm-up: one short run of each method
        for r in runners.values():
            r.run(ids[0], 8)
        rows = defaultdict(list)
        outputs = defaultdict(list)
        for i, p in enumerate(tqdm(prompts, desc=f"bench {dname}", file=sys.stderr)):
            for m, r in runners.items():  # interleave methods: drift in machine speed hits all alike
                toks, secs, rounds, acc, depths, trs = r.run(ids[i], args.max_new_tokens)
                outputs[m].append(toks)
                rows[m].append(
                    {"category": p["category"], "n_tokens": len(toks), "seconds": secs, "rounds": rounds, "accept_lens": acc,
                     "depths": depths, "draft_s": sum(t.draft_time_s for t in trs), "verify_s": sum(t.verify_time_s for t in trs),
                     "nodes": sum(len(t.nodes) for t in trs), "prefill_s": r.last_prefill_s}
                )
        res = {}
        for m in run_methods:
            s = summarise(rows[m])
            cats = sorted({r["category"] for r in rows[m]})
            s["by_category"] = {c: summarise([r for r in rows[m] if r["category"] == c]) for c in cats}
            if params.greedy and "vanilla" in outputs:
                s["identical_to_vanilla"] = all(
                    _same(a, b, target.eos_ids) for a, b in zip(outputs[m], outputs["vanilla"])
                )
            if runners[m].tree:
                s["tree"] = runners[m].tree
            if m in peers:
                s.update(llamacpp_detail(peers[m], prompts, rows[m], outputs, m, target.eos_ids, params.greedy))
            res[m] = s
        for m, s in res.items():
            for key, base in (("speedup_vs_vanilla", "vanilla"), ("speedup_vs_hf", "hf")):
                if base in res:
                    s[key] = s["tokens_per_s"] / res[base]["tokens_per_s"]
                    for c, cs in s["by_category"].items():
                        cs[key] = cs["tokens_per_s"] / res[base]["by_category"][c]["tokens_per_s"]
            if "vanilla" in res:
                for cs, vs in [(s, res["vanilla"]), *((s["by_category"][c], res["vanilla"]["by_category"][c]) for c in s["by_category"])]:
                    if cs.get("decode_tokens_per_s") and vs.get("decode_tokens_per_s"):
                        cs["decode_speedup_vs_vanilla"] = cs["decode_tokens_per_s"] / vs["decode_tokens_per_s"]
        if "vanilla" in res and res["vanilla"].get("prefill_seconds"):
            v = res["vanilla"]  # prefill is the same pass for every method: the whole-run speedup cannot pass this
            v["prefill_share"] = v["prefill_seconds"] / v["seconds"]
            v["speedup_ceiling"] = v["seconds"] / v["prefill_seconds"]
        entry = {"methods": res, "weights": target.model.kernel_note}
        if args.forward_curve:
            entry["forward_ms"] = {n: 1000 * t for n, t in forward_curve(target.model).items()}
            entry["weight_floor_ms"] = 1000 * weight_floor(target.model)
        report["by_dtype"][dname] = entry
        print_table(dname, entry)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2))
        print(f"wrote {args.out}")
    return report


def run_batched(args) -> dict:
    """`--batch B1,B2,...`: batched rounds of our engine methods (specviz.bench.batched)."""

    batched.parse_batches(args.batch)
    for spec in args.methods.split(","):  # before loading anything
        if spec.strip():
            batched.parse_method(spec.strip())
    if "," in args.dtype:
        raise SpecVizError("--batch runs one dtype at a time.")
    if args.threads:
        torch.set_num_threads(args.threads)
    prompts = load_prompts(args.prompts, args.limit)
    report = {"settings": dict(vars(args)), "machine": None,
              "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "kind": "batch"}
    target = load_target(args.model, dtype=DTYPES[args.dtype], device=args.device,
                         block_weights=args.weights == "blocks")
    print(f"{args.dtype}: target runs on {target.model.kernel_note}", file=sys.stderr)
    report["machine"] = machine()
    report["weights"] = target.model.kernel_note
    ids = [p["ids"] if p.get("ids") else target.tokenizer.chat_ids(p["prompt"]) for p in prompts]
    report["categories"] = [p["category"] for p in prompts]
    batched.run(args, target, ids, report)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2, default=str))
        print(f"wrote {args.out}")
    return report


def skip(skipped: dict, methods: list[str], why: str) -> None:
    """Leave optional peers out, with one line saying why (the other methods run on)."""
    for m in methods:
        skipped[m] = why
    print(f"{', '.join(methods)} skipped: {why}", file=sys.stderr)


def llamacpp_peers(methods, target, params, ids, args, skipped) -> dict:
    """The llama.cpp peers asked for, on the default GGUF, with our thread count and a context that fits
    the longest prompt plus its new tokens (PLD's drafts included)."""
    wanted = [m for m in methods if m in LLAMACPP_METHODS]
    if not wanted:
        return {}
    why = llamacpp.unsupported(target)
    if why:
        skip(skipped, wanted, why)
        return {}
    n_ctx = max(len(x) for x in ids) + max(args.max_new_tokens, 8) + llamacpp.PLD_TOKENS + 16
    threads = torch.get_num_threads()  # --threads, as set for our runtime above
    return {m: llamacpp.LlamaCppPeer(m, target, params, threads, n_ctx, seed=args.seed) for m in wanted}


def llamacpp_detail(peer, prompts, rows, outputs, m, eos, greedy) -> dict:
    """A llama.cpp peer's settings, and per prompt its tokens/s and output ids; at temperature 0 also how
    many prompts it answered exactly as our vanilla did (its numerics differ, so it may not)."""
    per = []
    for i, (p, r, toks) in enumerate(zip(prompts, rows, outputs[m])):
        row = {"id": p["id"], "category": p["category"], "n_tokens": r["n_tokens"], "seconds": r["seconds"],
               "tokens_per_s": r["n_tokens"] / r["seconds"] if r["seconds"] else 0.0,
               "first_token_s": r["prefill_s"], "ids": toks}  # first_token_s: prefill and the first token
        if greedy and "vanilla" in outputs:
            row.update(llamacpp.compare(outputs["vanilla"][i], toks, eos))
        per.append(row)
    out = {"llamacpp": peer.describe, "per_prompt": per}
    if per and "identical_to_vanilla" in per[0]:
        n_same = sum(r["identical_to_vanilla"] for r in per)
        out["vanilla_match"] = {
            "identical_prompts": n_same,
            "n_prompts": len(per),
            "fraction": n_same / len(per),
            # of vanilla's tokens, the share llama.cpp reproduced before its first difference
            "common_prefix_fraction": sum(r["common_prefix"] for r in per) / max(1, sum(len(v) for v in outputs["vanilla"])),
        }
    return out


def _same(a: list[int], b: list[int], eos: set[int]) -> bool:
    """HF keeps padding after EOS out of our lists; compare up to and including EOS."""
    def cut(x):
        for j, t in enumerate(x):
            if t in eos:
                return x[: j + 1]
        return x

    return cut(a) == cut(b)


def print_table(dname: str, entry: dict) -> None:
    res = entry["methods"]
    print(f"\n== {dname} ({entry.get('weights', 'dense weights')}) ==")
    print(f"{'method':12} {'tok/s':>8} {'tau':>6} {'vs vanilla':>10} {'decode':>7} {'vs hf':>7} {'identical':>9}  alpha by depth")

    def ratio(s, key):
        return f"{s[key]:.2f}x" if key in s else "-"

    for m, s in res.items():
        tau = f"{s['tau']:.2f}" if s.get("tau") else "-"
        ident = str(s.get("identical_to_vanilla", "-"))
        if "vanilla_match" in s:  # a llama.cpp peer: how many prompts matched, not just whether all did
            ident = f"{s['vanilla_match']['identical_prompts']}/{s['vanilla_match']['n_prompts']}"
        alpha = " ".join(f"{a:.2f}" for a in s["alpha_by_depth"][:6])
        print(f"{m:12} {s['tokens_per_s']:8.2f} {tau:>6} {ratio(s, 'speedup_vs_vanilla'):>10} "
              f"{ratio(s, 'decode_speedup_vs_vanilla'):>7} {ratio(s, 'speedup_vs_hf'):>7} {ident:>9}  {alpha}")
        if len(s["by_category"]) > 1:
            for c, cs in s["by_category"].items():
                ctau = f"{cs['tau']:.2f}" if cs.get("tau") else "-"
                print(f"  {c:10} {cs['tokens_per_s']:8.2f} {ctau:>6} {ratio(cs, 'speedup_vs_vanilla'):>10} "
                      f"{ratio(cs, 'decode_speedup_vs_vanilla'):>7}")
    for m, s in res.items():
        if "vanilla_match" in s and s["vanilla_match"]["fraction"] < 1:
            print(f"({m}: llama.cpp's own numerics; its greedy output matched vanilla's on "
                  f"{s['vanilla_match']['identical_prompts']}/{s['vanilla_match']['n_prompts']} prompts and "
                  f"{100 * s['vanilla_match']['common_prefix_fraction']:.0f}% of vanilla's tokens before a first difference.)")
    v = res.get("vanilla", {})
    if "speedup_ceiling" in v:
        print(f"('decode': tokens/s of the rounds alone. Prefill, the same pass for every method, is "
              f"{100 * v['prefill_share']:.0f}% of vanilla's time: no method can run these prompts more than "
              f"{v['speedup_ceiling']:.2f}x faster than vanilla.)")
    if "forward_ms" in entry:
        curve = ", ".join(f"{n} tok: {ms:.1f} ms" for n, ms in entry["forward_ms"].items())
        print(f"target forward after 300 tokens: {curve}")
        fl = entry["weight_floor_ms"]
        one = entry["forward_ms"][1]
        print(f"weight-read floor (bare matmuls, 1 token): {fl:.1f} ms; one decode pass = {one / fl:.2f}x the floor")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specviz.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--methods", default="vanilla,hf")
    ap.add_argument("--prompts", default="builtin", help="Spec-Bench-style JSONL, 'humaneval', 'heldout' or 'builtin'")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--dtype", default="fp32", help="fp32, bf16 or both: fp32,bf16")
    ap.add_argument("--model", default=None, help="model folder or cached Hub id (default: SmolLM2)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--weights", default="blocks", choices=["blocks", "dense"],
                    help="our runtime's fp32 weights: the GGUF's blocks (default) or dense like HF")
    ap.add_argument("--forward-curve", action="store_true", help="also time 1/4/16/64-token passes")
    ap.add_argument("--tree", default="auto", choices=["auto", "paper"],
                    help="EAGLE/Medusa tree size: tuned for this device (auto) or the papers' fixed trees")
    ap.add_argument("--draw", default="", choices=["", "top", "sample"],
                    help="EAGLE-2/3 drafts at T > 0: top-k, or drawn from q (default: drawn for tuned trees)")
    ap.add_argument("--batch", default="",
                    help="batch sizes (e.g. 1,2,4,8): batched rounds of engine methods (name@paper: the papers' tree)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    try:
        for d in args.dtype.split(","):
            if d not in DTYPES:
                raise SpecVizError(f"--dtype must be fp32 or bf16 (or both), got {d!r}.")
        run(args)
    except SpecVizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
