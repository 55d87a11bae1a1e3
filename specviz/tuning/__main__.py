"""`python -m specviz.tuning profile|show`: calibrate the shipped heads, or print this machine's best trees."""

from __future__ import annotations

import argparse
import sys

import torch
from tqdm import tqdm

from .. import SpecVizError
from ..examples import EXAMPLE_PROMPTS
from ..methods import head_dir, make_drafter, tune
from ..core.target import load_target
from . import PROFILE_FILE, cost_file, collect_profile, save_profile


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specviz.tuning", description="Device-tuned draft trees: profile the heads, or show this machine's best trees.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("profile", help="calibrate the shipped heads' acceptance profiles (greedy, fp32)")
    p.add_argument("--methods", default="eagle1,eagle2,eagle3,medusa")
    p.add_argument("--limit", type=int, default=16, help="built-in prompts to calibrate on")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--threads", type=int, default=0)
    c = sub.add_parser("show", help="measure (or read) this device's costs and print the best trees")
    c.add_argument("--methods", default="eagle1,eagle2,eagle3,medusa")
    c.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    c.add_argument("--remeasure", action="store_true")
    c.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        if args.cmd == "profile":
            target = load_target(dtype=torch.float32)
            prompts = EXAMPLE_PROMPTS[: args.limit]
            for m in args.methods.split(","):
                bar = tqdm(total=len(prompts), desc=f"profile {m}", file=sys.stderr)
                prof = collect_profile(target, make_drafter(m, target, tree_size="paper"), prompts, args.max_new_tokens,
                                       progress=lambda i, n: bar.update(1))
                bar.close()
                f = save_profile(head_dir(m, target), prof)
                print(f"{m}: {prof['samples']} positions -> {f}")
        else:
            target = load_target(dtype={"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype])
            if args.remeasure:
                cost_file(target.model).unlink(missing_ok=True)
            for m in args.methods.split(","):
                best = tune(m, target, log=lambda s: print(s, file=sys.stderr))
                if best is None:
                    print(f"{m}: no {PROFILE_FILE} for the shipped head; run `python -m specviz.tuning profile` first")
                    continue
                for b, when in ((best, "greedy"), (best.get("sampled"), "T > 0 (timed at T = 1)")):
                    if b is None:
                        continue
                    shape = f"depth {b['depth']}, " if "depth" in b else ""
                    size = f"paths at least {b['min_prob']:.2f} likely" if b.get("min_prob") else f"{b['total_tokens']} nodes"
                    print(f"{m} {when}: best {shape}{size}: measured tau {b['tau']:.2f}, {b['tok_s']:.1f} tok/s "
                          f"(vanilla {b['vanilla_tok_s']:.1f}, x{b['speedup']:.2f} paired by prompt); the model had "
                          f"tau {b['model_tau']:.2f}, {1000 * b['seconds']:.1f} ms/round -> {b['model_tok_s']:.1f} tok/s")
            print(f"costs cached in {cost_file(target.model)}")
    except SpecVizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


raise SystemExit(main())
