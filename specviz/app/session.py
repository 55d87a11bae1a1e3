"""One browser session's engine work: the sequence stepped on the Decode page (a `Session`
with `traces`, `done`, `step`, `replay`) and whole generations for the other pages. Only the
engine calls run inside the gate; token texts and checks run outside it."""

from __future__ import annotations

import json

import streamlit as st

from ..core.engine import SpeculativeDecoder
from ..serving.step_batcher import batcher
from . import prefill
from .figcache import cached
from .gate import heavy_work
from .methods import make_drafter, tree_settings_for
from .prompts import check_prompt, prompt_ids
from .state import sampling_params


class Session:
    """One sequence being stepped round by round; pages use `traces`, `done`, `step`, `replay`."""

    def __init__(self, key: tuple, decoder: SpeculativeDecoder, prompt: str, method: str, seed: int):
        self.key, self.decoder, self.prompt, self.method, self.seed = key, decoder, prompt, method, seed
        self.snaps: list = []  # decoder snapshot before round i (for replay)

    @property
    def traces(self) -> list:
        return self.decoder.traces

    @property
    def done(self) -> bool:
        return self.decoder.done

    def step(self):
        """Run the next round; returns its trace. Rounds that other sessions start at the same
        moment share one target pass with it (specviz.serving.step_batcher): the trace is the same."""
        dec = self.decoder
        self.snaps = self.snaps[: len(dec.traces)]
        self.snaps.append(dec.snapshot())
        return batcher().step(dec, heavy_work)

    def replay(self, i: int):
        """Rewind to just before round i and run it again; later rounds are dropped."""
        dec = self.decoder
        dec.restore(self.snaps[i])
        self.snaps = self.snaps[: i + 1]
        return batcher().step(dec, heavy_work)


def config_key(s: dict, prompt: str) -> tuple:
    return (s["dtype"], s["method"], tuple(sorted(tree_settings_for(s["method"], s).items())),
            float(s["temperature"]), int(s["top_k"]), float(s["top_p"]), int(s["seed"]), int(s["max_new"]), prompt)


def started_decoder(target, s: dict, ids: list[int], params) -> SpeculativeDecoder:
    """A decoder with the prompt prefilled: a copy of the process's prototype for this prompt and
    draft setting (specviz.app.prefill) where caches are plain tensors, else a fresh start."""
    def fresh(params=params, seed=int(s["seed"])):
        dec = SpeculativeDecoder(target, make_drafter(s["method"], target, s), params, seed=seed)
        dec.start(ids, int(s["max_new"]))
        return dec

    if not prefill.shareable(target):
        with heavy_work():
            return fresh()
    key = (id(target), s["method"], tuple(sorted(tree_settings_for(s["method"], s).items())), tuple(ids), int(s["max_new"]))
    with heavy_work():
        proto = prefill.prototype(key, target, fresh)
    return prefill.clone_started(proto, params, int(s["seed"]))


def start_session(target, s: dict, prompt: str) -> Session:
    """A new sequence with the settings `s`, prefilled; stored as this browser session's "dec"."""
    typed = prompt  # the key compares with what the prompt box holds, cleaned or not
    prompt = check_prompt(prompt)
    params = sampling_params(s)
    ids = prompt_ids(target, prompt)
    dec = started_decoder(target, s, ids, params)
    sess = Session(config_key(s, typed), dec, prompt, s["method"], int(s["seed"]))
    st.session_state["dec"] = sess
    return sess


def same_trace(a, b) -> bool:
    """Traces equal up to timings (each trace's JSON from the page's memo: the download button
    serves the same text, so it is built once)."""
    da, db = (json.loads(cached("json", x, build=x.to_json)) for x in (a, b))
    for d in (da, db):
        for k in ("draft_time_s", "verify_time_s", "total_time_s"):
            d.pop(k, None)
    return da == db


def run_generation(target, s: dict, prompt: str, method: str, progress=None):
    """Generate with `method` (detail off for fair timing); token texts filled afterwards."""
    ids = prompt_ids(target, prompt)
    with heavy_work():
        dec = SpeculativeDecoder(target, make_drafter(method, target, s), sampling_params(s), seed=int(s["seed"]), detail=False)
        res = dec.generate(ids, int(s["max_new"]), progress=progress)
    tok = target.tokenizer
    for trc in res.traces:
        trc.committed_text = [tok.token_text(x) for x in trc.committed]
        trc.extra_text = tok.token_text(trc.extra_token)
    return res


def first_round(target, s: dict, prompt: str, method: str):
    """The first round of `method` on `prompt`, detailed (texts, top lists): for a picture."""
    with heavy_work():
        dec = SpeculativeDecoder(target, make_drafter(method, target, s), sampling_params(s), seed=int(s["seed"]))
        dec.start(prompt_ids(target, prompt), int(s["max_new"]))
        return dec.step()


TIMED_REPEATS = 3  # each method's timed run, taken this many times in turns with the others


def run_alternating(target, s: dict, prompt: str, methods: list[str], repeats: int = TIMED_REPEATS, progress=None) -> dict:
    """{method: (its median-speed run, every run's tokens/s)}, the methods' runs taken in turns.

    Why: this machine's speed wanders 10-30% from one second to the next (and a classroom server has
    other users), so one run of each method makes a speedup partly out of noise. In turns (A, B, A,
    B, ...) a drift hits every method alike, and the median run of each is the one shown. The tokens
    are the same every time (same seed); only the clock differs. `progress(runs done, total runs)` is
    called after each round, in fractions of a run."""
    runs: dict[str, list] = {m: [] for m in methods}
    total, done = repeats * len(methods), 0
    for _ in range(repeats):
        for m in methods:
            within = (lambda n, budget, d=done: progress(d + n / max(1, budget), total)) if progress else None
            runs[m].append(run_generation(target, s, prompt, m, progress=within))
            done += 1
    out = {}
    for m, rs in runs.items():
        ordered = sorted(rs, key=lambda r: r.tokens_per_s)
        out[m] = (ordered[(len(ordered) - 1) // 2], [r.tokens_per_s for r in rs])
    return out
