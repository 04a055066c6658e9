/* The llvm compiler against eager mode and interp:
 *
 *   mlp      the d2l hybridize MLP (512 -> 256 -> 128 -> 2, relu) at batch
 *            1, 64 and 4096: `calls` calls at batch 1 (fewer at the
 *            larger ones) eagerly, through interp and through llvm in
 *            alternate rounds, on `threads` threads (default 1);
 *   chain    tanh(a * 2 + b) * sigmoid(b) - exp(-a) on 16M f32 (one fused
 *            kernel), in GB/s of bytes read and written, beside memcpy of
 *            the same bytes, on 1 and on 2 threads, and its arithmetic
 *            alone (ns per element on data in cache); and the light chain
 *            (a * 2 + b) * b - a, where arithmetic is not the bound;
 *   compile  the MLP graph: tracing, passes and LLVM, cold (cache off) and
 *            from the disk cache (a fresh folder).
 *
 *   build/bench/bench_llvm [calls] [threads]                          */
#include "cpu_blas.h"
#include "hd_compile.h"
#include "hd_trace.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if !HODU_HAVE_LLVM

int main(void) {
    fprintf(stderr, "bench_llvm: this build has no LLVM\n");
    return 1;
}

#else

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(hd_ctx *ctx, const char *what) {
    fprintf(stderr, "bench_llvm: %s: %s\n", what, hd_error_message(ctx));
    exit(1);
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
    if (hd_op_run(ctx, HD_OP_RANDN, NULL, 0, &at, &t)) die(ctx, "randn");
    return t;
}

/* ---- the MLP ---- */

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

static hd_ir_graph *trace_mlp(hd_ctx *ctx, hd_tensor *x, hd_tensor **p) {
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

/* Microseconds per call over one round of `calls` calls. */
static double time_round(hd_ctx *ctx, int calls, const hd_jit_compiler *c, hd_jit_exec *e,
                         hd_tensor *x, hd_tensor **p) {
    double t0 = now();
    for (int i = 0; i < calls; i++) {
        hd_tensor *y = NULL;
        if (c ? c->run(ctx, e, &x, 1, &y, 1) : mlp(ctx, x, p, &y)) die(ctx, "mlp");
        hd_tensor_unref(y);
    }
    return (now() - t0) / calls * 1e6;
}

/* Largest |eager - llvm| over the result's elements. */
static double mlp_diff(hd_ctx *ctx, hd_jit_exec *el, hd_tensor *x, hd_tensor **p) {
    hd_tensor *y0 = NULL, *y1 = NULL;
    if (mlp(ctx, x, p, &y0) || hd_jit_llvm.run(ctx, el, &x, 1, &y1, 1)) die(ctx, "check");
    double diff = 0;
    for (int64_t i = 0; i < y0->numel; i++) {
        double d = hd_tensor_get(y0, i) - hd_tensor_get(y1, i);
        d = d < 0 ? -d : d;
        if (d > diff) diff = d;
    }
    hd_tensor_unref(y0);
    hd_tensor_unref(y1);
    return diff;
}

/* The MLP at one batch size: eager, interp and llvm in alternate rounds
 * (so that all three see the machine alike), best round of each. */
static void bench_mlp_batch(hd_ctx *ctx, hd_tensor **p, int64_t batch, int calls) {
    hd_tensor *x = randn(ctx, batch, 512, 1.0);
    hd_ir_graph *g = trace_mlp(ctx, x, p);
    hd_jit_exec *ei = NULL, *el = NULL;
    if (hd_jit_interp.compile(ctx, g, NULL, &ei) || hd_jit_llvm.compile(ctx, g, NULL, &el))
        die(ctx, "compile");
    double best[3] = {1e30, 1e30, 1e30};
    for (int round = -1; round < 7; round++) { /* round -1 warms up */
        double t[3] = {time_round(ctx, calls, NULL, NULL, x, p),
                       time_round(ctx, calls, &hd_jit_interp, ei, x, p),
                       time_round(ctx, calls, &hd_jit_llvm, el, x, p)};
        for (int k = 0; round >= 0 && k < 3; k++)
            if (t[k] < best[k]) best[k] = t[k];
    }
    printf("  batch %4lld (%4d calls): eager %9.2f | interp %9.2f | llvm %9.2f us/call"
           "  (llvm %.2fx eager, %.2fx interp; max |eager - llvm| %g)\n",
           (long long)batch, calls, best[0], best[1], best[2], best[0] / best[2], best[1] / best[2],
           mlp_diff(ctx, el, x, p));
    hd_jit_interp.free(ctx, ei);
    hd_jit_llvm.free(ctx, el);
    hd_ir_graph_free(g);
    hd_tensor_unref(x);
}

/* The d2l MLP at batch 1, 64 and 4096 (BENCH_BATCH: one of them), each
 * round `calls` calls at batch 1 and as many as take about as long at the
 * others. */
static void bench_mlp(int calls, int threads) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    ctx.nthreads = threads;
    hd_ctx_set_cache_limit(&ctx, (size_t)1 << 30); /* reuse freed outputs, as the VM does */
    hd_tensor *p[6] = {randn(&ctx, 512, 256, 0.05), randn(&ctx, 256, 0, 0.01),
                       randn(&ctx, 256, 128, 0.05), randn(&ctx, 128, 0, 0.01),
                       randn(&ctx, 128, 2, 0.05),   randn(&ctx, 2, 0, 0.01)};
    const char *only = getenv("BENCH_BATCH");
    static const int64_t batches[3] = {1, 64, 4096};
    printf("mlp 512-256-128-2, %d thread(s), best of 7 alternate rounds\n", threads);
    for (int i = 0; i < 3; i++) {
        if (only && atoll(only) != batches[i]) continue;
        int n = (int)(calls * 8 / batches[i]);
        bench_mlp_batch(&ctx, p, batches[i], i == 0 ? calls : n < 5 ? 5 : n);
    }
    for (int i = 0; i < 6; i++) hd_tensor_unref(p[i]);
}

/* ---- the fused chain ---- */

static int light; /* bench the light chain */

static hd_status chain_light(hd_ctx *ctx, hd_tensor *a, hd_tensor *b, hd_tensor **out) {
    hd_tensor *two = hd_tensor_number(ctx, HD_F64, 2.0), *t[3] = {0};
    hd_status st = hd_op_binary(ctx, HD_OP_MUL, a, two, &t[0]);
    if (!st) st = hd_op_binary(ctx, HD_OP_ADD, t[0], b, &t[1]);
    if (!st) st = hd_op_binary(ctx, HD_OP_MUL, t[1], b, &t[2]);
    if (!st) st = hd_op_binary(ctx, HD_OP_SUB, t[2], a, out);
    hd_tensor_unref(two);
    for (int i = 0; i < 3; i++) hd_tensor_unref(t[i]);
    return st;
}

static hd_status chain(hd_ctx *ctx, hd_tensor *a, hd_tensor *b, hd_tensor **out) {
    if (light) return chain_light(ctx, a, b, out);
    hd_tensor *two = hd_tensor_number(ctx, HD_F64, 2.0), *t[7] = {0};
    hd_status st = hd_op_binary(ctx, HD_OP_MUL, a, two, &t[0]);
    if (!st) st = hd_op_binary(ctx, HD_OP_ADD, t[0], b, &t[1]);
    if (!st) st = hd_op_unary(ctx, HD_OP_TANH, t[1], &t[2]);
    if (!st) st = hd_op_unary(ctx, HD_OP_SIGMOID, b, &t[3]);
    if (!st) st = hd_op_binary(ctx, HD_OP_MUL, t[2], t[3], &t[4]);
    if (!st) st = hd_op_unary(ctx, HD_OP_NEG, a, &t[5]);
    if (!st) st = hd_op_unary(ctx, HD_OP_EXP, t[5], &t[6]);
    if (!st) st = hd_op_binary(ctx, HD_OP_SUB, t[4], t[6], out);
    hd_tensor_unref(two);
    for (int i = 0; i < 7; i++) hd_tensor_unref(t[i]);
    return st;
}

/* memcpy of n bytes on nt threads (each copies its part): seconds, best of
 * reps. */
static double time_memcpy(char *dst, const char *src, size_t n, int nt, int reps) {
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = now();
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int t = 0; t < nt; t++) {
            size_t lo = n / (size_t)nt * (size_t)t,
                   hi = t == nt - 1 ? n : n / (size_t)nt * (size_t)(t + 1);
            memcpy(dst + lo, src + lo, hi - lo);
        }
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

static double time_chain(hd_ctx *ctx, const hd_jit_compiler *c, hd_jit_exec *e, hd_tensor **in,
                         int reps) {
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        hd_tensor *y = NULL;
        double t0 = now();
        if (c ? c->run(ctx, e, in, 2, &y, 1) : chain(ctx, in[0], in[1], &y)) die(ctx, "chain");
        double dt = now() - t0;
        hd_tensor_unref(y);
        if (dt < best) best = dt;
    }
    return best;
}

static void bench_chain(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    hd_ctx_set_cache_limit(&ctx, (size_t)1 << 30); /* reuse freed outputs, as the VM does */
    int64_t n = (int64_t)1 << 24;
    hd_tensor *in[2] = {hd_tensor_new(&ctx, HD_F32, &n, 1), hd_tensor_new(&ctx, HD_F32, &n, 1)};
    if (!in[0] || !in[1]) die(&ctx, "alloc");
    float *a = in[0]->storage->data, *b = in[1]->storage->data;
    for (int64_t i = 0; i < n; i++) {
        a[i] = (float)((i * 7919) % 2001) * 1e-3f - 1.0f;
        b[i] = (float)((i * 104729) % 3001) * 1e-3f - 1.5f;
    }
    hd_ir_graph *g = NULL;
    hd_tensor *sa, *sb, *sy = NULL;
    if (hd_trace_begin(&ctx, "chain")) die(&ctx, "trace");
    sa = hd_trace_input(&ctx, "a", HD_F32, &n, 1);
    sb = hd_trace_input(&ctx, "b", HD_F32, &n, 1);
    if (chain(&ctx, sa, sb, &sy) || hd_trace_output(&ctx, "y", sy) || hd_trace_end(&ctx, &g))
        die(&ctx, "trace");
    hd_jit_exec *ei = NULL, *el = NULL;
    if (hd_jit_interp.compile(&ctx, g, NULL, &ei) || hd_jit_llvm.compile(&ctx, g, NULL, &el))
        die(&ctx, "compile");
    size_t bytes = (size_t)n * 4;
    char *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) die(&ctx, "malloc");
    memset(src, 1, bytes);
    memset(dst, 0, bytes);
    double moved = 3.0 * (double)bytes; /* the chain reads a, b and writes y */
    printf("chain %s, 16M f32 (GB/s of bytes read + written)\n",
           light ? "(a*2+b)*b-a" : "tanh(a*2+b)*sigmoid(b)-exp(-a)");
    for (int nt = 1; nt <= 2; nt++) {
        ctx.nthreads = nt;
        hd_tensor *y = NULL; /* warm up: page in the output buffers */
        for (int i = 0; i < 3; i++) {
            if (hd_jit_llvm.run(&ctx, el, in, 2, &y, 1)) die(&ctx, "run");
            hd_tensor_unref(y);
        }
        double te = time_chain(&ctx, NULL, NULL, in, 5);
        double ti = time_chain(&ctx, &hd_jit_interp, ei, in, 5);
        /* memcpy and llvm in alternate rounds, so that both see the machine
         * as it is (a shared machine's bandwidth moves from second to second) */
        double tm = 1e30, tl = 1e30;
        for (int r = 0; r < 21; r++) {
            double a = time_memcpy(dst, src, bytes, nt, 1),
                   b = time_chain(&ctx, &hd_jit_llvm, el, in, 1);
            tm = a < tm ? a : tm;
            tl = b < tl ? b : tl;
        }
        double gm = 2.0 * (double)bytes / tm * 1e-9;
        printf("  %d thread(s): memcpy %6.2f GB/s | eager %6.2f GB/s (%5.1f ms) | interp %6.2f "
               "GB/s (%5.1f ms) | llvm %6.2f GB/s (%5.1f ms) = %3.0f%% of memcpy\n",
               nt, gm, moved / te * 1e-9, te * 1e3, moved / ti * 1e-9, ti * 1e3, moved / tl * 1e-9,
               tl * 1e3, 100.0 * (moved / tl * 1e-9) / gm);
    }
    free(src);
    free(dst);
    hd_jit_interp.free(&ctx, ei);
    hd_jit_llvm.free(&ctx, el);
    hd_ir_graph_free(g);
    hd_tensor_unref(sa);
    hd_tensor_unref(sb);
    hd_tensor_unref(sy);
    hd_tensor_unref(in[0]);
    hd_tensor_unref(in[1]);
    hd_ctx_release(&ctx);
}

/* The chain's arithmetic alone: 16K elements (192 KB, in L2), one thread,
 * ns per element, best of 400 runs (the minimum is what the core can do,
 * and the figure least moved by other load on the machine). */
static void bench_chain_cache(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    ctx.nthreads = 1;
    int64_t n = 16384;
    hd_tensor *in[2] = {hd_tensor_new(&ctx, HD_F32, &n, 1), hd_tensor_new(&ctx, HD_F32, &n, 1)};
    if (!in[0] || !in[1]) die(&ctx, "alloc");
    float *a = in[0]->storage->data, *b = in[1]->storage->data;
    for (int64_t i = 0; i < n; i++) {
        a[i] = (float)((i * 7919) % 2001) * 1e-3f - 1.0f;
        b[i] = (float)((i * 104729) % 3001) * 1e-3f - 1.5f;
    }
    hd_ir_graph *g = NULL;
    hd_tensor *sa, *sb, *sy = NULL;
    if (hd_trace_begin(&ctx, "chain")) die(&ctx, "trace");
    sa = hd_trace_input(&ctx, "a", HD_F32, &n, 1);
    sb = hd_trace_input(&ctx, "b", HD_F32, &n, 1);
    if (chain(&ctx, sa, sb, &sy) || hd_trace_output(&ctx, "y", sy) || hd_trace_end(&ctx, &g))
        die(&ctx, "trace");
    hd_jit_exec *el = NULL;
    if (hd_jit_llvm.compile(&ctx, g, NULL, &el)) die(&ctx, "compile");
    double te = time_chain(&ctx, NULL, NULL, in, 400),
           tl = time_chain(&ctx, &hd_jit_llvm, el, in, 400);
    printf("  in cache (16K elements, 1 thread): eager %.3f ns/element, llvm %.3f ns/element\n",
           te / (double)n * 1e9, tl / (double)n * 1e9);
    hd_jit_llvm.free(&ctx, el);
    hd_ir_graph_free(g);
    hd_tensor_unref(sa);
    hd_tensor_unref(sb);
    hd_tensor_unref(sy);
    hd_tensor_unref(in[0]);
    hd_tensor_unref(in[1]);
    hd_ctx_release(&ctx);
}

/* ---- compile time ---- */

/* Trace and compile the MLP `reps` times; best total and its split. */
static void compile_times(hd_ctx *ctx, hd_tensor *x, hd_tensor **p, int reps, hd_jit_stats *best,
                          double *total) {
    *total = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        hd_ir_graph *g = trace_mlp(ctx, x, p);
        double t1 = now();
        hd_jit_exec *e = NULL;
        if (hd_jit_llvm.compile(ctx, g, NULL, &e)) die(ctx, "compile");
        double t = now() - t0;
        if (t < *total) {
            *total = t;
            hd_jit_llvm.stats(e, best);
            best->trace_seconds = t1 - t0;
        }
        hd_jit_llvm.free(ctx, e);
        hd_ir_graph_free(g);
    }
}

static void print_split(const char *what, double total, const hd_jit_stats *s) {
    printf("  %-7s %7.2f ms: trace %.2f, passes %.2f, llvm %.2f (IR %.2f, O2 %.2f, machine code "
           "%.2f, link %.2f)%s\n",
           what, total * 1e3, s->trace_seconds * 1e3, s->pass_seconds * 1e3, s->llvm_seconds * 1e3,
           s->llvm_ir_seconds * 1e3, s->llvm_opt_seconds * 1e3, s->llvm_obj_seconds * 1e3,
           s->llvm_link_seconds * 1e3, s->cache_hit ? " [cache hit]" : "");
}

static void bench_compile(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    hd_tensor *p[6] = {randn(&ctx, 512, 256, 0.05), randn(&ctx, 256, 0, 0.01),
                       randn(&ctx, 256, 128, 0.05), randn(&ctx, 128, 0, 0.01),
                       randn(&ctx, 128, 2, 0.05),   randn(&ctx, 2, 0, 0.01)};
    hd_tensor *x = randn(&ctx, 1, 512, 1.0);
    char dir[] = "/tmp/hodu-bench-cache-XXXXXX";
    if (!mkdtemp(dir)) die(&ctx, "mkdtemp");
    hd_jit_stats cold, warm;
    double tc, tw;
    setenv("HODU_CACHE_DIR", "off", 1);
    compile_times(&ctx, x, p, 7, &cold, &tc);
    setenv("HODU_CACHE_DIR", dir, 1);
    compile_times(&ctx, x, p, 1, &warm, &tw); /* fills the cache */
    compile_times(&ctx, x, p, 7, &warm, &tw);
    printf("compile the MLP graph (%d nodes traced; trace + passes + llvm, best of 7)\n",
           cold.nodes_traced);
    print_split("cold", tc, &cold);
    print_split("cached", tw, &warm);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "bench_llvm: could not remove %s\n", dir);
    hd_tensor_unref(x);
    for (int i = 0; i < 6; i++) hd_tensor_unref(p[i]);
}

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 1000, threads = argc > 2 ? atoi(argv[2]) : 1;
    if (calls < 1) calls = 1000;
    if (threads < 1) threads = 1;
    setenv("HODU_CACHE_DIR", "off", 1);
    printf("openblas kernels: %s, gemm: %s\n", cpu_blas_core(), cpu_blas_gemm_name());
    const char *only = getenv("BENCH_ONLY"); /* mlp, chain or compile */
    if (!only || !strcmp(only, "mlp")) bench_mlp(calls, threads);
    if (!only || !strcmp(only, "chain")) bench_chain();
    if (!only || !strcmp(only, "chain")) bench_chain_cache();
    light = 1;
    if (!only || !strcmp(only, "chain")) bench_chain();
    if (!only || !strcmp(only, "chain")) bench_chain_cache();
    if (!only || !strcmp(only, "compile")) bench_compile();
    return 0;
}

#endif /* HODU_HAVE_LLVM */
