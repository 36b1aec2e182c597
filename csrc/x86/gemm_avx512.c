/* gemm_avx512.c -- AVX-512 VNNI GEMM microkernels over the panels of core/panel.c.
 *
 * Integer tile: NW weight rows x NA activation rows, all 16 lanes of a super-group
 * at once. Per step: NW + NA loads feed NW * NA dpbusd (64 multiply-adds each),
 * so a weight vector is loaded once per NA tokens and an activation vector once
 * per NW rows; the float work (convert, scale, accumulate) happens once per
 * super-group of 16 groups. Registers: NW*NA int32 + NW*NA f32 accumulators +
 * NW + NA operands = 31 of 32 for 4 x 3.
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
#include "x86/reduce_avx512.h"

/* the tile shapes (x86/avx512.h) */
#define NW LI_AVX512_Q_NW
#define NA LI_AVX512_Q_NA
#define F_NW LI_AVX512_F_NW   /* the float tile is 4 x 4: li_reduce16_store */
#define F_NA LI_AVX512_F_NA

static inline __attribute__((always_inline)) void sg_tile(const uint8_t *w, size_t w_row, const uint8_t *a,
                                                          size_t a_row, int steps, int has_min,
                                                          __m512 facc[NW][NA]) {
    const int side = steps * 64;
    __m512i isum[NW][NA];
    for (int i = 0; i < NA; i++) {
        const __m512i corr = _mm512_loadu_si512((const void *)(a + i * a_row + side + 64));
        for (int j = 0; j < NW; j++) isum[j][i] = corr;
    }
    for (int s = 0; s < steps; s++) {
        __m512i wv[NW], av[NA];
        for (int j = 0; j < NW; j++) wv[j] = _mm512_loadu_si512((const void *)(w + j * w_row + s * 64));
        for (int i = 0; i < NA; i++) av[i] = _mm512_loadu_si512((const void *)(a + i * a_row + s * 64));
        for (int j = 0; j < NW; j++)
            for (int i = 0; i < NA; i++) isum[j][i] = _mm512_dpbusd_epi32(isum[j][i], wv[j], av[i]);
    }
    for (int j = 0; j < NW; j++) {
        const __m512 dw = _mm512_loadu_ps((const float *)(w + j * w_row + side));
        const __m512 mw = _mm512_loadu_ps((const float *)(w + j * w_row + side + 64));
        for (int i = 0; i < NA; i++) {
            const float *as = (const float *)(a + i * a_row + side);
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(isum[j][i]), dw);
            if (has_min) f = _mm512_fmadd_ps(mw, _mm512_loadu_ps(as + 32), f);   /* sumf */
            facc[j][i] = _mm512_fmadd_ps(f, _mm512_loadu_ps(as), facc[j][i]);      /* da */
        }
    }
}

#define SG(steps, has_min) sg_tile(w + off_w, p->w_row_bytes, a + off_a, p->a_row_bytes, steps, has_min, facc)

void li_gemm_q_avx512(const li_panel_plan *p, const uint8_t *w, const uint8_t *a, int has_min, int offset,
                      int umax, float *y, int64_t ldy, int nw_valid, int na_valid) {
    (void)offset, (void)umax;
    __m512 facc[NW][NA];
    for (int j = 0; j < NW; j++)
        for (int i = 0; i < NA; i++) facc[j][i] = _mm512_setzero_ps();
    size_t off_w = 0, off_a = 0;
    for (int64_t sg = 0; sg < p->n_sg; sg++) {
        const int steps = li_panel_steps(p, sg);
        /* constant arguments, so that each case gets its own fully unrolled loop */
        switch (steps * 2 + (has_min != 0)) {
        case 16: SG(8, 0); break;
        case 17: SG(8, 1); break;
        case 8: SG(4, 0); break;
        case 9: SG(4, 1); break;
        case 4: SG(2, 0); break;
        case 5: SG(2, 1); break;
        case 2: SG(1, 0); break;
        default: SG(1, 1); break;
        }
        off_w += (size_t)steps * 64 + LI_W_SIDE;
        off_a += (size_t)steps * 64 + LI_A_SIDE;
    }
    for (int j = 0; j < nw_valid; j++)
        for (int i = 0; i < na_valid; i++) y[i * ldy + j] = _mm512_reduce_add_ps(facc[j][i]);
}

void li_gemm_f_avx512(int64_t kp, const float *w, const float *a, float *y, int64_t ldy, int nw_valid,
                      int na_valid) {
    __m512 acc[F_NW][F_NA];
    for (int j = 0; j < F_NW; j++)
        for (int i = 0; i < F_NA; i++) acc[j][i] = _mm512_setzero_ps();
    for (int64_t e = 0; e < kp; e += 16) {
        __m512 wv[F_NW], av[F_NA];
        for (int j = 0; j < F_NW; j++) wv[j] = _mm512_loadu_ps(w + j * kp + e);
        for (int i = 0; i < F_NA; i++) av[i] = _mm512_loadu_ps(a + i * kp + e);
        for (int j = 0; j < F_NW; j++)
            for (int i = 0; i < F_NA; i++) acc[j][i] = _mm512_fmadd_ps(wv[j], av[i], acc[j][i]);
    }
    __m512 v[16];   /* y row i = activation row, column j = weight row; padding rows are zero */
    for (int i = 0; i < F_NA; i++)
        for (int j = 0; j < F_NW; j++) v[4 * i + j] = acc[j][i];
    li_reduce16_store(v, y, ldy, na_valid, nw_valid);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
