"""A fair, bounded gate around heavy engine work, shared by every session of one server.

Many students on one machine: each session's decoder (KV cache, RNG, traces) is its own, but
the CPU/GPU is shared. Without a gate, ten sessions pressing "Next round" at once run ten
forwards in parallel, each with torch's full thread pool, and the cores thrash. The gate lets
`workers` computations run at a time and queues the rest in arrival order (FIFO tickets), so
every request is served and none starves; a waiting request can report how many are ahead.

Sizes: `$SPECVIZ_WORKERS` when set; on a GPU max(1, cores // 2); on a CPU 1 (one forward with
cores - 1 threads already uses the machine), except with 2 or 3 cores, where that forward gets a
single thread and a second worker lets the other core compute instead of waiting for the page
(30 EAGLE-3 students on 2 cores: p95 5.8 s with one worker, 3.6 s with two; README). Torch's
intra-op threads are set so that the running workers together use the cores once, leaving one
core for Streamlit's own threads (page reruns, figure building) and the OS:
max(1, (cores - 1) // workers) on CPU; more threads than that make OpenMP spin against the busy
page threads. Drawing a stepped round has its own one-slot FIFO
gate (`draw_gate`). Measurements: README, "Serving a classroom".
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from contextlib import contextmanager

import torch
from streamlit import runtime

from .. import SpecVizError


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_workers(cuda: bool | None = None) -> int:
    env = os.environ.get("SPECVIZ_WORKERS", "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            raise SpecVizError(f"SPECVIZ_WORKERS must be a whole number >= 1, got {env!r}.") from None
        if n < 1:
            raise SpecVizError(f"SPECVIZ_WORKERS must be a whole number >= 1, got {env!r}.")
        return n
    if cuda is None:
        cuda = torch.cuda.is_available()
    cores = _cores()
    if cuda:
        return max(1, cores // 2)
    return 2 if 2 <= cores <= 3 else 1


class WorkGate:
    """At most `workers` holders at a time; waiters are admitted strictly in arrival order."""

    def __init__(self, workers: int = 1):
        if int(workers) < 1:
            raise SpecVizError(f"The worker gate needs at least 1 worker, got {workers!r}.")
        self.workers = int(workers)
        self._cond = threading.Condition()
        self._tickets = itertools.count()
        self._queue: list[int] = []  # tickets waiting, in order
        self._running = 0
        self.served = 0
        self.max_waiting = 0

    def waiting(self) -> int:
        with self._cond:
            return len(self._queue)

    def running(self) -> int:
        with self._cond:
            return self._running

    @contextmanager
    def slot(self, on_wait=None, timeout: float | None = None, poll: float = 0.25, notice_every: float = 1.0):
        """Hold one slot for the `with` body. While queued, `on_wait(n_ahead)` is called when the
        number of requests ahead changes (n_ahead counts running ones too), at most once per
        `notice_every` s: each call redraws a page element, and with 30 students queued a notice
        per change is ~30 x 29 / 2 redraws per wave, all under the one GIL the computations need.
        After `timeout` s of waiting a SpecVizError is raised and the request leaves the queue."""
        with self._cond:
            me = next(self._tickets)
            self._queue.append(me)
            self.max_waiting = max(self.max_waiting, len(self._queue))
            t0 = time.monotonic()
            last, last_t = None, -notice_every
            try:
                while not (self._running < self.workers and self._queue[0] == me):
                    ahead = self._queue.index(me) + self._running
                    now = time.monotonic()
                    if on_wait is not None and ahead != last and now - last_t >= notice_every:
                        last, last_t = ahead, now
                        self._cond.release()  # never call UI code while holding the lock
                        try:
                            on_wait(ahead)
                        finally:
                            self._cond.acquire()
                        continue
                    if timeout is not None and time.monotonic() - t0 > timeout:
                        raise SpecVizError(f"The server is busy: still {ahead} requests ahead after {timeout:.0f} s. Try again.")
                    self._cond.wait(poll)
            except BaseException:
                self._queue.remove(me)
                self._cond.notify_all()
                raise
            self._queue.pop(0)
            self._running += 1
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self.served += 1
                self._cond.notify_all()


_GATE: WorkGate | None = None


def _serving() -> bool:
    """True inside a real Streamlit server (not AppTest or a plain import): only a server owns
    the process's torch thread setting."""
    try:
        return runtime.exists() and type(runtime.get_instance()).__name__ == "Runtime"
    except Exception:  # noqa: BLE001
        return False
_LOCK = threading.Lock()


def server_threads(workers: int | None = None) -> int:
    """The intra-op thread count a server uses on CPU: `$SPECVIZ_TORCH_THREADS`, else
    max(1, (cores - 1) // workers). (Float reductions depend on it: a solo run meant to match a
    server's traces bit for bit must use the same count.)"""
    env = os.environ.get("SPECVIZ_TORCH_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, (_cores() - 1) // max(1, workers if workers is not None else default_workers(cuda=False)))


def configure_threads(workers: int, cuda: bool | None = None) -> int:
    """Give torch `server_threads(workers)` intra-op threads on CPU (process-wide); returns it."""
    if cuda is None:
        cuda = torch.cuda.is_available()
    n = server_threads(workers)
    if not cuda and torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


_DRAW_GATE = WorkGate(1)


def draw_gate() -> WorkGate:
    """A second FIFO gate, one slot, for drawing a stepped round: page Python runs under one GIL
    anyway, so drawing in arrival order loses nothing and keeps the last student's wait at one
    queue's length (with thirty threads drawing at once the GIL's hand-overs are not in order);
    the engine gate stays separate, so one session's round computes while another's is drawn."""
    return _DRAW_GATE


def gate() -> WorkGate:
    """The process-wide gate (created on first use, with the thread count set to match)."""
    global _GATE
    with _LOCK:
        if _GATE is None:
            workers = default_workers()
            if _serving():
                configure_threads(workers)
            _GATE = WorkGate(workers)
        return _GATE
