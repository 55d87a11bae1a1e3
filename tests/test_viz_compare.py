"""The pure builders behind the Compare, Why-it-is-free, Losslessness and rule pages."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specviz.bench import measured
from specviz.viz import toy
from specviz.runtime.machine import interpolate
from specviz.viz import compare as vc


def test_profile_curves_from_the_shipped_heads():
    profiles = measured.acceptance_profiles()
    assert {"eagle1", "eagle2", "eagle3", "medusa"} <= set(profiles)
    for m, prof in profiles.items():
        sizes, taus = vc.profile_tau_curve(prof, depth=5)
        assert sizes[0] == 1 and taus[0] == 1.0  # the root alone keeps exactly the bonus token
        # a bigger tree keeps at least as many tokens in any one round; walked over a whole decode a round that
        # keeps more starts the next one at another position, so tau(N) may dip by a hair (the session-20 EAGLE-3
        # profile: 2.474 -> 2.466 from 16 to 17 nodes), never by more than 1%, and it grows over the range
        assert all(b >= a * 0.99 for a, b in zip(taus, taus[1:])), m
        assert taus[-1] > taus[1] > taus[0], m
    dyn = profiles["eagle3"]
    assert vc.profile_tau_curve(dyn, depth=5)[1] == dyn["tau"][4]
    assert vc.tau_at(vc.profile_tau_curve(profiles["medusa"]), 500) == profiles["medusa"]["tau"][-1]


def test_recorded_rounds_give_lengths_and_depth_rates():
    rounds = [[0, 3, 10], [2, 3, 10], [3, 3, 10], [1, 2, 10]]  # accepted, tree depth, nodes
    assert vc.recorded_lengths(rounds) == [1, 3, 4, 2]
    rates = vc.recorded_depth_rates(rounds)
    assert rates[0] == pytest.approx(3 / 4)  # depth 1: all four tried, three accepted
    assert rates[1] == pytest.approx(2 / 3)  # depth 2: the three with >= 1 accepted, two went on
    assert rates[2] == pytest.approx(1 / 2)  # depth 3: the tree of the last round stops at depth 2


def test_whatif_speedup_formula():
    # tau 2 tokens per round at twice the cost of a vanilla step: no gain
    assert vc.whatif_speedup(2.0, 0.010, 0.015, 0.005) == pytest.approx(1.0)
    assert vc.whatif_speedup(3.0, 0.010, 0.010, 0.0) == pytest.approx(3.0)  # free tokens: speedup = tau
    assert vc.whatif_speedup(2.0, 0.008, 0.010, 0.004, overhead=0.002) == pytest.approx(2 * 0.010 / 0.016)
    fwd = {"1": 0.004, "4": 0.008, "16": 0.024, "64": 0.075}
    assert interpolate(fwd, 10) == pytest.approx(0.016)
    ns, sp = vc.whatif_series(([1, 2, 3], [1.0, 1.5, 1.8]), fwd, lambda n: 0.001)
    assert ns == [2, 3] and sp[0] == pytest.approx(1.5 * 0.004 / (interpolate(fwd, 2) + 0.001))
    fig = vc.whatif_figure({"EAGLE-3 · this machine": (ns, sp)}, "en")
    assert list(fig.data[0].y) == sp
    # the engine's other cost measured by tree size: vanilla pays size 1's, a tree its own size's
    ns, sp = vc.whatif_series(([1, 2, 3], [1.0, 1.5, 1.8]), fwd, lambda n: 0.001, {"1": 0.0005, "3": 0.0025})
    assert sp[0] == pytest.approx(1.5 * (0.004 + 0.0005) / (interpolate(fwd, 2) + 0.001 + 0.0015))
    assert sp[1] == pytest.approx(1.8 * (0.004 + 0.0005) / (interpolate(fwd, 3) + 0.001 + 0.0025))


def test_outcome_probability_is_the_product_along_the_path():
    dists = {(): np.array([0.5, 0.5]), (0,): np.array([0.2, 0.8]), (1,): np.array([0.9, 0.1])}
    probs = {o: vc.outcome_probability(o, dists.__getitem__) for o in [(0, 0), (0, 1), (1, 0), (1, 1)]}
    assert probs[(0, 1)] == pytest.approx(0.4) and sum(probs.values()) == pytest.approx(1.0)


def test_single_draw_is_the_chain_rule():
    p, q = toy.PRESETS["overconfident"]
    draws = [toy.single_draw(p, q, seed=s) for s in range(4000)]
    out = np.bincount([d.x if d.accepted else d.y for d in draws], minlength=len(p)) / len(draws)
    assert np.abs(out - toy.normalise(p)).max() < 0.03  # the output is p
    assert all((d.y is None) == d.accepted and (d.bonus is None) != d.accepted for d in draws)
    assert all(d.accepted == (d.u < d.threshold) for d in draws)
    rej = [d for d in draws if not d.accepted]
    assert rej and all(d.residual[d.y] > 0 and toy.normalise(p)[d.y] > toy.normalise(q)[d.y] for d in rej)


def test_stepper_figures_highlight_the_drawn_token():
    fig = vc.draw_bars_figure(toy.TOY_VOCAB, [0.1, 0.2, 0.3, 0.2, 0.2], 2, "zh", name="x")
    assert fig.data[0].marker.color[2] != fig.data[0].marker.color[0]
    assert "0.300" in fig.layout.annotations[0].text and "抽中" in fig.layout.annotations[0].text
    fig = vc.u_threshold_figure(0.8, 0.47, "en")
    assert [round(b.x[0], 2) for b in fig.data] == [0.47, 0.53]


def test_relative_cost_figure_and_no_invented_gpu_curve():
    fig = vc.relative_cost_figure({"here": ([1, 4, 16], [4.0, 8.0, 24.0])}, "en")
    assert list(fig.data[0].y) == [1.0, 2.0, 6.0]
    for c in measured.shipped_curves():  # whatever ships must be a measurement with its machine
        assert c["forward"] and c.get("machine") and all(v > 0 for v in c["forward"].values())
    assert not math.isnan(interpolate({"1": 1.0}, 5))


def test_shipped_equal_tree_recording():
    """The recording behind the Compare page's acceptance view: every method at one tree size,
    greedy, each tau the mean of its recorded rounds. (Which EAGLE keeps most is a fact about the
    shipped heads: since the session-7 EAGLE-1 head EAGLE-2 leads and EAGLE-1 ties EAGLE-3; every
    EAGLE head still out-drafts the session-1 Medusa heads.)"""
    rec = measured.equal_tree_recording()
    assert rec is not None and rec["paper_nodes"] == 26
    runs = rec["methods"]
    assert {"eagle1", "eagle2", "eagle3", "medusa"} <= set(runs)
    for m, r in runs.items():
        lengths = vc.recorded_lengths(r["rounds"])
        assert r["tau"] == pytest.approx(sum(lengths) / len(lengths), abs=1e-3), m  # tau = tokens / rounds
        assert all(n <= 26 for _, _, n in r["rounds"])
    assert min(runs[m]["tau"] for m in ("eagle1", "eagle2", "eagle3")) > runs["medusa"]["tau"] > 1.0


def test_benchmark_tree_size_is_the_measured_nodes_a_round():
    """A floored tree's total_tokens is only its cap (64 for ~2 nodes a round): the Compare table
    shows what the run verified; a run without per-round data falls back to the tree's size."""
    floored = {"tree": {"depth": 1, "total_tokens": 64, "min_prob": 0.15}, "per_round_ms": {"nodes": 2.063}}
    assert vc.benchmark_tree_size(floored) == 2.1
    assert vc.benchmark_tree_size({"tree": {"total_tokens": 26}}) == 26
    assert vc.benchmark_tree_size({}) is None
