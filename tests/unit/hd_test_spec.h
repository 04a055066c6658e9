/* Test inputs described by a short string, shared by the tables of
 * test_gradcheck.c and test_opinfo.c (opinfo_shaped.c).
 *
 * "gen:shape[:view]"
 *   gen    n  uniform in [-2, 2]         p  uniform in [0.5, 2]
 *          a  |v| in [0.3, 2], random sign (away from kinks at 0)
 *          f  k + [0.2, 0.4], k in [-3, 3] (away from integers)
 *          d  a well-conditioned matrix: n, plus 4 on the diagonal
 *          iK integers in [0, K) (i64)    b  bools
 *          kV a Hodu number V (constant)
 *   shape  "2x3", "s" for 0-d, "0x3" for empty
 *   view   t: a transposed view (last two dims); s: a stepped view (every
 *          other element of the last dim, offset 1)
 * Values come from one fixed stream, so every run draws the same; stored
 * in an integer dtype they are truncated (u8: their magnitude). */
#ifndef HD_TEST_SPEC_H
#define HD_TEST_SPEC_H

#include "hd_op.h"
#include "hd_tensor.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t spec_rng = 0x9e3779b97f4a7c15ULL;

static double spec_uniform(void) {
    spec_rng = spec_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(spec_rng >> 11) * (1.0 / 9007199254740992.0);
}

/* A value of gen; i, j: the element's row and column (for 'd'). */
static double spec_value(const char *gen, int64_t i, int64_t j) {
    double u = spec_uniform();
    switch (gen[0]) {
    case 'p': return 0.5 + 1.5 * u;
    case 'a': return (spec_uniform() < 0.5 ? -1 : 1) * (0.3 + 1.7 * u);
    case 'f': return floor(spec_uniform() * 7) - 3 + 0.2 + 0.2 * u;
    case 'd': return -1 + 2 * u + (i == j ? 4 : 0);
    case 'i': return floor(u * atof(gen + 1));
    case 'b': return u < 0.5;
    default: return -2 + 4 * u;
    }
}

static int spec_shape(const char *s, int64_t *shape) {
    if (s[0] == 's') return 0;
    int nd = 0;
    while (*s && *s != ':') {
        shape[nd++] = strtoll(s, (char **)&s, 10);
        if (*s == 'x') s++;
    }
    return nd;
}

/* The dtype of spec's tensor: fdt for the float generators. */
static hd_dtype spec_dtype(const char *spec, hd_dtype fdt) {
    return spec[0] == 'i' ? HD_I64 : spec[0] == 'b' ? HD_BOOL : fdt;
}

/* Fill a new base tensor of bshape with gen's values. */
static hd_tensor *spec_base(hd_ctx *ctx, const char *gen, hd_dtype dt, const int64_t *bshape,
                            int nd) {
    hd_tensor *base = hd_tensor_new(ctx, dt, bshape, nd);
    int64_t cols = nd ? bshape[nd - 1] : 1;
    for (int64_t i = 0; base && i < base->numel; i++) {
        double v = spec_value(gen, cols ? i / cols % (nd > 1 ? bshape[nd - 2] : 1) : 0,
                              cols ? i % cols : 0);
        hd_dtype_store(dt, base->storage->data, i, dt == HD_U8 ? fabs(v) : v);
    }
    return base;
}

/* A leaf tensor for spec, its float elements of dtype fdt (a view of a
 * larger base for ':t' and ':s'). */
static hd_tensor *spec_input(hd_ctx *ctx, const char *spec, hd_dtype fdt) {
    char gen[16];
    const char *colon = strchr(spec, ':');
    size_t gl = colon ? (size_t)(colon - spec) : strlen(spec);
    memcpy(gen, spec, gl);
    gen[gl] = 0;
    if (gen[0] == 'k') return hd_tensor_number(ctx, fdt, atof(gen + 1));
    int64_t shape[HD_MAX_DIMS], bshape[HD_MAX_DIMS], strides[HD_MAX_DIMS], offset = 0;
    int nd = spec_shape(colon + 1, shape);
    const char *view = strchr(colon + 1, ':');
    hd_dtype dt = spec_dtype(gen, fdt);
    memcpy(bshape, shape, sizeof bshape);
    char v = view ? view[1] : 0;
    if (v == 't') {
        bshape[nd - 1] = shape[nd - 2];
        bshape[nd - 2] = shape[nd - 1];
    } else if (v == 's') {
        bshape[nd - 1] = 2 * shape[nd - 1] + 1;
    }
    hd_tensor *base = spec_base(ctx, gen, dt, bshape, nd);
    if (!v || !base) return base;
    memcpy(strides, base->strides, sizeof strides);
    if (v == 't') {
        strides[nd - 1] = base->strides[nd - 2];
        strides[nd - 2] = base->strides[nd - 1];
    } else {
        strides[nd - 1] = 2;
        offset = 1;
    }
    hd_tensor *t = hd_tensor_view(ctx, base, shape, strides, nd, offset);
    hd_tensor_unref(base);
    return t;
}

/* ---- attrs: the arguments the tables run ops with ---- */

#define SET(name, ...)                                                                             \
    static inline void name(hd_attrs *a) {                                                         \
        __VA_ARGS__;                                                                               \
    }

SET(to_f32, a->dtype = HD_F32)
SET(to_f64, a->dtype = HD_F64)
SET(perm_201, a->nshape = 3; a->shape[0] = 2; a->shape[1] = 0; a->shape[2] = 1)
SET(perm_10, a->nshape = 2; a->shape[0] = 1; a->shape[1] = 0)
SET(exp_2x3x4, a->nshape = 3; a->shape[0] = 2; a->shape[1] = 3; a->shape[2] = 4)
/* x[1:4:2, :, 2] of a [5, 3, 4] */
SET(slice_a, a->start[0] = 1; a->step[0] = 2; a->len[0] = 2; a->start[1] = 0; a->step[1] = 1;
    a->len[1] = 3; a->start[2] = 2; a->step[2] = 1; a->len[2] = 1; a->drop_mask = 4)
/* x[:, 1:3] of a [4, 5] */
SET(slice_b, a->step[0] = 1; a->len[0] = 4; a->start[1] = 1; a->step[1] = 1; a->len[1] = 2)
SET(axis1, a->ints[0] = 1)
SET(axis0, a->ints[0] = 0)
SET(att_plain, a->scalar[0] = 0.5)
SET(att_causal, a->scalar[0] = 0.3; a->ints[0] = 1)
SET(conv_a, a->ints[0] = 1; a->ints[1] = 2; a->ints[2] = 1; a->ints[3] = 0; a->ints[4] = 1;
    a->ints[5] = 2; a->ints[6] = 2)
SET(conv_1, a->ints[0] = 1; a->ints[1] = 1)
SET(conv_dw, a->ints[0] = 1; a->ints[1] = 1; a->ints[2] = 2; a->ints[3] = 1; a->ints[4] = 2;
    a->ints[5] = 1; a->ints[6] = 3)
SET(conv_s2, a->ints[0] = 2; a->ints[1] = 2; a->ints[2] = 1; a->ints[3] = 1)
SET(pool_2, a->ints[0] = 2; a->ints[1] = 2)
SET(pool_3s2p1, a->ints[0] = 3; a->ints[1] = 3; a->ints[2] = 2; a->ints[3] = 2; a->ints[4] = 1;
    a->ints[5] = 1)
SET(ln_1, a->ints[0] = 1)
SET(ln_2, a->ints[0] = 2; a->scalar[0] = 1e-3)

#endif
