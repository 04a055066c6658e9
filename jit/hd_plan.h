/* hd_plan: how a fused compiler turns an optimised graph into kernels
 * (shared by the llvm and cuda compilers; docs/llvm.md, docs/cuda.md).
 *
 * Nodes of a fusion group that generated code supports form a "piece";
 * a piece becomes one kernel per distinct shape of its nodes, a reduction
 * computes its elementwise prologue inside its own kernel, and the nodes
 * generated code does not cover run as runtime steps (the backend's eager
 * kernels). Values read only inside their kernel live in registers; the
 * rest are stored, intermediates in one arena. Pure C, every build. */
#ifndef HD_PLAN_H
#define HD_PLAN_H

#include "hd_backend.h"
#include "hd_pass.h"

typedef enum {
    HD_PLAN_K_ELEMENTWISE, /* one loop nest over the shape, nodes of one shape */
    HD_PLAN_K_REDUCE,      /* a reduction and the prologue computed inside it */
    HD_PLAN_K_SOFTMAX,     /* softmax or log_softmax rows */
    HD_PLAN_K_LAYER_NORM,  /* layer_norm rows */
} hd_plan_kernel_kind;

typedef struct hd_plan_kernel {
    hd_plan_kernel_kind kind;
    int *nodes; /* node indices in node order; the last is the reduction or nn node */
    int nnodes;
    int ndim; /* the iteration shape: the nodes' shape; reduce: the reduction's input */
    int64_t shape[HD_MAX_DIMS];
    int64_t numel;    /* elements of the iteration shape */
    int64_t out_size; /* elements written by the kernel's last node (0: nothing to run) */
} hd_plan_kernel;

/* One step of the main function: a kernel, or a node the runtime runs.
 * With HD_PLAN_GEMM, a 2-D f32 matmul is a gemm step, which may take the
 * elementwise kernel after it as its epilogue (bias, activation), run on
 * each thread's rows as soon as the product is done (the llvm compiler's
 * hd_llvm_rt_gemm). */
typedef struct hd_plan_step {
    int kernel;   /* >= 0: generated kernel */
    int node;     /* else: a runtime node (fallback, matmul, callback) */
    int gemm;     /* the node is a matmul run as a gemm step */
    int epilogue; /* gemm: the kernel run on its output's rows after it, -1 */
} hd_plan_step;

typedef struct hd_plan_val {
    int kernel;                   /* kernel computing it, -1 */
    int slot;                     /* slot holding its memory's base, -1: registers only */
    int64_t byte_off;             /* element 0, from the slot's base */
    int64_t strides[HD_MAX_DIMS]; /* elements */
    int root;                     /* the value whose memory it is (itself unless a view) */
    char stored;                  /* its kernel writes it to memory */
    char imm;                     /* a one-element constant embedded in the code */
    char fresh;                   /* a graph output given fresh memory at every run */
    int into;                     /* a donated output: the input whose memory it takes, -1 */
    char whole;                   /* an output reshaping all of a fresh root that nothing
                                   * else hands out: given over the root's memory */
    int64_t arena_off;            /* arena values: offset in the arena, else -1 */
} hd_plan_val;

typedef struct hd_plan {
    hd_ir_graph *g;
    hd_plan_val *vals;
    hd_plan_kernel *kernels;
    int nkernels;
    hd_plan_step *steps;
    int nsteps;
    int *kernel_of; /* per node: its kernel, -1 */
    /* slots: 0 the arena, then inputs, constants and fresh outputs */
    int nslots, slot_in0, slot_const0, slot_out0;
    int *slot_value; /* per slot: its value (-1 for the arena) */
    size_t arena_bytes;
    int nfallback;  /* runtime nodes other than matmul and callbacks */
    int nepilogues; /* kernels run as a gemm's epilogue */
    int ndonated;   /* outputs written over the input they replace */
} hd_plan;

/* hd_plan_build's flags. */
enum {
    HD_PLAN_NO_REUSE = 1, /* one arena region per value */
    HD_PLAN_GEMM = 2,     /* gemm steps with epilogues (the executor runs them) */
    HD_PLAN_EXTRA = 4,    /* kernels the llvm generator has and the cuda one does
                           * not: softmax_bwd, log_softmax_bwd and layer_norm_bwd's
                           * dx rows, argmax and argmin, mse (a reduction of two
                           * same-shape inputs) */
    HD_PLAN_NO_FUSE = 8,  /* one kernel per node (a strategy's fusion off) */
    HD_PLAN_DONATE = 16   /* outputs may take the memory of the input they replace
                           * (hd_ir_output.into; the executor binds it, see
                           * plan_donate) */
};

/* Reductions over more elements than this run as runtime steps (the eager
 * kernel, which stops on an interrupt or the time limit; generated loops
 * run to their end). */
#define HD_PLAN_REDUCE_MAX ((int64_t)1 << 32)

/* Does generated code compute node n (of g), for a plan with flags? *why
 * receives the reason if not. Matmul and callbacks are never generated. */
int hd_plan_supports(const hd_ir_graph *g, const hd_ir_node *n, int flags, const char **why);

/* Plan an optimised, lowered, compacted and fused graph. Everything lives
 * in g's arena. flags: HD_PLAN_*. */
hd_status hd_plan_build(hd_ir_graph *g, int flags, hd_plan *p);

/* Tensors over every value of p with memory (slot >= 0) into vals[v]:
 * views of their slot's tensor roots[slot] (its own offset plus the
 * value's byte offset), with the value's shape, strides and dtype. The
 * executors' (llvm, cuda) tensors for runtime nodes, callbacks and
 * outputs. */
hd_status hd_plan_views(hd_ctx *ctx, const hd_plan *p, hd_tensor *const *roots, hd_tensor **vals);

/* Output value v given over its fresh root's tensor (vals[v].whole): a
 * contiguous view with v's shape; NULL with an error in ctx. */
hd_tensor *hd_plan_whole_view(hd_ctx *ctx, const hd_plan *p, int v, hd_tensor *root);

/* Does input j (in[j], this run's tensor) share its storage with another
 * input or a constant slot's root (roots, per slot)? A donated output
 * must not then be computed into it: the executors bind such an input to
 * a copy of their own. */
int hd_plan_input_shared(const hd_plan *p, int ninputs, hd_tensor *const *in,
                         hd_tensor *const *roots, int j);

#endif
