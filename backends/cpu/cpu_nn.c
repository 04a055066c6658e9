/* CPU nn kernels: softmax, log_softmax, cumsum, cumprod, cross_entropy,
 * mse, dropout and layer_norm here; conv2d and the pools in cpu_conv.c. Float dtypes only:
 * f32 and f64 natively, f16 and bf16 through f32 scratch (cpu_nn.h). */
#include "cpu_nn.h"
#include "hd_dist.h"
#include "hd_rng.h"

#include <math.h>
#include <string.h>

/* hd_f16_to_f32 without branches, so that conversion loops vectorize:
 * the half's exponent and mantissa shifted into float position, times
 * 2^112 to rebias (exact, subnormals included); Inf and NaN keep an
 * all-ones exponent. Bit-identical to hd_f16_to_f32 for all 65536 inputs. */
static inline float nn_f16_to_f32(uint16_t h) {
    uint32_t em = (uint32_t)(h & 0x7fffu) << 13, sign = (uint32_t)(h & 0x8000u) << 16, bits;
    float f;
    memcpy(&f, &em, 4);
    f *= 0x1p112f;
    memcpy(&bits, &f, 4);
    uint32_t special = 0u - (uint32_t)(em >= (0x7c00u << 13));
    bits = (bits & ~special) | ((em | 0x7f800000u) & special) | sign;
    memcpy(&f, &bits, 4);
    return f;
}

/* hd_f32_to_f16 and hd_f32_to_bf16 without branches (selects only), so
 * that conversion loops vectorize. f16: round to nearest even by adding
 * 0xfff plus the kept lsb; half subnormals by adding 0.5f, which makes the
 * FPU round at the subnormal's last place. Bit-identical to the hd_dtype.h
 * conversions for all 2^32 inputs. */
static inline uint16_t nn_f32_to_f16(float f) {
    uint32_t x, sb;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    uint32_t rn = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
    float sf;
    memcpy(&sf, &a, 4);
    sf += 0.5f;
    memcpy(&sb, &sf, 4);
    /* all-ones masks: half subnormal, overflow or Inf, NaN */
    uint32_t sub = 0u - (uint32_t)(a < 0x38800000u), big = 0u - (uint32_t)(a >= 0x477ff000u);
    uint32_t nan = 0u - (uint32_t)(a > 0x7f800000u);
    uint32_t r = ((sb - 0x3f000000u) & sub) | (rn & ~sub);
    r = (0x7c00u & big) | (r & ~big);
    r = ((0x7e00u | ((a >> 13) & 0x3ffu)) & nan) | (r & ~nan);
    return (uint16_t)(r | sign);
}

static inline uint16_t nn_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t nan = 0u - (uint32_t)((x & 0x7fffffffu) > 0x7f800000u);
    return (uint16_t)((((x >> 16) | 0x40u) & nan) | (r & ~nan));
}

/* expf for the softmax family, written so that loops over it vectorize:
 * no calls and no float compares (which -ftrapping-math keeps as
 * branches), only integer masks. Cody-Waite reduction x = n ln2 + r with
 * |r| <= ln2 / 2, Cephes' degree-6 polynomial for e^r, 2^n from exponent
 * bits. Within 1 ulp of exp for x in [-87.33, 88.37]; 0 below (where exp
 * is a subnormal), 2^127 * e^r above; NaN stays NaN. */
static inline float nn_expf(float x) {
    int32_t ix, lo = -1028740017 /* bits of -87.33654f */, hi = 0x42b0c0a5 /* 88.37626f */;
    memcpy(&ix, &x, 4);
    int32_t under = -(int32_t)((ix < 0) & (ix > lo)); /* also -inf and negative NaNs */
    int32_t over = -(int32_t)(ix > hi);               /* also +inf and positive NaNs */
    int32_t nan = -(int32_t)((ix & 0x7fffffff) > 0x7f800000);
    int32_t cb = (ix & ~under & ~over) | (lo & under) | (hi & over);
    float xc, t, r, p, s, y;
    memcpy(&xc, &cb, 4);
    t = xc * 1.44269504088896341f + 12582912.0f; /* n + 1.5 * 2^23: n in the low bits */
    float n = t - 12582912.0f;
    r = xc - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t tb, sb;
    memcpy(&tb, &t, 4);
    sb = (tb - 0x4b400000u + 127u) << 23;
    memcpy(&s, &sb, 4);
    y = p * s;
    int32_t yb;
    memcpy(&yb, &y, 4);
    yb = (yb & ~under & ~nan) | (ix & nan);
    memcpy(&y, &yb, 4);
    return y;
}

/* Uniforms of elements 2j and 2j + 1 of the draw, from one Philox block. */
static void nn_uniform_pair(uint64_t key, uint64_t base, int64_t j, float u[2]) {
    hd_rng_uniform_pair_f32(key, base, j, u);
}

#define NN_T      float
#define NN_S      f32
#define NN_DT     HD_F32
#define NN_EXP(x) nn_expf(x)
#define NN_LOG(x) logf(x)
#include "cpu_nn_tmpl.h"
#undef NN_T
#undef NN_S
#undef NN_DT
#undef NN_EXP
#undef NN_LOG

#define NN_T      double
#define NN_S      f64
#define NN_DT     HD_F64
#define NN_EXP(x) exp(x)
#define NN_LOG(x) log(x)
#include "cpu_nn_tmpl.h"
#undef NN_T
#undef NN_S
#undef NN_DT
#undef NN_EXP
#undef NN_LOG

/* Call the f64 or the f32 instance of a W-generic function. */
#define NN_CALL(f64, name, ...) ((f64) ? name##_f64(__VA_ARGS__) : name##_f32(__VA_ARGS__))

/* ---- cross_entropy ---- */

/* Mean over the batch of -log_softmax(logits)[label]. Labels are checked
 * first, so an error leaves nothing half done; rows are summed in order
 * so the result does not depend on the thread count. */
static hd_status nn_cross_entropy(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in) {
    const hd_tensor *x = in[0], *y = in[1];
    if (y->dtype != HD_I64)
        return hd_error(ctx, HD_ERR_RUNTIME, "cross_entropy: labels must be i64, got %s",
                        hd_dtype_name(y->dtype));
    int64_t c = x->shape[x->ndim - 1], rows = x->ndim == 2 ? x->shape[0] : 1;
    const int64_t *lab = (const int64_t *)y->storage->data + y->offset;
    int64_t ls = y->ndim ? y->strides[0] : 0;
    for (int64_t r = 0; r < rows; r++)
        if (lab[r * ls] < 0 || lab[r * ls] >= c)
            return hd_error(ctx, HD_ERR_RUNTIME,
                            "cross_entropy: label %lld (sample %lld) is out of range for %lld "
                            "classes",
                            (long long)lab[r * ls], (long long)r, (long long)c);
    double mean = NAN;
    if (rows > 0) {
        double *loss = hd_ctx_alloc(ctx, (size_t)rows * sizeof *loss);
        if (!loss) return ctx->status;
        hd_status st = NN_CALL(x->dtype == HD_F64, nn_ce_rows, ctx, x, lab, ls, rows, c, loss);
        double s = 0;
        for (int64_t r = 0; r < rows; r++) s += loss[r];
        hd_ctx_free(ctx, loss, (size_t)rows * sizeof *loss);
        if (st) return st;
        mean = s / (double)rows;
    }
    hd_dtype_store(out->dtype, hd_tensor_data(out), 0, mean);
    return HD_OK;
}

/* ---- mse ---- */

/* t seen with the broadcast shape (shape, nd): a stack copy, no reference. */
static void nn_broadcast_view(const hd_tensor *t, const int64_t *shape, int nd, hd_tensor *v) {
    *v = *t;
    hd_broadcast_strides(t, shape, nd, v->strides);
    v->ndim = nd;
    if (nd) memcpy(v->shape, shape, (size_t)nd * sizeof *shape);
    v->numel = hd_shape_numel(shape, nd);
}

#define NN_CHUNK 256

/* Sum of (a - b)^2 over flat elements [i0, i0 + n) of two same-shape views. */
static double nn_sqdiff_sum(const hd_tensor *a, const hd_tensor *b, int64_t i0, int64_t n) {
    double s = 0, ba[NN_CHUNK], bb[NN_CHUNK];
    for (int64_t i = 0; i < n; i += NN_CHUNK) {
        int64_t m = HD_MIN(NN_CHUNK, n - i);
        hd_cpu_nn_read_f64(a, i0 + i, m, ba);
        hd_cpu_nn_read_f64(b, i0 + i, m, bb);
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < m; j++) s += (ba[j] - bb[j]) * (ba[j] - bb[j]);
    }
    return s;
}

/* Mean of squared differences over the broadcast shape, accumulated in
 * double in fixed blocks summed in order (thread-count independent).
 * Zero elements give NaN, as torch's mean. */
static hd_status nn_mse(hd_ctx *ctx, hd_tensor *out, hd_tensor *const *in) {
    int64_t shape[HD_MAX_DIMS];
    int nd;
    if (hd_broadcast_shapes(ctx, in[0]->shape, in[0]->ndim, in[1]->shape, in[1]->ndim, shape, &nd))
        return ctx->status;
    hd_tensor a, b;
    nn_broadcast_view(in[0], shape, nd, &a);
    nn_broadcast_view(in[1], shape, nd, &b);
    int64_t n = a.numel, nblocks = (n + NN_BLOCK - 1) / NN_BLOCK;
    double mean = NAN;
    if (n > 0) {
        double *part = hd_ctx_alloc(ctx, (size_t)nblocks * sizeof *part);
        if (!part) return ctx->status;
#pragma omp parallel for num_threads(ctx->nthreads) if (n >= CPU_PAR_MIN) schedule(static)
        for (int64_t k = 0; k < nblocks; k++)
            part[k] = nn_sqdiff_sum(&a, &b, k * NN_BLOCK, HD_MIN(NN_BLOCK, n - k * NN_BLOCK));
        double s = 0;
        for (int64_t k = 0; k < nblocks; k++) s += part[k];
        hd_ctx_free(ctx, part, (size_t)nblocks * sizeof *part);
        mean = s / (double)n;
    }
    hd_dtype_store(out->dtype, hd_tensor_data(out), 0, mean);
    return HD_OK;
}

/* ---- dispatch ---- */

/* Plans cast every float input to the output's dtype; anything else means
 * the kernel was reached without one. */
static hd_status nn_check_inputs(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in,
                                 int nin) {
    for (int i = 0; i < nin; i++) {
        if (op == HD_OP_CROSS_ENTROPY && i == 1) continue;
        if (in[i]->dtype != out->dtype || !hd_tensor_is_cpu(in[i]))
            return hd_error(ctx, HD_ERR_RUNTIME, "%s: cpu kernel got a %s input for a %s result",
                            hd_op_name(op), hd_dtype_name(in[i]->dtype), hd_dtype_name(out->dtype));
    }
    return HD_OK;
}

/* all_reduce: x's values into out (contiguous), then reduced there over
 * every rank of the run (runtime/hd_dist.c). */
static hd_status cpu_all_reduce(hd_ctx *ctx, hd_tensor *out, const hd_tensor *x,
                                const hd_attrs *attrs) {
    if (out->storage != x->storage || out->offset != x->offset || !hd_tensor_is_contiguous(x)) {
        int64_t ostr[HD_MAX_DIMS], s = 1;
        for (int d = x->ndim - 1; d >= 0; d--) ostr[d] = s, s *= x->shape[d];
        hd_cpu_copy_strided(1, hd_dtype_size(x->dtype), x->ndim, x->shape, hd_tensor_data(out),
                            ostr, hd_tensor_data(x), x->strides);
    }
    char err[512];
    if (hd_dist_all_reduce_any(ctx, hd_tensor_data(out), out->numel, out->dtype,
                               (hd_dist_op)attrs->ints[0], (int)attrs->ints[1], err, sizeof err))
        return hd_error(ctx, HD_ERR_RUNTIME, "%s", err);
    return HD_OK;
}

hd_status hd_cpu_nn(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                    const hd_attrs *attrs) {
    if (op == HD_OP_ALL_REDUCE) return cpu_all_reduce(ctx, out, in[0], attrs);
    if (!hd_cpu_nn_supports(op, out->dtype))
        return hd_error(ctx, HD_ERR_RUNTIME, "%s is not supported for %s tensors on cpu",
                        hd_op_name(op), hd_dtype_name(out->dtype));
    if (nn_check_inputs(ctx, op, out, in, nin)) return ctx->status;
    int f64 = out->dtype == HD_F64;
    switch (op) {
    case HD_OP_SOFTMAX:
    case HD_OP_LOG_SOFTMAX: {
        int axis;
        if (hd_norm_axis(ctx, attrs->ints[0], in[0]->ndim, &axis)) return ctx->status;
        return NN_CALL(f64, nn_softmax, ctx, out, in[0], axis, op == HD_OP_LOG_SOFTMAX);
    }
    case HD_OP_CUMSUM:
    case HD_OP_CUMPROD:
    case HD_OP_CUMPROD_BWD: {
        int axis;
        if (hd_norm_axis(ctx, attrs->ints[0], in[0]->ndim, &axis)) return ctx->status;
        return NN_CALL(f64, nn_scan, ctx, op, out, in, axis, op == HD_OP_CUMSUM && attrs->ints[1]);
    }
    case HD_OP_CROSS_ENTROPY: return nn_cross_entropy(ctx, out, in);
    case HD_OP_MSE: return nn_mse(ctx, out, in);
    case HD_OP_CONV2D: return hd_cpu_conv2d(ctx, out, in, nin, attrs);
    case HD_OP_ATTENTION: return hd_cpu_attention(ctx, out, in, nin, attrs);
    case HD_OP_MAX_POOL2D:
    case HD_OP_AVG_POOL2D: return hd_cpu_pool2d(ctx, op, out, in[0], attrs);
    case HD_OP_DROPOUT:
        return NN_CALL(f64, nn_dropout, ctx, out, in[0], attrs->scalar[0], attrs->ints[0] != 0);
    case HD_OP_LAYER_NORM: {
        int64_t k = attrs->ints[0] ? attrs->ints[0] : 1;
        double eps = hd_layer_norm_eps(attrs);
        return NN_CALL(f64, nn_layer_norm, ctx, out, in, nin, k, eps);
    }
    default: return hd_error(ctx, HD_ERR_RUNTIME, "%s is not an nn op", hd_op_name(op));
    }
}

int hd_cpu_nn_supports(hd_op op, hd_dtype dt) {
    if ((unsigned)op >= HD_OP_COUNT || hd_op_infos[op].kind != HD_KIND_NN) return 0;
    if (op == HD_OP_ALL_REDUCE) return 1;
    return dt == HD_F16 || dt == HD_BF16 || dt == HD_F32 || dt == HD_F64;
}
