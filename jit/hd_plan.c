/* The plan of the fused compilers (llvm, cuda): kernels, steps, stored
 * values, slots, arena.
 *
 * Nodes of a fusion group that generated code supports form a "piece" run
 * at its first node's place (hd_pass_fuse's placement rule makes that
 * valid); a node the runtime must run closes the group's open piece, and
 * the group's later nodes open another. A piece becomes one loop nest per
 * distinct shape of its nodes (a node of shape [3, 1] and one of [3, 4] in
 * one group cannot share a loop), ordered so that a smaller shape, which can
 * only feed a larger one, runs first; a reduction's prologue of the
 * reduction's input shape is computed inside the reduction's loop.
 *
 * A value is stored when anything outside its kernel reads it (another
 * kernel, a runtime node, a view, a callback, the graph's outputs); the
 * rest live in registers. Stored intermediates get offsets in one arena,
 * reused once their values are dead (first fit over the step order). */
#include "hd_plan.h"

#include <string.h>

#define PLAN_ALIGN 64

typedef struct plan_piece {
    int first;  /* node index */
    int kind;   /* hd_plan_kernel_kind of its last kernel */
    int *nodes; /* in node order */
    int nnodes;
    int kfirst, nk; /* its kernels */
} plan_piece;

typedef struct plan_state {
    hd_ir_graph *g;
    hd_plan *p;
    int no_reuse;
    int gemm;       /* HD_PLAN_GEMM */
    int flags;      /* HD_PLAN_* */
    int *def;       /* per value: defining node, -1 */
    int *use_start; /* per value: users in use_list[use_start[v] .. use_start[v + 1]) */
    int *use_list;
    char *is_output; /* per value */
    plan_piece *pieces;
    int npieces;
    int *piece_of;     /* per node */
    int64_t *elem_off; /* per value: element offset of a view from its root */
} plan_state;

/* View ops, and a loop's results: contiguous views of the loop's value. */
static int node_is_view(const hd_ir_node *n) {
    return n->op == HD_IR_LOOP_OUT || (n->op >= 0 && hd_op_infos[n->op].kind == HD_KIND_VIEW);
}

static size_t val_bytes(const hd_ir_value *v) {
    return (size_t)hd_shape_numel(v->shape, v->ndim) * (size_t)hd_dtype_size(v->dtype);
}

static int same_shape(const hd_ir_value *a, const int64_t *shape, int ndim) {
    return a->ndim == ndim && !memcmp(a->shape, shape, (size_t)ndim * sizeof *shape);
}

/* ---- what generated code computes ---- */

static int supports_reduce(hd_op op, hd_dtype dt) {
    switch (op) {
    case HD_OP_SUM:
    case HD_OP_PROD: return hd_dtype_is_float(dt) || dt == HD_I64;
    case HD_OP_MEAN:
    case HD_OP_VAR:
    case HD_OP_STD:
    case HD_OP_LOGSUMEXP: return hd_dtype_is_float(dt);
    case HD_OP_MAX:
    case HD_OP_MIN: return 1;
    default: return 0;
    }
}

/* A reduction over more elements than memory holds (a broadcast view):
 * the eager kernel looks at interrupts and the time limit as it goes. */
static int reduce_too_long(const hd_ir_graph *g, const hd_ir_node *n) {
    const hd_ir_value *x = &g->values[n->in[0]];
    return hd_shape_numel(x->shape, x->ndim) > HD_PLAN_REDUCE_MAX;
}

int hd_plan_supports(const hd_ir_graph *g, const hd_ir_node *n, int flags, const char **why) {
    static const char *none = "";
    *why = none;
    if (n->op < 0) {
        *why = n->op == HD_IR_LOOP ? "a loop (its body is compiled on its own)" : "a callback";
        return 0;
    }
    hd_op op = (hd_op)n->op;
    hd_dtype dt = n->nin ? g->values[n->in[0]].dtype : g->values[n->out].dtype;
    if (hd_pass_op_is_elementwise(op)) {
        if (hd_cpu_backend.supports_op(op, dt)) return 1;
        *why = "not defined for this dtype";
        return 0;
    }
    switch (hd_op_infos[op].kind) {
    case HD_KIND_REDUCE:
        if (reduce_too_long(g, n)) {
            *why = "a reduction over more than 2^32 elements runs the eager kernel";
            return 0;
        }
        if (supports_reduce(op, dt)) return 1;
        if ((op == HD_OP_ARGMAX || op == HD_OP_ARGMIN) && (flags & HD_PLAN_EXTRA)) return 1;
        *why = op == HD_OP_ARGMAX || op == HD_OP_ARGMIN ? "argmax and argmin run the eager kernel"
                                                        : "not defined for this dtype";
        return 0;
    case HD_KIND_NN:
        if ((op == HD_OP_SOFTMAX || op == HD_OP_LOG_SOFTMAX || op == HD_OP_LAYER_NORM) &&
            hd_dtype_is_float(dt))
            return 1;
        if (op == HD_OP_MSE && (flags & HD_PLAN_EXTRA) && hd_dtype_is_float(dt) &&
            same_shape(&g->values[n->in[1]], g->values[n->in[0]].shape, g->values[n->in[0]].ndim))
            return 1;
        break;
    case HD_KIND_GRAD:
        if ((op == HD_OP_SOFTMAX_BWD || op == HD_OP_LOG_SOFTMAX_BWD ||
             (op == HD_OP_LAYER_NORM_BWD && n->attrs.ints[1] == 0)) &&
            (flags & HD_PLAN_EXTRA) && (dt == HD_F32 || dt == HD_F64))
            return 1;
        break;
    case HD_KIND_MATMUL: *why = "the BLAS library through the eager kernel"; return 0;
    case HD_KIND_CREATE: *why = "creation runs the eager kernel"; return 0;
    default: break;
    }
    *why = "no code generation for this op";
    return 0;
}

static hd_plan_kernel_kind node_kernel_kind(const hd_ir_node *n) {
    if (hd_pass_op_is_elementwise(n->op)) return HD_PLAN_K_ELEMENTWISE;
    if (hd_op_infos[n->op].kind == HD_KIND_REDUCE || n->op == HD_OP_MSE) return HD_PLAN_K_REDUCE;
    if (n->op == HD_OP_LAYER_NORM || n->op == HD_OP_LAYER_NORM_BWD) return HD_PLAN_K_LAYER_NORM;
    return HD_PLAN_K_SOFTMAX;
}

/* Is graph output i a reshape of all of a computed root (one dtype, same
 * elements, contiguous from its start) that is no output (nor the root of
 * an earlier such output)? */
static int plan_whole_view(const plan_state *s, int i) {
    const hd_ir_graph *g = s->g;
    int v = g->outputs[i].value, r = s->p->vals[v].root;
    const hd_ir_value *val = &g->values[v], *rv = &g->values[r];
    int64_t st[HD_MAX_DIMS];
    hd_contiguous_strides(val->shape, val->ndim, st);
    return r != v && s->def[r] >= 0 && g->nodes[s->def[r]].op >= 0 && !s->is_output[r] &&
           val->dtype == rv->dtype && s->elem_off[v] == 0 &&
           hd_shape_numel(val->shape, val->ndim) == hd_shape_numel(rv->shape, rv->ndim) &&
           !(val->ndim && memcmp(st, s->p->vals[v].strides, (size_t)val->ndim * sizeof *st));
}

/* An output that reshapes all of an intermediate (a gradient summed and
 * reshaped: a bias's) makes that intermediate a fresh output, and is
 * handed out over its memory rather than copied out of the arena; other
 * outputs over that memory are copied, so no two share it (a value given
 * twice is not handed out so: its second visit finds its root an output). */
static void plan_whole_views(plan_state *s) {
    const hd_ir_graph *g = s->g;
    for (int i = 0; i < g->noutputs; i++) {
        hd_plan_val *pv = &s->p->vals[g->outputs[i].value];
        pv->whole = (char)plan_whole_view(s, i);
        if (pv->whole) s->is_output[pv->root] = 1;
    }
}

/* ---- values: roots, strides and view offsets ---- */

static void plan_view(plan_state *s, const hd_ir_node *n) {
    const hd_ir_graph *g = s->g;
    hd_plan_val *x = &s->p->vals[n->in[0]], *y = &s->p->vals[n->out];
    const hd_ir_value *xv = &g->values[n->in[0]], *yv = &g->values[n->out];
    const hd_attrs *a = &n->attrs;
    int64_t off = s->elem_off[n->in[0]];
    y->root = x->root;
    if (n->op == HD_IR_LOOP_OUT) { /* the loop's value is a root: elem_off 0 */
        const hd_ir_loop *l = g->nodes[g->values[n->in[0]].index].loop;
        hd_contiguous_strides(yv->shape, yv->ndim, y->strides);
        s->elem_off[n->out] = l->offset[n->attrs.ints[0]] / hd_dtype_size(yv->dtype);
        return;
    }
    switch (n->op) {
    case HD_OP_PERMUTE:
        for (int i = 0; i < yv->ndim; i++)
            y->strides[i] = x->strides[a->shape[i] < 0 ? a->shape[i] + xv->ndim : a->shape[i]];
        break;
    case HD_OP_EXPAND: {
        int lead = yv->ndim - xv->ndim;
        for (int i = 0; i < yv->ndim; i++) {
            int j = i - lead;
            y->strides[i] = j < 0 || xv->shape[j] == 1 ? 0 : x->strides[j];
        }
        break;
    }
    case HD_OP_SLICE: {
        int k = 0;
        for (int i = 0; i < xv->ndim; i++) {
            if (a->len[i] > 0) off += a->start[i] * x->strides[i];
            if (!(a->drop_mask & (1u << i)))
                y->strides[k++] = hd_slice_stride(x->strides[i], a->step[i], a->len[i]);
        }
        break;
    }
    default: hd_contiguous_strides(yv->shape, yv->ndim, y->strides); break;
    }
    s->elem_off[n->out] = off;
}

static void plan_values(plan_state *s) {
    hd_ir_graph *g = s->g;
    for (int v = 0; v < g->nvalues; v++) {
        hd_plan_val *pv = &s->p->vals[v];
        pv->kernel = -1;
        pv->slot = -1;
        pv->root = v;
        pv->arena_off = -1;
        pv->into = -1;
        s->def[v] = -1;
        hd_contiguous_strides(g->values[v].shape, g->values[v].ndim, pv->strides);
    }
    for (int i = 0; i < g->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[i];
        if (n->out < 0) continue;
        s->def[n->out] = i;
        if (node_is_view(n)) plan_view(s, n);
    }
    for (int i = 0; i < g->noutputs; i++) s->is_output[g->outputs[i].value] = 1;
    plan_whole_views(s);
}

/* Users of each value (nodes of every kind), as compressed lists. */
static hd_status plan_uses(plan_state *s) {
    hd_ir_graph *g = s->g;
    int nv = g->nvalues, total = 0;
    s->use_start = hd_ir_arena_alloc(&g->arena, (size_t)(nv + 1) * sizeof(int));
    if (!s->use_start) return g->ctx->status;
    for (int i = 0; i < g->nnodes; i++) total += g->nodes[i].nin;
    s->use_list = hd_ir_arena_alloc(&g->arena, (size_t)(total + 1) * sizeof(int));
    if (!s->use_list) return g->ctx->status;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) s->use_start[g->nodes[i].in[k] + 1]++;
    for (int v = 0; v < nv; v++) s->use_start[v + 1] += s->use_start[v];
    int *fill = hd_ctx_calloc(g->ctx, (size_t)nv + 1, sizeof(int));
    if (!fill) return g->ctx->status;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) {
            int v = g->nodes[i].in[k];
            s->use_list[s->use_start[v] + fill[v]++] = i;
        }
    hd_ctx_free(g->ctx, fill, ((size_t)nv + 1) * sizeof(int));
    return HD_OK;
}

/* ---- pieces ---- */

static int piece_new(plan_state *s, int first, int kind) {
    plan_piece *pc = &s->pieces[s->npieces];
    memset(pc, 0, sizeof *pc);
    pc->first = first;
    pc->kind = kind;
    pc->nodes = hd_ir_arena_alloc(&s->g->arena, (size_t)s->g->nnodes * sizeof(int));
    if (!pc->nodes) return -1;
    return s->npieces++;
}

static void piece_add(plan_state *s, int pi, int node) {
    plan_piece *pc = &s->pieces[pi];
    pc->nodes[pc->nnodes++] = node;
    s->piece_of[node] = pi;
}

static hd_status plan_pieces(plan_state *s) {
    hd_ir_graph *g = s->g;
    int *open = hd_ctx_alloc(g->ctx, ((size_t)g->ngroups + 1) * sizeof(int));
    if (!open) return g->ctx->status;
    for (int i = 0; i <= g->ngroups; i++) open[i] = -1;
    hd_status st = HD_OK;
    for (int i = 0; i < g->nnodes && !st; i++) {
        const hd_ir_node *n = &g->nodes[i];
        const char *why;
        s->piece_of[i] = -1;
        if (node_is_view(n)) continue;
        int gi = n->group;
        if (!hd_plan_supports(g, n, s->flags, &why)) {
            if (gi >= 0) open[gi] = -1;
            continue;
        }
        hd_plan_kernel_kind kind = node_kernel_kind(n);
        int pi =
            gi >= 0 && kind != HD_PLAN_K_SOFTMAX && kind != HD_PLAN_K_LAYER_NORM ? open[gi] : -1;
        if (pi < 0 && (pi = piece_new(s, i, kind)) < 0) st = g->ctx->status;
        if (st) break;
        piece_add(s, pi, i);
        s->pieces[pi].kind = kind;
        if (gi >= 0) open[gi] = kind == HD_PLAN_K_ELEMENTWISE ? pi : -1;
    }
    hd_ctx_free(g->ctx, open, ((size_t)g->ngroups + 1) * sizeof(int));
    return st;
}

/* Can elementwise piece b run inside piece a (at a's first node)? Every
 * value b reads from outside both must be defined before a starts. */
static int piece_can_join(const plan_state *s, int a, int b) {
    const hd_ir_graph *g = s->g;
    const plan_piece *pa = &s->pieces[a], *pb = &s->pieces[b];
    if (pa->kind != HD_PLAN_K_ELEMENTWISE || pa->nnodes == 0 || pa->first > pb->first) return 0;
    for (int k = 0; k < pb->nnodes; k++) {
        const hd_ir_node *n = &g->nodes[pb->nodes[k]];
        for (int j = 0; j < n->nin; j++) {
            int d = s->def[n->in[j]];
            if (d >= 0 && d >= pa->first && s->piece_of[d] != a && s->piece_of[d] != b) return 0;
        }
    }
    return 1;
}

/* Move piece b's nodes into a, keeping node order. */
static void piece_join(plan_state *s, int a, int b) {
    plan_piece *pa = &s->pieces[a], *pb = &s->pieces[b];
    int i = pa->nnodes - 1, j = pb->nnodes - 1, k = pa->nnodes + pb->nnodes - 1;
    while (j >= 0)
        pa->nodes[k--] = i >= 0 && pa->nodes[i] > pb->nodes[j] ? pa->nodes[i--] : pb->nodes[j--];
    pa->nnodes += pb->nnodes;
    for (int m = 0; m < pb->nnodes; m++) s->piece_of[pb->nodes[m]] = a;
    pb->nnodes = 0;
}

/* The fusion pass opens a group at each elementwise node whose producers
 * are not in one (sigmoid(b) beside tanh(a * 2 + b)); such pieces join the
 * piece of one of their producers when the placement rule allows it, so a
 * chain of elementwise ops over the same inputs is one loop. */
static void plan_merge_pieces(plan_state *s) {
    const hd_ir_graph *g = s->g;
    for (int b = 0; b < s->npieces; b++) {
        plan_piece *pb = &s->pieces[b];
        if (pb->kind != HD_PLAN_K_ELEMENTWISE) continue;
        int done = 0;
        for (int k = 0; k < pb->nnodes && !done; k++) {
            const hd_ir_node *n = &g->nodes[pb->nodes[k]];
            for (int j = 0; j < n->nin && !done; j++) {
                int d = s->def[n->in[j]], a = d >= 0 ? s->piece_of[d] : -1;
                if (a >= 0 && a != b && piece_can_join(s, a, b)) {
                    piece_join(s, a, b);
                    done = 1;
                }
            }
        }
    }
}

/* ---- kernels ---- */

static int plan_kernel_new(plan_state *s, hd_plan_kernel_kind kind, const hd_ir_value *shape_of) {
    hd_plan *p = s->p;
    hd_plan_kernel *k = &p->kernels[p->nkernels];
    memset(k, 0, sizeof *k);
    k->kind = kind;
    k->ndim = shape_of->ndim;
    memcpy(k->shape, shape_of->shape, sizeof k->shape);
    k->numel = hd_shape_numel(k->shape, k->ndim);
    k->nodes = hd_ir_arena_alloc(&s->g->arena, (size_t)s->g->nnodes * sizeof(int));
    return k->nodes ? p->nkernels++ : -1;
}

static void kernel_add(plan_state *s, int ki, int node) {
    hd_plan_kernel *k = &s->p->kernels[ki];
    k->nodes[k->nnodes++] = node;
    s->p->kernel_of[node] = ki;
}

/* Can the piece's reduction compute its prologue of shape x: is every
 * node of that shape used only by such nodes and the reduction? */
static int prologue_fusable(const plan_state *s, const plan_piece *pc, const hd_ir_value *x) {
    const hd_ir_graph *g = s->g;
    int red = pc->nodes[pc->nnodes - 1];
    for (int k = 0; k < pc->nnodes - 1; k++) {
        const hd_ir_node *n = &g->nodes[pc->nodes[k]];
        const hd_ir_value *v = &g->values[n->out];
        if (!same_shape(v, x->shape, x->ndim)) continue;
        if (s->is_output[n->out]) return 0;
        for (int u = s->use_start[n->out]; u < s->use_start[n->out + 1]; u++) {
            int user = s->use_list[u];
            const hd_ir_value *uv = g->nodes[user].out >= 0 ? &g->values[g->nodes[user].out] : NULL;
            if (user == red) continue;
            if (s->piece_of[user] != s->piece_of[pc->nodes[k]] || !uv ||
                !same_shape(uv, x->shape, x->ndim))
                return 0;
        }
    }
    return 1;
}

/* Elementwise nodes of the piece (all, or those not of shape skip) as one
 * kernel per shape, smaller shapes first. */
static hd_status plan_shape_kernels(plan_state *s, const plan_piece *pc, int count,
                                    const hd_ir_value *skip) {
    hd_ir_graph *g = s->g;
    int first = s->p->nkernels;
    for (int k = 0; k < count; k++) {
        int node = pc->nodes[k];
        const hd_ir_value *v = &g->values[g->nodes[node].out];
        if (skip && same_shape(v, skip->shape, skip->ndim)) continue;
        int ki = -1;
        for (int j = first; j < s->p->nkernels && ki < 0; j++)
            if (same_shape(v, s->p->kernels[j].shape, s->p->kernels[j].ndim)) ki = j;
        if (ki < 0 && (ki = plan_kernel_new(s, HD_PLAN_K_ELEMENTWISE, v)) < 0)
            return g->ctx->status;
        kernel_add(s, ki, node);
    }
    /* insertion sort by (numel, ndim): a shape that feeds another is smaller */
    hd_plan_kernel *ks = s->p->kernels;
    for (int a = first + 1; a < s->p->nkernels; a++) {
        hd_plan_kernel t = ks[a];
        int b = a;
        for (; b > first && (ks[b - 1].numel > t.numel ||
                             (ks[b - 1].numel == t.numel && ks[b - 1].ndim > t.ndim));
             b--)
            ks[b] = ks[b - 1];
        ks[b] = t;
    }
    for (int j = first; j < s->p->nkernels; j++)
        for (int k = 0; k < ks[j].nnodes; k++) s->p->kernel_of[ks[j].nodes[k]] = j;
    return HD_OK;
}

static hd_status plan_piece_kernels(plan_state *s, plan_piece *pc) {
    hd_ir_graph *g = s->g;
    pc->kfirst = s->p->nkernels;
    if (pc->kind == HD_PLAN_K_ELEMENTWISE) {
        if (plan_shape_kernels(s, pc, pc->nnodes, NULL)) return g->ctx->status;
    } else {
        int last = pc->nodes[pc->nnodes - 1];
        const hd_ir_value *x = &g->values[g->nodes[last].in[0]];
        int fuse = pc->kind == HD_PLAN_K_REDUCE && !(s->flags & HD_PLAN_NO_FUSE) &&
                   prologue_fusable(s, pc, x);
        if (plan_shape_kernels(s, pc, pc->nnodes - 1, fuse ? x : NULL)) return g->ctx->status;
        int ki = plan_kernel_new(s, (hd_plan_kernel_kind)pc->kind, x);
        if (ki < 0) return g->ctx->status;
        for (int k = 0; fuse && k < pc->nnodes - 1; k++)
            if (same_shape(&g->values[g->nodes[pc->nodes[k]].out], x->shape, x->ndim))
                kernel_add(s, ki, pc->nodes[k]);
        kernel_add(s, ki, last);
    }
    pc->nk = s->p->nkernels - pc->kfirst;
    for (int j = pc->kfirst; j < s->p->nkernels; j++) {
        hd_plan_kernel *k = &s->p->kernels[j];
        const hd_ir_value *out = &g->values[g->nodes[k->nodes[k->nnodes - 1]].out];
        k->out_size = hd_shape_numel(out->shape, out->ndim);
    }
    return HD_OK;
}

/* ---- steps and stored values ---- */

/* Is matmul n a gemm step: f32, a 1-D or 2-D, b 2-D? */
static int node_is_gemm(const hd_ir_graph *g, const hd_ir_node *n) {
    if (n->op != HD_OP_MATMUL) return 0;
    const hd_ir_value *a = &g->values[n->in[0]], *b = &g->values[n->in[1]];
    const hd_ir_value *y = &g->values[n->out];
    return y->dtype == HD_F32 && a->dtype == HD_F32 && b->dtype == HD_F32 &&
           (a->ndim == 1 || a->ndim == 2) && b->ndim == 2;
}

/* Can kernel k run as the epilogue of gemm node n, on the rows of n's
 * output: an elementwise kernel of that shape that reads it? */
static int kernel_is_epilogue(const plan_state *s, const hd_plan_kernel *k, const hd_ir_node *n) {
    const hd_ir_value *y = &s->g->values[n->out];
    if (k->kind != HD_PLAN_K_ELEMENTWISE || !same_shape(y, k->shape, k->ndim)) return 0;
    for (int i = 0; i < k->nnodes; i++) {
        const hd_ir_node *m = &s->g->nodes[k->nodes[i]];
        for (int j = 0; j < m->nin; j++)
            if (m->in[j] == n->out) return 1;
    }
    return 0;
}

/* A gemm step takes the kernel step right after it as its epilogue when
 * the kernel qualifies; the kernel's step goes. */
static void plan_epilogues(plan_state *s) {
    hd_plan *p = s->p;
    int out = 0;
    for (int st = 0; st < p->nsteps; st++) {
        hd_plan_step *prev = out > 0 ? &p->steps[out - 1] : NULL, cur = p->steps[st];
        if (prev && prev->gemm && prev->epilogue < 0 && cur.kernel >= 0 &&
            kernel_is_epilogue(s, &p->kernels[cur.kernel], &s->g->nodes[prev->node])) {
            prev->epilogue = cur.kernel;
            p->nepilogues++;
            continue;
        }
        p->steps[out++] = cur;
    }
    p->nsteps = out;
}

static hd_status plan_steps(plan_state *s) {
    hd_ir_graph *g = s->g;
    hd_plan *p = s->p;
    p->steps = hd_ir_arena_alloc(&g->arena,
                                 ((size_t)g->nnodes + (size_t)p->nkernels + 1) * sizeof *p->steps);
    if (!p->steps) return g->ctx->status;
    for (int i = 0; i < g->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[i];
        int pi = s->piece_of[i];
        if (pi >= 0) {
            const plan_piece *pc = &s->pieces[pi];
            if (pc->first != i) continue;
            for (int j = pc->kfirst; j < pc->kfirst + pc->nk; j++)
                if (p->kernels[j].out_size > 0)
                    p->steps[p->nsteps++] = (hd_plan_step){j, -1, 0, -1};
            continue;
        }
        if (node_is_view(n)) continue;
        if (n->op >= 0 && val_bytes(&g->values[n->out]) == 0) continue; /* as interp */
        p->steps[p->nsteps++] = (hd_plan_step){-1, i, s->gemm && node_is_gemm(g, n), -1};
        if (n->op >= 0 && n->op != HD_OP_MATMUL) p->nfallback++;
    }
    if (s->gemm) plan_epilogues(s);
    return HD_OK;
}

static void plan_stored(plan_state *s) {
    hd_ir_graph *g = s->g;
    hd_plan *p = s->p;
    for (int i = 0; i < g->nnodes; i++) {
        int ki = p->kernel_of[i], v = g->nodes[i].out;
        if (ki < 0) continue;
        hd_plan_val *pv = &p->vals[v];
        pv->kernel = ki;
        const hd_plan_kernel *k = &p->kernels[ki];
        pv->stored =
            s->is_output[v] || (k->kind != HD_PLAN_K_ELEMENTWISE && k->nodes[k->nnodes - 1] == i);
        for (int u = s->use_start[v]; u < s->use_start[v + 1] && !pv->stored; u++)
            if (p->kernel_of[s->use_list[u]] != ki) pv->stored = 1;
    }
}

/* ---- arena ---- */

typedef struct plan_block {
    int64_t off, end;
    int root;
} plan_block;

/* Does value v own memory in the arena (a stored intermediate or a
 * runtime node's result that is not a fresh output)? */
static int needs_arena(const plan_state *s, int v) {
    const hd_plan_val *pv = &s->p->vals[v];
    int d = s->def[v];
    if (d < 0 || pv->root != v || pv->fresh || pv->into >= 0) return 0;
    return pv->kernel >= 0 ? pv->stored : 1;
}

/* First fit among the live blocks (sorted by offset). */
static int64_t arena_place(plan_block *live, int *nlive, int64_t size, int root) {
    int64_t off = 0;
    int at = 0;
    for (; at < *nlive; at++) {
        if (live[at].off - off >= size) break;
        if (live[at].end > off) off = live[at].end;
    }
    memmove(live + at + 1, live + at, (size_t)(*nlive - at) * sizeof *live);
    live[at] = (plan_block){off, off + size, root};
    (*nlive)++;
    return off;
}

static void arena_release(plan_block *live, int *nlive, int root) {
    for (int i = 0; i < *nlive; i++)
        if (live[i].root == root) {
            memmove(live + i, live + i + 1, (size_t)(*nlive - i - 1) * sizeof *live);
            (*nlive)--;
            return;
        }
}

/* Node `node` (of kernel ki, or -1) runs at step st: it defines its output
 * there and reads its inputs from outside its kernel. */
static void step_node_uses(plan_state *s, int node, int ki, int st, int *last, int *defstep) {
    const hd_ir_node *n = &s->g->nodes[node];
    if (n->out >= 0) defstep[n->out] = st;
    for (int k = 0; k < n->nin; k++) {
        int u = n->in[k], d = s->def[u];
        if (ki >= 0 && d >= 0 && s->p->kernel_of[d] == ki) continue;
        last[s->p->vals[u].root] = st;
    }
}

/* Step at which each root is last read (views count for their root); the
 * graph's outputs that are copied at the end live to the end. */
static void plan_last_use(plan_state *s, int *last, int *defstep) {
    hd_ir_graph *g = s->g;
    hd_plan *p = s->p;
    for (int v = 0; v < g->nvalues; v++) last[v] = defstep[v] = -1;
    for (int st = 0; st < p->nsteps; st++) {
        const hd_plan_step *sp = &p->steps[st];
        if (sp->kernel < 0) step_node_uses(s, sp->node, -1, st, last, defstep);
        int ki = sp->kernel >= 0 ? sp->kernel : sp->epilogue;
        for (int j = 0; ki >= 0 && j < p->kernels[ki].nnodes; j++)
            step_node_uses(s, p->kernels[ki].nodes[j], ki, st, last, defstep);
    }
    for (int i = 0; i < g->noutputs; i++) {
        int v = g->outputs[i].value;
        last[p->vals[v].root] = p->nsteps;
    }
}

/* The value of gemm step sp's epilogue that may take the product's memory
 * (-1: none): the epilogue's last node's output, when it is an arena value
 * of the product's dtype and size, the product is read by nothing else,
 * and the epilogue reads the product itself (no view of it). The last node
 * is stored after everything else of an element was computed, and reads
 * the product at the element it writes (same shape, no broadcast), so the
 * generated code loads each product element before it overwrites it;
 * hd_llvm_gen.c gives both the same pointer. */
static int epilogue_in_place(const plan_state *s, const hd_plan_step *sp, int st, const int *last) {
    const hd_ir_graph *g = s->g;
    const hd_plan *p = s->p;
    if (s->no_reuse || sp->kernel >= 0 || !sp->gemm || sp->epilogue < 0) return -1;
    const hd_plan_kernel *k = &p->kernels[sp->epilogue];
    int pr = g->nodes[sp->node].out, v = g->nodes[k->nodes[k->nnodes - 1]].out;
    const hd_ir_value *a = &g->values[pr], *b = &g->values[v];
    if (p->vals[pr].root != pr || last[pr] != st || !needs_arena(s, pr) || !needs_arena(s, v) ||
        a->dtype != b->dtype || val_bytes(a) != val_bytes(b))
        return -1;
    for (int i = 0; i < k->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[k->nodes[i]];
        for (int j = 0; j < n->nin; j++)
            if (p->vals[n->in[j]].root == pr && n->in[j] != pr) return -1;
    }
    return v;
}

/* ---- donated outputs ---- */

/* The step that runs kernel ki (as a kernel or as a gemm's epilogue), -1. */
static int kernel_step(const hd_plan *p, int ki) {
    for (int st = 0; st < p->nsteps; st++)
        if (p->steps[st].kernel == ki || (p->steps[st].kernel < 0 && p->steps[st].epilogue == ki))
            return st;
    return -1;
}

/* Does node n read a value whose memory is root r's (r itself, or, unless
 * only_views, a view of it)? */
static int node_reads_root(const plan_state *s, const hd_ir_node *n, int r, int only_views) {
    for (int j = 0; j < n->nin; j++)
        if (s->p->vals[n->in[j]].root == r && (!only_views || n->in[j] != r)) return 1;
    return 0;
}

/* May output o's value be computed straight into the memory of the input
 * it replaces (hd_ir_output.into)? Only where no one can tell: the value
 * is a node of an elementwise kernel of the input's dtype and shape, and
 * no node after it in the kernel reads the input (so each element is
 * loaded before the element is stored, at its own index: the generators
 * give the input and the value one pointer, and emit each node's loads and
 * store in node order); nothing reads the input after that step, nor a
 * view of it in that step (nor the gemm whose epilogue the kernel is,
 * which other threads may still be running); no graph output is the input
 * or the value twice; and every later step is generated code, which cannot
 * fail, so a run that fails leaves the input as it found it. An
 * optimizer's step writes its buffers and then the parameter in one
 * kernel: each goes where it was. */
static int donate_ok(const plan_state *s, int o, const int *last) {
    const hd_ir_graph *g = s->g;
    const hd_plan *p = s->p;
    int j = g->outputs[o].into, v = g->outputs[o].value;
    if (j < 0 || j >= g->ninputs) return 0;
    int iv = g->inputs[j].value, d = s->def[v];
    for (int k = 0; k < g->noutputs; k++)
        if (k != o && (g->outputs[k].value == v || g->outputs[k].into == j)) return 0;
    const hd_ir_value *a = &g->values[v], *b = &g->values[iv];
    if (d < 0 || p->vals[v].root != v || p->kernel_of[d] < 0 || a->dtype != b->dtype ||
        !same_shape(a, b->shape, b->ndim) || val_bytes(a) == 0)
        return 0;
    int ki = p->kernel_of[d], st = kernel_step(p, ki);
    const hd_plan_kernel *k = &p->kernels[ki];
    if (k->kind != HD_PLAN_K_ELEMENTWISE || st < 0 || last[iv] > st) return 0;
    int at = k->nnodes;
    for (int i = 0; i < k->nnodes; i++)
        if (k->nodes[i] == d) at = i;
    if (at == k->nnodes) return 0;
    for (int i = at + 1; i < k->nnodes; i++)
        if (node_reads_root(s, &g->nodes[k->nodes[i]], iv, 0)) return 0;
    if (p->steps[st].kernel < 0 && node_reads_root(s, &g->nodes[p->steps[st].node], iv, 0))
        return 0;
    for (int i = 0; i < k->nnodes; i++)
        if (node_reads_root(s, &g->nodes[k->nodes[i]], iv, 1)) return 0;
    for (int t = st + 1; t < p->nsteps; t++)
        if (p->steps[t].kernel < 0) return 0;
    return 1;
}

int hd_plan_input_shared(const hd_plan *p, int ninputs, hd_tensor *const *in,
                         hd_tensor *const *roots, int j) {
    const hd_storage *sj = in[j]->storage;
    for (int i = 0; i < ninputs; i++)
        if (i != j && in[i] && in[i]->storage == sj) return 1;
    for (int s = p->slot_const0; s < p->slot_out0; s++)
        if (roots[s]->storage == sj) return 1;
    return 0;
}

static void plan_donate(plan_state *s, const int *last) {
    hd_plan *p = s->p;
    for (int o = 0; o < s->g->noutputs; o++)
        if (donate_ok(s, o, last)) {
            p->vals[s->g->outputs[o].value].into = s->g->outputs[o].into;
            p->ndonated++;
        }
}

static hd_status plan_arena(plan_state *s, const int *last, const int *defstep) {
    hd_ir_graph *g = s->g;
    hd_plan *p = s->p;
    size_t nv = (size_t)g->nvalues + 1;
    plan_block *live = hd_ctx_alloc(g->ctx, nv * sizeof *live);
    if (!live) return g->ctx->status;
    int nlive = 0;
    int64_t top = 0;
    for (int st = 0; st < p->nsteps; st++) {
        int pr = -1, into = epilogue_in_place(s, &p->steps[st], st, last);
        if (into >= 0) pr = g->nodes[p->steps[st].node].out;
        for (int v = 0; v < g->nvalues; v++) {
            if (defstep[v] != st || !needs_arena(s, v)) continue;
            if (v == into && p->vals[pr].arena_off >= 0) { /* the product's block, passed on */
                p->vals[v].arena_off = p->vals[pr].arena_off;
                for (int i = 0; i < nlive; i++)
                    if (live[i].root == pr) live[i].root = v;
                continue;
            }
            int64_t size =
                ((int64_t)val_bytes(&g->values[v]) + PLAN_ALIGN - 1) & ~(int64_t)(PLAN_ALIGN - 1);
            if (size == 0) size = PLAN_ALIGN;
            p->vals[v].arena_off = arena_place(live, &nlive, size, v);
            if (p->vals[v].arena_off + size > top) top = p->vals[v].arena_off + size;
        }
        if (s->no_reuse) continue;
        for (int v = 0; v < g->nvalues; v++)
            if (p->vals[v].arena_off >= 0 && defstep[v] >= 0 && defstep[v] <= st && last[v] <= st)
                arena_release(live, &nlive, v);
    }
    p->arena_bytes = (size_t)top;
    hd_ctx_free(g->ctx, live, nv * sizeof *live);
    return HD_OK;
}

/* ---- slots and places ---- */

static hd_status plan_slots(plan_state *s) {
    hd_ir_graph *g = s->g;
    hd_plan *p = s->p;
    int nfresh = 0;
    for (int v = 0; v < g->nvalues; v++) {
        hd_plan_val *pv = &p->vals[v];
        int d = s->def[v];
        pv->fresh = s->is_output[v] && d >= 0 && pv->root == v && (pv->kernel < 0 || pv->stored) &&
                    pv->into < 0;
        nfresh += pv->fresh;
    }
    p->slot_in0 = 1;
    p->slot_const0 = 1 + g->ninputs;
    p->slot_out0 = p->slot_const0 + g->nconsts;
    p->nslots = p->slot_out0 + nfresh;
    p->slot_value = hd_ir_arena_alloc(&g->arena, (size_t)p->nslots * sizeof(int));
    if (!p->slot_value) return g->ctx->status;
    p->slot_value[0] = -1;
    for (int i = 0; i < g->ninputs; i++) {
        int v = g->inputs[i].value;
        p->slot_value[p->slot_in0 + i] = v;
        p->vals[v].slot = p->slot_in0 + i;
    }
    for (int v = 0; v < g->nvalues; v++)
        if (p->vals[v].into >= 0) p->vals[v].slot = p->slot_in0 + p->vals[v].into; /* offset 0 */
    for (int i = 0; i < g->nconsts; i++) {
        int v = g->consts[i].value;
        const hd_tensor *t = g->consts[i].t;
        p->slot_value[p->slot_const0 + i] = v;
        p->vals[v].slot = p->slot_const0 + i;
        p->vals[v].imm = t->numel == 1 && hd_tensor_is_cpu(t);
    }
    int k = p->slot_out0;
    for (int v = 0; v < g->nvalues; v++)
        if (p->vals[v].fresh) {
            p->slot_value[k] = v;
            p->vals[v].slot = k++;
        }
    return HD_OK;
}

/* Slot and byte offset of every value with memory; views follow their
 * root (values are placed in node order, so a root is placed first). */
static void plan_places(plan_state *s) {
    hd_ir_graph *g = s->g;
    hd_plan *p = s->p;
    for (int v = 0; v < g->nvalues; v++) {
        hd_plan_val *pv = &p->vals[v];
        if (pv->root == v) {
            if (pv->arena_off >= 0) {
                pv->slot = 0;
                pv->byte_off = pv->arena_off;
            } else if (pv->slot < 0 && s->def[v] >= 0 && (pv->kernel < 0 || pv->stored)) {
                pv->slot = 0; /* zero-size, or never computed: never read either */
                pv->byte_off = 0;
            }
            continue;
        }
        const hd_plan_val *r = &p->vals[pv->root];
        pv->slot = r->slot;
        pv->byte_off = r->byte_off + s->elem_off[v] * hd_dtype_size(g->values[v].dtype);
    }
}

static hd_status plan_alloc(plan_state *s) {
    hd_ir_graph *g = s->g;
    hd_plan *p = s->p;
    size_t nv = (size_t)g->nvalues + 1, nn = (size_t)g->nnodes + 1;
    p->vals = hd_ir_arena_alloc(&g->arena, nv * sizeof *p->vals);
    p->kernels = hd_ir_arena_alloc(&g->arena, nn * sizeof *p->kernels);
    p->kernel_of = hd_ir_arena_alloc(&g->arena, nn * sizeof(int));
    s->def = hd_ir_arena_alloc(&g->arena, nv * sizeof(int));
    s->is_output = hd_ir_arena_alloc(&g->arena, nv);
    s->elem_off = hd_ir_arena_alloc(&g->arena, nv * sizeof(int64_t));
    s->pieces = hd_ir_arena_alloc(&g->arena, nn * sizeof *s->pieces);
    s->piece_of = hd_ir_arena_alloc(&g->arena, nn * sizeof(int));
    if (!p->vals || !p->kernels || !p->kernel_of || !s->def || !s->is_output || !s->elem_off ||
        !s->pieces || !s->piece_of)
        return g->ctx->status;
    for (size_t i = 0; i < nn; i++) p->kernel_of[i] = -1;
    return HD_OK;
}

hd_status hd_plan_build(hd_ir_graph *g, int flags, hd_plan *p) {
    plan_state s;
    memset(&s, 0, sizeof s);
    memset(p, 0, sizeof *p);
    s.g = g;
    s.p = p;
    s.no_reuse = (flags & HD_PLAN_NO_REUSE) != 0;
    s.gemm = (flags & HD_PLAN_GEMM) != 0;
    s.flags = flags;
    p->g = g;
    if (plan_alloc(&s)) return g->ctx->status;
    plan_values(&s);
    if (plan_uses(&s) || plan_pieces(&s)) return g->ctx->status;
    if (!(flags & HD_PLAN_NO_FUSE)) plan_merge_pieces(&s);
    for (int i = 0; i < s.npieces; i++)
        if (s.pieces[i].nnodes && plan_piece_kernels(&s, &s.pieces[i])) return g->ctx->status;
    plan_stored(&s);
    if (plan_steps(&s)) return g->ctx->status;
    size_t nv = (size_t)g->nvalues + 1;
    int *last = hd_ctx_alloc(g->ctx, 2 * nv * sizeof(int)); /* and defstep */
    if (!last) return g->ctx->status;
    plan_last_use(&s, last, last + nv);
    if (flags & HD_PLAN_DONATE) plan_donate(&s, last);
    hd_status st = plan_slots(&s);
    if (!st) st = plan_arena(&s, last, last + nv);
    hd_ctx_free(g->ctx, last, 2 * nv * sizeof(int));
    if (st) return st;
    plan_places(&s);
    return HD_OK;
}

hd_tensor *hd_plan_whole_view(hd_ctx *ctx, const hd_plan *p, int v, hd_tensor *root) {
    const hd_ir_value *val = &p->g->values[v];
    return hd_tensor_view(ctx, root, val->shape, p->vals[v].strides, val->ndim, root->offset);
}

hd_status hd_plan_views(hd_ctx *ctx, const hd_plan *p, hd_tensor *const *roots, hd_tensor **vals) {
    const hd_ir_graph *g = p->g;
    for (int v = 0; v < g->nvalues; v++) {
        const hd_plan_val *pv = &p->vals[v];
        const hd_ir_value *val = &g->values[v];
        if (pv->slot < 0) continue;
        const hd_tensor *root = roots[pv->slot];
        hd_tensor *t = hd_tensor_view(ctx, root, val->shape, pv->strides, val->ndim, 0);
        if (!t) return ctx->status;
        int es = hd_dtype_size(val->dtype);
        int64_t base = (int64_t)root->offset * hd_dtype_size(root->dtype);
        t->dtype = val->dtype;
        t->offset = (base + pv->byte_off) / es;
        vals[v] = t;
    }
    return HD_OK;
}
