/* Code generation: one LLVM function per kernel and the graph's main
 * function.
 *
 * A kernel's iteration space is its shape, split into kept dims (the loops
 * of an elementwise kernel; the rows of a reduction, softmax or layer_norm)
 * and reduced dims (walked once per pass for each row). Every value the
 * kernel reads from memory or writes is an operand with a stride per dim
 * (0 where it is broadcast); neighbouring loops that every operand walks
 * contiguously are merged, so a contiguous elementwise kernel is one loop.
 *
 *   void hd_k<i>(i8 **slots, i64 begin, i64 end)   rows [begin, end) of the
 *       outermost loop: loads the operands' base pointers from the slot
 *       table and calls
 *   void hd_k<i>_body(T0 *noalias p0, ..., i64 begin, i64 end)   the loop
 *       nest (inlined into hd_k<i>, keeping the noalias facts so that loops
 *       vectorize without run-time alias checks);
 *   i32 hd_main(i8 **slots, i8 *rt)   the steps in order: small kernels
 *       called directly (the optimiser inlines them), large ones through
 *       hd_llvm_rt_parallel, runtime nodes through hd_llvm_rt_node; a
 *       nonzero status from a runtime node is returned at once. */
#include "hd_llvm.h"

#if HODU_HAVE_LLVM

#include <llvm-c/DebugInfo.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define B (G->b)

/* Kernels with at least this many elements (and two rows) may be split
 * across threads; smaller ones run inline. */
#define GEN_PAR_MIN (1 << 16)

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

/* ---- loops ---- */

static LLVMValueRef c64(hd_llvm_gen *G, int64_t v) {
    return LLVMConstInt(G->t.i64, (uint64_t)v, 1);
}

static LLVMValueRef loop_begin(hd_llvm_gen *G, gen_loop *L, LLVMValueRef lo, LLVMValueRef hi) {
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(B);
    LLVMValueRef fn = LLVMGetBasicBlockParent(pre);
    L->head = LLVMAppendBasicBlockInContext(G->t.c, fn, "loop");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(G->t.c, fn, "body");
    L->exit = LLVMAppendBasicBlockInContext(G->t.c, fn, "done");
    LLVMBuildBr(B, L->head);
    LLVMPositionBuilderAtEnd(B, L->head);
    L->iv = LLVMBuildPhi(B, G->t.i64, "i");
    LLVMAddIncoming(L->iv, &lo, &pre, 1);
    LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntSLT, L->iv, hi, ""), body, L->exit);
    LLVMPositionBuilderAtEnd(B, body);
    return L->iv;
}

/* !llvm.loop !{self, !{"llvm.loop.vectorize.enable", i1 1}[,
 * !{"llvm.loop.vectorize.width", i32 width}]} */
static LLVMValueRef loop_hint(hd_llvm_gen *G, int width) {
    LLVMMetadataRef tmp = LLVMTemporaryMDNode(G->t.c, NULL, 0);
    LLVMMetadataRef kv[2] = {LLVMMDStringInContext2(G->t.c, "llvm.loop.vectorize.enable", 26),
                             LLVMValueAsMetadata(LLVMConstInt(G->t.i1, 1, 0))};
    LLVMMetadataRef kw[2] = {LLVMMDStringInContext2(G->t.c, "llvm.loop.vectorize.width", 25),
                             LLVMValueAsMetadata(LLVMConstInt(G->t.i32, (uint64_t)width, 0))};
    LLVMMetadataRef ops[3] = {tmp, LLVMMDNodeInContext2(G->t.c, kv, 2),
                              LLVMMDNodeInContext2(G->t.c, kw, 2)};
    LLVMMetadataRef node = LLVMMDNodeInContext2(G->t.c, ops, width > 1 ? 3 : 2);
    LLVMMetadataReplaceAllUsesWith(tmp, node);
    return LLVMMetadataAsValue(G->t.c, node);
}

/* Close loop L; hint: 0 none, 1 vectorize, n > 1 vectorize n wide. */
static void loop_end(hd_llvm_gen *G, gen_loop *L, int hint) {
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(B);
    LLVMValueRef next = LLVMBuildNSWAdd(B, L->iv, c64(G, 1), "");
    LLVMValueRef br = LLVMBuildBr(B, L->head);
    if (hint)
        LLVMSetMetadata(br, LLVMGetMDKindIDInContext(G->t.c, "llvm.loop", 9), loop_hint(G, hint));
    LLVMAddIncoming(L->iv, &next, &latch, 1);
    LLVMPositionBuilderAtEnd(B, L->exit);
}

/* ---- operands ---- */

static int op_find(const gen_kernel *K, int v, int store) {
    for (int j = 0; j < K->nops; j++)
        if (K->ops[j].value == v && K->ops[j].store == store) return j;
    return -1;
}

static int in_kernel(const gen_kernel *K, int v) {
    const hd_ir_graph *g = K->G->plan->g;
    const hd_ir_value *val = &g->values[v];
    return val->kind == HD_IR_VALUE_NODE && K->G->plan->kernel_of[val->index] == K->index;
}

/* Strides of value v read at the iteration shape (broadcast: right-aligned,
 * size-1 dims and missing leading dims step 0). */
static void op_read_strides(const gen_kernel *K, gen_op *op) {
    const hd_ir_value *v = &K->G->plan->g->values[op->value];
    const hd_plan_val *pv = &K->G->plan->vals[op->value];
    int nd = K->k->ndim, lead = nd - v->ndim;
    for (int i = 0; i < nd; i++) {
        int j = i - lead;
        op->full[i] = j < 0 || v->shape[j] == 1 ? 0 : pv->strides[j];
    }
}

/* The output of a reduction: contiguous over the kept dims, 0 over the
 * reduced ones. Elementwise and row kernels write their shape contiguously. */
static void op_store_strides(const gen_kernel *K, gen_op *op) {
    const hd_plan_kernel *k = K->k;
    int64_t s = 1;
    int reduce = k->kind == HD_PLAN_K_REDUCE;
    for (int i = k->ndim - 1; i >= 0; i--) {
        if (reduce && (K->reduced & (1u << i))) {
            op->full[i] = 0;
            continue;
        }
        op->full[i] = k->shape[i] == 1 ? 0 : s;
        s *= k->shape[i];
    }
}

static hd_status kernel_operands(gen_kernel *K) {
    hd_llvm_gen *G = K->G;
    const hd_ir_graph *g = G->plan->g;
    const hd_plan_kernel *k = K->k;
    int cap = 1;
    for (int i = 0; i < k->nnodes; i++) cap += g->nodes[k->nodes[i]].nin + 1;
    K->ops = hd_ctx_calloc(G->ctx, (size_t)cap, sizeof *K->ops);
    if (!K->ops) return G->ctx->status;
    K->cap = cap;
    for (int i = 0; i < k->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[k->nodes[i]];
        for (int j = 0; j < n->nin; j++) {
            int u = n->in[j];
            if (in_kernel(K, u) || G->plan->vals[u].imm || op_find(K, u, 0) >= 0) continue;
            gen_op *op = &K->ops[K->nops++];
            op->value = u;
            op->dt = g->values[u].dtype;
            op_read_strides(K, op);
        }
    }
    for (int i = 0; i < k->nnodes; i++) {
        int v = g->nodes[k->nodes[i]].out;
        if (!G->plan->vals[v].stored) continue;
        gen_op *op = &K->ops[K->nops++];
        op->value = v;
        op->store = 1;
        op->dt = g->values[v].dtype;
        op_store_strides(K, op);
    }
    return HD_OK;
}

/* ---- loop levels ---- */

static unsigned reduced_dims(const hd_ir_graph *g, const hd_plan_kernel *k) {
    const hd_ir_node *n = &g->nodes[k->nodes[k->nnodes - 1]];
    int nd = k->ndim;
    unsigned mask = 0;
    if (k->kind == HD_PLAN_K_ELEMENTWISE || nd == 0) return 0;
    if (k->kind == HD_PLAN_K_SOFTMAX) {
        int64_t a = n->attrs.ints[0] < 0 ? n->attrs.ints[0] + nd : n->attrs.ints[0];
        return 1u << a;
    }
    if (k->kind == HD_PLAN_K_LAYER_NORM) {
        for (int i = nd - (int)n->attrs.ints[0]; i < nd; i++) mask |= 1u << i;
        return mask;
    }
    if (n->attrs.naxes == 0) return (1u << nd) - 1;
    for (int i = 0; i < n->attrs.naxes; i++)
        mask |= 1u << (n->attrs.axes[i] < 0 ? n->attrs.axes[i] + nd : n->attrs.axes[i]);
    return mask;
}

/* Append the dims of one class as loop levels, merging a level into the
 * previous one when every operand steps over it contiguously. */
static void levels_add(gen_kernel *K, int reduced) {
    const hd_plan_kernel *k = K->k;
    int first = K->nlev;
    for (int d = 0; d < k->ndim; d++) {
        if (!!(K->reduced & (1u << d)) != reduced || k->shape[d] == 1) continue;
        int l = K->nlev, merge = l > first;
        for (int j = 0; merge && j < K->nops; j++)
            if (K->ops[j].st[l - 1] != K->ops[j].full[d] * k->shape[d]) merge = 0;
        if (merge) {
            K->lev[l - 1] *= k->shape[d];
            for (int j = 0; j < K->nops; j++) K->ops[j].st[l - 1] = K->ops[j].full[d];
            continue;
        }
        K->lev[l] = k->shape[d];
        for (int j = 0; j < K->nops; j++) K->ops[j].st[l] = K->ops[j].full[d];
        K->nlev++;
    }
    if (K->nlev == first) { /* no dims of this class: one level of 1 */
        K->lev[K->nlev] = 1;
        for (int j = 0; j < K->nops; j++) K->ops[j].st[K->nlev] = 0;
        K->nlev++;
    }
}

static void kernel_levels(gen_kernel *K) {
    levels_add(K, 0);
    K->nkept = K->nlev;
    if (K->k->kind != HD_PLAN_K_ELEMENTWISE) levels_add(K, 1);
}

/* ---- the body ---- */

/* The register value of v at the current position. */
static LLVMValueRef value_at(gen_kernel *K, int v) {
    hd_llvm_gen *G = K->G;
    if (K->reg[v]) return K->reg[v];
    const hd_ir_graph *g = G->plan->g;
    const hd_ir_value *val = &g->values[v];
    if (G->plan->vals[v].imm) {
        const hd_tensor *t = g->consts[val->index].t;
        return hd_llvm_const(G, val->dtype, hd_tensor_get(t, 0), hd_tensor_get_i64(t, 0));
    }
    const gen_op *op = &K->ops[op_find(K, v, 0)];
    return K->reg[v] = hd_llvm_load_n(G, val->dtype, op->ptr, G->vw ? op->st[K->vlev] : 1);
}

/* Compute the kernel's elementwise nodes (all, or all but the last) at the
 * current position, storing those that are stored. */
static void body_nodes(gen_kernel *K, int count) {
    hd_llvm_gen *G = K->G;
    const hd_ir_graph *g = G->plan->g;
    for (int i = 0; i < count; i++) {
        const hd_ir_node *n = &g->nodes[K->k->nodes[i]];
        LLVMValueRef args[HD_OP_MAX_IN];
        for (int j = 0; j < n->nin; j++) args[j] = value_at(K, n->in[j]);
        LLVMValueRef r = hd_llvm_emit_node(G, n, args);
        K->reg[n->out] = r;
        int s = op_find(K, n->out, 1);
        if (s >= 0 && K->k->kind == HD_PLAN_K_ELEMENTWISE)
            hd_llvm_store_n(G, g->values[n->out].dtype, K->ops[s].ptr,
                            G->vw ? K->ops[s].st[K->vlev] : 1, r);
    }
}

static void regs_clear(gen_kernel *K) {
    const hd_ir_graph *g = K->G->plan->g;
    memset(K->reg, 0, (size_t)g->nvalues * sizeof *K->reg);
}

/* Step every operand's pointer to index iv of level l. */
static void ptrs_step(gen_kernel *K, int l, LLVMValueRef iv, LLVMValueRef *saved) {
    hd_llvm_gen *G = K->G;
    for (int j = 0; j < K->nops; j++) {
        gen_op *op = &K->ops[j];
        saved[j] = op->ptr;
        if (op->st[l] == 0) continue;
        LLVMValueRef idx = LLVMBuildNSWMul(B, iv, c64(G, op->st[l]), "");
        op->ptr = LLVMBuildInBoundsGEP2(B, hd_llvm_mem_type(G, op->dt), op->ptr, &idx, 1, "");
    }
}

static void ptrs_restore(gen_kernel *K, LLVMValueRef *saved) {
    for (int j = 0; j < K->nops; j++) K->ops[j].ptr = saved[j];
}

typedef void (*gen_body_fn)(gen_kernel *K, void *ud);

/* ---- elementwise loops as explicit vectors ---- */

/* On AVX-512 and AVX2 hosts the innermost loop of an f32 elementwise
 * kernel is explicit vector code of G->ew_lanes lanes (two vectors,
 * interleaved: the polynomials' dependency chains leave one vector's FMAs
 * idle), then a scalar tail: the same operations as the scalar body (the
 * same bits), with what the loop vectorizer cannot emit: on AVX-512 the
 * vector math's scaling by 2^k as one vscalefps (hd_vm_exp_scale), and,
 * for a kernel of at least GEN_NT_MIN elements with one output, streamed
 * (non-temporal) stores, after a scalar head that aligns the output to 64
 * bytes: the output is not read into the cache first, so the loop moves 12
 * bytes an element, not 16, for a chain of two inputs. Such a loop also
 * prefetches its inputs GEN_PF_BYTES ahead: with the arithmetic of three
 * transcendentals between its loads, the core alone kept too few lines in
 * flight (1 thread: 74-86% of memcpy's rate without, 89-97% with;
 * bench/RESULTS.md). */
#define GEN_NT_MIN   ((int64_t)1 << 21)
#define GEN_PF_BYTES 4096

static int ew_all_f32(const gen_kernel *K) {
    const hd_ir_graph *g = K->G->plan->g;
    for (int i = 0; i < K->k->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[K->k->nodes[i]];
        if (g->values[n->out].dtype != HD_F32) return 0;
        for (int j = 0; j < n->nin; j++)
            if (g->values[n->in[j]].dtype != HD_F32) return 0;
    }
    return 1;
}

static int ew_vector_ok(const gen_kernel *K, int l) {
    if (!K->G->ew_lanes || K->k->kind != HD_PLAN_K_ELEMENTWISE || K->has_calls) return 0;
    if (K->lev[l] < K->G->ew_lanes || !ew_all_f32(K)) return 0;
    for (int j = 0; j < K->nops; j++)
        if (K->ops[j].st[l] != 0 && K->ops[j].st[l] != 1) return 0;
    return 1;
}

/* The one stored operand of a one-loop kernel large enough to stream, or -1. */
static int ew_stream_op(const gen_kernel *K) {
    int s = -1;
    if (K->nlev != 1 || K->k->numel < GEN_NT_MIN) return -1;
    for (int j = 0; j < K->nops; j++) {
        if (!K->ops[j].store) continue;
        if (s >= 0 || K->ops[j].st[0] != 1) return -1;
        s = j;
    }
    return s;
}

/* body over [lo, hi) of level l, one element at a time. */
static void ew_scalar_loop(gen_kernel *K, int l, LLVMValueRef lo, LLVMValueRef hi, gen_body_fn body,
                           void *ud) {
    hd_llvm_gen *G = K->G;
    LLVMValueRef saved[K->nops + 1];
    gen_loop L;
    ptrs_step(K, l, loop_begin(G, &L, lo, hi), saved);
    regs_clear(K);
    body(K, ud);
    ptrs_restore(K, saved);
    loop_end(G, &L, 0);
}

/* Where the streamed head ends: the first index in [lo, hi] whose element
 * of operand s is 64-byte aligned (hi if it never is). */
static LLVMValueRef ew_head_end(gen_kernel *K, int s, LLVMValueRef lo, LLVMValueRef hi) {
    hd_llvm_gen *G = K->G;
    LLVMValueRef a = LLVMBuildAdd(B, LLVMBuildPtrToInt(B, K->ops[s].ptr, G->t.i64, ""),
                                  LLVMBuildShl(B, lo, c64(G, 2), ""), "");
    LLVMValueRef mis = LLVMBuildAnd(B, a, c64(G, 63), "");
    LLVMValueRef peel = LLVMBuildLShr(
        B, LLVMBuildAnd(B, LLVMBuildSub(B, c64(G, 64), mis, ""), c64(G, 63), ""), c64(G, 2), "");
    LLVMValueRef end = LLVMBuildAdd(B, lo, peel, "");
    end = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, end, hi, ""), end, hi, "");
    LLVMValueRef odd =
        LLVMBuildICmp(B, LLVMIntNE, LLVMBuildAnd(B, a, c64(G, 3), ""), c64(G, 0), "");
    return LLVMBuildSelect(B, odd, hi, end, "");
}

/* Prefetch (for reading, into every cache level) what each contiguous
 * input of level l holds GEN_PF_BYTES ahead of the current element. A
 * prefetch past the end of memory does not fault. */
static void ew_prefetch(gen_kernel *K, int l) {
    hd_llvm_gen *G = K->G;
    const char *name = "llvm.prefetch";
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMTypeRef pt = G->t.ptr8;
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(G->mod, id, &pt, 1);
    LLVMTypeRef ft = LLVMIntrinsicGetType(G->t.c, id, &pt, 1);
    for (int j = 0; j < K->nops; j++) {
        if (K->ops[j].store || K->ops[j].st[l] != 1) continue;
        LLVMValueRef ahead = c64(G, GEN_PF_BYTES);
        LLVMValueRef p = LLVMBuildBitCast(B, K->ops[j].ptr, pt, "");
        LLVMValueRef args[4] = {LLVMBuildInBoundsGEP2(B, G->t.i8, p, &ahead, 1, ""),
                                LLVMConstInt(G->t.i32, 0, 0),  /* read */
                                LLVMConstInt(G->t.i32, 3, 0),  /* keep in every level */
                                LLVMConstInt(G->t.i32, 1, 0)}; /* data */
        LLVMBuildCall2(B, ft, f, args, 4, "");
    }
}

static void ew_sfence(hd_llvm_gen *G) {
    const char *name = "llvm.x86.sse.sfence";
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(G->mod, id, NULL, 0);
    LLVMBuildCall2(B, LLVMIntrinsicGetType(G->t.c, id, NULL, 0), f, NULL, 0, "");
}

/* Level l over [lo, hi): the streamed head, vectors of G->ew_lanes, the
 * scalar tail. */
static void ew_vector_level(gen_kernel *K, int l, LLVMValueRef lo, LLVMValueRef hi,
                            gen_body_fn body, void *ud) {
    hd_llvm_gen *G = K->G;
    int s = l == 0 ? ew_stream_op(K) : -1;
    LLVMValueRef vlo = lo;
    if (s >= 0) {
        vlo = ew_head_end(K, s, lo, hi);
        ew_scalar_loop(K, l, lo, vlo, body, ud);
    }
    int shift = G->ew_lanes == 32 ? 5 : 4; /* log2 of the lanes */
    LLVMValueRef nb = LLVMBuildLShr(B, LLVMBuildSub(B, hi, vlo, ""), c64(G, shift), "");
    LLVMValueRef vend = LLVMBuildAdd(B, vlo, LLVMBuildShl(B, nb, c64(G, shift), ""), "");
    LLVMValueRef saved[K->nops + 1];
    gen_loop L;
    LLVMValueRef b = loop_begin(G, &L, c64(G, 0), nb);
    ptrs_step(K, l, LLVMBuildAdd(B, vlo, LLVMBuildShl(B, b, c64(G, shift), ""), ""), saved);
    if (s >= 0) ew_prefetch(K, l);
    regs_clear(K);
    K->vlev = l;
    G->vw = G->ew_lanes;
    G->nt_store = s >= 0;
    body(K, ud);
    G->vw = 0;
    G->nt_store = 0;
    ptrs_restore(K, saved);
    loop_end(G, &L, 0);
    ew_scalar_loop(K, l, vend, hi, body, ud);
    if (s >= 0) ew_sfence(G);
}

/* Loops over levels [l, l1) around body(K, ud). Level 0 runs [lo, hi). */
static void loops(gen_kernel *K, int l, int l1, LLVMValueRef lo, LLVMValueRef hi, gen_body_fn body,
                  void *ud) {
    hd_llvm_gen *G = K->G;
    if (l == l1) {
        regs_clear(K);
        body(K, ud);
        return;
    }
    if (l + 1 == l1 && ew_vector_ok(K, l)) {
        ew_vector_level(K, l, l == 0 ? lo : c64(G, 0), l == 0 ? hi : c64(G, K->lev[l]), body, ud);
        return;
    }
    LLVMValueRef saved[K->nops + 1];
    gen_loop L;
    LLVMValueRef iv = loop_begin(G, &L, l == 0 ? lo : c64(G, 0), l == 0 ? hi : c64(G, K->lev[l]));
    ptrs_step(K, l, iv, saved);
    loops(K, l + 1, l1, lo, hi, body, ud);
    ptrs_restore(K, saved);
    loop_end(G, &L, l + 1 == l1 && !K->has_calls && K->k->kind == HD_PLAN_K_ELEMENTWISE);
}

static void ew_body(gen_kernel *K, void *ud) {
    HD_UNUSED(ud);
    body_nodes(K, K->k->nnodes);
}

/* ---- accumulating passes in vector lanes ---- */

#define GEN_LANES  8    /* lanes of one row's accumulators */
#define GEN_PF_ROW 4096 /* rows at least this long prefetch (ew_prefetch) */
#define GEN_VROWS  32   /* rows done at once by a vector of rows */

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

static void lanes_use(gen_lanes *L, lanes_mode m) {
    *L->cur1 = m == LANES_ROW ? L->vacc1 : m == LANES_ROWS ? L->racc1 : L->acc1;
    *L->cur2 = m == LANES_ROW ? L->vacc2 : m == LANES_ROWS ? L->racc2 : L->acc2;
}

/* The accumulator's type in the code being generated. */
static LLVMTypeRef acc_type(hd_llvm_gen *G, LLVMTypeRef scalar) {
    return hd_llvm_vec(G, scalar);
}

/* The innermost reduced loop: vectors of GEN_LANES elements, then the rest
 * one by one. */
static void lanes_inner(gen_kernel *K, void *ud) {
    hd_llvm_gen *G = K->G;
    gen_lanes *L = ud;
    int l = K->nlev - 1;
    int64_t n = K->lev[l], nb = n >= 2 * GEN_LANES ? n / GEN_LANES : 0;
    LLVMValueRef saved[K->nops + 1];
    gen_loop lp;
    if (nb) {
        LLVMValueRef b = loop_begin(G, &lp, c64(G, 0), c64(G, nb));
        ptrs_step(K, l, LLVMBuildNSWMul(B, b, c64(G, GEN_LANES), ""), saved);
        if (n >= GEN_PF_ROW) ew_prefetch(K, l);
        regs_clear(K);
        G->vw = GEN_LANES;
        K->vlev = l;
        lanes_use(L, LANES_ROW);
        L->step(K, ud);
        G->vw = 0;
        ptrs_restore(K, saved);
        loop_end(G, &lp, 0);
    }
    LLVMValueRef i = loop_begin(G, &lp, c64(G, nb * GEN_LANES), c64(G, n));
    ptrs_step(K, l, i, saved);
    regs_clear(K);
    lanes_use(L, LANES_SCALAR);
    L->step(K, ud);
    ptrs_restore(K, saved);
    loop_end(G, &lp, 0);
}

static void lanes_merge(hd_llvm_gen *G, gen_lanes *L, int which, gen_merge_fn merge, void *ud);

/* One pass over a row's reduced dims. Scalar rows: the vector lanes of
 * accumulator `which` (1 or 2), where used, then the tail's scalar, merge
 * into the scalar accumulator. */
static void lanes_pass(gen_kernel *K, gen_lanes *L, int which, gen_merge_fn merge, void *ud) {
    hd_llvm_gen *G = K->G;
    if (G->vw) { /* a vector of rows */
        lanes_use(L, LANES_ROWS);
        loops(K, K->nkept, K->nlev, NULL, NULL, L->step, ud);
        return;
    }
    loops(K, K->nkept, K->nlev - 1, NULL, NULL, lanes_inner, ud);
    lanes_use(L, LANES_SCALAR);
    if (K->lev[K->nlev - 1] < 2 * GEN_LANES) return;
    lanes_merge(G, L, which, merge, ud);
}

/* The vector lanes of accumulator `which` merged in order, then with the
 * scalar accumulator (the tail's), into the scalar accumulator. */
static void lanes_merge(hd_llvm_gen *G, gen_lanes *L, int which, gen_merge_fn merge, void *ud) {
    LLVMTypeRef ty = which == 1 ? L->ty1 : L->ty2;
    LLVMValueRef acc = which == 1 ? L->acc1 : L->acc2, vacc = which == 1 ? L->vacc1 : L->vacc2;
    LLVMValueRef vv = LLVMBuildLoad2(B, LLVMVectorType(ty, GEN_LANES), vacc, "");
    LLVMValueRef v = LLVMBuildExtractElement(B, vv, LLVMConstInt(G->t.i32, 0, 0), "");
    for (int lane = 1; lane < GEN_LANES; lane++)
        v = merge(G, v,
                  LLVMBuildExtractElement(B, vv, LLVMConstInt(G->t.i32, (uint64_t)lane, 0), ""),
                  ud);
    LLVMBuildStore(B, merge(G, v, LLVMBuildLoad2(B, ty, acc, ""), ud), acc);
}

/* Set a row's accumulators (scalar and lanes), or a vector of rows'. */
static void lanes_init(gen_lanes *L, hd_llvm_gen *G, LLVMValueRef init1, LLVMValueRef init2) {
    if (G->vw) {
        LLVMBuildStore(B, hd_llvm_splat(G, init1), L->racc1);
        LLVMBuildStore(B, hd_llvm_splat(G, init2), L->racc2);
        lanes_use(L, LANES_ROWS);
        return;
    }
    G->vw = GEN_LANES;
    LLVMBuildStore(B, hd_llvm_splat(G, init1), L->vacc1);
    LLVMBuildStore(B, hd_llvm_splat(G, init2), L->vacc2);
    G->vw = 0;
    LLVMBuildStore(B, init1, L->acc1);
    LLVMBuildStore(B, init2, L->acc2);
    lanes_use(L, LANES_SCALAR);
}

static LLVMValueRef merge_fadd(hd_llvm_gen *G, LLVMValueRef a, LLVMValueRef b, void *ud) {
    HD_UNUSED(ud);
    return LLVMBuildFAdd(B, a, b, "");
}

/* ---- reductions ---- */

typedef struct red_gen {
    gen_lanes L;
    const hd_ir_node *n;
    hd_dtype dt, od;
    int pass;
    LLVMValueRef acc1, acc2; /* this lane's accumulators (allocas) */
    LLVMValueRef param;      /* pass 2: mean or max, as double */
    /* vertical reductions: the kernel's range, a tile's first column and
     * width, per-column accumulators and parameters */
    LLVMValueRef lo, hi, c0, w, arr1, arr2, parr;
} red_gen;

static int red_float(const red_gen *R) {
    return hd_dtype_is_float(R->dt);
}

static LLVMValueRef to_f64(hd_llvm_gen *G, LLVMValueRef v) {
    LLVMTypeRef t = hd_llvm_vec(G, G->t.f64);
    return LLVMTypeOf(v) == t ? v : LLVMBuildFPExt(B, v, t, "");
}

/* Integer values widened to i64 for max/min (u8 and bool are unsigned). */
static LLVMValueRef to_i64(hd_llvm_gen *G, LLVMValueRef v, hd_dtype dt) {
    LLVMTypeRef t = hd_llvm_vec(G, G->t.i64);
    if (LLVMTypeOf(v) == t) return v;
    return dt == HD_U8 || dt == HD_BOOL ? LLVMBuildZExt(B, v, t, "") : LLVMBuildSExt(B, v, t, "");
}

static int is_int_value(LLVMValueRef v) {
    LLVMTypeRef t = LLVMTypeOf(v);
    if (LLVMGetTypeKind(t) == LLVMVectorTypeKind) t = LLVMGetElementType(t);
    return LLVMGetTypeKind(t) == LLVMIntegerTypeKind;
}

static LLVMValueRef ext_select(hd_llvm_gen *G, int ismax, LLVMValueRef v, LLVMValueRef m) {
    if (is_int_value(v))
        return LLVMBuildSelect(B, LLVMBuildICmp(B, ismax ? LLVMIntSGT : LLVMIntSLT, v, m, ""), v, m,
                               "");
    LLVMValueRef c = LLVMBuildFCmp(B, ismax ? LLVMRealOGT : LLVMRealOLT, v, m, "");
    LLVMValueRef nan = LLVMBuildFCmp(B, LLVMRealUNO, v, v, "");
    return LLVMBuildSelect(B, LLVMBuildOr(B, c, nan, ""), v, m, ""); /* NaN sticks */
}

static void red_step(gen_kernel *K, void *ud) {
    hd_llvm_gen *G = K->G;
    red_gen *R = ud;
    body_nodes(K, K->k->nnodes - 1);
    LLVMValueRef v = value_at(K, R->n->in[0]);
    LLVMValueRef a = LLVMBuildLoad2(B, acc_type(G, R->pass == 1 ? R->L.ty1 : R->L.ty2),
                                    R->pass == 1 ? R->acc1 : R->acc2, "");
    LLVMValueRef r, param = R->param ? hd_llvm_splat(G, R->param) : NULL;
    switch (R->pass == 1 ? R->n->op : -R->n->op) {
    case HD_OP_SUM:
    case HD_OP_MEAN:
    case HD_OP_VAR:
    case HD_OP_STD:
        r = red_float(R) ? LLVMBuildFAdd(B, a, to_f64(G, v), "") : LLVMBuildAdd(B, a, v, "");
        break;
    case HD_OP_PROD:
        r = red_float(R) ? LLVMBuildFMul(B, a, to_f64(G, v), "") : LLVMBuildMul(B, a, v, "");
        break;
    case HD_OP_MAX:
    case HD_OP_MIN:
        r = ext_select(G, R->n->op == HD_OP_MAX, red_float(R) ? v : to_i64(G, v, R->dt), a);
        break;
    case HD_OP_LOGSUMEXP: r = ext_select(G, 1, v, a); break;
    case HD_OP_MSE: { /* cpu_nn: the squared difference in double */
        LLVMValueRef d = LLVMBuildFSub(B, to_f64(G, v), to_f64(G, value_at(K, R->n->in[1])), "");
        r = LLVMBuildFAdd(B, a, LLVMBuildFMul(B, d, d, ""), "");
        break;
    }
    case -HD_OP_VAR:
    case -HD_OP_STD: {
        LLVMValueRef d = LLVMBuildFSub(B, to_f64(G, v), param, "");
        r = LLVMBuildFAdd(B, a, LLVMBuildFMul(B, d, d, ""), "");
        break;
    }
    default: { /* logsumexp's second pass: exp(x - max) as eager, summed in double */
        LLVMValueRef c =
            R->dt == HD_F64 ? param : LLVMBuildFPTrunc(B, param, hd_llvm_vec(G, G->t.f32), "");
        LLVMValueRef x = LLVMBuildFSub(B, v, c, "");
        LLVMValueRef e = R->dt == HD_F64 ? hd_llvm_call_libm(G, "exp", &x, 1)
                                         : hd_llvm_call_libm(G, "expf", &x, 1);
        r = LLVMBuildFAdd(B, a, to_f64(G, e), "");
        break;
    }
    }
    LLVMBuildStore(B, r, R->pass == 1 ? R->acc1 : R->acc2);
}

/* Accumulator types and initial values of pass 1 (and pass 2). */
static void red_init(gen_kernel *K, red_gen *R, LLVMValueRef *init1, LLVMValueRef *init2) {
    hd_llvm_gen *G = K->G;
    int fl = red_float(R), op = R->n->op;
    R->L.ty1 = R->L.ty2 = G->t.f64;
    *init2 = LLVMConstReal(G->t.f64, 0.0);
    if (op == HD_OP_MAX || op == HD_OP_MIN || op == HD_OP_LOGSUMEXP) {
        int mx = op != HD_OP_MIN;
        R->L.ty1 = fl ? hd_llvm_reg_type(G, R->dt) : G->t.i64;
        *init1 = fl ? LLVMConstReal(R->L.ty1, mx ? -INFINITY : INFINITY)
                    : LLVMConstInt(G->t.i64, mx ? (uint64_t)INT64_MIN : (uint64_t)INT64_MAX, 1);
        return;
    }
    if (!fl) R->L.ty1 = G->t.i64;
    int one = op == HD_OP_PROD;
    *init1 = fl ? LLVMConstReal(G->t.f64, one) : LLVMConstInt(G->t.i64, (uint64_t)one, 0);
}

/* The result of one row, as a register of the output dtype. */
static LLVMValueRef red_result(gen_kernel *K, red_gen *R, int64_t count) {
    hd_llvm_gen *G = K->G;
    LLVMValueRef a1 = LLVMBuildLoad2(B, R->L.ty1, R->acc1, "");
    double n = (double)count;
    switch (R->n->op) {
    case HD_OP_MAX:
    case HD_OP_MIN: return red_float(R) ? a1 : hd_llvm_convert(G, a1, HD_I64, R->od);
    case HD_OP_SUM:
    case HD_OP_PROD: return red_float(R) ? hd_llvm_convert(G, a1, HD_F64, R->od) : a1;
    case HD_OP_MEAN:
    case HD_OP_MSE: {
        LLVMValueRef r = count ? LLVMBuildFDiv(B, a1, LLVMConstReal(G->t.f64, n), "")
                               : LLVMConstReal(G->t.f64, NAN);
        return hd_llvm_convert(G, r, HD_F64, R->od);
    }
    case HD_OP_VAR:
    case HD_OP_STD: {
        LLVMValueRef m2 = LLVMBuildLoad2(B, G->t.f64, R->acc2, ""), r;
        double div = HD_MAX(0.0, n - (double)R->n->attrs.ints[0]);
        if (count == 0)
            r = LLVMConstReal(G->t.f64, NAN);
        else if (div > 0)
            r = LLVMBuildFDiv(B, m2, LLVMConstReal(G->t.f64, div), "");
        else
            r = LLVMBuildSelect(
                B, LLVMBuildFCmp(B, LLVMRealOGT, m2, LLVMConstReal(G->t.f64, 0), ""),
                LLVMConstReal(G->t.f64, INFINITY), LLVMConstReal(G->t.f64, NAN), "");
        if (R->n->op == HD_OP_STD) r = hd_llvm_intrinsic(G, "llvm.sqrt", r);
        return hd_llvm_convert(G, r, HD_F64, R->od);
    }
    default: { /* logsumexp: max + log(sum), or max when it is not finite */
        LLVMValueRef m = to_f64(G, a1), s = LLVMBuildLoad2(B, G->t.f64, R->acc2, "");
        LLVMValueRef r = LLVMBuildFAdd(B, m, hd_llvm_call_libm(G, "log", &s, 1), "");
        LLVMValueRef fin = LLVMBuildFCmp(B, LLVMRealONE, hd_llvm_intrinsic(G, "llvm.fabs", m),
                                         LLVMConstReal(G->t.f64, INFINITY), "");
        return hd_llvm_convert(G, LLVMBuildSelect(B, fin, r, m, ""), HD_F64, R->od);
    }
    }
}

/* Lanes of pass 1 merge as the op combines two partial results. */
static LLVMValueRef red_merge1(hd_llvm_gen *G, LLVMValueRef a, LLVMValueRef b, void *ud) {
    red_gen *R = ud;
    int fl = red_float(R);
    switch (R->n->op) {
    case HD_OP_PROD: return fl ? LLVMBuildFMul(B, a, b, "") : LLVMBuildMul(B, a, b, "");
    case HD_OP_MAX:
    case HD_OP_LOGSUMEXP: return ext_select(G, 1, b, a);
    case HD_OP_MIN: return ext_select(G, 0, b, a);
    default: return fl ? LLVMBuildFAdd(B, a, b, "") : LLVMBuildAdd(B, a, b, "");
    }
}

static int red_two_pass(const red_gen *R) {
    int op = R->n->op;
    return op == HD_OP_VAR || op == HD_OP_STD || op == HD_OP_LOGSUMEXP;
}

/* Pass 2's parameter from pass 1's accumulator: the mean or the max. */
static LLVMValueRef red_param(gen_kernel *K, red_gen *R, int64_t count) {
    hd_llvm_gen *G = K->G;
    LLVMValueRef a1 = LLVMBuildLoad2(B, R->L.ty1, R->acc1, "");
    if (R->n->op == HD_OP_LOGSUMEXP) return to_f64(G, a1);
    return LLVMBuildFDiv(B, a1, LLVMConstReal(G->t.f64, (double)count), "");
}

static int64_t red_count(const gen_kernel *K) {
    int64_t count = 1;
    for (int l = K->nkept; l < K->nlev; l++) count *= K->lev[l];
    return count;
}

/* One row of a reduction: pass 1, pass 2 where the op has one, the store. */
static void red_row(gen_kernel *K, void *ud) {
    hd_llvm_gen *G = K->G;
    red_gen *R = ud;
    LLVMValueRef init1, init2;
    red_init(K, R, &init1, &init2);
    lanes_init(&R->L, G, init1, init2);
    int64_t count = red_count(K);
    R->pass = 1;
    lanes_pass(K, &R->L, 1, red_merge1, R);
    if (red_two_pass(R)) {
        R->param = red_param(K, R, count);
        R->pass = 2;
        lanes_pass(K, &R->L, 2, merge_fadd, R);
    }
    int s = op_find(K, R->n->out, 1);
    hd_llvm_store(G, R->od, K->ops[s].ptr, red_result(K, R, count));
}

/* ---- vertical reductions ---- */

#define GEN_TILE 512

/* Is the innermost kept loop contiguous where the innermost reduced one is
 * strided (a sum over axis 0 of a row-major matrix)? Then rows are walked
 * in order, a tile of GEN_TILE columns keeping an accumulator each (as the
 * eager kernel's vertical path): each row updates the tile in a loop the
 * vectoriser takes, instead of one column at a time down the matrix. */
static int red_is_vertical(const gen_kernel *K) {
    int lk = K->nkept - 1, lr = K->nlev - 1, strided = 0;
    if (K->lev[lk] < 8) return 0;
    for (int j = 0; j < K->nops; j++) {
        const gen_op *op = &K->ops[j];
        if (op->store) continue;
        if (op->st[lr] == 1) return 0;
        if (op->st[lk] == 1 && op->st[lr] != 0) strided = 1;
    }
    return strided;
}

/* Point the accumulators (and pass 2's parameter) at column t of the tile,
 * and the operands at column c0 + t. */
static void red_vcolumn(gen_kernel *K, red_gen *R, LLVMValueRef t, LLVMValueRef *saved) {
    hd_llvm_gen *G = K->G;
    ptrs_step(K, K->nkept - 1, LLVMBuildNSWAdd(B, R->c0, t, ""), saved);
    regs_clear(K);
    R->acc1 = LLVMBuildInBoundsGEP2(B, R->L.ty1, R->arr1, &t, 1, "");
    R->acc2 = LLVMBuildInBoundsGEP2(B, R->L.ty2, R->arr2, &t, 1, "");
}

/* At rows r .. r + nrows - 1 of the innermost reduced loop (the outer
 * reduced loops' pointers already stepped): every column of the tile, the
 * rows in order (four rows per pass keep the accumulator in a register, as
 * the eager kernel does). */
static void red_vrows(gen_kernel *K, red_gen *R, LLVMValueRef r, int nrows) {
    hd_llvm_gen *G = K->G;
    int l = K->nlev - 1;
    LLVMValueRef saved[K->nops + 1], rsaved[K->nops + 1];
    gen_loop L;
    LLVMValueRef t = loop_begin(G, &L, c64(G, 0), R->w);
    for (int k = 0; k < nrows; k++) {
        ptrs_step(K, l, LLVMBuildNSWAdd(B, r, c64(G, k), ""), rsaved);
        red_vcolumn(K, R, t, saved);
        if (R->pass == 2)
            R->param = LLVMBuildLoad2(B, G->t.f64,
                                      LLVMBuildInBoundsGEP2(B, G->t.f64, R->parr, &t, 1, ""), "");
        red_step(K, R);
        ptrs_restore(K, saved);
        ptrs_restore(K, rsaved);
    }
    /* f64 accumulators would make the vectoriser pick 4 lanes for f32 data */
    loop_end(G, &L, K->has_calls ? 0 : R->dt == HD_F64 ? 4 : 8);
}

/* The innermost reduced loop: four rows at a time, then the rest. */
static void red_vinner(gen_kernel *K, void *ud) {
    hd_llvm_gen *G = K->G;
    red_gen *R = ud;
    int64_t n = K->lev[K->nlev - 1], n4 = n / 4;
    gen_loop L;
    if (n4) {
        LLVMValueRef b = loop_begin(G, &L, c64(G, 0), c64(G, n4));
        red_vrows(K, R, LLVMBuildNSWMul(B, b, c64(G, 4), ""), 4);
        loop_end(G, &L, 0);
    }
    if (n4 * 4 < n) {
        LLVMValueRef r = loop_begin(G, &L, c64(G, n4 * 4), c64(G, n));
        red_vrows(K, R, r, 1);
        loop_end(G, &L, 0);
    }
}

typedef enum { VTILE_INIT, VTILE_PARAM, VTILE_STORE } vtile_what;

/* One loop over the tile's columns: set the accumulators, compute pass 2's
 * parameters, or store the results. */
static void red_vtile_loop(gen_kernel *K, red_gen *R, vtile_what what, int64_t count) {
    hd_llvm_gen *G = K->G;
    LLVMValueRef saved[K->nops + 1], init1, init2;
    gen_loop L;
    LLVMValueRef t = loop_begin(G, &L, c64(G, 0), R->w);
    red_vcolumn(K, R, t, saved);
    if (what == VTILE_INIT) {
        red_init(K, R, &init1, &init2);
        LLVMBuildStore(B, init1, R->acc1);
        LLVMBuildStore(B, init2, R->acc2);
    } else if (what == VTILE_PARAM) {
        LLVMBuildStore(B, red_param(K, R, count),
                       LLVMBuildInBoundsGEP2(B, G->t.f64, R->parr, &t, 1, ""));
    } else {
        int s = op_find(K, R->n->out, 1);
        hd_llvm_store(G, R->od, K->ops[s].ptr, red_result(K, R, count));
    }
    ptrs_restore(K, saved);
    loop_end(G, &L, 0);
}

/* The innermost kept loop in tiles; each tile walks the reduced dims. */
static void red_vtiles(gen_kernel *K, void *ud) {
    hd_llvm_gen *G = K->G;
    red_gen *R = ud;
    int l = K->nkept - 1;
    LLVMValueRef lo = l == 0 ? R->lo : c64(G, 0), hi = l == 0 ? R->hi : c64(G, K->lev[l]);
    LLVMValueRef n = LLVMBuildSub(B, hi, lo, "");
    LLVMValueRef ntiles =
        LLVMBuildSDiv(B, LLVMBuildAdd(B, n, c64(G, GEN_TILE - 1), ""), c64(G, GEN_TILE), "");
    int64_t count = red_count(K);
    gen_loop L;
    LLVMValueRef k = loop_begin(G, &L, c64(G, 0), ntiles);
    R->c0 = LLVMBuildAdd(B, lo, LLVMBuildNSWMul(B, k, c64(G, GEN_TILE), ""), "");
    LLVMValueRef left = LLVMBuildSub(B, hi, R->c0, "");
    R->w = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, left, c64(G, GEN_TILE), ""), left,
                           c64(G, GEN_TILE), "");
    red_vtile_loop(K, R, VTILE_INIT, count);
    R->pass = 1;
    loops(K, K->nkept, K->nlev - 1, NULL, NULL, red_vinner, R);
    if (red_two_pass(R)) {
        red_vtile_loop(K, R, VTILE_PARAM, count);
        R->pass = 2;
        loops(K, K->nkept, K->nlev - 1, NULL, NULL, red_vinner, R);
    }
    red_vtile_loop(K, R, VTILE_STORE, count);
    loop_end(G, &L, 0);
}

/* ---- softmax, log_softmax, layer_norm rows ---- */

typedef struct row_gen {
    gen_lanes L;
    LLVMValueRef lo, hi; /* the kernel's range (vertical rows) */
    const hd_ir_node *n;
    hd_dtype dt;
    int pass;
    LLVMValueRef acc1, acc2; /* pass 1: max (T) or sum (f64); pass 2: sum (f64) */
    LLVMValueRef p1, p2;     /* per-row parameters of the last pass */
    LLVMValueRef c0, c1;     /* layer_norm_bwd's dx: the last pass's constants */
} row_gen;

/* softmax_bwd (y (g - sum(g y))) or log_softmax_bwd (g - exp(y) sum(g)):
 * cpu_grad's arithmetic, in double, with pass 2's sum and pass 3 only. */
static int row_bwd(const row_gen *R) {
    return R->n->op == HD_OP_SOFTMAX_BWD || R->n->op == HD_OP_LOG_SOFTMAX_BWD;
}

static void row_bwd_step(gen_kernel *K, row_gen *R) {
    hd_llvm_gen *G = K->G;
    LLVMValueRef y = to_f64(G, value_at(K, R->n->in[0])), g = to_f64(G, value_at(K, R->n->in[1]));
    int logsm = R->n->op == HD_OP_LOG_SOFTMAX_BWD;
    if (R->pass == 2) {
        LLVMValueRef a = LLVMBuildLoad2(B, hd_llvm_vec(G, G->t.f64), R->acc2, "");
        LLVMBuildStore(B, LLVMBuildFAdd(B, a, logsm ? g : LLVMBuildFMul(B, g, y, ""), ""), R->acc2);
        return;
    }
    LLVMValueRef s = hd_llvm_splat(G, R->p2), r;
    if (logsm)
        r = LLVMBuildFSub(B, g, LLVMBuildFMul(B, hd_llvm_call_libm(G, "exp", &y, 1), s, ""), "");
    else
        r = LLVMBuildFMul(B, y, LLVMBuildFSub(B, g, s, ""), "");
    int out = op_find(K, R->n->out, 1);
    hd_llvm_store_n(G, R->dt, K->ops[out].ptr, G->vw ? K->ops[out].st[K->vlev] : 1,
                    hd_llvm_convert(G, r, HD_F64, R->dt));
}

/* layer_norm_bwd's dx (x, g[, w]), as cpu_grad in double: pass 1 sums x
 * (mean m), pass 2 the squared deviations (rstd), passes 4 and 5 a =
 * sum(g w) and b = sum(g w (x - m)), pass 3 writes rstd g w - rstd a / d -
 * (x - m) rstd^3 b / d. */
static void row_lnb_step(gen_kernel *K, row_gen *R) {
    hd_llvm_gen *G = K->G;
    const hd_ir_node *n = R->n;
    LLVMValueRef x = to_f64(G, value_at(K, n->in[0])), g = to_f64(G, value_at(K, n->in[1]));
    LLVMValueRef w = n->nin == 3 ? to_f64(G, value_at(K, n->in[2])) : NULL;
    LLVMValueRef m = R->pass > 1 ? hd_llvm_splat(G, R->p1) : NULL, r;
    int p = R->pass;
    if (p != 3) {
        LLVMValueRef acc = p == 1 || p == 4 ? R->acc1 : R->acc2;
        LLVMValueRef gw = w ? LLVMBuildFMul(B, g, w, "") : g, d = NULL;
        if (p == 2 || p == 5) d = LLVMBuildFSub(B, x, m, "");
        LLVMValueRef t = p == 1   ? x
                         : p == 2 ? LLVMBuildFMul(B, d, d, "")
                         : p == 4 ? gw
                                  : LLVMBuildFMul(B, gw, d, "");
        LLVMValueRef a = LLVMBuildLoad2(B, hd_llvm_vec(G, G->t.f64), acc, "");
        LLVMBuildStore(B, LLVMBuildFAdd(B, a, t, ""), acc);
        return;
    }
    LLVMValueRef rs = hd_llvm_splat(G, R->p2), rg = LLVMBuildFMul(B, rs, g, "");
    if (w) rg = LLVMBuildFMul(B, rg, w, "");
    r = LLVMBuildFSub(B, LLVMBuildFSub(B, rg, hd_llvm_splat(G, R->c0), ""),
                      LLVMBuildFMul(B, LLVMBuildFSub(B, x, m, ""), hd_llvm_splat(G, R->c1), ""),
                      "");
    int out = op_find(K, n->out, 1);
    hd_llvm_store_n(G, R->dt, K->ops[out].ptr, G->vw ? K->ops[out].st[K->vlev] : 1,
                    hd_llvm_convert(G, r, HD_F64, R->dt));
}

/* Does softmax keep exp(x - max) in its output between passes 2 and 3?
 * Only where the output holds it exactly (f32, f64). */
static int row_stash(const row_gen *R) {
    return R->n->op == HD_OP_SOFTMAX && (R->dt == HD_F32 || R->dt == HD_F64);
}

static void row_step(gen_kernel *K, void *ud) {
    hd_llvm_gen *G = K->G;
    row_gen *R = ud;
    if (row_bwd(R)) {
        row_bwd_step(K, R);
        return;
    }
    if (R->n->op == HD_OP_LAYER_NORM_BWD) {
        row_lnb_step(K, R);
        return;
    }
    LLVMValueRef x = value_at(K, R->n->in[0]);
    LLVMTypeRef ty = LLVMTypeOf(x), f64 = hd_llvm_vec(G, G->t.f64);
    int ln = R->n->op == HD_OP_LAYER_NORM, out = op_find(K, R->n->out, 1);
    LLVMValueRef r, p1 = R->p1 ? hd_llvm_splat(G, R->p1) : NULL;
    if (R->pass == 1) {
        LLVMValueRef a = LLVMBuildLoad2(B, ln ? f64 : ty, R->acc1, "");
        r = ln ? LLVMBuildFAdd(B, a, to_f64(G, x), "")
               : LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, x, a, ""), x, a, "");
        LLVMBuildStore(B, r, R->acc1);
        return;
    }
    if (R->pass == 2) {
        LLVMValueRef a = LLVMBuildLoad2(B, f64, R->acc2, "");
        LLVMValueRef d = ln ? LLVMBuildFSub(B, to_f64(G, x), p1, "")
                            : hd_llvm_nn_exp(G, LLVMBuildFSub(B, x, p1, ""), R->dt);
        r = LLVMBuildFAdd(B, a, ln ? LLVMBuildFMul(B, d, d, "") : to_f64(G, d), "");
        LLVMBuildStore(B, r, R->acc2);
        if (row_stash(R)) /* softmax: exp once, as eager, scaled in place by pass 3 */
            hd_llvm_store_n(G, R->dt, K->ops[out].ptr, G->vw ? K->ops[out].st[K->vlev] : 1, d);
        return;
    }
    LLVMValueRef p2 = hd_llvm_splat(G, R->p2);
    if (ln) { /* ((x - mu) * rs) [* w + b] */
        r = LLVMBuildFMul(B, LLVMBuildFSub(B, x, p1, ""), p2, "");
        if (R->n->nin == 3)
            r = LLVMBuildFAdd(B, LLVMBuildFMul(B, r, value_at(K, R->n->in[1]), ""),
                              value_at(K, R->n->in[2]), "");
    } else if (R->n->op == HD_OP_LOG_SOFTMAX) {
        r = LLVMBuildFSub(B, LLVMBuildFSub(B, x, p1, ""), p2, "");
    } else if (row_stash(R)) {
        int64_t step = G->vw ? K->ops[out].st[K->vlev] : 1;
        r = LLVMBuildFMul(B, hd_llvm_load_n(G, R->dt, K->ops[out].ptr, step), p2, "");
    } else {
        r = LLVMBuildFMul(B, hd_llvm_nn_exp(G, LLVMBuildFSub(B, x, p1, ""), R->dt), p2, "");
    }
    hd_llvm_store_n(G, R->dt, K->ops[out].ptr, G->vw ? K->ops[out].st[K->vlev] : 1, r);
}

/* The per-row parameters between the passes (cpu_nn's formulas); vectors
 * of them for a vector of rows. */
static void row_params(gen_kernel *K, row_gen *R, int64_t count, int after) {
    hd_llvm_gen *G = K->G;
    LLVMTypeRef ty = hd_llvm_vec(G, hd_llvm_reg_type(G, R->dt)), f64 = hd_llvm_vec(G, G->t.f64);
    LLVMTypeRef f32 = hd_llvm_vec(G, G->t.f32);
    int ln = R->n->op == HD_OP_LAYER_NORM;
    if (after == 1) {
        LLVMValueRef a = LLVMBuildLoad2(B, ln ? f64 : ty, R->acc1, "");
        R->p1 = ln ? LLVMBuildFDiv(B, a, LLVMConstReal(f64, (double)count), "") : a;
        return;
    }
    LLVMValueRef s = LLVMBuildLoad2(B, f64, R->acc2, "");
    if (row_bwd(R)) {
        R->p2 = s;
    } else if (ln) {
        LLVMValueRef v =
            LLVMBuildFAdd(B, LLVMBuildFDiv(B, s, LLVMConstReal(f64, (double)count), ""),
                          LLVMConstReal(f64, hd_layer_norm_eps(&R->n->attrs)), "");
        LLVMValueRef rs =
            LLVMBuildFDiv(B, LLVMConstReal(f64, 1.0), hd_llvm_intrinsic(G, "llvm.sqrt", v), "");
        R->p1 = hd_llvm_convert(G, R->p1, HD_F64, R->dt == HD_F64 ? HD_F64 : HD_F32);
        R->p2 = hd_llvm_convert(G, rs, HD_F64, R->dt == HD_F64 ? HD_F64 : HD_F32);
    } else if (R->n->op == HD_OP_LOG_SOFTMAX) {
        LLVMValueRef t = R->dt == HD_F64 ? s : LLVMBuildFPTrunc(B, s, f32, "");
        R->p2 = hd_llvm_call_libm(G, R->dt == HD_F64 ? "log" : "logf", &t, 1);
    } else {
        LLVMValueRef inv = LLVMBuildFDiv(B, LLVMConstReal(f64, 1.0), s, "");
        R->p2 = R->dt == HD_F64 ? inv : LLVMBuildFPTrunc(B, inv, f32, "");
    }
}

/* softmax's max merges as its pass does (x > m ? x : m); sums add. */
static LLVMValueRef row_merge1(hd_llvm_gen *G, LLVMValueRef a, LLVMValueRef b, void *ud) {
    row_gen *R = ud;
    if (R->n->op == HD_OP_LAYER_NORM) return LLVMBuildFAdd(B, a, b, "");
    return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, b, a, ""), b, a, "");
}

/* layer_norm_bwd's passes over one row (row_lnb_step). */
static void row_lnb(gen_kernel *K, row_gen *R, int64_t count) {
    hd_llvm_gen *G = K->G;
    LLVMValueRef zero = LLVMConstReal(G->t.f64, 0), d = LLVMConstReal(G->t.f64, (double)count);
    double eps = hd_layer_norm_eps(&R->n->attrs);
    lanes_init(&R->L, G, zero, zero);
    R->pass = 1;
    lanes_pass(K, &R->L, 1, merge_fadd, R);
    R->p1 = LLVMBuildFDiv(B, LLVMBuildLoad2(B, G->t.f64, R->acc1, ""), d, "");
    R->pass = 2;
    lanes_pass(K, &R->L, 2, merge_fadd, R);
    LLVMValueRef v2 = LLVMBuildFDiv(B, LLVMBuildLoad2(B, G->t.f64, R->acc2, ""), d, "");
    LLVMValueRef v = LLVMBuildFAdd(B, v2, LLVMConstReal(G->t.f64, eps), "");
    R->p2 =
        LLVMBuildFDiv(B, LLVMConstReal(G->t.f64, 1.0), hd_llvm_intrinsic(G, "llvm.sqrt", v), "");
    lanes_init(&R->L, G, zero, zero);
    R->pass = 4;
    lanes_pass(K, &R->L, 1, merge_fadd, R);
    R->pass = 5;
    lanes_pass(K, &R->L, 2, merge_fadd, R);
    LLVMValueRef a = LLVMBuildLoad2(B, G->t.f64, R->acc1, "");
    LLVMValueRef b = LLVMBuildLoad2(B, G->t.f64, R->acc2, "");
    LLVMValueRef rs3 = LLVMBuildFMul(B, LLVMBuildFMul(B, R->p2, R->p2, ""), R->p2, "");
    R->c0 = LLVMBuildFDiv(B, LLVMBuildFMul(B, R->p2, a, ""), d, "");
    R->c1 = LLVMBuildFDiv(B, LLVMBuildFMul(B, rs3, b, ""), d, "");
    R->pass = 3;
    loops(K, K->nkept, K->nlev, NULL, NULL, row_step, R);
}

static void row_row(gen_kernel *K, void *ud) {
    hd_llvm_gen *G = K->G;
    row_gen *R = ud;
    int ln = R->n->op == HD_OP_LAYER_NORM;
    int64_t count = 1;
    for (int l = K->nkept; l < K->nlev; l++) count *= K->lev[l];
    if (R->n->op == HD_OP_LAYER_NORM_BWD) {
        row_lnb(K, R, count);
        return;
    }
    lanes_init(&R->L, G,
               ln || row_bwd(R) ? LLVMConstReal(R->L.ty1, 0) : LLVMConstReal(R->L.ty1, -INFINITY),
               LLVMConstReal(G->t.f64, 0));
    if (!row_bwd(R)) {
        R->pass = 1;
        lanes_pass(K, &R->L, 1, row_merge1, R);
        row_params(K, R, count, 1);
    }
    R->pass = 2;
    lanes_pass(K, &R->L, 2, merge_fadd, R);
    row_params(K, R, count, 2);
    R->pass = 3; /* elementwise: the loop vectorizer takes it */
    loops(K, K->nkept, K->nlev, NULL, NULL, row_step, R);
}

/* softmax over a leading axis (the innermost kept loop contiguous, the
 * axis strided): rows are done GEN_VROWS at a time as vectors, one lane
 * per row, so every pass loads whole cache lines down the axis; the rows
 * left over one by one. */
static void row_vcols(gen_kernel *K, void *ud) {
    hd_llvm_gen *G = K->G;
    row_gen *R = ud;
    int l = K->nkept - 1;
    LLVMValueRef lo = l == 0 ? R->lo : c64(G, 0), hi = l == 0 ? R->hi : c64(G, K->lev[l]);
    LLVMValueRef nv = LLVMBuildSDiv(B, LLVMBuildSub(B, hi, lo, ""), c64(G, GEN_VROWS), "");
    LLVMValueRef saved[K->nops + 1];
    gen_loop L;
    LLVMValueRef j = loop_begin(G, &L, c64(G, 0), nv);
    ptrs_step(K, l, LLVMBuildAdd(B, lo, LLVMBuildNSWMul(B, j, c64(G, GEN_VROWS), ""), ""), saved);
    G->vw = GEN_VROWS;
    K->vlev = l;
    row_row(K, R);
    G->vw = 0;
    ptrs_restore(K, saved);
    loop_end(G, &L, 0);
    LLVMValueRef c = loop_begin(
        G, &L, LLVMBuildAdd(B, lo, LLVMBuildNSWMul(B, nv, c64(G, GEN_VROWS), ""), ""), hi);
    ptrs_step(K, l, c, saved);
    row_row(K, R);
    ptrs_restore(K, saved);
    loop_end(G, &L, 0);
}

/* ---- kernel functions ---- */

static LLVMValueRef entry_alloca(hd_llvm_gen *G, LLVMValueRef fn, LLVMTypeRef ty) {
    LLVMBasicBlockRef entry = LLVMGetEntryBasicBlock(fn), cur = LLVMGetInsertBlock(B);
    LLVMValueRef first = LLVMGetFirstInstruction(entry);
    if (first)
        LLVMPositionBuilderBefore(B, first);
    else
        LLVMPositionBuilderAtEnd(B, entry);
    LLVMValueRef a = LLVMBuildAlloca(B, ty, "");
    LLVMPositionBuilderAtEnd(B, cur);
    return a;
}

/* GEN_TILE elements of ty on the stack. */
static LLVMValueRef entry_array(hd_llvm_gen *G, LLVMValueRef fn, LLVMTypeRef ty) {
    LLVMValueRef a = entry_alloca(G, fn, LLVMArrayType(ty, GEN_TILE));
    return LLVMBuildBitCast(B, a, LLVMPointerType(ty, 0), "");
}

/* The accumulators' allocas; rows > 0: also a vector of that many rows. */
static void lanes_alloca(hd_llvm_gen *G, LLVMValueRef fn, gen_lanes *L, gen_body_fn step,
                         LLVMValueRef *cur1, LLVMValueRef *cur2, int rows) {
    L->step = step;
    L->cur1 = cur1;
    L->cur2 = cur2;
    L->acc1 = entry_alloca(G, fn, L->ty1);
    L->acc2 = entry_alloca(G, fn, L->ty2);
    L->vacc1 = entry_alloca(G, fn, LLVMVectorType(L->ty1, GEN_LANES));
    L->vacc2 = entry_alloca(G, fn, LLVMVectorType(L->ty2, GEN_LANES));
    if (rows) {
        L->racc1 = entry_alloca(G, fn, LLVMVectorType(L->ty1, (unsigned)rows));
        L->racc2 = entry_alloca(G, fn, LLVMVectorType(L->ty2, (unsigned)rows));
    }
}

static void add_attr(hd_llvm_gen *G, LLVMValueRef fn, unsigned idx, const char *name) {
    unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
    LLVMAddAttributeAtIndex(fn, idx, LLVMCreateEnumAttribute(G->t.c, kind, 0));
}

/* ---- argmax, argmin: the first index of the extreme over the reduced
 * dims (row-major), a NaN counting as the extreme and the first one ending
 * the search, as cpu_reduce; one element at a time ---- */

typedef struct arg_gen {
    const hd_ir_node *n;
    hd_dtype dt;
    LLVMValueRef best, idx, nan, k; /* allocas: the best value, its index (-1:
                                     * none), a NaN taken, the running index */
} arg_gen;

static void arg_step(gen_kernel *K, void *ud) {
    hd_llvm_gen *G = K->G;
    arg_gen *A = ud;
    body_nodes(K, K->k->nnodes - 1);
    LLVMValueRef v = value_at(K, A->n->in[0]);
    int fl = hd_dtype_is_float(A->dt), mx = A->n->op == HD_OP_ARGMAX;
    int sgn = A->dt == HD_I8 || A->dt == HD_I32 || A->dt == HD_I64;
    LLVMValueRef best = LLVMBuildLoad2(B, LLVMTypeOf(v), A->best, "");
    LLVMValueRef idx = LLVMBuildLoad2(B, G->t.i64, A->idx, "");
    LLVMValueRef k = LLVMBuildLoad2(B, G->t.i64, A->k, "");
    LLVMValueRef nan = LLVMBuildLoad2(B, G->t.i1, A->nan, "");
    LLVMIntPredicate ip = mx ? (sgn ? LLVMIntSGT : LLVMIntUGT) : (sgn ? LLVMIntSLT : LLVMIntULT);
    LLVMValueRef better = fl ? LLVMBuildFCmp(B, mx ? LLVMRealOGT : LLVMRealOLT, v, best, "")
                             : LLVMBuildICmp(B, ip, v, best, "");
    LLVMValueRef isnan = fl ? LLVMBuildFCmp(B, LLVMRealUNO, v, v, "") : LLVMConstInt(G->t.i1, 0, 0);
    LLVMValueRef none = LLVMBuildICmp(B, LLVMIntSLT, idx, c64(G, 0), "");
    LLVMValueRef cand = LLVMBuildOr(B, isnan, LLVMBuildOr(B, none, better, ""), "");
    LLVMValueRef take = LLVMBuildAnd(B, cand, LLVMBuildNot(B, nan, ""), "");
    LLVMBuildStore(B, LLVMBuildSelect(B, take, v, best, ""), A->best);
    LLVMBuildStore(B, LLVMBuildSelect(B, take, k, idx, ""), A->idx);
    LLVMBuildStore(B, LLVMBuildOr(B, nan, isnan, ""), A->nan);
    LLVMBuildStore(B, LLVMBuildAdd(B, k, c64(G, 1), ""), A->k);
}

static void arg_row(gen_kernel *K, void *ud) {
    hd_llvm_gen *G = K->G;
    arg_gen *A = ud;
    LLVMBuildStore(B, LLVMConstNull(hd_llvm_reg_type(G, A->dt)), A->best);
    LLVMBuildStore(B, c64(G, -1), A->idx);
    LLVMBuildStore(B, LLVMConstInt(G->t.i1, 0, 0), A->nan);
    LLVMBuildStore(B, c64(G, 0), A->k);
    loops(K, K->nkept, K->nlev, NULL, NULL, arg_step, A);
    LLVMValueRef idx = LLVMBuildLoad2(B, G->t.i64, A->idx, "");
    idx = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, idx, c64(G, 0), ""), c64(G, 0), idx, "");
    hd_llvm_store(G, HD_I64, K->ops[op_find(K, A->n->out, 1)].ptr, idx);
}

static void arg_body(gen_kernel *K, LLVMValueRef fn, LLVMValueRef lo, LLVMValueRef hi,
                     const hd_ir_node *n) {
    hd_llvm_gen *G = K->G;
    arg_gen A;
    A.n = n;
    A.dt = G->plan->g->values[n->in[0]].dtype;
    A.best = entry_alloca(G, fn, hd_llvm_reg_type(G, A.dt));
    A.idx = entry_alloca(G, fn, G->t.i64);
    A.nan = entry_alloca(G, fn, G->t.i1);
    A.k = entry_alloca(G, fn, G->t.i64);
    loops(K, 0, K->nkept, lo, hi, arg_row, &A);
}

/* A reduction's rows [lo, hi) of its outermost loop: in row order, or in
 * tiles of columns (vertical); argmax and argmin one element at a time. */
/* The generator's state for the kernel's reduction (its last node). */
static void red_setup(gen_kernel *K, red_gen *R) {
    const hd_ir_graph *g = K->G->plan->g;
    const hd_ir_node *last = &g->nodes[K->k->nodes[K->k->nnodes - 1]];
    memset(R, 0, sizeof *R);
    R->n = last;
    R->dt = g->values[last->in[0]].dtype;
    R->od = g->values[last->out].dtype;
}

static void reduce_body(gen_kernel *K, LLVMValueRef fn, LLVMValueRef lo, LLVMValueRef hi) {
    hd_llvm_gen *G = K->G;
    const hd_ir_graph *g = G->plan->g;
    const hd_ir_node *last = &g->nodes[K->k->nodes[K->k->nnodes - 1]];
    if (last->op == HD_OP_ARGMAX || last->op == HD_OP_ARGMIN) {
        arg_body(K, fn, lo, hi, last);
        return;
    }
    red_gen R;
    red_setup(K, &R);
    R.lo = lo;
    R.hi = hi;
    LLVMValueRef i1, i2;
    red_init(K, &R, &i1, &i2); /* the accumulators' types */
    if (red_is_vertical(K)) {
        R.arr1 = entry_array(G, fn, R.L.ty1);
        R.arr2 = entry_array(G, fn, R.L.ty2);
        R.parr = entry_array(G, fn, G->t.f64);
        loops(K, 0, K->nkept - 1, lo, hi, red_vtiles, &R);
    } else {
        lanes_alloca(G, fn, &R.L, red_step, &R.acc1, &R.acc2, 0);
        loops(K, 0, K->nkept, lo, hi, red_row, &R);
    }
}

/* softmax, log_softmax or layer_norm rows [lo, hi) of the outermost loop:
 * one at a time, or GEN_VROWS at a time over a leading axis. */
static void rows_body(gen_kernel *K, LLVMValueRef fn, LLVMValueRef lo, LLVMValueRef hi) {
    hd_llvm_gen *G = K->G;
    const hd_ir_graph *g = G->plan->g;
    const hd_ir_node *last = &g->nodes[K->k->nodes[K->k->nnodes - 1]];
    row_gen R;
    memset(&R, 0, sizeof R);
    R.n = last;
    R.dt = g->values[last->in[0]].dtype;
    R.L.ty1 = K->k->kind == HD_PLAN_K_LAYER_NORM ? G->t.f64 : hd_llvm_reg_type(G, R.dt);
    R.L.ty2 = G->t.f64;
    R.lo = lo;
    R.hi = hi;
    int vert = red_is_vertical(K);
    lanes_alloca(G, fn, &R.L, row_step, &R.acc1, &R.acc2, vert ? GEN_VROWS : 0);
    if (vert)
        loops(K, 0, K->nkept - 1, lo, hi, row_vcols, &R);
    else
        loops(K, 0, K->nkept, lo, hi, row_row, &R);
}

/* Operand j's pointer: its parameter, or that of an earlier operand at the
 * same address (an epilogue written over the product it reads,
 * hd_plan.c's epilogue_in_place), so that noalias holds and the code
 * sees one array read and written at the same index. */
static LLVMValueRef op_param(gen_kernel *K, LLVMValueRef fn, int j) {
    const hd_plan *p = K->G->plan;
    const hd_plan_val *a = &p->vals[K->ops[j].value];
    for (int i = 0; i < j; i++) {
        const hd_plan_val *b = &p->vals[K->ops[i].value];
        if (a->slot == b->slot && a->byte_off == b->byte_off && K->ops[i].dt == K->ops[j].dt)
            return K->ops[i].ptr;
    }
    return LLVMGetParam(fn, (unsigned)j);
}

/* A body function hd_k<i>_<suffix>(p0..pn, extra...): the operands as
 * noalias pointers (op_param), alwaysinline; the builder at its entry. */
static LLVMValueRef body_fn(gen_kernel *K, const char *suffix, LLVMTypeRef *extra, int nextra) {
    hd_llvm_gen *G = K->G;
    int n = K->nops;
    LLVMTypeRef params[n + nextra];
    for (int j = 0; j < n; j++) params[j] = LLVMPointerType(hd_llvm_mem_type(G, K->ops[j].dt), 0);
    for (int e = 0; e < nextra; e++) params[n + e] = extra[e];
    char name[48];
    snprintf(name, sizeof name, "hd_k%d_%s", K->index, suffix);
    LLVMValueRef fn =
        LLVMAddFunction(G->mod, name, LLVMFunctionType(G->t.vd, params, (unsigned)(n + nextra), 0));
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    add_attr(G, fn, LLVMAttributeFunctionIndex, "alwaysinline");
    add_attr(G, fn, LLVMAttributeFunctionIndex, "nounwind");
    for (int j = 0; j < n; j++) add_attr(G, fn, (unsigned)j + 1, "noalias");
    LLVMPositionBuilderAtEnd(B, LLVMAppendBasicBlockInContext(G->t.c, fn, "entry"));
    for (int j = 0; j < n; j++) K->ops[j].ptr = op_param(K, fn, j);
    return fn;
}

/* hd_k<i>_body(p0..pn, begin, end): the loop nest. */
static LLVMValueRef kernel_body(gen_kernel *K) {
    hd_llvm_gen *G = K->G;
    int n = K->nops;
    LLVMTypeRef extra[2] = {G->t.i64, G->t.i64};
    LLVMValueRef fn = body_fn(K, "body", extra, 2);
    LLVMValueRef lo = LLVMGetParam(fn, (unsigned)n), hi = LLVMGetParam(fn, (unsigned)n + 1);
    if (K->k->kind == HD_PLAN_K_ELEMENTWISE)
        loops(K, 0, K->nlev, lo, hi, ew_body, NULL);
    else if (K->k->kind == HD_PLAN_K_REDUCE)
        reduce_body(K, fn, lo, hi);
    else
        rows_body(K, fn, lo, hi);
    LLVMBuildRetVoid(B);
    return fn;
}

/* The operands' pointers from the slot table into args[0..nops). */
static void entry_ptrs(gen_kernel *K, LLVMValueRef slots, LLVMValueRef *args) {
    hd_llvm_gen *G = K->G;
    const hd_plan *p = G->plan;
    for (int j = 0; j < K->nops; j++) {
        const hd_plan_val *pv = &p->vals[K->ops[j].value];
        LLVMValueRef idx = c64(G, pv->slot);
        LLVMValueRef sp = LLVMBuildInBoundsGEP2(B, G->t.ptr8, slots, &idx, 1, "");
        LLVMValueRef base = LLVMBuildLoad2(B, G->t.ptr8, sp, "");
        LLVMValueRef off = c64(G, pv->byte_off);
        base = LLVMBuildInBoundsGEP2(B, G->t.i8, base, &off, 1, "");
        args[j] =
            LLVMBuildBitCast(B, base, LLVMPointerType(hd_llvm_mem_type(G, K->ops[j].dt), 0), "");
    }
}

/* hd_k<i>(slots, begin, end): base pointers from the slot table. */
static LLVMValueRef kernel_entry(gen_kernel *K, LLVMValueRef body) {
    hd_llvm_gen *G = K->G;
    LLVMTypeRef params[3] = {G->t.pptr8, G->t.i64, G->t.i64};
    char name[32];
    snprintf(name, sizeof name, "hd_k%d", K->index);
    LLVMValueRef fn = LLVMAddFunction(G->mod, name, LLVMFunctionType(G->t.vd, params, 3, 0));
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    add_attr(G, fn, LLVMAttributeFunctionIndex, "nounwind");
    LLVMPositionBuilderAtEnd(B, LLVMAppendBasicBlockInContext(G->t.c, fn, "entry"));
    int n = K->nops;
    LLVMValueRef args[n + 2];
    entry_ptrs(K, LLVMGetParam(fn, 0), args);
    args[n] = LLVMGetParam(fn, 1);
    args[n + 1] = LLVMGetParam(fn, 2);
    LLVMBuildCall2(B, LLVMGlobalGetValueType(body), body, args, (unsigned)n + 2, "");
    LLVMBuildRetVoid(B);
    return fn;
}

/* ---- a reduction to one element, split across threads ---- */

/* A reduction to one element over one loop of at least GEN_SPLIT_MIN
 * elements, of an op done in one pass (sum, mean, prod, max, min, mse),
 * runs in parts: hd_k<i>_part(slots, lo, hi, acc) accumulates elements
 * [lo, hi) as red_row does a whole row (vector lanes, the scalar tail,
 * the lanes merged in order, then with the tail) into *acc;
 * hd_llvm_rt_reduce runs the parts on the context's threads, and
 * hd_k<i>_fin(slots, accs, nparts) merges their accumulators in order and
 * stores the result. One part gives red_row's bits; more give another
 * association of the same sum, as the eager kernel's split does
 * (cpu_reduce.c). */
#define GEN_SPLIT_MIN ((int64_t)1 << 18)

static int red_split_ok(const gen_kernel *K) {
    if (K->k->kind != HD_PLAN_K_REDUCE || K->nlev != K->nkept + 1) return 0;
    for (int l = 0; l < K->nkept; l++)
        if (K->lev[l] != 1) return 0;
    if (K->lev[K->nkept] < GEN_SPLIT_MIN) return 0;
    int op = K->G->plan->g->nodes[K->k->nodes[K->k->nnodes - 1]].op;
    return op == HD_OP_SUM || op == HD_OP_MEAN || op == HD_OP_PROD || op == HD_OP_MAX ||
           op == HD_OP_MIN || op == HD_OP_MSE;
}

/* One step of R's pass at index i of the reduced loop: vw lanes or one. */
static void split_step(gen_kernel *K, red_gen *R, LLVMValueRef i, int vw) {
    hd_llvm_gen *G = K->G;
    LLVMValueRef saved[K->nops + 1];
    ptrs_step(K, K->nlev - 1, i, saved);
    if (vw) ew_prefetch(K, K->nlev - 1);
    regs_clear(K);
    G->vw = vw;
    K->vlev = K->nlev - 1;
    lanes_use(&R->L, vw ? LANES_ROW : LANES_SCALAR);
    red_step(K, R);
    G->vw = 0;
    ptrs_restore(K, saved);
}

/* hd_k<i>_pbody(p0..pn, lo, hi, acc): pass 1 over elements [lo, hi). */
static LLVMValueRef split_part_body(gen_kernel *K) {
    hd_llvm_gen *G = K->G;
    LLVMTypeRef extra[3] = {G->t.i64, G->t.i64, G->t.ptr8};
    LLVMValueRef fn = body_fn(K, "pbody", extra, 3);
    int n = K->nops;
    LLVMValueRef lo = LLVMGetParam(fn, (unsigned)n), hi = LLVMGetParam(fn, (unsigned)n + 1);
    red_gen R;
    LLVMValueRef i1, i2;
    red_setup(K, &R);
    red_init(K, &R, &i1, &i2);
    lanes_alloca(G, fn, &R.L, red_step, &R.acc1, &R.acc2, 0);
    lanes_init(&R.L, G, i1, i2);
    R.pass = 1;
    LLVMValueRef nb = LLVMBuildSDiv(B, LLVMBuildSub(B, hi, lo, ""), c64(G, GEN_LANES), "");
    LLVMValueRef vend = LLVMBuildNSWAdd(B, lo, LLVMBuildNSWMul(B, nb, c64(G, GEN_LANES), ""), "");
    gen_loop lp;
    LLVMValueRef b = loop_begin(G, &lp, c64(G, 0), nb);
    split_step(K, &R, LLVMBuildNSWAdd(B, lo, LLVMBuildNSWMul(B, b, c64(G, GEN_LANES), ""), ""),
               GEN_LANES);
    loop_end(G, &lp, 0);
    split_step(K, &R, loop_begin(G, &lp, vend, hi), 0);
    loop_end(G, &lp, 0);
    lanes_use(&R.L, LANES_SCALAR);
    lanes_merge(G, &R.L, 1, red_merge1, &R);
    LLVMValueRef acc =
        LLVMBuildBitCast(B, LLVMGetParam(fn, (unsigned)n + 2), LLVMPointerType(R.L.ty1, 0), "");
    LLVMBuildStore(B, LLVMBuildLoad2(B, R.L.ty1, R.L.acc1, ""), acc);
    LLVMBuildRetVoid(B);
    return fn;
}

/* hd_k<i>_fbody(p0..pn, accs, nparts): the parts' accumulators (8 bytes
 * apart) merged in order, the result stored. */
static LLVMValueRef split_fin_body(gen_kernel *K) {
    hd_llvm_gen *G = K->G;
    LLVMTypeRef extra[2] = {G->t.ptr8, G->t.i64};
    LLVMValueRef fn = body_fn(K, "fbody", extra, 2);
    int n = K->nops;
    LLVMValueRef accs = LLVMGetParam(fn, (unsigned)n);
    red_gen R;
    LLVMValueRef i1, i2;
    red_setup(K, &R);
    red_init(K, &R, &i1, &i2);
    R.acc1 = entry_alloca(G, fn, R.L.ty1);
    R.acc2 = entry_alloca(G, fn, R.L.ty2);
    LLVMBuildStore(B, i2, R.acc2);
    LLVMTypeRef pt = LLVMPointerType(R.L.ty1, 0);
    LLVMBuildStore(B, LLVMBuildLoad2(B, R.L.ty1, LLVMBuildBitCast(B, accs, pt, ""), ""), R.acc1);
    gen_loop lp;
    LLVMValueRef t = loop_begin(G, &lp, c64(G, 1), LLVMGetParam(fn, (unsigned)n + 1));
    LLVMValueRef off = LLVMBuildNSWMul(B, t, c64(G, 8), "");
    LLVMValueRef q =
        LLVMBuildBitCast(B, LLVMBuildInBoundsGEP2(B, G->t.i8, accs, &off, 1, ""), pt, "");
    LLVMValueRef a = LLVMBuildLoad2(B, R.L.ty1, R.acc1, "");
    LLVMBuildStore(B, red_merge1(G, a, LLVMBuildLoad2(B, R.L.ty1, q, ""), &R), R.acc1);
    loop_end(G, &lp, 0);
    int s = op_find(K, R.n->out, 1);
    hd_llvm_store(G, R.od, K->ops[s].ptr, red_result(K, &R, red_count(K)));
    LLVMBuildRetVoid(B);
    return fn;
}

/* hd_k<i>_<suffix>(slots, extra...): the body with the slots' pointers. */
static LLVMValueRef split_entry(gen_kernel *K, LLVMValueRef body, const char *suffix,
                                LLVMTypeRef *extra, int nextra) {
    hd_llvm_gen *G = K->G;
    int n = K->nops;
    LLVMTypeRef params[1 + nextra];
    params[0] = G->t.pptr8;
    for (int e = 0; e < nextra; e++) params[1 + e] = extra[e];
    char name[48];
    snprintf(name, sizeof name, "hd_k%d_%s", K->index, suffix);
    LLVMValueRef fn =
        LLVMAddFunction(G->mod, name, LLVMFunctionType(G->t.vd, params, (unsigned)(1 + nextra), 0));
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    add_attr(G, fn, LLVMAttributeFunctionIndex, "nounwind");
    LLVMPositionBuilderAtEnd(B, LLVMAppendBasicBlockInContext(G->t.c, fn, "entry"));
    LLVMValueRef args[n + nextra];
    entry_ptrs(K, LLVMGetParam(fn, 0), args);
    for (int e = 0; e < nextra; e++) args[n + e] = LLVMGetParam(fn, (unsigned)(1 + e));
    LLVMBuildCall2(B, LLVMGlobalGetValueType(body), body, args, (unsigned)(n + nextra), "");
    LLVMBuildRetVoid(B);
    return fn;
}

/* split[0], split[1]: K's part and fin functions. */
static void split_fns(gen_kernel *K, LLVMValueRef *split) {
    hd_llvm_gen *G = K->G;
    LLVMTypeRef pe[3] = {G->t.i64, G->t.i64, G->t.ptr8}, fe[2] = {G->t.ptr8, G->t.i64};
    split[0] = split_entry(K, split_part_body(K), "part", pe, 3);
    split[1] = split_entry(K, split_fin_body(K), "fin", fe, 2);
}

/* Generate kernel ki; *range receives its outermost loop's length. */
static hd_status gen_kernel_fn(hd_llvm_gen *G, int ki, LLVMValueRef *reg, LLVMValueRef *fn,
                               LLVMValueRef *split, int64_t *range, int *nlev) {
    gen_kernel K;
    memset(&K, 0, sizeof K);
    K.G = G;
    K.k = &G->plan->kernels[ki];
    K.index = ki;
    K.reg = reg;
    K.reduced = reduced_dims(G->plan->g, K.k);
    if (kernel_operands(&K)) return G->ctx->status;
    kernel_levels(&K);
    G->scalar_calls = 0;
    /* a first pass only to learn whether the body calls libm: loop hints
     * go to loops without calls */
    K.has_calls = 1;
    LLVMValueRef body = kernel_body(&K);
    K.has_calls = G->scalar_calls;
    if (!K.has_calls) { /* rebuild with hints */
        LLVMDeleteFunction(body);
        body = kernel_body(&K);
    }
    *fn = kernel_entry(&K, body);
    if (red_split_ok(&K)) {
        split_fns(&K, split);
        *range = K.lev[K.nkept]; /* the elements to split */
    } else {
        *range = K.lev[0];
    }
    *nlev = K.nlev;
    hd_ctx_free(G->ctx, K.ops, (size_t)K.cap * sizeof *K.ops);
    return HD_OK;
}

/* ---- main ---- */

static LLVMValueRef declare(hd_llvm_gen *G, const char *name, LLVMTypeRef ret, LLVMTypeRef *params,
                            int n) {
    LLVMValueRef f = LLVMGetNamedFunction(G->mod, name);
    if (!f) f = LLVMAddFunction(G->mod, name, LLVMFunctionType(ret, params, (unsigned)n, 0));
    return f;
}

static void main_kernel_call(hd_llvm_gen *G, LLVMValueRef mainfn, LLVMValueRef kfn, int64_t range,
                             int nlev, int64_t numel) {
    LLVMValueRef slots = LLVMGetParam(mainfn, 0), rt = LLVMGetParam(mainfn, 1);
    if (numel >= GEN_PAR_MIN && range >= 2) {
        LLVMTypeRef kty = LLVMPointerType(LLVMGlobalGetValueType(kfn), 0);
        LLVMTypeRef ps[5] = {G->t.ptr8, kty, G->t.pptr8, G->t.i64, G->t.i64};
        LLVMValueRef par = declare(G, "hd_llvm_rt_parallel", G->t.vd, ps, 5);
        LLVMValueRef args[5] = {rt, kfn, slots, c64(G, range), c64(G, nlev == 1 ? 16 : 1)};
        LLVMBuildCall2(B, LLVMGlobalGetValueType(par), par, args, 5, "");
        return;
    }
    LLVMValueRef args[3] = {slots, c64(G, 0), c64(G, range)};
    LLVMBuildCall2(B, LLVMGlobalGetValueType(kfn), kfn, args, 3, "");
}

/* hd_llvm_rt_reduce(rt, part, fin, slots, n): a split reduction. */
static void main_split_call(hd_llvm_gen *G, LLVMValueRef mainfn, LLVMValueRef *split, int64_t n) {
    LLVMTypeRef ps[5] = {G->t.ptr8, LLVMPointerType(LLVMGlobalGetValueType(split[0]), 0),
                         LLVMPointerType(LLVMGlobalGetValueType(split[1]), 0), G->t.pptr8,
                         G->t.i64};
    LLVMValueRef f = declare(G, "hd_llvm_rt_reduce", G->t.vd, ps, 5);
    LLVMValueRef args[5] = {LLVMGetParam(mainfn, 1), split[0], split[1], LLVMGetParam(mainfn, 0),
                            c64(G, n)};
    LLVMBuildCall2(B, LLVMGlobalGetValueType(f), f, args, 5, "");
}

/* Return status st from main at once when it is nonzero. */
static void main_check(hd_llvm_gen *G, LLVMValueRef mainfn, LLVMValueRef st) {
    LLVMBasicBlockRef fail = LLVMAppendBasicBlockInContext(G->t.c, mainfn, "fail");
    LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(G->t.c, mainfn, "next");
    LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntNE, st, LLVMConstInt(G->t.i32, 0, 0), ""), fail,
                    next);
    LLVMPositionBuilderAtEnd(B, fail);
    LLVMBuildRet(B, st);
    LLVMPositionBuilderAtEnd(B, next);
}

static void main_node_call(hd_llvm_gen *G, LLVMValueRef mainfn, int node) {
    LLVMTypeRef ps[2] = {G->t.ptr8, G->t.i32};
    LLVMValueRef f = declare(G, "hd_llvm_rt_node", G->t.i32, ps, 2);
    LLVMValueRef args[2] = {LLVMGetParam(mainfn, 1), LLVMConstInt(G->t.i32, (uint64_t)node, 0)};
    main_check(G, mainfn, LLVMBuildCall2(B, LLVMGlobalGetValueType(f), f, args, 2, ""));
}

/* hd_llvm_rt_gemm(rt, node, epilogue or null, slots, the epilogue's range) */
static void main_gemm_call(hd_llvm_gen *G, LLVMValueRef mainfn, int node, LLVMValueRef epi,
                           int64_t range) {
    LLVMTypeRef kty = LLVMPointerType(
        LLVMFunctionType(G->t.vd, (LLVMTypeRef[]){G->t.pptr8, G->t.i64, G->t.i64}, 3, 0), 0);
    LLVMTypeRef ps[5] = {G->t.ptr8, G->t.i32, kty, G->t.pptr8, G->t.i64};
    LLVMValueRef f = declare(G, "hd_llvm_rt_gemm", G->t.i32, ps, 5);
    LLVMValueRef args[5] = {LLVMGetParam(mainfn, 1), LLVMConstInt(G->t.i32, (uint64_t)node, 0),
                            epi ? epi : LLVMConstNull(kty), LLVMGetParam(mainfn, 0), c64(G, range)};
    main_check(G, mainfn, LLVMBuildCall2(B, LLVMGlobalGetValueType(f), f, args, 5, ""));
}

static void types_init(hd_llvm_gen *G) {
    hd_llvm_types *t = &G->t;
    t->i1 = LLVMInt1TypeInContext(t->c);
    t->i8 = LLVMInt8TypeInContext(t->c);
    t->i16 = LLVMInt16TypeInContext(t->c);
    t->i32 = LLVMInt32TypeInContext(t->c);
    t->i64 = LLVMInt64TypeInContext(t->c);
    t->f32 = LLVMFloatTypeInContext(t->c);
    t->f64 = LLVMDoubleTypeInContext(t->c);
    t->half = LLVMHalfTypeInContext(t->c);
    t->vd = LLVMVoidTypeInContext(t->c);
    t->ptr8 = LLVMPointerType(t->i8, 0);
    t->pptr8 = LLVMPointerType(t->ptr8, 0);
}

hd_status hd_llvm_gen_module(hd_llvm_gen *G) {
    const hd_plan *p = G->plan;
    const hd_ir_graph *g = p->g;
    types_init(G);
    size_t nk = (size_t)p->nkernels + 1, nv = (size_t)g->nvalues + 1;
    LLVMValueRef *kfn = hd_ctx_calloc(G->ctx, nk, sizeof *kfn);
    LLVMValueRef *split = hd_ctx_calloc(G->ctx, 2 * nk, sizeof *split);
    LLVMValueRef *reg = hd_ctx_calloc(G->ctx, nv, sizeof *reg);
    int64_t *range = hd_ctx_calloc(G->ctx, nk, sizeof *range);
    int *nlev = hd_ctx_calloc(G->ctx, nk, sizeof *nlev);
    hd_status st = kfn && split && reg && range && nlev ? HD_OK : G->ctx->status;
    for (int s = 0; s < p->nsteps && !st; s++) {
        int ki = p->steps[s].kernel >= 0 ? p->steps[s].kernel : p->steps[s].epilogue;
        if (ki >= 0)
            st = gen_kernel_fn(G, ki, reg, &kfn[ki], &split[2 * ki], &range[ki], &nlev[ki]);
    }
    if (!st) {
        LLVMTypeRef ps[2] = {G->t.pptr8, G->t.ptr8};
        LLVMValueRef mainfn =
            LLVMAddFunction(G->mod, "hd_main", LLVMFunctionType(G->t.i32, ps, 2, 0));
        add_attr(G, mainfn, LLVMAttributeFunctionIndex, "nounwind"); /* no .eh_frame */
        LLVMPositionBuilderAtEnd(B, LLVMAppendBasicBlockInContext(G->t.c, mainfn, "entry"));
        for (int s = 0; s < p->nsteps; s++) {
            const hd_plan_step *sp = &p->steps[s];
            int ki = sp->kernel, epi = sp->epilogue;
            if (ki >= 0 && split[2 * ki])
                main_split_call(G, mainfn, &split[2 * ki], range[ki]);
            else if (ki >= 0)
                main_kernel_call(G, mainfn, kfn[ki], range[ki], nlev[ki], p->kernels[ki].numel);
            else if (sp->gemm)
                main_gemm_call(G, mainfn, sp->node, epi >= 0 ? kfn[epi] : NULL,
                               epi >= 0 ? range[epi] : 0);
            else
                main_node_call(G, mainfn, sp->node);
        }
        LLVMBuildRet(B, LLVMConstInt(G->t.i32, 0, 0));
    }
    hd_ctx_free(G->ctx, kfn, kfn ? nk * sizeof *kfn : 0);
    hd_ctx_free(G->ctx, split, split ? 2 * nk * sizeof *split : 0);
    hd_ctx_free(G->ctx, reg, reg ? nv * sizeof *reg : 0);
    hd_ctx_free(G->ctx, range, range ? nk * sizeof *range : 0);
    hd_ctx_free(G->ctx, nlev, nlev ? nk * sizeof *nlev : 0);
    return st;
}

#endif /* HODU_HAVE_LLVM */
