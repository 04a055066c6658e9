/* ast: the syntax tree the parser builds and the resolver annotates.
 *
 * Every node carries its source span. Nodes, their arrays and their strings
 * live in one arena per parse (hd_ast_arena), freed in one call. The parser
 * fills the syntax fields; the resolver fills the fields marked
 * "resolver:" (slots), and the evaluator only reads. */
#ifndef HD_AST_H
#define HD_AST_H

#include <stddef.h>
#include <stdint.h>

#include "hd_base.h"

typedef struct hd_span {
    int line, col;         /* 1-based start */
    int end_line, end_col; /* 1-based, inclusive end */
} hd_span;

typedef enum {
    /* expressions */
    HD_AST_NONE,
    HD_AST_TRUE,
    HD_AST_FALSE,
    HD_AST_INT,    /* ival */
    HD_AST_FLOAT,  /* fval */
    HD_AST_STR,    /* str, slen (escapes already decoded; may hold NUL bytes) */
    HD_AST_NAME,   /* name; resolver: ref */
    HD_AST_LIST,   /* items[n] */
    HD_AST_DICT,   /* items[n] are HD_AST_PAIR */
    HD_AST_PAIR,   /* a: key (HD_AST_STR for `b:` and `"b":`), b: value */
    HD_AST_UNARY,  /* op (HD_TOK_MINUS, HD_TOK_PLUS, HD_TOK_NOT), a */
    HD_AST_BINARY, /* op (HD_TOK_PLUS ... HD_TOK_RANGE, comparisons), a, b */
    HD_AST_AND,    /* a, b: short-circuit */
    HD_AST_OR,     /* a, b: short-circuit */
    HD_AST_CALL,   /* a: callee, items[n]: arguments (HD_AST_ARG) */
    HD_AST_ARG,    /* name (NULL if positional), a: value; op HD_TOK_STAR: `*list`, its items */
    HD_AST_INDEX,  /* a: object, items[n]: index parts (expressions, HD_AST_SLICE, HD_AST_ELLIPSIS) */
    HD_AST_SLICE,  /* a, b, c: start, stop, step, each may be NULL */
    HD_AST_ELLIPSIS,
    HD_AST_MEMBER, /* a: object, name */
    HD_AST_FN,     /* fn expression or definition: see hd_ast_fn in `fn` */
    HD_AST_SCRIPT, /* script(args) { body }: items[n] args (HD_AST_ARG), body */

    /* statements */
    HD_AST_BLOCK,    /* items[n] statements; resolver: nslots (locals declared in it) */
    HD_AST_EXPR,     /* a: expression statement */
    HD_AST_LET,      /* name, a: value (may be NULL: `let x` binds none); resolver: ref */
    HD_AST_ASSIGN,   /* op (HD_TOK_ASSIGN, HD_TOK_PLUS_ASSIGN, ...), a: target (NAME, MEMBER or INDEX), b: value */
    HD_AST_IF,       /* a: cond, body: then block, c: else (BLOCK, IF, or NULL) */
    HD_AST_WHILE,    /* a: cond, body */
    HD_AST_FOR,      /* name: loop variable, a: iterable, body; resolver: ref of the variable */
    HD_AST_BREAK,
    HD_AST_CONTINUE,
    HD_AST_RETURN,   /* a: value or NULL */
    HD_AST_FNDEF,    /* name, fn: the function (a named `fn` statement); resolver: ref */
    HD_AST_CLASS,    /* name, items[n]: methods (HD_AST_FNDEF), a: base (NULL: none); resolver: ref */
    HD_AST_IMPORT,   /* str: module name or path, name: alias (the binding); is_path; resolver: ref */
    HD_AST_NO_GRAD,  /* body */
    HD_AST_GRAD_CTX, /* a: the context of grad_context(ctx) { } (NULL: a new one), body */
    HD_AST_WITH_STRATEGY, /* a: the strategy of with_strategy(s) { }, body */
    HD_AST_COMPILED, /* items[n]: options (HD_AST_ARG), body: compiled { } block */
    HD_AST_PROGRAM,  /* items[n]: top-level statements; resolver: nslots (globals of the chunk) */

    /* a list comprehension [e for x in it if c], as the parser builds it */
    HD_AST_COMP,      /* expression; a: the for statement that fills the list or dict (op) */
    HD_AST_COMP_PUSH, /* statement in that for's body; a: the element, pushed onto the list,
                         or the key, b its value, set in the dict */

    /* errors as values */
    HD_AST_TRY,   /* body: try block, c: catch block, name: its variable (NULL: none); resolver: ref */
    HD_AST_THROW, /* a: a message string or a caught Error */
    HD_AST_KIND_COUNT
} hd_ast_kind;

/* HD_AST_COMP's op: what the comprehension makes. */
enum { HD_COMP_LIST, HD_COMP_DICT };

/* How a name is reached at run time, decided by the resolver. */
typedef enum {
    HD_REF_UNRESOLVED,
    HD_REF_LOCAL,   /* frame slot `index` of the current function */
    HD_REF_CELL,    /* frame slot `index` holds a cell (the variable is captured) */
    HD_REF_UPVALUE, /* the closure's captured cell `index` */
    HD_REF_GLOBAL,  /* module global slot `index` */
    HD_REF_BUILTIN, /* builtin `index` of the VM's builtin table */
} hd_ref_kind;

typedef struct hd_ref {
    hd_ref_kind kind;
    int index;
} hd_ref;

typedef struct hd_ast hd_ast;

typedef struct hd_ast_param {
    const char *name;
    hd_ast *def; /* default value expression, or NULL */
    hd_span span;
} hd_ast_param;

/* Where an upvalue of a closure comes from when the closure is created. */
typedef struct hd_ast_capture {
    int from_parent_cell; /* 1: the enclosing frame's slot `index` (a cell); 0: its upvalue `index` */
    int index;
} hd_ast_capture;

typedef struct hd_ast_fn {
    const char *name; /* NULL for an anonymous fn */
    hd_ast_param *params;
    int nparams;
    hd_ast *body;       /* HD_AST_BLOCK */
    int compiled;       /* `compiled fn` */
    int expr_body;      /* body's last statement is an expression whose value is returned */
    int rest;           /* the last parameter is `*name`: the extra positional arguments, a list */
    /* resolver: */
    int nslots;         /* frame size: parameters first (slots 0..nparams-1), then locals */
    hd_ast_capture *captures;
    int ncaptures;
    unsigned char *param_is_cell; /* nparams flags: a captured parameter is boxed on entry */
} hd_ast_fn;

struct hd_ast {
    hd_ast_kind kind;
    hd_span span;
    int op;       /* token kind for UNARY, BINARY, ASSIGN */
    int n;        /* number of items */
    int is_path;  /* IMPORT: str is a path ("lib/x.hodu"), not a module name */
    int64_t ival;
    double fval;
    const char *name; /* NAME, MEMBER, ARG, LET, FOR, FNDEF, CLASS, IMPORT alias */
    const char *str;
    size_t slen;
    hd_ast *a, *b, *c;
    hd_ast *body;
    hd_ast **items;
    hd_ast_fn *fn;
    hd_ref ref;   /* resolver */
    int nslots;   /* resolver: BLOCK, PROGRAM */
    int slot0;    /* resolver, BLOCK: the first of its nslots slots (released at its end) */
    /* resolver, BLOCK: the slots declared in it that hold cells (captured
     * variables); each entry to the block makes fresh ones, so closures
     * made in different loop iterations see different variables. */
    int *cells;
    int ncells;
    int nhoist;      /* resolver, BLOCK and PROGRAM: FNDEF and CLASS statements, bound at entry */
    int frame_slots; /* resolver, PROGRAM: frame size for the top level's block-local variables */
    void *cache;     /* evaluator: a STR literal's string object, made on first use */
};

/* Token kinds the parser and evaluator share (operators in ops). */
typedef enum {
    HD_TOK_EOF = 0,
    HD_TOK_PLUS = 256,
    HD_TOK_MINUS,
    HD_TOK_STAR,
    HD_TOK_SLASH,
    HD_TOK_PERCENT,
    HD_TOK_AT,
    HD_TOK_POW,
    HD_TOK_EQ,
    HD_TOK_NE,
    HD_TOK_LT,
    HD_TOK_LE,
    HD_TOK_GT,
    HD_TOK_GE,
    HD_TOK_RANGE,
    HD_TOK_NOT,
    HD_TOK_ASSIGN,
    HD_TOK_PLUS_ASSIGN,
    HD_TOK_MINUS_ASSIGN,
    HD_TOK_STAR_ASSIGN,
    HD_TOK_SLASH_ASSIGN,
    HD_TOK_FLOORDIV, /* // */
    HD_TOK_IN,       /* x in c */
    HD_TOK_NOT_IN,   /* x not in c */
} hd_tok_op;

/* An arena: blocks of memory from the context's allocator, freed at once. */
typedef struct hd_ast_arena hd_ast_arena;
hd_ast_arena *hd_ast_arena_new(hd_ctx *ctx);
void *hd_ast_arena_alloc(hd_ast_arena *a, size_t n); /* zeroed; NULL on OOM */
void hd_ast_arena_free(hd_ast_arena *a);

/* One diagnostic (syntax or name error) with its span. */
typedef struct hd_diag {
    hd_span span;
    char *message;
} hd_diag;

/* The result of parsing one chunk of source. */
typedef struct hd_parse {
    hd_ast_arena *arena;
    hd_ast *program;     /* HD_AST_PROGRAM, or NULL when there were errors */
    hd_diag *diags;      /* every error found, in source order (arena memory) */
    int ndiags;
    int incomplete;      /* the input ended inside an open construct: the REPL asks for more */
    const char *source;  /* the text parsed (borrowed) */
    const char *chunk;   /* file name or "<stdin>", "-e", ... (borrowed) */
} hd_parse;

/* Parse a whole chunk. Returns HD_OK, HD_ERR_SYNTAX (diags filled), or
 * HD_ERR_MEMORY. Recovers after an error and reports several in one run.
 * The result is freed with hd_parse_free. */
hd_status hd_parse_source(hd_ctx *ctx, const char *source, size_t len, const char *chunk,
                          hd_parse *out);
void hd_parse_free(hd_parse *p);

/* Print "file:line:col: error: message", the source line and a caret line
 * under the span, into buf (always terminated). Returns the length. */
size_t hd_diag_format(char *buf, size_t n, const char *chunk, const char *source,
                      const hd_span *span, const char *kind, const char *message);

/* Debug dump as an S-expression (tests). */
size_t hd_ast_dump(char *buf, size_t n, const hd_ast *node);

#endif
