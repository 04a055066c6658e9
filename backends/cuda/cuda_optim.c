/* A whole Adam update of a parameter as one kernel (hd_backend.adam).
 *
 * stdlib/optim.hodu's Adam.step runs 14 ops per parameter (each a launch
 * and a pass over memory on this backend); this kernel makes them one,
 * rounding every intermediate result to the parameter's dtype as those ops
 * do (NVRTC compiles with --fmad=false: no multiply-add is contracted), so
 * its bits are the ops' bits. m and v are new tensors, as the ops' results
 * are (a moment the caller kept keeps its values); p is written in place
 * with its write count moved on, as p[...] = ... does. */
#if HODU_HAVE_CUDA
#include "cuda_int.h"
#include "hd_backend.h"
#include "hd_profile.h"

/* clang-format off */
static const char adam_src[] =
    /* T's storage type S, compute type C, and the rounding of a C to T */
    "template <int K> struct a_ty;\n"
    "template <> struct a_ty<0> { typedef float S; typedef float C;\n"
    "  static __device__ float ld(float x) { return x; }\n"
    "  static __device__ float st(float x) { return x; } };\n"
    "template <> struct a_ty<1> { typedef double S; typedef double C;\n"
    "  static __device__ double ld(double x) { return x; }\n"
    "  static __device__ double st(double x) { return x; } };\n"
    "template <> struct a_ty<2> { typedef u16 S; typedef float C;\n"
    "  static __device__ float ld(u16 x) { return ld_f16(x); }\n"
    "  static __device__ u16 st(float x) { return st_f16(x); } };\n"
    "template <> struct a_ty<3> { typedef u16 S; typedef float C;\n"
    "  static __device__ float ld(u16 x) { return ld_bf16(x); }\n"
    "  static __device__ u16 st(float x) { return st_bf16(x); } };\n"
    "template <int K> __device__ void adam_t(typename a_ty<K>::S *p,\n"
    "    const typename a_ty<K>::S *g, const typename a_ty<K>::S *m0,\n"
    "    const typename a_ty<K>::S *v0, typename a_ty<K>::S *m, typename a_ty<K>::S *v,\n"
    "    long long n, double c1d, double c2d, double b1d, double b2d, double ssd,\n"
    "    double bc2d, double epsd) {\n"
    "  typedef a_ty<K> A; typedef typename A::C C;\n"
    "  C c1 = (C)c1d, c2 = (C)c2d, b1 = (C)b1d, b2 = (C)b2d, ss = (C)ssd, bc2 = (C)bc2d;\n"
    "  C eps = (C)epsd;\n"
    "#define R(x) A::ld(A::st(x))\n"
    "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
    "       i += (long long)gridDim.x * blockDim.x) {\n"
    "    C gi = A::ld(g[i]);\n"
    "    C mi = R(c1 * gi), vi = R(R(c2 * gi) * gi);\n"
    "    if (m0) {\n"
    "      mi = R(R(b1 * A::ld(m0[i])) + mi);\n"
    "      vi = R(R(b2 * A::ld(v0[i])) + vi);\n"
    "    }\n"
    "    C den = R(R(R(h_sqrt(vi)) / bc2) + eps);\n"
    "    C upd = R(R(ss * mi) / den);\n"
    "    m[i] = A::st(mi);\n"
    "    v[i] = A::st(vi);\n"
    "    p[i] = A::st(A::ld(p[i]) - upd);\n"
    "  }\n"
    "#undef R\n"
    "}\n"
    "extern \"C\" __global__ void k_adam_f32(float *p, const float *g, const float *m0,\n"
    "    const float *v0, float *m, float *v, long long n, double c1, double c2, double b1,\n"
    "    double b2, double ss, double bc2, double eps) {\n"
    "  adam_t<0>(p, g, m0, v0, m, v, n, c1, c2, b1, b2, ss, bc2, eps); }\n"
    "extern \"C\" __global__ void k_adam_f64(double *p, const double *g, const double *m0,\n"
    "    const double *v0, double *m, double *v, long long n, double c1, double c2, double b1,\n"
    "    double b2, double ss, double bc2, double eps) {\n"
    "  adam_t<1>(p, g, m0, v0, m, v, n, c1, c2, b1, b2, ss, bc2, eps); }\n"
    "extern \"C\" __global__ void k_adam_f16(u16 *p, const u16 *g, const u16 *m0,\n"
    "    const u16 *v0, u16 *m, u16 *v, long long n, double c1, double c2, double b1,\n"
    "    double b2, double ss, double bc2, double eps) {\n"
    "  adam_t<2>(p, g, m0, v0, m, v, n, c1, c2, b1, b2, ss, bc2, eps); }\n"
    "extern \"C\" __global__ void k_adam_bf16(u16 *p, const u16 *g, const u16 *m0,\n"
    "    const u16 *v0, u16 *m, u16 *v, long long n, double c1, double c2, double b1,\n"
    "    double b2, double ss, double bc2, double eps) {\n"
    "  adam_t<3>(p, g, m0, v0, m, v, n, c1, c2, b1, b2, ss, bc2, eps); }\n";
/* clang-format on */

void hd_cuda_optim_module(hd_cuda_src *s) {
    hd_cuda_src_printf(s, "%s%s", hd_cuda_prelude(), adam_src);
}

hd_status hd_cuda_adam(hd_ctx *ctx, const hd_adam *a) {
    int device = a->p->storage->device;
    hd_dtype dt = a->p->dtype;
    hd_cuda_dev *d = hd_cuda_dev_get(ctx, device);
    CUfunction f;
    if (!d || hd_cuda_kernel(ctx, d, HD_OP_ADD, dt, dt, HD_CUDA_K_ADAM, &f)) return ctx->status;
    void *p = hd_tensor_data(a->p), *g = hd_tensor_data(a->g), *m = hd_tensor_data(a->m);
    void *v = hd_tensor_data(a->v);
    void *m0 = a->m0 ? hd_tensor_data(a->m0) : NULL, *v0 = a->v0 ? hd_tensor_data(a->v0) : NULL;
    long long n = a->p->numel;
    double c1 = a->c1, c2 = a->c2, b1 = a->b1, b2 = a->b2, ss = a->ss, bc2 = a->bc2;
    double eps = a->eps;
    void *args[] = {&p, &g, &m0, &v0, &m, &v, &n, &c1, &c2, &b1, &b2, &ss, &bc2, &eps};
    void *timed = ctx->prof ? hd_cuda_prof_begin(ctx, d, device) : NULL;
    hd_status st = hd_cuda_launch(ctx, d, f, n, args);
    hd_cuda_prof_end(ctx, d, timed, HD_PROF_ADAM);
    return st;
}
#endif
