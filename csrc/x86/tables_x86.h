/* x86/tables_x86.h -- the pieces of the table types' dots (IQ4_NL, IQ4_XS, MXFP4) that the AVX2
 * and the AVX-512 kernels share: the 16-entry lookup and the scales.
 *
 * Static inline, so each includer compiles them for its own ISA: include it after the file's
 * `#pragma GCC target` (quants_tables_avx2.c, quants_tables_avx512.c).
 */
#ifndef LI_X86_TABLES_X86_H
#define LI_X86_TABLES_X86_H

#include <immintrin.h>
#include <string.h>

#include "core/li.h"

/* the 16 table values in both 128-bit halves (shuffle_epi8 looks up within a half) */
static inline __m256i table_256(const int8_t *t) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)t));
}

/* 16 bytes of nibbles -> the 32 table values in element order (low nibbles, then high) */
static inline __m256i lookup_32(__m256i table, const uint8_t *qs) {
    const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(q, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                                         _mm256_set1_epi8(0x0F));
    return _mm256_shuffle_epi8(table, idx);
}

static inline float scale_iq4_nl(const block_iq4_nl *b) { return _cvtsh_ss(b->d); }
static inline float scale_mxfp4(const block_mxfp4 *b) {   /* ggml_e8m0_to_fp32_half */
    return li_bits_to_f32(b->e < 2 ? 0x00200000u << b->e : (uint32_t)(b->e - 1) << 23);
}

/* An IQ4_XS block's 8 sub-block scales ls - 32 (6 bits: a nibble of scales_l, 2 bits of
 * scales_h), lane sb holding {ls, ls} as two int16: _mm256_permutevar8x32_epi32(this, sb)
 * is the madd_epi16 multiplier of sub-block sb. Unpacked in registers once per block and row:
 * per sub-block it is then one permute instead of a scalar unpack and a broadcast. */
static inline __m256i iq4_xs_scale_pairs(const block_iq4_xs *b) {
    uint32_t l;
    memcpy(&l, b->scales_l, 4);
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)l),
                                                          _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                        _mm256_set1_epi32(0xF));
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b->scales_h),
                                                          _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                        _mm256_set1_epi32(3));
    const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    return _mm256_or_si256(_mm256_and_si256(ls, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(ls, 16));
}

static inline __m256i scale_pair(__m256i pairs, int sb) {
    return _mm256_permutevar8x32_epi32(pairs, _mm256_set1_epi32(sb));
}

/* The li_vec_dot_fn and li_vec_dot_rows_fn entry points of one table type for one ISA suffix: CALL(n,
 * s, vw, rb, va, as, NR) with NR a constant in each call, so each row count compiles its own loop. */
#define LI_TABLE_ENTRY_POINTS(W, A, ISA, CALL)                                                        \
    void vec_dot_##W##_##A##_##ISA(int64_t n, float *s, const void *vw, const void *va, const float *as) { \
        CALL(n, s, vw, 0, va, as, 1);                                                                \
    }                                                                                                \
    void vec_dot_rows_##W##_##A##_##ISA(int64_t n, float *s, const void *vw, size_t rb, int nr, const void *va, \
                                        const float *as) {                                           \
        switch (nr) {                                                                                \
        case 1: CALL(n, s, vw, rb, va, as, 1); break;                                                \
        case 2: CALL(n, s, vw, rb, va, as, 2); break;                                                \
        case 3: CALL(n, s, vw, rb, va, as, 3); break;                                                \
        default: CALL(n, s, vw, rb, va, as, 4); break;                                               \
        }                                                                                            \
    }

#endif /* LI_X86_TABLES_X86_H */
