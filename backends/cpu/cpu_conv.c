/* CPU conv2d (im2col + gemm per image and group; a direct loop for
 * depthwise groups) and max/avg 2-d pooling. Float dtypes only, computed in
 * the working type of cpu_nn.h. */
#include "cpu_blas.h"
#include "cpu_nn.h"

#include <limits.h>
#include <math.h>

/* Geometry of one conv2d: x [n, c, h, w], weight [o, cg, kh, kw], output
 * [n, o, oh, ow]; k = cg * kh * kw (gemm depth), p = oh * ow. */
typedef struct {
    int64_t n, c, h, w, o, kh, kw, oh, ow;
    int64_t sh, sw, ph, pw, dh, dw, groups, cg, og, k, p;
} conv_geom;

/* A 1x1 kernel with unit stride and no padding reads the input as it is. */
static int conv_is_pointwise(const conv_geom *g) {
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

/* Geometry of one 2-d pool over planes = n * c planes of [h, w]. */
typedef struct {
    int64_t planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
} pool_geom;

/* The outputs q in [*lo, *hi) of a row of n whose input column q * stride +
 * off lies inside [0, size); the others read padding. */
static void conv_valid_range(int64_t off, int64_t stride, int64_t size, int64_t n, int64_t *lo,
                             int64_t *hi) {
    int64_t l = off >= 0 ? 0 : (-off + stride - 1) / stride;
    int64_t h = size - 1 - off < 0 ? 0 : (size - 1 - off) / stride + 1;
    *lo = HD_MIN(l, n);
    *hi = HD_MAX(HD_MIN(h, n), *lo);
}

#define NN_T   float
#define NN_S   f32
#define NN_F64 0
#include "cpu_conv_tmpl.h"
#undef NN_T
#undef NN_S
#undef NN_F64

#define NN_T   double
#define NN_S   f64
#define NN_F64 1
#include "cpu_conv_tmpl.h"
#undef NN_T
#undef NN_S
#undef NN_F64

/* The shape rule has validated the attributes; 0 dilation or groups
 * mean 1. */
static void conv_geom_make(const hd_tensor *x, const hd_tensor *w, const hd_tensor *out,
                           const hd_attrs *attrs, conv_geom *g) {
    g->n = x->shape[0], g->c = x->shape[1], g->h = x->shape[2], g->w = x->shape[3];
    g->o = w->shape[0], g->cg = w->shape[1], g->kh = w->shape[2], g->kw = w->shape[3];
    g->oh = out->shape[2], g->ow = out->shape[3];
    g->sh = attrs->ints[0], g->sw = attrs->ints[1], g->ph = attrs->ints[2], g->pw = attrs->ints[3];
    g->dh = attrs->ints[4] ? attrs->ints[4] : 1, g->dw = attrs->ints[5] ? attrs->ints[5] : 1;
    g->groups = attrs->ints[6] ? attrs->ints[6] : 1;
    g->og = g->o / g->groups;
    g->k = g->cg * g->kh * g->kw;
    g->p = g->oh * g->ow;
}

hd_status hd_cpu_conv2d(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in, int nin,
                        const hd_attrs *attrs) {
    conv_geom g;
    conv_geom_make(in[0], in[1], out, attrs, &g);
    char sx[128], sw[128];
    if (g.og > INT_MAX || g.p > INT_MAX || g.k > INT_MAX || g.k * g.p > INT64_MAX / 8)
        return hd_error(ctx, HD_ERR_RUNTIME, "conv2d: input %s with weight %s is too large",
                        hd_shape_str(in[0]->shape, 4, sx, sizeof sx),
                        hd_shape_str(in[1]->shape, 4, sw, sizeof sw));
    if (out->dtype == HD_F64) return conv_run_f64(ctx, out, in, nin, &g);
    return conv_run_f32(ctx, out, in, nin, &g);
}

hd_status hd_cpu_pool2d(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *in,
                        const hd_attrs *attrs) {
    pool_geom g;
    g.planes = in->shape[0] * in->shape[1], g.h = in->shape[2], g.w = in->shape[3];
    g.oh = out->shape[2], g.ow = out->shape[3];
    g.kh = attrs->ints[0], g.kw = attrs->ints[1];
    g.sh = attrs->ints[2] ? attrs->ints[2] : g.kh, g.sw = attrs->ints[3] ? attrs->ints[3] : g.kw;
    g.ph = attrs->ints[4], g.pw = attrs->ints[5];
    int max = op == HD_OP_MAX_POOL2D;
    if (out->dtype == HD_F64) return pool_run_f64(ctx, out, in, &g, max);
    return pool_run_f32(ctx, out, in, &g, max);
}
