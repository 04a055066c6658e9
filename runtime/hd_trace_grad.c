/* The gradient of a rolled loop (docs/ir.md, "Gradients through loops").
 *
 * When two traced iterations A and B that become a loop node leave
 * gradient records alive (a chain that runs through the iterations, as in
 * `for i in 0..n { h = tanh(h @ w + b) }` followed by backward()), the loop
 * rolls only if its backward can be a loop too:
 *
 * - the loop node stacks each carried input as every iteration began
 *   (hd_ir_loop_stack: a [trips, ...] result per carried input);
 * - the reverse body is derived once, by tracing: from a stacked slot of
 *   each carried input and the invariant inputs, the forward body is run
 *   again (recomputed) and backward() taken with the carried cotangents as
 *   seeds. Its outputs are the cotangents of the carried inputs (carried
 *   back to the iteration before) and the invariant inputs' gradients
 *   summed over the iterations;
 * - each record of B that a tensor holds is made to pass its gradient to a
 *   new record whose backward adds the reverse loop(s) to the trace:
 *   trips iterations of the reverse body from t = trips - 1 down to 0.
 *
 * Saving the carried inputs and recomputing the rest of each iteration
 * keeps the memory at trips times the carried state, not trips times every
 * value the body makes, and each reverse iteration computes the forward
 * body once more (as gradient checkpointing at every iteration does).
 * Where the backward reads a carried result itself (tanh's and sigmoid's
 * read their output), it reads the forward's value instead, the next
 * iteration's slot of the stack (the loop's result for the last one), so
 * the recomputation that only made it drops out of the reverse body.
 *
 * A body with a loop inside it, a random draw or an effect it cannot
 * recompute, or records reaching outside the trace, keeps the loop
 * unrolled, which is always correct. */
#include "hd_autograd.h"
#include "hd_trace.h"
#include "hd_trace_int.h"

#include <stdio.h>
#include <string.h>

/* ---- the reverse body, by tracing ---- */

/* The forward body's tensors during the derivation. */
typedef struct grad_run {
    hd_ctx *ctx;
    const hd_tg_spec *sp;
    int nx;                 /* invariant inputs */
    hd_tensor **val;        /* per body value */
    hd_tensor *i;           /* the slot */
    hd_tensor **gc, **gx;   /* carried cotangents (NULL: not a float) */
    hd_tensor **s, **x, *e; /* stacks, invariant inputs, the extra cotangent */
    hd_tensor **c;          /* the carried inputs: slot i of their stacks */
    hd_tensor **n, **nc;    /* next stacks (sp->next), and slot i of each */
} grad_run;

static int body_random(int op) {
    return op == HD_OP_RAND || op == HD_OP_RANDN || op == HD_OP_DROPOUT;
}

static hd_tensor *grad_input(grad_run *R, const char *fmt, int k, hd_dtype dt, const int64_t *shape,
                             int ndim, int stacked) {
    char name[32];
    int64_t sh[HD_MAX_DIMS];
    snprintf(name, sizeof name, fmt, k);
    if (stacked) {
        sh[0] = R->sp->trips;
        memcpy(sh + 1, shape, (size_t)ndim * sizeof *shape);
    }
    return hd_trace_input(R->ctx, name, dt, stacked ? sh : shape, ndim + stacked);
}

static const hd_ir_value *body_in(const hd_ir_graph *b, int k) {
    return &b->values[b->inputs[k].value];
}

/* Every input of the reverse body, in its order: carried (i, the float
 * carries' cotangents, the wanted gradients), then the stacks, the
 * invariant inputs and the extra cotangent. */
static hd_status grad_inputs(grad_run *R) {
    const hd_tg_spec *sp = R->sp;
    const hd_ir_graph *b = sp->body;
    hd_ctx *ctx = R->ctx;
    if (!(R->i = hd_trace_input(ctx, "i", HD_I64, NULL, 0))) return ctx->status;
    for (int q = 0; q < sp->ncarry; q++) {
        const hd_ir_value *v = body_in(b, q);
        if (hd_dtype_is_float(v->dtype) &&
            !(R->gc[q] = grad_input(R, "gc%d", q, v->dtype, v->shape, v->ndim, 0)))
            return ctx->status;
    }
    for (int j = 0; j < R->nx; j++) {
        const hd_ir_value *v = body_in(b, sp->ncarry + j);
        if (sp->need_x[j] && !(R->gx[j] = grad_input(R, "gx%d", j, v->dtype, v->shape, v->ndim, 0)))
            return ctx->status;
    }
    for (int q = 0; q < sp->ncarry; q++) {
        const hd_ir_value *v = body_in(b, q);
        if (!(R->s[q] = grad_input(R, sp->direct ? "c%d" : "s%d", q, v->dtype, v->shape, v->ndim,
                                   !sp->direct)))
            return ctx->status;
    }
    for (int j = 0; j < R->nx; j++) {
        const hd_ir_value *v = body_in(b, sp->ncarry + j);
        if (!(R->x[j] = grad_input(R, "x%d", j, v->dtype, v->shape, v->ndim, 0)))
            return ctx->status;
    }
    if (sp->extra >= 0) {
        const hd_ir_value *v = &b->values[b->outputs[sp->extra].value];
        if (!(R->e = grad_input(R, "e%d", sp->extra, v->dtype, v->shape, v->ndim, 0)))
            return ctx->status;
    }
    for (int q = 0; q < sp->ncarry; q++) {
        const hd_ir_value *v = body_in(b, q);
        if (sp->next && sp->next[q] &&
            !(R->n[q] = grad_input(R, "n%d", q, v->dtype, v->shape, v->ndim, 1)))
            return ctx->status;
    }
    return HD_OK;
}

/* Slot i of stack s (traced): *out. */
static hd_status grad_slot(grad_run *R, hd_tensor *s, hd_tensor **out) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    hd_tensor *in[2] = {s, R->i};
    return hd_op_run(R->ctx, HD_OP_INDEX_SELECT, in, 2, &at, out);
}

/* Slot i of each next stack, and where the backward (traced after
 * graph node `from`) reads the recomputed carried result, the slot
 * instead. */
static hd_status grad_next_slots(grad_run *R) {
    for (int q = 0; q < R->sp->ncarry; q++)
        if (R->n[q] && grad_slot(R, R->n[q], &R->nc[q])) return R->ctx->status;
    return HD_OK;
}

static void grad_next_rewire(grad_run *R, int from) {
    const hd_tg_spec *sp = R->sp;
    hd_ir_graph *g = hd_trace_graph(R->ctx);
    for (int q = 0; q < sp->ncarry; q++) {
        if (!R->nc[q]) continue;
        hd_tensor *rec = R->val[sp->body->outputs[sp->carry_src[q]].value];
        int rv = rec ? hd_trace_value(R->ctx, rec) : -1, nv = hd_trace_value(R->ctx, R->nc[q]);
        if (rv < 0 || nv < 0) continue;
        for (int j = from; j < g->nnodes; j++)
            for (int k = 0; k < g->nodes[j].nin; k++)
                if (g->nodes[j].in[k] == rv) g->nodes[j].in[k] = nv;
    }
}

/* The body's inputs as tensors that require grad where wanted: slot i of
 * each stack, the invariant inputs. */
static hd_status grad_leaves(grad_run *R) {
    const hd_tg_spec *sp = R->sp;
    hd_ctx *ctx = R->ctx;
    for (int q = 0; q < sp->ncarry; q++) {
        if (sp->direct)
            R->c[q] = hd_tensor_ref(R->s[q]);
        else if (grad_slot(R, R->s[q], &R->c[q]))
            return ctx->status;
        if (R->gc[q] && hd_grad_set_requires(ctx, R->c[q], 1)) return ctx->status;
        R->val[sp->body->inputs[q].value] = hd_tensor_ref(R->c[q]);
    }
    for (int j = 0; j < R->nx; j++) {
        if (sp->need_x[j] && hd_grad_set_requires(ctx, R->x[j], 1)) return ctx->status;
        R->val[sp->body->inputs[sp->ncarry + j].value] = hd_tensor_ref(R->x[j]);
    }
    return HD_OK;
}

/* The forward body once more, op by op (its prints are the forward's). */
static hd_status grad_replay(grad_run *R) {
    const hd_ir_graph *b = R->sp->body;
    hd_ctx *ctx = R->ctx;
    for (int c = 0; c < b->nconsts; c++) R->val[b->consts[c].value] = hd_tensor_ref(b->consts[c].t);
    for (int k = 0; k < b->nnodes; k++) {
        const hd_ir_node *n = &b->nodes[k];
        if (n->op == HD_IR_CALLBACK || n->op == HD_IR_DEAD) continue;
        if (n->op < 0) return hd_error(ctx, HD_ERR_RUNTIME, "a loop inside it");
        if (body_random(n->op)) return hd_error(ctx, HD_ERR_RUNTIME, "a random draw inside it");
        hd_tensor *in[HD_OP_MAX_IN * 4];
        if (n->nin > (int)(sizeof in / sizeof *in))
            return hd_error(ctx, HD_ERR_RUNTIME, "an op of %d inputs", n->nin);
        for (int i = 0; i < n->nin; i++)
            if (!(in[i] = R->val[n->in[i]])) return hd_error(ctx, HD_ERR_RUNTIME, "a lost value");
        if (hd_op_run(ctx, (hd_op)n->op, in, n->nin, &n->attrs, &R->val[n->out]))
            return ctx->status;
    }
    return HD_OK;
}

static hd_status grad_seed(hd_ctx *ctx, hd_tensor *root, hd_tensor *seed) {
    if (!root || !seed || !hd_grad_requires(ctx, root)) return HD_OK;
    return hd_grad_backward(ctx, root, seed, 1);
}

/* A zero tensor of t's dtype and shape (a constant of the trace). */
static hd_tensor *grad_zeros(hd_ctx *ctx, const hd_tensor *t) {
    hd_tensor *z = hd_tensor_new(ctx, t->dtype, t->shape, t->ndim);
    if (z) memset(z->storage->data, 0, hd_tensor_nbytes(z));
    return z;
}

/* Backward from the seeds, then the outputs: i - 1, the cotangents of the
 * carried inputs, the summed gradients. */
static hd_status grad_outputs(grad_run *R) {
    const hd_tg_spec *sp = R->sp;
    const hd_ir_graph *b = sp->body;
    hd_ctx *ctx = R->ctx;
    hd_status st = HD_OK;
    for (int q = 0; q < sp->ncarry && !st; q++)
        st = grad_seed(ctx, R->val[b->outputs[sp->carry_src[q]].value], R->gc[q]);
    if (!st && sp->extra >= 0) st = grad_seed(ctx, R->val[b->outputs[sp->extra].value], R->e);
    int was = hd_grad_set_enabled(ctx, 0);
    hd_tensor *one = st ? NULL : hd_tensor_scalar(ctx, HD_I64, 1), *t = NULL;
    if (!st &&
        (!one || hd_op_binary(ctx, HD_OP_SUB, R->i, one, &t) || hd_trace_output(ctx, "i", t)))
        st = ctx->status;
    hd_tensor_unref(one);
    hd_tensor_unref(t);
    for (int q = 0; q < sp->ncarry && !st; q++) {
        if (!R->gc[q]) continue;
        hd_tensor *g = hd_grad_get(R->c[q]);
        hd_tensor *z = g ? hd_tensor_ref(g) : grad_zeros(ctx, R->c[q]);
        char name[32];
        snprintf(name, sizeof name, "gc%d", q);
        if (!z || hd_trace_output(ctx, name, z)) st = ctx->status;
        hd_tensor_unref(z);
    }
    for (int j = 0; j < R->nx && !st; j++) {
        if (!R->gx[j]) continue;
        hd_tensor *g = hd_grad_get(R->x[j]), *sum = NULL;
        if (g ? hd_op_binary(ctx, HD_OP_ADD, R->gx[j], g, &sum) : !(sum = hd_tensor_ref(R->gx[j])))
            st = ctx->status;
        if (!st && sum->dtype != R->gx[j]->dtype) { /* a precision strategy ran the add wider */
            hd_tensor *c = NULL;
            st = hd_op_cast(ctx, sum, R->gx[j]->dtype, &c);
            hd_tensor_unref(sum);
            sum = c;
        }
        char name[32];
        snprintf(name, sizeof name, "gx%d", j);
        if (!st && hd_trace_output(ctx, name, sum)) st = ctx->status;
        hd_tensor_unref(sum);
    }
    hd_grad_set_enabled(ctx, was);
    return st;
}

static void grad_run_free(grad_run *R, size_t nv) {
    hd_ctx *ctx = R->ctx;
    int nc = R->sp->ncarry;
    for (size_t v = 0; v < nv; v++) hd_tensor_unref(R->val[v]);
    for (int q = 0; q < nc; q++) {
        hd_tensor_unref(R->gc[q]);
        hd_tensor_unref(R->s[q]);
        hd_tensor_unref(R->c[q]);
        hd_tensor_unref(R->n[q]);
        hd_tensor_unref(R->nc[q]);
    }
    for (int j = 0; j < R->nx; j++) {
        hd_tensor_unref(R->gx[j]);
        hd_tensor_unref(R->x[j]);
    }
    hd_tensor_unref(R->i);
    hd_tensor_unref(R->e);
    hd_ctx_free(ctx, R->val, (nv + 5 * (size_t)nc + 2 * (size_t)R->nx + 1) * sizeof *R->val);
}

static hd_status grad_trace(hd_ctx *ctx, const hd_tg_spec *sp, const char *name,
                            hd_ir_graph **out) {
    const hd_ir_graph *b = sp->body;
    size_t nv = (size_t)b->nvalues, nc = (size_t)sp->ncarry;
    grad_run R;
    memset(&R, 0, sizeof R);
    R.ctx = ctx;
    R.sp = sp;
    R.nx = b->ninputs - sp->ncarry;
    size_t n = nv + 5 * nc + 2 * (size_t)R.nx + 1;
    if (!(R.val = hd_ctx_calloc(ctx, n, sizeof *R.val))) return ctx->status;
    R.gc = R.val + nv, R.s = R.gc + nc, R.c = R.s + nc, R.gx = R.c + nc, R.x = R.gx + R.nx;
    R.n = R.x + R.nx, R.nc = R.n + nc;
    hd_status st = hd_trace_begin(ctx, name);
    int pushed = !st && !(st = hd_grad_context_push(ctx)), from = 0;
    if (!st) st = grad_inputs(&R);
    if (!st) st = grad_leaves(&R);
    if (!st) st = grad_replay(&R);
    if (!st) st = grad_next_slots(&R);
    if (!st) from = hd_trace_graph(ctx)->nnodes;
    if (!st) st = grad_outputs(&R);
    if (!st) grad_next_rewire(&R, from);
    if (pushed) hd_grad_context_pop(ctx);
    grad_run_free(&R, nv);
    if (st) {
        hd_trace_abort(ctx);
        return st;
    }
    return hd_trace_end(ctx, out);
}

/* The reverse body of sp, traced apart from the active trace and from the
 * loop's watch. */
hd_status hd_tg_derive(hd_ctx *ctx, const hd_tg_spec *sp, const char *name, hd_ir_graph **out) {
    struct hd_trace *outer = hd_trace_suspend(ctx);
    void (*gw)(hd_ctx *, void *, hd_tensor *) = ctx->grad_write;
    void *gw_ud = ctx->grad_write_ud;
    uint32_t watch = ctx->grad_watch;
    ctx->grad_write = NULL;
    ctx->grad_write_ud = NULL;
    ctx->grad_watch = 0;
    *out = NULL;
    hd_status st = grad_trace(ctx, sp, name, out);
    ctx->grad_write = gw;
    ctx->grad_write_ud = gw_ud;
    ctx->grad_watch = watch;
    hd_trace_resume(ctx, outer);
    return st;
}

/* ---- the records' side ---- */

/* What every record of one rolled loop shares. */
typedef struct loop_grad {
    int refs;
    hd_ctx *ctx;
    uint32_t serial; /* the trace it belongs to */
    int64_t trips;
    int ncarry, nx, nout;
    int *carry_src;     /* ncarry */
    int *gc_at, *gx_at; /* per carry / invariant input: its place among the carried
                           cotangents of the reverse body, or -1 */
    int *stack;         /* per carry: its stack's value in the trace */
    int *xval;          /* per invariant input: its value in the trace */
    int *front_at;      /* per front edge: the loop input it is (-1: none) */
    int nfront, ngc, ngx;
    unsigned char next[64]; /* per carry: the reverse bodies read its next stack */
    int *nextv;             /* per carry: that stack's value in the trace, or -1 */
    hd_ir_graph *rev;       /* the reverse body */
    hd_ir_graph **tail;     /* per body output: the reverse body with its cotangent, or NULL */
} loop_grad;

typedef struct loop_grad_out {
    loop_grad *lg;
    int k;      /* the body output the record's tensor stands for */
    int nin;    /* the record's inputs: */
    int *front; /* each one's front edge */
} loop_grad_out;

static size_t lg_ints(const loop_grad *lg) {
    return (size_t)(4 * lg->ncarry + 2 * lg->nx + lg->nfront + 1);
}

static void lg_unref(loop_grad *lg) {
    if (!lg || --lg->refs > 0) return;
    hd_ctx *ctx = lg->ctx;
    hd_ir_graph_free(lg->rev);
    if (lg->tail) {
        for (int k = 0; k < lg->nout; k++) hd_ir_graph_free(lg->tail[k]);
        hd_ctx_free(ctx, lg->tail, (size_t)(lg->nout + 1) * sizeof *lg->tail);
    }
    hd_ctx_free(ctx, lg->carry_src, lg_ints(lg) * sizeof(int));
    hd_ctx_free(ctx, lg, sizeof *lg);
}

static void lg_out_free(hd_ctx *ctx, void *ud) {
    loop_grad_out *o = ud;
    lg_unref(o->lg);
    if (o->front) hd_ctx_free(ctx, o->front, (size_t)(o->nin + 1) * sizeof *o->front);
    hd_ctx_free(ctx, o, sizeof *o);
}

/* A constant of the trace: zeros shaped as value v (or [shape of a
 * stack's slot] when slot), or the i64 scalar x. -1 on error. */
int hd_tg_const(hd_ctx *ctx, hd_ir_graph *g, hd_tensor *t) {
    if (!t) return -1;
    int id = hd_ir_add_const(g, t);
    hd_tensor_unref(t);
    return id;
}

static int lg_zeros_like_slot(hd_ctx *ctx, hd_ir_graph *g, int stack) {
    const hd_ir_value *v = &g->values[stack];
    hd_tensor *z = hd_tensor_new(ctx, v->dtype, v->shape + 1, v->ndim - 1);
    if (z) memset(z->storage->data, 0, hd_tensor_nbytes(z));
    return hd_tg_const(ctx, g, z);
}

int hd_tg_zeros_like(hd_ctx *ctx, hd_ir_graph *g, int value) {
    const hd_ir_value *v = &g->values[value];
    hd_tensor *z = hd_tensor_new(ctx, v->dtype, v->shape, v->ndim);
    if (z) memset(z->storage->data, 0, hd_tensor_nbytes(z));
    return hd_tg_const(ctx, g, z);
}

/* One reverse loop over body (cloned): carried state st (1 + ngc + ngx
 * values, replaced by the results), trips, and e (-1: none). */
static hd_status lg_loop(hd_ctx *ctx, const loop_grad *lg, const hd_ir_graph *body, int64_t trips,
                         int *st, int e) {
    hd_ir_graph *g = hd_trace_graph(ctx);
    int nc = 1 + lg->ngc + lg->ngx, nin = nc + 2 * lg->ncarry + lg->nx + (e >= 0);
    int in[256], src[64];
    if (nin > 256 || nc > 64)
        return hd_error(ctx, HD_ERR_RUNTIME, "a compiled loop carries too many values");
    int k = 0;
    for (int i = 0; i < nc; i++) in[k++] = st[i], src[i] = i;
    for (int q = 0; q < lg->ncarry; q++) in[k++] = lg->stack[q];
    for (int j = 0; j < lg->nx; j++) in[k++] = lg->xval[j];
    if (e >= 0) in[k++] = e;
    for (int q = 0; q < lg->ncarry; q++)
        if (lg->next[q]) in[k++] = lg->nextv[q];
    nin = k;
    hd_ir_graph *b = hd_ir_graph_clone(body);
    int loop = b ? hd_ir_add_loop(g, b, trips, in, nin, nc, src) : -1;
    if (loop < 0) return ctx->status;
    for (int i = 0; i < nc; i++)
        if ((st[i] = hd_ir_add_loop_out(g, loop, i)) < 0) return ctx->status;
    return HD_OK;
}

/* The reverse loop's carried state at its start: slot trips - 1, the
 * carried cotangents (gv at the first carry fed by output k when k is
 * one), zero gradients. */
static hd_status lg_start(hd_ctx *ctx, const loop_grad *lg, int k, int gv, int *st) {
    hd_ir_graph *g = hd_trace_graph(ctx);
    int n = 0, seeded = lg->tail[k] != NULL;
    if ((st[n++] = hd_tg_const(ctx, g, hd_tensor_scalar(ctx, HD_I64, (double)(lg->trips - 1)))) < 0)
        return ctx->status;
    for (int q = 0; q < lg->ncarry; q++) {
        if (lg->gc_at[q] < 0) continue;
        int seed = !seeded && lg->carry_src[q] == k;
        seeded |= seed;
        if ((st[n++] = seed ? gv : lg_zeros_like_slot(ctx, g, lg->stack[q])) < 0)
            return ctx->status;
    }
    for (int j = 0; j < lg->nx; j++)
        if (lg->gx_at[j] >= 0 && (st[n++] = hd_tg_zeros_like(ctx, g, lg->xval[j])) < 0)
            return ctx->status;
    return HD_OK;
}

/* The gradient of front edge f from the reverse loop's results. */
static hd_tensor *lg_gin(hd_ctx *ctx, const loop_grad *lg, const int *st, int f) {
    int p = lg->front_at[f], v = -1;
    if (p < 0) return NULL;
    if (p < lg->ncarry && lg->gc_at[p] >= 0) v = st[1 + lg->gc_at[p]];
    if (p >= lg->ncarry && lg->gx_at[p - lg->ncarry] >= 0)
        v = st[1 + lg->ngc + lg->gx_at[p - lg->ncarry]];
    return v < 0 ? NULL : hd_trace_symbolic_of(ctx, v);
}

static hd_status lg_backward(hd_ctx *ctx, void *ud, hd_tensor *g, const unsigned char *need,
                             hd_tensor **gin, int nin) {
    const loop_grad_out *o = ud;
    const loop_grad *lg = o->lg;
    if (!hd_trace_serial(ctx) || hd_trace_serial(ctx) != lg->serial)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "backward() through a compiled loop outside the compiled code that ran it");
    if (nin != o->nin) return hd_error(ctx, HD_ERR_RUNTIME, "a loop's gradient lost its inputs");
    int st[66], gv = hd_trace_value(ctx, g);
    if (gv < 0 || lg_start(ctx, lg, o->k, gv, st)) return ctx->status;
    int64_t trips = lg->trips;
    if (lg->tail[o->k]) { /* the last iteration with the output's cotangent */
        if (lg_loop(ctx, lg, lg->tail[o->k], 1, st, gv)) return ctx->status;
        trips--;
    }
    if (trips > 0 && lg_loop(ctx, lg, lg->rev, trips, st, -1)) return ctx->status;
    for (int f = 0; f < nin; f++) {
        if (!need[f]) continue;
        gin[f] = lg_gin(ctx, lg, st, o->front[f]);
        if (!gin[f] && ctx->status) return ctx->status;
    }
    return HD_OK;
}

static const hd_grad_custom lg_custom = {lg_backward, lg_out_free};

/* ---- which inputs a result depends on ---- */

/* Per body output, the body inputs (bits) it depends on through ops that
 * carry gradients (float results of differentiable ops), as records would
 * chain them. */
hd_status hd_tg_body_deps(hd_ctx *ctx, const hd_ir_graph *b, uint64_t *odep) {
    size_t bytes = (size_t)(b->nvalues + 1) * sizeof(uint64_t);
    uint64_t *dep = hd_ctx_calloc(ctx, 1, bytes);
    if (!dep) return ctx->status;
    for (int p = 0; p < b->ninputs; p++)
        if (hd_dtype_is_float(body_in(b, p)->dtype)) dep[b->inputs[p].value] = 1ull << p;
    for (int i = 0; i < b->nnodes; i++) {
        const hd_ir_node *n = &b->nodes[i];
        if (n->op < 0 || !hd_op_infos[n->op].differentiable ||
            !hd_dtype_is_float(b->values[n->out].dtype))
            continue;
        for (int k = 0; k < n->nin; k++) dep[n->out] |= dep[n->in[k]];
    }
    for (int k = 0; k < b->noutputs; k++) odep[k] = dep[b->outputs[k].value];
    hd_ctx_free(ctx, dep, bytes);
    return HD_OK;
}

/* The loop's inputs (bits) result k depends on after trips iterations:
 * a carried input's bit stands for the loop's input at the first one. */
static uint64_t loop_deps(const uint64_t *odep, int nout, int ncarry, const int *carry_src,
                          int64_t trips, int k, uint64_t *cur, uint64_t *next) {
    uint64_t carried = ncarry >= 64 ? ~0ull : (1ull << ncarry) - 1;
    memcpy(cur, odep, (size_t)nout * sizeof *cur);
    for (int64_t t = 1; t < trips; t++) {
        int same = 1;
        for (int j = 0; j < nout; j++) {
            next[j] = odep[j] & ~carried;
            for (int q = 0; q < ncarry; q++)
                if (odep[j] >> q & 1) next[j] |= cur[carry_src[q]];
            same &= next[j] == cur[j];
        }
        memcpy(cur, next, (size_t)nout * sizeof *cur);
        if (same) break;
    }
    return cur[k];
}

/* ---- rolling ---- */

struct hd_trace_grad {
    hd_grad_roll roll;
    loop_grad *lg;
    int *held_k;         /* per held record: its body output */
    uint64_t *held_deps; /* per held record: the loop inputs its gradient reaches */
};

/* Each held record's loop inputs (tg->held_deps). */
static hd_status tg_deps(hd_ctx *ctx, hd_trace_grad *tg, const hd_roll_grad_in *in) {
    int nout = in->body->noutputs;
    size_t bytes = (size_t)(3 * nout + 1) * sizeof(uint64_t);
    uint64_t *odep = hd_ctx_alloc(ctx, bytes);
    if (!odep || hd_tg_body_deps(ctx, in->body, odep)) {
        hd_ctx_free(ctx, odep, odep ? bytes : 0);
        return ctx->status;
    }
    for (int h = 0; h < tg->roll.nheld; h++)
        tg->held_deps[h] = loop_deps(odep, nout, in->ncarry, in->carry_src, in->trips,
                                     tg->held_k[h], odep + nout, odep + 2 * nout);
    hd_ctx_free(ctx, odep, bytes);
    return HD_OK;
}

/* The front edges held record h's gradient reaches, into use; the
 * record's table of them (o->front). */
static hd_status tg_use(hd_ctx *ctx, const hd_trace_grad *tg, int h, unsigned char *use,
                        loop_grad_out *o) {
    const loop_grad *lg = tg->lg;
    uint64_t m = tg->held_deps[h];
    o->nin = 0;
    for (int f = 0; f < lg->nfront; f++) o->nin += (use[f] = (m >> lg->front_at[f] & 1) != 0);
    if (!(o->front = hd_ctx_alloc(ctx, (size_t)(o->nin + 1) * sizeof *o->front)))
        return ctx->status;
    for (int f = 0, j = 0; f < lg->nfront; f++)
        if (use[f]) o->front[j++] = f;
    return HD_OK;
}

void hd_trace_grad_free(hd_ctx *ctx, hd_trace_grad *tg) {
    if (!tg) return;
    size_t n = (size_t)tg->roll.nheld + 1;
    if (tg->held_k) hd_ctx_free(ctx, tg->held_k, n * sizeof(int));
    if (tg->held_deps) hd_ctx_free(ctx, tg->held_deps, n * sizeof(uint64_t));
    hd_grad_roll_free(ctx, &tg->roll);
    lg_unref(tg->lg);
    hd_ctx_free(ctx, tg, sizeof *tg);
}

/* The value a trace ref names in the active trace, or -1. */
int hd_tg_ref_value(const hd_ctx *ctx, uint64_t ref) {
    if (!ref || (uint32_t)(ref >> 32) != hd_trace_serial(ctx)) return -1;
    return (int)(uint32_t)ref - 1;
}

/* Each held record's body output; each front edge's loop input. */
static const char *tg_map(hd_ctx *ctx, hd_trace_grad *tg, const hd_roll_grad_in *in) {
    loop_grad *lg = tg->lg;
    for (int h = 0; h < tg->roll.nheld; h++) {
        int v = hd_tg_ref_value(ctx, tg->roll.held[h]->trace_ref), k = -1;
        for (int j = 0; j < in->nb && k < 0 && v >= 0; j++)
            if (in->b_value[j] == v) k = in->b_out[j];
        if (k < 0) return "a value it keeps is not one of the loop's";
        tg->held_k[h] = k;
    }
    for (int f = 0; f < tg->roll.nfront; f++) {
        const hd_grad_front *fr = &tg->roll.front[f];
        int v = fr->e.node ? hd_tg_ref_value(ctx, fr->ref) : hd_trace_value(ctx, fr->e.leaf),
            p = -1;
        if (v < 0) return ctx->status ? "out of memory" : "a value it reads was not traced";
        for (int i = 0; i < in->nin; i++)
            if (in->in[i] == v) {
                if (p >= 0) return "it reads one value as two of its inputs";
                p = i;
            }
        if (p < 0) return "a gradient leaves it by a value it does not read";
        for (int e = 0; e < f; e++)
            if (lg->front_at[e] == p) return "two gradients flow to one of its inputs";
        lg->front_at[f] = p;
        if (p >= in->ncarry) lg->gx_at[p - in->ncarry] = 0; /* numbered below */
    }
    return NULL;
}

static hd_status tg_alloc(hd_ctx *ctx, hd_trace_grad *tg, const hd_roll_grad_in *in) {
    loop_grad *lg = tg->lg = hd_ctx_calloc(ctx, 1, sizeof *lg);
    if (!lg) return ctx->status;
    lg->refs = 1;
    lg->ctx = ctx;
    lg->serial = hd_trace_serial(ctx);
    lg->trips = in->trips;
    lg->ncarry = in->ncarry;
    lg->nx = in->nin - in->ncarry;
    lg->nout = in->body->noutputs;
    lg->nfront = tg->roll.nfront;
    int *p = hd_ctx_alloc(ctx, lg_ints(lg) * sizeof(int));
    lg->tail = hd_ctx_calloc(ctx, (size_t)lg->nout + 1, sizeof *lg->tail);
    tg->held_k = hd_ctx_alloc(ctx, (size_t)(tg->roll.nheld + 1) * sizeof(int));
    tg->held_deps = hd_ctx_alloc(ctx, (size_t)(tg->roll.nheld + 1) * sizeof(uint64_t));
    if (!p || !lg->tail || !tg->held_k || !tg->held_deps) {
        if (p) hd_ctx_free(ctx, p, lg_ints(lg) * sizeof(int));
        return ctx->status;
    }
    memset(p, 0xff, lg_ints(lg) * sizeof(int));
    lg->carry_src = p, lg->gc_at = p + lg->ncarry, lg->stack = lg->gc_at + lg->ncarry;
    lg->nextv = lg->stack + lg->ncarry;
    lg->gx_at = lg->nextv + lg->ncarry, lg->xval = lg->gx_at + lg->nx;
    lg->front_at = lg->xval + lg->nx;
    memcpy(lg->carry_src, in->carry_src, (size_t)lg->ncarry * sizeof(int));
    for (int j = 0; j < lg->nx; j++) lg->xval[j] = in->in[in->ncarry + j];
    return HD_OK;
}

/* Number the float carries and the wanted invariant gradients; derive
 * the reverse bodies. NULL, or why the loop stays unrolled. */
static const char *tg_derive(hd_ctx *ctx, hd_trace_grad *tg, const hd_roll_grad_in *in) {
    loop_grad *lg = tg->lg;
    const hd_ir_graph *b = in->body;
    unsigned char need_x[64];
    if (lg->nx + lg->ncarry > 64) return "it has too many inputs";
    for (int q = 0; q < lg->ncarry; q++) {
        if (hd_dtype_is_float(body_in(b, q)->dtype)) lg->gc_at[q] = lg->ngc++;
        /* a result an op of the body makes (not an input passed through) */
        const hd_ir_value *o = &b->values[b->outputs[lg->carry_src[q]].value];
        lg->next[q] = lg->gc_at[q] >= 0 && o->kind == HD_IR_VALUE_NODE;
    }
    for (int j = 0; j < lg->nx; j++) {
        need_x[j] = lg->gx_at[j] == 0 && hd_dtype_is_float(body_in(b, lg->ncarry + j)->dtype);
        lg->gx_at[j] = need_x[j] ? lg->ngx++ : -1;
    }
    if (1 + lg->ngc + lg->ngx > 64) return "it carries too many values";
    hd_tg_spec sp = {b, in->trips, in->ncarry, in->carry_src, need_x, -1, 0, lg->next};
    char name[160];
    snprintf(name, sizeof name, "%s.grad", b->name ? b->name : "loop");
    if (hd_tg_derive(ctx, &sp, name, &lg->rev)) return NULL;
    for (int h = 0; h < tg->roll.nheld; h++) {
        int k = tg->held_k[h], fed = 0;
        for (int q = 0; q < lg->ncarry; q++) fed |= lg->carry_src[q] == k;
        if (fed || lg->tail[k]) continue;
        sp.extra = k;
        if (hd_tg_derive(ctx, &sp, name, &lg->tail[k])) return NULL;
    }
    return NULL;
}

hd_status hd_trace_grad_prepare(hd_ctx *ctx, const hd_roll_grad_in *in, hd_trace_grad **out,
                                const char **why) {
    *out = NULL;
    *why = NULL;
    hd_trace_grad *tg = hd_ctx_calloc(ctx, 1, sizeof *tg);
    if (!tg) return ctx->status;
    hd_status st = hd_grad_roll_scan(ctx, in->gen_a, in->gen_b, &tg->roll, why);
    if (!st && !*why && !tg->roll.nheld) *why = "no value that needs gradients outlives it";
    if (!st && !*why && in->nin > 64) *why = "it has too many inputs";
    if (!st && !*why && !tg_alloc(ctx, tg, in))
        *why = tg_map(ctx, tg, in);
    else if (!st && !*why)
        st = ctx->status;
    if (!st && !*why && tg_deps(ctx, tg, in)) st = ctx->status;
    if (!st && !*why) {
        *why = tg_derive(ctx, tg, in);
        if (!*why && ctx->status) { /* the body cannot be differentiated as a loop */
            *why = "its gradient would recompute what cannot be (a loop, a random draw)";
            st = ctx->status == HD_ERR_MEMORY ? HD_ERR_MEMORY : HD_OK;
            if (!st) hd_error_clear(ctx);
        }
    }
    if (st || *why) {
        hd_trace_grad_free(ctx, tg);
        return st;
    }
    *out = tg;
    return HD_OK;
}

/* Each carried value after every iteration: its stack less slot 0, then
 * the loop's result. -1 on error. */
static int lg_next_stack(hd_ir_graph *g, const loop_grad *lg, int loop, int q) {
    int fin = hd_ir_add_loop_out(g, loop, lg->carry_src[q]);
    if (fin < 0) return -1;
    const hd_ir_value *s = &g->values[lg->stack[q]];
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = s->ndim;
    at.shape[0] = 1;
    memcpy(at.shape + 1, s->shape + 1, (size_t)(s->ndim - 1) * sizeof *s->shape);
    int last = hd_ir_add_node(g, HD_OP_RESHAPE, &fin, 1, &at);
    if (last < 0 || lg->trips == 1) return last;
    memset(&at, 0, sizeof at);
    for (int d = 0; d < s->ndim; d++) {
        at.start[d] = d == 0;
        at.step[d] = 1;
        at.len[d] = d == 0 ? lg->trips - 1 : s->shape[d];
    }
    int in[2] = {hd_ir_add_node(g, HD_OP_SLICE, &lg->stack[q], 1, &at), last};
    if (in[0] < 0) return -1;
    memset(&at, 0, sizeof at);
    return hd_ir_add_node(g, HD_OP_CONCAT, in, 2, &at);
}

hd_status hd_trace_grad_finish(hd_ctx *ctx, hd_trace_grad *tg, int loop) {
    hd_ir_graph *g = hd_trace_graph(ctx);
    loop_grad *lg = tg->lg;
    hd_status st = HD_OK;
    for (int q = 0; q < lg->ncarry && !st; q++) {
        int k = hd_ir_loop_stack(g, loop, q);
        if (k < 0 || (lg->stack[q] = hd_ir_add_loop_out(g, loop, k)) < 0) st = ctx->status;
    }
    for (int q = 0; q < lg->ncarry && !st; q++)
        if (lg->next[q] && (lg->nextv[q] = lg_next_stack(g, lg, loop, q)) < 0) st = ctx->status;
    unsigned char *use = hd_ctx_alloc(ctx, (size_t)lg->nfront + 1);
    if (!use) st = ctx->status;
    for (int h = 0; h < tg->roll.nheld && !st; h++) {
        loop_grad_out *o = hd_ctx_calloc(ctx, 1, sizeof *o);
        if (!o) {
            st = ctx->status;
            break;
        }
        o->lg = lg;
        o->k = tg->held_k[h];
        lg->refs++;
        if (tg_use(ctx, tg, h, use, o)) {
            lg_out_free(ctx, o);
            st = ctx->status;
            break;
        }
        st = hd_grad_roll_rewire(ctx, &tg->roll, h, use, &lg_custom, o);
    }
    if (use) hd_ctx_free(ctx, use, (size_t)lg->nfront + 1);
    hd_trace_grad_free(ctx, tg);
    return st;
}
