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

/* The text of an operator token ("+", "==", ".."). */
const char *hd_eval_op_name(int op);

/* How a statement ended. */
enum { HD_FLOW_NORMAL, HD_FLOW_BREAK, HD_FLOW_CONTINUE, HD_FLOW_RETURN, HD_FLOW_ERROR };

/* For compiled code and scripts (compiled.c, builtins_script.c): run a
 * block in frame f (a flow code; errors are located), evaluate an
 * expression (HD_V_ERR on error, located), and call a closure eagerly
 * (never through its compiled cache). */
int hd_eval_block(hd_vm *vm, hd_frame *f, const hd_ast *block);
int hd_eval_stmt(hd_vm *vm, hd_frame *f, const hd_ast *stmt);
hd_value hd_eval_expr(hd_vm *vm, hd_frame *f, const hd_ast *n);
hd_status hd_eval_closure(hd_vm *vm, hd_closure *c, hd_value self, int has_self,
                          const hd_value *args, int nargs, const hd_kwarg *kw, int nkw,
                          hd_value *out);

#endif
