"""Device-tuned trees: the acceptance profile predicts the engine exactly, costs are cached, the
choice maximises the model's tokens per second."""

import json

import pytest
import torch

from specviz import methods, tuning
from specviz.core.engine import PREFETCH_ROWS, SpeculativeDecoder, vanilla_generate
from specviz.examples import EXAMPLE_PROMPTS
from specviz.heads.io import shipped_head_dir
from specviz.core.sampling import SamplingParams
from specviz.core.tree_build import EAGLE1_TREE


def test_dynamic_accepts_hand_example():
    # root 0; candidates: a(-0.1), b(-0.5) at depth 1; a->c(-0.3), a->d(-0.4), b->e(-0.9) at depth 2
    cands = [(0.0, -1, 100), (-0.1, 0, 1), (-0.5, 0, 2), (-0.3, 1, 3), (-0.4, 1, 4), (-0.9, 2, 5)]
    acc = tuning.dynamic_accepts(cands, [1, 4, 9], max_depth=2, n_max=6)
    # depth 1: only a (rank 0) and b; the path [a] is kept from N=2 on
    assert acc[0] == [0, 1, 1, 1, 1, 1]
    # depth 2: order a(0) c(1) d(2) b(3) e(4); the path a->d needs N-1 > 2
    assert acc[1] == [0, 1, 1, 2, 2, 2]
    # a continuation the tree never drafted accepts nothing
    assert tuning.dynamic_accepts(cands, [7, 7], 2, 6) == [[0] * 6, [0] * 6]


def _path_expand(vocab=50, calls=None):
    """A fake drafter: each node's distribution depends only on its path of tokens."""

    def expand(tree, nodes):
        out = []
        for i in nodes:
            path, a = [], i
            while a >= 0:
                path.append(tree.tokens[a])
                a = tree.parents[a]
            g = torch.Generator().manual_seed(hash(tuple(path)) % (2**31))
            out.append(torch.softmax(3 * torch.randn(vocab, generator=g), -1))
        if calls is not None:
            calls.append(len(nodes))
        return torch.stack(out)

    return expand


@pytest.mark.parametrize("total", [2, 3, 5, 8, 12])
def test_small_dynamic_trees_expand_fewer_nodes_and_keep_the_same_tree(total):
    """A dynamic tree of fewer than top_k + 1 nodes expands only its best total - 1 frontier nodes:
    the kept tree (tokens, parents, q, scores) equals the full expansion's, with fewer drafter calls."""
    from specviz.core.tree_build import build_dynamic_tree

    def run(prune, root):
        rows = []
        return build_dynamic_tree(root, _path_expand(calls=rows), depth=4, top_k=8, total_tokens=total, prune=prune), rows

    for root in range(5):  # five roots: five different sets of distributions
        small, small_rows = run(True, root)
        full, full_rows = run(False, root)
        assert (small.tokens, small.parents, small.q, small.scores) == (full.tokens, full.parents, full.q, full.scores)
        assert len(small) == total
        if total - 1 < 8:
            assert sum(small_rows) < sum(full_rows)
        else:
            assert small_rows == full_rows


@pytest.mark.parametrize("min_prob", [0.03, 0.1, 0.25, 0.5, 0.99])
def test_floored_trees_keep_exactly_the_likely_paths(min_prob):
    """min_prob keeps the full tree's nodes whose path probability reaches the floor (no others),
    stops drafting at the first level without one, and the profile's floor_rounds predicts the
    floored tree's levels, size and greedy acceptance from the full-width candidates."""
    import math

    from specviz.core.tree_build import build_dynamic_tree

    sizes = set()
    for root in range(8):
        full = build_dynamic_tree(root, _path_expand(), depth=4, top_k=8, total_tokens=64, prune=False)
        calls = []
        floored = build_dynamic_tree(root, _path_expand(calls=calls), depth=4, top_k=8, total_tokens=64, min_prob=min_prob)
        paths = lambda t: {tuple(t.tokens[j] for j in t.path(i)) for i in range(1, len(t))}  # noqa: E731
        likely = {tuple(full.tokens[j] for j in full.path(i)) for i in range(1, len(full)) if math.exp(full.scores[i]) >= min_prob}
        assert paths(floored) == likely
        assert all(math.exp(s) >= min_prob for s in floored.scores)
        sizes.add(len(floored))
        # a greedy walk along the first kept path (then off the tree) accepts what the profile says
        for leaf in [max(range(len(floored)), key=lambda i: len(floored.path(i)))]:
            cont = [floored.tokens[j] for j in floored.path(leaf)[1:]] + [99, 99, 99, 99]
            walk = len(floored.path(leaf)) - 1
            rounds = tuning.floor_rounds(full.candidates, cont, 4, 64, min_prob)
            assert rounds[3] == (len(calls), max([*calls[1:], 1]), len(floored), walk)
    if min_prob == 0.99:
        assert sizes == {1}  # nothing that sure: the root alone, after one drafting call
    if min_prob <= 0.1:
        assert max(sizes) > 2


def test_interpolate_reads_the_measured_curve():
    curve = {"1": 1.0, "4": 4.0, "8": 6.0}
    assert tuning.interpolate(curve, 1) == 1.0
    assert tuning.interpolate(curve, 2) == pytest.approx(2.0)
    assert tuning.interpolate(curve, 6) == pytest.approx(5.0)
    assert tuning.interpolate(curve, 10) == pytest.approx(7.0)  # extrapolates the last slope
    assert tuning.interpolate(curve, 0) == 1.0  # clamps below the first size
    assert tuning.interpolate({1: 2.0, 4: 8.0}, 2) == pytest.approx(4.0)  # int keys read as string keys do
    assert tuning.interpolate({"3": 0.5}, 1) == tuning.interpolate({"3": 0.5}, 9) == 0.5  # one point: its value
    with pytest.raises(ValueError):
        tuning.interpolate({}, 1)


def test_rank_trees_picks_the_best_rate():
    profile = {"kind": "dynamic", "max_depth": 2, "n_max": 4, "tau": [[1.0, 1.5, 1.6, 1.7], [1.0, 1.5, 2.0, 2.6]]}
    costs = {"forward": {"1": 0.010, "4": 0.016}, "draft.eagle2": {"1": 0.002, "2": 0.004}, "overhead": 0.001}
    ranked = tuning.rank_trees(profile, costs, "eagle2")
    best = ranked[0]
    assert (best["depth"], best["total_tokens"]) == (2, 4)
    assert best["tok_s"] == pytest.approx(2.6 / (0.001 + 0.004 + 0.016))
    assert all(a["tok_s"] >= b["tok_s"] for a, b in zip(ranked, ranked[1:]))
    # a slower device flips the choice to the small tree
    costs["forward"] = {"1": 0.010, "4": 0.040}
    assert tuning.rank_trees(profile, costs, "eagle2")[0]["total_tokens"] < 4
    # a small tree's own drafting cost ("depth:nodes") is used where it was measured
    costs["draft.eagle2"]["2:3"] = 0.0005
    rows = {(r["depth"], r["total_tokens"]): r for r in tuning.rank_trees(profile, costs, "eagle2")}
    assert rows[2, 3]["seconds"] == pytest.approx(0.001 + 0.0005 + tuning.interpolate(costs["forward"], 3))
    assert rows[2, 4]["seconds"] == pytest.approx(0.001 + 0.004 + tuning.interpolate(costs["forward"], 4))


def test_rank_trees_price_the_engines_other_cost_by_tree_size():
    """A bigger tree costs the engine more outside its pass (LM-head rows, walk, commits): the
    measured cost at each size is read, interpolated between sizes; vanilla's is size 1."""
    profile = {"kind": "dynamic", "max_depth": 1, "n_max": 4, "tau": [[1.0, 1.5, 1.6, 1.7]]}
    costs = {"forward": {"1": 0.010, "4": 0.016}, "draft.eagle2": {"1": 0.002}, "overhead": 0.5,
             "overhead.eagle2": {"1": 0.0002, "2": 0.001, "4": 0.003}}
    rows = {r["total_tokens"]: r for r in tuning.rank_trees(profile, costs, "eagle2")}
    assert rows[2]["seconds"] == pytest.approx(0.001 + 0.002 + tuning.interpolate(costs["forward"], 2))
    assert rows[3]["seconds"] == pytest.approx(0.002 + 0.002 + tuning.interpolate(costs["forward"], 3))
    assert rows[4]["seconds"] == pytest.approx(0.003 + 0.002 + 0.016)
    assert tuning.overhead_at(costs, "eagle2", 1) == pytest.approx(0.0002)
    assert tuning.overhead_at(costs, "eagle3", 4) == 0.5  # no measurement by size: the one number


def test_shortlist_takes_three_kinds_of_tree():
    ranked = [dict(depth=5, total_tokens=64, min_prob=0.2, tok_s=9), dict(depth=6, total_tokens=64, min_prob=0.2, tok_s=8),
              dict(depth=1, total_tokens=3, tok_s=7), dict(depth=1, total_tokens=2, tok_s=6), dict(depth=2, total_tokens=2, tok_s=5)]
    assert tuning.shortlist(ranked) == [ranked[0], ranked[2], ranked[3]]
    assert tuning.shortlist(ranked[3:]) == [ranked[3]]  # the best is already fixed-size and 2 nodes


def test_shortlist_times_the_floors_above_the_models_best_floor():
    """The model over-values a low floor's marginal nodes where prompts keep them less than the
    profile's did; the next two floors up are timed too, each at the model's best depth for it."""
    ranked = [dict(depth=5, total_tokens=64, min_prob=0.15, tok_s=9.0), dict(depth=3, total_tokens=64, min_prob=0.1, tok_s=8.9),
              dict(depth=6, total_tokens=64, min_prob=0.2, tok_s=8.8), dict(depth=5, total_tokens=64, min_prob=0.2, tok_s=8.7),
              dict(depth=1, total_tokens=2, tok_s=8.6), dict(depth=4, total_tokens=64, min_prob=0.3, tok_s=8.5),
              dict(depth=5, total_tokens=64, min_prob=0.25, tok_s=8.4), dict(depth=5, total_tokens=64, min_prob=0.35, tok_s=8.3)]
    assert tuning.shortlist(ranked) == [ranked[0], ranked[2], ranked[6], ranked[4]]
    # a fixed-size tree ranked first: the best floored tree and the floors above it are timed beside it
    first = [ranked[4], *ranked[:4], *ranked[5:]]
    assert tuning.shortlist(first) == [ranked[4], ranked[0], ranked[2], ranked[6]]
    assert [tuning.shape_key(c) for c in tuning.shortlist(ranked)] == [(5, 64, 0.15), (6, 64, 0.2), (5, 64, 0.25), (1, 2, None)]


def test_tuned_tree_picks_the_fastest_measured_tree_and_caches_the_pick(target, monkeypatch, tmp_path):
    """The model ranks, the timing decides: the shortlist is timed once per device and profile."""
    from specviz.heads.io import shipped_head_dir

    monkeypatch.setenv("SPECVIZ_TUNING_DIR", str(tmp_path / "tuning"))  # not the suite's fixture costs
    profile = {"kind": "dynamic", "max_depth": 2, "n_max": 4, "top_k": 8, "samples": 100, "date": "2026-01-01",
               "prompts": 12, "tau": [[1.0, 1.4, 1.5, 1.6], [1.0, 1.5, 1.9, 2.3]]}
    costs = {"forward": {"1": 0.010, "4": 0.012}, "draft.eagle3": {"1": 0.001, "2": 0.002}, "overhead": 0.001}
    monkeypatch.setattr(tuning.pick, "load_profile", lambda folder, method: dict(profile))
    monkeypatch.setattr(tuning.pick, "device_costs", lambda *a, **k: costs)
    timed = []

    def fake_time(target_, drafter, prof, cands, prompts, max_new_tokens, params):
        timed.append(([(c["depth"], c["total_tokens"]) for c in cands], params.temperature))
        # greedy, the model's favourite (depth 2, 4 nodes) turns out slower here than the 2-node tree;
        # at T = 1 the other way round (as if the deeper tree kept paying when sampling)
        deep_wins = params.temperature > 0
        out = [dict(c, measured_tok_s=100.0 if (c["total_tokens"] == 4) != deep_wins else 120.0, measured_tau=1.25,
                    measured_nodes=float(c["total_tokens"]),
                    speedup=0.9 if (c["total_tokens"] == 4) != deep_wins else 1.1) for c in cands]
        return out, dict(tok_s=110.0)

    monkeypatch.setattr(tuning.pick, "time_candidates", fake_time)
    folder = shipped_head_dir(target.model.name, "eagle3")
    best = tuning.tuned_tree(target, "eagle3", folder, build=lambda: object())
    # the model's best (fixed size already) and its best 2-node tree, timed greedy and at T = 1
    assert timed == [([(2, 4), (1, 2)], 0.0), ([(2, 4), (1, 2)], 1.0)]
    assert (best["depth"], best["total_tokens"]) == (1, 2)
    assert (best["tok_s"], best["tau"], best["vanilla_tok_s"], best["speedup"]) == (120.0, 1.25, 110.0, 1.1)  # measured
    assert best["model_tau"] == 1.4
    assert (best["sampled"]["depth"], best["sampled"]["total_tokens"], best["sampled"]["temperature"]) == (2, 4, 1.0)
    assert tuning.tuned_tree(target, "eagle3", folder, build=lambda: pytest.fail("timed twice")) == best
    profile["date"] = "2026-02-02"  # a refreshed head: timed again
    tuning.tuned_tree(target, "eagle3", folder, build=lambda: object())
    assert len(timed) == 4
    # a pick timed with other drafting (before the lookup branch, say): timed again
    monkeypatch.setattr(tuning.pick, "TUNED_DRAFTING", dict(tuning.TUNED_DRAFTING, lookup=0))
    tuning.tuned_tree(target, "eagle3", folder, build=lambda: object())
    assert len(timed) == 6
    tuning.tuned_tree(target, "eagle3", folder, build=lambda: pytest.fail("timed twice"))
    # a pick whose candidates are not today's shortlist (the shortlist's rule changed): timed again
    monkeypatch.setattr(tuning.pick, "shortlist", lambda ranked: tuning.shortlist(ranked)[:1])
    tuning.tuned_tree(target, "eagle3", folder, build=lambda: object())
    assert len(timed) == 8 and timed[-1] == ([(2, 4)], 1.0)


def test_a_timed_tie_goes_to_the_tree_that_verifies_fewer_tokens():
    from specviz.tuning.pick import TIE, _measured_best

    profile = {"kind": "dynamic", "top_k": 8}
    cand = lambda p, speedup, nodes: dict(depth=5, total_tokens=64, min_prob=p, tau=1.8, tok_s=160.0,  # noqa: E731
                                          measured_tok_s=200.0 * speedup, measured_tau=1.8, measured_nodes=nodes, speedup=speedup)
    pick = {"vanilla_tok_s": 200.0, "temperature": 0.0,
            "candidates": [cand(0.15, 1.10, 3.6), cand(0.2, 1.085, 3.2), cand(0.25, 1.075, 3.0), cand(None, 1.05, 2.0)]}
    assert 1.10 * (1 - TIE) <= 1.075 < 1.10 and 1.05 < 1.10 * (1 - TIE)
    best = _measured_best(profile, pick)
    assert (best["min_prob"], best["speedup"], best["tok_s"]) == (0.25, 1.075, 200.0 * 1.075)  # within the tie, fewest nodes
    pick["candidates"][2]["speedup"] = 1.06  # out of the tie now
    assert _measured_best(profile, pick)["min_prob"] == 0.2
    for c in pick["candidates"]:
        del c["measured_nodes"]  # a pick timed before nodes were counted: the fastest
    assert _measured_best(profile, pick)["min_prob"] == 0.15


def test_the_tuner_times_the_drafting_a_tuned_drafter_does(target, monkeypatch):
    built = {}
    # records the drafter the tuner would time, and returns no record (nothing is timed)
    monkeypatch.setattr(methods.tuning, "tree_for", lambda *a, **k: built.setdefault(a[1], k["build"]()) and None
                        if "build" in k else None)
    methods.tune("eagle3", target)
    methods.tune("eagle2", target)
    methods.tune("medusa", target)
    assert built["eagle3"].lookup == tuning.TUNED_DRAFTING["lookup"] > 0
    assert built["eagle2"].lookup > 0 and built["eagle2"].draft_vocab == tuning.TUNED_DRAFTING["draft_vocab"]
    assert built["medusa"].lookup > 0 and built["medusa"].draft_vocab == tuning.TUNED_DRAFTING["draft_vocab"]


def test_time_candidates_runs_each_tree_against_vanilla(target):
    """Real rounds: each candidate's tree shape is applied (a 2-node tree never accepts more than
    one draft per round) and vanilla is timed beside them."""
    from specviz.methods import make_drafter

    profile = {"kind": "dynamic", "top_k": 8}
    cands = [dict(depth=3, total_tokens=8), dict(depth=1, total_tokens=2)]
    drafter = make_drafter("eagle3", target, tree_size="paper")
    out, vanilla = tuning.time_candidates(target, drafter, profile, cands, EXAMPLE_PROMPTS[:2], 16)
    assert [(c["depth"], c["total_tokens"]) for c in out] == [(3, 8), (1, 2)]
    assert all(c["measured_tok_s"] > 0 and c["speedup"] > 0 for c in out) and vanilla["tok_s"] > 0
    assert 1.0 <= out[1]["measured_tau"] <= 2.0 and 1.0 <= out[0]["measured_tau"] <= 4.0
    assert out[0]["measured_tau"] > out[1]["measured_tau"]  # the deeper tree accepts more on these prompts
    hot, _ = tuning.time_candidates(target, drafter, profile, cands, EXAMPLE_PROMPTS[:2], 16, SamplingParams(temperature=1.0))
    assert drafter.shape.draw == "sample"  # timed as a tuned EAGLE-3 drafts at T > 0
    assert 1.0 <= hot[1]["measured_tau"] <= 2.0 and hot[0]["measured_tau"] < out[0]["measured_tau"]  # sampling accepts less


@pytest.mark.parametrize("method", ["eagle3", "eagle1"])
def test_a_tuned_drafter_uses_its_sampled_tree_only_at_t_above_0(target, method):
    """The tuner times trees greedy and at T = 1 (`tuned["sampled"]`); a drafter then drafts the
    greedy tree at T = 0 and the sampled one at any T > 0, and stays exact at T = 0."""
    from specviz.core.sampling import SamplingParams
    from specviz.drafters import eagle
    from specviz.drafters.base import TreePick

    if method == "eagle3":
        tuned = dict(depth=3, total_tokens=8, top_k=8, sampled=dict(depth=1, total_tokens=2))
        drafter = eagle.make_eagle3(target, pick=TreePick.from_record(tuned), draw="sample")
    else:
        tuned = dict(paths=EAGLE1_TREE[:7], sampled=dict(paths=EAGLE1_TREE[:1]))
        drafter = eagle.make_eagle1(target, pick=TreePick.from_record(tuned))
    prompt = EXAMPLE_PROMPTS[0]
    greedy = SpeculativeDecoder(target, drafter, seed=0, detail=False).generate(prompt, 32)
    assert greedy.tokens == vanilla_generate(target, prompt, 32).tokens
    assert max(len(t.nodes) for t in greedy.traces) > 2  # the greedy tree (8 nodes, or EAGLE-1's 8-node prefix)
    hot = SpeculativeDecoder(target, drafter, SamplingParams(temperature=1.0), seed=0, detail=False).generate(prompt, 32)
    assert max(len(t.nodes) for t in hot.traces) == 2  # root + at most one draft, every round


def test_rank_trees_prices_floored_trees_round_by_round():
    """A floored profile entry costs the mean of its recorded rounds, each at its own drafting
    cost (levels, width) and tree size; it wins where the head's sureness pays."""
    profile = {"kind": "dynamic", "max_depth": 1, "n_max": 4, "samples": 4, "tau": [[1.0, 1.3, 1.4, 1.45]],
               "floors": [{"min_prob": 0.5, "depth": 1, "tau": 1.5, "rounds": [[1, 1, 1, 2], [1, 1, 2, 2]]}]}
    costs = {"forward": {"1": 0.010, "4": 0.016}, "draft.eagle3": {"1": 0.002, "1:2": 0.001}, "overhead": 0.0005}
    rows = tuning.rank_trees(profile, costs, "eagle3")
    fl = [r for r in rows if r.get("min_prob")]
    assert len(fl) == 1 and fl[0]["depth"] == 1 and fl[0]["total_tokens"] == 4
    want = 0.0005 + (2 * (0.001 + 0.010) + 2 * (0.001 + tuning.interpolate(costs["forward"], 2))) / 4
    assert fl[0]["seconds"] == pytest.approx(want)
    assert rows[0] is fl[0]  # tau 1.5 at ~1.25 round-costs beats every fixed size here


def test_floored_eagle3_is_lossless_and_sizes_its_tree_by_sureness(target):
    """The shipped EAGLE-3 head with a path-probability floor: greedy output equals vanilla's, the
    tree's size follows the head's sureness (root-only rounds and branching ones), and every kept
    node is at least that likely."""
    import math

    from specviz.methods import make_drafter

    prompt = EXAMPLE_PROMPTS[0]
    ref = vanilla_generate(target, prompt, 48).tokens
    drafter = make_drafter("eagle3", target, depth=4, total_tokens=24, min_prob=0.3)
    assert drafter.tuning is None and drafter.shape.min_prob == 0.3
    dec = SpeculativeDecoder(target, drafter, seed=0, detail=False)
    res = dec.generate(prompt, 48)
    assert res.tokens == ref
    sizes = [len(t.nodes) for t in res.traces]
    assert min(sizes) == 1 and max(sizes) >= 3
    assert sum(len(t.accepted_nodes) for t in res.traces) > 0


class _Keep(tuning.Recorder):
    """Records every tree but lets the engine verify it (the real acceptance)."""

    def propose(self, context, root, params, generator):
        tree = self.inner.propose(context, root, params, generator)
        self.trees.append(tree)
        return tree


@pytest.mark.parametrize("depth,total", [(3, 6), (5, 12)])
def test_profile_predicts_each_dynamic_round_exactly(target, depth, total):
    """For every round the engine runs with an EAGLE-2 tree of (total, depth), the profile's count
    from the candidate list equals the tokens the engine actually accepted."""
    from specviz.methods import make_drafter

    prompt = EXAMPLE_PROMPTS[3]
    ref = vanilla_generate(target, prompt, 40).tokens
    inner = make_drafter("eagle2", target, depth=tuning.MAX_DEPTH, total_tokens=total)
    rec = _Keep(inner)
    dec = SpeculativeDecoder(target, rec, seed=0, detail=False)
    dec.start(prompt, 40)
    done = 0
    checked = 0
    while not dec.done:
        tr = dec.step()
        tree = rec.trees[-1]
        if tree.candidates is not None and done + tuning.MAX_DEPTH < len(ref):
            # the same candidates truncated to `depth` levels predict a depth-limited tree; the
            # engine ran the deepest tree, so compare at depth MAX_DEPTH and recheck by depth below
            acc = tuning.dynamic_accepts(tree.candidates, ref[done : done + tuning.MAX_DEPTH], tuning.MAX_DEPTH, 64)
            assert acc[tuning.MAX_DEPTH - 1][total - 1] == len(tr.accepted_nodes)
            checked += 1
        done += len(tr.committed)
    assert checked >= 5
    assert dec.generated == ref[: len(dec.generated)]
    # a depth-limited engine run agrees with the depth row of the same profile
    inner = make_drafter("eagle2", target, depth=depth, total_tokens=total)
    rec = _Keep(inner)
    dec = SpeculativeDecoder(target, rec, seed=0, detail=False)
    dec.start(prompt, 40)
    done = 0
    while not dec.done:
        tr = dec.step()
        tree = rec.trees[-1]
        if tree.candidates is not None and done + depth < len(ref):
            acc = tuning.dynamic_accepts(tree.candidates, ref[done : done + depth], depth, 64)
            assert acc[depth - 1][total - 1] == len(tr.accepted_nodes)
        done += len(tr.committed)


def _engine_tau(target, drafter, prompts, max_new_tokens, horizon):
    """tokens / rounds of real greedy decodes, over the rounds whose continuation the profile
    knows (those starting at least `horizon` tokens before an output cut by the budget)."""
    tokens = rounds = 0
    for prompt in prompts:
        res = SpeculativeDecoder(target, drafter, seed=0, detail=False).generate(prompt, max_new_tokens)
        ended = res.tokens[-1] in target.eos_ids
        done = 0
        for tr in res.traces:
            if not ended and done + horizon > len(res.tokens):
                break
            tokens, rounds = tokens + len(tr.committed), rounds + 1
            done += len(tr.committed)
    return tokens / rounds


@pytest.mark.slow
def test_profile_tau_is_the_tau_a_decode_gets(target):
    """A profile's tau is tokens per round of a decode with that tree (the recorded output walked
    round by round), not the mean over positions: equal to the engine's own tau on the same
    prompts, for dynamic, floored and static trees."""
    from specviz.methods import make_drafter

    prompts, budget = EXAMPLE_PROMPTS[3:5], 40
    prof = tuning.collect_profile(target, make_drafter("eagle2", target, tree_size="paper"), prompts, budget)
    assert prof["tau_from"] == "decode walk"
    for depth, total in ((1, 2), (2, 4), (3, 8)):
        real = _engine_tau(target, make_drafter("eagle2", target, depth=depth, total_tokens=total), prompts, budget,
                           tuning.MAX_DEPTH)
        assert prof["tau"][depth - 1][total - 1] == pytest.approx(real, abs=1e-4), (depth, total)
    floor = next(f for f in prof["floors"] if f["min_prob"] == 0.3 and f["depth"] == 3)
    real = _engine_tau(target, make_drafter("eagle2", target, depth=3, total_tokens=64, min_prob=0.3), prompts,
                       budget, tuning.MAX_DEPTH)
    assert floor["tau"] == pytest.approx(real, abs=1e-4)
    assert sum(c for *_, c in floor["rounds"]) < prof["samples"]  # the rounds of a decode, not every position
    stat = tuning.collect_profile(target, make_drafter("eagle1", target, tree_size="paper"), prompts, budget)
    horizon = max(len(p) for p in stat["paths"])
    for n in (2, 5, 12):
        real = _engine_tau(target, make_drafter("eagle1", target, static_tree=stat["paths"][: n - 1]), prompts, budget,
                           horizon)
        assert stat["tau"][n - 1] == pytest.approx(real, abs=1e-4), n


def test_static_profile_and_subset_tree(target):
    """EAGLE-1's ranked static nodes: tau(N) rises with N, and a subset tree keeps greedy output exact."""
    from specviz.methods import make_drafter

    prompts = EXAMPLE_PROMPTS[5:7]
    prof = tuning.collect_profile(target, make_drafter("eagle1", target, tree_size="paper"), prompts, max_new_tokens=32)
    assert prof["kind"] == "static" and len(prof["paths"]) == len(EAGLE1_TREE)
    assert sorted(map(tuple, prof["paths"])) == sorted(map(tuple, EAGLE1_TREE))
    tau = prof["tau"]
    assert tau[0] == 1.0 and min(tau) >= 1.0 and tau[-1] > 1.2
    # every prefix of the ranked paths is a valid tree (parents first)
    for n in range(1, len(prof["paths"]) + 1):
        have = {()}
        for p in prof["paths"][:n]:
            assert tuple(p[:-1]) in have
            have.add(tuple(p))
    d = make_drafter("eagle1", target, static_tree=prof["paths"][:6])
    out = SpeculativeDecoder(target, d, seed=0, detail=False).generate(prompts[0], 32)
    assert out.tokens == vanilla_generate(target, prompts[0], 32).tokens
    assert max(len(t.nodes) for t in out.traces) <= 7


@pytest.mark.slow
def test_costs_are_measured_once_and_cached(target, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_TUNING_DIR", str(tmp_path / "tuning"))  # not the suite's fixture costs
    calls = []
    real = tuning.forward_curve

    def counting(model, sizes=(1,), context=300, repeats=5, head_rows=None):
        calls.append(tuple(sizes))
        if len(sizes) > 1:  # the tuner's curve: the LM head over the rows a round computes, not all
            assert head_rows == PREFETCH_ROWS
        return real(model, sizes, context=min(context, 64), repeats=3, head_rows=head_rows)  # a median: one sample can stall under load

    monkeypatch.setattr(tuning.costs, "forward_curve", counting)
    monkeypatch.setattr(tuning.costs, "GRID", (1, 2, 4, 8))
    profile = {"kind": "dynamic", "max_depth": 2, "n_max": 8, "tau": [[1.0] + [1.5] * 7, [1.0] + [1.8] * 7]}
    from specviz.methods import make_drafter

    build = lambda: make_drafter("eagle2", target, tree_size="paper")  # noqa: E731
    c1 = tuning.device_costs(target, "eagle2", profile, build=build)
    n_calls = len(calls)
    # depths 1-2 at full width, and each small tree (2..8 nodes, top_k 8) that expands fewer nodes
    small = {f"{d}:{n}" for d in (1, 2) for n in range(2, 9)}
    assert set(c1["forward"]) == {"1", "2", "4", "8"} and set(c1["draft.eagle2"]) == {"1", "2"} | small
    assert all(v > 0 for v in c1["forward"].values()) and c1["overhead"] >= 0
    # the engine's other cost per round, by tree size (1: vanilla), from real rounds; the timing
    # wrappers are gone from the model afterwards
    assert set(c1["overhead.eagle2"]) == {"1", "2", "4", "8"} and all(v >= 0 for v in c1["overhead.eagle2"].values())
    assert "forward" not in vars(target.model) and "logits" not in vars(target.model)
    c2 = tuning.device_costs(target, "eagle2", profile, build=lambda: pytest.fail("measured twice"))
    assert calls[n_calls:] == [(1,)]  # only the one-token check that the cached costs still hold
    assert c2 == json.loads(json.dumps(c1))
    files = list((tmp_path / "tuning").glob("*.json"))
    assert len(files) == 1 and "float32" in files[0].name

    # measured while the machine was busy (a one-token pass 50x slower than now): measured again
    busy = dict(c1, forward={k: 50 * v for k, v in c1["forward"].items()})
    files[0].write_text(json.dumps(busy))
    logs = []
    c3 = tuning.device_costs(target, "eagle2", profile, build=build, log=logs.append)
    assert float(c3["forward"]["1"]) < 10 * float(c1["forward"]["1"]) and any("again" in m for m in logs)
    # measured with another kernel or fused-layer limit: measured again, without a timing check
    files[0].write_text(json.dumps(dict(c1, runtime="another runtime")))
    n = len(calls)
    c4 = tuning.device_costs(target, "eagle2", profile, build=build)
    assert calls[n] != (1,) and c4["runtime"] == tuning.runtime_id(target.model)


def test_the_cost_file_lives_in_the_user_cache_unless_a_folder_is_named(target, tmp_path, monkeypatch):
    monkeypatch.delenv("SPECVIZ_TUNING_DIR", raising=False)
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    assert tuning.cost_file(target.model).parent == tmp_path / "tuning"
    monkeypatch.setenv("SPECVIZ_TUNING_DIR", str(tmp_path / "elsewhere"))
    assert tuning.cost_file(target.model).parent == tmp_path / "elsewhere"


def test_the_suites_fixture_costs_are_held_and_never_timed(target, monkeypatch):
    """The pages under test read the fixture table (tests/_costs.py): a tuned drafter is built from its
    predicted picks and `methods.tune` returns them without timing a tree or re-timing the table."""
    import _costs

    f = tuning.cost_file(target.model)
    assert json.loads(f.read_text())["fixture"] == _costs.FIXTURE.name
    monkeypatch.setattr(tuning.costs, "forward_curve", lambda *a, **k: pytest.fail("the fixture table was re-timed"))
    monkeypatch.setattr(tuning.pick, "time_candidates", lambda *a, **k: pytest.fail("a tree was timed"))
    for m in methods.TUNABLE:
        best = methods.tune(m, target)
        assert best is not None and best.sampled_timing.temperature == 1.0, m
    assert methods.make_drafter("eagle3", target).shape.depth == methods.tune("eagle3", target).greedy.depth


def test_shipped_heads_carry_profiles(target):
    """The device-independent half of the tuning ships with the heads."""
    for method, head in (("eagle1", "eagle1"), ("eagle2", "eagle1"), ("eagle3", "eagle3"), ("medusa", "medusa")):
        prof = tuning.load_profile(shipped_head_dir(target.model.name, head), method)
        assert prof is not None, method
        assert prof["samples"] >= 500
        if prof["kind"] == "dynamic":
            assert len(prof["tau"]) == tuning.MAX_DEPTH and all(len(r) == prof["n_max"] for r in prof["tau"])
            assert max(map(max, prof["tau"])) > 1.5


def test_explicit_sizes_skip_tuning(target, monkeypatch):
    from specviz.methods import make_drafter

    monkeypatch.setattr(tuning.pick, "tuned_tree", lambda *a, **k: pytest.fail("tuning ran"))
    d = make_drafter("eagle3", target, depth=3, total_tokens=10)
    assert (d.shape.depth, d.shape.total_tokens, d.tuning) == (3, 10, None)
    d = make_drafter("eagle1", target, tree_size="paper")
    assert [list(p) for p in d.shape.paths] == EAGLE1_TREE
    assert torch.is_tensor(next(d.head.parameters()))


def test_compare_trees_script_reads_tree_settings():
    """scripts/compare_trees.py: a --tree is a method and its drafter options, typed."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("compare_trees", Path(__file__).parent.parent / "scripts" / "compare_trees.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    label, name, opts = mod.parse_tree("eagle3 depth=1 total_tokens=64 min_prob=0.25")
    assert (name, opts) == ("eagle3", {"depth": 1, "total_tokens": 64, "min_prob": 0.25})
    assert mod.parse_tree("eagle2")[1:] == ("eagle2", {})


def test_the_tuners_pass_times_price_the_lm_head_rows_a_round_computes(target, monkeypatch):
    """A round computes the LM head for the root and the likely path only (engine.PREFETCH_ROWS):
    the curve the tuner prices trees with must do the same, or a 24-node tree pays for 24 rows."""
    from specviz.runtime.machine import pass_times

    model = target.model
    rows = []
    real = model.logits
    monkeypatch.setattr(model, "logits", lambda x, *a, **k: rows.append(x.numel() // x.shape[-1]) or real(x, *a, **k))
    pass_times(model, (1, 2, 8), context=16, repeats=1, head_rows=3)
    # the context, a warm-up round over every size, then timed rounds with the sizes taking turns (each
    # round starts one size further on): a drift in the machine's speed then hits every size alike
    assert rows == [16, 1, 2, 3, 2, 3, 1]
    rows.clear()
    times = pass_times(model, (8,), context=16, repeats=2)  # a whole pass: the LM head over every row
    assert rows == [16, 8, 8, 8] and len(times[8]) == 2
