/* hd_trace: tracing compiled code into a graph (hd_ir.h).
 *
 *   hd_trace_begin(ctx, "f");
 *   hd_tensor *x = hd_trace_input(ctx, "x", HD_F32, shape, 2);  // symbolic
 *   hd_op_run(ctx, HD_OP_EXP, &x, 1, NULL, &y);                 // records a node
 *   hd_trace_output(ctx, "y", y);
 *   hd_trace_end(ctx, &graph);
 *
 * While a trace is active every hd_op_run call validates its inputs with the
 * op's shape rule, then records a node and returns a symbolic tensor (views
 * too) instead of computing. Tensors with data that reach an op become
 * constants of the graph (one constant per tensor, held by reference), or
 * inputs when a lift hook says so (the language lifts the state of objects
 * it can find again at every run).
 *
 * In-place assignment (the assign op) is functional: writing a whole tensor
 * with data (x[...] = v, or the assign op on x itself) makes the trace go on
 * with the new value for x and puts x on the trace's write list, which the
 * caller turns into outputs copied back into x after each run. Writing part
 * of a tensor, or into a value computed inside the trace, is an error (see
 * docs/ir.md).
 *
 * One trace per context at a time; the language inlines a compiled function
 * called from compiled code. */
#ifndef HD_TRACE_H
#define HD_TRACE_H

#include "hd_ir.h"

typedef struct hd_trace hd_trace;

hd_status hd_trace_begin(hd_ctx *ctx, const char *name);
/* Is a trace active on ctx? */
static inline int hd_trace_active(const hd_ctx *ctx) {
    return ctx->trace != NULL;
}
/* Declare a graph input: a new symbolic tensor (new reference). */
hd_tensor *hd_trace_input(hd_ctx *ctx, const char *name, hd_dtype dt, const int64_t *shape,
                          int ndim);
/* Name a value as a graph output. t may be symbolic or a plain tensor (it
 * becomes a constant output). */
hd_status hd_trace_output(hd_ctx *ctx, const char *name, hd_tensor *t);
/* Record a host call made at every run with the run's values of args
 * (print inside compiled code). */
hd_status hd_trace_callback(hd_ctx *ctx, const hd_ir_callback *cb, hd_tensor *const *args,
                            int nargs);
/* Finish: the graph (verified), owned by the caller. The trace ends even on
 * error. */
hd_status hd_trace_end(hd_ctx *ctx, hd_ir_graph **out);
/* Abandon the active trace (an error in the traced body); no-op if none. */
void hd_trace_abort(hd_ctx *ctx);

/* Lift hook: called when a tensor with data first reaches the active
 * trace. Return 1 and write a name (unique among the graph's inputs) to
 * make it a graph input, 0 to capture it as a constant, -1 on error (set in
 * ctx). Numbers (hd_tensor_number) are always constants. */
typedef int (*hd_trace_lift_fn)(hd_ctx *ctx, void *ud, hd_tensor *t, char *name, size_t n);
void hd_trace_set_lift(hd_ctx *ctx, hd_trace_lift_fn fn, void *ud);

/* Gradient-read hook (same ud as the lift hook): backward() inside the
 * active trace reads whether a leaf already has a .grad (it adds to it or
 * sets it), which is state of the program the graph must be guarded on. */
typedef void (*hd_trace_grad_read_fn)(hd_ctx *ctx, void *ud, const hd_tensor *t);
void hd_trace_set_grad_read(hd_ctx *ctx, hd_trace_grad_read_fn fn);
/* Tell the hook (if any) that t's .grad is read now. */
void hd_trace_note_grad(hd_ctx *ctx, const hd_tensor *t);

/* Tensors with data written whole in place during the active trace, in the
 * order of their first write (borrowed; the trace holds them). Pass each to
 * hd_trace_output to get its final value. */
int hd_trace_nwrites(const hd_ctx *ctx);
hd_tensor *hd_trace_write_target(const hd_ctx *ctx, int i);

/* Does t stand for a value known only when the graph runs: symbolic, a
 * lifted input, or written in place in the active trace? Its data at trace
 * time is then not what a run sees. 0 when no trace is active. */
int hd_trace_stands_for_input(const hd_ctx *ctx, const hd_tensor *t);

/* The IR value a tensor stands for in the active trace: its node value if it
 * is one of this trace's symbolic tensors, else a constant (captured now if
 * new). -1 with an error for a symbolic tensor of another trace. */
int hd_trace_value(hd_ctx *ctx, hd_tensor *t);

/* Is t, a symbolic tensor of the active trace, the transposition of a 2-D
 * value that is not a view itself (what eager mode sees as a transposed
 * view of a contiguous matrix)? 0 for anything else. */
int hd_trace_is_transpose(const hd_ctx *ctx, const hd_tensor *t);

/* ---- loops (runtime/hd_trace_roll.c) ----
 *
 * The language traces a counted loop's iterations one after another; once
 * two consecutive iterations A and B recorded the same nodes, with the
 * values B reads from A carried from one iteration to the next, and the
 * host state the program sees repeats (the caller checks that), A's and
 * B's nodes become one loop node that runs B's body from A's state for the
 * rest of the loop.
 * B's values keep their ids, now the loop's results: tensors the program
 * holds stand for the last iteration's values. */
typedef struct hd_trace_pos {
    int nodes, values;
    uint32_t grad_watch; /* ctx->grad_watch then: a watched iteration's generation */
} hd_trace_pos;
/* Where the active trace is: its node and value counts. */
hd_trace_pos hd_trace_position(const hd_ctx *ctx);
/* A new symbolic tensor standing for value v of the active trace. */
hd_tensor *hd_trace_symbolic_of(hd_ctx *ctx, int v);
/* A branch on a 0-d tensor (an `if` inside traced code): [p0, p1) traced
 * the then-branch and [p1, p2) the else-branch (empty if none), after each
 * of which the program's state was put back. n variables were written in
 * either: init[i] their value before (NULL when it was no tensor: both
 * branches then write it), then_v[i] and else_v[i] their values after each
 * branch (the same dtype and shape); n may be 0 (branches that only print,
 * say). The branches' nodes become two loop
 * nodes of 0 or 1 iteration on pred, so that only the branch taken runs
 * (with its prints and random draws); out[i] receives the new symbolic
 * value of each variable. When gradient records the branches made (from
 * watch generation gen on) are alive, the new values get records whose
 * backward is a cond too (hd_trace_grad_cond.c), or, where it cannot be,
 * *why says why and the trace is left as it was. */
hd_status hd_trace_cond(hd_ctx *ctx, hd_tensor *pred, hd_trace_pos p0, hd_trace_pos p1,
                        hd_trace_pos p2, int n, hd_tensor *const *init, hd_tensor *const *then_v,
                        hd_tensor *const *else_v, uint32_t gen, hd_tensor **out, const char **why);
/* A while on a one-element tensor (a `while` inside traced code), or a
 * loop whose count is known only when the graph runs (`for i in a..b` on
 * a traced bound). The caller traced the while's condition pred (or the
 * count trips, a 0-d i64), then found the n variables the body writes
 * (init[i] their values before), and from p0 put a marker
 * (hd_trace_while_mark) for each into the trace and the variable; from p1
 * it traced the body (and, for a while, the condition cond again) on the
 * markers: now[i] the variables' values after one iteration (each of
 * init[i]'s dtype and shape; now[i] may be mark[i]). [p0, p2) becomes one
 * loop node: a while loop on the carried truth of the condition, or a
 * loop of trips iterations (0 when not positive); out[i] receives the new
 * symbolic value of each variable. Either pred and cond, or trips. */
hd_status hd_trace_while(hd_ctx *ctx, hd_tensor *pred, hd_tensor *trips, hd_trace_pos p0,
                         hd_trace_pos p1, hd_trace_pos p2, int n, hd_tensor *const *init,
                         hd_tensor *const *mark, hd_tensor *const *now, hd_tensor *cond,
                         hd_tensor **out);
/* A marker standing for init's value, distinct from it (hd_trace_while). */
hd_tensor *hd_trace_while_mark(hd_ctx *ctx, hd_tensor *init);
/* Drop the nodes traced from p on (a trace whose tensors are gone). */
void hd_trace_cut(hd_ctx *ctx, hd_trace_pos p);
/* The active trace's graph (NULL if none), for hd_trace_roll. */
hd_ir_graph *hd_trace_graph(const hd_ctx *ctx);
/* [a, b) and [b, c) are iterations A and B. If they match, replace both by
 * a loop node of trips iterations (A, B and trips - 2 more) whose initial
 * state is what A read, and set *rolled. When gradient records of A and B
 * (watched from a.grad_watch and b.grad_watch) are still alive, the loop
 * rolls only if its gradient can be a loop too (runtime/hd_trace_grad.c):
 * the values the program holds then get records that run it (else *why
 * says why not);
 * else leave the trace as it is with *rolled = 0. An error (memory) leaves
 * the trace unusable: the caller aborts it. */
hd_status hd_trace_roll(hd_ctx *ctx, hd_trace_pos a, hd_trace_pos b, hd_trace_pos c, int64_t trips,
                        int *rolled, const char **why);

/* The active trace's serial (0: none): symbolic tensors of it have it in
 * the high half of their trace_ref. */
uint32_t hd_trace_serial(const hd_ctx *ctx);
/* Set the active trace aside (returned; NULL if none) so that another can
 * begin, and put it back after that one ended (and every tensor of it is
 * gone: its serial is given again). */
struct hd_trace *hd_trace_suspend(hd_ctx *ctx);
void hd_trace_resume(hd_ctx *ctx, struct hd_trace *tr);

/* Is t symbolic (no data: made by a trace)? */
static inline int hd_tensor_is_symbolic(const hd_tensor *t) {
    return t->storage == NULL;
}

/* Reading a symbolic tensor's data (item(), printing values, a condition)
 * is an error: HD_ERR_RUNTIME with a message that starts with
 * "branch on tensor data inside compiled code" for a condition (what names
 * the reader: "if", "while", "item()", "print"). The same for a tensor with
 * data that stands for an input of the active trace (lifted or written in
 * place); HD_OK for any other tensor with data. */
hd_status hd_trace_check_data(hd_ctx *ctx, const hd_tensor *t, const char *what);

/* The hook hd_op_run calls while a trace is active (after the shape rule
 * made plan): records the node and returns its symbolic result in *out. */
hd_status hd_trace_record(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,
                          const hd_attrs *attrs, const hd_op_plan *plan, hd_tensor **out);

#endif
