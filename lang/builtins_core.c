/* builtins_core: the prelude functions that are not about tensors (print,
 * len, range, int, float, str, bool, type, args, clock, assert, abs, min,
 * max, list) and the methods of str, list, dict and objects. */
#include "compiled.h"
#include "eval.h"
#include "vm_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NATIVE(name)                                                                               \
    static hd_status name(hd_vm *vm, hd_value self, const hd_value *args, int nargs,               \
                          const hd_kwarg *kw, int nkw, hd_value *result, void *data)

/* ---- argument checks ---- */

static hd_status arity(hd_vm *vm, const char *fn, int nargs, int min, int max) {
    if (nargs >= min && nargs <= max) return HD_OK;
    if (min == max)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() takes %d argument%s but %d were given", fn,
                           min, min == 1 ? "" : "s", nargs);
    if (nargs < min)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "%s() takes at least %d argument%s but %d were given", fn, min,
                           min == 1 ? "" : "s", nargs);
    return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() takes at most %d argument%s but %d were given", fn,
                       max, max == 1 ? "" : "s", nargs);
}

/* Reject named arguments other than those listed (NULL-terminated). */
static hd_status only_kw(hd_vm *vm, const char *fn, const hd_kwarg *kw, int nkw,
                         const char *const *allowed) {
    for (int i = 0; i < nkw; i++) {
        int ok = 0;
        for (const char *const *a = allowed; a && *a; a++) ok |= strcmp(*a, kw[i].name) == 0;
        if (!ok)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() has no parameter named '%s'", fn,
                               kw[i].name);
    }
    return HD_OK;
}

static const hd_value *kwarg(const hd_kwarg *kw, int nkw, const char *name) {
    for (int i = 0; i < nkw; i++)
        if (strcmp(kw[i].name, name) == 0) return &kw[i].value;
    return NULL;
}

static hd_status want(hd_vm *vm, const char *fn, hd_value v, hd_vtype t, const char *what) {
    if (v.type == t) return HD_OK;
    return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() expects %s, not %s", fn, what,
                       hd_value_type_name(v));
}

static hd_status plain(hd_vm *vm, const char *fn, int nargs, int min, int max, int nkw) {
    if (nkw) return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() takes no named arguments", fn);
    return arity(vm, fn, nargs, min, max);
}

static hd_status set_str(hd_vm *vm, hd_value *result, hd_value s) {
    *result = s;
    return s.type == HD_V_STR ? HD_OK : (vm->err ? vm->err : hd_vm_oom(vm));
}

/* ---- print, str, repr ---- */

/* x.name() when x is an object whose class defines name: *found set, the
 * result in *r (a new reference). */
static hd_status call_own_method(hd_vm *vm, hd_value x, const char *name, int *found, hd_value *r) {
    *found = 0;
    if (x.type != HD_V_OBJECT) return HD_OK;
    hd_value *m = hd_dict_get(((hd_object *)x.as.o)->cls->methods, name);
    if (!m) return HD_OK;
    *found = 1;
    return hd_eval_call(vm, *m, x, 1, NULL, 0, NULL, 0, r) != HD_OK ? vm->err : HD_OK;
}

hd_status hd_eval_str_method(hd_vm *vm, hd_value x, hd_value *out) {
    *out = hd_none();
    int found;
    hd_value r;
    if (call_own_method(vm, x, "str", &found, &r)) return vm->err;
    if (!found) return HD_OK;
    if (r.type != HD_V_STR) {
        hd_status st = hd_vm_error(vm, HD_ERR_RUNTIME,
                                   "str() of an object of class %s: its str method gave a value "
                                   "of type %s, not a str",
                                   hd_value_type_name(x), hd_value_type_name(r));
        hd_vunref(vm, r);
        return st;
    }
    *out = r;
    return HD_OK;
}

NATIVE(bi_print) {
    static const char *const allowed[] = {"sep", "end", NULL};
    if (only_kw(vm, "print", kw, nkw, allowed) != HD_OK) return vm->err;
    const hd_value *sep = kwarg(kw, nkw, "sep"), *end = kwarg(kw, nkw, "end");
    if ((sep && sep->type != HD_V_STR) || (end && end->type != HD_V_STR))
        return hd_vm_error(vm, HD_ERR_RUNTIME, "print(): sep and end must be strings");
    /* inside compiled code: prints at every run, with the run's values */
    if (vm->ctx.trace) return hd_compiled_print(vm, args, nargs, sep, end);
    hd_buf b;
    hd_buf_init(&b, vm);
    for (int i = 0; i < nargs; i++) {
        if (i) {
            if (sep)
                hd_buf_add(&b, hd_as_str(*sep)->chars, hd_as_str(*sep)->len);
            else
                hd_buf_add(&b, " ", 1);
        }
        hd_value t;
        if (hd_eval_str_method(vm, args[i], &t) != HD_OK) {
            hd_buf_free(&b);
            return vm->err;
        }
        if (t.type == HD_V_STR) {
            hd_buf_add(&b, hd_as_str(t)->chars, hd_as_str(t)->len);
            hd_vunref(vm, t);
        } else {
            hd_buf_value(&b, args[i], 0);
        }
    }
    if (end)
        hd_buf_add(&b, hd_as_str(*end)->chars, hd_as_str(*end)->len);
    else
        hd_buf_add(&b, "\n", 1);
    if (hd_buf_failed(&b)) {
        hd_status st = hd_buf_error(&b);
        hd_buf_free(&b);
        return st;
    }
    hd_vm_write(vm, b.p ? b.p : "", b.len);
    hd_buf_free(&b);
    return HD_OK;
}

NATIVE(bi_str) {
    if (plain(vm, "str", nargs, 0, 1, nkw) != HD_OK) return vm->err;
    if (!nargs) return set_str(vm, result, hd_str_new(vm, "", 0));
    if (hd_eval_str_method(vm, args[0], result) != HD_OK) return vm->err;
    if (result->type == HD_V_STR) return HD_OK;
    return set_str(vm, result, hd_value_to_str(vm, args[0]));
}

NATIVE(bi_repr) {
    if (plain(vm, "repr", nargs, 1, 1, nkw) != HD_OK) return vm->err;
    return set_str(vm, result, hd_value_repr(vm, args[0]));
}

NATIVE(bi_type) {
    if (plain(vm, "type", nargs, 1, 1, nkw) != HD_OK) return vm->err;
    return set_str(vm, result, hd_str_from(vm, hd_value_type_name(args[0])));
}

/* ---- len, range, list ---- */

/* len(obj): the class's len() method, as Python's __len__ (a DataLoader's
 * batches per epoch); a non-negative int. */
static hd_status len_object(hd_vm *vm, hd_value x, hd_value *result) {
    int found;
    hd_value r;
    if (call_own_method(vm, x, "len", &found, &r)) return vm->err;
    if (!found)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "len() of an object of class %s (the class has no len method)",
                           hd_value_type_name(x));
    if (r.type != HD_V_INT || r.as.i < 0) {
        hd_status st =
            r.type == HD_V_INT
                ? hd_vm_error(vm, HD_ERR_RUNTIME,
                              "len() of an object of class %s: its len method gave %lld, "
                              "a negative length",
                              hd_value_type_name(x), (long long)r.as.i)
                : hd_vm_error(vm, HD_ERR_RUNTIME,
                              "len() of an object of class %s: its len method gave a value of "
                              "type %s, not an int",
                              hd_value_type_name(x), hd_value_type_name(r));
        hd_vunref(vm, r);
        return st;
    }
    *result = r;
    return HD_OK;
}

NATIVE(bi_len) {
    if (plain(vm, "len", nargs, 1, 1, nkw) != HD_OK) return vm->err;
    hd_value x = args[0];
    switch (x.type) {
    case HD_V_STR: *result = hd_int((int64_t)hd_as_str(x)->ulen); return HD_OK;
    case HD_V_LIST: *result = hd_int(hd_as_list(x)->len); return HD_OK;
    case HD_V_DICT: *result = hd_int(hd_as_dict(x)->len); return HD_OK;
    case HD_V_RANGE:
        if (hd_range_ulen((hd_range *)x.as.o) > (uint64_t)INT64_MAX)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "len() of a range longer than %lld",
                               (long long)INT64_MAX);
        *result = hd_int(hd_range_len((hd_range *)x.as.o));
        return HD_OK;
    case HD_V_TENSOR:
        if (x.as.t->ndim == 0) return hd_vm_error(vm, HD_ERR_RUNTIME, "len() of a 0-d tensor");
        *result = hd_int(x.as.t->shape[0]);
        return HD_OK;
    case HD_V_OBJECT: return len_object(vm, x, result);
    default:
        return hd_vm_error(vm, HD_ERR_RUNTIME, "len() of a value of type %s",
                           hd_value_type_name(x));
    }
}

NATIVE(bi_range) {
    if (plain(vm, "range", nargs, 1, 3, nkw) != HD_OK) return vm->err;
    for (int i = 0; i < nargs; i++)
        if (want(vm, "range", args[i], HD_V_INT, "ints") != HD_OK) return vm->err;
    int64_t a = nargs == 1 ? 0 : args[0].as.i, b = nargs == 1 ? args[0].as.i : args[1].as.i;
    int64_t step = nargs == 3 ? args[2].as.i : 1;
    if (step == 0) return hd_vm_error(vm, HD_ERR_RUNTIME, "range() step must not be zero");
    *result = hd_range_new(vm, a, b, step);
    return result->type == HD_V_RANGE ? HD_OK : vm->err;
}

/* Append every element of an iterable value to list (new references). */
static hd_status extend(hd_vm *vm, hd_value list, hd_value x, const char *fn) {
    if (vm->roll_watch) hd_roll_note_container(vm, list.as.o, 0, hd_none(), hd_none());
    switch (x.type) {
    case HD_V_LIST: {
        hd_list *src = hd_as_list(x);
        int64_t n = src->len;
        if (hd_list_reserve(vm, hd_as_list(list), hd_as_list(list)->len + n) != HD_OK)
            return vm->err;
        for (int64_t i = 0; i < n; i++) {
            hd_vref(src->items[i]);
            hd_as_list(list)->items[hd_as_list(list)->len++] = src->items[i];
        }
        return HD_OK;
    }
    case HD_V_RANGE: {
        hd_range *r = (hd_range *)x.as.o;
        int64_t n = hd_range_len(r);
        if (hd_list_reserve(vm, hd_as_list(list), hd_as_list(list)->len + n) != HD_OK)
            return vm->err;
        for (int64_t i = 0; i < n; i++)
            hd_list_push(vm, list, hd_int(hd_range_at(r->start, r->step, i)));
        return HD_OK;
    }
    case HD_V_DICT: {
        hd_dict *d = hd_as_dict(x);
        for (int64_t i = 0; i < d->len; i++) {
            d->keys[i]->obj.refcount++;
            if (hd_list_push(vm, list, hd_obj_value(&d->keys[i]->obj)) != HD_OK) return vm->err;
        }
        return HD_OK;
    }
    case HD_V_STR: {
        hd_str *s = hd_as_str(x);
        for (int64_t i = 0; i < (int64_t)s->ulen; i++) {
            size_t a = hd_str_offset(s, i), b = hd_str_offset(s, i + 1);
            hd_value c = hd_str_new(vm, s->chars + a, b - a);
            if (c.type != HD_V_STR || hd_list_push(vm, list, c) != HD_OK) return vm->err;
        }
        return HD_OK;
    }
    default:
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() cannot iterate over a value of type %s", fn,
                           hd_value_type_name(x));
    }
}

/* x's items as a new list (what a for loop over x gives), or HD_V_ERR. */
static hd_value items_of(hd_vm *vm, hd_value x, const char *fn) {
    hd_value l = hd_list_new(vm, 0);
    if (l.type != HD_V_LIST) return hd_err_value();
    if (extend(vm, l, x, fn) != HD_OK) {
        hd_vunref(vm, l);
        return hd_err_value();
    }
    return l;
}

NATIVE(bi_list) {
    if (plain(vm, "list", nargs, 0, 1, nkw) != HD_OK) return vm->err;
    hd_value l = nargs ? items_of(vm, args[0], "list") : hd_list_new(vm, 0);
    if (l.type != HD_V_LIST) return vm->err;
    *result = l;
    return HD_OK;
}

/* enumerate(it, start = 0): [[start, x0], [start + 1, x1], ...] (lists:
 * Hodu has no tuples). */
NATIVE(bi_enumerate) {
    static const char *const allowed[] = {"start", NULL};
    if (arity(vm, "enumerate", nargs, 1, 2) != HD_OK ||
        only_kw(vm, "enumerate", kw, nkw, allowed) != HD_OK)
        return vm->err;
    const hd_value *st = nargs == 2 ? &args[1] : kwarg(kw, nkw, "start");
    if (st && want(vm, "enumerate", *st, HD_V_INT, "an int start") != HD_OK) return vm->err;
    int64_t k = st ? st->as.i : 0;
    hd_value it = items_of(vm, args[0], "enumerate"), out = hd_list_new(vm, 0);
    hd_status s = it.type == HD_V_LIST && out.type == HD_V_LIST ? HD_OK : vm->err;
    for (int64_t i = 0; s == HD_OK && i < hd_as_list(it)->len; i++) {
        hd_value pair = hd_list_new(vm, 2);
        if (pair.type != HD_V_LIST) {
            s = vm->err;
            break;
        }
        hd_list_push(vm, pair, hd_int(k + i));
        hd_list_push(vm, pair, hd_value_ref(hd_as_list(it)->items[i]));
        s = hd_list_push(vm, out, pair);
    }
    hd_vunref(vm, it);
    if (s != HD_OK) return hd_vunref(vm, out), vm->err;
    *result = out;
    return HD_OK;
}

/* zip(a, b, ...): [[a0, b0, ...], [a1, b1, ...], ...] up to the shortest. */
NATIVE(bi_zip) {
    if (plain(vm, "zip", nargs, 0, 16, nkw) != HD_OK) return vm->err;
    hd_value lists[16], out = hd_list_new(vm, 0);
    int made = 0;
    int64_t n = INT64_MAX;
    hd_status s = out.type == HD_V_LIST ? HD_OK : vm->err;
    for (; s == HD_OK && made < nargs; made++) {
        lists[made] = items_of(vm, args[made], "zip");
        if (lists[made].type != HD_V_LIST)
            s = vm->err;
        else
            n = HD_MIN(n, hd_as_list(lists[made])->len);
    }
    for (int64_t i = 0; s == HD_OK && nargs && i < n; i++) {
        hd_value row = hd_list_new(vm, nargs);
        if (row.type != HD_V_LIST) {
            s = vm->err;
            break;
        }
        for (int j = 0; j < nargs; j++)
            hd_list_push(vm, row, hd_value_ref(hd_as_list(lists[j])->items[i]));
        s = hd_list_push(vm, out, row);
    }
    for (int j = 0; j < made; j++) hd_vunref(vm, lists[j]);
    if (s != HD_OK) return hd_vunref(vm, out), vm->err;
    *result = out;
    return HD_OK;
}

static hd_status list_sort(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                           const hd_kwarg *kw, int nkw, hd_value *result, void *data);
static hd_status list_reverse(hd_vm *vm, hd_value self, const hd_value *args, int nargs,
                              const hd_kwarg *kw, int nkw, hd_value *result, void *data);

/* sorted(it, key = none, reverse = false): a new sorted list (list.sort's
 * order: stable). */
NATIVE(bi_sorted) {
    if (arity(vm, "sorted", nargs, 1, 1) != HD_OK) return vm->err;
    hd_value l = items_of(vm, args[0], "sorted"), ignored = hd_none();
    if (l.type != HD_V_LIST) return vm->err;
    if (list_sort(vm, l, NULL, 0, kw, nkw, &ignored, data) != HD_OK) {
        hd_vunref(vm, l);
        return vm->err;
    }
    *result = l;
    return HD_OK;
}

/* reversed(it): a new list of its items, last first. */
NATIVE(bi_reversed) {
    if (plain(vm, "reversed", nargs, 1, 1, nkw) != HD_OK) return vm->err;
    hd_value l = items_of(vm, args[0], "reversed"), ignored = hd_none();
    if (l.type != HD_V_LIST) return vm->err;
    list_reverse(vm, l, NULL, 0, NULL, 0, &ignored, data);
    *result = l;
    return HD_OK;
}

/* ---- conversions ---- */

/* A number from a one-element tensor, through its item() method. */
static hd_status tensor_item(hd_vm *vm, hd_value t, hd_value *out) {
    hd_value item;
    if (hd_eval_get_member(vm, t, "item", &item) != HD_OK) return vm->err;
    hd_status st = hd_vm_call(vm, item, NULL, 0, NULL, 0, out);
    hd_vunref(vm, item);
    return st;
}

static hd_status float_to_int(hd_vm *vm, double d, hd_value *result) {
    if (isnan(d) || isinf(d))
        return hd_vm_error(vm, HD_ERR_RUNTIME, "cannot convert %s to int",
                           isnan(d) ? "nan" : "inf");
    if (d >= 9223372036854775808.0 || d < -9223372036854775808.0)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "integer overflow");
    *result = hd_int((int64_t)d);
    return HD_OK;
}

/* Digits with optional sign, underscores between digits, 0x/0o/0b prefixes
 * when base is 0, surrounding spaces allowed. */
static int parse_int(const char *s, int base, int64_t *out) {
    while (isspace((unsigned char)*s)) s++;
    char buf[128];
    size_t n = 0;
    for (const char *p = s; *p && !isspace((unsigned char)*p); p++) {
        if (*p == '_') continue;
        if (n + 1 >= sizeof buf) return 0;
        buf[n++] = *p;
    }
    buf[n] = 0;
    const char *rest = s;
    while (*rest && !isspace((unsigned char)*rest)) rest++;
    while (isspace((unsigned char)*rest)) rest++;
    if (*rest || !n) return 0;
    const char *b = buf;
    int neg = 0;
    if (*b == '+' || *b == '-') neg = *b++ == '-';
    if (base == 0) {
        base = 10;
        if (b[0] == '0' && (b[1] == 'x' || b[1] == 'X'))
            base = 16, b += 2;
        else if (b[0] == '0' && (b[1] == 'o' || b[1] == 'O'))
            base = 8, b += 2;
        else if (b[0] == '0' && (b[1] == 'b' || b[1] == 'B'))
            base = 2, b += 2;
    }
    if (!*b || *b == '+' || *b == '-') return 0;
    errno = 0;
    char *end;
    unsigned long long u = strtoull(b, &end, base);
    if (*end || errno) return 0;
    if (neg ? u > 9223372036854775808ULL : u > 9223372036854775807ULL) return 0;
    *out = neg ? (int64_t)(0 - u) : (int64_t)u;
    return 1;
}

NATIVE(bi_int) {
    if (plain(vm, "int", nargs, 1, 2, nkw) != HD_OK) return vm->err;
    hd_value x = args[0];
    if (nargs == 2 && (x.type != HD_V_STR || args[1].type != HD_V_INT))
        return hd_vm_error(vm, HD_ERR_RUNTIME, "int(s, base) takes a string and an int base");
    switch (x.type) {
    case HD_V_INT: *result = x; return HD_OK;
    case HD_V_BOOL: *result = hd_int(x.as.b); return HD_OK;
    case HD_V_FLOAT: return float_to_int(vm, x.as.f, result);
    case HD_V_STR: {
        int64_t v;
        int base = nargs == 2 ? (int)args[1].as.i : 10;
        if (base != 0 && (base < 2 || base > 36))
            return hd_vm_error(vm, HD_ERR_RUNTIME, "int() base must be 0 or 2..36");
        if (!parse_int(hd_as_str(x)->chars, base, &v))
            return hd_vm_error(vm, HD_ERR_RUNTIME, "invalid int: \"%s\"", hd_as_str(x)->chars);
        *result = hd_int(v);
        return HD_OK;
    }
    case HD_V_TENSOR: {
        hd_value n;
        if (tensor_item(vm, x, &n) != HD_OK) return vm->err;
        hd_status st = bi_int(vm, self, &n, 1, NULL, 0, result, data);
        hd_vunref(vm, n);
        return st;
    }
    default:
        return hd_vm_error(vm, HD_ERR_RUNTIME, "cannot convert %s to int", hd_value_type_name(x));
    }
}

static int parse_float(const char *s, double *out) {
    while (isspace((unsigned char)*s)) s++;
    if (!*s) return 0;
    char *end;
    *out = strtod(s, &end);
    if (end == s) return 0;
    while (isspace((unsigned char)*end)) end++;
    return *end == 0;
}

NATIVE(bi_float) {
    if (plain(vm, "float", nargs, 1, 1, nkw) != HD_OK) return vm->err;
    hd_value x = args[0];
    switch (x.type) {
    case HD_V_FLOAT: *result = x; return HD_OK;
    case HD_V_INT: *result = hd_float((double)x.as.i); return HD_OK;
    case HD_V_BOOL: *result = hd_float(x.as.b); return HD_OK;
    case HD_V_STR: {
        double d;
        if (!parse_float(hd_as_str(x)->chars, &d))
            return hd_vm_error(vm, HD_ERR_RUNTIME, "invalid float: \"%s\"", hd_as_str(x)->chars);
        *result = hd_float(d);
        return HD_OK;
    }
    case HD_V_TENSOR: {
        hd_value n;
        if (tensor_item(vm, x, &n) != HD_OK) return vm->err;
        hd_status st = bi_float(vm, self, &n, 1, NULL, 0, result, data);
        hd_vunref(vm, n);
        return st;
    }
    default:
        return hd_vm_error(vm, HD_ERR_RUNTIME, "cannot convert %s to float", hd_value_type_name(x));
    }
}

NATIVE(bi_bool) {
    if (plain(vm, "bool", nargs, 0, 1, nkw) != HD_OK) return vm->err;
    if (!nargs) {
        *result = hd_bool(0);
        return HD_OK;
    }
    int ok, t = hd_eval_truthy(vm, args[0], &ok);
    if (!ok) return vm->err;
    *result = hd_bool(t);
    return HD_OK;
}

/* ---- abs, min, max: numbers and lists here, tensors to the tensor prelude ---- */

/* The prelude function this one replaced (registered before the core), for
 * tensor arguments and named arguments such as axis=. */
static hd_status delegate(hd_vm *vm, const char *fn, hd_value prev, const hd_value *args, int nargs,
                          const hd_kwarg *kw, int nkw, hd_value *result) {
    if (prev.type == HD_V_NONE)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() of a %s is not available", fn,
                           nargs ? hd_value_type_name(args[0]) : "value");
    return hd_vm_call(vm, prev, args, nargs, kw, nkw, result);
}

static int any_tensor(const hd_value *args, int nargs) {
    for (int i = 0; i < nargs; i++)
        if (args[i].type == HD_V_TENSOR) return 1;
    return 0;
}

NATIVE(bi_abs) {
    if (nkw || any_tensor(args, nargs))
        return delegate(vm, "abs", self, args, nargs, kw, nkw, result);
    if (arity(vm, "abs", nargs, 1, 1) != HD_OK) return vm->err;
    hd_value x = args[0];
    if (x.type == HD_V_INT) {
        if (x.as.i == INT64_MIN) return hd_vm_error(vm, HD_ERR_RUNTIME, "integer overflow");
        *result = hd_int(x.as.i < 0 ? -x.as.i : x.as.i);
        return HD_OK;
    }
    if (x.type == HD_V_FLOAT) {
        *result = hd_float(fabs(x.as.f));
        return HD_OK;
    }
    return hd_vm_error(vm, HD_ERR_RUNTIME, "abs() of a value of type %s", hd_value_type_name(x));
}

static hd_status min_max(hd_vm *vm, const char *fn, int sign, hd_value prev, const hd_value *args,
                         int nargs, const hd_kwarg *kw, int nkw, hd_value *result) {
    if (nkw || any_tensor(args, nargs)) return delegate(vm, fn, prev, args, nargs, kw, nkw, result);
    if (nargs == 0) return arity(vm, fn, nargs, 1, 1 << 20);
    const hd_value *items = args;
    int64_t n = nargs;
    if (nargs == 1) {
        if (args[0].type != HD_V_LIST)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() of one argument needs a list, not %s", fn,
                               hd_value_type_name(args[0]));
        items = hd_as_list(args[0])->items;
        n = hd_as_list(args[0])->len;
        if (n == 0) return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() of an empty list", fn);
    }
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++) {
        int ok, c = hd_value_compare(items[i], items[best], &ok);
        if (!ok)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() cannot compare %s and %s", fn,
                               hd_value_type_name(items[i]), hd_value_type_name(items[best]));
        if (c * sign > 0) best = i;
    }
    hd_vref(*result = items[best]);
    return HD_OK;
}

NATIVE(bi_min) {
    return min_max(vm, "min", -1, self, args, nargs, kw, nkw, result);
}
NATIVE(bi_max) {
    return min_max(vm, "max", 1, self, args, nargs, kw, nkw, result);
}

/* ---- program services ---- */

NATIVE(bi_args) {
    if (plain(vm, "args", nargs, 0, 0, nkw) != HD_OK) return vm->err;
    hd_value l = hd_list_new(vm, vm->opts.argc);
    if (l.type != HD_V_LIST) return vm->err;
    for (int i = 0; i < vm->opts.argc; i++) {
        hd_value s = hd_str_from(vm, vm->opts.argv[i] ? vm->opts.argv[i] : "");
        if (s.type != HD_V_STR || hd_list_push(vm, l, s) != HD_OK) {
            hd_vunref(vm, l);
            return vm->err;
        }
    }
    *result = l;
    return HD_OK;
}

NATIVE(bi_clock) {
    if (plain(vm, "clock", nargs, 0, 0, nkw) != HD_OK || hd_compiled_effect(vm, "clock"))
        return vm->err;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *result = hd_float((double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
    return HD_OK;
}

/* assert(cond, msg) and require(cond, msg): an error at the caller's line
 * when cond is false; assert's says "assertion failed: msg", require's is
 * msg alone (a library's argument check reads as an ordinary error). */
static hd_status assert_like(hd_vm *vm, const char *name, const char *prefix, const hd_value *args,
                             int nargs, int nkw) {
    if (plain(vm, name, nargs, 1, 2, nkw) != HD_OK) return vm->err;
    int ok, t = hd_eval_truthy(vm, args[0], &ok);
    if (!ok) return vm->err;
    if (t) return HD_OK;
    if (nargs < 2) return hd_vm_error(vm, HD_ERR_RUNTIME, "%s", "assertion failed");
    hd_value m = hd_value_to_str(vm, args[1]);
    if (m.type != HD_V_STR) return vm->err;
    hd_vm_error(vm, HD_ERR_RUNTIME, "%s%s", prefix, hd_as_str(m)->chars);
    hd_vunref(vm, m);
    return HD_ERR_RUNTIME;
}

NATIVE(bi_assert) {
    return assert_like(vm, "assert", "assertion failed: ", args, nargs, nkw);
}

NATIVE(bi_require) {
    return assert_like(vm, "require", "", args, nargs, nkw);
}

NATIVE(bi_collect) {
    if (plain(vm, "gc", nargs, 0, 0, nkw) != HD_OK) return vm->err;
    size_t freed;
    if (hd_vm_collect(vm, &freed)) return vm->err; /* not "0 freed": it did not run */
    *result = hd_int((int64_t)freed);
    return HD_OK;
}

/* ---- str methods ---- */

static hd_str *S(hd_value v) {
    return hd_as_str(v);
}

static hd_status str_arg(hd_vm *vm, const char *fn, const hd_value *args, int i) {
    return want(vm, fn, args[i], HD_V_STR, "a string");
}

NATIVE(str_upper) {
    if (plain(vm, "upper", nargs, 0, 0, nkw) != HD_OK) return vm->err;
    hd_value r = hd_str_new(vm, S(self)->chars, S(self)->len);
    if (r.type != HD_V_STR) return vm->err;
    /* Strings are immutable once shared; this one is not shared yet. */
    for (size_t i = 0; i < S(r)->len; i++)
        S(r)->chars[i] = (char)toupper((unsigned char)S(r)->chars[i]);
    S(r)->hash = hd_str_hash(S(r)->chars, S(r)->len);
    *result = r;
    return HD_OK;
}

NATIVE(str_lower) {
    if (plain(vm, "lower", nargs, 0, 0, nkw) != HD_OK) return vm->err;
    hd_value r = hd_str_new(vm, S(self)->chars, S(self)->len);
    if (r.type != HD_V_STR) return vm->err;
    for (size_t i = 0; i < S(r)->len; i++)
        S(r)->chars[i] = (char)tolower((unsigned char)S(r)->chars[i]);
    S(r)->hash = hd_str_hash(S(r)->chars, S(r)->len);
    *result = r;
    return HD_OK;
}

static hd_status strip(hd_vm *vm, hd_value self, int left, int right, hd_value *result) {
    const char *s = S(self)->chars;
    size_t a = 0, b = S(self)->len;
    while (left && a < b && isspace((unsigned char)s[a])) a++;
    while (right && b > a && isspace((unsigned char)s[b - 1])) b--;
    return set_str(vm, result, hd_str_new(vm, s + a, b - a));
}

NATIVE(str_strip) {
    if (plain(vm, "strip", nargs, 0, 0, nkw) != HD_OK) return vm->err;
    return strip(vm, self, 1, 1, result);
}
NATIVE(str_lstrip) {
    if (plain(vm, "lstrip", nargs, 0, 0, nkw) != HD_OK) return vm->err;
    return strip(vm, self, 1, 0, result);
}
NATIVE(str_rstrip) {
    if (plain(vm, "rstrip", nargs, 0, 0, nkw) != HD_OK) return vm->err;
    return strip(vm, self, 0, 1, result);
}

/* Byte offset of needle in hay at or after from, or -1. */
static int64_t str_search(const hd_str *hay, const hd_str *needle, size_t from) {
    if (needle->len > hay->len) return -1;
    for (size_t i = from; i + needle->len <= hay->len; i++)
        if (memcmp(hay->chars + i, needle->chars, needle->len) == 0) return (int64_t)i;
    return -1;
}

NATIVE(str_find) {
    if (plain(vm, "find", nargs, 1, 1, nkw) != HD_OK || str_arg(vm, "find", args, 0) != HD_OK)
        return vm->err;
    int64_t at = str_search(S(self), S(args[0]), 0);
    *result = hd_int(at < 0 ? -1 : (int64_t)hd_utf8_count(S(self)->chars, (size_t)at));
    return HD_OK;
}

NATIVE(str_contains) {
    if (plain(vm, "contains", nargs, 1, 1, nkw) != HD_OK ||
        str_arg(vm, "contains", args, 0) != HD_OK)
        return vm->err;
    *result = hd_bool(str_search(S(self), S(args[0]), 0) >= 0);
    return HD_OK;
}

NATIVE(str_count) {
    if (plain(vm, "count", nargs, 1, 1, nkw) != HD_OK || str_arg(vm, "count", args, 0) != HD_OK)
        return vm->err;
    const hd_str *needle = S(args[0]);
    int64_t n = 0, at = 0;
    if (!needle->len) {
        *result = hd_int((int64_t)S(self)->ulen + 1);
        return HD_OK;
    }
    while ((at = str_search(S(self), needle, (size_t)at)) >= 0) {
        n++;
        at += (int64_t)needle->len;
    }
    *result = hd_int(n);
    return HD_OK;
}

static hd_status affix(hd_vm *vm, const char *fn, hd_value self, const hd_value *args, int nargs,
                       int nkw, int at_end, hd_value *result) {
    if (plain(vm, fn, nargs, 1, 1, nkw) != HD_OK || str_arg(vm, fn, args, 0) != HD_OK)
        return vm->err;
    const hd_str *s = S(self), *p = S(args[0]);
    int ok = p->len <= s->len &&
             memcmp(s->chars + (at_end ? s->len - p->len : 0), p->chars, p->len) == 0;
    *result = hd_bool(ok);
    return HD_OK;
}

NATIVE(str_startswith) {
    return affix(vm, "startswith", self, args, nargs, nkw, 0, result);
}
NATIVE(str_endswith) {
    return affix(vm, "endswith", self, args, nargs, nkw, 1, result);
}

NATIVE(str_replace) {
    if (plain(vm, "replace", nargs, 2, 2, nkw) != HD_OK ||
        str_arg(vm, "replace", args, 0) != HD_OK || str_arg(vm, "replace", args, 1) != HD_OK)
        return vm->err;
    const hd_str *s = S(self), *old = S(args[0]), *rep = S(args[1]);
    if (!old->len) return set_str(vm, result, hd_value_ref(self));
    hd_buf b;
    hd_buf_init(&b, vm);
    size_t pos = 0;
    int64_t at;
    while ((at = str_search(s, old, pos)) >= 0) {
        hd_buf_add(&b, s->chars + pos, (size_t)at - pos);
        hd_buf_add(&b, rep->chars, rep->len);
        pos = (size_t)at + old->len;
    }
    hd_buf_add(&b, s->chars + pos, s->len - pos);
    return set_str(vm, result, hd_buf_to_str(&b));
}

static hd_status split_ws(hd_vm *vm, const hd_str *s, hd_value list) {
    size_t i = 0;
    while (i < s->len) {
        while (i < s->len && isspace((unsigned char)s->chars[i])) i++;
        size_t start = i;
        while (i < s->len && !isspace((unsigned char)s->chars[i])) i++;
        if (i > start) {
            hd_value part = hd_str_new(vm, s->chars + start, i - start);
            if (part.type != HD_V_STR || hd_list_push(vm, list, part) != HD_OK) return vm->err;
        }
    }
    return HD_OK;
}

NATIVE(str_split) {
    if (plain(vm, "split", nargs, 0, 1, nkw) != HD_OK) return vm->err;
    if (nargs && args[0].type != HD_V_NONE && str_arg(vm, "split", args, 0) != HD_OK)
        return vm->err;
    hd_value l = hd_list_new(vm, 0);
    if (l.type != HD_V_LIST) return vm->err;
    const hd_str *s = S(self);
    hd_status st = HD_OK;
    if (!nargs || args[0].type == HD_V_NONE) {
        st = split_ws(vm, s, l);
    } else if (!S(args[0])->len) {
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "split() separator is empty");
    } else {
        const hd_str *sep = S(args[0]);
        size_t pos = 0;
        for (;;) {
            int64_t at = str_search(s, sep, pos);
            size_t end = at < 0 ? s->len : (size_t)at;
            hd_value part = hd_str_new(vm, s->chars + pos, end - pos);
            if (part.type != HD_V_STR || (st = hd_list_push(vm, l, part)) != HD_OK) {
                st = vm->err;
                break;
            }
            if (at < 0) break;
            pos = end + sep->len;
        }
    }
    if (st != HD_OK) {
        hd_vunref(vm, l);
        return st;
    }
    *result = l;
    return HD_OK;
}

NATIVE(str_join) {
    if (plain(vm, "join", nargs, 1, 1, nkw) != HD_OK ||
        want(vm, "join", args[0], HD_V_LIST, "a list of strings") != HD_OK)
        return vm->err;
    hd_list *l = hd_as_list(args[0]);
    hd_buf b;
    hd_buf_init(&b, vm);
    for (int64_t i = 0; i < l->len; i++) {
        if (l->items[i].type != HD_V_STR) {
            hd_buf_free(&b);
            return hd_vm_error(vm, HD_ERR_RUNTIME, "join() item %lld is a %s, not a string",
                               (long long)i, hd_value_type_name(l->items[i]));
        }
        if (i) hd_buf_add(&b, S(self)->chars, S(self)->len);
        hd_buf_add(&b, S(l->items[i])->chars, S(l->items[i])->len);
    }
    return set_str(vm, result, hd_buf_to_str(&b));
}

/* "{} and {}".format(a, b), "{0}{1}{0}", "{name}" from named arguments,
 * each with a format spec after ':' ("{:.3f}", format_spec.c); "{{" and
 * "}}" are literal braces. */
NATIVE(str_format) {
    const hd_str *s = S(self);
    hd_buf b;
    hd_buf_init(&b, vm);
    int next = 0;
    for (size_t i = 0; i < s->len; i++) {
        char c = s->chars[i];
        if ((c == '{' || c == '}') && i + 1 < s->len && s->chars[i + 1] == c) {
            hd_buf_add(&b, &c, 1);
            i++;
            continue;
        }
        if (c != '{') {
            hd_buf_add(&b, &c, 1);
            continue;
        }
        const char *close = memchr(s->chars + i, '}', s->len - i);
        if (!close) {
            hd_buf_free(&b);
            return hd_vm_error(vm, HD_ERR_RUNTIME, "format(): unclosed '{'");
        }
        size_t flen = (size_t)(close - (s->chars + i + 1)), slen = 0;
        const char *field = s->chars + i + 1, *spec = memchr(field, ':', flen);
        if (spec) { /* {name:spec} */
            slen = flen - (size_t)(spec - field) - 1;
            flen = (size_t)(spec - field);
            spec++;
        }
        const hd_value *v = NULL;
        if (flen == 0) {
            if (next < nargs) v = &args[next++];
        } else if (isdigit((unsigned char)field[0])) {
            long k = strtol(field, NULL, 10);
            if (k < nargs) v = &args[k];
        } else {
            for (int k = 0; k < nkw; k++)
                if (strlen(kw[k].name) == flen && memcmp(kw[k].name, field, flen) == 0)
                    v = &kw[k].value;
        }
        if (!v) {
            hd_buf_free(&b);
            return hd_vm_error(vm, HD_ERR_RUNTIME, "format(): no argument for {%.*s}",
                               (int)(close - field), field);
        }
        if (hd_format_spec(vm, &b, *v, spec ? spec : "", slen)) {
            hd_buf_free(&b);
            return vm->err;
        }
        i += (size_t)(close - field) + 1;
    }
    return set_str(vm, result, hd_buf_to_str(&b));
}

/* ---- list methods ---- */

static hd_list *L(hd_value v) {
    return hd_as_list(v);
}

NATIVE(list_append) {
    if (plain(vm, "append", nargs, 1, 1, nkw) != HD_OK) return vm->err;
    return hd_list_push(vm, self, hd_value_ref(args[0]));
}

NATIVE(list_extend) {
    if (plain(vm, "extend", nargs, 1, 1, nkw) != HD_OK) return vm->err;
    if (args[0].type == HD_V_LIST && args[0].as.o == self.as.o) {
        hd_value copy = hd_list_new(vm, 0);
        if (copy.type != HD_V_LIST || extend(vm, copy, self, "extend") != HD_OK) {
            hd_vunref(vm, copy);
            return vm->err;
        }
        hd_status st = extend(vm, self, copy, "extend");
        hd_vunref(vm, copy);
        return st;
    }
    return extend(vm, self, args[0], "extend");
}

static hd_status list_pos(hd_vm *vm, const char *fn, hd_value self, hd_value i, int64_t len,
                          int64_t *out) {
    if (want(vm, fn, i, HD_V_INT, "an int index") != HD_OK) return vm->err;
    int64_t j = i.as.i < 0 ? i.as.i + L(self)->len : i.as.i;
    if (j < 0 || j >= len)
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() index %lld out of range (length %lld)", fn,
                           (long long)i.as.i, (long long)L(self)->len);
    *out = j;
    return HD_OK;
}

NATIVE(list_pop) {
    if (plain(vm, "pop", nargs, 0, 1, nkw) != HD_OK) return vm->err;
    hd_list *l = L(self);
    if (!l->len) return hd_vm_error(vm, HD_ERR_RUNTIME, "pop() from an empty list");
    int64_t j = l->len - 1;
    if (nargs && list_pos(vm, "pop", self, args[0], l->len, &j) != HD_OK) return vm->err;
    if (vm->roll_watch) hd_roll_note_container(vm, &l->obj, 0, hd_none(), hd_none());
    *result = l->items[j];
    memmove(l->items + j, l->items + j + 1, (size_t)(l->len - j - 1) * sizeof(hd_value));
    l->len--;
    return HD_OK;
}

NATIVE(list_insert) {
    if (plain(vm, "insert", nargs, 2, 2, nkw) != HD_OK ||
        want(vm, "insert", args[0], HD_V_INT, "an int index") != HD_OK)
        return vm->err;
    hd_list *l = L(self);
    int64_t j = args[0].as.i < 0 ? args[0].as.i + l->len : args[0].as.i;
    if (j < 0) j = 0;
    if (j > l->len) j = l->len;
    return hd_list_insert(vm, l, j, hd_value_ref(args[1]));
}

static int64_t list_find(const hd_list *l, hd_value v) {
    for (int64_t i = 0; i < l->len; i++)
        if (hd_value_equal(l->items[i], v)) return i;
    return -1;
}

NATIVE(list_index) {
    if (plain(vm, "index", nargs, 1, 1, nkw) != HD_OK) return vm->err;
    int64_t i = list_find(L(self), args[0]);
    if (i < 0) {
        hd_value r = hd_value_repr(vm, args[0]);
        hd_vm_error(vm, HD_ERR_RUNTIME, "index(): %s is not in the list",
                    r.type == HD_V_STR ? S(r)->chars : "value");
        hd_vunref(vm, r);
        return HD_ERR_RUNTIME;
    }
    *result = hd_int(i);
    return HD_OK;
}

NATIVE(list_contains) {
    if (plain(vm, "contains", nargs, 1, 1, nkw) != HD_OK) return vm->err;
    *result = hd_bool(list_find(L(self), args[0]) >= 0);
    return HD_OK;
}

NATIVE(list_count) {
    if (plain(vm, "count", nargs, 1, 1, nkw) != HD_OK) return vm->err;
    int64_t n = 0;
    for (int64_t i = 0; i < L(self)->len; i++) n += hd_value_equal(L(self)->items[i], args[0]);
    *result = hd_int(n);
    return HD_OK;
}

NATIVE(list_remove) {
    if (plain(vm, "remove", nargs, 1, 1, nkw) != HD_OK) return vm->err;
    hd_list *l = L(self);
    int64_t i = list_find(l, args[0]);
    if (i < 0) return hd_vm_error(vm, HD_ERR_RUNTIME, "remove(): value not in the list");
    if (vm->roll_watch) hd_roll_note_container(vm, &l->obj, 0, hd_none(), hd_none());
    hd_value old = l->items[i];
    memmove(l->items + i, l->items + i + 1, (size_t)(l->len - i - 1) * sizeof(hd_value));
    l->len--;
    hd_vunref(vm, old);
    return HD_OK;
}

NATIVE(list_reverse) {
    if (plain(vm, "reverse", nargs, 0, 0, nkw) != HD_OK) return vm->err;
    hd_list *l = L(self);
    if (vm->roll_watch) hd_roll_note_container(vm, &l->obj, 0, hd_none(), hd_none());
    for (int64_t i = 0, j = l->len - 1; i < j; i++, j--) {
        hd_value t = l->items[i];
        l->items[i] = l->items[j];
        l->items[j] = t;
    }
    return HD_OK;
}

NATIVE(list_copy) {
    if (plain(vm, "copy", nargs, 0, 0, nkw) != HD_OK) return vm->err;
    hd_value l = hd_list_new(vm, L(self)->len);
    if (l.type != HD_V_LIST || extend(vm, l, self, "copy") != HD_OK) {
        hd_vunref(vm, l);
        return vm->err;
    }
    *result = l;
    return HD_OK;
}

NATIVE(list_clear) {
    if (plain(vm, "clear", nargs, 0, 0, nkw) != HD_OK) return vm->err;
    hd_list *l = L(self);
    while (l->len) hd_vunref(vm, l->items[--l->len]);
    return HD_OK;
}

/* Stable merge sort of (key, value) pairs; comparisons can fail. */
typedef struct {
    hd_value key, val;
} sort_item;

static int sort_merge(hd_vm *vm, sort_item *a, sort_item *tmp, int64_t n, int desc) {
    if (n < 2) return 1;
    int64_t h = n / 2;
    if (!sort_merge(vm, a, tmp, h, desc) || !sort_merge(vm, a + h, tmp, n - h, desc)) return 0;
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int ok, c = hd_value_compare(a[j].key, a[i].key, &ok);
        if (!ok) {
            hd_vm_error(vm, HD_ERR_RUNTIME, "sort() cannot compare %s and %s",
                        hd_value_type_name(a[j].key), hd_value_type_name(a[i].key));
            return 0;
        }
        tmp[k++] = (desc ? c > 0 : c < 0) ? a[j++] : a[i++];
    }
    while (i < h) tmp[k++] = a[i++];
    while (j < n) tmp[k++] = a[j++];
    memcpy(a, tmp, (size_t)n * sizeof *a);
    return 1;
}

static int sort_same(hd_value a, hd_value b) {
    if (a.type != b.type) return 0;
    return hd_value_is_obj(a) ? a.as.o == b.as.o : hd_value_equal(a, b);
}

NATIVE(list_sort) {
    static const char *const allowed[] = {"key", "reverse", NULL};
    if (arity(vm, "sort", nargs, 0, 0) != HD_OK || only_kw(vm, "sort", kw, nkw, allowed) != HD_OK)
        return vm->err;
    const hd_value *key = kwarg(kw, nkw, "key"), *rev = kwarg(kw, nkw, "reverse");
    int ok = 1; /* a tensor's truth reads its value: on a device, through a copy */
    int desc = rev && hd_eval_truthy(vm, *rev, &ok);
    if (!ok) return vm->err;
    if (key && key->type == HD_V_NONE) key = NULL;
    hd_list *l = L(self);
    int64_t n = l->len;
    sort_item *items = hd_ctx_calloc(&vm->ctx, (size_t)(2 * n + 1), sizeof(sort_item));
    if (!items) return hd_vm_oom(vm);
    hd_status st = HD_OK;
    int64_t made = 0;
    for (; made < n && st == HD_OK; made++) {
        hd_vref(items[made].val = l->items[made]);
        if (key)
            st = hd_vm_call(vm, *key, &items[made].val, 1, NULL, 0, &items[made].key);
        else
            hd_vref(items[made].key = items[made].val);
        if (st != HD_OK) items[made].key = hd_none();
    }
    if (st == HD_OK && l->len != n)
        st = hd_vm_error(vm, HD_ERR_RUNTIME, "list changed size during sort()");
    /* a key function that rewrote the list in place: its writes would be
     * lost under the sorted items (Python: "list modified during sort") */
    for (int64_t i = 0; st == HD_OK && i < n; i++)
        if (!sort_same(l->items[i], items[i].val))
            st = hd_vm_error(vm, HD_ERR_RUNTIME,
                             "list modified during sort() (by its key function)");
    if (st == HD_OK && !sort_merge(vm, items, items + n, n, desc)) st = vm->err;
    if (st == HD_OK && vm->roll_watch) hd_roll_note_container(vm, &l->obj, 0, hd_none(), hd_none());
    if (st == HD_OK)
        for (int64_t i = 0; i < n; i++) {
            hd_value old = l->items[i];
            hd_vref(l->items[i] = items[i].val);
            hd_vunref(vm, old);
        }
    for (int64_t i = 0; i < made; i++) {
        hd_vunref(vm, items[i].key);
        hd_vunref(vm, items[i].val);
    }
    hd_ctx_free(&vm->ctx, items, (size_t)(2 * n + 1) * sizeof(sort_item));
    return st;
}

/* ---- dict methods ---- */

static hd_status dict_list(hd_vm *vm, hd_value self, int what, hd_value *result) {
    hd_dict *d = hd_as_dict(self);
    hd_value l = hd_list_new(vm, d->len);
    if (l.type != HD_V_LIST) return vm->err;
    for (int64_t i = 0; i < d->len; i++) {
        hd_value k = hd_obj_value(&d->keys[i]->obj), item;
        if (what == 0) {
            hd_vref(item = k);
        } else if (what == 1) {
            hd_vref(item = d->vals[i]);
        } else {
            item = hd_list_new(vm, 2);
            if (item.type != HD_V_LIST) {
                hd_vunref(vm, l);
                return vm->err;
            }
            hd_list_push(vm, item, hd_value_ref(k));
            hd_list_push(vm, item, hd_value_ref(d->vals[i]));
        }
        L(l)->items[L(l)->len++] = item;
    }
    *result = l;
    return HD_OK;
}

NATIVE(dict_keys) {
    if (plain(vm, "keys", nargs, 0, 0, nkw) != HD_OK) return vm->err;
    return dict_list(vm, self, 0, result);
}
NATIVE(dict_values) {
    if (plain(vm, "values", nargs, 0, 0, nkw) != HD_OK) return vm->err;
    return dict_list(vm, self, 1, result);
}
NATIVE(dict_items) {
    if (plain(vm, "items", nargs, 0, 0, nkw) != HD_OK) return vm->err;
    return dict_list(vm, self, 2, result);
}

NATIVE(dict_get) {
    if (plain(vm, "get", nargs, 1, 2, nkw) != HD_OK || str_arg(vm, "get", args, 0) != HD_OK)
        return vm->err;
    hd_value *v = hd_dict_get_str(self, S(args[0]));
    hd_vref(*result = v ? *v : nargs == 2 ? args[1] : hd_none());
    return HD_OK;
}

NATIVE(dict_has) {
    if (plain(vm, "has", nargs, 1, 1, nkw) != HD_OK || str_arg(vm, "has", args, 0) != HD_OK)
        return vm->err;
    *result = hd_bool(hd_dict_get_str(self, S(args[0])) != NULL);
    return HD_OK;
}

NATIVE(dict_pop) {
    if (plain(vm, "pop", nargs, 1, 2, nkw) != HD_OK || str_arg(vm, "pop", args, 0) != HD_OK)
        return vm->err;
    if (hd_dict_remove(vm, self, S(args[0])->chars, S(args[0])->len, result)) return HD_OK;
    if (nargs == 2) {
        hd_vref(*result = args[1]);
        return HD_OK;
    }
    return hd_vm_error(vm, HD_ERR_RUNTIME, "key \"%s\" not found in dict", S(args[0])->chars);
}

NATIVE(dict_copy) {
    if (plain(vm, "copy", nargs, 0, 0, nkw) != HD_OK) return vm->err;
    hd_value d = hd_dict_new(vm);
    if (d.type != HD_V_DICT) return vm->err;
    hd_dict *src = hd_as_dict(self);
    for (int64_t i = 0; i < src->len; i++)
        if (hd_dict_set_str(vm, d, src->keys[i], hd_value_ref(src->vals[i])) != HD_OK) {
            hd_vunref(vm, d);
            return vm->err;
        }
    *result = d;
    return HD_OK;
}

NATIVE(dict_update) {
    if (plain(vm, "update", nargs, 1, 1, nkw) != HD_OK ||
        want(vm, "update", args[0], HD_V_DICT, "a dict") != HD_OK)
        return vm->err;
    hd_dict *src = hd_as_dict(args[0]);
    for (int64_t i = 0; i < src->len; i++)
        if (hd_dict_set_str(vm, self, src->keys[i], hd_value_ref(src->vals[i])) != HD_OK)
            return vm->err;
    return HD_OK;
}

NATIVE(dict_clear) {
    if (plain(vm, "clear", nargs, 0, 0, nkw) != HD_OK) return vm->err;
    hd_dict_empty(vm, hd_as_dict(self));
    return HD_OK;
}

/* ---- objects: parameters() ---- */

typedef struct {
    hd_vm *vm;
    hd_value out;  /* list of tensors */
    hd_value seen; /* list of visited containers (identity) */
    int depth;
} param_walk;

static int seen_before(param_walk *w, hd_value v) {
    hd_list *s = L(w->seen);
    for (int64_t i = 0; i < s->len; i++)
        if (s->items[i].as.o == v.as.o && s->items[i].type == v.type) return 1;
    return 0;
}

static hd_status walk_params(param_walk *w, hd_value v);

static hd_status walk_tensor(param_walk *w, hd_value v) {
    hd_value rg;
    hd_vm *vm = w->vm;
    if (hd_eval_get_member(vm, v, "requires_grad", &rg) != HD_OK) return vm->err;
    int wants = hd_value_truthy(rg);
    hd_vunref(vm, rg);
    if (!wants) return HD_OK;
    hd_list *o = L(w->out);
    for (int64_t i = 0; i < o->len; i++)
        if (o->items[i].as.t == v.as.t) return HD_OK;
    return hd_list_push(vm, w->out, hd_value_ref(v));
}

static hd_status walk_params(param_walk *w, hd_value v) {
    if (v.type == HD_V_TENSOR) return walk_tensor(w, v);
    if (v.type != HD_V_LIST && v.type != HD_V_DICT && v.type != HD_V_OBJECT) return HD_OK;
    if (seen_before(w, v)) return HD_OK;
    if (++w->depth > 200)
        return hd_vm_error(w->vm, HD_ERR_RUNTIME, "parameters(): nested too deeply");
    if (hd_list_push(w->vm, w->seen, hd_value_ref(v)) != HD_OK) return w->vm->err;
    hd_status st = HD_OK;
    if (v.type == HD_V_LIST) {
        for (int64_t i = 0; i < L(v)->len && st == HD_OK; i++) st = walk_params(w, L(v)->items[i]);
    } else {
        hd_value d = v.type == HD_V_DICT ? v : ((hd_object *)v.as.o)->fields;
        for (int64_t i = 0; i < hd_as_dict(d)->len && st == HD_OK; i++)
            st = walk_params(w, hd_as_dict(d)->vals[i]);
    }
    w->depth--;
    return st;
}

NATIVE(obj_parameters) {
    if (plain(vm, "parameters", nargs, 0, 0, nkw) != HD_OK) return vm->err;
    param_walk w = {vm, hd_list_new(vm, 0), hd_list_new(vm, 0), 0};
    hd_status st =
        w.out.type == HD_V_LIST && w.seen.type == HD_V_LIST ? walk_params(&w, self) : vm->err;
    hd_vunref(vm, w.seen);
    if (st != HD_OK) {
        hd_vunref(vm, w.out);
        return st;
    }
    *result = w.out;
    return HD_OK;
}

/* ---- registration ---- */

typedef struct {
    const char *name;
    hd_native_fn fn;
} native_entry;

static const native_entry hd_core_functions[] = {
    {"print", bi_print},         {"str", bi_str},         {"repr", bi_repr},
    {"type", bi_type},           {"len", bi_len},         {"range", bi_range},
    {"list", bi_list},           {"int", bi_int},         {"float", bi_float},
    {"bool", bi_bool},           {"args", bi_args},       {"clock", bi_clock},
    {"assert", bi_assert},       {"require", bi_require}, {"gc", bi_collect},
    {"enumerate", bi_enumerate}, {"zip", bi_zip},         {"sorted", bi_sorted},
    {"reversed", bi_reversed},
};

/* Names the tensor prelude may also define: the core version handles
 * numbers and lists and passes tensors and named arguments to it. */
static const native_entry hd_core_shared[] = {
    {"abs", bi_abs},
    {"min", bi_min},
    {"max", bi_max},
};

static const native_entry hd_str_methods[] = {
    {"upper", str_upper},       {"lower", str_lower},     {"strip", str_strip},
    {"lstrip", str_lstrip},     {"rstrip", str_rstrip},   {"find", str_find},
    {"contains", str_contains}, {"count", str_count},     {"startswith", str_startswith},
    {"endswith", str_endswith}, {"replace", str_replace}, {"split", str_split},
    {"join", str_join},         {"format", str_format},
};

static const native_entry hd_list_methods[] = {
    {"append", list_append}, {"extend", list_extend}, {"pop", list_pop},
    {"insert", list_insert}, {"index", list_index},   {"contains", list_contains},
    {"count", list_count},   {"remove", list_remove}, {"reverse", list_reverse},
    {"sort", list_sort},     {"copy", list_copy},     {"clear", list_clear},
};

static const native_entry hd_dict_methods[] = {
    {"keys", dict_keys}, {"values", dict_values}, {"items", dict_items},
    {"get", dict_get},   {"has", dict_has},       {"pop", dict_pop},
    {"copy", dict_copy}, {"update", dict_update}, {"clear", dict_clear},
};

static hd_status def_methods(hd_vm *vm, hd_vtype t, const native_entry *e, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (hd_vm_def_method(vm, t, e[i].name, e[i].fn) != HD_OK) return vm->err;
    return HD_OK;
}

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

hd_status hd_builtins_core_open(hd_vm *vm) {
    for (size_t i = 0; i < COUNT(hd_core_functions); i++)
        if (hd_vm_def_native(vm, hd_core_functions[i].name, hd_core_functions[i].fn, NULL) != HD_OK)
            return vm->err;
    for (size_t i = 0; i < COUNT(hd_core_shared); i++) {
        /* The earlier definition rides as the native's bound receiver, so
         * calls see it as `self` and the collector sees the reference. */
        hd_value *idx = hd_dict_get(vm->builtin_index, hd_core_shared[i].name);
        hd_value fn = hd_native_new(vm, hd_core_shared[i].name, hd_core_shared[i].fn, NULL);
        if (fn.type != HD_V_NATIVE) return vm->err;
        if (idx) ((hd_native *)fn.as.o)->self = hd_value_ref(vm->builtins[idx->as.i]);
        if (hd_vm_def_value(vm, hd_core_shared[i].name, fn) != HD_OK) return vm->err;
    }
    if (def_methods(vm, HD_V_STR, hd_str_methods, COUNT(hd_str_methods)) != HD_OK ||
        def_methods(vm, HD_V_LIST, hd_list_methods, COUNT(hd_list_methods)) != HD_OK ||
        def_methods(vm, HD_V_DICT, hd_dict_methods, COUNT(hd_dict_methods)) != HD_OK ||
        hd_vm_def_method(vm, HD_V_OBJECT, "parameters", obj_parameters) != HD_OK)
        return vm->err;
    return HD_OK;
}
