/* Loops and branches inside traced code (docs/compiled.md, "Loops" and
 * "Branches on tensor data"). A counted loop `for i in a..b` whose
 * iterations repeat becomes one loop node of the graph instead of b - a
 * copies of its body; an `if` on a one-element tensor becomes a cond (at
 * the end of this file).
 *
 * The loop traces its iterations one by one, watching each: an iteration
 * "repeats" when every write it makes to state that existed before it
 * leaves that state as the next iteration will need it (a tensor of the
 * same dtype, shape and gradient status; an equal plain value) and the
 * loop variable is not read. Once two consecutive iterations repeat and
 * traced the same nodes (hd_trace_roll), the second becomes a loop node
 * for the rest; gradient records the iterations leave alive (a chain that
 * runs through them) get a loop for their gradient (hd_trace_grad.c), or
 * keep the loop unrolled where it cannot have one. Anything else (a
 * counter, an appended list, shapes that change) keeps the loop unrolled,
 * as it always was. */
#include "compiled_int.h"
#include "eval.h"
#include "vm_internal.h"

#include "../runtime/hd_autograd.h"
#include "../runtime/hd_trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Loops of fewer iterations stay unrolled. */
#define HD_LOOP_ROLL_MIN 3
/* Loops that trace at most this many nodes in all stay unrolled: they
 * compile about as fast as a loop node and run faster, fused across
 * iterations (bench/bench_loops.sh; docs/compiled.md). */
#define HD_LOOP_UNROLL_NODES 48
/* Iterations traced while looking for two that repeat. */
#define HD_LOOP_ROLL_TRIES 6

typedef struct roll_grad {
    hd_tensor *t; /* held */
    int had, requires;
    hd_dtype dtype;
    int ndim;
    int64_t shape[HD_MAX_DIMS];
} roll_grad;

typedef struct hd_roll_watch {
    struct hd_roll_watch *outer;
    const hd_frame *frame;      /* the loop's frame */
    const unsigned char *local; /* per slot of frame: declared by the body */
    int nslots;
    uint64_t birth0; /* objects made after this belong to the iteration */
    uint32_t gen;    /* ctx->grad_watch during the iteration */
    int changed;     /* a write that does not repeat */
    const char *why; /* the first such write, for HODU_LOG=loop */
    roll_grad *grads;
    int ngrads, cap;
    /* a branch (hd_eval_if_traced): writes to the function's own variables
     * are logged with their old values to be put back; any other write to
     * state from before the branch is refused */
    int undo;
    int grads_ok; /* a branch of an if: its values may need gradients (a cond carries them) */
    int *log_slot;
    hd_value *log_old; /* held */
    int nlog, caplog;
} hd_roll_watch;

/* HODU_LOOP_ROLL=0 keeps every loop unrolled (for comparisons). */
static int roll_enabled(void) {
    const char *s = getenv("HODU_LOOP_ROLL");
    return !s || strcmp(s, "0") != 0;
}

static int roll_log_on(void) {
    return hd_log_on("loop");
}

static void roll_change(hd_roll_watch *w, const char *why) {
    if (!w->changed) w->why = why;
    w->changed = 1;
}

static int roll_same_tensor_type(hd_vm *vm, const hd_tensor *x, const hd_tensor *y) {
    return x->dtype == y->dtype && x->ndim == y->ndim &&
           !memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof *x->shape) &&
           hd_grad_requires(&vm->ctx, x) == hd_grad_requires(&vm->ctx, y);
}

/* Does writing v over old leave what the next iteration sees the same?
 * Tensors: the same type; objects: the same one (their own changes are
 * watched where they happen); the rest: equal values. */
static int roll_same_value(hd_vm *vm, hd_value old, hd_value v) {
    if (old.type != v.type) return 0;
    if (v.type == HD_V_TENSOR) return roll_same_tensor_type(vm, old.as.t, v.as.t);
    if (hd_value_is_obj(v) && v.type != HD_V_STR) return old.as.o == v.as.o;
    return hd_value_equal(old, v);
}

/* Is the frame f made during w's iteration (a call from its body)? */
static int roll_inner_frame(const hd_roll_watch *w, const hd_frame *f) {
    for (const hd_frame *p = f ? f->parent : NULL; p; p = p->parent)
        if (p == w->frame) return 1;
    return 0;
}

static int roll_is_local(const hd_roll_watch *w, const hd_frame *f, const hd_ref *r,
                         const hd_obj *cell) {
    if (cell) return cell->birth > w->birth0;
    if (r->kind != HD_REF_LOCAL) return 0;
    if (f == w->frame) return r->index >= 0 && r->index < w->nslots && w->local[r->index];
    return roll_inner_frame(w, f);
}

/* A branch's write to slot `slot` of its frame: its old value, once. */
static void roll_log(hd_vm *vm, hd_roll_watch *w, int slot, hd_value old) {
    for (int i = 0; i < w->nlog; i++)
        if (w->log_slot[i] == slot) return;
    if (w->nlog == w->caplog) {
        int cap = w->caplog ? w->caplog * 2 : 8;
        int *s = hd_ctx_alloc(&vm->ctx, (size_t)cap * sizeof *s);
        hd_value *o = s ? hd_ctx_alloc(&vm->ctx, (size_t)cap * sizeof *o) : NULL;
        if (!o) {
            hd_ctx_free(&vm->ctx, s, s ? (size_t)cap * sizeof *s : 0);
            hd_error_clear(&vm->ctx);
            roll_change(w, "out of memory");
            return;
        }
        if (w->nlog) {
            memcpy(s, w->log_slot, (size_t)w->nlog * sizeof *s);
            memcpy(o, w->log_old, (size_t)w->nlog * sizeof *o);
        }
        hd_ctx_free(&vm->ctx, w->log_slot, (size_t)w->caplog * sizeof *s);
        hd_ctx_free(&vm->ctx, w->log_old, (size_t)w->caplog * sizeof *o);
        w->log_slot = s;
        w->log_old = o;
        w->caplog = cap;
    }
    w->log_slot[w->nlog] = slot;
    hd_vref(w->log_old[w->nlog++] = old);
}

void hd_roll_note_store(hd_vm *vm, const hd_frame *f, const hd_ref *r, const hd_obj *cell,
                        hd_value old, hd_value v) {
    for (hd_roll_watch *w = vm->roll_watch; w; w = w->outer) {
        if (roll_is_local(w, f, r, cell)) continue;
        if (w->undo && !cell && r->kind == HD_REF_LOCAL && f == w->frame)
            roll_log(vm, w, r->index, old);
        else if (w->undo)
            roll_change(w, "it assigns a variable outside the function");
        else if (!roll_same_value(vm, old, v))
            roll_change(w, "a variable from before the iteration changes");
    }
}

void hd_roll_note_container(hd_vm *vm, const hd_obj *o, int has_old, hd_value old, hd_value v) {
    for (hd_roll_watch *w = vm->roll_watch; w; w = w->outer)
        if (o->birth <= w->birth0 && (w->undo || !has_old || !roll_same_value(vm, old, v)))
            roll_change(w, w->undo ? "it changes a list, dict or object from before it"
                                   : "a list, dict or object from before the iteration changes");
}

void hd_roll_note_global(hd_vm *vm, hd_value old, hd_value v) {
    for (hd_roll_watch *w = vm->roll_watch; w; w = w->outer)
        if (w->undo || !roll_same_value(vm, old, v)) roll_change(w, "a module's variable changes");
}

/* ---- gradients: .grad and requires_grad of leaves ---- */

static void roll_grad_state(hd_vm *vm, const hd_tensor *t, roll_grad *s) {
    const hd_tensor *g = hd_grad_get(t);
    s->had = g != NULL;
    s->requires = hd_grad_requires(&vm->ctx, t);
    s->dtype = g ? g->dtype : HD_F32;
    s->ndim = g ? g->ndim : 0;
    if (g) memcpy(s->shape, g->shape, sizeof s->shape);
}

static int roll_grad_same(const roll_grad *a, const roll_grad *b) {
    if (a->had != b->had || a->requires != b->requires) return 0;
    return !a->had || (a->dtype == b->dtype && a->ndim == b->ndim &&
                       !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape));
}

static void roll_note_grad(hd_roll_watch *w, hd_vm *vm, hd_tensor *t) {
    for (int i = 0; i < w->ngrads; i++)
        if (w->grads[i].t == t) return;
    if (w->ngrads == w->cap) {
        int cap = w->cap ? w->cap * 2 : 16;
        roll_grad *g =
            hd_ctx_realloc(&vm->ctx, w->grads, (size_t)w->cap * sizeof *g, (size_t)cap * sizeof *g);
        if (!g) { /* the loop stays unrolled; the write itself goes on */
            hd_error_clear(&vm->ctx);
            roll_change(w, "out of memory");
            return;
        }
        w->grads = g;
        w->cap = cap;
    }
    roll_grad *s = &w->grads[w->ngrads++];
    roll_grad_state(vm, t, s);
    s->t = hd_tensor_ref(t);
}

static void roll_grad_write(hd_ctx *ctx, void *ud, hd_tensor *t) {
    hd_vm *vm = ud;
    HD_UNUSED(ctx);
    for (hd_roll_watch *w = vm->roll_watch; w; w = w->outer) {
        if (w->undo)
            roll_change(w, "it changes a .grad");
        else
            roll_note_grad(w, vm, t);
    }
}

/* ---- one watched iteration ---- */

static void roll_watch_begin(hd_vm *vm, hd_roll_watch *w, const hd_frame *f,
                             const unsigned char *local, int nslots) {
    memset(w, 0, sizeof *w);
    w->outer = vm->roll_watch;
    w->frame = f;
    w->local = local;
    w->nslots = nslots;
    w->birth0 = vm->births;
    w->gen = vm->ctx.grad_watch = hd_grad_watch_next(&vm->ctx);
    vm->roll_watch = w;
    vm->ctx.grad_write = roll_grad_write;
    vm->ctx.grad_write_ud = vm;
}

/* End the watch; 1 if the iteration repeats. */
static int roll_watch_end(hd_vm *vm, hd_roll_watch *w) {
    for (int i = 0; i < w->ngrads; i++) {
        roll_grad now;
        roll_grad_state(vm, w->grads[i].t, &now);
        if (!roll_grad_same(&w->grads[i], &now)) roll_change(w, "a .grad changes");
        hd_tensor_unref(w->grads[i].t);
    }
    hd_ctx_free(&vm->ctx, w->grads, (size_t)w->cap * sizeof *w->grads);
    /* a counted loop rolls with its gradient where it can (hd_trace_roll) */
    if (w->undo && !w->grads_ok && hd_grad_watch_live(&vm->ctx, w->gen))
        roll_change(w, "its values need gradients, which a while loop does not give yet");
    vm->roll_watch = w->outer;
    vm->ctx.grad_watch = w->outer ? w->outer->gen : 0;
    if (!w->outer) {
        vm->ctx.grad_write = NULL;
        vm->ctx.grad_write_ud = NULL;
    }
    return !w->changed;
}

/* ---- the loop ---- */

/* Does n (not inside nested functions) read the variable at ref r? */
static int roll_reads(const hd_ast *n, const hd_ref *r, int depth) {
    if (!n || depth > 200) return n != NULL;
    if (n->kind == HD_AST_NAME && n->ref.kind == r->kind && n->ref.index == r->index) return 1;
    if (n->kind == HD_AST_FN || n->kind == HD_AST_FNDEF) return 0;
    if (roll_reads(n->a, r, depth + 1) || roll_reads(n->b, r, depth + 1) ||
        roll_reads(n->c, r, depth + 1) || roll_reads(n->body, r, depth + 1))
        return 1;
    for (int i = 0; i < n->n; i++)
        if (roll_reads(n->items[i], r, depth + 1)) return 1;
    return 0;
}

static int roll_is_var(const hd_ast *n, const hd_ref *r) {
    return n && n->kind == HD_AST_NAME && n->ref.kind == r->kind && n->ref.index == r->index;
}

/* Does n read the variable at ref r only as a whole index of a read,
 * x[i] or x[i, :] (not a slice's bound, not x[i] = v, not i + 1)? There
 * a 0-d counter tensor gives what the int gives: index_select's rows are
 * the view's values (compiled code does not write through views). Nested
 * functions could capture i, so a body with one does not qualify. */
static int roll_index_only(const hd_ast *n, const hd_ref *r, int depth) {
    if (!n) return 1;
    if (depth > 200) return 0;
    switch (n->kind) {
    case HD_AST_FN:
    case HD_AST_FNDEF:
    case HD_AST_CLASS:
    case HD_AST_SCRIPT: return 0;
    case HD_AST_NAME: return !roll_is_var(n, r);
    case HD_AST_ASSIGN:
        if (n->a && n->a->kind == HD_AST_INDEX) {
            for (int i = 0; i < n->a->n; i++)
                if (roll_is_var(n->a->items[i], r)) return 0;
        }
        break;
    case HD_AST_INDEX:
        if (!roll_index_only(n->a, r, depth + 1)) return 0;
        for (int i = 0; i < n->n; i++)
            if (!roll_is_var(n->items[i], r) && !roll_index_only(n->items[i], r, depth + 1))
                return 0;
        return 1;
    default: break;
    }
    if (!roll_index_only(n->a, r, depth + 1) || !roll_index_only(n->b, r, depth + 1) ||
        !roll_index_only(n->c, r, depth + 1) || !roll_index_only(n->body, r, depth + 1))
        return 0;
    for (int i = 0; i < n->n; i++)
        if (!roll_index_only(n->items[i], r, depth + 1)) return 0;
    return 1;
}

/* A loop variable served as a counter tensor, in this iteration. */
typedef struct hd_roll_var {
    struct hd_roll_var *outer;
    hd_tensor *t;
    int64_t i; /* its value as an int */
} hd_roll_var;

int hd_roll_index_int(hd_vm *vm, hd_value k, hd_value *out) {
    const hd_roll_var *v = vm->roll_var;
    while (v && (k.type != HD_V_TENSOR || k.as.t != v->t)) v = v->outer;
    if (!v) return 0;
    *out = hd_int(v->i);
    for (hd_roll_watch *w = vm->roll_watch; w; w = w->outer)
        roll_change(w, "it indexes a list, dict or string with the loop variable");
    return 1;
}

typedef struct roll_loop {
    hd_vm *vm;
    hd_frame *f;
    const hd_ast *n;
    int64_t a, step, count;
    unsigned char *local;
    int nslots;
    int log;
    /* the loop variable served as a counter tensor (x[i] only): the
     * last iteration's value (held) and the step */
    hd_tensor *counter, *one;
} roll_loop;

static void roll_say(const roll_loop *L, const char *fmt, int64_t x, const char *why) {
    if (!L->log) return;
    const char *file = L->f->chunk && L->f->chunk->name ? L->f->chunk->name : "?";
    const char *base = strrchr(file, '/');
    fflush(stdout);
    fprintf(stderr, "hodu: loop (%s:%d): ", base ? base + 1 : file, L->n->span.line);
    fprintf(stderr, fmt, (long long)x, why ? why : "");
    fputc('\n', stderr);
}

static hd_tensor *roll_op(hd_vm *vm, hd_op op, hd_tensor *a, hd_tensor *b, const hd_attrs *at);

/* Run iteration k with its loop variable: the int, or the counter tensor,
 * one traced add past the iteration before's (so that iterations repeat).
 * A flow code. */
static int roll_iteration(roll_loop *L, int64_t k) {
    hd_vm *vm = L->vm;
    int64_t i = L->a + k * L->step;
    if (!L->counter) return hd_eval_for_iteration(vm, L->f, L->n, hd_int(i));
    hd_tensor *c = roll_op(vm, HD_OP_ADD, L->counter, L->one, NULL);
    if (!c) {
        hd_eval_failf(vm, L->f, L->n, vm->ctx.status, "%s", vm->ctx.errmsg);
        return HD_FLOW_ERROR;
    }
    hd_tensor_unref(L->counter);
    L->counter = c;
    hd_roll_var var = {vm->roll_var, c, i};
    vm->roll_var = &var;
    int fl = hd_eval_for_iteration(vm, L->f, L->n, hd_tensor_value(hd_tensor_ref(c)));
    vm->roll_var = var.outer;
    return fl;
}

/* Iterations from..count, unrolled. */
static int roll_rest(roll_loop *L, int64_t from) {
    for (int64_t k = from; k < L->count; k++) {
        int fl = roll_iteration(L, k);
        if (fl) return fl;
    }
    return HD_FLOW_NORMAL;
}

/* Would the whole loop, unrolled, trace few enough nodes (the first
 * iteration began at start)? An iteration with a loop node in it is never
 * small: unrolled, each copy of that node compiles its own body. */
static int roll_small(const roll_loop *L, hd_trace_pos start) {
    const hd_ir_graph *g = hd_trace_graph(&L->vm->ctx);
    int64_t per = g->nnodes - start.nodes;
    for (int i = start.nodes; i < g->nnodes; i++)
        if (g->nodes[i].op == HD_IR_LOOP) return 0;
    return per <= HD_LOOP_UNROLL_NODES / L->count;
}

/* Trace the iterations, rolling the rest into a loop node once two repeat.
 * Returns a flow code. */
static int roll_run(roll_loop *L) {
    hd_vm *vm = L->vm;
    hd_trace_pos prev = {0, 0, 0};
    int prev_same = 0;
    for (int64_t k = 0; k < L->count; k++) {
        int watching = k < HD_LOOP_ROLL_TRIES;
        hd_roll_watch w;
        if (watching) roll_watch_begin(vm, &w, L->f, L->local, L->nslots);
        hd_trace_pos start = hd_trace_position(&vm->ctx);
        int fl = roll_iteration(L, k);
        int same = watching ? roll_watch_end(vm, &w) : 0;
        if (fl) return fl;
        /* a small loop stays unrolled, unless its gradient would unroll too */
        if (k == 0 && !hd_grad_watch_live(&vm->ctx, w.gen) && roll_small(L, start)) {
            hd_tensor_unref(L->counter); /* unrolled: x[i] as a view again */
            L->counter = NULL;
            return roll_rest(L, 1);
        }
        if (watching && !same) roll_say(L, "iteration %lld does not repeat: %s", k, w.why);
        if (k >= 1 && prev_same && same && L->count - k >= 2) {
            int rolled = 0;
            const char *why = NULL;
            if (hd_trace_roll(&vm->ctx, prev, start, hd_trace_position(&vm->ctx), L->count - k + 1,
                              &rolled, &why)) {
                hd_eval_failf(vm, L->f, L->n, vm->ctx.status, "%s", vm->ctx.errmsg);
                return HD_FLOW_ERROR;
            }
            if (rolled) {
                roll_say(L, "one loop node of %lld iterations%s", L->count - k + 1, "");
                return HD_FLOW_NORMAL;
            }
            if (why)
                roll_say(L, "stays unrolled after iteration %lld: %s", k, why);
            else
                roll_say(L, "iteration %lld traced other nodes than the one before%s", k, "");
        }
        prev = start;
        prev_same = same;
    }
    return HD_FLOW_NORMAL;
}

/* The loop variable as a counter tensor when the body reads it only as
 * x[i]: 1 if so. */
static int roll_counter_begin(roll_loop *L) {
    hd_ctx *ctx = &L->vm->ctx;
    /* the counter's values, from a - 2 step to the last, exact as numbers */
    const int64_t big = (int64_t)1 << 53;
    int64_t before, twice, last = L->a + (L->count - 1) * L->step;
    if (!roll_index_only(L->n->body, &L->n->ref, 0) ||
        __builtin_sub_overflow(L->a, L->step, &before) ||
        __builtin_sub_overflow(before, L->step, &twice) || twice < -big || twice > big ||
        last < -big || last > big)
        return 0;
    /* made by an op, as every later value, so that iteration 0 repeats too */
    hd_tensor *c = hd_tensor_number(ctx, HD_I64, (double)twice);
    L->one = c ? hd_tensor_number(ctx, HD_I64, (double)L->step) : NULL;
    L->counter = L->one ? roll_op(L->vm, HD_OP_ADD, c, L->one, NULL) : NULL;
    hd_tensor_unref(c);
    if (L->counter) return 1;
    hd_error_clear(ctx); /* unrolled, as without loop nodes */
    hd_tensor_unref(L->counter);
    hd_tensor_unref(L->one);
    L->counter = L->one = NULL;
    return 0;
}

/* After the loop the variable holds the last int, as eagerly. */
static void roll_counter_end(roll_loop *L) {
    if (!L->one) return;
    hd_value *slot = &L->f->slots[L->n->ref.index], old = *slot;
    *slot = hd_int(L->a + (L->count - 1) * L->step);
    hd_vunref(L->vm, old);
    hd_tensor_unref(L->counter);
    hd_tensor_unref(L->one);
}

int hd_eval_for_traced(hd_vm *vm, hd_frame *f, const hd_ast *n, int64_t a, int64_t step,
                       int64_t count) {
    roll_loop L = {vm, f, n, a, step, count, NULL, f->nslots, roll_log_on(), NULL, NULL};
    if (count < HD_LOOP_ROLL_MIN || !roll_enabled() || n->ref.kind != HD_REF_LOCAL)
        return roll_rest(&L, 0);
    if (roll_reads(n->body, &n->ref, 0) && !roll_counter_begin(&L)) {
        roll_say(&L, "stays unrolled (%lld iterations): its body reads the loop variable%s", count,
                 " other than as an index (x[i])");
        return roll_rest(&L, 0);
    }
    int fl;
    if (L.nslots > 0 && !(L.local = hd_ctx_calloc(&vm->ctx, (size_t)L.nslots, 1))) {
        hd_error_clear(&vm->ctx); /* unrolled, as without loop nodes */
        fl = roll_rest(&L, 0);
        roll_counter_end(&L);
        return fl;
    }
    if (L.local) {
        hd_compiled_decl_walk(n->body, L.local, L.nslots, 0);
        if (n->ref.index >= 0 && n->ref.index < L.nslots) L.local[n->ref.index] = 1;
    }
    fl = roll_run(&L);
    if (L.local) hd_ctx_free(&vm->ctx, L.local, (size_t)L.nslots);
    roll_counter_end(&L);
    return fl;
}

/* ---- branches on tensors ----
 *
 * `if t { ... } else { ... }` on a one-element tensor t known only when
 * the graph runs: both branches are traced, the function's variables each
 * writes are put back after it, and the variables become the results of a
 * cond (hd_trace_cond): only the branch taken runs. A branch that writes
 * other state (fields, lists, globals, .grad), leaves a gradient record
 * alive, or gives a variable a value that is no tensor, or one of another
 * dtype or shape than the other branch, keeps the error it always had. */

typedef struct roll_branch {
    int *slot;
    hd_value *old, *now; /* held */
    int n;               /* entries (now may be NULL after a failed allocation) */
    int grads;           /* its values may need gradients (an if's branch) */
    uint32_t gen;        /* its watch's generation */
} roll_branch;

/* End branch watch w: its variables' values now, put back to before. */
static void roll_branch_take(hd_vm *vm, hd_frame *f, hd_roll_watch *w, roll_branch *b) {
    b->slot = w->log_slot;
    b->old = w->log_old;
    b->n = w->nlog;
    b->now = hd_ctx_calloc(&vm->ctx, (size_t)w->caplog + 1, sizeof *b->now);
    for (int i = 0; i < b->n; i++) {
        hd_value cur = f->slots[b->slot[i]];
        hd_vref(f->slots[b->slot[i]] = b->old[i]);
        if (b->now)
            b->now[i] = cur;
        else
            hd_vunref(vm, cur);
    }
    w->log_slot = NULL;
    w->log_old = NULL;
}

static void roll_branch_free(hd_vm *vm, roll_branch *b, int cap) {
    for (int i = 0; i < b->n; i++) {
        hd_vunref(vm, b->old[i]);
        if (b->now) hd_vunref(vm, b->now[i]);
    }
    hd_ctx_free(&vm->ctx, b->slot, (size_t)cap * sizeof *b->slot);
    hd_ctx_free(&vm->ctx, b->old, (size_t)cap * sizeof *b->old);
    hd_ctx_free(&vm->ctx, b->now, (size_t)(cap + 1) * sizeof *b->now);
}

/* Trace one branch (stmt may be NULL) under an undo watch, then, when cv
 * is not NULL, the expression cond into *cv. Returns a flow code; *why is
 * set when the branch cannot be part of a cond or while loop. */
static int roll_branch_run(hd_vm *vm, hd_frame *f, const hd_ast *stmt, const hd_ast *cond,
                           hd_value *cv, const unsigned char *local, roll_branch *b, int *cap,
                           const char **why) {
    hd_roll_watch w;
    roll_watch_begin(vm, &w, f, local, f->nslots);
    w.undo = 1;
    w.grads_ok = b->grads;
    b->gen = w.gen;
    int fl = stmt ? hd_eval_statement(vm, f, stmt) : HD_FLOW_NORMAL;
    if (cv && fl == HD_FLOW_NORMAL) {
        *cv = hd_eval_expr(vm, f, cond);
        if (cv->type == HD_V_ERR) fl = HD_FLOW_ERROR;
    }
    int ok = roll_watch_end(vm, &w);
    *cap = w.caplog;
    roll_branch_take(vm, f, &w, b);
    if (!ok && !*why) *why = w.why;
    if (fl == HD_FLOW_BREAK || fl == HD_FLOW_CONTINUE || fl == HD_FLOW_RETURN) {
        if (!*why) *why = "it leaves its body early (break, continue or return)";
        fl = HD_FLOW_NORMAL;
    }
    if (!b->now && !*why) *why = "out of memory";
    return fl;
}

/* The value branch b gives slot s, or its value before. */
static hd_value roll_branch_value(const roll_branch *b, int s, hd_value before) {
    for (int i = 0; i < b->n; i++)
        if (b->slot[i] == s) return b->now[i];
    return before;
}

static const char *roll_merge_check(const hd_vm *vm, hd_value old, hd_value t, hd_value e) {
    if (t.type != HD_V_TENSOR || e.type != HD_V_TENSOR)
        return "a variable it assigns is no tensor in one branch";
    const hd_tensor *a = t.as.t, *b = e.as.t;
    if (a->dtype != b->dtype || a->ndim != b->ndim ||
        memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape))
        return "the branches give a variable different dtypes or shapes";
    if (old.type != HD_V_TENSOR ||
        (old.as.t->dtype == a->dtype && old.as.t->ndim == a->ndim &&
         !memcmp(old.as.t->shape, a->shape, (size_t)a->ndim * sizeof *a->shape)))
        return NULL;
    int ac = vm->ctx.autocast;
    if (old.as.t->dtype != a->dtype && (ac == HD_AUTOCAST_FULL || ac == HD_AUTOCAST_HALF))
        return ac == HD_AUTOCAST_FULL
                   ? "a variable changes dtype in its body: precision \"full\" computes in f64; "
                     "make it f64 before (x = x.double())"
                   : "a variable changes dtype in its body: precision \"half\" computes in f16; "
                     "make it f16 before (x = x.half())";
    return "a variable changes dtype or shape in its body";
}

/* Merge: the slots either branch wrote, as one cond (n: the if). */
static int roll_merge(hd_vm *vm, hd_frame *f, const hd_ast *node, hd_tensor *pred, hd_trace_pos *p,
                      const roll_branch *bt, const roll_branch *be, const char **why) {
    int n = 0, cap = bt->n + be->n + 1;
    int *slot = hd_ctx_alloc(&vm->ctx, (size_t)cap * sizeof *slot);
    hd_tensor **t = hd_ctx_calloc(&vm->ctx, (size_t)cap * 4, sizeof *t);
    if (!slot || !t) {
        hd_ctx_free(&vm->ctx, slot, slot ? (size_t)cap * sizeof *slot : 0);
        hd_ctx_free(&vm->ctx, t, t ? (size_t)cap * 4 * sizeof *t : 0);
        hd_error_clear(&vm->ctx);
        *why = "out of memory";
        return HD_FLOW_NORMAL;
    }
    hd_tensor **init = t, **tv = t + cap, **ev = t + 2 * cap, **out = t + 3 * cap;
    for (int k = 0; k < bt->n + be->n && !*why; k++) {
        int s = k < bt->n ? bt->slot[k] : be->slot[k - bt->n], dup = 0;
        for (int i = 0; i < n; i++) dup |= slot[i] == s;
        if (dup) continue;
        hd_value old = f->slots[s], a = roll_branch_value(bt, s, old),
                 b = roll_branch_value(be, s, old);
        if ((*why = roll_merge_check(vm, old, a, b))) break;
        slot[n] = s;
        init[n] = old.type == HD_V_TENSOR ? old.as.t : NULL;
        tv[n] = a.as.t;
        ev[n++] = b.as.t;
    }
    int fl = HD_FLOW_NORMAL;
    if (!*why && (n > 0 || p[2].nodes > p[0].nodes)) {
        if (hd_trace_cond(&vm->ctx, pred, p[0], p[1], p[2], n, init, tv, ev, bt->gen, out, why)) {
            hd_eval_failf(vm, f, node, vm->ctx.status, "%s", vm->ctx.errmsg);
            fl = HD_FLOW_ERROR;
            for (int i = 0; i < n; i++) hd_tensor_unref(out[i]);
        }
        for (int i = 0; i < n && fl == HD_FLOW_NORMAL && !*why; i++) {
            hd_value o = f->slots[slot[i]], v = hd_tensor_value(out[i]);
            hd_ref r = {HD_REF_LOCAL, slot[i]};
            if (vm->roll_watch) hd_roll_note_store(vm, f, &r, NULL, o, v); /* an outer branch */
            f->slots[slot[i]] = v;
            hd_vunref(vm, o);
        }
    }
    hd_ctx_free(&vm->ctx, slot, (size_t)cap * sizeof *slot);
    hd_ctx_free(&vm->ctx, t, (size_t)cap * 4 * sizeof *t);
    return fl;
}

int hd_eval_if_traced(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_tensor *pred, const char **why) {
    int ns = f->nslots > 0 ? f->nslots : 1;
    unsigned char *local = hd_ctx_calloc(&vm->ctx, (size_t)ns, 1);
    if (!local) return hd_error_clear(&vm->ctx), *why = "out of memory", HD_FLOW_NORMAL;
    hd_compiled_decl_walk(n->body, local, f->nslots, 0);
    hd_compiled_decl_walk(n->c, local, f->nslots, 0);
    roll_branch bt = {0}, be = {0};
    bt.grads = be.grads = 1;
    int capt = 0, cape = 0;
    hd_trace_pos p[3];
    p[0] = hd_trace_position(&vm->ctx);
    int fl = roll_branch_run(vm, f, n->body, NULL, NULL, local, &bt, &capt, why);
    p[1] = hd_trace_position(&vm->ctx);
    if (fl == HD_FLOW_NORMAL) fl = roll_branch_run(vm, f, n->c, NULL, NULL, local, &be, &cape, why);
    p[2] = hd_trace_position(&vm->ctx);
    if (fl == HD_FLOW_NORMAL && !*why) fl = roll_merge(vm, f, n, pred, p, &bt, &be, why);
    roll_branch_free(vm, &bt, capt);
    roll_branch_free(vm, &be, cape);
    hd_ctx_free(&vm->ctx, local, (size_t)ns);
    return fl;
}

/* ---- while on tensors, and for over a traced count ----
 *
 * `while t { ... }` on a one-element tensor t known only when the graph
 * runs: the body is traced once to find the function's variables it
 * writes (put back after), then again from markers standing for those
 * variables, with the condition after it; both become one while loop node
 * (hd_trace_while) carrying the variables and the condition's truth.
 * `for i in a..b` where a bound is such a tensor is traced the same way
 * and becomes a loop node of b - a iterations counted when the graph runs
 * (with i carried as a counter when the body reads it).
 * The same writes are refused as in a branch, and a variable must keep
 * its dtype and shape through the body. */

typedef struct roll_while {
    hd_vm *vm;
    hd_frame *f;
    const hd_ast *n;
    const unsigned char *local;
    roll_branch first, second;
    int cap1, cap2;
    int m;         /* carried: first.n variables, then the counter if any */
    hd_tensor **t; /* init, mark, now, out: 4 * m */
    hd_value cv;   /* the condition after the body */
    /* a for: its trip count (held), the loop variable's slot and its value
     * before; when the body reads the variable, a counter carried too:
     * its start (held) and its value after the body (held) */
    hd_tensor *trips, *start, *next;
    int var, counter;
    hd_value var_old;
} roll_while;

static const char *roll_while_check(const hd_vm *vm, const roll_while *W) {
    for (int i = 0; i < W->first.n; i++) {
        hd_value old = W->first.old[i];
        if (old.type != HD_V_TENSOR) return "a variable it assigns is no tensor before the loop";
        const char *why = roll_merge_check(vm, old, W->first.now[i], W->first.now[i]);
        if (why) return why;
    }
    return NULL;
}

static void roll_while_set(roll_while *W, int slot, hd_value v) {
    hd_value *p = &W->f->slots[slot];
    hd_value o = *p;
    hd_vref(*p = v);
    hd_vunref(W->vm, o);
}

/* Put the markers into the variables the first trace wrote (and the
 * counter's into the loop variable). */
static const char *roll_while_mark(roll_while *W) {
    int n = W->first.n;
    for (int i = 0; i < W->m; i++) {
        hd_tensor *init = i < n ? W->first.old[i].as.t : W->start;
        hd_tensor *m = hd_trace_while_mark(&W->vm->ctx, init);
        if (!m) return hd_error_clear(&W->vm->ctx), "out of memory";
        W->t[i] = init;
        W->t[W->m + i] = m;
        roll_while_set(W, i < n ? W->first.slot[i] : W->var, hd_tensor_value(m));
    }
    return NULL;
}

/* The variables' values after the second trace: each written one (only
 * those the first wrote), or its marker. */
static const char *roll_while_now(const hd_vm *vm, roll_while *W) {
    int n = W->first.n, m = W->m;
    for (int k = 0; k < W->second.n; k++) {
        int s = W->second.slot[k], found = 0;
        for (int i = 0; i < n; i++) found |= W->first.slot[i] == s;
        if (!found) return "its body writes other variables once they are traced";
    }
    for (int i = 0; i < n; i++) {
        hd_value mk = hd_tensor_value(W->t[m + i]);
        hd_value v = roll_branch_value(&W->second, W->first.slot[i], mk);
        const char *why = roll_merge_check(vm, W->first.old[i], v, v);
        if (why) return why;
        W->t[2 * m + i] = v.as.t;
    }
    if (n < m) W->t[2 * m + n] = W->next;
    if (!W->trips && (W->cv.type != HD_V_TENSOR || W->cv.as.t->numel != 1))
        return "its condition is no longer a one-element tensor after the body";
    return NULL;
}

/* The variables take the loop's results (the markers go). */
static int roll_while_bind(roll_while *W, hd_tensor *pred, hd_trace_pos *p) {
    hd_vm *vm = W->vm;
    int n = W->first.n, m = W->m;
    hd_tensor **out = W->t + 3 * m;
    hd_tensor *cond = W->trips ? NULL : W->cv.as.t;
    if (hd_trace_while(&vm->ctx, W->trips ? NULL : pred, W->trips, p[0], p[1], p[2], m, W->t,
                       W->t + m, W->t + 2 * m, cond, out)) {
        hd_eval_failf(vm, W->f, W->n, vm->ctx.status, "%s", vm->ctx.errmsg);
        for (int i = 0; i < m; i++) hd_tensor_unref(out[i]);
        return HD_FLOW_ERROR;
    }
    for (int i = 0; i < n; i++) {
        int s = W->first.slot[i];
        hd_value o = W->f->slots[s], v = hd_tensor_value(out[i]);
        hd_ref r = {HD_REF_LOCAL, s};
        if (vm->roll_watch) hd_roll_note_store(vm, W->f, &r, NULL, W->first.old[i], v);
        W->f->slots[s] = v;
        hd_vunref(vm, o);
    }
    for (int i = n; i < m; i++) hd_tensor_unref(out[i]); /* the counter */
    return HD_FLOW_NORMAL;
}

/* Put the variables back as they were before the loop. */
static void roll_while_restore(roll_while *W) {
    for (int i = 0; i < W->first.n; i++) roll_while_set(W, W->first.slot[i], W->first.old[i]);
}

static hd_tensor *roll_op(hd_vm *vm, hd_op op, hd_tensor *a, hd_tensor *b, const hd_attrs *at) {
    hd_tensor *in[2] = {a, b}, *out = NULL;
    return hd_op_run(&vm->ctx, op, in, b ? 2 : 1, at, &out) ? NULL : out;
}

/* A for's counter after the body: next = mark + 1. */
static const char *roll_while_count(roll_while *W) {
    hd_vm *vm = W->vm;
    hd_tensor *one = hd_tensor_number(&vm->ctx, HD_I64, 1);
    W->next = one ? roll_op(vm, HD_OP_ADD, W->t[W->m + W->first.n], one, NULL) : NULL;
    hd_tensor_unref(one);
    return W->next ? NULL : (hd_error_clear(&vm->ctx), "out of memory");
}

static int roll_while_second(roll_while *W, hd_trace_pos *p, const char **why) {
    hd_vm *vm = W->vm;
    int counted = W->trips != NULL;
    p[1] = hd_trace_position(&vm->ctx);
    int fl = roll_branch_run(vm, W->f, W->n->body, counted ? NULL : W->n->a,
                             counted ? NULL : &W->cv, W->local, &W->second, &W->cap2, why);
    if (fl == HD_FLOW_NORMAL && !*why && W->counter) *why = roll_while_count(W);
    p[2] = hd_trace_position(&vm->ctx);
    return fl;
}

static int roll_while_trace(roll_while *W, hd_tensor *pred, const char **why) {
    hd_vm *vm = W->vm;
    hd_trace_pos p[3];
    p[0] = hd_trace_position(&vm->ctx);
    int fl = roll_branch_run(vm, W->f, W->n->body, NULL, NULL, W->local, &W->first, &W->cap1, why);
    hd_trace_cut(&vm->ctx, p[0]);
    if (fl != HD_FLOW_NORMAL || *why || (*why = roll_while_check(vm, W))) return fl;
    W->m = W->first.n + W->counter;
    if (!(W->t = hd_ctx_calloc(&vm->ctx, (size_t)(4 * W->m + 1), sizeof *W->t)))
        return hd_error_clear(&vm->ctx), *why = "out of memory", fl;
    if (!(*why = roll_while_mark(W))) {
        fl = roll_while_second(W, p, why);
        if (fl == HD_FLOW_NORMAL && !*why && !(*why = roll_while_now(vm, W)))
            fl = roll_while_bind(W, pred, p);
    }
    if (fl != HD_FLOW_NORMAL || *why) roll_while_restore(W);
    return fl;
}

static int roll_while_run(roll_while *W, hd_tensor *pred, const char **why) {
    hd_vm *vm = W->vm;
    hd_frame *f = W->f;
    int ns = f->nslots > 0 ? f->nslots : 1;
    unsigned char *local = hd_ctx_calloc(&vm->ctx, (size_t)ns, 1);
    if (!local) return hd_error_clear(&vm->ctx), *why = "out of memory", HD_FLOW_NORMAL;
    hd_compiled_decl_walk(W->n->body, local, f->nslots, 0);
    if (W->var >= 0 && W->var < f->nslots) local[W->var] = 1;
    W->local = local;
    int fl = roll_while_trace(W, pred, why);
    int m = W->m;
    for (int i = 0; W->t && i < m; i++) hd_tensor_unref(W->t[m + i]);
    hd_ctx_free(&vm->ctx, W->t, W->t ? (size_t)(4 * m + 1) * sizeof *W->t : 0);
    hd_vunref(vm, W->cv);
    hd_tensor_unref(W->next);
    roll_branch_free(vm, &W->first, W->cap1);
    roll_branch_free(vm, &W->second, W->cap2);
    hd_ctx_free(&vm->ctx, local, (size_t)ns);
    return fl;
}

int hd_eval_while_traced(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_tensor *pred,
                         const char **why) {
    roll_while W;
    memset(&W, 0, sizeof W);
    W.vm = vm, W.f = f, W.n = n, W.var = -1;
    return roll_while_run(&W, pred, why);
}

/* A range bound as a 0-d i64 tensor (traced when it is symbolic). */
static hd_tensor *roll_bound(hd_vm *vm, hd_value v) {
    if (v.type == HD_V_INT) return hd_tensor_number(&vm->ctx, HD_I64, (double)v.as.i);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    hd_tensor *t = hd_tensor_ref(v.as.t), *r;
    if (t->dtype != HD_I64) {
        at.dtype = HD_I64;
        r = roll_op(vm, HD_OP_CAST, t, NULL, &at);
        hd_tensor_unref(t);
        if (!(t = r)) return NULL;
    }
    if (t->ndim != 0) {
        memset(&at, 0, sizeof at);
        r = roll_op(vm, HD_OP_RESHAPE, t, NULL, &at);
        hd_tensor_unref(t);
        t = r;
    }
    return t;
}

int hd_eval_for_count_traced(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value a, hd_value b,
                             const char **why) {
    if (n->ref.kind != HD_REF_LOCAL || n->ref.index < 0 || n->ref.index >= f->nslots)
        return *why = "its loop variable is not a function's variable", HD_FLOW_NORMAL;
    roll_while W;
    memset(&W, 0, sizeof W);
    W.vm = vm, W.f = f, W.n = n, W.var = n->ref.index;
    W.counter = roll_reads(n->body, &n->ref, 0);
    W.start = roll_bound(vm, a);
    hd_tensor *stop = W.start ? roll_bound(vm, b) : NULL;
    W.trips = stop ? roll_op(vm, HD_OP_SUB, stop, W.start, NULL) : NULL;
    int fl = HD_FLOW_NORMAL;
    if (!W.trips) {
        fl = (hd_eval_failf(vm, f, n->a, vm->ctx.status, "%s", vm->ctx.errmsg), HD_FLOW_ERROR);
    } else {
        hd_vref(W.var_old = f->slots[W.var]);
        roll_while_set(&W, W.var, hd_tensor_value(W.start)); /* for the first trace */
        fl = roll_while_run(&W, NULL, why);
        roll_while_set(&W, W.var, W.var_old);
        hd_vunref(vm, W.var_old);
    }
    hd_tensor_unref(W.trips);
    hd_tensor_unref(W.start);
    hd_tensor_unref(stop);
    return fl;
}
