/* fmt.c: the canonical layout of Hodu source (see fmt.h).
 *
 * The source is parsed first (a chunk with syntax errors is not formatted),
 * then scanned again into raw tokens with its comments, and written out
 * line by line: the line breaks are the source's, the whitespace is this
 * file's. Indentation follows the open brackets, as gofmt's does:
 *  - a line inside ( or [ is one level deeper than the line that opened the
 *    innermost one; a line that starts with the closing bracket is at the
 *    opener's level;
 *  - a line inside { } (a block, or a dict) is one level deeper than the
 *    statement that opened it;
 *  - a statement's continuation line (after a line that ends in an operator,
 *    or starting with `.`) is one level deeper than the statement.
 * Spaces: around binary operators, `=` and keywords; none inside ( ) and
 * [ ], around `.` `..` and after a unary minus, before `,` `;` `:`, or
 * between a callee and its `(` or `[`; a slice's `:` stands alone, a dict's
 * takes a space after; a one-line block is `{ body }`, a dict `{k: v}`; a
 * comment after code is two spaces away. */
#include <string.h>

#include "fmt.h"
#include "parse_int.h"
#include "parser.tab.h"

typedef struct fmt_tok {
    int kind;
    const char *text;
    size_t len;
    int line;
    const char *bol; /* where the token's line starts */
} fmt_tok;

/* An open bracket: its character, whether a `{` opens a block (not a dict),
 * the level of the lines that close it, and the statement level to restore
 * when it closes. */
typedef struct fmt_open {
    char ch;
    char block;
    int indent;
    int saved_stmt;
} fmt_open;

/* One output line: its code in fmt_state.code, [start, end), and the
 * comment that ends it after code (NULL if none). A verbatim line never
 * has its comment aligned with others. */
typedef struct fmt_row {
    size_t start, end;
    const fmt_tok *comment;
    int verbatim;
} fmt_row;

typedef struct fmt_state {
    hd_ctx *ctx;
    hd_fmt_text *out;
    hd_fmt_text code;
    fmt_row *rows;
    int nrows, cap_rows;
    fmt_tok *toks;
    int ntoks, cap;
    const char *lim; /* the end of the scanned source */
    fmt_open open[HD_PARSE_MAX_DEPTH];
    int depth;
    int prev;       /* the last token that is not a comment, across lines; -1 at the start */
    int prev_unary; /* it was a unary minus or plus */
    int stmt;       /* the level of the statement the current line belongs to */
    int line_indent;
    int oom;
} fmt_state;

/* ---- output ---- */

static void fmt_put_to(fmt_state *f, hd_fmt_text *t, const char *s, size_t n) {
    if (f->oom) return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1) cap *= 2;
        char *p = hd_ctx_realloc(f->ctx, t->s, t->cap, cap);
        if (!p) {
            f->oom = 1;
            return;
        }
        t->s = p;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = 0;
}

/* Phase one writes each line's code to `code` and notes it in a row. */
static void fmt_put(fmt_state *f, const char *s, size_t n) {
    fmt_put_to(f, &f->code, s, n);
}

static void fmt_puts(fmt_state *f, const char *s) {
    fmt_put(f, s, strlen(s));
}

void hd_fmt_text_free(hd_ctx *ctx, hd_fmt_text *t) {
    if (t->s) hd_ctx_free(ctx, t->s, t->cap);
    memset(t, 0, sizeof *t);
}

/* ---- token classes ---- */

/* A token that can end an operand: after it `-` is binary, `(` a call and
 * `[` an index, and `{` opens a block. */
static int fmt_operand_end(int k) {
    switch (k) {
    case HD_T_NAME:
    case HD_T_INT:
    case HD_T_FLOAT:
    case HD_T_STRING:
    case HD_T_TRUE:
    case HD_T_FALSE:
    case HD_T_NONE:
    case HD_T_RPAREN:
    case HD_T_RBRACKET:
    case HD_T_RBRACE: return 1;
    default: return 0;
    }
}

/* After these a line does not end the statement (the lexer's rule), except
 * that an opening bracket or a comma is the bracket's business. */
static int fmt_continues(int k) {
    switch (k) {
    case HD_T_PLUS:
    case HD_T_MINUS:
    case HD_T_STAR:
    case HD_T_SLASH:
    case HD_T_PERCENT:
    case HD_T_FLOORDIV:
    case HD_T_AT:
    case HD_T_POW:
    case HD_T_EQ:
    case HD_T_NE:
    case HD_T_LT:
    case HD_T_LE:
    case HD_T_GT:
    case HD_T_GE:
    case HD_T_RANGE:
    case HD_T_AND:
    case HD_T_OR:
    case HD_T_NOT:
    case HD_T_ASSIGN:
    case HD_T_PLUS_ASSIGN:
    case HD_T_MINUS_ASSIGN:
    case HD_T_STAR_ASSIGN:
    case HD_T_SLASH_ASSIGN:
    case HD_T_COLON:
    case HD_T_DOT:
    case HD_T_IN:
    case HD_T_AS:
    case HD_T_IF:
    case HD_T_WHILE:
    case HD_T_FOR:
    case HD_T_ELSE: return 1;
    default: return 0;
    }
}

static int fmt_is_open(int k) {
    return k == HD_T_LPAREN || k == HD_T_LBRACKET || k == HD_T_LBRACE;
}

static int fmt_is_close(int k) {
    return k == HD_T_RPAREN || k == HD_T_RBRACKET || k == HD_T_RBRACE;
}

static const fmt_open *fmt_top(const fmt_state *f) {
    return f->depth > 0 ? &f->open[f->depth - 1] : NULL;
}

/* ---- indentation ---- */

/* The level of a line that starts with token kind k. */
static int fmt_indent(fmt_state *f, int k) {
    const fmt_open *top = fmt_top(f);
    if (fmt_is_close(k) && top) return top->indent;
    if (top && top->ch != '{') return top->indent + 1;
    int base = top ? top->indent + 1 : 0;
    if (k != HD_T_LBRACE && (k == HD_T_DOT || (f->prev >= 0 && fmt_continues(f->prev))))
        return f->stmt + 1;
    f->stmt = base;
    return base;
}

/* A `{` among statements belongs to the statement, which may have begun
 * lines above (`fn f(a,\n b) {`); one inside ( or [ to its line. */
static void fmt_push(fmt_state *f, const fmt_tok *t) {
    if (f->depth == HD_PARSE_MAX_DEPTH) return;
    const fmt_open *top = fmt_top(f);
    int in_parens = top && top->ch != '{';
    fmt_open *o = &f->open[f->depth++];
    o->ch = t->text[0];
    o->block = o->ch == '{' &&
               (fmt_operand_end(f->prev) || f->prev == HD_T_ELSE || f->prev == HD_T_NO_GRAD ||
                f->prev == HD_T_COMPILED || f->prev == HD_T_GRAD_CONTEXT || f->prev == HD_T_TRY ||
                f->prev == HD_T_WITH_STRATEGY || f->prev == HD_T_CATCH);
    o->indent = o->ch == '{' && !in_parens ? f->stmt : f->line_indent;
    o->saved_stmt = f->stmt;
}

/* Account for token t: brackets, the previous token, unary signs. */
static void fmt_track(fmt_state *f, const fmt_tok *t) {
    if (t->kind == HD_LEX_COMMENT) return;
    if (fmt_is_open(t->kind)) fmt_push(f, t);
    if (fmt_is_close(t->kind) && f->depth > 0) f->stmt = f->open[--f->depth].saved_stmt;
    f->prev_unary = (t->kind == HD_T_MINUS || t->kind == HD_T_PLUS || t->kind == HD_T_STAR) &&
                    !fmt_operand_end(f->prev); /* -x, +x, *list */
    f->prev = t->kind;
}

/* ---- spaces ---- */

/* Spaces between tokens a and b on one line (a already tracked). */
static int fmt_space(const fmt_state *f, const fmt_tok *a, const fmt_tok *b) {
    const fmt_open *top = fmt_top(f);
    int x = a->kind, y = b->kind;
    if (y == HD_LEX_COMMENT) return 2;
    if (y == HD_T_COMMA || y == HD_T_SEMI || y == HD_T_RPAREN || y == HD_T_RBRACKET) return 0;
    if (y == HD_T_RBRACE) return x != HD_T_LBRACE && top && top->block;
    if (x == HD_T_LPAREN || x == HD_T_LBRACKET) return 0;
    if (x == HD_T_LBRACE) return top && top->block;
    if (y == HD_T_COLON) return x == HD_T_COMMA;
    if (x == HD_T_DOT || y == HD_T_DOT || x == HD_T_RANGE || y == HD_T_RANGE) return 0;
    if (x == HD_T_COLON) return !(top && top->ch == '[');
    if (f->prev_unary) return 0;
    if (y == HD_T_LPAREN)
        return !(fmt_operand_end(x) || x == HD_T_GRAD_CONTEXT || x == HD_T_COMPILED ||
                 x == HD_T_SCRIPT || x == HD_T_WITH_STRATEGY);
    if (y == HD_T_LBRACKET) return !fmt_operand_end(x);
    return 1;
}

/* Glued, `..` before a float such as `.5` would scan as `...`. */
static int fmt_space_safe(const fmt_state *f, const fmt_tok *a, const fmt_tok *b) {
    int n = fmt_space(f, a, b);
    if (n == 0 && a->text[a->len - 1] == '.' && b->text[0] == '.') n = 1;
    return n;
}

/* ---- lines ---- */

/* A token's text; a comment's without trailing blanks. */
static size_t fmt_text_len(const fmt_tok *t) {
    size_t n = t->len;
    if (t->kind == HD_LEX_COMMENT)
        while (n > 1 &&
               (t->text[n - 1] == ' ' || t->text[n - 1] == '\t' || t->text[n - 1] == '\r' ||
                t->text[n - 1] == '\f' || t->text[n - 1] == '\v'))
            n--;
    return n;
}

static void fmt_token_text(fmt_state *f, const fmt_tok *t) {
    fmt_put(f, t->text, fmt_text_len(t));
}

static void fmt_row_add(fmt_state *f, size_t start, const fmt_tok *comment, int verbatim) {
    if (f->nrows == f->cap_rows) {
        int cap = f->cap_rows ? f->cap_rows * 2 : 256;
        fmt_row *r = hd_ctx_realloc(f->ctx, f->rows, (size_t)f->cap_rows * sizeof *r,
                                    (size_t)cap * sizeof *r);
        if (!r) {
            f->oom = 1;
            return;
        }
        f->rows = r;
        f->cap_rows = cap;
    }
    fmt_row *r = &f->rows[f->nrows++];
    r->start = start;
    r->end = f->code.len;
    r->comment = comment;
    r->verbatim = verbatim;
}

/* Tokens [i, j) are one source line. A comment after code is left to the
 * row, to be aligned with its neighbours'. */
static void fmt_line(fmt_state *f, int i, int j) {
    size_t start = f->code.len;
    int level = fmt_indent(f, f->toks[i].kind);
    const fmt_tok *comment = NULL;
    f->line_indent = level;
    for (int l = 0; l < level; l++) fmt_puts(f, "    ");
    for (int k = i; k < j; k++) {
        if (k > i && f->toks[k].kind == HD_LEX_COMMENT) {
            comment = &f->toks[k];
            break;
        }
        if (k > i) fmt_put(f, "  ", (size_t)fmt_space_safe(f, &f->toks[k - 1], &f->toks[k]));
        fmt_token_text(f, &f->toks[k]);
        fmt_track(f, &f->toks[k]);
    }
    fmt_row_add(f, start, comment, 0);
}

/* A line kept as written: its bytes up to the newline; its tokens are
 * still tracked. */
static void fmt_line_verbatim(fmt_state *f, int i, int j) {
    const char *b = f->toks[i].bol, *e = b;
    size_t start = f->code.len;
    while (e < f->lim && *e != '\n') e++;
    f->line_indent = fmt_indent(f, f->toks[i].kind);
    for (int k = i; k < j; k++) fmt_track(f, &f->toks[k]);
    fmt_put(f, b, (size_t)(e - b));
    fmt_row_add(f, start, NULL, 1);
}

/* Whether tokens [i, j) are one comment reading `# fmt: <what>`. */
static int fmt_directive(const fmt_state *f, int i, int j, const char *what) {
    const fmt_tok *t = &f->toks[i];
    if (j != i + 1 || t->kind != HD_LEX_COMMENT) return 0;
    size_t n = fmt_text_len(t), w = strlen(what);
    return n == 7 + w && memcmp(t->text, "# fmt: ", 7) == 0 && memcmp(t->text + 7, what, w) == 0;
}

static void fmt_lines(fmt_state *f) {
    int last = 0, verbatim = 0;
    for (int i = 0; i < f->ntoks;) {
        int line = f->toks[i].line, j = i;
        while (j < f->ntoks && f->toks[j].line == line) j++;
        if (last > 0 && line - last > 1) {
            int blanks = verbatim ? line - last - 1 : 1;
            for (int b = 0; b < blanks; b++) fmt_row_add(f, f->code.len, NULL, verbatim);
        }
        if (verbatim && !fmt_directive(f, i, j, "on"))
            fmt_line_verbatim(f, i, j);
        else
            fmt_line(f, i, j);
        if (fmt_directive(f, i, j, "off")) verbatim = 1;
        if (fmt_directive(f, i, j, "on")) verbatim = 0;
        last = line;
        i = j;
    }
}

/* ---- comments after code ---- */

/* Code wider than this keeps its comment two spaces away and is aligned
 * with no other line, so one long line does not push a run's comments far
 * to the right. */
enum { FMT_ALIGN_MAX = 72 };

/* Columns of a row's code (UTF-8 characters). */
static int fmt_width(const fmt_state *f, const fmt_row *r) {
    int w = 0;
    for (size_t i = r->start; i < r->end; i++) w += ((unsigned char)f->code.s[i] & 0xc0) != 0x80;
    return w;
}

static int fmt_aligns(const fmt_state *f, const fmt_row *r) {
    return r->comment && !r->verbatim && fmt_width(f, r) <= FMT_ALIGN_MAX;
}

/* Rows [i, j) with their comments at column `col` (past the widest code). */
static void fmt_rows_write(fmt_state *f, int i, int j, int col) {
    for (int k = i; k < j; k++) {
        const fmt_row *r = &f->rows[k];
        fmt_put_to(f, f->out, f->code.s ? f->code.s + r->start : "", r->end - r->start);
        if (r->comment) {
            int pad = col - fmt_width(f, r);
            for (int p = 0; p < (pad < 2 ? 2 : pad); p++) fmt_put_to(f, f->out, " ", 1);
            fmt_put_to(f, f->out, r->comment->text, fmt_text_len(r->comment));
        }
        fmt_put_to(f, f->out, "\n", 1);
    }
}

/* Consecutive lines that end in comments have them in one column, as
 * gofmt's do. */
static void fmt_rows(fmt_state *f) {
    for (int i = 0; i < f->nrows;) {
        int j = i + 1, col = 0;
        if (fmt_aligns(f, &f->rows[i]))
            while (j < f->nrows && fmt_aligns(f, &f->rows[j])) j++;
        for (int k = i; k < j; k++) {
            int w = fmt_width(f, &f->rows[k]) + 2;
            if (w > col) col = w;
        }
        fmt_rows_write(f, i, j, col);
        i = j;
    }
}

/* ---- tokens ---- */

static int fmt_add(fmt_state *f, const hd_lex_token *t) {
    if (f->ntoks == f->cap) {
        int cap = f->cap ? f->cap * 2 : 256;
        fmt_tok *p =
            hd_ctx_realloc(f->ctx, f->toks, (size_t)f->cap * sizeof *p, (size_t)cap * sizeof *p);
        if (!p) return 0;
        f->toks = p;
        f->cap = cap;
    }
    fmt_tok *o = &f->toks[f->ntoks++];
    o->kind = t->kind;
    o->text = (const char *)t->text;
    o->len = t->text_len;
    o->line = t->span.line;
    o->bol = o->text - (t->span.col - 1);
    return 1;
}

/* Every token of the source but newlines, comments included. */
static hd_status fmt_scan(fmt_state *f, hd_parser *p, const char *source, size_t len) {
    char *copy = hd_parse_alloc(p, len + 1);
    if (!copy) return HD_ERR_MEMORY;
    if (len) memcpy(copy, source, len);
    copy[len] = 0;
    f->lim = copy + len;
    hd_lex_init(p, copy, len);
    hd_status st = HD_OK;
    for (;;) {
        hd_lex_token t;
        hd_lex_raw(p, &t);
        if (t.kind == HD_T_END || p->oom) break;
        if (t.kind == HD_T_NEWLINE) continue;
        if (!fmt_add(f, &t)) {
            st = HD_ERR_MEMORY;
            break;
        }
    }
    hd_lex_free(p);
    return p->oom ? HD_ERR_MEMORY : st;
}

static hd_status fmt_layout(fmt_state *f, const char *source, size_t len) {
    hd_parser *p = hd_ctx_calloc(f->ctx, 1, sizeof *p);
    if (!p) return HD_ERR_MEMORY;
    p->ctx = f->ctx;
    p->arena = hd_ast_arena_new(f->ctx);
    hd_status st = p->arena ? fmt_scan(f, p, source, len) : HD_ERR_MEMORY;
    if (st == HD_OK) fmt_lines(f);
    if (st == HD_OK) fmt_rows(f);
    if (f->oom) st = HD_ERR_MEMORY;
    hd_ast_arena_free(p->arena);
    hd_ctx_free(f->ctx, p, sizeof *p);
    if (f->toks) hd_ctx_free(f->ctx, f->toks, (size_t)f->cap * sizeof *f->toks);
    if (f->rows) hd_ctx_free(f->ctx, f->rows, (size_t)f->cap_rows * sizeof *f->rows);
    hd_fmt_text_free(f->ctx, &f->code);
    return st;
}

/* ---- checks ---- */

static void fmt_diags(fmt_state *f, const hd_parse *ps) {
    char buf[2048];
    for (int i = 0; i < ps->ndiags; i++) {
        size_t n = hd_diag_format(buf, sizeof buf, ps->chunk, ps->source, &ps->diags[i].span,
                                  "error", ps->diags[i].message);
        fmt_put_to(f, f->out, buf, n < sizeof buf ? n : sizeof buf - 1);
    }
}

/* The tree of a parse as text (context memory, *n bytes with the NUL). */
static char *fmt_dump(hd_ctx *ctx, const hd_parse *ps, size_t *n) {
    *n = hd_ast_dump(NULL, 0, ps->program) + 1;
    char *s = hd_ctx_alloc(ctx, *n);
    if (s) hd_ast_dump(s, *n, ps->program);
    return s;
}

/* Whether two parses have the same tree (spans aside). */
static hd_status fmt_same_tree(hd_ctx *ctx, const hd_parse *a, const hd_parse *b, int *same) {
    size_t na, nb;
    char *da = fmt_dump(ctx, a, &na), *db = fmt_dump(ctx, b, &nb);
    *same = da && db && na == nb && memcmp(da, db, na) == 0;
    hd_status st = da && db ? HD_OK : HD_ERR_MEMORY;
    if (da) hd_ctx_free(ctx, da, na);
    if (db) hd_ctx_free(ctx, db, nb);
    return st;
}

static hd_status fmt_verify(hd_ctx *ctx, const hd_parse *before, hd_fmt_text *out,
                            const char *chunk) {
    hd_parse after;
    hd_status st = hd_parse_source(ctx, out->s ? out->s : "", out->len, chunk, &after);
    int same = 0;
    if (st == HD_OK) st = fmt_same_tree(ctx, before, &after, &same);
    hd_parse_free(&after);
    if (st == HD_ERR_MEMORY) return st;
    if (st != HD_OK || !same)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "%s: the formatted text would be a different program (a bug in hodu "
                        "fmt); the file is left as it is",
                        chunk);
    return HD_OK;
}

hd_status hd_fmt_source(hd_ctx *ctx, const char *source, size_t len, const char *chunk,
                        hd_fmt_text *out) {
    memset(out, 0, sizeof *out);
    chunk = chunk ? chunk : "<input>";
    hd_parse before;
    hd_status st = hd_parse_source(ctx, source, len, chunk, &before);
    fmt_state *f = hd_ctx_calloc(ctx, 1, sizeof *f);
    if (!f) st = HD_ERR_MEMORY;
    if (f) {
        f->ctx = ctx;
        f->out = out;
        f->prev = -1;
    }
    if (st == HD_ERR_SYNTAX) fmt_diags(f, &before);
    if (st == HD_OK) st = fmt_layout(f, source, len);
    if (st == HD_OK) st = fmt_verify(ctx, &before, out, chunk);
    if (f && f->oom) st = HD_ERR_MEMORY;
    if (f) hd_ctx_free(ctx, f, sizeof *f);
    hd_parse_free(&before);
    if (st == HD_ERR_MEMORY) {
        hd_fmt_text_free(ctx, out);
        return hd_error(ctx, HD_ERR_MEMORY, "out of memory while formatting %s", chunk);
    }
    return st;
}
