"""Per-browser-session settings: the language and the sidebar's values, read from st.session_state."""

from __future__ import annotations

import streamlit as st
import torch

from ..i18n import t
from ..core.sampling import SamplingParams

DEFAULTS = {
    "lang": "en",
    "dtype": "bf16" if torch.cuda.is_available() else "fp32",  # each device's fast exact-enough precision
    "method": "eagle3",  # the best shipped method: its draft tree branches (defaults that teach)
    "temperature": 0.0,
    "top_k": 0,
    "top_p": 1.0,
    "seed": 0,
    "max_new": 48,
    "depth": 6,  # the papers' dynamic-tree size (EAGLE-2/3: depth 6, 24 nodes), so the tree shows branching
    "tree_topk": 4,
    "total_tokens": 24,
    # keep draft paths at least this likely (tree_build.build_dynamic_tree): on a CPU an extra tree token
    # costs ~1/4 of a pass, so only paths the head is fairly sure of pay (the shipped EAGLE-3 head:
    # predicted ~1.04x vanilla at depth 6 with 0.25, 0.22x with the papers' 24 nodes; measured 1.15x
    # and 0.43x on the default prompt, 48 tokens, idle); a GPU verifies the
    # whole tree for the price of one token, so there the papers' fixed-size tree (0)
    "min_prob": 0.0 if torch.cuda.is_available() else 0.25,
    # EAGLE-2/3 at T > 0: False keeps EAGLE's top-k drafts (what the lessons show: a draft x is kept with
    # probability p(x)); True draws them from q (kept with probability min(1, p/q): more often)
    "draw_sample": False,
    "pld_ngram": 3,
    # 4, not 8: on the first 12 example prompts (greedy, 48 tokens, 1 thread) PLD committed the same
    # tokens per round with 4 as with 8 (it rarely matches more) at 14-45% less time per token
    "pld_tokens": 4,
}


def lang() -> str:
    return st.session_state.get("lang", "en")


def tr(key: str, **fmt) -> str:
    return t(key, lang(), **fmt)


def settings() -> dict:
    """The current sidebar settings (defaults where a widget has not rendered yet)."""
    return {k: st.session_state.get(k, v) for k, v in DEFAULTS.items()}


def sampling_params(s: dict) -> SamplingParams:
    return SamplingParams(temperature=float(s["temperature"]), top_k=int(s["top_k"]), top_p=float(s["top_p"]))
