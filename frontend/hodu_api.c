/* hodu_api: the embedding API (include/hodu.h): library information, VMs,
 * running source, errors, globals and calls. Tensors are in
 * hodu_api_tensor.c, scripts in hodu_api_script.c. */
#include "hodu_api_int.h"
#include "hd_backend.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The public enums mirror the internal ones value for value. */
_Static_assert((int)HODU_ERROR_ARGUMENT == (int)HD_ERR_ARGUMENT, "hodu_status and hd_status");
_Static_assert((int)HODU_ERROR_MEMORY == (int)HD_ERR_MEMORY, "hodu_status and hd_status");
_Static_assert((int)HODU_BOOL == (int)HD_BOOL && (int)HODU_BF16 == (int)HD_BF16,
               "hodu_dtype and hd_dtype");

/* ---- library ---- */

const char *hodu_version(void) {
    return HODU_VERSION_STRING;
}

const char *hodu_status_name(hodu_status st) {
    static const char *const names[] = {
        "HODU_OK",          "HODU_ERROR_SYNTAX", "HODU_ERROR_RUNTIME",  "HODU_ERROR_MEMORY",
        "HODU_ERROR_LIMIT", "HODU_ERROR_IO",     "HODU_ERROR_ARGUMENT",
    };
    if ((int)st < 0 || (size_t)st >= sizeof names / sizeof names[0]) return "HODU_STATUS_UNKNOWN";
    return names[st];
}

const char *hodu_dtype_name(hodu_dtype dt) {
    if ((int)dt < 0 || (int)dt >= HD_DTYPE_COUNT) return "invalid";
    return hd_dtype_name((hd_dtype)dt);
}

size_t hodu_dtype_size(hodu_dtype dt) {
    if ((int)dt < 0 || (int)dt >= HD_DTYPE_COUNT) return 0;
    return (size_t)hd_dtype_size((hd_dtype)dt);
}

void hodu_options_init(hodu_options *opts) {
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    opts->allow_io = 1;
}

/* ---- errors ---- */

/* "a" or "an" before a type name ("an int", "a list"). */
static const char *article(const char *word) {
    return strchr("aeiou", word[0]) && word[0] ? "an" : "a";
}

hodu_status hd_api_arg_error(hd_api_vm *h, const char *fn, const char *fmt, ...) {
    char msg[HD_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return (hodu_status)hd_vm_error(h->vm, HD_ERR_ARGUMENT, "%s: %s", fn, msg);
}

hodu_status hd_api_ctx_error(hd_api_vm *h) {
    return (hodu_status)hd_vm_from_ctx(h->vm, HD_OK);
}

/* This thread's token: the address of a thread-local byte. */
static _Thread_local char hd_api_thread;

hodu_status hd_api_enter(hd_api_vm *h, const char *fn) {
    uintptr_t me = (uintptr_t)&hd_api_thread, was = 0;
    if (atomic_compare_exchange_strong(&h->busy, &was, me)) {
        hd_api_begin(h);
        return HODU_OK;
    }
    if (was != me) return HODU_ERROR_ARGUMENT; /* another thread is inside */
    hd_api_begin(h);
    return hd_api_arg_error(h, fn, "the VM is running code (called from a hook?)");
}

void hd_api_leave(hd_api_vm *h) {
    atomic_store(&h->busy, 0);
}

const char *hodu_error_message(hodu_vm *vm) {
    hd_api_vm *h = hd_api_vm_of(vm);
    if (!h)
        return vm ? "not a live VM (freed by hodu_vm_free, or not made by hodu_vm_new)"
                  : "no VM (hodu_vm_new returned NULL, or NULL was passed)";
    snprintf(h->msg, sizeof h->msg, "%s", hd_vm_error_text(h->vm));
    size_t n = strlen(h->msg);
    while (n && h->msg[n - 1] == '\n') h->msg[--n] = 0;
    return h->msg;
}

hodu_status hodu_error_status(hodu_vm *vm) {
    hd_api_vm *h = hd_api_vm_of(vm);
    return h ? (hodu_status)h->vm->err : HODU_ERROR_ARGUMENT;
}

/* ---- VMs ---- */

static int options_valid(const hodu_options *o) {
    return o->num_threads >= 0;
}

hodu_vm *hodu_vm_new(const hodu_options *opts) {
    hodu_options defaults;
    hodu_options_init(&defaults);
    if (!opts) opts = &defaults;
    if (!options_valid(opts)) return NULL;
    hd_vm_options o;
    memset(&o, 0, sizeof o);
    o.memory_limit = opts->memory_limit;
    o.max_steps = opts->max_steps;
    o.time_limit_ms = opts->time_limit_ms;
    o.allow_io = opts->allow_io != 0;
    o.alloc = opts->alloc;
    o.alloc_ud = opts->alloc_ud;
    o.nthreads = opts->num_threads;
    o.stdlib_dir = opts->stdlib_path;
    hd_vm *vm = hd_vm_new(&o);
    if (!vm) return NULL;
    hd_api_vm *h = hd_ctx_alloc(hd_vm_ctx(vm), sizeof *h);
    if (h) {
        memset(h, 0, sizeof *h);
        h->vm = vm;
        h->handle = hd_api_handle_new(h, HD_HANDLE_VM);
    }
    if (!h || !h->handle) {
        if (h) hd_ctx_free(hd_vm_ctx(vm), h, sizeof *h);
        hd_vm_free(vm);
        return NULL;
    }
    if (opts->write) hd_vm_set_writer(vm, opts->write, opts->write_ud);
    return (hodu_vm *)h->handle;
}

void hodu_vm_free(hodu_vm *vm) {
    hd_api_vm *h = hd_api_vm_of(vm);
    /* From a hook while the VM runs: refused (the frames on the C stack
     * still use it); there is no status to return. */
    if (!h || atomic_load(&h->busy)) return;
    hd_api_handle_drop(h->handle);
    hd_api_free_scripts(h);
    while (h->tensors) hd_api_tensor_free(h->tensors);
    hd_vm *v = h->vm;
    hd_ctx_free(hd_vm_ctx(v), h, sizeof *h);
    hd_vm_free(v);
}

void hodu_vm_interrupt(hodu_vm *vm) {
    hd_api_vm *h = hd_api_vm_of(vm);
    if (h) hd_vm_interrupt(h->vm);
}

hodu_status hodu_vm_set_strategy(hodu_vm *vm, const char *name) {
    hd_api_vm *h = hd_api_vm_of(vm);
    if (!h) return HODU_ERROR_ARGUMENT;
    if (hd_api_enter(h, "hodu_vm_set_strategy")) return HODU_ERROR_ARGUMENT;
    hd_status st = name ? hd_vm_set_strategy(h->vm, name)
                        : (hd_status)hd_api_arg_error(h, "hodu_vm_set_strategy", "name is NULL");
    hd_api_leave(h);
    return (hodu_status)st;
}

hodu_status hodu_eval(hodu_vm *vm, const char *source, const char *chunk_name) {
    hd_api_vm *h = hd_api_vm_of(vm);
    if (!h) return HODU_ERROR_ARGUMENT;
    if (hd_api_enter(h, "hodu_eval")) return HODU_ERROR_ARGUMENT;
    hd_status st = source ? hd_vm_eval(h->vm, source, strlen(source),
                                       chunk_name ? chunk_name : "<host>", NULL, NULL)
                          : (hd_status)hd_api_arg_error(h, "hodu_eval", "source is NULL");
    hd_api_leave(h);
    return (hodu_status)st;
}

hodu_status hodu_eval_file(hodu_vm *vm, const char *path) {
    hd_api_vm *h = hd_api_vm_of(vm);
    if (!h) return HODU_ERROR_ARGUMENT;
    if (hd_api_enter(h, "hodu_eval_file")) return HODU_ERROR_ARGUMENT;
    hd_status st = path ? hd_vm_eval_file(h->vm, path, NULL)
                        : (hd_status)hd_api_arg_error(h, "hodu_eval_file", "path is NULL");
    hd_api_leave(h);
    return (hodu_status)st;
}

/* ---- globals ---- */

static const char *const hd_keywords[] = {
    "let",   "fn",       "return",   "if",     "else",    "for",          "in",     "while",
    "break", "continue", "compiled", "import", "as",      "class",        "true",   "false",
    "none",  "and",      "or",       "not",    "no_grad", "grad_context", "script",
};

/* A name Hodu code can refer to: an identifier that is not a keyword. */
static int is_identifier(const char *s) {
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_')) return 0;
    for (const char *p = s + 1; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_'))
            return 0;
    for (size_t i = 0; i < sizeof hd_keywords / sizeof hd_keywords[0]; i++)
        if (strcmp(s, hd_keywords[i]) == 0) return 0;
    return 1;
}

static hodu_status check_name(hd_api_vm *h, const char *fn, const char *name) {
    if (!name) return hd_api_arg_error(h, fn, "name is NULL");
    if (!is_identifier(name))
        return hd_api_arg_error(h, fn, "'%s' is not a valid global name", name);
    return HODU_OK;
}

/* Bind a global of the main module (a new slot if the name is new); takes v. */
static hodu_status set_global_value(hd_api_vm *h, const char *name, hd_value v) {
    hd_vm *vm = h->vm;
    hd_module *m = vm->main;
    hd_value *slot = hd_dict_get(m->names, name);
    if (!slot) {
        int i = m->nglobals;
        if (hd_module_grow(vm, m, i + 1) != HD_OK ||
            hd_dict_set(vm, m->names, name, hd_int(i)) != HD_OK) {
            hd_value_unref(vm, v);
            return (hodu_status)vm->err;
        }
        slot = hd_dict_get(m->names, name);
    }
    hd_value *g = &m->globals[slot->as.i];
    hd_value old = *g;
    *g = v;
    hd_value_unref(vm, old);
    return HODU_OK;
}

hodu_status hodu_set_global(hodu_vm *vm, const char *name, hodu_tensor *t) {
    hd_api_vm *h = hd_api_vm_of(vm);
    if (!h) return HODU_ERROR_ARGUMENT;
    if (hd_api_enter(h, "hodu_set_global")) return HODU_ERROR_ARGUMENT;
    hodu_status st = HODU_ERROR_ARGUMENT;
    hd_api_tensor *ht;
    if (!check_name(h, "hodu_set_global", name) &&
        !hd_api_check_tensor(h, "hodu_set_global", t, &ht))
        st = set_global_value(h, name, hd_tensor_value(hd_tensor_ref(ht->t)));
    hd_api_leave(h);
    return st;
}

hodu_status hodu_set_global_number(hodu_vm *vm, const char *name, double value) {
    hd_api_vm *h = hd_api_vm_of(vm);
    if (!h) return HODU_ERROR_ARGUMENT;
    if (hd_api_enter(h, "hodu_set_global_number")) return HODU_ERROR_ARGUMENT;
    hodu_status st = HODU_ERROR_ARGUMENT;
    if (!check_name(h, "hodu_set_global_number", name))
        st = set_global_value(h, name, hd_float(value));
    hd_api_leave(h);
    return st;
}

/* The global called name (borrowed), or NULL and an error naming fn. */
static hd_value *find_global(hd_api_vm *h, const char *fn, const char *name) {
    if (!name) {
        hd_api_arg_error(h, fn, "name is NULL");
        return NULL;
    }
    hd_value *v = hd_vm_get_global(h->vm, name);
    if (!v) hd_vm_error(h->vm, HD_ERR_RUNTIME, "%s: no global named '%s'", fn, name);
    return v;
}

hodu_tensor *hodu_get_global_tensor(hodu_vm *vm, const char *name) {
    hd_api_vm *h = hd_api_vm_of(vm);
    if (!h) return NULL;
    hd_api_begin(h);
    hd_value *v = find_global(h, "hodu_get_global_tensor", name);
    if (!v) return NULL;
    if (v->type != HD_V_TENSOR) {
        const char *type = hd_value_type_name(*v);
        hd_vm_error(h->vm, HD_ERR_RUNTIME,
                    "hodu_get_global_tensor: global '%s' is %s %s, not a tensor", name,
                    article(type), type);
        return NULL;
    }
    return hd_api_handle(h, v->as.t);
}

/* The one element of t, read on the host: a device tensor through a copy. */
static hodu_status global_tensor_number(hd_api_vm *h, hd_tensor *t, double *out) {
    hd_tensor *host = hd_tensor_to_host(hd_vm_ctx(h->vm), t);
    if (!host) return (hodu_status)hd_vm_from_ctx(h->vm, HD_ERR_RUNTIME);
    *out = hd_tensor_get(host, 0);
    hd_tensor_unref(host);
    return HODU_OK;
}

hodu_status hodu_get_global_number(hodu_vm *vm, const char *name, double *out) {
    hd_api_vm *h = hd_api_vm_of(vm);
    if (!h) return HODU_ERROR_ARGUMENT;
    hd_api_begin(h);
    if (!out) return hd_api_arg_error(h, "hodu_get_global_number", "out is NULL");
    hd_value *v = find_global(h, "hodu_get_global_number", name);
    if (!v) return (hodu_status)h->vm->err;
    switch (v->type) {
    case HD_V_INT: *out = (double)v->as.i; return HODU_OK;
    case HD_V_FLOAT: *out = v->as.f; return HODU_OK;
    case HD_V_BOOL: *out = v->as.b; return HODU_OK;
    case HD_V_TENSOR:
        if (v->as.t->numel == 1 && v->as.t->storage) return global_tensor_number(h, v->as.t, out);
        break;
    default: break;
    }
    const char *type =
        v->type == HD_V_TENSOR ? "tensor of several elements" : hd_value_type_name(*v);
    return (hodu_status)hd_vm_error(h->vm, HD_ERR_RUNTIME,
                                    "hodu_get_global_number: global '%s' is %s %s, not a number",
                                    name, article(type), type);
}

/* ---- calls ---- */

/* The value fn_name names: a global, then members for each ".part". */
static hd_status find_callee(hd_api_vm *h, const char *fn_name, hd_value *out) {
    char buf[256];
    const char *dot = strchr(fn_name, '.');
    size_t n = dot ? (size_t)(dot - fn_name) : strlen(fn_name);
    if (n == 0 || n >= sizeof buf)
        return (hd_status)hd_api_arg_error(h, "hodu_call", "bad name '%s'", fn_name);
    memcpy(buf, fn_name, n);
    buf[n] = 0;
    hd_value *g = find_global(h, "hodu_call", buf);
    if (!g) return h->vm->err;
    hd_value v = hd_value_ref(*g);
    while (dot) {
        const char *part = dot + 1;
        dot = strchr(part, '.');
        n = dot ? (size_t)(dot - part) : strlen(part);
        if (n == 0 || n >= sizeof buf) {
            hd_value_unref(h->vm, v);
            return (hd_status)hd_api_arg_error(h, "hodu_call", "bad name '%s'", fn_name);
        }
        memcpy(buf, part, n);
        buf[n] = 0;
        hd_value m;
        hd_status st = hd_eval_get_member(h->vm, v, buf, &m);
        hd_value_unref(h->vm, v);
        if (st != HD_OK) return st;
        v = m;
    }
    *out = v;
    return HD_OK;
}

/* The call's result as a handle: tensors as they are, numbers and bools as
 * 0-d tensors, none as NULL. Takes v. */
static hodu_status call_result(hd_api_vm *h, const char *fn_name, hd_value v,
                               hodu_tensor **result) {
    hd_ctx *ctx = hd_vm_ctx(h->vm);
    hd_tensor *t = NULL;
    switch (v.type) {
    case HD_V_NONE: return HODU_OK;
    case HD_V_TENSOR: t = hd_tensor_ref(v.as.t); break;
    case HD_V_FLOAT: t = hd_tensor_scalar(ctx, HD_F64, v.as.f); break;
    case HD_V_BOOL: t = hd_tensor_scalar(ctx, HD_BOOL, v.as.b); break;
    case HD_V_INT:
        if ((t = hd_tensor_new(ctx, HD_I64, NULL, 0))) *(int64_t *)hd_tensor_data(t) = v.as.i;
        break;
    default: {
        const char *type = hd_value_type_name(v);
        hodu_status st = (hodu_status)hd_vm_error(
            h->vm, HD_ERR_RUNTIME, "hodu_call: %s returned %s %s, not a tensor or a number",
            fn_name, article(type), type);
        hd_value_unref(h->vm, v);
        return st;
    }
    }
    hd_value_unref(h->vm, v);
    if (!t) return hd_api_ctx_error(h);
    *result = hd_api_handle(h, t);
    hd_tensor_unref(t);
    return *result ? HODU_OK : (hodu_status)h->vm->err;
}

static hodu_status check_call_args(hd_api_vm *h, const char *fn_name, hodu_tensor **args,
                                   int nargs) {
    if (!fn_name) return hd_api_arg_error(h, "hodu_call", "fn_name is NULL");
    if (nargs < 0) return hd_api_arg_error(h, "hodu_call", "nargs is negative (%d)", nargs);
    if (nargs > 0 && !args) return hd_api_arg_error(h, "hodu_call", "args is NULL");
    for (int i = 0; i < nargs; i++) {
        hd_api_tensor *t = hd_api_tensor_of(args[i]);
        if (!args[i]) return hd_api_arg_error(h, "hodu_call", "args[%d] is NULL", i);
        if (!t) return hd_api_arg_error(h, "hodu_call", "args[%d] is not a live tensor handle", i);
        if (t->owner != h)
            return hd_api_arg_error(h, "hodu_call", "args[%d] belongs to another VM", i);
    }
    return HODU_OK;
}

#define HD_CALL_STACK_ARGS 8

static hodu_status call_entered(hd_api_vm *h, const char *fn_name, hodu_tensor **args, int nargs,
                                hodu_tensor **result) {
    if (check_call_args(h, fn_name, args, nargs)) return HODU_ERROR_ARGUMENT;
    hd_vm *vm = h->vm;
    hd_value stack[HD_CALL_STACK_ARGS], *av = stack, callee, out = hd_none();
    if (nargs > HD_CALL_STACK_ARGS &&
        !(av = hd_ctx_alloc(hd_vm_ctx(vm), (size_t)nargs * sizeof *av)))
        return hd_api_ctx_error(h);
    /* references of their own: a hook may release the handles meanwhile */
    for (int i = 0; i < nargs; i++)
        av[i] = hd_tensor_value(hd_tensor_ref(hd_api_tensor_of(args[i])->t));
    hd_status st = find_callee(h, fn_name, &callee);
    if (st == HD_OK) {
        hd_vm_run_begin(vm);
        st = hd_vm_call(vm, callee, av, nargs, NULL, 0, &out);
        hd_value_unref(vm, callee);
    }
    for (int i = 0; i < nargs; i++) hd_tensor_unref(av[i].as.t);
    if (av != stack) hd_ctx_free(hd_vm_ctx(vm), av, (size_t)nargs * sizeof *av);
    if (st != HD_OK) return (hodu_status)st;
    if (!result) {
        hd_value_unref(vm, out);
        return HODU_OK;
    }
    return call_result(h, fn_name, out, result);
}

hodu_status hodu_call(hodu_vm *vm, const char *fn_name, hodu_tensor **args, int nargs,
                      hodu_tensor **result) {
    hd_api_vm *h = hd_api_vm_of(vm);
    if (result) *result = NULL;
    if (!h) return HODU_ERROR_ARGUMENT;
    if (hd_api_enter(h, "hodu_call")) return HODU_ERROR_ARGUMENT;
    hodu_status st = call_entered(h, fn_name, args, nargs, result);
    hd_api_leave(h);
    return st;
}
