/* An optimizer's step over a list of parameters as one kernel
 * (hd_backend.optim): Adam's (with either weight decay), SGD's (with
 * momentum, Nesterov and weight decay), Adagrad's, Lion's and RMSprop's.
 *
 * stdlib/optim.hodu's steps run their ops one by one (Adam 14 a
 * parameter, each a launch and a pass over memory on this backend); these
 * kernels make them one launch for up to HD_CUDA_OPTIM_N parameters of one
 * dtype, rounding every intermediate result to the parameter's dtype as
 * those ops do (NVRTC compiles with --fmad=false: no multiply-add is
 * contracted), so their bits are the ops' bits. The parameters' addresses
 * travel in a table passed by value (as PyTorch's multi-tensor kernels
 * take theirs): nothing is copied up. The new state is the state before,
 * updated in place, where nobody else holds it (lang/builtins_optim.c
 * decides), else new tensors, as the ops' results are (a moment the
 * caller kept keeps its values); p is written in place with its write
 * count moved on, as p[...] = ... does. */
#if HODU_HAVE_CUDA
#include "cuda_int.h"
#include "hd_backend.h"
#include "hd_profile.h"

/* The table, as the kernels' o_list<S> lays it out (O_N is
 * HD_CUDA_OPTIM_N in the source): eight pointers per parameter (p, g, the
 * three states before and after: null where the options use none), where
 * each parameter's elements end in the running count, and the count. */
typedef struct cuda_optim_list {
    void *p[HD_CUDA_OPTIM_N], *g[HD_CUDA_OPTIM_N];
    void *s0[HD_OPTIM_STATE][HD_CUDA_OPTIM_N], *s[HD_OPTIM_STATE][HD_CUDA_OPTIM_N];
    long long end[HD_CUDA_OPTIM_N];
    int n;
} cuda_optim_list;

/* clang-format off */
static const char optim_src[] =
    /* T's storage type S, compute type C, and the rounding of a C to T */
    "template <int K> struct a_ty;\n"
    "template <> struct a_ty<0> { typedef float S; typedef float C;\n"
    "  static __device__ float ld(float x) { return x; }\n"
    "  static __device__ float st(float x) { return x; } };\n"
    "template <> struct a_ty<1> { typedef double S; typedef double C;\n"
    "  static __device__ double ld(double x) { return x; }\n"
    "  static __device__ double st(double x) { return x; } };\n"
    "template <> struct a_ty<2> { typedef u16 S; typedef float C;\n"
    "  static __device__ float ld(u16 x) { return ld_f16(x); }\n"
    "  static __device__ u16 st(float x) { return st_f16(x); } };\n"
    "template <> struct a_ty<3> { typedef u16 S; typedef float C;\n"
    "  static __device__ float ld(u16 x) { return ld_bf16(x); }\n"
    "  static __device__ u16 st(float x) { return st_bf16(x); } };\n"
    /* the parameters of one launch (s0 null: a first step) */
    "template <class S> struct o_list {\n"
    "  S *p[O_N]; const S *g[O_N]; const S *s0[3][O_N]; S *s[3][O_N];\n"
    "  long long end[O_N]; int n;\n"
    "  static const int emu_lead_ptrs = 8 * O_N; };\n"
    /* each element j of the launch: its parameter k (j only grows: so does
     * k), at i in it */
    "#define O_LOOP(L) \\\n"
    "  long long total = L.end[L.n - 1]; int k = 0; \\\n"
    "  for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < total; \\\n"
    "       j += (long long)gridDim.x * blockDim.x) { \\\n"
    "    while (j >= L.end[k]) k++; \\\n"
    "    long long i = j - (k ? L.end[k - 1] : 0);\n"
    "#define R(x) A::ld(A::st(x))\n"
    /* c: c1, c2, b1, b2, ss, bc2, eps, l2, decay (HD_ADAM_*); fl: HD_OPTIM_* */
    "template <int K> __device__ void adam_t(const o_list<typename a_ty<K>::S> &L,\n"
    "    const double *cd, int fl) {\n"
    "  typedef a_ty<K> A; typedef typename A::C C;\n"
    "  C c1 = (C)cd[0], c2 = (C)cd[1], b1 = (C)cd[2], b2 = (C)cd[3], ss = (C)cd[4];\n"
    "  C bc2 = (C)cd[5], eps = (C)cd[6], l2 = (C)cd[7], decay = (C)cd[8];\n"
    "  O_LOOP(L)\n"
    "    C pi = A::ld(L.p[k][i]), gi = A::ld(L.g[k][i]);\n"
    "    if (fl & 1) pi = R(pi * decay);\n"
    "    if (fl & 2) gi = R(gi + R(l2 * pi));\n"
    "    C mi = R(c1 * gi), vi = R(R(c2 * gi) * gi);\n"
    "    if (L.s0[0][k]) {\n"
    "      mi = R(R(b1 * A::ld(L.s0[0][k][i])) + mi);\n"
    "      vi = R(R(b2 * A::ld(L.s0[1][k][i])) + vi);\n"
    "    }\n"
    "    C den = R(R(R(h_sqrt(vi)) / bc2) + eps);\n"
    "    C upd = R(R(ss * mi) / den);\n"
    "    L.s[0][k][i] = A::st(mi);\n"
    "    L.s[1][k][i] = A::st(vi);\n"
    "    L.p[k][i] = A::st(pi - upd);\n"
    "  }\n"
    "}\n"
    /* c: lr, momentum, wd (HD_SGD_*); without momentum no state */
    "template <int K> __device__ void sgd_t(const o_list<typename a_ty<K>::S> &L,\n"
    "    const double *cd, int fl) {\n"
    "  typedef a_ty<K> A; typedef typename A::C C;\n"
    "  C lr = (C)cd[0], mom = (C)cd[1], wd = (C)cd[2];\n"
    "  O_LOOP(L)\n"
    "    C pi = A::ld(L.p[k][i]), gi = A::ld(L.g[k][i]);\n"
    "    if (fl & 2) gi = R(gi + R(wd * pi));\n"
    "    if (fl & 4) {\n"
    "      C b = L.s0[0][k] ? R(R(mom * A::ld(L.s0[0][k][i])) + gi) : gi;\n"
    "      L.s[0][k][i] = A::st(b);\n"
    "      gi = fl & 8 ? R(gi + R(mom * b)) : b;\n"
    "    }\n"
    "    L.p[k][i] = A::st(pi - R(lr * gi));\n"
    "  }\n"
    "}\n"
    /* c: clr, wd, eps, init (HD_AGRAD_*); state: the sums */
    "template <int K> __device__ void adagrad_t(const o_list<typename a_ty<K>::S> &L,\n"
    "    const double *cd, int fl) {\n"
    "  typedef a_ty<K> A; typedef typename A::C C;\n"
    "  C clr = (C)cd[0], wd = (C)cd[1], eps = (C)cd[2], init = (C)cd[3];\n"
    "  O_LOOP(L)\n"
    "    C pi = A::ld(L.p[k][i]), gi = A::ld(L.g[k][i]);\n"
    "    if (fl & 2) gi = R(gi + R(wd * pi));\n"
    "    C gg = R(gi * gi);\n"
    "    C a = L.s0[0][k] ? R(A::ld(L.s0[0][k][i]) + gg) : R(gg + init);\n"
    "    L.s[0][k][i] = A::st(a);\n"
    "    L.p[k][i] = A::st(pi - R(R(clr * gi) / R(R(h_sqrt(a)) + eps)));\n"
    "  }\n"
    "}\n"
    /* c: c1, c2, b1, b2, lr, decay (HD_LION_*); state: m (g * 0 at first) */
    "template <int K> __device__ void lion_t(const o_list<typename a_ty<K>::S> &L,\n"
    "    const double *cd, int fl) {\n"
    "  typedef a_ty<K> A; typedef typename A::C C;\n"
    "  C c1 = (C)cd[0], c2 = (C)cd[1], b1 = (C)cd[2], b2 = (C)cd[3], lr = (C)cd[4];\n"
    "  C decay = (C)cd[5];\n"
    "  O_LOOP(L)\n"
    "    C pi = A::ld(L.p[k][i]), gi = A::ld(L.g[k][i]);\n"
    "    C mo = L.s0[0][k] ? A::ld(L.s0[0][k][i]) : R(gi * (C)0);\n"
    "    C c = R(R(b1 * mo) + R(c1 * gi));\n"
    "    C sg = c > 0 ? (C)1 : c < 0 ? (C)-1 : c + (C)0;\n"
    "    if (fl & 1) pi = R(pi * decay);\n"
    "    L.p[k][i] = A::st(pi - R(lr * sg));\n"
    "    L.s[0][k][i] = A::st(R(b2 * mo) + R(c2 * gi));\n"
    "  }\n"
    "}\n"
    /* c: lr, alpha, ca, eps, wd, mom (HD_RMS_*); state: v, avg (fl & 16),
     * buf (fl & 4) */
    "template <int K> __device__ void rmsprop_t(const o_list<typename a_ty<K>::S> &L,\n"
    "    const double *cd, int fl) {\n"
    "  typedef a_ty<K> A; typedef typename A::C C;\n"
    "  C lr = (C)cd[0], alpha = (C)cd[1], ca = (C)cd[2], eps = (C)cd[3], wd = (C)cd[4];\n"
    "  C mom = (C)cd[5];\n"
    "  O_LOOP(L)\n"
    "    C pi = A::ld(L.p[k][i]), gi = A::ld(L.g[k][i]);\n"
    "    int first = !L.s0[0][k];\n"
    "    if (fl & 2) gi = R(gi + R(wd * pi));\n"
    "    C v = R(R(ca * gi) * gi);\n"
    "    if (!first) v = R(R(alpha * A::ld(L.s0[0][k][i])) + v);\n"
    "    L.s[0][k][i] = A::st(v);\n"
    "    C den = v;\n"
    "    if (fl & 16) {\n"
    "      C a = R(ca * gi);\n"
    "      if (!first) a = R(R(alpha * A::ld(L.s0[1][k][i])) + a);\n"
    "      L.s[1][k][i] = A::st(a);\n"
    "      den = R(v - R(a * a));\n"
    "    }\n"
    "    C d = R(gi / R(R(h_sqrt(den)) + eps));\n"
    "    if (fl & 4) {\n"
    "      if (!first) d = R(R(mom * A::ld(L.s0[2][k][i])) + d);\n"
    "      L.s[2][k][i] = A::st(d);\n"
    "    }\n"
    "    L.p[k][i] = A::st(pi - R(lr * d));\n"
    "  }\n"
    "}\n"
    "#undef R\n"
    "struct o_consts { double c[10]; int flags; };\n";
/* clang-format on */

static const char *const optim_names[HD_OPTIM_KINDS] = {[HD_OPTIM_ADAM] = "adam",
                                                        [HD_OPTIM_SGD] = "sgd",
                                                        [HD_OPTIM_ADAGRAD] = "adagrad",
                                                        [HD_OPTIM_LION] = "lion",
                                                        [HD_OPTIM_RMSPROP] = "rmsprop"};

const char *hd_cuda_optim_name(int kind) {
    return kind >= 0 && kind < HD_OPTIM_KINDS ? optim_names[kind] : "none";
}

/* The entry points k_<kind>_<dt>. */
static void optim_entries(hd_cuda_src *s) {
    static const char *const dts[] = {"f32", "f64", "f16", "bf16"};
    static const char *const tys[] = {"float", "double", "u16", "u16"};
    for (int kind = 0; kind < HD_OPTIM_KINDS; kind++)
        for (int k = 0; k < 4; k++)
            hd_cuda_src_printf(s,
                               "extern \"C\" __global__ void k_%s_%s(o_list<%s> L, o_consts c) "
                               "{ %s_t<%d>(L, c.c, c.flags); }\n",
                               optim_names[kind], dts[k], tys[k], optim_names[kind], k);
}

void hd_cuda_optim_module(hd_cuda_src *s) {
    hd_cuda_src_printf(s, "%s#define O_N %d\n%s", hd_cuda_prelude(), HD_CUDA_OPTIM_N, optim_src);
    optim_entries(s);
}

/* Items of o from *at on into the table, empty ones passed over (they
 * own no device memory), until it is full; their elements' count. */
static long long optim_table(const hd_optim_step *o, int *at, cuda_optim_list *L) {
    long long total = 0;
    memset(L, 0, sizeof *L);
    for (; *at < o->n && L->n < HD_CUDA_OPTIM_N; ++*at) {
        const hd_optim_item *it = &o->items[*at];
        int k = L->n;
        if (!it->p->numel) continue;
        L->p[k] = hd_tensor_data(it->p), L->g[k] = hd_tensor_data(it->g);
        for (int q = 0; q < HD_OPTIM_STATE; q++) {
            L->s0[q][k] = it->s0[q] ? hd_tensor_data(it->s0[q]) : NULL;
            L->s[q][k] = it->s[q] ? hd_tensor_data(it->s[q]) : NULL;
        }
        L->end[k] = total += it->p->numel;
        L->n++;
    }
    return total;
}

hd_status hd_cuda_optim(hd_ctx *ctx, const hd_optim_step *o) {
    const hd_tensor *p0 = o->items[0].p;
    int device = p0->storage->device;
    hd_cuda_dev *d = hd_cuda_dev_get(ctx, device);
    CUfunction f; /* keyed by the kind in the op's place */
    if (!d || hd_cuda_kernel(ctx, d, (hd_op)o->kind, p0->dtype, p0->dtype, HD_CUDA_K_OPTIM, &f))
        return ctx->status;
    struct {
        double c[10];
        int flags;
    } c;
    memset(&c, 0, sizeof c);
    memcpy(c.c, o->c, sizeof c.c);
    c.flags = o->flags;
    cuda_optim_list L;
    void *args[] = {&L, &c};
    static const int rows[HD_OPTIM_KINDS] = {[HD_OPTIM_ADAM] = HD_PROF_ADAM,
                                             [HD_OPTIM_SGD] = HD_PROF_SGD,
                                             [HD_OPTIM_ADAGRAD] = HD_PROF_ADAGRAD,
                                             [HD_OPTIM_LION] = HD_PROF_LION,
                                             [HD_OPTIM_RMSPROP] = HD_PROF_RMSPROP};
    int row = rows[o->kind];
    for (int at = 0; at < o->n;) {
        long long total = optim_table(o, &at, &L);
        if (!total) continue;
        void *timed = ctx->prof ? hd_cuda_prof_begin(ctx, d, device) : NULL;
        hd_status st = hd_cuda_launch(ctx, d, f, total, args);
        hd_cuda_prof_end(ctx, d, timed, row);
        if (st) return st;
    }
    return HD_OK;
}
#endif
