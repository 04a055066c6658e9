/* The CUDA C of a planned graph (hd_cuda_gen.h). Numerics are the eager
 * CUDA kernels' (cuda_src.c): the same expressions, f16/bf16 computed in
 * f32 and rounded after every node as the eager kernels store them, float
 * reductions accumulated in f64. */
#include "hd_cuda_gen.h"

#include <stdio.h>
#include <string.h>

#define GEN_GRID_MAX (65535 * 16)

typedef struct gen_state {
    hd_ctx *ctx;
    const hd_plan *p;
    const hd_ir_graph *g;
    hd_cuda_src body;     /* the kernel being generated, without its head */
    char *loaded;         /* per value: in a register of the current scope */
    char *used;           /* per slot: the kernel reads or writes it */
    const int64_t *shape; /* iteration shape */
    int nd;
    int ki;
    int64_t resident; /* the device's 256-thread blocks at once (split reductions) */
    const char *err;  /* an op the generator cannot express */
} gen_state;

char *hd_cuda_gen_name(int kernel, int fin, char *buf, size_t n) {
    snprintf(buf, n, fin ? "hd_k%d_fin" : "hd_k%d", kernel);
    return buf;
}

static const hd_cuda_dtype *gen_dt(hd_dtype dt) {
    return hd_cuda_dtype_info(dt);
}

static void gen_double(gen_state *G, double d) {
    unsigned long long bits;
    memcpy(&bits, &d, sizeof bits);
    hd_cuda_src_printf(&G->body, "__longlong_as_double(0x%016llxLL)", bits);
}

/* "i64 d0..; " the multi-index of flat index var over the iteration shape. */
static void gen_index(gen_state *G, const char *var) {
    if (G->nd == 0) return;
    hd_cuda_src_printf(&G->body, "      i64 d0");
    for (int j = 1; j < G->nd; j++) hd_cuda_src_printf(&G->body, ", d%d", j);
    hd_cuda_src_printf(&G->body, "; { i64 r_ = %s;", var);
    for (int j = G->nd - 1; j > 0; j--)
        hd_cuda_src_printf(&G->body, " d%d = r_ %% %lldLL; r_ /= %lldLL;", j,
                           (long long)G->shape[j], (long long)G->shape[j]);
    hd_cuda_src_printf(&G->body, " d0 = r_; }\n");
}

static int gen_contiguous_full(const gen_state *G, int v) {
    const hd_ir_value *val = &G->g->values[v];
    if (val->ndim != G->nd || memcmp(val->shape, G->shape, (size_t)G->nd * sizeof(int64_t)))
        return 0;
    int64_t want = 1;
    for (int j = G->nd - 1; j >= 0; j--) {
        if (val->shape[j] != 1 && G->p->vals[v].strides[j] != want) return 0;
        want *= val->shape[j];
    }
    return 1;
}

/* The element offset of value v at the current index (v's shape is
 * broadcast against the iteration shape, right-aligned). */
static void gen_offset(gen_state *G, int v) {
    const hd_ir_value *val = &G->g->values[v];
    if (gen_contiguous_full(G, v)) {
        hd_cuda_src_printf(&G->body, "i");
        return;
    }
    int lead = G->nd - val->ndim, any = 0;
    for (int j = 0; j < val->ndim; j++) {
        int64_t st = val->shape[j] == 1 ? 0 : G->p->vals[v].strides[j];
        if (st == 0 || j + lead < 0) continue;
        hd_cuda_src_printf(&G->body, "%sd%d * %lldLL", any ? " + " : "", j + lead, (long long)st);
        any = 1;
    }
    if (!any) hd_cuda_src_printf(&G->body, "0");
}

/* "((T *)(s<slot> + off))" for value v, marking the slot used. */
static void gen_base(gen_state *G, int v, int is_const) {
    const hd_plan_val *pv = &G->p->vals[v];
    const char *st = gen_dt(G->g->values[v].dtype)->store;
    G->used[pv->slot] = 1;
    hd_cuda_src_printf(&G->body, "((%s%s *)(S%d + %lldLL))", is_const ? "const " : "", st, pv->slot,
                       (long long)pv->byte_off);
}

/* Make value v a register of the current scope: computed earlier in it, or
 * loaded from its place. */
static void gen_use(gen_state *G, int v) {
    if (G->loaded[v]) return;
    const hd_cuda_dtype *d = gen_dt(G->g->values[v].dtype);
    char elem[64];
    hd_cuda_src_printf(&G->body, "      const %s v%d = ", d->comp, v);
    /* the load format wants the element as a string: build it in place */
    const char *pct = strstr(d->ld, "%s");
    hd_cuda_src_printf(&G->body, "%.*s", (int)(pct - d->ld), d->ld);
    gen_base(G, v, 1);
    hd_cuda_src_printf(&G->body, "[");
    gen_offset(G, v);
    snprintf(elem, sizeof elem, "]%s;\n", pct + 2);
    hd_cuda_src_printf(&G->body, "%s", elem);
    G->loaded[v] = 1;
}

/* "(expr)" of dtype dt rounded as a store and load would round it. */
static void gen_round_open(gen_state *G, hd_dtype dt) {
    switch (dt) {
    case HD_F16: hd_cuda_src_printf(&G->body, "ld_f16(st_f16("); break;
    case HD_BF16: hd_cuda_src_printf(&G->body, "ld_bf16(st_bf16("); break;
    case HD_BOOL: hd_cuda_src_printf(&G->body, "(u8)(("); break;
    default: hd_cuda_src_printf(&G->body, "((%s)(", gen_dt(dt)->comp); break;
    }
}

static void gen_cast(gen_state *G, const hd_ir_node *n, hd_dtype from, hd_dtype to) {
    const hd_cuda_dtype *d = gen_dt(to);
    int x = n->in[0];
    if (to == HD_BOOL)
        hd_cuda_src_printf(&G->body, "(u8)(v%d != 0)", x);
    else if (hd_dtype_is_float(to)) {
        gen_round_open(G, to);
        hd_cuda_src_printf(&G->body, "(%s)v%d))", d->comp, x);
    } else if (hd_dtype_is_float(from))
        hd_cuda_src_printf(&G->body, "(%s)h_sat((double)v%d, %s, %s)", d->store, x, d->tmin,
                           d->tmax);
    else
        hd_cuda_src_printf(&G->body, "(%s)v%d", d->store, x);
}

/* The node's value as an expression of its inputs' registers. */
static hd_status gen_expr(gen_state *G, const hd_ir_node *n) {
    const hd_ir_graph *g = G->g;
    hd_dtype in = g->values[n->in[0]].dtype, out = g->values[n->out].dtype;
    if (n->op == HD_OP_CAST) {
        gen_cast(G, n, in, out);
        return HD_OK;
    }
    if (n->op == HD_OP_WHERE) {
        hd_cuda_src_printf(&G->body, "v%d != 0 ? v%d : v%d", n->in[0], n->in[1], n->in[2]);
        return HD_OK;
    }
    const char *e = hd_cuda_ew_expr((hd_op)n->op, in);
    if (!e) {
        G->err = hd_op_name((hd_op)n->op);
        return hd_error(G->ctx, HD_ERR_RUNTIME, "compiler 'cuda': no CUDA code for %s on %s",
                        G->err, hd_dtype_name(in));
    }
    hd_cuda_src_printf(&G->body, "[&]() { ");
    hd_cuda_src_types(&G->body, in);
    if (n->nin == 1) {
        hd_cuda_src_printf(&G->body, "const double s0 = ");
        gen_double(G, n->attrs.scalar[0]);
        hd_cuda_src_printf(&G->body, ", s1 = ");
        gen_double(G, n->attrs.scalar[1]);
        hd_cuda_src_printf(&G->body, "; (void)s0; (void)s1; C x = v%d; ", n->in[0]);
    } else {
        hd_cuda_src_printf(&G->body, "C a = v%d, b = v%d; ", n->in[0], n->in[1]);
    }
    if (out == HD_BOOL)
        hd_cuda_src_printf(&G->body, "return (u8)(%s); }()", e);
    else
        hd_cuda_src_printf(&G->body, "return (C)(%s); }()", e);
    return HD_OK;
}

static void gen_store(gen_state *G, int v, const char *val) {
    const hd_cuda_dtype *d = gen_dt(G->g->values[v].dtype);
    hd_cuda_src_printf(&G->body, "      ");
    gen_base(G, v, 0);
    hd_cuda_src_printf(&G->body, "[");
    gen_offset(G, v);
    hd_cuda_src_printf(&G->body, "] = %s(%s);\n", d->st, val);
}

/* Node n into register v<out> (its inputs made registers first); stored
 * when the plan says so and store is set. */
static hd_status gen_node(gen_state *G, int node, int store) {
    const hd_ir_node *n = &G->g->nodes[node];
    for (int k = 0; k < n->nin; k++) gen_use(G, n->in[k]);
    hd_dtype out = G->g->values[n->out].dtype;
    hd_cuda_src_printf(&G->body, "      const %s v%d = ", gen_dt(out)->comp, n->out);
    int plain = n->op == HD_OP_CAST || n->op == HD_OP_WHERE;
    if (!plain) gen_round_open(G, out);
    if (gen_expr(G, n)) return G->ctx->status;
    hd_cuda_src_printf(&G->body, plain ? ";\n" : "));\n");
    G->loaded[n->out] = 1;
    if (store && G->p->vals[n->out].stored) {
        char r[32];
        snprintf(r, sizeof r, "v%d", n->out);
        gen_store(G, n->out, r);
    }
    return HD_OK;
}

static void gen_scope_reset(gen_state *G) {
    memset(G->loaded, 0, (size_t)G->g->nvalues + 1);
}

/* ---- elementwise ---- */

static hd_status gen_elementwise(gen_state *G, const hd_plan_kernel *k) {
    hd_cuda_src_printf(&G->body,
                       "  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < %lldLL; "
                       "i += (i64)gridDim.x * blockDim.x) {\n",
                       (long long)k->numel);
    gen_index(G, "i");
    for (int j = 0; j < k->nnodes; j++)
        if (gen_node(G, k->nodes[j], 1)) return G->ctx->status;
    hd_cuda_src_printf(&G->body, "  }\n");
    return HD_OK;
}

/* ---- reductions ---- */

typedef struct gen_red {
    const char *acc;  /* accumulator type */
    const char *init; /* its start */
    const char *step; /* fold x (double) or xi (i64) into acc */
    const char *comb; /* combine two accumulators */
    const char *fin;  /* the result from acc (NRED: the extent) */
} gen_red;

#define COMB_ADD  "[](double p, double q) { return p + q; }"
#define COMB_ADDU "[](u64 p, u64 q) { return p + q; }"
#define COMB_MAXF "[](double p, double q) { return (q > p || q != q) && p == p ? q : p; }"
#define COMB_MINF "[](double p, double q) { return (q < p || q != q) && p == p ? q : p; }"

static gen_red gen_red_rule(hd_op op, hd_dtype in) {
    int f = hd_dtype_is_float(in);
    switch (op) {
    case HD_OP_SUM:
    case HD_OP_MEAN:
        if (!f) return (gen_red){"u64", "0", "acc += (u64)xi;", COMB_ADDU, "(i64)acc"};
        return (gen_red){"double", "0", "acc += x;", COMB_ADD,
                         op == HD_OP_MEAN ? "NRED ? acc / (double)NRED : HD_NAN" : "acc"};
    case HD_OP_PROD:
        if (!f)
            return (gen_red){"u64", "1", "acc *= (u64)xi;", "[](u64 p, u64 q) { return p * q; }",
                             "(i64)acc"};
        return (gen_red){"double", "1", "acc *= x;", "[](double p, double q) { return p * q; }",
                         "acc"};
    case HD_OP_MAX:
        if (!f)
            return (gen_red){"i64", "(i64)0x8000000000000000ULL", "acc = xi > acc ? xi : acc;",
                             "[](i64 p, i64 q) { return q > p ? q : p; }",
                             in == HD_BOOL ? "acc != 0" : "acc"};
        return (gen_red){"double", "-HD_INF", "acc = (x > acc || x != x) ? x : acc;", COMB_MAXF,
                         "acc"};
    default: /* MIN */
        if (!f)
            return (gen_red){"i64", "0x7fffffffffffffffLL", "acc = xi < acc ? xi : acc;",
                             "[](i64 p, i64 q) { return q < p ? q : p; }",
                             in == HD_BOOL ? "acc != 0" : "acc"};
        return (gen_red){"double", "HD_INF", "acc = (x < acc || x != x) ? x : acc;", COMB_MINF,
                         "acc"};
    }
}

typedef struct gen_rgeo {
    unsigned mask; /* reduced dims of the iteration shape */
    int64_t nout, nred;
} gen_rgeo;

static void gen_rgeo_make(const gen_state *G, const hd_ir_node *red, gen_rgeo *r) {
    r->mask = 0;
    for (int i = 0; i < red->attrs.naxes; i++) {
        int64_t a = red->attrs.axes[i];
        if (a < 0) a += G->nd;
        if (a >= 0 && a < G->nd) r->mask |= 1u << a;
    }
    if (red->attrs.naxes == 0) r->mask = ~0u;
    r->nout = r->nred = 1;
    for (int j = 0; j < G->nd; j++) {
        if (r->mask & (1u << j))
            r->nred *= G->shape[j];
        else
            r->nout *= G->shape[j];
    }
}

/* Are the reduced dims the last ones of the iteration shape (a whole
 * tensor, or its last axes)? Then its flat index is ob * nred + r. */
static int gen_red_suffix(const gen_state *G, const gen_rgeo *rg) {
    int reduced = 0;
    for (int j = 0; j < G->nd; j++) {
        int r = (rg->mask >> j) & 1u;
        if (reduced && !r) return 0;
        reduced |= r;
    }
    return 1;
}

/* The multi-index from output ob (kept dims) and r (reduced dims), and the
 * flat index i over the iteration shape. */
static void gen_red_index(gen_state *G, const gen_rgeo *rg) {
    if (G->nd == 0) {
        hd_cuda_src_printf(&G->body, "      i64 i = 0; (void)i;\n");
        return;
    }
    hd_cuda_src_printf(&G->body, "      i64 d0");
    for (int j = 1; j < G->nd; j++) hd_cuda_src_printf(&G->body, ", d%d", j);
    hd_cuda_src_printf(&G->body, "; { i64 ro_ = ob, rr_ = r;");
    for (int j = G->nd - 1; j >= 0; j--) {
        const char *v = rg->mask & (1u << j) ? "rr_" : "ro_";
        hd_cuda_src_printf(&G->body, " d%d = %s %% %lldLL; %s /= %lldLL;", j, v,
                           (long long)G->shape[j], v, (long long)G->shape[j]);
    }
    if (gen_red_suffix(G, rg)) {
        /* the flat index without the multi-index: where every operand is
         * read at i (contiguous), the divisions above are dead code */
        hd_cuda_src_printf(&G->body, " }\n      i64 i = ob * %lldLL + r; (void)i;\n",
                           (long long)rg->nred);
        return;
    }
    hd_cuda_src_printf(&G->body, " }\n      i64 i = 0");
    int64_t st = 1;
    for (int j = G->nd - 1; j >= 0; j--) {
        hd_cuda_src_printf(&G->body, " + d%d * %lldLL", j, (long long)st);
        st *= G->shape[j];
    }
    hd_cuda_src_printf(&G->body, "; (void)i;\n");
}

/* One pass over the reduced elements r in [lo, hi) (strings) of output ob:
 * the prologue, then step with x (double) and xi (i64) of the input. */
static hd_status gen_red_loop(gen_state *G, const hd_plan_kernel *k, const gen_rgeo *rg,
                              const char *lo, const char *hi, const char *step) {
    const hd_ir_node *red = &G->g->nodes[k->nodes[k->nnodes - 1]];
    gen_scope_reset(G);
    hd_cuda_src_printf(&G->body,
                       "#pragma unroll 4\n"
                       "    for (i64 r = %s + threadIdx.x; r < (%s); r += blockDim.x) {\n",
                       lo, hi);
    gen_red_index(G, rg);
    for (int j = 0; j < k->nnodes - 1; j++)
        if (gen_node(G, k->nodes[j], 0)) return G->ctx->status;
    gen_use(G, red->in[0]);
    hd_cuda_src_printf(&G->body,
                       "      double x = (double)v%d; i64 xi = (i64)v%d; (void)x; (void)xi;\n"
                       "      %s\n    }\n",
                       red->in[0], red->in[0], step);
    return HD_OK;
}

static void gen_red_store(gen_state *G, int out, const char *val) {
    hd_dtype dt = G->g->values[out].dtype;
    const hd_plan_val *pv = &G->p->vals[out];
    G->used[pv->slot] = 1;
    hd_cuda_src_printf(&G->body,
                       "    if (threadIdx.x == 0) ((%s *)(S%d + %lldLL))[ob] = ", gen_dt(dt)->store,
                       pv->slot, (long long)pv->byte_off);
    if (hd_dtype_is_float(dt))
        hd_cuda_src_printf(&G->body, "sd_%s(%s);\n", gen_dt(dt)->sfx, val);
    else
        hd_cuda_src_printf(&G->body, "(%s)(%s);\n", gen_dt(dt)->store, val);
}

/* var, std (mean, then squared deviations) and logsumexp (max, then the
 * sum of exp(x - max)), as the eager kernels. */
static hd_status gen_red_two_pass(gen_state *G, const hd_plan_kernel *k, const gen_rgeo *rg,
                                  const hd_ir_node *red) {
    int lse = red->op == HD_OP_LOGSUMEXP;
    hd_cuda_src_printf(&G->body, "    double m = %s;\n", lse ? "-HD_INF" : "0");
    if (gen_red_loop(G, k, rg, "0", "NRED", lse ? "m = (x > m || x != x) ? x : m;" : "m += x;"))
        return G->ctx->status;
    if (lse)
        hd_cuda_src_printf(&G->body, "    m = block_reduce(m, " COMB_MAXF ");\n");
    else
        hd_cuda_src_printf(&G->body, "    m = block_reduce(m, " COMB_ADD
                                     ");\n    m = NRED ? m / (double)NRED : HD_NAN;\n");
    hd_cuda_src_printf(&G->body, "    double acc = 0;\n");
    if (gen_red_loop(G, k, rg, "0", "NRED",
                     lse ? "if (isfinite(m)) acc += exp(x - m);" : "acc += (x - m) * (x - m);"))
        return G->ctx->status;
    hd_cuda_src_printf(&G->body, "    acc = block_reduce(acc, " COMB_ADD ");\n");
    if (lse) {
        gen_red_store(G, red->out, "isfinite(m) ? m + log(acc) : m");
        return HD_OK;
    }
    hd_cuda_src_printf(&G->body, "    const double corr = ");
    gen_double(G, (double)red->attrs.ints[0]);
    hd_cuda_src_printf(&G->body,
                       ";\n    double n_ = (double)NRED, dv = n_ - corr > 0 ? n_ - corr : 0.0;\n"
                       "    double rv = NRED == 0 ? HD_NAN : dv > 0 ? acc / dv : acc > 0 ? HD_INF "
                       ": HD_NAN;\n");
    gen_red_store(G, red->out, red->op == HD_OP_STD ? "sqrt(rv)" : "rv");
    return HD_OK;
}

/* Blocks per output of a split reduction (1: no split) and the elements
 * each reduces, as the eager kernels divide it (hd_cuda_split_chunk). */
static int gen_red_splits(const gen_state *G, const gen_rgeo *rg, hd_op op, int64_t *chunk) {
    *chunk = hd_cuda_reduce_splits(op) ? hd_cuda_split_chunk(rg->nout, rg->nred, G->resident) : 0;
    if (*chunk == 0) {
        *chunk = rg->nred;
        return 1;
    }
    return (int)((rg->nred + *chunk - 1) / *chunk);
}

static hd_status gen_reduce(gen_state *G, const hd_plan_kernel *k, hd_cuda_gen_kernel *info) {
    const hd_ir_node *red = &G->g->nodes[k->nodes[k->nnodes - 1]];
    hd_dtype in = G->g->values[red->in[0]].dtype;
    gen_rgeo rg;
    gen_rgeo_make(G, red, &rg);
    int64_t chunk;
    int splits = gen_red_splits(G, &rg, (hd_op)red->op, &chunk);
    hd_cuda_src_printf(&G->body, "  const i64 NRED = %lldLL; (void)NRED;\n", (long long)rg.nred);
    info->launch = HD_CUDA_LAUNCH_BLOCKS;
    if (red->op == HD_OP_VAR || red->op == HD_OP_STD || red->op == HD_OP_LOGSUMEXP) {
        info->n = rg.nout;
        hd_cuda_src_printf(&G->body,
                           "  for (i64 ob = blockIdx.x; ob < %lldLL; ob += gridDim.x) {\n",
                           (long long)rg.nout);
        if (gen_red_two_pass(G, k, &rg, red)) return G->ctx->status;
        hd_cuda_src_printf(&G->body, "  }\n");
        return HD_OK;
    }
    gen_red r = gen_red_rule((hd_op)red->op, in);
    char lo[64], hi[96];
    if (splits > 1) {
        info->n = rg.nout * splits;
        info->fin_blocks = rg.nout;
        info->partials = info->n;
        hd_cuda_src_printf(&G->body,
                           "  for (i64 b_ = blockIdx.x; b_ < %lldLL; b_ += gridDim.x) {\n"
                           "    i64 ob = b_ / %d, c_ = b_ %% %d;\n",
                           (long long)info->n, splits, splits);
        snprintf(lo, sizeof lo, "c_ * %lldLL", (long long)chunk);
        snprintf(hi, sizeof hi, "(c_ + 1) * %lldLL < NRED ? (c_ + 1) * %lldLL : NRED",
                 (long long)chunk, (long long)chunk);
    } else {
        info->n = rg.nout;
        hd_cuda_src_printf(&G->body,
                           "  for (i64 ob = blockIdx.x; ob < %lldLL; ob += gridDim.x) {\n",
                           (long long)rg.nout);
        snprintf(lo, sizeof lo, "0");
        snprintf(hi, sizeof hi, "NRED");
    }
    hd_cuda_src_printf(&G->body, "    %s acc = %s;\n", r.acc, r.init);
    if (gen_red_loop(G, k, &rg, lo, hi, r.step)) return G->ctx->status;
    hd_cuda_src_printf(&G->body, "    acc = block_reduce(acc, %s);\n", r.comb);
    if (splits > 1)
        hd_cuda_src_printf(&G->body, "    if (threadIdx.x == 0) ((%s *)part_)[b_] = acc;\n", r.acc);
    else
        gen_red_store(G, red->out, r.fin);
    hd_cuda_src_printf(&G->body, "  }\n");
    return HD_OK;
}

/* The final pass of a split reduction: combine each output's partials. */
static void gen_reduce_fin(gen_state *G, const hd_plan_kernel *k, const hd_cuda_gen_kernel *info) {
    const hd_ir_node *red = &G->g->nodes[k->nodes[k->nnodes - 1]];
    gen_red r = gen_red_rule((hd_op)red->op, G->g->values[red->in[0]].dtype);
    int64_t splits = info->n / info->fin_blocks;
    gen_rgeo rg;
    gen_rgeo_make(G, red, &rg);
    hd_cuda_src_printf(&G->body,
                       "  const i64 NRED = %lldLL; (void)NRED;\n"
                       "  const %s *pp = (const %s *)part_;\n"
                       "  for (i64 ob = blockIdx.x; ob < %lldLL; ob += gridDim.x) {\n"
                       "    %s acc = %s;\n"
                       "    for (i64 c = threadIdx.x; c < %lldLL; c += blockDim.x) acc = "
                       "%s(acc, pp[ob * %lldLL + c]);\n"
                       "    acc = block_reduce(acc, %s);\n",
                       (long long)rg.nred, r.acc, r.acc, (long long)rg.nout, r.acc, r.init,
                       (long long)splits, r.comb, (long long)splits, r.comb);
    gen_red_store(G, red->out, r.fin);
    hd_cuda_src_printf(&G->body, "  }\n");
}

/* ---- rows: softmax, log_softmax, layer_norm ---- */

/* A loop over one row's elements, with i the flat index of element k. */
static void gen_row_loop_open(gen_state *G, const char *flat) {
    gen_scope_reset(G);
    hd_cuda_src_printf(&G->body,
                       "    for (i64 k = threadIdx.x; k < LEN; k += blockDim.x) {\n"
                       "      i64 i = %s; (void)i;\n",
                       flat);
    gen_index(G, "i");
}

static void gen_softmax(gen_state *G, const hd_ir_node *n, hd_dtype dt) {
    int axis = (int)(n->attrs.ints[0] < 0 ? n->attrs.ints[0] + G->nd : n->attrs.ints[0]);
    int64_t inner = 1;
    for (int j = axis + 1; j < G->nd; j++) inner *= G->shape[j];
    int x = n->in[0];
    char flat[128], sx[24];
    snprintf(flat, sizeof flat, "base + k * %lldLL", (long long)inner);
    snprintf(sx, sizeof sx, "v%d", x);
    hd_cuda_src_printf(&G->body,
                       "    i64 base = (row / %lldLL) * LEN * %lldLL + row %% %lldLL;\n"
                       "    C m = -HD_INF;\n",
                       (long long)inner, (long long)inner, (long long)inner);
    gen_row_loop_open(G, flat);
    gen_use(G, x);
    hd_cuda_src_printf(&G->body,
                       "      m = (%s > m || %s != %s) ? %s : m;\n    }\n"
                       "    m = block_reduce(m, [](C p, C q) { return (q > p || q != q) && p == p "
                       "? q : p; });\n    double sum = 0;\n",
                       sx, sx, sx, sx);
    gen_row_loop_open(G, flat);
    gen_use(G, x);
    hd_cuda_src_printf(&G->body,
                       "      sum += (double)h_exp(%s - m);\n    }\n"
                       "    sum = block_reduce(sum, [](double p, double q) { return p + q; });\n",
                       sx);
    gen_row_loop_open(G, flat);
    gen_use(G, x);
    char val[160];
    if (n->op == HD_OP_SOFTMAX)
        snprintf(val, sizeof val, "(C)(h_exp(%s - m) / (C)sum)", sx);
    else
        snprintf(val, sizeof val, "(C)(%s - m - (C)log(sum))", sx);
    (void)dt;
    gen_store(G, n->out, val);
    hd_cuda_src_printf(&G->body, "    }\n");
}

/* layer_norm over the last ints[0] dims: mean and biased variance in
 * double (two passes), then (x - mean) * rsd [* w + b] in the compute type,
 * as the cpu. */
static void gen_layer_norm(gen_state *G, const hd_ir_node *n) {
    int x = n->in[0];
    hd_cuda_src_printf(&G->body, "    i64 base = row * LEN;\n    double s_ = 0;\n");
    gen_row_loop_open(G, "base + k");
    gen_use(G, x);
    hd_cuda_src_printf(&G->body,
                       "      s_ += (double)v%d;\n    }\n"
                       "    s_ = block_reduce(s_, [](double p, double q) { return p + q; });\n"
                       "    const double mean = s_ / (double)LEN; double q_ = 0;\n",
                       x);
    gen_row_loop_open(G, "base + k");
    gen_use(G, x);
    hd_cuda_src_printf(&G->body,
                       "      q_ += ((double)v%d - mean) * ((double)v%d - mean);\n    }\n"
                       "    q_ = block_reduce(q_, [](double p, double q) { return p + q; });\n"
                       "    const double eps = ",
                       x, x);
    gen_double(G, hd_layer_norm_eps(&n->attrs));
    hd_cuda_src_printf(&G->body, ";\n    const C mu = (C)mean, rs = (C)(1.0 / sqrt(q_ / "
                                 "(double)LEN + eps));\n");
    gen_row_loop_open(G, "base + k");
    char val[160];
    for (int k = 0; k < n->nin; k++) gen_use(G, n->in[k]);
    if (n->nin == 3)
        snprintf(val, sizeof val, "(C)((v%d - mu) * rs * v%d + v%d)", x, n->in[1], n->in[2]);
    else
        snprintf(val, sizeof val, "(C)((v%d - mu) * rs)", x);
    gen_store(G, n->out, val);
    hd_cuda_src_printf(&G->body, "    }\n");
}

static void gen_rows(gen_state *G, const hd_plan_kernel *k, hd_cuda_gen_kernel *info) {
    const hd_ir_node *n = &G->g->nodes[k->nodes[k->nnodes - 1]];
    hd_dtype dt = G->g->values[n->in[0]].dtype;
    int64_t len;
    if (n->op == HD_OP_LAYER_NORM) {
        int nk = (int)n->attrs.ints[0];
        len = hd_shape_numel(G->shape + G->nd - nk, nk);
    } else {
        int axis = (int)(n->attrs.ints[0] < 0 ? n->attrs.ints[0] + G->nd : n->attrs.ints[0]);
        len = G->nd ? G->shape[axis] : 1; /* a 0-d tensor is one row of one */
    }
    int64_t rows = len ? k->numel / len : 0;
    info->launch = HD_CUDA_LAUNCH_BLOCKS;
    info->n = rows;
    hd_cuda_src_printf(&G->body,
                       "  typedef %s C; const i64 LEN = %lldLL;\n"
                       "  for (i64 row = blockIdx.x; row < %lldLL; row += gridDim.x) {\n",
                       dt == HD_F64 ? "double" : "float", (long long)len, (long long)rows);
    if (n->op == HD_OP_LAYER_NORM)
        gen_layer_norm(G, n);
    else
        gen_softmax(G, n, dt);
    hd_cuda_src_printf(&G->body, "  }\n");
}

/* ---- kernels and the module ---- */

/* The head: extern "C" __global__ void hd_k<i>(char *s<a>, ..., part_). */
static void gen_head(gen_state *G, hd_cuda_src *s, int fin, int partials) {
    char name[32];
    hd_cuda_src_printf(s, "extern \"C\" __global__ void __launch_bounds__(256) %s(",
                       hd_cuda_gen_name(G->ki, fin, name, sizeof name));
    int any = 0;
    for (int sl = 0; sl < G->p->nslots; sl++)
        if (G->used[sl]) {
            hd_cuda_src_printf(s, "%schar *__restrict__ S%d", any ? ", " : "", sl);
            any = 1;
        }
    if (partials) hd_cuda_src_printf(s, "%svoid *part_", any ? ", " : "");
    hd_cuda_src_printf(s, ") {\n");
}

static hd_status gen_emit(gen_state *G, hd_cuda_src *s, int fin, int partials) {
    if (G->body.oom) return hd_error(G->ctx, HD_ERR_MEMORY, "out of memory");
    gen_head(G, s, fin, partials);
    hd_cuda_src_printf(s, "%s}\n", G->body.text ? G->body.text : "");
    G->body.len = 0;
    if (G->body.text) G->body.text[0] = 0;
    return HD_OK;
}

static hd_status gen_kernel(gen_state *G, hd_cuda_src *s, hd_cuda_gen_kernel *info) {
    const hd_plan_kernel *k = &G->p->kernels[G->ki];
    G->shape = k->shape;
    G->nd = k->ndim;
    memset(G->used, 0, (size_t)G->p->nslots + 1);
    gen_scope_reset(G);
    info->kernel = G->ki;
    hd_status st = HD_OK;
    switch (k->kind) {
    case HD_PLAN_K_ELEMENTWISE:
        info->launch = HD_CUDA_LAUNCH_THREADS;
        info->n = k->numel;
        st = gen_elementwise(G, k);
        break;
    case HD_PLAN_K_REDUCE: st = gen_reduce(G, k, info); break;
    default: gen_rows(G, k, info); break;
    }
    if (st) return G->ctx->status;
    if (info->fin_blocks > 0) {
        /* the final pass's body first: both launches take one argument
         * list, so both heads name every slot either pass uses */
        hd_cuda_src pass1 = G->body;
        hd_cuda_src_init(&G->body, G->ctx);
        gen_reduce_fin(G, k, info);
        hd_cuda_src fin = G->body;
        G->body = pass1;
        st = gen_emit(G, s, 0, 1);
        hd_cuda_src_free(&G->body);
        G->body = fin;
        if (st || gen_emit(G, s, 1, 1)) return G->ctx->status;
    } else if (gen_emit(G, s, 0, info->partials > 0)) {
        return G->ctx->status;
    }
    int n = 0;
    for (int sl = 0; sl < G->p->nslots; sl++) n += G->used[sl];
    info->slots = hd_ctx_alloc(G->ctx, ((size_t)n + 1) * sizeof(int));
    if (!info->slots) return G->ctx->status;
    for (int sl = 0; sl < G->p->nslots; sl++)
        if (G->used[sl]) info->slots[info->nslots++] = sl;
    return HD_OK;
}

void hd_cuda_gen_info_free(hd_ctx *ctx, hd_cuda_gen_info *info) {
    if (!info->kernels) return;
    for (int i = 0; i < info->nkernels; i++)
        if (info->kernels[i].slots)
            hd_ctx_free(ctx, info->kernels[i].slots,
                        ((size_t)info->kernels[i].nslots + 1) * sizeof(int));
    hd_ctx_free(ctx, info->kernels, ((size_t)info->nkernels + 1) * sizeof *info->kernels);
    memset(info, 0, sizeof *info);
}

hd_status hd_cuda_gen_module(hd_ctx *ctx, const hd_plan *p, int64_t resident, hd_cuda_src *s,
                             hd_cuda_gen_info *info) {
    gen_state G;
    memset(&G, 0, sizeof G);
    memset(info, 0, sizeof *info);
    G.ctx = ctx;
    G.resident = resident;
    G.p = p;
    G.g = p->g;
    hd_cuda_src_init(&G.body, ctx);
    size_t nv = (size_t)G.g->nvalues + 1, ns = (size_t)p->nslots + 1;
    G.loaded = hd_ctx_calloc(ctx, nv, 1);
    G.used = hd_ctx_calloc(ctx, ns, 1);
    info->kernels = hd_ctx_calloc(ctx, (size_t)p->nkernels + 1, sizeof *info->kernels);
    hd_status st = G.loaded && G.used && info->kernels ? HD_OK : ctx->status;
    if (!st) {
        info->nkernels = p->nkernels;
        hd_cuda_src_printf(s, "%s", hd_cuda_prelude());
    }
    for (int k = 0; k < p->nkernels && !st; k++) {
        G.ki = k;
        st = gen_kernel(&G, s, &info->kernels[k]);
        if (info->kernels[k].partials > info->partials) info->partials = info->kernels[k].partials;
    }
    if (!st && s->oom) st = hd_error(ctx, HD_ERR_MEMORY, "out of memory");
    hd_cuda_src_free(&G.body);
    if (G.loaded) hd_ctx_free(ctx, G.loaded, nv);
    if (G.used) hd_ctx_free(ctx, G.used, ns);
    if (st) hd_cuda_gen_info_free(ctx, info);
    return st;
}
