"""The classroom server's coalescing of simultaneous rounds (specviz.serving.step_batcher): rounds that wait
at the same moment share one pass, and every session still gets exactly its solo round."""

import dataclasses
import threading
import time

import pytest

from specviz import SpecVizError, methods
from specviz.serving.concurrency import WorkGate
from specviz.core.engine import SpeculativeDecoder
from specviz.examples import EXAMPLE_PROMPTS
from specviz.core.sampling import SamplingParams
from specviz.serving.step_batcher import StepBatcher, max_batch_from_env

SETTINGS = [("eagle3", 0.0), ("pld", 1.0), ("vanilla", 0.0), ("medusa", 0.7), ("eagle1", 1.0), ("eagle3", 0.8)]
ROUNDS = 3


def _strip(trace) -> dict:
    d = dataclasses.asdict(trace)
    for k in ("draft_time_s", "verify_time_s", "total_time_s"):
        d.pop(k)
    return d


def _decoder(target, method, temperature, k, drafter=None):
    d = drafter or (methods.make_drafter(method, target, tree_size="paper") if methods.get(method).tunable
                    else methods.make_drafter(method, target))
    dec = SpeculativeDecoder(target, d, SamplingParams(temperature=temperature), seed=10 + k)
    dec.start(EXAMPLE_PROMPTS[k], 24)
    return dec


def _solo(target):
    out = []
    for k, (m, temp) in enumerate(SETTINGS):
        dec = _decoder(target, m, temp, k)
        out.append([_strip(dec.step()) for _ in range(ROUNDS)])
    return out


def _press_at_once(batcher, decs, gate):
    """Every session presses "Next round" while the gate is busy, then the gate frees up: the
    first request admitted takes all the waiting rounds. (With batching off nothing queues: each
    press waits on the gate itself, so there is no queue to wait for.)"""
    results = [None] * len(decs)
    queued = len(decs) if batcher.max_batch > 1 else 0

    def press(i):
        try:
            results[i] = batcher.step(decs[i], gate.slot)
        except Exception as e:  # noqa: BLE001
            results[i] = e

    with gate.slot():
        threads = [threading.Thread(target=press, args=(i,)) for i in range(len(decs))]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(batcher._pending) < queued and time.monotonic() < deadline:
            time.sleep(0.01)
    for t in threads:
        t.join(120)
    return results


@pytest.mark.slow
def test_simultaneous_rounds_share_a_pass_and_equal_their_solo_rounds(target):
    solo = _solo(target)
    decs = [_decoder(target, m, temp, k) for k, (m, temp) in enumerate(SETTINGS)]
    batcher, gate = StepBatcher(max_batch=8), WorkGate(1)
    got = [[] for _ in decs]
    for r in range(ROUNDS):
        res = _press_at_once(batcher, decs, gate)
        assert batcher.batches == r + 1  # one batched round per wave
        for i, t in enumerate(res):
            assert not isinstance(t, Exception), t
            got[i].append(_strip(t))
    assert batcher.rounds == ROUNDS * len(decs)
    assert got == solo


def test_a_batch_is_capped_and_the_rest_follow_in_order(target):
    decs = [_decoder(target, "pld", 0.0, k) for k in range(5)]
    batcher = StepBatcher(max_batch=2)
    res = _press_at_once(batcher, decs, WorkGate(1))
    assert all(not isinstance(t, Exception) for t in res)
    assert batcher.batches == 2 and batcher.rounds == 4  # 2 + 2 shared passes, then the fifth alone (a solo step)


@pytest.mark.slow
def test_a_failing_round_fails_alone(target):
    """A drafter that breaks inside a batch: every sequence is rewound and run alone, so the others
    get their solo rounds and only the broken one sees its error."""

    class Broken(type(methods.make_drafter("pld", target))):
        def propose(self, *a, **k):
            raise RuntimeError("planted")

    solo = _solo(target)
    decs = [_decoder(target, m, temp, k) for k, (m, temp) in enumerate(SETTINGS)]
    decs[2] = _decoder(target, "pld", 0.0, 2, drafter=Broken())
    res = _press_at_once(StepBatcher(max_batch=8), decs, WorkGate(1))
    assert isinstance(res[2], RuntimeError) and "planted" in str(res[2])
    for i, t in enumerate(res):
        if i != 2:
            assert _strip(t) == solo[i][0], SETTINGS[i]


def test_batching_can_be_switched_off_and_a_finished_decoder_says_so(target, monkeypatch):
    monkeypatch.setenv("SPECVIZ_BATCH", "1")
    assert max_batch_from_env() == 1
    monkeypatch.setenv("SPECVIZ_BATCH", "zero")
    with pytest.raises(SpecVizError, match="SPECVIZ_BATCH"):
        max_batch_from_env()
    decs = [_decoder(target, "vanilla", 0.0, k) for k in range(3)]
    off = StepBatcher(max_batch=1)
    _press_at_once(off, decs, WorkGate(1))
    assert off.batches == 0
    decs[1].done = True
    res = _press_at_once(StepBatcher(), decs, WorkGate(1))
    assert isinstance(res[1], SpecVizError) and "finished" in str(res[1])
    assert not isinstance(res[0], Exception) and not isinstance(res[2], Exception)
