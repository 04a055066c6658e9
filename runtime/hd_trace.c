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

static int trace_capture(hd_ctx *ctx, hd_trace *tr, hd_tensor *t) {
    if (tr->cap) {
        size_t s = trace_slot(tr, t);
        while (tr->keys[s]) {
            if (tr->keys[s] == t) return tr->vals[s];
            s = (s + 1) & (size_t)(tr->cap - 1);
        }
    }
    if ((tr->nkeys + 1) * 2 > tr->cap && trace_rehash(ctx, tr)) return -1;
    int v = hd_ir_add_const(tr->g, t);
    if (v < 0) return -1;
    size_t s = trace_slot(tr, t);
    while (tr->keys[s]) s = (s + 1) & (size_t)(tr->cap - 1);
    tr->keys[s] = t;
    tr->vals[s] = v;
    tr->nkeys++;
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

hd_status hd_trace_record(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,
                          const hd_attrs *attrs, const hd_op_plan *plan, hd_tensor **out) {
    hd_trace *tr = ctx->trace;
    HD_UNUSED(plan);
    *out = NULL;
    if (op == HD_OP_ASSIGN)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "in-place assignment (x[i] = v) is not supported inside compiled code: "
                        "build the new tensor with where(...) or concat(...)");
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
    if (t->storage) return HD_OK;
    if (!what) what = "this";
    int cond = strcmp(what, "if") == 0 || strcmp(what, "while") == 0 ||
               strcmp(what, "condition") == 0 || strcmp(what, "and") == 0 ||
               strcmp(what, "or") == 0 || strcmp(what, "not") == 0;
    if (cond)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "branch on tensor data inside compiled code: use where(...) (%s reads "
                        "the values of a traced tensor)",
                        what);
    return hd_error(ctx, HD_ERR_RUNTIME,
                    "%s needs tensor data, which compiled code knows only when it runs: branch "
                    "on tensor data inside compiled code: use where(...)",
                    what);
}
