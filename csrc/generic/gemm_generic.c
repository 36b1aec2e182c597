/* gemm_generic.c -- scalar GEMM microkernels over the panels of core/panel.c.
 *
 * The readable statement of what every SIMD microkernel computes: for each pair
 * (weight row j, activation row i) of the tile, per super-group and per lane l,
 *   isum = corr[l] + sum over steps s, bytes t of u * q
 *   acc[l] += da[l] * (dw[l] * isum + mw[l] * sumf[l])
 * and y = the sum of the 16 lanes. Any tile shape (nw_valid x na_valid); the generic table
 * asks for LI_GENERIC_Q_NW x LI_GENERIC_Q_NA (generic/generic.h).
 */
#include "core/li.h"
#include "generic/generic.h"

void li_gemm_q_generic(const li_panel_plan *p, const uint8_t *w, const uint8_t *a, int has_min,
                       int offset, int umax, float *y, int64_t ldy, int nw_valid, int na_valid) {
    (void)offset, (void)umax;
    for (int j = 0; j < nw_valid; j++) {
        for (int i = 0; i < na_valid; i++) {
            const uint8_t *wp = w + (size_t)j * p->w_row_bytes;
            const uint8_t *ap = a + (size_t)i * p->a_row_bytes;
            float acc[LI_LANES] = {0};
            for (int64_t sg = 0; sg < p->n_sg; sg++) {
                const int steps = li_panel_steps(p, sg);
                const float *dw = (const float *)(wp + steps * 64), *mw = dw + LI_LANES;
                const float *da = (const float *)(ap + steps * 64), *sumf = da + 2 * LI_LANES;
                const int32_t *corr = (const int32_t *)(da + LI_LANES);
                for (int l = 0; l < LI_LANES; l++) {
                    int32_t isum = corr[l];
                    for (int s = 0; s < steps; s++)
                        for (int t = 0; t < 4; t++)
                            isum += wp[s * 64 + l * 4 + t] * (int8_t)ap[s * 64 + l * 4 + t];
                    float f = dw[l] * (float)isum;
                    if (has_min) f += mw[l] * sumf[l];
                    acc[l] += da[l] * f;
                }
                wp += (size_t)steps * 64 + LI_W_SIDE;
                ap += (size_t)steps * 64 + LI_A_SIDE;
            }
            float sum = 0;
            for (int l = 0; l < LI_LANES; l++) sum += acc[l];
            y[(int64_t)i * ldy + j] = sum;
        }
    }
}

void li_gemm_f_generic(int64_t kp, const float *w, const float *a, float *y, int64_t ldy,
                       int nw_valid, int na_valid) {
    for (int j = 0; j < nw_valid; j++) {
        for (int i = 0; i < na_valid; i++) {
            const float *wr = w + j * kp, *ar = a + i * kp;
            float acc[LI_LANES] = {0};
            for (int64_t e = 0; e < kp; e += LI_LANES)
                for (int l = 0; l < LI_LANES; l++) acc[l] += wr[e + l] * ar[e + l];
            float sum = 0;
            for (int l = 0; l < LI_LANES; l++) sum += acc[l];
            y[(int64_t)i * ldy + j] = sum;
        }
    }
}
