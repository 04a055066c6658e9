/* Elementwise benchmark.
 *
 * 1. Eager overhead: a 1-element f32 add through hd_op_run (plan, output
 *    allocation, kernel, release), ns per op.
 * 2. Throughput on 16M f32 elements: c = a + b and c = exp(a), in GB/s
 *    counted as bytes read + written, beside a plain memcpy moving the same
 *    total bytes (memcpy of half as many bytes: it reads and writes each),
 *    split over the same number of threads. "kernel" runs into an output
 *    that is already allocated and touched; "eager" goes through hd_op_run
 *    and so also pays for allocating (and page-faulting) a new output.
 *    Each figure is the best of several runs, with ctx nthreads 1 and 2.
 * 3. Kernel cost in cache: ns per element for some op/dtype/layout pairs
 *    on 4096 elements, one thread (what the vectorized loops cost).
 *
 * Usage: bench_elementwise [elements]   (default 16777216) */
#include "hd_op.h"
#include "hd_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPS 7

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(hd_ctx *ctx, const char *what) {
    fprintf(stderr, "bench_elementwise: %s: %s\n", what, hd_error_message(ctx));
    exit(1);
}

static double bench_overhead(hd_ctx *ctx) {
    int64_t shape[1] = {1};
    hd_tensor *a = hd_tensor_scalar(ctx, HD_F32, 1.0), *b = NULL;
    hd_tensor *in[2];
    b = hd_tensor_new(ctx, HD_F32, shape, 1);
    if (!a || !b) die(ctx, "alloc");
    ((float *)b->storage->data)[0] = 2.0f;
    in[0] = b, in[1] = b;
    const int n = 100000;
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        for (int i = 0; i < n; i++) {
            hd_tensor *c = NULL;
            if (hd_op_run(ctx, HD_OP_ADD, in, 2, NULL, &c)) die(ctx, "add");
            hd_tensor_unref(c);
        }
        double dt = (now() - t0) / n;
        if (dt < best) best = dt;
    }
    hd_tensor_unref(a);
    hd_tensor_unref(b);
    return best * 1e9;
}

/* memcpy of nbytes split over nthreads, as the kernels split their work. */
static void par_memcpy(char *dst, const char *src, size_t nbytes, int nthreads) {
    size_t chunk = (nbytes / (size_t)nthreads + 63) & ~(size_t)63;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int t = 0; t < nthreads; t++) {
        size_t s = (size_t)t * chunk, e = s + chunk < nbytes ? s + chunk : nbytes;
        if (s < e) memcpy(dst + s, src + s, e - s);
    }
}

static double best_memcpy(char *dst, const char *src, size_t nbytes, int nthreads) {
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t0 = now();
        par_memcpy(dst, src, nbytes, nthreads);
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

/* Best time of op into a preallocated out (kernel) or through hd_op_run. */
static double best_op(hd_ctx *ctx, hd_op op, hd_tensor **in, int nin, hd_tensor *out, int eager) {
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t0 = now(), dt;
        if (eager) {
            hd_tensor *c = NULL;
            if (hd_op_run(ctx, op, in, nin, NULL, &c)) die(ctx, hd_op_name(op));
            dt = now() - t0;
            hd_tensor_unref(c);
        } else {
            if (hd_cpu_backend.run_op(ctx, op, out, in, nin, NULL)) die(ctx, hd_op_name(op));
            dt = now() - t0;
        }
        if (dt < best) best = dt;
    }
    return best;
}

/* ns per element of op over n elements (kernel only, in cache). */
static double in_cache(hd_ctx *ctx, hd_op op, hd_dtype dt, int transposed) {
    int64_t shape[2] = {64, 64};
    hd_tensor *a = hd_tensor_zeros(ctx, dt, shape, 2), *b = hd_tensor_zeros(ctx, dt, shape, 2);
    if (!a || !b) die(ctx, "alloc");
    int pos =
        op == HD_OP_LOG || op == HD_OP_POW || op == HD_OP_SQRT || op == HD_OP_RSQRT; /* a > 0 */
    for (int64_t i = 0; i < a->numel; i++) {
        hd_dtype_store(dt, a->storage->data, i, (double)(i % 17) * 0.25 - (pos ? -0.1 : 2));
        hd_dtype_store(dt, b->storage->data, i, (double)(i % 13) * 0.5 + 1);
    }
    if (transposed) {
        hd_attrs at = {0};
        at.nshape = 2;
        at.shape[0] = 1;
        hd_tensor *t = NULL;
        if (hd_op_run(ctx, HD_OP_PERMUTE, &a, 1, &at, &t)) die(ctx, "permute");
        hd_tensor_unref(a);
        a = t;
    }
    hd_dtype odt = hd_op_infos[op].kind == HD_KIND_COMPARE ? HD_BOOL
                   : op == HD_OP_CAST                      ? HD_F16
                                                           : dt;
    hd_tensor *out = hd_tensor_zeros(ctx, odt, shape, 2), *in[3] = {a, b, b};
    hd_attrs at = {0};
    at.dtype = odt;
    int nin = hd_op_infos[op].arity;
    if (op == HD_OP_WHERE) {
        hd_tensor *c = hd_tensor_zeros(ctx, HD_BOOL, shape, 2);
        for (int64_t i = 0; i < c->numel; i++) ((uint8_t *)c->storage->data)[i] = i % 3 == 0;
        in[0] = c;
        in[1] = a;
    }
    double best = 1e30;
    for (int r = 0; r < 300; r++) {
        double t0 = now();
        if (hd_cpu_backend.run_op(ctx, op, out, in, nin, &at)) die(ctx, hd_op_name(op));
        double dt_ = now() - t0;
        if (dt_ < best) best = dt_;
    }
    if (op == HD_OP_WHERE) hd_tensor_unref(in[0]);
    hd_tensor_unref(out);
    hd_tensor_unref(a);
    hd_tensor_unref(b);
    return best / 4096 * 1e9;
}

static void row(const char *name, int nt, double bytes, double t_op, double t_eager,
                double t_copy) {
    double gbs = bytes / t_op * 1e-9, gbs_e = bytes / t_eager * 1e-9, gbs_c = bytes / t_copy * 1e-9;
    printf("%-10s %7d %9.2f %11.2f %11.2f %11.2f %8.2f %8.2f\n", name, nt, t_op * 1e3, gbs, gbs_e,
           gbs_c, gbs / gbs_c, gbs_e / gbs_c);
}

int main(int argc, char **argv) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    /* as the VM runs: freed large blocks are reused rather than returned */
    hd_ctx_set_cache_limit(&ctx, (size_t)1 << 30);
    int64_t n = argc > 1 ? atoll(argv[1]) : (int64_t)1 << 24;
    if (n <= 0) n = (int64_t)1 << 24;

    ctx.nthreads = 1;
    printf("eager overhead: 1-element f32 add through hd_op_run: %.0f ns/op\n\n",
           bench_overhead(&ctx));

    int64_t shape[1] = {n};
    hd_tensor *a = hd_tensor_new(&ctx, HD_F32, shape, 1),
              *b = hd_tensor_new(&ctx, HD_F32, shape, 1);
    hd_tensor *c = hd_tensor_new(&ctx, HD_F32, shape, 1);
    size_t nb = (size_t)n * 4;
    char *src = malloc(nb * 3 / 2), *dst = malloc(nb * 3 / 2);
    if (!a || !b || !c || !src || !dst) die(&ctx, "alloc");
    float *pa = a->storage->data, *pb = b->storage->data;
    for (int64_t i = 0; i < n; i++) {
        pa[i] = (float)(i % 1000) * 1e-3f - 0.5f;
        pb[i] = (float)(i % 777) * 1e-2f;
    }
    memset(c->storage->data, 0, nb);
    memset(src, 1, nb * 3 / 2);
    memset(dst, 0, nb * 3 / 2);

    printf("%lld f32 elements; GB/s = (bytes read + written) / time; best of %d\n", (long long)n,
           REPS);
    printf("%-10s %7s %9s %11s %11s %11s %8s %8s\n", "op", "threads", "ms", "kernel GB/s",
           "eager GB/s", "memcpy GB/s", "kernel/m", "eager/m");
    for (int nt = 1; nt <= 2; nt++) {
        ctx.nthreads = nt;
        hd_tensor *in2[2] = {a, b}, *in1[1] = {a};
        double add_bytes = 3.0 * (double)nb, exp_bytes = 2.0 * (double)nb;
        double t_add = best_op(&ctx, HD_OP_ADD, in2, 2, c, 0);
        double t_add_e = best_op(&ctx, HD_OP_ADD, in2, 2, c, 1);
        double t_cp3 = best_memcpy(dst, src, nb * 3 / 2, nt);
        row("add", nt, add_bytes, t_add, t_add_e, t_cp3);
        double t_exp = best_op(&ctx, HD_OP_EXP, in1, 1, c, 0);
        double t_exp_e = best_op(&ctx, HD_OP_EXP, in1, 1, c, 1);
        double t_cp2 = best_memcpy(dst, src, nb, nt);
        row("exp", nt, exp_bytes, t_exp, t_exp_e, t_cp2);
    }
    printf("\nkernel/m, eager/m = GB/s of the kernel alone / of hd_op_run with a fresh output,\n"
           "each over memcpy GB/s of the same bytes\n\n");

    static const struct {
        hd_op op;
        hd_dtype dt;
        int transposed;
    } cases[] = {
        {HD_OP_ADD, HD_F32, 0},     {HD_OP_ADD, HD_F32, 1},      {HD_OP_ADD, HD_F64, 0},
        {HD_OP_ADD, HD_F16, 0},     {HD_OP_ADD, HD_BF16, 0},     {HD_OP_ADD, HD_I32, 0},
        {HD_OP_ADD, HD_I8, 0},      {HD_OP_MUL, HD_I64, 0},      {HD_OP_LT, HD_F32, 0},
        {HD_OP_MAXIMUM, HD_F32, 0}, {HD_OP_EXP, HD_F32, 0},      {HD_OP_EXP, HD_F16, 0},
        {HD_OP_SIGMOID, HD_F32, 0}, {HD_OP_TANH, HD_F32, 0},     {HD_OP_LOG, HD_F32, 0},
        {HD_OP_SILU, HD_F32, 0},    {HD_OP_SOFTPLUS, HD_F32, 0}, {HD_OP_GELU, HD_F32, 0},
        {HD_OP_SIN, HD_F32, 0},     {HD_OP_COS, HD_F32, 0},      {HD_OP_POW, HD_F32, 0},
        {HD_OP_ERF, HD_F32, 0},     {HD_OP_ERFC, HD_F32, 0},     {HD_OP_SQRT, HD_F32, 0},
        {HD_OP_RSQRT, HD_F32, 0},   {HD_OP_FLOOR, HD_F32, 0},    {HD_OP_CEIL, HD_F32, 0},
        {HD_OP_EXP, HD_F64, 0},     {HD_OP_RELU, HD_F32, 0},     {HD_OP_WHERE, HD_F32, 0},
        {HD_OP_CAST, HD_F32, 0},    {HD_OP_COPY, HD_F32, 1},
    };
    ctx.nthreads = 1;
    printf("in cache, 4096 elements, one thread:\n%-10s %-5s %-11s %8s\n", "op", "dtype", "layout",
           "ns/elem");
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        printf("%-10s %-5s %-11s %8.3f\n", hd_op_name(cases[k].op), hd_dtype_name(cases[k].dt),
               cases[k].transposed ? "transposed" : "contiguous",
               in_cache(&ctx, cases[k].op, cases[k].dt, cases[k].transposed));
    free(src);
    free(dst);
    hd_tensor_unref(a);
    hd_tensor_unref(b);
    hd_tensor_unref(c);
    hd_ctx_release(&ctx);
    return 0;
}
