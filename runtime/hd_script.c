/* Script objects: a graph, bound inputs, a compiler and device, and the
 * executable compiled on first use. */
#include "hd_script.h"

#include <stdio.h>
#include <string.h>

struct hd_script {
    hd_ctx *ctx;
    hd_ir_graph *g;
    hd_tensor **inputs;  /* per graph input: bound tensor or NULL */
    hd_tensor **outputs; /* per graph output: last run's result or NULL */
    char compiler[16];
    char device[32];
    const hd_jit_compiler *jc;
    hd_jit_exec *exec;
    uint64_t compiles;
};

hd_script *hd_script_new(hd_ctx *ctx, hd_ir_graph *g) {
    hd_script *s = hd_ctx_calloc(ctx, 1, sizeof *s);
    if (!s) {
        hd_ir_graph_free(g);
        return NULL;
    }
    s->ctx = ctx;
    s->g = g;
    s->inputs = hd_ctx_calloc(ctx, (size_t)g->ninputs + 1, sizeof *s->inputs);
    s->outputs = hd_ctx_calloc(ctx, (size_t)g->noutputs + 1, sizeof *s->outputs);
    if (!s->inputs || !s->outputs) {
        hd_script_free(s);
        return NULL;
    }
    snprintf(s->compiler, sizeof s->compiler, "interp");
    snprintf(s->device, sizeof s->device, "cpu");
    return s;
}

static void script_drop_exec(hd_script *s) {
    if (s->exec) s->jc->free(s->ctx, s->exec);
    s->exec = NULL;
    s->jc = NULL;
}

static void script_drop_outputs(hd_script *s) {
    for (int i = 0; i < s->g->noutputs; i++) {
        hd_tensor_unref(s->outputs[i]);
        s->outputs[i] = NULL;
    }
}

void hd_script_free(hd_script *s) {
    if (!s) return;
    hd_ctx *ctx = s->ctx;
    script_drop_exec(s);
    if (s->inputs) hd_script_clear_inputs(s);
    if (s->outputs) script_drop_outputs(s);
    hd_ctx_free(ctx, s->inputs, (size_t)(s->g->ninputs + 1) * sizeof *s->inputs);
    hd_ctx_free(ctx, s->outputs, (size_t)(s->g->noutputs + 1) * sizeof *s->outputs);
    hd_ir_graph_free(s->g);
    hd_ctx_free(ctx, s, sizeof *s);
}

hd_status hd_script_load(hd_ctx *ctx, const char *path, hd_script **out) {
    hd_ir_graph *g;
    *out = NULL;
    if (hd_script_load_graph(ctx, path, 0, &g)) return ctx->status;
    *out = hd_script_new(ctx, g);
    return *out ? HD_OK : ctx->status;
}

hd_status hd_script_save(hd_script *s, const char *path) {
    return hd_script_save_graph(s->ctx, s->g, path);
}

const char *hd_script_name(const hd_script *s) {
    return s->g->name;
}

const hd_ir_graph *hd_script_graph(const hd_script *s) {
    return s->g;
}

const hd_ir_graph *hd_script_compiled_graph(const hd_script *s) {
    return s->exec ? s->jc->graph(s->exec) : NULL;
}

int hd_script_ninputs(const hd_script *s) {
    return s->g->ninputs;
}

int hd_script_noutputs(const hd_script *s) {
    return s->g->noutputs;
}

static void script_port(const hd_ir_graph *g, const char *name, int v, hd_script_port *p) {
    const hd_ir_value *val = &g->values[v];
    p->name = name;
    p->dtype = val->dtype;
    p->ndim = val->ndim;
    p->shape = val->shape;
}

void hd_script_input_info(const hd_script *s, int i, hd_script_port *p) {
    script_port(s->g, s->g->inputs[i].name, s->g->inputs[i].value, p);
}

void hd_script_output_info(const hd_script *s, int i, hd_script_port *p) {
    script_port(s->g, s->g->outputs[i].name, s->g->outputs[i].value, p);
}

/* "x, y" into buf */
static char *script_input_names(const hd_ir_graph *g, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < g->ninputs && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "", g->inputs[i].name);
    if (!g->ninputs) snprintf(buf, n, "none");
    return buf;
}

hd_status hd_script_set_input(hd_script *s, const char *name, hd_tensor *t) {
    int i = hd_ir_find_input(s->g, name);
    char names[256];
    if (i < 0)
        return hd_error(s->ctx, HD_ERR_ARGUMENT, "script '%s' has no input '%s' (inputs: %s)",
                        s->g->name, name, script_input_names(s->g, names, sizeof names));
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

hd_status hd_script_compile(hd_script *s) {
    if (s->exec) return HD_OK;
    const hd_jit_compiler *jc;
    if (hd_jit_compiler_find(s->ctx, s->compiler, &jc)) return s->ctx->status;
    hd_jit_options o;
    hd_jit_options_init(&o);
    o.device = s->device;
    if (jc->available(s->ctx, &o) || jc->compile(s->ctx, s->g, &o, &s->exec)) return s->ctx->status;
    s->jc = jc;
    s->compiles++;
    return HD_OK;
}

hd_status hd_script_run(hd_script *s) {
    if (hd_script_compile(s)) return s->ctx->status;
    for (int i = 0; i < s->g->ninputs; i++) {
        if (s->inputs[i]) continue;
        char ty[160];
        const hd_ir_value *v = &s->g->values[s->g->inputs[i].value];
        return hd_error(s->ctx, HD_ERR_ARGUMENT, "script '%s': input '%s' (%s) is not set",
                        s->g->name, s->g->inputs[i].name,
                        hd_ir_type_str(v->dtype, v->shape, v->ndim, ty, sizeof ty));
    }
    script_drop_outputs(s);
    return s->jc->run(s->ctx, s->exec, s->inputs, s->g->ninputs, s->outputs, s->g->noutputs);
}

hd_tensor *hd_script_output(const hd_script *s, const char *name) {
    int i = hd_ir_find_output(s->g, name);
    return i < 0 ? NULL : s->outputs[i];
}

hd_tensor *hd_script_output_at(const hd_script *s, int i) {
    return i < 0 || i >= s->g->noutputs ? NULL : s->outputs[i];
}

hd_status hd_script_set_compiler(hd_script *s, const char *name) {
    const hd_jit_compiler *jc;
    if (hd_jit_compiler_find(s->ctx, name, &jc)) return s->ctx->status;
    script_drop_exec(s);
    snprintf(s->compiler, sizeof s->compiler, "%s", jc->name);
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
    if (!s->exec) return;
    st->compiled = 1;
    s->jc->stats(s->exec, &st->jit);
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
