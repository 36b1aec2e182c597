/* reduce_avx512.h -- included by AVX-512 files after their target pragma. */
#ifndef LI_REDUCE_AVX512_H
#define LI_REDUCE_AVX512_H

#include <immintrin.h>
#include <stdint.h>

/* The 16 sums of a 4 x 4 tile at once: v[4 i + j], the 16-lane accumulator of c[i * ldc + j],
 * reduced by the tree l+8, l+4, l+2, l+1 (the pairs _mm512_reduce_add_ps adds, so the sums are
 * the same bits), but 16 accumulators share
 * each shuffle and add: 15 adds for the tile instead of 4 per sum. Stage by stage the vectors
 * interleave the tile's sums; the last one holds sum (i, j) in lane TREE_LANE[4 i + j]. Entries
 * outside NA x NB must be zero vectors; nothing of theirs is stored. */
static inline __attribute__((always_inline)) void li_reduce16_store(const __m512 v[16], float *c, int64_t ldc,
                                                                    const int NA, const int NB) {
    __m512 s8[8], s4[4], s2[2];
    for (int p = 0; p < 8; p++)   /* lanes e + e+8 */
        s8[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int p = 0; p < 4; p++)   /* e + e+4 */
        s4[p] = _mm512_add_ps(_mm512_shuffle_f32x4(s8[2 * p], s8[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_f32x4(s8[2 * p], s8[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int p = 0; p < 2; p++)   /* e + e+2 */
        s2[p] = _mm512_add_ps(_mm512_shuffle_ps(s4[2 * p], s4[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_ps(s4[2 * p], s4[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 s1 = _mm512_add_ps(_mm512_shuffle_ps(s2[0], s2[1], _MM_SHUFFLE(2, 0, 2, 0)),   /* e + e+1 */
                                    _mm512_shuffle_ps(s2[0], s2[1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* the stages leave sum (i, j) in lane 4 j + i: transpose back */
    static const int TREE_LANE[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
    const __m512 r = _mm512_permutexvar_ps(_mm512_loadu_si512((const void *)TREE_LANE), s1);
    const __mmask16 row = (__mmask16)((1u << NB) - 1);
    for (int i = 0; i < NA; i++)
        _mm512_mask_storeu_ps(c + i * ldc - 4 * i, (__mmask16)(row << (4 * i)), r);
}

#endif /* LI_REDUCE_AVX512_H */
