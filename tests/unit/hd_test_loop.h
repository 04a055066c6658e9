/* Loop graphs built by hand with hd_ir_*, and checks that run them with a
 * compiler against the same graph unrolled by hand and against closed
 * forms (tests/unit/test_loop.c for interp and llvm, test_cuda_loop.c for
 * cuda). The body of most: x' = x * 0.5 + w (x carried, w invariant),
 * y = sum(x'), so that after T trips x = 0.5^T x0 + 2 w (1 - 0.5^T). */
#ifndef HD_TEST_LOOP_H
#define HD_TEST_LOOP_H

#include "hd_compile.h"
#include "hd_test.h"

#include <time.h>

#define LT_N 4
static const float lt_x0[LT_N] = {1.0f, 2.0f, 3.0f, 4.0f};
static const float lt_w[LT_N] = {0.5f, -1.0f, 0.25f, 2.0f};

/* Where a compiler runs: inputs are moved to be:dev (be NULL: the cpu),
 * outputs are read back. */
typedef struct lt_env {
    hd_ctx *ctx;
    const hd_jit_compiler *c;
    hd_jit_options opt;
    const hd_backend *be;
    int dev;
    int unroll_max; /* unrolled graphs of more trips are not compiled (llvm: slow) */
} lt_env;

static hd_tensor *lt_vec(hd_ctx *ctx, const float *v, int64_t n) {
    hd_tensor *t = hd_tensor_new(ctx, HD_F32, &n, 1);
    for (int64_t i = 0; t && i < n; i++) hd_dtype_store(HD_F32, t->storage->data, i, v[i]);
    return t;
}

static int lt_scalar_const(hd_ir_graph *g, double v) {
    hd_tensor *t = hd_tensor_new(g->ctx, HD_F32, NULL, 0);
    if (!t) return -1;
    hd_dtype_store(HD_F32, t->storage->data, 0, v);
    int c = hd_ir_add_const(g, t);
    hd_tensor_unref(t);
    return c;
}

static int lt_bin(hd_ir_graph *g, hd_op op, int a, int b) {
    int in[2] = {a, b};
    return hd_ir_add_node(g, op, in, 2, NULL);
}

static int lt_sum(hd_ir_graph *g, int x) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    return hd_ir_add_node(g, HD_OP_SUM, &x, 1, &at);
}

/* One step on g's values x, w: returns x', *y = sum(x'). */
static int lt_step(hd_ir_graph *g, int x, int w, int *y) {
    int half = lt_scalar_const(g, 0.5);
    int xn = lt_bin(g, HD_OP_ADD, lt_bin(g, HD_OP_MUL, x, half), w);
    *y = lt_sum(g, xn);
    return xn;
}

/* The body: inputs x, w; outputs "x" = x', "y" = sum(x') (and "z" = x'^2,
 * read by nothing, with extra). */
static hd_ir_graph *lt_body(hd_ctx *ctx, int extra) {
    hd_ir_graph *b = hd_ir_graph_new(ctx, "body");
    int64_t n = LT_N;
    int x = hd_ir_add_input(b, "x", HD_F32, &n, 1), w = hd_ir_add_input(b, "w", HD_F32, &n, 1);
    int y, xn = lt_step(b, x, w, &y);
    CHECK(hd_ir_add_output(b, "x", xn) == HD_OK && hd_ir_add_output(b, "y", y) == HD_OK);
    if (extra) CHECK(hd_ir_add_output(b, "z", lt_bin(b, HD_OP_MUL, xn, xn)) == HD_OK);
    return b;
}

/* Graph inputs x0, w; outputs "x" and "y" after `trips` steps, as a loop
 * node (body_of(ctx) its body) or unrolled. */
static hd_ir_graph *lt_graph(hd_ctx *ctx, int64_t trips, int unrolled) {
    hd_ir_graph *g = hd_ir_graph_new(ctx, unrolled ? "unrolled" : "looped");
    int64_t n = LT_N;
    int x = hd_ir_add_input(g, "x0", HD_F32, &n, 1), w = hd_ir_add_input(g, "w", HD_F32, &n, 1);
    int y = -1;
    if (unrolled) {
        for (int64_t t = 0; t < trips; t++) x = lt_step(g, x, w, &y);
    } else {
        int in[2] = {x, w}, src = 0;
        int l = hd_ir_add_loop(g, lt_body(ctx, 0), trips, in, 2, 1, &src);
        x = hd_ir_add_loop_out(g, l, 0);
        y = hd_ir_add_loop_out(g, l, 1);
    }
    CHECK(hd_ir_add_output(g, "x", x) == HD_OK && hd_ir_add_output(g, "y", y) == HD_OK);
    return g;
}

/* Compile g and run it on cpu tensors in[]; out[] are cpu tensors. */
static int lt_run(lt_env *v, const hd_ir_graph *g, hd_tensor *const *in, int nin, hd_tensor **out,
                  int nout, hd_jit_stats *stats) {
    hd_ctx *ctx = v->ctx;
    hd_tensor *din[8] = {0}, *dout[8] = {0};
    hd_jit_exec *e = NULL;
    int ok = 1;
    for (int i = 0; i < nin && ok; i++)
        ok = v->be ? hd_tensor_to_device(ctx, in[i], v->be, v->dev, &din[i]) == HD_OK
                   : (din[i] = hd_tensor_ref(in[i])) != NULL;
    ok = ok && v->c->compile(ctx, g, &v->opt, &e) == HD_OK;
    ok = ok && v->c->run(ctx, e, din, nin, dout, nout) == HD_OK;
    for (int i = 0; i < nout; i++) {
        out[i] = ok ? hd_tensor_to_host(ctx, dout[i]) : NULL;
        ok = ok && out[i];
        hd_tensor_unref(dout[i]);
    }
    if (!ok) fprintf(stderr, "%s on %s: %s\n", v->c->name, g->name, hd_error_message(ctx));
    if (e && stats) v->c->stats(e, stats);
    if (e) v->c->free(ctx, e);
    for (int i = 0; i < nin; i++) hd_tensor_unref(din[i]);
    return ok;
}

static int lt_close(const hd_tensor *a, const hd_tensor *b, double tol) {
    if (!a || !b || a->numel != b->numel) return 0;
    for (int64_t i = 0; i < a->numel; i++)
        if (!hd_test_close(hd_tensor_get(a, i), hd_tensor_get(b, i), tol, tol)) return 0;
    return 1;
}

/* x after t trips from x0 (closed form, f64). */
static double lt_closed(int i, double t) {
    double h = pow(0.5, t);
    return h * lt_x0[i] + 2.0 * lt_w[i] * (1.0 - h);
}

static void lt_check_closed(lt_env *v, hd_tensor *const *out, double t) {
    double y = 0;
    for (int i = 0; i < LT_N; i++) {
        CHECK_MSG(out[0] && hd_test_close(hd_tensor_get(out[0], i), lt_closed(i, t), 1e-5, 1e-6),
                  "%s, %g trips: x[%d] = %g, want %g", v->c->name, t, i,
                  out[0] ? hd_tensor_get(out[0], i) : NAN, lt_closed(i, t));
        y += lt_closed(i, t);
    }
    CHECK_MSG(out[1] && hd_test_close(hd_tensor_get(out[1], 0), y, 1e-5, 1e-6), "%s: y %g, want %g",
              v->c->name, out[1] ? hd_tensor_get(out[1], 0) : NAN, y);
}

static void lt_release(hd_tensor **t, int n) {
    for (int i = 0; i < n; i++) {
        hd_tensor_unref(t[i]);
        t[i] = NULL;
    }
}

/* The loop against the unrolled graph and the closed form. */
static void lt_check_trips(lt_env *v, int64_t trips) {
    hd_ctx *ctx = v->ctx;
    hd_tensor *in[2] = {lt_vec(ctx, lt_x0, LT_N), lt_vec(ctx, lt_w, LT_N)};
    hd_tensor *got[2] = {0}, *want[2] = {0};
    hd_ir_graph *g = lt_graph(ctx, trips, 0);
    CHECK_MSG(hd_ir_verify(g) == HD_OK, "%s", hd_error_message(ctx));
    CHECK(lt_run(v, g, in, 2, got, 2, NULL));
    lt_check_closed(v, got, (double)trips);
    if (trips <= v->unroll_max) {
        hd_ir_graph *u = lt_graph(ctx, trips, 1);
        CHECK(lt_run(v, u, in, 2, want, 2, NULL));
        CHECK_MSG(lt_close(got[0], want[0], 1e-6) && lt_close(got[1], want[1], 1e-6),
                  "%s: %lld trips differ from the unrolled graph", v->c->name, (long long)trips);
        hd_ir_graph_free(u);
    }
    hd_ir_graph_free(g);
    lt_release(got, 2);
    lt_release(want, 2);
    lt_release(in, 2);
}

/* A loop in a loop: 4 outer trips of 3 inner ones are 12 steps. */
static hd_ir_graph *lt_nested(hd_ctx *ctx, int64_t outer, int64_t inner) {
    int64_t n = LT_N;
    hd_ir_graph *ob = hd_ir_graph_new(ctx, "outer");
    int x = hd_ir_add_input(ob, "x", HD_F32, &n, 1), w = hd_ir_add_input(ob, "w", HD_F32, &n, 1);
    int in[2] = {x, w}, src = 0;
    int l = hd_ir_add_loop(ob, lt_body(ctx, 0), inner, in, 2, 1, &src);
    CHECK(hd_ir_add_output(ob, "x", hd_ir_add_loop_out(ob, l, 0)) == HD_OK);
    CHECK(hd_ir_add_output(ob, "y", hd_ir_add_loop_out(ob, l, 1)) == HD_OK);
    hd_ir_graph *g = hd_ir_graph_new(ctx, "nested");
    x = hd_ir_add_input(g, "x0", HD_F32, &n, 1);
    w = hd_ir_add_input(g, "w", HD_F32, &n, 1);
    int gin[2] = {x, w};
    l = hd_ir_add_loop(g, ob, outer, gin, 2, 1, &src);
    CHECK(hd_ir_add_output(g, "x", hd_ir_add_loop_out(g, l, 0)) == HD_OK);
    CHECK(hd_ir_add_output(g, "y", hd_ir_add_loop_out(g, l, 1)) == HD_OK);
    return g;
}

static void lt_check_nested(lt_env *v) {
    hd_ctx *ctx = v->ctx;
    hd_tensor *in[2] = {lt_vec(ctx, lt_x0, LT_N), lt_vec(ctx, lt_w, LT_N)}, *got[2] = {0};
    hd_ir_graph *g = lt_nested(ctx, 4, 3);
    CHECK_MSG(hd_ir_verify(g) == HD_OK, "%s", hd_error_message(ctx));
    CHECK(lt_run(v, g, in, 2, got, 2, NULL));
    lt_check_closed(v, got, 12);
    hd_ir_graph_free(g);
    lt_release(got, 2);
    lt_release(in, 2);
}

/* A callback in the body runs at every trip, in order. */
static double lt_seen[64];
static int lt_nseen;
static hd_status lt_record(hd_ctx *ctx, void *ud, hd_tensor *const *args, int nargs) {
    HD_UNUSED(ud);
    hd_tensor *h = nargs == 1 ? hd_tensor_to_host(ctx, args[0]) : NULL;
    if (h && lt_nseen < 64) lt_seen[lt_nseen++] = hd_tensor_get(h, 0);
    hd_tensor_unref(h);
    return HD_OK;
}

/* x' = x + 1, record(x'), trips times from x0 = 0; nothing reads the
 * loop's results (with_out: but x, an output) */
static hd_ir_graph *lt_callback_graph(hd_ctx *ctx, int64_t trips, int with_out) {
    hd_ir_graph *b = hd_ir_graph_new(ctx, "cb_body");
    int x = hd_ir_add_input(b, "x", HD_F32, NULL, 0);
    int xn = lt_bin(b, HD_OP_ADD, x, lt_scalar_const(b, 1.0));
    hd_ir_callback cb = {"record", lt_record, NULL, NULL, NULL};
    CHECK(hd_ir_add_callback(b, &cb, &xn, 1) == HD_OK);
    CHECK(hd_ir_add_output(b, "x", xn) == HD_OK);
    hd_ir_graph *g = hd_ir_graph_new(ctx, "cb_loop");
    int x0 = hd_ir_add_input(g, "x0", HD_F32, NULL, 0), src = 0;
    int l = hd_ir_add_loop(g, b, trips, &x0, 1, 1, &src);
    if (with_out) CHECK(hd_ir_add_output(g, "x", hd_ir_add_loop_out(g, l, 0)) == HD_OK);
    return g;
}

static void lt_check_callback(lt_env *v) {
    hd_ctx *ctx = v->ctx;
    hd_tensor *x0 = hd_tensor_new(ctx, HD_F32, NULL, 0), *got = NULL;
    hd_dtype_store(HD_F32, x0->storage->data, 0, 0.0);
    for (int with_out = 0; with_out < 2; with_out++) {
        hd_ir_graph *g = lt_callback_graph(ctx, 5, with_out);
        lt_nseen = 0;
        CHECK(lt_run(v, g, &x0, 1, &got, with_out, NULL));
        CHECK_MSG(lt_nseen == 5, "%s: %d calls", v->c->name, lt_nseen);
        for (int i = 0; i < lt_nseen; i++) CHECK(lt_seen[i] == i + 1);
        if (with_out) CHECK(got && hd_tensor_get(got, 0) == 5);
        hd_tensor_unref(got);
        got = NULL;
        hd_ir_graph_free(g);
    }
    hd_tensor_unref(x0);
}

/* An interrupt raised during trip 3 stops the loop before trip 4. */
static _Atomic int lt_flag;
static hd_status lt_interrupt(hd_ctx *ctx, void *ud, hd_tensor *const *args, int nargs) {
    HD_UNUSED(ud);
    HD_UNUSED(args);
    HD_UNUSED(nargs);
    HD_UNUSED(ctx);
    if (++lt_nseen == 3) lt_flag = HD_STOP_INTERRUPT;
    return HD_OK;
}

static void lt_check_interrupt(lt_env *v) {
    hd_ctx *ctx = v->ctx;
    hd_ir_graph *g = lt_callback_graph(ctx, 1000, 1);
    g->nodes[0].loop->body->nodes[1].cb.fn = lt_interrupt;
    hd_tensor *x0 = hd_tensor_new(ctx, HD_F32, NULL, 0), *got = NULL;
    hd_dtype_store(HD_F32, x0->storage->data, 0, 0.0);
    lt_nseen = 0;
    lt_flag = 0;
    ctx->stop.flag = &lt_flag;
    CHECK(!lt_run(v, g, &x0, 1, &got, 1, NULL) && !got);
    CHECK_MSG(ctx->status == HD_ERR_LIMIT && lt_nseen == 3, "%s: %d trips, %s", v->c->name,
              lt_nseen, hd_error_message(ctx));
    ctx->stop.flag = NULL;
    hd_error_clear(ctx);
    hd_tensor_unref(x0);
    hd_ir_graph_free(g);
}

/* x' = x + rand([4]): the loop draws what the unrolled graph draws. */
static int lt_rand_step(hd_ir_graph *g, int x) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.dtype = HD_F32;
    at.nshape = 1;
    at.shape[0] = LT_N;
    return lt_bin(g, HD_OP_ADD, x, hd_ir_add_node(g, HD_OP_RAND, NULL, 0, &at));
}

static hd_ir_graph *lt_rand_graph(hd_ctx *ctx, int64_t trips, int unrolled) {
    int64_t n = LT_N;
    hd_ir_graph *g = hd_ir_graph_new(ctx, "rand");
    int x = hd_ir_add_input(g, "x0", HD_F32, &n, 1);
    if (unrolled) {
        for (int64_t t = 0; t < trips; t++) x = lt_rand_step(g, x);
    } else {
        hd_ir_graph *b = hd_ir_graph_new(ctx, "rand_body");
        int bx = hd_ir_add_input(b, "x", HD_F32, &n, 1), src = 0;
        CHECK(hd_ir_add_output(b, "x", lt_rand_step(b, bx)) == HD_OK);
        x = hd_ir_add_loop_out(g, hd_ir_add_loop(g, b, trips, &x, 1, 1, &src), 0);
    }
    CHECK(hd_ir_add_output(g, "x", x) == HD_OK);
    return g;
}

static void lt_check_rand(lt_env *v) {
    hd_ctx *ctx = v->ctx;
    hd_tensor *x0 = lt_vec(ctx, lt_x0, LT_N), *got = NULL, *want = NULL;
    hd_ir_graph *g = lt_rand_graph(ctx, 6, 0), *u = lt_rand_graph(ctx, 6, 1);
    ctx->rng_offset = 0;
    CHECK(lt_run(v, g, &x0, 1, &got, 1, NULL));
    uint64_t after_loop = ctx->rng_offset;
    ctx->rng_offset = 0;
    CHECK(lt_run(v, u, &x0, 1, &want, 1, NULL));
    CHECK_MSG(lt_close(got, want, 1e-6), "%s: the loop draws other numbers", v->c->name);
    CHECK(after_loop == ctx->rng_offset && after_loop > 0);
    hd_tensor_unref(got);
    hd_tensor_unref(want);
    hd_tensor_unref(x0);
    hd_ir_graph_free(g);
    hd_ir_graph_free(u);
}

/* A body output nothing reads is dropped; the rest still computes right. */
static void lt_check_shrink(lt_env *v) {
    hd_ctx *ctx = v->ctx;
    int64_t n = LT_N;
    hd_ir_graph *g = hd_ir_graph_new(ctx, "shrink");
    int x = hd_ir_add_input(g, "x0", HD_F32, &n, 1), w = hd_ir_add_input(g, "w", HD_F32, &n, 1);
    int in[2] = {x, w}, src = 0;
    int l = hd_ir_add_loop(g, lt_body(ctx, 1), 9, in, 2, 1, &src);
    CHECK(g->values[l].shape[0] == 128 + 16); /* x at 0, y at 64, z at 128 */
    CHECK(hd_ir_add_output(g, "y", hd_ir_add_loop_out(g, l, 1)) == HD_OK);
    hd_ir_graph *o = hd_ir_graph_clone(g);
    CHECK(o && hd_jit_optimize(ctx, o, &v->opt, NULL) == HD_OK);
    const hd_ir_node *ln = NULL;
    for (int i = 0; o && i < o->nnodes; i++)
        if (o->nodes[i].op == HD_IR_LOOP) ln = &o->nodes[i];
    CHECK(ln && ln->loop->body->noutputs == 2); /* x stays: it feeds the carry */
    CHECK(ln && o->values[ln->out].shape[0] == 64 + 4 && ln->loop->bytes == 68);
    CHECK(o && hd_ir_verify(o) == HD_OK);
    hd_tensor *xin[2] = {lt_vec(ctx, lt_x0, LT_N), lt_vec(ctx, lt_w, LT_N)}, *y = NULL;
    CHECK(lt_run(v, g, xin, 2, &y, 1, NULL));
    double want = 0;
    for (int i = 0; i < LT_N; i++) want += lt_closed(i, 9);
    CHECK_MSG(y && hd_test_close(hd_tensor_get(y, 0), want, 1e-5, 1e-6), "%s: y %g, want %g",
              v->c->name, y ? hd_tensor_get(y, 0) : NAN, want);
    hd_tensor_unref(y);
    lt_release(xin, 2);
    hd_ir_graph_free(o);
    hd_ir_graph_free(g);
}

/* The loop's packed value itself as a graph output: every body output at
 * its offset (none dropped, though only the value reads z). */
static void lt_check_packed(lt_env *v) {
    hd_ctx *ctx = v->ctx;
    int64_t n = LT_N;
    hd_ir_graph *g = hd_ir_graph_new(ctx, "packed");
    int x = hd_ir_add_input(g, "x0", HD_F32, &n, 1), w = hd_ir_add_input(g, "w", HD_F32, &n, 1);
    int in[2] = {x, w}, src = 0;
    int l = hd_ir_add_loop(g, lt_body(ctx, 1), 4, in, 2, 1, &src);
    CHECK(hd_ir_add_output(g, "packed", l) == HD_OK);
    CHECK(hd_ir_add_output(g, "y", hd_ir_add_loop_out(g, l, 1)) == HD_OK);
    hd_tensor *xin[2] = {lt_vec(ctx, lt_x0, LT_N), lt_vec(ctx, lt_w, LT_N)}, *out[2] = {0};
    CHECK(lt_run(v, g, xin, 2, out, 2, NULL));
    CHECK(out[0] && out[0]->dtype == HD_U8 && out[0]->numel == 144);
    double y = 0;
    for (int i = 0; out[0] && i < LT_N; i++) {
        float xi, zi, yy;
        memcpy(&xi, (char *)hd_tensor_data(out[0]) + 4 * i, 4);
        memcpy(&zi, (char *)hd_tensor_data(out[0]) + 128 + 4 * i, 4);
        CHECK_CLOSE(xi, lt_closed(i, 4), 1e-6, 1e-6);
        CHECK_CLOSE(zi, lt_closed(i, 4) * lt_closed(i, 4), 1e-6, 1e-6);
        y += lt_closed(i, 4);
        if (i == 0) {
            memcpy(&yy, (char *)hd_tensor_data(out[0]) + 64, 4);
            CHECK(out[1] && yy == hd_tensor_get(out[1], 0));
        }
    }
    CHECK(out[1] && hd_test_close(hd_tensor_get(out[1], 0), y, 1e-6, 1e-6));
    lt_release(out, 2);
    lt_release(xin, 2);
    hd_ir_graph_free(g);
}

static double lt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Compile time does not grow with trips: the body is compiled once. */
static void lt_check_compile_time(lt_env *v) {
    double t[2];
    int64_t trips[2] = {10, 1000};
    for (int k = 0; k < 2; k++) {
        hd_ir_graph *g = lt_graph(v->ctx, trips[k], 0);
        hd_jit_exec *e = NULL;
        double t0 = lt_now();
        CHECK(v->c->compile(v->ctx, g, &v->opt, &e) == HD_OK);
        t[k] = lt_now() - t0;
        if (e) v->c->free(v->ctx, e);
        hd_ir_graph_free(g);
    }
    /* unrolled, 1000 trips are 3000 nodes: seconds to tens of seconds */
    CHECK_MSG(t[1] < 10 * t[0] + 0.5, "%s: compiling 1000 trips took %.3f s, 10 trips %.3f s",
              v->c->name, t[1], t[0]);
    printf("%s: compile 10 trips %.4f s, 1000 trips %.4f s\n", v->c->name, t[0], t[1]);
}

/* Every run check with one compiler. */
/* A while loop: x' = x * 0.5 + w and k' = k + 1 while k < lim, with lim a
 * graph input (0-d f32): carried x, k, go; invariant w, lim. After the
 * loop x is the closed form at lim trips (rounded up), and k = trips. */
static hd_ir_graph *lt_while_graph(hd_ctx *ctx) {
    int64_t n = LT_N;
    hd_ir_graph *b = hd_ir_graph_new(ctx, "while_body");
    int x = hd_ir_add_input(b, "x", HD_F32, &n, 1), k = hd_ir_add_input(b, "k", HD_F32, NULL, 0);
    hd_ir_add_input(b, "go", HD_BOOL, NULL, 0);
    int w = hd_ir_add_input(b, "w", HD_F32, &n, 1),
        lim = hd_ir_add_input(b, "lim", HD_F32, NULL, 0);
    int y, xn = lt_step(b, x, w, &y), kn = lt_bin(b, HD_OP_ADD, k, lt_scalar_const(b, 1.0));
    CHECK(hd_ir_add_output(b, "x", xn) == HD_OK && hd_ir_add_output(b, "k", kn) == HD_OK);
    CHECK(hd_ir_add_output(b, "go", lt_bin(b, HD_OP_LT, kn, lim)) == HD_OK);
    hd_ir_graph *g = hd_ir_graph_new(ctx, "while");
    int x0 = hd_ir_add_input(g, "x0", HD_F32, &n, 1), gw = hd_ir_add_input(g, "w", HD_F32, &n, 1);
    int gl = hd_ir_add_input(g, "lim", HD_F32, NULL, 0), k0 = lt_scalar_const(g, 0.0);
    int in[5] = {x0, k0, lt_bin(g, HD_OP_LT, k0, gl), gw, gl}, src[3] = {0, 1, 2};
    int l = hd_ir_add_loop(g, b, 1, in, 5, 3, src);
    CHECK(l >= 0 && hd_ir_loop_while(g, l, 2) == HD_OK);
    CHECK(hd_ir_add_output(g, "x", hd_ir_add_loop_out(g, l, 0)) == HD_OK);
    CHECK(hd_ir_add_output(g, "k", hd_ir_add_loop_out(g, l, 1)) == HD_OK);
    return g;
}

/* One compiled while loop run for several limits, 0 (no iteration) too. */
static void lt_check_while(lt_env *v) {
    hd_ctx *ctx = v->ctx;
    hd_ir_graph *g = lt_while_graph(ctx);
    CHECK_MSG(hd_ir_verify(g) == HD_OK, "%s", hd_error_message(ctx));
    hd_tensor *in[3] = {lt_vec(ctx, lt_x0, LT_N), lt_vec(ctx, lt_w, LT_N), NULL}, *din[3] = {0};
    hd_jit_exec *e = NULL;
    int ok = v->c->compile(ctx, g, &v->opt, &e) == HD_OK;
    CHECK_MSG(ok, "%s: %s", v->c->name, hd_error_message(ctx));
    static const double lims[] = {0, 1, 2.5, 7, 300};
    for (size_t j = 0; ok && j < sizeof lims / sizeof *lims; j++) {
        in[2] = hd_tensor_new(ctx, HD_F32, NULL, 0);
        hd_dtype_store(HD_F32, in[2]->storage->data, 0, lims[j]);
        hd_tensor *dout[2] = {0}, *out[2] = {0};
        for (int i = 0; i < 3 && ok; i++)
            ok = v->be ? hd_tensor_to_device(ctx, in[i], v->be, v->dev, &din[i]) == HD_OK
                       : (din[i] = hd_tensor_ref(in[i])) != NULL;
        ok = ok && v->c->run(ctx, e, din, 3, dout, 2) == HD_OK;
        for (int i = 0; i < 2; i++) out[i] = ok ? hd_tensor_to_host(ctx, dout[i]) : NULL;
        double trips = ceil(lims[j]);
        CHECK_MSG(out[1] && hd_tensor_get(out[1], 0) == trips, "%s: while k < %g ran %g times",
                  v->c->name, lims[j], out[1] ? hd_tensor_get(out[1], 0) : NAN);
        for (int i = 0; out[0] && i < LT_N; i++)
            CHECK_MSG(hd_test_close(hd_tensor_get(out[0], i), lt_closed(i, trips), 1e-5, 1e-6),
                      "%s, while k < %g: x[%d] = %g, want %g", v->c->name, lims[j], i,
                      hd_tensor_get(out[0], i), lt_closed(i, trips));
        lt_release(out, 2);
        lt_release(dout, 2);
        lt_release(din, 3);
        hd_tensor_unref(in[2]);
        in[2] = NULL;
    }
    if (e) v->c->free(ctx, e);
    lt_release(in, 3);
    hd_ir_graph_free(g);
}

/* Stacks: a loop of 7 trips keeps x as every iteration began (slot t is
 * x after t trips, in closed form); a second stack of the same input. */
static void lt_check_stacks(lt_env *v) {
    hd_ctx *ctx = v->ctx;
    hd_ir_graph *g = hd_ir_graph_new(ctx, "stacked");
    int64_t n = LT_N;
    int x = hd_ir_add_input(g, "x0", HD_F32, &n, 1), w = hd_ir_add_input(g, "w", HD_F32, &n, 1);
    int in[2] = {x, w}, src = 0;
    int l = hd_ir_add_loop(g, lt_body(ctx, 0), 7, in, 2, 1, &src);
    int k = hd_ir_loop_stack(g, l, 0), k2 = hd_ir_loop_stack(g, l, 0);
    CHECK(k == 2 && k2 == 3);
    CHECK(hd_ir_add_output(g, "x", hd_ir_add_loop_out(g, l, 0)) == HD_OK &&
          hd_ir_add_output(g, "y", hd_ir_add_loop_out(g, l, 1)) == HD_OK &&
          hd_ir_add_output(g, "s", hd_ir_add_loop_out(g, l, k2)) == HD_OK);
    CHECK_MSG(hd_ir_verify(g) == HD_OK, "%s", hd_error_message(ctx));
    hd_tensor *tin[2] = {lt_vec(ctx, lt_x0, LT_N), lt_vec(ctx, lt_w, LT_N)}, *out[3] = {0};
    CHECK(lt_run(v, g, tin, 2, out, 3, NULL));
    lt_check_closed(v, out, 7.0);
    CHECK(out[2] && out[2]->ndim == 2 && out[2]->shape[0] == 7 && out[2]->shape[1] == LT_N);
    for (int t = 0; t < 7 && out[2]; t++)
        for (int i = 0; i < LT_N; i++)
            CHECK_MSG(
                hd_test_close(hd_tensor_get(out[2], t * LT_N + i), lt_closed(i, t), 1e-5, 1e-6),
                "%s: stack slot %d [%d] = %g, want %g", v->c->name, t, i,
                hd_tensor_get(out[2], t * LT_N + i), lt_closed(i, t));
    lt_release(out, 3);
    lt_release(tin, 2);
    hd_ir_graph_free(g);
}

static void lt_check_compiler(lt_env *v) {
    int64_t trips[] = {1, 2, 1000};
    for (int i = 0; i < 3; i++) lt_check_trips(v, trips[i]);
    lt_check_nested(v);
    lt_check_callback(v);
    lt_check_interrupt(v);
    lt_check_rand(v);
    lt_check_shrink(v);
    lt_check_packed(v);
    lt_check_while(v);
    lt_check_stacks(v);
    lt_check_compile_time(v);
}

#endif
