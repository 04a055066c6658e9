/* eval: the tree-walking evaluator over the resolved AST.
 *
 * Names are slots (no hash look-ups), ints, floats and bools are never
 * refcounted, and a failed expression returns a marker value (HD_V_ERR)
 * with the message in the VM, so the hot path has no out-parameters. The
 * entry points are declared in vm_internal.h: hd_eval_chunk, hd_eval_call,
 * hd_eval_truthy, hd_eval_get_member. */
#ifndef HD_EVAL_H
#define HD_EVAL_H

#include "vm_internal.h"

/* Binary operator on two values (ints, floats, strings, lists, tensors...):
 * a new reference, or HD_V_ERR with an unlocated message in the VM. */
hd_value hd_eval_binop(hd_vm *vm, int op, hd_value a, hd_value b);
/* A unary operator (-, not, +) on a value (eval_arith.c), as hd_eval_binop. */
hd_value hd_eval_unop(hd_vm *vm, int op, hd_value x);

/* The text of an operator token ("+", "==", ".."). */
const char *hd_eval_op_name(int op);

#if defined(__GNUC__)
#define HD_LIKELY(x)   __builtin_expect(!!(x), 1)
#define HD_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* Kept out of ev/ex so that their frames stay small: every level of a deep
 * recursion pays for the largest frame on the path. */
#define HD_NOINLINE __attribute__((noinline))
#else
#define HD_LIKELY(x)   (x)
#define HD_UNLIKELY(x) (x)
#define HD_NOINLINE
#endif

/* Put a call's arguments into fn's parameter slots (new references;
 * bound[i] set for each given). HD_OK, or an unlocated error naming the
 * function (ctor: the class whose init it is) and the parameter
 * (eval_args.c; never inlined into the evaluator). */
/* A named argument's value v (taken) into kw; 0 after an error (located). */
int hd_eval_add_kwarg(hd_vm *vm, hd_frame *f, const hd_ast *arg, hd_value v, hd_kwarg *kw,
                      int *nkw);
/* A call with `*list` among its arguments (its op HD_TOK_STAR): the
 * positional ones into the new list *pos, the spread list's items in its
 * place, named ones into kw; 0 after an error (located). */
int hd_eval_args_spread(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value *pos, hd_kwarg *kw,
                        int *nkw);
hd_status hd_eval_bind_args(hd_vm *vm, const hd_ast_fn *fn, const hd_class *ctor, hd_value *slots,
                            unsigned char *bound, hd_value self, int has_self, const hd_value *args,
                            int nargs, const hd_kwarg *kw, int nkw);

/* Fail at node n with status st and a formatted message (HD_V_ERR). */
hd_value hd_eval_failf(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
/* Locate the VM's error at node n (HD_V_ERR). */
hd_value hd_eval_fail(hd_vm *vm, hd_frame *f, const hd_ast *n);

/* How a statement ended. */
enum { HD_FLOW_NORMAL, HD_FLOW_BREAK, HD_FLOW_CONTINUE, HD_FLOW_RETURN, HD_FLOW_ERROR };

/* For compiled code and scripts (compiled.c, builtins_script.c): run a
 * block in frame f (a flow code; errors are located), evaluate an
 * expression (HD_V_ERR on error, located), and call a closure eagerly
 * (never through its compiled cache). */
int hd_eval_block(hd_vm *vm, hd_frame *f, const hd_ast *block);
int hd_eval_stmt(hd_vm *vm, hd_frame *f, const hd_ast *stmt);
/* Bind a loop's or a catch's variable (n->ref) to v, which it takes;
 * 0 after an error. */
int hd_eval_bind(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value v);
/* try { } catch e { } and throw (eval_try.c): flow codes. */
int hd_eval_try(hd_vm *vm, hd_frame *f, const hd_ast *n);
int hd_eval_throw(hd_vm *vm, hd_frame *f, const hd_ast *n);
/* The builtin class Error, made at VM start. */
hd_status hd_eval_try_init(hd_vm *vm);
/* The builtin super() (eval_super.c). */
hd_status hd_eval_super_init(hd_vm *vm);
hd_value hd_eval_expr(hd_vm *vm, hd_frame *f, const hd_ast *n);
/* Assignments (eval_assign.c): old OP rhs for `x OP= rhs` (takes
 * neither; located), and `x.name OP= v` and `x[parts] OP= v` for the
 * assignment n with target t (v taken): flow codes. */
hd_value hd_eval_combine(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value old, hd_value rhs);
int hd_eval_assign_member(hd_vm *vm, hd_frame *f, const hd_ast *n, const hd_ast *t, hd_value v);
int hd_eval_assign_index(hd_vm *vm, hd_frame *f, const hd_ast *n, const hd_ast *t, hd_value v);
hd_status hd_eval_closure(hd_vm *vm, hd_closure *c, hd_value self, int has_self,
                          const hd_value *args, int nargs, const hd_kwarg *kw, int nkw,
                          hd_value *out);

/* Indexing (eval_index.c), for the evaluator: items of lists, strings and
 * dicts (get, set); an index expression's parts evaluated (their count, or
 * -1 on error; free them with hd_eval_free_parts); x[parts] on tensors,
 * and on any value (get when set is NULL, else set). */
struct hd_index_part;
hd_status hd_eval_get_item(hd_vm *vm, hd_value x, hd_value k, hd_value *out);
hd_status hd_eval_set_item(hd_vm *vm, hd_value x, hd_value k, hd_value v);
int hd_eval_parts(hd_vm *vm, hd_frame *f, const hd_ast *n, struct hd_index_part *parts);
void hd_eval_free_parts(hd_vm *vm, struct hd_index_part *parts, int n);
hd_status hd_eval_tensor_index(hd_vm *vm, hd_value x, struct hd_index_part *parts, int n,
                               const hd_value *set, hd_value *out);
hd_status hd_eval_index_op(hd_vm *vm, hd_value x, struct hd_index_part *parts, int n,
                           const hd_value *set, hd_value *out);

/* One iteration of for-loop n with its variable bound to v (taken):
 * NORMAL, BREAK, RETURN or ERROR. */
int hd_eval_for_iteration(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value v);
/* What x.name(...) calls (eval_member.c): *fn (new reference) and whether
 * x is passed as the receiver. */
hd_status hd_eval_find_method(hd_vm *vm, hd_value x, const char *name, hd_value *fn,
                              int *pass_self);
/* x.name = v (v borrowed). */
hd_status hd_eval_set_member(hd_vm *vm, hd_value x, const char *name, hd_value v);
/* Run statement n (a block, an if, ...): a flow code. */
int hd_eval_statement(hd_vm *vm, hd_frame *f, const hd_ast *n);
/* `if` n on pred, a one-element tensor known only when traced code runs
 * (eval_loop.c): a flow code; *why is set (and nothing changed) when the
 * branches cannot become a cond. */
int hd_eval_if_traced(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_tensor *pred, const char **why);
/* The same for a `while` on a one-element tensor: a while loop node. */
int hd_eval_while_traced(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_tensor *pred,
                         const char **why);
/* The same for `for i in a..b` n where a or b (ints or one-element integer
 * tensors) is known only when traced code runs: a loop node of b - a
 * iterations counted when the graph runs (i carried when the body reads
 * it). */
int hd_eval_for_count_traced(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value a, hd_value b,
                             const char **why);
/* for n over v (eval_for.c): a list, dict, string, tensor, range or
 * object; a flow code. */
int hd_eval_for_value(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value v);
/* for n in a..b where a or b is a one-element integer tensor (takes a, b). */
int hd_eval_for_tensor_range(hd_vm *vm, hd_frame *f, const hd_ast *n, hd_value a, hd_value b);
/* for n in range(a, b, step) over ints (eval.c). */
int hd_eval_for_range(hd_vm *vm, hd_frame *f, const hd_ast *n, int64_t a, int64_t b, int64_t step);
/* An if, while or for on tensor data that traced code could not compile
 * (why: the reason; fl: the flow it left): the error, with what to do. */
int hd_eval_traced_refused(hd_vm *vm, hd_frame *f, const hd_ast *n, int fl, const char *why);
/* A counted for-loop while compiled code is traced (eval_loop.c): a flow
 * code as hd_eval_for_iteration's. */
int hd_eval_for_traced(hd_vm *vm, hd_frame *f, const hd_ast *n, int64_t a, int64_t step,
                       int64_t count);

#endif
