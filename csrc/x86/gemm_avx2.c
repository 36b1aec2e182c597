/* gemm_avx2.c -- AVX2 GEMM microkernels over the panels of panel.c, and the AVX2 kernel table.
 *
 * Integer tile: NW weight rows x NA activation rows. A 16-lane super-group is done
 * as two 8-lane halves. Plain AVX2 multiplies u8 x s8 with maddubs into s16 pair
 * sums; those are added up in s16 for as many steps as cannot overflow
 * (32767 / (2 * 127 * umax): 8 steps for 4-bit types, 4 for 5-bit, 2 for Q6_K) and
 * only then widened with madd, which halves the work for the common types.
 * Q8_0's u = q + 128 does not fit maddubs: it takes the abs/sign path on q.
 */
#if defined(__x86_64__) || defined(_M_X64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>

#include "core/li.h"

/* 4 x 3: 12 products per step for 7 loads (2 x 2 was 4 for 4), the maddubs no longer waiting on
 * the loads; 4 x 3, 3 x 4 and 3 x 3 measured alike (within a few %), 2 x 2 about 15 % slower for
 * every type. NA = 3 keeps small batches (m = 6, 9) unpadded. The tile shape changes no sum. */
#define NW 4
#define NA 3
#define F_NW 4
#define F_NA 2

static inline float hsum_ps(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* One 8-lane half of a super-group for the whole tile. `flush`: steps summed in s16
 * before widening (0: Q8_0's signed path). Offsets are within a row; rows are
 * w_row / a_row bytes apart. */
static inline __attribute__((always_inline)) void sg_half(const uint8_t *w, size_t w_row, const uint8_t *a,
                                                          size_t a_row, int steps, int flush, int has_min,
                                                          __m256 facc[NW][NA]) {
    const __m256i ones = _mm256_set1_epi16(1);
    const int side = steps * 64;
    __m256i isum[NW][NA];
    for (int j = 0; j < NW; j++)
        for (int i = 0; i < NA; i++)
            isum[j][i] = flush ? _mm256_loadu_si256((const __m256i *)(a + i * a_row + side + 64))  /* corr */
                               : _mm256_setzero_si256();
    if (flush) {
        for (int s0 = 0; s0 < steps; s0 += flush) {
            __m256i acc16[NW][NA];
            for (int j = 0; j < NW; j++)
                for (int i = 0; i < NA; i++) acc16[j][i] = _mm256_setzero_si256();
            const int s1 = s0 + flush < steps ? s0 + flush : steps;
            for (int s = s0; s < s1; s++) {
                __m256i wv[NW], av[NA];
                for (int j = 0; j < NW; j++) wv[j] = _mm256_loadu_si256((const __m256i *)(w + j * w_row + s * 64));
                for (int i = 0; i < NA; i++) av[i] = _mm256_loadu_si256((const __m256i *)(a + i * a_row + s * 64));
                for (int j = 0; j < NW; j++)
                    for (int i = 0; i < NA; i++)
                        acc16[j][i] = _mm256_add_epi16(acc16[j][i], _mm256_maddubs_epi16(wv[j], av[i]));
            }
            for (int j = 0; j < NW; j++)
                for (int i = 0; i < NA; i++)
                    isum[j][i] = _mm256_add_epi32(isum[j][i], _mm256_madd_epi16(acc16[j][i], ones));
        }
    } else {
        const __m256i flip = _mm256_set1_epi8((char)0x80);
        for (int s = 0; s < steps; s++) {
            __m256i wq[NW], wa[NW];
            for (int j = 0; j < NW; j++) {
                wq[j] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(w + j * w_row + s * 64)), flip);
                wa[j] = _mm256_sign_epi8(wq[j], wq[j]);
            }
            for (int i = 0; i < NA; i++) {
                const __m256i av = _mm256_loadu_si256((const __m256i *)(a + i * a_row + s * 64));
                for (int j = 0; j < NW; j++) {
                    const __m256i p = _mm256_maddubs_epi16(wa[j], _mm256_sign_epi8(av, wq[j]));
                    isum[j][i] = _mm256_add_epi32(isum[j][i], _mm256_madd_epi16(p, ones));
                }
            }
        }
    }
    for (int j = 0; j < NW; j++) {
        const __m256 dw = _mm256_loadu_ps((const float *)(w + j * w_row + side));
        const __m256 mw = _mm256_loadu_ps((const float *)(w + j * w_row + side + 64));
        for (int i = 0; i < NA; i++) {
            const float *as = (const float *)(a + i * a_row + side);
            __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(isum[j][i]), dw);
            if (has_min) f = _mm256_fmadd_ps(mw, _mm256_loadu_ps(as + 32), f);   /* sumf */
            facc[j][i] = _mm256_fmadd_ps(f, _mm256_loadu_ps(as), facc[j][i]);      /* da */
        }
    }
}

#define SG(steps, flush, has_min) \
    sg_half(w + off_w + h * 32, p->w_row_bytes, a + off_a + h * 32, p->a_row_bytes, steps, flush, has_min, facc)

void li_gemm_q_avx2(const li_panel_plan *p, const uint8_t *w, const uint8_t *a, int has_min, int offset,
                    int umax, float *y, int64_t ldy, int nw_valid, int na_valid) {
    (void)offset;
    const int flush = umax > 127 ? 0 : 32767 / (254 * (umax > 0 ? umax : 1));
    __m256 facc[NW][NA];
    for (int j = 0; j < NW; j++)
        for (int i = 0; i < NA; i++) facc[j][i] = _mm256_setzero_ps();
    size_t off_w = 0, off_a = 0;
    for (int64_t sg = 0; sg < p->n_sg; sg++) {
        const int steps = li_panel_steps(p, sg);
        for (int h = 0; h < 2; h++) {
            /* constant arguments for the common cases, so each gets its own unrolled loop */
            if (steps == 8 && flush == 8 && has_min) SG(8, 8, 1);          /* Q4_1, Q4_K */
            else if (steps == 8 && flush == 8 && !has_min) SG(8, 8, 0);    /* Q4_0 */
            else if (steps == 8 && flush == 4 && !has_min) SG(8, 4, 0);    /* Q5_0 */
            else if (steps == 4 && flush == 2 && !has_min) SG(4, 2, 0);    /* Q6_K */
            else if (flush == 0) SG(steps, 0, 0);                          /* Q8_0 */
            else SG(steps, flush, has_min);
        }
        off_w += (size_t)steps * 64 + LI_W_SIDE;
        off_a += (size_t)steps * 64 + LI_A_SIDE;
    }
    for (int j = 0; j < nw_valid; j++)
        for (int i = 0; i < na_valid; i++) y[i * ldy + j] = hsum_ps(facc[j][i]);
}

void li_gemm_f_avx2(int64_t kp, const float *w, const float *a, float *y, int64_t ldy, int nw_valid,
                    int na_valid) {
    __m256 acc[F_NW][F_NA];
    for (int j = 0; j < F_NW; j++)
        for (int i = 0; i < F_NA; i++) acc[j][i] = _mm256_setzero_ps();
    for (int64_t e = 0; e < kp; e += 8) {
        __m256 av[F_NA];
        for (int i = 0; i < F_NA; i++) av[i] = _mm256_loadu_ps(a + i * kp + e);
        for (int j = 0; j < F_NW; j++) {
            const __m256 wv = _mm256_loadu_ps(w + j * kp + e);
            for (int i = 0; i < F_NA; i++) acc[j][i] = _mm256_fmadd_ps(wv, av[i], acc[j][i]);
        }
    }
    for (int j = 0; j < nw_valid; j++)
        for (int i = 0; i < na_valid; i++) y[i * ldy + j] = hsum_ps(acc[j][i]);
}

#define DECLARE_DOT(w, a) void vec_dot_##w##_##a##_avx2(int64_t, float *, const void *, const void *, const float *);
DECLARE_DOT(q4_0, q8_0) DECLARE_DOT(q4_1, q8_1) DECLARE_DOT(q5_0, q8_0) DECLARE_DOT(q5_1, q8_1)
DECLARE_DOT(q8_0, q8_0) DECLARE_DOT(q4_K, q8_K) DECLARE_DOT(q6_K, q8_K) DECLARE_DOT(f16, f16)
DECLARE_DOT(f32, f32)
#define DECLARE_DOT_ROWS(w, a) \
    void vec_dot_rows_##w##_##a##_avx2(int64_t, float *, const void *, size_t, int, const void *, const float *);
DECLARE_DOT_ROWS(q4_0, q8_0) DECLARE_DOT_ROWS(q4_1, q8_1) DECLARE_DOT_ROWS(q5_0, q8_0) DECLARE_DOT_ROWS(q5_1, q8_1)
DECLARE_DOT_ROWS(q8_0, q8_0) DECLARE_DOT_ROWS(q4_K, q8_K) DECLARE_DOT_ROWS(q6_K, q8_K)
void quantize_row_q8_0_avx2(const float *, void *, int64_t);
void quantize_row_q8_1_avx2(const float *, void *, int64_t);
void quantize_row_q8_K_avx2(const float *, void *, int64_t);

#define DECLARE_UNPACK(t) void unpack_##t##_avx2(const void *, int64_t, uint8_t *, float *, float *);
DECLARE_UNPACK(q4_0) DECLARE_UNPACK(q4_1) DECLARE_UNPACK(q5_0) DECLARE_UNPACK(q8_0) DECLARE_UNPACK(q4_K)
DECLARE_UNPACK(q6_K)
void li_panel_pack_w_avx2(const li_panel_plan *, const uint8_t *, const float *, const float *, uint8_t *);

void li_dot_rows_avx2(int64_t, const float *, int, int64_t, const float *, int64_t, int64_t, float *, int64_t);
void li_softmax_f16_avx2(float *, int64_t, float, float);
void dequantize_row_f16_avx2(const void *, float *, int64_t);
void quantize_row_f16_avx2(const float *, void *, int64_t);
void li_silu_mul_avx2(const float *, const float *, float *, int64_t);
void li_geglu_f16_avx2(const float *, const float *, float *, int64_t, const float *);
void li_dot_rows_f16_avx2(int64_t, const float *, int, int64_t, const ggml_half *, int64_t, int64_t, float *, int64_t);
void li_axpy_rows_f16_avx2(int64_t, const float *, int, int64_t, const ggml_half *, int64_t, int64_t, float *, int64_t);
void li_round_f16_avx2(const float *, float *, int64_t);
void li_widen_f16_avx2(const ggml_half *, float *, int64_t);

const li_isa_kernels li_kernels_avx2 = {
    .name = "avx2",
    .vec_dot = {
        [LI_TYPE_Q4_0] = vec_dot_q4_0_q8_0_avx2, [LI_TYPE_Q4_1] = vec_dot_q4_1_q8_1_avx2,
        [LI_TYPE_Q5_0] = vec_dot_q5_0_q8_0_avx2, [LI_TYPE_Q5_1] = vec_dot_q5_1_q8_1_avx2,
        [LI_TYPE_Q8_0] = vec_dot_q8_0_q8_0_avx2, [LI_TYPE_Q4_K] = vec_dot_q4_K_q8_K_avx2,
        [LI_TYPE_Q6_K] = vec_dot_q6_K_q8_K_avx2, [LI_TYPE_F16] = vec_dot_f16_f16_avx2,
        [LI_TYPE_F32] = vec_dot_f32_f32_avx2,
    },
    .vec_dot_rows = {
        [LI_TYPE_Q4_0] = vec_dot_rows_q4_0_q8_0_avx2, [LI_TYPE_Q4_1] = vec_dot_rows_q4_1_q8_1_avx2,
        [LI_TYPE_Q5_0] = vec_dot_rows_q5_0_q8_0_avx2, [LI_TYPE_Q5_1] = vec_dot_rows_q5_1_q8_1_avx2,
        [LI_TYPE_Q8_0] = vec_dot_rows_q8_0_q8_0_avx2, [LI_TYPE_Q4_K] = vec_dot_rows_q4_K_q8_K_avx2,
        [LI_TYPE_Q6_K] = vec_dot_rows_q6_K_q8_K_avx2,
    },
    .from_float = {
        [LI_TYPE_Q8_0] = quantize_row_q8_0_avx2, [LI_TYPE_Q8_1] = quantize_row_q8_1_avx2,
        [LI_TYPE_Q8_K] = quantize_row_q8_K_avx2, [LI_TYPE_F16] = quantize_row_f16_avx2,
    },
    .dequantize = {[LI_TYPE_F16] = dequantize_row_f16_avx2},
    .unpack = {
        [LI_TYPE_Q4_0] = unpack_q4_0_avx2, [LI_TYPE_Q4_1] = unpack_q4_1_avx2, [LI_TYPE_Q5_0] = unpack_q5_0_avx2,
        [LI_TYPE_Q8_0] = unpack_q8_0_avx2, [LI_TYPE_Q4_K] = unpack_q4_K_avx2, [LI_TYPE_Q6_K] = unpack_q6_K_avx2,
    },
    .pack_w = li_panel_pack_w_avx2,
    .gemm_q = li_gemm_q_avx2, .q_nw = NW, .q_na = NA,
    .gemm_f = li_gemm_f_avx2, .f_nw = F_NW, .f_na = F_NA,
    .dot_rows = li_dot_rows_avx2, .dot_rows_f16 = li_dot_rows_f16_avx2, .axpy_rows_f16 = li_axpy_rows_f16_avx2,
    .softmax_f16 = li_softmax_f16_avx2, .round_f16 = li_round_f16_avx2,
    .widen_f16 = li_widen_f16_avx2, .silu_mul = li_silu_mul_avx2,
    .geglu_f16 = li_geglu_f16_avx2,
};

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
