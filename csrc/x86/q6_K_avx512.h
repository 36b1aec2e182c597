/* x86/q6_K_avx512.h -- the Q6_K unpack both AVX-512 dots share: the row dot (quants_avx512.c) and the
 * x4 group dot (quants_x4_avx512.c), which must give the row dot's bits. Static inline, so include it
 * after the file's `#pragma GCC target`.
 */
#ifndef LI_X86_Q6_K_AVX512_H
#define LI_X86_Q6_K_AVX512_H

#include <immintrin.h>

#include "core/li.h"

/* Half h of a super-block: 64 bytes of ql and 32 of qh -> the 6-bit quants (u <= 63) of elements
 * 0..127 as *u01 (the low nibbles: elements 0..63) and *u23 (the high nibbles: 64..127). */
static inline __attribute__((always_inline)) void q6_K_unpack_half(const uint8_t *ql, const uint8_t *qh,
                                                                   __m512i *u01, __m512i *u23) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    /* high bits of quarter k sit at bits 2k..2k+1 of qh; move them to bits 4..5 */
    const __m512i shl01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr23 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    const __m512i l = _mm512_loadu_si512((const void *)ql);
    const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh));
    *u01 = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi16(hb, shl01), m30));
    *u23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                           _mm512_and_si512(_mm512_srlv_epi16(hb, shr23), m30));
}

#endif /* LI_X86_Q6_K_AVX512_H */
