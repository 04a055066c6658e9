/* resolve: names to slots. See resolve.h.
 *
 * Function bodies are resolved when the block that defines them ends, so
 * that they see every name that block declares, including names declared
 * after the function (hoisting). A local becomes a cell when a nested
 * function captures it; references resolved before that are patched. */
#include "resolve.h"
#include "hints.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define HD_RESOLVE_MAX_DEPTH 1000

typedef struct rs_refnode {
    hd_ref *ref;
    struct rs_refnode *next;
} rs_refnode;

typedef struct rs_var {
    const char *name;
    int slot;
    int captured;
    int param; /* parameter index, or -1 */
    rs_refnode *refs;
} rs_var;

typedef struct rs_defer {
    hd_ast_fn *fn;
    struct rs_defer *next;
} rs_defer;

typedef struct rs_scope {
    struct rs_scope *up;
    int var_base;
    int slot_base;
    int resv, resv_end; /* slots kept for the block's own declarations */
    int global;         /* the program's own block: declarations are module globals */
    rs_defer *deferred, *deferred_tail;
} rs_scope;

typedef struct rs_fn {
    struct rs_fn *up;
    hd_ast_fn *fn; /* NULL for a chunk's top level */
    rs_var *vars;
    int nvars, vars_cap;
    rs_scope *block;
    int nslots, maxslots;
    hd_ast_capture *caps;
    int ncaps, caps_cap;
    int loops;
} rs_fn;

typedef struct rs {
    hd_vm *vm;
    hd_parse *p;
    hd_module *mod;
    hd_ast_arena *tmp; /* scratch, freed at the end */
    hd_value pending;  /* dict: globals declared by this chunk -> slot */
    int nglobals;      /* module globals + pending */
    int repl;
    int depth;
    int oom;
    hd_diag *diags;
    int ndiags, diags_cap;
} rs;

static void *rs_alloc(rs *r, hd_ast_arena *a, size_t n) {
    void *p = hd_ast_arena_alloc(a, n);
    if (!p) r->oom = 1;
    return p;
}

/* Grow an arena array: arrays double, so the waste stays bounded. */
static void *rs_grow(rs *r, hd_ast_arena *a, void *old, int n, int *cap, size_t elem) {
    if (n < *cap) return old;
    int ncap = *cap ? *cap * 2 : 8;
    void *p = rs_alloc(r, a, (size_t)ncap * elem);
    if (!p) return NULL;
    if (old) memcpy(p, old, (size_t)n * elem);
    *cap = ncap;
    return p;
}

static void rs_error(rs *r, const hd_span *span, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void rs_error(rs *r, const hd_span *span, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    hd_diag *d = rs_grow(r, r->p->arena, r->diags, r->ndiags, &r->diags_cap, sizeof(hd_diag));
    if (!d) return;
    r->diags = d;
    size_t n = strlen(msg) + 1;
    char *m = rs_alloc(r, r->p->arena, n);
    if (!m) return;
    memcpy(m, msg, n);
    r->diags[r->ndiags].span = *span;
    r->diags[r->ndiags].message = m;
    r->ndiags++;
}

/* ---- scopes ---- */

static void rs_block_push(rs *r, rs_fn *f, rs_scope *b, int global) {
    memset(b, 0, sizeof *b);
    b->up = f->block;
    b->var_base = f->nvars;
    b->slot_base = f->nslots;
    b->resv = b->resv_end = f->nslots;
    b->global = global;
    f->block = b;
    HD_UNUSED(r);
}

static void rs_add_ref(rs *r, rs_var *v, hd_ref *ref) {
    rs_refnode *n = rs_alloc(r, r->tmp, sizeof *n);
    if (!n) return;
    n->ref = ref;
    n->next = v->refs;
    v->refs = n;
}

static void rs_bind_var(rs *r, rs_var *v, hd_ref *ref) {
    ref->kind = v->captured ? HD_REF_CELL : HD_REF_LOCAL;
    ref->index = v->slot;
    rs_add_ref(r, v, ref);
}

static int rs_find_var(rs_fn *f, const char *name) {
    for (int i = f->nvars - 1; i >= 0; i--)
        if (strcmp(f->vars[i].name, name) == 0) return i;
    return -1;
}

static int rs_global_slot(rs *r, const char *name) {
    hd_value *v = hd_dict_get(r->pending, name);
    if (!v) v = hd_dict_get(r->mod->names, name);
    return v ? (int)v->as.i : -1;
}

static int rs_declare_global(rs *r, const char *name) {
    int slot = rs_global_slot(r, name);
    if (slot >= 0) return slot;
    slot = r->nglobals;
    if (hd_dict_set(r->vm, r->pending, name, hd_int(slot)) != HD_OK) {
        r->oom = 1;
        return 0;
    }
    r->nglobals++;
    return slot;
}

/* Declare `name` in the innermost block. A second declaration in the same
 * block re-binds the same variable. */
static void rs_declare(rs *r, rs_fn *f, const char *name, hd_ref *ref, int param) {
    if (f->block->global) {
        ref->kind = HD_REF_GLOBAL;
        ref->index = rs_declare_global(r, name);
        return;
    }
    int i = rs_find_var(f, name);
    if (i < f->block->var_base) {
        rs_var *vars = rs_grow(r, r->tmp, f->vars, f->nvars, &f->vars_cap, sizeof(rs_var));
        if (!vars) return;
        f->vars = vars;
        i = f->nvars++;
        memset(&f->vars[i], 0, sizeof(rs_var));
        f->vars[i].name = name;
        f->vars[i].slot = f->block->resv < f->block->resv_end ? f->block->resv++ : f->nslots++;
        f->vars[i].param = param;
        if (f->nslots > f->maxslots) f->maxslots = f->nslots;
    }
    rs_bind_var(r, &f->vars[i], ref);
}

static int rs_add_capture(rs *r, rs_fn *f, int from_cell, int index) {
    for (int i = 0; i < f->ncaps; i++)
        if (f->caps[i].from_parent_cell == from_cell && f->caps[i].index == index) return i;
    hd_ast_capture *c = rs_grow(r, r->tmp, f->caps, f->ncaps, &f->caps_cap, sizeof *c);
    if (!c) return 0;
    f->caps = c;
    f->caps[f->ncaps].from_parent_cell = from_cell;
    f->caps[f->ncaps].index = index;
    return f->ncaps++;
}

static void rs_capture_var(rs_fn *f, rs_var *v) {
    if (v->captured) return;
    v->captured = 1;
    for (rs_refnode *n = v->refs; n; n = n->next) n->ref->kind = HD_REF_CELL;
    if (v->param >= 0 && f->fn) f->fn->param_is_cell[v->param] = 1;
}

/* The upvalue index of `name` in f, capturing it from enclosing functions;
 * -1 if no enclosing function has it as a local. */
static int rs_upvalue(rs *r, rs_fn *f, const char *name) {
    rs_fn *parent = f->up;
    if (!parent) return -1;
    int i = rs_find_var(parent, name);
    if (i >= 0) {
        rs_capture_var(parent, &parent->vars[i]);
        return rs_add_capture(r, f, 1, parent->vars[i].slot);
    }
    int up = rs_upvalue(r, parent, name);
    return up < 0 ? -1 : rs_add_capture(r, f, 0, up);
}

/* Resolve a name read or written; 0 if unknown. */
static int rs_lookup(rs *r, rs_fn *f, const char *name, hd_ref *ref) {
    int i = rs_find_var(f, name);
    if (i >= 0) {
        rs_bind_var(r, &f->vars[i], ref);
        return 1;
    }
    int up = rs_upvalue(r, f, name);
    if (up >= 0) {
        ref->kind = HD_REF_UPVALUE;
        ref->index = up;
        return 1;
    }
    int g = rs_global_slot(r, name);
    if (g >= 0) {
        ref->kind = HD_REF_GLOBAL;
        ref->index = g;
        return 1;
    }
    hd_value *b = hd_dict_get(r->vm->builtin_index, name);
    if (b) {
        ref->kind = HD_REF_BUILTIN;
        ref->index = (int)b->as.i;
        return 1;
    }
    return 0;
}

/* The keys of dict d (may be none) offered to h; names of the library's
 * own (a leading underscore) are not offered. */
static void rs_hint_keys(hd_hint *h, hd_value d) {
    if (d.type != HD_V_DICT) return;
    const hd_dict *t = hd_as_dict(d);
    for (int64_t i = 0; i < t->len; i++)
        if (t->keys[i] && t->keys[i]->chars[0] != '_') hd_hint_offer(h, t->keys[i]->chars);
}

/* Is name one of the standard modules (nn, optim, strategy, ...)? */
static int rs_is_stdlib_module(const rs *r, const char *name) {
    const char *dir = r->vm->stdlib_dir;
    char path[1024];
    if (!dir || !*name || strchr(name, '/') || strchr(name, '.')) return 0;
    snprintf(path, sizeof path, "%s/%s.hodu", dir, name);
    return access(path, R_OK) == 0;
}

/* An unknown name: the error, with a name in scope it may mean (the
 * other libraries' spelling of a builtin, or the closest). */
static void rs_unknown_name(rs *r, rs_fn *f, const hd_ast *n) {
    hd_hint h;
    hd_hint_init(&h, n->name);
    for (rs_fn *g = f; g; g = g->up)
        for (int i = 0; i < g->nvars; i++) hd_hint_offer(&h, g->vars[i].name);
    rs_hint_keys(&h, r->pending);
    rs_hint_keys(&h, r->mod->names);
    rs_hint_keys(&h, r->vm->builtin_index);
    if (rs_is_stdlib_module(r, n->name))
        rs_error(r, &n->span, "unknown name '%s' (it is a standard module: import %s first)",
                 n->name, n->name);
    else if (h.best)
        rs_error(r, &n->span, "unknown name '%s' (did you mean '%s'?)", n->name, h.best);
    else
        rs_error(r, &n->span, "unknown name '%s'", n->name);
}

/* ---- the walk ---- */

static void rs_expr(rs *r, rs_fn *f, hd_ast *n);
static void rs_stmt(rs *r, rs_fn *f, hd_ast *n);
static void rs_block(rs *r, rs_fn *f, hd_ast *n);
static void rs_function(rs *r, rs_fn *parent, hd_ast_fn *fn);

static void rs_defer_fn(rs *r, rs_fn *f, hd_ast_fn *fn) {
    rs_defer *d = rs_alloc(r, r->tmp, sizeof *d);
    if (!d) return;
    d->fn = fn;
    if (f->block->deferred_tail)
        f->block->deferred_tail->next = d;
    else
        f->block->deferred = d;
    f->block->deferred_tail = d;
}

/* Resolve the functions this block defined (they may defer more into the
 * same block: a fn inside a default argument, say). */
static void rs_run_deferred(rs *r, rs_fn *f) {
    while (f->block->deferred) {
        rs_defer *d = f->block->deferred;
        f->block->deferred = d->next;
        if (!d->next) f->block->deferred_tail = NULL;
        rs_function(r, f, d->fn);
    }
}

/* Close the innermost block; BLOCK nodes get their cell list. */
static void rs_block_pop(rs *r, rs_fn *f, hd_ast *node) {
    rs_run_deferred(r, f);
    rs_scope *b = f->block;
    if (node) {
        int ncells = 0;
        for (int i = b->var_base; i < f->nvars; i++)
            ncells += f->vars[i].captured && f->vars[i].param < 0;
        node->nslots = f->nvars - b->var_base;
        node->slot0 = b->slot_base;
        node->ncells = ncells;
        if (ncells) {
            node->cells = rs_alloc(r, r->p->arena, (size_t)ncells * sizeof(int));
            if (node->cells) {
                int k = 0;
                for (int i = b->var_base; i < f->nvars; i++)
                    if (f->vars[i].captured && f->vars[i].param < 0)
                        node->cells[k++] = f->vars[i].slot;
            }
        }
    }
    f->nvars = b->var_base;
    f->nslots = b->slot_base;
    f->block = b->up;
}

static int rs_enter(rs *r, const hd_ast *n) {
    if (++r->depth <= HD_RESOLVE_MAX_DEPTH) return 1;
    if (r->depth == HD_RESOLVE_MAX_DEPTH + 1)
        rs_error(r, &n->span, "program nested too deeply (more than %d levels)",
                 HD_RESOLVE_MAX_DEPTH);
    r->depth--;
    return 0;
}

static void rs_items(rs *r, rs_fn *f, hd_ast *n) {
    for (int i = 0; i < n->n; i++)
        if (n->items[i]) rs_expr(r, f, n->items[i]);
}

static void rs_expr(rs *r, rs_fn *f, hd_ast *n) {
    if (!n || !rs_enter(r, n)) return;
    switch (n->kind) {
    case HD_AST_NAME:
        if (!rs_lookup(r, f, n->name, &n->ref)) {
            if (r->repl && f->fn) {
                n->ref.kind = HD_REF_GLOBAL;
                n->ref.index = rs_declare_global(r, n->name);
            } else {
                rs_unknown_name(r, f, n);
            }
        }
        break;
    case HD_AST_LIST:
    case HD_AST_DICT:
    case HD_AST_SCRIPT: rs_items(r, f, n); break;
    case HD_AST_PAIR:
    case HD_AST_UNARY:
    case HD_AST_BINARY:
    case HD_AST_AND:
    case HD_AST_OR:
    case HD_AST_ARG:
    case HD_AST_MEMBER:
    case HD_AST_SLICE:
        rs_expr(r, f, n->a);
        rs_expr(r, f, n->b);
        rs_expr(r, f, n->c);
        break;
    case HD_AST_CALL:
    case HD_AST_INDEX:
        rs_expr(r, f, n->a);
        rs_items(r, f, n);
        break;
    case HD_AST_FN: rs_defer_fn(r, f, n->fn); break;
    case HD_AST_COMP: rs_stmt(r, f, n->a); break;
    default: break;
    }
    if (n->kind == HD_AST_SCRIPT && n->body) {
        int loops = f->loops;
        f->loops = 0;
        rs_block(r, f, n->body);
        f->loops = loops;
    }
    r->depth--;
}

static void rs_assign_target(rs *r, rs_fn *f, hd_ast *t) {
    switch (t->kind) {
    case HD_AST_NAME:
        if (!rs_lookup(r, f, t->name, &t->ref)) {
            if (r->repl && f->fn) {
                t->ref.kind = HD_REF_GLOBAL;
                t->ref.index = rs_declare_global(r, t->name);
            } else {
                rs_error(r, &t->span, "assignment to undeclared name '%s' (declare it with let)",
                         t->name);
            }
        } else if (t->ref.kind == HD_REF_BUILTIN) {
            rs_error(r, &t->span, "cannot assign to builtin '%s' (declare it with let)", t->name);
        }
        break;
    case HD_AST_MEMBER: rs_expr(r, f, t->a); break;
    case HD_AST_INDEX:
        rs_expr(r, f, t->a);
        rs_items(r, f, t);
        break;
    default: rs_error(r, &t->span, "cannot assign to this expression"); break;
    }
}

static void rs_loop_body(rs *r, rs_fn *f, hd_ast *body) {
    f->loops++;
    if (body) rs_block(r, f, body);
    f->loops--;
}

static void rs_class(rs *r, rs_fn *f, hd_ast *n) {
    for (int i = 0; i < n->n; i++) {
        hd_ast *m = n->items[i];
        if (m && m->fn) rs_defer_fn(r, f, m->fn);
    }
}

static void rs_stmt(rs *r, rs_fn *f, hd_ast *n) {
    if (!n || !rs_enter(r, n)) return;
    switch (n->kind) {
    case HD_AST_EXPR:
    case HD_AST_COMP_PUSH:
        rs_expr(r, f, n->a);
        if (n->b) rs_expr(r, f, n->b);
        break;
    case HD_AST_LET:
        rs_expr(r, f, n->a);
        rs_declare(r, f, n->name, &n->ref, -1);
        break;
    case HD_AST_ASSIGN:
        rs_expr(r, f, n->b);
        rs_assign_target(r, f, n->a);
        break;
    case HD_AST_IF:
        rs_expr(r, f, n->a);
        if (n->body) rs_block(r, f, n->body);
        if (n->c && n->c->kind == HD_AST_IF)
            rs_stmt(r, f, n->c);
        else if (n->c)
            rs_block(r, f, n->c);
        break;
    case HD_AST_WHILE:
        rs_expr(r, f, n->a);
        rs_loop_body(r, f, n->body);
        break;
    case HD_AST_FOR: {
        rs_expr(r, f, n->a);
        rs_scope scope;
        rs_block_push(r, f, &scope, 0);
        rs_declare(r, f, n->name, &n->ref, -1);
        rs_loop_body(r, f, n->body);
        rs_block_pop(r, f, NULL);
        break;
    }
    case HD_AST_BREAK:
    case HD_AST_CONTINUE:
        if (!f->loops)
            rs_error(r, &n->span, "'%s' outside a loop",
                     n->kind == HD_AST_BREAK ? "break" : "continue");
        break;
    case HD_AST_RETURN:
        if (!f->fn) rs_error(r, &n->span, "'return' outside a function");
        rs_expr(r, f, n->a);
        break;
    case HD_AST_FNDEF:
        if (n->fn) rs_defer_fn(r, f, n->fn);
        break;
    case HD_AST_CLASS:
        if (n->a) { /* class C(Base): made when the statement runs, as a let */
            rs_expr(r, f, n->a);
            rs_declare(r, f, n->name, &n->ref, -1);
        }
        rs_class(r, f, n);
        break;
    case HD_AST_IMPORT:
        if (!n->name)
            rs_error(r, &n->span, "an import by path needs a name: import \"%s\" as NAME",
                     n->str ? n->str : "");
        else
            rs_declare(r, f, n->name, &n->ref, -1);
        break;
    case HD_AST_NO_GRAD:
    case HD_AST_GRAD_CTX:
    case HD_AST_WITH_STRATEGY:
        rs_expr(r, f, n->a); /* grad_context(ctx) { }: the context; with_strategy(s) { }: s */
        if (n->body) rs_block(r, f, n->body);
        break;
    case HD_AST_COMPILED:
        rs_items(r, f, n);
        if (n->body) rs_block(r, f, n->body);
        break;
    case HD_AST_BLOCK: rs_block(r, f, n); break;
    case HD_AST_TRY: {
        if (n->body) rs_block(r, f, n->body);
        rs_scope scope;
        rs_block_push(r, f, &scope, 0);
        if (n->name) rs_declare(r, f, n->name, &n->ref, -1);
        if (n->c) rs_block(r, f, n->c);
        rs_block_pop(r, f, NULL);
        break;
    }
    case HD_AST_THROW: rs_expr(r, f, n->a); break;
    default: rs_expr(r, f, n); break;
    }
    r->depth--;
}

/* Declare the block's functions and classes first: they are bound when the
 * block is entered, so they may be used before their definition. */
static void rs_hoist(rs *r, rs_fn *f, hd_ast *n) {
    int count = 0;
    for (int i = 0; i < n->n; i++) {
        hd_ast *s = n->items[i];
        if (s && (s->kind == HD_AST_FNDEF || (s->kind == HD_AST_CLASS && !s->a)) && s->name) {
            rs_declare(r, f, s->name, &s->ref, -1);
            count++;
        }
    }
    n->nhoist = count;
}

static void rs_statements(rs *r, rs_fn *f, hd_ast *n) {
    rs_hoist(r, f, n);
    for (int i = 0; i < n->n; i++) rs_stmt(r, f, n->items[i]);
}

/* The block's declarations get their slots before any nested scope is
 * resolved, so that a scope earlier in the block (a for loop's variable)
 * never shares a slot with a variable declared after it: that slot holds
 * the later variable's cell from the block's entry when a closure
 * captures it. */
static void rs_reserve(rs_fn *f, const hd_ast *n) {
    int count = 0;
    for (int i = 0; i < n->n; i++) {
        const hd_ast *s = n->items[i];
        count += s && s->name &&
                 (s->kind == HD_AST_LET || s->kind == HD_AST_IMPORT || s->kind == HD_AST_CLASS ||
                  s->kind == HD_AST_FNDEF);
    }
    f->block->resv = f->nslots;
    f->block->resv_end = f->nslots + count;
    f->nslots += count;
    if (f->nslots > f->maxslots) f->maxslots = f->nslots;
}

static void rs_block(rs *r, rs_fn *f, hd_ast *n) {
    rs_scope b;
    rs_block_push(r, f, &b, 0);
    rs_reserve(f, n);
    rs_statements(r, f, n);
    rs_block_pop(r, f, n);
}

static void rs_function(rs *r, rs_fn *parent, hd_ast_fn *fn) {
    rs_fn f;
    memset(&f, 0, sizeof f);
    f.up = parent;
    f.fn = fn;
    if (fn->nparams) {
        fn->param_is_cell = rs_alloc(r, r->p->arena, (size_t)fn->nparams);
        if (!fn->param_is_cell) return;
    }
    rs_scope params;
    rs_block_push(r, &f, &params, 0);
    for (int i = 0; i < fn->nparams; i++) {
        hd_ast_param *p = &fn->params[i];
        for (int j = 0; j < i; j++)
            if (strcmp(fn->params[j].name, p->name) == 0)
                rs_error(r, &p->span, "duplicate parameter '%s'", p->name);
        /* A default sees the parameters before it. */
        rs_expr(r, &f, p->def);
        hd_ref *scratch = rs_alloc(r, r->tmp, sizeof *scratch);
        if (scratch) rs_declare(r, &f, p->name, scratch, i);
    }
    if (fn->body) rs_block(r, &f, fn->body);
    rs_block_pop(r, &f, NULL);
    fn->nslots = f.maxslots;
    /* NULL when no parameter is captured: calls skip the boxing pass. */
    int any_cell = 0;
    for (int i = 0; i < fn->nparams && fn->param_is_cell; i++) any_cell |= fn->param_is_cell[i];
    if (!any_cell) fn->param_is_cell = NULL;
    fn->ncaptures = f.ncaps;
    if (f.ncaps) {
        fn->captures = rs_alloc(r, r->p->arena, (size_t)f.ncaps * sizeof(hd_ast_capture));
        if (fn->captures) memcpy(fn->captures, f.caps, (size_t)f.ncaps * sizeof(hd_ast_capture));
    }
}

/* Function bodies are resolved late; report in source order. */
static void rs_sort_diags(hd_diag *d, int n) {
    for (int i = 1; i < n; i++) {
        hd_diag x = d[i];
        int j = i - 1;
        while (j >= 0 && (d[j].span.line > x.span.line ||
                          (d[j].span.line == x.span.line && d[j].span.col > x.span.col))) {
            d[j + 1] = d[j];
            j--;
        }
        d[j + 1] = x;
    }
}

static hd_status rs_commit(rs *r) {
    hd_module *m = r->mod;
    hd_dict *pd = hd_as_dict(r->pending);
    if (pd->len && hd_module_grow(r->vm, m, r->nglobals) != HD_OK) return HD_ERR_MEMORY;
    for (int64_t i = 0; i < pd->len; i++)
        if (hd_dict_set_str(r->vm, m->names, pd->keys[i], pd->vals[i]) != HD_OK)
            return HD_ERR_MEMORY;
    return HD_OK;
}

hd_status hd_resolve(hd_vm *vm, hd_parse *p, hd_module *mod, int repl, hd_diag **diags,
                     int *ndiags) {
    rs r;
    memset(&r, 0, sizeof r);
    r.vm = vm;
    r.p = p;
    r.mod = mod;
    r.repl = repl;
    r.nglobals = mod->nglobals;
    r.tmp = hd_ast_arena_new(&vm->ctx);
    r.pending = hd_dict_new(vm);
    *diags = NULL;
    *ndiags = 0;
    if (!r.tmp || r.pending.type != HD_V_DICT) {
        if (r.tmp) hd_ast_arena_free(r.tmp);
        hd_vunref(vm, r.pending);
        return hd_vm_oom(vm);
    }
    hd_ast *prog = p->program;
    rs_fn top;
    memset(&top, 0, sizeof top);
    rs_scope global;
    rs_block_push(&r, &top, &global, 1);
    rs_statements(&r, &top, prog);
    rs_block_pop(&r, &top, NULL);
    prog->frame_slots = top.maxslots;
    prog->nslots = r.nglobals;
    hd_status st = HD_OK;
    if (r.oom)
        st = hd_vm_oom(vm);
    else if (r.ndiags)
        st = HD_ERR_SYNTAX;
    else
        st = rs_commit(&r);
    rs_sort_diags(r.diags, r.ndiags);
    *diags = r.diags;
    *ndiags = r.ndiags;
    hd_vunref(vm, r.pending);
    hd_ast_arena_free(r.tmp);
    return st;
}
