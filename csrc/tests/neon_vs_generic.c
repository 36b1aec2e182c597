/* neon_vs_generic.c -- the neon variant against generic on random blocks: GEMV (m = 1, 3) and GEMM
 * (m >= 5). Built and run under qemu-user by tests/kernels/test_kernels_neon.py when a cross compiler is there. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "core/li.h"
static float frand(void) { return (float)rand() / RAND_MAX * 2 - 1; }
int main(void) {
    int types[] = {LI_TYPE_Q4_0, LI_TYPE_Q4_1, LI_TYPE_Q8_0, LI_TYPE_Q5_0, LI_TYPE_Q4_K, LI_TYPE_Q6_K, LI_TYPE_F16};
    int fails = 0;
    printf("isa at start: %s (built: %s), neon supported: %d\n", li_isa_name(), li_isa_built(), li_isa_supported("neon"));
    for (unsigned t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        int bs, ts, vt;
        li_type_info(types[t], &bs, &ts, &vt);
        const int n_out = 37, k = bs == 256 ? 768 : 23 * 32, m = 9;
        const size_t rb = (size_t)k / bs * ts;
        uint8_t *w = malloc(rb * n_out);
        for (size_t i = 0; i < rb * n_out; i++) w[i] = rand();
        /* sane fp16 fields: 0x2000..0x2fff (small positive) at every even offset is too broad;
           set the known scale fields */
        for (size_t b = 0; b < rb * n_out / ts; b++) {
            uint8_t *blk = w + b * ts;
            int offs[2] = {-1, -1};
            if (types[t] == LI_TYPE_Q6_K) offs[0] = 208;
            else if (types[t] == LI_TYPE_F16) offs[0] = 0;
            else { offs[0] = 0; if (types[t] == LI_TYPE_Q4_1 || types[t] == LI_TYPE_Q4_K) offs[1] = 2; }
            for (int o = 0; o < 2; o++) if (offs[o] >= 0) { uint16_t h = 0x2000 | (rand() & 0x0fff); memcpy(blk + offs[o], &h, 2); }
        }
        float *x = malloc(sizeof(float) * k * m), *y0 = malloc(sizeof(float) * n_out * m), *y1 = malloc(sizeof(float) * n_out * m);
        for (int i = 0; i < k * m; i++) x[i] = frand();
        for (int mm = 1; mm <= m; mm += 2) {
            li_force_isa("generic");
            li_matmul(types[t], w, rb, n_out, k, x, mm, y0);
            if (li_force_isa("neon") != LI_OK) { printf("cannot force neon\n"); return 1; }
            li_matmul(types[t], w, rb, n_out, k, x, mm, y1);
            double worst = 0, rms = 0;
            for (int i = 0; i < n_out * mm; i++) rms += (double)y0[i] * y0[i];
            rms = sqrt(rms / (n_out * mm));
            for (int i = 0; i < n_out * mm; i++) {
                const double e = fabs((double)y0[i] - y1[i]) / rms;   /* relative to the outputs' scale */
                if (e > worst) worst = e;
            }
            const int bad = worst > 1e-4;
            fails += bad;
            printf("type %2d m=%d: max rel diff neon vs generic %.2e %s\n", types[t], mm, worst, bad ? "FAIL" : "ok");
        }
        free(w), free(x), free(y0), free(y1);
    }
    printf("%s\n", fails ? "FAILED" : "all ok");
    return fails != 0;
}
