/* hodu_api_script: saved scripts (.hoduscript) in the embedding API, over
 * runtime/hd_script.h. */
#include "hodu_api_int.h"
#include "hd_op.h"
#include "hd_script.h"

#include <string.h>

struct hd_api_script {
    uintptr_t handle;
    hd_api_vm *owner;
    hd_api_script *prev, *next; /* owner's live scripts */
    hd_script *s;
};

static void script_unlink(hd_api_script *hs) {
    hd_api_vm *h = hs->owner;
    if (hs->prev)
        hs->prev->next = hs->next;
    else
        h->scripts = hs->next;
    if (hs->next) hs->next->prev = hs->prev;
}

static void script_free(hd_api_script *hs) {
    hd_api_handle_drop(hs->handle);
    script_unlink(hs);
    hd_script_free(hs->s);
    hd_ctx_free(hd_vm_ctx(hs->owner->vm), hs, sizeof *hs);
}

void hodu_script_free(hodu_script *handle) {
    hd_api_script *hs = hd_api_script_of(handle);
    if (hs) script_free(hs);
}

void hd_api_free_scripts(hd_api_vm *h) {
    while (h->scripts) script_free(h->scripts);
}

hodu_script *hodu_script_load(hodu_vm *vm, const char *path) {
    hd_api_vm *h = hd_api_vm_of(vm);
    if (!h) return NULL;
    hd_api_begin(h);
    if (!path) {
        hd_api_arg_error(h, "hodu_script_load", "path is NULL");
        return NULL;
    }
    hd_ctx *ctx = hd_vm_ctx(h->vm);
    hd_api_script *hs = hd_ctx_alloc(ctx, sizeof *hs);
    if (!hs) {
        hd_api_ctx_error(h);
        return NULL;
    }
    memset(hs, 0, sizeof *hs);
    if (hd_script_load(ctx, path, &hs->s) != HD_OK) {
        hd_api_ctx_error(h);
        hd_ctx_free(ctx, hs, sizeof *hs);
        return NULL;
    }
    if (!(hs->handle = hd_api_handle_new(hs, HD_HANDLE_SCRIPT))) {
        hd_script_free(hs->s);
        hd_ctx_free(ctx, hs, sizeof *hs);
        hd_vm_error(h->vm, HD_ERR_MEMORY, "out of memory (a script handle)");
        return NULL;
    }
    hs->owner = h;
    hs->next = h->scripts;
    if (h->scripts) h->scripts->prev = hs;
    h->scripts = hs;
    return (hodu_script *)hs->handle;
}

hodu_status hodu_script_set_input(hodu_script *handle, const char *name, hodu_tensor *t) {
    hd_api_script *hs = hd_api_script_of(handle);
    if (!hs) return HODU_ERROR_ARGUMENT;
    hd_api_vm *h = hs->owner;
    hd_api_begin(h);
    if (!name) return hd_api_arg_error(h, "hodu_script_set_input", "name is NULL");
    hd_api_tensor *ht;
    if (hd_api_check_tensor(h, "hodu_script_set_input", t, &ht)) return HODU_ERROR_ARGUMENT;
    if (hd_script_set_input(hs->s, name, ht->t) != HD_OK) return hd_api_ctx_error(h);
    return HODU_OK;
}

hodu_status hodu_script_run(hodu_script *handle) {
    hd_api_script *hs = hd_api_script_of(handle);
    if (!hs) return HODU_ERROR_ARGUMENT;
    hd_api_vm *h = hs->owner;
    if (hd_api_enter(h, "hodu_script_run")) return HODU_ERROR_ARGUMENT;
    hd_vm_run_begin(h->vm); /* interrupts and time_limit_ms reach its kernels */
    hd_status st = hd_script_run(hs->s);
    hd_api_leave(h);
    return st == HD_OK ? HODU_OK : hd_api_ctx_error(h);
}

hodu_tensor *hodu_script_output(hodu_script *handle, const char *name) {
    hd_api_script *hs = hd_api_script_of(handle);
    if (!hs) return NULL;
    hd_api_vm *h = hs->owner;
    hd_api_begin(h);
    if (!name) {
        hd_api_arg_error(h, "hodu_script_output", "name is NULL");
        return NULL;
    }
    hd_tensor *t = hd_script_output(hs->s, name);
    if (!t) {
        hd_vm_error(h->vm, HD_ERR_RUNTIME,
                    "hodu_script_output: script '%s' has no output '%s' (or it has not run)",
                    hd_script_name(hs->s), name);
        return NULL;
    }
    return hd_api_handle(h, t);
}

hodu_tensor *hodu_script_state(hodu_script *handle, const char *name) {
    hd_api_script *hs = hd_api_script_of(handle);
    if (!hs) return NULL;
    hd_api_vm *h = hs->owner;
    hd_api_begin(h);
    if (!name) {
        hd_api_arg_error(h, "hodu_script_state", "name is NULL");
        return NULL;
    }
    for (int i = 0; i < hd_script_nstate(hs->s); i++) {
        const hd_script_var *v = hd_script_state_at(hs->s, i);
        if (strcmp(v->name, name)) continue;
        if (v->t) return hd_api_handle(h, v->t);
        hd_vm_error(h->vm, HD_ERR_RUNTIME, "hodu_script_state: state '%s' of script '%s' is none",
                    name, hd_script_name(hs->s));
        return NULL;
    }
    hd_vm_error(h->vm, HD_ERR_RUNTIME, "hodu_script_state: script '%s' has no state '%s'",
                hd_script_name(hs->s), name);
    return NULL;
}

hodu_status hodu_script_set_state(hodu_script *handle, const char *name, hodu_tensor *t) {
    hd_api_script *hs = hd_api_script_of(handle);
    if (!hs) return HODU_ERROR_ARGUMENT;
    hd_api_vm *h = hs->owner;
    hd_api_begin(h);
    if (!name) return hd_api_arg_error(h, "hodu_script_set_state", "name is NULL");
    hd_api_tensor *ht;
    if (hd_api_check_tensor(h, "hodu_script_set_state", t, &ht)) return HODU_ERROR_ARGUMENT;
    hd_ctx *ctx = &h->vm->ctx;
    /* the script's own copy: the host's memory may go away */
    hd_tensor *c = hd_tensor_new(ctx, ht->t->dtype, ht->t->shape, ht->t->ndim);
    hd_status st = c ? hd_tensor_copy_into(ctx, c, ht->t) : ctx->status;
    if (!st) st = hd_script_state_put(hs->s, name, c);
    hd_tensor_unref(c);
    return st == HD_OK ? HODU_OK : hd_api_ctx_error(h);
}
