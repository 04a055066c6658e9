/* The `cuda` compiler (compiled(compiler = "cuda")): the shared passes and
 * plan (hd_plan.c), one generated CUDA C module for the graph
 * (hd_cuda_gen.c: a kernel per plan kernel, compiled with NVRTC and cached
 * in memory and on disk by source hash and arch), the nodes it does not
 * generate run as the backend's eager kernels (matmul through cuBLAS).
 *
 * Memory: stored intermediates in one device arena and constants placed
 * once, both fixed at compile time. Inputs are used where they are (a
 * contiguous tensor on the device: its own address) and fresh outputs are
 * memory handed to the caller as it is (a capturable executable's own
 * blocks, taken again once the caller drops them: cj_ring_take): a run
 * copies nothing. Only a strided input, a cpu scalar, or an input or
 * output whose address keeps moving (below) goes through a buffer of the
 * executable's own.
 *
 * CUDA Graphs: the second run captures every launch of a run on the
 * device's stream, and each later run whose addresses (inputs, outputs)
 * are those of a captured graph is one graph launch. New addresses are
 * captured again (HODU_LOG=recompile says so); the last CJ_GRAPHS graphs
 * are kept, so a caller's output kept across one call (y = f(x): two
 * blocks taken in turn) settles on two graphs. An address
 * that keeps moving after that goes through a fixed buffer from then on.
 * Graphs with callbacks or with steps that must not be replayed as
 * recorded (random draws, index checks on the host, scratch memory) run
 * their launches one by one. The device is the options' device when it is
 * a cuda one, else cuda:0; without a usable GPU every entry point is a
 * clear error (docs/cuda.md). */
#include "hd_compile.h"
#include "hd_cuda_gen.h"
#include "hd_loop.h"
#include "hd_profile.h"
#include "hd_rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* opt with its device made a cuda one. */
static hd_jit_options cj_options(const hd_jit_options *opt) {
    hd_jit_options o;
    if (opt)
        o = *opt;
    else
        hd_jit_options_init(&o);
    if (!o.device || strncmp(o.device, "cuda", 4) != 0) o.device = "cuda:0";
    return o;
}

static hd_status cj_available(hd_ctx *ctx, const hd_jit_options *opt) {
    hd_jit_options o = cj_options(opt);
    const hd_backend *be;
    int dev;
    if (hd_backend_open_device(ctx, o.device, &be, &dev)) {
        char msg[HD_ERRMSG_MAX];
        memcpy(msg, ctx->errmsg, sizeof msg);
        hd_status st = ctx->status == HD_ERR_MEMORY ? HD_ERR_MEMORY : HD_ERR_RUNTIME;
        return hd_error(ctx, st, "compiler 'cuda': %s", msg);
    }
    return HD_OK;
}

#if HODU_HAVE_CUDA

/* Graphs kept per executable, captures for new addresses before the
 * moving ones go through fixed buffers, and the memory kept per output of
 * a capturable executable (cj_ring_take). */
#define CJ_GRAPHS     4
#define CJ_RECAPTURES 8
#define CJ_RING       2

/* A captured graph and the slot addresses it was captured with. */
typedef struct cj_cgraph {
    CUgraphExec exec;
    CUdeviceptr *addr; /* nslots */
    uint64_t used;     /* the run that last launched it */
} cj_cgraph;

typedef struct cj_step {
    int kernel; /* plan kernel, or -1: node runs as an eager kernel */
    int node;
    int draw; /* a random node's draw (cj_draws), or -1 */
    CUfunction f, fin;
    void **args; /* the kernel's slot pointers, then the partials */
} cj_step;

/* An index operand the executable checks before each run, as its op
 * would (hd_cuda_check_indices), so that the op need not wait for the
 * stream to check it and the run can be one CUDA Graph. */
typedef struct cj_check {
    int value; /* an input or constant of the graph, i64 */
    hd_op op;
    int axis;
    int64_t size;
    int step; /* the first step whose node checks them */
} cj_check;

struct hd_jit_exec {
    hd_jit_head h;
    hd_plan plan;
    hd_cuda_gen_info info;
    hd_tensor **roots;     /* per slot: the device tensor it points into */
    CUdeviceptr *slot_ptr; /* per slot: its base address (kernel arguments point here) */
    hd_tensor **vals;      /* per value: a tensor over its memory */
    hd_tensor ***node_in;  /* per node: eager nodes' input tensors */
    hd_tensor **node_in_flat;
    size_t node_in_n;
    hd_tensor *partials; /* split reductions' partial results */
    CUdeviceptr part;
    cj_step *steps;
    int nsteps;
    void **argv;
    size_t argv_n;
    int capturable;   /* may run as one CUDA Graph */
    cj_check *checks; /* index inputs checked on the host before each run */
    int nchecks;
    /* random nodes of a capturable executable: their keys and bases,
     * reserved before each run, in draws_dev (2 u64 each) */
    int64_t *draw_n; /* per draw: the numbers it takes */
    uint64_t *draw_kb;
    int ndraws;
    hd_tensor *draws_dev;
    /* each run ends by adding kb_step (the stream positions a run
     * reserves) to every base in draws_dev, so that a run following the
     * last finds its (key, base) pairs there already and copies nothing:
     * kb_dev holds what the device will hold (valid where kb_known) */
    hd_tensor *kb_bases, *kb_step;
    uint64_t kb_adv; /* kb_step's value */
    uint64_t *kb_dev;
    int kb_known;
    cj_cgraph graphs[CJ_GRAPHS];
    cj_cgraph *gexec;  /* the graph this run launched, or NULL */
    cj_cgraph *last;   /* the graph launched most recently */
    int recaptures;    /* captures for new addresses so far */
    hd_tensor **out;   /* per slot: a fresh output's tensor for this run */
    hd_tensor **own;   /* per slot: the executable's buffer for an input or output */
    hd_tensor **ring;  /* per slot, CJ_RING: an output's memory, handed out again once free */
    hd_tensor **in;    /* per input: this run's tensor */
    char *direct;      /* per input: its slot is the tensor's own memory this run */
    char *donee;       /* per input: a donated output is computed into its memory */
    int *moves;        /* per slot: runs whose address differed from the one before */
    char *fixed;       /* per slot: goes through own[] from now on */
    hd_cuda_pool pool; /* scratch the graph's eager steps used: replays reuse it */
};

static int cj_log_on(void) {
    return hd_log_on("cuda");
}

static void cj_graph_drop(hd_jit_exec *e, cj_cgraph *g) {
    if (g->exec) hd_cuda_api_get()->graph_exec_destroy(g->exec);
    hd_ctx_free(e->h.ctx, g->addr, (size_t)e->plan.nslots * sizeof *g->addr);
    if (e->gexec == g) e->gexec = NULL;
    if (e->last == g) e->last = NULL;
    memset(g, 0, sizeof *g);
}

static void cj_graphs_free(hd_ctx *ctx, hd_jit_exec *e) {
    int any = e->pool.free != NULL;
    for (int i = 0; i < CJ_GRAPHS; i++) any |= e->graphs[i].exec || e->graphs[i].addr;
    if (!any) return;
    hd_cuda_dev *d = hd_cuda_dev_get(ctx, e->h.device);
    for (int i = 0; i < CJ_GRAPHS; i++)
        if (d)
            cj_graph_drop(e, &e->graphs[i]);
        else
            hd_ctx_free(ctx, e->graphs[i].addr, (size_t)e->plan.nslots * sizeof(CUdeviceptr));
    if (d) hd_cuda_pool_release(d, &e->pool);
    hd_error_clear(ctx);
}

static void cj_free(hd_ctx *ctx, hd_jit_exec *e) {
    if (!e) return;
    cj_graphs_free(ctx, e);
    int nv = e->h.g ? e->h.g->nvalues : 0, ns = e->plan.nslots, nn = e->h.g ? e->h.g->nnodes : 0;
    if (e->vals)
        for (int v = 0; v < nv; v++) hd_tensor_unref(e->vals[v]);
    if (e->roots)
        for (int s = 0; s < ns; s++) hd_tensor_unref(e->roots[s]);
    for (int s = 0; s < ns && e->out; s++) hd_tensor_unref(e->out[s]);
    for (int s = 0; s < ns && e->own; s++) hd_tensor_unref(e->own[s]);
    for (int k = 0; k < ns * CJ_RING && e->ring; k++) hd_tensor_unref(e->ring[k]);
    hd_ctx_free(ctx, e->ring, (size_t)(ns + 1) * CJ_RING * sizeof *e->ring);
    hd_ctx_free(ctx, e->out, (size_t)(ns + 1) * sizeof *e->out);
    hd_ctx_free(ctx, e->own, (size_t)(ns + 1) * sizeof *e->own);
    hd_ctx_free(ctx, e->moves, (size_t)(ns + 1) * sizeof *e->moves);
    hd_ctx_free(ctx, e->fixed, (size_t)(ns + 1));
    size_t ni = (size_t)e->h.g->ninputs + 1;
    if (e->in) hd_ctx_free(ctx, e->in, ni * sizeof *e->in);
    if (e->direct) hd_ctx_free(ctx, e->direct, 2 * ni);
    hd_tensor_unref(e->partials);
    hd_ctx_free(ctx, e->vals, (size_t)(nv + 1) * sizeof *e->vals);
    hd_ctx_free(ctx, e->roots, (size_t)(ns + 1) * sizeof *e->roots);
    hd_ctx_free(ctx, e->slot_ptr, (size_t)(ns + 1) * sizeof *e->slot_ptr);
    hd_ctx_free(ctx, e->node_in, (size_t)(nn + 1) * sizeof *e->node_in);
    hd_ctx_free(ctx, e->node_in_flat, (e->node_in_n + 1) * sizeof *e->node_in_flat);
    hd_ctx_free(ctx, e->steps, ((size_t)e->plan.nsteps + 1) * sizeof *e->steps);
    if (e->checks) hd_ctx_free(ctx, e->checks, ((size_t)e->plan.nsteps + 1) * sizeof *e->checks);
    if (e->draw_n) hd_ctx_free(ctx, e->draw_n, ((size_t)e->plan.nsteps + 1) * sizeof *e->draw_n);
    if (e->draw_kb)
        hd_ctx_free(ctx, e->draw_kb, 4 * ((size_t)e->plan.nsteps + 1) * sizeof *e->draw_kb);
    hd_tensor_unref(e->draws_dev);
    hd_tensor_unref(e->kb_bases);
    hd_tensor_unref(e->kb_step);
    hd_ctx_free(ctx, e->argv, (e->argv_n + 1) * sizeof *e->argv);
    hd_cuda_gen_info_free(ctx, &e->info);
    hd_ir_graph_free(e->h.g);
    hd_ctx_free(ctx, e, sizeof *e);
}

/* ---- memory ---- */

static hd_tensor *cj_place_const(hd_jit_exec *e, hd_tensor *c) {
    hd_ctx *ctx = e->h.ctx;
    struct hd_trace *tr = ctx->trace;
    ctx->trace = NULL;
    hd_tensor *host = hd_tensor_contiguous(ctx, c);
    ctx->trace = tr;
    if (!host || host->storage->backend == e->h.be) return host;
    hd_tensor *d = hd_tensor_new_on(ctx, e->h.be, e->h.device, c->dtype, c->shape, c->ndim);
    if (d && host->numel &&
        e->h.be->from_host(ctx, e->h.device, d->storage->data, hd_tensor_data(host),
                           hd_tensor_nbytes(host))) {
        hd_tensor_unref(d);
        d = NULL;
    }
    hd_tensor_unref(host);
    return d;
}

/* Is slot s an input's or a fresh output's (its address set per run)? */
static int cj_slot_moves(const hd_plan *p, int s) {
    return (s >= p->slot_in0 && s < p->slot_const0) || s >= p->slot_out0;
}

/* The root of an input or fresh output slot: a tensor over memory it
 * does not own, pointed at the run's memory by cj_slot_set. */
static hd_tensor *cj_moving_root(hd_jit_exec *e, const hd_ir_value *val) {
    hd_tensor *t = hd_tensor_wrap(e->h.ctx, val->dtype, val->shape, val->ndim, NULL);
    if (!t) return NULL;
    t->storage->backend = e->h.be;
    t->storage->device = e->h.device;
    return t;
}

static hd_status cj_roots(hd_jit_exec *e) {
    const hd_plan *p = &e->plan;
    hd_ir_graph *g = e->h.g;
    int64_t n = p->arena_bytes ? (int64_t)p->arena_bytes : 64;
    if (!(e->roots[0] = hd_tensor_new_on(e->h.ctx, e->h.be, e->h.device, HD_U8, &n, 1)))
        return e->h.ctx->status;
    for (int s = 1; s < p->nslots; s++) {
        const hd_ir_value *val = &g->values[p->slot_value[s]];
        hd_tensor *t = val->kind == HD_IR_VALUE_CONST ? cj_place_const(e, g->consts[val->index].t)
                                                      : cj_moving_root(e, val);
        if (!t) return e->h.ctx->status;
        e->roots[s] = t;
        if (val->kind == HD_IR_VALUE_CONST) {
            e->h.stats.consts++;
            e->h.stats.const_bytes += hd_tensor_nbytes(t);
        }
    }
    for (int s = 0; s < p->nslots; s++)
        if (!cj_slot_moves(p, s))
            e->slot_ptr[s] = (CUdeviceptr)(uintptr_t)hd_tensor_data(e->roots[s]);
    return HD_OK;
}

/* Point slot s at p for this run (kernel arguments and the eager steps'
 * views follow). */
static void cj_slot_set(hd_jit_exec *e, int s, void *p) {
    e->slot_ptr[s] = (CUdeviceptr)(uintptr_t)p;
    e->roots[s]->storage->data = p;
}

/* The executable's own buffer for slot s (made on first use). */
static hd_tensor *cj_own(hd_jit_exec *e, int s) {
    if (!e->own[s]) {
        const hd_ir_value *val = &e->h.g->values[e->plan.slot_value[s]];
        e->own[s] =
            hd_tensor_new_on(e->h.ctx, e->h.be, e->h.device, val->dtype, val->shape, val->ndim);
    }
    return e->own[s];
}

static hd_status cj_bind_copy(hd_jit_exec *e, hd_ctx *ctx, hd_cuda_dev *d, int i, hd_tensor *t);

/* ---- steps ---- */

/* The check of index node n's indices (those of index_select, index_add,
 * one_hot, cross_entropy and its gradient), when they are i64 and given
 * before the run; 0 when n is no such node or they are not. */
static int cj_index_check(const hd_ir_graph *g, const hd_ir_node *n, cj_check *c) {
    const hd_ir_value *x = n->nin ? &g->values[n->in[0]] : NULL;
    int idx = n->nin > 1 ? n->in[1] : -1;
    c->op = (hd_op)n->op;
    c->axis = 0;
    switch (n->op) {
    case HD_OP_CROSS_ENTROPY:
    case HD_OP_CROSS_ENTROPY_BWD: c->size = x->shape[x->ndim - 1]; break;
    case HD_OP_ONE_HOT:
        idx = n->in[0];
        c->size = n->attrs.ints[0];
        break;
    case HD_OP_INDEX_SELECT:
    case HD_OP_INDEX_ADD: {
        const hd_ir_value *ref = n->op == HD_OP_INDEX_ADD ? &g->values[n->out] : x;
        int64_t a = n->attrs.ints[0] < 0 ? n->attrs.ints[0] + ref->ndim : n->attrs.ints[0];
        if (a < 0 || a >= ref->ndim) return 0;
        c->axis = (int)a;
        c->size = ref->shape[a];
        break;
    }
    default: return 0;
    }
    c->value = idx;
    return idx >= 0 && g->values[idx].dtype == HD_I64 &&
           g->values[idx].kind != HD_IR_VALUE_NODE; /* an input or a constant */
}

/* Numbers node n draws from the context's stream (rand, randn, dropout in
 * training), or -1. */
static int64_t cj_node_draws(const hd_ir_graph *g, const hd_ir_node *n) {
    int v = n->op == HD_OP_RAND || n->op == HD_OP_RANDN            ? n->out
            : n->op == HD_OP_DROPOUT && n->attrs.ints[0] && n->nin ? n->in[0]
                                                                   : -1;
    return v < 0 ? -1 : hd_shape_numel(g->values[v].shape, g->values[v].ndim);
}

/* May node n be recorded once and replayed? Random nodes take their key
 * and base from device memory that the executable writes before each run
 * (cj_draws_run); index ops check their indices on the host (a wait for
 * the stream), unless the executable checks them before the run
 * (cj_index_check). */
static int cj_node_replayable(const hd_ir_graph *g, const hd_ir_node *n) {
    cj_check c;
    switch (n->op) {
    case HD_IR_CALLBACK:
    case HD_IR_LOOP: /* host control flow: its body's executable captures its own graph */
    case HD_OP_DROPOUT_BWD: return 0; /* its draw is an attribute */
    case HD_OP_INDEX_SELECT:
    case HD_OP_INDEX_ADD:
    case HD_OP_ONE_HOT:
    case HD_OP_CROSS_ENTROPY:
    case HD_OP_CROSS_ENTROPY_BWD: return cj_index_check(g, n, &c);
    default: return 1;
    }
}

/* Does an earlier check accept exactly the indices c accepts (the labels
 * of cross_entropy, checked again by its gradient)? Negative indices
 * count from the end for index_select and index_add only. */
static int cj_check_done(const hd_jit_exec *e, const cj_check *c) {
    int wraps = c->op == HD_OP_INDEX_SELECT || c->op == HD_OP_INDEX_ADD;
    for (int i = 0; i < e->nchecks; i++) {
        const cj_check *o = &e->checks[i];
        int owraps = o->op == HD_OP_INDEX_SELECT || o->op == HD_OP_INDEX_ADD;
        if (o->value == c->value && o->size == c->size && owraps == wraps) return 1;
    }
    return 0;
}

/* The checks of a capturable executable's index nodes (all of them: a
 * node whose indices cannot be checked before the run made it not
 * capturable). */
static hd_status cj_checks_make(hd_jit_exec *e) {
    const hd_ir_graph *g = e->h.g;
    if (!e->capturable) return HD_OK;
    e->checks = hd_ctx_calloc(e->h.ctx, (size_t)e->nsteps + 1, sizeof *e->checks);
    if (!e->checks) return e->h.ctx->status;
    for (int s = 0; s < e->nsteps; s++) {
        cj_check *c = &e->checks[e->nchecks];
        c->step = s;
        if (e->steps[s].kernel < 0 && cj_index_check(g, &g->nodes[e->steps[s].node], c) &&
            !cj_check_done(e, c))
            e->nchecks++;
    }
    return HD_OK;
}

/* The random nodes of a capturable executable, in the order of its steps,
 * with the device memory their keys and bases go to. */
static hd_status cj_draws_make(hd_jit_exec *e) {
    const hd_ir_graph *g = e->h.g;
    if (!e->capturable) return HD_OK;
    size_t n = (size_t)e->plan.nsteps + 1;
    e->draw_n = hd_ctx_calloc(e->h.ctx, n, sizeof *e->draw_n);
    e->draw_kb = hd_ctx_calloc(e->h.ctx, 4 * n, sizeof *e->draw_kb);
    if (!e->draw_n || !e->draw_kb) return e->h.ctx->status;
    e->kb_dev = e->draw_kb + 2 * n;
    for (int s = 0; s < e->nsteps; s++) {
        cj_step *st = &e->steps[s];
        int64_t k = st->kernel < 0 ? cj_node_draws(g, &g->nodes[st->node]) : -1;
        st->draw = k < 0 ? -1 : e->ndraws;
        if (k >= 0) e->draw_n[e->ndraws++] = k;
    }
    if (!e->ndraws) return HD_OK;
    int64_t len = 2 * (int64_t)e->ndraws, stride = 2, step = 0;
    e->draws_dev = hd_tensor_new_on(e->h.ctx, e->h.be, e->h.device, HD_I64, &len, 1);
    if (!e->draws_dev) return e->h.ctx->status;
    for (int i = 0; i < e->ndraws; i++) step += (e->draw_n[i] + 1) / 2; /* as hd_rng_reserve */
    len = e->ndraws;
    e->kb_adv = (uint64_t)step;
    e->kb_bases = hd_tensor_view(e->h.ctx, e->draws_dev, &len, &stride, 1, 1);
    e->kb_step = hd_tensor_number(e->h.ctx, HD_I64, (double)step);
    return e->kb_bases && e->kb_step ? HD_OK : e->h.ctx->status;
}

/* Before a run: each random node's numbers reserved from the context's
 * stream in the order eager code would reserve them, and (key, base)
 * written to the device ahead of the run on its stream. */
static hd_status cj_draws_run(hd_jit_exec *e, hd_ctx *ctx) {
    if (!e->ndraws) return HD_OK;
    for (int i = 0; i < e->ndraws; i++) {
        e->draw_kb[2 * i] = ctx->rng_seed;
        e->draw_kb[2 * i + 1] = hd_rng_reserve(ctx, e->draw_n[i]);
    }
    size_t n = 2 * (size_t)e->ndraws * sizeof *e->draw_kb;
    int known = e->kb_known && !memcmp(e->kb_dev, e->draw_kb, n);
    e->kb_known = 0;         /* until this run has ended well */
    if (known) return HD_OK; /* the last run left them there */
    /* (through the backend's staging: the host does not wait) */
    return e->h.be->from_host(ctx, e->h.device, hd_tensor_data(e->draws_dev), e->draw_kb, n);
}

/* After a run that ended well: what its last step left in draws_dev. */
static void cj_draws_ran(hd_jit_exec *e) {
    if (!e->ndraws) return;
    for (int i = 0; i < e->ndraws; i++) {
        e->kb_dev[2 * i] = e->draw_kb[2 * i];
        e->kb_dev[2 * i + 1] = e->draw_kb[2 * i + 1] + e->kb_adv;
    }
    e->kb_known = 1;
}

/* Before a run: every index input checked, with its op's error (an input
 * as the caller's tensor, whose storage may know its range: then nothing
 * is copied back). Eager code would have drawn the random numbers of the
 * steps before the one that fails: so does this, and the stream goes on
 * as it would. */
static hd_status cj_checks_run(hd_jit_exec *e, hd_ctx *ctx) {
    for (int i = 0; i < e->nchecks; i++) {
        const cj_check *c = &e->checks[i];
        const hd_ir_value *val = &e->h.g->values[c->value];
        const hd_tensor *t = val->kind == HD_IR_VALUE_INPUT ? e->in[val->index] : e->vals[c->value];
        if (!hd_cuda_check_indices(ctx, c->op, t, c->axis, c->size)) continue;
        for (int s = 0; s < c->step; s++)
            if (e->steps[s].draw >= 0) hd_rng_reserve(ctx, e->draw_n[e->steps[s].draw]);
        return ctx->status;
    }
    return HD_OK;
}

static hd_status cj_eager_step(hd_jit_exec *e, const hd_ir_node *n, hd_tensor **in) {
    if (n->op < 0) return HD_OK;
    hd_dtype dt = n->nin ? e->h.g->values[n->in[0]].dtype : e->h.g->values[n->out].dtype;
    if (!e->h.be->supports_op((hd_op)n->op, dt))
        return hd_error(e->h.ctx, HD_ERR_RUNTIME, "%s is not supported for %s tensors on cuda",
                        hd_op_name((hd_op)n->op), hd_dtype_name(dt));
    (void)in;
    return HD_OK;
}

static hd_status cj_kernel_step(hd_jit_exec *e, hd_cuda_dev *d, const char *src, size_t len,
                                cj_step *st, void ***argp) {
    const hd_cuda_gen_kernel *k = &e->info.kernels[st->kernel];
    char name[32];
    if (hd_cuda_function_src(e->h.ctx, d, src, len, hd_cuda_gen_name(st->kernel, 0, name, 32),
                             &st->f))
        return e->h.ctx->status;
    if (k->fin_blocks > 0 &&
        hd_cuda_function_src(e->h.ctx, d, src, len, hd_cuda_gen_name(st->kernel, 1, name, 32),
                             &st->fin))
        return e->h.ctx->status;
    st->args = *argp;
    for (int j = 0; j < k->nslots; j++) st->args[j] = &e->slot_ptr[k->slots[j]];
    if (k->partials > 0) st->args[k->nslots] = &e->part;
    *argp += k->nslots + 1;
    return HD_OK;
}

static hd_status cj_steps_make(hd_jit_exec *e, hd_cuda_dev *d, const hd_cuda_src *src) {
    const hd_plan *p = &e->plan;
    hd_ir_graph *g = e->h.g;
    size_t nargs = 0, nin = 0;
    for (int k = 0; k < e->info.nkernels; k++) nargs += (size_t)e->info.kernels[k].nslots + 1;
    for (int s = 0; s < p->nsteps; s++)
        if (p->steps[s].kernel < 0) nin += (size_t)g->nodes[p->steps[s].node].nin;
    e->steps = hd_ctx_calloc(e->h.ctx, (size_t)p->nsteps + 1, sizeof *e->steps);
    e->argv = hd_ctx_calloc(e->h.ctx, nargs + 1, sizeof *e->argv);
    e->node_in_flat = hd_ctx_calloc(e->h.ctx, nin + 1, sizeof *e->node_in_flat);
    if (!e->steps || !e->argv || !e->node_in_flat) return e->h.ctx->status;
    e->argv_n = nargs;
    e->node_in_n = nin;
    void **argp = e->argv;
    size_t k = 0;
    e->capturable = 1;
    for (int s = 0; s < p->nsteps; s++) {
        cj_step *st = &e->steps[e->nsteps++];
        st->kernel = p->steps[s].kernel;
        st->node = p->steps[s].node;
        st->draw = -1;
        if (st->kernel >= 0) {
            if (cj_kernel_step(e, d, src->text, src->len, st, &argp)) return e->h.ctx->status;
            e->h.stats.kernels += 1 + (e->info.kernels[st->kernel].fin_blocks > 0);
            continue;
        }
        const hd_ir_node *n = &g->nodes[st->node];
        e->node_in[st->node] = e->node_in_flat + k;
        for (int j = 0; j < n->nin; j++) e->node_in_flat[k++] = e->vals[n->in[j]];
        if (cj_eager_step(e, n, e->node_in[st->node])) return e->h.ctx->status;
        e->capturable &= cj_node_replayable(g, n);
        e->h.stats.kernels += n->op >= 0;
    }
    return cj_checks_make(e) || cj_draws_make(e) ? e->h.ctx->status : HD_OK;
}

static hd_status cj_codegen(hd_jit_exec *e, hd_cuda_dev *d) {
    hd_cuda_src src;
    hd_cuda_src_init(&src, e->h.ctx);
    hd_status st = hd_cuda_gen_module(e->h.ctx, &e->plan, d->resident, &src, &e->info);
    if (!st && e->info.partials > 0) {
        int64_t n = e->info.partials * 8;
        e->partials = hd_tensor_new_on(e->h.ctx, e->h.be, e->h.device, HD_U8, &n, 1);
        if (!e->partials) st = e->h.ctx->status;
        if (!st) e->part = (CUdeviceptr)(uintptr_t)hd_tensor_data(e->partials);
    }
    if (!st) st = cj_steps_make(e, d, &src);
    hd_cuda_src_free(&src);
    return st;
}

static hd_status cj_plan(hd_jit_exec *e, const hd_jit_options *opt) {
    return hd_plan_build(e->h.g,
                         (opt->no_reuse ? HD_PLAN_NO_REUSE : 0) |
                             (opt->no_fuse ? HD_PLAN_NO_FUSE : 0) | HD_PLAN_DONATE,
                         &e->plan);
}

static hd_status cj_setup(hd_jit_exec *e, const hd_jit_options *opt) {
    HD_UNUSED(opt);
    hd_ctx *ctx = e->h.ctx;
    hd_ir_graph *g = e->h.g;
    size_t nv = (size_t)g->nvalues + 1, ns = (size_t)e->plan.nslots + 1;
    e->vals = hd_ctx_calloc(ctx, nv, sizeof *e->vals);
    e->roots = hd_ctx_calloc(ctx, ns, sizeof *e->roots);
    e->slot_ptr = hd_ctx_calloc(ctx, ns, sizeof *e->slot_ptr);
    e->node_in = hd_ctx_calloc(ctx, (size_t)g->nnodes + 1, sizeof *e->node_in);
    e->out = hd_ctx_calloc(ctx, ns, sizeof *e->out);
    e->own = hd_ctx_calloc(ctx, ns, sizeof *e->own);
    e->ring = hd_ctx_calloc(ctx, ns * CJ_RING, sizeof *e->ring);
    e->moves = hd_ctx_calloc(ctx, ns, sizeof *e->moves);
    e->fixed = hd_ctx_calloc(ctx, ns, 1);
    e->in = hd_ctx_calloc(ctx, (size_t)g->ninputs + 1, sizeof *e->in);
    e->direct = hd_ctx_calloc(ctx, (size_t)g->ninputs + 1, 2);
    if (!e->vals || !e->roots || !e->slot_ptr || !e->node_in || !e->out || !e->own || !e->ring ||
        !e->moves || !e->fixed || !e->in || !e->direct)
        return ctx->status;
    e->donee = e->direct + g->ninputs + 1;
    for (int v = 0; v < g->nvalues; v++)
        if (e->plan.vals[v].into >= 0) e->donee[e->plan.vals[v].into] = 1;
    e->h.stats.donated = e->plan.ndonated;
    hd_cuda_dev *d = hd_cuda_dev_get(ctx, e->h.device);
    if (!d || cj_roots(e) || hd_plan_views(ctx, &e->plan, e->roots, e->vals) || cj_codegen(e, d))
        return ctx->status;
    e->h.stats.planned_bytes = e->plan.arena_bytes;
    e->h.stats.fallbacks = e->plan.nfallback;
    e->h.stats.launches = e->h.stats.kernels;
    return HD_OK;
}

static const hd_jit_build cj_build = {&hd_jit_cuda, sizeof(hd_jit_exec), cj_plan, cj_setup};

static hd_status cj_compile(hd_ctx *ctx, const hd_ir_graph *g, const hd_jit_options *opt,
                            hd_jit_exec **out) {
    hd_jit_options o = cj_options(opt);
    return hd_jit_compile(ctx, &cj_build, g, &o, out);
}

/* ---- running ---- */

static hd_status cj_launch(hd_ctx *ctx, hd_cuda_dev *d, const hd_cuda_gen_kernel *k,
                           const cj_step *st) {
    int64_t grid = k->n < 65535 * 16 ? k->n : 65535 * 16;
    hd_status r = k->launch == HD_CUDA_LAUNCH_THREADS
                      ? hd_cuda_launch(ctx, d, st->f, k->n, st->args)
                      : hd_cuda_launch_grid(ctx, d, st->f, (unsigned)grid, 256, st->args);
    if (r || k->fin_blocks <= 0) return r;
    grid = k->fin_blocks < 65535 * 16 ? k->fin_blocks : 65535 * 16;
    return hd_cuda_launch_grid(ctx, d, st->fin, (unsigned)grid, 256, st->args);
}

static hd_status cj_exec_steps(hd_jit_exec *e, hd_ctx *ctx, hd_cuda_dev *d) {
    hd_ir_graph *g = e->h.g;
    for (int s = 0; s < e->nsteps; s++) {
        const cj_step *st = &e->steps[s];
        hd_status r;
        if (st->kernel >= 0) {
            r = cj_launch(ctx, d, &e->info.kernels[st->kernel], st);
        } else {
            const hd_ir_node *n = &g->nodes[st->node];
            hd_tensor **in = e->node_in[st->node];
            if (n->op == HD_IR_CALLBACK) {
                hd_cuda_api_get()->stream_synchronize(d->stream);
                r = n->cb.fn(ctx, n->cb.ud, in, n->nin);
            } else if (n->op == HD_IR_LOOP) {
                r = hd_jit_loop_run(ctx, n, in, n->nin, e->vals[n->out]);
            } else if (st->draw >= 0 && e->draws_dev) {
                CUdeviceptr kb =
                    (CUdeviceptr)(uintptr_t)hd_tensor_data(e->draws_dev) + 16 * (size_t)st->draw;
                CUdeviceptr was = hd_cuda_rng_from(kb);
                r = e->h.be->run_op(ctx, (hd_op)n->op, e->vals[n->out], in, n->nin, &n->attrs);
                hd_cuda_rng_from(was);
            } else {
                r = e->h.be->run_op(ctx, (hd_op)n->op, e->vals[n->out], in, n->nin, &n->attrs);
            }
        }
        if (r) return r;
    }
    if (!e->kb_bases) return HD_OK;
    hd_tensor *adv[2] = {e->kb_bases, e->kb_step}; /* the next run's bases */
    return e->h.be->run_op(ctx, HD_OP_ADD, e->kb_bases, adv, 2, NULL);
}

static int cj_log_recompile(void) {
    return hd_log_on("recompile") || hd_log_on("compile");
}

/* The captured graph for this run's addresses, or NULL. */
static cj_cgraph *cj_graph_find(hd_jit_exec *e) {
    size_t n = (size_t)e->plan.nslots * sizeof(CUdeviceptr);
    for (int i = 0; i < CJ_GRAPHS; i++)
        if (e->graphs[i].exec && !memcmp(e->graphs[i].addr, e->slot_ptr, n)) return &e->graphs[i];
    return NULL;
}

/* A free entry for a new graph: the least recently launched one goes. */
static cj_cgraph *cj_graph_slot(hd_jit_exec *e) {
    cj_cgraph *g = &e->graphs[0];
    for (int i = 0; i < CJ_GRAPHS; i++) {
        if (!e->graphs[i].exec) return &e->graphs[i];
        if (e->graphs[i].used < g->used) g = &e->graphs[i];
    }
    cj_graph_drop(e, g);
    return g;
}

/* The input or output a moving slot holds, for messages. */
static const char *cj_slot_name(const hd_jit_exec *e, int s) {
    if (s < e->plan.slot_const0) return e->h.g->inputs[s - e->plan.slot_in0].name;
    for (int i = 0; i < e->h.g->noutputs; i++)
        if (e->plan.vals[e->h.g->outputs[i].value].slot == s) return e->h.g->outputs[i].name;
    return "?";
}

/* No graph for this run's addresses: count the slots that differ from
 * the last graph's. After CJ_RECAPTURES such captures, inputs and outputs
 * that moved more than once go through the executable's buffers from the
 * next run on (a copy per run each), so that the graphs stay valid. */
static void cj_note_moves(hd_jit_exec *e) {
    for (int s = 0; e->last && s < e->plan.nslots; s++)
        e->moves[s] += e->last->addr[s] != e->slot_ptr[s];
    if (e->recaptures < CJ_RECAPTURES) return;
    for (int s = 0; s < e->plan.nslots; s++) {
        if (!cj_slot_moves(&e->plan, s) || e->moves[s] < 2 || e->fixed[s]) continue;
        e->fixed[s] = 1;
        if (cj_log_recompile())
            fprintf(stderr, "hodu: cuda graph of %s: %s '%s' keeps moving, copied from now on\n",
                    e->h.g->name, s < e->plan.slot_const0 ? "input" : "output", cj_slot_name(e, s));
    }
    memset(e->moves, 0, (size_t)e->plan.nslots * sizeof *e->moves);
    e->recaptures = 0;
}

/* Record one run's launches as a CUDA Graph and launch it. A failure to
 * capture is not an error: the steps then run one by one, from now on. */
static hd_status cj_capture(hd_jit_exec *e, hd_ctx *ctx, hd_cuda_dev *d) {
    const hd_cuda_api *a = hd_cuda_api_get();
    int again = e->last != NULL;
    if (again && cj_log_recompile())
        fprintf(stderr, "hodu: cuda graph of %s: new input or output addresses, captured again\n",
                e->h.g->name);
    e->recaptures += again;
    cj_cgraph *slot = cj_graph_slot(e);
    CUgraph graph = NULL;
    CUresult r = a->stream_begin_capture(d->stream, CU_STREAM_CAPTURE_MODE_RELAXED);
    /* scratch that eager steps free while captured stays the graphs' */
    hd_cuda_pool_begin(d, &e->pool);
    hd_status st = r == CUDA_SUCCESS ? cj_exec_steps(e, ctx, d) : HD_ERR_RUNTIME;
    hd_cuda_pool_end(d);
    if (r == CUDA_SUCCESS) {
        CUresult r2 = a->stream_end_capture(d->stream, &graph);
        if (r2 != CUDA_SUCCESS) r = r2;
    }
    size_t n = (size_t)e->plan.nslots * sizeof(CUdeviceptr);
    if (!st && r == CUDA_SUCCESS && graph && !(slot->addr = hd_ctx_alloc(ctx, n))) st = ctx->status;
    if (!st && r == CUDA_SUCCESS && graph) r = a->graph_instantiate(&slot->exec, graph, 0);
    if (graph) a->graph_destroy(graph);
    if (st || r != CUDA_SUCCESS || !graph) {
        if (cj_log_on())
            fprintf(stderr, "cuda: %s runs without a CUDA Graph (%s)\n", e->h.g->name,
                    st ? ctx->errmsg : "capture failed");
        hd_error_clear(ctx);
        slot->exec = NULL;
        cj_graphs_free(ctx, e); /* no graph replays the pool from now on */
        e->capturable = 0;
        return cj_exec_steps(e, ctx, d);
    }
    memcpy(slot->addr, e->slot_ptr, n);
    slot->used = e->h.stats.runs;
    e->gexec = e->last = slot;
    return hd_cuda_check(ctx, a->graph_launch(slot->exec, d->stream), "cuGraphLaunch");
}

/* Memory for fresh output slot s, handed to the caller. A capturable
 * executable keeps CJ_RING blocks per output and takes the first that
 * nobody holds any more (a loss dropped, a gradient set to none, Adam's
 * moment replaced by the next one), so the outputs' addresses repeat
 * whatever else the allocator served in between (eager steps between
 * calls), and the graphs captured for them stay valid; while the caller
 * holds them all, new memory from the allocator. The caller gets a tensor
 * of its own over the block (its write count moved on: the block is
 * written again). */
static hd_tensor *cj_ring_take(hd_jit_exec *e, int s) {
    const hd_ir_value *val = &e->h.g->values[e->plan.slot_value[s]];
    for (int k = 0; e->capturable && k < CJ_RING; k++) {
        hd_tensor **r = &e->ring[s * CJ_RING + k];
        if (!*r && !(*r = hd_tensor_new_on(e->h.ctx, e->h.be, e->h.device, val->dtype, val->shape,
                                           val->ndim)))
            return NULL;
        if ((*r)->storage->refcount > 1) continue;
        (*r)->storage->version++;
        return hd_tensor_view(e->h.ctx, *r, (*r)->shape, (*r)->strides, (*r)->ndim, 0);
    }
    return hd_tensor_new_on(e->h.ctx, e->h.be, e->h.device, val->dtype, val->shape, val->ndim);
}

/* Fresh outputs: memory for the caller (cj_ring_take), or the
 * executable's buffer, copied out, for one that keeps moving. */
static hd_status cj_bind_outputs(hd_jit_exec *e) {
    for (int s = e->plan.slot_out0; s < e->plan.nslots; s++) {
        hd_tensor *t = e->fixed[s] ? cj_own(e, s) : (e->out[s] = cj_ring_take(e, s));
        if (!t) return e->h.ctx->status;
        cj_slot_set(e, s, hd_tensor_data(t));
    }
    return HD_OK;
}

static hd_status cj_exec_run(hd_jit_exec *e, hd_ctx *ctx, hd_cuda_dev *d) {
    if (!e->capturable || e->h.stats.runs < 1) return cj_exec_steps(e, ctx, d);
    cj_cgraph *g = cj_graph_find(e);
    if (!g) {
        cj_note_moves(e);
        return cj_capture(e, ctx, d);
    }
    g->used = e->h.stats.runs;
    e->gexec = e->last = g;
    return hd_cuda_check(ctx, hd_cuda_api_get()->graph_launch(g->exec, d->stream), "cuGraphLaunch");
}

/* A donated output overwrites its input's memory, so that input must be
 * the only one on its storage this run, or another input (or a constant)
 * would read what the run wrote: such an input runs on the executable's
 * own copy, and the output is copied out of it. */
static hd_status cj_bind_donees(hd_jit_exec *e, hd_ctx *ctx, hd_cuda_dev *d) {
    for (int j = 0; j < e->h.g->ninputs; j++)
        if (e->donee[j] && e->direct[j] &&
            hd_plan_input_shared(&e->plan, e->h.g->ninputs, e->in, e->roots, j) &&
            cj_bind_copy(e, ctx, d, j, e->in[j]))
            return ctx->status;
    return HD_OK;
}

/* A run: a donee that shares its storage bound to a copy, the index
 * inputs checked (an error leaves every output and state as it was), the
 * random draws reserved, then the steps, a capture or a graph launch,
 * with the ops told that what they index with was checked. */
static hd_status cj_exec(hd_jit_exec *e, hd_ctx *ctx, void *ud) {
    hd_cuda_dev *d = ud;
    if ((e->plan.ndonated && cj_bind_donees(e, ctx, d)) || cj_checks_run(e, ctx) ||
        cj_draws_run(e, ctx) || cj_bind_outputs(e))
        return ctx->status;
    e->gexec = NULL;
    int was = hd_cuda_indices_checked(e->capturable);
    hd_status st = cj_exec_run(e, ctx, d);
    hd_cuda_indices_checked(was);
    if (!st) cj_draws_ran(e);
    return st;
}

/* Input i where it is when it can be (a contiguous tensor on the device),
 * else copied into the executable's buffer (stream-ordered). */
static hd_status cj_bind_input(hd_jit_exec *e, hd_ctx *ctx, void *ud, int i, hd_tensor *t) {
    hd_cuda_dev *d = ud;
    int s = e->plan.slot_in0 + i;
    const hd_storage *st = t->storage;
    int host = hd_tensor_follows_device(t); /* a cpu scalar: uploaded by the copy */
    if (!host && (st->backend != e->h.be || st->device != e->h.device))
        return hd_error(ctx, HD_ERR_RUNTIME, "input '%s' is on %s:%d, the code runs on %s:%d",
                        e->h.g->inputs[i].name, st->backend->name, st->device, e->h.be->name,
                        e->h.device);
    e->in[i] = t;
    if (!host && !e->fixed[s] && hd_tensor_is_contiguous(t)) {
        cj_slot_set(e, s, t->numel ? hd_tensor_data(t) : e->roots[0]->storage->data);
        e->direct[i] = 1;
        return HD_OK;
    }
    return cj_bind_copy(e, ctx, d, i, t);
}

/* Input i through the executable's own buffer: copied in, stream-ordered. */
static hd_status cj_bind_copy(hd_jit_exec *e, hd_ctx *ctx, hd_cuda_dev *d, int i, hd_tensor *t) {
    int s = e->plan.slot_in0 + i, host = hd_tensor_follows_device(t);
    e->direct[i] = 0;
    hd_tensor *dst = cj_own(e, s);
    if (!dst) return ctx->status;
    cj_slot_set(e, s, dst->numel ? hd_tensor_data(dst) : e->roots[0]->storage->data);
    if (!t->numel) return HD_OK;
    e->h.stats.run_copies++;
    if (!host && hd_tensor_is_contiguous(t))
        return hd_cuda_check(
            ctx,
            hd_cuda_api_get()->memcpy_dtod((CUdeviceptr)(uintptr_t)hd_tensor_data(dst),
                                           (CUdeviceptr)(uintptr_t)hd_tensor_data(t),
                                           hd_tensor_nbytes(t), d->stream),
            "copy of an input");
    static const hd_attrs none;
    return e->h.be->run_op(ctx, HD_OP_COPY, dst, &t, 1, &none);
}

/* A copy of src for the caller (a new tensor, stream-ordered). */
static hd_status cj_copy_out(hd_jit_exec *e, hd_ctx *ctx, hd_cuda_dev *d, hd_tensor *src,
                             hd_tensor **out) {
    hd_tensor *t = hd_tensor_new_on(ctx, e->h.be, e->h.device, src->dtype, src->shape, src->ndim);
    if (!t) return ctx->status;
    hd_status st = HD_OK;
    e->h.stats.run_copies += t->numel != 0;
    if (t->numel && hd_tensor_is_contiguous(src))
        st = hd_cuda_check(
            ctx,
            hd_cuda_api_get()->memcpy_dtod((CUdeviceptr)(uintptr_t)hd_tensor_data(t),
                                           (CUdeviceptr)(uintptr_t)hd_tensor_data(src),
                                           hd_tensor_nbytes(t), d->stream),
            "copy of an output");
    else if (t->numel) {
        static const hd_attrs none;
        st = e->h.be->run_op(ctx, HD_OP_COPY, t, &src, 1, &none);
    }
    if (st) {
        hd_tensor_unref(t);
        return st;
    }
    *out = t;
    return HD_OK;
}

/* Output i for the caller: a fresh output's own tensor as it is; other
 * values (inputs, constants, views) and buffers that are reused as a
 * copy. */
static hd_status cj_output(hd_jit_exec *e, hd_ctx *ctx, void *ud, int i, hd_tensor **out) {
    int v = e->h.g->outputs[i].value;
    const hd_plan_val *pv = &e->plan.vals[v];
    if (pv->fresh && e->out[pv->slot]) {
        *out = hd_tensor_ref(e->out[pv->slot]);
        return HD_OK;
    }
    if (pv->whole && e->plan.vals[pv->root].fresh && e->out[pv->slot])
        return (*out = hd_plan_whole_view(ctx, &e->plan, v, e->out[pv->slot])) ? HD_OK
                                                                               : ctx->status;
    if (pv->into >= 0 && e->direct[pv->into]) { /* written into the caller's tensor */
        *out = hd_tensor_ref(e->in[pv->into]);
        return HD_OK;
    }
    return cj_copy_out(e, ctx, ud, pv->fresh ? e->roots[pv->slot] : e->vals[v], out);
}

/* After a run: this run's outputs belong to the caller alone. */
static void cj_unbind(hd_jit_exec *e) {
    for (int s = e->plan.slot_out0; s < e->plan.nslots; s++) {
        hd_tensor_unref(e->out[s]);
        e->out[s] = NULL;
    }
    for (int i = 0; i < e->h.g->ninputs; i++) {
        e->in[i] = NULL;
        e->direct[i] = 0;
    }
}

static hd_status cj_run(hd_ctx *ctx, hd_jit_exec *e, hd_tensor *const *inputs, int ninputs,
                        hd_tensor **outputs, int noutputs) {
    static const hd_jit_run_ops ops = {cj_bind_input, cj_exec, cj_output, cj_unbind};
    for (int i = 0; i < noutputs; i++) outputs[i] = NULL;
    hd_cuda_dev *d = hd_cuda_dev_get(ctx, e->h.device);
    if (!d) return ctx->status;
    void *timed = ctx->prof ? hd_cuda_prof_begin(ctx, d, e->h.device) : NULL;
    hd_status st =
        hd_jit_run(ctx, &ops, e, d, e->h.g, &e->h.stats, inputs, ninputs, outputs, noutputs);
    hd_cuda_prof_end(ctx, d, timed, HD_PROF_RUN);
    if (st) return st;
    e->h.stats.launches = e->gexec ? 1 : e->h.stats.kernels;
    e->h.stats.cuda_graph = e->gexec != NULL;
    return HD_OK;
}

#define cj_stats hd_jit_head_stats
#define cj_graph hd_jit_head_graph

#else /* a build without CUDA headers: never available */

static hd_status cj_compile(hd_ctx *ctx, const hd_ir_graph *g, const hd_jit_options *opt,
                            hd_jit_exec **out) {
    (void)g;
    *out = NULL;
    hd_jit_options o = cj_options(opt);
    return cj_available(ctx, &o);
}

static hd_status cj_run(hd_ctx *ctx, hd_jit_exec *e, hd_tensor *const *inputs, int ninputs,
                        hd_tensor **outputs, int noutputs) {
    (void)e;
    (void)inputs;
    (void)ninputs;
    (void)outputs;
    (void)noutputs;
    return hd_error(ctx, HD_ERR_RUNTIME, "compiler 'cuda': this build has no CUDA backend");
}

static void cj_free(hd_ctx *ctx, hd_jit_exec *e) {
    (void)ctx;
    (void)e;
}

static void cj_stats(const hd_jit_exec *e, hd_jit_stats *st) {
    (void)e;
    memset(st, 0, sizeof *st);
}

static const hd_ir_graph *cj_graph(const hd_jit_exec *e) {
    (void)e;
    return NULL;
}

#endif

const hd_jit_compiler hd_jit_cuda = {
    /* .name = */ "cuda",
    /* .available = */ cj_available,
    /* .compile = */ cj_compile,
    /* .run = */ cj_run,
    /* .free = */ cj_free,
    /* .stats = */ cj_stats,
    /* .graph = */ cj_graph,
};
