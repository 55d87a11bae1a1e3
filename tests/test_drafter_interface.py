"""What a drafter is and can do, declared: its tree shape as one value, snapshot/restore/describe on
every drafter, the registry's capabilities, options checked, and tuning as an explicit step."""

from __future__ import annotations

import pytest

from specviz import SpecVizError, methods, tuning
from specviz.drafters.base import Drafter, NoDraft, TreePick, TreeTiming
from specviz.drafters.shape import TreeShape
from specviz.core.sampling import SamplingParams
from specviz.core.tree_build import EAGLE1_TREE


def test_tree_shapes_are_checked_values():
    s = TreeShape.dynamic(depth=3, top_k=8, total_tokens=10, min_prob=0.2)
    assert s.describe() == {"kind": "dynamic", "depth": 3, "top_k": 8, "total_tokens": 10, "min_prob": 0.2}
    assert s.replace(depth=4).depth == 4 and s.depth == 3  # frozen: a new value
    st = TreeShape.static(EAGLE1_TREE)
    assert st.total_tokens == len(EAGLE1_TREE) + 1 and [list(p) for p in st.paths] == EAGLE1_TREE
    for bad in (dict(depth=0, top_k=8, total_tokens=4), dict(depth=2, top_k=8, total_tokens=4, min_prob=1.0),
                dict(depth=2, top_k=8, total_tokens=4, draw="nope")):
        with pytest.raises(ValueError):
            TreeShape.dynamic(**bad)
    with pytest.raises(ValueError, match="dynamic"):
        TreeShape("static", paths=((0,),), draw="sample")
    # a tuner's T > 0 pick keeps the drafter's top-k and its way of drawing
    pick = TreePick.from_record({"depth": 3, "top_k": 4, "total_tokens": 10, "sampled": {"depth": 1, "total_tokens": 2}})
    hot = pick.sampled_for(s.replace(draw="sample"))
    assert (hot.depth, hot.total_tokens, hot.top_k, hot.draw, hot.min_prob) == (1, 2, 8, "sample", 0.0)


def test_the_tuners_pick_is_a_typed_value_read_by_name():
    """The tuner's stored record becomes shapes and timings with named fields; a static pick's T > 0 tree
    is its own paths; what a record lacks reads None, never a made-up number."""
    rec = {"kind": "dynamic", "depth": 3, "top_k": 4, "total_tokens": 10, "min_prob": 0.1, "tau": 2.5, "tok_s": 30.0,
           "vanilla_tok_s": 20.0, "speedup": 1.5, "temperature": 0.0,
           "sampled": {"depth": 2, "total_tokens": 5, "tau": 1.8, "tok_s": 22.0, "temperature": 1.0}}
    pick = TreePick.from_record(rec, draw="sample")
    assert pick.greedy == TreeShape.dynamic(3, 4, 10, 0.1, draw="sample")
    assert pick.sampled == TreeShape.dynamic(2, 4, 5, draw="sample")  # the greedy tree's top-k
    assert pick.shape_at(True) is pick.greedy and pick.shape_at(False) is pick.sampled
    assert pick.timing_at(True).speedup == 1.5 and pick.timing_at(False) == TreeTiming(tau=1.8, tok_s=22.0, temperature=1.0)
    assert pick.timing_at(False).describe() == {"tau": 1.8, "tok_s": 22.0, "temperature": 1.0}
    static = TreePick.from_record({"paths": [[0], [1], [0, 0]], "sampled": {"paths": [[0]]}})
    assert static.greedy.total_tokens == 4 and static.sampled_for(static.greedy) == TreeShape.static([[0]])
    only_greedy = TreePick.from_record({"depth": 2, "total_tokens": 3})
    assert only_greedy.sampled is None and only_greedy.shape_at(False) is only_greedy.greedy
    assert only_greedy.sampled_for(only_greedy.greedy) is None


def test_every_drafter_has_the_base_interface():
    d = NoDraft()
    assert d.snapshot() is None and d.shape is None and d.sampled_shape is None
    d.restore(None)
    assert d.describe() == {"name": "vanilla"}
    with pytest.raises(SpecVizError, match="no tree"):
        d.reshape(TreeShape.dynamic(2, 2, 3))


def test_a_shape_is_read_and_set_through_the_interface(target):
    d = methods.make_drafter("eagle3", target, depth=3, top_k=4, total_tokens=6)
    assert isinstance(d, Drafter) and d.shape == TreeShape.dynamic(3, 4, 6)
    d.reshape(TreeShape.dynamic(2, 4, 3), sampled=TreeShape.dynamic(1, 4, 2))
    assert d.shape_at(SamplingParams()).depth == 2 and d.shape_at(SamplingParams(temperature=1.0)).depth == 1
    assert d.describe(SamplingParams(temperature=1.0))["total_tokens"] == 2
    with pytest.raises(ValueError, match="dynamic"):
        d.reshape(TreeShape.static(EAGLE1_TREE))
    with pytest.raises(SpecVizError, match="reset"):  # before reset: a clear error, not a crash
        d.propose([], 5, SamplingParams(), None)


def test_unknown_options_are_refused_with_what_the_method_takes(target):
    with pytest.raises(SpecVizError, match="depht.*takes: .*depth"):
        methods.make_drafter("eagle3", target, depht=3)
    with pytest.raises(SpecVizError, match="no option gamma"):
        methods.make_drafter("vanilla", target, gamma=2)
    with pytest.raises(SpecVizError, match="tree_size"):
        methods.make_drafter("eagle3", target, tree_size="huge")
    assert methods.make_drafter("pld", target, max_ngram=2).describe()["name"] == "pld"
    assert methods.accepted_options("sps") == ("head_dir", "gamma")


def test_capabilities_are_declared_in_the_registry():
    assert methods.DRAWABLE == ("eagle2", "eagle3")
    assert all(methods.get(m).tunable for m in methods.DRAWABLE)
    assert "tune" in methods.get("eagle3").sidebar and "tune" not in methods.get("eagle1").sidebar
    assert methods.get("pld").sidebar == ("pld_ngram", "pld_tokens") and methods.get("vanilla").sidebar == ()


PICK = {"kind": "dynamic", "depth": 2, "top_k": 8, "total_tokens": 3, "min_prob": 0.0,
        "sampled": {"kind": "dynamic", "depth": 1, "top_k": 8, "total_tokens": 2}}


def test_building_a_drafter_never_tunes_and_tune_is_the_explicit_step(target, monkeypatch):
    measured = []

    def fake(target, method, head_dir=None, log=None, build=None, measure=True):
        measured.append(measure)
        return PICK if measure or cached else None

    monkeypatch.setattr(tuning.pick, "tuned_tree", fake)
    cached = False
    d = methods.make_drafter("eagle3", target)  # nothing tuned yet: the papers' tree, no timing run
    assert measured == [False] and d.tuning is None and (d.shape.depth, d.shape.total_tokens) == (6, 24)
    assert methods.tune("eagle3", target) == TreePick.from_record(PICK, draw="sample") and measured[-1] is True
    cached = True
    d = methods.make_drafter("eagle3", target)  # what tune left: its greedy and its T > 0 trees
    assert d.tuning == TreePick.from_record(PICK, draw="sample") and d.shape == TreeShape.dynamic(2, 8, 3, draw="sample")
    assert d.sampled_shape == TreeShape.dynamic(1, 8, 2, draw="sample")
    with pytest.raises(SpecVizError, match="no tree to tune"):
        methods.tune("pld", target)


def test_the_engine_takes_only_declared_drafters():
    """The engine reads what a drafter can do from the Drafter interface (q_is_probability, taps, shape),
    never by probing: an object that is not a Drafter is refused when the decoder is made."""
    from types import SimpleNamespace

    from specviz.core.engine import SpeculativeDecoder

    class LooksLikeOne:
        def propose(self, context, root, params, generator):
            return None

    with pytest.raises(TypeError, match="Drafter"):
        SpeculativeDecoder(SimpleNamespace(model=None, tokenizer=None), LooksLikeOne())
