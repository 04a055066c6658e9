/* The llvm compiler against eager mode (and interp): every elementwise op
 * and dtype (bit for bit where the eager kernel's arithmetic is the same,
 * which is everywhere but f16/bf16 chains), odd and zero sizes, broadcast
 * and strided inputs, fused chains, the vector math, the ops that fall
 * back to the runtime's kernels, errors from runtime nodes, allocation
 * failures, and the disk cache (a hit in a second process, a damaged entry
 * rebuilt). Reductions, softmax / log_softmax / layer_norm and argmax are
 * test_llvm_reduce.c's, matmul test_llvm_gemm.c's (hd_test_llvm.h: what
 * the three share).
 *
 * test_llvm --cache-child DIR   compiles the cache test's graph with
 * HODU_CACHE_DIR=DIR and exits 0 if the machine code came from the cache. */
#include "hd_compile.h"
#include "hd_test.h"
#include "hd_test_trace.h"
#include "hd_trace.h"
#include "hd_test_llvm.h"

#if !HODU_HAVE_LLVM

HD_TEST_LLVM_MISSING_MAIN()

#else

#include <dirent.h>
#include <llvm-c/Core.h>
#include <llvm-c/Object.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- every elementwise op and dtype ---- */

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
    static const hd_op ops[] = {HD_OP_EXP,      HD_OP_LOG,  HD_OP_TANH, HD_OP_SIGMOID,
                                HD_OP_SILU,     HD_OP_GELU, HD_OP_ERF,  HD_OP_ERFC,
                                HD_OP_SOFTPLUS, HD_OP_SIN,  HD_OP_COS,  HD_OP_POW};
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

/* ---- runtime nodes: fallbacks, callbacks, random draws ---- */

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
    hd_ir_graph *g = trace_body(ctx, "body", mlp2_body, &x, 1, 2, p);
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
    test_vmath_sweep(&ctx);
    test_views(&ctx);
    test_broadcast(&ctx);
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
