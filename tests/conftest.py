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


@pytest.fixture
def pinned_costs(monkeypatch):
    """Pin the tree tuner to a cost table, so its choice is a pure function of the shipped profile:
    the timing of the shortlist is stood in for by the model's own predictions, and nothing is
    written to the user cache. `pinned_costs(costs)` returns a function giving a method's pick."""
    from specviz import tuning

    def pin(costs: dict):
        def predicted(target, drafter, profile, cands, prompts, max_new_tokens, params=None):
            vanilla = 1.0 / (float(costs.get("overhead", 0.0)) + tuning.interpolate(costs["forward"], 1))
            return ([dict(c, measured_tok_s=c["tok_s"], measured_tau=c["tau"], speedup=c["tok_s"] / vanilla) for c in cands],
                    dict(tok_s=vanilla))

        monkeypatch.setattr(tuning, "device_costs", lambda *a, **k: costs)
        monkeypatch.setattr(tuning, "time_candidates", predicted)
        monkeypatch.setattr(tuning, "_save_costs", lambda model, data: None)
        return lambda profile, method: max(tuning.shortlist(tuning.rank_trees(profile, costs, method)), key=lambda r: r["tok_s"])

    return pin
