/* Generated sources of the reduction, row (softmax family), creation,
 * indexing and dropout modules (see cuda_src.c for the scheme). */
#include "cuda_int.h"

#include <stdio.h>
#include <string.h>

/* Store types by dtype (as cuda_src.c's table; only what these need). */
static const char *const mo_store[HD_DTYPE_COUNT] = {"u16", "u16", "float", "double", "i8",
                                                     "u8",  "i32", "i64",   "u8"};
static const char *const mo_sfx[HD_DTYPE_COUNT] = {"f16", "bf16", "f32", "f64", "i8",
                                                   "u8",  "i32",  "i64", "b"};
/* load as double (floats, ints) */
static const char *const mo_ldd[HD_DTYPE_COUNT] = {
    "(double)ld_f16(%s)", "(double)ld_bf16(%s)", "(double)(%s)", "(%s)",
    "(double)(%s)",       "(double)(%s)",        "(double)(%s)", "(double)(%s)",
    "(double)((%s) != 0)"};

static void ld_double(hd_cuda_src *s, hd_dtype dt, const char *e) {
    hd_cuda_src_printf(s, mo_ldd[dt], e);
}

static int cpu_ok(hd_op op, hd_dtype dt) {
    return hd_cpu_backend.supports_op(op, dt);
}

/* ---- reductions: one block per output; float accumulations in double,
 * integer sums and products in u64 (wrapping), integer extremes in i64.
 * sum, mean, prod, max and min also split (chunk > 0): block b_ reduces
 * elements [lo, hi) of output b_ / S into part_[b_], and the _fin kernel
 * combines each output's S partials (few outputs of many elements). ---- */

static void red_head(hd_cuda_src *s, hd_op op, hd_dtype in, hd_dtype out) {
    char name[96];
    hd_cuda_src_printf(
        s,
        "extern \"C\" __global__ void %s(const RGeo g, void *o_, const void *a_, double corr, "
        "i64 chunk, void *part_) {\n"
        "  const %s *a = (const %s *)a_; %s *o = (%s *)o_; (void)corr; (void)part_;\n"
        "  const i64 S = chunk > 0 ? (g.nred + chunk - 1) / chunk : 1;\n"
        "  for (i64 b_ = blockIdx.x; b_ < g.nout * S; b_ += gridDim.x) {\n"
        "    i64 ob = b_ / S, lo = chunk > 0 ? (b_ %% S) * chunk : 0;\n"
        "    i64 hi = chunk > 0 && lo + chunk < g.nred ? lo + chunk : g.nred;\n"
        "    i64 base = r_base(g, ob);\n",
        hd_cuda_kernel_name(op, in, out, name, sizeof name), mo_store[in], mo_store[in],
        mo_store[out], mo_store[out]);
}

/* One loop over the inner elements lo..hi, the element's offset from off. */
static void red_loop_over(hd_cuda_src *s, hd_dtype in, const char *off, const char *step) {
    hd_cuda_src_printf(s,
                       "    for (i64 r = lo + threadIdx.x; r < hi; r += blockDim.x) {\n"
                       "      i64 off = base + %s; double x = ",
                       off);
    ld_double(s, in, "a[off]");
    hd_cuda_src_printf(s, "; i64 xi = (i64)a[off]; (void)x; (void)xi;\n      %s\n    }\n", step);
}

/* acc = fold over the inner elements lo..hi (x: the element as double, xi:
 * as i64). fast: one reduced dim (the common case) is a loop of its own,
 * unrolled so that each thread has 4 loads in flight (kept to sum, mean,
 * prod, max and min: unrolled loops cost NVRTC time at the op's first use). */
static void red_loop(hd_cuda_src *s, hd_dtype in, const char *decl, const char *step, int fast) {
    hd_cuda_src_printf(s, "    %s\n", decl);
    if (fast) {
        hd_cuda_src_printf(
            s, "%s", "    if (g.rnd == 1) {\n    const i64 rs_ = g.rstr[0];\n#pragma unroll 4\n");
        red_loop_over(s, in, "r * rs_", step);
        hd_cuda_src_printf(s, "%s", "    } else {\n");
    }
    red_loop_over(s, in, "r_off(g, r)", step);
    if (fast) hd_cuda_src_printf(s, "%s", "    }\n");
}

static void red_store(hd_cuda_src *s, hd_dtype out, const char *v) {
    if (out == HD_I64 || out == HD_I32 || out == HD_I8 || out == HD_U8 || out == HD_BOOL)
        hd_cuda_src_printf(s, "    if (threadIdx.x == 0) o[ob] = (%s)(%s);\n", mo_store[out], v);
    else
        hd_cuda_src_printf(s, "    if (threadIdx.x == 0) o[ob] = sd_%s(%s);\n", mo_sfx[out], v);
}

#define RED_ADD  "[](double p, double q) { return p + q; }"
#define RED_ADDU "[](u64 p, u64 q) { return p + q; }"

/* How sum, mean, prod, max and min fold: the accumulator's type and start,
 * one element into it, two of them together, and the result. */
typedef struct red_rule {
    const char *acc, *init, *step, *comb, *fin;
} red_rule;

static red_rule red_rule_of(hd_op op, hd_dtype in) {
    int flt = hd_dtype_is_float(in), mx = op == HD_OP_MAX;
    if (op == HD_OP_MAX || op == HD_OP_MIN) {
        if (flt)
            return (red_rule){
                "double", mx ? "-HD_INF" : "HD_INF",
                mx ? "acc = (x > acc || x != x) ? x : acc;"
                   : "acc = (x < acc || x != x) ? x : acc;",
                mx ? "[](double p, double q) { return (q > p || q != q) && p == p ? q : p; }"
                   : "[](double p, double q) { return (q < p || q != q) && p == p ? q : p; }",
                "acc"};
        return (red_rule){"i64", mx ? "(i64)0x8000000000000000ULL" : "0x7fffffffffffffffLL",
                          mx ? "acc = xi > acc ? xi : acc;" : "acc = xi < acc ? xi : acc;",
                          mx ? "[](i64 p, i64 q) { return q > p ? q : p; }"
                             : "[](i64 p, i64 q) { return q < p ? q : p; }",
                          in == HD_BOOL ? "acc != 0" : "acc"};
    }
    int prod = op == HD_OP_PROD;
    if (!flt)
        return (red_rule){"u64", prod ? "1" : "0", prod ? "acc *= (u64)xi;" : "acc += (u64)xi;",
                          prod ? "[](u64 p, u64 q) { return p * q; }" : RED_ADDU, "(i64)acc"};
    return (red_rule){"double", prod ? "1" : "0", prod ? "acc *= x;" : "acc += x;",
                      prod ? "[](double p, double q) { return p * q; }" : RED_ADD,
                      op == HD_OP_MEAN ? "g.nred ? acc / (double)g.nred : HD_NAN" : "acc"};
}

static void red_fold(hd_cuda_src *s, hd_op op, hd_dtype in, hd_dtype out) {
    red_rule r = red_rule_of(op, in);
    char decl[96];
    snprintf(decl, sizeof decl, "%s acc = %s;", r.acc, r.init);
    red_loop(s, in, decl, r.step, 1);
    hd_cuda_src_printf(s,
                       "    acc = block_reduce(acc, %s);\n"
                       "    if (chunk > 0) { if (threadIdx.x == 0) ((%s *)part_)[b_] = acc; "
                       "continue; }\n",
                       r.comb, r.acc);
    red_store(s, out, r.fin);
}

/* The final pass of a split reduction: S partials per output. */
static void red_fin_kernel(hd_cuda_src *s, hd_op op, hd_dtype in, hd_dtype out) {
    red_rule r = red_rule_of(op, in);
    char name[96];
    hd_cuda_src_printf(s,
                       "extern \"C\" __global__ void %s_fin(const RGeo g, void *o_, const void "
                       "*part_, i64 S) {\n"
                       "  %s *o = (%s *)o_; const %s *pp = (const %s *)part_;\n"
                       "  for (i64 ob = blockIdx.x; ob < g.nout; ob += gridDim.x) {\n"
                       "    %s acc = %s;\n"
                       "    for (i64 c = threadIdx.x; c < S; c += blockDim.x) acc = (%s)(acc, "
                       "pp[ob * S + c]);\n"
                       "    acc = block_reduce(acc, %s);\n",
                       hd_cuda_kernel_name(op, in, out, name, sizeof name), mo_store[out],
                       mo_store[out], r.acc, r.acc, r.acc, r.init, r.comb, r.comb);
    red_store(s, out, r.fin);
    hd_cuda_src_printf(s, "  }\n}\n");
}

static void red_arg(hd_cuda_src *s, hd_op op, hd_dtype in) {
    int flt = hd_dtype_is_float(in);
    const char *pick = op == HD_OP_ARGMAX ? (flt ? "arg_pick<1, 1>" : "arg_pick<1, 0>")
                                          : (flt ? "arg_pick<0, 1>" : "arg_pick<0, 0>");
    char step[200];
    snprintf(step, sizeof step,
             "Arg c; c.v = x; c.iv = xi; c.idx = r; c.nan = x != x; acc = %s(acc, c);", pick);
    red_loop(s, in, "Arg acc; acc.v = 0; acc.iv = 0; acc.idx = -1; acc.nan = 0;", step, 0);
    hd_cuda_src_printf(s,
                       "    acc = block_reduce(acc, [](Arg p, Arg q) { return %s(p, q); "
                       "});\n",
                       pick);
    red_store(s, HD_I64, "acc.idx < 0 ? 0 : acc.idx");
}

/* var/std: mean, then squared deviations; logsumexp: max, then sum of
 * exp(x - max); both as the cpu (cpu_reduce.c). */
static void red_two_pass(hd_cuda_src *s, hd_op op, hd_dtype in, hd_dtype out) {
    int lse = op == HD_OP_LOGSUMEXP;
    if (lse) {
        red_loop(s, in, "double m = -HD_INF;", "m = (x > m || x != x) ? x : m;", 0);
        hd_cuda_src_printf(s, "    m = block_reduce(m, [](double p, double q) { return "
                              "(q > p || q != q) && p == p ? q : p; });\n");
        red_loop(s, in, "double acc = 0;", "if (isfinite(m)) acc += exp(x - m);", 0);
        hd_cuda_src_printf(s, "    acc = block_reduce(acc, %s);\n", RED_ADD);
        red_store(s, out, "isfinite(m) ? m + log(acc) : m");
        return;
    }
    red_loop(s, in, "double m = 0;", "m += x;", 0);
    hd_cuda_src_printf(s,
                       "    m = block_reduce(m, %s);\n    m = g.nred ? m / (double)g.nred : "
                       "HD_NAN;\n",
                       RED_ADD);
    red_loop(s, in, "double acc = 0;", "acc += (x - m) * (x - m);", 0);
    hd_cuda_src_printf(s,
                       "    acc = block_reduce(acc, %s);\n"
                       "    double n = (double)g.nred, dv = n - corr > 0 ? n - corr : 0.0;\n"
                       "    double r = g.nred == 0 ? HD_NAN : dv > 0 ? acc / dv : acc > 0 ? "
                       "HD_INF : HD_NAN;\n",
                       RED_ADD);
    red_store(s, out, op == HD_OP_STD ? "sqrt(r)" : "r");
}

static void red_kernel(hd_cuda_src *s, hd_op op, hd_dtype in, hd_dtype out) {
    red_head(s, op, in, out);
    int split = hd_cuda_reduce_splits(op);
    if (split)
        red_fold(s, op, in, out);
    else if (op == HD_OP_ARGMAX || op == HD_OP_ARGMIN)
        red_arg(s, op, in);
    else
        red_two_pass(s, op, in, out);
    hd_cuda_src_printf(s, "  }\n}\n");
    if (split) red_fin_kernel(s, op, in, out);
}

int hd_cuda_reduce_splits(hd_op op) {
    return op == HD_OP_SUM || op == HD_OP_MEAN || op == HD_OP_PROD || op == HD_OP_MAX ||
           op == HD_OP_MIN;
}

/* Few outputs of many elements would keep a handful of SMs busy with a
 * block each: such outputs are split into chunks, enough of them for one
 * full wave of the device (every resident block slot busy, as PyTorch's
 * reductions size their grids), no smaller than 4096 elements (16 per
 * thread) and a multiple of 256 (every thread as many). Every element is
 * in exactly one chunk, and no chunk is empty. */
int64_t hd_cuda_split_chunk(int64_t nout, int64_t nred, int64_t resident) {
    if (nout < 1 || nout > 1024 || nred < (1 << 16)) return 0;
    if (resident < 1) resident = 1;
    int64_t per_out = (resident + nout - 1) / nout;
    int64_t chunk = (nred + per_out - 1) / per_out;
    chunk = (chunk + 255) / 256 * 256;
    return chunk < 4096 ? 4096 : chunk;
}

/* The output dtype of a reduction of an input of dtype dt (hd_shape.c's
 * reduce rules; integer sums are cast to i64 before the kernel). */
hd_dtype hd_cuda_reduce_out(hd_op op, hd_dtype dt) {
    switch (op) {
    case HD_OP_ARGMAX:
    case HD_OP_ARGMIN: return HD_I64;
    default: return dt;
    }
}

int hd_cuda_src_reduce(hd_cuda_src *s, hd_op op) {
    for (int dt = 0; dt < HD_DTYPE_COUNT; dt++)
        if (cpu_ok(op, (hd_dtype)dt))
            red_kernel(s, op, (hd_dtype)dt, hd_cuda_reduce_out(op, (hd_dtype)dt));
    return 1;
}

/* ---- rows: softmax family over one axis, one block per row ----
 * RowGeo: rows, the axis length, the other dims, each operand's strides
 * over them and along the axis. */

static const char row_geo[] =
    "struct RowGeo { i64 rows, len; int nd, rev; i64 shape[8], sa[8], sb[8], so[8]; i64 la, lb, "
    "lo; };\n"
    "__device__ __forceinline__ void row_base(const RowGeo &g, i64 r, i64 &a, i64 &b, i64 &o) {\n"
    "  a = b = o = 0; for (int d = g.nd - 1; d >= 0; d--) { i64 q = r % g.shape[d]; r /= "
    "g.shape[d];\n"
    "    a += q * g.sa[d]; b += q * g.sb[d]; o += q * g.so[d]; } }\n";

static const char *const ld_c[HD_DTYPE_COUNT] = {"ld_f16(%s)", "ld_bf16(%s)", "(%s)", "(%s)"};
static const char *const st_c[HD_DTYPE_COUNT] = {"st_f16", "st_bf16", "", ""};

/* cumsum and cumprod of one row: each thread scans a run of the row (in
 * double), thread 0 makes the runs' totals running ones, then each thread
 * writes its run from its offset (the rounding to C once per element, as
 * the cpu kernel; the runs' totals associate differently from its single
 * pass). cumprod's gradient (S_i = g_i + x_{i+1} S_{i+1}, times the product
 * of x_0 .. x_{i-1}: cpu_nn_tmpl.h) runs on thread 0, S through O. */
static void row_scan(hd_cuda_src *s, hd_op op, hd_dtype dt) {
    char la[64], lb[64], lo[64], ln[64];
    snprintf(la, sizeof la, ld_c[dt], "A[ba + j * g.la]");
    snprintf(ln, sizeof ln, ld_c[dt], "A[ba + (j + 1) * g.la]");
    snprintf(lb, sizeof lb, ld_c[dt], "B[bb + j * g.lb]");
    snprintf(lo, sizeof lo, ld_c[dt], "O[bo + j * g.lo]");
    if (op == HD_OP_CUMPROD_BWD) {
        hd_cuda_src_printf(s,
                           "    if (threadIdx.x == 0 && g.len > 0) {\n"
                           "      double acc = 0;\n"
                           "      for (i64 j = g.len - 1; j >= 0; j--) {\n"
                           "        acc = (double)%s + (j + 1 < g.len ? (double)%s * acc : 0.0);\n"
                           "        O[bo + j * g.lo] = %s((C)acc); }\n"
                           "      acc = 1;\n"
                           "      for (i64 j = 0; j < g.len; j++) {\n"
                           "        O[bo + j * g.lo] = %s((C)(acc * (double)%s)); acc *= "
                           "(double)%s; }\n"
                           "    }\n",
                           lb, ln, st_c[dt], st_c[dt], lo, la);
        return;
    }
    int prod = op == HD_OP_CUMPROD;
    hd_cuda_src_printf(
        s,
        "    __shared__ double part[256];\n"
        "    i64 run = (g.len + blockDim.x - 1) / blockDim.x, k0 = threadIdx.x * run,"
        " k1 = k0 + run < g.len ? k0 + run : g.len;\n"
        "    double acc = %s;\n"
        "    for (i64 k = k0; k < k1; k++) { i64 j = g.rev ? g.len - 1 - k : k; acc "
        "%s= (double)%s; }\n"
        "    part[threadIdx.x] = acc; __syncthreads();\n"
        "    if (threadIdx.x == 0) { double r = %s; for (unsigned t = 0; t < "
        "blockDim.x; t++) { double v = part[t]; part[t] = r; r %s= v; } }\n"
        "    __syncthreads(); acc = part[threadIdx.x];\n"
        "    for (i64 k = k0; k < k1; k++) { i64 j = g.rev ? g.len - 1 - k : k; acc "
        "%s= (double)%s; O[bo + j * g.lo] = %s((C)acc); }\n"
        "    __syncthreads();\n",
        prod ? "1.0" : "0.0", prod ? "*" : "+", la, prod ? "1.0" : "0.0", prod ? "*" : "+",
        prod ? "*" : "+", la, st_c[dt]);
}

static void row_kernel(hd_cuda_src *s, hd_op op, hd_dtype dt) {
    char name[96];
    const char *C = dt == HD_F64 ? "double" : "float";
    hd_cuda_src_printf(s,
                       "extern \"C\" __global__ void %s(const RowGeo g, void *o_, const void *a_, "
                       "const void *b_) {\n"
                       "  typedef %s C; const %s *A = (const %s *)a_, *B = (const %s *)b_; %s *O = "
                       "(%s *)o_; (void)B;\n"
                       "  for (i64 r = blockIdx.x; r < g.rows; r += gridDim.x) {\n"
                       "    i64 ba, bb, bo; row_base(g, r, ba, bb, bo);\n",
                       hd_cuda_kernel_name(op, dt, dt, name, sizeof name), C, mo_store[dt],
                       mo_store[dt], mo_store[dt], mo_store[dt], mo_store[dt]);
    char la[64], lb[64];
    snprintf(la, sizeof la, ld_c[dt], "A[ba + k * g.la]");
    snprintf(lb, sizeof lb, ld_c[dt], "B[bb + k * g.lb]");
    const char *loop = "for (i64 k = threadIdx.x; k < g.len; k += blockDim.x)";
    if (op == HD_OP_CUMSUM || op == HD_OP_CUMPROD || op == HD_OP_CUMPROD_BWD) {
        row_scan(s, op, dt);
    } else if (op == HD_OP_SOFTMAX || op == HD_OP_LOG_SOFTMAX) {
        hd_cuda_src_printf(s,
                           "    C m = -HD_INF; %s { C x = %s; m = (x > m || x != x) ? x : m; }\n"
                           "    m = block_reduce(m, [](C p, C q) { return (q > p || q != q) && p "
                           "== p ? q : p; });\n"
                           "    double sum = 0; %s sum += (double)h_exp(%s - m);\n"
                           "    sum = block_reduce(sum, [](double p, double q) { return p + q; "
                           "});\n",
                           loop, la, loop, la);
        if (op == HD_OP_SOFTMAX)
            hd_cuda_src_printf(s, "    %s O[bo + k * g.lo] = %s((C)(h_exp(%s - m) / (C)sum));\n",
                               loop, st_c[dt], la);
        else
            hd_cuda_src_printf(s, "    %s O[bo + k * g.lo] = %s((C)(%s - m - (C)log(sum)));\n",
                               loop, st_c[dt], la);
    } else if (op == HD_OP_SOFTMAX_BWD) { /* y * (g - sum(g * y)) */
        hd_cuda_src_printf(
            s,
            "    double sum = 0; %s sum += (double)%s * (double)%s;\n"
            "    sum = block_reduce(sum, [](double p, double q) { return p + q; });\n"
            "    %s O[bo + k * g.lo] = %s((C)(%s * (%s - (C)sum)));\n",
            loop, la, lb, loop, st_c[dt], la, lb);
    } else { /* log_softmax_bwd: g - exp(y) * sum(g) */
        hd_cuda_src_printf(
            s,
            "    double sum = 0; %s sum += (double)%s;\n"
            "    sum = block_reduce(sum, [](double p, double q) { return p + q; });\n"
            "    %s O[bo + k * g.lo] = %s((C)(%s - h_exp(%s) * (C)sum));\n",
            loop, lb, loop, st_c[dt], lb, la);
    }
    hd_cuda_src_printf(s, "  }\n}\n");
}

static int mod_rows(hd_cuda_src *s, hd_op op) {
    hd_cuda_src_printf(s, "%s", row_geo);
    for (int dt = HD_F16; dt <= HD_F64; dt++)
        if (cpu_ok(op, (hd_dtype)dt)) row_kernel(s, op, (hd_dtype)dt);
    return 1;
}

/* ---- argsort: a stable merge sort of each row's positions, one launch per
 * pass (runs of w merge into runs of 2 w): each thread places one element
 * of a run by counting, with a binary search, the elements of the other
 * run that go before it (the left run's first among equals). Pass 0 reads
 * positions as 0, 1, ...; the last writes through the output's strides.
 * Keys: i64 for integer dtypes, double for floats, NaN largest. ---- */

static void sort_kernel(hd_cuda_src *s, hd_dtype dt) {
    char name[96], key[64];
    int ints = !hd_dtype_is_float(dt);
    snprintf(key, sizeof key, ints ? "(K)(A[i])" : mo_ldd[dt], "A[i]");
    hd_cuda_src_printf(
        s,
        "extern \"C\" __global__ void %s(const SortGeo g, void *o_, const void *a_, const i64 "
        "*src, "
        "i64 *dst) {\n"
        "  typedef %s K; const %s *A = (const %s *)a_; i64 *O = (i64 *)o_;\n"
        "  auto key = [&](i64 i) -> K { return %s; };\n"
        "  auto before = [&](K x, K y) -> bool { return g.desc ? (x > y || (x != x && y == y)) : "
        "(x < y || (x == x && y != y)); };\n"
        "  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < g.rows * g.len; t += "
        "(i64)gridDim.x * blockDim.x) {\n"
        "    i64 r = t / g.len, p = t %% g.len, ba, bo, q = r; ba = bo = 0;\n"
        "    for (int d = g.nd - 1; d >= 0; d--) { i64 c = q %% g.shape[d]; q /= g.shape[d]; ba += "
        "c * g.sa[d]; bo += c * g.so[d]; }\n"
        "    const i64 *S = src + r * g.len;\n"
        "    i64 st = p / (2 * g.w) * (2 * g.w), m = st + g.w < g.len ? st + g.w : g.len, e = st + "
        "2 * g.w < g.len ? st + 2 * g.w : g.len;\n"
        "    i64 me = g.first ? p : S[p]; K k = key(ba + me * g.la); i64 lo, hi, pos;\n"
        "    if (p < m) { lo = m; hi = e; while (lo < hi) { i64 mid = (lo + hi) / 2; i64 j = "
        "g.first ? mid : S[mid];\n"
        "        if (before(key(ba + j * g.la), k)) lo = mid + 1; else hi = mid; } pos = p + (lo - "
        "m); }\n"
        "    else { lo = st; hi = m; while (lo < hi) { i64 mid = (lo + hi) / 2; i64 j = g.first ? "
        "mid : S[mid];\n"
        "        if (!before(k, key(ba + j * g.la))) lo = mid + 1; else hi = mid; } pos = st + (p "
        "- "
        "m) + (lo - st); }\n"
        "    if (g.last) O[bo + pos * g.lo] = me; else dst[r * g.len + pos] = me;\n"
        "  }\n}\n",
        hd_cuda_kernel_name(HD_OP_ARGSORT, dt, HD_I64, name, sizeof name),
        ints ? "long long" : "double", mo_store[dt], mo_store[dt], key);
}

static int mod_sort(hd_cuda_src *s) {
    hd_cuda_src_printf(s, "struct SortGeo { i64 rows, len; int nd, desc; i64 shape[8], sa[8], "
                          "so[8]; i64 la, lo, w; int first, last; };\n");
    for (int dt = 0; dt < HD_DTYPE_COUNT; dt++)
        if (cpu_ok(HD_OP_ARGSORT, (hd_dtype)dt)) sort_kernel(s, (hd_dtype)dt);
    return 1;
}

/* ---- creation: contiguous output of n elements ---- */

#define CREATE_PARAMS                                                                              \
    "(i64 n, void *o_, double s0, double s1, double s2, u64 key, u64 base, i64 cols, int exact, "  \
    "const u64 *kb_)"
/* the draws' key and base from device memory where kb_ is given (a CUDA
 * Graph's random nodes: the host writes them before each replay) */
#define RNG_FROM_DEVICE "  if (kb_) { key = kb_[0]; base = kb_[1]; }\n"

static void create_kernel(hd_cuda_src *s, hd_op op, hd_dtype dt) {
    char name[96];
    hd_cuda_src_printf(s,
                       "extern \"C\" __global__ void %s" CREATE_PARAMS " {\n"
                       "  %s *o = (%s *)o_; (void)s1; (void)s2; (void)key; (void)base; "
                       "(void)cols; (void)exact;\n" RNG_FROM_DEVICE
                       "  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += "
                       "(i64)gridDim.x * blockDim.x) {\n",
                       hd_cuda_kernel_name(op, dt, dt, name, sizeof name), mo_store[dt],
                       mo_store[dt]);
    const char *sfx = mo_sfx[dt];
    switch (op) {
    case HD_OP_FULL: hd_cuda_src_printf(s, "    o[i] = sd_%s(s0);\n", sfx); break;
    case HD_OP_ARANGE:
        hd_cuda_src_printf(s,
                           "    if (exact) { i64 v = (i64)s0 + i * (i64)s2; o[i] = %s%s%s; }\n"
                           "    else o[i] = sd_%s(s0 + (double)i * s2);\n",
                           dt == HD_I64 ? "" : "sd_", dt == HD_I64 ? "" : sfx,
                           dt == HD_I64 ? "v" : "((double)v)", sfx);
        break;
    case HD_OP_LINSPACE:
        hd_cuda_src_printf(s,
                           "    double v; if (n == 1) v = s0; else { double st = (s1 - s0) / "
                           "(double)(n - 1);\n"
                           "      v = i < n / 2 ? s0 + st * (double)i : s1 - st * (double)(n - 1 - "
                           "i); }\n"
                           "    o[i] = sd_%s(v);\n",
                           sfx);
        break;
    case HD_OP_EYE:
        hd_cuda_src_printf(s, "    o[i] = sd_%s(i / cols == i %% cols ? 1.0 : 0.0);\n", sfx);
        break;
    case HD_OP_RAND:
        if (dt == HD_F64)
            hd_cuda_src_printf(s, "    o[i] = rng_u64f(key, base, i);\n");
        else if (dt == HD_F32)
            hd_cuda_src_printf(s, "    o[i] = rng_u32f(key, base, i);\n");
        else /* halves: rounded, kept below 1 as the cpu does */
            hd_cuda_src_printf(
                s, "    u16 h = st_%s(rng_u32f(key, base, i)); o[i] = h == %s ? %s : h;\n", sfx,
                dt == HD_F16 ? "0x3c00" : "0x3f80", dt == HD_F16 ? "0x3bff" : "0x3f7f");
        break;
    default: /* randn: mean s0, std s1 */
        if (dt == HD_F64)
            hd_cuda_src_printf(s, "    o[i] = s0 + s1 * rng_normal(key, base, i);\n");
        else
            hd_cuda_src_printf(s,
                               "    float f = (float)(s0 + s1 * (double)(float)rng_normal(key, "
                               "base, i)); o[i] = %s(f);\n",
                               dt == HD_F32   ? ""
                               : dt == HD_F16 ? "st_f16"
                                              : "st_bf16");
        break;
    }
    hd_cuda_src_printf(s, "  }\n}\n");
}

static int mod_create(hd_cuda_src *s, hd_op op) {
    for (int dt = 0; dt < HD_DTYPE_COUNT; dt++)
        if (cpu_ok(op, (hd_dtype)dt)) create_kernel(s, op, (hd_dtype)dt);
    return 1;
}

/* ---- indexing: x contiguous as [pre, X, post], indices already checked
 * on the host; negative ones (index_select, index_add) count from the end
 * of X ---- */

#define INDEX_PARAMS "(i64 n, void *o_, const void *x_, const i64 *idx, i64 J, i64 X, i64 post)"

static void index_kernel(hd_cuda_src *s, hd_op op, hd_dtype dt) {
    char name[96];
    hd_cuda_src_printf(
        s,
        "extern \"C\" __global__ void %s" INDEX_PARAMS " {\n"
        "  %s *o = (%s *)o_; const %s *x = (const %s *)x_; (void)J; (void)X; "
        "(void)post; (void)x;\n"
        "  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += "
        "(i64)gridDim.x * blockDim.x) {\n",
        hd_cuda_kernel_name(op, dt, op == HD_OP_ONE_HOT ? HD_I64 : dt, name, sizeof name),
        mo_store[op == HD_OP_ONE_HOT ? HD_I64 : dt], mo_store[op == HD_OP_ONE_HOT ? HD_I64 : dt],
        mo_store[dt], mo_store[dt]);
    switch (op) {
    case HD_OP_INDEX_SELECT:
        hd_cuda_src_printf(s, "    i64 p = i %% post, t = i / post, j = t %% J, q = t / J;\n"
                              "    i64 k = idx[j] < 0 ? idx[j] + X : idx[j];\n"
                              "    o[i] = x[(q * X + k) * post + p];\n");
        break;
    case HD_OP_INDEX_ADD: /* i over src, laid out as [pre, J, post] */
        hd_cuda_src_printf(s, "    i64 p = i %% post, t = i / post, j = t %% J, q = t / J;\n"
                              "    i64 k = idx[j] < 0 ? idx[j] + X : idx[j];\n"
                              "    atomicAdd(&o[(q * X + k) * post + p], x[i]);\n");
        break;
    default: /* one_hot: J is the number of classes */
        hd_cuda_src_printf(s, "    o[i * J + idx[i]] = 1;\n");
        break;
    }
    hd_cuda_src_printf(s, "  }\n}\n");
    if (op != HD_OP_INDEX_SELECT) return;
    /* _pick: o[r] = x[r, idx[r]] of x [n, X] (cross_entropy's picks) */
    hd_cuda_src_printf(s,
                       "extern \"C\" __global__ void %s_pick" INDEX_PARAMS " {\n"
                       "  %s *o = (%s *)o_; const %s *x = (const %s *)x_; (void)J; (void)post;\n"
                       "  for (i64 r = blockIdx.x * (i64)blockDim.x + threadIdx.x; r < n; r += "
                       "(i64)gridDim.x * blockDim.x)\n"
                       "    o[r] = x[r * X + idx[r]];\n}\n",
                       name, mo_store[dt], mo_store[dt], mo_store[dt], mo_store[dt]);
}

static int mod_index(hd_cuda_src *s, hd_op op) {
    if (op == HD_OP_ONE_HOT) {
        index_kernel(s, op, HD_I64);
        return 1;
    }
    for (int dt = 0; dt < HD_DTYPE_COUNT; dt++)
        if (cpu_ok(op, (hd_dtype)dt)) index_kernel(s, op, (hd_dtype)dt);
    return 1;
}

/* ---- dropout and its backward: element i is dropped when the i-th f32
 * uniform of the draw (key, base) is below p, kept ones scale by
 * 1 / (1 - p) in double (cpu_nn_tmpl.h, cpu_grad_tmpl.h) ---- */

static void dropout_kernel(hd_cuda_src *s, hd_op op, hd_dtype dt) {
    char name[96];
    hd_cuda_src_printf(s,
                       "extern \"C\" __global__ void %s(i64 n, void *o_, const void *x_, double p, "
                       "u64 key, u64 base, const u64 *kb_) {\n"
                       "  %s *o = (%s *)o_; const %s *x = (const %s *)x_;\n" RNG_FROM_DEVICE
                       "  for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += "
                       "(i64)gridDim.x * blockDim.x) {\n"
                       "    double v = ",
                       hd_cuda_kernel_name(op, dt, dt, name, sizeof name), mo_store[dt],
                       mo_store[dt], mo_store[dt], mo_store[dt]);
    ld_double(s, dt, "x[i]");
    hd_cuda_src_printf(s,
                       "; float u = rng_u32f(key, base, i);\n"
                       "    o[i] = sd_%s(u < p ? 0.0 : %sv / (1.0 - p)); }\n}\n",
                       mo_sfx[dt], dt == HD_F64 ? "" : "(double)(float)");
}

static int mod_dropout(hd_cuda_src *s, hd_op op) {
    for (int dt = HD_F16; dt <= HD_F64; dt++)
        if (cpu_ok(op, (hd_dtype)dt)) dropout_kernel(s, op, (hd_dtype)dt);
    return 1;
}

/* ---- conv2d and the 2-d pools, with their gradients: one thread per
 * output element (a block per weight element for the weight's gradient,
 * whose sum runs over every image and position), direct loops over the
 * window as cpu_conv.c defines it: padding, stride, dilation, groups;
 * max pads with -inf and keeps NaN; avg divides by kh * kw. Sums of
 * products are in double; the pools and their gradients add in the cpu
 * kernels' order and type. ---- */

static const char conv_geo[] =
    "struct ConvGeo { i64 n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, cg, og; };\n"
    "struct PoolGeo { i64 planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw; };\n"
    /* the outputs q in [lo, hi] of n whose window (q * s - p, size k) holds i */
    "__device__ __forceinline__ void win_range(i64 i, i64 s, i64 p, i64 k, i64 n, i64 &lo, i64 "
    "&hi) {\n"
    "  i64 a = i + p - k + 1; lo = a <= 0 ? 0 : (a + s - 1) / s; hi = (i + p) / s;\n"
    "  if (hi > n - 1) hi = n - 1; }\n"
    "#define GRID_LOOP(t, total) for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < "
    "(total); t += (i64)gridDim.x * blockDim.x)\n"
    /* where in plane pl window (oh, ow) has its first maximum (NaN counts
     * as the maximum), as the cpu kernels scan */
    "template <class C> __device__ i64 pool_max_at(const C *A, const PoolGeo &g, i64 pl, i64 oh, "
    "i64 ow) {\n"
    "  i64 h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;\n"
    "  i64 h1 = h0 + g.kh < g.h ? h0 + g.kh : g.h, w1 = w0 + g.kw < g.w ? w0 + g.kw : g.w;\n"
    "  h0 = h0 < 0 ? 0 : h0; w0 = w0 < 0 ? 0 : w0;\n"
    "  C m = -(C)HD_INF; i64 at = h0 * g.w + w0;\n"
    "  for (i64 h = h0; h < h1; h++) for (i64 w = w0; w < w1; w++) {\n"
    "    C v = A[(pl * g.h + h) * g.w + w]; if (v > m || v != v) { m = v; at = h * g.w + w; } }\n"
    "  return at;\n}\n";

/* The kernel's header: typedef C, pointers O, and A, B, D (const). */
static void conv_head(hd_cuda_src *s, hd_op op, hd_dtype dt, const char *geo) {
    char name[96];
    const char *T = mo_store[dt];
    hd_cuda_src_printf(s,
                       "extern \"C\" __global__ void %s(const %s g, void *o_, const void *a_, "
                       "const void *b_, const void *d_) {\n"
                       "  typedef %s C; const %s *A = (const %s *)a_, *B = (const %s *)b_, *D = "
                       "(const %s *)d_; %s *O = (%s *)o_; (void)A; (void)B; (void)D;\n",
                       hd_cuda_kernel_name(op, dt, dt, name, sizeof name), geo,
                       dt == HD_F64 ? "double" : "float", T, T, T, T, T, T);
}

static void conv_store(hd_cuda_src *s, hd_dtype dt, const char *at, const char *v) {
    hd_cuda_src_printf(s, "    O[%s] = %s((C)(%s));\n", at, st_c[dt], v);
}

#define CONV_X "A[((n * g.c + grp * g.cg + c) * g.h + ih) * g.w + iw]"
#define CONV_W "B[((o * g.cg + c) * g.kh + i) * g.kw + j]"

/* y[n, o, oh, ow] = bias[o] + sum over c, i, j of x * w. A x, B w, D bias
 * or NULL. */
static void conv_fwd_kernel(hd_cuda_src *s, hd_dtype dt) {
    char lx[96], lw[96], lb[32];
    snprintf(lx, sizeof lx, ld_c[dt], CONV_X);
    snprintf(lw, sizeof lw, ld_c[dt], CONV_W);
    snprintf(lb, sizeof lb, ld_c[dt], "D[o]");
    conv_head(s, HD_OP_CONV2D, dt, "ConvGeo");
    hd_cuda_src_printf(
        s,
        "  GRID_LOOP(t, g.n * g.o * g.oh * g.ow) {\n"
        "    i64 ow = t %% g.ow, oh = (t / g.ow) %% g.oh, o = (t / (g.ow * g.oh)) %% g.o, n = t / "
        "(g.ow * g.oh * g.o), grp = o / g.og;\n"
        "    double acc = D ? (double)%s : 0.0;\n"
        "    for (i64 c = 0; c < g.cg; c++) for (i64 i = 0; i < g.kh; i++) {\n"
        "      i64 ih = oh * g.sh - g.ph + i * g.dh; if (ih < 0 || ih >= g.h) continue;\n"
        "      for (i64 j = 0; j < g.kw; j++) {\n"
        "        i64 iw = ow * g.sw - g.pw + j * g.dw; if (iw < 0 || iw >= g.w) continue;\n"
        "        acc += (double)%s * (double)%s; } }\n",
        lb, lx, lw);
    conv_store(s, dt, "t", "acc");
    hd_cuda_src_printf(s, "  }\n}\n");
}

/* dx[n, c, ih, iw] = sum over the outputs and kernel taps that read it of
 * g * w. A g [n, o, oh, ow], B w. */
static void conv_bwd_input_kernel(hd_cuda_src *s, hd_dtype dt) {
    conv_head(s, HD_OP_CONV2D_BWD_INPUT, dt, "ConvGeo");
    hd_cuda_src_printf(
        s,
        "  GRID_LOOP(t, g.n * g.c * g.h * g.w) {\n"
        "    i64 iw = t %% g.w, ih = (t / g.w) %% g.h, ch = (t / (g.w * g.h)) %% g.c, n = t / (g.w "
        "* g.h * g.c);\n"
        "    i64 grp = ch / g.cg, c = ch %% g.cg; double acc = 0;\n"
        "    for (i64 o = grp * g.og; o < (grp + 1) * g.og; o++) for (i64 i = 0; i < g.kh; i++) {\n"
        "      i64 th = ih + g.ph - i * g.dh; if (th < 0 || th %% g.sh) continue;\n"
        "      i64 oh = th / g.sh; if (oh >= g.oh) continue;\n"
        "      for (i64 j = 0; j < g.kw; j++) {\n"
        "        i64 tw = iw + g.pw - j * g.dw; if (tw < 0 || tw %% g.sw) continue;\n"
        "        i64 ow = tw / g.sw; if (ow >= g.ow) continue;\n"
        "        acc += (double)A[((n * g.o + o) * g.oh + oh) * g.ow + ow] * (double)" CONV_W
        "; } }\n");
    conv_store(s, dt, "t", "acc");
    hd_cuda_src_printf(s, "  }\n}\n");
}

/* dw[o, c, i, j] = sum over images and output positions of x * g: one
 * block per weight element. A x, B g. */
static void conv_bwd_weight_kernel(hd_cuda_src *s, hd_dtype dt) {
    conv_head(s, HD_OP_CONV2D_BWD_WEIGHT, dt, "ConvGeo");
    hd_cuda_src_printf(
        s,
        "  i64 nw = g.o * g.cg * g.kh * g.kw, np = g.n * g.oh * g.ow;\n"
        "  for (i64 t = blockIdx.x; t < nw; t += gridDim.x) {\n"
        "    i64 j = t %% g.kw, i = (t / g.kw) %% g.kh, c = (t / (g.kw * g.kh)) %% g.cg, o = t / "
        "(g.kw * g.kh * g.cg), grp = o / g.og;\n"
        "    double acc = 0;\n"
        "    for (i64 q = threadIdx.x; q < np; q += blockDim.x) {\n"
        "      i64 ow = q %% g.ow, oh = (q / g.ow) %% g.oh, n = q / (g.ow * g.oh);\n"
        "      i64 ih = oh * g.sh - g.ph + i * g.dh, iw = ow * g.sw - g.pw + j * g.dw;\n"
        "      if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;\n"
        "      acc += (double)" CONV_X " * (double)B[((n * g.o + o) * g.oh + oh) * g.ow + ow]; }\n"
        "    acc = block_reduce(acc, [](double p, double q) { return p + q; });\n"
        "    if (threadIdx.x == 0) O[t] = (C)acc;\n"
        "  }\n}\n");
}

/* max or avg over each output's window. A x [planes, h, w]. */
static void pool_fwd_kernel(hd_cuda_src *s, hd_op op, hd_dtype dt) {
    char lx[64];
    snprintf(lx, sizeof lx, ld_c[dt], "A[(pl * g.h + h) * g.w + iw]");
    int max = op == HD_OP_MAX_POOL2D;
    conv_head(s, op, dt, "PoolGeo");
    hd_cuda_src_printf(
        s,
        "  GRID_LOOP(t, g.planes * g.oh * g.ow) {\n"
        "    i64 ow = t %% g.ow, oh = (t / g.ow) %% g.oh, pl = t / (g.ow * g.oh);\n"
        "    i64 h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw, h1 = h0 + g.kh < g.h ? h0 + g.kh : "
        "g.h;\n"
        "    C m = %s;\n"
        "    for (i64 h = h0 < 0 ? 0 : h0; h < h1; h++) for (i64 j = 0; j < g.kw; j++) {\n"
        "      i64 iw = w0 + j; if (iw < 0 || iw >= g.w) continue;\n"
        "      C v = %s; %s }\n",
        max ? "-(C)HD_INF" : "0", lx, max ? "m = (v > m || v != v) ? v : m;" : "m += v;");
    if (!max) hd_cuda_src_printf(s, "    m *= (C)(1.0 / (double)(g.kh * g.kw));\n");
    conv_store(s, dt, "t", "m");
    hd_cuda_src_printf(s, "  }\n}\n");
}

/* dx[pl, ih, iw]: the gradients of the windows holding it, in the cpu
 * kernel's order (oh, then ow); max: only the windows whose first maximum
 * (as the cpu kernel scans) it is. max: A x, B g; avg: A g. */
static void pool_bwd_kernel(hd_cuda_src *s, hd_op op, hd_dtype dt) {
    int max = op == HD_OP_MAX_POOL2D_BWD;
    conv_head(s, op, dt, "PoolGeo");
    hd_cuda_src_printf(
        s, "  GRID_LOOP(t, g.planes * g.h * g.w) {\n"
           "    i64 iw = t %% g.w, ih = (t / g.w) %% g.h, pl = t / (g.w * g.h);\n"
           "    i64 ohl, ohh, owl, owh; C acc = 0;\n"
           "    win_range(ih, g.sh, g.ph, g.kh, g.oh, ohl, ohh);\n"
           "    win_range(iw, g.sw, g.pw, g.kw, g.ow, owl, owh);\n"
           "    for (i64 oh = ohl; oh <= ohh; oh++) for (i64 ow = owl; ow <= owh; ow++) "
           "{\n");
    if (max)
        hd_cuda_src_printf(s, "      if (pool_max_at(A, g, pl, oh, ow) == ih * g.w + iw) acc += "
                              "B[(pl * g.oh + oh) * g.ow + ow];\n");
    else
        hd_cuda_src_printf(s, "      acc += (C)((double)A[(pl * g.oh + oh) * g.ow + ow] * (1.0 / "
                              "(double)(g.kh * g.kw)));\n");
    hd_cuda_src_printf(s, "    }\n    O[t] = acc;\n  }\n}\n");
}

/* max_pool2d_select: B (h) at each window's first maximum of A (x), as
 * the cpu kernel scans */
static void pool_sel_kernel(hd_cuda_src *s, hd_dtype dt) {
    conv_head(s, HD_OP_MAX_POOL2D_SEL, dt, "PoolGeo");
    hd_cuda_src_printf(s,
                       "  GRID_LOOP(t, g.planes * g.oh * g.ow) {\n"
                       "    i64 ow = t %% g.ow, oh = (t / g.ow) %% g.oh, pl = t / (g.ow * g.oh);\n"
                       "    O[t] = B[pl * g.h * g.w + pool_max_at(A, g, pl, oh, ow)];\n  }\n}\n");
}

int hd_cuda_is_conv(hd_op op) {
    switch (op) {
    case HD_OP_CONV2D:
    case HD_OP_MAX_POOL2D:
    case HD_OP_AVG_POOL2D:
    case HD_OP_CONV2D_BWD_INPUT:
    case HD_OP_CONV2D_BWD_WEIGHT:
    case HD_OP_MAX_POOL2D_BWD:
    case HD_OP_MAX_POOL2D_SEL:
    case HD_OP_AVG_POOL2D_BWD: return 1;
    default: return 0;
    }
}

static int mod_conv(hd_cuda_src *s, hd_op op) {
    hd_cuda_src_printf(s, "%s", conv_geo);
    for (int dt = HD_F16; dt <= HD_F64; dt++) {
        if (!cpu_ok(op, (hd_dtype)dt)) continue;
        switch (op) {
        case HD_OP_CONV2D: conv_fwd_kernel(s, (hd_dtype)dt); break;
        case HD_OP_CONV2D_BWD_INPUT: conv_bwd_input_kernel(s, (hd_dtype)dt); break;
        case HD_OP_CONV2D_BWD_WEIGHT: conv_bwd_weight_kernel(s, (hd_dtype)dt); break;
        case HD_OP_MAX_POOL2D:
        case HD_OP_AVG_POOL2D: pool_fwd_kernel(s, op, (hd_dtype)dt); break;
        case HD_OP_MAX_POOL2D_SEL: pool_sel_kernel(s, (hd_dtype)dt); break;
        default: pool_bwd_kernel(s, op, (hd_dtype)dt); break;
        }
    }
    return 1;
}

/* ---- layer_norm over rows of d contiguous elements, as cpu_nn: mean and
 * biased variance in double (two passes), y = (x - mean) rstd [* w + b]
 * in the working type; the backward in double: dx = rstd (g w - mean(g
 * w)) - (x - mean) rstd^3 mean(g w (x - mean)); dw = sum over rows of g
 * xhat, from per-row statistics (k_layer_norm_stats_<t>) then one block
 * per column (k_layer_norm_dw_<t>). A block per row. ---- */

static const char ln_geo[] =
    "struct LnGeo { i64 rows, d; double eps; };\n"
    "#define LN_ADD [](double p, double q) { return p + q; }\n"
    /* the mean and 1 / sqrt(biased var + eps) of row xr (every thread) */
    "template <class T, class L> __device__ void ln_stats(const T *xr, i64 d, double eps, L ld, "
    "double &m, double &rs) {\n"
    "  double s = 0; for (i64 k = threadIdx.x; k < d; k += blockDim.x) s += (double)ld(xr[k]);\n"
    "  m = block_reduce(s, LN_ADD) / (double)d;\n"
    "  double v = 0; for (i64 k = threadIdx.x; k < d; k += blockDim.x) { double t = "
    "(double)ld(xr[k]) - m; v += t * t; }\n"
    "  rs = 1.0 / sqrt(block_reduce(v, LN_ADD) / (double)d + eps); }\n";

static void ln_kernels(hd_cuda_src *s, hd_op op, hd_dtype dt) {
    char name[96], ld[64];
    const char *T = mo_store[dt], *C = dt == HD_F64 ? "double" : "float";
    snprintf(ld, sizeof ld, ld_c[dt], "v");
    hd_cuda_src_printf(s,
                       "extern \"C\" __global__ void %s(const LnGeo g, void *o_, const void *a_, "
                       "const void *b_, const void *d_) {\n"
                       "  typedef %s C; const %s *A = (const %s *)a_, *B = (const %s *)b_, *D = "
                       "(const %s *)d_; %s *O = (%s *)o_;\n"
                       "  auto ld = [](%s v) { return (C)%s; };\n"
                       "  for (i64 r = blockIdx.x; r < g.rows; r += gridDim.x) {\n"
                       "    const %s *xr = A + r * g.d; double m, rs; ln_stats(xr, g.d, g.eps, ld, "
                       "m, rs);\n",
                       hd_cuda_kernel_name(op, dt, dt, name, sizeof name), C, T, T, T, T, T, T, T,
                       ld, T);
    if (op == HD_OP_LAYER_NORM) /* A x, B w, D b (both or neither) */
        hd_cuda_src_printf(
            s,
            "    C mu = (C)m, r1 = (C)rs;\n"
            "    for (i64 k = threadIdx.x; k < g.d; k += blockDim.x) {\n"
            "      C y = (ld(xr[k]) - mu) * r1; if (B) y = y * ld(B[k]) + ld(D[k]);\n"
            "      O[r * g.d + k] = %s(y); }\n  }\n}\n",
            st_c[dt]);
    else /* dx: A x, B g, D w or NULL */
        hd_cuda_src_printf(
            s,
            "    const %s *gr = B + r * g.d; double a = 0, b = 0;\n"
            "    for (i64 k = threadIdx.x; k < g.d; k += blockDim.x) {\n"
            "      double gw = (double)gr[k] * (D ? (double)D[k] : 1.0); a += gw; b += gw * "
            "((double)xr[k] - m); }\n"
            "    a = block_reduce(a, LN_ADD); b = block_reduce(b, LN_ADD);\n"
            "    double c0 = rs * a / (double)g.d, c1 = rs * rs * rs * b / (double)g.d;\n"
            "    for (i64 k = threadIdx.x; k < g.d; k += blockDim.x)\n"
            "      O[r * g.d + k] = (C)(rs * (double)gr[k] * (D ? (double)D[k] : 1.0) - c0 - "
            "((double)xr[k] - m) * c1);\n  }\n}\n",
            T);
    if (op != HD_OP_LAYER_NORM_BWD) return;
    /* dw: the rows' statistics into st [rows, 2], then a block per column */
    hd_cuda_src_printf(
        s,
        "extern \"C\" __global__ void k_layer_norm_stats_%s(const LnGeo g, double *st, const void "
        "*a_) {\n"
        "  const %s *A = (const %s *)a_; auto ld = [](%s v) { return (double)v; };\n"
        "  for (i64 r = blockIdx.x; r < g.rows; r += gridDim.x) { double m, rs;\n"
        "    ln_stats(A + r * g.d, g.d, g.eps, ld, m, rs);\n"
        "    if (threadIdx.x == 0) { st[2 * r] = m; st[2 * r + 1] = rs; } }\n}\n"
        "extern \"C\" __global__ void k_layer_norm_dw_%s(const LnGeo g, void *o_, const double "
        "*st, const void *a_, const void *b_) {\n"
        "  const %s *A = (const %s *)a_, *B = (const %s *)b_; %s *O = (%s *)o_;\n"
        "  for (i64 j = blockIdx.x; j < g.d; j += gridDim.x) { double acc = 0;\n"
        "    for (i64 r = threadIdx.x; r < g.rows; r += blockDim.x)\n"
        "      acc += (double)B[r * g.d + j] * ((double)A[r * g.d + j] - st[2 * r]) * st[2 * r + "
        "1];\n"
        "    acc = block_reduce(acc, LN_ADD); if (threadIdx.x == 0) O[j] = (%s)acc; }\n}\n",
        hd_dtype_name(dt), T, T, T, hd_dtype_name(dt), T, T, T, T, T, T);
}

static int mod_layer_norm(hd_cuda_src *s, hd_op op) {
    hd_cuda_src_printf(s, "%s", ln_geo);
    for (int dt = HD_F16; dt <= HD_F64; dt++)
        if (cpu_ok(op, (hd_dtype)dt)) ln_kernels(s, op, (hd_dtype)dt);
    return 1;
}

/* ---- integer matmul (floats go through cuBLAS): products summed in
 * wrapping u64, as cpu_matmul's loops; contiguous [batch, m, k] and
 * [batch, k, n] operands with batch strides (0: broadcast) ---- */

static void mm_int_kernel(hd_cuda_src *s, hd_dtype dt) {
    char name[96];
    const char *T = mo_store[dt];
    hd_cuda_src_printf(
        s,
        "extern \"C\" __global__ void %s(const MmGeo g, void *o_, const void *a_, const void *b_) "
        "{\n"
        "  const %s *A = (const %s *)a_, *B = (const %s *)b_; %s *O = (%s *)o_;\n"
        "  for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < g.batch * g.m * g.n; t += "
        "(i64)gridDim.x * blockDim.x) {\n"
        "    i64 j = t %% g.n, i = (t / g.n) %% g.m, b = t / (g.n * g.m);\n"
        "    const %s *ar = A + b * g.sa + i * g.k, *bc = B + b * g.sb + j; u64 acc = 0;\n"
        "    for (i64 k = 0; k < g.k; k++) acc += (u64)(i64)ar[k] * (u64)(i64)bc[k * g.n];\n"
        "    O[t] = (%s)acc; }\n}\n",
        hd_cuda_kernel_name(HD_OP_MATMUL, dt, dt, name, sizeof name), T, T, T, T, T, T, T);
}

static int mod_matmul(hd_cuda_src *s) {
    hd_cuda_src_printf(s, "struct MmGeo { i64 batch, m, n, k, sa, sb; };\n");
    for (int dt = 0; dt < HD_DTYPE_COUNT; dt++)
        if (!hd_dtype_is_float((hd_dtype)dt) && cpu_ok(HD_OP_MATMUL, (hd_dtype)dt))
            mm_int_kernel(s, (hd_dtype)dt);
    return 1;
}

int hd_cuda_src_other(hd_cuda_src *s, hd_op op) {
    switch (op) {
    case HD_OP_SOFTMAX:
    case HD_OP_LOG_SOFTMAX:
    case HD_OP_SOFTMAX_BWD:
    case HD_OP_LOG_SOFTMAX_BWD:
    case HD_OP_CUMSUM:
    case HD_OP_CUMPROD:
    case HD_OP_CUMPROD_BWD: return mod_rows(s, op);
    case HD_OP_INDEX_SELECT:
    case HD_OP_INDEX_ADD:
    case HD_OP_ONE_HOT: return mod_index(s, op);
    case HD_OP_DROPOUT:
    case HD_OP_DROPOUT_BWD: return mod_dropout(s, op);
    case HD_OP_LAYER_NORM:
    case HD_OP_LAYER_NORM_BWD: return mod_layer_norm(s, op);
    case HD_OP_MATMUL: return mod_matmul(s);
    case HD_OP_ARGSORT: return mod_sort(s);
    default: break;
    }
    if (hd_cuda_is_conv(op)) return mod_conv(s, op);
    if (hd_op_infos[op].kind == HD_KIND_CREATE) return mod_create(s, op);
    return 0;
}

/* Ops run by a kernel of their own; the others of cuda_ops.c's list are
 * compositions of these (cross_entropy, mse and its gradient) or copies
 * (assign, concat, matmul through cuBLAS). */
int hd_cuda_has_op(hd_op op) {
    return (unsigned)op < HD_OP_COUNT && hd_op_infos[op].kind != HD_KIND_VIEW;
}

/* Does op have a generated module (else it is composed or copied)? */
int hd_cuda_op_generated(hd_op op) {
    switch (hd_op_infos[op].kind) {
    case HD_KIND_UNARY:
    case HD_KIND_BINARY:
    case HD_KIND_COMPARE:
    case HD_KIND_TERNARY:
    case HD_KIND_REDUCE:
    case HD_KIND_CREATE: return 1;
    default: break;
    }
    switch (op) {
    case HD_OP_SOFTMAX:
    case HD_OP_LOG_SOFTMAX:
    case HD_OP_SOFTMAX_BWD:
    case HD_OP_LOG_SOFTMAX_BWD:
    case HD_OP_CUMSUM:
    case HD_OP_CUMPROD:
    case HD_OP_CUMPROD_BWD:
    case HD_OP_INDEX_SELECT:
    case HD_OP_INDEX_ADD:
    case HD_OP_ONE_HOT:
    case HD_OP_DROPOUT:
    case HD_OP_DROPOUT_BWD:
    case HD_OP_GELU_BWD:
    case HD_OP_TANH_BWD:
    case HD_OP_SIGMOID_BWD:
    case HD_OP_LAYER_NORM:
    case HD_OP_LAYER_NORM_BWD:
    case HD_OP_ARGSORT:
    case HD_OP_MATMUL: return 1; /* integer dtypes only: floats go through cuBLAS */
    default: return hd_cuda_is_conv(op);
    }
}
