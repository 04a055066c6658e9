/* Built by install_test.sh against an installed libhodu.so: imports a
 * module that exists only in the prefix's share/hodu/stdlib. */
#include <hodu.h>

#include <stdio.h>

int main(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    double answer = 0;
    if (!vm ||
        hodu_eval(vm, "import install_probe\nlet a = install_probe.answer", NULL) != HODU_OK ||
        hodu_get_global_number(vm, "a", &answer) != HODU_OK || answer != 42) {
        fprintf(stderr, "probe: %s\n", hodu_error_message(vm));
        hodu_vm_free(vm);
        return 1;
    }
    hodu_vm_free(vm);
    return 0;
}
