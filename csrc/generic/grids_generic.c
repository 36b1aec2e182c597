/* grids_generic.c -- the grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M):
 * dequantizers and GEMM panel unpackers.
 *
 * Every type is read by one decoder, li_decode_<type>(block, v, dw): v[e] the element as a signed
 * integer, dw[g] the f32 scale of group g (G = 32, or 16 for IQ2_XS, IQ2_S and IQ1_M), with
 * y[e] = dw[e / G] * v[e] bit for bit what ggml and gguf-py compute:
 * - IQ2_* and IQ3_*: v = sign * grid and dw = the sub-block scale db; gguf-py's (db * grid) * sign
 *   equals db * (sign * grid) exactly (negation commutes with rounding; a NaN db stays db's NaN);
 * - IQ1_*: v = 8 * (grid + delta) = 8 grid +- 1 and dw = dl / 8; dl * (grid + delta) equals
 *   (dl / 8) * v exactly, as dl / 8 >= 2^-27 is a normal f32 (dl = d * (2 ls + 1), d an fp16).
 * The panel's integer form is then u = v + o with o the type's largest |v| (LI_O_IQ2 ..., in
 * generic/generic.h, which the traits rows in core/traits.c take too); the generic dots go through
 * it (vec_dot_generic.c).
 */
#include "core/iq_grids.h"
#include "core/li.h"
#include "generic/generic.h"

static inline uint32_t load_u32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* 8 elements: sign bit k of `signs` (1: minus) times grid point `g`. Without a branch: (g ^ -m) + m
 * is g for m = 0 and -g for m = 1; random signs made the branchy form mispredict half the time. */
static inline void signed_8(const uint8_t *g, uint8_t signs, int8_t *v) {
    for (int k = 0; k < 8; k++) {
        const int m = signs >> k & 1;
        v[k] = (int8_t)((g[k] ^ -m) + m);
    }
}

/* IQ2_XXS / IQ3_XXS share the per-32 u32 of four 7-bit sign codes and a 4-bit scale */
void li_decode_iq2_xxs(const void *blk, int8_t v[QK_K], float dw[QK_K / 16]) {
    const block_iq2_xxs *x = blk;
    const float d = li_fp16_to_fp32(x->d);
    for (int ib = 0; ib < QK_K / 32; ib++, v += 32) {
        const uint32_t a = load_u32(x->qs + 4 * ib), b = load_u32(x->qs + 4 * ib + 2);
        dw[ib] = d * (0.5f + (float)(b >> 28)) * 0.25f;
        for (int l = 0; l < 4; l++)
            signed_8(li_iq2xxs_grid[(a >> 8 * l) & 0xFF], li_ksigns_iq2xs[(b >> 7 * l) & 0x7F], v + 8 * l);
    }
}

void li_decode_iq2_xs(const void *blk, int8_t v[QK_K], float dw[QK_K / 16]) {
    const block_iq2_xs *x = blk;
    const float d = li_fp16_to_fp32(x->d);
    for (int g = 0; g < QK_K / 16; g++) dw[g] = d * (0.5f + (float)((x->scales[g / 2] >> 4 * (g % 2)) & 0xF)) * 0.25f;
    for (int g = 0; g < QK_K / 8; g++)
        signed_8(li_iq2xs_grid[x->qs[g] & 511], li_ksigns_iq2xs[x->qs[g] >> 9], v + 8 * g);
}

void li_decode_iq2_s(const void *blk, int8_t v[QK_K], float dw[QK_K / 16]) {
    const block_iq2_s *x = blk;
    const float d = li_fp16_to_fp32(x->d);
    for (int g = 0; g < QK_K / 16; g++) dw[g] = d * (0.5f + (float)((x->scales[g / 2] >> 4 * (g % 2)) & 0xF)) * 0.25f;
    for (int g = 0; g < QK_K / 8; g++) {
        const int idx = x->qs[g] | ((x->qh[g / 4] >> 2 * (g % 4)) & 3) << 8;
        signed_8(li_iq2s_grid[idx], x->qs[QK_K / 8 + g], v + 8 * g);
    }
}

void li_decode_iq3_xxs(const void *blk, int8_t v[QK_K], float dw[QK_K / 16]) {
    const block_iq3_xxs *x = blk;
    const float d = li_fp16_to_fp32(x->d);
    for (int ib = 0; ib < QK_K / 32; ib++, v += 32) {
        const uint32_t b = load_u32(x->qs + QK_K / 4 + 4 * ib);
        dw[ib] = d * (0.5f + (float)(b >> 28)) * 0.5f;
        for (int l = 0; l < 4; l++) {
            uint8_t g[8];
            memcpy(g, li_iq3xxs_grid[x->qs[8 * ib + 2 * l]], 4);
            memcpy(g + 4, li_iq3xxs_grid[x->qs[8 * ib + 2 * l + 1]], 4);
            signed_8(g, li_ksigns_iq2xs[(b >> 7 * l) & 0x7F], v + 8 * l);
        }
    }
}

void li_decode_iq3_s(const void *blk, int8_t v[QK_K], float dw[QK_K / 16]) {
    const block_iq3_s *x = blk;
    const float d = li_fp16_to_fp32(x->d);
    for (int ib = 0; ib < QK_K / 32; ib++) dw[ib] = d * (float)(1 + 2 * ((x->scales[ib / 2] >> 4 * (ib % 2)) & 0xF));
    for (int g = 0; g < QK_K / 8; g++) {
        uint8_t pts[8];
        for (int h = 0; h < 2; h++) {
            const int q = 2 * g + h, idx = x->qs[q] | ((x->qh[q / 8] >> q % 8) & 1) << 8;
            memcpy(pts + 4 * h, li_iq3s_grid[idx], 4);
        }
        signed_8(pts, x->signs[g], v + 8 * g);
    }
}

/* 8 IQ1 elements: 8 * grid + (delta > 0 ? 1 : -1) */
static inline void iq1_8(int idx, int minus, int8_t *v) {
    for (int k = 0; k < 8; k++) v[k] = (int8_t)(8 * li_iq1s_grid[idx][k] + (minus ? -1 : 1));
}

void li_decode_iq1_s(const void *blk, int8_t v[QK_K], float dw[QK_K / 16]) {
    const block_iq1_s *x = blk;
    const float d = li_fp16_to_fp32(x->d);
    for (int ib = 0; ib < QK_K / 32; ib++) {
        const int qh = x->qh[ib];
        dw[ib] = d * (float)(2 * ((qh >> 12) & 7) + 1) * 0.125f;
        for (int l = 0; l < 4; l++) iq1_8(x->qs[4 * ib + l] | ((qh >> 3 * l) & 7) << 8, qh & 0x8000, v + 32 * ib + 8 * l);
    }
}

/* IQ1_M's d: the top nibble of each of its four scale u16, u16 0's the lowest */
float li_iq1_m_d(const block_iq1_m *x) {
    uint16_t sc[4];
    memcpy(sc, x->scales, 8);
    return li_fp16_to_fp32((ggml_half)((sc[0] >> 12) | ((sc[1] >> 8) & 0xF0) | ((sc[2] >> 4) & 0xF00) | (sc[3] & 0xF000)));
}

void li_decode_iq1_m(const void *blk, int8_t v[QK_K], float dw[QK_K / 16]) {
    const block_iq1_m *x = blk;
    const float d = li_iq1_m_d(x);
    uint16_t sc[4];
    memcpy(sc, x->scales, 8);
    for (int g = 0; g < QK_K / 16; g++) dw[g] = d * (float)(2 * ((sc[g / 4] >> 3 * (g % 4)) & 7) + 1) * 0.125f;
    for (int g = 0; g < QK_K / 8; g++) {
        const int nib = (x->qh[g / 2] >> 4 * (g % 2)) & 0xF;
        iq1_8(x->qs[g] | (nib & 7) << 8, nib & 8, v + 8 * g);
    }
}

/* y = dw[e / G] * v[e] over whole blocks */
static void dequantize_grid(li_grid_decode_fn decode, int type_size, int group, const void *src, float *y, int64_t n) {
    int8_t v[QK_K];
    float dw[QK_K / 16];
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += type_size, y += QK_K) {
        decode(b, v, dw);
        for (int e = 0; e < QK_K; e++) y[e] = dw[e / group] * (float)v[e];
    }
}

/* u = v + o, dw as decoded */
static void unpack_grid(li_grid_decode_fn decode, int type_size, int group, int offset, const void *src, int64_t n,
                        uint8_t *u, float *dw) {
    int8_t v[QK_K];
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += type_size, u += QK_K, dw += QK_K / group) {
        decode(b, v, dw);
        for (int e = 0; e < QK_K; e++) u[e] = (uint8_t)(v[e] + offset);
    }
}

/* type stem, G, o (core/traits.c's row of the type has the same G and o) */
#define GRID_TYPE(name, G, O)                                                                       \
    void dequantize_row_##name(const void *src, float *y, int64_t n) {                              \
        dequantize_grid(li_decode_##name, (int)sizeof(block_##name), G, src, y, n);                 \
    }                                                                                               \
    void unpack_##name(const void *src, int64_t n, uint8_t *u, float *dw, float *mw) {              \
        (void)mw;                                                                                   \
        unpack_grid(li_decode_##name, (int)sizeof(block_##name), G, O, src, n, u, dw);              \
    }

GRID_TYPE(iq2_xxs, 32, LI_O_IQ2)
GRID_TYPE(iq2_xs, 16, LI_O_IQ2)
GRID_TYPE(iq2_s, 16, LI_O_IQ2)
GRID_TYPE(iq3_xxs, 32, LI_O_IQ3_XXS)
GRID_TYPE(iq3_s, 32, LI_O_IQ3_S)
GRID_TYPE(iq1_s, 32, LI_O_IQ1)
GRID_TYPE(iq1_m, 16, LI_O_IQ1)
