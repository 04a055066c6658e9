/* ast.c: the arena, the parser's node constructors and diagnostics, the debug
 * dump and the diagnostic formatter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parse_int.h"

/* ---- arena ---- */

#define HD_ARENA_BLOCK 16384

typedef union hd_arena_block {
    struct {
        union hd_arena_block *next;
        size_t size; /* bytes of the whole block, header included */
    } h;
    max_align_t align;
} hd_arena_block;

struct hd_ast_arena {
    hd_ctx *ctx;
    hd_arena_block *head;
    unsigned char *cur, *end;
};

hd_ast_arena *hd_ast_arena_new(hd_ctx *ctx) {
    hd_ast_arena *a = hd_ctx_alloc(ctx, sizeof *a);
    if (!a) return NULL;
    a->ctx = ctx;
    a->head = NULL;
    a->cur = a->end = NULL;
    return a;
}

static int hd_arena_grow(hd_ast_arena *a, size_t n) {
    size_t size = sizeof(hd_arena_block) + (n > HD_ARENA_BLOCK ? n : HD_ARENA_BLOCK);
    hd_arena_block *b = hd_ctx_alloc(a->ctx, size);
    if (!b) return 0;
    b->h.next = a->head;
    b->h.size = size;
    a->head = b;
    a->cur = (unsigned char *)(b + 1);
    a->end = (unsigned char *)b + size;
    return 1;
}

void *hd_ast_arena_alloc(hd_ast_arena *a, size_t n) {
    const size_t align = sizeof(max_align_t);
    if (!a || n > ((size_t)1 << 40)) return NULL;
    n = (n + align - 1) & ~(align - 1);
    if (n == 0) n = align;
    if ((size_t)(a->end - a->cur) < n && !hd_arena_grow(a, n)) return NULL;
    void *p = a->cur;
    a->cur += n;
    memset(p, 0, n);
    return p;
}

void hd_ast_arena_free(hd_ast_arena *a) {
    if (!a) return;
    hd_arena_block *b = a->head;
    while (b) {
        hd_arena_block *next = b->h.next;
        hd_ctx_free(a->ctx, b, b->h.size);
        b = next;
    }
    hd_ctx_free(a->ctx, a, sizeof *a);
}

/* ---- parser memory and diagnostics ---- */

void *hd_parse_alloc(hd_parser *p, size_t n) {
    void *m = hd_ast_arena_alloc(p->arena, n);
    if (!m) p->oom = 1;
    return m;
}

char *hd_parse_strdup(hd_parser *p, const char *s, size_t n) {
    char *d = hd_parse_alloc(p, n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static int hd_parse_diag_room(hd_parser *p) {
    if (p->ndiags < p->cap_diags) return 1;
    int cap = p->cap_diags ? p->cap_diags * 2 : 4;
    hd_diag *d = hd_parse_alloc(p, (size_t)cap * sizeof *d);
    if (!d) return 0;
    if (p->ndiags) memcpy(d, p->diags, (size_t)p->ndiags * sizeof *d);
    p->diags = d;
    p->cap_diags = cap;
    return 1;
}

void hd_parse_error(hd_parser *p, hd_span span, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    if (p->oom || p->ndiags >= HD_PARSE_MAX_ERRORS) {
        p->abort = 1;
        return;
    }
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof buf) n = (int)sizeof buf - 1;
    if (!hd_parse_diag_room(p)) return;
    char *msg = hd_parse_strdup(p, buf, (size_t)n);
    if (!msg) return;
    p->diags[p->ndiags].span = span;
    p->diags[p->ndiags].message = msg;
    if (++p->ndiags >= HD_PARSE_MAX_ERRORS) p->abort = 1;
}

/* ---- nodes ---- */

/* A node as the parser allocates it: the hd_ast first (so a pointer to one
 * is a pointer to the other), then what only the parser needs. */
typedef struct hd_parse_node_ {
    hd_ast ast;
    int height; /* 1 + the tallest child */
    int big;    /* INT 2^63 not yet taken by a unary minus */
    hd_ast *key; /* PAIR: its key as written (a bare name, for a dict comprehension) */
} hd_parse_node_;

static hd_parse_node_ *hd_pn(hd_ast *n) {
    return (hd_parse_node_ *)n;
}

hd_ast *hd_parse_node(hd_parser *p, hd_ast_kind kind, hd_span span) {
    hd_parse_node_ *n = hd_parse_alloc(p, sizeof *n);
    if (!n) return NULL;
    n->ast.kind = kind;
    n->ast.span = span;
    n->height = 1;
    return &n->ast;
}

/* Fold a child into its parent's height; a 2^63 literal left here had no
 * minus in front of it. */
static int hd_parse_child(hd_parser *p, hd_ast *c) {
    if (!c) return 0;
    if (hd_pn(c)->big) {
        hd_pn(c)->big = 0;
        hd_parse_error(p, c->span, "integer literal too large");
    }
    return hd_pn(c)->height;
}

hd_ast *hd_parse_done(hd_parser *p, hd_ast *n) {
    if (!n) return NULL;
    int h = 0, c;
    hd_ast *kids[4] = {n->a, n->b, n->c, n->body};
    for (int i = 0; i < 4; i++)
        if ((c = hd_parse_child(p, kids[i])) > h) h = c;
    for (int i = 0; i < n->n; i++)
        if ((c = hd_parse_child(p, n->items[i])) > h) h = c;
    if (n->fn) {
        for (int i = 0; i < n->fn->nparams; i++)
            if ((c = hd_parse_child(p, n->fn->params[i].def)) > h) h = c;
        if ((c = hd_parse_child(p, n->fn->body)) > h) h = c;
    }
    hd_pn(n)->height = h + 1;
    if (h + 1 > HD_PARSE_MAX_DEPTH && !p->too_deep) {
        p->too_deep = 1;
        hd_parse_error(p, n->span, "expression nested too deeply");
    }
    return n;
}

hd_ast *hd_parse_mk(hd_parser *p, hd_ast_kind kind, hd_span span, hd_ast *a, hd_ast *b, hd_ast *c) {
    hd_ast *n = hd_parse_node(p, kind, span);
    if (!n) return NULL;
    n->a = a;
    n->b = b;
    n->c = c;
    return hd_parse_done(p, n);
}

hd_ast *hd_parse_op(hd_parser *p, hd_ast_kind kind, int op, hd_span span, hd_ast *a, hd_ast *b) {
    hd_ast *n = hd_parse_mk(p, kind, span, a, b, NULL);
    if (n) n->op = op;
    return n;
}

/* -9223372036854775808 is one literal: the minus takes the 2^63. */
hd_ast *hd_parse_unary(hd_parser *p, int op, hd_span span, hd_ast *a) {
    if (op == HD_TOK_MINUS && a && hd_pn(a)->big) {
        hd_pn(a)->big = 0;
        a->span = span;
        return a;
    }
    return hd_parse_op(p, HD_AST_UNARY, op, span, a, NULL);
}

hd_ast *hd_parse_named(hd_parser *p, hd_ast_kind kind, const char *name, hd_span span, hd_ast *a) {
    hd_ast *n = hd_parse_node(p, kind, span);
    if (!n) return NULL;
    n->name = name;
    n->a = a;
    return hd_parse_done(p, n);
}

hd_ast *hd_parse_int(hd_parser *p, const hd_lex_value *v, hd_span span) {
    hd_ast *n = hd_parse_node(p, HD_AST_INT, span);
    if (!n) return NULL;
    n->ival = v->i;
    hd_pn(n)->big = v->big;
    return n;
}

hd_ast *hd_parse_float(hd_parser *p, double f, hd_span span) {
    hd_ast *n = hd_parse_node(p, HD_AST_FLOAT, span);
    if (n) n->fval = f;
    return n;
}

hd_ast *hd_parse_str(hd_parser *p, const hd_lex_value *v, hd_span span) {
    hd_ast *n = hd_parse_node(p, HD_AST_STR, span);
    if (!n) return NULL;
    n->str = v->s;
    n->slen = v->s ? (v->len ? v->len : strlen(v->s)) : 0;
    if (!n->str) n->str = "";
    return n;
}

hd_parse_list *hd_parse_list_add(hd_parser *p, hd_parse_list *l, hd_ast *item) {
    if (!l && !(l = hd_parse_alloc(p, sizeof *l))) return NULL;
    if (!item) return l;
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        hd_ast **items = hd_parse_alloc(p, (size_t)cap * sizeof *items);
        if (!items) return NULL;
        if (l->n) memcpy(items, l->items, (size_t)l->n * sizeof *items);
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = item;
    return l;
}

hd_ast *hd_parse_items(hd_parser *p, hd_ast *n, hd_parse_list *l) {
    if (!n) return NULL;
    if (l) {
        n->items = l->items;
        n->n = l->n;
    }
    return hd_parse_done(p, n);
}

hd_ast *hd_parse_block(hd_parser *p, hd_span span, hd_parse_list *stmts) {
    return hd_parse_items(p, hd_parse_node(p, HD_AST_BLOCK, span), stmts);
}

/* The comprehension's for statement pushes elem (a list's) or sets key
 * elem to value (a dict's, value not NULL). */
static hd_ast *parse_comp(hd_parser *p, hd_span span, hd_ast *elem, hd_ast *value,
                          const char *name, hd_ast *iter, hd_ast *cond) {
    hd_ast *stmt = hd_parse_mk(p, HD_AST_COMP_PUSH, elem->span, elem, value, NULL);
    if (stmt && cond) {
        hd_ast *then = hd_parse_block(p, elem->span, hd_parse_list_add(p, NULL, stmt));
        if (!then || !(stmt = hd_parse_node(p, HD_AST_IF, cond->span))) return NULL;
        stmt->a = cond;
        stmt->body = then;
        stmt = hd_parse_done(p, stmt);
    }
    hd_ast *body = stmt ? hd_parse_block(p, span, hd_parse_list_add(p, NULL, stmt)) : NULL;
    hd_ast *loop = body ? hd_parse_named(p, HD_AST_FOR, name, span, iter) : NULL;
    if (!loop) return NULL;
    loop->body = body;
    hd_ast *comp = hd_parse_mk(p, HD_AST_COMP, span, hd_parse_done(p, loop), NULL, NULL);
    if (comp) comp->op = value ? HD_COMP_DICT : HD_COMP_LIST;
    return comp;
}

hd_ast *hd_parse_comp(hd_parser *p, hd_span span, hd_ast *elem, const char *name, hd_ast *iter,
                      hd_ast *cond) {
    return parse_comp(p, span, elem, NULL, name, iter, cond);
}

hd_ast *hd_parse_dict_comp(hd_parser *p, hd_span span, hd_ast *pair, const char *name,
                           hd_ast *iter, hd_ast *cond) {
    return parse_comp(p, span, hd_pn(pair)->key, pair->b, name, iter, cond);
}

hd_ast *hd_parse_entry(hd_parser *p, hd_span span, hd_ast *key, hd_ast *value) {
    hd_ast *k = key;
    if (key->kind == HD_AST_NAME) {
        hd_lex_value v = {0};
        v.s = key->name;
        if (!(k = hd_parse_str(p, &v, key->span))) return NULL;
    }
    hd_ast *pair = hd_parse_mk(p, HD_AST_PAIR, span, k, value, NULL);
    if (pair) hd_pn(pair)->key = key;
    return pair;
}

static const char *hd_parse_target_what(const hd_ast *t) {
    switch (t->kind) {
    case HD_AST_CALL: return "a function call";
    case HD_AST_NONE:
    case HD_AST_TRUE:
    case HD_AST_FALSE:
    case HD_AST_INT:
    case HD_AST_FLOAT:
    case HD_AST_STR:
    case HD_AST_LIST:
    case HD_AST_DICT: return "a literal";
    case HD_AST_UNARY:
    case HD_AST_BINARY:
    case HD_AST_AND:
    case HD_AST_OR: return "an operator expression";
    case HD_AST_FN: return "a function";
    case HD_AST_SCRIPT: return "a script";
    default: return "this expression";
    }
}

/* x = e, x.f = e, x[i] = e (and +=, -=, *=, /=); any other target is an
 * error that still gives a node, so parsing goes on. */
hd_ast *hd_parse_assign(hd_parser *p, int op, hd_span span, hd_ast *target, hd_ast *value) {
    hd_ast_kind k = target->kind;
    if (k != HD_AST_NAME && k != HD_AST_MEMBER && k != HD_AST_INDEX)
        hd_parse_error(p, target->span, "cannot assign to %s", hd_parse_target_what(target));
    return hd_parse_op(p, HD_AST_ASSIGN, op, span, target, value);
}

/* FN (expression) or FNDEF (statement, named): a body ending in an
 * expression statement returns its value. */
hd_ast *hd_parse_fn(hd_parser *p, hd_ast_kind kind, hd_span span, const char *name,
                    hd_parse_params *params, hd_ast *body, int compiled) {
    hd_ast_fn *fn = hd_parse_alloc(p, sizeof *fn);
    hd_ast *n = hd_parse_node(p, kind, span);
    if (!fn || !n) return NULL;
    fn->name = name;
    fn->body = body;
    fn->compiled = compiled;
    if (params) {
        fn->params = params->items;
        fn->nparams = params->n;
        fn->rest = params->rest;
    }
    fn->expr_body = body->n > 0 && body->items[body->n - 1]->kind == HD_AST_EXPR;
    n->fn = fn;
    n->name = kind == HD_AST_FNDEF ? name : NULL;
    return hd_parse_done(p, n);
}

hd_ast *hd_parse_import(hd_parser *p, hd_span span, const hd_lex_value *what, int is_path,
                        const char *alias) {
    hd_ast *n = hd_parse_node(p, HD_AST_IMPORT, span);
    if (!n) return NULL;
    if (what->fstr) hd_parse_error(p, span, "an import path is a plain string, not an f-string");
    n->str = what->s;
    n->slen = what->len;
    n->is_path = is_path;
    n->name = alias;
    return n;
}

hd_parse_params *hd_parse_param_add(hd_parser *p, hd_parse_params *ps, const char *name,
                                    hd_ast *def, hd_span span) {
    if (!ps && !(ps = hd_parse_alloc(p, sizeof *ps))) return NULL;
    if (ps->rest)
        hd_parse_error(p, span, "parameter '%s' after *%s: the *parameter comes last", name,
                       ps->items[ps->n - 1].name);
    for (int i = 0; i < ps->n; i++)
        if (strcmp(ps->items[i].name, name) == 0)
            hd_parse_error(p, span, "duplicate parameter '%s'", name);
    if (!def && ps->has_default)
        hd_parse_error(p, span, "parameter '%s' without a default follows one with a default",
                       name);
    if (ps->n == ps->cap) {
        int cap = ps->cap ? ps->cap * 2 : 4;
        hd_ast_param *items = hd_parse_alloc(p, (size_t)cap * sizeof *items);
        if (!items) return NULL;
        if (ps->n) memcpy(items, ps->items, (size_t)ps->n * sizeof *items);
        ps->items = items;
        ps->cap = cap;
    }
    ps->items[ps->n].name = name;
    ps->items[ps->n].def = def;
    ps->items[ps->n].span = span;
    ps->n++;
    ps->has_default |= def != NULL;
    return ps;
}

hd_parse_params *hd_parse_param_rest(hd_parser *p, hd_parse_params *ps, const char *name,
                                     hd_span span) {
    int had_default = ps ? ps->has_default : 0;
    if (ps) ps->has_default = 0; /* *name takes no default, and needs none */
    ps = hd_parse_param_add(p, ps, name, NULL, span);
    if (!ps) return NULL;
    ps->has_default = had_default;
    ps->rest = 1;
    return ps;
}

hd_ast *hd_parse_splat(hd_parser *p, hd_span span, hd_ast *list) {
    hd_ast *n = hd_parse_named(p, HD_AST_ARG, NULL, span, list);
    if (n) n->op = HD_TOK_STAR;
    return n;
}

void hd_parse_no_splat(hd_parser *p, hd_parse_list *args, const char *what) {
    for (int i = 0; args && i < args->n; i++)
        if (args->items[i] && args->items[i]->kind == HD_AST_ARG &&
            args->items[i]->op == HD_TOK_STAR)
            hd_parse_error(p, args->items[i]->span, "%s takes no *list argument", what);
}

hd_ast *hd_parse_grad_ctx(hd_parser *p, hd_span span, hd_parse_list *args, hd_ast *body) {
    int n = args ? args->n : 0;
    if (!body) {
        if (n)
            hd_parse_error(p, span,
                           "grad_context(ctx) needs a block on the same line: grad_context(ctx) { "
                           "... } enters ctx, and grad_context() makes a new context");
        hd_ast *callee = hd_parse_named(p, HD_AST_NAME, "grad_context", span, NULL);
        return callee ? hd_parse_mk(p, HD_AST_CALL, span, callee, NULL, NULL) : NULL;
    }
    if (n != 1 || args->items[0]->name)
        hd_parse_error(p, span,
                       "grad_context(ctx) { } takes one argument: a context made by "
                       "grad_context()");
    hd_ast *g = hd_parse_node(p, HD_AST_GRAD_CTX, span);
    if (!g) return NULL;
    g->a = n ? args->items[0]->a : NULL;
    g->body = body;
    return hd_parse_done(p, g);
}

hd_ast *hd_parse_with_strategy(hd_parser *p, hd_span span, hd_parse_list *args, hd_ast *body) {
    int n = args ? args->n : 0;
    hd_parse_no_splat(p, args, "with_strategy(...)");
    if (n != 1 || args->items[0]->name)
        hd_parse_error(p, span,
                       "with_strategy(s) { } takes one argument: a strategy (strategy.training(), "
                       "...) or a preset's name");
    hd_ast *w = hd_parse_node(p, HD_AST_WITH_STRATEGY, span);
    if (!w) return NULL;
    w->a = n ? args->items[0]->a : NULL;
    w->body = body;
    return hd_parse_done(p, w);
}

void hd_parse_check_args(hd_parser *p, hd_parse_list *args, int named_only) {
    int named = 0;
    for (int i = 0; args && i < args->n; i++) {
        hd_ast *a = args->items[i];
        if (!a->name) {
            if (named_only)
                hd_parse_error(p, a->span,
                               "compiled options are named: compiled(compiler = "
                               "\"llvm\", device = \"cpu\")");
            else if (named)
                hd_parse_error(p, a->span, "positional argument after a named argument");
            continue;
        }
        named = 1;
        for (int j = 0; j < i; j++)
            if (args->items[j]->name && strcmp(args->items[j]->name, a->name) == 0) {
                hd_parse_error(p, a->span, "argument '%s' given twice", a->name);
                break;
            }
    }
}

/* ---- dump ---- */

typedef struct hd_dump {
    char *buf;
    size_t n, len;
} hd_dump;

static void hd_dump_raw(hd_dump *d, const char *s, size_t k) {
    if (d->len < d->n) {
        size_t room = d->n - 1 - d->len;
        memcpy(d->buf + d->len, s, k < room ? k : room);
    }
    d->len += k;
}

static void hd_dump_s(hd_dump *d, const char *s) {
    hd_dump_raw(d, s, strlen(s));
}

static void hd_dump_f(hd_dump *d, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0) hd_dump_raw(d, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

static void hd_dump_str(hd_dump *d, const char *s, size_t n) {
    hd_dump_s(d, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            hd_dump_f(d, "\\%c", c);
        else if (c == '\n')
            hd_dump_s(d, "\\n");
        else if (c == '\t')
            hd_dump_s(d, "\\t");
        else if (c < 0x20 || c == 0x7f)
            hd_dump_f(d, "\\x%02x", c);
        else
            hd_dump_raw(d, (const char *)&c, 1);
    }
    hd_dump_s(d, "\"");
}

/* The shortest %g form that reads back as the same double. */
static void hd_dump_float(hd_dump *d, double v) {
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v) break;
    }
    hd_dump_s(d, tmp);
}

static const char *hd_dump_op(int op) {
    static const char *const names[] = {
        "+",  "-", "*",  "/",  "%",   "@", "**", "==", "!=", "<",
        "<=", ">", ">=", "..", "not", "=", "+=", "-=", "*=", "/=",
    };
    if (op >= HD_TOK_PLUS && op <= HD_TOK_SLASH_ASSIGN) return names[op - HD_TOK_PLUS];
    return "?";
}

static const char *const hd_dump_names[HD_AST_KIND_COUNT] = {
    [HD_AST_LIST] = "list",
    [HD_AST_DICT] = "dict",
    [HD_AST_PAIR] = "pair",
    [HD_AST_UNARY] = "unary",
    [HD_AST_BINARY] = "binary",
    [HD_AST_AND] = "and",
    [HD_AST_OR] = "or",
    [HD_AST_CALL] = "call",
    [HD_AST_ARG] = "arg",
    [HD_AST_INDEX] = "index",
    [HD_AST_SLICE] = "slice",
    [HD_AST_MEMBER] = "member",
    [HD_AST_FN] = "fn",
    [HD_AST_SCRIPT] = "script",
    [HD_AST_BLOCK] = "block",
    [HD_AST_EXPR] = "expr",
    [HD_AST_LET] = "let",
    [HD_AST_ASSIGN] = "assign",
    [HD_AST_IF] = "if",
    [HD_AST_WHILE] = "while",
    [HD_AST_FOR] = "for",
    [HD_AST_BREAK] = "break",
    [HD_AST_CONTINUE] = "continue",
    [HD_AST_RETURN] = "return",
    [HD_AST_FNDEF] = "fndef",
    [HD_AST_CLASS] = "class",
    [HD_AST_IMPORT] = "import",
    [HD_AST_NO_GRAD] = "no_grad",
    [HD_AST_GRAD_CTX] = "grad_context",
    [HD_AST_WITH_STRATEGY] = "with_strategy",
    [HD_AST_COMPILED] = "compiled",
    [HD_AST_PROGRAM] = "program",
    [HD_AST_COMP] = "comprehension",
    [HD_AST_COMP_PUSH] = "push",
    [HD_AST_TRY] = "try",
    [HD_AST_THROW] = "throw",
};

static void hd_dump_node(hd_dump *d, const hd_ast *n);

static void hd_dump_child(hd_dump *d, const hd_ast *n) {
    hd_dump_s(d, " ");
    if (n)
        hd_dump_node(d, n);
    else
        hd_dump_s(d, "_");
}

/* fn payload: NAME|_ (PARAMS) [compiled] [expr] BODY */
static void hd_dump_fn(hd_dump *d, const hd_ast_fn *fn) {
    hd_dump_s(d, " ");
    hd_dump_s(d, fn->name ? fn->name : "_");
    hd_dump_s(d, " (");
    for (int i = 0; i < fn->nparams; i++) {
        if (i) hd_dump_s(d, " ");
        if (fn->params[i].def) hd_dump_s(d, "(");
        if (fn->rest && i == fn->nparams - 1) hd_dump_s(d, "*");
        hd_dump_s(d, fn->params[i].name);
        if (fn->params[i].def) {
            hd_dump_child(d, fn->params[i].def);
            hd_dump_s(d, ")");
        }
    }
    hd_dump_s(d, ")");
    if (fn->compiled) hd_dump_s(d, " compiled");
    if (fn->expr_body) hd_dump_s(d, " expr");
    hd_dump_child(d, fn->body);
}

static int hd_dump_leaf(hd_dump *d, const hd_ast *n) {
    switch (n->kind) {
    case HD_AST_NONE: hd_dump_s(d, "none"); return 1;
    case HD_AST_TRUE: hd_dump_s(d, "true"); return 1;
    case HD_AST_FALSE: hd_dump_s(d, "false"); return 1;
    case HD_AST_ELLIPSIS: hd_dump_s(d, "..."); return 1;
    case HD_AST_INT: hd_dump_f(d, "(int %lld)", (long long)n->ival); return 1;
    case HD_AST_FLOAT:
        hd_dump_s(d, "(float ");
        hd_dump_float(d, n->fval);
        hd_dump_s(d, ")");
        return 1;
    case HD_AST_STR:
        hd_dump_s(d, "(str ");
        hd_dump_str(d, n->str, n->slen);
        hd_dump_s(d, ")");
        return 1;
    case HD_AST_NAME:
        hd_dump_s(d, "(name ");
        hd_dump_s(d, n->name ? n->name : "?");
        hd_dump_s(d, ")");
        return 1;
    default: return 0;
    }
}

static void hd_dump_node(hd_dump *d, const hd_ast *n) {
    if (hd_dump_leaf(d, n)) return;
    const char *kind = n->kind < HD_AST_KIND_COUNT ? hd_dump_names[n->kind] : NULL;
    hd_dump_s(d, "(");
    hd_dump_s(d, kind ? kind : "?");
    if (n->kind == HD_AST_ARG && n->op == HD_TOK_STAR) hd_dump_s(d, " *");
    if (n->kind == HD_AST_UNARY || n->kind == HD_AST_BINARY || n->kind == HD_AST_ASSIGN) {
        hd_dump_s(d, " ");
        hd_dump_s(d, hd_dump_op(n->op));
    }
    if (n->kind == HD_AST_IMPORT) {
        hd_dump_s(d, " ");
        if (n->is_path)
            hd_dump_str(d, n->str ? n->str : "", n->slen);
        else
            hd_dump_s(d, n->str ? n->str : "?");
    }
    if (n->kind == HD_AST_MEMBER) {
        hd_dump_child(d, n->a);
        hd_dump_s(d, " ");
        hd_dump_s(d, n->name ? n->name : "?");
        hd_dump_s(d, ")");
        return;
    }
    if (n->name && n->kind != HD_AST_FNDEF) {
        hd_dump_s(d, " ");
        hd_dump_s(d, n->name);
    }
    if (n->fn) hd_dump_fn(d, n->fn);
    if (n->kind == HD_AST_SLICE) {
        hd_dump_child(d, n->a);
        hd_dump_child(d, n->b);
        hd_dump_child(d, n->c);
    } else {
        if (n->a) hd_dump_child(d, n->a);
        if (n->b) hd_dump_child(d, n->b);
    }
    for (int i = 0; i < n->n; i++) hd_dump_child(d, n->items[i]);
    if (n->body) hd_dump_child(d, n->body);
    if (n->kind != HD_AST_SLICE && n->c) hd_dump_child(d, n->c);
    hd_dump_s(d, ")");
}

size_t hd_ast_dump(char *buf, size_t n, const hd_ast *node) {
    hd_dump d = {buf, n, 0};
    if (node)
        hd_dump_node(&d, node);
    else
        hd_dump_s(&d, "_");
    if (n) buf[d.len < n ? d.len : n - 1] = 0;
    return d.len;
}

/* ---- diagnostics ---- */

/* Line `line` (1-based) of a NUL-terminated source, without its newline;
 * "" past the end. */
static const char *hd_diag_line(const char *source, int line, size_t *len) {
    const char *s = source ? source : "";
    for (int i = 1; i < line && s; i++) {
        s = strchr(s, '\n');
        if (s) s++;
    }
    if (!s) s = "";
    *len = strcspn(s, "\n");
    if (*len > 0 && s[*len - 1] == '\r') (*len)--;
    return s;
}

/* A long line is shown as a window of this many bytes around the column,
 * with "..." where it is cut, so that the caret stays in the message. */
enum { HD_DIAG_WIDTH = 160, HD_DIAG_BEFORE = 60 };

static int hd_diag_cont(char c) { /* a UTF-8 continuation byte */
    return ((unsigned char)c & 0xC0) == 0x80;
}

/* The source line, or the window [from, to) of it, then '^' under column
 * `col` and '~' to `end` (both 1-based, inclusive); the padding copies the
 * line's tabs so the caret lines up under them. */
static void hd_diag_source(hd_dump *d, const char *line, size_t len, const hd_span *span) {
    size_t col = span->col > 0 ? (size_t)span->col - 1 : 0;
    if (col > len) col = len;
    size_t end =
        span->end_line > span->line ? len : (size_t)(span->end_col > 0 ? span->end_col : 0);
    size_t from = 0, to = len;
    if (len > HD_DIAG_WIDTH) {
        from = col > HD_DIAG_BEFORE ? col - HD_DIAG_BEFORE : 0;
        while (from > 0 && hd_diag_cont(line[from])) from--;
        to = from + HD_DIAG_WIDTH < len ? from + HD_DIAG_WIDTH : len;
        while (to < len && hd_diag_cont(line[to])) to++;
    }
    if (end > to) end = to;
    hd_dump_s(d, "  ");
    if (from) hd_dump_s(d, "...");
    hd_dump_raw(d, line + from, to - from);
    if (to < len) hd_dump_s(d, "...");
    hd_dump_s(d, "\n  ");
    if (from) hd_dump_s(d, "   ");
    for (size_t i = from; i < col; i++) hd_dump_raw(d, line[i] == '\t' ? "\t" : " ", 1);
    hd_dump_s(d, "^");
    for (size_t i = col + 1; i < end; i++) hd_dump_s(d, "~");
}

/* "chunk:line:col: kind: message", then the source line and the caret
 * line, each indented by two spaces. */
size_t hd_diag_format(char *buf, size_t n, const char *chunk, const char *source,
                      const hd_span *span, const char *kind, const char *message) {
    hd_dump d = {buf, n, 0};
    size_t len;
    const char *line = hd_diag_line(source, span->line, &len);
    hd_dump_s(&d, chunk ? chunk : "<input>");
    hd_dump_f(&d, ":%d:%d: ", span->line, span->col);
    hd_dump_s(&d, kind ? kind : "error");
    hd_dump_s(&d, ": ");
    hd_dump_s(&d, message ? message : "");
    hd_dump_s(&d, "\n");
    hd_diag_source(&d, line, len, span);
    hd_dump_s(&d, "\n");
    if (n) buf[d.len < n ? d.len : n - 1] = 0;
    return d.len;
}
