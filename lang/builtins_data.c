/* Natives for stdlib/data.hodu: randperm (shuffling), isatty and flush
 * (progress bars). */
#include "builtins_tensor.h"
#include "hd_rng.h"

#include <stdio.h>
#include <unistd.h>

/* randperm(n): a random permutation of 0..n as an i64 tensor, from the
 * seeded stream (manual_seed), by Fisher-Yates over one draw of n
 * uniforms. */
static HD_TF_FN(tf_randperm) {
    HD_TARGS_BIND(a); /* n */
    int64_t n;
    if (hd_targ_int(vm, &a, 0, 0, &n)) return HD_ERR_RUNTIME;
    if (n < 0)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "randperm: n must be >= 0, got %lld", (long long)n);
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_tensor *t = hd_tensor_new(ctx, HD_I64, &n, 1);
    if (!t) return hd_tfail(vm, "randperm");
    int64_t *p = hd_tensor_data(t);
    for (int64_t i = 0; i < n; i++) p[i] = i;
    uint64_t base = hd_rng_reserve(ctx, n);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(hd_rng_uniform_f64(ctx->rng_seed, base, i) * (double)(i + 1));
        if (j > i) j = i;
        int64_t s = p[i];
        p[i] = p[j];
        p[j] = s;
    }
    *out = hd_tensor_value(t);
    return HD_OK;
}

/* isatty(): whether standard output is a terminal. */
static HD_TF_FN(tf_isatty) {
    HD_TARGS_BIND(a); /* (none) */
    *out = hd_bool(isatty(STDOUT_FILENO));
    return HD_OK;
}

/* flush(): write out what print has buffered. */
static HD_TF_FN(tf_flush) {
    HD_TARGS_BIND(a); /* (none) */
    fflush(stdout);
    return HD_OK;
}

static const hd_tfunc rows[] = {
    {"randperm", tf_randperm, "n", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"isatty", tf_isatty, "", -1, HD_TF_GLOBAL},
    {"flush", tf_flush, "", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
};

const hd_tfunc_table hd_tfuncs_data = {rows, (int)(sizeof rows / sizeof rows[0])};
