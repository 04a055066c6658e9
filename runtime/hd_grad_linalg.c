/* Gradient rules of the linalg ops (hd_ops.def), written with table ops as
 * the others are (hd_grad_rules.c), so that they run on every device and a
 * trace records them. The formulas are PyTorch's (FunctionsManual.cpp's
 * linalg backward functions), for real matrices. The packed results (qr,
 * svd, eigh, slogdet) get a packed gradient: each part is sliced out. */
#include "hd_grad_rule.h"

#include <string.h>

static hd_tensor *mm(hd_gx *x, hd_tensor *a, hd_tensor *b) {
    return bin(x, HD_OP_MATMUL, a, b);
}
static hd_tensor *tr(hd_gx *x, hd_tensor *a) {
    return hd_gx_transpose(x, a);
}

/* A^-1 B */
static hd_tensor *solve(hd_gx *x, hd_tensor *a, hd_tensor *b) {
    hd_tensor *in[2] = {a, b};
    return hd_gx_run(x, HD_OP_LINALG_SOLVE, in, 2, NULL);
}

/* B A^-1 = (A^-T B^T)^T */
static hd_tensor *solve_right(hd_gx *x, hd_tensor *b, hd_tensor *a) {
    return tr(x, solve(x, tr(x, a), tr(x, b)));
}

static hd_tensor *inv(hd_gx *x, hd_tensor *a) {
    return hd_gx_run(x, HD_OP_LINALG_INV, &a, 1, NULL);
}

/* the n x n identity of like's dtype */
static hd_tensor *eye(hd_gx *x, int64_t n, const hd_tensor *like) {
    if (!like) return NULL;
    hd_attrs at = no_attrs();
    at.nshape = 2;
    at.shape[0] = at.shape[1] = n;
    at.dtype = like->dtype;
    return hd_gx_run(x, HD_OP_EYE, NULL, 0, &at);
}

/* 1 on and below the diagonal: the running sums of the identity's rows */
static hd_tensor *lower_mask(hd_gx *x, hd_tensor *id) {
    hd_attrs at = no_attrs();
    at.ints[0] = 0;
    return hd_gx_run(x, HD_OP_CUMSUM, &id, 1, &at);
}

/* t's batch dims (all but the last `keep`) then the dims given */
static hd_tensor *batch_reshape(hd_gx *x, hd_tensor *t, int keep, const int64_t *tail, int nt) {
    if (!t) return NULL;
    int64_t sh[HD_MAX_DIMS];
    int nb = t->ndim - keep;
    if (nb + nt > HD_MAX_DIMS) return hd_gx_reshape(x, NULL, NULL, 0);
    memcpy(sh, t->shape, (size_t)nb * sizeof *sh);
    if (nt) memcpy(sh + nb, tail, (size_t)nt * sizeof *sh);
    return hd_gx_reshape(x, t, sh, nb + nt);
}

/* elements [off, off + len) of packed p's last dim, shaped batch + tail */
static hd_tensor *part(hd_gx *x, hd_tensor *p, int64_t off, int64_t len, const int64_t *tail,
                       int nt) {
    if (!p) return NULL;
    hd_attrs at = no_attrs();
    for (int i = 0; i < p->ndim; i++) at.step[i] = 1, at.len[i] = p->shape[i];
    at.start[p->ndim - 1] = off;
    at.len[p->ndim - 1] = len;
    return batch_reshape(x, hd_gx_run(x, HD_OP_SLICE, &p, 1, &at), 1, tail, nt);
}

/* v (batch + [n]) as a row (batch + [1, n]) or a column (batch + [n, 1]) */
static hd_tensor *row(hd_gx *x, hd_tensor *v) {
    return v ? batch_reshape(x, v, 1, (int64_t[]){1, v->shape[v->ndim - 1]}, 2) : NULL;
}
static hd_tensor *col(hd_gx *x, hd_tensor *v) {
    return v ? batch_reshape(x, v, 1, (int64_t[]){v->shape[v->ndim - 1], 1}, 2) : NULL;
}

/* a number per matrix (batch dims) as batch + [1, 1] */
static hd_tensor *per_matrix(hd_gx *x, hd_tensor *v) {
    return batch_reshape(x, v, 0, (int64_t[]){1, 1}, 2);
}

static int64_t rows_of(const hd_grad_node *n) {
    return n->edges[0].shape[n->edges[0].ndim - 2];
}
static int64_t cols_of(const hd_grad_node *n) {
    return n->edges[0].shape[n->edges[0].ndim - 1];
}

static void refuse(hd_gx *x, const char *what) {
    if (!x->st) x->st = hd_error(x->ctx, HD_ERR_RUNTIME, "%s", what);
}

/* ---- inv, solve, det, slogdet ---- */

/* gA = -Y^T g Y^T */
RULE(linalg_inv, SAVE_Y) {
    HD_UNUSED(need);
    hd_tensor *yt = tr(x, OUT);
    gin[0] = hd_gx_out(x, neg(x, mm(x, mm(x, yt, g), yt)));
}

/* X = A^-1 B: gB = A^-T g, gA = -gB X^T */
RULE(linalg_solve, SAVE_X | SAVE_Y) {
    hd_tensor *gb = solve(x, tr(x, IN(0)), g);
    if (need[0]) gin[0] = hd_gx_out(x, neg(x, mm(x, gb, tr(x, OUT))));
    if (need[1]) gin[1] = hd_gx_out(x, gb);
}

/* g det(A) A^-T (A must be invertible) */
RULE(linalg_det, SAVE_X | SAVE_Y) {
    HD_UNUSED(need);
    hd_tensor *s = per_matrix(x, mul(x, g, OUT));
    gin[0] = hd_gx_out(x, mul(x, s, tr(x, inv(x, IN(0)))));
}

/* only log|det| has a gradient: g A^-T */
RULE(linalg_slogdet, SAVE_X) {
    HD_UNUSED(need);
    hd_tensor *gl = part(x, g, 1, 1, NULL, 0);
    gin[0] = hd_gx_out(x, mul(x, per_matrix(x, gl), tr(x, inv(x, IN(0)))));
}

/* ---- cholesky, qr ---- */

/* A = L L^T: P = tril(L^T gL), S = P with its strict lower part mirrored
 * and halved, gA = L^-T S L^-1 (Murray 2016) */
RULE(linalg_cholesky, SAVE_Y) {
    HD_UNUSED(need);
    hd_tensor *l = OUT, *id = eye(x, cols_of(n), l), *low = lower_mask(x, id);
    hd_tensor *p = mul(x, mm(x, tr(x, l), g), low);
    hd_tensor *strict = mul(x, p, sub(x, low, id));
    hd_tensor *s = mul(x, add(x, p, tr(x, strict)), hd_gx_num(x, 0.5));
    gin[0] = hd_gx_out(x, solve_right(x, solve(x, tr(x, l), s), l));
}

/* m >= n: M = gR R^T - Q^T gQ, B = triu(M), gA = (Q (B + B^T - diag B) +
 * gQ) R^-T */
RULE(linalg_qr, SAVE_Y) {
    HD_UNUSED(need);
    int64_t m = rows_of(n), c = cols_of(n), k = HD_MIN(m, c);
    if (m < c) {
        refuse(x, "linalg.qr: the gradient needs at least as many rows as columns");
        return;
    }
    if (n->attrs.ints[0] && m > c) {
        refuse(x, "linalg.qr: mode \"complete\" has no gradient when there are more rows than "
                  "columns (Q's last columns are not determined by A)");
        return;
    }
    int64_t qs[2] = {m, k}, rs[2] = {k, c};
    hd_tensor *q = part(x, OUT, 0, m * k, qs, 2), *r = part(x, OUT, m * k, k * c, rs, 2);
    hd_tensor *gq = part(x, g, 0, m * k, qs, 2), *gr = part(x, g, m * k, k * c, rs, 2);
    hd_tensor *mt = sub(x, mm(x, gr, tr(x, r)), mm(x, tr(x, q), gq));
    hd_tensor *id = eye(x, k, mt), *up = tr(x, lower_mask(x, id));
    hd_tensor *b = mul(x, mt, up);
    hd_tensor *sym = sub(x, add(x, b, tr(x, b)), mul(x, b, id));
    hd_tensor *ga = add(x, mm(x, q, sym), gq);
    gin[0] = hd_gx_out(x, solve_right(x, ga, tr(x, r)));
}

/* ---- eigh, svd ---- */

/* A = V diag(w) V^T: gA = V (skew(V^T gV) / E + diag(gw)) V^T, with
 * E_ij = w_j - w_i off the diagonal, 1 on it (the skew part is 0 there) */
RULE(linalg_eigh, SAVE_Y) {
    HD_UNUSED(need);
    int64_t c = cols_of(n), vs[2] = {c, c}, ws[1] = {c};
    hd_tensor *w = part(x, OUT, 0, c, ws, 1), *v = part(x, OUT, c, c * c, vs, 2);
    hd_tensor *gw = part(x, g, 0, c, ws, 1), *gv = part(x, g, c, c * c, vs, 2);
    hd_tensor *id = eye(x, c, v), *e = add(x, sub(x, row(x, w), col(x, w)), id);
    hd_tensor *vg = mm(x, tr(x, v), gv);
    hd_tensor *skew = mul(x, sub(x, vg, tr(x, vg)), hd_gx_num(x, 0.5));
    hd_tensor *in = add(x, divide(x, skew, e), mul(x, id, row(x, gw)));
    gin[0] = hd_gx_out(x, mm(x, mm(x, v, in), tr(x, v)));
}

typedef struct svd_parts {
    hd_tensor *u, *s, *vh, *gu, *gs, *gvh;
} svd_parts;

static void svd_split(hd_gx *x, const hd_grad_node *n, hd_tensor *g, svd_parts *p) {
    int64_t m = rows_of(n), c = cols_of(n), k = HD_MIN(m, c);
    int64_t us[2] = {m, k}, ss[1] = {k}, vs[2] = {k, c};
    hd_tensor *y = OUT;
    p->u = part(x, y, 0, m * k, us, 2), p->gu = part(x, g, 0, m * k, us, 2);
    p->s = part(x, y, m * k, k, ss, 1), p->gs = part(x, g, m * k, k, ss, 1);
    p->vh = part(x, y, m * k + k, k * c, vs, 2), p->gvh = part(x, g, m * k + k, k * c, vs, 2);
}

/* PyTorch's svd_backward for the reduced SVD: with skew(X) = X - X^T and
 * E_jk = S_k^2 - S_j^2 (1 on the diagonal),
 * G = (skew(U^T gU) S + S skew(V^T gV)) / E + diag(gS); then
 * m > k: gA = (U G + (I - U U^T) gU S^-1) Vh,
 * n > k: gA = U (G Vh + S^-1 gVh (I - V Vh)), else U G Vh. */
RULE(linalg_svd, SAVE_Y) {
    HD_UNUSED(need);
    int64_t m = rows_of(n), c = cols_of(n), k = HD_MIN(m, c);
    if (n->attrs.ints[0] && m != c) {
        refuse(x, "linalg.svd: no gradient for the full matrices of a non-square matrix "
                  "(use full_matrices = false)");
        return;
    }
    svd_parts p;
    svd_split(x, n, g, &p);
    hd_tensor *uu = mm(x, tr(x, p.u), p.gu), *vv = mm(x, p.vh, tr(x, p.gvh));
    hd_tensor *s2 = mul(x, p.s, p.s), *id = eye(x, k, p.s);
    hd_tensor *e = add(x, sub(x, row(x, s2), col(x, s2)), id);
    hd_tensor *num = add(x, mul(x, sub(x, uu, tr(x, uu)), row(x, p.s)),
                         mul(x, col(x, p.s), sub(x, vv, tr(x, vv))));
    hd_tensor *ga = add(x, divide(x, num, e), mul(x, id, row(x, p.gs)));
    if (m > k) {
        hd_tensor *gus = divide(x, p.gu, row(x, p.s));
        ga = add(x, mm(x, p.u, ga), sub(x, gus, mm(x, p.u, mm(x, tr(x, p.u), gus))));
        ga = mm(x, ga, p.vh);
    } else if (c > k) {
        hd_tensor *sgv = divide(x, p.gvh, col(x, p.s));
        ga = add(x, mm(x, ga, p.vh), sub(x, sgv, mm(x, mm(x, sgv, tr(x, p.vh)), p.vh)));
        ga = mm(x, p.u, ga);
    } else {
        ga = mm(x, mm(x, p.u, ga), p.vh);
    }
    gin[0] = hd_gx_out(x, ga);
}
