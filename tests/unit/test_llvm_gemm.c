/* Matmul in the llvm compiler's code against eager mode and plain f64
 * loops: the MLP (matmuls through the cpu kernel, their bias and relu
 * generated as epilogues), an epilogue written over the product it reads,
 * and hd_llvm_rt_gemm over few rows (its own vector loops) and more
 * (sgemm), the layouts of a and b, a b BLAS cannot read, an empty sum,
 * products split across threads (hd_llvm_gemm.c). */
#include "hd_compile.h"
#include "hd_test.h"
#include "hd_test_trace.h"
#include "hd_trace.h"
#include "hd_test_llvm.h"

#if !HODU_HAVE_LLVM

HD_TEST_LLVM_MISSING_MAIN()

#else

/* ---- the MLP ---- */

static void test_mlp(hd_ctx *ctx) {
    hd_tensor *p[4];
    mlp_params(ctx, p, 64, 33);
    int64_t sx[2] = {5, 64};
    hd_tensor *x = make(ctx, HD_F32, sx, 2, 1.0);
    hd_jit_stats st;
    CHECK(check_body_tol(ctx, "mlp", mlp2_body, &x, 1, 2, p, 0, &st));
    /* 2 matmuls, each with its bias (and relu) as its epilogue, and the sum */
    CHECK(st.fallbacks == 0 && st.consts == 4 && st.kernels == 3);
    CHECK(st.compile_seconds > 0 && st.llvm_seconds > 0 && st.llvm_seconds <= st.compile_seconds);
    hd_tensor_unref(x);
    for (int i = 0; i < 4; i++) hd_tensor_unref(p[i]);
}

/* A gemm's epilogue written over the product it reads (hd_plan.c,
 * epilogue_in_place): mode 0 is mlp2_body; mode 1 reads the product
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
    if (c->mode == 0) return mlp2_body(ctx, in, out, c->p);
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

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    setenv("HODU_CACHE_DIR", "off", 1);
    test_mlp(&ctx);
    test_gemm_in_place(&ctx);
    test_gemm_shapes(&ctx);
    test_gemm_cases(&ctx);
    CHECK(ctx.mem_used == 0);
    TEST_END();
}

#endif /* HODU_HAVE_LLVM */
