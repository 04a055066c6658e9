/* diagonal, diag and trace, and _linalg(name, a, b=, flag=): the native under stdlib/linalg.hodu,
 * which gives each function its own name and keywords (linalg.inv, linalg.qr,
 * ...). The decompositions are ops of the table (hd_ops.def: LAPACK on the
 * cpu); those with several results come packed in one tensor, cut here
 * into views, so that each part's gradient flows back into the one op. */
#include "builtins_tensor.h"
#include "hd_backend.h"
#include "vm_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct la_call {
    hd_vm *vm;
    char fname[32]; /* "linalg.qr" */
    hd_tensor *a, *b;
    int flag;
    hd_status st;
} la_call;

static hd_tensor *la_run(la_call *c, hd_op op, hd_tensor **in, int nin, const hd_attrs *at) {
    hd_tensor *t = NULL;
    if (!c->st) c->st = hd_trun_t(c->vm, c->fname, op, in, nin, at, &t);
    return t;
}

/* a view of x with the last two dims swapped */
static hd_tensor *la_transpose(la_call *c, hd_tensor *x) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = x->ndim;
    for (int i = 0; i < x->ndim; i++) at.shape[i] = i;
    at.shape[x->ndim - 2] = x->ndim - 1, at.shape[x->ndim - 1] = x->ndim - 2;
    return la_run(c, HD_OP_PERMUTE, &x, 1, &at);
}

/* x (batch + [..]) reshaped to batch + tail, the last `keep` dims dropped */
static hd_tensor *la_reshape(la_call *c, hd_tensor *x, int keep, const int64_t *tail, int nt) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int nb = x->ndim - keep;
    if (nb + nt > HD_MAX_DIMS) {
        if (!c->st) c->st = hd_vm_error(c->vm, HD_ERR_RUNTIME, "%s: too many dims", c->fname);
        return NULL;
    }
    memcpy(at.shape, x->shape, (size_t)nb * sizeof *at.shape);
    if (nt) memcpy(at.shape + nb, tail, (size_t)nt * sizeof *at.shape);
    at.nshape = nb + nt;
    return la_run(c, HD_OP_RESHAPE, &x, 1, &at);
}

/* elements [off, off + len) of the packed result's last dim, as batch + tail */
static hd_tensor *la_part(la_call *c, hd_tensor *p, int64_t off, int64_t len, const int64_t *tail,
                          int nt) {
    hd_tensor *s = NULL, *r = NULL;
    if (c->st) return NULL;
    if (hd_tslice_axis(hd_vm_ctx(c->vm), p, p->ndim - 1, off, len, 0, &s))
        c->st = hd_tfail(c->vm, c->fname);
    if (s) r = la_reshape(c, s, 1, tail, nt);
    hd_tensor_unref(s);
    return r;
}

/* A list of the n parts (taking them), or the one part alone. */
static hd_status la_result(la_call *c, hd_tensor **parts, int n, hd_value *out) {
    for (int i = 0; i < n && !c->st; i++)
        if (!parts[i]) c->st = hd_vm_oom(c->vm);
    if (c->st || n == 1) {
        if (!c->st)
            *out = hd_tensor_value(parts[0]);
        else
            hd_tunref_all(parts, n);
        return c->st;
    }
    hd_value l = hd_list_new(c->vm, n);
    if (hd_vm_failed(c->vm)) {
        hd_tunref_all(parts, n);
        return HD_ERR_MEMORY;
    }
    for (int i = 0; i < n; i++) {
        hd_tensor *t = parts[i];
        parts[i] = NULL;
        if (hd_list_push(c->vm, l, hd_tensor_value(t))) {
            hd_tunref_all(parts, n);
            hd_value_unref(c->vm, l);
            return HD_ERR_MEMORY;
        }
    }
    *out = l;
    return HD_OK;
}

static int64_t la_rows(const hd_tensor *a) {
    return a->shape[a->ndim - 2];
}
static int64_t la_cols(const hd_tensor *a) {
    return a->shape[a->ndim - 1];
}

/* [sign, log|det|] */
static hd_status la_slogdet(la_call *c, hd_value *out) {
    hd_tensor *p = la_run(c, HD_OP_LINALG_SLOGDET, &c->a, 1, NULL);
    hd_tensor *parts[2] = {p ? la_part(c, p, 0, 1, NULL, 0) : NULL,
                           p ? la_part(c, p, 1, 1, NULL, 0) : NULL};
    hd_tensor_unref(p);
    return la_result(c, parts, 2, out);
}

/* [Q, R]: reduced Q [m, k], R [k, n] (k = min(m, n)); complete (flag)
 * Q [m, m], R [m, n] */
static hd_status la_qr(la_call *c, hd_value *out) {
    int64_t m = la_rows(c->a), n = la_cols(c->a), k = c->flag ? m : HD_MIN(m, n);
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = c->flag;
    hd_tensor *p = la_run(c, HD_OP_LINALG_QR, &c->a, 1, &at);
    hd_tensor *parts[2] = {p ? la_part(c, p, 0, m * k, (int64_t[]){m, k}, 2) : NULL,
                           p ? la_part(c, p, m * k, k * n, (int64_t[]){k, n}, 2) : NULL};
    hd_tensor_unref(p);
    return la_result(c, parts, 2, out);
}

/* [U, S, Vh], or S alone (svdvals: nparts 1) */
static hd_status la_svd(la_call *c, int nparts, hd_value *out) {
    int64_t m = la_rows(c->a), n = la_cols(c->a), k = HD_MIN(m, n);
    int full = c->flag && nparts == 3;
    int64_t cu = full ? m : k, rv = full ? n : k;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.ints[0] = full;
    hd_tensor *p = la_run(c, HD_OP_LINALG_SVD, &c->a, 1, &at);
    hd_tensor *s = p ? la_part(c, p, m * cu, k, (int64_t[]){k}, 1) : NULL;
    if (nparts == 1) {
        hd_tensor_unref(p);
        return la_result(c, &s, 1, out);
    }
    hd_tensor *parts[3] = {p ? la_part(c, p, 0, m * cu, (int64_t[]){m, cu}, 2) : NULL, s,
                           p ? la_part(c, p, m * cu + k, rv * n, (int64_t[]){rv, n}, 2) : NULL};
    hd_tensor_unref(p);
    return la_result(c, parts, 3, out);
}

/* [w, V], or w alone (eigvalsh); flag: read the upper triangle */
static hd_status la_eigh(la_call *c, int nparts, hd_value *out) {
    int64_t n = la_cols(c->a);
    hd_tensor *a = c->a->ndim >= 2 && c->flag ? la_transpose(c, c->a) : hd_tensor_ref(c->a);
    hd_tensor *p = a ? la_run(c, HD_OP_LINALG_EIGH, &a, 1, NULL) : NULL;
    hd_tensor_unref(a);
    hd_tensor *parts[2] = {p ? la_part(c, p, 0, n, (int64_t[]){n}, 1) : NULL,
                           p && nparts == 2 ? la_part(c, p, n, n * n, (int64_t[]){n, n}, 2) : NULL};
    hd_tensor_unref(p);
    return la_result(c, parts, nparts, out);
}

/* B a vector (1-D, or A's shape without its last dim) solves as a column;
 * the batch dims of the two broadcast */
static hd_status la_solve(la_call *c, hd_value *out) {
    hd_tensor *a = c->a, *b = c->b, *bx = NULL, *ax = NULL, *x = NULL;
    int vec = b->ndim == 1 || (b->ndim >= 1 && b->ndim == a->ndim - 1); /* as PyTorch: */
    for (int i = 0; vec && b->ndim > 1 && i < b->ndim; i++) vec = b->shape[i] == a->shape[i];
    hd_tensor *b2 = vec ? la_reshape(c, b, 0, (int64_t[]){1}, 1) : hd_tensor_ref(b);
    if (!c->st && a->ndim >= 2 && b2 && b2->ndim >= 2) {
        int64_t batch[HD_MAX_DIMS];
        int nb = 0;
        hd_ctx *ctx = hd_vm_ctx(c->vm);
        if (hd_broadcast_shapes(ctx, a->shape, a->ndim - 2, b2->shape, b2->ndim - 2, batch, &nb))
            c->st = hd_vm_error(c->vm, HD_ERR_RUNTIME,
                                "%s: the batch dims of A and B do not "
                                "broadcast",
                                c->fname);
        if (!c->st && nb + 2 <= HD_MAX_DIMS) {
            hd_attrs at;
            memset(&at, 0, sizeof at);
            memcpy(at.shape, batch, (size_t)nb * sizeof *batch);
            at.nshape = nb + 2;
            at.shape[nb] = la_rows(a), at.shape[nb + 1] = la_cols(a);
            ax = la_run(c, HD_OP_EXPAND, &a, 1, &at);
            at.shape[nb] = la_rows(b2), at.shape[nb + 1] = la_cols(b2);
            bx = la_run(c, HD_OP_EXPAND, &b2, 1, &at);
        }
    }
    hd_tensor *in[2] = {ax ? ax : a, bx ? bx : b2};
    if (b2) x = la_run(c, HD_OP_LINALG_SOLVE, in, 2, NULL);
    if (x && vec) {
        hd_tensor *t = la_reshape(c, x, 2, (int64_t[]){la_rows(x)}, 1);
        hd_tensor_unref(x);
        x = t;
    }
    hd_tensor_unref(ax), hd_tensor_unref(bx), hd_tensor_unref(b2);
    return la_result(c, &x, 1, out);
}

static hd_status la_dispatch(la_call *c, const char *name, hd_value *out) {
    hd_tensor *r = NULL;
    if (!strcmp(name, "inv")) {
        r = la_run(c, HD_OP_LINALG_INV, &c->a, 1, NULL);
    } else if (!strcmp(name, "det")) {
        r = la_run(c, HD_OP_LINALG_DET, &c->a, 1, NULL);
    } else if (!strcmp(name, "cholesky")) {
        r = la_run(c, HD_OP_LINALG_CHOLESKY, &c->a, 1, NULL);
        if (r && c->flag) { /* upper: U = L^T */
            hd_tensor *t = la_transpose(c, r);
            hd_tensor_unref(r);
            r = t;
        }
    } else if (!strcmp(name, "slogdet")) {
        return la_slogdet(c, out);
    } else if (!strcmp(name, "qr")) {
        return la_qr(c, out);
    } else if (!strcmp(name, "svd") || !strcmp(name, "svdvals")) {
        return la_svd(c, name[3] ? 1 : 3, out);
    } else if (!strcmp(name, "eigh") || !strcmp(name, "eigvalsh")) {
        return la_eigh(c, name[4] ? 1 : 2, out);
    } else if (!strcmp(name, "solve")) {
        if (!c->b) return hd_vm_error(c->vm, HD_ERR_RUNTIME, "linalg.solve needs A and B");
        return la_solve(c, out);
    } else {
        return hd_vm_error(c->vm, HD_ERR_RUNTIME, "_linalg: no function '%s'", name);
    }
    return la_result(c, &r, 1, out);
}

static HD_TF_FN(tf_linalg) {
    HD_TARGS_BIND(a); /* name, a, b=, flag= */
    if (a.v[0].type != HD_V_STR) return hd_targ_type_error(vm, &a, 0, "a str");
    la_call c;
    memset(&c, 0, sizeof c);
    c.vm = vm;
    const char *name = hd_as_str(a.v[0])->chars;
    snprintf(c.fname, sizeof c.fname, "linalg.%s", name);
    c.st = hd_targ_tensor(vm, &a, 1, &c.a);
    if (!c.st && hd_targ_has(&a, 2)) c.st = hd_targ_tensor(vm, &a, 2, &c.b);
    if (!c.st) c.st = hd_targ_bool(vm, &a, 3, 0, &c.flag);
    hd_status st = c.st ? c.st : la_dispatch(&c, name, out);
    hd_tensor_unref(c.a);
    hd_tensor_unref(c.b);
    return st;
}

/* ---- diagonal, diag, trace: views and products, so gradients follow ---- */

/* the offset-th diagonal of the last two dims: a strided slice of them
 * flattened (a view when x is contiguous) */
static hd_tensor *la_diagonal(la_call *c, hd_tensor *x, int64_t off) {
    if (x->ndim < 2) {
        c->st = hd_vm_error(c->vm, HD_ERR_RUNTIME, "%s needs at least 2 dims, got %d", c->fname,
                            x->ndim);
        return NULL;
    }
    int64_t m = la_rows(x), n = la_cols(x);
    int64_t len = off >= 0 ? HD_MIN(m, n - off) : HD_MIN(m + off, n);
    len = HD_MAX(len, 0);
    int64_t start = len == 0 ? 0 : off >= 0 ? off : -off * n;
    hd_tensor *flat = la_reshape(c, x, 2, (int64_t[]){m * n}, 1), *d = NULL;
    if (!flat) return NULL;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    for (int i = 0; i < flat->ndim; i++) at.step[i] = 1, at.len[i] = flat->shape[i];
    at.start[flat->ndim - 1] = start, at.step[flat->ndim - 1] = n + 1;
    at.len[flat->ndim - 1] = len;
    d = la_run(c, HD_OP_SLICE, &flat, 1, &at);
    hd_tensor_unref(flat);
    return d;
}

/* a square matrix with v (batch + [n]) on its diagonal: eye(n) * v */
static hd_tensor *la_diag_embed(la_call *c, hd_tensor *v) {
    hd_ctx *ctx = hd_vm_ctx(c->vm);
    int64_t n = v->ndim ? v->shape[v->ndim - 1] : 1;
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = 2, at.shape[0] = at.shape[1] = n;
    at.dtype = v->dtype;
    hd_place prev = hd_place_push(ctx, hd_place_of(v).backend, hd_place_of(v).device);
    hd_tensor *id = la_run(c, HD_OP_EYE, NULL, 0, &at);
    hd_place_pop(ctx, prev);
    hd_tensor *rv = id ? la_reshape(c, v, 1, (int64_t[]){1, n}, 2) : NULL, *r = NULL;
    hd_tensor *in[2] = {id, rv};
    if (rv) r = la_run(c, HD_OP_MUL, in, 2, NULL);
    hd_tensor_unref(id), hd_tensor_unref(rv);
    return r;
}

static HD_TF_FN(tf_diagonal) {
    HD_TARGS_BIND(a); /* x, offset= (diag: diagonal=) */
    la_call c;
    memset(&c, 0, sizeof c);
    c.vm = vm;
    snprintf(c.fname, sizeof c.fname, "%s", a.f->name);
    int64_t off = 0;
    hd_tensor *r = NULL;
    c.st = hd_targ_tensor(vm, &a, 0, &c.a);
    if (!c.st) c.st = hd_targ_int(vm, &a, 1, 0, &off);
    int build = !c.st && !strcmp(a.f->name, "diag") && c.a->ndim == 1;
    if (build && off != 0)
        c.st = hd_vm_error(vm, HD_ERR_RUNTIME,
                           "diag: a vector goes on the main diagonal only "
                           "(diagonal = 0), got %lld",
                           (long long)off);
    if (!c.st && (!strcmp(a.f->name, "diag") && c.a->ndim != 1 && c.a->ndim != 2))
        c.st = hd_vm_error(vm, HD_ERR_RUNTIME, "diag needs a vector or a matrix, got %d dims",
                           c.a->ndim);
    if (!c.st) r = build ? la_diag_embed(&c, c.a) : la_diagonal(&c, c.a, off);
    hd_tensor_unref(c.a);
    return c.st ? c.st : la_result(&c, &r, 1, out);
}

/* the sum of the main diagonal of the last two dims */
static HD_TF_FN(tf_trace) {
    HD_TARGS_BIND(a); /* x */
    la_call c;
    memset(&c, 0, sizeof c);
    c.vm = vm;
    snprintf(c.fname, sizeof c.fname, "trace");
    hd_tensor *r = NULL, *d = NULL;
    c.st = hd_targ_tensor(vm, &a, 0, &c.a);
    if (!c.st) d = la_diagonal(&c, c.a, 0);
    if (d) {
        hd_attrs at;
        memset(&at, 0, sizeof at);
        at.naxes = 1, at.axes[0] = -1;
        r = la_run(&c, HD_OP_SUM, &d, 1, &at);
    }
    hd_tensor_unref(d);
    hd_tensor_unref(c.a);
    return c.st ? c.st : la_result(&c, &r, 1, out);
}

static const hd_tfunc rows[] = {
    {"_linalg", tf_linalg, "name, a, b=, flag=", -1, HD_TF_GLOBAL},
    {"diagonal", tf_diagonal, "x, offset=", -1, HD_TF_BOTH},
    {"diag", tf_diagonal, "x, diagonal=", -1, HD_TF_BOTH},
    {"trace", tf_trace, "x", -1, HD_TF_BOTH},
};

const hd_tfunc_table hd_tfuncs_linalg = {rows, (int)(sizeof rows / sizeof rows[0])};
