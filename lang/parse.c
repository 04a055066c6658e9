/* parse.c: hd_parse_source and hd_parse_free, the driver around the
 * generated lexer and parser. */
#include <stdio.h>
#include <string.h>

#include "parse_int.h"

/* Diagnostics come from the lexer (ahead of the parser) and the grammar;
 * order them by position, keeping the order of those at one place. */
static void hd_parse_sort_diags(hd_diag *d, int n) {
    for (int i = 1; i < n; i++) {
        hd_diag x = d[i];
        int j = i;
        while (j > 0 && (d[j - 1].span.line > x.span.line ||
                         (d[j - 1].span.line == x.span.line && d[j - 1].span.col > x.span.col))) {
            d[j] = d[j - 1];
            j--;
        }
        d[j] = x;
    }
}

static hd_status hd_parse_run(hd_parser *p, const char *source, size_t len) {
    char *copy = hd_parse_alloc(p, len + 1);
    if (!copy) return HD_ERR_MEMORY;
    if (len) memcpy(copy, source, len);
    copy[len] = 0;
    hd_lex_init(p, copy, len);
    int rc = hd_yyparse(p);
    hd_lex_free(p);
    if (p->oom) return HD_ERR_MEMORY;
    if (p->ndiags == 0 && (rc != 0 || !p->program)) {
        hd_span at = {p->lex.line, 1, p->lex.line, 1};
        hd_parse_error(p, at, "syntax error");
    }
    return p->ndiags > 0 ? HD_ERR_SYNTAX : HD_OK;
}

hd_status hd_parse_source(hd_ctx *ctx, const char *source, size_t len, const char *chunk,
                          hd_parse *out) {
    memset(out, 0, sizeof *out);
    out->source = source;
    out->chunk = chunk;
    hd_parser *p = hd_ctx_alloc(ctx, sizeof *p);
    if (!p) return HD_ERR_MEMORY;
    memset(p, 0, sizeof *p);
    p->ctx = ctx;
    p->arena = hd_ast_arena_new(ctx);
    hd_status st =
        p->arena ? hd_parse_run(p, source ? source : "", source ? len : 0) : HD_ERR_MEMORY;
    if (st == HD_ERR_MEMORY) {
        hd_ast_arena_free(p->arena);
        hd_ctx_free(ctx, p, sizeof *p);
        return hd_error(ctx, HD_ERR_MEMORY, "out of memory while parsing %s",
                        chunk ? chunk : "<input>");
    }
    hd_parse_sort_diags(p->diags, p->ndiags);
    out->arena = p->arena;
    out->diags = p->diags;
    out->ndiags = p->ndiags;
    out->incomplete = p->incomplete;
    out->program = st == HD_OK ? p->program : NULL;
    hd_ctx_free(ctx, p, sizeof *p);
    if (st == HD_ERR_SYNTAX && out->ndiags > 0)
        hd_error(ctx, st, "%s:%d:%d: %s", chunk ? chunk : "<input>", out->diags[0].span.line,
                 out->diags[0].span.col, out->diags[0].message);
    return st;
}

void hd_parse_free(hd_parse *p) {
    if (!p) return;
    hd_ast_arena_free(p->arena);
    p->arena = NULL;
    p->program = NULL;
    p->diags = NULL;
    p->ndiags = 0;
}
