/* compiled: compiled functions and blocks, as the evaluator sees
 * them.
 *
 * A call of a `compiled fn` made from eager code looks its key up in the
 * function's cache (one cache per function body, shared by every closure
 * made from it); on a miss the body runs once through the evaluator with
 * symbolic tensors for its tensor arguments (hd_trace.h), the graph is
 * compiled and kept, and the executable runs. A `compiled { }` block does
 * the same with the tensors it reads from outside as inputs and the outer
 * names it assigns as outputs. docs/compiled.md describes what users see. */
#ifndef HD_COMPILED_H
#define HD_COMPILED_H

#include "hd_ir.h"
#include "vm_internal.h"

/* A call of closure c from eager code when its function is `compiled` (or
 * under HODU_COMPILE_ALL=1). Arguments as hd_eval_call's; *out a new
 * reference. Errors are unlocated (the call site locates them). */
hd_status hd_compiled_call(hd_vm *vm, hd_closure *c, hd_value self, int has_self,
                           const hd_value *args, int nargs, const hd_kwarg *kw, int nkw,
                           hd_value *out);

/* compiled { } and compiled(options) { } at frame f: an evaluator flow code
 * (HD_FLOW_*); errors are located. */
int hd_compiled_block(hd_vm *vm, hd_frame *f, const hd_ast *n);

/* A statement of a chunk's top level under HODU_COMPILE_ALL=1: traced and
 * run as a compiled block when it can be, else eagerly. A flow code. */
int hd_compiled_statement(hd_vm *vm, hd_frame *f, const hd_ast *s);

/* print(...) while a trace is active: a callback node that prints at every
 * run with that run's values. sep and end may be NULL. */
hd_status hd_compiled_print(hd_vm *vm, const hd_value *args, int nargs, const hd_value *sep,
                            const hd_value *end);

/* Reads made while compiled code is traced (vm->trace_reads is set): the
 * values the graph depends on, checked again before a cached graph runs. */
void hd_compiled_note_global(hd_vm *vm, hd_module *m, int slot, hd_value v);
void hd_compiled_note_cell(hd_vm *vm, const hd_cell *c, hd_value v);
/* x.name, x["name"] (objects, dicts, modules) and list[i] (name NULL). */
void hd_compiled_note_member(hd_vm *vm, hd_value x, const char *name, int64_t i, hd_value v);
/* x.name looked up and found missing, the lookup's default taken
 * (getattr(x, name, d), hasattr, a class's method called on an object):
 * later calls must find it missing too. */
void hd_compiled_note_absent(hd_vm *vm, hd_value x, const char *name);
/* A list or dict a builtin is given reads all it holds: each item noted as
 * x[i] (and the lists and dicts inside, to a depth), so that a tensor in
 * it is the one at that place at every call. */
void hd_compiled_note_items(hd_vm *vm, hd_value x, int depth);
/* Stores made while compiled code is traced: x.name = v or setattr (objects,
 * dicts, modules), list[i] = v (name NULL), and a variable: its slot p, or
 * a captured variable's cell (hd_compiled_note_slot). The place is written
 * back after every run even when the store left its value as it was. */
void hd_compiled_note_store(hd_vm *vm, hd_value x, const char *name, int64_t i);
void hd_compiled_note_slot(hd_vm *vm, const hd_value *p, const void *cell);
/* t.grad read (by the evaluator, or by backward() deciding whether to add
 * to a gradient or set one): whether it exists is state of the program. */
void hd_compiled_note_grad(hd_vm *vm, const hd_tensor *t);
/* A .grad about to become an input of compiled code: refused (an error)
 * when backward(create_graph = true) gave it a graph of its own. */
hd_status hd_compiled_grad_input(hd_vm *vm, const hd_tensor *g);

/* A custom Function's backward about to run: 1 (and the call runs
 * eagerly) when it is reached while the backward graph of a compiled
 * call is traced, where its effects would run once, at the trace, and in
 * the forward graph; the caller then stops the backward with an error. */
int hd_compiled_custom_backward(hd_vm *vm);

/* A builtin with an effect (what: its name) called while compiled code is
 * traced: an error (it would run once, at the trace, not at every call).
 * HD_OK otherwise (also inside script blocks, whose reads are constants). */
hd_status hd_compiled_effect(hd_vm *vm, const char *what);
/* Whether compiled code is being traced now. */
int hd_compiled_tracing(hd_vm *vm);

/* Reading t's values (what names the reader: "item()", "a condition"):
 * an error suggesting where(...) when t stands for a value known only when
 * compiled code runs. HD_OK otherwise. */
hd_status hd_compiled_check_data(hd_vm *vm, const hd_tensor *t, const char *what);
/* Can t's data be read now (not a value compiled code knows only when it
 * runs)? */
int hd_compiled_data_known(hd_vm *vm, const hd_tensor *t);

/* Where the compiled code being traced runs, as far as its trace knows
 * (what x.device says of a symbolic x): the device its options name, else
 * that of its first input that is not a number (the graph runs where its
 * inputs are), else the cpu. The cpu when nothing is traced. */
void hd_compiled_trace_place(hd_vm *vm, const struct hd_backend **be, int *dev);

/* script("name") { } at frame f (builtins_script.c): a script object, or
 * HD_V_ERR with a located error. */
hd_value hd_script_eval(hd_vm *vm, hd_frame *f, const hd_ast *n);
/* input, output and load_script. */
hd_status hd_builtins_script_open(hd_vm *vm);

/* The IR of the graph compiled last (for the REPL's :ir), or NULL. */
const char *hd_compiled_last_ir(hd_vm *vm);
/* Remember g's text as the last compiled graph. */
hd_status hd_compiled_set_last_ir(hd_vm *vm, const hd_ir_graph *g);

/* Read HODU_LOG and HODU_COMPILE_ALL (at VM creation). */
void hd_compiled_init(hd_vm *vm);
/* Release every cache (first thing at VM teardown: caches hold values). */
void hd_compiled_free(hd_vm *vm);

/* compiled_stats(f = none): a dict of counts for function f, or for the
 * whole VM. */
hd_status hd_builtins_compiled_open(hd_vm *vm);

#endif
