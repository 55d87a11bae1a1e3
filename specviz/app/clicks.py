"""Which tree node a click selected: Streamlit keeps a chart's selection in session state."""

from __future__ import annotations

import streamlit as st


def clicked_node(chart_key: str) -> int | None:
    """Node id clicked in the chart `chart_key`, or None. Read *before* drawing, so the highlight
    and the panels that follow it change in the same run (no st.rerun)."""
    state = st.session_state.get(chart_key)
    try:
        pts = state["selection"]["points"] if state else []
    except (KeyError, TypeError):
        pts = []
    if not pts or pts[0].get("customdata") is None:
        return None
    cd = pts[0]["customdata"]
    return int(cd[0] if isinstance(cd, (list, tuple)) else cd)
