/* The upstream MLP benchmark: a 3-layer MLP with GELU (erf form) and a
 * residual connection, forward only, f32,
 *
 *   h1 = gelu(x @ W1 + b1)          x [B, I], W1 [I, H]
 *   h2 = gelu(h1 @ W2 + b2) + h1    W2 [H, H]
 *   y  = h2 @ W3 + b3               W3 [H, O]
 *
 * at B x I x H x O = 32x256x512x256, 64x512x1024x512, 128x768x2048x1024:
 * Hodu eager against the graph compiled by llvm, 100 warm-up iterations
 * then `rounds` (default 5) rounds of 100 timed ones, each, on `threads`
 * threads (default 2): the best round's mean and the worst's (the machine
 * is shared). bench/peers_mlp.py runs the same model in PyTorch (eager,
 * torch.compile) and JAX (jit), measured the same way.
 *
 *   build/bench/bench_mlp [threads] [iters] [rounds]
 *
 * BENCH_SIZE=0|1|2 runs one size; BENCH_WHICH=eager|llvm times only one
 * (for profiling).                                                     */
#include "cpu_blas.h"
#include "hd_compile.h"
#include "hd_trace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if !HODU_HAVE_LLVM

int main(void) {
    fprintf(stderr, "bench_mlp: this build has no LLVM\n");
    return 1;
}

#else

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(hd_ctx *ctx, const char *what) {
    fprintf(stderr, "bench_mlp: %s: %s\n", what, hd_error_message(ctx));
    exit(1);
}

/* A [rows, cols] (cols 0: [rows]) f32 tensor of values uniform in
 * [-scale, scale), from a fixed sequence. */
static hd_tensor *param(hd_ctx *ctx, int64_t rows, int64_t cols, double scale, uint64_t seed) {
    int64_t shape[2] = {rows, cols};
    hd_tensor *t = hd_tensor_new(ctx, HD_F32, shape, cols ? 2 : 1);
    if (!t) die(ctx, "alloc");
    float *d = t->storage->data;
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (int64_t i = 0; i < t->numel; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        d[i] = (float)(((double)(s >> 40) / (double)(1 << 24) * 2.0 - 1.0) * scale);
    }
    return t;
}

typedef struct mlp_params {
    hd_tensor *w[3], *b[3];
} mlp_params;

static hd_status op2(hd_ctx *ctx, hd_op op, hd_tensor *a, hd_tensor *b, hd_tensor **out) {
    hd_tensor *in[2] = {a, b};
    return hd_op_run(ctx, op, in, 2, NULL, out);
}

/* x @ w + b, then gelu when act */
static hd_status dense(hd_ctx *ctx, hd_tensor *x, hd_tensor *w, hd_tensor *b, int act,
                       hd_tensor **out) {
    hd_tensor *m = NULL, *mb = NULL;
    hd_status st = op2(ctx, HD_OP_MATMUL, x, w, &m);
    if (!st) st = op2(ctx, HD_OP_ADD, m, b, act ? &mb : out);
    if (!st && act) st = hd_op_run(ctx, HD_OP_GELU, &mb, 1, NULL, out);
    hd_tensor_unref(m);
    hd_tensor_unref(mb);
    return st;
}

static hd_status mlp(hd_ctx *ctx, hd_tensor *x, const mlp_params *p, hd_tensor **y) {
    hd_tensor *h1 = NULL, *g2 = NULL, *h2 = NULL;
    hd_status st = dense(ctx, x, p->w[0], p->b[0], 1, &h1);
    if (!st) st = dense(ctx, h1, p->w[1], p->b[1], 1, &g2);
    if (!st) st = op2(ctx, HD_OP_ADD, g2, h1, &h2);
    if (!st) st = dense(ctx, h2, p->w[2], p->b[2], 0, y);
    hd_tensor_unref(h1);
    hd_tensor_unref(g2);
    hd_tensor_unref(h2);
    return st;
}

static hd_ir_graph *trace_mlp(hd_ctx *ctx, const hd_tensor *x, const mlp_params *p) {
    hd_ir_graph *g = NULL;
    hd_tensor *sx = NULL, *sy = NULL;
    if (hd_trace_begin(ctx, "mlp")) die(ctx, "trace");
    sx = hd_trace_input(ctx, "x", HD_F32, x->shape, x->ndim);
    if (!sx || mlp(ctx, sx, p, &sy) || hd_trace_output(ctx, "y", sy) || hd_trace_end(ctx, &g))
        die(ctx, "trace");
    hd_tensor_unref(sx);
    hd_tensor_unref(sy);
    return g;
}

/* Milliseconds per forward: `iters` warm-up iterations, then `rounds`
 * rounds of `iters` timed ones; the best and the worst round's mean. e
 * NULL: eager. */
typedef struct mlp_time {
    double best, worst;
} mlp_time;

static mlp_time time_forward(hd_ctx *ctx, hd_jit_exec *e, hd_tensor *x, const mlp_params *p,
                             int iters, int rounds) {
    mlp_time t = {1e30, 0};
    for (int r = -1; r < rounds; r++) {
        double t0 = now();
        for (int i = 0; i < iters; i++) {
            hd_tensor *y = NULL;
            if (e ? hd_jit_llvm.run(ctx, e, &x, 1, &y, 1) : mlp(ctx, x, p, &y)) die(ctx, "forward");
            hd_tensor_unref(y);
        }
        double ms = (now() - t0) / iters * 1e3;
        if (r < 0) continue; /* warm-up */
        t.best = fmin(t.best, ms);
        t.worst = fmax(t.worst, ms);
    }
    return t;
}

/* Largest |eager - llvm| relative to the largest |eager| element. */
static double max_rel_diff(hd_ctx *ctx, hd_jit_exec *e, hd_tensor *x, const mlp_params *p) {
    hd_tensor *y0 = NULL, *y1 = NULL;
    if (mlp(ctx, x, p, &y0) || hd_jit_llvm.run(ctx, e, &x, 1, &y1, 1)) die(ctx, "check");
    double diff = 0, top = 0;
    for (int64_t i = 0; i < y0->numel; i++) {
        double a = hd_tensor_get(y0, i), b = hd_tensor_get(y1, i);
        diff = fmax(diff, fabs(a - b));
        top = fmax(top, fabs(a));
    }
    hd_tensor_unref(y0);
    hd_tensor_unref(y1);
    return top > 0 ? diff / top : diff;
}

static void bench_size(int64_t B, int64_t I, int64_t H, int64_t O, int threads, int iters,
                       int rounds) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    ctx.nthreads = threads;
    hd_ctx_set_cache_limit(&ctx, (size_t)1 << 30); /* reuse freed outputs, as the VM does */
    mlp_params p = {
        {param(&ctx, I, H, 1.0 / sqrt((double)I), 1), param(&ctx, H, H, 1.0 / sqrt((double)H), 2),
         param(&ctx, H, O, 1.0 / sqrt((double)H), 3)},
        {param(&ctx, H, 0, 0.1, 4), param(&ctx, H, 0, 0.1, 5), param(&ctx, O, 0, 0.1, 6)}};
    hd_tensor *x = param(&ctx, B, I, 1.0, 7);
    hd_ir_graph *g = trace_mlp(&ctx, x, &p);
    hd_jit_exec *e = NULL;
    double t0 = now();
    if (hd_jit_llvm.compile(&ctx, g, NULL, &e)) die(&ctx, "compile");
    double tc = now() - t0;
    const char *which = getenv("BENCH_WHICH"); /* eager or llvm: only that one */
    mlp_time none = {NAN, NAN}, te = none, tl = none;
    if (!which || strcmp(which, "llvm")) te = time_forward(&ctx, NULL, x, &p, iters, rounds);
    if (!which || strcmp(which, "eager")) tl = time_forward(&ctx, e, x, &p, iters, rounds);
    double flop = 2.0 * (double)B * ((double)I * H + (double)H * H + (double)H * O);
    printf("mlp B=%lld I=%lld H=%lld O=%lld (%.1f MFLOP/forward), %d threads, %d iterations x %d "
           "rounds (best, worst)\n",
           (long long)B, (long long)I, (long long)H, (long long)O, flop * 1e-6, threads, iters,
           rounds);
    printf("  hodu eager  %9.3f ms  (%6.1f GFLOPS)  worst %.3f\n", te.best, flop / te.best * 1e-6,
           te.worst);
    printf("  hodu llvm   %9.3f ms  (%6.1f GFLOPS)  worst %.3f  (%.2fx eager; compile %.1f ms)\n",
           tl.best, flop / tl.best * 1e-6, tl.worst, te.best / tl.best, tc * 1e3);
    printf("  max |eager - llvm| / max |eager| = %.2g\n", max_rel_diff(&ctx, e, x, &p));
    hd_jit_llvm.free(&ctx, e);
    hd_ir_graph_free(g);
    hd_tensor_unref(x);
    for (int i = 0; i < 3; i++) {
        hd_tensor_unref(p.w[i]);
        hd_tensor_unref(p.b[i]);
    }
    hd_ctx_release(&ctx);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2, iters = argc > 2 ? atoi(argv[2]) : 100;
    int rounds = argc > 3 ? atoi(argv[3]) : 5;
    if (threads < 1) threads = 2;
    if (iters < 1) iters = 100;
    if (rounds < 1) rounds = 5;
    setenv("HODU_CACHE_DIR", "off", 1);
    printf("openblas kernels: %s, gemm: %s\n", cpu_blas_core(), cpu_blas_gemm_name());
    static const int64_t sizes[3][4] = {
        {32, 256, 512, 256}, {64, 512, 1024, 512}, {128, 768, 2048, 1024}};
    const char *only = getenv("BENCH_SIZE"); /* 0, 1 or 2 */
    for (int i = 0; i < 3; i++)
        if (!only || atoi(only) == i)
            bench_size(sizes[i][0], sizes[i][1], sizes[i][2], sizes[i][3], threads, iters, rounds);
    return 0;
}

#endif /* HODU_HAVE_LLVM */
