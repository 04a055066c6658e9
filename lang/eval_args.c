/* A call's arguments: named ones gathered (hd_eval_add_kwarg), a call
 * that spreads a list evaluated (hd_eval_args_spread), and the binding to
 * a Hodu function's parameters (hd_eval_bind_args), with the errors that
 * name the function, the parameter and, for a class, how it is called.
 * Out of eval.c: its message buffers stay out of the evaluator's frames. */
#include "eval.h"
#include "hints.h"

#include <stdio.h>
#include <string.h>

static const char *fn_name(const hd_ast_fn *fn) {
    return fn->name ? fn->name : "<anonymous>";
}

static int find_param(const hd_ast_fn *fn, const char *name) {
    for (int i = 0; i < fn->nparams; i++)
        if (strcmp(fn->params[i].name, name) == 0) return i;
    return -1;
}

/* How fn is called, for an argument error: " (call it as Name(a, b = ...))"
 * for a class's init (the class's name), else "". */
static const char *call_hint(const hd_ast_fn *fn, const hd_class *ctor, char *buf, size_t n) {
    if (!ctor) return "";
    size_t k = (size_t)snprintf(buf, n, " (call it as %s(", hd_as_str(ctor->name)->chars);
    for (int i = 1; i < fn->nparams && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s%s%s", i > 1 ? ", " : "",
                              fn->rest && i == fn->nparams - 1 ? "*" : "", fn->params[i].name,
                              fn->params[i].def ? " = ..." : "");
    if (k < n) snprintf(buf + k, n - k, "))");
    return buf;
}

/* A keyword fn has no parameter for: the error, with the parameter it
 * may mean and, for a class, how it is called. */
static HD_NOINLINE hd_status bind_unknown_keyword(hd_vm *vm, const hd_ast_fn *fn,
                                                  const hd_class *ctor, const char *name,
                                                  const char *kw, int has_self) {
    hd_hint h;
    hd_hint_init(&h, kw);
    for (int i = has_self; i < fn->nparams; i++) hd_hint_offer(&h, fn->params[i].name);
    const char *mean = hd_hint_keyword(kw, NULL, 0);
    if (mean && find_param(fn, mean) >= has_self) h.best = mean;
    char hint[256], dym[96] = "";
    if (h.best) snprintf(dym, sizeof dym, " (did you mean '%s'?)", h.best);
    return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() has no parameter named '%s'%s%s", name, kw, dym,
                       call_hint(fn, ctor, hint, sizeof hint));
}

/* *rest: the positional arguments past the others, a list (n may be <= 0:
 * an empty list). */
static hd_status bind_rest(hd_vm *vm, const hd_ast_fn *fn, hd_value *slots, unsigned char *bound,
                           const hd_value *extra, int n) {
    int at = fn->nparams - 1;
    hd_value l = hd_list_new(vm, n > 0 ? n : 0);
    if (l.type != HD_V_LIST) return vm->err ? vm->err : hd_vm_oom(vm);
    for (int i = 0; i < n; i++)
        if (hd_list_push(vm, l, hd_value_ref(extra[i])) != HD_OK) {
            hd_vunref(vm, l);
            return vm->err;
        }
    slots[at] = l;
    bound[at] = 1;
    return HD_OK;
}

HD_NOINLINE hd_status hd_eval_bind_args(hd_vm *vm, const hd_ast_fn *fn, const hd_class *ctor,
                                        hd_value *slots, unsigned char *bound, hd_value self,
                                        int has_self, const hd_value *args, int nargs,
                                        const hd_kwarg *kw, int nkw) {
    int np = fn->nparams, pos = 0;
    const char *name = ctor ? hd_as_str(ctor->name)->chars : fn_name(fn);
    char hint[256];
    if (has_self) {
        if (np == 0)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() takes no arguments, not even self", name);
        hd_vref(slots[0] = self);
        bound[0] = 1;
        pos = 1;
    }
    int fixed = np - (fn->rest != 0); /* parameters before *rest */
    if (fixed < pos)
        return hd_vm_error(vm, HD_ERR_RUNTIME,
                           "%s(): a method's *%s cannot take self: put self "
                           "first, as fn %s(self, *%s)",
                           name, fn->params[np - 1].name, name, fn->params[np - 1].name);
    if (pos + nargs > fixed && !fn->rest) {
        int shown = np - has_self;
        return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() takes %d argument%s but %d were given%s", name,
                           shown, shown == 1 ? "" : "s", nargs,
                           call_hint(fn, ctor, hint, sizeof hint));
    }
    for (int i = 0; i < nargs && pos + i < fixed; i++) {
        hd_vref(slots[pos + i] = args[i]);
        bound[pos + i] = 1;
    }
    if (fn->rest && bind_rest(vm, fn, slots, bound, args + (fixed - pos), nargs - (fixed - pos)))
        return vm->err;
    for (int k = 0; k < nkw; k++) {
        int i = find_param(fn, kw[k].name);
        if (fn->rest && i == np - 1)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() takes *%s by position only", name,
                               kw[k].name);
        if (i < 0 || (has_self && i == 0))
            return bind_unknown_keyword(vm, fn, ctor, name, kw[k].name, has_self);
        if (bound[i])
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() got argument '%s' twice", name,
                               kw[k].name);
        hd_vref(slots[i] = kw[k].value);
        bound[i] = 1;
    }
    for (int i = 0; i < np; i++)
        if (!bound[i] && !fn->params[i].def)
            return hd_vm_error(vm, HD_ERR_RUNTIME, "%s() missing argument '%s'%s", name,
                               fn->params[i].name, call_hint(fn, ctor, hint, sizeof hint));
    return HD_OK;
}

int hd_eval_add_kwarg(hd_vm *vm, hd_frame *f, const hd_ast *arg, hd_value v, hd_kwarg *kw,
                      int *nkw) {
    for (int k = 0; k < *nkw; k++)
        if (strcmp(kw[k].name, arg->name) == 0) {
            hd_vunref(vm, v);
            hd_eval_failf(vm, f, arg, HD_ERR_RUNTIME, "argument '%s' given twice", arg->name);
            return 0;
        }
    kw[*nkw].name = arg->name;
    kw[(*nkw)++].value = v;
    return 1;
}

static int spread_fail(hd_vm *vm, hd_frame *f, const hd_ast *n) {
    hd_vm_locate(vm, f, &n->span);
    return 0;
}

int hd_eval_args_spread(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value *pos, hd_kwarg *kw,
                        int *nkw) {
    *nkw = 0;
    *pos = hd_list_new(vm, n->n);
    if (pos->type != HD_V_LIST) return spread_fail(vm, f, n);
    for (int i = 0; i < n->n; i++) {
        const hd_ast *arg = n->items[i];
        int spread = arg->kind == HD_AST_ARG && arg->op == HD_TOK_STAR;
        hd_value v = hd_eval_expr(vm, f, arg->kind == HD_AST_ARG ? arg->a : arg);
        if (v.type == HD_V_ERR) return 0;
        if (arg->kind == HD_AST_ARG && arg->name) {
            if (!hd_eval_add_kwarg(vm, f, arg, v, kw, nkw)) return 0;
            continue;
        }
        if (spread && v.type != HD_V_LIST) {
            hd_eval_failf(vm, f, arg, HD_ERR_RUNTIME,
                          "*: a call spreads a list, got a value of type %s (list(x) makes one)",
                          hd_value_type_name(v));
            hd_vunref(vm, v);
            return 0;
        }
        const hd_list *l = spread ? hd_as_list(v) : NULL;
        hd_status st = HD_OK;
        for (int64_t k = 0; l && k < l->len && st == HD_OK; k++)
            st = hd_list_push(vm, *pos, hd_value_ref(l->items[k]));
        if (spread)
            hd_vunref(vm, v);
        else
            st = hd_list_push(vm, *pos, v);
        if (st != HD_OK) return spread_fail(vm, f, arg);
    }
    return 1;
}
