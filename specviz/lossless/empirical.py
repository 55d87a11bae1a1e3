"""The empirical check: N samples of the first tokens, vanilla against speculative, on a real model.

Both samplers read one :class:`TargetOracle`; samples advance in lockstep waves so each wave costs a
few batched forwards. Then a chi-square test of the two histograms, the total-variation distance
with a confidence bound, and the exact check of the round at the prompt (:mod:`.exact`).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field

import torch

from .. import SpecVizError, methods
from ..teaching.bugs import get_policy
from ..drafters.base import Drafter
from ..core.sampling import SamplingParams, sample
from ..core.verify import verify
from .exact import exact_max_diff
from .oracle import TargetOracle, node_prefixes, propose_grouped, proposer_for

# =============================================================================== samplers
def vanilla_samples(oracle: TargetOracle, params: SamplingParams, n: int, horizon: int, generator) -> Counter:
    """Histogram of the first `horizon` tokens over n vanilla samples, drawn level by level."""
    groups = Counter({(): n})
    for _ in range(horizon):
        oracle.ensure(groups)
        new = Counter()
        for g in sorted(groups):
            c = groups[g]
            if params.greedy:
                new[g + (int(oracle.p(g).argmax()),)] += c
                continue
            toks = torch.multinomial(oracle.p(g), c, replacement=True, generator=generator).tolist()
            for t, m in Counter(toks).items():
                new[g + (t,)] += m
        groups = new
    return groups


@dataclass
class SpecStats:
    rounds: int = 0
    tokens: int = 0  # tokens committed by those rounds (accepted drafts + extra)
    drafted: int = 0
    accepted: int = 0


def speculative_samples(oracle: TargetOracle, drafter, params: SamplingParams, n: int, horizon: int, generator,
                        variant: str = "correct", progress=None, stats: SpecStats | None = None) -> Counter:
    """Histogram of the first `horizon` tokens over n speculative samples.

    Every sample runs real rounds (draft, target rows, `verify`) until it has `horizon` tokens;
    all unfinished samples advance together, so each wave needs only a few batched forwards.
    Trees are pruned to the tokens still missing, exactly as the engine prunes them near its
    token budget (max_new_tokens = horizon), so no target row beyond the horizon is needed.
    """
    pol = get_policy(variant)
    proposer = proposer_for(drafter, oracle)
    outs: list[tuple] = [()] * n
    active = list(range(n))
    rows_memo: dict[int, tuple] = {}
    stats = stats if stats is not None else SpecStats()
    done = 0
    while active:
        gs = [outs[i] for i in active]
        trees = propose_grouped(proposer, gs, params, generator, horizon)
        pres = [node_prefixes(t, g) for t, g in zip(trees, gs)]
        oracle.ensure({s for pre in pres for s in pre})
        for i, g, tree, pre in zip(active, gs, trees, pres):
            key = id(tree)
            cached = rows_memo.get(key) if not tree.sampled else None
            if cached is not None and cached[0] is tree:
                P, P_raw = cached[1], cached[2]
            else:
                P = torch.stack([oracle.p(s) for s in pre])
                P_raw = torch.stack([oracle.p_raw(s) for s in pre]) if pol.needs_p_raw else None
                if not tree.sampled:
                    rows_memo[key] = (tree, P, P_raw)
            if len(tree) == 1:  # nothing drafted: a vanilla step
                tok = int(P[0].argmax()) if params.greedy else sample(P[0], generator)
                new = (tok,)
            else:
                res = verify(tree, P, params, generator, p_raw=P_raw, policy=pol)
                new = tuple(tree.tokens[j] for j in res.accepted) + (res.extra_token,)
                stats.drafted += len(tree) - 1
                stats.accepted += len(res.accepted)
            stats.rounds += 1
            stats.tokens += len(new)
            outs[i] = g + new
        still = [i for i in active if len(outs[i]) < horizon]
        done += len(active) - len(still)
        active = still
        if progress:
            progress(done, n)
    return Counter(o[:horizon] for o in outs)


# =============================================================================== statistics
def compare_histograms(h1: Counter, h2: Counter, min_count: int = 10, delta: float = 0.05) -> dict:
    """Chi-square test of homogeneity and total-variation distance of two histograms.

    Outcomes seen fewer than `min_count` times in both samples together are merged into one
    "other" bin (so expected counts stay near 5 or more; the merged bin is dropped if it is
    still too small). `tv` is the plug-in distance 0.5 * sum |f1 - f2| over those bins; merging
    can only lower it. `tv_bound` is a (1 - delta) upper confidence bound on the true distance
    over the same bins, from Weissman et al. (2003): P(||P^ - P||_1 >= e) <= (2^B - 2) exp(-n e^2 / 2)
    for each sample (delta/2 each), so TV <= tv + (e1 + e2) / 2. It is distribution-free and
    therefore loose (about 0.1 for 10,000 samples and 50 bins).
    """
    from scipy.stats import chi2_contingency  # scipy is slow to import; only the empirical check needs it

    n1, n2 = sum(h1.values()), sum(h2.values())
    keys = set(h1) | set(h2)
    big = sorted((k for k in keys if h1.get(k, 0) + h2.get(k, 0) >= min_count), key=lambda k: -(h1.get(k, 0) + h2.get(k, 0)))
    rows = [[h1.get(k, 0) for k in big], [h2.get(k, 0) for k in big]]
    o1, o2 = n1 - sum(rows[0]), n2 - sum(rows[1])
    if o1 + o2 > 0:
        rows[0].append(o1)
        rows[1].append(o2)
    bins = len(rows[0])
    if bins < 2 or n1 == 0 or n2 == 0:
        chi2, pval, dof = 0.0, 1.0, 0
    else:
        res = chi2_contingency(rows, correction=False)
        chi2, pval, dof = float(res.statistic), float(res.pvalue), int(res.dof)
    tv = 0.5 * sum(abs(a / max(n1, 1) - b / max(n2, 1)) for a, b in zip(*rows))

    def eps(n):
        return math.sqrt(2 * (bins * math.log(2) + math.log(2 / delta)) / max(n, 1))

    return {
        "chi2": chi2,
        "dof": dof,
        "p_value": pval,
        "tv": tv,
        "tv_bound": min(1.0, tv + 0.5 * (eps(n1) + eps(n2))),
        "bins": bins,
        "outcomes": len(keys),
    }


def make_drafter(method: str, oracle: TargetOracle, **options) -> Drafter:
    """A drafter for the check by its registry name (specviz.methods): a toy drafter built on the
    oracle (`options` go to ToyDrafter: scale, noise, seed), or an engine method with the shipped
    weights for the oracle's model and the papers' fixed trees (a check measures nothing)."""
    spec = methods.get(method)
    if spec.toy:
        return spec.factory(oracle, **options)
    return methods.make_drafter(method, oracle.model, tree_size="paper", **options)


@dataclass
class CheckResult:
    method: str
    variant: str
    sampling: dict
    samples: int
    horizon: int
    seed: int
    vanilla: dict  # outcome tuple -> count
    speculative: dict
    p_value: float
    chi2: float
    dof: int
    tv: float
    tv_bound: float
    bins: int
    exact_max_diff: float | None  # exact round distribution vs target at the prompt (None: not computable)
    exact_k: int  # tokens covered by the exact check
    drafted_at_prompt: int  # draft tokens in the tree at the prompt (0: the exact check is trivial)
    passed: bool
    alpha: float
    seconds: float
    samples_per_s: float  # vanilla + speculative samples drawn per second (whole check)
    forwards: int
    forward_seconds: float  # of `seconds`, time spent in target forwards
    prefixes: int
    tau: float  # mean tokens per speculative round
    acceptance: float  # accepted / drafted tokens
    notes: list = field(default_factory=list)


def _check_params(samples, horizon, params):
    if not isinstance(samples, int) or samples < 1:
        raise SpecVizError(f"samples must be a whole number >= 1, got {samples!r}.")
    if not isinstance(horizon, int) or not 1 <= horizon <= 8:
        raise SpecVizError(f"horizon must be a whole number from 1 to 8, got {horizon!r}.")
    if not isinstance(params, SamplingParams):
        raise SpecVizError("params must be a SamplingParams.")


def exact_at_prompt(oracle: TargetOracle, drafter, params: SamplingParams, horizon: int, variant: str, generator=None):
    """(max difference, k covered, draft tokens) of the exact check for the round at the prompt."""
    proposer = proposer_for(drafter, oracle)
    g = torch.Generator().manual_seed(0) if generator is None else generator
    tree = proposer.propose_many([()], params, g, max_depth=horizon - 1)[0]
    pre = node_prefixes(tree, ())
    oracle.ensure(pre)
    P = torch.stack([oracle.p(s) for s in pre])
    pol = get_policy(variant)
    P_raw = torch.stack([oracle.p_raw(s) for s in pre]) if pol.needs_p_raw else None
    kmax = 1 if (tree.sampled and not params.greedy) else min(horizon, tree.max_depth + 1)
    diff = max(exact_max_diff(tree, P, params, k=k, variant=variant, p_raw=P_raw) for k in range(1, kmax + 1))
    return diff, kmax, len(tree) - 1


class torch_threads:
    """Temporarily set torch's intra-op threads. On a small shared CPU the many tiny vector ops of
    sampling (and even the forwards) run far faster on one thread than with OpenMP contention."""

    def __init__(self, n):
        self.n = n

    def __enter__(self):
        self.old = torch.get_num_threads()
        if self.n:
            torch.set_num_threads(self.n)

    def __exit__(self, *exc):
        torch.set_num_threads(self.old)


def run_check(target, drafter, prompt_ids, params: SamplingParams, samples: int = 10000, horizon: int = 3,
              seed: int = 0, variant: str = "correct", progress=None, alpha: float = 1e-3, exact_tol: float = 1e-6,
              oracle: TargetOracle | None = None, threads: int | None = 1) -> CheckResult:
    """Vanilla vs speculative sampling of the first `horizon` tokens on a real model.

    `target`: a Target or TargetModel; `drafter`: a method name (see :func:`make_drafter`), an
    engine Drafter, or a ToyDrafter; `progress(done, total)` is called as samples finish.
    Passes when the chi-square p-value exceeds `alpha` and the exact check (where computable) is
    within `exact_tol`. Pass `oracle` to reuse memoised target rows across checks of one prompt.
    `threads`: torch threads during the check (None: leave as is).
    """
    with torch_threads(threads):
        return _run_check(target, drafter, prompt_ids, params, samples, horizon, seed, variant, progress, alpha,
                          exact_tol, oracle)


def _run_check(target, drafter, prompt_ids, params, samples, horizon, seed, variant, progress, alpha, exact_tol,
               oracle) -> CheckResult:
    _check_params(samples, horizon, params)
    get_policy(variant)  # fail early on a bad name
    t0 = time.perf_counter()
    if oracle is None or oracle.params != params or oracle.prompt != [int(t) for t in prompt_ids]:
        oracle = TargetOracle(target, prompt_ids, params)
    if isinstance(drafter, str):
        method = drafter
        drafter = make_drafter(drafter, oracle)
    else:
        method = getattr(drafter, "name", type(drafter).__name__)
    notes = []
    try:
        diff, k_exact, drafted = exact_at_prompt(oracle, drafter, params, horizon, variant)
    except SpecVizError as e:
        diff, k_exact, drafted = None, 0, 0
        notes.append(f"exact check skipped: {e}")
    if drafted == 0 and diff is not None:
        notes.append("the drafter proposed nothing at the prompt: the exact check is trivial there")
    gen = torch.Generator().manual_seed(seed)
    van = vanilla_samples(oracle, params, samples, horizon, gen)
    gen = torch.Generator().manual_seed(seed + 1)
    st = SpecStats()
    spec = speculative_samples(oracle, drafter, params, samples, horizon, gen, variant, progress, st)
    cmp = compare_histograms(van, spec)
    secs = time.perf_counter() - t0
    passed = cmp["p_value"] > alpha and (diff is None or diff <= exact_tol)
    return CheckResult(
        method=method, variant=variant, sampling=params.as_dict(), samples=samples, horizon=horizon, seed=seed,
        vanilla=dict(van), speculative=dict(spec), p_value=cmp["p_value"], chi2=cmp["chi2"], dof=cmp["dof"],
        tv=cmp["tv"], tv_bound=cmp["tv_bound"], bins=cmp["bins"], exact_max_diff=diff, exact_k=k_exact,
        drafted_at_prompt=drafted, passed=passed, alpha=alpha, seconds=secs, samples_per_s=2 * samples / secs,
        forwards=oracle.forwards, forward_seconds=oracle.forward_seconds, prefixes=len(oracle), tau=st.tokens / max(st.rounds, 1),
        acceptance=st.accepted / max(st.drafted, 1), notes=notes,
    )
