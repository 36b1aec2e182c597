/* act_generic.c -- the readable versions of the gated activations of core/ops.c (li_glu): SiLU
 * with expf, and GELU read from ggml's f16 table.
 */
#include <math.h>

#include "core/li.h"
#include "generic/generic.h"

/* y = silu(g) * u = g / (1 + e^-g) * u */
void li_silu_mul_generic(const float *g, const float *u, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* y = gelu(g) * u the way ggml_geglu computes it on the CPU (GGML_GELU_FP16): gelu read from a
 * table indexed by the f16 bits of g and holding f16 results; g itself above 10, 0 below -10.
 * `table` (65536 floats) is built by the caller from the numpy reference (localinfer's backend/ops.py), so
 * this is bit for bit ops_reference.geglu. */
void li_geglu_f16_generic(const float *g, const float *u, float *y, int64_t n, const float *table) {
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i];
        const float act = x >= 10.0f ? x : x <= -10.0f ? 0.0f : table[li_fp32_to_fp16(x)];
        y[i] = act * u[i];
    }
}
