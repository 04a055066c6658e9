/* Dead code elimination: a backward sweep from outputs, callbacks and
 * random draws (removing a draw would shift every later one). A loop is
 * live when one of its results is used or its body has such an effect;
 * then the body outputs nothing reads are dropped from it. */
#include "hd_pass.h"

#include <string.h>

/* Would removing a loop over this body change what a run does? */
static int dce_loop_has_effects(const hd_ir_node *n) {
    return hd_ir_has_effects(n->loop->body, hd_pass_op_is_random);
}

/* Which results (body outputs, stacks) of loop node i are read (by LOOP_OUT nodes, or as
 * carry sources) into keep; 0 if the loop's value has another user. */
static int dce_loop_used(const hd_ir_graph *g, int i, char *keep) {
    const hd_ir_node *n = &g->nodes[i];
    for (int k = 0; k < g->noutputs; k++)
        if (g->outputs[k].value == n->out) return 0;
    for (int j = i + 1; j < g->nnodes; j++) {
        const hd_ir_node *u = &g->nodes[j];
        if (u->op == HD_IR_DEAD) continue;
        for (int k = 0; k < u->nin; k++) {
            if (u->in[k] != n->out) continue;
            if (u->op != HD_IR_LOOP_OUT) return 0;
            keep[u->attrs.ints[0]] = 1;
        }
    }
    for (int c = 0; c < n->loop->ncarry; c++) keep[n->loop->carry_src[c]] = 1;
    return 1;
}

/* Drop the unread outputs of every live loop, then the body nodes that
 * computed only them. Adds the dropped outputs to *removed. */
static hd_status dce_shrink_loops(hd_ir_graph *g, int *removed) {
    for (int i = 0; i < g->nnodes; i++) {
        hd_ir_node *n = &g->nodes[i];
        if (n->op != HD_IR_LOOP) continue;
        int nres = hd_ir_loop_nresults(n->loop), unused = 0;
        char *keep = hd_ctx_calloc(g->ctx, (size_t)nres + 1, 1);
        if (!keep) return g->ctx->status;
        if (dce_loop_used(g, i, keep))
            for (int k = 0; k < nres; k++) unused += !keep[k];
        hd_status st = unused ? hd_ir_loop_keep_outputs(g, i, keep) : HD_OK;
        hd_ctx_free(g->ctx, keep, (size_t)nres + 1);
        if (st || (unused && hd_pass_dce(n->loop->body, NULL))) return g->ctx->status;
        *removed += unused;
    }
    return HD_OK;
}

hd_status hd_pass_dce(hd_ir_graph *g, int *changed) {
    int removed = 0;
    char *live = hd_ctx_calloc(g->ctx, (size_t)g->nvalues + 1, 1);
    if (!live) return g->ctx->status;
    for (int i = 0; i < g->noutputs; i++) live[g->outputs[i].value] = 1;
    for (int i = g->nnodes - 1; i >= 0; i--) {
        hd_ir_node *n = &g->nodes[i];
        if (n->op == HD_IR_DEAD) continue;
        int keep = n->op == HD_IR_CALLBACK || hd_pass_op_is_random(n) || live[n->out] ||
                   (n->op == HD_IR_LOOP && dce_loop_has_effects(n));
        if (!keep) {
            n->op = HD_IR_DEAD;
            removed++;
            continue;
        }
        for (int k = 0; k < n->nin; k++) live[n->in[k]] = 1;
    }
    hd_ctx_free(g->ctx, live, (size_t)g->nvalues + 1);
    if (dce_shrink_loops(g, &removed)) return g->ctx->status;
    if (changed) *changed = removed;
    return removed ? hd_ir_compact(g) : HD_OK;
}
