/* Creation: tensor, zeros, ones, full, rand, randn, arange, linspace, eye,
 * zeros_like, ones_like, manual_seed, and the default device they use
 * (set_default_device, default_device, HODU_DEVICE). */
#include "builtins_tensor.h"
#include "compiled.h"
#include "hd_backend.h"
#include "hd_rng.h"
#include "hd_trace.h"
#include "vm_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the default device ---- */

static hd_status default_set(hd_vm *vm, const char *spec, const char *who) {
    const hd_backend *be;
    int dev;
    if (hd_backend_open_device(hd_vm_ctx(vm), spec, &be, &dev)) return hd_tfail(vm, who);
    vm->default_be = be == &hd_cpu_backend ? NULL : be;
    vm->default_dev = be == &hd_cpu_backend ? 0 : dev;
    return HD_OK;
}

/* No device= given: the default device (HODU_DEVICE resolved the first
 * time, its errors at the line that creates a tensor; the cpu if the host
 * removed it meanwhile). */
static hd_status default_place(hd_vm *vm, hd_targs *a) {
    if (a->place) return HD_OK;
    if (vm->default_pending) { /* stays pending while it fails */
        const char *env = getenv("HODU_DEVICE");
        if (env && *env && default_set(vm, env, "HODU_DEVICE")) return vm->err;
        vm->default_pending = 0;
    }
    a->place = vm->default_be ? vm->default_be : &hd_cpu_backend;
    a->place_device = vm->default_dev;
    return HD_OK;
}

hd_status hd_default_device(hd_vm *vm, const hd_backend **be, int *dev) {
    hd_targs none;
    memset(&none, 0, sizeof none);
    if (default_place(vm, &none)) return vm->err;
    *be = none.place;
    *dev = none.place_device;
    return HD_OK;
}

int hd_default_device_name(hd_vm *vm, char *buf, size_t n) {
    const hd_backend *be;
    int dev;
    if (hd_default_device(vm, &be, &dev)) {
        hd_vm_clear_error(vm); /* a bad HODU_DEVICE is the creation functions' error */
        return 0;
    }
    if (be == &hd_cpu_backend) return 0;
    snprintf(buf, n, "%s:%d", be->name, dev);
    return 1;
}

hd_status hd_default_device_move(hd_vm *vm, hd_tensor **t) {
    const hd_backend *be;
    int dev;
    if (hd_default_device(vm, &be, &dev)) return vm->err;
    if (be == &hd_cpu_backend) return HD_OK;
    hd_tensor *d = NULL;
    hd_status st = hd_tensor_to_device(hd_vm_ctx(vm), *t, be, dev, &d);
    hd_tensor_unref(*t);
    *t = d;
    return st ? hd_tfail(vm, NULL) : HD_OK;
}

void hd_default_device_init(hd_vm *vm) {
    const char *d = getenv("HODU_DEVICE");
    vm->default_pending = d && *d;
}

static HD_TF_FN(tf_set_default_device) {
    HD_TARGS_BIND(a); /* device */
    if (a.v[0].type != HD_V_STR) return hd_targ_type_error(vm, &a, 0, "a device string");
    vm->default_pending = 0;
    if (default_set(vm, hd_as_str(a.v[0])->chars, "set_default_device")) return HD_ERR_RUNTIME;
    *out = hd_none();
    return HD_OK;
}

static HD_TF_FN(tf_default_device) {
    HD_TARGS_BIND(a); /* none */
    if (default_place(vm, &a)) return HD_ERR_RUNTIME;
    *out = vm->default_be ? hd_str_fmt(vm, "%s:%d", vm->default_be->name, vm->default_dev)
                          : hd_str_from(vm, "cpu");
    return hd_vm_failed(vm) ? HD_ERR_MEMORY : HD_OK;
}

/* The creation op, on the device= the arguments named (a->place), else on
 * the default device. */
static hd_status create_on(hd_vm *vm, hd_targs *a, hd_op op, hd_attrs *at, hd_tensor **t) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    if (default_place(vm, a)) return HD_ERR_RUNTIME;
    hd_place prev = hd_place_push(ctx, a->place, a->place_device);
    hd_status st = hd_trun_t(vm, a->f->name, op, NULL, 0, at, t);
    hd_place_pop(ctx, prev);
    return st;
}

static hd_status create(hd_vm *vm, hd_targs *a, hd_op op, hd_attrs *at, hd_value *out) {
    hd_tensor *t = NULL;
    if (create_on(vm, a, op, at, &t)) return HD_ERR_RUNTIME;
    *out = hd_tensor_value(t);
    return HD_OK;
}

/* zeros(2, 3) as well as zeros([2, 3]): the leading int arguments. */
static hd_status shape_args(hd_vm *vm, hd_targs *a, hd_attrs *at) {
    int nd;
    if (hd_targ_shape(vm, a, 0, at->shape, &nd)) return HD_ERR_RUNTIME;
    at->nshape = nd;
    return HD_OK;
}

static hd_status fill(hd_vm *vm, hd_value self, const hd_value *args, int nargs, const hd_kwarg *kw,
                      int nkw, hd_value *out, void *data, double value) {
    HD_TARGS_BIND(a);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int dt;
    if (shape_args(vm, &a, &at) || hd_targ_dtype(vm, &a, 1, HD_F32, &dt) ||
        hd_targ_device(vm, &a, 2))
        return HD_ERR_RUNTIME;
    at.dtype = (hd_dtype)dt;
    at.scalar[0] = value;
    return create(vm, &a, HD_OP_FULL, &at, out);
}

static HD_TF_FN(tf_zeros) {
    return fill(vm, self, args, nargs, kw, nkw, out, data, 0);
}
static HD_TF_FN(tf_ones) {
    return fill(vm, self, args, nargs, kw, nkw, out, data, 1);
}

/* The dtype a Hodu number gives a tensor: bool, i64, or f32. */
static int number_dtype(hd_value v) {
    return v.type == HD_V_BOOL ? HD_BOOL : v.type == HD_V_INT ? HD_I64 : HD_F32;
}

static HD_TF_FN(tf_full) {
    HD_TARGS_BIND(a); /* shape, value, dtype=, device= */
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int dt;
    double v;
    hd_vtype vt = a.v[1].type;
    if (vt != HD_V_BOOL && vt != HD_V_INT && vt != HD_V_FLOAT)
        return hd_targ_type_error(vm, &a, 1, "a number or a bool");
    v = vt == HD_V_BOOL ? a.v[1].as.b : vt == HD_V_INT ? (double)a.v[1].as.i : a.v[1].as.f;
    if (shape_args(vm, &a, &at)) return HD_ERR_RUNTIME;
    if (hd_targ_dtype(vm, &a, 2, number_dtype(a.v[1]), &dt) || hd_targ_device(vm, &a, 3))
        return HD_ERR_RUNTIME;
    if (vt == HD_V_INT ? !hd_dtype_holds_int((hd_dtype)dt, a.v[1].as.i)
                       : !hd_dtype_holds_float((hd_dtype)dt, v)) {
        char num[32];
        if (vt == HD_V_INT)
            snprintf(num, sizeof num, "%lld", (long long)a.v[1].as.i);
        else
            snprintf(num, sizeof num, "%g", v);
        return hd_vm_error(vm, HD_ERR_RUNTIME, "full: %s does not fit in %s", num,
                           hd_dtype_name((hd_dtype)dt));
    }
    at.dtype = (hd_dtype)dt;
    at.scalar[0] = v;
    return create(vm, &a, HD_OP_FULL, &at, out);
}

static HD_TF_FN(tf_rand) {
    HD_TARGS_BIND(a); /* shape, dtype=, device= */
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int dt;
    if (shape_args(vm, &a, &at) || hd_targ_dtype(vm, &a, 1, HD_F32, &dt) ||
        hd_targ_device(vm, &a, 2))
        return HD_ERR_RUNTIME;
    at.dtype = (hd_dtype)dt;
    at.scalar[1] = 1; /* [0, 1) */
    return create(vm, &a, HD_OP_RAND, &at, out);
}

/* Every element of p in [0, 1], as torch checks: now when p's values are
 * known, else as a step of the compiled code at every call. */
static hd_status rnd_probs_values(hd_ctx *ctx, void *ud, hd_tensor *const *args, int nargs) {
    HD_UNUSED(ud), HD_UNUSED(nargs);
    hd_tensor *h = hd_tensor_to_host(ctx, args[0]);
    if (!h) return ctx->status;
    hd_status st = HD_OK;
    for (int64_t i = 0; i < h->numel && !st; i++) {
        double v = hd_tensor_get(h, i);
        if (!(v >= 0.0 && v <= 1.0))
            st = hd_error(ctx, HD_ERR_RUNTIME,
                          "bernoulli: p must be in [0, 1], got %g at flat index %lld", v,
                          (long long)i);
    }
    hd_tensor_unref(h);
    return st;
}

static void *rnd_check_dup(void *ud) {
    return ud;
}

static void rnd_check_free(hd_ctx *ctx, void *ud) {
    HD_UNUSED(ctx), HD_UNUSED(ud);
}

hd_status hd_tcheck_values(hd_vm *vm, const char *fname, const char *step, hd_tensor *t,
                           hd_status (*check)(hd_ctx *, void *, hd_tensor *const *, int),
                           void *ud) {
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_status st;
    if (hd_compiled_data_known(vm, t)) {
        st = check(ctx, ud, &t, 1);
    } else {
        hd_ir_callback cb = {step, check, ud, rnd_check_dup, rnd_check_free};
        st = hd_trace_callback(ctx, &cb, &t, 1);
    }
    return st ? hd_tfail(vm, fname) : HD_OK;
}

static hd_status rnd_check_probs(hd_vm *vm, hd_tensor *p) {
    return hd_tcheck_values(vm, "bernoulli", "bernoulli check", p, rnd_probs_values, NULL);
}

/* x op y through the op table (y NULL: a unary op); takes x. */
static hd_status rnd_step(hd_vm *vm, const char *fn, hd_op op, hd_tensor **x, hd_tensor *y,
                          const hd_attrs *at) {
    hd_tensor *in[2] = {*x, y}, *r = NULL;
    hd_status st = hd_trun_t(vm, fn, op, in, y ? 2 : 1, at, &r);
    hd_tensor_unref(*x);
    *x = r;
    return st;
}

/* randint(low, high, shape) or randint(high, shape), as torch's: ints
 * uniform in [low, high): floor(u * n) for an f64 draw u in [0, 1) and
 * n = high - low, kept below n (the product's rounding can reach it),
 * plus low, cast to dtype (i64). */
static HD_TF_FN(tf_randint) {
    HD_TARGS_BIND(a); /* low, high, shape=, dtype=, device= */
    int swap = a.v[1].type == HD_V_LIST && !hd_targ_has(&a, 2), dt;
    hd_value lo = swap ? hd_int(0) : a.v[0], hi = swap ? a.v[0] : a.v[1];
    hd_attrs at;
    memset(&at, 0, sizeof at);
    if (lo.type != HD_V_INT || hi.type != HD_V_INT)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "randint: low and high must be ints, got %s and %s",
                           hd_value_type_name(lo), hd_value_type_name(hi));
    if (lo.as.i >= hi.as.i)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "randint: low (%lld) must be below high (%lld)",
                           (long long)lo.as.i, (long long)hi.as.i);
    if (llabs(lo.as.i) > (1ll << 53) || llabs(hi.as.i) > (1ll << 53))
        return hd_vm_error(vm, HD_ERR_RUNTIME, "randint: bounds beyond 2^53 are not supported");
    int nd;
    if (!swap && !hd_targ_has(&a, 2))
        return hd_vm_error(vm, HD_ERR_RUNTIME, "randint: give a shape: randint(low, high, [n])");
    if (hd_targ_shape(vm, &a, swap ? 1 : 2, at.shape, &nd) ||
        hd_targ_dtype(vm, &a, 3, HD_I64, &dt) || hd_targ_device(vm, &a, 4))
        return HD_ERR_RUNTIME;
    if (dt == HD_BOOL) return hd_vm_error(vm, HD_ERR_RUNTIME, "randint: dtype cannot be bool");
    at.nshape = nd;
    at.dtype = HD_F64;
    hd_ctx *ctx = hd_vm_ctx(vm);
    double n = (double)(hi.as.i - lo.as.i);
    hd_tensor *x = NULL,
              *num[3] = {hd_tensor_number(ctx, HD_F64, n), hd_tensor_number(ctx, HD_F64, n - 1),
                         hd_tensor_number(ctx, HD_F64, (double)lo.as.i)};
    hd_attrs cast;
    memset(&cast, 0, sizeof cast);
    cast.dtype = (hd_dtype)dt;
    hd_status st =
        num[0] && num[1] && num[2] ? create_on(vm, &a, HD_OP_RAND, &at, &x) : hd_vm_oom(vm);
    if (!st) st = rnd_step(vm, "randint", HD_OP_MUL, &x, num[0], NULL);
    if (!st) st = rnd_step(vm, "randint", HD_OP_FLOOR, &x, NULL, NULL);
    if (!st) st = rnd_step(vm, "randint", HD_OP_MINIMUM, &x, num[1], NULL);
    if (!st) st = rnd_step(vm, "randint", HD_OP_ADD, &x, num[2], NULL);
    if (!st) st = rnd_step(vm, "randint", HD_OP_CAST, &x, NULL, &cast);
    hd_tunref_all(num, 3);
    if (st) return hd_tensor_unref(x), st;
    hd_tensor_note_range(x, lo.as.i, hi.as.i - 1); /* i64 on a device: no check copies it back */
    *out = hd_tensor_value(x);
    return HD_OK;
}

/* bernoulli(p): 1 where a uniform draw falls below p, else 0, in p's
 * dtype and on p's device (torch's); p must lie in [0, 1]. */
static HD_TF_FN(tf_bernoulli) {
    HD_TARGS_BIND(a); /* p */
    hd_tensor *p = NULL, *u = NULL;
    if (hd_targ_tensor(vm, &a, 0, &p)) return HD_ERR_RUNTIME;
    hd_status st = HD_OK;
    if (!hd_dtype_is_float(p->dtype))
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "bernoulli: p must be a float tensor, got %s",
                         hd_dtype_name(p->dtype));
    if (!st) st = rnd_check_probs(vm, p);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = p->ndim;
    memcpy(at.shape, p->shape, (size_t)p->ndim * sizeof *p->shape);
    at.dtype = p->dtype;
    at.scalar[1] = 1;
    hd_place pl = hd_place_of(p);
    a.place = pl.backend ? pl.backend : &hd_cpu_backend;
    a.place_device = pl.device;
    hd_attrs cast;
    memset(&cast, 0, sizeof cast);
    cast.dtype = p->dtype;
    if (!st) st = create_on(vm, &a, HD_OP_RAND, &at, &u);
    if (!st) st = rnd_step(vm, "bernoulli", HD_OP_LT, &u, p, NULL);
    if (!st) st = rnd_step(vm, "bernoulli", HD_OP_CAST, &u, NULL, &cast);
    hd_tensor_unref(p);
    if (st) return hd_tensor_unref(u), st;
    *out = hd_tensor_value(u);
    return HD_OK;
}

/* randn draws standard normals, then scales: x * std + mean. */
static HD_TF_FN(tf_randn) {
    HD_TARGS_BIND(a); /* shape, mean=, std=, dtype=, device= */
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int dt;
    double mean, sd;
    if (shape_args(vm, &a, &at) || hd_targ_float(vm, &a, 1, 0, &mean) ||
        hd_targ_float(vm, &a, 2, 1, &sd) || hd_targ_dtype(vm, &a, 3, HD_F32, &dt) ||
        hd_targ_device(vm, &a, 4))
        return HD_ERR_RUNTIME;
    if (!(sd >= 0) || !isfinite(sd) || !isfinite(mean)) /* NaN fails sd >= 0 */
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "randn: std must be finite and non-negative, mean finite (got mean "
                           "%g, std %g)",
                           mean, sd);
    at.dtype = (hd_dtype)dt;
    at.scalar[1] = 1;
    hd_tensor *t = NULL;
    if (create_on(vm, &a, HD_OP_RANDN, &at, &t)) return HD_ERR_RUNTIME;
    hd_ctx *ctx = hd_vm_ctx(vm);
    hd_status st = HD_OK;
    for (int k = 0; k < 2 && !st; k++) {
        double s = k == 0 ? sd : mean;
        if (s == (k == 0 ? 1 : 0)) continue;
        hd_tensor *n = hd_tensor_number(ctx, HD_F64, s), *r = NULL;
        hd_tensor *in[2] = {t, n};
        st = n ? hd_trun_t(vm, "randn", k == 0 ? HD_OP_MUL : HD_OP_ADD, in, 2, NULL, &r)
               : hd_vm_from_ctx(vm, HD_ERR_MEMORY);
        hd_tensor_unref(n);
        if (!st) {
            hd_tensor_unref(t);
            t = r;
        }
    }
    if (st) {
        hd_tensor_unref(t);
        return st;
    }
    *out = hd_tensor_value(t);
    return HD_OK;
}

static HD_TF_FN(tf_arange) {
    HD_TARGS_BIND(a); /* start, end=, step=, dtype=, device= */
    hd_attrs at;
    memset(&at, 0, sizeof at);
    double s0, s1, step;
    int all_int = 1, dt;
    for (int i = 0; i < 3; i++) {
        if (!hd_targ_has(&a, i)) continue;
        if (a.v[i].type != HD_V_INT && a.v[i].type != HD_V_FLOAT)
            return hd_targ_type_error(vm, &a, i, "a number");
        if (a.v[i].type == HD_V_FLOAT) all_int = 0;
    }
    if (hd_targ_float(vm, &a, 0, 0, &s0) || hd_targ_float(vm, &a, 1, 0, &s1) ||
        hd_targ_float(vm, &a, 2, 1, &step) ||
        hd_targ_dtype(vm, &a, 3, all_int ? HD_I64 : HD_F32, &dt) || hd_targ_device(vm, &a, 4))
        return HD_ERR_RUNTIME;
    if (!hd_targ_has(&a, 1)) { /* arange(n) */
        s1 = s0;
        s0 = 0;
    }
    at.scalar[0] = s0;
    at.scalar[1] = s1;
    at.scalar[2] = step;
    at.dtype = (hd_dtype)dt;
    return create(vm, &a, HD_OP_ARANGE, &at, out);
}

static HD_TF_FN(tf_linspace) {
    HD_TARGS_BIND(a); /* start, end, n, dtype=, device= */
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int dt;
    if (hd_targ_float(vm, &a, 0, 0, &at.scalar[0]) || hd_targ_float(vm, &a, 1, 0, &at.scalar[1]) ||
        hd_targ_int(vm, &a, 2, 0, &at.ints[0]) || hd_targ_dtype(vm, &a, 3, HD_F32, &dt) ||
        hd_targ_device(vm, &a, 4))
        return HD_ERR_RUNTIME;
    at.dtype = (hd_dtype)dt;
    return create(vm, &a, HD_OP_LINSPACE, &at, out);
}

static HD_TF_FN(tf_eye) {
    HD_TARGS_BIND(a); /* n, m=, dtype=, device= */
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int dt;
    if (hd_targ_int(vm, &a, 0, 0, &at.shape[0]) ||
        hd_targ_int(vm, &a, 1, at.shape[0], &at.shape[1]) ||
        hd_targ_dtype(vm, &a, 2, HD_F32, &dt) || hd_targ_device(vm, &a, 3))
        return HD_ERR_RUNTIME;
    at.nshape = 2;
    at.dtype = (hd_dtype)dt;
    return create(vm, &a, HD_OP_EYE, &at, out);
}

static hd_status fill_like(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                           const hd_kwarg *kw, int nkw, hd_value *out, void *data, double v) {
    HD_TARGS_BIND(a); /* x, dtype= */
    hd_tensor *x = NULL;
    if (hd_targ_tensor(vm, &a, 0, &x)) return HD_ERR_RUNTIME;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int dt;
    if (hd_targ_dtype(vm, &a, 1, x->dtype, &dt)) {
        hd_tensor_unref(x);
        return HD_ERR_RUNTIME;
    }
    at.dtype = (hd_dtype)dt;
    at.nshape = x->ndim;
    memcpy(at.shape, x->shape, sizeof at.shape);
    at.scalar[0] = v;
    hd_place p = hd_place_of(x); /* zeros_like(x) is on x's device */
    a.place = p.backend ? p.backend : &hd_cpu_backend;
    a.place_device = p.device;
    hd_tensor_unref(x);
    return create(vm, &a, HD_OP_FULL, &at, out);
}

static HD_TF_FN(tf_zeros_like) {
    return fill_like(vm, self, args, nargs, kw, nkw, out, data, 0);
}
static HD_TF_FN(tf_ones_like) {
    return fill_like(vm, self, args, nargs, kw, nkw, out, data, 1);
}

static HD_TF_FN(tf_tensor) {
    HD_TARGS_BIND(a); /* data, dtype=, device= */
    int dt;
    if (hd_targ_dtype(vm, &a, 1, -1, &dt) || hd_targ_device(vm, &a, 2) || default_place(vm, &a))
        return HD_ERR_RUNTIME;
    hd_tensor *t = NULL, *d = NULL;
    if (hd_tensor_from_value(vm, a.v[0], dt, HD_F32, &t)) return HD_ERR_RUNTIME;
    if (a.place && a.place != &hd_cpu_backend) {
        hd_status st = hd_tensor_to_device(hd_vm_ctx(vm), t, a.place, a.place_device, &d);
        hd_tensor_unref(t);
        if (st) return hd_tfail(vm, "tensor");
        t = d;
    }
    *out = hd_tensor_value(t);
    return HD_OK;
}

static HD_TF_FN(tf_manual_seed) {
    HD_TARGS_BIND(a); /* seed */
    int64_t seed;
    if (hd_targ_int(vm, &a, 0, 0, &seed)) return HD_ERR_RUNTIME;
    hd_rng_seed(hd_vm_ctx(vm), (uint64_t)seed);
    *out = hd_none();
    return HD_OK;
}

static const hd_tfunc rows[] = {
    {"tensor", tf_tensor, "data, dtype=, device=", -1, HD_TF_GLOBAL},
    {"zeros", tf_zeros, "*shape, dtype=, device=", -1, HD_TF_GLOBAL},
    {"ones", tf_ones, "*shape, dtype=, device=", -1, HD_TF_GLOBAL},
    {"full", tf_full, "shape, value, dtype=, device=", -1, HD_TF_GLOBAL},
    {"rand", tf_rand, "*shape, dtype=, device=", -1, HD_TF_GLOBAL},
    {"randn", tf_randn, "*shape, mean=, std=, dtype=, device=", -1, HD_TF_GLOBAL},
    {"randint", tf_randint, "low, high, shape=, dtype=, device=", -1, HD_TF_GLOBAL},
    {"bernoulli", tf_bernoulli, "p", -1, HD_TF_BOTH},
    {"arange", tf_arange, "start, end=, step=, dtype=, device=", -1, HD_TF_GLOBAL},
    {"linspace", tf_linspace, "start, end, n, dtype=, device=", -1, HD_TF_GLOBAL},
    {"eye", tf_eye, "n, m=, dtype=, device=", -1, HD_TF_GLOBAL},
    {"zeros_like", tf_zeros_like, "x, dtype=", -1, HD_TF_GLOBAL},
    {"ones_like", tf_ones_like, "x, dtype=", -1, HD_TF_GLOBAL},
    {"manual_seed", tf_manual_seed, "seed", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"set_default_device", tf_set_default_device, "device", -1, HD_TF_GLOBAL | HD_TF_EFFECT},
    {"default_device", tf_default_device, "", -1, HD_TF_GLOBAL},
};

const hd_tfunc_table hd_tfuncs_create = {rows, (int)(sizeof rows / sizeof rows[0])};
