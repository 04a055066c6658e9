/* Memory planning: liveness over the node order, best-fit reuse of dead
 * buffers, and in-place elementwise nodes. */
#include "hd_pass.h"

#include <string.h>

typedef struct memplan_state {
    hd_ir_graph *g;
    hd_ir_memplan *p;
    const hd_pass_memplan_options *opt;
    char *is_output; /* per value */
    char *released;  /* per value: its buffer went back to the free list */
    int *free_list;  /* buffer ids */
    int nfree;
} memplan_state;

static size_t value_bytes(const hd_ir_value *v) {
    return (size_t)hd_shape_numel(v->shape, v->ndim) * (size_t)hd_dtype_size(v->dtype);
}

/* Views share their input's memory: view ops, and a loop's results (over
 * the loop's packed value, which is then live while any of them is). */
static int is_view(const hd_ir_node *n) {
    return n->op == HD_IR_LOOP_OUT || (n->op >= 0 && hd_op_infos[n->op].kind == HD_KIND_VIEW);
}

static void memplan_liveness(memplan_state *s) {
    hd_ir_graph *g = s->g;
    hd_ir_memplan *p = s->p;
    for (int v = 0; v < g->nvalues; v++) {
        p->root[v] = v;
        p->buffer[v] = -1;
        p->last_use[v] = -1;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[i];
        if (is_view(n)) p->root[n->out] = p->root[n->in[0]];
        for (int k = 0; k < n->nin; k++) {
            int r = p->root[n->in[k]];
            if (p->last_use[r] < i) p->last_use[r] = i;
            if (p->last_use[n->in[k]] < i) p->last_use[n->in[k]] = i;
        }
    }
    for (int i = 0; i < g->noutputs; i++) {
        int v = g->outputs[i].value;
        s->is_output[v] = 1;
        p->last_use[v] = p->last_use[p->root[v]] = g->nnodes;
    }
}

/* An input of n that n may overwrite, or -1. */
static int memplan_inplace_input(const memplan_state *s, int i) {
    const hd_ir_graph *g = s->g;
    const hd_ir_node *n = &g->nodes[i];
    const hd_ir_value *out = &g->values[n->out];
    if (s->opt->no_inplace || !hd_pass_op_is_elementwise(n->op)) return -1;
    for (int k = 0; k < n->nin; k++) {
        int x = n->in[k];
        const hd_ir_value *xv = &g->values[x];
        if (s->p->root[x] != x || s->p->buffer[x] < 0 || s->p->last_use[x] != i ||
            xv->dtype != out->dtype || xv->ndim != out->ndim ||
            memcmp(xv->shape, out->shape, (size_t)out->ndim * sizeof *out->shape))
            continue;
        int shared = 0;
        for (int j = 0; j < n->nin; j++)
            if (j != k && s->p->root[n->in[j]] == x) shared = 1;
        if (!shared) return x;
    }
    return -1;
}

static int memplan_take(memplan_state *s, size_t need) {
    int best = -1;
    for (int j = 0; j < s->nfree && !s->opt->no_reuse; j++) {
        size_t have = s->p->buffer_bytes[s->free_list[j]];
        if (have >= need && (best < 0 || have < s->p->buffer_bytes[s->free_list[best]])) best = j;
    }
    if (best >= 0) {
        int b = s->free_list[best];
        s->free_list[best] = s->free_list[--s->nfree];
        return b;
    }
    s->p->buffer_bytes[s->p->nbuffers] = need;
    return s->p->nbuffers++;
}

static void memplan_release(memplan_state *s, int v) {
    if (s->p->buffer[v] < 0 || s->released[v]) return;
    s->released[v] = 1;
    s->free_list[s->nfree++] = s->p->buffer[v];
}

static void memplan_node(memplan_state *s, int i) {
    hd_ir_graph *g = s->g;
    hd_ir_memplan *p = s->p;
    const hd_ir_node *n = &g->nodes[i];
    int v = n->out;
    if (v >= 0 && !is_view(n)) {
        p->naive_bytes += s->is_output[v] ? 0 : value_bytes(&g->values[v]);
        int x = s->is_output[v] ? -1 : memplan_inplace_input(s, i);
        if (x >= 0) {
            p->buffer[v] = p->buffer[x];
            s->released[x] = 1; /* handed over, not freed */
            p->ninplace++;
        } else if (!s->is_output[v]) {
            p->buffer[v] = memplan_take(s, value_bytes(&g->values[v]));
        }
    }
    for (int k = 0; k < n->nin; k++) {
        int r = p->root[n->in[k]];
        if (p->last_use[r] == i) memplan_release(s, r);
    }
    if (v >= 0 && p->root[v] == v && p->last_use[v] < 0) memplan_release(s, v);
}

hd_status hd_pass_memplan(hd_ir_graph *g, const hd_pass_memplan_options *opt, hd_ir_memplan *plan) {
    static const hd_pass_memplan_options defaults;
    memplan_state s = {g, plan, opt ? opt : &defaults, NULL, NULL, NULL, 0};
    size_t nv = (size_t)g->nvalues + 1;
    memset(plan, 0, sizeof *plan);
    plan->buffer = hd_ir_arena_alloc(&g->arena, nv * sizeof(int));
    plan->root = hd_ir_arena_alloc(&g->arena, nv * sizeof(int));
    plan->last_use = hd_ir_arena_alloc(&g->arena, nv * sizeof(int));
    plan->buffer_bytes = hd_ir_arena_alloc(&g->arena, nv * sizeof(size_t));
    char *flags = hd_ctx_calloc(g->ctx, nv, 2 + sizeof(int));
    if (!plan->buffer || !plan->root || !plan->last_use || !plan->buffer_bytes || !flags) {
        if (flags) hd_ctx_free(g->ctx, flags, nv * (2 + sizeof(int)));
        return g->ctx->status;
    }
    s.free_list = (int *)flags;
    s.is_output = flags + nv * sizeof(int);
    s.released = s.is_output + nv;
    memplan_liveness(&s);
    for (int i = 0; i < g->nnodes; i++) memplan_node(&s, i);
    for (int b = 0; b < plan->nbuffers; b++) plan->planned_bytes += plan->buffer_bytes[b];
    hd_ctx_free(g->ctx, flags, nv * (2 + sizeof(int)));
    return HD_OK;
}
