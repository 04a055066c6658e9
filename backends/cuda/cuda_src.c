/* CUDA C sources generated from the op table (runtime/hd_ops.def).
 *
 * Every op with a CUDA kernel gets one module: its kernels for every dtype
 * the cpu backend supports it for (the set both backends accept), named
 * k_<op>_<in dtype>_<out dtype>. The bodies come from small per-op tables
 * of expressions below (one line per op and dtype category), wrapped in the
 * shared loops of the prelude (cuda_prelude.h). Plain C, in every build:
 * the NVRTC compile test checks each module on machines without a GPU. */
#include "cuda_int.h"
#include "cuda_prelude.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- text buffer ---- */

void hd_cuda_src_init(hd_cuda_src *s, hd_ctx *ctx) {
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
}

void hd_cuda_src_free(hd_cuda_src *s) {
    if (s->text) {
        if (s->ctx)
            hd_ctx_free(s->ctx, s->text, s->cap);
        else
            free(s->text);
    }
    memset(s, 0, sizeof *s);
}

static int src_grow(hd_cuda_src *s, size_t need) {
    if (s->len + need + 1 <= s->cap) return 1;
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < s->len + need + 1) cap *= 2;
    char *p = s->ctx ? hd_ctx_realloc(s->ctx, s->text, s->cap, cap) : realloc(s->text, cap);
    if (!p) {
        s->oom = 1;
        return 0;
    }
    s->text = p;
    s->cap = cap;
    return 1;
}

void hd_cuda_src_printf(hd_cuda_src *s, const char *fmt, ...) {
    if (s->oom) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !src_grow(s, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(s->text + s->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    s->len += (size_t)n;
}

static void src_puts(hd_cuda_src *s, const char *t) {
    size_t n = strlen(t);
    if (s->oom || !src_grow(s, n)) return;
    memcpy(s->text + s->len, t, n + 1);
    s->len += n;
}

const char *hd_cuda_prelude(void) {
    return cuda_prelude_text;
}

/* ---- dtypes in CUDA C ---- */

typedef hd_cuda_dtype cu_dtype;

static const cu_dtype cu_dtypes[HD_DTYPE_COUNT] = {
    [HD_F16] = {"f16", "u16", "float", "ld_f16(%s)", "st_f16", NULL, NULL, NULL},
    [HD_BF16] = {"bf16", "u16", "float", "ld_bf16(%s)", "st_bf16", NULL, NULL, NULL},
    [HD_F32] = {"f32", "float", "float", "(%s)", "", NULL, NULL, NULL},
    [HD_F64] = {"f64", "double", "double", "(%s)", "", NULL, NULL, NULL},
    [HD_I8] = {"i8", "i8", "i8", "(%s)", "(i8)", "u8", "-128", "127"},
    [HD_U8] = {"u8", "u8", "u8", "(%s)", "(u8)", "u8", "0", "255"},
    [HD_I32] = {"i32", "i32", "i32", "(%s)", "(i32)", "u32", "(-2147483647LL - 1)", "2147483647LL"},
    [HD_I64] = {"i64", "i64", "i64", "(%s)", "(i64)", "u64", "(i64)0x8000000000000000ULL",
                "0x7fffffffffffffffLL"},
    [HD_BOOL] = {"b", "u8", "u8", "(u8)((%s) != 0)", "(u8)", NULL, NULL, NULL},
};

const hd_cuda_dtype *hd_cuda_dtype_info(hd_dtype dt) {
    return &cu_dtypes[dt];
}

char *hd_cuda_kernel_name(hd_op op, hd_dtype in, hd_dtype out, char *buf, size_t n) {
    snprintf(buf, n, "k_%s_%s_%s", hd_op_name(op), cu_dtypes[in].sfx, cu_dtypes[out].sfx);
    return buf;
}

/* "ld(a[i0])" for dtype dt. */
static void src_load(hd_cuda_src *s, hd_dtype dt, const char *elem) {
    hd_cuda_src_printf(s, cu_dtypes[dt].ld, elem);
}

static int is_float(hd_dtype dt) {
    return hd_dtype_is_float(dt);
}

/* ---- unary expressions: x of the compute type C ---- */

typedef struct {
    hd_op op;
    const char *f;  /* floats */
    const char *si; /* signed integers (U: the unsigned type) */
    const char *u8; /* u8 */
    const char *b;  /* bool (0/1) */
} cu_unary;

static const cu_unary cu_unaries[] = {
    {HD_OP_NEG, "-x", "(C)((U)0 - (U)x)", "(u8)(0u - x)", NULL},
    {HD_OP_ABS, "h_abs(x)", "x < 0 ? (C)((U)0 - (U)x) : x", "x", "x"},
    {HD_OP_EXP, "h_exp(x)", NULL, NULL, NULL},
    {HD_OP_LOG, "h_log(x)", NULL, NULL, NULL},
    {HD_OP_SQRT, "h_sqrt(x)", NULL, NULL, NULL},
    {HD_OP_RSQRT, "(C)1 / h_sqrt(x)", NULL, NULL, NULL},
    {HD_OP_SIN, "h_sin(x)", NULL, NULL, NULL},
    {HD_OP_COS, "h_cos(x)", NULL, NULL, NULL},
    {HD_OP_TANH, "h_tanh(x)", NULL, NULL, NULL},
    {HD_OP_SIGMOID, "(C)1 / ((C)1 + h_exp(-x))", NULL, NULL, NULL},
    {HD_OP_RELU, "x <= 0 ? (C)0 : x", "x > 0 ? x : (C)0", "x", NULL},
    {HD_OP_GELU, "(C)0.5 * x * h_erfc(-x * (C)0.70710678118654752440)", NULL, NULL, NULL},
    {HD_OP_SILU, "x / ((C)1 + h_exp(-x))", NULL, NULL, NULL},
    {HD_OP_SOFTPLUS, "x > (C)20 ? x : h_log1p(h_exp(x))", NULL, NULL, NULL},
    {HD_OP_ERF, "h_erf(x)", NULL, NULL, NULL},
    {HD_OP_ERFC, "h_erfc(x)", NULL, NULL, NULL},
    {HD_OP_LGAMMA, "h_lgamma(x)", NULL, NULL, NULL},
    {HD_OP_POLYGAMMA, "(C)hd_sp_polygamma(s0, (double)x)", NULL, NULL, NULL},
    {HD_OP_SIGN, "x > 0 ? (C)1 : x < 0 ? (C)-1 : x + (C)0", "(C)((x > 0) - (x < 0))", "(u8)(x > 0)",
     NULL},
    {HD_OP_FLOOR, "h_floor(x)", "x", "x", "x"},
    {HD_OP_CEIL, "h_ceil(x)", "x", "x", "x"},
    {HD_OP_ROUND, "h_rint(x)", "x", "x", "x"},
    {HD_OP_CLAMP, "h_clampf<C>(x, s0, s1)", "h_clampi<C>(x, s0, s1, TMIN, TMAX)",
     "h_clampi<C>(x, s0, s1, TMIN, TMAX)", "h_clampb(x, s0, s1)"},
    {HD_OP_NOT, NULL, NULL, NULL, "(u8)(x == 0)"},
    {HD_OP_COPY, "x", "x", "x", "x"},
};

/* ---- binary expressions: a, b of the compute type C ---- */

typedef struct {
    hd_op op;
    const char *f, *si, *u8, *b;
} cu_binary;

static const cu_binary cu_binaries[] = {
    {HD_OP_ADD, "a + b", "(C)((U)a + (U)b)", "(C)((U)a + (U)b)", "(u8)((a | b) != 0)"},
    {HD_OP_SUB, "a - b", "(C)((U)a - (U)b)", "(C)((U)a - (U)b)", NULL},
    {HD_OP_MUL, "a * b", "(C)((U)a * (U)b)", "(C)((U)a * (U)b)", "(u8)(a & b)"},
    {HD_OP_DIV, "a / b", NULL, NULL, NULL},
    {HD_OP_MOD, "h_modf<C>(a, b)", "h_modi<C>(a, b)", "(u8)(b ? a % b : 0)", NULL},
    {HD_OP_POW, "h_pow(a, b)", "h_powi<C, U>(a, b)", "h_powu8(a, b)", NULL},
    {HD_OP_ATAN2, "h_atan2(a, b)", NULL, NULL, NULL},
    {HD_OP_MAXIMUM, "(a != a || a > b) ? a : b", "a > b ? a : b", "a > b ? a : b",
     "(u8)((a | b) != 0)"},
    {HD_OP_MINIMUM, "(a != a || a < b) ? a : b", "a < b ? a : b", "a < b ? a : b", "(u8)(a & b)"},
    {HD_OP_EQ, "a == b", "a == b", "a == b", "a == b"},
    {HD_OP_NE, "a != b", "a != b", "a != b", "a != b"},
    {HD_OP_LT, "a < b", "a < b", "a < b", "a < b"},
    {HD_OP_LE, "a <= b", "a <= b", "a <= b", "a <= b"},
    {HD_OP_GT, "a > b", "a > b", "a > b", "a > b"},
    {HD_OP_GE, "a >= b", "a >= b", "a >= b", "a >= b"},
    /* gelu'(x) * g, x = a, g = b (f32/f64) */
    {HD_OP_GELU_BWD,
     "b * ((C)0.5 * h_erfc(-a * (C)0.70710678118654752440) + a * (C)0.39894228040143267794 * "
     "h_exp((C)-0.5 * a * a))",
     NULL, NULL, NULL},
    /* tanh' and sigmoid' from the result y = a, times g = b (f32/f64; no
     * contraction: --fmad=false) */
    {HD_OP_TANH_BWD, "b * ((C)1 - a * a)", NULL, NULL, NULL},
    {HD_OP_SIGMOID_BWD, "b * (a * ((C)1 - a))", NULL, NULL, NULL},
};

static const char *pick_expr(const char *f, const char *si, const char *u8, const char *b,
                             hd_dtype dt) {
    if (is_float(dt)) return f;
    if (dt == HD_BOOL) return b;
    if (dt == HD_U8) return u8;
    return si;
}

const char *hd_cuda_ew_expr(hd_op op, hd_dtype dt) {
    for (size_t k = 0; k < sizeof cu_unaries / sizeof cu_unaries[0]; k++)
        if (cu_unaries[k].op == op)
            return pick_expr(cu_unaries[k].f, cu_unaries[k].si, cu_unaries[k].u8, cu_unaries[k].b,
                             dt);
    for (size_t k = 0; k < sizeof cu_binaries / sizeof cu_binaries[0]; k++)
        if (cu_binaries[k].op == op)
            return pick_expr(cu_binaries[k].f, cu_binaries[k].si, cu_binaries[k].u8,
                             cu_binaries[k].b, dt);
    return NULL;
}

int hd_cuda_takes_number(hd_op op, int i) {
    if (op == HD_OP_WHERE) return i == 1 || i == 2; /* s0, s1 */
    for (size_t k = 0; k < sizeof cu_binaries / sizeof cu_binaries[0]; k++)
        if (cu_binaries[k].op == op) return i == 0 || i == 1;
    return 0;
}

/* The kernel's local typedefs: C (compute), U (unsigned), TMIN, TMAX. */
void hd_cuda_src_types(hd_cuda_src *s, hd_dtype dt) {
    const cu_dtype *d = &cu_dtypes[dt];
    hd_cuda_src_printf(s, "  typedef %s C;\n", d->comp);
    if (d->uns) hd_cuda_src_printf(s, "  typedef %s U;\n", d->uns);
    hd_cuda_src_printf(s, "  const i64 TMIN = %s, TMAX = %s;\n  (void)TMIN; (void)TMAX;\n",
                       d->tmin ? d->tmin : "0", d->tmax ? d->tmax : "0");
}

#define EW_PARAMS                                                                                  \
    "(const EwGeo g, void *o_, const void *a_, const void *b_, const void *c_, double s0, "        \
    "double s1)"

static void src_ew_head(hd_cuda_src *s, hd_op op, hd_dtype in, hd_dtype out, hd_dtype compute) {
    char name[96];
    hd_cuda_src_printf(s, "extern \"C\" __global__ void %s" EW_PARAMS " {\n",
                       hd_cuda_kernel_name(op, in, out, name, sizeof name));
    hd_cuda_src_types(s, compute);
    hd_cuda_src_printf(s,
                       "  (void)s0; (void)s1; (void)b_; (void)c_;\n"
                       "  %s *o = (%s *)o_;\n",
                       cu_dtypes[out].store, cu_dtypes[out].store);
}

/* An elementwise kernel's one element: the inputs (of dtype in) loaded
 * from `a` and `b` (lvalue expressions), the result stored to `o`. */
typedef struct {
    int kind; /* EW_UNARY, EW_CAST, EW_BINARY */
    hd_dtype in, out;
    const char *expr; /* unary (x) or binary (a, b) expression */
} ew_kernel;

enum { EW_UNARY, EW_CAST, EW_BINARY };

/* The statement storing x (the compute type of the input) as a cast's
 * result: CPU rules (cpu_elementwise.c): float -> int saturates, int -> int
 * wraps, anything -> bool is != 0, floats go through float for halves. */
static void ew_cast_store(hd_cuda_src *s, hd_dtype from, hd_dtype to, const char *o) {
    const cu_dtype *d = &cu_dtypes[to];
    if (to == HD_BOOL)
        hd_cuda_src_printf(s, "%s = (u8)(x != 0);", o);
    else if (is_float(to))
        hd_cuda_src_printf(s, "%s = %s((%s)x);", o, d->st, d->comp);
    else if (is_float(from))
        hd_cuda_src_printf(s, "%s = (%s)h_sat((double)x, %s, %s);", o, d->store, d->tmin, d->tmax);
    else
        hd_cuda_src_printf(s, "%s = (%s)x;", o, d->store);
}

/* Binary operands may be scalars: a NULL pointer, the value in sa / sb. */
static void ew_elem(hd_cuda_src *s, const ew_kernel *k, const char *a, const char *b,
                    const char *o) {
    if (k->kind != EW_BINARY) {
        src_puts(s, "{ C x = ");
        src_load(s, k->in, a);
        src_puts(s, "; ");
        if (k->kind == EW_CAST)
            ew_cast_store(s, k->in, k->out, o);
        else
            hd_cuda_src_printf(s, "%s = %s((C)(%s));", o, cu_dtypes[k->out].st, k->expr);
        src_puts(s, " }");
        return;
    }
    src_puts(s, "{ C a = a_p ? ");
    src_load(s, k->in, a);
    src_puts(s, " : sa, b = b_p ? ");
    src_load(s, k->in, b);
    src_puts(s, " : sb; ");
    if (k->out == HD_BOOL)
        hd_cuda_src_printf(s, "%s = (u8)(%s); }", o, k->expr);
    else
        hd_cuda_src_printf(s, "%s = %s((C)(%s)); }", o, cu_dtypes[k->out].st, k->expr);
}

/* Contiguous float operands (g.nd == 0), aligned: W elements (16 bytes of
 * the input) per load, several loads in flight per thread; then the tail. */
static void ew_vector_path(hd_cuda_src *s, const ew_kernel *k) {
    /* floats only (the dtypes of bulk data): every vector path is code
     * NVRTC compiles when the op is first used */
    if (!is_float(k->in) || !is_float(k->out)) return;
    const char *si = cu_dtypes[k->in].store, *so = cu_dtypes[k->out].store;
    int w = (int)(16 / hd_dtype_size(k->in));
    hd_cuda_src_printf(s,
                       "  typedef Vec<%s, %d> VI; typedef Vec<%s, %d> VO;\n"
                       "  if (g.nd == 0 && vec_ok<%s, %d>(o) && vec_ok<%s, %d>(a_p) &&\n"
                       "      vec_ok<%s, %d>(b_p)) {\n"
                       "    const i64 nv = g.n / %d;\n"
                       "    for (i64 j = EW_TID; j < nv; j += EW_STRIDE) {\n"
                       "      VI va, vb; VO vo; (void)vb;\n"
                       "      if (a_p) va = ((const VI *)a_p)[j];\n",
                       si, w, so, w, so, w, si, w, si, w, w);
    if (k->kind == EW_BINARY) src_puts(s, "      if (b_p) vb = ((const VI *)b_p)[j];\n");
    hd_cuda_src_printf(s, "#pragma unroll\n      for (int k = 0; k < %d; k++) ", w);
    ew_elem(s, k, "va.v[k]", "vb.v[k]", "vo.v[k]");
    hd_cuda_src_printf(s,
                       "\n      ((VO *)o)[j] = vo;\n    }\n"
                       "    for (i64 i = nv * %d + EW_TID; i < g.n; i += EW_STRIDE) ",
                       w);
    ew_elem(s, k, "a_p[i]", "b_p[i]", "o[i]");
    src_puts(s, "\n    return;\n  }\n");
}

static void src_ew_kernel(hd_cuda_src *s, hd_op op, const ew_kernel *k) {
    src_ew_head(s, op, k->in, k->out, k->in);
    const char *si = cu_dtypes[k->in].store;
    hd_cuda_src_printf(s, "  const %s *a_p = (const %s *)a_, *b_p = (const %s *)b_; (void)b_p;\n",
                       si, si, si);
    if (k->kind == EW_BINARY) { /* a scalar operand's value, from s0's bytes */
        char e[64];
        snprintf(e, sizeof e, "bits_as<%s>(s0)", si);
        src_puts(s, "  const C sa = a_p ? (C)0 : (C)");
        src_load(s, k->in, e);
        src_puts(s, ", sb = b_p ? (C)0 : (C)");
        src_load(s, k->in, e);
        src_puts(s, ";\n");
    }
    ew_vector_path(s, k);
    src_puts(s, "  EW_LOOP { i64 io, i0, i1, i2; ew_off(g, i, io, i0, i1, i2);\n    ");
    ew_elem(s, k, "a_p[i0]", "b_p[i1]", "o[io]");
    src_puts(s, " }\n}\n");
}

static void src_unary_kernel(hd_cuda_src *s, hd_op op, hd_dtype dt, const char *expr) {
    ew_kernel k = {EW_UNARY, dt, dt, expr};
    src_ew_kernel(s, op, &k);
}

static void src_cast_kernel(hd_cuda_src *s, hd_dtype from, hd_dtype to) {
    ew_kernel k = {EW_CAST, from, to, NULL};
    src_ew_kernel(s, HD_OP_CAST, &k);
}

static void src_binary_kernel(hd_cuda_src *s, hd_op op, hd_dtype dt, hd_dtype out,
                              const char *expr) {
    ew_kernel k = {EW_BINARY, dt, out, expr};
    src_ew_kernel(s, op, &k);
}

/* where(c, a, b): c already bool; kernels by the value dtype. A value
 * that is a host number comes as its bytes: a in s0, b in s1. */
static void src_where_kernel(hd_cuda_src *s, hd_dtype dt) {
    const char *st = cu_dtypes[dt].store;
    src_ew_head(s, HD_OP_WHERE, dt, dt, dt);
    hd_cuda_src_printf(s,
                       "  const u8 *c = (const u8 *)a_;\n"
                       "  const %s *x = (const %s *)b_, *y = (const %s *)c_;\n"
                       "  const %s sx = bits_as<%s>(s0), sy = bits_as<%s>(s1);\n"
                       "  EW_LOOP { i64 io, i0, i1, i2; ew_off(g, i, io, i0, i1, i2);\n"
                       "    o[io] = c[i0] ? (x ? x[i1] : sx) : (y ? y[i2] : sy); }\n}\n",
                       st, st, st, st, st, st);
}

/* ---- modules ---- */

static int cpu_supports(hd_op op, hd_dtype dt) {
    return hd_cpu_backend.supports_op(op, dt);
}

static int mod_unary(hd_cuda_src *s, hd_op op) {
    for (size_t k = 0; k < sizeof cu_unaries / sizeof cu_unaries[0]; k++) {
        const cu_unary *u = &cu_unaries[k];
        if (u->op != op) continue;
        for (int dt = 0; dt < HD_DTYPE_COUNT; dt++) {
            const char *e = pick_expr(u->f, u->si, u->u8, u->b, (hd_dtype)dt);
            if (e && cpu_supports(op, (hd_dtype)dt)) src_unary_kernel(s, op, (hd_dtype)dt, e);
        }
        return 1;
    }
    return 0;
}

static int mod_binary(hd_cuda_src *s, hd_op op) {
    for (size_t k = 0; k < sizeof cu_binaries / sizeof cu_binaries[0]; k++) {
        const cu_binary *b = &cu_binaries[k];
        if (b->op != op) continue;
        int cmp = hd_op_infos[op].kind == HD_KIND_COMPARE;
        for (int dt = 0; dt < HD_DTYPE_COUNT; dt++) {
            const char *e = pick_expr(b->f, b->si, b->u8, b->b, (hd_dtype)dt);
            if (e && cpu_supports(op, (hd_dtype)dt))
                src_binary_kernel(s, op, (hd_dtype)dt, cmp ? HD_BOOL : (hd_dtype)dt, e);
        }
        return 1;
    }
    return 0;
}

static int mod_cast(hd_cuda_src *s) {
    for (int a = 0; a < HD_DTYPE_COUNT; a++)
        for (int b = 0; b < HD_DTYPE_COUNT; b++) src_cast_kernel(s, (hd_dtype)a, (hd_dtype)b);
    return 1;
}

static int mod_where(hd_cuda_src *s) {
    for (int dt = 0; dt < HD_DTYPE_COUNT; dt++) src_where_kernel(s, (hd_dtype)dt);
    return 1;
}

int hd_cuda_src_reduce(hd_cuda_src *s, hd_op op);
int hd_cuda_src_other(hd_cuda_src *s, hd_op op);

int hd_cuda_src_module(hd_cuda_src *s, hd_op op) {
    if ((unsigned)op >= HD_OP_COUNT || !hd_cuda_op_generated(op)) return 0;
    src_puts(s, cuda_prelude_text);
    switch (op) {
    case HD_OP_CAST: return mod_cast(s);
    case HD_OP_WHERE: return mod_where(s);
    default: break;
    }
    switch (hd_op_infos[op].kind) {
    case HD_KIND_UNARY: return mod_unary(s, op);
    case HD_KIND_BINARY:
    case HD_KIND_COMPARE: return mod_binary(s, op);
    case HD_KIND_REDUCE: return hd_cuda_src_reduce(s, op);
    default: return hd_cuda_src_other(s, op) || mod_binary(s, op);
    }
}
