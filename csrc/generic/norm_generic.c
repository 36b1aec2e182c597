/* norm_generic.c -- the readable LayerNorm row (li_norm_row_fn, core/li.h): ggml_norm followed by
 * the weight and bias, in the arithmetic of ops_reference.layer_norm (sums in double, the rest in
 * float). The two sums run over 16 double lanes and the tree l+8, l+4, l+2, l+1, then the tail: the
 * order x86/norm_avx2.c keeps with four 4-double registers, so the two give the same bits.
 */
#include <math.h>

#include "core/li.h"
#include "generic/generic.h"

static double reduce16(double acc[16]) {
    for (int w = 8; w >= 1; w /= 2)
        for (int e = 0; e < w; e++) acc[e] += acc[e + w];
    return acc[0];
}

void li_norm_row_generic(const float *x, const float *w, const float *b, float *y, int64_t n, double eps) {
    const int64_t n16 = n / 16 * 16;
    double acc[16] = {0};
    for (int64_t i = 0; i < n16; i += 16)
        for (int e = 0; e < 16; e++) acc[e] += (double)x[i + e];
    double sum = reduce16(acc);
    for (int64_t i = n16; i < n; i++) sum += (double)x[i];
    const float mean = (float)(sum / (double)n);

    double acc2[16] = {0};   /* y holds d = x - mean until the scale is known (x may be y) */
    for (int64_t i = 0; i < n16; i += 16)
        for (int e = 0; e < 16; e++) {
            const float d = x[i + e] - mean;
            y[i + e] = d;
            acc2[e] += (double)(d * d);   /* the square in float, as the reference's np.square */
        }
    double sum2 = reduce16(acc2);
    for (int64_t i = n16; i < n; i++) {
        const float d = x[i] - mean;
        y[i] = d;
        sum2 += (double)(d * d);
    }
    const float scale = (float)(1.0 / sqrt(sum2 / (double)n + eps));

    for (int64_t i = 0; i < n; i++) {
        const float v = (y[i] * scale) * w[i];
        y[i] = b ? v + b[i] : v;
    }
}
