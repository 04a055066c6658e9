/* hd_backend: a device is a table of functions. The core calls
 * through the table and never #ifdefs on a backend; optional slots are NULL. */
#ifndef HD_BACKEND_H
#define HD_BACKEND_H

#include "hd_op.h"

/* A collective over the ranks of a distributed run (runtime/hd_dist.h) on
 * one device's memory: in and out contiguous, on the same device. out has
 * in's size (all_reduce; broadcast: root's in, copied into every rank's
 * out), the world's size times it (all_gather: in rank order), or one
 * rank's block of in's (reduce_scatter). */
typedef enum {
    HD_COLL_ALL_REDUCE,
    HD_COLL_BROADCAST,
    HD_COLL_ALL_GATHER,
    HD_COLL_REDUCE_SCATTER
} hd_coll_kind;
typedef struct hd_coll {
    hd_coll_kind kind;
    hd_tensor *in, *out;
    int op;   /* hd_dist_op: reductions */
    int mean; /* all_reduce, reduce_scatter: the sum divided by the world's size */
    int root; /* broadcast */
} hd_coll;

/* One Adam update of one parameter in one pass, with the roundings of the
 * ops stdlib/optim.hodu's Adam.step runs one by one (each result rounded
 * to the parameter's dtype T, f16 and bf16 computing in f32):
 *   m = b1 m0 + c1 g      (c1 g alone at the first step: m0 NULL)
 *   v = b2 v0 + c2 g g    ((c2 g) g)
 *   p = p - ss m / (sqrt(v) / bc2 + eps)
 * p, g, m0, v0 contiguous, of p's shape and dtype, on one device; m and v
 * new (same shape and dtype), p written in place. The constants are the
 * values the ops would read: each already rounded to T. */
typedef struct hd_adam {
    hd_tensor *p, *g, *m0, *v0, *m, *v;
    double c1, c2, b1, b2, ss, bc2, eps;
} hd_adam;

typedef struct hd_backend {
    const char *name; /* "cpu", "cuda" */
    /* Is the device usable in this process? Fills ctx's error if not. */
    hd_status (*available)(hd_ctx *ctx, int device);
    /* Device memory: data pointers the backend's kernels understand. */
    void *(*alloc)(hd_ctx *ctx, int device, size_t nbytes);
    void (*free)(hd_ctx *ctx, int device, void *p, size_t nbytes);
    /* Copies between host memory and this backend's memory. */
    hd_status (*to_host)(hd_ctx *ctx, int device, void *dst, const void *src, size_t nbytes);
    hd_status (*from_host)(hd_ctx *ctx, int device, void *dst, const void *src, size_t nbytes);
    /* Does run_op handle this op for inputs of this dtype? */
    int (*supports_op)(hd_op op, hd_dtype dt);
    /* Compute op into out (already allocated with the shape rule's shape and
     * dtype). Inputs have been cast to the dtypes the rule asked for. */
    hd_status (*run_op)(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                        const hd_attrs *attrs);
    /* Does run_op read input i of op, when it is a 0-d host tensor (a Hodu
     * number or a cpu scalar, already of the op's input dtype), as a
     * kernel argument, so the value is never copied to the device? NULL:
     * never. */
    int (*takes_number)(hd_op op, int i);
    /* Copy between two devices of this backend, ordered after the work
     * queued on both. NULL: hd_tensor_to_device goes through the host. */
    hd_status (*copy_device)(hd_ctx *ctx, int dst_device, void *dst, int src_device,
                             const void *src, size_t nbytes);
    /* Run c on the device without host copies (cuda: NCCL), setting *done;
     * HD_OK with *done 0: not here (no library, or a process mpirun did not
     * start), and the
     * caller stages the values through host memory. NULL: never. */
    hd_status (*collective)(hd_ctx *ctx, const hd_coll *c, int *done);
    /* One launch for a whole Adam update (a). NULL: the optimizer runs its
     * ops one by one, as on the cpu, where each is one pass already. */
    hd_status (*adam)(hd_ctx *ctx, const hd_adam *a);
} hd_backend;

extern const hd_backend hd_cpu_backend;
/* The error of a linalg op (hd_ops.def) whose factorisation of matrix
 * index (of batch) returned LAPACK's info (the cpu's and cuda's words):
 * singular, not positive-definite, no convergence; info <= 0: an internal
 * error. */
hd_status hd_linalg_fail(hd_ctx *ctx, hd_op op, int64_t batch, int64_t index, int info);
/* backends/cuda: NVRTC kernels, cuBLAS, driver loaded at run time. In a
 * build without the CUDA headers every call says so. */
extern const hd_backend hd_cuda_backend;

/* Find a backend by device string ("cpu", "cpu:0", "cuda", "cuda:1").
 * Only parses: whether the device exists is be->available's answer. */
hd_status hd_backend_parse_device(hd_ctx *ctx, const char *spec, const hd_backend **be,
                                  int *device);
/* Parse and check availability: the error says why a device cannot be used
 * ("cuda is not available: libcuda.so.1 not found"). */
hd_status hd_backend_open_device(hd_ctx *ctx, const char *spec, const hd_backend **be, int *device);

/* Where ops without tensor inputs (creation) put their results until the
 * matching pop: returns the previous place. */
typedef struct hd_place {
    const hd_backend *backend; /* NULL: the cpu */
    int device;
} hd_place;
hd_place hd_place_push(hd_ctx *ctx, const hd_backend *be, int device);
void hd_place_pop(hd_ctx *ctx, hd_place prev);
/* The place of t's storage ({cpu, 0} for symbolic tensors). */
hd_place hd_place_of(const hd_tensor *t);

/* t's values on (be, device): a new reference to t when it is there
 * already, else a contiguous copy. Not recorded for gradients. */
hd_status hd_tensor_to_device(hd_ctx *ctx, hd_tensor *t, const hd_backend *be, int device,
                              hd_tensor **out);
/* t's data moved onto (be, device) in place, with its gradient: the tensor
 * keeps its identity (module.to(device) in PyTorch's sense). */
hd_status hd_tensor_move(hd_ctx *ctx, hd_tensor *t, const hd_backend *be, int device);
/* Numbers and 0-d cpu tensors: they take the device of the operands they
 * meet (as PyTorch's cpu scalars: an optimizer's step count), in eager ops
 * and as inputs of compiled code. */
static inline int hd_tensor_follows_device(const hd_tensor *t) { /* every op's dispatch */
    return t->number || (t->ndim == 0 && t->storage && t->storage->backend == &hd_cpu_backend);
}
/* t's values in host memory (cpu tensors: a new reference). */
hd_tensor *hd_tensor_to_host(hd_ctx *ctx, hd_tensor *t);

#endif
