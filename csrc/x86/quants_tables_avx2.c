/* quants_tables_avx2.c -- AVX2 dot products of the table types: IQ4_NL and MXFP4 against Q8_0,
 * IQ4_XS against Q8_K (ggml's pairings).
 *
 * An element is a 4-bit index into 16 int8 values (li_kvalues_iq4nl, li_kvalues_mxfp4): one
 * shuffle_epi8 per 32 elements turns the nibbles into the values, then signed x signed through
 * maddubs(|q|, x * sign(q)): |x|, |q| <= 127 (ggml's Q8_0 and Q8_K never hold -128), so a pair sum
 * is at most 2 * 127 * 127 < 2^15 and the block's integer dot is exact. |q| is the activation's, so
 * it is taken once per block for all the rows: one sign per row and block. Per row the arithmetic
 * is the same whether it is called for one row (vec_dot) or for LI_DOT_ROWS rows at once
 * (vec_dot_rows): the rows only share the activation's loads and |q|.
 * Results equal the generic ones up to float summation order.
 */
#if defined(__x86_64__) || defined(_M_X64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>

#include "core/li.h"
#include "x86/avx2.h"
#include "x86/reduce_avx2.h"
#include "x86/tables_x86.h"

/* signed x signed bytes -> 16 int16 pair sums, exact (see the top); aq = |q|, shared by the rows */
static inline __m256i pairs_s8(__m256i x, __m256i q, __m256i aq) {
    return _mm256_maddubs_epi16(aq, _mm256_sign_epi8(x, q));
}

/* IQ4_NL / MXFP4 x Q8_0: s = sum over blocks of (dw * da) * dot(x, q); as[2i] = da (exact) */
#define TABLE32(W, TABLE)                                                                            \
    static inline __attribute__((always_inline)) void dot_##W##_nr(int64_t n, float *s, const uint8_t *vw, \
                                                                   size_t rb, const block_q8_0 *a,   \
                                                                   const float *as, const int NR) {  \
        const __m256i table = table_256(TABLE), ones = _mm256_set1_epi16(1);                         \
        const block_##W *w[LI_DOT_ROWS];                                                             \
        __m256 acc[LI_DOT_ROWS];                                                                     \
        for (int r = 0; r < NR; r++) {                                                               \
            w[r] = (const block_##W *)(vw + r * rb);                                                 \
            acc[r] = _mm256_setzero_ps();                                                            \
        }                                                                                            \
        for (int64_t i = 0; i < n / 32; i++) {                                                       \
            const __m256i q = _mm256_loadu_si256((const __m256i *)a[i].qs);                         \
            const __m256i aq = _mm256_sign_epi8(q, q);                                               \
            for (int r = 0; r < NR; r++) {                                                           \
                const __m256i d = _mm256_madd_epi16(pairs_s8(lookup_32(table, w[r][i].qs), q, aq), ones); \
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(scale_##W(&w[r][i]) * as[2 * i]),           \
                                         _mm256_cvtepi32_ps(d), acc[r]);                             \
            }                                                                                        \
        }                                                                                            \
        for (int r = 0; r < NR; r++) s[r] = hsum_ps(acc[r]);                                         \
    }

TABLE32(iq4_nl, li_kvalues_iq4nl)
TABLE32(mxfp4, li_kvalues_mxfp4)

/* IQ4_XS x Q8_K: per super-block s = (d * da) * sum over the 8 sub-blocks of (ls - 32) * dot(x, q),
 * the scale applied in the int16 -> int32 step (|ls - 32| <= 32: a lane stays below 2^22) */
static inline __attribute__((always_inline)) void dot_iq4_xs_nr(int64_t n, float *s, const uint8_t *vw,
                                                                size_t rb, const block_q8_K *a, const int NR) {
    const __m256i table = table_256(li_kvalues_iq4nl);
    const block_iq4_xs *w[LI_DOT_ROWS];
    __m256 acc[LI_DOT_ROWS];
    for (int r = 0; r < NR; r++) {
        w[r] = (const block_iq4_xs *)(vw + r * rb);
        acc[r] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i aq[8];   /* |q| of the super-block, for every row (kept in L1, not in registers) */
        if (NR > 1)
            for (int sb = 0; sb < 8; sb++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * sb));
                aq[sb] = _mm256_sign_epi8(q, q);
            }
        for (int r = 0; r < NR; r++) {
            const block_iq4_xs *b = &w[r][i];
            const __m256i ls = iq4_xs_scale_pairs(b);
            __m256i sumi = _mm256_setzero_si256();
            for (int sb = 0; sb < 8; sb++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * sb));
                const __m256i p = pairs_s8(lookup_32(table, b->qs + 16 * sb), q, NR > 1 ? aq[sb] : _mm256_sign_epi8(q, q));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale_pair(ls, sb)));
            }
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(b->d) * a[i].d), _mm256_cvtepi32_ps(sumi), acc[r]);
        }
    }
    for (int r = 0; r < NR; r++) s[r] = hsum_ps(acc[r]);
}

#define CALL_IQ4_NL(n, s, vw, rb, va, as, NR) dot_iq4_nl_nr(n, s, vw, rb, va, as, NR)
#define CALL_MXFP4(n, s, vw, rb, va, as, NR) dot_mxfp4_nr(n, s, vw, rb, va, as, NR)
#define CALL_IQ4_XS(n, s, vw, rb, va, as, NR) ((void)(as), dot_iq4_xs_nr(n, s, vw, rb, va, NR))
LI_TABLE_ENTRY_POINTS(iq4_nl, q8_0, avx2, CALL_IQ4_NL)
LI_TABLE_ENTRY_POINTS(mxfp4, q8_0, avx2, CALL_MXFP4)
LI_TABLE_ENTRY_POINTS(iq4_xs, q8_K, avx2, CALL_IQ4_XS)

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
