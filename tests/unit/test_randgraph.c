/* Differential testing: random programs of elementwise ops with
 * broadcasting, numbers and constants, reductions, matmul, reshapes,
 * permutes, slices, expands, softmax and concat over random shapes (size-1
 * dims and odd sizes included), in f32 and f64, run eagerly and through
 * trace -> passes -> interp (and, for the first LLVM_GRAPHS seeds, llvm when
 * the build has it: each costs a native compile), must agree to 1e-5
 * relative in f32 and 1e-12 in f64. A program is a function of a seed
 * and the shapes it sees, so the eager and the traced run build the same
 * graph. On a failure the seed and the graph's IR are printed:
 * HODU_RANDGRAPH_SEED=n reruns one. HODU_RANDGRAPH_N=n runs n graphs,
 * HODU_RANDGRAPH_LLVM=n the first n of them through llvm too, and
 * HODU_RANDGRAPH_CUDA=n through the cuda compiler (on a GPU or the
 * emulator: the suite runs 120 there as emu.test_randgraph). The same
 * programs also run as the body of a loop node of 1..7 trips, x carried
 * (every third a while loop of 0..7 iterations on a carried count;
 * HODU_RANDGRAPH_LOOPS=n of them, 300 by default), against eager
 * iterations, through each compiler. The llvm graphs also run with every
 * output of an input's type marked to replace that input, which the llvm
 * compiler may compute in place (docs/llvm.md, "Donated outputs"). */
#include "hd_backend.h"
#include "hd_compile.h"
#include "hd_script.h"
#include "hd_test.h"
#include "hd_trace.h"

#define NGRAPHS     3000
#define LLVM_GRAPHS 1500
static uint64_t llvm_graphs = LLVM_GRAPHS;
#define POOL 32

typedef struct prog {
    hd_ctx *ctx;
    uint64_t s;
    hd_dtype dt;
    hd_tensor *pool[POOL];
    int n;
} prog;

static uint64_t rnd(prog *p) {
    p->s ^= p->s >> 12;
    p->s ^= p->s << 25;
    p->s ^= p->s >> 27;
    return p->s * 0x2545f4914f6cdd1dULL;
}
static int rint_(prog *p, int n) {
    return (int)(rnd(p) % (uint64_t)n);
}
static double runif(prog *p, double lo, double hi) {
    return lo + (hi - lo) * (double)(rnd(p) >> 11) / 9007199254740992.0;
}

static int64_t rdim(prog *p) {
    static const int64_t dims[] = {1, 1, 2, 3, 4, 5, 7};
    return dims[rint_(p, 7)];
}

static void rshape(prog *p, int64_t *shape, int *nd) {
    for (;;) {
        *nd = rint_(p, 5);
        int64_t n = 1;
        for (int i = 0; i < *nd; i++) n *= shape[i] = rdim(p);
        if (n <= 256) return;
    }
}

/* A constant: a tensor with data, captured by the trace. */
static hd_tensor *rconst(prog *p, const int64_t *shape, int nd) {
    hd_tensor *t = hd_tensor_new(p->ctx, p->dt, shape, nd);
    for (int64_t i = 0; t && i < t->numel; i++)
        hd_dtype_store(p->dt, t->storage->data, i, runif(p, -2, 2));
    return t;
}

static hd_status push(prog *p, hd_tensor *t) {
    if (!t) return p->ctx->status;
    if (p->n == POOL) {
        hd_tensor_unref(p->pool[1]);
        memmove(p->pool + 1, p->pool + 2, (POOL - 2) * sizeof *p->pool);
        p->n--;
    }
    p->pool[p->n++] = t;
    return HD_OK;
}

static hd_tensor *pick(prog *p) {
    /* favour recent values: longer chains */
    int k = rint_(p, 3) ? p->n - 1 - rint_(p, HD_MIN(p->n, 3)) : rint_(p, p->n);
    return p->pool[k];
}

static hd_status run1(prog *p, hd_op op, hd_tensor *a, const hd_attrs *at) {
    hd_tensor *out = NULL;
    if (hd_op_run(p->ctx, op, &a, 1, at, &out)) return p->ctx->status;
    return push(p, out);
}

static hd_status run2(prog *p, hd_op op, hd_tensor *a, hd_tensor *b) {
    hd_tensor *in[2] = {a, b}, *out = NULL;
    if (hd_op_run(p->ctx, op, in, 2, NULL, &out)) return p->ctx->status;
    return push(p, out);
}

static int broadcastable(const hd_tensor *a, const hd_tensor *b) {
    int n = HD_MAX(a->ndim, b->ndim);
    for (int i = 0; i < n; i++) {
        int64_t da = i < n - a->ndim ? 1 : a->shape[i - (n - a->ndim)];
        int64_t db = i < n - b->ndim ? 1 : b->shape[i - (n - b->ndim)];
        if (da != db && da != 1 && db != 1) return 0;
    }
    return 1;
}

/* A partner for a: a pool value that broadcasts with it, a number, or a
 * new constant shaped like a with some dims set to 1 (new reference). */
static hd_tensor *partner(prog *p, hd_tensor *a) {
    int r = rint_(p, 4);
    if (r == 0) return hd_tensor_number(p->ctx, HD_F64, runif(p, -3, 3));
    if (r == 1) {
        int64_t s[HD_MAX_DIMS];
        int lead = rint_(p, 2);
        for (int i = lead; i < a->ndim; i++) s[i - lead] = rint_(p, 3) ? a->shape[i] : 1;
        return rconst(p, s, a->ndim - lead < 0 ? 0 : a->ndim - lead);
    }
    for (int tries = 0; tries < 6; tries++) {
        hd_tensor *b = pick(p);
        if (broadcastable(a, b)) return hd_tensor_ref(b);
    }
    return hd_tensor_number(p->ctx, HD_F64, 0.5);
}

static hd_status step_unary(prog *p, hd_tensor *a) {
    static const hd_op ops[] = {HD_OP_NEG,      HD_OP_ABS,   HD_OP_EXP,     HD_OP_LOG,
                                HD_OP_SQRT,     HD_OP_TANH,  HD_OP_SIGMOID, HD_OP_RELU,
                                HD_OP_SIN,      HD_OP_COS,   HD_OP_GELU,    HD_OP_SILU,
                                HD_OP_SOFTPLUS, HD_OP_FLOOR, HD_OP_CLAMP,   HD_OP_RSQRT};
    hd_op op = ops[rint_(p, (int)(sizeof ops / sizeof *ops))];
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.scalar[0] = -1.0;
    at.scalar[1] = 1.5;
    return run1(p, op, a, &at);
}

static hd_status step_binary(prog *p, hd_tensor *a) {
    static const hd_op ops[] = {HD_OP_ADD,     HD_OP_SUB,     HD_OP_MUL, HD_OP_DIV,
                                HD_OP_MAXIMUM, HD_OP_MINIMUM, HD_OP_POW, HD_OP_ADD};
    hd_op op = ops[rint_(p, 8)];
    hd_tensor *b = partner(p, a);
    if (!b) return p->ctx->status;
    hd_status st = rint_(p, 2) ? run2(p, op, a, b) : run2(p, op, b, a);
    hd_tensor_unref(b);
    return st;
}

static hd_status step_where(prog *p, hd_tensor *a) {
    static const hd_op cmp[] = {HD_OP_GT, HD_OP_LT, HD_OP_GE, HD_OP_LE, HD_OP_EQ, HD_OP_NE};
    hd_tensor *b = partner(p, a), *c = NULL, *out = NULL;
    if (!b) return p->ctx->status;
    hd_tensor *in2[2] = {a, b};
    hd_status st = hd_op_run(p->ctx, cmp[rint_(p, 6)], in2, 2, NULL, &c);
    if (!st) {
        hd_tensor *in3[3] = {c, a, b};
        st = hd_op_run(p->ctx, HD_OP_WHERE, in3, 3, NULL, &out);
    }
    hd_tensor_unref(b);
    hd_tensor_unref(c);
    return st ? st : push(p, out);
}

static hd_status step_reduce(prog *p, hd_tensor *a) {
    static const hd_op ops[] = {HD_OP_SUM,  HD_OP_MEAN, HD_OP_MAX, HD_OP_MIN,
                                HD_OP_PROD, HD_OP_VAR,  HD_OP_STD, HD_OP_LOGSUMEXP};
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.keepdim = rint_(p, 2);
    at.ints[0] = rint_(p, 2); /* var/std correction */
    for (int i = 0; i < a->ndim; i++)
        if (rint_(p, 2)) at.axes[at.naxes++] = rint_(p, 2) ? i : i - a->ndim;
    return run1(p, ops[rint_(p, 8)], a, &at);
}

static hd_status step_matmul(prog *p, hd_tensor *a) {
    if (a->ndim == 0) return step_unary(p, a);
    int64_t s[2];
    hd_tensor *w;
    hd_status st;
    if (a->ndim >= 2 && rint_(p, 3) == 0) { /* w @ a: batch dims broadcast */
        s[0] = rdim(p);
        s[1] = a->shape[a->ndim - 2];
        w = rconst(p, s, 2);
        st = w ? run2(p, HD_OP_MATMUL, w, a) : p->ctx->status;
    } else {
        s[0] = a->shape[a->ndim - 1];
        s[1] = rdim(p);
        w = rconst(p, s, rint_(p, 4) ? 2 : 1);
        st = w ? run2(p, HD_OP_MATMUL, a, w) : p->ctx->status;
    }
    hd_tensor_unref(w);
    return st;
}

static hd_status step_reshape(prog *p, hd_tensor *a) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int r = rint_(p, 3);
    if (r == 0 || a->ndim < 2) { /* flatten, or unsqueeze a 1 somewhere */
        at.nshape = r == 0 ? 1 : a->ndim + 1;
        if (r == 0) {
            at.shape[0] = rint_(p, 2) ? -1 : a->numel;
        } else {
            int at1 = rint_(p, a->ndim + 1);
            for (int i = 0, k = 0; i < at.nshape; i++) at.shape[i] = i == at1 ? 1 : a->shape[k++];
        }
    } else { /* merge the first two dims */
        at.nshape = a->ndim - 1;
        at.shape[0] = a->shape[0] * a->shape[1];
        for (int i = 2; i < a->ndim; i++) at.shape[i - 1] = a->shape[i];
        if (rint_(p, 2)) at.shape[rint_(p, at.nshape)] = -1;
    }
    return run1(p, HD_OP_RESHAPE, a, &at);
}

static hd_status step_permute(prog *p, hd_tensor *a) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = a->ndim;
    for (int i = 0; i < a->ndim; i++) at.shape[i] = i;
    for (int i = a->ndim - 1; i > 0; i--) {
        int j = rint_(p, i + 1);
        int64_t t = at.shape[i];
        at.shape[i] = at.shape[j];
        at.shape[j] = t;
    }
    return run1(p, HD_OP_PERMUTE, a, &at);
}

static hd_status step_slice(prog *p, hd_tensor *a) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    for (int i = 0; i < a->ndim; i++) {
        int64_t n = a->shape[i];
        at.step[i] = 1 + rint_(p, 2);
        at.start[i] = rint_(p, (int)n);
        at.len[i] = 1 + (n - 1 - at.start[i]) / at.step[i];
        if (at.len[i] > 1) at.len[i] = 1 + rint_(p, (int)at.len[i]);
        if (at.len[i] == 1 && rint_(p, 3) == 0) at.drop_mask |= 1u << i;
    }
    return run1(p, HD_OP_SLICE, a, &at);
}

static hd_status step_expand(prog *p, hd_tensor *a) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int lead = a->ndim < 4 ? rint_(p, 2) : 0;
    at.nshape = a->ndim + lead;
    int64_t n = 1;
    for (int i = 0; i < at.nshape; i++) {
        int j = i - lead;
        at.shape[i] =
            j < 0 || a->shape[j] == 1 ? 1 + rint_(p, 3) : (rint_(p, 2) ? -1 : a->shape[j]);
        n *= at.shape[i] < 0 ? a->shape[j] : at.shape[i];
    }
    if (n > 1024) return step_unary(p, a);
    return run1(p, HD_OP_EXPAND, a, &at);
}

static hd_status step_nn(prog *p, hd_tensor *a) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    if (rint_(p, 2) || a->ndim == 0) {
        at.ints[0] = a->ndim ? rint_(p, a->ndim) - (rint_(p, 2) ? a->ndim : 0) : 0;
        return run1(p, rint_(p, 2) ? HD_OP_SOFTMAX : HD_OP_LOG_SOFTMAX, a, &at);
    }
    /* concat a with something of its shape along a random axis */
    hd_tensor *b = NULL, *out = NULL;
    if (hd_op_run(p->ctx, HD_OP_NEG, &a, 1, NULL, &b)) return p->ctx->status;
    at.ints[0] = rint_(p, a->ndim);
    hd_tensor *in[3] = {a, b, a};
    hd_status st = hd_op_run(p->ctx, HD_OP_CONCAT, in, 2 + rint_(p, 2), &at, &out);
    hd_tensor_unref(b);
    return st ? st : push(p, out);
}

static hd_status step(prog *p) {
    hd_tensor *a = pick(p);
    switch (rint_(p, 14)) {
    case 0:
    case 1:
    case 2: return step_unary(p, a);
    case 3:
    case 4:
    case 5: return step_binary(p, a);
    case 6: return step_where(p, a);
    case 7:
    case 8: return step_reduce(p, a);
    case 9: return step_matmul(p, a);
    case 10: return step_reshape(p, a);
    case 11: return rint_(p, 2) ? step_permute(p, a) : step_slice(p, a);
    case 12: return step_expand(p, a);
    default: return step_nn(p, a);
    }
}

/* The program for a seed: inputs (given), 3..14 steps, 1..3 outputs. */
static hd_status program(prog *p, hd_tensor *const *in, int nin, hd_tensor **out, int *nout) {
    for (int i = 0; i < nin; i++) push(p, hd_tensor_ref(in[i]));
    int nsteps = 3 + rint_(p, 12);
    for (int i = 0; i < nsteps; i++)
        if (step(p)) return p->ctx->status;
    *nout = 1 + rint_(p, 3);
    for (int i = 0; i < *nout; i++) out[i] = hd_tensor_ref(i == 0 ? p->pool[p->n - 1] : pick(p));
    return HD_OK;
}

static void prog_clear(prog *p) {
    for (int i = 0; i < p->n; i++) hd_tensor_unref(p->pool[i]);
    p->n = 0;
}

static int close_enough(const hd_tensor *a, const hd_tensor *b, double rtol) {
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->numel != b->numel) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    for (int64_t i = 0; i < a->numel; i++) {
        double x = hd_tensor_get(a, i), y = hd_tensor_get(b, i);
        if (!hd_test_close(x, y, rtol, rtol * 1e-3)) return 0;
    }
    return 1;
}

/* For the cuda compiler: within rtol of the output's largest magnitude,
 * and at least rtol absolute (torch.testing's f32 atol). cuBLAS sums a
 * matmul in another order than the cpu, and the device's block reductions
 * sum in theirs: an element that cancels (logsumexp of log_softmax, ~0)
 * can differ by more than rtol of itself. */
static int close_to_scale(const hd_tensor *want, const hd_tensor *got, double rtol) {
    if (got->dtype != want->dtype || got->ndim != want->ndim ||
        memcmp(got->shape, want->shape, (size_t)want->ndim * sizeof *want->shape))
        return 0;
    double scale = 1;
    for (int64_t i = 0; i < want->numel; i++) {
        double x = fabs(hd_tensor_get(want, i));
        if (isfinite(x)) scale = fmax(scale, x);
    }
    for (int64_t i = 0; i < want->numel; i++) {
        double x = hd_tensor_get(want, i), y = hd_tensor_get(got, i);
        if (!hd_test_close(y, x, rtol, rtol * scale)) return 0;
    }
    return 1;
}

typedef struct result {
    int ok, skipped;
    int donated; /* outputs the llvm compiler computed into their inputs */
} result;

static void report(hd_ctx *ctx, uint64_t seed, const hd_jit_compiler *c, const hd_ir_graph *g,
                   const hd_jit_exec *e) {
    fprintf(stderr, "randgraph: seed %llu failed (%s): %s\n", (unsigned long long)seed, c->name,
            hd_error_message(ctx));
    char *t = g ? hd_ir_to_text(g) : NULL;
    if (t) fprintf(stderr, "traced:\n%s", t);
    hd_ctx_strfree(ctx, t);
    t = e ? hd_ir_to_text(c->graph(e)) : NULL;
    if (t) fprintf(stderr, "optimised:\n%s", t);
    hd_ctx_strfree(ctx, t);
}

/* Trace the program for seed over symbolic inputs like in. */
static hd_ir_graph *trace_program(hd_ctx *ctx, uint64_t seed, hd_dtype dt, hd_tensor *const *in,
                                  int nin) {
    prog p = {ctx, seed, dt, {0}, 0};
    hd_tensor *sym[4] = {0}, *out[4] = {0};
    int nout = 0;
    hd_ir_graph *g = NULL;
    hd_trace_begin(ctx, "rand");
    hd_status st = HD_OK;
    for (int i = 0; i < nin && !st; i++) {
        char name[16];
        snprintf(name, sizeof name, "in%d", i);
        if (!(sym[i] = hd_trace_input(ctx, name, in[i]->dtype, in[i]->shape, in[i]->ndim)))
            st = ctx->status;
    }
    if (!st) st = program(&p, sym, nin, out, &nout);
    for (int i = 0; i < nout && !st; i++) {
        char name[16];
        snprintf(name, sizeof name, "out%d", i);
        st = hd_trace_output(ctx, name, out[i]);
    }
    if (st)
        hd_trace_abort(ctx);
    else
        hd_trace_end(ctx, &g);
    prog_clear(&p);
    for (int i = 0; i < 4; i++) {
        hd_tensor_unref(sym[i]);
        hd_tensor_unref(out[i]);
    }
    return g;
}

/* Compile g with c and compare two runs (the second reuses the buffers)
 * with eager's outputs. */
static int run_compiled(hd_ctx *ctx, uint64_t seed, const hd_jit_compiler *c, hd_ir_graph *g,
                        hd_tensor *const *in, int nin, hd_tensor *const *want, int nout) {
    hd_tensor *got[4] = {0};
    hd_jit_exec *e = NULL;
    hd_jit_options o;
    hd_jit_options_init(&o);
    o.opt_level = seed % 7 == 0 ? 0 : 1;
    o.no_inplace = seed % 11 == 0;
    o.no_reuse = seed % 13 == 0;
    int ok = g && c->compile(ctx, g, &o, &e) == HD_OK;
    for (int run = 0; ok && run < 2; run++) {
        ok = c->run(ctx, e, in, nin, got, nout) == HD_OK;
        for (int i = 0; ok && i < nout; i++) {
            double rtol = want[i]->dtype == HD_F64 ? 1e-12 : 1e-5;
            ok = close_enough(want[i], got[i], rtol);
            if (!ok) hd_error(ctx, HD_ERR_RUNTIME, "output %d differs (run %d)", i, run);
        }
        for (int i = 0; i < 4; i++) {
            hd_tensor_unref(got[i]);
            got[i] = NULL;
        }
    }
    if (ok && getenv("HODU_RANDGRAPH_PRINT")) report(ctx, seed, c, g, e);
    if (!ok) report(ctx, seed, c, g, e);
    if (e) c->free(ctx, e);
    hd_error_clear(ctx);
    return ok;
}

#if HODU_HAVE_LLVM
/* Donated outputs (docs/llvm.md): each output of an input's dtype and
 * shape is marked to replace one such input (hd_ir_output.into), and the
 * llvm compiler may compute it into that input's memory. Run twice on
 * copies of the inputs, then as the language does, copy every output the
 * run did not write in place into its input: the outputs are eager's, the
 * marked inputs hold their outputs, every other input is as it was. */
static int bits_equal(const hd_tensor *a, const hd_tensor *b) {
    if (a->numel != b->numel || a->dtype != b->dtype) return 0;
    for (int64_t i = 0; i < a->numel; i++) {
        double x = hd_tensor_get(a, i), y = hd_tensor_get(b, i);
        if (!(x == y || (x != x && y != y))) return 0;
    }
    return 1;
}

static int donate_mark(hd_ir_graph *d, uint64_t seed) {
    int marked = 0, taken[8] = {0};
    for (int o = 0; o < d->noutputs; o++) {
        const hd_ir_value *v = &d->values[d->outputs[o].value];
        for (int k = 0; k < d->ninputs && k < 8; k++) {
            int j = (int)((k + seed + (uint64_t)o) % (uint64_t)d->ninputs);
            const hd_ir_value *x = &d->values[d->inputs[j].value];
            if (taken[j] || x->dtype != v->dtype || x->ndim != v->ndim ||
                memcmp(x->shape, v->shape, (size_t)v->ndim * sizeof *v->shape))
                continue;
            d->outputs[o].into = j;
            taken[j] = 1;
            marked++;
            break;
        }
    }
    return marked;
}

static int donate_run(hd_ctx *ctx, hd_jit_exec *e, const hd_ir_graph *d, hd_tensor *const *in,
                      int nin, hd_tensor *const *want, int nout) {
    hd_tensor *mine[4] = {0}, *got[4] = {0};
    int ok = 1;
    for (int i = 0; ok && i < nin; i++)
        ok = (mine[i] = hd_tensor_new(ctx, in[i]->dtype, in[i]->shape, in[i]->ndim)) &&
             hd_tensor_copy_into(ctx, mine[i], in[i]) == HD_OK;
    ok = ok && hd_jit_llvm.run(ctx, e, mine, nin, got, nout) == HD_OK;
    for (int o = 0; ok && o < nout; o++) {
        double rtol = want[o]->dtype == HD_F64 ? 1e-12 : 1e-5;
        int j = d->outputs[o].into;
        ok = close_enough(want[o], got[o], rtol) &&
             (j < 0 || got[o] == mine[j] || hd_tensor_copy_into(ctx, mine[j], got[o]) == HD_OK);
        if (!ok) hd_error(ctx, HD_ERR_RUNTIME, "donated: output %d differs", o);
    }
    for (int i = 0; ok && i < nin; i++) {
        int o = 0;
        while (o < nout && d->outputs[o].into != i) o++;
        ok = o < nout ? bits_equal(mine[i], got[o]) : bits_equal(mine[i], in[i]);
        if (!ok) hd_error(ctx, HD_ERR_RUNTIME, "donated: input %d holds other values", i);
    }
    for (int i = 0; i < 4; i++) {
        hd_tensor_unref(mine[i]);
        hd_tensor_unref(got[i]);
    }
    return ok;
}

static int run_donated(hd_ctx *ctx, uint64_t seed, const hd_ir_graph *g, hd_tensor *const *in,
                       int nin, hd_tensor *const *want, int nout, result *r) {
    hd_ir_graph *d = hd_ir_graph_clone(g);
    if (!d || !donate_mark(d, seed)) {
        hd_ir_graph_free(d);
        return d != NULL;
    }
    hd_jit_exec *e = NULL;
    hd_jit_stats st;
    int ok = hd_jit_llvm.compile(ctx, d, NULL, &e) == HD_OK;
    if (ok) hd_jit_llvm.stats(e, &st), r->donated += st.donated;
    for (int run = 0; ok && run < 2; run++) ok = donate_run(ctx, e, d, in, nin, want, nout);
    if (!ok) report(ctx, seed, &hd_jit_llvm, d, e);
    if (e) hd_jit_llvm.free(ctx, e);
    hd_ir_graph_free(d);
    hd_error_clear(ctx);
    return ok;
}
#endif

/* The cuda compiler on the first cuda_graphs seeds (HODU_RANDGRAPH_CUDA=n;
 * 0 unless set: it needs a device, real or emulated): inputs moved to the
 * device, outputs back. */
static uint64_t cuda_graphs;

static int run_cuda(hd_ctx *ctx, uint64_t seed, hd_ir_graph *g, hd_tensor *const *in, int nin,
                    hd_tensor *const *want, int nout, double scale_tol) {
    hd_tensor *din[4] = {0}, *got[4] = {0};
    hd_jit_exec *e = NULL;
    hd_jit_options o;
    hd_jit_options_init(&o);
    o.device = "cuda:0";
    o.opt_level = seed % 7 == 0 ? 0 : 1;
    int ok = 1;
    for (int i = 0; i < nin && ok; i++)
        ok = hd_tensor_to_device(ctx, in[i], &hd_cuda_backend, 0, &din[i]) == HD_OK;
    ok = ok && g && hd_jit_cuda.compile(ctx, g, &o, &e) == HD_OK;
    for (int run = 0; ok && run < 3; run++) { /* launch by launch, captured, replayed */
        ok = hd_jit_cuda.run(ctx, e, din, nin, got, nout) == HD_OK;
        for (int i = 0; ok && i < nout; i++) {
            hd_tensor *h = hd_tensor_to_host(ctx, got[i]);
            double rtol = (want[i]->dtype == HD_F64 ? 1e-12 : 1e-5) * scale_tol;
            ok = h && close_to_scale(want[i], h, rtol);
            if (!ok) hd_error(ctx, HD_ERR_RUNTIME, "cuda: output %d differs (run %d)", i, run);
            if (!ok && h)
                for (int64_t k = 0; k < want[i]->numel && k < 8; k++)
                    fprintf(stderr, "  [%lld] eager %.10g cuda %.10g\n", (long long)k,
                            hd_tensor_get(want[i], k), hd_tensor_get(h, k));
            hd_tensor_unref(h);
        }
        for (int i = 0; i < 4; i++) {
            hd_tensor_unref(got[i]);
            got[i] = NULL;
        }
    }
    if (!ok) {
        fprintf(stderr, "seed %llu (cuda): %s\n", (unsigned long long)seed, ctx->errmsg);
        report(ctx, seed, &hd_jit_cuda, g, e);
    }
    if (e) hd_jit_cuda.free(ctx, e);
    for (int i = 0; i < 4; i++) hd_tensor_unref(din[i]);
    hd_error_clear(ctx);
    return ok;
}

static const hd_jit_compiler *const compilers[] = {
    &hd_jit_interp,
#if HODU_HAVE_LLVM
    &hd_jit_llvm,
#endif
};
#define NCOMPILERS ((int)(sizeof compilers / sizeof *compilers))

/* 1..3 random inputs of gen's dtype into in; their count. */
static int rand_inputs(prog *gen, hd_tensor **in) {
    int nin = 1 + rint_(gen, 3);
    for (int i = 0; i < nin; i++) {
        int64_t s[HD_MAX_DIMS];
        int nd;
        rshape(gen, s, &nd);
        in[i] = rconst(gen, s, nd);
    }
    return nin;
}

/* ---- loops: the program as the body of a loop node ----
 *
 * x' = tanh(x + 0.1 * tanh(mean(out0))) after the program over (x, the
 * other inputs): a carried value of x's type whatever the program does,
 * bounded at every iteration. Run trips times eagerly, and as one loop
 * node (the traced body) through each compiler. */

static hd_tensor *loop_op(hd_ctx *ctx, hd_op op, hd_tensor *a, hd_tensor *b, const hd_attrs *at) {
    hd_tensor *in[2] = {a, b}, *out = NULL;
    return hd_op_run(ctx, op, in, b ? 2 : 1, at, &out) ? NULL : out;
}

static hd_tensor *loop_step(hd_ctx *ctx, uint64_t pseed, hd_dtype dt, hd_tensor *const *in,
                            int nin) {
    prog p = {ctx, pseed, dt, {0}, 0};
    hd_tensor *out[4] = {0}, *next = NULL;
    int nout = 0;
    if (!program(&p, in, nin, out, &nout)) {
        hd_attrs cast, all;
        memset(&cast, 0, sizeof cast);
        memset(&all, 0, sizeof all);
        cast.dtype = in[0]->dtype;
        hd_tensor *c = loop_op(ctx, HD_OP_CAST, out[0], NULL, &cast);
        hd_tensor *m = c ? loop_op(ctx, HD_OP_MEAN, c, NULL, &all) : NULL;
        hd_tensor *tm = m ? loop_op(ctx, HD_OP_TANH, m, NULL, NULL) : NULL;
        hd_tensor *k = hd_tensor_number(ctx, in[0]->dtype, 0.1);
        hd_tensor *d = tm && k ? loop_op(ctx, HD_OP_MUL, tm, k, NULL) : NULL;
        hd_tensor *sum = d ? loop_op(ctx, HD_OP_ADD, in[0], d, NULL) : NULL;
        next = sum ? loop_op(ctx, HD_OP_TANH, sum, NULL, NULL) : NULL;
        hd_tensor *tmp[] = {c, m, tm, k, d, sum};
        for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) hd_tensor_unref(tmp[i]);
    }
    prog_clear(&p);
    for (int i = 0; i < 4; i++) hd_tensor_unref(out[i]);
    return next;
}

/* k + 1 and (k + 1 < trips): a while body's count and condition. */
static hd_status loop_count(hd_ctx *ctx, hd_tensor *k, int64_t trips, hd_tensor **k1,
                            hd_tensor **go) {
    hd_tensor *one = hd_tensor_number(ctx, HD_I64, 1),
              *lim = hd_tensor_number(ctx, HD_I64, (double)trips);
    *k1 = one ? loop_op(ctx, HD_OP_ADD, k, one, NULL) : NULL;
    *go = *k1 && lim ? loop_op(ctx, HD_OP_LT, *k1, lim, NULL) : NULL;
    hd_tensor_unref(one);
    hd_tensor_unref(lim);
    return *go ? HD_OK : ctx->status;
}

/* The body for loop_step, traced over symbolic inputs like in. A while
 * body (trips >= 0) also carries a count k and the condition k < trips
 * after x: its inputs x, k, go, the others. */
static hd_ir_graph *loop_body(hd_ctx *ctx, uint64_t pseed, hd_dtype dt, hd_tensor *const *in,
                              int nin, int64_t trips) {
    hd_tensor *sym[4] = {0}, *cnt[4] = {0}, *next = NULL;
    hd_ir_graph *g = NULL;
    hd_status st = hd_trace_begin(ctx, "rand.loop");
    for (int i = 0; i < nin && !st; i++) {
        char name[16];
        snprintf(name, sizeof name, "in%d", i);
        if (!(sym[i] = hd_trace_input(ctx, name, in[i]->dtype, in[i]->shape, in[i]->ndim)))
            st = ctx->status;
        if (!st && i == 0 && trips >= 0 &&
            (!(cnt[0] = hd_trace_input(ctx, "k", HD_I64, NULL, 0)) ||
             !(cnt[1] = hd_trace_input(ctx, "go", HD_BOOL, NULL, 0))))
            st = ctx->status;
    }
    if (!st && !(next = loop_step(ctx, pseed, dt, sym, nin))) st = ctx->status;
    if (!st) st = hd_trace_output(ctx, "x", next);
    if (!st && trips >= 0 && !(st = loop_count(ctx, cnt[0], trips, &cnt[2], &cnt[3])))
        st = hd_trace_output(ctx, "k", cnt[2]) || hd_trace_output(ctx, "go", cnt[3]);
    if (st)
        hd_trace_abort(ctx);
    else
        hd_trace_end(ctx, &g);
    for (int i = 0; i < 4; i++) hd_tensor_unref(sym[i]), hd_tensor_unref(cnt[i]);
    hd_tensor_unref(next);
    return g;
}

/* The loop node's inputs for a while body: x, k = 0, go = trips > 0, the
 * others; -1 on error. */
static int loop_while_inputs(hd_ir_graph *g, int64_t trips, int *ids, int nin) {
    hd_tensor *k = hd_tensor_number(g->ctx, HD_I64, 0),
              *go = hd_tensor_number(g->ctx, HD_BOOL, trips > 0);
    memmove(ids + 3, ids + 1, (size_t)(nin - 1) * sizeof *ids);
    ids[1] = k ? hd_ir_add_const(g, k) : -1;
    ids[2] = go ? hd_ir_add_const(g, go) : -1;
    hd_tensor_unref(k);
    hd_tensor_unref(go);
    return ids[1] < 0 || ids[2] < 0 ? -1 : nin + 2;
}

/* A graph of one loop node over body, its result x: trips iterations with
 * x carried, or (while, wtrips >= 0) while k < trips with x, k, go. */
static hd_ir_graph *loop_graph(hd_ctx *ctx, hd_ir_graph *body, int64_t trips, int64_t wtrips,
                               hd_tensor *const *in, int nin) {
    hd_ir_graph *g = hd_ir_graph_new(ctx, "rand");
    int ids[8], src[3] = {0, 1, 2}, ok = g != NULL, n = nin;
    for (int i = 0; ok && i < nin; i++) {
        char name[16];
        snprintf(name, sizeof name, "in%d", i);
        ok = (ids[i] = hd_ir_add_input(g, name, in[i]->dtype, in[i]->shape, in[i]->ndim)) >= 0;
    }
    if (ok && wtrips >= 0) ok = (n = loop_while_inputs(g, wtrips, ids, nin)) > 0;
    int loop = ok ? hd_ir_add_loop(g, body, trips, ids, n, wtrips >= 0 ? 3 : 1, src) : -1;
    if (!ok) hd_ir_graph_free(body);
    if (loop >= 0 && wtrips >= 0 && hd_ir_loop_while(g, loop, 2)) loop = -1;
    int x = loop >= 0 ? hd_ir_add_loop_out(g, loop, 0) : -1;
    if (x < 0 || hd_ir_add_output(g, "x", x) || hd_ir_verify(g)) {
        hd_ir_graph_free(g);
        return NULL;
    }
    return g;
}

static uint64_t loop_graphs = 300;

static void one_loop(hd_ctx *ctx, uint64_t seed, result *r) {
    prog gen = {ctx, seed * 0x2545f4914f6cdd1dULL + 7, HD_F32, {0}, 0};
    gen.dt = rint_(&gen, 3) ? HD_F32 : HD_F64;
    hd_tensor *in[4] = {0}, *x = NULL;
    int nin = rand_inputs(&gen, in);
    int64_t trips = 1 + rint_(&gen, 7);
    uint64_t pseed = rnd(&gen) | 1;
    int is_while = seed % 3 == 0; /* a while loop of 0..7 iterations */
    if (is_while) trips = rint_(&gen, 8);
    hd_tensor *cur[4];
    memcpy(cur, in, sizeof cur);
    x = hd_tensor_ref(in[0]);
    for (int64_t t = 0; t < trips && x; t++) { /* the reference */
        cur[0] = x;
        hd_tensor *next = loop_step(ctx, pseed, gen.dt, cur, nin);
        hd_tensor_unref(x);
        x = next;
    }
    if (!x) { /* eager refused the program: not a test */
        hd_error_clear(ctx);
        r->skipped++;
    } else {
        hd_ir_graph *body = loop_body(ctx, pseed, gen.dt, in, nin, is_while ? trips : -1);
        hd_ir_graph *g =
            body ? loop_graph(ctx, body, is_while ? 1 : trips, is_while ? trips : -1, in, nin)
                 : NULL;
        int ok = g != NULL;
        for (int c = 0; ok && c < NCOMPILERS; c++)
            if (c == 0 || seed <= llvm_graphs / 10)
                ok = run_compiled(ctx, seed, compilers[c], g, in, nin, &x, 1);
        /* up to 7 iterations of a body whose reductions the device sums in
         * another order: the differences add up */
        if (ok && seed <= cuda_graphs) ok = run_cuda(ctx, seed, g, in, nin, &x, 1, 10);
        if (ok) r->ok++;
        CHECK_MSG(ok, "loop seed %llu (%s%lld trips)", (unsigned long long)seed,
                  is_while ? "while, " : "", (long long)trips);
        hd_ir_graph_free(g);
        hd_error_clear(ctx);
    }
    hd_tensor_unref(x);
    for (int i = 0; i < 4; i++) hd_tensor_unref(in[i]);
}

static void one_graph(hd_ctx *ctx, uint64_t seed, result *r) {
    prog gen = {ctx, seed * 0x9e3779b97f4a7c15ULL + 1, HD_F32, {0}, 0};
    gen.dt = rint_(&gen, 3) ? HD_F32 : HD_F64;
    hd_tensor *in[4] = {0}, *want[4] = {0};
    int nin = rand_inputs(&gen, in);
    uint64_t pseed = rnd(&gen) | 1;
    prog p = {ctx, pseed, gen.dt, {0}, 0};
    int nout = 0;
    if (program(&p, in, nin, want, &nout)) { /* eager refused it: not a test */
        hd_error_clear(ctx);
        r->skipped++;
        prog_clear(&p);
        goto done;
    }
    prog_clear(&p);
    hd_ir_graph *g = trace_program(ctx, pseed, gen.dt, in, nin);
    int ok = g != NULL;
    for (int c = 0; ok && c < NCOMPILERS; c++)
        if (c == 0 || seed <= llvm_graphs)
            ok = run_compiled(ctx, seed, compilers[c], g, in, nin, want, nout);
#if HODU_HAVE_LLVM
    if (ok && seed <= llvm_graphs) ok = run_donated(ctx, seed, g, in, nin, want, nout, r);
#endif
    if (ok && seed <= cuda_graphs) ok = run_cuda(ctx, seed, g, in, nin, want, nout, 1);
    const char *dir = getenv("HODU_RANDGRAPH_SAVE"); /* seeds for the script fuzzer */
    if (ok && dir && seed <= 60) {
        char path[512];
        snprintf(path, sizeof path, "%s/rand%03llu.hoduscript", dir, (unsigned long long)seed);
        ok = hd_script_save_graph(ctx, g, path) == HD_OK;
    }
    if (ok) r->ok++;
    CHECK_MSG(ok, "seed %llu", (unsigned long long)seed);
    hd_ir_graph_free(g);
    hd_error_clear(ctx);
done:
    for (int i = 0; i < 4; i++) {
        hd_tensor_unref(in[i]);
        hd_tensor_unref(want[i]);
    }
}

int main(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    ctx.nthreads = 1;
    result r = {0, 0, 0};
    const char *one = getenv("HODU_RANDGRAPH_SEED"), *count = getenv("HODU_RANDGRAPH_N");
    uint64_t n = count ? strtoull(count, NULL, 10) : NGRAPHS;
    const char *nl = getenv("HODU_RANDGRAPH_LLVM");
    if (nl) llvm_graphs = strtoull(nl, NULL, 10);
    const char *nc = getenv("HODU_RANDGRAPH_CUDA");
    if (nc) cuda_graphs = strtoull(nc, NULL, 10);
    setenv("HODU_CACHE_DIR", "off", 1); /* llvm compiles every graph */
    const char *nloop = getenv("HODU_RANDGRAPH_LOOPS");
    if (nloop) loop_graphs = strtoull(nloop, NULL, 10);
    if (one) {
        one_graph(&ctx, strtoull(one, NULL, 10), &r);
        one_loop(&ctx, strtoull(one, NULL, 10), &r);
    } else {
        result lr = {0, 0, 0};
        for (uint64_t seed = 1; seed <= loop_graphs; seed++) one_loop(&ctx, seed, &lr);
        printf("%d loop graphs agree, %d programs refused eagerly\n", lr.ok, lr.skipped);
        CHECK(lr.ok + lr.skipped == (int)loop_graphs && lr.skipped < (int)loop_graphs / 20 + 1);
        for (uint64_t seed = 1; seed <= n; seed++) one_graph(&ctx, seed, &r);
        printf("%d graphs agree (interp; llvm on the first %d too), %d programs refused eagerly\n",
               r.ok, NCOMPILERS > 1 ? (int)(llvm_graphs < n ? llvm_graphs : n) : 0, r.skipped);
        CHECK(r.ok + r.skipped == (int)n && r.skipped < (int)n / 20 + 1);
#if HODU_HAVE_LLVM
        printf("%d outputs donated by llvm (outputs marked to replace an input)\n", r.donated);
        CHECK(r.donated > 0 || llvm_graphs < 100);
#endif
    }
    hd_ctx_release(&ctx); /* the device's state, when cuda ran */
    CHECK(ctx.mem_used == 0);
    TEST_END();
}
