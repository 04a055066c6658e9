/* The gradient of a branch on tensor data (docs/compiled.md, "Branches on
 * tensor data"). A cond is two loop nodes, the then branch's body run c
 * times and the else branch's 1 - c times (c the condition's truth), so
 * its backward is two reverse loops run the other way: the else branch's
 * reverse body 1 - c times, then the then branch's c times. Each reverse
 * body is derived once, by tracing (hd_tg_derive), and reads the values
 * the branch read, which are inputs of the loops themselves: no stacks.
 *
 * A cond rolls with its gradient only when both branches pass gradients
 * to the same values: eagerly only the branch taken runs, and a value only
 * the other branch reads would get a .grad of zeros where eager code
 * leaves none. Otherwise the branch stays the error it was. */
#include "hd_autograd.h"
#include "hd_trace.h"
#include "hd_trace_int.h"

#include <stdio.h>
#include <string.h>

/* One branch's reverse. */
typedef struct cond_side {
    hd_ir_graph *rev;
    int nx;     /* the body's invariant inputs (outer values, then the count) */
    int *xval;  /* their values in the trace; the count's is set at the end */
    int *gx_at; /* per invariant input: its place among the gradients, or -1 */
    int ngx;
} cond_side;

struct hd_cond_grad {
    int refs;
    hd_ctx *ctx;
    uint32_t serial;
    int n;
    int *v0, *s1; /* the variables before, and after the then loop */
    int *gc_at;   /* per variable: its place among the float ones, or -1 */
    int ngc;
    cond_side side[2];
    hd_grad_roll roll;
    int *tc, *tx, *ex; /* per front edge: the variable, the then / else invariant input it
                          is, or -1 */
    uint64_t *use;     /* per variable: the front edges its gradient reaches (bits) */
    int nfront;
};

typedef struct cond_out {
    hd_cond_grad *cg;
    int k;      /* the variable */
    int nin;    /* the record's inputs: */
    int *front; /* each one's front edge */
} cond_out;

static void side_free(hd_ctx *ctx, cond_side *s) {
    hd_ir_graph_free(s->rev);
    if (s->xval) hd_ctx_free(ctx, s->xval, (size_t)(2 * s->nx + 1) * sizeof(int));
}

static void cg_unref(hd_cond_grad *cg) {
    if (!cg || --cg->refs > 0) return;
    hd_ctx *ctx = cg->ctx;
    side_free(ctx, &cg->side[0]);
    side_free(ctx, &cg->side[1]);
    hd_grad_roll_free(ctx, &cg->roll);
    if (cg->v0) hd_ctx_free(ctx, cg->v0, (size_t)(3 * cg->n + 1) * sizeof(int));
    if (cg->tc) hd_ctx_free(ctx, cg->tc, (size_t)(3 * cg->nfront + 1) * sizeof(int));
    if (cg->use) hd_ctx_free(ctx, cg->use, (size_t)(cg->n + 1) * sizeof(uint64_t));
    hd_ctx_free(ctx, cg, sizeof *cg);
}

void hd_trace_grad_cond_free(hd_ctx *ctx, hd_cond_grad *cg) {
    HD_UNUSED(ctx);
    cg_unref(cg);
}

static void cond_out_free(hd_ctx *ctx, void *ud) {
    cond_out *o = ud;
    cg_unref(o->cg);
    if (o->front) hd_ctx_free(ctx, o->front, (size_t)(o->nin + 1) * sizeof *o->front);
    hd_ctx_free(ctx, o, sizeof *o);
}

/* ---- backward ---- */

/* One reverse loop of side s: carried state st (1 + ngc + ngx of s),
 * the carried values cv (n), run `count` times (a 0-d i64 value). */
static hd_status cond_loop(hd_ctx *ctx, const hd_cond_grad *cg, const cond_side *s, int *st,
                           const int *cv, int count) {
    hd_ir_graph *g = hd_trace_graph(ctx);
    int nc = 1 + cg->ngc + s->ngx, nin = nc + cg->n + s->nx, in[256], src[128];
    if (nin > 256) return hd_error(ctx, HD_ERR_RUNTIME, "a compiled branch reads too many values");
    int k = 0;
    for (int i = 0; i < nc; i++) in[k++] = st[i], src[i] = i;
    for (int q = 0; q < cg->n; q++) in[k++] = cv[q];
    for (int j = 0; j < s->nx; j++) in[k++] = j == s->nx - 1 ? count : s->xval[j];
    hd_ir_graph *b = hd_ir_graph_clone(s->rev);
    int loop = b ? hd_ir_add_loop(g, b, 1, in, nin, nc, src) : -1;
    if (loop < 0 || hd_ir_loop_trips_from(g, loop, nin - 1)) return ctx->status;
    for (int i = 0; i < nc; i++)
        if ((st[i] = hd_ir_add_loop_out(g, loop, i)) < 0) return ctx->status;
    return HD_OK;
}

/* Zero gradients for side s's wanted inputs into st from place at. */
static hd_status cond_zero_gx(hd_ctx *ctx, const cond_side *s, int *st) {
    hd_ir_graph *g = hd_trace_graph(ctx);
    for (int j = 0; j < s->nx; j++)
        if (s->gx_at[j] >= 0 && (st[s->gx_at[j]] = hd_tg_zeros_like(ctx, g, s->xval[j])) < 0)
            return ctx->status;
    return HD_OK;
}

/* The gradient of front edge f: what the then loop left for its variable
 * and each side's summed gradient of the value. */
static hd_tensor *cond_gin(hd_ctx *ctx, const hd_cond_grad *cg, const int *t, const int *e, int f) {
    int v[3], nv = 0, tc = cg->tc[f], tx = cg->tx[f], ex = cg->ex[f];
    if (tc >= 0 && cg->gc_at[tc] >= 0) v[nv++] = t[1 + cg->gc_at[tc]];
    if (tx >= 0 && cg->side[0].gx_at[tx] >= 0) v[nv++] = t[1 + cg->ngc + cg->side[0].gx_at[tx]];
    if (ex >= 0 && cg->side[1].gx_at[ex] >= 0) v[nv++] = e[1 + cg->ngc + cg->side[1].gx_at[ex]];
    if (!nv) return NULL;
    hd_tensor *acc = hd_trace_symbolic_of(ctx, v[0]);
    for (int i = 1; i < nv && acc; i++) {
        hd_tensor *b = hd_trace_symbolic_of(ctx, v[i]), *sum = NULL;
        if (b) hd_op_binary(ctx, HD_OP_ADD, acc, b, &sum);
        hd_tensor_unref(b);
        hd_tensor_unref(acc);
        acc = sum;
    }
    return acc;
}

static hd_status cond_backward(hd_ctx *ctx, void *ud, hd_tensor *g, const unsigned char *need,
                               hd_tensor **gin, int nin) {
    const cond_out *o = ud;
    const hd_cond_grad *cg = o->cg;
    if (!hd_trace_serial(ctx) || hd_trace_serial(ctx) != cg->serial)
        return hd_error(
            ctx, HD_ERR_RUNTIME,
            "backward() through a compiled branch outside the compiled code that ran it");
    if (nin != o->nin) return hd_error(ctx, HD_ERR_RUNTIME, "a branch's gradient lost its inputs");
    hd_ir_graph *gr = hd_trace_graph(ctx);
    int e[130], t[130], gv = hd_trace_value(ctx, g);
    if (gv < 0) return ctx->status;
    /* the else branch first: cotangents of the variables, zero gradients */
    if ((e[0] = hd_tg_const(ctx, gr, hd_tensor_scalar(ctx, HD_I64, 0))) < 0) return ctx->status;
    for (int q = 0; q < cg->n; q++)
        if (cg->gc_at[q] >= 0 &&
            (e[1 + cg->gc_at[q]] = q == o->k ? gv : hd_tg_zeros_like(ctx, gr, cg->v0[q])) < 0)
            return ctx->status;
    if (cond_zero_gx(ctx, &cg->side[1], e + 1 + cg->ngc) ||
        cond_loop(ctx, cg, &cg->side[1], e, cg->s1, cg->side[1].xval[cg->side[1].nx - 1]))
        return ctx->status;
    memcpy(t, e, (size_t)(1 + cg->ngc) * sizeof *t);
    if (cond_zero_gx(ctx, &cg->side[0], t + 1 + cg->ngc) ||
        cond_loop(ctx, cg, &cg->side[0], t, cg->v0, cg->side[0].xval[cg->side[0].nx - 1]))
        return ctx->status;
    for (int j = 0; j < nin; j++) {
        if (!need[j]) continue;
        gin[j] = cond_gin(ctx, cg, t, e, o->front[j]);
        if (!gin[j] && ctx->status) return ctx->status;
    }
    return HD_OK;
}

static const hd_grad_custom cond_custom = {cond_backward, cond_out_free};

/* ---- at the trace ---- */

/* Each front edge's variable and invariant inputs; NULL or why not. */
static const char *cond_map(hd_ctx *ctx, hd_cond_grad *cg, const hd_cond_grad_in *in) {
    for (int f = 0; f < cg->nfront; f++) {
        const hd_grad_front *fr = &cg->roll.front[f];
        int v = fr->e.node ? hd_tg_ref_value(ctx, fr->ref) : hd_trace_value(ctx, fr->e.leaf);
        if (v < 0) return ctx->status ? "out of memory" : "a value it reads was not traced";
        int *at[3] = {&cg->tc[f], &cg->tx[f], &cg->ex[f]};
        const int *vals[3] = {in->v0, in->outer[0], in->outer[1]};
        int nvals[3] = {in->n, in->nouter[0], in->nouter[1]};
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < nvals[k]; j++)
                if (vals[k][j] == v) {
                    if (*at[k] >= 0) return "it reads one value as two of its inputs";
                    *at[k] = j;
                }
        if (cg->tc[f] < 0 && cg->tx[f] < 0 && cg->ex[f] < 0)
            return "a gradient leaves it by a value it does not read";
        for (int e = 0; e < f; e++)
            if (cg->tc[e] == cg->tc[f] && cg->tx[e] == cg->tx[f] && cg->ex[e] == cg->ex[f])
                return "two gradients flow to one of its inputs";
    }
    return NULL;
}

/* The front edges (bits) variable i's gradient reaches if branch k runs. */
static uint64_t cond_reach(const hd_cond_grad *cg, int k, uint64_t dep) {
    uint64_t m = 0;
    const int *x = k ? cg->ex : cg->tx;
    for (int f = 0; f < cg->nfront; f++)
        if ((cg->tc[f] >= 0 && (dep >> cg->tc[f] & 1)) ||
            (x[f] >= 0 && (dep >> (cg->n + x[f]) & 1)))
            m |= 1ull << f;
    return m;
}

/* Both branches must pass each variable's gradient to the same values. */
static const char *cond_deps(hd_ctx *ctx, hd_cond_grad *cg, const hd_cond_grad_in *in) {
    size_t bytes = (size_t)(2 * in->n + 2) * sizeof(uint64_t);
    uint64_t *dep = hd_ctx_alloc(ctx, bytes);
    if (!dep) return NULL;
    const char *why = NULL;
    if (!hd_tg_body_deps(ctx, in->body[0], dep) &&
        !hd_tg_body_deps(ctx, in->body[1], dep + in->n + 1))
        for (int i = 0; i < in->n && !why; i++) {
            cg->use[i] = cond_reach(cg, 0, dep[i]);
            if (cg->use[i] != cond_reach(cg, 1, dep[in->n + 1 + i]))
                why = "its branches pass gradients to different values";
        }
    hd_ctx_free(ctx, dep, bytes);
    return why;
}

static hd_status cond_alloc(hd_ctx *ctx, hd_cond_grad *cg, const hd_cond_grad_in *in) {
    int n = in->n;
    cg->nfront = cg->roll.nfront;
    cg->v0 = hd_ctx_alloc(ctx, (size_t)(3 * n + 1) * sizeof(int));
    cg->tc = hd_ctx_alloc(ctx, (size_t)(3 * cg->nfront + 1) * sizeof(int));
    cg->use = hd_ctx_calloc(ctx, (size_t)n + 1, sizeof(uint64_t));
    if (!cg->v0 || !cg->tc || !cg->use) return ctx->status;
    cg->s1 = cg->v0 + n, cg->gc_at = cg->s1 + n;
    cg->tx = cg->tc + cg->nfront, cg->ex = cg->tx + cg->nfront;
    memset(cg->tc, 0xff, (size_t)(3 * cg->nfront + 1) * sizeof(int));
    memcpy(cg->v0, in->v0, (size_t)n * sizeof(int));
    for (int q = 0; q < n; q++) {
        hd_dtype dt = in->body[0]->values[in->body[0]->inputs[q].value].dtype;
        cg->gc_at[q] = hd_dtype_is_float(dt) ? cg->ngc++ : -1;
    }
    for (int k = 0; k < 2; k++) {
        cond_side *s = &cg->side[k];
        s->nx = in->nouter[k] + 1;
        if (!(s->xval = hd_ctx_alloc(ctx, (size_t)(2 * s->nx + 1) * sizeof(int))))
            return ctx->status;
        s->gx_at = s->xval + s->nx;
        memcpy(s->xval, in->outer[k], (size_t)in->nouter[k] * sizeof(int));
        s->xval[s->nx - 1] = -1; /* the count, at the end */
    }
    return HD_OK;
}

/* Which invariant inputs' gradients each side sums, and its reverse body. */
static hd_status cond_derive(hd_ctx *ctx, hd_cond_grad *cg, const hd_cond_grad_in *in) {
    int src[64];
    unsigned char need[64];
    for (int q = 0; q < in->n; q++) src[q] = q;
    for (int k = 0; k < 2; k++) {
        cond_side *s = &cg->side[k];
        const int *x = k ? cg->ex : cg->tx;
        const hd_ir_graph *b = in->body[k];
        for (int j = 0; j < s->nx; j++) {
            int wanted = 0;
            for (int f = 0; f < cg->nfront; f++) wanted |= x[f] == j;
            need[j] = wanted && hd_dtype_is_float(b->values[b->inputs[in->n + j].value].dtype);
            s->gx_at[j] = need[j] ? s->ngx++ : -1;
        }
        hd_tg_spec sp = {b, 1, in->n, src, need, -1, 1, NULL};
        char name[160];
        snprintf(name, sizeof name, "%s.grad", b->name ? b->name : "cond");
        if (hd_tg_derive(ctx, &sp, name, &s->rev)) return ctx->status;
    }
    return HD_OK;
}

/* NULL, or why the cond cannot carry gradients; ctx->status on errors. */
static const char *cond_check(hd_ctx *ctx, hd_cond_grad *cg, const hd_cond_grad_in *in) {
    const char *why = NULL;
    if (hd_grad_roll_scan(ctx, in->gen, in->gen, &cg->roll, &why) || why) return why;
    hd_grad_roll_drop_held(ctx, &cg->roll);
    for (int i = 0; i < in->n; i++)
        if (hd_grad_roll_add_tensor(ctx, &cg->roll, in->init[i])) return NULL;
    if (in->n > 60 || cg->roll.nfront > 64 || in->n + in->nouter[0] + 1 > 64 ||
        in->n + in->nouter[1] + 1 > 64)
        return "it reads or writes too many values";
    if (cond_alloc(ctx, cg, in)) return NULL;
    if ((why = cond_map(ctx, cg, in)) || (why = cond_deps(ctx, cg, in)) || ctx->status) return why;
    if (1 + cg->ngc + cg->side[0].nx > 128 || 1 + cg->ngc + cg->side[1].nx > 128)
        return "it reads or writes too many values";
    if (cond_derive(ctx, cg, in) && ctx->status != HD_ERR_MEMORY) {
        hd_error_clear(ctx);
        return "its gradient would recompute what cannot be (a loop, a random draw)";
    }
    return NULL;
}

hd_status hd_trace_grad_cond_prepare(hd_ctx *ctx, const hd_cond_grad_in *in, hd_cond_grad **out,
                                     const char **why) {
    *out = NULL;
    hd_cond_grad *cg = hd_ctx_calloc(ctx, 1, sizeof *cg);
    if (!cg) return ctx->status;
    cg->refs = 1;
    cg->ctx = ctx;
    cg->serial = hd_trace_serial(ctx);
    cg->n = in->n;
    *why = cond_check(ctx, cg, in);
    hd_status st = *why ? HD_OK : ctx->status;
    if (st || *why) {
        cg_unref(cg);
        return st;
    }
    *out = cg;
    return HD_OK;
}

/* Variable k's record over the front edges its gradient reaches. */
static hd_status cond_record(hd_ctx *ctx, hd_cond_grad *cg, int k, hd_tensor *t,
                             unsigned char *use) {
    cond_out *o = hd_ctx_calloc(ctx, 1, sizeof *o);
    if (!o) return ctx->status;
    o->cg = cg;
    o->k = k;
    cg->refs++;
    for (int f = 0; f < cg->nfront; f++) o->nin += (use[f] = cg->use[k] >> f & 1);
    if (!(o->front = hd_ctx_alloc(ctx, (size_t)(o->nin + 1) * sizeof *o->front))) {
        cond_out_free(ctx, o);
        return ctx->status;
    }
    for (int f = 0, j = 0; f < cg->nfront; f++)
        if (use[f]) o->front[j++] = f;
    return hd_grad_roll_record(ctx, &cg->roll, use, t, &cond_custom, o);
}

hd_status hd_trace_grad_cond_finish(hd_ctx *ctx, hd_cond_grad *cg, const int *s1, const int *count,
                                    hd_tensor *const *out) {
    unsigned char use[65];
    hd_status st = HD_OK;
    memcpy(cg->s1, s1, (size_t)cg->n * sizeof *s1);
    cg->side[0].xval[cg->side[0].nx - 1] = count[0];
    cg->side[1].xval[cg->side[1].nx - 1] = count[1];
    for (int k = 0; k < cg->n && !st; k++)
        if (cg->gc_at[k] >= 0 && cg->use[k]) st = cond_record(ctx, cg, k, out[k], use);
    hd_grad_roll_free(ctx, &cg->roll); /* the records hold their edges */
    cg_unref(cg);
    return st;
}
