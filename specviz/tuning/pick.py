"""The timed pick: the shortlist and vanilla decoded on real rounds of built-in prompts, greedy and
at T = 1, once per device and profile (cached with the costs); the fastest measured tree wins."""

from __future__ import annotations

import math

import torch

from .. import SpecVizError
from ..drafters.base import DRAFT_VOCAB, LOOKUP_TOKENS, NoDraft
from ..core.engine import SpeculativeDecoder
from ..examples import EXAMPLE_PROMPTS
from ..core.sampling import SamplingParams
from .costs import save_costs, device_costs
from .profiles import load_profile
from .ranking import (SHORTLIST_PROMPTS, SHORTLIST_TOKENS, profile_dir, candidate_shape, profile_id, rank_trees,
                      shape_key, shortlist)

@torch.no_grad()
def time_candidates(target, drafter, profile: dict, cands: list[dict], prompts, max_new_tokens: int,
                    params: SamplingParams = SamplingParams()) -> tuple[list, dict]:
    """Decode-time tokens/s and tau of each candidate tree and of vanilla (at `params`), the prompts
    taking turns and each prompt starting one method further on; `speedup`: the geometric mean over
    the prompts of each candidate's rate over vanilla's on the same prompt. Why paired: this VM's
    speed wanders by 10-20% from one second to the next, and runs of one prompt sit close in time."""
    runs = [*cands, None]  # None: vanilla
    secs, toks, rounds, nodes = [0.0] * len(runs), [0] * len(runs), [0] * len(runs), [0] * len(runs)
    log_ratio = [0.0] * len(cands)
    for j, prompt in enumerate(prompts):
        k = j % len(runs)
        rate = [0.0] * len(runs)
        for i in [*range(k, len(runs)), *range(k)]:
            if runs[i] is not None:
                drafter.reshape(candidate_shape(profile, runs[i]))
            dec = SpeculativeDecoder(target, drafter if runs[i] is not None else NoDraft(), params, seed=0, detail=False)
            dec.start(prompt, max_new_tokens)
            s = n = 0
            while not dec.done:
                t = dec.step()
                s, n, rounds[i], nodes[i] = s + t.total_time_s, n + len(t.committed), rounds[i] + 1, nodes[i] + len(t.nodes)
            secs[i], toks[i], rate[i] = secs[i] + s, toks[i] + n, n / s
        for i in range(len(cands)):
            log_ratio[i] += math.log(rate[i] / rate[-1])
    out = [dict(c, measured_tok_s=toks[i] / secs[i], measured_tau=toks[i] / rounds[i], measured_nodes=nodes[i] / rounds[i],
                speedup=math.exp(log_ratio[i] / len(prompts))) for i, c in enumerate(cands)]
    return out, dict(tok_s=toks[-1] / secs[-1])


SAMPLED_AT = SamplingParams(temperature=1.0)  # the temperature the trees for T > 0 are timed at
# How a tuned drafter drafts besides its tree (specviz.methods.tune builds the timed drafter so): a pick
# timed with other drafting is timed again, since the best tree depends on it (a lookup branch that
# joins a greedy round makes its pass longer).
TUNED_DRAFTING = {"draft_vocab": DRAFT_VOCAB, "lookup": LOOKUP_TOKENS}


def tuned_tree(target, method: str, head_dir=None, log=None, build=None, measure: bool = True) -> dict | None:
    """The best tree for `method` here, or None when the head ships no profile. The head's shipped
    profile x this device's costs rank every tree; the shortlist (`shortlist`) and vanilla are then
    timed on real rounds of a few built-in prompts (once per device and profile, cached with the
    costs) and the fastest measured tree wins. Why both: the model is cheap and covers every size,
    but its errors are as large as the differences between the best trees on a CPU, where it once
    picked a tree slower than a 2-node one (docs/runtime.md, "Measured reasons behind code choices").
    The profile is greedy, so the shortlist is timed twice: greedy (the returned tree) and at
    T = 1 (`best["sampled"]`, the tree a drafter uses at any T > 0). Why: sampled rounds accept
    less, and a greedy pick (depth 2 with a path floor) once ran 0.92x vanilla at T = 1 where a
    2-node tree ran 1.00x.
    `head_dir`: default, the shipped folder holding the method's profile; `build`: see
    `device_costs` (specviz.methods.tune passes both). `measure=False`: only what was measured
    before (None when anything is missing): building a drafter never starts a timing run."""
    head_dir = head_dir or profile_dir(target.model.name, method)
    profile = load_profile(head_dir, method) if head_dir else None
    if profile is None:
        return None
    costs = device_costs(target, method, profile, log=log, build=build, measure=measure)
    if costs is None:
        return None
    ranked = rank_trees(profile, costs, method)
    picks = [_timed_pick(target, method, profile, costs, ranked, build, p, log, measure) for p in (SamplingParams(), SAMPLED_AT)]
    if None in picks:
        return None
    best = _measured_best(profile, picks[0])
    best["sampled"] = _measured_best(profile, picks[1])
    return best


def _timed_pick(target, method, profile, costs, ranked, build, params: SamplingParams, log, measure=True) -> dict | None:
    """The shortlist and vanilla timed at `params` (greedy: key `pick.<method>`, else
    `pick.<method>.sampled`), once per device, profile and shortlist, cached with the costs."""
    key = f"pick.{method}" + ("" if params.greedy else ".sampled")
    pick = costs.get(key)
    cands = shortlist(ranked)
    if (isinstance(pick, dict) and pick.get("profile") == profile_id(profile) and pick.get("drafting") == TUNED_DRAFTING
            and [shape_key(c) for c in pick.get("candidates", [])] == [shape_key(c) for c in cands]
            and all("measured_nodes" in c for c in pick["candidates"])):
        return pick
    if not measure:
        return None
    if build is None:
        raise SpecVizError(f"Timing {method}'s best trees needs its drafter: use specviz.methods.tuned_tree.")
    if log:
        log(f"timing {method}'s best trees against vanilla on this device (once, at temperature {params.temperature:g})")
    cands, vanilla = time_candidates(target, build(), profile, cands,
                                     EXAMPLE_PROMPTS[:SHORTLIST_PROMPTS], SHORTLIST_TOKENS, params)
    pick = dict(profile=profile_id(profile), drafting=TUNED_DRAFTING, candidates=cands, vanilla_tok_s=vanilla["tok_s"],
                prompts=SHORTLIST_PROMPTS, max_new_tokens=SHORTLIST_TOKENS, temperature=params.temperature)
    costs[key] = pick
    save_costs(target.model, costs)
    return pick


# Timed speedups this close to the fastest one are a tie: the pick's few short prompts cannot tell them apart
TIE = 0.03


def _measured_best(profile: dict, pick: dict) -> dict:
    """The timed candidate to use, with what the pages say is measured: tau and tokens/s of the
    timed runs (the model's guesses kept beside). Of the candidates within TIE of the fastest, the
    one that verified the fewest tree tokens a round. Why: the timing runs short chat prompts, where
    an extra tree token is cheapest; its attention grows with the context, and in a class's batched
    rounds it competes with other students' tokens. So within the timing's noise fewer is safer
    (docs/tuning.md)."""
    speed = lambda c: c.get("speedup", c["measured_tok_s"])  # noqa: E731
    top = max(speed(c) for c in pick["candidates"])
    near = [c for c in pick["candidates"] if speed(c) >= top * (1 - TIE)]
    best = min(near, key=lambda c: (c.get("measured_nodes", 0.0), -speed(c)))
    best = dict(best, model_tau=best["tau"], model_tok_s=best["tok_s"], tau=best["measured_tau"],
                tok_s=best["measured_tok_s"], vanilla_tok_s=pick["vanilla_tok_s"], kind=profile["kind"],
                temperature=pick.get("temperature", 0.0))
    best["speedup"] = best.get("speedup", best["tok_s"] / best["vanilla_tok_s"])
    if profile["kind"] == "static":
        best["paths"] = profile["paths"][: best["total_tokens"] - 1]
    else:
        best["top_k"] = profile["top_k"]  # the candidates were ranked with this many children per node
    return best


def tree_for(target, method: str, head_dir, tree_size, build=None, measure: bool = False, log=None) -> dict | None:
    """What the registry hands a drafter factory: the tuned tree for `tree_size="auto"`, None for
    the papers' fixed trees (or when `target` is a bare model without the engine's tokenizer).
    `measure=False` (building a drafter): only a tree tuned before; `specviz.methods.tune` measures."""
    if tree_size != "auto" or not hasattr(target, "tokenizer"):
        return None
    return tuned_tree(target, method, head_dir, build=build, measure=measure, log=log)

