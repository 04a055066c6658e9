/* Compiled functions and blocks: the trace in progress (a session): its
 * inputs and their unique names, what the body reads (globals, captured
 * variables, members, items, gradients) recorded as guards and paths, and
 * the heap put back after a failed trace (see compiled.c). */
#include "builtins_tensor.h"
#include "compiled_int.h"
#include "eval.h"
#include "hd_autograd.h"
#include "tensor_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    cp_input_set_type(in, t);
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
    if (node < 0) return;
    if (cp_scan_path(&s->pre, &s->roots, node, &first)) {
        note_oom(s);
        return;
    }
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
int cp_session_obj_path(cp_session *s, const void *obj, cp_path *out, hd_status *st) {
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

/* The path of scan node `node` with one more step; 0, or -1 with the
 * session out of memory. */
static int session_step_path(cp_session *s, int node, cp_step_kind kind, int64_t i,
                             const char *name, cp_path *out) {
    cp_path base;
    if (cp_scan_path(&s->pre, &s->roots, node, &base)) return -note_oom(s);
    hd_status st = cp_path_extend(s->vm, &base, kind, i, name, out);
    cp_path_free(s->vm, &base);
    return st ? -note_oom(s) : 0;
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
    cp_path p;
    if (session_step_path(s, node, step.kind, i, name, &p)) return;
    session_read(s, &p, node, &step, v);
    session_guard(s, &p, v);
}

void hd_compiled_note_absent(hd_vm *vm, hd_value x, const char *name) {
    cp_session *s = cp_session_of(vm);
    if (!s || (x.type != HD_V_OBJECT && x.type != HD_V_DICT)) return;
    int node = cp_scan_find(&s->pre, x.as.o); /* else made inside: says nothing of before */
    if (node < 0) return;
    cp_step step = {CP_FIELD, 0, (char *)name};
    if (session_seen(s, cp_hash_step(s->pre.nodes[node].hash, &step))) return;
    cp_path p;
    if (session_step_path(s, node, CP_FIELD, 0, name, &p)) return;
    if (!CP_GROW(vm, s->guards, s->capguards, s->nguards)) {
        cp_path_free(vm, &p);
        note_oom(s);
        return;
    }
    cp_guard *g = &s->guards[s->nguards++];
    cp_guard_make(vm, &p, hd_none(), g);
    g->kind = CP_G_ABSENT;
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
    cp_path p;
    if (session_step_path(s, node, CP_GRAD, 0, NULL, &p)) return;
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
    cp_inputs_free(vm, s->inputs, s->ninputs);
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
    cp_wbs_free(vm, s->wbs, s->nwbs);
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
