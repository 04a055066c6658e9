/* Between the graph IR's files (hd_ir.c: graphs, values, nodes, clone,
 * verify, print, hash; hd_ir_loop.c: loop nodes). Not part of hd_ir.h. */
#ifndef HD_IR_INT_H
#define HD_IR_INT_H

#include "hd_ir.h"

/* ---- hd_ir.c ---- */
int hd_irx_new_value(hd_ir_graph *g, hd_ir_value_kind kind, int index, hd_dtype dt,
                     const int64_t *shape, int ndim);
hd_ir_node *hd_irx_new_node(hd_ir_graph *g, int op, const int *in, int nin);
/* in[0..nin) are values of g (an error naming what otherwise) */
hd_status hd_irx_check_ids(hd_ir_graph *g, const int *in, int nin, const char *what);

/* ---- hd_ir_loop.c ---- */
int hd_irx_same_type(const hd_ir_value *a, const hd_ir_value *b);
int64_t hd_irx_value_bytes(const hd_ir_value *v);
/* Result k of loop l: body output k, or stack k - noutputs as *tmp. */
const hd_ir_value *hd_irx_loop_result(const hd_ir_loop *l, int k, hd_ir_value *tmp);
/* A loop's inputs against its body: counts, ids, types, carries. */
hd_status hd_irx_loop_check(hd_ir_graph *g, const hd_ir_graph *body, int64_t trips, const int *in,
                            int nin, int ncarry, const int *carry_src);
hd_status hd_irx_loop_check_trips_in(hd_ir_graph *g, const hd_ir_node *n);
hd_status hd_irx_loop_check_while(hd_ir_graph *g, const hd_ir_node *n);
hd_status hd_irx_loop_check_stacks(hd_ir_graph *g, const hd_ir_node *n);
/* The loop record in g's arena (body not yet attached). */
hd_ir_loop *hd_irx_loop_new(hd_ir_graph *g, const hd_ir_graph *body, int64_t trips, int ncarry,
                            const int *carry_src);
/* l's stack tables in g's arena for src's stacks; 0 when out of memory. */
int hd_irx_loop_stacks_alloc(hd_ir_graph *g, hd_ir_loop *l, const hd_ir_loop *src);
/* Free a loop's compiled body and body graph. */
void hd_irx_loop_release(hd_ctx *ctx, hd_ir_loop *l);
/* Is `loop` the value of a loop node with a result k? (*out: the loop) */
hd_status hd_irx_loop_out_check(hd_ir_graph *g, int loop, int k, const hd_ir_loop **out);

#endif
