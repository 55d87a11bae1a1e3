"""Run a mistake beside the correct engine on the same prompt, seed and tree, and collect the evidence.

Every case gives the same record (:class:`CaseResult`): the greedy outputs of vanilla, the correct
engine and the mistaken one (token identity), where it applies the exact one-round check at T = 1
(the enumerated distribution of the round's first token against the user's target, max |diff|),
tau, tokens/s and target work per token of both runs, the expected acceptance of the first draft at
T = 1 (sum of min(p, q)), and for a misreporting case the figure the mistaken code prints beside
the true one. :func:`shown_class` reads the class back from the evidence alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .. import methods
from ..teaching.bugs import get_policy
from ..core.engine import SpeculativeDecoder, TokenRates
from ..lossless.exact import exact_first_token_dist
from ..lossless.oracle import TargetOracle, node_prefixes, proposer_for
from ..core.sampling import SamplingParams
from ..core.target import Target
from . import variants
from .catalog import Mistake, get

EXACT_TOL = 1e-6  # as the Losslessness page: the exact check passes at max |P_round - p| <= this
T1 = SamplingParams(temperature=1.0)  # the exact checks run at T = 1, where every token has mass
GREEDY = SamplingParams()


@dataclass
class Run(TokenRates):
    """One greedy decode: what it produced and what it cost."""

    tokens: list[int]
    rounds: int  # target passes of the decode loop (vanilla: one per token)
    seconds: float
    target_tokens: int  # tokens the target processed after the prefill (the same for every run), extra passes included
    drafted: int = 0  # draft tokens proposed (chain: k per round)
    accepted: int = 0  # draft tokens accepted

    @property
    def work_per_token(self) -> float:
        """Target tokens processed per output token (1/tau for a cached engine; more when uncached)."""
        return self.target_tokens / len(self.tokens) if self.tokens else 0.0


@dataclass
class Printed:
    """The figure the mistaken code prints, and the true value of what it claims to print."""

    what: str  # i18n key of the quantity: "acceptance", "speedup"
    printed: float
    true: float


@dataclass
class CaseResult:
    name: str
    kind: str
    vanilla: Run
    correct: Run
    mistaken: Run
    exact_correct: float | None = None  # max |P_round - p_user| at T = 1 (None: not a property of one round)
    exact_mistaken: float | None = None
    accept_correct: float | None = None  # expected acceptance of the first draft at T = 1
    accept_mistaken: float | None = None
    printed: Printed | None = None
    notes: list[str] = field(default_factory=list)  # i18n keys of what the case measured specially
    baselines: dict[str, Run] = field(default_factory=dict)  # a misreported speedup's two baselines

    @property
    def identical_correct(self) -> bool:
        return self.correct.tokens == self.vanilla.tokens

    @property
    def identical_mistaken(self) -> bool:
        return self.mistaken.tokens == self.vanilla.tokens

    @property
    def first_difference(self) -> int | None:
        """Index of the first token where the mistaken output leaves vanilla's (None: identical)."""
        a, b = self.mistaken.tokens, self.vanilla.tokens
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return i
        return None if len(a) == len(b) else min(len(a), len(b))

    def exact_passes(self, which: str = "mistaken") -> bool | None:
        d = self.exact_mistaken if which == "mistaken" else self.exact_correct
        return None if d is None else d <= EXACT_TOL


def shown_class(r: CaseResult) -> str:
    """The class the evidence shows: breaks (not identical, or the exact check fails), misreports
    (same output, same tau, a printed figure that is not the true one), slower (same output, less tau,
    less acceptance or more work per token), or "none"."""
    if not r.identical_mistaken or r.exact_passes() is False:
        return "breaks"
    if r.printed is not None and r.mistaken.tau == r.correct.tau and abs(r.printed.printed - r.printed.true) > 1e-9:
        return "misreports"
    if (r.mistaken.tau < r.correct.tau or r.mistaken.work_per_token > r.correct.work_per_token
            or (r.accept_mistaken is not None and r.accept_correct is not None and r.accept_mistaken < r.accept_correct)):
        return "slower"
    return "none"


# ------------------------------------------------------------------------------- the runs
def _decode(decoder: SpeculativeDecoder, ids, max_new_tokens: int, extra=None) -> Run:
    res = decoder.generate(ids, max_new_tokens)
    drafted = sum(len(t.nodes) - 1 for t in res.traces)
    accepted = sum(len(t.accepted_nodes) for t in res.traces)
    tokens_in = sum(len(t.nodes) for t in res.traces)  # every round's pass scores the root and all its drafts
    if extra is not None:
        tokens_in += extra.extra_tokens
    return Run(res.tokens, res.rounds + (extra.extra_passes if extra is not None else 0), res.seconds, tokens_in,
               drafted, accepted)


def _timed(fn, target_tokens) -> Run:
    t0 = time.perf_counter()
    toks = fn()
    secs = time.perf_counter() - t0
    return Run(toks, len(toks), secs, target_tokens(toks))


def vanilla_run(target: Target, ids, max_new_tokens: int) -> Run:
    return _decode(SpeculativeDecoder(target, None, GREEDY, detail=False), ids, max_new_tokens)


def _drafter(target: Target, kind: str, **extra):
    if kind == "eagle1-chain":
        return methods.make_drafter("eagle1", target, static_tree=variants.CHAIN_4, draft_vocab=0, lookup=0)
    if kind == "eagle3-chain":
        return methods.make_drafter("eagle3", target, depth=len(variants.CHAIN_4), top_k=1, total_tokens=len(variants.CHAIN_4),
                                    lookup=0)
    if kind == "sps":
        return methods.make_drafter("sps", target, gamma=4)
    raise ValueError(kind)


def exact_gap(user: TargetOracle, drafter, used: Target | None = None, variant: str = "correct") -> tuple[float, float]:
    """(max |P_round - p_user|, expected acceptance of the first draft) for the round at the prompt
    at T = 1: the round's first-token distribution enumerated exactly (specviz.lossless) with the
    target rows of `used` (default: the user's target) and compared with the user's own p."""
    oracle = user if used is None else TargetOracle(used, user.prompt, T1)
    tree = proposer_for(drafter, oracle).propose_many([()], T1, torch.Generator().manual_seed(0))[0]
    pre = node_prefixes(tree, ())
    oracle.ensure(pre)
    P = torch.stack([oracle.p(s) for s in pre])
    P_raw = torch.stack([oracle.p_raw(s) for s in pre]) if get_policy(variant).needs_p_raw else None
    dist = exact_first_token_dist(tree, P, T1, variant, P_raw)
    p_user = user.p(()).double()
    p_user = p_user / p_user.sum()  # float32 rows sum to 1 only within ~1e-5 over 49k entries; the enumeration renormalises too
    gap = float((dist - p_user).abs().max())
    if tree.sampled and 0 in tree.dists:
        accept = float(torch.minimum(p_user, tree.dists[0].double()).sum())
    else:
        first = [i for i in range(1, len(tree)) if tree.parents[i] == 0]
        accept = float(sum(p_user[tree.tokens[i]] for i in first)) if first else 0.0
    return gap, accept


def run_case(target: Target, name: str, ids: list[int], max_new_tokens: int = 32, vanilla: Run | None = None) -> CaseResult:
    """Run mistake `name` and the correct engine on the prompt `ids` (token ids), greedy, and the
    exact checks at T = 1 where the mistake lives in one round. `vanilla`: reuse a reference run."""
    m = get(name)
    vanilla = vanilla or vanilla_run(target, ids, max_new_tokens)
    user = TargetOracle(target, ids, T1) if m.in_one_round else None  # the user's own p at the prompt
    return _CASES[m.name](m, target, ids, max_new_tokens, vanilla, user)


def _target_trained(m: Mistake, target, ids, n, vanilla, user) -> CaseResult:
    d = _drafter(target, m.drafter)
    correct = _decode(SpeculativeDecoder(target, d, GREEDY, detail=False), ids, n)
    trained, _ = variants.trained_along(target, d, list(ids) + vanilla.tokens)
    d2 = _drafter(trained, m.drafter)
    mistaken = _decode(SpeculativeDecoder(trained, d2, GREEDY, detail=False), ids, n)
    gc, ac = exact_gap(user, d)
    gm, am = exact_gap(user, d2, used=trained)
    return CaseResult(m.name, m.kind, vanilla, correct, mistaken, gc, gm, ac, am)


def _padding(m: Mistake, target, ids, n, vanilla, user) -> CaseResult:
    def cost(toks):
        return variants.PAD + len(toks)  # the padding, the prompt's last token and each new token but the last

    correct = _timed(lambda: variants.padded_greedy(target, ids, n, mask_pads=True), cost)
    mistaken = _timed(lambda: variants.padded_greedy(target, ids, n, mask_pads=False), cost)
    return CaseResult(m.name, m.kind, vanilla, correct, mistaken)


def _scalar_residual(m: Mistake, target, ids, n, vanilla, user) -> CaseResult:
    d = _drafter(target, m.drafter)
    correct = _decode(SpeculativeDecoder(target, d, GREEDY, detail=False), ids, n)
    mistaken = _decode(SpeculativeDecoder(target, d, GREEDY, policy=get_policy(m.zoo), detail=False), ids, n)
    gc, ac = exact_gap(user, d)
    gm, am = exact_gap(user, d, variant=m.zoo)
    return CaseResult(m.name, m.kind, vanilla, correct, mistaken, gc, gm, ac, am, notes=["mis.note.greedy_untouched"])


def _stale_feature(m: Mistake, target, ids, n, vanilla, user) -> CaseResult:
    d = _drafter(target, m.drafter)
    d.in_kernel = False  # both draft in torch: only the feature each step reads differs
    stale = variants.same_drafter_as(variants.StaleFeatureEagle, _drafter(target, m.drafter))
    correct = _decode(SpeculativeDecoder(target, d, GREEDY, detail=False), ids, n)
    mistaken = _decode(SpeculativeDecoder(target, stale, GREEDY, detail=False), ids, n)
    gc, ac = exact_gap(user, d)
    gm, am = exact_gap(user, stale)
    return CaseResult(m.name, m.kind, vanilla, correct, mistaken, gc, gm, ac, am)


def _hot_draft(m: Mistake, target, ids, n, vanilla, user) -> CaseResult:
    d = _drafter(target, m.drafter)
    hot = variants.HotDraftSpS(d.draft, d.gamma)
    correct = _decode(SpeculativeDecoder(target, d, GREEDY, detail=False), ids, n)
    mistaken = _decode(SpeculativeDecoder(target, hot, GREEDY, detail=False), ids, n)
    gc, ac = exact_gap(user, d)
    gm, am = exact_gap(user, hot)
    return CaseResult(m.name, m.kind, vanilla, correct, mistaken, gc, gm, ac, am, notes=["mis.note.hot_greedy"])


def _no_bonus(m: Mistake, target, ids, n, vanilla, user) -> CaseResult:
    correct = _decode(SpeculativeDecoder(target, _drafter(target, m.drafter), GREEDY, detail=False), ids, n)
    mistaken = _decode(variants.NoBonusDecoder(target, _drafter(target, m.drafter), GREEDY, detail=False), ids, n)
    return CaseResult(m.name, m.kind, vanilla, correct, mistaken)


def _uncached_draft(m: Mistake, target, ids, n, vanilla, user) -> CaseResult:
    d = _drafter(target, m.drafter)
    correct = _decode(SpeculativeDecoder(target, d, GREEDY, detail=False), ids, n)
    slow = variants.UncachedTargetDrafter(_drafter(target, m.drafter), target.model)
    mistaken = _decode(SpeculativeDecoder(target, slow, GREEDY, detail=False), ids, n, extra=slow)
    gc, ac = exact_gap(user, d)
    gm, am = exact_gap(user, slow)  # after the run: its counters are read already
    return CaseResult(m.name, m.kind, vanilla, correct, mistaken, gc, gm, ac, am)


def _misreport(m: Mistake, target, ids, n, vanilla, user) -> CaseResult:
    correct = _decode(SpeculativeDecoder(target, _drafter(target, m.drafter), GREEDY, detail=False), ids, n)
    k = len(variants.CHAIN_4)
    if m.name == "correction-counted":  # the extra token counted as one more accepted draft
        printed = Printed("acceptance", (correct.accepted + correct.rounds) / correct.drafted,
                          correct.accepted / correct.drafted)
    elif m.name == "rate-over-k-plus-1":  # accepted / ((k + 1) x rounds), printed where tau is meant
        printed = Printed("tau", correct.accepted / ((k + 1) * correct.rounds), correct.tau)
    else:  # the speedup against a baseline without a KV cache, timed here beside the cached one
        base = _timed(lambda: variants.uncached_greedy(target, ids, n),
                      lambda toks: sum(len(ids) + i for i in range(len(toks))) - (len(ids) - 1))
        true_base = vanilla_run(target, ids, n)
        printed = Printed("speedup", base.seconds / correct.seconds, true_base.seconds / correct.seconds)
        return CaseResult(m.name, m.kind, vanilla, correct, correct, printed=printed,
                          baselines={"uncached": base, "cached": true_base})
    return CaseResult(m.name, m.kind, vanilla, correct, correct, printed=printed)


_CASES = {
    "target-trained": _target_trained,
    "padding-no-mask": _padding,
    "scalar-residual": _scalar_residual,
    "stale-feature": _stale_feature,
    "hot-draft": _hot_draft,
    "no-bonus": _no_bonus,
    "uncached-draft": _uncached_draft,
    "correction-counted": _misreport,
    "rate-over-k-plus-1": _misreport,
    "uncached-baseline": _misreport,
}
