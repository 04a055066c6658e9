/* Values of device tensors host code needs come through a copy: on the
 * emulated device (and a GPU) device memory faults when host code reads
 * it. Needs a GPU (or the emulator): without one the test reports
 * SKIPPED (77). */
#include "hd_compile.h"
#include "hd_test.h"
#include "hd_test_trace.h"
#include "hodu.h"
#include "hd_backend.h"

/* hodu_get_global_number of a one-element device tensor: its value (it
 * was refused as "a tensor of several elements"). */
static void check_global_number(hodu_vm *vm) {
    CHECK(hodu_eval(vm,
                    "let g = tensor([2.5, 7.0], device = \"cuda\")\nlet one = g[1]\n"
                    "let two = g",
                    "<test>") == HODU_OK);
    double d = 0;
    CHECK(hodu_get_global_number(vm, "one", &d) == HODU_OK && d == 7.0);
    CHECK(hodu_get_global_number(vm, "two", &d) != HODU_OK);
    CHECK(strstr(hodu_error_message(vm), "several elements") != NULL);
}

static hd_status add_body(hd_ctx *ctx, hd_tensor *const *in, hd_tensor **out, void *ud) {
    (void)ud;
    return op2(ctx, HD_OP_ADD, in[0], in[1], &out[0]);
}

/* Code compiled for the cpu given a number that lives on the device (it
 * follows the other inputs' device, as in eager ops): x + n with n copied
 * to the host first (interp ran the cpu copy kernel on it, llvm refused
 * it). */
static void check_cpu_code_device_number(const char *compiler) {
    hd_ctx ctx;
    hd_ctx_init(&ctx, NULL, NULL);
    const hd_jit_compiler *c = NULL;
    hd_jit_options opt;
    hd_jit_options_init(&opt);
    if (hd_jit_compiler_find(&ctx, compiler, &c) || c->available(&ctx, &opt)) {
        hd_ctx_release(&ctx); /* llvm: not in this build */
        return;
    }
    int64_t two = 2;
    hd_tensor *x = hd_tensor_new(&ctx, HD_F32, &two, 1), *n = hd_tensor_number(&ctx, HD_F32, 5);
    hd_tensor *dn = NULL, *y = NULL;
    hd_dtype_store(HD_F32, x->storage->data, 0, 1.0);
    hd_dtype_store(HD_F32, x->storage->data, 1, 2.0);
    CHECK(hd_tensor_to_device(&ctx, n, &hd_cuda_backend, 0, &dn) == HD_OK && dn->number);
    hd_tensor *in[2] = {x, dn};
    hd_ir_graph *g = trace_body(&ctx, "add", add_body, in, 2, 1, NULL);
    hd_jit_exec *e = NULL;
    CHECK(g && c->compile(&ctx, g, &opt, &e) == HD_OK);
    CHECK_MSG(e && c->run(&ctx, e, in, 2, &y, 1) == HD_OK, "%s: %s", compiler, ctx.errmsg);
    CHECK(y && hd_tensor_is_cpu(y) && hd_tensor_get(y, 0) == 6.0 && hd_tensor_get(y, 1) == 7.0);
    hd_tensor_unref(y);
    if (e) c->free(&ctx, e);
    hd_ir_graph_free(g);
    hd_tensor_unref(dn);
    hd_tensor_unref(n);
    hd_tensor_unref(x);
    hd_ctx_release(&ctx);
}

int main(void) {
    hd_ctx probe;
    hd_ctx_init(&probe, NULL, NULL);
    int gpu = hd_cuda_backend.available(&probe, 0) == HD_OK;
    hd_ctx_release(&probe);
    if (!gpu) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    hodu_vm *vm = hodu_vm_new(NULL);
    CHECK(vm != NULL);
    check_global_number(vm);
    check_cpu_code_device_number("interp");
    check_cpu_code_device_number("llvm");
    hodu_vm_free(vm);
    TEST_END();
}
