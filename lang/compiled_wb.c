/* Non-tensor state a compiled body stores outside itself: found by
 * comparing the heap with the snapshot taken before the trace, and stored
 * again after every run (CP_WB_VALUE write-backs), or, where a graph cannot
 * replay the change, the key runs eagerly (see docs/compiled.md, "State
 * that is not tensors"). */
#include "compiled_int.h"

#include <stdio.h>
#include <string.h>

/* The path of a place the body changed. */
static hd_status change_path(cp_session *s, const cp_change *c, cp_path *out) {
    const cp_roots *r = &s->roots;
    cp_path base;
    switch (c->kind) {
    case CP_SNAP_MODULE: return cp_path_root(r, CP_ROOT_GLOBAL, (int)c->index, c->mod, out);
    case CP_SNAP_SLOTS: return cp_path_root(r, CP_ROOT_SLOT, (int)c->index, NULL, out);
    case CP_SNAP_CELL: return cp_scan_path(&s->pre, r, c->node, out);
    case CP_SNAP_LIST:
    case CP_SNAP_DICT: break;
    }
    if (cp_scan_path(&s->pre, r, c->node, &base)) return s->vm->err;
    hd_status st =
        cp_path_extend(s->vm, &base, c->key ? CP_FIELD : CP_INDEX, c->index, c->key, out);
    cp_path_free(s->vm, &base);
    return st;
}

static hd_status change_stateful(cp_session *s, const char *what, const cp_change *c) {
    cp_path p;
    hd_status st = c->reshaped && c->node >= 0 ? cp_scan_path(&s->pre, &s->roots, c->node, &p)
                   : c->node >= 0 || c->kind == CP_SNAP_MODULE || c->kind == CP_SNAP_SLOTS
                       ? change_path(s, c, &p)
                       : HD_ERR_RUNTIME;
    const char *where = st ? "a value outside it" : p.text;
    snprintf(s->stateful, sizeof s->stateful, "it %s %s at every call, which a graph cannot replay",
             what, where);
    if (!st) cp_path_free(s->vm, &p);
    return st == HD_ERR_MEMORY ? st : HD_OK;
}

/* The template of what the body stored: a tensor from before the call is
 * stored as itself (found by its path), the rest as a returned value is. */
static hd_status change_tmpl(cp_session *s, hd_value v, cp_tmpl *t) {
    hd_vm *vm = s->vm;
    int tensor = v.type == HD_V_TENSOR;
    int node = tensor ? cp_scan_find(&s->pre, v.as.t) : -1;
    if (node >= 0 || !(tensor || v.type == HD_V_FUNC)) return cp_tmpl_build(s, v, t, 0);
    memset(t, 0, sizeof *t);
    t->v = hd_none();
    int alias = tensor && node < 0 ? cp_scan_find_tensor(&s->pre, v.as.t) : -1;
    if (alias >= 0) { /* x.detach() of state */
        t->kind = CP_T_DETACH;
        return cp_scan_path(&s->pre, &s->roots, alias, &t->path) ? vm->err : HD_OK;
    }
    /* a tensor with data made inside (param(tensor([...]))): a copy at every
     * run (a traced one is an output); a function made inside: the one the
     * trace made, stored again (the tensors it captured are written back
     * through their paths) */
    if (tensor && !v.as.t->storage) return cp_tmpl_build(s, v, t, 0);
    if (tensor && v.as.t->grad_info) return HD_ERR_RUNTIME; /* a param made inside: eagerly */
    t->kind = tensor ? CP_T_FRESH : CP_T_CONST;
    hd_vref(t->v = v);
    return HD_OK;
}

static hd_status wb_change(void *ud, const cp_change *c) {
    cp_session *s = ud;
    hd_vm *vm = s->vm;
    hd_value v = c->now;
    if (s->stateful[0]) return HD_OK;
    if (c->reshaped) return change_stateful(s, "changes the length of", c);
    if (hd_is_uninit(v) || v.type == HD_V_CELL ||
        (c->kind != CP_SNAP_MODULE && c->kind != CP_SNAP_SLOTS && c->node < 0))
        return HD_OK;
    if (c->kind == CP_SNAP_SLOTS && s->roots.slot_skip && s->roots.slot_skip[c->index])
        return HD_OK; /* the block's own variables */
    if (v.type == HD_V_TENSOR && cp_is_symbolic_here(vm, v.as.t)) return HD_OK; /* wb_scan's */
    cp_tmpl *t = hd_ctx_calloc(&vm->ctx, 1, sizeof *t);
    if (!t) return hd_vm_oom(vm);
    hd_status st = change_tmpl(s, v, t);
    if (st == HD_ERR_RUNTIME && !vm->err) { /* a tensor with gradient state made inside */
        hd_ctx_free(&vm->ctx, t, sizeof *t);
        return change_stateful(s, "stores a parameter made inside it in", c);
    }
    cp_wb *w = st ? NULL : cp_wb_new(s, CP_WB_VALUE, -1);
    if (w) {
        w->tmpl = t;
        st = change_path(s, c, &w->path);
        return st;
    }
    cp_tmpl_free(vm, t);
    hd_ctx_free(&vm->ctx, t, sizeof *t);
    if (!st) return vm->err ? vm->err : hd_vm_oom(vm);
    if (st == HD_ERR_MEMORY) return st;
    hd_vm_clear_error(vm); /* an object made inside: not replayable */
    return change_stateful(s, "stores a value made inside it in", c);
}

/* Non-tensor state the body changed (numbers, strings, values from before
 * the call, containers made inside, stored in fields, dict entries, list
 * items, globals, captured variables, the block's outer variables): stored
 * again after every run. A change a graph cannot replay (a list or dict
 * changing length, an object made inside) makes the key run eagerly. */
hd_status cp_wb_values(cp_session *s) {
    return cp_snapshot_changes(&s->snap, wb_change, s);
}
