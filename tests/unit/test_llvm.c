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
#include "hd_test_trace.h"
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
#include <llvm-c/Core.h>
#include <llvm-c/Object.h>
#include <sys/mman.h>
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

/* Eager vs llvm (and interp) on the same inputs, twice (the second run
 * reuses the buffers). tol 0: bit for bit. Returns 1 if all agree. */
static int check_body_tol(hd_ctx *ctx, const char *what, body_fn body, hd_tensor *const *in,
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
    int64_t shapes[][3] = {{1, 0}, {3, 0}, {257, 0}, {5, 13, 0}};
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
    int64_t sa[][3] = {{257, 0}, {5, 1, 7}, {3, 4, 0}, {1, 0}};
    int64_t sb[][3] = {{257, 0}, {1, 6, 1}, {4, 0}, {33, 0}};
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

/* gelu_bwd, tanh_bwd, sigmoid_bwd (gradient kernels, elementwise) fused
 * with their neighbours: op(x * 2, g) + x, one generated loop, the eager
 * bits. */
static hd_status grad_ew_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    hd_op op = *(const hd_op *)ud;
    hd_tensor *two = hd_tensor_number(ctx, HD_F64, 2.0), *x2 = NULL, *gb = NULL;
    hd_status st = op2(ctx, HD_OP_MUL, in[0], two, &x2);
    if (!st) st = op2(ctx, op, x2, in[1], &gb);
    if (!st) st = op2(ctx, HD_OP_ADD, gb, in[0], out);
    hd_tensor_unref(two);
    hd_tensor_unref(x2);
    hd_tensor_unref(gb);
    return st;
}

static void test_grad_ew(hd_ctx *ctx) {
    static const int64_t sizes[] = {0, 1, 17, 257, 70001};
    static hd_op ops[] = {HD_OP_GELU_BWD, HD_OP_TANH_BWD, HD_OP_SIGMOID_BWD};
    const hd_dtype dts[2] = {HD_F32, HD_F64};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes * 3; i++)
        for (int d = 0; d < 2; d++) {
            hd_op *op = &ops[i % 3];
            const int64_t *n = &sizes[i / 3];
            hd_tensor *in[2] = {make(ctx, dts[d], n, 1, 3.0), make(ctx, dts[d], n, 1, 0.5)};
            char what[64];
            snprintf(what, sizeof what, "%s %s [%lld]", hd_op_name(*op), hd_dtype_name(dts[d]),
                     (long long)*n);
            hd_jit_stats st;
            CHECK_MSG(check_body_tol(ctx, what, grad_ew_body, in, 2, 1, op, 0, &st), "%s", what);
            CHECK(st.fallbacks == 0 && (*n == 0 || st.kernels == 1));
            hd_tensor_unref(in[0]);
            hd_tensor_unref(in[1]);
        }
}

/* softmax_bwd and log_softmax_bwd as row kernels: y = (log_)softmax(x) over
 * an axis, then the gradient of g; sums in double in another order than
 * the eager kernel's, so 1e-6 relative (f32), 1e-12 (f64). ud: the case. */
typedef struct smb_case {
    hd_op op;
    int64_t axis;
} smb_case;

static hd_status smb_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const smb_case *c = ud;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = c->axis;
    hd_tensor *y = NULL, *t2[2];
    hd_op fwd = c->op == HD_OP_SOFTMAX_BWD ? HD_OP_SOFTMAX : HD_OP_LOG_SOFTMAX;
    hd_status st = op1(ctx, fwd, in[0], &at, &y);
    t2[0] = y;
    t2[1] = in[1];
    if (!st) st = hd_op_run(ctx, c->op, t2, 2, &at, out);
    hd_tensor_unref(y);
    return st;
}

static void test_softmax_bwd(hd_ctx *ctx) {
    static const int64_t shapes[][3] = {{5, 37, 0}, {40, 3, 0}, {3, 4, 5}, {1, 9, 0}};
    static const int nds[] = {2, 2, 3, 2};
    static const int64_t axes[] = {-1, 0, 1, 1};
    const hd_dtype dts[2] = {HD_F32, HD_F64};
    for (int k = 0; k < 2; k++)
        for (int s = 0; s < 4; s++)
            for (int d = 0; d < 2; d++) {
                smb_case c = {k ? HD_OP_LOG_SOFTMAX_BWD : HD_OP_SOFTMAX_BWD, axes[s]};
                hd_tensor *in[2] = {make(ctx, dts[d], shapes[s], nds[s], 1.0),
                                    make(ctx, dts[d], shapes[s], nds[s], 0.3)};
                char what[64];
                snprintf(what, sizeof what, "%s %s case %d", hd_op_name(c.op),
                         hd_dtype_name(dts[d]), s);
                hd_jit_stats st;
                CHECK_MSG(check_body_tol(ctx, what, smb_body, in, 2, 1, &c,
                                         dts[d] == HD_F32 ? 1e-6 : 1e-12, &st),
                          "%s", what);
                CHECK_MSG(st.fallbacks == 0, "%s: %d fallbacks", what, st.fallbacks);
                hd_tensor_unref(in[0]);
                hd_tensor_unref(in[1]);
            }
}

/* argmax and argmin, with a prologue (x * 2), over one axis or all, in
 * every dtype: ties (integers from few values), NaN and infinities
 * (scale 0 puts the special values first) against eager exactly. */
typedef struct argc {
    hd_op op;
    int axis; /* -2: all */
} argc;

static hd_status arg_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const argc *c = ud;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    if (c->axis > -2) {
        at.naxes = 1;
        at.axes[0] = c->axis;
    }
    hd_tensor *two = hd_tensor_number(ctx, HD_F64, 2.0), *x2 = NULL;
    hd_status st = in[0]->dtype == HD_BOOL ? HD_OK : op2(ctx, HD_OP_MUL, in[0], two, &x2);
    if (!st) st = op1(ctx, c->op, x2 ? x2 : in[0], &at, out);
    hd_tensor_unref(two);
    hd_tensor_unref(x2);
    return st;
}

static void test_argmax(hd_ctx *ctx) {
    static const int64_t shape[2] = {7, 33};
    static const int axes[] = {1, 0, -1, -2};
    for (int d = 0; d < NDT; d++)
        for (int k = 0; k < 2; k++)
            for (int a = 0; a < 4; a++)
                for (int sc = 0; sc < 2; sc++) {
                    argc c = {k ? HD_OP_ARGMIN : HD_OP_ARGMAX, axes[a]};
                    if (!hd_cpu_backend.supports_op(c.op, all_dtypes[d])) continue;
                    hd_tensor *x = make(ctx, all_dtypes[d], shape, 2, sc ? 0.3 : 0);
                    char what[64];
                    snprintf(what, sizeof what, "%s %s axis %d%s", hd_op_name(c.op),
                             hd_dtype_name(all_dtypes[d]), c.axis, sc ? "" : " specials");
                    hd_jit_stats st;
                    CHECK_MSG(check_body_tol(ctx, what, arg_body, &x, 1, 1, &c, 0, &st), "%s",
                              what);
                    CHECK_MSG(st.fallbacks == 0, "%s: %d fallbacks", what, st.fallbacks);
                    hd_tensor_unref(x);
                }
}

/* mse(x * 2, y) as a generated reduction (same shapes; sums in double in
 * another order than eager's: 1e-6 relative), and with y broadcast (the
 * runtime kernel runs it). */
static hd_status mse_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    HD_UNUSED(ud);
    hd_tensor *two = hd_tensor_number(ctx, HD_F64, 2.0), *x2 = NULL;
    hd_status st = op2(ctx, HD_OP_MUL, in[0], two, &x2);
    if (!st) st = op2(ctx, HD_OP_MSE, x2, in[1], out);
    hd_tensor_unref(two);
    hd_tensor_unref(x2);
    return st;
}

static void test_mse(hd_ctx *ctx) {
    static const int64_t sx[2] = {5, 37}, sy[2][2] = {{5, 37}, {1, 37}};
    const hd_dtype dts[3] = {HD_F32, HD_F64, HD_BF16};
    for (int d = 0; d < 3; d++)
        for (int b = 0; b < 2; b++) {
            hd_tensor *in[2] = {make(ctx, dts[d], sx, 2, 1.0), make(ctx, dts[d], sy[b], 2, 0.3)};
            char what[64];
            snprintf(what, sizeof what, "mse %s%s", hd_dtype_name(dts[d]), b ? " broadcast" : "");
            hd_jit_stats st;
            CHECK_MSG(check_body_tol(ctx, what, mse_body, in, 2, 1, NULL,
                                     dts[d] == HD_F64 ? 1e-12 : 1e-6, &st),
                      "%s", what);
            CHECK_MSG(st.fallbacks == b, "%s: %d fallbacks", what, st.fallbacks);
            hd_tensor_unref(in[0]);
            hd_tensor_unref(in[1]);
        }
}

/* layer_norm_bwd's dx as a row kernel (x, g[, w]) after a generated
 * layer_norm: sums in double in another order than eager's, 1e-5 relative
 * (f32), 1e-10 (f64; dx cancels: g w rstd against the row's means). ud:
 * the normalised dims, and 1 to pass w. */
static hd_status lnb_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const int *c = ud;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = c[0];
    at.scalar[0] = 1e-5;
    hd_tensor *y = NULL, *a[3] = {in[0], in[2], NULL};
    hd_status st = hd_op_run(ctx, HD_OP_LAYER_NORM, a, 1, &at, &y);
    hd_tensor *b[3] = {in[0], y, in[2]};
    if (!st) st = hd_op_run(ctx, HD_OP_LAYER_NORM_BWD, b, c[1] ? 3 : 2, &at, out);
    hd_tensor_unref(y);
    return st;
}

static void test_layer_norm_bwd(hd_ctx *ctx) {
    static const int64_t shapes[3][3] = {{5, 37, 0}, {3, 4, 6}, {40, 3, 0}};
    static const int nds[3] = {2, 3, 2}, ks[3] = {1, 2, 1};
    const hd_dtype dts[2] = {HD_F32, HD_F64};
    for (int s = 0; s < 3; s++)
        for (int d = 0; d < 2; d++)
            for (int w = 0; w < 2; w++) {
                int c[2] = {ks[s], w};
                const int64_t *ws = shapes[s] + nds[s] - ks[s];
                hd_tensor *in[3] = {make(ctx, dts[d], shapes[s], nds[s], 1.0),
                                    make(ctx, dts[d], shapes[s], nds[s], 0.3),
                                    make(ctx, dts[d], ws, ks[s], 0.7)};
                char what[64];
                snprintf(what, sizeof what, "layer_norm_bwd %s case %d%s", hd_dtype_name(dts[d]), s,
                         w ? " with w" : "");
                hd_jit_stats st;
                CHECK_MSG(check_body_tol(ctx, what, lnb_body, in, 3, 1, c,
                                         dts[d] == HD_F32 ? 1e-5 : 1e-10, &st),
                          "%s", what);
                CHECK_MSG(st.fallbacks == 0, "%s: %d fallbacks", what, st.fallbacks);
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

static void test_chain_sizes(hd_ctx *ctx, const int64_t *sizes, size_t nsizes, int pass) {
    for (size_t i = 0; i < nsizes; i++)
        for (int d = 0; d < 4; d++) {
            hd_dtype dt = all_dtypes[d];
            hd_tensor *in[2] = {make(ctx, dt, &sizes[i], 1, 1.0), make(ctx, dt, &sizes[i], 1, 0.7)};
            char what[64];
            snprintf(what, sizeof what, "chain %s [%lld] pass %d", hd_dtype_name(dt),
                     (long long)sizes[i], pass);
            hd_jit_stats st;
            CHECK_MSG(check_body_tol(ctx, what, chain_body, in, 2, 1, NULL, 0, &st), "%s", what);
            CHECK(st.fallbacks == 0 && (sizes[i] == 0 || st.kernels == 1)); /* one fused loop */
            hd_tensor_unref(in[0]);
            hd_tensor_unref(in[1]);
        }
}

/* The chain at sizes around the vector widths (8, 16, 32 lanes) and, past
 * 2^21 elements, the streamed stores (docs/llvm.md); as the host's code
 * (AVX-512's or AVX2's explicit vectors), with AVX-512 left out, and with
 * the loop vectorizer's code. */
static void test_chain(hd_ctx *ctx) {
    static const int64_t sizes[] = {0,  1,  3,  7,  8,  9,  15,  16,   17,    31,
                                    32, 33, 63, 64, 65, 95, 257, 1000, 70001, (1 << 21) + 37};
    for (int pass = 0; pass < 3; pass++) {
        if (pass) setenv(pass == 1 ? "HODU_LLVM_AVX512" : "HODU_LLVM_VECTORS", "0", 1);
        test_chain_sizes(ctx, sizes, sizeof sizes / sizeof *sizes, pass);
    }
    unsetenv("HODU_LLVM_AVX512");
    unsetenv("HODU_LLVM_VECTORS");
}

/* The shared vector math (docs/vmath.md) over every binade: each f32
 * function llvm generates, on 200,003 floats spread over all bit patterns
 * (specials, subnormals, huge sin and cos arguments, the overflow and
 * underflow ranges; on threads), and pow on pairs of them, against eager
 * bit for bit; the same through f16 and bf16, with AVX-512 left out of
 * the generated code (HODU_LLVM_AVX512=0: AVX2's explicit vectors where the
 * host has AVX2), and with the loop vectorizer's code instead of explicit
 * vectors (HODU_LLVM_VECTORS=0). */
static void test_vmath_sweep(hd_ctx *ctx) {
    static const hd_op ops[] = {HD_OP_EXP,  HD_OP_LOG,      HD_OP_TANH, HD_OP_SIGMOID, HD_OP_SILU,
                                HD_OP_GELU, HD_OP_SOFTPLUS, HD_OP_SIN,  HD_OP_COS,     HD_OP_POW};
    int64_t n = 200003;
    hd_tensor *x = hd_tensor_new(ctx, HD_F32, &n, 1), *y = hd_tensor_new(ctx, HD_F32, &n, 1);
    float *xv = x->storage->data, *yv = y->storage->data;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)((uint64_t)i * 21473u * 1000003u), w = u * 2654435761u;
        memcpy(&xv[i], &u, 4);
        yv[i] = i % 3 ? (float)(int)(w % 41) - 20.0f : (float)(int)(w % 4001) / 64.0f - 31.0f;
        if (i % 5 == 0) memcpy(&yv[i], &w, 4);
    }
    static const char *const pass_names[3] = {"", " (no AVX-512)", " (no explicit vectors)"};
    for (int pass = 0; pass < 3; pass++) {
        if (pass) setenv("HODU_LLVM_AVX512", "0", 1);
        if (pass == 2) setenv("HODU_LLVM_VECTORS", "0", 1);
        for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
            op_case c;
            memset(&c, 0, sizeof c);
            c.op = ops[k];
            for (int d = 0; d < 3; d++) {
                const hd_dtype dts[3] = {HD_F32, HD_F16, HD_BF16};
                hd_attrs at;
                memset(&at, 0, sizeof at);
                at.dtype = dts[d];
                hd_tensor *in[2] = {x, y}, *cx = NULL, *cy = NULL;
                if (d) {
                    CHECK(hd_op_run(ctx, HD_OP_CAST, &x, 1, &at, &cx) == HD_OK);
                    CHECK(hd_op_run(ctx, HD_OP_CAST, &y, 1, &at, &cy) == HD_OK);
                    in[0] = cx, in[1] = cy;
                }
                char what[64];
                snprintf(what, sizeof what, "vmath %s %s%s", hd_op_name(ops[k]),
                         hd_dtype_name(dts[d]), pass_names[pass]);
                int two = ops[k] == HD_OP_POW;
                CHECK_MSG(
                    check_body(ctx, what, two ? binary_body : unary_body, in, two ? 2 : 1, 1, &c),
                    "%s", what);
                hd_tensor_unref(cx);
                hd_tensor_unref(cy);
            }
        }
    }
    unsetenv("HODU_LLVM_AVX512");
    unsetenv("HODU_LLVM_VECTORS");
    hd_tensor_unref(x);
    hd_tensor_unref(y);
}

/* The vector math as a reduction's prologue, which the explicit vector code
 * of the reduction computes (sin and cos read their table there through a
 * vector of pointers): sum(f(x)) over rows of 300. */
static hd_status vm_red_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const op_case *c = ud;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.naxes = 1;
    at.axes[0] = -1;
    hd_tensor *f = NULL;
    hd_status st = c->op == HD_OP_POW ? op2(ctx, HD_OP_POW, in[0], in[0], &f)
                                      : op1(ctx, c->op, in[0], NULL, &f);
    if (!st) st = op1(ctx, HD_OP_SUM, f, &at, out);
    hd_tensor_unref(f);
    return st;
}

static void test_vmath_reductions(hd_ctx *ctx) {
    static const hd_op ops[] = {HD_OP_EXP,      HD_OP_LOG, HD_OP_TANH, HD_OP_SIGMOID, HD_OP_GELU,
                                HD_OP_SOFTPLUS, HD_OP_SIN, HD_OP_COS,  HD_OP_SILU,    HD_OP_POW};
    int64_t s[2] = {5, 300};
    hd_tensor *x = hd_tensor_new(ctx, HD_F32, s, 2);
    float *xv = x->storage->data;
    for (int64_t i = 0; i < x->numel; i++) /* moderate values, and huge ones for sin and cos */
        xv[i] = i % 7 == 3 ? (float)(i * 7919) * 1e5f : (float)((i * 37) % 201) * 0.05f - 5.0f;
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        op_case c;
        memset(&c, 0, sizeof c);
        c.op = ops[k];
        char what[64];
        snprintf(what, sizeof what, "sum(%s(x))", hd_op_name(ops[k]));
        hd_jit_stats st;
        CHECK_MSG(check_body_tol(ctx, what, vm_red_body, &x, 1, 1, &c, 1e-6, &st), "%s", what);
        CHECK_MSG(st.fallbacks == 0 && st.kernels == 1, "%s: %d kernels", what, st.kernels);
    }
    hd_tensor_unref(x);
}

/* ---- views and strided inputs ---- */

/* outputs that are an input, views of computed values, a slice of an
 * expanded exp */
static hd_status views_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    HD_UNUSED(ud);
    hd_attrs perm, sl, ex;
    memset(&perm, 0, sizeof perm);
    memset(&sl, 0, sizeof sl);
    memset(&ex, 0, sizeof ex);
    perm.nshape = 2;
    perm.shape[0] = 1;
    perm.shape[1] = 0;
    sl.start[0] = 1;
    sl.step[0] = 2;
    sl.len[0] = 2;
    sl.start[1] = 0;
    sl.step[1] = 3;
    sl.len[1] = 3;
    ex.nshape = 3;
    ex.shape[0] = 2;
    ex.shape[1] = -1;
    ex.shape[2] = -1;
    hd_tensor *e = NULL, *t = NULL, *s = NULL, *x = NULL;
    out[0] = hd_tensor_ref(in[0]);
    hd_status st = op1(ctx, HD_OP_EXP, in[0], NULL, &e);
    if (!st) st = op1(ctx, HD_OP_PERMUTE, e, &perm, &out[1]);
    if (!st) st = op1(ctx, HD_OP_SLICE, in[0], &sl, &s);
    if (!st) st = op1(ctx, HD_OP_EXPAND, s, &ex, &x);
    if (!st) st = op2(ctx, HD_OP_MUL, x, e, &t); /* [2, 2, 3] * [4, 7]: an error */
    if (st) {
        hd_error_clear(ctx);
        st = op2(ctx, HD_OP_ADD, x, s, &t);
    }
    if (!st) st = op1(ctx, HD_OP_TANH, t, NULL, &out[2]);
    if (!st)
        st = op1(ctx, HD_OP_PERMUTE, out[2], &(hd_attrs){.nshape = 3, .shape = {2, 0, 1}}, &out[3]);
    hd_tensor_unref(e);
    hd_tensor_unref(t);
    hd_tensor_unref(s);
    hd_tensor_unref(x);
    return st;
}

static void test_views(hd_ctx *ctx) {
    int64_t sx[2] = {4, 7}, st[2] = {7, 4};
    hd_tensor *x = make(ctx, HD_F32, sx, 2, 1.0);
    CHECK(check_body(ctx, "views", views_body, &x, 1, 4, NULL));
    /* a transposed (strided) input is copied into the executable's buffer */
    hd_tensor *base = make(ctx, HD_F32, st, 2, 0.5), *xt = NULL;
    hd_attrs perm;
    memset(&perm, 0, sizeof perm);
    perm.nshape = 2;
    perm.shape[0] = 1;
    CHECK(op1(ctx, HD_OP_PERMUTE, base, &perm, &xt) == HD_OK && !hd_tensor_is_contiguous(xt));
    CHECK(check_body(ctx, "views of a strided input", views_body, &xt, 1, 4, NULL));
    hd_tensor_unref(x);
    hd_tensor_unref(xt);
    hd_tensor_unref(base);
}

/* a + b over shapes that broadcast along every pattern */
static hd_status bcast_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    HD_UNUSED(ud);
    hd_tensor *t = NULL, *u = NULL;
    hd_status st = op2(ctx, HD_OP_MUL, in[0], in[1], &t);
    if (!st) st = op2(ctx, HD_OP_SUB, t, in[2], &u);
    if (!st) st = op1(ctx, HD_OP_EXP, u, NULL, &out[0]);
    if (!st) st = op2(ctx, HD_OP_MAXIMUM, in[0], in[2], &out[1]); /* another shape, same group */
    hd_tensor_unref(t);
    hd_tensor_unref(u);
    return st;
}

static void test_broadcast(hd_ctx *ctx) {
    int64_t a[][4] = {{3, 1, 5, 1}, {1, 1, 1, 1}, {2, 1, 1, 9}, {0, 3, 1, 2}};
    int64_t b[][4] = {{1, 4, 1, 6}, {7, 1, 33, 1}, {1, 5, 4, 1}, {1, 3, 5, 2}};
    int64_t c[][4] = {{1, 1, 1, 6}, {1, 1, 33, 1}, {2, 5, 4, 9}, {1, 1, 1, 1}};
    for (int i = 0; i < 4; i++)
        for (int d = 2; d < 4; d++) {
            hd_dtype dt = all_dtypes[d];
            hd_tensor *in[3] = {make(ctx, dt, a[i], 4, 1.0), make(ctx, dt, b[i], 4, 0.5),
                                make(ctx, dt, c[i], 4, 0.25)};
            char what[64];
            snprintf(what, sizeof what, "broadcast %s case %d", hd_dtype_name(dt), i);
            CHECK_MSG(check_body(ctx, what, bcast_body, in, 3, 2, NULL), "%s", what);
            for (int k = 0; k < 3; k++) hd_tensor_unref(in[k]);
        }
}

/* ---- reductions, softmax, layer_norm ---- */

typedef struct red_case {
    hd_op op;
    int naxes, keepdim, correction, prologue;
    int64_t axes[3];
} red_case;

/* op(exp(x) * 0.5 - x) over the axes, or op(x) */
static hd_status red_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const red_case *c = ud;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.naxes = c->naxes;
    at.keepdim = c->keepdim;
    at.ints[0] = c->correction;
    for (int i = 0; i < c->naxes; i++) at.axes[i] = c->axes[i];
    if (!c->prologue) return op1(ctx, c->op, in[0], &at, out);
    hd_tensor *half = hd_tensor_number(ctx, HD_F64, 0.5), *e = NULL, *m = NULL, *d = NULL;
    hd_status st =
        op1(ctx, hd_dtype_is_float(in[0]->dtype) ? HD_OP_EXP : HD_OP_ABS, in[0], NULL, &e);
    if (!st) st = op2(ctx, HD_OP_MUL, e, half, &m);
    if (!st) st = op2(ctx, HD_OP_SUB, m, in[0], &d);
    if (!st) st = op1(ctx, c->op, d, &at, out);
    hd_tensor_unref(half);
    hd_tensor_unref(e);
    hd_tensor_unref(m);
    hd_tensor_unref(d);
    return st;
}

static void test_reductions(hd_ctx *ctx) {
    static const hd_op ops[] = {HD_OP_SUM,  HD_OP_MEAN, HD_OP_MAX, HD_OP_MIN,
                                HD_OP_PROD, HD_OP_VAR,  HD_OP_STD, HD_OP_LOGSUMEXP};
    static const red_case shapes[] = {{0, 0, 0, 0, 0, {0}},
                                      {0, 1, 1, 0, 0, {-1}},
                                      {0, 1, 0, 1, 0, {0}},
                                      {0, 2, 1, 0, 0, {0, 2}},
                                      {0, 2, 0, 1, 0, {1, -1}}};
    int64_t sx[3] = {6, 5, 300}, sy[3] = {3, 1, 7};
    for (size_t o = 0; o < sizeof ops / sizeof *ops; o++)
        for (int d = 0; d < NDT; d++) {
            hd_dtype dt = all_dtypes[d];
            if (!hd_cpu_backend.supports_op(ops[o], dt)) continue;
            for (int sh = 0; sh < 5; sh++)
                for (int pro = 0; pro < 2; pro++) {
                    red_case c = shapes[sh];
                    c.op = ops[o];
                    c.prologue = pro && dt != HD_BOOL;
                    int big = sh == 1 && dt == HD_F32;
                    hd_tensor *x = make(ctx, dt, big ? sx : sy, 3, 0.3);
                    char what[80];
                    snprintf(what, sizeof what, "%s %s shape %d prologue %d", hd_op_name(ops[o]),
                             hd_dtype_name(dt), sh, c.prologue);
                    double tol = dt == HD_F64 ? 1e-13 : hd_dtype_is_float(dt) ? 2e-6 : 0;
                    if (dt == HD_F16 || dt == HD_BF16) tol = dt == HD_F16 ? 2e-3 : 1e-2;
                    hd_jit_stats st;
                    CHECK_MSG(check_body_tol(ctx, what, red_body, &x, 1, 1, &c, tol, &st), "%s",
                              what);
                    CHECK_MSG(st.fallbacks == 0, "%s: %d fallbacks", what, st.fallbacks);
                    hd_tensor_unref(x);
                }
        }
}

/* op(x, y) for mse, else red_body's op(exp(x) * 0.5 - x) over all of x */
static hd_status split_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const red_case *c = ud;
    if (c->op == HD_OP_MSE) return hd_op_run(ctx, HD_OP_MSE, in, 2, NULL, out);
    return red_body(ctx, in, out, ud);
}

/* Reductions to one element of 2^18 + 37 elements and more run in parts
 * on the context's threads (hd_llvm_gen.c): on 1, 2, 3 and 5 threads (parts
 * of uneven lengths), against eager; prod of values near 1; NaN in the
 * last part of a max and in the first part of a min sticks. */
static void test_split_reductions(hd_ctx *ctx) {
    static const hd_op ops[] = {HD_OP_SUM, HD_OP_MEAN, HD_OP_MAX, HD_OP_MIN, HD_OP_PROD, HD_OP_MSE};
    static const int threads[] = {1, 2, 3, 5};
    int64_t n = ((int64_t)1 << 18) + 37;
    hd_tensor *x = make(ctx, HD_F32, &n, 1, 0.3), *y = make(ctx, HD_F32, &n, 1, 0.2);
    hd_tensor *near1 = hd_tensor_new(ctx, HD_F32, &n, 1);
    for (int64_t i = 0; i < n; i++)
        ((float *)near1->storage->data)[i] = 1.0f + (float)((i % 7) - 3) * 1e-6f;
    int saved = ctx->nthreads;
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
        ctx->nthreads = threads[t];
        for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
            red_case c = {ops[o], 0, 0, 0, ops[o] != HD_OP_PROD && ops[o] != HD_OP_MSE, {0}};
            hd_tensor *in[2] = {ops[o] == HD_OP_PROD ? near1 : x, y};
            char what[64];
            snprintf(what, sizeof what, "split %s, %d threads", hd_op_name(ops[o]), threads[t]);
            CHECK_MSG(check_body_tol(ctx, what, split_body, in, ops[o] == HD_OP_MSE ? 2 : 1, 1, &c,
                                     2e-6, NULL),
                      "%s", what);
        }
        float *xd = x->storage->data;
        for (int k = 0; k < 2; k++) { /* NaN in the last part (max), the first (min) */
            int64_t at = k ? 5 : n - 3;
            float was = xd[at];
            xd[at] = NAN;
            red_case c = {k ? HD_OP_MIN : HD_OP_MAX, 0, 0, 0, 0, {0}};
            char what[64];
            snprintf(what, sizeof what, "split %s with NaN, %d threads", k ? "min" : "max",
                     threads[t]);
            CHECK_MSG(check_body_tol(ctx, what, split_body, &x, 1, 1, &c, 0, NULL), "%s", what);
            xd[at] = was;
        }
    }
    ctx->nthreads = saved;
    hd_tensor_unref(x);
    hd_tensor_unref(y);
    hd_tensor_unref(near1);
}

typedef struct nn_case {
    hd_op op;
    int64_t axis;
    int affine;
} nn_case;

static hd_status nn_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const nn_case *c = ud;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = c->axis;
    at.scalar[0] = 1e-5;
    hd_tensor *t = NULL;
    hd_status st = op1(ctx, HD_OP_SIN, in[0], NULL, &t); /* a producer in another kernel */
    if (!st)
        st = hd_op_run(ctx, c->op, (hd_tensor *[]){t, in[1], in[2]}, c->affine ? 3 : 1, &at, out);
    hd_tensor_unref(t);
    return st;
}

/* reductions over leading axes walk rows in order (tiles of columns):
 * several tiles, rows not a multiple of 4, split across threads */
static void test_vertical_reductions(hd_ctx *ctx) {
    static const hd_op ops[] = {HD_OP_SUM,  HD_OP_MEAN, HD_OP_MAX, HD_OP_MIN,
                                HD_OP_PROD, HD_OP_VAR,  HD_OP_STD, HD_OP_LOGSUMEXP};
    int64_t shapes[][3] = {{37, 40, 1}, {70, 1100, 1}, {6, 5, 300}, {3, 9, 1030}, {0, 40, 1}};
    int nd[] = {2, 2, 3, 3, 2};
    for (size_t o = 0; o < sizeof ops / sizeof *ops; o++)
        for (int sh = 0; sh < 5; sh++)
            for (int d = 2; d < 4; d++) {
                if (sh == 4 &&
                    (ops[o] == HD_OP_MAX || ops[o] == HD_OP_MIN || ops[o] == HD_OP_LOGSUMEXP))
                    continue; /* no value over an empty axis */
                red_case c;
                memset(&c, 0, sizeof c);
                c.op = ops[o];
                c.naxes = sh == 3 ? 2 : 1;
                c.axes[0] = 0;
                c.axes[1] = 1;
                c.keepdim = sh % 2;
                c.correction = 1;
                c.prologue = (sh + (int)o) % 2;
                hd_tensor *x = make(ctx, all_dtypes[d], shapes[sh], nd[sh], 0.3);
                char what[80];
                snprintf(what, sizeof what, "vertical %s %s shape %d", hd_op_name(ops[o]),
                         hd_dtype_name(all_dtypes[d]), sh);
                double tol = all_dtypes[d] == HD_F64 ? 1e-12 : 1e-5;
                CHECK_MSG(check_body_tol(ctx, what, red_body, &x, 1, 1, &c, tol, NULL), "%s", what);
                hd_tensor_unref(x);
            }
}

static void check_rows(hd_ctx *ctx, const nn_case *c, hd_dtype dt, const int64_t *sx, int nd) {
    int two = c->op == HD_OP_LAYER_NORM && c->axis == 2;
    const int64_t *sw = sx + nd - (two ? 2 : 1);
    hd_tensor *in[3] = {make(ctx, dt, sx, nd, 3.0), make(ctx, dt, sw, two ? 2 : 1, 1.0),
                        make(ctx, dt, sw, two ? 2 : 1, 0.5)};
    char what[80];
    snprintf(what, sizeof what, "%s %s [%lld, %lld, ...] axis %lld affine %d", hd_op_name(c->op),
             hd_dtype_name(dt), (long long)sx[0], (long long)sx[1], (long long)c->axis, c->affine);
    /* f64: 1e-12 as randgraph (sums in another order, and near-zero outputs
     * of layer_norm cancel) */
    double tol = dt == HD_F64 ? 1e-12 : dt == HD_F32 ? 1e-6 : dt == HD_F16 ? 2e-3 : 1e-2;
    hd_jit_stats st;
    CHECK_MSG(check_body_tol(ctx, what, nn_body, in, 3, 1, (void *)c, tol, &st), "%s", what);
    CHECK_MSG(st.fallbacks == 0, "%s: %d fallbacks", what, st.fallbacks);
    for (int k = 0; k < 3; k++) hd_tensor_unref(in[k]);
}

/* rows along the last axis (vector lanes within a row) and along leading
 * axes (a vector of rows at a time, the rest one by one) */
static void test_rows(hd_ctx *ctx) {
    static const nn_case cases[] = {{HD_OP_SOFTMAX, -1, 0},    {HD_OP_SOFTMAX, 0, 0},
                                    {HD_OP_SOFTMAX, 1, 0},     {HD_OP_LOG_SOFTMAX, 2, 0},
                                    {HD_OP_LOG_SOFTMAX, 1, 0}, {HD_OP_LAYER_NORM, 1, 0},
                                    {HD_OP_LAYER_NORM, 2, 1},  {HD_OP_LAYER_NORM, 1, 1}};
    int64_t sx[3] = {4, 6, 19}, sy[3] = {37, 70, 33};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int d = 0; d < 4; d++) {
            check_rows(ctx, &cases[i], all_dtypes[d], sx, 3);
            if (cases[i].axis < 2) check_rows(ctx, &cases[i], all_dtypes[d], sy, 2);
        }
}

/* ---- runtime nodes: fallbacks, matmul, callbacks, random draws ---- */

/* relu(x @ w1 + b1) @ w2 + b2 and its sum: matmul through the cpu kernel,
 * its epilogue generated */
static hd_status mlp_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    hd_tensor **p = ud, *h = NULL, *h2 = NULL, *h3 = NULL, *o = NULL;
    hd_status st = op2(ctx, HD_OP_MATMUL, in[0], p[0], &h);
    if (!st) st = op2(ctx, HD_OP_ADD, h, p[1], &h2);
    if (!st) st = op1(ctx, HD_OP_RELU, h2, NULL, &h3);
    if (!st) st = op2(ctx, HD_OP_MATMUL, h3, p[2], &o);
    if (!st) st = op2(ctx, HD_OP_ADD, o, p[3], &out[0]);
    if (!st) st = op1(ctx, HD_OP_SUM, out[0], NULL, &out[1]);
    hd_tensor_unref(h);
    hd_tensor_unref(h2);
    hd_tensor_unref(h3);
    hd_tensor_unref(o);
    return st;
}

static void mlp_params(hd_ctx *ctx, hd_tensor **p, int64_t d0, int64_t d1) {
    int64_t s1[2] = {d0, d1}, s2[1] = {d1}, s3[2] = {d1, 3}, s4[1] = {3};
    p[0] = make(ctx, HD_F32, s1, 2, 0.1);
    p[1] = make(ctx, HD_F32, s2, 1, 0.05);
    p[2] = make(ctx, HD_F32, s3, 2, 0.2);
    p[3] = make(ctx, HD_F32, s4, 1, 0.3);
}

static void test_mlp(hd_ctx *ctx) {
    hd_tensor *p[4];
    mlp_params(ctx, p, 64, 33);
    int64_t sx[2] = {5, 64};
    hd_tensor *x = make(ctx, HD_F32, sx, 2, 1.0);
    hd_jit_stats st;
    CHECK(check_body_tol(ctx, "mlp", mlp_body, &x, 1, 2, p, 0, &st));
    /* 2 matmuls, each with its bias (and relu) as its epilogue, and the sum */
    CHECK(st.fallbacks == 0 && st.consts == 4 && st.kernels == 3);
    CHECK(st.compile_seconds > 0 && st.llvm_seconds > 0 && st.llvm_seconds <= st.compile_seconds);
    hd_tensor_unref(x);
    for (int i = 0; i < 4; i++) hd_tensor_unref(p[i]);
}

/* A gemm's epilogue written over the product it reads (hd_plan.c,
 * epilogue_in_place): mode 0 is mlp_body; mode 1 reads the product
 * through a view too, (p + p^T) @ w2, where it may not; mode 2 stores a
 * value before the last one, t = relu(p + b) and u = t * 2, with
 * u @ w2 and t @ w3 the outputs. */
static const hd_attrs gemm_perm = {.nshape = 2, .shape = {1, 0}};

typedef struct inplace_case {
    int mode;
    hd_tensor **p; /* mlp_params */
} inplace_case;

static hd_status inplace_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const inplace_case *c = ud;
    if (c->mode == 0) return mlp_body(ctx, in, out, c->p);
    hd_tensor *h = NULL, *v = NULL, *t = NULL, *u = NULL, *two = hd_tensor_scalar(ctx, HD_F32, 2);
    hd_status st = two ? op2(ctx, HD_OP_MATMUL, in[0], c->p[0], &h) : ctx->status;
    if (c->mode == 1) {
        if (!st) st = op1(ctx, HD_OP_PERMUTE, h, &gemm_perm, &v);
        if (!st) st = op2(ctx, HD_OP_ADD, h, v, &t);
        if (!st) st = op2(ctx, HD_OP_MATMUL, t, c->p[2], &out[0]);
    } else {
        if (!st) st = op2(ctx, HD_OP_ADD, h, c->p[1], &v);
        if (!st) st = op1(ctx, HD_OP_RELU, v, NULL, &t);
        if (!st) st = op2(ctx, HD_OP_MUL, t, two, &u);
        if (!st) st = op2(ctx, HD_OP_MATMUL, u, c->p[2], &out[0]);
        if (!st) st = op2(ctx, HD_OP_MATMUL, t, c->p[2], &out[1]);
    }
    hd_tensor *ts[] = {h, v, t, u, two};
    for (int i = 0; i < 5; i++) hd_tensor_unref(ts[i]);
    return st;
}

static void test_gemm_in_place(hd_ctx *ctx) {
    hd_tensor *p[4];
    mlp_params(ctx, p, 33, 33);
    int64_t sx[2] = {37, 33};
    hd_tensor *x = make(ctx, HD_F32, sx, 2, 1.0);
    hd_jit_stats st;
    /* 37 x 33 f32 (4884 bytes, 4928 in the arena) for the product and
     * relu(p + b1) both, then 37 x 3 (444, 448) for the second product */
    inplace_case c = {0, p};
    CHECK(check_body_tol(ctx, "in place", inplace_body, &x, 1, 2, &c, 0, &st));
    CHECK_MSG(st.planned_bytes == 4928 + 448, "%zu bytes", st.planned_bytes);
    c.mode = 1; /* p^T is read: p + p^T (33 x 33) gets a buffer of its own */
    int64_t sq[2] = {33, 33};
    hd_tensor *xq = make(ctx, HD_F32, sq, 2, 1.0);
    CHECK(check_body_tol(ctx, "in place, a view read", inplace_body, &xq, 1, 1, &c, 0, &st));
    CHECK_MSG(st.planned_bytes == 2 * 4416, "%zu bytes", st.planned_bytes);
    hd_tensor_unref(xq);
    c.mode = 2;
    CHECK(check_body_tol(ctx, "in place, two stored", inplace_body, &x, 1, 2, &c, 0, &st));
    CHECK_MSG(st.planned_bytes == 2 * 4928, "%zu bytes", st.planned_bytes);
    hd_tensor_unref(x);
    for (int i = 0; i < 4; i++) hd_tensor_unref(p[i]);
}

/* ---- matmul through hd_llvm_rt_gemm ---- */

/* a @ b (+ bias, relu: the epilogue), a and b inputs (a constant b would
 * be laid out afresh by the passes). Layouts: b given as [n, k] and
 * permuted (a Linear layer's weight), a given as [k, m] and permuted, a
 * 1-D, b read with steps of 2 along both dims (no stride 1: BLAS cannot
 * read it). */
enum { GEMM_BT = 1, GEMM_AT = 2, GEMM_AVEC = 4, GEMM_BSTEP = 8, GEMM_EPI = 16 };

typedef struct gemm_case {
    int64_t m, k, n;
    int flags;
    hd_tensor *bias;
} gemm_case;

static hd_status gemm_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const gemm_case *c = ud;
    hd_attrs step;
    memset(&step, 0, sizeof step);
    for (int i = 0; i < 2; i++) {
        step.step[i] = 2;
        step.len[i] = i ? c->n : c->k;
    }
    hd_tensor *a = NULL, *b = NULL, *y = NULL, *yb = NULL;
    hd_status st = c->flags & GEMM_AT ? op1(ctx, HD_OP_PERMUTE, in[0], &gemm_perm, &a)
                                      : (a = hd_tensor_ref(in[0]), HD_OK);
    if (!st)
        st = c->flags & GEMM_BT      ? op1(ctx, HD_OP_PERMUTE, in[1], &gemm_perm, &b)
             : c->flags & GEMM_BSTEP ? op1(ctx, HD_OP_SLICE, in[1], &step, &b)
                                     : (b = hd_tensor_ref(in[1]), HD_OK);
    if (!st) st = op2(ctx, HD_OP_MATMUL, a, b, c->flags & GEMM_EPI ? &y : &out[0]);
    if (!st && (c->flags & GEMM_EPI)) st = op2(ctx, HD_OP_ADD, y, c->bias, &yb);
    if (!st && (c->flags & GEMM_EPI)) st = op1(ctx, HD_OP_RELU, yb, NULL, &out[0]);
    hd_tensor *ts[] = {a, b, y, yb};
    for (int i = 0; i < 4; i++) hd_tensor_unref(ts[i]);
    return st;
}

/* Element (i, kk) of the logical a and (kk, j) of b of case c, from the
 * stored x and b ([k, n], [n, k] or [2k, 2n]). */
static double gemm_a(const gemm_case *c, const hd_tensor *x, int64_t i, int64_t kk) {
    return hd_tensor_get(x, c->flags & GEMM_AT ? kk * c->m + i : i * c->k + kk);
}
static double gemm_b(const gemm_case *c, const hd_tensor *b, int64_t kk, int64_t j) {
    if (c->flags & GEMM_BT) return hd_tensor_get(b, j * c->k + kk);
    if (c->flags & GEMM_BSTEP) return hd_tensor_get(b, 2 * kk * 2 * c->n + 2 * j);
    return hd_tensor_get(b, kk * c->n + j);
}

/* Does v lie within 1e-5 (sum |a b| + |bias|) of ref, the bound of f32
 * sums in any order? */
static int gemm_near(double v, double ref, double mag) {
    return fabs(v - ref) <= 1e-5 * mag + 1e-30;
}

/* y (llvm) and want (eager) against plain f64 loops, and against each
 * other, to that bound. */
static int gemm_agrees(const gemm_case *c, hd_tensor *const *in, const hd_tensor *y,
                       const hd_tensor *want, char *why, size_t nwhy) {
    for (int64_t i = 0; i < c->m; i++)
        for (int64_t j = 0; j < c->n; j++) {
            double ref = 0, mag = 0;
            for (int64_t kk = 0; kk < c->k; kk++) {
                double p = gemm_a(c, in[0], i, kk) * gemm_b(c, in[1], kk, j);
                ref += p;
                mag += fabs(p);
            }
            if (c->flags & GEMM_EPI) {
                double bj = hd_tensor_get(c->bias, j);
                ref = ref + bj > 0 ? ref + bj : 0;
                mag += fabs(bj);
            }
            double got = hd_tensor_get(y, i * c->n + j), eager = hd_tensor_get(want, i * c->n + j);
            /* few rows: eager and llvm run the same loops (cpu_rows.c) */
            if (!gemm_near(got, ref, mag) || !gemm_near(eager, ref, mag) ||
                !gemm_near(got, eager, mag) || (c->m <= 4 && got != eager)) {
                snprintf(why, nwhy, "[%lld, %lld]: llvm %.9g, eager %.9g, f64 loops %.9g",
                         (long long)i, (long long)j, got, eager, ref);
                return 0;
            }
        }
    return 1;
}

/* Compile and run case c; compare with the f64 loops and with eager. */
static int gemm_check(hd_ctx *ctx, gemm_case *c, hd_jit_stats *stats) {
    int64_t sx[2] = {c->flags & GEMM_AT ? c->k : c->m, c->flags & GEMM_AT ? c->m : c->k};
    int64_t sb[2] = {c->flags & GEMM_BT ? c->n : c->k, c->flags & GEMM_BT ? c->k : c->n};
    if (c->flags & GEMM_BSTEP) sb[0] *= 2, sb[1] *= 2;
    int64_t sbias[1] = {c->n};
    hd_tensor *in[2] = {
        make(ctx, HD_F32, c->flags & GEMM_AVEC ? sx + 1 : sx, c->flags & GEMM_AVEC ? 1 : 2, 1.0),
        make(ctx, HD_F32, sb, 2, 0.37)};
    c->bias = make(ctx, HD_F32, sbias, 1, 0.11);
    char why[160] = "";
    hd_tensor *want = NULL, *got = NULL;
    hd_ir_graph *g = trace_body(ctx, "body", gemm_body, in, 2, 1, c);
    hd_jit_exec *e = NULL;
    int ok =
        g && LL->compile(ctx, g, NULL, &e) == HD_OK && LL->run(ctx, e, in, 2, &got, 1) == HD_OK;
    if (!ok) snprintf(why, sizeof why, "%s", hd_error_message(ctx));
    ok = ok && gemm_body(ctx, in, &want, c) == HD_OK;
    ok = ok && gemm_agrees(c, in, got, want, why, sizeof why);
    if (!ok)
        fprintf(stderr, "gemm m %lld k %lld n %lld flags %d: %s\n", (long long)c->m,
                (long long)c->k, (long long)c->n, c->flags, why);
    if (e && stats) LL->stats(e, stats);
    if (e) LL->free(ctx, e);
    hd_ir_graph_free(g);
    hd_error_clear(ctx);
    hd_tensor *ts[] = {in[0], in[1], c->bias, want, got};
    for (int i = 0; i < 5; i++) hd_tensor_unref(ts[i]);
    return ok;
}

/* few rows (own vector loops) and more (sgemm) over odd sizes around the
 * vector width and the column blocks, both layouts of b, the epilogue */
static void test_gemm_shapes(hd_ctx *ctx) {
    static const int64_t ms[] = {1, 2, 3, 4, 5}, ks[] = {1, 3, 7, 8, 257},
                         ns[] = {1, 3, 7, 9, 65, 257};
    for (int f = 0; f < 2; f++)
        for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
            for (size_t b = 0; b < sizeof ks / sizeof *ks; b++)
                for (size_t d = 0; d < sizeof ns / sizeof *ns; d++) {
                    gemm_case c = {ms[a], ks[b], ns[d], GEMM_EPI | (f ? GEMM_BT : 0), 0};
                    hd_jit_stats st;
                    CHECK(gemm_check(ctx, &c, &st));
                    CHECK(st.kernels == 1); /* the bias and relu run as the epilogue */
                }
}

/* the other layouts, no epilogue, an empty sum, threads (2, and 3 on
 * uneven parts; parts of columns, and of rows when C is tall and narrow),
 * and a product BLAS cannot read (the cpu kernel runs) */
static void test_gemm_cases(hd_ctx *ctx) {
    static const gemm_case cases[] = {{3, 9, 70, GEMM_AT | GEMM_EPI, 0},
                                      {2, 16, 5, GEMM_AT | GEMM_BT, 0},
                                      {1, 33, 70, GEMM_AVEC | GEMM_EPI, 0},
                                      {1, 33, 70, GEMM_AVEC | GEMM_BT, 0},
                                      {2, 7, 9, GEMM_BSTEP | GEMM_EPI, 0},
                                      {6, 7, 9, GEMM_BSTEP | GEMM_EPI, 0},
                                      {9, 70, 33, 0, 0},
                                      {2, 0, 5, GEMM_EPI, 0},
                                      {7, 0, 5, GEMM_EPI, 0},
                                      {1, 1024, 1030, GEMM_EPI, 0},
                                      {3, 512, 700, GEMM_EPI | GEMM_BT, 0},
                                      {37, 300, 290, GEMM_EPI, 0},
                                      {64, 130, 257, GEMM_EPI | GEMM_BT, 0},
                                      /* m > n, n < 32: split by rows */
                                      {600, 70, 30, GEMM_EPI, 0},
                                      {530, 80, 25, GEMM_AT | GEMM_EPI, 0},
                                      {520, 90, 24, GEMM_BT, 0}};
    int saved = ctx->nthreads;
    for (int nt = 1; nt <= 3; nt++) {
        ctx->nthreads = nt;
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            gemm_case c = cases[i];
            CHECK_MSG(gemm_check(ctx, &c, NULL), "case %zu, %d threads", i, nt);
        }
    }
    ctx->nthreads = saved;
}

/* ops the cpu kernels run inside the native function: concat, argmax,
 * cross_entropy, index_select, one_hot, between generated kernels */
static hd_status fallback_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    HD_UNUSED(ud);
    hd_attrs ax;
    memset(&ax, 0, sizeof ax);
    ax.naxes = 1;
    ax.axes[0] = 1;
    ax.ints[0] = 1; /* concat's axis */
    hd_tensor *e = NULL, *c = NULL, *am = NULL, *t = NULL;
    hd_status st = op1(ctx, HD_OP_EXP, in[0], NULL, &e);
    if (!st) st = hd_op_run(ctx, HD_OP_CONCAT, (hd_tensor *[]){e, in[0]}, 2, &ax, &c);
    if (!st) st = op1(ctx, HD_OP_TANH, c, NULL, &t);
    if (!st) st = op1(ctx, HD_OP_ARGMAX, t, &ax, &am);
    if (!st) st = op2(ctx, HD_OP_CROSS_ENTROPY, t, in[1], &out[0]);
    if (!st) st = op2(ctx, HD_OP_ADD, am, in[1], &out[1]);
    hd_tensor_unref(e);
    hd_tensor_unref(c);
    hd_tensor_unref(am);
    hd_tensor_unref(t);
    return st;
}

static void test_fallbacks(hd_ctx *ctx) {
    int64_t sx[2] = {4, 5}, sl[1] = {4};
    hd_tensor *in[2] = {make(ctx, HD_F32, sx, 2, 0.7), hd_tensor_new(ctx, HD_I64, sl, 1)};
    for (int i = 0; i < 4; i++) ((int64_t *)in[1]->storage->data)[i] = (i * 3) % 10;
    hd_jit_stats st;
    CHECK(check_body_tol(ctx, "fallbacks", fallback_body, in, 2, 2, NULL, 0, &st));
    CHECK(st.fallbacks == 2); /* concat, cross_entropy (argmax is generated) */
    /* a runtime node's error comes back as the run's error, nothing leaks */
    hd_ir_graph *g = trace_body(ctx, "body", fallback_body, in, 2, 2, NULL);
    hd_jit_exec *e = NULL;
    hd_tensor *out[2] = {0};
    CHECK(g && LL->compile(ctx, g, NULL, &e) == HD_OK);
    ((int64_t *)in[1]->storage->data)[2] = 99;
    CHECK(e && LL->run(ctx, e, in, 2, out, 2) == HD_ERR_RUNTIME && !out[0] && !out[1]);
    CHECK(strstr(hd_error_message(ctx), "label 99") != NULL);
    ((int64_t *)in[1]->storage->data)[2] = 1;
    CHECK(e && LL->run(ctx, e, in, 2, out, 2) == HD_OK && out[0] && out[1]);
    hd_tensor_unref(out[0]);
    hd_tensor_unref(out[1]);
    if (e) LL->free(ctx, e);
    hd_ir_graph_free(g);
    hd_tensor_unref(in[0]);
    hd_tensor_unref(in[1]);
}

static double seen[16];
static int nseen;
static hd_status record_cb(hd_ctx *ctx, void *ud, hd_tensor *const *args, int nargs) {
    HD_UNUSED(ctx);
    HD_UNUSED(ud);
    if (nargs == 1 && nseen < 16) seen[nseen++] = hd_tensor_get(args[0], 1);
    return HD_OK;
}

/* print inside compiled code sees each run's values; random draws follow
 * eager's order and advance at every run */
static void test_callbacks_and_random(hd_ctx *ctx) {
    int64_t s[1] = {3};
    hd_tensor *x = make(ctx, HD_F32, s, 1, 1.0), *y = NULL, *z = NULL, *r = NULL, *out[2] = {0};
    hd_ir_graph *g = NULL;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.dtype = HD_F32;
    at.nshape = 1;
    at.shape[0] = 3;
    at.scalar[1] = 1.0;
    CHECK(hd_trace_begin(ctx, "p") == HD_OK);
    hd_tensor *sx = hd_trace_input(ctx, "x", HD_F32, s, 1);
    CHECK(op1(ctx, HD_OP_NEG, sx, NULL, &y) == HD_OK);
    hd_ir_callback cb = {"print", record_cb, NULL, NULL, NULL};
    CHECK(hd_trace_callback(ctx, &cb, &y, 1) == HD_OK);
    CHECK(hd_op_run(ctx, HD_OP_RANDN, NULL, 0, &at, &r) == HD_OK);
    CHECK(op2(ctx, HD_OP_MUL, r, y, &z) == HD_OK);
    CHECK(hd_trace_output(ctx, "z", z) == HD_OK && hd_trace_output(ctx, "y", y) == HD_OK);
    CHECK(hd_trace_end(ctx, &g) == HD_OK);
    hd_jit_exec *e = NULL;
    CHECK(LL->compile(ctx, g, NULL, &e) == HD_OK);
    nseen = 0;
    ctx->rng_offset = 0;
    hd_tensor *want = NULL, *neg = NULL, *rr = NULL;
    CHECK(op1(ctx, HD_OP_NEG, x, NULL, &neg) == HD_OK);
    CHECK(hd_op_run(ctx, HD_OP_RANDN, NULL, 0, &at, &rr) == HD_OK);
    CHECK(op2(ctx, HD_OP_MUL, rr, neg, &want) == HD_OK);
    ctx->rng_offset = 0;
    CHECK(LL->run(ctx, e, &x, 1, out, 2) == HD_OK);
    char why[128];
    CHECK(out[0] && agree(want, out[0], 0, why, sizeof why));
    hd_tensor_unref(out[0]);
    hd_tensor_unref(out[1]);
    ((float *)x->storage->data)[1] = 7.0f;
    CHECK(LL->run(ctx, e, &x, 1, out, 2) == HD_OK);
    CHECK(out[0] && !agree(want, out[0], 0, why, sizeof why)); /* a new draw */
    CHECK(nseen == 2 && seen[1] == -7.0);
    hd_tensor_unref(out[0]);
    hd_tensor_unref(out[1]);
    LL->free(ctx, e);
    hd_ir_graph_free(g);
    hd_tensor *ts[] = {x, y, z, r, sx, want, neg, rr};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) hd_tensor_unref(ts[i]);
}

/* zero-size values run nothing but keep their shapes; a reduction over an
 * empty axis still writes its identity */
static hd_status empty_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    HD_UNUSED(ud);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.naxes = 1;
    hd_tensor *a = NULL;
    hd_status st = op1(ctx, HD_OP_EXP, in[0], NULL, &a);
    if (!st) st = op1(ctx, HD_OP_SUM, a, &at, &out[0]);
    if (!st) st = op2(ctx, HD_OP_ADD, a, in[0], &out[1]);
    if (!st) st = op1(ctx, HD_OP_MEAN, a, &at, &out[2]);
    hd_tensor_unref(a);
    return st;
}

static void test_empty(hd_ctx *ctx) {
    int64_t s[2] = {0, 3};
    hd_tensor *x = hd_tensor_zeros(ctx, HD_F32, s, 2);
    CHECK(check_body(ctx, "empty", empty_body, &x, 1, 3, NULL));
    hd_tensor_unref(x);
}

static void test_alloc_failures(hd_ctx *ctx) {
    hd_tensor *p[4];
    mlp_params(ctx, p, 6, 5);
    int64_t sx[2] = {3, 6};
    hd_tensor *x = make(ctx, HD_F32, sx, 2, 1.0);
    hd_ir_graph *g = trace_body(ctx, "body", mlp_body, &x, 1, 2, p);
    int ok_at = -1;
    for (long k = 0; k < 400 && ok_at < 0; k++) {
        size_t before = ctx->mem_used;
        hd_jit_exec *e = NULL;
        hd_tensor *out[2] = {0};
        ctx->fail_countdown = k;
        hd_status st = LL->compile(ctx, g, NULL, &e);
        if (!st) st = LL->run(ctx, e, &x, 1, out, 2);
        ctx->fail_countdown = -1;
        if (!st) ok_at = (int)k;
        if (e) LL->free(ctx, e);
        hd_tensor_unref(out[0]);
        hd_tensor_unref(out[1]);
        CHECK_MSG(ctx->mem_used == before, "leak after failing allocation %ld", k);
        CHECK(st == HD_OK || st == HD_ERR_MEMORY);
        hd_error_clear(ctx);
    }
    CHECK(ok_at > 10);
    hd_ir_graph_free(g);
    hd_tensor_unref(x);
    for (int i = 0; i < 4; i++) hd_tensor_unref(p[i]);
}

/* ---- the disk cache ---- */

static hd_ir_graph *cache_graph(hd_ctx *ctx, hd_tensor **in) {
    int64_t s[1] = {1000};
    in[0] = make(ctx, HD_F32, s, 1, 1.0);
    in[1] = make(ctx, HD_F32, s, 1, 0.5);
    return trace_body(ctx, "body", chain_body, in, 2, 1, NULL);
}

/* Compile the cache graph; 1 if it came from the cache, 0 if compiled, -1
 * on an error or a wrong result. */
static int cache_compile(hd_ctx *ctx) {
    hd_tensor *in[2], *want = NULL, *got = NULL;
    hd_ir_graph *g = cache_graph(ctx, in);
    hd_jit_exec *e = NULL;
    hd_jit_stats st;
    int r = -1;
    char why[128];
    if (g && LL->compile(ctx, g, NULL, &e) == HD_OK && LL->run(ctx, e, in, 2, &got, 1) == HD_OK &&
        chain_body(ctx, in, &want, NULL) == HD_OK && agree(want, got, 0, why, sizeof why)) {
        LL->stats(e, &st);
        r = st.cache_hit;
    }
    if (e) LL->free(ctx, e);
    hd_ir_graph_free(g);
    hd_tensor *ts[] = {in[0], in[1], want, got};
    for (int i = 0; i < 4; i++) hd_tensor_unref(ts[i]);
    return r;
}

/* The one entry in dir, into path; 0 if there is not exactly one. */
static int cache_entry(const char *dir, char *path, size_t n) {
    DIR *d = opendir(dir);
    int count = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        if (!strncmp(de->d_name, "llvm-", 5) && strstr(de->d_name, ".o")) {
            snprintf(path, n, "%s/%s", dir, de->d_name);
            count++;
        }
    if (d) closedir(d);
    return count == 1;
}

static int run_child(const char *dir) {
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_llvm", "--cache-child", dir, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void damage(const char *path, long at, int truncate_to) {
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    if (truncate_to >= 0) {
        CHECK(ftruncate(fileno(f), truncate_to) == 0);
    } else {
        fseek(f, at, SEEK_SET);
        int c = fgetc(f);
        fseek(f, at, SEEK_SET);
        fputc(c ^ 0x5a, f);
    }
    fclose(f);
}

/* The machine code reaches its constants and the runtime through 64-bit
 * absolute addresses only (R_X86_64_64): the JIT maps a module's code and
 * read-only data apart, anywhere, so a 32-bit pc-relative reference (the
 * small code model's) breaks once they land 2 GiB apart. Checked on the
 * cache entry's object file, every section, every relocation. */
static void check_relocations(const char *path) {
    FILE *f = fopen(path, "rb");
    static char buf[1 << 20];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    size_t at = 0;
    while (at + 4 <= n && memcmp(buf + at,
                                 "\x7f"
                                 "ELF",
                                 4))
        at++;
    CHECK(at + 64 <= n);
    if (at + 64 > n) return;
    LLVMMemoryBufferRef mb =
        LLVMCreateMemoryBufferWithMemoryRangeCopy(buf + at, n - at, "cache entry");
    char *err = NULL;
    LLVMContextRef c = LLVMContextCreate();
    LLVMBinaryRef bin = LLVMCreateBinary(mb, c, &err);
    CHECK(bin != NULL);
    int relocs = 0, bad = 0;
    LLVMSectionIteratorRef sec = bin ? LLVMObjectFileCopySectionIterator(bin) : NULL;
    for (; sec && !LLVMObjectFileIsSectionIteratorAtEnd(bin, sec); LLVMMoveToNextSection(sec)) {
        LLVMRelocationIteratorRef r = LLVMGetRelocations(sec);
        for (; !LLVMIsRelocationIteratorAtEnd(sec, r); LLVMMoveToNextRelocation(r)) {
            relocs++;
            if (LLVMGetRelocationType(r) != 1 /* R_X86_64_64 */) {
                const char *name = LLVMGetRelocationTypeName(r); /* ours to free */
                fprintf(stderr, "  relocation %s in section %s\n", name, LLVMGetSectionName(sec));
                free((void *)name);
                bad++;
            }
        }
        LLVMDisposeRelocationIterator(r);
    }
    if (sec) LLVMDisposeSectionIterator(sec);
    CHECK(relocs > 0 && bad == 0);
    if (bin) LLVMDisposeBinary(bin);
    LLVMDisposeMessage(err);
    LLVMDisposeMemoryBuffer(mb);
    LLVMContextDispose(c);
}

static void test_cache(hd_ctx *ctx) {
    char dir[] = "/tmp/hodu-llvm-cache-XXXXXX", path[2048];
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    char sub[1100];
    snprintf(sub, sizeof sub, "%s/nested/dir", dir);
    setenv("HODU_CACHE_DIR", sub, 1);
    CHECK(cache_compile(ctx) == 0); /* cold: compiled and stored */
    CHECK(cache_entry(sub, path, sizeof path));
#if defined(__x86_64__)
    check_relocations(path);
#endif
    CHECK(run_child(sub) == 0); /* another process: a hit */
    CHECK(cache_compile(ctx) == 1);
    damage(path, 200, -1);          /* a flipped byte in the object */
    CHECK(cache_compile(ctx) == 0); /* detected, compiled again */
    CHECK(cache_compile(ctx) == 1); /* and stored again */
    damage(path, 0, 30);            /* cut inside the header */
    CHECK(cache_compile(ctx) == 0 && cache_compile(ctx) == 1);
    damage(path, 3, -1); /* the magic */
    CHECK(cache_compile(ctx) == 0 && cache_compile(ctx) == 1);
    struct stat sb;
    CHECK(stat(path, &sb) == 0);
    damage(path, 0, (int)sb.st_size - 1); /* one byte short */
    CHECK(run_child(sub) == 1);           /* the child rebuilds it */
    CHECK(cache_compile(ctx) == 1);
    setenv("HODU_CACHE_DIR", "off", 1);
    CHECK(cache_compile(ctx) == 0);
    unlink(path);
    char d1[1100];
    rmdir(sub);
    snprintf(d1, sizeof d1, "%s/nested", dir);
    rmdir(d1);
    rmdir(dir);
}

/* ---- code and constants mapped far apart ----
 *
 * LLJIT's memory manager maps a module's code and its read-only data one
 * after the other with mmap(NULL): the first lands in the highest hole of
 * the address space. Here the only hole above a 3 GiB reservation is one
 * page inside its top, so one section goes there and the next below the
 * reservation, over 3 GiB away. The chain (its polynomials' constants in
 * the constant pool) must still compute eager's bits. In a child process,
 * whose address space this disturbs. */
#if defined(__linux__) && defined(__x86_64__)
static int far_apart_child(void) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), big = (size_t)3 << 30;
    char *r =
        mmap(NULL, big + 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return 2;
    for (int i = 0; i < (1 << 16); i++) { /* fill every hole above r */
        char *p = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return 2;
        if (p < r) {
            munmap(p, page);
            break;
        }
    }
    if (munmap(r + big, page)) return 2; /* the one hole */
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    setenv("HODU_CACHE_DIR", "off", 1);
    return cache_compile(&ctx) == 0 ? 0 : 1;
}

static void test_far_apart(void) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(far_apart_child());
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
#else
static void test_far_apart(void) {}
#endif

/* ---- HODU_LOG ---- */

/* HODU_LOG=fallback,llvm,cache writes to stderr: captured here. */
static void test_log(hd_ctx *ctx) {
    char tmp[] = "/tmp/hodu-llvm-log-XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0) return;
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    setenv("HODU_LOG", "fallback,llvm", 1);
    int64_t sx[2] = {4, 5}, sl[1] = {4};
    hd_tensor *in[2] = {make(ctx, HD_F32, sx, 2, 0.7), hd_tensor_zeros(ctx, HD_I64, sl, 1)};
    CHECK(check_body(ctx, "log", fallback_body, in, 2, 2, NULL));
    unsetenv("HODU_LOG");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char buf[1 << 16];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    CHECK(strstr(buf, "llvm: fallback: %") && strstr(buf, "= concat"));
    CHECK(strstr(buf, "define internal void @hd_k0_body") && strstr(buf, "define i32 @hd_main"));
    close(fd);
    unlink(tmp);
    hd_tensor_unref(in[0]);
    hd_tensor_unref(in[1]);
}

static void test_lookup(hd_ctx *ctx) {
    const hd_jit_compiler *c = NULL;
    CHECK(hd_jit_compiler_find(ctx, "llvm", &c) == HD_OK && c == LL);
    hd_jit_options o;
    hd_jit_options_init(&o);
    CHECK(LL->available(ctx, &o) == HD_OK);
    o.device = "cuda:0";
    CHECK(LL->available(ctx, &o) != HD_OK);
    CHECK(strstr(hd_error_message(ctx), "cuda") != NULL);
    int64_t s[1] = {3};
    hd_tensor *x = make(ctx, HD_F32, s, 1, 1.0);
    hd_ir_graph *g = trace_body(ctx, "body", chain_body, (hd_tensor *[]){x, x}, 2, 1, NULL);
    hd_jit_exec *e = NULL;
    CHECK(g && LL->compile(ctx, g, &o, &e) != HD_OK && !e);
    hd_error_clear(ctx);
    hd_ir_graph_free(g);
    hd_tensor_unref(x);
}

int main(int argc, char **argv) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    if (argc == 3 && !strcmp(argv[1], "--cache-child")) {
        setenv("HODU_CACHE_DIR", argv[2], 1);
        return cache_compile(&ctx) == 1 ? 0 : 1;
    }
    setenv("HODU_CACHE_DIR", "off", 1);
    test_lookup(&ctx);
    test_unary_ops(&ctx);
    test_binary_ops(&ctx);
    test_casts_and_where(&ctx);
    test_chain(&ctx);
    test_grad_ew(&ctx);
    test_softmax_bwd(&ctx);
    test_argmax(&ctx);
    test_mse(&ctx);
    test_layer_norm_bwd(&ctx);
    test_vmath_sweep(&ctx);
    test_vmath_reductions(&ctx);
    test_views(&ctx);
    test_broadcast(&ctx);
    test_reductions(&ctx);
    test_vertical_reductions(&ctx);
    test_rows(&ctx);
    test_mlp(&ctx);
    test_gemm_in_place(&ctx);
    test_split_reductions(&ctx);
    test_gemm_shapes(&ctx);
    test_gemm_cases(&ctx);
    test_fallbacks(&ctx);
    test_callbacks_and_random(&ctx);
    test_empty(&ctx);
    test_alloc_failures(&ctx);
    test_cache(&ctx);
    test_far_apart();
    test_log(&ctx);
    CHECK(ctx.mem_used == 0);
    TEST_END();
}

#endif /* HODU_HAVE_LLVM */
