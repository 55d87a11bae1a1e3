"""Which decoding methods this build and machine can run, their labels, and the sidebar's tree
settings turned into drafter options."""

from __future__ import annotations

import importlib

import streamlit as st

from .. import SpecVizError
from ..drafters.base import NoDraft
from ..drafters.pld import PromptLookupDrafter
from .model import load_shared_target
from .state import DEFAULTS, tr

METHODS = ["vanilla", "pld", "sps", "medusa", "eagle1", "eagle2", "eagle3"]
EAGLE = ["eagle1", "eagle2", "eagle3"]
BEST_FIRST = ["eagle3", "eagle2", "eagle1", "medusa", "sps", "pld", "vanilla"]  # the default: the first that runs
# module in specviz/drafters/ expected to provide each trained method
_MODULES = {"sps": "sps", "medusa": "medusa", "eagle1": "eagle", "eagle2": "eagle", "eagle3": "eagle"}


def _factory(method: str):
    """`(method, target, **settings) -> Drafter`: the shared registry `specviz.methods` when this
    build has it, else the drafter modules' own constructors."""
    try:
        reg = importlib.import_module("specviz.methods")
        if callable(getattr(reg, "make_drafter", None)) and method in getattr(reg, "METHODS", {}):
            return lambda m, target, **kw: reg.make_drafter(m, target, **kw)
    except ImportError:
        pass
    return _module_factory(method)


def _module_factory(method: str):
    """The drafter modules' own constructors, for a build without the registry."""
    try:
        mod = importlib.import_module(f"specviz.drafters.{_MODULES[method]}")
    except ImportError:
        return None
    if method in EAGLE:
        fn = getattr(mod, "make_" + method, None)
        if callable(fn):
            return lambda m, target, **kw: fn(target, **kw)
    elif method == "sps" and callable(getattr(mod, "make_drafter", None)):
        return lambda m, target, gamma=4, **kw: mod.make_drafter(target, gamma=gamma)
    elif callable(getattr(mod, "make_drafter", None)):
        return lambda m, target, **kw: mod.make_drafter(target)
    return None


@st.cache_resource(ttl=120, show_spinner=False)
def method_status(method: str, dtype_name: str = "fp32") -> tuple[bool, str]:
    """(available, note key or message). Cached for two minutes so a newly trained head shows
    up without restarting the app."""
    if method in ("vanilla", "pld"):
        return True, ""
    fac = _factory(method)
    if fac is None:
        return False, "note.drafter_missing" if method not in EAGLE else "note.head_missing"
    try:
        fac(method, load_shared_target(dtype_name, None), **tree_settings_for(method, DEFAULTS))
        return True, ""
    except (SpecVizError, FileNotFoundError, OSError) as e:
        msg = str(e).lower()
        if "not available yet" in msg:
            return False, "note.drafter_missing"
        return False, "note.head_missing" if "train" in msg or isinstance(e, (FileNotFoundError, OSError)) else str(e)
    except Exception as e:  # noqa: BLE001 - a half-written drafter is reported, not raised
        return False, f"{type(e).__name__}: {e}"


def best_available(dtype_name: str) -> str:
    return next(m for m in BEST_FIRST if method_status(m, dtype_name)[0])


def status_note(note: str) -> str:
    return tr(note) if note.startswith("note.") else note


def method_label(method: str) -> str:
    return tr("m." + method)


def tree_settings_for(method: str, s: dict) -> dict:
    if method == "pld":
        return {"max_ngram": int(s["pld_ngram"]), "num_tokens": int(s["pld_tokens"])}
    if method in ("eagle2", "eagle3"):
        return {"depth": int(s["depth"]), "top_k": int(s["tree_topk"]), "total_tokens": int(s["total_tokens"])}
    if method == "sps":
        return {"gamma": int(s["depth"])}
    if method in ("eagle1", "medusa"):
        return {"tree_size": "paper"}  # the papers' static trees: what a lesson shows
    return {}


def make_drafter(method: str, target, settings: dict):
    """A fresh drafter for one decoder (drafters keep per-sequence state)."""
    if method == "vanilla":
        return NoDraft()
    ok, note = method_status(method, settings.get("dtype", "fp32"))
    if not ok:
        raise SpecVizError(tr("note.unavailable_method", method=method_label(method), note=status_note(note)))
    if method == "pld":
        ts = tree_settings_for("pld", settings)
        try:
            return PromptLookupDrafter(
                max_ngram=ts["max_ngram"], min_ngram=1, num_tokens=ts["num_tokens"], stop_ids=target.tokenizer.special_ids
            )
        except ValueError as e:
            raise SpecVizError(str(e)) from e
    return _factory(method)(method, target, **tree_settings_for(method, settings))
