/* The profiler: every eager op (hd_op_run), compile (hd_jit_compile) and
 * compiled run (hd_jit_run) timed, with the bytes it moved and, for
 * matmul and conv2d, its FLOPs; a table by total time (profile_report())
 * and a Chrome trace (HODU_PROFILE=trace.json, or a strategy's
 * profiling) that Perfetto and chrome://tracing open.
 *
 * Work on a device is timed there too (hd_profile_device_span).
 *
 * Off, it is one test of ctx->prof in hd_op_run. */
#ifndef HD_PROFILE_H
#define HD_PROFILE_H

#include "hd_base.h"
#include "hd_op.h"

/* Rows of the table: the ops, then these. */
enum {
    HD_PROF_COMPILE = HD_OP_COUNT,
    HD_PROF_RUN,
    HD_PROF_ADAM,
    HD_PROF_SGD,
    HD_PROF_ADAGRAD,
    HD_PROF_LION,
    HD_PROF_RMSPROP,
    HD_PROF_ROWS
};

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

/* Time on a device: a backend records a mark (events of its own) around
 * an op's work and hands it over; the profiler asks for its times when it
 * reports (or when HD_PROF_DEVICE_PENDING marks wait), then gives it back.
 * times: *start on the profiler's clock (hd_profile_clock), *dur in
 * seconds; an error drops the mark. */
typedef struct hd_profile_device {
    hd_status (*times)(hd_ctx *ctx, void *mark, double *start, double *dur);
    void (*release)(hd_ctx *ctx, void *mark);
} hd_profile_device;
#define HD_PROF_DEVICE_PENDING 1024
/* The mark of row's work on device (taken; released at once when the
 * profiler cannot keep it). */
void hd_profile_device_span(hd_ctx *ctx, int row, int device, const hd_profile_device *dev,
                            void *mark);
/* The profiler's clock, in seconds (monotonic). */
double hd_profile_clock(void);

/* One row's figures: 0 when the row recorded nothing. device: seconds the
 * row's work took on devices that time it (the cuda backend's events). */
typedef struct hd_profile_stats {
    uint64_t calls;
    double total, self, bytes, flops; /* seconds, seconds, bytes, FLOPs */
    double device;
} hd_profile_stats;
int hd_profile_row(hd_ctx *ctx, int row, hd_profile_stats *out);
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
