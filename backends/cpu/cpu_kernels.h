/* The CPU backend's kernel families. cpu_backend.c routes each op to the
 * family its kind names in the op table; each family lives in one file. */
#ifndef HD_CPU_KERNELS_H
#define HD_CPU_KERNELS_H

#include "../../runtime/hd_backend.h"

/* Below this many elements a kernel stays on one thread. */
#define CPU_PAR_MIN 32768

#define CPU_KERNEL(family)                                                                         \
    hd_status hd_cpu_##family(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in,         \
                              int nin, const hd_attrs *attrs);                                     \
    int hd_cpu_##family##_supports(hd_op op, hd_dtype dt);

CPU_KERNEL(create)      /* cpu_create.c: full, arange, linspace, eye, rand, randn */
CPU_KERNEL(elementwise) /* cpu_elementwise.c: unary, binary, compare, where */
CPU_KERNEL(reduce)      /* cpu_reduce.c */
CPU_KERNEL(matmul)      /* cpu_matmul.c */
CPU_KERNEL(shape)       /* cpu_shape.c: concat */
CPU_KERNEL(index)       /* cpu_index.c: index_select, one_hot, assign; argsort (cpu_sort.c) */
CPU_KERNEL(nn)          /* cpu_nn.c */
CPU_KERNEL(grad)        /* cpu_grad.c: backward kernels (index_add, conv2d_bwd_*, ...) */
CPU_KERNEL(linalg)      /* cpu_linalg.c: LAPACK */

#undef CPU_KERNEL

/* The backend's optim slot (cpu_optim.c): a whole optimizer step over
 * s's parameters, one pass over each. */
hd_status hd_cpu_optim(hd_ctx *ctx, const hd_optim_step *s);

/* argsort (cpu_sort.c), reached through hd_cpu_index. */
hd_status hd_cpu_sort(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in,
                      const hd_attrs *attrs);

/* Copy a strided view into another of the same shape: es bytes per element,
 * strides in elements (0 broadcasts a source dim), the two must not overlap.
 * Merges dims that are contiguous in both and copies unit-stride runs with
 * memcpy; uses up to nthreads threads for large copies. In cpu_shape.c. */
void hd_cpu_copy_strided(int nthreads, int es, int ndim, const int64_t *shape, void *dst,
                         const int64_t *dstride, const void *src, const int64_t *sstride);

/* This CPU and its OS run AVX-512 F, VL, BW and DQ (the set the eager
 * vector math's wide loops and OpenBLAS's SkylakeX kernels need); 0 where
 * not x86. In cpu_backend.c. */
int hd_cpu_avx512(void);

#endif
