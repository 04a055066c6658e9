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
void cp_snapshot_free(cp_snapshot *sn);

/* ---- guards: what a graph's body read, checked before it runs again ---- */

typedef enum {
    CP_G_VALUE,    /* a number, bool, none, string or dtype: equal */
    CP_G_LEN,      /* a list: its length */
    CP_G_IDENTITY, /* a function or class: the same one */
    CP_G_TYPE,     /* anything else: the same type */
    CP_G_TENSOR,   /* a tensor: requires_grad as it was (shapes go into the signature) */
} cp_guard_kind;

typedef struct cp_guard {
    cp_path path;
    cp_guard_kind kind;
    hd_vtype type;
    hd_value v;  /* VALUE, IDENTITY: held */
    int64_t len; /* LEN; TENSOR: requires_grad */
} cp_guard;

/* A guard for value v found at path (taken). */
hd_status cp_guard_make(hd_vm *vm, cp_path *path, hd_value v, cp_guard *g);
void cp_guard_free(hd_vm *vm, cp_guard *g);
/* 1 when the value at the guard's path still passes; else 0 and why. */
int cp_guard_check(const cp_roots *r, const cp_guard *g, char *why, size_t n);

/* Short text of a value for messages ("0.1", "[4 items]", "a tensor"). */
void cp_value_brief(hd_value v, char *buf, size_t n);

#endif
