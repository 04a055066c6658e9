/* What the llvm compiler's tests share (test_llvm, test_llvm_reduce,
 * test_llvm_gemm): the compiler, input values with the awkward ones, a
 * body run eagerly and compiled and the outputs compared (bit for bit or
 * to a tolerance), the dtypes, the MLP. Include after hd_test.h and
 * hd_test_trace.h; empty in a build without LLVM. */
#ifndef HD_TEST_LLVM_H
#define HD_TEST_LLVM_H

#include "hd_compile.h"

/* A build without LLVM: the compiler is not found; nothing else to test. */
#define HD_TEST_LLVM_MISSING_MAIN()                                                                \
    int main(void) {                                                                               \
        hd_ctx ctx;                                                                                \
        hd_ctx_init(&ctx, NULL, NULL);                                                             \
        const hd_jit_compiler *c = NULL;                                                           \
        CHECK(hd_jit_compiler_find(&ctx, "llvm", &c) == HD_ERR_RUNTIME && !c);                     \
        printf("this build has no LLVM: only the lookup is tested\n");                             \
        TEST_END();                                                                                \
    }

#if HODU_HAVE_LLVM

static const hd_jit_compiler *LL = &hd_jit_llvm;

/* ---- values ---- */

/* Values with the awkward ones: zeros of both signs, infinities, NaN,
 * large and tiny magnitudes, halves (rounding), negative numbers. */
static inline double pick_value(hd_dtype dt, int64_t i, double scale) {
    static const double special[] = {0.0,  -0.0, 1.0,   -1.0,  0.5,  -0.5,     2.5,      -2.5,
                                     3.0,  7.0,  -7.0,  100.0, 1e-3, -1e-30,   88.0,     -104.0,
                                     20.5, 0.75, -3.25, 1e10,  NAN,  INFINITY, -INFINITY};
    int nspecial = (int)(sizeof special / sizeof *special);
    double v;
    if (i < nspecial && scale == 0)
        v = special[i];
    else
        v = ((double)((i * 7919) % 1001) / 1000.0 - 0.5) * 6.0 * (scale ? scale : 1.0);
    if (!hd_dtype_is_float(dt)) {
        if (v != v || v > 1e9 || v < -1e9) v = (double)(i % 17) - 8;
        v = (double)(int64_t)v;
        if (dt == HD_U8 || dt == HD_BOOL) v = fabs(v);
        if (dt == HD_BOOL) v = (int64_t)v % 2;
        if (dt == HD_I8 || dt == HD_U8) v = (double)((int64_t)v % 100);
    }
    return v;
}

static inline hd_tensor *make(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int nd,
                              double scale) {
    hd_tensor *t = hd_tensor_new(ctx, dt, shape, nd);
    for (int64_t i = 0; t && i < t->numel; i++)
        hd_dtype_store(dt, t->storage->data, i, pick_value(dt, i, scale));
    return t;
}

/* Bitwise for every dtype but NaN payloads; tol > 0: relative tolerance. */
static inline int agree(const hd_tensor *a, const hd_tensor *b, double tol, char *why, size_t n) {
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->numel != b->numel) {
        snprintf(why, n, "dtype or shape differ");
        return 0;
    }
    for (int64_t i = 0; i < a->numel; i++) {
        double x = hd_tensor_get(a, i), y = hd_tensor_get(b, i);
        int ok = tol > 0 ? hd_test_close(x, y, tol, tol * 1e-3)
                         : (x == y && signbit(x) == signbit(y)) || (x != x && y != y);
        if (!hd_dtype_is_float(a->dtype)) ok = hd_tensor_get_i64(a, i) == hd_tensor_get_i64(b, i);
        if (!ok) {
            snprintf(why, n, "element %lld: eager %.17g, compiled %.17g", (long long)i, x, y);
            return 0;
        }
    }
    return 1;
}

/* ---- bodies: run eagerly on data, or traced on symbolic inputs ---- */

/* Eager vs llvm (and interp) on the same inputs, twice (the second run
 * reuses the buffers). tol 0: bit for bit. Returns 1 if all agree. */
static inline int check_body_tol(hd_ctx *ctx, const char *what, body_fn body, hd_tensor *const *in,
                                 int nin, int nout, void *ud, double tol, hd_jit_stats *stats) {
    hd_tensor *want[8] = {0}, *got[8] = {0};
    char why[256] = "";
    int ok = body(ctx, in, want, ud) == HD_OK;
    if (!ok) snprintf(why, sizeof why, "eager: %s", hd_error_message(ctx));
    hd_ir_graph *g = ok ? trace_body(ctx, "body", body, in, nin, nout, ud) : NULL;
    hd_jit_exec *e = NULL;
    if (ok && (!g || LL->compile(ctx, g, NULL, &e) != HD_OK)) {
        snprintf(why, sizeof why, "compile: %s", hd_error_message(ctx));
        ok = 0;
    }
    for (int run = 0; ok && run < 2; run++) {
        if (LL->run(ctx, e, in, nin, got, nout) != HD_OK) {
            snprintf(why, sizeof why, "run: %s", hd_error_message(ctx));
            ok = 0;
        }
        for (int i = 0; ok && i < nout; i++) ok = agree(want[i], got[i], tol, why, sizeof why);
        for (int i = 0; i < 8; i++) {
            hd_tensor_unref(got[i]);
            got[i] = NULL;
        }
    }
    if (!ok) {
        fprintf(stderr, "%s: %s\n", what, why);
        char *t = e ? hd_ir_to_text(LL->graph(e)) : g ? hd_ir_to_text(g) : NULL;
        if (t) fprintf(stderr, "%s", t);
        hd_ctx_strfree(ctx, t);
    }
    if (e && stats) LL->stats(e, stats);
    if (e) LL->free(ctx, e);
    hd_ir_graph_free(g);
    hd_error_clear(ctx);
    for (int i = 0; i < 8; i++) hd_tensor_unref(want[i]);
    return ok;
}

static inline int check_body(hd_ctx *ctx, const char *what, body_fn body, hd_tensor *const *in,
                             int nin, int nout, void *ud) {
    return check_body_tol(ctx, what, body, in, nin, nout, ud, 0, NULL);
}

/* ---- cases ---- */

/* An op and its attributes: the case of a body of one op. */
typedef struct op_case {
    hd_op op;
    hd_attrs at;
} op_case;

/* Every dtype (the first four floating). */
static const hd_dtype all_dtypes[] = {HD_F16, HD_BF16, HD_F32, HD_F64, HD_I8,
                                      HD_U8,  HD_I32,  HD_I64, HD_BOOL};
#define NDT 9

/* ---- the MLP ---- */

static inline void mlp_params(hd_ctx *ctx, hd_tensor **p, int64_t d0, int64_t d1) {
    int64_t s1[2] = {d0, d1}, s2[1] = {d1}, s3[2] = {d1, 3}, s4[1] = {3};
    p[0] = make(ctx, HD_F32, s1, 2, 0.1);
    p[1] = make(ctx, HD_F32, s2, 1, 0.05);
    p[2] = make(ctx, HD_F32, s3, 2, 0.2);
    p[3] = make(ctx, HD_F32, s4, 1, 0.3);
}

#endif /* HODU_HAVE_LLVM */
#endif
