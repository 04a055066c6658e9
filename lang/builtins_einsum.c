/* einsum(equation, a, b, ...): NumPy's and PyTorch's Einstein summation,
 * built from the op table's ops (permute, reshape, expand, sum, matmul),
 * so gradients, every device and compiled code come from them.
 *
 * The operands are contracted left to right. Before each product, labels
 * that only one side has and nothing later needs are summed away; the two
 * sides are then permuted to [batch, free, contracted] and [batch,
 * contracted, free], flattened to three dims and multiplied as a batched
 * matmul (so a contraction is one BLAS or cuBLAS call), and the product
 * is unflattened. What remains is summed and permuted to the output's
 * labels. `...` stands for the same leading dims in every operand (right
 * aligned, broadcast where one has size 1). A label repeated within one
 * operand is that operand's diagonal (a strided view of its dims
 * flattened), taken before anything else. */
#include "builtins_tensor.h"

#include <stdio.h>
#include <string.h>

#define ES_MAX_OPS 8
#define ES_ELL     '0' /* ellipsis dims are labelled '0' + k, right aligned to '7' */

typedef struct es_term {
    hd_tensor *t;              /* owned */
    char lab[HD_MAX_DIMS + 1]; /* one label per dim */
    int n;
} es_term;

typedef struct es_run {
    hd_vm *vm;
    hd_status st;
    int64_t size[128]; /* each label's size (-1: not seen) */
    int count[128];    /* each label's occurrences in the operands' specs */
    char out[HD_MAX_DIMS + 1];
    int nout;
} es_run;

static hd_status es_fail(es_run *r, const char *fmt, const char *arg) {
    if (!r->st) r->st = hd_vm_error(r->vm, HD_ERR_RUNTIME, fmt, arg);
    return r->st;
}

/* ---- the equation ---- */

/* One operand's labels from spec[0..len) for a tensor of nd dims. */
static hd_status es_parse_term(es_run *r, const char *s, size_t len, int nd, es_term *e,
                               int output) {
    char explicit_lab[HD_MAX_DIMS + 1];
    int nexp = 0, ell = -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '.') {
            if (ell >= 0 || i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.')
                return es_fail(r, "einsum: %s: '...' may appear once per operand", "equation");
            ell = nexp;
            i += 2;
        } else if ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')) {
            if (nexp == HD_MAX_DIMS)
                return es_fail(r, "einsum: %s has too many labels", "an operand");
            explicit_lab[nexp++] = s[i];
        } else {
            char c[2] = {s[i], 0};
            return es_fail(r, "einsum: '%s' is not a label (letters a-z, A-Z, and ...)", c);
        }
    }
    int nell = nd - nexp;
    if (nell < 0 || (ell < 0 && nell != 0)) {
        char msg[96];
        snprintf(msg, sizeof msg, "%d labels for a tensor of %d dims", nexp, nd);
        return es_fail(r, "einsum: an operand has %s", msg);
    }
    e->n = 0;
    for (int i = 0; i <= nexp; i++) {
        if (i == ell)
            for (int k = 0; k < nell; k++) e->lab[e->n++] = (char)(ES_ELL + HD_MAX_DIMS - nell + k);
        if (i < nexp) e->lab[e->n++] = explicit_lab[i];
    }
    e->lab[e->n] = 0;
    for (int i = 0; output && i < e->n; i++)
        for (int j = i + 1; j < e->n; j++)
            if (e->lab[i] == e->lab[j]) {
                char c[2] = {e->lab[i], 0};
                return es_fail(r, "einsum: label '%s' repeats in the output", c);
            }
    return HD_OK;
}

/* Each label's size: equal in every operand, or 1 where it broadcasts. */
static hd_status es_sizes(es_run *r, const es_term *t, int nt) {
    for (int i = 0; i < 128; i++) r->size[i] = -1;
    for (int k = 0; k < nt; k++)
        for (int d = 0; d < t[k].n; d++) {
            int64_t *s = &r->size[(int)t[k].lab[d]], v = t[k].t->shape[d];
            if (*s < 0 || *s == 1) {
                *s = v;
            } else if (v != 1 && v != *s) {
                char c[2] = {t[k].lab[d] >= 'A' ? t[k].lab[d] : '.', 0};
                return es_fail(r, "einsum: label '%s' has different sizes in different operands",
                               c);
            }
        }
    return HD_OK;
}

static int es_has(const char *labs, int n, char c) {
    for (int i = 0; i < n; i++)
        if (labs[i] == c) return 1;
    return 0;
}

/* The output's labels: after "->", or the ellipsis then the labels written
 * once in the operands, in alphabetical order (NumPy's implicit mode: "ii"
 * is a trace). */
static hd_status es_output(es_run *r, const char *arrow, const es_term *t, int nt) {
    r->nout = 0;
    if (arrow) {
        es_term o;
        int nell = 0;
        for (int c = ES_ELL; c < ES_ELL + HD_MAX_DIMS; c++) nell += r->size[c] >= 0;
        int nexp = 0;
        for (const char *p = arrow; *p; p++) nexp += *p != '.';
        if (es_parse_term(r, arrow, strlen(arrow), nexp + (strstr(arrow, "...") ? nell : 0), &o, 1))
            return r->st;
        for (int i = 0; i < o.n; i++)
            if (r->size[(int)o.lab[i]] < 0) {
                char c[2] = {o.lab[i], 0};
                return es_fail(r, "einsum: output label '%s' is in no operand", c);
            }
        memcpy(r->out, o.lab, (size_t)o.n + 1);
        r->nout = o.n;
        return HD_OK;
    }
    for (int c = ES_ELL; c < ES_ELL + HD_MAX_DIMS; c++)
        if (r->size[c] >= 0) r->out[r->nout++] = (char)c;
    HD_UNUSED(t);
    HD_UNUSED(nt);
    for (int c = 'A'; c <= 'z'; c++) {
        if (r->count[c] == 1) {
            if (r->nout == HD_MAX_DIMS) return es_fail(r, "einsum: %s", "too many output labels");
            r->out[r->nout++] = (char)c;
        }
    }
    r->out[r->nout] = 0;
    return HD_OK;
}

/* ---- steps on a term ---- */

static hd_status es_run_op(es_run *r, es_term *e, hd_op op, hd_tensor *b, const hd_attrs *at) {
    if (r->st) return r->st;
    hd_tensor *in[2] = {e->t, b}, *out = NULL;
    r->st = hd_trun_t(r->vm, "einsum", op, in, b ? 2 : 1, at, &out);
    if (r->st) return r->st;
    hd_tensor_unref(e->t);
    e->t = out;
    return HD_OK;
}

/* The diagonal of dims i and j (one size, n): moved last, flattened to
 * n * n and read every n + 1 elements; the label stays once, last. */
static hd_status es_diagonal(es_run *r, es_term *e, int i, int j) {
    int64_t n = e->t->shape[i], shape[HD_MAX_DIMS];
    char lab[HD_MAX_DIMS + 1], c = e->lab[i];
    hd_attrs at;
    memset(&at, 0, sizeof at);
    int k = 0;
    for (int d = 0; d < e->n; d++)
        if (d != i && d != j) shape[k] = e->t->shape[d], lab[k] = e->lab[d], at.shape[k++] = d;
    at.shape[k] = i, at.shape[k + 1] = j, at.nshape = e->n;
    if (es_run_op(r, e, HD_OP_PERMUTE, NULL, &at)) return r->st;
    shape[k] = n * n;
    hd_tensor *t = NULL;
    if (hd_treshape(hd_vm_ctx(r->vm), e->t, shape, k + 1, &t))
        return r->st = hd_tfail(r->vm, "einsum");
    hd_tensor_unref(e->t);
    e->t = t;
    memset(&at, 0, sizeof at);
    for (int d = 0; d <= k; d++) at.step[d] = 1, at.len[d] = e->t->shape[d];
    at.step[k] = n + 1, at.len[k] = n;
    if (es_run_op(r, e, HD_OP_SLICE, NULL, &at)) return r->st;
    lab[k] = c;
    memcpy(e->lab, lab, (size_t)k + 1);
    e->lab[e->n = k + 1] = 0;
    return HD_OK;
}

/* A label repeated within one operand ("ii->i", "iij->j") takes the
 * diagonal of its dims, as NumPy and PyTorch do. */
static hd_status es_diagonals(es_run *r, es_term *e) {
    for (int i = 0; i < e->n; i++)
        for (int j = i + 1; j < e->n; j++) {
            if (e->lab[i] != e->lab[j]) continue;
            if (e->t->shape[i] != e->t->shape[j]) {
                char c[2] = {e->lab[i], 0};
                return es_fail(r,
                               "einsum: label '%s' repeats within one operand over dims of "
                               "different sizes",
                               c);
            }
            if (es_diagonal(r, e, i, j)) return r->st;
            i = -1; /* the labels moved: look again */
            break;
        }
    return HD_OK;
}

/* Sum away the dims whose labels keep() rejects. */
static hd_status es_sum_unneeded(es_run *r, es_term *e, const char *keep, int nkeep) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    char left[HD_MAX_DIMS + 1];
    int nl = 0;
    for (int d = 0; d < e->n; d++)
        if (es_has(keep, nkeep, e->lab[d]))
            left[nl++] = e->lab[d];
        else
            at.axes[at.naxes++] = d;
    if (!at.naxes) return HD_OK;
    if (es_run_op(r, e, HD_OP_SUM, NULL, &at)) return r->st;
    memcpy(e->lab, left, (size_t)nl);
    e->lab[e->n = nl] = 0;
    return HD_OK;
}

/* Permute to the labels `to` (a permutation of e's), broadcast size-1
 * dims to the labels' sizes, and flatten into groups of g[0], g[1], ...
 * labels (ng groups; an empty group is a dim of 1). */
static hd_status es_arrange(es_run *r, es_term *e, const char *to, const int *g, int ng) {
    hd_attrs at;
    memset(&at, 0, sizeof at);
    at.nshape = e->n;
    int same = 1;
    for (int i = 0; i < e->n; i++) {
        at.shape[i] = strchr(e->lab, to[i]) - e->lab;
        same &= at.shape[i] == i;
    }
    if (!same && es_run_op(r, e, HD_OP_PERMUTE, NULL, &at)) return r->st;
    memcpy(e->lab, to, (size_t)e->n);
    memset(&at, 0, sizeof at);
    at.nshape = e->n;
    int bcast = 0;
    for (int i = 0; i < e->n; i++) {
        at.shape[i] = r->size[(int)e->lab[i]];
        bcast |= e->t->shape[i] != at.shape[i];
    }
    if (bcast && es_run_op(r, e, HD_OP_EXPAND, NULL, &at)) return r->st;
    int64_t flat[3];
    for (int k = 0, d = 0; k < ng; k++) {
        flat[k] = 1;
        for (int j = 0; j < g[k]; j++) flat[k] *= r->size[(int)e->lab[d++]];
    }
    hd_tensor *t = NULL;
    if (hd_treshape(hd_vm_ctx(r->vm), e->t, flat, ng, &t)) return r->st = hd_tfail(r->vm, "einsum");
    hd_tensor_unref(e->t);
    e->t = t;
    return HD_OK;
}

/* a := a * b contracted over their shared labels that `later` lacks. */
static hd_status es_contract(es_run *r, es_term *a, es_term *b, const char *later, int nlater) {
    char keep[2 * HD_MAX_DIMS + 1];
    int nk = 0;
    for (int i = 0; i < nlater; i++) keep[nk++] = later[i];
    for (int i = 0; i < b->n; i++) keep[nk++] = b->lab[i];
    if (es_sum_unneeded(r, a, keep, nk)) return r->st;
    nk = nlater;
    for (int i = 0; i < a->n; i++) keep[nk++] = a->lab[i];
    if (es_sum_unneeded(r, b, keep, nk)) return r->st;
    char bat[HD_MAX_DIMS], af[HD_MAX_DIMS], bf[HD_MAX_DIMS], con[HD_MAX_DIMS];
    int nb = 0, na = 0, nf = 0, nc = 0;
    for (int i = 0; i < a->n; i++) {
        char c = a->lab[i];
        if (!es_has(b->lab, b->n, c))
            af[na++] = c;
        else if (es_has(later, nlater, c))
            bat[nb++] = c;
        else
            con[nc++] = c;
    }
    for (int i = 0; i < b->n; i++)
        if (!es_has(a->lab, a->n, b->lab[i])) bf[nf++] = b->lab[i];
    if (nb + na + nf > HD_MAX_DIMS) return es_fail(r, "einsum: %s", "a product with too many dims");
    char ta[HD_MAX_DIMS + 1], tb[HD_MAX_DIMS + 1], res[HD_MAX_DIMS + 1];
    memcpy(ta, bat, (size_t)nb), memcpy(ta + nb, af, (size_t)na),
        memcpy(ta + nb + na, con, (size_t)nc);
    memcpy(tb, bat, (size_t)nb), memcpy(tb + nb, con, (size_t)nc),
        memcpy(tb + nb + nc, bf, (size_t)nf);
    memcpy(res, bat, (size_t)nb), memcpy(res + nb, af, (size_t)na),
        memcpy(res + nb + na, bf, (size_t)nf);
    int ga[3] = {nb, na, nc}, gb[3] = {nb, nc, nf};
    if (es_arrange(r, a, ta, ga, 3) || es_arrange(r, b, tb, gb, 3)) return r->st;
    if (es_run_op(r, a, HD_OP_MATMUL, b->t, NULL)) return r->st;
    hd_tensor *t = NULL;
    int64_t shape[HD_MAX_DIMS];
    int n = nb + na + nf;
    for (int i = 0; i < n; i++) shape[i] = r->size[(int)res[i]];
    if (hd_treshape(hd_vm_ctx(r->vm), a->t, shape, n, &t)) return r->st = hd_tfail(r->vm, "einsum");
    hd_tensor_unref(a->t);
    a->t = t;
    memcpy(a->lab, res, (size_t)n);
    a->lab[a->n = n] = 0;
    return HD_OK;
}

/* ---- the function ---- */

/* The operands: the arguments after the equation, or one list of them. */
static hd_status es_operands(hd_vm *vm, const hd_targs *a, es_term *t, int *nt) {
    hd_value v[ES_MAX_OPS];
    int n = 0;
    if (a->v[1].type == HD_V_LIST) {
        const hd_list *l = hd_as_list(a->v[1]);
        if (l->len > ES_MAX_OPS)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "einsum takes at most %d operands", ES_MAX_OPS);
        for (int64_t i = 0; i < l->len; i++) v[n++] = l->items[i];
    } else {
        for (int i = 1; i <= ES_MAX_OPS; i++)
            if (hd_targ_has(a, i)) v[n++] = a->v[i];
    }
    for (int i = 0; i < n; i++) {
        t[i].t = NULL;
        if (hd_value_to_tensor(vm, v[i], "an einsum operand", 0, HD_F32, &t[i].t))
            return HD_ERR_RUNTIME;
        *nt = i + 1;
    }
    if (n == 0) return hd_vm_error(vm, HD_ERR_RUNTIME, "einsum needs at least one operand");
    return HD_OK;
}

static hd_status es_parse(es_run *r, const char *eq, es_term *t, int nt) {
    char spec[256];
    size_t m = 0;
    for (const char *p = eq; *p; p++)
        if (*p != ' ' && m + 1 < sizeof spec) spec[m++] = *p;
    spec[m] = 0;
    char *arrow = strstr(spec, "->");
    if (arrow) {
        *arrow = 0;
        arrow += 2;
    }
    int terms = 1;
    for (const char *p = spec; *p; p++) {
        terms += *p == ',';
        r->count[(unsigned char)*p & 127]++;
    }
    if (terms != nt) {
        char msg[64];
        snprintf(msg, sizeof msg, "%d operand%s, %d given", terms, terms == 1 ? "" : "s", nt);
        return es_fail(r, "einsum: the equation has %s", msg);
    }
    const char *s = spec;
    for (int k = 0; k < nt; k++) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (es_parse_term(r, s, len, t[k].t->ndim, &t[k], 0) || es_diagonals(r, &t[k]))
            return r->st;
        s = comma ? comma + 1 : s + len;
    }
    if (es_sizes(r, t, nt)) return r->st;
    return es_output(r, arrow, t, nt);
}

static hd_status es_eval(es_run *r, es_term *t, int nt) {
    for (int k = 1; k < nt && !r->st; k++) {
        char later[ES_MAX_OPS * HD_MAX_DIMS + HD_MAX_DIMS];
        int nl = 0;
        for (int i = 0; i < r->nout; i++) later[nl++] = r->out[i];
        for (int j = k + 1; j < nt; j++)
            for (int i = 0; i < t[j].n; i++) later[nl++] = t[j].lab[i];
        es_contract(r, &t[0], &t[k], later, nl);
    }
    if (!r->st) es_sum_unneeded(r, &t[0], r->out, r->nout);
    int g[HD_MAX_DIMS];
    for (int i = 0; i < r->nout; i++) g[i] = 1;
    if (!r->st) es_arrange(r, &t[0], r->out, g, r->nout);
    return r->st;
}

static HD_TF_FN(tf_einsum) {
    HD_TARGS_BIND(a); /* equation, a, b=, ... */
    if (a.v[0].type != HD_V_STR) return hd_targ_type_error(vm, &a, 0, "a str");
    es_term t[ES_MAX_OPS];
    int nt = 0;
    es_run r;
    memset(&r, 0, sizeof r);
    r.vm = vm;
    r.st = es_operands(vm, &a, t, &nt);
    if (!r.st) es_parse(&r, hd_as_str(a.v[0])->chars, t, nt);
    if (!r.st) es_eval(&r, t, nt);
    if (!r.st) *out = hd_tensor_value(hd_tensor_ref(t[0].t));
    for (int i = 0; i < nt; i++) hd_tensor_unref(t[i].t);
    return r.st;
}

static const hd_tfunc rows[] = {
    {"einsum", tf_einsum, "equation, a, b=, c=, d=, e=, f=, g=, h=", 0, HD_TF_GLOBAL},
};

const hd_tfunc_table hd_tfuncs_einsum = {rows, (int)(sizeof rows / sizeof rows[0])};
