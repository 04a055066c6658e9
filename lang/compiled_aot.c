/* Compiled forward, backward() outside: a compiled fn whose result needs
 * gradients runs as two graphs, as torch.compile's AOTAutograd does.
 *
 * At the trace, after the body ran, backward() of the result with a
 * symbolic gradient ("grad:return", an input) is traced too, into the same
 * graph, giving the gradient of every leaf the result depends on (tensor
 * arguments and state that require grad; their .grad is kept aside
 * meanwhile). That graph is split: the nodes that depend on the incoming
 * gradient are the backward graph; the others are the forward graph, whose
 * outputs are the call's outputs plus every value the backward graph reads
 * (saved). At a run, the forward graph runs and the result gets a record
 * (hd_autograd_record_custom) whose inputs are the call's leaves; a later
 * backward() reaching it runs the backward graph on the saved values and
 * the result's gradient, and passes each leaf its gradient.
 *
 * Eligible: a compiled fn (not a block) whose one result with gradient
 * history is a returned tensor, whose body did not call backward() itself,
 * and that reaches no tensor requiring grad except through a path or an
 * argument. Anything else runs eagerly, as before. */
#include "compiled_int.h"
#include "hd_autograd.h"

#include <stdio.h>
#include <string.h>

struct cp_aot {
    int refs;
    hd_ctx *ctx;
    const hd_jit_compiler *jc;
    hd_jit_exec *bexec;
    int ret_out; /* the output the record goes on */
    int nfwd;    /* the forward graph's own outputs; saved ones follow */
    int nsaved;
    int nleaves;
    int *leaf_input; /* per leaf: its entry input */
    int *leaf_out;   /* per leaf: its output of the backward graph, or -1 */
    int nbouts;
    char **leaf_names; /* at the trace, until the entry's inputs are known */
    /* inputs whose values a gradient rule of the forward keeps (as eager
     * records keep them), with the op: changed in place before backward,
     * they make it fail as eager autograd does */
    int ncheck, check_cap; /* check_cap: entries allocated */
    int *check_input;
    const char **check_op;
    /* the op whose rule keeps the returned value itself (exp, tanh, ...),
     * or NULL: written in place before backward, it fails as eagerly */
    const char *ret_check_op;
};

static void aot_unref(cp_aot *a) {
    if (!a || --a->refs > 0) return;
    hd_ctx *ctx = a->ctx;
    if (a->bexec) a->jc->free(ctx, a->bexec);
    for (int i = 0; a->leaf_names && i < a->nleaves; i++) hd_ctx_strfree(ctx, a->leaf_names[i]);
    size_t n = (size_t)(a->nleaves + 1);
    hd_ctx_free(ctx, a->leaf_names, n * sizeof *a->leaf_names);
    hd_ctx_free(ctx, a->leaf_input, n * sizeof *a->leaf_input);
    hd_ctx_free(ctx, a->leaf_out, n * sizeof *a->leaf_out);
    size_t nc = (size_t)a->check_cap;
    if (a->check_input) hd_ctx_free(ctx, a->check_input, nc * sizeof *a->check_input);
    if (a->check_op) hd_ctx_free(ctx, a->check_op, nc * sizeof *a->check_op);
    hd_ctx_free(ctx, a, sizeof *a);
}

int cp_aot_result(const cp_aot *a) {
    return a->ret_out;
}

int cp_aot_nfwd(const cp_aot *a) {
    return a->nfwd;
}

void cp_aot_free(cp_aot *a) {
    aot_unref(a);
}

/* ---- at the trace ---- */

/* The one output with gradient history, if it is returned and nothing
 * else has history; else -1. */
static int aot_result(const cp_session *s, const cp_tmpl *ret) {
    int found = -1;
    for (int i = 0; i < s->nwbs; i++)
        if (s->wbs[i].kind == CP_WB_GRAD ||
            (s->wbs[i].kind == CP_WB_SET && hd_grad_has_history(s->outs[s->wbs[i].out])))
            return -1;
    for (int k = 0; k < s->nouts; k++) {
        if (!hd_grad_has_history(s->outs[k])) continue;
        if (found >= 0) return -1;
        found = k;
    }
    if (found < 0 || !ret || !hd_dtype_is_float(s->outs[found]->dtype)) return -1;
    /* it must be what the body returns (a tensor, or inside a list/dict) */
    const cp_tmpl *stack[64];
    int n = 0, seen = 0;
    stack[n++] = ret;
    while (n && !seen) {
        const cp_tmpl *t = stack[--n];
        if (t->kind == CP_T_OUT && t->out == found) seen = 1;
        for (int i = 0; i < t->n && n < 64; i++) stack[n++] = &t->kids[i];
    }
    return seen ? found : -1;
}

/* The trace's tensor for session input k: the symbolic argument, or the
 * state tensor itself. */
static hd_tensor *aot_input_tensor(const cp_session *s, const hd_value *sym, int nsym, int k) {
    const cp_input *in = &s->inputs[k];
    if (in->arg >= 0)
        return in->arg < nsym && sym[in->arg].type == HD_V_TENSOR ? sym[in->arg].as.t : NULL;
    return s->first[k];
}

/* A constant of the trace that requires grad (reached by no path): eager
 * code would give it a gradient the graphs cannot. */
static int aot_const_leaf(const cp_session *s) {
    for (int i = 0; i < s->ncaps; i++)
        if (s->caps[i].input < 0 && hd_grad_requires(&s->vm->ctx, s->caps[i].t)) return 1;
    return 0;
}

static cp_aot *aot_new(hd_vm *vm, int nleaves) {
    cp_aot *a = hd_ctx_calloc(&vm->ctx, 1, sizeof *a);
    if (!a) return NULL;
    a->refs = 1;
    a->ctx = &vm->ctx;
    size_t n = (size_t)(nleaves + 1);
    a->leaf_names = hd_ctx_calloc(&vm->ctx, n, sizeof *a->leaf_names);
    a->leaf_input = hd_ctx_calloc(&vm->ctx, n, sizeof *a->leaf_input);
    a->leaf_out = hd_ctx_calloc(&vm->ctx, n, sizeof *a->leaf_out);
    a->nleaves = nleaves;
    if (!a->leaf_names || !a->leaf_input || !a->leaf_out) {
        aot_unref(a);
        return NULL;
    }
    return a;
}

/* backward() of the result o with a symbolic gradient; each leaf's
 * gradient becomes an output named "grad:<j>". */
static hd_status aot_backward(cp_session *s, cp_aot *a, hd_tensor *o, hd_tensor **leaves) {
    hd_vm *vm = s->vm;
    hd_ctx *ctx = &vm->ctx;
    hd_tensor *kept[64] = {NULL};
    for (int j = 0; j < a->nleaves; j++) {
        kept[j] = hd_tensor_ref(hd_grad_get(leaves[j]));
        hd_grad_set(ctx, leaves[j], NULL);
    }
    hd_tensor *gout = hd_trace_input(ctx, "grad:return", o->dtype, o->shape, o->ndim);
    hd_status st = gout ? HD_OK : hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
    s->aot_backward = 1;
    if (!st && hd_grad_backward(ctx, o, gout, 0)) st = hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
    s->aot_backward = 0;
    if (st && s->aot_custom) { /* no backward graph: the call runs eagerly */
        hd_vm_clear_error(vm);
        hd_error_clear(ctx);
        st = HD_OK;
    }
    hd_tensor_unref(gout);
    for (int j = 0; j < a->nleaves; j++) {
        hd_tensor *g = hd_grad_get(leaves[j]);
        a->leaf_out[j] = -1;
        if (!st && g) {
            char name[32];
            snprintf(name, sizeof name, "grad:%d", j);
            int k = cp_session_out(s, g, name);
            if (k < 0) st = vm->err ? vm->err : hd_vm_oom(vm);
            /* the backward graph's outputs are the session's from nfwd on
             * (two leaves with one gradient value share one) */
            a->leaf_out[j] = k < a->nfwd ? -2 : k - a->nfwd;
        }
        hd_grad_set(ctx, leaves[j], kept[j]);
        hd_tensor_unref(kept[j]);
    }
    return st;
}

hd_status cp_aot_trace(cp_session *s, const cp_tmpl *ret, const hd_value *sym, int nsym,
                       cp_aot **out) {
    hd_vm *vm = s->vm;
    *out = NULL;
    int r = aot_result(s, ret);
    if (r < 0 || aot_const_leaf(s)) return HD_OK;
    hd_tensor *leaves[64];
    int kin[64], n = 0;
    for (int k = 0; k < s->ninputs; k++) {
        hd_tensor *t = aot_input_tensor(s, sym, nsym, k);
        if (!t || !hd_grad_requires(&vm->ctx, t)) continue;
        if (n == 64) return HD_OK; /* too many leaves: eagerly */
        leaves[n] = t;
        kin[n++] = k;
    }
    cp_aot *a = aot_new(vm, n);
    if (!a) return hd_vm_oom(vm);
    for (int j = 0; j < n; j++)
        if (!(a->leaf_names[j] = hd_ctx_strdup(&vm->ctx, s->inputs[kin[j]].name))) {
            aot_unref(a);
            return hd_vm_oom(vm);
        }
    a->ret_out = r;
    a->nfwd = s->nouts;
    hd_status st = aot_backward(s, a, s->outs[r], leaves);
    if (st || s->aot_custom) {
        aot_unref(a);
        return st;
    }
    for (int j = 0; j < n; j++)
        if (a->leaf_out[j] == -2) { /* a gradient that is a forward output: eagerly */
            aot_unref(a);
            return HD_OK;
        }
    a->nbouts = s->nouts - a->nfwd;
    *out = a;
    return HD_OK;
}

/* ---- splitting the traced graph ---- */

typedef struct aot_split {
    const hd_ir_graph *g;
    hd_ir_graph *f, *b;
    unsigned char *dep; /* value depends on the incoming gradient */
    int *fmap, *bmap;   /* value of g -> value of f / b, or -1 */
    int *saved;         /* values of g the backward graph reads from the forward one */
    int nsaved;
    int gin; /* the incoming gradient's input index */
} aot_split;

static int split_const(hd_ir_graph *h, int *map, const hd_ir_graph *g, int v) {
    if (map[v] < 0) map[v] = hd_ir_add_const(h, g->consts[g->values[v].index].t);
    return map[v];
}

/* The ids in h of node n's inputs (constants added on first use). */
static int split_ins(hd_ir_graph *h, int *map, const hd_ir_graph *g, const hd_ir_node *n,
                     int *ids) {
    for (int i = 0; i < n->nin; i++) {
        int v = n->in[i];
        ids[i] = g->values[v].kind == HD_IR_VALUE_CONST ? split_const(h, map, g, v) : map[v];
        if (ids[i] < 0) return -1;
    }
    return 0;
}

/* A loop (a copy of its body) or a loop's result into h. */
static hd_status split_loop_node(hd_ir_graph *h, int *map, const hd_ir_node *n, const int *ids) {
    int v;
    if (n->op == HD_IR_LOOP) {
        hd_ir_graph *body = hd_ir_graph_clone(n->loop->body);
        v = body ? hd_ir_add_loop_like(h, body, n->loop, ids, n->nin) : -1;
    } else {
        v = hd_ir_add_loop_out(h, ids[0], (int)n->attrs.ints[0]);
    }
    map[n->out] = v;
    return v < 0 ? h->ctx->status : HD_OK;
}

static hd_status split_node(aot_split *sp, hd_ir_graph *h, int *map, const hd_ir_node *n) {
    int buf[16], *ids = n->nin <= 16 ? buf : hd_ctx_alloc(h->ctx, (size_t)n->nin * sizeof *ids);
    if (!ids) return h->ctx->status;
    hd_status st = HD_OK;
    if (split_ins(h, map, sp->g, n, ids) < 0) {
        st = h->ctx->status
                 ? h->ctx->status
                 : hd_error(h->ctx, HD_ERR_RUNTIME, "internal error: split lost a value");
    } else if (n->op == HD_IR_CALLBACK) {
        hd_ir_callback cb = n->cb;
        if (cb.ud_dup) cb.ud = cb.ud_dup(cb.ud);
        st = hd_ir_add_callback(h, &cb, ids, n->nin);
    } else if (n->op == HD_IR_LOOP || n->op == HD_IR_LOOP_OUT) {
        st = split_loop_node(h, map, n, ids);
    } else {
        int v = hd_ir_add_node(h, (hd_op)n->op, ids, n->nin, &n->attrs);
        if (v < 0) st = h->ctx->status;
        map[n->out] = v;
    }
    if (ids != buf) hd_ctx_free(h->ctx, ids, (size_t)n->nin * sizeof *ids);
    return st;
}

/* Mark what depends on value vg; list the forward values the backward
 * nodes (and the backward outputs from nfwd on) read. */
static void split_mark(aot_split *sp, int vg, int nfwd) {
    const hd_ir_graph *g = sp->g;
    sp->dep[vg] = 1;
    for (int i = 0; i < g->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[i];
        if (n->op == HD_IR_CALLBACK || n->out < 0) continue;
        for (int k = 0; k < n->nin; k++) sp->dep[n->out] |= sp->dep[n->in[k]];
    }
    unsigned char *use = hd_ctx_calloc(g->ctx, (size_t)g->nvalues + 1, 1);
    if (!use) return;
    for (int i = 0; i < g->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[i];
        if (n->op != HD_IR_CALLBACK && n->out >= 0 && sp->dep[n->out])
            for (int k = 0; k < n->nin; k++) use[n->in[k]] = 1;
    }
    for (int o = nfwd; o < g->noutputs; o++) use[g->outputs[o].value] = 1;
    for (int v = 0; v < g->nvalues; v++)
        if (use[v] && !sp->dep[v] && g->values[v].kind != HD_IR_VALUE_CONST)
            sp->saved[sp->nsaved++] = v;
    hd_ctx_free(g->ctx, use, (size_t)g->nvalues + 1);
}

/* The leaves' inputs, and every forward value computed from them: what
 * eager autograd would record. */
static unsigned char *split_tracked(const aot_split *sp, const cp_aot *a) {
    const hd_ir_graph *g = sp->g;
    unsigned char *tr = hd_ctx_calloc(g->ctx, (size_t)g->nvalues + 1, 1);
    if (!tr) return NULL;
    for (int l = 0; l < a->nleaves; l++) {
        int i = hd_ir_find_input(g, a->leaf_names[l]);
        if (i >= 0) tr[g->inputs[i].value] = 1;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[i];
        if (n->out < 0 || sp->dep[n->out]) continue;
        for (int k = 0; k < n->nin; k++) tr[n->out] |= tr[n->in[k]];
    }
    return tr;
}

/* The value whose memory v is a view of (v itself if it is not a view):
 * a saved view of an input changes when the input is written in place. */
static int split_view_root(const hd_ir_graph *g, int v) {
    for (;;) {
        const hd_ir_value *val = &g->values[v];
        if (val->kind != HD_IR_VALUE_NODE) return v;
        const hd_ir_node *n = &g->nodes[val->index];
        if (n->op < 0 || hd_op_infos[n->op].kind != HD_KIND_VIEW || n->nin < 1) return v;
        v = n->in[0];
    }
}

/* Does node n of g cast its input k before its kernel (a mixed-dtype
 * op)? Eager autograd then keeps the cast, a tensor of its own, and an
 * in-place write into the input does not reach it. */
static int split_casts_input(const hd_ir_graph *g, const hd_ir_node *n, int k) {
    hd_op_plan plan;
    if (n->op < 0 || hd_op_infos[n->op].kind == HD_KIND_VIEW) return 0;
    if (hd_ir_plan((hd_ir_graph *)g, (hd_op)n->op, n->in, n->nin, &n->attrs, &plan)) {
        hd_error_clear(g->ctx);
        return 0; /* checked as before */
    }
    int want = n->op == HD_OP_CONCAT ? plan.in_dtype[0] : k < HD_OP_MAX_IN ? plan.in_dtype[k] : -1;
    return want >= 0 && (hd_dtype)want != g->values[n->in[k]].dtype;
}

/* The op of a node in body (or in a loop inside it) whose gradient rule
 * keeps body input k (or a view of it), or NULL. */
static const char *split_body_saves(const hd_ir_graph *body, int k) {
    int bv = body->inputs[k].value;
    for (int i = 0; i < body->nnodes; i++) {
        const hd_ir_node *n = &body->nodes[i];
        for (int j = 0; j < n->nin; j++) {
            if (split_view_root(body, n->in[j]) != bv) continue; /* bv or a view of it */
            if (n->op == HD_IR_LOOP) {
                const char *op = split_body_saves(n->loop->body, j);
                if (op) return op;
                continue;
            }
            const hd_grad_rule *rule = n->op >= 0 ? hd_grad_rule_of((hd_op)n->op) : NULL;
            if (rule && (j >= 31 || (rule->save & (1u << j))) && !split_casts_input(body, n, j))
                return hd_op_name((hd_op)n->op);
        }
    }
    return NULL;
}

/* The op whose gradient rule keeps input k of node n of g itself (not a
 * cast of it), or NULL. */
static const char *split_node_saves(const hd_ir_graph *g, const hd_ir_node *n, int k) {
    if (n->op == HD_IR_LOOP) return split_body_saves(n->loop->body, k);
    if (n->op < 0) return NULL;
    const hd_grad_rule *rule = hd_grad_rule_of((hd_op)n->op);
    int saves = rule && (k >= 31 || (rule->save & (1u << k)));
    return saves && !split_casts_input(g, n, k) ? hd_op_name((hd_op)n->op) : NULL;
}

/* Inputs of the graph that a recorded forward op's gradient rule keeps
 * (checked for in-place changes before backward), with the op. */
static hd_status split_checks(aot_split *sp, cp_aot *a) {
    const hd_ir_graph *g = sp->g;
    hd_ctx *ctx = g->ctx;
    size_t cap = (size_t)g->ninputs + 1;
    unsigned char *tr = split_tracked(sp, a);
    a->check_cap = (int)cap;
    a->check_input = hd_ctx_alloc(ctx, cap * sizeof *a->check_input);
    a->check_op = hd_ctx_calloc(ctx, cap, sizeof *a->check_op);
    if (!tr || !a->check_input || !a->check_op) {
        if (tr) hd_ctx_free(ctx, tr, (size_t)g->nvalues + 1);
        return ctx->status;
    }
    a->ncheck = 0;
    /* last op first, as backward meets them: the op an error names is the
     * one eager autograd would name */
    for (int i = g->nnodes - 1; i >= 0; i--) {
        const hd_ir_node *n = &g->nodes[i];
        if (n->out < 0 || sp->dep[n->out] || !tr[n->out]) continue;
        for (int k = 0; k < n->nin; k++) {
            const hd_ir_value *v = &g->values[split_view_root(g, n->in[k])];
            const char *op = v->kind == HD_IR_VALUE_INPUT ? split_node_saves(g, n, k) : NULL;
            if (!op) continue;
            int dup = 0;
            for (int c = 0; c < a->ncheck && !dup; c++)
                dup = a->check_input[c] == v->index - (v->index > sp->gin);
            if (dup || a->ncheck >= g->ninputs) continue;
            /* the forward graph has the inputs of g but the incoming gradient */
            a->check_input[a->ncheck] = v->index - (v->index > sp->gin);
            a->check_op[a->ncheck++] = op;
        }
    }
    hd_ctx_free(ctx, tr, (size_t)g->nvalues + 1);
    return HD_OK;
}

/* Does the returned value's op keep it for its gradient (following views:
 * eager saves the op's output, which the returned view shares)? */
static void split_ret_check(const aot_split *sp, cp_aot *a) {
    const hd_ir_graph *g = sp->g;
    a->ret_check_op = NULL;
    if (a->ret_out < 0 || a->ret_out >= g->noutputs) return;
    const hd_ir_value *v = &g->values[split_view_root(g, g->outputs[a->ret_out].value)];
    if (v->kind != HD_IR_VALUE_NODE) return;
    const hd_ir_node *n = &g->nodes[v->index];
    const hd_grad_rule *rule = n->op >= 0 ? hd_grad_rule_of((hd_op)n->op) : NULL;
    if (rule && (rule->save & HD_GRAD_SAVE_OUT) && !sp->dep[n->out])
        a->ret_check_op = hd_op_name((hd_op)n->op);
}

static hd_status split_forward(aot_split *sp, int vg, int nfwd) {
    const hd_ir_graph *g = sp->g;
    hd_ir_graph *f = sp->f;
    for (int i = 0; i < g->ninputs; i++) {
        const hd_ir_value *v = &g->values[g->inputs[i].value];
        if (g->inputs[i].value == vg) continue;
        sp->fmap[g->inputs[i].value] =
            hd_ir_add_input(f, g->inputs[i].name, v->dtype, v->shape, v->ndim);
        if (sp->fmap[g->inputs[i].value] < 0) return f->ctx->status;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[i];
        if ((n->op == HD_IR_CALLBACK || !sp->dep[n->out]) && split_node(sp, f, sp->fmap, n))
            return f->ctx->status;
    }
    for (int o = 0; o < nfwd; o++)
        if (hd_ir_add_output(f, g->outputs[o].name, sp->fmap[g->outputs[o].value]))
            return f->ctx->status;
    for (int k = 0; k < sp->nsaved; k++) {
        char name[32];
        snprintf(name, sizeof name, "saved:%d", k);
        if (hd_ir_add_output(f, name, sp->fmap[sp->saved[k]])) return f->ctx->status;
    }
    return HD_OK;
}

static hd_status split_backward(aot_split *sp, int vg, int nfwd) {
    const hd_ir_graph *g = sp->g;
    hd_ir_graph *b = sp->b;
    for (int k = 0; k < sp->nsaved; k++) {
        const hd_ir_value *v = &g->values[sp->saved[k]];
        char name[32];
        snprintf(name, sizeof name, "saved:%d", k);
        if ((sp->bmap[sp->saved[k]] = hd_ir_add_input(b, name, v->dtype, v->shape, v->ndim)) < 0)
            return b->ctx->status;
    }
    const hd_ir_value *gv = &g->values[vg];
    if ((sp->bmap[vg] = hd_ir_add_input(b, "grad:return", gv->dtype, gv->shape, gv->ndim)) < 0)
        return b->ctx->status;
    for (int i = 0; i < g->nnodes; i++) {
        const hd_ir_node *n = &g->nodes[i];
        if (n->op != HD_IR_CALLBACK && n->out >= 0 && sp->dep[n->out] &&
            split_node(sp, b, sp->bmap, n))
            return b->ctx->status;
    }
    for (int o = nfwd; o < g->noutputs; o++) {
        int v = g->outputs[o].value;
        int id =
            g->values[v].kind == HD_IR_VALUE_CONST ? split_const(b, sp->bmap, g, v) : sp->bmap[v];
        if (id < 0 || hd_ir_add_output(b, g->outputs[o].name, id)) return b->ctx->status;
    }
    return HD_OK;
}

hd_status cp_aot_split(hd_vm *vm, const hd_ir_graph *g, cp_aot *a, hd_ir_graph **fwd,
                       hd_ir_graph **bwd) {
    hd_ctx *ctx = &vm->ctx;
    aot_split sp;
    memset(&sp, 0, sizeof sp);
    sp.g = g;
    size_t nv = (size_t)g->nvalues + 1;
    int gi = hd_ir_find_input(g, "grad:return");
    sp.dep = hd_ctx_calloc(ctx, nv, 1);
    sp.fmap = hd_ctx_alloc(ctx, nv * sizeof *sp.fmap);
    sp.bmap = hd_ctx_alloc(ctx, nv * sizeof *sp.bmap);
    sp.saved = hd_ctx_alloc(ctx, nv * sizeof *sp.saved);
    sp.f = hd_ir_graph_new(ctx, g->name);
    sp.b = hd_ir_graph_new(ctx, g->name);
    hd_status st = sp.dep && sp.fmap && sp.bmap && sp.saved && sp.f && sp.b ? HD_OK : HD_ERR_MEMORY;
    if (!st && gi < 0) st = hd_error(ctx, HD_ERR_RUNTIME, "internal error: no incoming gradient");
    if (!st) {
        int vg = g->inputs[gi].value;
        sp.gin = gi;
        for (size_t v = 0; v < nv; v++) sp.fmap[v] = sp.bmap[v] = -1;
        split_mark(&sp, vg, a->nfwd);
        a->nsaved = sp.nsaved;
        st = split_checks(&sp, a);
        split_ret_check(&sp, a);
        if (!st) st = split_forward(&sp, vg, a->nfwd);
        if (!st) st = split_backward(&sp, vg, a->nfwd);
        if (!st) st = hd_ir_verify(sp.f);
        if (!st) st = hd_ir_verify(sp.b);
    }
    a->nsaved = sp.nsaved;
    hd_ctx_free(ctx, sp.dep, nv);
    hd_ctx_free(ctx, sp.fmap, nv * sizeof *sp.fmap);
    hd_ctx_free(ctx, sp.bmap, nv * sizeof *sp.bmap);
    hd_ctx_free(ctx, sp.saved, nv * sizeof *sp.saved);
    if (st) {
        hd_ir_graph_free(sp.f);
        hd_ir_graph_free(sp.b);
        return hd_vm_from_ctx(vm, st);
    }
    *fwd = sp.f;
    *bwd = sp.b;
    return HD_OK;
}

/* Compile the backward graph; find each leaf among the entry's inputs. */
hd_status cp_aot_finish(hd_vm *vm, cp_aot *a, const cp_entry *e, const hd_ir_graph *bwd,
                        const hd_jit_options *j) {
    hd_ctx *ctx = &vm->ctx;
    for (int l = 0; l < a->nleaves; l++) {
        a->leaf_input[l] = -1;
        for (int i = 0; i < e->ninputs; i++)
            if (e->inputs[i].name && !strcmp(e->inputs[i].name, a->leaf_names[l]))
                a->leaf_input[l] = i;
        if (a->leaf_input[l] < 0)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "internal error: a leaf is not an input");
    }
    a->jc = e->jc;
    if (!a->jc->compile(ctx, bwd, j, &a->bexec)) return HD_OK;
    /* what the forward's compiler cannot take, interp can */
    if (ctx->status == HD_ERR_MEMORY || hd_jit_compiler_find(ctx, "interp", &a->jc) ||
        (hd_error_clear(ctx), a->jc->compile(ctx, bwd, j, &a->bexec)))
        return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
    return HD_OK;
}

/* ---- at a run ---- */

typedef struct aot_record {
    cp_aot *a;
    hd_tensor **saved;
    hd_tensor **src;   /* per check: the input's tensor, or NULL (held) */
    uint64_t *version; /* its storage version at the call */
    hd_tensor *ret;    /* a plain view of the returned value, with ret_check_op */
    uint64_t ret_version;
} aot_record;

static void record_free(hd_ctx *ctx, void *ud) {
    aot_record *r = ud;
    size_t ns = (size_t)r->a->nsaved + 1, nc = (size_t)r->a->ncheck + 1;
    for (int k = 0; k < r->a->nsaved; k++) hd_tensor_unref(r->saved[k]);
    for (int k = 0; r->src && k < r->a->ncheck; k++) hd_tensor_unref(r->src[k]);
    hd_tensor_unref(r->ret);
    hd_ctx_free(ctx, r->saved, ns * sizeof *r->saved);
    if (r->src) hd_ctx_free(ctx, r->src, nc * sizeof *r->src);
    if (r->version) hd_ctx_free(ctx, r->version, nc * sizeof *r->version);
    aot_unref(r->a);
    hd_ctx_free(ctx, r, sizeof *r);
}

static hd_status record_backward(hd_ctx *ctx, void *ud, hd_tensor *g, const unsigned char *need,
                                 hd_tensor **gin, int nin) {
    aot_record *r = ud;
    cp_aot *a = r->a;
    for (int k = 0; k < a->ncheck; k++) /* as eager autograd checks its saved tensors */
        if (r->src[k] && r->src[k]->storage && r->src[k]->storage->version != r->version[k])
            return hd_error(ctx, HD_ERR_RUNTIME,
                            "a tensor needed by the gradient of %s was changed in place (after "
                            "the forward pass used it; write into a clone instead)",
                            a->check_op[k]);
    if (r->ret && r->ret->storage->version != r->ret_version)
        return hd_error(ctx, HD_ERR_RUNTIME,
                        "a tensor needed by the gradient of %s was changed in place (after the "
                        "forward pass used it; write into a clone instead)",
                        a->ret_check_op);
    int nin_b = a->nsaved + 1;
    hd_tensor **in = hd_ctx_calloc(ctx, (size_t)nin_b, sizeof *in);
    hd_tensor **outs = hd_ctx_calloc(ctx, (size_t)a->nbouts + 1, sizeof *outs);
    hd_status st = in && outs ? HD_OK : ctx->status;
    if (!st) {
        for (int k = 0; k < a->nsaved; k++) in[k] = r->saved[k];
        in[a->nsaved] = g;
        st = a->jc->run(ctx, a->bexec, in, nin_b, outs, a->nbouts);
    }
    for (int j = 0; !st && j < nin && j < a->nleaves; j++)
        if (need[j] && a->leaf_out[j] >= 0) gin[j] = hd_tensor_ref(outs[a->leaf_out[j]]);
    for (int k = 0; outs && k < a->nbouts; k++) hd_tensor_unref(outs[k]);
    hd_ctx_free(ctx, in, (size_t)nin_b * sizeof *in);
    hd_ctx_free(ctx, outs, (size_t)(a->nbouts + 1) * sizeof *outs);
    return st;
}

static const hd_grad_custom aot_custom = {record_backward, record_free};

hd_status cp_aot_attach(hd_vm *vm, const cp_entry *e, hd_tensor **inputs, hd_tensor **outs) {
    hd_ctx *ctx = &vm->ctx;
    cp_aot *a = e->aot;
    hd_tensor *o = outs[a->ret_out];
    if (e->views[a->ret_out].input >= 0 || o->grad_info) return HD_OK; /* remade with history */
    size_t ns = (size_t)a->nsaved + 1, nc = (size_t)a->ncheck + 1;
    aot_record *r = hd_ctx_calloc(ctx, 1, sizeof *r);
    hd_tensor **leaves = hd_ctx_calloc(ctx, (size_t)a->nleaves + 1, sizeof *leaves);
    if (r) {
        r->saved = hd_ctx_calloc(ctx, ns, sizeof *r->saved);
        r->src = hd_ctx_calloc(ctx, nc, sizeof *r->src);
        r->version = hd_ctx_calloc(ctx, nc, sizeof *r->version);
    }
    if (!r || !leaves || !r->saved || !r->src || !r->version) {
        if (r) {
            hd_ctx_free(ctx, r->saved, ns * sizeof *r->saved);
            hd_ctx_free(ctx, r->src, nc * sizeof *r->src);
            hd_ctx_free(ctx, r->version, nc * sizeof *r->version);
        }
        hd_ctx_free(ctx, r, sizeof *r);
        hd_ctx_free(ctx, leaves, (size_t)(a->nleaves + 1) * sizeof *leaves);
        return hd_vm_oom(vm);
    }
    r->a = a;
    a->refs++;
    for (int k = 0; k < a->nsaved; k++) r->saved[k] = hd_tensor_ref(outs[a->nfwd + k]);
    for (int k = 0; k < a->ncheck; k++) {
        hd_tensor *in = inputs[a->check_input[k]];
        if (in->storage) {
            r->src[k] = hd_tensor_ref(in);
            r->version[k] = in->storage->version;
        }
    }
    if (a->ret_check_op && o->storage) {
        /* without the view the version check would be skipped silently */
        if (!(r->ret = hd_tensor_view(ctx, o, o->shape, o->strides, o->ndim, o->offset))) {
            record_free(ctx, r);
            hd_ctx_free(ctx, leaves, (size_t)(a->nleaves + 1) * sizeof *leaves);
            return hd_vm_oom(vm);
        }
        r->ret_version = o->storage->version;
    }
    for (int j = 0; j < a->nleaves; j++) leaves[j] = inputs[a->leaf_input[j]];
    hd_status st = hd_autograd_record_custom(ctx, leaves, a->nleaves, o, &aot_custom, r);
    hd_ctx_free(ctx, leaves, (size_t)(a->nleaves + 1) * sizeof *leaves);
    return st ? hd_vm_from_ctx(vm, HD_ERR_RUNTIME) : HD_OK;
}
