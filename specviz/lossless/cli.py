"""`python -m specviz.lossless`: the check from the command line (last line PASS or FAIL, exit 0/1;
bad input exits 2)."""

from __future__ import annotations

import argparse
import math
import sys

import torch

from .. import SpecVizError, methods
from ..teaching.bugs import DEFAULT_BROKEN, POLICIES
from ..core.sampling import SamplingParams
from ..core.target import load_target
from .empirical import CheckResult, make_drafter, run_check, torch_threads
from .oracle import TargetOracle

# =============================================================================== command line
DEFAULT_PROMPT = "I flipped a coin and it landed on"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m specviz.lossless",
        description="Check that speculative sampling reproduces vanilla sampling: exact round "
        "distribution at the prompt, then a chi-square test of N samples of the first tokens.",
    )
    ap.add_argument("--method", default="toy-sps", help="toy-sps (sampled chain), toy-specinfer (sampled tree), "
                    "toy-topk (deterministic tree), or an engine method with its shipped weights: pld, sps, "
                    "medusa, eagle1, eagle2, eagle3; default toy-sps")
    ap.add_argument("--prompt", default=DEFAULT_PROMPT, help=f"prompt text (default {DEFAULT_PROMPT!r})")
    ap.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    ap.add_argument("--samples", type=int, default=10000)
    ap.add_argument("--horizon", type=int, default=3, help="tokens per sample (1-8)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--broken", nargs="?", const=DEFAULT_BROKEN, default=None, choices=list(POLICIES),
                    metavar="NAME", help=f"use a broken rule (negative control; bare: {DEFAULT_BROKEN}); "
                    f"one of {', '.join(POLICIES)}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--alpha", type=float, default=1e-3, help="fail when the p-value is at or below this")
    ap.add_argument("--draft-scale", type=float, default=None, help="toy drafters: logits divisor")
    ap.add_argument("--draft-noise", type=float, default=None, help="toy drafters: random bias strength")
    ap.add_argument("--model", default=None, help="target model (default: the bundled SmolLM2)")
    return ap


def _validate(args) -> SamplingParams:
    if not args.prompt or not args.prompt.strip():
        raise SpecVizError("The prompt is empty: pass some text with --prompt.")
    if args.temperature < 0 or math.isnan(args.temperature):
        raise SpecVizError(f"--temperature must be >= 0 (0 = greedy), got {args.temperature}.")
    if args.top_k is not None and args.top_k < 1:
        raise SpecVizError(f"--top-k must be a whole number >= 1 (leave it out to switch top-k off), got {args.top_k}.")
    if not (0 < args.top_p <= 1):
        raise SpecVizError(f"--top-p must lie in (0, 1], got {args.top_p}.")
    if args.samples < 1:
        raise SpecVizError(f"--samples must be >= 1, got {args.samples}.")
    if not 1 <= args.horizon <= 8:
        raise SpecVizError(f"--horizon must be between 1 and 8, got {args.horizon}.")
    if args.method not in methods.METHODS:
        raise SpecVizError(f"Unknown --method {args.method!r}; choose one of: {', '.join(methods.METHODS)}.")
    return SamplingParams(temperature=args.temperature, top_k=args.top_k or 0, top_p=args.top_p)


def format_result(r: CheckResult, text=None) -> list[str]:
    s = r.sampling
    text = text or (lambda toks: str(list(toks)))
    lines = [
        f"method {r.method} | rule variant {r.variant} | temperature {s['temperature']} top-k "
        f"{s['top_k'] or 'off'} top-p {s['top_p']} | {r.samples} samples x {r.horizon} tokens | seed {r.seed}",
    ]
    if r.exact_max_diff is None:
        lines.append("exact check: not computable here")
    else:
        lines.append(
            f"exact check (round at the prompt, first {r.exact_k} token(s), {r.drafted_at_prompt} drafted): "
            f"max |P_spec - P_target| = {r.exact_max_diff:.3g}"
        )
    lines.append(f"chi-square: {r.chi2:.2f} on {r.dof} dof ({r.bins} bins), p-value = {r.p_value:.3g} (fail at <= {r.alpha:g})")
    lines.append(f"total variation: {r.tv:.4f} (95% upper bound on the true distance {r.tv_bound:.4f})")
    lines.append(
        f"speculative: {r.tau:.2f} tokens/round, acceptance {r.acceptance:.2f}; {r.prefixes} target rows in "
        f"{r.forwards} forwards ({r.forward_seconds:.1f} s); {r.seconds:.1f} s total, {r.samples_per_s:.0f} samples/s"
    )
    top = sorted(set(r.vanilla) | set(r.speculative), key=lambda k: -(r.vanilla.get(k, 0) + r.speculative.get(k, 0)))[:5]
    for k in top:
        lines.append(f"  {text(k)!r:40.40} vanilla {r.vanilla.get(k, 0):6d}  speculative {r.speculative.get(k, 0):6d}")
    lines.extend(f"note: {n}" for n in r.notes)
    lines.append("PASS" if r.passed else "FAIL")
    return lines


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    try:
        params = _validate(args)
        target = load_target(args.model, dtype=torch.float32)
        ids = target.tokenizer.chat_ids(args.prompt) if args.chat else target.tokenizer.encode(args.prompt)
        if not ids:
            raise SpecVizError("The prompt encodes to no tokens.")
        variant = args.broken or "correct"
        with torch_threads(1):
            oracle = TargetOracle(target, ids, params)
            toy = {k: v for k, v in (("scale", args.draft_scale), ("noise", args.draft_noise)) if v is not None}
            if toy and args.method not in methods.TOY_METHODS:
                raise SpecVizError("--draft-scale/--draft-noise only apply to the toy drafters.")
            drafter = make_drafter(args.method, oracle, **toy)
        res = run_check(target, drafter, ids, params, args.samples, args.horizon, args.seed, variant,
                        alpha=args.alpha, oracle=oracle)
        res.method = args.method
    except (SpecVizError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    tok = target.tokenizer
    for line in format_result(res, lambda ks: "".join(tok.token_text(t) for t in ks)):
        print(line)
    return 0 if res.passed else 1


if __name__ == "__main__":
    sys.exit(main())
