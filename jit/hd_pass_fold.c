/* Constant folding with the eager kernels: the folded value is exactly
 * what eager mode computes. */
#include "hd_pass.h"

#include <string.h>

static int fold_candidate(const hd_ir_graph *g, const hd_ir_node *n, size_t limit) {
    if (n->op < 0 || hd_pass_op_is_random(n) || n->op == HD_OP_ASSIGN) return 0;
    for (int k = 0; k < n->nin; k++)
        if (g->values[n->in[k]].kind != HD_IR_VALUE_CONST) return 0;
    if (hd_op_infos[n->op].kind == HD_KIND_VIEW && n->op != HD_OP_RESHAPE) return 1;
    const hd_ir_value *v = &g->values[n->out];
    size_t bytes = (size_t)hd_shape_numel(v->shape, v->ndim) * (size_t)hd_dtype_size(v->dtype);
    return bytes <= limit;
}

/* Run the node eagerly; 1 if folded, 0 if the kernel refused (the node then
 * stays and reports the same error when it runs), -1 on a memory error or
 * when the run was stopped (an interrupt or the time limit: the compile
 * stops with it). */
static int fold_node(hd_ir_graph *g, hd_ir_node *n, hd_pass_map *m) {
    enum { STACK_IN = 8 };
    hd_ctx *ctx = g->ctx;
    hd_tensor *buf[STACK_IN], **in = buf;
    if (n->nin > STACK_IN && !(in = hd_ctx_alloc(ctx, (size_t)n->nin * sizeof *in))) return -1;
    for (int k = 0; k < n->nin; k++) in[k] = g->consts[g->values[n->in[k]].index].t;
    struct hd_trace *tr = ctx->trace; /* folding computes even inside a trace */
    ctx->trace = NULL;
    hd_tensor *res = NULL;
    hd_status st = hd_op_run(ctx, (hd_op)n->op, in, n->nin, &n->attrs, &res);
    ctx->trace = tr;
    if (in != buf) hd_ctx_free(ctx, in, (size_t)n->nin * sizeof *in);
    if (st == HD_ERR_MEMORY || st == HD_ERR_LIMIT) return -1;
    if (st) {
        hd_error_clear(ctx);
        return 0;
    }
    int v = hd_ir_add_const(g, res);
    hd_tensor_unref(res);
    if (v < 0 || hd_pass_map_fit(m, g->nvalues)) return -1;
    hd_pass_map_set(m, n->out, v);
    n->op = HD_IR_DEAD;
    return 1;
}

hd_status hd_pass_fold(hd_ir_graph *g, size_t limit_bytes, int *changed) {
    hd_pass_map m;
    int folded = 0;
    if (hd_pass_map_init(&m, g)) return g->ctx->status;
    for (int i = 0; i < g->nnodes; i++) {
        hd_ir_node *n = &g->nodes[i];
        if (n->op == HD_IR_DEAD) continue;
        hd_pass_map_node(&m, n);
        if (!fold_candidate(g, n, limit_bytes)) continue;
        int r = fold_node(g, n, &m);
        if (r < 0) {
            hd_pass_map_free(&m);
            return g->ctx->status;
        }
        folded += r;
    }
    if (changed) *changed = folded;
    return hd_pass_map_finish(&m, g);
}
