/* script_state: the state of a script block.
 *
 * A script("name") { } block that writes tensors in place (a parameter
 * updated by an optimizer) or leaves traced tensors in places outside it
 * (an optimizer's buffers, its step count, gradients, an outer variable)
 * has state: each such tensor is a variable of the script, read by the
 * graph before a run (input "$name") and written by it (output "$name").
 * The name is the tensor's path from the block ("model.weight",
 * "opt.m[0]"). The script object keeps the values; after each run they are
 * written back to the places they came from, as eager code would leave
 * them. */
#ifndef HD_SCRIPT_STATE_H
#define HD_SCRIPT_STATE_H

#include "compiled_int.h"
#include "hd_script.h"

/* Where a variable lives in the program: a list item, an object's field, a
 * dict entry, a module global, a captured variable's cell, or a tensor's
 * .grad. A variable written in place has none (it is the tensor itself). */
typedef struct hd_script_place {
    hd_value holder; /* held; none when nothing is written back */
    int64_t index;   /* list item, module global */
    char *key;       /* object field, dict key */
} hd_script_place;

/* Trace block n (at frame f, named name) into a script: without state, as a
 * plain graph; with state, the heap is put back as it was before the block
 * and *places gets one place per state variable (*nplaces of them). The
 * error is unlocated. */
hd_status hd_script_trace_block(hd_vm *vm, hd_frame *f, const hd_ast *n, const char *name,
                                hd_script **out, hd_script_place **places, int *nplaces);
/* Before a run: the values the program left at the places of the
 * variables the graph reads, when they changed (an eager zero_grad, a
 * buffer replaced). A value of another dtype or shape is an error. */
hd_status hd_script_places_read(hd_vm *vm, hd_script *s, const hd_script_place *places, int n);
/* After a run: each variable's value to its place. */
hd_status hd_script_places_write(hd_vm *vm, const hd_script *s, const hd_script_place *places,
                                 int n);
void hd_script_places_free(hd_vm *vm, hd_script_place *places, int n);

#endif
