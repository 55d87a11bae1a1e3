"""The methods the app offers, read from the one registry (`specviz.methods`): availability
(cached, without building a drafter), labels, and the sidebar's settings as drafter options."""

from __future__ import annotations

import streamlit as st

from .. import SpecVizError
from .. import methods as registry
from .state import DEFAULTS, tr

APP_METHODS = list(registry.ENGINE_METHODS)  # the sidebar's choices: the registry's engine methods, in its order
EAGLE = [m for m in APP_METHODS if m.startswith("eagle")]
BEST_FIRST = ["eagle3", "eagle2", "eagle1", "medusa", "sps", "pld", "vanilla"]  # the default: the first that runs


@st.cache_resource(ttl=120, show_spinner=False)
def method_status(method: str, dtype_name: str = "fp32") -> tuple[bool, str]:
    """(available, note key or message) from the registry, which reads the shipped head's
    config instead of building it. Cached for two minutes so a newly trained head shows up
    without restarting the app."""
    return registry.availability(method, None, dtype_name)


def best_available(dtype_name: str) -> str:
    return next(m for m in BEST_FIRST if method_status(m, dtype_name)[0])


def status_note(note: str) -> str:
    return tr(note) if note.startswith("note.") else note


def method_label(method: str) -> str:
    return tr("m." + method)


def tree_settings_for(method: str, s: dict) -> dict:
    """The sidebar's draft settings as the registry's drafter options for `method` (the registry
    says which settings apply to it); `s["tree_mode"] == "tuned"`: none for a tunable method, so
    the registry gives it the tree `make_drafter` below had tuned for this device."""
    spec = registry.get(method)
    if s.get("tree_mode") == "tuned" and spec.tunable:
        return {}
    applies = spec.sidebar
    if "pld_ngram" in applies:
        return {"max_ngram": int(s["pld_ngram"]), "min_ngram": 1, "num_tokens": int(s["pld_tokens"])}
    if "tree_topk" in applies:
        return {"depth": int(s["depth"]), "top_k": int(s["tree_topk"]), "total_tokens": int(s["total_tokens"]),
                "min_prob": float(s.get("min_prob", 0.0)), "draw": "sample" if s.get("draw_sample") else "top"}
    if "depth" in applies:  # a chain of drafts (SpS): its length
        return {"gamma": int(s["depth"])}
    if spec.tunable:
        return {"tree_size": "paper"}  # the papers' static trees: what a lesson shows
    return {}


def make_drafter(method: str, target, settings: dict):
    """A fresh drafter for one decoder (drafters keep per-sequence state)."""
    ok, note = method_status(method, settings.get("dtype", DEFAULTS["dtype"]))
    if not ok:
        raise SpecVizError(tr("note.unavailable_method", method=method_label(method), note=status_note(note)))
    try:
        options = tree_settings_for(method, settings)
        if registry.get(method).tunable and not options:
            registry.tune(method, target)  # the explicit step: times trees here once (cached), then reads them
        return registry.make_drafter(method, target, **options)
    except ValueError as e:  # a drafter refusing its settings (e.g. PLD's n-gram range)
        raise SpecVizError(str(e)) from e
