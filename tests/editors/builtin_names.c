/* Prints every global name the VM defines before any program runs (the
 * builtins and the dtype names), one per line, for the editor grammars'
 * test (tests/editors/check_grammars.sh). Names starting with '_' are
 * internal and left out.
 *
 *   builtin_names                                                      */
#include "vm_internal.h"

#include <stdio.h>

int main(void) {
    hd_vm *vm = hd_vm_new(NULL);
    if (!vm) {
        fprintf(stderr, "builtin_names: cannot create the VM\n");
        return 1;
    }
    hd_dict *d = hd_as_dict(vm->builtin_index);
    for (int64_t i = 0; i < d->len; i++)
        if (d->keys[i]->chars[0] != '_') printf("%s\n", d->keys[i]->chars);
    hd_vm_free(vm);
    return 0;
}
