/* The profiler (hd_profile.h). Its memory comes from malloc, not the
 * context's allocator, so that profiling does not change what
 * memory_stats() reports or what a memory limit allows. */
#include "hd_profile.h"

#include "hd_tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROF_DEPTH      64
#define PROF_MAX_EVENTS (1 << 20)

typedef struct prof_row {
    uint64_t calls;
    double total, self, bytes, flops, device;
} prof_row;

typedef struct prof_event {
    double ts, dur; /* seconds from the start */
    int row;
    int tid; /* 1: the host; 2 + n: device n */
    char label[28];
} prof_event;

/* A device's mark waiting for its times. */
typedef struct prof_pending {
    int row, device;
    const hd_profile_device *dev;
    void *mark;
} prof_pending;

struct hd_profile {
    int on;
    double start;
    prof_row rows[HD_PROF_ROWS];
    double child[PROF_DEPTH]; /* time spent in spans inside each open one */
    int depth;
    char *trace; /* the Chrome trace's path, or NULL */
    prof_event *events;
    size_t nevents, cap;
    uint64_t dropped;
    prof_pending *pending; /* HD_PROF_DEVICE_PENDING of them */
    int npending;
};

static double prof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double hd_profile_clock(void) {
    return prof_now();
}

static void prof_event_add(hd_profile *p, int row, int tid, const char *label, double t0,
                           double dur);

/* Every waiting device mark: its times into its row (and the trace, on the
 * device's line), then given back. keep = 0 drops them unread. */
static void prof_device_flush(hd_ctx *ctx, int keep) {
    hd_profile *p = ctx->prof;
    if (!p) return;
    for (int i = 0; i < p->npending; i++) {
        prof_pending *w = &p->pending[i];
        double start = 0, dur = 0;
        if (keep && w->dev->times(ctx, w->mark, &start, &dur) == HD_OK) {
            p->rows[w->row].device += dur;
            prof_event_add(p, w->row, 2 + w->device, NULL, start, dur);
        } else if (keep) {
            hd_error_clear(ctx);
        }
        w->dev->release(ctx, w->mark);
    }
    p->npending = 0;
}

void hd_profile_device_span(hd_ctx *ctx, int row, int device, const hd_profile_device *dev,
                            void *mark) {
    hd_profile *p = ctx->prof;
    if (p && !p->pending) p->pending = malloc(HD_PROF_DEVICE_PENDING * sizeof *p->pending);
    if (!p || !p->pending || row < 0 || row >= HD_PROF_ROWS) {
        dev->release(ctx, mark);
        return;
    }
    if (p->npending == HD_PROF_DEVICE_PENDING) prof_device_flush(ctx, 1);
    p->pending[p->npending++] = (prof_pending){row, device, dev, mark};
}

hd_status hd_profile_set(hd_ctx *ctx, int on, const char *trace) {
    hd_profile *p = ctx->prof;
    if (!p && !on) return HD_OK;
    if (!p) {
        p = calloc(1, sizeof *p);
        if (!p) return hd_error(ctx, HD_ERR_MEMORY, "out of memory starting the profiler");
        p->start = prof_now();
        ctx->prof = p;
    }
    if (trace) {
        char *t = strdup(trace);
        if (!t) return hd_error(ctx, HD_ERR_MEMORY, "out of memory starting the profiler");
        free(p->trace);
        p->trace = t;
    }
    p->on = on;
    return HD_OK;
}

int hd_profile_on(const hd_ctx *ctx) {
    return ctx->prof && ctx->prof->on;
}

void hd_profile_reset(hd_ctx *ctx) {
    hd_profile *p = ctx->prof;
    if (!p) return;
    prof_device_flush(ctx, 0);
    memset(p->rows, 0, sizeof p->rows);
    p->nevents = 0;
    p->dropped = 0;
    p->start = prof_now();
}

void hd_profile_release(hd_ctx *ctx) {
    hd_profile *p = ctx->prof;
    if (!p) return;
    if (p->trace && hd_profile_write_trace(ctx, p->trace)) {
        fprintf(stderr, "hodu: %s\n", ctx->errmsg);
        hd_error_clear(ctx);
    }
    prof_device_flush(ctx, 0);
    free(p->pending);
    free(p->trace);
    free(p->events);
    free(p);
    ctx->prof = NULL;
}

/* ---- spans ---- */

double hd_profile_begin(hd_ctx *ctx) {
    hd_profile *p = ctx->prof;
    if (p->depth < PROF_DEPTH) p->child[p->depth] = 0;
    p->depth++;
    return prof_now();
}

static void prof_event_add(hd_profile *p, int row, int tid, const char *label, double t0,
                           double dur) {
    if (!p->trace) return;
    if (p->nevents == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 4096;
        prof_event *e = cap <= PROF_MAX_EVENTS ? realloc(p->events, cap * sizeof *e) : NULL;
        if (!e) {
            p->dropped++;
            return;
        }
        p->events = e;
        p->cap = cap;
    }
    prof_event *e = &p->events[p->nevents++];
    e->ts = t0 - p->start;
    e->dur = dur;
    e->row = row;
    e->tid = tid;
    snprintf(e->label, sizeof e->label, "%s", label ? label : "");
    for (char *c = e->label; *c; c++) /* a JSON string as it is */
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = '_';
}

void hd_profile_end(hd_ctx *ctx, int row, const char *label, double t0, double bytes,
                    double flops) {
    hd_profile *p = ctx->prof;
    double dur = prof_now() - t0;
    int d = --p->depth;
    double inner = d < PROF_DEPTH ? p->child[d] : 0;
    if (d > 0 && d - 1 < PROF_DEPTH) p->child[d - 1] += dur;
    prof_row *r = &p->rows[row];
    r->calls++;
    r->total += dur;
    r->self += dur > inner ? dur - inner : 0;
    r->bytes += bytes;
    r->flops += flops;
    prof_event_add(p, row, 1, label, t0, dur);
}

/* ---- ops ---- */

static double op_flops(hd_op op, hd_tensor *const *in, int nin, const hd_tensor *out) {
    if (op == HD_OP_MATMUL && nin == 2 && in[0]->ndim > 0)
        return 2.0 * (double)out->numel * (double)in[0]->shape[in[0]->ndim - 1];
    if (op == HD_OP_CONV2D && nin >= 2 && in[1]->ndim == 4) /* w: [co, ci/g, kh, kw] */
        return 2.0 * (double)out->numel *
               (double)(in[1]->shape[1] * in[1]->shape[2] * in[1]->shape[3]);
    return 0;
}

hd_status hd_profile_op(hd_ctx *ctx, hd_profile_op_fn run, hd_op op, hd_tensor *const *in, int nin,
                        const hd_attrs *attrs, hd_tensor **out) {
    if (!ctx->prof->on || ctx->trace) return run(ctx, op, in, nin, attrs, out);
    double t0 = hd_profile_begin(ctx);
    hd_status st = run(ctx, op, in, nin, attrs, out);
    double bytes = 0, flops = 0;
    if (!st && *out) {
        int view = hd_op_infos[op].kind == HD_KIND_VIEW;
        for (int i = 0; i < nin && !view; i++) bytes += in[i] ? (double)hd_tensor_nbytes(in[i]) : 0;
        bytes += view ? 0 : (double)hd_tensor_nbytes(*out);
        flops = op_flops(op, in, nin, *out);
    }
    hd_profile_end(ctx, op, NULL, t0, bytes, flops);
    return st;
}

/* ---- the table ---- */

int hd_profile_row(hd_ctx *ctx, int row, hd_profile_stats *out) {
    memset(out, 0, sizeof *out);
    prof_device_flush(ctx, 1);
    if (!ctx->prof || row < 0 || row >= HD_PROF_ROWS || !ctx->prof->rows[row].calls) return 0;
    const prof_row *r = &ctx->prof->rows[row];
    out->calls = r->calls;
    out->total = r->total;
    out->self = r->self;
    out->bytes = r->bytes;
    out->flops = r->flops;
    out->device = r->device;
    return 1;
}

const char *hd_profile_row_name(int row) {
    if (row == HD_PROF_COMPILE) return "compile";
    if (row == HD_PROF_RUN) return "compiled run";
    if (row == HD_PROF_ADAM) return "adam_update";
    if (row == HD_PROF_SGD) return "sgd_update";
    if (row == HD_PROF_ADAGRAD) return "adagrad_update";
    if (row == HD_PROF_LION) return "lion_update";
    if (row == HD_PROF_RMSPROP) return "rmsprop_update";
    return hd_op_name((hd_op)row);
}

static int by_total(const void *a, const void *b, void *rows) {
    const prof_row *r = rows;
    double x = r[*(const int *)a].total, y = r[*(const int *)b].total;
    return x < y ? 1 : x > y ? -1 : *(const int *)a - *(const int *)b;
}

/* Insertion sort by total time (at most HD_PROF_ROWS rows). */
static int prof_order(const hd_profile *p, int *order) {
    int n = 0;
    for (int r = 0; r < HD_PROF_ROWS; r++) {
        if (!p->rows[r].calls) continue;
        int i = n++;
        while (i > 0 && by_total(&r, &order[i - 1], (void *)p->rows) < 0) {
            order[i] = order[i - 1];
            i--;
        }
        order[i] = r;
    }
    return n;
}

static void prof_rate(const prof_row *r, char *buf, size_t n) {
    if (r->total <= 0) {
        snprintf(buf, n, "-");
    } else if (r->flops > 0) {
        snprintf(buf, n, "%.2f GFLOP/s", r->flops / r->total * 1e-9);
    } else if (r->bytes > 0) {
        snprintf(buf, n, "%.2f GB/s", r->bytes / r->total * 1e-9);
    } else {
        snprintf(buf, n, "-");
    }
}

/* With any time on a device, the table has a "device ms" column. */
static int prof_has_device(const hd_profile *p) {
    for (int r = 0; r < HD_PROF_ROWS; r++)
        if (p->rows[r].device > 0) return 1;
    return 0;
}

char *hd_profile_table(hd_ctx *ctx) {
    prof_device_flush(ctx, 1);
    hd_profile *p = ctx->prof;
    int order[HD_PROF_ROWS];
    int n = p ? prof_order(p, order) : 0, dev = p && prof_has_device(p);
    size_t cap = 256 + (size_t)n * 140, len = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    len += (size_t)snprintf(s + len, cap - len, "%-22s %9s %11s %11s %11s%s  %s\n", "op", "calls",
                            "total ms", "self ms", "mean us", dev ? "   device ms" : "", "rate");
    for (int i = 0; i < n; i++) {
        const prof_row *r = &p->rows[order[i]];
        char rate[40], dcol[16] = "";
        prof_rate(r, rate, sizeof rate);
        if (dev) snprintf(dcol, sizeof dcol, " %11.3f", r->device * 1e3);
        len += (size_t)snprintf(s + len, cap - len, "%-22s %9llu %11.3f %11.3f %11.2f%s  %s\n",
                                hd_profile_row_name(order[i]), (unsigned long long)r->calls,
                                r->total * 1e3, r->self * 1e3, r->total / (double)r->calls * 1e6,
                                dcol, rate);
    }
    if (!n) snprintf(s + len, cap - len, "(nothing recorded: profiling is off)\n");
    return s;
}

/* ---- the Chrome trace ---- */

hd_status hd_profile_write_trace(hd_ctx *ctx, const char *path) {
    prof_device_flush(ctx, 1);
    hd_profile *p = ctx->prof;
    FILE *f = fopen(path, "w");
    if (!f) return hd_error(ctx, HD_ERR_IO, "profile: cannot write the trace to %s", path);
    fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [", f);
    for (size_t i = 0; p && i < p->nevents; i++) {
        const prof_event *e = &p->events[i];
        const char *cat = e->tid > 1                  ? "device"
                          : e->row == HD_PROF_COMPILE ? "compile"
                          : e->row == HD_PROF_RUN     ? "compiled"
                                                      : "op";
        fprintf(f,
                "%s\n{\"name\": \"%s%s%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, "
                "\"dur\": %.3f, \"pid\": 1, \"tid\": %d}",
                i ? "," : "", hd_profile_row_name(e->row), e->label[0] ? " " : "", e->label, cat,
                e->ts * 1e6, e->dur * 1e6, e->tid);
    }
    fputs("\n]}\n", f);
    int bad = ferror(f);
    if (fclose(f) || bad)
        return hd_error(ctx, HD_ERR_IO, "profile: cannot write the trace to %s", path);
    return HD_OK;
}
