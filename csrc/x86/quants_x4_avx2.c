/* quants_x4_avx2.c -- AVX2 dots over repacked groups of four rows (core/repack.c), as
 * quants_x4_avx512.c does with dpbusd: here maddubs + madd in 256-bit registers, two rows per
 * register for Q4_0 (16 nibble bytes each), one row per register for Q8_0 (signed times signed
 * through the sign trick, as quants_avx2.c's Q8_0 dot). No Q6_K: its row dot over the mapped rows,
 * with the GEMV's prefetch, reads faster than the row dot repeated over an x4 group did
 * (BENCHMARKS.md, "Kernel choices"), so AVX2 leaves Q6_K unrepacked. Q4_0 also has a 16-row kernel
 * (vec_dot_x16_m) for several activation rows, each block of four groups unpacked once for all of them.
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
#include "x86/x4_x86.h"

void vec_dot_x4_q4_0_q8_0_avx2(int64_t n, float *s, const void *vg, const void *va, const float *as) {
    const block_q4_0x4 *g = vg;
    const block_q8_0 *a = va;
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const __m256i rows01 = _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0), rows23 = _mm256_set_epi32(3, 3, 3, 3, 2, 2, 2, 2);
    __m256 acc01 = _mm256_setzero_ps(), acc23 = _mm256_setzero_ps();   /* lanes 4r'..: rows 0,1 | 2,3 */
    __m128 side = _mm_setzero_ps();
    const int ahead = li_stream_ahead();
    for (int64_t i = 0; i < n / QK4_0; i++) {
        li_prefetch_ahead(g + i, sizeof *g, ahead);
        const __m256 sc = _mm256_castps128_ps256(x4_scales(g[i].d, as + 2 * i, &side));
        const __m256i alo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)a[i].qs));
        const __m256i ahi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(a[i].qs + 16)));
        for (int h = 0; h < 2; h++) {   /* rows 2h, 2h + 1 */
            const __m256i q = _mm256_loadu_si256((const __m256i *)(g[i].qs + 32 * h));
            /* |u * q| <= 15 * 128 per product, two per int16 and two such sums: no saturation */
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(q, m4), alo),
                                               _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), ahi));
            const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
            if (h == 0) acc01 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(sc, rows01), f, acc01);
            else acc23 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(sc, rows23), f, acc23);
        }
    }
    float l01[8], l23[8], sd[4];
    _mm256_storeu_ps(l01, acc01);
    _mm256_storeu_ps(l23, acc23);
    _mm_storeu_ps(sd, side);
    for (int r = 0; r < LI_X4_ROWS; r++) {
        const float *l = (r < 2 ? l01 : l23) + 4 * (r & 1);
        s[r] = (l[0] + l[1] + l[2] + l[3]) - 8.0f * sd[r];
    }
}

/* Q4_0, sixteen rows (four consecutive x4 groups) against m activation rows, as the AVX-512
 * vec_dot_x16_m (quants_x4_avx512.c): each half of the rows (two groups) is transposed once per block
 * (unpacklo/hi of dwords, then of qwords) into four registers, register p holding 4-byte piece p of
 * the eight rows, lane j row {0, 2, 4, 6, 1, 3, 5, 7}[j], and split into nibbles, for all m rows. Then
 * per activation row and half: 8 maddubs against 4-byte broadcasts summed in int16 (|.| <= 8 * 2 * 15
 * * 128), one madd, and the float steps once per eight rows instead of once per two. Rows agree with
 * vec_dot_x4 up to float rounding and have the same bits for any m; one or two rows keep vec_dot_x4. */
static inline __m256i bcast4_avx2(const int8_t *p) { return _mm256_broadcastd_epi32(_mm_loadu_si32(p)); }

/* activation rows a pass: every row's accumulators live on the stack (AVX2's sixteen registers
 * cannot hold them beside the block's sixteen weight registers anyway), so each block is transposed
 * once for all of them. 16384 x 2048, one thread, Zen 4, GMAC/s, against four rows a pass with the
 * count a constant (the loops unrolled for it), alternating: 3 rows 64 -> 62-63, 4 66 -> 69, 5 61 ->
 * 73, 8 63-66 -> 77-79, 15 63-66 -> 83-85; six and eight rows a pass measured between, and the
 * unrolled four for up to four rows beside this one for more slower at three and four (61, 60). */

static void q4_0x16_rows_avx2(int64_t nb, int m, float *s, int64_t s_stride, const uint8_t *g, size_t g_stride,
                              const uint8_t *a, size_t a_stride, const float *as, int64_t as_stride) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const __m256i lane_rows = _mm256_set_epi32(7, 5, 3, 1, 6, 4, 2, 0);   /* lane j holds row lane_rows[j] */
    __m256 acc[LI_X16_PASS_M][2], side[LI_X16_PASS_M][2];   /* per activation row and half */
    for (int r = 0; r < m; r++)
        for (int h = 0; h < 2; h++) acc[r][h] = side[r][h] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i wq[2][8];   /* per half: the low nibbles of pieces 0..3, then the high ones */
        __m256 dw[2];
        for (int h = 0; h < 2; h++) {
            const block_q4_0x4 *ga = (const block_q4_0x4 *)(g + 2 * h * g_stride) + b;
            const block_q4_0x4 *gb = (const block_q4_0x4 *)(g + (2 * h + 1) * g_stride) + b;
            const __m256i a0 = _mm256_loadu_si256((const __m256i *)ga->qs), b0 = _mm256_loadu_si256((const __m256i *)(ga->qs + 32));
            const __m256i a1 = _mm256_loadu_si256((const __m256i *)gb->qs), b1 = _mm256_loadu_si256((const __m256i *)(gb->qs + 32));
            const __m256i t0 = _mm256_unpacklo_epi32(a0, b0), t1 = _mm256_unpackhi_epi32(a0, b0);
            const __m256i t2 = _mm256_unpacklo_epi32(a1, b1), t3 = _mm256_unpackhi_epi32(a1, b1);
            const __m256i pc[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                                   _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
            for (int p = 0; p < 4; p++) {
                wq[h][p] = _mm256_and_si256(pc[p], m4);
                wq[h][4 + p] = _mm256_and_si256(_mm256_srli_epi16(pc[p], 4), m4);
            }
            const __m128i d8 = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)ga->d), _mm_loadl_epi64((const __m128i *)gb->d));
            dw[h] = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(d8), lane_rows);
        }
        for (int r = 0; r < m; r++) {
            const int8_t *aq = ((const block_q8_0 *)(a + (size_t)r * a_stride) + b)->qs;
            const float *ar = as + r * as_stride + 2 * b;
            __m256i av[8];
            for (int p = 0; p < 8; p++) av[p] = bcast4_avx2(aq + 4 * p);   /* lo pieces pair with 0..15, hi with 16..31 */
            for (int h = 0; h < 2; h++) {
                __m256i t = _mm256_maddubs_epi16(wq[h][0], av[0]);
                for (int p = 1; p < 8; p++) t = _mm256_add_epi16(t, _mm256_maddubs_epi16(wq[h][p], av[p]));
                const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(t, ones));
                side[r][h] = _mm256_fmadd_ps(dw[h], _mm256_set1_ps(ar[1]), side[r][h]);
                acc[r][h] = _mm256_fmadd_ps(_mm256_mul_ps(dw[h], _mm256_set1_ps(ar[0])), f, acc[r][h]);
            }
        }
    }
    const __m256i row_lanes = _mm256_set_epi32(7, 3, 6, 2, 5, 1, 4, 0);   /* row j sits in lane row_lanes[j] */
    for (int r = 0; r < m; r++)
        for (int h = 0; h < 2; h++) {
            const __m256 v = _mm256_fnmadd_ps(_mm256_set1_ps(8.0f), side[r][h], acc[r][h]);
            _mm256_storeu_ps(s + r * s_stride + 8 * h, _mm256_permutevar8x32_ps(v, row_lanes));
        }
}

void vec_dot_x16_m_q4_0_q8_0_avx2(int64_t n, int64_t m, float *s, int64_t s_stride, const void *vg, size_t g_stride,
                                  const void *va, size_t a_stride, const float *as, int64_t as_stride) {
    for (int64_t r = 0; r < m; r += LI_X16_PASS_M)
        q4_0x16_rows_avx2(n / QK4_0, (int)(m - r < LI_X16_PASS_M ? m - r : LI_X16_PASS_M), s + r * s_stride, s_stride, vg,
                          g_stride, (const uint8_t *)va + (size_t)r * a_stride, a_stride, as + r * as_stride, as_stride);
}

/* one x4 block of Q8_0 against the activation block av into the four rows' accumulators: |q| * sign(a, q),
 * unsigned times signed, each product <= 128 * 127, pairs fit int16; each row's scale dw * da (the row dot's
 * product of the same two floats) broadcast */
static inline __attribute__((always_inline)) void q8_0_x4_block(__m256 acc[LI_X4_ROWS], const block_q8_0x4 *blk,
                                                                 __m256i av, float da) {
    const __m256 sc = _mm256_castps128_ps256(_mm_mul_ps(x4_dw(blk->d), _mm_set1_ps(da)));
    for (int r = 0; r < LI_X4_ROWS; r++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(blk->qs + 32 * r));
        const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(av, q));
        acc[r] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(sc, _mm256_set1_epi32(r)),
                                 _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1))), acc[r]);
    }
}

/* Per row, the arithmetic of quants_avx2.c's Q8_0 row dot: the even blocks summed in acc0, the odd ones in
 * acc1 (an odd last block in acc0), the two added and reduced once at the end. So the repacked layout gives
 * the row-major bits (the ISA table's x4_same_bits), and a matrix can be repacked while it is in use. */
void vec_dot_x4_q8_0_q8_0_avx2(int64_t n, float *s, const void *vg, const void *va, const float *as) {
    const block_q8_0x4 *g = vg;
    const block_q8_0 *a = va;
    __m256 acc0[LI_X4_ROWS], acc1[LI_X4_ROWS];
    for (int r = 0; r < LI_X4_ROWS; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();
    const int ahead = li_stream_ahead();
    const int64_t nb = n / QK8_0;
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        li_prefetch_ahead(g + i, 2 * sizeof *g, ahead);
        const __m256i av0 = _mm256_loadu_si256((const __m256i *)a[i].qs);
        const __m256i av1 = _mm256_loadu_si256((const __m256i *)a[i + 1].qs);
        q8_0_x4_block(acc0, g + i, av0, as[2 * i]);
        q8_0_x4_block(acc1, g + i + 1, av1, as[2 * i + 2]);
    }
    if (i < nb) {
        const __m256i av = _mm256_loadu_si256((const __m256i *)a[i].qs);
        q8_0_x4_block(acc0, g + i, av, as[2 * i]);
    }
    for (int r = 0; r < LI_X4_ROWS; r++) s[r] = hsum_ps(_mm256_add_ps(acc0[r], acc1[r]));
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif /* x86_64 */
