/* attn_avx512.c -- li_dot_rows_fn in AVX-512 (F): tiles of 4 a-rows x 2 b-rows, eight 16-lane
 * accumulators fed by fused multiply-adds, each reduced with _mm512_reduce_add_ps (the tree
 * l+8, l+4, l+2, l+1 that tinyBLAS's hsum uses). */
#if defined(__x86_64__) || defined(_M_X64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx2,fma,f16c")
#endif

#include <immintrin.h>

#include "li.h"

static inline __attribute__((always_inline)) void tile(int64_t n, const float *a, int64_t lda, const float *b,
                                                       int64_t ldb, float *c, int64_t ldc, const int NA, const int NB) {
    __m512 acc[4][2];
    for (int i = 0; i < NA; i++)
        for (int j = 0; j < NB; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t l = 0; l < n; l += 16) {
        __m512 bv[2];
        for (int j = 0; j < NB; j++) bv[j] = _mm512_loadu_ps(b + j * ldb + l);
        for (int i = 0; i < NA; i++) {
            const __m512 av = _mm512_loadu_ps(a + i * lda + l);
            for (int j = 0; j < NB; j++) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
        }
    }
    for (int i = 0; i < NA; i++)
        for (int j = 0; j < NB; j++) c[i * ldc + j] = _mm512_reduce_add_ps(acc[i][j]);
}

#define TILES(NA)                                                                                   \
    for (; j + 2 <= nb; j += 2) tile(n, a, lda, b + j * ldb, ldb, c + j, ldc, NA, 2);               \
    if (j < nb) tile(n, a, lda, b + j * ldb, ldb, c + j, ldc, NA, 1);

void li_dot_rows_avx512(int64_t n, const float *a, int na, int64_t lda, const float *b, int64_t nb,
                        int64_t ldb, float *c, int64_t ldc) {
    for (; na > 0; na -= 4, a += 4 * lda, c += 4 * ldc) {
        int64_t j = 0;
        switch (na) {
        case 1: TILES(1) break;
        case 2: TILES(2) break;
        case 3: TILES(3) break;
        default: TILES(4) break;
        }
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
