"""Draft heads: public checkpoint layout, d2t/t2d mapping, refusal of mismatched heads,
official-layout EAGLE-1/EAGLE-3 checkpoints, and training-time test == drafting."""

from __future__ import annotations

import json

import pytest
import torch

from specviz import SpecVizError
from specviz.heads import Eagle1Head, Eagle3Head, MedusaHeads, head_config_from_target, load_head, save_head
from specviz.heads.layers import HeadCache


def _randomize(m, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1 + (1.0 if p.dim() == 1 else 0.0))
    return m


def _e3(cfg, vocab=48):
    h = Eagle3Head(head_config_from_target(cfg, draft_vocab_size=vocab))
    _randomize(h)
    h.set_vocab(torch.randperm(cfg.vocab_size, generator=torch.Generator().manual_seed(1))[:vocab])
    return h


def test_d2t_t2d_mapping(tiny_config):
    cfg = tiny_config()
    h = _e3(cfg)
    ids = torch.nonzero(h.t2d).flatten()
    assert len(ids) == h.draft_vocab_size == 48
    d = torch.arange(48)
    assert torch.equal(d + h.d2t[d], ids)  # target_id = draft_id + d2t[draft_id], sorted by id
    assert torch.equal(h.draft_to_target(d), ids)
    assert bool((h.d2t >= 0).all())


@pytest.mark.parametrize("method", ["eagle1", "eagle3", "medusa"])
def test_round_trip_public_layout(tmp_path, method, tiny_target):
    target = tiny_target()
    cfg = target.cfg
    if method == "eagle1":
        head = _randomize(Eagle1Head(head_config_from_target(cfg, bias=True)))
        keys = {"fc.weight", "fc.bias", "layers.0.self_attn.q_proj.weight", "layers.0.mlp.down_proj.weight",
                "layers.0.post_attention_layernorm.weight"}
    elif method == "eagle3":
        head = _e3(cfg)
        keys = {"fc.weight", "midlayer.self_attn.q_proj.weight", "midlayer.hidden_norm.weight",
                "midlayer.input_layernorm.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"}
    else:
        head = _randomize(MedusaHeads(dict(hidden_size=cfg.hidden_size, vocab_size=cfg.vocab_size,
                                           medusa_num_heads=3, medusa_num_layers=1)))
        keys = {"0.0.linear.weight", "0.0.linear.bias", "2.0.linear.weight"}
    head.bind(target.embed)
    save_head(head, tmp_path, dtype=torch.float32)
    from safetensors.torch import load_file

    sd = load_file(str(tmp_path / "model.safetensors"))
    assert keys <= set(sd), set(sd)
    assert not any("embed" in k for k in sd)
    if method == "eagle3":
        assert sd["fc.weight"].shape == (cfg.hidden_size, 3 * cfg.hidden_size)
        assert sd["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * cfg.hidden_size
        assert json.loads((tmp_path / "config.json").read_text())["draft_vocab_size"] == 48
    back = load_head(tmp_path, target=target)
    assert type(back) is type(head)
    for (k, a), b in zip(head.state_dict().items(), back.state_dict().values()):
        assert torch.equal(a, b.to(a.dtype)), k
    # fp16 export loads and stays close
    save_head(head, tmp_path / "fp16")
    back16 = load_head(tmp_path / "fp16", target=target)
    f = torch.randn(1, 5, cfg.hidden_size)
    if method == "medusa":
        assert torch.allclose(head(f), back16(f), atol=1e-2)
    else:
        toks = torch.randint(0, cfg.vocab_size, (1, 5))
        pos = torch.arange(5)[None]
        hid = head.fuse(f, f, f) if method == "eagle3" else f
        hid2 = back16.fuse(f, f, f) if method == "eagle3" else f
        assert torch.allclose(head.forward_seq(toks, hid, pos), back16.forward_seq(toks, hid2, pos), atol=2e-2)


def test_refuses_mismatched_heads(tmp_path, tiny_target, tiny_config):
    target = tiny_target()
    head = _e3(target.cfg)
    save_head(head, tmp_path / "e3")
    other_h = tiny_config(hidden=32)
    with pytest.raises(SpecVizError, match="hidden size"):
        load_head(tmp_path / "e3", target_cfg=other_h)
    other_v = tiny_config(vocab=256)
    with pytest.raises(SpecVizError, match="vocabulary"):
        load_head(tmp_path / "e3", target_cfg=other_v)
    e1 = Eagle1Head(head_config_from_target(target.cfg))
    save_head(e1, tmp_path / "e1")
    with pytest.raises(SpecVizError, match="hidden size"):
        load_head(tmp_path / "e1", target_cfg=other_h)
    with pytest.raises(SpecVizError):
        load_head(tmp_path / "nothing-here", target_cfg=target.cfg)


def _official_common(H, V, nh=4, nkv=2):
    return {"architectures": ["LlamaForCausalLM"], "hidden_size": H, "intermediate_size": 2 * H,
            "num_attention_heads": nh, "num_key_value_heads": nkv, "num_hidden_layers": 1, "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "vocab_size": V, "max_position_embeddings": 2048, "model_type": "llama"}


def test_loads_official_eagle1_layout(tmp_path, tiny_target):
    target = tiny_target()
    H, V = target.cfg.hidden_size, target.cfg.vocab_size
    kv = 2 * (H // 4)
    r = lambda *s: torch.randn(*s) * 0.05
    sd = {"fc.weight": r(H, 2 * H), "fc.bias": r(H), "embed_tokens.weight": r(V, H),
          "layers.0.input_layernorm.weight": torch.ones(H),  # present in official files, unused
          "layers.0.self_attn.q_proj.weight": r(H, H), "layers.0.self_attn.k_proj.weight": r(kv, H),
          "layers.0.self_attn.v_proj.weight": r(kv, H), "layers.0.self_attn.o_proj.weight": r(H, H),
          "layers.0.mlp.gate_proj.weight": r(2 * H, H), "layers.0.mlp.up_proj.weight": r(2 * H, H),
          "layers.0.mlp.down_proj.weight": r(H, 2 * H), "layers.0.post_attention_layernorm.weight": torch.ones(H)}
    cfg = dict(_official_common(H, V), bias=True)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    torch.save(sd, tmp_path / "pytorch_model.bin")
    head = load_head(tmp_path, target=target)
    assert isinstance(head, Eagle1Head)
    assert torch.equal(head.fc.weight, sd["fc.weight"])
    out = head.forward_seq(torch.tensor([[3, 4, 5]]), torch.randn(1, 3, H), torch.arange(3)[None])
    assert head.logits(out).shape == (1, 3, V)


def test_loads_official_eagle3_layout(tmp_path, tiny_target):
    from safetensors.torch import save_file

    target = tiny_target()
    H, V, Vd = target.cfg.hidden_size, target.cfg.vocab_size, 40
    kv = 2 * (H // 4)
    r = lambda *s: torch.randn(*s) * 0.05
    ids = torch.arange(0, 2 * Vd, 2)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[ids] = True
    sd = {"fc.weight": r(H, 3 * H), "midlayer.self_attn.q_proj.weight": r(H, 2 * H),
          "midlayer.self_attn.k_proj.weight": r(kv, 2 * H), "midlayer.self_attn.v_proj.weight": r(kv, 2 * H),
          "midlayer.self_attn.o_proj.weight": r(H, H), "midlayer.mlp.gate_proj.weight": r(2 * H, H),
          "midlayer.mlp.up_proj.weight": r(2 * H, H), "midlayer.mlp.down_proj.weight": r(H, 2 * H),
          "midlayer.hidden_norm.weight": torch.ones(H), "midlayer.input_layernorm.weight": torch.ones(H),
          "midlayer.post_attention_layernorm.weight": torch.ones(H), "norm.weight": torch.ones(H),
          "lm_head.weight": r(Vd, H), "d2t": ids - torch.arange(Vd), "t2d": t2d}
    cfg = dict(_official_common(H, V), architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=Vd)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    save_file(sd, str(tmp_path / "model.safetensors"))
    head = load_head(tmp_path, target=target)
    assert isinstance(head, Eagle3Head) and head.draft_vocab_size == Vd
    assert torch.equal(head.draft_to_target(torch.arange(Vd)), ids)
    f = torch.randn(1, 3, H)
    out = head.forward_seq(torch.tensor([[3, 4, 5]]), head.fuse(f, f, f), torch.arange(3)[None])
    assert head.logits(out).shape == (1, 3, Vd)


@pytest.mark.parametrize("method", ["eagle1", "eagle3"])
def test_training_time_test_matches_drafting(method, tiny_target):
    """Step j of the unrolled training pass == drafting a chain with the head's KV cache."""
    target = tiny_target()
    cfg = target.cfg
    head = _e3(cfg) if method == "eagle3" else _randomize(Eagle1Head(head_config_from_target(cfg)))
    head.bind(target.embed)
    T, S = 7, 3
    toks = torch.randint(0, cfg.vocab_size, (1, T + S + 1))
    f = torch.randn(1, T, cfg.hidden_size)
    hid0 = head.fuse(f, f * 0.5, f * 2) if method == "eagle3" else f
    pos0 = torch.arange(T)[None]
    with torch.no_grad():
        steps_toks = [toks[:, 1 + j : 1 + j + T] for j in range(S)]
        outs, _ = head.unroll(steps_toks, hid0, pos0, S)
        wouts, widx = head.unroll(steps_toks, hid0, pos0, S, start=torch.tensor([3]))
        for j in range(1, S):  # the windowed unroll (anchors >= 3 only) computes the same states
            assert torch.allclose(wouts[j][0], outs[j][0, widx[0]], atol=1e-5)
        t = 4  # anchor: context entries 0..t, then a chain of S-1 drafts
        cache = HeadCache(1, cfg.n_kv_heads, 32, cfg.head_dim, torch.float32, "cpu")
        o = head.forward_cached(toks[:, 1 : t + 2], hid0[:, : t + 1], pos0[:, : t + 1], cache)
        cache.commit(list(range(t + 1)))
        assert torch.allclose(o[0, t], outs[0][0, t], atol=1e-5)
        h = o[:, t : t + 1]
        for j in range(1, S):
            o = head.forward_cached(toks[:, t + 1 + j : t + 2 + j], h, torch.tensor([[t + j]]), cache, first=False)
            cache.commit([0])
            assert torch.allclose(o[0, 0], outs[j][0, t], atol=1e-5), j
            h = o


@pytest.mark.parametrize("method", ["eagle1", "eagle3"])
def test_kernel_layer_drafts_like_the_torch_layer(method, tiny_target):
    """Drafting through the one-call kernel layer (`KernelLayer`) gives the torch path's outputs and
    cache entries: a commit pass, a tree level seeing everything, and a level seeing only its own
    ancestors among 3 uncommitted entries (`offset`). The kernel sums attention, rotary and norms in
    another order, so they agree to float rounding, not bit for bit."""
    from specviz.runtime import qkernel
    from specviz.runtime.blockweights import speed_up_linears

    if qkernel.library() is None:
        pytest.skip(f"no kernel: {qkernel.error()}")
    target = tiny_target()
    cfg = target.cfg
    head = _e3(cfg) if method == "eagle3" else _randomize(Eagle1Head(head_config_from_target(cfg)))
    head.bind(target.embed)
    assert speed_up_linears(head) > 0
    head.fuse_for_drafting()
    kernel = head.kernel_layer
    assert kernel is not None
    H = cfg.hidden_size
    feats = lambda n, seed: torch.randn(1, n, H, generator=torch.Generator().manual_seed(seed))  # noqa: E731
    t = torch.tensor
    level2 = t([[1, 0, 0, 1, 0], [0, 1, 0, 0, 1]], dtype=torch.bool)  # [T=2, offset 3 + 2]
    runs = []
    for layer in (None, kernel):
        head.kernel_layer = layer
        cache = HeadCache(1, head.m.n_kv_heads, 64, head.m.head_dim, torch.float32, "cpu")
        with torch.no_grad():
            first = feats(4, 1)
            outs = [head.forward_cached(t([[3, 4, 5, 6]]), first, t([[0, 1, 2, 3]]), cache)]
            cache.commit([0, 1, 2, 3])
            outs.append(head.forward_cached(t([[7, 8, 9]]), feats(3, 2), t([[4, 4, 4]]), cache, first=False))
            outs.append(head.forward_cached(t([[10, 11]]), feats(2, 3), t([[5, 5]]), cache, block=level2,
                                            first=False, offset=3))
        assert torch.equal(first, feats(4, 1)), "the caller's features must not be written to"
        runs.append((outs, cache))
    (ref, c1), (got, c2) = runs
    for a, b in zip(ref, got):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(c2.k[:, :, :9], c1.k[:, :, :9], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(c2.v[:, :, :9], c1.v[:, :, :9], atol=1e-5, rtol=1e-5)
    # a mask that differs only in what level 2 may see changes the kernel's output (the mask is read)
    head.kernel_layer = kernel
    with torch.no_grad():
        other = head.forward_cached(t([[10, 11]]), feats(2, 3), t([[5, 5]]), c2, block=torch.ones(2, 5, dtype=torch.bool),
                                    first=False, offset=3)
    assert not torch.allclose(other, got[2], atol=1e-4)


def _float64_twin(head, lm_blocks=None):
    """A float64 copy of a drafting head whose weights are the Q8_0-rounded ones the kernel reads,
    computing with torch's plain ops (its dense path): the reference for `DraftKernel`."""
    from specviz.runtime.blockweights import quantize_q8_0

    twin = type(head)(head.config)
    twin.load_state_dict(head.state_dict())
    with torch.no_grad():
        for name, mod in twin.named_modules():
            if isinstance(mod, torch.nn.Linear) and (name != "fc" or head.method == "eagle1"):
                mod.weight.copy_(quantize_q8_0(mod.weight).dequantize())  # (EAGLE-3's fc fuses taps outside a level)
    twin = twin.double()
    embed = head._embed.double()
    lm = None if lm_blocks is None else lm_blocks.dequantize().double()
    return twin.bind(embed, lm, None)


@pytest.mark.parametrize("method", ["eagle1", "eagle3"])
def test_draft_kernel_level_matches_a_float64_reference(method, tiny_target):
    """One tree level in one kernel call (`DraftKernel.level`: the head's input, its layer over the
    committed cache plus earlier uncommitted tree entries under a mask, the final norm, the LM head,
    softmax at a temperature, top-k) against the same head in float64 torch on the same rounded
    weights: a commit pass of 4 entries, then a level of 2 entries that each see one of 3 earlier
    tree entries. A wrong mask, norm, rotary row, residual or softmax fails it."""
    from specviz.runtime import qkernel
    from specviz.runtime.blockweights import quantize_q8_0, speed_up_linears

    if qkernel.library() is None:
        pytest.skip(f"no kernel: {qkernel.error()}")
    target = tiny_target()
    cfg = target.cfg
    head = _e3(cfg) if method == "eagle3" else _randomize(Eagle1Head(head_config_from_target(cfg)))
    lm_blocks = None if method == "eagle3" else quantize_q8_0(target.embed)
    head.bind(target.embed, None, lm_blocks)
    speed_up_linears(head)
    head.fuse_for_drafting()
    kernel = head.draft_kernel
    assert kernel is not None
    ref_head = _float64_twin(head, lm_blocks)
    H, t = cfg.hidden_size, torch.tensor
    feats = torch.randn(6, H, generator=torch.Generator().manual_seed(5))
    cache = HeadCache(1, head.m.n_kv_heads, 64, head.m.head_dim, torch.float32, "cpu")
    ref_cache = HeadCache(1, head.m.n_kv_heads, 64, head.m.head_dim, torch.float64, "cpu")
    row = lambda j: feats[j].data_ptr()  # noqa: E731
    temperature, k = 0.7, 5

    def ref_probs(out):
        logits = ref_head.logits(out) if method == "eagle3" else out @ ref_head._lm_head.T
        return (logits / temperature).softmax(-1)

    with torch.no_grad():
        # a commit pass: 4 entries, causal; the distribution of the last one only
        out, probs, top_v, top_i = kernel.level([3, 4, 5, 6], [row(j) for j in range(4)], [0, 1, 2, 3], cache, 0, None,
                                                1, temperature, k)
        cache.commit([0, 1, 2, 3])
        ref = ref_head.forward_cached(t([[3, 4, 5, 6]]), feats[:4].double()[None], t([[0, 1, 2, 3]]), ref_cache)[0]
        ref_cache.commit([0, 1, 2, 3])
        torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(probs.double(), ref_probs(ref[-1:]), atol=1e-5, rtol=1e-4)
        # a first level (3 entries seeing the committed ones and themselves), then a second level of 2
        # entries after them, each seeing one of the 3 (offset 3)
        lvl1 = kernel.level([7, 8, 9], [out[3].data_ptr()] * 3, [4, 4, 4], cache, 0, bytes([1, 0, 0, 0, 1, 0, 0, 0, 1]),
                            3, temperature, k)
        ref1 = ref_head.forward_cached(t([[7, 8, 9]]), ref[3:4].expand(3, -1)[None], t([[4, 4, 4]]), ref_cache,
                                       block=torch.eye(3, dtype=torch.bool), first=False)[0]
        mask = t([[1, 0, 0, 1, 0], [0, 0, 1, 0, 1]], dtype=torch.bool)
        lvl2 = kernel.level([10, 11], [lvl1[0][0].data_ptr(), lvl1[0][2].data_ptr()], [5, 5], cache, 3,
                            bytes(mask.flatten().to(torch.uint8).tolist()), 2, temperature, k)
        ref2 = ref_head.forward_cached(t([[10, 11]]), ref1[[0, 2]][None], t([[5, 5]]), ref_cache, block=mask,
                                       first=False, offset=3)[0]
    for (out, probs, top_v, top_i), ref in ((lvl1, ref1), (lvl2, ref2)):
        torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=1e-4)
        p = ref_probs(ref)
        torch.testing.assert_close(probs.double(), p, atol=1e-5, rtol=1e-4)
        want_v, want_i = p.topk(k, dim=-1)
        torch.testing.assert_close(top_v.double(), want_v, atol=1e-5, rtol=1e-4)
        ids = head.target_ids()[want_i] if method == "eagle3" else want_i
        assert torch.equal(top_i, ids)
    torch.testing.assert_close(cache.k[:, :, :9].double(), ref_cache.k[:, :, :9], atol=1e-4, rtol=1e-4)


def test_fuse_taps_gives_head_fuse_bits(tiny_target):
    """EAGLE-3's features of committed tokens go straight into the drafter's buffer through
    `DraftKernel.fuse_taps`: bit for bit what `head.fuse` gives on the same Q8_0 copy of fc, for taps
    that are gathered rows (not contiguous) too. Swapped taps, another rounding of fc or a wrong row
    count fail it; where the copy cannot serve (too many rows, fp64 taps) nothing is written."""
    from specviz.runtime import qkernel
    from specviz.runtime.blockweights import MAX_BLOCK_ROWS, speed_up_linears

    if qkernel.library() is None:
        pytest.skip(f"no kernel: {qkernel.error()}")
    target = tiny_target()
    head = _e3(target.cfg)
    head.bind(target.embed)
    speed_up_linears(head)
    head.fuse_for_drafting()
    kernel = head.draft_kernel
    assert kernel is not None
    H, g = target.cfg.hidden_size, torch.Generator().manual_seed(3)
    taps = [torch.randn(1, 7, H, generator=g) for _ in range(3)]
    for rows in ([0, 1], [0, 2, 5], list(range(7))):
        parts = [t[0, rows] for t in taps]  # as the engine gathers an accepted path's rows
        buf = torch.full((10, H), float("nan"))
        with torch.no_grad():
            assert kernel.fuse_taps(parts, buf[2 : 2 + len(rows)])
            want = head.fuse(*parts)
        assert torch.equal(buf[2 : 2 + len(rows)], want)
        assert buf[:2].isnan().all() and buf[2 + len(rows) :].isnan().all()
    assert not torch.equal(want, head.fuse(parts[2], parts[1], parts[0]))  # the order of the taps is read
    big = [torch.randn(MAX_BLOCK_ROWS + 1, H) for _ in range(3)]
    out = torch.zeros(MAX_BLOCK_ROWS + 1, H)
    with torch.no_grad():
        assert not kernel.fuse_taps(big, out)
    assert not kernel.fuse_taps([t[0, :2].double() for t in taps], out[:2])
    assert not out.any()
    with torch.enable_grad():  # the drafter commits outside no_grad: the copy serves there too
        assert kernel.fuse_taps([t[0, :2] for t in taps], out[:2])
    with torch.no_grad():
        assert torch.equal(out[:2], head.fuse(*[t[0, :2] for t in taps]))
