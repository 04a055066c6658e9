/* The f32 vector math (backends/cpu/hd_vmath.h, docs/vmath.md) against f64
 * libm:
 * - the maximum error in ulps over a dense sweep of every float (every
 *   97th representation, both signs, all binades; HODU_TEST_EXHAUSTIVE=1:
 *   all 2^32) stays within each function's documented bound, and results
 *   in the subnormals within theirs (in units of the smallest subnormal);
 * - special values: 0, -0, subnormal inputs, inf, -inf, NaN, the overflow
 *   and underflow thresholds of exp, saturation of tanh and sigmoid, log of
 *   0, negatives and inf;
 * - the eager kernels (hd_op_run, f32, and f16/bf16 which compute in f32)
 *   give exactly these functions' bits. The llvm compiler's agreement with
 *   the eager kernels is tests/unit/test_llvm.c's. */
#include "hd_test.h"
#include "hd_op.h"
#include "hd_vmath.h"

#include <float.h>
#include <stdint.h>

static hd_ctx g_ctx;
#define CTX (&g_ctx)

/* ---- references in double ---- */

static double r_exp(double x) {
    return exp(x);
}
static double r_log(double x) {
    return log(x);
}
static double r_tanh(double x) {
    return tanh(x);
}
static double r_sigmoid(double x) {
    return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
}
static double r_silu(double x) {
    return x * r_sigmoid(x);
}
static double r_softplus(double x) {
    return x > 20 ? x : x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}
static double r_gelu(double x) {
    return 0.5 * x * erfc(-x / sqrt(2.0));
}
static double r_erf(double x) {
    return erf(x);
}
static double r_erfc(double x) {
    return erfc(x);
}
static double r_sin(double x) {
    return sin(x);
}
static double r_cos(double x) {
    return cos(x);
}

static float f_exp(float x) {
    return hd_vm_expf(x);
}
static float f_log(float x) {
    return hd_vm_logf(x);
}
static float f_tanh(float x) {
    return hd_vm_tanhf(x);
}
static float f_sigmoid(float x) {
    return hd_vm_sigmoidf(x);
}
static float f_silu(float x) {
    return hd_vm_siluf(x);
}
static float f_softplus(float x) {
    return hd_vm_softplusf(x);
}
static float f_gelu(float x) {
    return hd_vm_geluf(x);
}
static float f_erf(float x) {
    return hd_vm_erff(x);
}
static float f_erfc(float x) {
    return hd_vm_erfcf(x);
}
static float f_sin(float x) {
    return hd_vm_sinf(x);
}
static float f_cos(float x) {
    return hd_vm_cosf(x);
}

typedef struct vm_fn {
    const char *name;
    hd_op op;
    float (*f)(float);
    double (*ref)(double);
    double bound;     /* ulps, where the result is normal */
    double sub_bound; /* units of 2^-149, where the result is subnormal */
    double lo;        /* inputs below lo are not measured (documented there) */
} vm_fn;

/* The bounds of docs/vmath.md (the maximum over all floats, rounded up). */
static const vm_fn fns[] = {
    {"exp", HD_OP_EXP, f_exp, r_exp, 1.02, 0.75, -INFINITY},
    {"log", HD_OP_LOG, f_log, r_log, 0.83, 0, -INFINITY},
    {"tanh", HD_OP_TANH, f_tanh, r_tanh, 2.61, 0, -INFINITY},
    {"sigmoid", HD_OP_SIGMOID, f_sigmoid, r_sigmoid, 2.41, 0.75, -INFINITY},
    /* below -87, exp(x) is subnormal and silu loses precision gradually */
    {"silu", HD_OP_SILU, f_silu, r_silu, 3.40, 0.5, -87.0},
    {"softplus", HD_OP_SOFTPLUS, f_softplus, r_softplus, 2.80, 1.5, -INFINITY},
    {"gelu", HD_OP_GELU, f_gelu, r_gelu, 4.32, 2.45, -INFINITY},
    {"erf", HD_OP_ERF, f_erf, r_erf, 0.98, 0.51, -INFINITY},
    {"erfc", HD_OP_ERFC, f_erfc, r_erfc, 4.37, 2.0, -INFINITY},
    {"sin", HD_OP_SIN, f_sin, r_sin, 0.51, 0.5, -INFINITY},
    {"cos", HD_OP_COS, f_cos, r_cos, 0.54, 0.5, -INFINITY},
};
#define NFN ((int)(sizeof fns / sizeof fns[0]))

static float flt(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* y's error against the exact r, in ulps of r's binade (units of 2^-149 in
 * the subnormals). Infinite or NaN mismatches are 1e30. */
static double ulp_err(float y, double r) {
    if (isnan(r)) return isnan(y) ? 0 : 1e30;
    float rf = (float)r;
    if (isinf(rf) || isnan(y) || isinf(y)) return y == rf ? 0 : 1e30;
    double a = fabs(r);
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    double ulp = a < 0x1p-126 ? 0x1p-149 : ldexp(1.0, e - 24);
    return fabs((double)y - r) / ulp;
}

/* ---- the sweep ---- */

static void test_sweep(const vm_fn *fn, uint64_t step) {
    double worst = 0, worst_sub = 0;
    float at = 0, at_sub = 0;
    long gross = 0;
    for (uint64_t i = 0; i < 0x100000000ull; i += step) {
        float x = flt((uint32_t)i);
        float y = fn->f(x);
        if (isnan(x)) {
            if (!isnan(y)) gross++;
            continue;
        }
        if (x < fn->lo) continue;
        double r = fn->ref((double)x);
        double e = ulp_err(y, r);
        if (e >= 1e30) {
            if (gross++ < 5)
                fprintf(stderr, "%s(%a) = %a, want %a\n", fn->name, (double)x, (double)y, r);
        } else if (fabs(r) < 0x1p-126 && r != 0) {
            if (e > worst_sub) worst_sub = e, at_sub = x;
        } else if (e > worst) {
            worst = e, at = x;
        }
    }
    printf("%-8s max %.3f ulp at %a, subnormal results %.3f at %a\n", fn->name, worst, (double)at,
           worst_sub, (double)at_sub);
    CHECK_MSG(gross == 0, "%s: %ld wrong specials / infinities / NaNs", fn->name, gross);
    CHECK_MSG(worst <= fn->bound, "%s: %.3f ulp at %a > %.2f", fn->name, worst, (double)at,
              fn->bound);
    CHECK_MSG(worst_sub <= fn->sub_bound, "%s: subnormal result off by %.3f at %a", fn->name,
              worst_sub, (double)at_sub);
}

/* ---- special values ---- */

static int same(float a, float b) {
    return (isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b));
}

#define SAME(got, want)                                                                            \
    CHECK_MSG(same(got, want), "%s = %a, want %a", #got, (double)(got), (double)(want))

static void test_specials(void) {
    const float inf = INFINITY, nan = NAN, den = 0x1p-140f;
    /* exp: overflow above log(FLT_MAX) = 88.7228..., underflow to the
     * subnormals from -87.34 and to 0 below -103.97 */
    SAME(hd_vm_expf(0.0f), 1.0f);
    SAME(hd_vm_expf(-0.0f), 1.0f);
    SAME(hd_vm_expf(den), 1.0f);
    SAME(hd_vm_expf(inf), inf);
    SAME(hd_vm_expf(-inf), 0.0f);
    CHECK(isnan(hd_vm_expf(nan)) && isnan(hd_vm_expf(-nan)));
    CHECK(isfinite(hd_vm_expf(88.72283f)) && hd_vm_expf(88.72284f) == inf);
    SAME(hd_vm_expf(100.0f), inf);
    SAME(hd_vm_expf(-104.0f), 0.0f);
    SAME(hd_vm_expf(-1000.0f), 0.0f);
    SAME(hd_vm_expf(-103.9f), 0x1p-149f);
    CHECK(hd_vm_expf(-90.0f) > 0 && hd_vm_expf(-90.0f) < 0x1p-126f); /* subnormal */
    /* log */
    SAME(hd_vm_logf(1.0f), 0.0f);
    SAME(hd_vm_logf(0.0f), -inf);
    SAME(hd_vm_logf(-0.0f), -inf);
    SAME(hd_vm_logf(inf), inf);
    CHECK(isnan(hd_vm_logf(-1.0f)) && isnan(hd_vm_logf(-inf)) && isnan(hd_vm_logf(nan)) &&
          isnan(hd_vm_logf(-den)));
    CHECK(fabs(hd_vm_logf(0x1p-149f) - (-149 * M_LN2)) < 1e-4);
    CHECK(fabs(hd_vm_logf(FLT_MAX) - 88.7228391) < 1e-5);
    /* tanh: odd, saturates at 1 from 9.01 */
    SAME(hd_vm_tanhf(0.0f), 0.0f);
    SAME(hd_vm_tanhf(-0.0f), -0.0f);
    SAME(hd_vm_tanhf(den), den);
    SAME(hd_vm_tanhf(-den), -den);
    SAME(hd_vm_tanhf(9.1f), 1.0f);
    SAME(hd_vm_tanhf(-30.0f), -1.0f);
    SAME(hd_vm_tanhf(inf), 1.0f);
    SAME(hd_vm_tanhf(-inf), -1.0f);
    CHECK(isnan(hd_vm_tanhf(nan)));
    /* sigmoid: 1/2 at 0, 1 above 17, subnormal below -87, 0 below -104 */
    SAME(hd_vm_sigmoidf(0.0f), 0.5f);
    SAME(hd_vm_sigmoidf(-0.0f), 0.5f);
    SAME(hd_vm_sigmoidf(20.0f), 1.0f);
    SAME(hd_vm_sigmoidf(inf), 1.0f);
    SAME(hd_vm_sigmoidf(-inf), 0.0f);
    SAME(hd_vm_sigmoidf(-200.0f), 0.0f);
    CHECK(hd_vm_sigmoidf(-95.0f) > 0 && hd_vm_sigmoidf(-95.0f) < 0x1p-126f);
    CHECK(isnan(hd_vm_sigmoidf(nan)));
    /* silu: x / (1 + exp(-x)) at the ends, as torch (NaN at -inf) */
    SAME(hd_vm_siluf(0.0f), 0.0f);
    SAME(hd_vm_siluf(-0.0f), -0.0f);
    SAME(hd_vm_siluf(inf), inf);
    SAME(hd_vm_siluf(30.0f), 30.0f);
    CHECK(isnan(hd_vm_siluf(nan)) && isnan(hd_vm_siluf(-inf)));
    /* softplus: x above 20, log 2 at 0, exp(x) far below 0 */
    SAME(hd_vm_softplusf(20.5f), 20.5f);
    SAME(hd_vm_softplusf(inf), inf);
    SAME(hd_vm_softplusf(-inf), 0.0f);
    CHECK(fabs(hd_vm_softplusf(0.0f) - M_LN2) < 1e-7);
    SAME(hd_vm_softplusf(-104.0f), 0.0f);
    CHECK(isnan(hd_vm_softplusf(nan)));
    /* gelu: 0 at +-0 (sign kept), x far above 0, -0 far below, NaN at -inf
     * (0.5 x (1 + erf(x / sqrt 2)) is -inf * 0 there, in torch too) */
    SAME(hd_vm_geluf(0.0f), 0.0f);
    SAME(hd_vm_geluf(-0.0f), -0.0f);
    SAME(hd_vm_geluf(10.0f), 10.0f);
    SAME(hd_vm_geluf(-20.0f), -0.0f);
    SAME(hd_vm_geluf(-1e30f), -0.0f);
    SAME(hd_vm_geluf(inf), inf);
    CHECK(isnan(hd_vm_geluf(-inf)) && isnan(hd_vm_geluf(nan)));
    SAME(hd_vm_geluf(den), 0x1p-141f);
    /* erf: odd, 2 x / sqrt(pi) rounded once near 0, +-1 from 3.92 */
    SAME(hd_vm_erff(0.0f), 0.0f);
    SAME(hd_vm_erff(-0.0f), -0.0f);
    SAME(hd_vm_erff(den), (float)(M_2_SQRTPI * den));
    SAME(hd_vm_erff(-0x1p-149f), -0x1p-149f);
    SAME(hd_vm_erff(4.0f), 1.0f);
    SAME(hd_vm_erff(-4.0f), -1.0f);
    SAME(hd_vm_erff(1e30f), 1.0f);
    SAME(hd_vm_erff(inf), 1.0f);
    SAME(hd_vm_erff(-inf), -1.0f);
    CHECK(isnan(hd_vm_erff(nan)) && isnan(hd_vm_erff(-nan)));
    /* erfc: 1 at +-0, 2 far below 0, subnormal from 9.2, 0 above 10.06 */
    SAME(hd_vm_erfcf(0.0f), 1.0f);
    SAME(hd_vm_erfcf(-0.0f), 1.0f);
    SAME(hd_vm_erfcf(den), 1.0f);
    SAME(hd_vm_erfcf(-5.0f), 2.0f);
    SAME(hd_vm_erfcf(-inf), 2.0f);
    SAME(hd_vm_erfcf(10.0f), 0x1p-149f);
    CHECK(hd_vm_erfcf(9.5f) > 0 && hd_vm_erfcf(9.5f) < 0x1p-126f);
    SAME(hd_vm_erfcf(10.1f), 0.0f);
    SAME(hd_vm_erfcf(1e30f), 0.0f);
    SAME(hd_vm_erfcf(inf), 0.0f);
    CHECK(isnan(hd_vm_erfcf(nan)));
}

static void test_specials_trig_pow(void) {
    const float inf = INFINITY, nan = NAN;
    SAME(hd_vm_sinf(0.0f), 0.0f);
    SAME(hd_vm_sinf(-0.0f), -0.0f);
    SAME(hd_vm_sinf(0x1p-149f), 0x1p-149f);
    SAME(hd_vm_sinf(-0x1p-140f), -0x1p-140f);
    SAME(hd_vm_cosf(0.0f), 1.0f);
    SAME(hd_vm_cosf(-0x1p-149f), 1.0f);
    CHECK(isnan(hd_vm_sinf(inf)) && isnan(hd_vm_sinf(-inf)) && isnan(hd_vm_sinf(nan)));
    CHECK(isnan(hd_vm_cosf(inf)) && isnan(hd_vm_cosf(-inf)) && isnan(hd_vm_cosf(nan)));
    /* huge arguments keep full accuracy: the largest float, and the float
     * closest to a multiple of pi / 2 below 2^128 (sin is 2^-28.3 there) */
    CHECK(ulp_err(hd_vm_sinf(FLT_MAX), sin((double)FLT_MAX)) <= 0.51);
    CHECK(ulp_err(hd_vm_cosf(FLT_MAX), cos((double)FLT_MAX)) <= 0.51);
    CHECK(ulp_err(hd_vm_sinf(0x1.921fb6p+0f), sin((double)0x1.921fb6p+0f)) <= 0.51);
    CHECK(ulp_err(hd_vm_cosf(0x1.921fb6p+0f), cos((double)0x1.921fb6p+0f)) <= 0.51);
    /* the table's first entries are 2 / pi's two doubles scaled, as the
     * eager kernels' table-free path assumes, and the two paths agree */
    int bad = 0;
    for (uint32_t e = 0; e < HD_VM_SINCOS_BIG; e++) {
        int k = (e ? (int)e : 1) - 150;
        bad += hd_vm_pio2_tab[e] != ldexp(HD_VM_2OPI_HI, k) ||
               hd_vm_pio2_tab[256 + e] != ldexp(HD_VM_2OPI_LO, k);
    }
    CHECK_MSG(bad == 0, "%d table entries are not 2/pi scaled", bad);
    bad = 0;
    for (uint64_t i = 0; i < (uint64_t)HD_VM_SINCOS_BIG << 23; i += 251)
        for (int q = 0; q < 2; q++) {
            float x = flt((uint32_t)i | (q ? 0x80000000u : 0));
            bad += !same(hd_vm_sincosf_small(x, q), hd_vm_sincosf(x, q));
        }
    CHECK_MSG(bad == 0, "%d sin/cos differ between the table-free and the table path", bad);
    /* pow: C99's special cases, as libm's powf (quiet NaNs) */
    const float v[] = {0.0f,     -0.0f,          1.0f,  -1.0f,     2.0f,       -2.0f,
                       0.5f,     -0.5f,          3.0f,  -3.0f,     2.5f,       -2.5f,
                       inf,      -inf,           nan,   0x1p-149f, -0x1p-149f, 0x1p24f,
                       -0x1p24f, 0x1.000002p24f, 1e30f, -1e30f,    123456.0f,  -7.0f};
    int nv = (int)(sizeof v / sizeof *v);
    bad = 0;
    for (int i = 0; i < nv; i++)
        for (int j = 0; j < nv; j++) {
            float got = hd_vm_powf(v[i], v[j]), want = powf(v[i], v[j]);
            if (!same(got, want) && !(ulp_err(got, pow((double)v[i], (double)v[j])) <= 0.51)) {
                if (bad++ < 5)
                    fprintf(stderr, "pow(%a, %a) = %a, libm %a\n", (double)v[i], (double)v[j],
                            (double)got, (double)want);
            }
        }
    CHECK_MSG(bad == 0, "pow: %d special cases differ from libm", bad);
    /* pow(x, 2) is x * x rounded once, for every kind of x: 1 + 2^-12
     * squares to a midpoint of two floats, which a rounding of the f64
     * path could take the wrong way */
    SAME(hd_vm_powf(1.0f + 0x1p-12f, 2.0f), 1.0f + 0x1p-11f);
    bad = 0;
    for (uint64_t i = 0; i < 0x100000000ull; i += 997) {
        float x = flt((uint32_t)i);
        bad += !same(hd_vm_powf(x, 2.0f), x * x);
    }
    CHECK_MSG(bad == 0, "pow(x, 2): %d differ from x * x", bad);
}

/* pow over pseudo-random pairs: bit patterns, integers, halves, moderate
 * values, bases near 1 (a million pairs; HODU_TEST_EXHAUSTIVE: 100 M). */
static void test_pow_sweep(long n) {
    double worst = 0;
    float wx = 0, wy = 0;
    long gross = 0;
    for (long i = 0; i < n; i++) {
        uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ull + 12345;
        z ^= z >> 29;
        z *= 0xBF58476D1CE4E5B9ull;
        z ^= z >> 32;
        float x = flt((uint32_t)z), y;
        switch ((z >> 40) & 3) {
        case 0: y = flt((uint32_t)(z >> 32)); break;
        case 1: y = (float)((int)((z >> 34) % 41) - 20); break;
        case 2: y = (float)((int)((z >> 34) % 4001) - 2000) / 16.0f; break;
        default: y = flt(((uint32_t)(z >> 32) & 0x807FFFFFu) | 0x3F000000u) * 8.0f; break;
        }
        if ((z >> 50) & 1) x = flt(((uint32_t)z & 0x807FFFFFu) | 0x3F800000u) * 1.5f;
        if (isnan(x) || isnan(y)) continue; /* the special cases are above */
        double e = ulp_err(hd_vm_powf(x, y), pow((double)x, (double)y));
        if (e >= 1e30) {
            if (gross++ < 5)
                fprintf(stderr, "pow(%a, %a) = %a, want %a\n", (double)x, (double)y,
                        (double)hd_vm_powf(x, y), pow((double)x, (double)y));
        } else if (e > worst) {
            worst = e, wx = x, wy = y;
        }
    }
    printf("pow      max %.3f ulp at (%a, %a)\n", worst, (double)wx, (double)wy);
    CHECK_MSG(gross == 0 && worst <= 0.51, "pow: %.3f ulp at (%a, %a), %ld gross", worst,
              (double)wx, (double)wy, gross);
}

/* ---- the eager kernels are these functions ---- */

static void test_eager(void) {
    enum { N = 4099 }; /* not a multiple of the vector width: the tails too */
    int64_t n = N;
    hd_tensor *x = hd_tensor_new(CTX, HD_F32, &n, 1);
    float *xv = x->storage->data;
    for (int i = 0; i < N; i++) /* all binades, both signs, specials */
        xv[i] = flt((uint32_t)((uint64_t)i * 1048573u * 1021u));
    xv[0] = NAN, xv[1] = INFINITY, xv[2] = -INFINITY, xv[3] = -0.0f, xv[4] = 0x1p-149f;
    for (int k = 0; k < NFN; k++) {
        hd_tensor *y = NULL;
        CHECK(hd_op_unary(CTX, fns[k].op, x, &y) == HD_OK);
        int bad = 0;
        for (int i = 0; y && i < N; i++) {
            float want = fns[k].f(xv[i]), got = ((float *)y->storage->data)[i];
            if (!same(got, want) && bad++ < 3)
                fprintf(stderr, "eager %s(%a) = %a, the function gives %a\n", fns[k].name,
                        (double)xv[i], (double)got, (double)want);
        }
        CHECK_MSG(bad == 0, "eager %s: %d elements differ", fns[k].name, bad);
        hd_tensor_unref(y);
        /* f16 and bf16: widened, the f32 function, rounded back */
        const hd_dtype half[2] = {HD_F16, HD_BF16};
        for (int h = 0; h < 2; h++) {
            hd_tensor *xh = NULL, *yh = NULL;
            hd_attrs at;
            memset(&at, 0, sizeof at);
            at.dtype = half[h];
            CHECK(hd_op_run(CTX, HD_OP_CAST, &x, 1, &at, &xh) == HD_OK);
            CHECK(hd_op_unary(CTX, fns[k].op, xh, &yh) == HD_OK);
            bad = 0;
            for (int i = 0; xh && yh && i < N; i++) {
                unsigned char buf[2];
                hd_dtype_store(half[h], buf, 0, fns[k].f((float)hd_tensor_get(xh, i)));
                double want = hd_dtype_load(half[h], buf, 0), got = hd_tensor_get(yh, i);
                if (!((isnan(want) && isnan(got)) ||
                      (want == got && signbit(want) == signbit(got))))
                    bad++;
            }
            CHECK_MSG(bad == 0, "eager %s %s: %d elements differ", fns[k].name,
                      hd_dtype_name(half[h]), bad);
            hd_tensor_unref(xh);
            hd_tensor_unref(yh);
        }
    }
    /* pow(x, -x): every kind of pair */
    hd_tensor *yv = NULL, *p = NULL;
    CHECK(hd_op_unary(CTX, HD_OP_NEG, x, &yv) == HD_OK);
    hd_tensor *in[2] = {x, yv};
    CHECK(yv && hd_op_run(CTX, HD_OP_POW, in, 2, NULL, &p) == HD_OK);
    int bad = 0;
    for (int i = 0; p && i < N; i++) {
        float want = hd_vm_powf(xv[i], ((float *)yv->storage->data)[i]);
        bad += !same(((float *)p->storage->data)[i], want);
    }
    CHECK_MSG(bad == 0, "eager pow: %d elements differ", bad);
    hd_tensor_unref(p);
    hd_tensor_unref(yv);
    /* x ** 2 and x ** 3, the exponent a scalar (x ** 2 runs a multiply) */
    for (int e = 2; e <= 3; e++) {
        hd_tensor *ys = hd_tensor_scalar(CTX, HD_F32, e), *ps = NULL;
        hd_tensor *ins[2] = {x, ys};
        CHECK(ys && hd_op_run(CTX, HD_OP_POW, ins, 2, NULL, &ps) == HD_OK);
        bad = 0;
        for (int i = 0; ps && i < N; i++)
            bad += !same(((float *)ps->storage->data)[i], hd_vm_powf(xv[i], (float)e));
        CHECK_MSG(bad == 0, "eager x ** %d: %d elements differ", e, bad);
        hd_tensor_unref(ps);
        hd_tensor_unref(ys);
    }
    hd_tensor_unref(x);
}

int main(void) {
    hd_ctx_init(&g_ctx, NULL, NULL);
    const char *ex = getenv("HODU_TEST_EXHAUSTIVE");
    uint64_t step = ex && *ex && strcmp(ex, "0") ? 1 : 97;
    const char *only = getenv("HODU_TEST_ONLY"); /* one function's sweep */
    for (int k = 0; k < NFN; k++)
        if (!only || !strcmp(only, fns[k].name)) test_sweep(&fns[k], step);
    if (!only || !strcmp(only, "pow")) test_pow_sweep(step == 1 ? 100000000 : 1000000);
    test_specials();
    test_specials_trig_pow();
    test_eager();
    hd_ctx_release(&g_ctx);
    TEST_END();
}
