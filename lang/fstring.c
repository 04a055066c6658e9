/* fstring.c: f-strings. The lexer hands over f"a {x:.2f} b {y!r}" as the
 * format string "a {:.2f} b {}" with the fields' source text; here each
 * field's expression is parsed where it stands (errors at their own line
 * and column), and the whole becomes the call
 * "a {:.2f} b {}".format(x, repr(y)), so an f-string formats exactly as
 * str.format does (format_spec.c). */
#include <string.h>

#include "parse_int.h"
#include "parser.tab.h"

/* Deepest f-string inside an f-string's field: each level is a parse of
 * its own on the C stack. */
enum { HD_FSTRING_MAX_DEPTH = 8 };

/* The field's text as a chunk of its own, preceded by as many spaces as its
 * column, so that its nodes' columns are the source's. */
static char *hd_fstring_source(hd_parser *p, const hd_lex_field *f, size_t *len) {
    size_t pad = (size_t)(f->col - 1);
    char *s = hd_parse_alloc(p, pad + f->len + 1);
    if (!s) return NULL;
    memset(s, ' ', pad);
    memcpy(s + pad, f->text, f->len);
    s[pad + f->len] = 0;
    *len = pad + f->len;
    return s;
}

/* The one expression of a field's parse, or NULL with an error. */
static hd_ast *hd_fstring_expr(hd_parser *p, hd_parser *q, const hd_lex_field *f) {
    hd_span at = {f->line, f->col, f->line, f->col + (int)f->len - 1};
    for (int i = 0; i < q->ndiags; i++)
        hd_parse_error(p, q->diags[i].span, "%s", q->diags[i].message);
    if (q->ndiags > 0 || !q->program) {
        if (q->ndiags == 0) hd_parse_error(p, at, "invalid expression in an f-string field");
        return NULL;
    }
    hd_ast *prog = q->program;
    if (prog->n != 1 || !prog->items[0] || prog->items[0]->kind != HD_AST_EXPR) {
        hd_parse_error(p, at, "an f-string field holds one expression");
        return NULL;
    }
    return prog->items[0]->a;
}

static hd_ast *hd_fstring_field(hd_parser *p, const hd_lex_field *f) {
    hd_span at = {f->line, f->col, f->line, f->col + (int)f->len - 1};
    if (p->fdepth >= HD_FSTRING_MAX_DEPTH) {
        hd_parse_error(p, at, "f-strings nested too deeply");
        return NULL;
    }
    size_t len;
    char *src = hd_fstring_source(p, f, &len);
    hd_parser *q = src ? hd_ctx_calloc(p->ctx, 1, sizeof *q) : NULL;
    if (!q) {
        p->oom = 1;
        return NULL;
    }
    q->ctx = p->ctx;
    q->arena = p->arena;
    q->fdepth = p->fdepth + 1;
    hd_lex_init(q, src, len);
    q->lex.line = f->line;
    hd_yyparse(q);
    hd_lex_free(q);
    hd_ast *e = q->oom ? NULL : hd_fstring_expr(p, q, f);
    if (q->oom) p->oom = 1;
    hd_ctx_free(p->ctx, q, sizeof *q);
    return e;
}

/* conv(e): repr(e) for !r, str(e) for !s. */
static hd_ast *hd_fstring_conv(hd_parser *p, hd_ast *e, char conv) {
    const char *fn = conv == 'r' ? "repr" : "str";
    hd_ast *callee =
        hd_parse_named(p, HD_AST_NAME, hd_parse_strdup(p, fn, strlen(fn)), e->span, NULL);
    hd_ast *arg = callee ? hd_parse_named(p, HD_AST_ARG, NULL, e->span, e) : NULL;
    hd_parse_list *args = arg ? hd_parse_list_add(p, NULL, arg) : NULL;
    hd_ast *call = args ? hd_parse_mk(p, HD_AST_CALL, e->span, callee, NULL, NULL) : NULL;
    return call ? hd_parse_items(p, call, args) : NULL;
}

/* "{{" and "}}" as single braces: the text of an f-string with no field. */
static void hd_fstring_plain(hd_lex_value *v) {
    char *s = (char *)v->s;
    size_t k = 0;
    for (size_t i = 0; i < v->len; i++) {
        s[k++] = s[i];
        if ((s[i] == '{' || s[i] == '}') && i + 1 < v->len && s[i + 1] == s[i]) i++;
    }
    s[k] = 0;
    v->len = k;
}

hd_ast *hd_parse_fstring(hd_parser *p, const hd_lex_value *v, hd_span span) {
    hd_lex_value text = *v;
    if (v->nfields == 0) {
        hd_fstring_plain(&text);
        return hd_parse_str(p, &text, span);
    }
    hd_parse_list *args = hd_parse_list_add(p, NULL, NULL);
    for (int i = 0; args && i < v->nfields; i++) {
        hd_ast *e = hd_fstring_field(p, &v->fields[i]);
        if (!e) {
            if (p->oom) return NULL;
            e = hd_parse_node(p, HD_AST_NONE, span); /* stands in after an error */
        } else if (v->fields[i].conv) {
            e = hd_fstring_conv(p, e, v->fields[i].conv);
        }
        hd_ast *arg = e ? hd_parse_named(p, HD_AST_ARG, NULL, e->span, e) : NULL;
        args = arg ? hd_parse_list_add(p, args, arg) : NULL;
    }
    hd_ast *str = args ? hd_parse_str(p, &text, span) : NULL;
    const char *name = str ? hd_parse_strdup(p, "format", 6) : NULL;
    hd_ast *member = name ? hd_parse_named(p, HD_AST_MEMBER, name, span, str) : NULL;
    hd_ast *call = member ? hd_parse_mk(p, HD_AST_CALL, span, member, NULL, NULL) : NULL;
    return call ? hd_parse_items(p, call, args) : NULL;
}
