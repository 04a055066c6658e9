/* An optimizer's step over a list of parameters in one pass over each
 * (hd_backend.optim): Adam's (either weight decay), SGD's (momentum,
 * Nesterov, weight decay), Adagrad's, Lion's and RMSprop's (centered,
 * momentum, weight decay), as runtime/hd_backend.h writes them.
 *
 * stdlib/optim.hodu's steps run their ops one by one: Adam 14 a
 * parameter, each a pass over memory and a new tensor. Here each element
 * is read once and every intermediate result is rounded to the
 * parameter's dtype as the op making it would (f16 and bf16 computing in
 * f32, as the elementwise kernels do), so the values are the ops' bit for
 * bit. No multiply-add may be contracted: CMakeLists.txt compiles this
 * file with -ffp-contract=off (and -fno-math-errno). Large steps split the flat range of all
 * the parameters' elements over the threads. */
#include "cpu_kernels.h"
#include "../../runtime/hd_dtype.h"
#include "../../runtime/hd_tensor.h"

#include <math.h>

/* One kind and dtype over elements [i0, i1) of item it. */
typedef void (*cpu_optim_fn)(const hd_optim_step *o, const hd_optim_item *it, int64_t i0,
                             int64_t i1);

static inline float ld_f32(float x) {
    return x;
}
static inline float st_f32(float x) {
    return x;
}
static inline double ld_f64(double x) {
    return x;
}
static inline double st_f64(double x) {
    return x;
}

/* GCC's full vectorizer for these loops (-O2's takes only loops it can
 * vectorize without a scalar epilogue); CMakeLists.txt adds
 * -fno-math-errno, so that sqrt is the instruction (v is never negative;
 * NaN, as the op gives, where it were). */
#if defined(__GNUC__) && !defined(__clang__)
#define CPU_OPTIM_VEC __attribute__((optimize("O3")))
#else
#define CPU_OPTIM_VEC
#endif
#define CPU_OPTIM_INLINE static inline __attribute__((always_inline))

/* Where an item's state before is: none (a first step), its own tensors,
 * or the tensors the new state goes to (updated in place). */
enum { CPU_S0_NONE, CPU_S0_APART, CPU_S0_INPLACE };

static int cpu_optim_s0(const hd_optim_item *it) {
    return !it->s0[0] ? CPU_S0_NONE : it->s0[0] == it->s[0] ? CPU_S0_INPLACE : CPU_S0_APART;
}

/* The loop SWITCH(SUF, S0) for the place s0 of the state before, S0 a
 * constant in each: the loop's body is compiled once per place. */
#define CPU_S0_DISPATCH(SWITCH, SUF)                                                               \
    if (s0 == CPU_S0_NONE)                                                                         \
        SWITCH(SUF, CPU_S0_NONE)                                                                   \
    else if (s0 == CPU_S0_APART)                                                                   \
        SWITCH(SUF, CPU_S0_APART)                                                                  \
    else                                                                                           \
        SWITCH(SUF, CPU_S0_INPLACE)

/* The bodies for every option set (the last one the default), state
 * before at S0. */
#define CPU_ADAM_SWITCH(SUF, S0)                                                                   \
    switch (o->flags & (HD_OPTIM_DECAY | HD_OPTIM_WD)) {                                           \
    case 0: adam_body_##SUF(0, S0, p, g, m0, v0, m, v, o->c, n); break;                            \
    case 1: adam_body_##SUF(1, S0, p, g, m0, v0, m, v, o->c, n); break;                            \
    case 2: adam_body_##SUF(2, S0, p, g, m0, v0, m, v, o->c, n); break;                            \
    default: adam_body_##SUF(3, S0, p, g, m0, v0, m, v, o->c, n); break;                           \
    }
#define CPU_SGD_SWITCH(SUF, S0)                                                                    \
    switch (o->flags & (W | M | N)) {                                                              \
    case 0: sgd_body_##SUF(0, S0, p, g, b0, b, o->c, n); break;                                    \
    case W: sgd_body_##SUF(W, S0, p, g, b0, b, o->c, n); break;                                    \
    case M: sgd_body_##SUF(M, S0, p, g, b0, b, o->c, n); break;                                    \
    case W | M: sgd_body_##SUF(W | M, S0, p, g, b0, b, o->c, n); break;                            \
    case M | N: sgd_body_##SUF(M | N, S0, p, g, b0, b, o->c, n); break;                            \
    default: sgd_body_##SUF(W | M | N, S0, p, g, b0, b, o->c, n); break;                           \
    }

/* Adam's and SGD's loops for storage type S, compute type C. The bodies
 * take the options (fl) and where the state before is (s0) as
 * constants: each call below is a loop without branches, over operands
 * that do not overlap (the caller checks; state updated in place is read
 * through the pointer it is written through), so it runs in vectors. */
#define CPU_OPTIM(SUF, S, C, LD, ST, SQRT)                                                         \
    CPU_OPTIM_INLINE void adam_body_##SUF(                                                         \
        int fl, int s0, S *restrict p, const S *restrict g, const S *restrict m0,                  \
        const S *restrict v0, S *restrict m, S *restrict v, const double *cd, int64_t n) {         \
        C c1 = (C)cd[HD_ADAM_C1], c2 = (C)cd[HD_ADAM_C2], b1 = (C)cd[HD_ADAM_B1];                  \
        C b2 = (C)cd[HD_ADAM_B2], ss = (C)cd[HD_ADAM_SS], bc2 = (C)cd[HD_ADAM_BC2];                \
        C eps = (C)cd[HD_ADAM_EPS], l2 = (C)cd[HD_ADAM_L2], decay = (C)cd[HD_ADAM_DECAY];          \
        for (int64_t i = 0; i < n; i++) {                                                          \
            C pi = LD(p[i]), gi = LD(g[i]);                                                        \
            if (fl & HD_OPTIM_DECAY) pi = LD(ST(pi * decay));                                      \
            if (fl & HD_OPTIM_WD) gi = LD(ST(gi + LD(ST(l2 * pi))));                               \
            C mi = LD(ST(c1 * gi)), vi = LD(ST(LD(ST(c2 * gi)) * gi));                             \
            if (s0) {                                                                              \
                C mo = LD(s0 == CPU_S0_INPLACE ? m[i] : m0[i]);                                    \
                C vo = LD(s0 == CPU_S0_INPLACE ? v[i] : v0[i]);                                    \
                mi = LD(ST(LD(ST(b1 * mo)) + mi));                                                 \
                vi = LD(ST(LD(ST(b2 * vo)) + vi));                                                 \
            }                                                                                      \
            C den = LD(ST(LD(ST(LD(ST(SQRT(vi))) / bc2)) + eps));                                  \
            C upd = LD(ST(LD(ST(ss * mi)) / den));                                                 \
            m[i] = ST(mi);                                                                         \
            v[i] = ST(vi);                                                                         \
            p[i] = ST(pi - upd);                                                                   \
        }                                                                                          \
    }                                                                                              \
    CPU_OPTIM_VEC static void adam_##SUF(const hd_optim_step *o, const hd_optim_item *it,          \
                                         int64_t i0, int64_t i1) {                                 \
        S *p = (S *)hd_tensor_data(it->p) + i0, *m = (S *)hd_tensor_data(it->s[0]) + i0;           \
        S *v = (S *)hd_tensor_data(it->s[1]) + i0;                                                 \
        const S *g = (const S *)hd_tensor_data(it->g) + i0, *m0 = NULL, *v0 = NULL;                \
        int s0 = cpu_optim_s0(it);                                                                 \
        if (s0 == CPU_S0_APART)                                                                    \
            m0 = (const S *)hd_tensor_data(it->s0[0]) + i0,                                        \
            v0 = (const S *)hd_tensor_data(it->s0[1]) + i0;                                        \
        int64_t n = i1 - i0;                                                                       \
        CPU_S0_DISPATCH(CPU_ADAM_SWITCH, SUF)                                                      \
    }                                                                                              \
    CPU_OPTIM_INLINE void sgd_body_##SUF(int fl, int s0, S *restrict p, const S *restrict g,       \
                                         const S *restrict b0, S *restrict b, const double *cd,    \
                                         int64_t n) {                                              \
        C lr = (C)cd[HD_SGD_LR], mom = (C)cd[HD_SGD_MOM], wd = (C)cd[HD_SGD_WD];                   \
        for (int64_t i = 0; i < n; i++) {                                                          \
            C pi = LD(p[i]), gi = LD(g[i]);                                                        \
            if (fl & HD_OPTIM_WD) gi = LD(ST(gi + LD(ST(wd * pi))));                               \
            if (fl & HD_OPTIM_MOMENTUM) {                                                          \
                C bo = s0 ? LD(s0 == CPU_S0_INPLACE ? b[i] : b0[i]) : 0;                           \
                C bi = s0 ? LD(ST(LD(ST(mom * bo)) + gi)) : gi;                                    \
                b[i] = ST(bi);                                                                     \
                gi = fl & HD_OPTIM_NESTEROV ? LD(ST(gi + LD(ST(mom * bi)))) : bi;                  \
            }                                                                                      \
            p[i] = ST(pi - LD(ST(lr * gi)));                                                       \
        }                                                                                          \
    }                                                                                              \
    CPU_OPTIM_VEC static void sgd_##SUF(const hd_optim_step *o, const hd_optim_item *it,           \
                                        int64_t i0, int64_t i1) {                                  \
        S *p = (S *)hd_tensor_data(it->p) + i0, *b = NULL;                                         \
        const S *g = (const S *)hd_tensor_data(it->g) + i0, *b0 = NULL;                            \
        if (it->s[0]) b = (S *)hd_tensor_data(it->s[0]) + i0;                                      \
        int s0 = cpu_optim_s0(it);                                                                 \
        if (s0 == CPU_S0_APART) b0 = (const S *)hd_tensor_data(it->s0[0]) + i0;                    \
        int64_t n = i1 - i0;                                                                       \
        enum { W = HD_OPTIM_WD, M = HD_OPTIM_MOMENTUM, N = HD_OPTIM_NESTEROV };                    \
        CPU_S0_DISPATCH(CPU_SGD_SWITCH, SUF)                                                       \
    }

/* Adagrad's and Lion's loops, as CPU_OPTIM's. */
#define CPU_ADAGRAD_CALL(SUF, F, S0) adagrad_body_##SUF(F, S0, p, g, s0p, sp, o->c, n)
#define CPU_LION_CALL(SUF, F, S0)    lion_body_##SUF(F, S0, p, g, s0p, sp, o->c, n)
/* One state tensor: the bodies for the flag F on or off and each place of
 * the state before. */
#define CPU_ONE_STATE_SWITCH(CALL, SUF, F)                                                         \
    switch ((o->flags & (F) ? 1 : 0) + 2 * s0) {                                                   \
    case 0: CALL(SUF, 0, CPU_S0_NONE); break;                                                      \
    case 1: CALL(SUF, F, CPU_S0_NONE); break;                                                      \
    case 2: CALL(SUF, 0, CPU_S0_APART); break;                                                     \
    case 3: CALL(SUF, F, CPU_S0_APART); break;                                                     \
    case 4: CALL(SUF, 0, CPU_S0_INPLACE); break;                                                   \
    default: CALL(SUF, F, CPU_S0_INPLACE); break;                                                  \
    }
/* The entry point NAME of a kind with one state tensor (p, g, sp and its
 * state before s0p for CALL's body), F its one optional step. */
#define CPU_ONE_STATE_ENTRY(NAME, CALL, SUF, S, F)                                                 \
    CPU_OPTIM_VEC static void NAME(const hd_optim_step *o, const hd_optim_item *it, int64_t i0,    \
                                   int64_t i1) {                                                   \
        S *p = (S *)hd_tensor_data(it->p) + i0, *sp = (S *)hd_tensor_data(it->s[0]) + i0;          \
        const S *g = (const S *)hd_tensor_data(it->g) + i0, *s0p = NULL;                           \
        int s0 = cpu_optim_s0(it);                                                                 \
        if (s0 == CPU_S0_APART) s0p = (const S *)hd_tensor_data(it->s0[0]) + i0;                   \
        int64_t n = i1 - i0;                                                                       \
        CPU_ONE_STATE_SWITCH(CALL, SUF, F)                                                         \
    }
#define CPU_OPTIM_MORE(SUF, S, C, LD, ST, SQRT)                                                    \
    CPU_OPTIM_INLINE void adagrad_body_##SUF(int fl, int s0, S *restrict p, const S *restrict g,   \
                                             const S *restrict a0, S *restrict a,                  \
                                             const double *cd, int64_t n) {                        \
        C clr = (C)cd[HD_AGRAD_CLR], wd = (C)cd[HD_AGRAD_WD], eps = (C)cd[HD_AGRAD_EPS];           \
        C init = (C)cd[HD_AGRAD_INIT];                                                             \
        for (int64_t i = 0; i < n; i++) {                                                          \
            C pi = LD(p[i]), gi = LD(g[i]);                                                        \
            if (fl & HD_OPTIM_WD) gi = LD(ST(gi + LD(ST(wd * pi))));                               \
            C gg = LD(ST(gi * gi)), ai;                                                            \
            if (s0)                                                                                \
                ai = LD(ST(LD(s0 == CPU_S0_INPLACE ? a[i] : a0[i]) + gg));                         \
            else                                                                                   \
                ai = LD(ST(gg + init));                                                            \
            a[i] = ST(ai);                                                                         \
            C den = LD(ST(LD(ST(SQRT(ai))) + eps));                                                \
            p[i] = ST(pi - LD(ST(LD(ST(clr * gi)) / den)));                                        \
        }                                                                                          \
    }                                                                                              \
    CPU_OPTIM_INLINE void lion_body_##SUF(int fl, int s0, S *restrict p, const S *restrict g,      \
                                          const S *restrict m0, S *restrict m, const double *cd,   \
                                          int64_t n) {                                             \
        C c1 = (C)cd[HD_LION_C1], c2 = (C)cd[HD_LION_C2], b1 = (C)cd[HD_LION_B1];                  \
        C b2 = (C)cd[HD_LION_B2], lr = (C)cd[HD_LION_LR], decay = (C)cd[HD_LION_DECAY];            \
        for (int64_t i = 0; i < n; i++) {                                                          \
            C pi = LD(p[i]), gi = LD(g[i]);                                                        \
            C mo = s0 ? LD(s0 == CPU_S0_INPLACE ? m[i] : m0[i]) : LD(ST(gi * 0));                  \
            C c = LD(ST(LD(ST(b1 * mo)) + LD(ST(c1 * gi))));                                       \
            C sg = (C)(c > 0) - (C)(c < 0); /* the sign op's, without branches */                  \
            sg = c == c ? sg : c;           /* NaN */                                              \
            if (fl & HD_OPTIM_DECAY) pi = LD(ST(pi * decay));                                      \
            p[i] = ST(pi - LD(ST(lr * sg)));                                                       \
            m[i] = ST(LD(ST(b2 * mo)) + LD(ST(c2 * gi)));                                          \
        }                                                                                          \
    }                                                                                              \
    CPU_ONE_STATE_ENTRY(adagrad_##SUF, CPU_ADAGRAD_CALL, SUF, S, HD_OPTIM_WD)                      \
    CPU_ONE_STATE_ENTRY(lion_##SUF, CPU_LION_CALL, SUF, S, HD_OPTIM_DECAY)

/* RMSprop's loops: the options (WD, CENTERED, MOMENTUM) and the place of
 * the state before, as constants. */
#define CPU_RMS_CALL(SUF, F, S0) rms_body_##SUF(F, S0, p, g, v0, a0, b0, v, a, b, o->c, n)
#define CPU_RMS_FLAGS(SUF, S0)                                                                     \
    switch (o->flags & (RW | RC | RM)) {                                                           \
    case 0: CPU_RMS_CALL(SUF, 0, S0); break;                                                       \
    case RW: CPU_RMS_CALL(SUF, RW, S0); break;                                                     \
    case RC: CPU_RMS_CALL(SUF, RC, S0); break;                                                     \
    case RW | RC: CPU_RMS_CALL(SUF, RW | RC, S0); break;                                           \
    case RM: CPU_RMS_CALL(SUF, RM, S0); break;                                                     \
    case RW | RM: CPU_RMS_CALL(SUF, RW | RM, S0); break;                                           \
    case RC | RM: CPU_RMS_CALL(SUF, RC | RM, S0); break;                                           \
    default: CPU_RMS_CALL(SUF, RW | RC | RM, S0); break;                                           \
    }
#define CPU_OPTIM_RMS(SUF, S, C, LD, ST, SQRT)                                                     \
    CPU_OPTIM_INLINE void rms_body_##SUF(int fl, int s0, S *restrict p, const S *restrict g,       \
                                         const S *restrict v0, const S *restrict a0,               \
                                         const S *restrict b0, S *restrict v, S *restrict a,       \
                                         S *restrict b, const double *cd, int64_t n) {             \
        C lr = (C)cd[HD_RMS_LR], alpha = (C)cd[HD_RMS_ALPHA], ca = (C)cd[HD_RMS_CA];               \
        C eps = (C)cd[HD_RMS_EPS], wd = (C)cd[HD_RMS_WD], mom = (C)cd[HD_RMS_MOM];                 \
        int ip = s0 == CPU_S0_INPLACE;                                                             \
        for (int64_t i = 0; i < n; i++) {                                                          \
            C pi = LD(p[i]), gi = LD(g[i]);                                                        \
            if (fl & HD_OPTIM_WD) gi = LD(ST(gi + LD(ST(wd * pi))));                               \
            C vi = LD(ST(LD(ST(ca * gi)) * gi));                                                   \
            if (s0) vi = LD(ST(LD(ST(alpha * LD(ip ? v[i] : v0[i]))) + vi));                       \
            v[i] = ST(vi);                                                                         \
            C den = vi;                                                                            \
            if (fl & HD_OPTIM_CENTERED) {                                                          \
                C ai = LD(ST(ca * gi));                                                            \
                if (s0) ai = LD(ST(LD(ST(alpha * LD(ip ? a[i] : a0[i]))) + ai));                   \
                a[i] = ST(ai);                                                                     \
                den = LD(ST(vi - LD(ST(ai * ai))));                                                \
            }                                                                                      \
            C d = LD(ST(gi / LD(ST(LD(ST(SQRT(den))) + eps))));                                    \
            if (fl & HD_OPTIM_MOMENTUM) {                                                          \
                if (s0) d = LD(ST(LD(ST(mom * LD(ip ? b[i] : b0[i]))) + d));                       \
                b[i] = ST(d);                                                                      \
            }                                                                                      \
            p[i] = ST(pi - LD(ST(lr * d)));                                                        \
        }                                                                                          \
    }                                                                                              \
    CPU_OPTIM_VEC static void rmsprop_##SUF(const hd_optim_step *o, const hd_optim_item *it,       \
                                            int64_t i0, int64_t i1) {                              \
        S *p = (S *)hd_tensor_data(it->p) + i0, *st[3] = {NULL, NULL, NULL};                       \
        const S *g = (const S *)hd_tensor_data(it->g) + i0, *st0[3] = {NULL, NULL, NULL};          \
        int s0 = cpu_optim_s0(it);                                                                 \
        for (int q = 0; q < 3; q++) {                                                              \
            if (it->s[q]) st[q] = (S *)hd_tensor_data(it->s[q]) + i0;                              \
            if (it->s0[q] && s0 == CPU_S0_APART)                                                   \
                st0[q] = (const S *)hd_tensor_data(it->s0[q]) + i0;                                \
        }                                                                                          \
        S *v = st[0], *a = st[1], *b = st[2];                                                      \
        const S *v0 = st0[0], *a0 = st0[1], *b0 = st0[2];                                          \
        int64_t n = i1 - i0;                                                                       \
        enum { RW = HD_OPTIM_WD, RC = HD_OPTIM_CENTERED, RM = HD_OPTIM_MOMENTUM };                 \
        CPU_S0_DISPATCH(CPU_RMS_FLAGS, SUF)                                                        \
    }

CPU_OPTIM(f32, float, float, ld_f32, st_f32, sqrtf)
CPU_OPTIM(f64, double, double, ld_f64, st_f64, sqrt)
CPU_OPTIM(f16, uint16_t, float, hd_f16_to_f32, hd_f32_to_f16, sqrtf)
CPU_OPTIM(bf16, uint16_t, float, hd_bf16_to_f32, hd_f32_to_bf16, sqrtf)

CPU_OPTIM_MORE(f32, float, float, ld_f32, st_f32, sqrtf)
CPU_OPTIM_MORE(f64, double, double, ld_f64, st_f64, sqrt)
CPU_OPTIM_MORE(f16, uint16_t, float, hd_f16_to_f32, hd_f32_to_f16, sqrtf)
CPU_OPTIM_MORE(bf16, uint16_t, float, hd_bf16_to_f32, hd_f32_to_bf16, sqrtf)

CPU_OPTIM_RMS(f32, float, float, ld_f32, st_f32, sqrtf)
CPU_OPTIM_RMS(f64, double, double, ld_f64, st_f64, sqrt)
CPU_OPTIM_RMS(f16, uint16_t, float, hd_f16_to_f32, hd_f32_to_f16, sqrtf)
CPU_OPTIM_RMS(bf16, uint16_t, float, hd_bf16_to_f32, hd_f32_to_bf16, sqrtf)

#undef CPU_OPTIM
#undef CPU_OPTIM_MORE
#undef CPU_OPTIM_RMS

static cpu_optim_fn cpu_optim_pick(int kind, hd_dtype dt) {
    static const cpu_optim_fn fns[HD_OPTIM_KINDS][4] = {
        [HD_OPTIM_ADAM] = {adam_f32, adam_f64, adam_f16, adam_bf16},
        [HD_OPTIM_SGD] = {sgd_f32, sgd_f64, sgd_f16, sgd_bf16},
        [HD_OPTIM_ADAGRAD] = {adagrad_f32, adagrad_f64, adagrad_f16, adagrad_bf16},
        [HD_OPTIM_LION] = {lion_f32, lion_f64, lion_f16, lion_bf16},
        [HD_OPTIM_RMSPROP] = {rmsprop_f32, rmsprop_f64, rmsprop_f16, rmsprop_bf16},
    };
    int k = dt == HD_F32 ? 0 : dt == HD_F64 ? 1 : dt == HD_F16 ? 2 : dt == HD_BF16 ? 3 : -1;
    if (k < 0 || kind < 0 || kind >= HD_OPTIM_KINDS) return NULL;
    return fns[kind][k];
}

/* Elements [s, e) of the items' flat range. */
static void cpu_optim_range(const hd_optim_step *o, cpu_optim_fn fn, int64_t s, int64_t e) {
    int64_t at = 0;
    for (int k = 0; k < o->n && at < e; k++) {
        int64_t n = o->items[k].p->numel, lo = s > at ? s - at : 0, hi = e - at < n ? e - at : n;
        if (lo < hi) fn(o, &o->items[k], lo, hi);
        at += n;
    }
}

hd_status hd_cpu_optim(hd_ctx *ctx, const hd_optim_step *o) {
    cpu_optim_fn fn = cpu_optim_pick(o->kind, o->items[0].p->dtype);
    if (!fn) return hd_error(ctx, HD_ERR_ARGUMENT, "optimizer step: no cpu kernel for this dtype");
    int64_t total = 0;
    for (int k = 0; k < o->n; k++) total += o->items[k].p->numel;
    int64_t most = total / (CPU_PAR_MIN / 2);
    int nt = ctx->nthreads < 1 || total < CPU_PAR_MIN ? 1 : ctx->nthreads;
    if (nt > most) nt = (int)(most > 0 ? most : 1);
    if (nt <= 1) {
        cpu_optim_range(o, fn, 0, total);
        return HD_OK;
    }
    int64_t chunk = ((total + nt - 1) / nt + 63) & ~(int64_t)63;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        int64_t s = t * chunk, e = s + chunk < total ? s + chunk : total;
        if (s < e) cpu_optim_range(o, fn, s, e);
    }
    return HD_OK;
}
