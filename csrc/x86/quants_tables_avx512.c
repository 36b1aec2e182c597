/* quants_tables_avx512.c -- AVX-512 VNNI dot products of the table types: IQ4_NL and MXFP4 against
 * Q8_0, IQ4_XS against Q8_K.
 *
 * As in quants_avx512.c, dpbusd takes the weights unsigned: the shuffle looks the nibbles up in the
 * table plus 128 (u = value + 128, 1..241, generic/unpack_generic.c), and the offset comes back out
 * as -128 * sum(q) per group, from the activation's sums (Q8_0: a_sums {da, da * sum(q)}; Q8_K:
 * bsums). Two 32-element groups per 512-bit register. Per row the same arithmetic for vec_dot and
 * vec_dot_rows; results equal the generic ones up to float summation order.
 */
#if defined(__x86_64__) || defined(_M_X64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#endif

#include <immintrin.h>

#include "core/li.h"
#include "x86/avx512.h"

/* the table plus 128 as unsigned bytes, in all four 128-bit lanes */
static inline __m512i table_u8(const int8_t *t) {
    const __m128i v = _mm_xor_si128(_mm_loadu_si128((const __m128i *)t), _mm_set1_epi8((char)0x80));
    return _mm512_broadcast_i32x4(v);
}

/* two groups of 16 nibble bytes -> their 64 u in element order: [group 0 | group 1] */
static inline __m512i lookup_two(__m512i table, const uint8_t *qs0, const uint8_t *qs1) {
    const __m256i b = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)qs1), _mm_loadu_si128((const __m128i *)qs0));
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(b), _mm256_srli_epi16(b, 4), 1);  /* lo0 lo1 hi0 hi1 */
    const __m512i idx = _mm512_and_si512(_mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0F));
    return _mm512_shuffle_epi8(table, idx);
}

static inline __m512i load_two(const int8_t *q0, const int8_t *q1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)q0)),
                              _mm256_loadu_si256((const __m256i *)q1), 1);
}

/* lanes 0..7: s0, lanes 8..15: s1 */
static inline __m512 two_scales(float s0, float s1) {
    return _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castps_si512(_mm512_set1_ps(s0)),
                                                   _mm256_castps_si256(_mm256_set1_ps(s1)), 1));
}

static inline float scale_iq4_nl(const block_iq4_nl *b) { return _cvtsh_ss(b->d); }
static inline float scale_mxfp4(const block_mxfp4 *b) {   /* ggml_e8m0_to_fp32_half */
    return li_bits_to_f32(b->e < 2 ? 0x00200000u << b->e : (uint32_t)(b->e - 1) << 23);
}

/* IQ4_NL / MXFP4 x Q8_0: s = sum over blocks of dw * (da * dot(u, q) - 128 * da * sum(q)); the second
 * term gathered apart (side) and taken out once. An odd last block pairs with a zero block. */
#define TABLE32(W, TABLE)                                                                            \
    static inline __attribute__((always_inline)) void dot_##W##_nr(int64_t n, float *s, const uint8_t *vw, \
                                                                   size_t rb, const block_q8_0 *a,   \
                                                                   const float *as, const int NR) {  \
        const __m512i table = table_u8(TABLE);                                                       \
        const block_##W *w[LI_DOT_ROWS];                                                             \
        __m512 acc[LI_DOT_ROWS];                                                                     \
        float side[LI_DOT_ROWS];                                                                     \
        for (int r = 0; r < NR; r++) {                                                               \
            w[r] = (const block_##W *)(vw + r * rb);                                                 \
            acc[r] = _mm512_setzero_ps();                                                            \
            side[r] = 0.0f;                                                                          \
        }                                                                                            \
        const int64_t nb = n / 32;                                                                   \
        for (int64_t i = 0; i < nb; i += 2) {                                                        \
            const int two = i + 1 < nb;                                                              \
            const __m512i q = two ? load_two(a[i].qs, a[i + 1].qs)                                   \
                                  : _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a[i].qs)); \
            const __mmask64 keep = two ? ~(__mmask64)0 : 0xffffffffu;                                \
            for (int r = 0; r < NR; r++) {                                                           \
                const float d0 = scale_##W(&w[r][i]), d1 = two ? scale_##W(&w[r][i + 1]) : 0.0f;     \
                const __m512i u = _mm512_maskz_mov_epi8(keep, lookup_two(table, w[r][i].qs, w[r][i + two].qs)); \
                const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, q);                 \
                acc[r] = _mm512_fmadd_ps(two_scales(d0 * as[2 * i], two ? d1 * as[2 * i + 2] : 0.0f), \
                                         _mm512_cvtepi32_ps(d), acc[r]);                             \
                side[r] += d0 * as[2 * i + 1] + (two ? d1 * as[2 * i + 3] : 0.0f);                   \
            }                                                                                        \
        }                                                                                            \
        for (int r = 0; r < NR; r++) s[r] = _mm512_reduce_add_ps(acc[r]) - 128.0f * side[r];         \
    }

TABLE32(iq4_nl, li_kvalues_iq4nl)
TABLE32(mxfp4, li_kvalues_mxfp4)

/* IQ4_XS x Q8_K: per super-block (d * da) * sum over sub-blocks sb of (ls - 32) * (dot(u, q) - 128 * sum(q)),
 * two sub-blocks per dpbusd, the scales applied in float; sum(q) from the bsums (exact ints). */
static inline __attribute__((always_inline)) void dot_iq4_xs_nr(int64_t n, float *s, const uint8_t *vw,
                                                                size_t rb, const block_q8_K *a, const int NR) {
    const __m512i table = table_u8(li_kvalues_iq4nl);
    const block_iq4_xs *w[LI_DOT_ROWS];
    __m512 acc[LI_DOT_ROWS];
    float side[LI_DOT_ROWS];
    for (int r = 0; r < NR; r++) {
        w[r] = (const block_iq4_xs *)(vw + r * rb);
        acc[r] = _mm512_setzero_ps();
        side[r] = 0.0f;
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32_t qsum[8];
        for (int sb = 0; sb < 8; sb++) qsum[sb] = a[i].bsums[2 * sb] + a[i].bsums[2 * sb + 1];
        for (int r = 0; r < NR; r++) {
            const block_iq4_xs *b = &w[r][i];
            const float dd = _cvtsh_ss(b->d) * a[i].d;
            int32_t corr = 0;
            for (int sb = 0; sb < 8; sb += 2) {
                const int ls0 = ((b->scales_l[sb / 2] & 0xF) | ((b->scales_h >> 2 * sb) & 3) << 4) - 32;
                const int ls1 = ((b->scales_l[sb / 2] >> 4) | ((b->scales_h >> (2 * sb + 2)) & 3) << 4) - 32;
                const __m512i u = lookup_two(table, b->qs + 16 * sb, b->qs + 16 * sb + 16);
                const __m512i q = _mm512_loadu_si512((const void *)(a[i].qs + 32 * sb));
                const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, q);
                acc[r] = _mm512_fmadd_ps(two_scales(dd * (float)ls0, dd * (float)ls1), _mm512_cvtepi32_ps(d), acc[r]);
                corr += ls0 * qsum[sb] + ls1 * qsum[sb + 1];
            }
            side[r] += dd * (float)corr;
        }
    }
    for (int r = 0; r < NR; r++) s[r] = _mm512_reduce_add_ps(acc[r]) - 128.0f * side[r];
}

/* the li_vec_dot_fn and li_vec_dot_rows_fn entry points: NR a constant in each call */
#define ENTRY_POINTS(W, A, CALL)                                                                     \
    void vec_dot_##W##_##A##_avx512(int64_t n, float *s, const void *vw, const void *va, const float *as) { \
        CALL(n, s, vw, 0, va, as, 1);                                                                \
    }                                                                                                \
    void vec_dot_rows_##W##_##A##_avx512(int64_t n, float *s, const void *vw, size_t rb, int nr, const void *va, \
                                         const float *as) {                                          \
        switch (nr) {                                                                                \
        case 1: CALL(n, s, vw, rb, va, as, 1); break;                                                \
        case 2: CALL(n, s, vw, rb, va, as, 2); break;                                                \
        case 3: CALL(n, s, vw, rb, va, as, 3); break;                                                \
        default: CALL(n, s, vw, rb, va, as, 4); break;                                               \
        }                                                                                            \
    }

#define CALL_IQ4_NL(n, s, vw, rb, va, as, NR) dot_iq4_nl_nr(n, s, vw, rb, va, as, NR)
#define CALL_MXFP4(n, s, vw, rb, va, as, NR) dot_mxfp4_nr(n, s, vw, rb, va, as, NR)
#define CALL_IQ4_XS(n, s, vw, rb, va, as, NR) ((void)(as), dot_iq4_xs_nr(n, s, vw, rb, va, NR))
ENTRY_POINTS(iq4_nl, q8_0, CALL_IQ4_NL)
ENTRY_POINTS(mxfp4, q8_0, CALL_MXFP4)
ENTRY_POINTS(iq4_xs, q8_K, CALL_IQ4_XS)

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
