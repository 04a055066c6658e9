/* hd_pass: graph passes shared by every compiler (interp, llvm, cuda).
 *
 * Each pass rewrites a graph in place and keeps it valid (hd_ir_verify
 * holds after it); *changed (may be NULL) receives how many rewrites it
 * made. None of them changes a result: float semantics are kept exactly
 * (x * 0 is not 0, x + 0.0 is not x: -0.0 + 0.0 is +0.0), random ops are
 * never folded, merged or removed (each draw advances the generator), and
 * callbacks keep their order. docs/ir.md describes each pass. */
#ifndef HD_PASS_H
#define HD_PASS_H

#include "hd_ir.h"

/* Is op an ordered effect of the run (random draws, collectives)? */
int hd_pass_op_is_random(const hd_ir_node *n);
/* Elementwise kinds: unary, binary, compare, where. */
int hd_pass_op_is_elementwise(int op);

/* Explicit casts: a CAST node before every input whose dtype differs from
 * the one the op's shape rule asks for; sets g->lowered. */
hd_status hd_pass_lower(hd_ir_graph *g, int *changed);

/* Constant folding: nodes whose inputs are all constants (creation ops
 * included) are computed now with the eager kernels, when their result has
 * at most limit_bytes (views of constants always fold: they copy nothing). */
hd_status hd_pass_fold(hd_ir_graph *g, size_t limit_bytes, int *changed);

/* Algebraic identities that hold bit for bit: x+(-0.0), x-(+0.0), x*1, 1*x,
 * x/1, x**1 (integer zeros and ones too), neg(neg x), casts to the same
 * dtype, clone, identity reshape/permute/expand/slice, reshape of reshape,
 * permute of permute, dropout outside training. */
hd_status hd_pass_simplify(hd_ir_graph *g, int *changed);

/* Common subexpressions: nodes with the same op, attributes and inputs, and
 * constants with the same dtype, shape and bytes, are merged. */
hd_status hd_pass_cse(hd_ir_graph *g, int *changed);

/* Dead code: nodes no output, callback or random draw depends on. */
hd_status hd_pass_dce(hd_ir_graph *g, int *changed);

/* Layout: executors lay out every computed value contiguously and views as
 * strided views of them; a reshape of a view that is not contiguous gets an
 * explicit clone first, so that every reshape is a view at run time. */
hd_status hd_pass_layout(hd_ir_graph *g, int *changed);

/* Fusion grouping: maximal groups of elementwise/broadcast nodes, a group
 * possibly starting at a matmul (its epilogue) or ending in one reduction.
 * Records g->groups and each node's group; the interp runs grouped nodes
 * one by one, llvm and cuda generate one kernel per group. */
hd_status hd_pass_fuse(hd_ir_graph *g);

/* Memory plan of a lowered, compacted graph. Every value computed by a
 * kernel (not a view, not a graph output) gets a buffer; buffers are reused
 * once the values in them are dead (best fit among free buffers of equal or
 * larger size), and an elementwise node whose input dies at that node and
 * has its shape and dtype writes over that input (in place). Graph outputs
 * get fresh memory at every run. Lives in the graph's arena. */
typedef struct hd_ir_memplan {
    int *buffer;   /* per value: buffer index, or -1 (inputs, constants, views, outputs) */
    int *root;     /* per value: the value whose memory it is or views */
    int *last_use; /* per value: index of the last node that reads it (nnodes: the end) */
    size_t *buffer_bytes;
    int nbuffers;
    int ninplace;         /* nodes that write over their input */
    size_t planned_bytes; /* sum of the buffers */
    size_t naive_bytes;   /* one buffer per computed intermediate, as eager mode allocates */
} hd_ir_memplan;

typedef struct hd_pass_memplan_options {
    int no_reuse;   /* one buffer per value (debugging) */
    int no_inplace; /* never write over an input */
} hd_pass_memplan_options;

hd_status hd_pass_memplan(hd_ir_graph *g, const hd_pass_memplan_options *opt, hd_ir_memplan *plan);

/* The standard pipeline: lower, then fold / simplify / CSE / DCE until
 * nothing changes, layout, compaction, verification and fusion grouping.
 * opt_level 0 runs only what executors need (lower, layout);
 * HD_PASS_NO_FUSE runs every pass but fusion (one kernel per node). */
#define HD_PASS_NO_FUSE 2
typedef struct hd_pass_report {
    int nodes_before, nodes_after;
    int casts, folded, simplified, merged, removed, copies;
    int groups;
} hd_pass_report;

hd_status hd_pass_pipeline(hd_ir_graph *g, int opt_level, size_t fold_limit,
                           hd_pass_report *report);

/* ---- helpers for passes ---- */

/* A replacement map over value ids: passes mark a node dead and map its
 * value to another; hd_pass_map_apply rewrites every use, then compacts. */
typedef struct hd_pass_map {
    hd_ctx *ctx;
    int *to;
    int cap;
} hd_pass_map;

hd_status hd_pass_map_init(hd_pass_map *m, hd_ir_graph *g);
/* Grow for values added since init (fold adds constants). */
hd_status hd_pass_map_fit(hd_pass_map *m, int nvalues);
int hd_pass_map_get(const hd_pass_map *m, int v);
void hd_pass_map_set(hd_pass_map *m, int from, int to);
/* Rewrite node n's inputs through the map. */
void hd_pass_map_node(const hd_pass_map *m, hd_ir_node *n);
/* Rewrite all uses and outputs, free the map and compact the graph. */
hd_status hd_pass_map_finish(hd_pass_map *m, hd_ir_graph *g);
void hd_pass_map_free(hd_pass_map *m);

/* Is v a constant whose every element equals x? Float zeros compare their
 * sign too when want_sign is set (signbit(x) must match). */
int hd_pass_const_all(const hd_ir_graph *g, int v, double x, int want_sign);

#endif
