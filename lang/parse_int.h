/* parse_int: what the lexer (lexer.re), the grammar (parser.y), the node
 * constructors (ast.c) and the driver (parse.c) share. Not part of the AST
 * contract: the resolver and the evaluator only see ast.h.
 *
 * Memory: every node, list, string and diagnostic lives in the parse's
 * arena. A failed allocation sets `oom`; the grammar then stops with
 * YYNOMEM and hd_parse_source returns HD_ERR_MEMORY. */
#ifndef HD_PARSE_INT_H
#define HD_PARSE_INT_H

#include <stdarg.h>

#include "ast.h"

/* Deepest nesting of brackets and of syntax tree nodes a chunk may have;
 * deeper input is the error "expression nested too deeply", so recursive
 * walks over a tree (dump, resolver, evaluator) stay within the C stack. */
#define HD_PARSE_MAX_DEPTH  1000
#define HD_PARSE_MAX_ERRORS 20

/* A {field} of an f-string: its expression's text (in the lexer's copy of
 * the source), where it starts, and its conversion ('r' for !r, 's' for
 * !s, 0 for none). */
typedef struct hd_lex_field {
    const char *text;
    size_t len;
    int line, col;
    char conv;
} hd_lex_field;

/* The value a token carries to the grammar. */
typedef struct hd_lex_value {
    const char *s; /* NAME: the name; STRING: decoded bytes (arena, NUL-terminated) */
    size_t len;
    int64_t i; /* INT */
    double f;  /* FLOAT */
    int big;   /* INT: the literal is 9223372036854775808, valid only after a unary minus */
    /* STRING from f"...": s is the format string (each field "{}" or
     * "{:spec}", literal braces doubled), fields its expressions (arena) */
    int fstr, nfields;
    hd_lex_field *fields;
} hd_lex_value;

/* The kind of a comment token, which only hd_lex_raw hands out. */
#define HD_LEX_COMMENT 100000

typedef struct hd_lex_token {
    int kind; /* a Bison token kind (HD_T_...) */
    hd_span span;
    hd_lex_value v;
    const unsigned char *text; /* the token's source bytes */
    size_t text_len;
    int synthetic; /* the NEWLINE made at the end of input */
} hd_lex_token;

/* The lexer's state: the source (an arena copy ending in a NUL sentinel),
 * the re2c cursors, the open brackets (newlines inside ( and [ are
 * dropped), and one token of look-ahead used to drop a newline before
 * `}` `)` `]` `else` and `.`. */
typedef struct hd_lexer {
    const unsigned char *src, *cur, *lim, *tok, *mar, *bol;
    int line;
    int depth;
    unsigned char open[HD_PARSE_MAX_DEPTH];
    int prev;        /* kind of the last token handed out; -1 before the first */
    int eof_newline; /* the synthetic NEWLINE before end of input was handed out */
    int has_pending;
    hd_lex_token pending;
    hd_lex_token last; /* the last token handed out (the parser's look-ahead) */
    int keep_comments; /* hd_lex_raw: comments are tokens (HD_LEX_COMMENT) */
    int fstr;          /* scanning an f-string: 1, or 2 after an error in a field */
    hd_lex_field *fields; /* its fields so far (context memory) */
    int nfields, cap_fields;
    char *scratch;     /* string decoding buffer (context memory) */
    size_t scratch_cap, scratch_len;
} hd_lexer;

/* A growing array of nodes (arena memory). */
typedef struct hd_parse_list {
    hd_ast **items;
    int n, cap;
} hd_parse_list;

/* A growing array of parameters; `has_default` is set once one has a default. */
typedef struct hd_parse_params {
    hd_ast_param *items;
    int n, cap;
    int has_default;
    int rest; /* the last one is `*name` */
} hd_parse_params;

typedef struct hd_parser {
    hd_ctx *ctx;
    hd_ast_arena *arena;
    hd_lexer lex;
    hd_diag *diags;
    int ndiags, cap_diags;
    int incomplete; /* an error at the end of input, before any other error */
    int abort;      /* stop: the lexer hands out end of input from now on */
    int oom;        /* an allocation failed */
    int too_deep;   /* "nested too deeply" was reported */
    int fdepth;     /* f-string fields this parse is nested in */
    hd_ast *program;
} hd_parser;

/* Diagnostics (ast.c). hd_parse_error formats into the arena; past
 * HD_PARSE_MAX_ERRORS it records nothing more and sets `abort`. */
void hd_parse_error(hd_parser *p, hd_span span, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void *hd_parse_alloc(hd_parser *p, size_t n);
char *hd_parse_strdup(hd_parser *p, const char *s, size_t n);

/* Node constructors (ast.c). Each returns NULL only when memory ran out. A node
 * is finished by hd_parse_done, which records its height, reports a tree
 * nested too deeply and an integer literal too large that no minus took. */
hd_ast *hd_parse_node(hd_parser *p, hd_ast_kind kind, hd_span span);
hd_ast *hd_parse_done(hd_parser *p, hd_ast *n);
hd_ast *hd_parse_mk(hd_parser *p, hd_ast_kind kind, hd_span span, hd_ast *a, hd_ast *b, hd_ast *c);
hd_ast *hd_parse_op(hd_parser *p, hd_ast_kind kind, int op, hd_span span, hd_ast *a, hd_ast *b);
hd_ast *hd_parse_unary(hd_parser *p, int op, hd_span span, hd_ast *a);
hd_ast *hd_parse_named(hd_parser *p, hd_ast_kind kind, const char *name, hd_span span, hd_ast *a);
hd_ast *hd_parse_int(hd_parser *p, const hd_lex_value *v, hd_span span);
hd_ast *hd_parse_float(hd_parser *p, double f, hd_span span);
hd_ast *hd_parse_str(hd_parser *p, const hd_lex_value *v, hd_span span);
/* f"text {expr:spec} {expr!r}": "text {:spec} {}".format(expr, repr(expr))
 * (fstring.c); each field's expression parsed in place, its errors at
 * their columns. A plain string when there is no field. */
hd_ast *hd_parse_fstring(hd_parser *p, const hd_lex_value *v, hd_span span);
hd_ast *hd_parse_items(hd_parser *p, hd_ast *n, hd_parse_list *l);
hd_ast *hd_parse_assign(hd_parser *p, int op, hd_span span, hd_ast *target, hd_ast *value);
hd_ast *hd_parse_block(hd_parser *p, hd_span span, hd_parse_list *stmts);
/* [elem for name in iter] and [elem for name in iter if cond] (cond NULL):
 * an HD_AST_COMP over a for statement whose body pushes elem. */
hd_ast *hd_parse_comp(hd_parser *p, hd_span span, hd_ast *elem, const char *name, hd_ast *iter,
                      hd_ast *cond);
/* {key: value for name in iter if cond}: pair is the entry (hd_parse_entry
 * keeps its key as written). */
hd_ast *hd_parse_dict_comp(hd_parser *p, hd_span span, hd_ast *pair, const char *name,
                           hd_ast *iter, hd_ast *cond);
/* A dict literal's entry: a bare name key becomes its string. */
hd_ast *hd_parse_entry(hd_parser *p, hd_span span, hd_ast *key, hd_ast *value);
hd_ast *hd_parse_fn(hd_parser *p, hd_ast_kind kind, hd_span span, const char *name,
                    hd_parse_params *params, hd_ast *body, int compiled);
hd_ast *hd_parse_import(hd_parser *p, hd_span span, const hd_lex_value *what, int is_path,
                        const char *alias);
hd_parse_list *hd_parse_list_add(hd_parser *p, hd_parse_list *l, hd_ast *item);
hd_parse_params *hd_parse_param_add(hd_parser *p, hd_parse_params *ps, const char *name,
                                    hd_ast *def, hd_span span);
/* `*name`: the last parameter, the extra positional arguments as a list. */
hd_parse_params *hd_parse_param_rest(hd_parser *p, hd_parse_params *ps, const char *name,
                                     hd_span span);
/* `*list` in a call's arguments (an HD_AST_ARG marked HD_TOK_STAR). */
hd_ast *hd_parse_splat(hd_parser *p, hd_span span, hd_ast *list);
/* An error for `*list` where only a call takes it (script(...), ...). */
void hd_parse_no_splat(hd_parser *p, hd_parse_list *args, const char *what);
/* grad_context(args) { body }: enters the context that is the one positional
 * argument. grad_context(args) without a body (body NULL): a call of the
 * prelude's grad_context, which makes a context and takes no arguments. */
hd_ast *hd_parse_grad_ctx(hd_parser *p, hd_span span, hd_parse_list *args, hd_ast *body);
/* with_strategy(s) { body } */
hd_ast *hd_parse_with_strategy(hd_parser *p, hd_span span, hd_parse_list *args, hd_ast *body);
/* Call-like argument lists: positional before named, no name twice;
 * `named_only` for compiled(...) options. */
void hd_parse_check_args(hd_parser *p, hd_parse_list *args, int named_only);

/* The generated parser (parser.y): 0 accepted, 1 syntax errors, 2 out of
 * memory or nested too deeply. */
int hd_yyparse(hd_parser *p);

/* Lexer (lexer.re). */
void hd_lex_init(hd_parser *p, const char *source, size_t len);
void hd_lex_free(hd_parser *p);
void hd_lex_next(hd_parser *p, hd_lex_token *t);
void hd_lex_raw(hd_parser *p, hd_lex_token *t);

#endif
