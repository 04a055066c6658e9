/* eval_try.c: errors as values. `try { } catch e { }` runs its catch block
 * with the error as an Error object (message, kind, file, line, col,
 * trace); `throw` raises one, from a message or a caught Error.
 *
 * A stop is not caught: an interrupt, a step or time limit, or the call
 * depth limit (status HD_ERR_LIMIT) ends the program whatever it catches,
 * so a host's limits always hold. Everything else is: runtime, syntax (of
 * an imported module), out of memory, files, arguments. The evaluator
 * unwinds on the C stack, putting back what it changed on the way
 * (gradient modes, loops' and comprehensions' state), so after a catch the
 * VM is as it was before the try, with the try block's own effects. */
#include "compiled.h"
#include "eval.h"
#include "vm_internal.h"

#include <string.h>

static const struct {
    hd_status st;
    const char *kind;
} try_kinds[] = {
    {HD_ERR_RUNTIME, "runtime"}, {HD_ERR_SYNTAX, "syntax"},     {HD_ERR_MEMORY, "memory"},
    {HD_ERR_IO, "io"},           {HD_ERR_ARGUMENT, "argument"},
};

static const char *try_kind_name(hd_status st) {
    for (size_t i = 0; i < sizeof try_kinds / sizeof *try_kinds; i++)
        if (try_kinds[i].st == st) return try_kinds[i].kind;
    return "runtime";
}

/* The status of a kind's name; HD_OK for none. */
static hd_status try_kind_status(const char *kind) {
    for (size_t i = 0; i < sizeof try_kinds / sizeof *try_kinds; i++)
        if (strcmp(try_kinds[i].kind, kind) == 0) return try_kinds[i].st;
    return HD_OK;
}

/* ---- the Error class ---- */

static hd_status err_field(hd_vm *vm, hd_value obj, const char *name, hd_value v) {
    return hd_dict_set(vm, ((hd_object *)obj.as.o)->fields, name, v);
}

static hd_status err_str_field(hd_vm *vm, hd_value obj, const char *name, const char *s) {
    hd_value v = hd_str_from(vm, s);
    if (v.type != HD_V_STR) return vm->err ? vm->err : hd_vm_oom(vm);
    return hd_dict_set(vm, ((hd_object *)obj.as.o)->fields, name, v);
}

/* Error(message, kind = "runtime"): an error to throw. */
static hd_status err_init(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                          const hd_kwarg *kw, int nkw, hd_value *result, void *data) {
    (void)data;
    const hd_value *kindv = nargs == 2 ? &args[1] : NULL;
    int bad = nargs < 1 || nargs > 2;
    for (int i = 0; i < nkw; i++) {
        bad |= strcmp(kw[i].name, "kind") != 0 || kindv != NULL;
        kindv = &kw[i].value;
    }
    if (bad || args[0].type != HD_V_STR || (kindv && kindv->type != HD_V_STR))
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "Error(message, kind = \"runtime\"): message and kind are strings");
    const char *kind = kindv ? hd_as_str(*kindv)->chars : "runtime";
    if (!try_kind_status(kind))
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "Error(): kind must be \"runtime\", \"syntax\", \"memory\", \"io\" or "
                           "\"argument\", got \"%s\"",
                           kind);
    hd_vref(args[0]);
    if (hd_dict_set(vm, ((hd_object *)self.as.o)->fields, "message", args[0]) ||
        err_str_field(vm, self, "kind", kind))
        return vm->err;
    *result = hd_none();
    return HD_OK;
}

/* str(e) is the message. */
static hd_status err_str(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                         const hd_kwarg *kw, int nkw, hd_value *result, void *data) {
    (void)args, (void)kw, (void)data;
    hd_value *m = hd_dict_get(((hd_object *)self.as.o)->fields, "message");
    if (nargs || nkw || !m) return hd_vm_error(vm, HD_ERR_RUNTIME, "Error.str() takes nothing");
    hd_vref(*m);
    *result = *m;
    return HD_OK;
}

hd_status hd_eval_try_init(hd_vm *vm) {
    hd_value cls = hd_class_new(vm, "Error");
    if (cls.type != HD_V_CLASS) return vm->err ? vm->err : hd_vm_oom(vm);
    hd_class *c = (hd_class *)cls.as.o;
    hd_value init = hd_native_new(vm, "init", err_init, NULL);
    if (init.type == HD_V_NONE || hd_dict_set(vm, c->methods, "init", init)) goto fail;
    hd_value str = hd_native_new(vm, "str", err_str, NULL);
    if (str.type == HD_V_NONE || hd_dict_set(vm, c->methods, "str", str)) goto fail;
    vm->error_class = c;
    return hd_vm_def_value(vm, "Error", cls);
fail:
    hd_vunref(vm, cls);
    return vm->err ? vm->err : hd_vm_oom(vm);
}

/* ---- catching ---- */

/* The VM's error as an Error object. */
static hd_value try_error_object(hd_vm *vm) {
    hd_value e = hd_object_new(vm, vm->error_class);
    if (e.type != HD_V_OBJECT) return e;
    int ok = err_str_field(vm, e, "message", vm->errmsg) == HD_OK &&
             err_str_field(vm, e, "kind", try_kind_name(vm->err)) == HD_OK &&
             err_str_field(vm, e, "file", vm->err_file) == HD_OK &&
             err_field(vm, e, "line", hd_int(vm->err_line)) == HD_OK &&
             err_field(vm, e, "col", hd_int(vm->err_col)) == HD_OK &&
             err_str_field(vm, e, "trace", vm->errtext) == HD_OK;
    if (ok) return e;
    hd_vunref(vm, e);
    return hd_none();
}

/* The catch variable goes when the catch block ends. */
static void try_release(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    if (!n->name || (n->ref.kind != HD_REF_LOCAL && n->ref.kind != HD_REF_CELL)) return;
    hd_value old = f->slots[n->ref.index];
    f->slots[n->ref.index] = hd_none();
    hd_vunref(vm, old);
}

int hd_eval_try(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    if (vm->ctx.trace) {
        hd_eval_failf(vm, f, n, HD_ERR_RUNTIME,
                      "try inside compiled code: the trace would keep the ops that ran before "
                      "the error; put the try around the call of the compiled code");
        return HD_FLOW_ERROR;
    }
    int fl = hd_eval_block(vm, f, n->body);
    if (fl != HD_FLOW_ERROR || vm->err == HD_OK || vm->err == HD_ERR_LIMIT) return fl;
    if (!vm->err_located) hd_vm_locate(vm, f, &n->span);
    hd_value e = try_error_object(vm);
    if (e.type != HD_V_OBJECT) { /* out of memory: that error goes on, from here */
        hd_vm_locate(vm, f, &n->span);
        return HD_FLOW_ERROR;
    }
    hd_vm_clear_error(vm);
    if (n->name && !hd_eval_bind(vm, f, n, e)) return HD_FLOW_ERROR;
    if (!n->name) hd_vunref(vm, e);
    fl = hd_eval_block(vm, f, n->c);
    try_release(vm, f, n);
    return fl;
}

/* ---- throwing ---- */

static int try_is_error(hd_vm *vm, hd_value v) {
    return v.type == HD_V_OBJECT && ((hd_object *)v.as.o)->cls == vm->error_class;
}

int hd_eval_throw(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    hd_value v = hd_eval_expr(vm, f, n->a);
    if (v.type == HD_V_ERR) return HD_FLOW_ERROR;
    hd_status st = HD_ERR_RUNTIME;
    const char *msg = NULL;
    if (v.type == HD_V_STR) {
        msg = hd_as_str(v)->chars;
    } else if (try_is_error(vm, v)) {
        hd_value *m = hd_dict_get(((hd_object *)v.as.o)->fields, "message");
        hd_value *k = hd_dict_get(((hd_object *)v.as.o)->fields, "kind");
        if (m && m->type == HD_V_STR) msg = hd_as_str(*m)->chars;
        if (k && k->type == HD_V_STR && try_kind_status(hd_as_str(*k)->chars))
            st = try_kind_status(hd_as_str(*k)->chars);
    }
    if (!msg) {
        hd_eval_failf(vm, f, n, HD_ERR_RUNTIME,
                      "throw takes a message (a str) or an Error, got a value of type %s",
                      hd_value_type_name(v));
    } else {
        hd_eval_failf(vm, f, n, st, "%s", msg);
    }
    hd_vunref(vm, v);
    return HD_FLOW_ERROR;
}
