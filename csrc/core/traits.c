/* traits.c -- the type traits table (ggml's type_traits + type_traits_cpu), generic entries.
 *
 * One row per type: sizes, the activation type its dot product takes, the
 * integer form for the GEMM panel (group G, offset o, largest u, min or not; see
 * generic/unpack_generic.c) and the generic functions (generic/generic.h). Adding a
 * type is one row here plus its dequantize/unpack/vec_dot functions in generic/; the
 * matmul, the dispatch and the tests walk the table. SIMD variants override single
 * functions per type in their ISA's table (x86/avx2_table.c, ...).
 */
#include "core/li.h"
#include "generic/generic.h"

/* type, function stem, block size, vec_dot type (+ its stem), G, o, umax, has_min, from_float
 * (Q8_0 is both a weight type and an activation type; Q4_0's from_float writes KV cache rows) */
#define QUANT(T, name, BS, ACT, aname, G, O, UMAX, MIN, FROM_FLOAT)                     \
    [LI_TYPE_##T] = {#T, BS, (int)sizeof(block_##name), LI_TYPE_##ACT, G, O, UMAX, MIN,  \
                     dequantize_row_##name, vec_dot_##name##_##aname##_generic,        \
                     unpack_##name, FROM_FLOAT},

/* ggml-common.h's kvalues_iq4nl and kvalues_mxfp4 (the e2m1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6 doubled) */
const int8_t li_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int8_t li_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

const li_type_traits li_traits_generic[LI_TYPE_COUNT] = {
    [LI_TYPE_F32] = {"F32", 1, 4, LI_TYPE_F32, 0, 0, 0, 0, dequantize_row_f32,
                     vec_dot_f32_f32_generic, NULL, quantize_row_f32_generic},
    [LI_TYPE_F16] = {"F16", 1, 2, LI_TYPE_F16, 0, 0, 0, 0, dequantize_row_f16,
                     vec_dot_f16_f16_generic, NULL, quantize_row_f16_generic},
    [LI_TYPE_BF16] = {"BF16", 1, 2, LI_TYPE_BF16, 0, 0, 0, 0, dequantize_row_bf16,
                      vec_dot_bf16_bf16_generic, NULL, quantize_row_bf16_generic},
    QUANT(Q4_0, q4_0, QK4_0, Q8_0, q8_0, 32, 8, 15, 0, quantize_row_q4_0_generic)
    QUANT(Q4_1, q4_1, QK4_1, Q8_1, q8_1, 32, 0, 15, 1, NULL)
    QUANT(Q5_0, q5_0, QK5_0, Q8_0, q8_0, 32, 16, 31, 0, NULL)
    QUANT(Q5_1, q5_1, QK5_1, Q8_1, q8_1, 32, 0, 31, 1, NULL)
    QUANT(Q8_0, q8_0, QK8_0, Q8_0, q8_0, 32, 128, 255, 0, quantize_row_q8_0_generic)
    QUANT(Q2_K, q2_K, QK_K, Q8_K, q8_K, 16, 0, 3, 1, NULL)
    QUANT(Q3_K, q3_K, QK_K, Q8_K, q8_K, 16, 4, 7, 0, NULL)
    QUANT(Q4_K, q4_K, QK_K, Q8_K, q8_K, 32, 0, 15, 1, NULL)
    QUANT(Q5_K, q5_K, QK_K, Q8_K, q8_K, 32, 0, 31, 1, NULL)
    QUANT(Q6_K, q6_K, QK_K, Q8_K, q8_K, 16, 32, 63, 0, NULL)
    /* table types: u = value + 128 (1..241), as Q8_0's u; ggml pairs IQ4_XS with Q8_K, the others with Q8_0 */
    QUANT(IQ4_NL, iq4_nl, QK4_NL, Q8_0, q8_0, 32, 128, 241, 0, NULL)
    QUANT(IQ4_XS, iq4_xs, QK_K, Q8_K, q8_K, 32, 128, 241, 0, NULL)
    QUANT(MXFP4, mxfp4, QK_MXFP4, Q8_0, q8_0, 32, 128, 140, 0, NULL)
    /* ternary: u = the trit (TQ2_0's 2 bits may hold 3 in a hostile file), o = 1; one scale per 256 */
    QUANT(TQ1_0, tq1_0, QK_K, Q8_K, q8_K, 32, 1, 2, 0, NULL)
    QUANT(TQ2_0, tq2_0, QK_K, Q8_K, q8_K, 32, 1, 3, 0, NULL)
    /* grid i-quants (generic/grids_generic.c), all with Q8_K as in ggml: u = sign * grid + o, IQ1's
     * u = 8 * (grid + delta) + o, o the largest |value| (generic/generic.h says why) */
    QUANT(IQ2_XXS, iq2_xxs, QK_K, Q8_K, q8_K, 32, LI_O_IQ2, 2 * LI_O_IQ2, 0, NULL)
    QUANT(IQ2_XS, iq2_xs, QK_K, Q8_K, q8_K, 16, LI_O_IQ2, 2 * LI_O_IQ2, 0, NULL)
    QUANT(IQ2_S, iq2_s, QK_K, Q8_K, q8_K, 16, LI_O_IQ2, 2 * LI_O_IQ2, 0, NULL)
    QUANT(IQ3_XXS, iq3_xxs, QK_K, Q8_K, q8_K, 32, LI_O_IQ3_XXS, 2 * LI_O_IQ3_XXS, 0, NULL)
    QUANT(IQ3_S, iq3_s, QK_K, Q8_K, q8_K, 32, LI_O_IQ3_S, 2 * LI_O_IQ3_S, 0, NULL)
    QUANT(IQ1_S, iq1_s, QK_K, Q8_K, q8_K, 32, LI_O_IQ1, 2 * LI_O_IQ1, 0, NULL)
    QUANT(IQ1_M, iq1_m, QK_K, Q8_K, q8_K, 16, LI_O_IQ1, 2 * LI_O_IQ1, 0, NULL)
    /* activation-only types: no dot product of their own */
    [LI_TYPE_Q8_1] = {"Q8_1", QK8_1, (int)sizeof(block_q8_1), -1, 0, 0, 0, 0, NULL, NULL, NULL,
                      quantize_row_q8_1_generic},
    [LI_TYPE_Q8_K] = {"Q8_K", QK_K, (int)sizeof(block_q8_K), -1, 0, 0, 0, 0, NULL, NULL, NULL,
                      quantize_row_q8_K_generic},
};
