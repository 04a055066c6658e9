/* Layout: follow the strides executors give each value (computed values
 * and constants contiguous, views strided over them) and put a clone
 * before every reshape whose input is not contiguous, so that reshape is
 * always a view when the graph runs. */
#include "hd_pass.h"

#include <string.h>

typedef struct layout {
    int64_t strides[HD_MAX_DIMS];
} layout;

static int layout_contiguous(const hd_ir_value *v, const layout *l) {
    int64_t s = 1;
    for (int i = v->ndim - 1; i >= 0; i--) {
        if (v->shape[i] != 1 && l->strides[i] != s) return 0;
        s *= v->shape[i];
    }
    return 1;
}

/* The strides a view node gives its value, from its input's. */
static void layout_view(const hd_ir_graph *g, const hd_ir_node *n, const layout *in, layout *out) {
    const hd_ir_value *x = &g->values[n->in[0]], *y = &g->values[n->out];
    switch (n->op) {
    case HD_OP_PERMUTE:
        for (int i = 0; i < y->ndim; i++) {
            int64_t a = n->attrs.shape[i] < 0 ? n->attrs.shape[i] + x->ndim : n->attrs.shape[i];
            out->strides[i] = in->strides[a];
        }
        break;
    case HD_OP_EXPAND: {
        int lead = y->ndim - x->ndim;
        for (int i = 0; i < y->ndim; i++) {
            int j = i - lead;
            out->strides[i] = j < 0 || (x->shape[j] == 1 && y->shape[i] != 1) ? 0 : in->strides[j];
        }
        break;
    }
    case HD_OP_SLICE: {
        int k = 0;
        for (int i = 0; i < x->ndim; i++)
            if (!(n->attrs.drop_mask & (1u << i)))
                out->strides[k++] =
                    hd_slice_stride(in->strides[i], n->attrs.step[i], n->attrs.len[i]);
        break;
    }
    default: hd_contiguous_strides(y->shape, y->ndim, out->strides); break;
    }
}

static hd_status layout_node(hd_ir_graph *g, hd_ir_node *n, layout *ls, int *copies) {
    if (n->op == HD_OP_RESHAPE && !layout_contiguous(&g->values[n->in[0]], &ls[n->in[0]])) {
        int v = hd_ir_add_node(g, HD_OP_COPY, &n->in[0], 1, NULL);
        if (v < 0) return g->ctx->status;
        hd_contiguous_strides(g->values[v].shape, g->values[v].ndim, ls[v].strides);
        n->in[0] = v;
        (*copies)++;
    }
    if (n->out >= 0) {
        if (n->op >= 0 && hd_op_infos[n->op].kind == HD_KIND_VIEW)
            layout_view(g, n, &ls[n->in[0]], &ls[n->out]);
        else
            hd_contiguous_strides(g->values[n->out].shape, g->values[n->out].ndim,
                                  ls[n->out].strides);
    }
    return hd_ir_append(g, n);
}

hd_status hd_pass_layout(hd_ir_graph *g, int *changed) {
    int copies = 0, nv = g->nvalues;
    /* at most one clone per node */
    size_t cap = (size_t)nv + (size_t)g->nnodes + 1;
    layout *ls = hd_ctx_calloc(g->ctx, cap, sizeof *ls);
    if (!ls) return g->ctx->status;
    for (int v = 0; v < nv; v++)
        hd_contiguous_strides(g->values[v].shape, g->values[v].ndim, ls[v].strides);
    hd_ir_node *old;
    int nold;
    hd_ir_detach_nodes(g, &old, &nold);
    hd_status st = HD_OK;
    for (int i = 0; i < nold && !st; i++)
        if ((st = layout_node(g, &old[i], ls, &copies))) hd_ir_drop_detached(g, old, i, nold);
    hd_ctx_free(g->ctx, ls, cap * sizeof *ls);
    if (changed) *changed = copies;
    return st;
}
