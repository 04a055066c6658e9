/* The state of script blocks: see script_state.h and docs/compiled.md.
 *
 * The block is traced up to three times, the heap put back after each:
 *   1. to find the state: the tensors written in place, and the places
 *      outside the block left holding traced tensors (none found: this
 *      trace is the script's graph, as for any block);
 *   2. with the state's tensors as graph inputs ("$name"), and their final
 *      values as outputs: the graph of the first run;
 *   3. only when some state started as none (buffers an optimizer makes
 *      at its first step, gradients): again, with zeros of the final types
 *      standing in, which gives the graph of every later run. */
#include "script_state.h"

#include "eval.h"
#include "hd_autograd.h"

#include <stdio.h>
#include <string.h>

/* One state variable found by a trace. */
typedef struct sv_item {
    char *name;
    hd_tensor *start; /* its tensor when the block began (held), or NULL */
    hd_tensor *end;   /* its traced value (held) */
    hd_tensor *first; /* start before a stand-in replaced it (held) */
    int inplace;
    int cleared; /* a gradient the block set to none (zero_grad) */
    hd_script_place place;
} sv_item;

typedef struct sv_trace {
    hd_vm *vm;
    cp_roots roots;
    cp_scan pre;
    cp_snapshot snap;
    sv_item *items;
    int n, cap;
} sv_trace;

static void place_free(hd_vm *vm, hd_script_place *p) {
    hd_vunref(vm, p->holder);
    hd_ctx_strfree(&vm->ctx, p->key);
    p->holder = hd_none();
    p->key = NULL;
}

static void items_free(sv_trace *t) {
    for (int i = 0; i < t->n; i++) {
        hd_ctx_strfree(&t->vm->ctx, t->items[i].name);
        hd_tensor_unref(t->items[i].start);
        hd_tensor_unref(t->items[i].end);
        hd_tensor_unref(t->items[i].first);
        place_free(t->vm, &t->items[i].place);
    }
    cp_free_array(t->vm, t->items, t->cap, sizeof *t->items);
    t->items = NULL;
    t->n = t->cap = 0;
}

static int symbolic_here(const hd_vm *vm, const hd_tensor *t) {
    return !t->storage && (uint32_t)(t->trace_ref >> 32) == vm->ctx.trace_serial;
}

static sv_item *item_add(sv_trace *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->items[i].name, name)) return &t->items[i];
    if (!CP_GROW(t->vm, t->items, t->cap, t->n)) return NULL;
    sv_item *it = &t->items[t->n];
    memset(it, 0, sizeof *it);
    it->place.holder = hd_none();
    if (!(it->name = hd_ctx_strdup(&t->vm->ctx, name))) return hd_vm_oom(t->vm), NULL;
    t->n++;
    return it;
}

/* The place a node of a scan names, for writing back. */
static hd_status place_of(hd_vm *vm, const cp_scan *post, const cp_roots *r, int i,
                          hd_script_place *p) {
    const cp_node *nd = &post->nodes[i];
    hd_value holder = hd_none();
    const char *key = NULL;
    if (nd->parent >= 0) {
        hd_value x = post->nodes[nd->parent].v;
        if (nd->step.kind == CP_FIELD && (x.type == HD_V_OBJECT || x.type == HD_V_DICT)) {
            holder = x;
            key = nd->step.name;
        } else if ((nd->step.kind == CP_INDEX && x.type == HD_V_LIST) ||
                   (nd->step.kind == CP_GRAD && x.type == HD_V_TENSOR)) {
            holder = x;
            p->index = nd->step.i;
        } else if (nd->step.kind == CP_CELL && x.type == HD_V_FUNC) {
            hd_closure *c = (hd_closure *)x.as.o;
            if (nd->step.i < c->ncells) holder = hd_obj_value(&c->cells[nd->step.i]->obj);
        }
    } else if (nd->alias) {
        holder = hd_obj_value(nd->alias); /* a variable captured by a closure: its cell */
    } else if (nd->root == CP_ROOT_GLOBAL && nd->mod) {
        holder = hd_obj_value(&nd->mod->obj);
        p->index = nd->index;
    } else if (nd->root == CP_ROOT_UPVAL && r->closure && nd->index < r->closure->ncells) {
        holder = hd_obj_value(&r->closure->cells[nd->index]->obj);
    }
    if (key && !(p->key = hd_ctx_strdup(&vm->ctx, key))) return hd_vm_oom(vm);
    hd_vref(p->holder = holder);
    return HD_OK;
}

/* A traced tensor left at node i of the scan after the block: a variable
 * (gradients only of tensors with data, not of values made inside). */
static hd_status found_place(sv_trace *t, const cp_scan *post, int i) {
    hd_vm *vm = t->vm;
    const cp_node *nd = &post->nodes[i];
    if (cp_scan_under_grad(post, i)) {
        if (nd->step.kind != CP_GRAD || cp_scan_under_grad(post, nd->parent) ||
            !post->nodes[nd->parent].v.as.t->storage)
            return HD_OK;
    }
    cp_path p;
    if (cp_scan_path(post, &t->roots, i, &p)) return vm->err;
    sv_item *it = item_add(t, p.text);
    hd_status st = it ? HD_OK : vm->err;
    if (!st && !it->end) {
        it->end = hd_tensor_ref(nd->v.as.t);
        int k = cp_scan_find_hash(&t->pre, nd->hash);
        hd_value start = k >= 0 ? t->pre.nodes[k].v : hd_none();
        if (!it->start && start.type == HD_V_TENSOR && start.as.t->storage)
            it->start = hd_tensor_ref(start.as.t);
        if (it->place.holder.type == HD_V_NONE && !it->place.key)
            st = place_of(vm, post, &t->roots, i, &it->place);
    }
    cp_path_free(vm, &p);
    return st;
}

/* Gradients the block cleared (zero_grad after backward): variables that
 * the first run reads and leaves none, as eager code leaves them. */
static hd_status collect_cleared(sv_trace *t) {
    hd_vm *vm = t->vm;
    for (int i = 0; i < t->pre.n; i++) {
        const cp_node *nd = &t->pre.nodes[i];
        if (nd->parent < 0 || nd->step.kind != CP_GRAD || cp_scan_under_grad(&t->pre, nd->parent))
            continue;
        hd_tensor *owner = t->pre.nodes[nd->parent].v.as.t;
        if (!owner->storage || hd_grad_get(owner)) continue;
        cp_path p;
        if (cp_scan_path(&t->pre, &t->roots, i, &p)) return vm->err;
        sv_item *it = item_add(t, p.text);
        cp_path_free(vm, &p);
        if (!it) return vm->err;
        if (it->cleared || it->end) continue;
        it->cleared = 1;
        it->start = hd_tensor_ref(nd->v.as.t);
        hd_vref(it->place.holder = t->pre.nodes[nd->parent].v);
    }
    return HD_OK;
}

/* The state the block left: tensors written in place, then outer places
 * holding traced tensors. */
static hd_status collect(sv_trace *t) {
    hd_vm *vm = t->vm;
    for (int i = 0; i < hd_trace_nwrites(&vm->ctx); i++) {
        hd_tensor *w = hd_trace_write_target(&vm->ctx, i);
        int node = cp_scan_find(&t->pre, w);
        char name[512];
        snprintf(name, sizeof name, "written#%d", i + 1);
        if (node >= 0) {
            cp_path p;
            if (cp_scan_path(&t->pre, &t->roots, node, &p)) return vm->err;
            snprintf(name, sizeof name, "%s", p.text);
            cp_path_free(vm, &p);
        }
        sv_item *it = item_add(t, name);
        if (!it) return vm->err;
        if (!it->end) {
            it->end = hd_tensor_ref(w);
            if (!it->start) it->start = hd_tensor_ref(w);
            it->inplace = 1;
        }
    }
    if (collect_cleared(t)) return vm->err;
    cp_scan post;
    hd_status st = cp_scan_build(&post, &t->roots);
    for (int i = 0; !st && i < post.n; i++) {
        hd_value v = post.nodes[i].v;
        if (v.type == HD_V_TENSOR && symbolic_here(vm, v.as.t)) st = found_place(t, &post, i);
    }
    cp_scan_free(&post);
    return st;
}

/* The lift hook: the state's tensors become the inputs "$name". */
static int sv_lift(hd_ctx *ctx, void *ud, hd_tensor *x, char *name, size_t n) {
    sv_trace *t = ud;
    HD_UNUSED(ctx);
    for (int i = 0; i < t->n; i++) {
        const sv_item *it = &t->items[i];
        /* a gradient is found by its place: setting .grad stores a view */
        hd_value h = it->place.holder;
        int grad = it->start && h.type == HD_V_TENSOR && hd_grad_get(h.as.t) == x;
        if (it->start == x || grad) {
            snprintf(name, n, "%c%s", HD_SCRIPT_STATE_PREFIX, it->name);
            return 1;
        }
    }
    return 0;
}

/* One trace of the block. With lift, the state's final values become the
 * outputs "$name" and *g gets the graph; without, *g gets it only when the
 * block has no state (the trace is abandoned otherwise). */
static hd_status trace_once(sv_trace *t, hd_frame *f, const hd_ast *n, const char *name, int lift,
                            hd_ir_graph **g) {
    hd_vm *vm = t->vm;
    hd_ctx *ctx = &vm->ctx;
    *g = NULL;
    if (hd_trace_begin(ctx, name)) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
    if (lift) hd_trace_set_lift(ctx, sv_lift, t);
    vm->script_depth++;
    int fl = hd_eval_block(vm, f, n->body);
    vm->script_depth--;
    hd_status st = fl == HD_FLOW_ERROR ? (vm->err ? vm->err : HD_ERR_RUNTIME) : HD_OK;
    if (!st && fl != HD_FLOW_NORMAL)
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "break, continue and return cannot leave a script");
    int before = t->n;
    for (int i = 0; i < t->n; i++) { /* this trace's values */
        hd_tensor_unref(t->items[i].end);
        t->items[i].end = NULL;
    }
    if (!st) st = collect(t);
    for (int i = 0; !st && lift && i < t->n; i++)
        if (!t->items[i].end && !t->items[i].cleared)
            st = hd_vm_error(vm, HD_ERR_RUNTIME,
                             "script '%s': its state differs from one trace to the next (%s)", name,
                             t->items[i].name);
    if (!st && lift && t->n != before)
        st = hd_vm_error(vm, HD_ERR_RUNTIME,
                         "script '%s': its state differs from one trace to the next (%s)", name,
                         t->items[t->n - 1].name);
    for (int i = 0; !st && lift && i < t->n; i++) {
        char port[600];
        if (t->items[i].cleared) continue; /* none after the run: no output */
        snprintf(port, sizeof port, "%c%s", HD_SCRIPT_STATE_PREFIX, t->items[i].name);
        /* written in place: the tensor stands for its last value */
        hd_tensor *end = t->items[i].inplace ? t->items[i].start : t->items[i].end;
        if (hd_trace_output(ctx, port, end)) st = hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
    }
    if (st || (!lift && t->n)) {
        hd_trace_abort(ctx);
        return st;
    }
    return hd_trace_end(ctx, g) ? hd_vm_from_ctx(vm, HD_ERR_RUNTIME) : HD_OK;
}

static hd_status trace_roots(hd_vm *vm, hd_frame *f, const hd_ast *n, cp_roots *r) {
    cp_body *b = cp_body_get(vm, n, "script", f->chunk, &n->span);
    if (!b) return vm->err ? vm->err : hd_vm_oom(vm);
    if (!b->analysed) {
        if (cp_block_analyse(vm, b, f, n->body, 0) || cp_body_upvals(vm, b, f->closure))
            return vm->err;
        b->analysed = 1;
    }
    cp_block_roots(vm, b, f, r);
    return HD_OK;
}

static void replace(hd_vm *vm, hd_value *slot, hd_value v) {
    hd_value old = *slot;
    hd_vref(*slot = v);
    hd_vunref(vm, old);
}

/* Store v (borrowed) at p; a place that no longer exists is skipped. */
static hd_status place_set(hd_vm *vm, const hd_script_place *p, hd_value v) {
    hd_value h = p->holder;
    switch (h.type) {
    case HD_V_OBJECT:
    case HD_V_DICT:
        hd_vref(v);
        return hd_dict_set(vm, h.type == HD_V_OBJECT ? ((hd_object *)h.as.o)->fields : h, p->key,
                           v);
    case HD_V_LIST:
        if (p->index < hd_as_list(h)->len) replace(vm, &hd_as_list(h)->items[p->index], v);
        return HD_OK;
    case HD_V_MODULE: {
        hd_module *m = (hd_module *)h.as.o;
        if (p->index < m->nglobals) replace(vm, &m->globals[p->index], v);
        return HD_OK;
    }
    case HD_V_CELL: replace(vm, &((hd_cell *)h.as.o)->v, v); return HD_OK;
    case HD_V_TENSOR:
        if (hd_grad_set(&vm->ctx, h.as.t, v.type == HD_V_TENSOR ? v.as.t : NULL))
            return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
        return HD_OK;
    default: return HD_OK;
    }
}

/* Zeros of each traced value's type where the state started as none. 1 when
 * any was put, -1 on error. */
static int put_standins(sv_trace *t, const char *name) {
    hd_vm *vm = t->vm;
    int any = 0;
    for (int i = 0; i < t->n; i++) {
        sv_item *it = &t->items[i];
        const hd_tensor *e = it->end;
        if (it->cleared) { /* later runs start without it */
            if (!it->start) continue;
            it->first = it->start;
            it->start = NULL;
            if (place_set(vm, &it->place, hd_none())) return -1;
            any = 1;
            continue;
        }
        if (it->start) {
            if (it->start->dtype == e->dtype && it->start->ndim == e->ndim &&
                !memcmp(it->start->shape, e->shape, (size_t)e->ndim * sizeof *e->shape))
                continue;
            char a[160], b[160];
            hd_ir_type_str(it->start->dtype, it->start->shape, it->start->ndim, a, sizeof a);
            hd_ir_type_str(e->dtype, e->shape, e->ndim, b, sizeof b);
            hd_vm_error(vm, HD_ERR_RUNTIME,
                        "script '%s': the state '%s' changes from %s to %s in a run (a script's "
                        "state keeps its dtype and shape)",
                        name, it->name, a, b);
            return -1;
        }
        hd_tensor *z = hd_tensor_zeros(&vm->ctx, e->dtype, e->shape, e->ndim);
        if (!z) return hd_vm_from_ctx(vm, HD_ERR_MEMORY), -1;
        it->start = z;
        hd_script_place *p = &it->place;
        hd_value zv = hd_tensor_value(z);
        hd_status st = HD_OK;
        if (p->holder.type == HD_V_NONE)
            st = hd_vm_error(vm, HD_ERR_RUNTIME,
                             "script '%s': the state '%s' starts as none in a place the script "
                             "cannot write back to (a local variable of a function): keep it in "
                             "an object's field or a global",
                             name, it->name);
        else
            st = place_set(vm, p, zv);
        if (st) return -1;
        any = 1;
    }
    return any;
}

static void trace_free(sv_trace *t) {
    items_free(t);
    cp_snapshot_free(&t->snap);
    cp_scan_free(&t->pre);
}

/* The script's variables and places from the items (taken). */
static hd_status make_state(sv_trace *t, hd_script *s, hd_ir_graph *init, hd_script_place **places,
                            int *nplaces) {
    hd_vm *vm = t->vm;
    hd_script_var *vars = hd_ctx_calloc(&vm->ctx, (size_t)t->n + 1, sizeof *vars);
    hd_script_place *pl = hd_ctx_calloc(&vm->ctx, (size_t)t->n + 1, sizeof *pl);
    if (!vars || !pl) {
        hd_ctx_free(&vm->ctx, vars, (size_t)(t->n + 1) * sizeof *vars);
        hd_ctx_free(&vm->ctx, pl, (size_t)(t->n + 1) * sizeof *pl);
        hd_ir_graph_free(init);
        return hd_vm_oom(vm);
    }
    for (int i = 0; i < t->n; i++) {
        sv_item *it = &t->items[i];
        vars[i].name = it->name;
        vars[i].inplace = it->inplace;
        pl[i] = it->place;
        it->name = NULL;
        it->place.holder = hd_none();
        it->place.key = NULL;
    }
    *places = pl;
    *nplaces = t->n;
    if (hd_script_set_state(s, vars, t->n, init)) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
    return HD_OK;
}

/* The values the state starts from: written tensors themselves (shared with
 * the program), the tensors the places held; none where a stand-in was put. */
static hd_status start_values(sv_trace *t, hd_script *s, int *standin) {
    for (int i = 0; i < t->n; i++) {
        const sv_item *it = &t->items[i];
        hd_tensor *start = it->first ? it->first : it->start;
        if (standin[i] || !start) continue;
        if (hd_script_state_put(s, hd_script_state_at(s, i)->name, start))
            return hd_vm_from_ctx(t->vm, HD_ERR_RUNTIME);
    }
    return HD_OK;
}

static hd_status trace_state(sv_trace *t, hd_frame *f, const hd_ast *n, const char *name,
                             hd_script **out, hd_script_place **places, int *nplaces) {
    hd_vm *vm = t->vm;
    hd_ir_graph *g1 = NULL, *g2 = NULL;
    int *standin = hd_ctx_calloc(&vm->ctx, (size_t)t->n + 1, sizeof *standin);
    if (!standin) return hd_vm_oom(vm);
    for (int i = 0; i < t->n; i++) standin[i] = !t->items[i].start;
    int nitems = t->n;
    hd_status st = trace_once(t, f, n, name, 1, &g1);
    cp_snapshot_restore(&t->snap);
    int again = st ? 0 : put_standins(t, name);
    if (again < 0) st = vm->err;
    if (again > 0) {
        st = trace_once(t, f, n, name, 1, &g2);
        cp_snapshot_restore(&t->snap);
    }
    hd_ir_graph *main = g2 ? g2 : g1, *init = g2 ? g1 : NULL;
    if (st) {
        hd_ir_graph_free(g1);
        hd_ir_graph_free(g2);
    } else if (!(*out = hd_script_new(&vm->ctx, main))) { /* it freed main */
        hd_ir_graph_free(init);
        st = hd_vm_from_ctx(vm, HD_ERR_MEMORY);
    }
    if (!st) st = make_state(t, *out, init, places, nplaces);
    if (!st) st = start_values(t, *out, standin);
    hd_ctx_free(&vm->ctx, standin, (size_t)(nitems + 1) * sizeof *standin);
    return st;
}

hd_status hd_script_trace_block(hd_vm *vm, hd_frame *f, const hd_ast *n, const char *name,
                                hd_script **out, hd_script_place **places, int *nplaces) {
    sv_trace t;
    memset(&t, 0, sizeof t);
    t.vm = vm;
    *out = NULL;
    *places = NULL;
    *nplaces = 0;
    hd_ir_graph *g = NULL;
    hd_status st = trace_roots(vm, f, n, &t.roots);
    if (!st) st = cp_scan_build(&t.pre, &t.roots);
    if (!st) st = cp_snapshot_take(&t.snap, vm, &t.pre, &t.roots);
    if (!st) st = trace_once(&t, f, n, name, 0, &g);
    if (!st && g && !(*out = hd_script_new(&vm->ctx, g))) st = hd_vm_from_ctx(vm, HD_ERR_MEMORY);
    if (!st && !g) {
        cp_snapshot_restore(&t.snap);
        st = trace_state(&t, f, n, name, out, places, nplaces);
    } else if (st && t.snap.vm) {
        cp_snapshot_restore(&t.snap);
    }
    if (st) {
        hd_script_free(*out);
        *out = NULL;
        hd_script_places_free(vm, *places, *nplaces);
        *places = NULL;
        *nplaces = 0;
    }
    trace_free(&t);
    return st;
}

/* The value at p, or 0 when the place is gone. */
static int place_get(const hd_script_place *p, hd_value *out) {
    hd_value h = p->holder;
    const hd_value *slot = NULL;
    switch (h.type) {
    case HD_V_OBJECT: slot = hd_dict_get(((hd_object *)h.as.o)->fields, p->key); break;
    case HD_V_DICT: slot = hd_dict_get(h, p->key); break;
    case HD_V_LIST:
        if (p->index < hd_as_list(h)->len) slot = &hd_as_list(h)->items[p->index];
        break;
    case HD_V_MODULE:
        if (p->index < ((hd_module *)h.as.o)->nglobals)
            slot = &((hd_module *)h.as.o)->globals[p->index];
        break;
    case HD_V_CELL: slot = &((hd_cell *)h.as.o)->v; break;
    case HD_V_TENSOR: {
        hd_tensor *g = hd_grad_get(h.as.t);
        *out = g ? hd_tensor_value(g) : hd_none();
        return 1;
    }
    default: return 0;
    }
    if (!slot) return 0;
    *out = *slot;
    return 1;
}

hd_status hd_script_places_read(hd_vm *vm, hd_script *s, const hd_script_place *places, int n) {
    const hd_ir_graph *g = hd_script_graph(s);
    for (int i = 0; i < n && i < hd_script_nstate(s); i++) {
        const hd_script_var *v = hd_script_state_at(s, i);
        hd_value now;
        char port[1100];
        snprintf(port, sizeof port, "%c%s", HD_SCRIPT_STATE_PREFIX, v->name);
        if (v->inplace || !place_get(&places[i], &now) || hd_ir_find_input(g, port) < 0) continue;
        if (now.type == HD_V_TENSOR && (now.as.t == v->t || !now.as.t->storage)) continue;
        if (now.type != HD_V_TENSOR && now.type != HD_V_NONE) continue;
        if (now.type == HD_V_NONE && !v->t) continue;
        if (now.type == HD_V_TENSOR && v->t && now.as.t->storage == v->t->storage) continue;
        hd_tensor *z = NULL; /* a gradient cleared (zero_grad): the graph adds to zeros */
        if (now.type == HD_V_NONE && places[i].holder.type == HD_V_TENSOR &&
            !(z = hd_tensor_zeros(&vm->ctx, v->t->dtype, v->t->shape, v->t->ndim)))
            return hd_vm_from_ctx(vm, HD_ERR_MEMORY);
        hd_status st = hd_script_state_put(s, v->name, now.type == HD_V_TENSOR ? now.as.t : z);
        hd_tensor_unref(z);
        if (st) return hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
    }
    return HD_OK;
}

hd_status hd_script_places_write(hd_vm *vm, const hd_script *s, const hd_script_place *places,
                                 int n) {
    for (int i = 0; i < n && i < hd_script_nstate(s); i++) {
        const hd_script_var *v = hd_script_state_at(s, i);
        if (v->inplace) continue;
        if (place_set(vm, &places[i], v->t ? hd_tensor_value(v->t) : hd_none())) return vm->err;
    }
    return HD_OK;
}

void hd_script_places_free(hd_vm *vm, hd_script_place *places, int n) {
    if (!places) return;
    for (int i = 0; i < n; i++) place_free(vm, &places[i]);
    hd_ctx_free(&vm->ctx, places, (size_t)(n + 1) * sizeof *places);
}
