/* hd_llvm_gen_int.h: what the llvm compiler's code generator shares
 * between its two files: hd_llvm_gen.c (a kernel's operands, loop levels
 * and loops, elementwise bodies, the vector lanes of accumulating passes,
 * the kernels' functions, hd_main) and hd_llvm_reduce.c (the bodies of
 * reductions, softmax, log_softmax and layer_norm rows, argmax and argmin,
 * and reductions to one element split across threads). Internal to jit/. */
#ifndef HD_LLVM_GEN_INT_H
#define HD_LLVM_GEN_INT_H

#include "hd_llvm.h"

#if HODU_HAVE_LLVM

/* ---- a kernel being generated ---- */

typedef struct gen_op {
    int value;
    int store; /* written by the kernel */
    hd_dtype dt;
    int64_t full[HD_MAX_DIMS]; /* stride per iteration dim */
    int64_t st[HD_MAX_DIMS];   /* stride per loop level */
    LLVMValueRef ptr;          /* at the current loop level */
} gen_op;

typedef struct gen_kernel {
    hd_llvm_gen *G;
    const hd_plan_kernel *k;
    int index;
    gen_op *ops;
    int nops, cap;
    unsigned reduced;         /* iteration dims reduced (rows: the other dims) */
    int nlev, nkept;          /* loop levels: kept ones first */
    int64_t lev[HD_MAX_DIMS]; /* loop level sizes */
    LLVMValueRef *reg;        /* per value: its register in this iteration */
    int has_calls;
    int vlev; /* vector code: the loop level its lanes run along */
} gen_kernel;

typedef struct gen_loop {
    LLVMBasicBlockRef head, exit;
    LLVMValueRef iv; /* the phi */
} gen_loop;

typedef void (*gen_body_fn)(gen_kernel *K, void *ud);

/* ---- hd_llvm_gen.c: loops, operands, the body ---- */

/* An i64 constant. */
LLVMValueRef hd_llvm_gen_c64(hd_llvm_gen *G, int64_t v);
/* A loop over [lo, hi) at the builder: returns its index (the builder in
 * its body); loop_end closes it (hint: 0 none, 1 vectorize, n > 1
 * vectorize n wide). */
LLVMValueRef hd_llvm_gen_loop_begin(hd_llvm_gen *G, gen_loop *L, LLVMValueRef lo, LLVMValueRef hi);
void hd_llvm_gen_loop_end(hd_llvm_gen *G, gen_loop *L, int hint);
/* The operand of value v (stored: the one the kernel writes), or -1. */
int hd_llvm_gen_op_find(const gen_kernel *K, int v, int store);
/* The register value of v at the current position. */
LLVMValueRef hd_llvm_gen_value_at(gen_kernel *K, int v);
/* Compute the kernel's first count nodes at the current position (an
 * elementwise kernel's stored ones stored). */
void hd_llvm_gen_body_nodes(gen_kernel *K, int count);
void hd_llvm_gen_regs_clear(gen_kernel *K);
/* Step every operand's pointer to index iv of level l (the old ones into
 * saved[0..nops)); ptrs_restore puts them back. */
void hd_llvm_gen_ptrs_step(gen_kernel *K, int l, LLVMValueRef iv, LLVMValueRef *saved);
void hd_llvm_gen_ptrs_restore(gen_kernel *K, LLVMValueRef *saved);
/* Prefetch what each contiguous input of level l holds a few KiB ahead. */
void hd_llvm_gen_ew_prefetch(gen_kernel *K, int l);
/* Loops over levels [l, l1) around body(K, ud). Level 0 runs [lo, hi). */
void hd_llvm_gen_loops(gen_kernel *K, int l, int l1, LLVMValueRef lo, LLVMValueRef hi,
                       gen_body_fn body, void *ud);

/* ---- hd_llvm_gen.c: accumulating passes in vector lanes ---- */

#define GEN_LANES 8 /* lanes of one row's accumulators */

/* A pass that accumulates (a reduction, softmax's max and sum) over a row
 * of at least 2 * GEN_LANES elements runs its innermost reduced loop as
 * vector code: GEN_LANES elements per trip (one vector load where the
 * operand is contiguous there), accumulated lane-wise into a vector; the
 * lanes merge in order at the end, then the scalar tail. A row that is
 * itself a vector of rows (vertical rows, G->vw set) accumulates in
 * vectors all along. A generator's state starts with this struct. */
typedef struct gen_lanes {
    gen_body_fn step;          /* one element (or vector) of the pass */
    LLVMValueRef *cur1, *cur2; /* the step's accumulators: set to acc or vacc */
    LLVMValueRef acc1, acc2;   /* scalar accumulators (allocas) */
    LLVMValueRef vacc1, vacc2; /* GEN_LANES lanes of one row (allocas) */
    LLVMValueRef racc1, racc2; /* a vector of rows (allocas), or NULL */
    LLVMTypeRef ty1, ty2;      /* scalar types of the accumulators */
} gen_lanes;

typedef LLVMValueRef (*gen_merge_fn)(hd_llvm_gen *G, LLVMValueRef a, LLVMValueRef b, void *ud);

typedef enum { LANES_SCALAR, LANES_ROW, LANES_ROWS } lanes_mode;

void hd_llvm_gen_lanes_use(gen_lanes *L, lanes_mode m);
/* The accumulator's type in the code being generated. */
LLVMTypeRef hd_llvm_gen_acc_type(hd_llvm_gen *G, LLVMTypeRef scalar);
/* One pass over a row's reduced dims into accumulator `which` (1 or 2). */
void hd_llvm_gen_lanes_pass(gen_kernel *K, gen_lanes *L, int which, gen_merge_fn merge, void *ud);
/* The vector lanes of accumulator `which` merged in order, then with the
 * scalar accumulator, into the scalar accumulator. */
void hd_llvm_gen_lanes_merge(hd_llvm_gen *G, gen_lanes *L, int which, gen_merge_fn merge, void *ud);
/* Set a row's accumulators (scalar and lanes), or a vector of rows'. */
void hd_llvm_gen_lanes_init(gen_lanes *L, hd_llvm_gen *G, LLVMValueRef init1, LLVMValueRef init2);
/* a + b (floating point): sums' lanes merge so. */
LLVMValueRef hd_llvm_gen_merge_fadd(hd_llvm_gen *G, LLVMValueRef a, LLVMValueRef b, void *ud);

/* ---- hd_llvm_gen.c: kernel functions ---- */

/* An alloca of ty in fn's entry block. */
LLVMValueRef hd_llvm_gen_entry_alloca(hd_llvm_gen *G, LLVMValueRef fn, LLVMTypeRef ty);
/* The accumulators' allocas; rows > 0: also a vector of that many rows. */
void hd_llvm_gen_lanes_alloca(hd_llvm_gen *G, LLVMValueRef fn, gen_lanes *L, gen_body_fn step,
                              LLVMValueRef *cur1, LLVMValueRef *cur2, int rows);
/* The enum attribute `name` on fn at idx. */
void hd_llvm_gen_add_attr(hd_llvm_gen *G, LLVMValueRef fn, unsigned idx, const char *name);
/* A body function hd_k<i>_<suffix>(p0..pn, extra...): the operands as
 * noalias pointers, alwaysinline; the builder at its entry. */
LLVMValueRef hd_llvm_gen_body_fn(gen_kernel *K, const char *suffix, LLVMTypeRef *extra, int nextra);
/* The operands' pointers from the slot table into args[0..nops). */
void hd_llvm_gen_entry_ptrs(gen_kernel *K, LLVMValueRef slots, LLVMValueRef *args);

/* ---- hd_llvm_reduce.c ---- */

/* A reduction's rows [lo, hi) of its outermost loop, in fn (argmax and
 * argmin too). */
void hd_llvm_red_reduce_body(gen_kernel *K, LLVMValueRef fn, LLVMValueRef lo, LLVMValueRef hi);
/* softmax, log_softmax or layer_norm rows (and their backward ones) [lo,
 * hi) of the outermost loop, in fn. */
void hd_llvm_red_rows_body(gen_kernel *K, LLVMValueRef fn, LLVMValueRef lo, LLVMValueRef hi);
/* Is K a reduction to one element to split across threads? Then
 * split[0], split[1] receive its part and fin functions
 * (hd_llvm_rt_reduce's). */
int hd_llvm_red_split_ok(const gen_kernel *K);
void hd_llvm_red_split_fns(gen_kernel *K, LLVMValueRef *split);

#endif /* HODU_HAVE_LLVM */
#endif
