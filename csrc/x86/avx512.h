/* x86/avx512.h -- the AVX-512 VNNI (F/BW/VL/VNNI) kernels: everything the avx512 table
 * (x86/avx512_table.c) points to that is not an AVX2 kernel (those are in x86/avx2.h: the
 * quantizers, unpackers, softmax and gating, which are O(k) work where 8 lanes are plenty).
 */
#ifndef LI_X86_AVX512_H
#define LI_X86_AVX512_H

#include "core/li.h"

extern const li_isa_kernels li_kernels_avx512;

/* quants_avx512.c: the dot products (one row, and LI_DOT_ROWS rows at once) */
void vec_dot_q4_0_q8_0_avx512(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q4_1_q8_1_avx512(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q5_0_q8_0_avx512(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q5_1_q8_1_avx512(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q8_0_q8_0_avx512(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q6_K_q8_K_avx512(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_f16_f16_avx512(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_f16_mact_avx512(int64_t n, float *s, int64_t s_stride, const void *w, const float *a, int64_t m);
void vec_dot_f32_f32_avx512(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_q4_0_q8_0_avx512(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                   const float *a_sums);
void vec_dot_rows_q4_1_q8_1_avx512(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                   const float *a_sums);
void vec_dot_rows_q5_0_q8_0_avx512(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                   const float *a_sums);
void vec_dot_rows_q5_1_q8_1_avx512(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                   const float *a_sums);
void vec_dot_rows_q8_0_q8_0_avx512(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                   const float *a_sums);

/* gemm_avx512.c: the GEMM tiles, LI_AVX512_Q_NW weight rows x LI_AVX512_Q_NA activation rows
 * (integer; -D on the command line tries another shape, the sums do not change) and 4 x 4 float
 * (li_reduce16_store in reduce_avx512.h reduces four rows at once). */
#ifndef LI_AVX512_Q_NW
#define LI_AVX512_Q_NW 4
#endif
#ifndef LI_AVX512_Q_NA
#define LI_AVX512_Q_NA 3
#endif
#define LI_AVX512_F_NW 4
#define LI_AVX512_F_NA 4
void li_gemm_q_avx512(const li_panel_plan *p, const uint8_t *w, const uint8_t *a, int has_min, int offset,
                      int umax, float *y, int64_t ldy, int nw_valid, int na_valid);
void li_gemm_f_avx512(int64_t kp, const float *w, const float *a, float *y, int64_t ldy, int nw_valid,
                      int na_valid);

/* attn_avx512.c: the attention's row kernels */
void li_dot_rows_avx512(int64_t n, const float *a, int na, int64_t lda, const float *b, int64_t nb, int64_t ldb,
                        float *c, int64_t ldc);
void li_dot_rows_f16_avx512(int64_t n, const float *a, int na, int64_t lda, const ggml_half *b, int64_t nb,
                            int64_t ldb, float *c, int64_t ldc);
void li_axpy_rows_f16_avx512(int64_t n, const float *p, int na, int64_t ldp, const ggml_half *v, int64_t nv,
                             int64_t ldv, float *out, int64_t ldo);

/* quants_tables_avx512.c: the table types (IQ4_NL, MXFP4 x Q8_0; IQ4_XS x Q8_K) with VNNI after AVX2's lookup */
void vec_dot_iq4_nl_q8_0_avx512(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_iq4_xs_q8_K_avx512(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_mxfp4_q8_0_avx512(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq4_nl_q8_0_avx512(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                     const float *a_sums);
void vec_dot_rows_iq4_xs_q8_K_avx512(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                     const float *a_sums);
void vec_dot_rows_mxfp4_q8_0_avx512(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                    const float *a_sums);

/* quants_ternary_avx512.c: TQ2_0 */
void vec_dot_tq2_0_q8_K_avx512(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_tq2_0_q8_K_avx512(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                    const float *a_sums);

/* quants_x4_avx512.c: dots over repacked x4 groups (core/repack.c) */
void vec_dot_x4_q4_0_q8_0_avx512(int64_t n, float *s, const void *group, const void *a, const float *a_sums);
void vec_dot_x4_q8_0_q8_0_avx512(int64_t n, float *s, const void *group, const void *a, const float *a_sums);
void vec_dot_x4_q4_K_q8_K_avx512(int64_t n, float *s, const void *group, const void *a, const float *a_sums);
void vec_dot_x4_q6_K_q8_K_avx512(int64_t n, float *s, const void *group, const void *a, const float *a_sums);
void vec_dot_x16_m_q4_0_q8_0_avx512(int64_t n, int64_t m, float *s, int64_t s_stride, const void *groups, size_t group_stride,
                                    const void *a, size_t a_stride, const float *a_sums, int64_t sums_stride);
void vec_dot_x16_m_q8_0_q8_0_avx512(int64_t n, int64_t m, float *s, int64_t s_stride, const void *groups, size_t group_stride,
                                    const void *a, size_t a_stride, const float *a_sums, int64_t sums_stride);
void vec_dot_x16_m_q4_K_q8_K_avx512(int64_t n, int64_t m, float *s, int64_t s_stride, const void *groups, size_t group_stride,
                                    const void *a, size_t a_stride, const float *a_sums, int64_t sums_stride);
void vec_dot_x16_m_q6_K_q8_K_avx512(int64_t n, int64_t m, float *s, int64_t s_stride, const void *groups, size_t group_stride,
                                    const void *a, size_t a_stride, const float *a_sums, int64_t sums_stride);

#endif /* LI_X86_AVX512_H */
