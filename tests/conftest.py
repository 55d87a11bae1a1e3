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


@pytest.fixture(scope="session")
def vanilla_greedy(target):
    """Our vanilla greedy output for the first 50 example prompts x 128 tokens, computed once:
    the reference every greedy speculative method must reproduce token for token."""
    from specviz.engine import vanilla_generate
    from specviz.examples import EXAMPLE_PROMPTS

    return {p: vanilla_generate(target, p, 128).tokens for p in EXAMPLE_PROMPTS[:50]}
