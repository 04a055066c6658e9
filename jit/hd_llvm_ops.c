/* Per-element code for every elementwise op and dtype, with the eager
 * kernels' semantics (backends/cpu/cpu_elementwise.c), so that compiled
 * code gives the same bits:
 * - registers: f16/bf16/f32 as float, f64 as double, i8/u8/bool as i8;
 *   an f16/bf16 result is rounded to its precision after every op, as the
 *   eager kernels store it; bools are 0/1 (any nonzero byte read is true);
 * - f32 (and so f16, bf16) exp, log, tanh, sigmoid, silu, softplus, gelu,
 *   sin, cos and pow are the shared vector math of
 *   backends/cpu/hd_vmath_algo.h, emitted here operation for operation
 *   (the eager kernels run its C form), so loops over them vectorize; f64
 *   ones and fmod call libm as the eager loops do;
 * - integer arithmetic wraps, x % 0 and x % -1 are 0, integer pow calls
 *   the runtime (by squaring, as eager);
 * - casts saturate float -> int (NaN -> 0) and wrap int -> int;
 *   f64 -> f16 rounds through f32, as eager does.
 * No fast-math flags anywhere: IEEE results; the only fused multiply-adds
 * are the vector math's explicit ones (llvm.fma, one rounding, as fmaf). */
#include "hd_llvm.h"

#if HODU_HAVE_LLVM

#include <math.h>
#include <stdio.h>
#include <string.h>

#define B (G->b)
/* The type of a value of scalar type t: a vector of G->vw when the code
 * being generated is vector code. */
#define VT(ty) hd_llvm_vec(G, G->t.ty)

LLVMTypeRef hd_llvm_vec(hd_llvm_gen *G, LLVMTypeRef scalar) {
    return G->vw ? LLVMVectorType(scalar, (unsigned)G->vw) : scalar;
}

static LLVMTypeRef elem_type(LLVMTypeRef ty) {
    return LLVMGetTypeKind(ty) == LLVMVectorTypeKind ? LLVMGetElementType(ty) : ty;
}

LLVMValueRef hd_llvm_cint(LLVMTypeRef ty, uint64_t v, int sext) {
    if (LLVMGetTypeKind(ty) != LLVMVectorTypeKind) return LLVMConstInt(ty, v, sext);
    unsigned n = LLVMGetVectorSize(ty);
    LLVMValueRef c = LLVMConstInt(LLVMGetElementType(ty), v, sext), lanes[64];
    for (unsigned i = 0; i < n && i < 64; i++) lanes[i] = c;
    return LLVMConstVector(lanes, n);
}

static LLVMValueRef ci32(hd_llvm_gen *G, uint32_t v) {
    return hd_llvm_cint(VT(i32), v, 0);
}

static LLVMValueRef cf32(hd_llvm_gen *G, float v) {
    return LLVMConstReal(VT(f32), (double)v);
}

static LLVMValueRef fconst(LLVMTypeRef ty, double v) {
    return LLVMConstReal(ty, v);
}

static int is_f64(LLVMValueRef v) {
    return LLVMGetTypeKind(elem_type(LLVMTypeOf(v))) == LLVMDoubleTypeKind;
}

/* ---- types, loads, stores ---- */

LLVMTypeRef hd_llvm_reg_type(hd_llvm_gen *G, hd_dtype dt) {
    switch (dt) {
    case HD_F64: return G->t.f64;
    case HD_F16:
    case HD_BF16:
    case HD_F32: return G->t.f32;
    case HD_I32: return G->t.i32;
    case HD_I64: return G->t.i64;
    default: return G->t.i8;
    }
}

LLVMTypeRef hd_llvm_mem_type(hd_llvm_gen *G, hd_dtype dt) {
    return dt == HD_F16 || dt == HD_BF16 ? G->t.i16 : hd_llvm_reg_type(G, dt);
}

static LLVMValueRef as_f32(hd_llvm_gen *G, LLVMValueRef bits) {
    return LLVMBuildBitCast(B, bits, VT(f32), "");
}

static LLVMValueRef as_i32(hd_llvm_gen *G, LLVMValueRef f) {
    return LLVMBuildBitCast(B, f, VT(i32), "");
}

/* all ones where c holds */
static LLVMValueRef mask32(hd_llvm_gen *G, LLVMValueRef c) {
    return LLVMBuildSExt(B, c, VT(i32), "");
}

static LLVMValueRef sel_bits(hd_llvm_gen *G, LLVMValueRef m, LLVMValueRef a, LLVMValueRef b) {
    return LLVMBuildOr(B, LLVMBuildAnd(B, a, m, ""), LLVMBuildAnd(B, b, LLVMBuildNot(B, m, ""), ""),
                       "");
}

/* ew_h2f: f16 bits (i16) -> float, branch-free. */
static LLVMValueRef h2f(hd_llvm_gen *G, LLVMValueRef h) {
    if (G->f16c) return LLVMBuildFPExt(B, LLVMBuildBitCast(B, h, VT(half), ""), VT(f32), "");
    LLVMValueRef w = LLVMBuildShl(B, LLVMBuildZExt(B, h, VT(i32), ""), ci32(G, 16), "");
    LLVMValueRef sign = LLVMBuildAnd(B, w, ci32(G, 0x80000000u), "");
    LLVMValueRef two_w = LLVMBuildAdd(B, w, w, "");
    LLVMValueRef nb =
        LLVMBuildAdd(B, LLVMBuildLShr(B, two_w, ci32(G, 4), ""), ci32(G, 0xE0u << 23), "");
    LLVMValueRef norm = as_i32(G, LLVMBuildFMul(B, as_f32(G, nb), cf32(G, 0x1.0p-112f), ""));
    LLVMValueRef db =
        LLVMBuildOr(B, LLVMBuildLShr(B, two_w, ci32(G, 17), ""), ci32(G, 126u << 23), "");
    LLVMValueRef denorm = as_i32(G, LLVMBuildFSub(B, as_f32(G, db), cf32(G, 0.5f), ""));
    LLVMValueRef m = mask32(G, LLVMBuildICmp(B, LLVMIntULT, two_w, ci32(G, 1u << 27), ""));
    return as_f32(G, LLVMBuildOr(B, sign, sel_bits(G, m, denorm, norm), ""));
}

/* ew_f2h: float -> f16 bits, round to nearest even, NaN kept quiet. */
static LLVMValueRef f2h(hd_llvm_gen *G, LLVMValueRef f) {
    if (G->f16c) return LLVMBuildBitCast(B, LLVMBuildFPTrunc(B, f, VT(half), ""), VT(i16), "");
    LLVMValueRef base = hd_llvm_intrinsic(G, "llvm.fabs", f);
    base = LLVMBuildFMul(B, LLVMBuildFMul(B, base, cf32(G, 0x1.0p+112f), ""), cf32(G, 0x1.0p-110f),
                         "");
    LLVMValueRef w = as_i32(G, f), shl1 = LLVMBuildAdd(B, w, w, "");
    LLVMValueRef sign = LLVMBuildAnd(B, w, ci32(G, 0x80000000u), "");
    LLVMValueRef bias = LLVMBuildAnd(B, shl1, ci32(G, 0xFF000000u), "");
    LLVMValueRef small = LLVMBuildICmp(B, LLVMIntULT, bias, ci32(G, 0x71000000u), "");
    bias = LLVMBuildSelect(B, small, ci32(G, 0x71000000u), bias, "");
    LLVMValueRef sc = as_f32(
        G, LLVMBuildAdd(B, LLVMBuildLShr(B, bias, ci32(G, 1), ""), ci32(G, 0x07800000u), ""));
    LLVMValueRef bits = as_i32(G, LLVMBuildFAdd(B, sc, base, ""));
    LLVMValueRef nonsign = LLVMBuildAdd(
        B, LLVMBuildAnd(B, LLVMBuildLShr(B, bits, ci32(G, 13), ""), ci32(G, 0x7C00u), ""),
        LLVMBuildAnd(B, bits, ci32(G, 0x0FFFu), ""), "");
    LLVMValueRef nan =
        LLVMBuildOr(B, ci32(G, 0x7E00u),
                    LLVMBuildAnd(B, LLVMBuildLShr(B, w, ci32(G, 13), ""), ci32(G, 0x3FFu), ""), "");
    LLVMValueRef m = mask32(G, LLVMBuildICmp(B, LLVMIntUGT, shl1, ci32(G, 0xFF000000u), ""));
    LLVMValueRef r =
        LLVMBuildOr(B, LLVMBuildLShr(B, sign, ci32(G, 16), ""), sel_bits(G, m, nan, nonsign), "");
    return LLVMBuildTrunc(B, r, VT(i16), "");
}

static LLVMValueRef bf2f(hd_llvm_gen *G, LLVMValueRef h) {
    return as_f32(G, LLVMBuildShl(B, LLVMBuildZExt(B, h, VT(i32), ""), ci32(G, 16), ""));
}

/* ew_f2bf: round to nearest even; NaN kept, made quiet. */
static LLVMValueRef f2bf(hd_llvm_gen *G, LLVMValueRef f) {
    LLVMValueRef x = as_i32(G, f), hi = LLVMBuildLShr(B, x, ci32(G, 16), "");
    LLVMValueRef odd = LLVMBuildAnd(B, hi, ci32(G, 1), "");
    LLVMValueRef r = LLVMBuildLShr(
        B, LLVMBuildAdd(B, LLVMBuildAdd(B, x, ci32(G, 0x7FFFu), ""), odd, ""), ci32(G, 16), "");
    LLVMValueRef isnan = LLVMBuildICmp(B, LLVMIntUGT, LLVMBuildAnd(B, x, ci32(G, 0x7FFFFFFFu), ""),
                                       ci32(G, 0x7F800000u), "");
    r = LLVMBuildSelect(B, isnan, LLVMBuildOr(B, hi, ci32(G, 0x40u), ""), r, "");
    return LLVMBuildTrunc(B, r, VT(i16), "");
}

static LLVMValueRef bool_of(hd_llvm_gen *G, LLVMValueRef v) {
    LLVMTypeRef ty = LLVMTypeOf(v);
    LLVMValueRef c = LLVMGetTypeKind(elem_type(ty)) == LLVMIntegerTypeKind
                         ? LLVMBuildICmp(B, LLVMIntNE, v, hd_llvm_cint(ty, 0, 0), "")
                         : LLVMBuildFCmp(B, LLVMRealUNE, v, fconst(ty, 0), "");
    return LLVMBuildZExt(B, c, VT(i8), "");
}

/* The element at p + i * step (in elements). */
static LLVMValueRef elem_ptr(hd_llvm_gen *G, LLVMTypeRef mt, LLVMValueRef p, int64_t i) {
    LLVMValueRef idx = LLVMConstInt(G->t.i64, (uint64_t)i, 1);
    return LLVMBuildInBoundsGEP2(B, mt, p, &idx, 1, "");
}

/* Memory bits: one element, or in vector code vw elements step apart (one
 * vector load when step is 1, one element repeated when it is 0). */
static LLVMValueRef load_bits(hd_llvm_gen *G, LLVMTypeRef mt, unsigned align, LLVMValueRef ptr,
                              int64_t step) {
    LLVMValueRef v;
    if (G->vw && step == 1) {
        LLVMTypeRef vt = LLVMVectorType(mt, (unsigned)G->vw);
        v = LLVMBuildLoad2(B, vt, LLVMBuildBitCast(B, ptr, LLVMPointerType(vt, 0), ""), "");
        LLVMSetAlignment(v, align);
        return v;
    }
    if (G->vw && step != 0) {
        LLVMValueRef r = LLVMGetUndef(LLVMVectorType(mt, (unsigned)G->vw));
        for (int i = 0; i < G->vw; i++) {
            LLVMValueRef e = LLVMBuildLoad2(B, mt, elem_ptr(G, mt, ptr, i * step), "");
            LLVMSetAlignment(e, align);
            r = LLVMBuildInsertElement(B, r, e, LLVMConstInt(G->t.i32, (uint64_t)i, 0), "");
        }
        return r;
    }
    v = LLVMBuildLoad2(B, mt, ptr, "");
    LLVMSetAlignment(v, align);
    return G->vw ? hd_llvm_splat(G, v) : v;
}

LLVMValueRef hd_llvm_load_n(hd_llvm_gen *G, hd_dtype dt, LLVMValueRef ptr, int64_t step) {
    LLVMValueRef v = load_bits(G, hd_llvm_mem_type(G, dt), (unsigned)hd_dtype_size(dt), ptr, step);
    switch (dt) {
    case HD_F16: return h2f(G, v);
    case HD_BF16: return bf2f(G, v);
    case HD_BOOL: return bool_of(G, v);
    default: return v;
    }
}

LLVMValueRef hd_llvm_load(hd_llvm_gen *G, hd_dtype dt, LLVMValueRef ptr) {
    return hd_llvm_load_n(G, dt, ptr, 1);
}

void hd_llvm_store_n(hd_llvm_gen *G, hd_dtype dt, LLVMValueRef ptr, int64_t step, LLVMValueRef v) {
    if (dt == HD_F16) v = f2h(G, v);
    if (dt == HD_BF16) v = f2bf(G, v);
    unsigned align = (unsigned)hd_dtype_size(dt);
    LLVMTypeRef mt = hd_llvm_mem_type(G, dt);
    if (G->vw && step == 1) {
        LLVMTypeRef vt = LLVMVectorType(mt, (unsigned)G->vw);
        LLVMValueRef st =
            LLVMBuildStore(B, v, LLVMBuildBitCast(B, ptr, LLVMPointerType(vt, 0), ""));
        LLVMSetAlignment(st, G->nt_store ? 64 : align); /* streamed: 64-byte aligned */
        if (G->nt_store) {                              /* !nontemporal !{i32 1} */
            LLVMMetadataRef one = LLVMValueAsMetadata(LLVMConstInt(G->t.i32, 1, 0));
            LLVMSetMetadata(st, LLVMGetMDKindIDInContext(G->t.c, "nontemporal", 11),
                            LLVMMetadataAsValue(G->t.c, LLVMMDNodeInContext2(G->t.c, &one, 1)));
        }
        return;
    }
    for (int i = 0; i < (G->vw ? G->vw : 1); i++) {
        LLVMValueRef e =
            G->vw ? LLVMBuildExtractElement(B, v, LLVMConstInt(G->t.i32, (uint64_t)i, 0), "") : v;
        LLVMSetAlignment(LLVMBuildStore(B, e, elem_ptr(G, mt, ptr, i * step)), align);
    }
}

void hd_llvm_store(hd_llvm_gen *G, hd_dtype dt, LLVMValueRef ptr, LLVMValueRef v) {
    hd_llvm_store_n(G, dt, ptr, 1, v);
}

LLVMValueRef hd_llvm_splat(hd_llvm_gen *G, LLVMValueRef v) {
    LLVMTypeRef ty = LLVMTypeOf(v);
    if (!G->vw || LLVMGetTypeKind(ty) == LLVMVectorTypeKind) return v;
    LLVMValueRef u = LLVMGetUndef(LLVMVectorType(ty, (unsigned)G->vw));
    u = LLVMBuildInsertElement(B, u, v, LLVMConstInt(G->t.i32, 0, 0), "");
    return LLVMBuildShuffleVector(B, u, LLVMGetUndef(LLVMTypeOf(u)),
                                  LLVMConstNull(LLVMVectorType(G->t.i32, (unsigned)G->vw)), "");
}

LLVMValueRef hd_llvm_round_half(hd_llvm_gen *G, LLVMValueRef v, hd_dtype dt) {
    if (dt == HD_F16) return h2f(G, f2h(G, v));
    if (dt == HD_BF16) return bf2f(G, f2bf(G, v));
    return v;
}

LLVMValueRef hd_llvm_const(hd_llvm_gen *G, hd_dtype dt, double d, int64_t i) {
    switch (dt) {
    case HD_F64: return fconst(VT(f64), d);
    case HD_F16:
    case HD_BF16:
    case HD_F32: return cf32(G, (float)d);
    case HD_BOOL: return hd_llvm_cint(VT(i8), i != 0, 0);
    default: return hd_llvm_cint(hd_llvm_vec(G, hd_llvm_reg_type(G, dt)), (uint64_t)i, 1);
    }
}

/* ---- calls ---- */

/* Call f (of scalar type fty) on args; vector args are called lane by lane. */
static LLVMValueRef call_lanes(hd_llvm_gen *G, LLVMTypeRef fty, LLVMValueRef f, LLVMValueRef *args,
                               int nargs) {
    LLVMTypeRef vty = LLVMTypeOf(args[0]);
    if (LLVMGetTypeKind(vty) != LLVMVectorTypeKind)
        return LLVMBuildCall2(B, fty, f, args, (unsigned)nargs, "");
    unsigned n = LLVMGetVectorSize(vty);
    LLVMValueRef r = LLVMGetUndef(LLVMVectorType(LLVMGetReturnType(fty), n)), a[4];
    for (unsigned i = 0; i < n; i++) {
        LLVMValueRef idx = LLVMConstInt(G->t.i32, i, 0);
        for (int k = 0; k < nargs; k++) a[k] = LLVMBuildExtractElement(B, args[k], idx, "");
        r = LLVMBuildInsertElement(B, r, LLVMBuildCall2(B, fty, f, a, (unsigned)nargs, ""), idx,
                                   "");
    }
    return r;
}

LLVMValueRef hd_llvm_call_libm(hd_llvm_gen *G, const char *name, LLVMValueRef *args, int nargs) {
    LLVMTypeRef ty = elem_type(LLVMTypeOf(args[0])), params[2] = {ty, ty};
    LLVMTypeRef fty = LLVMFunctionType(ty, params, (unsigned)nargs, 0);
    LLVMValueRef f = LLVMGetNamedFunction(G->mod, name);
    if (!f) f = LLVMAddFunction(G->mod, name, fty);
    G->scalar_calls = 1;
    return call_lanes(G, fty, f, args, nargs);
}

LLVMValueRef hd_llvm_intrinsic(hd_llvm_gen *G, const char *name, LLVMValueRef x) {
    LLVMTypeRef ty = LLVMTypeOf(x);
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(G->mod, id, &ty, 1);
    LLVMTypeRef fty = LLVMIntrinsicGetType(G->t.c, id, &ty, 1);
    return LLVMBuildCall2(B, fty, f, &x, 1, "");
}

static LLVMValueRef libm1(hd_llvm_gen *G, const char *f32name, LLVMValueRef x) {
    char name[32];
    snprintf(name, sizeof name, "%s%s", f32name, is_f64(x) ? "" : "f");
    return hd_llvm_call_libm(G, name, &x, 1);
}

static LLVMValueRef libm2(hd_llvm_gen *G, const char *base, LLVMValueRef x, LLVMValueRef y) {
    char name[32];
    LLVMValueRef a[2] = {x, y};
    snprintf(name, sizeof name, "%s%s", base, is_f64(x) ? "" : "f");
    return hd_llvm_call_libm(G, name, a, 2);
}

/* ---- the shared f32 vector math (backends/cpu/hd_vmath_algo.h) ---- */

/* a * b + c rounded once (llvm.fma: an FMA instruction on the host, or
 * fmaf from the runtime's symbols where it has none; the same bits). */
static LLVMValueRef vm_fma(hd_llvm_gen *G, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c) {
    LLVMTypeRef ty = LLVMTypeOf(a);
    unsigned id = LLVMLookupIntrinsicID("llvm.fma", 8);
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(G->mod, id, &ty, 1);
    LLVMValueRef args[3] = {a, b, c};
    return LLVMBuildCall2(B, LLVMIntrinsicGetType(G->t.c, id, &ty, 1), f, args, 3, "");
}

/* backends/cpu/hd_vmath_tab.c (the C functions of hd_vmath.h are not
 * included here: their names are the emitters' below) */
extern const double hd_vm_pio2_tab[512];

/* hd_vm_pio2_tab[i] (sin and cos's reduction): the table goes into the
 * module as a private constant, from the runtime's own array, so generated
 * code reads the same values as the eager kernels. */
static LLVMValueRef vm_table(hd_llvm_gen *G, LLVMValueRef i) {
    const char *name = "hd_vm_pio2_tab";
    LLVMValueRef tab = LLVMGetNamedGlobal(G->mod, name);
    LLVMTypeRef aty = LLVMArrayType(G->t.f64, 512);
    if (!tab) {
        LLVMValueRef v[512];
        for (int k = 0; k < 512; k++) v[k] = LLVMConstReal(G->t.f64, hd_vm_pio2_tab[k]);
        tab = LLVMAddGlobal(G->mod, aty, name);
        LLVMSetInitializer(tab, LLVMConstArray(G->t.f64, v, 512));
        LLVMSetGlobalConstant(tab, 1);
        LLVMSetLinkage(tab, LLVMPrivateLinkage);
        LLVMSetUnnamedAddress(tab, LLVMGlobalUnnamedAddr);
    }
    LLVMValueRef idx[2] = {LLVMConstInt(G->t.i64, 0, 0), NULL};
    LLVMTypeRef ity = hd_llvm_vec(G, G->t.i64);
    idx[1] = LLVMBuildZExt(B, i, ity, "");
    if (G->vw) { /* a vector of pointers: a gather */
        LLVMValueRef p = LLVMBuildGEP2(B, aty, tab, idx, 2, "");
        unsigned n = (unsigned)G->vw;
        LLVMValueRef r = LLVMGetUndef(VT(f64));
        for (unsigned k = 0; k < n; k++) {
            LLVMValueRef kk = LLVMConstInt(G->t.i32, k, 0);
            LLVMValueRef e = LLVMBuildLoad2(B, G->t.f64, LLVMBuildExtractElement(B, p, kk, ""), "");
            r = LLVMBuildInsertElement(B, r, e, kk, "");
        }
        return r;
    }
    return LLVMBuildLoad2(B, G->t.f64, LLVMBuildInBoundsGEP2(B, aty, tab, idx, 2, ""), "");
}

/* d held to [lo, hi]; NaN stays NaN */
static LLVMValueRef vm_dclamp(hd_llvm_gen *G, LLVMValueRef d, double lo, double hi) {
    LLVMValueRef l = LLVMConstReal(VT(f64), lo), h = LLVMConstReal(VT(f64), hi);
    d = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, d, l, ""), l, d, "");
    return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, d, h, ""), h, d, "");
}

/* the f64 with high word u, low word 0 */
static LLVMValueRef vm_dfromhi(hd_llvm_gen *G, LLVMValueRef u) {
    LLVMValueRef w =
        LLVMBuildShl(B, LLVMBuildZExt(B, u, VT(i64), ""), hd_llvm_cint(VT(i64), 32, 0), "");
    return LLVMBuildBitCast(B, w, VT(f64), "");
}

/* t 2^n rounded once, n an integral float: vscalefps on 16 lanes (AVX-512
 * vector code only; the vector math's exp scaling, hd_vm_exp_scale). */
static LLVMValueRef vm_scalef16(hd_llvm_gen *G, LLVMValueRef t, LLVMValueRef n) {
    const char *name = "llvm.x86.avx512.mask.scalef.ps.512";
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(G->mod, id, NULL, 0);
    LLVMValueRef args[5] = {t, n, LLVMGetUndef(LLVMTypeOf(t)), LLVMConstInt(G->t.i16, 0xffff, 0),
                            LLVMConstInt(G->t.i32, 4, 0)}; /* all lanes, the current rounding */
    return LLVMBuildCall2(B, LLVMIntrinsicGetType(G->t.c, id, NULL, 0), f, args, 5, "");
}

/* lanes [at, at + n) of v */
static LLVMValueRef vm_lanes(hd_llvm_gen *G, LLVMValueRef v, unsigned at, unsigned n) {
    LLVMValueRef idx[64];
    for (unsigned i = 0; i < n; i++) idx[i] = LLVMConstInt(G->t.i32, at + i, 0);
    return LLVMBuildShuffleVector(B, v, LLVMGetUndef(LLVMTypeOf(v)), LLVMConstVector(idx, n), "");
}

/* vm_scalef16 on vectors of 16 or 32 lanes (split in halves) */
static LLVMValueRef vm_scalef(hd_llvm_gen *G, LLVMValueRef t, LLVMValueRef n) {
    if (G->vw == 16) return vm_scalef16(G, t, n);
    LLVMValueRef r0 = vm_scalef16(G, vm_lanes(G, t, 0, 16), vm_lanes(G, n, 0, 16));
    LLVMValueRef r1 = vm_scalef16(G, vm_lanes(G, t, 16, 16), vm_lanes(G, n, 16, 16));
    LLVMValueRef idx[32];
    for (unsigned i = 0; i < 32; i++) idx[i] = LLVMConstInt(G->t.i32, i, 0);
    return LLVMBuildShuffleVector(B, r0, r1, LLVMConstVector(idx, 32), "");
}

/* The VM_* operations of hd_vmath_algo.h as IR builders: every function
 * there becomes an emitter of the same operations, in order (scalars, or
 * vectors of G->vw lanes). Masks are i1 values. */
#define VM_F                 LLVMValueRef
#define VM_U                 LLVMValueRef
#define VM_M                 LLVMValueRef
#define VM_FN1(name, a)      static LLVMValueRef name(hd_llvm_gen *G, LLVMValueRef a)
#define VM_FN2(name, a, b)   static LLVMValueRef name(hd_llvm_gen *G, LLVMValueRef a, LLVMValueRef b)
#define VM_CALL1(name, a)    name(G, a)
#define VM_CALL2(name, a, b) name(G, a, b)
#define VM_CF(c)             cf32(G, (float)(c))
#define VM_CU(c)             ci32(G, (uint32_t)(c))
#define VM_ADD(a, b)         LLVMBuildFAdd(B, a, b, "")
#define VM_SUB(a, b)         LLVMBuildFSub(B, a, b, "")
#define VM_MUL(a, b)         LLVMBuildFMul(B, a, b, "")
#define VM_DIV(a, b)         LLVMBuildFDiv(B, a, b, "")
#define VM_FMA(a, b, c)      vm_fma(G, a, b, c)
#define VM_NEG(a)            LLVMBuildFNeg(B, a, "")
#define VM_LT(a, b)          LLVMBuildFCmp(B, LLVMRealOLT, a, b, "")
#define VM_LE(a, b)          LLVMBuildFCmp(B, LLVMRealOLE, a, b, "")
#define VM_GT(a, b)          LLVMBuildFCmp(B, LLVMRealOGT, a, b, "")
#define VM_GE(a, b)          LLVMBuildFCmp(B, LLVMRealOGE, a, b, "")
#define VM_EQ(a, b)          LLVMBuildFCmp(B, LLVMRealOEQ, a, b, "")
#define VM_ULT(a, b)         LLVMBuildICmp(B, LLVMIntULT, a, b, "")
#define VM_ILT(a, b)         LLVMBuildICmp(B, LLVMIntSLT, a, b, "")
#define VM_MAND(m, n)        LLVMBuildAnd(B, m, n, "")
#define VM_MOR(m, n)         LLVMBuildOr(B, m, n, "")
#define VM_MNOT(m)           LLVMBuildNot(B, m, "")
#define VM_SELF(m, a, b)     LLVMBuildSelect(B, m, a, b, "")
#define VM_SELU(m, a, b)     LLVMBuildSelect(B, m, a, b, "")
#define VM_BITS(f)           as_i32(G, f)
#define VM_FLT(u)            as_f32(G, u)
#define VM_UADD(a, b)        LLVMBuildAdd(B, a, b, "")
#define VM_USUB(a, b)        LLVMBuildSub(B, a, b, "")
#define VM_UMUL(a, b)        LLVMBuildMul(B, a, b, "")
#define VM_UAND(a, b)        LLVMBuildAnd(B, a, b, "")
#define VM_UOR(a, b)         LLVMBuildOr(B, a, b, "")
#define VM_UXOR(a, b)        LLVMBuildXor(B, a, b, "")
#define VM_SHL(a, k)         LLVMBuildShl(B, a, ci32(G, k), "")
#define VM_SHR(a, k)         LLVMBuildLShr(B, a, ci32(G, k), "")
#define VM_SAR(a, k)         LLVMBuildAShr(B, a, ci32(G, k), "")
#define VM_ITOF(a)           LLVMBuildSIToFP(B, a, VT(f32), "")
#define VM_UEQ(a, b)         LLVMBuildICmp(B, LLVMIntEQ, a, b, "")
#define VM_FNQ(name, a, q)   static LLVMValueRef name(hd_llvm_gen *G, LLVMValueRef a, int q)
#define VM_CALLQ(name, a, q) name(G, a, q)
#define VM_FNSC(name, x, gh, gl, q)                                                                \
    static LLVMValueRef name(hd_llvm_gen *G, LLVMValueRef x, LLVMValueRef gh, LLVMValueRef gl,     \
                             int q)
#define VM_CALLSC(name, x, gh, gl, q) name(G, x, gh, gl, q)
#define VM_D                          LLVMValueRef
#define VM_CD(c)                      LLVMConstReal(VT(f64), (double)(c))
#define VM_DADD(a, b)                 LLVMBuildFAdd(B, a, b, "")
#define VM_DSUB(a, b)                 LLVMBuildFSub(B, a, b, "")
#define VM_DMUL(a, b)                 LLVMBuildFMul(B, a, b, "")
#define VM_DDIV(a, b)                 LLVMBuildFDiv(B, a, b, "")
#define VM_DFMA(a, b, c)              vm_fma(G, a, b, c)
#define VM_DNEG(a)                    LLVMBuildFNeg(B, a, "")
#define VM_ITOD(a)                    LLVMBuildSIToFP(B, a, VT(f64), "")
#define VM_FTOD(a)                    LLVMBuildFPExt(B, a, VT(f64), "")
#define VM_DTOF(a)                    LLVMBuildFPTrunc(B, a, VT(f32), "")
#define VM_DLO(a)                     LLVMBuildTrunc(B, LLVMBuildBitCast(B, a, VT(i64), ""), VT(i32), "")
#define VM_TABD(i)                    vm_table(G, i)
#define VM_DCLAMP(d, lo, hi)          vm_dclamp(G, d, lo, hi)
#define VM_DFROMHI(u)                 vm_dfromhi(G, u)
#define VM_FTOI(a)                    LLVMBuildFPToSI(B, a, VT(i32), "")
#define VM_LDEXP(t, n)                vm_scalef(G, t, n)
#define VM_LDEXP_ON                   (G->avx512 && (G->vw == 16 || G->vw == 32))

#include "hd_vmath_algo.h"

#undef VM_F
#undef VM_U
#undef VM_M
#undef VM_FN1
#undef VM_FN2
#undef VM_CALL1
#undef VM_CALL2
#undef VM_CF
#undef VM_CU
#undef VM_ADD
#undef VM_SUB
#undef VM_MUL
#undef VM_DIV
#undef VM_FMA
#undef VM_NEG
#undef VM_LT
#undef VM_LE
#undef VM_GT
#undef VM_GE
#undef VM_EQ
#undef VM_ULT
#undef VM_ILT
#undef VM_MAND
#undef VM_MOR
#undef VM_MNOT
#undef VM_SELF
#undef VM_SELU
#undef VM_BITS
#undef VM_FLT
#undef VM_UADD
#undef VM_USUB
#undef VM_UMUL
#undef VM_UAND
#undef VM_UOR
#undef VM_UXOR
#undef VM_SHL
#undef VM_SHR
#undef VM_SAR
#undef VM_ITOF
#undef VM_UEQ
#undef VM_FNQ
#undef VM_CALLQ
#undef VM_FNSC
#undef VM_CALLSC
#undef VM_D
#undef VM_CD
#undef VM_DADD
#undef VM_DSUB
#undef VM_DMUL
#undef VM_DDIV
#undef VM_DFMA
#undef VM_DNEG
#undef VM_ITOD
#undef VM_FTOD
#undef VM_DTOF
#undef VM_DLO
#undef VM_TABD
#undef VM_DCLAMP
#undef VM_DFROMHI
#undef VM_FTOI
#undef VM_LDEXP
#undef VM_LDEXP_ON

/* cpu_nn's nn_expf (the softmax family's), operation for operation. */
static LLVMValueRef nn_expf(hd_llvm_gen *G, LLVMValueRef x) {
    LLVMValueRef ix = as_i32(G, x), lo = ci32(G, (uint32_t)-1028740017), hi = ci32(G, 0x42b0c0a5u);
    LLVMValueRef neg = LLVMBuildICmp(B, LLVMIntSLT, ix, ci32(G, 0), "");
    LLVMValueRef under =
        mask32(G, LLVMBuildAnd(B, neg, LLVMBuildICmp(B, LLVMIntSGT, ix, lo, ""), ""));
    LLVMValueRef over = mask32(G, LLVMBuildICmp(B, LLVMIntSGT, ix, hi, ""));
    LLVMValueRef nan =
        mask32(G, LLVMBuildICmp(B, LLVMIntSGT, LLVMBuildAnd(B, ix, ci32(G, 0x7fffffffu), ""),
                                ci32(G, 0x7f800000u), ""));
    LLVMValueRef keep = LLVMBuildNot(B, LLVMBuildOr(B, under, over, ""), "");
    LLVMValueRef cb = LLVMBuildOr(
        B, LLVMBuildAnd(B, ix, keep, ""),
        LLVMBuildOr(B, LLVMBuildAnd(B, lo, under, ""), LLVMBuildAnd(B, hi, over, ""), ""), "");
    LLVMValueRef xc = as_f32(G, cb);
    LLVMValueRef t = LLVMBuildFAdd(B, LLVMBuildFMul(B, xc, cf32(G, 1.44269504088896341f), ""),
                                   cf32(G, 12582912.0f), "");
    LLVMValueRef n = LLVMBuildFSub(B, t, cf32(G, 12582912.0f), "");
    LLVMValueRef r = LLVMBuildFSub(B, xc, LLVMBuildFMul(B, n, cf32(G, 0.693359375f), ""), "");
    r = LLVMBuildFAdd(B, r, LLVMBuildFMul(B, n, cf32(G, 2.12194440e-4f), ""), "");
    static const float c[] = {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f,
                              1.6666665459e-1f, 5.0000001201e-1f};
    LLVMValueRef p = cf32(G, 1.9875691500e-4f);
    for (int i = 0; i < 5; i++) p = LLVMBuildFAdd(B, LLVMBuildFMul(B, p, r, ""), cf32(G, c[i]), "");
    p = LLVMBuildFMul(B, LLVMBuildFMul(B, p, r, ""), r, "");
    p = LLVMBuildFAdd(B, LLVMBuildFAdd(B, p, r, ""), cf32(G, 1.0f), "");
    LLVMValueRef sb = LLVMBuildShl(
        B,
        LLVMBuildAdd(B, LLVMBuildSub(B, as_i32(G, t), ci32(G, 0x4b400000u), ""), ci32(G, 127), ""),
        ci32(G, 23), "");
    LLVMValueRef yb = as_i32(G, LLVMBuildFMul(B, p, as_f32(G, sb), ""));
    LLVMValueRef keep2 = LLVMBuildNot(B, LLVMBuildOr(B, under, nan, ""), "");
    yb = LLVMBuildOr(B, LLVMBuildAnd(B, yb, keep2, ""), LLVMBuildAnd(B, ix, nan, ""), "");
    return as_f32(G, yb);
}

LLVMValueRef hd_llvm_exp(hd_llvm_gen *G, LLVMValueRef x, hd_dtype dt) {
    return dt == HD_F64 ? libm1(G, "exp", x) : hd_vm_expf(G, x);
}

LLVMValueRef hd_llvm_nn_exp(hd_llvm_gen *G, LLVMValueRef x, hd_dtype dt) {
    return dt == HD_F64 ? libm1(G, "exp", x) : nn_expf(G, x);
}

/* ---- conversions ---- */

static int is_signed(hd_dtype dt) {
    return dt == HD_I8 || dt == HD_I32 || dt == HD_I64;
}

/* A float register value to an integer dtype: NaN -> 0, saturate, else
 * truncate toward zero (ew_sat on the value as a double). */
static LLVMValueRef float_to_int(hd_llvm_gen *G, LLVMValueRef v, hd_dtype to) {
    static const double lims[][2] = {[HD_I8] = {-128.0, 127.0},
                                     [HD_U8] = {0.0, 255.0},
                                     [HD_I32] = {-2147483648.0, 2147483647.0},
                                     [HD_I64] = {-9223372036854775808.0, 9223372036854775807.0}};
    LLVMTypeRef it = hd_llvm_vec(G, hd_llvm_reg_type(G, to));
    LLVMValueRef d = is_f64(v) ? v : LLVMBuildFPExt(B, v, VT(f64), "");
    int64_t lo = to == HD_I8 ? INT8_MIN : to == HD_U8 ? 0 : to == HD_I32 ? INT32_MIN : INT64_MIN;
    int64_t hi = to == HD_I8    ? INT8_MAX
                 : to == HD_U8  ? UINT8_MAX
                 : to == HD_I32 ? INT32_MAX
                                : INT64_MAX;
    LLVMValueRef r = LLVMBuildTrunc(B, LLVMBuildFPToSI(B, d, VT(i64), ""), it, "");
    LLVMValueRef le = LLVMBuildFCmp(B, LLVMRealOLE, d, fconst(VT(f64), lims[to][0]), "");
    LLVMValueRef ge = LLVMBuildFCmp(B, LLVMRealOGE, d, fconst(VT(f64), lims[to][1]), "");
    r = LLVMBuildSelect(B, ge, hd_llvm_cint(it, (uint64_t)hi, 1), r, "");
    r = LLVMBuildSelect(B, le, hd_llvm_cint(it, (uint64_t)lo, 1), r, "");
    LLVMValueRef nan = LLVMBuildFCmp(B, LLVMRealUNO, d, d, "");
    return LLVMBuildSelect(B, nan, hd_llvm_cint(it, 0, 0), r, "");
}

/* A register value of an integer (or bool) dtype to another integer dtype:
 * wraps; sign-extends signed sources. */
static LLVMValueRef int_to_int(hd_llvm_gen *G, LLVMValueRef v, hd_dtype from, hd_dtype to) {
    LLVMTypeRef it = hd_llvm_vec(G, hd_llvm_reg_type(G, to));
    unsigned a = LLVMGetIntTypeWidth(elem_type(LLVMTypeOf(v)));
    unsigned b = LLVMGetIntTypeWidth(hd_llvm_reg_type(G, to));
    if (a == b) return v;
    if (a > b) return LLVMBuildTrunc(B, v, it, "");
    return is_signed(from) ? LLVMBuildSExt(B, v, it, "") : LLVMBuildZExt(B, v, it, "");
}

static LLVMValueRef int_to_float(hd_llvm_gen *G, LLVMValueRef v, hd_dtype from, LLVMTypeRef ft) {
    return is_signed(from) ? LLVMBuildSIToFP(B, v, ft, "") : LLVMBuildUIToFP(B, v, ft, "");
}

LLVMValueRef hd_llvm_convert(hd_llvm_gen *G, LLVMValueRef v, hd_dtype from, hd_dtype to) {
    if (from == to) return v;
    if (to == HD_BOOL) return bool_of(G, v);
    int ff = hd_dtype_is_float(from), tf = hd_dtype_is_float(to);
    if (!tf) return ff ? float_to_int(G, v, to) : int_to_int(G, v, from, to);
    if (to == HD_F64)
        return ff ? (is_f64(v) ? v : LLVMBuildFPExt(B, v, VT(f64), ""))
                  : int_to_float(G, v, from, VT(f64));
    /* to f32, f16, bf16: through f32, as eager's (float) conversions */
    LLVMValueRef f = !ff         ? int_to_float(G, v, from, VT(f32))
                     : is_f64(v) ? LLVMBuildFPTrunc(B, v, VT(f32), "")
                                 : v;
    return hd_llvm_round_half(G, f, to);
}

/* ---- float ops ---- */

static LLVMValueRef fsel(hd_llvm_gen *G, LLVMRealPredicate p, LLVMValueRef a, LLVMValueRef b,
                         LLVMValueRef t, LLVMValueRef f) {
    return LLVMBuildSelect(B, LLVMBuildFCmp(B, p, a, b, ""), t, f, "");
}

static LLVMValueRef float_unary(hd_llvm_gen *G, const hd_ir_node *n, LLVMValueRef x, hd_dtype dt) {
    LLVMTypeRef ty = LLVMTypeOf(x);
    LLVMValueRef one = fconst(ty, 1.0), zero = fconst(ty, 0.0);
    int f64 = dt == HD_F64; /* f64: libm; f32, f16, bf16: the shared f32 math */
    switch (n->op) {
    case HD_OP_NEG: return LLVMBuildFNeg(B, x, "");
    case HD_OP_ABS: return hd_llvm_intrinsic(G, "llvm.fabs", x);
    case HD_OP_EXP: return hd_llvm_exp(G, x, dt);
    case HD_OP_LOG: return f64 ? libm1(G, "log", x) : hd_vm_logf(G, x);
    case HD_OP_SQRT: return hd_llvm_intrinsic(G, "llvm.sqrt", x);
    case HD_OP_RSQRT: return LLVMBuildFDiv(B, one, hd_llvm_intrinsic(G, "llvm.sqrt", x), "");
    case HD_OP_SIN: return f64 ? libm1(G, "sin", x) : hd_vm_sinf(G, x);
    case HD_OP_COS: return f64 ? libm1(G, "cos", x) : hd_vm_cosf(G, x);
    case HD_OP_TANH: return f64 ? libm1(G, "tanh", x) : hd_vm_tanhf(G, x);
    case HD_OP_ERF: return f64 ? libm1(G, "erf", x) : hd_vm_erff(G, x);
    case HD_OP_ERFC: return f64 ? libm1(G, "erfc", x) : hd_vm_erfcf(G, x);
    case HD_OP_LGAMMA: return libm1(G, "hd_lgamma", x); /* the eager kernels' functions */
    case HD_OP_POLYGAMMA: return libm2(G, "hd_polygamma", fconst(ty, n->attrs.scalar[0]), x);
    case HD_OP_SIGMOID:
        if (!f64) return hd_vm_sigmoidf(G, x);
        return LLVMBuildFDiv(
            B, one, LLVMBuildFAdd(B, one, libm1(G, "exp", LLVMBuildFNeg(B, x, "")), ""), "");
    case HD_OP_RELU: return fsel(G, LLVMRealOLE, x, zero, zero, x);
    case HD_OP_GELU: {
        if (!f64) return hd_vm_geluf(G, x);
        LLVMValueRef e =
            libm1(G, "erfc", LLVMBuildFMul(B, LLVMBuildFNeg(B, x, ""), fconst(ty, M_SQRT1_2), ""));
        return LLVMBuildFMul(B, LLVMBuildFMul(B, fconst(ty, 0.5), x, ""), e, "");
    }
    case HD_OP_SILU:
        if (!f64) return hd_vm_siluf(G, x);
        return LLVMBuildFDiv(
            B, x, LLVMBuildFAdd(B, one, libm1(G, "exp", LLVMBuildFNeg(B, x, "")), ""), "");
    case HD_OP_SOFTPLUS:
        if (!f64) return hd_vm_softplusf(G, x);
        return fsel(G, LLVMRealOGT, x, fconst(ty, 20.0), x, libm1(G, "log1p", libm1(G, "exp", x)));
    case HD_OP_SIGN: {
        LLVMValueRef neg =
            fsel(G, LLVMRealOLT, x, zero, fconst(ty, -1.0), LLVMBuildFAdd(B, x, zero, ""));
        return fsel(G, LLVMRealOGT, x, zero, one, neg);
    }
    case HD_OP_FLOOR: return hd_llvm_intrinsic(G, "llvm.floor", x);
    case HD_OP_CEIL: return hd_llvm_intrinsic(G, "llvm.ceil", x);
    case HD_OP_ROUND: return hd_llvm_intrinsic(G, "llvm.nearbyint", x);
    case HD_OP_CLAMP: {
        double lo = n->attrs.scalar[0], hi = n->attrs.scalar[1];
        LLVMValueRef l = fconst(ty, lo != lo ? -INFINITY : dt == HD_F64 ? lo : (double)(float)lo);
        LLVMValueRef h = fconst(ty, hi != hi ? INFINITY : dt == HD_F64 ? hi : (double)(float)hi);
        LLVMValueRef y = fsel(G, LLVMRealOLT, x, l, l, x);
        return fsel(G, LLVMRealOGT, y, h, h, y);
    }
    default: return x; /* copy */
    }
}

static LLVMValueRef float_binary(hd_llvm_gen *G, int op, LLVMValueRef a, LLVMValueRef b) {
    LLVMTypeRef ty = LLVMTypeOf(a);
    LLVMValueRef zero = fconst(ty, 0.0);
    switch (op) {
    case HD_OP_ADD: return LLVMBuildFAdd(B, a, b, "");
    case HD_OP_SUB: return LLVMBuildFSub(B, a, b, "");
    case HD_OP_MUL: return LLVMBuildFMul(B, a, b, "");
    case HD_OP_DIV: return LLVMBuildFDiv(B, a, b, "");
    case HD_OP_MOD: {
        LLVMValueRef m = libm2(G, "fmod", a, b);
        LLVMValueRef nz = LLVMBuildFCmp(B, LLVMRealUNE, m, zero, "");
        LLVMValueRef diff = LLVMBuildXor(B, LLVMBuildFCmp(B, LLVMRealOLT, b, zero, ""),
                                         LLVMBuildFCmp(B, LLVMRealOLT, m, zero, ""), "");
        return LLVMBuildSelect(B, LLVMBuildAnd(B, nz, diff, ""), LLVMBuildFAdd(B, m, b, ""), m, "");
    }
    case HD_OP_POW: return is_f64(a) ? libm2(G, "pow", a, b) : hd_vm_powf(G, a, b);
    case HD_OP_ATAN2: return libm2(G, "atan2", a, b);
    case HD_OP_MAXIMUM:
    case HD_OP_MINIMUM: {
        LLVMValueRef nan = LLVMBuildFCmp(B, LLVMRealUNO, a, a, "");
        LLVMValueRef c =
            LLVMBuildFCmp(B, op == HD_OP_MAXIMUM ? LLVMRealOGT : LLVMRealOLT, a, b, "");
        return LLVMBuildSelect(B, LLVMBuildOr(B, nan, c, ""), a, b, "");
    }
    default: return a;
    }
}

static LLVMValueRef compare(hd_llvm_gen *G, int op, LLVMValueRef a, LLVMValueRef b, hd_dtype dt) {
    LLVMValueRef c;
    if (hd_dtype_is_float(dt)) {
        static const LLVMRealPredicate fp[] = {LLVMRealOEQ, LLVMRealUNE, LLVMRealOLT,
                                               LLVMRealOLE, LLVMRealOGT, LLVMRealOGE};
        c = LLVMBuildFCmp(B, fp[op - HD_OP_EQ], a, b, "");
    } else {
        static const LLVMIntPredicate ip[2][6] = {
            {LLVMIntEQ, LLVMIntNE, LLVMIntULT, LLVMIntULE, LLVMIntUGT, LLVMIntUGE},
            {LLVMIntEQ, LLVMIntNE, LLVMIntSLT, LLVMIntSLE, LLVMIntSGT, LLVMIntSGE}};
        c = LLVMBuildICmp(B, ip[is_signed(dt)][op - HD_OP_EQ], a, b, "");
    }
    return LLVMBuildZExt(B, c, VT(i8), "");
}

/* ---- integer ops ---- */

static LLVMValueRef int_bound(hd_llvm_gen *G, double v, int is_lo, hd_dtype dt) {
    int64_t tmin = dt == HD_I8 ? INT8_MIN : dt == HD_U8 ? 0 : dt == HD_I32 ? INT32_MIN : INT64_MIN;
    int64_t tmax = dt == HD_I8    ? INT8_MAX
                   : dt == HD_U8  ? UINT8_MAX
                   : dt == HD_I32 ? INT32_MAX
                                  : INT64_MAX;
    int64_t r;
    if (v != v) {
        r = is_lo ? tmin : tmax;
    } else {
        double w = is_lo ? ceil(v) : floor(v);
        r = w <= (double)tmin ? tmin : w >= (double)tmax ? tmax : (int64_t)w;
    }
    return hd_llvm_cint(hd_llvm_vec(G, hd_llvm_reg_type(G, dt)), (uint64_t)r, 1);
}

static LLVMValueRef int_unary(hd_llvm_gen *G, const hd_ir_node *n, LLVMValueRef x, hd_dtype dt) {
    LLVMTypeRef ty = LLVMTypeOf(x);
    LLVMValueRef zero = hd_llvm_cint(ty, 0, 0);
    int sg = is_signed(dt);
    switch (n->op) {
    case HD_OP_NEG: return LLVMBuildSub(B, zero, x, "");
    case HD_OP_ABS:
        if (!sg) return x;
        return LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, x, zero, ""),
                               LLVMBuildSub(B, zero, x, ""), x, "");
    case HD_OP_RELU:
        if (!sg) return x;
        return LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSGT, x, zero, ""), x, zero, "");
    case HD_OP_SIGN: {
        LLVMValueRef gt =
            LLVMBuildZExt(B, LLVMBuildICmp(B, sg ? LLVMIntSGT : LLVMIntUGT, x, zero, ""), ty, "");
        if (!sg) return gt;
        return LLVMBuildSub(
            B, gt, LLVMBuildZExt(B, LLVMBuildICmp(B, LLVMIntSLT, x, zero, ""), ty, ""), "");
    }
    case HD_OP_NOT: return LLVMBuildZExt(B, LLVMBuildICmp(B, LLVMIntEQ, x, zero, ""), VT(i8), "");
    case HD_OP_CLAMP: {
        hd_dtype cd = dt == HD_BOOL ? HD_I64 : dt;
        LLVMValueRef y = dt == HD_BOOL ? LLVMBuildZExt(B, x, VT(i64), "") : x;
        LLVMValueRef lo = int_bound(G, n->attrs.scalar[0], 1, cd),
                     hi = int_bound(G, n->attrs.scalar[1], 0, cd);
        int s = is_signed(cd);
        y = LLVMBuildSelect(B, LLVMBuildICmp(B, s ? LLVMIntSLT : LLVMIntULT, y, lo, ""), lo, y, "");
        y = LLVMBuildSelect(B, LLVMBuildICmp(B, s ? LLVMIntSGT : LLVMIntUGT, y, hi, ""), hi, y, "");
        return dt == HD_BOOL ? bool_of(G, y) : y;
    }
    default: return x; /* floor, ceil, round, copy, abs of bool */
    }
}

static LLVMValueRef int_mod(hd_llvm_gen *G, LLVMValueRef a, LLVMValueRef b, hd_dtype dt) {
    LLVMTypeRef ty = LLVMTypeOf(a);
    LLVMValueRef zero = hd_llvm_cint(ty, 0, 0), one = hd_llvm_cint(ty, 1, 0);
    LLVMValueRef bz = LLVMBuildICmp(B, LLVMIntEQ, b, zero, "");
    if (!is_signed(dt)) { /* a divisor of 0 gives 0, never a trap */
        LLVMValueRef r = LLVMBuildURem(B, a, LLVMBuildSelect(B, bz, one, b, ""), "");
        return LLVMBuildSelect(B, bz, zero, r, "");
    }
    LLVMValueRef bad =
        LLVMBuildOr(B, bz, LLVMBuildICmp(B, LLVMIntEQ, b, LLVMConstAllOnes(ty), ""), "");
    LLVMValueRef r = LLVMBuildSRem(B, a, LLVMBuildSelect(B, bad, one, b, ""), "");
    LLVMValueRef adj = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntNE, r, zero, ""),
                                    LLVMBuildXor(B, LLVMBuildICmp(B, LLVMIntSLT, r, zero, ""),
                                                 LLVMBuildICmp(B, LLVMIntSLT, b, zero, ""), ""),
                                    "");
    r = LLVMBuildSelect(B, adj, LLVMBuildAdd(B, r, b, ""), r, "");
    return LLVMBuildSelect(B, bad, zero, r, "");
}

static LLVMValueRef int_pow(hd_llvm_gen *G, LLVMValueRef a, LLVMValueRef b, hd_dtype dt) {
    LLVMTypeRef ty = LLVMTypeOf(a);
    LLVMTypeRef params[3] = {G->t.i64, G->t.i64, G->t.i32};
    LLVMTypeRef fty = LLVMFunctionType(G->t.i64, params, 3, 0);
    LLVMValueRef f = LLVMGetNamedFunction(G->mod, "hd_llvm_rt_ipow");
    if (!f) f = LLVMAddFunction(G->mod, "hd_llvm_rt_ipow", fty);
    LLVMValueRef args[3] = {int_to_int(G, a, dt, HD_I64), int_to_int(G, b, dt, HD_I64),
                            hd_llvm_cint(VT(i32), (uint64_t)dt, 0)};
    G->scalar_calls = 1;
    return LLVMBuildTrunc(B, call_lanes(G, fty, f, args, 3), ty, "");
}

static LLVMValueRef int_binary(hd_llvm_gen *G, int op, LLVMValueRef a, LLVMValueRef b,
                               hd_dtype dt) {
    int sg = is_signed(dt);
    if (dt == HD_BOOL) {
        LLVMValueRef t = hd_llvm_cint(VT(i8), 0, 0);
        if (op == HD_OP_ADD || op == HD_OP_MAXIMUM)
            return LLVMBuildZExt(B, LLVMBuildICmp(B, LLVMIntNE, LLVMBuildOr(B, a, b, ""), t, ""),
                                 VT(i8), "");
        return LLVMBuildAnd(B, a, b, ""); /* mul, minimum: both are 0/1 */
    }
    switch (op) {
    case HD_OP_ADD: return LLVMBuildAdd(B, a, b, "");
    case HD_OP_SUB: return LLVMBuildSub(B, a, b, "");
    case HD_OP_MUL: return LLVMBuildMul(B, a, b, "");
    case HD_OP_MOD: return int_mod(G, a, b, dt);
    case HD_OP_POW: return int_pow(G, a, b, dt);
    case HD_OP_MAXIMUM:
        return LLVMBuildSelect(B, LLVMBuildICmp(B, sg ? LLVMIntSGT : LLVMIntUGT, a, b, ""), a, b,
                               "");
    case HD_OP_MINIMUM:
        return LLVMBuildSelect(B, LLVMBuildICmp(B, sg ? LLVMIntSLT : LLVMIntULT, a, b, ""), a, b,
                               "");
    default: return a;
    }
}

/* cpu_grad's gelu_bwd, operation for operation: in double, g (Phi(x) + x
 * phi(x)) with Phi by libm's erf and phi by its exp; f32 rounded at the end. */
static LLVMValueRef gelu_bwd(hd_llvm_gen *G, LLVMValueRef x, LLVMValueRef g) {
    int f64 = is_f64(x);
    LLVMTypeRef dty = VT(f64);
    LLVMValueRef v = f64 ? x : LLVMBuildFPExt(B, x, dty, "");
    LLVMValueRef gd = f64 ? g : LLVMBuildFPExt(B, g, dty, "");
    LLVMValueRef e = LLVMBuildFMul(B, v, fconst(dty, 0.70710678118654752440), "");
    LLVMValueRef erf_e = hd_llvm_call_libm(G, "erf", &e, 1);
    LLVMValueRef cdf =
        LLVMBuildFMul(B, fconst(dty, 0.5), LLVMBuildFAdd(B, fconst(dty, 1.0), erf_e, ""), "");
    LLVMValueRef q = LLVMBuildFMul(B, LLVMBuildFMul(B, fconst(dty, -0.5), v, ""), v, "");
    LLVMValueRef pdf = LLVMBuildFMul(B, fconst(dty, 0.39894228040143267794),
                                     hd_llvm_call_libm(G, "exp", &q, 1), "");
    LLVMValueRef r =
        LLVMBuildFMul(B, gd, LLVMBuildFAdd(B, cdf, LLVMBuildFMul(B, v, pdf, ""), ""), "");
    return f64 ? r : LLVMBuildFPTrunc(B, r, VT(f32), "");
}

/* cpu_grad's tanh_bwd and sigmoid_bwd from the result y: the same
 * operations in the same order, each rounded (no contraction). */
static LLVMValueRef act_bwd(hd_llvm_gen *G, hd_op op, LLVMValueRef y, LLVMValueRef g) {
    LLVMValueRef one = fconst(LLVMTypeOf(y), 1.0);
    if (op == HD_OP_TANH_BWD)
        return LLVMBuildFMul(B, g, LLVMBuildFSub(B, one, LLVMBuildFMul(B, y, y, ""), ""), "");
    return LLVMBuildFMul(B, g, LLVMBuildFMul(B, y, LLVMBuildFSub(B, one, y, ""), ""), "");
}

LLVMValueRef hd_llvm_emit_node(hd_llvm_gen *G, const hd_ir_node *n, LLVMValueRef *args) {
    if (n->op == HD_OP_GELU_BWD) return gelu_bwd(G, args[0], args[1]);
    if (n->op == HD_OP_TANH_BWD || n->op == HD_OP_SIGMOID_BWD)
        return act_bwd(G, n->op, args[0], args[1]);
    const hd_ir_graph *g = G->plan->g;
    hd_dtype dt = g->values[n->in[0]].dtype, od = g->values[n->out].dtype;
    int fl = hd_dtype_is_float(dt);
    LLVMValueRef r;
    switch (hd_op_infos[n->op].kind) {
    case HD_KIND_UNARY:
        if (n->op == HD_OP_CAST) return hd_llvm_convert(G, args[0], dt, od);
        r = fl ? float_unary(G, n, args[0], dt) : int_unary(G, n, args[0], dt);
        return hd_llvm_round_half(G, r, od);
    case HD_KIND_BINARY:
        r = fl ? float_binary(G, n->op, args[0], args[1])
               : int_binary(G, n->op, args[0], args[1], dt);
        return hd_llvm_round_half(G, r, od);
    case HD_KIND_COMPARE: return compare(G, n->op, args[0], args[1], dt);
    default: /* where: any nonzero condition is true */
        return LLVMBuildSelect(
            B, LLVMBuildICmp(B, LLVMIntNE, args[0], hd_llvm_cint(LLVMTypeOf(args[0]), 0, 0), ""),
            args[1], args[2], "");
    }
}

#endif /* HODU_HAVE_LLVM */
