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
 *       nonzero status from a runtime node is returned at once.
 *
 * This file makes the kernels' functions, their operands and loops and the
 * elementwise bodies; the bodies of reductions, of softmax, log_softmax and
 * layer_norm rows and of argmax and argmin, and the functions of a
 * reduction split across threads, come from hd_llvm_reduce.c
 * (hd_llvm_gen_int.h: what the two share). */
#include "hd_llvm_gen_int.h"

#if HODU_HAVE_LLVM

#include <llvm-c/DebugInfo.h>
#include <stdio.h>
#include <string.h>

#define B (G->b)

/* Kernels with at least this many elements (and two rows) may be split
 * across threads; smaller ones run inline. */
#define GEN_PAR_MIN (1 << 16)

/* ---- loops ---- */

LLVMValueRef hd_llvm_gen_c64(hd_llvm_gen *G, int64_t v) {
    return LLVMConstInt(G->t.i64, (uint64_t)v, 1);
}

LLVMValueRef hd_llvm_gen_loop_begin(hd_llvm_gen *G, gen_loop *L, LLVMValueRef lo, LLVMValueRef hi) {
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
void hd_llvm_gen_loop_end(hd_llvm_gen *G, gen_loop *L, int hint) {
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(B);
    LLVMValueRef next = LLVMBuildNSWAdd(B, L->iv, hd_llvm_gen_c64(G, 1), "");
    LLVMValueRef br = LLVMBuildBr(B, L->head);
    if (hint)
        LLVMSetMetadata(br, LLVMGetMDKindIDInContext(G->t.c, "llvm.loop", 9), loop_hint(G, hint));
    LLVMAddIncoming(L->iv, &next, &latch, 1);
    LLVMPositionBuilderAtEnd(B, L->exit);
}

/* ---- operands ---- */

int hd_llvm_gen_op_find(const gen_kernel *K, int v, int store) {
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
            if (in_kernel(K, u) || G->plan->vals[u].imm || hd_llvm_gen_op_find(K, u, 0) >= 0)
                continue;
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
LLVMValueRef hd_llvm_gen_value_at(gen_kernel *K, int v) {
    hd_llvm_gen *G = K->G;
    if (K->reg[v]) return K->reg[v];
    const hd_ir_graph *g = G->plan->g;
    const hd_ir_value *val = &g->values[v];
    if (G->plan->vals[v].imm) {
        const hd_tensor *t = g->consts[val->index].t;
        return hd_llvm_const(G, val->dtype, hd_tensor_get(t, 0), hd_tensor_get_i64(t, 0));
    }
    const gen_op *op = &K->ops[hd_llvm_gen_op_find(K, v, 0)];
    return K->reg[v] = hd_llvm_load_n(G, val->dtype, op->ptr, G->vw ? op->st[K->vlev] : 1);
}

/* Compute the kernel's elementwise nodes (all, or all but the last) at the
 * current position, storing those that are stored. */
void hd_llvm_gen_body_nodes(gen_kernel *K, int count) {
    hd_llvm_gen *G = K->G;
    const hd_ir_graph *g = G->plan->g;
    for (int i = 0; i < count; i++) {
        const hd_ir_node *n = &g->nodes[K->k->nodes[i]];
        LLVMValueRef args[HD_OP_MAX_IN];
        for (int j = 0; j < n->nin; j++) args[j] = hd_llvm_gen_value_at(K, n->in[j]);
        LLVMValueRef r = hd_llvm_emit_node(G, n, args);
        K->reg[n->out] = r;
        int s = hd_llvm_gen_op_find(K, n->out, 1);
        if (s >= 0 && K->k->kind == HD_PLAN_K_ELEMENTWISE)
            hd_llvm_store_n(G, g->values[n->out].dtype, K->ops[s].ptr,
                            G->vw ? K->ops[s].st[K->vlev] : 1, r);
    }
}

void hd_llvm_gen_regs_clear(gen_kernel *K) {
    const hd_ir_graph *g = K->G->plan->g;
    memset(K->reg, 0, (size_t)g->nvalues * sizeof *K->reg);
}

/* Step every operand's pointer to index iv of level l. */
void hd_llvm_gen_ptrs_step(gen_kernel *K, int l, LLVMValueRef iv, LLVMValueRef *saved) {
    hd_llvm_gen *G = K->G;
    for (int j = 0; j < K->nops; j++) {
        gen_op *op = &K->ops[j];
        saved[j] = op->ptr;
        if (op->st[l] == 0) continue;
        LLVMValueRef idx = LLVMBuildNSWMul(B, iv, hd_llvm_gen_c64(G, op->st[l]), "");
        op->ptr = LLVMBuildInBoundsGEP2(B, hd_llvm_mem_type(G, op->dt), op->ptr, &idx, 1, "");
    }
}

void hd_llvm_gen_ptrs_restore(gen_kernel *K, LLVMValueRef *saved) {
    for (int j = 0; j < K->nops; j++) K->ops[j].ptr = saved[j];
}

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
    hd_llvm_gen_ptrs_step(K, l, hd_llvm_gen_loop_begin(G, &L, lo, hi), saved);
    hd_llvm_gen_regs_clear(K);
    body(K, ud);
    hd_llvm_gen_ptrs_restore(K, saved);
    hd_llvm_gen_loop_end(G, &L, 0);
}

/* Where the streamed head ends: the first index in [lo, hi] whose element
 * of operand s is 64-byte aligned (hi if it never is). */
static LLVMValueRef ew_head_end(gen_kernel *K, int s, LLVMValueRef lo, LLVMValueRef hi) {
    hd_llvm_gen *G = K->G;
    LLVMValueRef a = LLVMBuildAdd(B, LLVMBuildPtrToInt(B, K->ops[s].ptr, G->t.i64, ""),
                                  LLVMBuildShl(B, lo, hd_llvm_gen_c64(G, 2), ""), "");
    LLVMValueRef mis = LLVMBuildAnd(B, a, hd_llvm_gen_c64(G, 63), "");
    LLVMValueRef peel =
        LLVMBuildLShr(B,
                      LLVMBuildAnd(B, LLVMBuildSub(B, hd_llvm_gen_c64(G, 64), mis, ""),
                                   hd_llvm_gen_c64(G, 63), ""),
                      hd_llvm_gen_c64(G, 2), "");
    LLVMValueRef end = LLVMBuildAdd(B, lo, peel, "");
    end = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, end, hi, ""), end, hi, "");
    LLVMValueRef odd = LLVMBuildICmp(B, LLVMIntNE, LLVMBuildAnd(B, a, hd_llvm_gen_c64(G, 3), ""),
                                     hd_llvm_gen_c64(G, 0), "");
    return LLVMBuildSelect(B, odd, hi, end, "");
}

/* Prefetch (for reading, into every cache level) what each contiguous
 * input of level l holds GEN_PF_BYTES ahead of the current element. A
 * prefetch past the end of memory does not fault. */
void hd_llvm_gen_ew_prefetch(gen_kernel *K, int l) {
    hd_llvm_gen *G = K->G;
    const char *name = "llvm.prefetch";
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMTypeRef pt = G->t.ptr8;
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(G->mod, id, &pt, 1);
    LLVMTypeRef ft = LLVMIntrinsicGetType(G->t.c, id, &pt, 1);
    for (int j = 0; j < K->nops; j++) {
        if (K->ops[j].store || K->ops[j].st[l] != 1) continue;
        LLVMValueRef ahead = hd_llvm_gen_c64(G, GEN_PF_BYTES);
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
    LLVMValueRef nb = LLVMBuildLShr(B, LLVMBuildSub(B, hi, vlo, ""), hd_llvm_gen_c64(G, shift), "");
    LLVMValueRef vend =
        LLVMBuildAdd(B, vlo, LLVMBuildShl(B, nb, hd_llvm_gen_c64(G, shift), ""), "");
    LLVMValueRef saved[K->nops + 1];
    gen_loop L;
    LLVMValueRef b = hd_llvm_gen_loop_begin(G, &L, hd_llvm_gen_c64(G, 0), nb);
    hd_llvm_gen_ptrs_step(
        K, l, LLVMBuildAdd(B, vlo, LLVMBuildShl(B, b, hd_llvm_gen_c64(G, shift), ""), ""), saved);
    if (s >= 0) hd_llvm_gen_ew_prefetch(K, l);
    hd_llvm_gen_regs_clear(K);
    K->vlev = l;
    G->vw = G->ew_lanes;
    G->nt_store = s >= 0;
    body(K, ud);
    G->vw = 0;
    G->nt_store = 0;
    hd_llvm_gen_ptrs_restore(K, saved);
    hd_llvm_gen_loop_end(G, &L, 0);
    ew_scalar_loop(K, l, vend, hi, body, ud);
    if (s >= 0) ew_sfence(G);
}

/* Loops over levels [l, l1) around body(K, ud). Level 0 runs [lo, hi). */
void hd_llvm_gen_loops(gen_kernel *K, int l, int l1, LLVMValueRef lo, LLVMValueRef hi,
                       gen_body_fn body, void *ud) {
    hd_llvm_gen *G = K->G;
    if (l == l1) {
        hd_llvm_gen_regs_clear(K);
        body(K, ud);
        return;
    }
    if (l + 1 == l1 && ew_vector_ok(K, l)) {
        ew_vector_level(K, l, l == 0 ? lo : hd_llvm_gen_c64(G, 0),
                        l == 0 ? hi : hd_llvm_gen_c64(G, K->lev[l]), body, ud);
        return;
    }
    LLVMValueRef saved[K->nops + 1];
    gen_loop L;
    LLVMValueRef iv = hd_llvm_gen_loop_begin(G, &L, l == 0 ? lo : hd_llvm_gen_c64(G, 0),
                                             l == 0 ? hi : hd_llvm_gen_c64(G, K->lev[l]));
    hd_llvm_gen_ptrs_step(K, l, iv, saved);
    hd_llvm_gen_loops(K, l + 1, l1, lo, hi, body, ud);
    hd_llvm_gen_ptrs_restore(K, saved);
    hd_llvm_gen_loop_end(G, &L,
                         l + 1 == l1 && !K->has_calls && K->k->kind == HD_PLAN_K_ELEMENTWISE);
}

static void ew_body(gen_kernel *K, void *ud) {
    HD_UNUSED(ud);
    hd_llvm_gen_body_nodes(K, K->k->nnodes);
}

/* ---- accumulating passes in vector lanes (gen_lanes) ---- */

#define GEN_PF_ROW 4096 /* rows at least this long prefetch (hd_llvm_gen_ew_prefetch) */

void hd_llvm_gen_lanes_use(gen_lanes *L, lanes_mode m) {
    *L->cur1 = m == LANES_ROW ? L->vacc1 : m == LANES_ROWS ? L->racc1 : L->acc1;
    *L->cur2 = m == LANES_ROW ? L->vacc2 : m == LANES_ROWS ? L->racc2 : L->acc2;
}

/* The accumulator's type in the code being generated. */
LLVMTypeRef hd_llvm_gen_acc_type(hd_llvm_gen *G, LLVMTypeRef scalar) {
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
        LLVMValueRef b =
            hd_llvm_gen_loop_begin(G, &lp, hd_llvm_gen_c64(G, 0), hd_llvm_gen_c64(G, nb));
        hd_llvm_gen_ptrs_step(K, l, LLVMBuildNSWMul(B, b, hd_llvm_gen_c64(G, GEN_LANES), ""),
                              saved);
        if (n >= GEN_PF_ROW) hd_llvm_gen_ew_prefetch(K, l);
        hd_llvm_gen_regs_clear(K);
        G->vw = GEN_LANES;
        K->vlev = l;
        hd_llvm_gen_lanes_use(L, LANES_ROW);
        L->step(K, ud);
        G->vw = 0;
        hd_llvm_gen_ptrs_restore(K, saved);
        hd_llvm_gen_loop_end(G, &lp, 0);
    }
    LLVMValueRef i =
        hd_llvm_gen_loop_begin(G, &lp, hd_llvm_gen_c64(G, nb * GEN_LANES), hd_llvm_gen_c64(G, n));
    hd_llvm_gen_ptrs_step(K, l, i, saved);
    hd_llvm_gen_regs_clear(K);
    hd_llvm_gen_lanes_use(L, LANES_SCALAR);
    L->step(K, ud);
    hd_llvm_gen_ptrs_restore(K, saved);
    hd_llvm_gen_loop_end(G, &lp, 0);
}

/* One pass over a row's reduced dims. Scalar rows: the vector lanes of
 * accumulator `which` (1 or 2), where used, then the tail's scalar, merge
 * into the scalar accumulator. */
void hd_llvm_gen_lanes_pass(gen_kernel *K, gen_lanes *L, int which, gen_merge_fn merge, void *ud) {
    hd_llvm_gen *G = K->G;
    if (G->vw) { /* a vector of rows */
        hd_llvm_gen_lanes_use(L, LANES_ROWS);
        hd_llvm_gen_loops(K, K->nkept, K->nlev, NULL, NULL, L->step, ud);
        return;
    }
    hd_llvm_gen_loops(K, K->nkept, K->nlev - 1, NULL, NULL, lanes_inner, ud);
    hd_llvm_gen_lanes_use(L, LANES_SCALAR);
    if (K->lev[K->nlev - 1] < 2 * GEN_LANES) return;
    hd_llvm_gen_lanes_merge(G, L, which, merge, ud);
}

/* The vector lanes of accumulator `which` merged in order, then with the
 * scalar accumulator (the tail's), into the scalar accumulator. */
void hd_llvm_gen_lanes_merge(hd_llvm_gen *G, gen_lanes *L, int which, gen_merge_fn merge,
                             void *ud) {
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
void hd_llvm_gen_lanes_init(gen_lanes *L, hd_llvm_gen *G, LLVMValueRef init1, LLVMValueRef init2) {
    if (G->vw) {
        LLVMBuildStore(B, hd_llvm_splat(G, init1), L->racc1);
        LLVMBuildStore(B, hd_llvm_splat(G, init2), L->racc2);
        hd_llvm_gen_lanes_use(L, LANES_ROWS);
        return;
    }
    G->vw = GEN_LANES;
    LLVMBuildStore(B, hd_llvm_splat(G, init1), L->vacc1);
    LLVMBuildStore(B, hd_llvm_splat(G, init2), L->vacc2);
    G->vw = 0;
    LLVMBuildStore(B, init1, L->acc1);
    LLVMBuildStore(B, init2, L->acc2);
    hd_llvm_gen_lanes_use(L, LANES_SCALAR);
}

LLVMValueRef hd_llvm_gen_merge_fadd(hd_llvm_gen *G, LLVMValueRef a, LLVMValueRef b, void *ud) {
    HD_UNUSED(ud);
    return LLVMBuildFAdd(B, a, b, "");
}

/* ---- kernel functions ---- */

LLVMValueRef hd_llvm_gen_entry_alloca(hd_llvm_gen *G, LLVMValueRef fn, LLVMTypeRef ty) {
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

/* The accumulators' allocas; rows > 0: also a vector of that many rows. */
void hd_llvm_gen_lanes_alloca(hd_llvm_gen *G, LLVMValueRef fn, gen_lanes *L, gen_body_fn step,
                              LLVMValueRef *cur1, LLVMValueRef *cur2, int rows) {
    L->step = step;
    L->cur1 = cur1;
    L->cur2 = cur2;
    L->acc1 = hd_llvm_gen_entry_alloca(G, fn, L->ty1);
    L->acc2 = hd_llvm_gen_entry_alloca(G, fn, L->ty2);
    L->vacc1 = hd_llvm_gen_entry_alloca(G, fn, LLVMVectorType(L->ty1, GEN_LANES));
    L->vacc2 = hd_llvm_gen_entry_alloca(G, fn, LLVMVectorType(L->ty2, GEN_LANES));
    if (rows) {
        L->racc1 = hd_llvm_gen_entry_alloca(G, fn, LLVMVectorType(L->ty1, (unsigned)rows));
        L->racc2 = hd_llvm_gen_entry_alloca(G, fn, LLVMVectorType(L->ty2, (unsigned)rows));
    }
}

void hd_llvm_gen_add_attr(hd_llvm_gen *G, LLVMValueRef fn, unsigned idx, const char *name) {
    unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
    LLVMAddAttributeAtIndex(fn, idx, LLVMCreateEnumAttribute(G->t.c, kind, 0));
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
LLVMValueRef hd_llvm_gen_body_fn(gen_kernel *K, const char *suffix, LLVMTypeRef *extra,
                                 int nextra) {
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
    hd_llvm_gen_add_attr(G, fn, LLVMAttributeFunctionIndex, "alwaysinline");
    hd_llvm_gen_add_attr(G, fn, LLVMAttributeFunctionIndex, "nounwind");
    for (int j = 0; j < n; j++) hd_llvm_gen_add_attr(G, fn, (unsigned)j + 1, "noalias");
    LLVMPositionBuilderAtEnd(B, LLVMAppendBasicBlockInContext(G->t.c, fn, "entry"));
    for (int j = 0; j < n; j++) K->ops[j].ptr = op_param(K, fn, j);
    return fn;
}

/* hd_k<i>_body(p0..pn, begin, end): the loop nest. */
static LLVMValueRef kernel_body(gen_kernel *K) {
    hd_llvm_gen *G = K->G;
    int n = K->nops;
    LLVMTypeRef extra[2] = {G->t.i64, G->t.i64};
    LLVMValueRef fn = hd_llvm_gen_body_fn(K, "body", extra, 2);
    LLVMValueRef lo = LLVMGetParam(fn, (unsigned)n), hi = LLVMGetParam(fn, (unsigned)n + 1);
    if (K->k->kind == HD_PLAN_K_ELEMENTWISE)
        hd_llvm_gen_loops(K, 0, K->nlev, lo, hi, ew_body, NULL);
    else if (K->k->kind == HD_PLAN_K_REDUCE)
        hd_llvm_red_reduce_body(K, fn, lo, hi);
    else
        hd_llvm_red_rows_body(K, fn, lo, hi);
    LLVMBuildRetVoid(B);
    return fn;
}

/* The operands' pointers from the slot table into args[0..nops). */
void hd_llvm_gen_entry_ptrs(gen_kernel *K, LLVMValueRef slots, LLVMValueRef *args) {
    hd_llvm_gen *G = K->G;
    const hd_plan *p = G->plan;
    for (int j = 0; j < K->nops; j++) {
        const hd_plan_val *pv = &p->vals[K->ops[j].value];
        LLVMValueRef idx = hd_llvm_gen_c64(G, pv->slot);
        LLVMValueRef sp = LLVMBuildInBoundsGEP2(B, G->t.ptr8, slots, &idx, 1, "");
        LLVMValueRef base = LLVMBuildLoad2(B, G->t.ptr8, sp, "");
        LLVMValueRef off = hd_llvm_gen_c64(G, pv->byte_off);
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
    hd_llvm_gen_add_attr(G, fn, LLVMAttributeFunctionIndex, "nounwind");
    LLVMPositionBuilderAtEnd(B, LLVMAppendBasicBlockInContext(G->t.c, fn, "entry"));
    int n = K->nops;
    LLVMValueRef args[n + 2];
    hd_llvm_gen_entry_ptrs(K, LLVMGetParam(fn, 0), args);
    args[n] = LLVMGetParam(fn, 1);
    args[n + 1] = LLVMGetParam(fn, 2);
    LLVMBuildCall2(B, LLVMGlobalGetValueType(body), body, args, (unsigned)n + 2, "");
    LLVMBuildRetVoid(B);
    return fn;
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
    if (hd_llvm_red_split_ok(&K)) {
        hd_llvm_red_split_fns(&K, split);
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
        LLVMValueRef args[5] = {rt, kfn, slots, hd_llvm_gen_c64(G, range),
                                hd_llvm_gen_c64(G, nlev == 1 ? 16 : 1)};
        LLVMBuildCall2(B, LLVMGlobalGetValueType(par), par, args, 5, "");
        return;
    }
    LLVMValueRef args[3] = {slots, hd_llvm_gen_c64(G, 0), hd_llvm_gen_c64(G, range)};
    LLVMBuildCall2(B, LLVMGlobalGetValueType(kfn), kfn, args, 3, "");
}

/* hd_llvm_rt_reduce(rt, part, fin, slots, n): a split reduction. */
static void main_split_call(hd_llvm_gen *G, LLVMValueRef mainfn, LLVMValueRef *split, int64_t n) {
    LLVMTypeRef ps[5] = {G->t.ptr8, LLVMPointerType(LLVMGlobalGetValueType(split[0]), 0),
                         LLVMPointerType(LLVMGlobalGetValueType(split[1]), 0), G->t.pptr8,
                         G->t.i64};
    LLVMValueRef f = declare(G, "hd_llvm_rt_reduce", G->t.vd, ps, 5);
    LLVMValueRef args[5] = {LLVMGetParam(mainfn, 1), split[0], split[1], LLVMGetParam(mainfn, 0),
                            hd_llvm_gen_c64(G, n)};
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
                            epi ? epi : LLVMConstNull(kty), LLVMGetParam(mainfn, 0),
                            hd_llvm_gen_c64(G, range)};
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
        hd_llvm_gen_add_attr(G, mainfn, LLVMAttributeFunctionIndex, "nounwind"); /* no .eh_frame */
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
