/* Autograd: per-tensor state, records, gradient contexts and backward. The
 * per-op rules are in hd_grad_rules.c; docs/autograd.md explains the
 * semantics. */
#include "hd_autograd.h"
#include "hd_backend.h"
#include "hd_trace.h"

#include <string.h>

/* What t->grad_info points to. */
typedef struct hd_grad_info {
    int requires_grad;  /* a leaf marked by param / requires_grad */
    uint64_t scope;     /* id of the gradient context it belongs to */
    hd_grad_node *node; /* the record that made it (a reference), or NULL */
    hd_tensor *grad;    /* accumulated gradient (leaves), or NULL */
    hd_tensor *pending; /* backward: this pass's gradient, added to grad at the end */
    uint64_t epoch;     /* backward pass that last touched pending */
    uint64_t use_epoch; /* backward pass that counted uses (a watched pass) */
    int64_t uses;       /* records of that pass still to pass a gradient on */
} hd_grad_info;

static const char hd_grad_freed_msg[] =
    "backward through records that were already freed (call backward once per forward, or keep "
    "the graph with retain_graph)";

/* ---- small helpers ---- */

static hd_grad_scope *cur_scope(hd_ctx *ctx) {
    return ctx->grad_scope ? ctx->grad_scope : &ctx->grad_root;
}

static uint64_t cur_scope_id(const hd_ctx *ctx) {
    return ctx->grad_scope ? ctx->grad_scope->id : ctx->grad_root.id;
}

/* t takes part in the gradients of the context with id s: a leaf marked
 * there, or the output of one of its records that has not been cleared. */
static int tracked(const hd_tensor *t, uint64_t s) {
    const hd_grad_info *gi = t->grad_info;
    if (!gi || gi->scope != s) return 0;
    return gi->node ? !gi->node->cleared : gi->requires_grad;
}

static hd_grad_info *info_get(hd_ctx *ctx, hd_tensor *t) {
    if (!t->grad_info) t->grad_info = hd_ctx_calloc(ctx, 1, sizeof(hd_grad_info));
    return t->grad_info;
}

/* A growable array of pointers through the context's allocator. */
typedef struct {
    void **p;
    size_t n, cap;
} hd_grad_vec;

static hd_status vec_push(hd_ctx *ctx, hd_grad_vec *v, void *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 16;
        void **p = hd_ctx_realloc(ctx, v->p, v->cap * sizeof *p, cap * sizeof *p);
        if (!p) return ctx->status;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = x;
    return HD_OK;
}

static void vec_free(hd_ctx *ctx, hd_grad_vec *v) {
    if (v->p) hd_ctx_free(ctx, v->p, v->cap * sizeof *v->p);
    memset(v, 0, sizeof *v);
}

/* ---- records ---- */

static void node_unlink(hd_grad_node *n) {
    if (!n->pprev) return;
    *n->pprev = n->next;
    if (n->next) n->next->pprev = n->pprev;
    n->scope->nrecords--;
    n->next = NULL;
    n->pprev = NULL;
    n->scope = NULL;
}

static void node_link(hd_grad_scope *s, hd_grad_node *n) {
    n->scope = s;
    n->next = s->records;
    n->pprev = &s->records;
    if (s->records) s->records->pprev = &n->next;
    s->records = n;
    s->nrecords++;
}

/* Drop what a record holds (saved tensors, edges); records whose last
 * reference goes are pushed on *stack for the caller to free, so freeing a
 * long chain needs no recursion. */
static void node_strip(hd_grad_node *n, hd_grad_node **stack) {
    if (n->custom && n->custom->free && n->custom_ud) n->custom->free(n->ctx, n->custom_ud);
    n->custom_ud = NULL;
    for (int i = 0; i <= n->nin; i++) {
        hd_tensor_unref(n->saved[i]);
        n->saved[i] = NULL;
    }
    for (int i = 0; i < n->nin; i++) {
        hd_grad_edge *e = &n->edges[i];
        if (e->node && --e->node->refcount == 0) {
            e->node->free_next = *stack;
            *stack = e->node;
        }
        e->node = NULL;
        hd_tensor_unref(e->leaf); /* a leaf has no record: no recursion */
        e->leaf = NULL;
    }
}

static void node_drop(hd_grad_node *n, hd_grad_node **stack) {
    node_strip(n, stack);
    n->live = 0;
    node_unlink(n);
}

static void node_free_stack(hd_grad_node *stack) {
    while (stack) {
        hd_grad_node *m = stack;
        stack = m->free_next;
        node_drop(m, &stack);
        hd_tensor_unref(m->grad);
        hd_ctx_free(m->ctx, m, m->nbytes);
    }
}

static void node_unref(hd_grad_node *n) {
    if (!n || --n->refcount > 0) return;
    n->free_next = NULL;
    node_free_stack(n);
}

/* Free a record's contents now; the record itself stays while referenced. */
static void node_release(hd_grad_node *n) {
    hd_grad_node *stack = NULL;
    node_drop(n, &stack);
    node_free_stack(stack);
}

/* The same geometry: inside a trace it stands for the same IR value. */
static hd_tensor *detached_view(hd_ctx *ctx, hd_tensor *t) {
    hd_tensor *v = hd_tensor_view(ctx, t, t->shape, t->strides, t->ndim, t->offset);
    if (v) {
        v->number = t->number;
        v->trace_ref = t->trace_ref;
    }
    return v;
}

static int rule_saves(unsigned save, int i) {
    if ((save & HD_GRAD_SAVE_ALL_IN) == HD_GRAD_SAVE_ALL_IN) return 1;
    return i < 31 && (save & (1u << i));
}

static hd_grad_node *node_new(hd_ctx *ctx, int nin) {
    size_t nb = sizeof(hd_grad_node) + (size_t)nin * sizeof(hd_grad_edge) +
                (size_t)(nin + 1) * (sizeof(hd_tensor *) + sizeof(uint64_t));
    hd_grad_node *n = hd_ctx_calloc(ctx, 1, nb);
    if (!n) return NULL;
    n->nbytes = nb;
    n->ctx = ctx;
    n->nin = nin;
    n->edges = (hd_grad_edge *)(n + 1);
    n->saved = (hd_tensor **)(n->edges + nin);
    n->saved_version = (uint64_t *)(n->saved + nin + 1);
    n->live = 1;
    n->watch = ctx->grad_watch;
    n->seq = ++ctx->grad_seq;
    return n;
}

static size_t watch_live_in(const hd_grad_scope *s, uint32_t gen) {
    size_t live = 0;
    for (const hd_grad_node *n = s->records; n; n = n->next) live += n->live && n->watch >= gen;
    return live;
}

uint32_t hd_grad_watch_next(hd_ctx *ctx) {
    if (++ctx->grad_watch_seq == 0) ++ctx->grad_watch_seq;
    return ctx->grad_watch_seq;
}

size_t hd_grad_watch_live(const hd_ctx *ctx, uint32_t gen) {
    size_t live = 0;
    int root = 0;
    for (const hd_grad_scope *s = ctx->grad_scope; s; s = s->parent) {
        live += watch_live_in(s, gen);
        root |= s == &ctx->grad_root;
    }
    return root ? live : live + watch_live_in(&ctx->grad_root, gen);
}

/* t's .grad or requires_grad is about to change. */
static void grad_note_write(hd_ctx *ctx, hd_tensor *t) {
    if (ctx->grad_write) ctx->grad_write(ctx, ctx->grad_write_ud, t);
}

static hd_status node_save(hd_ctx *ctx, hd_grad_node *n, int i, hd_tensor *t) {
    n->saved[i] = detached_view(ctx, t);
    if (!n->saved[i]) return ctx->status;
    n->saved_version[i] = t->storage ? t->storage->version : 0;
    return HD_OK;
}

/* Edges to the inputs that take part in the current context; saved
 * tensors as the rule asks. */
static hd_status node_fill(hd_ctx *ctx, hd_grad_node *n, const hd_grad_rule *rule,
                           hd_tensor *const *in, hd_tensor *const *kin, hd_tensor *out,
                           uint64_t sid) {
    for (int i = 0; i < n->nin; i++) {
        hd_grad_edge *e = &n->edges[i];
        e->dtype = in[i]->dtype;
        e->ndim = in[i]->ndim;
        e->be = in[i]->storage ? in[i]->storage->backend : NULL;
        e->device = in[i]->storage ? in[i]->storage->device : 0;
        memcpy(e->shape, in[i]->shape, sizeof e->shape);
        if (tracked(in[i], sid)) {
            hd_grad_info *gi = in[i]->grad_info;
            if (gi->node) {
                e->node = gi->node;
                e->node->refcount++;
            } else {
                e->leaf = hd_tensor_ref(in[i]);
            }
        }
        if (rule_saves(rule->save, i) && node_save(ctx, n, i, kin[i])) return ctx->status;
    }
    if ((rule->save & HD_GRAD_SAVE_OUT) && node_save(ctx, n, n->nin, out)) return ctx->status;
    return HD_OK;
}

/* Whether n's output is a view (through view ops only) of a leaf that
 * requires grad, such as p[0] of a param p. */
static int node_views_leaf(const hd_grad_node *n) {
    for (; n && n->live && hd_op_infos[n->op].kind == HD_KIND_VIEW && n->nin == 1;
         n = n->edges[0].node)
        if (n->edges[0].leaf) return 1;
    return 0;
}

/* A watched context's op reads a tensor that its enclosing context tracks:
 * a gradient through this op would be wanted there, and is not recorded. */
static void note_outer(hd_ctx *ctx, hd_grad_scope *s, hd_op op, hd_tensor *const *in, int nin,
                       hd_dtype out_dtype) {
    uint64_t pid = s->parent ? s->parent->id : ctx->grad_root.id;
    if (!hd_op_infos[op].differentiable || !hd_dtype_is_float(out_dtype)) return;
    for (int i = 0; i < nin; i++)
        if (in[i] && tracked(in[i], pid)) s->read_outer = 1;
}

int hd_autograd_wants(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin, hd_dtype out_dtype) {
    hd_grad_scope *ws = ctx->grad_scope;
    if (ws && ws->watch_outer) note_outer(ctx, ws, op, in, nin, out_dtype);
    if (ctx->grad_disabled) return 0;
    uint64_t sid = cur_scope_id(ctx);
    int any = 0;
    for (int i = 0; i < nin && !any; i++) any = in[i] && tracked(in[i], sid);
    if (!any) return 0;
    if (op == HD_OP_ASSIGN) {
        const hd_grad_info *dst = in[0]->grad_info;
        if (tracked(in[0], sid) && dst->node && node_views_leaf(dst->node)) {
            hd_error(ctx, HD_ERR_RUNTIME,
                     "in-place write into a view of a leaf tensor that requires grad (a param): "
                     "its gradient would be wrong (write under no_grad, as an optimizer step "
                     "does, or into a clone)");
            return -1;
        }
        if (tracked(in[0], sid) && dst->node) {
            hd_error(ctx, HD_ERR_RUNTIME,
                     "in-place write into a tensor computed from tensors that require grad: its "
                     "gradient would be wrong (write into a clone, build the value with "
                     "where(...), or write under no_grad)");
            return -1;
        }
        if (nin > 1 && in[1] && tracked(in[1], sid)) {
            hd_error(ctx, HD_ERR_RUNTIME,
                     "in-place write of a value that requires grad: writes are not recorded, so "
                     "its gradient would be lost (build the tensor with concat or where, or "
                     "detach the value)");
            return -1;
        }
        return 0; /* writing into a leaf (e.g. an optimizer step) is allowed */
    }
    return hd_op_infos[op].differentiable && hd_dtype_is_float(out_dtype);
}

hd_status hd_autograd_record(hd_ctx *ctx, hd_op op, hd_tensor *const *in, hd_tensor *const *kin,
                             int nin, const hd_attrs *attrs, hd_tensor *out, uint64_t rng_base) {
    const hd_grad_rule *rule = hd_grad_rule_of(op);
    if (!rule || !hd_dtype_is_float(out->dtype)) return HD_OK;
    HD_ASSERT(out->grad_info == NULL);
    hd_grad_scope *s = cur_scope(ctx);
    hd_grad_node *n = node_new(ctx, nin);
    hd_grad_info *gi = n ? hd_ctx_calloc(ctx, 1, sizeof *gi) : NULL;
    if (!gi || node_fill(ctx, n, rule, in, kin, out, s->id)) {
        hd_ctx_free(ctx, gi, sizeof *gi);
        if (n) {
            n->refcount = 1;
            node_unref(n);
        }
        return ctx->status;
    }
    n->refcount = 1;
    n->op = op;
    n->attrs = *attrs;
    n->out_dtype = out->dtype;
    n->out_ndim = out->ndim;
    memcpy(n->out_shape, out->shape, sizeof n->out_shape);
    n->rng_key = ctx->rng_seed;
    n->rng_base = rng_base;
    n->trace_ref = out->trace_ref;
    node_link(s, n);
    gi->scope = s->id;
    gi->node = n;
    out->grad_info = gi;
    return HD_OK;
}

hd_status hd_autograd_record_custom(hd_ctx *ctx, hd_tensor *const *in, int nin, hd_tensor *out,
                                    const hd_grad_custom *fn, void *ud) {
    static const hd_grad_rule none = {0};
    hd_grad_scope *s = cur_scope(ctx);
    hd_grad_node *n = out->grad_info ? NULL : node_new(ctx, nin);
    hd_grad_info *gi = n ? hd_ctx_calloc(ctx, 1, sizeof *gi) : NULL;
    if (!gi || node_fill(ctx, n, &none, in, in, out, s->id)) {
        hd_ctx_free(ctx, gi, sizeof *gi);
        if (n) {
            n->refcount = 1;
            node_unref(n);
        }
        if (fn->free) fn->free(ctx, ud);
        return out->grad_info ? hd_error(ctx, HD_ERR_RUNTIME, "internal error: recorded twice")
                              : ctx->status;
    }
    n->refcount = 1;
    n->op = HD_OP_COPY; /* for messages: the rule is fn's */
    n->custom = fn;
    n->custom_ud = ud;
    n->trace_ref = out->trace_ref;
    n->out_dtype = out->dtype;
    n->out_ndim = out->ndim;
    memcpy(n->out_shape, out->shape, sizeof n->out_shape);
    node_link(s, n);
    gi->scope = s->id;
    gi->node = n;
    out->grad_info = gi;
    return HD_OK;
}

int hd_grad_is_spent(const hd_tensor *t) {
    const hd_grad_info *gi = t->grad_info;
    return gi && gi->node && !gi->node->live && !gi->node->cleared;
}

hd_status hd_autograd_mark_spent(hd_ctx *ctx, hd_tensor *t) {
    if (t->grad_info || !hd_dtype_is_float(t->dtype)) return HD_OK;
    hd_grad_node *n = node_new(ctx, 0);
    hd_grad_info *gi = n ? hd_ctx_calloc(ctx, 1, sizeof *gi) : NULL;
    if (!gi) {
        if (n) hd_ctx_free(ctx, n, n->nbytes);
        return ctx->status;
    }
    n->refcount = 1;
    n->live = 0;
    n->op = HD_OP_COPY;
    gi->scope = cur_scope_id(ctx);
    gi->node = n;
    t->grad_info = gi;
    return HD_OK;
}

void hd_autograd_tensor_free(hd_tensor *t) {
    hd_grad_info *gi = t->grad_info;
    t->grad_info = NULL;
    node_unref(gi->node);
    hd_tensor_unref(gi->grad);
    hd_tensor_unref(gi->pending);
    hd_ctx_free(t->ctx, gi, sizeof *gi);
}

/* ---- per-tensor API ---- */

hd_status hd_grad_set_requires(hd_ctx *ctx, hd_tensor *t, int on) {
    uint64_t sid = cur_scope_id(ctx);
    hd_grad_info *gi = t->grad_info;
    if (gi && gi->scope == sid && gi->node && !gi->node->cleared)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "requires_grad can only be changed on leaf tensors; this one was computed "
                        "from tensors that require grad (use detach() to get a leaf)");
    grad_note_write(ctx, t);
    if (!on) {
        if (gi && !gi->node) gi->requires_grad = 0;
        return HD_OK;
    }
    if (!hd_dtype_is_float(t->dtype))
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "requires_grad: gradient of %s tensor (%s) is not defined; only float "
                        "tensors can require grad",
                        t->dtype == HD_BOOL ? "a bool" : "an integer", hd_dtype_name(t->dtype));
    if (!(gi = info_get(ctx, t))) return ctx->status;
    /* a tensor from another context, or one whose record was cleared,
     * becomes a leaf of this one */
    node_unref(gi->node);
    gi->node = NULL;
    gi->requires_grad = 1;
    gi->scope = sid;
    return HD_OK;
}

int hd_grad_requires(const hd_ctx *ctx, const hd_tensor *t) {
    return tracked(t, cur_scope_id(ctx));
}

int hd_grad_has_history(const hd_tensor *t) {
    const hd_grad_info *gi = t->grad_info;
    if (!gi) return 0;
    return gi->node ? gi->node->live || gi->node->cleared : gi->requires_grad;
}

int hd_grad_is_leaf(const hd_ctx *ctx, const hd_tensor *t) {
    const hd_grad_info *gi = t->grad_info;
    return !(gi && gi->node && !gi->node->cleared && gi->scope == cur_scope_id(ctx));
}

hd_tensor *hd_grad_get(const hd_tensor *t) {
    const hd_grad_info *gi = t->grad_info;
    return gi ? gi->grad : NULL;
}

hd_status hd_grad_set(hd_ctx *ctx, hd_tensor *t, hd_tensor *g) {
    hd_grad_info *gi = t->grad_info;
    grad_note_write(ctx, t);
    if (!g) {
        if (gi) {
            hd_tensor_unref(gi->grad);
            gi->grad = NULL;
        }
        return HD_OK;
    }
    char sa[128], sb[128];
    if (g->ndim != t->ndim || memcmp(g->shape, t->shape, (size_t)t->ndim * sizeof *t->shape))
        return hd_error(ctx, HD_ERR_RUNTIME, "grad of shape %s assigned to a tensor of shape %s",
                        hd_shape_str(g->shape, g->ndim, sa, sizeof sa),
                        hd_shape_str(t->shape, t->ndim, sb, sizeof sb));
    if (!hd_dtype_is_float(t->dtype))
        return hd_error(ctx, HD_ERR_RUNTIME, "a %s tensor cannot have a gradient",
                        hd_dtype_name(t->dtype));
    if (!(gi = info_get(ctx, t))) return ctx->status;
    hd_tensor *v = NULL;
    int was = hd_grad_set_enabled(ctx, 0);
    if (g->dtype != t->dtype)
        hd_op_cast(ctx, g, t->dtype, &v);
    else
        v = detached_view(ctx, g);
    hd_grad_set_enabled(ctx, was);
    if (!v) return ctx->status;
    v->number = 0; /* a gradient is a tensor, even one given as a number */
    hd_tensor_unref(gi->grad);
    gi->grad = v;
    return HD_OK;
}

void hd_grad_zero(hd_ctx *ctx, hd_tensor *const *ts, int n) {
    for (int i = 0; i < n; i++)
        if (ts[i]) hd_grad_set(ctx, ts[i], NULL);
}

hd_tensor *hd_grad_detach(hd_ctx *ctx, hd_tensor *t) {
    return detached_view(ctx, t);
}

int hd_grad_set_enabled(hd_ctx *ctx, int on) {
    int was = !ctx->grad_disabled;
    ctx->grad_disabled = !on;
    return was;
}

int hd_grad_is_enabled(const hd_ctx *ctx) {
    return !ctx->grad_disabled;
}

/* ---- gradient contexts ---- */

/* Free every live record of s: pin them all (so none is freed while the
 * list is walked), drop their contents, then unpin. Tensors keep the
 * emptied records, marked cleared, until they go. */
static void scope_clear(hd_grad_scope *s) {
    hd_grad_node *chain = NULL;
    for (hd_grad_node *n = s->records; n; n = n->next) {
        n->refcount++;
        n->cleared = 1;
        n->free_next = chain;
        chain = n;
    }
    hd_grad_node *stack = NULL;
    for (hd_grad_node *n = chain; n; n = n->free_next) node_drop(n, &stack);
    node_free_stack(stack); /* only records already emptied by backward */
    while (chain) {
        hd_grad_node *next = chain->free_next;
        node_unref(chain);
        chain = next;
    }
}

static hd_grad_scope *scope_new(hd_ctx *ctx, int held) {
    hd_grad_scope *s = hd_ctx_calloc(ctx, 1, sizeof *s);
    if (!s) return NULL;
    s->id = ++ctx->grad_ids;
    s->held = held;
    return s;
}

/* Take s off the stack (it must be the innermost) and restore the grad
 * mode it found. */
static void scope_leave(hd_ctx *ctx, hd_grad_scope *s) {
    ctx->grad_scope = s->parent;
    ctx->grad_disabled = s->outer_disabled;
    s->parent = NULL;
    s->entered = 0;
}

static void scope_free(hd_ctx *ctx, hd_grad_scope *s) {
    scope_clear(s);
    hd_ctx_free(ctx, s, sizeof *s);
}

hd_status hd_grad_context_push(hd_ctx *ctx) {
    hd_grad_scope *s = scope_new(ctx, 0);
    if (!s) return ctx->status;
    return hd_grad_context_enter(ctx, s);
}

hd_status hd_grad_context_pop(hd_ctx *ctx) {
    hd_grad_scope *s = ctx->grad_scope;
    if (!s) return hd_error(ctx, HD_ERR_RUNTIME, "no gradient context to end");
    scope_leave(ctx, s);
    if (!s->held) scope_free(ctx, s);
    return HD_OK;
}

hd_grad_scope *hd_grad_context_new(hd_ctx *ctx) {
    return scope_new(ctx, 1);
}

hd_status hd_grad_context_enter(hd_ctx *ctx, hd_grad_scope *s) {
    if (s->entered)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "grad_context: this context is already entered (a context cannot be "
                        "entered again inside its own block)");
    s->parent = ctx->grad_scope;
    s->outer_disabled = ctx->grad_disabled;
    s->entered = 1;
    ctx->grad_disabled = 0;
    ctx->grad_scope = s;
    return HD_OK;
}

void hd_grad_context_free(hd_ctx *ctx, hd_grad_scope *s) {
    if (!s) return;
    /* normally left already; at a teardown, leave it and what is inside it */
    while (s->entered) hd_grad_context_pop(ctx);
    scope_free(ctx, s);
}

uint64_t hd_grad_context_id(const hd_grad_scope *s) {
    return s->id;
}

int hd_grad_context_entered(const hd_grad_scope *s) {
    return s->entered;
}

size_t hd_grad_context_records(const hd_grad_scope *s) {
    return s->nrecords;
}

int hd_grad_context_depth(const hd_ctx *ctx) {
    int d = 0;
    for (const hd_grad_scope *s = ctx->grad_scope; s; s = s->parent) d++;
    return d;
}

void hd_grad_clear_tape(hd_ctx *ctx) {
    scope_clear(cur_scope(ctx));
}

size_t hd_grad_record_count(const hd_ctx *ctx) {
    return ctx->grad_scope ? ctx->grad_scope->nrecords : ctx->grad_root.nrecords;
}

void hd_grad_shutdown(hd_ctx *ctx) {
    while (ctx->grad_scope) hd_grad_context_pop(ctx);
    scope_clear(&ctx->grad_root);
}

/* ---- backward ---- */

typedef struct {
    hd_ctx *ctx;
    uint64_t epoch;
    int retain;
    int create;         /* create_graph: rules are recorded, saved tensors attached */
    hd_grad_vec nodes;  /* every record reached, pinned */
    hd_grad_vec leaves; /* leaves that received a gradient, referenced */
    /* hd_grad_partial: the gradients of these n_only tensors alone, summed
     * in got[]; no .grad changes, and a record that made one of them is
     * not followed further */
    hd_tensor *const *only;
    hd_tensor **got;
    int n_only;
    const hd_grad_watcher *watch; /* told of each leaf's complete gradient */
} hd_grad_pass;

/* Which of the tensors asked for t is (a leaf), or whose record n is; -1:
 * none. */
static int pass_only_leaf(const hd_grad_pass *p, const hd_tensor *t) {
    for (int k = 0; k < p->n_only; k++)
        if (p->only[k] == t) return k;
    return -1;
}

static int pass_only_node(const hd_grad_pass *p, const hd_grad_node *n) {
    for (int k = 0; k < p->n_only; k++) {
        const hd_grad_info *gi = p->only[k]->grad_info;
        if (gi && gi->node == n) return k;
    }
    return -1;
}

static hd_tensor *run1(hd_ctx *ctx, hd_op op, hd_tensor *a, const hd_attrs *attrs) {
    hd_tensor *out = NULL;
    hd_op_run(ctx, op, &a, 1, attrs, &out);
    return out;
}

static hd_tensor *run2(hd_ctx *ctx, hd_op op, hd_tensor *a, hd_tensor *b) {
    hd_tensor *in[2] = {a, b}, *out = NULL;
    hd_op_run(ctx, op, in, 2, NULL, &out);
    return out;
}

/* Sum g over the dims it was broadcast along so that it has the input's
 * shape, then cast it to the input's dtype. Consumes *g. */
static hd_status grad_to_input(hd_ctx *ctx, hd_tensor **g, const hd_grad_edge *e, hd_op op) {
    hd_tensor *t = *g;
    int same =
        t->ndim == e->ndim && !memcmp(t->shape, e->shape, (size_t)e->ndim * sizeof *e->shape);
    if (!same) {
        hd_attrs at;
        memset(&at, 0, sizeof at);
        int lead = t->ndim - e->ndim, ok = lead >= 0;
        for (int i = 0; ok && i < t->ndim; i++) {
            int64_t want = i < lead ? 1 : e->shape[i - lead];
            if (i < lead || (want == 1 && t->shape[i] != 1))
                at.axes[at.naxes++] = i;
            else if (want != t->shape[i])
                ok = 0;
        }
        if (!ok && t->numel != hd_shape_numel(e->shape, e->ndim)) {
            char sa[128], sb[128];
            hd_tensor_unref(t);
            *g = NULL;
            return hd_error(ctx, HD_ERR_RUNTIME,
                            "internal error: the gradient of %s has shape %s for an input of "
                            "shape %s",
                            hd_op_name(op), hd_shape_str(t->shape, t->ndim, sa, sizeof sa),
                            hd_shape_str(e->shape, e->ndim, sb, sizeof sb));
        }
        hd_tensor *s = t;
        if (ok && at.naxes) {
            at.keepdim = 1;
            s = run1(ctx, HD_OP_SUM, t, &at);
            hd_tensor_unref(t);
            if (!s) return *g = NULL, ctx->status;
        }
        memset(&at, 0, sizeof at);
        at.nshape = e->ndim;
        memcpy(at.shape, e->shape, sizeof at.shape);
        t = run1(ctx, HD_OP_RESHAPE, s, &at);
        hd_tensor_unref(s);
        if (!t) return *g = NULL, ctx->status;
    }
    if (t->dtype != e->dtype) {
        hd_tensor *c = NULL;
        hd_op_cast(ctx, t, e->dtype, &c);
        hd_tensor_unref(t);
        t = c;
    }
    if (t && e->be && t->storage &&
        (t->storage->backend != e->be || t->storage->device != e->device)) {
        if (ctx->grad_create && hd_grad_requires(ctx, t)) {
            hd_tensor_unref(t);
            *g = NULL;
            return hd_error(ctx, HD_ERR_RUNTIME,
                            "backward(create_graph = true): a gradient "
                            "that crosses devices (into %s's input) is not differentiable",
                            hd_op_name(op));
        }
        hd_tensor *m = NULL;
        hd_tensor_to_device(ctx, t, e->be, e->device, &m);
        hd_tensor_unref(t);
        t = m;
    }
    *g = t;
    return t ? HD_OK : ctx->status;
}

/* a + b as the gradients' own sum, outside a strategy's precision (which
 * would make an f32 .grad f64 under precision "full"): in their dtype. */
static hd_tensor *grad_sum(hd_ctx *ctx, hd_tensor *a, hd_tensor *b) {
    int mode = ctx->autocast;
    ctx->autocast = HD_AUTOCAST_OFF;
    hd_tensor *s = run2(ctx, HD_OP_ADD, a, b);
    ctx->autocast = mode;
    return s;
}

/* *acc += g (consumes g). */
static hd_status accumulate(hd_ctx *ctx, hd_tensor **acc, hd_tensor *g) {
    if (!*acc) {
        *acc = g;
        return HD_OK;
    }
    hd_tensor *s = grad_sum(ctx, *acc, g);
    hd_tensor_unref(g);
    if (!s) return ctx->status;
    hd_tensor_unref(*acc);
    *acc = s;
    return HD_OK;
}

static hd_status leaf_accumulate(hd_grad_pass *p, hd_tensor *leaf, hd_tensor *g) {
    hd_grad_info *gi = leaf->grad_info;
    if (p->only) {
        int k = pass_only_leaf(p, leaf);
        if (k < 0) {
            hd_tensor_unref(g);
            return HD_OK;
        }
        return accumulate(p->ctx, &p->got[k], g);
    }
    if (gi->epoch != p->epoch) {
        if (vec_push(p->ctx, &p->leaves, leaf)) {
            hd_tensor_unref(g);
            return p->ctx->status;
        }
        hd_tensor_ref(leaf);
        gi->epoch = p->epoch;
        hd_tensor_unref(gi->pending);
        gi->pending = NULL;
    }
    return accumulate(p->ctx, &gi->pending, g);
}

static hd_status check_saved(hd_ctx *ctx, const hd_grad_node *n) {
    for (int i = 0; i <= n->nin; i++) {
        const hd_tensor *t = n->saved[i];
        if (t && t->storage && t->storage->version != n->saved_version[i])
            return hd_error(ctx, HD_ERR_RUNTIME,
                            "a tensor needed by the gradient of %s was changed in place (after "
                            "the forward pass used it; write into a clone instead)",
                            hd_op_name(n->op));
    }
    return HD_OK;
}

/* The zeros a rule makes (a slice's gradient written into zeros, a
 * concat's padding) go where n's gradient is, its output's device, not
 * the loss's: the rule's kernels read them with the gradient. Returns
 * the previous place. */
static hd_place rule_place_push(hd_ctx *ctx, const hd_grad_node *n) {
    hd_place p = {ctx->place_backend, ctx->place_device};
    if (n->grad && n->grad->storage) p = hd_place_of(n->grad);
    return hd_place_push(ctx, p.backend ? p.backend : &hd_cpu_backend, p.device);
}

/* create_graph: a saved tensor as one with the history of what it saved
 * (input i's record or leaf; the output: n itself), so that the rule's ops
 * on it are recorded back into the forward graph. A saved input the op
 * cast (a mixed-dtype op) is the cast of that history, recorded too. */
static hd_tensor *attach_saved(hd_ctx *ctx, hd_grad_node *n, int i) {
    hd_tensor *t = n->saved[i], *base = NULL, *c = NULL;
    hd_grad_node *src = i == n->nin ? n : n->edges[i].node;
    hd_tensor *leaf = i < n->nin ? n->edges[i].leaf : NULL;
    if (!src && !leaf) return hd_tensor_ref(t); /* a constant */
    hd_dtype want = i == n->nin ? t->dtype : n->edges[i].dtype;
    if (leaf) {
        base = hd_tensor_ref(leaf);
    } else if (want == t->dtype ? !(base = detached_view(ctx, t))
                                : hd_op_cast(ctx, t, want, &base)) { /* t is untracked */
        return NULL;
    }
    if (!leaf) {
        hd_grad_info *gi = info_get(ctx, base);
        if (!gi) return hd_tensor_unref(base), NULL;
        gi->scope = cur_scope_id(ctx);
        gi->node = src;
        src->refcount++;
    }
    if (base->storage && t->storage && base->storage->backend != t->storage->backend) {
        hd_tensor_unref(base);
        hd_error(ctx, HD_ERR_RUNTIME,
                 "backward(create_graph = true): %s saved a tensor on "
                 "another device than its input's",
                 hd_op_name(n->op));
        return NULL;
    }
    if (base->dtype == t->dtype) return base;
    hd_op_cast(ctx, base, t->dtype, &c); /* recorded: base has a history */
    hd_tensor_unref(base);
    return c;
}

/* n's saved tensors swapped with attached ones (keep: the originals), or
 * back (keep NULL after). */
static hd_status swap_saved(hd_ctx *ctx, hd_grad_node *n, hd_tensor **keep, int attach) {
    hd_status st = HD_OK;
    for (int i = 0; i <= n->nin; i++) {
        if (!attach) {
            if (!keep[i]) continue;
            hd_tensor_unref(n->saved[i]);
            n->saved[i] = keep[i];
            keep[i] = NULL;
        } else if (n->saved[i] && !st) {
            hd_tensor *a = attach_saved(ctx, n, i);
            if (!a) {
                st = ctx->status;
                continue;
            }
            keep[i] = n->saved[i];
            n->saved[i] = a;
        }
    }
    return st;
}

static hd_status run_rule(hd_grad_pass *p, hd_grad_node *n, const unsigned char *need,
                          hd_tensor **gin) {
    hd_ctx *ctx = p->ctx;
    hd_tensor **keep = NULL;
    hd_status st = HD_OK;
    if (p->create) {
        if (!(keep = hd_ctx_calloc(ctx, (size_t)n->nin + 1, sizeof *keep))) return ctx->status;
        st = swap_saved(ctx, n, keep, 1);
    }
    hd_gx x = {ctx, st, 0, {NULL}, n->op};
    hd_place prev = rule_place_push(ctx, n);
    if (!st) hd_grad_rule_of(n->op)->fn(&x, n, n->grad, need, gin);
    hd_place_pop(ctx, prev);
    for (int i = 0; i < x.n; i++) hd_tensor_unref(x.tmp[i]);
    if (keep) {
        swap_saved(ctx, n, keep, 0);
        hd_ctx_free(ctx, keep, ((size_t)n->nin + 1) * sizeof *keep);
    }
    return x.st;
}

/* Run n's rule and pass each input's gradient on: into the producing
 * record's gradient, or into the leaf's pending gradient. */
static hd_status node_backward(hd_grad_pass *p, hd_grad_node *n) {
    hd_ctx *ctx = p->ctx;
    enum { SMALL = 8 };
    unsigned char need_buf[SMALL];
    hd_tensor *gin_buf[SMALL];
    int nin = n->nin, any = 0;
    if (check_saved(ctx, n)) return ctx->status;
    unsigned char *need = nin <= SMALL ? need_buf : hd_ctx_alloc(ctx, (size_t)nin);
    hd_tensor **gin = nin <= SMALL ? gin_buf : hd_ctx_calloc(ctx, (size_t)nin, sizeof *gin);
    hd_status st = need && gin ? HD_OK : ctx->status;
    for (int i = 0; !st && i < nin; i++) {
        need[i] = n->edges[i].node || n->edges[i].leaf;
        gin[i] = NULL;
        any |= need[i];
    }
    if (!st && any && n->custom && p->create) {
        st = hd_error(ctx, HD_ERR_RUNTIME,
                      "backward(create_graph = true) reached a gradient computed outside the "
                      "op table (a compiled function's or a custom Function's), which has no "
                      "gradient of its own");
    } else if (!st && any && n->custom) {
        st = n->custom->backward(ctx, n->custom_ud, n->grad, need, gin, nin);
    } else if (!st && any) {
        st = run_rule(p, n, need, gin);
    }
    for (int i = 0; i < nin && need && gin; i++) {
        hd_tensor *g = gin[i];
        gin[i] = NULL;
        if (!g || st || !need[i]) {
            hd_tensor_unref(g);
            continue;
        }
        hd_grad_edge *e = &n->edges[i];
        st = grad_to_input(ctx, &g, e, n->op);
        if (!st) st = e->node ? accumulate(ctx, &e->node->grad, g) : leaf_accumulate(p, e->leaf, g);
    }
    if (need != need_buf) hd_ctx_free(ctx, need, (size_t)nin);
    if (gin != gin_buf) hd_ctx_free(ctx, gin, (size_t)nin * sizeof *gin);
    return st;
}

/* A watched pass: one more record of it passes a gradient to leaf. */
static void leaf_count_use(hd_grad_pass *p, hd_tensor *leaf) {
    hd_grad_info *gi = leaf->grad_info;
    if (gi->use_epoch != p->epoch) {
        gi->use_epoch = p->epoch;
        gi->uses = 0;
    }
    gi->uses++;
}

/* A watched pass: n has passed its gradients on; a leaf that no other
 * record feeds has its whole gradient now. */
static hd_status leaves_done(hd_grad_pass *p, const hd_grad_node *n) {
    for (int i = 0; i < n->nin; i++) {
        hd_tensor *leaf = n->edges[i].leaf;
        hd_grad_info *gi = leaf ? leaf->grad_info : NULL;
        if (!gi || gi->use_epoch != p->epoch || --gi->uses > 0) continue;
        if (gi->epoch == p->epoch && gi->pending) {
            hd_status st = p->watch->ready(p->ctx, p->watch->ud, leaf, gi->pending);
            if (st) return st;
        }
    }
    return HD_OK;
}

/* Every record reachable from root, each pinned once, with the number of
 * its users among them in pending. */
static hd_status collect(hd_grad_pass *p, hd_grad_node *root) {
    root->epoch = p->epoch;
    root->pending = 0;
    if (vec_push(p->ctx, &p->nodes, root)) return p->ctx->status;
    root->refcount++;
    for (size_t k = 0; k < p->nodes.n; k++) {
        hd_grad_node *n = p->nodes.p[k];
        if (!n->live) return hd_error(p->ctx, HD_ERR_RUNTIME, "%s", hd_grad_freed_msg);
        for (int i = 0; i < n->nin; i++) {
            hd_grad_node *m = n->edges[i].node;
            if (p->watch && n->edges[i].leaf) leaf_count_use(p, n->edges[i].leaf);
            if (!m) continue;
            if (m->epoch != p->epoch) {
                if (vec_push(p->ctx, &p->nodes, m)) return p->ctx->status;
                m->refcount++;
                m->epoch = p->epoch;
                m->pending = 0;
            }
            m->pending++;
        }
    }
    return HD_OK;
}

/* Process records once all their users have passed their gradient on. */
static hd_status propagate(hd_grad_pass *p, hd_grad_node *root) {
    hd_grad_vec ready = {0};
    hd_status st = vec_push(p->ctx, &ready, root);
    while (!st && ready.n) {
        hd_grad_node *n = ready.p[--ready.n];
        int k = p->only && n->grad ? pass_only_node(p, n) : -1;
        if (k >= 0)
            st = accumulate(p->ctx, &p->got[k], hd_tensor_ref(n->grad));
        else if (n->grad)
            st = node_backward(p, n);
        if (!st && p->watch) st = leaves_done(p, n);
        hd_tensor_unref(n->grad);
        n->grad = NULL;
        if (!p->retain) { /* saved tensors are not needed again: free them early */
            for (int i = 0; i <= n->nin; i++) {
                hd_tensor_unref(n->saved[i]);
                n->saved[i] = NULL;
            }
            if (n->custom && n->custom->free && n->custom_ud) /* what a host record keeps */
                n->custom->free(n->ctx, n->custom_ud);
            n->custom_ud = NULL;
        }
        for (int i = 0; !st && i < n->nin; i++) {
            hd_grad_node *m = n->edges[i].node;
            if (m && --m->pending == 0) st = vec_push(p->ctx, &ready, m);
        }
    }
    vec_free(p->ctx, &ready);
    return st;
}

/* A gradient that becomes .grad must not share memory with anything else. */
static hd_tensor *grad_own(hd_ctx *ctx, hd_tensor *g) {
    if (g->refcount == 1 && g->storage && g->storage->refcount == 1 && !g->grad_info &&
        hd_tensor_is_contiguous(g) && hd_tensor_nbytes(g) == g->storage->nbytes)
        return hd_tensor_ref(g);
    return run1(ctx, HD_OP_COPY, g, NULL);
}

/* .grad += pending for every leaf, all or nothing. */
static hd_status commit(hd_grad_pass *p) {
    hd_ctx *ctx = p->ctx;
    size_t n = p->leaves.n;
    hd_tensor **next = hd_ctx_calloc(ctx, n ? n : 1, sizeof *next);
    if (!next) return ctx->status;
    hd_status st = HD_OK;
    for (size_t i = 0; i < n && !st; i++) {
        hd_grad_info *gi = ((hd_tensor *)p->leaves.p[i])->grad_info;
        if (!gi->pending) continue;
        if (ctx->trace) hd_trace_note_grad(ctx, p->leaves.p[i]);
        next[i] =
            gi->grad ? grad_sum(ctx, gi->grad, gi->pending) : grad_own(ctx, gi->pending);
        if (!next[i]) st = ctx->status;
    }
    for (size_t i = 0; i < n; i++) {
        hd_grad_info *gi = ((hd_tensor *)p->leaves.p[i])->grad_info;
        if (st) {
            hd_tensor_unref(next[i]);
        } else if (next[i]) {
            grad_note_write(ctx, p->leaves.p[i]);
            hd_tensor_unref(gi->grad);
            gi->grad = next[i];
        }
    }
    hd_ctx_free(ctx, next, (n ? n : 1) * sizeof *next);
    return st;
}

static void pass_end(hd_grad_pass *p) {
    for (size_t i = 0; i < p->leaves.n; i++) {
        hd_tensor *t = p->leaves.p[i];
        hd_grad_info *gi = t->grad_info;
        hd_tensor_unref(gi->pending);
        gi->pending = NULL;
        hd_tensor_unref(t);
    }
    for (size_t i = 0; i < p->nodes.n; i++) {
        hd_grad_node *n = p->nodes.p[i];
        hd_tensor_unref(n->grad);
        n->grad = NULL;
        if (!p->retain) node_release(n); /* pinned: nothing is freed yet */
    }
    for (size_t i = 0; i < p->nodes.n; i++) node_unref(p->nodes.p[i]);
    vec_free(p->ctx, &p->nodes);
    vec_free(p->ctx, &p->leaves);
}

static hd_status check_root(hd_ctx *ctx, const hd_tensor *t) {
    const hd_grad_info *gi = t->grad_info;
    if (!gi || (!gi->node && !gi->requires_grad))
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "backward: the tensor does not require grad (no op on a tensor that "
                        "requires grad made it)");
    if (gi->node && gi->node->cleared)
        return hd_error(ctx, HD_ERR_RUNTIME, "%s", hd_grad_freed_msg);
    if (gi->scope != cur_scope_id(ctx))
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "backward: the tensor belongs to another gradient context (backward "
                        "follows the current context's records only: call it inside the context "
                        "that computed the tensor)");
    if (gi->node && !gi->node->live) return hd_error(ctx, HD_ERR_RUNTIME, "%s", hd_grad_freed_msg);
    return HD_OK;
}

static hd_status make_seed(hd_ctx *ctx, hd_tensor *loss, hd_tensor *grad, hd_tensor **seed) {
    *seed = NULL;
    if (!grad) {
        if (loss->numel != 1)
            return hd_error(ctx, HD_ERR_RUNTIME, "backward needs a one-element tensor or grad=");
        hd_attrs at;
        memset(&at, 0, sizeof at);
        at.dtype = loss->dtype;
        at.nshape = loss->ndim;
        memcpy(at.shape, loss->shape, sizeof at.shape);
        at.scalar[0] = 1;
        return hd_op_run(ctx, HD_OP_FULL, NULL, 0, &at, seed);
    }
    char sa[128], sb[128];
    if (grad->ndim != loss->ndim ||
        memcmp(grad->shape, loss->shape, (size_t)loss->ndim * sizeof *loss->shape))
        return hd_error(ctx, HD_ERR_RUNTIME, "backward: grad has shape %s but the tensor has %s",
                        hd_shape_str(grad->shape, grad->ndim, sa, sizeof sa),
                        hd_shape_str(loss->shape, loss->ndim, sb, sizeof sb));
    if (grad->dtype != loss->dtype) return hd_op_cast(ctx, grad, loss->dtype, seed);
    if (ctx->grad_create && hd_grad_requires(ctx, grad)) { /* J^T grad keeps grad's history */
        *seed = hd_tensor_ref(grad);
        return HD_OK;
    }
    *seed = detached_view(ctx, grad);
    if (!*seed) return ctx->status;
    (*seed)->number = 0; /* promotes like the loss it stands for */
    return HD_OK;
}

/* A watched pass's end, before commit: the watcher may replace the
 * gradients (hd_grad_pass_set); told of a failure too. */
static hd_status pass_finish(hd_grad_pass *p, hd_status st) {
    if (!p->watch) return st;
    hd_status fin = p->watch->finish(p->ctx, p->watch->ud, st != HD_OK);
    return st ? st : fin;
}

static hd_status backward_run(hd_grad_pass *p, hd_tensor *loss, hd_tensor *seed) {
    hd_grad_info *gi = loss->grad_info;
    if (!gi->node && p->only) return leaf_accumulate(p, loss, hd_tensor_ref(seed));
    if (!gi->node) {
        if (vec_push(p->ctx, &p->leaves, loss)) return p->ctx->status;
        hd_tensor_ref(loss);
        gi->epoch = p->epoch;
        gi->pending = hd_tensor_ref(seed);
        hd_status st = p->watch ? p->watch->ready(p->ctx, p->watch->ud, loss, seed) : HD_OK;
        st = pass_finish(p, st);
        return st ? st : commit(p);
    }
    hd_status st = collect(p, gi->node);
    if (!st) {
        gi->node->grad = hd_tensor_ref(seed);
        st = propagate(p, gi->node);
    }
    st = pass_finish(p, st);
    return st || p->only ? st : commit(p);
}

void hd_grad_set_watcher(hd_ctx *ctx, const hd_grad_watcher *w) {
    ctx->grad_watcher = w;
}

hd_tensor *hd_grad_pass_get(hd_ctx *ctx, hd_tensor *leaf) {
    const hd_grad_pass *p = ctx->grad_pass;
    const hd_grad_info *gi = leaf->grad_info;
    return p && gi && gi->epoch == p->epoch ? gi->pending : NULL;
}

hd_status hd_grad_pass_set(hd_ctx *ctx, hd_tensor *leaf, hd_tensor *g) {
    hd_grad_pass *p = ctx->grad_pass;
    hd_grad_info *gi = leaf->grad_info ? leaf->grad_info : info_get(ctx, leaf);
    if (!p || !gi) {
        hd_tensor_unref(g);
        return p ? ctx->status : hd_error(ctx, HD_ERR_RUNTIME, "no backward pass is running");
    }
    if (gi->epoch != p->epoch) {
        if (vec_push(ctx, &p->leaves, leaf)) {
            hd_tensor_unref(g);
            return ctx->status;
        }
        hd_tensor_ref(leaf);
        gi->epoch = p->epoch;
        gi->pending = NULL;
    }
    hd_tensor_unref(gi->pending);
    gi->pending = g;
    return HD_OK;
}

static hd_status backward_pass(hd_ctx *ctx, hd_tensor *loss, hd_tensor *grad, int retain_graph,
                               int create, hd_grad_pass *only) {
    if (check_root(ctx, loss)) return ctx->status;
    if (create && ctx->trace)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "higher-order gradients (backward(create_graph = true), grad of grad, "
                        "hessian, jvp) are not supported inside compiled code (take them in "
                        "eager code)");
    /* inside compiled code backward becomes graph nodes: its records must
     * be the trace's own (eager ones would be used up by the trace) */
    if (ctx->trace && loss->storage)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "backward() inside compiled code needs a loss computed inside it (this "
                        "one was computed eagerly, before the compiled code ran)");
    int on = hd_grad_is_enabled(ctx), was = hd_grad_set_enabled(ctx, create && on);
    int was_create = ctx->grad_create;
    ctx->grad_create = create && on;
    /* the seed and the zeros rules make are on the loss's device */
    hd_place here = hd_place_of(loss);
    hd_place prev = hd_place_push(ctx, here.backend ? here.backend : &hd_cpu_backend, here.device);
    hd_tensor *seed = NULL;
    hd_status st = make_seed(ctx, loss, grad, &seed);
    if (!st) {
        hd_grad_pass p;
        memset(&p, 0, sizeof p);
        if (only) p = *only;
        p.ctx = ctx;
        p.epoch = ++ctx->grad_ids;
        p.retain = retain_graph || create;
        p.create = create && on;
        if (!only && !create && !ctx->trace) p.watch = ctx->grad_watcher;
        void *outer = ctx->grad_pass;
        ctx->grad_pass = &p;
        st = backward_run(&p, loss, seed);
        ctx->grad_pass = outer;
        pass_end(&p);
    }
    hd_tensor_unref(seed);
    hd_place_pop(ctx, prev);
    ctx->grad_create = was_create;
    hd_grad_set_enabled(ctx, was);
    return st;
}

hd_status hd_grad_backward(hd_ctx *ctx, hd_tensor *loss, hd_tensor *grad, int retain_graph) {
    return backward_pass(ctx, loss, grad, retain_graph, 0, NULL);
}

hd_status hd_grad_backward_create(hd_ctx *ctx, hd_tensor *loss, hd_tensor *grad) {
    return backward_pass(ctx, loss, grad, 1, 1, NULL);
}

hd_status hd_grad_partial(hd_ctx *ctx, hd_tensor *loss, hd_tensor *const *xs, int n, hd_tensor **gs,
                          int create) {
    return hd_grad_partial_seed(ctx, loss, NULL, xs, n, gs, create, 1);
}

hd_status hd_grad_partial_seed(hd_ctx *ctx, hd_tensor *loss, hd_tensor *grad, hd_tensor *const *xs,
                               int n, hd_tensor **gs, int create, int keep) {
    hd_grad_pass only;
    memset(&only, 0, sizeof only);
    only.only = xs;
    only.got = gs;
    only.n_only = n;
    for (int k = 0; k < n; k++) gs[k] = NULL;
    hd_status st = backward_pass(ctx, loss, grad, keep, create, &only);
    if (st)
        for (int k = 0; k < n; k++) {
            hd_tensor_unref(gs[k]);
            gs[k] = NULL;
        }
    return st;
}

/* ---- the leaves of a recent history (checkpoint) ---- */

static hd_status leaves_add(hd_ctx *ctx, hd_grad_vec *v, hd_tensor *leaf) {
    for (size_t i = 0; i < v->n; i++)
        if (v->p[i] == leaf) return HD_OK;
    if (vec_push(ctx, v, leaf)) return ctx->status;
    hd_tensor_ref(leaf);
    return HD_OK;
}

/* Walk the records of t made after mark; *old is set when one from
 * before is reached. */
static hd_status leaves_walk(hd_ctx *ctx, hd_grad_node *root, uint64_t mark, hd_grad_vec *leaves,
                             int *old) {
    hd_grad_vec todo = {0};
    uint64_t seen = ++ctx->grad_ids;
    root->epoch = seen;
    hd_status st = vec_push(ctx, &todo, root);
    while (!st && todo.n && !*old) {
        hd_grad_node *n = todo.p[--todo.n];
        if (n->seq <= mark) {
            *old = 1;
            break;
        }
        for (int i = 0; !st && n->live && i < n->nin; i++) {
            const hd_grad_edge *e = &n->edges[i];
            if (e->leaf && hd_grad_requires(ctx, e->leaf)) st = leaves_add(ctx, leaves, e->leaf);
            if (e->node && !e->node->cleared && e->node->epoch != seen) {
                e->node->epoch = seen;
                st = vec_push(ctx, &todo, e->node);
            }
        }
    }
    vec_free(ctx, &todo);
    return st;
}

hd_status hd_grad_leaves_since(hd_ctx *ctx, hd_tensor *t, uint64_t mark, hd_tensor ***out, int *n) {
    hd_grad_vec leaves = {0};
    int old = 0;
    hd_grad_info *gi = t->grad_info;
    *out = NULL;
    *n = 0;
    hd_status st = HD_OK;
    if (gi && gi->node && !gi->node->cleared)
        st = leaves_walk(ctx, gi->node, mark, &leaves, &old);
    else if (gi && !gi->node && hd_grad_requires(ctx, t))
        st = leaves_add(ctx, &leaves, t);
    if (!st && !old && leaves.n) { /* to its size: freed as n pointers */
        void **p = hd_ctx_realloc(ctx, leaves.p, leaves.cap * sizeof *p, leaves.n * sizeof *p);
        if (p) {
            *out = (hd_tensor **)p;
            *n = (int)leaves.n;
            return HD_OK;
        }
        st = ctx->status;
    }
    for (size_t i = 0; i < leaves.n; i++) hd_tensor_unref(leaves.p[i]);
    vec_free(ctx, &leaves);
    if (!st && old) *n = -1;
    return st;
}

void hd_grad_leaves_free(hd_ctx *ctx, hd_tensor **leaves, int n) {
    for (int i = 0; i < n; i++) hd_tensor_unref(leaves[i]);
    if (leaves) hd_ctx_free(ctx, leaves, (size_t)n * sizeof *leaves);
}

/* ---- a traced loop rolled with its gradient ---- */

static int roll_member(const hd_grad_node *n, const hd_grad_scope *s, uint32_t gen_a) {
    return n && n->live && n->scope == s && n->watch >= gen_a;
}

static hd_status roll_grow(hd_ctx *ctx, void **p, int *cap, int n, size_t elem) {
    if (n < *cap) return HD_OK;
    int c = *cap ? 2 * *cap : 8;
    void *q = hd_ctx_realloc(ctx, *p, (size_t)*cap * elem, (size_t)c * elem);
    if (!q) return ctx->status;
    *p = q;
    *cap = c;
    return HD_OK;
}

/* Edge e of a member leaves the iterations: note its source once. */
static hd_status roll_add_front(hd_ctx *ctx, hd_grad_roll *r, const hd_grad_edge *e) {
    for (int i = 0; i < r->nfront; i++)
        if (e->node ? r->front[i].e.node == e->node : r->front[i].e.leaf == e->leaf) return HD_OK;
    if (roll_grow(ctx, (void **)&r->front, &r->cap_front, r->nfront, sizeof *r->front))
        return ctx->status;
    hd_grad_front *f = &r->front[r->nfront++];
    f->e = *e;
    f->ref = e->node ? e->node->trace_ref : 0;
    if (f->e.node) f->e.node->refcount++;
    if (f->e.leaf) hd_tensor_ref(f->e.leaf);
    return HD_OK;
}

static hd_status roll_add_held(hd_ctx *ctx, hd_grad_roll *r, hd_grad_node *n) {
    if (roll_grow(ctx, (void **)&r->held, &r->cap_held, r->nheld, sizeof *r->held))
        return ctx->status;
    n->refcount++;
    r->held[r->nheld++] = n;
    return HD_OK;
}

/* Each member's users among the members, into its pending count. */
static void roll_count_users(hd_grad_scope *s, uint32_t gen_a, int add) {
    for (hd_grad_node *n = s->records; n; n = n->next)
        if (roll_member(n, s, gen_a))
            for (int i = 0; i < n->nin; i++)
                if (roll_member(n->edges[i].node, s, gen_a)) n->edges[i].node->pending += add;
}

static hd_status roll_scan_members(hd_ctx *ctx, hd_grad_scope *s, uint32_t gen_a, uint32_t gen_b,
                                   hd_grad_roll *r, const char **why) {
    for (hd_grad_node *n = s->records; n; n = n->next) {
        if (!roll_member(n, s, gen_a)) continue;
        if (n->refcount > n->pending) { /* a tensor holds it */
            if (n->watch < gen_b) {
                *why = "a value of one iteration that needs gradients is kept by the next";
                return HD_OK;
            }
            if (!n->trace_ref) {
                *why = "a value that needs gradients was not traced";
                return HD_OK;
            }
            if (roll_add_held(ctx, r, n)) return ctx->status;
        }
        for (int i = 0; i < n->nin; i++) {
            const hd_grad_edge *e = &n->edges[i];
            if (!(e->node && !roll_member(e->node, s, gen_a)) && !e->leaf) continue;
            if (e->node && !e->node->trace_ref) {
                *why = "it reads a value that needs gradients from outside the compiled code";
                return HD_OK;
            }
            if (roll_add_front(ctx, r, e)) return ctx->status;
        }
    }
    return HD_OK;
}

hd_status hd_grad_roll_scan(hd_ctx *ctx, uint32_t gen_a, uint32_t gen_b, hd_grad_roll *r,
                            const char **why) {
    memset(r, 0, sizeof *r);
    *why = NULL;
    hd_grad_scope *s = cur_scope(ctx);
    if (hd_grad_watch_live(ctx, gen_a) != watch_live_in(s, gen_a)) {
        *why = "a gradient context inside the loop keeps records";
        return HD_OK;
    }
    for (hd_grad_node *n = s->records; n; n = n->next) n->pending = 0;
    roll_count_users(s, gen_a, 1);
    hd_status st = roll_scan_members(ctx, s, gen_a, gen_b, r, why);
    for (hd_grad_node *n = s->records; n; n = n->next) n->pending = 0;
    return st;
}

hd_status hd_grad_roll_add_tensor(hd_ctx *ctx, hd_grad_roll *r, hd_tensor *t) {
    if (!t || !tracked(t, cur_scope_id(ctx))) return HD_OK;
    hd_grad_info *gi = t->grad_info;
    hd_grad_edge e;
    memset(&e, 0, sizeof e);
    e.dtype = t->dtype;
    e.ndim = t->ndim;
    memcpy(e.shape, t->shape, sizeof e.shape);
    if (gi->node)
        e.node = gi->node;
    else
        e.leaf = t;
    return roll_add_front(ctx, r, &e);
}

/* A record of fn (ud) over the front edges use marks, on nothing yet. */
static hd_grad_node *roll_record_new(hd_ctx *ctx, hd_grad_roll *r, const unsigned char *use,
                                     const hd_grad_custom *fn, void *ud) {
    int nin = 0;
    for (int j = 0; j < r->nfront; j++) nin += use[j] != 0;
    hd_grad_node *m = node_new(ctx, nin);
    if (!m) {
        if (fn->free) fn->free(ctx, ud);
        return NULL;
    }
    for (int j = 0, k = 0; j < r->nfront; j++) {
        if (!use[j]) continue;
        hd_grad_edge *e = &m->edges[k++];
        *e = r->front[j].e;
        if (e->node) e->node->refcount++;
        if (e->leaf) hd_tensor_ref(e->leaf);
    }
    m->op = HD_OP_COPY;
    m->custom = fn;
    m->custom_ud = ud;
    return m;
}

hd_status hd_grad_roll_record(hd_ctx *ctx, hd_grad_roll *r, const unsigned char *use, hd_tensor *t,
                              const hd_grad_custom *fn, void *ud) {
    if (t->grad_info) {
        if (fn->free) fn->free(ctx, ud);
        return hd_error(ctx, HD_ERR_RUNTIME, "internal error: recorded twice");
    }
    hd_grad_info *gi = hd_ctx_calloc(ctx, 1, sizeof *gi);
    hd_grad_node *m = gi ? roll_record_new(ctx, r, use, fn, ud) : NULL;
    if (!m) {
        if (!gi && fn->free) fn->free(ctx, ud);
        hd_ctx_free(ctx, gi, gi ? sizeof *gi : 0);
        return ctx->status;
    }
    m->refcount = 1;
    m->trace_ref = t->trace_ref;
    m->out_dtype = t->dtype;
    m->out_ndim = t->ndim;
    memcpy(m->out_shape, t->shape, sizeof m->out_shape);
    hd_grad_scope *s = cur_scope(ctx);
    node_link(s, m);
    gi->scope = s->id;
    gi->node = m;
    t->grad_info = gi;
    return HD_OK;
}

static hd_status roll_pass_on(hd_ctx *ctx, void *ud, hd_tensor *g, const unsigned char *need,
                              hd_tensor **gin, int nin) {
    HD_UNUSED(ctx), HD_UNUSED(ud), HD_UNUSED(nin);
    if (need[0]) gin[0] = hd_tensor_ref(g);
    return HD_OK;
}

static const hd_grad_custom roll_pass_on_fn = {roll_pass_on, NULL};

hd_status hd_grad_roll_rewire(hd_ctx *ctx, hd_grad_roll *r, int i, const unsigned char *use,
                              const hd_grad_custom *fn, void *ud) {
    hd_grad_node *n = r->held[i], *m = roll_record_new(ctx, r, use, fn, ud);
    if (!m) return ctx->status;
    m->refcount = 1; /* n's edge */
    m->trace_ref = n->trace_ref;
    m->out_dtype = n->out_dtype;
    m->out_ndim = n->out_ndim;
    memcpy(m->out_shape, n->out_shape, sizeof m->out_shape);
    node_link(n->scope, m);
    hd_grad_node *stack = NULL;
    node_strip(n, &stack);
    node_free_stack(stack);
    hd_grad_edge *e = &n->edges[0];
    memset(e, 0, sizeof *e);
    e->node = m;
    e->dtype = n->out_dtype;
    e->ndim = n->out_ndim;
    memcpy(e->shape, n->out_shape, sizeof e->shape);
    n->nin = 1;
    n->op = HD_OP_COPY;
    n->custom = &roll_pass_on_fn;
    n->custom_ud = NULL;
    return HD_OK;
}

void hd_grad_roll_drop_held(hd_ctx *ctx, hd_grad_roll *r) {
    for (int i = 0; i < r->nheld; i++) node_unref(r->held[i]);
    if (r->cap_held) hd_ctx_free(ctx, r->held, (size_t)r->cap_held * sizeof *r->held);
    r->held = NULL;
    r->nheld = r->cap_held = 0;
}

void hd_grad_roll_free(hd_ctx *ctx, hd_grad_roll *r) {
    for (int i = 0; i < r->nheld; i++) node_unref(r->held[i]);
    for (int i = 0; i < r->nfront; i++) {
        node_unref(r->front[i].e.node);
        hd_tensor_unref(r->front[i].e.leaf);
    }
    if (r->cap_held) hd_ctx_free(ctx, r->held, (size_t)r->cap_held * sizeof *r->held);
    if (r->cap_front) hd_ctx_free(ctx, r->front, (size_t)r->cap_front * sizeof *r->front);
    memset(r, 0, sizeof *r);
}
