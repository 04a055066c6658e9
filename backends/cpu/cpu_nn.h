/* Internal to the CPU nn kernels (cpu_nn.c, cpu_conv.c): the buffers they
 * compute in and the conv/pool entry points.
 *
 * Kernels compute in a working type W: double for f64 tensors, float for
 * f32, f16 and bf16 ones (half types are converted to f32 scratch first).
 * Each W-generic function exists twice, suffixed _f32 (W = float) and _f64
 * (W = double); NN_FN(name) names the current instance inside a template. */
#ifndef HD_CPU_NN_H
#define HD_CPU_NN_H

#include "cpu_kernels.h"

#define NN_CAT2(a, b) a##_##b
#define NN_CAT(a, b)  NN_CAT2(a, b)

/* Elements one parallel block of a flat loop covers. */
#define NN_BLOCK 16384

/* Read flat (row-major) elements [i0, i0 + n) of t, any float dtype and any
 * strides (0 strides broadcast), into dst as W. */
void hd_cpu_nn_read_f32(const hd_tensor *t, int64_t i0, int64_t n, float *dst);
void hd_cpu_nn_read_f64(const hd_tensor *t, int64_t i0, int64_t n, double *dst);

/* t's elements as a contiguous W array: t's own data when it already is
 * one (*owned = 0), else a converted copy (*owned = 1) that the caller frees
 * with hd_ctx_free(ctx, p, t->numel * sizeof(W)). NULL: out of memory. */
const float *hd_cpu_nn_load_f32(hd_ctx *ctx, const hd_tensor *t, int *owned);
const double *hd_cpu_nn_load_f64(hd_ctx *ctx, const hd_tensor *t, int *owned);

/* Where a kernel writes its result: out's own data when out's dtype is W,
 * else scratch that hd_cpu_nn_finish converts into out and frees. */
float *hd_cpu_nn_outbuf_f32(hd_ctx *ctx, hd_tensor *out);
double *hd_cpu_nn_outbuf_f64(hd_ctx *ctx, hd_tensor *out);
void hd_cpu_nn_finish_f32(hd_ctx *ctx, hd_tensor *out, float *buf);
void hd_cpu_nn_finish_f64(hd_ctx *ctx, hd_tensor *out, double *buf);

/* cpu_conv.c */
hd_status hd_cpu_conv2d(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in, int nin,
                        const hd_attrs *attrs);
/* cpu_attention.c: attention (q, k, v[, mask]); attrs as hd_ops.def says. */
hd_status hd_cpu_attention(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in, int nin,
                           const hd_attrs *attrs);
/* attention_bwd (q, k, v, y, g[, mask]): f32 and f64 (cpu_grad.c's dispatch) */
hd_status hd_cpu_attention_bwd(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in, int nin,
                               const hd_attrs *attrs);
hd_status hd_cpu_pool2d(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *in,
                        const hd_attrs *attrs);

#endif
