/* tensor_api: how the evaluator reaches tensors. The evaluator (eval.c)
 * calls these for operators, indexing and members whenever an operand is a
 * tensor; builtins_tensor.c implements them and registers every tensor
 * function of the prelude. */
#ifndef HD_TENSOR_API_H
#define HD_TENSOR_API_H

#include "ast.h"
#include "value.h"

/* Register the tensor prelude: dtype names (f16 ... bool), tensor(), zeros,
 * ones, ..., every function of the tensor prelude, manual_seed, save/load,
 * read_csv. */
hd_status hd_builtins_tensor_open(hd_vm *vm);

/* Cls.apply for a class with forward and backward and no apply of its
 * own: a custom gradient, as torch.autograd.Function (builtins_func.c). */
hd_status hd_tensor_class_apply(hd_vm *vm, hd_value cls, hd_value *out);

/* a OP b where at least one side is a tensor (the other may be a number,
 * bool or tensor). op is an hd_tok_op: PLUS MINUS STAR SLASH PERCENT AT POW
 * EQ NE LT LE GT GE. Result: a new reference. */
hd_status hd_tensor_binop(hd_vm *vm, int op, hd_value a, hd_value b, hd_value *out);
/* -x, +x, not x for a tensor x. */
hd_status hd_tensor_unop(hd_vm *vm, int op, hd_value x, hd_value *out);
/* Whether any element of x is nonzero: a 0-d bool tensor (`v in t`). */
hd_status hd_tensor_any_value(hd_vm *vm, struct hd_tensor *x, hd_value *out);

/* One part of an index expression x[...], already evaluated. */
typedef enum { HD_IDX_INT, HD_IDX_SLICE, HD_IDX_ELLIPSIS, HD_IDX_NONE, HD_IDX_TENSOR } hd_idx_kind;
typedef struct hd_index_part {
    hd_idx_kind kind;
    int64_t i;                         /* INT */
    int has_start, has_stop, has_step; /* SLICE: which bounds were given */
    int64_t start, stop, step;
    hd_value v; /* TENSOR (borrowed): an integer or bool tensor */
} hd_index_part;

/* x[parts] (views for ints, slices, ellipsis; a gather for a tensor part). */
hd_status hd_tensor_get_index(hd_vm *vm, hd_value x, const hd_index_part *parts, int n,
                              hd_value *out);
/* x[parts] = v, in place (v: tensor or number, broadcast). */
hd_status hd_tensor_set_index(hd_vm *vm, hd_value x, const hd_index_part *parts, int n, hd_value v);

/* x.name: attributes (shape, dtype, device, ndim, numel, grad, requires_grad,
 * T) and methods (item, tolist, to, detach, clone, sum, reshape, ...) as
 * bound natives. Unknown names are an error naming the member. */
hd_status hd_tensor_get_member(hd_vm *vm, hd_value x, const char *name, hd_value *out);
/* x.name = v (requires_grad). */
hd_status hd_tensor_set_member(hd_vm *vm, hd_value x, const char *name, hd_value v);
/* Member names for REPL completion: calls fn for each. */
void hd_tensor_member_names(void (*fn)(const char *name, void *ud), void *ud);

/* The text print(x) shows: PyTorch-like, summarised past 1000 elements. */
hd_value hd_tensor_format(hd_vm *vm, const hd_tensor *t);

#endif
