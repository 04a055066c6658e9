/* CPU fused attention: softmax(scale q k^T + mask) v without the [L, S]
 * scores. Each task takes ATT_BLK_Q query rows of one batch and walks the
 * keys ATT_BLK_K at a time: a gemm for the block's scores, the online
 * softmax (running maximum and sum per row, earlier output rescaled when
 * the maximum grows), a gemm adding the block's weighted values. A causal
 * task stops at its last row's key. Float dtypes, computed in the working
 * type of cpu_nn.h (half inputs in f32).
 *
 * Its gradient (attention_bwd, as FlashAttention's backward) walks the same
 * blocks without the scores either: per block of query rows, one pass over
 * the keys for the rows' log sum exps, then per key block the softmax p
 * again and four gemms (dv += p^T g, dp = g v^T, dq += ds k, dk += ds^T q
 * with ds = p (dp - rowsum(g y))). A task is one batch, as dk and dv
 * gather every query row. */
#include "cpu_blas.h"
#include "cpu_nn.h"
#include "hd_vmath.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* Query rows per task and keys per block: a block's scores (64 x 256 W)
 * and the task's output rows stay in L2 beside the keys and values. */
#define ATT_BLK_Q 64
#define ATT_BLK_K 256

/* batch: the product of the leading dims; work: multiply-adds in all;
 * bq, bk: query rows per task and keys per block (the blocks' sizes, or
 * fewer when L or S is smaller). */
typedef struct {
    int64_t batch, l, s, e, ev, work, bq, bk;
    int nbatch_dims;
    int64_t bshape[HD_MAX_DIMS];
    double scale;
    int causal;
} att_geom;

/* The loaded arrays (W), and how the mask (its own contiguous layout) is
 * read as [..., L, S]: strides of the batch dims (shape bshape), of a row
 * and of a key (0 where it broadcasts); mask_off: the current batch's first
 * element. */
typedef struct {
    const void *q, *k, *v, *mask;
    const void *y, *go; /* the backward's: attention's result and its gradient */
    void *out;
    int64_t mask_ls, mask_ss, mask_off;
    int nbatch_dims;
    int64_t bshape[HD_MAX_DIMS], mask_bs[HD_MAX_DIMS];
} att_job;

static void att_mask_strides(const att_geom *g, const hd_tensor *mask, att_job *j) {
    int nd = g->nbatch_dims + 2, off = nd - mask->ndim;
    int64_t st[HD_MAX_DIMS], acc = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int md = d - off;
        int64_t size = md >= 0 ? mask->shape[md] : 1;
        st[d] = size > 1 ? acc : 0;
        acc *= size;
    }
    j->nbatch_dims = g->nbatch_dims;
    for (int d = 0; d < g->nbatch_dims; d++) j->mask_bs[d] = st[d], j->bshape[d] = g->bshape[d];
    j->mask_ls = st[nd - 2];
    j->mask_ss = st[nd - 1];
}

/* One block of query rows of one batch in the backward (W arrays): q,
 * k, v, g from the batch's first row; dq, dk, dv its parts of the output;
 * lse, dd per row of the block (rows [q0, q0 + nq)). */
typedef struct {
    const void *q, *k, *v, *g, *lse, *dd;
    void *dq, *dk, *dv;
    int64_t q0, nq;
} att_bwd_rows;

/* How many of a block's nk keys (from k0) query row `row` may attend to:
 * all, or causally those with k0 + c <= row. */
static inline int64_t att_lim(const att_geom *g, int64_t nk, int64_t row, int64_t k0) {
    return g->causal ? HD_MAX(0, HD_MIN(nk, row + 1 - k0)) : nk;
}

/* Where batch b (flat over the leading dims) starts in the mask. */
static int64_t att_mask_batch(const att_job *j, int64_t b) {
    int64_t off = 0;
    for (int d = j->nbatch_dims - 1; d >= 0; d--) {
        off += (b % j->bshape[d]) * j->mask_bs[d];
        b /= j->bshape[d];
    }
    return off;
}

#define NN_T      float
#define NN_S      f32
#define NN_F64    0
#define NN_EXP(x) hd_vm_expf(x)
#include "cpu_attention_tmpl.h"
#undef NN_T
#undef NN_S
#undef NN_F64
#undef NN_EXP

#define NN_T      double
#define NN_S      f64
#define NN_F64    1
#define NN_EXP(x) exp(x)
#include "cpu_attention_tmpl.h"
#undef NN_T
#undef NN_S
#undef NN_F64
#undef NN_EXP

/* The geometry of attention (q, k, v) with attrs; an error when a count
 * would not fit the gemms' ints. */
static hd_status att_geom_init(hd_ctx *ctx, att_geom *g, const hd_tensor *q, const hd_tensor *k,
                               const hd_tensor *v, const hd_attrs *attrs) {
    memset(g, 0, sizeof *g);
    int nd = q->ndim;
    g->nbatch_dims = nd - 2;
    g->batch = 1;
    for (int d = 0; d < nd - 2; d++) g->batch *= q->shape[d], g->bshape[d] = q->shape[d];
    g->l = q->shape[nd - 2], g->e = q->shape[nd - 1];
    g->s = k->shape[nd - 2], g->ev = v->shape[nd - 1];
    g->bq = HD_MAX(1, HD_MIN(ATT_BLK_Q, g->l));
    g->bk = HD_MAX(1, HD_MIN(ATT_BLK_K, g->s));
    g->scale = attrs->scalar[0];
    g->causal = attrs->ints[0] != 0;
    char sq[128], sk[128];
    double work = (double)g->batch * (double)g->l * (double)g->s * (double)(g->e + g->ev);
    if (g->e > INT32_MAX || g->ev > INT32_MAX || g->s > INT32_MAX || work > 9e18)
        return hd_error(ctx, HD_ERR_RUNTIME, "attention: q %s with k %s is too large",
                        hd_shape_str(q->shape, nd, sq, sizeof sq),
                        hd_shape_str(k->shape, nd, sk, sizeof sk));
    g->work = (int64_t)work;
    return HD_OK;
}

hd_status hd_cpu_attention(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in, int nin,
                           const hd_attrs *attrs) {
    att_geom g;
    if (att_geom_init(ctx, &g, in[0], in[1], in[2], attrs)) return ctx->status;
    if (out->numel == 0) return HD_OK;
    if (g.s == 0) { /* no keys: the composition's empty product, zeros */
        memset(hd_tensor_data(out), 0, hd_tensor_nbytes(out));
        return HD_OK;
    }
    if (out->dtype == HD_F64) return att_run_f64(ctx, out, in, nin, &g);
    return att_run_f32(ctx, out, in, nin, &g);
}

hd_status hd_cpu_attention_bwd(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in, int nin,
                               const hd_attrs *attrs) {
    att_geom g;
    if (att_geom_init(ctx, &g, in[0], in[1], in[2], attrs)) return ctx->status;
    if (out->numel == 0) return HD_OK;
    if (g.s == 0 || g.l == 0) { /* an empty product: zeros */
        memset(hd_tensor_data(out), 0, hd_tensor_nbytes(out));
        return HD_OK;
    }
    if (out->dtype == HD_F64) return att_bwd_run_f64(ctx, out, in, nin, &g);
    return att_bwd_run_f32(ctx, out, in, nin, &g);
}
