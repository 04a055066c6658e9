/* hd_ir: the graph IR of compiled code.
 *
 * A graph is a list of nodes in execution order. Every node applies one op
 * of the op table (hd_ops.def) to SSA values and defines one new value, whose
 * dtype and static shape come from the op's shape rule when the node is
 * added. Values are graph inputs (name, dtype, shape), constants (tensors
 * captured at trace time, held by reference) or node results. Effect nodes
 * call a host function with the run's values (print inside compiled code);
 * they define no value and keep their order. Loop nodes run a body graph of
 * their own a counted number of times (hd_ir_loop).
 *
 * Everything a graph owns lives in one arena, freed by hd_ir_graph_free;
 * only the constants' tensors are refcounted outside it. */
#ifndef HD_IR_H
#define HD_IR_H

#include "hd_op.h"

/* ---- arena ---- */

typedef struct hd_ir_block hd_ir_block;
typedef struct hd_ir_arena {
    hd_ctx *ctx;
    hd_ir_block *head;
    size_t bytes; /* total bytes of the blocks */
} hd_ir_arena;

/* Zeroed, 16-byte aligned memory that lives until hd_ir_arena_free. */
void *hd_ir_arena_alloc(hd_ir_arena *a, size_t n);
char *hd_ir_arena_strdup(hd_ir_arena *a, const char *s);
void hd_ir_arena_free(hd_ir_arena *a);

/* ---- graph ---- */

typedef enum { HD_IR_VALUE_INPUT, HD_IR_VALUE_CONST, HD_IR_VALUE_NODE } hd_ir_value_kind;

typedef struct hd_ir_value {
    hd_ir_value_kind kind;
    int index; /* input, constant or node index */
    hd_dtype dtype;
    int ndim;
    int number; /* a constant made from a Hodu number: lowest promotion priority */
    int64_t shape[HD_MAX_DIMS];
} hd_ir_value;

/* Pseudo-ops of nodes that are not in the op table. */
#define HD_IR_CALLBACK (-1) /* effect node: calls a host function */
#define HD_IR_DEAD     (-2) /* removed by a pass; hd_ir_compact drops it */
#define HD_IR_LOOP     (-3) /* a counted loop over a body graph (hd_ir_loop) */
#define HD_IR_LOOP_OUT (-4) /* one result of a loop: a view into the loop's value */

/* A host function called at every run with the run's values of its
 * arguments. The tensors are borrowed and valid during the call only.
 * ud_dup (optional) gives a cloned graph its own reference to ud; ud_free
 * (optional) drops one when a graph is freed. */
typedef struct hd_ir_callback {
    const char *name; /* what the printer shows: "print" */
    hd_status (*fn)(hd_ctx *ctx, void *ud, hd_tensor *const *args, int nargs);
    void *ud;
    void *(*ud_dup)(void *ud);
    void (*ud_free)(hd_ctx *ctx, void *ud);
} hd_ir_callback;

typedef struct hd_ir_graph hd_ir_graph;

/* A counted loop (HD_IR_LOOP). The body is a graph of its own whose inputs
 * are, in order, the loop node's inputs: the first ncarry are carried (at
 * the next iteration, carried input i takes body output carry_src[i]), the
 * rest are the same at every iteration. The loop node's value is every body
 * output of the last iteration, packed: u8[bytes], output k at offset[k]
 * (64-byte aligned). HD_IR_LOOP_OUT nodes (attrs.ints[0] = k, in[0] = the
 * loop's value) are views of one output with its dtype and shape. */
typedef struct hd_ir_loop {
    hd_ir_graph *body; /* owned */
    int64_t trips;     /* iterations, >= 1 */
    /* >= 0: the loop input (a 0-d integer) whose value at run time is the
     * number of iterations instead (0 or more; cond, docs/ir.md); every body
     * output then feeds its carried input of the same index, so that a loop
     * of 0 iterations gives its carried inputs */
    int trips_in;
    /* >= 0: a while loop (trips unused): before each iteration the carried
     * input of this index, one element, is read; the loop runs while it is
     * nonzero. Every body output feeds its carried input of the same
     * index, as with trips_in, so that 0 iterations give the inputs. */
    int while_in;
    int ncarry;
    int *carry_src;  /* ncarry body output indices */
    int64_t *offset; /* per result (body output, then stack): byte offset in the value */
    int64_t bytes;
    /* stacks (counted loops of a static trip count): stack s holds carried
     * input stack_in[s] as every iteration began, [trips, its shape], at
     * slot t for iteration t; results noutputs + s (hd_ir_loop_stack) */
    int nstack;
    int *stack_in;
    /* an executable's compiled body (jit/hd_loop.h), owned; NULL in a
     * traced graph, not copied by hd_ir_graph_clone */
    void *exec;
    void (*exec_free)(hd_ctx *ctx, void *exec);
} hd_ir_loop;

typedef struct hd_ir_node {
    int op; /* hd_op, HD_IR_CALLBACK, HD_IR_LOOP, HD_IR_LOOP_OUT or HD_IR_DEAD */
    int nin;
    int *in;   /* value ids */
    int out;   /* value id; -1 for effect nodes */
    int group; /* fusion group (hd_pass_fuse), -1 if none */
    hd_attrs attrs;
    hd_ir_callback cb; /* effect nodes */
    hd_ir_loop *loop;  /* HD_IR_LOOP nodes; in the graph's arena, body owned */
} hd_ir_node;

typedef struct hd_ir_input {
    const char *name;
    int value;
} hd_ir_input;

typedef struct hd_ir_const {
    hd_tensor *t; /* a reference held by the graph */
    int value;
    uint64_t version; /* t's storage version when captured (in-place writes bump it) */
} hd_ir_const;

typedef struct hd_ir_output {
    const char *name;
    int value;
    /* the input this output's value replaces in place once the run is
     * over (the caller copies it there), -1: none. A compiler may write the
     * value straight into that input's memory (the llvm compiler's
     * donated outputs, docs/llvm.md); set after tracing, by the caller */
    int into;
} hd_ir_output;

/* A fusion group: nodes one generated kernel computes (hd_pass_fuse). */
typedef enum {
    HD_IR_GROUP_ELEMENTWISE, /* elementwise and broadcast ops */
    HD_IR_GROUP_REDUCE,      /* elementwise ops ending in one reduction */
    HD_IR_GROUP_MATMUL,      /* a matmul and its elementwise epilogue */
} hd_ir_group_kind;

typedef struct hd_ir_group {
    hd_ir_group_kind kind;
    int first, last; /* node indices of its first and last node */
    int nnodes;
} hd_ir_group;

struct hd_ir_graph {
    hd_ctx *ctx;
    hd_ir_arena arena;
    const char *name;
    hd_ir_value *values;
    int nvalues, cap_values;
    hd_ir_node *nodes;
    int nnodes, cap_nodes;
    hd_ir_input *inputs;
    int ninputs, cap_inputs;
    hd_ir_const *consts;
    int nconsts, cap_consts;
    hd_ir_output *outputs;
    int noutputs, cap_outputs;
    hd_ir_group *groups;
    int ngroups;
    int ncallbacks;
    /* set by hd_pass_lower: every node's inputs already have the dtypes its
     * shape rule asks for, so executors run nodes without casting */
    int lowered;
};

hd_ir_graph *hd_ir_graph_new(hd_ctx *ctx, const char *name);
void hd_ir_graph_free(hd_ir_graph *g);
/* A deep copy (constants shared by reference, callbacks' ud duplicated). */
hd_ir_graph *hd_ir_graph_clone(const hd_ir_graph *g);

/* Builders. Each returns the new value id, or -1 with an error in ctx. */
int hd_ir_add_input(hd_ir_graph *g, const char *name, hd_dtype dt, const int64_t *shape, int ndim);
/* Takes a new reference to t. Symbolic tensors cannot be constants. */
int hd_ir_add_const(hd_ir_graph *g, hd_tensor *t);
/* Runs op's shape rule on the inputs' metadata: the error is the rule's. */
int hd_ir_add_node(hd_ir_graph *g, hd_op op, const int *in, int nin, const hd_attrs *attrs);
hd_status hd_ir_add_callback(hd_ir_graph *g, const hd_ir_callback *cb, const int *in, int nin);
hd_status hd_ir_add_output(hd_ir_graph *g, const char *name, int value);
/* A loop node running body trips times (see hd_ir_loop): in[] are the
 * values its inputs take at the first iteration, the first ncarry carried.
 * Checks that the body's inputs match in[] and each carried input the
 * output that feeds it (dtype and shape). Takes ownership of body (freed
 * on error too). Returns the loop's value id, or -1. */
int hd_ir_add_loop(hd_ir_graph *g, hd_ir_graph *body, int64_t trips, const int *in, int nin,
                   int ncarry, const int *carry_src);
/* Take the trip count of loop value `loop` from its input `input` at run
 * time (hd_ir_loop.trips_in): that input must be a 0-d integer, and body
 * output i must feed carried input i for every output. */
hd_status hd_ir_loop_trips_from(hd_ir_graph *g, int loop, int input);
/* Make loop value `loop` a while loop on its carried input `carry`
 * (hd_ir_loop.while_in): one element, and body output i must feed carried
 * input i for every output. */
hd_status hd_ir_loop_while(hd_ir_graph *g, int loop, int carry);
/* A loop node of body (taken) counted or conditioned as `like` is (trips,
 * trips_in, while_in, carries), over in[]: the value id, or -1. */
int hd_ir_add_loop_like(hd_ir_graph *g, hd_ir_graph *body, const hd_ir_loop *like, const int *in,
                        int nin);
/* Stack carried input `carry` of loop value `loop` (a static trip count):
 * the new result's index (body outputs come first), or -1 with an error.
 * Its LOOP_OUT is [trips, the input's shape]: slot t is the input as
 * iteration t began (the gradient of a loop reads them, docs/ir.md). */
int hd_ir_loop_stack(hd_ir_graph *g, int loop, int carry);
/* The number of results of a loop (body outputs and stacks). */
static inline int hd_ir_loop_nresults(const hd_ir_loop *l) {
    return l->body->noutputs + l->nstack;
}
/* Body output k of loop value `loop` at the last iteration: a new value id,
 * or -1. */
int hd_ir_add_loop_out(hd_ir_graph *g, int loop, int k);
/* The same, defining existing value id `value` (of body output k's dtype
 * and shape) whose node the caller has removed from the node list: host
 * tensors that stand for that value now stand for the loop's result. */
hd_status hd_ir_add_loop_out_as(hd_ir_graph *g, int loop, int k, int value);
/* Keep only the results of loop node `node` (body outputs, then stacks)
 * that keep[k] marks (every carry source must be kept): carry sources, stacks, the graph's LOOP_OUT
 * nodes of it, offsets and bytes are renumbered, the loop's value gets its
 * new size (so its only users must be LOOP_OUT nodes), and a compiled body
 * is dropped. */
hd_status hd_ir_loop_keep_outputs(hd_ir_graph *g, int node, const char *keep);
/* What the printers call node n's op: an op's name, "callback", "loop",
 * "loop_out" or "dead". */
const char *hd_ir_node_name(const hd_ir_node *n);
/* Does the graph (or a loop body in it, at any depth) hold a callback or
 * a node that is_effect accepts? is_effect may be NULL. */
int hd_ir_has_effects(const hd_ir_graph *g, int (*is_effect)(const hd_ir_node *n));

/* The shape rule of op applied to values' metadata (no allocation). */
hd_status hd_ir_plan(hd_ir_graph *g, hd_op op, const int *in, int nin, const hd_attrs *attrs,
                     hd_op_plan *plan);
/* Zero the attribute fields op does not read, so that equal applications
 * compare, hash and save equal. */
void hd_ir_attrs_canon(hd_op op, const hd_attrs *in, hd_attrs *out);

/* For passes that insert nodes: detach the node list (*old stays valid in
 * the arena) and add nodes again in the new order with hd_ir_append, which
 * keeps each node's value and links it to the new position. */
void hd_ir_detach_nodes(hd_ir_graph *g, hd_ir_node **old, int *nold);
hd_status hd_ir_append(hd_ir_graph *g, const hd_ir_node *n);
/* A pass that failed before appending old[from] on: the callbacks of the
 * nodes it did not append, which the graph no longer frees, are freed
 * (the graph itself is not usable after the failure). */
void hd_ir_drop_detached(hd_ir_graph *g, const hd_ir_node *old, int from, int nold);

/* Lookups; -1 if absent. */
int hd_ir_find_input(const hd_ir_graph *g, const char *name);
int hd_ir_find_output(const hd_ir_graph *g, const char *name);

/* Structural checks: ids in range, every value defined before its use (SSA
 * dominance), each node's dtype and shape what its shape rule gives (and,
 * once lowered, its inputs of the dtypes the rule asks for), outputs defined,
 * names unique. The error names the node. */
hd_status hd_ir_verify(hd_ir_graph *g);

/* Drop HD_IR_DEAD nodes and unused constants and renumber values densely:
 * inputs, then constants, then node results in node order. */
hd_status hd_ir_compact(hd_ir_graph *g);

/* Number of uses of each value (node inputs, callbacks and outputs); counts
 * must hold g->nvalues ints. */
void hd_ir_use_counts(const hd_ir_graph *g, int *counts);

/* Text (`%3 = matmul(%1, %2) : f32[100, 1]`) and Graphviz DOT; strings from
 * hd_ctx_alloc, freed with hd_ctx_strfree. NULL on allocation failure. */
char *hd_ir_to_text(const hd_ir_graph *g);
char *hd_ir_to_dot(const hd_ir_graph *g);
/* "f32[100, 1]" into buf. */
char *hd_ir_type_str(hd_dtype dt, const int64_t *shape, int ndim, char *buf, size_t n);

/* ---- hashing (cache keys) ---- */

/* A stable 64-bit hash: the same bytes give the same hash in every process. */
typedef struct hd_ir_hasher {
    uint64_t h;
} hd_ir_hasher;
void hd_ir_hash_init(hd_ir_hasher *s);
void hd_ir_hash_bytes(hd_ir_hasher *s, const void *p, size_t n);
void hd_ir_hash_u64(hd_ir_hasher *s, uint64_t v);
void hd_ir_hash_str(hd_ir_hasher *s, const char *str);
uint64_t hd_ir_hash_final(const hd_ir_hasher *s);
/* Hash of a tensor's dtype, shape and values in row-major order (any
 * strides). CPU tensors only; symbolic ones hash their metadata. */
void hd_ir_hash_tensor(hd_ir_hasher *s, const hd_tensor *t);

/* Hash of the graph: ops by name, attributes, value types, input and output
 * names, constants' bytes, callbacks by name. Fusion groups are not part of
 * it. */
uint64_t hd_ir_graph_hash(const hd_ir_graph *g);

#endif
