/* The evaluator's indexing: x[i], x[a:b:c], x[...] = v on lists, strings,
 * dicts and tensors (eval.h). */
#include "eval.h"
#include "compiled.h"
#include "tensor_api.h"

#include <stdio.h>
#include <string.h>

/* ---- indexing ---- */

/* Positions and counts of a slice in 128 bits: a range may hold up to
 * 2^64 - 1 elements, and a step may be INT64_MIN (its negation overflows). */
typedef __int128 i128;

/* Python's slice rules: clamp, then count. */
static i128 eval_slice_bounds(i128 len, const hd_index_part *s, i128 *start, int64_t *step) {
    int64_t st = s->has_step ? s->step : 1;
    i128 lower = st > 0 ? 0 : -1, upper = st > 0 ? len : len - 1;
    i128 a, b;
    if (s->has_start) {
        a = s->start;
        if (a < 0)
            a = a + len < lower ? lower : a + len;
        else if (a > upper)
            a = upper;
    } else {
        a = st > 0 ? lower : upper;
    }
    if (s->has_stop) {
        b = s->stop;
        if (b < 0)
            b = b + len < lower ? lower : b + len;
        else if (b > upper)
            b = upper;
    } else {
        b = st > 0 ? upper : lower;
    }
    *start = a;
    *step = st;
    if (st > 0) return b > a ? (b - a - 1) / st + 1 : 0;
    return a > b ? (a - b - 1) / -(i128)st + 1 : 0;
}

static hd_status eval_seq_index(hd_vm *vm, hd_value x, i128 len, int64_t i, int64_t *out) {
    i128 j = i < 0 ? i + len : i;
    if (j < 0 || j >= len)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s index %lld out of range (length %lld)",
                           hd_value_type_name(x), (long long)i,
                           (long long)(len > INT64_MAX ? INT64_MAX : len));
    *out = (int64_t)(uint64_t)j; /* a range's position may pass INT64_MAX: hd_range_at wraps */
    return HD_OK;
}

static int fits_i64(i128 v) {
    return v >= INT64_MIN && v <= INT64_MAX;
}

/* r[s]: a new range. Positions run up to 2^64 - 1, so in 128 bits. */
static hd_status eval_slice_range(hd_vm *vm, const hd_range *r, const hd_index_part *s,
                                  hd_value *out) {
    i128 start, count = eval_slice_bounds(hd_range_ulen(r), s, &start, &(int64_t){0});
    int64_t step = s->has_step ? s->step : 1;
    i128 first = count ? r->start + start * r->step : r->start;
    i128 st = (i128)r->step * step, stop;
    if (!fits_i64(st)) {
        if (count > 1)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "range slice step does not fit in an int");
        st = st > 0 ? 1 : -1;
    }
    if (count == 1 && !fits_i64(first + (st > 0 ? 1 : -1))) st = st > 0 ? -1 : 1; /* either way */
    /* One past the last element, which must be an int too. */
    i128 last = first + (count - 1) * st;
    stop = count ? last + (st > 0 ? 1 : -1) : first;
    if (!fits_i64(stop))
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "this slice of a range ends at %s, past the range of ints",
                           st > 0 ? "9223372036854775807" : "-9223372036854775808");
    *out = hd_range_new(vm, (int64_t)first, (int64_t)stop, (int64_t)st);
    return out->type == HD_V_RANGE ? HD_OK : vm->err;
}

static hd_status eval_slice_value(hd_vm *vm, hd_value x, const hd_index_part *s, hd_value *out) {
    if (s->has_step && s->step == 0) return hd_vm_error(vm, HD_ERR_RUNTIME, "slice step is zero");
    i128 start;
    int64_t step, count;
    if (x.type == HD_V_LIST) {
        hd_list *l = hd_as_list(x);
        count = (int64_t)eval_slice_bounds(l->len, s, &start, &step);
        *out = hd_list_new(vm, count);
        if (out->type != HD_V_LIST) return vm->err;
        hd_list *o = hd_as_list(*out);
        for (int64_t k = 0; k < count; k++)
            hd_vref(o->items[o->len++] = l->items[(int64_t)(start + (i128)k * step)]);
        return HD_OK;
    }
    if (x.type == HD_V_STR) {
        hd_str *str = hd_as_str(x);
        count = (int64_t)eval_slice_bounds((int64_t)str->ulen, s, &start, &step);
        hd_buf b;
        hd_buf_init(&b, vm);
        for (int64_t k = 0; k < count; k++) {
            int64_t at = (int64_t)(start + (i128)k * step);
            size_t off = hd_str_offset(str, at);
            size_t end = hd_str_offset(str, at + 1);
            hd_buf_add(&b, str->chars + off, end - off);
        }
        *out = hd_buf_to_str(&b);
        return out->type == HD_V_STR ? HD_OK : vm->err;
    }
    if (x.type == HD_V_RANGE) return eval_slice_range(vm, (hd_range *)x.as.o, s, out);
    return hd_vm_error(vm, HD_ERR_RUNTIME, "cannot slice a value of type %s",
                       hd_value_type_name(x));
}

hd_status hd_eval_get_item(hd_vm *vm, hd_value x, hd_value k, hd_value *out) {
    int64_t j = 0;
    if (x.type == HD_V_DICT) {
        if (k.type != HD_V_STR)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "dict keys are strings, not %s",
                               hd_value_type_name(k));
        hd_value *v = hd_dict_get_str(x, hd_as_str(k));
        if (!v)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "key \"%s\" not found in dict",
                               hd_as_str(k)->chars);
        if (HD_UNLIKELY(vm->trace_reads))
            hd_compiled_note_member(vm, x, hd_as_str(k)->chars, 0, *v);
        hd_vref(*out = *v);
        return HD_OK;
    }
    if (x.type != HD_V_LIST && x.type != HD_V_STR && x.type != HD_V_RANGE)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "cannot index a value of type %s",
                           hd_value_type_name(x));
    if (k.type != HD_V_INT)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s indices must be ints, not %s",
                           hd_value_type_name(x), hd_value_type_name(k));
    if (x.type == HD_V_LIST) {
        hd_list *l = hd_as_list(x);
        if (eval_seq_index(vm, x, l->len, k.as.i, &j) != HD_OK) return vm->err;
        if (HD_UNLIKELY(vm->trace_reads)) hd_compiled_note_member(vm, x, NULL, j, l->items[j]);
        hd_vref(*out = l->items[j]);
        return HD_OK;
    }
    if (x.type == HD_V_RANGE) {
        hd_range *r = (hd_range *)x.as.o;
        if (eval_seq_index(vm, x, hd_range_ulen(r), k.as.i, &j) != HD_OK) return vm->err;
        *out = hd_int(hd_range_at(r->start, r->step, j));
        return HD_OK;
    }
    hd_str *s = hd_as_str(x);
    if (eval_seq_index(vm, x, (int64_t)s->ulen, k.as.i, &j) != HD_OK) return vm->err;
    size_t off = hd_str_offset(s, j), end = hd_str_offset(s, j + 1);
    *out = hd_str_new(vm, s->chars + off, end - off);
    return out->type == HD_V_STR ? HD_OK : vm->err;
}

hd_status hd_eval_set_item(hd_vm *vm, hd_value x, hd_value k, hd_value v) {
    if (x.type == HD_V_DICT) {
        if (k.type != HD_V_STR)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "dict keys are strings, not %s",
                               hd_value_type_name(k));
        if (HD_UNLIKELY(vm->trace_reads)) hd_compiled_note_store(vm, x, hd_as_str(k)->chars, 0);
        hd_vref(v);
        return hd_dict_set_str(vm, x, hd_as_str(k), v);
    }
    if (x.type == HD_V_LIST) {
        if (k.type != HD_V_INT)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "list indices must be ints, not %s",
                               hd_value_type_name(k));
        hd_list *l = hd_as_list(x);
        int64_t j = 0;
        if (eval_seq_index(vm, x, l->len, k.as.i, &j) != HD_OK) return vm->err;
        hd_value old = l->items[j];
        if (HD_UNLIKELY(vm->roll_watch)) hd_roll_note_container(vm, &l->obj, 1, old, v);
        if (HD_UNLIKELY(vm->trace_reads)) hd_compiled_note_store(vm, x, NULL, j);
        hd_vref(l->items[j] = v);
        hd_vunref(vm, old);
        return HD_OK;
    }
    return hd_vm_error(vm, HD_ERR_RUNTIME, "a value of type %s does not support item assignment",
                       hd_value_type_name(x));
}

/* Evaluate the parts of x[...]. Tensor parts are new references, released
 * by free_parts. Returns 0 on error (located). */
int hd_eval_parts(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_index_part *parts) {
    for (int i = 0; i < n->n; i++) {
        const hd_ast *p = n->items[i];
        hd_index_part *ip = &parts[i];
        memset(ip, 0, sizeof *ip);
        ip->v = hd_none();
        if (p->kind == HD_AST_ELLIPSIS) {
            ip->kind = HD_IDX_ELLIPSIS;
            continue;
        }
        if (p->kind == HD_AST_SLICE) {
            ip->kind = HD_IDX_SLICE;
            const hd_ast *bounds[3] = {p->a, p->b, p->c};
            int *has[3] = {&ip->has_start, &ip->has_stop, &ip->has_step};
            int64_t *val[3] = {&ip->start, &ip->stop, &ip->step};
            for (int k = 0; k < 3; k++) {
                if (!bounds[k]) continue;
                hd_value v = hd_eval_expr(vm, f, bounds[k]);
                if (v.type == HD_V_ERR) return 0;
                if (v.type == HD_V_NONE) continue;
                if (v.type != HD_V_INT) {
                    hd_eval_failf(vm, f, bounds[k], HD_ERR_RUNTIME,
                                  "slice bounds must be ints, not %s", hd_value_type_name(v));
                    hd_vunref(vm, v);
                    return 0;
                }
                *has[k] = 1;
                *val[k] = v.as.i;
            }
            continue;
        }
        hd_value v = hd_eval_expr(vm, f, p);
        if (v.type == HD_V_ERR) return 0;
        if (v.type == HD_V_INT) {
            ip->kind = HD_IDX_INT;
            ip->i = v.as.i;
        } else if (v.type == HD_V_NONE) {
            ip->kind = HD_IDX_NONE;
        } else {
            ip->kind = HD_IDX_TENSOR;
            ip->v = v;
        }
    }
    return 1;
}

void hd_eval_free_parts(hd_vm *vm, hd_index_part *parts, int n) {
    for (int i = 0; i < n; i++) hd_vunref(vm, parts[i].v);
}

hd_status hd_eval_tensor_index(hd_vm *vm, hd_value x, hd_index_part *parts, int n,
                               const hd_value *set, hd_value *out) {
    for (int i = 0; i < n; i++)
        if (parts[i].kind == HD_IDX_TENSOR && parts[i].v.type != HD_V_TENSOR)
            return hd_vm_error(vm, HD_ERR_RUNTIME,
                               "a tensor index must be an int, slice, ..., none or a tensor, "
                               "not %s",
                               hd_value_type_name(parts[i].v));
    hd_status st = set ? hd_tensor_set_index(vm, x, parts, n, *set)
                       : hd_tensor_get_index(vm, x, parts, n, out);
    if (st != HD_OK && !hd_vm_failed(vm)) hd_vm_from_ctx(vm, st);
    return st;
}

/* obj[k] and obj[k] = v: the class's getitem(k) and setitem(k, v) methods,
 * as Python's __getitem__ and __setitem__ (nn.ModuleList, nn.ModuleDict). */
static hd_status eval_object_item(hd_vm *vm, hd_value x, hd_index_part *p, const hd_value *set,
                                  hd_value *out) {
    const char *name = set ? "setitem" : "getitem";
    hd_value *m = hd_dict_get(((hd_object *)x.as.o)->cls->methods, name);
    if (!m)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "%s of an object of class %s (the class has no %s "
                           "method)",
                           set ? "item assignment" : "indexing", hd_value_type_name(x), name);
    if (p->kind == HD_IDX_SLICE || p->kind == HD_IDX_ELLIPSIS)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "an object of class %s takes an index, not %s",
                           hd_value_type_name(x), p->kind == HD_IDX_SLICE ? "a slice" : "...");
    hd_value args[2] = {p->kind == HD_IDX_INT    ? hd_int(p->i)
                        : p->kind == HD_IDX_NONE ? hd_none()
                                                 : p->v,
                        set ? *set : hd_none()};
    hd_value r = hd_none();
    if (hd_eval_call(vm, *m, x, 1, args, set ? 2 : 1, NULL, 0, &r) != HD_OK) return vm->err;
    if (set)
        hd_vunref(vm, r);
    else
        *out = r;
    return HD_OK;
}

/* x[parts] for any value: get (set == NULL) or set. */
hd_status hd_eval_index_op(hd_vm *vm, hd_value x, hd_index_part *parts, int n, const hd_value *set,
                           hd_value *out) {
    if (x.type == HD_V_TENSOR) return hd_eval_tensor_index(vm, x, parts, n, set, out);
    if (x.type == HD_V_OBJECT && n == 1) return eval_object_item(vm, x, &parts[0], set, out);
    if (n != 1)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "a %s takes one index, not %d",
                           hd_value_type_name(x), n);
    hd_index_part *p = &parts[0];
    if (p->kind == HD_IDX_SLICE) {
        if (set)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "slice assignment is not supported on a %s",
                               hd_value_type_name(x));
        return eval_slice_value(vm, x, p, out);
    }
    hd_value k = p->kind == HD_IDX_INT ? hd_int(p->i) : p->kind == HD_IDX_NONE ? hd_none() : p->v;
    if (vm->roll_var) hd_roll_index_int(vm, k, &k); /* the loop's counter: its int */
    if (p->kind == HD_IDX_ELLIPSIS)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "... indexes tensors only");
    return set ? hd_eval_set_item(vm, x, k, *set) : hd_eval_get_item(vm, x, k, out);
}
