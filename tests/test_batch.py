"""Batched speculative rounds: each sequence of a batch gets exactly what it gets alone.

The shared pass must give every row its solo bits (fused kernel) or numbers (torch path); a greedy
batch must be token-identical to vanilla for every method, mixed and ragged batches included; and a
sampled batched round must reproduce each sequence's target distribution exactly (and fail with a
broken rule of the bug zoo).
"""

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from specviz import SpecVizError, methods
from specviz.core import target as target_module
from specviz.serving.batch import BatchDecoder
from specviz.core.kv_cache import PassPart
from specviz.teaching.bugs import DEFAULT_BROKEN, get_policy
from specviz.core.engine import SpeculativeDecoder
from specviz.examples import EXAMPLE_PROMPTS
from specviz.lossless.exact import exact_round_diff
from specviz.core.sampling import SamplingParams

SPEC_BENCH = Path(__file__).resolve().parents[2] / "shared" / "data" / "spec_bench_dev.jsonl"
N_NEW = 40
BATCH_METHODS = ("vanilla", "pld", "eagle1", "eagle2", "eagle3", "medusa")


def _prompts(n: int = 8) -> list[str]:
    """8 Spec-Bench dev prompts (first turns) where the shared data is beside the checkout (CI), the
    built-in examples otherwise: the identity must hold on any prompt."""
    if SPEC_BENCH.is_file():
        rows = [json.loads(line) for line in SPEC_BENCH.read_text().splitlines() if line.strip()]
        seen, out = set(), []
        for r in rows:  # one per category first, so the batch mixes lengths and kinds of text
            if r["category"] not in seen:
                seen.add(r["category"])
                out.append(r["turns"][0])
        out += [r["turns"][0] for r in rows if r["turns"][0] not in out]
        return out[:n]
    return list(EXAMPLE_PROMPTS[:n])


@pytest.fixture(scope="module")
def prompts():
    return _prompts()


@pytest.fixture(scope="module")
def solo_vanilla(target, prompts):
    return [SpeculativeDecoder(target, detail=False).generate(p, N_NEW).tokens for p in prompts]


def _drafter(name, target):
    return methods.make_drafter(name, target, tree_size="paper") if methods.get(name).tunable else \
        methods.make_drafter(name, target)


def _prefilled(target, ids):
    cache = target.model.new_cache(len(ids) + 64)
    target.model.forward(torch.tensor([ids[:-1]]), cache, last_only=True)
    cache.commit()
    return cache


def _tree(n: int, seed: int):
    """A random tree of n nodes: parents, depths, mask rows."""
    g = torch.Generator().manual_seed(seed)
    parents = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, n)]
    depth = [0] * n
    rows = []
    for i in range(n):
        depth[i] = 0 if i == 0 else depth[parents[i]] + 1
        row, j = [False] * n, i
        while j >= 0:
            row[j], j = True, parents[j]
        rows.append(row)
    return depth, rows


@pytest.mark.parametrize("path", ["fused", "torch"])
def test_a_batched_pass_gives_every_row_its_solo_numbers(target, path, monkeypatch):
    """Ragged trees after ragged prompts in one pass: hidden states and taps of every sequence equal
    its solo pass, bit for bit (the greedy identity rests on it), in the fused kernel and in the torch
    layers, where a batch of many rows stays on the blocks (a dense GEMM's sums may depend on the batch)."""
    model = target.model
    prompts = ["Hi", "Write a long story about a dragon who learns to paint.", "2+2=?", "List three colours."]
    ids = [target.tokenizer.safe_chat_ids(p) for p in prompts]
    sizes = [1, 7, 3, 12]
    parts, solo = [], []
    for k, (i, n) in enumerate(zip(ids, sizes)):
        depth, rows = _tree(n, k)
        toks = [i[-1]] + [100 + 37 * j for j in range(1, n)]
        for cache, out in ((_prefilled(target, i), parts), (_prefilled(target, i), solo)):
            L = cache.length
            out.append((toks, cache, [L + d for d in depth], rows))
    if path == "torch":  # the batch and the solo passes both through the torch layers
        monkeypatch.setattr(model, "fused_max_tokens", 0)
        monkeypatch.setattr(target_module, "FUSED_LAYERS", False)
        monkeypatch.setattr(model, "dense_from_rows", 8)  # below the batch's 23 rows and two trees' own
    batch_parts = [PassPart(t, c, p, r if len(t) > 1 else None) for t, c, p, r in parts]
    assert model.fuses(batch_parts) == (path == "fused" and model.blocks is not None)
    outs = model.forward_batch(batch_parts, taps=(3, "final"))
    for (toks, cache, pos, rows), out in zip(solo, outs):
        ref = model.forward(torch.tensor([toks]), cache, positions=torch.tensor(pos),
                            tree_mask=torch.tensor(rows, dtype=torch.bool), taps=(3, "final"), head=False)
        assert out.hidden.shape == ref.hidden.shape
        assert torch.equal(out.hidden, ref.hidden) and torch.equal(out.taps[3], ref.taps[3])
        assert torch.equal(out.taps["final"], ref.taps["final"])
    for (_, bc, _, _), (_, sc, _, _) in zip(parts, solo):  # the same keys and values went into each cache
        n = bc.length + bc.pending
        assert torch.equal(bc.k[..., :n, :], sc.k[..., :n, :]) and torch.equal(bc.v[..., :n, :], sc.v[..., :n, :])


@pytest.mark.slow
@pytest.mark.timeout(1800)
# every method in one batch of 8; two of them (a tree drafter, a chain drafter) also in two batches of 4
@pytest.mark.parametrize("method,B", [*((m, 8) for m in BATCH_METHODS), ("eagle3", 4), ("pld", 4)])
def test_greedy_batches_are_token_identical_to_vanilla(target, prompts, solo_vanilla, method, B):
    rounds = 0
    for start in range(0, len(prompts), B):
        group = prompts[start: start + B]
        batch = BatchDecoder.of(target, lambda: _drafter(method, target), len(group))
        results = batch.generate(group, N_NEW)
        for k, res in enumerate(results):
            assert res.tokens == solo_vanilla[start + k], (method, B, group[k][:40])
        assert max(len(r.sequences) for r in batch.rounds) == len(group)  # the sequences did share passes
        rounds += len(batch.rounds)
    if method != "vanilla":  # the drafts were accepted at times (fewer batched rounds than tokens)
        assert rounds < N_NEW * len(range(0, len(prompts), B))


@pytest.mark.slow
def test_a_mixed_ragged_batch_is_identical_to_solo_runs(target, prompts, solo_vanilla):
    """Different methods (tree sizes 1 to 26), different prompt lengths and token budgets in one
    batch; sequences leave the batch as they finish."""
    names = ["eagle3", "vanilla", "medusa", "pld", "eagle1"]
    budgets = [N_NEW, 5, 23, N_NEW, 11]
    decs = []
    for name, p, n in zip(names, prompts, budgets):
        d = SpeculativeDecoder(target, _drafter(name, target), detail=False)
        d.start(p, n)
        decs.append(d)
    batch = BatchDecoder(decs)
    results = batch.generate()
    for k, (res, n) in enumerate(zip(results, budgets)):
        assert res.tokens == solo_vanilla[k][:n], names[k]
    live = [len(r.sequences) for r in batch.rounds]
    assert live[0] == 5 and live[-1] < 5  # the short ones left early, the rest went on
    assert len({n for r in batch.rounds[:1] for n in r.nodes}) > 2  # ragged trees in one pass


@pytest.mark.slow
def test_a_detailed_batched_round_traces_as_a_solo_round(target, prompts):
    """Same seed, same sampling, same drafter: the batched sequence's round traces are the solo ones
    (timings apart)."""
    params = SamplingParams(temperature=0.8, top_p=0.9)

    def strip(t):
        d = dataclasses.asdict(t)
        for k in ("draft_time_s", "verify_time_s", "total_time_s"):
            d.pop(k, None)
        return d

    rounds = 3
    solo = SpeculativeDecoder(target, _drafter("eagle3", target), params, seed=5)
    solo.start(prompts[1], 24)
    ref = [strip(solo.step()) for _ in range(rounds) if not solo.done]  # a sampled answer may end early
    batch = BatchDecoder([SpeculativeDecoder(target, _drafter(m, target), params, seed=s)
                          for m, s in (("pld", 1), ("eagle3", 5), ("medusa", 2))])
    batch.start([prompts[0], prompts[1], prompts[2]], 24)
    for _ in range(rounds):
        if not batch.done:
            batch.step()
    got = [strip(t) for t in batch.decoders[1].traces]
    assert ref and got == ref


@pytest.mark.slow
@pytest.mark.parametrize("variant,ok", [("correct", True), (DEFAULT_BROKEN, False)])
def test_a_sampled_batched_round_has_each_sequences_exact_distribution(target, prompts, variant, ok):
    """The exact one-round check on every sequence of batched rounds at T = 1: the correct rule
    reproduces each target distribution to rounding, the bug zoo's broken rule does not."""
    params = SamplingParams(temperature=1.0)
    names = ["eagle3", "eagle1", "medusa", "pld"]
    batch = BatchDecoder([SpeculativeDecoder(target, _drafter(m, target), params, seed=7 + k, policy=get_policy(variant))
                          for k, m in enumerate(names)])
    batch.start(prompts[:4], 16)
    diffs = []
    for _ in range(3):
        if batch.done:
            break
        rnd = batch.step()
        for plan, rows in zip(rnd.plans, rnd.target_rows):
            diff, k = exact_round_diff(plan.tree, rows, params, variant=variant, horizon=2)
            diffs.append(diff)
    if ok:
        assert max(diffs) < 1e-6, diffs
    else:
        assert max(diffs) > 1e-3, diffs


def test_batch_errors_are_clear(target, tiny_target):
    with pytest.raises(SpecVizError, match="at least one"):
        BatchDecoder([])
    other = SpeculativeDecoder(type("T", (), {"model": tiny_target(), "tokenizer": target.tokenizer,
                                              "eos_ids": {1}})())
    with pytest.raises(SpecVizError, match="same target"):
        BatchDecoder([SpeculativeDecoder(target), other])
    batch = BatchDecoder.of(target, lambda: methods.make_drafter("vanilla", target), 2)
    with pytest.raises(SpecVizError, match="2 sequences but got 1"):
        batch.start(["one"], 4)
    batch.start(["one", "two"], 2)
    batch.generate()
    with pytest.raises(SpecVizError, match="finished"):
        batch.step()


def test_the_recorded_batched_round_replays_identically(target):
    """assets/lessons/batch-eagle3.json is a real batched round: replayed live, every user's round
    is the recorded one (the lesson and the serving page draw it without running the model)."""
    from specviz.teaching import lesson_batch

    rec = lesson_batch.load()
    assert rec is not None and len(rec.traces) == 3
    assert rec.pass_rows == sum(len(t.nodes) for t in rec.traces)
    _, check = lesson_batch.check_replay(target, rec)  # exact, or to specviz.runtime.agreement's tolerance on other numerics
    assert check.differences == []
    rec.traces[1].nodes[2].token += 1  # a planted change is caught on any machine
    assert lesson_batch.check_replay(target, rec)[1].differences
