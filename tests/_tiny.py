"""A tiny random Llama target and a tiny regenerated data set, for fast head/trainer/engine tests.

Tests get these builders through the fixtures of the same names in conftest.py.
"""

from __future__ import annotations

import torch

from specviz.runtime.config import ModelConfig
from specviz.core.target import TargetModel


def tiny_config(hidden=64, vocab=128, layers=8) -> ModelConfig:
    return ModelConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, n_layers=layers,
                       n_heads=4, n_kv_heads=2, head_dim=hidden // 4, rope_theta=10000.0, tie_embeddings=True,
                       eos_token_ids=(1,))


def tiny_target(seed=0, device="cpu", dtype=torch.float32, **kw) -> TargetModel:
    """Random weights drawn on the CPU (the same model whatever the device), then moved to `device`."""
    cfg = tiny_config(**kw)
    g = torch.Generator().manual_seed(seed)
    H, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    kv = cfg.n_kv_heads * cfg.head_dim
    r = lambda *s: torch.randn(*s, generator=g) * 0.08
    sd = {"embed_tokens.weight": torch.randn(V, H, generator=g), "norm.weight": torch.ones(H)}
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        sd.update({p + "input_layernorm.weight": torch.ones(H), p + "post_attention_layernorm.weight": torch.ones(H),
                   p + "self_attn.q_proj.weight": r(H, H), p + "self_attn.k_proj.weight": r(kv, H),
                   p + "self_attn.v_proj.weight": r(kv, H), p + "self_attn.o_proj.weight": r(H, H),
                   p + "mlp.gate_proj.weight": r(I, H), p + "mlp.up_proj.weight": r(I, H),
                   p + "mlp.down_proj.weight": r(H, I)})
    return TargetModel(cfg, sd, dtype=dtype, device=device, name="tiny")


def tiny_data(folder, model: TargetModel, n_train=16, n_held=8, new=16, seed=0):
    from specviz.train.data import GenConfig, generate_batch, save_shard

    taps = tuple(model.cfg.eagle3_layers()) + ("final",)
    g = torch.Generator().manual_seed(seed)
    cfg = GenConfig(max_new_tokens=new, batch=8, topk=8)
    idx = 0
    for split, n in (("heldout", n_held), ("train", n_train)):
        for b0 in range(0, n, 8):
            prompts = [torch.randint(2, model.cfg.vocab_size, (int(torch.randint(4, 12, (1,), generator=g)),),
                                     generator=g).tolist() for _ in range(min(8, n - b0))]
            temps = [0.0 if i % 2 == 0 else 0.8 for i in range(len(prompts))]
            seqs = generate_batch(model, prompts, temps, cfg, {1}, taps, g)
            save_shard(folder / f"{split}-{idx:05d}.safetensors", seqs, taps)
            idx += 1
    return folder


class TinyTokenizer:
    eos_token = None

    def token_text(self, t):
        return f"<{int(t)}>"

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(str(int(t)) for t in ids)

    def encode(self, text, add_special_tokens=False):
        return [int(x) for x in text.split()]

    def chat_ids(self, prompt):
        return self.encode(prompt)

    def token_to_id(self, tok):
        return None


def tiny_target_bundle(seed=0, device="cpu", **kw):
    """A `Target` (model + tokenizer) around the tiny model, for engine tests."""
    from specviz.core.target import Target

    return Target(model=tiny_target(seed, device=device, **kw), tokenizer=TinyTokenizer(), folder=None)
