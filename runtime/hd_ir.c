/* The graph IR: arena, builders, shape checks, verifier, compaction,
 * printers and hashing. */
#include "hd_ir.h"
#include "hd_ir_int.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ---- arena ---- */

struct hd_ir_block {
    hd_ir_block *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

enum { HD_IR_BLOCK_MIN = 16 * 1024 };

void *hd_ir_arena_alloc(hd_ir_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    hd_ir_block *b = a->head;
    if (!b || b->size - b->used < n) {
        size_t size = n > HD_IR_BLOCK_MIN ? n : HD_IR_BLOCK_MIN;
        if (size > SIZE_MAX - sizeof *b) {
            hd_error(a->ctx, HD_ERR_MEMORY, "out of memory: %zu bytes requested", n);
            return NULL;
        }
        b = hd_ctx_alloc(a->ctx, sizeof *b + size);
        if (!b) return NULL;
        b->size = size;
        b->used = 0;
        b->next = a->head;
        a->head = b;
        a->bytes += sizeof *b + size;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *hd_ir_arena_strdup(hd_ir_arena *a, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = hd_ir_arena_alloc(a, n);
    if (d) memcpy(d, s, n);
    return d;
}

void hd_ir_arena_free(hd_ir_arena *a) {
    hd_ir_block *b = a->head;
    while (b) {
        hd_ir_block *next = b->next;
        hd_ctx_free(a->ctx, b, sizeof *b + b->size);
        b = next;
    }
    a->head = NULL;
    a->bytes = 0;
}

/* Grow an arena-backed array to hold at least need elements. The old copy
 * stays in the arena until the graph is freed (at most as much again). */
static int ir_grow(hd_ir_graph *g, void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return 1;
    if (need > (1 << 28)) {
        hd_error(g->ctx, HD_ERR_LIMIT, "graph too large (%d entries)", need);
        return 0;
    }
    int ncap = *cap ? *cap : 8;
    while (ncap < need) ncap *= 2;
    void *p = hd_ir_arena_alloc(&g->arena, (size_t)ncap * elem);
    if (!p) return 0;
    if (*cap) memcpy(p, *arr, (size_t)*cap * elem);
    *arr = p;
    *cap = ncap;
    return 1;
}

#define IR_GROW(g, arr, cap, need) ir_grow((g), (void **)&(arr), &(cap), (need), sizeof *(arr))

/* ---- graph ---- */

hd_ir_graph *hd_ir_graph_new(hd_ctx *ctx, const char *name) {
    hd_ir_arena a = {ctx, NULL, 0};
    hd_ir_graph *g = hd_ir_arena_alloc(&a, sizeof *g);
    if (!g) {
        hd_ir_arena_free(&a);
        return NULL;
    }
    g->ctx = ctx;
    g->arena = a;
    g->name = hd_ir_arena_strdup(&g->arena, name && *name ? name : "graph");
    if (!g->name) {
        hd_ir_graph_free(g);
        return NULL;
    }
    return g;
}

void hd_irx_loop_release(hd_ctx *ctx, hd_ir_loop *l);

void hd_ir_graph_free(hd_ir_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->nconsts; i++) hd_tensor_unref(g->consts[i].t);
    for (int i = 0; i < g->nnodes; i++) {
        hd_ir_callback *cb = &g->nodes[i].cb;
        if (g->nodes[i].op == HD_IR_CALLBACK && cb->ud_free) cb->ud_free(g->ctx, cb->ud);
        if (g->nodes[i].loop) hd_irx_loop_release(g->ctx, g->nodes[i].loop);
    }
    hd_ir_arena a = g->arena;
    hd_ir_arena_free(&a);
}

int hd_irx_new_value(hd_ir_graph *g, hd_ir_value_kind kind, int index, hd_dtype dt,
                     const int64_t *shape, int ndim) {
    if (!IR_GROW(g, g->values, g->cap_values, g->nvalues + 1)) return -1;
    hd_ir_value *v = &g->values[g->nvalues];
    memset(v, 0, sizeof *v);
    v->kind = kind;
    v->index = index;
    v->dtype = dt;
    v->ndim = ndim;
    if (ndim) memcpy(v->shape, shape, (size_t)ndim * sizeof *shape);
    return g->nvalues++;
}

static hd_status ir_check_type(hd_ctx *ctx, hd_dtype dt, const int64_t *shape, int ndim) {
    if ((unsigned)dt >= HD_DTYPE_COUNT)
        return hd_error(ctx, HD_ERR_ARGUMENT, "unknown dtype %d", (int)dt);
    if (ndim < 0 || ndim > HD_MAX_DIMS)
        return hd_error(ctx, HD_ERR_ARGUMENT, "tensors have at most %d dims, got %d", HD_MAX_DIMS,
                        ndim);
    /* bytes, with zero dims counted as 1: strides of an empty tensor are
     * products of the other dims and must not overflow either */
    size_t n = (size_t)hd_dtype_size(dt);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return hd_error(ctx, HD_ERR_ARGUMENT, "negative dimension %lld in shape",
                            (long long)shape[i]);
        if (!hd_mul_overflow(n, (size_t)(shape[i] ? shape[i] : 1), &n) || n > ((size_t)1 << 62))
            return hd_error(ctx, HD_ERR_ARGUMENT, "tensor shape too large");
    }
    return HD_OK;
}

int hd_ir_find_input(const hd_ir_graph *g, const char *name) {
    for (int i = 0; i < g->ninputs; i++)
        if (strcmp(g->inputs[i].name, name) == 0) return i;
    return -1;
}

int hd_ir_find_output(const hd_ir_graph *g, const char *name) {
    for (int i = 0; i < g->noutputs; i++)
        if (strcmp(g->outputs[i].name, name) == 0) return i;
    return -1;
}

int hd_ir_add_input(hd_ir_graph *g, const char *name, hd_dtype dt, const int64_t *shape, int ndim) {
    if (!name || !*name) {
        hd_error(g->ctx, HD_ERR_ARGUMENT, "an input needs a name");
        return -1;
    }
    if (hd_ir_find_input(g, name) >= 0) {
        hd_error(g->ctx, HD_ERR_ARGUMENT, "input '%s' is declared twice", name);
        return -1;
    }
    if (ir_check_type(g->ctx, dt, shape, ndim)) return -1;
    if (!IR_GROW(g, g->inputs, g->cap_inputs, g->ninputs + 1)) return -1;
    char *nm = hd_ir_arena_strdup(&g->arena, name);
    if (!nm) return -1;
    int v = hd_irx_new_value(g, HD_IR_VALUE_INPUT, g->ninputs, dt, shape, ndim);
    if (v < 0) return -1;
    g->inputs[g->ninputs].name = nm;
    g->inputs[g->ninputs].value = v;
    g->ninputs++;
    return v;
}

int hd_ir_add_const(hd_ir_graph *g, hd_tensor *t) {
    if (!t->storage) {
        hd_error(g->ctx, HD_ERR_ARGUMENT, "a symbolic tensor cannot be a constant");
        return -1;
    }
    if (!IR_GROW(g, g->consts, g->cap_consts, g->nconsts + 1)) return -1;
    int v = hd_irx_new_value(g, HD_IR_VALUE_CONST, g->nconsts, t->dtype, t->shape, t->ndim);
    if (v < 0) return -1;
    g->values[v].number = t->number;
    hd_ir_const *c = &g->consts[g->nconsts++];
    c->t = hd_tensor_ref(t);
    c->value = v;
    c->version = t->storage->version;
    return v;
}

/* Which attribute fields an op reads: the rest are zeroed. Kinds that read
 * none are listed; every other op keeps all its fields. */
void hd_ir_attrs_canon(hd_op op, const hd_attrs *in, hd_attrs *out) {
    memset(out, 0, sizeof *out);
    hd_op_kind kind = hd_op_infos[op].kind;
    int none = kind == HD_KIND_BINARY || kind == HD_KIND_COMPARE || kind == HD_KIND_TERNARY ||
               kind == HD_KIND_MATMUL;
    if (kind == HD_KIND_UNARY) {
        if (op == HD_OP_CLAMP || op == HD_OP_POLYGAMMA) { /* bounds; n */
            memcpy(out->scalar, in->scalar, 2 * sizeof *in->scalar);
            return;
        }
        if (op == HD_OP_CAST) out->dtype = in->dtype;
        return;
    }
    if (none) return;
    out->naxes = in->naxes >= 0 && in->naxes <= HD_MAX_DIMS ? in->naxes : 0;
    memcpy(out->axes, in->axes, (size_t)out->naxes * sizeof *in->axes);
    out->keepdim = in->keepdim;
    out->nshape = in->nshape >= 0 && in->nshape <= HD_MAX_DIMS ? in->nshape : 0;
    memcpy(out->shape, in->shape, (size_t)out->nshape * sizeof *in->shape);
    memcpy(out->scalar, in->scalar, sizeof in->scalar);
    memcpy(out->ints, in->ints, sizeof in->ints);
    out->dtype = in->dtype;
    memcpy(out->start, in->start, sizeof in->start);
    memcpy(out->step, in->step, sizeof in->step);
    memcpy(out->len, in->len, sizeof in->len);
    out->drop_mask = in->drop_mask;
}

/* Fill a stack tensor with a value's metadata, as the shape rules read it. */
static void ir_meta_tensor(const hd_ir_value *v, hd_tensor *t) {
    memset(t, 0, sizeof *t);
    t->refcount = 1;
    t->dtype = v->dtype;
    t->ndim = v->ndim;
    t->number = v->number;
    memcpy(t->shape, v->shape, sizeof t->shape);
    hd_contiguous_strides(t->shape, t->ndim, t->strides);
    t->numel = hd_shape_numel(t->shape, t->ndim);
}

hd_status hd_irx_check_ids(hd_ir_graph *g, const int *in, int nin, const char *what) {
    for (int i = 0; i < nin; i++)
        if (in[i] < 0 || in[i] >= g->nvalues)
            return hd_error(g->ctx, HD_ERR_ARGUMENT, "%s: input %d refers to value %d of %d", what,
                            i, in[i], g->nvalues);
    return HD_OK;
}

hd_status hd_ir_plan(hd_ir_graph *g, hd_op op, const int *in, int nin, const hd_attrs *attrs,
                     hd_op_plan *plan) {
    enum { STACK_IN = 8 };
    if ((unsigned)op >= HD_OP_COUNT) return hd_error(g->ctx, HD_ERR_ARGUMENT, "unknown op %d", op);
    if (nin < 0 || nin > 4096)
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "%s: %d inputs", hd_op_name(op), nin);
    if (hd_irx_check_ids(g, in, nin, hd_op_name(op))) return g->ctx->status;
    hd_tensor tbuf[STACK_IN], *pbuf[STACK_IN];
    hd_tensor *t = tbuf, **p = pbuf;
    if (nin > STACK_IN) {
        t = hd_ctx_alloc(g->ctx, (size_t)nin * (sizeof *t + sizeof *p));
        if (!t) return g->ctx->status;
        p = (hd_tensor **)(t + nin);
    }
    for (int i = 0; i < nin; i++) {
        ir_meta_tensor(&g->values[in[i]], &t[i]);
        p[i] = &t[i];
    }
    hd_status st = hd_op_plan_make(g->ctx, op, p, nin, attrs, plan);
    if (t != tbuf) hd_ctx_free(g->ctx, t, (size_t)nin * (sizeof *t + sizeof *p));
    return st;
}

hd_ir_node *hd_irx_new_node(hd_ir_graph *g, int op, const int *in, int nin) {
    if (!IR_GROW(g, g->nodes, g->cap_nodes, g->nnodes + 1)) return NULL;
    int *ins = NULL;
    if (nin) {
        ins = hd_ir_arena_alloc(&g->arena, (size_t)nin * sizeof *ins);
        if (!ins) return NULL;
        memcpy(ins, in, (size_t)nin * sizeof *ins);
    }
    hd_ir_node *n = &g->nodes[g->nnodes];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->nin = nin;
    n->in = ins;
    n->out = -1;
    n->group = -1;
    return n;
}

int hd_ir_add_node(hd_ir_graph *g, hd_op op, const int *in, int nin, const hd_attrs *attrs) {
    static const hd_attrs no_attrs;
    hd_op_plan plan;
    if (!attrs) attrs = &no_attrs;
    /* graphs are functional: an in-place write could reach a caller's input
     * or a constant */
    if (op == HD_OP_ASSIGN) {
        hd_error(g->ctx, HD_ERR_RUNTIME, "assign (in-place) cannot be a graph node");
        return -1;
    }
    if (hd_ir_plan(g, op, in, nin, attrs, &plan)) return -1;
    hd_ir_node *n = hd_irx_new_node(g, op, in, nin);
    if (!n) return -1;
    int v = hd_irx_new_value(g, HD_IR_VALUE_NODE, g->nnodes, plan.dtype, plan.shape, plan.ndim);
    if (v < 0) return -1;
    hd_ir_attrs_canon(op, attrs, &n->attrs);
    n->out = v;
    g->nnodes++;
    return v;
}

void hd_ir_detach_nodes(hd_ir_graph *g, hd_ir_node **old, int *nold) {
    *old = g->nodes;
    *nold = g->nnodes;
    g->nodes = NULL;
    g->nnodes = g->cap_nodes = 0;
}

hd_status hd_ir_append(hd_ir_graph *g, const hd_ir_node *n) {
    if (!IR_GROW(g, g->nodes, g->cap_nodes, g->nnodes + 1)) return g->ctx->status;
    g->nodes[g->nnodes] = *n;
    if (n->out >= 0 && n->out < g->nvalues) g->values[n->out].index = g->nnodes;
    g->nnodes++;
    return HD_OK;
}

void hd_ir_drop_detached(hd_ir_graph *g, const hd_ir_node *old, int from, int nold) {
    for (int i = from; i < nold; i++) {
        if (old[i].op == HD_IR_CALLBACK && old[i].cb.ud_free)
            old[i].cb.ud_free(g->ctx, old[i].cb.ud);
        if (old[i].loop) hd_irx_loop_release(g->ctx, old[i].loop);
    }
}

hd_status hd_ir_add_callback(hd_ir_graph *g, const hd_ir_callback *cb, const int *in, int nin) {
    if (!cb || !cb->fn) return hd_error(g->ctx, HD_ERR_ARGUMENT, "callback without a function");
    if (nin < 0 || hd_irx_check_ids(g, in, nin, "callback")) return g->ctx->status;
    hd_ir_node *n = hd_irx_new_node(g, HD_IR_CALLBACK, in, nin);
    if (!n) return g->ctx->status;
    const char *name = hd_ir_arena_strdup(&g->arena, cb->name ? cb->name : "callback");
    if (!name) return g->ctx->status;
    n->cb = *cb;
    n->cb.name = name;
    g->nnodes++;
    g->ncallbacks++;
    return HD_OK;
}

hd_status hd_ir_add_output(hd_ir_graph *g, const char *name, int value) {
    if (!name || !*name) return hd_error(g->ctx, HD_ERR_ARGUMENT, "an output needs a name");
    if (hd_ir_find_output(g, name) >= 0)
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "output '%s' is given twice", name);
    if (value < 0 || value >= g->nvalues)
        return hd_error(g->ctx, HD_ERR_ARGUMENT, "output '%s' refers to value %d of %d", name,
                        value, g->nvalues);
    if (!IR_GROW(g, g->outputs, g->cap_outputs, g->noutputs + 1)) return g->ctx->status;
    char *nm = hd_ir_arena_strdup(&g->arena, name);
    if (!nm) return g->ctx->status;
    g->outputs[g->noutputs].name = nm;
    g->outputs[g->noutputs].value = value;
    g->outputs[g->noutputs].into = -1;
    g->noutputs++;
    return HD_OK;
}

/* ---- clone ---- */

static int ir_copy_array(hd_ir_graph *d, void **dst, int *cap, const void *src, int n,
                         size_t elem) {
    if (!n) return 1;
    if (!ir_grow(d, dst, cap, n, elem)) return 0;
    memcpy(*dst, src, (size_t)n * elem);
    return 1;
}

static int ir_clone_names(hd_ir_graph *d) {
    for (int i = 0; i < d->ninputs; i++)
        if (!(d->inputs[i].name = hd_ir_arena_strdup(&d->arena, d->inputs[i].name))) return 0;
    for (int i = 0; i < d->noutputs; i++)
        if (!(d->outputs[i].name = hd_ir_arena_strdup(&d->arena, d->outputs[i].name))) return 0;
    return 1;
}

/* A loop's copy in d's arena with a copy of its body; the compiled body
 * is not copied. */
static hd_ir_loop *ir_loop_clone(hd_ir_graph *d, const hd_ir_loop *src) {
    hd_ir_loop *l = hd_irx_loop_new(d, src->body, src->trips, src->ncarry, src->carry_src);
    if (!l || (src->nstack && !hd_irx_loop_stacks_alloc(d, l, src))) return NULL;
    memcpy(l->offset, src->offset, (size_t)hd_ir_loop_nresults(src) * sizeof *l->offset);
    l->bytes = src->bytes;
    l->trips_in = src->trips_in;
    l->while_in = src->while_in;
    l->body = hd_ir_graph_clone(src->body);
    return l->body ? l : NULL;
}

static int ir_clone_nodes(hd_ir_graph *d, const hd_ir_graph *g) {
    if (!ir_copy_array(d, (void **)&d->nodes, &d->cap_nodes, g->nodes, g->nnodes, sizeof *g->nodes))
        return 0;
    for (int i = 0; i < g->nnodes; i++) {
        hd_ir_node *n = &d->nodes[i];
        n->in = NULL;
        n->loop = NULL;                                    /* until the body is copied below */
        if (n->op == HD_IR_CALLBACK) n->cb.ud_free = NULL; /* until ud is duplicated below */
        d->nnodes = i + 1;
        if (g->nodes[i].nin) {
            n->in = hd_ir_arena_alloc(&d->arena, (size_t)n->nin * sizeof *n->in);
            if (!n->in) return 0;
            memcpy(n->in, g->nodes[i].in, (size_t)n->nin * sizeof *n->in);
        }
        if (n->op == HD_IR_CALLBACK) {
            if (!(n->cb.name = hd_ir_arena_strdup(&d->arena, n->cb.name))) return 0;
            if (n->cb.ud_dup) n->cb.ud = n->cb.ud_dup(n->cb.ud);
            n->cb.ud_free = g->nodes[i].cb.ud_free;
        }
        if (g->nodes[i].loop && !(n->loop = ir_loop_clone(d, g->nodes[i].loop))) return 0;
    }
    return 1;
}

hd_ir_graph *hd_ir_graph_clone(const hd_ir_graph *g) {
    hd_ir_graph *d = hd_ir_graph_new(g->ctx, g->name);
    if (!d) return NULL;
    if (!ir_copy_array(d, (void **)&d->values, &d->cap_values, g->values, g->nvalues,
                       sizeof *g->values) ||
        !ir_copy_array(d, (void **)&d->inputs, &d->cap_inputs, g->inputs, g->ninputs,
                       sizeof *g->inputs) ||
        !ir_copy_array(d, (void **)&d->outputs, &d->cap_outputs, g->outputs, g->noutputs,
                       sizeof *g->outputs) ||
        !ir_copy_array(d, (void **)&d->consts, &d->cap_consts, g->consts, g->nconsts,
                       sizeof *g->consts))
        goto fail;
    d->nvalues = g->nvalues;
    d->ninputs = g->ninputs;
    d->noutputs = g->noutputs;
    d->nconsts = g->nconsts;
    for (int i = 0; i < d->nconsts; i++) hd_tensor_ref(d->consts[i].t);
    if (!ir_clone_names(d) || !ir_clone_nodes(d, g)) goto fail;
    if (g->ngroups) {
        d->groups = hd_ir_arena_alloc(&d->arena, (size_t)g->ngroups * sizeof *g->groups);
        if (!d->groups) goto fail;
        memcpy(d->groups, g->groups, (size_t)g->ngroups * sizeof *g->groups);
        d->ngroups = g->ngroups;
    }
    d->ncallbacks = g->ncallbacks;
    d->lowered = g->lowered;
    return d;
fail:
    hd_ir_graph_free(d);
    return NULL;
}

/* ---- verifier ---- */

/* The error in ctx, prefixed with "node i (name): ". */
static hd_status ir_verify_fail(hd_ir_graph *g, int i, const char *name, const char *what) {
    if (g->ctx->status == HD_ERR_MEMORY) return HD_ERR_MEMORY; /* as it is */
    char msg[HD_ERRMSG_MAX];
    snprintf(msg, sizeof msg, "%s", g->ctx->errmsg);
    return hd_error(g->ctx, HD_ERR_RUNTIME, "node %d (%s): %s%s", i, name, what, msg);
}

/* A loop node: its inputs against its body, the packed layout, its value
 * u8[bytes], and the body itself. */
static hd_status ir_verify_loop(hd_ir_graph *g, int i) {
    const hd_ir_node *n = &g->nodes[i];
    const hd_ir_loop *l = n->loop;
    if (!l || !l->body || l->body->ctx != g->ctx)
        return hd_error(g->ctx, HD_ERR_RUNTIME, "node %d (loop): no body", i);
    if (hd_irx_loop_check(g, l->body, l->trips, n->in, n->nin, l->ncarry, l->carry_src) ||
        hd_irx_loop_check_trips_in(g, n) || hd_irx_loop_check_while(g, n))
        return ir_verify_fail(g, i, "loop", "");
    if (hd_irx_loop_check_stacks(g, n)) return ir_verify_fail(g, i, "loop", "");
    int64_t at = 0;
    for (int k = 0; k < hd_ir_loop_nresults(l); k++) {
        hd_ir_value tmp;
        at = (at + 63) & ~(int64_t)63;
        if (l->offset[k] != at)
            return hd_error(g->ctx, HD_ERR_RUNTIME,
                            "node %d (loop): output %d at offset %lld, not %lld", i, k,
                            (long long)l->offset[k], (long long)at);
        at += hd_irx_value_bytes(hd_irx_loop_result(l, k, &tmp));
    }
    const hd_ir_value *v = &g->values[n->out];
    if (l->bytes != (at ? at : 1) || v->dtype != HD_U8 || v->ndim != 1 || v->shape[0] != l->bytes)
        return hd_error(g->ctx, HD_ERR_RUNTIME,
                        "node %d (loop): its value is not u8[%lld], its outputs' packed bytes", i,
                        (long long)(at ? at : 1));
    if (hd_ir_verify(l->body)) return ir_verify_fail(g, i, "loop", "body: ");
    return HD_OK;
}

static hd_status ir_verify_loop_out(hd_ir_graph *g, int i) {
    const hd_ir_node *n = &g->nodes[i];
    const hd_ir_loop *l;
    if (n->nin != 1 || n->loop)
        return hd_error(g->ctx, HD_ERR_RUNTIME, "node %d (loop_out): malformed", i);
    if (hd_irx_loop_out_check(g, n->in[0], (int)n->attrs.ints[0], &l))
        return ir_verify_fail(g, i, "loop_out", "");
    hd_ir_value tmp;
    const hd_ir_value *v = &g->values[n->out],
                      *o = hd_irx_loop_result(l, (int)n->attrs.ints[0], &tmp);
    char a[160], b[160];
    if (!hd_irx_same_type(v, o))
        return hd_error(
            g->ctx, HD_ERR_RUNTIME, "node %d (loop_out): declared type %s, output %d is %s", i,
            hd_ir_type_str(v->dtype, v->shape, v->ndim, a, sizeof a), (int)n->attrs.ints[0],
            hd_ir_type_str(o->dtype, o->shape, o->ndim, b, sizeof b));
    return HD_OK;
}

static hd_status ir_verify_node(hd_ir_graph *g, int i, const int *defined_at) {
    const hd_ir_node *n = &g->nodes[i];
    int pseudo = n->op == HD_IR_CALLBACK || n->op == HD_IR_LOOP || n->op == HD_IR_LOOP_OUT;
    if (!pseudo && (n->op < 0 || n->op >= HD_OP_COUNT || n->op == HD_OP_ASSIGN))
        return hd_error(g->ctx, HD_ERR_RUNTIME, "node %d: op %d cannot be a graph node", i, n->op);
    if (n->loop && n->op != HD_IR_LOOP)
        return hd_error(g->ctx, HD_ERR_RUNTIME, "node %d: a loop body on a %s node", i,
                        hd_ir_node_name(n));
    const char *name = hd_ir_node_name(n);
    if (n->nin < 0 || hd_irx_check_ids(g, n->in, n->nin, name)) return g->ctx->status;
    for (int k = 0; k < n->nin; k++)
        if (defined_at[n->in[k]] >= i)
            return hd_error(g->ctx, HD_ERR_RUNTIME,
                            "node %d (%s): input %%%d is used before it is defined", i, name,
                            n->in[k]);
    if (n->op == HD_IR_CALLBACK) {
        if (n->out != -1 || !n->cb.fn)
            return hd_error(g->ctx, HD_ERR_RUNTIME, "node %d: malformed callback", i);
        return HD_OK;
    }
    if (n->out < 0 || n->out >= g->nvalues || g->values[n->out].kind != HD_IR_VALUE_NODE ||
        g->values[n->out].index != i)
        return hd_error(g->ctx, HD_ERR_RUNTIME, "node %d (%s): its value is not linked to it", i,
                        name);
    if (n->op == HD_IR_LOOP) return ir_verify_loop(g, i);
    if (n->op == HD_IR_LOOP_OUT) return ir_verify_loop_out(g, i);
    hd_op_plan plan;
    if (hd_ir_plan(g, (hd_op)n->op, n->in, n->nin, &n->attrs, &plan))
        return ir_verify_fail(g, i, name, "");
    const hd_ir_value *v = &g->values[n->out];
    char a[160], b[160];
    if (plan.dtype != v->dtype || plan.ndim != v->ndim ||
        memcmp(plan.shape, v->shape, (size_t)v->ndim * sizeof *v->shape))
        return hd_error(g->ctx, HD_ERR_RUNTIME,
                        "node %d (%s): declared type %s, but the shape rule gives %s", i, name,
                        hd_ir_type_str(v->dtype, v->shape, v->ndim, a, sizeof a),
                        hd_ir_type_str(plan.dtype, plan.shape, plan.ndim, b, sizeof b));
    for (int k = 0; g->lowered && k < n->nin; k++) {
        int want = n->op == HD_OP_CONCAT ? plan.in_dtype[0]
                   : k < HD_OP_MAX_IN    ? plan.in_dtype[k]
                                         : -1;
        if (want >= 0 && (hd_dtype)want != g->values[n->in[k]].dtype)
            return hd_error(g->ctx, HD_ERR_RUNTIME, "node %d (%s): input %d is %s, the op needs %s",
                            i, name, k, hd_dtype_name(g->values[n->in[k]].dtype),
                            hd_dtype_name((hd_dtype)want));
    }
    return HD_OK;
}

static hd_status ir_verify_values(hd_ir_graph *g, int *defined_at) {
    for (int v = 0; v < g->nvalues; v++) {
        const hd_ir_value *val = &g->values[v];
        if (ir_check_type(g->ctx, val->dtype, val->shape, val->ndim))
            return hd_error(g->ctx, HD_ERR_RUNTIME, "value %%%d: %s", v, g->ctx->errmsg);
        defined_at[v] = g->nnodes; /* not defined: every use fails */
        if (val->kind == HD_IR_VALUE_INPUT && val->index >= 0 && val->index < g->ninputs &&
            g->inputs[val->index].value == v)
            defined_at[v] = -1;
        else if (val->kind == HD_IR_VALUE_CONST && val->index >= 0 && val->index < g->nconsts &&
                 g->consts[val->index].value == v)
            defined_at[v] = -1;
        else if (val->kind == HD_IR_VALUE_NODE && val->index >= 0 && val->index < g->nnodes &&
                 g->nodes[val->index].out == v)
            defined_at[v] = val->index;
    }
    for (int i = 0; i < g->nconsts; i++) {
        const hd_tensor *t = g->consts[i].t;
        const hd_ir_value *val = &g->values[g->consts[i].value];
        if (!t || t->dtype != val->dtype || t->ndim != val->ndim ||
            memcmp(t->shape, val->shape, (size_t)t->ndim * sizeof *t->shape))
            return hd_error(g->ctx, HD_ERR_RUNTIME, "constant %d does not match its value", i);
    }
    return HD_OK;
}

static hd_status ir_verify_names(hd_ir_graph *g, const int *defined_at) {
    for (int i = 0; i < g->ninputs; i++)
        if (hd_ir_find_input(g, g->inputs[i].name) != i)
            return hd_error(g->ctx, HD_ERR_RUNTIME, "input '%s' is declared twice",
                            g->inputs[i].name);
    for (int i = 0; i < g->noutputs; i++) {
        int v = g->outputs[i].value;
        if (hd_ir_find_output(g, g->outputs[i].name) != i)
            return hd_error(g->ctx, HD_ERR_RUNTIME, "output '%s' is given twice",
                            g->outputs[i].name);
        if (v < 0 || v >= g->nvalues || defined_at[v] >= g->nnodes)
            return hd_error(g->ctx, HD_ERR_RUNTIME, "output '%s' is not defined",
                            g->outputs[i].name);
        if (g->outputs[i].into < -1 || g->outputs[i].into >= g->ninputs)
            return hd_error(g->ctx, HD_ERR_RUNTIME, "output '%s' replaces input %d of %d",
                            g->outputs[i].name, g->outputs[i].into, g->ninputs);
    }
    return HD_OK;
}

hd_status hd_ir_verify(hd_ir_graph *g) {
    if (g->ninputs > g->nvalues || g->nconsts > g->nvalues)
        return hd_error(g->ctx, HD_ERR_RUNTIME, "graph tables are inconsistent");
    int *defined_at = hd_ctx_alloc(g->ctx, (size_t)(g->nvalues + 1) * sizeof *defined_at);
    if (!defined_at) return g->ctx->status;
    hd_status st = ir_verify_values(g, defined_at);
    for (int i = 0; !st && i < g->nnodes; i++) {
        if (g->nodes[i].op == HD_IR_DEAD) continue;
        st = ir_verify_node(g, i, defined_at);
    }
    if (!st) st = ir_verify_names(g, defined_at);
    hd_ctx_free(g->ctx, defined_at, (size_t)(g->nvalues + 1) * sizeof *defined_at);
    return st;
}

/* ---- uses and compaction ---- */

void hd_ir_use_counts(const hd_ir_graph *g, int *counts) {
    memset(counts, 0, (size_t)g->nvalues * sizeof *counts);
    for (int i = 0; i < g->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[i];
        if (n->op == HD_IR_DEAD) continue;
        for (int k = 0; k < n->nin; k++) counts[n->in[k]]++;
    }
    for (int i = 0; i < g->noutputs; i++) counts[g->outputs[i].value]++;
}

/* New ids: inputs, used constants, live nodes' values. */
static int ir_renumber(hd_ir_graph *g, const int *uses, int *map) {
    int next = 0;
    for (int v = 0; v < g->nvalues; v++) map[v] = -1;
    for (int i = 0; i < g->ninputs; i++) map[g->inputs[i].value] = next++;
    for (int i = 0; i < g->nconsts; i++)
        if (uses[g->consts[i].value]) map[g->consts[i].value] = next++;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op != HD_IR_DEAD && g->nodes[i].out >= 0) map[g->nodes[i].out] = next++;
    return next;
}

static void ir_compact_tables(hd_ir_graph *g, const int *uses, const int *map) {
    int nc = 0;
    for (int i = 0; i < g->nconsts; i++) {
        if (!uses[g->consts[i].value]) {
            hd_tensor_unref(g->consts[i].t);
            continue;
        }
        g->consts[nc] = g->consts[i];
        g->consts[nc++].value = map[g->consts[i].value];
    }
    g->nconsts = nc;
    for (int i = 0; i < g->ninputs; i++) g->inputs[i].value = map[g->inputs[i].value];
    for (int i = 0; i < g->noutputs; i++) g->outputs[i].value = map[g->outputs[i].value];
    int nn = 0;
    for (int i = 0; i < g->nnodes; i++) {
        hd_ir_node *n = &g->nodes[i];
        if (n->op == HD_IR_DEAD) {
            if (n->loop) hd_irx_loop_release(g->ctx, n->loop);
            continue;
        }
        for (int k = 0; k < n->nin; k++) n->in[k] = map[n->in[k]];
        if (n->out >= 0) n->out = map[n->out];
        if (nn != i) g->nodes[nn] = *n;
        nn++;
    }
    g->nnodes = nn;
}

hd_status hd_ir_compact(hd_ir_graph *g) {
    size_t bytes = (size_t)(g->nvalues + 1) * sizeof(int);
    int *uses = hd_ctx_alloc(g->ctx, 2 * bytes);
    if (!uses) return g->ctx->status;
    int *map = uses + g->nvalues + 1;
    hd_ir_use_counts(g, uses);
    int nv = ir_renumber(g, uses, map);
    hd_ir_value *vals = NULL;
    int cap = 0;
    if (nv && !ir_grow(g, (void **)&vals, &cap, nv, sizeof *vals)) {
        hd_ctx_free(g->ctx, uses, 2 * bytes);
        return g->ctx->status;
    }
    for (int v = 0; v < g->nvalues; v++)
        if (map[v] >= 0) vals[map[v]] = g->values[v];
    /* callbacks may have removed nodes before them: drop stale groups */
    ir_compact_tables(g, uses, map);
    g->values = vals;
    g->cap_values = cap;
    g->nvalues = nv;
    for (int i = 0; i < g->nconsts; i++) g->values[g->consts[i].value].index = i;
    for (int i = 0; i < g->nnodes; i++) {
        g->nodes[i].group = -1;
        if (g->nodes[i].out >= 0) g->values[g->nodes[i].out].index = i;
    }
    g->ngroups = 0;
    g->groups = NULL;
    hd_ctx_free(g->ctx, uses, 2 * bytes);
    return HD_OK;
}

/* ---- printing ---- */

typedef struct ir_buf {
    hd_ctx *ctx;
    char *p;
    size_t len, cap;
    int failed;
} ir_buf;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
ir_printf(ir_buf *b, const char *fmt, ...) {
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t ncap = b->cap ? b->cap * 2 : 256;
        while (ncap < b->len + (size_t)n + 1) ncap *= 2;
        char *q = hd_ctx_realloc(b->ctx, b->p, b->cap, ncap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->p = q;
        b->cap = ncap;
    }
}

static char *ir_buf_finish(ir_buf *b) {
    if (b->failed) {
        if (b->p) hd_ctx_free(b->ctx, b->p, b->cap);
        return NULL;
    }
    if (!b->p) ir_printf(b, "%s", "");
    if (b->failed) return NULL;
    /* shrink to strlen + 1 so that hd_ctx_strfree frees the right size */
    char *s = hd_ctx_realloc(b->ctx, b->p, b->cap, b->len + 1);
    if (!s) {
        hd_ctx_free(b->ctx, b->p, b->cap);
        return NULL;
    }
    return s;
}

char *hd_ir_type_str(hd_dtype dt, const int64_t *shape, int ndim, char *buf, size_t n) {
    char s[128];
    const char *name = (unsigned)dt < HD_DTYPE_COUNT ? hd_dtype_name(dt) : "?";
    snprintf(buf, n, "%s%s", name,
             hd_shape_str(shape, ndim >= 0 && ndim <= HD_MAX_DIMS ? ndim : 0, s, sizeof s));
    return buf;
}

static void ir_print_ints(ir_buf *b, const char *key, const int64_t *v, int n, int *first) {
    ir_printf(b, "%s%s=[", *first ? "" : ", ", key);
    for (int i = 0; i < n; i++) ir_printf(b, "%s%lld", i ? ", " : "", (long long)v[i]);
    ir_printf(b, "]");
    *first = 0;
}

/* Number of entries up to the last nonzero one. */
static int ir_used_len(const int64_t *v, int n) {
    while (n > 0 && v[n - 1] == 0) n--;
    return n;
}

static void ir_print_attrs(ir_buf *b, const hd_ir_node *n) {
    const hd_attrs *a = &n->attrs;
    hd_op_kind kind = hd_op_infos[n->op].kind;
    int first = 1, ns = 4;
    ir_printf(b, " {");
    if (a->naxes) ir_print_ints(b, "axes", a->axes, a->naxes, &first);
    if (a->keepdim) ir_printf(b, "%skeepdim", first ? "" : ", "), first = 0;
    if (a->nshape || n->op == HD_OP_RESHAPE || n->op == HD_OP_FULL)
        ir_print_ints(b, n->op == HD_OP_PERMUTE ? "order" : "shape", a->shape, a->nshape, &first);
    while (ns > 0 && a->scalar[ns - 1] == 0) ns--;
    if (ns) {
        ir_printf(b, "%sscalar=[", first ? "" : ", ");
        for (int i = 0; i < ns; i++) ir_printf(b, "%s%.17g", i ? ", " : "", a->scalar[i]);
        ir_printf(b, "]");
        first = 0;
    }
    int ni = ir_used_len(a->ints, 8);
    if (ni) ir_print_ints(b, "ints", a->ints, ni, &first);
    if (n->op == HD_OP_CAST || kind == HD_KIND_CREATE)
        ir_printf(b, "%sdtype=%s", first ? "" : ", ", hd_dtype_name(a->dtype)), first = 0;
    if (n->op == HD_OP_SLICE) {
        int nd = ir_used_len(a->len, HD_MAX_DIMS);
        ir_print_ints(b, "start", a->start, nd, &first);
        ir_print_ints(b, "step", a->step, nd, &first);
        ir_print_ints(b, "len", a->len, nd, &first);
        if (a->drop_mask) ir_printf(b, ", drop=0x%x", (unsigned)a->drop_mask);
    }
    if (first)
        b->len -= 2; /* nothing printed: drop " {" */
    else
        ir_printf(b, "}");
}

static int ir_has_attrs(const hd_attrs *a) {
    static const hd_attrs zero;
    return memcmp(a, &zero, sizeof zero) != 0;
}

static void ir_print_graph(ir_buf *b, const hd_ir_graph *g, int depth);

/* {trips=999, carry=[%b0 <- out 2]}: %bN is the body's value N. */
static void ir_print_loop(ir_buf *b, const hd_ir_loop *l) {
    if (l->while_in >= 0)
        ir_printf(b, " {while %%b%d", l->body->inputs[l->while_in].value);
    else if (l->trips_in >= 0)
        ir_printf(b, " {trips=input %d", l->trips_in);
    else
        ir_printf(b, " {trips=%lld", (long long)l->trips);
    if (l->ncarry) {
        ir_printf(b, ", carry=[");
        for (int i = 0; i < l->ncarry; i++)
            ir_printf(b, "%s%%b%d <- out %d", i ? ", " : "", l->body->inputs[i].value,
                      l->carry_src[i]);
        ir_printf(b, "]");
    }
    if (l->nstack) {
        ir_printf(b, ", stack=[");
        for (int s = 0; s < l->nstack; s++)
            ir_printf(b, "%s%%b%d", s ? ", " : "", l->body->inputs[l->stack_in[s]].value);
        ir_printf(b, "]");
    }
    ir_printf(b, "}");
}

static void ir_print_node(ir_buf *b, const hd_ir_graph *g, const hd_ir_node *n, int depth) {
    char ty[160];
    int ind = 2 * depth + 2;
    if (n->op == HD_IR_DEAD) return;
    if (n->op == HD_IR_CALLBACK)
        ir_printf(b, "%*scallback %s(", ind, "", n->cb.name);
    else
        ir_printf(b, "%*s%%%d = %s(", ind, "", n->out, hd_ir_node_name(n));
    for (int k = 0; k < n->nin; k++) ir_printf(b, "%s%%%d", k ? ", " : "", n->in[k]);
    ir_printf(b, ")");
    if (n->op == HD_IR_CALLBACK) {
        ir_printf(b, "\n");
        return;
    }
    if (n->op == HD_IR_LOOP)
        ir_print_loop(b, n->loop);
    else if (n->op == HD_IR_LOOP_OUT)
        ir_printf(b, " {out=%lld}", (long long)n->attrs.ints[0]);
    else if (ir_has_attrs(&n->attrs) || n->op == HD_OP_CAST || n->op == HD_OP_RESHAPE)
        ir_print_attrs(b, n);
    const hd_ir_value *v = &g->values[n->out];
    ir_printf(b, " : %s", hd_ir_type_str(v->dtype, v->shape, v->ndim, ty, sizeof ty));
    if (n->group >= 0) ir_printf(b, "  # group %d", n->group);
    ir_printf(b, "\n");
    if (n->op == HD_IR_LOOP) ir_print_graph(b, n->loop->body, depth + 2);
}

/* A constant's values when it is small enough to read at a glance. */
static void ir_print_const_values(ir_buf *b, const hd_tensor *t) {
    if (t->numel > 4 || !hd_tensor_is_cpu(t)) return;
    ir_printf(b, " [");
    for (int64_t i = 0; i < t->numel; i++)
        ir_printf(b, "%s%.9g", i ? ", " : "", hd_tensor_get(t, i));
    ir_printf(b, "]");
}

/* A graph's lines, its header indented by 2 * depth spaces and its lines
 * by two more (a loop's body is printed under the loop's line, two levels
 * deeper than the graph holding it). */
static void ir_print_graph(ir_buf *b, const hd_ir_graph *g, int depth) {
    char ty[160];
    int ind = 2 * depth + 2;
    ir_printf(b, "%*sgraph %s {\n", ind - 2, "", g->name);
    for (int i = 0; i < g->ninputs; i++) {
        const hd_ir_value *v = &g->values[g->inputs[i].value];
        ir_printf(b, "%*s%%%d = input \"%s\" : %s\n", ind, "", g->inputs[i].value,
                  g->inputs[i].name, hd_ir_type_str(v->dtype, v->shape, v->ndim, ty, sizeof ty));
    }
    for (int i = 0; i < g->nconsts; i++) {
        const hd_ir_value *v = &g->values[g->consts[i].value];
        ir_printf(b, "%*s%%%d = const%s : %s", ind, "", g->consts[i].value,
                  v->number ? " number" : "",
                  hd_ir_type_str(v->dtype, v->shape, v->ndim, ty, sizeof ty));
        ir_print_const_values(b, g->consts[i].t);
        ir_printf(b, "\n");
    }
    for (int i = 0; i < g->nnodes; i++) ir_print_node(b, g, &g->nodes[i], depth);
    for (int i = 0; i < g->noutputs; i++)
        ir_printf(b, "%*soutput \"%s\" = %%%d\n", ind, "", g->outputs[i].name, g->outputs[i].value);
    ir_printf(b, "%*s}\n", ind - 2, "");
}

char *hd_ir_to_text(const hd_ir_graph *g) {
    ir_buf b = {g->ctx, NULL, 0, 0, 0};
    ir_print_graph(&b, g, 0);
    return ir_buf_finish(&b);
}

/* Names come from programs and files: escape what DOT would misread. */
static void ir_dot_escaped(ir_buf *b, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            ir_printf(b, "\\%c", c);
        else if (c < 0x20)
            ir_printf(b, "?");
        else
            ir_printf(b, "%c", c);
    }
}

static void ir_dot_value_node(ir_buf *b, const hd_ir_graph *g, int v, const char *what,
                              const char *name) {
    char ty[160];
    const hd_ir_value *val = &g->values[v];
    ir_printf(&*b, "  v%d [shape=ellipse, label=\"%%%d %s ", v, v, what);
    if (name) ir_dot_escaped(b, name);
    ir_printf(b, "\\n%s\"];\n", hd_ir_type_str(val->dtype, val->shape, val->ndim, ty, sizeof ty));
}

static void ir_dot_node(ir_buf *b, const hd_ir_graph *g, int i) {
    const hd_ir_node *n = &g->nodes[i];
    char ty[160];
    if (n->op == HD_IR_DEAD) return;
    if (n->op == HD_IR_CALLBACK) {
        ir_printf(b, "  e%d [shape=hexagon, label=\"", i);
        ir_dot_escaped(b, n->cb.name);
        ir_printf(b, "\"];\n");
        for (int k = 0; k < n->nin; k++) ir_printf(b, "  v%d -> e%d;\n", n->in[k], i);
        return;
    }
    const hd_ir_value *v = &g->values[n->out];
    if (n->op == HD_IR_LOOP)
        ir_printf(b, "  v%d [shape=box3d, label=\"%%%d = loop x%lld\\nbody: %d nodes\\n%s\"];\n",
                  n->out, n->out, (long long)n->loop->trips, n->loop->body->nnodes,
                  hd_ir_type_str(v->dtype, v->shape, v->ndim, ty, sizeof ty));
    else
        ir_printf(b, "  v%d [label=\"%%%d = %s\\n%s\"];\n", n->out, n->out, hd_ir_node_name(n),
                  hd_ir_type_str(v->dtype, v->shape, v->ndim, ty, sizeof ty));
    for (int k = 0; k < n->nin; k++) ir_printf(b, "  v%d -> v%d;\n", n->in[k], n->out);
}

static void ir_dot_groups(ir_buf *b, const hd_ir_graph *g) {
    static const char *kinds[] = {"elementwise", "reduce", "matmul"};
    for (int gi = 0; gi < g->ngroups; gi++) {
        ir_printf(b, "  subgraph cluster_%d {\n    label=\"group %d (%s)\"; style=dashed;\n", gi,
                  gi, kinds[g->groups[gi].kind]);
        for (int i = 0; i < g->nnodes; i++)
            if (g->nodes[i].group == gi && g->nodes[i].out >= 0)
                ir_printf(b, "    v%d;\n", g->nodes[i].out);
        ir_printf(b, "  }\n");
    }
}

char *hd_ir_to_dot(const hd_ir_graph *g) {
    ir_buf b = {g->ctx, NULL, 0, 0, 0};
    ir_printf(&b, "digraph \"");
    ir_dot_escaped(&b, g->name);
    ir_printf(&b, "\" {\n  node [shape=box, fontname=\"monospace\"];\n");
    for (int i = 0; i < g->ninputs; i++)
        ir_dot_value_node(&b, g, g->inputs[i].value, "input", g->inputs[i].name);
    for (int i = 0; i < g->nconsts; i++)
        ir_dot_value_node(&b, g, g->consts[i].value, "const", NULL);
    for (int i = 0; i < g->nnodes; i++) ir_dot_node(&b, g, i);
    ir_dot_groups(&b, g);
    for (int i = 0; i < g->noutputs; i++) {
        ir_printf(&b, "  out%d [shape=doubleoctagon, label=\"", i);
        ir_dot_escaped(&b, g->outputs[i].name);
        ir_printf(&b, "\"];\n  v%d -> out%d;\n", g->outputs[i].value, i);
    }
    ir_printf(&b, "}\n");
    return ir_buf_finish(&b);
}

/* ---- hashing ---- */

/* A 64-bit multiply-xorshift over little-endian words: stable across
 * processes and fast enough for constants of a few megabytes. */
#define IR_HASH_K 0x9e3779b97f4a7c15ULL

static uint64_t ir_mix(uint64_t h, uint64_t w) {
    h ^= w * 0xbf58476d1ce4e5b9ULL;
    h = (h << 27 | h >> 37) * IR_HASH_K;
    return h ^ (h >> 31);
}

void hd_ir_hash_init(hd_ir_hasher *s) {
    s->h = 0x6a09e667f3bcc908ULL;
}

void hd_ir_hash_u64(hd_ir_hasher *s, uint64_t v) {
    s->h = ir_mix(s->h, v);
}

void hd_ir_hash_bytes(hd_ir_hasher *s, const void *p, size_t n) {
    const unsigned char *c = p;
    uint64_t h = ir_mix(s->h, n);
    for (; n >= 8; n -= 8, c += 8) {
        uint64_t w = 0;
        for (int i = 7; i >= 0; i--) w = w << 8 | c[i];
        h = ir_mix(h, w);
    }
    uint64_t w = 0;
    for (size_t i = n; i > 0; i--) w = w << 8 | c[i - 1];
    s->h = ir_mix(h, w);
}

void hd_ir_hash_str(hd_ir_hasher *s, const char *str) {
    hd_ir_hash_bytes(s, str, strlen(str));
}

uint64_t hd_ir_hash_final(const hd_ir_hasher *s) {
    return ir_mix(s->h, IR_HASH_K);
}

static void ir_hash_type(hd_ir_hasher *s, hd_dtype dt, const int64_t *shape, int ndim) {
    hd_ir_hash_u64(s, (uint64_t)dt);
    hd_ir_hash_u64(s, (uint64_t)ndim);
    for (int i = 0; i < ndim; i++) hd_ir_hash_u64(s, (uint64_t)shape[i]);
}

void hd_ir_hash_tensor(hd_ir_hasher *s, const hd_tensor *t) {
    ir_hash_type(s, t->dtype, t->shape, t->ndim);
    hd_ir_hash_u64(s, (uint64_t)t->number);
    if (!t->storage || !hd_tensor_is_cpu(t)) return;
    size_t es = (size_t)hd_dtype_size(t->dtype);
    if (hd_tensor_is_contiguous(t)) {
        hd_ir_hash_bytes(s, hd_tensor_data(t), (size_t)t->numel * es);
        return;
    }
    const char *base = t->storage->data;
    for (int64_t i = 0; i < t->numel; i++)
        hd_ir_hash_bytes(s, base + (size_t)hd_tensor_elem_offset(t, i) * es, es);
}

static void ir_hash_attrs(hd_ir_hasher *s, const hd_attrs *a) {
    /* canonical attrs have no stray bytes but padding: hash field by field */
    hd_ir_hash_u64(s, (uint64_t)a->naxes);
    for (int i = 0; i < a->naxes && i < HD_MAX_DIMS; i++) hd_ir_hash_u64(s, (uint64_t)a->axes[i]);
    hd_ir_hash_u64(s, (uint64_t)a->keepdim);
    hd_ir_hash_u64(s, (uint64_t)a->nshape);
    for (int i = 0; i < a->nshape && i < HD_MAX_DIMS; i++) hd_ir_hash_u64(s, (uint64_t)a->shape[i]);
    hd_ir_hash_bytes(s, a->scalar, sizeof a->scalar);
    for (int i = 0; i < 8; i++) hd_ir_hash_u64(s, (uint64_t)a->ints[i]);
    hd_ir_hash_u64(s, (uint64_t)a->dtype);
    for (int i = 0; i < HD_MAX_DIMS; i++) {
        hd_ir_hash_u64(s, (uint64_t)a->start[i]);
        hd_ir_hash_u64(s, (uint64_t)a->step[i]);
        hd_ir_hash_u64(s, (uint64_t)a->len[i]);
    }
    hd_ir_hash_u64(s, a->drop_mask);
}

static void ir_hash_loop(hd_ir_hasher *s, const hd_ir_loop *l) {
    hd_ir_hash_u64(s, (uint64_t)l->trips);
    hd_ir_hash_u64(s, (uint64_t)(int64_t)l->trips_in);
    hd_ir_hash_u64(s, (uint64_t)(int64_t)l->while_in);
    hd_ir_hash_u64(s, (uint64_t)l->ncarry);
    for (int i = 0; i < l->ncarry; i++) hd_ir_hash_u64(s, (uint64_t)l->carry_src[i]);
    if (l->nstack) { /* graphs without stacks hash as before */
        hd_ir_hash_u64(s, (uint64_t)l->nstack);
        for (int i = 0; i < l->nstack; i++) hd_ir_hash_u64(s, (uint64_t)l->stack_in[i]);
    }
    hd_ir_hash_u64(s, l->body ? hd_ir_graph_hash(l->body) : 0);
}

uint64_t hd_ir_graph_hash(const hd_ir_graph *g) {
    hd_ir_hasher s;
    hd_ir_hash_init(&s);
    for (int i = 0; i < g->ninputs; i++) {
        const hd_ir_value *v = &g->values[g->inputs[i].value];
        hd_ir_hash_str(&s, g->inputs[i].name);
        hd_ir_hash_u64(&s, (uint64_t)g->inputs[i].value);
        ir_hash_type(&s, v->dtype, v->shape, v->ndim);
    }
    for (int i = 0; i < g->nconsts; i++) {
        hd_ir_hash_u64(&s, (uint64_t)g->consts[i].value);
        hd_ir_hash_tensor(&s, g->consts[i].t);
    }
    for (int i = 0; i < g->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[i];
        if (n->op == HD_IR_DEAD) continue;
        hd_ir_hash_str(&s, n->op == HD_IR_CALLBACK ? n->cb.name : hd_ir_node_name(n));
        hd_ir_hash_u64(&s, (uint64_t)n->nin);
        for (int k = 0; k < n->nin; k++) hd_ir_hash_u64(&s, (uint64_t)n->in[k]);
        hd_ir_hash_u64(&s, (uint64_t)(int64_t)n->out);
        if (n->op == HD_IR_CALLBACK) continue;
        if (n->loop) ir_hash_loop(&s, n->loop);
        ir_hash_attrs(&s, &n->attrs);
        const hd_ir_value *v = &g->values[n->out];
        ir_hash_type(&s, v->dtype, v->shape, v->ndim);
    }
    for (int i = 0; i < g->noutputs; i++) {
        hd_ir_hash_str(&s, g->outputs[i].name);
        hd_ir_hash_u64(&s, (uint64_t)g->outputs[i].value);
        hd_ir_hash_u64(&s, (uint64_t)(int64_t)g->outputs[i].into);
    }
    return hd_ir_hash_final(&s);
}
