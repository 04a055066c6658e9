/* Script objects: a graph, bound inputs, state variables, a compiler and
 * device, and the executable compiled on first use.
 *
 * A script with state runs one of two programs: the graph of the first run
 * (when the block that made it started from other state than its later
 * runs: buffers that were still none) and then the main graph. Inputs and
 * outputs named "$" + a variable's name are the state's; the others are
 * the script's ports, numbered as the main graph lists them. */
#include "hd_script.h"

#include <stdio.h>
#include <string.h>

typedef struct script_prog {
    hd_ir_graph *g;
    const hd_jit_compiler *jc;
    hd_jit_exec *exec;
} script_prog;

struct hd_script {
    hd_ctx *ctx;
    hd_ir_graph *g;
    script_prog main, init; /* main.g == g; init.g NULL unless a first run is pending */
    hd_tensor **inputs;     /* per graph input: bound tensor or NULL */
    hd_tensor **outputs;    /* per graph output: last run's result or NULL */
    int *uin, *uout;        /* the ports: graph input / output index of each */
    int nuin, nuout;
    hd_script_var *vars;
    int nvars;
    char compiler[16];
    char device[32];
    char compiler_named[16]; /* the compiler before following inputs to a device */
    int device_set;          /* set_device was called: inputs are not followed */
    int compiler_set;        /* set_compiler was called */
    int compiler_env;        /* HODU_COMPILER named the default */
    uint64_t compiles;
};

static int is_state_name(const char *name) {
    return name[0] == HD_SCRIPT_STATE_PREFIX;
}

static hd_status script_ports(hd_script *s) {
    const hd_ir_graph *g = s->g;
    s->uin = hd_ctx_calloc(s->ctx, (size_t)g->ninputs + 1, sizeof *s->uin);
    s->uout = hd_ctx_calloc(s->ctx, (size_t)g->noutputs + 1, sizeof *s->uout);
    if (!s->uin || !s->uout) return s->ctx->status;
    s->nuin = s->nuout = 0;
    for (int i = 0; i < g->ninputs; i++)
        if (!s->nvars || !is_state_name(g->inputs[i].name)) s->uin[s->nuin++] = i;
    for (int i = 0; i < g->noutputs; i++)
        if (!s->nvars || !is_state_name(g->outputs[i].name)) s->uout[s->nuout++] = i;
    return HD_OK;
}

hd_script *hd_script_new(hd_ctx *ctx, hd_ir_graph *g) {
    hd_script *s = hd_ctx_calloc(ctx, 1, sizeof *s);
    if (!s) {
        hd_ir_graph_free(g);
        return NULL;
    }
    s->ctx = ctx;
    s->g = s->main.g = g;
    s->inputs = hd_ctx_calloc(ctx, (size_t)g->ninputs + 1, sizeof *s->inputs);
    s->outputs = hd_ctx_calloc(ctx, (size_t)g->noutputs + 1, sizeof *s->outputs);
    if (!s->inputs || !s->outputs || script_ports(s)) {
        hd_script_free(s);
        return NULL;
    }
    snprintf(s->compiler, sizeof s->compiler, "%s", hd_jit_default_compiler(ctx, &s->compiler_env));
    snprintf(s->device, sizeof s->device, "cpu");
    return s;
}

static void prog_drop_exec(hd_ctx *ctx, script_prog *p) {
    if (p->exec) p->jc->free(ctx, p->exec);
    p->exec = NULL;
    p->jc = NULL;
}

static void script_drop_exec(hd_script *s) {
    prog_drop_exec(s->ctx, &s->main);
    prog_drop_exec(s->ctx, &s->init);
}

static void script_drop_outputs(hd_script *s) {
    for (int i = 0; i < s->g->noutputs; i++) {
        hd_tensor_unref(s->outputs[i]);
        s->outputs[i] = NULL;
    }
}

static void script_drop_init(hd_script *s) {
    prog_drop_exec(s->ctx, &s->init);
    hd_ir_graph_free(s->init.g);
    s->init.g = NULL;
}

void hd_script_vars_free(hd_ctx *ctx, hd_script_var *vars, int nvars) {
    for (int i = 0; vars && i < nvars; i++) {
        hd_ctx_strfree(ctx, vars[i].name);
        hd_tensor_unref(vars[i].t);
    }
    if (vars) hd_ctx_free(ctx, vars, (size_t)(nvars + 1) * sizeof *vars);
}

void hd_script_free(hd_script *s) {
    if (!s) return;
    hd_ctx *ctx = s->ctx;
    script_drop_exec(s);
    script_drop_init(s);
    if (s->inputs) hd_script_clear_inputs(s);
    if (s->outputs) script_drop_outputs(s);
    hd_ctx_free(ctx, s->inputs, (size_t)(s->g->ninputs + 1) * sizeof *s->inputs);
    hd_ctx_free(ctx, s->outputs, (size_t)(s->g->noutputs + 1) * sizeof *s->outputs);
    hd_ctx_free(ctx, s->uin, (size_t)(s->g->ninputs + 1) * sizeof *s->uin);
    hd_ctx_free(ctx, s->uout, (size_t)(s->g->noutputs + 1) * sizeof *s->uout);
    hd_script_vars_free(ctx, s->vars, s->nvars);
    hd_ir_graph_free(s->g);
    hd_ctx_free(ctx, s, sizeof *s);
}

static int var_find(const hd_script_var *vars, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(vars[i].name, name)) return i;
    return -1;
}

/* The variable a "$name" port carries, or -1. */
static int port_var(const hd_script *s, const char *port) {
    return s->nvars && is_state_name(port) ? var_find(s->vars, s->nvars, port + 1) : -1;
}

hd_status hd_script_set_state(hd_script *s, hd_script_var *vars, int nvars, hd_ir_graph *init) {
    hd_ctx *ctx = s->ctx;
    hd_status st = hd_script_check_state(ctx, s->g, vars, nvars);
    if (!st && init) {
        /* the first run's graph: the same ports, state checked the same way */
        for (int i = 0; !st && i < init->ninputs; i++)
            if (!is_state_name(init->inputs[i].name) &&
                hd_ir_find_input(s->g, init->inputs[i].name) < 0)
                st = hd_error(ctx, HD_ERR_ARGUMENT, "the first run reads an unknown input");
        for (int i = 0; !st && i < init->noutputs; i++)
            if (!is_state_name(init->outputs[i].name) &&
                hd_ir_find_output(s->g, init->outputs[i].name) < 0)
                st = hd_error(ctx, HD_ERR_ARGUMENT, "the first run writes an unknown output");
    }
    if (st) {
        hd_script_vars_free(ctx, vars, nvars);
        hd_ir_graph_free(init);
        return st;
    }
    hd_script_vars_free(ctx, s->vars, s->nvars);
    script_drop_init(s);
    s->vars = vars;
    s->nvars = nvars;
    s->init.g = init;
    hd_ctx_free(ctx, s->uin, (size_t)(s->g->ninputs + 1) * sizeof *s->uin);
    hd_ctx_free(ctx, s->uout, (size_t)(s->g->noutputs + 1) * sizeof *s->uout);
    s->uin = s->uout = NULL;
    return script_ports(s);
}

int hd_script_nstate(const hd_script *s) {
    return s->nvars;
}

const hd_script_var *hd_script_state_at(const hd_script *s, int i) {
    return i >= 0 && i < s->nvars ? &s->vars[i] : NULL;
}

int hd_script_state_pending(const hd_script *s) {
    return s->init.g != NULL;
}

/* The type a variable must have: its value's, else what the main graph reads
 * or writes for it. 0 when nothing says. */
static int var_type(const hd_script *s, int v, hd_dtype *dt, const int64_t **shape, int *nd) {
    const hd_tensor *t = s->vars[v].t;
    if (t) {
        *dt = t->dtype;
        *shape = t->shape;
        *nd = t->ndim;
        return 1;
    }
    const hd_ir_graph *g = s->g;
    for (int pass = 0; pass < 2; pass++) {
        int n = pass ? g->noutputs : g->ninputs;
        for (int i = 0; i < n; i++) {
            const char *name = pass ? g->outputs[i].name : g->inputs[i].name;
            if (port_var(s, name) != v) continue;
            const hd_ir_value *val = &g->values[pass ? g->outputs[i].value : g->inputs[i].value];
            *dt = val->dtype;
            *shape = val->shape;
            *nd = val->ndim;
            return 1;
        }
    }
    return 0;
}

hd_status hd_script_state_put(hd_script *s, const char *name, hd_tensor *t) {
    int v = var_find(s->vars, s->nvars, name);
    if (v < 0)
        return hd_error(s->ctx, HD_ERR_ARGUMENT, "script '%s' has no state variable '%s'",
                        s->g->name, name);
    hd_dtype dt;
    const int64_t *shape;
    int nd;
    if (t && var_type(s, v, &dt, &shape, &nd) &&
        (t->dtype != dt || t->ndim != nd || memcmp(t->shape, shape, (size_t)nd * sizeof *shape))) {
        char want[160], got[160];
        hd_ir_type_str(dt, shape, nd, want, sizeof want);
        hd_ir_type_str(t->dtype, t->shape, t->ndim, got, sizeof got);
        return hd_error(s->ctx, HD_ERR_ARGUMENT, "script '%s': state '%s' is %s, got %s",
                        s->g->name, name, want, got);
    }
    hd_script_var *var = &s->vars[v];
    if (!t && !var->inplace) { /* none: a gradient cleared by the program */
        hd_tensor_unref(var->t);
        var->t = NULL;
        return HD_OK;
    }
    if (!t)
        return hd_error(s->ctx, HD_ERR_ARGUMENT, "script '%s': state '%s' cannot be none",
                        s->g->name, name);
    if (var->inplace && var->t && var->t != t) /* shared with its program: keep sharing */
        return hd_tensor_copy_into(s->ctx, var->t, t);
    hd_tensor_ref(t);
    hd_tensor_unref(var->t);
    var->t = t;
    return HD_OK;
}

hd_status hd_script_load(hd_ctx *ctx, const char *path, hd_script **out) {
    hd_ir_graph *g;
    hd_script_var *vars = NULL;
    int nvars = 0;
    *out = NULL;
    if (hd_script_load_file(ctx, path, 0, &g, &vars, &nvars)) return ctx->status;
    *out = hd_script_new(ctx, g);
    if (!*out) {
        hd_script_vars_free(ctx, vars, nvars);
        return ctx->status;
    }
    if (nvars && hd_script_set_state(*out, vars, nvars, NULL)) {
        hd_script_free(*out);
        *out = NULL;
        return ctx->status;
    }
    return HD_OK;
}

hd_status hd_script_save(hd_script *s, const char *path) {
    if (s->init.g) {
        const char *first = "?";
        for (int i = 0; i < s->nvars; i++)
            if (!s->vars[i].t) {
                first = s->vars[i].name;
                break;
            }
        return hd_error(s->ctx, HD_ERR_RUNTIME,
                        "script '%s' cannot be saved before its first run: its state '%s' is "
                        "none until the block has run once, and a saved script holds the graph "
                        "of the later runs only (run it, then save)",
                        s->g->name, first);
    }
    return hd_script_save_file(s->ctx, s->g, s->vars, s->nvars, path);
}

const char *hd_script_name(const hd_script *s) {
    return s->g->name;
}

const hd_ir_graph *hd_script_graph(const hd_script *s) {
    return s->g;
}

const hd_ir_graph *hd_script_compiled_graph(const hd_script *s) {
    return s->main.exec ? s->main.jc->graph(s->main.exec) : NULL;
}

int hd_script_ninputs(const hd_script *s) {
    return s->nuin;
}

int hd_script_noutputs(const hd_script *s) {
    return s->nuout;
}

static void script_port(const hd_ir_graph *g, const char *name, int v, hd_script_port *p) {
    const hd_ir_value *val = &g->values[v];
    p->name = name;
    p->dtype = val->dtype;
    p->ndim = val->ndim;
    p->shape = val->shape;
}

void hd_script_input_info(const hd_script *s, int i, hd_script_port *p) {
    int k = s->uin[i];
    script_port(s->g, s->g->inputs[k].name, s->g->inputs[k].value, p);
}

void hd_script_output_info(const hd_script *s, int i, hd_script_port *p) {
    int k = s->uout[i];
    script_port(s->g, s->g->outputs[k].name, s->g->outputs[k].value, p);
}

/* "x, y" into buf */
static char *script_input_names(const hd_script *s, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < s->nuin && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "",
                                 s->g->inputs[s->uin[i]].name);
    if (!s->nuin) snprintf(buf, n, "none");
    return buf;
}

hd_status hd_script_set_input(hd_script *s, const char *name, hd_tensor *t) {
    int i = hd_ir_find_input(s->g, name);
    char names[256];
    if (i >= 0 && port_var(s, name) >= 0)
        return hd_error(s->ctx, HD_ERR_ARGUMENT,
                        "script '%s': '%s' is state, not an input (set it with the state)",
                        s->g->name, name + 1);
    if (i < 0)
        return hd_error(s->ctx, HD_ERR_ARGUMENT, "script '%s' has no input '%s' (inputs: %s)",
                        s->g->name, name, script_input_names(s, names, sizeof names));
    hd_tensor *one[1] = {t};
    hd_ir_graph view = *s->g; /* check this one input against its declaration */
    view.inputs = &s->g->inputs[i];
    view.ninputs = 1;
    if (hd_jit_check_inputs(s->ctx, &view, one, 1)) return s->ctx->status;
    hd_tensor_ref(t);
    hd_tensor_unref(s->inputs[i]);
    s->inputs[i] = t;
    return HD_OK;
}

void hd_script_clear_inputs(hd_script *s) {
    for (int i = 0; i < s->g->ninputs; i++) {
        hd_tensor_unref(s->inputs[i]);
        s->inputs[i] = NULL;
    }
}

static hd_status prog_compile(hd_script *s, script_prog *p) {
    if (p->exec || !p->g) return HD_OK;
    const hd_jit_compiler *jc;
    if (hd_jit_compiler_find(s->ctx, s->compiler, &jc)) return s->ctx->status;
    hd_jit_options o;
    hd_jit_options_init(&o);
    o.device = s->device;
    hd_status st = jc->available(s->ctx, &o);
    if (!st) st = jc->compile(s->ctx, p->g, &o, &p->exec);
    /* a default that was not named gives way to interp, as in compiled code */
    if (st && st != HD_ERR_MEMORY && !s->compiler_set && !s->compiler_env &&
        !strcmp(s->compiler, "llvm")) {
        hd_error_clear(s->ctx);
        jc = &hd_jit_interp;
        st = jc->compile(s->ctx, p->g, &o, &p->exec);
    }
    if (st) return s->ctx->status;
    p->jc = jc;
    s->compiles++;
    return HD_OK;
}

hd_status hd_script_compile(hd_script *s) {
    return prog_compile(s, &s->main) || prog_compile(s, &s->init) ? s->ctx->status : HD_OK;
}

/* The tensors of p's inputs: bound ports and state values (borrowed). */
static hd_status prog_inputs(hd_script *s, const script_prog *p, hd_tensor **in) {
    const hd_ir_graph *g = p->g;
    for (int i = 0; i < g->ninputs; i++) {
        const char *name = g->inputs[i].name;
        int v = port_var(s, name);
        int k = v < 0 ? hd_ir_find_input(s->g, name) : -1;
        in[i] = v >= 0 ? s->vars[v].t : k >= 0 ? s->inputs[k] : NULL;
        if (in[i]) continue;
        char ty[160];
        const hd_ir_value *val = &g->values[g->inputs[i].value];
        hd_ir_type_str(val->dtype, val->shape, val->ndim, ty, sizeof ty);
        if (v >= 0)
            return hd_error(s->ctx, HD_ERR_ARGUMENT, "script '%s': state '%s' (%s) is none",
                            s->g->name, name + 1, ty);
        return hd_error(s->ctx, HD_ERR_ARGUMENT, "script '%s': input '%s' (%s) is not set",
                        s->g->name, name, ty);
    }
    return HD_OK;
}

/* After a run of p: ports' outputs kept, state variables updated. */
static hd_status prog_outputs(hd_script *s, const script_prog *p, hd_tensor **out) {
    const hd_ir_graph *g = p->g;
    hd_status st = HD_OK;
    for (int i = 0; i < g->noutputs; i++) {
        const char *name = g->outputs[i].name;
        int v = port_var(s, name);
        if (v < 0) {
            int k = hd_ir_find_output(s->g, name);
            if (k >= 0) {
                s->outputs[k] = out[i];
                out[i] = NULL;
            }
        } else if (!st) {
            hd_script_var *var = &s->vars[v];
            if (var->inplace && var->t) {
                st = hd_tensor_copy_into(s->ctx, var->t, out[i]);
            } else {
                hd_tensor_unref(var->t);
                var->t = out[i];
                out[i] = NULL;
            }
        }
        hd_tensor_unref(out[i]);
    }
    /* a variable the main graph does not write is none after a run: a
     * gradient the block clears (zero_grad) */
    for (int v = 0; v < s->nvars; v++) {
        char port[1100];
        snprintf(port, sizeof port, "%c%s", HD_SCRIPT_STATE_PREFIX, s->vars[v].name);
        if (hd_ir_find_output(s->g, port) >= 0) continue;
        hd_tensor_unref(s->vars[v].t);
        s->vars[v].t = NULL;
    }
    return st;
}

/* State values on the script's device (a loaded state is in host memory). */
static hd_status state_to_device(hd_script *s) {
    const hd_backend *be;
    int dev;
    if (hd_backend_parse_device(s->ctx, s->device, &be, &dev)) return s->ctx->status;
    for (int i = 0; i < s->nvars; i++) {
        hd_tensor *t = s->vars[i].t, *d = NULL;
        if (!t || (t->storage && t->storage->backend == be && t->storage->device == dev)) continue;
        if (hd_tensor_to_device(s->ctx, t, be, dev, &d)) return s->ctx->status;
        hd_tensor_unref(t);
        s->vars[i].t = d;
    }
    return HD_OK;
}

/* One bound input's vote for the device: the first seen, or an error
 * naming both. */
static hd_status follow_input(hd_script *s, int i, int *first) {
    const hd_tensor *t = s->inputs[i];
    if (!t || !t->storage || hd_tensor_follows_device(t)) return HD_OK;
    if (*first < 0) {
        *first = i;
        return HD_OK;
    }
    const hd_storage *a = s->inputs[*first]->storage, *b = t->storage;
    if (a->backend == b->backend && a->device == b->device) return HD_OK;
    return hd_error(s->ctx, HD_ERR_RUNTIME,
                    "script '%s': inputs on different devices: '%s' is on %s:%d, '%s' on %s:%d",
                    s->g->name, s->g->inputs[*first].name, a->backend->name, a->device,
                    s->g->inputs[i].name, b->backend->name, b->device);
}

/* Without set_device a script runs where its bound inputs are (as
 * compiled code follows its inputs): on a cuda device with the cuda
 * compiler unless set_compiler named one; back on the cpu with the
 * compiler it had. */
static hd_status script_follow(hd_script *s) {
    int first = -1;
    if (s->device_set) return HD_OK;
    for (int i = 0; i < s->g->ninputs; i++)
        if (follow_input(s, i, &first)) return s->ctx->status;
    if (first < 0) return HD_OK;
    const hd_storage *st = s->inputs[first]->storage;
    char dev[32];
    snprintf(dev, sizeof dev, "%s:%d", st->backend->name, st->device);
    if (st->backend == &hd_cpu_backend) snprintf(dev, sizeof dev, "cpu");
    if (!strcmp(dev, s->device)) return HD_OK;
    script_drop_exec(s);
    if (!s->compiler_named[0])
        snprintf(s->compiler_named, sizeof s->compiler_named, "%s", s->compiler);
    snprintf(s->device, sizeof s->device, "%s", dev);
    snprintf(s->compiler, sizeof s->compiler, "%s",
             s->compiler_set || st->backend == &hd_cpu_backend ? s->compiler_named : "cuda");
    return HD_OK;
}

hd_status hd_script_run(hd_script *s) {
    if (script_follow(s) || hd_script_compile(s) || state_to_device(s)) return s->ctx->status;
    script_prog *p = s->init.g ? &s->init : &s->main;
    const hd_ir_graph *g = p->g;
    hd_tensor **in = hd_ctx_calloc(s->ctx, (size_t)g->ninputs + 1, sizeof *in);
    hd_tensor **out = in ? hd_ctx_calloc(s->ctx, (size_t)g->noutputs + 1, sizeof *out) : NULL;
    hd_status st = out ? prog_inputs(s, p, in) : s->ctx->status;
    if (!st) {
        script_drop_outputs(s);
        st = p->jc->run(s->ctx, p->exec, in, g->ninputs, out, g->noutputs);
    }
    if (!st) st = prog_outputs(s, p, out);
    hd_ctx_free(s->ctx, in, (size_t)(g->ninputs + 1) * sizeof *in);
    if (out) hd_ctx_free(s->ctx, out, (size_t)(g->noutputs + 1) * sizeof *out);
    if (!st && p == &s->init) script_drop_init(s); /* later runs run the main graph */
    return st;
}

hd_tensor *hd_script_output(const hd_script *s, const char *name) {
    int i = hd_ir_find_output(s->g, name);
    return i < 0 || port_var(s, name) >= 0 ? NULL : s->outputs[i];
}

hd_tensor *hd_script_output_at(const hd_script *s, int i) {
    return i < 0 || i >= s->nuout ? NULL : s->outputs[s->uout[i]];
}

hd_status hd_script_set_compiler(hd_script *s, const char *name) {
    const hd_jit_compiler *jc;
    if (hd_jit_compiler_find(s->ctx, name, &jc)) return s->ctx->status;
    script_drop_exec(s);
    snprintf(s->compiler, sizeof s->compiler, "%s", jc->name);
    snprintf(s->compiler_named, sizeof s->compiler_named, "%s", jc->name);
    s->compiler_set = 1;
    return HD_OK;
}

hd_status hd_script_set_device(hd_script *s, const char *device) {
    const hd_backend *be;
    int dev;
    if (!device || strlen(device) >= sizeof s->device)
        return hd_error(s->ctx, HD_ERR_ARGUMENT, "bad device name");
    if (hd_backend_parse_device(s->ctx, device, &be, &dev) || be->available(s->ctx, dev))
        return s->ctx->status;
    script_drop_exec(s);
    snprintf(s->device, sizeof s->device, "%s", device);
    s->device_set = 1;
    return HD_OK;
}

const char *hd_script_compiler(const hd_script *s) {
    return s->compiler;
}

const char *hd_script_device(const hd_script *s) {
    return s->device;
}

void hd_script_stats_get(const hd_script *s, hd_script_stats *st) {
    memset(st, 0, sizeof *st);
    st->compiles = s->compiles;
    if (!s->main.exec) return;
    st->compiled = 1;
    s->main.jc->stats(s->main.exec, &st->jit);
    st->runs = st->jit.runs;
}

char *hd_script_ir(const hd_script *s) {
    const hd_ir_graph *g = hd_script_compiled_graph(s);
    return hd_ir_to_text(g ? g : s->g);
}

char *hd_script_dot(const hd_script *s) {
    const hd_ir_graph *g = hd_script_compiled_graph(s);
    return hd_ir_to_dot(g ? g : s->g);
}
