/* Parser tests: source snippets with their expected syntax tree dump,
 * error cases with their messages and positions, the incomplete-input
 * flag, spans, diagnostic formatting, nesting limits and allocation
 * failures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"
#include "hd_test.h"

static hd_ctx ctx;

typedef struct {
    const char *src;
    const char *dump;
} dump_case;

/* Precedence and associativity, literals, postfix forms, statements, and
 * the newline rules (continuation after operators and commas, inside
 * brackets, before `}` `)` `]` `.` `else`; `;` separators; comments). */
static const dump_case dump_cases[] = {
    {"1 + 2 * 3", "(program (expr (binary + (int 1) (binary * (int 2) (int 3)))))"},
    {"1 * 2 + 3", "(program (expr (binary + (binary * (int 1) (int 2)) (int 3))))"},
    {"1 - 2 - 3", "(program (expr (binary - (binary - (int 1) (int 2)) (int 3))))"},
    {"8 / 4 / 2", "(program (expr (binary / (binary / (int 8) (int 4)) (int 2))))"},
    {"7 % 3 * 2", "(program (expr (binary * (binary % (int 7) (int 3)) (int 2))))"},
    {"a @ b @ c", "(program (expr (binary @ (binary @ (name a) (name b)) (name c))))"},
    {"2 ** 3 ** 2", "(program (expr (binary ** (int 2) (binary ** (int 3) (int 2)))))"},
    {"-x ** 2", "(program (expr (unary - (binary ** (name x) (int 2)))))"},
    {"2 ** -1", "(program (expr (binary ** (int 2) (unary - (int 1)))))"},
    {"-a * b", "(program (expr (binary * (unary - (name a)) (name b))))"},
    {"- - x", "(program (expr (unary - (unary - (name x)))))"},
    {"+x", "(program (expr (unary + (name x))))"},
    {"not a == b", "(program (expr (unary not (binary == (name a) (name b)))))"},
    {"not not a", "(program (expr (unary not (unary not (name a)))))"},
    {"a and b or c", "(program (expr (or (and (name a) (name b)) (name c))))"},
    {"a or b and c", "(program (expr (or (name a) (and (name b) (name c)))))"},
    {"a and not b", "(program (expr (and (name a) (unary not (name b)))))"},
    {"a == b", "(program (expr (binary == (name a) (name b))))"},
    {"a != b", "(program (expr (binary != (name a) (name b))))"},
    {"a < b", "(program (expr (binary < (name a) (name b))))"},
    {"a <= b", "(program (expr (binary <= (name a) (name b))))"},
    {"a > b", "(program (expr (binary > (name a) (name b))))"},
    {"a >= b", "(program (expr (binary >= (name a) (name b))))"},
    {"0..n", "(program (expr (binary .. (int 0) (name n))))"},
    {"0..n + 1", "(program (expr (binary .. (int 0) (binary + (name n) (int 1)))))"},
    {"a + 1..b * 2",
     "(program (expr (binary .. (binary + (name a) (int 1)) (binary * (name b) (int 2)))))"},
    {"x < 0..n", "(program (expr (binary < (name x) (binary .. (int 0) (name n)))))"},
    {"(1 + 2) * 3", "(program (expr (binary * (binary + (int 1) (int 2)) (int 3))))"},
    {"-(1)", "(program (expr (unary - (int 1))))"},
    {"a.b.c", "(program (expr (member (member (name a) b) c)))"},
    {"a.b(1).c[2]",
     "(program (expr (index (member (call (member (name a) b) (arg (int 1))) c) (int 2))))"},
    {"f()", "(program (expr (call (name f))))"},
    {"f(1, 2)", "(program (expr (call (name f) (arg (int 1)) (arg (int 2)))))"},
    {"f(a, b = 1)", "(program (expr (call (name f) (arg (name a)) (arg b (int 1)))))"},
    {"f(x = 1, y = 2,)", "(program (expr (call (name f) (arg x (int 1)) (arg y (int 2)))))"},
    {"f(1)(2)", "(program (expr (call (call (name f) (arg (int 1))) (arg (int 2)))))"},
    {"x[i]", "(program (expr (index (name x) (name i))))"},
    {"x[a:b]", "(program (expr (index (name x) (slice (name a) (name b) _))))"},
    {"x[a:b:c]", "(program (expr (index (name x) (slice (name a) (name b) (name c)))))"},
    {"x[:]", "(program (expr (index (name x) (slice _ _ _))))"},
    {"x[::2]", "(program (expr (index (name x) (slice _ _ (int 2)))))"},
    {"x[...]", "(program (expr (index (name x) ...)))"},
    {"x[:, 1]", "(program (expr (index (name x) (slice _ _ _) (int 1))))"},
    {"x[..., -1]", "(program (expr (index (name x) ... (unary - (int 1)))))"},
    {"x[1:]", "(program (expr (index (name x) (slice (int 1) _ _))))"},
    {"x[:3]", "(program (expr (index (name x) (slice _ (int 3) _))))"},
    {"x[i, j]", "(program (expr (index (name x) (name i) (name j))))"},
    {"x[i][j]", "(program (expr (index (index (name x) (name i)) (name j))))"},
    {"none", "(program (expr none))"},
    {"true", "(program (expr true))"},
    {"false", "(program (expr false))"},
    {"42", "(program (expr (int 42)))"},
    {"1_000", "(program (expr (int 1000)))"},
    {"0x1f", "(program (expr (int 31)))"},
    {"0xFF_FF", "(program (expr (int 65535)))"},
    {"9223372036854775807", "(program (expr (int 9223372036854775807)))"},
    {"-9223372036854775808", "(program (expr (int -9223372036854775808)))"},
    {"1.0", "(program (expr (float 1)))"},
    {".5", "(program (expr (float 0.5)))"},
    {"1e-3", "(program (expr (float 0.001)))"},
    {"2.5e+10", "(program (expr (float 2.5e+10)))"},
    {"1_0.2_5", "(program (expr (float 10.25)))"},
    {"\"hello\"", "(program (expr (str \"hello\")))"},
    {"\"a\\n\\t\\\\\\\"\\r\"", "(program (expr (str \"a\\n\\t\\\\\\\"\\x0d\")))"},
    {"\"\\u{1F600}\"", "(program (expr (str \"\xf0\x9f\x98\x80\")))"},
    {"\"\\u{e9}\"", "(program (expr (str \"\xc3\xa9\")))"},
    {"\"\\0\"", "(program (expr (str \"\\x00\")))"},
    {"\"\xc3\xa9\"", "(program (expr (str \"\xc3\xa9\")))"},
    {"[]", "(program (expr (list)))"},
    {"[1, 2, 3]", "(program (expr (list (int 1) (int 2) (int 3))))"},
    {"[1, 2,]", "(program (expr (list (int 1) (int 2))))"},
    {"[[1], [2]]", "(program (expr (list (list (int 1)) (list (int 2)))))"},
    {"{}", "(program (expr (dict)))"},
    {"{\"a\": 1, b: 2}",
     "(program (expr (dict (pair (str \"a\") (int 1)) (pair (str \"b\") (int 2)))))"},
    {"{\"a\": 1,}", "(program (expr (dict (pair (str \"a\") (int 1)))))"},
    {"{a: {b: 1}}", "(program (expr (dict (pair (str \"a\") (dict (pair (str \"b\") (int 1)))))))"},
    {"let x = 1", "(program (let x (int 1)))"},
    {"let x", "(program (let x))"},
    {"x = 1", "(program (assign = (name x) (int 1)))"},
    {"x += 1", "(program (assign += (name x) (int 1)))"},
    {"x -= 1", "(program (assign -= (name x) (int 1)))"},
    {"x *= 2", "(program (assign *= (name x) (int 2)))"},
    {"x /= 2", "(program (assign /= (name x) (int 2)))"},
    {"x.f = 1", "(program (assign = (member (name x) f) (int 1)))"},
    {"x[i] = v", "(program (assign = (index (name x) (name i)) (name v)))"},
    {"x[0].w += 1", "(program (assign += (member (index (name x) (int 0)) w) (int 1)))"},
    {"if a { b }", "(program (if (name a) (block (expr (name b)))))"},
    {"if a { b } else { c }",
     "(program (if (name a) (block (expr (name b))) (block (expr (name c)))))"},
    {"if a { b } else if c { d } else { e }",
     "(program (if (name a) (block (expr (name b))) (if (name c) (block (expr (name d))) (block "
     "(expr (name e))))))"},
    {"while i < 10 { i += 1 }",
     "(program (while (binary < (name i) (int 10)) (block (assign += (name i) (int 1)))))"},
    {"for i in 0..n { print(i) }", "(program (for i (binary .. (int 0) (name n)) (block (expr "
                                   "(call (name print) (arg (name i)))))))"},
    {"for item in list { }", "(program (for item (name list) (block)))"},
    {"while true { break }", "(program (while true (block (break))))"},
    {"while true { continue }", "(program (while true (block (continue))))"},
    {"fn f() { return }", "(program (fndef f () (block (return))))"},
    {"fn f() { return 1 }", "(program (fndef f () (block (return (int 1)))))"},
    {"fn add(a, b = 1) { return a + b }",
     "(program (fndef add (a (b (int 1))) (block (return (binary + (name a) (name b))))))"},
    {"fn f(x) { x * 2 }",
     "(program (fndef f (x) expr (block (expr (binary * (name x) (int 2))))))"},
    {"fn f(x) { let y = x }", "(program (fndef f (x) (block (let y (name x)))))"},
    {"fn f(a, b,) { }", "(program (fndef f (a b) (block)))"},
    {"let g = fn (x) { x * 2 }",
     "(program (let g (fn _ (x) expr (block (expr (binary * (name x) (int 2)))))))"},
    {"let g = fn () { }", "(program (let g (fn _ () (block))))"},
    {"(fn (x) { x })(3)",
     "(program (expr (call (fn _ (x) expr (block (expr (name x)))) (arg (int 3)))))"},
    {"compiled fn predict(x) { return model(x) }",
     "(program (fndef predict (x) compiled (block (return (call (name model) (arg (name x)))))))"},
    {"let h = compiled fn (x) { x }",
     "(program (let h (fn _ (x) compiled expr (block (expr (name x))))))"},
    {"class Linear { fn init(self, n) { self.n = n } fn forward(self, x) { x @ self.w } }",
     "(program (class Linear (fndef init (self n) (block (assign = (member (name self) n) (name "
     "n)))) (fndef forward (self x) expr (block (expr (binary @ (name x) (member (name self) "
     "w)))))))"},
    {"class Empty { }", "(program (class Empty))"},
    {"class M { compiled fn forward(self, x) { x } }",
     "(program (class M (fndef forward (self x) compiled expr (block (expr (name x))))))"},
    {"import nn", "(program (import nn nn))"},
    {"import nn as n", "(program (import nn n))"},
    {"import \"lib/util.hodu\" as util", "(program (import \"lib/util.hodu\" util))"},
    {"no_grad { y = f(x) }",
     "(program (no_grad (block (assign = (name y) (call (name f) (arg (name x)))))))"},
    {"grad_context { loss.backward() }",
     "(program (grad_context (block (expr (call (member (name loss) backward))))))"},
    {"let c = grad_context()", "(program (let c (call (name grad_context))))"},
    {"grad_context(c) { loss.backward() }",
     "(program (grad_context (name c) (block (expr (call (member (name loss) backward))))))"},
    {"grad_context(models[1].ctx) { }",
     "(program (grad_context (member (index (name models) (int 1)) ctx) (block)))"},
    {"compiled { loss = step(x, y) }", "(program (compiled (block (assign = (name loss) (call "
                                       "(name step) (arg (name x)) (arg (name y)))))))"},
    {"compiled(compiler = \"llvm\", device = \"cpu\") { y = f(x) }",
     "(program (compiled (arg compiler (str \"llvm\")) (arg device (str \"cpu\")) (block (assign = "
     "(name y) (call (name f) (arg (name x)))))))"},
    {"let s = script(\"linreg\") { let x = input(\"x\", [100, 3]) }",
     "(program (let s (script (arg (str \"linreg\")) (block (let x (call (name input) (arg (str "
     "\"x\")) (arg (list (int 100) (int 3)))))))))"},
    {"script(\"s\") { }.run()",
     "(program (expr (call (member (script (arg (str \"s\")) (block)) run))))"},
    {"a; b; c", "(program (expr (name a)) (expr (name b)) (expr (name c)))"},
    {"a;", "(program (expr (name a)))"},
    {";;", "(program)"},
    {"x = 1 # comment", "(program (assign = (name x) (int 1)))"},
    {"# only a comment", "(program)"},
    {"x = 1 +\n  2", "(program (assign = (name x) (binary + (int 1) (int 2))))"},
    {"f(1,\n  2)", "(program (expr (call (name f) (arg (int 1)) (arg (int 2)))))"},
    {"f(\n  a,\n  b\n)", "(program (expr (call (name f) (arg (name a)) (arg (name b)))))"},
    {"let d = {\n  \"a\": 1,\n  b: 2,\n}",
     "(program (let d (dict (pair (str \"a\") (int 1)) (pair (str \"b\") (int 2)))))"},
    {"let d = {\n  \"a\": 1\n}", "(program (let d (dict (pair (str \"a\") (int 1)))))"},
    {"let l = [\n  1,\n  2\n]", "(program (let l (list (int 1) (int 2))))"},
    {"if a {\n  b\n}\nelse {\n  c\n}",
     "(program (if (name a) (block (expr (name b))) (block (expr (name c)))))"},
    {"if a {\n} else if b {\n}\n\nelse {\n}",
     "(program (if (name a) (block) (if (name b) (block) (block))))"},
    {"if a {\n}\n# why\nelse {\n}", "(program (if (name a) (block) (block)))"},
    {"x = a\n  .b()\n  .c", "(program (assign = (name x) (member (call (member (name a) b)) c)))"},
    {"a\nb", "(program (expr (name a)) (expr (name b)))"},
    {"a\n\n\n# c\nb", "(program (expr (name a)) (expr (name b)))"},
    {"fn f(x)\n{\n  x\n}", "(program (fndef f (x) expr (block (expr (name x)))))"},
    {"x = a and\n  b", "(program (assign = (name x) (and (name a) (name b))))"},
    {"x = not\n  y", "(program (assign = (name x) (unary not (name y))))"},
    {"x = (a\n  + b)", "(program (assign = (name x) (binary + (name a) (name b))))"},
    {"let f = fn (x) {\n  let y = x\n  y * 2\n}",
     "(program (let f (fn _ (x) expr (block (let y (name x)) (expr (binary * (name y) (int "
     "2)))))))"},
    {"map(xs, fn (x) {\n  x + 1\n})", "(program (expr (call (name map) (arg (name xs)) (arg (fn _ "
                                      "(x) expr (block (expr (binary + (name x) (int 1)))))))))"},
    {"map(xs, fn (x) {\n  let y = x\n  y + 1\n})",
     "(program (expr (call (name map) (arg (name xs)) (arg (fn _ (x) expr (block (let y (name x)) "
     "(expr (binary + (name y) (int 1)))))))))"},
    {"x = 1; y = 2\nz = 3", "(program (assign = (name x) (int 1)) (assign = (name y) (int 2)) "
                            "(assign = (name z) (int 3)))"},
    {"x = 1 # c\n# d\ny = 2 # e",
     "(program (assign = (name x) (int 1)) (assign = (name y) (int 2)))"},
    {"x = \"a # not a comment\"", "(program (assign = (name x) (str \"a # not a comment\")))"},
    {"class A {\n  fn init(self) {\n  }\n\n  fn forward(self, x) {\n    x\n  }\n}",
     "(program (class A (fndef init (self) (block)) (fndef forward (self x) expr (block (expr "
     "(name x))))))"},
    {"class A { fn a(self) { }; fn b(self) { } }",
     "(program (class A (fndef a (self) (block)) (fndef b (self) (block))))"},
    {"for i in 0..n\n{\n}", "(program (for i (binary .. (int 0) (name n)) (block)))"},
    {"fn f() {\n  return\n}", "(program (fndef f () (block (return))))"},
    {"fn f() {\n  return\n  1\n}", "(program (fndef f () expr (block (return) (expr (int 1)))))"},
    {"x = [1, 2,\n]", "(program (assign = (name x) (list (int 1) (int 2))))"},
    {"x = 1\r\ny = 2\r\n", "(program (assign = (name x) (int 1)) (assign = (name y) (int 2)))"},
    {"x[\n  1:2,\n  ...\n]", "(program (expr (index (name x) (slice (int 1) (int 2) _) ...)))"},
    {"while x {\n  if y { break }\n  continue\n}",
     "(program (while (name x) (block (if (name y) (block (break))) (continue))))"},
    {"x = 1.abs()", "(program (assign = (name x) (call (member (int 1) abs))))"},
    {"x = 1..2", "(program (assign = (name x) (binary .. (int 1) (int 2))))"},
    {"let s = script(\"n\")\n{\n  output(\"y\", x)\n}",
     "(program (let s (script (arg (str \"n\")) (block (expr (call (name output) (arg (str \"y\")) "
     "(arg (name x))))))))"},
    {"compiled(device = \"cpu\")\n{\n}", "(program (compiled (arg device (str \"cpu\")) (block)))"},
    {"no_grad\n{\n}", "(program (no_grad (block)))"},
    {"x =\n  1", "(program (assign = (name x) (int 1)))"},
    {"x = [\n]", "(program (assign = (name x) (list)))"},
    {"f(\n)", "(program (expr (call (name f))))"},
    {"f(a = 1,\n  b = 2,\n)", "(program (expr (call (name f) (arg a (int 1)) (arg b (int 2)))))"},
    {"\n\n\nx\n\n\n", "(program (expr (name x)))"},
    {"x # trailing", "(program (expr (name x)))"},
    {"{\n}", "(program (expr (dict)))"},
};

typedef struct {
    const char *src;
    int incomplete;
    const char *diags; /* "line:col: message", one per line */
} err_case;

static const err_case err_cases[] = {
    {"x = )", 0, "1:5: unexpected ')', expected an expression"},
    {"let = 3", 0, "1:5: unexpected '=', expected a name"},
    {"let\n", 0, "1:4: unexpected end of line, expected a name"},
    {"let", 0, "1:4: unexpected end of input, expected a name"},
    {"x = \"abc\ny = 1", 0, "1:5: unterminated string"},
    {"\"a\\qb\"", 0, "1:3: invalid escape sequence '\\q'"},
    {"99999999999999999999", 0, "1:1: integer literal too large"},
    {"9223372036854775808", 0, "1:1: integer literal too large"},
    {"x = 9223372036854775808 + 1", 0, "1:5: integer literal too large"},
    {"f(x) = 1", 0, "1:1: cannot assign to a function call"},
    {"1 = x", 0, "1:1: cannot assign to a literal"},
    {"a + b = 1", 0, "1:1: cannot assign to an operator expression"},
    {"fn f(x) {", 1, "1:10: unexpected end of input, expected a statement or '}'"},
    {"let caf\xc3\xa9 = 1", 0, "1:5: non-ASCII character in name 'caf\xc3\xa9' (names are ASCII)"},
    {"x = 1 \xc3\x97 2", 0, "1:7: unexpected character '\xc3\x97' (outside a string or comment)"},
    {"a < b < c", 0, "1:7: comparisons cannot be chained; write 'a < b and b < c'"},
    {"x = )\nlet = 2\nf(x) = 3\ny = 1", 0,
     "1:5: unexpected ')', expected an expression\n3:1: cannot assign to a function call"},
    {"fn f(a = 1, b) { }", 0, "1:13: parameter 'b' without a default follows one with a default"},
    {"fn f(a, a) { }", 0, "1:9: duplicate parameter 'a'"},
    {"f(a = 1, 2)", 0, "1:10: positional argument after a named argument"},
    {"f(a = 1, a = 2)", 0, "1:10: argument 'a' given twice"},
    {"import \"x.hodu\"", 0, "1:1: a path import needs a name: import \"...\" as NAME"},
    {"compiled(1) { }", 0,
     "1:10: compiled options are named: compiled(compiler = \"llvm\", device = \"cpu\")"},
    {"x = \"\\u{110000}\"", 0, "1:6: invalid unicode escape: not a code point"},
    {"x = \"\\u{D800}\"", 0, "1:6: invalid unicode escape: not a code point"},
    {"x = \"\\u1234\"", 0, "1:6: invalid unicode escape: write \\u{1F600}"},
    {"1x", 0, "1:1: invalid number literal"},
    {"0x", 0, "1:1: invalid number literal"},
    {"1__0", 0, "1:1: invalid number literal"},
    {"x = $", 0, "1:5: unexpected character '$'"},
    {"if x { y", 1, "1:9: unexpected end of input, expected a statement or '}'"},
    {"x = [1, 2", 1, "1:10: unexpected end of input, expected ']' or ','"},
    {"class A { let x = 1 }", 0, "1:11: unexpected 'let', expected a method or '}'"},
    {"x = 1 +\n", 1, "1:8: unexpected end of input, expected an expression"},
    {"return return", 0, "1:8: unexpected 'return', expected an expression or end of line"},
    {"if x y { }", 0, "1:6: unexpected name 'y', expected '{'"},
    {"a b", 0, "1:3: unexpected name 'b', expected end of line"},
    {"f(1 2)", 0, "1:5: unexpected number 2, expected ')' or ','"},
    {"x = !y", 0, "1:5: unexpected character '!': write 'not'"},
    {"a && b", 0, "1:3: unexpected '&&': write 'and'"},
    {"else { }", 0, "1:1: unexpected 'else', expected a statement"},
    {"x = 'a'", 0, "1:5: strings are written in double quotes: \"...\""},
    {"x = ()", 0, "1:6: unexpected ')', expected an expression"},
    {"f(,)", 0, "1:3: unexpected ',', expected an expression or ')'"},
    {"x[]", 0, "1:3: unexpected ']', expected an expression, ':' or '...'"},
    {"if x", 1, "1:5: unexpected end of input, expected '{'"},
    {"while x\n", 1, "1:8: unexpected end of input, expected '{'"},
    {"fn f(x)", 1, "1:8: unexpected end of input, expected '{'"},
    {"fn f(", 1, "1:6: unexpected end of input, expected a name or ')'"},
    {"f(x) {", 0, "1:6: unexpected '{', expected end of line"},
    {"x = \"abc", 0, "1:5: unterminated string"},
    {"\xff", 0, "1:1: invalid UTF-8 byte 0xff"},
    {"x = 1 **", 1, "1:9: unexpected end of input, expected an expression"},
    {"x = 1.", 1, "1:7: unexpected end of input, expected a name"},
    {"let x = 1 +", 1, "1:12: unexpected end of input, expected an expression"},
    {"for in x { }", 0, "1:5: unexpected 'in', expected a name"},
    {"for x y { }", 0, "1:7: unexpected name 'y', expected 'in'"},
    {"import", 0, "1:7: unexpected end of input, expected a name or a string"},
    {"import 1", 0, "1:8: unexpected number 1, expected a name or a string"},
    {"class { }", 0, "1:7: unexpected '{', expected a name"},
    {"x = {: 2}", 0, "1:6: unexpected ':', expected an expression or '}'"},
    {"x = {1: 2 for}", 0, "1:14: unexpected '}', expected a name"},
    {"x = {\"a\" 1}", 0, "1:10: unexpected number 1, expected ':'"},
    {"x = [1 2]", 0, "1:8: unexpected number 2, expected ']' or ','"},
    {"if a { } else b", 0, "1:15: unexpected name 'b', expected '{' or 'if'"},
    {"fn (x) { }(1) = 2", 0, "1:1: cannot assign to a function call"},
    {"x.1", 0, "1:2: unexpected number .1, expected end of line"},
    {"}", 0, "1:1: unexpected '}', expected a statement"},
    {")", 0, "1:1: unexpected ')', expected a statement"},
    {"x = (1))", 0, "1:8: unexpected ')', expected end of line"},
    {"x = \"ok\" \"no\"", 0, "1:10: unexpected string, expected end of line"},
    {"a = b = c", 0, "1:7: unexpected '=', expected end of line"},
    {"let x = 1 let y = 2", 0, "1:11: unexpected 'let', expected end of line"},
    {"fn f() { } fn g() { }", 0, "1:12: unexpected 'fn', expected end of line"},
    {"x +=", 1, "1:5: unexpected end of input, expected an expression"},
    {"x = 1...2", 0, "1:6: unexpected '...', expected end of line"},
};

static char buf[1 << 16];

/* Parse, then the dump, or every diagnostic as "line:col: message". */
static hd_status parse_to(const char *src, size_t len, hd_parse *p) {
    return hd_parse_source(&ctx, src, len, "t.hodu", p);
}

static void diags_to(const hd_parse *p, char *out, size_t n) {
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < p->ndiags && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%d:%d: %s", i ? "\n" : "", p->diags[i].span.line,
                              p->diags[i].span.col, p->diags[i].message);
}

static void check_dumps(void) {
    for (size_t i = 0; i < sizeof dump_cases / sizeof *dump_cases; i++) {
        const dump_case *c = &dump_cases[i];
        hd_parse p;
        hd_status st = parse_to(c->src, strlen(c->src), &p);
        if (p.program)
            hd_ast_dump(buf, sizeof buf, p.program);
        else
            diags_to(&p, buf, sizeof buf);
        CHECK_MSG(st == HD_OK && strcmp(buf, c->dump) == 0, "%s\n  got:  %s\n  want: %s", c->src,
                  buf, c->dump);
        hd_parse_free(&p);
    }
}

static void check_errors(void) {
    for (size_t i = 0; i < sizeof err_cases / sizeof *err_cases; i++) {
        const err_case *c = &err_cases[i];
        hd_parse p;
        hd_status st = parse_to(c->src, strlen(c->src), &p);
        diags_to(&p, buf, sizeof buf);
        CHECK_MSG(st == HD_ERR_SYNTAX && !p.program && strcmp(buf, c->diags) == 0,
                  "%s\n  got:  %s\n  want: %s", c->src, buf, c->diags);
        CHECK_MSG(p.incomplete == c->incomplete, "%s: incomplete %d", c->src, p.incomplete);
        hd_parse_free(&p);
    }
}

static hd_parse parse_ok(const char *src) {
    hd_parse p;
    hd_status st = parse_to(src, strlen(src), &p);
    CHECK_MSG(st == HD_OK && p.program, "%s", src);
    return p;
}

static int span_is(const hd_ast *n, int l, int c, int el, int ec) {
    return n && n->span.line == l && n->span.col == c && n->span.end_line == el &&
           n->span.end_col == ec;
}

/* Columns count bytes from 1; the end is inclusive. */
static void check_spans(void) {
    hd_parse p = parse_ok("let x = 1 + 22\nf(a,\n  bb)\n  y.z");
    if (p.program) {
        hd_ast *let = p.program->items[0];
        CHECK(span_is(let, 1, 1, 1, 14));
        CHECK(span_is(let->a, 1, 9, 1, 14));
        CHECK(span_is(let->a->b, 1, 13, 1, 14));
        hd_ast *call = p.program->items[1]->a;
        CHECK(span_is(call, 2, 1, 3, 5));
        CHECK(span_is(call->items[1], 3, 3, 3, 4));
        hd_ast *member = p.program->items[2]->a;
        CHECK(span_is(member, 4, 3, 4, 5));
    }
    hd_parse_free(&p);
    p = parse_ok("x[ :2, 1:, ::3]");
    if (p.program) {
        hd_ast *ix = p.program->items[0]->a;
        CHECK(span_is(ix, 1, 1, 1, 15));
        CHECK(span_is(ix->items[0], 1, 4, 1, 5));
        CHECK(span_is(ix->items[1], 1, 8, 1, 9));
        CHECK(span_is(ix->items[2], 1, 12, 1, 14));
    }
    hd_parse_free(&p);
    p = parse_ok("fn f(a, b = 2) {\n  a + b\n}");
    if (p.program) {
        hd_ast *def = p.program->items[0];
        CHECK(span_is(def, 1, 1, 3, 1));
        CHECK(def->fn && def->fn->nparams == 2 && def->fn->expr_body && !def->fn->compiled);
        CHECK(def->fn && def->fn->params[1].span.col == 9 && def->fn->params[1].span.end_col == 13);
        CHECK(def->fn && strcmp(def->fn->name, "f") == 0 && strcmp(def->name, "f") == 0);
        CHECK(span_is(def->fn->body, 1, 16, 3, 1));
    }
    hd_parse_free(&p);
}

/* What the evaluator reads besides the dump: ops, strings with NUL bytes,
 * import paths, compiled flags. */
static void check_fields(void) {
    hd_parse p = parse_ok("x -= \"a\\0b\"\nimport \"lib/u.hodu\" as u\nimport nn\n-x");
    if (p.program) {
        hd_ast *as = p.program->items[0];
        CHECK(as->kind == HD_AST_ASSIGN && as->op == HD_TOK_MINUS_ASSIGN);
        CHECK(as->b->kind == HD_AST_STR && as->b->slen == 3 && memcmp(as->b->str, "a\0b", 3) == 0);
        hd_ast *imp = p.program->items[1];
        CHECK(imp->is_path && strcmp(imp->str, "lib/u.hodu") == 0 && strcmp(imp->name, "u") == 0);
        imp = p.program->items[2];
        CHECK(!imp->is_path && strcmp(imp->str, "nn") == 0 && strcmp(imp->name, "nn") == 0);
        hd_ast *neg = p.program->items[3]->a;
        CHECK(neg->kind == HD_AST_UNARY && neg->op == HD_TOK_MINUS);
    }
    hd_parse_free(&p);
    p = parse_ok("compiled fn f(x) { return x }\nlet g = fn (y) { return y }");
    if (p.program) {
        CHECK(p.program->items[0]->fn->compiled && !p.program->items[0]->fn->expr_body);
        hd_ast *fn = p.program->items[1]->a;
        CHECK(fn->kind == HD_AST_FN && fn->fn->name == NULL && fn->name == NULL);
    }
    hd_parse_free(&p);
}

static void check_format(const char *src, const char *want) {
    hd_parse p;
    parse_to(src, strlen(src), &p);
    CHECK(p.ndiags >= 1);
    if (p.ndiags >= 1) {
        size_t n = hd_diag_format(buf, sizeof buf, "t.hodu", src, &p.diags[0].span, "error",
                                  p.diags[0].message);
        CHECK_MSG(strcmp(buf, want) == 0 && n == strlen(want), "got:\n%s\nwant:\n%s", buf, want);
    }
    hd_parse_free(&p);
}

static void check_diag_format(void) {
    check_format("x = )", "t.hodu:1:5: error: unexpected ')', expected an expression\n"
                          "  x = )\n"
                          "      ^\n");
    check_format("y = 1\nf(x) = 1\n", "t.hodu:2:1: error: cannot assign to a function call\n"
                                      "  f(x) = 1\n"
                                      "  ^~~~\n");
    check_format("if a {\n\tx = \"ab\\q\"\n}", "t.hodu:2:9: error: invalid escape sequence '\\q'\n"
                                               "  \tx = \"ab\\q\"\n"
                                               "  \t       ^~\n");
    check_format("x = (1 +\n",
                 "t.hodu:1:9: error: unexpected end of input, expected an expression\n"
                 "  x = (1 +\n"
                 "          ^\n");
    check_format("x = 1\r\ny = )\r\n", "t.hodu:2:5: error: unexpected ')', expected an expression\n"
                                       "  y = )\n"
                                       "      ^\n");
    /* A span past the source, and a small buffer: still terminated. */
    hd_span far = {9, 3, 9, 4};
    size_t n = hd_diag_format(buf, 8, "c", "x", &far, "error", "m");
    CHECK(n == strlen("c:9:3: error: m\n  \n  ^\n") && strlen(buf) == 7);
}

/* The REPL asks for more only when the input stopped inside something. */
static void check_incomplete(void) {
    static const char *const more[] = {
        "fn f(x) {",   "x = (1 +",      "f(1,\n",          "if x {\n  y = 1\n", "[1, 2",
        "let d = {\n", "while x",       "for i in",        "x = 1 +\n",         "class A {",
        "compiled {",  "if a { } else", "script(\"s\") {", "x = a.\n",          "fn f(x)\n",
    };
    static const char *const done[] = {
        "x = )", "let", "let\n", "x = \"abc", "f(x) {", "x = )\nfn f() {", "}", "1 2",
    };
    for (size_t i = 0; i < sizeof more / sizeof *more; i++) {
        hd_parse p;
        hd_status st = parse_to(more[i], strlen(more[i]), &p);
        CHECK_MSG(st == HD_ERR_SYNTAX && p.incomplete, "%s", more[i]);
        hd_parse_free(&p);
    }
    for (size_t i = 0; i < sizeof done / sizeof *done; i++) {
        hd_parse p;
        hd_status st = parse_to(done[i], strlen(done[i]), &p);
        CHECK_MSG(st == HD_ERR_SYNTAX && !p.incomplete, "%s", done[i]);
        hd_parse_free(&p);
    }
}

/* Source built from repeated pieces: prefix x n, middle, suffix x n. */
static char *repeat(const char *pre, const char *mid, const char *suf, int n) {
    size_t lp = strlen(pre), lm = strlen(mid), ls = strlen(suf);
    char *s = malloc((lp + ls) * (size_t)n + lm + 1), *q = s;
    for (int i = 0; i < n; i++, q += lp) memcpy(q, pre, lp);
    memcpy(q, mid, lm);
    q += lm;
    for (int i = 0; i < n; i++, q += ls) memcpy(q, suf, ls);
    *q = 0;
    return s;
}

static void check_deep(const char *pre, const char *mid, const char *suf, int n, int ok) {
    char *src = repeat(pre, mid, suf, n);
    hd_parse p;
    hd_status st = parse_to(src, strlen(src), &p);
    if (ok) {
        CHECK_MSG(st == HD_OK, "%s%s%s x %d", pre, mid, suf, n);
    } else {
        diags_to(&p, buf, sizeof buf);
        CHECK_MSG(st == HD_ERR_SYNTAX && strstr(buf, "expression nested too deeply") &&
                      p.ndiags <= 20 && !p.incomplete,
                  "%s%s%s x %d: %s", pre, mid, suf, n, buf);
    }
    hd_parse_free(&p);
    free(src);
}

/* Deep input is an error, not a stack overflow, in the parser and in every
 * recursive walk after it (dump, resolver, evaluator). */
static void check_nesting(void) {
    check_deep("(", "1", ")", 10000, 0);
    check_deep("[", "1", "]", 10000, 0);
    check_deep("{a: ", "1", "}", 10000, 0);
    check_deep("-", "1", "", 10000, 0);
    check_deep("not ", "x", "", 10000, 0);
    check_deep("x ** ", "1", "", 10000, 0);
    check_deep("1 + ", "1", "", 5000, 0);
    check_deep("if a { ", "1", " }", 10000, 0);
    check_deep("f(", "1", ")", 10000, 0);
    check_deep("(", "1", ")", 200, 1);
    check_deep("-", "1", "", 200, 1);
    check_deep("1 + ", "1", "", 500, 1);
    char *src = repeat("(", "1", ")", 300);
    hd_parse p;
    if (parse_to(src, strlen(src), &p) == HD_OK) {
        size_t n = hd_ast_dump(buf, sizeof buf, p.program);
        CHECK(n == strlen("(program (expr (int 1)))"));
    }
    hd_parse_free(&p);
    free(src);
}

/* Several errors in one run, each at its line, capped at 20. */
static void check_many_errors(void) {
    const char *src = "x = )\n"
                      "y = \"bad \\q\"\n"
                      "let = 3\n"
                      "z = 1 + 2\n"
                      "f(x) = 1\n"
                      "if a { b = ] }\n"
                      "w = 99999999999999999999\n"
                      "ok = 1\n";
    hd_parse p;
    hd_status st = parse_to(src, strlen(src), &p);
    diags_to(&p, buf, sizeof buf);
    CHECK_MSG(st == HD_ERR_SYNTAX && strcmp(buf, "1:5: unexpected ')', expected an expression\n"
                                                 "2:10: invalid escape sequence '\\q'\n"
                                                 "3:5: unexpected '=', expected a name\n"
                                                 "5:1: cannot assign to a function call\n"
                                                 "6:12: unexpected ']', expected an expression\n"
                                                 "7:5: integer literal too large") == 0,
              "%s", buf);
    hd_parse_free(&p);
    char *many = repeat("x = )\n", "", "", 50);
    st = parse_to(many, strlen(many), &p);
    CHECK(st == HD_ERR_SYNTAX && p.ndiags == 20 && p.diags[19].span.line == 20);
    hd_parse_free(&p);
    free(many);
}

/* NUL bytes are characters of the source, not its end. */
static void check_bytes(void) {
    hd_parse p;
    hd_status st = parse_to("x = 1\0y", 7, &p);
    diags_to(&p, buf, sizeof buf);
    CHECK_MSG(st == HD_ERR_SYNTAX && strcmp(buf, "1:6: unexpected character 0x00") == 0, "%s", buf);
    hd_parse_free(&p);
    st = parse_to("x = \"a\0b\" # \xff\xfe", 15, &p);
    CHECK(st == HD_OK && p.program && p.program->items[0]->b->slen == 3);
    hd_parse_free(&p);
    st = parse_to("x = \"\xc3\x28\"", 8, &p);
    diags_to(&p, buf, sizeof buf);
    CHECK_MSG(st == HD_ERR_SYNTAX && strcmp(buf, "1:6: invalid UTF-8 in string") == 0, "%s", buf);
    hd_parse_free(&p);
    st = parse_to(NULL, 0, &p);
    CHECK(st == HD_OK && p.program && p.program->n == 0);
    hd_parse_free(&p);
}

static void check_dump_buffer(void) {
    hd_parse p = parse_ok("let x = 1");
    char small[10];
    size_t n = hd_ast_dump(small, sizeof small, p.program);
    CHECK(n == strlen("(program (let x (int 1)))") && strcmp(small, "(program ") == 0);
    CHECK(hd_ast_dump(NULL, 0, p.program) == n);
    hd_parse_free(&p);
}

/* Every allocation failure gives HD_ERR_MEMORY and leaks nothing. */
static void check_out_of_memory(void) {
    const char *src = "class A { fn init(self, n = 2) { self.w = [1, 2.5, \"s\\u{e9}\"] } }\n"
                      "let d = {a: 1, \"b\": x[1:2, ...]}\n"
                      "for i in 0..10 { if i % 2 == 0 { continue } else { f(i, k = -i ** 2) } }\n"
                      "let s = script(\"n\") { output(\"y\", fn (x) { x }) }\n"
                      "x = )\n";
    int failures = 0, ok = 0;
    for (long k = 0; k < 100000 && !ok; k++) {
        hd_parse p;
        ctx.fail_countdown = k;
        hd_status st = parse_to(src, strlen(src), &p);
        ctx.fail_countdown = -1;
        if (st == HD_ERR_MEMORY) {
            failures++;
            CHECK(p.arena == NULL && p.program == NULL);
        } else {
            CHECK(st == HD_ERR_SYNTAX && p.ndiags == 1);
            ok = 1;
        }
        hd_parse_free(&p);
        CHECK_MSG(ctx.mem_used == 0, "allocation %ld: %zu bytes left", k, ctx.mem_used);
    }
    CHECK(ok && failures > 3);
}

int main(void) {
    hd_ctx_init(&ctx, NULL, NULL);
    check_dumps();
    check_errors();
    check_spans();
    check_fields();
    check_diag_format();
    check_incomplete();
    check_nesting();
    check_many_errors();
    check_bytes();
    check_dump_buffer();
    check_out_of_memory();
    CHECK(ctx.mem_used == 0);
    TEST_END();
}
