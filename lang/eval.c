/* eval: see eval.h. The dispatch (ev for expressions, ex for statements)
 * is one switch each; everything slower lives in the functions around them. */
#include "eval.h"
#include "compiled.h"
#include "builtins_tensor.h"
#include "tensor_api.h"
#include "hd_trace.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Frames up to this many slots live on the C stack. */
#define HD_STACK_SLOTS 32

static hd_value ev(hd_vm *vm, hd_frame *f, const hd_ast *n);
static hd_value ev_call(hd_vm *vm, hd_frame *f, const hd_ast *n);
static int ex(hd_vm *vm, hd_frame *f, const hd_ast *n);
static int ex_block(hd_vm *vm, hd_frame *f, const hd_ast *b);
static hd_status call_value(hd_vm *vm, hd_value callee, hd_value self, int has_self,
                            const hd_value *args, int nargs, const hd_kwarg *kw, int nkw,
                            hd_value *out);

/* ---- errors ---- */

static hd_value fail(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    hd_vm_locate(vm, f, &n->span);
    return hd_err_value();
}

hd_value hd_eval_fail(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    return fail(vm, f, n);
}

hd_value hd_eval_failf(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_status st, const char *fmt,
                       ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(vm->errmsg, sizeof vm->errmsg, fmt, ap);
    va_end(ap);
    vm->err = st;
    vm->err_located = 0;
    return fail(vm, f, n);
}

static int flow_fail(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    fail(vm, f, n);
    return HD_FLOW_ERROR;
}

static HD_NOINLINE int tick_fail(hd_vm *vm) {
    if (!vm->interrupted && vm->steps - 1 < vm->max_steps) {
        /* a look at the clock under a time limit */
        if (!hd_stop_now(&vm->ctx.stop)) {
            vm->step_check = HD_MIN(vm->max_steps, vm->steps + HD_TICK_CLOCK);
            return 0;
        }
    }
    if (vm->interrupted) {
        hd_vm_stop_error(vm);
    } else {
        hd_vm_error(vm, HD_ERR_LIMIT, "step limit (%llu) exceeded",
                    (unsigned long long)vm->max_steps);
    }
    return 1;
}

/* Loop back-edges and calls: interrupts and the step limit, one branch. */
static inline int tick(hd_vm *vm) {
    if (HD_LIKELY(!(vm->interrupted | (vm->steps++ >= vm->step_check)))) return 0;
    return tick_fail(vm);
}

const char *hd_eval_op_name(int op) {
    switch (op) {
    case HD_TOK_PLUS: return "+";
    case HD_TOK_MINUS: return "-";
    case HD_TOK_STAR: return "*";
    case HD_TOK_SLASH: return "/";
    case HD_TOK_PERCENT: return "%";
    case HD_TOK_AT: return "@";
    case HD_TOK_POW: return "**";
    case HD_TOK_EQ: return "==";
    case HD_TOK_NE: return "!=";
    case HD_TOK_LT: return "<";
    case HD_TOK_LE: return "<=";
    case HD_TOK_GT: return ">";
    case HD_TOK_GE: return ">=";
    case HD_TOK_RANGE: return "..";
    case HD_TOK_NOT: return "not";
    case HD_TOK_PLUS_ASSIGN: return "+=";
    case HD_TOK_MINUS_ASSIGN: return "-=";
    case HD_TOK_STAR_ASSIGN: return "*=";
    case HD_TOK_SLASH_ASSIGN: return "/=";
    case HD_TOK_FLOORDIV: return "//";
    case HD_TOK_IN: return "in";
    case HD_TOK_NOT_IN: return "not in";
    default: return "?";
    }
}

int hd_eval_truthy(hd_vm *vm, hd_value v, int *ok) {
    *ok = 1;
    if (v.type != HD_V_TENSOR) return hd_value_truthy(v);
    const hd_tensor *t = v.as.t;
    if (HD_UNLIKELY(!t->storage || vm->ctx.trace) &&
        hd_compiled_check_data(vm, t, "condition") != HD_OK) {
        *ok = 0;
        return 0;
    }
    if (t->numel != 1) {
        hd_vm_error(vm, HD_ERR_RUNTIME,
                    "the truth value of a tensor with %lld elements is ambiguous",
                    (long long)t->numel);
        *ok = 0;
        return 0;
    }
    if (hd_tensor_is_cpu(t)) return hd_tensor_get(t, 0) != 0.0;
    hd_value item, r;
    if (hd_eval_get_member(vm, v, "item", &item) != HD_OK) {
        *ok = 0;
        return 0;
    }
    hd_status st = call_value(vm, item, hd_none(), 0, NULL, 0, NULL, 0, &r);
    hd_vunref(vm, item);
    if (st != HD_OK) {
        *ok = 0;
        return 0;
    }
    int truth = hd_value_truthy(r);
    hd_vunref(vm, r);
    return truth;
}

/* ---- names ---- */

static HD_NOINLINE hd_value undefined(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    return hd_eval_failf(vm, f, n, HD_ERR_RUNTIME, "'%s' is used before its definition", n->name);
}

static hd_value *cell_of(hd_frame *f, int slot) {
    hd_value c = f->slots[slot];
    return c.type == HD_V_CELL ? &((hd_cell *)c.as.o)->v : NULL;
}

/* Where a name lives; NULL (with an error located at n) if it cannot be
 * read. */
static hd_value *name_slot(hd_vm *vm, hd_frame *f, const hd_ast *n, const hd_ref *r) {
    hd_value *p = NULL;
    switch (r->kind) {
    case HD_REF_LOCAL: return &f->slots[r->index];
    case HD_REF_GLOBAL: p = &f->globals[r->index]; break;
    case HD_REF_CELL: p = cell_of(f, r->index); break;
    case HD_REF_UPVALUE: p = &f->closure->cells[r->index]->v; break;
    case HD_REF_BUILTIN: return &vm->builtins[r->index];
    default: break;
    }
    if (!p) {
        hd_eval_failf(vm, f, n, HD_ERR_RUNTIME, "internal error: unresolved name '%s'",
                      n->name ? n->name : "?");
        return NULL;
    }
    return p;
}

/* A read of a global or captured variable while compiled code is traced:
 * the cache key depends on it. */
static HD_NOINLINE void note_read(hd_vm *vm, hd_frame *f, const hd_ref *r, const hd_value *p,
                                  hd_value v) {
    if (r->kind == HD_REF_GLOBAL)
        hd_compiled_note_global(vm, f->mod, r->index, v);
    else if (r->kind == HD_REF_CELL || r->kind == HD_REF_UPVALUE)
        hd_compiled_note_cell(vm, (const hd_cell *)((const char *)p - offsetof(hd_cell, v)), v);
}

/* Store v (taken) into the variable r. */
static int store(hd_vm *vm, hd_frame *f, const hd_ast *n, const hd_ref *r, hd_value v) {
    hd_value *p;
    switch (r->kind) {
    case HD_REF_LOCAL: p = &f->slots[r->index]; break;
    case HD_REF_GLOBAL: p = &f->globals[r->index]; break;
    case HD_REF_CELL: p = cell_of(f, r->index); break;
    case HD_REF_UPVALUE: p = &f->closure->cells[r->index]->v; break;
    default: p = NULL; break;
    }
    if (!p) {
        hd_vunref(vm, v);
        hd_eval_failf(vm, f, n, HD_ERR_RUNTIME, "internal error: cannot store to '%s'",
                      n->name ? n->name : "?");
        return 0;
    }
    if (HD_UNLIKELY(vm->roll_watch != NULL || vm->trace_reads)) {
        const hd_obj *cell = NULL;
        if (r->kind == HD_REF_CELL || r->kind == HD_REF_UPVALUE)
            cell = (const hd_obj *)((const char *)p - offsetof(hd_cell, v));
        if (vm->roll_watch) hd_roll_note_store(vm, f, r, cell, *p, v);
        if (vm->trace_reads) hd_compiled_note_slot(vm, p, cell);
    }
    hd_value old = *p;
    *p = v;
    hd_vunref(vm, old);
    return 1;
}

static void frame_bases(hd_frame *f) {
    for (int i = 0; i <= HD_REF_BUILTIN; i++) f->base[i] = NULL;
    f->base[HD_REF_LOCAL] = f->slots;
    f->base[HD_REF_GLOBAL] = f->globals;
}

/* ---- closures, classes, blocks ---- */

static HD_NOINLINE hd_value make_closure(hd_vm *vm, hd_frame *f, const hd_ast *n,
                                         const hd_ast_fn *fn) {
    hd_value v = hd_closure_new(vm, fn, f->chunk, f->mod);
    if (v.type != HD_V_FUNC) return fail(vm, f, n);
    hd_closure *c = (hd_closure *)v.as.o;
    for (int i = 0; i < fn->ncaptures; i++) {
        const hd_ast_capture *cap = &fn->captures[i];
        hd_cell *cell = NULL;
        if (cap->from_parent_cell) {
            hd_value s = f->slots[cap->index];
            if (s.type == HD_V_CELL) cell = (hd_cell *)s.as.o;
        } else if (f->closure) {
            cell = f->closure->cells[cap->index];
        }
        if (!cell) {
            hd_vunref(vm, v);
            return hd_eval_failf(vm, f, n, HD_ERR_RUNTIME, "internal error: bad capture");
        }
        cell->obj.refcount++;
        c->cells[i] = cell;
    }
    return v;
}

/* A class value; class C(Base) starts with Base's methods. */
static hd_value make_class(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    hd_value base = n->a ? ev(vm, f, n->a) : hd_none();
    if (base.type == HD_V_ERR) return base;
    hd_value cls = hd_class_new(vm, n->name);
    hd_class *c = cls.type == HD_V_CLASS ? (hd_class *)cls.as.o : NULL;
    hd_status st = c && n->a ? hd_class_inherit(vm, c, base) : HD_OK;
    hd_vunref(vm, base);
    if (!c || st) {
        hd_vunref(vm, cls);
        return fail(vm, f, n->a && c ? n->a : n);
    }
    for (int i = 0; i < n->n; i++) {
        const hd_ast *m = n->items[i];
        if (!m || !m->fn || !m->name) continue;
        hd_value fn = make_closure(vm, f, m, m->fn);
        if (fn.type == HD_V_ERR || hd_dict_set(vm, c->methods, m->name, fn) != HD_OK) {
            hd_vunref(vm, cls);
            return fail(vm, f, m);
        }
    }
    return cls;
}

/* Fresh cells for the block's captured variables, then its functions and
 * classes (hoisting). */
static int block_enter(hd_vm *vm, hd_frame *f, const hd_ast *b) {
    for (int i = 0; i < b->ncells; i++) {
        hd_cell *c = hd_cell_new(vm, hd_uninit());
        if (!c) return flow_fail(vm, f, b);
        hd_value old = f->slots[b->cells[i]];
        f->slots[b->cells[i]] = hd_obj_value(&c->obj);
        hd_vunref(vm, old);
    }
    for (int i = 0, done = 0; i < b->n && done < b->nhoist; i++) {
        const hd_ast *s = b->items[i];
        if (!s || (s->kind != HD_AST_FNDEF && (s->kind != HD_AST_CLASS || s->a)) || !s->name)
            continue;
        done++;
        hd_value v = s->kind == HD_AST_FNDEF ? make_closure(vm, f, s, s->fn) : make_class(vm, f, s);
        if (v.type == HD_V_ERR || !store(vm, f, s, &s->ref, v)) return HD_FLOW_ERROR;
    }
    return HD_FLOW_NORMAL;
}

#define HD_ALWAYS_INLINE inline __attribute__((always_inline))

/* The slot of a local or global variable, or NULL for other names. */
static HD_ALWAYS_INLINE hd_value *plain_slot(const hd_frame *f, const hd_ast *n) {
    hd_value *b = f->base[n->ref.kind];
    return b ? b + n->ref.index : NULL;
}

/* x OP y on ints when it cannot fail; 0 otherwise (overflow, division,
 * other operators: the general path reports or handles them). */
static HD_ALWAYS_INLINE int int_op_fast(int op, int64_t x, int64_t y, hd_value *out) {
    int64_t r;
    /* Tests in order of frequency beat a jump table here. */
    if (op == HD_TOK_PLUS) {
        if (__builtin_add_overflow(x, y, &r)) return 0;
        *out = hd_int(r);
        return 1;
    }
    if (op == HD_TOK_LT) {
        *out = hd_bool(x < y);
        return 1;
    }
    if (op == HD_TOK_MINUS) {
        if (__builtin_sub_overflow(x, y, &r)) return 0;
        *out = hd_int(r);
        return 1;
    }
    if (op == HD_TOK_STAR) {
        if (__builtin_mul_overflow(x, y, &r)) return 0;
        *out = hd_int(r);
        return 1;
    }
    switch (op) {
    case HD_TOK_LE: *out = hd_bool(x <= y); return 1;
    case HD_TOK_GT: *out = hd_bool(x > y); return 1;
    case HD_TOK_GE: *out = hd_bool(x >= y); return 1;
    case HD_TOK_EQ: *out = hd_bool(x == y); return 1;
    case HD_TOK_NE: *out = hd_bool(x != y); return 1;
    default: return 0;
    }
}

/* ---- decoded shapes ----
 * The first run of a binary operation or an assignment whose operands are
 * plain variables and int literals decodes it into a small record kept on
 * the node (its cache), so that later runs read one compact record instead
 * of walking four nodes. Nodes of other shapes get hd_nofast. */
typedef struct hd_fast_operand {
    int kind; /* 0: the int literal imm; HD_REF_LOCAL or HD_REF_GLOBAL: slot index */
    int index;
    int64_t imm;
} hd_fast_operand;

typedef struct hd_fast {
    int op;                  /* an operator int_op_fast knows; 0: a plain copy of a */
    int dst_kind, dst_index; /* assignments: the variable written */
    hd_fast_operand a, b;
} hd_fast;

static const hd_fast hd_nofast;

static int fast_fast_op(int op) {
    return op == HD_TOK_PLUS || op == HD_TOK_MINUS || op == HD_TOK_STAR ||
           (op >= HD_TOK_EQ && op <= HD_TOK_GE);
}

static int decode_operand(const hd_ast *n, hd_fast_operand *o) {
    o->index = 0;
    o->imm = 0;
    if (n->kind == HD_AST_INT) {
        o->kind = 0;
        o->imm = n->ival;
        return 1;
    }
    if (n->kind != HD_AST_NAME || (n->ref.kind != HD_REF_LOCAL && n->ref.kind != HD_REF_GLOBAL))
        return 0;
    o->kind = n->ref.kind;
    o->index = n->ref.index;
    return 1;
}

static HD_NOINLINE const hd_fast *decode(hd_vm *vm, const hd_frame *f, const hd_ast *n) {
    hd_fast d;
    memset(&d, 0, sizeof d);
    int ok = 0;
    if (n->kind == HD_AST_BINARY) {
        d.op = n->op;
        ok = fast_fast_op(n->op) && decode_operand(n->a, &d.a) && decode_operand(n->b, &d.b);
    } else if (n->kind == HD_AST_ASSIGN && decode_operand(n->a, &d.a) && d.a.kind) {
        d.dst_kind = d.a.kind;
        d.dst_index = d.a.index;
        const hd_ast *r = n->b;
        if (n->op == HD_TOK_ASSIGN && r->kind == HD_AST_BINARY) {
            d.op = r->op;
            ok = fast_fast_op(r->op) && decode_operand(r->a, &d.a) && decode_operand(r->b, &d.b);
        } else if (n->op == HD_TOK_ASSIGN) {
            ok = decode_operand(r, &d.a);
        } else {
            d.op = n->op - HD_TOK_PLUS_ASSIGN + HD_TOK_PLUS;
            ok = n->op != HD_TOK_SLASH_ASSIGN && decode_operand(r, &d.b);
        }
    }
    const hd_fast *out = &hd_nofast;
    if (ok) {
        hd_fast *p = hd_ast_arena_alloc(f->chunk->parse.arena, sizeof *p);
        if (p) {
            *p = d;
            out = p;
        } else {
            hd_error_clear(&vm->ctx); /* only a lost shortcut */
        }
    }
    ((hd_ast *)n)->cache = (void *)out;
    return out;
}

/* A traced loop's watch sees the fast path's store into slot index of the
 * kind's base (eval_loop.c). */
static HD_NOINLINE void roll_note_slot(hd_vm *vm, const hd_frame *f, int kind, int index,
                                       hd_value v) {
    hd_ref r;
    memset(&r, 0, sizeof r);
    r.kind = (hd_ref_kind)kind;
    r.index = index;
    hd_roll_note_store(vm, f, &r, NULL, f->base[kind][index], v);
}

static HD_ALWAYS_INLINE const hd_fast *fast_of(hd_vm *vm, const hd_frame *f, const hd_ast *n) {
    /* while compiled code is traced, reads go the general way (noted) */
    if (HD_UNLIKELY(vm->trace_reads)) return &hd_nofast;
    const hd_fast *d = n->cache;
    return HD_LIKELY(d != NULL) ? d : decode(vm, f, n);
}

static HD_ALWAYS_INLINE int fast_int(const hd_frame *f, const hd_fast_operand *o, int64_t *x) {
    if (!o->kind) {
        *x = o->imm;
        return 1;
    }
    const hd_value *p = f->base[o->kind] + o->index;
    *x = p->as.i;
    return p->type == HD_V_INT;
}

/* The result of a decoded record: a OP b on ints, or a copy of a bool, int
 * or float (no counts to keep). 0: take the general path. */
static HD_ALWAYS_INLINE int fast_eval(const hd_frame *f, const hd_fast *d, hd_value *out) {
    if (d->op) {
        int64_t x, y;
        return fast_int(f, &d->a, &x) && fast_int(f, &d->b, &y) && int_op_fast(d->op, x, y, out);
    }
    if (!d->a.kind) {
        *out = hd_int(d->a.imm);
        return 1;
    }
    const hd_value *p = f->base[d->a.kind] + d->a.index;
    if ((unsigned)p->type - (unsigned)HD_V_BOOL > (unsigned)(HD_V_FLOAT - HD_V_BOOL)) return 0;
    *out = *p;
    return 1;
}

/* A value computed without calls, allocation or refcounts: int literals,
 * local and global variables holding bools, ints or floats, and int
 * arithmetic and comparisons on those. 0: use ev (which also reports every
 * error). */
static HD_ALWAYS_INLINE int fast_value(hd_vm *vm, const hd_frame *f, const hd_ast *n,
                                       hd_value *out) {
    if (n->kind == HD_AST_BINARY) {
        const hd_fast *d = fast_of(vm, f, n);
        return d != &hd_nofast && fast_eval(f, d, out);
    }
    if (n->kind == HD_AST_INT) {
        *out = hd_int(n->ival);
        return 1;
    }
    if (n->kind != HD_AST_NAME || vm->trace_reads) return 0;
    const hd_value *p = plain_slot(f, n);
    if (!p || (unsigned)p->type - (unsigned)HD_V_BOOL > (unsigned)(HD_V_FLOAT - HD_V_BOOL))
        return 0;
    *out = *p;
    return 1;
}

/* One statement, with assignments of decoded shapes (`x = a OP b`,
 * `x OP= b`, `x = a` on plain variables and int literals) done in line:
 * the inner statements of hot loops. */
static HD_ALWAYS_INLINE int run_stmt(hd_vm *vm, hd_frame *f, const hd_ast *s) {
    if (s->kind == HD_AST_ASSIGN) {
        const hd_fast *d = fast_of(vm, f, s);
        hd_value v;
        if (d != &hd_nofast && fast_eval(f, d, &v)) {
            hd_value *dst = f->base[d->dst_kind] + d->dst_index;
            if (HD_UNLIKELY(vm->roll_watch)) roll_note_slot(vm, f, d->dst_kind, d->dst_index, v);
            hd_value old = *dst;
            *dst = v;
            hd_vunref(vm, old);
            return HD_FLOW_NORMAL;
        }
        /* x = f(...) on a plain variable: straight to the call. */
        hd_value *dst;
        if (s->op == HD_TOK_ASSIGN && s->b->kind == HD_AST_CALL && s->a->kind == HD_AST_NAME &&
            (dst = plain_slot(f, s->a))) {
            v = ev_call(vm, f, s->b);
            if (v.type == HD_V_ERR) return HD_FLOW_ERROR;
            dst = plain_slot(f, s->a);
            if (HD_UNLIKELY(vm->roll_watch)) hd_roll_note_store(vm, f, &s->a->ref, NULL, *dst, v);
            hd_value old = *dst;
            *dst = v;
            hd_vunref(vm, old);
            return HD_FLOW_NORMAL;
        }
    }
    return ex(vm, f, s);
}

/* The variables block b declared go at its end, whatever the flow: a
 * tensor made in a loop body or a branch is freed then, not when the
 * function returns (docs/language.md, "Names and scope"). */
static HD_NOINLINE void block_release(hd_vm *vm, hd_frame *f, const hd_ast *b) {
    int end = b->slot0 + b->nslots;
    for (int s = b->slot0; s < end && s < f->nslots; s++) {
        hd_value old = f->slots[s];
        f->slots[s] = hd_none();
        hd_vunref(vm, old);
    }
}

static HD_ALWAYS_INLINE int run_block(hd_vm *vm, hd_frame *f, const hd_ast *b) {
    if ((b->ncells || b->nhoist) && block_enter(vm, f, b)) return HD_FLOW_ERROR;
    for (int i = 0; i < b->n; i++) {
        int fl = run_stmt(vm, f, b->items[i]);
        if (fl) return fl;
    }
    return HD_FLOW_NORMAL;
}

/* A block run once (a branch, a plain block): its variables go at its
 * end. A loop's body releases them once, when the loop ends (ex_for,
 * ex_while): each iteration's `let` replaces the last one's value. */
static int ex_block(hd_vm *vm, hd_frame *f, const hd_ast *b) {
    int fl = run_block(vm, f, b);
    if (b->nslots) block_release(vm, f, b);
    return fl;
}

/* ---- calls ---- */

/* Defaults run in the callee's frame, at each call, left to right; then
 * captured parameters are boxed. */
/* bound NULL: every parameter was given. */
static int finish_params(hd_vm *vm, hd_frame *fr, const hd_ast_fn *fn, const unsigned char *bound) {
    for (int i = 0; i < fn->nparams; i++) {
        if (bound && !bound[i]) {
            hd_value v = ev(vm, fr, fn->params[i].def);
            if (v.type == HD_V_ERR) return 0;
            fr->slots[i] = v;
        }
        if (fn->param_is_cell && fn->param_is_cell[i]) {
            hd_cell *c = hd_cell_new(vm, fr->slots[i]);
            fr->slots[i] = hd_none();
            if (!c) {
                fail(vm, fr, fn->body);
                return 0;
            }
            fr->slots[i] = hd_obj_value(&c->obj);
        }
    }
    return 1;
}

/* A function body: a block whose last expression statement may be the
 * result (fn (x) { x * 2 }). */
static int ex_body(hd_vm *vm, hd_frame *f, const hd_ast *b, int expr_body) {
    if ((b->ncells || b->nhoist) && block_enter(vm, f, b)) return HD_FLOW_ERROR;
    int last = b->n - 1;
    for (int i = 0; i < b->n; i++) {
        const hd_ast *s = b->items[i];
        if (s->kind == HD_AST_RETURN || (i == last && expr_body && s->kind == HD_AST_EXPR)) {
            hd_value v = hd_none();
            if (s->a && !fast_value(vm, f, s->a, &v)) {
                v = ev(vm, f, s->a);
                if (v.type == HD_V_ERR) return HD_FLOW_ERROR;
            }
            f->ret = v;
            return HD_FLOW_RETURN;
        }
        int fl = ex(vm, f, s);
        if (fl) return fl;
    }
    return HD_FLOW_NORMAL;
}

static HD_NOINLINE void maybe_collect(hd_vm *vm) {
    if (hd_vm_collect(vm, NULL)) hd_vm_clear_error(vm); /* collected at the next threshold */
    size_t next = vm->nobjects * 2;
    vm->gc_threshold = next > 100000 ? next : 100000;
}

static hd_status closure_run(hd_vm *vm, hd_closure *c, hd_value self, int has_self,
                             const hd_value *args, int nargs, const hd_kwarg *kw, int nkw,
                             hd_value *out) {
    const hd_ast_fn *fn = c->fn;
    if (HD_UNLIKELY(vm->depth >= vm->max_depth))
        return hd_vm_error(vm, HD_ERR_LIMIT, "maximum call depth (%d) exceeded", vm->max_depth);
    if (tick(vm)) return vm->err;
    if (HD_UNLIKELY(vm->nobjects >= vm->gc_threshold)) maybe_collect(vm);
    int np = fn->nparams;
    int nslots = fn->nslots > np ? fn->nslots : np;
    hd_value stack_slots[HD_STACK_SLOTS];
    unsigned char stack_bound[HD_STACK_SLOTS];
    hd_value *slots = stack_slots;
    unsigned char *bound = stack_bound;
    if (nslots > HD_STACK_SLOTS) {
        slots = hd_ctx_alloc(&vm->ctx, (size_t)nslots * (sizeof(hd_value) + 1));
        if (!slots) return hd_vm_oom(vm);
        bound = (unsigned char *)(slots + nslots);
    }
    hd_status st = HD_OK;
    const hd_class *ctor = NULL;
    if (HD_UNLIKELY(vm->ctor != NULL)) ctor = vm->ctor, vm->ctor = NULL;
    /* Every parameter given by position (the usual call): no binding table,
     * no defaults. */
    int simple = !nkw && has_self + nargs == np && !fn->rest;
    if (simple) {
        if (has_self) hd_vref(slots[0] = self);
        for (int i = 0; i < nargs; i++) hd_vref(slots[has_self + i] = args[i]);
        bound = NULL;
    } else {
        for (int i = 0; i < np; i++) slots[i] = hd_none();
        memset(bound, 0, (size_t)(np ? np : 1));
        st = hd_eval_bind_args(vm, fn, ctor, slots, bound, self, has_self, args, nargs, kw, nkw);
    }
    for (int i = np; i < nslots; i++) slots[i] = hd_none();
    hd_frame fr;
    fr.parent = vm->frame;
    fr.slots = slots;
    fr.globals = c->mod->globals;
    fr.closure = c;
    fr.mod = c->mod;
    fr.chunk = c->chunk;
    fr.at = NULL;
    fr.ret = hd_none();
    fr.nslots = nslots;
    frame_bases(&fr);
    if (st == HD_OK) {
        vm->frame = &fr;
        vm->depth++;
        int fl = HD_FLOW_ERROR;
        if ((!bound && !fn->param_is_cell) || finish_params(vm, &fr, fn, bound))
            fl = ex_body(vm, &fr, fn->body, fn->expr_body);
        vm->depth--;
        vm->frame = fr.parent;
        if (fl == HD_FLOW_ERROR) {
            st = vm->err ? vm->err : HD_ERR_RUNTIME;
            hd_vunref(vm, fr.ret);
        } else {
            *out = fl == HD_FLOW_RETURN ? fr.ret : hd_none();
        }
    }
    for (int i = 0; i < nslots; i++) hd_vunref(vm, slots[i]);
    if (slots != stack_slots) hd_ctx_free(&vm->ctx, slots, (size_t)nslots * (sizeof(hd_value) + 1));
    return st;
}

/* A call of a closure: compiled functions called from eager code go
 * through their cache (compiled.c); inside compiled code they run inline. */
static HD_ALWAYS_INLINE hd_status call_closure(hd_vm *vm, hd_closure *c, hd_value self,
                                               int has_self, const hd_value *args, int nargs,
                                               const hd_kwarg *kw, int nkw, hd_value *out) {
    if (HD_UNLIKELY(c->fn->compiled | vm->compile_all))
        return hd_compiled_call(vm, c, self, has_self, args, nargs, kw, nkw, out);
    return closure_run(vm, c, self, has_self, args, nargs, kw, nkw, out);
}

hd_status hd_eval_closure(hd_vm *vm, hd_closure *c, hd_value self, int has_self,
                          const hd_value *args, int nargs, const hd_kwarg *kw, int nkw,
                          hd_value *out) {
    return closure_run(vm, c, self, has_self, args, nargs, kw, nkw, out);
}

static hd_status construct(hd_vm *vm, hd_class *cls, const hd_value *args, int nargs,
                           const hd_kwarg *kw, int nkw, hd_value *out) {
    hd_value obj = hd_object_new(vm, cls);
    if (obj.type != HD_V_OBJECT) return vm->err;
    hd_value *init = hd_dict_get(cls->methods, "init");
    if (!init) {
        if (nargs || nkw) {
            hd_vunref(vm, obj);
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() takes no arguments (it has no init)",
                               hd_as_str(cls->name)->chars);
        }
        *out = obj;
        return HD_OK;
    }
    hd_value r;
    if (init->type == HD_V_FUNC) vm->ctor = cls;
    hd_status st = call_value(vm, *init, obj, 1, args, nargs, kw, nkw, &r);
    vm->ctor = NULL;
    if (st != HD_OK) {
        hd_vunref(vm, obj);
        return st;
    }
    hd_vunref(vm, r);
    *out = obj;
    return HD_OK;
}

static hd_status call_value(hd_vm *vm, hd_value callee, hd_value self, int has_self,
                            const hd_value *args, int nargs, const hd_kwarg *kw, int nkw,
                            hd_value *out) {
    switch (callee.type) {
    case HD_V_FUNC:
        return call_closure(vm, (hd_closure *)callee.as.o, self, has_self, args, nargs, kw, nkw,
                            out);
    case HD_V_NATIVE: {
        hd_native *n = (hd_native *)callee.as.o;
        *out = hd_none();
        if (HD_UNLIKELY(vm->trace_reads)) {
            if (has_self) hd_compiled_note_items(vm, self, 0);
            for (int i = 0; i < nargs; i++) hd_compiled_note_items(vm, args[i], 0);
            for (int i = 0; i < nkw; i++) hd_compiled_note_items(vm, kw[i].value, 0);
        }
        hd_status st = n->fn(vm, has_self ? self : n->self, args, nargs, kw, nkw, out, n->data);
        if (st != HD_OK && !hd_vm_failed(vm)) hd_vm_from_ctx(vm, st);
        return st;
    }
    case HD_V_BOUND: {
        hd_bound *b = (hd_bound *)callee.as.o;
        return call_value(vm, b->fn, b->self, 1, args, nargs, kw, nkw, out);
    }
    case HD_V_CLASS: return construct(vm, (hd_class *)callee.as.o, args, nargs, kw, nkw, out);
    case HD_V_OBJECT: {
        hd_object *o = (hd_object *)callee.as.o;
        hd_value *fwd = hd_dict_get(o->cls->methods, "forward");
        if (!fwd)
            return hd_vm_error(vm, HD_ERR_RUNTIME,
                               "%s object is not callable (its class has no forward method)",
                               hd_value_type_name(callee));
        return call_value(vm, *fwd, callee, 1, args, nargs, kw, nkw, out);
    }
    default:
        return hd_vm_error(vm, HD_ERR_RUNTIME, "cannot call a value of type %s",
                           hd_value_type_name(callee));
    }
}

hd_status hd_eval_call(hd_vm *vm, hd_value callee, hd_value self, int has_self,
                       const hd_value *args, int nargs, const hd_kwarg *kw, int nkw,
                       hd_value *out) {
    return call_value(vm, callee, self, has_self, args, nargs, kw, nkw, out);
}

hd_status hd_vm_call(hd_vm *vm, hd_value callee, const hd_value *args, int nargs,
                     const hd_kwarg *kw, int nkw, hd_value *result) {
    return call_value(vm, callee, hd_none(), 0, args, nargs, kw, nkw, result);
}

/* ---- expressions ---- */

static HD_NOINLINE hd_value ev_str(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    hd_ast *node = (hd_ast *)n; /* the literal's string is made once and kept on the node */
    if (!node->cache) {
        hd_value s = hd_str_new(vm, n->str ? n->str : "", n->slen);
        if (s.type != HD_V_STR) return fail(vm, f, n);
        node->cache = s.as.o;
    }
    hd_obj *o = node->cache;
    o->refcount++;
    return hd_obj_value(o);
}

static HD_NOINLINE hd_value ev_list(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    hd_value l = hd_list_new(vm, n->n);
    if (l.type != HD_V_LIST) return fail(vm, f, n);
    for (int i = 0; i < n->n; i++) {
        hd_value v = ev(vm, f, n->items[i]);
        if (v.type == HD_V_ERR) {
            hd_vunref(vm, l);
            return v;
        }
        hd_list *lp = hd_as_list(l);
        lp->items[lp->len++] = v;
    }
    return l;
}

/* key: value into dict d, both evaluated; 0 after an error (located). */
static int dict_put(hd_vm *vm, hd_frame *f, hd_value d, const hd_ast *key, const hd_ast *value,
                    const hd_ast *at) {
    hd_value k = ev(vm, f, key);
    if (k.type == HD_V_ERR) return 0;
    if (k.type != HD_V_STR) {
        hd_eval_failf(vm, f, key, HD_ERR_RUNTIME, "dict keys are strings, not %s",
                      hd_value_type_name(k));
        hd_vunref(vm, k);
        return 0;
    }
    hd_value v = ev(vm, f, value);
    hd_status st = v.type == HD_V_ERR ? HD_ERR_RUNTIME : hd_dict_set_str(vm, d, hd_as_str(k), v);
    hd_vunref(vm, k);
    if (v.type != HD_V_ERR && st != HD_OK) fail(vm, f, at);
    return st == HD_OK;
}

static HD_NOINLINE hd_value ev_dict(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    hd_value d = hd_dict_new(vm);
    if (d.type != HD_V_DICT) return fail(vm, f, n);
    for (int i = 0; i < n->n; i++) {
        const hd_ast *pair = n->items[i];
        if (!dict_put(vm, f, d, pair->a, pair->b, pair)) {
            hd_vunref(vm, d);
            return hd_err_value();
        }
    }
    return d;
}

/* [e for x in it if c], {k: v for x in it if c}: the for statement (n->a)
 * pushes each e onto the list, or sets each k to v in the dict
 * (vm->comp_list, the innermost comprehension's). */
static HD_NOINLINE hd_value ev_comp(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    int dict = n->op == HD_COMP_DICT;
    hd_value list = dict ? hd_dict_new(vm) : hd_list_new(vm, 0), outer = vm->comp_list;
    if (list.type != (dict ? HD_V_DICT : HD_V_LIST)) return fail(vm, f, n);
    vm->comp_list = list;
    int fl = ex(vm, f, n->a);
    vm->comp_list = outer;
    if (fl == HD_FLOW_ERROR) {
        hd_vunref(vm, list);
        return hd_err_value();
    }
    return list;
}

/* k: v into the dict comprehension's dict. */
static HD_NOINLINE int comp_set(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    return dict_put(vm, f, vm->comp_list, n->a, n->b, n) ? HD_FLOW_NORMAL : HD_FLOW_ERROR;
}

static HD_NOINLINE int ex_comp_push(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    if (n->b) return comp_set(vm, f, n);
    hd_value v = ev(vm, f, n->a);
    if (v.type == HD_V_ERR) return HD_FLOW_ERROR;
    return hd_list_push(vm, vm->comp_list, v) == HD_OK ? HD_FLOW_NORMAL : flow_fail(vm, f, n);
}

static HD_NOINLINE hd_value ev_index(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    hd_value x = ev(vm, f, n->a);
    if (x.type == HD_V_ERR) return x;
    hd_value out = hd_err_value();
    /* The common x[i] on a list with an int: no parts array. */
    if (n->n == 1 && x.type == HD_V_LIST && n->items[0]->kind != HD_AST_SLICE &&
        n->items[0]->kind != HD_AST_ELLIPSIS) {
        hd_value k = ev(vm, f, n->items[0]), ki;
        if (HD_UNLIKELY(vm->roll_var != NULL) && hd_roll_index_int(vm, k, &ki)) {
            hd_vunref(vm, k);
            k = ki;
        }
        if (k.type != HD_V_ERR) {
            if (hd_eval_get_item(vm, x, k, &out) != HD_OK) out = fail(vm, f, n);
            hd_vunref(vm, k);
        }
        hd_vunref(vm, x);
        return out;
    }
    hd_index_part stack_parts[4];
    hd_index_part *parts = stack_parts;
    if (n->n > 4) {
        parts = hd_ctx_alloc(&vm->ctx, (size_t)n->n * sizeof *parts);
        if (!parts) {
            hd_vm_oom(vm);
            hd_vunref(vm, x);
            return fail(vm, f, n);
        }
    }
    memset(parts, 0, (size_t)(n->n ? n->n : 1) * sizeof *parts);
    for (int i = 0; i < n->n; i++) parts[i].v = hd_none();
    if (hd_eval_parts(vm, f, n, parts)) {
        f->at = n; /* an object's getitem method runs from here */
        if (hd_eval_index_op(vm, x, parts, n->n, NULL, &out) != HD_OK) out = fail(vm, f, n);
    }
    hd_eval_free_parts(vm, parts, n->n);
    if (parts != stack_parts) hd_ctx_free(&vm->ctx, parts, (size_t)n->n * sizeof *parts);
    hd_vunref(vm, x);
    return out;
}

static HD_NOINLINE hd_value ev_member(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    hd_value x = ev(vm, f, n->a);
    if (x.type == HD_V_ERR) return x;
    hd_value out;
    hd_status st = hd_eval_get_member(vm, x, n->name, &out);
    hd_vunref(vm, x);
    return st == HD_OK ? out : fail(vm, f, n);
}

/* Evaluate call arguments into args/kw (new references). */
static int eval_args(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value *args, int *nargs,
                     hd_kwarg *kw, int *nkw) {
    *nargs = *nkw = 0;
    for (int i = 0; i < n->n; i++) {
        const hd_ast *arg = n->items[i];
        const hd_ast *e = arg->kind == HD_AST_ARG ? arg->a : arg;
        hd_value v;
        if (!fast_value(vm, f, e, &v)) {
            v = ev(vm, f, e);
            if (v.type == HD_V_ERR) return 0;
        }
        if (arg->kind == HD_AST_ARG && arg->name) {
            if (!hd_eval_add_kwarg(vm, f, arg, v, kw, nkw)) return 0;
        } else {
            args[(*nargs)++] = v;
        }
    }
    return 1;
}

static HD_NOINLINE hd_value ev_call(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    hd_value callee, recv = hd_none();
    int pass_self = 0;
    const hd_ast *c = n->a;
    if (c->kind == HD_AST_MEMBER) {
        recv = ev(vm, f, c->a);
        if (recv.type == HD_V_ERR) return recv;
        if (hd_eval_find_method(vm, recv, c->name, &callee, &pass_self) != HD_OK) {
            hd_vunref(vm, recv);
            return fail(vm, f, c);
        }
    } else {
        hd_value *p = c->kind == HD_AST_NAME && !vm->trace_reads ? plain_slot(f, c) : NULL;
        if (p && !hd_is_uninit(*p)) {
            hd_vref(callee = *p);
        } else {
            callee = ev(vm, f, c);
            if (callee.type == HD_V_ERR) return callee;
        }
    }
    int cap = n->n ? n->n : 1, spread = n->op == HD_TOK_STAR;
    hd_value args_buf[8], pos = hd_none();
    hd_kwarg kw_buf[4];
    hd_value *args = cap <= 8 ? args_buf : NULL;
    hd_kwarg *kw = cap <= 4 ? kw_buf : NULL;
    hd_value out = hd_err_value();
    int nargs = 0, nkw = 0;
    if (!args) args = hd_ctx_alloc(&vm->ctx, (size_t)cap * sizeof *args);
    if (!kw) kw = hd_ctx_alloc(&vm->ctx, (size_t)cap * sizeof *kw);
    if (!args || !kw) {
        hd_vm_oom(vm);
        fail(vm, f, n);
    } else if (spread ? hd_eval_args_spread(vm, f, n, &pos, kw, &nkw)
                      : eval_args(vm, f, n, args, &nargs, kw, &nkw)) {
        const hd_value *a = spread ? hd_as_list(pos)->items : args;
        int na = spread ? (int)hd_as_list(pos)->len : nargs;
        f->at = n;
        hd_status st =
            callee.type == HD_V_FUNC
                ? call_closure(vm, (hd_closure *)callee.as.o, recv, pass_self, a, na, kw, nkw, &out)
                : call_value(vm, callee, recv, pass_self, a, na, kw, nkw, &out);
        if (st != HD_OK) out = fail(vm, f, n);
    }
    hd_vunref(vm, pos);
    for (int i = 0; i < nargs; i++) hd_vunref(vm, args[i]);
    for (int i = 0; i < nkw; i++) hd_vunref(vm, kw[i].value);
    if (args && args != args_buf) hd_ctx_free(&vm->ctx, args, (size_t)cap * sizeof *args);
    if (kw && kw != kw_buf) hd_ctx_free(&vm->ctx, kw, (size_t)cap * sizeof *kw);
    hd_vunref(vm, callee);
    hd_vunref(vm, recv);
    return out;
}

static HD_NOINLINE hd_value ev_and_or(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    hd_value a = ev(vm, f, n->a);
    if (a.type == HD_V_ERR) return a;
    int ok = 1, t = a.type == HD_V_BOOL ? a.as.b : hd_eval_truthy(vm, a, &ok);
    if (a.type != HD_V_BOOL && !ok) {
        hd_vunref(vm, a);
        return fail(vm, f, n->a);
    }
    if ((n->kind == HD_AST_AND) != (t != 0)) return a;
    hd_vunref(vm, a);
    return ev(vm, f, n->b);
}

static HD_NOINLINE hd_value ev_binary_slow(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value a,
                                           hd_value b) {
    hd_value r = hd_eval_binop(vm, n->op, a, b);
    hd_vunref(vm, a);
    hd_vunref(vm, b);
    return r.type == HD_V_ERR ? fail(vm, f, n) : r;
}

static hd_value ev(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    switch (n->kind) {
    case HD_AST_INT: return hd_int(n->ival);
    case HD_AST_NAME: {
        hd_value v;
        switch (n->ref.kind) {
        case HD_REF_LOCAL: v = f->slots[n->ref.index]; break;
        case HD_REF_GLOBAL:
            v = f->globals[n->ref.index];
            if (HD_UNLIKELY(hd_is_uninit(v))) return undefined(vm, f, n);
            if (HD_UNLIKELY(vm->trace_reads)) note_read(vm, f, &n->ref, NULL, v);
            break;
        default: {
            hd_value *p = name_slot(vm, f, n, &n->ref);
            if (!p) return hd_err_value();
            v = *p;
            if (HD_UNLIKELY(hd_is_uninit(v))) return undefined(vm, f, n);
            if (HD_UNLIKELY(vm->trace_reads)) note_read(vm, f, &n->ref, p, v);
        }
        }
        hd_vref(v);
        return v;
    }
    case HD_AST_BINARY: {
        hd_value r;
        /* ints from literals and plain variables: no calls, no counts */
        const hd_fast *d = fast_of(vm, f, n);
        if (d != &hd_nofast && fast_eval(f, d, &r)) return r;
        hd_value a = ev(vm, f, n->a);
        if (HD_UNLIKELY(a.type == HD_V_ERR)) return a;
        hd_value b = ev(vm, f, n->b);
        if (HD_UNLIKELY(b.type == HD_V_ERR)) {
            hd_vunref(vm, a);
            return b;
        }
        if (HD_LIKELY(a.type == HD_V_INT && b.type == HD_V_INT)) {
            if (int_op_fast(n->op, a.as.i, b.as.i, &r)) return r;
        } else if (a.type == HD_V_FLOAT && b.type == HD_V_FLOAT) {
            switch (n->op) {
            case HD_TOK_PLUS: return hd_float(a.as.f + b.as.f);
            case HD_TOK_MINUS: return hd_float(a.as.f - b.as.f);
            case HD_TOK_STAR: return hd_float(a.as.f * b.as.f);
            default: break;
            }
        }
        return ev_binary_slow(vm, f, n, a, b);
    }
    case HD_AST_FLOAT: return hd_float(n->fval);
    case HD_AST_STR: return ev_str(vm, f, n);
    case HD_AST_NONE: return hd_none();
    case HD_AST_TRUE: return hd_bool(1);
    case HD_AST_FALSE: return hd_bool(0);
    case HD_AST_CALL: return ev_call(vm, f, n);
    case HD_AST_MEMBER: return ev_member(vm, f, n);
    case HD_AST_INDEX: return ev_index(vm, f, n);
    case HD_AST_UNARY: {
        hd_value x = ev(vm, f, n->a);
        if (x.type == HD_V_ERR) return x;
        hd_value r = hd_eval_unop(vm, n->op, x);
        hd_vunref(vm, x);
        return r.type == HD_V_ERR ? fail(vm, f, n) : r;
    }
    case HD_AST_AND:
    case HD_AST_OR: return ev_and_or(vm, f, n);
    case HD_AST_LIST: return ev_list(vm, f, n);
    case HD_AST_DICT: return ev_dict(vm, f, n);
    case HD_AST_FN: return make_closure(vm, f, n, n->fn);
    case HD_AST_SCRIPT: return hd_script_eval(vm, f, n);
    case HD_AST_COMP: return ev_comp(vm, f, n);
    default:
        return hd_eval_failf(vm, f, n, HD_ERR_RUNTIME, "internal error: cannot evaluate node %d",
                             (int)n->kind);
    }
}

/* ---- statements ---- */

static HD_NOINLINE int truth_slow(hd_vm *vm, hd_frame *f, const hd_ast *cond, int *t) {
    hd_value c = ev(vm, f, cond);
    if (c.type == HD_V_ERR) return 0;
    if (c.type == HD_V_BOOL) {
        *t = c.as.b;
        return 1;
    }
    int ok;
    *t = hd_eval_truthy(vm, c, &ok);
    hd_vunref(vm, c);
    if (!ok) fail(vm, f, cond);
    return ok;
}

static HD_ALWAYS_INLINE int truth_of(hd_vm *vm, hd_frame *f, const hd_ast *cond, int *t) {
    hd_value c;
    if (fast_value(vm, f, cond, &c) && c.type == HD_V_BOOL) {
        *t = c.as.b;
        return 1;
    }
    return truth_slow(vm, f, cond, t);
}

/* Bind a loop variable: a fresh cell per iteration when it is captured. */
static int bind_loop_var(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value v) {
    if (n->ref.kind == HD_REF_LOCAL) {
        hd_value old = f->slots[n->ref.index];
        f->slots[n->ref.index] = v;
        hd_vunref(vm, old);
        return 1;
    }
    if (n->ref.kind == HD_REF_CELL) {
        hd_cell *c = hd_cell_new(vm, v);
        if (!c) return flow_fail(vm, f, n), 0;
        hd_value old = f->slots[n->ref.index];
        f->slots[n->ref.index] = hd_obj_value(&c->obj);
        hd_vunref(vm, old);
        return 1;
    }
    return store(vm, f, n, &n->ref, v);
}

int hd_eval_bind(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value v) {
    return bind_loop_var(vm, f, n, v);
}

/* Run one iteration's body; returns a flow code for the loop to act on:
 * NORMAL (go on), BREAK (stop normally), or RETURN/ERROR (propagate). */
static HD_ALWAYS_INLINE int loop_body(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    if (HD_UNLIKELY(tick(vm))) return flow_fail(vm, f, n);
    int fl = run_block(vm, f, n->body);
    if (HD_LIKELY(fl == HD_FLOW_NORMAL || fl == HD_FLOW_CONTINUE)) return HD_FLOW_NORMAL;
    return fl;
}

static int loop_result(int fl) {
    return fl == HD_FLOW_BREAK ? HD_FLOW_NORMAL : fl;
}

int hd_eval_for_iteration(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value v) {
    if (!bind_loop_var(vm, f, n, v)) return HD_FLOW_ERROR;
    return loop_body(vm, f, n);
}

static int ex_for_range(hd_vm *vm, hd_frame *f, const hd_ast *n, int64_t a, int64_t b,
                        int64_t step) {
    hd_range r = {.start = a, .stop = b, .step = step};
    int64_t count = hd_range_len(&r);
    if (HD_UNLIKELY(vm->ctx.trace != NULL))
        return loop_result(hd_eval_for_traced(vm, f, n, a, step, count));
    if (n->ref.kind == HD_REF_LOCAL) {
        hd_value *slot = &f->slots[n->ref.index];
        for (int64_t k = 0; k < count; k++) {
            hd_value old = *slot;
            *slot = hd_int(hd_range_at(a, step, k));
            hd_vunref(vm, old);
            int fl = loop_body(vm, f, n);
            if (fl) return loop_result(fl);
        }
        return HD_FLOW_NORMAL;
    }
    for (int64_t k = 0; k < count; k++) {
        if (!bind_loop_var(vm, f, n, hd_int(hd_range_at(a, step, k)))) return HD_FLOW_ERROR;
        int fl = loop_body(vm, f, n);
        if (fl) return loop_result(fl);
    }
    return HD_FLOW_NORMAL;
}

/* a..b with a one-element tensor for a bound (the rest ints)? */
static int range_has_tensor(hd_value a, hd_value b) {
    int ta = a.type == HD_V_TENSOR, tb = b.type == HD_V_TENSOR;
    return (ta || tb) && (ta || a.type == HD_V_INT) && (tb || b.type == HD_V_INT);
}

int hd_eval_for_range(hd_vm *vm, hd_frame *f, const hd_ast *n, int64_t a, int64_t b, int64_t step) {
    return ex_for_range(vm, f, n, a, b, step);
}

static HD_NOINLINE int ex_for_run(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    const hd_ast *it = n->a;
    /* for i in a..b: no range object. */
    if (it->kind == HD_AST_BINARY && it->op == HD_TOK_RANGE) {
        hd_value a = ev(vm, f, it->a);
        if (a.type == HD_V_ERR) return HD_FLOW_ERROR;
        hd_value b = ev(vm, f, it->b);
        if (b.type == HD_V_ERR) {
            hd_vunref(vm, a);
            return HD_FLOW_ERROR;
        }
        if (a.type == HD_V_INT && b.type == HD_V_INT)
            return ex_for_range(vm, f, n, a.as.i, b.as.i, 1);
        if (range_has_tensor(a, b)) return hd_eval_for_tensor_range(vm, f, n, a, b);
        hd_value r = ev_binary_slow(vm, f, it, a, b);
        if (r.type == HD_V_ERR) return HD_FLOW_ERROR;
        hd_vunref(vm, r);
        return hd_eval_failf(vm, f, it, HD_ERR_RUNTIME, "cannot iterate over this range"),
               HD_FLOW_ERROR;
    }
    hd_value v = ev(vm, f, it);
    if (v.type == HD_V_ERR) return HD_FLOW_ERROR;
    int fl = hd_eval_for_value(vm, f, n, v);
    hd_vunref(vm, v);
    return fl;
}

/* An if's or while's condition while tracing: a tensor known only when
 * the graph runs makes the if a cond, the while a while loop
 * (eval_loop.c); 1 when that handled the whole statement (*fl its flow),
 * else the truth in *t. */
static HD_NOINLINE int cond_traced(hd_vm *vm, hd_frame *f, const hd_ast *n, int *t, int *fl) {
    hd_value c = ev(vm, f, n->a);
    if (c.type == HD_V_ERR) return *fl = HD_FLOW_ERROR, 1;
    if (c.type == HD_V_TENSOR && c.as.t->numel == 1 &&
        hd_trace_stands_for_input(&vm->ctx, c.as.t)) {
        const char *why = NULL;
        *fl = n->kind == HD_AST_WHILE ? hd_eval_while_traced(vm, f, n, c.as.t, &why)
                                      : hd_eval_if_traced(vm, f, n, c.as.t, &why);
        hd_vunref(vm, c);
        *fl = hd_eval_traced_refused(vm, f, n, *fl, why);
        return 1;
    }
    int ok = 1;
    *t = c.type == HD_V_BOOL ? c.as.b : hd_eval_truthy(vm, c, &ok);
    hd_vunref(vm, c);
    if (!ok) return fail(vm, f, n->a), *fl = HD_FLOW_ERROR, 1;
    return 0;
}

/* The truth of if or while n's condition in *t: 1; else 0, the statement
 * done (a traced cond or while loop did all of it, or an error) with its
 * flow in *fl. */
static inline int cond_of(hd_vm *vm, hd_frame *f, const hd_ast *n, int *t, int *fl) {
    if (HD_UNLIKELY(vm->ctx.trace != NULL)) return !cond_traced(vm, f, n, t, fl);
    if (truth_of(vm, f, n->a, t)) return 1;
    *fl = HD_FLOW_ERROR;
    return 0;
}

static HD_NOINLINE int ex_while_run(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    for (;;) {
        int t, fl;
        if (!cond_of(vm, f, n, &t, &fl)) return fl;
        if (!t) return HD_FLOW_NORMAL;
        fl = loop_body(vm, f, n);
        if (fl) return loop_result(fl);
    }
}

/* Loops: the body's variables go when the loop ends (block_release). */
static int ex_for(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    int fl = ex_for_run(vm, f, n);
    if (n->body && n->body->nslots) block_release(vm, f, n->body);
    return fl;
}

static int ex_while(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    int fl = ex_while_run(vm, f, n);
    if (n->body && n->body->nslots) block_release(vm, f, n->body);
    return fl;
}

int hd_eval_statement(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    return ex(vm, f, n);
}

static HD_NOINLINE int ex_if(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    for (;;) {
        int t, fl;
        if (!cond_of(vm, f, n, &t, &fl)) return fl;
        if (t) return ex_block(vm, f, n->body);
        n = n->c;
        if (!n) return HD_FLOW_NORMAL;
        if (n->kind != HD_AST_IF) return ex_block(vm, f, n);
    }
}

static HD_NOINLINE int ex_assign_name(hd_vm *vm, hd_frame *f, const hd_ast *n, const hd_ast *t,
                                      hd_value v) {
    if (n->op != HD_TOK_ASSIGN) {
        hd_value *p = name_slot(vm, f, t, &t->ref);
        if (!p) {
            hd_vunref(vm, v);
            return HD_FLOW_ERROR;
        }
        if (hd_is_uninit(*p)) {
            hd_vunref(vm, v);
            undefined(vm, f, t);
            return HD_FLOW_ERROR;
        }
        if (HD_UNLIKELY(vm->trace_reads)) note_read(vm, f, &t->ref, p, *p);
        hd_value r = hd_eval_combine(vm, f, n, *p, v);
        hd_vunref(vm, v);
        if (r.type == HD_V_ERR) return HD_FLOW_ERROR;
        v = r;
    }
    return store(vm, f, t, &t->ref, v) ? HD_FLOW_NORMAL : HD_FLOW_ERROR;
}

static int ex_assign(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    const hd_ast *t = n->a;
    hd_value v = ev(vm, f, n->b);
    if (HD_UNLIKELY(v.type == HD_V_ERR)) return HD_FLOW_ERROR;
    if (HD_LIKELY(t->kind == HD_AST_NAME)) {
        if (HD_LIKELY(n->op == HD_TOK_ASSIGN)) {
            hd_value *p;
            if (t->ref.kind == HD_REF_LOCAL)
                p = &f->slots[t->ref.index];
            else if (t->ref.kind == HD_REF_GLOBAL)
                p = &f->globals[t->ref.index];
            else
                return store(vm, f, t, &t->ref, v) ? HD_FLOW_NORMAL : HD_FLOW_ERROR;
            if (HD_UNLIKELY(vm->roll_watch)) hd_roll_note_store(vm, f, &t->ref, NULL, *p, v);
            if (HD_UNLIKELY(vm->trace_reads)) hd_compiled_note_slot(vm, p, NULL);
            hd_value old = *p;
            *p = v;
            hd_vunref(vm, old);
            return HD_FLOW_NORMAL;
        }
        return ex_assign_name(vm, f, n, t, v);
    }
    if (t->kind == HD_AST_MEMBER) return hd_eval_assign_member(vm, f, n, t, v);
    return hd_eval_assign_index(vm, f, n, t, v);
}

static HD_NOINLINE int ex_grad(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    /* Gradient hook point: the autograd layer installs enter/exit through
     * hd_vm_set_grad_hooks; without it the block simply runs. The context
     * of `grad_context(ctx) { }` is borrowed by enter (which keeps its own
     * reference for the block). */
    void *state = NULL;
    int kind = n->kind;
    hd_value arg = hd_none();
    if (n->a && (arg = ev(vm, f, n->a)).type == HD_V_ERR) return HD_FLOW_ERROR;
    hd_status st = vm->grad_enter ? vm->grad_enter(vm, kind, n->a ? &arg : NULL, &state) : HD_OK;
    hd_vunref(vm, arg);
    if (st != HD_OK) return flow_fail(vm, f, n);
    int fl = ex_block(vm, f, n->body);
    if (vm->grad_exit) vm->grad_exit(vm, kind, state);
    return fl;
}

int hd_eval_block(hd_vm *vm, hd_frame *f, const hd_ast *block) {
    return ex_block(vm, f, block);
}

hd_value hd_eval_expr(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    return ev(vm, f, n);
}

/* compiled_call.c's way in: a loop runs here, not through the lazy
 * strategy's hook in ex(). */
int hd_eval_stmt(hd_vm *vm, hd_frame *f, const hd_ast *stmt) {
    if (stmt->kind == HD_AST_FOR) return ex_for(vm, f, stmt);
    if (stmt->kind == HD_AST_WHILE) return ex_while(vm, f, stmt);
    return ex(vm, f, stmt);
}

/* Mode "lazy" traces a loop met in a function whole (compiled_call.c); the
 * top level's go through hd_compiled_statement already, and a
 * comprehension's loop fills a list no trace can see (vm->comp_list). */
static int lazy_loop(const hd_vm *vm, const hd_frame *f) {
    return f->closure && vm->comp_list.type == HD_V_NONE;
}

static int ex(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    switch (n->kind) {
    case HD_AST_ASSIGN: return ex_assign(vm, f, n);
    case HD_AST_EXPR: {
        hd_value v = ev(vm, f, n->a);
        if (v.type == HD_V_ERR) return HD_FLOW_ERROR;
        hd_vunref(vm, v);
        return HD_FLOW_NORMAL;
    }
    case HD_AST_IF: return ex_if(vm, f, n);
    case HD_AST_LET: {
        hd_value v = n->a ? ev(vm, f, n->a) : hd_none();
        if (v.type == HD_V_ERR) return HD_FLOW_ERROR;
        return store(vm, f, n, &n->ref, v) ? HD_FLOW_NORMAL : HD_FLOW_ERROR;
    }
    case HD_AST_FOR:
        if (HD_UNLIKELY(vm->compile_all & HD_COMPILE_ALL_LOOPS) && lazy_loop(vm, f))
            return hd_compiled_statement(vm, f, n);
        return ex_for(vm, f, n);
    case HD_AST_WHILE:
        if (HD_UNLIKELY(vm->compile_all & HD_COMPILE_ALL_LOOPS) && lazy_loop(vm, f))
            return hd_compiled_statement(vm, f, n);
        return ex_while(vm, f, n);
    case HD_AST_RETURN: {
        hd_value v = n->a ? ev(vm, f, n->a) : hd_none();
        if (v.type == HD_V_ERR) return HD_FLOW_ERROR;
        hd_vunref(vm, f->ret);
        f->ret = v;
        return HD_FLOW_RETURN;
    }
    case HD_AST_BREAK: return HD_FLOW_BREAK;
    case HD_AST_CONTINUE: return HD_FLOW_CONTINUE;
    case HD_AST_FNDEF: return HD_FLOW_NORMAL; /* bound when the block was entered */
    case HD_AST_CLASS: {
        if (!n->a) return HD_FLOW_NORMAL; /* bound when the block was entered */
        hd_value v = make_class(vm, f, n);
        if (v.type == HD_V_ERR) return HD_FLOW_ERROR;
        return store(vm, f, n, &n->ref, v) ? HD_FLOW_NORMAL : HD_FLOW_ERROR;
    }
    case HD_AST_IMPORT: {
        hd_value m;
        f->at = n;
        if (hd_vm_import(vm, f, n, &m) != HD_OK) return flow_fail(vm, f, n);
        return store(vm, f, n, &n->ref, m) ? HD_FLOW_NORMAL : HD_FLOW_ERROR;
    }
    case HD_AST_NO_GRAD:
    case HD_AST_GRAD_CTX:
    case HD_AST_WITH_STRATEGY: return ex_grad(vm, f, n);
    case HD_AST_COMPILED: return hd_compiled_block(vm, f, n);
    case HD_AST_BLOCK: return ex_block(vm, f, n);
    case HD_AST_COMP_PUSH: return ex_comp_push(vm, f, n);
    case HD_AST_TRY: return hd_eval_try(vm, f, n);
    case HD_AST_THROW: return hd_eval_throw(vm, f, n);
    default: {
        hd_value v = ev(vm, f, n);
        if (v.type == HD_V_ERR) return HD_FLOW_ERROR;
        hd_vunref(vm, v);
        return HD_FLOW_NORMAL;
    }
    }
}

/* ---- chunks ---- */

static HD_NOINLINE int repl_print(hd_vm *vm, hd_frame *f, const hd_ast *s) {
    hd_value v = ev(vm, f, s->a);
    if (v.type == HD_V_ERR) return HD_FLOW_ERROR;
    if (v.type != HD_V_NONE) {
        hd_value r = hd_value_repr(vm, v);
        if (r.type == HD_V_STR) {
            hd_vm_write(vm, hd_as_str(r)->chars, hd_as_str(r)->len);
            hd_vm_write(vm, "\n", 1);
        }
        hd_vunref(vm, r);
    }
    hd_vunref(vm, v);
    return HD_FLOW_NORMAL;
}

hd_status hd_eval_chunk(hd_vm *vm, hd_chunk *chunk, hd_module *mod, int repl) {
    const hd_ast *prog = chunk->parse.program;
    int nslots = prog->frame_slots;
    hd_value stack_slots[HD_STACK_SLOTS];
    hd_value *slots = stack_slots;
    if (nslots > HD_STACK_SLOTS) {
        slots = hd_ctx_alloc(&vm->ctx, (size_t)nslots * sizeof(hd_value));
        if (!slots) return hd_vm_oom(vm);
    }
    for (int i = 0; i < nslots; i++) slots[i] = hd_none();
    hd_frame fr;
    fr.parent = vm->frame;
    fr.slots = slots;
    fr.globals = mod->globals;
    fr.closure = NULL;
    fr.mod = mod;
    fr.chunk = chunk;
    fr.at = NULL;
    fr.ret = hd_none();
    fr.nslots = nslots;
    frame_bases(&fr);
    vm->frame = &fr;
    int fl = HD_FLOW_NORMAL;
    if (prog->nhoist) fl = block_enter(vm, &fr, prog);
    for (int i = 0; i < prog->n && fl == HD_FLOW_NORMAL; i++) {
        const hd_ast *s = prog->items[i];
        if (repl && s->kind == HD_AST_EXPR)
            fl = repl_print(vm, &fr, s);
        else if (HD_UNLIKELY(vm->compile_all))
            fl = hd_compiled_statement(vm, &fr, s);
        else
            fl = ex(vm, &fr, s);
    }
    vm->frame = fr.parent;
    for (int i = 0; i < nslots; i++) hd_vunref(vm, slots[i]);
    hd_vunref(vm, fr.ret);
    if (slots != stack_slots) hd_ctx_free(&vm->ctx, slots, (size_t)nslots * sizeof(hd_value));
    if (fl == HD_FLOW_ERROR) return vm->err ? vm->err : HD_ERR_RUNTIME;
    return HD_OK;
}
