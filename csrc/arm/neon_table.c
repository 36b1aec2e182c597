/* neon_table.c -- the neon variant (aarch64 NEON with dotprod): what it overrides of the generic
 * kernels.
 *
 * core/dispatch.c picks this table when getauxval reports HWCAP_ASIMDDP. Its kernels are in
 * arm/neon.h; everything else (the other types' dots, the quantizers, the float GEMM, the
 * attention) is generic.
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
    },
    .gemm_q = li_gemm_q_neon, .q_nw = LI_NEON_Q_NW, .q_na = LI_NEON_Q_NA,
    .gemm_f = li_gemm_f_generic, .f_nw = LI_GENERIC_F_NW, .f_na = LI_GENERIC_F_NA,
};

#endif /* __aarch64__ */
