/* quants_tables_avx512.c -- AVX-512 VNNI dot products of the table types: IQ4_NL and MXFP4 against
 * Q8_0, IQ4_XS against Q8_K (the same pairings as quants_tables_avx2.c).
 *
 * The lookup stays AVX2's (x86/tables_x86.h: one shuffle_epi8 per 32 elements in a 256-bit
 * register); VNNI, on 256-bit registers (AVX512VL), replaces the multiply-adds after it:
 * - IQ4_NL / MXFP4 x Q8_0: the table holds the values + 128 (unsigned u, 1..241), and
 *   _mm256_dpbusd_epi32 adds u * q in groups of four to int32 lanes that start at -128 * (the
 *   same groups of q), computed once per activation block for all the rows: the lanes end as the
 *   exact signed dot, with neither the two sign steps nor the int16 step of maddubs + madd.
 * - IQ4_XS x Q8_K: maddubs(|q|, x * sign(q)) as in AVX2 (the sub-block scale must multiply the
 *   int16 pair sums), then _mm256_dpwssd_epi32 multiplies them by the scale and adds them to the
 *   super-block's int32 sum in one step.
 * Why not 512-bit registers: the lookup then needs the nibbles of two blocks spread over four
 * 128-bit lanes, a cross-lane permute per 64 elements, which measured slower (avx512_table.c).
 * The integer sums are exact, so results equal the AVX2 and generic ones up to float summation order.
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
#include "x86/reduce_avx2.h"
#include "x86/tables_x86.h"

/* the table's values + 128 as unsigned bytes (v + 128 = v ^ 0x80 for int8 v) */
static inline __m256i table_u_256(const int8_t *t) {
    return _mm256_xor_si256(table_256(t), _mm256_set1_epi8((char)0x80));
}

/* IQ4_NL / MXFP4 x Q8_0: s = sum over blocks of (dw * da) * dot(x, q); as[2i] = da (exact) */
#define TABLE32(W, TABLE)                                                                            \
    static inline __attribute__((always_inline)) void dot_##W##_nr(int64_t n, float *s, const uint8_t *vw, \
                                                                   size_t rb, const block_q8_0 *a,   \
                                                                   const float *as, const int NR) {  \
        const __m256i table = table_u_256(TABLE), bias = _mm256_set1_epi8((char)0x80);              \
        const block_##W *w[LI_DOT_ROWS];                                                             \
        __m256 acc[LI_DOT_ROWS];                                                                     \
        for (int r = 0; r < NR; r++) {                                                               \
            w[r] = (const block_##W *)(vw + r * rb);                                                 \
            acc[r] = _mm256_setzero_ps();                                                            \
        }                                                                                            \
        for (int64_t i = 0; i < n / 32; i++) {                                                       \
            const __m256i q = _mm256_loadu_si256((const __m256i *)a[i].qs);                         \
            /* -128 * (q summed in the groups of four dpbusd adds) */                                \
            const __m256i start = _mm256_sub_epi32(_mm256_setzero_si256(),                           \
                                                   _mm256_dpbusd_epi32(_mm256_setzero_si256(), bias, q)); \
            for (int r = 0; r < NR; r++) {                                                           \
                const __m256i d = _mm256_dpbusd_epi32(start, lookup_32(table, w[r][i].qs), q);       \
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(scale_##W(&w[r][i]) * as[2 * i]),           \
                                         _mm256_cvtepi32_ps(d), acc[r]);                             \
            }                                                                                        \
        }                                                                                            \
        for (int r = 0; r < NR; r++) s[r] = hsum_ps(acc[r]);                                         \
    }

TABLE32(iq4_nl, li_kvalues_iq4nl)
TABLE32(mxfp4, li_kvalues_mxfp4)

/* IQ4_XS x Q8_K: per super-block s = (d * da) * sum over the 8 sub-blocks of (ls - 32) * dot(x, q) */
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
        __m256i aq[8];   /* |q| of the super-block, for every row */
        for (int sb = 0; sb < 8; sb++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * sb));
            aq[sb] = _mm256_abs_epi8(q);
        }
        for (int r = 0; r < NR; r++) {
            const block_iq4_xs *b = &w[r][i];
            const __m256i ls = iq4_xs_scale_pairs(b);
            __m256i sumi = _mm256_setzero_si256();
            for (int sb = 0; sb < 8; sb++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * sb));
                const __m256i p = _mm256_maddubs_epi16(aq[sb], _mm256_sign_epi8(lookup_32(table, b->qs + 16 * sb), q));
                sumi = _mm256_dpwssd_epi32(sumi, p, scale_pair(ls, sb));
            }
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(b->d) * a[i].d), _mm256_cvtepi32_ps(sumi), acc[r]);
        }
    }
    for (int r = 0; r < NR; r++) s[r] = hsum_ps(acc[r]);
}

#define CALL_IQ4_NL(n, s, vw, rb, va, as, NR) dot_iq4_nl_nr(n, s, vw, rb, va, as, NR)
#define CALL_MXFP4(n, s, vw, rb, va, as, NR) dot_mxfp4_nr(n, s, vw, rb, va, as, NR)
#define CALL_IQ4_XS(n, s, vw, rb, va, as, NR) ((void)(as), dot_iq4_xs_nr(n, s, vw, rb, va, NR))
LI_TABLE_ENTRY_POINTS(iq4_nl, q8_0, avx512, CALL_IQ4_NL)
LI_TABLE_ENTRY_POINTS(mxfp4, q8_0, avx512, CALL_MXFP4)
LI_TABLE_ENTRY_POINTS(iq4_xs, q8_K, avx512, CALL_IQ4_XS)

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
