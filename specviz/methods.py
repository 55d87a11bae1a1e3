"""The one registry of decoding methods: name -> how to build its drafter, label, head, tuning.

The app, the benchmark, the tree tuner and the losslessness check all read it.

    METHODS: dict[str, Method]       every method, in display order (engine methods, then toys)
    ENGINE_METHODS, TOY_METHODS      the names of each kind (toys draft from a TargetOracle)
    Method                           frozen: factory, label (i18n key), capabilities (tunable, drawable,
                                     the sidebar settings that apply), head, toy
    make_drafter(name, target, tree_size="auto", **options) -> Drafter
        a fresh drafter (drafters keep per-sequence state). Tunable methods get the tree
        `tune` chose for this device, when it has (building a drafter never times anything;
        otherwise the papers' tree), unless `tree_size="paper"` or an explicit shape (depth /
        total_tokens / static_tree / tree) is given; a tuned EAGLE-2/3 tree draws its drafts from
        q at T > 0 (draw="sample") unless `draw` is given. An option the method does not take,
        or anything else it cannot do, raises SpecVizError saying why.
    tune(name, target, log=None) -> dict | None   the explicit step that times trees on this device
        (once; cached) and returns the pick (None: the head ships no profile)
    availability(name, target=None, dtype="fp32") -> (ok, reason)
        cheap: reads the shipped head's config.json (hidden size, vocabulary) instead of
        building the drafter; reason is "" when ok.
    head_dir(name, target) -> Path   the shipped folder a method's weights live in

Drafters never import `specviz.tuning`; this module asks it and passes the result in.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import SpecVizError, tuning
from .drafters import eagle, medusa, sps
from .drafters.base import Drafter, NoDraft, TreePick
from .drafters.lookup import stop_ids_of
from .drafters.pld import PromptLookupDrafter
from .drafters.toy import ToyDrafter
from .heads.io import shipped_head_dir
from .runtime.loading import DEFAULT_MODEL


@dataclass(frozen=True)
class Method:
    factory: Callable[..., Drafter]  # (target, **options) -> Drafter; toys take a TargetOracle
    label: str  # i18n key of the display name
    tunable: bool = False  # specviz.tuning sizes its tree for the device
    head: str | None = None  # shipped folder under assets/heads/<model>/ it needs
    shape_options: tuple = ()  # options that fix the tree's shape (then no tuning)
    reads_features: bool = False  # its head reads the target's hidden states (so their sizes must match)
    toy: bool = False  # weightless drafter of the losslessness check, built on a TargetOracle
    drawable: bool = False  # a dynamic tree: can draw its drafts from q at T > 0 (option `draw`)
    sidebar: tuple = ()  # the app sidebar's draft settings that apply to it
    options: tuple | None = None  # the options its factory takes (None: read from the factory's signature)


PLD_OPTIONS = ("max_ngram", "min_ngram", "num_tokens")
TOY_OPTIONS = ("scale", "noise", "seed", "without_replacement")  # a toy's widths and sampling are its method's
DYNAMIC_SIDEBAR = ("depth", "tree_topk", "total_tokens", "min_prob", "draw_sample", "tune")


def _pld(target, **options) -> Drafter:
    try:
        return PromptLookupDrafter(stop_ids=stop_ids_of(target), **options)
    except ValueError as e:
        raise SpecVizError(str(e)) from e


def _toy(**shape):
    return lambda oracle, **options: ToyDrafter(oracle, **shape, **options)


METHODS: dict[str, Method] = {
    "vanilla": Method(lambda target: NoDraft(), "m.vanilla"),
    "pld": Method(_pld, "m.pld", sidebar=("pld_ngram", "pld_tokens"), options=PLD_OPTIONS),
    "sps": Method(sps.make_drafter, "m.sps", head="sps", sidebar=("depth",)),
    "medusa": Method(medusa.make_drafter, "m.medusa", tunable=True, head="medusa", reads_features=True, shape_options=("tree",)),
    "eagle1": Method(eagle.make_eagle1, "m.eagle1", tunable=True, reads_features=True, head="eagle1", shape_options=("static_tree",)),
    "eagle2": Method(eagle.make_eagle2, "m.eagle2", tunable=True, reads_features=True, head="eagle1",
                     shape_options=("depth", "total_tokens", "min_prob"), drawable=True, sidebar=DYNAMIC_SIDEBAR),
    "eagle3": Method(eagle.make_eagle3, "m.eagle3", tunable=True, reads_features=True, head="eagle3",
                     shape_options=("depth", "total_tokens", "min_prob"), drawable=True, sidebar=DYNAMIC_SIDEBAR),
    "toy-sps": Method(_toy(widths=(1, 1), sampled=True), "m.toy-sps", toy=True, options=TOY_OPTIONS),
    "toy-specinfer": Method(_toy(widths=(2, 1), sampled=True), "m.toy-specinfer", toy=True, options=TOY_OPTIONS),
    "toy-topk": Method(_toy(widths=(2, 1), sampled=False), "m.toy-topk", toy=True, options=TOY_OPTIONS),
}
ENGINE_METHODS = tuple(n for n, m in METHODS.items() if not m.toy)
TOY_METHODS = tuple(n for n, m in METHODS.items() if m.toy)
TUNABLE = tuple(n for n, m in METHODS.items() if m.tunable)


def get(name: str) -> Method:
    if name not in METHODS:
        raise SpecVizError(f"Unknown method {name!r}; choose one of {', '.join(METHODS)}.")
    return METHODS[name]


def head_method(name: str) -> str:
    """The folder of shipped weights a method uses (EAGLE-2 drafts with the EAGLE-1 head)."""
    return get(name).head or name


def _model(target):
    return getattr(target, "model", target)


def head_dir(name: str, target=None) -> Path:
    model_name = _model(target).name if target is not None else DEFAULT_MODEL
    return shipped_head_dir(model_name, head_method(name))


def tune(name: str, target, log=None, head_folder=None) -> TreePick | None:
    """Time this device's best tree for a tunable method, once (the costs and the pick are cached in
    the user cache), and return the pick; None when its head ships no profile. The explicit step:
    `make_drafter` only ever reads what this left."""
    if not get(name).tunable:
        raise SpecVizError(f"{name} has no tree to tune.")
    # the trees are timed with the drafting a tuned drafter does (an EAGLE-1 head's cut vocabulary, the
    # EAGLE drafters' lookup branch)
    drafting = {k: v for k, v in tuning.TUNED_DRAFTING.items() if k in accepted_options(name)}
    record = tuning.tree_for(target, name, head_folder or head_dir(name, target), "auto", measure=True, log=log,
                           build=lambda: make_drafter(name, target, tree_size="paper", head_dir=head_folder, **drafting))
    return _pick(name, record, "auto")


DRAWABLE = tuple(n for n, m in METHODS.items() if m.drawable)  # tuned ones draw their drafts from q at T > 0


def accepted_options(name: str) -> tuple:
    """The options `make_drafter(name, ...)` takes besides `tree_size`."""
    spec = get(name)
    if spec.options is not None:
        return spec.options
    params = list(inspect.signature(spec.factory).parameters.values())[1:]
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "pick")


def make_drafter(name: str, target, tree_size: str = "auto", **options) -> Drafter:
    """Build the drafter of `name` for `target`; SpecVizError says why when it cannot."""
    spec = get(name)
    unknown = sorted(k for k in options if k not in accepted_options(name))
    if unknown:
        raise SpecVizError(f"{name} takes no option {', '.join(unknown)} (it takes: "
                           f"{', '.join(accepted_options(name)) or 'none'}).")
    if tree_size not in ("auto", "paper"):
        raise SpecVizError(f"tree_size is 'auto' (this device's tuned tree) or 'paper', not {tree_size!r}.")
    if spec.tunable and not any(options.get(k) is not None for k in spec.shape_options):
        folder = options.get("head_dir") or head_dir(name, target)
        record = tuning.tree_for(target, name, folder, tree_size, measure=False)
        if record:
            options["pick"] = _pick(name, record, tree_size)
    return spec.factory(target, **options)


def _pick(name: str, record: dict | None, tree_size: str) -> TreePick | None:
    """The tuner's stored record as the typed pick a drafter takes. The fastest setting we know: at T > 0
    its few drafts are drawn from q (kept with probability min(1, p/q), not p(x): tree_build.build_sampled_tree,
    docs/tuning.md); greedy decoding is unchanged. The papers' trees and the sidebar's keep EAGLE's top-k."""
    if not record:
        return None
    return TreePick.from_record(record, draw="sample" if get(name).drawable and tree_size != "paper" else "top")


def availability(name: str, target=None, dtype: str = "fp32") -> tuple[bool, str]:
    """(usable, reason) without building anything: the shipped head exists and fits the target."""
    if name not in METHODS:
        return False, f"Unknown method {name!r}."
    spec = METHODS[name]
    if spec.head is None:
        return True, ""
    folder = head_dir(name, target)
    cfg_file = folder / "config.json"
    if not cfg_file.is_file():
        return False, f"No {name} weights shipped for this model (looked in {folder}); train them with `python -m specviz.train {head_method(name)}`."
    try:
        cfg = json.loads(cfg_file.read_text())
    except (OSError, ValueError) as e:
        return False, f"{cfg_file} is unreadable: {e}"
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        return False, f"No weights in {folder}."
    if target is not None:
        tcfg = _model(target).cfg
        if spec.reads_features and cfg.get("hidden_size") != tcfg.hidden_size:
            return False, f"The {name} head was built for hidden size {cfg.get('hidden_size')}, the target has {tcfg.hidden_size}."
        vocab = cfg.get("vocab_size")
        if vocab is not None and vocab != tcfg.vocab_size:
            return False, f"The {name} head expects a vocabulary of {vocab} tokens, the target has {tcfg.vocab_size}."
    return True, ""
