/* The paths a machine without a usable GPU takes: device strings, moves,
 * device=, compiler = "cuda", set_device, each a clear error at the
 * user's line with the VM still usable afterwards. The driver library is
 * pointed at a missing file (HODU_CUDA_DRIVER) before anything loads, so
 * these run the same on every machine, GPU or not. */
#include "hd_test.h"
#include "hodu.h"
#include "hd_backend.h"

#include <stdlib.h>

/* source fails with a message containing want; then the VM still runs. */
static void expect_error(hodu_vm *vm, const char *src, const char *want) {
    hodu_status st = hodu_eval(vm, src, "<test>");
    const char *msg = hodu_error_message(vm);
    CHECK_MSG(st != HODU_OK && strstr(msg, want), "%s -> %s", src, msg);
    CHECK(hodu_eval(vm, "let ok_after = 1 + 1", "<test>") == HODU_OK);
}

static void check_device_strings(void) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    const hd_backend *be;
    int dev = -1;
    CHECK(hd_backend_parse_device(&ctx, "cuda", &be, &dev) == HD_OK && be == &hd_cuda_backend &&
          dev == 0);
    CHECK(hd_backend_parse_device(&ctx, "cuda:3", &be, &dev) == HD_OK && dev == 3);
    CHECK(hd_backend_parse_device(&ctx, "cpu:0", &be, &dev) == HD_OK && be == &hd_cpu_backend);
    static const char *const bad[] = {
        "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "cudax", "cuda:99999999999", "gpu", "", "cpu:1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(hd_backend_parse_device(&ctx, bad[i], &be, &dev) == HD_ERR_ARGUMENT, "%s",
                  bad[i]);
        CHECK(strstr(ctx.errmsg, "device '") != NULL);
    }
    CHECK(hd_backend_open_device(&ctx, "cuda", &be, &dev) == HD_ERR_RUNTIME);
    CHECK(strstr(ctx.errmsg, "cuda is not available: ") == ctx.errmsg);
    hd_ctx_release(&ctx);
    CHECK(ctx.mem_used == 0);
}

int main(void) {
    setenv("HODU_CUDA_DRIVER", "libhodu-test-no-driver.so.1", 1);
    check_device_strings();
    hodu_vm *vm = hodu_vm_new(NULL);
    CHECK(vm != NULL);
    const char *na = "cuda is not available";
    expect_error(vm, "let a = ones([2]).to(\"cuda\")", na);
    expect_error(vm, "let a = ones([2]).to(\"cuda:0\")", na);
    expect_error(vm, "let a = ones([2]).to(device = \"cuda\")", na);
    expect_error(vm, "let a = zeros([2], device = \"cuda\")", na);
    expect_error(vm, "let a = randn([2], device = \"cuda\")", na);
    expect_error(vm, "let a = tensor([1, 2], device = \"cuda\")", na);
    expect_error(vm, "let a = ones([2]).to(\"gpu\")", "unknown device 'gpu'");
    expect_error(vm, "let a = ones([2]).to(\"cuda:x\")", "bad device 'cuda:x'");
    expect_error(vm, "let x = ones([2])\ncompiled(compiler = \"cuda\") { x = x + 1 }",
                 "compiler 'cuda': cuda is not available");
    expect_error(vm, "let x = ones([2])\ncompiled(device = \"cuda:0\") { x = x + 1 }", na);
    expect_error(vm, "let s = script(\"s\") { output(\"y\", ones([2])) }\ns.set_device(\"cuda:0\")",
                 na);
    expect_error(vm,
                 "let s2 = script(\"s2\", compiler = \"cuda\") { output(\"y\", ones([2])) }\n"
                 "s2.run()",
                 na);
    /* the cpu keeps working, and to("cpu") of a cpu tensor is the tensor */
    CHECK(hodu_eval(vm, "let c = ones([2]).to(\"cpu\")\nassert(c.device == \"cpu\")", "<t>") ==
          HODU_OK);
    hodu_vm_free(vm);
    TEST_END();
}
