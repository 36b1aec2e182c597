/* x86/x4_x86.h -- what the AVX2 and AVX-512 dots over repacked x4 groups share (quants_x4_avx2.c,
 * quants_x4_avx512.c). Static inline, so each includer compiles it for its own ISA: include it after
 * the file's `#pragma GCC target`.
 */
#ifndef LI_X86_X4_X86_H
#define LI_X86_X4_X86_H

#include <immintrin.h>

#include "core/li.h"

/* the four rows' fp16 scales times the activation block's {d, d * sum(q)} (a_sums): returns dw * d,
 * and *side += dw * d * sum(q), the sums the offset types (Q4_0's 8, Q8_0's 128 as unsigned) take off */
static inline __m128 x4_scales(const ggml_half *d, const float *as, __m128 *side) {
    const __m128 dw = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)d));
    *side = _mm_fmadd_ps(dw, _mm_set1_ps(as[1]), *side);
    return _mm_mul_ps(dw, _mm_set1_ps(as[0]));
}

#endif /* LI_X86_X4_X86_H */
