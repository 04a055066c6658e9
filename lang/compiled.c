/* Compiled functions and blocks: tracing, the cache, running cached graphs
 * (see compiled.h and docs/compiled.md). The entry points (calls, blocks,
 * statements) are in compiled_call.c, the trace in progress (what the body
 * reads, and the heap put back) in compiled_session.c.
 *
 * A cache belongs to a body (a function's AST, or a compiled block's), so
 * every closure made from it shares it. An entry of the cache is one
 * compiled graph with what its key is made of:
 *   - the arguments: how many, the names of the named ones, and for each a
 *     guard (numbers and strings by value, lists by length, functions by
 *     identity, tensors by requires_grad);
 *   - guards on every outer value the body read (globals, captured
 *     variables, fields of objects the call can reach);
 *   - the graph inputs: tensor arguments, and the tensors of objects the
 *     body read (lifted by their paths), with dtype, shape and device;
 *   - whether gradients are on; the compiler and options.
 * A call whose key matches an entry runs the entry's executable; its
 * outputs are the returned tensors, the outer values the body assigned
 * (written back to their paths), tensors written in place (copied back)
 * and gradients (set as .grad). */
#include "builtins_tensor.h"
#include "compiled_int.h"
#include "eval.h"
#include "hd_autograd.h"
#include "tensor_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- small helpers ---- */

hd_compiled_state *cp_state_of(hd_vm *vm) {
    if (vm->compiled) return vm->compiled;
    vm->compiled = hd_ctx_calloc(&vm->ctx, 1, sizeof *vm->compiled);
    if (!vm->compiled) hd_vm_oom(vm);
    return vm->compiled;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cp_logf_line(hd_vm *vm, const char *fmt, const char *a, const char *b) {
    hd_compiled_state *cs = vm->compiled;
    if (!cs || !cs->log) return;
    fflush(stdout);
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
}

int cp_is_symbolic_here(const hd_vm *vm, const hd_tensor *t) {
    return !t->storage && (uint32_t)(t->trace_ref >> 32) == vm->ctx.trace_serial;
}

/* ---- templates of returned values ---- */

void cp_tmpl_free(hd_vm *vm, cp_tmpl *t) {
    hd_vunref(vm, t->v);
    t->v = hd_none();
    cp_path_free(vm, &t->path);
    for (int i = 0; i < t->n; i++) {
        cp_tmpl_free(vm, &t->kids[i]);
        if (t->keys) hd_ctx_strfree(&vm->ctx, t->keys[i]);
    }
    if (t->n) hd_ctx_free(&vm->ctx, t->kids, (size_t)t->n * sizeof *t->kids);
    if (t->keys) hd_ctx_free(&vm->ctx, t->keys, (size_t)t->n * sizeof *t->keys);
    t->n = 0;
    t->kids = NULL;
    t->keys = NULL;
}

static hd_status tmpl_value(hd_vm *vm, const cp_tmpl *t, const cp_roots *r, hd_tensor **outs,
                            hd_value *out);

static hd_status tmpl_list(hd_vm *vm, const cp_tmpl *t, const cp_roots *r, hd_tensor **outs,
                           hd_value *out) {
    hd_value l = t->kind == CP_T_LIST ? hd_list_new(vm, t->n) : hd_dict_new(vm);
    if (l.type != HD_V_LIST && l.type != HD_V_DICT) return vm->err ? vm->err : hd_vm_oom(vm);
    for (int i = 0; i < t->n; i++) {
        hd_value v;
        hd_status st = tmpl_value(vm, &t->kids[i], r, outs, &v);
        if (!st)
            st = t->kind == CP_T_LIST ? hd_list_push(vm, l, v) : hd_dict_set(vm, l, t->keys[i], v);
        if (st) {
            hd_vunref(vm, l);
            return st;
        }
    }
    *out = l;
    return HD_OK;
}

/* A new tensor with t's values for this run. */
static hd_status tmpl_fresh(hd_vm *vm, hd_tensor *t, hd_value *out) {
    hd_ctx *ctx = &vm->ctx;
    hd_tensor *c = NULL;
    int was = hd_grad_set_enabled(ctx, 0);
    hd_op_run(ctx, HD_OP_COPY, &t, 1, NULL, &c);
    hd_grad_set_enabled(ctx, was);
    if (!c) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
    *out = hd_tensor_value(c);
    return HD_OK;
}

static hd_status tmpl_value(hd_vm *vm, const cp_tmpl *t, const cp_roots *r, hd_tensor **outs,
                            hd_value *out) {
    switch (t->kind) {
    case CP_T_OUT: *out = hd_tensor_value(hd_tensor_ref(outs[t->out])); return HD_OK;
    case CP_T_CONST: hd_vref(*out = t->v); return HD_OK;
    case CP_T_FRESH: return tmpl_fresh(vm, t->v.as.t, out);
    case CP_T_PATH:
    case CP_T_DETACH:
        if (!cp_path_get(r, &t->path, out))
            return hd_vm_error(vm, HD_ERR_RUNTIME, "the returned %s no longer exists",
                               t->path.text);
        if (t->kind == CP_T_PATH || out->type != HD_V_TENSOR) return hd_vref(*out), HD_OK;
        hd_tensor *d = hd_grad_detach(&vm->ctx, out->as.t);
        if (!d) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
        *out = hd_tensor_value(d);
        return HD_OK;
    case CP_T_LIST:
    case CP_T_DICT: return tmpl_list(vm, t, r, outs, out);
    }
    return HD_OK;
}

/* ---- entries ---- */

void cp_inputs_free(hd_vm *vm, cp_input *in, int n) {
    for (int i = 0; i < n; i++) hd_ctx_strfree(&vm->ctx, in[i].name);
}

void cp_wbs_free(hd_vm *vm, cp_wb *w, int n) {
    for (int i = 0; i < n; i++) {
        cp_path_free(vm, &w[i].path);
        hd_tensor_unref(w[i].obj);
        if (w[i].tmpl) {
            cp_tmpl_free(vm, w[i].tmpl);
            hd_ctx_free(&vm->ctx, w[i].tmpl, sizeof *w[i].tmpl);
        }
    }
}

void cp_entry_free(hd_vm *vm, cp_entry *e) {
    if (!e) return;
    for (int i = 0; i < e->nguards; i++) cp_guard_free(vm, &e->guards[i]);
    cp_free_array(vm, e->guards, e->capguards, sizeof *e->guards);
    for (int i = 0; i < e->nstate; i++) cp_path_free(vm, &e->state[i]);
    cp_free_array(vm, e->state, e->capstate, sizeof *e->state);
    if (e->inputs) {
        cp_inputs_free(vm, e->inputs, e->ninputs);
        hd_ctx_free(&vm->ctx, e->inputs, (size_t)(e->ninputs + 1) * sizeof *e->inputs);
    }
    if (e->exec) e->jc->free(&vm->ctx, e->exec);
    cp_aot_free(e->aot);
    if (e->spent) hd_ctx_free(&vm->ctx, e->spent, (size_t)e->noutputs + 1);
    for (int k = 0; e->views && k < e->noutputs; k++) {
        hd_ctx_free(&vm->ctx, e->views[k].ops, (size_t)e->views[k].nops * sizeof(hd_op));
        hd_ctx_free(&vm->ctx, e->views[k].attrs, (size_t)e->views[k].nops * sizeof(hd_attrs));
    }
    if (e->views) hd_ctx_free(&vm->ctx, e->views, (size_t)(e->noutputs + 1) * sizeof *e->views);
    cp_wbs_free(vm, e->wbs, e->nwbs);
    cp_free_array(vm, e->wbs, e->capwbs, sizeof *e->wbs);
    cp_tmpl_free(vm, &e->ret);
    hd_ctx_free(&vm->ctx, e, sizeof *e);
}

static void body_free(hd_vm *vm, cp_body *b) {
    for (int i = 0; i < b->nentries; i++) cp_entry_free(vm, b->entries[i]);
    hd_ctx_free(&vm->ctx, b->upval_names, (size_t)b->nupval * sizeof *b->upval_names);
    hd_ctx_free(&vm->ctx, b->slot_names, (size_t)b->nslots * sizeof *b->slot_names);
    hd_ctx_free(&vm->ctx, b->slot_decl, (size_t)b->nslots);
    hd_ctx_free(&vm->ctx, b->slot_reads, (size_t)b->nreads * sizeof *b->slot_reads);
    hd_ctx_free(&vm->ctx, b, sizeof *b);
}

/* Keep at most CP_MAX_ENTRIES, most recent first. */
void cp_body_add(hd_vm *vm, cp_body *b, cp_entry *e) {
    if (b->nentries == CP_MAX_ENTRIES) cp_entry_free(vm, b->entries[--b->nentries]);
    memmove(b->entries + 1, b->entries, (size_t)b->nentries * sizeof *b->entries);
    b->entries[0] = e;
    b->nentries++;
}

static void body_promote(cp_body *b, int i) {
    cp_entry *e = b->entries[i];
    memmove(b->entries + 1, b->entries, (size_t)i * sizeof *b->entries);
    b->entries[0] = e;
}

/* ---- matching a call against an entry ---- */

static void input_type(const cp_input *in, char *buf, size_t n) {
    char ty[160];
    hd_ir_type_str(in->dtype, in->shape, in->ndim, ty, sizeof ty);
    snprintf(buf, n, "%s on %s:%d", ty, in->backend ? in->backend->name : "?", in->device);
}

static int input_matches(const cp_input *in, const hd_tensor *t) {
    return t->storage && t->dtype == in->dtype && t->ndim == in->ndim &&
           !memcmp(t->shape, in->shape, (size_t)t->ndim * sizeof *t->shape) &&
           t->storage->backend == in->backend && t->storage->device == in->device;
}

void cp_input_set_type(cp_input *in, const hd_tensor *t) {
    in->dtype = t->dtype;
    in->ndim = t->ndim;
    memcpy(in->shape, t->shape, sizeof in->shape);
    in->backend = t->storage ? t->storage->backend : NULL;
    in->device = t->storage ? t->storage->device : 0;
}

static int input_why(const cp_input *in, const hd_tensor *t, char *why, size_t n) {
    cp_input now;
    memset(&now, 0, sizeof now);
    cp_input_set_type(&now, t);
    char a[200], b[200];
    input_type(in, a, sizeof a);
    input_type(&now, b, sizeof b);
    snprintf(why, n, "input '%s' changed: %s -> %s", in->name, a, b);
    return 0;
}

/* The tensor input i gets at this call, or NULL (why says what is wrong). */
static hd_tensor *input_tensor(const cp_entry *e, int i, const cp_roots *r, char *why, size_t n) {
    const cp_input *in = &e->inputs[i];
    hd_value v = hd_none();
    int ok = in->arg >= 0 ? in->arg < r->nargs && (v = r->args[in->arg], 1)
                          : cp_path_get(r, &e->state[in->state], &v);
    if (!ok || v.type != HD_V_TENSOR || !v.as.t->storage) {
        snprintf(why, n, "'%s' is no longer a tensor", in->name);
        return NULL;
    }
    if (!input_matches(in, v.as.t)) return input_why(in, v.as.t, why, n), NULL;
    return v.as.t;
}

/* The state inputs are distinct tensors, as at the trace (two paths that
 * lead to one tensor now would be two inputs of the graph, one of which a
 * write or a gradient would miss). */
static int inputs_distinct(const cp_entry *e, hd_tensor **inputs, char *why, size_t n) {
    for (int i = 0; i < e->ninputs; i++) {
        if (e->inputs[i].arg >= 0) continue;
        for (int j = i + 1; j < e->ninputs; j++)
            if (e->inputs[j].arg < 0 && inputs[j] == inputs[i]) {
                snprintf(why, n, "'%s' and '%s' are now one tensor", e->inputs[i].name,
                         e->inputs[j].name);
                return 0;
            }
    }
    return 1;
}

static int entry_match(hd_vm *vm, const cp_entry *e, const cp_roots *r, uint64_t kw_hash,
                       const hd_jit_key *key, hd_tensor **inputs, char *why, size_t n) {
    if (e->nargs != r->nargs || e->kw_hash != kw_hash) {
        snprintf(why, n, "the arguments changed (%d given, %d before)", r->nargs, e->nargs);
        return 0;
    }
    if (e->grad_mode != hd_grad_is_enabled(&vm->ctx)) {
        snprintf(why, n, "gradients were turned %s", e->grad_mode ? "off" : "on");
        return 0;
    }
    unsigned diff = hd_jit_key_diff(&e->key, key) & (HD_JIT_KEY_COMPILER | HD_JIT_KEY_OPTIONS);
    if (diff) {
        hd_jit_key_describe(diff, NULL, NULL, why, n);
        return 0;
    }
    for (int i = 0; i < e->nguards; i++)
        if (!cp_guard_check(r, &e->guards[i], why, n)) return 0;
    for (int i = 0; i < e->ninputs; i++)
        if (!(inputs[i] = input_tensor(e, i, r, why, n))) return 0;
    return inputs_distinct(e, inputs, why, n);
}

/* The entry this call matches (moved to the front), or NULL with why
 * saying what differs from the most recent one. */
cp_entry *cp_cache_find(hd_vm *vm, cp_body *b, const cp_roots *r, uint64_t kw_hash,
                        const hd_jit_key *key, hd_tensor ***inputs, char *why, size_t n) {
    char tmp[512];
    for (int i = 0; i < b->nentries; i++) {
        cp_entry *e = b->entries[i];
        hd_tensor **in = hd_ctx_calloc(&vm->ctx, (size_t)(e->ninputs + 1), sizeof *in);
        if (!in) return hd_vm_oom(vm), NULL;
        if (entry_match(vm, e, r, kw_hash, key, in, i ? tmp : why, i ? sizeof tmp : n)) {
            *inputs = in;
            body_promote(b, i);
            return e;
        }
        hd_ctx_free(&vm->ctx, in, (size_t)(e->ninputs + 1) * sizeof *in);
    }
    return NULL;
}

/* ---- running an entry ---- */

static hd_tensor *wb_target(const cp_wb *w, hd_tensor **inputs) {
    return w->input >= 0 ? inputs[w->input] : w->obj;
}

/* Whether a template makes a tensor at every run: a traced one's value (an
 * output), or a copy of one made inside with data. */
static int tmpl_has_out(const cp_tmpl *t) {
    if (t->kind == CP_T_OUT || t->kind == CP_T_FRESH) return 1;
    for (int i = 0; (t->kind == CP_T_LIST || t->kind == CP_T_DICT) && i < t->n; i++)
        if (tmpl_has_out(&t->kids[i])) return 1;
    return 0;
}

/* The run right after the trace finds the heap as the body left it: the
 * values it stored from before the call are in place (their paths, taken
 * before the body ran, may lead elsewhere now), so only stores that make
 * tensors are made. */
static int wb_skip(const cp_entry *e, const cp_wb *w) {
    return !e->ran && w->kind == CP_WB_VALUE && !tmpl_has_out(w->tmpl);
}

/* A value write-back: the container it stores into and the value. */
typedef struct wb_store {
    hd_value at, v;
} wb_store;

/* The places value write-backs store to, and the values from before the
 * call they store, are found by paths on the heap as the call found it
 * (the trace's scan before the body ran): every one is followed before the
 * first store, so that a store cannot move what a later path finds
 * (setattr(b, "2", b.items[1]) where b."1" was what b.items[1] is now
 * stores b.items[1], not the new b."1"). Traced tensors' places (CP_WB_SET)
 * are paths on the heap as the body left it, followed after the values are
 * stored. */
static hd_status wb_resolve(hd_vm *vm, const cp_entry *e, const cp_roots *r, hd_tensor **outs,
                            wb_store *ws) {
    for (int i = 0; i < e->nwbs; i++) {
        const cp_wb *w = &e->wbs[i];
        if (w->kind != CP_WB_VALUE || wb_skip(e, w)) continue;
        hd_status st = cp_path_parent(r, &w->path, &ws[i].at);
        if (!st) st = tmpl_value(vm, w->tmpl, r, outs, &ws[i].v);
        if (st) return st;
    }
    return HD_OK;
}

static void wb_release(hd_vm *vm, const cp_entry *e, wb_store *ws) {
    for (int i = 0; i < e->nwbs; i++) {
        hd_vunref(vm, ws[i].at);
        hd_vunref(vm, ws[i].v);
    }
}

static hd_status wb_apply(hd_vm *vm, const cp_wb *w, const cp_roots *r, hd_tensor **inputs,
                          hd_tensor **outs, const wb_store *ws) {
    if (w->kind == CP_WB_VALUE) return cp_path_store(r, &w->path, ws->at, ws->v);
    hd_tensor *o = outs[w->out], *t;
    switch (w->kind) {
    case CP_WB_VALUE: return HD_OK;
    case CP_WB_SET: return cp_path_set(r, &w->path, hd_tensor_value(o));
    case CP_WB_COPY:
        t = wb_target(w, inputs);
        if (t && t == o) { /* the code wrote it in place (a donated output) */
            if (t->storage) t->storage->version++;
            return HD_OK;
        }
        if (t && hd_tensor_copy_into(&vm->ctx, t, o)) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
        return HD_OK;
    case CP_WB_GRAD:
        t = wb_target(w, inputs);
        if (t && hd_grad_set(&vm->ctx, t, o)) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
        return HD_OK;
    }
    return HD_OK;
}

/* The writes a run may make straight into its inputs (donated outputs)
 * are checked as the copies after it would be (hd_tensor_copy_into's
 * in-place write), before the run, so that a refused write changes
 * nothing; and their storages' write counts move on before the run too,
 * so that nothing that trusts an unchanged count (the memo, an index
 * range noted on the storage) trusts one that a run stopped halfway
 * through has written. */
static hd_status wb_donees_check(hd_vm *vm, const cp_entry *e, hd_tensor **inputs) {
    const hd_ir_graph *g = e->jc->graph ? e->jc->graph(e->exec) : NULL;
    for (int k = 0; g && k < g->noutputs; k++) {
        int j = g->outputs[k].into;
        if (j >= 0 && j < e->ninputs &&
            hd_autograd_wants(&vm->ctx, HD_OP_ASSIGN, &inputs[j], 1, inputs[j]->dtype) < 0)
            return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
    }
    for (int k = 0; g && k < g->noutputs; k++) {
        int j = g->outputs[k].into;
        if (j >= 0 && j < e->ninputs && inputs[j]->storage) inputs[j]->storage->version++;
    }
    return HD_OK;
}

static hd_status view_remake(hd_vm *vm, const cp_view *v, hd_tensor **inputs, hd_tensor **out) {
    hd_tensor *t = hd_tensor_ref(v->own ? *out : inputs[v->input]);
    for (int i = 0; t && i < v->nops; i++) {
        hd_tensor *u = NULL;
        hd_op_run(&vm->ctx, v->ops[i], &t, 1, &v->attrs[i], &u);
        hd_tensor_unref(t);
        t = u;
    }
    if (!t) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
    hd_tensor_unref(*out);
    *out = t;
    return HD_OK;
}

/* Outputs that came back as one tensor but stand for tensors that are
 * distinct eagerly (a clone of a value, which the passes remove, and the
 * value itself: a momentum buffer made as g.clone() and the .grad g) get a
 * copy each, or a write into one would change the other. (One eager
 * tensor stored in two places is one output.) */
static hd_status outs_split(hd_vm *vm, const cp_entry *e, hd_tensor **outs) {
    int n = e->aot ? cp_aot_nfwd(e->aot) : e->noutputs; /* not the saved values */
    for (int k = 1; k < n && k < e->noutputs; k++)
        for (int j = 0; j < k; j++) {
            if (!outs[k] || outs[k] != outs[j]) continue;
            hd_tensor *c = NULL;
            if (hd_op_run(&vm->ctx, HD_OP_COPY, &outs[j], 1, NULL, &c))
                return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
            hd_tensor_unref(outs[k]);
            outs[k] = c;
            break;
        }
    return HD_OK;
}

/* Run e on inputs; write back; *ret (may be NULL) gets the returned value. */
hd_status cp_entry_run(hd_vm *vm, cp_entry *e, const cp_roots *r, hd_tensor **inputs,
                       hd_value *ret) {
    hd_ctx *ctx = &vm->ctx;
    if (wb_donees_check(vm, e, inputs)) return vm->err;
    hd_tensor **outs = hd_ctx_calloc(ctx, (size_t)(e->noutputs + 1), sizeof *outs);
    if (!outs) return hd_vm_oom(vm);
    hd_status st = e->jc->run(ctx, e->exec, inputs, e->ninputs, outs, e->noutputs);
    if (st) st = hd_vm_from_ctx(vm, st);
    if (!st) st = outs_split(vm, e, outs);
    for (int k = 0; !st && e->spent && k < e->noutputs; k++)
        if (e->spent[k] && hd_autograd_mark_spent(ctx, outs[k]))
            st = hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
    for (int k = 0; !st && k < e->noutputs; k++)
        if (e->views[k].input >= 0 || e->views[k].own)
            st = view_remake(vm, &e->views[k], inputs, &outs[k]);
    if (!st && e->aot) st = cp_aot_attach(vm, e, inputs, outs);
    wb_store wsbuf[16],
        *ws = e->nwbs <= 16 ? wsbuf : hd_ctx_alloc(ctx, (size_t)e->nwbs * sizeof *ws);
    if (!ws) st = st ? st : hd_vm_oom(vm);
    for (int i = 0; ws && i < e->nwbs; i++) ws[i].at = ws[i].v = hd_none();
    if (!st) st = wb_resolve(vm, e, r, outs, ws);
    int got = 0;                                                         /* *ret holds a value */
    if (!st && ret) got = !(st = tmpl_value(vm, &e->ret, r, outs, ret)); /* as found, too */
    for (int i = 0; !st && i < e->nwbs; i++)
        if (!wb_skip(e, &e->wbs[i])) st = wb_apply(vm, &e->wbs[i], r, inputs, outs, &ws[i]);
    if (!st) e->ran = 1;
    if (ws) wb_release(vm, e, ws);
    if (ws && ws != wsbuf) hd_ctx_free(ctx, ws, (size_t)e->nwbs * sizeof *ws);
    if (st && got) {
        hd_vunref(vm, *ret);
        *ret = hd_none();
    }
    for (int k = 0; k < e->noutputs; k++) hd_tensor_unref(outs[k]);
    hd_ctx_free(ctx, outs, (size_t)(e->noutputs + 1) * sizeof *outs);
    if (!st) e->hits++;
    return st;
}

/* ---- outputs of a finished trace ---- */

static int same_value(const hd_tensor *a, const hd_tensor *b) {
    if (a == b) return 1;
    return !a->storage && !b->storage && a->trace_ref && a->trace_ref == b->trace_ref;
}

/* The output index of t (one output per value); -1 on error. */
static int out_add(cp_session *s, hd_tensor *t, const char *base) {
    hd_vm *vm = s->vm;
    for (int i = 0; i < s->nouts; i++)
        if (same_value(s->outs[i], t)) return i;
    if (!CP_GROW(vm, s->outs, s->capouts, s->nouts) ||
        !CP_GROW(vm, s->outnames, s->capoutnames, s->nouts))
        return -1;
    char name[300];
    snprintf(name, sizeof name, "%s", base);
    for (int k = 2, clash = 1; clash; k++) {
        clash = 0;
        for (int i = 0; i < s->nouts && !clash; i++) clash = !strcmp(s->outnames[i], name);
        if (clash) snprintf(name, sizeof name, "%s#%d", base, k);
    }
    if (hd_trace_output(&vm->ctx, name, t)) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME), -1;
    if (!(s->outnames[s->nouts] = hd_ctx_strdup(&vm->ctx, name))) return hd_vm_oom(vm), -1;
    s->outs[s->nouts] = hd_tensor_ref(t);
    return s->nouts++;
}

int cp_session_out(cp_session *s, hd_tensor *t, const char *base) {
    return out_add(s, t, base);
}

static hd_status tmpl_kids(cp_session *s, hd_value v, cp_tmpl *t, int depth) {
    hd_vm *vm = s->vm;
    int dict = v.type == HD_V_DICT;
    int64_t n = dict ? hd_as_dict(v)->len : hd_as_list(v)->len;
    t->kind = dict ? CP_T_DICT : CP_T_LIST;
    if (!n) return HD_OK;
    if (n > 1 << 20) return hd_vm_error(vm, HD_ERR_RUNTIME, "the returned list is too long");
    /* t->n as soon as kids exist: cp_tmpl_free frees what it counts */
    t->kids = hd_ctx_calloc(&vm->ctx, (size_t)n, sizeof *t->kids);
    if (!t->kids) return hd_vm_oom(vm);
    t->n = (int)n;
    for (int i = 0; i < t->n; i++) t->kids[i].v = hd_none();
    if (dict && !(t->keys = hd_ctx_calloc(&vm->ctx, (size_t)n, sizeof *t->keys)))
        return hd_vm_oom(vm);
    for (int i = 0; i < t->n; i++) {
        hd_value item = dict ? hd_as_dict(v)->vals[i] : hd_as_list(v)->items[i];
        if (dict && !(t->keys[i] = hd_ctx_strdup(&vm->ctx, hd_as_dict(v)->keys[i]->chars)))
            return hd_vm_oom(vm);
        if (cp_tmpl_build(s, item, &t->kids[i], depth + 1)) return vm->err;
    }
    return HD_OK;
}

/* The node of a tensor from before the call that its path still leads to
 * after the body ran (the body did not store another there), -1, or -2
 * with the VM's error (out of memory making the path). */
static int tmpl_state_tensor(cp_session *s, hd_tensor *t) {
    int node = t->storage ? cp_scan_find(&s->pre, t) : -1;
    cp_path p;
    hd_value now;
    if (node < 0) return -1;
    if (cp_scan_path(&s->pre, &s->roots, node, &p)) return -2;
    int same = cp_path_get(&s->roots, &p, &now) && now.type == HD_V_TENSOR && now.as.t == t;
    cp_path_free(s->vm, &p);
    return same ? node : -1;
}

/* The shape of the returned value: tensors become outputs; numbers,
 * strings and none stay as they are; values from before the call are
 * found again by their paths. */
hd_status cp_tmpl_build(cp_session *s, hd_value v, cp_tmpl *t, int depth) {
    hd_vm *vm = s->vm;
    memset(t, 0, sizeof *t);
    t->v = hd_none();
    if (depth > 64)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "the returned value is nested too deeply");
    int node;
    switch (v.type) {
    case HD_V_TENSOR:
        if ((node = tmpl_state_tensor(s, v.as.t)) >= 0) { /* itself, as eagerly */
            t->kind = CP_T_PATH;
            return cp_scan_path(&s->pre, &s->roots, node, &t->path);
        }
        if (node == -2) return vm->err ? vm->err : hd_vm_oom(vm);
        t->kind = CP_T_OUT;
        t->out = out_add(s, v.as.t, "return");
        return t->out < 0 ? vm->err : HD_OK;
    case HD_V_NONE:
    case HD_V_BOOL:
    case HD_V_INT:
    case HD_V_FLOAT:
    case HD_V_STR:
    case HD_V_DTYPE:
        t->kind = CP_T_CONST;
        hd_vref(t->v = v);
        return HD_OK;
    case HD_V_LIST:
    case HD_V_DICT:
        if (cp_scan_find(&s->pre, v.as.o) < 0) return tmpl_kids(s, v, t, depth);
        /* a container from before the call is returned as itself */
        /* fall through */
    default: {
        hd_status st = HD_OK;
        if (!cp_session_obj_path(s, hd_value_is_obj(v) ? (const void *)v.as.o : NULL, &t->path,
                                 &st))
            return hd_vm_error(vm, HD_ERR_RUNTIME,
                               "compiled code returns tensors, numbers, strings, none, and lists "
                               "and dicts of them; this returns a %s made inside it",
                               hd_value_type_name(v));
        t->kind = CP_T_PATH;
        return st;
    }
    }
}

cp_wb *cp_wb_new(cp_session *s, cp_wb_kind kind, int out) {
    if ((out < 0 && kind != CP_WB_VALUE) || !CP_GROW(s->vm, s->wbs, s->capwbs, s->nwbs))
        return NULL;
    cp_wb *w = &s->wbs[s->nwbs++];
    memset(w, 0, sizeof *w);
    w->kind = kind;
    w->out = out;
    w->input = -1;
    return w;
}

/* Outer places the body filled with traced tensors: outputs written back
 * after each run (the arguments themselves and .grad are not: gradients
 * are written back from the captured tensors). */
/* A traced gradient on a tensor at a path: written back through the path
 * (t.grad); remembered so that wb_grads does not write it again. */
static int wb_is_grad(cp_session *s, const cp_scan *post, int i) {
    const cp_node *n = &post->nodes[i];
    if (n->parent < 0 || n->step.kind != CP_GRAD || cp_scan_under_grad(post, n->parent)) return -1;
    hd_value t = post->nodes[n->parent].v;
    if (!CP_GROW(s->vm, s->gradded, s->capgradded, s->ngradded)) return 0;
    s->gradded[s->ngradded++] = hd_tensor_ref(t.as.t);
    return 1;
}

static hd_status wb_scan(cp_session *s) {
    hd_vm *vm = s->vm;
    cp_scan post;
    hd_status st = cp_scan_build(&post, &s->roots);
    for (int i = 0; !st && i < post.n; i++) {
        hd_value v = post.nodes[i].v;
        if (v.type != HD_V_TENSOR || !cp_is_symbolic_here(vm, v.as.t) || cp_scan_is_arg(&post, i))
            continue;
        int g = cp_scan_under_grad(&post, i) ? wb_is_grad(s, &post, i) : -1;
        if (!g) {
            st = vm->err;
            break;
        }
        if (g < 0 && cp_scan_under_grad(&post, i)) continue;
        cp_path p;
        if ((st = cp_scan_path(&post, &s->roots, i, &p))) break;
        cp_wb *w = cp_wb_new(s, CP_WB_SET, out_add(s, v.as.t, p.text));
        if (!w) {
            cp_path_free(vm, &p);
            st = vm->err ? vm->err : hd_vm_oom(vm);
            break;
        }
        w->path = p;
    }
    cp_scan_free(&post);
    return st;
}

static int cap_input(const cp_session *s, const hd_tensor *t) {
    for (int i = 0; i < s->ncaps; i++)
        if (s->caps[i].t == t) return s->caps[i].input;
    return -1;
}

/* Tensors written whole in place: copied into after each run. */
static hd_status wb_writes(cp_session *s) {
    int n = hd_trace_nwrites(&s->vm->ctx);
    for (int i = 0; i < n; i++) {
        hd_tensor *t = hd_trace_write_target(&s->vm->ctx, i);
        int node = cp_scan_find(&s->pre, t);
        char name[300] = "written";
        if (node >= 0) {
            cp_path p;
            if (cp_scan_path(&s->pre, &s->roots, node, &p)) return s->vm->err;
            snprintf(name, sizeof name, "%s", p.text);
            cp_path_free(s->vm, &p);
        }
        cp_wb *w = cp_wb_new(s, CP_WB_COPY, out_add(s, t, name));
        if (!w) return s->vm->err ? s->vm->err : hd_vm_oom(s->vm);
        w->input = cap_input(s, t);
        if (w->input < 0) w->obj = hd_tensor_ref(t);
    }
    return HD_OK;
}

static hd_status wb_grad(cp_session *s, hd_tensor *t, int input) {
    hd_tensor *g = hd_grad_get(t);
    if (!g || !cp_is_symbolic_here(s->vm, g)) return HD_OK;
    cp_wb *w = cp_wb_new(s, CP_WB_GRAD, out_add(s, g, "grad"));
    if (!w) return s->vm->err ? s->vm->err : hd_vm_oom(s->vm);
    w->input = input;
    if (input < 0) w->obj = hd_tensor_ref(t);
    return HD_OK;
}

/* Gradients backward() left on captured tensors and on arguments. */
int cp_gradded(const cp_session *s, const hd_tensor *t) {
    for (int i = 0; i < s->ngradded; i++)
        if (s->gradded[i] == t) return 1;
    return 0;
}

static hd_status wb_grads(cp_session *s, hd_value *sym, int nsym) {
    for (int i = 0; i < s->ncaps; i++)
        if (!cp_gradded(s, s->caps[i].t) && wb_grad(s, s->caps[i].t, s->caps[i].input))
            return s->vm->err;
    for (int i = 0, k = 0; i < nsym; i++) {
        if (sym[i].type != HD_V_TENSOR || sym[i].as.t->storage || cp_gradded(s, sym[i].as.t))
            continue;
        while (k < s->ninputs && s->inputs[k].arg != i) k++;
        if (k < s->ninputs && wb_grad(s, sym[i].as.t, k)) return s->vm->err;
    }
    return HD_OK;
}

/* A traced result with gradient history: a graph would drop it. */
static int has_history(const hd_tensor *t) {
    return hd_grad_has_history(t);
}

static int tmpl_needs_grad(const cp_session *s, const cp_tmpl *t) {
    if (t->kind == CP_T_OUT) return has_history(s->outs[t->out]);
    for (int i = 0; i < t->n; i++)
        if (tmpl_needs_grad(s, &t->kids[i])) return 1;
    return 0;
}

/* Does a result need gradients (running the graph would lose its
 * history)? */
static int needs_grad(const cp_session *s, const cp_tmpl *ret) {
    for (int i = 0; i < s->nwbs; i++)
        if (s->wbs[i].kind == CP_WB_SET && has_history(s->outs[s->wbs[i].out])) return 1;
    return ret && tmpl_needs_grad(s, ret);
}

/* ---- from a finished trace to an entry ---- */

/* The default compiler (hd_jit_default_compiler); 1 when HODU_COMPILER
 * named it (then it counts as chosen). */
static int default_compiler(hd_ctx *ctx, char *buf, size_t n) {
    int named = 0;
    snprintf(buf, n, "%s", hd_jit_default_compiler(ctx, &named));
    return named;
}

/* What the strategy lets a trace read (the knobs optim and nn read, the
 * precision) and the functions backward() runs after it, hashed one word
 * at a time: small values never collide, so two settings never share
 * compiled code (before, one int mixed them: a checkpoint interval of 1
 * and precision "full" with none gave the same key). */
static uint64_t opts_knobs(hd_vm *vm) {
    const hd_strategy *s = &vm->strategy.cur;
    int split = s->parallelism == HD_PAR_MODEL || s->parallelism == HD_PAR_PIPELINE;
    int64_t hooks =
        vm->backward_hooks.type == HD_V_LIST ? (int64_t)hd_as_list(vm->backward_hooks)->len : 0;
    int64_t v[] = {hd_strategy_accum_steps(vm),
                   hd_strategy_checkpoint_interval(vm),
                   vm->ctx.autocast,
                   hd_strategy_dist_data(vm),
                   hooks,
                   split ? s->workers : 0,
                   s->parallelism == HD_PAR_PIPELINE ? s->micro_batches : 0};
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) h = (h ^ (uint64_t)v[i]) * 0x100000001b3ull;
    return h;
}

void cp_opts_default(hd_vm *vm, cp_opts *o) {
    hd_compiled_state *cs = cp_state_of(vm);
    memset(o, 0, sizeof *o);
    if (!cs) {
        hd_vm_clear_error(vm); /* the compile that follows fails the same way */
        o->chosen = default_compiler(&vm->ctx, o->compiler, sizeof o->compiler);
    } else {
        if (!cs->compiler[0])
            cs->compiler_chosen = default_compiler(&vm->ctx, cs->compiler, sizeof cs->compiler);
        memcpy(o->compiler, cs->compiler, sizeof o->compiler);
        o->chosen = cs->compiler_chosen;
    }
    snprintf(o->device, sizeof o->device, "cpu");
    /* a default device other than the cpu: compiled code runs there, with
     * its compiler unless one was named */
    o->device_set = hd_default_device_name(vm, o->device, sizeof o->device);
    if (o->device_set && !o->chosen) snprintf(o->compiler, sizeof o->compiler, "cuda");
    o->opt_level = 1;
    o->no_fuse = !vm->strategy.cur.fusion;
    o->knobs = opts_knobs(vm);
}

/* One tensor's vote for where the code runs: the first device seen, or
 * an error naming both devices. */
static hd_status follow_one(hd_vm *vm, const char *where, const hd_tensor *t, const char *name,
                            const hd_tensor **first, const char **first_name) {
    const hd_storage *s = t->storage, *f = *first ? (*first)->storage : NULL;
    if (!f) {
        *first = t;
        *first_name = name;
        return HD_OK;
    }
    if (f->backend == s->backend && f->device == s->device) return HD_OK;
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "%s: tensors on different devices: '%s' is on %s:%d, '%s' on %s:%d", where,
                       *first_name, f->backend->name, f->device, name, s->backend->name, s->device);
}

/* Compiled code with no device named (no device = option, no default
 * device) runs where its tensors are, as torch.compile and jax.jit follow
 * their inputs: this call's graph inputs and the captured constants on a
 * device (cpu constants are uploaded, as before); on a cuda device with
 * the cuda compiler unless one was named. Hodu numbers and 0-d cpu
 * tensors follow the others. */
static hd_status opts_follow(hd_vm *vm, const char *where, cp_opts *o, const hd_ir_graph *g,
                             hd_tensor *const *in) {
    if (o->device_set) return HD_OK;
    const hd_tensor *first = NULL;
    const char *first_name = NULL;
    for (int i = 0; i < g->ninputs; i++) {
        const hd_tensor *t = in[i];
        if (!t || !t->storage || hd_tensor_follows_device(t)) continue;
        if (follow_one(vm, where, t, g->inputs[i].name, &first, &first_name)) return vm->err;
    }
    for (int i = 0; i < g->nconsts; i++) {
        const hd_tensor *t = g->consts[i].t;
        if (!t || !t->storage || hd_tensor_is_cpu(t)) continue;
        if (follow_one(vm, where, t, "a captured tensor", &first, &first_name)) return vm->err;
    }
    if (!first || hd_tensor_is_cpu(first)) return HD_OK;
    snprintf(o->device, sizeof o->device, "%s:%d", first->storage->backend->name,
             first->storage->device);
    if (!o->chosen) snprintf(o->compiler, sizeof o->compiler, "cuda");
    return HD_OK;
}

void hd_compiled_trace_place(hd_vm *vm, const hd_backend **be, int *dev) {
    *be = &hd_cpu_backend;
    *dev = 0;
    cp_session *s = vm->compiled ? vm->compiled->session : NULL;
    if (!s) return;
    if (s->opts.device_set) { /* checked when the option was read */
        const hd_backend *b;
        int d;
        if (!hd_backend_parse_device(&vm->ctx, s->opts.device, &b, &d)) *be = b, *dev = d;
        return;
    }
    for (int i = 0; i < s->ninputs; i++) {
        const hd_tensor *t = s->first[i];
        if (!t || !t->storage || hd_tensor_follows_device(t)) continue;
        *be = t->storage->backend;
        *dev = t->storage->device;
        return;
    }
}

static void opts_jit(const cp_opts *o, hd_jit_options *j) {
    hd_jit_options_init(j);
    j->device = o->device;
    j->opt_level = o->opt_level;
    j->no_fuse = o->no_fuse;
}

/* The parts of a key that do not depend on what the body read. */
void cp_key_fixed(const cp_body *b, const cp_opts *o, hd_jit_key *k) {
    hd_jit_options j;
    opts_jit(o, &j);
    memset(k, 0, sizeof *k);
    k->body = b->hash;
    k->compiler = hd_jit_string_hash(o->compiler);
    /* a trace reads the strategy's knobs (optim, nn): another value is
     * another graph */
    k->options = hd_jit_options_hash(&j) ^ o->knobs;
}

static uint64_t guards_hash(const cp_guard *g, int n) {
    hd_ir_hasher h;
    hd_ir_hash_init(&h);
    for (int i = 0; i < n; i++) {
        char brief[128];
        cp_value_brief(g[i].v, brief, sizeof brief);
        hd_ir_hash_str(&h, g[i].path.text);
        hd_ir_hash_u64(&h, (uint64_t)g[i].kind * 31 + (uint64_t)g[i].len);
        hd_ir_hash_str(&h, brief);
    }
    return hd_ir_hash_final(&h);
}

static int find_input(const cp_session *s, const char *name) {
    for (int i = 0; i < s->ninputs; i++)
        if (s->inputs[i].name && !strcmp(s->inputs[i].name, name)) return i;
    return -1;
}

/* Inputs in the graph's order, taken from the session; first gets the
 * tensors of this call in that order. */
static hd_status entry_inputs(cp_session *s, const hd_ir_graph *g, cp_entry *e, hd_tensor **first) {
    hd_vm *vm = s->vm;
    e->inputs = hd_ctx_calloc(&vm->ctx, (size_t)(g->ninputs + 1), sizeof *e->inputs);
    if (!e->inputs) return hd_vm_oom(vm);
    e->ninputs = g->ninputs;
    for (int i = 0; i < g->ninputs; i++) {
        int k = find_input(s, g->inputs[i].name);
        if (k < 0) return hd_vm_error(vm, HD_ERR_RUNTIME, "internal error: unknown graph input");
        e->inputs[i] = s->inputs[k];
        s->inputs[k].name = NULL;
        first[i] = s->first[k];
    }
    return HD_OK;
}

/* The value v views through view ops only (v itself when it is no view);
 * *n gets their count. */
static int view_base(const hd_ir_graph *g, int v, int *n) {
    *n = 0;
    while (g->values[v].kind == HD_IR_VALUE_NODE) {
        const hd_ir_node *nd = &g->nodes[g->values[v].index];
        if (nd->op < 0 || hd_op_infos[nd->op].kind != HD_KIND_VIEW) break;
        v = nd->in[0];
        ++*n;
    }
    return v;
}

/* Output k of g: a view of an input is made again from the caller's
 * tensor; a view of a value computed inside (x.expand(...), x.T) is made
 * of that value, which the graph outputs instead (own). */
static hd_status view_make(hd_vm *vm, hd_ir_graph *g, int k, int keep, cp_view *out) {
    int n, v = g->outputs[k].value, base = view_base(g, v, &n);
    out->input = -1;
    if (!n) return HD_OK;
    if (g->values[base].kind == HD_IR_VALUE_INPUT) {
        out->input = g->values[base].index;
    } else if (!keep) {
        out->own = 1;
        g->outputs[k].value = base;
    } else {
        return HD_OK;
    }
    out->ops = hd_ctx_alloc(&vm->ctx, (size_t)n * sizeof *out->ops);
    out->attrs = out->ops ? hd_ctx_alloc(&vm->ctx, (size_t)n * sizeof *out->attrs) : NULL;
    if (!out->attrs) {
        hd_ctx_free(&vm->ctx, out->ops, (size_t)n * sizeof *out->ops);
        out->ops = NULL;
        return hd_vm_oom(vm);
    }
    out->nops = n;
    for (int i = n - 1; i >= 0; i--) { /* the chain runs from the input */
        const hd_ir_node *nd = &g->nodes[g->values[v].index];
        out->ops[i] = (hd_op)nd->op;
        out->attrs[i] = nd->attrs;
        v = nd->in[0];
    }
    return HD_OK;
}

static hd_status entry_outputs(hd_vm *vm, hd_ir_graph *g, cp_entry *e) {
    e->views = hd_ctx_calloc(&vm->ctx, (size_t)(g->noutputs + 1), sizeof *e->views);
    if (!e->views) return hd_vm_oom(vm);
    e->noutputs = g->noutputs;
    int keep = e->aot ? cp_aot_result(e->aot) : -1; /* its record needs the value itself */
    for (int k = 0; k < g->noutputs; k++)
        if (view_make(vm, g, k, k == keep, &e->views[k])) return vm->err;
    return HD_OK;
}

/* Outputs whose records backward() used up inside the body (a returned
 * loss): their runs' tensors get a used-up record too, so that a second
 * backward() says so, as eagerly. */
static hd_status entry_spent(cp_session *s, cp_entry *e) {
    /* with a backward graph: the call's own outputs, not its result (whose
     * records the traced backward used) nor the saved values */
    int n = e->aot ? cp_aot_nfwd(e->aot) : s->nouts, skip = e->aot ? cp_aot_result(e->aot) : -1;
    for (int k = 0; k < n && k < e->noutputs; k++) {
        if (k == skip || !hd_grad_is_spent(s->outs[k])) continue;
        if (!e->spent && !(e->spent = hd_ctx_calloc(&s->vm->ctx, (size_t)e->noutputs + 1, 1)))
            return hd_vm_oom(s->vm);
        e->spent[k] = 1;
    }
    return HD_OK;
}

/* Move what the key is made of from the session into e. */
void cp_entry_take(cp_session *s, cp_entry *e, int nargs, uint64_t kw_hash) {
    e->nargs = nargs;
    e->kw_hash = kw_hash;
    e->grad_mode = hd_grad_is_enabled(&s->vm->ctx);
    e->guards = s->guards;
    e->nguards = s->nguards;
    e->capguards = s->capguards;
    e->state = s->state;
    e->nstate = s->nstate;
    e->capstate = s->capstate;
    e->wbs = s->wbs;
    e->nwbs = s->nwbs;
    e->capwbs = s->capwbs;
    s->guards = NULL;
    s->nguards = s->capguards = 0;
    s->state = NULL;
    s->nstate = s->capstate = 0;
    s->wbs = NULL;
    s->nwbs = s->capwbs = 0;
    e->key.constants = guards_hash(e->guards, e->nguards);
}

static hd_status compile_with(hd_ctx *ctx, const char *compiler, const hd_jit_options *j,
                              const hd_ir_graph *g, cp_entry *e) {
    if (hd_jit_compiler_find(ctx, compiler, &e->jc) || e->jc->available(ctx, j) ||
        e->jc->compile(ctx, g, j, &e->exec))
        return ctx->status ? ctx->status : HD_ERR_RUNTIME;
    return HD_OK;
}

static hd_status entry_compile(hd_vm *vm, cp_body *b, const cp_opts *o, const hd_ir_graph *g,
                               cp_entry *e) {
    hd_ctx *ctx = &vm->ctx;
    hd_jit_options j;
    opts_jit(o, &j);
    double t0 = now_seconds();
    hd_status st = compile_with(ctx, o->compiler, &j, g, e);
    if (st && st != HD_ERR_MEMORY && !o->chosen && strcmp(o->compiler, "interp") != 0) {
        /* the default compiler cannot take this graph: interp can */
        cp_logf_line(vm, "hodu: %s: %s; compiled with interp", b->where, hd_error_message(ctx));
        hd_error_clear(ctx);
        st = compile_with(ctx, "interp", &j, g, e);
    }
    if (st) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
    double dt = now_seconds() - t0;
    if (vm->compiled->log == 2) {
        char secs[64];
        snprintf(secs, sizeof secs, "%.3f ms", dt * 1e3);
        cp_logf_line(vm, "hodu: compile %s in %s", b->where, secs);
    }
    b->compile_seconds += dt;
    if (!b->implicit) {
        vm->compiled->compile_seconds += dt;
        vm->compiled->compiles++;
    }
    return hd_compiled_set_last_ir(vm, e->jc->graph(e->exec));
}

static int tmpl_uses_out(const cp_tmpl *t, int k) {
    if (t->kind == CP_T_OUT) return t->out == k;
    for (int i = 0; (t->kind == CP_T_LIST || t->kind == CP_T_DICT) && i < t->n; i++)
        if (tmpl_uses_out(&t->kids[i], k)) return 1;
    return 0;
}

/* Is output k read by anything but write-back i (the result, another
 * write-back, a view made of it, a used-up record)? */
static int out_shared(const cp_session *s, const cp_entry *e, int k, int i) {
    if (tmpl_uses_out(&e->ret, k) || e->views[k].input >= 0 || e->views[k].own ||
        (e->spent && e->spent[k]))
        return 1;
    for (int j = 0; j < s->nwbs; j++)
        if (j != i && (s->wbs[j].out == k || (s->wbs[j].tmpl && tmpl_uses_out(s->wbs[j].tmpl, k))))
            return 1;
    return 0;
}

/* An output that only replaces an input's contents (a tensor written whole
 * in place, as an optimizer step writes a parameter) may be computed into
 * that input's memory: the graph says which input (hd_ir_output.into) and
 * the compiler decides (the llvm compiler's donated outputs). The result
 * is the same tensor with the same contents; wb_apply then copies
 * nothing. */
static void entry_donate(const cp_session *s, const cp_entry *e, hd_ir_graph *g) {
    for (int i = 0; i < s->nwbs; i++) {
        const cp_wb *w = &s->wbs[i];
        if (w->kind == CP_WB_COPY && w->input >= 0 && w->input < g->ninputs && w->out >= 0 &&
            w->out < g->noutputs && !out_shared(s, e, w->out, i))
            g->outputs[w->out].into = w->input;
    }
}

static hd_status entry_inputs_session(cp_session *s, cp_entry *e) {
    hd_vm *vm = s->vm;
    e->inputs = hd_ctx_calloc(&vm->ctx, (size_t)(s->ninputs + 1), sizeof *e->inputs);
    if (!e->inputs) return hd_vm_oom(vm);
    e->ninputs = s->ninputs;
    for (int i = 0; i < s->ninputs; i++) {
        e->inputs[i] = s->inputs[i];
        s->inputs[i].name = NULL;
    }
    return HD_OK;
}

/* The body ran. Gather its outputs and end the trace: e gets the graph's
 * executable, or (a result needs gradients, which a graph would lose)
 * e->eager is set and the trace is abandoned. first (graph order) gets the
 * tensors of this call, borrowed from the session (NULL on failure). */
hd_status cp_session_finish(cp_session *s, const hd_value *ret, hd_value *sym, int nsym,
                            cp_entry *e, hd_tensor ***first) {
    hd_vm *vm = s->vm;
    vm->trace_reads = 0;
    if (s->oom) return hd_vm_oom(vm);
    hd_status st = ret ? cp_tmpl_build(s, *ret, &e->ret, 0) : HD_OK;
    if (!st) st = cp_wb_values(s);
    if (!st) st = wb_scan(s);
    if (!st) st = wb_writes(s);
    if (!st) st = wb_grads(s, sym, nsym);
    if (st) return st;
    /* (asked once: tracing the backward graph uses the result's records up) */
    int aot = 0, needs = !s->stateful[0] && needs_grad(s, ret ? &e->ret : NULL);
    if (needs) { /* forward and backward graphs, or eagerly */
        if ((st = cp_aot_trace(s, ret ? &e->ret : NULL, sym, nsym, &e->aot))) return st;
        aot = e->aot != NULL;
    }
    int idle =
        s->body->implicit && !(vm->compile_all & HD_COMPILE_ALL_ENV) && !s->ninputs && !s->nouts;
    if (s->stateful[0] || (needs && !aot) || idle) {
        e->eager = s->stateful[0] ? CP_EAGER_STATE : idle ? CP_EAGER_IDLE : CP_EAGER_GRAD;
        snprintf(e->eager_why, sizeof e->eager_why, "%s",
                 s->stateful[0]  ? s->stateful
                 : idle          ? "it does no tensor work"
                 : s->aot_custom ? "its result needs gradients through a custom Function, "
                                   "whose backward runs as plain code (call backward() inside it "
                                   "to compile both)"
                                 : "its result needs gradients (call it under no_grad, or call "
                                   "backward() inside it)");
        hd_trace_abort(&vm->ctx);
        return entry_inputs_session(s, e);
    }
    hd_ir_graph *g = NULL, *bwd = NULL;
    if (hd_trace_end(&vm->ctx, &g)) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
    if (aot) {
        hd_ir_graph *fwd = NULL;
        st = cp_aot_split(vm, g, e->aot, &fwd, &bwd);
        hd_ir_graph_free(g);
        if (st) return st;
        g = fwd;
    }
    *first = hd_ctx_calloc(&vm->ctx, (size_t)(g->ninputs + 1), sizeof **first);
    st = *first ? HD_OK : hd_vm_oom(vm);
    if (!st) st = entry_inputs(s, g, e, *first);
    if (!st) st = entry_outputs(vm, g, e);
    if (!st) st = entry_spent(s, e);
    if (!st && !aot) entry_donate(s, e, g);
    if (!st) {
        hd_jit_signature sig;
        hd_jit_signature_make(&sig, *first, g->ninputs);
        e->key.inputs = sig.hash;
        st = opts_follow(vm, s->body->where, &s->opts, g, *first);
        if (!st) st = entry_compile(vm, s->body, &s->opts, g, e);
    }
    if (!st && bwd) {
        hd_jit_options j;
        opts_jit(&s->opts, &j);
        st = cp_aot_finish(vm, e->aot, e, bwd, &j);
    }
    if (st && *first) { /* sized by g: e->ninputs may not be set */
        hd_ctx_free(&vm->ctx, *first, (size_t)(g->ninputs + 1) * sizeof **first);
        *first = NULL;
    }
    hd_ir_graph_free(g);
    hd_ir_graph_free(bwd);
    return st;
}

void cp_first_free(hd_vm *vm, cp_entry *e, hd_tensor **first) {
    if (first) hd_ctx_free(&vm->ctx, first, (size_t)(e->ninputs + 1) * sizeof *first);
}

/* ---- the rest of the interface ---- */

/* Does t (with data) stand for an input of the trace in progress: lifted,
 * written, or state the body could lift? */
static int is_state(hd_vm *vm, const hd_tensor *t) {
    const cp_session *s = cp_session_of(vm);
    return hd_trace_stands_for_input(&vm->ctx, t) || (s && cp_scan_find(&s->pre, t) >= 0);
}

int hd_compiled_data_known(hd_vm *vm, const hd_tensor *t) {
    return !vm->ctx.trace || (t->storage && !is_state(vm, t));
}

hd_status hd_compiled_check_data(hd_vm *vm, const hd_tensor *t, const char *what) {
    hd_ctx *ctx = &vm->ctx;
    if (t->storage && !is_state(vm, t)) return HD_OK;
    if (!ctx->trace)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "%s: the tensor has no data (a traced tensor used outside the compiled "
                           "code that made it)",
                           what);
    if (!t->storage || hd_trace_stands_for_input(ctx, t))
        hd_trace_check_data(ctx, t, what);
    else /* state the trace has not read through an op yet */
        hd_error(ctx, HD_ERR_RUNTIME,
                 "%s needs tensor data, which compiled code knows only when it runs: branch on "
                 "tensor data inside compiled code: use where(...)",
                 what);
    return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
}

int hd_compiled_custom_backward(hd_vm *vm) {
    cp_session *s = cp_session_of(vm);
    if (!s || !s->aot_backward) return 0;
    s->aot_custom = 1;
    return 1;
}

int hd_compiled_tracing(hd_vm *vm) {
    return cp_session_of(vm) != NULL;
}

hd_status hd_compiled_effect(hd_vm *vm, const char *what) {
    if (!cp_session_of(vm)) return HD_OK;
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "%s() inside compiled code would run once, when the code is traced, not at "
                       "every call: call it outside the compiled code",
                       what);
}

const char *hd_compiled_last_ir(hd_vm *vm) {
    return vm->compiled ? vm->compiled->last_ir : NULL;
}

hd_status hd_compiled_set_last_ir(hd_vm *vm, const hd_ir_graph *g) {
    hd_compiled_state *cs = cp_state_of(vm);
    if (!cs) return vm->err;
    char *text = g ? hd_ir_to_text(g) : NULL;
    if (g && !text) return hd_vm_from_ctx(vm, HD_ERR_MEMORY);
    if (cs->last_ir) hd_ctx_strfree(&vm->ctx, cs->last_ir);
    cs->last_ir = text;
    return HD_OK;
}

void hd_compiled_init(hd_vm *vm) {
    const char *log = getenv("HODU_LOG");
    const char *all = getenv("HODU_COMPILE_ALL");
    const char *eager = getenv("HODU_EAGER");
    vm->compile_env = !all || !*all || !strcmp(all, "0") ? 0
                      : !strcmp(all, "lazy")   ? HD_COMPILE_ALL_CALLS | HD_COMPILE_ALL_LOOPS
                      : !strcmp(all, "hybrid") ? HD_COMPILE_ALL_CALLS
                                               : HD_COMPILE_ALL_ENV;
    vm->compile_none = eager && *eager && strcmp(eager, "0") != 0;
    if (vm->compile_none) vm->compile_env = 0;
    vm->compile_all = vm->compile_env;
    hd_log_check();
    if (!log || !cp_state_of(vm)) return;
    if (hd_log_on("recompile")) vm->compiled->log = 1;
    if (hd_log_on("compile")) vm->compiled->log = 2;
}

void hd_compiled_free(hd_vm *vm) {
    hd_compiled_state *cs = vm->compiled;
    if (!cs) return;
    while (cs->bodies) {
        cp_body *b = cs->bodies;
        cs->bodies = b->next;
        body_free(vm, b);
    }
    if (cs->last_ir) hd_ctx_strfree(&vm->ctx, cs->last_ir);
    hd_ctx_free(&vm->ctx, cs, sizeof *cs);
    vm->compiled = NULL;
}
