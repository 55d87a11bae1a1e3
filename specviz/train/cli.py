"""`python -m specviz.train <command> ...`: build data, train heads, evaluate them."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from .. import SpecVizError
from ..loading import cache_root
from .data import GenConfig, build, default_data_dir
from .evaluate import main as eval_main
from .sps import train_sps
from .trainers import TrainConfig, train


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m specviz.train", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data", help="regenerate responses with the target and cache its hidden states")
    d.add_argument("--out", default=None)
    d.add_argument("--n-train", type=int, default=2000)
    d.add_argument("--n-heldout", type=int, default=64)
    d.add_argument("--batch", type=int, default=32)
    d.add_argument("--max-new-tokens", type=int, default=192)
    d.add_argument("--max-prompt-tokens", type=int, default=160)
    d.add_argument("--greedy-fraction", type=float, default=0.67)
    d.add_argument("--temperature", type=float, default=0.8)
    d.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    d.add_argument("--model", default=None)
    d.add_argument("--threads", type=int, default=0)
    for method in ("eagle3", "eagle1", "medusa"):
        t = sub.add_parser(method, help=f"train the {method} head on the cached data")
        t.add_argument("--data", default=None, help="data folder (default: the user cache)")
        t.add_argument("--out", default=None, help="where to export the head (default: <cache>/train/<method>/head)")
        t.add_argument("--ckpt-dir", default=None, help="resumable checkpoints (default: <cache>/train/<method>)")
        t.add_argument("--minutes", type=float, default=30.0, help="wall-clock budget (the LR follows a cosine over it)")
        t.add_argument("--max-steps", type=int, default=0, help="step budget instead of time (0 = use --minutes)")
        t.add_argument("--lr", type=float, default=1e-3)
        t.add_argument("--max-tokens", type=int, default=4096, help="tokens per batch")
        t.add_argument("--ttt-steps", type=int, default=5, help="EAGLE-3 training-time-test unroll")
        t.add_argument("--draft-vocab", type=int, default=16384)
        t.add_argument("--medusa-heads", type=int, default=4)
        t.add_argument("--eval-every", type=int, default=0)
        t.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
        t.add_argument("--autocast", action="store_true", help="bf16 autocast")
        t.add_argument("--threads", type=int, default=0)
        t.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    t = sub.add_parser("sps", help="distil the small SpS draft model (a Hugging Face Llama)")
    t.add_argument("--data", default=None)
    t.add_argument("--out", default=None)
    t.add_argument("--ckpt-dir", default=None)
    t.add_argument("--minutes", type=float, default=10.0)
    t.add_argument("--max-steps", type=int, default=0)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--max-tokens", type=int, default=4096)
    t.add_argument("--hidden", type=int, default=256)
    t.add_argument("--layers", type=int, default=2)
    t.add_argument("--device", default=None)
    t.add_argument("--threads", type=int, default=0)
    t.add_argument("--fresh", action="store_true")
    e = sub.add_parser("eval", help="held-out per-step acceptance of the shipped heads and tau on the engine")
    e.add_argument("--methods", default="eagle1,eagle2,eagle3,medusa,sps")
    e.add_argument("--data", default=None)
    e.add_argument("--tau-prompts", default="", help="comma list: 'heldout' and/or a Spec-Bench-style JSONL file")
    e.add_argument("--limit", type=int, default=8)
    e.add_argument("--max-new-tokens", type=int, default=64)
    e.add_argument("--skip-per-step", action="store_true")
    e.add_argument("--out", default=None)
    e.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    if getattr(args, "threads", 0):
        torch.set_num_threads(args.threads)
    try:
        if args.cmd == "data":
            cfg = GenConfig(max_prompt_tokens=args.max_prompt_tokens, max_new_tokens=args.max_new_tokens,
                            batch=args.batch, greedy_fraction=args.greedy_fraction, temperature=args.temperature)
            t0 = time.time()
            out = build(args.out or default_data_dir(), args.n_train, args.n_heldout, cfg, dtype=args.dtype,
                        model_spec=args.model)
            print(f"data in {out} ({time.time() - t0:.0f} s)")
        elif args.cmd == "eval":
            eval_main(args)
        elif args.cmd == "sps":
            root = cache_root() / "train" / "sps"
            ck = args.ckpt_dir or str(root)
            if args.fresh and (Path(ck) / "last.pt").exists():
                (Path(ck) / "last.pt").unlink()
            out = args.out or str(root / "head")
            train_sps(str(args.data or default_data_dir()), out, ck, minutes=args.minutes, max_steps=args.max_steps,
                      lr=args.lr, max_tokens=args.max_tokens, hidden=args.hidden, layers=args.layers,
                      device=args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
            print(f"SpS model exported to {out}")
        else:
            root = cache_root() / "train" / args.cmd
            ck = args.ckpt_dir or str(root)
            if args.fresh and (Path(ck) / "last.pt").exists():
                (Path(ck) / "last.pt").unlink()
            cfg = TrainConfig(
                method=args.cmd, data_dir=str(args.data or default_data_dir()), out=str(args.out or root / "head"),
                ckpt_dir=ck, minutes=args.minutes, max_steps=args.max_steps, lr=args.lr, max_tokens=args.max_tokens,
                steps_ttt=args.ttt_steps, draft_vocab=args.draft_vocab, medusa_heads=args.medusa_heads,
                device=args.device or ("cuda" if torch.cuda.is_available() else "cpu"), autocast=args.autocast,
                eval_every=args.eval_every,
            )
            train(cfg)
            print(f"head exported to {cfg.out}")
    except SpecVizError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
