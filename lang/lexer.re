/* lexer.re: Hodu's tokens, scanned by re2c.
 *
 * Reentrant: all state is in the hd_lexer inside the hd_parser. The source
 * is an arena copy ending in a NUL sentinel (re2c's eof rule checks the
 * limit when it reads one, so NUL bytes inside the source are ordinary).
 *
 * Newlines end statements, except where one cannot: a newline is dropped
 *  - inside ( ) and [ ] (but not inside { }, where blocks live),
 *  - after a token that needs something after it (binary operators,
 *    `not`, `=` and its compound forms, `,` `:` `.`, opening brackets, and
 *    the header keywords `if` `else` `while` `for` `in` `as` `try` `catch`),
 *  - before `}` `)` `]` `.` `else` and `catch`, which never start a
 *    statement, so `}` on its own line closes a dict or a block, `} else {`
 *    and `} catch e {` may be split after `}`, and a method chain may start
 *    its lines with `.`.
 * Runs of newlines, blank lines and comment lines give one NEWLINE. At the
 * end of input a NEWLINE is made if the last statement was not ended, so
 * the grammar only ever sees ended statements.
 *
 * A lexical error is recorded and the scan goes on: a bad escape or a
 * number too large still gives its token; a stray character gives the
 * token YYerror, which puts the parser into recovery without a second
 * message. */
#include <locale.h>
#include <stdlib.h>
#include <string.h>

#include "parse_int.h"
#include "parser.tab.h"

/*!re2c
    re2c:define:YYCTYPE = "unsigned char";
    re2c:define:YYCURSOR = "lx->cur";
    re2c:define:YYMARKER = "lx->mar";
    re2c:define:YYLIMIT = "lx->lim";
    re2c:yyfill:enable = 0;
    re2c:eof = 0;

    dec = [0-9]+ ("_" [0-9]+)*;
    hex = "0" [xX] [0-9a-fA-F]+ ("_" [0-9a-fA-F]+)*;
    exp = [eE] [+-]? dec;
    float = dec "." dec exp? | "." dec exp? | dec exp;
    badnum = [0-9] [0-9A-Za-z_]* ("." [0-9] [0-9A-Za-z_]*)?;
    ident = [A-Za-z_] [A-Za-z0-9_]*;
    u8 = [\xc2-\xdf] [\x80-\xbf]
       | "\xe0" [\xa0-\xbf] [\x80-\xbf]
       | [\xe1-\xec\xee\xef] [\x80-\xbf]{2}
       | "\xed" [\x80-\x9f] [\x80-\xbf]
       | "\xf0" [\x90-\xbf] [\x80-\xbf]{2}
       | [\xf1-\xf3] [\x80-\xbf]{3}
       | "\xf4" [\x80-\x8f] [\x80-\xbf]{2};
    uident = [A-Za-z0-9_]* u8 ([A-Za-z0-9_] | u8)*;
*/

static hd_span hd_lex_span(const hd_lexer *lx, const unsigned char *b, const unsigned char *e) {
    hd_span s;
    s.line = s.end_line = lx->line;
    s.col = (int)(b - lx->bol) + 1;
    s.end_col = e > b ? (int)(e - lx->bol) : s.col;
    return s;
}

static int hd_lex_tok(hd_lexer *lx, hd_lex_token *t, int kind) {
    t->kind = kind;
    t->span = hd_lex_span(lx, lx->tok, lx->cur);
    t->text = lx->tok;
    t->text_len = (size_t)(lx->cur - lx->tok);
    return kind;
}

/* A lexical error over the current token. */
static int hd_lex_fail(hd_parser *p, hd_lex_token *t, int kind, const char *msg) {
    hd_lex_tok(&p->lex, t, kind);
    hd_parse_error(p, t->span, "%s", msg);
    return kind;
}

/* ---- numbers ---- */

static int hd_lex_digit(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return c - 'A' + 10;
}

/* An integer in base 10 or 16 (underscores skipped). 2^63 is kept with
 * `big` set: only a unary minus may take it (-9223372036854775808). */
static int hd_lex_int(hd_parser *p, hd_lex_token *t, int base) {
    hd_lexer *lx = &p->lex;
    uint64_t v = 0, limit = (uint64_t)1 << 63;
    hd_lex_tok(lx, t, HD_T_INT);
    for (const unsigned char *s = lx->tok + (base == 16 ? 2 : 0); s < lx->cur; s++) {
        if (*s == '_') continue;
        unsigned d = (unsigned)hd_lex_digit(*s);
        if (v > (limit - d) / (unsigned)base) {
            hd_parse_error(p, t->span, "integer literal too large");
            t->v.i = 0;
            return HD_T_INT;
        }
        v = v * (unsigned)base + d;
    }
    t->v.big = v == limit;
    t->v.i = t->v.big ? INT64_MIN : (int64_t)v;
    return HD_T_INT;
}

/* strtod reads the locale's decimal point; the source always writes '.'. */
static int hd_lex_float(hd_parser *p, hd_lex_token *t) {
    hd_lexer *lx = &p->lex;
    char buf[512];
    size_t n = 0;
    char point = localeconv()->decimal_point[0];
    hd_lex_tok(lx, t, HD_T_FLOAT);
    for (const unsigned char *s = lx->tok; s < lx->cur && n < sizeof buf - 1; s++)
        if (*s != '_') buf[n++] = *s == '.' ? point : (char)*s;
    buf[n] = 0;
    if (lx->cur - lx->tok >= (long)sizeof buf - 1) {
        hd_parse_error(p, t->span, "float literal too long");
        t->v.f = 0;
        return HD_T_FLOAT;
    }
    t->v.f = strtod(buf, NULL);
    return HD_T_FLOAT;
}

/* ---- strings ---- */

static int hd_lex_put(hd_parser *p, const void *b, size_t n) {
    hd_lexer *lx = &p->lex;
    if (lx->scratch_len + n + 1 > lx->scratch_cap) {
        size_t cap = lx->scratch_cap ? lx->scratch_cap : 64;
        while (cap < lx->scratch_len + n + 1) cap *= 2;
        char *s = hd_ctx_realloc(p->ctx, lx->scratch, lx->scratch_cap, cap);
        if (!s) {
            p->oom = 1;
            return 0;
        }
        lx->scratch = s;
        lx->scratch_cap = cap;
    }
    memcpy(lx->scratch + lx->scratch_len, b, n);
    lx->scratch_len += n;
    return 1;
}

static void hd_lex_put_utf8(hd_parser *p, uint32_t c) {
    unsigned char b[4];
    size_t n;
    if (c < 0x80) {
        b[0] = (unsigned char)c;
        n = 1;
    } else if (c < 0x800) {
        b[0] = (unsigned char)(0xc0 | (c >> 6));
        b[1] = (unsigned char)(0x80 | (c & 0x3f));
        n = 2;
    } else if (c < 0x10000) {
        b[0] = (unsigned char)(0xe0 | (c >> 12));
        b[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
        b[2] = (unsigned char)(0x80 | (c & 0x3f));
        n = 3;
    } else {
        b[0] = (unsigned char)(0xf0 | (c >> 18));
        b[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3f));
        b[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
        b[3] = (unsigned char)(0x80 | (c & 0x3f));
        n = 4;
    }
    hd_lex_put(p, b, n);
}

/* \u{...}: one to six hex digits naming a Unicode scalar value. */
static void hd_lex_unicode(hd_parser *p, const unsigned char *b, const unsigned char *e) {
    hd_lexer *lx = &p->lex;
    uint32_t c = 0;
    int ndigits = (int)(e - b) - 4;
    for (const unsigned char *s = b + 3; s < e - 1 && ndigits <= 6; s++)
        c = c * 16 + (uint32_t)hd_lex_digit(*s);
    if (ndigits > 6 || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) {
        hd_parse_error(p, hd_lex_span(lx, b, e), "invalid unicode escape: not a code point");
        return;
    }
    hd_lex_put_utf8(p, c);
    if (lx->fstr && (c == '{' || c == '}')) hd_lex_put_utf8(p, c); /* a literal brace */
}

static void hd_lex_bad_escape(hd_parser *p, const unsigned char *b, const unsigned char *e) {
    hd_span sp = hd_lex_span(&p->lex, b, e);
    if (b[1] >= 0x20 && b[1] < 0x7f)
        hd_parse_error(p, sp, "invalid escape sequence '\\%c'", b[1]);
    else
        hd_parse_error(p, sp, "invalid escape sequence");
}

/* The string's token, its decoded bytes copied into the arena. */
static int hd_lex_string_end(hd_parser *p, hd_lex_token *t) {
    hd_lexer *lx = &p->lex;
    hd_lex_tok(lx, t, HD_T_STRING);
    t->v.s = hd_parse_strdup(p, lx->scratch ? lx->scratch : "", lx->scratch_len);
    t->v.len = lx->scratch_len;
    if (!t->v.s) return HD_T_END;
    if (lx->fstr) {
        size_t n = (size_t)lx->nfields * sizeof *lx->fields;
        t->v.fstr = 1;
        t->v.nfields = lx->nfields;
        t->v.fields = n ? hd_parse_alloc(p, n) : NULL;
        if (n && !t->v.fields) return HD_T_END;
        if (n) memcpy(t->v.fields, lx->fields, n);
        lx->fstr = 0;
    }
    return HD_T_STRING;
}

/* ---- f-string fields ---- */

static const unsigned char *hd_lex_field_fail(hd_parser *p, const unsigned char *b,
                                              const unsigned char *e, const char *msg) {
    hd_parse_error(p, hd_lex_span(&p->lex, b, e > b ? e : b + 1), "%s", msg);
    return NULL;
}

/* A string inside a field, from its opening quote: past its closing one,
 * or NULL at the end of the line. */
static const unsigned char *hd_lex_field_string(const hd_lexer *lx, const unsigned char *e) {
    for (e++; e < lx->lim && *e != '\n'; e++) {
        if (*e == '\\' && e + 1 < lx->lim && e[1] != '\n') e++;
        else if (*e == '"') return e + 1;
    }
    return NULL;
}

/* The end of a field's expression, from just after its '{': the '}', the
 * ':' of a format spec or the '!' of a conversion, outside brackets and
 * strings. NULL when the line ends first. */
static const unsigned char *hd_lex_field_expr(const hd_lexer *lx, const unsigned char *e) {
    int depth = 0;
    while (e && e < lx->lim && *e != '\n') {
        unsigned char c = *e;
        if (c == '"') {
            e = hd_lex_field_string(lx, e);
            continue;
        }
        if (depth == 0 && (c == '}' || c == ':')) return e;
        if (depth == 0 && c == '!' && (e[1] == 'r' || e[1] == 's') && (e[2] == '}' || e[2] == ':'))
            return e;
        if (c == '(' || c == '[' || c == '{') depth++;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
        e++;
    }
    return NULL;
}

static int hd_lex_field_add(hd_parser *p, const hd_lex_field *f) {
    hd_lexer *lx = &p->lex;
    if (lx->nfields == lx->cap_fields) {
        int cap = lx->cap_fields ? lx->cap_fields * 2 : 8;
        hd_lex_field *a = hd_ctx_realloc(p->ctx, lx->fields, (size_t)lx->cap_fields * sizeof *a,
                                         (size_t)cap * sizeof *a);
        if (!a) {
            p->oom = 1;
            return 0;
        }
        lx->fields = a;
        lx->cap_fields = cap;
    }
    lx->fields[lx->nfields++] = *f;
    return 1;
}

/* {expr}, {expr:spec}, {expr!r}: the field recorded, "{}" or "{:spec}" put
 * in the format string. Returns where the string goes on, or NULL after an
 * error (the rest of the string is then read as plain text). */
static const unsigned char *hd_lex_field_scan(hd_parser *p, const unsigned char *open) {
    hd_lexer *lx = &p->lex;
    const unsigned char *b = open + 1, *e = hd_lex_field_expr(lx, b), *spec = NULL;
    if (!e) return hd_lex_field_fail(p, open, b, "unterminated f-string field: '{' without '}'");
    hd_lex_field f = {(const char *)b, (size_t)(e - b), lx->line, (int)(b - lx->bol) + 1, 0};
    const unsigned char *s = b;
    while (s < e && (*s == ' ' || *s == '\t')) s++;
    if (s == e) return hd_lex_field_fail(p, open, e + 1, "empty expression in an f-string field");
    if (*e == '!') {
        f.conv = (char)e[1];
        e += 2;
    }
    if (*e == ':') {
        spec = e;
        while (e < lx->lim && *e != '}' && *e != '{' && *e != '\n' && *e != '"') e++;
        if (e >= lx->lim || *e != '}')
            return hd_lex_field_fail(
                p, spec, e, "an f-string format spec ends at '}' and holds no '{' or '\"'");
    }
    if (!hd_lex_field_add(p, &f)) return NULL;
    hd_lex_put(p, "{", 1);
    if (spec) hd_lex_put(p, spec, (size_t)(e - spec));
    hd_lex_put(p, "}", 1);
    return e + 1;
}

static int hd_lex_unterminated(hd_parser *p, hd_lex_token *t, const unsigned char *s) {
    p->lex.cur = s;
    int kind = hd_lex_string_end(p, t);
    hd_parse_error(p, t->span, "unterminated string");
    return kind;
}

/* After the opening quote: decode to the closing one. A newline or the end
 * of input first is "unterminated string"; the newline stays for the next
 * token. */
static int hd_lex_string(hd_parser *p, hd_lex_token *t) {
    hd_lexer *lx = &p->lex;
    lx->scratch_len = 0;
    for (;;) {
        const unsigned char *s = lx->cur;
        /*!re2c
            ["] { return hd_lex_string_end(p, t); }
            [^"\\\n{}\x80-\xff]+ { hd_lex_put(p, s, (size_t)(lx->cur - s)); continue; }
            "{{" | "}}" { hd_lex_put(p, s, 2); continue; }
            "{" {
                const unsigned char *next = lx->fstr == 1 ? hd_lex_field_scan(p, s) : NULL;
                if (next) lx->cur = next;
                else if (lx->fstr) lx->fstr = 2; /* after an error: plain text to the end */
                if (!next) hd_lex_put(p, s, 1);
                continue;
            }
            "}" {
                if (lx->fstr == 1)
                    hd_parse_error(p, hd_lex_span(lx, s, lx->cur),
                                   "a single '}' in an f-string: write '}}' for a brace");
                hd_lex_put(p, s, 1);
                continue;
            }
            u8 { hd_lex_put(p, s, (size_t)(lx->cur - s)); continue; }
            "\\n" { hd_lex_put(p, "\n", 1); continue; }
            "\\t" { hd_lex_put(p, "\t", 1); continue; }
            "\\r" { hd_lex_put(p, "\r", 1); continue; }
            "\\0" { hd_lex_put(p, "", 1); continue; }
            "\\\\" { hd_lex_put(p, "\\", 1); continue; }
            "\\\"" { hd_lex_put(p, "\"", 1); continue; }
            "\\u{" [0-9a-fA-F]+ "}" { hd_lex_unicode(p, s, lx->cur); continue; }
            "\\u" {
                hd_parse_error(p, hd_lex_span(lx, s, lx->cur),
                               "invalid unicode escape: write \\u{1F600}");
                continue;
            }
            "\\" [^\n] { hd_lex_bad_escape(p, s, lx->cur); continue; }
            "\\" { continue; }
            [\x80-\xff] {
                hd_parse_error(p, hd_lex_span(lx, s, lx->cur), "invalid UTF-8 in string");
                continue;
            }
            "\n" { return hd_lex_unterminated(p, t, s); }
            $ { return hd_lex_unterminated(p, t, s); }
            * { hd_lex_put(p, s, (size_t)(lx->cur - s)); continue; }
        */
    }
}

/* ---- stray characters ---- */

/* A run of name characters with non-ASCII letters: an error, still a NAME
 * so the statement parses on. Non-ASCII alone: a stray character. */
static int hd_lex_uident(hd_parser *p, hd_lex_token *t) {
    hd_lexer *lx = &p->lex;
    int ascii = 0;
    for (const unsigned char *s = lx->tok; s < lx->cur; s++) ascii |= *s < 0x80;
    hd_lex_tok(lx, t, ascii ? HD_T_NAME : HD_T_HD_YYerror);
    if (!ascii) {
        hd_parse_error(p, t->span, "unexpected character '%.*s' (outside a string or comment)",
                       (int)t->text_len, (const char *)t->text);
        return HD_T_HD_YYerror;
    }
    hd_parse_error(p, t->span, "non-ASCII character in name '%.*s' (names are ASCII)",
                   (int)t->text_len, (const char *)t->text);
    t->v.s = hd_parse_strdup(p, (const char *)t->text, t->text_len);
    return t->v.s ? HD_T_NAME : HD_T_END;
}

static int hd_lex_stray(hd_parser *p, hd_lex_token *t) {
    hd_lexer *lx = &p->lex;
    unsigned char c = *lx->tok;
    hd_lex_tok(lx, t, HD_T_HD_YYerror);
    if (c >= 0x80)
        hd_parse_error(p, t->span, "invalid UTF-8 byte 0x%02x", c);
    else if (c > 0x20 && c < 0x7f)
        hd_parse_error(p, t->span, "unexpected character '%c'", c);
    else
        hd_parse_error(p, t->span, "unexpected character 0x%02x", c);
    return HD_T_HD_YYerror;
}

/* 'text': a string, raw, with an error. */
static int hd_lex_quote(hd_parser *p, hd_lex_token *t) {
    hd_lexer *lx = &p->lex;
    hd_lex_tok(lx, t, HD_T_STRING);
    hd_parse_error(p, t->span, "strings are written in double quotes: \"...\"");
    t->v.s = hd_parse_strdup(p, (const char *)t->text + 1, t->text_len - 2);
    t->v.len = t->text_len - 2;
    return t->v.s ? HD_T_STRING : HD_T_END;
}

static int hd_lex_name(hd_parser *p, hd_lex_token *t) {
    hd_lexer *lx = &p->lex;
    hd_lex_tok(lx, t, HD_T_NAME);
    t->v.s = hd_parse_strdup(p, (const char *)t->text, t->text_len);
    t->v.len = t->text_len;
    return t->v.s ? HD_T_NAME : HD_T_END;
}

static int hd_lex_newline(hd_lexer *lx, hd_lex_token *t) {
    hd_lex_tok(lx, t, HD_T_NEWLINE);
    lx->line++;
    lx->bol = lx->cur;
    return HD_T_NEWLINE;
}

/* End of input: placed at the last newline when the source ends with one,
 * so "unexpected end of input" points at the last line. */
static int hd_lex_eof(hd_lexer *lx, hd_lex_token *t) {
    lx->tok = lx->cur;
    hd_lex_tok(lx, t, HD_T_END);
    if (lx->cur > lx->src && lx->cur[-1] == '\n') {
        const unsigned char *b = lx->cur - 1;
        while (b > lx->src && b[-1] != '\n') b--;
        t->span.line = t->span.end_line = lx->line - 1;
        t->span.col = t->span.end_col = (int)(lx->cur - 1 - b) + 1;
    }
    return HD_T_END;
}

/* One raw token: every newline is a NEWLINE here. */
static int hd_lex_scan(hd_parser *p, hd_lex_token *t) {
    hd_lexer *lx = &p->lex;
    memset(t, 0, sizeof *t);
    for (;;) {
        lx->tok = lx->cur;
        /*!re2c
            $ { return hd_lex_eof(lx, t); }
            [ \t\r\f\v]+ { continue; }
            "#" [^\n]* {
                if (lx->keep_comments) return hd_lex_tok(lx, t, HD_LEX_COMMENT);
                continue;
            }
            "\n" { return hd_lex_newline(lx, t); }

            "let" { return hd_lex_tok(lx, t, HD_T_LET); }
            "fn" { return hd_lex_tok(lx, t, HD_T_FN); }
            "return" { return hd_lex_tok(lx, t, HD_T_RETURN); }
            "if" { return hd_lex_tok(lx, t, HD_T_IF); }
            "else" { return hd_lex_tok(lx, t, HD_T_ELSE); }
            "for" { return hd_lex_tok(lx, t, HD_T_FOR); }
            "in" { return hd_lex_tok(lx, t, HD_T_IN); }
            "while" { return hd_lex_tok(lx, t, HD_T_WHILE); }
            "break" { return hd_lex_tok(lx, t, HD_T_BREAK); }
            "continue" { return hd_lex_tok(lx, t, HD_T_CONTINUE); }
            "compiled" { return hd_lex_tok(lx, t, HD_T_COMPILED); }
            "import" { return hd_lex_tok(lx, t, HD_T_IMPORT); }
            "as" { return hd_lex_tok(lx, t, HD_T_AS); }
            "class" { return hd_lex_tok(lx, t, HD_T_CLASS); }
            "true" { return hd_lex_tok(lx, t, HD_T_TRUE); }
            "false" { return hd_lex_tok(lx, t, HD_T_FALSE); }
            "none" { return hd_lex_tok(lx, t, HD_T_NONE); }
            "and" { return hd_lex_tok(lx, t, HD_T_AND); }
            "or" { return hd_lex_tok(lx, t, HD_T_OR); }
            "not" { return hd_lex_tok(lx, t, HD_T_NOT); }
            "no_grad" { return hd_lex_tok(lx, t, HD_T_NO_GRAD); }
            "grad_context" { return hd_lex_tok(lx, t, HD_T_GRAD_CONTEXT); }
            "with_strategy" { return hd_lex_tok(lx, t, HD_T_WITH_STRATEGY); }
            "script" { return hd_lex_tok(lx, t, HD_T_SCRIPT); }
            "try" { return hd_lex_tok(lx, t, HD_T_TRY); }
            "catch" { return hd_lex_tok(lx, t, HD_T_CATCH); }
            "throw" { return hd_lex_tok(lx, t, HD_T_THROW); }
            ident { return hd_lex_name(p, t); }

            dec { return hd_lex_int(p, t, 10); }
            hex { return hd_lex_int(p, t, 16); }
            float { return hd_lex_float(p, t); }
            badnum { return hd_lex_fail(p, t, HD_T_INT, "invalid number literal"); }
            ["] { return hd_lex_string(p, t); }
            "f\"" {
                p->lex.fstr = 1;
                p->lex.nfields = 0;
                return hd_lex_string(p, t);
            }
            ['] [^'\n]* ['] { return hd_lex_quote(p, t); }

            "(" { return hd_lex_tok(lx, t, HD_T_LPAREN); }
            ")" { return hd_lex_tok(lx, t, HD_T_RPAREN); }
            "[" { return hd_lex_tok(lx, t, HD_T_LBRACKET); }
            "]" { return hd_lex_tok(lx, t, HD_T_RBRACKET); }
            "{" { return hd_lex_tok(lx, t, HD_T_LBRACE); }
            "}" { return hd_lex_tok(lx, t, HD_T_RBRACE); }
            "," { return hd_lex_tok(lx, t, HD_T_COMMA); }
            ":" { return hd_lex_tok(lx, t, HD_T_COLON); }
            ";" { return hd_lex_tok(lx, t, HD_T_SEMI); }
            "." { return hd_lex_tok(lx, t, HD_T_DOT); }
            ".." { return hd_lex_tok(lx, t, HD_T_RANGE); }
            "..." { return hd_lex_tok(lx, t, HD_T_ELLIPSIS); }
            "+" { return hd_lex_tok(lx, t, HD_T_PLUS); }
            "-" { return hd_lex_tok(lx, t, HD_T_MINUS); }
            "*" { return hd_lex_tok(lx, t, HD_T_STAR); }
            "/" { return hd_lex_tok(lx, t, HD_T_SLASH); }
            "%" { return hd_lex_tok(lx, t, HD_T_PERCENT); }
            "//" { return hd_lex_tok(lx, t, HD_T_FLOORDIV); }
            "@" { return hd_lex_tok(lx, t, HD_T_AT); }
            "**" { return hd_lex_tok(lx, t, HD_T_POW); }
            "==" { return hd_lex_tok(lx, t, HD_T_EQ); }
            "!=" { return hd_lex_tok(lx, t, HD_T_NE); }
            "<" { return hd_lex_tok(lx, t, HD_T_LT); }
            "<=" { return hd_lex_tok(lx, t, HD_T_LE); }
            ">" { return hd_lex_tok(lx, t, HD_T_GT); }
            ">=" { return hd_lex_tok(lx, t, HD_T_GE); }
            "=" { return hd_lex_tok(lx, t, HD_T_ASSIGN); }
            "+=" { return hd_lex_tok(lx, t, HD_T_PLUS_ASSIGN); }
            "-=" { return hd_lex_tok(lx, t, HD_T_MINUS_ASSIGN); }
            "*=" { return hd_lex_tok(lx, t, HD_T_STAR_ASSIGN); }
            "/=" { return hd_lex_tok(lx, t, HD_T_SLASH_ASSIGN); }

            "!" { return hd_lex_fail(p, t, HD_T_NOT, "unexpected character '!': write 'not'"); }
            "&&" { return hd_lex_fail(p, t, HD_T_AND, "unexpected '&&': write 'and'"); }
            "||" { return hd_lex_fail(p, t, HD_T_OR, "unexpected '||': write 'or'"); }
            uident { return hd_lex_uident(p, t); }
            * { return hd_lex_stray(p, t); }
        */
    }
}

/* ---- newline filtering and brackets ---- */

/* Tokens after which a statement cannot end. */
static int hd_lex_needs_more(int k) {
    switch (k) {
    case HD_T_PLUS: case HD_T_MINUS: case HD_T_STAR: case HD_T_SLASH: case HD_T_PERCENT:
    case HD_T_FLOORDIV: case HD_T_AT: case HD_T_POW: case HD_T_EQ: case HD_T_NE: case HD_T_LT: case HD_T_LE:
    case HD_T_GT: case HD_T_GE: case HD_T_RANGE: case HD_T_AND: case HD_T_OR: case HD_T_NOT:
    case HD_T_ASSIGN: case HD_T_PLUS_ASSIGN: case HD_T_MINUS_ASSIGN: case HD_T_STAR_ASSIGN:
    case HD_T_SLASH_ASSIGN: case HD_T_COMMA: case HD_T_COLON: case HD_T_DOT:
    case HD_T_LPAREN: case HD_T_LBRACKET: case HD_T_LBRACE: case HD_T_IN: case HD_T_AS:
    case HD_T_IF: case HD_T_WHILE: case HD_T_FOR: case HD_T_ELSE: case HD_T_TRY:
    case HD_T_CATCH: return 1;
    default: return 0;
    }
}

/* Tokens that never start a statement: a newline before them is dropped. */
static int hd_lex_never_starts(int k) {
    return k == HD_T_RBRACE || k == HD_T_RPAREN || k == HD_T_RBRACKET || k == HD_T_ELSE ||
           k == HD_T_CATCH || k == HD_T_DOT;
}

static int hd_lex_in_parens(const hd_lexer *lx) {
    return lx->depth > 0 && lx->open[lx->depth - 1] != '{';
}

/* Whether a newline here may end a statement. */
static int hd_lex_newline_counts(const hd_lexer *lx) {
    return !hd_lex_in_parens(lx) && lx->prev != -1 && lx->prev != HD_T_NEWLINE &&
           lx->prev != HD_T_SEMI && !hd_lex_needs_more(lx->prev);
}

static void hd_lex_brackets(hd_parser *p, const hd_lex_token *t) {
    hd_lexer *lx = &p->lex;
    switch (t->kind) {
    case HD_T_LPAREN: case HD_T_LBRACKET: case HD_T_LBRACE:
        if (lx->depth == HD_PARSE_MAX_DEPTH) {
            hd_parse_error(p, t->span, "expression nested too deeply");
            p->too_deep = 1;
            p->abort = 1;
            return;
        }
        lx->open[lx->depth++] = (unsigned char)*t->text;
        break;
    case HD_T_RPAREN: case HD_T_RBRACKET: case HD_T_RBRACE:
        if (lx->depth > 0) lx->depth--;
        break;
    default: break;
    }
}

/* A NEWLINE was scanned: skip the following ones, then keep the NEWLINE or
 * drop it before a token that never starts a statement. */
static void hd_lex_after_newline(hd_parser *p, hd_lex_token *t) {
    hd_lexer *lx = &p->lex;
    hd_lex_token nl = *t;
    do hd_lex_scan(p, t);
    while (t->kind == HD_T_NEWLINE);
    if (hd_lex_never_starts(t->kind)) return;
    lx->pending = *t;
    lx->has_pending = 1;
    *t = nl;
}

static void hd_lex_end_of_input(hd_parser *p, hd_lex_token *t) {
    hd_lexer *lx = &p->lex;
    if (lx->eof_newline || !hd_lex_newline_counts(lx)) return;
    lx->eof_newline = 1;
    lx->pending = *t;
    lx->has_pending = 1;
    t->kind = HD_T_NEWLINE;
    t->synthetic = 1;
    t->text_len = 0;
}

/* The next token for the grammar. After an error cap or a failed
 * allocation it is always end of input. */
void hd_lex_next(hd_parser *p, hd_lex_token *t) {
    hd_lexer *lx = &p->lex;
    if (p->abort || p->oom) {
        lx->tok = lx->cur = lx->lim;
        hd_lex_eof(lx, t);
    } else if (lx->has_pending) {
        *t = lx->pending;
        lx->has_pending = 0;
    } else {
        for (;;) {
            hd_lex_scan(p, t);
            if (t->kind != HD_T_NEWLINE) break;
            if (!hd_lex_newline_counts(lx)) continue;
            hd_lex_after_newline(p, t);
            break;
        }
        if (t->kind == HD_T_END) hd_lex_end_of_input(p, t);
    }
    if (p->abort || p->oom) t->kind = HD_T_END;
    hd_lex_brackets(p, t);
    lx->prev = t->kind;
    lx->last = *t;
}

/* One raw token for the formatter: every newline and every comment. */
void hd_lex_raw(hd_parser *p, hd_lex_token *t) {
    p->lex.keep_comments = 1;
    hd_lex_scan(p, t);
}

void hd_lex_init(hd_parser *p, const char *source, size_t len) {
    hd_lexer *lx = &p->lex;
    memset(lx, 0, sizeof *lx);
    lx->src = (const unsigned char *)source;
    lx->cur = lx->bol = lx->tok = lx->mar = lx->src;
    lx->lim = lx->src + len;
    lx->line = 1;
    lx->prev = -1;
}

void hd_lex_free(hd_parser *p) {
    hd_lexer *lx = &p->lex;
    if (lx->scratch) hd_ctx_free(p->ctx, lx->scratch, lx->scratch_cap);
    if (lx->fields) hd_ctx_free(p->ctx, lx->fields, (size_t)lx->cap_fields * sizeof *lx->fields);
    lx->fields = NULL;
    lx->cap_fields = 0;
    lx->scratch = NULL;
    lx->scratch_cap = 0;
}
