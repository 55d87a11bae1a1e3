"""verify(): the three exact rules, the step records, seeded replay, and agreement of the sampled
walk with the analytic enumeration in specviz.lossless (which the property tests check exactly)."""

import math
from collections import Counter
from dataclasses import asdict

import pytest
import torch
from scipy.stats import chisquare

from specviz import SpecVizError
from specviz.teaching.bugs import get_policy
from specviz.lossless import PrefixModel, exact_dist_k, torch_threads
from specviz.core.sampling import SamplingParams, probs, sample
from specviz.core.trace import AcceptStep
from specviz.core.tree import DraftTree
from specviz.core.verify import VerifyResult, verify

T1 = SamplingParams(temperature=1.0)
GREEDY = SamplingParams(temperature=0.0)
STEP_KEYS = {"node", "depth", "token", "text", "p", "q", "ratio", "u", "accepted", "residual_top"}


def onehot(V, *tokens_probs):
    d = torch.zeros(V)
    for t, x in tokens_probs:
        d[t] = x
    return d


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------ greedy
def test_greedy_accepts_argmax_path_then_corrects():
    V = 5
    tree = DraftTree.chain(0, [1, 2, 3])
    p = torch.stack([onehot(V, (1, 1.0)), onehot(V, (2, 1.0)), onehot(V, (4, 1.0)), onehot(V, (0, 1.0))])
    g = gen()
    before = g.get_state().clone()
    r = verify(tree, p, GREEDY, g)
    assert r.accepted == [1, 2] and r.extra_token == 4 and r.extra_source == "greedy-correction"
    assert [s.accepted for s in r.steps] == [True, True, False]
    assert all(isinstance(s, AcceptStep) and set(asdict(s)) == STEP_KEYS and s.u is None for s in r.steps)
    assert torch.equal(g.get_state(), before), "greedy must not consume randomness"
    assert r.rule == "greedy"


def test_greedy_full_path_gives_bonus_and_picks_matching_sibling():
    V = 6
    # root has children 3 (rank 0) and 2 (rank 1); target argmax at the root is 2
    tree = DraftTree(tokens=[0, 3, 2, 5], parents=[-1, 0, 0, 2], q=[1.0, 0.6, 0.3, 0.9])
    p = torch.stack([onehot(V, (2, 1.0)), onehot(V, (1, 1.0)), onehot(V, (5, 1.0)), onehot(V, (4, 1.0))])
    r = verify(tree, p, GREEDY, gen())
    assert r.accepted == [2, 3] and r.extra_token == 4 and r.extra_source == "bonus"
    assert [(s.node, s.accepted) for s in r.steps] == [(1, False), (2, True), (3, True)]


# ------------------------------------------------------------------------------------ sampling rules
def test_deterministic_rule_certain_and_impossible_children():
    V = 4
    p_root = onehot(V, (1, 0.5), (2, 0.5))
    # child 3 has p = 0: always rejected; then child 1 with residual p(1) = 0.5 ...; a leaf p
    tree = DraftTree(tokens=[0, 3, 1], parents=[-1, 0, 0], q=[1.0, 0.9, 0.1])
    p = torch.stack([p_root, onehot(V, (0, 1.0)), onehot(V, (0, 1.0))])
    outs = Counter()
    g = gen(1)
    for _ in range(400):
        r = verify(tree, p, T1, g)
        assert r.steps[0].node == 1 and not r.steps[0].accepted and r.steps[0].p == 0
        assert 1 in r.residuals and float(r.residuals[1][3]) == 0
        outs[(tuple(r.accepted), r.extra_token, r.extra_source)] += 1
    assert set(outs) == {((2,), 0, "bonus"), ((), 2, "resampled")}
    assert 150 < outs[((2,), 0, "bonus")] < 250  # accepted with probability 1/2


def test_sampled_rule_accepts_always_when_q_equals_p():
    pr = torch.tensor([0.1, 0.2, 0.3, 0.25, 0.15])
    tree = DraftTree.chain(0, [2, 3], q=[0.3, 0.2], dists={0: pr, 1: pr, 2: pr}, sampled=True)
    p = torch.stack([pr, pr, pr])
    g = gen(2)
    for _ in range(50):
        r = verify(tree, p, T1, g)
        assert r.accepted == [1, 2] and r.extra_source == "bonus"
        assert all(abs(s.ratio - 1) < 1e-6 for s in r.steps)
    assert r.rule == "chain"


def test_sampled_rule_residual_excludes_rejected_mass():
    p0 = torch.tensor([0.5, 0.5, 0.0])
    q0 = torch.tensor([0.0, 0.0, 1.0])  # drafts token 2 which the target never produces
    tree = DraftTree.chain(0, [2], q=[1.0], dists={0: q0}, sampled=True)
    p = torch.stack([p0, p0])
    g = gen(3)
    for _ in range(30):
        r = verify(tree, p, T1, g)
        assert r.accepted == [] and r.extra_source == "resampled" and r.extra_token in (0, 1)
        assert torch.allclose(r.extra_dist, p0)


def test_seeded_replay_is_identical():
    model = _toy_model(seed=5, V=7, widths=[2, 2], sampled=True)
    tree, p, p_raw = model.draw_tree(gen(9))
    params = SamplingParams(temperature=0.8, top_p=0.9)
    a = verify(tree, p, params, gen(42), p_raw=p_raw)
    b = verify(tree, p, params, gen(42), p_raw=p_raw)
    assert isinstance(a, VerifyResult)
    assert (a.accepted, a.extra_token, a.extra_source, a.rule) == (b.accepted, b.extra_token, b.extra_source, b.rule)
    assert torch.equal(a.extra_dist, b.extra_dist)
    for s, t in zip(a.steps, b.steps, strict=True):
        assert s == t
    # a different seed eventually gives a different walk
    assert any(
        (verify(tree, p, params, gen(s)).extra_token, len(verify(tree, p, params, gen(s)).steps))
        != (a.extra_token, len(a.steps))
        for s in range(43, 80)
    )


def test_errors_are_clear():
    V = 4
    tree = DraftTree.chain(0, [1], sampled=True)  # sampled but no dists
    p = torch.full((2, V), 1 / V)
    with pytest.raises(SpecVizError, match="dists"):
        verify(tree, p, T1, gen())
    with pytest.raises(SpecVizError, match="one target row per tree node"):
        verify(tree, p[:1], T1, gen())
    with pytest.raises(SpecVizError, match="Unknown verification variant"):
        verify(DraftTree.chain(0, [1]), p, T1, gen(), policy=get_policy("nope"))
    with pytest.raises(SpecVizError, match="p_raw"):
        verify(DraftTree.chain(0, [1]), p, T1, gen(), policy=get_policy("unwarped-bonus"))


# ------------------------------------------------------------------------------------ walk == math
def _toy_model(seed, V, widths, sampled, wo=False, params=T1):
    cache = {}

    def table(kind, h):
        key = (kind, h)
        if key not in cache:
            g = torch.Generator().manual_seed((hash((seed, kind) + h) % (2**31)))
            cache[key] = torch.randn(V, generator=g) * 1.5
        return cache[key]

    return PrefixModel(
        p_fn=lambda h: probs(table(1, h), params),
        q_fn=lambda h: probs(table(2, h), params),
        widths=widths,
        sampled=sampled,
        without_replacement=wo,
        p_raw_fn=lambda h: table(1, h).softmax(-1),
        q_raw_fn=lambda h: table(2, h).softmax(-1),
    )


def _simulate(model, params, variant, n, seed, k=2):
    with torch_threads(1):  # thousands of tiny ops: one thread avoids OpenMP contention
        return _simulate1(model, params, variant, n, seed, k)


def _simulate1(model, params, variant, n, seed, k):
    g = gen(seed)
    cnt = Counter()
    for _ in range(n):
        tree, p, p_raw = model.draw_tree(g)
        r = verify(tree, p, params, g, p_raw=p_raw, policy=get_policy(variant))
        toks = [tree.tokens[i] for i in r.accepted] + [r.extra_token]
        while len(toks) < k:  # after the round the target continues (vanilla)
            toks.append(sample(model.p_fn(tuple(toks)), g))
        cnt[tuple(toks[:k])] += 1
    return cnt


def _gof(cnt, exact, n):
    keys = [s for s, x in exact.items() if x * n >= 1]
    obs = [cnt[s] for s in keys] + [n - sum(cnt[s] for s in keys)]
    exp = [exact[s] * n for s in keys]
    exp.append(n - sum(exp))
    if exp[-1] < 1e-9:
        obs, exp = obs[:-1], exp[:-1]
        exp = [e * sum(obs) / sum(exp) for e in exp]
    return chisquare(obs, exp).pvalue


PARAMS = SamplingParams(temperature=0.8, top_p=0.95)


@pytest.mark.parametrize(
    "sampled,wo,widths,variant",
    [
        (True, False, [2, 1], "correct"),
        (True, True, [3, 1], "correct"),
        (False, False, [2, 2], "correct"),
        (True, False, [2, 1], "scalar-residual"),
        (False, False, [2, 1], "greedy-draft"),
    ],
)
@pytest.mark.slow
def test_verify_walk_matches_exact_enumeration(sampled, wo, widths, variant):
    """The sampled walk and the analytic enumeration are two codings of one rule: they agree."""
    model = _toy_model(11, 5, widths, sampled, wo, PARAMS)
    exact = exact_dist_k(model, params=PARAMS, k=2, variant=variant)
    n = 2000
    assert _gof(_simulate(model, PARAMS, variant, n, seed=3), exact, n) > 1e-4


def test_walk_vs_enumeration_comparison_can_fail():
    model = _toy_model(11, 5, [1, 1], True, False, T1)
    exact = exact_dist_k(model, params=T1, k=2, variant="correct")
    n = 2000
    assert _gof(_simulate(model, T1, "no-rejection", n, seed=3), exact, n) < 1e-6


# --------------------------------------------------------------------------- EAGLE trees drawn from q (draw="sample")
def _tables(V, seed):
    """Random warped p and q after every token prefix (memoised), for a toy vocabulary of V."""
    memo = {}

    def row(kind, prefix):
        key = (kind, prefix)
        if key not in memo:
            # ints only: a str's hash changes per process (PYTHONHASHSEED), the tables must not
            g = torch.Generator().manual_seed(hash((seed, "pq".index(kind)) + prefix) % (2**31))
            memo[key] = (torch.randn(V, generator=g) * 1.5).softmax(-1)
        return memo[key]

    return row


def _prefix(tree, i):
    path = []
    while i > 0:
        path.append(tree.tokens[i])
        i = tree.parents[i]
    return tuple(reversed(path))


def test_sampled_dynamic_tree_keeps_draw_order_and_its_budget():
    from specviz.core.tree_build import build_sampled_tree

    row = _tables(6, 1)
    expand = lambda tree, nodes: torch.stack([row("q", _prefix(tree, i)) for i in nodes])  # noqa: E731
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        tree = build_sampled_tree(0, expand, depth=3, top_k=2, total_tokens=6, generator=g)
        assert tree.sampled and tree.without_replacement and 2 <= len(tree) <= 6
        kids = tree.children_lists()
        for node, cs in enumerate(kids):
            if cs:
                assert node in tree.dists and len(cs) <= 2 and len({tree.tokens[c] for c in cs}) == len(cs)
                assert cs == sorted(cs)  # siblings contiguous, in the order they were drawn
        assert len(kids[0]) == 2  # the root always draws its full width
    g = torch.Generator().manual_seed(0)
    sure = build_sampled_tree(0, expand, depth=3, top_k=2, total_tokens=6, generator=g, min_prob=0.99)
    assert len(sure) == 1  # no token is that likely: nothing is drawn, the round verifies the root alone
    # with a floor, each node draws as many children as it has tokens whose path probability reaches it
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        tree = build_sampled_tree(0, expand, depth=3, top_k=2, total_tokens=64, generator=g, min_prob=0.2)
        for node, cs in enumerate(tree.children_lists()):
            if node in tree.dists:
                assert tree.scores[node] >= math.log(0.2)  # only nodes that likely are expanded
                assert len(cs) == min(2, int((tree.dists[node] >= 0.2 / math.exp(tree.scores[node])).sum()))
        again = build_sampled_tree(0, expand, depth=3, top_k=2, total_tokens=64,
                                   generator=torch.Generator().manual_seed(seed), min_prob=0.2)
        assert again.tokens == tree.tokens  # the generator decides every draw


def test_sampled_tree_draws_in_a_draft_vocabulary_as_over_full_rows():
    """EAGLE-3 drafts over 8,192 of 49,152 tokens: the sampled tree draws in those columns (as
    `VocabRows`, with the kernel's top-k as `RankedRows`) and must draw exactly what it drew from the
    49k-wide rows, with the same q and the same full rows kept for the acceptance walk."""
    from specviz.core.tree import RankedRows, VocabRows
    from specviz.core.tree_build import build_sampled_tree

    V, ids = 40, torch.tensor([1, 4, 5, 9, 13, 20, 21, 30, 33, 38])  # ascending, as a head's draft vocabulary

    def columns(tree, nodes):  # a seeded draft distribution per path, over the draft vocabulary only
        rows = []
        for i in nodes:
            g = torch.Generator().manual_seed(hash(_prefix(tree, i)) % 10_000)
            r = torch.rand(len(ids), generator=g) ** 3
            r[torch.rand(len(ids), generator=g) < 0.3] = 0.0  # some draft tokens have no mass
            rows.append(r / r.sum())
        return torch.stack(rows)

    as_full = lambda tree, nodes: torch.stack([VocabRows(columns(tree, nodes), ids, V)[r] for r in range(len(nodes))])  # noqa: E731
    as_vocab = lambda tree, nodes: VocabRows(columns(tree, nodes), ids, V)  # noqa: E731

    def as_ranked(tree, nodes):
        rows = as_vocab(tree, nodes)
        return RankedRows(rows, *rows.topk(3))

    for seed in range(30):
        for floor in (0.0, 0.05):
            trees = [build_sampled_tree(0, expand, depth=3, top_k=3, total_tokens=8, generator=torch.Generator().manual_seed(seed),
                                        min_prob=floor) for expand in (as_full, as_vocab, as_ranked)]
            full = trees[0]
            assert len(full) > 1
            for tree in trees[1:]:
                assert tree.tokens == full.tokens and tree.parents == full.parents and tree.q == full.q
                assert set(tree.dists) == set(full.dists)
                assert all(torch.equal(tree.dists[n], full.dists[n]) for n in full.dists)
                assert all(t in ids.tolist() for t in tree.tokens[1:])


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["correct", "resample-from-p"])
def test_sampled_dynamic_tree_rounds_give_the_targets_two_token_distribution(variant):
    """Rounds of (draw a tree from q with build_sampled_tree, verify it) give the first two tokens
    p(t1) p(t2 | t1) (tokens after the round ends come from p, as vanilla); chi-square over 16 cells
    with a fixed seed. The tree's shape depends on its drawn nodes (expansion by path probability,
    a floor): the rule stays exact because every node's children are drawn together and all kept.
    A broken rule (resampling from p after a rejection) is caught by the same test."""
    from scipy.stats import chisquare

    from specviz.teaching.bugs import get_policy
    from specviz.core.tree_build import build_sampled_tree

    V, trials = 4, 12000
    row = _tables(V, 7)
    expand = lambda tree, nodes: torch.stack([row("q", _prefix(tree, i)) for i in nodes])  # noqa: E731
    params = SamplingParams(temperature=1.0)
    g = torch.Generator().manual_seed(11)
    counts = torch.zeros(V, V)
    for _ in range(trials):
        tree = build_sampled_tree(0, expand, depth=3, top_k=2, total_tokens=5, generator=g, min_prob=0.3)
        P = torch.stack([row("p", _prefix(tree, i)) for i in range(len(tree))])
        res = verify(tree, P, params, g, policy=get_policy(variant))
        toks = [tree.tokens[i] for i in res.accepted] + [res.extra_token]
        if len(toks) < 2:
            toks.append(int(torch.multinomial(row("p", (toks[0],)), 1, generator=g)))
        counts[toks[0], toks[1]] += 1
    want = torch.stack([row("p", ())[a].double() * row("p", (a,)).double() for a in range(V)]).flatten()
    want = want / want.sum() * trials  # float32 rows sum to 1 only within ~1e-7; chisquare wants equal totals
    p_value = chisquare(counts.flatten().double().numpy(), want.numpy()).pvalue
    assert (p_value > 1e-3) == (variant == "correct"), p_value


def test_draft_vocabulary_rows_build_the_same_tree_as_full_rows():
    """EAGLE-3's draft rows kept in their own columns (tree.VocabRows): the dynamic tree, its scores
    and the rows it keeps for the rule equal those built from the full 0-padded rows."""
    from specviz.core.tree import VocabRows
    from specviz.core.tree_build import build_dynamic_tree

    g = torch.Generator().manual_seed(0)
    V, ids = 50, torch.tensor([1, 4, 7, 9, 20, 33, 41, 49])

    def rows_for(nodes):
        probs = torch.rand(len(nodes), len(ids), generator=g).softmax(-1)
        return VocabRows(probs, ids, V)

    made = {}

    def expand_small(tree, nodes):
        made[len(tree)] = r = rows_for(nodes)
        return r

    small = build_dynamic_tree(3, expand_small, depth=3, top_k=4, total_tokens=9)
    replay = iter(made[k] for k in sorted(made))

    def expand_full(tree, nodes):
        r = next(replay)
        return torch.stack([r[i] for i in range(len(r))])

    full = build_dynamic_tree(3, expand_full, depth=3, top_k=4, total_tokens=9)
    assert small.tokens == full.tokens and small.parents == full.parents and small.scores == full.scores
    assert set(small.tokens[1:]) <= set(ids.tolist())
    assert sorted(small.dists) == sorted(full.dists)
    for node in full.dists:
        assert torch.equal(small.dists[node], full.dists[node]) and small.dists[node].shape == (V,)
    v, i = VocabRows(torch.tensor([[0.7, 0.3]]), torch.tensor([5, 2]), 10).topk(4)
    assert v[0].tolist() == pytest.approx([0.7, 0.3, 0.0, 0.0]) and i[0, :2].tolist() == [5, 2]


@pytest.mark.slow
@pytest.mark.parametrize("planted", [False, True])
def test_a_copied_chain_in_a_sampled_tree_keeps_the_targets_distribution(planted, monkeypatch):
    """Trees drawn from q with a copied chain grafted on (a fixed guess of the context, q = one-hot):
    the first two tokens still come out as p(t1) p(t2 | t1). Planted: the copied children verified with
    their parent's q like the drawn ones, which the same chi-square catches."""
    from specviz.core import verify as VM
    from specviz.core.tree_build import build_sampled_tree

    if planted:
        real = DraftTree.with_chain  # the same trees, without the marks the rule reads

        def unmarked(self, tokens):
            t = real(self, tokens)
            object.__setattr__(t, "copied", frozenset())
            return t
        monkeypatch.setattr(DraftTree, "with_chain", unmarked)
    V, trials = 4, 12000
    row = _tables(V, 5)
    expand = lambda tree, nodes: torch.stack([row("q", _prefix(tree, i)) for i in nodes])  # noqa: E731
    g = torch.Generator().manual_seed(13)
    counts = torch.zeros(V, V)
    for _ in range(trials):
        tree = build_sampled_tree(0, expand, depth=2, top_k=2, total_tokens=3, generator=g)
        tree = tree.with_chain([3, 3])  # p of token 3 is small after the root: the copy is often wrong
        if not planted:
            assert tree.copied
        dists = dict(tree.dists)
        for i in range(len(tree)):  # a copied node with children needs q rows only where a drawn child hangs
            dists.setdefault(i, row("q", _prefix(tree, i)))
        tree.dists = dists
        P = torch.stack([row("p", _prefix(tree, i)) for i in range(len(tree))])
        res = VM.verify(tree, P, T1, g)
        toks = [tree.tokens[i] for i in res.accepted] + [res.extra_token]
        if len(toks) < 2:
            toks.append(int(torch.multinomial(row("p", (toks[0],)), 1, generator=g)))
        counts[toks[0], toks[1]] += 1
    want = torch.stack([row("p", ())[a].double() * row("p", (a,)).double() for a in range(V)]).flatten()
    want = want / want.sum() * trials
    p_value = chisquare(counts.flatten().double().numpy(), want.numpy()).pvalue
    assert (p_value > 1e-3) == (not planted), p_value
