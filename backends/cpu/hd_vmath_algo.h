/* The f32 vector math of the elementwise ops (exp, log, tanh, sigmoid, silu,
 * softplus, gelu, erf, erfc, sin, cos, pow), written once, over the VM_* operations,
 * and instantiated twice:
 *
 *   hd_vmath.h        C for the eager kernels (float, uint32_t, fmaf): GCC
 *                     vectorizes loops over these functions;
 *   jit/hd_llvm_ops.c LLVM IR builders for generated code (scalar or vector
 *                     values; the loop vectorizer takes the loops).
 *
 * Both instantiations evaluate the same IEEE operations in the same order,
 * with one rounding per operation (VM_FMA is a fused multiply-add, one
 * rounding; nothing else is contracted), so eager and compiled code give the
 * same bits. The algorithms are branch-free: every lane computes the same
 * operations, special cases are selected at the end.
 *
 * Error bounds against the exact result (docs/vmath.md has the method and
 * the measured figures; tests/unit/test_vmath.c checks them over dense
 * sweeps): exp 1.01 ulp, log 0.83, tanh 2.61, sigmoid 2.41, silu 3.40,
 * softplus 2.80, gelu 4.32, erf 0.98, erfc 4.37, sin 0.51, cos 0.54, pow
 * 0.51 (measured over all floats); subnormal results are within 0.5 to
 * 2.45 units of the smallest subnormal.
 *
 * An instantiation defines, before including this file (no include guard):
 *   VM_F, VM_U, VM_M       the types of an f32 value, a u32 value, a mask
 *   VM_FN1(name, a), VM_FN2(name, a, b)   a function's header
 *   VM_CALL1(name, a), VM_CALL2(name, a, b)
 *   VM_CF(c), VM_CU(c)     an f32 and a u32 constant
 *   VM_ADD, VM_SUB, VM_MUL, VM_DIV (a, b); VM_FMA(a, b, c) = a * b + c,
 *   rounded once; VM_NEG(a)
 *   VM_LT, VM_LE, VM_GT, VM_GE, VM_EQ (a, b): ordered compares (false on
 *   NaN); VM_ULT(a, b): unsigned u32 compare; VM_ILT(a, b): signed
 *   VM_MAND, VM_MOR (m, n); VM_MNOT(m)
 *   VM_SELF(m, a, b), VM_SELU(m, a, b): m ? a : b, lane by lane
 *   VM_BITS(f) -> u32, VM_FLT(u) -> f32: the same bits
 *   VM_UADD, VM_USUB, VM_UMUL, VM_UAND, VM_UOR, VM_UXOR (a, b); VM_SHL,
 *   VM_SHR (logical), VM_SAR (arithmetic) (a, constant k)
 *   VM_ITOF(u): the u32 read as a signed i32, to f32 (exact here)
 *   VM_UEQ(a, b): u32 equality -> mask
 *   VM_FNQ(name, a, q), VM_CALLQ(name, a, q): a function with an extra int
 *   argument, a constant where it is called
 *   optionally VM_LDEXP(t, n), VM_LDEXP_ON: t 2^n rounded once (n an
 *   integral float) and whether the code being made has it
 * and for the f64 arithmetic of sin, cos and pow:
 *   VM_D                   the type of an f64 value
 *   VM_CD(c)               an f64 constant
 *   VM_DADD, VM_DSUB, VM_DMUL (a, b); VM_DFMA(a, b, c); VM_DNEG(a)
 *   VM_ITOD(u): the u32 read as a signed i32, to f64; VM_DTOF(d): rounded
 *   to f32; VM_DLO(d): the low 32 bits of d's representation
 *   VM_TABD(i): hd_vm_pio2_tab[i] (i a u32)
 *   VM_FNSC(name, x, gh, gl, q), VM_CALLSC(...): a function of an f32, two
 *   f64 and a constant int
 *   VM_DDIV(a, b); VM_FTOD(f): exact; VM_DCLAMP(d, lo, hi): d held to
 *   [lo, hi], NaN kept; VM_DFROMHI(u): the f64 whose high 32 bits are u and
 *   low 32 bits 0; VM_FTOI(f): f32 to i32, toward zero (|f| < 2^31 here)
 */

/* ---- exp ---- */

/* 1.5 * 2^23: adding it rounds a float of magnitude < 2^22 to an integer,
 * which lands in the low bits of the sum's representation. */
#define HD_VM_SHIFT 0x1.8p23f
#define HD_VM_LOG2E 0x1.715476p+0f
/* ln 2 = HD_VM_LN2HI + HD_VM_LN2LO; HD_VM_LN2HI has 9 significant bits, so
 * x - n * HD_VM_LN2HI is exact for |n| < 2^15 (Cody and Waite). */
#define HD_VM_LN2HI 0.693359375f
#define HD_VM_LN2LO -2.12194440e-4f

/* exp(r) - 1 for |r| <= ln(2) / 2 + a little: r + r^2 P(r), P of degree 4
 * fitted here (minimax for the relative error of exp(r): 3.1e-9). */
VM_FN1(hd_vm_expm1_poly, r) {
    VM_F p = VM_CF(1.3814562497e-03f);
    p = VM_FMA(p, r, VM_CF(8.3687391021e-03f));
    p = VM_FMA(p, r, VM_CF(4.1668390076e-02f));
    p = VM_FMA(p, r, VM_CF(1.6666520449e-01f));
    p = VM_FMA(p, r, VM_CF(4.9999993436e-01f));
    return VM_FMA(p, VM_MUL(r, r), r);
}

/* 2^floor(k/2) and 2^ceil(k/2), for z holding k as HD_VM_SHIFT + k: the
 * low bits of z's representation are 0x4B400000 + k; shifting (x + 127)
 * left by 23 drops 0x4B400000's bits, which leaves the biased exponent. */
VM_FN1(hd_vm_scale1, z) {
    VM_U h = VM_SHR(VM_BITS(z), 1); /* 0x25A00000 + floor(k / 2) */
    return VM_FLT(VM_SHL(VM_UADD(h, VM_CU(127)), 23));
}

VM_FN1(hd_vm_scale2, z) {
    VM_U u = VM_BITS(z);
    return VM_FLT(VM_SHL(VM_UADD(VM_USUB(u, VM_SHR(u, 1)), VM_CU(127)), 23));
}

/* (1 + q) * 2^k, where z holds k as HD_VM_SHIFT + k (|k| <= 150): 2^k is
 * applied in two halves, 2^floor(k/2) then 2^ceil(k/2), both normal, so
 * that results down to the subnormals and up to the overflow come out
 * right. */
VM_FN2(hd_vm_exp_scale, q, z) {
#ifdef VM_LDEXP
    /* An instantiation with a one-step scaling (VM_LDEXP(t, n) = t 2^n
     * rounded once, n an integral float; AVX-512's vscalefps) uses it where
     * VM_LDEXP_ON: the same bits, since fma(q, s1, s1) is s1 (1 + q) with
     * 1 + q rounded (s1 (1 + q) is normal), and the product by s2 rounds
     * (1 + q) 2^k once. */
    if (VM_LDEXP_ON) return VM_LDEXP(VM_ADD(q, VM_CF(1.0f)), VM_SUB(z, VM_CF(HD_VM_SHIFT)));
#endif
    VM_F s1 = VM_CALL1(hd_vm_scale1, z);
    return VM_MUL(VM_FMA(q, s1, s1), VM_CALL1(hd_vm_scale2, z));
}

/* exp(x): x clamped to [-104, 89] (outside, exp is 0 or inf in f32; NaN
 * passes), k = round(x / ln 2), r = x - k ln 2 in two parts, exp(r) by the
 * polynomial, then the scaling. Max error 1.01 ulp. */
VM_FN1(hd_vm_expf, x) {
    VM_F xc = VM_SELF(VM_LT(x, VM_CF(-104.0f)), VM_CF(-104.0f), x);
    xc = VM_SELF(VM_GT(xc, VM_CF(89.0f)), VM_CF(89.0f), xc);
    VM_F z = VM_FMA(xc, VM_CF(HD_VM_LOG2E), VM_CF(HD_VM_SHIFT));
    VM_F n = VM_SUB(z, VM_CF(HD_VM_SHIFT));
    VM_F r = VM_FMA(n, VM_CF(-HD_VM_LN2HI), xc);
    r = VM_FMA(n, VM_CF(-HD_VM_LN2LO), r);
    return VM_CALL2(hd_vm_exp_scale, VM_CALL1(hd_vm_expm1_poly, r), z);
}

/* exp(x) for x <= 0 or NaN (the argument -|x| of sigmoid, silu and
 * softplus): hd_vm_expf without the upper clamp. */
VM_FN1(hd_vm_exp_neg, x) {
    VM_F xc = VM_SELF(VM_LT(x, VM_CF(-104.0f)), VM_CF(-104.0f), x);
    VM_F z = VM_FMA(xc, VM_CF(HD_VM_LOG2E), VM_CF(HD_VM_SHIFT));
    VM_F n = VM_SUB(z, VM_CF(HD_VM_SHIFT));
    VM_F r = VM_FMA(n, VM_CF(-HD_VM_LN2HI), xc);
    r = VM_FMA(n, VM_CF(-HD_VM_LN2LO), r);
    return VM_CALL2(hd_vm_exp_scale, VM_CALL1(hd_vm_expm1_poly, r), z);
}

/* ---- tanh, sigmoid, silu ---- */

/* tanh(x) = q / (q + 2) with q = expm1(2|x|), x's sign put back (so
 * tanh(-0) = -0). 2|x| is clamped to 20 (tanh is 1 in f32 from 9.01 on),
 * so 2^k needs no split. expm1 keeps its relative accuracy for small
 * arguments (k = 0 there, and q is the polynomial itself), so there is no
 * cancellation anywhere and no second formula for small x. Max error
 * 2.61 ulp. */
VM_FN1(hd_vm_tanhf, x) {
    VM_U sign = VM_UAND(VM_BITS(x), VM_CU(0x80000000u));
    VM_F y = VM_MUL(VM_FLT(VM_UXOR(VM_BITS(x), sign)), VM_CF(2.0f));
    y = VM_SELF(VM_GT(y, VM_CF(20.0f)), VM_CF(20.0f), y);
    VM_F z = VM_FMA(y, VM_CF(HD_VM_LOG2E), VM_CF(HD_VM_SHIFT));
    VM_F n = VM_SUB(z, VM_CF(HD_VM_SHIFT));
    /* one rounding of ln 2 suffices here: 0 <= k <= 29, and the relative
     * error k 1.9e-9 it leaves in exp(y) moves tanh by 2 exp(y) /
     * (exp(2y) - 1) times as much: less than 1e-8 */
    VM_F r = VM_FMA(n, VM_CF(-0x1.62e430p-1f), y);
    VM_F q = VM_CALL1(hd_vm_expm1_poly, r);
    VM_F s = VM_FLT(VM_SHL(VM_UADD(VM_BITS(z), VM_CU(127)), 23)); /* 2^k, 0 <= k <= 29 */
    VM_F em1 = VM_FMA(q, s, VM_SUB(s, VM_CF(1.0f)));
    VM_F t = VM_DIV(em1, VM_ADD(em1, VM_CF(2.0f)));
    return VM_FLT(VM_UOR(VM_BITS(t), sign));
}

/* sigmoid(x) = 1 / (1 + e) for x >= 0, e / (1 + e) for x < 0, with
 * e = exp(-|x|) <= 1: no overflow, and results down to the subnormals
 * (sigmoid(-100) = 3.7e-44) for negative x. Max error 2.41 ulp. */
VM_FN1(hd_vm_sigmoidf, x) {
    VM_F e = VM_CALL1(hd_vm_exp_neg, VM_FLT(VM_UOR(VM_BITS(x), VM_CU(0x80000000u))));
    VM_F num = VM_SELF(VM_LT(x, VM_CF(0.0f)), e, VM_CF(1.0f));
    return VM_DIV(num, VM_ADD(VM_CF(1.0f), e));
}

/* silu(x) = x sigmoid(x): x / (1 + e) for x >= 0, (x e) / (1 + e) for
 * x < 0 (e = exp(-|x|)). Below about -87, e is subnormal and the result
 * loses precision gradually (torch's x / (1 + exp(-x)) gives -0 there).
 * Max error 3.40 ulp where e is normal. */
VM_FN1(hd_vm_siluf, x) {
    VM_F e = VM_CALL1(hd_vm_exp_neg, VM_FLT(VM_UOR(VM_BITS(x), VM_CU(0x80000000u))));
    VM_F num = VM_SELF(VM_LT(x, VM_CF(0.0f)), VM_MUL(x, e), x);
    return VM_DIV(num, VM_ADD(VM_CF(1.0f), e));
}

/* ---- log, softplus ---- */

/* log(x): subnormal x scaled by 2^23 first; x = 2^k m with m in
 * [sqrt(1/2), sqrt(2)) (integer arithmetic on the representation); f = m - 1
 * (exact); log(1 + f) = f - f^2 / 2 + f^3 P(f) with Cephes' logf
 * polynomial; k ln 2 added in two parts. log(0) = -inf, log(x < 0) = NaN,
 * log(inf) = inf, NaN stays NaN. Max error 0.83 ulp. */
VM_FN1(hd_vm_logf, x) {
    VM_M tiny = VM_LT(x, VM_CF(0x1p-126f));
    VM_F xs = VM_SELF(tiny, VM_MUL(x, VM_CF(0x1p23f)), x);
    VM_U u = VM_USUB(VM_BITS(xs), VM_CU(0x3F3504F3u)); /* sqrt(1/2) */
    VM_F k = VM_ITOF(VM_SAR(u, 23));
    k = VM_SELF(tiny, VM_SUB(k, VM_CF(23.0f)), k);
    VM_F f =
        VM_SUB(VM_FLT(VM_UADD(VM_UAND(u, VM_CU(0x007FFFFFu)), VM_CU(0x3F3504F3u))), VM_CF(1.0f));
    VM_F z = VM_MUL(f, f);
    VM_F p = VM_CF(7.0376836292e-2f);
    p = VM_FMA(p, f, VM_CF(-1.1514610310e-1f));
    p = VM_FMA(p, f, VM_CF(1.1676998740e-1f));
    p = VM_FMA(p, f, VM_CF(-1.2420140846e-1f));
    p = VM_FMA(p, f, VM_CF(1.4249322787e-1f));
    p = VM_FMA(p, f, VM_CF(-1.6668057665e-1f));
    p = VM_FMA(p, f, VM_CF(2.0000714765e-1f));
    p = VM_FMA(p, f, VM_CF(-2.4999993993e-1f));
    p = VM_FMA(p, f, VM_CF(3.3333331174e-1f));
    VM_F y = VM_MUL(VM_MUL(p, f), z);
    y = VM_FMA(k, VM_CF(HD_VM_LN2LO), y);
    y = VM_FMA(z, VM_CF(-0.5f), y);
    VM_F r = VM_FMA(k, VM_CF(HD_VM_LN2HI), VM_ADD(f, y));
    /* x in (0, inf) keeps r; else 0 -> -inf, negative -> NaN, inf and NaN
     * -> x */
    VM_F sp = VM_SELF(VM_LT(x, VM_CF(0.0f)), VM_CF(NAN), x);
    sp = VM_SELF(VM_EQ(x, VM_CF(0.0f)), VM_CF(-INFINITY), sp);
    VM_M ok = VM_MAND(VM_GT(x, VM_CF(0.0f)), VM_LT(x, VM_CF(INFINITY)));
    return VM_SELF(ok, r, sp);
}

/* softplus(x) (beta 1, threshold 20, as torch): x above 20, else
 * max(x, 0) + log1p(e) with e = exp(-|x|) in (0, 1]; log1p(e) =
 * 2 atanh(s), s = e / (2 + e) <= 1/3, as 2 s (1 + s^2 R(s^2)) (the atanh
 * series, truncated where it is below 2^-27). Max error 2.80 ulp. */
VM_FN1(hd_vm_softplusf, x) {
    VM_F e = VM_CALL1(hd_vm_exp_neg, VM_FLT(VM_UOR(VM_BITS(x), VM_CU(0x80000000u))));
    VM_F s = VM_DIV(e, VM_ADD(e, VM_CF(2.0f)));
    VM_F w = VM_MUL(s, s);
    VM_F p = VM_CF(1.0f / 13.0f);
    p = VM_FMA(p, w, VM_CF(1.0f / 11.0f));
    p = VM_FMA(p, w, VM_CF(1.0f / 9.0f));
    p = VM_FMA(p, w, VM_CF(1.0f / 7.0f));
    p = VM_FMA(p, w, VM_CF(1.0f / 5.0f));
    p = VM_FMA(p, w, VM_CF(1.0f / 3.0f));
    VM_F s2 = VM_ADD(s, s);
    VM_F l = VM_FMA(VM_MUL(s2, w), p, s2);
    VM_F pos = VM_SELF(VM_GT(x, VM_CF(0.0f)), x, VM_CF(0.0f));
    return VM_SELF(VM_GT(x, VM_CF(20.0f)), x, VM_ADD(pos, l));
}

/* ---- gelu, erfc, erf ---- */

/* t = 1 / (1 + c a) and the correction tl with t + tl = 1 / (1 + c a) to
 * about 2^-48: 1 + c a = dh + dl exactly, then a Newton step's correction
 * kept apart (the rounding of t would be magnified by P's slope, and
 * where t is near 1 it would lose a's information). */
VM_FN2(hd_vm_erfc_t, a, c) {
    return VM_DIV(VM_CF(1.0f), VM_FMA(a, c, VM_CF(1.0f)));
}

VM_FN2(hd_vm_erfc_tl, a, c) {
    VM_F dh = VM_FMA(a, c, VM_CF(1.0f));
    VM_F dl = VM_FMA(a, c, VM_SUB(VM_CF(1.0f), dh));
    VM_F t = VM_DIV(VM_CF(1.0f), dh);
    VM_F et = VM_FMA(VM_NEG(dh), t, VM_CF(1.0f));
    return VM_MUL(t, VM_FMA(VM_NEG(dl), t, et));
}

/* exp(b + sm) / 2^k - 1 for b + sm <= 0 with b a float whose reduction by
 * n ln 2 is exact (-a^2 or -a^2 / 2: the Cody-Waite first part has 9
 * bits) and sm small, z = hd_vm_exp_z(b, sm) holding k: sm is added
 * after the exact reduction, so exp keeps its relative accuracy however
 * large b is. */
VM_FN2(hd_vm_exp_z, b, sm) {
    return VM_FMA(VM_ADD(b, sm), VM_CF(HD_VM_LOG2E), VM_CF(HD_VM_SHIFT));
}

VM_FN2(hd_vm_expm1_split, b, sm) {
    VM_F n = VM_SUB(VM_CALL2(hd_vm_exp_z, b, sm), VM_CF(HD_VM_SHIFT));
    VM_F r = VM_ADD(VM_FMA(n, VM_CF(-HD_VM_LN2HI), b), sm);
    r = VM_FMA(n, VM_CF(-HD_VM_LN2LO), r);
    return VM_CALL1(hd_vm_expm1_poly, r);
}

/* P(v) of the erfc form below: erfc(y) = t exp(-y^2 + P(t)), t = 1 / (1 +
 * y / 2), v = t - 0.55 (the form of Numerical Recipes' erfcc; P of degree
 * 10, fitted here to 7e-9 over y in [0, 10.6]). gelu, erf and erfc share it. */
VM_FN1(hd_vm_erfc_poly, v) {
    VM_F p = VM_CF(-1.3276651673e-01f);
    p = VM_FMA(p, v, VM_CF(1.8909695645e-01f));
    p = VM_FMA(p, v, VM_CF(8.7783257473e-02f));
    p = VM_FMA(p, v, VM_CF(-2.7543909190e-01f));
    p = VM_FMA(p, v, VM_CF(8.9867687354e-03f));
    p = VM_FMA(p, v, VM_CF(2.9963432286e-01f));
    p = VM_FMA(p, v, VM_CF(-8.4472884015e-02f));
    p = VM_FMA(p, v, VM_CF(-3.9945942328e-01f));
    p = VM_FMA(p, v, VM_CF(1.3109072196e-01f));
    p = VM_FMA(p, v, VM_CF(1.3613398907e+00f));
    p = VM_FMA(p, v, VM_CF(-6.0410411908e-01f));
    return p;
}

/* gelu(x) = x Phi(x) (torch's exact form, 0.5 x (1 + erf(x / sqrt 2))),
 * with Phi(-a) = erfc(a / sqrt 2) / 2 for a = |x| written as
 * t exp(-a^2 / 2 + P(t)) / 2, t = 1 / (1 + a / (2 sqrt 2)) (the form of
 * Numerical Recipes' erfcc; P, of degree 10 in t - 0.55, is fitted here to
 * 7e-9 over a in [0, 15]); Phi(x) = 1 - Phi(-a) for x >= 0.
 * - a^2 is split exactly into hi + lo (FMA): -hi / 2 goes into the
 *   Cody-Waite reduction exactly and the rest is added to the reduced
 *   argument, so the exponential keeps its relative accuracy in the far
 *   tail;
 * - the product x t / 2 is taken before the second half of the scaling
 *   2^k, so a result in the subnormals (x < -13.1) is rounded once.
 * Max error 4.32 ulp. */
VM_FN1(hd_vm_geluf, x) {
    VM_F a = VM_FLT(VM_UAND(VM_BITS(x), VM_CU(0x7FFFFFFFu)));
    VM_M far = VM_GT(a, VM_CF(15.0f)); /* Phi(-a) is 0 in f32 for any x */
    a = VM_SELF(far, VM_CF(15.0f), a);
    VM_F t = VM_CALL2(hd_vm_erfc_t, a, VM_CF(0.353553391f));
    VM_F tl = VM_CALL2(hd_vm_erfc_tl, a, VM_CF(0.353553391f));
    VM_F v = VM_ADD(VM_SUB(t, VM_CF(0.55f)), tl); /* the subtraction is exact */
    VM_F p = VM_CALL1(hd_vm_erfc_poly, v);
    VM_F hi = VM_MUL(a, a);
    VM_F b = VM_MUL(hi, VM_CF(-0.5f));                           /* exact */
    VM_F sm = VM_FMA(VM_FMA(a, a, VM_NEG(hi)), VM_CF(-0.5f), p); /* -lo / 2 + P */
    VM_F z = VM_CALL2(hd_vm_exp_z, b, sm);
    VM_F q = VM_CALL2(hd_vm_expm1_split, b, sm);
    /* 2^k = s1 s2 as in hd_vm_exp_scale; -166 <= k <= 0 */
    VM_F s1 = VM_CALL1(hd_vm_scale1, z), s2 = VM_CALL1(hd_vm_scale2, z);
    VM_F m = VM_MUL(s1, VM_CF(0.5f)); /* exact */
    VM_F g = VM_FMA(q, m, m);
    g = VM_FMA(g, t, VM_MUL(g, tl)); /* Phi(-a) / s2, a normal float */
    g = VM_SELF(far, VM_CF(0.0f), g);
    VM_F neg = VM_MUL(VM_MUL(x, g), s2);
    VM_F pos = VM_MUL(x, VM_SUB(VM_CF(1.0f), VM_MUL(g, s2)));
    return VM_SELF(VM_LT(x, VM_CF(0.0f)), neg, pos);
}

/* erfc(y) for y in [0, 10.5] (above 10.06 it rounds to 0), NaN passing:
 * t exp(-y^2 + P(t)) as gelu's Phi(-a) with a = y sqrt 2 (the same t and
 * P; the exact split of y^2, t kept as t + tl), the exponential scaled in
 * two halves so that a subnormal result is rounded once, at the end. */
VM_FN1(hd_vm_erfc_pos, y) {
    VM_F t = VM_CALL2(hd_vm_erfc_t, y, VM_CF(0.5f));
    VM_F tl = VM_CALL2(hd_vm_erfc_tl, y, VM_CF(0.5f));
    VM_F v = VM_ADD(VM_SUB(t, VM_CF(0.55f)), tl);
    VM_F p = VM_CALL1(hd_vm_erfc_poly, v);
    VM_F hi = VM_MUL(y, y);
    VM_F b = VM_NEG(hi);
    VM_F sm = VM_SUB(p, VM_FMA(y, y, b)); /* -lo + P */
    VM_F z = VM_CALL2(hd_vm_exp_z, b, sm);
    VM_F q = VM_CALL2(hd_vm_expm1_split, b, sm);
    /* 2^k = s1 s2 as in hd_vm_exp_scale; -161 <= k <= 0 */
    VM_F s1 = VM_CALL1(hd_vm_scale1, z), s2 = VM_CALL1(hd_vm_scale2, z);
    VM_F g = VM_FMA(q, s1, s1);
    g = VM_FMA(g, t, VM_MUL(g, tl)); /* erfc(y) / s2, a normal float */
    return VM_MUL(g, s2);
}

/* erfc(x) = erfc(|x|) for x >= 0, 2 - erfc(|x|) below (|x| held to 10.5,
 * NaN kept). Max error 4.37 ulp. */
VM_FN1(hd_vm_erfcf, x) {
    VM_F a = VM_FLT(VM_UAND(VM_BITS(x), VM_CU(0x7FFFFFFFu)));
    a = VM_SELF(VM_GT(a, VM_CF(10.5f)), VM_CF(10.5f), a);
    VM_F e = VM_CALL1(hd_vm_erfc_pos, a);
    return VM_SELF(VM_LT(x, VM_CF(0.0f)), VM_SUB(VM_CF(2.0f), e), e);
}

/* erf(x): for |x| < 0.9, x + x R(x^2) (R of degree 6, fitted here to
 * 2.9e-10 over [0, 0.81]; the one rounding of the last FMA dominates),
 * above, 1 - erfc(|x|) with x's sign (erfc(0.9) = 0.2, so erfc's error
 * counts a fifth). Max error 0.98 ulp. */
VM_FN1(hd_vm_erff, x) {
    VM_U sign = VM_UAND(VM_BITS(x), VM_CU(0x80000000u));
    VM_F a = VM_FLT(VM_UXOR(VM_BITS(x), sign));
    VM_F u = VM_MUL(x, x);
    VM_F p = VM_CF(8.5388361185e-05f);
    p = VM_FMA(p, u, VM_CF(-8.1819266779e-04f));
    p = VM_FMA(p, u, VM_CF(5.2044359036e-03f));
    p = VM_FMA(p, u, VM_CF(-2.6860753074e-02f));
    p = VM_FMA(p, u, VM_CF(1.1283719540e-01f));
    p = VM_FMA(p, u, VM_CF(-3.7612634897e-01f));
    p = VM_FMA(p, u, VM_CF(1.2837916613e-01f));
    VM_F small = VM_FMA(x, p, x);
    VM_F ac = VM_SELF(VM_GT(a, VM_CF(10.5f)), VM_CF(10.5f), a);
    VM_F big = VM_SUB(VM_CF(1.0f), VM_CALL1(hd_vm_erfc_pos, ac));
    big = VM_FLT(VM_UOR(VM_BITS(big), sign));
    return VM_SELF(VM_LT(a, VM_CF(0.9f)), small, big);
}

/* ---- sin, cos ---- */

/* sin(x) for q = 0, cos(x) = sin(x + pi / 2) for q = 1, in f64 arithmetic
 * (the result is rounded to f32 once, at the end):
 * - reduction, for every float: x = M 2^(E - 150) with M < 2^24 an integer,
 *   so x 2 / pi = M G(E) modulo 4, G(E) = gh + gl from the table (two
 *   doubles, 106 bits, scripts/gen_vmath_tab.py; reduced modulo 4 from
 *   |x| = 2^25 on, below which M G < 2^49 and the shift below still rounds
 *   it to an integer exactly). M * G is one exact product (FMA), so
 *   x 2 / pi = n + f with |f| <= 1/2 keeps f's relative accuracy even where
 *   x is huge or near a multiple of pi / 2 (Payne and Hanek's method, with
 *   the bits chosen by a table lookup instead of shifts);
 * - r = f pi / 2, |r| <= pi / 4; sin r = r + r^3 S(r^2), cos r =
 *   1 + r^2 C(r^2), S and C of degree 3 fitted here (relative errors 5e-12
 *   and 6e-11);
 * - quadrant n + q: sin r, cos r, -sin r or -cos r; sin is odd.
 * inf and NaN give NaN. Max error 0.51 ulp (sin), 0.54 (cos). */
VM_FNSC(hd_vm_sincos_core, x, gh, gl, q) {
    VM_U ax = VM_UAND(VM_BITS(x), VM_CU(0x7FFFFFFFu));
    VM_U m = VM_SELU(VM_ULT(ax, VM_CU(0x00800000u)), ax,
                     VM_UOR(VM_UAND(ax, VM_CU(0x007FFFFFu)), VM_CU(0x00800000u)));
    VM_D md = VM_ITOD(m);
    VM_D ph = VM_DMUL(md, gh);
    VM_D pl = VM_DFMA(md, gl, VM_DFMA(md, gh, VM_DNEG(ph))); /* ph + pl = M G */
    VM_D sh = VM_DADD(ph, VM_CD(0x1.8p52));                  /* n in its low bits */
    VM_D f = VM_DADD(VM_DSUB(ph, VM_DSUB(sh, VM_CD(0x1.8p52))), pl);
    VM_D r = VM_DMUL(f, VM_CD(1.5707963267948966));
    VM_D r2 = VM_DMUL(r, r);
    VM_D sp = VM_CD(2.7181122188098032e-06);
    sp = VM_DFMA(sp, r2, VM_CD(-0.00019839311288546345));
    sp = VM_DFMA(sp, r2, VM_CD(0.0083333293018131895));
    sp = VM_DFMA(sp, r2, VM_CD(-0.16666666640771086));
    VM_D cp = VM_CD(2.4383462351899689e-05);
    cp = VM_DFMA(cp, r2, VM_CD(-0.0013886680535390788));
    cp = VM_DFMA(cp, r2, VM_CD(0.041666620322009726));
    cp = VM_DFMA(cp, r2, VM_CD(-0.49999999694165925));
    VM_F sv = VM_DTOF(VM_DFMA(VM_DMUL(r, r2), sp, r));
    VM_F cv = VM_DTOF(VM_DFMA(r2, cp, VM_CD(1.0)));
    VM_U quad = VM_UADD(VM_DLO(sh), VM_CU(q));
    VM_F v = VM_SELF(VM_UEQ(VM_UAND(quad, VM_CU(1)), VM_CU(0)), sv, cv);
    VM_U flip = VM_SHL(VM_UAND(quad, VM_CU(2)), 30);
    if (q == 0) flip = VM_UXOR(flip, VM_UAND(VM_BITS(x), VM_CU(0x80000000u)));
    v = VM_FLT(VM_UXOR(VM_BITS(v), flip));
    return VM_SELF(VM_ULT(ax, VM_CU(0x7F800000u)), v, VM_CF(NAN));
}

VM_FNQ(hd_vm_sincosf, x, q) {
    VM_U e = VM_SHR(VM_UAND(VM_BITS(x), VM_CU(0x7FFFFFFFu)), 23);
    return VM_CALLSC(hd_vm_sincos_core, x, VM_TABD(e), VM_TABD(VM_UADD(e, VM_CU(256))), q);
}

VM_FN1(hd_vm_sinf, x) {
    return VM_CALLQ(hd_vm_sincosf, x, 0);
}

VM_FN1(hd_vm_cosf, x) {
    return VM_CALLQ(hd_vm_sincosf, x, 1);
}

/* ---- pow ---- */

/* pow(x, y) = 2^(y log2|x|) in f64, rounded to f32 once, with the sign and
 * the special cases of C99's powf:
 * - log2|x|: |x| = 2^k m (subnormals scaled by 2^23 first), m in
 *   [sqrt(1/2), sqrt(2)), log m = 2 atanh(s) = 2 s + 2 s^3 A(s^2),
 *   s = (m - 1) / (m + 1), A of degree 4 fitted here (3e-14);
 * - t = y log2|x| (exact to 2^-52 relative), held to [-160, 160] (beyond,
 *   the result over- or underflows in f32);
 * - 2^t = 2^n 2^f, t = n + f, |f| <= 1/2, 2^f = 1 + f P(f), P of degree 6
 *   fitted here (5e-11); 2^n built in the exponent bits; the f64 product is
 *   exact and rounds to f32 once (subnormal and overflowing results too);
 * - negative x: y an odd integer negates, y not an integer gives NaN;
 *   pow(x, +-0) = 1 and pow(1, y) = 1 even for NaN; 0, inf and NaN
 *   operands as C99;
 * - y = 2: x * x.
 * Max error 0.51 ulp. */
VM_FN2(hd_vm_powf, x, y) {
    VM_U ux = VM_BITS(x);
    VM_F ax = VM_FLT(VM_UAND(ux, VM_CU(0x7FFFFFFFu)));
    VM_F ay = VM_FLT(VM_UAND(VM_BITS(y), VM_CU(0x7FFFFFFFu)));
    VM_M tiny = VM_LT(ax, VM_CF(0x1p-126f));
    VM_F xs = VM_SELF(tiny, VM_MUL(ax, VM_CF(0x1p23f)), ax);
    VM_U u = VM_USUB(VM_BITS(xs), VM_CU(0x3F3504F3u)); /* sqrt(1/2) */
    VM_U k = VM_USUB(VM_SAR(u, 23), VM_SELU(tiny, VM_CU(23), VM_CU(0)));
    VM_D m = VM_FTOD(VM_FLT(VM_UADD(VM_UAND(u, VM_CU(0x007FFFFFu)), VM_CU(0x3F3504F3u))));
    VM_D s = VM_DDIV(VM_DSUB(m, VM_CD(1.0)), VM_DADD(m, VM_CD(1.0)));
    VM_D w = VM_DMUL(s, s);
    VM_D a = VM_CD(0.097932192251459188);
    a = VM_DFMA(a, w, VM_CD(0.11088022265234193));
    a = VM_DFMA(a, w, VM_CD(0.14286056115687068));
    a = VM_DFMA(a, w, VM_CD(0.19999997798340247));
    a = VM_DFMA(a, w, VM_CD(0.33333333337931331));
    VM_D s2 = VM_DADD(s, s);
    VM_D lm = VM_DFMA(VM_DMUL(s2, w), a, s2);                     /* log m */
    VM_D l2 = VM_DFMA(lm, VM_CD(1.4426950408889634), VM_ITOD(k)); /* log2|x| */
    VM_D t = VM_DCLAMP(VM_DMUL(VM_FTOD(y), l2), -160.0, 160.0);
    VM_D sh = VM_DADD(t, VM_CD(0x1.8p52)); /* n = round(t) in its low bits */
    VM_D f = VM_DSUB(t, VM_DSUB(sh, VM_CD(0x1.8p52)));
    VM_D p = VM_CD(1.5196141818396031e-05);
    p = VM_DFMA(p, f, VM_CD(0.00015466784906043444));
    p = VM_DFMA(p, f, VM_CD(0.0013333935357645668));
    p = VM_DFMA(p, f, VM_CD(0.0096180380499668681));
    p = VM_DFMA(p, f, VM_CD(0.05550410365350187));
    p = VM_DFMA(p, f, VM_CD(0.24022651067061532));
    p = VM_DFMA(p, f, VM_CD(0.69314718070478532));
    VM_D e2 = VM_DFMA(f, p, VM_CD(1.0));
    VM_D sc = VM_DFROMHI(VM_SHL(VM_UADD(VM_DLO(sh), VM_CU(1023)), 20)); /* 2^n */
    VM_F r = VM_DTOF(VM_DMUL(e2, sc));
    /* y an integer (every float from 2^24 on, inf too, is an even one), odd */
    VM_M ybig = VM_GE(ay, VM_CF(0x1p24f));
    VM_F ayc = VM_SELF(VM_LT(ay, VM_CF(0x1p24f)), ay, VM_CF(0x1p24f)); /* NaN -> 2^24 */
    VM_U yi = VM_FTOI(ayc);
    VM_M yint = VM_MOR(ybig, VM_EQ(VM_ITOF(yi), ayc));
    VM_M yodd =
        VM_MAND(VM_MAND(VM_MNOT(ybig), yint), VM_MNOT(VM_UEQ(VM_UAND(yi, VM_CU(1)), VM_CU(0))));
    VM_M yneg = VM_LT(y, VM_CF(0.0f));
    r = VM_SELF(VM_EQ(ax, VM_CF(0.0f)), VM_SELF(yneg, VM_CF(INFINITY), VM_CF(0.0f)), r);
    r = VM_SELF(VM_EQ(ax, VM_CF(INFINITY)), VM_SELF(yneg, VM_CF(0.0f), VM_CF(INFINITY)), r);
    VM_M xneg = VM_MNOT(VM_UEQ(VM_UAND(ux, VM_CU(0x80000000u)), VM_CU(0)));
    r = VM_FLT(VM_UXOR(VM_BITS(r), VM_SELU(VM_MAND(xneg, yodd), VM_CU(0x80000000u), VM_CU(0))));
    VM_M nan = VM_MOR(VM_MNOT(VM_EQ(ax, ax)), VM_MNOT(VM_EQ(ay, ay)));
    nan = VM_MOR(
        nan, VM_MAND(VM_MAND(VM_LT(x, VM_CF(0.0f)), VM_GT(x, VM_CF(-INFINITY))), VM_MNOT(yint)));
    r = VM_SELF(nan, VM_CF(NAN), r);
    VM_M one = VM_MOR(VM_EQ(x, VM_CF(1.0f)), VM_EQ(ay, VM_CF(0.0f)));
    one = VM_MOR(one, VM_MAND(VM_EQ(ax, VM_CF(1.0f)), VM_EQ(ay, VM_CF(INFINITY))));
    r = VM_SELF(one, VM_CF(1.0f), r);
    /* pow(x, 2) is x * x, rounded once: exact where the f64 path above can
     * round a square that is a midpoint of two floats the wrong way (x = 1
     * + 2^-12), every special case the same, and the eager kernels' loop
     * for x ** 2 is a multiply (cpu_elementwise.c). */
    return VM_SELF(VM_EQ(y, VM_CF(2.0f)), VM_MUL(x, x), r);
}
