/* Algebraic simplification: only identities that hold bit for bit. */
#include "hd_pass.h"

#include <string.h>

static int same_type(const hd_ir_graph *g, int a, int b) {
    const hd_ir_value *x = &g->values[a], *y = &g->values[b];
    return x->dtype == y->dtype && x->ndim == y->ndim && !x->number && !y->number &&
           memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof *x->shape) == 0;
}

static const hd_ir_node *producer(const hd_ir_graph *g, int v) {
    const hd_ir_value *val = &g->values[v];
    return val->kind == HD_IR_VALUE_NODE ? &g->nodes[val->index] : NULL;
}

/* x op c == x: the neutral element of op on the side it is neutral on. A
 * float zero must be -0.0 for add (x + -0.0 == x for x = -0.0 too) and
 * +0.0 for sub. */
static int neutral_operand(const hd_ir_graph *g, const hd_ir_node *n, int k) {
    int c = n->in[k];
    switch (n->op) {
    case HD_OP_ADD: return hd_pass_const_all(g, c, -0.0, 1);
    case HD_OP_SUB: return k == 1 && hd_pass_const_all(g, c, 0.0, 1);
    case HD_OP_MUL: return hd_pass_const_all(g, c, 1.0, 0);
    case HD_OP_DIV:
    case HD_OP_POW: return k == 1 && hd_pass_const_all(g, c, 1.0, 0);
    default: return 0;
    }
}

static int is_identity_view(const hd_ir_graph *g, const hd_ir_node *n) {
    const hd_ir_value *x = &g->values[n->in[0]];
    if (n->op == HD_OP_PERMUTE) {
        for (int i = 0; i < n->attrs.nshape; i++)
            if (n->attrs.shape[i] != i && n->attrs.shape[i] != i - x->ndim) return 0;
        return 1;
    }
    if (n->op == HD_OP_SLICE) {
        if (n->attrs.drop_mask) return 0;
        for (int i = 0; i < x->ndim; i++)
            if (n->attrs.start[i] != 0 || n->attrs.step[i] != 1 || n->attrs.len[i] != x->shape[i])
                return 0;
        return 1;
    }
    return n->op == HD_OP_RESHAPE || n->op == HD_OP_EXPAND || n->op == HD_OP_CAST ||
           n->op == HD_OP_COPY || (n->op == HD_OP_DROPOUT && n->attrs.ints[0] == 0);
}

/* The value n computes if it is one of its inputs, else -1. */
static int simplify_to_input(const hd_ir_graph *g, const hd_ir_node *n) {
    if (hd_pass_op_is_random(n)) return -1;
    hd_op_kind kind = hd_op_infos[n->op].kind;
    if (kind == HD_KIND_BINARY) {
        for (int k = 0; k < 2; k++)
            if (same_type(g, n->in[1 - k], n->out) && neutral_operand(g, n, k)) return n->in[1 - k];
        return -1;
    }
    if (n->nin != 1 || !same_type(g, n->in[0], n->out)) return -1;
    if (is_identity_view(g, n)) return n->in[0];
    const hd_ir_node *p = producer(g, n->in[0]);
    if (n->op == HD_OP_NEG && p && p->op == HD_OP_NEG && same_type(g, p->in[0], n->out))
        return p->in[0];
    return -1;
}

/* reshape(reshape(y)) -> reshape(y); permute(permute(y)) -> one permute. */
static int simplify_chain(const hd_ir_graph *g, hd_ir_node *n) {
    if (n->op != HD_OP_RESHAPE && n->op != HD_OP_PERMUTE) return 0;
    const hd_ir_node *p = producer(g, n->in[0]);
    if (!p || p->op != n->op) return 0;
    if (n->op == HD_OP_RESHAPE) {
        n->in[0] = p->in[0];
        return 1;
    }
    if (n->op == HD_OP_PERMUTE) {
        int nd = n->attrs.nshape;
        int64_t order[HD_MAX_DIMS];
        for (int i = 0; i < nd; i++) {
            int64_t a = n->attrs.shape[i] < 0 ? n->attrs.shape[i] + nd : n->attrs.shape[i];
            int64_t b = p->attrs.shape[a];
            order[i] = b < 0 ? b + nd : b;
        }
        memcpy(n->attrs.shape, order, (size_t)nd * sizeof *order);
        n->in[0] = p->in[0];
        return 1;
    }
    return 0;
}

hd_status hd_pass_simplify(hd_ir_graph *g, int *changed) {
    hd_pass_map m;
    int count = 0;
    if (hd_pass_map_init(&m, g)) return g->ctx->status;
    for (int i = 0; i < g->nnodes; i++) {
        hd_ir_node *n = &g->nodes[i];
        if (n->op < 0) continue;
        hd_pass_map_node(&m, n);
        int x = simplify_to_input(g, n);
        if (x >= 0) {
            hd_pass_map_set(&m, n->out, x);
            n->op = HD_IR_DEAD;
            count++;
        } else {
            count += simplify_chain(g, n);
        }
    }
    if (changed) *changed = count;
    return hd_pass_map_finish(&m, g);
}
