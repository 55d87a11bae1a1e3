"""The model hyper-parameters the runtime needs, read from a Hugging Face `config.json`.

Only Llama-family decoders are supported (Llama, SmolLM2, Mistral without sliding window,
Qwen2 with its q/k/v biases): they share one forward pass, so one runtime serves them all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import SpecVizError

SUPPORTED_ARCHITECTURES = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"}
SUPPORTED_MODEL_TYPES = {"llama", "mistral", "qwen2"}


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    tie_embeddings: bool = False
    attention_bias: bool = False
    max_position: int = 4096
    rope_scaling: dict | None = None
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = field(default_factory=tuple)
    model_type: str = "llama"

    @classmethod
    def from_hf_dict(cls, d: dict) -> "ModelConfig":
        """Build from a `config.json` dict; refuse architectures the runtime cannot run."""
        model_type = d.get("model_type", "")
        archs = set(d.get("architectures") or [])
        if model_type not in SUPPORTED_MODEL_TYPES and not (archs & SUPPORTED_ARCHITECTURES):
            raise SpecVizError(
                f"Unsupported architecture {sorted(archs) or model_type!r}: SpecViz runs "
                f"Llama-family decoders only ({', '.join(sorted(SUPPORTED_ARCHITECTURES))}). "
                "Choose a Llama, SmolLM2, Mistral or Qwen2 checkpoint."
            )
        if d.get("sliding_window") and d.get("use_sliding_window", model_type == "mistral"):
            if model_type == "mistral":
                raise SpecVizError("Mistral checkpoints with sliding-window attention are not supported.")
        n_heads = d["num_attention_heads"]
        hidden = d["hidden_size"]
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        theta = d.get("rope_theta", rope.get("rope_theta", 10000.0))
        scaling = dict(rope) if rope.get("rope_type", rope.get("type", "default")) != "default" else None
        if scaling and scaling.get("rope_type", scaling.get("type")) != "llama3":
            raise SpecVizError(f"RoPE scaling {scaling!r} is not supported (only 'default' and 'llama3').")
        eos = d.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else ((eos,) if eos is not None else ())
        return cls(
            vocab_size=d["vocab_size"],
            hidden_size=hidden,
            intermediate_size=d["intermediate_size"],
            n_layers=d["num_hidden_layers"],
            n_heads=n_heads,
            n_kv_heads=d.get("num_key_value_heads") or n_heads,
            head_dim=d.get("head_dim") or hidden // n_heads,
            rope_theta=float(theta),
            rms_eps=float(d.get("rms_norm_eps", 1e-5)),
            tie_embeddings=bool(d.get("tie_word_embeddings", False)),
            attention_bias=bool(d.get("attention_bias", model_type == "qwen2")),
            max_position=int(d.get("max_position_embeddings", 4096)),
            rope_scaling=scaling,
            bos_token_id=d.get("bos_token_id"),
            eos_token_ids=eos_ids,
            model_type=model_type or "llama",
        )

    def eagle3_layers(self) -> tuple[int, int, int]:
        """The target layers whose *inputs* EAGLE-3 fuses: low, mid and high."""
        n = self.n_layers
        return (2, n // 2, n - 3)


def rope_inv_freq(cfg: ModelConfig):
    """Inverse RoPE frequencies exactly as Hugging Face computes them (incl. Llama-3 scaling)."""
    import torch  # config.py stays torch-free at import: loading and settings read configs without torch

    dim = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    s = cfg.rope_scaling
    if not s:
        return inv
    factor, low, high = s["factor"], s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0)
    old_ctx = s["original_max_position_embeddings"]
    low_wl, high_wl = old_ctx / low, old_ctx / high
    wavelen = 2 * math.pi / inv
    inv_l = torch.where(wavelen > low_wl, inv / factor, inv)
    smooth = (old_ctx / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
    is_medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
    return torch.where(is_medium, smoothed, inv_l)
