/* for-loops over what is not a range of ints (lists, dicts, strings,
 * tensors' rows, objects with iter or next), ranges with a tensor bound,
 * and the error for an if, while or for on tensor data that traced code
 * cannot compile. Each iteration runs through hd_eval_for_iteration; the
 * hot loop over a range of ints stays in eval.c. */
#include "compiled.h"
#include "eval.h"
#include "builtins_tensor.h"
#include "tensor_api.h"
#include "hd_trace.h"

#include <string.h>

static int for_fail(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    hd_vm_locate(vm, f, &n->span);
    return HD_FLOW_ERROR;
}

static int for_result(int fl) {
    return fl == HD_FLOW_BREAK ? HD_FLOW_NORMAL : fl;
}

static int ex_for_list(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value it) {
    hd_list *l = hd_as_list(it);
    for (int64_t i = 0; i < l->len; i++) {
        /* a traced body reads each item as l[i] would (its guard, and a
         * tensor's path: the one it has in this list) */
        if (HD_UNLIKELY(vm->trace_reads)) hd_compiled_note_member(vm, it, NULL, i, l->items[i]);
        hd_vref(l->items[i]);
        int fl = hd_eval_for_iteration(vm, f, n, l->items[i]);
        if (fl) return for_result(fl);
    }
    return HD_FLOW_NORMAL;
}

static int ex_for_dict(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value it) {
    hd_dict *d = hd_as_dict(it);
    int64_t len = d->len;
    for (int64_t i = 0; i < d->len; i++) {
        if (d->len != len) break;
        hd_obj *k = &d->keys[i]->obj;
        k->refcount++;
        int fl = hd_eval_for_iteration(vm, f, n, hd_obj_value(k));
        if (fl) return for_result(fl);
    }
    if (d->len != len)
        return hd_eval_failf(vm, f, n->a, HD_ERR_RUNTIME, "dict changed size during iteration"),
               HD_FLOW_ERROR;
    return HD_FLOW_NORMAL;
}

static int ex_for_str(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value it) {
    hd_str *s = hd_as_str(it);
    for (size_t off = 0; off < s->len;) {
        size_t end = off + 1;
        while (end < s->len && ((unsigned char)s->chars[end] & 0xC0) == 0x80) end++;
        hd_value c = hd_str_new(vm, s->chars + off, end - off);
        if (c.type != HD_V_STR) return for_fail(vm, f, n);
        int fl = hd_eval_for_iteration(vm, f, n, c);
        if (fl) return for_result(fl);
        off = end;
    }
    return HD_FLOW_NORMAL;
}

static int ex_for_tensor(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value it) {
    const hd_tensor *t = it.as.t;
    if (t->ndim == 0)
        return hd_eval_failf(vm, f, n->a, HD_ERR_RUNTIME, "cannot iterate over a 0-d tensor"),
               HD_FLOW_ERROR;
    for (int64_t i = 0; i < t->shape[0]; i++) {
        hd_index_part part;
        memset(&part, 0, sizeof part);
        part.kind = HD_IDX_INT;
        part.i = i;
        part.v = hd_none();
        hd_value row;
        if (hd_eval_tensor_index(vm, it, &part, 1, NULL, &row) != HD_OK)
            return for_fail(vm, f, n->a);
        int fl = hd_eval_for_iteration(vm, f, n, row);
        if (fl) return for_result(fl);
    }
    return HD_FLOW_NORMAL;
}

/* An iterator object: its next() gives the items, none ends the loop. */
static int ex_for_next(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value it, hd_value next) {
    for (;;) {
        hd_value v;
        f->at = n;
        if (hd_eval_call(vm, next, it, 1, NULL, 0, NULL, 0, &v) != HD_OK)
            return for_fail(vm, f, n->a);
        if (v.type == HD_V_NONE) return HD_FLOW_NORMAL;
        int fl = hd_eval_for_iteration(vm, f, n, v);
        if (fl) return for_result(fl);
    }
}

/* for x in obj: the class's iter() gives what to iterate (a list, a range,
 * ... or an iterator object); an object with next() is its own iterator. */
static int ex_for_object(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value obj) {
    hd_class *cls = ((hd_object *)obj.as.o)->cls;
    hd_value *iter = hd_dict_get(cls->methods, "iter");
    hd_value *next = hd_dict_get(cls->methods, "next");
    if (!iter && !next)
        return hd_eval_failf(
                   vm, f, n->a, HD_ERR_RUNTIME,
                   "cannot iterate over a %s object (its class has no iter or next method)",
                   hd_value_type_name(obj)),
               HD_FLOW_ERROR;
    if (!iter) return ex_for_next(vm, f, n, obj, *next);
    hd_value it;
    f->at = n;
    if (hd_eval_call(vm, *iter, obj, 1, NULL, 0, NULL, 0, &it) != HD_OK)
        return for_fail(vm, f, n->a);
    int fl;
    if (it.type == HD_V_OBJECT) {
        next = hd_dict_get(((hd_object *)it.as.o)->cls->methods, "next");
        fl = next ? ex_for_next(vm, f, n, it, *next)
                  : (hd_eval_failf(vm, f, n->a, HD_ERR_RUNTIME,
                                   "iter() returned a %s object, which has no next method",
                                   hd_value_type_name(it)),
                     HD_FLOW_ERROR);
    } else {
        fl = hd_eval_for_value(vm, f, n, it);
    }
    hd_vunref(vm, it);
    return fl;
}

int hd_eval_for_value(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value v) {
    switch (v.type) {
    case HD_V_RANGE: {
        hd_range *r = (hd_range *)v.as.o;
        return hd_eval_for_range(vm, f, n, r->start, r->stop, r->step);
    }
    case HD_V_LIST: return ex_for_list(vm, f, n, v);
    case HD_V_DICT: return ex_for_dict(vm, f, n, v);
    case HD_V_STR: return ex_for_str(vm, f, n, v);
    case HD_V_TENSOR: return ex_for_tensor(vm, f, n, v);
    case HD_V_OBJECT: return ex_for_object(vm, f, n, v);
    default:
        hd_eval_failf(vm, f, n->a, HD_ERR_RUNTIME, "cannot iterate over a value of type %s",
                      hd_value_type_name(v));
        return HD_FLOW_ERROR;
    }
}

/* An if, while or for on tensor data inside traced code that could not
 * become a graph node (why: the reason; fl: the flow it left): the error,
 * with the reason and what to do instead. */
int hd_eval_traced_refused(hd_vm *vm, hd_frame *f, const hd_ast *n, int fl, const char *why) {
    if (fl != HD_FLOW_NORMAL || !why) return fl;
    if (!strcmp(why, "out of memory"))
        return hd_eval_failf(vm, f, n->a, HD_ERR_MEMORY, "out of memory"), HD_FLOW_ERROR;
    if (n->kind == HD_AST_IF)
        return hd_eval_failf(vm, f, n->a, HD_ERR_RUNTIME,
                             "branch on tensor data inside compiled code: use where(...) (this if "
                             "cannot be compiled: %s)",
                             why),
               HD_FLOW_ERROR;
    return hd_eval_failf(vm, f, n->a, HD_ERR_RUNTIME,
                         "loop on tensor data inside compiled code (this %s cannot be compiled: "
                         "%s): run the loop eagerly, or loop a fixed number of times with "
                         "where(...) in the body",
                         n->kind == HD_AST_WHILE ? "while" : "for", why),
           HD_FLOW_ERROR;
}

/* A tensor bound's value as an int: one element of an integer dtype. */
static int range_bound_int(hd_vm *vm, hd_frame *f, const hd_ast *at, hd_value v, int64_t *out) {
    if (v.type == HD_V_INT) return *out = v.as.i, 1;
    const hd_tensor *t = v.as.t;
    char sh[64];
    if (t->numel != 1 || !hd_dtype_is_int(t->dtype))
        return hd_eval_failf(vm, f, at, HD_ERR_RUNTIME,
                             "a range bound must be an int or a one-element integer tensor, got "
                             "a %s tensor of shape %s",
                             hd_dtype_name(t->dtype),
                             hd_shape_str(t->shape, t->ndim, sh, sizeof sh)),
               0;
    hd_value x;
    if (hd_tensor_item(vm, t, &x) != HD_OK) return for_fail(vm, f, at), 0;
    *out = x.type == HD_V_INT ? x.as.i : 0;
    hd_vunref(vm, x);
    return 1;
}

/* for i in a..b where a bound is a one-element integer tensor: its value
 * (as range(t) in Python), or inside traced code a tensor known only when
 * the graph runs: a loop node counted when it runs (eval_loop.c). Takes a, b. */
int hd_eval_for_tensor_range(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value a, hd_value b) {
    int sym = 0, fl = HD_FLOW_ERROR;
    for (int k = 0; k < 2 && vm->ctx.trace; k++) {
        hd_value v = k ? b : a;
        sym |= v.type == HD_V_TENSOR && v.as.t->numel == 1 && hd_dtype_is_int(v.as.t->dtype) &&
               hd_trace_stands_for_input(&vm->ctx, v.as.t);
    }
    int64_t x, y;
    if (sym) {
        const char *why = NULL;
        fl = hd_eval_for_count_traced(vm, f, n, a, b, &why);
        fl = hd_eval_traced_refused(vm, f, n, fl, why);
    } else if (range_bound_int(vm, f, n->a->a, a, &x) && range_bound_int(vm, f, n->a->b, b, &y)) {
        fl = hd_eval_for_range(vm, f, n, x, y, 1);
    }
    hd_vunref(vm, a);
    hd_vunref(vm, b);
    return fl;
}
