/* hd_cuda_gen: the CUDA C of a planned graph (the cuda compiler's code
 * generator, docs/cuda.md). Plain C in every build, so that the NVRTC
 * compile tests run on machines without a GPU.
 *
 * Every generated kernel of the plan (hd_plan.h) becomes one __global__
 * function `hd_k<i>` of one module: elementwise kernels are one thread per
 * element of their shape, reductions one block per output element (or, for
 * a small output over a large extent, a split pass writing partial results
 * and a final pass `hd_k<i>_fin`), row kernels (softmax, log_softmax,
 * layer_norm) one block per row. Values the plan keeps in registers never
 * touch memory; the rest are read and written at their slot and byte
 * offset, with every shape, stride and offset a constant of the source. A
 * kernel's parameters are the base pointers of the slots it uses, in slot
 * order, then (split reductions) the partial results. */
#ifndef HD_CUDA_GEN_H
#define HD_CUDA_GEN_H

#include "cuda_int.h"
#include "hd_plan.h"

typedef enum {
    HD_CUDA_LAUNCH_THREADS, /* one thread per element: hd_cuda_launch(n) */
    HD_CUDA_LAUNCH_BLOCKS,  /* one 256-thread block per item, grid-stride over the rest */
} hd_cuda_launch_kind;

typedef struct hd_cuda_gen_kernel {
    int kernel;                 /* plan kernel */
    hd_cuda_launch_kind launch; /* how hd_k<i> is launched */
    int64_t n;                  /* threads or blocks */
    int64_t fin_blocks;         /* > 0: launch hd_k<i>_fin with that many blocks after */
    int64_t partials;           /* split reductions: 8-byte partial results */
    int *slots;                 /* the slots it takes, in order */
    int nslots;
} hd_cuda_gen_kernel;

typedef struct hd_cuda_gen_info {
    hd_cuda_gen_kernel *kernels; /* per plan kernel, from hd_ctx_alloc */
    int nkernels;
    int64_t partials; /* the largest split reduction's partial results */
} hd_cuda_gen_info;

/* The module of plan p into s (which the caller initialised) and the
 * launch geometry of its kernels into info (free with
 * hd_cuda_gen_info_free), for a device running `resident` 256-thread
 * blocks at once (hd_cuda_dev.resident: split reductions divide their work
 * by it, as the eager kernels). Errors: out of memory only. */
hd_status hd_cuda_gen_module(hd_ctx *ctx, const hd_plan *p, int64_t resident, hd_cuda_src *s,
                             hd_cuda_gen_info *info);
void hd_cuda_gen_info_free(hd_ctx *ctx, hd_cuda_gen_info *info);
/* "hd_k<i>" or "hd_k<i>_fin" into buf. */
char *hd_cuda_gen_name(int kernel, int fin, char *buf, size_t n);

#endif
