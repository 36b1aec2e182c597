/* generic_table.c -- the generic variant: the portable GEMM tiles and nothing else.
 *
 * Every per-type function of this variant comes from the traits table (core/traits.c); for a slot
 * left NULL here or in a SIMD table, the op takes the readable version itself (core/attention.c and
 * core/ops.c fall back to attention_generic.c and act_generic.c). SIMD tables (x86/, arm/) override
 * what they accelerate; core/dispatch.c merges their per-type functions with the traits.
 */
#include "core/li.h"
#include "generic/generic.h"

const li_isa_kernels li_kernels_generic = {
    .name = "generic",
    .gemm_q = li_gemm_q_generic, .q_nw = LI_GENERIC_Q_NW, .q_na = LI_GENERIC_Q_NA,
    .gemm_f = li_gemm_f_generic, .f_nw = LI_GENERIC_F_NW, .f_na = LI_GENERIC_F_NA,
};
