/* The evaluator's operators on values (see eval.h): ints (overflow is an
 * error), floats, strings and lists (+ and *), and tensors,
 * whose operators go to the tensor builtins. */
#include "eval.h"
#include "compiled.h"
#include "tensor_api.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static hd_value type_error(hd_vm *vm, int op, hd_value a, hd_value b) {
    hd_vm_error(vm, HD_ERR_RUNTIME, "unsupported operand types for %s: %s and %s",
                hd_eval_op_name(op), hd_value_type_name(a), hd_value_type_name(b));
    return hd_err_value();
}

static hd_value overflow(hd_vm *vm) {
    hd_vm_error(vm, HD_ERR_RUNTIME, "integer overflow");
    return hd_err_value();
}

static hd_value int_pow(hd_vm *vm, int64_t base, int64_t e) {
    if (e < 0) return hd_float(pow((double)base, (double)e));
    int64_t r = 1;
    while (e) {
        if ((e & 1) && __builtin_mul_overflow(r, base, &r)) return overflow(vm);
        e >>= 1;
        if (e && __builtin_mul_overflow(base, base, &base)) return overflow(vm);
    }
    return hd_int(r);
}

/* x / 0, x // 0, x % 0: the error names the operation and its operands. */
static hd_value zero_divisor(hd_vm *vm, int op, hd_value a, hd_value b) {
    char x[40], y[40];
    hd_value v[2] = {a, b};
    char *s[2] = {x, y};
    for (int i = 0; i < 2; i++)
        if (v[i].type == HD_V_INT)
            snprintf(s[i], 40, "%lld", (long long)v[i].as.i);
        else
            snprintf(s[i], 40, "%.17g", v[i].as.f);
    const char *what = op == HD_TOK_SLASH      ? "division by zero"
                       : op == HD_TOK_FLOORDIV ? "floor division by zero"
                                               : "modulo by zero";
    int ints = a.type == HD_V_INT && b.type == HD_V_INT && op != HD_TOK_SLASH;
    hd_vm_error(vm, HD_ERR_RUNTIME, "%s%s: %s %s %s", ints ? "integer " : "", what, x,
                hd_eval_op_name(op), y);
    return hd_err_value();
}

static hd_value int_binop(hd_vm *vm, int op, int64_t x, int64_t y) {
    int64_t r;
    switch (op) {
    case HD_TOK_PLUS:
        if (__builtin_add_overflow(x, y, &r)) return overflow(vm);
        return hd_int(r);
    case HD_TOK_MINUS:
        if (__builtin_sub_overflow(x, y, &r)) return overflow(vm);
        return hd_int(r);
    case HD_TOK_STAR:
        if (__builtin_mul_overflow(x, y, &r)) return overflow(vm);
        return hd_int(r);
    case HD_TOK_SLASH:
        if (y == 0) break;
        return hd_float((double)x / (double)y);
    case HD_TOK_PERCENT:
        if (y == 0) break;
        if (y == -1) return hd_int(0); /* INT64_MIN % -1 traps in C */
        r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return hd_int(r);
    case HD_TOK_FLOORDIV: /* rounds toward -infinity, as Python */
        if (y == 0) break;
        if (y == -1) return x == INT64_MIN ? overflow(vm) : hd_int(-x);
        r = x / y;
        if (x % y != 0 && ((x < 0) != (y < 0))) r -= 1;
        return hd_int(r);
    case HD_TOK_POW: return int_pow(vm, x, y);
    case HD_TOK_EQ: return hd_bool(x == y);
    case HD_TOK_NE: return hd_bool(x != y);
    case HD_TOK_LT: return hd_bool(x < y);
    case HD_TOK_LE: return hd_bool(x <= y);
    case HD_TOK_GT: return hd_bool(x > y);
    case HD_TOK_GE: return hd_bool(x >= y);
    case HD_TOK_RANGE: {
        hd_value r = hd_range_new(vm, x, y, 1);
        return r.type == HD_V_RANGE ? r : hd_err_value();
    }
    default: return type_error(vm, op, hd_int(x), hd_int(y));
    }
    return zero_divisor(vm, op, hd_int(x), hd_int(y));
}

static hd_value float_binop(hd_vm *vm, int op, hd_value a, hd_value b) {
    double x = a.type == HD_V_INT ? (double)a.as.i : a.as.f;
    double y = b.type == HD_V_INT ? (double)b.as.i : b.as.f;
    switch (op) {
    case HD_TOK_PLUS: return hd_float(x + y);
    case HD_TOK_MINUS: return hd_float(x - y);
    case HD_TOK_STAR: return hd_float(x * y);
    case HD_TOK_SLASH:
        if (y == 0) break;
        return hd_float(x / y);
    case HD_TOK_PERCENT: {
        if (y == 0) break;
        double r = fmod(x, y);
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return hd_float(r);
    }
    case HD_TOK_FLOORDIV: {
        if (y == 0) break;
        /* Python's float floor division: from fmod, exact where it can be */
        double m = fmod(x, y), d = (x - m) / y;
        if (m != 0 && ((y < 0) != (m < 0))) d -= 1.0;
        double fd = floor(d);
        if (d - fd > 0.5) fd += 1.0;
        return hd_float(d == 0 ? copysign(0.0, x / y) : fd);
    }
    case HD_TOK_POW: return hd_float(pow(x, y));
    case HD_TOK_EQ: return hd_bool(x == y);
    case HD_TOK_NE: return hd_bool(x != y);
    case HD_TOK_LT: return hd_bool(x < y);
    case HD_TOK_LE: return hd_bool(x <= y);
    case HD_TOK_GT: return hd_bool(x > y);
    case HD_TOK_GE: return hd_bool(x >= y);
    default: return type_error(vm, op, a, b);
    }
    return zero_divisor(vm, op, a, b);
}

static hd_value repeat(hd_vm *vm, hd_value seq, int64_t times) {
    if (times < 0) times = 0;
    if (seq.type == HD_V_STR) {
        hd_str *s = hd_as_str(seq);
        if (s->len && (uint64_t)times > ((uint64_t)1 << 40) / s->len)
            return hd_vm_error(vm, HD_ERR_MEMORY, "string too large"), hd_err_value();
        hd_buf b;
        hd_buf_init(&b, vm);
        if (times > 0 && s->len) {
            /* the whole size at once, then copies of what is there (a
             * billion small appends took 40 s), a slice at a time so that an
             * interrupt stops it */
            size_t total = s->len * (size_t)times, piece = (size_t)1 << 24;
            b.p = hd_ctx_alloc(&vm->ctx, total + 1);
            if (!b.p) return hd_vm_oom(vm), hd_err_value();
            b.cap = total + 1;
            memcpy(b.p, s->chars, s->len);
            b.len = s->len;
            while (b.len < total) {
                if (hd_ctx_interrupted(&vm->ctx)) {
                    hd_buf_free(&b);
                    return hd_vm_stop_error(vm), hd_err_value();
                }
                size_t n = HD_MIN(HD_MIN(b.len, total - b.len), piece);
                memcpy(b.p + b.len, b.p, n);
                b.len += n;
            }
            b.p[b.len] = 0;
        }
        hd_value r = hd_buf_to_str(&b);
        return r.type == HD_V_STR ? r : hd_err_value();
    }
    hd_list *l = hd_as_list(seq);
    if (l->len && (uint64_t)times > ((uint64_t)1 << 32) / (uint64_t)l->len)
        return hd_vm_error(vm, HD_ERR_MEMORY, "list too large"), hd_err_value();
    hd_value out = hd_list_new(vm, l->len * times);
    if (out.type != HD_V_LIST) return hd_err_value();
    hd_list *o = hd_as_list(out);
    int64_t n = l->len;
    for (int64_t t = 0; t < times; t++) {
        if (!(t % 1024) && hd_ctx_interrupted(&vm->ctx)) {
            hd_vunref(vm, out);
            return hd_vm_stop_error(vm), hd_err_value();
        }
        for (int64_t i = 0; i < n; i++) {
            hd_vref(l->items[i]);
            o->items[o->len++] = l->items[i];
        }
    }
    return out;
}

static hd_value concat(hd_vm *vm, hd_value a, hd_value b) {
    if (a.type == HD_V_STR) {
        hd_str *x = hd_as_str(a), *y = hd_as_str(b);
        hd_value r;
        hd_buf buf;
        hd_buf_init(&buf, vm);
        hd_buf_add(&buf, x->chars, x->len);
        hd_buf_add(&buf, y->chars, y->len);
        r = hd_buf_to_str(&buf);
        return r.type == HD_V_STR ? r : hd_err_value();
    }
    hd_list *x = hd_as_list(a), *y = hd_as_list(b);
    hd_value out = hd_list_new(vm, x->len + y->len);
    if (out.type != HD_V_LIST) return hd_err_value();
    hd_list *o = hd_as_list(out);
    for (int64_t i = 0; i < x->len; i++) hd_vref(o->items[o->len++] = x->items[i]);
    for (int64_t i = 0; i < y->len; i++) hd_vref(o->items[o->len++] = y->items[i]);
    return out;
}

static int is_num(hd_value v) {
    return v.type == HD_V_INT || v.type == HD_V_FLOAT;
}
static int tensor_operand(hd_value v) {
    return v.type == HD_V_TENSOR || is_num(v) || v.type == HD_V_BOOL;
}

/* x in c: an element of a list (==), a key of a dict, a substring of a
 * string, a value of a range, an element of a tensor (its data is read). */
static hd_value member_of(hd_vm *vm, hd_value x, hd_value c) {
    switch (c.type) {
    case HD_V_LIST: {
        hd_list *l = hd_as_list(c);
        for (int64_t i = 0; i < l->len; i++)
            if (hd_value_equal(l->items[i], x)) return hd_bool(1);
        return hd_bool(0);
    }
    case HD_V_DICT:
        if (x.type != HD_V_STR) return hd_bool(0); /* keys are strings */
        return hd_bool(hd_dict_getn(c, hd_as_str(x)->chars, hd_as_str(x)->len) != NULL);
    case HD_V_STR: {
        if (x.type != HD_V_STR) break;
        hd_str *s = hd_as_str(c), *n = hd_as_str(x);
        if (n->len == 0) return hd_bool(1);
        for (size_t i = 0; i + n->len <= s->len; i++)
            if (!memcmp(s->chars + i, n->chars, n->len)) return hd_bool(1);
        return hd_bool(0);
    }
    case HD_V_RANGE: {
        const hd_range *r = (const hd_range *)c.as.o;
        if (x.type != HD_V_INT)
            return hd_bool(x.type == HD_V_FLOAT && x.as.f == floor(x.as.f) &&
                           member_of(vm, hd_int((int64_t)x.as.f), c).as.b);
        int64_t v = x.as.i;
        int in = r->step > 0 ? v >= r->start && v < r->stop : v <= r->start && v > r->stop;
        return hd_bool(in && (v - r->start) % r->step == 0);
    }
    case HD_V_TENSOR: { /* (c == x).any(), read as a bool */
        hd_value eq = hd_eval_binop(vm, HD_TOK_EQ, c, x), any = hd_none();
        if (eq.type != HD_V_TENSOR) return eq; /* an error, or t == none: false */
        hd_status st = hd_tensor_any_value(vm, eq.as.t, &any);
        hd_vunref(vm, eq);
        if (st) return hd_err_value();
        int ok, t = hd_eval_truthy(vm, any, &ok);
        hd_vunref(vm, any);
        return ok ? hd_bool(t) : hd_err_value();
    }
    default: break;
    }
    hd_vm_error(vm, HD_ERR_RUNTIME,
                "'in' needs a list, dict, string, range or tensor on its "
                "right, not %s (with %s on its left)",
                hd_value_type_name(c), hd_value_type_name(x));
    return hd_err_value();
}

hd_value hd_eval_binop(hd_vm *vm, int op, hd_value a, hd_value b) {
    if (op == HD_TOK_IN || op == HD_TOK_NOT_IN) {
        hd_value r = member_of(vm, a, b);
        if (r.type == HD_V_BOOL && op == HD_TOK_NOT_IN) r.as.b = !r.as.b;
        return r;
    }
    if (a.type == HD_V_INT && b.type == HD_V_INT) return int_binop(vm, op, a.as.i, b.as.i);
    if (a.type == HD_V_TENSOR || b.type == HD_V_TENSOR) {
        if (tensor_operand(a) && tensor_operand(b) && op != HD_TOK_RANGE) {
            hd_value out;
            if (hd_tensor_binop(vm, op, a, b, &out) != HD_OK) {
                if (!hd_vm_failed(vm)) hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
                return hd_err_value();
            }
            return out;
        }
        if (op == HD_TOK_EQ || op == HD_TOK_NE)
            return hd_bool((a.type == b.type && a.as.t == b.as.t) == (op == HD_TOK_EQ));
        return type_error(vm, op, a, b);
    }
    if (is_num(a) && is_num(b) && op != HD_TOK_RANGE && op != HD_TOK_AT)
        return float_binop(vm, op, a, b);
    switch (op) {
    case HD_TOK_EQ: return hd_bool(hd_value_equal(a, b));
    case HD_TOK_NE: return hd_bool(!hd_value_equal(a, b));
    case HD_TOK_PLUS:
        if ((a.type == HD_V_STR || a.type == HD_V_LIST) && a.type == b.type)
            return concat(vm, a, b);
        break;
    case HD_TOK_STAR:
        if ((a.type == HD_V_STR || a.type == HD_V_LIST) && b.type == HD_V_INT)
            return repeat(vm, a, b.as.i);
        if ((b.type == HD_V_STR || b.type == HD_V_LIST) && a.type == HD_V_INT)
            return repeat(vm, b, a.as.i);
        break;
    case HD_TOK_LT:
    case HD_TOK_LE:
    case HD_TOK_GT:
    case HD_TOK_GE: {
        int ok, c = hd_value_compare(a, b, &ok);
        if (!ok) break;
        return hd_bool(op == HD_TOK_LT   ? c < 0
                       : op == HD_TOK_LE ? c <= 0
                       : op == HD_TOK_GT ? c > 0
                                         : c >= 0);
    }
    default: break;
    }
    return type_error(vm, op, a, b);
}

hd_value hd_eval_unop(hd_vm *vm, int op, hd_value x) {
    if (op == HD_TOK_NOT && x.type != HD_V_TENSOR) {
        int ok, t = hd_eval_truthy(vm, x, &ok);
        return ok ? hd_bool(!t) : hd_err_value();
    }
    switch (x.type) {
    case HD_V_INT:
        if (op == HD_TOK_PLUS) return x;
        if (x.as.i == INT64_MIN) return overflow(vm);
        return hd_int(-x.as.i);
    case HD_V_FLOAT: return op == HD_TOK_PLUS ? x : hd_float(-x.as.f);
    case HD_V_TENSOR: {
        hd_value out;
        if (hd_tensor_unop(vm, op, x, &out) != HD_OK) {
            if (!hd_vm_failed(vm)) hd_vm_from_ctx(vm, HD_ERR_RUNTIME);
            return hd_err_value();
        }
        return out;
    }
    default:
        hd_vm_error(vm, HD_ERR_RUNTIME, "unsupported operand type for unary %s: %s",
                    hd_eval_op_name(op), hd_value_type_name(x));
        return hd_err_value();
    }
}
