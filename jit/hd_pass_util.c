/* Helpers shared by the passes, and the standard pipeline. */
#include "hd_pass.h"

#include <math.h>
#include <string.h>

int hd_pass_op_is_random(const hd_ir_node *n) {
    return n->op == HD_OP_RAND || n->op == HD_OP_RANDN || n->op == HD_OP_ALL_REDUCE ||
           (n->op == HD_OP_DROPOUT && n->attrs.ints[0] != 0);
}

/* gelu_bwd, tanh_bwd and sigmoid_bwd, gradient kernels, are elementwise
 * too: training graphs fuse them with the ops around them. */
int hd_pass_op_is_elementwise(int op) {
    if (op < 0 || op >= HD_OP_COUNT) return 0;
    hd_op_kind k = hd_op_infos[op].kind;
    return k == HD_KIND_UNARY || k == HD_KIND_BINARY || k == HD_KIND_COMPARE ||
           k == HD_KIND_TERNARY || op == HD_OP_GELU_BWD || op == HD_OP_TANH_BWD ||
           op == HD_OP_SIGMOID_BWD;
}

hd_status hd_pass_map_init(hd_pass_map *m, hd_ir_graph *g) {
    m->ctx = g->ctx;
    m->to = NULL;
    m->cap = 0;
    return hd_pass_map_fit(m, g->nvalues);
}

hd_status hd_pass_map_fit(hd_pass_map *m, int nvalues) {
    if (nvalues <= m->cap) return HD_OK;
    int ncap = m->cap ? m->cap : 16;
    while (ncap < nvalues) ncap *= 2;
    int *to = hd_ctx_realloc(m->ctx, m->to, (size_t)m->cap * sizeof *to, (size_t)ncap * sizeof *to);
    if (!to) return m->ctx->status;
    for (int i = m->cap; i < ncap; i++) to[i] = i;
    m->to = to;
    m->cap = ncap;
    return HD_OK;
}

int hd_pass_map_get(const hd_pass_map *m, int v) {
    while (v >= 0 && v < m->cap && m->to[v] != v) v = m->to[v];
    return v;
}

void hd_pass_map_set(hd_pass_map *m, int from, int to) {
    m->to[from] = hd_pass_map_get(m, to);
}

void hd_pass_map_node(const hd_pass_map *m, hd_ir_node *n) {
    for (int k = 0; k < n->nin; k++) n->in[k] = hd_pass_map_get(m, n->in[k]);
}

void hd_pass_map_free(hd_pass_map *m) {
    if (m->to) hd_ctx_free(m->ctx, m->to, (size_t)m->cap * sizeof *m->to);
    m->to = NULL;
    m->cap = 0;
}

hd_status hd_pass_map_finish(hd_pass_map *m, hd_ir_graph *g) {
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op != HD_IR_DEAD) hd_pass_map_node(m, &g->nodes[i]);
    for (int i = 0; i < g->noutputs; i++)
        g->outputs[i].value = hd_pass_map_get(m, g->outputs[i].value);
    hd_pass_map_free(m);
    return hd_ir_compact(g);
}

int hd_pass_const_all(const hd_ir_graph *g, int v, double x, int want_sign) {
    const hd_ir_value *val = &g->values[v];
    if (val->kind != HD_IR_VALUE_CONST) return 0;
    const hd_tensor *t = g->consts[val->index].t;
    if (!hd_tensor_is_cpu(t) || t->numel == 0 || t->numel > 4096) return 0;
    int fl = hd_dtype_is_float(t->dtype);
    for (int64_t i = 0; i < t->numel; i++) {
        double e = hd_tensor_get(t, i);
        if (e != x) return 0;
        if (fl && want_sign && e == 0 && !signbit(e) != !signbit(x)) return 0;
    }
    return 1;
}

static hd_status pipeline_fixpoint(hd_ir_graph *g, size_t fold_limit, hd_pass_report *r) {
    for (int round = 0; round < 8; round++) {
        int f = 0, s = 0, c = 0, d = 0;
        if (hd_pass_fold(g, fold_limit, &f) || hd_pass_simplify(g, &s) || hd_pass_cse(g, &c) ||
            hd_pass_dce(g, &d))
            return g->ctx->status;
        r->folded += f;
        r->simplified += s;
        r->merged += c;
        r->removed += d;
        if (!f && !s && !c && !d) break;
    }
    return HD_OK;
}

hd_status hd_pass_pipeline(hd_ir_graph *g, int opt_level, size_t fold_limit,
                           hd_pass_report *report) {
    hd_pass_report r;
    memset(&r, 0, sizeof r);
    r.nodes_before = g->nnodes;
    if (hd_ir_compact(g) || hd_pass_lower(g, &r.casts)) return g->ctx->status;
    if (opt_level > 0 && pipeline_fixpoint(g, fold_limit, &r)) return g->ctx->status;
    if (hd_pass_layout(g, &r.copies) || hd_ir_compact(g) || hd_ir_verify(g)) return g->ctx->status;
    if (opt_level > 0 && opt_level != HD_PASS_NO_FUSE && hd_pass_fuse(g)) return g->ctx->status;
    r.nodes_after = g->nnodes;
    r.groups = g->ngroups;
    if (report) *report = r;
    return HD_OK;
}
