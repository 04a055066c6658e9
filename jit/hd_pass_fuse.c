/* Fusion grouping. A node joins the open group of one of its producers
 * when every other input is defined before the group's first node: the
 * group can then run as one kernel at its first node's place, since
 * nothing it reads is computed after that. A matmul opens a group (its
 * epilogue follows); a reduction closes the group it joins. */
#include "hd_pass.h"

#include <string.h>

typedef struct fuse_state {
    hd_ir_graph *g;
    char *open; /* per group */
} fuse_state;

static int defined_at(const hd_ir_graph *g, int v) {
    const hd_ir_value *val = &g->values[v];
    return val->kind == HD_IR_VALUE_NODE ? val->index : -1;
}

/* A group n can join: the open group of an input's producer that passes
 * the placement rule, or -1. */
static int fuse_target(const fuse_state *s, const hd_ir_node *n, int reduce) {
    const hd_ir_graph *g = s->g;
    for (int k = 0; k < (reduce ? 1 : n->nin); k++) {
        int p = defined_at(g, n->in[k]);
        if (p < 0 || g->nodes[p].group < 0 || !s->open[g->nodes[p].group]) continue;
        int gi = g->nodes[p].group, ok = 1;
        for (int j = 0; j < n->nin && ok; j++) {
            int q = defined_at(g, n->in[j]);
            if (q >= 0 && g->nodes[q].group != gi && q >= g->groups[gi].first) ok = 0;
        }
        if (ok) return gi;
    }
    return -1;
}

static void fuse_open(fuse_state *s, hd_ir_node *n, int i, hd_ir_group_kind kind) {
    hd_ir_graph *g = s->g;
    int gi = g->ngroups++;
    g->groups[gi].kind = kind;
    g->groups[gi].first = g->groups[gi].last = i;
    g->groups[gi].nnodes = 1;
    s->open[gi] = 1;
    n->group = gi;
}

static void fuse_join(fuse_state *s, hd_ir_node *n, int i, int gi) {
    s->g->groups[gi].last = i;
    s->g->groups[gi].nnodes++;
    n->group = gi;
}

static void fuse_node(fuse_state *s, int i) {
    hd_ir_node *n = &s->g->nodes[i];
    n->group = -1;
    if (n->op < 0) return;
    if (n->op == HD_OP_MATMUL) {
        fuse_open(s, n, i, HD_IR_GROUP_MATMUL);
    } else if (hd_pass_op_is_elementwise(n->op)) {
        int gi = fuse_target(s, n, 0);
        if (gi >= 0)
            fuse_join(s, n, i, gi);
        else
            fuse_open(s, n, i, HD_IR_GROUP_ELEMENTWISE);
    } else if (hd_op_infos[n->op].kind == HD_KIND_REDUCE) {
        int gi = fuse_target(s, n, 1);
        if (gi >= 0 && s->g->groups[gi].kind != HD_IR_GROUP_MATMUL) {
            fuse_join(s, n, i, gi);
            s->g->groups[gi].kind = HD_IR_GROUP_REDUCE;
            s->open[gi] = 0;
        }
    }
}

hd_status hd_pass_fuse(hd_ir_graph *g) {
    fuse_state s = {g, NULL};
    g->ngroups = 0;
    g->groups = NULL;
    if (!g->nnodes) return HD_OK;
    g->groups = hd_ir_arena_alloc(&g->arena, (size_t)g->nnodes * sizeof *g->groups);
    s.open = g->groups ? hd_ctx_calloc(g->ctx, (size_t)g->nnodes, 1) : NULL;
    if (!s.open) return g->ctx->status;
    for (int i = 0; i < g->nnodes; i++) fuse_node(&s, i);
    hd_ctx_free(g->ctx, s.open, (size_t)g->nnodes);
    return HD_OK;
}
