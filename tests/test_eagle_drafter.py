"""EAGLE drafters on the engine: lossless greedy output, consistent head cache across rounds."""

from __future__ import annotations

import contextlib

import pytest
import torch

from specviz.runtime import agreement
from specviz.drafters.eagle import EagleDrafter
from specviz.core.engine import SpeculativeDecoder, vanilla_generate
from specviz.heads import Eagle1Head, Eagle3Head, head_config_from_target
from specviz.core.sampling import SamplingParams


def _head(target, kind):
    cfg = target.cfg
    torch.manual_seed(0)
    if kind == "eagle3":
        h = Eagle3Head(head_config_from_target(cfg, draft_vocab_size=96))
        h.set_vocab(torch.arange(0, cfg.vocab_size)[torch.randperm(cfg.vocab_size)[:96]])
    else:
        h = Eagle1Head(head_config_from_target(cfg))
    with torch.no_grad():
        for p in h.parameters():
            if p.dim() > 1:
                p.mul_(3.0)
    h.bind(target.model.embed)
    return h.eval()


@pytest.mark.parametrize("kind,tree,min_prob", [("eagle1", "static", 0.0), ("eagle1", "dynamic", 0.0), ("eagle3", "dynamic", 0.0),
                                                ("eagle1", "dynamic", 0.3), ("eagle3", "dynamic", 0.2)])
def test_greedy_identical_to_vanilla_and_cache_consistent(kind, tree, min_prob, tiny_target_bundle):
    target = tiny_target_bundle(seed=1)
    head = _head(target, kind)
    drafter = EagleDrafter(head, target.model, name=kind, tree=tree, depth=4, top_k=4, total_tokens=12, min_prob=min_prob)
    prompt = [5, 9, 17, 33, 2, 8, 60, 61]
    ref = vanilla_generate(target, prompt, max_new_tokens=24, chat=False)
    dec = SpeculativeDecoder(target, drafter, SamplingParams(), seed=0)
    res = dec.generate(prompt, max_new_tokens=24, chat=False)
    assert res.tokens == ref.tokens
    if min_prob:  # the floor changed the tree's size from round to round, root-only rounds included
        assert len({len(t.nodes) for t in res.traces}) > 1
    # the head's committed cache equals a fresh encoding of the whole context with true features
    ctx = dec.context
    cache = target.model.new_cache(len(ctx) + 4)
    out = target.model.forward(torch.tensor([ctx]), cache, taps=drafter.taps)
    fresh = EagleDrafter(head, target.model, name=kind, tree=tree, depth=4, top_k=4, total_tokens=12, min_prob=min_prob)
    fresh.reset(list(ctx), {k: v[0] for k, v in out.taps.items()})
    g = torch.Generator().manual_seed(0)
    t1 = drafter.propose(ctx, dec.root, SamplingParams(), g)
    t2 = fresh.propose(ctx, dec.root, SamplingParams(), g)
    assert drafter.cache.length == fresh.cache.length == len(ctx)
    assert torch.allclose(drafter.cache.k[:, :, : len(ctx)], fresh.cache.k[:, :, : len(ctx)], atol=1e-3)
    assert t1.tokens == t2.tokens


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_a_window_reads_the_last_prompt_tokens_only_and_stays_lossless(kind, tiny_target_bundle):
    target = tiny_target_bundle(seed=1)
    head = _head(target, kind)
    prompt = [5, 9, 17, 33, 2, 8, 60, 61, 7, 12, 40, 41, 3, 19, 22, 50]
    ref = vanilla_generate(target, prompt, max_new_tokens=20, chat=False)
    runs = {}
    for window in (None, 6):
        drafter = EagleDrafter(head, target.model, name=kind, tree="dynamic", depth=3, top_k=3, total_tokens=8,
                               window=window)
        dec = SpeculativeDecoder(target, drafter, SamplingParams(), seed=0)
        dec.start(prompt, max_new_tokens=20, chat=False)
        dec.step()
        snap = dec.snapshot()
        first = [dec.step().committed for _ in range(2)]
        dec.restore(snap)
        assert [dec.step().committed for _ in range(2)] == first  # snapshots hold with a window
        while not dec.done:
            dec.step()
        assert dec.generated == ref.tokens
        runs[window] = (drafter, dec)
    full, win = runs[None][0], runs[6][0]
    assert full.base == 0 and win.base == len(prompt) - 1 - 6
    # one decoder layer: an entry's keys and values depend on its token, feature and position,
    # not on what it attends to, so the window's cache is the full cache from `base` on
    n = win.cache.length
    assert n == full.cache.length - win.base
    assert torch.allclose(win.cache.k[:, :, :n], full.cache.k[:, :, win.base : win.base + n], atol=1e-5)
    assert torch.allclose(win.cache.v[:, :, :n], full.cache.v[:, :, win.base : win.base + n], atol=1e-5)
    # the window a head's config asks for (our shipped heads), else none; a bad one is refused
    from specviz.drafters.eagle import draft_window

    assert draft_window(head) is None
    head.config["specviz"] = {"draft_window": 512}
    assert draft_window(head) == 512
    assert draft_window(head, 300) == 300 and draft_window(head, 0) is None  # asked for: a size, or all
    del head.config["specviz"]
    with pytest.raises(ValueError):
        EagleDrafter(head, target.model, window=0)


def test_sampling_runs_and_snapshot_replays(tiny_target_bundle):
    target = tiny_target_bundle(seed=2)
    head = _head(target, "eagle3")
    drafter = EagleDrafter(head, target.model, name="eagle3", depth=3, top_k=3, total_tokens=8)
    dec = SpeculativeDecoder(target, drafter, SamplingParams(temperature=0.9, top_p=0.95), seed=3)
    dec.start([5, 9, 17, 33, 2], max_new_tokens=20, chat=False)
    dec.step()
    snap = dec.snapshot()
    a = [dec.step().committed for _ in range(3)]
    dec.restore(snap)
    b = [dec.step().committed for _ in range(3)]
    assert a == b


def test_medusa_and_sps_greedy_identical_to_vanilla(tiny_target, tiny_target_bundle):
    from specviz.drafters.medusa import MedusaDrafter
    from specviz.drafters.sps import SpSDrafter
    from specviz.heads import MedusaHeads

    target = tiny_target_bundle(seed=1)
    cfg = target.cfg
    heads = MedusaHeads(dict(hidden_size=cfg.hidden_size, vocab_size=cfg.vocab_size, medusa_num_heads=3))
    heads.bind(target.model.embed)
    prompt = [5, 9, 17, 33, 2, 8, 60, 61]
    ref = vanilla_generate(target, prompt, max_new_tokens=20, chat=False)
    for drafter in (MedusaDrafter(heads, target.model), SpSDrafter(tiny_target(seed=1), gamma=3),
                    SpSDrafter(tiny_target(seed=5), gamma=3)):
        res = SpeculativeDecoder(target, drafter, SamplingParams(), seed=0).generate(prompt, 20, chat=False)
        assert res.tokens == ref.tokens
    # the draft model identical to the target drafts perfectly
    res = SpeculativeDecoder(target, SpSDrafter(tiny_target(seed=1), gamma=3), SamplingParams(), seed=0).generate(
        prompt, 20, chat=False)
    assert res.tau > 3.0
    # sampling runs with the chain rule
    res = SpeculativeDecoder(target, SpSDrafter(tiny_target(seed=5), gamma=3), SamplingParams(temperature=1.0),
                             seed=0).generate(prompt, 12, chat=False)
    assert len(res.tokens) >= 1


def test_registry_availability_reads_the_shipped_configs_without_building(monkeypatch):
    """availability() answers from config.json alone: the tiny target (another hidden size and
    vocabulary) cannot use the shipped heads, and nothing is built to find that out."""
    from types import SimpleNamespace

    from specviz import methods

    def no_build(*a, **k):
        raise AssertionError("availability must not build a drafter")

    for name, spec in list(methods.METHODS.items()):
        monkeypatch.setitem(methods.METHODS, name, methods.Method(no_build, spec.label, spec.tunable, spec.head,
                                                                  spec.shape_options, spec.reads_features, spec.toy))
    shipped = SimpleNamespace(name="smollm2-135m-instruct", cfg=SimpleNamespace(hidden_size=576, vocab_size=49152))
    for name in methods.ENGINE_METHODS:
        assert methods.availability(name, SimpleNamespace(model=shipped)) == (True, ""), name
    other = SimpleNamespace(name="smollm2-135m-instruct", cfg=SimpleNamespace(hidden_size=64, vocab_size=49152))
    ok, why = methods.availability("eagle3", SimpleNamespace(model=other))
    assert not ok and "hidden size" in why
    assert methods.availability("sps", SimpleNamespace(model=other))[0]  # SpS reads no target features
    ok, why = methods.availability("sps", SimpleNamespace(model=SimpleNamespace(name="no-such-model", cfg=shipped.cfg)))
    assert not ok and "python -m specviz.train sps" in why
    assert methods.availability("nonsense") == (False, "Unknown method 'nonsense'.")


def test_drafters_share_a_loaded_head_until_its_folder_changes(tmp_path, tiny_target_bundle):
    """Every drafter of one target and head folder gets the same head object (loaded once); a
    head saved again into the folder is loaded anew, with the new weights."""
    import os

    from specviz.drafters.eagle import make_eagle3
    from specviz.heads.io import save_head

    target = tiny_target_bundle()
    save_head(_head(target, "eagle3"), tmp_path, dtype=torch.float32)
    a = make_eagle3(target, head_dir=tmp_path, depth=2, top_k=2, total_tokens=4)
    b = make_eagle3(target, head_dir=tmp_path, depth=3, top_k=2, total_tokens=6)
    assert a.head is b.head and (a.shape.depth, b.shape.depth) == (2, 3)
    other = tiny_target_bundle()  # another target: its own head, bound to its own embedding
    assert make_eagle3(other, head_dir=tmp_path).head is not a.head

    h = _head(target, "eagle3")
    with torch.no_grad():
        h.fc.weight.add_(1.0)
    save_head(h, tmp_path, dtype=torch.float32)
    for f in tmp_path.iterdir():  # a retrain within the file system's time resolution still counts
        os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    c = make_eagle3(target, head_dir=tmp_path)
    assert c.head is not a.head
    assert torch.equal(c.head.fc.weight, h.fc.weight) and not torch.equal(c.head.fc.weight, a.head.fc.weight)


def test_tuned_eagle_trees_draw_their_drafts_at_t_above_zero(target, monkeypatch):
    """The device-tuned EAGLE-2/3 tree draws its drafts from q at T > 0 (more of them are kept); the
    papers' tree, a shape given explicitly, or draw="top" keep EAGLE's top-k drafts; greedy decoding
    gives vanilla's tokens either way."""
    from specviz import methods, tuning
    from specviz.core.engine import vanilla_generate

    monkeypatch.setattr(tuning, "tree_for", lambda target, method, head_dir, tree_size, **k: None if tree_size == "paper" else
                        {"kind": "dynamic", "depth": 1, "total_tokens": 2, "top_k": 8, "min_prob": 0.0})
    assert methods.make_drafter("eagle3", target).shape.draw == "sample"
    assert methods.make_drafter("eagle2", target).shape.draw == "sample"
    assert methods.make_drafter("eagle3", target, draw="top").shape.draw == "top"
    assert methods.make_drafter("eagle3", target, depth=2, top_k=4, total_tokens=4).shape.draw == "top"
    assert methods.make_drafter("eagle3", target, tree_size="paper").shape.draw == "top"
    # a tuned EAGLE-2 drafts over the first ids only; the papers' tree (and draft_vocab=0) over all
    from specviz.drafters.base import DRAFT_VOCAB
    assert methods.make_drafter("eagle2", target).draft_vocab == DRAFT_VOCAB
    assert methods.make_drafter("eagle2", target).describe()["draft_vocab"] == DRAFT_VOCAB
    assert methods.make_drafter("eagle2", target, tree_size="paper").draft_vocab is None
    assert methods.make_drafter("eagle2", target, draft_vocab=0).draft_vocab is None
    assert methods.make_drafter("eagle3", target).draft_vocab is None  # EAGLE-3 has its own
    with pytest.raises(ValueError, match="draft_vocab"):
        methods.make_drafter("eagle2", target, draft_vocab=-5)
    with pytest.raises(ValueError, match="draw"):
        methods.make_drafter("eagle3", target, draw="nope")
    drafter = methods.make_drafter("eagle3", target)
    hot = SpeculativeDecoder(target, drafter, SamplingParams(temperature=1.0), seed=0, detail=False)
    rules = {t.rule for t in hot.generate("Name three colours.", max_new_tokens=12).traces if len(t.nodes) > 1}
    assert rules == {"chain"}  # one drawn draft a round: the Leviathan chain rule
    greedy = SpeculativeDecoder(target, methods.make_drafter("eagle3", target), seed=0, detail=False)
    assert greedy.generate("Name three colours.", max_new_tokens=12).tokens == \
        vanilla_generate(target, "Name three colours.", max_new_tokens=12).tokens


def _propose_twice(drafter, other_path, rounds: list) -> None:
    """Make the drafter propose each round twice from the same state and random stream: first inside
    `other_path()` (a context manager that switches its drafting path), then as it is, whose tree the
    round goes on with; `rounds` collects the (other path's, own) pairs."""
    propose = drafter.propose

    def both(context, root, params, generator):
        snap, rng = drafter.snapshot(), generator.get_state()
        with other_path():
            other = propose(context, root, params, generator)
        drafter.restore(snap)
        generator.set_state(rng)
        tree = propose(context, root, params, generator)
        rounds.append((other, tree))
        return tree

    drafter.propose = both


def _tree_depth(parents) -> int:
    """Levels below the root of a tree given as parent indices (the root's parent: -1)."""
    depth = [0] * len(parents)
    for i, p in enumerate(parents):
        depth[i] = 0 if p < 0 else depth[p] + 1
    return max(max(depth), 1)


def _decode(target, drafter, temperature, prompts):
    """24 new tokens of each prompt (the drafter's propose records what it drafted)."""
    dec = SpeculativeDecoder(target, drafter, SamplingParams(temperature=temperature), seed=3)
    for prompt in prompts:
        dec.start(prompt, max_new_tokens=24)
        while not dec.done:
            dec.step()


@pytest.mark.parametrize("method,temperature,vocab", [("eagle3", 0.0, None), ("eagle3", 1.0, None), ("eagle2", 0.0, None),
                                                     ("eagle1", 0.0, None), ("eagle2", 0.0, 8192), ("eagle2", 1.0, 8192)])
def test_drafting_in_the_kernel_proposes_the_torch_paths_trees(method, temperature, vocab, target, monkeypatch):
    """The shipped heads drafting each tree level in one kernel call (heads.draft_kernel) propose the
    torch path's trees, round after round, from the same state: the same tokens and parents, the
    same q to float rounding (the kernel's norms and softmax sum in another order). With an EAGLE-1
    head's draft vocabulary cut to the first ids (`draft_vocab`, as tuned trees draft), both paths
    draft only those ids."""
    from specviz.methods import make_drafter

    drafter = make_drafter(method, target, tree_size="paper", **({"draft_vocab": vocab} if vocab else {}))
    assert drafter.draft_vocab == vocab
    if drafter.head.draft_kernel is None:
        pytest.skip("no compiled kernel here")
    kernel = drafter.head.draft_kernel_for(vocab)
    rounds, levels = [], []
    level, tree = kernel.level, kernel.tree  # a level a call, or a chosen dynamic tree's levels in one
    monkeypatch.setattr(kernel, "level", lambda *a, **k: levels.append(1) or level(*a, **k))
    monkeypatch.setattr(kernel, "tree", lambda *a, **k: levels.append(1) or tree(*a, **k))

    @contextlib.contextmanager
    def torch_path():
        whole = drafter.head.draft_kernel
        drafter.head.draft_kernel = None
        try:
            yield
        finally:
            drafter.head.draft_kernel = whole

    _propose_twice(drafter, torch_path, rounds)  # (torch path's tree, kernel's tree) each round
    _decode(target, drafter, temperature, ("Write a haiku about the sea.", "What is 17 times 23? Explain."))
    assert len(rounds) >= 10 and sum(len(b) > 1 for _, b in rounds) >= 5  # real trees were drafted
    assert len(levels) >= len(rounds)  # ... and the kernel drafted them (at least one call a round)
    for a, b in rounds:
        assert (a.tokens, a.parents) == (b.tokens, b.parents)
        assert vocab is None or max(b.tokens[1:], default=0) < vocab
        # each draft step chains a head layer (fc over up to 3 taps: k = 3H) and the LM head onto the last
        tol = agreement.path_tolerance(3 * target.model.cfg.hidden_size, depth=2 * _tree_depth(a.parents))
        assert max(abs(x - y) for x, y in zip(a.q, b.q)) <= tol
        for node in a.dists:
            assert agreement.max_norm_error(b.dists[node], a.dists[node]) <= tol


@pytest.mark.parametrize("temperature,vocab", [(0.0, None), (1.0, None), (0.0, 8192)])
def test_medusa_softmax_and_top_k_in_the_kernel_propose_the_torch_paths_trees(temperature, vocab, target, monkeypatch):
    """Medusa's distributions made and ranked by the kernel (`softmax_top_rows`) propose the torch
    path's trees from the same state, with the same q to float rounding; with a cut vocabulary
    (`draft_vocab`, as tuned trees draft) only its ids."""
    from specviz.runtime import qkernel
    from specviz.drafters import medusa
    from specviz.methods import make_drafter

    drafter = make_drafter("medusa", target, tree_size="paper", **({"draft_vocab": vocab} if vocab else {}))
    assert drafter.draft_vocab == vocab and drafter.describe().get("draft_vocab") == vocab
    real = qkernel.loaded
    if real() is None:
        pytest.skip("no compiled kernel here")
    propose, rounds, ranked = drafter.propose, [], []
    softmax_top = medusa._softmax_top
    monkeypatch.setattr(medusa, "_softmax_top", lambda *a: ranked.append(1) or softmax_top(*a))

    def both(context, root, params, generator):
        rng = generator.get_state()
        monkeypatch.setattr(medusa.qkernel, "loaded", lambda: None)
        torch_tree = propose(context, root, params, generator)
        monkeypatch.setattr(medusa.qkernel, "loaded", real)
        generator.set_state(rng)
        tree = propose(context, root, params, generator)
        rounds.append((torch_tree, tree))
        return tree

    drafter.propose = both
    _decode(target, drafter, temperature, ("Write a haiku about the sea.",))
    assert len(rounds) >= 5 and all(len(b) > 1 for _, b in rounds)
    assert len(ranked) == len(rounds)  # every kernel-side proposal ranked its heads in the kernel
    tol = agreement.path_tolerance(target.model.cfg.hidden_size, depth=2)  # every head: a residual block, the LM head
    for a, b in rounds:
        assert (a.tokens, a.parents) == (b.tokens, b.parents)
        assert vocab is None or max(b.tokens[1:]) < vocab
        assert max(abs(x - y) for x, y in zip(a.q, b.q)) <= tol
        for node in a.dists:
            assert agreement.max_norm_error(b.dists[node], a.dists[node]) <= tol


@pytest.mark.parametrize("method,shape,temperature,vocab", [
    ("eagle3", dict(depth=5, top_k=8, total_tokens=64, min_prob=0.15), 0.0, None),  # tuned-like: a floor decides
    ("eagle3", dict(depth=6, top_k=8, total_tokens=24), 0.0, None),                 # the papers' tree
    ("eagle3", dict(depth=4, top_k=3, total_tokens=3), 0.7, None),                  # pruned width, draw="top" at T > 0
    ("eagle2", dict(depth=5, top_k=8, total_tokens=10, min_prob=0.05), 0.0, 8192),  # a cut draft vocabulary
    ("eagle1", dict(depth=3, top_k=4, total_tokens=12), 0.0, None),
])
def test_a_whole_tree_in_one_kernel_call_is_the_per_level_paths_tree_bit_for_bit(method, shape, temperature, vocab,
                                                                                   target, monkeypatch):
    """`DraftKernel.tree` grows a chosen dynamic tree's levels in C++ (draft_tree in blockmm.cpp) from the
    same kernel arithmetic as one `level` call per level: round after round, from the same state, the
    same tree exactly - tokens, parents, q, scores, every candidate and every kept row of q."""
    from specviz.drafters.shape import TreeShape
    from specviz.methods import make_drafter

    drafter = make_drafter(method, target, tree_size="paper", **({"draft_vocab": vocab} if vocab else {}))
    if drafter.head.draft_kernel is None:
        pytest.skip("no compiled kernel here")
    drafter._shape = TreeShape.dynamic(**shape, draw="top")
    kernel = drafter.head.draft_kernel_for(vocab)
    calls = {"tree": 0, "level": 0}
    for name in calls:
        real = getattr(kernel, name)
        monkeypatch.setattr(kernel, name, lambda *a, _real=real, _name=name, **k: calls.__setitem__(_name, calls[_name] + 1) or _real(*a, **k))
    rounds = []

    @contextlib.contextmanager
    def per_level_path():
        with monkeypatch.context() as m:
            m.setattr(EagleDrafter, "whole_tree_in_kernel", lambda self, p: False)
            yield

    _propose_twice(drafter, per_level_path, rounds)  # (one call a level, one call a tree) each round
    _decode(target, drafter, temperature, ("Write a haiku about the sea.", "List three prime numbers and explain why."))
    assert calls["tree"] == len(rounds) >= 10 and calls["level"] >= len(rounds)  # both paths ran every round
    assert sum(len(b) > 2 for _, b in rounds) >= 3  # real trees
    for a, b in rounds:
        assert (a.tokens, a.parents, a.q, a.scores, a.candidates) == (b.tokens, b.parents, b.q, b.scores, b.candidates)
        assert set(a.dists) == set(b.dists) and all(torch.equal(a.dists[n], b.dists[n]) for n in a.dists)


def test_the_whole_tree_call_refuses_a_width_beyond_its_top_k(target):
    """draft_tree reads each row's `width` best entries out of k: a wider tree would read past a row."""
    from specviz.methods import make_drafter

    kernel = make_drafter("eagle3", target, tree_size="paper").head.draft_kernel
    if kernel is None:
        pytest.skip("no compiled kernel here")
    with pytest.raises(ValueError, match="width"):
        kernel.tree([1], [0], [0], None, 1, 0, 0.0, k=4, width=5, depth=3, floor=float("-inf"))
    with pytest.raises(ValueError, match="depth"):
        kernel.tree([1], [0], [0], None, 1, 0, 0.0, k=4, width=2, depth=0, floor=float("-inf"))
