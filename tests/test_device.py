"""Every method on every device: a tiny random Llama target with random EAGLE-1/EAGLE-3/Medusa heads
and a tiny SpS model (built here, nothing downloaded), driven through SpeculativeDecoder.

The same tests run on the CPU always and on CUDA where torch sees a GPU (skipped, with the reason,
elsewhere): greedy output identical to vanilla, the exact losslessness check of one round, replay
of rounds, bench's JSON. The CUDA-graph pass is checked on the CPU too: padded to a bucket it
gives the eager pass's logits, taps and cache entries.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from specviz.runtime import cudagraph
from specviz.drafters.base import NoDraft
from specviz.drafters.eagle import EagleDrafter
from specviz.drafters.medusa import MedusaDrafter
from specviz.drafters.pld import PromptLookupDrafter
from specviz.drafters.sps import SpSDrafter
from specviz.core.engine import SpeculativeDecoder, vanilla_generate
from specviz.heads import Eagle1Head, Eagle3Head, MedusaHeads, head_config_from_target
from specviz.core.sampling import SamplingParams, probs
from specviz.core.target import KVCache

NO_CUDA = "no CUDA device: the GPU cases run where torch sees one (scripts/gpu_run.sh)"
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA))]
METHODS = ["vanilla", "pld", "sps", "medusa", "eagle1", "eagle2", "eagle3"]
# repeats so that prompt lookup finds n-grams to copy
PROMPT = [5, 9, 17, 33, 2, 8, 60, 61, 5, 9, 17, 33, 2, 8, 70, 71, 5, 9, 17]
NEW = 20


def _random_init(module: torch.nn.Module, seed: int, scale: float = 1.0):
    """Seeded weights drawn on the CPU: the same head on every device."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if p.dim() > 1:
                p.copy_(r * scale / p.shape[1] ** 0.5)
            else:  # norm weights near 1, biases near 0
                p.copy_((1.0 if "norm" in name else 0.0) + 0.1 * r)
    return module


class Kit:
    """The tiny target and one of each drafter's weights, on one device (`tiny_target`,
    `tiny_target_bundle`: the builders that conftest's fixtures of those names hand out)."""

    def __init__(self, device: str, tiny_target, tiny_target_bundle):
        self.device = device
        self.target = tiny_target_bundle(seed=1, device=device)
        model = self.target.model
        cfg = model.cfg
        self.e1 = _random_init(Eagle1Head(head_config_from_target(cfg, bias=True)), 2, 3.0)
        self.e3 = Eagle3Head(head_config_from_target(cfg, draft_vocab_size=96))
        _random_init(self.e3, 3, 3.0)
        self.e3.set_vocab(torch.randperm(cfg.vocab_size, generator=torch.Generator().manual_seed(4))[:96])
        self.medusa = _random_init(MedusaHeads(dict(hidden_size=cfg.hidden_size, vocab_size=cfg.vocab_size,
                                                    medusa_num_heads=3, medusa_num_layers=1)), 5, 0.3)
        for h in (self.e1, self.e3, self.medusa):
            h.to(device).bind(model.embed, model.lm_head).eval()
        # SpS: the target with its MLP weights perturbed, so drafts are often but not always right
        self.draft = tiny_target(seed=1, device=device)
        g = torch.Generator().manual_seed(6)
        for L in self.draft.layers:
            L.w13.add_((0.02 * torch.randn(L.w13.shape, generator=g)).to(device))

    def drafter(self, method: str):
        model = self.target.model
        return {
            "vanilla": lambda: NoDraft(),
            "pld": lambda: PromptLookupDrafter(),
            "sps": lambda: SpSDrafter(self.draft, gamma=3),
            "medusa": lambda: MedusaDrafter(self.medusa, model),
            "eagle1": lambda: EagleDrafter(self.e1, model, name="eagle1", tree="static"),
            "eagle2": lambda: EagleDrafter(self.e1, model, name="eagle2", tree="dynamic", depth=4, top_k=4, total_tokens=12),
            "eagle3": lambda: EagleDrafter(self.e3, model, name="eagle3", tree="dynamic", depth=4, top_k=4, total_tokens=12),
        }[method]()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """A tiny model's small ops only fight over a shared CPU's cores: one thread is fastest."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def make_kit(tiny_target, tiny_target_bundle):
    """`make_kit(device)`: a new Kit, for a test that changes it."""
    return lambda device: Kit(device, tiny_target, tiny_target_bundle)


@pytest.fixture(scope="module", params=DEVICES)
def kit(request, make_kit):
    return make_kit(request.param)


@pytest.fixture(scope="module")
def vanilla_tokens(kit):
    return vanilla_generate(kit.target, PROMPT, NEW, chat=False).tokens


def _on(t: torch.Tensor, device: str) -> bool:
    return t.device.type == torch.device(device).type


# ----------------------------------------------------------------------------- the methods
@pytest.mark.parametrize("method", METHODS)
def test_greedy_identical_to_vanilla(kit, vanilla_tokens, method):
    dec = SpeculativeDecoder(kit.target, kit.drafter(method), SamplingParams(), seed=0)
    res = dec.generate(PROMPT, NEW, chat=False)
    assert res.tokens == vanilla_tokens, method
    assert _on(dec.cache.k, kit.device)
    if method in ("pld", "sps"):
        assert res.rounds < len(res.tokens), f"{method} should get drafts accepted on this prompt"


@pytest.mark.parametrize("method", METHODS)
def test_one_round_is_exactly_lossless(kit, method):
    """The exact distribution of a real round's output equals the target's (temperature 1)."""
    from specviz.lossless import exact_max_diff

    params = SamplingParams(temperature=1.0)
    drafter = kit.drafter(method)
    dec = SpeculativeDecoder(kit.target, drafter, params, seed=1)
    dec.start(PROMPT, NEW, chat=False)
    for _ in range(2):
        dec.step()
    tree = drafter.propose(dec.context, dec.root, params, dec.generator)
    if method != "vanilla":
        assert len(tree) > 1, f"{method} drafted nothing: the check would be trivial"
    model = kit.target.model
    cache = dec.cache.clone()
    out = model.forward(torch.tensor([tree.tokens], device=model.device), cache,
                        positions=tree.position_ids(cache.length), tree_mask=tree.attention_mask())
    assert _on(out.logits, kit.device)
    p = probs(out.logits[0], params).cpu()
    kmax = 1 if tree.sampled else min(3, tree.max_depth + 1)
    for k in range(1, kmax + 1):
        assert exact_max_diff(tree, p, params, k=k) < 1e-6, (method, k)


@pytest.mark.parametrize("method", METHODS)
def test_replay_reproduces_rounds(kit, method):
    dec = SpeculativeDecoder(kit.target, kit.drafter(method), SamplingParams(temperature=1.0), seed=5)
    dec.start(PROMPT, NEW, chat=False)
    dec.step()
    snap = dec.snapshot()
    first = [dec.step() for _ in range(3) if not dec.done]
    dec.restore(snap)
    again = [dec.step() for _ in range(len(first))]
    strip = lambda t: {**dataclasses.asdict(t), "draft_time_s": 0, "verify_time_s": 0, "total_time_s": 0}  # noqa: E731
    assert [strip(t) for t in first] == [strip(t) for t in again]


@pytest.mark.parametrize("method", METHODS)
def test_a_batch_of_rounds_is_identical_to_vanilla(kit, vanilla_tokens, method):
    """Batched rounds (specviz.serving.batch) on this device: four sequences, ragged prompts and budgets,
    one target pass per round; each greedy output is its solo vanilla output."""
    from specviz.serving.batch import BatchDecoder

    prompts = [PROMPT, PROMPT[3:], PROMPT[:9], PROMPT[1:]]
    budgets = [NEW, 7, 13, NEW]
    refs = [vanilla_generate(kit.target, p, n, chat=False).tokens for p, n in zip(prompts, budgets)]
    decs = []
    for p, n in zip(prompts, budgets):
        d = SpeculativeDecoder(kit.target, kit.drafter(method), SamplingParams(), seed=0)
        d.start(p, n, chat=False)
        decs.append(d)
    batch = BatchDecoder(decs)
    results = batch.generate()
    assert [r.tokens for r in results] == refs, method
    assert refs[0] == vanilla_tokens
    assert len(batch.rounds[0].sequences) == 4 and all(_on(d.cache.k, kit.device) for d in decs)


@pytest.mark.parametrize("method", ["eagle3", "medusa", "sps"])
def test_a_sampled_batched_round_is_exactly_lossless(kit, method):
    """The exact one-round check on each sequence of a batched round at temperature 1."""
    from specviz.serving.batch import BatchDecoder
    from specviz.lossless.exact import exact_round_diff

    params = SamplingParams(temperature=1.0)
    batch = BatchDecoder([SpeculativeDecoder(kit.target, kit.drafter(method), params, seed=s) for s in (1, 2, 3)])
    batch.start([PROMPT, PROMPT[2:], PROMPT[5:]], NEW, chat=False)
    batch.step()
    rnd = batch.step()
    assert any(len(p.tree) > 1 for p in rnd.plans)
    for plan, rows in zip(rnd.plans, rnd.target_rows):
        assert exact_round_diff(plan.tree, rows, params, horizon=3)[0] < 1e-6, method


def test_bench_writes_its_json(kit, tmp_path, monkeypatch):
    from specviz.bench import cli as bench
    from specviz.core import target as target_mod

    load = lambda *a, **k: kit.target  # noqa: E731
    monkeypatch.setattr(target_mod, "load_target", load)
    monkeypatch.setattr(bench, "load_target", load, raising=False)
    monkeypatch.setattr(bench, "make_drafter", lambda method, target, **kw: kit.drafter(method))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"question_id": 0, "category": "a", "turns": [" ".join(map(str, PROMPT))]}))
    out = tmp_path / "r.json"
    assert bench.main(["--methods", ",".join(METHODS), "--prompts", str(prompts), "--max-new-tokens", "10",
                       "--device", kit.device, "--out", str(out)]) == 0
    res = json.loads(out.read_text())["by_dtype"]["fp32"]["methods"]
    assert list(res) == METHODS
    for m, s in res.items():
        assert s["identical_to_vanilla"] is True, m
        assert s["tokens_per_s"] > 0 and s["tau"] >= 1.0
    assert res["vanilla"]["speedup_vs_vanilla"] == pytest.approx(1.0)


# ----------------------------------------------------------------------------- device plumbing
def test_everything_lives_on_the_device(kit):
    model = kit.target.model
    assert _on(model.embed, kit.device) and _on(model.new_cache(16).k, kit.device)
    for h in (kit.e1, kit.e3, kit.medusa):
        assert all(_on(p, kit.device) for p in h.parameters())
    tokens = torch.tensor([[3, 4]], device=model.device)
    assert _on(kit.e1.embed(tokens), kit.device) and _on(kit.e1.embed(tokens.cpu()), kit.device)
    feats = torch.zeros(2, model.cfg.hidden_size)  # features on the CPU still meet an LM head on the device
    assert _on(kit.medusa.logits(feats), kit.device) and _on(kit.e1.logits(feats), kit.device)
    if kit.device == "cpu":
        assert not model.cuda_graphs and model.new_cache(16).graphs is None
    else:
        assert model.blocks is None and model._lib is None  # the C++ block kernel is CPU-only


def test_sample_takes_a_generator_on_either_device(kit):
    from specviz.core.sampling import new_generator, sample

    dist = torch.softmax(torch.randn(50, generator=torch.Generator().manual_seed(0)), -1).to(kit.device)
    for gen_device in {"cpu", kit.device}:
        a = [sample(dist, new_generator(7, gen_device)) for _ in range(2)]
        assert a[0] == a[1]  # same state, same token
        g = new_generator(7, gen_device)
        state = g.get_state()
        x = [sample(dist, g) for _ in range(5)]
        g.set_state(state)
        assert [sample(dist, g) for _ in range(5)] == x
    # the CPU draw is the one sample() always made: torch.rand(1, float64) from the generator
    g1, g2 = new_generator(3), torch.Generator().manual_seed(3)
    cdf = dist.double().cpu().cumsum(-1)
    u = torch.rand(1, generator=g2, dtype=torch.float64) * cdf[-1]
    assert sample(dist, g1) == int(torch.searchsorted(cdf, u, right=True))


def test_default_dtype_is_bf16_on_a_gpu_fp32_on_a_cpu():
    from specviz.runtime.loading import default_dtype

    assert default_dtype("cpu") == torch.float32
    assert default_dtype("cuda") == torch.bfloat16
    assert default_dtype(torch.device("cuda", 0)) == torch.bfloat16


def test_block_kernel_refuses_tensors_off_the_cpu():
    from specviz.runtime.blockweights import quantize_q8_0

    bw = quantize_q8_0(torch.randn(8, 64))
    with pytest.raises(ValueError, match="CPU only"):
        bw.matmul(torch.zeros(1, 64, device="meta"))


# ----------------------------------------------------------------------------- CUDA-graph pieces on a CPU
def test_buckets():
    assert [cudagraph.bucket_for(n) for n in (1, 2, 8, 9, 33, 64, 65)] == [1, 8, 8, 16, 64, 64, None]
    assert [cudagraph.pool_size(n) for n in (10, 1024, 1025, 5000)] == [1024, 1024, 2048, 8192]


def test_padding_rows_are_isolated():
    tokens, positions = torch.tensor([[7, 8, 9]]), torch.tensor([10, 11, 11])
    tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    t, p, block = cudagraph.pad_inputs(tokens, positions, tree, 8)
    assert t.shape == p.shape == (1, 8) and block.shape == (8, 8)
    assert torch.equal(block[:3, :3], tree)
    assert not block[:3, 3:].any() and not block[3:, :3].any()  # nobody sees padding, padding sees no one
    assert torch.equal(block[3:, 3:], torch.eye(5, dtype=torch.bool))
    mask = cudagraph.static_mask(torch.tensor(4), block, torch.arange(16))[0, 0]
    assert mask[:, :4].all() and not mask[:, 12:].any()  # committed keys seen, slots after the block not
    assert torch.equal(mask[:, 4:12], block)


@pytest.mark.parametrize("n,tree", [(1, False), (5, True), (5, False), (9, True), (16, True)])
def test_padded_static_pass_matches_the_eager_pass(n, tree, tiny_target):
    """What a CUDA graph replays, run on a CPU: padded to its bucket, over the whole static cache."""
    model = tiny_target(seed=2)
    taps = (2, 5, "final")
    g = torch.Generator().manual_seed(n)
    eager_cache = model.new_cache(64)
    model.forward(torch.randint(2, 128, (1, 20), generator=g), eager_cache)
    eager_cache.commit()
    static_cache = eager_cache.clone()
    tokens = torch.randint(2, 128, (1, n), generator=g)
    mask = None
    positions = torch.arange(20, 20 + n)
    if tree:  # a random tree: each node's parent is an earlier node
        parents = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, n)]
        mask = torch.eye(n, dtype=torch.bool)
        depth = [0] * n
        for i in range(1, n):
            mask[i] |= mask[parents[i]]
            depth[i] = depth[parents[i]] + 1
        positions = 20 + torch.tensor(depth)
    eager = model.forward(tokens, eager_cache, positions=positions, tree_mask=mask, taps=taps)
    bucket = cudagraph.bucket_for(n)
    t, p, block = cudagraph.pad_inputs(tokens, positions, mask, bucket)
    logits, out_taps = cudagraph.static_pass(model, static_cache.k, static_cache.v, t, p, torch.tensor(20), block,
                                             torch.arange(static_cache.max_len), taps)
    assert logits.shape[1] == bucket
    torch.testing.assert_close(logits[:, :n], eager.logits, atol=1e-4, rtol=1e-4)
    for k in taps:
        torch.testing.assert_close(out_taps[k][:, :n], eager.taps[k], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(static_cache.k[:, :, :, : 20 + n], eager_cache.k[:, :, :, : 20 + n], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(static_cache.v[:, :, :, : 20 + n], eager_cache.v[:, :, :, : 20 + n], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("method", ["vanilla", "sps", "eagle2", "eagle3"])
def test_graph_glue_on_a_cpu_gives_the_eager_output(method, make_kit):
    """Everything a CUDA graph pass does except the capture (pooled caches, buckets, padding, static
    buffers, copies out), run on a CPU through the engine: same tokens as the eager runtime."""
    kit = make_kit("cpu")
    params = SamplingParams(temperature=1.0)
    eager = SpeculativeDecoder(kit.target, kit.drafter(method), params, seed=3).generate(PROMPT, NEW, chat=False)
    for m in (kit.target.model, kit.draft):
        m.cuda_graphs, m._cache_pool = True, cudagraph.CachePool(m, KVCache.over)
    kit.e1.graphs = kit.e3.graphs = True  # the EAGLE heads' drafting passes too
    dec = SpeculativeDecoder(kit.target, kit.drafter(method), params, seed=3)
    res = dec.generate(PROMPT, NEW, chat=False)
    assert res.tokens == eager.tokens
    assert dec.cache.max_len == cudagraph.POOL_MIN and not dec.cache.graphs.capture
    used = {bucket for bucket, _ in dec.cache.graphs.graphs}
    assert 1 in used if method == "vanilla" else used & {8, 16}, used
    if method == "sps":
        assert dec.drafter.cache.graphs.graphs, "the draft model's one-token passes go through the graph glue too"
    if method.startswith("eagle"):
        assert dec.drafter.cache.graphs.graphs, "the head's drafting passes go through the graph glue too"


@pytest.mark.parametrize("device", DEVICES)
def test_head_static_pass_matches_the_eager_pass(device, make_kit):
    """An EAGLE head's padded drafting pass over its whole cache (what its CUDA graph replays; on a
    CPU the same pass uncaptured): the committed entries, then two tree levels, the second seeing
    the first through `block`."""
    from specviz.heads.layers import HeadCache

    kit = make_kit(device)
    head, H = kit.e3, kit.target.cfg.hidden_size
    feats = lambda n, seed: torch.randn(1, n, H, generator=torch.Generator().manual_seed(seed)).to(device)  # noqa: E731
    t = lambda x: torch.tensor(x, device=device)  # noqa: E731
    level2 = torch.tensor([[1, 0, 0, 1, 0], [0, 1, 0, 0, 1]], dtype=torch.bool)  # [T=2, offset 3 + 2]
    runs = []
    for graphs in (False, True):
        head.graphs = graphs
        cache = HeadCache(1, head.m.n_kv_heads, 64, head.m.head_dim, torch.float32, device)
        outs = [head.forward_cached(t([[3, 4, 5, 6]]), feats(4, 1), t([[0, 1, 2, 3]]), cache)]
        cache.commit([0, 1, 2, 3])
        outs.append(head.forward_cached(t([[7, 8, 9]]), feats(3, 2), t([[4, 4, 4]]), cache,
                                        block=torch.ones(3, 3, dtype=torch.bool), first=False, offset=0))
        outs.append(head.forward_cached(t([[10, 11]]), feats(2, 3), t([[5, 5]]), cache,
                                        block=level2, first=False, offset=3))
        runs.append((outs, cache))
    head.graphs = None
    (eager, c1), (graphed, c2) = runs
    assert c1.graphs is None and c2.graphs.capture == (device == "cuda")
    assert set(c2.graphs.graphs) == {(8, True), (8, False)}
    for a, b in zip(eager, graphed):
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(c2.k[:, :, :9], c1.k[:, :, :9], atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- CUDA only
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)


@cuda_only
@pytest.mark.parametrize("n", [1, 3, 8, 13, 40])
def test_graphed_pass_matches_eager_on_cuda(n, tiny_target):
    model = tiny_target(seed=2, device="cuda")
    assert model.cuda_graphs
    g = torch.Generator().manual_seed(n)
    cache = model.new_cache(200)
    model.forward(torch.randint(2, 128, (1, 70), generator=g), cache)  # 70 tokens: an eager prefill
    cache.commit()
    tokens = torch.randint(2, 128, (1, n), generator=g)
    ref_cache = cache.clone()  # not pooled: its passes run eagerly
    for _ in range(3):  # capture, then replays
        cache.truncate(70)
        graphed = model.forward(tokens, cache, taps=(3, "final"))
    assert cache.graphs is not None and cache.graphs.graphs, "the pass should have been graphed"
    eager = model.forward(tokens, ref_cache, taps=(3, "final"))
    assert ref_cache.graphs is None
    torch.testing.assert_close(graphed.logits, eager.logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(graphed.taps["final"], eager.taps["final"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cache.k[:, :, :, : 70 + n], ref_cache.k[:, :, :, : 70 + n], atol=1e-5, rtol=1e-5)


@cuda_only
def test_pooled_caches_reuse_their_graphs(tiny_target):
    model = tiny_target(seed=2, device="cuda")
    first = model.new_cache(100)
    model.forward(torch.tensor([[3, 4, 5]]), first)
    runner = first.graphs
    del first
    import gc

    gc.collect()
    second = model.new_cache(100)
    assert second.graphs is runner


@cuda_only
@pytest.mark.parametrize("method", ["vanilla", "sps", "eagle3"])
def test_bf16_on_cuda_runs(method, make_kit, tiny_target):
    kit = make_kit("cuda")
    model = kit.target.model
    bf = tiny_target(seed=1, device="cuda", dtype=torch.bfloat16)
    kit.target = dataclasses.replace(kit.target, model=bf)
    for h in (kit.e1, kit.e3, kit.medusa):
        h.to(torch.bfloat16).bind(bf.embed, bf.lm_head)
    kit.draft = tiny_target(seed=1, device="cuda", dtype=torch.bfloat16)
    del model
    res = SpeculativeDecoder(kit.target, kit.drafter(method), SamplingParams(temperature=1.0), seed=0).generate(
        PROMPT, NEW, chat=False)
    assert len(res.tokens) == NEW or res.tokens[-1] in kit.target.eos_ids
