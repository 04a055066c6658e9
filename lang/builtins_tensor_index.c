/* What the evaluator calls for tensors: operators, x[...] and x[...] = v,
 * and members (attributes and methods). */
#include "builtins_tensor.h"
#include "compiled.h"
#include "hd_backend.h"

#include <stdio.h>
#include <string.h>

const hd_tfunc *hd_tfunc_method(const char *name);
void hd_tfunc_method_names(void (*fn)(const char *name, void *ud), void *ud);
hd_status hd_tensor_T(hd_vm *vm, hd_tensor *x, hd_value *out);

/* ---- operators ---- */

static const struct {
    int tok;
    hd_op op;
    const char *sym;
} binops[] = {
    {HD_TOK_PLUS, HD_OP_ADD, "+"},    {HD_TOK_MINUS, HD_OP_SUB, "-"},
    {HD_TOK_STAR, HD_OP_MUL, "*"},    {HD_TOK_SLASH, HD_OP_DIV, "/"},
    {HD_TOK_PERCENT, HD_OP_MOD, "%"}, {HD_TOK_POW, HD_OP_POW, "**"},
    {HD_TOK_AT, HD_OP_MATMUL, "@"},   {HD_TOK_EQ, HD_OP_EQ, "=="},
    {HD_TOK_NE, HD_OP_NE, "!="},      {HD_TOK_LT, HD_OP_LT, "<"},
    {HD_TOK_LE, HD_OP_LE, "<="},      {HD_TOK_GT, HD_OP_GT, ">"},
    {HD_TOK_GE, HD_OP_GE, ">="},      {HD_TOK_FLOORDIV, HD_OP_DIV, "//"},
};

/* a // b: floor(a / b) for floats; for integers (a - a % b) / b computed
 * in f64 (exact below 2^53) and cast back, with % refusing a zero divisor
 * as it does (Python's floor division, torch.floor_divide). */
static hd_status tensor_floordiv(hd_vm *vm, hd_tensor **in, hd_tensor **out) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_tensor *t[6] = {NULL};
    hd_status st = HD_OK;
    if (hd_dtype_is_float(in[0]->dtype) || hd_dtype_is_float(in[1]->dtype)) {
        st = hd_trun_t(vm, "//", HD_OP_DIV, in, 2, NULL, &t[0]);
        if (!st) st = hd_trun_t(vm, "//", HD_OP_FLOOR, &t[0], 1, NULL, out);
        hd_tensor_unref(t[0]);
        return st;
    }
    st = hd_trun_t(vm, "//", HD_OP_MOD, in, 2, NULL, &t[0]); /* m */
    hd_tensor *am[2] = {in[0], t[0]};
    if (!st) st = hd_trun_t(vm, "//", HD_OP_SUB, am, 2, NULL, &t[1]); /* a - m */
    if (!st && (hd_op_cast(ctx, t[1], HD_F64, &t[2]) || hd_op_cast(ctx, in[1], HD_F64, &t[3])))
        st = hd_tfail(vm, "//");
    hd_tensor *q[2] = {t[2], t[3]};
    if (!st) st = hd_trun_t(vm, "//", HD_OP_DIV, q, 2, NULL, &t[4]);
    if (!st && hd_op_cast(ctx, t[4], t[1]->dtype, out)) st = hd_tfail(vm, "//");
    hd_tunref_all(t, 6);
    return st;
}

static int tensorable(hd_value v) {
    return v.type == HD_V_TENSOR || v.type == HD_V_INT || v.type == HD_V_FLOAT ||
           v.type == HD_V_BOOL || v.type == HD_V_LIST;
}

hd_status hd_tensor_binop(hd_vm *vm, int op, hd_value a, hd_value b, hd_value *out) {
    int k = -1;
    for (size_t i = 0; i < sizeof binops / sizeof binops[0]; i++)
        if (binops[i].tok == op) k = (int)i;
    if (k < 0) return hd_vm_error(vm, HD_ERR_RUNTIME, "this operator does not apply to tensors");
    if (!tensorable(a) || !tensorable(b)) {
        /* x == none is false, x != none true: a tensor never equals a non-number */
        if (op == HD_TOK_EQ || op == HD_TOK_NE) {
            *out = hd_bool(op == HD_TOK_NE);
            return HD_OK;
        }
        return hd_vm_error(vm, HD_ERR_RUNTIME, "unsupported operand types for %s: %s and %s",
                           binops[k].sym, hd_value_type_name(a), hd_value_type_name(b));
    }
    hd_tensor *in[2] = {NULL, NULL}, *r = NULL;
    hd_status st = hd_value_to_tensor(vm, a, "the left operand", 0, HD_F32, &in[0]);
    if (!st) st = hd_value_to_tensor(vm, b, "the right operand", 0, HD_F32, &in[1]);
    if (!st && op == HD_TOK_FLOORDIV)
        st = tensor_floordiv(vm, in, &r);
    else if (!st)
        st = hd_trun_t(vm, NULL, binops[k].op, in, 2, NULL, &r);
    hd_tunref_all(in, 2);
    if (st) return st;
    *out = hd_tensor_value(r);
    return HD_OK;
}

hd_status hd_tensor_unop(hd_vm *vm, int op, hd_value x, hd_value *out) {
    if (x.type != HD_V_TENSOR) return hd_vm_error(vm, HD_ERR_RUNTIME, "not a tensor");
    if (op == HD_TOK_PLUS) {
        *out = hd_value_ref(x);
        return HD_OK;
    }
    hd_op o = op == HD_TOK_MINUS ? HD_OP_NEG : HD_OP_NOT;
    if (op != HD_TOK_MINUS && op != HD_TOK_NOT)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "this operator does not apply to tensors");
    hd_tensor *t = x.as.t, *r = NULL;
    if (o == HD_OP_NEG && t->dtype == HD_BOOL)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "unary - is not defined for bool tensors (use not)");
    if (hd_trun_t(vm, NULL, o, &t, 1, NULL, &r)) return HD_ERR_RUNTIME;
    *out = hd_tensor_value(r);
    return HD_OK;
}

/* ---- indexing ---- */

/* How x[parts] is taken: one SLICE over x, size-1 dims inserted for each
 * none, then the tensor index applied at its position: one bool mask, or
 * integer tensors on neighbouring dims (x[rows, cols], broadcast together
 * as NumPy's advanced indexing; their broadcast shape takes their dims'
 * place). */
typedef struct ixplan {
    hd_attrs at;
    int nones[HD_MAX_DIMS]; /* positions of inserted dims, in the output */
    int nnone;
    int tpos;             /* output position of the first tensor part, or -1 */
    int tnones;           /* nones before the tensor part */
    const hd_tensor *idx; /* the first, in host memory */
    int is_mask;
    int get;      /* x[...] read, not written */
    int symbolic; /* idx is known only when compiled code runs: gathered in the graph */
    int nidx;     /* integer tensors on dims tpos.. */
    const hd_tensor *idxs[HD_MAX_DIMS]; /* each in host memory */
    hd_tensor *hosts[HD_MAX_DIMS];      /* copied from a device (owned), or NULL */
} ixplan;

static void ix_plan_free(ixplan *pl) {
    for (int i = 0; i < pl->nidx; i++) {
        hd_tensor_unref(pl->hosts[i]);
        pl->hosts[i] = NULL;
    }
}

static hd_status ix_error_shape(hd_vm *vm, const char *what, const hd_tensor *x, int n) {
    char s[128];
    return hd_vm_error(vm, HD_ERR_RUNTIME, "%s for a tensor of shape %s: %d given", what,
                       hd_shape_str(x->shape, x->ndim, s, sizeof s), n);
}

static int part_dims(const hd_index_part *p) {
    switch (p->kind) {
    case HD_IDX_INT:
    case HD_IDX_SLICE: return 1;
    case HD_IDX_TENSOR:
        return p->v.type == HD_V_TENSOR && p->v.as.t->dtype == HD_BOOL ? p->v.as.t->ndim : 1;
    default: return 0;
    }
}

/* Python's slice.indices for a positive step: bounds clamped to [0, n]. */
static hd_status ix_slice(hd_vm *vm, const hd_index_part *p, int64_t n, int d, hd_attrs *at) {
    int64_t step = p->has_step ? p->step : 1;
    if (step <= 0)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           step == 0 ? "slice step cannot be zero" : "slice step must be positive");
    int64_t lo = p->has_start ? p->start : 0, hi = p->has_stop ? p->stop : n;
    if (lo < 0) lo += n;
    if (hi < 0) hi += n;
    lo = lo < 0 ? 0 : lo > n ? n : lo;
    hi = hi < 0 ? 0 : hi > n ? n : hi;
    /* hi - lo + step - 1 would overflow for a step near INT64_MAX */
    at->len[d] = hi > lo ? (hi - lo - 1) / step + 1 : 0;
    at->start[d] = at->len[d] ? lo : 0;
    at->step[d] = at->len[d] > 1 ? step : 1; /* keeps stride * step in range */
    return HD_OK;
}

static hd_status ix_int(hd_vm *vm, int64_t i, int64_t n, int d, hd_attrs *at) {
    int64_t j = i < 0 ? i + n : i;
    if (j < 0 || j >= n)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "index %lld is out of range for dim %d of size %lld",
                           (long long)i, d, (long long)n);
    at->start[d] = j;
    at->len[d] = 1;
    at->drop_mask |= 1u << d;
    return HD_OK;
}

static hd_status ix_tensor_part(hd_vm *vm, const hd_index_part *p, ixplan *pl, int out) {
    if (p->v.type != HD_V_TENSOR)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "an index must be an int, a slice or a tensor, got %s",
                           hd_value_type_name(p->v));
    const hd_tensor *t = p->v.as.t;
    if (t->dtype != HD_BOOL && !hd_dtype_is_int(t->dtype))
        return hd_vm_error(vm, HD_ERR_RUNTIME, "tensor indices must be integers or bools, got %s",
                           hd_dtype_name(t->dtype));
    if (t->dtype == HD_BOOL && t->ndim == 0)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "a bool index needs at least one dim");
    if (pl->idx && (pl->is_mask || t->dtype == HD_BOOL))
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "a bool index cannot be combined with other tensor indices");
    if (pl->idx && out != pl->tpos + pl->nidx)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "tensor indices must be next to each other (x[i, j, :], not x[i, :, "
                           "j]): index the dims in two steps, or permute x first");
    if (pl->symbolic || (pl->idx && !hd_compiled_data_known(vm, t)))
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "inside compiled code an index tensor known only when the code runs "
                           "is the only tensor index (x[i, :], not x[i, j]): index in two steps");
    if (pl->get && t->dtype != HD_BOOL && !hd_compiled_data_known(vm, t)) {
        pl->symbolic = 1; /* index_select checks and wraps it when the graph runs */
        pl->idxs[pl->nidx++] = t;
        pl->idx = t;
        pl->tpos = out;
        pl->tnones = pl->nnone;
        return HD_OK;
    }
    if (hd_tensor_need_data(vm, t,
                            t->dtype == HD_BOOL ? "indexing with a bool mask"
                                                : "writing through an index tensor"))
        return HD_ERR_RUNTIME;
    if (!hd_tensor_is_cpu(t)) { /* checked and wrapped on the host, as the cpu's */
        pl->hosts[pl->nidx] = hd_tensor_to_host(hd_vm_ctx(vm), (hd_tensor *)t);
        if (!pl->hosts[pl->nidx]) return hd_tfail(vm, NULL);
        t = pl->hosts[pl->nidx];
    }
    pl->idxs[pl->nidx++] = t;
    if (pl->idx) return HD_OK;
    pl->idx = t;
    pl->is_mask = t->dtype == HD_BOOL;
    pl->tpos = out;
    pl->tnones = pl->nnone;
    return HD_OK;
}

static hd_status ix_plan_parts(hd_vm *vm, const hd_tensor *x, const hd_index_part *parts, int n,
                               int get, ixplan *pl) {
    memset(pl, 0, sizeof *pl);
    pl->tpos = -1;
    pl->get = get;
    int used = 0, ell = 0;
    for (int i = 0; i < n; i++) {
        used += part_dims(&parts[i]);
        ell += parts[i].kind == HD_IDX_ELLIPSIS;
    }
    if (ell > 1)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "an index can only have one ellipsis (...)");
    if (used > x->ndim) return ix_error_shape(vm, "too many indices", x, used);
    for (int d = 0; d < x->ndim; d++) {
        pl->at.step[d] = 1;
        pl->at.len[d] = x->shape[d];
    }
    int d = 0, out = 0;
    for (int i = 0; i < n; i++) {
        const hd_index_part *p = &parts[i];
        switch (p->kind) {
        case HD_IDX_ELLIPSIS:
            d += x->ndim - used;
            out += x->ndim - used;
            break;
        case HD_IDX_NONE:
            if (x->ndim + pl->nnone + 1 > HD_MAX_DIMS)
                return hd_vm_error(vm, HD_ERR_RUNTIME, "tensors have at most %d dims", HD_MAX_DIMS);
            pl->nones[pl->nnone++] = out++;
            break;
        case HD_IDX_INT:
            if (ix_int(vm, p->i, x->shape[d], d, &pl->at)) return HD_ERR_RUNTIME;
            d++;
            break;
        case HD_IDX_SLICE:
            if (ix_slice(vm, p, x->shape[d], d, &pl->at)) return HD_ERR_RUNTIME;
            d++;
            out++;
            break;
        case HD_IDX_TENSOR:
            if (ix_tensor_part(vm, p, pl, out)) return HD_ERR_RUNTIME;
            d += part_dims(p);
            out += part_dims(p);
            break;
        }
    }
    return HD_OK;
}

static hd_status ix_plan(hd_vm *vm, const hd_tensor *x, const hd_index_part *parts, int n, int get,
                         ixplan *pl) {
    hd_status st = ix_plan_parts(vm, x, parts, n, get, pl);
    if (st) ix_plan_free(pl);
    return st;
}

/* t on the place of x (indices made on the host, for a tensor on a device). */
static hd_status ix_place_like(hd_vm *vm, hd_tensor *t, const hd_tensor *x, hd_tensor **out) {
    hd_place p = hd_place_of(x);
    if (hd_tensor_to_device(hd_vm_ctx(vm), t, p.backend ? p.backend : &hd_cpu_backend, p.device,
                            out))
        return hd_tfail(vm, NULL);
    return HD_OK;
}

/* The basic part of the index: a view of x. */
static hd_status ix_view(hd_vm *vm, hd_tensor *x, const ixplan *pl, int with_nones,
                         hd_tensor **out) {
    hd_tensor *v = NULL;
    if (hd_trun_t(vm, NULL, HD_OP_SLICE, &x, 1, &pl->at, &v)) return HD_ERR_RUNTIME;
    if (!with_nones || !pl->nnone) {
        *out = v;
        return HD_OK;
    }
    int64_t shape[HD_MAX_DIMS];
    int nd = v->ndim + pl->nnone;
    for (int j = 0, k = 0, m = 0; j < nd; j++) {
        if (m < pl->nnone && pl->nones[m] == j) {
            shape[j] = 1;
            m++;
        } else {
            shape[j] = v->shape[k++];
        }
    }
    hd_status st = hd_treshape(hd_vm_ctx(vm), v, shape, nd, out) ? hd_tfail(vm, NULL) : HD_OK;
    hd_tensor_unref(v);
    return st;
}

/* Integer indices checked against a dim of size n and wrapped when
 * negative: a new i64 tensor (flattened when flat is set). */
static hd_status ix_indices(hd_vm *vm, const hd_tensor *idx, int64_t n, int d, int flat,
                            hd_tensor **out) {
    int64_t one = idx->numel;
    hd_tensor *t = flat ? hd_tensor_new(hd_vm_ctx(vm), HD_I64, &one, 1)
                        : hd_tensor_new(hd_vm_ctx(vm), HD_I64, idx->shape, idx->ndim);
    if (!t) return hd_vm_from_ctx(vm, HD_ERR_MEMORY);
    int64_t *p = t->storage->data;
    for (int64_t i = 0; i < idx->numel; i++) {
        int64_t v = hd_tensor_get_i64(idx, i), j = v < 0 ? v + n : v;
        if (j < 0 || j >= n) {
            hd_tensor_unref(t);
            return hd_vm_error(vm, HD_ERR_RUNTIME,
                               "index %lld is out of range for dim %d of size %lld", (long long)v,
                               d, (long long)n);
        }
        p[i] = j;
    }
    *out = t;
    return HD_OK;
}

/* A bool mask over dims pos..pos+k-1 of v: checked, and the flat
 * positions of its true elements as an i64 tensor. */
static hd_status ix_mask(hd_vm *vm, const hd_tensor *v, int pos, const hd_tensor *mask,
                         hd_tensor **out) {
    int k = mask->ndim;
    if (pos + k > v->ndim || memcmp(mask->shape, v->shape + pos, (size_t)k * sizeof(int64_t))) {
        char s0[128], s1[128];
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "bool index of shape %s does not match the indexed shape %s",
                           hd_shape_str(mask->shape, k, s0, sizeof s0),
                           hd_shape_str(v->shape + pos, HD_MIN(k, v->ndim - pos), s1, sizeof s1));
    }
    int64_t c = 0;
    for (int64_t i = 0; i < mask->numel; i++) c += hd_tensor_get(mask, i) != 0;
    hd_tensor *t = hd_tensor_new(hd_vm_ctx(vm), HD_I64, &c, 1);
    if (!t) return hd_vm_from_ctx(vm, HD_ERR_MEMORY);
    int64_t *p = t->storage->data;
    for (int64_t i = 0, j = 0; i < mask->numel; i++)
        if (hd_tensor_get(mask, i) != 0) p[j++] = i;
    *out = t;
    return HD_OK;
}

static hd_status ix_select(hd_vm *vm, hd_tensor *v, int axis, hd_tensor *idx, hd_tensor **out) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = axis;
    hd_tensor *di = NULL;
    hd_place pi = hd_place_of(idx), pv = hd_place_of(v);
    if (pi.backend == pv.backend && pi.device == pv.device)
        di = hd_tensor_ref(idx); /* a traced index is where the graph is */
    else if (ix_place_like(vm, idx, v, &di))
        return HD_ERR_RUNTIME;
    hd_tensor *in[2] = {v, di};
    hd_status st = hd_trun_t(vm, NULL, HD_OP_INDEX_SELECT, in, 2, &at, out);
    hd_tensor_unref(di);
    return st;
}

/* x[mask] with the mask over k dims at pos: those dims merged into one,
 * then gathered. */
static hd_status ix_gather_mask(hd_vm *vm, hd_tensor *v, const ixplan *pl, hd_tensor **out) {
    hd_tensor *pos = NULL, *m = NULL;
    int k = pl->idx->ndim, p = pl->tpos;
    if (ix_mask(vm, v, p, pl->idx, &pos)) return HD_ERR_RUNTIME;
    int64_t shape[HD_MAX_DIMS], n = 1;
    int nd = 0;
    for (int i = 0; i < p; i++) shape[nd++] = v->shape[i];
    for (int i = p; i < p + k; i++) n *= v->shape[i];
    shape[nd++] = n;
    for (int i = p + k; i < v->ndim; i++) shape[nd++] = v->shape[i];
    hd_status st = hd_treshape(hd_vm_ctx(vm), v, shape, nd, &m) ? hd_tfail(vm, NULL) : HD_OK;
    if (!st) st = ix_select(vm, m, p, pos, out);
    hd_tensor_unref(m);
    hd_tensor_unref(pos);
    return st;
}

/* Several integer tensors on dims pos..pos+k-1 of v: broadcast together to
 * *bshape (*nb dims), checked and wrapped per dim, and each element's flat
 * position within those k dims, as a 1-D i64 tensor. */
static hd_status ix_multi_flat(hd_vm *vm, const ixplan *pl, const hd_tensor *v, int pos,
                               int64_t *bshape, int *nb, hd_tensor **out) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    int k = pl->nidx;
    *nb = 0;
    for (int j = 0; j < k; j++) {
        int64_t prev[HD_MAX_DIMS];
        memcpy(prev, bshape, (size_t)*nb * sizeof *prev);
        if (hd_broadcast_shapes(ctx, prev, *nb, pl->idxs[j]->shape, pl->idxs[j]->ndim, bshape,
                                nb)) {
            hd_error_clear(ctx);
            return hd_vm_error(vm, HD_ERR_RUNTIME,
                               "tensor indices of shapes that do not broadcast together");
        }
    }
    int64_t n = 1, st[HD_MAX_DIMS][HD_MAX_DIMS];
    for (int d = 0; d < *nb; d++) n *= bshape[d];
    for (int j = 0; j < k; j++) { /* logical strides of each index, 0 where broadcast */
        const hd_tensor *t = pl->idxs[j];
        int64_t acc = 1;
        for (int d = *nb - 1; d >= 0; d--) {
            int td = d - (*nb - t->ndim);
            st[j][d] = td >= 0 && t->shape[td] > 1 ? acc : 0;
            if (td >= 0) acc *= t->shape[td];
        }
    }
    hd_tensor *r = hd_tensor_new(ctx, HD_I64, &n, 1);
    if (!r) return hd_vm_from_ctx(vm, HD_ERR_MEMORY);
    int64_t *p = r->storage->data;
    for (int64_t e = 0; e < n; e++) {
        int64_t flat = 0;
        for (int j = 0; j < k; j++) {
            int64_t li = 0, rem = e;
            for (int d = *nb - 1; d >= 0; d--) {
                li += (rem % bshape[d]) * st[j][d];
                rem /= bshape[d];
            }
            int64_t size = v->shape[pos + j], i = hd_tensor_get_i64(pl->idxs[j], li);
            int64_t w = i < 0 ? i + size : i;
            if (w < 0 || w >= size) {
                hd_tensor_unref(r);
                return hd_vm_error(vm, HD_ERR_RUNTIME,
                                   "index %lld is out of range for dim %d of size %lld",
                                   (long long)i, pos + j, (long long)size);
            }
            flat = flat * size + w;
        }
        p[e] = flat;
    }
    *out = r;
    return HD_OK;
}

/* v with dims pos..pos+k-1 merged into one of size m, or that dim split
 * back into shape (nb dims): the shapes around a gather. */
static hd_status ix_reshape_span(hd_vm *vm, hd_tensor *v, int pos, int k, const int64_t *shape,
                                 int nb, hd_tensor **out) {
    int64_t s[HD_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < pos; i++) s[nd++] = v->shape[i];
    if (nd + nb + (v->ndim - pos - k) > HD_MAX_DIMS)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "tensors have at most %d dims", HD_MAX_DIMS);
    for (int i = 0; i < nb; i++) s[nd++] = shape[i];
    for (int i = pos + k; i < v->ndim; i++) s[nd++] = v->shape[i];
    return hd_treshape(hd_vm_ctx(vm), v, s, nd, out) ? hd_tfail(vm, NULL) : HD_OK;
}

/* x[i, j, ...] with k integer tensors from pos: the k dims merged, the
 * flat positions gathered, the broadcast shape put in their place. */
static hd_status ix_gather_multi(hd_vm *vm, hd_tensor *v, const ixplan *pl, hd_tensor **out) {
    int pos = pl->tpos, k = pl->nidx, nb;
    int64_t bshape[HD_MAX_DIMS], m = 1;
    for (int j = 0; j < k; j++) m *= v->shape[pos + j];
    hd_tensor *flat = NULL, *merged = NULL, *g = NULL;
    hd_status st = ix_multi_flat(vm, pl, v, pos, bshape, &nb, &flat);
    if (!st) st = ix_reshape_span(vm, v, pos, k, &m, 1, &merged);
    if (!st) st = ix_select(vm, merged, pos, flat, &g);
    if (!st) st = ix_reshape_span(vm, g, pos, 1, bshape, nb, out);
    hd_tensor_unref(flat);
    hd_tensor_unref(merged);
    hd_tensor_unref(g);
    return st;
}

hd_status hd_tensor_get_index(hd_vm *vm, hd_value xv, const hd_index_part *parts, int n,
                              hd_value *out) {
    if (xv.type != HD_V_TENSOR) return hd_vm_error(vm, HD_ERR_RUNTIME, "not a tensor");
    hd_tensor *x = xv.as.t, *v = NULL, *r = NULL, *idx = NULL;
    ixplan pl;
    if (ix_plan(vm, x, parts, n, 1, &pl)) return HD_ERR_RUNTIME;
    if (ix_view(vm, x, &pl, 1, &v)) {
        ix_plan_free(&pl);
        return HD_ERR_RUNTIME;
    }
    hd_status st = HD_OK;
    if (!pl.idx) {
        r = v;
        v = NULL;
    } else if (pl.is_mask) {
        st = ix_gather_mask(vm, v, &pl, &r);
    } else if (pl.nidx > 1) {
        st = ix_gather_multi(vm, v, &pl, &r);
    } else if (pl.symbolic) {
        st = ix_select(vm, v, pl.tpos, (hd_tensor *)pl.idx, &r);
    } else {
        st = ix_indices(vm, pl.idx, v->shape[pl.tpos], pl.tpos, 0, &idx);
        if (!st) st = ix_select(vm, v, pl.tpos, idx, &r);
    }
    hd_tensor_unref(idx);
    hd_tensor_unref(v);
    ix_plan_free(&pl);
    if (st) return st;
    *out = hd_tensor_value(r);
    return HD_OK;
}

/* ---- x[...] = v ---- */

static hd_status assign(hd_vm *vm, hd_tensor *dst, hd_tensor *src) {
    if (hd_tensor_copy_into(hd_vm_ctx(vm), dst, src)) return hd_tfail(vm, NULL);
    return HD_OK;
}

/* src broadcast to shape (error in the words of assignment). */
static hd_status expand_to(hd_vm *vm, hd_tensor *src, const int64_t *shape, int nd,
                           hd_tensor **out) {
    int64_t b[HD_MAX_DIMS];
    int nb;
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (src->ndim > nd || hd_broadcast_shapes(ctx, src->shape, src->ndim, shape, nd, b, &nb) ||
        nb != nd || memcmp(b, shape, (size_t)nd * sizeof *b)) {
        char s0[128], s1[128];
        hd_error_clear(ctx);
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "cannot assign a tensor of shape %s to one of shape %s",
                           hd_shape_str(src->shape, src->ndim, s0, sizeof s0),
                           hd_shape_str(shape, nd, s1, sizeof s1));
    }
    hd_attrs at;
    memset(&at, 0, sizeof at);
    memcpy(at.shape, shape, (size_t)nd * sizeof *shape);
    at.nshape = nd;
    return hd_trun_t(vm, NULL, HD_OP_EXPAND, &src, 1, &at, out);
}

/* dst[..., i_pos.., ...] (k dims from pos, dropped) = src_b[..., j, ...]
 * for one position j of the gathered axis. */
static hd_status assign_one(hd_vm *vm, hd_tensor *dst, int pos, const int64_t *ix, int k,
                            hd_tensor *src_b, int64_t j) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    for (int d = 0; d < dst->ndim; d++) {
        at.step[d] = 1;
        at.len[d] = dst->shape[d];
    }
    for (int d = 0; d < k; d++) {
        at.start[pos + d] = ix[d];
        at.len[pos + d] = 1;
        at.drop_mask |= 1u << (pos + d);
    }
    hd_tensor *dv = NULL, *sv = NULL;
    hd_status st = hd_op_run(ctx, HD_OP_SLICE, &dst, 1, &at, &dv) ||
                           hd_tslice_axis(ctx, src_b, pos, j, 1, 1, &sv)
                       ? hd_tfail(vm, NULL)
                       : HD_OK;
    if (!st) st = assign(vm, dv, sv);
    hd_tensor_unref(dv);
    hd_tensor_unref(sv);
    return st;
}

/* dst[idx] = src along pos, for a list of positions (flat within the k
 * dims of a mask, or plain indices when k == 1). */
static hd_status assign_positions(hd_vm *vm, hd_tensor *dst, int pos, int k, const int64_t *kshape,
                                  const hd_tensor *p, hd_tensor *src) {
    int64_t g[HD_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < pos; i++) g[nd++] = dst->shape[i];
    g[nd++] = p->numel;
    for (int i = pos + k; i < dst->ndim; i++) g[nd++] = dst->shape[i];
    hd_tensor *sb = NULL;
    if (expand_to(vm, src, g, nd, &sb)) return HD_ERR_RUNTIME;
    const int64_t *pp = p->storage->data;
    hd_status st = HD_OK;
    for (int64_t j = 0; j < p->numel && !st; j++) {
        int64_t ix[HD_MAX_DIMS], rem = pp[j];
        for (int d = k - 1; d >= 0; d--) {
            ix[d] = rem % kshape[d];
            rem /= kshape[d];
        }
        st = assign_one(vm, dst, pos, ix, k, sb, j);
    }
    hd_tensor_unref(sb);
    return st;
}

/* dst[mask] = scalar: where(mask, src, dst) written back. */
static hd_status assign_mask_scalar(hd_vm *vm, hd_tensor *dst, int pos, const hd_tensor *mask,
                                    hd_tensor *src) {
    int64_t shape[HD_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < mask->ndim; i++) shape[nd++] = mask->shape[i];
    for (int i = pos + mask->ndim; i < dst->ndim; i++) shape[nd++] = 1;
    hd_tensor *pm = NULL, *m = NULL, *w = NULL, *s = NULL;
    hd_ctx *ctx = hd_vm_ctx(vm);
    int64_t none[1];
    if (ix_place_like(vm, (hd_tensor *)mask, dst, &pm)) return HD_ERR_RUNTIME;
    hd_status st = hd_treshape(ctx, pm, shape, nd, &m) || hd_treshape(ctx, src, none, 0, &s)
                       ? hd_tfail(vm, NULL)
                       : HD_OK;
    hd_tensor_unref(pm);
    hd_tensor *in[3] = {m, s, dst};
    if (!st) st = hd_trun_t(vm, NULL, HD_OP_WHERE, in, 3, NULL, &w);
    if (!st) st = assign(vm, dst, w);
    hd_tensor_unref(m);
    hd_tensor_unref(s);
    hd_tensor_unref(w);
    return st;
}

/* x[i, j, ...] = src with k integer tensors from pos: src broadcast to
 * the gathered shape, its broadcast dims merged, each position written. */
static hd_status assign_multi(hd_vm *vm, hd_tensor *dst, int pos, const ixplan *pl,
                              hd_tensor *src) {
    int k = pl->nidx, nb;
    int64_t bshape[HD_MAX_DIMS], full[HD_MAX_DIMS], n = 1;
    hd_tensor *flat = NULL, *sb = NULL, *sm = NULL;
    hd_status st = ix_multi_flat(vm, pl, dst, pos, bshape, &nb, &flat);
    int nd = 0;
    if (!st && pos + nb + (dst->ndim - pos - k) > HD_MAX_DIMS)
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "tensors have at most %d dims", HD_MAX_DIMS);
    if (!st) {
        for (int i = 0; i < pos; i++) full[nd++] = dst->shape[i];
        for (int i = 0; i < nb; i++) n *= (full[nd++] = bshape[i]);
        for (int i = pos + k; i < dst->ndim; i++) full[nd++] = dst->shape[i];
        st = expand_to(vm, src, full, nd, &sb);
    }
    if (!st) st = ix_reshape_span(vm, sb, pos, nb, &n, 1, &sm);
    if (!st) st = assign_positions(vm, dst, pos, k, dst->shape + pos, flat, sm);
    hd_tensor_unref(flat);
    hd_tensor_unref(sb);
    hd_tensor_unref(sm);
    return st;
}

hd_status hd_tensor_set_index(hd_vm *vm, hd_value xv, const hd_index_part *parts, int n,
                              hd_value val) {
    if (xv.type != HD_V_TENSOR) return hd_vm_error(vm, HD_ERR_RUNTIME, "not a tensor");
    hd_tensor *x = xv.as.t, *v = NULL, *src = NULL, *p = NULL;
    /* an expanded tensor: several of its elements are one memory location,
     * so a write to one writes them all (PyTorch refuses it too) */
    for (int d = 0; d < x->ndim; d++)
        if (x->strides[d] == 0 && x->shape[d] > 1)
            return hd_vm_error(vm, HD_ERR_RUNTIME,
                               "cannot write into an expanded tensor: several of its elements are "
                               "one memory location (write into x.clone() instead)");
    /* a number that does not fit an integer tensor is refused, as tensor()
     * and full() refuse it (PyTorch too), not wrapped */
    if ((val.type == HD_V_INT && !hd_dtype_holds_int(x->dtype, val.as.i)) ||
        (val.type == HD_V_FLOAT && !hd_dtype_holds_float(x->dtype, val.as.f))) {
        char num[32];
        if (val.type == HD_V_INT)
            snprintf(num, sizeof num, "%lld", (long long)val.as.i);
        else
            snprintf(num, sizeof num, "%g", val.as.f);
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "cannot assign %s to a tensor of dtype %s: it does not fit", num,
                           hd_dtype_name(x->dtype));
    }
    ixplan pl;
    if (ix_plan(vm, x, parts, n, 0, &pl)) return HD_ERR_RUNTIME;
    if (ix_view(vm, x, &pl, 0, &v)) {
        ix_plan_free(&pl);
        return HD_ERR_RUNTIME;
    }
    hd_status st = hd_value_to_tensor(vm, val, "the assigned value", 0, HD_F32, &src);
    if (!st) { /* src is NULL when the value is not tensor-like */
        hd_place ps = hd_place_of(src), pv = hd_place_of(v);
        if (ps.backend != pv.backend || ps.device != pv.device) { /* a number, a list */
            hd_tensor *moved = NULL;
            st = ix_place_like(vm, src, v, &moved);
            hd_tensor_unref(src);
            src = moved;
        }
    }
    int pos = pl.tpos - pl.tnones;
    if (!st && !pl.idx) {
        st = assign(vm, v, src);
    } else if (!st && pl.is_mask) {
        st = ix_mask(vm, v, pos, pl.idx, &p); /* checks the mask's shape */
        if (!st && src->numel == 1)
            st = assign_mask_scalar(vm, v, pos, pl.idx, src);
        else if (!st)
            st = assign_positions(vm, v, pos, pl.idx->ndim, pl.idx->shape, p, src);
    } else if (!st && pl.nidx > 1) {
        st = assign_multi(vm, v, pos, &pl, src);
    } else if (!st) {
        if (pl.idx->ndim > 1)
            st = hd_vm_error(vm, HD_ERR_RUNTIME,
                             "assignment through an index tensor needs a 1-D index");
        else if (!(st = ix_indices(vm, pl.idx, v->shape[pos], pos, 1, &p)))
            st = assign_positions(vm, v, pos, 1, v->shape + pos, p, src);
    }
    hd_tensor_unref(p);
    hd_tensor_unref(src);
    hd_tensor_unref(v);
    ix_plan_free(&pl);
    return st;
}

/* ---- members ---- */

static const char *const attrs[] = {"shape", "dtype",         "device",  "ndim", "numel",
                                    "grad",  "requires_grad", "is_leaf", "T"};

static hd_status shape_list(hd_vm *vm, const hd_tensor *t, hd_value *out) {
    hd_value l = hd_list_new(vm, t->ndim);
    if (hd_vm_failed(vm)) return HD_ERR_MEMORY;
    for (int i = 0; i < t->ndim; i++)
        if (hd_list_push(vm, l, hd_int(t->shape[i]))) {
            hd_value_unref(vm, l);
            return HD_ERR_MEMORY;
        }
    *out = l;
    return HD_OK;
}

/* A symbolic tensor (inside compiled code) is where the code runs. */
static hd_status device_str(hd_vm *vm, const hd_tensor *t, hd_value *out) {
    const hd_storage *s = t->storage;
    const hd_backend *be = s ? s->backend : NULL;
    int dev = s ? s->device : 0;
    if (!s) hd_compiled_trace_place(vm, &be, &dev);
    if (strcmp(be->name, "cpu") == 0)
        *out = hd_str_from(vm, "cpu");
    else
        *out = hd_str_fmt(vm, "%s:%d", be->name, dev);
    return hd_vm_failed(vm) ? HD_ERR_MEMORY : HD_OK;
}

hd_status hd_tensor_get_member(hd_vm *vm, hd_value x, const char *name, hd_value *out) {
    hd_tensor *t = x.as.t;
    if (strcmp(name, "shape") == 0) return shape_list(vm, t, out);
    if (strcmp(name, "dtype") == 0) return *out = hd_dtype_value(t->dtype), HD_OK;
    if (strcmp(name, "device") == 0) return device_str(vm, t, out);
    if (strcmp(name, "ndim") == 0) return *out = hd_int(t->ndim), HD_OK;
    if (strcmp(name, "numel") == 0) return *out = hd_int(t->numel), HD_OK;
    if (strcmp(name, "grad") == 0 || strcmp(name, "requires_grad") == 0 ||
        strcmp(name, "is_leaf") == 0)
        return hd_grad_member(vm, t, name, out);
    if (strcmp(name, "T") == 0) return hd_tensor_T(vm, t, out);
    const hd_tfunc *f = hd_tfunc_method(name);
    if (!f) return hd_vm_error(vm, HD_ERR_RUNTIME, "tensor has no member '%s'", name);
    hd_value m = hd_native_new(vm, f->name, f->fn, (void *)f);
    if (hd_vm_failed(vm)) return HD_ERR_MEMORY;
    ((hd_native *)m.as.o)->self = hd_value_ref(x);
    *out = m;
    return HD_OK;
}

hd_status hd_tensor_set_member(hd_vm *vm, hd_value x, const char *name, hd_value v) {
    if (strcmp(name, "requires_grad") == 0 || strcmp(name, "grad") == 0)
        return hd_grad_set_member(vm, x.as.t, name, v);
    return hd_vm_error(vm, HD_ERR_RUNTIME, "cannot set tensor member '%s'", name);
}

void hd_tensor_member_names(void (*fn)(const char *name, void *ud), void *ud) {
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) fn(attrs[i], ud);
    hd_tfunc_method_names(fn, ud);
}
