/* pack_avx2.c -- AVX2 weight unpacking for the GEMM panels (used by the avx2 and avx512 tables).
 *
 * The GEMM reads every weight row once per call, so for a few tokens (m = 4..64) the
 * unpack -- quants to bytes, fp16 scales to f32, and the interleave of core/panel.c --
 * costs as much as the multiply. Here: the hot types' unpack_<type> with F16C and
 * 32-byte nibble splits, and the interleave of full 16-group super-groups of G = 32
 * as two 8x8 dword transposes (the tails and G = 16 take the generic code).
 * Results are identical to generic/unpack_generic.c / core/panel.c (tests compare the matmuls).
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

static inline float fp16(ggml_half h) { return _cvtsh_ss(h); }

static inline void store_q8_0(const int8_t *qs, uint8_t *u) {   /* 32 quants -> u = q + 128 */
    _mm256_storeu_si256((__m256i *)u, _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)qs), _mm256_set1_epi8((char)0x80)));
}

static inline void store_nibbles(const uint8_t *qs, uint8_t *u) {   /* 16 bytes -> 32 elements */
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    _mm256_storeu_si256((__m256i *)u, _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F)));
}

void unpack_q4_0_avx2(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_q4_0 *x = src;
    (void)mw;
    for (int64_t i = 0; i < n / QK4_0; i++, u += QK4_0) {
        dw[i] = fp16(x[i].d);
        store_nibbles(x[i].qs, u);
    }
}

void unpack_q4_1_avx2(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_q4_1 *x = src;
    for (int64_t i = 0; i < n / QK4_1; i++, u += QK4_1) {
        dw[i] = fp16(x[i].d);
        mw[i] = fp16(x[i].m);
        store_nibbles(x[i].qs, u);
    }
}

void unpack_q5_0_avx2(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_q5_0 *x = src;
    (void)mw;
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
    for (int64_t i = 0; i < n / QK5_0; i++, u += QK5_0) {
        dw[i] = fp16(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        /* bit j of qh -> 0x10 in byte j */
        const __m256i b = _mm256_cmpeq_epi8(_mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf), bit),
                                            _mm256_set1_epi64x(-1));
        store_nibbles(x[i].qs, u);
        _mm256_storeu_si256((__m256i *)u, _mm256_or_si256(_mm256_loadu_si256((const __m256i *)u),
                                                          _mm256_and_si256(b, _mm256_set1_epi8(0x10))));
    }
}

void unpack_q8_0_avx2(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_q8_0 *x = src;
    (void)mw;
    for (int64_t i = 0; i < n / QK8_0; i++, u += QK8_0) {
        dw[i] = fp16(x[i].d);
        store_q8_0(x[i].qs, u);
    }
}

/* Q4_K's scale and min products of one block (its header: d, dmin, the packed 6-bit pairs), 8 at a time:
 * dw = d * scale, mw = -(dmin * min) */
static inline void q4_K_sides(ggml_half d, ggml_half dmin, const uint8_t *scales, float *dw, float *mw) {
    uint8_t sm[16];
    li_scales_mins_k4(scales, sm);
    const __m128i v = _mm_loadu_si128((const __m128i *)sm);
    _mm256_storeu_ps(dw, _mm256_mul_ps(_mm256_set1_ps(fp16(d)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))));
    _mm256_storeu_ps(mw, _mm256_xor_ps(_mm256_set1_ps(-0.0f),
                                       _mm256_mul_ps(_mm256_set1_ps(fp16(dmin)),
                                                     _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8))))));
}

/* 32 bytes of Q4_K quants -> their 64 elements (low nibbles, then high) */
static inline void q4_K_nibbles(__m256i q, uint8_t *u) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    _mm256_storeu_si256((__m256i *)u, _mm256_and_si256(q, m4));
    _mm256_storeu_si256((__m256i *)(u + 32), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
}

void unpack_q4_K_avx2(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_q4_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++, dw += 8, mw += 8) {
        q4_K_sides(x[i].d, x[i].dmin, x[i].scales, dw, mw);
        for (int c = 0; c < 4; c++, u += 64) q4_K_nibbles(_mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * c)), u);
    }
}

/* Q6_K's 128 elements of half h of a block from its ql (64 bytes) and qh (32) */
static inline void q6_K_half(const uint8_t *ql, const uint8_t *qh, uint8_t *u) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
    const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    const __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
    _mm256_storeu_si256((__m256i *)u, _mm256_or_si256(_mm256_and_si256(l0, m4),
                                                      _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)));
    _mm256_storeu_si256((__m256i *)(u + 32), _mm256_or_si256(_mm256_and_si256(l1, m4),
                                                             _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)));
    _mm256_storeu_si256((__m256i *)(u + 64), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                                             _mm256_and_si256(hb, m30)));
    _mm256_storeu_si256((__m256i *)(u + 96), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                                             _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30)));
}

/* Q6_K's 16 scale products d * scale, 8 at a time */
static inline void q6_K_sides(ggml_half d16, const int8_t *scales, float *dw) {
    const __m256 d = _mm256_set1_ps(fp16(d16));
    const __m128i sc = _mm_loadu_si128((const __m128i *)scales);
    _mm256_storeu_ps(dw, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    _mm256_storeu_ps(dw + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
}

void unpack_q6_K_avx2(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {
    const block_q6_K *x = src;
    (void)mw;
    for (int64_t i = 0; i < n / QK_K; i++, dw += 16, u += QK_K) {
        q6_K_sides(x[i].d, x[i].scales, dw);
        for (int h = 0; h < 2; h++) q6_K_half(x[i].ql + 64 * h, x[i].qh + 32 * h, u + 128 * h);
    }
}

/* 8 rows of 8 dwords (row r at src + r * stride) -> column c at dst + c * 64 */
static inline void transpose_8x8_strided(const uint8_t *src, size_t stride, uint8_t *dst) {
    __m256i r[8], t[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_si256((const __m256i *)(src + stride * i));
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* r[0..3]: columns 0, 1, 2, 3 (low lane) and 4, 5, 6, 7 (high lane) of rows 0..3; r[4..7] of rows 4..7 */
    for (int c = 0; c < 4; c++) {
        _mm256_storeu_si256((__m256i *)(dst + 64 * c), _mm256_permute2x128_si256(r[c], r[c + 4], 0x20));
        _mm256_storeu_si256((__m256i *)(dst + 64 * (c + 4)), _mm256_permute2x128_si256(r[c], r[c + 4], 0x31));
    }
}

static inline void transpose_8x8(const uint8_t *src, uint8_t *dst) { transpose_8x8_strided(src, 32, dst); }

/* 16 groups of 4 dwords (G = 16) -> dword s of every group at dst + s * 64: as 8 rows of two
 * groups, transposed, then the even and odd groups' columns interleaved */
static inline void transpose_16x4(const uint8_t *src, uint8_t *dst) {
    uint8_t cols[8 * 64];   /* column c (c < 4: dword c of groups 0, 2, ..; c >= 4: dword c-4 of 1, 3, ..) */
    transpose_8x8(src, cols);
    for (int s = 0; s < 4; s++) {
        const __m256i even = _mm256_loadu_si256((const __m256i *)(cols + 64 * s));
        const __m256i odd = _mm256_loadu_si256((const __m256i *)(cols + 64 * (s + 4)));
        const __m256i lo = _mm256_unpacklo_epi32(even, odd), hi = _mm256_unpackhi_epi32(even, odd);
        _mm256_storeu_si256((__m256i *)(dst + 64 * s), _mm256_permute2x128_si256(lo, hi, 0x20));
        _mm256_storeu_si256((__m256i *)(dst + 64 * s + 32), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
}

/* the tail super-groups of p as a plan of their own (the packers' generic code takes them) */
static inline li_panel_plan tail_plan(const li_panel_plan *p) {
    li_panel_plan tail = *p;
    tail.n_groups = p->n_groups - 16 * p->n_full;
    tail.n_full = 0;
    tail.n_sg = p->n_tail;
    return tail;
}

/* li_panel_pack_w with the full super-groups done as 8x8 dword transposes */
void li_panel_pack_w_avx2(const li_panel_plan *p, const uint8_t *u, const float *dw, const float *mw,
                          uint8_t *dst) {
    const int G = p->group, steps = G / 4;
    const size_t sg_bytes = (size_t)steps * 64 + LI_W_SIDE;
    for (int64_t sg = 0; sg < p->n_full; sg++, dst += sg_bytes, u += 16 * G) {
        if (G == 32) {
            transpose_8x8(u, dst);               /* groups 0..7 -> lanes 0..7 */
            transpose_8x8(u + 8 * 32, dst + 32); /* groups 8..15 -> lanes 8..15 */
        } else {
            transpose_16x4(u, dst);
        }
        memcpy(dst + steps * 64, dw + 16 * sg, 16 * sizeof(float));
        if (mw) memcpy(dst + steps * 64 + 64, mw + 16 * sg, 16 * sizeof(float));
        else memset(dst + steps * 64 + 64, 0, 16 * sizeof(float));
    }
    if (p->n_tail) {
        const li_panel_plan tail = tail_plan(p);
        li_panel_pack_w(&tail, u, dw + 16 * p->n_full, mw ? mw + 16 * p->n_full : NULL, dst);
    }
}

/* --- weight panels straight from the x4 layout (core/repack.c) --------------------------------
 * Row r of an x4 group at g, its full super-groups only (the caller takes this path where the plan
 * has no tail): each super-group's quants unpacked into u on the stack and transposed as
 * li_panel_pack_w_avx2 does, its scales to the side, without gathering the row first. The same
 * bytes as gathering, unpack_<type>_avx2 and li_panel_pack_w_avx2. */
static inline uint8_t *w_sides(uint8_t *dst, int steps) { return dst + steps * 64; }

/* Q4_0 and Q8_0: a super-group is 16 blocks, one group of 32 each; an x4 block is the four rows'
 * d, then their quants row after row (quant_blocks.h) */
static inline __attribute__((always_inline)) void pack_w_x4_g32(const li_panel_plan *p, const uint8_t *g, int r,
                                                                uint8_t *dst, const int Q8) {
    const size_t block = Q8 ? sizeof(block_q8_0x4) : sizeof(block_q4_0x4);
    uint8_t u[16 * 32] __attribute__((aligned(32)));
    for (int64_t sg = 0; sg < p->n_full; sg++, g += 16 * block, dst += 8 * 64 + LI_W_SIDE) {
        float *dw = (float *)w_sides(dst, 8);
        for (int l = 0; l < 16; l++) {
            if (Q8) {
                const block_q8_0x4 *x = (const block_q8_0x4 *)g + l;
                dw[l] = fp16(x->d[r]);
                store_q8_0(x->qs + QK8_0 * r, u + 32 * l);
            } else {
                const block_q4_0x4 *x = (const block_q4_0x4 *)g + l;
                dw[l] = fp16(x->d[r]);
                store_nibbles(x->qs + QK4_0 / 2 * r, u + 32 * l);
            }
        }
        transpose_8x8(u, dst);
        transpose_8x8(u + 8 * 32, dst + 32);
        memset(dw + 16, 0, 16 * sizeof(float));
    }
}

void pack_w_x4_q4_0_avx2(const li_panel_plan *p, const uint8_t *g, int r, uint8_t *dst) { pack_w_x4_g32(p, g, r, dst, 0); }

void pack_w_x4_q8_0_avx2(const li_panel_plan *p, const uint8_t *g, int r, uint8_t *dst) { pack_w_x4_g32(p, g, r, dst, 1); }

void pack_w_x4_q4_K_avx2(const li_panel_plan *p, const uint8_t *g, int r, uint8_t *dst) {
    const block_q4_Kx4 *x = (const block_q4_Kx4 *)g;
    uint8_t u[2 * QK_K] __attribute__((aligned(32)));
    for (int64_t sg = 0; sg < p->n_full; sg++, x += 2, dst += 8 * 64 + LI_W_SIDE) {   /* 16 groups of 32: 2 blocks */
        float *dw = (float *)w_sides(dst, 8);
        for (int b = 0; b < 2; b++) {
            q4_K_sides(x[b].h[r].d, x[b].h[r].dmin, x[b].h[r].scales, dw + 8 * b, dw + 16 + 8 * b);
            for (int c = 0; c < 4; c++)   /* quants 32c .. 32c + 31: chunks 2c and 2c + 1 of row r */
                q4_K_nibbles(_mm256_loadu2_m128i((const __m128i *)x[b].qs[2 * c + 1][r], (const __m128i *)x[b].qs[2 * c][r]),
                             u + QK_K * b + 64 * c);
        }
        transpose_8x8(u, dst);
        transpose_8x8(u + QK_K, dst + 32);
    }
}

void pack_w_x4_q6_K_avx2(const li_panel_plan *p, const uint8_t *g, int r, uint8_t *dst) {
    const block_q6_Kx4 *x = (const block_q6_Kx4 *)g;
    uint8_t u[QK_K] __attribute__((aligned(32)));
    for (int64_t sg = 0; sg < p->n_full; sg++, x++, dst += 4 * 64 + LI_W_SIDE) {   /* 16 groups of 16: 1 block */
        float *dw = (float *)w_sides(dst, 4);
        q6_K_sides(x->h[r].d, x->h[r].scales, dw);
        for (int h = 0; h < 2; h++) q6_K_half(x->q[r] + 64 * h, x->q[r] + QK_K / 2 + 32 * h, u + 128 * h);
        transpose_16x4(u, dst);
        memset(dw + 16, 0, 16 * sizeof(float));
    }
}

/* An activation super-group's side data from its 8 or 4 packed steps (lanes 0..7 at +0, 8..15 at +32
 * of each 64-byte step): sum[l] of lane l's quants, and corr as li_panel_pack_a writes it, per lane
 * (-offset * sum) or per 16-bit slot (-offset * the slot's pair sums, wrapped to 16 bits alike). */
static inline void act_side(const uint8_t *steps_at, int steps, int slots, int offset, float *ssum, int32_t *scorr) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int half = 0; half < 2; half++) {
        __m256i pairs = _mm256_setzero_si256();   /* per slot: its two quants a step, summed over steps */
        for (int s = 0; s < steps; s++)
            pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(ones8, _mm256_loadu_si256((const __m256i *)(steps_at + 64 * s + 32 * half))));
        const __m256i sum = _mm256_madd_epi16(pairs, ones16);
        _mm256_storeu_ps(ssum + 8 * half, _mm256_cvtepi32_ps(sum));
        const __m256i corr = slots ? _mm256_mullo_epi16(pairs, _mm256_set1_epi16((short)-offset))
                                   : _mm256_mullo_epi32(sum, _mm256_set1_epi32(-offset));
        _mm256_storeu_si256((__m256i *)(scorr + 8 * half), corr);
    }
}

/* li_panel_pack_a with the full super-groups as dword transposes, for Q8_K (G = 32 or 16), Q8_0 and
 * Q8_1 rows; the tails (and any other activation type) take the generic code. A full super-group is
 * whole activation blocks: 2 of Q8_K's at G = 32, 1 at G = 16, 16 of Q8_0's or Q8_1's. */
void li_panel_pack_a_avx2(const li_panel_plan *p, int act_type, const void *row, int offset, uint8_t *dst) {
    const int G = p->group, steps = G / 4;
    const int q8k = act_type == LI_TYPE_Q8_K, q8_0 = act_type == LI_TYPE_Q8_0, q8_1 = act_type == LI_TYPE_Q8_1;
    if (!(q8k && (G == 32 || G == 16)) && !((q8_0 || q8_1) && G == 32)) {
        li_panel_pack_a(p, act_type, row, offset, dst);
        return;
    }
    const size_t sg_in = q8k ? (size_t)(16 * G / QK_K) * sizeof(block_q8_K)
                             : 16 * (q8_0 ? sizeof(block_q8_0) : sizeof(block_q8_1));
    const uint8_t *src = row;
    for (int64_t sg = 0; sg < p->n_full; sg++, src += sg_in, dst += (size_t)steps * 64 + LI_A_SIDE) {
        float *sda = (float *)(dst + steps * 64), *ssum = sda + 2 * LI_LANES;
        int32_t *scorr = (int32_t *)(sda + LI_LANES);
        if (q8k) {
            const block_q8_K *b = (const block_q8_K *)src;
            if (G == 32) {
                transpose_8x8((const uint8_t *)b[0].qs, dst);
                transpose_8x8((const uint8_t *)b[1].qs, dst + 32);
                for (int l = 0; l < LI_LANES; l++) sda[l] = b[l / 8].d;
            } else {
                transpose_16x4((const uint8_t *)b[0].qs, dst);
                for (int l = 0; l < LI_LANES; l++) sda[l] = b[0].d;
            }
        } else {
            const size_t bs = q8_0 ? sizeof(block_q8_0) : sizeof(block_q8_1), qoff = q8_0 ? 2 : 4;
            transpose_8x8_strided(src + qoff, bs, dst);
            transpose_8x8_strided(src + 8 * bs + qoff, bs, dst + 32);
            for (int l = 0; l < LI_LANES; l++) {
                ggml_half d;
                memcpy(&d, src + l * bs, sizeof(d));
                sda[l] = fp16(d);
            }
        }
        act_side(dst, steps, li_panel_sg_slots(p, sg), offset, ssum, scorr);
    }
    if (p->n_tail) {   /* from the block after the full super-groups on */
        const li_panel_plan tail = tail_plan(p);
        li_panel_pack_a(&tail, act_type, src, offset, dst);
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
