/* parser.y: Hodu's grammar.
 *
 * A pure Bison parser: all state is in the hd_parser passed as %param, the
 * stacks come from the context's allocator. Statements end at NEWLINE or
 * ';' (the lexer drops the newlines that cannot end one, see lexer.re). A
 * syntax error is recorded and the parser resumes at the next statement
 * boundary, so one run reports several errors.
 *
 * Canonical LR without default reductions: errors are detected on the
 * offending token with its exact expected set, so messages say "expected
 * ')' or ','" rather than everything some merged state could take. (LAC
 * would give the same with smaller tables, but its stack is allocated
 * where the context is out of reach.) */

%require "3.8"
%define api.pure full
%define api.prefix {hd_yy}
%define api.token.prefix {HD_T_}
%define api.location.type {hd_span}
%define parse.error custom
%define lr.type canonical-lr
%define lr.default-reduction accepting
%locations
%param {hd_parser *p}
%expect 0

%code requires {
#include "parse_int.h"
#define HD_YYLTYPE_IS_TRIVIAL 1
}

%code provides {
int hd_yylex(HD_YYSTYPE *lval, hd_span *lloc, hd_parser *p);
}

%code {
#include <string.h>

#define YYLLOC_DEFAULT(Cur, Rhs, N)                                                                \
    do {                                                                                           \
        if (N) {                                                                                   \
            (Cur).line = YYRHSLOC(Rhs, 1).line;                                                    \
            (Cur).col = YYRHSLOC(Rhs, 1).col;                                                      \
            (Cur).end_line = YYRHSLOC(Rhs, N).end_line;                                            \
            (Cur).end_col = YYRHSLOC(Rhs, N).end_col;                                              \
        } else {                                                                                   \
            (Cur).line = (Cur).end_line = YYRHSLOC(Rhs, 0).end_line;                               \
            (Cur).col = (Cur).end_col = YYRHSLOC(Rhs, 0).end_col;                                  \
        }                                                                                          \
    } while (0)

/* The parser's stacks grow through the context's allocator. */
#define YYMALLOC(n)           hd_yy_stack_alloc(p, (n))
#define YYFREE(ptr)           hd_yy_stack_free(p, (ptr))
#define YYMAXDEPTH            10000

/* An action's allocation failed: stop (hd_parse_source reports memory). */
#define HD_NEED(x)                                                                                 \
    do {                                                                                           \
        if (!(x)) YYNOMEM;                                                                         \
    } while (0)

/* A slice without a start begins at its first ':', not where the empty
 * start was reduced (the end of the '['). */
static hd_span hd_yy_slice_span(hd_span all, const hd_ast *start, hd_span colon) {
    if (!start) {
        all.line = colon.line;
        all.col = colon.col;
    }
    return all;
}

static void *hd_yy_stack_alloc(hd_parser *p, size_t n);
static void hd_yy_stack_free(hd_parser *p, void *ptr);
static void hd_yyerror(hd_span *loc, hd_parser *p, const char *msg);
}

%union {
    hd_ast *node;
    hd_parse_list *list;
    hd_parse_params *params;
    hd_lex_value tok;
    int op;
}

%token END 0 "end of input"
%token <tok> NAME "name" INT "number" FLOAT "float" STRING "string"
%token NEWLINE "end of line"
%token RPAREN "')'" RBRACKET "']'" RBRACE "'}'" COMMA "','" SEMI "';'" COLON "':'"
%token LPAREN "'('" LBRACKET "'['" LBRACE "'{'" DOT "'.'" ELLIPSIS "'...'"
%token LET "'let'" FN "'fn'" RETURN "'return'" IF "'if'" ELSE "'else'" FOR "'for'"
%token IN "'in'" WHILE "'while'" BREAK "'break'" CONTINUE "'continue'"
%token COMPILED "'compiled'" IMPORT "'import'" AS "'as'" CLASS "'class'"
%token TRUE "'true'" FALSE "'false'" NONE "'none'" AND "'and'" OR "'or'" NOT "'not'"
%token NO_GRAD "'no_grad'" GRAD_CONTEXT "'grad_context'" SCRIPT "'script'"
%token WITH_STRATEGY "'with_strategy'"
%token TRY "'try'" CATCH "'catch'" THROW "'throw'"
%token PLUS "'+'" MINUS "'-'" STAR "'*'" SLASH "'/'" PERCENT "'%'" AT "'@'" POW "'**'"
%token EQ "'=='" NE "'!='" LT "'<'" LE "'<='" GT "'>'" GE "'>='" RANGE "'..'"
%token ASSIGN "'='" PLUS_ASSIGN "'+='" MINUS_ASSIGN "'-='" STAR_ASSIGN "'*='"
%token SLASH_ASSIGN "'/='" FLOORDIV "'//'"

%type <list> stmts class_items opt_args args opt_items items opt_entries entries
%type <list> subscripts
%type <params> opt_params params
%type <node> opt_stmt stmt if_stmt block fn_def method expr or_expr and_expr not_expr
%type <node> cmp_expr comparison range_expr add_expr mul_expr unary power postfix primary
%type <node> arg subscript opt_expr entry
%type <op> assign_op cmp_op add_op mul_op

%%

program
    : stmts {
        p->program = hd_parse_items(p, hd_parse_node(p, HD_AST_PROGRAM, @$), $1);
        HD_NEED(p->program);
    }
    ;

stmts
    : opt_stmt { HD_NEED($$ = hd_parse_list_add(p, NULL, $1)); }
    | stmts sep opt_stmt { HD_NEED($$ = hd_parse_list_add(p, $1, $3)); }
    ;

sep : NEWLINE | SEMI ;

nls : %empty | nls NEWLINE ;

opt_stmt
    : %empty { $$ = NULL; }
    | stmt
    | error { $$ = NULL; }
    ;

block
    : LBRACE stmts RBRACE { HD_NEED($$ = hd_parse_block(p, @$, $2)); }
    ;

stmt
    : expr { HD_NEED($$ = hd_parse_mk(p, HD_AST_EXPR, @$, $1, NULL, NULL)); }
    | expr assign_op expr { HD_NEED($$ = hd_parse_assign(p, $2, @$, $1, $3)); }
    | LET NAME { HD_NEED($$ = hd_parse_named(p, HD_AST_LET, $2.s, @$, NULL)); }
    | LET NAME ASSIGN expr { HD_NEED($$ = hd_parse_named(p, HD_AST_LET, $2.s, @$, $4)); }
    | if_stmt
    | WHILE expr nls block {
        HD_NEED($$ = hd_parse_node(p, HD_AST_WHILE, @$));
        $$->a = $2;
        $$->body = $4;
        HD_NEED($$ = hd_parse_done(p, $$));
    }
    | FOR NAME IN expr nls block {
        HD_NEED($$ = hd_parse_named(p, HD_AST_FOR, $2.s, @$, $4));
        $$->body = $6;
        HD_NEED($$ = hd_parse_done(p, $$));
    }
    | BREAK { HD_NEED($$ = hd_parse_node(p, HD_AST_BREAK, @$)); }
    | CONTINUE { HD_NEED($$ = hd_parse_node(p, HD_AST_CONTINUE, @$)); }
    | RETURN { HD_NEED($$ = hd_parse_node(p, HD_AST_RETURN, @$)); }
    | RETURN expr { HD_NEED($$ = hd_parse_mk(p, HD_AST_RETURN, @$, $2, NULL, NULL)); }
    | fn_def
    | COMPILED fn_def {
        $$ = $2;
        $$->span = @$;
        $$->fn->compiled = 1;
    }
    | CLASS NAME nls LBRACE class_items RBRACE {
        HD_NEED($$ = hd_parse_named(p, HD_AST_CLASS, $2.s, @$, NULL));
        HD_NEED($$ = hd_parse_items(p, $$, $5));
    }
    | CLASS NAME LPAREN expr RPAREN nls LBRACE class_items RBRACE {
        HD_NEED($$ = hd_parse_named(p, HD_AST_CLASS, $2.s, @$, $4));
        HD_NEED($$ = hd_parse_items(p, $$, $8));
    }
    | IMPORT NAME { HD_NEED($$ = hd_parse_import(p, @$, &$2, 0, $2.s)); }
    | IMPORT NAME AS NAME { HD_NEED($$ = hd_parse_import(p, @$, &$2, 0, $4.s)); }
    | IMPORT STRING AS NAME { HD_NEED($$ = hd_parse_import(p, @$, &$2, 1, $4.s)); }
    | IMPORT STRING {
        hd_parse_error(p, @$, "a path import needs a name: import \"...\" as NAME");
        HD_NEED($$ = hd_parse_import(p, @$, &$2, 1, ""));
    }
    | NO_GRAD nls block {
        HD_NEED($$ = hd_parse_node(p, HD_AST_NO_GRAD, @$));
        $$->body = $3;
        HD_NEED($$ = hd_parse_done(p, $$));
    }
    | GRAD_CONTEXT nls block {
        HD_NEED($$ = hd_parse_node(p, HD_AST_GRAD_CTX, @$));
        $$->body = $3;
        HD_NEED($$ = hd_parse_done(p, $$));
    }
    /* no newline before the block: grad_context(c) alone is an expression */
    | GRAD_CONTEXT LPAREN opt_args RPAREN block {
        hd_parse_no_splat(p, $3, "grad_context(...)");
        HD_NEED($$ = hd_parse_grad_ctx(p, @$, $3, $5));
    }
    | WITH_STRATEGY LPAREN opt_args RPAREN nls block {
        HD_NEED($$ = hd_parse_with_strategy(p, @$, $3, $6));
    }
    | TRY nls block CATCH NAME nls block {
        HD_NEED($$ = hd_parse_named(p, HD_AST_TRY, $5.s, @$, NULL));
        $$->body = $3;
        $$->c = $7;
        HD_NEED($$ = hd_parse_done(p, $$));
    }
    | TRY nls block CATCH nls block {
        HD_NEED($$ = hd_parse_node(p, HD_AST_TRY, @$));
        $$->body = $3;
        $$->c = $6;
        HD_NEED($$ = hd_parse_done(p, $$));
    }
    | THROW expr { HD_NEED($$ = hd_parse_mk(p, HD_AST_THROW, @$, $2, NULL, NULL)); }
    | COMPILED nls block {
        HD_NEED($$ = hd_parse_node(p, HD_AST_COMPILED, @$));
        $$->body = $3;
        HD_NEED($$ = hd_parse_done(p, $$));
    }
    | COMPILED LPAREN opt_args RPAREN nls block {
        hd_parse_check_args(p, $3, 1);
        HD_NEED($$ = hd_parse_node(p, HD_AST_COMPILED, @$));
        $$->body = $6;
        HD_NEED($$ = hd_parse_items(p, $$, $3));
    }
    ;

if_stmt
    : IF expr nls block {
        HD_NEED($$ = hd_parse_mk(p, HD_AST_IF, @$, $2, NULL, NULL));
        $$->body = $4;
        HD_NEED($$ = hd_parse_done(p, $$));
    }
    | IF expr nls block ELSE nls block {
        HD_NEED($$ = hd_parse_mk(p, HD_AST_IF, @$, $2, NULL, $7));
        $$->body = $4;
        HD_NEED($$ = hd_parse_done(p, $$));
    }
    | IF expr nls block ELSE if_stmt {
        HD_NEED($$ = hd_parse_mk(p, HD_AST_IF, @$, $2, NULL, $6));
        $$->body = $4;
        HD_NEED($$ = hd_parse_done(p, $$));
    }
    ;

fn_def
    : FN NAME LPAREN opt_params RPAREN nls block {
        HD_NEED($$ = hd_parse_fn(p, HD_AST_FNDEF, @$, $2.s, $4, $7, 0));
    }
    ;

opt_params
    : %empty { $$ = NULL; }
    | params
    | params COMMA
    ;

params
    : NAME { HD_NEED($$ = hd_parse_param_add(p, NULL, $1.s, NULL, @$)); }
    | NAME ASSIGN expr { HD_NEED($$ = hd_parse_param_add(p, NULL, $1.s, $3, @$)); }
    | STAR NAME { HD_NEED($$ = hd_parse_param_rest(p, NULL, $2.s, @$)); }
    | params COMMA NAME { HD_NEED($$ = hd_parse_param_add(p, $1, $3.s, NULL, @3)); }
    | params COMMA STAR NAME { HD_NEED($$ = hd_parse_param_rest(p, $1, $4.s, @4)); }
    | params COMMA NAME ASSIGN expr {
        hd_span sp = @3;
        sp.end_line = @5.end_line;
        sp.end_col = @5.end_col;
        HD_NEED($$ = hd_parse_param_add(p, $1, $3.s, $5, sp));
    }
    ;

class_items
    : %empty { HD_NEED($$ = hd_parse_list_add(p, NULL, NULL)); }
    | class_items sep
    | class_items method { HD_NEED($$ = hd_parse_list_add(p, $1, $2)); }
    | class_items error
    ;

method
    : fn_def
    | COMPILED fn_def {
        $$ = $2;
        $$->span = @$;
        $$->fn->compiled = 1;
    }
    ;

assign_op
    : ASSIGN { $$ = HD_TOK_ASSIGN; }
    | PLUS_ASSIGN { $$ = HD_TOK_PLUS_ASSIGN; }
    | MINUS_ASSIGN { $$ = HD_TOK_MINUS_ASSIGN; }
    | STAR_ASSIGN { $$ = HD_TOK_STAR_ASSIGN; }
    | SLASH_ASSIGN { $$ = HD_TOK_SLASH_ASSIGN; }
    ;

expr : or_expr ;

or_expr
    : and_expr
    | or_expr OR and_expr { HD_NEED($$ = hd_parse_mk(p, HD_AST_OR, @$, $1, $3, NULL)); }
    ;

and_expr
    : not_expr
    | and_expr AND not_expr { HD_NEED($$ = hd_parse_mk(p, HD_AST_AND, @$, $1, $3, NULL)); }
    ;

not_expr
    : cmp_expr
    | NOT not_expr { HD_NEED($$ = hd_parse_unary(p, HD_TOK_NOT, @$, $2)); }
    ;

/* Comparisons do not chain: `a < b < c` is an error, not Python's
 * `a < b and b < c` nor C's `(a < b) < c`. */
cmp_expr
    : range_expr
    | comparison
    | comparison cmp_op range_expr {
        hd_parse_error(p, @2, "comparisons cannot be chained; write 'a < b and b < c'");
        $$ = $1;
    }
    ;

comparison
    : range_expr cmp_op range_expr {
        HD_NEED($$ = hd_parse_op(p, HD_AST_BINARY, $2, @$, $1, $3));
    }
    ;

cmp_op
    : EQ { $$ = HD_TOK_EQ; }
    | NE { $$ = HD_TOK_NE; }
    | LT { $$ = HD_TOK_LT; }
    | LE { $$ = HD_TOK_LE; }
    | GT { $$ = HD_TOK_GT; }
    | GE { $$ = HD_TOK_GE; }
    | IN { $$ = HD_TOK_IN; }
    | NOT IN { $$ = HD_TOK_NOT_IN; }
    ;

range_expr
    : add_expr
    | add_expr RANGE add_expr { HD_NEED($$ = hd_parse_op(p, HD_AST_BINARY, HD_TOK_RANGE, @$, $1, $3)); }
    ;

add_expr
    : mul_expr
    | add_expr add_op mul_expr { HD_NEED($$ = hd_parse_op(p, HD_AST_BINARY, $2, @$, $1, $3)); }
    ;

add_op : PLUS { $$ = HD_TOK_PLUS; } | MINUS { $$ = HD_TOK_MINUS; } ;

mul_expr
    : unary
    | mul_expr mul_op unary { HD_NEED($$ = hd_parse_op(p, HD_AST_BINARY, $2, @$, $1, $3)); }
    ;

mul_op
    : STAR { $$ = HD_TOK_STAR; }
    | SLASH { $$ = HD_TOK_SLASH; }
    | PERCENT { $$ = HD_TOK_PERCENT; }
    | FLOORDIV { $$ = HD_TOK_FLOORDIV; }
    | AT { $$ = HD_TOK_AT; }
    ;

/* -x ** 2 is -(x ** 2) and 2 ** -1 is allowed, as in Python. */
unary
    : power
    | MINUS unary { HD_NEED($$ = hd_parse_unary(p, HD_TOK_MINUS, @$, $2)); }
    | PLUS unary { HD_NEED($$ = hd_parse_unary(p, HD_TOK_PLUS, @$, $2)); }
    ;

power
    : postfix
    | postfix POW unary { HD_NEED($$ = hd_parse_op(p, HD_AST_BINARY, HD_TOK_POW, @$, $1, $3)); }
    ;

postfix
    : primary
    | postfix LPAREN opt_args RPAREN {
        hd_parse_check_args(p, $3, 0);
        HD_NEED($$ = hd_parse_mk(p, HD_AST_CALL, @$, $1, NULL, NULL));
        HD_NEED($$ = hd_parse_items(p, $$, $3));
        for (int i = 0; i < $$->n; i++) /* a call that spreads a list: op STAR */
            if ($$->items[i]->op == HD_TOK_STAR) $$->op = HD_TOK_STAR;
    }
    | postfix LBRACKET subscripts RBRACKET {
        HD_NEED($$ = hd_parse_mk(p, HD_AST_INDEX, @$, $1, NULL, NULL));
        HD_NEED($$ = hd_parse_items(p, $$, $3));
    }
    | postfix DOT NAME { HD_NEED($$ = hd_parse_named(p, HD_AST_MEMBER, $3.s, @$, $1)); }
    ;

primary
    : NAME { HD_NEED($$ = hd_parse_named(p, HD_AST_NAME, $1.s, @$, NULL)); }
    | INT { HD_NEED($$ = hd_parse_int(p, &$1, @$)); }
    | FLOAT { HD_NEED($$ = hd_parse_float(p, $1.f, @$)); }
    | STRING {
        HD_NEED($$ = $1.fstr ? hd_parse_fstring(p, &$1, @$) : hd_parse_str(p, &$1, @$));
    }
    | TRUE { HD_NEED($$ = hd_parse_node(p, HD_AST_TRUE, @$)); }
    | FALSE { HD_NEED($$ = hd_parse_node(p, HD_AST_FALSE, @$)); }
    | NONE { HD_NEED($$ = hd_parse_node(p, HD_AST_NONE, @$)); }
    | LPAREN expr RPAREN { $$ = $2; }
    | LBRACKET opt_items RBRACKET {
        HD_NEED($$ = hd_parse_node(p, HD_AST_LIST, @$));
        HD_NEED($$ = hd_parse_items(p, $$, $2));
    }
    | LBRACKET expr FOR NAME IN expr RBRACKET {
        HD_NEED($$ = hd_parse_comp(p, @$, $2, $4.s, $6, NULL));
    }
    | LBRACKET expr FOR NAME IN expr IF expr RBRACKET {
        HD_NEED($$ = hd_parse_comp(p, @$, $2, $4.s, $6, $8));
    }
    | LBRACE entry FOR NAME IN expr RBRACE {
        HD_NEED($$ = hd_parse_dict_comp(p, @$, $2, $4.s, $6, NULL));
    }
    | LBRACE entry FOR NAME IN expr IF expr RBRACE {
        HD_NEED($$ = hd_parse_dict_comp(p, @$, $2, $4.s, $6, $8));
    }
    | LBRACE opt_entries RBRACE {
        HD_NEED($$ = hd_parse_node(p, HD_AST_DICT, @$));
        HD_NEED($$ = hd_parse_items(p, $$, $2));
    }
    | FN LPAREN opt_params RPAREN nls block {
        HD_NEED($$ = hd_parse_fn(p, HD_AST_FN, @$, NULL, $3, $6, 0));
    }
    | COMPILED FN LPAREN opt_params RPAREN nls block {
        HD_NEED($$ = hd_parse_fn(p, HD_AST_FN, @$, NULL, $4, $7, 1));
    }
    | GRAD_CONTEXT LPAREN opt_args RPAREN {
        hd_parse_no_splat(p, $3, "grad_context()");
        HD_NEED($$ = hd_parse_grad_ctx(p, @$, $3, NULL));
    }
    | SCRIPT LPAREN opt_args RPAREN nls block {
        hd_parse_check_args(p, $3, 0);
        hd_parse_no_splat(p, $3, "script(...)");
        HD_NEED($$ = hd_parse_node(p, HD_AST_SCRIPT, @$));
        $$->body = $6;
        HD_NEED($$ = hd_parse_items(p, $$, $3));
    }
    ;

opt_args
    : %empty { HD_NEED($$ = hd_parse_list_add(p, NULL, NULL)); }
    | args
    | args COMMA
    ;

args
    : arg { HD_NEED($$ = hd_parse_list_add(p, NULL, $1)); }
    | args COMMA arg { HD_NEED($$ = hd_parse_list_add(p, $1, $3)); }
    ;

arg
    : expr { HD_NEED($$ = hd_parse_named(p, HD_AST_ARG, NULL, @$, $1)); }
    | NAME ASSIGN expr { HD_NEED($$ = hd_parse_named(p, HD_AST_ARG, $1.s, @$, $3)); }
    | STAR expr { HD_NEED($$ = hd_parse_splat(p, @$, $2)); }
    ;

subscripts
    : subscript { HD_NEED($$ = hd_parse_list_add(p, NULL, $1)); }
    | subscripts COMMA subscript { HD_NEED($$ = hd_parse_list_add(p, $1, $3)); }
    ;

subscript
    : expr
    | ELLIPSIS { HD_NEED($$ = hd_parse_node(p, HD_AST_ELLIPSIS, @$)); }
    | opt_expr COLON opt_expr {
        HD_NEED($$ = hd_parse_mk(p, HD_AST_SLICE, hd_yy_slice_span(@$, $1, @2), $1, $3, NULL));
    }
    | opt_expr COLON opt_expr COLON opt_expr {
        HD_NEED($$ = hd_parse_mk(p, HD_AST_SLICE, hd_yy_slice_span(@$, $1, @2), $1, $3, $5));
    }
    ;

opt_expr : %empty { $$ = NULL; } | expr ;

opt_items
    : %empty { HD_NEED($$ = hd_parse_list_add(p, NULL, NULL)); }
    | items
    | items COMMA
    ;

items
    : expr { HD_NEED($$ = hd_parse_list_add(p, NULL, $1)); }
    | items COMMA expr { HD_NEED($$ = hd_parse_list_add(p, $1, $3)); }
    ;

opt_entries
    : %empty { HD_NEED($$ = hd_parse_list_add(p, NULL, NULL)); }
    | entries
    | entries COMMA
    ;

entries
    : entry { HD_NEED($$ = hd_parse_list_add(p, NULL, $1)); }
    | entries COMMA entry { HD_NEED($$ = hd_parse_list_add(p, $1, $3)); }
    ;

/* `{b: 1}` means `{"b": 1}`: a bare name key is a string; any other key
 * is an expression whose value is one. In a dict comprehension the bare
 * name is a variable. */
entry
    : expr COLON expr { HD_NEED($$ = hd_parse_entry(p, @$, $1, $3)); }
    ;

%%



/* ---- syntax error messages ----
 * "unexpected X, expected Y": X names the look-ahead as a user reads it
 * ("name 'y'", "')'", "end of line"); Y folds the expected tokens into
 * "a statement" or "an expression" where those can start, leaves out the
 * operators that could continue an expression (every expression could go
 * on with one), and is dropped when more than four choices remain. */

typedef struct hd_yy_msg {
    char buf[256];
    size_t len;
} hd_yy_msg;

static void hd_yy_put(hd_yy_msg *m, const char *s) {
    size_t n = strlen(s);
    if (n > sizeof m->buf - 1 - m->len) n = sizeof m->buf - 1 - m->len;
    memcpy(m->buf + m->len, s, n);
    m->len += n;
    m->buf[m->len] = 0;
}

static int hd_yy_starts_expr(yysymbol_kind_t k) {
    switch (k) {
    case YYSYMBOL_NAME: case YYSYMBOL_INT: case YYSYMBOL_FLOAT: case YYSYMBOL_STRING:
    case YYSYMBOL_LPAREN: case YYSYMBOL_LBRACKET: case YYSYMBOL_LBRACE: case YYSYMBOL_FN:
    case YYSYMBOL_COMPILED: case YYSYMBOL_TRUE: case YYSYMBOL_FALSE: case YYSYMBOL_NONE:
    case YYSYMBOL_NOT: case YYSYMBOL_SCRIPT: case YYSYMBOL_PLUS: case YYSYMBOL_MINUS:
    case YYSYMBOL_GRAD_CONTEXT: return 1;
    default: return 0;
    }
}

static int hd_yy_starts_stmt(yysymbol_kind_t k) {
    switch (k) {
    case YYSYMBOL_LET: case YYSYMBOL_RETURN: case YYSYMBOL_IF: case YYSYMBOL_FOR:
    case YYSYMBOL_WHILE: case YYSYMBOL_BREAK: case YYSYMBOL_CONTINUE: case YYSYMBOL_IMPORT:
    case YYSYMBOL_CLASS: case YYSYMBOL_NO_GRAD: case YYSYMBOL_GRAD_CONTEXT: case YYSYMBOL_TRY:
    case YYSYMBOL_THROW: case YYSYMBOL_WITH_STRATEGY: return 1;
    default: return hd_yy_starts_expr(k);
    }
}

/* Tokens that continue an expression: binary operators and postfix forms. */
static int hd_yy_continues_expr(yysymbol_kind_t k) {
    return (k >= YYSYMBOL_PLUS && k <= YYSYMBOL_RANGE) || k == YYSYMBOL_AND ||
           k == YYSYMBOL_OR || k == YYSYMBOL_FLOORDIV || k == YYSYMBOL_LPAREN || k == YYSYMBOL_LBRACKET ||
           k == YYSYMBOL_DOT || (k >= YYSYMBOL_PLUS_ASSIGN && k <= YYSYMBOL_SLASH_ASSIGN);
}

static int hd_yy_has(const yysymbol_kind_t *e, int n, yysymbol_kind_t k) {
    for (int i = 0; i < n; i++)
        if (e[i] == k) return 1;
    return 0;
}

/* The look-ahead, as "name 'x'", "integer 12", "')'", "end of line". */
static void hd_yy_unexpected(hd_yy_msg *m, hd_parser *p, yysymbol_kind_t k) {
    const hd_lex_token *t = &p->lex.last;
    char text[48];
    size_t n = t->text_len < 32 ? t->text_len : 32;
    if (k == YYSYMBOL_NEWLINE && t->synthetic) k = YYSYMBOL_YYEOF;
    hd_yy_put(m, "unexpected ");
    hd_yy_put(m, k == YYSYMBOL_FLOAT ? "number" : yysymbol_name(k));
    if (k == YYSYMBOL_NAME || k == YYSYMBOL_INT || k == YYSYMBOL_FLOAT) {
        memcpy(text, t->text, n);
        text[n] = 0;
        hd_yy_put(m, k == YYSYMBOL_NAME ? " '" : " ");
        hd_yy_put(m, text);
        if (t->text_len > n) hd_yy_put(m, "...");
        if (k == YYSYMBOL_NAME) hd_yy_put(m, "'");
    }
}

/* Keep the expected tokens worth naming; returns their number. */
static int hd_yy_filter(yysymbol_kind_t *e, int n, const char **phrase) {
    int stmt = hd_yy_has(e, n, YYSYMBOL_LET), expr = hd_yy_has(e, n, YYSYMBOL_INT);
    int newline = hd_yy_has(e, n, YYSYMBOL_NEWLINE);
    int header = hd_yy_has(e, n, YYSYMBOL_LBRACE) && !expr;
    int method = hd_yy_has(e, n, YYSYMBOL_FN) && !expr && !stmt;
    /* after an operand, 'in' and 'not in' are operators too, and inside
     * brackets 'for' can start a comprehension: not what is missing (but
     * after `for x`, 'in' is) */
    int ops = hd_yy_has(e, n, YYSYMBOL_PLUS);
    int k = 0;
    *phrase = stmt ? "a statement" : expr ? "an expression" : method ? "a method" : NULL;
    for (int i = 0; i < n; i++) {
        yysymbol_kind_t s = e[i];
        if (stmt && hd_yy_starts_stmt(s)) continue;
        if (method && (s == YYSYMBOL_FN || s == YYSYMBOL_COMPILED)) continue;
        if ((s == YYSYMBOL_NEWLINE || s == YYSYMBOL_SEMI) && (stmt || method)) continue;
        if (s == YYSYMBOL_YYEOF && (newline || stmt)) continue;
        if (expr && (hd_yy_starts_expr(s) || s == YYSYMBOL_STAR)) continue; /* *list */
        if (!expr && hd_yy_continues_expr(s)) continue;
        if (!expr && ops && (s == YYSYMBOL_IN || s == YYSYMBOL_NOT || s == YYSYMBOL_FOR)) continue;
        if (s == YYSYMBOL_ASSIGN && hd_yy_has(e, n, YYSYMBOL_PLUS_ASSIGN)) continue;
        if (s == YYSYMBOL_SEMI && newline) continue;
        if (s == YYSYMBOL_NEWLINE && header) continue;
        e[k++] = s;
    }
    return k;
}

static const char *hd_yy_expected_name(yysymbol_kind_t k) {
    switch (k) {
    case YYSYMBOL_NAME: return "a name";
    case YYSYMBOL_INT: case YYSYMBOL_FLOAT: return "a number";
    case YYSYMBOL_STRING: return "a string";
    default: return yysymbol_name(k);
    }
}

static void hd_yy_expected(hd_yy_msg *m, yysymbol_kind_t *e, int n) {
    const char *phrase;
    int k = hd_yy_filter(e, n, &phrase);
    int total = k + (phrase != NULL);
    if (total == 0 || total > 4) return;
    hd_yy_put(m, ", expected ");
    if (phrase) hd_yy_put(m, phrase);
    for (int i = 0; i < k; i++) {
        int pos = i + (phrase != NULL);
        if (pos > 0) hd_yy_put(m, pos == total - 1 ? " or " : ", ");
        hd_yy_put(m, hd_yy_expected_name(e[i]));
    }
}

static int yyreport_syntax_error(const yypcontext_t *yyctx, hd_parser *p) {
    yysymbol_kind_t tok = yypcontext_token(yyctx), e[YYNTOKENS];
    hd_yy_msg m = {{0}, 0};
    if (p->abort || p->oom) return 0;
    if (tok == YYSYMBOL_YYEOF && p->ndiags == 0) p->incomplete = 1;
    int n = yypcontext_expected_tokens(yyctx, e, YYNTOKENS);
    hd_yy_unexpected(&m, p, tok);
    if (n > 0) hd_yy_expected(&m, e, n);
    hd_parse_error(p, *yypcontext_location(yyctx), "%s", m.buf);
    return 0;
}

int hd_yylex(HD_YYSTYPE *lval, hd_span *lloc, hd_parser *p) {
    hd_lex_token t;
    hd_lex_next(p, &t);
    lval->tok = t.v;
    *lloc = t.span;
    return t.kind;
}

/* Stack blocks carry their size in front, for hd_ctx_free. */
typedef union hd_yy_stack_head {
    size_t size;
    max_align_t align;
} hd_yy_stack_head;

static void *hd_yy_stack_alloc(hd_parser *p, size_t n) {
    hd_yy_stack_head *h = hd_ctx_alloc(p->ctx, sizeof *h + n);
    if (!h) {
        p->oom = 1;
        return NULL;
    }
    h->size = sizeof *h + n;
    return h + 1;
}

static void hd_yy_stack_free(hd_parser *p, void *ptr) {
    if (!ptr) return;
    hd_yy_stack_head *h = (hd_yy_stack_head *)ptr - 1;
    hd_ctx_free(p->ctx, h, h->size);
}

/* Bison calls this only for "memory exhausted": either an allocation
 * failed (oom is set) or the parser's stack passed YYMAXDEPTH, which only
 * input nested too deeply can do. */
static void hd_yyerror(hd_span *loc, hd_parser *p, const char *msg) {
    (void)msg;
    if (p->oom || p->too_deep) return;
    p->too_deep = 1;
    hd_parse_error(p, *loc, "expression nested too deeply");
}
