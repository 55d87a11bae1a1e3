"""The shared sidebar and deep links: every setting starts from the URL (validated, clamped) or
its default, lives in plain session keys, and is mirrored back into the URL."""

from __future__ import annotations

import streamlit as st

from .. import SpecVizError
from .. import methods as registry
from ..i18n import LANGS
from .gate import heavy_work
from .methods import APP_METHODS, best_available, method_label, method_status, status_note
from .model import device_label, get_target, load_model_from_ui
from .state import DEFAULTS, settings, tr

# query parameters that carry the sidebar (deep links); prompt and round are handled by pages
_PARSERS = {
    "lang": lambda v: v if v in ("en", "zh") else None,
    "dtype": lambda v: v if v in ("fp32", "bf16") else None,
    "method": lambda v: v if v in APP_METHODS else None,
    "temperature": lambda v: min(2.0, max(0.0, round(float(v) / 0.05) * 0.05)),
    "top_k": lambda v: min(1000, max(0, int(v))),
    "top_p": lambda v: min(1.0, max(0.05, round(float(v) / 0.05) * 0.05)),
    "seed": lambda v: min(2**31 - 1, max(0, int(v))),
    "max_new": lambda v: min(512, max(1, int(v))),
    "depth": lambda v: min(12, max(1, int(v))),
    "tree_topk": lambda v: min(16, max(1, int(v))),
    "total_tokens": lambda v: min(128, max(2, int(v))),
    "min_prob": lambda v: min(0.95, max(0.0, round(float(v) / 0.05) * 0.05)),
    "draw_sample": lambda v: {"1": True, "true": True, "0": False, "false": False}.get(v.lower()),
    "pld_ngram": lambda v: min(8, max(1, int(v))),
    "pld_tokens": lambda v: min(32, max(1, int(v))),
}


def parse_param(key: str, raw) -> object | None:
    """A sidebar query parameter's value, validated and clamped to the widget's range; None
    when it is unknown, malformed (`abc`, `nan`, `inf`, `1e999`, a list) or absurdly long."""
    parse = _PARSERS.get(key)
    if parse is None or not isinstance(raw, str) or len(raw) > 64:
        return None
    try:
        val = parse(raw.strip())
        if val is None:
            return None
        return type(DEFAULTS[key])(val)
    except (TypeError, ValueError, OverflowError, ArithmeticError):
        return None


def round_param(raw, limit: int = 256) -> int | None:
    """?round=N for the Decode page: a whole number 1..limit (clamped), else None."""
    if not isinstance(raw, str) or not raw.strip().isascii() or not raw.strip().isdigit() or len(raw.strip()) > 9:
        return None
    n = int(raw.strip())
    return min(n, limit) if n > 0 else None


def _init_state_from_url() -> None:
    """Once per session: every sidebar key gets its value from the URL (validated) or its
    default, so widgets are created from session state alone (no value= clash)."""
    if st.session_state.get("_url_loaded"):
        return
    st.session_state["_url_loaded"] = True
    for key, parse in _PARSERS.items():
        val = DEFAULTS[key]
        raw = st.query_params.get(key)
        if raw is not None:
            parsed = parse_param(key, raw)
            if parsed is not None:
                val = parsed
        if key == "method" and raw is None and not method_status(val, st.session_state.get("dtype", DEFAULTS["dtype"]))[0]:
            val = best_available(st.session_state.get("dtype", DEFAULTS["dtype"]))
        st.session_state.setdefault(key, val)


def _write_url() -> None:
    """Mirror the sidebar into the URL (only values that differ from the defaults)."""
    for key in _PARSERS:
        val = st.session_state.get(key, DEFAULTS[key])
        want = None if val == DEFAULTS[key] else (f"{val:g}" if isinstance(val, float) else str(val))
        have = st.query_params.get(key)
        if want is None and have is not None:
            del st.query_params[key]
        elif want is not None and have != want:
            st.query_params[key] = want


def _copy(key: str) -> None:
    st.session_state[key] = st.session_state["w_" + key]


def _apply_tuned() -> None:
    """Set depth / top_k / size to the tree that maximises expected tokens/s on this machine
    (`specviz.tuning`: the head's shipped acceptance profile x this device's measured costs)."""
    ss = st.session_state
    m = ss.get("method")
    try:
        target = get_target()
        if target is None:
            return
        with st.spinner(tr("sb.tune_measuring")), heavy_work():
            best = registry.tune(m, target)
    except (SpecVizError, OSError, ValueError) as e:
        ss["tune_msg"] = (m, "warn", str(e))
        return
    if best is None:
        ss["tune_msg"] = (m, "warn", tr("sb.tune_none"))
        return
    sampled = ss.get("temperature", 0.0) > 0 and best.sampled is not None
    shape, timing = best.shape_at(not sampled), best.timing_at(not sampled)  # the T = 1 tree serves every T > 0
    for k, v in (("depth", shape.depth), ("tree_topk", shape.top_k), ("total_tokens", shape.total_tokens)):
        ss[k] = ss["w_" + k] = int(v)
    floor = shape.min_prob
    ss["min_prob"] = ss["w_min_prob"] = floor
    drawn = sampled and registry.get(m).drawable
    if drawn:  # timed with drafts drawn from q: run it that way, not with EAGLE's top-k drafts
        ss["draw_sample"] = ss["w_draw_sample"] = True
    said = dict(depth=shape.depth, tau=timing.tau, tps=timing.tok_s, van=timing.vanilla_tok_s,
                sp=timing.speedup if timing.speedup is not None else timing.tok_s / timing.vanilla_tok_s)
    msg = tr("sb.tune_done_floor", p=floor, **said) if floor > 0 else tr("sb.tune_done", n=shape.total_tokens, **said)
    ss["tune_msg"] = (m, "ok", msg + (" " + tr("sb.tune_at_t1") if sampled else "") + (" " + tr("sb.tune_drawn") if drawn else ""))


def render_sidebar() -> None:
    """The shared sidebar: language, model precision, method (unavailable ones captioned), sampling,
    seed, token budget and draft settings. Values start from the URL and are mirrored into it."""
    _init_state_from_url()
    ss = st.session_state
    # The canonical values live in plain session keys ("method", ...) that Streamlit never drops;
    # each widget ("w_method", ...) is re-seeded from them every run and copies back on change.
    for key in _PARSERS:
        ss.setdefault(key, DEFAULTS[key])
        ss["w_" + key] = ss[key]
    with st.sidebar:
        st.selectbox(tr("sb.language"), list(LANGS), format_func=LANGS.get, key="w_lang", on_change=_copy, args=("lang",))
        st.markdown(f"### {tr('sb.model')}")
        st.caption(ss.get("model_spec") or tr("sb.model_default"))
        st.caption(tr("sb.runs_on", device=device_label()))
        with st.expander(tr("sb.other_model"), expanded=False):
            st.text_input(tr("sb.model_path"), key="w_model_path", max_chars=1024)
            st.button(tr("sb.load"), key="model_load", on_click=load_model_from_ui)
            msg = ss.pop("model_msg", None)  # shown once, after the Load press
            if msg:
                (st.error if msg[0] == "error" else st.success)(msg[1])
        st.radio(tr("sb.dtype"), ["fp32", "bf16"], key="w_dtype", on_change=_copy, args=("dtype",), horizontal=True, help=tr("sb.dtype_help"))
        status = {m: method_status(m, ss["dtype"]) for m in APP_METHODS}
        captions = ["" if ok else tr("sb.unavailable", note=status_note(note)) for ok, note in (status[m] for m in APP_METHODS)]
        st.radio(tr("sb.method"), APP_METHODS, format_func=method_label, captions=captions, key="w_method", on_change=_copy, args=("method",))

        st.markdown(f"### {tr('sb.sampling')}")
        st.slider(tr("sb.temperature"), 0.0, 2.0, step=0.05, key="w_temperature", on_change=_copy, args=("temperature",))
        greedy = ss["temperature"] == 0
        st.number_input(tr("sb.top_k"), 0, 1000, step=1, key="w_top_k", on_change=_copy, args=("top_k",), disabled=greedy)
        st.slider(tr("sb.top_p"), 0.05, 1.0, step=0.05, key="w_top_p", on_change=_copy, args=("top_p",), disabled=greedy)
        st.number_input(tr("sb.seed"), 0, 2**31 - 1, step=1, key="w_seed", on_change=_copy, args=("seed",))
        st.number_input(tr("sb.max_new"), 1, 512, step=1, key="w_max_new", on_change=_copy, args=("max_new",))

        with st.expander(tr("sb.tree"), expanded=False):
            m = ss["method"]
            applies = registry.get(m).sidebar  # the settings this method takes (the registry says which)
            st.number_input(tr("sb.pld_ngram"), 1, 8, key="w_pld_ngram", on_change=_copy, args=("pld_ngram",), disabled="pld_ngram" not in applies)
            st.number_input(tr("sb.pld_tokens"), 1, 32, key="w_pld_tokens", on_change=_copy, args=("pld_tokens",), disabled="pld_tokens" not in applies)
            st.number_input(tr("sb.depth"), 1, 12, key="w_depth", on_change=_copy, args=("depth",), disabled="depth" not in applies)
            st.number_input(tr("sb.tree_topk"), 1, 16, key="w_tree_topk", on_change=_copy, args=("tree_topk",), disabled="tree_topk" not in applies)
            st.number_input(tr("sb.total_tokens"), 2, 128, key="w_total_tokens", on_change=_copy, args=("total_tokens",), disabled="total_tokens" not in applies)
            st.number_input(tr("sb.min_prob"), 0.0, 0.95, step=0.05, format="%.2f", key="w_min_prob", on_change=_copy, args=("min_prob",),
                            disabled="min_prob" not in applies, help=tr("sb.min_prob_help"))
            st.toggle(tr("sb.draw"), key="w_draw_sample", on_change=_copy, args=("draw_sample",),
                      disabled="draw_sample" not in applies or greedy, help=tr("sb.draw_help"))
            if "tune" in applies:
                st.button(tr("sb.tune"), key="tree_tune", on_click=_apply_tuned, help=tr("sb.tune_help"))
                note = ss.get("tune_msg")
                if note and note[0] == m:
                    (st.warning if note[1] == "warn" else st.caption)(note[2])
    _write_url()


def page_setup() -> None:
    """Called at the top of every page: renders the sidebar when the page runs without app.py
    (AppTest.switch_page runs a page file directly)."""
    if not st.session_state.get("_in_app_run"):
        render_sidebar()


def current_method_ok() -> tuple[bool, str]:
    """Whether the chosen method runs here; if not, a warning on the page says why."""
    s = settings()
    ok, note = method_status(s["method"], s["dtype"])
    if not ok:
        st.warning(tr("note.unavailable_method", method=method_label(s["method"]), note=status_note(note)))
    return ok, note
