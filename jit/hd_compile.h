/* hd_compile: the compiler interface and the cache-key helpers.
 *
 * A compiler is a table: interp now, llvm and cuda later. compile
 * turns a graph into an executable (optimising a private copy: the caller's
 * graph is not changed), run executes it on input tensors, free releases it.
 *
 *   const hd_jit_compiler *c;
 *   hd_jit_compiler_find(ctx, "interp", &c);
 *   hd_jit_exec *e;
 *   c->compile(ctx, graph, &opts, &e);
 *   c->run(ctx, e, inputs, ninputs, outputs, noutputs);   // outputs: new refs
 *   c->free(ctx, e);
 */
#ifndef HD_COMPILE_H
#define HD_COMPILE_H

#include "hd_backend.h"
#include "hd_ir.h"

typedef struct hd_jit_options {
    const char *device; /* "cpu" (default), "cuda:0" */
    int opt_level;      /* 0: lowering only; 1 (default): every pass */
    size_t fold_limit;  /* bytes a folded constant may have; 0: 1 MiB */
    int no_inplace;     /* memory plan: never write over an input */
    int no_reuse;       /* memory plan: one buffer per value */
    int no_fuse;        /* no fusion groups: one kernel per node (a strategy's fusion off) */
} hd_jit_options;

/* Defaults: cpu, opt_level 1, 1 MiB fold limit. */
void hd_jit_options_init(hd_jit_options *o);

typedef struct hd_jit_stats {
    double compile_seconds;
    double run_seconds; /* total over all runs */
    uint64_t runs;
    int nodes_traced; /* nodes of the graph given to compile */
    int nodes;        /* after the passes */
    int kernels;      /* kernel launches per run (interp: non-view nodes) */
    int groups;       /* fusion groups */
    int consts;       /* constants placed on the device */
    size_t const_bytes;
    size_t planned_bytes; /* intermediate buffers after the memory plan */
    size_t naive_bytes;   /* one buffer per intermediate, as eager mode */
    int inplace;          /* nodes writing over their input */
    int casts, folded, simplified, merged, removed, copies; /* pass counts */
    /* where compile time goes (seconds): tracing (filled by the caller that
     * traced), the graph passes, and LLVM (llvm: IR generation, O2 passes,
     * machine code, linking; the disk cache skips the middle two) */
    double trace_seconds, pass_seconds, llvm_seconds;
    double llvm_ir_seconds, llvm_opt_seconds, llvm_obj_seconds, llvm_link_seconds;
    int cache_hit;  /* llvm: the machine code came from the disk cache */
    int fallbacks;  /* llvm, cuda: nodes run by the runtime's kernels (matmul not counted) */
    int launches;   /* cuda: host launches per run besides copies: 1 once a run is one CUDA
                     * Graph, else the kernels */
    int cuda_graph; /* cuda: runs replay one captured CUDA Graph */
    int donated;    /* llvm: outputs computed into the input they replace (hd_ir_output.into) */
    int run_copies; /* llvm, cuda: tensors the last run copied (inputs into the executable's
                     * buffers, outputs out of its memory) */
} hd_jit_stats;

typedef struct hd_jit_exec hd_jit_exec;

typedef struct hd_jit_compiler {
    const char *name;
    /* Can this compiler run here for this device? Fills ctx's error if not. */
    hd_status (*available)(hd_ctx *ctx, const hd_jit_options *opt);
    hd_status (*compile)(hd_ctx *ctx, const hd_ir_graph *g, const hd_jit_options *opt,
                         hd_jit_exec **out);
    /* inputs in the graph's input order; outputs (new references, fresh
     * tensors the caller may keep) in its output order. */
    hd_status (*run)(hd_ctx *ctx, hd_jit_exec *e, hd_tensor *const *inputs, int ninputs,
                     hd_tensor **outputs, int noutputs);
    void (*free)(hd_ctx *ctx, hd_jit_exec *e);
    void (*stats)(const hd_jit_exec *e, hd_jit_stats *st);
    /* The optimised graph the executable runs (for :ir and s.ir()). */
    const hd_ir_graph *(*graph)(const hd_jit_exec *e);
} hd_jit_compiler;

extern const hd_jit_compiler hd_jit_interp;
extern const hd_jit_compiler hd_jit_cuda; /* jit/hd_cuda_jit.c: errors without a GPU */
#if HODU_HAVE_LLVM
extern const hd_jit_compiler hd_jit_llvm; /* jit/hd_llvm.c */
#endif

/* ---- the executor skeleton ----
 *
 * Every compiler's struct hd_jit_exec starts with this head; hd_jit_compile
 * makes one the same way for each: defaults for the options, the
 * compiler's availability, the device, a copy of the graph, the passes,
 * the compiler's memory plan, every loop body compiled once by the same
 * compiler (jit/hd_loop.h), then the compiler's own code generation; and
 * hd_jit_run runs one. A compiler adds only its plan and its code. */
typedef struct hd_jit_head {
    hd_ctx *ctx;
    const hd_backend *be; /* the device the code runs on */
    int device;
    hd_ir_graph *g; /* the optimised copy */
    hd_jit_stats stats;
} hd_jit_head;

typedef struct hd_jit_build {
    const hd_jit_compiler *self; /* its available and free; loop bodies compile with it */
    size_t size;                 /* of its struct hd_jit_exec */
    hd_status (*plan)(hd_jit_exec *e, const hd_jit_options *opt);    /* after the passes */
    hd_status (*codegen)(hd_jit_exec *e, const hd_jit_options *opt); /* after loop bodies */
} hd_jit_build;

/* Compile g as b says (opt may be NULL: the defaults); on an error the
 * half-made executable goes to b->self->free. */
hd_status hd_jit_compile(hd_ctx *ctx, const hd_jit_build *b, const hd_ir_graph *g,
                         const hd_jit_options *opt, hd_jit_exec **out);
/* The compiler table's stats and graph entries, from the head. */
void hd_jit_head_stats(const hd_jit_exec *e, hd_jit_stats *st);
const hd_ir_graph *hd_jit_head_graph(const hd_jit_exec *e);
/* Monotonic seconds, for the stats. */
double hd_jit_now(void);

/* By name: "interp", "llvm", "cuda". Unknown names are an error listing the
 * known ones; known ones this build lacks are an error saying so. */
hd_status hd_jit_compiler_find(hd_ctx *ctx, const char *name, const hd_jit_compiler **out);
/* The default compiler of compiled code and scripts: HODU_COMPILER when
 * set (*named 1), else llvm when this build has it and it runs here, else
 * interp. A default that was not named and cannot compile a graph gives
 * way to interp (the callers do it). */
const char *hd_jit_default_compiler(hd_ctx *ctx, int *named);
/* The known names, NULL-terminated. */
extern const char *const hd_jit_compiler_names[];

/* Run the pass pipeline on g (in place) as compilers do. */
hd_status hd_jit_optimize(hd_ctx *ctx, hd_ir_graph *g, const hd_jit_options *opt, hd_jit_stats *st);

/* Check run-time inputs against a graph's inputs: the error names the input,
 * what it expects and what it got. */
hd_status hd_jit_check_inputs(hd_ctx *ctx, const hd_ir_graph *g, hd_tensor *const *inputs,
                              int ninputs);

/* What an executor does at each run, for hd_jit_run; ud is the executor's
 * own (cuda: the device). unbind may be NULL. */
typedef struct hd_jit_run_ops {
    hd_status (*bind_input)(hd_jit_exec *e, hd_ctx *ctx, void *ud, int i, hd_tensor *t);
    hd_status (*exec)(hd_jit_exec *e, hd_ctx *ctx, void *ud); /* outputs' memory, the steps */
    hd_status (*output)(hd_jit_exec *e, hd_ctx *ctx, void *ud, int i, hd_tensor **out);
    void (*unbind)(hd_jit_exec *e);
} hd_jit_run_ops;

/* A compiler's run (g: the executable's graph): checks the output count and
 * the inputs, binds the inputs, runs, takes every output or none (outputs
 * are NULL on an error), unbinds, and counts the run and its time in st. */
hd_status hd_jit_run(hd_ctx *ctx, const hd_jit_run_ops *ops, hd_jit_exec *e, void *ud,
                     const hd_ir_graph *g, hd_jit_stats *st, hd_tensor *const *inputs, int ninputs,
                     hd_tensor **outputs, int noutputs);

/* ---- cache keys ----
 *
 * The language caches compiled code by body, input signature, captured
 * constants, compiler and options. Each part is a 64-bit hash; the input
 * signature keeps its entries so that a miss can say what changed
 * (HODU_LOG=recompile). */

#define HD_JIT_SIG_MAX 64 /* inputs described one by one; more are hashed only */

typedef struct hd_jit_sig_entry {
    hd_dtype dtype;
    int ndim;
    int64_t shape[HD_MAX_DIMS];
    char device[16]; /* "cpu:0" */
} hd_jit_sig_entry;

typedef struct hd_jit_signature {
    int n;
    hd_jit_sig_entry e[HD_JIT_SIG_MAX];
    uint64_t hash;
} hd_jit_signature;

void hd_jit_signature_make(hd_jit_signature *s, hd_tensor *const *inputs, int n);

typedef struct hd_jit_key {
    uint64_t body;      /* the language's hash of the traced source */
    uint64_t inputs;    /* hd_jit_signature.hash */
    uint64_t constants; /* hd_jit_constants_hash of the captured tensors */
    uint64_t compiler;  /* hash of the compiler name */
    uint64_t options;   /* hd_jit_options_hash */
} hd_jit_key;

/* Captured constants: bytes when the tensors have at most byte_limit bytes
 * each, else identity and storage version (an in-place write changes it). */
uint64_t hd_jit_constants_hash(hd_tensor *const *ts, int n, size_t byte_limit);
uint64_t hd_jit_options_hash(const hd_jit_options *o);
uint64_t hd_jit_string_hash(const char *s);

enum {
    HD_JIT_KEY_BODY = 1,
    HD_JIT_KEY_INPUTS = 2,
    HD_JIT_KEY_CONSTANTS = 4,
    HD_JIT_KEY_COMPILER = 8,
    HD_JIT_KEY_OPTIONS = 16,
};

/* Which parts differ (HD_JIT_KEY_* bits); 0: the keys are equal. */
unsigned hd_jit_key_diff(const hd_jit_key *a, const hd_jit_key *b);
/* One line for HODU_LOG=recompile: "input 1 changed: f32[2, 3] on cpu:0 ->
 * f32[4, 3] on cpu:0" or "the compiler changed". old_sig/new_sig may be
 * NULL (then inputs are described as a whole). Returns buf. */
char *hd_jit_key_describe(unsigned diff, const hd_jit_signature *old_sig,
                          const hd_jit_signature *new_sig, char *buf, size_t n);

#endif
