/* Collectives between the ranks of a distributed run on device memory,
 * through NCCL (opened at run time by cuda_loader.c, like cuBLAS): the
 * backend's `collective` slot, which dist's all_reduce (the op, eager and
 * in compiled code), broadcast, all_gather and reduce_scatter call for
 * cuda tensors. Where NCCL is missing, the run is not distributed, or a
 * CUDA Graph is being captured, the slot declines and the caller stages
 * the values through host memory and MPI, as before.
 *
 * Each rank needs a GPU of its own (NCCL refuses two ranks on one):
 * cuda:<dist.local_rank()>.
 *
 * - One communicator per device and process, made at the first collective
 *   on that device: rank 0 asks NCCL for a unique id, MPI broadcasts it
 *   (hd_dist_broadcast), every rank joins with ncclCommInitRank. Every
 *   rank must reach its first device collective together, as with any
 *   collective.
 * - The work is queued on the device's stream, so it is ordered after the
 *   kernels that made its input and before those that read its result;
 *   then the host waits for it, the call and the wait under dist's watch
 *   as MPI's calls are (NCCL may block in the call itself): a
 *   rank that has stopped, or that calls another collective, stops every
 *   rank after the timeout instead of leaving them waiting for ever.
 * - Results equal the host path's: f16 and bf16 are reduced in f32 and
 *   rounded once, bool by max (sum, max) or min (prod, min), mean is the
 *   sum divided by the world's size. */
#if HODU_HAVE_CUDA
#include "cuda_int.h"
#include "hd_dist.h"
#include "hd_op.h"

#include <string.h>

/* Can collectives on device d go through NCCL (the library open, MPI
 * open, no capture)? A world of one started by mpirun uses it too. */
static int nccl_usable(const hd_cuda_api *a, const hd_cuda_dev *d) {
    return a->nccl_ok && hd_dist_active() && !d->pool && !d->nccl_failed;
}

static hd_status nccl_check(hd_ctx *ctx, const hd_cuda_api *a, ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return HD_OK;
    return hd_error(ctx, HD_ERR_RUNTIME, "%s: NCCL: %s", what, a->nccl_error_string(r));
}

/* d's communicator, made with the other ranks at the first call. */
static hd_status nccl_comm(hd_ctx *ctx, const hd_cuda_api *a, hd_cuda_dev *d, const char *what) {
    if (d->nccl) return HD_OK;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    char err[512];
    if (hd_dist_rank() == 0 && nccl_check(ctx, a, a->nccl_get_unique_id(&id), what))
        return ctx->status;
    if (hd_dist_broadcast(&id, sizeof id, 0, err, sizeof err))
        return hd_error(ctx, HD_ERR_RUNTIME, "%s: %s", what, err);
    hd_dist_watch_begin(what);
    ncclResult_t r = a->nccl_comm_init_rank(&d->nccl, hd_dist_size(), id, hd_dist_rank());
    hd_dist_watch_end();
    if (r == ncclSuccess) return HD_OK;
    d->nccl = NULL, d->nccl_failed = 1;
    return hd_error(ctx, HD_ERR_RUNTIME,
                    "%s: NCCL could not join the ranks: %s (each rank needs a GPU of its own: "
                    "put rank r's tensors on \"cuda:\" + str(dist.local_rank()))",
                    what, a->nccl_error_string(r));
}

/* Wait for the collective queued on d's stream. */
static hd_status nccl_wait(hd_ctx *ctx, const hd_cuda_api *a, hd_cuda_dev *d, const char *what) {
    return hd_cuda_check(ctx, a->stream_synchronize(d->stream), what);
}

static ncclDataType_t nccl_type(hd_dtype dt) {
    switch (dt) {
    case HD_I8: return ncclInt8;
    case HD_I32: return ncclInt32;
    case HD_I64: return ncclInt64;
    case HD_F32: return ncclFloat32;
    case HD_F64: return ncclFloat64;
    default: return ncclUint8; /* u8, bool */
    }
}

static ncclRedOp_t nccl_op(hd_dtype dt, int op) {
    if (dt == HD_BOOL) return op == HD_DIST_SUM || op == HD_DIST_MAX ? ncclMax : ncclMin;
    return op == HD_DIST_PROD  ? ncclProd
           : op == HD_DIST_MAX ? ncclMax
           : op == HD_DIST_MIN ? ncclMin
                               : ncclSum;
}

static CUdeviceptr nccl_ptr(const hd_tensor *t) {
    return (CUdeviceptr)(uintptr_t)hd_tensor_data(t);
}

/* The op on t (a new tensor); NULL with the error. */
static hd_tensor *nccl_run1(hd_ctx *ctx, hd_op op, hd_tensor *t, hd_tensor *b, hd_dtype dt) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.dtype = dt;
    hd_tensor *in[2] = {t, b}, *y = NULL;
    return hd_op_run(ctx, op, in, b ? 2 : 1, &at, &y) ? NULL : y;
}

/* The reduction of c->in into c->out (all_reduce: the same size;
 * reduce_scatter: this rank's block) in a dtype NCCL reduces as the host
 * path does: f16 and bf16 through f32; mean divides the sum. */
static hd_status nccl_reduce(hd_ctx *ctx, const hd_cuda_api *a, hd_cuda_dev *d, const hd_coll *c,
                             const char *what) {
    hd_dtype dt = c->out->dtype, wd = dt == HD_F16 || dt == HD_BF16 ? HD_F32 : dt;
    hd_tensor *src = wd == dt ? hd_tensor_ref(c->in) : nccl_run1(ctx, HD_OP_CAST, c->in, NULL, wd);
    hd_tensor *dst = wd == dt && !c->mean
                         ? hd_tensor_ref(c->out)
                         : hd_tensor_new_on(ctx, &hd_cuda_backend, c->out->storage->device, wd,
                                            c->out->shape, c->out->ndim);
    hd_status st = src && dst ? HD_OK : ctx->status;
    size_t count = dst ? (size_t)dst->numel : 0;
    if (!st && c->kind == HD_COLL_ALL_REDUCE)
        st = nccl_check(ctx, a,
                        a->nccl_all_reduce(nccl_ptr(src), nccl_ptr(dst), count, nccl_type(wd),
                                           nccl_op(wd, c->op), d->nccl, d->stream),
                        what);
    else if (!st)
        st = nccl_check(ctx, a,
                        a->nccl_reduce_scatter(nccl_ptr(src), nccl_ptr(dst), count, nccl_type(wd),
                                               nccl_op(wd, c->op), d->nccl, d->stream),
                        what);
    if (!st) st = nccl_wait(ctx, a, d, what);
    hd_tensor *fin = NULL;
    if (!st && dst != c->out) {
        hd_tensor *n = c->mean ? hd_tensor_number(ctx, wd, (double)hd_dist_size()) : NULL;
        hd_tensor *m = c->mean ? nccl_run1(ctx, HD_OP_DIV, dst, n, wd) : hd_tensor_ref(dst);
        fin = m && m->dtype != dt ? nccl_run1(ctx, HD_OP_CAST, m, NULL, dt) : hd_tensor_ref(m);
        hd_tensor_unref(n), hd_tensor_unref(m);
        st = fin ? a->memcpy_dtod(nccl_ptr(c->out), nccl_ptr(fin), hd_tensor_nbytes(c->out),
                                  d->stream) == CUDA_SUCCESS
                       ? HD_OK
                       : hd_error(ctx, HD_ERR_RUNTIME, "%s: device copy failed", what)
                 : ctx->status;
    }
    hd_tensor_unref(fin), hd_tensor_unref(src), hd_tensor_unref(dst);
    return st;
}

/* broadcast and all_gather move bytes: one call on uint8 counts */
static hd_status nccl_move(hd_ctx *ctx, const hd_cuda_api *a, hd_cuda_dev *d, const hd_coll *c,
                           const char *what) {
    size_t n = hd_tensor_nbytes(c->in);
    ncclResult_t r = c->kind == HD_COLL_BROADCAST
                         ? a->nccl_broadcast(nccl_ptr(c->in), nccl_ptr(c->out), n, ncclUint8,
                                             c->root, d->nccl, d->stream)
                         : a->nccl_all_gather(nccl_ptr(c->in), nccl_ptr(c->out), n, ncclUint8,
                                              d->nccl, d->stream);
    if (nccl_check(ctx, a, r, what)) return ctx->status;
    return nccl_wait(ctx, a, d, what);
}

static const char *nccl_what(hd_coll_kind k) {
    static const char *const names[] = {"dist.all_reduce", "dist.broadcast", "dist.all_gather",
                                        "dist.reduce_scatter"};
    return names[k];
}

hd_status hd_cuda_collective(hd_ctx *ctx, const hd_coll *c, int *done) {
    *done = 0;
    const hd_cuda_api *a = hd_cuda_api_get();
    hd_cuda_dev *d = hd_cuda_dev_get(ctx, c->out->storage->device);
    if (!d) return ctx->status;
    if (!nccl_usable(a, d) || !hd_tensor_is_contiguous(c->in) || !hd_tensor_is_contiguous(c->out))
        return HD_OK;
    const char *what = nccl_what(c->kind);
    if (nccl_comm(ctx, a, d, what)) return ctx->status;
    *done = 1;
    if (c->in->numel == 0) return HD_OK;
    /* watched from the call (NCCL may block in it) to the end of the wait */
    hd_dist_watch_begin(what);
    hd_status st = c->kind == HD_COLL_ALL_REDUCE || c->kind == HD_COLL_REDUCE_SCATTER
                       ? nccl_reduce(ctx, a, d, c, what)
                       : nccl_move(ctx, a, d, c, what);
    hd_dist_watch_end();
    return st;
}

void hd_cuda_nccl_release(const hd_cuda_api *a, hd_cuda_dev *d) {
    if (d->nccl) a->nccl_comm_destroy(d->nccl);
    d->nccl = NULL;
}

#endif
