/* Code generation of the kernels that reduce over some of their dims, the
 * bodies hd_llvm_gen.c's kernel functions call (hd_llvm_gen_int.h):
 *
 *   reductions (sum, mean, prod, max, min, var, std, logsumexp, mse) one row
 *       at a time, accumulated in vector lanes (gen_lanes), or, where the
 *       reduced axis is strided and the kept one contiguous, in tiles of
 *       columns walking the rows in order;
 *   softmax, log_softmax, layer_norm and their backward ops: passes over
 *       each row (its max or mean, then sums), then the elementwise pass
 *       that writes it, or vectors of rows down a leading axis;
 *   argmax, argmin: the first index of the extreme, one element at a time;
 *   a reduction to one element over a long loop, split across threads:
 *       hd_k<i>_part (a range of the elements into one accumulator) and
 *       hd_k<i>_fin (the parts merged in order, the result stored), which
 *       hd_main hands to hd_llvm_rt_reduce. */
#include "hd_llvm_gen_int.h"

#if HODU_HAVE_LLVM

#include <math.h>
#include <stdio.h>
#include <string.h>

#define B (G->b)

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
    hd_llvm_gen_body_nodes(K, K->k->nnodes - 1);
    LLVMValueRef v = hd_llvm_gen_value_at(K, R->n->in[0]);
    LLVMValueRef a = LLVMBuildLoad2(B, hd_llvm_gen_acc_type(G, R->pass == 1 ? R->L.ty1 : R->L.ty2),
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
        LLVMValueRef d =
            LLVMBuildFSub(B, to_f64(G, v), to_f64(G, hd_llvm_gen_value_at(K, R->n->in[1])), "");
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
    hd_llvm_gen_lanes_init(&R->L, G, init1, init2);
    int64_t count = red_count(K);
    R->pass = 1;
    hd_llvm_gen_lanes_pass(K, &R->L, 1, red_merge1, R);
    if (red_two_pass(R)) {
        R->param = red_param(K, R, count);
        R->pass = 2;
        hd_llvm_gen_lanes_pass(K, &R->L, 2, hd_llvm_gen_merge_fadd, R);
    }
    int s = hd_llvm_gen_op_find(K, R->n->out, 1);
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
    hd_llvm_gen_ptrs_step(K, K->nkept - 1, LLVMBuildNSWAdd(B, R->c0, t, ""), saved);
    hd_llvm_gen_regs_clear(K);
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
    LLVMValueRef t = hd_llvm_gen_loop_begin(G, &L, hd_llvm_gen_c64(G, 0), R->w);
    for (int k = 0; k < nrows; k++) {
        hd_llvm_gen_ptrs_step(K, l, LLVMBuildNSWAdd(B, r, hd_llvm_gen_c64(G, k), ""), rsaved);
        red_vcolumn(K, R, t, saved);
        if (R->pass == 2)
            R->param = LLVMBuildLoad2(B, G->t.f64,
                                      LLVMBuildInBoundsGEP2(B, G->t.f64, R->parr, &t, 1, ""), "");
        red_step(K, R);
        hd_llvm_gen_ptrs_restore(K, saved);
        hd_llvm_gen_ptrs_restore(K, rsaved);
    }
    /* f64 accumulators would make the vectoriser pick 4 lanes for f32 data */
    hd_llvm_gen_loop_end(G, &L, K->has_calls ? 0 : R->dt == HD_F64 ? 4 : 8);
}

/* The innermost reduced loop: four rows at a time, then the rest. */
static void red_vinner(gen_kernel *K, void *ud) {
    hd_llvm_gen *G = K->G;
    red_gen *R = ud;
    int64_t n = K->lev[K->nlev - 1], n4 = n / 4;
    gen_loop L;
    if (n4) {
        LLVMValueRef b =
            hd_llvm_gen_loop_begin(G, &L, hd_llvm_gen_c64(G, 0), hd_llvm_gen_c64(G, n4));
        red_vrows(K, R, LLVMBuildNSWMul(B, b, hd_llvm_gen_c64(G, 4), ""), 4);
        hd_llvm_gen_loop_end(G, &L, 0);
    }
    if (n4 * 4 < n) {
        LLVMValueRef r =
            hd_llvm_gen_loop_begin(G, &L, hd_llvm_gen_c64(G, n4 * 4), hd_llvm_gen_c64(G, n));
        red_vrows(K, R, r, 1);
        hd_llvm_gen_loop_end(G, &L, 0);
    }
}

typedef enum { VTILE_INIT, VTILE_PARAM, VTILE_STORE } vtile_what;

/* One loop over the tile's columns: set the accumulators, compute pass 2's
 * parameters, or store the results. */
static void red_vtile_loop(gen_kernel *K, red_gen *R, vtile_what what, int64_t count) {
    hd_llvm_gen *G = K->G;
    LLVMValueRef saved[K->nops + 1], init1, init2;
    gen_loop L;
    LLVMValueRef t = hd_llvm_gen_loop_begin(G, &L, hd_llvm_gen_c64(G, 0), R->w);
    red_vcolumn(K, R, t, saved);
    if (what == VTILE_INIT) {
        red_init(K, R, &init1, &init2);
        LLVMBuildStore(B, init1, R->acc1);
        LLVMBuildStore(B, init2, R->acc2);
    } else if (what == VTILE_PARAM) {
        LLVMBuildStore(B, red_param(K, R, count),
                       LLVMBuildInBoundsGEP2(B, G->t.f64, R->parr, &t, 1, ""));
    } else {
        int s = hd_llvm_gen_op_find(K, R->n->out, 1);
        hd_llvm_store(G, R->od, K->ops[s].ptr, red_result(K, R, count));
    }
    hd_llvm_gen_ptrs_restore(K, saved);
    hd_llvm_gen_loop_end(G, &L, 0);
}

/* The innermost kept loop in tiles; each tile walks the reduced dims. */
static void red_vtiles(gen_kernel *K, void *ud) {
    hd_llvm_gen *G = K->G;
    red_gen *R = ud;
    int l = K->nkept - 1;
    LLVMValueRef lo = l == 0 ? R->lo : hd_llvm_gen_c64(G, 0),
                 hi = l == 0 ? R->hi : hd_llvm_gen_c64(G, K->lev[l]);
    LLVMValueRef n = LLVMBuildSub(B, hi, lo, "");
    LLVMValueRef ntiles = LLVMBuildSDiv(B, LLVMBuildAdd(B, n, hd_llvm_gen_c64(G, GEN_TILE - 1), ""),
                                        hd_llvm_gen_c64(G, GEN_TILE), "");
    int64_t count = red_count(K);
    gen_loop L;
    LLVMValueRef k = hd_llvm_gen_loop_begin(G, &L, hd_llvm_gen_c64(G, 0), ntiles);
    R->c0 = LLVMBuildAdd(B, lo, LLVMBuildNSWMul(B, k, hd_llvm_gen_c64(G, GEN_TILE), ""), "");
    LLVMValueRef left = LLVMBuildSub(B, hi, R->c0, "");
    R->w = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, left, hd_llvm_gen_c64(G, GEN_TILE), ""),
                           left, hd_llvm_gen_c64(G, GEN_TILE), "");
    red_vtile_loop(K, R, VTILE_INIT, count);
    R->pass = 1;
    hd_llvm_gen_loops(K, K->nkept, K->nlev - 1, NULL, NULL, red_vinner, R);
    if (red_two_pass(R)) {
        red_vtile_loop(K, R, VTILE_PARAM, count);
        R->pass = 2;
        hd_llvm_gen_loops(K, K->nkept, K->nlev - 1, NULL, NULL, red_vinner, R);
    }
    red_vtile_loop(K, R, VTILE_STORE, count);
    hd_llvm_gen_loop_end(G, &L, 0);
}

/* ---- softmax, log_softmax, layer_norm rows ---- */

#define GEN_VROWS 32 /* rows done at once by a vector of rows */

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
    LLVMValueRef y = to_f64(G, hd_llvm_gen_value_at(K, R->n->in[0])),
                 g = to_f64(G, hd_llvm_gen_value_at(K, R->n->in[1]));
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
    int out = hd_llvm_gen_op_find(K, R->n->out, 1);
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
    LLVMValueRef x = to_f64(G, hd_llvm_gen_value_at(K, n->in[0])),
                 g = to_f64(G, hd_llvm_gen_value_at(K, n->in[1]));
    LLVMValueRef w = n->nin == 3 ? to_f64(G, hd_llvm_gen_value_at(K, n->in[2])) : NULL;
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
    int out = hd_llvm_gen_op_find(K, n->out, 1);
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
    LLVMValueRef x = hd_llvm_gen_value_at(K, R->n->in[0]);
    LLVMTypeRef ty = LLVMTypeOf(x), f64 = hd_llvm_vec(G, G->t.f64);
    int ln = R->n->op == HD_OP_LAYER_NORM, out = hd_llvm_gen_op_find(K, R->n->out, 1);
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
            r = LLVMBuildFAdd(B, LLVMBuildFMul(B, r, hd_llvm_gen_value_at(K, R->n->in[1]), ""),
                              hd_llvm_gen_value_at(K, R->n->in[2]), "");
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
    hd_llvm_gen_lanes_init(&R->L, G, zero, zero);
    R->pass = 1;
    hd_llvm_gen_lanes_pass(K, &R->L, 1, hd_llvm_gen_merge_fadd, R);
    R->p1 = LLVMBuildFDiv(B, LLVMBuildLoad2(B, G->t.f64, R->acc1, ""), d, "");
    R->pass = 2;
    hd_llvm_gen_lanes_pass(K, &R->L, 2, hd_llvm_gen_merge_fadd, R);
    LLVMValueRef v2 = LLVMBuildFDiv(B, LLVMBuildLoad2(B, G->t.f64, R->acc2, ""), d, "");
    LLVMValueRef v = LLVMBuildFAdd(B, v2, LLVMConstReal(G->t.f64, eps), "");
    R->p2 =
        LLVMBuildFDiv(B, LLVMConstReal(G->t.f64, 1.0), hd_llvm_intrinsic(G, "llvm.sqrt", v), "");
    hd_llvm_gen_lanes_init(&R->L, G, zero, zero);
    R->pass = 4;
    hd_llvm_gen_lanes_pass(K, &R->L, 1, hd_llvm_gen_merge_fadd, R);
    R->pass = 5;
    hd_llvm_gen_lanes_pass(K, &R->L, 2, hd_llvm_gen_merge_fadd, R);
    LLVMValueRef a = LLVMBuildLoad2(B, G->t.f64, R->acc1, "");
    LLVMValueRef b = LLVMBuildLoad2(B, G->t.f64, R->acc2, "");
    LLVMValueRef rs3 = LLVMBuildFMul(B, LLVMBuildFMul(B, R->p2, R->p2, ""), R->p2, "");
    R->c0 = LLVMBuildFDiv(B, LLVMBuildFMul(B, R->p2, a, ""), d, "");
    R->c1 = LLVMBuildFDiv(B, LLVMBuildFMul(B, rs3, b, ""), d, "");
    R->pass = 3;
    hd_llvm_gen_loops(K, K->nkept, K->nlev, NULL, NULL, row_step, R);
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
    hd_llvm_gen_lanes_init(&R->L, G,
                           ln || row_bwd(R) ? LLVMConstReal(R->L.ty1, 0)
                                            : LLVMConstReal(R->L.ty1, -INFINITY),
                           LLVMConstReal(G->t.f64, 0));
    if (!row_bwd(R)) {
        R->pass = 1;
        hd_llvm_gen_lanes_pass(K, &R->L, 1, row_merge1, R);
        row_params(K, R, count, 1);
    }
    R->pass = 2;
    hd_llvm_gen_lanes_pass(K, &R->L, 2, hd_llvm_gen_merge_fadd, R);
    row_params(K, R, count, 2);
    R->pass = 3; /* elementwise: the loop vectorizer takes it */
    hd_llvm_gen_loops(K, K->nkept, K->nlev, NULL, NULL, row_step, R);
}

/* softmax over a leading axis (the innermost kept loop contiguous, the
 * axis strided): rows are done GEN_VROWS at a time as vectors, one lane
 * per row, so every pass loads whole cache lines down the axis; the rows
 * left over one by one. */
static void row_vcols(gen_kernel *K, void *ud) {
    hd_llvm_gen *G = K->G;
    row_gen *R = ud;
    int l = K->nkept - 1;
    LLVMValueRef lo = l == 0 ? R->lo : hd_llvm_gen_c64(G, 0),
                 hi = l == 0 ? R->hi : hd_llvm_gen_c64(G, K->lev[l]);
    LLVMValueRef nv =
        LLVMBuildSDiv(B, LLVMBuildSub(B, hi, lo, ""), hd_llvm_gen_c64(G, GEN_VROWS), "");
    LLVMValueRef saved[K->nops + 1];
    gen_loop L;
    LLVMValueRef j = hd_llvm_gen_loop_begin(G, &L, hd_llvm_gen_c64(G, 0), nv);
    hd_llvm_gen_ptrs_step(
        K, l, LLVMBuildAdd(B, lo, LLVMBuildNSWMul(B, j, hd_llvm_gen_c64(G, GEN_VROWS), ""), ""),
        saved);
    G->vw = GEN_VROWS;
    K->vlev = l;
    row_row(K, R);
    G->vw = 0;
    hd_llvm_gen_ptrs_restore(K, saved);
    hd_llvm_gen_loop_end(G, &L, 0);
    LLVMValueRef c = hd_llvm_gen_loop_begin(
        G, &L, LLVMBuildAdd(B, lo, LLVMBuildNSWMul(B, nv, hd_llvm_gen_c64(G, GEN_VROWS), ""), ""),
        hi);
    hd_llvm_gen_ptrs_step(K, l, c, saved);
    row_row(K, R);
    hd_llvm_gen_ptrs_restore(K, saved);
    hd_llvm_gen_loop_end(G, &L, 0);
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
    hd_llvm_gen_body_nodes(K, K->k->nnodes - 1);
    LLVMValueRef v = hd_llvm_gen_value_at(K, A->n->in[0]);
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
    LLVMValueRef none = LLVMBuildICmp(B, LLVMIntSLT, idx, hd_llvm_gen_c64(G, 0), "");
    LLVMValueRef cand = LLVMBuildOr(B, isnan, LLVMBuildOr(B, none, better, ""), "");
    LLVMValueRef take = LLVMBuildAnd(B, cand, LLVMBuildNot(B, nan, ""), "");
    LLVMBuildStore(B, LLVMBuildSelect(B, take, v, best, ""), A->best);
    LLVMBuildStore(B, LLVMBuildSelect(B, take, k, idx, ""), A->idx);
    LLVMBuildStore(B, LLVMBuildOr(B, nan, isnan, ""), A->nan);
    LLVMBuildStore(B, LLVMBuildAdd(B, k, hd_llvm_gen_c64(G, 1), ""), A->k);
}

static void arg_row(gen_kernel *K, void *ud) {
    hd_llvm_gen *G = K->G;
    arg_gen *A = ud;
    LLVMBuildStore(B, LLVMConstNull(hd_llvm_reg_type(G, A->dt)), A->best);
    LLVMBuildStore(B, hd_llvm_gen_c64(G, -1), A->idx);
    LLVMBuildStore(B, LLVMConstInt(G->t.i1, 0, 0), A->nan);
    LLVMBuildStore(B, hd_llvm_gen_c64(G, 0), A->k);
    hd_llvm_gen_loops(K, K->nkept, K->nlev, NULL, NULL, arg_step, A);
    LLVMValueRef idx = LLVMBuildLoad2(B, G->t.i64, A->idx, "");
    idx = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, idx, hd_llvm_gen_c64(G, 0), ""),
                          hd_llvm_gen_c64(G, 0), idx, "");
    hd_llvm_store(G, HD_I64, K->ops[hd_llvm_gen_op_find(K, A->n->out, 1)].ptr, idx);
}

static void arg_body(gen_kernel *K, LLVMValueRef fn, LLVMValueRef lo, LLVMValueRef hi,
                     const hd_ir_node *n) {
    hd_llvm_gen *G = K->G;
    arg_gen A;
    A.n = n;
    A.dt = G->plan->g->values[n->in[0]].dtype;
    A.best = hd_llvm_gen_entry_alloca(G, fn, hd_llvm_reg_type(G, A.dt));
    A.idx = hd_llvm_gen_entry_alloca(G, fn, G->t.i64);
    A.nan = hd_llvm_gen_entry_alloca(G, fn, G->t.i1);
    A.k = hd_llvm_gen_entry_alloca(G, fn, G->t.i64);
    hd_llvm_gen_loops(K, 0, K->nkept, lo, hi, arg_row, &A);
}

/* ---- the kernels' bodies ---- */

/* GEN_TILE elements of ty on the stack. */
static LLVMValueRef entry_array(hd_llvm_gen *G, LLVMValueRef fn, LLVMTypeRef ty) {
    LLVMValueRef a = hd_llvm_gen_entry_alloca(G, fn, LLVMArrayType(ty, GEN_TILE));
    return LLVMBuildBitCast(B, a, LLVMPointerType(ty, 0), "");
}

/* The generator's state for the kernel's reduction (its last node). */
static void red_setup(gen_kernel *K, red_gen *R) {
    const hd_ir_graph *g = K->G->plan->g;
    const hd_ir_node *last = &g->nodes[K->k->nodes[K->k->nnodes - 1]];
    memset(R, 0, sizeof *R);
    R->n = last;
    R->dt = g->values[last->in[0]].dtype;
    R->od = g->values[last->out].dtype;
}

/* A reduction's rows [lo, hi) of its outermost loop: in row order, or in
 * tiles of columns (vertical); argmax and argmin one element at a time. */
void hd_llvm_red_reduce_body(gen_kernel *K, LLVMValueRef fn, LLVMValueRef lo, LLVMValueRef hi) {
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
        hd_llvm_gen_loops(K, 0, K->nkept - 1, lo, hi, red_vtiles, &R);
    } else {
        hd_llvm_gen_lanes_alloca(G, fn, &R.L, red_step, &R.acc1, &R.acc2, 0);
        hd_llvm_gen_loops(K, 0, K->nkept, lo, hi, red_row, &R);
    }
}

/* softmax, log_softmax or layer_norm rows [lo, hi) of the outermost loop:
 * one at a time, or GEN_VROWS at a time over a leading axis. */
void hd_llvm_red_rows_body(gen_kernel *K, LLVMValueRef fn, LLVMValueRef lo, LLVMValueRef hi) {
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
    hd_llvm_gen_lanes_alloca(G, fn, &R.L, row_step, &R.acc1, &R.acc2, vert ? GEN_VROWS : 0);
    if (vert)
        hd_llvm_gen_loops(K, 0, K->nkept - 1, lo, hi, row_vcols, &R);
    else
        hd_llvm_gen_loops(K, 0, K->nkept, lo, hi, row_row, &R);
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

int hd_llvm_red_split_ok(const gen_kernel *K) {
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
    hd_llvm_gen_ptrs_step(K, K->nlev - 1, i, saved);
    if (vw) hd_llvm_gen_ew_prefetch(K, K->nlev - 1);
    hd_llvm_gen_regs_clear(K);
    G->vw = vw;
    K->vlev = K->nlev - 1;
    hd_llvm_gen_lanes_use(&R->L, vw ? LANES_ROW : LANES_SCALAR);
    red_step(K, R);
    G->vw = 0;
    hd_llvm_gen_ptrs_restore(K, saved);
}

/* hd_k<i>_pbody(p0..pn, lo, hi, acc): pass 1 over elements [lo, hi). */
static LLVMValueRef split_part_body(gen_kernel *K) {
    hd_llvm_gen *G = K->G;
    LLVMTypeRef extra[3] = {G->t.i64, G->t.i64, G->t.ptr8};
    LLVMValueRef fn = hd_llvm_gen_body_fn(K, "pbody", extra, 3);
    int n = K->nops;
    LLVMValueRef lo = LLVMGetParam(fn, (unsigned)n), hi = LLVMGetParam(fn, (unsigned)n + 1);
    red_gen R;
    LLVMValueRef i1, i2;
    red_setup(K, &R);
    red_init(K, &R, &i1, &i2);
    hd_llvm_gen_lanes_alloca(G, fn, &R.L, red_step, &R.acc1, &R.acc2, 0);
    hd_llvm_gen_lanes_init(&R.L, G, i1, i2);
    R.pass = 1;
    LLVMValueRef nb =
        LLVMBuildSDiv(B, LLVMBuildSub(B, hi, lo, ""), hd_llvm_gen_c64(G, GEN_LANES), "");
    LLVMValueRef vend =
        LLVMBuildNSWAdd(B, lo, LLVMBuildNSWMul(B, nb, hd_llvm_gen_c64(G, GEN_LANES), ""), "");
    gen_loop lp;
    LLVMValueRef b = hd_llvm_gen_loop_begin(G, &lp, hd_llvm_gen_c64(G, 0), nb);
    split_step(K, &R,
               LLVMBuildNSWAdd(B, lo, LLVMBuildNSWMul(B, b, hd_llvm_gen_c64(G, GEN_LANES), ""), ""),
               GEN_LANES);
    hd_llvm_gen_loop_end(G, &lp, 0);
    split_step(K, &R, hd_llvm_gen_loop_begin(G, &lp, vend, hi), 0);
    hd_llvm_gen_loop_end(G, &lp, 0);
    hd_llvm_gen_lanes_use(&R.L, LANES_SCALAR);
    hd_llvm_gen_lanes_merge(G, &R.L, 1, red_merge1, &R);
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
    LLVMValueRef fn = hd_llvm_gen_body_fn(K, "fbody", extra, 2);
    int n = K->nops;
    LLVMValueRef accs = LLVMGetParam(fn, (unsigned)n);
    red_gen R;
    LLVMValueRef i1, i2;
    red_setup(K, &R);
    red_init(K, &R, &i1, &i2);
    R.acc1 = hd_llvm_gen_entry_alloca(G, fn, R.L.ty1);
    R.acc2 = hd_llvm_gen_entry_alloca(G, fn, R.L.ty2);
    LLVMBuildStore(B, i2, R.acc2);
    LLVMTypeRef pt = LLVMPointerType(R.L.ty1, 0);
    LLVMBuildStore(B, LLVMBuildLoad2(B, R.L.ty1, LLVMBuildBitCast(B, accs, pt, ""), ""), R.acc1);
    gen_loop lp;
    LLVMValueRef t =
        hd_llvm_gen_loop_begin(G, &lp, hd_llvm_gen_c64(G, 1), LLVMGetParam(fn, (unsigned)n + 1));
    LLVMValueRef off = LLVMBuildNSWMul(B, t, hd_llvm_gen_c64(G, 8), "");
    LLVMValueRef q =
        LLVMBuildBitCast(B, LLVMBuildInBoundsGEP2(B, G->t.i8, accs, &off, 1, ""), pt, "");
    LLVMValueRef a = LLVMBuildLoad2(B, R.L.ty1, R.acc1, "");
    LLVMBuildStore(B, red_merge1(G, a, LLVMBuildLoad2(B, R.L.ty1, q, ""), &R), R.acc1);
    hd_llvm_gen_loop_end(G, &lp, 0);
    int s = hd_llvm_gen_op_find(K, R.n->out, 1);
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
    hd_llvm_gen_add_attr(G, fn, LLVMAttributeFunctionIndex, "nounwind");
    LLVMPositionBuilderAtEnd(B, LLVMAppendBasicBlockInContext(G->t.c, fn, "entry"));
    LLVMValueRef args[n + nextra];
    hd_llvm_gen_entry_ptrs(K, LLVMGetParam(fn, 0), args);
    for (int e = 0; e < nextra; e++) args[n + e] = LLVMGetParam(fn, (unsigned)(1 + e));
    LLVMBuildCall2(B, LLVMGlobalGetValueType(body), body, args, (unsigned)(n + nextra), "");
    LLVMBuildRetVoid(B);
    return fn;
}

/* split[0], split[1]: K's part and fin functions. */
void hd_llvm_red_split_fns(gen_kernel *K, LLVMValueRef *split) {
    hd_llvm_gen *G = K->G;
    LLVMTypeRef pe[3] = {G->t.i64, G->t.i64, G->t.ptr8}, fe[2] = {G->t.ptr8, G->t.i64};
    split[0] = split_entry(K, split_part_body(K), "part", pe, 3);
    split[1] = split_entry(K, split_fin_body(K), "fin", fe, 2);
}

#endif /* HODU_HAVE_LLVM */
