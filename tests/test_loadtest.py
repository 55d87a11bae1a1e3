"""Many students at once: the worker gate (fast unit tests) and the load test (10 real sessions on a
loopback server, each checked byte for byte against a solo run; marked slow, still run in CI)."""

from __future__ import annotations

import threading
import time

import pytest
from _load import check_load_result

from specviz import SpecVizError
from specviz.serving.concurrency import WorkGate, configure_threads, default_workers, server_threads


def test_gate_bounds_and_fifo_order():
    gate = WorkGate(2)
    order, running, peak = [], [0], [0]
    lock = threading.Lock()
    first_in = threading.Event()

    def job(i):
        with gate.slot():
            with lock:
                order.append(i)
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            first_in.set()
            time.sleep(0.03)
            with lock:
                running[0] -= 1

    threads = []
    for i in range(8):
        th = threading.Thread(target=job, args=(i,))
        th.start()
        threads.append(th)
        deadline = time.time() + 5  # arrival order 0, 1, 2, ...: wait until i has its ticket
        while gate.waiting() + gate.running() + gate.served < i + 1 and time.time() < deadline:
            time.sleep(0.001)
    for th in threads:
        th.join(10)
    assert peak[0] == 2
    assert order == sorted(order), order  # admitted in arrival order
    assert gate.served == 8 and gate.waiting() == 0 and gate.running() == 0


def test_gate_reports_requests_ahead_and_times_out():
    gate = WorkGate(1)
    release = threading.Event()
    held = threading.Event()

    def holder():
        with gate.slot():
            held.set()
            release.wait(5)

    th = threading.Thread(target=holder)
    th.start()
    held.wait(5)
    seen = []
    with pytest.raises(SpecVizError, match="busy"):
        with gate.slot(on_wait=seen.append, timeout=0.3, poll=0.05):
            pass
    assert seen == [1]  # one request (the running one) ahead
    assert gate.waiting() == 0  # the timed-out request left the queue
    release.set()
    th.join(5)
    with gate.slot(timeout=1):  # and the gate still works
        pass


def test_gate_exception_in_body_frees_the_slot():
    gate = WorkGate(1)
    with pytest.raises(ValueError):
        with gate.slot():
            raise ValueError("boom")
    with gate.slot(timeout=1):
        assert gate.running() == 1


def test_worker_and_thread_settings(monkeypatch):
    import torch

    monkeypatch.setenv("SPECVIZ_WORKERS", "3")
    assert default_workers() == 3
    monkeypatch.setenv("SPECVIZ_WORKERS", "zero")
    with pytest.raises(SpecVizError):
        default_workers()
    monkeypatch.delenv("SPECVIZ_WORKERS")
    monkeypatch.delenv("SPECVIZ_TORCH_THREADS", raising=False)
    for cores, workers, threads in [(1, 1, 1), (2, 2, 1), (3, 2, 1), (4, 1, 3), (16, 1, 15)]:
        monkeypatch.setattr("specviz.serving.concurrency._cores", lambda c=cores: c)
        assert default_workers(cuda=False) == workers
        assert server_threads() == threads  # every core computes once; the page gets the spare one
    monkeypatch.undo()
    old = torch.get_num_threads()
    try:
        n = configure_threads(1, cuda=False)
        assert n >= 1 and torch.get_num_threads() == n
    finally:
        torch.set_num_threads(old)
    with pytest.raises(SpecVizError):
        WorkGate(0)


def test_canonical_drops_only_timings():
    from specviz.serving.loadtest import canonical

    a = canonical('{"b": 1, "draft_time_s": 0.5, "verify_time_s": 1, "total_time_s": 2, "a": [1, 2]}')
    assert a == canonical('{"a": [1, 2], "b": 1, "draft_time_s": 9}')
    assert a != canonical('{"a": [2, 1], "b": 1}')


def test_loadtest_refuses_non_loopback():
    from specviz.serving.loadtest import run

    with pytest.raises(SystemExit, match="loopback"):
        run("http://192.0.2.1:8501", 2, 1, 5)


@pytest.mark.slow
def test_ten_simultaneous_sessions_match_solo_runs(target, capsys):
    """`python -m specviz.serving.loadtest --sessions 10`: a real server on 127.0.0.1, ten sessions at once
    through start, next round x3, replay; every trace equals the solo run's, no error element."""
    from specviz.serving.loadtest import run
    from specviz.serving.server import streamlit_server

    extra = ["--server.enableAgentApi", "true", "--server.agentWaitTimeout", "300"]
    with streamlit_server(extra) as url:
        res = run(url, 10, 3, 300, target=target)
    check_load_result(res, 10, 5, "load test", capsys)


def test_shared_model_untouched_by_concurrent_decoders(target):
    """Decoders on the one shared target, run at the same time without any gate (the worst case of
    several workers), give exactly their solo traces, and no weight changes."""
    import torch

    from specviz.serving.loadtest import make_plans, solo_traces

    def digest():
        return [float(p.double().sum()) for p in (target.model.embed, target.model.norm, target.model.lm_head)]

    old = torch.get_num_threads()
    torch.set_num_threads(1)  # several decoders at once on few cores: one intra-op thread each
    try:
        before = digest()
        plans = make_plans(3, 1, max_new=8)
        solo = {p.index: solo_traces(p, 1, target) for p in plans}
        got, errs = {}, []

        def work(p):
            try:
                got[p.index] = solo_traces(p, 1, target)
            except Exception as e:  # noqa: BLE001
                errs.append(repr(e))

        threads = [threading.Thread(target=work, args=(p,)) for p in plans]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
    finally:
        torch.set_num_threads(old)
    assert not errs, errs
    assert got == solo
    assert digest() == before


def test_waiting_notice_text():
    from specviz.app.gate import _show_wait

    class Slot:
        def info(self, msg, icon=None):
            self.msg = msg

    slot = Slot()
    _show_wait(slot)(2)
    assert slot.msg.startswith("Waiting for 2 requests ahead")
    _show_wait(slot)(1)
    assert "1 request ahead" in slot.msg and "one computation at a time" in slot.msg
    _show_wait(slot, 2)(3)
    assert "3 requests ahead" in slot.msg and "2 computations at a time" in slot.msg
