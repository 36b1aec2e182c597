/* gemm_avx512.c -- AVX-512 VNNI GEMM microkernels over the panels of panel.c, and the table.
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
#include "x86/reduce_avx512.h"

#ifndef NW
#define NW 4
#endif
#ifndef NA
#define NA 3
#endif
#define F_NW 4   /* the float tile is 4 x 4: li_reduce16_store */
#define F_NA 4

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

#define DECLARE_DOT(w, a, isa) void vec_dot_##w##_##a##_##isa(int64_t, float *, const void *, const void *, const float *);
DECLARE_DOT(q4_0, q8_0, avx512) DECLARE_DOT(q4_1, q8_1, avx512) DECLARE_DOT(q5_0, q8_0, avx512)
DECLARE_DOT(q5_1, q8_1, avx512) DECLARE_DOT(q8_0, q8_0, avx512) DECLARE_DOT(q4_K, q8_K, avx512)
DECLARE_DOT(q6_K, q8_K, avx512) DECLARE_DOT(f16, f16, avx512) DECLARE_DOT(f32, f32, avx512)
#define DECLARE_DOT_ROWS(w, a) void vec_dot_rows_##w##_##a##_avx512(int64_t, float *, const void *, size_t, int, const void *, const float *);
DECLARE_DOT_ROWS(q4_0, q8_0) DECLARE_DOT_ROWS(q4_1, q8_1) DECLARE_DOT_ROWS(q5_0, q8_0) DECLARE_DOT_ROWS(q5_1, q8_1)
DECLARE_DOT_ROWS(q8_0, q8_0)
void quantize_row_q8_0_avx2(const float *, void *, int64_t);
void quantize_row_q8_1_avx2(const float *, void *, int64_t);
void quantize_row_q8_K_avx2(const float *, void *, int64_t);

#define DECLARE_UNPACK(t) void unpack_##t##_avx2(const void *, int64_t, uint8_t *, float *, float *);
DECLARE_UNPACK(q4_0) DECLARE_UNPACK(q4_1) DECLARE_UNPACK(q5_0) DECLARE_UNPACK(q8_0) DECLARE_UNPACK(q4_K)
DECLARE_UNPACK(q6_K)
void li_panel_pack_w_avx2(const li_panel_plan *, const uint8_t *, const float *, const float *, uint8_t *);

void li_dot_rows_avx512(int64_t, const float *, int, int64_t, const float *, int64_t, int64_t, float *, int64_t);
void li_softmax_f16_avx2(float *, int64_t, float, float);
void dequantize_row_f16_avx2(const void *, float *, int64_t);
void quantize_row_f16_avx2(const float *, void *, int64_t);
void li_silu_mul_avx2(const float *, const float *, float *, int64_t);
void li_geglu_f16_avx2(const float *, const float *, float *, int64_t, const float *);
void li_dot_rows_f16_avx512(int64_t, const float *, int, int64_t, const ggml_half *, int64_t, int64_t, float *, int64_t);
void li_axpy_rows_f16_avx512(int64_t, const float *, int, int64_t, const ggml_half *, int64_t, int64_t, float *, int64_t);
void li_round_f16_avx2(const float *, float *, int64_t);
void li_widen_f16_avx2(const ggml_half *, float *, int64_t);

const li_isa_kernels li_kernels_avx512 = {
    .name = "avx512",
    .vec_dot = {
        [LI_TYPE_Q4_0] = vec_dot_q4_0_q8_0_avx512, [LI_TYPE_Q4_1] = vec_dot_q4_1_q8_1_avx512,
        [LI_TYPE_Q5_0] = vec_dot_q5_0_q8_0_avx512, [LI_TYPE_Q5_1] = vec_dot_q5_1_q8_1_avx512,
        [LI_TYPE_Q8_0] = vec_dot_q8_0_q8_0_avx512, [LI_TYPE_Q4_K] = vec_dot_q4_K_q8_K_avx512,
        [LI_TYPE_Q6_K] = vec_dot_q6_K_q8_K_avx512, [LI_TYPE_F16] = vec_dot_f16_f16_avx512,
        [LI_TYPE_F32] = vec_dot_f32_f32_avx512,
    },
    .vec_dot_rows = {
        [LI_TYPE_Q4_0] = vec_dot_rows_q4_0_q8_0_avx512, [LI_TYPE_Q4_1] = vec_dot_rows_q4_1_q8_1_avx512,
        [LI_TYPE_Q5_0] = vec_dot_rows_q5_0_q8_0_avx512, [LI_TYPE_Q5_1] = vec_dot_rows_q5_1_q8_1_avx512,
        [LI_TYPE_Q8_0] = vec_dot_rows_q8_0_q8_0_avx512,
    },
    .from_float = {   /* the AVX2 quantizers: 8 lanes are plenty for O(k) work */
        [LI_TYPE_Q8_0] = quantize_row_q8_0_avx2, [LI_TYPE_Q8_1] = quantize_row_q8_1_avx2,
        [LI_TYPE_Q8_K] = quantize_row_q8_K_avx2, [LI_TYPE_F16] = quantize_row_f16_avx2,
    },
    .dequantize = {[LI_TYPE_F16] = dequantize_row_f16_avx2},
    .unpack = {
        [LI_TYPE_Q4_0] = unpack_q4_0_avx2, [LI_TYPE_Q4_1] = unpack_q4_1_avx2, [LI_TYPE_Q5_0] = unpack_q5_0_avx2,
        [LI_TYPE_Q8_0] = unpack_q8_0_avx2, [LI_TYPE_Q4_K] = unpack_q4_K_avx2, [LI_TYPE_Q6_K] = unpack_q6_K_avx2,
    },
    .pack_w = li_panel_pack_w_avx2,
    .gemm_q = li_gemm_q_avx512, .q_nw = NW, .q_na = NA,
    .gemm_f = li_gemm_f_avx512, .f_nw = F_NW, .f_na = F_NA,
    .dot_rows = li_dot_rows_avx512, .dot_rows_f16 = li_dot_rows_f16_avx512, .axpy_rows_f16 = li_axpy_rows_f16_avx512,
    .softmax_f16 = li_softmax_f16_avx2, .round_f16 = li_round_f16_avx2,
    .widen_f16 = li_widen_f16_avx2, .silu_mul = li_silu_mul_avx2,
    .geglu_f16 = li_geglu_f16_avx2,
};

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
