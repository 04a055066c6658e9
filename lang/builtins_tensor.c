/* The tensor prelude: registration, argument binding, conversions between
 * Hodu values and tensors, and running ops with errors the user can read.
 * The functions themselves are rows of the tables in builtins_tensor_*.c. */
#include "builtins_tensor.h"
#include "hints.h"
#include "compiled.h"
#include "hd_backend.h"
#include "hd_trace.h"
#include "tensor_print.h"
#include "vm.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- argument binding ---- */

static int parse_sig(const char *sig, hd_targs *a, int *star, int *nreq) {
    a->n = 0;
    *star = -1;
    *nreq = 0;
    const char *p = sig;
    while (*p && a->n < HD_TARGS_MAX) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        int opt = 0, len = 0;
        if (*p == '*') {
            *star = a->n;
            p++;
        }
        while (p[len] && p[len] != ',' && p[len] != '=') len++;
        if (p[len] == '=') opt = 1;
        if (len >= (int)sizeof a->names[0]) len = (int)sizeof a->names[0] - 1;
        memcpy(a->names[a->n], p, (size_t)len);
        a->names[a->n][len] = 0;
        if (!opt && *star != a->n) *nreq = a->n + 1;
        a->n++;
        p += len + opt;
    }
    return a->n;
}

static int find_param(const hd_targs *a, const char *name) {
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->names[i], name) == 0) return i;
    return -1;
}

/* An unexpected keyword: the error, with the parameter it may mean. */
static hd_status targs_unknown_keyword(hd_vm *vm, const hd_tfunc *f, const hd_targs *a,
                                       const char *kw) {
    const char *names[HD_TARGS_MAX];
    for (int i = 0; i < a->n; i++) names[i] = a->names[i];
    const char *hint = hd_hint_keyword(kw, names, a->n);
    if (hint)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "%s() got an unexpected keyword argument '%s' (did you mean '%s'?)",
                           f->name, kw, hint);
    return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() got an unexpected keyword argument '%s'", f->name,
                       kw);
}

hd_status hd_targs_bind(hd_vm *vm, const hd_tfunc *f, hd_value self, const hd_value *args,
                        int nargs, const hd_kwarg *kw, int nkw, hd_targs *a) {
    int star, nreq;
    a->f = f;
    a->rest = NULL;
    a->nrest = 0;
    a->place = NULL;
    a->place_device = 0;
    parse_sig(f->sig, a, &star, &nreq);
    for (int i = 0; i < a->n; i++) a->v[i].type = HD_V_COUNT;
    int npos = 0;
    if (self.type != HD_V_NONE) a->all[npos++] = self;
    if (nargs + npos > HD_TARGS_MAX)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() takes at most %d arguments, got %d", f->name,
                           a->n, nargs + npos);
    for (int i = 0; i < nargs; i++) a->all[npos++] = args[i];
    /* A `*name` parameter takes a run of ints (reshape(x, 2, -1)) or one value. */
    for (int k = 0, p = 0; k < npos; p++) {
        if (p >= a->n)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() takes at most %d argument%s, got %d",
                               f->name, a->n, a->n == 1 ? "" : "s", npos);
        int e = k + 1;
        if (p == star && a->all[k].type == HD_V_INT)
            while (e < npos && a->all[e].type == HD_V_INT) e++;
        a->v[p] = a->all[k];
        if (e - k > 1) {
            a->rest = a->all + k;
            a->nrest = e - k;
        }
        k = e;
    }
    for (int k = 0; k < nkw; k++) {
        int i = find_param(a, kw[k].name);
        const char *alias = i < 0 ? hd_hint_keyword_alias(kw[k].name) : NULL;
        if (alias) i = find_param(a, alias); /* dim= where axis= is taken */
        if (i < 0 || (i == 0 && self.type != HD_V_NONE))
            return targs_unknown_keyword(vm, f, a, kw[k].name);
        if (a->v[i].type != HD_V_COUNT)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() got multiple values for argument '%s'",
                               f->name, kw[k].name);
        a->v[i] = kw[k].value;
    }
    for (int i = 0; i < nreq; i++)
        if (a->v[i].type == HD_V_COUNT)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() missing required argument '%s'", f->name,
                               a->names[i]);
    return HD_OK;
}

/* ---- argument converters ---- */

static const char *vname(hd_value v) {
    return v.type == HD_V_COUNT ? "nothing" : hd_value_type_name(v);
}

hd_status hd_targ_type_error(hd_vm *vm, const hd_targs *a, int i, const char *want) {
    return hd_vm_error(vm, HD_ERR_RUNTIME, "%s: %s must be %s, got %s", a->f->name, a->names[i],
                       want, vname(a->v[i]));
}

hd_status hd_targ_int(hd_vm *vm, const hd_targs *a, int i, int64_t def, int64_t *out) {
    hd_value v = a->v[i];
    if (!hd_targ_has(a, i)) {
        *out = def;
        return HD_OK;
    }
    if (v.type != HD_V_INT) return hd_targ_type_error(vm, a, i, "an int");
    *out = v.as.i;
    return HD_OK;
}

hd_status hd_tensor_need_data(hd_vm *vm, const hd_tensor *t, const char *what) {
    if (t->storage && !hd_vm_ctx(vm)->trace) return HD_OK;
    return hd_compiled_check_data(vm, t, what);
}

/* The one element of t, read on the host: a device tensor through a copy. */
static hd_status targ_read_one(hd_vm *vm, const hd_tensor *t, double *out) {
    hd_tensor *h = hd_tensor_to_host(hd_vm_ctx(vm), (hd_tensor *)t);
    if (!h) return hd_tfail(vm, NULL);
    *out = hd_tensor_get(h, 0);
    hd_tensor_unref(h);
    return HD_OK;
}

hd_status hd_targ_float(hd_vm *vm, const hd_targs *a, int i, double def, double *out) {
    hd_value v = a->v[i];
    *out = def;
    if (!hd_targ_has(a, i)) return HD_OK;
    if (v.type == HD_V_INT)
        *out = (double)v.as.i;
    else if (v.type == HD_V_FLOAT)
        *out = v.as.f;
    else if (v.type == HD_V_TENSOR && v.as.t->numel == 1 &&
             hd_tensor_need_data(vm, v.as.t, a->names[i]))
        return HD_ERR_RUNTIME;
    else if (v.type == HD_V_TENSOR && v.as.t->numel == 1)
        return targ_read_one(vm, v.as.t, out);
    else
        return hd_targ_type_error(vm, a, i, "a number");
    return HD_OK;
}

hd_status hd_targ_bool(hd_vm *vm, const hd_targs *a, int i, int def, int *out) {
    hd_value v = a->v[i];
    *out = def;
    if (!hd_targ_has(a, i)) return HD_OK;
    if (v.type != HD_V_BOOL) return hd_targ_type_error(vm, a, i, "true or false");
    *out = v.as.b;
    return HD_OK;
}

hd_status hd_targ_dtype(hd_vm *vm, const hd_targs *a, int i, int def, int *out) {
    hd_value v = a->v[i];
    *out = def;
    if (!hd_targ_has(a, i)) return HD_OK;
    if (v.type == HD_V_DTYPE) {
        *out = (int)v.as.dt;
        return HD_OK;
    }
    /* the conversion functions bool, int and float name dtypes as in torch */
    if (hd_value_dtype_name(v) >= 0) {
        *out = hd_value_dtype_name(v);
        return HD_OK;
    }
    if (v.type == HD_V_STR && hd_dtype_from_name(hd_as_str(v)->chars) >= 0) {
        *out = hd_dtype_from_name(hd_as_str(v)->chars);
        return HD_OK;
    }
    if (v.type == HD_V_STR)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "%s: unknown dtype \"%s\" (f16, bf16, f32, f64, i8, u8, i32, i64, bool)",
                           a->f->name, hd_as_str(v)->chars);
    return hd_targ_type_error(vm, a, i, "a dtype (f16, bf16, f32, f64, i8, u8, i32, i64, bool)");
}

hd_status hd_targ_device(hd_vm *vm, hd_targs *a, int i) {
    if (!hd_targ_has(a, i)) return HD_OK;
    if (a->v[i].type != HD_V_STR) return hd_targ_type_error(vm, a, i, "a device string");
    const hd_backend *be;
    int dev;
    if (hd_backend_open_device(hd_vm_ctx(vm), hd_as_str(a->v[i])->chars, &be, &dev))
        return hd_tfail(vm, a->f->name);
    a->place = be;
    a->place_device = dev;
    return HD_OK;
}

static hd_status int_list(hd_vm *vm, const hd_targs *a, int i, const hd_value *items, int64_t n,
                          int64_t *out, int *nd, const char *what) {
    if (n > HD_MAX_DIMS)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s: %s has %lld entries, at most %d are allowed",
                           a->f->name, a->names[i], (long long)n, HD_MAX_DIMS);
    for (int64_t k = 0; k < n; k++) {
        if (items[k].type != HD_V_INT)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s: %s must be %s, got a %s at position %lld",
                               a->f->name, a->names[i], what, hd_value_type_name(items[k]),
                               (long long)k);
        out[k] = items[k].as.i;
    }
    *nd = (int)n;
    return HD_OK;
}

hd_status hd_targ_shape(hd_vm *vm, const hd_targs *a, int i, int64_t *shape, int *nd) {
    const char *what = "an int or a list of ints";
    *nd = 0;
    if (a->rest) return int_list(vm, a, i, a->rest, a->nrest, shape, nd, what);
    hd_value v = a->v[i];
    if (v.type == HD_V_INT) {
        shape[0] = v.as.i;
        *nd = 1;
        return HD_OK;
    }
    if (v.type == HD_V_LIST)
        return int_list(vm, a, i, hd_as_list(v)->items, hd_as_list(v)->len, shape, nd, what);
    return hd_targ_type_error(vm, a, i, what);
}

hd_status hd_targ_axes(hd_vm *vm, const hd_targs *a, int i, hd_attrs *attrs) {
    attrs->naxes = 0;
    if (!hd_targ_has(a, i)) return HD_OK;
    hd_value v = a->v[i];
    if (v.type == HD_V_INT) {
        attrs->axes[0] = v.as.i;
        attrs->naxes = 1;
        return HD_OK;
    }
    if (v.type != HD_V_LIST) return hd_targ_type_error(vm, a, i, "an int or a list of ints");
    if (hd_as_list(v)->len == 0)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s: %s is an empty list", a->f->name, a->names[i]);
    return int_list(vm, a, i, hd_as_list(v)->items, hd_as_list(v)->len, attrs->axes, &attrs->naxes,
                    "a list of ints");
}

hd_status hd_targ_pair(hd_vm *vm, const hd_targs *a, int i, int64_t def, int64_t *out2) {
    out2[0] = out2[1] = def;
    if (!hd_targ_has(a, i)) return HD_OK;
    hd_value v = a->v[i];
    if (v.type == HD_V_INT) {
        out2[0] = out2[1] = v.as.i;
        return HD_OK;
    }
    int nd = 0;
    if (v.type != HD_V_LIST || hd_as_list(v)->len != 2)
        return hd_targ_type_error(vm, a, i, "an int or a list of two ints");
    return int_list(vm, a, i, hd_as_list(v)->items, 2, out2, &nd, "a list of two ints");
}

hd_status hd_targ_tensor(hd_vm *vm, const hd_targs *a, int i, hd_tensor **out) {
    char what[64];
    snprintf(what, sizeof what, "%s: %s", a->f->name, a->names[i]);
    int exact = hd_targs_numbers_only(a);
    return hd_value_to_tensor(vm, a->v[i], what, exact, exact ? HD_F64 : HD_F32, out);
}

int hd_targs_numbers_only(const hd_targs *a) {
    for (int i = 0; i < a->n; i++)
        if (a->v[i].type == HD_V_TENSOR) return 0;
    for (int i = 0; i < a->nrest; i++)
        if (a->rest[i].type == HD_V_TENSOR) return 0;
    return 1;
}

/* ---- values to tensors ---- */

/* A Hodu number as a 0-d tensor; ints are stored exactly. */
static hd_tensor *number_tensor(hd_ctx *ctx, hd_value v, int exact) {
    hd_tensor *(*mk)(hd_ctx *, hd_dtype, double) = exact ? hd_tensor_scalar : hd_tensor_number;
    switch (v.type) {
    case HD_V_BOOL: return mk(ctx, HD_BOOL, v.as.b);
    case HD_V_FLOAT: return mk(ctx, HD_F64, v.as.f);
    default: {
        hd_tensor *t = mk(ctx, HD_I64, 0);
        if (t) *(int64_t *)hd_tensor_data(t) = v.as.i;
        return t;
    }
    }
}

hd_status hd_value_to_tensor(hd_vm *vm, hd_value v, const char *what, int exact, hd_dtype float_dt,
                             hd_tensor **out) {
    *out = NULL;
    switch (v.type) {
    case HD_V_TENSOR: *out = hd_tensor_ref(v.as.t); return HD_OK;
    case HD_V_BOOL:
    case HD_V_INT:
    case HD_V_FLOAT:
        *out = number_tensor(hd_vm_ctx(vm), v, exact);
        return *out ? HD_OK : hd_vm_from_ctx(vm, HD_ERR_MEMORY);
    case HD_V_LIST: /* made where tensors without device= go */
        if (hd_tensor_from_value(vm, v, -1, float_dt, out)) return HD_ERR_RUNTIME;
        return hd_default_device_move(vm, out);
    default:
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s must be a tensor, got %s", what,
                           v.type == HD_V_COUNT ? "nothing" : hd_value_type_name(v));
    }
}

/* tensor(): one walk finds the shape and checks that every list at a
 * depth has the same length (naming the first position that differs);
 * a second walk stores the values. */
typedef struct nest {
    hd_vm *vm;
    int nd;
    int64_t shape[HD_MAX_DIMS];
    int64_t pos[HD_MAX_DIMS + 1];
    hd_dtype_cat cat; /* widest kind of element seen */
    int have;
    char *data;
    hd_dtype dt;
    int64_t k;
} nest;

static hd_status nest_err(nest *s, int depth, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static hd_status nest_err(nest *s, int depth, const char *fmt, ...) {
    char p[160], msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (depth == 0) return hd_vm_error(s->vm, HD_ERR_RUNTIME, "tensor: data %s", msg);
    return hd_vm_error(s->vm, HD_ERR_RUNTIME, "tensor: element %s %s",
                       hd_shape_str(s->pos, depth, p, sizeof p), msg);
}

static void see_cat(nest *s, hd_dtype_cat c) {
    if (!s->have || c > s->cat) s->cat = c;
    s->have = 1;
}

static hd_status nest_tensor(nest *s, const hd_tensor *t, int depth) {
    if (!t->storage) return nest_err(s, depth, "is a tensor without data (symbolic)");
    if (depth == s->nd && !s->have && depth + t->ndim <= HD_MAX_DIMS)
        for (int i = 0; i < t->ndim; i++) s->shape[s->nd++] = t->shape[i];
    if (depth + t->ndim != s->nd ||
        (t->ndim && memcmp(t->shape, s->shape + depth, (size_t)t->ndim * sizeof(int64_t)))) {
        char a[128], b[128];
        return nest_err(s, depth, "is a tensor of shape %s where %s was expected",
                        hd_shape_str(t->shape, t->ndim, a, sizeof a),
                        hd_shape_str(s->shape + depth, s->nd - depth, b, sizeof b));
    }
    see_cat(s, hd_dtype_infos[t->dtype].cat);
    return HD_OK;
}

static hd_status nest_shape(nest *s, hd_value v, int depth) {
    if (v.type == HD_V_TENSOR) return nest_tensor(s, v.as.t, depth);
    if (v.type == HD_V_BOOL || v.type == HD_V_INT || v.type == HD_V_FLOAT) {
        if (depth != s->nd)
            return nest_err(s, depth, "is a number where a list of length %lld was expected",
                            (long long)s->shape[depth]);
        see_cat(s, v.type == HD_V_BOOL  ? HD_CAT_BOOL
                   : v.type == HD_V_INT ? HD_CAT_INT
                                        : HD_CAT_FLOAT);
        return HD_OK;
    }
    if (v.type != HD_V_LIST)
        return nest_err(s, depth, "is a %s, expected a number, a bool or a list",
                        hd_value_type_name(v));
    int64_t n = hd_as_list(v)->len;
    if (depth == s->nd && !s->have) {
        if (s->nd == HD_MAX_DIMS)
            return nest_err(s, depth, "is nested deeper than %d dims", HD_MAX_DIMS);
        s->shape[s->nd++] = n;
    } else if (depth >= s->nd) {
        return nest_err(s, depth, "is a list where a number was expected");
    } else if (s->shape[depth] != n) {
        return nest_err(s, depth, "has length %lld, expected %lld (ragged nested list)",
                        (long long)n, (long long)s->shape[depth]);
    }
    const hd_value *items = hd_as_list(v)->items;
    for (int64_t i = 0; i < n; i++) {
        s->pos[depth] = i;
        if (nest_shape(s, items[i], depth + 1)) return HD_ERR_RUNTIME;
    }
    return HD_OK;
}

/* The bounds of an integer dtype; 0 for the others. */
static int int_bounds(hd_dtype dt, int64_t *lo, int64_t *hi) {
    switch (dt) {
    case HD_I8: *lo = INT8_MIN, *hi = INT8_MAX; return 1;
    case HD_U8: *lo = 0, *hi = UINT8_MAX; return 1;
    case HD_I32: *lo = INT32_MIN, *hi = INT32_MAX; return 1;
    case HD_I64: *lo = INT64_MIN, *hi = INT64_MAX; return 1;
    default: return 0;
    }
}

int hd_dtype_holds_int(hd_dtype dt, int64_t x) {
    int64_t lo, hi;
    return !int_bounds(dt, &lo, &hi) || (x >= lo && x <= hi);
}

/* A float goes into an integer dtype truncated, as in PyTorch: it must be a
 * number and fit (2^63 is the first double past INT64_MAX). */
int hd_dtype_holds_float(hd_dtype dt, double x) {
    int64_t lo, hi;
    if (!int_bounds(dt, &lo, &hi)) return 1;
    double t = trunc(x);
    if (!(t >= -9223372036854775808.0 && t < 9223372036854775808.0)) return 0;
    return hd_dtype_holds_int(dt, (int64_t)t);
}

static hd_status store_int(nest *s, int64_t x) {
    if (!hd_dtype_holds_int(s->dt, x))
        return hd_vm_error(s->vm, HD_ERR_RUNTIME, "tensor: %lld does not fit in %s", (long long)x,
                           hd_dtype_name(s->dt));
    if (s->dt == HD_I64)
        ((int64_t *)s->data)[s->k++] = x;
    else
        hd_dtype_store(s->dt, s->data, s->k++, (double)x);
    return HD_OK;
}

static hd_status store_float(nest *s, double x) {
    if (!hd_dtype_holds_float(s->dt, x))
        return hd_vm_error(s->vm, HD_ERR_RUNTIME, "tensor: %g does not fit in %s", x,
                           hd_dtype_name(s->dt));
    hd_dtype_store(s->dt, s->data, s->k++, x);
    return HD_OK;
}

/* A tensor's elements (a device tensor's through a host copy). */
static hd_status nest_fill_tensor(nest *s, hd_tensor *t) {
    if (hd_tensor_need_data(s->vm, t, "tensor()")) return HD_ERR_RUNTIME;
    hd_tensor *h = hd_tensor_to_host(hd_vm_ctx(s->vm), t);
    if (!h) return hd_tfail(s->vm, "tensor");
    hd_status st = HD_OK;
    for (int64_t i = 0; i < h->numel && !st; i++) {
        if (hd_dtype_is_float(h->dtype))
            st = store_float(s, hd_tensor_get(h, i));
        else
            st = store_int(s, hd_tensor_get_i64(h, i));
    }
    hd_tensor_unref(h);
    return st;
}

static hd_status nest_fill(nest *s, hd_value v) {
    switch (v.type) {
    case HD_V_LIST:
        for (int64_t i = 0; i < hd_as_list(v)->len; i++)
            if (nest_fill(s, hd_as_list(v)->items[i])) return HD_ERR_RUNTIME;
        return HD_OK;
    case HD_V_TENSOR: return nest_fill_tensor(s, v.as.t);
    case HD_V_BOOL: return store_int(s, v.as.b);
    case HD_V_INT: return store_int(s, v.as.i);
    default: return store_float(s, v.as.f);
    }
}

hd_status hd_tensor_from_value(hd_vm *vm, hd_value data, int dt, hd_dtype float_dt,
                               hd_tensor **out) {
    nest s;
    memset(&s, 0, sizeof s);
    s.vm = vm;
    *out = NULL;
    if (nest_shape(&s, data, 0)) return HD_ERR_RUNTIME;
    if (dt < 0) {
        dt = !s.have                ? (int)float_dt
             : s.cat == HD_CAT_BOOL ? HD_BOOL
             : s.cat == HD_CAT_INT  ? HD_I64
                                    : (int)float_dt;
        if (data.type == HD_V_TENSOR) dt = data.as.t->dtype;
    }
    hd_tensor *t = hd_tensor_new(hd_vm_ctx(vm), (hd_dtype)dt, s.shape, s.nd);
    if (!t) return hd_tfail(vm, "tensor");
    s.data = t->storage->data;
    s.dt = (hd_dtype)dt;
    if (nest_fill(&s, data)) {
        hd_tensor_unref(t);
        return HD_ERR_RUNTIME;
    }
    *out = t;
    return HD_OK;
}

/* ---- tensors to values ---- */

static hd_value elem_value(const hd_tensor *t, int64_t off) {
    const void *p = t->storage->data;
    if (t->dtype == HD_BOOL) return hd_bool(hd_dtype_load(t->dtype, p, off) != 0);
    if (hd_dtype_is_int(t->dtype)) return hd_int(hd_dtype_load_i64(t->dtype, p, off));
    return hd_float(hd_dtype_load(t->dtype, p, off));
}

static hd_status need_host(hd_vm *vm, const hd_tensor *t, const char *fname) {
    if (!t->storage || hd_vm_ctx(vm)->trace) {
        char what[32];
        snprintf(what, sizeof what, "%s()", fname);
        if (hd_compiled_check_data(vm, t, what)) return HD_ERR_RUNTIME;
    }
    if (!hd_tensor_is_cpu(t))
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "%s: move the tensor to the cpu first (x.to(\"cpu\"))", fname);
    return HD_OK;
}

/* item() and tolist() of a device tensor read a host copy. */
static hd_status host_copy_then(hd_vm *vm, const hd_tensor *t, hd_value *out,
                                hd_status (*f)(hd_vm *, const hd_tensor *, hd_value *),
                                const char *fname) {
    hd_tensor *h = hd_tensor_to_host(hd_vm_ctx(vm), (hd_tensor *)t);
    if (!h) return hd_tfail(vm, fname);
    hd_status st = f(vm, h, out);
    hd_tensor_unref(h);
    return st;
}

hd_status hd_tensor_item(hd_vm *vm, const hd_tensor *t, hd_value *out) {
    /* (in compiled code: a constant of the trace, such as sum([1, 2]) made
     * on the device; reading state is refused) */
    if (t->storage && !hd_tensor_is_cpu(t)) {
        if (hd_vm_ctx(vm)->trace && hd_compiled_check_data(vm, t, "item()")) return HD_ERR_RUNTIME;
        return host_copy_then(vm, t, out, hd_tensor_item, "item");
    }
    if (need_host(vm, t, "item")) return HD_ERR_RUNTIME;
    if (t->numel != 1) {
        char s[128];
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "item() needs a tensor with one element, got shape %s (%lld elements)",
                           hd_shape_str(t->shape, t->ndim, s, sizeof s), (long long)t->numel);
    }
    *out = elem_value(t, hd_tensor_elem_offset(t, 0));
    return HD_OK;
}

static hd_status tolist_rec(hd_vm *vm, const hd_tensor *t, int dim, int64_t off, hd_value *out) {
    if (dim == t->ndim) {
        *out = elem_value(t, off);
        return HD_OK;
    }
    hd_value list = hd_list_new(vm, t->shape[dim]);
    if (hd_vm_failed(vm)) return HD_ERR_MEMORY;
    for (int64_t i = 0; i < t->shape[dim]; i++) {
        hd_value item;
        if (tolist_rec(vm, t, dim + 1, off + i * t->strides[dim], &item) ||
            hd_list_push(vm, list, item)) {
            hd_value_unref(vm, list);
            return HD_ERR_RUNTIME;
        }
    }
    *out = list;
    return HD_OK;
}

hd_status hd_tensor_tolist(hd_vm *vm, const hd_tensor *t, hd_value *out) {
    if (t->storage && !hd_tensor_is_cpu(t) && !hd_vm_ctx(vm)->trace)
        return host_copy_then(vm, t, out, hd_tensor_tolist, "tolist");
    if (need_host(vm, t, "tolist")) return HD_ERR_RUNTIME;
    return tolist_rec(vm, t, 0, t->offset, out);
}

/* ---- running ops ---- */

hd_status hd_tfail(hd_vm *vm, const char *fname) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_status st = ctx->status ? ctx->status : HD_ERR_RUNTIME;
    const char *msg = ctx->errmsg;
    size_t n = fname ? strlen(fname) : 0;
    int named = !fname || (strncmp(msg, fname, n) == 0 && (msg[n] == ' ' || msg[n] == ':')) ||
                st == HD_ERR_MEMORY;
    if (named) return hd_vm_from_ctx(vm, st);
    char copy[HD_ERRMSG_MAX];
    snprintf(copy, sizeof copy, "%s", msg);
    hd_error_clear(ctx);
    return hd_vm_error(vm, st, "%s: %s", fname, copy);
}

void hd_tunref_all(hd_tensor **t, int n) {
    for (int i = 0; i < n; i++) hd_tensor_unref(t[i]);
}

/* Integer % and ** have no value for a zero divisor or a negative power:
 * a program's op is refused, as for int scalars and in PyTorch, instead of
 * the 0 the kernels give. */
static hd_status int_operand_values(hd_ctx *ctx, hd_op op, hd_tensor *b) {
    hd_tensor *h = hd_tensor_to_host(ctx, b);
    if (!h) return ctx->status;
    hd_status st = HD_OK;
    for (int64_t i = 0; i < h->numel && !st; i++) {
        int64_t v = hd_tensor_get_i64(h, i);
        if (op == HD_OP_MOD && v == 0)
            st = hd_error(ctx, HD_ERR_RUNTIME, "integer modulo by zero");
        else if (op == HD_OP_POW && v < 0)
            st = hd_error(ctx, HD_ERR_RUNTIME,
                          "integers to negative integer powers are not allowed (got %lld; "
                          "use a float tensor)",
                          (long long)v);
    }
    hd_tensor_unref(h);
    return st;
}

/* The check as a step of compiled code, at every run (ud: the op). */
static hd_status int_operand_run(hd_ctx *ctx, void *ud, hd_tensor *const *args, int nargs) {
    HD_UNUSED(nargs);
    hd_op op = (hd_op)(intptr_t)ud;
    hd_status st = int_operand_values(ctx, op, args[0]);
    if (st && st != HD_ERR_MEMORY && st != HD_ERR_LIMIT) {
        char msg[HD_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", hd_error_message(ctx));
        hd_error_clear(ctx);
        st = hd_error(ctx, st, "%s: %s", op == HD_OP_MOD ? "%" : "**", msg);
    }
    return st;
}

static void *int_operand_dup(void *ud) {
    return ud;
}

static void int_operand_free(hd_ctx *ctx, void *ud) {
    HD_UNUSED(ctx);
    HD_UNUSED(ud);
}

/* Checked now when the divisor's values are known; inside compiled code,
 * one known only when the code runs (an input, a computed value) gets a
 * check step that runs before the op at every call, so compiled code
 * refuses what eager code refuses. */
static hd_status int_operand_check(hd_vm *vm, const char *fname, hd_op op, hd_tensor **in,
                                   int nin) {
    if ((op != HD_OP_MOD && op != HD_OP_POW) || nin != 2) return HD_OK;
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_tensor *b = in[1];
    if (hd_dtype_is_float(in[0]->dtype) || hd_dtype_is_float(b->dtype)) return HD_OK;
    if (!b->storage || hd_trace_stands_for_input(ctx, b)) {
        if (!hd_trace_active(ctx)) return HD_OK;
        hd_ir_callback cb = {op == HD_OP_MOD ? "integer % check" : "integer ** check",
                             int_operand_run, (void *)(intptr_t)op, int_operand_dup,
                             int_operand_free};
        return hd_trace_callback(ctx, &cb, &b, 1) ? hd_tfail(vm, fname) : HD_OK;
    }
    return int_operand_values(ctx, op, b) ? hd_tfail(vm, fname) : HD_OK;
}

hd_status hd_trun_t(hd_vm *vm, const char *fname, hd_op op, hd_tensor **in, int nin,
                    const hd_attrs *attrs, hd_tensor **t) {
    if (int_operand_check(vm, fname, op, in, nin)) return HD_ERR_RUNTIME;
    if (hd_op_run(hd_vm_ctx(vm), op, in, nin, attrs, t)) return hd_tfail(vm, fname);
    return HD_OK;
}

/* Integer numbers into a float op: compute in f64, not f32, so that
 * sqrt(2) is the double it is in every other language. */
static hd_status widen_numbers(hd_vm *vm, hd_op op, hd_tensor **in, int nin,
                               const hd_attrs *attrs) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_op_plan plan;
    if (hd_op_plan_make(ctx, op, in, nin, attrs, &plan)) return hd_tfail(vm, hd_op_name(op));
    if (plan.dtype != HD_F32) return HD_OK;
    for (int i = 0; i < nin; i++) {
        if (hd_dtype_is_float(in[i]->dtype)) continue;
        hd_tensor *c = NULL;
        if (hd_op_cast(ctx, in[i], HD_F64, &c)) return hd_tfail(vm, hd_op_name(op));
        hd_tensor_unref(in[i]);
        in[i] = c;
    }
    return HD_OK;
}

hd_status hd_trun(hd_vm *vm, const char *fname, hd_op op, hd_tensor **in, int nin,
                  const hd_attrs *attrs, int numbers, hd_value *out) {
    hd_tensor *t = NULL;
    /* numbers in, number out: computed now, also inside compiled code
     * (a number there is a constant of the trace, not a graph value) */
    hd_ctx *ctx = hd_vm_ctx(vm);
    struct hd_trace *trace = ctx->trace;
    if (numbers) ctx->trace = NULL;
    hd_status st = numbers ? widen_numbers(vm, op, in, nin, attrs) : HD_OK;
    if (!st) st = hd_trun_t(vm, fname, op, in, nin, attrs, &t);
    ctx->trace = trace;
    if (st) return HD_ERR_RUNTIME;
    if (numbers && t->ndim == 0) {
        hd_status st = hd_tensor_item(vm, t, out);
        hd_tensor_unref(t);
        return st;
    }
    *out = hd_tensor_value(t);
    return HD_OK;
}

/* ---- views ---- */

static void full_slice(const hd_tensor *t, hd_attrs *at) {
    memset(at, 0, sizeof *at);
    for (int i = 0; i < t->ndim; i++) {
        at->start[i] = 0;
        at->step[i] = 1;
        at->len[i] = t->shape[i];
    }
}

hd_status hd_tslice_axis(hd_ctx *ctx, hd_tensor *t, int axis, int64_t start, int64_t len, int drop,
                         hd_tensor **out) {
    hd_attrs at;
    full_slice(t, &at);
    at.start[axis] = start;
    at.len[axis] = len;
    if (drop) at.drop_mask = 1u << axis;
    return hd_op_run(ctx, HD_OP_SLICE, &t, 1, &at, out);
}

hd_status hd_treshape(hd_ctx *ctx, hd_tensor *t, const int64_t *shape, int nd, hd_tensor **out) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    if (nd > HD_MAX_DIMS)
        return hd_error(ctx, HD_ERR_RUNTIME, "reshape: at most %d dims", HD_MAX_DIMS);
    memcpy(at.shape, shape, (size_t)nd * sizeof *shape);
    at.nshape = nd;
    return hd_op_run(ctx, HD_OP_RESHAPE, &t, 1, &at, out);
}

/* ---- registration ---- */

static const hd_tfunc_table *const tables[] = {
    &hd_tfuncs_create,     &hd_tfuncs_math,    &hd_tfuncs_shape,  &hd_tfuncs_nn,
    &hd_tfuncs_misc,       &hd_tfuncs_io,      &hd_tfuncs_grad,   &hd_tfuncs_module,
    &hd_tfuncs_data,       &hd_tfuncs_more,    &hd_tfuncs_extra,  &hd_tfuncs_einsum,
    &hd_tfuncs_func,       &hd_tfuncs_linalg,  &hd_tfuncs_random, &hd_tfuncs_strategy,
    &hd_tfuncs_checkpoint, &hd_tfuncs_inplace, &hd_tfuncs_dist,   &hd_tfuncs_optim};

/* The evaluator refers to the tensor API weakly (it runs without it), and
 * a static library only contributes the objects something refers to
 * strongly: this table ties them to the prelude, which the VM opens. */
static void (*const volatile api_keep[])(void) = {
    (void (*)(void))hd_tensor_binop,        (void (*)(void))hd_tensor_unop,
    (void (*)(void))hd_tensor_get_index,    (void (*)(void))hd_tensor_set_index,
    (void (*)(void))hd_tensor_get_member,   (void (*)(void))hd_tensor_set_member,
    (void (*)(void))hd_tensor_member_names, (void (*)(void))hd_tensor_format,
    (void (*)(void))hd_tensor_class_apply,
};

/* A function with an effect (seeding, files, the default device): inside
 * compiled code it would run once, at the trace, not at every call. */
static HD_TF_FN(tf_effect) {
    const hd_tfunc *f = data;
    if (hd_compiled_effect(vm, f->name)) return vm->err;
    return f->fn(vm, self, args, nargs, kw, nkw, out, data);
}

hd_status hd_builtins_tensor_open(hd_vm *vm) {
    if (!api_keep[0]) return HD_ERR_RUNTIME;
    hd_default_device_init(vm);
    for (int d = 0; d < HD_DTYPE_COUNT; d++)
        if (hd_vm_def_value(vm, hd_dtype_name((hd_dtype)d), hd_dtype_value((hd_dtype)d)))
            return HD_ERR_MEMORY;
    for (size_t k = 0; k < sizeof tables / sizeof tables[0]; k++) {
        /* Without file access the file functions do not exist at all. */
        if (tables[k] == &hd_tfuncs_io && !hd_vm_allow_io(vm)) continue;
        for (int i = 0; i < tables[k]->n; i++) {
            const hd_tfunc *f = &tables[k]->rows[i];
            if (!(f->flags & HD_TF_GLOBAL)) continue;
            hd_native_fn fn = f->flags & HD_TF_EFFECT ? tf_effect : f->fn;
            if (hd_vm_def_native(vm, f->name, fn, (void *)f)) return HD_ERR_MEMORY;
        }
    }
    if (hd_builtins_grad_open(vm)) return HD_ERR_MEMORY;
    return hd_builtins_module_open(vm);
}

/* The row of a tensor method, or NULL. */
const hd_tfunc *hd_tfunc_method(const char *name);
const hd_tfunc *hd_tfunc_method(const char *name) {
    for (size_t k = 0; k < sizeof tables / sizeof tables[0]; k++)
        for (int i = 0; i < tables[k]->n; i++) {
            const hd_tfunc *f = &tables[k]->rows[i];
            if ((f->flags & HD_TF_METHOD) && strcmp(f->name, name) == 0) return f;
        }
    return NULL;
}

void hd_tfunc_method_names(void (*fn)(const char *name, void *ud), void *ud);
void hd_tfunc_method_names(void (*fn)(const char *name, void *ud), void *ud) {
    for (size_t k = 0; k < sizeof tables / sizeof tables[0]; k++)
        for (int i = 0; i < tables[k]->n; i++)
            if (tables[k]->rows[i].flags & HD_TF_METHOD) fn(tables[k]->rows[i].name, ud);
}

hd_value hd_tensor_format(hd_vm *vm, const hd_tensor *t) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    size_t len;
    char *s = hd_tensor_format_cstr(ctx, t, &len);
    if (!s) {
        hd_vm_from_ctx(vm, HD_ERR_MEMORY);
        return hd_none();
    }
    hd_value v = hd_str_new(vm, s, len);
    hd_ctx_free(ctx, s, len + 1);
    return v;
}
