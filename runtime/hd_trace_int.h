/* Between the loop roller (hd_trace_roll.c) and a rolled loop's gradient
 * (hd_trace_grad.c). */
#ifndef HD_TRACE_INT_H
#define HD_TRACE_INT_H

#include "hd_ir.h"

/* The loop about to replace iterations A and B. */
typedef struct hd_roll_grad_in {
    const hd_ir_graph *body;
    int64_t trips;
    int nin, ncarry;
    const int *in;         /* the loop's inputs: values of the trace */
    const int *carry_src;  /* ncarry body outputs */
    int nb;                /* B's nodes */
    const int *b_value;    /* per node of B: its value (kept as the loop's result) */
    const int *b_out;      /* per node of B: its body output, or -1 */
    uint32_t gen_a, gen_b; /* the iterations' watch generations */
} hd_roll_grad_in;

typedef struct hd_trace_grad hd_trace_grad;

/* Can the loop roll with its gradient? *out (to finish or free), or *why
 * not (the loop then stays unrolled). An error only for memory. */
hd_status hd_trace_grad_prepare(hd_ctx *ctx, const hd_roll_grad_in *in, hd_trace_grad **out,
                                const char **why);
/* After the loop node `loop` replaced A and B: its stacks, and records for
 * the values the program holds. Frees tg. */
hd_status hd_trace_grad_finish(hd_ctx *ctx, hd_trace_grad *tg, int loop);
void hd_trace_grad_free(hd_ctx *ctx, hd_trace_grad *tg);

#endif
