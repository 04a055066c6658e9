/* hd_autograd: reverse-mode gradients over eager ops.
 *
 * When gradients are on (the default; off inside no_grad) and an input of an
 * op requires grad in the current gradient context, hd_op_run records the op:
 * a refcounted record (hd_grad_node) holding the op, its attributes, the
 * tensors its gradient rule needs (detached views, with their storage
 * versions) and references to the records of its inputs. The output tensor
 * holds its record through t->grad_info. A record lives as long as a live
 * tensor (or a later record) reaches it, so dropping the outputs of a step
 * frees its records at once.
 *
 * backward() walks the records reachable from a tensor in topological order,
 * runs each op's gradient rule (hd_grad_rules.c; rules are compositions of
 * table ops, so a tracer sees backward as ordinary ops) and accumulates into
 * the .grad of the leaves that require grad. The records it used are freed
 * after it unless retain_graph is set.
 *
 * Gradient contexts (grad_context blocks) nest: records made in one belong to
 * it, tensors of other contexts are constants there, and its records are
 * freed when it is popped (or, for a held context that a program keeps as a
 * value, when it is freed). docs/autograd.md has the user-level semantics. */
#ifndef HD_AUTOGRAD_H
#define HD_AUTOGRAD_H

#include "hd_op.h"

/* ---- the API the language binds ---- */

/* x.requires_grad = on (param(x) is on = 1). Only float tensors can require
 * grad, and only leaves (tensors no recorded op made) can change it. The
 * tensor then belongs to the current gradient context. */
hd_status hd_grad_set_requires(hd_ctx *ctx, hd_tensor *t, int on);
/* x.requires_grad: a leaf marked in the current context, or a tensor a live
 * record of the current context made. */
int hd_grad_requires(const hd_ctx *ctx, const hd_tensor *t);
/* t has gradient history a later backward could use or report: it
 * requires grad as a leaf, or a record made it that backward has not used
 * up (one freed by its context's end counts: backward reports it). */
int hd_grad_has_history(const hd_tensor *t);
/* No record made it (in the current context) */
int hd_grad_is_leaf(const hd_ctx *ctx, const hd_tensor *t);

/* x.grad: the accumulated gradient (borrowed; NULL means none). */
hd_tensor *hd_grad_get(const hd_tensor *t);
/* x.grad = g: stores a detached view of g (g == NULL: none). g must have
 * t's shape; it is cast to t's dtype. */
hd_status hd_grad_set(hd_ctx *ctx, hd_tensor *t, hd_tensor *g);
/* zero_grad(params): sets each .grad to none (as PyTorch's default). */
void hd_grad_zero(hd_ctx *ctx, hd_tensor *const *ts, int n);

/* loss.backward(grad=, retain_graph=): grad is NULL for a one-element loss,
 * else a tensor of the loss's shape. Accumulates into the .grad of the leaves
 * of the current context that the loss depends on. */
hd_status hd_grad_backward(hd_ctx *ctx, hd_tensor *loss, hd_tensor *grad, int retain_graph);
/* The same with create_graph: the gradient rules run as recorded ops (when
 * gradients are on), so the gradients it leaves in .grad have records of
 * their own and can be differentiated again; the graph is kept. Refused
 * inside compiled code, and where a rule uses a backward kernel without a
 * gradient (the error names it). */
hd_status hd_grad_backward_create(hd_ctx *ctx, hd_tensor *loss, hd_tensor *grad);
/* The gradients of a one-element loss with respect to xs[0..n) (leaves or
 * results of records of the current context), as torch.autograd.grad
 * gives them: new references in gs[] (NULL where the loss does not depend
 * on one), no .grad changes, and the graph is kept. A record that made one
 * of xs is not followed past it. With create, the gradients have records
 * of their own (as hd_grad_backward_create's). */
hd_status hd_grad_partial(hd_ctx *ctx, hd_tensor *loss, hd_tensor *const *xs, int n, hd_tensor **gs,
                          int create);
/* The same for a loss of any shape, with grad its incoming gradient (NULL
 * for a one-element loss); without keep, the graph is used up (its saved
 * tensors freed as the pass goes, as backward() does). */
hd_status hd_grad_partial_seed(hd_ctx *ctx, hd_tensor *loss, hd_tensor *grad, hd_tensor *const *xs,
                               int n, hd_tensor **gs, int create, int keep);

/* A mark: records made after it are the ones hd_grad_leaves_since sees. */
static inline uint64_t hd_grad_mark(const hd_ctx *ctx) {
    return ctx->grad_seq;
}
/* The leaves that require grad which t's history reaches through records
 * made after mark: new references in *out (an hd_ctx_alloc'd array of *n,
 * freed with hd_grad_leaves_free). A record made before mark that is
 * reached (a tensor with history from before) is an error: *n is then
 * -1, with no error set, for the caller to say what it means. */
hd_status hd_grad_leaves_since(hd_ctx *ctx, hd_tensor *t, uint64_t mark, hd_tensor ***out, int *n);
void hd_grad_leaves_free(hd_ctx *ctx, hd_tensor **leaves, int n);

/* x.detach(): a new view sharing x's storage, with no record and
 * requires_grad false. NULL with an error on allocation failure. */
hd_tensor *hd_grad_detach(hd_ctx *ctx, hd_tensor *t);

/* no_grad: hd_grad_set_enabled(ctx, 0) returns the previous mode, which the
 * block's end passes back. */
int hd_grad_set_enabled(hd_ctx *ctx, int on);
int hd_grad_is_enabled(const hd_ctx *ctx);

/* grad_context { }: push a new innermost gradient context (recording is on
 * inside it); pop leaves the innermost one, restores the outer grad mode
 * and, unless it is a held context (below), frees it with its records. */
hd_status hd_grad_context_push(hd_ctx *ctx);
hd_status hd_grad_context_pop(hd_ctx *ctx);
int hd_grad_context_depth(const hd_ctx *ctx); /* 0: only the outermost */

/* A held context (let c = grad_context()): a context with its own id that
 * outlives its blocks. hd_grad_context_enter makes it the innermost (an
 * error if it is entered already: a context is on the stack at most once),
 * hd_grad_context_pop leaves it and keeps its records, and
 * hd_grad_context_free frees its records and itself (leaving it first, and
 * any context inside it, if it is still entered). Leaves marked in it
 * belong to it at every entry; afterwards they are constants. NULL from
 * new on allocation failure, with the error. */
hd_grad_scope *hd_grad_context_new(hd_ctx *ctx);
hd_status hd_grad_context_enter(hd_ctx *ctx, hd_grad_scope *s);
void hd_grad_context_free(hd_ctx *ctx, hd_grad_scope *s);
uint64_t hd_grad_context_id(const hd_grad_scope *s);
int hd_grad_context_entered(const hd_grad_scope *s);
size_t hd_grad_context_records(const hd_grad_scope *s); /* live records */

/* clear_tape(): free the current context's records now. Tensors they made
 * act as constants afterwards; backward through them is an error. */
void hd_grad_clear_tape(hd_ctx *ctx);

/* For a traced loop that checks whether its iterations repeat: records
 * made under watch gen or a later one (ctx->grad_watch) that are still live, in the
 * current gradient context and the ones around it. A record made by one
 * iteration and alive after it would let backward() reach into the
 * iteration's values, which rolling the loop would change. */
size_t hd_grad_watch_live(const hd_ctx *ctx, uint32_t gen);
/* A fresh watch generation for one traced iteration, larger than every
 * earlier one (0 is never given). */
uint32_t hd_grad_watch_next(hd_ctx *ctx);

/* Watching backward() (data-parallel averaging as the gradients are
 * made): ready is told each leaf's gradient of the pass (g, borrowed) as
 * soon as every record that feeds the leaf has run, while the rest of the
 * pass goes on; finish runs after the last record (failed: the pass
 * failed), before the gradients are added to .grad, and may replace them
 * with hd_grad_pass_set. Not for grad(), create_graph or compiled code's
 * trace. w must outlive its use; NULL: none. */
typedef struct hd_grad_watcher {
    hd_status (*ready)(hd_ctx *ctx, void *ud, hd_tensor *leaf, hd_tensor *g);
    hd_status (*finish)(hd_ctx *ctx, void *ud, int failed);
    void *ud;
} hd_grad_watcher;
void hd_grad_set_watcher(hd_ctx *ctx, const hd_grad_watcher *w);
/* In a watcher's finish: leaf's gradient of the running pass (borrowed;
 * NULL: none), and its replacement (g taken; NULL: none). */
hd_tensor *hd_grad_pass_get(hd_ctx *ctx, hd_tensor *leaf);
hd_status hd_grad_pass_set(hd_ctx *ctx, hd_tensor *leaf, hd_tensor *g);

/* Live records in the current context (statistics, tests). */
size_t hd_grad_record_count(const hd_ctx *ctx);
/* Pop every gradient context and free every record: for a VM's teardown. */
void hd_grad_shutdown(hd_ctx *ctx);

/* ---- hooks for the core (hd_op.c, hd_tensor.c) ---- */

/* Before running op: 1 to record it, 0 not to, -1 (error set) when the op
 * must not run, e.g. an in-place write into a tensor with recorded history. */
int hd_autograd_wants(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin, hd_dtype out_dtype);
/* After a successful run: record op. in: the inputs as given; kin: as the
 * kernel saw them (cast); rng_base: the rng counter before the kernel ran. */
hd_status hd_autograd_record(hd_ctx *ctx, hd_op op, hd_tensor *const *in, hd_tensor *const *kin,
                             int nin, const hd_attrs *attrs, hd_tensor *out, uint64_t rng_base);
/* A record whose gradient a host function computes (compiled code's
 * backward graph): backward gets the gradient of out (g) and fills gin[i]
 * (new references, NULL for none) for each input with need[i]; free drops
 * ud when the record's contents go. */
typedef struct hd_grad_custom {
    hd_status (*backward)(hd_ctx *ctx, void *ud, hd_tensor *g, const unsigned char *need,
                          hd_tensor **gin, int nin);
    void (*free)(hd_ctx *ctx, void *ud);
} hd_grad_custom;
/* Record out as made from in[0..nin) by fn (ud owned by the record, freed
 * by fn->free also on failure). out must have no record yet. */
hd_status hd_autograd_record_custom(hd_ctx *ctx, hd_tensor *const *in, int nin, hd_tensor *out,
                                    const hd_grad_custom *fn, void *ud);

/* Was t made by a record that backward() has used up (freed)? */
int hd_grad_is_spent(const hd_tensor *t);
/* Give t (no record yet) a used-up record: requires_grad is true, and
 * backward() says its records were freed, as for the tensor it stands for
 * (a loss compiled code returns after calling backward() on it). */
hd_status hd_autograd_mark_spent(hd_ctx *ctx, hd_tensor *t);

/* t is being freed: release its grad_info. */
void hd_autograd_tensor_free(hd_tensor *t);

/* ---- records, for the gradient rules and a tracer ---- */

typedef struct hd_grad_node hd_grad_node;

/* One input of a record. The gradient flows to node (the input's record) or
 * to leaf (the input itself, a leaf that requires grad); neither: a
 * constant. dtype, shape and device are the input's, which its gradient
 * takes (a device copy's gradient goes back to the device it came from). */
typedef struct hd_grad_edge {
    hd_grad_node *node;
    hd_tensor *leaf;
    hd_dtype dtype;
    int ndim;
    int64_t shape[HD_MAX_DIMS];
    const struct hd_backend *be; /* the input's device (NULL: traced, no memory) */
    int device;
} hd_grad_edge;

struct hd_grad_node {
    int refcount;          /* tensors made by it, and records using them */
    unsigned char live;    /* holds its edges and saved tensors */
    unsigned char cleared; /* freed by clear_tape or a context's end: outputs are constants */
    hd_op op;
    int nin;
    hd_attrs attrs;
    hd_grad_edge *edges;     /* [nin] */
    hd_tensor **saved;       /* [nin + 1]: kernel inputs, then the output; NULL if not kept */
    uint64_t *saved_version; /* storage versions at save time */
    hd_dtype out_dtype;
    int out_ndim;
    int64_t out_shape[HD_MAX_DIMS];
    uint64_t rng_key, rng_base;          /* dropout: the draw to replay */
    const struct hd_grad_custom *custom; /* a host function's record, or NULL */
    void *custom_ud;
    size_t nbytes;               /* this allocation */
    hd_ctx *ctx;                 /* whose allocator owns it */
    hd_grad_scope *scope;        /* while live: the context whose list holds it */
    hd_grad_node *next, **pprev; /* that list */
    /* backward's scratch */
    hd_grad_node *free_next;
    hd_tensor *grad;    /* gradient of the output, summed over its users */
    uint32_t watch;     /* ctx->grad_watch when it was made */
    uint64_t seq;       /* ctx->grad_seq when it was made: records made since a mark */
    uint64_t trace_ref; /* inside a trace: its output's value there (hd_tensor.trace_ref) */
    uint64_t epoch;
    int pending; /* users not yet processed */
};

/* Saved tensor i of a record (i == nin: the output), or NULL. */
static inline hd_tensor *hd_grad_saved(const hd_grad_node *n, int i) {
    return n->saved[i];
}

/* What a rule's forward pass keeps: bit i for kernel input i, and
 * HD_GRAD_SAVE_OUT for the output. */
#define HD_GRAD_SAVE_IN(i)  (1u << (i))
#define HD_GRAD_SAVE_ALL_IN 0x7fffffffu
#define HD_GRAD_SAVE_OUT    0x80000000u

/* A rule's working state: ops run through it; the first failure sticks and
 * makes later ops return NULL, so rules read as formulas. Temporaries are
 * released when the rule returns. */
#define HD_GX_MAX 96
typedef struct hd_gx {
    hd_ctx *ctx;
    hd_status st;
    int n;
    hd_tensor *tmp[HD_GX_MAX];
    hd_op of; /* the op whose rule runs */
} hd_gx;

/* A gradient rule: given the record and g (the output's gradient, in the
 * output's dtype and shape), set gin[i] (a new reference, or NULL for a zero
 * gradient) for every i with need[i]. The result may have the kernel
 * input's dtype and any shape that broadcasts to the input's: backward sums
 * and casts it to the input's shape and dtype. */
typedef void (*hd_grad_fn)(hd_gx *x, const hd_grad_node *n, hd_tensor *g, const unsigned char *need,
                           hd_tensor **gin);

typedef struct hd_grad_rule {
    hd_grad_fn fn;
    unsigned save; /* HD_GRAD_SAVE_* */
} hd_grad_rule;

/* hd_grad_rules.c: one rule per HD_GRAD(name) of hd_ops.def */
#define HD_GRAD(rule) extern const hd_grad_rule hd_grad_rule_##rule;
#define HD_NOGRAD
#define X(NAME, name, arity, kind, shape, grad) grad
#include "hd_ops.def"
#undef X
#undef HD_GRAD
#undef HD_NOGRAD

/* The rule of op, or NULL. */
const hd_grad_rule *hd_grad_rule_of(hd_op op);

/* hd_gx: run op through the rule state (NULL after a failure). */
hd_tensor *hd_gx_run(hd_gx *x, hd_op op, hd_tensor *const *in, int nin, const hd_attrs *attrs);
/* A result the rule returns: a new reference (NULL stays NULL). */
hd_tensor *hd_gx_out(hd_gx *x, hd_tensor *t);

/* ---- a traced loop rolled with its gradient ---- */

/* A traced loop rolled with its gradient (runtime/hd_trace_grad.c): two
 * iterations A and B, watched from generations gen_a and gen_b, became a
 * loop node. hd_grad_roll_scan finds A's and B's records that a tensor
 * still holds ("held": they must all be B's) and the edges by which
 * gradients leave the two iterations ("front", one per source). *why says what keeps
 * the loop from rolling with its gradient (NULL: it can); the status is
 * an error only when memory runs out. A branch (gen_a == gen_b) keeps no
 * record of its own: its values are taken apart. */
typedef struct hd_grad_front {
    hd_grad_edge e; /* referenced */
    uint64_t ref;   /* the source record's trace_ref; 0 for a leaf */
} hd_grad_front;
typedef struct hd_grad_roll {
    hd_grad_node **held; /* referenced */
    int nheld;
    hd_grad_front *front;
    int nfront;
    int cap_held, cap_front;
} hd_grad_roll;
hd_status hd_grad_roll_scan(hd_ctx *ctx, uint32_t gen_a, uint32_t gen_b, hd_grad_roll *r,
                            const char **why);
/* Held record i takes its gradient through fn (ud, owned by the record
 * from now on, freed by fn->free also on failure) to the front edges that
 * use marks, in front order (its inputs): it is made to pass its gradient
 * on to a new record of fn. */
hd_status hd_grad_roll_rewire(hd_ctx *ctx, hd_grad_roll *r, int i, const unsigned char *use,
                              const hd_grad_custom *fn, void *ud);
/* t's own edge (when it takes part in the current context's gradients)
 * into the front: a value a branch passes on unchanged. */
hd_status hd_grad_roll_add_tensor(hd_ctx *ctx, hd_grad_roll *r, hd_tensor *t);
/* Give t (no record yet) a record of fn (ud, owned by it from now on,
 * freed also on failure) over the front edges use marks. */
hd_status hd_grad_roll_record(hd_ctx *ctx, hd_grad_roll *r, const unsigned char *use, hd_tensor *t,
                              const hd_grad_custom *fn, void *ud);
/* Let go of the held records (a branch's values, taken apart). */
void hd_grad_roll_drop_held(hd_ctx *ctx, hd_grad_roll *r);
void hd_grad_roll_free(hd_ctx *ctx, hd_grad_roll *r);

#endif
