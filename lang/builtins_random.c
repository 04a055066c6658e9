/* multinomial(probs, num_samples, replacement = false), as
 * torch.multinomial: class indices drawn in proportion to each row of
 * probs (any non-negative weights), from the Philox stream through the
 * op table's rand, so a seed gives the same draws on every device and in
 * compiled code.
 *
 * With replacement: inverse-CDF sampling. The running sums of a row,
 * divided by their last (so it is exactly 1), against one uniform draw u
 * per sample: the index is the number of sums <= u, the first class whose
 * sum passes u (a class of weight 0 never does). That compares every draw
 * with every class: N * k * C elements, refused past 2^31.
 * Without replacement: the Gumbel-top-k trick. Each class gets the key
 * log(p) - log(-log(u)) and the k largest keys win (Kool et al. 2019:
 * distributed as k draws without replacement); weight 0 is a key of
 * -inf, never among the k when the row has k positive weights. */
#include "builtins_tensor.h"
#include "hd_backend.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MULTI_CMP_MAX (INT64_C(1) << 31)

/* Each row finite, >= 0, with a positive sum, and (without replacement)
 * at least k positive weights; ud: k * 2 + replacement. */
static hd_status multi_values(hd_ctx *ctx, void *ud, hd_tensor *const *args, int nargs) {
    HD_UNUSED(nargs);
    uintptr_t code = (uintptr_t)ud;
    int64_t k = (int64_t)(code >> 1), c = args[0]->shape[args[0]->ndim - 1];
    int repl = (int)(code & 1);
    hd_tensor *h = hd_tensor_to_host(ctx, args[0]);
    if (!h) return ctx->status;
    hd_status st = HD_OK;
    for (int64_t r = 0; c && r < h->numel / c && !st; r++) {
        double sum = 0;
        int64_t pos = 0;
        for (int64_t j = 0; j < c && !st; j++) {
            double v = hd_tensor_get(h, r * c + j);
            if (!(v >= 0) || isinf(v))
                st = hd_error(ctx, HD_ERR_RUNTIME,
                              "multinomial: weights must be finite and >= 0, got %g in row %lld", v,
                              (long long)r);
            sum += v, pos += v > 0;
        }
        if (!st && !(sum > 0))
            st = hd_error(ctx, HD_ERR_RUNTIME, "multinomial: row %lld sums to 0", (long long)r);
        if (!st && !repl && pos < k)
            st = hd_error(ctx, HD_ERR_RUNTIME,
                          "multinomial: row %lld has %lld positive weights, fewer than the %lld "
                          "samples drawn without replacement (use replacement = true)",
                          (long long)r, (long long)pos, (long long)k);
    }
    hd_tensor_unref(h);
    return st;
}

/* now when p's values are known, else as a step of the compiled code */
static hd_status multi_check(hd_vm *vm, hd_tensor *p, int64_t k, int repl) {
    void *ud = (void *)(uintptr_t)(((uint64_t)k << 1) | (uint64_t)repl);
    return hd_tcheck_values(vm, "multinomial", "multinomial check", p, multi_values, ud);
}

typedef struct multi_run {
    hd_vm *vm;
    hd_status st;
    hd_place place; /* p's: where the draws are made */
} multi_run;

/* op on (a, b) with attributes at (any may be NULL); takes neither */
static hd_tensor *mr_op(multi_run *m, hd_op op, hd_tensor *a, hd_tensor *b, const hd_attrs *at) {
    hd_tensor *in[2] = {a, b}, *r = NULL;
    if (m->st) return NULL;
    hd_ctx *ctx = hd_vm_ctx(m->vm);
    hd_place prev = hd_place_push(ctx, m->place.backend, m->place.device);
    m->st = hd_trun_t(m->vm, "multinomial", op, a ? in : NULL, a ? (b ? 2 : 1) : 0, at, &r);
    hd_place_pop(ctx, prev);
    return r;
}

static hd_tensor *mr_shaped(multi_run *m, hd_op op, hd_tensor *a, const int64_t *shape, int nd,
                            hd_dtype dt) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = nd;
    memcpy(at.shape, shape, (size_t)nd * sizeof *shape);
    at.dtype = dt;
    at.scalar[1] = 1; /* rand: [0, 1) */
    return mr_op(m, op, a, NULL, &at);
}

static hd_tensor *mr_axis(multi_run *m, hd_op op, hd_tensor *a, int keep, int64_t i1) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.naxes = 1, at.axes[0] = -1, at.keepdim = keep;
    at.ints[0] = -1, at.ints[1] = i1;
    return mr_op(m, op, a, NULL, &at);
}

/* k indices per row of q ([n, c], f64) with replacement */
static hd_tensor *multi_with(multi_run *m, hd_tensor *q, int64_t n, int64_t c, int64_t k) {
    hd_tensor *cdf = mr_axis(m, HD_OP_CUMSUM, q, 0, 0), *last = NULL, *u = NULL, *le = NULL;
    if (cdf && hd_tslice_axis(hd_vm_ctx(m->vm), cdf, 1, c - 1, 1, 0, &last))
        m->st = hd_tfail(m->vm, "multinomial");
    hd_tensor *norm = mr_op(m, HD_OP_DIV, cdf, last, NULL);
    hd_tensor *cdf3 = norm ? mr_shaped(m, HD_OP_RESHAPE, norm, (int64_t[]){n, 1, c}, 3, 0) : NULL;
    u = mr_shaped(m, HD_OP_RAND, NULL, (int64_t[]){n, k, 1}, 3, HD_F64);
    le = mr_op(m, HD_OP_LE, cdf3, u, NULL);
    hd_attrs cast;
    memset(&cast, 0, sizeof cast);
    cast.dtype = HD_I64;
    hd_tensor *li = mr_op(m, HD_OP_CAST, le, NULL, &cast);
    hd_tensor *idx = mr_axis(m, HD_OP_SUM, li, 0, 0);
    hd_tensor *t[7] = {cdf, last, norm, cdf3, u, le, li};
    hd_tunref_all(t, 7);
    return idx;
}

/* k indices per row of q ([n, c], f64) without replacement */
static hd_tensor *multi_without(multi_run *m, hd_tensor *q, int64_t n, int64_t c, int64_t k) {
    hd_tensor *u = mr_shaped(m, HD_OP_RAND, NULL, (int64_t[]){n, c}, 2, HD_F64);
    hd_tensor *lu = mr_op(m, HD_OP_LOG, u, NULL, NULL), *nl = mr_op(m, HD_OP_NEG, lu, NULL, NULL);
    hd_tensor *g = mr_op(m, HD_OP_LOG, nl, NULL, NULL), *lp = mr_op(m, HD_OP_LOG, q, NULL, NULL);
    hd_tensor *keys = mr_op(m, HD_OP_SUB, lp, g, NULL);
    hd_tensor *order = mr_axis(m, HD_OP_ARGSORT, keys, 0, 1), *idx = NULL;
    if (order && hd_tslice_axis(hd_vm_ctx(m->vm), order, 1, 0, k, 0, &idx))
        m->st = hd_tfail(m->vm, "multinomial");
    hd_tensor *t[7] = {u, lu, nl, g, lp, keys, order};
    hd_tunref_all(t, 7);
    return idx;
}

static hd_status multi_args(hd_vm *vm, hd_targs *a, hd_tensor **p, int64_t *k, int *repl) {
    if (hd_targ_tensor(vm, a, 0, p) || hd_targ_int(vm, a, 1, 0, k) ||
        hd_targ_bool(vm, a, 2, 0, repl))
        return HD_ERR_RUNTIME;
    const hd_tensor *t = *p;
    int64_t c = t->ndim ? t->shape[t->ndim - 1] : 0, n = t->ndim == 2 ? t->shape[0] : 1;
    if (!hd_dtype_is_float(t->dtype))
        return hd_vm_error(vm, HD_ERR_RUNTIME, "multinomial: probs must be a float tensor, got %s",
                           hd_dtype_name(t->dtype));
    if (t->ndim != 1 && t->ndim != 2)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "multinomial: probs must be 1-D or 2-D (rows of weights), got %d dims",
                           t->ndim);
    if (c == 0) return hd_vm_error(vm, HD_ERR_RUNTIME, "multinomial: no classes");
    if (*k <= 0)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "multinomial: num_samples must be positive, got %lld", (long long)*k);
    if (!*repl && *k > c)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "multinomial: %lld samples without replacement from %lld classes "
                           "(use replacement = true)",
                           (long long)*k, (long long)c);
    if (*repl && (double)n * (double)*k * (double)c > (double)MULTI_CMP_MAX)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "multinomial: %lld rows x %lld samples x %lld classes is over 2^31 "
                           "comparisons; draw the samples in parts",
                           (long long)n, (long long)*k, (long long)c);
    return HD_OK;
}

static HD_TF_FN(tf_multinomial) {
    HD_TARGS_BIND(a); /* probs, num_samples, replacement= */
    hd_tensor *p = NULL, *q = NULL, *f = NULL, *idx = NULL, *r = NULL;
    int64_t k = 0;
    int repl = 0;
    hd_status st = multi_args(vm, &a, &p, &k, &repl);
    if (!st) st = multi_check(vm, p, k, repl);
    multi_run m = {vm, st, hd_place_of(p)};
    if (!m.place.backend) m.place.backend = &hd_cpu_backend;
    int64_t c = p ? p->shape[p->ndim - 1] : 0, n = p && p->ndim == 2 ? p->shape[0] : 1;
    hd_attrs cast;
    memset(&cast, 0, sizeof cast);
    cast.dtype = HD_F64;
    if (!m.st) f = mr_op(&m, HD_OP_CAST, p, NULL, &cast);
    if (f) q = mr_shaped(&m, HD_OP_RESHAPE, f, (int64_t[]){n, c}, 2, 0);
    if (q) idx = repl ? multi_with(&m, q, n, c, k) : multi_without(&m, q, n, c, k);
    if (idx) r = p->ndim == 1 ? mr_shaped(&m, HD_OP_RESHAPE, idx, &k, 1, 0) : hd_tensor_ref(idx);
    hd_tensor *t[4] = {p, f, q, idx};
    hd_tunref_all(t, 4);
    if (m.st) return hd_tensor_unref(r), m.st;
    *out = hd_tensor_value(r);
    return HD_OK;
}

static const hd_tfunc rows[] = {
    {"multinomial", tf_multinomial, "probs, num_samples, replacement=", -1, HD_TF_BOTH},
};

const hd_tfunc_table hd_tfuncs_random = {rows, (int)(sizeof rows / sizeof rows[0])};
