/* The llvm compiler's donated outputs: a graph output marked to replace an
 * input (hd_ir_output.into) is computed into that input's memory when
 * nothing can tell (docs/llvm.md, "Donated outputs"), and the run hands
 * back the input's own tensor. Checked against plain loops: the values,
 * that the input was written in place (or, where the plan or the run
 * refuses, left as it was, with a fresh output), on 1 and 2 threads, on
 * the streamed path of large kernels, and where the run must copy (a
 * strided input, one tensor given twice, two inputs on one storage, an
 * input on a constant's storage). Outputs reshaping an intermediate
 * whole are handed out over its memory, not copied, unless that memory
 * would then be shared. */
#include "hd_compile.h"
#include "hd_test.h"
#include "hd_test_trace.h"
#include "hd_test_llvm.h"

#if !HODU_HAVE_LLVM

HD_TEST_LLVM_MISSING_MAIN()

#else

enum {
    D_SUB,       /* y0 = x0 - 0.5 x1: donated */
    D_SUM,       /* y0 = x0 + sum(x0): x0 read at an earlier step; donated */
    D_OUT_IN,    /* y0 = 2 x0, y1 = x0: the input is an output too; refused */
    D_VIEW,      /* y0 = x0 - x0^T: a view of x0 read in the kernel; refused */
    D_FAIL_NEXT, /* y0 = 2 x0, y1 = y0 @ x1: a runtime step after it; refused */
    D_EPI,       /* y0 = x0 - 0.1 (x1 @ x2): a gemm's epilogue; donated */
    D_EPI_READS, /* y0 = x0 - 0.1 (x0 @ x2): the gemm reads x0; refused */
    D_TWICE,     /* y0 = y1 = 2 x0: the value is two outputs; refused */
    D_SHAPE,     /* y0 = x0 + x1 with x0 [n] and x1 [m, n]: another shape; refused */
    D_CONST,     /* y0 = 2 x0, y1 = sum(c + x1), c a constant: donated; run on x0 = c: copied */
};

typedef struct donate_case {
    int mode;
    hd_tensor *c; /* D_CONST's constant */
} donate_case;

static hd_status mul_num(hd_ctx *ctx, hd_tensor *a, double v, hd_tensor **out) {
    hd_tensor *c = hd_tensor_number(ctx, HD_F64, v);
    hd_status st = c ? op2(ctx, HD_OP_MUL, a, c, out) : ctx->status;
    hd_tensor_unref(c);
    return st;
}

static const hd_attrs perm = {.nshape = 2, .shape = {1, 0}};

static hd_status donate_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    const donate_case *dc = ud;
    int mode = dc->mode;
    hd_tensor *t = NULL, *u = NULL;
    hd_attrs all;
    memset(&all, 0, sizeof all);
    hd_status st = HD_OK;
    switch (mode) {
    case D_SUB:
        st = mul_num(ctx, in[1], 0.5, &t);
        if (!st) st = op2(ctx, HD_OP_SUB, in[0], t, &out[0]);
        break;
    case D_SUM:
        st = op1(ctx, HD_OP_SUM, in[0], &all, &t);
        if (!st) st = op2(ctx, HD_OP_ADD, in[0], t, &out[0]);
        break;
    case D_OUT_IN:
        st = mul_num(ctx, in[0], 2.0, &out[0]);
        out[1] = hd_tensor_ref(in[0]);
        break;
    case D_VIEW:
        st = op1(ctx, HD_OP_PERMUTE, in[0], &perm, &t);
        if (!st) st = op2(ctx, HD_OP_SUB, in[0], t, &out[0]);
        break;
    case D_FAIL_NEXT:
        st = mul_num(ctx, in[0], 2.0, &out[0]);
        if (!st) st = op2(ctx, HD_OP_MATMUL, out[0], in[1], &out[1]);
        break;
    case D_EPI:
    case D_EPI_READS:
        st = op2(ctx, HD_OP_MATMUL, in[mode == D_EPI ? 1 : 0], in[2], &t);
        if (!st) st = mul_num(ctx, t, 0.1, &u);
        if (!st) st = op2(ctx, HD_OP_SUB, in[0], u, &out[0]);
        break;
    case D_TWICE:
        st = mul_num(ctx, in[0], 2.0, &out[0]);
        out[1] = st ? NULL : hd_tensor_ref(out[0]);
        break;
    case D_SHAPE: st = op2(ctx, HD_OP_ADD, in[0], in[1], &out[0]); break;
    case D_CONST:
        st = mul_num(ctx, in[0], 2.0, &out[0]);
        if (!st) st = op2(ctx, HD_OP_ADD, dc->c, in[1], &t);
        if (!st) st = op1(ctx, HD_OP_SUM, t, &all, &out[1]);
        break;
    }
    hd_tensor_unref(t);
    hd_tensor_unref(u);
    return st;
}

static float *fdata(hd_tensor *t) {
    return (float *)hd_tensor_data(t);
}

static hd_tensor *filled(hd_ctx *ctx, const int64_t *shape, int ndim, float scale) {
    hd_tensor *t = hd_tensor_new(ctx, HD_F32, shape, ndim);
    for (int64_t i = 0; t && i < t->numel; i++)
        fdata(t)[i] = scale * (float)((i * 37) % 101 - 50) / 50.0f;
    return t;
}

/* Element (r, c) of the 2-D tensor t, through its strides. */
static float at2(const hd_tensor *t, int64_t r, int64_t c) {
    const float *base = (const float *)t->storage->data + t->offset;
    return base[r * t->strides[0] + c * t->strides[1]];
}

/* What y0 must be for the inputs' values before the run (row-major, n x n
 * for the square modes): plain loops. */
static void donate_want(int mode, hd_tensor *const *in, float *want) {
    const hd_tensor *x = in[0];
    int64_t n = x->numel, rows = x->ndim == 2 ? x->shape[0] : 1, cols = n / rows;
    double total = 0;
    for (int64_t i = 0; mode == D_SUM && i < n; i++) total += at2(x, i / cols, i % cols);
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i / cols, c = i % cols;
        float xv = at2(x, r, c);
        switch (mode) {
        case D_SUB: want[i] = xv - (float)(0.5 * at2(in[1], r, c)); break;
        case D_SUM: want[i] = xv + (float)total; break;
        case D_VIEW: want[i] = xv - at2(x, c, r); break;
        case D_EPI:
        case D_EPI_READS: {
            const hd_tensor *a = mode == D_EPI ? in[1] : x;
            double p = 0;
            for (int64_t k = 0; k < a->shape[1]; k++) p += (double)at2(a, r, k) * at2(in[2], k, c);
            want[i] = xv - (float)(0.1 * p);
            break;
        }
        default: want[i] = 2 * xv;
        }
    }
}

typedef struct donate_run {
    int mode, nin, nout;
    hd_tensor *c;
    int donated;  /* what the plan must decide */
    int in_place; /* this run writes the input (else the input stays as it was) */
} donate_run;

/* Compile mode's graph over inputs shaped like `in` (output 0 replacing
 * input 0), run it on `in` twice, check. */
static void check_donate(hd_ctx *ctx, const char *what, const donate_run *d, hd_tensor *const *in,
                         hd_tensor *const *shape_of) {
    donate_case dc = {d->mode, d->c};
    hd_ir_graph *g = trace_body(ctx, what, donate_body, shape_of, d->nin, d->nout, &dc);
    CHECK_MSG(g != NULL, "%s: %s", what, hd_error_message(ctx));
    if (!g) return;
    g->outputs[0].into = 0;
    hd_jit_exec *e = NULL;
    hd_jit_stats st;
    memset(&st, 0, sizeof st);
    CHECK_MSG(LL->compile(ctx, g, NULL, &e) == HD_OK, "%s: %s", what, hd_error_message(ctx));
    hd_ir_graph_free(g);
    if (!e) return;
    LL->stats(e, &st);
    CHECK_MSG(st.donated == d->donated, "%s: %d donated", what, st.donated);
    int64_t n = in[0]->numel;
    float *want = malloc((size_t)n * sizeof *want), *before = malloc((size_t)n * sizeof *before);
    for (int run = 0; run < 2 && want && before; run++) {
        donate_want(d->mode, in, want);
        for (int64_t i = 0; i < n; i++)
            before[i] = at2(in[0], i / in[0]->shape[1], i % in[0]->shape[1]);
        hd_tensor *out[2] = {NULL, NULL};
        CHECK_MSG(LL->run(ctx, e, in, d->nin, out, d->nout) == HD_OK, "%s: %s", what,
                  hd_error_message(ctx));
        if (!out[0]) break;
        CHECK_MSG((out[0] == in[0]) == d->in_place, "%s: run %d: output %s the input", what, run,
                  out[0] == in[0] ? "is" : "is not");
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++) {
            int64_t r = i / in[0]->shape[1], c = i % in[0]->shape[1];
            float y = fdata(out[0])[i], x = at2(in[0], r, c);
            if (!hd_test_close(y, want[i], 1e-5, 1e-5) || x != (d->in_place ? y : before[i]))
                bad = i;
        }
        if (bad >= 0) {
            int64_t r = bad / in[0]->shape[1], c = bad % in[0]->shape[1];
            fprintf(stderr, "%s: run %d: element %lld: %g (input %g), want %g (input before %g)\n",
                    what, run, (long long)bad, fdata(out[0])[bad], at2(in[0], r, c), want[bad],
                    before[bad]);
        }
        CHECK(bad < 0);
        if (d->mode == D_OUT_IN && out[1])
            CHECK(out[1] != in[0] && !memcmp(fdata(out[1]), before, (size_t)n * sizeof *before));
        double total = 0;
        for (int64_t i = 0; d->mode == D_CONST && i < n; i++) total += before[i] + fdata(in[1])[i];
        if (d->mode == D_CONST && out[1]) CHECK_CLOSE(fdata(out[1])[0], total, 1e-5, 1e-5);
        hd_tensor_unref(out[0]);
        hd_tensor_unref(out[1]);
    }
    free(want);
    free(before);
    LL->free(ctx, e);
}

/* The plan's decisions, each on 1 and 2 threads, on a small square and on
 * a large one (2^21 elements: split across threads, streamed stores). */
static void test_plan(hd_ctx *ctx) {
    static const donate_run runs[] = {
        {D_SUB, 2, 1, NULL, 1, 1},       {D_SUM, 1, 1, NULL, 1, 1},
        {D_OUT_IN, 1, 2, NULL, 0, 0},    {D_VIEW, 1, 1, NULL, 0, 0},
        {D_FAIL_NEXT, 2, 2, NULL, 0, 0}, {D_EPI, 3, 1, NULL, 1, 1},
        {D_EPI_READS, 3, 1, NULL, 0, 0}, {D_TWICE, 1, 2, NULL, 0, 0},
    };
    static const int64_t sizes[] = {33, 1449};
    int saved = ctx->nthreads;
    for (int t = 1; t <= 2; t++)
        for (int s = 0; s < 2; s++) {
            ctx->nthreads = t;
            int64_t sh[2] = {sizes[s], sizes[s]};
            for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
                const donate_run *d = &runs[r];
                if (s && (d->mode == D_EPI || d->mode == D_EPI_READS || d->mode == D_FAIL_NEXT))
                    continue; /* the products' loops dominate; small ones test the plan */
                hd_tensor *in[3];
                for (int i = 0; i < 3; i++) in[i] = filled(ctx, sh, 2, 1.0f + (float)i);
                char what[96];
                snprintf(what, sizeof what, "mode %d, %lld^2, %d threads", d->mode,
                         (long long)sizes[s], t);
                check_donate(ctx, what, d, in, in);
                for (int i = 0; i < 3; i++) hd_tensor_unref(in[i]);
            }
        }
    ctx->nthreads = saved;
    /* another shape than the input's: refused, and the input kept */
    int64_t s1 = 8, s2[2] = {3, 8};
    hd_tensor *x = filled(ctx, &s1, 1, 1.0f), *y = filled(ctx, s2, 2, 2.0f);
    hd_tensor *in[2] = {x, y};
    donate_case dc = {D_SHAPE, NULL};
    hd_ir_graph *g = trace_body(ctx, "shape", donate_body, in, 2, 1, &dc);
    CHECK(g != NULL);
    hd_jit_exec *e = NULL;
    if (g) g->outputs[0].into = 0;
    CHECK(g && LL->compile(ctx, g, NULL, &e) == HD_OK);
    hd_jit_stats st;
    memset(&st, 0, sizeof st);
    if (e) LL->stats(e, &st);
    CHECK(e && st.donated == 0);
    if (e) LL->free(ctx, e);
    hd_ir_graph_free(g);
    hd_tensor_unref(x);
    hd_tensor_unref(y);
}

/* Donated by the plan, but this run cannot write the caller's memory: a
 * strided input, one tensor given as both inputs, two inputs on one
 * storage, a constant on the input's storage. The values are right, the output is fresh, the input
 * unchanged; the next run with a plain input writes in place again. */
static void test_run_copies(hd_ctx *ctx) {
    int64_t sh[2] = {16, 16}, sh2[2] = {32, 16};
    hd_tensor *base = filled(ctx, sh, 2, 1.0f), *other = filled(ctx, sh, 2, 2.0f);
    hd_tensor *tall = filled(ctx, sh2, 2, 3.0f);
    int64_t tstr[2] = {1, 16};
    hd_tensor *strided = hd_tensor_view(ctx, base, sh, tstr, 2, 0);
    hd_tensor *top = hd_tensor_view(ctx, tall, sh, tall->strides, 2, 0);
    hd_tensor *bottom = hd_tensor_view(ctx, tall, sh, tall->strides, 2, 16 * 16);
    donate_run copy = {D_SUB, 2, 1, NULL, 1, 0}, direct = {D_SUB, 2, 1, NULL, 1, 1};
    hd_tensor *shape_of[2] = {base, other};
    hd_tensor *a[2] = {strided, other}, *b[2] = {base, base}, *c[2] = {top, bottom};
    check_donate(ctx, "a strided input", &copy, a, shape_of);
    check_donate(ctx, "one tensor twice", &copy, b, shape_of);
    check_donate(ctx, "two inputs on one storage", &copy, c, shape_of);
    hd_tensor *d[2] = {top, other};
    check_donate(ctx, "a view alone on its storage", &direct, d, shape_of);
    /* a constant the code reads after the write: the caller's tensor */
    donate_run cst = {D_CONST, 2, 2, base, 1, 0};
    hd_tensor *e[2] = {base, other};
    check_donate(ctx, "a constant on the input's storage", &cst, e, shape_of);
    hd_tensor *ts[] = {base, other, tall, strided, top, bottom};
    for (int i = 0; i < 6; i++) hd_tensor_unref(ts[i]);
}

/* Outputs that are views of an intermediate s = 2 sum(x, 0) (x [4, 6]). */
enum {
    W_ALONE, /* y0 = reshape(s, [2, 3]): handed out over s's memory */
    W_ROOT,  /* y0 = s, y1 = reshape(s, [2, 3]): y1 copied */
    W_TWO,   /* y0 = reshape(s, [2, 3]), y1 = reshape(s, [3, 2]): one copied */
    W_PART,  /* y0 = s[1:4]: not all of s, copied */
};

static hd_status whole_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    int mode = *(const int *)ud;
    hd_attrs ax = {.axes = {0}, .naxes = 1}, r23 = {.shape = {2, 3}, .nshape = 2};
    hd_attrs r32 = {.shape = {3, 2}, .nshape = 2}, part = {.start = {1}, .step = {1}, .len = {3}};
    hd_tensor *t = NULL, *s = NULL;
    hd_status st = op1(ctx, HD_OP_SUM, in[0], &ax, &t);
    if (!st) st = mul_num(ctx, t, 2.0, &s);
    if (!st) switch (mode) {
        case W_ALONE: st = op1(ctx, HD_OP_RESHAPE, s, &r23, &out[0]); break;
        case W_ROOT:
            out[0] = hd_tensor_ref(s);
            st = op1(ctx, HD_OP_RESHAPE, s, &r23, &out[1]);
            break;
        case W_TWO:
            st = op1(ctx, HD_OP_RESHAPE, s, &r23, &out[0]);
            if (!st) st = op1(ctx, HD_OP_RESHAPE, s, &r32, &out[1]);
            break;
        case W_PART: st = op1(ctx, HD_OP_SLICE, s, &part, &out[0]); break;
        }
    hd_tensor_unref(t);
    hd_tensor_unref(s);
    return st;
}

/* Each mode twice: the values against a plain loop, the copies the run
 * made, and no two outputs on one storage. */
static void test_whole_views(hd_ctx *ctx) {
    static const int nout[] = {1, 2, 2, 1}, copies[] = {0, 1, 1, 1};
    int64_t sh[2] = {4, 6};
    hd_tensor *x = filled(ctx, sh, 2, 1.0f);
    double want[6] = {0};
    for (int64_t i = 0; x && i < 24; i++) want[i % 6] += 2.0 * fdata(x)[i];
    for (int mode = W_ALONE; x && mode <= W_PART; mode++) {
        hd_ir_graph *g = trace_body(ctx, "whole", whole_body, &x, 1, nout[mode], &mode);
        hd_jit_exec *e = NULL;
        CHECK_MSG(g && LL->compile(ctx, g, NULL, &e) == HD_OK, "mode %d: %s", mode,
                  hd_error_message(ctx));
        hd_ir_graph_free(g);
        for (int run = 0; e && run < 2; run++) {
            hd_tensor *out[2] = {NULL, NULL};
            hd_jit_stats st;
            CHECK(LL->run(ctx, e, &x, 1, out, nout[mode]) == HD_OK);
            LL->stats(e, &st);
            CHECK_MSG(st.run_copies == copies[mode], "mode %d: %d copies", mode, st.run_copies);
            for (int k = 0; k < nout[mode] && out[k]; k++) {
                int64_t n = out[k]->numel, first = mode == W_PART ? 1 : 0;
                CHECK(n == (mode == W_PART ? 3 : 6) && hd_tensor_is_contiguous(out[k]));
                for (int64_t i = 0; i < n; i++)
                    CHECK_CLOSE(fdata(out[k])[i], want[first + i], 1e-5, 1e-5);
            }
            if (out[1]) CHECK(out[0] && out[0]->storage != out[1]->storage);
            hd_tensor_unref(out[0]);
            hd_tensor_unref(out[1]);
        }
        if (e) LL->free(ctx, e);
    }
    hd_tensor_unref(x);
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    setenv("HODU_CACHE_DIR", "off", 1);
    test_plan(&ctx);
    test_run_copies(&ctx);
    test_whole_views(&ctx);
    CHECK(ctx.mem_used == 0);
    TEST_END();
}

#endif /* HODU_HAVE_LLVM */
