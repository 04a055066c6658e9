/* Loop nodes at run time: a loop's body is compiled once, by the same
 * compiler as the graph around it, and called trips times (or while its
 * condition holds); carried
 * outputs become the next call's inputs, and the last call's outputs are
 * copied into the loop's packed value. */
#include "hd_loop.h"

#include <string.h>

/* A compiled body and the tables one run of the loop uses. */
typedef struct loop_exec {
    const hd_jit_compiler *c;
    hd_jit_exec *e;
    int nin, nout, ncarry;
    hd_tensor **args;  /* nin: this iteration's inputs (borrowed) */
    hd_tensor **outs;  /* nout: this iteration's outputs (owned) */
    hd_tensor **carry; /* ncarry: carried values from the last iteration (owned) */
} loop_exec;

static size_t loop_table_bytes(const loop_exec *x) {
    return (size_t)(x->nin + x->nout + x->ncarry + 1) * sizeof(hd_tensor *);
}

static void loop_exec_free(hd_ctx *ctx, void *p) {
    loop_exec *x = p;
    if (!x) return;
    if (x->e) x->c->free(ctx, x->e);
    if (x->args) hd_ctx_free(ctx, x->args, loop_table_bytes(x));
    hd_ctx_free(ctx, x, sizeof *x);
}

hd_status hd_jit_loop_compile(hd_ctx *ctx, const hd_jit_compiler *c, hd_ir_node *n,
                              const hd_jit_options *opt) {
    hd_ir_loop *l = n->loop;
    if (l->exec) return HD_OK;
    loop_exec *x = hd_ctx_calloc(ctx, 1, sizeof *x);
    if (!x) return ctx->status;
    x->c = c;
    x->nin = n->nin;
    x->nout = l->body->noutputs;
    x->ncarry = l->ncarry;
    x->args = hd_ctx_calloc(ctx, 1, loop_table_bytes(x));
    if (!x->args || c->compile(ctx, l->body, opt, &x->e)) {
        loop_exec_free(ctx, x);
        return ctx->status;
    }
    x->outs = x->args + x->nin;
    x->carry = x->outs + x->nout;
    l->exec = x;
    l->exec_free = loop_exec_free;
    return HD_OK;
}

hd_status hd_jit_loops_compile(hd_ctx *ctx, const hd_jit_compiler *c, hd_ir_graph *g,
                               const hd_jit_options *opt) {
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op == HD_IR_LOOP && hd_jit_loop_compile(ctx, c, &g->nodes[i], opt))
            return ctx->status;
    return HD_OK;
}

/* src into the loop's value out at byte offset `at` (from out's start). */
static hd_status loop_copy_at(hd_ctx *ctx, hd_tensor *out, hd_tensor *src, int64_t at, int k) {
    static const hd_attrs none;
    if (!src->numel) return HD_OK;
    int es = hd_dtype_size(src->dtype);
    int64_t strides[HD_MAX_DIMS];
    at += out->offset;
    if (at % es) return hd_error(ctx, HD_ERR_RUNTIME, "loop: result %d is not aligned", k);
    hd_contiguous_strides(src->shape, src->ndim, strides);
    hd_tensor *dst = hd_tensor_view(ctx, out, src->shape, strides, src->ndim, at / es);
    if (!dst) return ctx->status;
    dst->dtype = src->dtype;
    hd_status st = out->storage->backend->run_op(ctx, HD_OP_COPY, dst, &src, 1, &none);
    out->storage->version++; /* written in place */
    hd_tensor_unref(dst);
    return st;
}

/* The last iteration's outputs (outs) into out, each at its offset. */
static hd_status loop_pack(hd_ctx *ctx, const hd_ir_loop *l, const loop_exec *x,
                           hd_tensor *const *outs, hd_tensor *out) {
    for (int k = 0; k < x->nout; k++) {
        hd_status st = loop_copy_at(ctx, out, outs[k], l->offset[k], k);
        if (st) return st;
    }
    return HD_OK;
}

/* Iteration t's carried inputs into slot t of their stacks. */
static hd_status loop_stack(hd_ctx *ctx, const hd_ir_loop *l, const loop_exec *x, int64_t t,
                            hd_tensor *out) {
    for (int s = 0; s < l->nstack; s++) {
        hd_tensor *src = x->args[l->stack_in[s]];
        int k = x->nout + s;
        int64_t slot = (int64_t)src->numel * hd_dtype_size(src->dtype);
        hd_status st = loop_copy_at(ctx, out, src, l->offset[k] + t * slot, k);
        if (st) return st;
    }
    return HD_OK;
}

/* After an iteration that is not the last: carried inputs take their
 * sources, the other outputs go. */
static void loop_advance(const hd_ir_loop *l, loop_exec *x) {
    for (int i = 0; i < x->ncarry; i++) {
        hd_tensor *t = hd_tensor_ref(x->outs[l->carry_src[i]]);
        hd_tensor_unref(x->carry[i]);
        x->carry[i] = x->args[i] = t;
    }
    for (int k = 0; k < x->nout; k++) {
        hd_tensor_unref(x->outs[k]);
        x->outs[k] = NULL;
    }
}

/* The value of one-element tensor t, read on the host (a device scalar is
 * copied). */
static hd_status loop_scalar(hd_ctx *ctx, hd_tensor *t, double *v) {
    hd_tensor *h = hd_tensor_is_cpu(t) ? hd_tensor_ref(t) : hd_tensor_to_host(ctx, t);
    if (!h) return ctx->status;
    *v = hd_tensor_get(h, 0);
    hd_tensor_unref(h);
    return HD_OK;
}

/* The trip count: static, or the value of input trips_in. */
static hd_status loop_trips(hd_ctx *ctx, const hd_ir_loop *l, hd_tensor *const *in, int64_t *n) {
    double v = 0;
    if (l->trips_in < 0) {
        *n = l->trips;
        return HD_OK;
    }
    hd_status st = loop_scalar(ctx, in[l->trips_in], &v);
    *n = v > 0 ? (int64_t)v : 0;
    return st;
}

/* Drop the tables' references after a run. */
static void loop_reset(loop_exec *x) {
    for (int k = 0; k < x->nout; k++) {
        hd_tensor_unref(x->outs[k]);
        x->outs[k] = NULL;
    }
    for (int i = 0; i < x->ncarry; i++) {
        hd_tensor_unref(x->carry[i]);
        x->carry[i] = NULL;
    }
}

/* A while loop: the body runs while its condition (carried input
 * while_in) is nonzero; every output is carried, so the inputs of the
 * iteration that did not run are the results. */
static hd_status loop_run_while(hd_ctx *ctx, const hd_ir_loop *l, loop_exec *x, hd_tensor *out) {
    hd_status st = HD_OK;
    for (;;) {
        double go = 0;
        if ((st = loop_scalar(ctx, x->args[l->while_in], &go)) || go == 0) break;
        if (hd_ctx_interrupted(ctx)) {
            st = hd_ctx_stop_error(ctx);
            break;
        }
        if ((st = x->c->run(ctx, x->e, x->args, x->nin, x->outs, x->nout))) break;
        loop_advance(l, x);
    }
    if (!st) st = loop_pack(ctx, l, x, x->args, out);
    loop_reset(x);
    return st;
}

hd_status hd_jit_loop_run(hd_ctx *ctx, const hd_ir_node *n, hd_tensor *const *in, int nin,
                          hd_tensor *out) {
    const hd_ir_loop *l = n->loop;
    loop_exec *x = l->exec;
    if (!x) return hd_error(ctx, HD_ERR_RUNTIME, "loop: its body was not compiled");
    if (nin != x->nin)
        return hd_error(ctx, HD_ERR_RUNTIME, "loop: %d inputs, its body takes %d", nin, x->nin);
    memcpy(x->args, in, (size_t)nin * sizeof *in);
    if (l->while_in >= 0) return loop_run_while(ctx, l, x, out);
    int64_t trips = 0;
    hd_status st = loop_trips(ctx, l, in, &trips);
    if (!st && trips == 0) /* every output is carried: the loop gives its inputs */
        return loop_pack(ctx, l, x, in, out);
    for (int64_t t = 0; t < trips && !st; t++) {
        if (hd_ctx_interrupted(ctx)) {
            st = hd_ctx_stop_error(ctx);
            break;
        }
        if (l->nstack && (st = loop_stack(ctx, l, x, t, out))) break;
        st = x->c->run(ctx, x->e, x->args, x->nin, x->outs, x->nout);
        if (!st && t + 1 < trips) loop_advance(l, x);
    }
    if (!st) st = loop_pack(ctx, l, x, x->outs, out);
    loop_reset(x);
    return st;
}
