/* generic/generic.h -- the portable scalar kernels: the readable statement of what every SIMD
 * variant computes, and the functions the traits table (core/traits.c) and the generic variant's
 * table (generic/generic_table.c) point to. Every SIMD kernel has the signature of the generic
 * one it replaces (ggml's `_generic` convention), and a test compares the two.
 */
#ifndef LI_GENERIC_H
#define LI_GENERIC_H

#include "core/li.h"

extern const li_isa_kernels li_kernels_generic;

/* dequant_generic.c: one row of a type -> f32, bit-identical to the numpy oracle (quant/) */
void dequantize_row_f32(const void *src, float *y, int64_t n);
void dequantize_row_f16(const void *src, float *y, int64_t n);
void dequantize_row_bf16(const void *src, float *y, int64_t n);
void dequantize_row_q4_0(const void *src, float *y, int64_t n);
void dequantize_row_q4_1(const void *src, float *y, int64_t n);
void dequantize_row_q5_0(const void *src, float *y, int64_t n);
void dequantize_row_q5_1(const void *src, float *y, int64_t n);
void dequantize_row_q8_0(const void *src, float *y, int64_t n);
void dequantize_row_q2_K(const void *src, float *y, int64_t n);
void dequantize_row_q3_K(const void *src, float *y, int64_t n);
void dequantize_row_q4_K(const void *src, float *y, int64_t n);
void dequantize_row_q5_K(const void *src, float *y, int64_t n);
void dequantize_row_q6_K(const void *src, float *y, int64_t n);
void dequantize_row_iq4_nl(const void *src, float *y, int64_t n);
void dequantize_row_iq4_xs(const void *src, float *y, int64_t n);
void dequantize_row_mxfp4(const void *src, float *y, int64_t n);
void dequantize_row_tq1_0(const void *src, float *y, int64_t n);
void dequantize_row_tq2_0(const void *src, float *y, int64_t n);
/* IQ4_XS's 8 sub-block scales (ls - 32) and MXFP4's e8m0 scale (ggml_e8m0_to_fp32_half), shared with
 * unpack_generic.c */
void li_iq4_xs_scales(const block_iq4_xs *x, int8_t out[8]);
float li_e8m0_to_fp32_half(uint8_t e);
/* the 256 trits of a TQ1_0 / TQ2_0 block, in element order, as 0..2 (0..3 for TQ2_0's spare code) */
void li_tq1_0_trits(const block_tq1_0 *x, uint8_t t[QK_K]);
void li_tq2_0_trits(const block_tq2_0 *x, uint8_t t[QK_K]);
/* the k-quants' packed scales, shared with unpack_generic.c: Q3_K's 16 six-bit scales (minus 32),
 * and ggml's get_scale_min_k4 for Q4_K / Q5_K */
void li_q3_K_scales(const uint8_t *s, int8_t out[16]);
void li_get_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m);

/* unpack_generic.c: one weight row -> the integer form dw * (u - o) + mw (li_unpack_fn) */
void unpack_q4_0(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_q4_1(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_q5_0(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_q5_1(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_q8_0(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_q2_K(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_q3_K(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_q4_K(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_q5_K(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_q6_K(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_iq4_nl(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_iq4_xs(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_mxfp4(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_tq1_0(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_tq2_0(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);

/* grids_generic.c: the grid i-quants. li_decode_<type>(block, v, dw): the elements as integers v and
 * the f32 scale of each group (G = 32, or 16 for IQ2_XS, IQ2_S, IQ1_M), y = dw[e / G] * v[e] bit for
 * bit; the SIMD dots and the tests share the decoders. */
/* their panel offsets o: u = v + o lies in 0..2o, o the largest |v| (IQ2 grids reach 43, IQ3_XXS's 62,
 * IQ3_S's 15, IQ1's 8 * 1 + 1), so that AVX2's GEMM may add maddubs results in int16 for
 * 32767 / (254 * 2o) steps before widening instead of taking the signed path of o = 128 */
#define LI_O_IQ2 43
#define LI_O_IQ3_XXS 62
#define LI_O_IQ3_S 15
#define LI_O_IQ1 9
typedef void (*li_grid_decode_fn)(const void *block, int8_t v[QK_K], float dw[QK_K / 16]);
void li_decode_iq2_xxs(const void *block, int8_t v[QK_K], float dw[QK_K / 16]);
void li_decode_iq2_xs(const void *block, int8_t v[QK_K], float dw[QK_K / 16]);
void li_decode_iq2_s(const void *block, int8_t v[QK_K], float dw[QK_K / 16]);
void li_decode_iq3_xxs(const void *block, int8_t v[QK_K], float dw[QK_K / 16]);
void li_decode_iq3_s(const void *block, int8_t v[QK_K], float dw[QK_K / 16]);
void li_decode_iq1_s(const void *block, int8_t v[QK_K], float dw[QK_K / 16]);
void li_decode_iq1_m(const void *block, int8_t v[QK_K], float dw[QK_K / 16]);
float li_iq1_m_d(const block_iq1_m *x);   /* IQ1_M's d, assembled from its scale nibbles */
void dequantize_row_iq2_xxs(const void *src, float *y, int64_t n);
void dequantize_row_iq2_xs(const void *src, float *y, int64_t n);
void dequantize_row_iq2_s(const void *src, float *y, int64_t n);
void dequantize_row_iq3_xxs(const void *src, float *y, int64_t n);
void dequantize_row_iq3_s(const void *src, float *y, int64_t n);
void dequantize_row_iq1_s(const void *src, float *y, int64_t n);
void dequantize_row_iq1_m(const void *src, float *y, int64_t n);
void unpack_iq2_xxs(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_iq2_xs(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_iq2_s(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_iq3_xxs(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_iq3_s(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_iq1_s(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_iq1_m(const void *src, int64_t n, uint8_t *u, float *dw, float *mw);

/* quantize_generic.c: activation rows (ggml's reference rounding) */
void quantize_row_q8_0_generic(const float *x, void *dst, int64_t n);
void quantize_row_q4_0_generic(const float *x, void *dst, int64_t n);   /* KV cache rows */
void quantize_row_q8_1_generic(const float *x, void *dst, int64_t n);
void quantize_row_q8_K_generic(const float *x, void *dst, int64_t n);
void quantize_row_f32_generic(const float *x, void *dst, int64_t n);
void quantize_row_f16_generic(const float *x, void *dst, int64_t n);
void quantize_row_bf16_generic(const float *x, void *dst, int64_t n);

/* vec_dot_generic.c: one weight row . one activation row in the weight type's vec_dot_type */
void vec_dot_q4_0_q8_0_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q4_1_q8_1_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q5_0_q8_0_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q5_1_q8_1_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q8_0_q8_0_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q2_K_q8_K_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q3_K_q8_K_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q4_K_q8_K_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q5_K_q8_K_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q6_K_q8_K_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_iq4_nl_q8_0_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_iq4_xs_q8_K_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_mxfp4_q8_0_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_tq1_0_q8_K_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_tq2_0_q8_K_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_iq2_xxs_q8_K_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_iq2_xs_q8_K_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_iq2_s_q8_K_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_iq3_xxs_q8_K_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_iq3_s_q8_K_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_iq1_s_q8_K_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_iq1_m_q8_K_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_f32_f32_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_f16_f16_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_bf16_bf16_generic(int64_t n, float *s, const void *w, const void *a, const float *a_sums);

/* gemm_generic.c: the GEMM tiles over the panels, LI_GENERIC_Q_NW x LI_GENERIC_Q_NA (integer) and
 * LI_GENERIC_F_NW x LI_GENERIC_F_NA (float) */
#define LI_GENERIC_Q_NW 4
#define LI_GENERIC_Q_NA 4
#define LI_GENERIC_F_NW 4
#define LI_GENERIC_F_NA 4
void li_gemm_q_generic(const li_panel_plan *p, const uint8_t *w, const uint8_t *a, int has_min, int offset,
                       int umax, float *y, int64_t ldy, int nw_valid, int na_valid);
void li_gemm_f_generic(int64_t kp, const float *w, const float *a, float *y, int64_t ldy, int nw_valid,
                       int na_valid);

/* attention_generic.c: the attention's row kernels (core/attention.c) */
void li_dot_rows_generic(int64_t n, const float *a, int na, int64_t lda, const float *b, int64_t nb,
                         int64_t ldb, float *c, int64_t ldc);
void li_dot_rows_f16_generic(int64_t n, const float *a, int na, int64_t lda, const ggml_half *b, int64_t nb,
                             int64_t ldb, float *c, int64_t ldc);
void li_axpy_rows_f16_generic(int64_t n, const float *p, int na, int64_t ldp, const ggml_half *v, int64_t nv,
                              int64_t ldv, float *out, int64_t ldo);
void li_softmax_f16_generic(float *p, int64_t n, float scale, float softcap, float sink);
void li_softmax_f32_generic(float *p, int64_t n);
void li_round_f16_generic(const float *x, float *y, int64_t n);
void li_widen_f16_generic(const ggml_half *x, float *y, int64_t n);

/* kv_generic.c: P.V rows of a q8_0 / q4_0 KV cache (core/attention_kv.c) */
void li_axpy_kv_q8_0_generic(int64_t d, const void *v, const float *p, int64_t ldp, int64_t na, float *out);
void li_axpy_kv_q4_0_generic(int64_t d, const void *v, const float *p, int64_t ldp, int64_t na, float *out);

/* act_generic.c: the gated activations (core/ops.c) */
void li_silu_mul_generic(const float *g, const float *u, float *y, int64_t n);
void li_geglu_f16_generic(const float *g, const float *u, float *y, int64_t n, const float *table);

/* norm_generic.c: LayerNorm of a row (core/ops.c's li_layer_norm) */
void li_norm_row_generic(const float *x, const float *w, const float *b, float *y, int64_t n, double eps);

#endif /* LI_GENERIC_H */
