/* x86/q6_K_avx2.h -- one Q6_K super-block's integer dot in AVX2, shared by the row dot and the dot
 * for several activation rows (quants_avx2.c), which unpacks a block once for all of them: both take
 * the same unpacking, scales and offset, so they give the same integers in the same lanes and, with
 * the same float steps after them, the same bits. Static inline: include it after the file's
 * `#pragma GCC target`.
 */
#ifndef LI_X86_Q6_K_AVX2_H
#define LI_X86_Q6_K_AVX2_H

#include <immintrin.h>

#include "core/li.h"

/* shuffle_epi8 mask: int16 lane lo of the low 128-bit half into all 8 of its int16 lanes, lane hi
 * of the high half into all of its */
#define SPLAT16_2(lo, hi) _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 * (2 * (hi) + 1) + 2 * (hi))), \
                                           _mm_set1_epi16((short)(0x0100 * (2 * (lo) + 1) + 2 * (lo))))

/* half h of a super-block: the 6-bit values u (0..63) of its quarter k in u[k], low bits from
 * ql(k%2), high bits 2k..2k+1 of qh moved to bits 4..5 */
static inline __attribute__((always_inline)) void q6_K_unpack_half_avx2(const uint8_t *ql_all, const uint8_t *qh,
                                                                        int h, __m256i u[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const uint8_t *ql = ql_all + 64 * h;
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
    const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    const __m256i hb = _mm256_loadu_si256((const __m256i *)(qh + 32 * h));
    u[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
    u[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
    u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30));
    u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
}

/* scales 8h..8h+7 (of sc8, the block's sixteen) as int16 in both 128-bit halves; quarter k of half h
 * takes 8h+2k in the low half, 8h+2k+1 in the high (q6_K_scale_avx2). The byte shift must be an
 * immediate at any -O (the ASan build is -O1): 0 or 8, not 8 * h. */
static inline __attribute__((always_inline)) __m256i q6_K_scales_half_avx2(__m128i sc8, int h) {
    return _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
}

static inline __attribute__((always_inline)) __m256i q6_K_scale_avx2(__m256i sc16, int k) {
    return _mm256_shuffle_epi8(sc16, SPLAT16_2(2 * k, 2 * k + 1));
}

/* the offset 32 of every 6-bit value, as sum over sub-blocks of scale * bsum (shifted by 5 below) */
static inline __attribute__((always_inline)) __m256i q6_K_offset_avx2(__m128i sc8, const block_q8_K *a) {
    return _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), _mm256_loadu_si256((const __m256i *)a->bsums));
}

/* sum over the super-block of scale * (u - 32) * q as 8 int32 lanes, exact: u = q6 in 0..63 (maddubs
 * pair sums <= 2 * 63 * 128, no saturation), the offset 32 once from the bsums (sum over sub-blocks of
 * scale * 32 * bsum). ql, qh, scales: block_q6_K's fields, wherever the layout puts them. */
static inline __attribute__((always_inline)) __m256i q6_K_sumi_avx2(const uint8_t *ql, const uint8_t *qh,
                                                                    const int8_t *scales, const block_q8_K *a) {
    const __m128i sc8 = _mm_loadu_si128((const __m128i *)scales);
    const __m256i offset = q6_K_offset_avx2(sc8, a);
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        const __m256i sc16 = q6_K_scales_half_avx2(sc8, h);
        __m256i u[4];
        q6_K_unpack_half_avx2(ql, qh, h, u);
        for (int k = 0; k < 4; k++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(a->qs + 128 * h + 32 * k));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(u[k], q), q6_K_scale_avx2(sc16, k)));
        }
    }
    return _mm256_sub_epi32(sumi, _mm256_slli_epi32(offset, 5));
}

/* The same block unpacked once for several activation rows (quants_avx2.c vec_dot_m_q6_K_q8_K_avx2):
 * quarter k of half h in u[4h + k] and scale[4h + k]; q6_K_sumi_unpacked_avx2 then gives an activation
 * block what q6_K_sumi_avx2 gives it (int32 sums: the same in any order). */
typedef struct {
    __m256i u[8], scale[8];
    __m128i sc8;
} q6_K_unpacked_avx2;

static inline __attribute__((always_inline)) void q6_K_unpack_avx2(const uint8_t *ql, const uint8_t *qh,
                                                                   const int8_t *scales, q6_K_unpacked_avx2 *p) {
    p->sc8 = _mm_loadu_si128((const __m128i *)scales);
    for (int h = 0; h < 2; h++) {
        const __m256i sc16 = q6_K_scales_half_avx2(p->sc8, h);
        q6_K_unpack_half_avx2(ql, qh, h, p->u + 4 * h);
        for (int k = 0; k < 4; k++) p->scale[4 * h + k] = q6_K_scale_avx2(sc16, k);
    }
}

static inline __attribute__((always_inline)) __m256i q6_K_sumi_unpacked_avx2(const q6_K_unpacked_avx2 *p,
                                                                             const block_q8_K *a) {
    const __m256i offset = q6_K_offset_avx2(p->sc8, a);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(a->qs + 32 * j));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(p->u[j], q), p->scale[j]));
    }
    return _mm256_sub_epi32(sumi, _mm256_slli_epi32(offset, 5));
}

#endif /* LI_X86_Q6_K_AVX2_H */
