"""Started decoders shared by prompt: the prompt's prefill (and the drafter's setup, e.g. loading
an EAGLE head) runs once per server process, and each Start gets its own copy.

In a classroom most students press Start on the same example prompt, and 30 prefills in a burst
were the longest queue of the load test. What `SpeculativeDecoder.start` computes does not
depend on the seed or the sampling settings (it draws nothing: the generator is only seeded), so
a decoder started once for (model, method, draft settings, prompt ids, token budget) is kept as
a prototype, and a Start deep-copies it: its KV cache, drafter state and lists become the new
session's own, while the read-only weights (every `torch.nn.Module` and `TargetModel`, the
target and its tokenizer) stay shared. The copy then takes the session's own sampling settings and seed.
A copy is byte-for-byte the decoder a fresh start gives (tests/test_app.py checks every method).

Only where KV caches are plain tensors (not `model.pooled_caches`: the CPU path; CUDA graphs
pool their caches) - elsewhere a Start prefills as before.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict

import torch

from ..core.engine import SpeculativeDecoder
from ..core.sampling import SamplingParams
from ..core.target import TargetModel

WEIGHTS = (torch.nn.Module, TargetModel)  # read-only after loading: shared by every copy (a draft model too)

LIMIT = 16  # prototypes kept (each holds one prompt's KV cache: a few MB for SmolLM2-135M)

_PROTOS: OrderedDict = OrderedDict()
_LOCK = threading.Lock()


def shareable(target) -> bool:
    return not target.model.pooled_caches


def _shared_objects(dec: SpeculativeDecoder) -> dict:
    """deepcopy memo that keeps the weights shared: the target, its tokenizer and every module
    the decoder or its drafter points at."""
    memo = {id(dec.target): dec.target, id(dec.tok): dec.tok}
    for obj in (dec, dec.drafter):
        for v in vars(obj).values():
            if isinstance(v, WEIGHTS):
                memo[id(v)] = v
    return memo


def clone_started(proto: SpeculativeDecoder, params: SamplingParams, seed: int) -> SpeculativeDecoder:
    """A copy of a started decoder with its own state, sampling settings and seed."""
    dec = copy.deepcopy(proto, _shared_objects(proto))
    dec.params, dec.seed = params, int(seed)
    dec.generator.manual_seed(int(seed))  # start() only seeds it; nothing was drawn yet
    return dec


def prototype(key: tuple, target, build) -> SpeculativeDecoder:
    """The started decoder for `key` (built by `build()` on a miss; call inside the engine gate)."""
    with _LOCK:
        hit = _PROTOS.get(key)
        if hit is not None and hit[0] is target:
            _PROTOS.move_to_end(key)
            return hit[1]
    proto = build()
    with _LOCK:
        _PROTOS[key] = (target, proto)
        while len(_PROTOS) > LIMIT:
            _PROTOS.popitem(last=False)
    return proto


def clear() -> None:
    with _LOCK:
        _PROTOS.clear()
