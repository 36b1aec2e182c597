/* panels_avx2_vs_generic.c -- the AVX2 panel packers against the portable path, byte for byte
 * (tests/kernels/test_panels_avx2.py builds and runs it on an x86-64 CPU with AVX2):
 *
 * - li_panel_pack_a_avx2 against li_panel_pack_a: Q8_K rows (G = 32 and 16), Q8_0 and Q8_1 rows
 *   (G = 32), offsets 0, 8, 32 and 128, corr per lane and per slot, k with and without tails;
 * - pack_w_x4_<type>_avx2 (Q4_0, Q8_0, Q4_K, Q6_K) against gathering the row out of its x4 group,
 *   unpacking it and li_panel_pack_w_avx2. The GEMM's results show these only where the ISA builds
 *   the x4 layout for the type: on AVX2 Q6_K is never repacked, so its packer runs on AVX-512 only.
 *
 * Prints "<n> cases, <m> differ" and exits 1 if any differ. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/li.h"
#include "x86/avx2.h"

static uint32_t rng = 12345u;
static uint32_t next(void) { return rng = rng * 1664525u + 1013904223u; }

static int check_pack_a(int *n) {
    int bad = 0;
    const int acts[3] = {LI_TYPE_Q8_K, LI_TYPE_Q8_0, LI_TYPE_Q8_1}, offsets[4] = {0, 8, 32, 128};
    for (int ai = 0; ai < 3; ai++)
        for (int G = 16; G <= 32; G += 16) {
            if (acts[ai] != LI_TYPE_Q8_K && G == 16) continue;
            const li_type_traits *at = li_traits(acts[ai]);
            for (int64_t k = 256; k <= 2560; k += acts[ai] == LI_TYPE_Q8_K ? 256 : 320) {
                uint8_t *row = malloc((size_t)(k / at->block_size) * at->type_size);
                float *x = malloc(sizeof(float) * (size_t)k);
                for (int64_t i = 0; i < k; i++) x[i] = (float)((int)(next() % 2001) - 1000) / 37.0f;
                at->from_float(x, row, k);
                for (int oi = 0; oi < 4; oi++)
                    for (int slots = 0; slots < 2; slots++) {
                        li_panel_plan p;
                        li_panel_make_plan(&p, k, G);
                        p.corr_slots = slots;
                        uint8_t *want = calloc(1, p.a_row_bytes), *got = calloc(1, p.a_row_bytes);
                        li_panel_pack_a(&p, acts[ai], row, offsets[oi], want);
                        li_panel_pack_a_avx2(&p, acts[ai], row, offsets[oi], got);
                        ++*n;
                        if (memcmp(want, got, p.a_row_bytes)) {
                            bad++;
                            printf("pack_a differs: act type %d, G %d, k %ld, offset %d, slots %d\n", acts[ai], G,
                                   (long)k, offsets[oi], slots);
                        }
                        free(want);
                        free(got);
                    }
                free(row);
                free(x);
            }
        }
    return bad;
}

static int check_pack_w_x4(int *n) {
    const struct { int type; li_pack_w_x4_fn pack; } cases[4] = {
        {LI_TYPE_Q4_0, pack_w_x4_q4_0_avx2}, {LI_TYPE_Q8_0, pack_w_x4_q8_0_avx2},
        {LI_TYPE_Q4_K, pack_w_x4_q4_K_avx2}, {LI_TYPE_Q6_K, pack_w_x4_q6_K_avx2}};
    int bad = 0;
    for (int c = 0; c < 4; c++) {
        const li_type_traits *t = li_traits(cases[c].type);
        for (int64_t k = 512; k <= 8192; k *= 2) {   /* whole super-groups: the only plans it takes */
            const int64_t rows = 8;
            const size_t rb = (size_t)(k / t->block_size) * t->type_size;
            uint8_t *w = malloc(rb * rows), *x4 = malloc(rb * rows), *tmp = malloc(rb), *u = malloc((size_t)k);
            float *dw = malloc(sizeof(float) * (size_t)k), *mw = malloc(sizeof(float) * (size_t)k);
            for (size_t i = 0; i < rb * rows; i++) w[i] = (uint8_t)(next() >> 24);   /* any bits: bytes compared */
            if (li_repack(cases[c].type, LI_LAYOUT_X4, w, rb, rows, x4) != LI_OK) {
                printf("li_repack failed for type %d\n", cases[c].type);
                return bad + 1;
            }
            li_panel_plan p;
            li_panel_make_plan(&p, k, t->group);
            uint8_t *want = calloc(1, p.w_row_bytes), *got = calloc(1, p.w_row_bytes);
            for (int r = 0; r < rows; r++) {
                const uint8_t *row = li_layout_row(cases[c].type, LI_LAYOUT_X4, x4, rb, r, tmp);
                t->unpack(row, k, u, dw, mw);
                li_panel_pack_w_avx2(&p, u, dw, t->has_min ? mw : NULL, want);
                cases[c].pack(&p, x4 + (size_t)(r / LI_X4_ROWS * LI_X4_ROWS) * rb, r % LI_X4_ROWS, got);
                ++*n;
                if (memcmp(want, got, p.w_row_bytes)) {
                    bad++;
                    printf("pack_w_x4 differs: type %d, k %ld, row %d\n", cases[c].type, (long)k, r);
                }
            }
            free(want);
            free(got);
            free(w);
            free(x4);
            free(tmp);
            free(u);
            free(dw);
            free(mw);
        }
    }
    return bad;
}

int main(void) {
    if (!li_active_kernels() || !li_active_kernels()->pack_a) {
        printf("no AVX2 kernels on this CPU\n");
        return 2;
    }
    int n = 0;
    const int bad = check_pack_a(&n) + check_pack_w_x4(&n);
    printf("%d cases, %d differ\n", n, bad);
    return bad != 0;
}
