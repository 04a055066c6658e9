/* Limits and hooks of the embedding API: memory_limit, max_steps, the call
 * depth, allow_io, the host allocator (counting, and failing each
 * allocation in turn), the print hook, and calls back into the API from a
 * hook. Every failure is a status and a message; the VM stays usable. */
#include "api_test.h"

#include <stdint.h>
#include <unistd.h>

static int slow_env(void) {
    return getenv("HODU_API_TEST_SLOW") != NULL;
}

static hodu_vm *vm_with_limit(size_t bytes) {
    hodu_options o;
    hodu_options_init(&o);
    o.memory_limit = bytes;
    return hodu_vm_new(&o);
}

static void test_memory_limit(void) {
    CHECK(vm_with_limit(1000) == NULL); /* too small for the VM itself */
    hodu_vm *vm = vm_with_limit((size_t)32 << 20);
    CHECK(vm != NULL);
    /* in a tensor allocation */
    int64_t big[2] = {4096, 4096}; /* 64 MiB of f32 */
    CHECK(hodu_tensor_new(vm, HODU_F32, big, 2) == NULL);
    CHECK(hodu_error_status(vm) == HODU_ERROR_MEMORY);
    CHECK_ERR(vm, "out of memory");
    int64_t small[1] = {1000};
    hodu_tensor *ok = hodu_tensor_new(vm, HODU_F32, small, 1);
    CHECK(ok != NULL);
    /* borrowed memory does not count */
    float *host = calloc((size_t)4096 * 4096, sizeof *host);
    hodu_tensor *w = hodu_tensor_wrap(vm, HODU_F32, big, 2, host);
    CHECK(w != NULL);
    /* in the middle of a program: a loop keeps allocating */
    CHECK_ST(vm,
             hodu_eval(vm,
                       "let kept = []\nfor i in 0..1000 {\n    kept.append(zeros([1000000]))\n}",
                       "grow.hodu"),
             HODU_ERROR_MEMORY);
    CHECK_ERR(vm, "grow.hodu:3:");
    CHECK_ERR(vm, "out of memory");
    /* ... and in a program's single allocation */
    CHECK_ST(vm, hodu_eval(vm, "let huge = zeros([100000000])", NULL), HODU_ERROR_MEMORY);
    /* usable afterwards, once the program drops what it kept */
    CHECK_OK(vm, hodu_eval(vm, "kept = none\nlet fine = zeros([1000000]).sum()", NULL));
    CHECK_OK(vm, hodu_set_global(vm, "w", w));
    CHECK_OK(vm, hodu_eval(vm, "let m = w[0, 0] + 1", NULL));
    /* in a call */
    CHECK_OK(vm, hodu_eval(vm, "fn blow(x) { return zeros([100000000]) + x }", NULL));
    hodu_tensor *r = NULL;
    CHECK_ST(vm, hodu_call(vm, "blow", &ok, 1, &r), HODU_ERROR_MEMORY);
    CHECK(r == NULL);
    CHECK_OK(vm, hodu_call(vm, "relu", &ok, 1, &r));
    hodu_tensor_release(r);
    hodu_tensor_release(ok);
    hodu_tensor_release(w);
    hodu_vm_free(vm);
    free(host);
}

static void test_max_steps(void) {
    hodu_options o;
    hodu_options_init(&o);
    o.max_steps = 10000;
    hodu_vm *vm = hodu_vm_new(&o);
    CHECK_ST(vm, hodu_eval(vm, "while true { }", "spin.hodu"), HODU_ERROR_LIMIT);
    CHECK_ERR(vm, "step limit (10000) exceeded");
    CHECK_ERR(vm, "spin.hodu:1:");
    /* the limit is per call: a bounded loop runs after an unbounded one */
    CHECK_OK(vm, hodu_eval(vm, "let n = 0\nfor i in 0..5000 { n += 1 }", NULL));
    CHECK_OK(vm, hodu_eval(vm, "for i in 0..5000 { n += 1 }", NULL));
    double n = 0;
    CHECK_OK(vm, hodu_get_global_number(vm, "n", &n));
    CHECK(n == 10000);
    /* in a call, and recursion */
    CHECK_OK(vm, hodu_eval(vm,
                           "fn spin(x) { while true { x = x + 0 } }\n"
                           "fn deep(x) { return deep(x) }",
                           NULL));
    int64_t shape[1] = {1};
    float v = 1;
    hodu_tensor *t = hodu_tensor_wrap(vm, HODU_F32, shape, 1, &v);
    hodu_tensor *r = NULL;
    CHECK_ST(vm, hodu_call(vm, "spin", &t, 1, &r), HODU_ERROR_LIMIT);
    CHECK_ERR(vm, "in spin at");
    CHECK_ST(vm, hodu_call(vm, "deep", &t, 1, &r), HODU_ERROR_LIMIT);
    CHECK_ERR(vm, "maximum call depth");
    CHECK_OK(vm, hodu_call(vm, "relu", &t, 1, &r));
    hodu_tensor_release(r);
    hodu_tensor_release(t);
    hodu_vm_free(vm);
    /* without max_steps the depth limit still stops runaway recursion */
    vm = hodu_vm_new(NULL);
    CHECK_ST(vm, hodu_eval(vm, "fn f(n) { return f(n + 1) }\nf(0)", NULL), HODU_ERROR_LIMIT);
    hodu_vm_free(vm);
}

static void test_allow_io(void) {
    char path[] = "/tmp/hodu_api_io_XXXXXX";
    char *dir = mkdtemp(path);
    CHECK(dir != NULL);
    if (!dir) return;
    char file[256], prog[1024];
    snprintf(file, sizeof file, "%s/t.npy", dir);
    /* with file access: save and load work */
    hodu_vm *io = hodu_vm_new(NULL);
    snprintf(prog, sizeof prog, "save(\"%s\", arange(0, 4))\nlet back = load(\"%s\")", file, file);
    CHECK_OK(io, hodu_eval(io, prog, NULL));
    hodu_tensor *back = hodu_get_global_tensor(io, "back");
    CHECK(back && hodu_tensor_numel(back) == 4);
    hodu_tensor_release(back);
    hodu_vm_free(io);
    /* a zeroed options struct has no file access: the names do not exist */
    hodu_options o;
    memset(&o, 0, sizeof o);
    hodu_vm *vm = hodu_vm_new(&o);
    const char *const calls[] = {"save(\"%s\", ones([2]))", "let x = load(\"%s\")",
                                 "let x = read_csv(\"%s\")"};
    const char *const names[] = {"'save'", "'load'", "'read_csv'"};
    for (int i = 0; i < 3; i++) {
        snprintf(prog, sizeof prog, calls[i], file);
        CHECK_ST(vm, hodu_eval(vm, prog, NULL), HODU_ERROR_SYNTAX);
        CHECK_ERR(vm, "unknown name");
        CHECK_ERR(vm, names[i]);
    }
    snprintf(prog, sizeof prog, "import \"%s/mod.hodu\" as m", dir);
    CHECK_ST(vm, hodu_eval(vm, prog, NULL), HODU_ERROR_RUNTIME);
    CHECK_ERR(vm, "file access is off");
    /* what is left works, and the host may still hand data in */
    CHECK_OK(vm, hodu_eval(vm, "let y = ones([2]) * 3", NULL));
    hodu_vm_free(vm);
    unlink(file);
    rmdir(dir);
}

typedef struct captured {
    char text[4096];
    size_t len;
    int calls;
    hodu_vm *vm; /* for the reentrancy test */
    hodu_status inner;
    hodu_tensor *release; /* a handle the hook releases */
} captured;

static void capture_write(void *ud, const char *s, size_t n) {
    captured *c = ud;
    c->calls++;
    if (c->len + n < sizeof c->text) {
        memcpy(c->text + c->len, s, n);
        c->len += n;
        c->text[c->len] = 0;
    }
}

static void test_print_hook(void) {
    captured c;
    memset(&c, 0, sizeof c);
    hodu_options o;
    hodu_options_init(&o);
    o.write = capture_write;
    o.write_ud = &c;
    hodu_vm *vm = hodu_vm_new(&o);
    CHECK_OK(vm,
             hodu_eval(vm, "print(1 + 2)\nprint(\"a\", [1, 2])\nprint(tensor([1.5, 2]))", NULL));
    CHECK_MSG(strcmp(c.text, "3\na [1, 2]\ntensor([1.5000, 2.0000])\n") == 0, "got: %s", c.text);
    CHECK(c.calls > 0);
    /* errors are not printed: they are in the VM */
    size_t before = c.len;
    CHECK_ST(vm, hodu_eval(vm, "print(1)\nlet z = ones([2]) @ ones([3])", NULL),
             HODU_ERROR_RUNTIME);
    CHECK(c.len == before + 2);
    hodu_vm_free(vm);
}

/* A hook that calls back into the API while the VM runs is refused. */
static void reentrant_write(void *ud, const char *s, size_t n) {
    captured *c = ud;
    capture_write(ud, s, n);
    c->inner = hodu_eval(c->vm, "let nested = 1", NULL);
    if (c->inner == HODU_OK) return;
    int64_t shape[1] = {1};
    float v = 0;
    hodu_tensor *t = hodu_tensor_wrap(c->vm, HODU_F32, shape, 1, &v);
    if (hodu_set_global(c->vm, "x", t) == HODU_OK) c->inner = HODU_OK;
    if (hodu_call(c->vm, "print", &t, 1, NULL) == HODU_OK) c->inner = HODU_OK;
    hodu_tensor_release(t);
    hodu_vm_free(c->vm); /* ignored while the VM runs */
    hodu_tensor_release(c->release);
    c->release = NULL;
}

static void test_reentrancy(void) {
    captured c;
    memset(&c, 0, sizeof c);
    hodu_options o;
    hodu_options_init(&o);
    o.write = reentrant_write;
    o.write_ud = &c;
    hodu_vm *vm = hodu_vm_new(&o);
    c.vm = vm;
    CHECK_OK(vm, hodu_eval(vm, "print(5)\nlet after = 2", NULL));
    CHECK(c.inner == HODU_ERROR_ARGUMENT);
    CHECK(strcmp(c.text, "5\n") == 0);
    double d = 0;
    CHECK_OK(vm, hodu_get_global_number(vm, "after", &d));
    CHECK(d == 2);
    CHECK(hodu_get_global_tensor(vm, "nested") == NULL);
    /* the hook releases the handle passed to the running call */
    int64_t shape[1] = {3};
    c.release = hodu_tensor_new(vm, HODU_F32, shape, 1);
    hodu_tensor *arg = c.release;
    c.len = 0;
    CHECK_OK(vm, hodu_call(vm, "print", &arg, 1, NULL));
    CHECK(c.release == NULL && strstr(c.text, "tensor([0., 0., 0.])") != NULL);
    hodu_vm_free(vm);
}

/* The scenario run under a failing allocator: a VM, a program, handles,
 * a call. Returns 1 if everything succeeded. */
static int alloc_scenario(counting_alloc *ca) {
    hodu_options o;
    hodu_options_init(&o);
    o.alloc = counting_alloc_fn;
    o.alloc_ud = ca;
    hodu_vm *vm = hodu_vm_new(&o);
    if (!vm) return 0;
    int ok = 1;
    float data[4] = {1, 2, 3, 4};
    int64_t shape[2] = {2, 2};
    hodu_tensor *x = hodu_tensor_wrap(vm, HODU_F32, shape, 2, data), *r = NULL;
    ok &= x != NULL;
    ok &= hodu_set_global(vm, "x", x) == HODU_OK;
    ok &= hodu_eval(
              vm,
              "let y = relu(x @ x.T) + 1\nlet names = {\"a\": [1, 2], \"b\": \"text\"}\n"
              "fn f(t) { return sum(t * 2, axis = 0) }\nclass K { fn init(self) { self.v = 1 } }\n"
              "let k = K()",
              NULL) == HODU_OK;
    ok &= hodu_call(vm, "f", &x, 1, &r) == HODU_OK;
    hodu_tensor *y = hodu_get_global_tensor(vm, "y");
    ok &= y != NULL && hodu_tensor_data(y) != NULL;
    /* the VM answers after whatever failed */
    if (hodu_error_status(vm) != HODU_OK) ok &= strlen(hodu_error_message(vm)) > 0;
    hodu_tensor_release(r);
    hodu_vm_free(vm); /* releases x and y */
    return ok;
}

static void test_failing_allocator(void) {
    counting_alloc ca;
    counting_alloc_init(&ca);
    CHECK(alloc_scenario(&ca));
    CHECK_MSG(ca.outstanding == 0, "%zu bytes outstanding", ca.outstanding);
    long total = ca.calls;
    CHECK(total > 100);
    /* fail allocation k, for every k (every 7th under valgrind) */
    long step = slow_env() ? 7 : 1, leaks = 0, succeeded = 0, first = 0;
    /* HODU_API_TEST_FAIL_AT=k runs that one case (to debug it) */
    const char *only = getenv("HODU_API_TEST_FAIL_AT");
    if (only) {
        first = atol(only);
        total = first + 1;
    }
    for (long k = first; k < total; k += step) {
        counting_alloc_init(&ca);
        ca.fail_at = k;
        succeeded += alloc_scenario(&ca);
        if (ca.outstanding) {
            if (!leaks++)
                fprintf(stderr, "allocation %ld failing: %zu bytes leaked\n", k, ca.outstanding);
        }
    }
    CHECK_MSG(leaks == 0, "%ld of %ld runs leaked", leaks, total / step);
    CHECK(succeeded < total / step); /* the failures did fail something */
}

static void test_counting_allocator(void) {
    counting_alloc ca;
    counting_alloc_init(&ca);
    hodu_options o;
    hodu_options_init(&o);
    o.alloc = counting_alloc_fn;
    o.alloc_ud = &ca;
    o.memory_limit = (size_t)16 << 20;
    hodu_vm *vm = hodu_vm_new(&o);
    CHECK(vm && ca.outstanding > 0 && ca.outstanding <= o.memory_limit);
    size_t base = ca.outstanding;
    int64_t shape[1] = {1 << 20}; /* 4 MiB */
    hodu_tensor *t = hodu_tensor_new(vm, HODU_F32, shape, 1);
    CHECK(t && ca.outstanding >= base + ((size_t)4 << 20));
    hodu_tensor_release(t);
    CHECK(ca.outstanding < base + ((size_t)1 << 20));
    /* the limit holds whatever the allocator would give */
    CHECK_ST(vm, hodu_eval(vm, "let a = zeros([5000000])", NULL), HODU_ERROR_MEMORY);
    CHECK(ca.peak <= o.memory_limit);
    hodu_vm_free(vm);
    CHECK(ca.outstanding == 0);
}

/* A compiled fn whose gradient runs as a backward graph keeps arrays sized
 * by its graph's inputs; the VM must give each back with the size it had
 * (only some inputs are checked for in-place changes here: y's gradient
 * rule keeps nothing). */
static void test_counting_allocator_compiled_backward(void) {
    counting_alloc ca;
    counting_alloc_init(&ca);
    hodu_options o;
    hodu_options_init(&o);
    o.alloc = counting_alloc_fn;
    o.alloc_ud = &ca;
    hodu_vm *vm = hodu_vm_new(&o);
    CHECK(vm != NULL);
    const char *prog = "let w = param(randn([3]))\n"
                       "compiled fn f(x, y) { return (x * w).sum() + y.sum() }\n"
                       "f(randn([3]), randn([2])).backward()\n";
    CHECK_ST(vm, hodu_eval(vm, prog, NULL), HODU_OK);
    hodu_vm_free(vm);
    CHECK_MSG(ca.outstanding == 0, "%zu bytes given back short", ca.outstanding);
}

int main(void) {
    test_memory_limit();
    test_max_steps();
    test_allow_io();
    test_print_hook();
    test_reentrancy();
    test_counting_allocator();
    test_counting_allocator_compiled_backward();
    test_failing_allocator();
    TEST_END();
}
