/* value: the values a Hodu program sees, the VM that owns them, and the
 * calling convention of native (C) functions.
 *
 * A value is a small tagged struct passed by copy. Heap values (strings,
 * lists, dicts, functions, classes, objects, modules, ...) are refcounted
 * objects; tensors are hd_tensor (refcounted by the runtime). Every
 * hd_value that is stored somewhere owns one reference: copy with
 * hd_value_ref, drop with hd_value_unref (QuickJS's dup/free pairs). Every
 * heap object is also linked into its VM so that hd_vm_free releases
 * everything, cycles included. */
#ifndef HD_VALUE_H
#define HD_VALUE_H

#include "hd_tensor.h"

typedef struct hd_vm hd_vm;
typedef struct hd_obj hd_obj;

typedef enum {
    HD_V_NONE,
    HD_V_BOOL,
    HD_V_INT,
    HD_V_FLOAT,
    HD_V_DTYPE,
    HD_V_TENSOR, /* as.t */
    HD_V_STR,    /* the rest: as.o, a heap object */
    HD_V_LIST,
    HD_V_DICT,
    HD_V_RANGE,
    HD_V_FUNC,   /* a closure over an AST function */
    HD_V_NATIVE, /* a C function, possibly bound to a receiver */
    HD_V_CLASS,
    HD_V_OBJECT,
    HD_V_MODULE,
    HD_V_BOUND,  /* a method bound to its receiver */
    HD_V_HANDLE, /* an opaque C object with a type name and a free hook (scripts, strategies, ...) */
    HD_V_CELL,   /* internal: a captured variable's box; never a program-visible value */
    HD_V_COUNT
} hd_vtype;

typedef struct hd_value {
    hd_vtype type;
    union {
        int b;
        int64_t i;
        double f;
        hd_dtype dt;
        hd_tensor *t;
        hd_obj *o;
    } as;
} hd_value;

/* Header of every heap object. */
struct hd_obj {
    int refcount;
    hd_vtype type;
    hd_obj *prev, *next; /* the VM's list of live objects */
    int64_t gc;          /* scratch for the cycle collector */
    uint64_t birth;      /* the VM's allocation count when it was made (traced loops) */
};

typedef struct hd_str {
    hd_obj obj;
    size_t len;
    size_t ulen; /* code points (UTF-8); == len for ASCII, which makes indexing O(1) */
    uint32_t hash;
    char chars[]; /* len bytes, then a NUL */
} hd_str;

typedef struct hd_list {
    hd_obj obj;
    int64_t len, cap;
    hd_value *items;
} hd_list;

/* Insertion-ordered dict with str keys. */
typedef struct hd_dict {
    hd_obj obj;
    int64_t len, cap;
    hd_str **keys;
    hd_value *vals;
    int32_t *index; /* open-addressing table of positions, size index_cap */
    int64_t index_cap;
} hd_dict;

typedef struct hd_range {
    hd_obj obj;
    int64_t start, stop, step;
} hd_range;

/* Keyword arguments of a call: `f(x, axis = 1)`. */
typedef struct hd_kwarg {
    const char *name;
    hd_value value;
} hd_kwarg;

/* A native function. args are borrowed (do not unref them); on success
 * *result receives a new reference (set it to none for "no value"). On
 * failure return the status from hd_vm_error (the evaluator adds the
 * call's file:line:col and the trace). `self` is the receiver for methods
 * (HD_V_NONE otherwise), `data` the pointer given at registration. */
typedef hd_status (*hd_native_fn)(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                                  const hd_kwarg *kw, int nkw, hd_value *result, void *data);

typedef struct hd_native {
    hd_obj obj;
    const char *name;
    hd_native_fn fn;
    void *data;
    hd_value self; /* bound receiver, or none */
} hd_native;

typedef struct hd_handle_type {
    const char *name;                              /* type(x) prints this */
    void (*free)(hd_vm *vm, void *p);              /* releases p */
    /* optional: member lookup (x.name); returns HD_OK and a new reference, or
     * an error if there is no such member */
    hd_status (*member)(hd_vm *vm, hd_value self, const char *name, hd_value *out);
} hd_handle_type;

typedef struct hd_handle {
    hd_obj obj;
    const hd_handle_type *htype;
    void *p;
} hd_handle;

/* ---- constructors (new references) ---- */
static inline hd_value hd_none(void) {
    hd_value v;
    v.type = HD_V_NONE;
    v.as.i = 0;
    return v;
}
static inline hd_value hd_bool(int b) {
    hd_value v;
    v.type = HD_V_BOOL;
    v.as.b = b != 0;
    return v;
}
static inline hd_value hd_int(int64_t i) {
    hd_value v;
    v.type = HD_V_INT;
    v.as.i = i;
    return v;
}
static inline hd_value hd_float(double f) {
    hd_value v;
    v.type = HD_V_FLOAT;
    v.as.f = f;
    return v;
}
static inline hd_value hd_dtype_value(hd_dtype dt) {
    hd_value v;
    v.type = HD_V_DTYPE;
    v.as.dt = dt;
    return v;
}
/* Takes ownership of the tensor reference. */
static inline hd_value hd_tensor_value(hd_tensor *t) {
    hd_value v;
    v.type = HD_V_TENSOR;
    v.as.t = t;
    return v;
}
static inline int hd_value_is_obj(hd_value v) { return v.type >= HD_V_STR; }

/* Strings: NULL-free on success; on OOM the VM holds an HD_ERR_MEMORY error
 * and the result is none (check with hd_vm_failed). */
hd_value hd_str_new(hd_vm *vm, const char *s, size_t len);
hd_value hd_str_from(hd_vm *vm, const char *s);
hd_value hd_str_fmt(hd_vm *vm, const char *fmt, ...);
static inline hd_str *hd_as_str(hd_value v) { return (hd_str *)v.as.o; }

hd_value hd_list_new(hd_vm *vm, int64_t cap);
hd_status hd_list_push(hd_vm *vm, hd_value list, hd_value item); /* takes ownership of item */
static inline hd_list *hd_as_list(hd_value v) { return (hd_list *)v.as.o; }

hd_value hd_dict_new(hd_vm *vm);
/* Takes ownership of val; the key is copied. */
hd_status hd_dict_set(hd_vm *vm, hd_value dict, const char *key, hd_value val);
/* Borrowed value, or NULL if absent. */
hd_value *hd_dict_get(hd_value dict, const char *key);
static inline hd_dict *hd_as_dict(hd_value v) { return (hd_dict *)v.as.o; }

hd_value hd_native_new(hd_vm *vm, const char *name, hd_native_fn fn, void *data);
/* The dtype the conversion functions bool, int and float name (as in
 * torch: x.dtype == bool, zeros(2, dtype = int)): HD_BOOL, HD_I64, HD_F64;
 * -1 for any other value. */
int hd_value_dtype_name(hd_value v);
hd_value hd_handle_new(hd_vm *vm, const hd_handle_type *type, void *p);

/* ---- references ---- */
hd_value hd_value_ref(hd_value v);
void hd_value_unref(hd_vm *vm, hd_value v);

/* ---- inspection ---- */
const char *hd_value_type_name(hd_value v); /* "int", "tensor", class name for objects... */
int hd_value_truthy(hd_value v);            /* none/false/0/""/empty -> false */
/* str(v) as Hodu prints it; a new string value. */
hd_value hd_value_to_str(hd_vm *vm, hd_value v);
/* repr: strings quoted, used inside lists/dicts. */
hd_value hd_value_repr(hd_vm *vm, hd_value v);
int hd_value_equal(hd_value a, hd_value b);

/* ---- VM services natives use ---- */
hd_ctx *hd_vm_ctx(hd_vm *vm);
/* Record an error (message without location; the evaluator adds it) and
 * return st. */
hd_status hd_vm_error(hd_vm *vm, hd_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Turn the runtime context's pending error into a VM error with status st
 * (HD_OK: the context's own). Running out of memory or being interrupted
 * keeps its status whatever st says (compiled code passes HD_ERR_RUNTIME
 * for every failure of a graph, file readers HD_ERR_IO). */
hd_status hd_vm_from_ctx(hd_vm *vm, hd_status st);
/* The status hd_vm_from_ctx gives the context's pending error. */
hd_status hd_vm_ctx_status(const hd_vm *vm, hd_status st);
int hd_vm_failed(hd_vm *vm);
/* Call any callable value; result is a new reference. */
hd_status hd_vm_call(hd_vm *vm, hd_value callee, const hd_value *args, int nargs,
                     const hd_kwarg *kw, int nkw, hd_value *result);
/* Register a builtin global (prelude name) before any code is resolved. */
hd_status hd_vm_def_native(hd_vm *vm, const char *name, hd_native_fn fn, void *data);
hd_status hd_vm_def_value(hd_vm *vm, const char *name, hd_value v); /* takes ownership */
/* Output sink for print (stdout by default; the embedding API can hook it). */
void hd_vm_write(hd_vm *vm, const char *s, size_t n);

#endif
