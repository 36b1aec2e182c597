/* arm/neon.h -- the aarch64 NEON kernels with the dotprod extension (vdotq_s32): everything the
 * neon table (arm/neon_table.c) points to that is not generic, and its GEMM tile shape.
 */
#ifndef LI_ARM_NEON_H
#define LI_ARM_NEON_H

#include "core/li.h"

extern const li_isa_kernels li_kernels_neon;

/* quants_neon.c: the dot products of the legacy 4- and 8-bit types */
void vec_dot_q4_0_q8_0_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q4_1_q8_1_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_q8_0_q8_0_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_q4_0_q8_0_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                 const float *a_sums);
void vec_dot_rows_q4_1_q8_1_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                 const float *a_sums);
void vec_dot_rows_q8_0_q8_0_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                 const float *a_sums);

/* The dot products against Q8-style activations, one row (vec_dot_*) and LI_DOT_ROWS rows sharing
 * the activation loads (vec_dot_rows_*, per row bit for bit vec_dot's); their shared pieces are
 * arm/dot_neon.h. */
/* quants_tables_neon.c: the table types (IQ4_NL, MXFP4, IQ4_XS) */
void vec_dot_iq4_nl_q8_0_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq4_nl_q8_0_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                   const float *a_sums);
void vec_dot_mxfp4_q8_0_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_mxfp4_q8_0_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                  const float *a_sums);
void vec_dot_iq4_xs_q8_K_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq4_xs_q8_K_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                   const float *a_sums);
/* quants_q5_neon.c: Q5_0, Q5_1 */
void vec_dot_q5_0_q8_0_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_q5_0_q8_0_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                 const float *a_sums);
void vec_dot_q5_1_q8_1_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_q5_1_q8_1_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                 const float *a_sums);
/* quants_k_neon.c: Q4_K, Q5_K, Q6_K */
void vec_dot_q4_K_q8_K_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_q4_K_q8_K_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                 const float *a_sums);
void vec_dot_q5_K_q8_K_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_q5_K_q8_K_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                 const float *a_sums);
void vec_dot_q6_K_q8_K_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_q6_K_q8_K_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                 const float *a_sums);
/* quants_k_low_neon.c: Q2_K, Q3_K */
void vec_dot_q2_K_q8_K_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_q2_K_q8_K_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                 const float *a_sums);
void vec_dot_q3_K_q8_K_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_q3_K_q8_K_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                 const float *a_sums);
/* quants_ternary_neon.c: TQ1_0, TQ2_0 */
void vec_dot_tq1_0_q8_K_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_tq1_0_q8_K_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                  const float *a_sums);
void vec_dot_tq2_0_q8_K_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_tq2_0_q8_K_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                  const float *a_sums);
/* quants_iq2_neon.c, quants_iq3_neon.c, quants_iq1_neon.c: the grid i-quants */
void vec_dot_iq2_xxs_q8_K_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq2_xxs_q8_K_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                    const float *a_sums);
void vec_dot_iq2_xs_q8_K_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq2_xs_q8_K_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                   const float *a_sums);
void vec_dot_iq2_s_q8_K_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq2_s_q8_K_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                  const float *a_sums);
void vec_dot_iq3_xxs_q8_K_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq3_xxs_q8_K_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                    const float *a_sums);
void vec_dot_iq3_s_q8_K_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq3_s_q8_K_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                  const float *a_sums);
void vec_dot_iq1_s_q8_K_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq1_s_q8_K_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                  const float *a_sums);
void vec_dot_iq1_m_q8_K_neon(int64_t n, float *s, const void *w, const void *a, const float *a_sums);
void vec_dot_rows_iq1_m_q8_K_neon(int64_t n, float *s, const void *w, size_t row_bytes, int nr, const void *a,
                                  const float *a_sums);

/* quants_neon.c: the integer GEMM tile, LI_NEON_Q_NW weight rows x LI_NEON_Q_NA activation rows */
#define LI_NEON_Q_NW 4
#define LI_NEON_Q_NA 2
void li_gemm_q_neon(const li_panel_plan *p, const uint8_t *w, const uint8_t *a, int has_min, int offset,
                    int umax, float *y, int64_t ldy, int nw_valid, int na_valid);

#endif /* LI_ARM_NEON_H */
