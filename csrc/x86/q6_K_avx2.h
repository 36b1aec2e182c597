/* x86/q6_K_avx2.h -- one Q6_K super-block's integer dot in AVX2, shared by the row dot
 * (quants_avx2.c) and the dot over repacked x4 groups (quants_x4_avx2.c), so that the two give the
 * same integers in the same lanes and, with the same float steps after them, the same bits. Static
 * inline: include it after the file's `#pragma GCC target`.
 */
#ifndef LI_X86_Q6_K_AVX2_H
#define LI_X86_Q6_K_AVX2_H

#include <immintrin.h>

#include "core/li.h"

/* shuffle_epi8 mask: int16 lane lo of the low 128-bit half into all 8 of its int16 lanes, lane hi
 * of the high half into all of its */
#define SPLAT16_2(lo, hi) _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 * (2 * (hi) + 1) + 2 * (hi))), \
                                           _mm_set1_epi16((short)(0x0100 * (2 * (lo) + 1) + 2 * (lo))))

/* sum over the super-block of scale * (u - 32) * q as 8 int32 lanes, exact: u = q6 in 0..63 (maddubs
 * pair sums <= 2 * 63 * 128, no saturation), the offset 32 once from the bsums (sum over sub-blocks of
 * scale * 32 * bsum). ql, qh, scales: block_q6_K's fields, wherever the layout puts them. */
static inline __attribute__((always_inline)) __m256i q6_K_sumi_avx2(const uint8_t *ql_all, const uint8_t *qh,
                                                                    const int8_t *scales, const block_q8_K *a) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m128i sc8 = _mm_loadu_si128((const __m128i *)scales);
    const __m256i offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), _mm256_loadu_si256((const __m256i *)a->bsums));
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = ql_all + 64 * h;
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(qh + 32 * h));
        /* scales 8h..8h+7 as int16 in both halves; quarter k takes 8h+2k (low half), 8h+2k+1 (high).
         * The byte shift must be an immediate at any -O (the ASan build is -O1): 0 or 8, not 8 * h. */
        const __m128i sc8h = h ? _mm_srli_si128(sc8, 8) : sc8;
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8h));
        __m256i u[4];   /* quarter k: low bits from l(k%2), high bits 2k..2k+1 of hb, to bits 4..5 */
        u[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
        u[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
        u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30));
        u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                               _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
        for (int k = 0; k < 4; k++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(a->qs + 128 * h + 32 * k));
            const __m256i scale = _mm256_shuffle_epi8(sc16, SPLAT16_2(2 * k, 2 * k + 1));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(u[k], q), scale));
        }
    }
    return _mm256_sub_epi32(sumi, _mm256_slli_epi32(offset, 5));
}

#endif /* LI_X86_Q6_K_AVX2_H */
