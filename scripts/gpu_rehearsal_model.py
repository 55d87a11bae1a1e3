"""A tiny random Llama checkpoint with every kind of head, for rehearsing the GPU run on any machine.

`scripts/gpu_run.sh --rehearse` runs the GPU run's every step on this model instead of SmolLM2: it
loads through the same code paths as a user's own checkpoint (a folder with config.json,
model.safetensors, tokenizer.json and a chat template), its heads sit in a folder laid out like
assets/heads (found through $SPECVIZ_HEADS), and nothing needs to be carried or downloaded: the
tokenizer is a byte-level one built here (every text encodes, as with the real one).

    python scripts/gpu_rehearsal_model.py OUT     # OUT/model/specviz-rehearsal, OUT/heads/specviz-rehearsal/*
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specviz.heads import Eagle1Head, Eagle3Head, MedusaHeads, head_config_from_target  # noqa: E402
from specviz.heads.io import save_head  # noqa: E402
from specviz.runtime.loading import read_config  # noqa: E402

NAME = "specviz-rehearsal"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SHAPE = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16)
CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def write_tokenizer(folder: Path) -> int:
    """A byte-level BPE without merges (one token per byte) plus the chat markers; returns its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        dict(bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|im_end|>", unk_token="<|endoftext|>")))
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return tok.get_vocab_size(with_added_tokens=True)


def write_llama(folder: Path, seed: int, eos: int, noise_of: dict | None = None) -> dict:
    """config.json + model.safetensors of a random Llama of SHAPE (Hugging Face names); returns the weights."""
    folder.mkdir(parents=True, exist_ok=True)
    H, I, V, L = (SHAPE[k] for k in ("hidden_size", "intermediate_size", "vocab_size", "num_hidden_layers"))
    kv = SHAPE["num_key_value_heads"] * SHAPE["head_dim"]
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g) * 0.08  # noqa: E731
    sd = {"model.embed_tokens.weight": torch.randn(V, H, generator=g), "model.norm.weight": torch.ones(H)}
    for i in range(L):
        p = f"model.layers.{i}."
        sd.update({p + "input_layernorm.weight": torch.ones(H), p + "post_attention_layernorm.weight": torch.ones(H),
                   p + "self_attn.q_proj.weight": r(H, H), p + "self_attn.k_proj.weight": r(kv, H),
                   p + "self_attn.v_proj.weight": r(kv, H), p + "self_attn.o_proj.weight": r(H, H),
                   p + "mlp.gate_proj.weight": r(I, H), p + "mlp.up_proj.weight": r(I, H),
                   p + "mlp.down_proj.weight": r(H, I)})
    if noise_of is not None:  # a draft model: the target's weights, perturbed (drafts often but not always right)
        sd = {k: v + 0.02 * torch.randn(v.shape, generator=g) if k.endswith("proj.weight") else v.clone()
              for k, v in noise_of.items()}
    save_file({k: v.contiguous() for k, v in sd.items()}, str(folder / "model.safetensors"))
    cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu", rms_norm_eps=1e-5,
               rope_theta=10000.0, tie_word_embeddings=True, max_position_embeddings=4096, bos_token_id=eos - 1,
               eos_token_id=eos, pad_token_id=eos, **SHAPE)
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    return sd


def _random_init(module: torch.nn.Module, seed: int, scale: float):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            r = torch.randn(p.shape, generator=g)
            p.copy_(r * scale / p.shape[1] ** 0.5 if p.dim() > 1 else (1.0 if "norm" in name else 0.0) + 0.1 * r)
    return module


def build(out: Path) -> tuple[Path, Path]:
    """Write the model and its heads under `out`; returns (model folder, heads root for $SPECVIZ_HEADS)."""
    out = Path(out)
    model_dir, heads = out / "model" / NAME, out / "heads"
    model_dir.mkdir(parents=True, exist_ok=True)
    n_tok = write_tokenizer(model_dir)
    assert n_tok <= SHAPE["vocab_size"], n_tok
    eos = n_tok - 1  # <|im_end|>, the last special added
    sd = write_llama(model_dir, seed=1, eos=eos)
    write_llama(heads / NAME / "sps", seed=2, eos=eos, noise_of=sd)
    cfg = read_config(model_dir)
    e1 = _random_init(Eagle1Head(head_config_from_target(cfg, bias=True)), 3, 3.0)
    e3 = _random_init(Eagle3Head(head_config_from_target(cfg, draft_vocab_size=192)), 4, 3.0)
    e3.set_vocab(torch.arange(192))
    medusa = _random_init(MedusaHeads(dict(hidden_size=cfg.hidden_size, vocab_size=cfg.vocab_size,
                                           medusa_num_heads=3, medusa_num_layers=1)), 5, 0.3)
    for name, head in (("eagle1", e1), ("eagle3", e3), ("medusa", medusa)):
        save_head(head, heads / NAME / name, dtype=torch.float32)
    return model_dir, heads


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    m, h = build(Path(sys.argv[1]))
    print(f"model {m}\nheads {h}")
