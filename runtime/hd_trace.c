/* Tracing: hd_op_run's hook records nodes on symbolic tensors. */
#include "hd_trace.h"

#include <string.h>

struct hd_trace {
    hd_ir_graph *g;
    uint32_t serial;
    /* captured tensors -> constant value ids: open addressing on the pointer
     * (the graph holds a reference, so an address is never reused) */
    hd_tensor **keys;
    int *vals;
    int nkeys, cap;
    /* optional: which captured tensors become inputs instead of constants */
    hd_trace_lift_fn lift;
    void *lift_ud;
    /* optional: told when autograd reads a leaf's .grad */
    hd_trace_grad_read_fn grad_read;
    /* tensors with data written whole in place inside the trace (held) */
    hd_tensor **writes;
    int nwrites, cap_writes;
};

static uint64_t trace_ref_of(const hd_trace *tr, int v) {
    return (uint64_t)tr->serial << 32 | (uint64_t)(uint32_t)(v + 1);
}

hd_status hd_trace_begin(hd_ctx *ctx, const char *name) {
    if (ctx->trace)
        return hd_error(ctx, HD_ERR_RUNTIME, "a trace is already active (compiled code nests)");
    hd_trace *tr = hd_ctx_alloc(ctx, sizeof *tr);
    if (!tr) return ctx->status;
    memset(tr, 0, sizeof *tr);
    tr->g = hd_ir_graph_new(ctx, name);
    if (!tr->g) {
        hd_ctx_free(ctx, tr, sizeof *tr);
        return ctx->status;
    }
    tr->serial = ++ctx->trace_serial;
    if (tr->serial == 0) tr->serial = ++ctx->trace_serial;
    ctx->trace = tr;
    return HD_OK;
}

static void trace_free(hd_ctx *ctx, hd_trace *tr) {
    for (int i = 0; i < tr->nwrites; i++) hd_tensor_unref(tr->writes[i]);
    if (tr->cap_writes) hd_ctx_free(ctx, tr->writes, (size_t)tr->cap_writes * sizeof *tr->writes);
    if (tr->cap) {
        hd_ctx_free(ctx, tr->keys, (size_t)tr->cap * sizeof *tr->keys);
        hd_ctx_free(ctx, tr->vals, (size_t)tr->cap * sizeof *tr->vals);
    }
    hd_ctx_free(ctx, tr, sizeof *tr);
}

void hd_trace_abort(hd_ctx *ctx) {
    hd_trace *tr = ctx->trace;
    if (!tr) return;
    ctx->trace = NULL;
    hd_ir_graph_free(tr->g);
    trace_free(ctx, tr);
}

hd_status hd_trace_end(hd_ctx *ctx, hd_ir_graph **out) {
    hd_trace *tr = ctx->trace;
    *out = NULL;
    if (!tr) return hd_error(ctx, HD_ERR_RUNTIME, "no trace is active");
    ctx->trace = NULL;
    hd_ir_graph *g = tr->g;
    trace_free(ctx, tr);
    /* canonical numbering (inputs, constants, nodes): equal programs give
     * equal graphs, hashes and files */
    if (hd_ir_compact(g) || hd_ir_verify(g)) {
        hd_ir_graph_free(g);
        return ctx->status;
    }
    *out = g;
    return HD_OK;
}

static size_t trace_slot(const hd_trace *tr, const hd_tensor *t) {
    uintptr_t p = (uintptr_t)t;
    uint64_t h = (uint64_t)p * 0x9e3779b97f4a7c15ULL;
    return (size_t)(h >> 20) & (size_t)(tr->cap - 1);
}

static hd_status trace_rehash(hd_ctx *ctx, hd_trace *tr) {
    int ncap = tr->cap ? tr->cap * 2 : 64;
    hd_tensor **keys = hd_ctx_calloc(ctx, (size_t)ncap, sizeof *keys);
    int *vals = keys ? hd_ctx_calloc(ctx, (size_t)ncap, sizeof *vals) : NULL;
    if (!vals) {
        hd_ctx_free(ctx, keys, (size_t)ncap * sizeof *keys);
        return ctx->status;
    }
    hd_trace old = *tr;
    tr->keys = keys;
    tr->vals = vals;
    tr->cap = ncap;
    for (int i = 0; i < old.cap; i++) {
        if (!old.keys[i]) continue;
        size_t s = trace_slot(tr, old.keys[i]);
        while (tr->keys[s]) s = (s + 1) & (size_t)(ncap - 1);
        tr->keys[s] = old.keys[i];
        tr->vals[s] = old.vals[i];
    }
    if (old.cap) {
        hd_ctx_free(ctx, old.keys, (size_t)old.cap * sizeof *old.keys);
        hd_ctx_free(ctx, old.vals, (size_t)old.cap * sizeof *old.vals);
    }
    return HD_OK;
}

/* The map slot holding t, or -1. */
static long trace_find(const hd_trace *tr, const hd_tensor *t) {
    if (!tr->cap) return -1;
    size_t s = trace_slot(tr, t);
    while (tr->keys[s]) {
        if (tr->keys[s] == t) return (long)s;
        s = (s + 1) & (size_t)(tr->cap - 1);
    }
    return -1;
}

/* Map t to value v (t is not in the map yet). */
static hd_status trace_map(hd_ctx *ctx, hd_trace *tr, hd_tensor *t, int v) {
    if ((tr->nkeys + 1) * 2 > tr->cap && trace_rehash(ctx, tr)) return ctx->status;
    size_t s = trace_slot(tr, t);
    while (tr->keys[s]) s = (s + 1) & (size_t)(tr->cap - 1);
    tr->keys[s] = t;
    tr->vals[s] = v;
    tr->nkeys++;
    return HD_OK;
}

/* A new value for a tensor with data: an input when the lift hook says so
 * (the tensor is read again at every run), else a constant. */
static int trace_new_capture(hd_ctx *ctx, hd_trace *tr, hd_tensor *t) {
    char name[256];
    int lift = 0;
    if (tr->lift && !t->number) {
        name[0] = 0;
        lift = tr->lift(ctx, tr->lift_ud, t, name, sizeof name);
        if (lift < 0) return -1;
    }
    if (!lift) return hd_ir_add_const(tr->g, t);
    /* keep t alive and its address unique while the trace maps it */
    int c = hd_ir_add_const(tr->g, t);
    if (c < 0) return -1;
    return hd_ir_add_input(tr->g, name, t->dtype, t->shape, t->ndim);
}

/* The value of a tensor already mapped that t aliases whole, or -1. Such a
 * tensor must read what the trace made of it (an input, or the value a
 * whole in-place write left), not its data at trace time. */
static int trace_alias(const hd_trace *tr, const hd_tensor *t) {
    for (int i = 0; i < tr->cap; i++)
        if (tr->keys[i] && tr->keys[i] != t && hd_tensor_same_elements(tr->keys[i], t))
            return tr->vals[i];
    return -1;
}

static int trace_capture(hd_ctx *ctx, hd_trace *tr, hd_tensor *t) {
    long s = trace_find(tr, t);
    if (s >= 0) return tr->vals[s];
    int v = t->number ? -1 : trace_alias(tr, t);
    if (v >= 0) return trace_map(ctx, tr, t, v) || hd_ir_add_const(tr->g, t) < 0 ? -1 : v;
    v = trace_new_capture(ctx, tr, t);
    if (v < 0 || trace_map(ctx, tr, t, v)) return -1;
    return v;
}

int hd_trace_value(hd_ctx *ctx, hd_tensor *t) {
    hd_trace *tr = ctx->trace;
    if (!tr) {
        hd_error(ctx, HD_ERR_RUNTIME, "no trace is active");
        return -1;
    }
    if (t->storage) return trace_capture(ctx, tr, t);
    uint32_t serial = (uint32_t)(t->trace_ref >> 32);
    int64_t v = (int64_t)(t->trace_ref & 0xffffffffu) - 1;
    if (serial != tr->serial || v < 0 || v >= tr->g->nvalues) {
        hd_error(ctx, HD_ERR_RUNTIME,
                 "a tensor from other compiled code is used here: values made while tracing "
                 "cannot leave it except as outputs");
        return -1;
    }
    return (int)v;
}

/* The node that made value v, or NULL (an input or a constant). */
static const hd_ir_node *trace_producer(const hd_ir_graph *g, int64_t v) {
    const hd_ir_value *val = &g->values[v];
    return val->kind == HD_IR_VALUE_NODE ? &g->nodes[val->index] : NULL;
}

int hd_trace_is_transpose(const hd_ctx *ctx, const hd_tensor *t) {
    const hd_trace *tr = ctx->trace;
    if (!tr || t->storage || t->ndim != 2 || t->shape[0] < 2 || t->shape[1] < 2) return 0;
    int64_t v = (int64_t)(t->trace_ref & 0xffffffffu) - 1;
    if ((uint32_t)(t->trace_ref >> 32) != tr->serial || v < 0 || v >= tr->g->nvalues) return 0;
    const hd_ir_node *n = trace_producer(tr->g, v);
    if (!n || n->op != HD_OP_PERMUTE || n->nin != 1 || n->attrs.nshape != 2) return 0;
    int64_t first = n->attrs.shape[0] < 0 ? n->attrs.shape[0] + 2 : n->attrs.shape[0];
    const hd_ir_node *src = trace_producer(tr->g, n->in[0]);
    return first == 1 && !(src && src->op >= 0 && hd_op_infos[src->op].kind == HD_KIND_VIEW);
}

static hd_tensor *trace_symbolic(hd_ctx *ctx, hd_trace *tr, int v) {
    const hd_ir_value *val = &tr->g->values[v];
    hd_tensor *t = hd_tensor_symbolic(ctx, val->dtype, val->shape, val->ndim);
    if (t) t->trace_ref = trace_ref_of(tr, v);
    return t;
}

hd_tensor *hd_trace_input(hd_ctx *ctx, const char *name, hd_dtype dt, const int64_t *shape,
                          int ndim) {
    hd_trace *tr = ctx->trace;
    if (!tr) {
        hd_error(ctx, HD_ERR_RUNTIME, "input(): no trace is active");
        return NULL;
    }
    int v = hd_ir_add_input(tr->g, name, dt, shape, ndim);
    return v < 0 ? NULL : trace_symbolic(ctx, tr, v);
}

hd_status hd_trace_output(hd_ctx *ctx, const char *name, hd_tensor *t) {
    if (!ctx->trace) return hd_error(ctx, HD_ERR_RUNTIME, "output(): no trace is active");
    int v = hd_trace_value(ctx, t);
    if (v < 0) return ctx->status;
    return hd_ir_add_output(ctx->trace->g, name, v);
}

/* Value ids of tensors (capturing the ones with data); ids must hold n. */
static hd_status trace_values(hd_ctx *ctx, hd_tensor *const *ts, int n, int *ids) {
    for (int i = 0; i < n; i++) {
        if (!ts[i]) return hd_error(ctx, HD_ERR_ARGUMENT, "input %d is missing", i);
        ids[i] = hd_trace_value(ctx, ts[i]);
        if (ids[i] < 0) return ctx->status;
    }
    return HD_OK;
}

hd_status hd_trace_callback(hd_ctx *ctx, const hd_ir_callback *cb, hd_tensor *const *args,
                            int nargs) {
    if (!ctx->trace) return hd_error(ctx, HD_ERR_RUNTIME, "no trace is active");
    if (nargs < 0) return hd_error(ctx, HD_ERR_ARGUMENT, "callback: negative argument count");
    int *ids = hd_ctx_alloc(ctx, (size_t)(nargs + 1) * sizeof *ids);
    if (!ids) return ctx->status;
    hd_status st = trace_values(ctx, args, nargs, ids);
    if (!st) st = hd_ir_add_callback(ctx->trace->g, cb, ids, nargs);
    hd_ctx_free(ctx, ids, (size_t)(nargs + 1) * sizeof *ids);
    return st;
}

/* ---- in-place writes of whole tensors ---- */

static hd_status partial_write(hd_ctx *ctx) {
    return hd_error(ctx, HD_ERR_RUNTIME,
                    "in-place assignment (x[i] = v) is not supported inside compiled code: "
                    "build the new tensor with where(...) or concat(...)");
}

/* Is node n a slice that keeps every element of its input in place? */
static int identity_slice(const hd_ir_graph *g, const hd_ir_node *n) {
    if (n->op != HD_OP_SLICE || n->attrs.drop_mask) return 0;
    const hd_ir_value *x = &g->values[n->in[0]], *y = &g->values[n->out];
    if (x->ndim != y->ndim) return 0;
    for (int i = 0; i < x->ndim; i++)
        if (n->attrs.len[i] != x->shape[i] || n->attrs.step[i] != 1 ||
            (x->shape[i] > 0 && n->attrs.start[i] != 0))
            return 0;
    return 1;
}

/* The tensor with data whose whole value dst stands for: dst itself, or
 * the tensor a whole-covering slice (x[...], x[:]) of the trace viewed.
 * NULL when dst is part of a tensor or a value computed in the trace. */
static hd_tensor *write_target(hd_trace *tr, hd_tensor *dst) {
    if (dst->storage) return dst;
    uint32_t serial = (uint32_t)(dst->trace_ref >> 32);
    int64_t v = (int64_t)(dst->trace_ref & 0xffffffffu) - 1;
    if (serial != tr->serial || v < 0 || v >= tr->g->nvalues) return NULL;
    const hd_ir_value *val = &tr->g->values[v];
    if (val->kind != HD_IR_VALUE_NODE) return NULL;
    const hd_ir_node *n = &tr->g->nodes[val->index];
    if (!identity_slice(tr->g, n)) return NULL;
    for (int i = 0; i < tr->cap; i++)
        if (tr->keys[i] && tr->vals[i] == n->in[0]) return tr->keys[i];
    return NULL;
}

/* src as a value of t's dtype and shape (cast, then broadcast). */
static int write_value(hd_ctx *ctx, hd_trace *tr, const hd_tensor *t, hd_tensor *src) {
    int v = hd_trace_value(ctx, src);
    if (v < 0) return -1;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    if (tr->g->values[v].dtype != t->dtype) {
        at.dtype = t->dtype;
        if ((v = hd_ir_add_node(tr->g, HD_OP_CAST, &v, 1, &at)) < 0) return -1;
    }
    const hd_ir_value *val = &tr->g->values[v];
    if (val->ndim != t->ndim || memcmp(val->shape, t->shape, (size_t)t->ndim * sizeof *t->shape)) {
        memset(&at, 0, sizeof at);
        at.nshape = t->ndim;
        memcpy(at.shape, t->shape, sizeof at.shape);
        v = hd_ir_add_node(tr->g, HD_OP_EXPAND, &v, 1, &at);
    }
    return v;
}

static hd_status note_write(hd_ctx *ctx, hd_trace *tr, hd_tensor *t) {
    for (int i = 0; i < tr->nwrites; i++)
        if (tr->writes[i] == t) return HD_OK;
    if (tr->nwrites == tr->cap_writes) {
        int cap = tr->cap_writes ? tr->cap_writes * 2 : 8;
        hd_tensor **w = hd_ctx_realloc(ctx, tr->writes, (size_t)tr->cap_writes * sizeof *w,
                                       (size_t)cap * sizeof *w);
        if (!w) return ctx->status;
        tr->writes = w;
        tr->cap_writes = cap;
    }
    tr->writes[tr->nwrites++] = hd_tensor_ref(t);
    return HD_OK;
}

/* x[...] = v on a tensor with data: the trace goes on with the new value
 * (later reads of x see it), and the tensor joins the write list, which
 * the caller turns into outputs copied back into x after each run. */
static hd_status trace_assign(hd_ctx *ctx, hd_trace *tr, hd_tensor *const *in, int nin,
                              hd_tensor **out) {
    hd_tensor *t = nin == 2 ? write_target(tr, in[0]) : NULL;
    if (!t) return partial_write(ctx);
    int v = write_value(ctx, tr, t, in[1]);
    if (v < 0) return ctx->status;
    long s = trace_find(tr, t);
    if (s < 0 && (trace_map(ctx, tr, t, v) || hd_ir_add_const(tr->g, t) < 0)) return ctx->status;
    /* t and every tensor over its elements (x.detach(), saved views) now
     * stand for the new value */
    for (int i = 0; i < tr->cap; i++)
        if (tr->keys[i] && (tr->keys[i] == t || hd_tensor_same_elements(tr->keys[i], t)))
            tr->vals[i] = v;
    if (note_write(ctx, tr, t)) return ctx->status;
    *out = hd_tensor_ref(in[0]);
    return HD_OK;
}

hd_status hd_trace_record(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,
                          const hd_attrs *attrs, const hd_op_plan *plan, hd_tensor **out) {
    hd_trace *tr = ctx->trace;
    HD_UNUSED(plan);
    *out = NULL;
    if (op == HD_OP_ASSIGN) return trace_assign(ctx, tr, in, nin, out);
    enum { STACK_IN = 16 };
    int buf[STACK_IN];
    int *ids = nin <= STACK_IN ? buf : hd_ctx_alloc(ctx, (size_t)nin * sizeof *ids);
    if (!ids) return ctx->status;
    hd_status st = trace_values(ctx, in, nin, ids);
    int v = -1;
    if (!st) {
        v = hd_ir_add_node(tr->g, op, ids, nin, attrs);
        if (v < 0) st = ctx->status;
    }
    if (ids != buf) hd_ctx_free(ctx, ids, (size_t)nin * sizeof *ids);
    if (st) return st;
    *out = trace_symbolic(ctx, tr, v);
    return *out ? HD_OK : ctx->status;
}

hd_status hd_trace_check_data(hd_ctx *ctx, const hd_tensor *t, const char *what) {
    if (t->storage && !hd_trace_stands_for_input(ctx, t)) return HD_OK;
    if (!what) what = "this";
    int cond = strcmp(what, "if") == 0 || strcmp(what, "while") == 0 ||
               strcmp(what, "condition") == 0 || strcmp(what, "and") == 0 ||
               strcmp(what, "or") == 0 || strcmp(what, "not") == 0;
    if (cond)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "branch on tensor data inside compiled code: use where(...) (%s reads "
                        "the values of a traced tensor)",
                        what);
    static const struct {
        const char *what, *fix;
    } fixes[] = {
        {"indexing with a bool mask", " (the result has one element per true value): keep the "
                                      "shape with where(mask, x, 0.0), or index after the call "
                                      "returns"},
        {"the text of a tensor", ": str(), repr(), format() and f-strings make text once, "
                                 "when the code is traced; print the tensor as an argument of "
                                 "its own (print(\"y =\", y)), which prints at every run, or "
                                 "make the text after the call returns"},
        {"writing through an index tensor", ": build the new tensor with a one-hot mask "
                                            "(where(one_hot(i, n) > 0, v, x) for a vector x of "
                                            "n), or pass the index in as an int"},
    };
    const char *fix = ": keep the value a tensor inside compiled code (its ops are traced: "
                      "x.sum() * 2, not x.sum().item() * 2) and read it after the call returns";
    for (size_t i = 0; i < sizeof fixes / sizeof *fixes; i++)
        if (strcmp(what, fixes[i].what) == 0) fix = fixes[i].fix;
    return hd_error(ctx, HD_ERR_RUNTIME,
                    "%s needs tensor data, which compiled code knows only when it runs%s", what,
                    fix);
}

void hd_trace_set_lift(hd_ctx *ctx, hd_trace_lift_fn fn, void *ud) {
    if (!ctx->trace) return;
    ctx->trace->lift = fn;
    ctx->trace->lift_ud = ud;
}

void hd_trace_set_grad_read(hd_ctx *ctx, hd_trace_grad_read_fn fn) {
    if (ctx->trace) ctx->trace->grad_read = fn;
}

void hd_trace_note_grad(hd_ctx *ctx, const hd_tensor *t) {
    hd_trace *tr = ctx->trace;
    if (tr && tr->grad_read) tr->grad_read(ctx, tr->lift_ud, t);
}

uint32_t hd_trace_serial(const hd_ctx *ctx) {
    return ctx->trace ? ctx->trace->serial : 0;
}

hd_trace *hd_trace_suspend(hd_ctx *ctx) {
    hd_trace *tr = ctx->trace;
    ctx->trace = NULL;
    return tr;
}

void hd_trace_resume(hd_ctx *ctx, hd_trace *tr) {
    hd_trace_abort(ctx); /* one left open by an error */
    ctx->trace = tr;
    /* the last trace begun is this one again (the language tells its
     * tensors by ctx->trace_serial); the other's tensors are gone */
    if (tr) ctx->trace_serial = tr->serial;
}

hd_trace_pos hd_trace_position(const hd_ctx *ctx) {
    hd_trace_pos p = {0, 0, ctx->grad_watch};
    if (ctx->trace) {
        p.nodes = ctx->trace->g->nnodes;
        p.values = ctx->trace->g->nvalues;
    }
    return p;
}

hd_tensor *hd_trace_symbolic_of(hd_ctx *ctx, int v) {
    hd_trace *tr = ctx->trace;
    if (!tr || v < 0 || v >= tr->g->nvalues) {
        hd_error(ctx, HD_ERR_RUNTIME, "no trace is active");
        return NULL;
    }
    return trace_symbolic(ctx, tr, v);
}

hd_ir_graph *hd_trace_graph(const hd_ctx *ctx) {
    return ctx->trace ? ctx->trace->g : NULL;
}

int hd_trace_nwrites(const hd_ctx *ctx) {
    return ctx->trace ? ctx->trace->nwrites : 0;
}

hd_tensor *hd_trace_write_target(const hd_ctx *ctx, int i) {
    const hd_trace *tr = ctx->trace;
    return tr && i >= 0 && i < tr->nwrites ? tr->writes[i] : NULL;
}

int hd_trace_stands_for_input(const hd_ctx *ctx, const hd_tensor *t) {
    const hd_trace *tr = ctx->trace;
    if (!tr) return 0;
    if (!t->storage) return 1;
    for (int i = 0; i < tr->nwrites; i++)
        if (tr->writes[i] == t) return 1;
    long s = trace_find(tr, t);
    return s >= 0 && tr->g->values[tr->vals[s]].kind != HD_IR_VALUE_CONST;
}
