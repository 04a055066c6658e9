/* Graphs for the compiler tests: a body is a function of tensors, run
 * eagerly on data or traced on symbolic inputs (test_interp, test_llvm,
 * test_cuda_fuse). Include after hd_test.h. */
#ifndef HD_TEST_TRACE_H
#define HD_TEST_TRACE_H

#include "hd_trace.h"

typedef hd_status (*body_fn)(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud);

static inline hd_status op1(hd_ctx *ctx, hd_op op, hd_tensor *a, const hd_attrs *at,
                            hd_tensor **out) {
    return hd_op_run(ctx, op, &a, 1, at, out);
}

static inline hd_status op2(hd_ctx *ctx, hd_op op, hd_tensor *a, hd_tensor *b, hd_tensor **out) {
    hd_tensor *in[2] = {a, b};
    return hd_op_run(ctx, op, in, 2, NULL, out);
}

/* Trace body over nin (<= 8) inputs shaped like `in`, named x0, x1, ...,
 * with nout (<= 8) outputs y0, y1, ...; NULL (ctx's error) on failure. */
static inline hd_ir_graph *trace_body(hd_ctx *ctx, const char *name, body_fn body,
                                      hd_tensor *const *in, int nin, int nout, void *ud) {
    hd_tensor *sym[8] = {0}, *out[8] = {0};
    hd_ir_graph *g = NULL;
    if (hd_trace_begin(ctx, name)) return NULL;
    hd_status st = HD_OK;
    for (int i = 0; i < nin && !st; i++) {
        char vn[16];
        snprintf(vn, sizeof vn, "x%d", i);
        sym[i] = hd_trace_input(ctx, vn, in[i]->dtype, in[i]->shape, in[i]->ndim);
        if (!sym[i]) st = ctx->status;
    }
    if (!st) st = body(ctx, sym, out, ud);
    for (int i = 0; i < nout && !st; i++) {
        char vn[16];
        snprintf(vn, sizeof vn, "y%d", i);
        st = hd_trace_output(ctx, vn, out[i]);
    }
    if (st)
        hd_trace_abort(ctx);
    else
        hd_trace_end(ctx, &g);
    for (int i = 0; i < 8; i++) {
        hd_tensor_unref(sym[i]);
        hd_tensor_unref(out[i]);
    }
    return g;
}

/* relu(x @ w1 + b1) @ w2 + b2 and its sum (w1, b1, w2, b2 in ud): the MLP
 * of the compiler tests */
static inline hd_status mlp2_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    hd_tensor **p = ud, *h = NULL, *h2 = NULL, *h3 = NULL, *o = NULL;
    hd_status st = op2(ctx, HD_OP_MATMUL, in[0], p[0], &h);
    if (!st) st = op2(ctx, HD_OP_ADD, h, p[1], &h2);
    if (!st) st = op1(ctx, HD_OP_RELU, h2, NULL, &h3);
    if (!st) st = op2(ctx, HD_OP_MATMUL, h3, p[2], &o);
    if (!st) st = op2(ctx, HD_OP_ADD, o, p[3], &out[0]);
    if (!st) st = op1(ctx, HD_OP_SUM, out[0], NULL, &out[1]);
    hd_tensor_unref(h);
    hd_tensor_unref(h2);
    hd_tensor_unref(h3);
    hd_tensor_unref(o);
    return st;
}

#endif
