"""The GGUF-block matmul kernel: same numbers as the dense fp32 weights, in both of its C++ paths."""

import copy
import ctypes

import pytest
import torch

from specviz.runtime import agreement, qkernel
from specviz.runtime.blockweights import BlockWeight, _head_orders, _match
from specviz.runtime.machine import cpuinfo_field


def random_blocks(kind: str, n: int, k: int, seed: int) -> BlockWeight:
    g = torch.Generator().manual_seed(seed)
    nb = k // 32
    if kind == "q4_1":
        qs = torch.randint(0, 256, (n, nb, 16), generator=g, dtype=torch.uint8)
        scales = torch.stack([torch.rand(n, nb, generator=g) * 0.02, torch.randn(n, nb, generator=g) * 0.1], -1)
        # fp16-representable, like the GGUF's own scales
        return BlockWeight(kind, qs, scales.half().float().contiguous())
    qs = torch.randint(-128, 128, (n, nb, 32), generator=g, dtype=torch.int8)
    return BlockWeight(kind, qs, (torch.rand(n, nb, generator=g) * 0.01).half().float())


def _cpu_flags() -> set[str]:
    return set(cpuinfo_field("flags").split())


# the builds to test: on an AVX-512 CPU its AVX2 build too; on an AVX2-only CPU the native build is
# that one already (collected once, not skipped)
_FLAGS = set(cpuinfo_field("flags").split())
SEPARATE_AVX2 = "avx512f" in _FLAGS and {"avx2", "fma"} <= _FLAGS
BUILDS = ["native", "avx2", "portable"] if SEPARATE_AVX2 else ["native", "portable"]


def avx2_build():
    """The AVX2 + FMA build (what a Zen 3 or most laptops run) on a CPU that also has AVX-512, so its
    own code path is tested here too (on an AVX2-only CPU the native build is that path already)."""
    flags = _cpu_flags()
    if "avx512f" not in flags or not {"avx2", "fma"} <= flags:
        pytest.skip("the AVX2 build is the native one here, or this CPU has no AVX2 + FMA")
    lib = qkernel.library(isa_name="avx2")
    assert lib is not None and lib.blockmm_simd() == 256
    return lib


@pytest.fixture(scope="module", params=BUILDS)
def lib(request):
    if request.param == "avx2":
        return avx2_build()
    native = request.param == "native"
    lib = qkernel.library(native=native)
    assert lib is not None, qkernel.error(native)
    if not native:
        assert lib.blockmm_has_avx512() == 0  # the portable path really is the other code path
    return lib


@pytest.mark.parametrize("kind", ["q4_1", "q8_0"])
@pytest.mark.parametrize("tokens", [1, 3, 8, 11])
def test_matmul_equals_dense(lib, kind, tokens):
    bw = random_blocks(kind, 70, 96, seed=tokens)
    x = torch.randn(1, tokens, 96, generator=torch.Generator().manual_seed(1))
    ref = (x.double() @ bw.dequantize().double().T).float()
    got = bw.matmul(x, lib)
    assert got.shape == (1, tokens, 70)
    # fp32 sums against an exact reference: specviz.runtime.agreement's bound for one reduction of k = 96
    assert (got - ref).abs().max().item() <= agreement.path_tolerance(96) * max(1.0, ref.abs().max().item())


def test_a_token_scores_the_same_alone_or_in_a_pass(lib):
    """Each (row, token) dot product is summed in one fixed order, whatever the pass length."""
    bw = random_blocks("q4_1", 50, 576, seed=3)
    x = torch.randn(11, 576)
    together = bw.matmul(x, lib)
    alone = torch.cat([bw.matmul(x[i : i + 1], lib) for i in range(11)])
    assert torch.equal(together, alone)


def test_dequantize_matches_gguf_rounding():
    """w = d*q + m with two fp32 roundings, as gguf-py computes it (not one fused multiply-add)."""
    bw = random_blocks("q4_1", 4, 32, seed=5)
    q = torch.cat([bw.qs & 15, bw.qs >> 4], -1).float()
    expect = (bw.scales[..., :1] * q + bw.scales[..., 1:]).reshape(4, 32)
    assert torch.equal(bw.dequantize(), expect)


def test_match_finds_row_order_and_refuses_other_weights():
    bw = random_blocks("q4_1", 24, 64, seed=7)
    dense = bw.dequantize()
    order = _head_orders(24, [3])[1]
    permuted = dense[order]
    found = _match(bw, permuted, _head_orders(24, [3]))
    assert found is not None and torch.equal(found.dequantize(), permuted)
    off = dense.clone()
    off[5, 9] = torch.nextafter(off[5, 9], torch.tensor(1e9))  # one ulp in one weight
    assert _match(bw, off) is None


def test_default_target_uses_block_weights(target):
    assert target.model.kernel_note.startswith("GGUF block weights"), target.model.kernel_note
    assert len(target.model.blocks) == target.cfg.n_layers and target.model.lm_head_blocks is not None


def test_disabled_kernel_keeps_dense_weights(target, monkeypatch):
    monkeypatch.setenv("SPECVIZ_KERNEL", "0")
    model = copy.copy(target.model)
    model.blocks = model.lm_head_blocks = None
    assert model.use_block_weights("unused.gguf") is False
    assert "SPECVIZ_KERNEL=0" in model.kernel_note and model.blocks is None


def test_speed_up_linears_rounds_weights_only_for_short_inference_inputs():
    from specviz.runtime.blockweights import speed_up_linears

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.SiLU(), torch.nn.Linear(48, 40, bias=False))
    keys = set(net.state_dict())
    x = torch.randn(3, 64)
    ref = net(x).detach()
    assert speed_up_linears(net) == 1  # 48 inputs is not a multiple of 32: that layer stays dense
    assert set(net.state_dict()) == keys
    with torch.no_grad():
        fast = net(x)
    assert not torch.equal(fast, ref)  # the Q8_0 path really ran
    assert (fast - ref).abs().max().item() < 0.02 * ref.abs().max().item()
    assert torch.equal(net(x), ref)  # with gradients on (training), the dense weights serve
    long = torch.randn(100, 64)  # more rows than MAX_BLOCK_ROWS: the dense weights serve
    with torch.no_grad():
        dense = torch.nn.functional.linear(torch.nn.functional.silu(
            torch.nn.functional.linear(long, net[0].weight, net[0].bias)), net[2].weight)
        assert torch.equal(net(long), dense)


def test_a_failing_compiler_is_reported_not_raised_into_the_runtime(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", "/bin/false")
    with pytest.raises(RuntimeError, match="failed"):
        qkernel.build(folder=tmp_path)
    assert not list(tmp_path.glob("*.so"))  # no half-written library left behind
    monkeypatch.setattr(qkernel, "_loaded", {})
    monkeypatch.setattr(qkernel, "build", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no compiler")))
    assert qkernel.library() is None and "no compiler" in qkernel.error()


def _reference_layer(x, w, cos, sin, k_ctx, v_ctx, mask, n_heads, eps):
    """One decoder layer in float64 torch (RMSNorm, rotary, GQA attention over context + pass, SwiGLU)."""
    d = {k: v.double() for k, v in w.items()}
    x = x.double()
    T, hd = x.shape[0], cos.shape[-1]
    n_kv = k_ctx.shape[0]

    def norm(v, g):
        return g * (v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + eps))

    def rot(v):  # v [T, heads, hd]
        v1, v2 = v.chunk(2, -1)
        return v * cos.double()[:, None] + torch.cat([-v2, v1], -1) * sin.double()[:, None]

    qkv = norm(x, d["attn_norm"]) @ d["wqkv"].T
    q = rot(qkv[:, : n_heads * hd].reshape(T, n_heads, hd))
    k = rot(qkv[:, n_heads * hd : (n_heads + n_kv) * hd].reshape(T, n_kv, hd))
    v = qkv[:, (n_heads + n_kv) * hd :].reshape(T, n_kv, hd)
    keys = torch.cat([k_ctx.double(), k.transpose(0, 1)], 1)  # [n_kv, L + T, hd]
    vals = torch.cat([v_ctx.double(), v.transpose(0, 1)], 1)
    L = k_ctx.shape[1]
    visible = torch.cat([torch.ones(T, L, dtype=torch.bool), mask.bool()], 1)
    rep = n_heads // n_kv
    out = torch.empty(T, n_heads, hd, dtype=torch.float64)
    for h in range(n_heads):
        s = (q[:, h] @ keys[h // rep].T) / hd**0.5
        out[:, h] = torch.softmax(s.masked_fill(~visible, float("-inf")), -1) @ vals[h // rep]
    x = x + out.reshape(T, -1) @ d["wo"].T
    gate, up = (norm(x, d["mlp_norm"]) @ d["w13"].T).chunk(2, -1)
    return x + (torch.nn.functional.silu(gate) * up) @ d["w2"].T, k, v


@pytest.mark.parametrize("L,hd", [(0, 64), (37, 64), (37, 128), (83, 128)])
def test_fused_layer_matches_float64_reference(lib, L, hd):
    """The one-call C++ layer (vectorised scores over 16 keys, masked tree attention, SwiGLU) against
    a float64 reference: a 5-node tree after L committed positions, 2 query heads sharing 1 kv head,
    at both head sizes the vector attention has its own code for (64: SmolLM2; 128: most Llamas)."""
    H, n_heads, n_kv, inter, T, max_len, eps = 128, 2, 1, 96, 5, 96, 1e-5
    g = torch.Generator().manual_seed(L)
    blocks = {"wqkv": random_blocks("q4_1", (n_heads + 2 * n_kv) * hd, H, seed=1),
              "wo": random_blocks("q4_1", H, n_heads * hd, seed=2),
              "w13": random_blocks("q8_0", 2 * inter, H, seed=3), "w2": random_blocks("q4_1", H, inter, seed=4)}
    dense = {k: b.dequantize() for k, b in blocks.items()}
    dense["attn_norm"] = 1 + 0.1 * torch.randn(H, generator=g)
    dense["mlp_norm"] = 1 + 0.1 * torch.randn(H, generator=g)
    parents = [-1, 0, 0, 1, 1]  # a small draft tree
    mask = torch.eye(T, dtype=torch.uint8)
    for i, p in enumerate(parents):
        while p >= 0:
            mask[i, p], p = 1, parents[p]
    angles = torch.arange(L, L + T)[:, None] * torch.rand(hd // 2, generator=g)
    cos, sin = torch.cat([angles.cos()] * 2, -1).contiguous(), torch.cat([angles.sin()] * 2, -1).contiguous()
    kcache, vcache = torch.randn(n_kv, max_len, hd, generator=g), torch.randn(n_kv, max_len, hd, generator=g)
    x = torch.randn(T, H, generator=g)
    ref, k_new, v_new = _reference_layer(x, dense, cos, sin, kcache[:, :L], vcache[:, :L], mask, n_heads, eps)

    def mat(b):
        return qkernel.Mat(0 if b.kind == "q4_1" else 1, b._ptrs[0], b._ptrs[1], b.n, b.k)

    args = qkernel.LayerArgs(mat(blocks["wqkv"]), mat(blocks["wo"]), mat(blocks["w13"]), mat(blocks["w2"]),
                             dense["attn_norm"].data_ptr(), dense["mlp_norm"].data_ptr(), eps, n_heads, n_kv, hd, inter)
    work = torch.empty(T * (H + 2 * (n_heads + 2 * n_kv) * hd + 3 * inter))
    got = x.clone()
    lib.layer_forward(ctypes.byref(args), got.data_ptr(), T, L, cos.data_ptr(), sin.data_ptr(), mask.data_ptr(),
                      kcache.data_ptr(), vcache.data_ptr(), max_len, work.data_ptr(), 2)
    # six chained reductions (qkv, scores, values, o, w13, w2; the widest k = n_heads x hd) against float64
    tol = agreement.path_tolerance(max(H, inter, n_heads * hd), depth=6)
    assert (got.double() - ref).abs().max().item() <= tol * ref.abs().max().item()
    assert torch.allclose(kcache[:, L : L + T].double(), k_new.transpose(0, 1), atol=1e-4)
    assert torch.allclose(vcache[:, L : L + T].double(), v_new.transpose(0, 1), atol=1e-4)


def test_a_token_attends_the_same_alone_or_in_a_pass_at_any_thread_count(lib):
    """The fused layer's attention splits a kv group's queries between tasks by thread count and
    pass length (each block of keys is read once for all of a task's queries): a token's numbers
    must not depend on that split. 6 query heads on 2 kv heads after 45 cached positions (keys in
    blocks of 16 and a tail): the first token's row and cache entries, alone or followed by 6 more
    tokens, with 1, 2 or 3 threads, are the same bits."""
    H, n_heads, n_kv, hd, inter, L, max_len, eps = 128, 6, 2, 64, 96, 45, 64, 1e-5
    g = torch.Generator().manual_seed(11)
    blocks = [random_blocks("q4_1", (n_heads + 2 * n_kv) * hd, H, seed=21), random_blocks("q4_1", H, n_heads * hd, seed=22),
              random_blocks("q8_0", 2 * inter, H, seed=23), random_blocks("q4_1", H, inter, seed=24)]
    norms = (1 + 0.1 * torch.randn(H, generator=g), 1 + 0.1 * torch.randn(H, generator=g))
    args = qkernel.LayerArgs(*(qkernel.Mat(0 if m.kind == "q4_1" else 1, m._ptrs[0], m._ptrs[1], m.n, m.k) for m in blocks),
                             norms[0].data_ptr(), norms[1].data_ptr(), eps, n_heads, n_kv, hd, inter)
    T = 7
    angles = torch.arange(L, L + T)[:, None] * torch.rand(hd // 2, generator=g)
    cos, sin = torch.cat([angles.cos()] * 2, -1).contiguous(), torch.cat([angles.sin()] * 2, -1).contiguous()
    k0, v0 = torch.randn(n_kv, max_len, hd, generator=g), torch.randn(n_kv, max_len, hd, generator=g)
    x0 = torch.randn(T, H, generator=g)

    def run(tokens, threads):
        x, k, v = x0[:tokens].clone(), k0.clone(), v0.clone()
        mask = torch.tril(torch.ones(tokens, tokens, dtype=torch.uint8))
        work = torch.empty(tokens * (H + 2 * (n_heads + 2 * n_kv) * hd + 3 * inter))
        lib.layer_forward(ctypes.byref(args), x.data_ptr(), tokens, L, cos.data_ptr(), sin.data_ptr(), mask.data_ptr(),
                          k.data_ptr(), v.data_ptr(), max_len, work.data_ptr(), threads)
        return x, k, v

    alone = run(1, 1)
    assert not torch.equal(alone[0], x0[:1])
    passes = {threads: run(T, threads) for threads in (1, 2, 3)}
    for threads, (x, k, v) in passes.items():
        assert torch.equal(x[:1], alone[0]), threads
        assert torch.equal(k[:, : L + 1], alone[1][:, : L + 1]) and torch.equal(v[:, : L + 1], alone[2][:, : L + 1])
        assert torch.equal(x, passes[1][0]), threads  # the later tokens too, whatever the split


def test_all_layers_in_one_call_equal_one_call_per_layer(lib):
    """`layers_forward_batch` for one sequence (the target's whole solo pass in one call) gives the same numbers, bit for bit,
    as `layer_forward` called layer by layer, writes each layer's keys/values into its own cache
    slice, and copies x as it enters a tapped layer."""
    H, n_heads, n_kv, hd, inter, T, L, max_len, eps, n = 128, 2, 1, 64, 96, 4, 9, 32, 1e-5, 3
    g = torch.Generator().manual_seed(5)
    layer_blocks, norms, args = [], [], []
    for i in range(n):
        b = [random_blocks("q4_1", (n_heads + 2 * n_kv) * hd, H, seed=10 * i + 1), random_blocks("q4_1", H, n_heads * hd, seed=10 * i + 2),
             random_blocks("q8_0", 2 * inter, H, seed=10 * i + 3), random_blocks("q4_1", H, inter, seed=10 * i + 4)]
        nm = (1 + 0.1 * torch.randn(H, generator=g), 1 + 0.1 * torch.randn(H, generator=g))
        layer_blocks.append(b)
        norms.append(nm)
        args.append(qkernel.LayerArgs(*(qkernel.Mat(0 if m.kind == "q4_1" else 1, m._ptrs[0], m._ptrs[1], m.n, m.k) for m in b),
                                      nm[0].data_ptr(), nm[1].data_ptr(), eps, n_heads, n_kv, hd, inter))
    mask = torch.tril(torch.ones(T, T, dtype=torch.uint8))
    angles = torch.arange(L, L + T)[:, None] * torch.rand(hd // 2, generator=g)
    cos, sin = torch.cat([angles.cos()] * 2, -1).contiguous(), torch.cat([angles.sin()] * 2, -1).contiguous()
    k0, v0 = torch.randn(n, n_kv, max_len, hd, generator=g), torch.randn(n, n_kv, max_len, hd, generator=g)
    x0 = torch.randn(T, H, generator=g)
    work = torch.empty(T * (H + 2 * (n_heads + 2 * n_kv) * hd + 3 * inter))

    want, kw, vw, entering = x0.clone(), k0.clone(), v0.clone(), {}
    for i in range(n):
        entering[i] = want.clone()
        lib.layer_forward(ctypes.byref(args[i]), want.data_ptr(), T, L, cos.data_ptr(), sin.data_ptr(), mask.data_ptr(),
                          kw[i].data_ptr(), vw[i].data_ptr(), max_len, work.data_ptr(), 1)

    got, kg, vg = x0.clone(), k0.clone(), v0.clone()
    tap = torch.full((T, H), float("nan"))
    taps = (ctypes.c_void_p * n)()
    taps[1] = tap.data_ptr()
    layers = (ctypes.c_void_p * n)(*[ctypes.addressof(a) for a in args])
    one, ptr = ctypes.c_int64 * 1, ctypes.c_void_p * 1
    lib.layers_forward_batch(layers, n, got.data_ptr(), 1, one(T), one(L), cos.data_ptr(), sin.data_ptr(), ptr(mask.data_ptr()),
                             ptr(kg.data_ptr()), ptr(vg.data_ptr()), one(k0[0].numel()), one(max_len), work.data_ptr(), 1, taps)
    assert torch.equal(got, want) and not torch.equal(got, x0)
    assert torch.equal(kg, kw) and torch.equal(vg, vw) and not torch.equal(kg, k0)
    assert torch.equal(tap, entering[1])


def _simd_order_reference(bw: BlockWeight, x: torch.Tensor) -> torch.Tensor:
    """y = x @ W^T summed exactly as the vector paths sum it: per block, lanes j and j + 16 each
    take one fused multiply-add (emulated in float64: the product is exact there, the sum rounds
    once more to fp32), then lo + hi and gcc's _mm512_reduce_add_ps tree over the 16 lanes."""
    w = bw.dequantize().double()  # [N, K], bit-exact fp32 weights
    N, K = w.shape
    xs = x.double()  # [T, K]
    lo = torch.zeros(xs.shape[0], N, 16, dtype=torch.float32)
    hi = torch.zeros_like(lo)
    f32 = lambda t: t.float()  # noqa: E731
    for b in range(K // 32):
        sl_lo, sl_hi = slice(32 * b, 32 * b + 16), slice(32 * b + 16, 32 * b + 32)
        lo = f32(xs[:, None, sl_lo] * w[None, :, sl_lo] + lo.double())
        hi = f32(xs[:, None, sl_hi] * w[None, :, sl_hi] + hi.double())
    v = lo + hi
    t3 = v[..., 8:] + v[..., :8]
    t6 = t3[..., 4:] + t3[..., :4]
    t8 = t6[..., :2] + t6[..., 2:]
    return t8[..., 0] + t8[..., 1]


@pytest.mark.parametrize("build", [b for b in BUILDS if b != "portable"])
@pytest.mark.parametrize("kind", ["q4_1", "q8_0"])
def test_vector_paths_sum_in_one_order(kind, build):
    """AVX-512 and AVX2 (+FMA) builds give the same bits: both equal the emulated order exactly,
    so a lesson recorded on one CPU replays identically on the other. The token counts reach every
    tile: AVX2 sweeps a row's blocks once up to 3 tokens and twice from 4 (8 = 4 + 4)."""
    lib = avx2_build() if build == "avx2" else qkernel.library(native=True)
    if lib is None or lib.blockmm_simd() == 0:
        pytest.skip("this CPU has neither AVX-512 nor AVX2 + FMA: the plain C++ path sums in another order")
    for tokens in (1, 2, 3, 4, 5, 6, 8):
        bw = random_blocks(kind, 37, 160, seed=10 + tokens)
        x = torch.randn(tokens, 160, generator=torch.Generator().manual_seed(tokens))
        assert torch.equal(bw.matmul(x, lib), _simd_order_reference(bw, x)), (kind, tokens)


def test_native_build_uses_the_widest_vector_path_the_cpu_has():
    """An AVX2 CPU without AVX-512 (Zen 3, most laptops) must not fall back to the plain loops
    (4x slower per token there, measured on a Zen 3 VM)."""
    lib = qkernel.library(native=True)
    assert lib is not None, qkernel.error(True)
    words = _cpu_flags()
    expect = 512 if "avx512f" in words and qkernel.isa() == "native" else 256 if {"avx2", "fma"} <= words else 0
    assert lib.blockmm_simd() == expect
    assert qkernel.library(native=False).blockmm_simd() == 0


@pytest.mark.parametrize("temperature,with_ids", [(0.0, False), (0.7, True)])
def test_softmax_top_rows_matches_float64(lib, temperature, with_ids):
    """The kernel's draft distributions (softmax at a temperature, in place) and their top-k, with
    ids mapped through a vocabulary, against float64 torch; -inf logits get probability 0."""
    g = torch.Generator().manual_seed(7)
    R, N, k = 3, 1000, 5
    logits = torch.randn(R, N, generator=g) * 4
    logits[1, :500] = float("-inf")
    ids = torch.randperm(5 * N, generator=g)[:N].contiguous() if with_ids else None
    probs, top_v, top_i = logits.clone(), torch.empty(R, k), torch.empty(R, k, dtype=torch.long)
    lib.softmax_top_rows(probs.data_ptr(), R, N, temperature, k, None if ids is None else ids.data_ptr(),
                         top_v.data_ptr(), top_i.data_ptr(), 2)
    want = (logits.double() / (temperature if temperature not in (0, 1) else 1.0)).softmax(-1)
    torch.testing.assert_close(probs.double(), want, atol=1e-7, rtol=1e-5)
    assert probs[1, :500].eq(0).all()
    v, i = want.topk(k, dim=-1)
    torch.testing.assert_close(top_v.double(), v, atol=1e-7, rtol=1e-5)
    assert torch.equal(top_i, ids[i] if with_ids else i)


def test_softmax_top_rows_give_each_row_its_numbers_alone(lib):
    """Rows of a level share threads and run their serial sums side by side (up to four a thread):
    each row's probabilities and top-k are the bits it gets alone, for any row count and threads."""
    g = torch.Generator().manual_seed(8)
    N, k = 777, 4
    logits = torch.randn(9, N, generator=g) * 3

    def run(rows, threads):
        probs, top_v, top_i = rows.clone(), torch.empty(len(rows), k), torch.empty(len(rows), k, dtype=torch.long)
        lib.softmax_top_rows(probs.data_ptr(), len(rows), N, 0.0, k, None, top_v.data_ptr(), top_i.data_ptr(), threads)
        return probs, top_v, top_i

    alone = [run(logits[r : r + 1], 1) for r in range(len(logits))]
    for R in (2, 3, 5, 9):
        for threads in (1, 2, 3):
            together = run(logits[:R], threads)
            for r in range(R):
                assert all(torch.equal(t[r], a[0]) for t, a in zip(together, alone[r])), (R, threads, r)


def test_argmax_rows_is_torch_argmax(lib):
    """The greedy walk's argmax in the kernel: the first largest entry (ties), the first NaN, rows of
    -inf, short rows and rows that are not a multiple of the vector width, as torch.argmax."""
    g = torch.Generator().manual_seed(3)
    cases = [torch.randn(4, 49152, generator=g), torch.randn(3, 37, generator=g), torch.randn(2, 5, generator=g),
             torch.full((2, 40), float("-inf")), torch.randint(0, 3, (6, 100), generator=g).float()]
    nan = torch.randn(3, 70, generator=g)
    nan[0, 50], nan[1, 3], nan[1, 60] = float("nan"), float("nan"), float("nan")
    cases.append(nan)
    late = torch.zeros(2, 64)
    late[0, 63] = late[0, 47] = 1.0  # the largest twice, in different lanes: the first one
    late[1, 17] = late[1, 1] = 2.0
    cases.append(late)
    for x in cases:
        got = torch.empty(x.shape[0], dtype=torch.long)
        lib.argmax_rows(x.contiguous().data_ptr(), x.shape[0], x.shape[1], got.data_ptr())
        assert got.tolist() == x.argmax(-1).tolist(), x.shape


def test_q4_1_blocks_need_fp16_scales():
    """The kernel decodes a Q4_1 weight as one fused multiply-add d*q + m, which equals gguf-py's
    rounding only when d*q is exact: d an fp16 value, as GGUF stores it. Other scales are refused."""
    ok = random_blocks("q4_1", 4, 64, seed=0)
    bad = ok.scales.clone()
    bad[0, 0, 0] = 0.1  # not an fp16 value
    with pytest.raises(ValueError, match="fp16"):
        BlockWeight("q4_1", ok.qs, bad)
    d = ok.scales[..., 0].double()
    q = torch.arange(16, dtype=torch.float64)
    assert torch.equal((d[..., None] * q).float().double(), d[..., None] * q)  # every d*q exact in fp32
