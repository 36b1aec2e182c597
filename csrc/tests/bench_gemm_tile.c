/* bench_gemm_tile.c -- what bounds the AVX2 integer GEMM tile (a measurement, not a test), one thread:
 *   1. the core's issue rate for the tile's instructions: maddubs alone, madd alone, maddubs and paddw
 *      interleaved (the step's mix), in G instructions/s and per cycle of a clock measured here;
 *   2. the tile's step (x86/gemm_avx2.c ROW_STEP: 4 weight loads, 12 maddubs reading the activations
 *      from memory, 12 paddw) in a tight loop from L1: the step's own bound;
 *   3. li_gemm_q_avx2 itself on one 4 x 3 tile (Q4_0's, Q4_K's, Q5_0's and Q6_K's panels, k = 2048) in L1,
 *      and over 36 activation tiles (~300 KB, from L2 as the GEMM streams them): the step plus the
 *      flush and the float steps of each half super-group, with corr per 16-bit slot where the GEMM
 *      uses it (core/panel.c).
 * Build from the repository root with every csrc C file plus this one:
 *   gcc -O3 -ffp-contract=off -std=gnu11 -pthread -Icsrc $(find csrc/core csrc/generic csrc/x86 csrc/arm -name '*.c') csrc/tests/bench_gemm_tile.c -lm
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/li.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "x86/avx2.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* GHz from a chain of dependent adds (one a cycle) */
static double clock_ghz(void) {
    const long n = 400000000;
    long x = 0;
    const double t0 = now();
    for (long i = 0; i < n; i++) __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
    return 4.0 * n / (now() - t0) / 1e9;
}

#define EIGHT(a, b) \
    a " %%ymm14, %%ymm15, %%ymm0\n\t" b " %%ymm14, %%ymm15, %%ymm1\n\t" a " %%ymm14, %%ymm15, %%ymm2\n\t" \
    b " %%ymm14, %%ymm15, %%ymm3\n\t" a " %%ymm14, %%ymm15, %%ymm4\n\t" b " %%ymm14, %%ymm15, %%ymm5\n\t" \
    a " %%ymm14, %%ymm15, %%ymm6\n\t" b " %%ymm14, %%ymm15, %%ymm7\n\t"
#define CLOBBER8 "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7"

__attribute__((target("avx2"))) static double issue_rate(int kind) {
    const long n = 100000000;
    const double t0 = now();
    for (long i = 0; i < n; i++) {
        if (kind == 0) __asm__ volatile(EIGHT("vpmaddubsw", "vpmaddubsw") ::: CLOBBER8);
        else if (kind == 1) __asm__ volatile(EIGHT("vpmaddwd", "vpmaddwd") ::: CLOBBER8);
        else __asm__ volatile(EIGHT("vpmaddubsw", "vpaddw") ::: CLOBBER8);
    }
    return 8.0 * n / (now() - t0) / 1e9;
}

/* one weight row of the step, as ROW_STEP: the weight in ymm12, the activations as memory operands */
#define STEP_ROW(wo, c0, c1, c2)                                                                             \
    "vmovdqu " wo "(%0), %%ymm12\n\t"                                                                        \
    "vpmaddubsw (%1), %%ymm12, %%ymm13\n\tvpaddw %%ymm13, " c0 ", " c0 "\n\t"                                \
    "vpmaddubsw 2816(%1), %%ymm12, %%ymm13\n\tvpaddw %%ymm13, " c1 ", " c1 "\n\t"                            \
    "vpmaddubsw 5632(%1), %%ymm12, %%ymm13\n\tvpaddw %%ymm13, " c2 ", " c2 "\n\t"

__attribute__((target("avx2"))) static double step_ns(const uint8_t *buf) {
    const long n = 100000000;
    const double t0 = now();
    for (long i = 0; i < n; i++) {
        const uint8_t *w = buf + (i & 31) * 64, *a = buf + 32768 + (i & 31) * 64;
        __asm__ volatile(STEP_ROW("0", "%%ymm0", "%%ymm1", "%%ymm2") STEP_ROW("2560", "%%ymm3", "%%ymm4", "%%ymm5")
                         STEP_ROW("5120", "%%ymm6", "%%ymm7", "%%ymm8") STEP_ROW("7680", "%%ymm9", "%%ymm10", "%%ymm11")
                         :: "r"(w), "r"(a)
                         : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                           "xmm11", "xmm12", "xmm13", "memory");
    }
    return (now() - t0) / n * 1e9;
}

/* ns per li_gemm_q_avx2 call on a tile of k = 2048, its activations cycling through `tiles` tiles;
 * has_min, offset and umax a type's (traits.c) */
static double tile_ns(int tiles, const li_panel_plan *p, int has_min, int offset, int umax) {
    uint8_t *w = aligned_alloc(64, 4 * p->w_row_bytes), *a = aligned_alloc(64, (size_t)tiles * 3 * p->a_row_bytes);
    /* bytes 0x3c..0x3f: small quants, and side floats near 0.01 (never denormal: that would time the
     * microcode's assists, not the tile) */
    for (size_t i = 0; i < 4 * p->w_row_bytes; i++) w[i] = (uint8_t)(0x3c + (rand() & 3));
    for (size_t i = 0; i < (size_t)tiles * 3 * p->a_row_bytes; i++) a[i] = (uint8_t)(0x3c + (rand() & 3));
    float y[4 * 3];
    const long calls = 2000000;
    const double t0 = now();
    for (long c = 0; c < calls; c++)
        li_gemm_q_avx2(p, w, a + (size_t)(c % tiles) * 3 * p->a_row_bytes, has_min, offset, umax, y, 4, 4, 3);
    const double ns = (now() - t0) / calls * 1e9;
    free(w), free(a);
    return ns;
}

int main(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2")) {
        printf("no AVX2 on this CPU\n");
        return 0;
    }
    const double ghz = clock_ghz();
    printf("clock (dependent adds): %.2f GHz\n", ghz);
    const char *names[] = {"maddubs", "madd", "maddubs + paddw"};
    for (int k = 0; k < 3; k++) {
        const double r = issue_rate(k);
        printf("%-16s %5.2f G/s  %4.2f a cycle\n", names[k], r, r / ghz);
    }
    uint8_t *buf = aligned_alloc(64, 1 << 16);
    for (int i = 0; i < 1 << 16; i++) buf[i] = (uint8_t)(rand() & 15);
    const double s = step_ns(buf);
    printf("4 x 3 step, tight loop: %.2f ns = %.1f cycles, %.0f GMAC/s (12 maddubs of 32 products)\n", s, s * ghz,
           12 * 32 / s);
    free(buf);
    const struct { const char *name; int group, has_min, offset, umax; } types[] = {
        {"Q4_0", 32, 0, 8, 15}, {"Q4_K", 32, 1, 0, 15}, {"Q5_0", 32, 0, 16, 31}, {"Q6_K", 16, 0, 32, 63}};
    for (int ty = 0; ty < 4; ty++) {
        li_panel_plan p;
        li_panel_make_plan(&p, 2048, types[ty].group);
        p.corr_slots = li_panel_corr_slots(types[ty].group, types[ty].offset, types[ty].umax);   /* as matmul.c */
        const double steps = (double)p.n_sg * 2 * (types[ty].group / 4);   /* two halves a super-group */
        for (int tiles = 1; tiles <= 36; tiles += 35) {
            const double t = tile_ns(tiles, &p, types[ty].has_min, types[ty].offset, types[ty].umax);
            printf("li_gemm_q_avx2, %s's panel, k 2048, %2d activation tile(s): %.0f ns = %.1f cycles a step, "
                   "%.0f GMAC/s\n", types[ty].name, tiles, t, t * ghz / steps, 12.0 * 2048 / t);
        }
    }
    return 0;
}
#else
int main(void) {
    printf("x86-64 with GNU C only\n");
    return 0;
}
#endif
