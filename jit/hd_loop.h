/* hd_loop: running loop nodes (HD_IR_LOOP, hd_ir.h) in every compiler.
 *
 * A compiler that meets a loop node in its optimised graph compiles the
 * body once with itself (hd_jit_loop_compile, at its own compile time) and
 * runs the node as a runtime step (hd_jit_loop_run): the body's executable
 * is called trips times, its carried outputs fed back as the next
 * iteration's inputs, and the last iteration's outputs copied into the
 * loop's packed value. The body's memory plan is made once and reused at
 * every iteration. */
#ifndef HD_LOOP_H
#define HD_LOOP_H

#include "hd_compile.h"

/* Compile node n's body (n->op == HD_IR_LOOP) with compiler c and options
 * opt into n->loop->exec (freed with the graph). Nested loops compile
 * with their own bodies. */
hd_status hd_jit_loop_compile(hd_ctx *ctx, const hd_jit_compiler *c, hd_ir_node *n,
                              const hd_jit_options *opt);
/* Compile every loop node of g (an executor's private, optimised copy). */
hd_status hd_jit_loops_compile(hd_ctx *ctx, const hd_jit_compiler *c, hd_ir_graph *g,
                               const hd_jit_options *opt);

/* Run loop node n: in[] are the run's tensors of its inputs, out the
 * loop's value (u8[bytes], on the executable's device). */
hd_status hd_jit_loop_run(hd_ctx *ctx, const hd_ir_node *n, hd_tensor *const *in, int nin,
                          hd_tensor *out);

#endif
