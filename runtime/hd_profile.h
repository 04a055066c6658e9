/* The profiler: every eager op (hd_op_run), compile (hd_jit_compile) and
 * compiled run (hd_jit_run) timed, with the bytes it moved and, for
 * matmul and conv2d, its FLOPs; a table by total time (profile_report())
 * and a Chrome trace (HODU_PROFILE=trace.json, or a strategy's
 * profiling) that Perfetto and chrome://tracing open.
 *
 * Off, it is one test of ctx->prof in hd_op_run. */
#ifndef HD_PROFILE_H
#define HD_PROFILE_H

#include "hd_base.h"
#include "hd_op.h"

/* Rows of the table: the ops, then these. */
enum { HD_PROF_COMPILE = HD_OP_COUNT, HD_PROF_RUN, HD_PROF_ROWS };

/* Turn recording on or off (what was recorded stays). trace: where the
 * Chrome trace goes when the context is released (NULL: no trace, or keep
 * the one set before). */
hd_status hd_profile_set(hd_ctx *ctx, int on, const char *trace);
int hd_profile_on(const hd_ctx *ctx);
/* Forget what was recorded. */
void hd_profile_reset(hd_ctx *ctx);
/* Write the trace (if one was asked for) and free the profiler. */
void hd_profile_release(hd_ctx *ctx);

/* A timed span: begin returns its start; end records it in row (label:
 * a name shown in the trace instead of the row's, copied; NULL: none). */
double hd_profile_begin(hd_ctx *ctx);
void hd_profile_end(hd_ctx *ctx, int row, const char *label, double t0, double bytes, double flops);

/* One row's figures: 0 when the row recorded nothing. */
typedef struct hd_profile_stats {
    uint64_t calls;
    double total, self, bytes, flops; /* seconds, seconds, bytes, FLOPs */
} hd_profile_stats;
int hd_profile_row(const hd_ctx *ctx, int row, hd_profile_stats *out);
const char *hd_profile_row_name(int row);

/* The table, sorted by total time, in a malloc'd string (NULL: out of
 * memory). */
char *hd_profile_table(hd_ctx *ctx);
/* The Chrome trace of what was recorded into path. */
hd_status hd_profile_write_trace(hd_ctx *ctx, const char *path);

/* hd_op_run's profiled path: op timed around run. */
typedef hd_status (*hd_profile_op_fn)(hd_ctx *ctx, hd_op op, hd_tensor *const *in, int nin,
                                      const hd_attrs *attrs, hd_tensor **out);
hd_status hd_profile_op(hd_ctx *ctx, hd_profile_op_fn run, hd_op op, hd_tensor *const *in, int nin,
                        const hd_attrs *attrs, hd_tensor **out);

#endif
