/* x86/avx2.h -- the AVX2 (+FMA, F16C) kernels: everything the avx2 table (x86/avx2_table.c) points
 * to, by the file that defines it, and the GEMM tile shapes. Each function fills one slot of
 * li_isa_kernels (core/li.h) and has that slot's signature; the sources include this header, so a
 * definition that drifts from it does not compile. The avx512 table reuses some of these.
 */
#ifndef LI_X86_AVX2_H
#define LI_X86_AVX2_H

#include "core/li.h"

extern const li_isa_kernels li_kernels_avx2;

/* kv_avx2.c: P.V rows of a q8_0 / q4_0 KV cache (bit for bit the generic ones; the avx512 table uses them too) */
void li_axpy_kv_q8_0_avx2(int64_t d, const void *v, const float *p, int64_t ldp, int64_t na, float *out);
void li_axpy_kv_q4_0_avx2(int64_t d, const void *v, const float *p, int64_t ldp, int64_t na, float *out);

/* quants_avx2.c: activation quantizers and the dot products (one row, and LI_DOT_ROWS rows at once
 * except Q4_K and Q6_K: see avx2_table.c) */
void quantize_row_q8_0_avx2(const float *x, void *dst, int64_t n);
void quantize_row_q8_1_avx2(const float *x, void *dst, int64_t n);
void quantize_row_q8_K_avx2(const float *x, void *dst, int64_t n);
void vec_dot_q4_0_q8_0_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q4_1_q8_1_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q5_0_q8_0_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q5_1_q8_1_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q8_0_q8_0_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q4_K_q8_K_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q6_K_q8_K_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_m_q6_K_q8_K_avx2(int64_t n, int64_t m, float *s, int64_t s_stride, const void *w, const void *a,
                              size_t a_stride, const float *a_sums, int64_t sums_stride);
void vec_dot_f16_f16_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_f32_f32_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_q4_0_q8_0_avx2(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                 const float *a_sums);
void vec_dot_rows_q4_1_q8_1_avx2(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                 const float *a_sums);
void vec_dot_rows_q5_0_q8_0_avx2(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                 const float *a_sums);
void vec_dot_rows_q5_1_q8_1_avx2(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                 const float *a_sums);
void vec_dot_rows_q8_0_q8_0_avx2(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                 const float *a_sums);

/* quants_tables_avx2.c: the table types (IQ4_NL, IQ4_XS, MXFP4) */
void vec_dot_iq4_nl_q8_0_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_iq4_xs_q8_K_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_mxfp4_q8_0_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq4_nl_q8_0_avx2(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                   const float *a_sums);
void vec_dot_rows_iq4_xs_q8_K_avx2(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                   const float *a_sums);
void vec_dot_rows_mxfp4_q8_0_avx2(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                  const float *a_sums);

/* pack_avx2.c: weight rows -> the GEMM panel's integer form, and the panel packer */
void unpack_q4_0_avx2(const void *w, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_q4_1_avx2(const void *w, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_q5_0_avx2(const void *w, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_q8_0_avx2(const void *w, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_q4_K_avx2(const void *w, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_q6_K_avx2(const void *w, int64_t n, uint8_t *u, float *dw, float *mw);
void pack_w_x4_q4_0_avx2(const li_panel_plan *p, const uint8_t *g, int r, uint8_t *dst);
void pack_w_x4_q8_0_avx2(const li_panel_plan *p, const uint8_t *g, int r, uint8_t *dst);
void pack_w_x4_q4_K_avx2(const li_panel_plan *p, const uint8_t *g, int r, uint8_t *dst);
void pack_w_x4_q6_K_avx2(const li_panel_plan *p, const uint8_t *g, int r, uint8_t *dst);
void li_panel_pack_a_avx2(const li_panel_plan *p, int act_type, const void *row, int offset, uint8_t *dst);
void li_panel_pack_w_avx2(const li_panel_plan *p, const uint8_t *u, const float *dw, const float *mw,
                          uint8_t *dst);

/* gemm_avx2.c: the GEMM tiles, LI_AVX2_Q_NW weight rows x LI_AVX2_Q_NA activation rows (integer)
 * and LI_AVX2_F_NW x LI_AVX2_F_NA (float). 4 x 3: 12 products per step; the integer step keeps its
 * 12 accumulators, one weight and one product in registers and reads the activations as memory
 * operands (gemm_avx2.c says why in asm). 4 x 3, 3 x 4 and 3 x 3 measured alike with the accumulators
 * spilled, 2 x 2 slower for every type (BENCHMARKS.md, "Kernel choices"). NA = 3 keeps small batches
 * (m = 6, 9) unpadded. The float tile is 4 x 3 too: 12 accumulators + 3 activations + 1 weight fill
 * the 16 ymm registers, 12 FMAs per 7 loads where 4 x 2 did 8 per 6 and waited on the loads (Zen 3,
 * one core, F16 3072x768 m=512: 24.6 -> 38.1 GMAC/s; 768x3072: 24.4 -> 29.6, its 48 KiB weight tile
 * outgrowing L1). The tile shape changes no sum. */
#define LI_AVX2_Q_NW 4
#define LI_AVX2_Q_NA 3
#define LI_AVX2_F_NW 4
#define LI_AVX2_F_NA 3
void li_gemm_q_avx2(const li_panel_plan *p, const uint8_t *w, const uint8_t *a, int has_min, int offset, int umax,
                    float *y, int64_t ldy, int nw_valid, int na_valid);
void li_gemm_f_avx2(int64_t kp, const float *w, const float *a, float *y, int64_t ldy, int nw_valid, int na_valid);

/* attn_avx2.c: the attention's row kernels, and f16 rows <-> f32 with F16C */
void li_dot_rows_avx2(int64_t n, const float *a, int na, int64_t lda, const float *b, int64_t nb, int64_t ldb,
                      float *c, int64_t ldc);
void li_dot_rows_f16_avx2(int64_t n, const float *a, int na, int64_t lda, const ggml_half *b, int64_t nb,
                          int64_t ldb, float *c, int64_t ldc);
void li_axpy_rows_f16_avx2(int64_t n, const float *p, int na, int64_t ldp, const ggml_half *v, int64_t nv,
                           int64_t ldv, float *out, int64_t ldo);
void li_softmax_f16_avx2(float *p, int64_t n, float scale, float softcap, float sink);
void li_softmax_f32_avx2(float *p, int64_t n);
void li_round_f16_avx2(const float *x, float *y, int64_t n);
void li_widen_f16_avx2(const ggml_half *x, float *y, int64_t n);
void dequantize_row_f16_avx2(const void *x, float *y, int64_t n);
void quantize_row_f16_avx2(const float *x, void *dst, int64_t n);

/* act_avx2.c: y = e^x for 8 floats at a time, rounded as expf (also the softmax's), and the gating */
void li_exp_avx2(const float *x, float *y, int64_t n);
void li_silu_mul_avx2(const float *g, const float *u, float *y, int64_t n);
void li_geglu_f16_avx2(const float *g, const float *u, float *y, int64_t n, const float *table);

/* norm_avx2.c: LayerNorm of a row (also the AVX-512 table's: O(n) work), the generic one's bits */
void li_norm_row_avx2(const float *x, const float *w, const float *b, float *y, int64_t n, double eps);

/* quants_ternary_avx2.c: TQ1_0, TQ2_0 */
void vec_dot_tq1_0_q8_K_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_tq1_0_q8_K_avx2(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                  const float *a_sums);
void vec_dot_tq2_0_q8_K_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_tq2_0_q8_K_avx2(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                  const float *a_sums);

/* quants_grids_avx2.c: the grid i-quants (IQ2_XXS .. IQ1_M): dots against Q8_K, GEMM panel unpackers */
void unpack_iq2_xxs_avx2(const void *w, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_iq2_xs_avx2(const void *w, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_iq2_s_avx2(const void *w, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_iq3_xxs_avx2(const void *w, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_iq3_s_avx2(const void *w, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_iq1_s_avx2(const void *w, int64_t n, uint8_t *u, float *dw, float *mw);
void unpack_iq1_m_avx2(const void *w, int64_t n, uint8_t *u, float *dw, float *mw);
void vec_dot_iq2_xxs_q8_K_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq2_xxs_q8_K_avx2(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                    const float *a_sums);
void vec_dot_iq2_xs_q8_K_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq2_xs_q8_K_avx2(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                   const float *a_sums);
void vec_dot_iq2_s_q8_K_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq2_s_q8_K_avx2(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                  const float *a_sums);
void vec_dot_iq3_xxs_q8_K_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq3_xxs_q8_K_avx2(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                    const float *a_sums);
void vec_dot_iq3_s_q8_K_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq3_s_q8_K_avx2(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                  const float *a_sums);
void vec_dot_iq1_s_q8_K_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq1_s_q8_K_avx2(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                  const float *a_sums);
void vec_dot_iq1_m_q8_K_avx2(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq1_m_q8_K_avx2(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                  const float *a_sums);

/* quants_x4_avx2.c: dots over repacked x4 groups (core/repack.c) */
void vec_dot_x4_q4_0_q8_0_avx2(int64_t n, float *s, const void *group, const void *a, const float *a_sums);
void vec_dot_x4_q8_0_q8_0_avx2(int64_t n, float *s, const void *group, const void *a, const float *a_sums);
void vec_dot_x4_q4_K_q8_K_avx2(int64_t n, float *s, const void *group, const void *a, const float *a_sums);
void vec_dot_x16_m_q4_K_q8_K_avx2(int64_t n, int64_t m, float *s, int64_t s_stride, const void *groups, size_t group_stride,
                                  const void *a, size_t a_stride, const float *a_sums, int64_t sums_stride);
void vec_dot_x16_m_q4_0_q8_0_avx2(int64_t n, int64_t m, float *s, int64_t s_stride, const void *groups, size_t group_stride,
                                  const void *a, size_t a_stride, const float *a_sums, int64_t sums_stride);

#endif /* LI_X86_AVX2_H */
