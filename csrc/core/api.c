/* api.c -- the small entry points of localinfer.h around the traits table. */
#include <stdlib.h>

#include "core/li.h"

int li_type_info(int type, int *block_size, int *type_size, int *vec_dot_type) {
    const li_type_traits *t = li_traits(type);
    if (!t) return LI_ETYPE;
    if (block_size) *block_size = t->block_size;
    if (type_size) *type_size = t->type_size;
    if (vec_dot_type) *vec_dot_type = t->vec_dot_type;
    return LI_OK;
}

int li_dequantize_row(int type, const void *src, float *dst, int64_t n) {
    const li_type_traits *t = li_traits(type);
    if (!t || !t->dequantize) return LI_ETYPE;
    if (!src || !dst || n < 0 || n % t->block_size) return LI_EINVAL;
    t->dequantize(src, dst, n);
    return LI_OK;
}

int li_quantize_row(int act_type, const float *src, void *dst, int64_t n) {
    const li_type_traits *t = li_traits(act_type);
    if (!t || !t->from_float) return LI_ETYPE;
    if (!src || !dst || n < 0 || n % t->block_size) return LI_EINVAL;
    t->from_float(src, dst, n);
    return LI_OK;
}

int li_vec_dot(int wtype, int64_t n, const void *w, const void *a, float *out) {
    const li_type_traits *t = li_traits(wtype);
    if (!t || !t->vec_dot) return LI_ETYPE;
    const li_type_traits *at = li_traits(t->vec_dot_type);
    if (!w || !a || !out || n <= 0 || n % t->block_size || n % at->block_size) return LI_EINVAL;
    const int n_sums = li_act_sums_count(t->vec_dot_type, n);
    float *sums = n_sums ? malloc((size_t)n_sums * sizeof(float)) : NULL;
    if (n_sums && !sums) return LI_ENOMEM;
    li_act_sums(t->vec_dot_type, a, n, sums);
    t->vec_dot(n, out, w, a, sums);
    free(sums);
    return LI_OK;
}
