"""The runtime's logits equal Hugging Face transformers' for prompts, decoding and trees."""

import random

import pytest
import torch

from specviz.core.target import TargetModel
from specviz.core.tree import DraftTree

# fp32 logits of ~20-30 in size; the runtime sums dot products in another order than HF (MKL for long
# passes, the GGUF-block kernel for short ones), which moves them by a few 1e-5. A wrong mask, position
# or weight moves them by whole units.
TOL = 2.5e-4


def hf_logits(hf, ids):
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0]


@pytest.fixture(scope="module")
def prompt(target):
    return target.tokenizer.chat_ids("Summarise the plot of Hamlet in three sentences.")


def test_prefill_matches_hf(target, hf_model, prompt):
    cache = target.model.new_cache(256)
    out = target.model(torch.tensor([prompt]), cache)
    ref = hf_logits(hf_model, prompt)
    assert out.logits.shape == (1, len(prompt), target.cfg.vocab_size)
    assert (out.logits[0] - ref).abs().max().item() < TOL


def test_incremental_decoding_matches_hf(target, hf_model, prompt):
    """Prefill part of the prompt, then one token at a time and in chunks: same logits."""
    m = target.model
    cache = m.new_cache(256)
    got = [m(torch.tensor([prompt[:10]]), cache).logits[0]]
    cache.commit()
    for t in prompt[10:20]:
        got.append(m(torch.tensor([[t]]), cache).logits[0])
        cache.commit()
    got.append(m(torch.tensor([prompt[20:]]), cache).logits[0])
    cache.commit()
    assert cache.length == len(prompt)
    diff = (torch.cat(got) - hf_logits(hf_model, prompt)).abs().max().item()
    assert diff < TOL


def random_tree(rng: random.Random, n: int, vocab: int) -> DraftTree:
    parents = [-1] + [rng.randrange(0, i) for i in range(1, n)]
    tokens = [rng.randrange(vocab) for _ in range(n)]
    return DraftTree(tokens=tokens, parents=parents, q=[1.0] * n)


@pytest.mark.slow
@pytest.mark.parametrize("seed,n", [(0, 14), (1, 40), (2, 5), (3, 6), (4, 24)])
def test_every_tree_node_matches_sequential_forward(target, hf_model, prompt, seed, n):
    """Each node's logits under the tree mask equal a plain forward along its root-to-node path."""
    rng = random.Random(seed)
    tree = random_tree(rng, n, 20000)
    m = target.model
    cache = m.new_cache(256)
    m(torch.tensor([prompt]), cache)
    cache.commit()
    L = cache.length
    out = m(torch.tensor([tree.tokens]), cache, positions=tree.position_ids(L), tree_mask=tree.attention_mask())
    for i in range(len(tree)):
        path_tokens = [tree.tokens[j] for j in tree.path(i)]
        ref = hf_logits(hf_model, prompt + path_tokens)[-1]
        assert (out.logits[0, i] - ref).abs().max().item() < TOL, f"node {i}"


@pytest.mark.parametrize("n", [40, 70])
def test_a_big_trees_rows_are_bit_for_bit_vanillas_one_token_passes(target, prompt, n):
    """The greedy identity rests on it: a node's row in a verify pass equals, bit for bit, what
    vanilla's one-token passes along its path compute, also for trees bigger than FUSED_MAX_TOKENS
    (the torch layers, which longer passes use, round differently)."""
    m = target.model
    if m.blocks is None:
        pytest.skip("no block kernel on this machine")
    tree = random_tree(random.Random(n), n, 20000)
    cache = m.new_cache(256)
    m(torch.tensor([prompt]), cache)
    cache.commit()
    L = cache.length
    rows = m(torch.tensor([tree.tokens]), cache, positions=tree.position_ids(L), tree_mask=tree.attention_mask(),
             head=False).hidden[0]
    for i in [j for j in range(n) if not any(p == j for p in tree.parents)][:8] + [0, n // 2]:  # leaves, and two more
        cache.truncate(L)
        for tok in [tree.tokens[j] for j in tree.path(i)]:
            one = m(torch.tensor([[tok]]), cache, head=False).hidden[0, 0]
            cache.commit()
        assert torch.equal(rows[i], one), f"node {i}"


def test_commit_keeps_only_accepted_path(target, hf_model, prompt):
    """After verifying a tree, keep one root-to-leaf path; decoding continues exactly."""
    rng = random.Random(7)
    tree = random_tree(rng, 12, 20000)
    m = target.model
    cache = m.new_cache(256)
    m(torch.tensor([prompt]), cache)
    cache.commit()
    L = cache.length
    m(torch.tensor([tree.tokens]), cache, positions=tree.position_ids(L), tree_mask=tree.attention_mask())
    path = max(tree.root_to_leaf_paths(), key=len)
    assert len(path) >= 3, "the test tree should have a path worth keeping"
    cache.commit(path)
    assert cache.length == L + len(path)
    nxt = 1234
    got = m(torch.tensor([[nxt]]), cache).logits[0, -1]
    ref = hf_logits(hf_model, prompt + [tree.tokens[j] for j in path] + [nxt])[-1]
    assert (got - ref).abs().max().item() < TOL


def test_taps_equal_hf_hidden_states(target, hf_model, prompt):
    layers = target.cfg.eagle3_layers()
    cache = target.model.new_cache(256)
    out = target.model(torch.tensor([prompt]), cache, taps=(*layers, "final"))
    with torch.no_grad():
        hs = hf_model(torch.tensor([prompt]), output_hidden_states=True).hidden_states
    # SmolLM2's residual stream carries "massive activations" (~25,000 in layers 15-27), where one fp32
    # ulp is 0.002: compare relative to each tensor's scale (a wrong layer is off by whole units).
    for i in [*layers, "final"]:
        ref = hs[i][0] if i != "final" else hs[-1][0]
        assert (out.taps[i][0] - ref).abs().max().item() < 1e-4 + 2e-6 * ref.abs().max().item(), i


def test_batched_left_padding_matches_single(target):
    """Rows of different lengths, left-padded and masked, give each row's unbatched logits."""
    m = target.model
    a = target.tokenizer.chat_ids("Hi!")
    b = target.tokenizer.chat_ids("Name three rivers in Europe and one fact about each.")
    T = max(len(a), len(b))
    rows = [[0] * (T - len(r)) + r for r in (a, b)]
    cache = m.new_cache(T + 4, batch=2)
    key_mask = torch.zeros(2, T + 4, dtype=torch.bool)
    pos = torch.zeros(2, T, dtype=torch.long)
    for k, r in enumerate((a, b)):
        key_mask[k, T - len(r) :] = True
        pos[k, T - len(r) :] = torch.arange(len(r))
    cache.key_mask = key_mask
    tree_mask = torch.ones(T, T, dtype=torch.bool).tril()[None] & key_mask[:, None, :T]
    out = m(torch.tensor(rows), cache, positions=pos, tree_mask=tree_mask, last_only=True)
    for k, r in enumerate((a, b)):
        single = m(torch.tensor([r]), m.new_cache(T + 4), last_only=True).logits[0, -1]
        assert (out.logits[k, -1] - single).abs().max().item() < TOL


def test_bf16_runtime_agrees_on_argmax(target, prompt):
    """bf16 is for speed: logits differ slightly, the top token of a clear case does not."""
    m16 = TargetModel(target.cfg, _state_of(target.model), dtype=torch.bfloat16)
    cache = m16.new_cache(256)
    l16 = m16(torch.tensor([prompt]), cache).logits[0]
    l32 = target.model(torch.tensor([prompt]), target.model.new_cache(256)).logits[0]
    agree = (l16.argmax(-1) == l32.argmax(-1)).float().mean().item()
    assert agree > 0.9


def _state_of(m: TargetModel) -> dict:
    """Rebuild an HF-style state dict from the fused runtime weights."""
    cfg = m.cfg
    sd = {"embed_tokens.weight": m.embed, "norm.weight": m.norm}
    for i, L in enumerate(m.layers):
        p = f"layers.{i}."
        q, k, v = L.wqkv.split([m.q_dim, m.kv_dim, m.kv_dim])
        g, u = L.w13.chunk(2)
        sd.update({
            p + "input_layernorm.weight": L.attn_norm, p + "post_attention_layernorm.weight": L.mlp_norm,
            p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k, p + "self_attn.v_proj.weight": v,
            p + "self_attn.o_proj.weight": L.wo, p + "mlp.gate_proj.weight": g, p + "mlp.up_proj.weight": u,
            p + "mlp.down_proj.weight": L.w2,
        })  # fmt: skip
    assert cfg.tie_embeddings
    return sd


def test_the_dense_switch_follows_the_vector_width_and_the_vendor():
    """MKL picks its GEMM by CPU vendor: on an Intel CPU with AVX-512 it beats the 4-bit blocks from ~100
    rows, on an AMD one it never did, and on AVX2 torch's GEMM wins from a few dozen rows whoever made
    the CPU. A rule of (width, vendor), so two machines with one `numerics()` string prefill alike."""
    from specviz.core.target import dense_from_rows

    assert dense_from_rows(512, "Intel") == 128
    assert dense_from_rows(512, "AMD") is None
    assert dense_from_rows(512, "") is None
    assert dense_from_rows(256, "AMD") == dense_from_rows(256, "Intel") == 64
    assert dense_from_rows(0, "Intel") is None


@pytest.mark.parametrize("dense_from", [None, 40])
def test_long_passes_switch_to_the_dense_weights_where_they_are_faster(target, hf_model, monkeypatch, dense_from):
    """A prefill of >= DENSE_FROM_ROWS rows runs on the dense copy of the weights where that is faster
    (AVX2, Intel AVX-512); shorter passes, tree passes, and every pass where no switch is set, stay on
    the blocks. The logits agree with Hugging Face either way."""
    from specviz.runtime import blockweights

    model = target.model
    if model.blocks is None:
        pytest.skip("no block kernel on this machine")
    monkeypatch.setattr(model, "dense_from_rows", dense_from)
    calls = []
    real = blockweights.BlockWeight.matmul

    def spy(self, x, lib=None):
        if self.n != model.cfg.vocab_size:  # the LM head stays on its blocks
            calls.append(x.reshape(-1, x.shape[-1]).shape[0])
        return real(self, x, lib)

    monkeypatch.setattr(blockweights.BlockWeight, "matmul", spy)
    ids = target.tokenizer.chat_ids("Explain why the sky is blue, in two sentences, for a child of ten.")
    assert 40 < len(ids) <= 80
    for n, want_blocks in ((len(ids), dense_from is None), (36, True)):  # 36: past the fused layers, under 40
        calls.clear()
        out = model(torch.tensor([ids[:n]]), model.new_cache(128))
        layer_calls = [c for c in calls if c == n]
        assert bool(layer_calls) == want_blocks, (n, calls)
        assert (out.logits[0] - hf_logits(hf_model, ids[:n])).abs().max().item() < TOL
    # a draft tree's verify pass (a mask) never takes the dense weights, however long: its rows must round
    # as the one-token passes of vanilla decoding do (it runs the C++ layers on the blocks: see
    # test_a_big_trees_rows_are_bit_for_bit_vanillas_one_token_passes)
    from specviz.core import target as target_module

    dense = []
    real_linear = target_module._linear

    def spy_linear(x, w, blocks, lib, bias=None):
        if blocks is None or lib is None:
            dense.append(x.reshape(-1, x.shape[-1]).shape[0])
        return real_linear(x, w, blocks, lib, bias)

    monkeypatch.setattr(target_module, "_linear", spy_linear)
    n = len(ids)
    out = model(torch.tensor([ids]), model.new_cache(128), tree_mask=torch.ones(n, n, dtype=torch.bool).tril())
    assert not dense, dense
    assert (out.logits[0] - hf_logits(hf_model, ids)).abs().max().item() < TOL
    if dense_from is not None:  # the spy sees the dense path where it is taken: the same prompt as a prefill
        model(torch.tensor([ids]), model.new_cache(128))
        assert dense and all(c == n for c in dense), dense
