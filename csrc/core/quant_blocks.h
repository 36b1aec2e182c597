/* quant_blocks.h -- ggml's block formats as C structs (ggml/src/ggml-common.h).
 *
 * One struct per tensor type, laid out byte for byte as in a GGUF file
 * (little-endian, no padding: every member is a byte array or a 2-byte half,
 * so sizeof == the ggml type size, checked below). Type ids are ggml's
 * (gguf.GGMLQuantizationType). `ggml_half` is IEEE fp16 stored as its bits.
 *
 * Element order inside a block matters for the kernels and follows ggml:
 * 4-bit quants keep element j in the low nibble of qs[j] and element j+16 in
 * its high nibble; the k-quants are described beside each struct.
 */
#ifndef LI_QUANT_BLOCKS_H
#define LI_QUANT_BLOCKS_H

#include <stdint.h>

typedef uint16_t ggml_half;   /* IEEE fp16 bits */
typedef uint16_t ggml_bf16;   /* bfloat16 bits: the top half of an f32 */

/* ggml type ids (gguf.GGMLQuantizationType) */
enum li_type {
    LI_TYPE_F32  = 0,
    LI_TYPE_F16  = 1,
    LI_TYPE_Q4_0 = 2,
    LI_TYPE_Q4_1 = 3,
    LI_TYPE_Q5_0 = 6,
    LI_TYPE_Q5_1 = 7,
    LI_TYPE_Q8_0 = 8,
    LI_TYPE_Q8_1 = 9,
    LI_TYPE_Q2_K = 10,
    LI_TYPE_Q3_K = 11,
    LI_TYPE_Q4_K = 12,
    LI_TYPE_Q5_K = 13,
    LI_TYPE_Q6_K = 14,
    LI_TYPE_Q8_K = 15,
    LI_TYPE_IQ2_XXS = 16,
    LI_TYPE_IQ2_XS = 17,
    LI_TYPE_IQ3_XXS = 18,
    LI_TYPE_IQ1_S = 19,
    LI_TYPE_IQ4_NL = 20,
    LI_TYPE_IQ3_S = 21,
    LI_TYPE_IQ2_S = 22,
    LI_TYPE_IQ4_XS = 23,
    LI_TYPE_IQ1_M = 29,
    LI_TYPE_BF16 = 30,
    LI_TYPE_TQ1_0 = 34,
    LI_TYPE_TQ2_0 = 35,
    LI_TYPE_MXFP4 = 39,
    LI_TYPE_COUNT = 40        /* size of the tables indexed by type id */
};

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256
#define K_SCALE_SIZE 12
#define QK4_NL 32
#define QK_MXFP4 32

/* --- 32-element "legacy" quants ------------------------------------------------------ */

/* Q4_0: y = (q - 8) * d, q = 4-bit; qs[j] = q[j] | q[j+16] << 4. 18 bytes. */
typedef struct {
    ggml_half d;
    uint8_t qs[QK4_0 / 2];
} block_q4_0;
_Static_assert(sizeof(block_q4_0) == 2 + QK4_0 / 2, "wrong q4_0 block size");

/* Q4_1: y = q * d + m, q = 4-bit, nibbles as Q4_0. 20 bytes. */
typedef struct {
    ggml_half d;
    ggml_half m;
    uint8_t qs[QK4_1 / 2];
} block_q4_1;
_Static_assert(sizeof(block_q4_1) == 4 + QK4_1 / 2, "wrong q4_1 block size");

/* Q5_0: y = (q - 16) * d, q = nibble | (bit j of the little-endian u32 qh) << 4. 22 bytes. */
typedef struct {
    ggml_half d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
} block_q5_0;
_Static_assert(sizeof(block_q5_0) == 2 + 4 + QK5_0 / 2, "wrong q5_0 block size");

/* Q5_1: y = q * d + m, q 5-bit as Q5_0. 24 bytes. */
typedef struct {
    ggml_half d;
    ggml_half m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1;
_Static_assert(sizeof(block_q5_1) == 4 + 4 + QK5_1 / 2, "wrong q5_1 block size");

/* Q8_0: y = q * d, q int8. 34 bytes. Also the activation type for Q4_0/Q5_0/Q8_0. */
typedef struct {
    ggml_half d;
    int8_t qs[QK8_0];
} block_q8_0;
_Static_assert(sizeof(block_q8_0) == 2 + QK8_0, "wrong q8_0 block size");

/* Repacked layouts (core/repack.c), built at load for the decode GEMV: LI_X4_ROWS consecutive rows'
 * blocks i interleaved, so that one contiguous stream feeds four output rows and one 512-bit load
 * holds four rows' quants (ggml's block_q4_0x8 is the same idea with eight rows). The four scales
 * first, then the quants row after row, each row's bytes as in its own block. */
#define LI_X4_ROWS 4
typedef struct {
    ggml_half d[LI_X4_ROWS];
    uint8_t qs[LI_X4_ROWS * QK4_0 / 2];     /* row r: qs[16 r .. 16 r + 15], nibbles as block_q4_0 */
} block_q4_0x4;
_Static_assert(sizeof(block_q4_0x4) == LI_X4_ROWS * sizeof(block_q4_0), "wrong q4_0x4 block size");

typedef struct {
    ggml_half d[LI_X4_ROWS];
    int8_t qs[LI_X4_ROWS * QK8_0];          /* row r: qs[32 r .. 32 r + 31] */
} block_q8_0x4;
_Static_assert(sizeof(block_q8_0x4) == LI_X4_ROWS * sizeof(block_q8_0), "wrong q8_0x4 block size");

/* Q8_1 (activations for Q4_1/Q5_1): as Q8_0 plus s = fp16(d * sum(qs)). 36 bytes.
 * localinfer's dot products recompute sum(qs) exactly instead of reading the
 * rounded s; s is kept so the block stays ggml's. */
typedef struct {
    ggml_half d;
    ggml_half s;
    int8_t qs[QK8_1];
} block_q8_1;
_Static_assert(sizeof(block_q8_1) == 4 + QK8_1, "wrong q8_1 block size");

/* --- 256-element k-quants (super-blocks) -------------------------------------------- */

/* Q2_K: 16 sub-blocks of 16; scales[i] = min << 4 | scale (4 bits each);
 * y = (d * scale) * q - (dmin * min), q 2-bit: in half h (128 elements),
 * element 32*j + l is bits 2j..2j+1 of qs[32*h + l]. 84 bytes. */
typedef struct {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    ggml_half d;
    ggml_half dmin;
} block_q2_K;
_Static_assert(sizeof(block_q2_K) == QK_K / 16 + QK_K / 4 + 4, "wrong q2_K block size");

/* Q3_K: 16 sub-blocks of 16, 6-bit scales stored +32 (packed in 12 bytes);
 * q = (2 low bits as Q2_K) - (bit s of hmask[l] ? 0 : 4) for element 32*s + l;
 * y = (d * (scale - 32)) * q. 110 bytes. */
typedef struct {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    ggml_half d;
} block_q3_K;
_Static_assert(sizeof(block_q3_K) == QK_K / 8 + QK_K / 4 + 12 + 2, "wrong q3_K block size");

/* Q4_K: 8 sub-blocks of 32, 6-bit scale and min each (get_scale_min_k4);
 * y = (d * scale) * q - (dmin * min), q 4-bit: each 32 bytes of qs hold 64
 * elements, low nibbles first. 144 bytes. */
typedef struct {
    ggml_half d;
    ggml_half dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;
_Static_assert(sizeof(block_q4_K) == 4 + K_SCALE_SIZE + QK_K / 2, "wrong q4_K block size");

/* Q4_K repacked (core/repack.c): the four rows' headers (d, dmin, scales as in block_q4_K), then
 * their quants in chunks of 16 bytes: chunk c of rows 0..3 side by side, so that one 64-byte load (or
 * a 32-byte one, two rows) holds the same 32 elements of every row and one broadcast of 16
 * activation bytes serves them all. */
#define Q4_K_X4_CHUNK 16
typedef struct {
    struct {
        ggml_half d;
        ggml_half dmin;
        uint8_t scales[K_SCALE_SIZE];
    } h[LI_X4_ROWS];
    uint8_t qs[QK_K / 2 / Q4_K_X4_CHUNK][LI_X4_ROWS][Q4_K_X4_CHUNK];   /* [chunk][row][byte] */
} block_q4_Kx4;
_Static_assert(sizeof(block_q4_Kx4) == LI_X4_ROWS * sizeof(block_q4_K), "wrong q4_Kx4 block size");

/* Q5_K: as Q4_K with a 5th bit: bit s of qh[l] for element 32*s + l. 176 bytes. */
typedef struct {
    ggml_half d;
    ggml_half dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;
_Static_assert(sizeof(block_q5_K) == 4 + K_SCALE_SIZE + QK_K / 8 + QK_K / 2, "wrong q5_K block size");

/* Q6_K: 16 sub-blocks of 16 with int8 scales; q = (4 low bits | 2 high bits << 4) - 32;
 * in half h, quarter k (32 elements l): low bits from ql[64h + 32(k%2) + l]
 * (low nibble for k < 2), high bits = bits 2k.. of qh[32h + l]; y = (d * scale) * q. 210 bytes. */
typedef struct {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    ggml_half d;
} block_q6_K;
_Static_assert(sizeof(block_q6_K) == QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, "wrong q6_K block size");

/* Q6_K repacked (core/repack.c): the header sits at the end of a block_q6_K, so the four rows' scales
 * and d come first here as everywhere, then each row's ql and qh together, in block_q6_K's order. */
typedef struct {
    struct {
        int8_t scales[QK_K / 16];
        ggml_half d;
    } h[LI_X4_ROWS];
    uint8_t q[LI_X4_ROWS][QK_K / 2 + QK_K / 4];   /* row r: ql (128 bytes), then qh (64) */
} block_q6_Kx4;
_Static_assert(sizeof(block_q6_Kx4) == LI_X4_ROWS * sizeof(block_q6_K), "wrong q6_Kx4 block size");

/* Q8_K (activations for the k-quants): f32 scale, int8 quants, and the sum of
 * each 16 quants (bsums) for the min terms. 292 bytes. */
typedef struct {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
} block_q8_K;
_Static_assert(sizeof(block_q8_K) == 4 + QK_K + QK_K / 16 * 2, "wrong q8_K block size");

/* --- non-linear 4-bit quants: a 4-bit index into a table of 16 int8 values -------------- */

/* IQ4_NL: y = d * kvalues_iq4nl[q], q 4-bit with Q4_0's nibble order (qs[j] = q[j] | q[j+16] << 4).
 * The table (li_kvalues_iq4nl, core/traits.c) is ggml's kvalues_iq4nl. 18 bytes. */
typedef struct {
    ggml_half d;
    uint8_t qs[QK4_NL / 2];
} block_iq4_nl;
_Static_assert(sizeof(block_iq4_nl) == 2 + QK4_NL / 2, "wrong iq4_nl block size");

/* IQ4_XS: 8 sub-blocks of 32, each with a 6-bit scale ls = (4 bits of scales_l[s/2], nibble s%2)
 * | (bits 2s..2s+1 of the little-endian u16 scales_h) << 4; y = (d * (ls - 32)) * kvalues_iq4nl[q],
 * sub-block s in qs[16s..16s+15] with Q4_0's nibble order. 136 bytes. */
typedef struct {
    ggml_half d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
} block_iq4_xs;
_Static_assert(sizeof(block_iq4_xs) == 2 + 2 + QK_K / 64 + QK_K / 2, "wrong iq4_xs block size");

/* MXFP4 (OCP microscaling): y = 2^(e - 128) * kvalues_mxfp4[q] -- e2m1 values doubled, hence the
 * half in the e8m0 scale (ggml_e8m0_to_fp32_half) -- q 4-bit with Q4_0's nibble order. 17 bytes. */
typedef struct {
    uint8_t e;
    uint8_t qs[QK_MXFP4 / 2];
} block_mxfp4;
_Static_assert(sizeof(block_mxfp4) == 1 + QK_MXFP4 / 2, "wrong mxfp4 block size");

/* --- ternary quants (BitNet b1.58): y = d * (t - 1), t in {0, 1, 2} ------------------------ */

/* TQ1_0: five trits per byte as a base-3 fixed-point fraction: byte b holds trits t_k (k = 0..4)
 * as the top digit of b * 3^k (mod 256): t_k = ((uint8_t)(b * 3^k) * 3) >> 8. Element order:
 * qs[0..31] -> elements 32k + m, qs[32..47] -> 160 + 16k + m, qh[0..3] (four trits each)
 * -> 240 + 4k + m. 54 bytes. */
typedef struct {
    uint8_t qs[(QK_K - 4 * QK_K / 64) / 5];
    uint8_t qh[QK_K / 64];
    ggml_half d;
} block_tq1_0;
_Static_assert(sizeof(block_tq1_0) == (QK_K - 4 * QK_K / 64) / 5 + QK_K / 64 + 2, "wrong tq1_0 block size");

/* TQ2_0: 2 bits per element, t = (qs[32c + m] >> 2l) & 3 for element 128c + 32l + m. 66 bytes. */
typedef struct {
    uint8_t qs[QK_K / 4];
    ggml_half d;
} block_tq2_0;
_Static_assert(sizeof(block_tq2_0) == QK_K / 4 + 2, "wrong tq2_0 block size");

/* --- grid i-quants: groups of 8 (or 4) elements are points of a fixed lattice -------------
 * The grids and sign table are core/iq_grids.h (generated from gguf-py's copies). Each element is
 * sub-block scale * grid value * sign (IQ1: scale * (grid value + delta)); the layouts below are
 * ggml-common.h's, and src/localinfer/formats/dequant_grids.py spells out the same ones for numpy. */

/* IQ2_XXS: per 32 elements two u32 (qs[4i..4i+3]): a = four 8-bit indices into li_iq2xxs_grid,
 * b = four 7-bit sign codes (li_ksigns_iq2xs) in bits 7k.. and a 4-bit scale ls in bits 28..31;
 * y = (d * (0.5 + ls) * 0.25) * grid * sign. 66 bytes. */
typedef struct {
    ggml_half d;
    uint16_t qs[QK_K / 8];
} block_iq2_xxs;
_Static_assert(sizeof(block_iq2_xxs) == 2 + QK_K / 8 * 2, "wrong iq2_xxs block size");

/* IQ2_XS: qs[g] = 9-bit index into li_iq2xs_grid | 7-bit sign code << 9 for elements 8g..8g+7; a
 * 4-bit scale per 16 elements (scales[i] low nibble: elements 32i.., high: 32i + 16..); y as
 * IQ2_XXS. 74 bytes. */
typedef struct {
    ggml_half d;
    uint16_t qs[QK_K / 8];
    uint8_t scales[QK_K / 32];
} block_iq2_xs;
_Static_assert(sizeof(block_iq2_xs) == 2 + QK_K / 8 * 2 + QK_K / 32, "wrong iq2_xs block size");

/* IQ2_S: 10-bit indices into li_iq2s_grid, qs[g] | ((qh[g/4] >> 2(g%4)) & 3) << 8; qs[32..63] are
 * explicit sign bits (byte g for elements 8g..8g+7); scales as IQ2_XS. 82 bytes. */
typedef struct {
    ggml_half d;
    uint8_t qs[QK_K / 4];
    uint8_t qh[QK_K / 32];
    uint8_t scales[QK_K / 32];
} block_iq2_s;
_Static_assert(sizeof(block_iq2_s) == 2 + QK_K / 4 + QK_K / 16, "wrong iq2_s block size");

/* IQ3_XXS: qs[0..63] are 8-bit indices into the 4-element li_iq3xxs_grid; qs[64 + 4i..] a u32 per
 * 32 elements laid out as IQ2_XXS's b; y = (d * (0.5 + ls) * 0.5) * grid * sign. 98 bytes. */
typedef struct {
    ggml_half d;
    uint8_t qs[3 * QK_K / 8];
} block_iq3_xxs;
_Static_assert(sizeof(block_iq3_xxs) == 2 + 3 * QK_K / 8, "wrong iq3_xxs block size");

/* IQ3_S: 9-bit indices into the 4-element li_iq3s_grid, qs[g] | (qh[g/8] >> g%8 & 1) << 8 for
 * elements 4g..4g+3; explicit sign bits; a 4-bit scale per 32 (scales[i/2] nibble i%2);
 * y = (d * (1 + 2 ls)) * grid * sign. 110 bytes. */
typedef struct {
    ggml_half d;
    uint8_t qs[QK_K / 4];
    uint8_t qh[QK_K / 32];
    uint8_t signs[QK_K / 8];
    uint8_t scales[QK_K / 64];
} block_iq3_s;
_Static_assert(sizeof(block_iq3_s) == 2 + 13 * (QK_K / 32) + QK_K / 64, "wrong iq3_s block size");

/* IQ1_S: 11-bit indices into li_iq1s_grid (-1, 0, 1), qs[g] | ((qh[g/4] >> 3(g%4)) & 7) << 8; per
 * 32 elements qh bits 12..14 are ls and bit 15 the sign of delta = 1/8 (IQ1S_DELTA);
 * y = (d * (2 ls + 1)) * (grid + delta). 50 bytes. */
typedef struct {
    ggml_half d;
    uint8_t qs[QK_K / 8];
    uint16_t qh[QK_K / 32];
} block_iq1_s;
_Static_assert(sizeof(block_iq1_s) == 2 + QK_K / 8 + QK_K / 16, "wrong iq1_s block size");

/* IQ1_M: no d field -- the fp16 d is the top nibbles of the four little-endian u16 in scales
 * (u16 0 holds its low nibble). Indices as IQ1_S with qh[g/2] nibble g%2 giving 3 high bits and,
 * in bit 3, the sign of delta for those 8 elements; a 3-bit ls per 16 elements, u16 (i/4) bits
 * 3(i%4)..; y = (d * (2 ls + 1)) * (grid + delta). 56 bytes. */
typedef struct {
    uint8_t qs[QK_K / 8];
    uint8_t qh[QK_K / 16];
    uint8_t scales[QK_K / 32];
} block_iq1_m;
_Static_assert(sizeof(block_iq1_m) == QK_K / 8 + QK_K / 16 + QK_K / 32, "wrong iq1_m block size");

/* The value tables (format data from ggml-common.h), defined in core/traits.c. */
extern const int8_t li_kvalues_iq4nl[16];
extern const int8_t li_kvalues_mxfp4[16];

#endif /* LI_QUANT_BLOCKS_H */
