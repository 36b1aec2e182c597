/* gemm_avx2.c -- AVX2 GEMM microkernels over the panels of core/panel.c.
 *
 * Integer tile: NW weight rows x NA activation rows. A 16-lane super-group is done
 * as two 8-lane halves. Plain AVX2 multiplies u8 x s8 with maddubs into s16 pair
 * sums; those are added up in s16 for as many steps as cannot overflow
 * (32767 / (2 * 127 * umax): 8 steps for 4-bit types, 4 for 5-bit, 2 for Q6_K) and
 * only then widened with madd, which halves the work for the common types. Where the panel
 * carries a full super-group's corr per 16-bit slot (panel.c, li_panel_corr_slots: Q4_0, Q5_0,
 * Q6_K...), the s16 sums start from it and end at sum((u - o) * q), which fits for a whole half:
 * one widening a half.
 * Q8_0's u = q + 128 does not fit maddubs: it takes the abs/sign path on q.
 */
#if defined(__x86_64__) || defined(_M_X64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>

#include "core/li.h"
#include "x86/avx2.h"
#include "x86/reduce_avx2.h"

/* the tile shapes (x86/avx2.h says why 4 x 3) */
#define NW LI_AVX2_Q_NW
#define NA LI_AVX2_Q_NA
#define F_NW LI_AVX2_F_NW
#define F_NA LI_AVX2_F_NA

/* One weight row x the NA activation rows for one step of 64 bytes' half (32 bytes).
 * ROW_STEP:        acc[i] += maddubs(u, a_i) in s16;
 * ROW_STEP_SIGNED: acc[i] += madd(maddubs(|q|, sign(a_i, q)), 1) in s32, q = u - 128 (Q8_0).
 * Each is one asm block with the weight in one register and the activations read as memory
 * operands: written with intrinsics, GCC loads the NW weights first, runs out of the 16 ymm
 * registers and keeps the accumulators on the stack, a store and a reload per step (perf annotate,
 * BENCHMARKS.md "Kernel choices"). The intrinsics remain for compilers without GNU asm. */
#if defined(__GNUC__)
static const union { uint8_t b[32]; __m256i v; } k_flip = {{[0 ... 31] = 0x80}};
static const union { int16_t h[16]; __m256i v; } k_ones = {{[0 ... 15] = 1}};
#define ROW_STEP(acc, wp, ap, a_row)                                                                   \
    do {                                                                                               \
        __m256i w_, t_;                                                                                \
        __asm__("vmovdqu %[w], %[wr]\n\t"                                                              \
                "vpmaddubsw %[a0], %[wr], %[t]\n\t"                                                    \
                "vpaddw %[t], %[c0], %[c0]\n\t"                                                        \
                "vpmaddubsw %[a1], %[wr], %[t]\n\t"                                                    \
                "vpaddw %[t], %[c1], %[c1]\n\t"                                                        \
                "vpmaddubsw %[a2], %[wr], %[t]\n\t"                                                    \
                "vpaddw %[t], %[c2], %[c2]"                                                            \
                : [c0] "+x"((acc)[0]), [c1] "+x"((acc)[1]), [c2] "+x"((acc)[2]), [wr] "=&x"(w_),        \
                  [t] "=&x"(t_)                                                                        \
                : [w] "m"(*(const __m256i *)(wp)), [a0] "m"(*(const __m256i *)(ap)),                   \
                  [a1] "m"(*(const __m256i *)((ap) + (a_row))),                                         \
                  [a2] "m"(*(const __m256i *)((ap) + 2 * (a_row))));                                   \
    } while (0)
#define SIGNED_PRODUCT(ai, ci)                                                                          \
    "vmovdqu %[" ai "], %[t]\n\t"                                                                      \
    "vpsignb %[q], %[t], %[t]\n\t"                                                                     \
    "vpmaddubsw %[t], %[m], %[t]\n\t"                                                                  \
    "vpmaddwd %[ones], %[t], %[t]\n\t"                                                                 \
    "vpaddd %[t], %[" ci "], %[" ci "]\n\t"
#define ROW_STEP_SIGNED(acc, wp, ap, a_row)                                                            \
    do {                                                                                               \
        __m256i q_, m_, t_;                                                                            \
        __asm__("vmovdqu %[w], %[q]\n\t"                                                               \
                "vpxor %[flip], %[q], %[q]\n\t"                                                        \
                "vpsignb %[q], %[q], %[m]\n\t"                                                         \
                SIGNED_PRODUCT("a0", "c0") SIGNED_PRODUCT("a1", "c1") SIGNED_PRODUCT("a2", "c2")       \
                : [c0] "+x"((acc)[0]), [c1] "+x"((acc)[1]), [c2] "+x"((acc)[2]), [q] "=&x"(q_),          \
                  [m] "=&x"(m_), [t] "=&x"(t_)                                                         \
                : [w] "m"(*(const __m256i *)(wp)), [a0] "m"(*(const __m256i *)(ap)),                   \
                  [a1] "m"(*(const __m256i *)((ap) + (a_row))),                                         \
                  [a2] "m"(*(const __m256i *)((ap) + 2 * (a_row))), [flip] "m"(k_flip.v),              \
                  [ones] "m"(k_ones.v));                                                               \
    } while (0)
#else
#define ROW_STEP(acc, wp, ap, a_row)                                                                   \
    do {                                                                                               \
        const __m256i w_ = _mm256_loadu_si256((const __m256i *)(wp));                                 \
        for (int i_ = 0; i_ < NA; i_++)                                                                \
            (acc)[i_] = _mm256_add_epi16(                                                              \
                (acc)[i_], _mm256_maddubs_epi16(w_, _mm256_loadu_si256((const __m256i *)((ap) + i_ * (a_row))))); \
    } while (0)
#define ROW_STEP_SIGNED(acc, wp, ap, a_row)                                                            \
    do {                                                                                               \
        const __m256i q_ = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(wp)), _mm256_set1_epi8((char)0x80)); \
        const __m256i m_ = _mm256_sign_epi8(q_, q_);                                                   \
        for (int i_ = 0; i_ < NA; i_++) {                                                              \
            const __m256i a_ = _mm256_loadu_si256((const __m256i *)((ap) + i_ * (a_row)));            \
            const __m256i p_ = _mm256_maddubs_epi16(m_, _mm256_sign_epi8(a_, q_));                     \
            (acc)[i_] = _mm256_add_epi32((acc)[i_], _mm256_madd_epi16(p_, _mm256_set1_epi16(1)));     \
        }                                                                                              \
    } while (0)
#endif
#if NA != 3
#error "ROW_STEP is written for three activation rows"
#endif
#if NW != 4
#error "the sums are stored four weight rows at a time (hsum4_ps)"
#endif

/* One 8-lane half of a super-group for the whole tile, added to facc (NW x NA x 8 floats in
 * memory: the accumulators of the steps need all the registers). `slots`: the panel's corr is per
 * 16-bit slot, and the s16 sums start from it and widen once, at the end. Otherwise `flush`: steps
 * summed in s16 before widening (0: Q8_0's signed path), and `has_corr`: the type has an offset, so
 * the integer sums start from the activations' corr; without one (Q4_K, Q4_1) corr is all zeros,
 * and not loading it saves 12 of a half's ~180 loads, which bound the tile on Zen 3
 * (csrc/tests/bench_gemm_tile.c). Offsets are within a row; rows are w_row / a_row bytes apart. */
static inline __attribute__((always_inline)) void sg_half(const uint8_t *w, size_t w_row, const uint8_t *a,
                                                          size_t a_row, int steps, int flush, int has_min,
                                                          int has_corr, int slots, int first, float *facc) {
    const __m256i ones = _mm256_set1_epi16(1);
    const int side = steps * 64;
    __m256i isum[NW][NA];
    if (slots) {
        __m256i acc16[NW][NA];
        for (int j = 0; j < NW; j++)
            for (int i = 0; i < NA; i++)
                acc16[j][i] = _mm256_loadu_si256((const __m256i *)(a + i * a_row + side + 64));   /* corr */
        for (int s = 0; s < steps; s++)
            for (int j = 0; j < NW; j++) ROW_STEP(acc16[j], w + j * w_row + s * 64, a + s * 64, a_row);
        for (int j = 0; j < NW; j++)
            for (int i = 0; i < NA; i++) isum[j][i] = _mm256_madd_epi16(acc16[j][i], ones);
    } else if (flush) {
        for (int j = 0; j < NW; j++)
            for (int i = 0; i < NA; i++)
                isum[j][i] = has_corr ? _mm256_loadu_si256((const __m256i *)(a + i * a_row + side + 64))  /* corr */
                                      : _mm256_setzero_si256();
        for (int s0 = 0; s0 < steps; s0 += flush) {
            __m256i acc16[NW][NA];
            for (int j = 0; j < NW; j++)
                for (int i = 0; i < NA; i++) acc16[j][i] = _mm256_setzero_si256();
            const int s1 = s0 + flush < steps ? s0 + flush : steps;
            for (int s = s0; s < s1; s++)
                for (int j = 0; j < NW; j++) ROW_STEP(acc16[j], w + j * w_row + s * 64, a + s * 64, a_row);
            for (int j = 0; j < NW; j++)
                for (int i = 0; i < NA; i++)
                    isum[j][i] = _mm256_add_epi32(isum[j][i], _mm256_madd_epi16(acc16[j][i], ones));
        }
    } else {   /* the signed path works on q itself: no corr */
        for (int j = 0; j < NW; j++)
            for (int i = 0; i < NA; i++) isum[j][i] = _mm256_setzero_si256();
        for (int s = 0; s < steps; s++)
            for (int j = 0; j < NW; j++) ROW_STEP_SIGNED(isum[j], w + j * w_row + s * 64, a + s * 64, a_row);
    }
    for (int j = 0; j < NW; j++) {
        const __m256 dw = _mm256_loadu_ps((const float *)(w + j * w_row + side));
        const __m256 mw = _mm256_loadu_ps((const float *)(w + j * w_row + side + 64));
        for (int i = 0; i < NA; i++) {
            const float *as = (const float *)(a + i * a_row + side);
            float *fa = facc + (j * NA + i) * 8;
            __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(isum[j][i]), dw);
            if (has_min) f = _mm256_fmadd_ps(mw, _mm256_loadu_ps(as + 32), f);                   /* sumf */
            const __m256 prev = first ? _mm256_setzero_ps() : _mm256_load_ps(fa);   /* no memset: see below */
            _mm256_store_ps(fa, _mm256_fmadd_ps(f, _mm256_loadu_ps(as), prev));                  /* da */
        }
    }
}

#define SG(steps, flush, has_min, has_corr, slots)                                                          \
    sg_half(w + off_w + h * 32, p->w_row_bytes, a + off_a + h * 32, p->a_row_bytes, steps, flush, has_min, \
            has_corr, slots, sg == 0 && h == 0, facc)

void li_gemm_q_avx2(const li_panel_plan *p, const uint8_t *w, const uint8_t *a, int has_min, int offset,
                    int umax, float *y, int64_t ldy, int nw_valid, int na_valid) {
    const int flush = umax > 127 ? 0 : 32767 / (254 * (umax > 0 ? umax : 1));
    /* the first half writes facc rather than adding to zeros, which GCC turned into a rep stos
     * costing 5% of a tile (fma(f, da, +0) is the same float either way) */
    float facc[NW * NA * 8] __attribute__((aligned(32)));
    size_t off_w = 0, off_a = 0;
    for (int64_t sg = 0; sg < p->n_sg; sg++) {
        const int steps = li_panel_steps(p, sg), slots = li_panel_sg_slots(p, sg);
        for (int h = 0; h < 2; h++) {
            /* constant arguments for the common cases, so each gets its own unrolled loop */
            if (steps == 8 && flush == 8 && has_min && !offset) SG(8, 8, 1, 0, 0);    /* Q4_1, Q4_K */
            else if (slots && steps == 8 && !has_min) SG(8, 8, 0, 1, 1);               /* Q4_0, Q5_0 */
            else if (slots && steps == 4 && !has_min) SG(4, 4, 0, 1, 1);               /* Q6_K */
            else if (flush == 0) SG(steps, 0, 0, 0, 0);                                /* Q8_0, the tables */
            else if (slots) SG(steps, steps, has_min, 1, 1);
            else SG(steps, flush, has_min, offset != 0, 0);
        }
        off_w += (size_t)steps * 64 + LI_W_SIDE;
        off_a += (size_t)steps * 64 + LI_A_SIDE;
    }
    /* each activation row's NW sums at once (facc holds all NW x NA: the first half wrote them) */
    for (int i = 0; i < na_valid; i++) {
        const __m128 r = hsum4_ps(_mm256_load_ps(facc + (0 * NA + i) * 8), _mm256_load_ps(facc + (1 * NA + i) * 8),
                                  _mm256_load_ps(facc + (2 * NA + i) * 8), _mm256_load_ps(facc + (3 * NA + i) * 8));
        if (nw_valid == NW) {
            _mm_storeu_ps(y + i * ldy, r);
        } else {
            float s[NW];
            _mm_storeu_ps(s, r);
            for (int j = 0; j < nw_valid; j++) y[i * ldy + j] = s[j];
        }
    }
}

void li_gemm_f_avx2(int64_t kp, const float *w, const float *a, float *y, int64_t ldy, int nw_valid,
                    int na_valid) {
    __m256 acc[F_NW][F_NA];
    for (int j = 0; j < F_NW; j++)
        for (int i = 0; i < F_NA; i++) acc[j][i] = _mm256_setzero_ps();
    for (int64_t e = 0; e < kp; e += 8) {
        __m256 av[F_NA];
        for (int i = 0; i < F_NA; i++) av[i] = _mm256_loadu_ps(a + i * kp + e);
        for (int j = 0; j < F_NW; j++) {
            const __m256 wv = _mm256_loadu_ps(w + j * kp + e);
            for (int i = 0; i < F_NA; i++) acc[j][i] = _mm256_fmadd_ps(wv, av[i], acc[j][i]);
        }
    }
    for (int j = 0; j < nw_valid; j++)
        for (int i = 0; i < na_valid; i++) y[i * ldy + j] = hsum_ps(acc[j][i]);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
