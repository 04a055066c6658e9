/* Dead code elimination: a backward sweep from outputs, callbacks and
 * random draws (removing a draw would shift every later one). */
#include "hd_pass.h"

hd_status hd_pass_dce(hd_ir_graph *g, int *changed) {
    int removed = 0;
    char *live = hd_ctx_calloc(g->ctx, (size_t)g->nvalues + 1, 1);
    if (!live) return g->ctx->status;
    for (int i = 0; i < g->noutputs; i++) live[g->outputs[i].value] = 1;
    for (int i = g->nnodes - 1; i >= 0; i--) {
        hd_ir_node *n = &g->nodes[i];
        if (n->op == HD_IR_DEAD) continue;
        int keep = n->op == HD_IR_CALLBACK || hd_pass_op_is_random(n) || live[n->out];
        if (!keep) {
            n->op = HD_IR_DEAD;
            removed++;
            continue;
        }
        for (int k = 0; k < n->nin; k++) live[n->in[k]] = 1;
    }
    hd_ctx_free(g->ctx, live, (size_t)g->nvalues + 1);
    if (changed) *changed = removed;
    return removed ? hd_ir_compact(g) : HD_OK;
}
