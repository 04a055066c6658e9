/* builtins_tensor: what the files of the tensor prelude share (internal).
 *
 * Every tensor function is one row of a table (hd_tfunc): its name, its
 * native, its parameter list and, for thin wrappers, the op it runs. The
 * same row serves `sum(x, axis = 1)` and `x.sum(axis = 1)`: a method call
 * passes the receiver as `self`, which the binder puts first. */
#ifndef HD_BUILTINS_TENSOR_H
#define HD_BUILTINS_TENSOR_H

#include "hd_op.h"
#include "tensor_api.h"

enum {
    HD_TF_GLOBAL = 1, /* a prelude name */
    HD_TF_METHOD = 2, /* a member of tensors */
    HD_TF_BOTH = 3,
    HD_TF_EFFECT = 4, /* changes or reads the world: refused inside compiled code */
};

typedef struct hd_tfunc {
    const char *name;
    hd_native_fn fn;
    /* Parameter names, ", "-separated; `name=` is optional, a last `*name`
     * also takes every further positional argument (x.reshape(2, -1)). */
    const char *sig;
    int op; /* the hd_op a thin wrapper runs (or a constant its native reads: the
             * dtype of x.float() and the like), or -1 */
    unsigned flags;
} hd_tfunc;

typedef struct hd_tfunc_table {
    const hd_tfunc *rows;
    int n;
} hd_tfunc_table;

extern const hd_tfunc_table hd_tfuncs_create, hd_tfuncs_math, hd_tfuncs_shape, hd_tfuncs_nn,
    hd_tfuncs_misc, hd_tfuncs_io, hd_tfuncs_grad, hd_tfuncs_module, hd_tfuncs_data, hd_tfuncs_more,
    hd_tfuncs_extra, hd_tfuncs_einsum, hd_tfuncs_func, hd_tfuncs_linalg, hd_tfuncs_random,
    hd_tfuncs_strategy, hd_tfuncs_checkpoint, hd_tfuncs_inplace, hd_tfuncs_dist, hd_tfuncs_optim;

/* builtins_dist.c: run the functions _on_backward registered (after a
 * successful backward()). */
hd_status hd_dist_backward_hooks(hd_vm *vm);
/* DataParallel's buckets: the end of the bucket of ps[0..n) that starts
 * at i: one dtype and place, at most limit elements (one parameter at
 * least). */
int hd_dist_bucket_end(hd_tensor *const *ps, int n, int i, int64_t limit);
/* builtins_dist_dp.c: DataParallel's averaging during backward(). A
 * group of the parameters ps[0..n) in buckets of at most limit elements:
 * its id, -1 where it cannot be done so (the plain path after backward()
 * then), -2 out of memory. covered: the last backward() averaged exactly
 * these. free: at the VM's end. */
int hd_dist_dp_register(hd_vm *vm, hd_tensor *const *ps, int n, int64_t limit);
int hd_dist_dp_covered(hd_vm *vm, int id, hd_tensor *const *ps, int n);
void hd_dist_dp_free(hd_vm *vm);

/* builtins_grad.c: the no_grad / grad_context hooks, and the members
 * requires_grad, is_leaf and grad (get and set). */
hd_status hd_builtins_grad_open(hd_vm *vm);
/* builtins_module.c: train, eval, state_dict, load_state_dict,
 * named_parameters and zero_grad as methods of every object. */
hd_status hd_builtins_module_open(hd_vm *vm);
hd_status hd_grad_member(hd_vm *vm, hd_tensor *t, const char *name, hd_value *out);
hd_status hd_grad_set_member(hd_vm *vm, hd_tensor *t, const char *name, hd_value v);

/* A native's signature, as the rows use it. */
#define HD_TF_FN(name)                                                                             \
    hd_status name(hd_vm *vm, hd_value self, const hd_value *args, int nargs, const hd_kwarg *kw,  \
                   int nkw, hd_value *out, void *data)

/* ---- arguments ---- */

#define HD_TARGS_MAX 16

typedef struct hd_targs {
    const hd_tfunc *f;
    int n;                          /* parameters */
    char names[HD_TARGS_MAX][24];   /* parameter names */
    hd_value v[HD_TARGS_MAX];       /* borrowed; type HD_V_COUNT when not given */
    hd_value all[HD_TARGS_MAX + 1]; /* self and the positional arguments */
    const hd_value *rest;           /* positionals past the last, for a `*name` */
    int nrest;
    const struct hd_backend *place; /* hd_targ_device's device (NULL: none given) */
    int place_device;
} hd_targs;

/* Match self, positional and keyword arguments to f's parameters. Errors
 * name the function: too many arguments, an unknown or repeated keyword, a
 * missing required argument. */
hd_status hd_targs_bind(hd_vm *vm, const hd_tfunc *f, hd_value self, const hd_value *args,
                        int nargs, const hd_kwarg *kw, int nkw, hd_targs *a);
#define HD_TARGS_BIND(a)                                                                           \
    hd_targs a;                                                                                    \
    if (hd_targs_bind(vm, (const hd_tfunc *)data, self, args, nargs, kw, nkw, &a))                 \
        return HD_ERR_RUNTIME;

/* Given and not none. */
static inline int hd_targ_has(const hd_targs *a, int i) {
    return a->v[i].type != HD_V_COUNT && a->v[i].type != HD_V_NONE;
}

hd_status hd_targ_int(hd_vm *vm, const hd_targs *a, int i, int64_t def, int64_t *out);
hd_status hd_targ_float(hd_vm *vm, const hd_targs *a, int i, double def, double *out);
hd_status hd_targ_bool(hd_vm *vm, const hd_targs *a, int i, int def, int *out);
hd_status hd_targ_dtype(hd_vm *vm, const hd_targs *a, int i, int def, int *out); /* -1: none */
/* A device string or none: only "cpu" exists; "cuda" names the missing backend. */
/* device=: parses and opens the device (an unusable one is an error that
 * says why) and records it in a->place. */
hd_status hd_targ_device(hd_vm *vm, hd_targs *a, int i);
/* HODU_DEVICE, read when the VM opens (builtins_tensor_create.c). */
void hd_default_device_init(hd_vm *vm);
/* The default device (resolving HODU_DEVICE). */
hd_status hd_default_device(hd_vm *vm, const struct hd_backend **be, int *dev);
/* Its name ("cuda:0") in buf when it is not the cpu: 1; else 0. */
int hd_default_device_name(hd_vm *vm, char *buf, size_t n);
/* *t (a tensor made from a list) moved to the default device, if it is
 * not the cpu. On failure *t is NULL, with the error. */
hd_status hd_default_device_move(hd_vm *vm, hd_tensor **t);
/* A shape: an int, a list of ints, or (a `*name` parameter) several ints. */
hd_status hd_targ_shape(hd_vm *vm, const hd_targs *a, int i, int64_t *shape, int *nd);
/* Axes into attrs->axes/naxes: none (all), an int, or a list of ints. */
hd_status hd_targ_axes(hd_vm *vm, const hd_targs *a, int i, hd_attrs *attrs);
/* A pair of ints (conv and pool geometry) from an int or a list of two. */
hd_status hd_targ_pair(hd_vm *vm, const hd_targs *a, int i, int64_t def, int64_t *out2);
/* A tensor from a tensor, number or nested list (new reference). */
hd_status hd_targ_tensor(hd_vm *vm, const hd_targs *a, int i, hd_tensor **out);
/* 1 when no tensor is among the parameters given: numbers in, number out. */
int hd_targs_numbers_only(const hd_targs *a);
hd_status hd_targ_type_error(hd_vm *vm, const hd_targs *a, int i, const char *want);

/* ---- values and tensors ---- */

/* v as a tensor: tensors are referenced, numbers become hd_tensor_number
 * (or plain 0-d tensors when exact is set: i64 and f64), lists are
 * converted as tensor() does (floats as float_dt). Error "what must be a
 * tensor" otherwise. */
/* Whether an int or a float value can be stored in dt: integer dtypes
 * refuse what does not fit (tensor() and full() alike); others take all. */
int hd_dtype_holds_int(hd_dtype dt, int64_t x);
int hd_dtype_holds_float(hd_dtype dt, double x);
hd_status hd_value_to_tensor(hd_vm *vm, hd_value v, const char *what, int exact, hd_dtype float_dt,
                             hd_tensor **out);
/* tensor(data): nested lists of numbers, bools and tensors; dt < 0 infers
 * (bools -> bool, ints -> i64, floats -> float_dt). */
hd_status hd_tensor_from_value(hd_vm *vm, hd_value data, int dt, hd_dtype float_dt,
                               hd_tensor **out);
/* The values of t are read now: an error inside compiled code when t
 * stands for a value known only when the graph runs (what names the
 * reader). */
hd_status hd_tensor_need_data(hd_vm *vm, const hd_tensor *t, const char *what);

/* check(ctx, ud, &t, 1) on t's values: now when they are known, else as a
 * step of the compiled code (named step) at every call; ud is kept as it
 * is (a value, not owned). Errors name fname. */
hd_status hd_tcheck_values(hd_vm *vm, const char *fname, const char *step, hd_tensor *t,
                           hd_status (*check)(hd_ctx *, void *, hd_tensor *const *, int), void *ud);

/* A 0-d or one-element tensor's value as a number of its kind. */
hd_status hd_tensor_item(hd_vm *vm, const hd_tensor *t, hd_value *out);
hd_status hd_tensor_tolist(hd_vm *vm, const hd_tensor *t, hd_value *out);

/* Run op; on failure turn ctx's error into the VM's, prefixed with fname
 * when the message does not name it already. numbers: the inputs are
 * plain numbers; an integer input of a float op is computed in f64 and a
 * 0-d result comes back as a number. */
hd_status hd_trun(hd_vm *vm, const char *fname, hd_op op, hd_tensor **in, int nin,
                  const hd_attrs *attrs, int numbers, hd_value *out);
/* Same, keeping the result a tensor (new reference in *t). */
hd_status hd_trun_t(hd_vm *vm, const char *fname, hd_op op, hd_tensor **in, int nin,
                    const hd_attrs *attrs, hd_tensor **t);
/* The ctx's pending error as the VM's, with the function's name. */
hd_status hd_tfail(hd_vm *vm, const char *fname);
void hd_tunref_all(hd_tensor **t, int n);

/* View helpers over SLICE and RESHAPE. */
hd_status hd_tslice_axis(hd_ctx *ctx, hd_tensor *t, int axis, int64_t start, int64_t len, int drop,
                         hd_tensor **out);
hd_status hd_treshape(hd_ctx *ctx, hd_tensor *t, const int64_t *shape, int nd, hd_tensor **out);

#endif
