/* dispatch.c -- pick the kernel variant at load time.
 *
 * Two separate questions, as in ggml: what this build contains (the variants
 * compiled in, listed in `variants` below; every SIMD file is compiled with
 * baseline flags and enables its ISA per function, so one binary holds them all)
 * and what this CPU supports (__builtin_cpu_supports / getauxval, asked at load
 * time). The best variant that both contain and support is used, unless the
 * environment variable LOCALINFER_ISA names a lower one; a name this CPU cannot
 * run is clamped to the best supported one with a warning on stderr, because a
 * load-time error would leave no kernels at all.
 *
 * Each variant's table is merged with the generic one once, at load: a NULL
 * entry in a SIMD table means "use the generic function".
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/li.h"
#include "generic/generic.h"
#if defined(__x86_64__) || defined(_M_X64)
#include "x86/avx2.h"
#include "x86/avx512.h"
#endif
#if defined(__aarch64__)
#include "arm/neon.h"
#endif

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

static int cpu_generic(void) { return 1; }

#if defined(__x86_64__) || defined(_M_X64)
static int cpu_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}
static int cpu_avx512(void) {
    return cpu_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}
#endif

#if defined(__aarch64__)
static int cpu_neon(void) {
#if defined(__linux__)
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;   /* vdotq_s32 needs the dotprod extension */
#else
    return 0;
#endif
}
#endif

typedef struct {
    const char *name;
    const li_isa_kernels *kernels;
    int (*cpu_supports)(void);
} li_variant;

/* lowest to highest */
static const li_variant variants[] = {
    {"generic", &li_kernels_generic, cpu_generic},
#if defined(__x86_64__) || defined(_M_X64)
    {"avx2", &li_kernels_avx2, cpu_avx2},
    {"avx512", &li_kernels_avx512, cpu_avx512},
#endif
#if defined(__aarch64__)
    {"neon", &li_kernels_neon, cpu_neon},
#endif
};
#define N_VARIANTS ((int)(sizeof(variants) / sizeof(variants[0])))

static li_type_traits merged[N_VARIANTS][LI_TYPE_COUNT];
static int supported[N_VARIANTS];
static int best = 0;
static volatile int active = 0;   /* index into variants; swapped whole, never half-built */
static char built_names[128];

static void merge(int v) {
    const li_isa_kernels *k = variants[v].kernels;
    for (int t = 0; t < LI_TYPE_COUNT; t++) {
        li_type_traits tr = li_traits_generic[t];
        if (k->vec_dot[t]) tr.vec_dot = k->vec_dot[t];
        tr.vec_dot_rows = k->vec_dot[t] ? k->vec_dot_rows[t] : NULL;   /* only beside its own vec_dot */
        tr.vec_dot_x4 = k->vec_dot_x4[t];   /* none in generic: a repacked row is gathered for vec_dot */
        tr.vec_dot_x16_m = k->vec_dot_x4[t] ? k->vec_dot_x16_m[t] : NULL;   /* only beside its own vec_dot_x4 */
        tr.vec_dot_m = k->vec_dot[t] ? k->vec_dot_m[t] : NULL;   /* only beside the vec_dot whose bits it gives */
        tr.vec_dot_prefetches = k->vec_dot[t] ? k->vec_dot_prefetches[t] : 0;   /* a property of that vec_dot */
        tr.x4_same_bits = k->vec_dot[t] && k->vec_dot_x4[t] && !tr.vec_dot_x16_m ? k->x4_same_bits[t] : 0;
        if (k->from_float[t]) tr.from_float = k->from_float[t];
        if (k->unpack[t]) tr.unpack = k->unpack[t];
        if (k->dequantize[t]) tr.dequantize = k->dequantize[t];
        merged[v][t] = tr;
    }
}

static int find_variant(const char *name) {
    for (int v = 0; v < N_VARIANTS; v++)
        if (name && strcmp(variants[v].name, name) == 0) return v;
    return -1;
}

__attribute__((constructor)) static void li_dispatch_init(void) {
    built_names[0] = 0;
    for (int v = 0; v < N_VARIANTS; v++) {
        merge(v);
        supported[v] = variants[v].cpu_supports();
        if (supported[v]) best = v;
        if (v) strncat(built_names, ",", sizeof(built_names) - strlen(built_names) - 1);
        strncat(built_names, variants[v].name, sizeof(built_names) - strlen(built_names) - 1);
    }
    active = best;
    const char *env = getenv("LOCALINFER_ISA");
    if (env && *env) {
        const int v = find_variant(env);
        if (v < 0)
            fprintf(stderr, "localinfer: LOCALINFER_ISA=%s is not a variant of this build (%s); using %s\n",
                    env, built_names, variants[best].name);
        else if (!supported[v])
            fprintf(stderr, "localinfer: LOCALINFER_ISA=%s is not supported by this CPU; using %s\n",
                    env, variants[best].name);
        else
            active = v;
    }
}

const li_type_traits *li_traits(int type) {
    if (type < 0 || type >= LI_TYPE_COUNT) return NULL;
    const li_type_traits *t = &merged[active][type];
    return t->name ? t : NULL;
}

const li_isa_kernels *li_active_kernels(void) { return variants[active].kernels; }

const char *li_isa_name(void) { return variants[active].name; }

const char *li_isa_built(void) { return built_names; }

int li_isa_supported(const char *name) {
    const int v = find_variant(name);
    return v < 0 ? -1 : supported[v];
}

int li_force_isa(const char *name) {
    const int v = find_variant(name);
    if (v < 0 || !supported[v]) return LI_EISA;
    active = v;
    return LI_OK;
}
