// y = x @ W^T for weights kept in their GGUF blocks (Q4_1, Q8_0), computed in fp32.
//
// Why: a decode or tree-verify pass of a small model on a CPU is bound by reading weights.
// The default checkpoint is a Q4_1 GGUF; dequantised to fp32 it is 6.4x more bytes to stream
// per pass. Here each 32-weight block is dequantised in registers (w = d*q + m, the same two
// fp32 roundings gguf-py does, so the weights are bit-identical to the dense fp32 model) and
// used for every token of the pass. Each (row, token) dot product is summed in the same order
// whatever the number of tokens, so a token scores the same alone or inside a draft tree.
//
// With AVX-512 a pass of several tokens is compute bound, so the inner loop is a register tile
// of 2 rows x up to 6 tokens: each block is decoded once per row and each slice of x loaded once
// for both rows; one token (decoding) stays bound by memory, which software prefetch keeps busy.
// About 70% of the FMA peak of a Zen 4 core at 6 tokens. With AVX2 + FMA (no AVX-512: Zen 3, most
// laptops) the same tile runs on pairs of 8-lane registers, 1 row x up to 3 tokens (4 to 6 tokens in
// two sweeps of the row, `tile_sweeps`), and gives the same bits; only without either do the plain C++ loops below run (6-10x slower than AVX2 there).
// The tile only regroups work: every sum keeps its order.
//
// Layouts (row n = output feature, nb = K / 32 blocks per row):
//   Q4_1: qs uint8 [N, nb, 16] (low nibble = element j, high nibble = element j + 16),
//         dm float [N, nb, 2] (scale d, minimum m)
//   Q8_0: qs int8 [N, nb, 32], d float [N, nb]
// x float [T, K] row-major, y float [T, N] row-major.
// Build: g++ -O3 -march=native -ffp-contract=off -fopenmp -shared -fPIC (see specviz/runtime/qkernel.py).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
#define BLOCKMM_SIMD 512
#elif defined(__AVX2__) && defined(__FMA__)
#define BLOCKMM_SIMD 256
#else
#define BLOCKMM_SIMD 0
#endif

namespace {

constexpr int64_t ROWS_PER_TASK = 32;
constexpr int64_t PREFETCH_TILES = 4;

// Block decoders: weights j and j+16 of a 32-weight block into two 16-lane halves, rounded as
// gguf-py rounds them. `Q` is the quantised element, QB its count per block, SB scales per block.

#if BLOCKMM_SIMD
// Sixteen fp32 lanes: one AVX-512 register, or two AVX2 registers (lanes 0-7, 8-15). The matmul
// below is written once on this type, so both instruction sets do the same operations lane by lane
// (one fused multiply-add per weight) and reduce the 16 lanes in the same tree: an AVX2 CPU gives
// the same bits as an AVX-512 one (the plain C++ path sums in another order).
#if BLOCKMM_SIMD == 512
struct V16 {
    __m512 v;
};
inline V16 vzero() { return {_mm512_setzero_ps()}; }
inline V16 vload(const float* p) { return {_mm512_loadu_ps(p)}; }
inline V16 vfmadd(V16 a, V16 b, V16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline V16 vadd(V16 a, V16 b) { return {_mm512_add_ps(a.v, b.v)}; }
inline float vsum(V16 a) { return _mm512_reduce_add_ps(a.v); }
#define BLOCKMM_KEEP(x) asm("" : "+v"((x).v))
#else
struct V16 {
    __m256 a, b;
};
inline V16 vzero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline V16 vload(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline V16 vfmadd(V16 x, V16 y, V16 z) { return {_mm256_fmadd_ps(x.a, y.a, z.a), _mm256_fmadd_ps(x.b, y.b, z.b)}; }
inline V16 vadd(V16 x, V16 y) { return {_mm256_add_ps(x.a, y.a), _mm256_add_ps(x.b, y.b)}; }
// gcc's _mm512_reduce_add_ps, step for step: upper 8 + lower 8, upper 4 + lower 4, then pairs
inline float vsum(V16 x) {
    const __m256 t3 = _mm256_add_ps(x.b, x.a);
    const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_add_ss(t8, _mm_shuffle_ps(t8, t8, _MM_SHUFFLE(1, 1, 1, 1))));
}
#define BLOCKMM_KEEP(x) do { asm("" : "+x"((x).a)); asm("" : "+x"((x).b)); } while (0)
#endif
#endif

// Q4_1's scale d is an fp16 value (GGUF stores it so; BlockWeight checks it): d has 11 significant
// bits and q <= 15 has 4, so d*q is exact in fp32 and one fused multiply-add d*q + m rounds once,
// exactly where gguf-py's multiply then add rounds (its multiply does not round). Same weights, one
// instruction fewer per 8 or 16 of them, which an AVX2 one-token pass is bound by (docs/runtime.md).
struct Q41 {
    using Q = uint8_t;
    static constexpr int64_t QB = 16, SB = 2;  // 32 nibbles; d, m
#if BLOCKMM_SIMD == 512
    // The 16 values a nibble can stand for, d*q + m for q = 0..15, looked up per lane: one
    // multiply-add per block instead of one per half, and no conversions.
    static inline void decode(const Q* q, const float* s, V16& lo, V16& hi) {
        const __m512 nibbles = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const __m512 table = _mm512_fmadd_ps(_mm512_set1_ps(s[0]), nibbles, _mm512_set1_ps(s[1]));
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
        // permutexvar reads only the low 4 bits of each index: no masking needed
        lo.v = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(raw), table);
        hi.v = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_srli_epi16(raw, 4)), table);
    }
#elif BLOCKMM_SIMD == 256
    // d*q + m as in the table above, eight lanes at a time
    static inline void decode(const Q* q, const float* s, V16& lo, V16& hi) {
        const __m256 d = _mm256_set1_ps(s[0]), m = _mm256_set1_ps(s[1]);
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)), low4 = _mm_set1_epi8(15);
        const __m128i l = _mm_and_si128(raw, low4), h = _mm_and_si128(_mm_srli_epi16(raw, 4), low4);
        auto f = [&](__m128i b) { return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), m); };
        lo = {f(l), f(_mm_srli_si128(l, 8))};
        hi = {f(h), f(_mm_srli_si128(h, 8))};
    }
    // half `part` of the above (lanes 8 part .. 8 part + 7 of lo and of hi): bytes 8 part .. 8 part + 7
    static inline void decode_half(const Q* q, const float* s, int part, __m256& lo, __m256& hi) {
        const __m256 d = _mm256_set1_ps(s[0]), m = _mm256_set1_ps(s[1]);
        const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * part)), low4 = _mm_set1_epi8(15);
        auto f = [&](__m128i b) { return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), m); };
        lo = f(_mm_and_si128(raw, low4));
        hi = f(_mm_and_si128(_mm_srli_epi16(raw, 4), low4));
    }
#endif
    static inline void decode(const Q* q, const float* s, float* lo, float* hi) {
        for (int j = 0; j < 16; ++j) {
            lo[j] = s[0] * static_cast<float>(q[j] & 15) + s[1];
            hi[j] = s[0] * static_cast<float>(q[j] >> 4) + s[1];
        }
    }
};

struct Q80 {
    using Q = int8_t;
    static constexpr int64_t QB = 32, SB = 1;  // 32 bytes; d
#if BLOCKMM_SIMD == 512
    static inline void decode(const Q* q, const float* s, V16& lo, V16& hi) {
        const __m512 d = _mm512_set1_ps(s[0]);
        lo.v = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)))));
        hi.v = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)))));
    }
#elif BLOCKMM_SIMD == 256
    static inline void decode(const Q* q, const float* s, V16& lo, V16& hi) {
        const __m256 d = _mm256_set1_ps(s[0]);
        auto f = [&](const Q* p) {
            return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))));
        };
        lo = {f(q), f(q + 8)};
        hi = {f(q + 16), f(q + 24)};
    }
    static inline void decode_half(const Q* q, const float* s, int part, __m256& lo, __m256& hi) {
        const __m256 d = _mm256_set1_ps(s[0]);
        auto f = [&](const Q* p) {
            return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))));
        };
        lo = f(q + 8 * part);
        hi = f(q + 16 + 8 * part);
    }
#endif
    static inline void decode(const Q* q, const float* s, float* lo, float* hi) {
        for (int j = 0; j < 16; ++j) {
            lo[j] = s[0] * static_cast<float>(q[j]);
            hi[j] = s[0] * static_cast<float>(q[16 + j]);
        }
    }
};

#if BLOCKMM_SIMD
// Prefetch block b of the R rows PREFETCH_TILES tiles further on than the R rows at q, s: one slice of
// them per block, so the next rows are in cache when their tile starts (addresses only: prefetches
// never fault, even past the last row).
template <class D, int R>
inline void prefetch_ahead(const typename D::Q* q, const float* s, int64_t nb, int64_t b) {
    const uintptr_t ahead = PREFETCH_TILES * R * nb + b * R;  // in blocks (integer addresses: no pointer past the end)
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(q) + ahead * D::QB * sizeof(*q)), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(s) + ahead * D::SB * sizeof(*s)), _MM_HINT_T0);
}

// y[t, n] for R rows from n0 and TT tokens: a register tile of R x TT x 2 accumulators. Each block
// of the R rows is decoded once and each 16-float half of a token's x is loaded once for all R
// rows, so a block costs R decodes + 2 TT loads for 2 R TT multiply-adds (R = 1 loads once per
// multiply-add, which is what the load port of a Zen 4 core can just sustain). Every (row, token)
// still sums lanes j and j + 16 in block order and then reduces them as the single-row loop did, so
// the numbers do not depend on R, TT or the pass length.
template <class D, int R, int TT>
inline void tile(const float* x, int64_t K, const typename D::Q* qs, const float* sc, int64_t n0, float* y,
                 int64_t ldy) {
    const int64_t nb = K / 32;
    const typename D::Q* q[R];
    const float* s[R];
    for (int r = 0; r < R; ++r) {
        q[r] = qs + (n0 + r) * nb * D::QB;
        s[r] = sc + (n0 + r) * nb * D::SB;
    }
    V16 lo[R][TT], hi[R][TT];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int t = 0; t < TT; ++t) lo[r][t] = hi[r][t] = vzero();
    for (int64_t b = 0; b < nb; ++b) {
        V16 wlo[R], whi[R];
        // rows side by side, which the hardware prefetcher misses; and the AVX2 build's one row, whose
        // one-token pass otherwise waited on memory
        if constexpr (R > 1 || BLOCKMM_SIMD == 256) prefetch_ahead<D, R>(q[0], s[0], nb, b);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) D::decode(q[r] + b * D::QB, s[r] + b * D::SB, wlo[r], whi[r]);
#pragma GCC unroll 8
        for (int t = 0; t < TT; ++t) {
            const float* xt = x + t * K + b * 32;
            V16 xlo = vload(xt), xhi = vload(xt + 16);
            if constexpr (R > 1) {  // keep x in a register: else gcc folds one load into every multiply-add
                BLOCKMM_KEEP(xlo);
                BLOCKMM_KEEP(xhi);
            }
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                lo[r][t] = vfmadd(xlo, wlo[r], lo[r][t]);
                hi[r][t] = vfmadd(xhi, whi[r], hi[r][t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int t = 0; t < TT; ++t) y[t * ldy + n0 + r] = vsum(vadd(lo[r][t], hi[r][t]));
}

#if BLOCKMM_SIMD == 256
// The AVX2 tile in two sweeps over the row's blocks: lanes 0-7 of both 16-lane halves of every block,
// then lanes 8-15 (the row's blocks are in L1 for the second sweep). Each lane's sum is the same chain
// of multiply-adds in block order as in `tile`, and the 16 lanes reduce as vsum does, so the bits are
// the same; but a token needs 2 accumulator registers in a sweep instead of 4, so 6 tokens fit in the
// 16 registers with the weights (`tile` spilled its accumulators to memory beyond 3 tokens).
template <class D, int TT>
inline void tile_sweeps(const float* x, int64_t K, const typename D::Q* qs, const float* sc, int64_t n0, float* y,
                        int64_t ldy) {
    const int64_t nb = K / 32;
    const typename D::Q* q = qs + n0 * nb * D::QB;
    const float* s = sc + n0 * nb * D::SB;
    __m256 lo_first[TT], hi_first[TT];
    for (int part = 0; part < 2; ++part) {
        __m256 lo[TT], hi[TT];
#pragma GCC unroll 8
        for (int t = 0; t < TT; ++t) lo[t] = hi[t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            if (part == 0) prefetch_ahead<D, 1>(q, s, nb, b);  // as in `tile`
            __m256 wlo, whi;
            D::decode_half(q + b * D::QB, s + b * D::SB, part, wlo, whi);
#pragma GCC unroll 8
            for (int t = 0; t < TT; ++t) {
                const float* xt = x + t * K + b * 32 + 8 * part;
                lo[t] = _mm256_fmadd_ps(_mm256_loadu_ps(xt), wlo, lo[t]);
                hi[t] = _mm256_fmadd_ps(_mm256_loadu_ps(xt + 16), whi, hi[t]);
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < TT; ++t) {
            if (part == 0) {
                lo_first[t] = lo[t];
                hi_first[t] = hi[t];
            } else {
                y[t * ldy + n0] = vsum(vadd(V16{lo_first[t], lo[t]}, V16{hi_first[t], hi[t]}));
            }
        }
    }
}
#endif

// Row tiles of TILE_ROWS (the last rows one by one) for TT tokens.
template <class D, int TT>
void rows(const float* x, int64_t K, const typename D::Q* qs, const float* sc, int64_t n0, int64_t n1, float* y,
          int64_t ldy) {
#if BLOCKMM_SIMD == 256
    // up to 3 tokens (4 TT + 4 registers) one sweep decodes each block once; beyond, two sweeps
    // beat one sweep that spills its accumulators (docs/runtime.md)
    for (int64_t n = n0; n < n1; ++n) {
        if constexpr (TT <= 3)
            tile<D, 1, TT>(x, K, qs, sc, n, y, ldy);
        else
            tile_sweeps<D, TT>(x, K, qs, sc, n, y, ldy);
    }
#else
    // AVX-512: 2 R TT accumulators + 2 R weights + 2 x, up to TT = 6 in 32 registers
    constexpr int R = 2;
    int64_t n = n0;
    for (; n + R <= n1; n += R) tile<D, R, TT>(x, K, qs, sc, n, y, ldy);
    for (; n < n1; ++n) tile<D, 1, TT>(x, K, qs, sc, n, y, ldy);
#endif
}
constexpr int MAX_TOKENS = 6;  // tokens in one register tile
#else  // portable: 16-lane arrays the compiler vectorises with whatever the CPU has
constexpr int MAX_TOKENS = 8;

// y[t, n] for rows [n0, n1) and TT tokens: each block is decoded once and used for every token;
// every (row, token) sum runs in the same order whatever TT is.
template <class D, int TT>
void rows(const float* x, int64_t K, const typename D::Q* qs, const float* sc, int64_t n0, int64_t n1, float* y,
          int64_t ldy) {
    const int64_t nb = K / 32;
    for (int64_t n = n0; n < n1; ++n) {
        const typename D::Q* q = qs + n * nb * D::QB;
        const float* s = sc + n * nb * D::SB;
        float lo_acc[TT][16], hi_acc[TT][16];
        std::memset(lo_acc, 0, sizeof lo_acc);
        std::memset(hi_acc, 0, sizeof hi_acc);
        for (int64_t b = 0; b < nb; ++b) {
            float wlo[16], whi[16];
            D::decode(q + b * D::QB, s + b * D::SB, wlo, whi);
            for (int t = 0; t < TT; ++t) {
                const float* xt = x + t * K + b * 32;
                for (int j = 0; j < 16; ++j) {
                    lo_acc[t][j] += xt[j] * wlo[j];
                    hi_acc[t][j] += xt[16 + j] * whi[j];
                }
            }
        }
        for (int t = 0; t < TT; ++t) {
            float sum = 0.f;
            for (int j = 0; j < 16; ++j) sum += lo_acc[t][j] + hi_acc[t][j];
            y[t * ldy + n] = sum;
        }
    }
}
#endif

// rows<D, tt> for a run-time tt in 1..TT
template <class D, int TT>
inline void rows_of(int64_t tt, const float* x, int64_t K, const typename D::Q* qs, const float* sc, int64_t n0,
                    int64_t n1, float* y, int64_t ldy) {
    if constexpr (TT > 1) {
        if (tt < TT) return rows_of<D, TT - 1>(tt, x, K, qs, sc, n0, n1, y, ldy);
    }
    rows<D, TT>(x, K, qs, sc, n0, n1, y, ldy);
}

// y [T, N] = x [T, K] @ W^T, rows split over threads, tokens in register-sized groups.
template <class D>
void run(const float* x, int64_t T, int64_t K, const typename D::Q* qs, const float* sc, int64_t N, float* y,
         int threads) {
    const int64_t tasks = (N + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
        const int64_t n0 = task * ROWS_PER_TASK;
        const int64_t n1 = n0 + ROWS_PER_TASK < N ? n0 + ROWS_PER_TASK : N;
        // token groups of near-equal size (8 = 4 + 4, not 6 + 2): small groups waste the decodes
        const int64_t groups = (T + MAX_TOKENS - 1) / MAX_TOKENS;
        for (int64_t g = 0, t0 = 0; g < groups; ++g) {
            const int64_t tt = T / groups + (g < T % groups ? 1 : 0);
            const float* xt = x + t0 * K;
            float* yt = y + t0 * N;
            t0 += tt;
            rows_of<D, MAX_TOKENS>(tt, xt, K, qs, sc, n0, n1, yt, N);
        }
    }
}

}  // namespace

extern "C" {

int blockmm_has_avx512() {
#if defined(__AVX512F__)
    return 1;
#else
    return 0;
#endif
}

// Vector width of the block matmul: 512 (AVX-512), 256 (AVX2 + FMA, same bits), 0 (plain C++).
int blockmm_simd() { return BLOCKMM_SIMD; }

void q4_1_mm(const float* x, int64_t T, int64_t K, const uint8_t* qs, const float* dm, int64_t N, float* y,
             int threads) {
    run<Q41>(x, T, K, qs, dm, N, y, threads);
}

void q8_0_mm(const float* x, int64_t T, int64_t K, const int8_t* qs, const float* d, int64_t N, float* y,
             int threads) {
    run<Q80>(x, T, K, qs, d, N, y, threads);
}

}  // extern "C"

// ---------------------------------------------------------------------------------------------
// One whole Llama decoder layer for a short pass (decode or tree verify, batch 1), so that a
// pass costs 30 calls from Python instead of ~800 small torch ops. Same arithmetic as
// specviz/target.py's torch path (RMSNorm, rotary, GQA attention with the tree mask over the
// committed cache, SwiGLU), in fp32; the results agree to ~1e-6 relative.

struct Mat {
    int64_t kind;  // 0 = Q4_1, 1 = Q8_0
    const void* qs;
    const float* scales;
    int64_t n, k;
};

struct LayerArgs {
    Mat wqkv, wo, w13, w2;
    const float* attn_norm;
    const float* mlp_norm;
    double eps;
    int64_t n_heads, n_kv, head_dim, inter;
};

namespace {

void matmul(const Mat& m, const float* x, int64_t T, float* y, int threads) {
    if (m.kind == 0)
        run<Q41>(x, T, m.k, static_cast<const uint8_t*>(m.qs), m.scales, m.n, y, threads);
    else
        run<Q80>(x, T, m.k, static_cast<const int8_t*>(m.qs), m.scales, m.n, y, threads);
}

// exp(x) for float, Cephes' expf (about 1 ulp), written as straight-line arithmetic so that the
// compiler vectorises loops calling it (std::exp stays a scalar libm call without -ffast-math).
inline float exp_approx(float x) {
    x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
    const float n = std::floor(x * 1.44269504088896341f + 0.5f);
    x = x - n * 0.693359375f;
    x = x - n * -2.12194440e-4f;
    float y = 1.9875691500e-4f;
    y = y * x + 1.3981999507e-3f;
    y = y * x + 8.3334519073e-3f;
    y = y * x + 4.1665795894e-2f;
    y = y * x + 1.6666665459e-1f;
    y = y * x + 5.0000001201e-1f;
    y = y * x * x + x + 1.0f;
    const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

#if defined(__AVX512F__)
// exp_approx on 16 lanes: the same operations in the same order, so bit for bit the same values.
inline __m512 exp_approx16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
    const __m512 n = _mm512_roundscale_ps(
        _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _mm512_set1_ps(0.5f)),
        _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    x = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(0.693359375f)));
    x = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(-2.12194440e-4f)));
    __m512 y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_add_ps(_mm512_mul_ps(y, x), _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_add_ps(_mm512_mul_ps(y, x), _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_add_ps(_mm512_mul_ps(y, x), _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_add_ps(_mm512_mul_ps(y, x), _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_add_ps(_mm512_mul_ps(y, x), _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(y, x), x), x), _mm512_set1_ps(1.0f));
    const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(bits));
}
#elif BLOCKMM_SIMD == 256
// exp_approx on 8 lanes (AVX2): the same operations in the same order, so bit for bit the same
// values. Without it an AVX2 CPU ran the softmax and SwiGLU exponentials one at a time.
inline __m256 exp_approx8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    const __m256 n = _mm256_floor_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _mm256_set1_ps(0.5f)));
    x = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693359375f)));
    x = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(-2.12194440e-4f)));
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(y, x), x), x), _mm256_set1_ps(1.0f));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
}
#endif

// p[j] = exp(p[j] - mx), or 0 where p[j] is -inf (a hidden key)
inline void softmax_numerators(float* p, int64_t S, float mx) {
    int64_t j = 0;
#if defined(__AVX512F__)
    const __m512 m = _mm512_set1_ps(mx), ninf = _mm512_set1_ps(-INFINITY);
    for (; j + 16 <= S; j += 16) {
        const __m512 v = _mm512_loadu_ps(p + j);
        const __mmask16 hidden = _mm512_cmp_ps_mask(v, ninf, _CMP_EQ_OQ);
        _mm512_storeu_ps(p + j, _mm512_mask_blend_ps(hidden, exp_approx16(_mm512_sub_ps(v, m)), _mm512_setzero_ps()));
    }
#elif BLOCKMM_SIMD == 256
    const __m256 m = _mm256_set1_ps(mx), ninf = _mm256_set1_ps(-INFINITY);
    for (; j + 8 <= S; j += 8) {
        const __m256 v = _mm256_loadu_ps(p + j);
        const __m256 hidden = _mm256_cmp_ps(v, ninf, _CMP_EQ_OQ);
        _mm256_storeu_ps(p + j, _mm256_blendv_ps(exp_approx8(_mm256_sub_ps(v, m)), _mm256_setzero_ps(), hidden));
    }
#endif
    for (; j < S; ++j) p[j] = p[j] == -INFINITY ? 0.f : exp_approx(p[j] - mx);
}

// act[i] = silu(gate[i]) * up[i], as gate / (1 + exp(-gate)) * up
inline void swiglu(const float* gate, const float* up, float* act, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    const __m512i sign = _mm512_set1_epi32(static_cast<int32_t>(0x80000000u));
    for (; i + 16 <= n; i += 16) {
        const __m512 g = _mm512_loadu_ps(gate + i);
        const __m512 e = exp_approx16(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), sign)));
        _mm512_storeu_ps(act + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)),
                                                _mm512_loadu_ps(up + i)));
    }
#elif BLOCKMM_SIMD == 256
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 e = exp_approx8(_mm256_xor_ps(g, sign));
        _mm256_storeu_ps(act + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)),
                                                _mm256_loadu_ps(up + i)));
    }
#endif
    for (; i < n; ++i) act[i] = gate[i] / (1.0f + exp_approx(-gate[i])) * up[i];
}

#if BLOCKMM_SIMD == 512
// out_q[:hd] += sum over visible keys j in [j0, j1) (in order) of (p_q[j] / sum_q) * v_j for Q queries
// side by side, 16 * NC = hd lanes each in registers for the range. Called over consecutive ranges
// with out zeroed first, each lane adds the same products in the same order as one call over [0, S)
// (the plain loop's sums, so the same bits); a key a query cannot see (p == 0) leaves its sums as
// they are through a masked add. A range of keys read once serves every query of the group (see
// attend_group), and Q x NC independent sums hide the adds' latency that one query's NC chains wait on.
template <int NC, int Q>
inline void weighted_values_q(const float* const* p, int64_t j0, int64_t j1, const float* sum, const float* vals,
                              int64_t hd, float* const* out) {
    __m512 acc[Q][NC];
    for (int q = 0; q < Q; ++q)
        for (int c = 0; c < NC; ++c) acc[q][c] = _mm512_loadu_ps(out[q] + 16 * c);
    alignas(64) float w[Q][16];
    for (int64_t b0 = j0; b0 < j1; b0 += 16) {
        const int64_t n = j1 - b0 < 16 ? j1 - b0 : 16;
        const __mmask16 live = static_cast<__mmask16>((1u << n) - 1);
        bool all_seen = true;  // every query sees every key of the block (p != 0): plain adds
        for (int q = 0; q < Q; ++q) {
            const __m512 pq = _mm512_maskz_loadu_ps(live, p[q] + b0);
            all_seen &= _mm512_mask_cmp_ps_mask(live, pq, _mm512_setzero_ps(), _CMP_NEQ_UQ) == live;
            _mm512_store_ps(w[q], _mm512_div_ps(pq, _mm512_set1_ps(sum[q])));
        }
        if (all_seen) {
            for (int64_t j = b0; j < b0 + n; ++j) {
                const float* v = vals + j * hd;
                __m512 wj[Q];
                for (int q = 0; q < Q; ++q) wj[q] = _mm512_set1_ps(w[q][j - b0]);
                for (int c = 0; c < NC; ++c) {
                    const __m512 vc = _mm512_loadu_ps(v + 16 * c);
                    for (int q = 0; q < Q; ++q) acc[q][c] = _mm512_add_ps(acc[q][c], _mm512_mul_ps(wj[q], vc));
                }
            }
            continue;
        }
        for (int64_t j = b0; j < b0 + n; ++j) {
            __mmask16 seen[Q];
            bool any = false;
            for (int q = 0; q < Q; ++q) {
                seen[q] = p[q][j] == 0.f ? 0 : 0xFFFF;
                any |= seen[q] != 0;
            }
            if (!any) continue;
            __m512 wj[Q];
            for (int q = 0; q < Q; ++q) wj[q] = _mm512_set1_ps(w[q][j - b0]);
            const float* v = vals + j * hd;
            for (int c = 0; c < NC; ++c) {
                const __m512 vc = _mm512_loadu_ps(v + 16 * c);
                for (int q = 0; q < Q; ++q)
                    acc[q][c] = _mm512_mask_add_ps(acc[q][c], seen[q], acc[q][c], _mm512_mul_ps(wj[q], vc));
            }
        }
    }
    for (int q = 0; q < Q; ++q)
        for (int c = 0; c < NC; ++c) _mm512_storeu_ps(out[q] + 16 * c, acc[q][c]);
}

template <int NC>
inline void weighted_values(const float* p, int64_t j0, int64_t j1, float sum, const float* vals, int64_t hd, float* out) {
    weighted_values_q<NC, 1>(&p, j0, j1, &sum, vals, hd, &out);
}
#elif BLOCKMM_SIMD == 256
// the same with 8 lanes a register: NC = hd / 8 (each lane's sum is the plain loop's, so the same bits).
// The weights p[j] / sum are divided 8 keys at a time (a vector division rounds each lane as the
// scalar one does); one scalar division per key and query cost about as much as its multiply-adds.
template <int NC>
inline void weighted_values(const float* p, int64_t j0, int64_t j1, float sum, const float* vals, int64_t hd, float* out) {
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_loadu_ps(out + 8 * c);
    alignas(32) float w[8];
    const __m256 vsum = _mm256_set1_ps(sum);
    for (int64_t b0 = j0; b0 < j1; b0 += 8) {
        const int64_t n = j1 - b0 < 8 ? j1 - b0 : 8;
        if (n == 8)
            _mm256_store_ps(w, _mm256_div_ps(_mm256_loadu_ps(p + b0), vsum));
        else
            for (int64_t k = 0; k < n; ++k) w[k] = p[b0 + k] / sum;
        for (int64_t k = 0; k < n; ++k) {
            if (p[b0 + k] == 0.f) continue;
            const __m256 wj = _mm256_broadcast_ss(w + k);
            const float* v = vals + (b0 + k) * hd;
            for (int c = 0; c < NC; ++c) acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(wj, _mm256_loadu_ps(v + 8 * c)));
        }
    }
    for (int c = 0; c < NC; ++c) _mm256_storeu_ps(out + 8 * c, acc[c]);
}
#endif

// the plain loop of weighted_values for any head size (out in memory)
inline void weighted_values_plain(const float* p, int64_t j0, int64_t j1, float sum, const float* vals, int64_t hd,
                                  float* out) {
    for (int64_t j = j0; j < j1; ++j) {
        if (p[j] == 0.f) continue;
        const float w = p[j] / sum;
        const float* v = vals + j * hd;
        for (int64_t d = 0; d < hd; ++d) out[d] += w * v[d];
    }
}

// sum of a[i] * b[i] in 16 independent lanes (vectorisable without reordering any lane's sum)
inline float dot16(const float* a, const float* b, int64_t n) {
    float lanes[16] = {0.f};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; ++l) lanes[l] += a[i + l] * b[i + l];
    float s = 0.f;
    for (; i < n; ++i) s += a[i] * b[i];
    for (int l = 0; l < 16; ++l) s += lanes[l];
    return s;
}

#if defined(__AVX512F__)
// r[l] = column l of the 16 x 16 matrix whose rows are r[0..15] (four shuffle stages).
inline void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // u[4i + c], 128-bit block k: column 4k + c of rows 4i..4i+3
    for (int i = 0; i < 4; ++i) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int c = 0; c < 4; ++c) {
        const __m512 a01 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44), a23 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xEE);
        const __m512 b01 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44);
        const __m512 b23 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xEE);
        t[c] = _mm512_shuffle_f32x4(a01, b01, 0x88);
        t[4 + c] = _mm512_shuffle_f32x4(a01, b01, 0xDD);
        t[8 + c] = _mm512_shuffle_f32x4(a23, b23, 0x88);
        t[12 + c] = _mm512_shuffle_f32x4(a23, b23, 0xDD);
    }
    for (int i = 0; i < 16; ++i) r[i] = t[i];
}
#endif

// out[j] = dot16(q, keys + j * n, n) * scale for 16 keys, n a multiple of 16. With AVX-512 the 16
// keys' lane sums are transposed so that the 16 serial additions of each key run side by side
// (same additions in the same order as dot16, so the same numbers).
#if BLOCKMM_SIMD == 256
// r[l] = column l of the 8 x 8 matrix whose rows are r[0..7]
inline void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; ++i) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; ++i) {
        r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
        r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
    }
}
#endif

#if BLOCKMM_SIMD == 256
// out[j] = scale * (sum of lanes 0..7 of lo[j], then of hi[j], one by one) for 8 keys: their lane sums
// transposed so that the 16 serial additions of the 8 keys run side by side (dot16's order)
inline void store_key_sums8(__m256 lo[8], __m256 hi[8], float scale, float* out) {
    transpose8(lo);
    transpose8(hi);
    __m256 s = _mm256_setzero_ps();
    for (int l = 0; l < 8; ++l) s = _mm256_add_ps(s, lo[l]);
    for (int l = 0; l < 8; ++l) s = _mm256_add_ps(s, hi[l]);
    _mm256_storeu_ps(out, _mm256_mul_ps(s, _mm256_set1_ps(scale)));
}

// dot16_keys for 8 keys of C * 16 floats, C fixed: the query stays in 2 C registers for all 8 keys
// (the loop over a run-time n loaded it again for every key: twice the loads of the keys).
template <int C>
inline void dot16_keys8(const float* q, const float* keys, float scale, float* out) {
    __m256 ql[C], qh[C];
    for (int c = 0; c < C; ++c) {
        ql[c] = _mm256_loadu_ps(q + 16 * c);
        qh[c] = _mm256_loadu_ps(q + 16 * c + 8);
    }
    __m256 lo[8], hi[8];
    for (int j = 0; j < 8; ++j) {
        const float* k = keys + j * 16 * C;
        __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
        for (int c = 0; c < C; ++c) {
            a = _mm256_add_ps(a, _mm256_mul_ps(ql[c], _mm256_loadu_ps(k + 16 * c)));
            b = _mm256_add_ps(b, _mm256_mul_ps(qh[c], _mm256_loadu_ps(k + 16 * c + 8)));
        }
        lo[j] = a;
        hi[j] = b;
    }
    store_key_sums8(lo, hi, scale, out);
}
#endif

#if defined(__AVX512F__)
// out[j] = scale * (lanes 0..15 of lanes[j] added one by one) for 16 keys: their lane sums transposed so
// that the 16 serial additions of the 16 keys run side by side (dot16's order)
inline void store_key_sums16(__m512 lanes[16], float scale, float* out) {
    transpose16(lanes);
    __m512 s = _mm512_setzero_ps();
    for (int l = 0; l < 16; ++l) s = _mm512_add_ps(s, lanes[l]);
    _mm512_storeu_ps(out, _mm512_mul_ps(s, _mm512_set1_ps(scale)));
}

// dot16_keys for 16 keys of C * 16 floats, C fixed: the query stays in C registers and each key's C
// products are unrolled (the loop over a run-time n loaded the query again for every key and ran
// each key's chain of additions as a loop: a pass's extra tokens spent more on scores than on weights).
template <int C>
inline void dot16_keys16(const float* q, const float* keys, float scale, float* out) {
    __m512 qv[C];
    for (int c = 0; c < C; ++c) qv[c] = _mm512_loadu_ps(q + 16 * c);
    __m512 lanes[16];
    for (int j = 0; j < 16; ++j) {
        const float* k = keys + j * 16 * C;
        __m512 acc = _mm512_setzero_ps();  // 0 + a*b first, as dot16
        for (int c = 0; c < C; ++c) acc = _mm512_add_ps(acc, _mm512_mul_ps(qv[c], _mm512_loadu_ps(k + 16 * c)));
        lanes[j] = acc;
    }
    store_key_sums16(lanes, scale, out);
}
#endif

inline void dot16_keys(const float* q, const float* keys, int64_t n, float scale, float* out) {
#if BLOCKMM_SIMD == 256
    if (n == 64) {  // head size 64 (SmolLM2, most small Llamas)
        dot16_keys8<4>(q, keys, scale, out);
        dot16_keys8<4>(q, keys + 8 * n, scale, out + 8);
        return;
    }
    if (n == 128) {
        dot16_keys8<8>(q, keys, scale, out);
        dot16_keys8<8>(q, keys + 8 * n, scale, out + 8);
        return;
    }
    // 8 keys at a time: lanes 0-7 and 8-15 of each key's sums, transposed, then added serially
    // lane by lane (0..15) for the 8 keys side by side: dot16's additions, dot16's order
    for (int j0 = 0; j0 < 16; j0 += 8) {
        __m256 lo[8], hi[8];
        for (int j = 0; j < 8; ++j) {
            const float* k = keys + (j0 + j) * n;
            __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
            for (int64_t i = 0; i < n; i += 16) {
                a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i)));
                b = _mm256_add_ps(b, _mm256_mul_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(k + i + 8)));
            }
            lo[j] = a;
            hi[j] = b;
        }
        store_key_sums8(lo, hi, scale, out + j0);
    }
#elif defined(__AVX512F__)
    if (n == 64) {
        dot16_keys16<4>(q, keys, scale, out);
        return;
    }
    if (n == 128) {
        dot16_keys16<8>(q, keys, scale, out);
        return;
    }
    __m512 lanes[16];
    for (int j = 0; j < 16; ++j) {
        const float* k = keys + j * n;
        __m512 acc = _mm512_setzero_ps();  // 0 + a*b first, as dot16 (keeps the sign of a zero sum)
        for (int64_t i = 0; i < n; i += 16)
            acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(k + i)));
        lanes[j] = acc;
    }
    store_key_sums16(lanes, scale, out);
#else
    for (int j = 0; j < 16; ++j) out[j] = dot16(q, keys + j * n, n) * scale;
#endif
}

void rms_norm_rows(const float* x, const float* w, float eps, int64_t T, int64_t H, float* out) {
    for (int64_t t = 0; t < T; ++t) {
        const float* r = x + t * H;
        const float ss = dot16(r, r, H);
        const float inv = 1.0f / std::sqrt(ss / static_cast<float>(H) + eps);
        for (int64_t i = 0; i < H; ++i) out[t * H + i] = w[i] * (r[i] * inv);
    }
}

void rotate(float* v, const float* cos, const float* sin, int64_t half) {
    for (int64_t d = 0; d < half; ++d) {
        const float x1 = v[d], x2 = v[d + half];
        v[d] = x1 * cos[d] - x2 * sin[d];
        v[d + half] = x2 * cos[d + half] + x1 * sin[d + half];
    }
}

// The largest of S scores: the value a serial `p[j] > mx` scan finds (scores are never NaN), 16 lanes
// at a time (the scan was a chain of S dependent maxima).
inline float max_of(const float* p, int64_t S) {
    float mx = -INFINITY;
    int64_t j = 0;
#if defined(__AVX512F__)
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (; j + 16 <= S; j += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(p + j));
    mx = _mm512_reduce_max_ps(m);
#elif BLOCKMM_SIMD == 256
    __m256 m = _mm256_set1_ps(-INFINITY);
    for (; j + 8 <= S; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(p + j));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m);
    for (float v : lanes) mx = v > mx ? v : mx;
#endif
    for (; j < S; ++j) mx = p[j] > mx ? p[j] : mx;
    return mx;
}

// sums[i] = p_i[0] + p_i[1] + ... in key order (the softmax denominators, each a serial chain so that
// every query gets the bits it gets alone), up to four rows side by side so their chains overlap
// (a task of one to three queries ran them one chain at a time).
template <int R>
inline void serial_sums_r(const float* rows, int64_t S, float* sums) {
    float s[R] = {};
    for (int64_t j = 0; j < S; ++j)
        for (int r = 0; r < R; ++r) s[r] += rows[r * S + j];
    for (int r = 0; r < R; ++r) sums[r] = s[r];
}

// sums[r] = p_r[0] + p_r[1] + ... in double, in index order, for G rows N floats apart: the chains run
// side by side (one row's chain of dependent additions waits on each add's latency)
template <int G>
inline void serial_sums_double(const float* rows, int64_t N, double* sums) {
    double s[G] = {};
    for (int64_t i = 0; i < N; ++i)
        for (int r = 0; r < G; ++r) s[r] += rows[r * N + i];
    for (int r = 0; r < G; ++r) sums[r] = s[r];
}

inline void serial_sums(const float* rows, int64_t n, int64_t S, float* sums) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) serial_sums_r<4>(rows + i * S, S, sums + i);
    if (n - i == 3) serial_sums_r<3>(rows + i * S, S, sums + i);
    if (n - i == 2) serial_sums_r<2>(rows + i * S, S, sums + i);
    if (n - i == 1) serial_sums_r<1>(rows + i * S, S, sums + i);
}

// Attention of queries [i0, i1) of kv group g, query i = token i % T of head g * rep + i / T:
// softmax(q k^T * scale) v over the S cached keys of the group, hidden keys masked as in layer_seqs.
// Every query's numbers are those of computing it alone (same operations, same order); only the
// loops are interchanged so that each block of keys (and of values) is read from memory once and
// used from L1 by all the queries.
void attend_group(const float* qkv, int64_t W, int64_t T, int64_t g, int64_t rep, int64_t i0, int64_t i1, int64_t hd,
                  int64_t qd, const float* keys, const float* vals, int64_t S, int64_t L, int64_t offset,
                  const uint8_t* mask, int64_t mw, float scale, float* att) {
    const int64_t n = i1 - i0;
    if (n <= 0) return;
    std::vector<float> scores(n * S), sums(n);
    std::vector<const float*> qs(n);
    std::vector<float*> outs(n);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t head = g * rep + (i0 + i) / T, t = (i0 + i) % T;
        qs[i] = qkv + t * W + head * hd;
        outs[i] = att + t * qd + head * hd;
    }
    // every key's score (16 keys at a time; this pass's keys are already in the cache)
    int64_t j0 = 0;
    if (hd % 16 == 0)
        for (; j0 + 16 <= S; j0 += 16)
            for (int64_t i = 0; i < n; ++i) dot16_keys(qs[i], keys + j0 * hd, hd, scale, scores.data() + i * S + j0);
    for (int64_t i = 0; i < n; ++i) {
        float* p = scores.data() + i * S;
        const int64_t t = (i0 + i) % T;
        for (int64_t j = j0; j < S; ++j) p[j] = dot16(qs[i], keys + j * hd, hd) * scale;
        // -inf for the pass's keys this token may not see
        for (int64_t j = L; j < S; ++j)
            if (!(mask ? mask[t * mw + (j - L)] != 0 : j - L <= offset + t)) p[j] = -INFINITY;
        softmax_numerators(p, S, max_of(p, S));
        for (int64_t d = 0; d < hd; ++d) outs[i][d] = 0.f;
    }
    serial_sums(scores.data(), n, S, sums.data());
    // the weighted values, 32 keys at a time (8 KB of values at hd 64, kept in L1 for all queries)
    constexpr int64_t KEYS_PER_STEP = 32;
    for (int64_t b0 = 0; b0 < S; b0 += KEYS_PER_STEP) {
        const int64_t b1 = b0 + KEYS_PER_STEP < S ? b0 + KEYS_PER_STEP : S;
        int64_t i = 0;
#if BLOCKMM_SIMD == 512
        // queries three (hd 64) or two at a time, the last one alone
        const float* ps[3];
        const int64_t width = hd == 64 ? 3 : hd == 128 ? 2 : 1;
        while (width > 1 && n - i >= 2) {
            const int64_t q = n - i < width ? n - i : width;
            for (int64_t r = 0; r < q; ++r) ps[r] = scores.data() + (i + r) * S;
            if (hd == 128)
                weighted_values_q<8, 2>(ps, b0, b1, sums.data() + i, vals, hd, outs.data() + i);
            else if (q == 3)
                weighted_values_q<4, 3>(ps, b0, b1, sums.data() + i, vals, hd, outs.data() + i);
            else
                weighted_values_q<4, 2>(ps, b0, b1, sums.data() + i, vals, hd, outs.data() + i);
            i += q;
        }
#endif
        for (; i < n; ++i) {
            const float* p = scores.data() + i * S;
#if BLOCKMM_SIMD
            constexpr int lanes = BLOCKMM_SIMD == 512 ? 16 : 8;
            if (hd == 64) {
                weighted_values<64 / lanes>(p, b0, b1, sums[i], vals, hd, outs[i]);
                continue;
            }
            if (hd == 128) {
                weighted_values<128 / lanes>(p, b0, b1, sums[i], vals, hd, outs[i]);
                continue;
            }
#endif
            weighted_values_plain(p, b0, b1, sums[i], vals, hd, outs[i]);
        }
    }
}

// One sequence's share of a pass: its T rows (consecutive in x), the L committed entries and
// `offset` uncommitted ones of its own cache before them, and its mask (see layer_seqs).
struct Seq {
    int64_t T, L, offset;
    const uint8_t* mask;
    float* kcache;
    float* vcache;
    int64_t max_len;
};

// The decoder layer behind layer_forward, head_layer_forward and layers_forward_batch, for the rows
// of n_seq sequences side by side: the norms and matrix products run once over all rows (each
// weight read once for the batch), each sequence attends only to its own cache and its own rows
// (the block-diagonal mask of a batch of trees). Every row's numbers are those of its sequence's
// pass alone: the matmul sums each (row, token) in the same order whatever the row count, and a
// query's attention never reads another sequence. attn_in: the attention's input [rows, wqkv.k], or
// null for rms_norm(x) (a Llama layer). offset: uncommitted entries already in the cache after the L
// committed ones (a draft tree's earlier levels); the pass's keys/values go to
// [L + offset, L + offset + T) and mask is [T, offset + T] (row t = which of those entries token t
// may see), or null for "all of them up to its own". offset = 0 is the target's pass.
void layer_seqs(const LayerArgs* a, float* x, const float* attn_in, const Seq* seqs, int64_t n_seq, const float* cos,
                const float* sin, float* work, int threads) {
    const int64_t H = a->wo.n, hd = a->head_dim, nh = a->n_heads, nkv = a->n_kv, I = a->inter;
    const int64_t qd = nh * hd, kvd = nkv * hd, W = qd + 2 * kvd, rep = nh / nkv;
    int64_t T = 0;  // rows of the whole pass
    for (int64_t s = 0; s < n_seq; ++s) T += seqs[s].T;
    float* h = work;
    float* qkv = h + T * H;
    float* att = qkv + T * W;
    float* gu = att + T * qd;
    float* act = gu + T * 2 * I;
    const float eps = static_cast<float>(a->eps);

    if (attn_in) {
        matmul(a->wqkv, attn_in, T, qkv, threads);
    } else {
        rms_norm_rows(x, a->attn_norm, eps, T, H, h);
        matmul(a->wqkv, h, T, qkv, threads);
    }
    struct Task { int64_t s, r0, g, i0, i1; };
    std::vector<Task> tasks;
    for (int64_t s = 0, r0 = 0; s < n_seq; r0 += seqs[s].T, ++s) {
        const Seq& q = seqs[s];
        const int64_t P = q.L + q.offset;
        for (int64_t t = 0; t < q.T; ++t) {
            float* row = qkv + (r0 + t) * W;
            for (int64_t g = 0; g < nh + nkv; ++g) rotate(row + g * hd, cos + (r0 + t) * hd, sin + (r0 + t) * hd, hd / 2);
            for (int64_t g = 0; g < nkv; ++g) {
                std::memcpy(q.kcache + (g * q.max_len + P + t) * hd, row + qd + g * hd, hd * sizeof(float));
                std::memcpy(q.vcache + (g * q.max_len + P + t) * hd, row + qd + kvd + g * hd, hd * sizeof(float));
            }
        }
        // tasks = (kv group, a contiguous share of its rep * T queries): each task reads its group's
        // keys and values once for all its queries, instead of once per (head, token) (the cache of a
        // long context does not fit in L2, so a pass of T tokens read it 3 T times). At least `threads`
        // shares per group keep every thread busy; which task a query lands in changes no number.
        const int64_t nq = rep * q.T;
        int64_t shares = threads < 1 ? 1 : threads;
        if (shares > nq) shares = nq;
        for (int64_t g = 0; g < nkv; ++g)
            for (int64_t c = 0; c < shares; ++c) tasks.push_back({s, r0, g, c * nq / shares, (c + 1) * nq / shares});
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const int64_t n_tasks = static_cast<int64_t>(tasks.size());
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n_tasks; ++i) {
        const Task& k = tasks[i];
        const Seq& q = seqs[k.s];
        attend_group(qkv + k.r0 * W, W, q.T, k.g, rep, k.i0, k.i1, hd, qd, q.kcache + k.g * q.max_len * hd,
                     q.vcache + k.g * q.max_len * hd, q.L + q.offset + q.T, q.L, q.offset, q.mask, q.offset + q.T,
                     scale, att + k.r0 * qd);
    }
    matmul(a->wo, att, T, h, threads);
    for (int64_t i = 0; i < T * H; ++i) x[i] += h[i];
    rms_norm_rows(x, a->mlp_norm, eps, T, H, h);
    matmul(a->w13, h, T, gu, threads);
    for (int64_t t = 0; t < T; ++t) {
        const float* gate = gu + t * 2 * I;
        const float* up = gate + I;
        swiglu(gate, up, act + t * I, I);
    }
    matmul(a->w2, act, T, h, threads);
    for (int64_t i = 0; i < T * H; ++i) x[i] += h[i];
}

// layer_seqs for one sequence
void layer_impl(const LayerArgs* a, float* x, const float* attn_in, int64_t T, int64_t L, int64_t offset,
                const float* cos, const float* sin, const uint8_t* mask, float* kcache, float* vcache, int64_t max_len,
                float* work, int threads) {
    const Seq one{T, L, offset, mask, kcache, vcache, max_len};
    layer_seqs(a, x, attn_in, &one, 1, cos, sin, work, threads);
}

}  // namespace

extern "C" {

// x [T, H] is updated in place. cos/sin [T, head_dim]. kcache/vcache: this layer's
// [n_kv, max_len, head_dim]; the pass's keys/values are written at [L, L+T). mask [T, T] (uint8,
// row t = which of the pass's tokens t may see; the committed L entries are always visible) or
// null for causal. work: at least T * (H + (n_heads + 2 n_kv) head_dim + n_heads head_dim + 3 inter) floats.
void layer_forward(const LayerArgs* a, float* x, int64_t T, int64_t L, const float* cos, const float* sin,
                   const uint8_t* mask, float* kcache, float* vcache, int64_t max_len, float* work, int threads) {
    layer_impl(a, x, nullptr, T, L, 0, cos, sin, mask, kcache, vcache, max_len, work, threads);
}

// A draft head's layer (EAGLE-1/3) for one drafting pass: the attention reads attn_in [T, wqkv.k]
// (EAGLE-3: cat(norm(embedding), norm(feature)), 2H wide; EAGLE-1: x itself, no norm) and the
// residual stream is x [T, H] (updated in place); `offset` tree entries of earlier levels sit
// uncommitted after the L committed ones and mask [T, offset + T] says which of them (and of this
// pass) each token sees (null: all earlier, then causal). One call instead of ~25 small torch ops
// per tree level. Same work-buffer size as layer_forward.
void head_layer_forward(const LayerArgs* a, float* x, const float* attn_in, int64_t T, int64_t L, int64_t offset,
                        const float* cos, const float* sin, const uint8_t* mask, float* kcache, float* vcache,
                        int64_t max_len, float* work, int threads) {
    layer_impl(a, x, attn_in, T, L, offset, cos, sin, mask, kcache, vcache, max_len, work, threads);
}

// A draft head (EAGLE-1 or EAGLE-3) and the target weights it borrows, for draft_level.
struct DraftArgs {
    LayerArgs layer;           // the head's decoder layer (attn_norm unused: the input comes normed)
    const float* embed;        // the target's embedding [vocab, H], fp32
    int64_t eagle3;            // 1: EAGLE-3's input; 0: EAGLE-1's fc over cat(embedding, feature)
    Mat fc;                    // EAGLE-1: [H, 2H]
    const float* fc_bias;      // EAGLE-1: [H] or null
    const float* input_norm;   // EAGLE-3: RMSNorm of the embedding
    const float* hidden_norm;  // EAGLE-3: RMSNorm of the feature
    const float* final_norm;   // EAGLE-3: RMSNorm before the LM head; null: none (EAGLE-1)
    Mat lm;                    // the LM head [N, H]: EAGLE-3's draft vocabulary, or the target's own
    const int64_t* lm_ids;     // target id of LM row r (EAGLE-3's draft vocabulary); null: r itself
};

namespace {

// The k largest of p[0..n) in descending order (ties: the lower index first), ids mapped by `ids`.
void top_k_row(const float* p, int64_t n, int64_t k, const int64_t* ids, float* vals, int64_t* idx) {
    for (int64_t j = 0; j < k; ++j) { vals[j] = -INFINITY; idx[j] = 0; }
    for (int64_t i = 0; i < n; ++i) {
        const float v = p[i];
        if (!(v > vals[k - 1])) continue;
        int64_t j = k - 1;
        while (j > 0 && v > vals[j - 1]) { vals[j] = vals[j - 1]; idx[j] = idx[j - 1]; --j; }
        vals[j] = v;
        idx[j] = i;
    }
    for (int64_t j = 0; j < k; ++j) {
        if (vals[j] == -INFINITY) vals[j] = 0.f;
        idx[j] = ids ? ids[idx[j]] : idx[j];
    }
}

// Row r: scores / temperature (unless it is 0 or 1), softmax in place, then its top k. Each thread
// takes up to four consecutive rows and sums their numerators side by side; every row's numbers are
// those of doing it alone.
void softmax_top(float* probs, int64_t R, int64_t N, float temperature, int64_t k, const int64_t* ids, float* top_v,
                 int64_t* top_i, int threads) {
    const int64_t per_thread = (R + threads - 1) / (threads < 1 ? 1 : threads);
    const int64_t G = per_thread < 1 ? 1 : per_thread > 4 ? 4 : per_thread;
    const int64_t groups = (R + G - 1) / G;
#pragma omp parallel for num_threads(groups > 1 ? threads : 1) schedule(static)
    for (int64_t g = 0; g < groups; ++g) {
        const int64_t r0 = g * G, n = R - r0 < G ? R - r0 : G;
        float* rows = probs + r0 * N;
        for (int64_t r = 0; r < n; ++r) {
            float* p = rows + r * N;
            if (temperature != 0.f && temperature != 1.f)
                for (int64_t i = 0; i < N; ++i) p[i] = p[i] / temperature;
            softmax_numerators(p, N, max_of(p, N));
        }
        double sums[4];  // a draft distribution: the sum's order only moves q by an ulp, but it is kept
        if (n == 4) serial_sums_double<4>(rows, N, sums);
        if (n == 3) serial_sums_double<3>(rows, N, sums);
        if (n == 2) serial_sums_double<2>(rows, N, sums);
        if (n == 1) serial_sums_double<1>(rows, N, sums);
        for (int64_t r = 0; r < n; ++r) {
            float* p = rows + r * N;
            const float inv = static_cast<float>(1.0 / sums[r]);
            for (int64_t i = 0; i < N; ++i) p[i] *= inv;
            if (k > 0) top_k_row(p, N, k, ids, top_v + (r0 + r) * k, top_i + (r0 + r) * k);
        }
    }
}

}  // namespace

// One level of a draft tree in one call: the head's input for T new entries (token t's target
// embedding and the feature hidden_rows[t]), its decoder layer over the committed cache plus
// `offset` uncommitted tree entries (mask as head_layer_forward), out [T, H] = the head's outputs,
// and for the last R of them the draft distribution probs [R, N] (softmax of the LM head's logits,
// divided by `temperature` unless 0 or 1) with its k largest entries top_v/top_i [R, k] (target ids).
// positions[t] picks row positions[t] of the rotary tables cos_table/sin_table [*, head_dim].
// Per tree level this replaces ~40 small torch ops and Python steps (norms, concatenations, rotary,
// logits, softmax, top-k), which cost several times the level's multiply-adds on a CPU.
// work: at least T * (layer work of head_layer_forward + 5 H + 2 head_dim) floats.
void draft_level(const DraftArgs* a, const int64_t* tokens, const float* const* hidden_rows, const int64_t* positions,
                 int64_t T, int64_t L, int64_t offset, const float* cos_table, const float* sin_table,
                 const uint8_t* mask, float* kcache, float* vcache, int64_t max_len, float* out, int64_t R,
                 float temperature, float* probs, int64_t k, float* top_v, int64_t* top_i, float* work, int threads) {
    const LayerArgs& la = a->layer;
    const int64_t H = la.wo.n, hd = la.head_dim, I = la.inter;
    const int64_t W = (la.n_heads + 2 * la.n_kv) * hd;
    const float eps = static_cast<float>(la.eps);
    float* layer_work = work;
    float* in = layer_work + T * (H + W + la.n_heads * hd + 3 * I);  // [T, 2H]: the attention's (or fc's) input
    float* normed = in + T * 2 * H;                                 // [T, H]
    float* cs = normed + T * H;                                     // [T, hd] cos, then [T, hd] sin
    float* sn = cs + T * hd;
    for (int64_t t = 0; t < T; ++t) {
        std::memcpy(cs + t * hd, cos_table + positions[t] * hd, hd * sizeof(float));
        std::memcpy(sn + t * hd, sin_table + positions[t] * hd, hd * sizeof(float));
        const float* e = a->embed + tokens[t] * H;
        if (a->eagle3) {  // attention input cat(norm(embedding), norm(feature)); residual = the feature
            rms_norm_rows(e, a->input_norm, eps, 1, H, in + t * 2 * H);
            rms_norm_rows(hidden_rows[t], a->hidden_norm, eps, 1, H, in + t * 2 * H + H);
            std::memcpy(out + t * H, hidden_rows[t], H * sizeof(float));
        } else {
            std::memcpy(in + t * 2 * H, e, H * sizeof(float));
            std::memcpy(in + t * 2 * H + H, hidden_rows[t], H * sizeof(float));
        }
    }
    if (!a->eagle3) {  // x = fc(cat(embedding, feature)) (+ bias) is the residual and the attention's input
        matmul(a->fc, in, T, out, threads);
        if (a->fc_bias)
            for (int64_t t = 0; t < T; ++t)
                for (int64_t i = 0; i < H; ++i) out[t * H + i] += a->fc_bias[i];
    }
    layer_impl(&la, out, a->eagle3 ? in : out, T, L, offset, cs, sn, mask, kcache, vcache, max_len, layer_work, threads);
    if (R <= 0) return;
    const float* last = out + (T - R) * H;
    if (a->final_norm) {
        rms_norm_rows(last, a->final_norm, eps, R, H, normed);
        last = normed;
    }
    matmul(a->lm, last, R, probs, threads);
    softmax_top(probs, R, a->lm.n, temperature, k, a->lm_ids, top_v, top_i, threads);
}

// Rows of logits [R, N] made draft distributions in place (divided by `temperature` unless 0 or 1,
// softmax) with each row's k largest entries top_v/top_i [R, k] (ids mapped by `ids` when not null):
// Medusa's heads, whose logits come from the block matmul, in one call instead of three torch ops.
void softmax_top_rows(float* probs, int64_t R, int64_t N, float temperature, int64_t k, const int64_t* ids,
                      float* top_v, int64_t* top_i, int threads) {
    softmax_top(probs, R, N, temperature, k, ids, top_v, top_i, threads);
}

// A whole chosen (not drawn) draft tree's expansion in one call: the commit of T0 entries (draft_level with
// the committed cache of L entries, R = 1 for the root) and then the levels of EAGLE-2's dynamic
// tree exactly as specviz/tree.py's build_dynamic_tree grows them (which this replaces when the
// drafting kernel serves a dynamic tree whose drafts are chosen, greedy or draw="top"): each level's candidates are the `width` largest
// entries of each frontier row, scored by their parent's score + log(q) in double (the same libm
// log as Python's math.log); the next frontier is the `width` best new candidates (equal scores:
// the earlier candidate first, as heapq.nlargest keeps them) whose score is >= floor, in candidate
// order; their entries go after the T0 committed ones, each seeing its ancestors and itself. At
// most `depth` levels of candidates (depth - 1 drafting levels after the commit's).
// Why: per level the Python loop (masks, scores, a heap, the ctypes call) cost about as much as
// the level's arithmetic for the one- or two-node frontiers of a tuned tree.
// Outputs: probs [rows, N], top_v / top_i [rows, k] (row 0: the root's; then each expanded
// candidate's); per candidate c (c = 0 the root) c_score, c_parent, c_token, c_prob and c_row (its
// row of probs, or -1 if it was not expanded). Returns the number of candidates. Sizes the caller
// provides: rows <= 1 + width (depth - 1), candidates <= 1 + width^2 depth, the cache room for
// L + T0 + width (depth - 1) entries, work >= max(T0, width) * (draft_level's work per token) +
// (T0 + width depth) * H floats.
int64_t draft_tree(const DraftArgs* a, const int64_t* commit_tokens, const float* const* commit_rows,
                   const int64_t* commit_positions, int64_t T0, int64_t L, int64_t root, int64_t base_position,
                   const float* cos_table, const float* sin_table, float* kcache, float* vcache, int64_t max_len,
                   float temperature, int64_t k, int64_t width, int64_t depth, double floor, float* probs,
                   float* top_v, int64_t* top_i, double* c_score, int64_t* c_parent, int64_t* c_token,
                   float* c_prob, int64_t* c_row, float* work, int64_t level_work, int threads) {
    const int64_t H = a->layer.wo.n, N = a->lm.n;
    float* outs = work + level_work;  // [T0 + expanded entries, H]: the commit's outputs, then each entry's
    draft_level(a, commit_tokens, commit_rows, commit_positions, T0, L, 0, cos_table, sin_table, nullptr, kcache,
                vcache, max_len, outs, 1, temperature, probs, k, top_v, top_i, work, threads);
    const int64_t L1 = L + T0;  // the commit's entries are committed: the tree's go after them
    std::vector<const float*> hidden_of{outs + (T0 - 1) * H};  // candidate -> its output (expanded ones)
    std::vector<int64_t> slot_of{-1};                          // candidate -> its tree entry (-1: none)
    int64_t n_cand = 1, rows = 1, entries = 0;
    c_score[0] = 0.0;
    c_parent[0] = -1;
    c_token[0] = root;
    c_prob[0] = 1.0f;
    c_row[0] = 0;
    std::vector<int64_t> frontier{0}, fresh, best, tokens, positions;
    std::vector<const float*> inputs;
    std::vector<uint8_t> mask;
    for (int64_t level = 0; level < depth; ++level) {
        if (level > 0) {  // the frontier's entries: one draft_level call for all of them
            const int64_t T = static_cast<int64_t>(frontier.size()), width_all = entries + T;
            tokens.assign(T, 0);
            positions.assign(T, 0);
            inputs.assign(T, nullptr);
            mask.assign(T * width_all, 0);
            for (int64_t r = 0; r < T; ++r) {
                const int64_t c = frontier[r];
                tokens[r] = c_token[c];
                positions[r] = base_position + level;
                inputs[r] = hidden_of[c_parent[c]];
                for (int64_t p = c_parent[c]; p > 0; p = c_parent[p]) mask[r * width_all + slot_of[p]] = 1;
                mask[r * width_all + entries + r] = 1;
            }
            float* out = outs + (T0 + entries) * H;
            draft_level(a, tokens.data(), inputs.data(), positions.data(), T, L1, entries, cos_table, sin_table,
                        mask.data(), kcache, vcache, max_len, out, T, temperature, probs + rows * N, k,
                        top_v + rows * k, top_i + rows * k, work, threads);
            for (int64_t r = 0; r < T; ++r) {
                const int64_t c = frontier[r];
                hidden_of[c] = out + r * H;
                slot_of[c] = entries + r;
                c_row[c] = rows + r;
            }
            entries += T;
            rows += T;
        }
        fresh.clear();
        for (const int64_t c : frontier) {
            const float* v = top_v + c_row[c] * k;
            const int64_t* ids = top_i + c_row[c] * k;
            for (int64_t j = 0; j < width; ++j) {
                if (!(v[j] > 0.f)) continue;
                c_score[n_cand] = c_score[c] + std::log(static_cast<double>(v[j]));
                c_parent[n_cand] = c;
                c_token[n_cand] = ids[j];
                c_prob[n_cand] = v[j];
                c_row[n_cand] = -1;
                hidden_of.push_back(nullptr);
                slot_of.push_back(-1);
                fresh.push_back(n_cand++);
            }
        }
        if (fresh.empty()) break;
        best = fresh;
        std::stable_sort(best.begin(), best.end(), [&](int64_t x, int64_t y) { return c_score[x] > c_score[y]; });
        if (static_cast<int64_t>(best.size()) > width) best.resize(width);
        best.erase(std::remove_if(best.begin(), best.end(), [&](int64_t c) { return !(c_score[c] >= floor); }), best.end());
        if (best.empty()) break;
        std::sort(best.begin(), best.end());
        frontier = best;
    }
    return n_cand;
}

// All n_layers decoder layers of one pass in one call, for n_seq sequences side by side (a solo
// pass is n_seq = 1; a batch of speculative rounds more): sequence s has T[s] consecutive rows of x,
// its own cache (layer i at kcache[s] / vcache[s] + i * layer_stride[s], max_len[s] entries a head,
// L[s] committed) and its own mask masks[s] [T[s], T[s]] (null: causal). cos/sin [rows, head_dim];
// taps[i] (when taps and taps[i] are not null) receives x [rows, H] as it enters layer i. Each row
// comes out as in its sequence's pass alone (layer_seqs). work: as layer_forward for all the rows.
// One call instead of one per layer: a ctypes call hands the GIL back on return, and on a server
// whose other threads run Python each hand-back can wait up to the interpreter's switch interval.
void layers_forward_batch(const LayerArgs* const* layers, int64_t n_layers, float* x, int64_t n_seq, const int64_t* T,
                          const int64_t* L, const float* cos, const float* sin, const uint8_t* const* masks,
                          float* const* kcache, float* const* vcache, const int64_t* layer_stride, const int64_t* max_len,
                          float* work, int threads, float* const* taps) {
    std::vector<Seq> seqs(n_seq);
    int64_t rows = 0;
    for (int64_t s = 0; s < n_seq; ++s) rows += T[s];
    for (int64_t i = 0; i < n_layers; ++i) {
        if (taps && taps[i]) std::memcpy(taps[i], x, rows * layers[i]->wo.n * sizeof(float));
        for (int64_t s = 0; s < n_seq; ++s)
            seqs[s] = {T[s], L[s], 0, masks ? masks[s] : nullptr, kcache[s] + i * layer_stride[s],
                       vcache[s] + i * layer_stride[s], max_len[s]};
        layer_seqs(layers[i], x, nullptr, seqs.data(), n_seq, cos, sin, work, threads);
    }
}

// Each of `rows` rows of n floats sorted ascending into out (values only): an LSD radix sort on
// the floats' bits (3 passes of 11, 11 and 10 bits), ~10x faster than numpy's sort for a 49k-entry
// vocabulary row. Top-p needs the ascending values of every warped row (specviz.sampling). A sort
// orders values, so the output equals any other sort's, except that -0.0 comes before +0.0 (equal
// values: the same sums) and NaNs with the sign bit set come first (callers check for NaN).
void sort_rows_f32(const float* in, float* out, int64_t rows, int64_t n, int threads) {
#pragma omp parallel num_threads(threads)
    {
        std::vector<uint32_t> a(n), b(n);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const uint32_t* src = reinterpret_cast<const uint32_t*>(in + r * n);
            uint32_t count[3][2048] = {};
            for (int64_t i = 0; i < n; ++i) {  // keys that order like the floats: flip negatives, set positives' sign bit
                const uint32_t u = src[i];
                const uint32_t k = u ^ ((u >> 31) ? 0xFFFFFFFFu : 0x80000000u);
                a[i] = k;
                ++count[0][k & 2047];
                ++count[1][(k >> 11) & 2047];
                ++count[2][k >> 22];
            }
            for (int d = 0; d < 3; ++d) {
                uint32_t sum = 0;
                for (int v = 0; v < 2048; ++v) {
                    const uint32_t c = count[d][v];
                    count[d][v] = sum;
                    sum += c;
                }
            }
            uint32_t* x = a.data();
            uint32_t* y = b.data();
            for (int d = 0; d < 3; ++d) {
                const int shift = 11 * d;
                for (int64_t i = 0; i < n; ++i) {
                    const uint32_t k = x[i];
                    y[count[d][(k >> shift) & 2047]++] = k;
                }
                std::swap(x, y);
            }
            uint32_t* dst = reinterpret_cast<uint32_t*>(out + r * n);
            for (int64_t i = 0; i < n; ++i) {
                const uint32_t k = x[i];
                dst[i] = k ^ ((k >> 31) ? 0x80000000u : 0xFFFFFFFFu);
            }
        }
    }
}

}  // extern "C"

// out[r] = the index of the first largest entry of row r (n floats), or of its first NaN: what
// torch.argmax returns. Why here: a greedy round's argmax over the 49k logits ran as a torch op right
// after the LM head, with the dispatcher's code and data cold after the weights streamed through the
// caches; this is one vector pass over the row. Each lane keeps its first
// largest entry (replaced only by a strictly larger one), and the lanes holding the largest value
// give the smallest index: the first largest entry of the row.
extern "C" void argmax_rows(const float* x, int64_t rows, int64_t n, int64_t* out) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* p = x + r * n;
        int64_t j = 0, best = 0;
        bool nan = false;
        float mx = -INFINITY;
        bool found = false;
#if defined(__AVX512F__)
        if (n >= 16) {
            __m512 m = _mm512_set1_ps(-INFINITY);
            __m512i at = _mm512_setzero_si512(), idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
            const __m512i step = _mm512_set1_epi32(16);
            __mmask16 unordered = 0;
            for (; j + 16 <= n; j += 16) {
                const __m512 v = _mm512_loadu_ps(p + j);
                unordered |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
                const __mmask16 up = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ);
                m = _mm512_mask_mov_ps(m, up, v);
                at = _mm512_mask_mov_epi32(at, up, idx);
                idx = _mm512_add_epi32(idx, step);
            }
            nan = unordered != 0;
            mx = _mm512_reduce_max_ps(m);
            // the smallest index among the lanes that hold the largest value (-1 marks the others)
            const __mmask16 top = _mm512_cmp_ps_mask(m, _mm512_set1_ps(mx), _CMP_EQ_OQ);
            alignas(64) int32_t lane_at[16];
            _mm512_store_si512(lane_at, _mm512_mask_mov_epi32(_mm512_set1_epi32(-1), top, at));
            int64_t first = n;
            for (int32_t a : lane_at)
                if (a >= 0 && a < first) first = a;
            best = first;
            found = true;
        }
#elif BLOCKMM_SIMD == 256
        if (n >= 8) {
            __m256 m = _mm256_set1_ps(-INFINITY), unordered = _mm256_setzero_ps();
            __m256i at = _mm256_setzero_si256(), idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            const __m256i step = _mm256_set1_epi32(8);
            for (; j + 8 <= n; j += 8) {
                const __m256 v = _mm256_loadu_ps(p + j);
                unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
                const __m256 up = _mm256_cmp_ps(v, m, _CMP_GT_OQ);
                m = _mm256_blendv_ps(m, v, up);
                at = _mm256_blendv_epi8(at, idx, _mm256_castps_si256(up));
                idx = _mm256_add_epi32(idx, step);
            }
            nan = _mm256_movemask_ps(unordered) != 0;
            alignas(32) float lane_max[8];
            alignas(32) int32_t lane_at[8];
            _mm256_store_ps(lane_max, m);
            _mm256_store_si256(reinterpret_cast<__m256i*>(lane_at), at);
            for (float v : lane_max) mx = v > mx ? v : mx;
            int64_t first = n;
            for (int l = 0; l < 8; ++l)
                if (lane_max[l] == mx && lane_at[l] < first) first = lane_at[l];
            best = first;
            found = true;
        }
#endif
        for (; j < n; ++j) {
            nan |= p[j] != p[j];
            if (!found || p[j] > mx) {
                mx = p[j];
                best = j;
                found = true;
            }
        }
        if (nan) {
            best = 0;
            while (p[best] == p[best]) ++best;
        }
        out[r] = best;
    }
}
