"""The fair engine gate as a page sees it: hold a FIFO slot around work on the shared model, and
say how many requests are ahead while waiting. Only engine work goes through it; page Python
(figures, tables, the sidebar) runs outside, so a queued step never waits for another page's drawing."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import streamlit as st

from ..serving.concurrency import gate
from .state import lang


def _show_wait(slot, workers: int = 1):
    def show(ahead: int):
        at_once = "one computation" if workers == 1 else f"{workers} computations"
        msg = (f"Waiting for {ahead} request{'s' if ahead != 1 else ''} ahead (the server runs {at_once} at a time)…"
               if lang() != "zh" else f"排队中：前面还有 {ahead} 个请求（服务器同时运行 {workers} 个计算）……")
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
        with g.slot(on_wait=_show_wait(slot, g.workers) if slot is not None else None, timeout=600):
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
