/* What generated code calls back: nodes the runtime runs (matmul has its
 * own entry, hd_llvm_gemm.c), the parallel loop over a kernel's outermost
 * dim, integer pow; and the table of every
 * external symbol the JIT links generated code against (no lookup in the
 * process's dynamic symbols is needed for these). */
#include "hd_llvm.h"
#include "hd_loop.h"

#if HODU_HAVE_LLVM

#include "hd_special.h"

#include <math.h>
#include <string.h>

/* Run node `node` with the backend's kernel (or call its callback).
 * Returns an hd_status; the message is in the run's context. */
int32_t hd_llvm_rt_node(void *p, int32_t node) {
    hd_llvm_rt *rt = p;
    const hd_ir_node *n = &rt->g->nodes[node];
    hd_tensor **in = rt->node_in[node];
    if (n->op == HD_IR_CALLBACK) return (int32_t)n->cb.fn(rt->ctx, n->cb.ud, in, n->nin);
    if (n->op == HD_IR_LOOP)
        return (int32_t)hd_jit_loop_run(rt->ctx, n, in, n->nin, rt->vals[n->out]);
    return (int32_t)rt->be->run_op(rt->ctx, (hd_op)n->op, rt->vals[n->out], in, n->nin, &n->attrs);
}

/* Start of part t of nt of [0, n), a multiple of align (but the ends). */
static int64_t rt_part(int64_t n, int t, int nt, int64_t align) {
    if (t >= nt) return n;
    int64_t q = n / nt, r = n % nt;
    int64_t lo = q * t + (t < r ? t : r);
    lo -= lo % align;
    return lo;
}

/* fn over [0, n) of its outermost loop, split across the context's
 * threads (OpenMP), chunk starts aligned to `align` elements. */
void hd_llvm_rt_parallel(void *p, hd_llvm_kernel_fn fn, void **slots, int64_t n, int64_t align) {
    hd_llvm_rt *rt = p;
    int nt = rt->ctx->nthreads;
    if (nt > n) nt = (int)n;
    if (nt <= 1) {
        fn(slots, 0, n);
        return;
    }
    if (align < 1) align = 1;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        int64_t lo = rt_part(n, t, nt, align), hi = rt_part(n, t + 1, nt, align);
        if (lo < hi) fn(slots, lo, hi);
    }
}

/* At most this many parts, of at least RT_PART_MIN elements each. */
#define RT_PARTS    64
#define RT_PART_MIN ((int64_t)1 << 16)

void hd_llvm_rt_reduce(void *p, hd_llvm_part_fn part, hd_llvm_fin_fn fin, void **slots, int64_t n) {
    hd_llvm_rt *rt = p;
    uint64_t accs[RT_PARTS];
    int64_t most = n / RT_PART_MIN;
    int nt = rt->ctx->nthreads;
    if (nt > RT_PARTS) nt = RT_PARTS;
    if (nt > most) nt = most < 1 ? 1 : (int)most;
    if (nt <= 1) {
        part(slots, 0, n, accs);
        fin(slots, accs, 1);
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++)
        part(slots, rt_part(n, t, nt, 16), rt_part(n, t + 1, nt, 16), &accs[t]);
    fin(slots, accs, nt);
}

/* Integer pow as the eager kernels compute it: by squaring, wrapping (the
 * caller truncates to the dtype, which gives the same bits as squaring in
 * the narrow type); a negative exponent gives 0 but for bases 1 and -1. */
int64_t hd_llvm_rt_ipow(int64_t a, int64_t b, int32_t dtype) {
    HD_UNUSED(dtype);
    if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    uint64_t r = 1, x = (uint64_t)a;
    for (; b; b >>= 1) {
        if (b & 1) r *= x;
        x *= x;
    }
    return (int64_t)r;
}

#define SYM(f)                                                                                     \
    { #f, (void *)(f) }

static const hd_llvm_symbol rt_symbols[] = {
    SYM(hd_llvm_rt_node),
    SYM(hd_llvm_rt_gemm),
    SYM(hd_llvm_rt_parallel),
    SYM(hd_llvm_rt_reduce),
    SYM(hd_llvm_rt_ipow),
    SYM(expf),
    SYM(fmaf), /* llvm.fma where the host has no FMA instructions */
    SYM(fma),
    SYM(exp),
    SYM(logf),
    SYM(log),
    SYM(sinf),
    SYM(sin),
    SYM(cosf),
    SYM(cos),
    SYM(tanh),
    SYM(erfcf),
    SYM(erfc),
    SYM(erff),
    SYM(erf),
    SYM(hd_lgammaf),
    SYM(hd_lgamma),
    SYM(hd_polygammaf),
    SYM(hd_polygamma),
    SYM(atan2f),
    SYM(atan2),
    SYM(log1pf),
    SYM(log1p),
    SYM(fmodf),
    SYM(fmod),
    SYM(powf),
    SYM(pow),
    SYM(memcpy),
    SYM(memset),
    SYM(memmove),
};

const hd_llvm_symbol *hd_llvm_symbols(int *n) {
    *n = (int)(sizeof rt_symbols / sizeof *rt_symbols);
    return rt_symbols;
}

#endif /* HODU_HAVE_LLVM */
