/* neon_table.c -- the neon variant (aarch64 NEON with dotprod): what it overrides of the generic
 * kernels.
 *
 * core/dispatch.c picks this table when getauxval reports HWCAP_ASIMDDP. Its kernels are in
 * arm/neon.h; everything else (the other types' dots, the quantizers, the float GEMM, the
 * attention) is generic. A type with a vec_dot_rows here has its vec_dot here too (dispatch.c only
 * takes a vec_dot_rows beside its own vec_dot).
 */
#if defined(__aarch64__)

#include "core/li.h"
#include "arm/neon.h"
#include "generic/generic.h"

const li_isa_kernels li_kernels_neon = {
    .name = "neon",
    .vec_dot = {
        [LI_TYPE_Q4_0] = vec_dot_q4_0_q8_0_neon,
        [LI_TYPE_Q4_1] = vec_dot_q4_1_q8_1_neon,
        [LI_TYPE_Q8_0] = vec_dot_q8_0_q8_0_neon,
        [LI_TYPE_IQ4_NL] = vec_dot_iq4_nl_q8_0_neon, [LI_TYPE_MXFP4] = vec_dot_mxfp4_q8_0_neon,
        [LI_TYPE_IQ4_XS] = vec_dot_iq4_xs_q8_K_neon,
        [LI_TYPE_Q5_0] = vec_dot_q5_0_q8_0_neon, [LI_TYPE_Q5_1] = vec_dot_q5_1_q8_1_neon,
        [LI_TYPE_Q2_K] = vec_dot_q2_K_q8_K_neon, [LI_TYPE_Q3_K] = vec_dot_q3_K_q8_K_neon,
        [LI_TYPE_Q4_K] = vec_dot_q4_K_q8_K_neon, [LI_TYPE_Q5_K] = vec_dot_q5_K_q8_K_neon,
        [LI_TYPE_Q6_K] = vec_dot_q6_K_q8_K_neon,
        [LI_TYPE_TQ1_0] = vec_dot_tq1_0_q8_K_neon, [LI_TYPE_TQ2_0] = vec_dot_tq2_0_q8_K_neon,
        [LI_TYPE_IQ2_XXS] = vec_dot_iq2_xxs_q8_K_neon, [LI_TYPE_IQ2_XS] = vec_dot_iq2_xs_q8_K_neon,
        [LI_TYPE_IQ2_S] = vec_dot_iq2_s_q8_K_neon, [LI_TYPE_IQ3_XXS] = vec_dot_iq3_xxs_q8_K_neon,
        [LI_TYPE_IQ3_S] = vec_dot_iq3_s_q8_K_neon, [LI_TYPE_IQ1_S] = vec_dot_iq1_s_q8_K_neon,
        [LI_TYPE_IQ1_M] = vec_dot_iq1_m_q8_K_neon,
    },
    .vec_dot_rows = {
        [LI_TYPE_Q4_0] = vec_dot_rows_q4_0_q8_0_neon, [LI_TYPE_Q4_1] = vec_dot_rows_q4_1_q8_1_neon,
        [LI_TYPE_Q8_0] = vec_dot_rows_q8_0_q8_0_neon,
        [LI_TYPE_IQ4_NL] = vec_dot_rows_iq4_nl_q8_0_neon, [LI_TYPE_MXFP4] = vec_dot_rows_mxfp4_q8_0_neon,
        [LI_TYPE_IQ4_XS] = vec_dot_rows_iq4_xs_q8_K_neon,
        [LI_TYPE_Q5_0] = vec_dot_rows_q5_0_q8_0_neon, [LI_TYPE_Q5_1] = vec_dot_rows_q5_1_q8_1_neon,
        [LI_TYPE_Q2_K] = vec_dot_rows_q2_K_q8_K_neon, [LI_TYPE_Q3_K] = vec_dot_rows_q3_K_q8_K_neon,
        [LI_TYPE_Q4_K] = vec_dot_rows_q4_K_q8_K_neon, [LI_TYPE_Q5_K] = vec_dot_rows_q5_K_q8_K_neon,
        [LI_TYPE_Q6_K] = vec_dot_rows_q6_K_q8_K_neon,
        [LI_TYPE_TQ1_0] = vec_dot_rows_tq1_0_q8_K_neon, [LI_TYPE_TQ2_0] = vec_dot_rows_tq2_0_q8_K_neon,
        [LI_TYPE_IQ2_XXS] = vec_dot_rows_iq2_xxs_q8_K_neon, [LI_TYPE_IQ2_XS] = vec_dot_rows_iq2_xs_q8_K_neon,
        [LI_TYPE_IQ2_S] = vec_dot_rows_iq2_s_q8_K_neon, [LI_TYPE_IQ3_XXS] = vec_dot_rows_iq3_xxs_q8_K_neon,
        [LI_TYPE_IQ3_S] = vec_dot_rows_iq3_s_q8_K_neon, [LI_TYPE_IQ1_S] = vec_dot_rows_iq1_s_q8_K_neon,
        [LI_TYPE_IQ1_M] = vec_dot_rows_iq1_m_q8_K_neon,
    },
    .gemm_q = li_gemm_q_neon, .q_nw = LI_NEON_Q_NW, .q_na = LI_NEON_Q_NA,
    .gemm_f = li_gemm_f_generic, .f_nw = LI_GENERIC_F_NW, .f_na = LI_GENERIC_F_NA,
};

#endif /* __aarch64__ */
