/* Statuses a host can rely on: out of memory inside compiled code (a
 * compiled block, a compiled fn, each compiler) is HODU_ERROR_MEMORY, as it
 * is in eager code, and the VM stays usable. */
#include "api_test.h"

static void test_compiled_oom(void) {
    hodu_options o;
    hodu_options_init(&o);
    o.memory_limit = (size_t)64 << 20;
    /* a 100 MB product inside the graph, under a 64 MiB limit */
    const char *const progs[] = {
        "let x = ones([5000])\nlet s = 0\n"
        "compiled { s = (x.reshape([5000, 1]) @ x.reshape([1, 5000])).exp().sum() }",
        "let x = ones([5000])\n"
        "compiled fn f(a) { return (a.reshape([5000, 1]) @ a.reshape([1, 5000])).exp().sum() }\n"
        "let s = f(x)",
        "let x = ones([5000])\nlet s = 0\ncompiled(compiler = \"interp\") {\n"
        "    s = (x.reshape([5000, 1]) @ x.reshape([1, 5000])).exp().sum()\n}",
        "let x = ones([5000])\nlet s = 0\ncompiled(compiler = \"llvm\") {\n"
        "    s = (x.reshape([5000, 1]) @ x.reshape([1, 5000])).exp().sum()\n}",
    };
    for (size_t i = 0; i < sizeof progs / sizeof *progs; i++) {
        hodu_vm *vm = hodu_vm_new(&o);
        hodu_status st = hodu_eval(vm, progs[i], "oom.hodu");
        if (st == HODU_ERROR_RUNTIME && strstr(hodu_error_message(vm), "llvm") &&
            !strstr(hodu_error_message(vm), "out of memory")) {
            printf("no llvm compiler: case %zu left out\n", i);
            hodu_vm_free(vm);
            continue;
        }
        CHECK_ST(vm, st, HODU_ERROR_MEMORY);
        CHECK_ERR(vm, "out of memory");
        CHECK_ERR(vm, "oom.hodu:");
        CHECK_OK(vm, hodu_eval(vm, "let fine = ones([10]).sum()", NULL));
        hodu_vm_free(vm);
    }
}

int main(void) {
    test_compiled_oom();
    TEST_END();
}
