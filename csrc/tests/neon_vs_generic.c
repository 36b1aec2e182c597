/* neon_vs_generic.c -- the neon variant against generic on random blocks. Built and run under
 * qemu-user by tests/kernels/test_kernels_neon.py when a cross compiler is there.
 *
 * Per type, three checks:
 * 1. li_matmul, GEMV (m = 1, 3: the type's vec_dot_rows) and GEMM (m = 9), on random blocks with
 *    ordinary and extreme scales (fp16 subnormals, the largest fp16, MXFP4 exponents far from 0)
 *    and activation rows from 1e-3 to 1e3 with all-zero blocks. Tolerance: the float parts sum the
 *    block terms in a different order (f32 lanes vs generic's double), so each side is off by at
 *    most about (blocks + 8) * 2^-24 of S = sum |w| |a| over the row (a the quantized activations);
 *    with at most 24 blocks per row here that is about 2e-6 S, checked as 1e-5 S.
 * 2. vec_dot_rows for 1..4 rows gives, bit for bit, vec_dot per row.
 * 3. Exact case: power-of-two scales and |q| <= 31 activations make every product a multiple of a
 *    granule g (1, or 1/4, 1/8 for the i-quants' fractional scales) and S < 2^24 g, so every partial
 *    sum in any order is an exact float: neon must equal generic bit for bit. This catches an
 *    integer slip (one element, one sign) that the tolerance of check 1 would let through.
 * Checks 2 and 3 read the weight and activation rows from buffers that end at an inaccessible page,
 * so a kernel that loads past a row's last block crashes the test.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#include "core/li.h"
#include "generic/generic.h"

static float frand(void) { return (float)rand() / RAND_MAX * 2 - 1; }
static uint16_t fp16_random(int extreme) {
    if (!extreme) return 0x2000 | (rand() & 0x0fff);   /* ~2^-7 .. 2^-5 */
    switch (rand() % 4) {
    case 0: return 0x0001 | (rand() & 0x03ff);         /* subnormal */
    case 1: return 0x7bff;                             /* the largest finite fp16 */
    case 2: return 0x0400;                             /* the smallest normal */
    default: return 0x3c00 | (rand() & 0x03ff);        /* 1 .. 2 */
    }
}
static void put16(uint8_t *p, uint16_t h) { memcpy(p, &h, 2); }

/* The scale fields of one weight block: random (mode 0), extreme (1), or exactly h (mode 2). */
static void set_scales(int type, uint8_t *blk, int mode, uint16_t h) {
#define D(field_off) put16(blk + (field_off), mode == 2 ? h : fp16_random(mode))
    switch (type) {
    case LI_TYPE_F16: D(0); break;
    case LI_TYPE_Q4_1: case LI_TYPE_Q5_1: D(0); D(2); break;
    case LI_TYPE_Q4_K: case LI_TYPE_Q5_K: D(offsetof(block_q4_K, d)); D(offsetof(block_q4_K, dmin)); break;
    case LI_TYPE_Q2_K: D(offsetof(block_q2_K, d)); D(offsetof(block_q2_K, dmin)); break;
    case LI_TYPE_Q3_K: D(offsetof(block_q3_K, d)); break;
    case LI_TYPE_Q6_K: D(offsetof(block_q6_K, d)); break;
    case LI_TYPE_TQ1_0: D(offsetof(block_tq1_0, d)); break;
    case LI_TYPE_TQ2_0: D(offsetof(block_tq2_0, d)); break;
    case LI_TYPE_MXFP4:   /* e8m0: 2^(e - 128); mode 2 wants 2^-2 */
        blk[0] = mode == 2 ? 126 : mode == 1 ? (rand() % 2 ? rand() % 3 : 180 + rand() % 28) : 118 + rand() % 20;
        break;
    case LI_TYPE_IQ1_M: {   /* d is the top nibbles of the four scale u16 */
        block_iq1_m *b = (block_iq1_m *)blk;
        const uint16_t d = mode == 2 ? h : fp16_random(mode);
        for (int j = 0; j < 4; j++) {
            uint16_t sc;
            memcpy(&sc, b->scales + 2 * j, 2);
            sc = (uint16_t)((sc & 0x0fff) | ((d >> 4 * j) & 0xF) << 12);
            memcpy(b->scales + 2 * j, &sc, 2);
        }
        break;
    }
    default: D(0); break;   /* d first: Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS and the grid i-quants */
    }
#undef D
}

/* the activation row's values, from the quantized blocks (the product's a) */
static void act_values(int act_type, const void *row, int64_t n, float *out) {
    for (int64_t b = 0; b < n / (act_type == LI_TYPE_Q8_K ? QK_K : 32); b++) {
        if (act_type == LI_TYPE_Q8_K) {
            const block_q8_K *q = (const block_q8_K *)row + b;
            for (int j = 0; j < QK_K; j++) out[b * QK_K + j] = q->d * q->qs[j];
        } else if (act_type == LI_TYPE_Q8_1) {
            const block_q8_1 *q = (const block_q8_1 *)row + b;
            for (int j = 0; j < 32; j++) out[b * 32 + j] = li_fp16_to_fp32(q->d) * q->qs[j];
        } else {
            const block_q8_0 *q = (const block_q8_0 *)row + b;
            for (int j = 0; j < 32; j++) out[b * 32 + j] = li_fp16_to_fp32(q->d) * q->qs[j];
        }
    }
}

static double abs_dot(const float *w, const float *a, int64_t n) {
    double s = 0;
    for (int64_t e = 0; e < n; e++) s += fabs((double)w[e] * a[e]);
    return s;
}

/* `bytes` that end where an inaccessible page starts (never freed: a few per type) */
static void *guarded(size_t bytes) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), span = (bytes + page - 1) / page * page;
    uint8_t *p = mmap(NULL, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED || mprotect(p + span, page, PROT_NONE) != 0) { perror("guarded"); exit(2); }
    return p + span - bytes;
}

static int fails = 0;

/* check 1 */
static void check_matmul(int type, int bs, int ts, int vt, int extreme) {
    const int n_out = 37, k = bs == 256 ? 768 : 23 * 32, m = 9;
    const size_t rb = (size_t)k / bs * ts;
    uint8_t *w = malloc(rb * n_out);
    for (size_t i = 0; i < rb * n_out; i++) w[i] = rand();
    for (size_t b = 0; b < rb * n_out / ts; b++) set_scales(type, w + b * ts, extreme, 0);
    float *x = malloc(sizeof(float) * k * m), *y0 = malloc(sizeof(float) * n_out * m), *y1 = malloc(sizeof(float) * n_out * m);
    for (int i = 0; i < m; i++) {
        const float row_scale = i % 3 == 0 ? 1e-3f : i % 3 == 1 ? 1.0f : 1e3f;
        for (int e = 0; e < k; e++) x[i * k + e] = (e / 32) % 5 == 2 ? 0.0f : frand() * row_scale;
    }
    /* S per (row, output): the weights dequantized, the activations as the kernels quantize them */
    float *wd = malloc(sizeof(float) * k * n_out), *ad = malloc(sizeof(float) * k);
    double *S = malloc(sizeof(double) * n_out * m);
    void *aq = malloc((size_t)k * 2 + 4096);
    for (int j = 0; j < n_out; j++) li_dequantize_row(type, w + j * rb, wd + (size_t)j * k, k);
    for (int i = 0; i < m; i++) {
        if (type == LI_TYPE_F16) memcpy(ad, x + i * k, sizeof(float) * k);   /* products of f16 values: S from x is close enough */
        else { li_quantize_row(vt, x + i * k, aq, k); act_values(vt, aq, k, ad); }
        for (int j = 0; j < n_out; j++) S[i * n_out + j] = abs_dot(wd + (size_t)j * k, ad, k);
    }
    for (int mm = 1; mm <= m; mm += 2) {
        if (mm == 5 || mm == 7) continue;
        li_force_isa("generic");
        li_matmul(type, w, rb, n_out, k, x, mm, y0);
        li_force_isa("neon");
        li_matmul(type, w, rb, n_out, k, x, mm, y1);
        double worst = 0;
        for (int i = 0; i < n_out * mm; i++) {
            const double e = fabs((double)y0[i] - y1[i]) / (S[i] > 0 ? S[i] : 1e-300);
            if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e;
        }
        const int bad = !(worst <= 1e-5);
        fails += bad;
        printf("type %2d %s m=%d: max |neon - generic| / S %.2e %s\n", type, extreme ? "extreme" : "random ", mm,
               worst, bad ? "FAIL" : "ok");
    }
    free(w), free(x), free(y0), free(y1), free(wd), free(ad), free(S), free(aq);
}

/* checks 2 and 3: raw vec_dot / vec_dot_rows of the neon table against generic's vec_dot */
static void check_dots(int type, int bs, int ts, int vt) {
    const int n = 256, n_rows = 4;   /* one super-block, or 8 blocks of 32 */
    const size_t rb = (size_t)n / bs * ts;
    uint8_t *w = guarded(rb * n_rows);
    for (size_t i = 0; i < rb * n_rows; i++) w[i] = rand();
    const int granule_log2 = type == LI_TYPE_IQ3_XXS ? -2 :
        (type == LI_TYPE_IQ2_XXS || type == LI_TYPE_IQ2_XS || type == LI_TYPE_IQ2_S || type == LI_TYPE_IQ1_S ||
         type == LI_TYPE_IQ1_M) ? -3 : 0;
    const float dw = 0.25f, da = 1.0f / 64;   /* 0x3400, 0x2400 */
    for (size_t b = 0; b < rb * n_rows / ts; b++) set_scales(type, w + b * ts, 2, 0x3400);
    /* the activation row built directly: q in -31..31, d = 2^-6 */
    union { block_q8_0 q80[8]; block_q8_1 q81[8]; block_q8_K q8k; } a;
    memset(&a, 0, sizeof(a));
    float av[256], wv[256];
    int8_t q[256];
    for (int e = 0; e < n; e++) q[e] = (int8_t)(rand() % 63 - 31);
    if (vt == LI_TYPE_Q8_K) {
        a.q8k.d = da;
        memcpy(a.q8k.qs, q, 256);
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int e = 0; e < 16; e++) s += q[16 * g + e];
            a.q8k.bsums[g] = (int16_t)s;
        }
    } else {
        for (int b = 0; b < 8; b++) {
            if (vt == LI_TYPE_Q8_1) a.q81[b].d = 0x2400, memcpy(a.q81[b].qs, q + 32 * b, 32);
            else a.q80[b].d = 0x2400, memcpy(a.q80[b].qs, q + 32 * b, 32);
        }
    }
    const size_t a_bytes = vt == LI_TYPE_Q8_K ? sizeof(block_q8_K) : vt == LI_TYPE_Q8_1 ? 8 * sizeof(block_q8_1)
                                                                                   : 8 * sizeof(block_q8_0);
    void *ag = guarded(a_bytes);
    memcpy(ag, &a, a_bytes);
    act_values(vt, ag, n, av);
    float sums[16];
    li_act_sums(vt, ag, n, sums);

    li_force_isa("neon");
    const li_type_traits *t = li_traits(type);
    float single[4], rows[4];
    for (int r = 0; r < n_rows; r++) t->vec_dot(n, &single[r], w + r * rb, ag, sums);
    int rows_bad = 0;
    if (t->vec_dot_rows)
        for (int nr = 1; nr <= n_rows; nr++) {
            t->vec_dot_rows(n, rows, w, rb, nr, ag, sums);
            rows_bad += memcmp(rows, single, sizeof(float) * nr) != 0;
        }
    li_force_isa("generic");
    int exact_bad = 0, range_bad = 0;
    for (int r = 0; r < n_rows; r++) {
        float ref;
        li_vec_dot(type, n, w + r * rb, ag, &ref);
        li_dequantize_row(type, w + r * rb, wv, n);
        const double S = abs_dot(wv, av, n) / ((double)dw * da * ldexp(1.0, granule_log2));
        range_bad += !(S < 16777216.0);   /* the case is exact only below 2^24 granules */
        exact_bad += memcmp(&ref, &single[r], sizeof(float)) != 0;
        if (memcmp(&ref, &single[r], sizeof(float)) != 0)
            printf("  row %d: neon %.9g generic %.9g\n", r, single[r], ref);
    }
    fails += rows_bad + exact_bad + range_bad;
    printf("type %2d: vec_dot_rows %s, exact case %s%s\n", type, t->vec_dot_rows ? (rows_bad ? "FAIL" : "ok") : "none",
           exact_bad ? "FAIL" : "ok", range_bad ? " (FAIL: out of the exact range)" : "");
}

int main(void) {
    const int types[] = {LI_TYPE_Q4_0, LI_TYPE_Q4_1, LI_TYPE_Q8_0, LI_TYPE_Q5_0, LI_TYPE_Q5_1, LI_TYPE_Q2_K,
                         LI_TYPE_Q3_K, LI_TYPE_Q4_K, LI_TYPE_Q5_K, LI_TYPE_Q6_K, LI_TYPE_F16, LI_TYPE_IQ4_NL,
                         LI_TYPE_IQ4_XS, LI_TYPE_MXFP4, LI_TYPE_TQ1_0, LI_TYPE_TQ2_0, LI_TYPE_IQ2_XXS,
                         LI_TYPE_IQ2_XS, LI_TYPE_IQ2_S, LI_TYPE_IQ3_XXS, LI_TYPE_IQ3_S, LI_TYPE_IQ1_S,
                         LI_TYPE_IQ1_M};
    setvbuf(stdout, NULL, _IOLBF, 0);   /* a crash (a load past a guarded row) shows the type it hit */
    printf("isa at start: %s (built: %s), neon supported: %d\n", li_isa_name(), li_isa_built(), li_isa_supported("neon"));
    if (li_force_isa("neon") != LI_OK) { printf("cannot force neon\n"); return 1; }
    for (unsigned i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        int bs, ts, vt;
        li_type_info(types[i], &bs, &ts, &vt);
        li_force_isa("neon");
        printf("%s: neon vec_dot %s\n", li_traits(types[i])->name,
               li_traits(types[i])->vec_dot != li_traits_generic[types[i]].vec_dot ? "yes" : "generic");
        check_matmul(types[i], bs, ts, vt, 0);
        check_matmul(types[i], bs, ts, vt, 1);
        if (types[i] != LI_TYPE_F16) check_dots(types[i], bs, ts, vt);
    }
    printf("%s\n", fails ? "FAILED" : "all ok");
    return fails != 0;
}
