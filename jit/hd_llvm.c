/* The llvm compiler: the shared passes, the plan (hd_plan.c), one
 * native function for the whole graph (hd_llvm_gen.c), machine code
 * through ORC (hd_llvm_jit.c), and the run: bind the inputs and fresh
 * outputs into the slot table, call hd_main, hand the outputs back.
 *
 * Memory: stored intermediates live in one arena allocated at compile
 * time; constants are placed once; inputs are used in place when they are
 * contiguous (else copied into the executable's own buffer, as interp);
 * outputs get fresh memory at every run. Tensors exist only for what the
 * runtime's kernels and callbacks see. */
#include "hd_llvm.h"
#include "hd_loop.h"

#if HODU_HAVE_LLVM

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct hd_jit_exec {
    hd_jit_head h;
    hd_plan plan;
    hd_llvm_rt rt;
    void **slots;
    hd_tensor **roots;   /* per slot: the tensor whose data the slot points at */
    hd_tensor **vals;    /* per value */
    hd_tensor **own_in;  /* per input: a buffer for inputs that cannot be bound */
    hd_tensor **in;      /* per input: this run's tensor (borrowed) */
    char *direct;        /* per input: its slot is the tensor's own memory this run */
    char *donee;         /* per input: a donated output is computed into its slot */
    hd_tensor **results; /* per slot: this run's fresh output */
    hd_tensor ***node_in;
    hd_tensor **node_in_flat;
    size_t node_in_n;
    hd_llvm_jit *jit;
    int32_t (*main)(void **slots, void *rt);
};

static hd_status llvm_available(hd_ctx *ctx, const hd_jit_options *opt) {
    const char *dev = opt && opt->device ? opt->device : "cpu";
    const hd_backend *be;
    int d;
    if (hd_backend_parse_device(ctx, dev, &be, &d)) return ctx->status;
    if (be != &hd_cpu_backend)
        return hd_error(ctx, HD_ERR_RUNTIME, "compiler 'llvm' runs on the cpu only, not on '%s'",
                        dev);
    hd_llvm_host h;
    return hd_llvm_host_get(ctx, &h);
}

static void llvm_free(hd_ctx *ctx, hd_jit_exec *e) {
    if (!e) return;
    hd_llvm_jit_free(ctx, e->jit);
    int nv = e->h.g ? e->h.g->nvalues : 0, ni = e->h.g ? e->h.g->ninputs : 0, ns = e->plan.nslots;
    int nn = e->h.g ? e->h.g->nnodes : 0;
    if (e->vals)
        for (int v = 0; v < nv; v++) hd_tensor_unref(e->vals[v]);
    if (e->roots)
        for (int s = 0; s < ns; s++) hd_tensor_unref(e->roots[s]);
    if (e->own_in)
        for (int i = 0; i < ni; i++) hd_tensor_unref(e->own_in[i]);
    /* every table has one spare entry, so that none is of size 0 */
    hd_ctx_free(ctx, e->vals, (size_t)(nv + 1) * sizeof *e->vals);
    hd_ctx_free(ctx, e->roots, (size_t)(ns + 1) * sizeof *e->roots);
    hd_ctx_free(ctx, e->slots, (size_t)(ns + 1) * sizeof *e->slots);
    hd_ctx_free(ctx, e->results, (size_t)(ns + 1) * sizeof *e->results);
    hd_ctx_free(ctx, e->own_in, (size_t)(ni + 1) * sizeof *e->own_in);
    hd_ctx_free(ctx, e->in, (size_t)(ni + 1) * sizeof *e->in);
    hd_ctx_free(ctx, e->direct, (size_t)(ni + 1) * 2); /* donee is its second half */
    hd_ctx_free(ctx, e->node_in, (size_t)(nn + 1) * sizeof *e->node_in);
    hd_ctx_free(ctx, e->node_in_flat, (e->node_in_n + 1) * sizeof *e->node_in_flat);
    hd_ir_graph_free(e->h.g);
    hd_ctx_free(ctx, e, sizeof *e);
}

/* ---- setup ---- */

/* A tensor with no memory of its own whose data pointer a run sets. */
static hd_tensor *llvm_slot_tensor(hd_jit_exec *e, const hd_ir_value *v) {
    return hd_tensor_wrap(e->h.ctx, v->dtype, v->shape, v->ndim, NULL);
}

/* Constant c, contiguous, in host memory: a constant made on a device (a
 * device tensor created inside the function) is copied, never read where
 * it lies. */
static hd_tensor *llvm_place_const(hd_jit_exec *e, hd_tensor *c) {
    struct hd_trace *tr = e->h.ctx->trace;
    e->h.ctx->trace = NULL;
    hd_tensor *t = hd_tensor_contiguous(e->h.ctx, c),
              *h = t ? hd_tensor_to_host(e->h.ctx, t) : NULL;
    e->h.ctx->trace = tr;
    hd_tensor_unref(t);
    return h;
}

static hd_status llvm_roots(hd_jit_exec *e) {
    const hd_plan *p = &e->plan;
    hd_ir_graph *g = e->h.g;
    int64_t n = (int64_t)p->arena_bytes;
    if (!(e->roots[0] = hd_tensor_new(e->h.ctx, HD_U8, &n, 1))) return e->h.ctx->status;
    e->slots[0] = e->roots[0]->storage->data;
    for (int s = 1; s < p->nslots; s++) {
        int v = p->slot_value[s];
        const hd_ir_value *val = &g->values[v];
        hd_tensor *t = val->kind == HD_IR_VALUE_CONST ? llvm_place_const(e, g->consts[val->index].t)
                                                      : llvm_slot_tensor(e, val);
        if (!t) return e->h.ctx->status;
        e->roots[s] = t;
        e->slots[s] = t->storage->data ? hd_tensor_data(t) : NULL;
        if (val->kind == HD_IR_VALUE_CONST) {
            e->h.stats.consts++;
            e->h.stats.const_bytes += hd_tensor_nbytes(t);
        }
    }
    return HD_OK;
}

/* The input tensors of every runtime node, and a check that the backend
 * runs it (as interp does). */
static hd_status llvm_node_inputs(hd_jit_exec *e) {
    const hd_plan *p = &e->plan;
    hd_ir_graph *g = e->h.g;
    size_t total = 0;
    for (int s = 0; s < p->nsteps; s++)
        if (p->steps[s].kernel < 0) total += (size_t)g->nodes[p->steps[s].node].nin;
    e->node_in_n = total;
    if (!(e->node_in_flat = hd_ctx_calloc(e->h.ctx, total + 1, sizeof *e->node_in_flat)))
        return e->h.ctx->status;
    size_t k = 0;
    for (int s = 0; s < p->nsteps; s++) {
        if (p->steps[s].kernel >= 0) continue;
        const hd_ir_node *n = &g->nodes[p->steps[s].node];
        e->node_in[p->steps[s].node] = e->node_in_flat + k;
        for (int j = 0; j < n->nin; j++) e->node_in_flat[k++] = e->vals[n->in[j]];
        if (n->op < 0) continue;
        hd_dtype dt = n->nin ? g->values[n->in[0]].dtype : g->values[n->out].dtype;
        if (!hd_cpu_backend.supports_op((hd_op)n->op, dt))
            return hd_error(e->h.ctx, HD_ERR_RUNTIME, "%s is not supported for %s tensors on cpu",
                            hd_op_name((hd_op)n->op), hd_dtype_name(dt));
    }
    return HD_OK;
}

/* What the code generator covers beyond the shared plan (hd_plan.h). */
#define LLVM_PLAN_FLAGS (HD_PLAN_GEMM | HD_PLAN_EXTRA)

/* HODU_LOG=fallback: the nodes the runtime's kernels run. */
static void llvm_log_fallbacks(const hd_jit_exec *e) {
    const hd_plan *p = &e->plan;
    const hd_ir_graph *g = e->h.g;
    if (!hd_log_on("fallback")) return;
    for (int s = 0; s < p->nsteps; s++) {
        if (p->steps[s].kernel >= 0) continue;
        const hd_ir_node *n = &g->nodes[p->steps[s].node];
        const char *why;
        if (n->op < 0) continue;
        hd_plan_supports(g, n, LLVM_PLAN_FLAGS, &why);
        const hd_ir_value *v = &g->values[n->out];
        char ty[160];
        hd_ir_type_str(v->dtype, v->shape, v->ndim, ty, sizeof ty);
        fprintf(stderr, "llvm: fallback: %%%d = %s : %s runs the cpu kernel (%s)\n", n->out,
                hd_op_name((hd_op)n->op), ty, why);
    }
}

/* LLVM's remarks and warnings (a loop it could not vectorize) go to
 * stderr only with HODU_LOG=llvm. */
static void llvm_diagnostic(LLVMDiagnosticInfoRef d, void *ud) {
    HD_UNUSED(ud);
    if (!hd_log_on("llvm")) return;
    char *m = LLVMGetDiagInfoDescription(d);
    fprintf(stderr, "llvm: diagnostic: %s\n", m);
    LLVMDisposeMessage(m);
}

/* A plan whose every step is a runtime node (a graph that is one loop
 * node and its results, say) needs no machine code: llvm_exec runs the
 * steps itself, and compiling costs no LLVM module. */
static int llvm_steps_only(const hd_plan *p) {
    if (p->nkernels) return 0;
    for (int s = 0; s < p->nsteps; s++)
        if (p->steps[s].kernel >= 0 || p->steps[s].gemm) return 0;
    return 1;
}

static hd_status llvm_codegen(hd_jit_exec *e) {
    if (llvm_steps_only(&e->plan)) return HD_OK;
    hd_llvm_gen G;
    hd_llvm_host h;
    memset(&G, 0, sizeof G);
    if (hd_llvm_host_get(e->h.ctx, &h)) return e->h.ctx->status;
    double t0 = hd_jit_now();
    G.ctx = e->h.ctx;
    G.plan = &e->plan;
    G.f16c = h.f16c;
    G.avx512 = h.avx512;
    G.ew_lanes = !h.ew_vectors ? 0 : h.avx512 ? 32 : h.avx2 ? 16 : 0;
    G.t.c = LLVMContextCreate();
    LLVMContextSetDiagnosticHandler(G.t.c, llvm_diagnostic, NULL);
    G.mod =
        LLVMModuleCreateWithNameInContext("hodu", G.t.c); /* the same code shares a cache entry */
    G.b = LLVMCreateBuilderInContext(G.t.c);
    hd_status st = hd_llvm_gen_module(&G);
    LLVMDisposeBuilder(G.b);
    if (st) {
        LLVMDisposeModule(G.mod);
        LLVMContextDispose(G.t.c);
        return st;
    }
    double t1 = hd_jit_now();
    hd_llvm_timing tm;
    void *main = NULL;
    if (hd_llvm_jit_build(e->h.ctx, G.mod, G.t.c, &e->jit, &main, &tm)) return e->h.ctx->status;
    e->main = (int32_t(*)(void **, void *))main;
    e->h.stats.llvm_ir_seconds = t1 - t0;
    e->h.stats.llvm_opt_seconds = tm.opt;
    e->h.stats.llvm_obj_seconds = tm.obj;
    e->h.stats.llvm_link_seconds = tm.link;
    e->h.stats.llvm_seconds = hd_jit_now() - t0;
    e->h.stats.cache_hit = tm.cache_hit;
    return HD_OK;
}

static hd_status llvm_plan(hd_jit_exec *e, const hd_jit_options *opt) {
    return hd_plan_build(e->h.g,
                         (opt->no_reuse ? HD_PLAN_NO_REUSE : 0) |
                             (opt->no_fuse ? HD_PLAN_NO_FUSE : 0) | LLVM_PLAN_FLAGS |
                             HD_PLAN_DONATE,
                         &e->plan);
}

/* Bytes of the intermediate values eager code would allocate one by one. */
static size_t llvm_naive_bytes(const hd_jit_exec *e) {
    const hd_ir_graph *g = e->h.g;
    size_t n = 0;
    for (int v = 0; v < g->nvalues; v++)
        if (g->values[v].kind == HD_IR_VALUE_NODE && e->plan.vals[v].root == v &&
            !e->plan.vals[v].fresh && e->plan.vals[v].into < 0 &&
            (e->plan.vals[v].kernel < 0 || e->plan.vals[v].stored))
            n += (size_t)hd_shape_numel(g->values[v].shape, g->values[v].ndim) *
                 (size_t)hd_dtype_size(g->values[v].dtype);
    return n;
}

static hd_status llvm_setup(hd_jit_exec *e, const hd_jit_options *opt) {
    HD_UNUSED(opt);
    hd_ctx *ctx = e->h.ctx;
    hd_ir_graph *g = e->h.g;
    size_t nv = (size_t)g->nvalues + 1, ns = (size_t)e->plan.nslots + 1;
    e->vals = hd_ctx_calloc(ctx, nv, sizeof *e->vals);
    e->roots = hd_ctx_calloc(ctx, ns, sizeof *e->roots);
    e->slots = hd_ctx_calloc(ctx, ns, sizeof *e->slots);
    e->results = hd_ctx_calloc(ctx, ns, sizeof *e->results);
    e->own_in = hd_ctx_calloc(ctx, (size_t)g->ninputs + 1, sizeof *e->own_in);
    e->node_in = hd_ctx_calloc(ctx, (size_t)g->nnodes + 1, sizeof *e->node_in);
    e->in = hd_ctx_calloc(ctx, (size_t)g->ninputs + 1, sizeof *e->in);
    e->direct = hd_ctx_calloc(ctx, (size_t)g->ninputs + 1, 2);
    if (!e->vals || !e->roots || !e->slots || !e->results || !e->own_in || !e->node_in || !e->in ||
        !e->direct)
        return ctx->status;
    e->donee = e->direct + g->ninputs + 1;
    for (int v = 0; v < g->nvalues; v++)
        if (e->plan.vals[v].into >= 0) e->donee[e->plan.vals[v].into] = 1;
    if (llvm_roots(e) || hd_plan_views(ctx, &e->plan, e->roots, e->vals) || llvm_node_inputs(e))
        return ctx->status;
    llvm_log_fallbacks(e);
    e->rt = (hd_llvm_rt){ctx, &hd_cpu_backend, g, e->vals, e->node_in};
    e->h.stats.kernels = e->plan.nsteps;
    e->h.stats.planned_bytes = e->plan.arena_bytes;
    e->h.stats.fallbacks = e->plan.nfallback;
    e->h.stats.donated = e->plan.ndonated;
    e->h.stats.naive_bytes = llvm_naive_bytes(e);
    return llvm_codegen(e);
}

static const hd_jit_build llvm_build = {&hd_jit_llvm, sizeof(hd_jit_exec), llvm_plan, llvm_setup};

static hd_status llvm_compile(hd_ctx *ctx, const hd_ir_graph *g, const hd_jit_options *opt,
                              hd_jit_exec **out) {
    return hd_jit_compile(ctx, &llvm_build, g, opt, out);
}

/* ---- running ---- */

static void llvm_set_slot(hd_jit_exec *e, int s, void *data) {
    e->slots[s] = data;
    e->roots[s]->storage->data = data;
}

/* Copy input i into the executable's own buffer and point its slot there. */
static hd_status llvm_bind_copy(hd_jit_exec *e, hd_ctx *ctx, int i, hd_tensor *t) {
    int s = e->plan.slot_in0 + i, here = hd_tensor_is_cpu(t);
    e->direct[i] = 0;
    if (!e->own_in[i] && !(e->own_in[i] = hd_tensor_new(e->h.ctx, t->dtype, t->shape, t->ndim)))
        return ctx->status;
    /* a number on a device: a host copy first (the code reads host memory) */
    hd_tensor *h = here ? hd_tensor_ref(t) : hd_tensor_to_host(ctx, t);
    if (!h) return ctx->status;
    static const hd_attrs none;
    hd_status st =
        t->numel ? hd_cpu_backend.run_op(ctx, HD_OP_COPY, e->own_in[i], &h, 1, &none) : HD_OK;
    e->h.stats.run_copies += t->numel != 0;
    hd_tensor_unref(h);
    if (st) return st;
    llvm_set_slot(e, s, e->own_in[i]->storage->data);
    return HD_OK;
}

/* Point input i's slot at the caller's tensor, or copy it into the
 * executable's own buffer when it is strided. */
static hd_status llvm_bind_input(hd_jit_exec *e, hd_ctx *ctx, void *ud, int i, hd_tensor *t) {
    HD_UNUSED(ud);
    int here = hd_tensor_is_cpu(t);
    e->in[i] = t;
    if (!here && !hd_tensor_follows_device(t))
        return hd_error(ctx, HD_ERR_RUNTIME, "input '%s' is on %s:%d, the code runs on cpu:0",
                        e->h.g->inputs[i].name, t->storage->backend->name, t->storage->device);
    if (here && hd_tensor_is_contiguous(t)) {
        llvm_set_slot(e, e->plan.slot_in0 + i, hd_tensor_data(t));
        e->direct[i] = 1;
        return HD_OK;
    }
    return llvm_bind_copy(e, ctx, i, t);
}

/* A donated output overwrites its input's memory, so that input must be
 * the only one on its storage this run: another input (a view of it, the
 * same tensor given twice) or a constant made of it would read what the
 * run wrote. Such an input runs on the executable's own copy, and the
 * output is copied out of it. */
static hd_status llvm_bind_donees(hd_jit_exec *e, hd_ctx *ctx) {
    for (int j = 0; j < e->h.g->ninputs; j++)
        if (e->donee[j] && e->direct[j] &&
            hd_plan_input_shared(&e->plan, e->h.g->ninputs, e->in, e->roots, j) &&
            llvm_bind_copy(e, ctx, j, e->in[j]))
            return ctx->status;
    return HD_OK;
}

static hd_status llvm_bind_outputs(hd_jit_exec *e) {
    const hd_plan *p = &e->plan;
    for (int s = p->slot_out0; s < p->nslots; s++) {
        const hd_ir_value *v = &e->h.g->values[p->slot_value[s]];
        if (!(e->results[s] = hd_tensor_new(e->h.ctx, v->dtype, v->shape, v->ndim)))
            return e->h.ctx->status;
        llvm_set_slot(e, s, e->results[s]->storage->data);
    }
    return HD_OK;
}

/* Output i for the caller: this run's fresh memory, or a copy of a value
 * the executable keeps (an input, a constant, a view). */
static hd_status llvm_output(hd_jit_exec *e, hd_ctx *ctx, void *ud, int i, hd_tensor **out) {
    HD_UNUSED(ud);
    int v = e->h.g->outputs[i].value;
    const hd_plan_val *pv = &e->plan.vals[v];
    if (pv->fresh) {
        *out = hd_tensor_ref(e->results[pv->slot]);
        return HD_OK;
    }
    if (pv->whole && e->plan.vals[pv->root].fresh)
        return (*out = hd_plan_whole_view(ctx, &e->plan, v, e->results[pv->slot])) ? HD_OK
                                                                                   : ctx->status;
    if (pv->into >= 0 && e->direct[pv->into]) { /* written into the caller's tensor */
        *out = hd_tensor_ref(e->in[pv->into]);
        return HD_OK;
    }
    hd_tensor *src = e->vals[v];
    hd_tensor *t = hd_tensor_new(e->h.ctx, src->dtype, src->shape, src->ndim);
    if (!t) return e->h.ctx->status;
    static const hd_attrs none;
    if (t->numel && hd_cpu_backend.run_op(ctx, HD_OP_COPY, t, &src, 1, &none)) {
        hd_tensor_unref(t);
        return ctx->status;
    }
    e->h.stats.run_copies += t->numel != 0;
    *out = t;
    return HD_OK;
}

static void llvm_unbind(hd_jit_exec *e) {
    const hd_plan *p = &e->plan;
    for (int i = 0; i < e->h.g->ninputs; i++) {
        e->in[i] = NULL;
        e->direct[i] = 0;
    }
    for (int s = p->slot_in0; s < p->slot_const0; s++) llvm_set_slot(e, s, NULL);
    for (int s = p->slot_out0; s < p->nslots; s++) {
        llvm_set_slot(e, s, NULL);
        hd_tensor_unref(e->results[s]);
        e->results[s] = NULL;
    }
}

static hd_status llvm_exec(hd_jit_exec *e, hd_ctx *ctx, void *ud) {
    HD_UNUSED(ud);
    if (e->plan.ndonated && llvm_bind_donees(e, ctx)) return ctx->status;
    if (llvm_bind_outputs(e)) return ctx->status;
    e->rt.ctx = ctx;
    if (e->main) return (hd_status)e->main(e->slots, &e->rt);
    for (int s = 0; s < e->plan.nsteps; s++) {
        hd_status st = (hd_status)hd_llvm_rt_node(&e->rt, e->plan.steps[s].node);
        if (st) return st;
    }
    return HD_OK;
}

static hd_status llvm_run(hd_ctx *ctx, hd_jit_exec *e, hd_tensor *const *inputs, int ninputs,
                          hd_tensor **outputs, int noutputs) {
    static const hd_jit_run_ops ops = {llvm_bind_input, llvm_exec, llvm_output, llvm_unbind};
    return hd_jit_run(ctx, &ops, e, NULL, e->h.g, &e->h.stats, inputs, ninputs, outputs, noutputs);
}

const hd_jit_compiler hd_jit_llvm = {
    /* .name = */ "llvm",
    /* .available = */ llvm_available,
    /* .compile = */ llvm_compile,
    /* .run = */ llvm_run,
    /* .free = */ llvm_free,
    /* .stats = */ hd_jit_head_stats,
    /* .graph = */ hd_jit_head_graph,
};

#endif /* HODU_HAVE_LLVM */
