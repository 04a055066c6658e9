/* cpu_linalg: the linalg ops (hd_ops.def) through LAPACK, which OpenBLAS
 * ships and cpu_blas opens. One matrix of the batch at a time: read into
 * scratch as the working type, factorised, written into the result. Errors
 * name the matrix of the batch they come from. */
#include "cpu_blas.h"
#include "cpu_kernels.h"
#include "cpu_nn.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define LA_SCRATCH_MAX 8

typedef struct la_job {
    hd_ctx *ctx;
    hd_op op;
    hd_tensor *const *in;
    hd_tensor *out;
    int64_t m, n, k; /* the matrix (m x n), solve's right-hand sides */
    int64_t outlen;  /* result elements per matrix */
    int64_t index;   /* the matrix of the batch */
    int64_t batch;
    int full; /* svd: full matrices */
    void *scratch[LA_SCRATCH_MAX];
    size_t sizes[LA_SCRATCH_MAX];
    int nscratch;
} la_job;

static void *la_alloc(la_job *j, size_t nbytes) {
    if (j->nscratch == LA_SCRATCH_MAX) {
        hd_error(j->ctx, HD_ERR_RUNTIME, "internal error: %s needs more scratch",
                 hd_op_name(j->op));
        return NULL;
    }
    void *p = hd_ctx_alloc(j->ctx, nbytes);
    if (p) {
        j->scratch[j->nscratch] = p;
        j->sizes[j->nscratch++] = nbytes;
    }
    return p;
}

static void la_release(la_job *j) {
    for (int i = 0; i < j->nscratch; i++) hd_ctx_free(j->ctx, j->scratch[i], j->sizes[i]);
    j->nscratch = 0;
}

/* "the matrix", or "matrix 3 of the batch" */
static const char *la_which(int64_t batch, int64_t index, char *buf, size_t n) {
    if (batch > 1)
        snprintf(buf, n, "matrix %lld of the batch", (long long)index);
    else
        snprintf(buf, n, "the matrix");
    return buf;
}

hd_status hd_linalg_fail(hd_ctx *ctx, hd_op op, int64_t batch, int64_t index, int info) {
    char w[64];
    la_which(batch, index, w, sizeof w);
    const char *name = hd_op_name(op);
    if (info <= 0 || op == HD_OP_LINALG_QR)
        return hd_error(ctx, HD_ERR_RUNTIME, "internal error: %s: LAPACK returned info %d", name,
                        info);
    if (op == HD_OP_LINALG_CHOLESKY)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "%s: %s is not positive-definite: its leading minor of order %d is not "
                        "positive",
                        name, w, info);
    if (op == HD_OP_LINALG_SVD || op == HD_OP_LINALG_EIGH)
        return hd_error(ctx, HD_ERR_RUNTIME, "%s: LAPACK did not converge on %s", name, w);
    return hd_error(ctx, HD_ERR_RUNTIME,
                    "%s: %s is singular: pivot %d of its LU factorisation is zero", name, w, info);
}

static hd_status la_fail(la_job *j, int info) {
    return hd_linalg_fail(j->ctx, j->op, j->batch, j->index, info);
}

#define LA_T float
#define LA_S f32
#include "cpu_linalg_tmpl.h"
#undef LA_T
#undef LA_S
#define LA_T double
#define LA_S f64
#include "cpu_linalg_tmpl.h"
#undef LA_T
#undef LA_S

static struct {
    la_lapack_f32 s;
    la_lapack_f64 d;
    int ready;
} lapack;

static pthread_once_t lapack_once = PTHREAD_ONCE_INIT;

static void *la_sym(char prefix, const char *name, int *ok) {
    char full[32];
    snprintf(full, sizeof full, "%c%s_", prefix, name);
    void *p = cpu_blas_symbol(full);
    if (!p) *ok = 0;
    return p;
}

#define LA_BIND(tab, prefix, name) *(void **)&lapack.tab.name = la_sym(prefix, #name, &ok)

static void lapack_init_once(void) {
    int ok = 1;
    LA_BIND(s, 's', getrf), LA_BIND(s, 's', getri), LA_BIND(s, 's', getrs);
    LA_BIND(s, 's', potrf), LA_BIND(s, 's', geqrf), LA_BIND(s, 's', orgqr);
    LA_BIND(s, 's', gesdd), LA_BIND(s, 's', syevd);
    LA_BIND(d, 'd', getrf), LA_BIND(d, 'd', getri), LA_BIND(d, 'd', getrs);
    LA_BIND(d, 'd', potrf), LA_BIND(d, 'd', geqrf), LA_BIND(d, 'd', orgqr);
    LA_BIND(d, 'd', gesdd), LA_BIND(d, 'd', syevd);
    lapack.ready = ok;
}

static hd_status la_setup(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                          const hd_attrs *attrs, la_job *j) {
    memset(j, 0, sizeof *j);
    j->ctx = ctx, j->op = op, j->in = in, j->out = out;
    for (int i = 0; i < nin; i++)
        if (in[i]->dtype != out->dtype || !hd_tensor_is_cpu(in[i]))
            return hd_error(ctx, HD_ERR_RUNTIME, "%s: cpu kernel got a %s input for a %s result",
                            hd_op_name(op), hd_dtype_name(in[i]->dtype), hd_dtype_name(out->dtype));
    const hd_tensor *a = in[0];
    j->m = a->shape[a->ndim - 2], j->n = a->shape[a->ndim - 1];
    j->k = op == HD_OP_LINALG_SOLVE ? in[1]->shape[in[1]->ndim - 1] : 0;
    j->full = attrs && attrs->ints[0] != 0;
    j->batch = hd_shape_numel(a->shape, a->ndim - 2);
    j->outlen = j->batch ? out->numel / j->batch : 0;
    pthread_once(&lapack_once, lapack_init_once);
    if (!lapack.ready)
        return hd_error(ctx, HD_ERR_RUNTIME, "%s needs LAPACK, which Hodu takes from OpenBLAS: %s",
                        hd_op_name(op),
                        cpu_blas_ready() ? "the OpenBLAS found has no LAPACK" : cpu_blas_why());
    return HD_OK;
}

hd_status hd_cpu_linalg(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                        const hd_attrs *attrs) {
    la_job j;
    if (!hd_cpu_linalg_supports(op, out->dtype))
        return hd_error(ctx, HD_ERR_RUNTIME, "%s is not supported for %s tensors on cpu",
                        hd_op_name(op), hd_dtype_name(out->dtype));
    if (la_setup(ctx, op, out, in, nin, attrs, &j)) return ctx->status;
    hd_status st = HD_OK;
    for (j.index = 0; j.index < j.batch && !st; j.index++) {
        st = out->dtype == HD_F64 ? la_one_f64(&j, &lapack.d, j.index)
                                  : la_one_f32(&j, &lapack.s, j.index);
        la_release(&j);
    }
    return st;
}

int hd_cpu_linalg_supports(hd_op op, hd_dtype dt) {
    if ((unsigned)op >= HD_OP_COUNT || hd_op_infos[op].kind != HD_KIND_LINALG) return 0;
    return dt == HD_F32 || dt == HD_F64;
}
