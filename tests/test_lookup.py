"""Prompt lookup from an n-gram index, and the lookup branch of the EAGLE drafters."""

from __future__ import annotations

import random

import pytest
import torch

from specviz import methods
from specviz.drafters.eagle import EagleDrafter
from specviz.drafters.lookup import NgramIndex
from specviz.core.engine import SpeculativeDecoder, vanilla_generate
from specviz.core.sampling import SamplingParams
from specviz.core.tree import DraftTree
from test_eagle_drafter import _head


def scan(seq, max_ngram, min_ngram, num_tokens, stop):
    """Prompt lookup as the plain scan over the whole sequence (what PLD did before its index)."""
    n_seq = len(seq)
    for n in range(min(max_ngram, n_seq - 1), min_ngram - 1, -1):
        tail = seq[n_seq - n :]
        for start in range(n_seq - n - 1, -1, -1):
            if seq[start : start + n] == tail:
                follow = seq[start + n : start + n + num_tokens]
                for j, t in enumerate(follow):
                    if t in stop:
                        follow = follow[:j]
                        break
                if follow:
                    return follow
    return []


@pytest.mark.parametrize("max_ngram,min_ngram,num_tokens", [(3, 1, 10), (3, 2, 3), (1, 1, 4), (4, 3, 1)])
def test_the_index_answers_as_the_scan_while_the_sequence_grows_and_goes_back(max_ngram, min_ngram, num_tokens):
    rng = random.Random(max_ngram * 10 + min_ngram)
    stop = {0}
    index = NgramIndex(max_ngram, min_ngram, num_tokens, stop_ids=stop)
    seq, found = [], 0
    for step in range(400):
        if step % 50 == 49:  # the engine restored a snapshot, or a new sequence began
            seq = seq[: rng.randrange(len(seq) + 1)]
        seq.extend(rng.randrange(6) for _ in range(rng.randrange(1, 4)))  # a small alphabet: many repeats
        want = scan(seq, max_ngram, min_ngram, num_tokens, stop)
        assert index.follow(list(seq)) == want
        found += bool(want)
    assert found > 100  # the comparison saw real matches, cut ones included


def test_an_occurrence_followed_by_a_stop_id_gives_way_to_an_earlier_one():
    index = NgramIndex(2, 2, 3, stop_ids={99})
    assert index.follow([1, 2, 7, 8, 5, 1, 2, 99, 4, 1, 2]) == [7, 8, 5]
    assert index.follow([1, 2, 99, 1, 2]) == []


def _tree():
    # root 10 -> 11 (q .6) -> 12 (q .5); root -> 13 (q .3)
    return DraftTree(tokens=[10, 11, 12, 13], parents=[-1, 0, 1, 0], q=[1.0, 0.6, 0.5, 0.3])


def test_a_copied_chain_follows_the_drafted_children_and_goes_on_below_them():
    t = _tree()
    g = t.with_chain([11, 12, 20, 21])
    assert g.tokens == [10, 11, 12, 13, 20, 21] and g.parents == [-1, 0, 1, 0, 2, 4]
    assert g.q[4:] == [1.0, 1.0] and g.copied == {4, 5} and g.scores[4] == g.scores[5] == t.scores[2]
    h = t.with_chain([30, 31])  # no drafted child has its first token: a new branch from the root
    assert h.parents[4:] == [0, 4] and h.copied == {4, 5} and h.children(0) == [1, 3, 4]
    assert t.with_chain([11, 12]) is t and t.with_chain([]) is t
    p = g.prune(2)  # the budget ends at depth 2: the chain's deeper nodes go, their marks with them
    assert p.tokens == [10, 11, 12, 13] and p.copied == frozenset()
    assert g.prune(3).copied == {4}
    with pytest.raises(ValueError):
        DraftTree(tokens=[1, 2], parents=[-1, 0], q=[1.0, 1.0], copied={0})


def test_pld_marks_its_drafts_copied():
    d = methods.make_drafter("pld", None, max_ngram=2, num_tokens=2)
    tree = d.propose([5, 6, 7, 8, 5], 6, SamplingParams(), torch.Generator())
    assert tree.tokens == [6, 7, 8] and tree.copied == {1, 2}


def test_the_lookup_branch_is_lossless_accepted_and_marked(tiny_target_bundle):
    target = tiny_target_bundle(seed=1)
    head = _head(target, "eagle3")
    # a prompt that repeats itself, so the target's continuation is often a copy
    prompt = [5, 9, 17, 33, 2, 8, 60, 61] * 3 + [5, 9, 17]
    ref = vanilla_generate(target, prompt, max_new_tokens=32, chat=False)
    runs = {}
    for n in (0, 3):
        d = EagleDrafter(head, target.model, name="eagle3", tree="dynamic", depth=2, top_k=2, total_tokens=3, lookup=n)
        res = SpeculativeDecoder(target, d, SamplingParams(), seed=0).generate(prompt, max_new_tokens=32, chat=False)
        assert res.tokens == ref.tokens
        runs[n] = res
        assert ("lookup" in d.describe()) == bool(n) and "lookup" not in d.describe(SamplingParams(temperature=1.0))
    copied = [nd for tr in runs[3].traces for nd in tr.nodes if nd.copied]
    assert copied and any(nd.status == "accepted" for nd in copied) and all(nd.q == 1.0 for nd in copied)
    assert not any(nd.copied for tr in runs[0].traces for nd in tr.nodes)
    assert runs[3].rounds < runs[0].rounds  # the copies were worth their place
    # at T > 0 the sampled rule needs every sibling drawn from one q: no copies join the tree
    d = EagleDrafter(head, target.model, name="eagle3", tree="dynamic", depth=2, top_k=2, total_tokens=3, lookup=3)
    res = SpeculativeDecoder(target, d, SamplingParams(temperature=1.0), seed=0).generate(prompt, max_new_tokens=16,
                                                                                          chat=False)
    assert not any(nd.copied for tr in res.traces for nd in tr.nodes)


def test_a_tuned_eagle_tree_gets_the_lookup_branch_and_the_papers_tree_not(target, monkeypatch):
    pick = {"kind": "dynamic", "depth": 1, "top_k": 8, "total_tokens": 2}
    monkeypatch.setattr(methods.tuning, "tree_for", lambda *a, **k: dict(pick) if a[3] == "auto" else None)
    assert methods.make_drafter("eagle3", target).lookup == 3
    assert methods.make_drafter("eagle3", target, lookup=0).lookup == 0
    assert methods.make_drafter("eagle2", target, tree_size="paper").lookup == 0
    from specviz.bench.cli import describe_tree  # what the benchmark files record
    assert describe_tree(methods.make_drafter("eagle3", target))["lookup"] == 3
    assert "lookup" not in describe_tree(methods.make_drafter("eagle3", target), SamplingParams(temperature=1.0))
    assert "lookup" not in describe_tree(methods.make_drafter("eagle3", target, tree_size="paper"))
    with pytest.raises(ValueError):
        methods.make_drafter("eagle3", target, lookup=-1)
    with pytest.raises(ValueError):
        methods.make_drafter("eagle2", target, lookup=True)


@pytest.mark.parametrize("method", ["medusa", "eagle1"])
def test_every_tree_drafter_takes_the_branch_on_the_real_model(method, target):
    text = "The cat sat on the mat. The dog sat on the log. Repeat both sentences exactly."
    ref = vanilla_generate(target, text, max_new_tokens=24)
    d = methods.make_drafter(method, target, tree_size="paper", lookup=3)
    res = SpeculativeDecoder(target, d, SamplingParams(), seed=0).generate(text, max_new_tokens=24)
    assert res.tokens == ref.tokens
    assert any(nd.copied and nd.status == "accepted" for tr in res.traces for nd in tr.nodes)
