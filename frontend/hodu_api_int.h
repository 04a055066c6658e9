/* hodu_api_int: what the files behind include/hodu.h share (internal).
 *
 * The public hodu_vm *, hodu_tensor * and hodu_script * are handles
 * (hodu_api_handle.c), each naming one of the structs below. A VM wraps an
 * hd_vm and keeps the list of its live tensors and scripts, so that
 * hodu_vm_free can release what the host forgot. The structs come from the
 * VM's allocator and count against its memory limit. */
#ifndef HD_HODU_API_INT_H
#define HD_HODU_API_INT_H

#include "hodu.h"
#include "vm_internal.h"

#include <stdatomic.h>
#include <stdint.h>

/* What a handle names (kind in bits 1-2 of its value). */
typedef enum { HD_HANDLE_VM = 1, HD_HANDLE_TENSOR, HD_HANDLE_SCRIPT } hd_handle_kind;

/* A new handle for obj; 0 when memory or the table runs out. */
uintptr_t hd_api_handle_new(void *obj, hd_handle_kind kind);
/* The object of a live handle of this kind; NULL for NULL, a released
 * handle, one of another kind, or any other value. No lock: safe from a
 * signal handler. */
void *hd_api_handle_get(const void *handle, hd_handle_kind kind);
/* Release a handle (a value that is not live is ignored). */
void hd_api_handle_drop(uintptr_t handle);

typedef struct hd_api_vm hd_api_vm;
typedef struct hd_api_tensor hd_api_tensor;
typedef struct hd_api_script hd_api_script;

struct hd_api_tensor {
    uintptr_t handle;
    hd_api_vm *owner;
    hd_api_tensor *prev, *next; /* owner's live tensor handles */
    hd_tensor *t;             /* one reference */
    hd_tensor *copy;          /* contiguous copy for hodu_tensor_data, or NULL */
    uint64_t copy_version;    /* t's storage version when the copy was taken */
};

struct hd_api_vm {
    uintptr_t handle;
    hd_vm *vm;
    hd_api_tensor *tensors; /* live tensor handles */
    hd_api_script *scripts; /* live scripts */
    /* the thread inside hodu_eval / hodu_call / a script run / a global
     * setter (a token: hd_api_enter), 0 when none */
    _Atomic uintptr_t busy;
    char msg[HD_ERRTEXT_MAX];
};

/* Start a call that can fail: clears the last error. */
static inline void hd_api_begin(hd_api_vm *h) {
    hd_vm_clear_error(h->vm);
}

/* Record an argument error for the function fn; returns its status. */
hodu_status hd_api_arg_error(hd_api_vm *h, const char *fn, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Turn the runtime context's pending error into the VM's error. */
hodu_status hd_api_ctx_error(hd_api_vm *h);
/* Enter a call that runs code or changes globals: clears the last error.
 * HODU_ERROR_ARGUMENT when the VM is inside such a call already: from a
 * hook on the same thread with a message naming fn; from another thread
 * without touching the VM at all (its message belongs to the running
 * call). hd_api_leave ends what a successful enter began. */
hodu_status hd_api_enter(hd_api_vm *h, const char *fn);
void hd_api_leave(hd_api_vm *h);
/* The VM, tensor or script a public handle names, or NULL (hd_api_handle_get). */
static inline hd_api_vm *hd_api_vm_of(const hodu_vm *vm) {
    return hd_api_handle_get(vm, HD_HANDLE_VM);
}
static inline hd_api_tensor *hd_api_tensor_of(const hodu_tensor *t) {
    return hd_api_handle_get(t, HD_HANDLE_TENSOR);
}
static inline hd_api_script *hd_api_script_of(const hodu_script *s) {
    return hd_api_handle_get(s, HD_HANDLE_SCRIPT);
}
/* A new handle holding a new reference to t (the caller keeps its own);
 * NULL and a memory error if the handle cannot be allocated. */
hodu_tensor *hd_api_handle(hd_api_vm *h, hd_tensor *t);
/* A tensor handle argument: live and of this VM. *out receives it. */
hodu_status hd_api_check_tensor(hd_api_vm *h, const char *fn, const hodu_tensor *t,
                                hd_api_tensor **out);

/* Scripts (hodu_api_script.c): free every live script of h. */
void hd_api_free_scripts(hd_api_vm *h);
/* Tensors (hodu_api_tensor.c): free one handle's struct and its handle. */
void hd_api_tensor_free(hd_api_tensor *t);

#endif
