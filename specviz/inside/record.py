"""Record what the Inside-the-drafter page draws, from the shipped heads on real rounds.

    python -m specviz.inside record [--prompts 16 --new 64]   # writes assets/inside/inside.json

The page shows these recordings at once and recomputes the single-prompt views live on a prompt
of the user's. Calibration rests on many rounds (every built-in prompt, greedy, the papers' trees);
the uncertainty view uses the EAGLE-1 ablation pair (`python -m specviz.train ablate`) when its heads
are in the cache, so the heads with and without the token had the same data, steps and init.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from ..core.engine import SpeculativeDecoder
from ..core.sampling import SamplingParams
from ..core.target import load_target
from ..drafters.lookup import stop_ids_of
from ..examples import EXAMPLE_PROMPTS
from ..heads.io import load_head, shipped_head_dir
from ..teaching.lesson import EAGLE2_PAPER, EAGLE3_PAPER, PROMPT_CODE, head_checksums
from ..runtime.loading import cache_root
from ..runtime.machine import machine
from ..methods import make_drafter
from . import expansion, feature, fusion, vocab

OUT = Path(__file__).resolve().parents[2] / "assets" / "inside" / "inside.json"
PAPER = {"eagle2": EAGLE2_PAPER, "eagle3": EAGLE3_PAPER}


def ablation_head(name: str, target):
    """A head of the ablation run in the user cache, or None when it was not trained here."""
    folder = cache_root() / "train" / "ablations" / name / "head"
    return load_head(folder, target=target.model) if (folder / "config.json").is_file() else None


def one_round_tree(target, method: str, prompt: str):
    """The draft tree of the first round on `prompt` (greedy, the paper's tree), with its candidates."""
    dec = SpeculativeDecoder(target, make_drafter(method, target, **PAPER[method]), SamplingParams(), detail=False)
    dec.start(prompt, 16)
    return dec.draft().tree


def expansion_view(target, method: str, prompt: str) -> dict:
    tree = one_round_tree(target, method, prompt)
    lv = expansion.levels(tree.candidates, PAPER[method]["total_tokens"], target.tokenizer.token_text)
    return dict(method=method, tree=PAPER[method], root=tree.tokens[0], root_text=target.tokenizer.token_text(tree.tokens[0]),
                levels=lv, summary=expansion.summary(lv))


def rounds(target, method: str, prompts: list[str], new: int, log=print) -> tuple[list[dict], list[tuple]]:
    """Greedy runs with the paper's tree: every round's trace, and (prompt ids, answer) per prompt."""
    drafter = make_drafter(method, target, **PAPER[method])
    traces, seqs = [], []
    for i, p in enumerate(prompts):
        dec = SpeculativeDecoder(target, drafter, SamplingParams(), detail=True)
        ids = dec.prompt_ids(p)
        res = dec.generate(ids, new)
        traces += [t.to_dict() for t in res.traces]
        seqs.append((ids, list(res.tokens)))
        log(f"{method}: prompt {i + 1}/{len(prompts)}, {len(res.traces)} rounds")
    return traces, seqs


def record(n_prompts: int = 16, new: int = 64, log=print) -> dict:
    torch.manual_seed(0)
    target = load_target()
    model, tok = target.model, target.tokenizer
    e1 = load_head(shipped_head_dir(model.name, "eagle1"), target=model)
    e3 = load_head(shipped_head_dir(model.name, "eagle3"), target=model)
    ids = tok.safe_chat_ids(PROMPT_CODE)
    with_tok, without_tok = ablation_head("eagle1", target), ablation_head("eagle1-no-token", target)
    pair = with_tok is not None and without_tok is not None
    at = feature.uncertain_position(model, tok.safe_chat_ids(EXAMPLE_PROMPTS[0]))
    out = dict(
        prompt=PROMPT_CODE,
        feature=feature.feature_chain(model, tok, e1, ids),
        uncertainty=dict(feature.uncertainty(model, tok, {"with_token": with_tok if pair else e1,
                                                          "without_token": without_tok}, at),
                         prompt=EXAMPLE_PROMPTS[0], context_text=tok.decode(at[len(tok.safe_chat_ids(EXAMPLE_PROMPTS[0])):]),
                         heads="pair" if pair else "shipped"),
        expansion=expansion_view(target, "eagle2", PROMPT_CODE),
        fusion=fusion.logit_lens(model, tok, e3, ids),
    )
    prompts = EXAMPLE_PROMPTS[:n_prompts]
    cal = {}
    for method in ("eagle2", "eagle3"):
        traces, seqs = rounds(target, method, prompts, new, log)
        cal[method] = expansion.calibration(traces)
        if method == "eagle3":
            out["vocab"] = vocab.coverage(e3, seqs, tok.token_text, stop_ids_of(target))
    out["calibration"] = dict(cal, prompts=len(prompts), new_tokens=new, trees=PAPER)
    out["recorded"] = dict(machine(), utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           command="python -m specviz.inside " + " ".join(sys.argv[1:]),
                           heads={**head_checksums(target, "eagle1"), **head_checksums(target, "eagle3")})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specviz.inside")
    ap.add_argument("command", choices=["record"])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    data = record(a.prompts, a.new)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(data, indent=1, ensure_ascii=False))
    print(f"recorded {a.out}")
    return 0
