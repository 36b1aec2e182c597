/* quants_x4_avx512.c -- AVX-512 VNNI dots over repacked groups of four rows (core/repack.c).
 *
 * One x4 block holds four rows' block i: their scales, then their quants row after row, so one
 * 512-bit load (Q4_0: 64 nibble bytes) or two (Q8_0: 128 bytes) feed all four rows, the activation
 * block is broadcast to every row's lanes, and dpbusd leaves row r's partial sums in its own lanes.
 * Per block and row that is a fraction of the shuffles the row-major dots need (quants_avx512.c
 * unpacks and re-pairs every row's blocks), so the GEMV is limited by memory, not by these dots.
 * Unsigned u times the signed activation, as there: Q4_0's u - 8 and Q8_0's (q + 128) - 128 through
 * the activation's d * sum(q) (a_sums), so the integer parts stay exact.
 */
#if defined(__x86_64__) || defined(_M_X64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#endif

#include <immintrin.h>

#include "core/li.h"
#include "x86/avx512.h"
#include "x86/q6_K_avx512.h"
#include "x86/x4_x86.h"

/* s[r] = lanes of row r summed (every lane of acc belongs to the row `lanes_per_row` picks) - offset * side[r] */
static inline void x4_store(__m512 acc, int lanes_per_row, __m128 side, float offset, float *s) {
    float l[16], sd[4];
    _mm512_storeu_ps(l, acc);
    _mm_storeu_ps(sd, side);
    for (int r = 0; r < LI_X4_ROWS; r++) {
        float t = 0.0f;
        for (int e = 0; e < lanes_per_row; e++) t += l[r * lanes_per_row + e];
        s[r] = t - offset * sd[r];
    }
}

/* one Q4_0 x4 block: lanes 4r..4r+3 of the result are row r's dpbusd sums */
static inline __m512i q4_0x4_block(const block_q4_0x4 *g, const block_q8_0 *a) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i q = _mm512_loadu_si512((const void *)g->qs);
    const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
    const __m512i alo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)a->qs));        /* elements 0..15 */
    const __m512i ahi = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(a->qs + 16)));  /* 16..31 */
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, alo), hi, ahi);
}

void vec_dot_x4_q4_0_q8_0_avx512(int64_t n, float *s, const void *vg, const void *va, const float *as) {
    const block_q4_0x4 *g = vg;
    const block_q8_0 *a = va;
    const __m512i row4 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();   /* two chains: even, odd blocks */
    __m128 side = _mm_setzero_ps();
    const int64_t nb = n / QK4_0;
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m128 s0 = x4_scales(g[i].d, as + 2 * i, &side);
        acc0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(row4, _mm512_castps128_ps512(s0)),
                               _mm512_cvtepi32_ps(q4_0x4_block(g + i, a + i)), acc0);
        const __m128 s1 = x4_scales(g[i + 1].d, as + 2 * (i + 1), &side);
        acc1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(row4, _mm512_castps128_ps512(s1)),
                               _mm512_cvtepi32_ps(q4_0x4_block(g + i + 1, a + i + 1)), acc1);
    }
    if (i < nb) {
        const __m128 s0 = x4_scales(g[i].d, as + 2 * i, &side);
        acc0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(row4, _mm512_castps128_ps512(s0)),
                               _mm512_cvtepi32_ps(q4_0x4_block(g + i, a + i)), acc0);
    }
    x4_store(_mm512_add_ps(acc0, acc1), 4, side, 8.0f, s);
}

void vec_dot_x4_q8_0_q8_0_avx512(int64_t n, float *s, const void *vg, const void *va, const float *as) {
    const block_q8_0x4 *g = vg;
    const block_q8_0 *a = va;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const __m512i rows01 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i rows23 = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
    __m512 acc01 = _mm512_setzero_ps(), acc23 = _mm512_setzero_ps();   /* lanes 8r'..: rows 0,1 | 2,3 */
    __m128 side = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m128 sc = x4_scales(g[i].d, as + 2 * i, &side);
        const __m512i av = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)a[i].qs));
        const __m512i u01 = _mm512_xor_si512(_mm512_loadu_si512((const void *)g[i].qs), flip);
        const __m512i u23 = _mm512_xor_si512(_mm512_loadu_si512((const void *)(g[i].qs + 64)), flip);
        const __m512 s512 = _mm512_castps128_ps512(sc);
        acc01 = _mm512_fmadd_ps(_mm512_permutexvar_ps(rows01, s512),
                                _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u01, av)), acc01);
        acc23 = _mm512_fmadd_ps(_mm512_permutexvar_ps(rows23, s512),
                                _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u23, av)), acc23);
    }
    float l01[16], l23[16], sd[4];
    _mm512_storeu_ps(l01, acc01);
    _mm512_storeu_ps(l23, acc23);
    _mm_storeu_ps(sd, side);
    for (int r = 0; r < LI_X4_ROWS; r++) {
        const float *l = r < 2 ? l01 + 8 * r : l23 + 8 * (r - 2);
        float t = 0.0f;
        for (int e = 0; e < 8; e++) t += l[e];
        s[r] = t - 128.0f * sd[r];
    }
}

/* Q4_K over the chunked group (quant_blocks.h: 16-byte chunk c of the four rows side by side, one
 * 64-byte load): one 128-bit broadcast of the chunk's 16 activation bytes serves the four rows, each
 * in its 128-bit lane. maddubs, the sub-block's two chunks added in int16 (|.| <= 2 * 2 * 15 * 128),
 * then one dpwssd per sub-block with every lane's row scale, exact in int32; the float steps run per
 * super-block on the four rows at once, and the mins meet the bsums summed in pairs. */

/* The four rows' headers are one 64-byte load: 128-bit lane r = row r's {d, dmin | scales[12]}, as
 * u32 {dd, u0, u1, u2}. li_scales_mins_k4 on every lane at once -> lane r = row r's bytes
 * [scales 0..7 | mins 0..7]; a scalar unpack through a 16-byte stack copy stalled each row's vector
 * load on store forwarding. */
static inline __m512i scales_mins_k4_x4(__m512i h) {
    const __m512i x = _mm512_shuffle_epi32(h, _MM_SHUFFLE(3, 2, 3, 1));   /* u0 u2 u1 u2 */
    const __m512i y = _mm512_shuffle_epi32(h, _MM_SHUFFLE(2, 2, 1, 1));   /* u0 u0 u1 u1 */
    const __m512i low6 = _mm512_and_si512(x, _mm512_set1_epi32(0x3f3f3f3f));
    const __m512i nib = _mm512_and_si512(_mm512_srlv_epi32(x, _mm512_set4_epi32(4, 0, 0, 0)),
                                         _mm512_set1_epi32(0x0f0f0f0f));
    const __m512i top = _mm512_and_si512(_mm512_srli_epi32(y, 2), _mm512_set1_epi32(0x30303030));
    return _mm512_mask_blend_epi32(0xAAAA, low6, _mm512_or_si512(nib, top));
}

static inline __m512i broadcast16(const int8_t *p) { return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p)); }

/* int16 lanes of 128-bit lane r <- byte s of lane r: row r's scale of sub-block s (0x80: a zero byte) */
static inline __m512i scale_of_sub(__m512i sm, int s) { return _mm512_shuffle_epi8(sm, _mm512_set1_epi16((short)(0x8000 | s))); }

void vec_dot_x4_q4_K_q8_K_avx512(int64_t n, float *s, const void *vg, const void *va, const float *as) {
    (void)as;
    const block_q4_Kx4 *g = vg;
    const block_q8_K *a = va;
    _Static_assert(sizeof(g->h) == 64 && sizeof(g->qs[0]) == 64, "four Q4_K headers, or a chunk of four rows, are one 64-byte load");
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    /* the rows' fp16 {d, dmin} (u32 lane 0 of each 128-bit lane) gathered into the low 128 bits */
    const __m512i dd_lanes = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
    /* lanes 4r..4r+3 <- d (float lane 2r of the converted pairs), dmin (2r + 1) of row r */
    const __m512i d_of_row = _mm512_set_epi32(6, 6, 6, 6, 4, 4, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0);
    const __m512i dmin_of_row = _mm512_set_epi32(7, 7, 7, 7, 5, 5, 5, 5, 3, 3, 3, 3, 1, 1, 1, 1);
    __m512 acc = _mm512_setzero_ps();   /* lanes 4r..4r+3: row r, in four parts */
    for (int64_t i = 0; i < n / QK_K; i++) {
        /* bsums[2j] + bsums[2j+1] (|.| <= 2 * 16 * 128): sub-block j's sum of quants, as int16 */
        const __m256i bs = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[i].bsums), _mm256_set1_epi16(1));
        const __m128i bsum_pairs = _mm_packs_epi32(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        const __m512i heads = _mm512_loadu_si512((const void *)g[i].h);
        const __m512i sm = scales_mins_k4_x4(heads);
        /* every row's mins (the high 8 bytes of its lane, as int16) against the bsum pairs: four int32
         * parts a row (|.| <= 2 * 63 * 4096), exact in float */
        const __m512i mins = _mm512_madd_epi16(_mm512_unpackhi_epi8(sm, _mm512_setzero_si512()),
                                               _mm512_broadcast_i32x4(bsum_pairs));
        const __m256 ddf = _mm256_mul_ps(_mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi32(dd_lanes, heads))),
                                         _mm256_set1_ps(a[i].d));   /* d0 m0 d1 m1 .. d3 m3, times da */
        const int8_t *aq = a[i].qs;
        __m512i isum = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {   /* chunks 2j, 2j + 1: sub-blocks 2j (low nibbles), 2j + 1 (high) */
            const __m512i w0 = _mm512_loadu_si512((const void *)g[i].qs[2 * j]);
            const __m512i w1 = _mm512_loadu_si512((const void *)g[i].qs[2 * j + 1]);
            const __m512i lo = _mm512_add_epi16(_mm512_maddubs_epi16(_mm512_and_si512(w0, m4), broadcast16(aq + 64 * j)),
                                                _mm512_maddubs_epi16(_mm512_and_si512(w1, m4), broadcast16(aq + 64 * j + 16)));
            const __m512i hi = _mm512_add_epi16(
                _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srli_epi16(w0, 4), m4), broadcast16(aq + 64 * j + 32)),
                _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srli_epi16(w1, 4), m4), broadcast16(aq + 64 * j + 48)));
            isum = _mm512_dpwssd_epi32(isum, lo, scale_of_sub(sm, 2 * j));
            isum = _mm512_dpwssd_epi32(isum, hi, scale_of_sub(sm, 2 * j + 1));
        }
        const __m512 dd = _mm512_castps256_ps512(ddf);
        acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(d_of_row, dd), _mm512_cvtepi32_ps(isum), acc);
        acc = _mm512_fnmadd_ps(_mm512_permutexvar_ps(dmin_of_row, dd), _mm512_cvtepi32_ps(mins), acc);
    }
    float l[16];
    _mm512_storeu_ps(l, acc);
    for (int r = 0; r < LI_X4_ROWS; r++) s[r] = (l[4 * r] + l[4 * r + 1]) + (l[4 * r + 2] + l[4 * r + 3]);
}

/* Q6_K: per row the integers of vec_dot_q6_K_q8_K_avx512 in the same int32 lanes (lane j: elements
 * 4j..4j+3 of each 64, times their sub-block's scale; the offset 32 from the bsums in lanes 0..7), and
 * the same float steps after them, so each row's result is that dot's, bit for bit. The activation is
 * loaded once for the four rows. Where the row dot multiplies dpbusd's sums by the scales (vpmulld),
 * maddubs (u <= 63: pair sums <= 2 * 63 * 128, no saturation) then dpwssd with the scales as int16
 * sum the same products into the same lanes, one instruction less per 64 elements. */
void vec_dot_x4_q6_K_q8_K_avx512(int64_t n, float *s, const void *vg, const void *va, const float *as) {
    (void)as;
    const block_q6_Kx4 *g = vg;
    const block_q8_K *a = va;
    /* int16 lane l of a 64-element register belongs to sub-block l / 8 of the four it holds */
    const __m512i sub = _mm512_set_epi32(0x30003, 0x30003, 0x30003, 0x30003, 0x20002, 0x20002, 0x20002, 0x20002,
                                         0x10001, 0x10001, 0x10001, 0x10001, 0, 0, 0, 0);
    const __m512i idx[4] = {sub, _mm512_add_epi16(sub, _mm512_set1_epi16(4)),
                            _mm512_add_epi16(sub, _mm512_set1_epi16(8)), _mm512_add_epi16(sub, _mm512_set1_epi16(12))};
    __m512 acc[LI_X4_ROWS];
    for (int r = 0; r < LI_X4_ROWS; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m256i bsums = _mm256_loadu_si256((const __m256i *)a[i].bsums);
        __m512i sc16[LI_X4_ROWS], sumi[LI_X4_ROWS];
        for (int r = 0; r < LI_X4_ROWS; r++) {
            const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)g[i].h[r].scales));
            sc16[r] = _mm512_castsi256_si512(sc);
            /* the offset 32: sum over sub-blocks of scale * 32 * sum(q), from the bsums */
            sumi[r] = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(),
                                                              _mm256_slli_epi32(_mm256_madd_epi16(sc, bsums), 5)));
        }
        for (int h = 0; h < 2; h++) {
            const __m512i a01 = _mm512_loadu_si512((const void *)(a[i].qs + 128 * h));
            const __m512i a23 = _mm512_loadu_si512((const void *)(a[i].qs + 128 * h + 64));
            for (int r = 0; r < LI_X4_ROWS; r++) {
                const uint8_t *q = g[i].q[r];
                __m512i u01, u23;
                q6_K_unpack_half(q + 64 * h, q + QK_K / 2 + 32 * h, &u01, &u23);
                sumi[r] = _mm512_dpwssd_epi32(sumi[r], _mm512_maddubs_epi16(u01, a01),
                                              _mm512_permutexvar_epi16(idx[2 * h], sc16[r]));
                sumi[r] = _mm512_dpwssd_epi32(sumi[r], _mm512_maddubs_epi16(u23, a23),
                                              _mm512_permutexvar_epi16(idx[2 * h + 1], sc16[r]));
            }
        }
        for (int r = 0; r < LI_X4_ROWS; r++)
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(_cvtsh_ss(g[i].h[r].d) * a[i].d), _mm512_cvtepi32_ps(sumi[r]), acc[r]);
    }
    for (int r = 0; r < LI_X4_ROWS; r++) s[r] = _mm512_reduce_add_ps(acc[r]);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
