/* attn_avx512.c -- li_dot_rows_fn in AVX-512 (F): tiles of 4 a-rows x 4 b-rows, sixteen 16-lane
 * accumulators fed by fused multiply-adds (each b vector is loaded once per 4 a-rows and each a
 * vector once per 4 b-rows), each reduced with _mm512_reduce_add_ps (the tree
 * l+8, l+4, l+2, l+1 that tinyBLAS's hsum uses). */
#if defined(__x86_64__) || defined(_M_X64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx2,fma,f16c")
#endif

#include <immintrin.h>

#include "core/li.h"
#include "x86/avx512.h"
#include "x86/reduce_avx512.h"

static inline __attribute__((always_inline)) void reduce_store(__m512 acc[4][4], float *c, int64_t ldc, const int NA,
                                                               const int NB) {
    __m512 v[16];
    for (int o = 0; o < 16; o++) v[o] = (o / 4 < NA && o % 4 < NB) ? acc[o / 4][o % 4] : _mm512_setzero_ps();
    li_reduce16_store(v, c, ldc, NA, NB);
}

static inline __attribute__((always_inline)) void tile(int64_t n, const float *a, int64_t lda, const float *b,
                                                       int64_t ldb, float *c, int64_t ldc, const int NA, const int NB) {
    __m512 acc[4][4];
    for (int i = 0; i < NA; i++)
        for (int j = 0; j < NB; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t l = 0; l < n; l += 16) {
        __m512 bv[4];
        for (int j = 0; j < NB; j++) bv[j] = _mm512_loadu_ps(b + j * ldb + l);
        for (int i = 0; i < NA; i++) {
            const __m512 av = _mm512_loadu_ps(a + i * lda + l);
            for (int j = 0; j < NB; j++) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
        }
    }
    reduce_store(acc, c, ldc, NA, NB);
}

#define TILES(NA)                                                                                   \
    for (; j + 4 <= nb; j += 4) tile(n, a, lda, b + j * ldb, ldb, c + j, ldc, NA, 4);               \
    switch (nb - j) {                                                                               \
    case 3: tile(n, a, lda, b + j * ldb, ldb, c + j, ldc, NA, 3); break;                            \
    case 2: tile(n, a, lda, b + j * ldb, ldb, c + j, ldc, NA, 2); break;                            \
    case 1: tile(n, a, lda, b + j * ldb, ldb, c + j, ldc, NA, 1); break;                            \
    }

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

/* b in f16: the same tiles, b widened in registers */
static inline __attribute__((always_inline)) void tile_f16(int64_t n, const float *a, int64_t lda, const ggml_half *b,
                                                           int64_t ldb, float *c, int64_t ldc, const int NA, const int NB) {
    __m512 acc[4][4];
    for (int i = 0; i < NA; i++)
        for (int j = 0; j < NB; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t l = 0; l < n; l += 16) {
        __m512 bv[4];
        for (int j = 0; j < NB; j++) bv[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + j * ldb + l)));
        for (int i = 0; i < NA; i++) {
            const __m512 av = _mm512_loadu_ps(a + i * lda + l);
            for (int j = 0; j < NB; j++) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
        }
    }
    reduce_store(acc, c, ldc, NA, NB);
}

#define TILES_F16(NA)                                                                               \
    for (; j + 4 <= nb; j += 4) tile_f16(n, a, lda, b + j * ldb, ldb, c + j, ldc, NA, 4);           \
    switch (nb - j) {                                                                               \
    case 3: tile_f16(n, a, lda, b + j * ldb, ldb, c + j, ldc, NA, 3); break;                        \
    case 2: tile_f16(n, a, lda, b + j * ldb, ldb, c + j, ldc, NA, 2); break;                        \
    case 1: tile_f16(n, a, lda, b + j * ldb, ldb, c + j, ldc, NA, 1); break;                        \
    }

void li_dot_rows_f16_avx512(int64_t n, const float *a, int na, int64_t lda, const ggml_half *b, int64_t nb,
                            int64_t ldb, float *c, int64_t ldc) {
    for (; na > 0; na -= 4, a += 4 * lda, c += 4 * ldc) {
        int64_t j = 0;
        switch (na) {
        case 1: TILES_F16(1) break;
        case 2: TILES_F16(2) break;
        case 3: TILES_F16(3) break;
        default: TILES_F16(4) break;
        }
    }
}

/* 32 output columns of up to 4 queries at a time: 8 accumulators, each V chunk loaded once */
static inline __attribute__((always_inline)) void axpy_tile(const float *p, int64_t ldp, const ggml_half *v,
                                                            int64_t nv, int64_t ldv, float *out, int64_t ldo,
                                                            const int NA, const int NC) {
    __m512 acc[4][2];
    for (int i = 0; i < NA; i++)
        for (int c = 0; c < NC; c++) acc[i][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < nv; j++) {
        __m512 vv[2];
        for (int c = 0; c < NC; c++) vv[c] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + j * ldv + 16 * c)));
        for (int i = 0; i < NA; i++) {
            const __m512 pv = _mm512_set1_ps(p[i * ldp + j]);
            for (int c = 0; c < NC; c++) acc[i][c] = _mm512_fmadd_ps(pv, vv[c], acc[i][c]);
        }
    }
    for (int i = 0; i < NA; i++)
        for (int c = 0; c < NC; c++) _mm512_storeu_ps(out + i * ldo + 16 * c, acc[i][c]);
}

#define AXPY(NA)                                                                                   \
    for (e = 0; e + 32 <= n; e += 32) axpy_tile(p, ldp, v + e, nv, ldv, out + e, ldo, NA, 2);      \
    if (e < n) axpy_tile(p, ldp, v + e, nv, ldv, out + e, ldo, NA, 1);

void li_axpy_rows_f16_avx512(int64_t n, const float *p, int na, int64_t ldp, const ggml_half *v, int64_t nv,
                             int64_t ldv, float *out, int64_t ldo) {
    for (; na > 0; na -= 4, p += 4 * ldp, out += 4 * ldo) {
        int64_t e;
        switch (na) {
        case 1: AXPY(1) break;
        case 2: AXPY(2) break;
        case 3: AXPY(3) break;
        default: AXPY(4) break;
        }
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
