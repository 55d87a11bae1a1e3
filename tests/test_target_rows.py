"""Lazy target rows: each row equals the whole-matrix computation bit for bit, and a round that
computes only the rows it uses gives the same trace as one that computes every row."""

import json

import pytest
import torch

from specviz import methods as registry
from specviz.core.engine import SpeculativeDecoder
from specviz.core.sampling import SamplingParams, probs
from specviz.core.target_rows import TargetRows

PARAMS = [SamplingParams(0.0), SamplingParams(0.8, 0, 0.9), SamplingParams(1.0, 20, 1.0)]


@pytest.mark.parametrize("params", PARAMS, ids=["greedy", "top-p", "top-k"])
def test_rows_equal_the_whole_matrix(target, params):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(9, target.model.cfg.hidden_size, generator=g)
    full = target.model.logits(hidden)
    calls = []

    def logits_of(rows):
        calls.append(list(rows))
        return target.model.logits(hidden[rows])

    rows = TargetRows(logits_of, 9, full.shape[-1], params, raw=True)
    rows.ensure([0, 4, 7])
    assert calls == [[0, 4, 7]] and rows.computed() == [0, 4, 7]
    want = probs(full, params) if not params.greedy else torch.zeros_like(full).scatter_(-1, full.argmax(-1, keepdim=True), 1.0)
    for i in (0, 4, 7, 2):  # row 2 is computed on first use, alone
        assert torch.equal(rows.p[i], want[i])
        assert torch.equal(rows.raw[i], full[i].softmax(-1))
        assert rows.argmax[i] == int(full[i].argmax())
    assert calls[-1] == [2]
    assert rows.p.shape == (9, full.shape[-1]) and rows.p.dim() == 2
    assert rows.p[4, 17] == want[4, 17]
    assert rows.gather([0, 7], [5, 6]) == [float(want[0, 5]), float(want[7, 6])]
    with pytest.raises(IndexError):
        rows.ensure([9])


def _canon(trace) -> dict:
    d = json.loads(trace.to_json())
    for k in ("draft_time_s", "verify_time_s", "total_time_s"):
        d.pop(k)
    return d


@pytest.mark.parametrize("method,options", [("eagle3", dict(depth=5, top_k=4, total_tokens=16)), ("pld", {})])
@pytest.mark.parametrize("params", PARAMS[:2], ids=["greedy", "top-p"])
def test_lazy_round_equals_an_eager_one(target, method, options, params):
    """Every field of every round equals the one computed with all rows, except the top lists
    after leaves the walk never reached, which are empty (and must be: nothing used them)."""

    def run(eager: bool):
        dec = SpeculativeDecoder(target, registry.make_drafter(method, target, **options), params, seed=4)
        if eager:
            lazy = dec.target_rows

            def every_row(plan, out):
                rows = lazy(plan, out)
                rows.ensure(range(len(plan.tree)))
                return rows

            dec.target_rows = every_row
        dec.start("Repeat twice: red green blue, red green blue.", 20)
        return [_canon(dec.step()) for _ in range(4)]

    skipped = 0
    for a, b in zip(run(eager=False), run(eager=True)):
        reached = {0, *a["accepted_nodes"]}
        inner = {n["parent"] for n in a["nodes"]}
        for na, nb in zip(a["nodes"], b["nodes"]):
            if na["id"] in reached or na["id"] in inner:
                assert na == nb
            else:
                assert na["next_p_top"] == [] and nb["next_p_top"]
                na["next_p_top"], na["next_p_raw_top"] = nb["next_p_top"], nb["next_p_raw_top"]
                skipped += 1
        assert a == b
    assert skipped > 0  # the lazy rounds did skip rows


def test_likely_path_follows_the_draft_while_it_is_likely():
    from specviz.core.tree import DraftTree

    #        0
    #      /   \
    #   1 (.3)  2 (.6)
    #            |   \
    #         3 (.5)  4 (.4)
    #            |
    #         5 (.9)
    tree = DraftTree(tokens=[9, 1, 2, 3, 4, 5], parents=[-1, 0, 0, 2, 2, 3], q=[1, 0.3, 0.6, 0.5, 0.4, 0.9])
    assert tree.likely_path(0.25, 5) == [2, 3, 5]  # path probabilities .6, .3, .27
    assert tree.likely_path(0.28, 5) == [2, 3]
    assert tree.likely_path(0.25, 1) == [2]
    assert tree.likely_path(0.7, 5) == []
    assert DraftTree.chain(9, [1, 2]).likely_path(0.5, 4) == [1, 2]


@pytest.mark.parametrize("params", PARAMS[:2], ids=["greedy", "top-p"])
def test_a_fast_round_computes_the_likely_path_with_the_root_and_changes_no_token(target, params, monkeypatch):
    """Without a detailed trace the root's LM-head call also computes the rows of the draft's
    likeliest path (PREFETCH_ROWS); the tokens are those of a run that computes rows one by one."""
    import specviz.core.engine as engine

    def run(prefetch_rows):
        monkeypatch.setattr(engine, "PREFETCH_ROWS", prefetch_rows)
        dec = SpeculativeDecoder(target, registry.make_drafter("eagle3", target, depth=4, top_k=4, total_tokens=12),
                                 params, seed=3, detail=False)
        first_calls = []
        lazy = dec.target_rows

        def spy(plan, out):
            tree = plan.tree
            rows = lazy(plan, out)
            inner = rows._logits_of

            def logits_of(r):
                if not rows._p:
                    first_calls.append((list(r), tree.likely_path(engine.PREFETCH_MIN_PROB, prefetch_rows - 1)))
                return inner(r)

            rows._logits_of = logits_of
            return rows

        dec.target_rows = spy
        res = dec.generate("Repeat twice: red green blue, red green blue.", 24)
        return res.tokens, first_calls

    plain, plain_calls = run(1)
    fast, fast_calls = run(3)
    assert fast == plain
    assert all(rows == [0] for rows, _ in plain_calls)
    assert all(rows == [0] + path for rows, path in fast_calls)
    assert any(len(rows) > 1 for rows, _ in fast_calls)  # the path was taken in some rounds
