/* Compiled functions and blocks: tracing, the cache, running cached graphs
 * (see compiled.h and docs/compiled.md). The entry points (calls, blocks,
 * statements) are in compiled_call.c.
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

static void inputs_free(hd_vm *vm, cp_input *in, int n) {
    for (int i = 0; i < n; i++) hd_ctx_strfree(&vm->ctx, in[i].name);
}

static void wbs_free(hd_vm *vm, cp_wb *w, int n) {
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
        inputs_free(vm, e->inputs, e->ninputs);
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
    wbs_free(vm, e->wbs, e->nwbs);
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

static void input_set_type(cp_input *in, const hd_tensor *t) {
    in->dtype = t->dtype;
    in->ndim = t->ndim;
    memcpy(in->shape, t->shape, sizeof in->shape);
    in->backend = t->storage ? t->storage->backend : NULL;
    in->device = t->storage ? t->storage->device : 0;
}

static int input_why(const cp_input *in, const hd_tensor *t, char *why, size_t n) {
    cp_input now;
    memset(&now, 0, sizeof now);
    input_set_type(&now, t);
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
        if (t && hd_tensor_copy_into(&vm->ctx, t, o)) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
        return HD_OK;
    case CP_WB_GRAD:
        t = wb_target(w, inputs);
        if (t && hd_grad_set(&vm->ctx, t, o)) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
        return HD_OK;
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

/* Run e on inputs; write back; *ret (may be NULL) gets the returned value. */
hd_status cp_entry_run(hd_vm *vm, cp_entry *e, const cp_roots *r, hd_tensor **inputs,
                       hd_value *ret) {
    hd_ctx *ctx = &vm->ctx;
    hd_tensor **outs = hd_ctx_calloc(ctx, (size_t)(e->noutputs + 1), sizeof *outs);
    if (!outs) return hd_vm_oom(vm);
    hd_status st = e->jc->run(ctx, e->exec, inputs, e->ninputs, outs, e->noutputs);
    if (st) st = hd_vm_from_ctx(vm, st);
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

/* ---- the trace in progress ---- */

cp_session *cp_session_of(hd_vm *vm) {
    return vm->compiled ? vm->compiled->session : NULL;
}

/* A read failed to record for want of memory: the trace fails at its end
 * (reads happen inside the evaluator, which does not expect errors there). */
static int note_oom(cp_session *s) {
    hd_vm_clear_error(s->vm);
    s->oom = 1;
    return 1;
}

static void unique_name(const cp_session *s, const char *base, char *buf, size_t n) {
    snprintf(buf, n, "%s", base);
    for (int k = 2;; k++) {
        int clash = 0;
        for (int i = 0; i < s->ninputs && !clash; i++) clash = !strcmp(s->inputs[i].name, buf);
        if (!clash) return;
        snprintf(buf, n, "%s#%d", base, k);
    }
}

/* A graph input: a name unique among the inputs (into name), where its
 * tensor comes from, and t, its tensor at this call (held). */
hd_status cp_session_input(cp_session *s, const char *base, int arg, int state, hd_tensor *t,
                           char *name, size_t n) {
    hd_vm *vm = s->vm;
    if (!CP_GROW(vm, s->inputs, s->capinputs, s->ninputs) ||
        !CP_GROW(vm, s->first, s->capfirst, s->ninputs))
        return vm->err;
    unique_name(s, base, name, n);
    cp_input *in = &s->inputs[s->ninputs];
    memset(in, 0, sizeof *in);
    in->arg = arg;
    in->state = state;
    input_set_type(in, t);
    if (!(in->name = hd_ctx_strdup(&vm->ctx, name))) return hd_vm_oom(vm);
    s->first[s->ninputs++] = hd_tensor_ref(t);
    return HD_OK;
}

static hd_status session_cap(cp_session *s, hd_tensor *t, int input) {
    if (!CP_GROW(s->vm, s->caps, s->capcaps, s->ncaps)) return s->vm->err;
    cp_cap *c = &s->caps[s->ncaps++];
    c->t = hd_tensor_ref(t);
    c->input = input;
    c->grad_before = hd_tensor_ref(hd_grad_get(t));
    return HD_OK;
}

/* The lift hook: a tensor the scan found (a field of an object the call
 * reaches, a global, a captured variable...) becomes an input read again
 * at every call through its path; any other is a constant. */
static int session_lift(hd_ctx *ctx, void *ud, hd_tensor *t, char *name, size_t n) {
    cp_session *s = ud;
    hd_vm *vm = s->vm;
    if (hd_grad_requires(ctx, t) && !hd_grad_is_leaf(ctx, t)) {
        /* its records are eager code's: a graph would replay them as they
         * were at the trace, or cut them */
        s->history = 1;
        hd_error(ctx, HD_ERR_RUNTIME,
                 "compiled code reads a tensor with gradient history made outside it");
        return -1;
    }
    int node = cp_scan_find_tensor(&s->pre, t), input = -1;
    hd_status st = HD_OK;
    if (node >= 0 && CP_GROW(vm, s->state, s->capstate, s->nstate)) {
        cp_path *p = &s->state[s->nstate];
        st = cp_scan_path(&s->pre, &s->roots, node, p);
        if (!st) {
            s->nstate++;
            input = s->ninputs;
            st = cp_session_input(s, p->text, -1, s->nstate - 1, t, name, n);
        }
    } else if (node >= 0) {
        st = vm->err;
    }
    if (!st) st = session_cap(s, t, input);
    if (st) {
        /* the VM's error moves to ctx (clearing it clears ctx's too) */
        char msg[HD_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", vm->errmsg);
        hd_vm_clear_error(vm);
        hd_error(ctx, st, "%s", msg);
        return -1;
    }
    return input >= 0;
}

/* Has a guard on the path with this hash been recorded? Records it. */
static int session_seen(cp_session *s, uint64_t h) {
    for (int i = 0; i < s->nseen; i++)
        if (s->seen[i] == h) return 1;
    if (!CP_GROW(s->vm, s->seen, s->capseen, s->nseen)) return note_oom(s);
    s->seen[s->nseen++] = h;
    return 0;
}

static void session_guard(cp_session *s, cp_path *p, hd_value v) {
    /* a tensor this trace made was stored by the body itself: reading it
     * back says nothing about the state before the call */
    if (v.type == HD_V_TENSOR && cp_is_symbolic_here(s->vm, v.as.t)) {
        cp_path_free(s->vm, p);
        return;
    }
    if (!CP_GROW(s->vm, s->guards, s->capguards, s->nguards)) {
        note_oom(s);
        cp_path_free(s->vm, p);
        return;
    }
    cp_guard *g = &s->guards[s->nguards++];
    cp_guard_make(s->vm, p, v, g);
    /* a tensor read through another path than its first: the graph takes
     * both for one tensor, so later calls must too */
    int arg = g->path.root == CP_ROOT_ARG && !g->path.nsteps; /* its own input */
    int node = v.type == HD_V_TENSOR && !arg ? cp_scan_find(&s->pre, v.as.t) : -1;
    cp_path first;
    if (node < 0 || cp_scan_path(&s->pre, &s->roots, node, &first)) return;
    if (strcmp(first.text, g->path.text) != 0)
        g->same = first;
    else
        cp_path_free(s->vm, &first);
}

void hd_compiled_note_global(hd_vm *vm, hd_module *m, int slot, hd_value v) {
    cp_session *s = cp_session_of(vm);
    if (!s || session_seen(s, cp_hash_root(CP_ROOT_GLOBAL, slot, m))) return;
    cp_path p;
    if (cp_path_root(&s->roots, CP_ROOT_GLOBAL, slot, m, &p)) {
        note_oom(s);
        return;
    }
    session_guard(s, &p, v);
}

void hd_compiled_note_cell(hd_vm *vm, const hd_cell *c, hd_value v) {
    cp_session *s = cp_session_of(vm);
    int node = s ? cp_scan_find(&s->pre, c) : -1;
    if (node < 0 || session_seen(s, s->pre.nodes[node].hash)) return;
    cp_path p;
    if (cp_scan_path(&s->pre, &s->roots, node, &p)) {
        note_oom(s);
        return;
    }
    session_guard(s, &p, v);
}

static void note_module(hd_vm *vm, hd_module *m, const char *name, hd_value v) {
    const hd_value *slot = hd_dict_get(m->names, name);
    if (slot && slot->type == HD_V_INT) hd_compiled_note_global(vm, m, (int)slot->as.i, v);
}

/* An object from before the call read at p, which held it before the
 * call too (not a value the body stored there first): kept with p. */
static void session_read(cp_session *s, const cp_path *p, int node, const cp_step *step,
                         hd_value v) {
    if (!hd_value_is_obj(v) || v.type == HD_V_TENSOR ||
        !cp_snapshot_held(&s->snap, node, step->name, step->i, v.as.o))
        return;
    if (!CP_GROW(s->vm, s->reads, s->capreads, s->nreads)) {
        note_oom(s);
        return;
    }
    cp_read *r = &s->reads[s->nreads];
    r->obj = v.as.o;
    if (cp_path_copy(s->vm, p, &r->path)) {
        note_oom(s);
        return;
    }
    s->nreads++;
}

/* The path of obj from before the call into *out: the place the body last
 * read it from, else the first place the scan found it. 0 when obj is not
 * from before the call; 1 with *st the status of making the path. */
static int session_obj_path(cp_session *s, const void *obj, cp_path *out, hd_status *st) {
    for (int i = s->nreads - 1; i >= 0; i--)
        if (s->reads[i].obj == obj) return *st = cp_path_copy(s->vm, &s->reads[i].path, out), 1;
    int node = obj ? cp_scan_find(&s->pre, obj) : -1;
    if (node < 0) return 0;
    *st = cp_scan_path(&s->pre, &s->roots, node, out);
    return 1;
}

void hd_compiled_note_store(hd_vm *vm, hd_value x, const char *name, int64_t i) {
    cp_session *s = cp_session_of(vm);
    if (!s) return;
    hd_status st = HD_OK;
    if (x.type == HD_V_MODULE) {
        hd_value *slot = hd_module_global((hd_module *)x.as.o, name);
        if (slot) st = cp_snapshot_touch_slot(&s->snap, slot);
    } else if (x.type == HD_V_OBJECT || x.type == HD_V_DICT || x.type == HD_V_LIST) {
        int node = cp_scan_find(&s->pre, x.as.o);
        if (node >= 0) st = cp_snapshot_touch(&s->snap, node, 0, name, i);
    }
    if (st) note_oom(s);
}

void hd_compiled_note_slot(hd_vm *vm, const hd_value *p, const void *cell) {
    cp_session *s = cp_session_of(vm);
    if (!s) return;
    int node = cell ? cp_scan_find(&s->pre, cell) : -1;
    hd_status st = cell ? (node >= 0 ? cp_snapshot_touch(&s->snap, node, 1, NULL, 0) : HD_OK)
                        : cp_snapshot_touch_slot(&s->snap, p);
    if (st) note_oom(s);
}

/* (numbers and strings in it are in the list's own guard: its hash) */
static int items_noted(hd_value v) {
    return v.type == HD_V_TENSOR || v.type == HD_V_LIST || v.type == HD_V_DICT ||
           v.type == HD_V_OBJECT;
}

void hd_compiled_note_items(hd_vm *vm, hd_value x, int depth) {
    if (depth > 8 || !cp_session_of(vm)) return;
    if (x.type == HD_V_LIST) {
        const hd_list *l = hd_as_list(x);
        for (int64_t i = 0; i < l->len; i++) {
            if (!items_noted(l->items[i])) continue;
            hd_compiled_note_member(vm, x, NULL, i, l->items[i]);
            hd_compiled_note_items(vm, l->items[i], depth + 1);
        }
    } else if (x.type == HD_V_DICT) {
        const hd_dict *d = hd_as_dict(x);
        for (int64_t i = 0; i < d->len; i++) {
            if (!items_noted(d->vals[i])) continue;
            hd_compiled_note_member(vm, x, d->keys[i]->chars, 0, d->vals[i]);
            hd_compiled_note_items(vm, d->vals[i], depth + 1);
        }
    }
}

void hd_compiled_note_member(hd_vm *vm, hd_value x, const char *name, int64_t i, hd_value v) {
    cp_session *s = cp_session_of(vm);
    if (!s) return;
    if (x.type == HD_V_MODULE) {
        if (name) note_module(vm, (hd_module *)x.as.o, name, v);
        return;
    }
    if (x.type != HD_V_OBJECT && x.type != HD_V_DICT && x.type != HD_V_LIST) return;
    int node = cp_scan_find(&s->pre, x.as.o);
    if (node < 0) return;
    cp_step step = {name ? CP_FIELD : CP_INDEX, i, (char *)name};
    if (session_seen(s, cp_hash_step(s->pre.nodes[node].hash, &step))) return;
    cp_path base, p;
    if (cp_scan_path(&s->pre, &s->roots, node, &base)) {
        note_oom(s);
        return;
    }
    hd_status st = cp_path_extend(vm, &base, step.kind, i, name, &p);
    cp_path_free(vm, &base);
    if (st) {
        note_oom(s);
        return;
    }
    session_read(s, &p, node, &step, v);
    session_guard(s, &p, v);
}

hd_status hd_compiled_grad_input(hd_vm *vm, const hd_tensor *g) {
    if (!g || !hd_grad_has_history(g)) return HD_OK;
    return hd_vm_error(vm, HD_ERR_RUNTIME,
                       "a .grad made by backward(create_graph = true) carries a graph, which "
                       "compiled code cannot take in: use it in eager code");
}

/* t.grad read: guarded on what it was before the call (none or a tensor,
 * then lifted through its path). A .grad the body wrote itself before
 * reading it (zero_grad(), an earlier backward()) says nothing about the
 * state before the call: no guard. */
void hd_compiled_note_grad(hd_vm *vm, const hd_tensor *t) {
    cp_session *s = cp_session_of(vm);
    int node = s && !s->aot_backward ? cp_scan_find(&s->pre, t) : -1;
    if (node < 0) return;
    cp_step step = {CP_GRAD, 0, NULL};
    uint64_t h = cp_hash_step(s->pre.nodes[node].hash, &step);
    int before = cp_scan_find_hash(&s->pre, h);
    hd_value was = before >= 0 ? s->pre.nodes[before].v : hd_none();
    const hd_tensor *now = hd_grad_get(t);
    if (now != (was.type == HD_V_TENSOR ? was.as.t : NULL) || session_seen(s, h)) return;
    cp_path base, p;
    if (cp_scan_path(&s->pre, &s->roots, node, &base)) {
        note_oom(s);
        return;
    }
    hd_status st = cp_path_extend(vm, &base, CP_GRAD, 0, NULL, &p);
    cp_path_free(vm, &base);
    if (st) {
        note_oom(s);
        return;
    }
    session_guard(s, &p, was);
}

static void session_grad_read(hd_ctx *ctx, void *ud, const hd_tensor *t) {
    HD_UNUSED(ctx);
    cp_session *s = ud;
    hd_compiled_note_grad(s->vm, t);
}

/* A guard on a root (an argument, an outer slot) with its value now. */
hd_status cp_session_root_guard(cp_session *s, cp_root_kind kind, int index, hd_value v) {
    cp_path p;
    if (!hd_is_uninit(v) && v.type != HD_V_CELL &&
        !session_seen(s, cp_hash_root(kind, index, NULL))) {
        if (cp_path_root(&s->roots, kind, index, NULL, &p)) return s->vm->err;
        session_guard(s, &p, v);
    }
    return s->oom ? hd_vm_oom(s->vm) : HD_OK;
}

hd_status cp_session_begin(hd_vm *vm, cp_session *s, cp_body *b, const cp_opts *o,
                           const char *name) {
    memset(s, 0, sizeof *s);
    s->vm = vm;
    s->body = b;
    s->opts = *o;
    if (hd_trace_begin(&vm->ctx, name)) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
    s->serial = vm->ctx.trace_serial;
    hd_trace_set_lift(&vm->ctx, session_lift, s);
    hd_trace_set_grad_read(&vm->ctx, session_grad_read);
    vm->compiled->session = s;
    if (!b->implicit) vm->compiled->traces++;
    b->traces++;
    return HD_OK;
}

/* Start reading: the roots are set; scan the heap they reach. */
hd_status cp_session_scan(cp_session *s, const cp_roots *r) {
    s->roots = *r;
    if (cp_scan_build(&s->pre, r) || cp_snapshot_take(&s->snap, s->vm, &s->pre, r))
        return s->vm->err;
    s->vm->trace_reads = 1;
    return HD_OK;
}

void cp_session_free(cp_session *s) {
    hd_vm *vm = s->vm;
    vm->trace_reads = 0;
    if (vm->compiled && vm->compiled->session == s) vm->compiled->session = NULL;
    hd_trace_abort(&vm->ctx);
    for (int i = 0; i < s->ncaps; i++) {
        hd_tensor_unref(s->caps[i].t);
        hd_tensor_unref(s->caps[i].grad_before);
    }
    cp_free_array(vm, s->caps, s->capcaps, sizeof *s->caps);
    inputs_free(vm, s->inputs, s->ninputs);
    for (int i = 0; i < s->ninputs; i++) hd_tensor_unref(s->first[i]);
    cp_free_array(vm, s->inputs, s->capinputs, sizeof *s->inputs);
    cp_free_array(vm, s->first, s->capfirst, sizeof *s->first);
    for (int i = 0; i < s->nstate; i++) cp_path_free(vm, &s->state[i]);
    cp_free_array(vm, s->state, s->capstate, sizeof *s->state);
    for (int i = 0; i < s->nguards; i++) cp_guard_free(vm, &s->guards[i]);
    cp_free_array(vm, s->guards, s->capguards, sizeof *s->guards);
    for (int i = 0; i < s->nreads; i++) cp_path_free(vm, &s->reads[i].path);
    cp_free_array(vm, s->reads, s->capreads, sizeof *s->reads);
    cp_free_array(vm, s->seen, s->capseen, sizeof *s->seen);
    for (int i = 0; i < s->nouts; i++) {
        hd_tensor_unref(s->outs[i]);
        hd_ctx_strfree(&vm->ctx, s->outnames[i]);
    }
    cp_free_array(vm, s->outs, s->capouts, sizeof *s->outs);
    cp_free_array(vm, s->outnames, s->capoutnames, sizeof *s->outnames);
    wbs_free(vm, s->wbs, s->nwbs);
    cp_free_array(vm, s->wbs, s->capwbs, sizeof *s->wbs);
    cp_scan_free(&s->pre);
    cp_snapshot_free(&s->snap);
    for (int i = 0; i < s->ngradded; i++) hd_tensor_unref(s->gradded[i]);
    cp_free_array(vm, s->gradded, s->capgradded, sizeof *s->gradded);
}

/* ---- errors kept while the heap is put back ---- */

/* Kept on the stack, not in VM memory: saving an error must not fail (a
 * failed copy would lose the error's location). */
typedef struct cp_err {
    hd_status err;
    int located;
    char msg[HD_ERRMSG_MAX];
    char text[HD_ERRTEXT_MAX];
} cp_err;

static void err_save(hd_vm *vm, cp_err *e) {
    e->err = vm->err;
    e->located = vm->err_located;
    memcpy(e->msg, vm->errmsg, sizeof e->msg);
    if (e->located) memcpy(e->text, vm->errtext, sizeof e->text);
    vm->err = HD_OK;
    hd_error_clear(&vm->ctx);
}

static void err_restore(hd_vm *vm, const cp_err *e) {
    vm->err = e->err;
    vm->err_located = e->located;
    memcpy(vm->errmsg, e->msg, sizeof e->msg);
    if (e->located) memcpy(vm->errtext, e->text, sizeof e->text);
}

/* After a failed trace (or one whose results run eagerly): the heap the
 * call reaches as it was before, and every captured tensor's gradient.
 * The trace has ended. */
void cp_session_restore(cp_session *s) {
    hd_vm *vm = s->vm;
    cp_err saved;
    err_save(vm, &saved);
    vm->trace_reads = 0;
    cp_snapshot_restore(&s->snap);
    for (int i = 0; i < s->ncaps; i++) {
        hd_tensor *g = hd_grad_get(s->caps[i].t);
        if (g && !g->storage) hd_grad_set(&vm->ctx, s->caps[i].t, s->caps[i].grad_before);
    }
    hd_vm_clear_error(vm);
    err_restore(vm, &saved);
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
 * after the body ran (the body did not store another there), or -1. */
static int tmpl_state_tensor(cp_session *s, hd_tensor *t) {
    int node = t->storage ? cp_scan_find(&s->pre, t) : -1;
    cp_path p;
    hd_value now;
    if (node < 0 || cp_scan_path(&s->pre, &s->roots, node, &p)) return -1;
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
        if (!session_obj_path(s, hd_value_is_obj(v) ? (const void *)v.as.o : NULL, &t->path, &st))
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
static int gradded(const cp_session *s, const hd_tensor *t) {
    for (int i = 0; i < s->ngradded; i++)
        if (s->gradded[i] == t) return 1;
    return 0;
}

static hd_status wb_grads(cp_session *s, hd_value *sym, int nsym) {
    for (int i = 0; i < s->ncaps; i++)
        if (!gradded(s, s->caps[i].t) && wb_grad(s, s->caps[i].t, s->caps[i].input))
            return s->vm->err;
    for (int i = 0, k = 0; i < nsym; i++) {
        if (sym[i].type != HD_V_TENSOR || sym[i].as.t->storage || gradded(s, sym[i].as.t)) continue;
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
    o->knobs = (hd_strategy_accum_steps(vm) * 4099 + hd_strategy_checkpoint_interval(vm)) * 2 +
               vm->ctx.autocast;
    /* averaging over the ranks: by the optimizers, or after backward() */
    int hooks = vm->backward_hooks.type == HD_V_LIST ? (int)hd_as_list(vm->backward_hooks)->len : 0;
    unsigned k = (unsigned)o->knobs * 16777619u ^ (unsigned)hd_strategy_dist_data(vm) * 2654435761u;
    o->knobs = (int)(k ^ (unsigned)hooks * 40503u);
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
    k->options = hd_jit_options_hash(&j) ^ ((uint64_t)(uint32_t)o->knobs * 0x9e3779b97f4a7c15ull);
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
