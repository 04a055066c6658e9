/* The format-spec mini-language of str.format's fields, "{:SPEC}", as
 * Python's: [[fill]align][sign][#][0][width][,|_][.precision][type].
 *
 *   ints     d (default), b, o, x, X (with # a 0b/0o/0x prefix), and the
 *            float types on their value
 *   floats   f F e E g G % (precision 6 by default); no type: str() without
 *            a precision, else g that keeps one digit after the point
 *   strings  s (default); a precision cuts to that many code points
 *   tensors  of one element format as their value (as torch's
 *            Tensor.__format__), others only with an empty spec
 *   bools, none and the rest: s or no type, as str()
 *
 * Width and precision count code points (a precision is at most 100); numbers align right by
 * default, the rest left. */
#include "builtins_tensor.h"
#include "vm_internal.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct fmt_spec {
    char fill, align, sign, type, group;
    int alt, zero, has_fill;
    int64_t width, prec; /* -1: not given */
} fmt_spec;

static hd_status fmt_error(hd_vm *vm, const char *spec, size_t len, const char *why) {
    return hd_vm_error(vm, HD_ERR_RUNTIME, "format(): bad format spec '%.*s': %s", (int)len, spec,
                       why);
}

static int fmt_is_align(char c) {
    return c == '<' || c == '>' || c == '=' || c == '^';
}

/* Digits at *i as a count (at most 10000). -1 when there are none. */
static int64_t fmt_count(const char *s, size_t len, size_t *i) {
    int64_t v = -1;
    while (*i < len && isdigit((unsigned char)s[*i])) {
        v = (v < 0 ? 0 : v) * 10 + (s[(*i)++] - '0');
        if (v > 10000) return -2;
    }
    return v;
}

static hd_status fmt_parse(hd_vm *vm, const char *s, size_t len, fmt_spec *f) {
    memset(f, 0, sizeof *f);
    f->fill = ' ';
    f->width = f->prec = -1;
    size_t i = 0;
    if (len >= 2 && fmt_is_align(s[1]) && (unsigned char)s[0] < 0x80) {
        f->fill = s[0];
        f->has_fill = 1;
        f->align = s[1];
        i = 2;
    } else if (len >= 1 && fmt_is_align(s[0])) {
        f->align = s[i++];
    }
    if (i < len && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) f->sign = s[i++];
    if (i < len && s[i] == '#') f->alt = 1, i++;
    if (i < len && s[i] == '0') f->zero = 1, i++;
    f->width = fmt_count(s, len, &i);
    if (i < len && (s[i] == ',' || s[i] == '_')) f->group = s[i++];
    if (i < len && s[i] == '.') {
        i++;
        if ((f->prec = fmt_count(s, len, &i)) < 0)
            return fmt_error(vm, s, len, "no precision after '.'");
        if (f->prec > 100) /* keeps every number's text inside fmt_float's buffers */
            return fmt_error(vm, s, len, "precision over 100");
    }
    if (f->width < -1 || f->prec < -1)
        return fmt_error(vm, s, len, "width or precision over 10000");
    if (i < len) f->type = s[i++];
    if (i < len) return fmt_error(vm, s, len, "unexpected text after the type");
    if (f->zero && !f->has_fill) f->fill = '0';
    return HD_OK;
}

static size_t fmt_codepoints(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

/* Bytes of the first n code points of s. */
static size_t fmt_prefix(const char *s, size_t len, int64_t n) {
    size_t i = 0;
    for (int64_t k = 0; i < len && k < n; k++) do
            i++;
        while (i < len && ((unsigned char)s[i] & 0xC0) == 0x80);
    return i;
}

static void fmt_fill(hd_buf *b, char c, int64_t n) {
    for (int64_t i = 0; i < n; i++) hd_buf_add(b, &c, 1);
}

/* sign + body, padded to the width as the spec aligns it (def: the
 * default alignment). */
static void fmt_pad(hd_buf *b, const fmt_spec *f, const char *sign, const char *body, size_t n,
                    char def) {
    size_t sl = strlen(sign);
    int64_t w = (int64_t)(fmt_codepoints(body, n) + sl);
    int64_t pad = f->width > w ? f->width - w : 0;
    /* '0' pads numbers after their sign, as '=' */
    char a = f->align ? f->align : f->zero && def == '>' ? '=' : def;
    int64_t left = a == '>' ? pad : a == '^' ? pad / 2 : 0;
    if (a == '=') {
        hd_buf_add(b, sign, sl);
        fmt_fill(b, f->fill, pad);
        hd_buf_add(b, body, n);
        return;
    }
    fmt_fill(b, f->fill, left);
    hd_buf_add(b, sign, sl);
    hd_buf_add(b, body, n);
    fmt_fill(b, f->fill, pad - left);
}

/* digits (no sign) with a separator every three digits of the integer part. */
static size_t fmt_group(char *out, size_t cap, const char *digits, char sep) {
    size_t n = strlen(digits), intlen = 0, k = 0;
    while (intlen < n && isdigit((unsigned char)digits[intlen])) intlen++;
    for (size_t i = 0; i < n && k + 2 < cap; i++) {
        if (sep && i < intlen && i > 0 && (intlen - i) % 3 == 0) out[k++] = sep;
        out[k++] = digits[i];
    }
    out[k] = 0;
    return k;
}

static const char *fmt_sign(const fmt_spec *f, int negative) {
    if (negative) return "-";
    return f->sign == '+' ? "+" : f->sign == ' ' ? " " : "";
}

static hd_status fmt_int(hd_vm *vm, hd_buf *b, const fmt_spec *f, int64_t v, const char *spec,
                         size_t len) {
    char digits[80], grouped[128];
    uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    int base = f->type == 'b'                       ? 2
               : f->type == 'o'                     ? 8
               : (f->type == 'x' || f->type == 'X') ? 16
                                                    : 10;
    const char *dig = f->type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
    if (f->prec >= 0) return fmt_error(vm, spec, len, "an int takes no precision");
    int n = 0;
    char tmp[72];
    do tmp[n++] = dig[m % (uint64_t)base], m /= (uint64_t)base;
    while (m);
    for (int i = 0; i < n; i++) digits[i] = tmp[n - 1 - i];
    digits[n] = 0;
    size_t gl = fmt_group(grouped, sizeof grouped, digits, base == 10 ? f->group : 0);
    char sign[8];
    snprintf(sign, sizeof sign, "%s%s", fmt_sign(f, v < 0),
             f->alt && base != 10 ? (base == 2        ? "0b"
                                     : base == 8      ? "0o"
                                     : f->type == 'X' ? "0X"
                                                      : "0x")
                                  : "");
    fmt_pad(b, f, sign, grouped, gl, '>');
    return HD_OK;
}

/* No type with a precision: g, but a fixed-point result keeps a digit
 * after the point, and where that would need more than prec digits the
 * exponent form is used (Python: format(37.0, ".2") is "3.7e+01"). */
static void fmt_general(char *body, size_t cap, double a, int prec) {
    snprintf(body, cap, "%.*g", prec, a);
    if (!isfinite(a) || strpbrk(body, ".e")) return;
    if ((int)strlen(body) + 1 <= prec) {
        strcat(body, ".0");
        return;
    }
    char m[400], *e;
    snprintf(m, sizeof m, "%.*e", prec - 1, a);
    if (!(e = strchr(m, 'e'))) return;
    char *end = e;
    if (memchr(m, '.', (size_t)(e - m))) {
        while (end[-1] == '0') end--;
        if (end[-1] == '.') end--;
    }
    snprintf(body, cap, "%.*s%s", (int)(end - m), m, e);
}

static hd_status fmt_float(hd_vm *vm, hd_buf *b, const fmt_spec *f, double v, const char *spec,
                           size_t len) {
    /* at most 309 integer digits, '.', 100 decimals and '%' or ".0" */
    char body[512], grouped[768], c[16];
    int prec = f->prec < 0 ? 6 : (int)f->prec, neg = signbit(v) && !isnan(v);
    double a = fabs(v);
    char t = f->type;
    if (t == '%') a *= 100.0;
    if (!t && f->prec < 0) {
        hd_format_float(body, sizeof body, a);
    } else if (!t) {
        fmt_general(body, sizeof body, a, prec ? prec : 1);
    } else {
        char ct = t == '%' ? 'f' : t;
        snprintf(c, sizeof c, "%%%s.*%c", f->alt ? "#" : "", ct);
        snprintf(body, sizeof body, c, prec, a);
    }
    if (t == '%') strcat(body, "%");
    size_t gl = fmt_group(grouped, sizeof grouped, body, f->group);
    fmt_pad(b, f, fmt_sign(f, neg), grouped, gl, '>');
    HD_UNUSED(vm), HD_UNUSED(spec), HD_UNUSED(len);
    return HD_OK;
}

static int fmt_float_type(char t) {
    return t == 'f' || t == 'F' || t == 'e' || t == 'E' || t == 'g' || t == 'G' || t == '%';
}

static hd_status fmt_text(hd_vm *vm, hd_buf *b, const fmt_spec *f, hd_value v, const char *spec,
                          size_t len) {
    if (f->type && f->type != 's')
        return hd_vm_error(vm, HD_ERR_RUNTIME, "format(): format code '%c' is not for a %s",
                           f->type, hd_value_type_name(v));
    if (f->sign || f->alt || f->group || f->align == '=')
        return fmt_error(vm, spec, len, "sign, '#', ',' and '=' are for numbers");
    hd_buf t;
    hd_buf_init(&t, vm);
    hd_buf_value(&t, v, 0);
    if (hd_buf_failed(&t)) {
        hd_buf_free(&t);
        return vm->err ? vm->err : hd_vm_oom(vm);
    }
    size_t n = f->prec >= 0 ? fmt_prefix(t.p, t.len, f->prec) : t.len;
    fmt_pad(b, f, "", t.p ? t.p : "", n, '<');
    hd_buf_free(&t);
    return HD_OK;
}

static hd_status fmt_value(hd_vm *vm, hd_buf *b, const fmt_spec *f, hd_value v, const char *spec,
                           size_t len) {
    if (v.type == HD_V_INT) {
        if (fmt_float_type(f->type)) return fmt_float(vm, b, f, (double)v.as.i, spec, len);
        if (!f->type || strchr("dboxXn", f->type)) return fmt_int(vm, b, f, v.as.i, spec, len);
    } else if (v.type == HD_V_FLOAT) {
        if (!f->type || fmt_float_type(f->type)) return fmt_float(vm, b, f, v.as.f, spec, len);
    } else {
        return fmt_text(vm, b, f, v, spec, len);
    }
    return hd_vm_error(vm, HD_ERR_RUNTIME, "format(): format code '%c' is not for a%s %s", f->type,
                       v.type == HD_V_INT ? "n" : "", hd_value_type_name(v));
}

hd_status hd_format_spec(hd_vm *vm, hd_buf *b, hd_value v, const char *spec, size_t len) {
    if (len == 0) {
        hd_buf_value(b, v, 0);
        return hd_buf_failed(b) ? hd_buf_error(b) : HD_OK;
    }
    fmt_spec f;
    if (fmt_parse(vm, spec, len, &f)) return vm->err;
    if (v.type != HD_V_TENSOR) return fmt_value(vm, b, &f, v, spec, len);
    if (v.as.t->numel != 1)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "format(): a tensor of %lld elements takes no format spec (only one "
                           "element formats as its value)",
                           (long long)v.as.t->numel);
    hd_value x;
    if (hd_tensor_item(vm, v.as.t, &x)) return vm->err;
    hd_status st = fmt_value(vm, b, &f, x, spec, len);
    hd_vunref(vm, x);
    return st;
}
