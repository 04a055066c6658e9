/* hd_llvm: the llvm compiler's internal interface (docs/llvm.md).
 *
 * A compile runs the shared passes, then:
 *   plan  (hd_plan.c,       which nodes become generated kernels, which the
 *          hd_plan.h)       runtime runs, the step order, which values are
 *                           stored, the slot table and the arena offsets;
 *   gen   (hd_llvm_gen.c,   one LLVM module: a function per kernel and the
 *          hd_llvm_ops.c,   graph's main function calling them in order;
 *          hd_llvm_reduce.c) the bodies of the kernels that reduce in
 *                           hd_llvm_reduce.c;
 *   jit   (hd_llvm_jit.c)   O2 through the new pass manager, machine code for
 *                           the host CPU, linked by ORC's LLJIT;
 *   cache (hd_llvm_cache.c) object files on disk, keyed by the module;
 *   rt    (hd_llvm_rt.c)    what generated code calls back: runtime nodes,
 *                           the parallel loop, integer pow.
 * hd_llvm.c is the compiler table. Everything here exists only when the
 * build has LLVM (HODU_HAVE_LLVM). */
#ifndef HD_LLVM_H
#define HD_LLVM_H

#include "hd_compile.h"
#include "hd_pass.h"
#include "hd_plan.h"

#if HODU_HAVE_LLVM

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

/* ---- code generation ---- */

/* The element types: memory (f16/bf16 as i16) and registers (f16/bf16 as
 * float). */
typedef struct hd_llvm_types {
    LLVMContextRef c;
    LLVMTypeRef i1, i8, i16, i32, i64, f32, f64, vd, ptr8, pptr8;
    LLVMTypeRef half; /* half precision, used with F16C */
} hd_llvm_types;

typedef struct hd_llvm_gen hd_llvm_gen;

/* What the ops need from the generator: types, builder, module, target
 * facts and the external functions they call. */
struct hd_llvm_gen {
    hd_ctx *ctx;
    const hd_plan *plan;
    hd_llvm_types t;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    int f16c;         /* host converts f16 in hardware */
    int avx512;       /* the code is for AVX-512 (host has it, HODU_LLVM_AVX512 not 0) */
    int ew_lanes;     /* lanes of explicit f32 elementwise vectors: 32 (AVX-512), 16 (AVX2
                         with FMA) or 0 (the loop vectorizer's choice) */
    int vw;           /* values being generated are vectors of vw lanes; 0: scalars */
    int nt_store;     /* vector stores of vw contiguous elements are aligned and streamed */
    int scalar_calls; /* the kernel being built calls a scalar libm function */
};

/* Build the module of plan p into mod (a fresh module of t.c). */
hd_status hd_llvm_gen_module(hd_llvm_gen *G);

/* The type of a value of scalar type t in the code being generated (a
 * vector of G->vw lanes in vector code), and integer constants of any
 * type (splat in vectors). */
LLVMTypeRef hd_llvm_vec(hd_llvm_gen *G, LLVMTypeRef scalar);
LLVMValueRef hd_llvm_cint(LLVMTypeRef ty, uint64_t v, int sext);

/* Values in registers: the register type of dt (scalar), loads and stores
 * of one element, conversions. In vector code a load or store handles vw
 * elements at a pointer whose step is given (hd_llvm_load_n). */
LLVMTypeRef hd_llvm_reg_type(hd_llvm_gen *G, hd_dtype dt);
LLVMTypeRef hd_llvm_mem_type(hd_llvm_gen *G, hd_dtype dt);
LLVMValueRef hd_llvm_load(hd_llvm_gen *G, hd_dtype dt, LLVMValueRef ptr);
void hd_llvm_store(hd_llvm_gen *G, hd_dtype dt, LLVMValueRef ptr, LLVMValueRef v);
LLVMValueRef hd_llvm_load_n(hd_llvm_gen *G, hd_dtype dt, LLVMValueRef ptr, int64_t step);
void hd_llvm_store_n(hd_llvm_gen *G, hd_dtype dt, LLVMValueRef ptr, int64_t step, LLVMValueRef v);
/* v in every lane (vector code), or v. */
LLVMValueRef hd_llvm_splat(hd_llvm_gen *G, LLVMValueRef v);
/* A register value of dt converted to dt2 as the eager cast does. */
LLVMValueRef hd_llvm_convert(hd_llvm_gen *G, LLVMValueRef v, hd_dtype from, hd_dtype to);
/* f16/bf16 results are rounded to their precision after every op, as the
 * eager kernels store them. */
LLVMValueRef hd_llvm_round_half(hd_llvm_gen *G, LLVMValueRef v, hd_dtype dt);
/* An embedded constant of dt. */
LLVMValueRef hd_llvm_const(hd_llvm_gen *G, hd_dtype dt, double d, int64_t i);
/* Node n applied to register values args (already of its inputs' dtypes). */
LLVMValueRef hd_llvm_emit_node(hd_llvm_gen *G, const hd_ir_node *n, LLVMValueRef *args);
/* exp as the eager kernels compute it, for the reductions and row kernels:
 * ew: cpu_elementwise's (hd_vm_expf for f32); nn: cpu_nn's. */
LLVMValueRef hd_llvm_exp(hd_llvm_gen *G, LLVMValueRef x, hd_dtype dt);
LLVMValueRef hd_llvm_nn_exp(hd_llvm_gen *G, LLVMValueRef x, hd_dtype dt);
LLVMValueRef hd_llvm_call_libm(hd_llvm_gen *G, const char *name, LLVMValueRef *args, int nargs);
LLVMValueRef hd_llvm_intrinsic(hd_llvm_gen *G, const char *name, LLVMValueRef x);

/* ---- machine code ---- */

typedef struct hd_llvm_jit hd_llvm_jit;

typedef struct hd_llvm_timing {
    double opt, obj, link; /* seconds */
    int cache_hit;
} hd_llvm_timing;

/* Target facts for the host: triple, CPU name and features (AVX-512 where
 * the CPU has it, unless HODU_LLVM_AVX512=0), strings owned by LLVM's
 * process-wide init. */
typedef struct hd_llvm_host {
    const char *triple, *cpu, *features;
    int f16c, avx512, avx2; /* avx2: AVX2 and FMA */
    int ew_vectors;         /* explicit elementwise vectors (HODU_LLVM_VECTORS not 0) */
} hd_llvm_host;
hd_status hd_llvm_host_get(hd_ctx *ctx, hd_llvm_host *h);

/* Optimise and compile mod (disposed here, with its context) or take the
 * object from the disk cache, then link it. *main receives hd_main's
 * address. */
hd_status hd_llvm_jit_build(hd_ctx *ctx, LLVMModuleRef mod, LLVMContextRef c, hd_llvm_jit **out,
                            void **main, hd_llvm_timing *tm);
void hd_llvm_jit_free(hd_ctx *ctx, hd_llvm_jit *j);

/* ---- disk cache ---- */

typedef struct hd_llvm_key {
    uint64_t h[2];
} hd_llvm_key;

/* The cache key of a module's IR text for the host and this LLVM. */
void hd_llvm_cache_key(const char *ir, const hd_llvm_host *h, hd_llvm_key *k);
/* The cached object for k into *buf, checked: NULL if absent or damaged (a
 * damaged entry is removed). Free with LLVMDisposeMemoryBuffer. Fails only
 * when memory runs out. */
hd_status hd_llvm_cache_get(hd_ctx *ctx, const hd_llvm_key *k, LLVMMemoryBufferRef *buf);
/* Store an object; failures only log (HODU_LOG=cache). */
void hd_llvm_cache_put(hd_ctx *ctx, const hd_llvm_key *k, const void *obj, size_t n);

/* ---- logging ---- */

/* ---- runtime entry points called by generated code ---- */

/* What hd_main's rt argument points to. */
typedef struct hd_llvm_rt {
    hd_ctx *ctx; /* the run's context: errors, threads, random draws */
    const hd_backend *be;
    const hd_ir_graph *g;
    hd_tensor **vals;     /* per value: its tensor, for runtime nodes */
    hd_tensor ***node_in; /* per node: its inputs' tensors (runtime nodes only) */
} hd_llvm_rt;

typedef void (*hd_llvm_kernel_fn)(void **slots, int64_t begin, int64_t end);
int32_t hd_llvm_rt_node(void *rt, int32_t node);
/* Matmul node `node` (a gemm step), then its epilogue epi (NULL: none),
 * whose outermost loop of epi_range units walks the output's rows in
 * order (hd_llvm_gemm.c). Returns an hd_status. */
int32_t hd_llvm_rt_gemm(void *rt, int32_t node, hd_llvm_kernel_fn epi, void **slots,
                        int64_t epi_range);
void hd_llvm_rt_parallel(void *rt, hd_llvm_kernel_fn fn, void **slots, int64_t n, int64_t align);
/* A reduction to one element over n elements, in parts on the context's
 * threads: part(slots, lo, hi, acc) accumulates [lo, hi) into the 8 bytes
 * at acc, fin(slots, accs, nparts) merges the parts in order and stores
 * the result (hd_llvm_reduce.c, "split across threads"). */
typedef void (*hd_llvm_part_fn)(void **slots, int64_t lo, int64_t hi, void *acc);
typedef void (*hd_llvm_fin_fn)(void **slots, void *accs, int64_t nparts);
void hd_llvm_rt_reduce(void *rt, hd_llvm_part_fn part, hd_llvm_fin_fn fin, void **slots, int64_t n);
int64_t hd_llvm_rt_ipow(int64_t a, int64_t b, int32_t dtype);

/* Name and address of every external function generated code may call. */
typedef struct hd_llvm_symbol {
    const char *name;
    void *addr;
} hd_llvm_symbol;
const hd_llvm_symbol *hd_llvm_symbols(int *n);

#endif /* HODU_HAVE_LLVM */
#endif
