/* Compiled code through the VM: the heap after a trace fails, the last
 * compiled graph, the differential mode (HODU_COMPILE_ALL), and a sweep
 * that fails each allocation of programs with compiled functions, blocks
 * and scripts in turn (the run must fail cleanly, never crash or leak). */
#include "compiled.h"
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

static hd_vm *new_vm(sink *k) {
    hd_vm *vm = hd_vm_new(NULL);
    if (vm && k) {
        k->len = 0;
        k->buf[0] = 0;
        hd_vm_set_writer(vm, sink_write, k);
    }
    return vm;
}

static hd_status run(hd_vm *vm, const char *src) {
    hd_eval_opts o = {0, 0};
    return hd_vm_eval(vm, src, strlen(src), "<test>", &o, NULL);
}

/* A trace that fails leaves the heap as it was: assigned fields get their
 * old values back, appended items and added fields are gone. */
static void test_restore(void) {
    sink k;
    hd_vm *vm = new_vm(&k);
    CHECK(run(vm, "class M {\n"
                  "  fn init(self) { self.w = tensor([1.0, 2.0]); self.hist = [] }\n"
                  "  compiled fn bad(self, x) {\n"
                  "    self.w = self.w * x\n"
                  "    self.hist.append(self.w)\n"
                  "    self.extra = x\n"
                  "    if sum(self.w) > 0 { return 1 }\n"
                  "    return 0\n"
                  "  }\n"
                  "}\n"
                  "let m = M()\n") == HD_OK);
    CHECK(run(vm, "m.bad(tensor(2.0))") == HD_ERR_RUNTIME);
    CHECK(strstr(hd_vm_error_text(vm), "<test>:7:") != NULL);
    CHECK(strstr(hd_vm_error_text(vm), "use where(...)") != NULL);
    hd_vm_clear_error(vm);
    CHECK(run(vm, "print(m.w, m.hist)") == HD_OK);
    CHECK_MSG(strcmp(k.buf, "tensor([1., 2.]) []\n") == 0, "%s", k.buf);
    CHECK(run(vm, "print(m.extra)") == HD_ERR_RUNTIME); /* the field it added is gone */
    CHECK(run(vm, "print(m.w * 2)") == HD_OK);
    hd_vm_free(vm);
}

static void test_last_ir(void) {
    hd_vm *vm = new_vm(NULL);
    CHECK(hd_compiled_last_ir(vm) == NULL);
    CHECK(run(vm, "compiled fn f(x) { return exp(x) + 1 }\nf(tensor([1.0]))") == HD_OK);
    const char *ir = hd_compiled_last_ir(vm);
    CHECK(ir && strstr(ir, "graph f {") && strstr(ir, "exp("));
    hd_vm_free(vm);
}

/* HODU_COMPILE_ALL=1: calls with tensor arguments are traced; what cannot
 * be traced runs eagerly, with the same results. */
static void test_compile_all(void) {
    setenv("HODU_COMPILE_ALL", "1", 1);
    sink k;
    hd_vm *vm = new_vm(&k);
    unsetenv("HODU_COMPILE_ALL");
    CHECK(run(vm, "fn f(x) { return x * 2 }\n"
                  "fn g(x) { if x.sum() > 0 { return x }; return -x }\n"
                  "fn h(n) { return n + 1 }\n"
                  "print(f(tensor([1.0])), g(tensor([-1.0])), h(1))\n"
                  "print(compiled_stats(f).compiles, compiled_stats(g).eager_calls)\n") == HD_OK);
    CHECK_MSG(strcmp(k.buf, "tensor([2.]) tensor([1.]) 2\n1 1\n") == 0, "%s", k.buf);
    hd_vm_free(vm);
}

/* Fail the k-th allocation of a run, for every k until the run gets
 * through: each shorter run must fail with an error, and the VM must still
 * work afterwards. */
static void sweep(const char *prog, const char *want) {
    int done_at = -1;
    for (long k = 0; k < 20000 && done_at < 0; k++) {
        sink out;
        hd_vm *vm = new_vm(&out);
        if (!vm) break;
        hd_vm_ctx(vm)->fail_countdown = k;
        hd_status st = run(vm, prog);
        int injected = hd_vm_ctx(vm)->fail_countdown < 0;
        hd_vm_ctx(vm)->fail_countdown = -1;
        if (!injected) {
            done_at = (int)k;
            CHECK_MSG(st == HD_OK, "status %d: %s", (int)st, hd_vm_error_text(vm));
            CHECK_MSG(strstr(out.buf, want) != NULL, "%s", out.buf);
        } else {
            CHECK_MSG(st != HD_OK, "k=%ld: an allocation failed but the run succeeded", k);
            hd_vm_clear_error(vm);
            CHECK(run(vm, "print(1)") == HD_OK);
        }
        hd_vm_free(vm);
    }
    CHECK_MSG(done_at > 0, "the program never completed (%d)", done_at);
}

static void test_failure_injection(void) {
    sweep("class L { fn init(self) { self.w = ones([2, 2]); self.n = 2 }\n"
          "  compiled fn forward(self, x) { print(\"in\", x); return [relu(x @ self.w), "
          "self.n] } }\n"
          "let l = L()\n"
          "let a = l(ones([1, 2]))\n"
          "let b = l(ones([1, 2]))\n"
          "let t = zeros([2])\n"
          "for i in 0..2 { compiled { t = t + 1; no_grad { l.w[...] = l.w * 2 } } }\n"
          "print(a[0].tolist(), b[1], t.tolist(), l.w[0].tolist())\n",
          "[[2.0, 2.0]] 2 [2.0, 2.0] [4.0, 4.0]");
    sweep("let s = script(\"m\") { let x = input(\"x\", [2]); output(\"y\", x * 3) }\n"
          "s.set_input(\"x\", tensor([1.0, 2.0]))\n"
          "print(s.run().y.tolist(), s.inputs, s.stats().runs)\n",
          "[3.0, 6.0] [{\"name\": \"x\", \"shape\": [2], \"dtype\": f32}] 1");
    /* a script with state: a parameter written in place, a buffer that
     * starts as none, a gradient left on the parameter */
    sweep("let w = param(ones([2]))\n"
          "let opt = {\"buf\": none}\n"
          "let s = script(\"t\") {\n"
          "  let x = input(\"x\", [2])\n"
          "  let loss = (w * x).sum()\n"
          "  loss.backward()\n"
          "  no_grad { opt.buf = w.grad * 0.5; w[...] = w - opt.buf }\n"
          "  output(\"loss\", loss)\n"
          "}\n"
          "s.set_input(\"x\", tensor([1.0, 2.0]))\n"
          "s.run()\n"
          "w.grad = none\n"
          "print(s.run().loss.item(), w.tolist(), opt.buf.tolist(), len(s.state()))\n",
          "0.5 [0.0, -1.0] [0.5, 1.0] 3");
}

int main(void) {
    test_restore();
    test_last_ir();
    test_compile_all();
    test_failure_injection();
    TEST_END();
}
