/* traits.c -- the type traits table (ggml's type_traits + type_traits_cpu), generic entries.
 *
 * One row per type: sizes, the activation type its dot product takes, the
 * integer form for the GEMM panel (group G, offset o, largest u, min or not; see
 * unpack_generic.c) and the generic functions. Adding a type is one row here plus
 * its dequantize/unpack functions; the matmul, the dispatch and the tests walk
 * the table. SIMD variants (kernels_*.c) override single functions per type.
 */
#include "core/li.h"

#define DECLARE_WEIGHT(t)                                                              \
    void dequantize_row_##t(const void *, float *, int64_t);                           \
    void unpack_##t(const void *, int64_t, uint8_t *, float *, float *);
DECLARE_WEIGHT(q4_0) DECLARE_WEIGHT(q4_1) DECLARE_WEIGHT(q5_0) DECLARE_WEIGHT(q5_1)
DECLARE_WEIGHT(q8_0) DECLARE_WEIGHT(q2_K) DECLARE_WEIGHT(q3_K) DECLARE_WEIGHT(q4_K)
DECLARE_WEIGHT(q5_K) DECLARE_WEIGHT(q6_K)
void dequantize_row_f32(const void *, float *, int64_t);
void dequantize_row_f16(const void *, float *, int64_t);
void dequantize_row_bf16(const void *, float *, int64_t);

#define DECLARE_DOT(w, a) void vec_dot_##w##_##a##_generic(int64_t, float *, const void *, const void *, const float *);
DECLARE_DOT(q4_0, q8_0) DECLARE_DOT(q4_1, q8_1) DECLARE_DOT(q5_0, q8_0) DECLARE_DOT(q5_1, q8_1)
DECLARE_DOT(q8_0, q8_0) DECLARE_DOT(q2_K, q8_K) DECLARE_DOT(q3_K, q8_K) DECLARE_DOT(q4_K, q8_K)
DECLARE_DOT(q5_K, q8_K) DECLARE_DOT(q6_K, q8_K) DECLARE_DOT(f32, f32) DECLARE_DOT(f16, f16)
DECLARE_DOT(bf16, bf16)

#define DECLARE_QUANTIZE(a) void quantize_row_##a##_generic(const float *, void *, int64_t);
DECLARE_QUANTIZE(q8_0) DECLARE_QUANTIZE(q8_1) DECLARE_QUANTIZE(q8_K)
DECLARE_QUANTIZE(f32) DECLARE_QUANTIZE(f16) DECLARE_QUANTIZE(bf16)

/* type, function stem, block size, vec_dot type (+ its stem), G, o, umax, has_min, from_float
 * (Q8_0 is both a weight type and an activation type) */
#define QUANT(T, name, BS, ACT, aname, G, O, UMAX, MIN, FROM_FLOAT)                     \
    [LI_TYPE_##T] = {#T, BS, (int)sizeof(block_##name), LI_TYPE_##ACT, G, O, UMAX, MIN,  \
                     dequantize_row_##name, vec_dot_##name##_##aname##_generic,        \
                     unpack_##name, FROM_FLOAT},

const li_type_traits li_traits_generic[LI_TYPE_COUNT] = {
    [LI_TYPE_F32] = {"F32", 1, 4, LI_TYPE_F32, 0, 0, 0, 0, dequantize_row_f32,
                     vec_dot_f32_f32_generic, NULL, quantize_row_f32_generic},
    [LI_TYPE_F16] = {"F16", 1, 2, LI_TYPE_F16, 0, 0, 0, 0, dequantize_row_f16,
                     vec_dot_f16_f16_generic, NULL, quantize_row_f16_generic},
    [LI_TYPE_BF16] = {"BF16", 1, 2, LI_TYPE_BF16, 0, 0, 0, 0, dequantize_row_bf16,
                      vec_dot_bf16_bf16_generic, NULL, quantize_row_bf16_generic},
    QUANT(Q4_0, q4_0, QK4_0, Q8_0, q8_0, 32, 8, 15, 0, NULL)
    QUANT(Q4_1, q4_1, QK4_1, Q8_1, q8_1, 32, 0, 15, 1, NULL)
    QUANT(Q5_0, q5_0, QK5_0, Q8_0, q8_0, 32, 16, 31, 0, NULL)
    QUANT(Q5_1, q5_1, QK5_1, Q8_1, q8_1, 32, 0, 31, 1, NULL)
    QUANT(Q8_0, q8_0, QK8_0, Q8_0, q8_0, 32, 128, 255, 0, quantize_row_q8_0_generic)
    QUANT(Q2_K, q2_K, QK_K, Q8_K, q8_K, 16, 0, 3, 1, NULL)
    QUANT(Q3_K, q3_K, QK_K, Q8_K, q8_K, 16, 4, 7, 0, NULL)
    QUANT(Q4_K, q4_K, QK_K, Q8_K, q8_K, 32, 0, 15, 1, NULL)
    QUANT(Q5_K, q5_K, QK_K, Q8_K, q8_K, 32, 0, 31, 1, NULL)
    QUANT(Q6_K, q6_K, QK_K, Q8_K, q8_K, 16, 32, 63, 0, NULL)
    /* activation-only types: no dot product of their own */
    [LI_TYPE_Q8_1] = {"Q8_1", QK8_1, (int)sizeof(block_q8_1), -1, 0, 0, 0, 0, NULL, NULL, NULL,
                      quantize_row_q8_1_generic},
    [LI_TYPE_Q8_K] = {"Q8_K", QK_K, (int)sizeof(block_q8_K), -1, 0, 0, 0, 0, NULL, NULL, NULL,
                      quantize_row_q8_K_generic},
};

const li_isa_kernels li_kernels_generic = {
    .name = "generic",
    .gemm_q = li_gemm_q_generic, .q_nw = 4, .q_na = 4,
    .gemm_f = li_gemm_f_generic, .f_nw = 4, .f_na = 4,
};
