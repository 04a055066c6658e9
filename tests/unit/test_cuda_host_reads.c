/* Values of device tensors the embedding API hands to the host come
 * through a copy: on the emulated device (and a GPU) device memory faults
 * when host code reads it. Needs a GPU (or the emulator): without one the
 * test reports SKIPPED (77). */
#include "hd_test.h"
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
    hodu_vm_free(vm);
    TEST_END();
}
