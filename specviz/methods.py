"""The decoding methods by name, and how to build each one's drafter for a target.

One registry for the app, the benchmark and the command lines. A method whose trained head is
not shipped (or does not fit the loaded target) raises `SpecVizError` with the reason, so a
caller can show it as unavailable instead of crashing.
"""

from __future__ import annotations

import importlib

from . import SpecVizError
from .drafters.base import Drafter, NoDraft
from .drafters.pld import PromptLookupDrafter

# name -> (label, "module:factory" or a callable); factories take (target, **options)
METHODS: dict[str, tuple[str, object]] = {
    "vanilla": ("Vanilla (no drafting)", lambda target, **kw: NoDraft()),
    "pld": ("Prompt lookup (PLD)", lambda target, **kw: PromptLookupDrafter(stop_ids=_special_ids(target), **kw)),
    "sps": ("Small draft model (SpS)", "specviz.drafters.sps:make_drafter"),
    "medusa": ("Medusa heads", "specviz.drafters.medusa:make_drafter"),
    "eagle1": ("EAGLE-1 (static tree)", "specviz.drafters.eagle:make_eagle1"),
    "eagle2": ("EAGLE-2 (dynamic tree)", "specviz.drafters.eagle:make_eagle2"),
    "eagle3": ("EAGLE-3 (fused features)", "specviz.drafters.eagle:make_eagle3"),
}


TUNABLE = ("eagle1", "eagle2", "eagle3", "medusa")  # methods whose tree specviz.tuning sizes


def head_method(name: str) -> str:
    """The folder of shipped weights a method uses (EAGLE-2 drafts with the EAGLE-1 head)."""
    return "eagle1" if name == "eagle2" else name


def _special_ids(target) -> set[int]:
    return set(getattr(getattr(target, "tokenizer", None), "special_ids", ()) or ())


def make_drafter(name: str, target, **options) -> Drafter:
    """Build the drafter of `name` for `target`; SpecVizError says why when it cannot."""
    if name not in METHODS:
        raise SpecVizError(f"Unknown method {name!r}; choose one of {', '.join(METHODS)}.")
    factory = METHODS[name][1]
    if isinstance(factory, str):
        module, func = factory.split(":")
        try:
            factory = getattr(importlib.import_module(module), func)
        except (ImportError, AttributeError):
            raise SpecVizError(f"{METHODS[name][0]} is not available yet in this version of SpecViz.") from None
    return factory(target, **options)


def available(target) -> dict[str, str | None]:
    """Each method -> None when usable with this target, else the reason it is not."""
    out = {}
    for name in METHODS:
        try:
            # the papers' fixed trees: checking availability must not trigger device measurements
            make_drafter(name, target, **({"tree_size": "paper"} if name in TUNABLE else {}))
            out[name] = None
        except SpecVizError as e:
            out[name] = str(e)
    return out
