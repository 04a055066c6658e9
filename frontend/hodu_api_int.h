/* hodu_api_int: what the files behind include/hodu.h share (internal).
 *
 * A hodu_vm wraps an hd_vm and keeps the list of its live handles, so that
 * hodu_vm_free can release what the host forgot. Handles come from the
 * VM's allocator and count against its memory limit. */
#ifndef HD_HODU_API_INT_H
#define HD_HODU_API_INT_H

#include "hodu.h"
#include "vm_internal.h"

#include <stdatomic.h>
#include <stdint.h>

struct hodu_tensor {
    hodu_vm *owner;
    hodu_tensor *prev, *next; /* owner's live tensor handles */
    hd_tensor *t;             /* one reference */
    hd_tensor *copy;          /* contiguous copy for hodu_tensor_data, or NULL */
    uint64_t copy_version;    /* t's storage version when the copy was taken */
};

struct hodu_vm {
    hd_vm *vm;
    hodu_tensor *tensors; /* live tensor handles */
    hodu_script *scripts; /* live scripts */
    /* the thread inside hodu_eval / hodu_call / a script run / a global
     * setter (a token: hd_api_enter), 0 when none */
    _Atomic uintptr_t busy;
    char msg[HD_ERRTEXT_MAX];
};

/* Start a call that can fail: clears the last error. */
static inline void hd_api_begin(hodu_vm *h) {
    hd_vm_clear_error(h->vm);
}

/* Record an argument error for the function fn; returns its status. */
hodu_status hd_api_arg_error(hodu_vm *h, const char *fn, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Turn the runtime context's pending error into the VM's error. */
hodu_status hd_api_ctx_error(hodu_vm *h);
/* Enter a call that runs code or changes globals: clears the last error.
 * HODU_ERROR_ARGUMENT when the VM is inside such a call already: from a
 * hook on the same thread with a message naming fn; from another thread
 * without touching the VM at all (its message belongs to the running
 * call). hd_api_leave ends what a successful enter began. */
hodu_status hd_api_enter(hodu_vm *h, const char *fn);
void hd_api_leave(hodu_vm *h);
/* A new handle holding a new reference to t (the caller keeps its own);
 * NULL and a memory error if the handle cannot be allocated. */
hodu_tensor *hd_api_handle(hodu_vm *h, hd_tensor *t);
/* A tensor handle argument: not NULL and of this VM. */
hodu_status hd_api_check_tensor(hodu_vm *h, const char *fn, const hodu_tensor *t);

/* Scripts (hodu_api_script.c): free every live script of h. */
void hd_api_free_scripts(hodu_vm *h);

#endif
