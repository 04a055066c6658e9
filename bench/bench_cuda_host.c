/* Host time of CUDA calls where the device's work is negligible: an eager
 * elementwise op on one-element tensors (add, relu, a broadcasting mul),
 * and a compiled call (the cuda compiler, CUDA Graph replay) of a narrow
 * MLP 16-16-16-2 at batch 1 whose parameters are inputs of the graph.
 * Each figure is the best of 5 rounds of `calls` calls, in microseconds of
 * wall time per call, without synchronizing (the host's cost, as a
 * launch-bound loop sees it). On the emulator (bench/bench_cuda_host.sh)
 * HODU_EMU_NOLAUNCH=1 makes launches do nothing, so the figures are the
 * backend's host code plus the emulator's entry points; there the driver
 * calls per op are printed too (hodu_emu_calls).
 *
 *   build/bench/bench_cuda_host [calls]                                 */
#include "hd_backend.h"
#include "hd_compile.h"
#include "hd_trace.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(hd_ctx *ctx) {
    fprintf(stderr, "bench_cuda_host: %s\n", hd_error_message(ctx));
    exit(1);
}

/* The emulator's call counter, when the driver is the emulator. */
typedef unsigned long long (*calls_fn)(const char *);
static calls_fn emu_calls;
static void (*emu_reset)(void);

static void emu_open(void) {
    const char *lib = getenv("HODU_CUDA_DRIVER");
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (!h) return;
    *(void **)&emu_calls = dlsym(h, "hodu_emu_calls");
    *(void **)&emu_reset = dlsym(h, "hodu_emu_calls_reset");
}

static void emu_print(int calls) {
    static const char *const names[] = {
        "cuLaunchKernel",       "cuGraphLaunch", "cuModuleGetFunction", "cuCtxSetCurrent",
        "cuMemcpyDtoDAsync_v2", "cuMemAlloc_v2", "cuStreamSynchronize"};
    if (!emu_calls) return;
    printf("      driver calls per call:");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        printf(" %s %.2f", names[i], (double)emu_calls(names[i]) / calls);
    printf("\n");
}

static hd_tensor *dev_randn(hd_ctx *ctx, int64_t rows, int64_t cols) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.dtype = HD_F32;
    at.nshape = cols ? 2 : 1;
    at.shape[0] = rows;
    at.shape[1] = cols;
    at.scalar[1] = 0.1;
    hd_tensor *t = NULL, *d = NULL;
    if (hd_op_run(ctx, HD_OP_RANDN, NULL, 0, &at, &t) ||
        hd_tensor_to_device(ctx, t, &hd_cuda_backend, 0, &d))
        die(ctx);
    hd_tensor_unref(t);
    return d;
}

/* Best time per call of op over in (5 rounds of calls), in microseconds. */
static double time_op(hd_ctx *ctx, hd_op op, hd_tensor **in, int nin, int calls) {
    hd_tensor *r = NULL;
    for (int i = 0; i < 100; i++) {
        if (hd_op_run(ctx, op, in, nin, NULL, &r)) die(ctx);
        hd_tensor_unref(r);
    }
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        if (emu_reset) emu_reset();
        double t0 = now();
        for (int i = 0; i < calls; i++) {
            if (hd_op_run(ctx, op, in, nin, NULL, &r)) die(ctx);
            hd_tensor_unref(r);
        }
        double t = (now() - t0) / calls * 1e6;
        if (t < best) best = t;
    }
    return best;
}

static void bench_eager(hd_ctx *ctx, int calls) {
    hd_tensor *x = dev_randn(ctx, 1, 0), *y = dev_randn(ctx, 1, 0);
    hd_tensor *a = dev_randn(ctx, 4, 1), *b = dev_randn(ctx, 1, 4);
    hd_tensor *xy[2] = {x, y}, *ab[2] = {a, b};
    printf("eager, one-element f32 on cuda:0, %d calls\n", calls);
    printf("  add(x, y)            %8.2f us/op\n", time_op(ctx, HD_OP_ADD, xy, 2, calls));
    emu_print(calls);
    printf("  relu(x)              %8.2f us/op\n", time_op(ctx, HD_OP_RELU, xy, 1, calls));
    emu_print(calls);
    printf("  mul([4,1], [1,4])    %8.2f us/op\n", time_op(ctx, HD_OP_MUL, ab, 2, calls));
    emu_print(calls);
    hd_tensor_unref(x);
    hd_tensor_unref(y);
    hd_tensor_unref(a);
    hd_tensor_unref(b);
}

static hd_tensor *linear(hd_ctx *ctx, hd_tensor *x, hd_tensor *w, hd_tensor *b, int relu) {
    hd_tensor *h = NULL, *hb = NULL, *r = NULL;
    hd_tensor *in1[2] = {x, w};
    if (hd_op_run(ctx, HD_OP_MATMUL, in1, 2, NULL, &h)) die(ctx);
    hd_tensor *in2[2] = {h, b};
    if (hd_op_run(ctx, HD_OP_ADD, in2, 2, NULL, &hb)) die(ctx);
    hd_tensor_unref(h);
    if (!relu) return hb;
    if (hd_op_run(ctx, HD_OP_RELU, &hb, 1, NULL, &r)) die(ctx);
    hd_tensor_unref(hb);
    return r;
}

/* The MLP traced with x and its six parameters as inputs (as a compiled
 * function's captured parameters are). */
static hd_ir_graph *trace_mlp(hd_ctx *ctx, hd_tensor *const *args) {
    static const char *const names[] = {"x", "w1", "b1", "w2", "b2", "w3", "b3"};
    hd_tensor *s[7];
    hd_ir_graph *g = NULL;
    if (hd_trace_begin(ctx, "mlp")) die(ctx);
    for (int i = 0; i < 7; i++)
        if (!(s[i] = hd_trace_input(ctx, names[i], HD_F32, args[i]->shape, args[i]->ndim)))
            die(ctx);
    hd_tensor *h1 = linear(ctx, s[0], s[1], s[2], 1), *h2 = linear(ctx, h1, s[3], s[4], 1);
    hd_tensor *y = linear(ctx, h2, s[5], s[6], 0);
    if (hd_trace_output(ctx, "y", y) || hd_trace_end(ctx, &g)) die(ctx);
    hd_tensor *all[] = {h1, h2, y, s[0], s[1], s[2], s[3], s[4], s[5], s[6]};
    for (int i = 0; i < 10; i++) hd_tensor_unref(all[i]);
    return g;
}

static void bench_compiled(hd_ctx *ctx, int calls) {
    hd_tensor *args[7] = {dev_randn(ctx, 1, 16),  dev_randn(ctx, 16, 16), dev_randn(ctx, 16, 0),
                          dev_randn(ctx, 16, 16), dev_randn(ctx, 16, 0),  dev_randn(ctx, 16, 2),
                          dev_randn(ctx, 2, 0)};
    hd_ir_graph *g = trace_mlp(ctx, args);
    hd_jit_options o;
    hd_jit_options_init(&o);
    o.device = "cuda:0";
    hd_jit_exec *e = NULL;
    if (hd_jit_cuda.compile(ctx, g, &o, &e)) die(ctx);
    hd_tensor *y = NULL;
    for (int i = 0; i < 100; i++) {
        if (hd_jit_cuda.run(ctx, e, args, 7, &y, 1)) die(ctx);
        hd_tensor_unref(y);
    }
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        if (emu_reset) emu_reset();
        double t0 = now();
        for (int i = 0; i < calls; i++) {
            if (hd_jit_cuda.run(ctx, e, args, 7, &y, 1)) die(ctx);
            hd_tensor_unref(y);
        }
        double t = (now() - t0) / calls * 1e6;
        if (t < best) best = t;
    }
    hd_jit_stats st;
    hd_jit_cuda.stats(e, &st);
    printf("compiled (cuda), mlp 16-16-16-2 batch 1, x and 6 parameters as inputs, %d calls\n",
           calls);
    printf("  call                 %8.2f us/call (%s)\n", best,
           st.cuda_graph ? "one CUDA Graph" : "launch by launch");
    emu_print(calls);
    hd_jit_cuda.free(ctx, e);
    hd_ir_graph_free(g);
    for (int i = 0; i < 7; i++) hd_tensor_unref(args[i]);
}

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 20000;
    if (calls < 1) calls = 20000;
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    if (hd_cuda_backend.available(&ctx, 0)) die(&ctx);
    emu_open();
    bench_eager(&ctx, calls);
    bench_compiled(&ctx, calls / 4 > 0 ? calls / 4 : 1);
    hd_ctx_release(&ctx);
    return 0;
}
