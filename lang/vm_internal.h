/* vm_internal: the VM's structure and the heap objects that only the
 * language core sees (cells, closures, classes, objects, modules, bound
 * methods), shared by value.c, vm.c, resolve.c, eval.c and builtins_core.c. */
#ifndef HD_VM_INTERNAL_H
#define HD_VM_INTERNAL_H

#include <signal.h>

#include "ast.h"
#include "strategy.h"
#include "vm.h"

/* The evaluator's failure marker: an expression that failed returns a value
 * of this type (the message is in the VM). It is never stored anywhere. */
#define HD_V_ERR ((hd_vtype)(HD_V_COUNT + 1))

/* Default limit on nested Hodu calls; see docs/language.md. */
#define HD_DEFAULT_MAX_DEPTH 1000
#define HD_ERRTEXT_MAX       16384

/* hd_vm.compile_all: how plain code goes through compiled code's caches.
 * ENV: HODU_COMPILE_ALL=1, every call with tensors and every top-level
 * statement traced at once (the differential tests' mode); CALLS: calls
 * with tensors traced from their second (modes "hybrid" and "lazy",
 * docs/strategy.md); LOOPS: loops that eager code meets traced whole (mode
 * "lazy"). HODU_COMPILE_ALL=lazy sets CALLS and LOOPS for the whole run. */
#define HD_COMPILE_ALL_ENV   1
#define HD_COMPILE_ALL_CALLS 2
#define HD_COMPILE_ALL_LOOPS 4

static inline hd_value hd_err_value(void) {
    hd_value v;
    v.type = HD_V_ERR;
    v.as.i = 0;
    return v;
}

/* A slot that was declared but whose `let` has not run yet: none with a
 * marker, so that reading it early is an error instead of a silent none. */
static inline hd_value hd_uninit(void) {
    hd_value v;
    v.type = HD_V_NONE;
    v.as.i = 1;
    return v;
}
static inline int hd_is_uninit(hd_value v) {
    return v.type == HD_V_NONE && v.as.i == 1;
}

typedef struct hd_cell {
    hd_obj obj;
    hd_value v;
} hd_cell;

/* One parsed chunk of source. Functions point into its AST, so chunks live
 * until the VM is freed (a REPL session keeps every line it ran). */
typedef struct hd_chunk {
    struct hd_chunk *next;
    char *name;
    char *source;
    size_t len;
    hd_parse parse;
    int parsed;
} hd_chunk;

typedef struct hd_module {
    hd_obj obj;
    char *name;     /* "nn", or "<main>" */
    char *path;     /* canonical file path, or NULL */
    char *dir;      /* folder that relative imports start from */
    hd_value names; /* dict: global name -> int slot */
    hd_value *globals;
    int nglobals, cap;
    int state;  /* HD_MOD_* */
    int stdlib; /* found in the standard library: errors show the caller's line */
} hd_module;

enum { HD_MOD_LOADING, HD_MOD_READY, HD_MOD_FAILED };

typedef struct hd_class hd_class;

typedef struct hd_closure {
    hd_obj obj;
    const hd_ast_fn *fn;
    hd_chunk *chunk;
    hd_module *mod; /* referenced: its globals */
    int ncells;
    hd_cell *cells[];
} hd_closure;

struct hd_class {
    hd_obj obj;
    hd_value name;    /* str */
    hd_value methods; /* dict: name -> function (the base's first, then its own) */
    hd_value base;    /* the class it derives from, or none */
};

typedef struct hd_object {
    hd_obj obj;
    hd_class *cls;   /* referenced */
    hd_value fields; /* dict, in assignment order */
} hd_object;

typedef struct hd_bound {
    hd_obj obj;
    hd_value self;
    hd_value fn;
} hd_bound;

/* One activation: a function call or a chunk's top level. Lives on the C
 * stack of the call that owns it. */
typedef struct hd_frame {
    struct hd_frame *parent;
    hd_value *slots;
    hd_value *globals;
    hd_closure *closure; /* NULL at a chunk's top level */
    hd_module *mod;
    hd_chunk *chunk;
    const hd_ast *at; /* the call or import in progress, for the trace */
    hd_value ret;
    int nslots;
    /* base[ref.kind] + ref.index is a plain variable's slot: slots for
     * HD_REF_LOCAL, globals for HD_REF_GLOBAL, NULL for the other kinds. */
    hd_value *base[HD_REF_BUILTIN + 1];
} hd_frame;

struct hd_vm {
    hd_ctx ctx;
    hd_vm_options opts;

    /* the class whose init the next closure call binds (construct): its
     * argument errors name the class and show how it is called */
    const hd_class *ctor;

    /* heap objects */
    hd_obj *objects;
    size_t nobjects;
    size_t gc_threshold;
    int sweeping; /* hd_vm_free in progress: unref does not free */
    hd_obj *pending_free;
    int freeing;

    /* prelude */
    hd_value builtin_index; /* dict: name -> int */
    hd_value *builtins;
    int nbuiltins, builtins_cap;
    hd_value methods[HD_V_COUNT]; /* per type: dict name -> native */

    hd_module *main;
    hd_value modules; /* dict: canonical path -> module */
    hd_value backward_hooks; /* list of what _on_backward registered, or none */
    struct hd_dp *dp;        /* DataParallel groups averaged during backward() */
    hd_chunk *chunks;
    char *stdlib_dir;

    /* execution */
    hd_frame *frame;
    int depth, max_depth;
    uint64_t steps, max_steps;
    uint64_t step_check;     /* steps at which tick() looks again: max_steps, or
                              * sooner under a time limit (to read the clock) */
    _Atomic int interrupted; /* set by hd_vm_interrupt, maybe from another thread */
    int repl;

    /* error state */
    hd_status err;
    int err_located; /* the text has its location and trace */
    char errmsg[HD_ERRMSG_MAX];
    char errtext[HD_ERRTEXT_MAX];
    /* where the error was located (line 0: nowhere), for a catch's Error */
    char err_file[256];
    int err_line, err_col;
    struct hd_class *error_class; /* the builtin Error (eval_try.c), held by the prelude */

    void (*write)(void *ud, const char *s, size_t n);
    void *write_ud;
    hd_grad_enter_fn grad_enter;
    hd_grad_exit_fn grad_exit;
    hd_strategy_state strategy; /* the execution strategy in force (strategy.c) */

    /* compiled code (compiled.c) */
    struct hd_compiled_state *compiled; /* caches, the trace in progress */
    int trace_reads;                    /* a compiled body is traced: reads are noted */
    int compile_all; /* plain code through compiled code's caches: HD_COMPILE_ALL_* bits */
    int compile_env; /* the bits HODU_COMPILE_ALL sets, which strategies keep */
    int compile_none;                   /* HODU_EAGER=1: compiled code runs eagerly */
    int script_depth;                   /* inside script("name") { } (builtins_script.c) */
    struct hd_roll_watch *roll_watch;   /* innermost traced loop iteration (eval_loop.c) */
    struct hd_roll_var *roll_var; /* traced loops' variables as counter tensors (eval_loop.c) */
    hd_value comp_list;           /* the innermost list comprehension's list (borrowed) */
    uint64_t births;              /* heap objects made so far (hd_obj.birth) */

    /* where creation functions put tensors without device= (NULL: the
     * cpu): set_default_device(d), or HODU_DEVICE, resolved on first use */
    const struct hd_backend *default_be;
    int default_dev;
    int default_pending; /* HODU_DEVICE not resolved yet */
};

/* ---- traced loops (eval_loop.c) ----
 *
 * While compiled code is traced, a counted loop watches two consecutive
 * iterations: a write to state that existed before an iteration is allowed
 * only if it leaves that state as the next iteration will see it (a tensor
 * of the same dtype, shape and gradient status, or an equal plain value).
 * The hooks below are called at every such write; they cost one test when
 * no loop is watched. */
void hd_roll_note_store(hd_vm *vm, const hd_frame *f, const hd_ref *r, const hd_obj *cell,
                        hd_value old, hd_value v);
/* A write into container o (a list, dict or object's fields): has_old 0
 * when it adds or removes an entry. */
void hd_roll_note_container(hd_vm *vm, const hd_obj *o, int has_old, hd_value old, hd_value v);
/* A module's global set from outside its code. */
void hd_roll_note_global(hd_vm *vm, hd_value old, hd_value v);
/* An index k into something that is no tensor (a list, dict, string):
 * where k is the loop variable served as a counter tensor (x[i] in a
 * traced loop), *out is the int (k stays held by the caller) and the loop
 * stays unrolled; returns 1 then. */
int hd_roll_index_int(hd_vm *vm, hd_value k, hd_value *out);

/* ---- refcounting, inline for the evaluator ---- */
void hd_obj_release(hd_vm *vm, hd_obj *o); /* refcount reached zero */

/* One unsigned compare selects tensors and objects (and skips HD_V_ERR). */
#define HD_V_COUNTED(t)                                                                            \
    ((unsigned)(t) - (unsigned)HD_V_TENSOR < (unsigned)(HD_V_COUNT - HD_V_TENSOR))

static inline void hd_vref(hd_value v) {
    if (HD_V_COUNTED(v.type)) {
        if (v.type == HD_V_TENSOR)
            hd_tensor_ref(v.as.t);
        else
            v.as.o->refcount++;
    }
}
static inline void hd_vunref(hd_vm *vm, hd_value v) {
    if (HD_V_COUNTED(v.type)) {
        if (v.type == HD_V_TENSOR)
            hd_tensor_unref(v.as.t);
        else if (--v.as.o->refcount == 0) {
            hd_obj_release(vm, v.as.o);
        }
    }
}
static inline hd_value hd_obj_value(hd_obj *o) {
    hd_value v;
    v.type = o->type;
    v.as.o = o;
    return v;
}

/* ---- objects (value.c) ---- */
void *hd_obj_new(hd_vm *vm, hd_vtype type, size_t size); /* linked, refcount 1; NULL on OOM */
size_t hd_obj_size(const hd_obj *o);
void hd_obj_clear(hd_vm *vm, hd_obj *o);     /* drop what o holds; o stays valid and empty */
hd_cell *hd_cell_new(hd_vm *vm, hd_value v); /* takes v */
hd_value hd_range_new(hd_vm *vm, int64_t start, int64_t stop, int64_t step);
uint64_t hd_range_ulen(const hd_range *r); /* exact: up to 2^64 - 1 */
int64_t hd_range_len(const hd_range *r);   /* clamped to INT64_MAX (loops, truth) */
/* Element i of a range; in unsigned arithmetic because i * step alone may
 * leave i64 even when the element does not. */
static inline int64_t hd_range_at(int64_t start, int64_t step, int64_t i) {
    return (int64_t)((uint64_t)start + (uint64_t)i * (uint64_t)step);
}
hd_value hd_closure_new(hd_vm *vm, const hd_ast_fn *fn, hd_chunk *chunk, hd_module *mod);
hd_value hd_class_new(hd_vm *vm, const char *name);
hd_value hd_object_new(hd_vm *vm, hd_class *cls);
/* class C(Base): C starts with Base's methods (eval_super.c). */
hd_status hd_class_inherit(hd_vm *vm, hd_class *c, hd_value base);
hd_value hd_bound_new(hd_vm *vm, hd_value self, hd_value fn); /* takes both */
hd_module *hd_module_new(hd_vm *vm, const char *name, const char *path);
/* Native bound to a receiver (takes self). */
hd_value hd_native_bound(hd_vm *vm, const hd_native *n, hd_value self);

hd_status hd_list_reserve(hd_vm *vm, hd_list *l, int64_t cap);
hd_status hd_list_insert(hd_vm *vm, hd_list *l, int64_t at, hd_value item);     /* takes item */
hd_status hd_dict_set_str(hd_vm *vm, hd_value dict, hd_str *key, hd_value val); /* takes val */
hd_value *hd_dict_get_str(hd_value dict, const hd_str *key);
hd_value *hd_dict_getn(hd_value dict, const char *key, size_t len);
int64_t hd_dict_find(const hd_dict *d, const char *key, size_t len, uint32_t hash);
/* Remove key; *out receives its value (owned) when found. Returns 1 if found. */
int hd_dict_remove(hd_vm *vm, hd_value dict, const char *key, size_t len, hd_value *out);
void hd_dict_clear(hd_vm *vm, hd_dict *d);
/* Remove every entry but keep the storage: a dict's capacity never goes
 * down while it lives (a compiled trace puts entries back without
 * allocating, see compiled_snap.c). */
void hd_dict_empty(hd_vm *vm, hd_dict *d);
uint32_t hd_str_hash(const char *s, size_t len);
size_t hd_utf8_count(const char *s, size_t len);
/* Byte offset of code point i in s (i in 0..ulen). */
size_t hd_str_offset(const hd_str *s, int64_t i);

/* Float as Python's repr prints it ("1.0", "1e-05"); buf of 32 bytes. */
void hd_format_float(char *buf, size_t n, double d);
/* Structural comparison: <0, 0, >0; *ok = 0 if the types do not order. */
int hd_value_compare(hd_value a, hd_value b, int *ok);

/* Growable text buffer through the VM's allocator. */
typedef struct hd_buf {
    hd_vm *vm;
    char *p;
    size_t len, cap;
    int oom;
    int failed; /* a part's text failed with the VM's error set (a tensor's
                 * data could not be read): hd_buf_to_str gives that error */
} hd_buf;
void hd_buf_init(hd_buf *b, hd_vm *vm);
void hd_buf_add(hd_buf *b, const char *s, size_t n);
void hd_buf_adds(hd_buf *b, const char *s);
void hd_buf_addf(hd_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Append str(v) (quote = 0) or repr(v) (quote = 1). */
void hd_buf_value(hd_buf *b, hd_value v, int quote);
/* Append v as format spec spec (len bytes: "", ".3f", ">8", ...) says:
 * Python's mini-language (format_spec.c). */
hd_status hd_format_spec(hd_vm *vm, hd_buf *b, hd_value v, const char *spec, size_t len);
hd_value hd_buf_to_str(hd_buf *b); /* frees the buffer */
void hd_buf_free(hd_buf *b);
/* Whether the text is incomplete (out of memory, or a part failed): adds
 * are ignored from then on. */
int hd_buf_failed(const hd_buf *b);
/* The failure as the VM's error (out of memory, or the part's error); the
 * buffer stays the caller's to free. */
hd_status hd_buf_error(hd_buf *b);

/* Collect reference cycles now; *freed (may be NULL) gets the number of
 * objects freed. HD_ERR_MEMORY, with nothing freed, when marking ran out
 * of memory. */
hd_status hd_vm_collect(hd_vm *vm, size_t *freed);

/* ---- VM internals (vm.c) ---- */
void hd_vm_locate(hd_vm *vm, hd_frame *f, const hd_span *span);
hd_status hd_vm_oom(hd_vm *vm);
/* The HD_ERR_LIMIT error of a stopped run ("interrupted", or the time
 * limit's); clears the interrupt flag. */
hd_status hd_vm_stop_error(hd_vm *vm);
/* Steps between two looks at the clock under a time limit. */
#define HD_TICK_CLOCK 1024
hd_status hd_vm_import(hd_vm *vm, hd_frame *f, const hd_ast *node, hd_value *out);
hd_value *hd_module_global(hd_module *m, const char *name);
hd_status hd_module_grow(hd_vm *vm, hd_module *m, int n);
/* Methods of builtin types: name -> native, for str, list, dict, range. */
hd_status hd_vm_def_method(hd_vm *vm, hd_vtype type, const char *name, hd_native_fn fn);
hd_value *hd_vm_find_method(hd_vm *vm, hd_vtype type, const char *name);

/* ---- evaluator (eval.c) ---- */
hd_status hd_eval_chunk(hd_vm *vm, hd_chunk *chunk, hd_module *mod, int repl);
hd_status hd_eval_call(hd_vm *vm, hd_value callee, hd_value self, int has_self,
                       const hd_value *args, int nargs, const hd_kwarg *kw, int nkw, hd_value *out);
/* Truthiness with errors (a tensor with several elements is ambiguous). */
int hd_eval_truthy(hd_vm *vm, hd_value v, int *ok);
/* An object whose class has a str method: its text (as Python's __str__)
 * in *out (a new reference; print and str() use it); *out stays none for
 * every other value. builtins_core.c. */
hd_status hd_eval_str_method(hd_vm *vm, hd_value x, hd_value *out);
/* x.name for any value; out is a new reference. */
hd_status hd_eval_get_member(hd_vm *vm, hd_value x, const char *name, hd_value *out);

/* ---- builtins ---- */
hd_status hd_builtins_core_open(hd_vm *vm);

#endif
