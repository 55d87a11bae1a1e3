"""Head checkpoints: `config.json` + `model.safetensors` in the public EAGLE / Medusa layouts.

The loader recognises the method from the keys (`midlayer.*` -> EAGLE-3, `layers.0.*` -> EAGLE-1,
`{i}.0.linear.*` -> Medusa), reads official EAGLE checkpoints too (`pytorch_model.bin`, a stray
`embed_tokens.weight`, the unused `layers.0.input_layernorm.weight` of EAGLE-1 are tolerated),
and refuses a head whose hidden size or vocabulary does not fit the target.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .. import SpecVizError
from ..runtime.blockweights import speed_up_linears
from .eagle import Eagle1Head, Eagle3Head
from .medusa import MedusaHeads

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "heads"
HEADS_ENV = "SPECVIZ_HEADS"  # another folder laid out like assets/heads (a GPU machine's staged copy, a rehearsal)
_IGNORED = ("embed_tokens.weight", "layers.0.input_layernorm.weight")


def shipped_head_dir(model_name: str, method: str) -> Path:
    """assets/heads/<model>/<method>, or the same under $SPECVIZ_HEADS when it is set."""
    root = Path(os.environ[HEADS_ENV]) if os.environ.get(HEADS_ENV) else ASSETS
    return root / model_name / method


def save_head(head, folder, dtype=torch.float16, extra: dict | None = None) -> Path:
    """Write `config.json` + `model.safetensors` (weights cast to `dtype`; d2t/t2d kept exact)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(head, MedusaHeads):
        sd = head.public_state()
    else:
        sd = head.state_dict()
    out = {}
    for k, v in sd.items():
        v = v.detach().cpu()
        out[k] = v.to(dtype).contiguous() if v.is_floating_point() else v.contiguous()
    cfg = dict(head.config)
    cfg["torch_dtype"] = str(dtype).replace("torch.", "")
    if extra:
        cfg.setdefault("specviz", {}).update(extra)
    tmp = folder / "model.safetensors.tmp"
    save_file(out, str(tmp), metadata={"format": "pt"})
    tmp.chmod(0o644)
    tmp.replace(folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder


def read_state(folder: Path) -> dict:
    files = sorted(folder.glob("*.safetensors"))
    try:
        if files:
            sd = {}
            for f in files:
                sd.update(load_file(str(f)))
            return sd
        bins = sorted(folder.glob("*.bin")) + sorted(folder.glob("*.pt"))
        if not bins:
            raise SpecVizError(f"No head weights in {folder}: expected model.safetensors or pytorch_model.bin.")
        sd = {}
        for f in bins:
            sd.update(torch.load(str(f), map_location="cpu", weights_only=True))
        return sd
    except SpecVizError:
        raise
    except Exception as e:
        raise SpecVizError(f"The head weights in {folder} are unreadable ({type(e).__name__}: {e}).") from e


def detect_method(sd: dict) -> str:
    if any(k.startswith("midlayer.") for k in sd):
        return "eagle3"
    if any(k.startswith("layers.0.") for k in sd) and "fc.weight" in sd:
        return "eagle1"
    if any(k.split(".")[0].isdigit() and ".linear." in k for k in sd):
        return "medusa"
    raise SpecVizError("Unrecognised head checkpoint: expected EAGLE-1 (layers.0.*), EAGLE-3 (midlayer.*) or Medusa keys.")


def load_head(folder, target_cfg=None, device=None, dtype=torch.float32, target=None):
    """Load a head folder; check it against `target_cfg` (a ModelConfig) and bind it to `target`.

    `target` (a TargetModel) supplies the embedding and LM head the head shares; the head goes
    to the target's device unless `device` says otherwise (default without a target: the CPU).
    """
    folder = Path(folder)
    if device is None:
        device = target.device if target is not None else "cpu"
    if not (folder / "config.json").is_file():
        raise SpecVizError(f"{folder} is not a head folder: it must hold config.json and the weights.")
    try:
        cfg = json.loads((folder / "config.json").read_text())
    except ValueError as e:
        raise SpecVizError(f"{folder}/config.json is not valid JSON: {e}") from e
    sd = {k: v for k, v in read_state(folder).items() if k not in _IGNORED}
    method = detect_method(sd)
    if target is not None and target_cfg is None:
        target_cfg = target.cfg
    H = cfg.get("hidden_size")
    if H is None:
        raise SpecVizError(f"{folder}/config.json has no hidden_size.")
    if method == "medusa":
        n = 1 + max(int(k.split(".")[0]) for k in sd)
        layers = 1 + max(int(k.split(".")[1]) for k in sd)
        cfg.setdefault("medusa_num_heads", n)
        cfg.setdefault("medusa_num_layers", layers)
        w = sd["0.0.linear.weight"]
        if w.shape[1] != H:
            raise SpecVizError(f"Medusa head weights are {tuple(w.shape)} but config says hidden_size {H}.")
    else:
        cfg.setdefault("vocab_size", target_cfg.vocab_size if target_cfg else None)
    if target_cfg is not None:
        if H != target_cfg.hidden_size:
            raise SpecVizError(
                f"The {method} head in {folder} was built for hidden size {H}, but the target has "
                f"{target_cfg.hidden_size}: this head belongs to another model. Pick the head trained for "
                "this target (or train one: python -m specviz.train)."
            )
        V = cfg.get("vocab_size")
        if method != "medusa" and V != target_cfg.vocab_size:
            raise SpecVizError(
                f"The {method} head in {folder} expects a vocabulary of {V} tokens, but the target has "
                f"{target_cfg.vocab_size}: the tokenizers differ, so this head cannot draft for it."
            )
        if method == "eagle3" and "t2d" in sd and sd["t2d"].numel() != target_cfg.vocab_size:
            raise SpecVizError(f"The EAGLE-3 head's t2d covers {sd['t2d'].numel()} tokens, the target has {target_cfg.vocab_size}.")
    if method == "eagle1":
        cfg.setdefault("bias", "fc.bias" in sd)
        head = Eagle1Head(cfg)
    elif method == "eagle3":
        if "draft_vocab_size" not in cfg:
            cfg["draft_vocab_size"] = sd["lm_head.weight"].shape[0]
        head = Eagle3Head(cfg)
        if sd["fc.weight"].shape[1] % 3:
            raise SpecVizError("EAGLE-3 fc.weight must take 3 x hidden inputs.")
        if "d2t" not in sd:  # full vocabulary head
            sd["d2t"] = torch.zeros(head.draft_vocab_size, dtype=torch.long)
            sd["t2d"] = torch.ones(head.m.vocab_size, dtype=torch.bool)
        sd["d2t"] = sd["d2t"].long()
        sd["t2d"] = sd["t2d"].bool()
    else:
        head = MedusaHeads(cfg)
        sd = {"heads." + k: v for k, v in sd.items()}
    missing, unexpected = head.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise SpecVizError(
            f"The {method} head in {folder} does not match its config: missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}."
        )
    head = head.to(device=device, dtype=dtype)
    if method == "eagle3":
        head.d2t = head.d2t.long()
        head.t2d = head.t2d.bool()
    if target is not None:
        head.bind(target.embed, target.lm_head, getattr(target, "lm_head_blocks", None))
        if getattr(target, "blocks", None) is not None:  # the target runs on GGUF blocks: draft on Q8_0 too
            speed_up_linears(head)
    head.eval()
    head.source = str(folder)
    return head
