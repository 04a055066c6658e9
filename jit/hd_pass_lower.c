/* Lowering: explicit casts where a shape rule casts an input, so that
 * executors run nodes without planning (no per-op decisions at run time). */
#include "hd_pass.h"

#include <string.h>

/* The dtype the rule wants for input k, or -1. */
static int lower_want(const hd_ir_node *n, const hd_op_plan *plan, int k) {
    if (n->op == HD_OP_CONCAT) return plan->in_dtype[0];
    return k < HD_OP_MAX_IN ? plan->in_dtype[k] : -1;
}

static hd_status lower_node(hd_ir_graph *g, hd_ir_node *n, int *casts) {
    if (n->op < 0) return hd_ir_append(g, n);
    hd_op_plan plan;
    if (hd_ir_plan(g, (hd_op)n->op, n->in, n->nin, &n->attrs, &plan)) return g->ctx->status;
    for (int k = 0; k < n->nin; k++) {
        int want = lower_want(n, &plan, k);
        if (want < 0 || (hd_dtype)want == g->values[n->in[k]].dtype) continue;
        hd_attrs at;
        memset(&at, 0, sizeof at);
        at.dtype = (hd_dtype)want;
        int v = hd_ir_add_node(g, HD_OP_CAST, &n->in[k], 1, &at);
        if (v < 0) return g->ctx->status;
        n->in[k] = v;
        (*casts)++;
    }
    return hd_ir_append(g, n);
}

hd_status hd_pass_lower(hd_ir_graph *g, int *changed) {
    int casts = 0;
    if (!g->lowered) {
        hd_ir_node *old;
        int nold;
        hd_ir_detach_nodes(g, &old, &nold);
        for (int i = 0; i < nold; i++)
            if (lower_node(g, &old[i], &casts)) {
                hd_ir_drop_detached(g, old, i, nold);
                return g->ctx->status;
            }
        g->lowered = 1;
    }
    if (changed) *changed = casts;
    return HD_OK;
}
