/* quants_grids_avx2.c -- AVX2 dot products of the grid i-quants against Q8_K (ggml's pairing):
 * IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M.
 *
 * Per 32 elements: the grid points (core/iq_grids.h; 8 bytes a point for IQ2 and IQ1, 4 for IQ3)
 * go into one register -- by vpgather for IQ3's eight 4-byte points and IQ2_XS's grid and sign
 * rows, which measured faster there than scalar loads; for the other types scalar loads were as
 * fast or faster (BENCHMARKS.md, "Kernel choices"). The signs, as
 * +1 / -1 bytes (li_keven_signs_iq2xs, or explicit sign bits compared against a bit mask), move onto
 * the activations with sign_epi8, and maddubs multiplies the unsigned grid values (<= 62) by the
 * signed activations (|q| <= 127): a pair sum is at most 2 * 62 * 127 = 15748 < 2^15, exact. IQ1's
 * elements 8 * grid +- 1 (|v| <= 9) are signed, so they go through maddubs(|v|, q * sign(v)). The
 * int16 pairs are widened by madd with the integer part of the sub-block scale (2 ls + 1 <= 31, per
 * 16 or 32 elements), summed in int32 over the super-block (|lane| <= 8 * 2 * 15748 * 31 < 2^23:
 * exact as f32), and scaled once by d * da * 2^-k, the scale's power-of-two part (IQ2: 1/8, IQ3_XXS:
 * 1/4, IQ3_S: 1, IQ1: 1/8). The integers are those of generic/grids_generic.c's decoders, so the
 * results equal the generic ones up to float summation order. vec_dot_rows does the same per row,
 * the rows sharing the activation loads.
 */
#if defined(__x86_64__) || defined(_M_X64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>

#include "core/iq_grids.h"
#include "core/li.h"
#include "generic/generic.h"
#include "x86/avx2.h"
#include "x86/reduce_avx2.h"

static inline uint64_t u64_at(const void *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline uint32_t u32_at(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint16_t u16_at(const void *p) { uint16_t v; memcpy(&v, p, 2); return v; }

/* four 8-byte rows of a table, rows k0..k3 in element order */
#define ROWS4(t, k0, k1, k2, k3) \
    _mm256_set_epi64x((long long)u64_at((t)[k3]), (long long)u64_at((t)[k2]), (long long)u64_at((t)[k1]), \
                      (long long)u64_at((t)[k0]))

/* four 8-byte rows of a table by an index vector (4 x int32), rows in element order */
#define GATHER4(t, idx) _mm256_i32gather_epi64((const long long *)(t), idx, 8)

/* 32 explicit sign bits (bit k: element k negative) -> +1 / -1 bytes */
static inline __m256i signs_from_bits(uint32_t bits) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i mask = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i b = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread), mask);
    return _mm256_or_si256(_mm256_cmpeq_epi8(b, mask), _mm256_set1_epi8(1));
}

/* One 32-element sub-block: |element| bytes (grid values, unsigned), a byte vector with each
 * element's sign (+1 / -1, or the element itself), and the integer scales 2 ls + 1 of elements
 * 0..15 and 16..31. The dots multiply mag by the signed activations; the unpackers store
 * sign(mag, sgn) + o. */
typedef struct {
    __m256i mag, sgn;
    int s_lo, s_hi;
} sub32;

static inline sub32 parts_iq2_xxs(const block_iq2_xxs *x, int ib) {
    const uint8_t *a = (const uint8_t *)(x->qs + 4 * ib);
    const uint32_t b = u32_at(x->qs + 4 * ib + 2);
    const int ls = 2 * (int)(b >> 28) + 1;
    return (sub32){ROWS4(li_iq2xxs_grid, a[0], a[1], a[2], a[3]),
                   ROWS4(li_keven_signs_iq2xs, b & 127, (b >> 7) & 127, (b >> 14) & 127, (b >> 21) & 127), ls, ls};
}

static inline sub32 parts_iq2_xs(const block_iq2_xs *x, int ib) {
    const __m128i q16 = _mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i *)(x->qs + 4 * ib)));
    const int sc = x->scales[ib];
    return (sub32){GATHER4(li_iq2xs_grid, _mm_and_si128(q16, _mm_set1_epi32(511))),
                   GATHER4(li_keven_signs_iq2xs, _mm_srli_epi32(q16, 9)), 2 * (sc & 0xF) + 1, 2 * (sc >> 4) + 1};
}

static inline sub32 parts_iq2_s(const block_iq2_s *x, int ib) {
    const uint8_t *qs = x->qs + 4 * ib;
    const int qh = x->qh[ib], sc = x->scales[ib];
    return (sub32){ROWS4(li_iq2s_grid, qs[0] | (qh << 8 & 0x300), qs[1] | (qh << 6 & 0x300),
                         qs[2] | (qh << 4 & 0x300), qs[3] | (qh << 2 & 0x300)),
                   signs_from_bits(u32_at(x->qs + QK_K / 8 + 4 * ib)), 2 * (sc & 0xF) + 1, 2 * (sc >> 4) + 1};
}

static inline sub32 parts_iq3_xxs(const block_iq3_xxs *x, int ib) {
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(x->qs + 8 * ib)));
    const uint32_t b = u32_at(x->qs + QK_K / 4 + 4 * ib);
    const int ls = 2 * (int)(b >> 28) + 1;
    return (sub32){_mm256_i32gather_epi32((const int *)li_iq3xxs_grid, idx, 4),
                   ROWS4(li_keven_signs_iq2xs, b & 127, (b >> 7) & 127, (b >> 14) & 127, (b >> 21) & 127), ls, ls};
}

static inline sub32 parts_iq3_s(const block_iq3_s *x, int ib) {
    const __m256i hbit = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(x->qh[ib]), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                                          _mm256_set1_epi32(1));
    const __m256i idx = _mm256_or_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(x->qs + 8 * ib))),
                                        _mm256_slli_epi32(hbit, 8));
    const int ls = 2 * ((x->scales[ib / 2] >> 4 * (ib % 2)) & 0xF) + 1;
    return (sub32){_mm256_i32gather_epi32((const int *)li_iq3s_grid, idx, 4), signs_from_bits(u32_at(x->signs + 4 * ib)),
                   ls, ls};
}

/* IQ1: v = 8 * grid + delta (grid bytes -1 / 0 / 1, delta bytes +1 / -1): never 0, so |v| and v */
static inline sub32 iq1_parts(__m256i grid, __m256i delta, int s_lo, int s_hi) {
    const __m256i v = _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), grid), delta);
    return (sub32){_mm256_sign_epi8(v, v), v, s_lo, s_hi};
}

static inline sub32 parts_iq1_s(const block_iq1_s *x, int ib) {
    const uint8_t *qs = x->qs + 4 * ib;
    const int qh = x->qh[ib], ls = 2 * ((qh >> 12) & 7) + 1;
    return iq1_parts(ROWS4(li_iq1s_grid, qs[0] | (qh << 8 & 0x700), qs[1] | (qh << 5 & 0x700),
                           qs[2] | (qh << 2 & 0x700), qs[3] | (qh >> 1 & 0x700)),
                     _mm256_set1_epi8(qh & 0x8000 ? -1 : 1), ls, ls);
}

static inline sub32 parts_iq1_m(const block_iq1_m *x, int ib) {
    const uint8_t *qs = x->qs + 4 * ib;
    const int h = u16_at(x->qh + 2 * ib), h0 = h & 0xFF, h1 = h >> 8;
    /* delta's sign bits 3, 7, 11, 15 of h, one per 8 elements: a qword of -1 where clear, 0 where set,
     * then -1 - 2 * that: +1 / -1 bytes */
    const __m256i clear = _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_set1_epi64x(h), _mm256_setr_epi64x(0x8, 0x80, 0x800, 0x8000)),
                                             _mm256_setzero_si256());
    const __m256i delta = _mm256_sub_epi8(_mm256_set1_epi8(-1), _mm256_add_epi8(clear, clear));
    const int sc = u16_at(x->scales + 2 * (ib / 2)) >> 6 * (ib % 2);
    return iq1_parts(ROWS4(li_iq1s_grid, qs[0] | (h0 << 8 & 0x700), qs[1] | (h0 << 4 & 0x700),
                           qs[2] | (h1 << 8 & 0x700), qs[3] | (h1 << 4 & 0x700)),
                     delta, 2 * (sc & 7) + 1, 2 * ((sc >> 3) & 7) + 1);
}

/* sub-block x activations: 16 exact int16 pair sums (see the top) widened with their scales -> int32 x 8 */
static inline __m256i dot32(sub32 p, __m256i q) {
    const __m256i pairs = _mm256_maddubs_epi16(p.mag, _mm256_sign_epi8(q, p.sgn));
    return _mm256_madd_epi16(pairs, _mm256_set_m128i(_mm_set1_epi16((short)p.s_hi), _mm_set1_epi16((short)p.s_lo)));
}

/* d * 2^-k, the scales' power-of-two part (exact: d is an fp16, so d / 8 is a normal f32) */
static inline float d_iq2_xxs(const block_iq2_xxs *x) { return _cvtsh_ss(x->d) * 0.125f; }
static inline float d_iq2_xs(const block_iq2_xs *x) { return _cvtsh_ss(x->d) * 0.125f; }
static inline float d_iq2_s(const block_iq2_s *x) { return _cvtsh_ss(x->d) * 0.125f; }
static inline float d_iq3_xxs(const block_iq3_xxs *x) { return _cvtsh_ss(x->d) * 0.25f; }
static inline float d_iq3_s(const block_iq3_s *x) { return _cvtsh_ss(x->d); }
static inline float d_iq1_s(const block_iq1_s *x) { return _cvtsh_ss(x->d) * 0.125f; }
static inline float d_iq1_m(const block_iq1_m *x) {
    const uint64_t sc = u64_at(x->scales);   /* the top nibble of each u16, the first the lowest */
    const uint16_t bits = (uint16_t)(((sc >> 12) & 0xF) | ((sc >> 24) & 0xF0) | ((sc >> 36) & 0xF00) | ((sc >> 48) & 0xF000));
    return _cvtsh_ss(bits) * 0.125f;
}

/* s[r] = sum over super-blocks of (d_r * 2^-k * da) * sum over sub-blocks of the scaled integer dots */
#define GRID_DOT(W)                                                                                 \
    static inline __attribute__((always_inline)) void dot_##W##_nr(int64_t n, float *s, const uint8_t *vw, \
                                                                   size_t rb, const block_q8_K *a, const int NR) { \
        const block_##W *w[LI_DOT_ROWS];                                                            \
        __m256 acc[LI_DOT_ROWS];                                                                    \
        for (int r = 0; r < NR; r++) {                                                              \
            w[r] = (const block_##W *)(vw + r * rb);                                                \
            acc[r] = _mm256_setzero_ps();                                                           \
        }                                                                                           \
        for (int64_t i = 0; i < n / QK_K; i++) {                                                    \
            __m256i sumi[LI_DOT_ROWS];                                                              \
            for (int r = 0; r < NR; r++) sumi[r] = _mm256_setzero_si256();                          \
            for (int ib = 0; ib < QK_K / 32; ib++) {                                                \
                const __m256i q = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * ib));         \
                for (int r = 0; r < NR; r++) sumi[r] = _mm256_add_epi32(sumi[r], dot32(parts_##W(&w[r][i], ib), q)); \
            }                                                                                       \
            for (int r = 0; r < NR; r++)                                                            \
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d_##W(&w[r][i]) * a[i].d), _mm256_cvtepi32_ps(sumi[r]), \
                                         acc[r]);                                                   \
        }                                                                                           \
        for (int r = 0; r < NR; r++) s[r] = hsum_ps(acc[r]);                                        \
    }                                                                                               \
    void vec_dot_##W##_q8_K_avx2(int64_t n, float *s, const void *vw, const void *va, const float *as) { \
        (void)as;                                                                                   \
        dot_##W##_nr(n, s, vw, 0, va, 1);                                                           \
    }                                                                                               \
    void vec_dot_rows_##W##_q8_K_avx2(int64_t n, float *s, const void *vw, size_t rb, int nr, const void *va, \
                                      const float *as) {                                            \
        (void)as;                                                                                   \
        switch (nr) {                                                                               \
        case 1: dot_##W##_nr(n, s, vw, rb, va, 1); break;                                           \
        case 2: dot_##W##_nr(n, s, vw, rb, va, 2); break;                                           \
        case 3: dot_##W##_nr(n, s, vw, rb, va, 3); break;                                           \
        default: dot_##W##_nr(n, s, vw, rb, va, 4); break;                                          \
        }                                                                                           \
    }

GRID_DOT(iq2_xxs)
GRID_DOT(iq2_xs)
GRID_DOT(iq2_s)
GRID_DOT(iq3_xxs)
GRID_DOT(iq3_s)
GRID_DOT(iq1_s)
GRID_DOT(iq1_m)

/* The GEMM panel's integer form (generic/grids_generic.c: u = v + o, dw per group of G), the same
 * bytes and scales as the generic unpackers: (d * 2^-k) * (2 ls + 1) is d * (0.5 + ls) * 2^(1-k)
 * rounded once either way, the power-of-two factors being exact. */
#define GRID_UNPACK(W, G, O)                                                                       \
    void unpack_##W##_avx2(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {          \
        const block_##W *x = src;                                                                  \
        const __m256i o = _mm256_set1_epi8((char)(O));                                             \
        (void)mw;                                                                                  \
        for (int64_t i = 0; i < n / QK_K; i++, u += QK_K, dw += QK_K / (G)) {                      \
            const float d = d_##W(&x[i]);                                                          \
            for (int ib = 0; ib < QK_K / 32; ib++) {                                               \
                const sub32 p = parts_##W(&x[i], ib);                                              \
                _mm256_storeu_si256((__m256i *)(u + 32 * ib), _mm256_add_epi8(_mm256_sign_epi8(p.mag, p.sgn), o)); \
                if ((G) == 32) {                                                                   \
                    dw[ib] = d * (float)p.s_lo;                                                    \
                } else {                                                                           \
                    dw[2 * ib] = d * (float)p.s_lo;                                                \
                    dw[2 * ib + 1] = d * (float)p.s_hi;                                            \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

GRID_UNPACK(iq2_xxs, 32, LI_O_IQ2)
GRID_UNPACK(iq2_xs, 16, LI_O_IQ2)
GRID_UNPACK(iq2_s, 16, LI_O_IQ2)
GRID_UNPACK(iq3_xxs, 32, LI_O_IQ3_XXS)
GRID_UNPACK(iq3_s, 32, LI_O_IQ3_S)
GRID_UNPACK(iq1_s, 32, LI_O_IQ1)
GRID_UNPACK(iq1_m, 16, LI_O_IQ1)

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
