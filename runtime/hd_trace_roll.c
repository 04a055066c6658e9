/* Rolling a traced loop: two consecutive iterations that recorded the same
 * nodes become one iteration and a loop node (hd_trace.h, docs/ir.md). */
#include "hd_backend.h"
#include "hd_autograd.h"
#include "hd_trace.h"
#include "hd_trace_int.h"

#include <stdio.h>
#include <string.h>

/* How iteration B reads a value. */
typedef enum {
    ROLL_INTERNAL, /* made by B itself: pos is its node's place in B */
    ROLL_CARRY,    /* made by A: pos is its node's place in A */
    ROLL_OUTER,    /* made before B (or a constant A made): the same every iteration */
    ROLL_LOCAL,    /* a constant B made: the body's own constant */
    ROLL_NEW_INPUT /* a graph input B lifted: B differs from A */
} roll_kind;

typedef struct roll {
    hd_ctx *ctx;
    hd_ir_graph *g;
    int a, b, c;   /* node indices: A is [a, b), B is [b, c) */
    int va, vb;    /* value counts when A and B began */
    int *init;     /* per place q in A: the value A read where B reads A's q, -1 */
    int *body_of;  /* per main value: its body value (outer values, constants), -1 */
    int *body_pos; /* per place j in B: its body value, -1 */
    int *out_of;   /* per place j in B: its body output, -1 */
    int *outer;    /* main values the body reads as inputs, in its input order */
    int nouter;
    int nv, na, nb; /* the tables' lengths */
    hd_ir_graph *body;
} roll;

static roll_kind roll_kind_of(const roll *r, int v, int *pos) {
    const hd_ir_value *val = &r->g->values[v];
    if (val->kind == HD_IR_VALUE_NODE) {
        int ni = val->index;
        *pos = ni >= r->b ? ni - r->b : ni - r->a;
        return ni >= r->b ? ROLL_INTERNAL : ni >= r->a ? ROLL_CARRY : ROLL_OUTER;
    }
    if (v < r->vb) return ROLL_OUTER;
    return val->kind == HD_IR_VALUE_CONST ? ROLL_LOCAL : ROLL_NEW_INPUT;
}

/* Two constants with the same dtype, shape, number flag and bytes. Only
 * contiguous cpu constants are compared by bytes; others must be one. */
static int roll_same_const(const hd_ir_graph *g, int v, int w) {
    if (v == w) return 1;
    const hd_ir_value *x = &g->values[v], *y = &g->values[w];
    if (x->kind != HD_IR_VALUE_CONST || y->kind != HD_IR_VALUE_CONST || x->dtype != y->dtype ||
        x->ndim != y->ndim || x->number != y->number ||
        memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof *x->shape))
        return 0;
    const hd_tensor *s = g->consts[x->index].t, *t = g->consts[y->index].t;
    if (s == t) return 1;
    if (!s->storage || !t->storage || s->storage->backend != &hd_cpu_backend ||
        t->storage->backend != &hd_cpu_backend || !hd_tensor_is_contiguous(s) ||
        !hd_tensor_is_contiguous(t))
        return 0;
    return memcmp(hd_tensor_data(s), hd_tensor_data(t), hd_tensor_nbytes(s)) == 0;
}

static int roll_same_value_type(const hd_ir_graph *g, int v, int w) {
    if (v < 0 || w < 0) return v == w;
    const hd_ir_value *x = &g->values[v], *y = &g->values[w];
    return x->dtype == y->dtype && x->ndim == y->ndim &&
           !memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof *x->shape);
}

/* Is w, read by A where B reads u, what a loop needs? Notes carries. */
static int roll_match_operand(roll *r, int w, int u) {
    int pos = 0, wpos = 0;
    switch (roll_kind_of(r, u, &pos)) {
    case ROLL_INTERNAL:
        return r->g->values[w].kind == HD_IR_VALUE_NODE && r->g->values[w].index == r->a + pos;
    case ROLL_CARRY: {
        /* A read a value made before it, B the one A made in its place */
        roll_kind k = roll_kind_of(r, w, &wpos);
        if (k != ROLL_OUTER || (r->g->values[w].kind != HD_IR_VALUE_NODE && w >= r->va) ||
            !roll_same_value_type(r->g, w, u))
            return 0;
        if (r->init[pos] < 0) r->init[pos] = w;
        return r->init[pos] == w;
    }
    case ROLL_OUTER: return w == u || roll_same_const(r->g, w, u);
    case ROLL_LOCAL: return roll_same_const(r->g, w, u);
    default: return 0;
    }
}

static int roll_same_loop(const hd_ir_loop *x, const hd_ir_loop *y) {
    return x->trips == y->trips && x->trips_in == y->trips_in && x->while_in == y->while_in &&
           x->ncarry == y->ncarry && x->nstack == y->nstack &&
           !memcmp(x->carry_src, y->carry_src, (size_t)x->ncarry * sizeof *x->carry_src) &&
           (!x->nstack ||
            !memcmp(x->stack_in, y->stack_in, (size_t)x->nstack * sizeof *x->stack_in)) &&
           hd_ir_graph_hash(x->body) == hd_ir_graph_hash(y->body);
}

/* Nodes x (of A) and y (of B) apply the same operation. */
static int roll_same_node(const hd_ir_graph *g, const hd_ir_node *x, const hd_ir_node *y) {
    if (x->op != y->op || x->nin != y->nin || !roll_same_value_type(g, x->out, y->out)) return 0;
    if (x->op == HD_IR_CALLBACK)
        return x->cb.fn == y->cb.fn && !strcmp(x->cb.name, y->cb.name) &&
               (x->cb.ud_dup || !x->cb.ud_free);
    if (x->op == HD_IR_LOOP) return roll_same_loop(x->loop, y->loop);
    if (x->op < 0) return !memcmp(&x->attrs, &y->attrs, sizeof x->attrs);
    hd_attrs p, q;
    hd_ir_attrs_canon((hd_op)x->op, &x->attrs, &p);
    hd_ir_attrs_canon((hd_op)y->op, &y->attrs, &q);
    return !memcmp(&p, &q, sizeof p);
}

static int roll_match(roll *r) {
    if (r->c - r->b != r->b - r->a || r->c == r->b) return 0;
    for (int j = 0; j < r->c - r->b; j++) {
        const hd_ir_node *x = &r->g->nodes[r->a + j], *y = &r->g->nodes[r->b + j];
        if (!roll_same_node(r->g, x, y)) return 0;
        for (int i = 0; i < y->nin; i++)
            if (!roll_match_operand(r, x->in[i], y->in[i])) return 0;
    }
    return 1;
}

/* ---- the body ---- */

static int roll_body_value(roll *r, int u) {
    int pos = 0;
    roll_kind k = roll_kind_of(r, u, &pos);
    if (k == ROLL_INTERNAL) return r->body_pos[pos];
    if (k == ROLL_CARRY) return r->body_of[r->g->nodes[r->a + pos].out];
    if (r->body_of[u] >= 0) return r->body_of[u];
    const hd_ir_value *val = &r->g->values[u];
    char name[32]; /* by position: equal iterations give equal bodies */
    snprintf(name, sizeof name, "x%d", r->nouter);
    if (k == ROLL_LOCAL)
        return r->body_of[u] = hd_ir_add_const(r->body, r->g->consts[val->index].t);
    int id = hd_ir_add_input(r->body, name, val->dtype, val->shape, val->ndim);
    if (id >= 0) r->outer[r->nouter++] = u;
    return r->body_of[u] = id;
}

/* Node y of B, added to the body with its inputs ids. */
static int roll_body_node(roll *r, const hd_ir_node *y, const int *ids) {
    if (y->op == HD_IR_CALLBACK) {
        hd_ir_callback cb = y->cb;
        if (cb.ud_dup) cb.ud = cb.ud_dup(cb.ud);
        return hd_ir_add_callback(r->body, &cb, ids, y->nin) ? -2 : -1;
    }
    if (y->op == HD_IR_LOOP) {
        const hd_ir_loop *l = y->loop;
        hd_ir_graph *inner = hd_ir_graph_clone(l->body);
        if (!inner) return -2;
        int v = hd_ir_add_loop_like(r->body, inner, y->loop, ids, y->nin);
        return v < 0 ? -2 : v;
    }
    int v = y->op == HD_IR_LOOP_OUT ? hd_ir_add_loop_out(r->body, ids[0], (int)y->attrs.ints[0])
                                    : hd_ir_add_node(r->body, (hd_op)y->op, ids, y->nin, &y->attrs);
    return v < 0 ? -2 : v;
}

static hd_status roll_body_inputs(roll *r) {
    for (int q = 0; q < r->b - r->a; q++) {
        if (r->init[q] < 0) continue;
        const hd_ir_value *val = &r->g->values[r->g->nodes[r->a + q].out];
        char name[32];
        snprintf(name, sizeof name, "c%d", q);
        int id = hd_ir_add_input(r->body, name, val->dtype, val->shape, val->ndim);
        if (id < 0) return r->ctx->status;
        r->body_of[r->g->nodes[r->a + q].out] = id;
    }
    return HD_OK;
}

static hd_status roll_body_nodes(roll *r) {
    int ids[64], *in = ids;
    for (int j = 0; j < r->c - r->b; j++) {
        const hd_ir_node *y = &r->g->nodes[r->b + j];
        if (y->nin > 64 && !(in = hd_ctx_alloc(r->ctx, (size_t)y->nin * sizeof *in)))
            return r->ctx->status;
        int ok = 1;
        for (int i = 0; i < y->nin && ok; i++) ok = (in[i] = roll_body_value(r, y->in[i])) >= 0;
        int v = ok ? roll_body_node(r, y, in) : -2;
        if (in != ids) hd_ctx_free(r->ctx, in, (size_t)y->nin * sizeof *in);
        in = ids;
        if (v == -2) return r->ctx->status ? r->ctx->status : HD_ERR_RUNTIME;
        r->body_pos[j] = v;
    }
    return HD_OK;
}

static hd_status roll_body_outputs(roll *r) {
    int k = 0;
    for (int j = 0; j < r->c - r->b; j++) {
        if (r->body_pos[j] < 0) continue;
        char name[32];
        snprintf(name, sizeof name, "o%d", j);
        if (hd_ir_add_output(r->body, name, r->body_pos[j])) return r->ctx->status;
        r->out_of[j] = k++;
    }
    return HD_OK;
}

/* ---- replacing B ---- */

/* The loop node's inputs (carried first, then the others, as the body's
 * inputs) and carry sources. *nin and *ncarry receive the counts. */
static void roll_loop_inputs(const roll *r, int *in, int *src, int *nin, int *ncarry) {
    int n = 0;
    for (int q = 0; q < r->b - r->a; q++)
        if (r->init[q] >= 0) {
            src[n] = r->out_of[q];
            in[n++] = r->init[q];
        }
    *ncarry = n;
    for (int i = 0; i < r->nouter; i++) in[n++] = r->outer[i];
    *nin = n;
}

/* Drop A's and B's nodes from the graph; what they own (callbacks' data,
 * loop bodies) the body has copies of. No tensor the program holds stands
 * for A's values any more: B wrote every place A wrote (the caller checked
 * that both iterations repeat), and no gradient record of A is alive. A
 * stray use would fail hd_ir_verify, never read a wrong value. */
static void roll_truncate(roll *r) {
    for (int i = r->a; i < r->c; i++) {
        hd_ir_node *n = &r->g->nodes[i];
        if (n->op == HD_IR_CALLBACK && n->cb.ud_free) n->cb.ud_free(r->ctx, n->cb.ud);
        if (n->op == HD_IR_LOOP && n->loop) {
            if (n->loop->exec && n->loop->exec_free) n->loop->exec_free(r->ctx, n->loop->exec);
            hd_ir_graph_free(n->loop->body);
            n->loop->body = NULL;
        }
        n->op = HD_IR_DEAD;
    }
    r->g->nnodes = r->a;
}

static hd_status roll_replace(roll *r, int64_t trips, int *loop_out) {
    int nb = r->c - r->b, nin = 0, ncarry = 0;
    int *in = hd_ctx_alloc(r->ctx, (size_t)(r->body->ninputs + 1) * 2 * sizeof *in);
    int *vals = hd_ctx_alloc(r->ctx, (size_t)nb * sizeof *vals);
    if (!in || !vals) {
        hd_ctx_free(r->ctx, in, (size_t)(r->body->ninputs + 1) * 2 * sizeof *in);
        hd_ctx_free(r->ctx, vals, (size_t)nb * sizeof *vals);
        return r->ctx->status;
    }
    int *src = in + r->body->ninputs + 1;
    roll_loop_inputs(r, in, src, &nin, &ncarry);
    for (int j = 0; j < nb; j++) vals[j] = r->g->nodes[r->b + j].out;
    roll_truncate(r);
    hd_ir_graph *body = r->body;
    r->body = NULL; /* the loop node owns it now, or freed it */
    int loop = *loop_out = hd_ir_add_loop(r->g, body, trips, in, nin, ncarry, src);
    hd_status st = loop < 0 ? r->ctx->status : HD_OK;
    for (int j = 0; j < nb && !st; j++)
        if (vals[j] >= 0) st = hd_ir_add_loop_out_as(r->g, loop, r->out_of[j], vals[j]);
    hd_ctx_free(r->ctx, in, (size_t)(nin + 1) * 2 * sizeof *in);
    hd_ctx_free(r->ctx, vals, (size_t)nb * sizeof *vals);
    return st;
}

static void roll_free(roll *r) {
    int nv = r->nv, na = r->na, nb = r->nb;
    hd_ctx_free(r->ctx, r->outer, (size_t)(nv + 1) * sizeof *r->outer);
    hd_ctx_free(r->ctx, r->init, (size_t)na * sizeof *r->init);
    hd_ctx_free(r->ctx, r->body_of, (size_t)(nv + 1) * sizeof *r->body_of);
    hd_ctx_free(r->ctx, r->body_pos, (size_t)nb * sizeof *r->body_pos);
    hd_ctx_free(r->ctx, r->out_of, (size_t)nb * sizeof *r->out_of);
    hd_ir_graph_free(r->body);
}

static hd_status roll_init(roll *r, hd_ctx *ctx, hd_trace_pos a, hd_trace_pos b, hd_trace_pos c) {
    memset(r, 0, sizeof *r);
    r->ctx = ctx;
    r->g = hd_trace_graph(ctx);
    r->a = a.nodes, r->b = b.nodes, r->c = c.nodes;
    r->va = a.values, r->vb = b.values;
    int nv = r->nv = r->g->nvalues, na = r->na = r->b - r->a + 1, nb = r->nb = r->c - r->b + 1;
    r->outer = hd_ctx_alloc(ctx, (size_t)(nv + 1) * sizeof *r->outer);
    r->init = hd_ctx_alloc(ctx, (size_t)na * sizeof *r->init);
    r->body_of = hd_ctx_alloc(ctx, (size_t)(nv + 1) * sizeof *r->body_of);
    r->body_pos = hd_ctx_alloc(ctx, (size_t)nb * sizeof *r->body_pos);
    r->out_of = hd_ctx_alloc(ctx, (size_t)nb * sizeof *r->out_of);
    if (!r->outer || !r->init || !r->body_of || !r->body_pos || !r->out_of) return ctx->status;
    memset(r->init, 0xff, (size_t)na * sizeof *r->init);
    memset(r->body_of, 0xff, (size_t)(nv + 1) * sizeof *r->body_of);
    memset(r->body_pos, 0xff, (size_t)nb * sizeof *r->body_pos);
    memset(r->out_of, 0xff, (size_t)nb * sizeof *r->out_of);
    return HD_OK;
}

/* Can the loop roll with the gradient records A and B left alive? *tg,
 * or *why not. */
static hd_status roll_grad_prepare(roll *r, hd_trace_pos a, hd_trace_pos b, int64_t trips,
                                   hd_trace_grad **tg, const char **why) {
    int nb = r->c - r->b, nin = 0, ncarry = 0, n = r->body->ninputs + 1;
    size_t bytes = (size_t)(2 * n + 2 * nb + 1) * sizeof(int);
    int *buf = hd_ctx_alloc(r->ctx, bytes);
    if (!buf) return r->ctx->status;
    int *in = buf, *src = buf + n, *bv = src + n, *bo = bv + nb;
    roll_loop_inputs(r, in, src, &nin, &ncarry);
    for (int j = 0; j < nb; j++) bv[j] = r->g->nodes[r->b + j].out, bo[j] = r->out_of[j];
    hd_roll_grad_in gi = {r->body, trips, nin, ncarry,       in,          src,
                          nb,      bv,    bo,  a.grad_watch, b.grad_watch};
    hd_status st = hd_trace_grad_prepare(r->ctx, &gi, tg, why);
    hd_ctx_free(r->ctx, buf, bytes);
    return st;
}

/* Replace A and B by the loop (with its gradient when records of them
 * are alive); *rolled, or *why not. */
static hd_status roll_finish(roll *r, hd_trace_pos a, hd_trace_pos b, int64_t trips, int *rolled,
                             const char **why) {
    hd_trace_grad *tg = NULL;
    if (a.grad_watch && hd_grad_watch_live(r->ctx, a.grad_watch)) {
        hd_status st = roll_grad_prepare(r, a, b, trips, &tg, why);
        if (st || !tg) return st;
    }
    int loop = -1;
    hd_status st = roll_replace(r, trips, &loop);
    if (!st && tg) {
        st = hd_trace_grad_finish(r->ctx, tg, loop);
        tg = NULL;
    }
    hd_trace_grad_free(r->ctx, tg);
    *rolled = !st;
    return st;
}

hd_status hd_trace_roll(hd_ctx *ctx, hd_trace_pos a, hd_trace_pos b, hd_trace_pos c, int64_t trips,
                        int *rolled, const char **why) {
    *rolled = 0;
    *why = NULL;
    if (!hd_trace_graph(ctx)) return hd_error(ctx, HD_ERR_RUNTIME, "no trace is active");
    if (trips < 1 || a.nodes > b.nodes || b.nodes > c.nodes ||
        c.nodes != hd_trace_graph(ctx)->nnodes)
        return hd_error(ctx, HD_ERR_ARGUMENT, "hd_trace_roll: iterations out of order");
    roll r;
    hd_status st = roll_init(&r, ctx, a, b, c);
    if (!st && roll_match(&r)) {
        char name[128];
        snprintf(name, sizeof name, "%s.loop", r.g->name ? r.g->name : "loop");
        if (!(r.body = hd_ir_graph_new(ctx, name)) || roll_body_inputs(&r) || roll_body_nodes(&r) ||
            roll_body_outputs(&r))
            st = ctx->status ? ctx->status : HD_ERR_RUNTIME;
        else
            st = roll_finish(&r, a, b, trips, rolled, why);
    }
    roll_free(&r);
    return st;
}

/* ---- branches on tensors: two loops of 0 or 1 iteration ---- */

/* Branch [p, q) as a body: inputs n placeholders of the variables' types
 * (the loop's carried state), the values the branch reads from before p,
 * then the trip count; outputs the branch's values of the variables. The
 * main values of the read inputs go to r->outer. */
static hd_status cond_body(roll *r, hd_ctx *ctx, hd_trace_pos p, hd_trace_pos q, int n,
                           const int *vals, const char *name) {
    hd_status st = roll_init(r, ctx, p, p, q);
    if (!st && !(r->body = hd_ir_graph_new(ctx, name))) st = ctx->status;
    for (int i = 0; i < n && !st; i++) {
        const hd_ir_value *v = &r->g->values[vals[i]];
        char in[32];
        snprintf(in, sizeof in, "s%d", i);
        if (hd_ir_add_input(r->body, in, v->dtype, v->shape, v->ndim) < 0) st = ctx->status;
    }
    if (!st) st = roll_body_nodes(r);
    for (int i = 0; i < n && !st; i++) {
        char out[32];
        snprintf(out, sizeof out, "o%d", i);
        int id = roll_body_value(r, vals[i]);
        if (id < 0 || hd_ir_add_output(r->body, out, id)) st = ctx->status;
    }
    if (!st && hd_ir_add_input(r->body, "trips", HD_I64, NULL, 0) < 0) st = ctx->status;
    return st ? (ctx->status ? ctx->status : HD_ERR_RUNTIME) : HD_OK;
}

/* A constant of t's value in g; -1 on error. */
static int cond_const(hd_ir_graph *g, hd_tensor *t) {
    if (!t) return -1;
    int v = hd_ir_add_const(g, t);
    hd_tensor_unref(t);
    return v;
}

/* v as a 0-d bool in g (its truth): v itself, or v != 0, reshaped. */
static int truth_of(hd_ctx *ctx, hd_ir_graph *g, int v) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    if (v >= 0 && g->values[v].dtype != HD_BOOL) {
        int zero = cond_const(g, hd_tensor_number(ctx, g->values[v].dtype, 0));
        int in[2] = {v, zero};
        v = zero < 0 ? -1 : hd_ir_add_node(g, HD_OP_NE, in, 2, &at);
    }
    if (v >= 0 && g->values[v].ndim != 0) v = hd_ir_add_node(g, HD_OP_RESHAPE, &v, 1, &at);
    return v;
}

/* pred as 0-d i64 0 or 1 (its truth), and 1 - that: ids in c[0], c[1]. */
static hd_status cond_counts(hd_ctx *ctx, hd_ir_graph *g, int pred, int *c) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int t = truth_of(ctx, g, pred);
    at.dtype = HD_I64;
    c[0] = t < 0 ? -1 : hd_ir_add_node(g, HD_OP_CAST, &t, 1, &at);
    int one = cond_const(g, hd_tensor_scalar(ctx, HD_I64, 1));
    int in[2] = {one, c[0]};
    memset(&at, 0, sizeof at);
    c[1] = c[0] < 0 || one < 0 ? -1 : hd_ir_add_node(g, HD_OP_SUB, in, 2, &at);
    return c[1] < 0 ? ctx->status : HD_OK;
}

/* loop(body) over init (n values), the body's other inputs and count;
 * the n results into res. Takes r->body. */
static hd_status cond_loop(roll *r, int n, const int *init, int count, int *res) {
    hd_ir_graph *g = r->g;
    int nin = n + r->nouter + 1;
    int *in = hd_ctx_alloc(r->ctx, (size_t)(nin + n + 1) * sizeof *in);
    if (!in) return r->ctx->status;
    int *src = in + nin;
    for (int i = 0; i < n; i++) in[i] = init[i], src[i] = i;
    for (int i = 0; i < r->nouter; i++) in[n + i] = r->outer[i];
    in[nin - 1] = count;
    hd_ir_graph *body = r->body;
    r->body = NULL;
    int loop = hd_ir_add_loop(g, body, 1, in, nin, n, src);
    hd_status st = loop < 0 ? r->ctx->status : hd_ir_loop_trips_from(g, loop, nin - 1);
    for (int i = 0; i < n && !st; i++)
        if ((res[i] = hd_ir_add_loop_out(g, loop, i)) < 0) st = r->ctx->status;
    hd_ctx_free(r->ctx, in, (size_t)(nin + n + 1) * sizeof *in);
    return st;
}

/* The values of the tensors (capturing new ones): init's NULLs become
 * zeros of the matching then-value's type. */
static hd_status cond_values(hd_ctx *ctx, int n, hd_tensor *const *init, hd_tensor *const *then_v,
                             hd_tensor *const *else_v, int *v0, int *vt, int *ve) {
    hd_ir_graph *g = hd_trace_graph(ctx);
    for (int i = 0; i < n; i++) {
        if ((vt[i] = hd_trace_value(ctx, then_v[i])) < 0 ||
            (ve[i] = hd_trace_value(ctx, else_v[i])) < 0)
            return ctx->status;
        if (init[i]) {
            v0[i] = hd_trace_value(ctx, init[i]);
        } else {
            const hd_ir_value *t = &g->values[vt[i]];
            hd_tensor *z = hd_tensor_new(ctx, t->dtype, t->shape, t->ndim);
            if (z) memset(z->storage->data, 0, hd_tensor_nbytes(z));
            v0[i] = cond_const(g, z);
        }
        if (v0[i] < 0) return ctx->status;
    }
    return HD_OK;
}

/* With gradient records of the branches alive (gen: the then branch's
 * watch): can the cond carry their gradients? *cg, or *why not. */
static hd_status cond_grad_prepare(hd_ctx *ctx, roll *rt, roll *re, int n, const int *v0,
                                   hd_tensor *const *init, uint32_t gen, hd_cond_grad **cg,
                                   const char **why) {
    *cg = NULL;
    if (!gen || !hd_grad_watch_live(ctx, gen)) return HD_OK;
    hd_cond_grad_in in = {
        {rt->body, re->body}, {rt->outer, re->outer}, {rt->nouter, re->nouter}, n, v0, init, gen};
    return hd_trace_grad_cond_prepare(ctx, &in, cg, why);
}

hd_status hd_trace_cond(hd_ctx *ctx, hd_tensor *pred, hd_trace_pos p0, hd_trace_pos p1,
                        hd_trace_pos p2, int n, hd_tensor *const *init, hd_tensor *const *then_v,
                        hd_tensor *const *else_v, uint32_t gen, hd_tensor **out, const char **why) {
    *why = NULL;
    hd_ir_graph *g = hd_trace_graph(ctx);
    if (!g) return hd_error(ctx, HD_ERR_RUNTIME, "no trace is active");
    if (n < 0 || p0.nodes > p1.nodes || p1.nodes > p2.nodes || p2.nodes != g->nnodes)
        return hd_error(ctx, HD_ERR_ARGUMENT, "hd_trace_cond: branches out of order");
    size_t bytes = (size_t)(5 * n + 2) * sizeof(int);
    int *v = hd_ctx_alloc(ctx, bytes), pv = hd_trace_value(ctx, pred);
    if (!v || pv < 0) return hd_ctx_free(ctx, v, v ? bytes : 0), ctx->status;
    int *v0 = v, *vt = v + n, *ve = v + 2 * n, *s1 = v + 3 * n, *s2 = v + 4 * n, *c = v + 5 * n;
    roll rt, re, cut;
    hd_cond_grad *cg = NULL;
    memset(&rt, 0, sizeof rt), memset(&re, 0, sizeof re), memset(&cut, 0, sizeof cut);
    hd_status st = cond_values(ctx, n, init, then_v, else_v, v0, vt, ve);
    char name[128];
    snprintf(name, sizeof name, "%s.then", g->name ? g->name : "cond");
    if (!st) st = cond_body(&rt, ctx, p0, p1, n, vt, name);
    snprintf(name, sizeof name, "%s.else", g->name ? g->name : "cond");
    if (!st) st = cond_body(&re, ctx, p1, p2, n, ve, name);
    if (!st) st = cond_grad_prepare(ctx, &rt, &re, n, v0, init, gen, &cg, why);
    if (!st && !*why) {
        cut.ctx = ctx, cut.g = g, cut.a = p0.nodes, cut.c = p2.nodes;
        roll_truncate(&cut);
        st = cond_counts(ctx, g, pv, c);
    }
    if (!st && !*why) st = cond_loop(&rt, n, v0, c[0], s1);
    if (!st && !*why) st = cond_loop(&re, n, s1, c[1], s2);
    for (int i = 0; i < n && !st && !*why; i++)
        if (!(out[i] = hd_trace_symbolic_of(ctx, s2[i]))) st = ctx->status;
    if (!st && cg) {
        st = hd_trace_grad_cond_finish(ctx, cg, s1, c, out);
        cg = NULL;
    }
    hd_trace_grad_cond_free(ctx, cg);
    if (rt.ctx) roll_free(&rt);
    if (re.ctx) roll_free(&re);
    hd_ctx_free(ctx, v, bytes);
    return st;
}

/* ---- while on a tensor: a loop on a carried condition ---- */

hd_tensor *hd_trace_while_mark(hd_ctx *ctx, hd_tensor *init) {
    hd_ir_graph *g = hd_trace_graph(ctx);
    if (!g) return hd_error(ctx, HD_ERR_RUNTIME, "no trace is active"), NULL;
    static const hd_attrs none;
    int v = hd_trace_value(ctx, init);
    int m = v < 0 ? -1 : hd_ir_add_node(g, HD_OP_COPY, &v, 1, &none);
    return m < 0 ? NULL : hd_trace_symbolic_of(ctx, m);
}

/* The body: inputs the n variables (read where the body read mark[i]),
 * for a while (cond >= 0) its condition, then the values it reads from
 * before p; outputs the variables' values after the body and the
 * condition's truth. */
static hd_status while_body(roll *r, hd_ctx *ctx, hd_trace_pos p, hd_trace_pos q, int n,
                            const int *mark, const int *now, int cond) {
    hd_status st = roll_init(r, ctx, p, p, q);
    int m = n + (cond >= 0);
    char name[128];
    snprintf(name, sizeof name, "%s.%s", r->g && r->g->name ? r->g->name : "loop",
             cond >= 0 ? "while" : "count");
    if (!st && !(r->body = hd_ir_graph_new(ctx, name))) st = ctx->status;
    for (int i = 0; i < m && !st; i++) {
        const hd_ir_value *v = &r->g->values[i < n ? mark[i] : cond];
        char in[32];
        snprintf(in, sizeof in, i < n ? "s%d" : "go", i);
        int id = i < n ? hd_ir_add_input(r->body, in, v->dtype, v->shape, v->ndim)
                       : hd_ir_add_input(r->body, in, HD_BOOL, NULL, 0);
        if (id < 0)
            st = ctx->status;
        else if (i < n)
            r->body_of[mark[i]] = id;
    }
    if (!st) st = roll_body_nodes(r);
    for (int i = 0; i < m && !st; i++) {
        char out[32];
        snprintf(out, sizeof out, "o%d", i);
        int id = roll_body_value(r, i < n ? now[i] : cond);
        if (i == n) id = truth_of(ctx, r->body, id);
        if (id < 0 || hd_ir_add_output(r->body, out, id)) st = ctx->status;
    }
    if (!st && cond < 0 && hd_ir_add_input(r->body, "trips", HD_I64, NULL, 0) < 0) st = ctx->status;
    return st ? (ctx->status ? ctx->status : HD_ERR_RUNTIME) : HD_OK;
}

/* The loop node over init, for a while the condition's truth go (else the
 * trip count `trips`, its last input), and the body's other inputs; its n
 * results into res. Takes r->body. */
static hd_status while_loop(roll *r, int n, const int *init, int go, int trips, int *res) {
    hd_ir_graph *g = r->g;
    int m = n + (go >= 0), nin = m + r->nouter + (go < 0);
    int *in = hd_ctx_alloc(r->ctx, (size_t)(nin + m + 1) * sizeof *in);
    if (!in) return r->ctx->status;
    int *src = in + nin;
    for (int i = 0; i < m; i++) in[i] = i < n ? init[i] : go, src[i] = i;
    for (int i = 0; i < r->nouter; i++) in[m + i] = r->outer[i];
    if (go < 0) in[nin - 1] = trips;
    hd_ir_graph *body = r->body;
    r->body = NULL;
    int loop = hd_ir_add_loop(g, body, 1, in, nin, m, src);
    hd_status st = loop < 0  ? r->ctx->status
                   : go >= 0 ? hd_ir_loop_while(g, loop, n)
                             : hd_ir_loop_trips_from(g, loop, nin - 1);
    for (int i = 0; i < n && !st; i++)
        if ((res[i] = hd_ir_add_loop_out(g, loop, i)) < 0) st = r->ctx->status;
    hd_ctx_free(r->ctx, in, (size_t)(nin + m + 1) * sizeof *in);
    return st;
}

/* The loop's first-iteration condition or trip count in g (after the
 * cut): a while's truth (*go), or the count as a 0-d i64 (*trips). */
static hd_status while_start(hd_ctx *ctx, hd_ir_graph *g, hd_tensor *pred, hd_tensor *trips,
                             int *go, int *tv) {
    *go = *tv = -1;
    if (pred) {
        int pv = hd_trace_value(ctx, pred);
        *go = pv < 0 ? -1 : truth_of(ctx, g, pv);
        return *go < 0 ? ctx->status : HD_OK;
    }
    *tv = hd_trace_value(ctx, trips);
    return *tv < 0 ? ctx->status : HD_OK;
}

hd_status hd_trace_while(hd_ctx *ctx, hd_tensor *pred, hd_tensor *trips, hd_trace_pos p0,
                         hd_trace_pos p1, hd_trace_pos p2, int n, hd_tensor *const *init,
                         hd_tensor *const *mark, hd_tensor *const *now, hd_tensor *cond,
                         hd_tensor **out) {
    hd_ir_graph *g = hd_trace_graph(ctx);
    if (!g) return hd_error(ctx, HD_ERR_RUNTIME, "no trace is active");
    if (n < 0 || p0.nodes > p1.nodes || p1.nodes > p2.nodes || p2.nodes != g->nnodes ||
        !pred != !cond || !pred == !trips)
        return hd_error(ctx, HD_ERR_ARGUMENT, "hd_trace_while: traces out of order");
    size_t bytes = (size_t)(4 * n + 1) * sizeof(int);
    int *v = hd_ctx_alloc(ctx, bytes), cv = cond ? hd_trace_value(ctx, cond) : -1;
    if (!v || (cond && cv < 0)) return hd_ctx_free(ctx, v, v ? bytes : 0), ctx->status;
    int *v0 = v, *vm = v + n, *vn = v + 2 * n, *res = v + 3 * n;
    hd_status st = HD_OK;
    for (int i = 0; i < n && !st; i++)
        if ((v0[i] = hd_trace_value(ctx, init[i])) < 0 ||
            (vm[i] = hd_trace_value(ctx, mark[i])) < 0 || (vn[i] = hd_trace_value(ctx, now[i])) < 0)
            st = ctx->status;
    roll r;
    memset(&r, 0, sizeof r);
    if (!st) st = while_body(&r, ctx, p1, p2, n, vm, vn, cv);
    int go = -1, tv = -1;
    if (!st) {
        hd_trace_cut(ctx, p0);
        st = while_start(ctx, g, pred, trips, &go, &tv);
    }
    if (!st) st = while_loop(&r, n, v0, go, tv, res);
    for (int i = 0; i < n && !st; i++)
        if (!(out[i] = hd_trace_symbolic_of(ctx, res[i]))) st = ctx->status;
    if (r.ctx) roll_free(&r);
    hd_ctx_free(ctx, v, bytes);
    return st;
}

void hd_trace_cut(hd_ctx *ctx, hd_trace_pos p) {
    roll cut;
    memset(&cut, 0, sizeof cut);
    cut.ctx = ctx, cut.g = hd_trace_graph(ctx);
    if (!cut.g || p.nodes > cut.g->nnodes) return;
    cut.a = p.nodes, cut.c = cut.g->nnodes;
    roll_truncate(&cut);
}
