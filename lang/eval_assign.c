/* eval_assign: assignments to members and items (`x.a = v`, `x[i] += v`)
 * and the arithmetic of compound assignment; a plain name's assignment,
 * the hot one, stays in eval.c's dispatch. */
#include "eval.h"
#include "tensor_api.h"

#include <string.h>

static int compound_op(int op) {
    switch (op) {
    case HD_TOK_PLUS_ASSIGN: return HD_TOK_PLUS;
    case HD_TOK_MINUS_ASSIGN: return HD_TOK_MINUS;
    case HD_TOK_STAR_ASSIGN: return HD_TOK_STAR;
    case HD_TOK_SLASH_ASSIGN: return HD_TOK_SLASH;
    default: return 0;
    }
}

/* old OP rhs for `x OP= rhs`; takes neither. */
hd_value hd_eval_combine(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value old, hd_value rhs) {
    int op = compound_op(n->op);
    if (old.type == HD_V_INT && rhs.type == HD_V_INT && op != HD_TOK_SLASH) {
        int64_t r;
        int bad = op == HD_TOK_PLUS    ? __builtin_add_overflow(old.as.i, rhs.as.i, &r)
                  : op == HD_TOK_MINUS ? __builtin_sub_overflow(old.as.i, rhs.as.i, &r)
                                       : __builtin_mul_overflow(old.as.i, rhs.as.i, &r);
        if (!bad) return hd_int(r);
    }
    hd_value r = hd_eval_binop(vm, op, old, rhs);
    return r.type == HD_V_ERR ? hd_eval_fail(vm, f, n) : r;
}

/* *v = old OP *v for a compound assignment (takes old; *v replaced); 0
 * after an error (located). */
static int combine_into(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value old, hd_value *v) {
    hd_value r = hd_eval_combine(vm, f, n, old, *v);
    hd_vunref(vm, old);
    if (r.type == HD_V_ERR) return 0;
    hd_vunref(vm, *v);
    *v = r;
    return 1;
}

int hd_eval_assign_member(hd_vm *vm, hd_frame *f, const hd_ast *n, const hd_ast *t, hd_value v) {
    hd_value x = hd_eval_expr(vm, f, t->a);
    int fl = HD_FLOW_ERROR;
    if (x.type == HD_V_ERR) goto done;
    if (n->op != HD_TOK_ASSIGN) {
        hd_value old;
        if (hd_eval_get_member(vm, x, t->name, &old) != HD_OK) {
            hd_eval_fail(vm, f, t);
            goto done;
        }
        if (!combine_into(vm, f, n, old, &v)) goto done;
    }
    if (hd_eval_set_member(vm, x, t->name, v) != HD_OK)
        hd_eval_fail(vm, f, t);
    else
        fl = HD_FLOW_NORMAL;
done:
    hd_vunref(vm, x);
    hd_vunref(vm, v);
    return fl;
}

int hd_eval_assign_index(hd_vm *vm, hd_frame *f, const hd_ast *n, const hd_ast *t, hd_value v) {
    hd_index_part stack_parts[4];
    hd_index_part *parts = stack_parts;
    int fl = HD_FLOW_ERROR;
    hd_value x = hd_eval_expr(vm, f, t->a);
    if (x.type == HD_V_ERR) {
        hd_vunref(vm, v);
        return fl;
    }
    if (t->n > 4 && !(parts = hd_ctx_alloc(&vm->ctx, (size_t)t->n * sizeof *parts))) {
        hd_vm_oom(vm);
        hd_eval_fail(vm, f, t);
        parts = stack_parts;
        goto done;
    }
    for (int i = 0; i < t->n; i++) {
        memset(&parts[i], 0, sizeof parts[i]);
        parts[i].v = hd_none();
    }
    if (!hd_eval_parts(vm, f, t, parts)) goto done;
    f->at = t; /* an object's getitem and setitem methods run from here */
    if (n->op != HD_TOK_ASSIGN) {
        hd_value old;
        if (hd_eval_index_op(vm, x, parts, t->n, NULL, &old) != HD_OK) {
            hd_eval_fail(vm, f, t);
            goto done;
        }
        if (!combine_into(vm, f, n, old, &v)) goto done;
    }
    if (hd_eval_index_op(vm, x, parts, t->n, &v, NULL) != HD_OK)
        hd_eval_fail(vm, f, t);
    else
        fl = HD_FLOW_NORMAL;
done:
    hd_eval_free_parts(vm, parts, parts == stack_parts && t->n > 4 ? 0 : t->n);
    if (parts != stack_parts) hd_ctx_free(&vm->ctx, parts, (size_t)t->n * sizeof *parts);
    hd_vunref(vm, x);
    hd_vunref(vm, v);
    return fl;
}
