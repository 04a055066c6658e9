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

/* ---- shared by the gradients of loops and of conds (hd_trace_grad.c) ---- */

/* What a reverse body is derived from: one iteration of body, backward. */
typedef struct hd_tg_spec {
    const hd_ir_graph *body; /* the forward body */
    int64_t trips;
    int ncarry;
    const int *carry_src;
    const unsigned char *need_x; /* per invariant input: its gradient is wanted */
    int extra;                   /* a body output with a cotangent of its own, or -1 */
    int direct; /* the carried values are inputs themselves (a loop of at most one trip),
                   not slots of stacks */
    /* per carried value, or NULL: its value after each iteration is an
     * input too (a stack of the next iterations' starts, "n<q>"), read
     * where the backward would read the body's recomputed result */
    const unsigned char *next;
} hd_tg_spec;
/* The reverse body of sp, traced apart from the active trace: inputs i
 * (i64), the float carried values' cotangents, the wanted gradients
 * (carried, in that order), then the stacks (or, direct, the carried
 * values), the invariant inputs, the extra cotangent and the next stacks;
 * outputs i - 1, the carried inputs' cotangents and the gradients
 * summed. */
hd_status hd_tg_derive(hd_ctx *ctx, const hd_tg_spec *sp, const char *name, hd_ir_graph **out);
/* Per output of body, the inputs (bits) it reaches through ops that carry
 * gradients. */
hd_status hd_tg_body_deps(hd_ctx *ctx, const hd_ir_graph *b, uint64_t *odep);
/* t (taken) as a constant of g; zeros of value's type; -1 on error. */
int hd_tg_const(hd_ctx *ctx, hd_ir_graph *g, hd_tensor *t);
int hd_tg_zeros_like(hd_ctx *ctx, hd_ir_graph *g, int value);
/* The value a record's trace_ref names in the active trace, or -1. */
int hd_tg_ref_value(const hd_ctx *ctx, uint64_t ref);

/* Can the loop roll with its gradient? *out (to finish or free), or *why
 * not (the loop then stays unrolled). An error only for memory. */
hd_status hd_trace_grad_prepare(hd_ctx *ctx, const hd_roll_grad_in *in, hd_trace_grad **out,
                                const char **why);
/* After the loop node `loop` replaced A and B: its stacks, and records for
 * the values the program holds. Frees tg. */
hd_status hd_trace_grad_finish(hd_ctx *ctx, hd_trace_grad *tg, int loop);
void hd_trace_grad_free(hd_ctx *ctx, hd_trace_grad *tg);

/* A branch on tensor data (hd_trace_cond) whose branches leave gradient
 * records alive: the values of the variables get records whose backward
 * is a cond too. */
typedef struct hd_cond_grad_in {
    const hd_ir_graph *body[2]; /* then, else: inputs n variables, outer[k]..., trips */
    const int *outer[2];        /* each body's other inputs: values of the trace */
    int nouter[2];
    int n;
    const int *v0;          /* the variables' values before */
    hd_tensor *const *init; /* their tensors before (NULL: none) */
    uint32_t gen;           /* the then branch's watch generation */
} hd_cond_grad_in;

typedef struct hd_cond_grad hd_cond_grad;

/* Can the cond carry gradients? *out, or *why not (the branch then stays
 * an error). An error only for memory. */
hd_status hd_trace_grad_cond_prepare(hd_ctx *ctx, const hd_cond_grad_in *in, hd_cond_grad **out,
                                     const char **why);
/* After the two loops: s1 the then loop's results, count[2] their trip
 * counts, out[n] the variables' new tensors. Frees cg. */
hd_status hd_trace_grad_cond_finish(hd_ctx *ctx, hd_cond_grad *cg, const int *s1, const int *count,
                                    hd_tensor *const *out);
void hd_trace_grad_cond_free(hd_ctx *ctx, hd_cond_grad *cg);

#endif
