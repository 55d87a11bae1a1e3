"""Streamlit glue: the shared model (cached once per process), the method registry with
availability notes, per-session decoder state, and deep links.

Everything mutable that belongs to one browser session lives in `st.session_state`; the model
and drafter heads are loaded once by `st.cache_resource` and only read afterwards.
"""

from __future__ import annotations

import importlib
import threading
import time
import unicodedata
from contextlib import contextmanager
from dataclasses import dataclass

import streamlit as st
import torch

from . import SpecVizError
from .i18n import t

METHODS = ["vanilla", "pld", "sps", "medusa", "eagle1", "eagle2", "eagle3"]
EAGLE = ["eagle1", "eagle2", "eagle3"]
# module in specviz/drafters/ expected to provide each trained method
_MODULES = {"sps": "sps", "medusa": "medusa", "eagle1": "eagle", "eagle2": "eagle", "eagle3": "eagle"}

EXAMPLES = [
    "Explain in two sentences why the sky is blue.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Summarise: The cat sat on the mat. The cat was happy on the mat because the mat was warm.",
    "List the planets of the solar system in order from the Sun.",
    "用一句话解释什么是机器学习。",
]
try:  # the project's shared example prompts, after ours
    from .examples import EXAMPLE_PROMPTS as _SHARED

    EXAMPLES += [p for p in _SHARED if p not in EXAMPLES][:20]
except (ImportError, OSError, ValueError):
    pass

DEFAULTS = {
    "lang": "en",
    "dtype": "fp32",
    "method": "pld",
    "temperature": 0.0,
    "top_k": 0,
    "top_p": 1.0,
    "seed": 0,
    "max_new": 48,
    "depth": 5,
    "tree_topk": 4,
    "total_tokens": 16,
    "pld_ngram": 3,
    "pld_tokens": 8,
    }


# ---------------------------------------------------------------------- language
def lang() -> str:
    return st.session_state.get("lang", "en")


def tr(key: str, **fmt) -> str:
    return t(key, lang(), **fmt)


# ---------------------------------------------------------------------- model
@st.cache_resource(show_spinner=False, max_entries=3)
def _load_target(dtype_name: str, spec: str | None = None):
    from .target import load_target

    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    return load_target(spec, dtype=dtype)


def get_target():
    """The shared target model, or None after showing an inline error."""
    try:
        with st.spinner("Loading the model…" if lang() == "en" else "正在加载模型……"):
            return _load_target(st.session_state.get("dtype", "fp32"), st.session_state.get("model_spec"))
    except SpecVizError as e:
        st.error(tr("sb.model_error", err=e))
    except Exception as e:  # noqa: BLE001 - a broken install must not show a traceback
        st.error(tr("sb.model_error", err=f"{type(e).__name__}: {e}"))
    return None


def load_model_from_ui() -> None:
    """Sidebar callback: load the model typed in `w_model_path`. Only folders inside the cache
    or the configured directories (specviz.settings) are accepted; a damaged, tampered or
    unsupported checkpoint is refused with a message and the session keeps its previous model."""
    from .settings import check_ui_model_spec

    ss = st.session_state
    text = str(ss.get("w_model_path") or "")
    try:
        spec = check_ui_model_spec(text)
        with heavy_work():
            _load_target(ss.get("dtype", "fp32"), spec)
    except SpecVizError as e:
        ss["model_msg"] = ("error", tr("sb.model_error", err=e))
        return
    except Exception as e:  # noqa: BLE001 - never a traceback for a bad file
        ss["model_msg"] = ("error", tr("sb.model_error", err=f"{type(e).__name__}: {e}"))
        return
    if spec != ss.get("model_spec"):
        ss.pop("dec", None)  # a decoder belongs to the model it was started with
    ss["model_spec"] = spec
    ss["model_msg"] = ("success", ("Loaded: " if lang() != "zh" else "已加载：") + (spec or "SmolLM2-135M-Instruct"))


def device_name() -> str:
    import os
    import platform

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU threads, torch {torch.get_num_threads()} threads"


# ---------------------------------------------------------------------- methods
def _verify_available() -> bool:
    try:
        importlib.import_module("specviz.verify")
        return True
    except ImportError:
        return False


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
    """The function `(method, target, **settings) -> Drafter` for a trained method, if this build
    has its drafter module. Uses the drafters' own constructors (`specviz.drafters.sps.make_drafter`,
    `medusa.make_drafter`, `eagle.make_eagle1/2/3`), which raise SpecVizError when the head is
    missing; a package-level `specviz.drafters.build(method, target, **settings)` wins if present."""
    try:
        pkg = importlib.import_module("specviz.drafters")
        if callable(getattr(pkg, "build", None)):
            return pkg.build
    except ImportError:
        pass
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
    for name in ("build_drafter", "build"):
        if callable(getattr(mod, name, None)):
            return getattr(mod, name)
    return None


@st.cache_resource(ttl=120, show_spinner=False)
def method_status(method: str, dtype_name: str = "fp32") -> tuple[bool, str]:
    """(available, note key or message). Cached for two minutes so a newly trained head shows
    up without restarting the app."""
    if method == "vanilla":
        return True, ""
    if not _verify_available():
        return False, "note.verify_missing"
    if method == "pld":
        return True, ""
    fac = _factory(method)
    if fac is None:
        return False, "note.drafter_missing" if method not in EAGLE else "note.head_missing"
    try:
        fac(method, _load_target(dtype_name), **tree_settings_for(method, DEFAULTS))
        return True, ""
    except (SpecVizError, FileNotFoundError, OSError) as e:
        msg = str(e).lower()
        if "not available yet" in msg:
            return False, "note.drafter_missing"
        return False, "note.head_missing" if "train" in msg or isinstance(e, (FileNotFoundError, OSError)) else str(e)
    except Exception as e:  # noqa: BLE001 - a half-written drafter is reported, not raised
        return False, f"{type(e).__name__}: {e}"


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
        from .drafters.base import NoDraft

        return NoDraft()
    ok, note = method_status(method, settings.get("dtype", "fp32"))
    if not ok:
        raise SpecVizError(tr("note.unavailable_method", method=method_label(method), note=status_note(note)))
    if method == "pld":
        from .drafters.pld import PromptLookupDrafter

        ts = tree_settings_for("pld", settings)
        try:
            return PromptLookupDrafter(
                max_ngram=ts["max_ngram"], min_ngram=1, num_tokens=ts["num_tokens"], stop_ids=target.tokenizer.special_ids
            )
        except ValueError as e:
            raise SpecVizError(str(e)) from e
    return _factory(method)(method, target, **tree_settings_for(method, settings))


# ---------------------------------------------------------------------- settings
def settings() -> dict:
    """The current sidebar settings (defaults where a widget has not rendered yet)."""
    return {k: st.session_state.get(k, v) for k, v in DEFAULTS.items()}


def sampling_params(s: dict):
    from .sampling import SamplingParams

    return SamplingParams(temperature=float(s["temperature"]), top_k=int(s["top_k"]), top_p=float(s["top_p"]))


MAX_PROMPT_CHARS = 4000  # the text area's limit; a deep link (?prompt=) must not bypass it


def clean_prompt(prompt) -> str:
    """What the user typed, made safe to tokenise: line ends normalised, control characters
    other than tab and newline dropped (RTL text, emoji and every other character are kept)."""
    text = str(prompt).replace("\r\n", "\n").replace("\r", "\n")
    return "".join(c for c in text if c in "\t\n" or unicodedata.category(c) != "Cc")


def check_prompt(prompt: str | None) -> str:
    if prompt is None or not clean_prompt(prompt).strip():
        raise SpecVizError(tr("c.empty_prompt"))
    text = clean_prompt(prompt)
    if len(text) > MAX_PROMPT_CHARS:
        raise SpecVizError(
            f"The prompt has {len(text):,} characters; SpecViz takes at most {MAX_PROMPT_CHARS:,}. Shorten it."
            if lang() != "zh" else f"提示词有 {len(text):,} 个字符，最多 {MAX_PROMPT_CHARS:,} 个，请缩短。")
    return text


# ---------------------------------------------------------------------- safe chat encoding
_USER_SLOT = "\ue000specviz-user\ue000"  # private-use sentinel, never typed by a user
_PLAIN_TOK: dict = {}
_PLAIN_LOCK = threading.Lock()


def _plain_encoder(tok):
    """A private copy of the tokenizer that reads special-token text (`<|im_start|>`) as
    ordinary characters. A copy, because the shared tokenizer must stay read-only."""
    key = id(tok)
    with _PLAIN_LOCK:
        enc = _PLAIN_TOK.get(key)
        if enc is None or enc[0] is not tok:
            from tokenizers import Tokenizer

            plain = Tokenizer.from_str(tok._tok.to_str())
            plain.encode_special_tokens = True
            enc = _PLAIN_TOK[key] = (tok, plain)
        return enc[1]


def _has_marker(tok, text: str) -> bool:
    added = getattr(tok, "_added_texts", None)
    if added is None:
        added = [t.content for t in tok._tok.get_added_tokens_decoder().values() if t.content]
    return any(a in text for a in added)


def prompt_ids(target, prompt: str) -> list[int]:
    """Token ids of the one-turn chat for `prompt`, where the user's text is always ordinary
    text: chat-template markers such as `<|im_start|>` typed by a user are encoded character by
    character, never as the special tokens that delimit turns. Prompts without such markers get
    exactly `tokenizer.chat_ids(prompt)`."""
    tok = target.tokenizer
    prompt = check_prompt(prompt)
    if not hasattr(tok, "_tok") or not _has_marker(tok, prompt):
        return tok.chat_ids(prompt)
    rendered = tok.render_chat([{"role": "user", "content": _USER_SLOT}])
    if rendered.count(_USER_SLOT) != 1:
        raise SpecVizError("This model's chat template cannot take text that contains its own markers (such as <|im_start|>): remove them from the prompt.")
    pre, post = rendered.split(_USER_SLOT)
    plain = _plain_encoder(tok)
    return tok.encode(pre) + plain.encode(prompt, add_special_tokens=False).ids + tok.encode(post)


# ---------------------------------------------------------------------- the worker gate
def _show_wait(slot):
    def show(ahead: int):
        msg = (f"Waiting for {ahead} request{'s' if ahead != 1 else ''} ahead (the server runs one computation at a time)…"
               if lang() != "zh" else f"排队中：前面还有 {ahead} 个请求……")
        try:
            slot.info(msg, icon=":material/hourglass_top:")
        except Exception:  # noqa: BLE001 - no page to draw on (tests, callbacks after a rerun)
            pass
    return show


_HELD = threading.local()


@contextmanager
def heavy_work():
    """Hold a slot of the process-wide worker gate (FIFO) for engine work; while queued the page
    says how many requests are ahead."""
    from .concurrency import gate

    if getattr(_HELD, "depth", 0):  # already inside the gate on this thread: no second ticket
        yield
        return
    g = gate()
    slot = None
    try:
        slot = st.empty()
    except Exception:  # noqa: BLE001
        pass
    try:
        with g.slot(on_wait=_show_wait(slot) if slot is not None else None, timeout=600):
            if slot is not None:
                slot.empty()
            _HELD.depth = 1
            try:
                yield
            finally:
                _HELD.depth = 0
    finally:
        if slot is not None:
            try:
                slot.empty()
            except Exception:  # noqa: BLE001
                pass


# ---------------------------------------------------------------------- per-session decoder
@dataclass
class Session:
    """One sequence being stepped on the Decode page."""

    key: tuple
    decoder: object
    snaps: list  # snapshot before round i
    prompt: str
    method: str
    seed: int


def config_key(s: dict, prompt: str) -> tuple:
    return (s["dtype"], s["method"], tuple(sorted(tree_settings_for(s["method"], s).items())),
            float(s["temperature"]), int(s["top_k"]), float(s["top_p"]), int(s["seed"]), int(s["max_new"]), prompt)


def start_session(target, s: dict, prompt: str) -> Session:
    from .engine import SpeculativeDecoder

    typed = prompt  # the key compares with what the prompt box holds, cleaned or not
    prompt = check_prompt(prompt)
    params = sampling_params(s)
    ids = prompt_ids(target, prompt)
    with heavy_work():
        drafter = make_drafter(s["method"], target, s)
        dec = SpeculativeDecoder(target, drafter, params, seed=int(s["seed"]))
        dec.start(ids, int(s["max_new"]))
    sess = Session(config_key(s, typed), dec, [], prompt, s["method"], int(s["seed"]))
    st.session_state["dec"] = sess
    return sess


def step_session(sess: Session):
    dec = sess.decoder
    with heavy_work():
        sess.snaps = sess.snaps[: len(dec.traces)]
        sess.snaps.append(dec.snapshot())
        return dec.step()


def replay_round(sess: Session, i: int):
    """Rewind to just before round i and run it again; later rounds are dropped."""
    dec = sess.decoder
    with heavy_work():
        dec.restore(sess.snaps[i])
        sess.snaps = sess.snaps[: i + 1]
        return dec.step()


def same_trace(a, b) -> bool:
    """Traces equal up to timings."""
    import json

    da, db = json.loads(a.to_json()), json.loads(b.to_json())
    for d in (da, db):
        for k in ("draft_time_s", "verify_time_s", "total_time_s"):
            d.pop(k, None)
    return da == db


# ---------------------------------------------------------------------- generation runs
def run_generation(target, s: dict, prompt: str, method: str, progress=None):
    """Generate with `method` (detail off for fair timing); token texts filled afterwards."""
    from .engine import SpeculativeDecoder

    ids = prompt_ids(target, prompt)
    with heavy_work():
        dec = SpeculativeDecoder(target, make_drafter(method, target, s), sampling_params(s), seed=int(s["seed"]), detail=False)
        res = dec.generate(ids, int(s["max_new"]), progress=progress)
    tok = target.tokenizer
    for trc in res.traces:
        trc.committed_text = [tok.token_text(x) for x in trc.committed]
        trc.extra_text = tok.token_text(trc.extra_token)
    return res


def timed(fn, *a, **kw):
    t0 = time.perf_counter()
    out = fn(*a, **kw)
    return out, time.perf_counter() - t0


# ---------------------------------------------------------------------- small UI helpers
def _prompt_key(page: str) -> str:
    return f"prompt_{page}"


def _init_prompt() -> None:
    if "prompt_text" not in st.session_state:
        qp = st.query_params.get("prompt")
        qp = clean_prompt(qp)[:MAX_PROMPT_CHARS] if qp else ""
        st.session_state["prompt_text"] = qp if qp.strip() else EXAMPLES[0]


def current_prompt(page: str | None = None) -> str:
    """The prompt as the user last typed it (a widget's new value wins inside callbacks)."""
    _init_prompt()
    if page is not None and _prompt_key(page) in st.session_state:
        st.session_state["prompt_text"] = st.session_state[_prompt_key(page)]
    return st.session_state["prompt_text"]


def _sync_prompt(page: str) -> None:
    st.session_state["prompt_text"] = st.session_state.get(_prompt_key(page), "")


def set_prompt(text: str, page: str) -> None:
    st.session_state["prompt_text"] = text
    st.session_state[_prompt_key(page)] = text


def prompt_box(page: str) -> str:
    """Prompt text area shared by the pages: one session value, carried in the URL (?prompt=)."""
    _init_prompt()
    key = _prompt_key(page)
    st.session_state[key] = st.session_state["prompt_text"]
    st.text_area(tr("c.prompt"), key=key, height=90, max_chars=4000, on_change=_sync_prompt, args=(page,))
    cols = st.columns([4, 1])
    with cols[0]:
        ex = st.selectbox(tr("c.examples"), ["—"] + EXAMPLES, key=f"ex_{page}")
    with cols[1]:
        st.write("")
        st.button("↑ " + tr("c.prompt"), key=f"use_ex_{page}", disabled=ex == "—", on_click=set_prompt, args=(ex, page))
    text = st.session_state["prompt_text"]
    if st.query_params.get("prompt") != text:
        st.query_params["prompt"] = text
    return text


def current_method_ok() -> tuple[bool, str]:
    s = settings()
    ok, note = method_status(s["method"], s["dtype"])
    if not ok:
        st.warning(tr("note.unavailable_method", method=method_label(s["method"]), note=status_note(note)))
    return ok, note


# query parameters that carry the sidebar (deep links); prompt and round are handled by pages
_PARSERS = {
    "lang": lambda v: v if v in ("en", "zh") else None,
    "dtype": lambda v: v if v in ("fp32", "bf16") else None,
    "method": lambda v: v if v in METHODS else None,
    "temperature": lambda v: min(2.0, max(0.0, round(float(v) / 0.05) * 0.05)),
    "top_k": lambda v: min(1000, max(0, int(v))),
    "top_p": lambda v: min(1.0, max(0.05, round(float(v) / 0.05) * 0.05)),
    "seed": lambda v: min(2**31 - 1, max(0, int(v))),
    "max_new": lambda v: min(512, max(1, int(v))),
    "depth": lambda v: min(12, max(1, int(v))),
    "tree_topk": lambda v: min(16, max(1, int(v))),
    "total_tokens": lambda v: min(128, max(2, int(v))),
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
        if key == "method" and not method_status(val, st.session_state.get("dtype", "fp32"))[0] and raw is None:
            val = "vanilla"
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
        from .tuning import tuned_tree

        target = get_target()
        if target is None:
            return
        with st.spinner(tr("sb.tune_measuring")), heavy_work():
            best = tuned_tree(target, m)
    except (SpecVizError, OSError, ValueError) as e:
        ss["tune_msg"] = (m, "warn", str(e))
        return
    if best is None:
        ss["tune_msg"] = (m, "warn", tr("sb.tune_none"))
        return
    for k, v in (("depth", best["depth"]), ("tree_topk", best.get("top_k", 8)), ("total_tokens", best["total_tokens"])):
        ss[k] = ss["w_" + k] = int(v)
    ss["tune_msg"] = (m, "ok", tr("sb.tune_done", depth=best["depth"], n=best["total_tokens"], tau=best["tau"],
                                  tps=best["tok_s"], van=best["vanilla_tok_s"]))


def render_sidebar() -> None:
    """The shared sidebar: language, model precision, method (unavailable ones captioned), sampling,
    seed, token budget and draft settings. Values start from the URL and are mirrored into it."""
    from .i18n import LANGS

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
        with st.expander("Other model" if lang() != "zh" else "其他模型", expanded=False):
            st.text_input("Folder in the cache or an allowed directory, or a cached Hub id" if lang() != "zh"
                          else "缓存或允许目录中的文件夹，或已缓存的 Hub 模型名", key="w_model_path", max_chars=1024)
            st.button("Load" if lang() != "zh" else "加载", key="model_load", on_click=load_model_from_ui)
            msg = ss.pop("model_msg", None)  # shown once, after the Load press
            if msg:
                (st.error if msg[0] == "error" else st.success)(msg[1])
        st.radio(tr("sb.dtype"), ["fp32", "bf16"], key="w_dtype", on_change=_copy, args=("dtype",), horizontal=True, help=tr("sb.dtype_help"))
        status = {m: method_status(m, ss["dtype"]) for m in METHODS}
        captions = ["" if ok else tr("sb.unavailable", note=status_note(note)) for ok, note in (status[m] for m in METHODS)]
        st.radio(tr("sb.method"), METHODS, format_func=method_label, captions=captions, key="w_method", on_change=_copy, args=("method",))

        st.markdown(f"### {tr('sb.sampling')}")
        st.slider(tr("sb.temperature"), 0.0, 2.0, step=0.05, key="w_temperature", on_change=_copy, args=("temperature",))
        greedy = ss["temperature"] == 0
        st.number_input(tr("sb.top_k"), 0, 1000, step=1, key="w_top_k", on_change=_copy, args=("top_k",), disabled=greedy)
        st.slider(tr("sb.top_p"), 0.05, 1.0, step=0.05, key="w_top_p", on_change=_copy, args=("top_p",), disabled=greedy)
        st.number_input(tr("sb.seed"), 0, 2**31 - 1, step=1, key="w_seed", on_change=_copy, args=("seed",))
        st.number_input(tr("sb.max_new"), 1, 512, step=1, key="w_max_new", on_change=_copy, args=("max_new",))

        with st.expander(tr("sb.tree"), expanded=False):
            m = ss["method"]
            st.number_input(tr("sb.pld_ngram"), 1, 8, key="w_pld_ngram", on_change=_copy, args=("pld_ngram",), disabled=m != "pld")
            st.number_input(tr("sb.pld_tokens"), 1, 32, key="w_pld_tokens", on_change=_copy, args=("pld_tokens",), disabled=m != "pld")
            st.number_input(tr("sb.depth"), 1, 12, key="w_depth", on_change=_copy, args=("depth",), disabled=m not in ("eagle2", "eagle3", "sps"))
            st.number_input(tr("sb.tree_topk"), 1, 16, key="w_tree_topk", on_change=_copy, args=("tree_topk",), disabled=m not in ("eagle2", "eagle3"))
            st.number_input(tr("sb.total_tokens"), 2, 128, key="w_total_tokens", on_change=_copy, args=("total_tokens",), disabled=m not in ("eagle2", "eagle3"))
            if m in ("eagle2", "eagle3"):
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


# ---------------------------------------------------------------------- latency measurements
def measure_forward(target, n_tokens: list[int], context: int = 128, batch: int = 1, repeats: int = 5, progress=None,
                    blocks: bool = True) -> list[dict]:
    """Median wall time of one target forward of `batch` x N new tokens after a context of
    `context` tokens, for each N (the cache is rewound between repeats). Tokens are fixed
    pseudo-random ids: latency does not depend on which tokens they are. `blocks=False`: dense weights."""
    with heavy_work():
        return _measure_forward(target, n_tokens, context, batch, repeats, progress, blocks)


def _measure_forward(target, n_tokens, context, batch, repeats, progress, blocks=True):
    import statistics

    model = target.model
    gen = torch.Generator().manual_seed(0)
    V = model.cfg.vocab_size
    ctx = torch.randint(0, V, (batch, context), generator=gen)
    cache = model.new_cache(context + max(n_tokens) + 1, batch=batch)
    model.forward(ctx, cache, last_only=True)
    cache.commit()
    out = []
    total = len(n_tokens) * (repeats + 1)
    done = 0
    for n in n_tokens:
        toks = torch.randint(0, V, (batch, n), generator=gen)
        times = []
        for r in range(repeats + 1):  # first run is a warm-up, not counted
            t0 = time.perf_counter()
            model.forward(toks, cache, blocks=blocks)
            dt = time.perf_counter() - t0
            cache.truncate(context)
            if r:
                times.append(dt * 1000)
            done += 1
            if progress:
                progress(done / total)
        out.append({"n": n, "batch": batch, "ms": statistics.median(times), "min": min(times), "max": max(times)})
    return out
