"""Students' simultaneous rounds as one batched round: a classroom server's "Next round" presses,
coalesced.

Why: every round's target pass reads all the weights, so thirty students pressing at once cost
thirty reads. The engine gate (specviz.serving.concurrency) still admits requests in arrival order; the
request that gets a slot takes every round waiting at that moment (up to `max_batch`, the same
model) and runs them as one `BatchDecoder` step (specviz.serving.batch): one pass, one LM-head call.
Each student's trace is the one their round gets alone (tests/test_batch.py, tests/test_step_batcher.py),
so batching changes when a round is ready, never what it is.

Only where that identity is proven: CPU models whose passes run in the fused block kernel. Elsewhere
(dense weights, CUDA graphs) every round runs alone, as before. `$SPECVIZ_BATCH` caps the batch
(default 8; 1 turns batching off).
"""

from __future__ import annotations

import os
import threading
from contextlib import nullcontext

from .. import SpecVizError
from .batch import BatchDecoder
from ..core.engine import SpeculativeDecoder
from ..core.trace import RoundTrace

DEFAULT_MAX_BATCH = 8


def max_batch_from_env() -> int:
    env = os.environ.get("SPECVIZ_BATCH", "").strip()
    if not env:
        return DEFAULT_MAX_BATCH
    if not env.isdigit() or int(env) < 1:
        raise SpecVizError(f"SPECVIZ_BATCH must be a whole number >= 1, got {env!r}.")
    return int(env)


class _Request:
    __slots__ = ("decoder", "done", "trace", "error")

    def __init__(self, decoder: SpeculativeDecoder):
        self.decoder, self.done, self.trace, self.error = decoder, threading.Event(), None, None


def batchable(decoder: SpeculativeDecoder) -> bool:
    """Whether this decoder's rounds may share a pass: a CPU model with the fused block kernel."""
    return decoder.model.kernel_armed


class StepBatcher:
    """Runs `decoder.step()` for many threads, batching the rounds that wait at the same time."""

    def __init__(self, max_batch: int = DEFAULT_MAX_BATCH):
        if max_batch < 1:
            raise SpecVizError(f"A batch holds at least 1 round, got {max_batch!r}.")
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._pending: list[_Request] = []
        self.batches = 0  # batched steps run (stats for the load test and tests)
        self.rounds = 0  # rounds run through them

    def step(self, decoder: SpeculativeDecoder, slot=nullcontext) -> RoundTrace:
        """The decoder's next round. `slot()`: the engine gate's context (held while computing); a
        request another holder took is computed there, and this thread waits for it outside the gate."""
        if self.max_batch == 1 or not batchable(decoder):
            with slot():
                return decoder.step()
        req = _Request(decoder)
        with self._lock:
            self._pending.append(req)
        with slot():
            batch = self._take(req)
            if batch:
                self._run(batch)
        req.done.wait()
        if req.error is not None:
            raise req.error
        return req.trace

    def _take(self, req: _Request) -> list[_Request]:
        """`req` and the rounds waiting after it on the same model, in arrival order (empty when
        another holder has taken `req` already)."""
        with self._lock:
            if req not in self._pending:
                return []
            model = req.decoder.model
            batch = [r for r in self._pending if r.decoder.model is model][: self.max_batch]
            if req not in batch:  # older requests of this model first; `req` always rides along
                batch = [req] + batch[: self.max_batch - 1]
            for r in batch:
                self._pending.remove(r)
            return batch

    def _run(self, batch: list[_Request]) -> None:
        try:
            live = [r for r in batch if not r.decoder.done]
            for r in batch:
                if r.decoder.done:
                    r.error = SpecVizError("Generation has finished: start again for more.")
            if len(live) == 1:
                live[0].trace = live[0].decoder.step()
            elif live:
                snaps = [r.decoder.snapshot() for r in live]
                try:
                    rnd = BatchDecoder([r.decoder for r in live]).step()
                    for r, t in zip(live, rnd.traces):
                        r.trace = t
                    self.batches += 1
                    self.rounds += len(live)
                except Exception:  # noqa: BLE001 - rewind every sequence and run each alone: errors stay its own
                    for r, s in zip(live, snaps):
                        r.decoder.restore(s)
                    for r in live:
                        try:
                            r.trace = r.decoder.step()
                        except Exception as e:  # noqa: BLE001
                            r.error = e
        except BaseException as e:  # never leave a waiter hanging
            for r in batch:
                if r.trace is None and r.error is None:
                    r.error = e
            raise
        finally:
            for r in batch:
                if r.trace is None and r.error is None:
                    r.error = SpecVizError("The round was not computed.")
                r.done.set()


_BATCHER: StepBatcher | None = None
_BATCHER_LOCK = threading.Lock()


def batcher() -> StepBatcher:
    """The process-wide batcher (`$SPECVIZ_BATCH` read on first use)."""
    global _BATCHER
    with _BATCHER_LOCK:
        if _BATCHER is None:
            _BATCHER = StepBatcher(max_batch_from_env())
        return _BATCHER
