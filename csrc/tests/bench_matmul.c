/* bench_matmul.c -- li_matmul timings without Python, per ISA and thread count (a measurement,
 * not a test). Build from the repository root with every csrc C file plus this one:
 *   gcc -O3 -ffp-contract=off -std=gnu11 -pthread -Icsrc $(find csrc/core csrc/generic csrc/x86 csrc/arm -name '*.c') csrc/tests/bench_matmul.c -lm
 * Random blocks with small finite scales; the best of several runs within ~0.3 s each. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/li.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct { const char *name; int type, scale_off[2]; int64_t n_out, k, m; } bench_case;

int main(int argc, char **argv) {
    const bench_case cases[] = {
        {"GEMV ffn_down", LI_TYPE_Q4_1, {0, 2}, 576, 1536, 1},
        {"GEMV output", LI_TYPE_Q8_0, {0, -1}, 49152, 576, 1},
        {"GEMV gemma ffn", LI_TYPE_Q4_K, {0, 2}, 640, 2048, 1},
        {"GEMV gemma ffn", LI_TYPE_Q6_K, {208, -1}, 640, 2048, 1},
        {"GEMM ffn_down", LI_TYPE_Q4_1, {0, 2}, 576, 1536, 512},
        {"GEMM gemma ffn", LI_TYPE_Q4_K, {0, 2}, 640, 2048, 512},
        {"GEMM ffn_up", LI_TYPE_Q8_0, {0, -1}, 1536, 576, 512},
    };
    const int threads[] = {1, 2, 4, 8, 16};
    const char *isas[] = {"generic", "avx2", "avx512", "neon"};
    const double budget = argc > 1 ? atof(argv[1]) : 0.3;
    printf("built: %s, default threads %d\n", li_isa_built(), li_default_threads());
    for (unsigned c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const bench_case *bc = &cases[c];
        int bs, ts, vt;
        li_type_info(bc->type, &bs, &ts, &vt);
        const size_t rb = (size_t)(bc->k / bs) * (size_t)ts, wbytes = rb * (size_t)bc->n_out;
        uint8_t *w = malloc(wbytes);
        float *x = malloc(sizeof(float) * (size_t)(bc->k * bc->m)), *y = malloc(sizeof(float) * (size_t)(bc->n_out * bc->m));
        srand(1);
        for (size_t i = 0; i < wbytes; i++) w[i] = (uint8_t)rand();
        for (size_t b = 0; b < wbytes / (size_t)ts; b++)
            for (int o = 0; o < 2; o++)
                if (bc->scale_off[o] >= 0) {
                    const uint16_t h = (uint16_t)(0x1c00 | (rand() & 0x3ff));   /* ~0.004..0.008 */
                    memcpy(w + b * (size_t)ts + bc->scale_off[o], &h, 2);
                }
        for (int64_t i = 0; i < bc->k * bc->m; i++) x[i] = (float)rand() / RAND_MAX * 2 - 1;
        const double flops = 2.0 * (double)bc->n_out * (double)bc->k * (double)bc->m;
        printf("\n%s type %d %lldx%lld m=%lld (%.2f MB)\n", bc->name, bc->type, (long long)bc->n_out,
               (long long)bc->k, (long long)bc->m, wbytes / 1e6);
        for (unsigned s = 1; s < sizeof(isas) / sizeof(isas[0]); s++) {
            if (li_force_isa(isas[s]) != LI_OK) continue;
            for (unsigned t = 0; t < sizeof(threads) / sizeof(threads[0]); t++) {
                if (threads[t] > 2 * li_default_threads()) break;
                li_set_threads(threads[t]);
                li_matmul(bc->type, w, rb, bc->n_out, bc->k, x, bc->m, y);   /* warm up, start workers */
                double best = 1e9, start = now();
                for (int rep = 0; rep < 3 || now() - start < budget; rep++) {
                    const double t0 = now();
                    li_matmul(bc->type, w, rb, bc->n_out, bc->k, x, bc->m, y);
                    const double dt = now() - t0;
                    if (dt < best) best = dt;
                }
                printf("  %-7s %2d thr %10.1f us %8.1f GFLOP/s %7.1f GB/s\n", isas[s], threads[t], best * 1e6,
                       flops / best / 1e9, wbytes / best / 1e9);
            }
        }
        free(w), free(x), free(y);
    }
    return 0;
}
