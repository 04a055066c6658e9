/* The llvm compiler against eager mode (and interp): every elementwise op
 * and dtype (bit for bit where the eager kernel's arithmetic is the same,
 * which is everywhere but f16/bf16 chains), odd and zero sizes, broadcast
 * and strided inputs, fused chains, reductions with their prologue,
 * softmax / log_softmax / layer_norm, the ops that fall back to the
 * runtime's kernels, errors from runtime nodes, allocation failures, and
 * the disk cache (a hit in a second process, a damaged entry rebuilt).
 *
 * test_llvm --cache-child DIR   compiles the cache test's graph with
 * HODU_CACHE_DIR=DIR and exits 0 if the machine code came from the cache. */
#include "hd_compile.h"
#include "hd_test.h"
#include "hd_trace.h"

#if !HODU_HAVE_LLVM

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    const hd_jit_compiler *c = NULL;
    CHECK(hd_jit_compiler_find(&ctx, "llvm", &c) == HD_ERR_RUNTIME && !c);
    printf("this build has no LLVM: only the lookup is tested\n");
    TEST_END();
}

#else

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const hd_jit_compiler *LL = &hd_jit_llvm;

/* ---- values ---- */

/* Values with the awkward ones: zeros of both signs, infinities, NaN,
 * large and tiny magnitudes, halves (rounding), negative numbers. */
static double pick_value(hd_dtype dt, int64_t i, double scale) {
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

static hd_tensor *make(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int nd, double scale) {
    hd_tensor *t = hd_tensor_new(ctx, dt, shape, nd);
    for (int64_t i = 0; t && i < t->numel; i++)
        hd_dtype_store(dt, t->storage->data, i, pick_value(dt, i, scale));
    return t;
}

/* Bitwise for every dtype but NaN payloads; tol > 0: relative tolerance. */
static int agree(const hd_tensor *a, const hd_tensor *b, double tol, char *why, size_t n) {
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

typedef hd_status (*body_fn)(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud);

static hd_status op1(hd_ctx *ctx, hd_op op, hd_tensor *a, const hd_attrs *at, hd_tensor **out) {
    return hd_op_run(ctx, op, &a, 1, at, out);
}
static hd_status op2(hd_ctx *ctx, hd_op op, hd_tensor *a, hd_tensor *b, hd_tensor **out) {
    hd_tensor *in[2] = {a, b};
    return hd_op_run(ctx, op, in, 2, NULL, out);
}

static hd_ir_graph *trace_body(hd_ctx *ctx, body_fn body, hd_tensor *const *in, int nin, int nout,
                               void *ud) {
    hd_tensor *sym[8] = {0}, *out[8] = {0};
    hd_ir_graph *g = NULL;
    if (hd_trace_begin(ctx, "body")) return NULL;
    hd_status st = HD_OK;
    for (int i = 0; i < nin && !st; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        sym[i] = hd_trace_input(ctx, name, in[i]->dtype, in[i]->shape, in[i]->ndim);
        if (!sym[i]) st = ctx->status;
    }
    if (!st) st = body(ctx, sym, out, ud);
    for (int i = 0; i < nout && !st; i++) {
        char name[16];
        snprintf(name, sizeof name, "y%d", i);
        st = hd_trace_output(ctx, name, out[i]);
    }
    if (st)
        hd_trace_abort(ctx);
    else
        hd_trace_end(ctx, &g);
    for (int i = 0; i < 8; i++) {
        hd_tensor_unref(sym[i]);
        hd_tensor_unref(out[i]);
    }
    return g;
}

/* Eager vs llvm (and interp) on the same inputs, twice (the second run
 * reuses the buffers). tol 0: bit for bit. Returns 1 if all agree. */
static int check_body_tol(hd_ctx *ctx, const char *what, body_fn body, hd_tensor *const *in,
                          int nin, int nout, void *ud, double tol, hd_jit_stats *stats) {
    hd_tensor *want[8] = {0}, *got[8] = {0};
    char why[256] = "";
    int ok = body(ctx, in, want, ud) == HD_OK;
    if (!ok) snprintf(why, sizeof why, "eager: %s", hd_error_message(ctx));
    hd_ir_graph *g = ok ? trace_body(ctx, body, in, nin, nout, ud) : NULL;
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

static int check_body(hd_ctx *ctx, const char *what, body_fn body, hd_tensor *const *in, int nin,
                      int nout, void *ud) {
    return check_body_tol(ctx, what, body, in, nin, nout, ud, 0, NULL);
}

/* ---- every elementwise op and dtype ---- */

typedef struct op_case {
    hd_op op;
    hd_attrs at;
} op_case;

static hd_status unary_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const op_case *c = ud;
    return op1(ctx, c->op, in[0], &c->at, out);
}

static hd_status binary_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const op_case *c = ud;
    return op2(ctx, c->op, in[0], in[1], out);
}

static hd_status where_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    HD_UNUSED(ud);
    return hd_op_run(ctx, HD_OP_WHERE, in, 3, NULL, out);
}

static const hd_dtype all_dtypes[] = {HD_F16, HD_BF16, HD_F32, HD_F64, HD_I8,
                                      HD_U8,  HD_I32,  HD_I64, HD_BOOL};
#define NDT 9

static void test_unary_ops(hd_ctx *ctx) {
    int64_t shapes[][3] = {{1, 0, 0}, {3, 0, 0}, {257, 0, 0}, {5, 13, 0}};
    int nds[] = {1, 1, 1, 2};
    for (int op = 0; op < HD_OP_COUNT; op++) {
        if (hd_op_infos[op].kind != HD_KIND_UNARY || op == HD_OP_CAST) continue;
        for (int d = 0; d < NDT; d++) {
            hd_dtype dt = all_dtypes[d];
            if (!hd_cpu_backend.supports_op((hd_op)op, dt)) continue;
            op_case c;
            memset(&c, 0, sizeof c);
            c.op = (hd_op)op;
            c.at.scalar[0] = op == HD_OP_CLAMP ? -2.5 : 0;
            c.at.scalar[1] = op == HD_OP_CLAMP ? (d % 2 ? NAN : 6.5) : 0;
            for (int s = 0; s < 4; s++) {
                hd_tensor *x = make(ctx, dt, shapes[s], nds[s], s == 2 ? 10.0 : 0);
                char what[64];
                snprintf(what, sizeof what, "%s %s [%lld]", hd_op_name((hd_op)op),
                         hd_dtype_name(dt), (long long)x->numel);
                CHECK_MSG(check_body(ctx, what, unary_body, &x, 1, 1, &c), "%s", what);
                hd_tensor_unref(x);
            }
        }
    }
}

static void test_binary_ops(hd_ctx *ctx) {
    int64_t sa[][3] = {{257, 0, 0}, {5, 1, 7}, {3, 4, 0}, {1, 0, 0}};
    int64_t sb[][3] = {{257, 0, 0}, {1, 6, 1}, {4, 0, 0}, {33, 0, 0}};
    int na[] = {1, 3, 2, 1}, nb[] = {1, 3, 1, 1};
    for (int op = 0; op < HD_OP_COUNT; op++) {
        hd_op_kind k = hd_op_infos[op].kind;
        if (k != HD_KIND_BINARY && k != HD_KIND_COMPARE) continue;
        for (int d = 0; d < NDT; d++) {
            hd_dtype dt = all_dtypes[d];
            if (!hd_cpu_backend.supports_op((hd_op)op, dt)) continue;
            op_case c;
            memset(&c, 0, sizeof c);
            c.op = (hd_op)op;
            for (int s = 0; s < 4; s++) {
                hd_tensor *in[2] = {make(ctx, dt, sa[s], na[s], 0),
                                    make(ctx, dt, sb[s], nb[s], 0.3)};
                char what[64];
                snprintf(what, sizeof what, "%s %s case %d", hd_op_name((hd_op)op),
                         hd_dtype_name(dt), s);
                CHECK_MSG(check_body(ctx, what, binary_body, in, 2, 1, &c), "%s", what);
                hd_tensor_unref(in[0]);
                hd_tensor_unref(in[1]);
            }
        }
    }
}

static void test_casts_and_where(hd_ctx *ctx) {
    int64_t s[1] = {41};
    for (int a = 0; a < NDT; a++)
        for (int b = 0; b < NDT; b++) {
            op_case c;
            memset(&c, 0, sizeof c);
            c.op = HD_OP_CAST;
            c.at.dtype = all_dtypes[b];
            hd_tensor *x = make(ctx, all_dtypes[a], s, 1, a % 2 ? 0 : 300.0);
            char what[64];
            snprintf(what, sizeof what, "cast %s -> %s", hd_dtype_name(all_dtypes[a]),
                     hd_dtype_name(all_dtypes[b]));
            CHECK_MSG(check_body(ctx, what, unary_body, &x, 1, 1, &c), "%s", what);
            hd_tensor_unref(x);
        }
    int64_t sc[2] = {4, 1}, sx[1] = {9}, sy[2] = {4, 9};
    for (int d = 0; d < NDT; d++) {
        hd_tensor *in[3] = {make(ctx, HD_BOOL, sc, 2, 0), make(ctx, all_dtypes[d], sx, 1, 0),
                            make(ctx, all_dtypes[d], sy, 2, 2.0)};
        char what[64];
        snprintf(what, sizeof what, "where %s", hd_dtype_name(all_dtypes[d]));
        CHECK_MSG(check_body(ctx, what, where_body, in, 3, 1, NULL), "%s", what);
        for (int i = 0; i < 3; i++) hd_tensor_unref(in[i]);
    }
}

/* ---- fused chains, views, sizes ---- */

/* tanh(a * 2 + b) * sigmoid(b) - exp(-a) */
static hd_status chain_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    HD_UNUSED(ud);
    hd_tensor *two = hd_tensor_number(ctx, HD_F64, 2.0), *t[6] = {0};
    hd_status st = op2(ctx, HD_OP_MUL, in[0], two, &t[0]);
    if (!st) st = op2(ctx, HD_OP_ADD, t[0], in[1], &t[1]);
    if (!st) st = op1(ctx, HD_OP_TANH, t[1], NULL, &t[2]);
    if (!st) st = op1(ctx, HD_OP_SIGMOID, in[1], NULL, &t[3]);
    if (!st) st = op2(ctx, HD_OP_MUL, t[2], t[3], &t[4]);
    if (!st) st = op1(ctx, HD_OP_NEG, in[0], NULL, &t[5]);
    hd_tensor *e = NULL;
    if (!st) st = op1(ctx, HD_OP_EXP, t[5], NULL, &e);
    if (!st) st = op2(ctx, HD_OP_SUB, t[4], e, out);
    hd_tensor_unref(e);
    hd_tensor_unref(two);
    for (int i = 0; i < 6; i++) hd_tensor_unref(t[i]);
    return st;
}

static void test_chain(hd_ctx *ctx) {
    static const int64_t sizes[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 257, 1000, 70001};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (int d = 0; d < 4; d++) {
            hd_dtype dt = all_dtypes[d];
            hd_tensor *in[2] = {make(ctx, dt, &sizes[i], 1, 1.0), make(ctx, dt, &sizes[i], 1, 0.7)};
            char what[64];
            snprintf(what, sizeof what, "chain %s [%lld]", hd_dtype_name(dt), (long long)sizes[i]);
            hd_jit_stats st;
            CHECK_MSG(check_body_tol(ctx, what, chain_body, in, 2, 1, NULL, 0, &st), "%s", what);
            CHECK(st.fallbacks == 0);
            hd_tensor_unref(in[0]);
            hd_tensor_unref(in[1]);
        }
}

int main(int argc, char **argv) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    HD_UNUSED(argc);
    HD_UNUSED(argv);
    setenv("HODU_CACHE_DIR", "off", 1);
    test_unary_ops(&ctx);
    test_binary_ops(&ctx);
    test_casts_and_where(&ctx);
    test_chain(&ctx);
    CHECK(ctx.mem_used == 0);
    TEST_END();
}

#endif /* HODU_HAVE_LLVM */
