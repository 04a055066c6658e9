/* Loop nodes of the graph IR: builders, stacks, results and their checks
 * (docs/ir.md, "Loop nodes"); the rest of the IR is hd_ir.c. */
#include "hd_ir.h"
#include "hd_ir_int.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

const char *hd_ir_node_name(const hd_ir_node *n) {
    switch (n->op) {
    case HD_IR_CALLBACK: return "callback";
    case HD_IR_DEAD: return "dead";
    case HD_IR_LOOP: return "loop";
    case HD_IR_LOOP_OUT: return "loop_out";
    default: return n->op >= 0 && n->op < HD_OP_COUNT ? hd_op_name((hd_op)n->op) : "?";
    }
}

int hd_ir_has_effects(const hd_ir_graph *g, int (*is_effect)(const hd_ir_node *n)) {
    for (int i = 0; i < g->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[i];
        if (n->op == HD_IR_CALLBACK) return 1;
        if (n->op == HD_IR_LOOP && n->loop && n->loop->body &&
            hd_ir_has_effects(n->loop->body, is_effect))
            return 1;
        if (n->op >= 0 && is_effect && is_effect(n)) return 1;
    }
    return 0;
}

int hd_irx_same_type(const hd_ir_value *a, const hd_ir_value *b) {
    return a->dtype == b->dtype && a->ndim == b->ndim &&
           !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape);
}

int64_t hd_irx_value_bytes(const hd_ir_value *v) {
    return hd_shape_numel(v->shape, v->ndim) * hd_dtype_size(v->dtype);
}

static const hd_ir_value *ir_body_out(const hd_ir_graph *body, int k) {
    return &body->values[body->outputs[k].value];
}

/* Result k of loop l: body output k, or stack k - noutputs as *tmp. */
const hd_ir_value *hd_irx_loop_result(const hd_ir_loop *l, int k, hd_ir_value *tmp) {
    if (k < l->body->noutputs) return ir_body_out(l->body, k);
    const hd_ir_value *in =
        &l->body->values[l->body->inputs[l->stack_in[k - l->body->noutputs]].value];
    *tmp = *in;
    tmp->ndim = in->ndim + 1;
    tmp->shape[0] = l->trips;
    memcpy(tmp->shape + 1, in->shape, (size_t)in->ndim * sizeof *in->shape);
    tmp->number = 0;
    return tmp;
}

/* Where each result of l goes in the loop's value (64-byte aligned, in
 * order) into offset (may be NULL); the value's bytes (at least 1), or -1
 * if too large. */
static int64_t ir_loop_layout(const hd_ir_loop *l, int64_t *offset) {
    int64_t at = 0;
    for (int k = 0; k < hd_ir_loop_nresults(l); k++) {
        hd_ir_value tmp;
        const hd_ir_value *v = hd_irx_loop_result(l, k, &tmp);
        int64_t n = hd_shape_numel(v->shape, v->ndim), es = hd_dtype_size(v->dtype);
        at = (at + 63) & ~(int64_t)63;
        if (offset) offset[k] = at;
        if (n < 0 || n > (((int64_t)1 << 62) - at) / es) return -1;
        at += n * es;
    }
    return at ? at : 1;
}

/* A loop's inputs against its body: counts, ids, types, carries. */
hd_status hd_irx_loop_check(hd_ir_graph *g, const hd_ir_graph *body, int64_t trips, const int *in,
                            int nin, int ncarry, const int *carry_src) {
    char a[160], b[160];
    if (trips < 1)
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop: %lld trips (at least 1)", (long long)trips);
    if (nin != body->ninputs)
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop: %d inputs, its body takes %d", nin,
                        body->ninputs);
    if (ncarry < 0 || ncarry > nin || (ncarry && !carry_src))
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop: %d carried inputs of %d", ncarry, nin);
    if (hd_irx_check_ids(g, in, nin, "loop")) return g->ctx->status;
    for (int i = 0; i < nin; i++) {
        const hd_ir_value *x = &g->values[in[i]], *y = &body->values[body->inputs[i].value];
        if (!hd_irx_same_type(x, y))
            return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop: input %d is %s, the body's '%s' is %s",
                            i, hd_ir_type_str(x->dtype, x->shape, x->ndim, a, sizeof a),
                            body->inputs[i].name,
                            hd_ir_type_str(y->dtype, y->shape, y->ndim, b, sizeof b));
    }
    for (int i = 0; i < ncarry; i++) {
        int k = carry_src[i];
        if (k < 0 || k >= body->noutputs)
            return hd_error(g->ctx, HD_ERR_ARGUMENT,
                            "loop: carried input %d comes from output %d of %d", i, k,
                            body->noutputs);
        const hd_ir_value *x = &body->values[body->inputs[i].value], *y = ir_body_out(body, k);
        if (!hd_irx_same_type(x, y))
            return hd_error(
                g->ctx, HD_ERR_ARGUMENT,
                "loop: carried input '%s' is %s, the output '%s' feeding it is %s",
                body->inputs[i].name, hd_ir_type_str(x->dtype, x->shape, x->ndim, a, sizeof a),
                body->outputs[k].name, hd_ir_type_str(y->dtype, y->shape, y->ndim, b, sizeof b));
    }
    return HD_OK;
}

/* Every body output feeds the carried input of its index (a run-time trip
 * count, a while loop: 0 iterations give the inputs). */
static hd_status ir_loop_check_all_carried(hd_ir_graph *g, const hd_ir_loop *l, const char *what) {
    if (l->ncarry != l->body->noutputs)
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop: with %s every output is carried", what);
    for (int i = 0; i < l->ncarry; i++)
        if (l->carry_src[i] != i)
            return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop: with %s output %d feeds input %d", what,
                            i, i);
    return HD_OK;
}

/* A run-time trip count (trips_in >= 0): a 0-d integer input, and every
 * body output carried into the input of its index. */
hd_status hd_irx_loop_check_trips_in(hd_ir_graph *g, const hd_ir_node *n) {
    const hd_ir_loop *l = n->loop;
    if (l->trips_in < 0) return HD_OK;
    if (l->trips_in >= n->nin)
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop: trip count input %d of %d", l->trips_in,
                        n->nin);
    const hd_ir_value *v = &g->values[n->in[l->trips_in]];
    if (v->ndim != 0 || !hd_dtype_is_int(v->dtype))
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop: its trip count is not a 0-d integer");
    return ir_loop_check_all_carried(g, l, "a run-time trip count");
}

/* A while loop (while_in >= 0): a one-element carried input, no run-time
 * trip count. */
hd_status hd_irx_loop_check_while(hd_ir_graph *g, const hd_ir_node *n) {
    const hd_ir_loop *l = n->loop;
    if (l->while_in < 0) return HD_OK;
    if (l->while_in >= l->ncarry)
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop: while on input %d of %d carried",
                        l->while_in, l->ncarry);
    if (l->trips_in >= 0)
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop: a while loop has no trip count input");
    const hd_ir_value *v = &g->values[n->in[l->while_in]];
    if (hd_shape_numel(v->shape, v->ndim) != 1)
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop: its while condition is not one element");
    return ir_loop_check_all_carried(g, l, "a while condition");
}

static hd_ir_node *ir_loop_node_of(hd_ir_graph *g, int loop) {
    if (loop < 0 || loop >= g->nvalues || g->values[loop].kind != HD_IR_VALUE_NODE ||
        g->nodes[g->values[loop].index].op != HD_IR_LOOP) {
        hd_error(g->ctx, HD_ERR_ARGUMENT, "loop: %%%d is not a loop's value", loop);
        return NULL;
    }
    return &g->nodes[g->values[loop].index];
}

/* Set *field of loop value `loop` to v if check then accepts the loop. */
static hd_status ir_loop_set(hd_ir_graph *g, int loop, size_t field, int v,
                             hd_status (*check)(hd_ir_graph *, const hd_ir_node *)) {
    hd_ir_node *n = ir_loop_node_of(g, loop);
    if (!n) return g->ctx->status;
    int *p = (int *)((char *)n->loop + field), was = *p;
    *p = v;
    hd_status st = check(g, n);
    if (st) *p = was;
    return st;
}

hd_status hd_ir_loop_while(hd_ir_graph *g, int loop, int carry) {
    return ir_loop_set(g, loop, offsetof(hd_ir_loop, while_in), carry, hd_irx_loop_check_while);
}

hd_status hd_ir_loop_trips_from(hd_ir_graph *g, int loop, int input) {
    return ir_loop_set(g, loop, offsetof(hd_ir_loop, trips_in), input, hd_irx_loop_check_trips_in);
}

/* The loop record in g's arena (body not yet attached). */
hd_ir_loop *hd_irx_loop_new(hd_ir_graph *g, const hd_ir_graph *body, int64_t trips, int ncarry,
                            const int *carry_src) {
    hd_ir_loop *l = hd_ir_arena_alloc(&g->arena, sizeof *l);
    if (!l) return NULL;
    l->carry_src = hd_ir_arena_alloc(&g->arena, (size_t)(ncarry + 1) * sizeof *l->carry_src);
    l->offset = hd_ir_arena_alloc(&g->arena, (size_t)(body->noutputs + 1) * sizeof *l->offset);
    if (!l->carry_src || !l->offset) return NULL;
    if (ncarry) memcpy(l->carry_src, carry_src, (size_t)ncarry * sizeof *carry_src);
    l->trips = trips;
    l->trips_in = -1;
    l->while_in = -1;
    l->ncarry = ncarry;
    l->nstack = 0;
    l->stack_in = NULL;
    l->body = (hd_ir_graph *)body; /* for the layout; the caller attaches it */
    l->bytes = ir_loop_layout(l, l->offset);
    l->body = NULL;
    if (l->bytes < 0) {
        hd_error(g->ctx, HD_ERR_ARGUMENT, "loop: its outputs are too large");
        return NULL;
    }
    return l;
}

/* Free a loop's compiled body and body graph. */
void hd_irx_loop_release(hd_ctx *ctx, hd_ir_loop *l) {
    if (l->exec && l->exec_free) l->exec_free(ctx, l->exec);
    l->exec = NULL;
    hd_ir_graph_free(l->body);
    l->body = NULL;
}

int hd_ir_add_loop(hd_ir_graph *g, hd_ir_graph *body, int64_t trips, const int *in, int nin,
                   int ncarry, const int *carry_src) {
    if (!body) {
        hd_error(g->ctx, HD_ERR_ARGUMENT, "loop without a body");
        return -1;
    }
    hd_ir_loop *l = NULL;
    hd_ir_node *n = NULL;
    int v = -1;
    if (hd_irx_loop_check(g, body, trips, in, nin, ncarry, carry_src) ||
        !(l = hd_irx_loop_new(g, body, trips, ncarry, carry_src)) ||
        !(n = hd_irx_new_node(g, HD_IR_LOOP, in, nin)) ||
        (v = hd_irx_new_value(g, HD_IR_VALUE_NODE, g->nnodes, HD_U8, &l->bytes, 1)) < 0) {
        hd_ir_graph_free(body);
        return -1;
    }
    l->body = body;
    n->loop = l;
    n->out = v;
    g->nnodes++;
    return v;
}

int hd_ir_add_loop_like(hd_ir_graph *g, hd_ir_graph *body, const hd_ir_loop *like, const int *in,
                        int nin) {
    int v = hd_ir_add_loop(g, body, like->trips, in, nin, like->ncarry, like->carry_src);
    if (v >= 0 && like->trips_in >= 0 && hd_ir_loop_trips_from(g, v, like->trips_in)) v = -1;
    if (v >= 0 && like->while_in >= 0 && hd_ir_loop_while(g, v, like->while_in)) v = -1;
    for (int i = 0; i < like->nstack && v >= 0; i++)
        if (hd_ir_loop_stack(g, v, like->stack_in[i]) < 0) v = -1;
    return v;
}

/* l's stack tables in g's arena for src's stacks (offset grown to every
 * result); 0 when out of memory. */
int hd_irx_loop_stacks_alloc(hd_ir_graph *g, hd_ir_loop *l, const hd_ir_loop *src) {
    int nres = src->body->noutputs + src->nstack;
    int *in = hd_ir_arena_alloc(&g->arena, (size_t)src->nstack * sizeof *in);
    int64_t *off = hd_ir_arena_alloc(&g->arena, (size_t)(nres + 1) * sizeof *off);
    if (!in || !off) return 0;
    memcpy(in, src->stack_in, (size_t)src->nstack * sizeof *in);
    l->stack_in = in;
    l->nstack = src->nstack;
    l->offset = off;
    return 1;
}

/* Stacks: carried inputs, under a static trip count. */
hd_status hd_irx_loop_check_stacks(hd_ir_graph *g, const hd_ir_node *n) {
    const hd_ir_loop *l = n->loop;
    if (!l->nstack) return HD_OK;
    if (l->trips_in >= 0 || l->while_in >= 0)
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop: stacks need a static trip count");
    for (int s = 0; s < l->nstack; s++) {
        int c = l->stack_in[s];
        if (c < 0 || c >= l->ncarry)
            return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop: stack %d of input %d, not carried", s,
                            c);
        if (l->body->values[l->body->inputs[c].value].ndim + 1 > HD_MAX_DIMS)
            return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop: stack %d would have too many dims", s);
    }
    return HD_OK;
}

int hd_ir_loop_stack(hd_ir_graph *g, int loop, int carry) {
    hd_ir_node *n = ir_loop_node_of(g, loop);
    if (!n) return -1;
    hd_ir_loop *l = n->loop, grown = *l;
    grown.nstack = l->nstack + 1;
    int *in = hd_ir_arena_alloc(&g->arena, (size_t)grown.nstack * sizeof *in);
    if (!in) return -1;
    if (l->nstack) memcpy(in, l->stack_in, (size_t)l->nstack * sizeof *in);
    in[l->nstack] = carry;
    grown.stack_in = in;
    hd_ir_node probe = *n;
    probe.loop = &grown;
    if (hd_irx_loop_check_stacks(g, &probe)) return -1;
    if (!hd_irx_loop_stacks_alloc(g, l, &grown)) return -1;
    l->bytes = ir_loop_layout(l, l->offset);
    if (l->bytes < 0) {
        hd_error(g->ctx, HD_ERR_ARGUMENT, "loop: its outputs are too large");
        return -1;
    }
    g->values[n->out].shape[0] = l->bytes;
    return hd_ir_loop_nresults(l) - 1;
}

hd_status hd_ir_loop_keep_outputs(hd_ir_graph *g, int node, const char *keep) {
    hd_ir_node *n = &g->nodes[node];
    hd_ir_loop *l = n->loop;
    hd_ir_graph *b = l->body;
    int nout = b->noutputs, nres = hd_ir_loop_nresults(l);
    size_t map_bytes = (size_t)(nres + 1) * sizeof(int);
    int *map = hd_ctx_alloc(g->ctx, map_bytes);
    if (!map) return g->ctx->status;
    int m = 0, ns = 0;
    for (int k = 0; k < nout; k++) {
        map[k] = keep[k] ? m : -1;
        if (keep[k]) b->outputs[m++] = b->outputs[k];
    }
    for (int s = 0; s < l->nstack; s++) {
        map[nout + s] = keep[nout + s] ? m + ns : -1;
        if (keep[nout + s]) l->stack_in[ns++] = l->stack_in[s];
    }
    b->noutputs = m;
    l->nstack = ns;
    for (int i = 0; i < l->ncarry; i++) {
        HD_ASSERT(map[l->carry_src[i]] >= 0);
        l->carry_src[i] = map[l->carry_src[i]];
    }
    for (int j = 0; j < g->nnodes; j++) {
        hd_ir_node *u = &g->nodes[j];
        if (u->op != HD_IR_LOOP_OUT || u->in[0] != n->out) continue;
        HD_ASSERT(map[u->attrs.ints[0]] >= 0);
        u->attrs.ints[0] = map[u->attrs.ints[0]];
    }
    hd_ctx_free(g->ctx, map, map_bytes);
    l->bytes = ir_loop_layout(l, l->offset);
    g->values[n->out].shape[0] = l->bytes;
    if (l->exec && l->exec_free) l->exec_free(g->ctx, l->exec);
    l->exec = NULL;
    return HD_OK;
}

/* Is `loop` the value of a loop node, with an output k? */
hd_status hd_irx_loop_out_check(hd_ir_graph *g, int loop, int k, const hd_ir_loop **out) {
    const hd_ir_value *v = loop >= 0 && loop < g->nvalues ? &g->values[loop] : NULL;
    if (!v || v->kind != HD_IR_VALUE_NODE || v->index < 0 || v->index >= g->nnodes ||
        g->nodes[v->index].op != HD_IR_LOOP || g->nodes[v->index].out != loop ||
        !g->nodes[v->index].loop || !g->nodes[v->index].loop->body)
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop_out: %%%d is not a loop's value", loop);
    const hd_ir_loop *l = g->nodes[v->index].loop;
    if (k < 0 || k >= hd_ir_loop_nresults(l))
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop_out: output %d of a loop with %d outputs", k,
                        hd_ir_loop_nresults(l));
    *out = l;
    return HD_OK;
}

/* A LOOP_OUT node for output k of loop, defining value (-1: a new one). */
static int ir_add_loop_out(hd_ir_graph *g, int loop, int k, int value) {
    const hd_ir_loop *l;
    if (hd_irx_loop_out_check(g, loop, k, &l)) return -1;
    hd_ir_value tmp;
    const hd_ir_value *o = hd_irx_loop_result(l, k, &tmp);
    hd_ir_node *n = hd_irx_new_node(g, HD_IR_LOOP_OUT, &loop, 1);
    if (!n) return -1;
    if (value < 0) {
        value = hd_irx_new_value(g, HD_IR_VALUE_NODE, g->nnodes, o->dtype, o->shape, o->ndim);
        if (value < 0) return -1;
    } else {
        hd_ir_value *v = &g->values[value];
        v->kind = HD_IR_VALUE_NODE;
        v->index = g->nnodes;
        v->number = 0;
    }
    n->attrs.ints[0] = k;
    n->out = value;
    g->nnodes++;
    return value;
}

int hd_ir_add_loop_out(hd_ir_graph *g, int loop, int k) {
    return ir_add_loop_out(g, loop, k, -1);
}

hd_status hd_ir_add_loop_out_as(hd_ir_graph *g, int loop, int k, int value) {
    const hd_ir_loop *l;
    char a[160], b[160];
    if (hd_irx_loop_out_check(g, loop, k, &l)) return g->ctx->status;
    if (value < 0 || value >= g->nvalues)
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop_out: value %d of %d", value, g->nvalues);
    hd_ir_value tmp;
    const hd_ir_value *v = &g->values[value], *o = hd_irx_loop_result(l, k, &tmp);
    if (v->kind != HD_IR_VALUE_NODE)
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop_out: %%%d is a graph input or constant",
                        value);
    if (v->index >= 0 && v->index < g->nnodes && g->nodes[v->index].out == value &&
        g->nodes[v->index].op != HD_IR_DEAD)
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop_out: %%%d is still defined by node %d",
                        value, v->index);
    if (!hd_irx_same_type(v, o))
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "loop_out: %%%d is %s, output %d is %s", value,
                        hd_ir_type_str(v->dtype, v->shape, v->ndim, a, sizeof a), k,
                        hd_ir_type_str(o->dtype, o->shape, o->ndim, b, sizeof b));
    return ir_add_loop_out(g, loop, k, value) < 0 ? g->ctx->status : HD_OK;
}
