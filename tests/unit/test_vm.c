/* The VM as a host drives it: output capture, REPL chunks, incomplete input,
 * error text, step and memory limits, interrupts, natives, calls from C,
 * and a failure-injection sweep that fails each allocation of a program in
 * turn (the run must fail cleanly, never crash or leak). */
#include "hd_test.h"
#include "vm.h"

#include <string.h>

typedef struct {
    char buf[8192];
    size_t len;
} sink;

static void sink_write(void *ud, const char *s, size_t n) {
    sink *k = ud;
    if (k->len + n >= sizeof k->buf) n = sizeof k->buf - 1 - k->len;
    memcpy(k->buf + k->len, s, n);
    k->len += n;
    k->buf[k->len] = 0;
}

static hd_vm *new_vm(sink *k, const hd_vm_options *o) {
    hd_vm *vm = hd_vm_new(o);
    if (vm && k) {
        k->len = 0;
        k->buf[0] = 0;
        hd_vm_set_writer(vm, sink_write, k);
    }
    return vm;
}

static hd_status run(hd_vm *vm, const char *src, int repl) {
    hd_eval_opts o = {repl, 0};
    return hd_vm_eval(vm, src, strlen(src), "<test>", &o, NULL);
}

static void test_output_and_errors(void) {
    sink k;
    hd_vm *vm = new_vm(&k, NULL);
    CHECK(vm != NULL);
    CHECK(run(vm, "print(1 + 1, \"x\")", 0) == HD_OK);
    CHECK(strcmp(k.buf, "2 x\n") == 0);
    CHECK(strcmp(hd_vm_error_text(vm), "") == 0);
    CHECK(run(vm, "let a = 1\nprint(a / 0)", 0) == HD_ERR_RUNTIME);
    const char *t = hd_vm_error_text(vm);
    CHECK_MSG(strncmp(t, "<test>:2:7: error: division by zero: 1 / 0\n", 43) == 0, "%s", t);
    CHECK(strstr(t, "print(a / 0)") != NULL && strstr(t, "^~~~~") != NULL);
    hd_vm_clear_error(vm);
    CHECK(strcmp(hd_vm_error_text(vm), "") == 0);
    /* Several name errors in one report. */
    CHECK(run(vm, "print(p)\nq = 1", 0) == HD_ERR_SYNTAX);
    t = hd_vm_error_text(vm);
    CHECK(strstr(t, "<test>:1:7: error: unknown name 'p'") != NULL);
    CHECK(strstr(t, "<test>:2:1: error: assignment to undeclared name 'q'") != NULL);
    hd_vm_free(vm);
}

static void test_repl_chunks(void) {
    sink k;
    hd_vm *vm = new_vm(&k, NULL);
    CHECK(run(vm, "let x = 5", 1) == HD_OK);
    CHECK(run(vm, "x * 2", 1) == HD_OK);
    CHECK(run(vm, "\"s\"", 1) == HD_OK);
    CHECK(run(vm, "none", 1) == HD_OK);
    CHECK_MSG(strcmp(k.buf, "10\n\"s\"\n") == 0, "%s", k.buf);
    /* A function may name a global that a later line defines. */
    CHECK(run(vm, "fn f() { g() + x }", 1) == HD_OK);
    CHECK(run(vm, "f()", 1) == HD_ERR_RUNTIME);
    CHECK(strstr(hd_vm_error_text(vm), "'g' is used before its definition") != NULL);
    CHECK(run(vm, "fn g() { 100 }", 1) == HD_OK);
    k.len = 0;
    CHECK(run(vm, "f()", 1) == HD_OK);
    CHECK_MSG(strcmp(k.buf, "105\n") == 0, "%s", k.buf);
    /* A chunk that fails to resolve declares nothing. */
    CHECK(run(vm, "let y = 1\nprint(nope)", 1) == HD_ERR_SYNTAX);
    CHECK(run(vm, "y", 1) == HD_ERR_SYNTAX);
    CHECK(hd_vm_get_global(vm, "y") == NULL);
    hd_value *xv = hd_vm_get_global(vm, "x");
    CHECK(xv && xv->type == HD_V_INT && xv->as.i == 5);
    /* Redeclaring at the prompt is allowed. */
    CHECK(run(vm, "let x = \"again\"", 1) == HD_OK);
    xv = hd_vm_get_global(vm, "x");
    CHECK(xv && xv->type == HD_V_STR);
    int incomplete = 0;
    hd_eval_opts o = {1, 0};
    CHECK(hd_vm_eval(vm, "fn h() {", 8, "<test>", &o, &incomplete) == HD_ERR_SYNTAX);
    CHECK(incomplete == 1);
    CHECK(hd_vm_eval(vm, "1 +", 3, "<test>", &o, &incomplete) == HD_ERR_SYNTAX);
    CHECK(incomplete == 1);
    CHECK(hd_vm_eval(vm, "1 + )", 5, "<test>", &o, &incomplete) == HD_ERR_SYNTAX);
    CHECK(incomplete == 0);
    hd_vm_free(vm);
}

static void count_name(const char *name, void *ud) {
    int *n = ud;
    if (strcmp(name, "print") == 0 || strcmp(name, "mine") == 0 || strcmp(name, "keys") == 0)
        (*n)++;
}

static void test_names_and_calls(void) {
    sink k;
    hd_vm *vm = new_vm(&k, NULL);
    CHECK(run(vm, "let mine = {a: 1}\nfn add(a, b = 10) { a + b }", 0) == HD_OK);
    int n = 0;
    hd_vm_global_names(vm, count_name, &n);
    CHECK(n == 2);
    n = 0;
    hd_vm_member_names(vm, *hd_vm_get_global(vm, "mine"), count_name, &n);
    CHECK(n == 1);
    hd_value *add = hd_vm_get_global(vm, "add");
    CHECK(add && add->type == HD_V_FUNC);
    hd_value args[1] = {hd_int(5)}, r;
    CHECK(hd_vm_call(vm, *add, args, 1, NULL, 0, &r) == HD_OK);
    CHECK(r.type == HD_V_INT && r.as.i == 15);
    hd_kwarg kw = {"b", hd_int(1)};
    CHECK(hd_vm_call(vm, *add, args, 1, &kw, 1, &r) == HD_OK);
    CHECK(r.type == HD_V_INT && r.as.i == 6);
    CHECK(hd_vm_def_value(vm, "answer", hd_int(42)) == HD_OK);
    CHECK(run(vm, "print(answer)", 0) == HD_OK);
    CHECK(strcmp(k.buf, "42\n") == 0);
    hd_eval_opts check = {0, 1};
    k.len = 0;
    CHECK(hd_vm_eval(vm, "print(1)", 8, "<test>", &check, NULL) == HD_OK);
    CHECK(k.len == 0);
    hd_vm_free(vm);
}

static void test_limits(void) {
    hd_vm_options o = {0};
    o.max_steps = 1000;
    hd_vm *vm = new_vm(NULL, &o);
    CHECK(run(vm, "while true { }", 0) == HD_ERR_LIMIT);
    CHECK(strstr(hd_vm_error_text(vm), "step limit (1000) exceeded") != NULL);
    CHECK(run(vm, "fn f(n) { f(n) }\nf(0)", 0) == HD_ERR_LIMIT);
    CHECK(run(vm, "let s = 0\nfor i in 0..100 { s += i }", 0) == HD_OK);
    hd_vm_free(vm);

    memset(&o, 0, sizeof o);
    o.memory_limit = 8u << 20;
    vm = new_vm(NULL, &o);
    CHECK(vm != NULL);
    CHECK(run(vm, "fn grow() { let l = []; while true { l.append([1, 2, 3]) } }\ngrow()", 0) ==
          HD_ERR_MEMORY);
    CHECK(strstr(hd_vm_error_text(vm), "out of memory") != NULL);
    /* The VM is usable again once the memory is released. */
    sink k;
    hd_vm_set_writer(vm, sink_write, &k);
    k.len = 0;
    CHECK(run(vm, "print(\"still alive\")", 0) == HD_OK);
    CHECK(strcmp(k.buf, "still alive\n") == 0);
    hd_vm_free(vm);

    vm = new_vm(NULL, NULL);
    CHECK(hd_vm_set_max_depth(vm, 50) == 1000);
    CHECK(run(vm, "fn f(n) { if n == 0 { return 0 }; return f(n - 1) }\nf(40)", 0) == HD_OK);
    CHECK(run(vm, "f(60)", 0) == HD_ERR_LIMIT);
    CHECK(strstr(hd_vm_error_text(vm), "maximum call depth (50) exceeded") != NULL);
    hd_vm_free(vm);
}

static hd_status native_stop(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                             const hd_kwarg *kw, int nkw, hd_value *result, void *data) {
    (void)self, (void)args, (void)nargs, (void)kw, (void)nkw, (void)data;
    hd_vm_interrupt(vm);
    *result = hd_none();
    return HD_OK;
}

static hd_status native_fail(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                             const hd_kwarg *kw, int nkw, hd_value *result, void *data) {
    (void)self, (void)args, (void)kw, (void)nkw, (void)result, (void)data;
    return hd_vm_error(vm, HD_ERR_RUNTIME, "native says no (%d args)", nargs);
}

static void test_natives_and_interrupt(void) {
    sink k;
    hd_vm *vm = new_vm(&k, NULL);
    CHECK(hd_vm_def_native(vm, "stop", native_stop, NULL) == HD_OK);
    CHECK(hd_vm_def_native(vm, "nope", native_fail, NULL) == HD_OK);
    CHECK(run(vm, "let i = 0\nwhile true { i += 1; if i == 100 { stop() } }", 0) == HD_ERR_LIMIT);
    const char *t = hd_vm_error_text(vm);
    CHECK_MSG(strstr(t, "interrupted") != NULL, "%s", t);
    CHECK(run(vm, "print(i)", 0) == HD_OK); /* the flag does not outlive the run */
    CHECK(run(vm, "fn f() { nope(1, 2) }\nf()", 0) == HD_ERR_RUNTIME);
    t = hd_vm_error_text(vm);
    CHECK_MSG(strstr(t, "<test>:1:10: error: native says no (2 args)") != NULL, "%s", t);
    CHECK(strstr(t, "  in f at <test>:1:10\n  in <main> at <test>:2:1\n") != NULL);
    hd_vm_free(vm);
}

/* Fail the k-th allocation of a run, for every k until the run gets
 * through: each shorter run must fail with an out-of-memory error, and the
 * VM must still work afterwards. */
static void sweep(const char *prog, hd_status final, const char *want) {
    int done_at = -1, crashes = 0;
    for (long k = 0; k < 5000 && done_at < 0; k++) {
        sink out;
        hd_vm *vm = new_vm(&out, NULL);
        if (!vm) {
            crashes++;
            break;
        }
        hd_vm_ctx(vm)->fail_countdown = k;
        hd_status st = run(vm, prog, 0);
        int injected = hd_vm_ctx(vm)->fail_countdown < 0;
        hd_vm_ctx(vm)->fail_countdown = -1;
        if (!injected) {
            done_at = (int)k;
            CHECK_MSG(st == final, "status %d: %s", (int)st, hd_vm_error_text(vm));
            CHECK_MSG(strstr(out.buf, want) != NULL, "%s", out.buf);
        } else {
            CHECK_MSG(st == HD_ERR_MEMORY || st == final, "k=%ld: status %d: %s", k, (int)st,
                      hd_vm_error_text(vm));
            CHECK(run(vm, "print(1)", 0) == HD_OK);
        }
        hd_vm_free(vm);
    }
    CHECK_MSG(done_at > 0, "the program never completed (%d)", done_at);
    CHECK(crashes == 0);
}

static void test_failure_injection(void) {
    sweep("class P { fn init(self, x) { self.x = x; self.l = [x, str(x)] } }\n"
          "fn make(n) { let out = []; for i in 0..n { out.append(P(i)) }; out }\n"
          "let d = {a: make(5), b: \"s\" * 3}\n"
          "let f = fn (x) { d.a[x].l }\n"
          "let s = \"\"\n"
          "for k in d { s += k }\n"
          "let e = [1, 2][0:1] + list(0..3)\n"
          "e.sort(key = fn (v) { -v })\n"
          "print(f(2), s, e, {q: [1.5, none]}, \"x\".upper().split(\"x\"))\n",
          HD_OK, "[2, \"2\"] ab [2, 1, 1, 0] {\"q\": [1.5, none]}");
    sweep("fn counter() { let n = 0; return fn () { n += 1; n } }\n"
          "let c = counter(); c(); c()\n"
          "let fns = []\n"
          "for i in 0..3 { fns.append(fn () { i }) }\n"
          "class A { fn init(self) { self.me = self } fn get(self) { [self.me, 1] } }\n"
          "for i in 0..20 { let a = A(); let g = a.get; g() }\n"
          "gc()\n"
          "let d = {x: 1}; d.update({y: 2}); d.pop(\"x\")\n"
          "print(c(), fns[2](), \"{}-{}\".format(d, \"é\"[0]), \"a,b\".split(\",\"), 2 ** 0.5)\n"
          "assert(false, \"the end\")\n",
          HD_ERR_RUNTIME, "3 2 {\"y\": 2}-é [\"a\", \"b\"] 1.4142135623730951");
}

static void test_many_vms(void) {
    sink a, b;
    hd_vm *x = new_vm(&a, NULL), *y = new_vm(&b, NULL);
    CHECK(run(x, "let v = 1", 0) == HD_OK);
    CHECK(run(y, "let v = 2", 0) == HD_OK);
    CHECK(run(x, "print(v)", 0) == HD_OK);
    CHECK(run(y, "print(v)", 0) == HD_OK);
    CHECK(strcmp(a.buf, "1\n") == 0 && strcmp(b.buf, "2\n") == 0);
    hd_vm_free(x);
    hd_vm_free(y);
}

int main(void) {
    test_output_and_errors();
    test_repl_chunks();
    test_names_and_calls();
    test_limits();
    test_natives_and_interrupt();
    test_failure_injection();
    test_many_vms();
    TEST_END();
}
