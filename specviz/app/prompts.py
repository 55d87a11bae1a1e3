"""The prompt: example prompts, limits, its token ids, and the prompt box every page shares
(one value per browser session, carried in the URL as ?prompt=)."""

from __future__ import annotations

import streamlit as st

from .. import SpecVizError
from ..examples import EXAMPLE_PROMPTS
from ..runtime.tokenizer import clean_prompt
from .state import tr

EXAMPLES = [
    # the first is every page's default: the prompt of Home's recorded EAGLE-3 round, so "Generate"
    # runs live what the page just showed (code is predictable: EAGLE-3 drafts it far better than
    # the sky prompt below; docs/results-history.md has the measured speeds)
    "Write a Python function that returns the sum of a list of numbers.",
    "Explain in two sentences why the sky is blue.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Summarise: The cat sat on the mat. The cat was happy on the mat because the mat was warm.",
    "List the planets of the solar system in order from the Sun.",
    "用一句话解释什么是机器学习。",
]
EXAMPLES += [p for p in EXAMPLE_PROMPTS if p not in EXAMPLES][:20]  # the project's shared prompts, after ours

MAX_PROMPT_CHARS = 4000  # the text area's limit; a deep link (?prompt=) must not bypass it


def check_prompt(prompt: str | None) -> str:
    if prompt is None or not clean_prompt(prompt).strip():
        raise SpecVizError(tr("c.empty_prompt"))
    text = clean_prompt(prompt)
    if len(text) > MAX_PROMPT_CHARS:
        raise SpecVizError(tr("c.prompt_too_long", n=len(text), max=MAX_PROMPT_CHARS))
    return text


def prompt_ids(target, prompt: str) -> list[int]:
    """Token ids of the one-turn chat for `prompt`, checked (empty, too long) and encoded by the
    tokenizer's one safe path: chat markers typed by a user stay ordinary text."""
    return target.tokenizer.safe_chat_ids(check_prompt(prompt))


# ---------------------------------------------------------------------- the prompt box
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
    st.text_area(tr("c.prompt"), key=key, height=90, max_chars=MAX_PROMPT_CHARS, on_change=_sync_prompt, args=(page,))
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
