"""Per-session memo of what a page builds from one round trace (figures, HTML, JSON).

A round trace never changes once made, so whatever is built from it with the same options is
built once: switching stages, clicking back to a round or pressing Next does not rebuild the
rounds already drawn. Keyed by the trace object itself (its id, with the object kept alive in
the entry so the id cannot be reused), the kind and the options; at most `LIMIT` entries."""

from __future__ import annotations

import streamlit as st

LIMIT = 48


def cached(kind: str, trace, *options, build):
    memo = st.session_state.setdefault("_trace_memo", {})
    key = (kind, id(trace), *options)
    hit = memo.get(key)
    if hit is not None and hit[0] is trace:
        return hit[1]
    if len(memo) >= LIMIT:
        memo.clear()
    value = build()
    memo[key] = (trace, value)
    return value
