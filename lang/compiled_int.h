/* compiled_int: what the files of compiled code share (internal).
 *
 * Paths name where a value lives so that a later call can find it again
 * without running the body: a root (an argument, a captured variable of the
 * function, a slot of the frame a block runs in, a module global) followed
 * by steps (an object's field or a dict's key, a list's item, a tensor's
 * .grad, a function's captured variable, a bound method's receiver).
 *
 * A scan walks the heap reachable from the roots breadth first and maps
 * every tensor and container it meets to its first (shortest) path; a
 * trace uses it to lift the tensors of objects into graph inputs, to find
 * the outer values it assigned (outputs written back after each run), and
 * to name the containers whose reads become guards. */
#ifndef HD_COMPILED_INT_H
#define HD_COMPILED_INT_H

#include "compiled.h"
#include "hd_compile.h"
#include "hd_trace.h"

/* Grow *p (elem bytes each, capacity *cap) to hold n + 1; 0 on failure
 * (an out-of-memory error in the VM). */
static inline int cp_grow(hd_vm *vm, void **p, int *cap, int n, size_t elem) {
    if (n < *cap) return 1;
    int c = *cap ? *cap * 2 : 8;
    void *q = hd_ctx_realloc(&vm->ctx, *p, (size_t)*cap * elem, (size_t)c * elem);
    if (!q) return hd_vm_oom(vm), 0;
    *p = q;
    *cap = c;
    return 1;
}
#define CP_GROW(vm, arr, cap, n) cp_grow((vm), (void **)&(arr), &(cap), (n), sizeof *(arr))

static inline void cp_free_array(hd_vm *vm, void *p, int cap, size_t elem) {
    if (cap) hd_ctx_free(&vm->ctx, p, (size_t)cap * elem);
}

/* ---- paths ---- */

typedef enum { CP_ROOT_ARG, CP_ROOT_UPVAL, CP_ROOT_SLOT, CP_ROOT_GLOBAL } cp_root_kind;
typedef enum { CP_FIELD, CP_INDEX, CP_GRAD, CP_CELL, CP_SELF } cp_step_kind;

typedef struct cp_step {
    cp_step_kind kind;
    int64_t i;  /* INDEX, CELL */
    char *name; /* FIELD (owned by the path) */
} cp_step;

typedef struct cp_path {
    cp_root_kind root;
    int index;      /* argument, captured variable, slot or global slot */
    hd_module *mod; /* CP_ROOT_GLOBAL: held */
    int nsteps;
    cp_step *steps;
    char *text; /* "model.fc1.weight", for names and messages */
} cp_path;

/* Where paths start at one call or block run. */
typedef struct cp_roots {
    hd_vm *vm;
    const hd_value *args; /* compiled fn: self (if any), positional, named */
    int nargs;
    const char *const *arg_names;
    hd_closure *closure; /* its captured variables */
    const char *const *upval_names;
    hd_value *slots; /* compiled block: the frame's slots (cells are read through) */
    int nslots;
    const unsigned char *slot_skip; /* slots declared inside the block */
    const char *const *slot_names;
} cp_roots;

void cp_path_free(hd_vm *vm, cp_path *p);
hd_status cp_path_copy(hd_vm *vm, const cp_path *src, cp_path *dst);
/* The value at p (borrowed; a .grad step gives the tensor or none). 0 when
 * the path no longer leads anywhere. */
int cp_path_get(const cp_roots *r, const cp_path *p, hd_value *out);
/* Store v (borrowed) at p: a field, a dict key, a list item, a .grad, a
 * captured variable, a slot or a global. */
hd_status cp_path_set(const cp_roots *r, const cp_path *p, hd_value v);
/* cp_path_set in two steps: the container p's last step stores into (a new
 * reference in *x; none for a path of no steps), then the store into it. */
hd_status cp_path_parent(const cp_roots *r, const cp_path *p, hd_value *x);
hd_status cp_path_store(const cp_roots *r, const cp_path *p, hd_value x, hd_value v);
/* p followed by one more step (name copied). */
hd_status cp_path_extend(hd_vm *vm, const cp_path *p, cp_step_kind kind, int64_t i,
                         const char *name, cp_path *out);
hd_status cp_path_root(const cp_roots *r, cp_root_kind kind, int index, hd_module *m, cp_path *out);

/* ---- scans ---- */

/* Path hashes, built root first, one step at a time. */
uint64_t cp_hash_root(cp_root_kind kind, int index, const hd_module *m);
uint64_t cp_hash_step(uint64_t h, const cp_step *s);

typedef struct cp_node {
    hd_value v;    /* held */
    hd_obj *alias; /* the cell the value was read through, or NULL (held) */
    int parent;    /* -1 for a root */
    cp_step step;  /* from the parent (name borrowed from the heap) */
    cp_root_kind root;
    int index;
    hd_module *mod;
    int depth;
    uint64_t hash; /* of the path, to match nodes of two scans */
} cp_node;

typedef struct cp_scan {
    hd_vm *vm;
    cp_node *nodes;
    int n, cap;
    const void **keys; /* identity (tensor, object, cell) -> node */
    int *vals;
    int nkeys, kcap;
    uint64_t *hkeys; /* path hash -> node */
    int *hvals;
    int hcap;
} cp_scan;

/* Walk from the roots; nothing in the heap changes. */
hd_status cp_scan_build(cp_scan *s, const cp_roots *r);
void cp_scan_free(cp_scan *s);
/* The node of a tensor, object or cell, or -1. */
int cp_scan_find(const cp_scan *s, const void *key);
/* The node of tensor t, or of a tensor with its elements (t is a view
 * made in the body with the same geometry: x.detach()), or -1. */
int cp_scan_find_tensor(const cp_scan *s, const hd_tensor *t);
/* The node whose path has this hash, or -1. */
int cp_scan_find_hash(const cp_scan *s, uint64_t hash);
hd_status cp_scan_path(const cp_scan *s, const cp_roots *r, int node, cp_path *out);
/* Is node i reached through a .grad step (anywhere on its path)? */
int cp_scan_under_grad(const cp_scan *s, int i);
/* Is node i a root argument itself? */
static inline int cp_scan_is_arg(const cp_scan *s, int i) {
    return s->nodes[i].parent < 0 && s->nodes[i].root == CP_ROOT_ARG;
}

/* ---- snapshots: the heap a trace may change, put back when it fails ---- */

typedef enum {
    CP_SNAP_LIST,
    CP_SNAP_DICT, /* a dict, or an object's fields */
    CP_SNAP_MODULE,
    CP_SNAP_SLOTS,
    CP_SNAP_CELL
} cp_snap_kind;

typedef struct cp_snap cp_snap;
typedef struct cp_snapshot {
    hd_vm *vm;
    cp_snap *items;
    int n, cap;
    uint64_t rng_seed, rng_offset;
} cp_snapshot;

/* Keep the contents of every container, cell and module the scan reached,
 * the frame's slots, tensors' .grad and the random stream. */
hd_status cp_snapshot_take(cp_snapshot *sn, hd_vm *vm, const cp_scan *pre, const cp_roots *r);
void cp_snapshot_restore(cp_snapshot *sn);
/* Whether the list, dict or object of scan node `node` held obj at index i
 * (name NULL) or key name when the snapshot was taken. */
int cp_snapshot_held(const cp_snapshot *sn, int node, const char *name, int64_t i, const void *obj);
/* The body stored to a place: the list item i or the dict entry or field
 * name of scan node `node`'s container (cell: the captured variable of
 * node's cell), or a module's global or the frame's slot at p. Its value
 * is written back after every run, also when the store left the value
 * that was there. */
hd_status cp_snapshot_touch(cp_snapshot *sn, int node, int cell, const char *name, int64_t i);
hd_status cp_snapshot_touch_slot(cp_snapshot *sn, const hd_value *p);

/* A place whose value differs from the snapshot (the body stored there). */
typedef struct cp_change {
    cp_snap_kind kind;
    int node;        /* list, dict, object or cell: its node in the scan, else -1 */
    hd_module *mod;  /* module: which one */
    int64_t index;   /* list item, global or frame slot */
    const char *key; /* dict entry or field */
    hd_value now;    /* the value there now (borrowed) */
    int reshaped;    /* a list whose length changed, a dict that lost a key */
} cp_change;
typedef hd_status (*cp_change_fn)(void *ud, const cp_change *c);
/* Call fn for every place the body changed (each list or dict reshaped
 * once, as a whole). */
hd_status cp_snapshot_changes(const cp_snapshot *sn, cp_change_fn fn, void *ud);
void cp_snapshot_free(cp_snapshot *sn);

/* ---- guards: what a graph's body read, checked before it runs again ---- */

typedef enum {
    CP_G_VALUE,    /* a number, bool, none, string or dtype: equal */
    CP_G_ITEMS,    /* a list or dict: its length and a hash of its items (deep) */
    CP_G_IDENTITY, /* a function or class: the same one */
    CP_G_TYPE,     /* anything else: the same type */
    CP_G_TENSOR,   /* a tensor: requires_grad as it was (shapes go into the signature) */
    CP_G_ABSENT,   /* a field or key the body found missing (getattr's default, hasattr):
                    * still missing */
} cp_guard_kind;

typedef struct cp_guard {
    cp_path path;
    cp_guard_kind kind;
    hd_vtype type;
    hd_value v;     /* VALUE, IDENTITY: held */
    int64_t len;    /* ITEMS: the length; TENSOR: requires_grad */
    uint64_t items; /* ITEMS: the hash */
    cp_path same;   /* TENSOR read through a second path: the tensor must still be the
                       one at this (its first) path, as the graph assumes (nsteps -1: none) */
} cp_guard;

/* A guard for value v found at path (taken). */
hd_status cp_guard_make(hd_vm *vm, cp_path *path, hd_value v, cp_guard *g);
void cp_guard_free(hd_vm *vm, cp_guard *g);
/* 1 when the value at the guard's path still passes; else 0 and why. */
int cp_guard_check(const cp_roots *r, const cp_guard *g, char *why, size_t n);

/* Short text of a value for messages ("0.1", "[4 items]", "a tensor"). */
void cp_value_brief(hd_value v, char *buf, size_t n);

/* ---- compiled code's caches, entries and traces (compiled.c) ---- */

/* Compiles per body before new keys run eagerly, and entries kept. */
#define CP_MAX_COMPILES      8
#define CP_MAX_LAZY_COMPILES 3 /* a plain function under a lazy strategy */
#define CP_MAX_ENTRIES       8

/* ---- entries ---- */

/* Where a graph input's tensor comes from at a call. */
typedef struct cp_input {
    int arg;   /* argument index, or -1 */
    int state; /* index into entry->state, or -1 */
    hd_dtype dtype;
    int ndim;
    int64_t shape[HD_MAX_DIMS];
    const hd_backend *backend;
    int device;
    char *name;
} cp_input;

/* An output that views an input: made again from the caller's tensor at
 * each run (so that it shares its storage, as in eager mode) instead of
 * being copied. */
typedef struct cp_view {
    int input; /* -1: the output is computed */
    int own;   /* a view of a value computed inside: the graph outputs that value
                  and the view is made of it at each run (an expanded tensor stays one) */
    int nops;
    hd_op *ops;
    hd_attrs *attrs;
} cp_view;

typedef enum { CP_WB_SET, CP_WB_COPY, CP_WB_GRAD, CP_WB_VALUE } cp_wb_kind;

struct cp_tmpl;

/* What to do with an output after a run. */
typedef struct cp_wb {
    cp_wb_kind kind;
    int out;
    cp_path path;         /* SET, VALUE: where it goes */
    struct cp_tmpl *tmpl; /* VALUE: the value stored (not a traced tensor: numbers, strings,
                             values from before the call, containers made inside) */
    int input;            /* COPY, GRAD: the target is this input's tensor, or -1 */
    hd_tensor *obj;       /* COPY, GRAD: else this constant's tensor (held) */
} cp_wb;

/* FRESH: a copy of the tensor v at every run (a tensor with data made
 * inside the body, without gradient state); DETACH: a detached view of
 * the tensor at path (x.detach() of state). */
typedef enum {
    CP_T_OUT,
    CP_T_CONST,
    CP_T_LIST,
    CP_T_DICT,
    CP_T_PATH,
    CP_T_FRESH,
    CP_T_DETACH
} cp_tmpl_kind;

/* The shape of a returned value. */
typedef struct cp_tmpl {
    cp_tmpl_kind kind;
    int out;
    hd_value v;   /* CONST: held */
    cp_path path; /* PATH */
    int n;
    struct cp_tmpl *kids;
    char **keys; /* DICT */
} cp_tmpl;

/* compiled_aot.c: a compiled forward graph with its backward graph */
typedef struct cp_aot cp_aot;

/* Why a key runs eagerly: its result needs gradients, it changes state a
 * graph cannot replay, or (plain code under a lazy strategy) it does no
 * tensor work, so that a graph would only replay its other effects */
enum { CP_EAGER_GRAD = 1, CP_EAGER_STATE = 2, CP_EAGER_IDLE = 3 };

typedef struct cp_entry {
    int nargs;
    uint64_t kw_hash;
    int grad_mode;
    hd_jit_key key;
    cp_guard *guards;
    int nguards, capguards;
    cp_path *state;
    int nstate, capstate;
    cp_input *inputs;
    int ninputs;
    /* executable */
    const hd_jit_compiler *jc;
    hd_jit_exec *exec;
    int noutputs;
    cp_view *views; /* per output */
    cp_wb *wbs;
    int nwbs, capwbs;
    cp_tmpl ret;
    unsigned char *spent; /* per output: backward() used up its records at the trace */
    cp_aot
        *aot;  /* the result needs gradients: the backward graph (the executable is the forward) */
    int ran;   /* it has run once (the run right after its trace is the first) */
    int eager; /* this key runs eagerly: CP_EAGER_* */
    char eager_why[200];
    uint64_t hits;
} cp_entry;

/* One compiled function body or block, with its cache. */
typedef struct cp_body {
    const void *node;
    char where[160]; /* "f at t.hodu:3:1" */
    uint64_t hash;   /* of the source text */
    cp_entry *entries[CP_MAX_ENTRIES];
    int nentries;
    int traces, warned, no_compile, analysed;
    int implicit; /* traced only because of HODU_COMPILE_ALL */
    int noted;    /* said that it runs eagerly for gradients */
    uint64_t calls, hits, eager_calls;
    double compile_seconds;
    /* names for paths: captured variables (functions), slots (blocks) */
    const char **upval_names;
    int nupval;
    const char **slot_names;
    unsigned char *slot_decl; /* slots a block declares */
    int *slot_reads;          /* outer slots a block reads */
    int nslots, nreads;
    struct cp_body *next;
} cp_body;

/* Options of compiled(...) blocks (compiled fns use the defaults). */
typedef struct cp_opts {
    char compiler[16];
    char device[16];
    int opt_level;
    int chosen;     /* the compiler was named (an option, HODU_COMPILER) */
    int device_set; /* the device was named (an option, the default device) */
    int no_fuse;    /* the strategy's fusion is off */
    uint64_t knobs; /* what the strategy lets a trace read (optimizer steps, checkpointing,
                     * precision, averaging over the ranks, layers over devices), and the
                     * functions backward() runs after it (a hash) */
} cp_opts;

/* A captured tensor with data. */
typedef struct cp_cap {
    hd_tensor *t; /* held */
    int input;    /* its graph input (lifted), or -1 (a constant) */
    hd_tensor *grad_before;
} cp_cap;

/* The trace in progress. */
typedef struct cp_read {
    const void *obj;
    cp_path path;
} cp_read;

typedef struct cp_session {
    hd_vm *vm;
    cp_body *body;
    cp_roots roots;
    cp_scan pre;
    cp_snapshot snap;
    uint32_t serial;
    cp_opts opts;
    cp_cap *caps;
    int ncaps, capcaps;
    /* graph inputs in creation order: names, sources, first-run tensors */
    cp_input *inputs;
    hd_tensor **first;
    int ninputs, capinputs, capfirst;
    cp_path *state;
    int nstate, capstate;
    cp_guard *guards;
    int nguards, capguards;
    /* objects from before the call the body read from a field, dict entry
     * or list item, with that place's path: a value it stores or returns
     * is found again there (an object has several paths) */
    cp_read *reads;
    int nreads, capreads;
    uint64_t *seen; /* guard path hashes */
    int nseen, capseen;
    int oom;            /* a read could not be recorded */
    char stateful[200]; /* a change of state a graph cannot replay, or "" */
    int history;        /* the body read a tensor with gradient history: run eagerly */
    int aot_backward;   /* tracing the backward graph: .grad reads are not the program's */
    int aot_custom;     /* a custom Function's backward was reached there: run eagerly */
    /* outputs */
    hd_tensor **outs; /* held */
    char **outnames;
    int nouts, capouts, capoutnames;
    cp_wb *wbs;
    int nwbs, capwbs;
    hd_tensor **gradded; /* tensors whose .grad a path writes back (held) */
    int ngradded, capgradded;
} cp_session;

typedef struct hd_compiled_state {
    cp_body *bodies;
    int log;
    cp_session *session;
    char *last_ir;
    size_t last_ir_size;
    uint64_t traces, compiles, hits, eager_calls, calls;
    double compile_seconds;
    char compiler[16];   /* the default: HODU_COMPILER, else llvm when it runs here, else interp */
    int compiler_chosen; /* it came from HODU_COMPILER */
} hd_compiled_state;

/* compiled_call.c: the roots of a block run in frame f */
void cp_block_roots(hd_vm *vm, const cp_body *b, hd_frame *f, cp_roots *r);

/* compiled.c's helpers that compiled_call.c uses */
hd_status cp_block_analyse(hd_vm *vm, cp_body *b, const hd_frame *f, const hd_ast *body, int stmt);
void cp_body_add(hd_vm *vm, cp_body *b, cp_entry *e);
cp_body *cp_body_get(hd_vm *vm, const void *node, const char *what, const hd_chunk *c,
                     const hd_span *sp);
hd_status cp_body_upvals(hd_vm *vm, cp_body *b, const hd_closure *c);
cp_entry *cp_cache_find(hd_vm *vm, cp_body *b, const cp_roots *r, uint64_t kw_hash,
                        const hd_jit_key *key, hd_tensor ***inputs, char *why, size_t n);
void cp_entry_free(hd_vm *vm, cp_entry *e);
hd_status cp_entry_run(hd_vm *vm, cp_entry *e, const cp_roots *r, hd_tensor **inputs,
                       hd_value *ret);
void cp_entry_take(cp_session *s, cp_entry *e, int nargs, uint64_t kw_hash);
void cp_first_free(hd_vm *vm, cp_entry *e, hd_tensor **first);
void cp_key_fixed(const cp_body *b, const cp_opts *o, hd_jit_key *k);
/* Mark in decl (count slots) the frame slots that block n declares (let,
 * for, fn, class, import inside it; not inside nested functions). */
void hd_compiled_decl_walk(const hd_ast *n, unsigned char *decl, int count, int depth);
void cp_logf_line(hd_vm *vm, const char *fmt, const char *a, const char *b);
void cp_opts_default(hd_vm *vm, cp_opts *o);
hd_status cp_session_begin(hd_vm *vm, cp_session *s, cp_body *b, const cp_opts *o,
                           const char *name);
hd_status cp_session_finish(cp_session *s, const hd_value *ret, hd_value *sym, int nsym,
                            cp_entry *e, hd_tensor ***first);
void cp_session_free(cp_session *s);
hd_status cp_session_input(cp_session *s, const char *base, int arg, int state, hd_tensor *t,
                           char *name, size_t n);
cp_session *cp_session_of(hd_vm *vm);
void cp_session_restore(cp_session *s);
hd_status cp_session_root_guard(cp_session *s, cp_root_kind kind, int index, hd_value v);
hd_status cp_session_scan(cp_session *s, const cp_roots *r);
hd_compiled_state *cp_state_of(hd_vm *vm);

/* compiled.c: an entry's inputs' names and write-backs freed, an input's
 * dtype, shape and device taken from t */
void cp_inputs_free(hd_vm *vm, cp_input *in, int n);
void cp_wbs_free(hd_vm *vm, cp_wb *w, int n);
void cp_input_set_type(cp_input *in, const hd_tensor *t);
/* compiled.c: did backward() leave a gradient on t during the trace? */
int cp_gradded(const cp_session *s, const hd_tensor *t);
/* compiled_session.c: the path of obj from before the call into *out (0
 * when obj is not from before the call; 1 with *st the status of making
 * the path) */
int cp_session_obj_path(cp_session *s, const void *obj, cp_path *out, hd_status *st);
/* compiled.c: the output index of a traced tensor (one per value), -1 on error */
int cp_session_out(cp_session *s, hd_tensor *t, const char *base);
/* compiled.c: is t a symbolic tensor of the trace in progress? */
int cp_is_symbolic_here(const hd_vm *vm, const hd_tensor *t);
/* compiled.c: the template of a value the body returns or stores (tensors
 * made inside become outputs, values from before the call their paths) */
hd_status cp_tmpl_build(cp_session *s, hd_value v, cp_tmpl *t, int depth);
void cp_tmpl_free(hd_vm *vm, cp_tmpl *t);
/* compiled.c: a new write-back of the session (out: its output, or -1 for VALUE) */
cp_wb *cp_wb_new(cp_session *s, cp_wb_kind kind, int out);
/* compiled_wb.c: write-backs of the non-tensor state the body changed */
hd_status cp_wb_values(cp_session *s);

/* compiled_aot.c (see there) */
/* At the end of a trace whose result needs gradients: the backward of the
 * result traced too, or *out NULL when the call cannot compile so (it runs
 * eagerly). */
hd_status cp_aot_trace(cp_session *s, const cp_tmpl *ret, const hd_value *sym, int nsym,
                       cp_aot **out);
/* The traced graph split into the forward and backward graphs. */
hd_status cp_aot_split(hd_vm *vm, const hd_ir_graph *g, cp_aot *a, hd_ir_graph **fwd,
                       hd_ir_graph **bwd);
/* Compile the backward graph with the entry's compiler; leaves found among its inputs. */
hd_status cp_aot_finish(hd_vm *vm, cp_aot *a, const cp_entry *e, const hd_ir_graph *bwd,
                        const hd_jit_options *j);
/* After the forward graph ran: the record of the result. */
hd_status cp_aot_attach(hd_vm *vm, const cp_entry *e, hd_tensor **inputs, hd_tensor **outs);
void cp_aot_free(cp_aot *a);
/* The output whose record runs the backward graph. */
int cp_aot_result(const cp_aot *a);
/* The forward graph's outputs before the saved values. */
int cp_aot_nfwd(const cp_aot *a);

#endif
