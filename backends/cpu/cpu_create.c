/* Creation kernels: constant fills, ranges, identity and random draws. The
 * output is a fresh contiguous tensor of the plan's shape and dtype. */
#include "cpu_kernels.h"
#include "../../runtime/hd_rng.h"

#include <math.h>
#include <string.h>

/* Random draws are split into chunks of this many elements across threads. */
#define RNG_CHUNK 4096

/* full: store the value once (converted as hd_dtype_store converts), then
 * double the filled prefix with memcpy. */
static void cpu_full(hd_tensor *out, double v) {
    char *p = hd_tensor_data(out);
    size_t es = (size_t)hd_dtype_size(out->dtype), total = hd_tensor_nbytes(out);
    hd_dtype_store(out->dtype, p, 0, v);
    for (size_t have = es; have < total;) {
        size_t n = HD_MIN(have, total - have);
        memcpy(p + have, p, n);
        have += n;
    }
}

/* Integer arange with integral bounds is done in int64 so that it stays
 * exact past 2^53; the check keeps start + i * step far from overflow. */
static int cpu_arange_exact(hd_dtype dt, double start, double step, int64_t n) {
    return !hd_dtype_is_float(dt) && start == floor(start) && step == floor(step) &&
           fabs(start) + (double)n * fabs(step) < 4611686018427387904.0; /* 2^62 */
}

/* arange: element i = start + i * step (in double, then stored). */
static void cpu_arange(hd_tensor *out, double start, double step) {
    void *p = hd_tensor_data(out);
    int64_t n = out->numel;
    hd_dtype dt = out->dtype;
    if (!cpu_arange_exact(dt, start, step, n)) {
        for (int64_t i = 0; i < n; i++) hd_dtype_store(dt, p, i, start + (double)i * step);
        return;
    }
    int64_t a = (int64_t)start, s = (int64_t)step;
    if (dt == HD_I64) {
        int64_t *q = p;
        for (int64_t i = 0; i < n; i++) q[i] = a + i * s;
        return;
    }
    for (int64_t i = 0; i < n; i++) hd_dtype_store(dt, p, i, (double)(a + i * s));
}

/* linspace as torch computes it: the first half steps up from start, the
 * second half steps down from end, so both ends are exact. */
static void cpu_linspace(hd_tensor *out, double a, double b) {
    void *p = hd_tensor_data(out);
    int64_t n = out->numel, half = n / 2;
    if (n == 1) {
        hd_dtype_store(out->dtype, p, 0, a);
        return;
    }
    double step = (b - a) / (double)(n - 1);
    for (int64_t i = 0; i < n; i++) {
        double v = i < half ? a + step * (double)i : b - step * (double)(n - 1 - i);
        hd_dtype_store(out->dtype, p, i, v);
    }
}

/* eye: zeros with ones on the main diagonal of a 2-D output. */
static void cpu_eye(hd_tensor *out) {
    char *p = hd_tensor_data(out);
    memset(p, 0, hd_tensor_nbytes(out));
    int64_t m = HD_MIN(out->shape[0], out->shape[1]);
    for (int64_t i = 0; i < m; i++)
        hd_dtype_store(out->dtype, p, i * out->strides[0] + i * out->strides[1], 1.0);
}

/* One random draw: every element depends only on (key, base, i). */
typedef struct {
    int normal; /* randn, else rand */
    hd_dtype dt;
    uint64_t key, base;
    double mean, std;
    void *p;
} cpu_rng_job;

/* f16/bf16 take the f32 uniform rounded to nearest; the few values that
 * round up to 1 become the largest value below 1, so rand stays in [0, 1). */
static uint16_t cpu_rng_half_uniform(hd_dtype dt, float u) {
    if (dt == HD_F16) {
        uint16_t h = hd_f32_to_f16(u);
        return h == 0x3c00 ? 0x3bff : h;
    }
    uint16_t h = hd_f32_to_bf16(u);
    return h == 0x3f80 ? 0x3f7f : h;
}

/* Element i of the draw, given the pair (2j, 2j+1) it belongs to. */
static void cpu_rng_store(const cpu_rng_job *j, int64_t i, double v) {
    if (j->dt == HD_F64) {
        ((double *)j->p)[i] = j->normal ? j->mean + j->std * v : v;
        return;
    }
    float f = j->normal ? (float)(j->mean + j->std * (double)(float)v) : (float)v;
    if (j->dt == HD_F32)
        ((float *)j->p)[i] = f;
    else if (!j->normal)
        ((uint16_t *)j->p)[i] = cpu_rng_half_uniform(j->dt, f);
    else
        ((uint16_t *)j->p)[i] = j->dt == HD_F16 ? hd_f32_to_f16(f) : hd_f32_to_bf16(f);
}

/* Fill elements [i0, i1) of the draw (i0 even), one Philox block per pair. */
static void cpu_rng_chunk(const cpu_rng_job *j, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i += 2) {
        double v[2];
        if (j->normal) {
            hd_rng_normal_pair_f64(j->key, j->base, i / 2, v);
        } else if (j->dt == HD_F64) {
            hd_rng_uniform_pair_f64(j->key, j->base, i / 2, v);
        } else {
            float u[2];
            hd_rng_uniform_pair_f32(j->key, j->base, i / 2, u);
            v[0] = u[0];
            v[1] = u[1];
        }
        cpu_rng_store(j, i, v[0]);
        if (i + 1 < i1) cpu_rng_store(j, i + 1, v[1]);
    }
}

/* rand / randn (scalar[0] mean, scalar[1] std): reserve the counter blocks
 * once, then fill chunks in parallel; the numbers do not depend on the
 * number of threads. */
static hd_status cpu_random(hd_ctx *ctx, hd_op op, hd_tensor *out, const hd_attrs *attrs) {
    if (!hd_dtype_is_float(out->dtype))
        return hd_error(ctx, HD_ERR_RUNTIME, "%s needs a float dtype, got %s", hd_op_name(op),
                        hd_dtype_name(out->dtype));
    cpu_rng_job j = {op == HD_OP_RANDN, out->dtype, ctx->rng_seed, 0, 0, 1, hd_tensor_data(out)};
    if (j.normal) {
        j.mean = attrs->scalar[0];
        j.std = attrs->scalar[1];
        if (!(j.std >= 0))
            return hd_error(ctx, HD_ERR_RUNTIME, "randn: std must be >= 0, got %g", j.std);
    }
    int64_t n = out->numel, nchunk = (n + RNG_CHUNK - 1) / RNG_CHUNK;
    j.base = hd_rng_reserve(ctx, n);
    int par = n >= CPU_PAR_MIN && ctx->nthreads > 1;
#pragma omp parallel for num_threads(ctx->nthreads) if (par) schedule(static)
    for (int64_t c = 0; c < nchunk; c++)
        cpu_rng_chunk(&j, c * RNG_CHUNK, HD_MIN(n, (c + 1) * RNG_CHUNK));
    return HD_OK;
}

hd_status hd_cpu_create(hd_ctx *ctx, hd_op op, hd_tensor *out, hd_tensor *const *in, int nin,
                        const hd_attrs *attrs) {
    HD_UNUSED(in);
    HD_UNUSED(nin);
    if (!hd_tensor_is_contiguous(out))
        return hd_error(ctx, HD_ERR_RUNTIME, "%s: the output must be contiguous", hd_op_name(op));
    switch (op) {
    case HD_OP_FULL: cpu_full(out, attrs->scalar[0]); return HD_OK;
    case HD_OP_ARANGE: cpu_arange(out, attrs->scalar[0], attrs->scalar[2]); return HD_OK;
    case HD_OP_LINSPACE: cpu_linspace(out, attrs->scalar[0], attrs->scalar[1]); return HD_OK;
    case HD_OP_EYE:
        if (out->ndim != 2) return hd_error(ctx, HD_ERR_RUNTIME, "eye: output must have 2 dims");
        cpu_eye(out);
        return HD_OK;
    case HD_OP_RAND:
    case HD_OP_RANDN: return cpu_random(ctx, op, out, attrs);
    default:
        return hd_error(ctx, HD_ERR_RUNTIME, "%s is not a cpu creation kernel", hd_op_name(op));
    }
}

int hd_cpu_create_supports(hd_op op, hd_dtype dt) {
    if ((unsigned)dt >= HD_DTYPE_COUNT) return 0;
    switch (op) {
    case HD_OP_FULL:
    case HD_OP_ARANGE:
    case HD_OP_LINSPACE:
    case HD_OP_EYE: return 1;
    case HD_OP_RAND:
    case HD_OP_RANDN: return hd_dtype_is_float(dt);
    default: return 0;
    }
}
