// y = x @ W^T for weights kept in their GGUF blocks (Q4_1, Q8_0), computed in fp32.
//
// Why: a decode or tree-verify pass of a small model on a CPU is bound by reading weights.
// The default checkpoint is a Q4_1 GGUF; dequantised to fp32 it is 6.4x more bytes to stream
// per pass. Here each 32-weight block is dequantised in registers (w = d*q + m, the same two
// fp32 roundings gguf-py does, so the weights are bit-identical to the dense fp32 model) and
// used for every token of the pass. Each (row, token) dot product is summed in the same order
// whatever the number of tokens, so a token scores the same alone or inside a draft tree.
//
// Layouts (row n = output feature, nb = K / 32 blocks per row):
//   Q4_1: qs uint8 [N, nb, 16] (low nibble = element j, high nibble = element j + 16),
//         dm float [N, nb, 2] (scale d, minimum m)
//   Q8_0: qs int8 [N, nb, 32], d float [N, nb]
// x float [T, K] row-major, y float [T, N] row-major.
// Build: g++ -O3 -march=native -ffp-contract=off -fopenmp -shared -fPIC (see specviz/qkernel.py).

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

constexpr int64_t ROWS_PER_TASK = 32;
constexpr int MAX_TOKENS = 8;  // tokens held in registers at once

#if defined(__AVX512F__)

template <int TT>
void q41_rows(const float* x, int64_t K, const uint8_t* qs, const float* dm, int64_t n0, int64_t n1,
              float* y, int64_t ldy) {
    const int64_t nb = K / 32;
    const __m128i low4 = _mm_set1_epi8(0x0F);
    for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* q = qs + n * nb * 16;
        const float* s = dm + n * nb * 2;
        __m512 lo_acc[TT], hi_acc[TT];
        for (int t = 0; t < TT; ++t) lo_acc[t] = hi_acc[t] = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + b * 16));
            const __m512 qlo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(raw, low4)));
            const __m512 qhi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4), low4)));
            const __m512 d = _mm512_set1_ps(s[2 * b]);
            const __m512 m = _mm512_set1_ps(s[2 * b + 1]);
            const __m512 wlo = _mm512_add_ps(_mm512_mul_ps(d, qlo), m);
            const __m512 whi = _mm512_add_ps(_mm512_mul_ps(d, qhi), m);
            for (int t = 0; t < TT; ++t) {
                const float* xt = x + t * K + b * 32;
                lo_acc[t] = _mm512_fmadd_ps(_mm512_loadu_ps(xt), wlo, lo_acc[t]);
                hi_acc[t] = _mm512_fmadd_ps(_mm512_loadu_ps(xt + 16), whi, hi_acc[t]);
            }
        }
        for (int t = 0; t < TT; ++t) y[t * ldy + n] = _mm512_reduce_add_ps(_mm512_add_ps(lo_acc[t], hi_acc[t]));
    }
}

template <int TT>
void q80_rows(const float* x, int64_t K, const int8_t* qs, const float* ds, int64_t n0, int64_t n1,
              float* y, int64_t ldy) {
    const int64_t nb = K / 32;
    for (int64_t n = n0; n < n1; ++n) {
        const int8_t* q = qs + n * nb * 32;
        const float* s = ds + n * nb;
        __m512 lo_acc[TT], hi_acc[TT];
        for (int t = 0; t < TT; ++t) lo_acc[t] = hi_acc[t] = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + b * 32));
            const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + b * 32 + 16));
            const __m512 d = _mm512_set1_ps(s[b]);
            const __m512 wlo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(r0)));
            const __m512 whi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(r1)));
            for (int t = 0; t < TT; ++t) {
                const float* xt = x + t * K + b * 32;
                lo_acc[t] = _mm512_fmadd_ps(_mm512_loadu_ps(xt), wlo, lo_acc[t]);
                hi_acc[t] = _mm512_fmadd_ps(_mm512_loadu_ps(xt + 16), whi, hi_acc[t]);
            }
        }
        for (int t = 0; t < TT; ++t) y[t * ldy + n] = _mm512_reduce_add_ps(_mm512_add_ps(lo_acc[t], hi_acc[t]));
    }
}

#else  // portable version: 16-lane arrays the compiler vectorises with whatever the CPU has

template <int TT>
void q41_rows(const float* x, int64_t K, const uint8_t* qs, const float* dm, int64_t n0, int64_t n1,
              float* y, int64_t ldy) {
    const int64_t nb = K / 32;
    for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* q = qs + n * nb * 16;
        const float* s = dm + n * nb * 2;
        float lo_acc[TT][16], hi_acc[TT][16];
        std::memset(lo_acc, 0, sizeof lo_acc);
        std::memset(hi_acc, 0, sizeof hi_acc);
        for (int64_t b = 0; b < nb; ++b) {
            float wlo[16], whi[16];
            const float d = s[2 * b], m = s[2 * b + 1];
            for (int j = 0; j < 16; ++j) {
                wlo[j] = d * static_cast<float>(q[b * 16 + j] & 15) + m;
                whi[j] = d * static_cast<float>(q[b * 16 + j] >> 4) + m;
            }
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

template <int TT>
void q80_rows(const float* x, int64_t K, const int8_t* qs, const float* ds, int64_t n0, int64_t n1,
              float* y, int64_t ldy) {
    const int64_t nb = K / 32;
    for (int64_t n = n0; n < n1; ++n) {
        const int8_t* q = qs + n * nb * 32;
        const float* s = ds + n * nb;
        float lo_acc[TT][16], hi_acc[TT][16];
        std::memset(lo_acc, 0, sizeof lo_acc);
        std::memset(hi_acc, 0, sizeof hi_acc);
        for (int64_t b = 0; b < nb; ++b) {
            float wlo[16], whi[16];
            for (int j = 0; j < 16; ++j) {
                wlo[j] = s[b] * static_cast<float>(q[b * 32 + j]);
                whi[j] = s[b] * static_cast<float>(q[b * 32 + 16 + j]);
            }
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

template <typename Q, typename S, void (*R1)(const float*, int64_t, const Q*, const S*, int64_t, int64_t, float*, int64_t),
          void (*R2)(const float*, int64_t, const Q*, const S*, int64_t, int64_t, float*, int64_t),
          void (*R3)(const float*, int64_t, const Q*, const S*, int64_t, int64_t, float*, int64_t),
          void (*R4)(const float*, int64_t, const Q*, const S*, int64_t, int64_t, float*, int64_t),
          void (*R5)(const float*, int64_t, const Q*, const S*, int64_t, int64_t, float*, int64_t),
          void (*R6)(const float*, int64_t, const Q*, const S*, int64_t, int64_t, float*, int64_t),
          void (*R7)(const float*, int64_t, const Q*, const S*, int64_t, int64_t, float*, int64_t),
          void (*R8)(const float*, int64_t, const Q*, const S*, int64_t, int64_t, float*, int64_t)>
void run(const float* x, int64_t T, int64_t K, const Q* qs, const S* sc, int64_t N, float* y, int threads) {
    const int64_t tasks = (N + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
        const int64_t n0 = task * ROWS_PER_TASK;
        const int64_t n1 = n0 + ROWS_PER_TASK < N ? n0 + ROWS_PER_TASK : N;
        for (int64_t t0 = 0; t0 < T; t0 += MAX_TOKENS) {
            const int64_t tt = T - t0 < MAX_TOKENS ? T - t0 : MAX_TOKENS;
            const float* xt = x + t0 * K;
            float* yt = y + t0 * N;
            switch (tt) {
                case 1: R1(xt, K, qs, sc, n0, n1, yt, N); break;
                case 2: R2(xt, K, qs, sc, n0, n1, yt, N); break;
                case 3: R3(xt, K, qs, sc, n0, n1, yt, N); break;
                case 4: R4(xt, K, qs, sc, n0, n1, yt, N); break;
                case 5: R5(xt, K, qs, sc, n0, n1, yt, N); break;
                case 6: R6(xt, K, qs, sc, n0, n1, yt, N); break;
                case 7: R7(xt, K, qs, sc, n0, n1, yt, N); break;
                default: R8(xt, K, qs, sc, n0, n1, yt, N); break;
            }
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

void q4_1_mm(const float* x, int64_t T, int64_t K, const uint8_t* qs, const float* dm, int64_t N, float* y,
             int threads) {
    run<uint8_t, float, q41_rows<1>, q41_rows<2>, q41_rows<3>, q41_rows<4>, q41_rows<5>, q41_rows<6>,
        q41_rows<7>, q41_rows<8>>(x, T, K, qs, dm, N, y, threads);
}

void q8_0_mm(const float* x, int64_t T, int64_t K, const int8_t* qs, const float* d, int64_t N, float* y,
             int threads) {
    run<int8_t, float, q80_rows<1>, q80_rows<2>, q80_rows<3>, q80_rows<4>, q80_rows<5>, q80_rows<6>,
        q80_rows<7>, q80_rows<8>>(x, T, K, qs, d, N, y, threads);
}

}  // extern "C"
