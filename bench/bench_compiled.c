/* Compiled vs eager: the d2l hybridize MLP (512 -> 256 -> 128 -> 2, relu,
 * batch 1), called 1000 times eagerly through hd_op_run and through a
 * traced graph compiled by interp; and the compile time of that graph.
 * A narrow MLP (16 -> 16 -> 16 -> 2) follows, where per-op dispatch
 * rather than matmul dominates.
 *
 *   build/bench/bench_compiled [calls]                                  */
#include "hd_compile.h"
#include "hd_trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static hd_tensor *randn(hd_ctx *ctx, int64_t rows, int64_t cols, double std) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.dtype = HD_F32;
    at.nshape = cols ? 2 : 1;
    at.shape[0] = rows;
    at.shape[1] = cols;
    at.scalar[1] = std;
    hd_tensor *t = NULL;
    hd_op_run(ctx, HD_OP_RANDN, NULL, 0, &at, &t);
    return t;
}

static hd_status linear(hd_ctx *ctx, hd_tensor *x, hd_tensor *w, hd_tensor *b, int relu,
                        hd_tensor **out) {
    hd_tensor *h = NULL, *hb = NULL;
    hd_tensor *in1[2] = {x, w};
    hd_status st = hd_op_run(ctx, HD_OP_MATMUL, in1, 2, NULL, &h);
    hd_tensor *in2[2] = {h, b};
    if (!st) st = hd_op_run(ctx, HD_OP_ADD, in2, 2, NULL, relu ? &hb : out);
    if (!st && relu) st = hd_op_run(ctx, HD_OP_RELU, &hb, 1, NULL, out);
    hd_tensor_unref(h);
    hd_tensor_unref(hb);
    return st;
}

static hd_status mlp(hd_ctx *ctx, hd_tensor *x, hd_tensor **p, hd_tensor **out) {
    hd_tensor *h1 = NULL, *h2 = NULL;
    hd_status st = linear(ctx, x, p[0], p[1], 1, &h1);
    if (!st) st = linear(ctx, h1, p[2], p[3], 1, &h2);
    if (!st) st = linear(ctx, h2, p[4], p[5], 0, out);
    hd_tensor_unref(h1);
    hd_tensor_unref(h2);
    return st;
}

static void die(hd_ctx *ctx) {
    fprintf(stderr, "bench_compiled: %s\n", hd_error_message(ctx));
    exit(1);
}

static void bench(int calls, int64_t d0, int64_t d1, int64_t d2) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    hd_tensor *p[6] = {randn(&ctx, d0, d1, 0.05), randn(&ctx, d1, 0, 0.01),
                       randn(&ctx, d1, d2, 0.05), randn(&ctx, d2, 0, 0.01),
                       randn(&ctx, d2, 2, 0.05),  randn(&ctx, 2, 0, 0.01)};
    hd_tensor *x = randn(&ctx, 1, d0, 1.0);
    for (int i = 0; i < 6; i++)
        if (!p[i] || !x) die(&ctx);

    /* trace once, compile (timed over several compiles of the same graph) */
    hd_ir_graph *g = NULL;
    hd_tensor *sx = NULL, *sy = NULL;
    if (hd_trace_begin(&ctx, "mlp")) die(&ctx);
    sx = hd_trace_input(&ctx, "x", HD_F32, x->shape, x->ndim);
    if (!sx || mlp(&ctx, sx, p, &sy) || hd_trace_output(&ctx, "y", sy) || hd_trace_end(&ctx, &g))
        die(&ctx);
    const int ncompile = 50;
    hd_jit_exec *e = NULL;
    double t0 = now();
    for (int i = 0; i < ncompile; i++) {
        if (e) hd_jit_interp.free(&ctx, e);
        if (hd_jit_interp.compile(&ctx, g, NULL, &e)) die(&ctx);
    }
    double compile_us = (now() - t0) / ncompile * 1e6;

    /* warm up both paths, then time */
    hd_tensor *y = NULL, *yc = NULL;
    for (int i = 0; i < 20; i++) {
        if (mlp(&ctx, x, p, &y) || hd_jit_interp.run(&ctx, e, &x, 1, &yc, 1)) die(&ctx);
        hd_tensor_unref(y);
        hd_tensor_unref(yc);
    }
    double best_eager = 1e30, best_comp = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        t0 = now();
        for (int i = 0; i < calls; i++) {
            if (mlp(&ctx, x, p, &y)) die(&ctx);
            hd_tensor_unref(y);
        }
        double te = (now() - t0) / calls * 1e6;
        t0 = now();
        for (int i = 0; i < calls; i++) {
            if (hd_jit_interp.run(&ctx, e, &x, 1, &yc, 1)) die(&ctx);
            hd_tensor_unref(yc);
        }
        double tc = (now() - t0) / calls * 1e6;
        if (te < best_eager) best_eager = te;
        if (tc < best_comp) best_comp = tc;
    }
    /* the results agree */
    if (mlp(&ctx, x, p, &y) || hd_jit_interp.run(&ctx, e, &x, 1, &yc, 1)) die(&ctx);
    double maxdiff = 0;
    for (int i = 0; i < 2; i++) {
        double d = hd_tensor_get(y, i) - hd_tensor_get(yc, i);
        if (d < 0) d = -d;
        if (d > maxdiff) maxdiff = d;
    }
    hd_jit_stats st;
    hd_jit_interp.stats(e, &st);
    printf("mlp %lld-%lld-%lld-2, batch 1, %d calls, %d thread(s)\n", (long long)d0, (long long)d1,
           (long long)d2, calls, ctx.nthreads);
    printf("  eager (hd_op_run)    %8.2f us/call\n", best_eager);
    printf("  compiled (interp)    %8.2f us/call\n", best_comp);
    printf("  eager / compiled     %8.2fx\n", best_eager / best_comp);
    printf("  compile time         %8.1f us (%d nodes traced, %d after passes, %d kernels)\n",
           compile_us, st.nodes_traced, st.nodes, st.kernels);
    printf("  memory plan          %zu bytes planned, %zu naive, %d in place\n", st.planned_bytes,
           st.naive_bytes, st.inplace);
    printf("  max |eager - compiled| %g\n", maxdiff);
    hd_tensor_unref(y);
    hd_tensor_unref(yc);
    hd_jit_interp.free(&ctx, e);
    hd_ir_graph_free(g);
    hd_tensor_unref(sx);
    hd_tensor_unref(sy);
    hd_tensor_unref(x);
    for (int i = 0; i < 6; i++) hd_tensor_unref(p[i]);
}

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 1000;
    if (calls < 1) calls = 1000;
    bench(calls, 512, 256, 128);
    bench(calls, 16, 16, 16);
    return 0;
}
