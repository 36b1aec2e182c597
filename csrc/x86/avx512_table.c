/* avx512_table.c -- the avx512 variant (AVX-512 F/BW/VL/VNNI on top of AVX2): what it overrides
 * of the generic kernels.
 *
 * core/dispatch.c picks this table when the CPU has those extensions as well as avx2's, and merges
 * it with the generic one. Its own kernels (x86/avx512.h) are the dots, the GEMM tiles and the
 * attention's row products; the O(k) work (quantizers, unpackers, softmax, gating, LayerNorm) is AVX2's
 * (x86/avx2.h).
 */
#if defined(__x86_64__) || defined(_M_X64)

#include "core/li.h"
#include "x86/avx2.h"
#include "x86/avx512.h"

const li_isa_kernels li_kernels_avx512 = {
    .name = "avx512",
    .vec_dot = {
        [LI_TYPE_Q4_0] = vec_dot_q4_0_q8_0_avx512, [LI_TYPE_Q4_1] = vec_dot_q4_1_q8_1_avx512,
        [LI_TYPE_Q5_0] = vec_dot_q5_0_q8_0_avx512, [LI_TYPE_Q5_1] = vec_dot_q5_1_q8_1_avx512,
        [LI_TYPE_Q8_0] = vec_dot_q8_0_q8_0_avx512,
        /* Q4_K: the AVX2 dot (broadcast scales, vector mins) decoded faster than a 512-bit one (BENCHMARKS.md, "Kernel choices") */
        [LI_TYPE_Q4_K] = vec_dot_q4_K_q8_K_avx2,
        [LI_TYPE_Q6_K] = vec_dot_q6_K_q8_K_avx512, [LI_TYPE_F16] = vec_dot_f16_f16_avx512,
        [LI_TYPE_F32] = vec_dot_f32_f32_avx512,
        [LI_TYPE_TQ2_0] = vec_dot_tq2_0_q8_K_avx512,
        [LI_TYPE_TQ1_0] = vec_dot_tq1_0_q8_K_avx2,
        /* the table types: AVX2's lookup in 256-bit registers, VNNI after it (quants_tables_avx512.c).
         * Two blocks per zmm measured slower (BENCHMARKS.md, "Kernel choices"): the lookup needs more shuffles per 64 bytes
         * than AVX2 spends per 32, and the per-block scales stay scalar. */
        [LI_TYPE_IQ4_NL] = vec_dot_iq4_nl_q8_0_avx512, [LI_TYPE_IQ4_XS] = vec_dot_iq4_xs_q8_K_avx512,
        [LI_TYPE_MXFP4] = vec_dot_mxfp4_q8_0_avx512,
        /* the grid i-quants: AVX2's (x86/quants_grids_avx2.c) */
        [LI_TYPE_IQ2_XXS] = vec_dot_iq2_xxs_q8_K_avx2, [LI_TYPE_IQ2_XS] = vec_dot_iq2_xs_q8_K_avx2,
        [LI_TYPE_IQ2_S] = vec_dot_iq2_s_q8_K_avx2, [LI_TYPE_IQ3_XXS] = vec_dot_iq3_xxs_q8_K_avx2,
        [LI_TYPE_IQ3_S] = vec_dot_iq3_s_q8_K_avx2, [LI_TYPE_IQ1_S] = vec_dot_iq1_s_q8_K_avx2,
        [LI_TYPE_IQ1_M] = vec_dot_iq1_m_q8_K_avx2,
    },
    .vec_dot_x4 = {[LI_TYPE_Q4_0] = vec_dot_x4_q4_0_q8_0_avx512, [LI_TYPE_Q8_0] = vec_dot_x4_q8_0_q8_0_avx512,
                   [LI_TYPE_Q4_K] = vec_dot_x4_q4_K_q8_K_avx512, [LI_TYPE_Q6_K] = vec_dot_x4_q6_K_q8_K_avx512},
    .vec_dot_x16_m = {[LI_TYPE_Q4_0] = vec_dot_x16_m_q4_0_q8_0_avx512, [LI_TYPE_Q8_0] = vec_dot_x16_m_q8_0_q8_0_avx512,
                      [LI_TYPE_Q4_K] = vec_dot_x16_m_q4_K_q8_K_avx512, [LI_TYPE_Q6_K] = vec_dot_x16_m_q6_K_q8_K_avx512},
    .x16_gemm_min_m = LI_X16_PASS_M,   /* core/matmul.c LI_GEMM_MIN_M_X16 */
    .vec_dot_rows = {
        [LI_TYPE_IQ4_NL] = vec_dot_rows_iq4_nl_q8_0_avx512, [LI_TYPE_IQ4_XS] = vec_dot_rows_iq4_xs_q8_K_avx512,
        [LI_TYPE_MXFP4] = vec_dot_rows_mxfp4_q8_0_avx512, [LI_TYPE_TQ2_0] = vec_dot_rows_tq2_0_q8_K_avx512,
        [LI_TYPE_TQ1_0] = vec_dot_rows_tq1_0_q8_K_avx2,
        [LI_TYPE_Q4_0] = vec_dot_rows_q4_0_q8_0_avx512, [LI_TYPE_Q4_1] = vec_dot_rows_q4_1_q8_1_avx512,
        [LI_TYPE_Q5_0] = vec_dot_rows_q5_0_q8_0_avx512, [LI_TYPE_Q5_1] = vec_dot_rows_q5_1_q8_1_avx512,
        [LI_TYPE_Q8_0] = vec_dot_rows_q8_0_q8_0_avx512,
        [LI_TYPE_IQ2_XXS] = vec_dot_rows_iq2_xxs_q8_K_avx2, [LI_TYPE_IQ2_XS] = vec_dot_rows_iq2_xs_q8_K_avx2,
        [LI_TYPE_IQ2_S] = vec_dot_rows_iq2_s_q8_K_avx2, [LI_TYPE_IQ3_XXS] = vec_dot_rows_iq3_xxs_q8_K_avx2,
        [LI_TYPE_IQ3_S] = vec_dot_rows_iq3_s_q8_K_avx2, [LI_TYPE_IQ1_S] = vec_dot_rows_iq1_s_q8_K_avx2,
        [LI_TYPE_IQ1_M] = vec_dot_rows_iq1_m_q8_K_avx2,
    },
    .from_float = {   /* the AVX2 quantizers: 8 lanes are plenty for O(k) work */
        [LI_TYPE_Q8_0] = quantize_row_q8_0_avx2, [LI_TYPE_Q8_1] = quantize_row_q8_1_avx2,
        [LI_TYPE_Q8_K] = quantize_row_q8_K_avx2, [LI_TYPE_F16] = quantize_row_f16_avx2,
    },
    .dequantize = {[LI_TYPE_F16] = dequantize_row_f16_avx2},
    .unpack = {
        [LI_TYPE_Q4_0] = unpack_q4_0_avx2, [LI_TYPE_Q4_1] = unpack_q4_1_avx2, [LI_TYPE_Q5_0] = unpack_q5_0_avx2,
        [LI_TYPE_Q8_0] = unpack_q8_0_avx2, [LI_TYPE_Q4_K] = unpack_q4_K_avx2, [LI_TYPE_Q6_K] = unpack_q6_K_avx2,
        [LI_TYPE_IQ2_XXS] = unpack_iq2_xxs_avx2, [LI_TYPE_IQ2_XS] = unpack_iq2_xs_avx2,
        [LI_TYPE_IQ2_S] = unpack_iq2_s_avx2, [LI_TYPE_IQ3_XXS] = unpack_iq3_xxs_avx2,
        [LI_TYPE_IQ3_S] = unpack_iq3_s_avx2, [LI_TYPE_IQ1_S] = unpack_iq1_s_avx2,
        [LI_TYPE_IQ1_M] = unpack_iq1_m_avx2,
    },
    .pack_w = li_panel_pack_w_avx2, .pack_a = li_panel_pack_a_avx2,
    .pack_w_x4 = {
        [LI_TYPE_Q4_0] = pack_w_x4_q4_0_avx2, [LI_TYPE_Q8_0] = pack_w_x4_q8_0_avx2,
        [LI_TYPE_Q4_K] = pack_w_x4_q4_K_avx2, [LI_TYPE_Q6_K] = pack_w_x4_q6_K_avx2,
    },
    .gemm_q = li_gemm_q_avx512, .q_nw = LI_AVX512_Q_NW, .q_na = LI_AVX512_Q_NA,
    .gemm_f = li_gemm_f_avx512, .f_nw = LI_AVX512_F_NW, .f_na = LI_AVX512_F_NA,
    .dot_rows = li_dot_rows_avx512, .dot_rows_f16 = li_dot_rows_f16_avx512, .axpy_rows_f16 = li_axpy_rows_f16_avx512,
    .softmax_f16 = li_softmax_f16_avx2, .softmax_f32 = li_softmax_f32_avx2, .round_f16 = li_round_f16_avx2,
    .widen_f16 = li_widen_f16_avx2, .silu_mul = li_silu_mul_avx2,
    .geglu_f16 = li_geglu_f16_avx2, .vec_dot_f16_mact = vec_dot_f16_mact_avx512,
    .norm_row = li_norm_row_avx2,
    /* P.V of a quantized cache: the AVX2 rows (32 values a block, two zmm halves would add no work saved) */
    .axpy_kv_q8_0 = li_axpy_kv_q8_0_avx2, .axpy_kv_q4_0 = li_axpy_kv_q4_0_avx2,
};

#endif /* x86_64 */
