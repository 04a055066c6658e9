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

/* One optimizer step over n parameters of one dtype T on one device, each
 * in one pass, with the roundings of the ops stdlib/optim.hodu's step runs
 * one by one (each result rounded to T, f16 and bf16 computing in f32).
 * Adam (c: HD_ADAM_*; state m, v):
 *   p = decay p           (AdamW's p.mul_(1 - lr wd): HD_OPTIM_DECAY)
 *   g = g + l2 p          (Adam's weight decay: HD_OPTIM_WD)
 *   m = b1 m0 + c1 g      (c1 g alone at the first step: m0 NULL)
 *   v = b2 v0 + c2 g g    ((c2 g) g)
 *   p = p - ss m / (sqrt(v) / bc2 + eps)
 * SGD (c: HD_SGD_*; state buf with HD_OPTIM_MOMENTUM, else none):
 *   g = g + wd p          (HD_OPTIM_WD)
 *   buf = mom buf0 + g    (g itself at the first step: buf0 NULL)
 *   d = g + mom buf with HD_OPTIM_NESTEROV, else buf (g without momentum)
 *   p = p - lr d          (p.sub_(d, alpha = lr))
 * Adagrad (c: HD_AGRAD_*; state sum):
 *   g = g + wd p          (HD_OPTIM_WD)
 *   sum = sum0 + g g      (g g + init at the first step: sum0 NULL)
 *   p = p - (clr g) / (sqrt(sum) + eps)
 * Lion (c: HD_LION_*; state m):
 *   m0 = g 0 at the first step (m0 NULL)
 *   c = b1 m0 + c1 g
 *   p = decay p           (p.mul_(1 - lr wd): HD_OPTIM_DECAY)
 *   p = p - lr sign(c)    (sign(NaN) NaN)
 *   m = b2 m0 + c2 g
 * RMSprop (c: HD_RMS_*; state v, avg with HD_OPTIM_CENTERED, buf with
 * HD_OPTIM_MOMENTUM):
 *   g = g + wd p          (HD_OPTIM_WD)
 *   v = alpha v0 + (ca g) g               ((ca g) g alone at the first step)
 *   a = alpha a0 + ca g, den = v - a a    (centered; else den = v)
 *   d = g / (sqrt(den) + eps)
 *   buf = mom buf0 + d, d = buf           (momentum; buf = d at first)
 *   p = p - lr d
 * p, g and the state before (s0) contiguous, of p's shape and dtype; the
 * new state s new tensors (same shape and dtype) or s0 itself (all of an
 * item's state, updated in place: each element read before it is
 * written), p written in place; no memory written is another item's (or
 * read by one). The constants are the values the ops would read: each
 * already rounded to T. */
enum {
    HD_OPTIM_ADAM,
    HD_OPTIM_SGD,
    HD_OPTIM_ADAGRAD,
    HD_OPTIM_LION,
    HD_OPTIM_RMSPROP,
    HD_OPTIM_KINDS
};
enum {
    HD_ADAM_C1,
    HD_ADAM_C2,
    HD_ADAM_B1,
    HD_ADAM_B2,
    HD_ADAM_SS,
    HD_ADAM_BC2,
    HD_ADAM_EPS,
    HD_ADAM_L2,
    HD_ADAM_DECAY
};
enum { HD_SGD_LR, HD_SGD_MOM, HD_SGD_WD };
enum { HD_AGRAD_CLR, HD_AGRAD_WD, HD_AGRAD_EPS, HD_AGRAD_INIT };
enum { HD_LION_C1, HD_LION_C2, HD_LION_B1, HD_LION_B2, HD_LION_LR, HD_LION_DECAY };
enum { HD_RMS_LR, HD_RMS_ALPHA, HD_RMS_CA, HD_RMS_EPS, HD_RMS_WD, HD_RMS_MOM };
/* flags: which of the optional steps run (as the optimizer decides, on
 * the options' values before any rounding) */
enum {
    HD_OPTIM_DECAY = 1,
    HD_OPTIM_WD = 2,
    HD_OPTIM_MOMENTUM = 4,
    HD_OPTIM_NESTEROV = 8,
    HD_OPTIM_CENTERED = 16
};

#define HD_OPTIM_STATE 3 /* state tensors a parameter may have */
typedef struct hd_optim_item {
    hd_tensor *p, *g;
    hd_tensor *s0[HD_OPTIM_STATE]; /* the state before, NULL at a first step */
    hd_tensor *s[HD_OPTIM_STATE];  /* the new state: new tensors, or s0 (in place) */
} hd_optim_item;

typedef struct hd_optim_step {
    int kind;  /* HD_OPTIM_ADAM ... */
    int flags; /* HD_OPTIM_DECAY ... */
    int smask; /* the state the options use: bit q for s0[q], s[q] (others NULL) */
    hd_optim_item *items;
    int n;
    double c[10];
} hd_optim_step;

/* A device's own allocator: bytes its tensors hold (used), the most they
 * held since the device opened or the last reset (peak), and free blocks
 * kept for reuse (cached); sizes as allocated (rounded up). */
typedef struct hd_mem_stats {
    size_t used, peak, cached;
} hd_mem_stats;
/* hd_backend.memory's requests. */
enum { HD_MEM_READ, HD_MEM_RESET_PEAK, HD_MEM_TRIM };

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
    /* A whole optimizer step over s's parameters: one pass over each (in
     * few launches on a device). NULL: the optimizer runs its ops one by
     * one. */
    hd_status (*optim)(hd_ctx *ctx, const hd_optim_step *s);
    /* The device's allocator: HD_MEM_READ fills *st (zeros for a device
     * this context has not opened), HD_MEM_RESET_PEAK starts the peak
     * again from what is used now, HD_MEM_TRIM gives the cached blocks
     * back to the driver (device -1: every open device). NULL: no
     * allocator of its own (the cpu's memory is the context's,
     * hd_ctx.mem_used). */
    hd_status (*memory)(hd_ctx *ctx, int device, int req, hd_mem_stats *st);
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

/* Every backend's cached device blocks given back (empty_cache()). */
void hd_devices_trim(hd_ctx *ctx);

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
