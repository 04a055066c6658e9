/* Training through the VM: a failure-injection sweep over a program that
 * uses every gradient builtin and object method (each allocation fails in
 * turn: the run must fail cleanly, leave the gradient mode and contexts as
 * they were, and leak nothing), and memory (allocator peak and process RSS)
 * that stays flat over an nn + optim training loop of 2,000 and 20,000
 * steps. */
#include "hd_autograd.h"
#include "hd_test.h"
#include "vm.h"

#include <string.h>
#include <sys/resource.h>

typedef struct {
    char buf[4096];
    size_t len;
} sink;

static void sink_write(void *ud, const char *s, size_t n) {
    sink *k = ud;
    if (k->len + n >= sizeof k->buf) n = sizeof k->buf - 1 - k->len;
    memcpy(k->buf + k->len, s, n);
    k->len += n;
    k->buf[k->len] = 0;
}

static hd_status run(hd_vm *vm, const char *src) {
    hd_eval_opts o = {0, 0};
    return hd_vm_eval(vm, src, strlen(src), "<test>", &o, NULL);
}

static const char *const train_prog =
    "class Model {\n"
    "    fn init(self) {\n"
    "        self.w = param(tensor([[0.5, -0.5], [0.25, 1.0]]))\n"
    "        self.layers = [{b: param(zeros([2]))}]\n"
    "        self._cache = none\n"
    "    }\n"
    "    fn forward(self, x) { return relu(x @ self.w.T + self.layers[0].b) }\n"
    "}\n"
    "class Count {\n"
    "    fn init(self) { self.i = 0 }\n"
    "    fn next(self) { self.i += 1; if self.i > 2 { return none }; return self.i }\n"
    "}\n"
    "let m = Model()\n"
    "let x = tensor([[1.0, 2.0], [3.0, -1.0]])\n"
    "for step in Count() {\n"
    "    let loss = sum(m(x) * m(x))\n"
    "    zero_grad(m)\n"
    "    loss.backward()\n"
    "    no_grad { for p in m.parameters() { p[...] = p - 0.01 * p.grad } }\n"
    "}\n"
    "grad_context { let v = param(ones([2])); backward(sum(v * 3)); assert(v.grad != none) }\n"
    "let sd = m.state_dict()\n"
    "let m2 = Model()\n"
    "m2.load_state_dict(sd)\n"
    "m2.eval()\n"
    "let d = m2.w.detach()\n"
    "let y = m2(x)\n"
    "y.backward(grad = ones([2, 2]), retain_graph = true)\n"
    "clear_tape()\n"
    "zero_grad([m2.w])\n"
    "setattr(m2, \"k\", getattr(m2, \"w\"))\n"
    "print(len(m2.named_parameters()), hasattr(m2, \"k\"), randperm(3).shape, m2.training)\n";

/* The state a failed run must leave behind: gradients on, no context open. */
static void check_grad_state(hd_vm *vm) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    CHECK(hd_grad_is_enabled(ctx));
    CHECK(hd_grad_context_depth(ctx) == 0);
}

static void test_failure_injection(void) {
    int done_at = -1;
    for (long k = 0; k < 20000 && done_at < 0; k++) {
        sink out = {{0}, 0};
        hd_vm *vm = hd_vm_new(NULL);
        CHECK(vm != NULL);
        if (!vm) return;
        hd_vm_set_writer(vm, sink_write, &out);
        hd_vm_ctx(vm)->fail_countdown = k;
        hd_status st = run(vm, train_prog);
        int injected = hd_vm_ctx(vm)->fail_countdown < 0;
        hd_vm_ctx(vm)->fail_countdown = -1;
        check_grad_state(vm);
        if (!injected) {
            done_at = (int)k;
            CHECK_MSG(st == HD_OK, "status %d: %s", (int)st, hd_vm_error_text(vm));
            CHECK_MSG(strcmp(out.buf, "3 true [3] false\n") == 0, "%s", out.buf);
        } else {
            CHECK_MSG(st == HD_ERR_MEMORY, "k=%ld: status %d: %s", k, (int)st,
                      hd_vm_error_text(vm));
            CHECK(run(vm, "print(1)") == HD_OK);
        }
        hd_vm_free(vm);
    }
    CHECK_MSG(done_at > 100, "the program completed after %d allocations", done_at);
    printf("failure injection: %d allocations\n", done_at);
}

/* Errors inside the blocks leave the gradient state as it was. */
static void test_blocks_restore(void) {
    hd_vm *vm = hd_vm_new(NULL);
    sink out = {{0}, 0};
    hd_vm_set_writer(vm, sink_write, &out);
    CHECK(run(vm, "no_grad { let a = 1 / 0 }") == HD_ERR_RUNTIME);
    check_grad_state(vm);
    CHECK(run(vm, "grad_context { grad_context { no_grad { assert(false) } } }") == HD_ERR_RUNTIME);
    check_grad_state(vm);
    CHECK(run(vm, "fn f() { no_grad { return 1 } }\nf()\nprint(is_grad_enabled())") == HD_OK);
    CHECK(strcmp(out.buf, "true\n") == 0);
    hd_vm_free(vm);
}

static const char *const loop_prog = "import nn\n"
                                     "import optim\n"
                                     "manual_seed(0)\n"
                                     "let x = randn([100, 3])\n"
                                     "let y = x @ tensor([[2.0], [-3.0], [0.5]]) + 1.0\n"
                                     "let model = nn.Linear(3, 1)\n"
                                     "let opt = optim.Adam(model, lr = 0.05)\n"
                                     "let loss_fn = nn.MSELoss()\n"
                                     "fn train(steps) {\n"
                                     "    let loss = none\n"
                                     "    for i in 0..steps {\n"
                                     "        loss = loss_fn(model(x), y)\n"
                                     "        opt.zero_grad()\n"
                                     "        loss.backward()\n"
                                     "        opt.step()\n"
                                     "    }\n"
                                     "    return loss.item()\n"
                                     "}\n";

static long peak_rss_kb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static void test_memory_flat(void) {
    hd_vm *vm = hd_vm_new(NULL);
    sink out = {{0}, 0};
    hd_vm_set_writer(vm, sink_write, &out);
    hd_ctx *ctx = hd_vm_ctx(vm);
    CHECK(run(vm, loop_prog) == HD_OK);
    hd_value *train = hd_vm_get_global(vm, "train"), loss;
    CHECK(train != NULL);
    if (!train) return;
    /* called from C: no new chunk of source is kept between the phases */
    CHECK(hd_vm_call(vm, *train, &(hd_value){HD_V_INT, {.i = 2000}}, 1, NULL, 0, &loss) == HD_OK);
    size_t peak0 = ctx->mem_peak, used0 = ctx->mem_used;
    long rss0 = peak_rss_kb();
    CHECK(hd_vm_call(vm, *train, &(hd_value){HD_V_INT, {.i = 20000}}, 1, NULL, 0, &loss) == HD_OK);
    size_t peak1 = ctx->mem_peak, used1 = ctx->mem_used;
    long rss1 = peak_rss_kb();
    CHECK_MSG(loss.type == HD_V_FLOAT && loss.as.f < 1e-4, "loss %g", loss.as.f);
    CHECK(hd_grad_record_count(ctx) == 0);
    CHECK_MSG(used1 == used0, "bytes in use: %zu after 2,000 steps, %zu after 20,000", used0,
              used1);
    CHECK_MSG(peak1 < peak0 * 1.2, "peak bytes: %zu after 2,000 steps, %zu after 20,000", peak0,
              peak1);
#if !defined(__SANITIZE_ADDRESS__) /* ASan's quarantine holds freed memory */
    CHECK_MSG(rss1 < rss0 * 1.2, "peak RSS: %ld kB after 2,000 steps, %ld after 20,000", rss0,
              rss1);
#endif
    printf("memory: peak %zu / %zu bytes, RSS %ld / %ld kB (2,000 / 22,000 steps)\n", peak0, peak1,
           rss0, rss1);
    hd_vm_free(vm);
}

int main(void) {
    test_blocks_restore();
    test_failure_injection();
    test_memory_flat();
    TEST_END();
}
