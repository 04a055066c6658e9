/* The compiler registry, the shared pipeline entry and cache-key helpers. */
#include "hd_compile.h"
#include "hd_profile.h"
#include "hd_loop.h"
#include "hd_pass.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const hd_jit_compiler_names[] = {"interp", "llvm", "cuda", NULL};

void hd_jit_options_init(hd_jit_options *o) {
    memset(o, 0, sizeof *o);
    o->device = "cpu";
    o->opt_level = 1;
    o->fold_limit = (size_t)1 << 20;
}

hd_status hd_jit_compiler_find(hd_ctx *ctx, const char *name, const hd_jit_compiler **out) {
    *out = NULL;
    if (name && strcmp(name, "interp") == 0) {
        *out = &hd_jit_interp;
        return HD_OK;
    }
    if (name && strcmp(name, "llvm") == 0) {
#if HODU_HAVE_LLVM
        *out = &hd_jit_llvm;
        return HD_OK;
#else
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "compiler 'llvm' is not available in this build (use \"interp\")");
#endif
    }
    if (name && strcmp(name, "cuda") == 0) {
        *out = &hd_jit_cuda;
        return HD_OK;
    }
    return hd_error(ctx, HD_ERR_ARGUMENT, "unknown compiler '%s' (known: interp, llvm, cuda)",
                    name ? name : "");
}

const char *hd_jit_default_compiler(hd_ctx *ctx, int *named) {
    const char *env = getenv("HODU_COMPILER");
    if (named) *named = env && *env;
    if (env && *env) return env;
    const hd_jit_compiler *jc;
    hd_jit_options o;
    hd_jit_options_init(&o);
    int llvm = !hd_jit_compiler_find(ctx, "llvm", &jc) && !jc->available(ctx, &o);
    hd_error_clear(ctx);
    return llvm ? "llvm" : "interp";
}

hd_status hd_jit_optimize(hd_ctx *ctx, hd_ir_graph *g, const hd_jit_options *opt,
                          hd_jit_stats *st) {
    hd_jit_options def;
    if (!opt) {
        hd_jit_options_init(&def);
        opt = &def;
    }
    hd_pass_report r;
    size_t limit = opt->fold_limit ? opt->fold_limit : (size_t)1 << 20;
    int level = opt->no_fuse && opt->opt_level > 0 ? HD_PASS_NO_FUSE : opt->opt_level;
    if (hd_pass_pipeline(g, level, limit, &r)) return ctx->status;
    if (st) {
        st->nodes_traced = r.nodes_before;
        st->nodes = r.nodes_after;
        st->groups = r.groups;
        st->casts = r.casts;
        st->folded = r.folded;
        st->simplified = r.simplified;
        st->merged = r.merged;
        st->removed = r.removed;
        st->copies = r.copies;
    }
    return HD_OK;
}

static void type_of(const hd_tensor *t, char *buf, size_t n) {
    hd_ir_type_str(t->dtype, t->shape, t->ndim, buf, n);
}

hd_status hd_jit_check_inputs(hd_ctx *ctx, const hd_ir_graph *g, hd_tensor *const *inputs,
                              int ninputs) {
    if (ninputs != g->ninputs)
        return hd_error(ctx, HD_ERR_ARGUMENT, "%s takes %d inputs, got %d", g->name, g->ninputs,
                        ninputs);
    for (int i = 0; i < ninputs; i++) {
        const hd_ir_value *v = &g->values[g->inputs[i].value];
        const hd_tensor *t = inputs[i];
        int ok = t && t->dtype == v->dtype && t->ndim == v->ndim &&
                 !memcmp(t->shape, v->shape, (size_t)v->ndim * sizeof *v->shape);
        if (ok && t->storage) continue; /* the messages are made only when needed */
        char want[160], got[160];
        hd_ir_type_str(v->dtype, v->shape, v->ndim, want, sizeof want);
        if (!t)
            return hd_error(ctx, HD_ERR_ARGUMENT, "input '%s' (%s) is missing", g->inputs[i].name,
                            want);
        type_of(t, got, sizeof got);
        if (!ok)
            return hd_error(ctx, HD_ERR_ARGUMENT, "input '%s' expects %s, got %s",
                            g->inputs[i].name, want, got);
        return hd_error(ctx, HD_ERR_ARGUMENT, "input '%s' has no data (a traced tensor)",
                        g->inputs[i].name);
    }
    return HD_OK;
}

double hd_jit_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static hd_status jit_build(hd_jit_head *h, const hd_jit_build *b, const hd_ir_graph *g,
                           const hd_jit_options *opt) {
    hd_ctx *ctx = h->ctx;
    hd_jit_exec *e = (hd_jit_exec *)h;
    if (hd_backend_parse_device(ctx, opt->device ? opt->device : "cpu", &h->be, &h->device) ||
        !(h->g = hd_ir_graph_clone(g)))
        return ctx->status;
    double t0 = hd_jit_now();
    if (hd_jit_optimize(ctx, h->g, opt, &h->stats)) return ctx->status;
    h->stats.pass_seconds = hd_jit_now() - t0;
    if (b->plan(e, opt) || hd_jit_loops_compile(ctx, b->self, h->g, opt) || b->codegen(e, opt))
        return ctx->status;
    return HD_OK;
}

static hd_status jit_compile(hd_ctx *ctx, const hd_jit_build *b, const hd_ir_graph *g,
                             const hd_jit_options *opt, hd_jit_exec **out) {
    double t0 = hd_jit_now();
    hd_jit_options def;
    *out = NULL;
    if (!opt) {
        hd_jit_options_init(&def);
        opt = &def;
    }
    if (b->self->available(ctx, opt)) return ctx->status;
    hd_jit_head *h = hd_ctx_calloc(ctx, 1, b->size);
    if (!h) return ctx->status;
    h->ctx = ctx;
    if (jit_build(h, b, g, opt)) {
        b->self->free(ctx, (hd_jit_exec *)h);
        return ctx->status;
    }
    h->stats.compile_seconds = hd_jit_now() - t0;
    *out = (hd_jit_exec *)h;
    return HD_OK;
}

hd_status hd_jit_compile(hd_ctx *ctx, const hd_jit_build *b, const hd_ir_graph *g,
                         const hd_jit_options *opt, hd_jit_exec **out) {
    if (!hd_profile_on(ctx)) return jit_compile(ctx, b, g, opt, out);
    double t0 = hd_profile_begin(ctx);
    hd_status st = jit_compile(ctx, b, g, opt, out);
    hd_profile_end(ctx, HD_PROF_COMPILE, g->name, t0, 0, 0);
    return st;
}

void hd_jit_head_stats(const hd_jit_exec *e, hd_jit_stats *st) {
    *st = ((const hd_jit_head *)e)->stats;
}

const hd_ir_graph *hd_jit_head_graph(const hd_jit_exec *e) {
    return ((const hd_jit_head *)e)->g;
}

static hd_status jit_run(hd_ctx *ctx, const hd_jit_run_ops *ops, hd_jit_exec *e, void *ud,
                         const hd_ir_graph *g, hd_jit_stats *st, hd_tensor *const *inputs,
                         int ninputs, hd_tensor **outputs, int noutputs) {
    double t0 = hd_jit_now();
    for (int i = 0; i < noutputs; i++) outputs[i] = NULL;
    if (noutputs != g->noutputs)
        return hd_error(ctx, HD_ERR_ARGUMENT, "%s has %d outputs, %d requested", g->name,
                        g->noutputs, noutputs);
    if (hd_jit_check_inputs(ctx, g, inputs, ninputs)) return ctx->status;
    hd_status r = HD_OK;
    st->run_copies = 0;
    for (int i = 0; i < ninputs && !r; i++) r = ops->bind_input(e, ctx, ud, i, inputs[i]);
    if (!r) r = ops->exec(e, ctx, ud);
    for (int i = 0; i < noutputs && !r; i++) r = ops->output(e, ctx, ud, i, &outputs[i]);
    if (ops->unbind) ops->unbind(e);
    if (r) {
        for (int i = 0; i < noutputs; i++) {
            hd_tensor_unref(outputs[i]);
            outputs[i] = NULL;
        }
        return r;
    }
    st->runs++;
    st->run_seconds += hd_jit_now() - t0;
    return HD_OK;
}

hd_status hd_jit_run(hd_ctx *ctx, const hd_jit_run_ops *ops, hd_jit_exec *e, void *ud,
                     const hd_ir_graph *g, hd_jit_stats *st, hd_tensor *const *inputs, int ninputs,
                     hd_tensor **outputs, int noutputs) {
    if (!hd_profile_on(ctx))
        return jit_run(ctx, ops, e, ud, g, st, inputs, ninputs, outputs, noutputs);
    double t0 = hd_profile_begin(ctx), bytes = 0;
    hd_status r = jit_run(ctx, ops, e, ud, g, st, inputs, ninputs, outputs, noutputs);
    for (int i = 0; i < ninputs; i++) bytes += inputs[i] ? (double)hd_tensor_nbytes(inputs[i]) : 0;
    for (int i = 0; !r && i < noutputs; i++)
        bytes += outputs[i] ? (double)hd_tensor_nbytes(outputs[i]) : 0;
    hd_profile_end(ctx, HD_PROF_RUN, g->name, t0, bytes, 0);
    return r;
}

/* ---- cache keys ---- */

static void sig_device(const hd_tensor *t, char *buf, size_t n) {
    if (!t->storage)
        snprintf(buf, n, "symbolic");
    else
        snprintf(buf, n, "%s:%d", t->storage->backend->name, t->storage->device);
}

void hd_jit_signature_make(hd_jit_signature *s, hd_tensor *const *inputs, int n) {
    hd_ir_hasher h;
    hd_ir_hash_init(&h);
    memset(s, 0, sizeof *s);
    s->n = n;
    hd_ir_hash_u64(&h, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        hd_jit_sig_entry e;
        memset(&e, 0, sizeof e);
        const hd_tensor *t = inputs[i];
        if (t) {
            e.dtype = t->dtype;
            e.ndim = t->ndim;
            memcpy(e.shape, t->shape, sizeof e.shape);
            sig_device(t, e.device, sizeof e.device);
        }
        hd_ir_hash_u64(&h, (uint64_t)e.dtype);
        hd_ir_hash_u64(&h, (uint64_t)e.ndim);
        for (int d = 0; d < e.ndim; d++) hd_ir_hash_u64(&h, (uint64_t)e.shape[d]);
        hd_ir_hash_str(&h, e.device);
        hd_ir_hash_u64(&h, t ? (uint64_t)t->number : 2);
        if (i < HD_JIT_SIG_MAX) s->e[i] = e;
    }
    s->hash = hd_ir_hash_final(&h);
}

uint64_t hd_jit_constants_hash(hd_tensor *const *ts, int n, size_t byte_limit) {
    hd_ir_hasher h;
    hd_ir_hash_init(&h);
    hd_ir_hash_u64(&h, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        const hd_tensor *t = ts[i];
        if (!t) {
            hd_ir_hash_u64(&h, 0);
        } else if (hd_tensor_nbytes(t) <= byte_limit && hd_tensor_is_cpu(t)) {
            hd_ir_hash_tensor(&h, t);
        } else {
            hd_ir_hash_u64(&h, (uint64_t)(uintptr_t)t->storage);
            hd_ir_hash_u64(&h, t->storage ? t->storage->version : 0);
            hd_ir_hash_u64(&h, (uint64_t)t->offset);
            hd_ir_hash_u64(&h, (uint64_t)t->dtype);
            for (int d = 0; d < t->ndim; d++) {
                hd_ir_hash_u64(&h, (uint64_t)t->shape[d]);
                hd_ir_hash_u64(&h, (uint64_t)t->strides[d]);
            }
        }
    }
    return hd_ir_hash_final(&h);
}

uint64_t hd_jit_string_hash(const char *s) {
    hd_ir_hasher h;
    hd_ir_hash_init(&h);
    hd_ir_hash_str(&h, s ? s : "");
    return hd_ir_hash_final(&h);
}

uint64_t hd_jit_options_hash(const hd_jit_options *o) {
    hd_ir_hasher h;
    hd_ir_hash_init(&h);
    hd_ir_hash_str(&h, o->device ? o->device : "cpu");
    hd_ir_hash_u64(&h, (uint64_t)o->opt_level);
    hd_ir_hash_u64(&h, (uint64_t)o->fold_limit);
    hd_ir_hash_u64(&h, (uint64_t)o->no_inplace);
    hd_ir_hash_u64(&h, (uint64_t)o->no_reuse);
    hd_ir_hash_u64(&h, (uint64_t)o->no_fuse);
    return hd_ir_hash_final(&h);
}

unsigned hd_jit_key_diff(const hd_jit_key *a, const hd_jit_key *b) {
    unsigned d = 0;
    if (a->body != b->body) d |= HD_JIT_KEY_BODY;
    if (a->inputs != b->inputs) d |= HD_JIT_KEY_INPUTS;
    if (a->constants != b->constants) d |= HD_JIT_KEY_CONSTANTS;
    if (a->compiler != b->compiler) d |= HD_JIT_KEY_COMPILER;
    if (a->options != b->options) d |= HD_JIT_KEY_OPTIONS;
    return d;
}

static void sig_entry_str(const hd_jit_sig_entry *e, char *buf, size_t n) {
    char ty[160];
    snprintf(buf, n, "%s on %s", hd_ir_type_str(e->dtype, e->shape, e->ndim, ty, sizeof ty),
             e->device);
}

/* The first input whose entry differs, described into buf. */
static void describe_inputs(const hd_jit_signature *a, const hd_jit_signature *b, char *buf,
                            size_t n) {
    if (!a || !b) {
        snprintf(buf, n, "input shapes, dtypes or devices changed");
        return;
    }
    if (a->n != b->n) {
        snprintf(buf, n, "the number of inputs changed: %d -> %d", a->n, b->n);
        return;
    }
    for (int i = 0; i < a->n && i < HD_JIT_SIG_MAX; i++) {
        if (!memcmp(&a->e[i], &b->e[i], sizeof a->e[i])) continue;
        char x[200], y[200];
        sig_entry_str(&a->e[i], x, sizeof x);
        sig_entry_str(&b->e[i], y, sizeof y);
        snprintf(buf, n, "input %d changed: %s -> %s", i, x, y);
        return;
    }
    snprintf(buf, n, "input signature changed");
}

char *hd_jit_key_describe(unsigned diff, const hd_jit_signature *old_sig,
                          const hd_jit_signature *new_sig, char *buf, size_t n) {
    static const char *what[] = {"the body changed", NULL, "captured constants changed",
                                 "the compiler changed", "compile options changed"};
    size_t used = 0;
    buf[0] = 0;
    if (!diff) {
        snprintf(buf, n, "key unchanged");
        return buf;
    }
    for (int bit = 0; bit < 5 && used < n; bit++) {
        if (!(diff & (1u << bit))) continue;
        char part[512];
        if (bit == 1)
            describe_inputs(old_sig, new_sig, part, sizeof part);
        else
            snprintf(part, sizeof part, "%s", what[bit]);
        used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? "; " : "", part);
    }
    return buf;
}
