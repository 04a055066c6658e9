/* The interp compiler: runs the optimised graph node by node through the
 * backend's run_op. Everything is decided at compile time: casts are nodes
 * (hd_pass_lower), buffers come from the memory plan and are allocated
 * once, views are made once over them, constants are placed on the device
 * once. A run binds the inputs (zero-copy when they are contiguous on the
 * device), gives the outputs fresh memory and calls the kernels in order. */
#include "hd_compile.h"
#include "hd_loop.h"
#include "hd_pass.h"

#include <string.h>
#include <time.h>

typedef struct interp_step {
    int op; /* hd_op, HD_IR_CALLBACK or HD_IR_LOOP */
    int nin;
    hd_tensor *out;
    hd_tensor **in;
    const hd_attrs *attrs;
    const hd_ir_callback *cb;
    const hd_ir_node *loop; /* HD_IR_LOOP */
} interp_step;

struct hd_jit_exec {
    hd_jit_head h;
    hd_ir_memplan plan;
    hd_tensor **vals;    /* per value: its run-time tensor */
    hd_tensor **buffers; /* per planned buffer: raw bytes */
    hd_tensor **own_in;  /* per input: a buffer for inputs that cannot be bound */
    char *fresh;         /* per value: an output given new memory at each run */
    hd_tensor **results; /* per value: this run's fresh memory */
    interp_step *steps;
    hd_tensor **step_in;
    int nsteps;
    size_t steps_cap, step_in_cap; /* allocated lengths */
};

static hd_status interp_available(hd_ctx *ctx, const hd_jit_options *opt) {
    const hd_backend *be;
    int dev;
    if (hd_backend_parse_device(ctx, opt && opt->device ? opt->device : "cpu", &be, &dev))
        return ctx->status;
    return be->available(ctx, dev);
}

static void interp_free(hd_ctx *ctx, hd_jit_exec *e) {
    if (!e) return;
    int nv = e->h.g ? e->h.g->nvalues : 0, ni = e->h.g ? e->h.g->ninputs : 0;
    if (e->vals)
        for (int v = 0; v < nv; v++) hd_tensor_unref(e->vals[v]);
    if (e->buffers)
        for (int b = 0; b < e->plan.nbuffers; b++) hd_tensor_unref(e->buffers[b]);
    if (e->own_in)
        for (int i = 0; i < ni; i++) hd_tensor_unref(e->own_in[i]);
    /* every table has one spare entry, so that none is of size 0 */
    hd_ctx_free(ctx, e->vals, (size_t)(nv + 1) * sizeof *e->vals);
    hd_ctx_free(ctx, e->results, (size_t)(nv + 1) * sizeof *e->results);
    hd_ctx_free(ctx, e->fresh, (size_t)nv + 1);
    hd_ctx_free(ctx, e->buffers, (size_t)(e->plan.nbuffers + 1) * sizeof *e->buffers);
    hd_ctx_free(ctx, e->own_in, (size_t)(ni + 1) * sizeof *e->own_in);
    hd_ctx_free(ctx, e->steps, e->steps_cap * sizeof *e->steps);
    hd_ctx_free(ctx, e->step_in, e->step_in_cap * sizeof *e->step_in);
    hd_ir_graph_free(e->h.g);
    hd_ctx_free(ctx, e, sizeof *e);
}

/* A tensor with no memory of its own whose storage's data pointer a run
 * sets: graph inputs and fresh outputs. */
static hd_tensor *interp_slot(hd_jit_exec *e, const hd_ir_value *v) {
    hd_tensor *t = hd_tensor_wrap(e->h.ctx, v->dtype, v->shape, v->ndim, NULL);
    if (!t) return NULL;
    t->storage->backend = e->h.be;
    t->storage->device = e->h.device;
    return t;
}

/* A node whose value is a view made once over its input's tensor: view
 * ops and a loop's results. */
static int interp_is_view(const hd_ir_node *n) {
    return n->op == HD_IR_LOOP_OUT || (n->op >= 0 && hd_op_infos[n->op].kind == HD_KIND_VIEW);
}

/* Loop result n: body output k's type over its bytes of the loop's value. */
static hd_tensor *interp_loop_out(hd_jit_exec *e, const hd_ir_node *n) {
    const hd_tensor *x = e->vals[n->in[0]];
    const hd_ir_value *y = &e->h.g->values[n->out];
    const hd_ir_node *loop = &e->h.g->nodes[e->h.g->values[n->in[0]].index];
    int64_t strides[HD_MAX_DIMS], es = hd_dtype_size(y->dtype);
    hd_contiguous_strides(y->shape, y->ndim, strides);
    hd_tensor *t = hd_tensor_view(e->h.ctx, x, y->shape, strides, y->ndim,
                                  (x->offset + loop->loop->offset[n->attrs.ints[0]]) / es);
    if (t) t->dtype = y->dtype;
    return t;
}

/* Value v as a contiguous tensor of its type over buffer b. */
static hd_tensor *interp_in_buffer(hd_jit_exec *e, const hd_ir_value *v, hd_tensor *b) {
    int64_t strides[HD_MAX_DIMS];
    hd_contiguous_strides(v->shape, v->ndim, strides);
    hd_tensor *t = hd_tensor_view(e->h.ctx, b, v->shape, strides, v->ndim, 0);
    if (t) t->dtype = v->dtype;
    return t;
}

/* The constant as a contiguous tensor on the executable's device. */
/* Constant c, contiguous, on the code's device: a constant made on
 * another one (a device tensor created inside a function compiled for
 * the cpu) is copied there, never read where it lies. */
static hd_tensor *interp_place_const(hd_jit_exec *e, hd_tensor *c) {
    hd_ctx *ctx = e->h.ctx;
    struct hd_trace *tr = ctx->trace;
    ctx->trace = NULL;
    hd_tensor *t = hd_tensor_contiguous(ctx, c), *d = NULL;
    if (t && hd_tensor_to_device(ctx, t, e->h.be, e->h.device, &d)) d = NULL;
    ctx->trace = tr;
    hd_tensor_unref(t);
    return d;
}

/* A view node's tensor, over its input's, with the strides the view op
 * gives (reshape inputs are contiguous: hd_pass_layout). */
static hd_tensor *interp_view(hd_jit_exec *e, const hd_ir_node *n) {
    const hd_tensor *x = e->vals[n->in[0]];
    const hd_ir_value *y = &e->h.g->values[n->out];
    const hd_attrs *a = &n->attrs;
    int64_t strides[HD_MAX_DIMS], offset = x->offset;
    switch (n->op) {
    case HD_OP_PERMUTE:
        for (int i = 0; i < y->ndim; i++)
            strides[i] = x->strides[a->shape[i] < 0 ? a->shape[i] + x->ndim : a->shape[i]];
        break;
    case HD_OP_EXPAND: hd_broadcast_strides(x, y->shape, y->ndim, strides); break;
    case HD_OP_SLICE: {
        int k = 0;
        for (int i = 0; i < x->ndim; i++) {
            if (a->len[i] > 0) offset += a->start[i] * x->strides[i];
            if (!(a->drop_mask & (1u << i)))
                strides[k++] = hd_slice_stride(x->strides[i], a->step[i], a->len[i]);
        }
        break;
    }
    default: hd_contiguous_strides(y->shape, y->ndim, strides); break;
    }
    return hd_tensor_view(e->h.ctx, x, y->shape, strides, y->ndim, offset);
}

static hd_status interp_values(hd_jit_exec *e) {
    hd_ir_graph *g = e->h.g;
    for (int i = 0; i < g->ninputs; i++) {
        int v = g->inputs[i].value;
        if (!(e->vals[v] = interp_slot(e, &g->values[v]))) return e->h.ctx->status;
    }
    for (int i = 0; i < g->nconsts; i++) {
        int v = g->consts[i].value;
        if (!(e->vals[v] = interp_place_const(e, g->consts[i].t))) return e->h.ctx->status;
        e->h.stats.consts++;
        e->h.stats.const_bytes += hd_tensor_nbytes(e->vals[v]);
    }
    for (int i = 0; i < g->noutputs; i++) {
        int v = g->outputs[i].value;
        e->fresh[v] = g->values[v].kind == HD_IR_VALUE_NODE && e->plan.root[v] == v;
    }
    for (int b = 0; b < e->plan.nbuffers; b++) {
        int64_t n = (int64_t)e->plan.buffer_bytes[b];
        if (!(e->buffers[b] = hd_tensor_new_on(e->h.ctx, e->h.be, e->h.device, HD_U8, &n, 1)))
            return e->h.ctx->status;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[i];
        int v = n->out;
        if (v < 0) continue;
        hd_tensor *t;
        if (n->op == HD_IR_LOOP_OUT)
            t = interp_loop_out(e, n);
        else if (interp_is_view(n))
            t = interp_view(e, n);
        else if (e->fresh[v])
            t = interp_slot(e, &g->values[v]);
        else
            t = interp_in_buffer(e, &g->values[v], e->buffers[e->plan.buffer[v]]);
        if (!t) return e->h.ctx->status;
        e->vals[v] = t;
    }
    return HD_OK;
}

static hd_status interp_steps(hd_jit_exec *e) {
    hd_ir_graph *g = e->h.g;
    size_t nsteps = 1, nin = 1;
    for (int i = 0; i < g->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[i];
        if (interp_is_view(n)) continue;
        nsteps++;
        nin += (size_t)n->nin;
    }
    if (!(e->steps = hd_ctx_calloc(e->h.ctx, nsteps, sizeof *e->steps))) return e->h.ctx->status;
    e->steps_cap = nsteps;
    if (!(e->step_in = hd_ctx_calloc(e->h.ctx, nin, sizeof *e->step_in))) return e->h.ctx->status;
    e->step_in_cap = nin;
    int s = 0, k0 = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[i];
        if (interp_is_view(n)) continue;
        interp_step *st = &e->steps[s++];
        st->op = n->op;
        st->nin = n->nin;
        st->in = e->step_in + k0;
        for (int k = 0; k < n->nin; k++) st->in[k] = e->vals[n->in[k]];
        k0 += n->nin;
        st->attrs = &n->attrs;
        if (n->op == HD_IR_CALLBACK) {
            st->cb = &n->cb;
            continue;
        }
        st->out = e->vals[n->out];
        if (n->op == HD_IR_LOOP) {
            st->loop = n;
            e->h.stats.kernels++;
            continue;
        }
        hd_dtype dt = n->nin ? st->in[0]->dtype : st->out->dtype;
        if (!e->h.be->supports_op((hd_op)n->op, dt))
            return hd_error(e->h.ctx, HD_ERR_RUNTIME, "%s is not supported for %s tensors on %s",
                            hd_op_name((hd_op)n->op), hd_dtype_name(dt), e->h.be->name);
        e->h.stats.kernels++;
    }
    e->nsteps = s;
    return HD_OK;
}

static hd_status interp_plan(hd_jit_exec *e, const hd_jit_options *opt) {
    hd_pass_memplan_options mo = {opt->no_reuse, opt->no_inplace};
    return hd_pass_memplan(e->h.g, &mo, &e->plan);
}

static hd_status interp_codegen(hd_jit_exec *e, const hd_jit_options *opt) {
    HD_UNUSED(opt);
    hd_ctx *ctx = e->h.ctx;
    hd_ir_graph *g = e->h.g;
    size_t nv = (size_t)g->nvalues;
    e->vals = hd_ctx_calloc(ctx, nv + 1, sizeof *e->vals);
    e->results = hd_ctx_calloc(ctx, nv + 1, sizeof *e->results);
    e->fresh = hd_ctx_calloc(ctx, nv + 1, 1);
    e->buffers = hd_ctx_calloc(ctx, (size_t)e->plan.nbuffers + 1, sizeof *e->buffers);
    e->own_in = hd_ctx_calloc(ctx, (size_t)g->ninputs + 1, sizeof *e->own_in);
    if (!e->vals || !e->results || !e->fresh || !e->buffers || !e->own_in) return ctx->status;
    e->h.stats.planned_bytes = e->plan.planned_bytes;
    e->h.stats.naive_bytes = e->plan.naive_bytes;
    e->h.stats.inplace = e->plan.ninplace;
    return interp_values(e) || interp_steps(e) ? ctx->status : HD_OK;
}

static const hd_jit_build interp_build = {&hd_jit_interp, sizeof(hd_jit_exec), interp_plan,
                                          interp_codegen};

static hd_status interp_compile(hd_ctx *ctx, const hd_ir_graph *g, const hd_jit_options *opt,
                                hd_jit_exec **out) {
    return hd_jit_compile(ctx, &interp_build, g, opt, out);
}

/* Point input slot i at the caller's tensor, or copy it into the
 * executable's own buffer when it is strided or elsewhere. */
static hd_status interp_bind_input(hd_jit_exec *e, hd_ctx *ctx, void *ud, int i, hd_tensor *t) {
    HD_UNUSED(ud);
    hd_tensor *slot = e->vals[e->h.g->inputs[i].value];
    const hd_storage *s = t->storage;
    int here = s->backend == e->h.be && s->device == e->h.device;
    if (here && hd_tensor_is_contiguous(t)) {
        slot->storage->data = hd_tensor_data(t);
        return HD_OK;
    }
    if (!here && !hd_tensor_follows_device(t))
        return hd_error(ctx, HD_ERR_RUNTIME, "input '%s' is on %s:%d, the code runs on %s:%d",
                        e->h.g->inputs[i].name, s->backend->name, s->device, e->h.be->name,
                        e->h.device);
    if (!e->own_in[i] &&
        !(e->own_in[i] = hd_tensor_new_on(ctx, e->h.be, e->h.device, t->dtype, t->shape, t->ndim)))
        return ctx->status;
    /* a number from another device: brought here first (the code's copy
     * kernel reads only its own device's memory) */
    hd_tensor *moved = NULL;
    if (!here && hd_tensor_to_device(ctx, t, e->h.be, e->h.device, &moved)) return ctx->status;
    hd_tensor *src = moved ? moved : t;
    static const hd_attrs none;
    hd_status st =
        t->numel ? e->h.be->run_op(ctx, HD_OP_COPY, e->own_in[i], &src, 1, &none) : HD_OK;
    hd_tensor_unref(moved);
    if (st) return st;
    slot->storage->data = e->own_in[i]->storage->data;
    return HD_OK;
}

static hd_status interp_bind_outputs(hd_jit_exec *e) {
    hd_ir_graph *g = e->h.g;
    for (int i = 0; i < g->noutputs; i++) {
        int v = g->outputs[i].value;
        if (!e->fresh[v] || e->results[v]) continue;
        const hd_ir_value *val = &g->values[v];
        e->results[v] =
            hd_tensor_new_on(e->h.ctx, e->h.be, e->h.device, val->dtype, val->shape, val->ndim);
        if (!e->results[v]) return e->h.ctx->status;
        e->vals[v]->storage->data = e->results[v]->storage->data;
    }
    return HD_OK;
}

static hd_status interp_exec_steps(hd_jit_exec *e) {
    hd_ctx *ctx = e->h.ctx;
    for (int s = 0; s < e->nsteps; s++) {
        const interp_step *st = &e->steps[s];
        hd_status r;
        if (st->op == HD_IR_CALLBACK)
            r = st->cb->fn(ctx, st->cb->ud, st->in, st->nin);
        else if (st->op == HD_IR_LOOP)
            r = hd_jit_loop_run(ctx, st->loop, st->in, st->nin, st->out);
        else if (st->out->numel == 0)
            r = HD_OK;
        else
            r = e->h.be->run_op(ctx, (hd_op)st->op, st->out, st->in, st->nin, st->attrs);
        if (r) return r;
    }
    return HD_OK;
}

/* Output i for the caller: this run's fresh memory, or a copy of a value
 * the executable keeps (an input, a constant, a view). */
static hd_status interp_output(hd_jit_exec *e, hd_ctx *ctx, void *ud, int i, hd_tensor **out) {
    HD_UNUSED(ctx);
    HD_UNUSED(ud);
    int v = e->h.g->outputs[i].value;
    if (e->fresh[v]) {
        *out = hd_tensor_ref(e->results[v]);
        return HD_OK;
    }
    hd_tensor *src = e->vals[v];
    hd_tensor *t =
        hd_tensor_new_on(e->h.ctx, e->h.be, e->h.device, src->dtype, src->shape, src->ndim);
    if (!t) return e->h.ctx->status;
    static const hd_attrs none;
    if (t->numel && e->h.be->run_op(e->h.ctx, HD_OP_COPY, t, &src, 1, &none)) {
        hd_tensor_unref(t);
        return e->h.ctx->status;
    }
    *out = t;
    return HD_OK;
}

static void interp_unbind(hd_jit_exec *e) {
    hd_ir_graph *g = e->h.g;
    for (int i = 0; i < g->ninputs; i++) e->vals[g->inputs[i].value]->storage->data = NULL;
    for (int i = 0; i < g->noutputs; i++) {
        int v = g->outputs[i].value;
        if (!e->fresh[v]) continue;
        e->vals[v]->storage->data = NULL;
        hd_tensor_unref(e->results[v]);
        e->results[v] = NULL;
    }
}

static hd_status interp_exec(hd_jit_exec *e, hd_ctx *ctx, void *ud) {
    HD_UNUSED(ctx);
    HD_UNUSED(ud);
    return interp_bind_outputs(e) || interp_exec_steps(e) ? e->h.ctx->status : HD_OK;
}

static hd_status interp_run(hd_ctx *ctx, hd_jit_exec *e, hd_tensor *const *inputs, int ninputs,
                            hd_tensor **outputs, int noutputs) {
    static const hd_jit_run_ops ops = {interp_bind_input, interp_exec, interp_output,
                                       interp_unbind};
    return hd_jit_run(ctx, &ops, e, NULL, e->h.g, &e->h.stats, inputs, ninputs, outputs, noutputs);
}

const hd_jit_compiler hd_jit_interp = {
    /* .name = */ "interp",
    /* .available = */ interp_available,
    /* .compile = */ interp_compile,
    /* .run = */ interp_run,
    /* .free = */ interp_free,
    /* .stats = */ hd_jit_head_stats,
    /* .graph = */ hd_jit_head_graph,
};
