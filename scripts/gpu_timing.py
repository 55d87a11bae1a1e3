"""GPU timing that needs no checkpoint: a random model of SmolLM2-135M's shape, CUDA graphs on and off.

The GPU's work does not depend on the weights' values, so a random model of the default model's
shape times the target pass, the greedy loop and an EAGLE-3 round as the real one would; only
acceptance (tau) needs the real weights (that is specviz.bench). Run by scripts/gpu_run.sh
in its first command, before the 98 MB GGUF has arrived.

    python scripts/gpu_timing.py --out $OUT/gpu_timing.json          # on a CUDA machine
    python scripts/gpu_timing.py --device cpu --smoke                 # a quick run of the code path
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specviz.runtime.config import ModelConfig  # noqa: E402
from specviz.drafters.eagle import EagleDrafter  # noqa: E402
from specviz.core.engine import SpeculativeDecoder  # noqa: E402
from specviz.heads import Eagle3Head, head_config_from_target  # noqa: E402
from specviz.core.sampling import SamplingParams  # noqa: E402
from specviz.core.target import Target, TargetModel  # noqa: E402

SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, n_layers=30, n_heads=9, n_kv_heads=3,
               head_dim=64, rope_theta=100000.0, tie_embeddings=True)
SMOKE = dict(vocab_size=256, hidden_size=64, intermediate_size=128, n_layers=8, n_heads=4, n_kv_heads=2, head_dim=16,
             tie_embeddings=True)


class _Tok:
    eos_token = None

    def token_text(self, t):
        return str(int(t))

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(map(str, ids))

    def token_to_id(self, t):
        return None


def random_model(shape: dict, device, dtype) -> TargetModel:
    cfg = ModelConfig(**shape)
    g = torch.Generator().manual_seed(0)
    H, I, V, kv = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.n_kv_heads * cfg.head_dim
    r = lambda *s: torch.randn(*s, generator=g) * 0.02  # noqa: E731
    sd = {"embed_tokens.weight": r(V, H), "norm.weight": torch.ones(H)}
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        sd.update({p + "input_layernorm.weight": torch.ones(H), p + "post_attention_layernorm.weight": torch.ones(H),
                   p + "self_attn.q_proj.weight": r(H, H), p + "self_attn.k_proj.weight": r(kv, H),
                   p + "self_attn.v_proj.weight": r(kv, H), p + "self_attn.o_proj.weight": r(H, H),
                   p + "mlp.gate_proj.weight": r(I, H), p + "mlp.up_proj.weight": r(I, H), p + "mlp.down_proj.weight": r(H, I)})
    return TargetModel(cfg, sd, dtype=dtype, device=device, name="random-smollm2-shape")


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def forward_curve(model, sizes, context=300, repeats=7) -> dict:
    """Median ms of one target pass over n new tokens after `context` cached ones."""
    g = torch.Generator().manual_seed(1)
    V = model.cfg.vocab_size
    cache = model.new_cache(context + max(sizes) + 1)
    model(torch.randint(0, V, (1, context), generator=g), cache)
    cache.commit()
    out = {}
    for n in sizes:
        toks = torch.randint(0, V, (1, n), generator=g)
        times = []
        for _ in range(repeats + 2):  # the first two capture / warm up
            sync(model.device)
            t0 = time.perf_counter()
            model(toks, cache)
            sync(model.device)
            times.append(time.perf_counter() - t0)
            cache.truncate(context)
        out[n] = 1000 * statistics.median(times[2:])
    return out


def decode(target, drafter, prompt, new) -> dict:
    """ms per generated token and the per-round split, after one warm-up run."""
    for _ in range(2):
        dec = SpeculativeDecoder(target, drafter, SamplingParams(), seed=0, detail=False)
        dec.start(prompt, new)
        sync(target.model.device)
        t0 = time.perf_counter()
        res = dec.generate()
        sync(target.model.device)
        secs = time.perf_counter() - t0
    rounds = max(res.rounds, 1)
    return {"ms_per_token": 1000 * secs / max(len(res.tokens), 1), "tokens": len(res.tokens), "rounds": res.rounds,
            "draft_ms_per_round": 1000 * sum(t.draft_time_s for t in res.traces) / rounds,
            "verify_ms_per_round": 1000 * sum(t.verify_time_s for t in res.traces) / rounds,
            "nodes_per_round": sum(len(t.nodes) for t in res.traces) / rounds}


def set_graphs(model, head, on: bool):
    model.set_cuda_graphs(on)
    head.graphs = on


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, to check the code path")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    shape = SMOKE if args.smoke else SMOLLM2
    sizes = (1, 2, 4, 8, 16, 32, 64)
    report = {"what": "random weights of SmolLM2-135M's shape: timings only (no tau)" if not args.smoke else "smoke run",
              "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() and args.device == "cuda" else args.device,
              "torch": torch.__version__, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "by_dtype": {}}
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, shape["vocab_size"], (300,), generator=g).tolist()
    for name in args.dtypes.split(","):
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[name]
        model = random_model(shape, args.device, dtype)
        target = Target(model=model, tokenizer=_Tok(), folder=None)
        head = Eagle3Head(head_config_from_target(model.cfg))
        head = head.to(args.device, dtype).bind(model.embed, model.lm_head).eval()
        entry = {}
        for graphs in (False, True):
            set_graphs(model, head, graphs)
            key = "graphs" if graphs else "eager"
            entry[key] = {"forward_ms_after_300": forward_curve(model, sizes)}
            entry[key]["vanilla"] = decode(target, None, prompt, args.new_tokens)
            eagle3 = EagleDrafter(head, model, name="eagle3", tree="dynamic", depth=6, top_k=8, total_tokens=24)
            entry[key]["eagle3_d6_n24"] = decode(target, eagle3, prompt, args.new_tokens)
            print(name, key, json.dumps(entry[key]), flush=True)
        report["by_dtype"][name] = entry
        del model, target, head
        if args.device == "cuda":
            torch.cuda.empty_cache()
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
