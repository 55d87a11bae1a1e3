"""Shared fixtures: the default model is loaded once per test session (cached on disk)."""

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
torch.manual_seed(0)


@pytest.fixture(scope="session")
def target():
    from specviz.target import load_target

    return load_target(dtype=torch.float32, device="cpu")


@pytest.fixture(scope="session")
def hf_model(target):
    """Hugging Face's own Llama on the very same weights: the reference for exactness."""
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(str(target.folder), dtype=torch.float32).eval()
