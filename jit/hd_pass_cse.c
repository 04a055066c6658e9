/* Common subexpression elimination over nodes and constants. */
#include "hd_pass.h"

#include <string.h>

typedef struct cse_table {
    hd_ctx *ctx;
    int *slot; /* value ids, -1 empty */
    uint64_t *key;
    int cap;
} cse_table;

static hd_status cse_init(cse_table *t, hd_ctx *ctx, int n) {
    t->ctx = ctx;
    t->cap = 16;
    while (t->cap < 2 * n + 2) t->cap *= 2;
    t->slot = hd_ctx_alloc(ctx, (size_t)t->cap * (sizeof *t->slot + sizeof *t->key));
    if (!t->slot) return ctx->status;
    t->key = (uint64_t *)(t->slot + t->cap + (t->cap & 1));
    memset(t->slot, 0xff, (size_t)t->cap * sizeof *t->slot);
    return HD_OK;
}

static void cse_free(cse_table *t) {
    hd_ctx_free(t->ctx, t->slot, (size_t)t->cap * (sizeof *t->slot + sizeof *t->key));
}

/* Find an entry with this key that eq() accepts, or insert v. Returns the
 * matching value, or -1 after inserting. */
static int cse_find_or_add(cse_table *t, uint64_t key, int v, const hd_ir_graph *g,
                           int (*eq)(const hd_ir_graph *, int, int)) {
    size_t mask = (size_t)t->cap - 1, s = (size_t)key & mask;
    while (t->slot[s] >= 0) {
        if (t->key[s] == key && eq(g, t->slot[s], v)) return t->slot[s];
        s = (s + 1) & mask;
    }
    t->slot[s] = v;
    t->key[s] = key;
    return -1;
}

static const hd_ir_node *node_of(const hd_ir_graph *g, int v) {
    return &g->nodes[g->values[v].index];
}

static uint64_t node_key(const hd_ir_node *n) {
    hd_ir_hasher h;
    hd_ir_hash_init(&h);
    hd_ir_hash_u64(&h, (uint64_t)n->op);
    hd_ir_hash_u64(&h, (uint64_t)n->nin);
    for (int k = 0; k < n->nin; k++) hd_ir_hash_u64(&h, (uint64_t)n->in[k]);
    hd_ir_hash_bytes(&h, &n->attrs, sizeof n->attrs);
    return hd_ir_hash_final(&h);
}

static int node_eq(const hd_ir_graph *g, int a, int b) {
    const hd_ir_node *x = node_of(g, a), *y = node_of(g, b);
    return x->op == y->op && x->nin == y->nin &&
           !memcmp(x->in, y->in, (size_t)x->nin * sizeof *x->in) &&
           !memcmp(&x->attrs, &y->attrs, sizeof x->attrs);
}

static const hd_tensor *const_of(const hd_ir_graph *g, int v) {
    return g->consts[g->values[v].index].t;
}

static int const_eq(const hd_ir_graph *g, int a, int b) {
    const hd_tensor *x = const_of(g, a), *y = const_of(g, b);
    if (x->dtype != y->dtype || x->ndim != y->ndim || x->number != y->number ||
        memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof *x->shape))
        return 0;
    size_t es = (size_t)hd_dtype_size(x->dtype);
    const char *px = x->storage->data, *py = y->storage->data;
    for (int64_t i = 0; i < x->numel; i++)
        if (memcmp(px + hd_tensor_elem_offset(x, i) * (int64_t)es,
                   py + hd_tensor_elem_offset(y, i) * (int64_t)es, es))
            return 0;
    return 1;
}

/* Constants are merged when small enough to compare cheaply. */
static hd_status cse_consts(hd_ir_graph *g, hd_pass_map *m, int *count) {
    cse_table t;
    if (cse_init(&t, g->ctx, g->nconsts)) return g->ctx->status;
    for (int i = 0; i < g->nconsts; i++) {
        const hd_tensor *c = g->consts[i].t;
        if (!hd_tensor_is_cpu(c) || c->numel > 4096) continue;
        hd_ir_hasher h;
        hd_ir_hash_init(&h);
        hd_ir_hash_tensor(&h, c);
        int same = cse_find_or_add(&t, hd_ir_hash_final(&h), g->consts[i].value, g, const_eq);
        if (same >= 0) {
            hd_pass_map_set(m, g->consts[i].value, same);
            (*count)++;
        }
    }
    cse_free(&t);
    return HD_OK;
}

static hd_status cse_nodes(hd_ir_graph *g, hd_pass_map *m, int *count) {
    cse_table t;
    if (cse_init(&t, g->ctx, g->nnodes)) return g->ctx->status;
    for (int i = 0; i < g->nnodes; i++) {
        hd_ir_node *n = &g->nodes[i];
        if (n->op == HD_IR_DEAD) continue;
        hd_pass_map_node(m, n);
        /* loops never merge (each has its own body); views of one loop
         * output do */
        if ((n->op < 0 && n->op != HD_IR_LOOP_OUT) || hd_pass_op_is_random(n)) continue;
        int same = cse_find_or_add(&t, node_key(n), n->out, g, node_eq);
        if (same >= 0) {
            hd_pass_map_set(m, n->out, same);
            n->op = HD_IR_DEAD;
            (*count)++;
        }
    }
    cse_free(&t);
    return HD_OK;
}

hd_status hd_pass_cse(hd_ir_graph *g, int *changed) {
    hd_pass_map m;
    int count = 0;
    if (hd_pass_map_init(&m, g)) return g->ctx->status;
    if (cse_consts(g, &m, &count) || cse_nodes(g, &m, &count)) {
        hd_pass_map_free(&m);
        return g->ctx->status;
    }
    if (changed) *changed = count;
    return hd_pass_map_finish(&m, g);
}
