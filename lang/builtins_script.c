/* Scripts in the language: script("name") { ... } traces its
 * block into a graph whose inputs are declared with input(name, shape,
 * dtype = f32) and whose outputs are named with output(name, t); the value
 * is a script object (runtime/hd_script.h) with set_input, run, compile,
 * save, ... load_script(path) reads a .hoduscript file. Tensors the block
 * reads from outside become constants saved with the graph, except its
 * state (script_state.h): tensors it writes, read and written at each run. */
#include "builtins_tensor.h"
#include "compiled.h"
#include "eval.h"
#include "hd_script.h"
#include "hd_trace.h"
#include "script_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arguments of natives ---- */

/* Bind positional and named arguments to params (names, NULL-ended);
 * v[i] is HD_V_COUNT when not given. Errors name the function. */
static hd_status bind(hd_vm *vm, const char *fn, const char *const *params, const hd_value *args,
                      int nargs, const hd_kwarg *kw, int nkw, hd_value *v) {
    int np = 0;
    while (params[np]) np++;
    for (int i = 0; i < np; i++) v[i].type = HD_V_COUNT;
    if (nargs > np) return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() takes %d arguments", fn, np);
    for (int i = 0; i < nargs; i++) v[i] = args[i];
    for (int k = 0; k < nkw; k++) {
        int i = 0;
        while (i < np && strcmp(params[i], kw[k].name)) i++;
        if (i == np)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() has no parameter named '%s'", fn,
                               kw[k].name);
        if (v[i].type != HD_V_COUNT)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() got argument '%s' twice", fn, kw[k].name);
        v[i] = kw[k].value;
    }
    return HD_OK;
}

static int given(hd_value v) {
    return v.type != HD_V_COUNT;
}

static hd_status want_str(hd_vm *vm, const char *fn, const char *what, hd_value v,
                          const char **out) {
    if (v.type != HD_V_STR)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s(): %s must be a string, got %s", fn, what,
                           given(v) ? hd_value_type_name(v) : "nothing");
    *out = hd_as_str(v)->chars;
    return HD_OK;
}

static hd_status want_tensor(hd_vm *vm, const char *fn, const char *what, hd_value v) {
    if (v.type == HD_V_TENSOR) return HD_OK;
    return hd_vm_error(vm, HD_ERR_RUNTIME, "%s(): %s must be a tensor, got %s", fn, what,
                       given(v) ? hd_value_type_name(v) : "nothing");
}

/* A shape: a list of non-negative ints, or one int. */
static hd_status want_shape(hd_vm *vm, hd_value v, int64_t *shape, int *nd) {
    if (v.type == HD_V_INT) {
        shape[0] = v.as.i;
        *nd = 1;
        return v.as.i >= 0 ? HD_OK : hd_vm_error(vm, HD_ERR_RUNTIME, "input(): negative size");
    }
    if (v.type != HD_V_LIST || hd_as_list(v)->len > HD_MAX_DIMS)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "input(): the shape must be a list of at most %d ints", HD_MAX_DIMS);
    const hd_list *l = hd_as_list(v);
    for (int64_t i = 0; i < l->len; i++) {
        if (l->items[i].type != HD_V_INT || l->items[i].as.i < 0)
            return hd_vm_error(vm, HD_ERR_RUNTIME,
                               "input(): the shape must be a list of non-negative ints");
        shape[i] = l->items[i].as.i;
    }
    *nd = (int)l->len;
    return HD_OK;
}

/* ---- input() and output() inside script blocks ---- */

static int in_script(hd_vm *vm) {
    return vm->script_depth > 0 && vm->ctx.trace;
}

static hd_status not_in_script(hd_vm *vm, const char *fn) {
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "%s() declares a script's %s: it works only inside script(\"name\") { }", fn,
                       strcmp(fn, "input") ? "outputs" : "inputs");
}

/* Names that start with '$' are the state's. */
static hd_status want_port(hd_vm *vm, const char *fn, const char *name) {
    if (name[0] != HD_SCRIPT_STATE_PREFIX) return HD_OK;
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "%s(): names that start with '%c' are kept for the script's state", fn,
                       HD_SCRIPT_STATE_PREFIX);
}

static hd_status bi_input(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                          const hd_kwarg *kw, int nkw, hd_value *out, void *data) {
    static const char *const params[] = {"name", "shape", "dtype", NULL};
    hd_value v[3];
    const char *name = NULL;
    int64_t shape[HD_MAX_DIMS];
    int nd = 0;
    (void)self;
    (void)data;
    if (!in_script(vm)) return not_in_script(vm, "input");
    if (bind(vm, "input", params, args, nargs, kw, nkw, v) ||
        want_str(vm, "input", "name", v[0], &name) || want_port(vm, "input", name) ||
        want_shape(vm, v[1], shape, &nd))
        return vm->err;
    hd_dtype dt = HD_F32;
    if (given(v[2]) && v[2].type != HD_V_NONE) {
        if (v[2].type != HD_V_DTYPE)
            return hd_vm_error(vm, HD_ERR_RUNTIME,
                               "input(): dtype must be a dtype (f32, i64, ...)");
        dt = v[2].as.dt;
    }
    hd_tensor *t = hd_trace_input(&vm->ctx, name, dt, shape, nd);
    if (!t) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
    *out = hd_tensor_value(t);
    return HD_OK;
}

static hd_status bi_output(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                           const hd_kwarg *kw, int nkw, hd_value *out, void *data) {
    static const char *const params[] = {"name", "t", NULL};
    hd_value v[2];
    const char *name = NULL;
    (void)self;
    (void)data;
    (void)out;
    if (!in_script(vm)) return not_in_script(vm, "output");
    if (bind(vm, "output", params, args, nargs, kw, nkw, v) ||
        want_str(vm, "output", "name", v[0], &name) || want_port(vm, "output", name) ||
        want_tensor(vm, "output", "t", v[1]))
        return vm->err;
    if (hd_trace_output(&vm->ctx, name, v[1].as.t)) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
    return HD_OK;
}

/* ---- script objects ---- */

/* A script value: the script, and where its state lives in the program
 * (none for a loaded script). */
typedef struct script_obj {
    hd_script *s;
    hd_script_place *places;
    int nplaces;
} script_obj;

static void script_free(hd_vm *vm, void *p) {
    script_obj *o = p;
    hd_script_free(o->s);
    hd_script_places_free(vm, o->places, o->nplaces);
    hd_ctx_free(&vm->ctx, o, sizeof *o);
}

static hd_status script_member(hd_vm *vm, hd_value self, const char *name, hd_value *out);

static const hd_handle_type script_type = {"script", script_free, script_member};

static script_obj *obj_of(hd_value self) {
    return (script_obj *)((hd_handle *)self.as.o)->p;
}

static hd_script *script_of(hd_value self) {
    return obj_of(self)->s;
}

static hd_status script_fail(hd_vm *vm, const hd_script *s) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    char msg[HD_ERRMSG_MAX];
    snprintf(msg, sizeof msg, "%s", ctx->errmsg);
    hd_status st = hd_vm_ctx_status(vm, HD_ERR_RUNTIME);
    hd_error_clear(ctx);
    if (strstr(msg, "script '")) return hd_vm_error(vm, st, "%s", msg);
    return hd_vm_error(vm, st, "script '%s': %s", hd_script_name(s), msg);
}

/* A script value taking s and places (freed on error). */
static hd_value script_value(hd_vm *vm, hd_script *s, hd_script_place *places, int nplaces) {
    script_obj *o = hd_ctx_calloc(&vm->ctx, 1, sizeof *o);
    if (!o) {
        hd_script_free(s);
        hd_script_places_free(vm, places, nplaces);
        hd_vm_oom(vm);
        return hd_err_value();
    }
    o->s = s;
    o->places = places;
    o->nplaces = nplaces;
    hd_value v = hd_handle_new(vm, &script_type, o); /* frees o when it fails */
    if (v.type != HD_V_HANDLE) hd_vm_oom(vm);
    return v;
}

/* d[k] = the string text (an error when the string cannot be made). */
static hd_status put_str(hd_vm *vm, hd_value d, const char *k, const char *text) {
    hd_value v = hd_str_from(vm, text);
    if (v.type != HD_V_STR)
        return vm->err ? vm->err : hd_vm_error(vm, HD_ERR_MEMORY, "out of memory");
    return hd_dict_set(vm, d, k, v);
}

/* [{name, shape, dtype}, ...] of the inputs or the outputs. */
static hd_status ports(hd_vm *vm, const hd_script *s, int outputs, hd_value *out) {
    int n = outputs ? hd_script_noutputs(s) : hd_script_ninputs(s);
    hd_value l = hd_list_new(vm, n);
    if (l.type != HD_V_LIST) return vm->err;
    for (int i = 0; i < n; i++) {
        hd_script_port p;
        if (outputs)
            hd_script_output_info(s, i, &p);
        else
            hd_script_input_info(s, i, &p);
        hd_value d = hd_dict_new(vm), shape = hd_list_new(vm, p.ndim);
        hd_status st = d.type == HD_V_DICT && shape.type == HD_V_LIST ? HD_OK : vm->err;
        for (int k = 0; !st && k < p.ndim; k++) st = hd_list_push(vm, shape, hd_int(p.shape[k]));
        if (!st) st = put_str(vm, d, "name", p.name);
        if (!st) st = hd_dict_set(vm, d, "shape", hd_value_ref(shape));
        if (!st) st = hd_dict_set(vm, d, "dtype", hd_dtype_value(p.dtype));
        if (!st) st = hd_list_push(vm, l, hd_value_ref(d));
        hd_value_unref(vm, d);
        hd_value_unref(vm, shape);
        if (st) {
            hd_value_unref(vm, l);
            return st;
        }
    }
    *out = l;
    return HD_OK;
}

#define SCRIPT_METHOD(name)                                                                        \
    static hd_status name(hd_vm *vm, hd_value self, const hd_value *args, int nargs,               \
                          const hd_kwarg *kw, int nkw, hd_value *out, void *data)

static hd_status no_args(hd_vm *vm, const char *fn, int nargs, int nkw) {
    if (nargs || nkw) return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() takes no arguments", fn);
    return HD_OK;
}

SCRIPT_METHOD(sm_set_input) {
    static const char *const params[] = {"name", "t", NULL};
    hd_value v[2];
    const char *name = NULL, *fn = data ? (const char *)data : "set_input";
    (void)out;
    hd_script *s = script_of(self);
    if (bind(vm, fn, params, args, nargs, kw, nkw, v) || want_str(vm, fn, "name", v[0], &name) ||
        want_tensor(vm, fn, "t", v[1]))
        return vm->err;
    return hd_script_set_input(s, name, v[1].as.t) ? script_fail(vm, s) : HD_OK;
}

static hd_status compiled_now(hd_vm *vm, hd_script *s) {
    if (hd_script_compile(s)) return script_fail(vm, s);
    return hd_compiled_set_last_ir(vm, hd_script_compiled_graph(s));
}

SCRIPT_METHOD(sm_compile) {
    (void)args;
    (void)kw;
    (void)out;
    (void)data;
    if (no_args(vm, "compile", nargs, nkw)) return vm->err;
    return compiled_now(vm, script_of(self));
}

SCRIPT_METHOD(sm_run) {
    (void)args;
    (void)kw;
    (void)data;
    script_obj *o = obj_of(self);
    hd_script *s = o->s;
    if (no_args(vm, "run", nargs, nkw) || compiled_now(vm, s)) return vm->err;
    if (hd_script_places_read(vm, s, o->places, o->nplaces)) return vm->err;
    if (hd_script_run(s)) return script_fail(vm, s);
    if (hd_script_places_write(vm, s, o->places, o->nplaces)) return vm->err;
    hd_value d = hd_dict_new(vm);
    if (d.type != HD_V_DICT) return vm->err;
    for (int i = 0; i < hd_script_noutputs(s); i++) {
        hd_script_port p;
        hd_script_output_info(s, i, &p);
        hd_tensor *t = hd_script_output_at(s, i);
        hd_value v = t ? hd_tensor_value(hd_tensor_ref(t)) : hd_none();
        if (hd_dict_set(vm, d, p.name, v)) {
            hd_value_unref(vm, d);
            return vm->err;
        }
    }
    *out = d;
    return HD_OK;
}

SCRIPT_METHOD(sm_clear_inputs) {
    (void)args;
    (void)kw;
    (void)out;
    (void)data;
    if (no_args(vm, "clear_inputs", nargs, nkw)) return vm->err;
    hd_script_clear_inputs(script_of(self));
    return HD_OK;
}

/* set_compiler(name) and set_device(d): both drop the compiled graph. */
SCRIPT_METHOD(sm_set_option) {
    static const char *const params[] = {"name", NULL};
    const char *fn = data, *what = NULL;
    hd_value v[1];
    (void)out;
    hd_script *s = script_of(self);
    if (bind(vm, fn, params, args, nargs, kw, nkw, v) || want_str(vm, fn, "the name", v[0], &what))
        return vm->err;
    hd_status st = !strcmp(fn, "set_compiler") ? hd_script_set_compiler(s, what)
                                               : hd_script_set_device(s, what);
    return st ? script_fail(vm, s) : HD_OK;
}

static hd_status put(hd_vm *vm, hd_value d, const char *k, hd_value v) {
    return hd_dict_set(vm, d, k, v);
}

static hd_status stats_fill(hd_vm *vm, const hd_script *s, hd_value d) {
    hd_script_stats st;
    hd_script_stats_get(s, &st);
    const hd_jit_stats *j = &st.jit;
    const hd_ir_graph *g = hd_script_graph(s);
    /* before the first compile: the traced graph's constants; figures only
     * a compile gives are none */
    int64_t consts = st.compiled ? j->consts : g->nconsts, const_bytes = (int64_t)j->const_bytes;
    for (int i = 0; !st.compiled && i < g->nconsts; i++)
        const_bytes += (int64_t)hd_tensor_nbytes(g->consts[i].t);
    hd_value none = hd_none();
#define HD_COMPILED_INT(v) (st.compiled ? hd_int(v) : none)
    return put(vm, d, "is_compiled", hd_bool(st.compiled)) ||
           put(vm, d, "compiles", hd_int((int64_t)st.compiles)) ||
           put(vm, d, "runs", hd_int((int64_t)st.runs)) ||
           put(vm, d, "compile_seconds", hd_float(j->compile_seconds)) ||
           put(vm, d, "run_seconds", hd_float(j->run_seconds)) ||
           put(vm, d, "nodes_traced", hd_int(st.compiled ? j->nodes_traced : g->nnodes)) ||
           put(vm, d, "nodes", hd_int(st.compiled ? j->nodes : g->nnodes)) ||
           put(vm, d, "kernels", HD_COMPILED_INT(j->kernels)) ||
           put(vm, d, "groups", HD_COMPILED_INT(j->groups)) ||
           put(vm, d, "consts", hd_int(consts)) || put(vm, d, "const_bytes", hd_int(const_bytes)) ||
           put(vm, d, "planned_bytes", HD_COMPILED_INT((int64_t)j->planned_bytes)) ||
           put(vm, d, "naive_bytes", HD_COMPILED_INT((int64_t)j->naive_bytes)) ||
           put(vm, d, "inplace", HD_COMPILED_INT(j->inplace)) ||
           put(vm, d, "launches", HD_COMPILED_INT(j->launches)) ||
           put_str(vm, d, "compiler", hd_script_compiler(s)) ||
           put_str(vm, d, "device", hd_script_device(s));
#undef HD_COMPILED_INT
}

SCRIPT_METHOD(sm_stats) {
    (void)args;
    (void)kw;
    (void)data;
    if (no_args(vm, "stats", nargs, nkw)) return vm->err;
    hd_value d = hd_dict_new(vm);
    if (d.type != HD_V_DICT) return vm->err;
    if (stats_fill(vm, script_of(self), d)) {
        hd_value_unref(vm, d);
        return vm->err;
    }
    *out = d;
    return HD_OK;
}

/* ir() and dot(): the text of the graph (the optimised one once compiled). */
SCRIPT_METHOD(sm_text) {
    (void)args;
    (void)kw;
    hd_script *s = script_of(self);
    if (no_args(vm, data, nargs, nkw)) return vm->err;
    char *text = !strcmp(data, "ir") ? hd_script_ir(s) : hd_script_dot(s);
    if (!text) return hd_vm_from_ctx(vm, HD_ERR_MEMORY);
    *out = hd_str_from(vm, text);
    hd_ctx_strfree(hd_vm_ctx(vm), text);
    return out->type == HD_V_STR ? HD_OK : vm->err;
}

SCRIPT_METHOD(sm_save) {
    static const char *const params[] = {"path", NULL};
    hd_value v[1];
    const char *path = NULL;
    (void)out;
    (void)data;
    hd_script *s = script_of(self);
    if (!vm->opts.allow_io)
        return hd_vm_error(vm, HD_ERR_IO, "save(): file access is turned off in this interpreter");
    if (bind(vm, "save", params, args, nargs, kw, nkw, v) ||
        want_str(vm, "save", "path", v[0], &path))
        return vm->err;
    return hd_script_save(s, path) ? script_fail(vm, s) : HD_OK;
}

/* state(): a dict name -> tensor (none before a first run made it). */
SCRIPT_METHOD(sm_state) {
    (void)args;
    (void)kw;
    (void)data;
    hd_script *s = script_of(self);
    if (no_args(vm, "state", nargs, nkw)) return vm->err;
    hd_value d = hd_dict_new(vm);
    if (d.type != HD_V_DICT) return vm->err;
    for (int i = 0; i < hd_script_nstate(s); i++) {
        const hd_script_var *v = hd_script_state_at(s, i);
        if (hd_dict_set(vm, d, v->name, v->t ? hd_tensor_value(hd_tensor_ref(v->t)) : hd_none())) {
            hd_value_unref(vm, d);
            return vm->err;
        }
    }
    *out = d;
    return HD_OK;
}

/* set_state(name, t): a variable's new value (its dtype and shape), also
 * at its place in the program. */
SCRIPT_METHOD(sm_set_state) {
    static const char *const params[] = {"name", "t", NULL};
    hd_value v[2];
    const char *name = NULL;
    (void)out;
    (void)data;
    script_obj *o = obj_of(self);
    if (bind(vm, "set_state", params, args, nargs, kw, nkw, v) ||
        want_str(vm, "set_state", "name", v[0], &name) || want_tensor(vm, "set_state", "t", v[1]))
        return vm->err;
    if (hd_compiled_check_data(vm, v[1].as.t, "set_state()")) return vm->err;
    if (hd_script_state_put(o->s, name, v[1].as.t)) return script_fail(vm, o->s);
    return hd_script_places_write(vm, o->s, o->places, o->nplaces);
}

typedef struct script_method {
    const char *name;
    hd_native_fn fn;
    const char *data;
    int mutates; /* changes the script or the world: not inside compiled code */
} script_method;

static const script_method methods[] = {
    {"set_input", sm_set_input, "set_input", 1},
    {"add_input", sm_set_input, "add_input", 1},
    {"run", sm_run, NULL, 1},
    {"compile", sm_compile, NULL, 1},
    {"clear_inputs", sm_clear_inputs, NULL, 1},
    {"set_compiler", sm_set_option, "set_compiler", 1},
    {"set_device", sm_set_option, "set_device", 1},
    {"stats", sm_stats, NULL, 0},
    {"ir", sm_text, "ir", 0},
    {"dot", sm_text, "dot", 0},
    {"save", sm_save, NULL, 1},
    {"state", sm_state, NULL, 0},
    {"set_state", sm_set_state, NULL, 1},
};

static hd_status script_member(hd_vm *vm, hd_value self, const char *name, hd_value *out) {
    hd_script *s = script_of(self);
    if (!strcmp(name, "inputs") || !strcmp(name, "outputs"))
        return ports(vm, s, name[0] == 'o', out);
    if (!strcmp(name, "name")) {
        *out = hd_str_from(vm, hd_script_name(s));
        return out->type == HD_V_STR ? HD_OK : vm->err;
    }
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        if (strcmp(methods[i].name, name)) continue;
        if (methods[i].mutates && vm->ctx.trace)
            return hd_vm_error(vm, HD_ERR_RUNTIME,
                               "script.%s() cannot be called inside compiled code (a script runs "
                               "its own graph: call it outside the compiled body)",
                               name);
        hd_native proto;
        memset(&proto, 0, sizeof proto);
        proto.name = methods[i].name;
        proto.fn = methods[i].fn;
        proto.data = (void *)methods[i].data;
        *out = hd_native_bound(vm, &proto, hd_value_ref(self));
        return out->type == HD_V_NATIVE ? HD_OK : vm->err;
    }
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "script has no member '%s' (members: name, inputs, outputs, set_input, "
                       "add_input, run, compile, clear_inputs, set_compiler, set_device, stats, "
                       "ir, dot, save, state, set_state)",
                       name);
}

/* ---- script("name") { } ---- */

typedef struct script_opts {
    const char *name, *compiler, *device;
} script_opts;

static hd_status script_args(hd_vm *vm, hd_frame *f, const hd_ast *n, script_opts *o,
                             hd_value *held) {
    memset(o, 0, sizeof *o);
    for (int i = 0; i < n->n; i++) {
        const hd_ast *arg = n->items[i];
        hd_value v = hd_eval_expr(vm, f, arg->kind == HD_AST_ARG ? arg->a : arg);
        if (v.type == HD_V_ERR) return vm->err;
        held[i] = v;
        const char *key = arg->kind == HD_AST_ARG && arg->name ? arg->name : (i ? "?" : "name");
        const char **slot = !strcmp(key, "name")       ? &o->name
                            : !strcmp(key, "compiler") ? &o->compiler
                            : !strcmp(key, "device")   ? &o->device
                                                       : NULL;
        hd_status st = slot ? want_str(vm, "script", key, v, slot)
                            : hd_vm_error(vm, HD_ERR_RUNTIME,
                                          "script(name, compiler = , device = ): unknown argument");
        if (st) {
            hd_vm_locate(vm, f, &arg->span);
            return st;
        }
    }
    if (!o->name) return hd_vm_error(vm, HD_ERR_RUNTIME, "script(\"name\") { ... } needs a name");
    return HD_OK;
}

/* Trace the block into a script (with its state, if any). */
static hd_status script_trace(hd_vm *vm, hd_frame *f, const hd_ast *n, const char *name,
                              hd_script **s, hd_script_place **places, int *nplaces) {
    if (hd_script_trace_block(vm, f, n, name, s, places, nplaces)) return vm->err;
    if (hd_script_noutputs(*s)) return HD_OK;
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "script '%s' has no outputs: name them with output(name, tensor)", name);
}

hd_value hd_script_eval(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    hd_value held[8];
    int nheld = n->n < 8 ? n->n : 8;
    for (int i = 0; i < nheld; i++) held[i] = hd_none();
    script_opts o;
    hd_script *s = NULL;
    hd_script_place *places = NULL;
    int nplaces = 0;
    hd_status st = HD_OK;
    if (vm->ctx.trace)
        st = hd_vm_error(vm, HD_ERR_RUNTIME,
                         "a script cannot be made inside compiled code or another script");
    else if (n->n > 8)
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "script(): too many arguments");
    if (!st) st = script_args(vm, f, n, &o, held);
    if (!st) st = script_trace(vm, f, n, o.name, &s, &places, &nplaces);
    char defdev[32];
    if (!st && !o.device && hd_default_device_name(vm, defdev, sizeof defdev)) {
        o.device = defdev; /* the default device, and its compiler unless one was named */
        const char *env = getenv("HODU_COMPILER");
        if (!o.compiler) o.compiler = env && *env ? env : "cuda";
    }
    if (!st && o.compiler && hd_script_set_compiler(s, o.compiler)) st = script_fail(vm, s);
    if (!st && o.device && hd_script_set_device(s, o.device)) st = script_fail(vm, s);
    for (int i = 0; i < nheld; i++) hd_value_unref(vm, held[i]);
    if (st) {
        hd_script_free(s);
        hd_script_places_free(vm, places, nplaces);
        hd_vm_locate(vm, f, &n->span);
        return hd_err_value();
    }
    hd_value v = script_value(vm, s, places, nplaces);
    if (v.type != HD_V_HANDLE) {
        hd_vm_locate(vm, f, &n->span);
        return hd_err_value();
    }
    return v;
}

/* ---- load_script(path) ---- */

static hd_status bi_load_script(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                                const hd_kwarg *kw, int nkw, hd_value *out, void *data) {
    static const char *const params[] = {"path", NULL};
    hd_value v[1];
    const char *path = NULL;
    (void)self;
    (void)data;
    if (bind(vm, "load_script", params, args, nargs, kw, nkw, v) ||
        want_str(vm, "load_script", "path", v[0], &path))
        return vm->err;
    hd_script *s = NULL;
    if (hd_script_load(hd_vm_ctx(vm), path, &s)) return hd_vm_from_ctx(vm, HD_ERR_IO);
    *out = script_value(vm, s, NULL, 0);
    return out->type == HD_V_HANDLE ? HD_OK : vm->err;
}

hd_status hd_builtins_script_open(hd_vm *vm) {
    if (hd_vm_def_native(vm, "input", bi_input, NULL) ||
        hd_vm_def_native(vm, "output", bi_output, NULL))
        return vm->err;
    if (vm->opts.allow_io && hd_vm_def_native(vm, "load_script", bi_load_script, NULL))
        return vm->err;
    return HD_OK;
}
