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
    double total, self, bytes, flops;
} prof_row;

typedef struct prof_event {
    double ts, dur; /* seconds from the start */
    int row;
    char label[28];
} prof_event;

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
};

static double prof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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

static void prof_event_add(hd_profile *p, int row, const char *label, double t0, double dur) {
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
    prof_event_add(p, row, label, t0, dur);
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

int hd_profile_row(const hd_ctx *ctx, int row, hd_profile_stats *out) {
    memset(out, 0, sizeof *out);
    if (!ctx->prof || row < 0 || row >= HD_PROF_ROWS || !ctx->prof->rows[row].calls) return 0;
    const prof_row *r = &ctx->prof->rows[row];
    out->calls = r->calls;
    out->total = r->total;
    out->self = r->self;
    out->bytes = r->bytes;
    out->flops = r->flops;
    return 1;
}

const char *hd_profile_row_name(int row) {
    if (row == HD_PROF_COMPILE) return "compile";
    if (row == HD_PROF_RUN) return "compiled run";
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

char *hd_profile_table(hd_ctx *ctx) {
    hd_profile *p = ctx->prof;
    int order[HD_PROF_ROWS];
    int n = p ? prof_order(p, order) : 0;
    size_t cap = 256 + (size_t)n * 120, len = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    len += (size_t)snprintf(s + len, cap - len, "%-22s %9s %11s %11s %11s  %s\n", "op", "calls",
                            "total ms", "self ms", "mean us", "rate");
    for (int i = 0; i < n; i++) {
        const prof_row *r = &p->rows[order[i]];
        char rate[40];
        prof_rate(r, rate, sizeof rate);
        len += (size_t)snprintf(s + len, cap - len, "%-22s %9llu %11.3f %11.3f %11.2f  %s\n",
                                hd_profile_row_name(order[i]), (unsigned long long)r->calls,
                                r->total * 1e3, r->self * 1e3, r->total / (double)r->calls * 1e6,
                                rate);
    }
    if (!n) snprintf(s + len, cap - len, "(nothing recorded: profiling is off)\n");
    return s;
}

/* ---- the Chrome trace ---- */

hd_status hd_profile_write_trace(hd_ctx *ctx, const char *path) {
    hd_profile *p = ctx->prof;
    FILE *f = fopen(path, "w");
    if (!f) return hd_error(ctx, HD_ERR_IO, "profile: cannot write the trace to %s", path);
    fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [", f);
    for (size_t i = 0; p && i < p->nevents; i++) {
        const prof_event *e = &p->events[i];
        const char *cat = e->row == HD_PROF_COMPILE ? "compile"
                          : e->row == HD_PROF_RUN   ? "compiled"
                                                    : "op";
        fprintf(f,
                "%s\n{\"name\": \"%s%s%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, "
                "\"dur\": %.3f, \"pid\": 1, \"tid\": 1}",
                i ? "," : "", hd_profile_row_name(e->row), e->label[0] ? " " : "", e->label, cat,
                e->ts * 1e6, e->dur * 1e6);
    }
    fputs("\n]}\n", f);
    int bad = ferror(f);
    if (fclose(f) || bad)
        return hd_error(ctx, HD_ERR_IO, "profile: cannot write the trace to %s", path);
    return HD_OK;
}
