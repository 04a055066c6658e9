/* The fused cuda compiler (jit/hd_cuda_jit.c, hd_cuda_gen.c).
 *
 * Everywhere NVRTC loads (no GPU needed): for each graph below (the chain
 * tanh(a * 2 + b) * sigmoid(b) - exp(-a), broadcasting chains, random
 * elementwise chains, reductions with a prologue, a full reduction split
 * in two passes, the d2l MLP 512-256-128-2, softmax and layer_norm rows,
 * f16/bf16 chains) the generated module compiles for sm_80 and sm_90 and
 * holds the expected number of kernels.
 *
 * With a GPU: the compiled graph against eager cpu on the same inputs
 * (f32 to 1e-5 relative, f64 1e-12, f16 2e-3, bf16 1e-2), three runs (one
 * by one, captured, replayed), and the stats: kernels per run, and one
 * launch per run once the run is a CUDA Graph. Without a GPU that part
 * reports SKIPPED (77) after the compile checks passed. */
#include "hd_compile.h"
#include "hd_cuda_gen.h"
#include "hd_test.h"
#include "hd_test_trace.h"
#include "hd_trace.h"

#if HODU_HAVE_CUDA

typedef struct fuse_case {
    const char *name;
    body_fn body;
    int nin, nout;
    hd_dtype dt;
    int64_t shapes[4][4];
    int nd[4];
    int kernels;  /* generated kernels (__global__ functions) */
    int eager;    /* nodes run by eager kernels (matmul included) */
    int replayed; /* runs as one CUDA Graph */
    void *ud;
} fuse_case;

/* Run ops on a value stack: t[k] = op(...); the caller frees t. */
#define STEP(call)                                                                                 \
    do {                                                                                           \
        if (!st) st = (call);                                                                      \
    } while (0)

static hd_status chain_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    (void)ud;
    hd_tensor *two = hd_tensor_number(ctx, HD_F64, 2.0), *t[7] = {0};
    hd_status st = two ? HD_OK : ctx->status;
    STEP(op2(ctx, HD_OP_MUL, in[0], two, &t[0]));
    STEP(op2(ctx, HD_OP_ADD, t[0], in[1], &t[1]));
    STEP(op1(ctx, HD_OP_TANH, t[1], NULL, &t[2]));
    STEP(op1(ctx, HD_OP_SIGMOID, in[1], NULL, &t[3]));
    STEP(op2(ctx, HD_OP_MUL, t[2], t[3], &t[4]));
    STEP(op1(ctx, HD_OP_NEG, in[0], NULL, &t[5]));
    STEP(op1(ctx, HD_OP_EXP, t[5], NULL, &t[6]));
    STEP(op2(ctx, HD_OP_SUB, t[4], t[6], out));
    hd_tensor_unref(two);
    for (int i = 0; i < 7; i++) hd_tensor_unref(t[i]);
    return st;
}

/* (a[4,1,6] + b[3,6]) * c[6] -> relu, and max(a, 0.5 - b) as a second
 * output of another shape */
static hd_status bcast_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    (void)ud;
    hd_tensor *half = hd_tensor_number(ctx, HD_F64, 0.5), *t[3] = {0};
    hd_status st = half ? HD_OK : ctx->status;
    STEP(op2(ctx, HD_OP_ADD, in[0], in[1], &t[0]));
    STEP(op2(ctx, HD_OP_MUL, t[0], in[2], &t[1]));
    STEP(op1(ctx, HD_OP_RELU, t[1], NULL, &out[0]));
    STEP(op2(ctx, HD_OP_SUB, half, in[1], &t[2]));
    STEP(op2(ctx, HD_OP_MAXIMUM, in[0], t[2], &out[1]));
    hd_tensor_unref(half);
    for (int i = 0; i < 3; i++) hd_tensor_unref(t[i]);
    return st;
}

/* A random chain: each step applies a unary op to, or combines with a
 * binary op, values chosen by a fixed generator (ud: the seed). */
static hd_status random_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    static const hd_op un[] = {HD_OP_TANH, HD_OP_SIGMOID, HD_OP_SIN,
                               HD_OP_ABS,  HD_OP_RELU,    HD_OP_NEG};
    static const hd_op bin[] = {HD_OP_ADD, HD_OP_SUB, HD_OP_MUL, HD_OP_MAXIMUM, HD_OP_MINIMUM};
    uint32_t r = (uint32_t)(uintptr_t)ud;
    hd_tensor *v[16] = {in[0], in[1], in[2]};
    int n = 3;
    hd_status st = HD_OK;
    for (int k = 0; k < 10 && !st; k++) {
        r = r * 1664525u + 1013904223u;
        int a = (int)((r >> 8) % (uint32_t)n), b = (int)((r >> 16) % (uint32_t)n);
        if ((r >> 28) & 1)
            st = op1(ctx, un[(r >> 4) % 6], v[a], NULL, &v[n]);
        else
            st = op2(ctx, bin[(r >> 4) % 5], v[a], v[b], &v[n]);
        if (!st) n++;
    }
    if (!st) st = op2(ctx, HD_OP_ADD, v[n - 1], v[n - 2], &out[0]);
    for (int i = 3; i < n; i++) hd_tensor_unref(v[i]);
    return st;
}

/* sum(exp(a) * b, axis 1) and max(a * b) over everything */
static hd_status reduce_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    (void)ud;
    hd_tensor *t[3] = {0};
    hd_attrs ax;
    memset(&ax, 0, sizeof ax);
    ax.naxes = 1;
    ax.axes[0] = 1;
    hd_status st = op1(ctx, HD_OP_EXP, in[0], NULL, &t[0]);
    STEP(op2(ctx, HD_OP_MUL, t[0], in[1], &t[1]));
    STEP(op1(ctx, HD_OP_SUM, t[1], &ax, &out[0]));
    STEP(op2(ctx, HD_OP_MUL, in[0], in[1], &t[2]));
    STEP(op1(ctx, HD_OP_MAX, t[2], NULL, &out[1]));
    for (int i = 0; i < 3; i++) hd_tensor_unref(t[i]);
    return st;
}

/* mean(a * a) over 2^20 + 3 elements: a split pass and a final pass */
static hd_status big_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    (void)ud;
    hd_tensor *t = NULL;
    hd_status st = op2(ctx, HD_OP_MUL, in[0], in[0], &t);
    STEP(op1(ctx, HD_OP_MEAN, t, NULL, &out[0]));
    hd_tensor_unref(t);
    return st;
}

/* var and logsumexp over rows, with a prologue */
static hd_status var_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    (void)ud;
    hd_tensor *t = NULL;
    hd_attrs ax;
    memset(&ax, 0, sizeof ax);
    ax.naxes = 1;
    ax.axes[0] = -1;
    ax.ints[0] = 1;
    hd_status st = op1(ctx, HD_OP_SIN, in[0], NULL, &t);
    STEP(op1(ctx, HD_OP_VAR, t, &ax, &out[0]));
    STEP(op1(ctx, HD_OP_LOGSUMEXP, in[0], &ax, &out[1]));
    hd_tensor_unref(t);
    return st;
}

/* The d2l MLP: relu(x @ w1 + b1) -> relu(@ w2 + b2) -> @ w3 + b3, with
 * 512-256-128-2 and the parameters as inputs. */
static hd_status mlp_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    (void)ud;
    hd_tensor *h = in[0], *t[8] = {0};
    hd_status st = HD_OK;
    for (int l = 0; l < 3 && !st; l++) {
        STEP(op2(ctx, HD_OP_MATMUL, h, in[1 + 2 * l], &t[3 * l % 8]));
        if (l == 2) {
            STEP(op2(ctx, HD_OP_ADD, t[6], in[6], out));
            break;
        }
        STEP(op2(ctx, HD_OP_ADD, t[3 * l], in[2 + 2 * l], &t[3 * l + 1]));
        STEP(op1(ctx, HD_OP_RELU, t[3 * l + 1], NULL, &t[3 * l + 2]));
        h = t[3 * l + 2];
    }
    for (int i = 0; i < 8; i++) hd_tensor_unref(t[i]);
    return st;
}

static hd_status rows_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    (void)ud;
    hd_attrs a;
    memset(&a, 0, sizeof a);
    a.ints[0] = -1;
    hd_tensor *t = NULL, *s = NULL;
    hd_status st = op1(ctx, HD_OP_SIN, in[0], NULL, &t);
    STEP(op1(ctx, HD_OP_SOFTMAX, t, &a, &out[0]));
    STEP(op1(ctx, HD_OP_LOG_SOFTMAX, in[0], &(hd_attrs){.ints = {0}}, &out[1]));
    a.ints[0] = 1;
    a.scalar[0] = 1e-5;
    STEP(op1(ctx, HD_OP_COS, in[0], NULL, &s));
    if (!st)
        st = hd_op_run(ctx, HD_OP_LAYER_NORM, (hd_tensor *[]){s, in[1], in[2]}, 3, &a, &out[2]);
    hd_tensor_unref(t);
    hd_tensor_unref(s);
    return st;
}

static const fuse_case cases[] = {
    {"chain f32", chain_body, 2, 1, HD_F32, {{1000}, {1000}}, {1, 1}, 1, 0, 1, NULL},
    {"chain f16", chain_body, 2, 1, HD_F16, {{257}, {257}}, {1, 1}, 1, 0, 1, NULL},
    {"chain bf16", chain_body, 2, 1, HD_BF16, {{33, 5}, {33, 5}}, {2, 2}, 1, 0, 1, NULL},
    {"chain f64", chain_body, 2, 1, HD_F64, {{7}, {7}}, {1, 1}, 1, 0, 1, NULL},
    {"broadcast", bcast_body, 3, 2, HD_F32, {{4, 1, 6}, {3, 6}, {6}}, {3, 2, 1}, 3, 0, 1, NULL},
    {"random 1",
     random_body,
     3,
     1,
     HD_F32,
     {{4, 1, 6}, {3, 6}, {6}},
     {3, 2, 1},
     -1,
     0,
     1,
     (void *)1},
    {"random 2",
     random_body,
     3,
     1,
     HD_F32,
     {{5, 6}, {5, 1}, {1, 6}},
     {2, 2, 2},
     -1,
     0,
     1,
     (void *)2},
    {"random 3",
     random_body,
     3,
     1,
     HD_F16,
     {{2, 3, 4}, {3, 4}, {2, 1, 4}},
     {3, 2, 3},
     -1,
     0,
     1,
     (void *)3},
    {"reduce", reduce_body, 2, 2, HD_F32, {{37, 300}, {37, 300}}, {2, 2}, 2, 0, 1, NULL},
    {"split mean", big_body, 1, 1, HD_F32, {{(1 << 20) + 3}}, {1}, 2, 0, 1, NULL},
    {"var lse", var_body, 1, 2, HD_F64, {{9, 70}}, {2}, 2, 0, 1, NULL},
    {"mlp",
     mlp_body,
     7,
     1,
     HD_F32,
     {{64, 512}, {512, 256}, {256}, {256, 128}},
     {2, 2, 1, 2},
     3,
     3,
     1,
     NULL},
    {"rows f32", rows_body, 3, 3, HD_F32, {{6, 50}, {50}, {50}}, {2, 1, 1}, 5, 0, 1, NULL},
    {"rows bf16", rows_body, 3, 3, HD_BF16, {{3, 7}, {7}, {7}}, {2, 1, 1}, 5, 0, 1, NULL},
};

/* The MLP's last inputs (b2, w3, b3) do not fit the table's four shapes. */
static void case_shape(const fuse_case *c, int i, int64_t *shape, int *nd) {
    static const int64_t mlp_rest[3][2] = {{128}, {128, 2}, {2}};
    static const int mlp_nd[3] = {1, 2, 1};
    if (c->body == mlp_body && i >= 4) {
        memcpy(shape, mlp_rest[i - 4], sizeof mlp_rest[0]);
        *nd = mlp_nd[i - 4];
        return;
    }
    memcpy(shape, c->shapes[i], sizeof c->shapes[i]);
    *nd = c->nd[i];
}

/* Inputs: a deterministic sequence in [-1.5, 1.5) (the MLP's weights
 * scaled down so activations stay near 1). */
static hd_tensor *case_input(hd_ctx *ctx, const fuse_case *c, int i) {
    int64_t shape[4];
    int nd;
    case_shape(c, i, shape, &nd);
    hd_tensor *t = hd_tensor_new(ctx, c->dt, shape, nd);
    double scale = c->body == mlp_body && i > 0 ? 0.1 : 1.0;
    for (int64_t k = 0; t && k < t->numel; k++)
        hd_dtype_store(c->dt, t->storage->data, k,
                       scale * ((double)((k * 7919 + i * 104729) % 3001) / 1000.0 - 1.5));
    return t;
}

static hd_ir_graph *trace_case(hd_ctx *ctx, const fuse_case *c, hd_tensor *const *in) {
    return trace_body(ctx, c->name, c->body, in, c->nin, c->nout, c->ud);
}

static int count_kernels(const char *src) {
    int n = 0;
    for (const char *p = src; (p = strstr(p, "__global__")); p++) n++;
    return n;
}

/* ---- the generated source, compiled with NVRTC (no GPU) ---- */

static void check_source(hd_ctx *ctx, const fuse_case *c, hd_ir_graph *g) {
    hd_ir_graph *opt = hd_ir_graph_clone(g);
    hd_jit_options o;
    hd_jit_options_init(&o);
    hd_jit_stats st;
    memset(&st, 0, sizeof st);
    hd_plan plan;
    hd_cuda_src s;
    hd_cuda_gen_info info;
    hd_cuda_src_init(&s, ctx);
    int ok = opt && !hd_jit_optimize(ctx, opt, &o, &st) && !hd_plan_build(opt, 0, &plan) &&
             !hd_cuda_gen_module(ctx, &plan, 132 * 8, &s, &info);
    CHECK_MSG(ok, "%s: %s", c->name, ctx->errmsg);
    if (ok) {
        int nk = count_kernels(s.text);
        if (c->kernels >= 0)
            CHECK_MSG(nk == c->kernels, "%s: %d kernels, %d expected:\n%s", c->name, nk, c->kernels,
                      s.text + strlen(hd_cuda_prelude()));
        else
            CHECK_MSG(nk >= 1 && nk <= plan.nkernels + 1, "%s: %d kernels", c->name, nk);
        int eager = 0;
        for (int k = 0; k < plan.nsteps; k++) eager += plan.steps[k].kernel < 0;
        CHECK_MSG(eager == c->eager, "%s: %d eager nodes", c->name, eager);
        static const int archs[] = {80, 90};
        for (int a = 0; a < 2; a++) {
            void *img = NULL;
            size_t n = 0;
            hd_status r = hd_cuda_nvrtc_compile(ctx, s.text, s.len, archs[a], 0, &img, &n);
            CHECK_MSG(r == HD_OK && n > 0, "%s for sm_%d: %s", c->name, archs[a], ctx->errmsg);
            if (img) hd_ctx_free(ctx, img, n);
            hd_error_clear(ctx);
        }
        hd_cuda_gen_info_free(ctx, &info);
    }
    hd_error_clear(ctx);
    hd_cuda_src_free(&s);
    hd_ir_graph_free(opt);
}

/* ---- on the GPU: compiled cuda against eager cpu ---- */

static double case_tol(hd_dtype dt) {
    return dt == HD_F64 ? 1e-12 : dt == HD_F32 ? 1e-5 : dt == HD_F16 ? 2e-3 : 1e-2;
}

static void check_same(const fuse_case *c, int run, int k, const hd_tensor *want,
                       const hd_tensor *got) {
    CHECK_MSG(got && got->numel == want->numel && got->dtype == want->dtype, "%s: output %d",
              c->name, k);
    if (!got || got->numel != want->numel) return;
    double tol = case_tol(want->dtype), atol = tol * 1e-2;
    /* matmuls sum in different orders (cuBLAS, OpenBLAS): an element that
     * cancels can differ by more than tol relative; the bound is tol of the
     * output's scale */
    if (c->body == mlp_body)
        for (int64_t i = 0; i < want->numel; i++)
            atol = fmax(atol, tol * fabs(hd_tensor_get(want, i)));
    int bad = 0;
    for (int64_t i = 0; i < want->numel && !bad; i++) {
        double x = hd_tensor_get(want, i), y = hd_tensor_get(got, i);
        if (!hd_test_close(y, x, tol, atol)) {
            fprintf(stderr, "%s run %d output %d element %lld: cpu %.10g cuda %.10g\n", c->name,
                    run, k, (long long)i, x, y);
            bad = 1;
        }
    }
    CHECK(!bad);
}

static void check_gpu(hd_ctx *ctx, const fuse_case *c, hd_ir_graph *g, hd_tensor *const *in,
                      hd_tensor *const *want) {
    hd_tensor *din[8] = {0};
    for (int i = 0; i < c->nin; i++)
        CHECK(hd_tensor_to_device(ctx, in[i], &hd_cuda_backend, 0, &din[i]) == HD_OK);
    hd_jit_options o;
    hd_jit_options_init(&o);
    o.device = "cuda:0";
    hd_jit_exec *e = NULL;
    CHECK_MSG(hd_jit_cuda.compile(ctx, g, &o, &e) == HD_OK, "%s: %s", c->name, ctx->errmsg);
    for (int run = 0; e && run < 3; run++) {
        hd_tensor *got[4] = {0};
        hd_status st = hd_jit_cuda.run(ctx, e, din, c->nin, got, c->nout);
        CHECK_MSG(st == HD_OK, "%s run %d: %s", c->name, run, ctx->errmsg);
        for (int k = 0; k < c->nout && !st; k++) {
            hd_tensor *h = hd_tensor_to_host(ctx, got[k]);
            check_same(c, run, k, want[k], h);
            hd_tensor_unref(h);
        }
        for (int k = 0; k < 4; k++) hd_tensor_unref(got[k]);
    }
    if (e) {
        hd_jit_stats st;
        hd_jit_cuda.stats(e, &st);
        int gen = c->kernels >= 0 ? c->kernels : st.kernels - c->eager;
        CHECK_MSG(st.kernels == gen + c->eager, "%s: %d kernels", c->name, st.kernels);
        CHECK_MSG(st.cuda_graph == c->replayed && st.launches == (c->replayed ? 1 : st.kernels),
                  "%s: graph %d, %d launches", c->name, st.cuda_graph, st.launches);
        CHECK(st.runs == 3);
        hd_jit_cuda.free(ctx, e);
    }
    hd_error_clear(ctx);
    for (int i = 0; i < c->nin; i++) hd_tensor_unref(din[i]);
}

static void run_case(hd_ctx *ctx, const fuse_case *c, int gpu) {
    hd_tensor *in[8] = {0}, *want[4] = {0};
    for (int i = 0; i < c->nin; i++) in[i] = case_input(ctx, c, i);
    CHECK_MSG(c->body(ctx, in, want, c->ud) == HD_OK, "%s eager: %s", c->name, ctx->errmsg);
    hd_ir_graph *g = trace_case(ctx, c, in);
    CHECK_MSG(g != NULL, "%s: trace: %s", c->name, ctx->errmsg);
    if (g) check_source(ctx, c, g);
    if (g && gpu) check_gpu(ctx, c, g, in, want);
    hd_ir_graph_free(g);
    hd_error_clear(ctx);
    for (int i = 0; i < 8; i++) hd_tensor_unref(in[i]);
    for (int i = 0; i < 4; i++) hd_tensor_unref(want[i]);
}

int main(void) {
    const hd_cuda_api *a = hd_cuda_api_get();
    if (!a->nvrtc_ok) {
        printf("SKIPPED: %s\n", a->nvrtc_error);
        return 77;
    }
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    int gpu = hd_cuda_backend.available(&ctx, 0) == HD_OK;
    hd_error_clear(&ctx);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(&ctx, &cases[k], gpu);
    hd_ctx_release(&ctx);
    if (!gpu) {
        printf("%d passed, %d failed (sources only)\nSKIPPED: no CUDA device\n", hd_test_pass,
               hd_test_fail);
        return hd_test_fail ? 1 : 77;
    }
    TEST_END();
}

#else
TEST_SKIPPED_MAIN("this build has no CUDA backend")
#endif
