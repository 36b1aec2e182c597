/* panel.c -- the GEMM panel layout: weight and activation rows re-laid for the microkernels.
 *
 * Why: a block of 32 int8 products gives one int32 sum that needs its own float
 * scale (d_w * d_a). Done per block (as in ggml's vec_dot) that is a convert, a
 * multiply and an fma for every 32 multiply-adds. Here the quants of 16 groups
 * are interleaved so that int32 lane l of a 512-bit register only ever sees
 * group l: after G/4 dpbusd steps the 16 lanes hold 16 complete group sums and
 * the scales are applied once -- 3 float ops per 16 groups instead of per group.
 *
 * A row of k elements has k/G groups (G = 16 or 32: one scale each). They are
 * stored as super-groups (sg) of 16 int32 lanes:
 *   - full sg: 16 groups, lane l = group l, G/4 steps;
 *   - tail sg (fewer than 16 groups left): capacity c in {8,4,2,(1)} groups, each
 *     group spread over 16/c lanes, G*c/64 steps (>= 1); the leftover is split
 *     into powers of two, and anything below the smallest capacity is zero padded.
 * Step s of an sg is 64 bytes: lane l holds 4 bytes of its group g = l / (16/c),
 * elements (s * (16/c) + l % (16/c)) * 4 + 0..3 of that group. Weights and
 * activations use the same order, so the dot products match element for element.
 *
 * After the step bytes, each sg carries per-lane side data:
 *   weight row:      dw[16] f32, mw[16] f32           (the group's scale and min)
 *   activation row:  da[16] f32, corr[16] i32, sumf[16] f32
 * where corr = -o * sum(q) and sumf = sum(q) of the group, stored in the first
 * lane of each group only (0 in the others), so that per lane
 *   isum = corr + sum(u * q)        (= sum((u - o) * q) over the group)
 *   acc += da * (dw * isum + mw * sumf)
 * sums to the exact dot product. Padding has u = q = 0 and zero scales.
 *
 * With plan->corr_slots (an ISA whose kernel adds u8 x s8 products in pairs into 16-bit slots, for
 * the types li_panel_corr_slots allows), a full super-group's corr is two int16 per lane instead:
 * slot t (bytes 2t, 2t+1 of every step) holds -o * sum(q) over that slot's own elements. A kernel
 * can start its 16-bit sums there and widen once per super-group half: each slot then ends at
 * sum((u - o) * q) over its elements, which fits, while sum(u * q) alone would not. A lane is a
 * whole group there, so its two slots add up to its corr: the same isum, the same bits. Tails keep
 * corr per lane: their groups span several lanes, and moving corr between lanes would change the
 * float sums.
 */
#include "core/li.h"

void li_panel_make_plan(li_panel_plan *p, int64_t k, int group) {
    memset(p, 0, sizeof(*p));
    p->group = group;
    p->n_groups = k / group;
    p->n_full = p->n_groups / LI_LANES;
    int64_t rest = p->n_groups % LI_LANES;
    const int cap_min = 64 / group;                 /* one step of 64 bytes */
    for (int c = LI_LANES / 2; c >= cap_min; c /= 2) {
        if (rest >= c) {
            p->tail_steps[p->n_tail++] = (uint8_t)(group * c / 64);
            rest -= c;
        }
    }
    if (rest > 0) p->tail_steps[p->n_tail++] = 1;   /* padded: capacity cap_min */
    p->n_sg = p->n_full + p->n_tail;
    size_t step_bytes = (size_t)p->n_full * (size_t)(group / 4) * 64;
    for (int i = 0; i < p->n_tail; i++) step_bytes += (size_t)p->tail_steps[i] * 64;
    p->w_row_bytes = step_bytes + (size_t)p->n_sg * LI_W_SIDE;
    p->a_row_bytes = step_bytes + (size_t)p->n_sg * LI_A_SIDE;
}

void li_panel_pack_w(const li_panel_plan *p, const uint8_t *u, const float *dw, const float *mw,
                     uint8_t *dst) {
    const int G = p->group;
    int64_t g0 = 0;
    for (int64_t sg = 0; sg < p->n_sg; sg++) {
        const int steps = li_panel_steps(p, sg), cap = steps * 64 / G, lpg = LI_LANES / cap;
        float *sdw = (float *)(dst + steps * 64), *smw = sdw + LI_LANES;
        for (int gi = 0; gi < cap; gi++) {          /* lanes gi*lpg .. gi*lpg + lpg-1 hold group g0+gi */
            const int64_t g = g0 + gi;
            const int valid = g < p->n_groups;
            for (int part = 0; part < lpg; part++) {
                const int l = gi * lpg + part;
                for (int s = 0; s < steps; s++) {
                    uint8_t *o = dst + s * 64 + l * 4;
                    if (valid) memcpy(o, u + g * G + (s * lpg + part) * 4, 4);
                    else memset(o, 0, 4);
                }
                sdw[l] = valid ? dw[g] : 0.0f;
                smw[l] = valid && mw ? mw[g] : 0.0f;
            }
        }
        g0 += cap;
        dst += (size_t)steps * 64 + LI_W_SIDE;
    }
}

/* Group g (G elements) of an activation row: its quants, scale and sum of quants. */
static const int8_t *act_group(int act_type, const void *row, int64_t g, int G, float *da, int32_t *sum) {
    const int8_t *q;
    if (act_type == LI_TYPE_Q8_K) {
        const block_q8_K *b = (const block_q8_K *)row + (g * G) / QK_K;
        const int first = (int)((g * G) % QK_K);
        q = b->qs + first;
        *da = b->d;
        *sum = 0;
        for (int h = 0; h < G / 16; h++) *sum += b->bsums[first / 16 + h];
        return q;
    }
    if (act_type == LI_TYPE_Q8_1) {
        const block_q8_1 *b = (const block_q8_1 *)row + g;
        q = b->qs, *da = li_fp16_to_fp32(b->d);
    } else {
        const block_q8_0 *b = (const block_q8_0 *)row + g;
        q = b->qs, *da = li_fp16_to_fp32(b->d);
    }
    *sum = 0;
    for (int j = 0; j < QK8_0; j++) *sum += q[j];
    return q;
}

void li_panel_pack_a(const li_panel_plan *p, int act_type, const void *row, int offset, uint8_t *dst) {
    const int G = p->group;
    int64_t g0 = 0;
    for (int64_t sg = 0; sg < p->n_sg; sg++) {
        const int steps = li_panel_steps(p, sg), cap = steps * 64 / G, lpg = LI_LANES / cap;
        float *sda = (float *)(dst + steps * 64), *ssum = sda + 2 * LI_LANES;
        int32_t *scorr = (int32_t *)(sda + LI_LANES);
        for (int gi = 0; gi < cap; gi++) {
            const int64_t g = g0 + gi;
            float da = 0.0f;
            int32_t sum = 0;
            const int8_t *q = g < p->n_groups ? act_group(act_type, row, g, G, &da, &sum) : NULL;
            for (int part = 0; part < lpg; part++) {
                const int l = gi * lpg + part;
                for (int s = 0; s < steps; s++) {
                    uint8_t *o = dst + s * 64 + l * 4;
                    if (q) memcpy(o, q + (s * lpg + part) * 4, 4);
                    else memset(o, 0, 4);
                }
                sda[l] = da;
                if (li_panel_sg_slots(p, sg)) {
                    int16_t *slot = (int16_t *)&scorr[l];
                    for (int t = 0; t < 2; t++) {
                        int32_t qs = 0;
                        for (int s = 0; q && s < steps; s++)
                            qs += q[(s * lpg + part) * 4 + 2 * t] + q[(s * lpg + part) * 4 + 2 * t + 1];
                        slot[t] = (int16_t)(-offset * qs);
                    }
                } else {
                    scorr[l] = part == 0 ? -offset * sum : 0;
                }
                ssum[l] = part == 0 ? (float)sum : 0.0f;
            }
        }
        g0 += cap;
        dst += (size_t)steps * 64 + LI_A_SIDE;
    }
}
