/* Device times for the profiler (hd_profile_device_span): a pair of
 * events recorded on the device's stream around a piece of work (an eager
 * op, or a compiled run's graph), read when the profiler reports. A
 * reference event per device, recorded once with the stream idle, puts
 * the spans on the host's clock for the trace. Nothing is recorded while
 * a CUDA Graph is captured (an event there would become a node of it). */
#if HODU_HAVE_CUDA
#include "cuda_int.h"
#include "hd_profile.h"

#include <stdlib.h>

typedef struct cuda_prof_mark {
    int device;
    CUevent start, end;
} cuda_prof_mark;

static void prof_release(hd_ctx *ctx, void *m) {
    (void)ctx;
    cuda_prof_mark *k = m;
    const hd_cuda_api *a = hd_cuda_api_get();
    if (k->start) a->event_destroy(k->start);
    if (k->end) a->event_destroy(k->end);
    free(k);
}

static hd_status prof_times(hd_ctx *ctx, void *m, double *start, double *dur) {
    cuda_prof_mark *k = m;
    const hd_cuda_api *a = hd_cuda_api_get();
    hd_cuda_dev *d = hd_cuda_dev_get(ctx, k->device);
    if (!d) return ctx->status;
    float ms = 0, off = 0;
    if (!d->prof_epoch || a->event_synchronize(k->end) != CUDA_SUCCESS ||
        a->event_elapsed_time(&ms, k->start, k->end) != CUDA_SUCCESS ||
        a->event_elapsed_time(&off, d->prof_epoch, k->start) != CUDA_SUCCESS)
        return hd_error(ctx, HD_ERR_RUNTIME, "cuda: the profiler's events failed");
    *start = d->prof_epoch_host + 1e-3 * (double)off;
    *dur = 1e-3 * (double)ms;
    return HD_OK;
}

static const hd_profile_device cuda_prof_device = {prof_times, prof_release};

/* d's reference event: the stream drained, the event recorded and waited
 * for, and the host's time then. 0 when the driver refuses. */
static int prof_epoch(hd_cuda_dev *d, const hd_cuda_api *a) {
    if (d->prof_epoch) return 1;
    CUevent e = NULL;
    if (a->stream_synchronize(d->stream) != CUDA_SUCCESS || a->event_create(&e, 0) != CUDA_SUCCESS)
        return 0;
    if (a->event_record(e, d->stream) != CUDA_SUCCESS || a->event_synchronize(e) != CUDA_SUCCESS) {
        a->event_destroy(e);
        return 0;
    }
    d->prof_epoch = e;
    d->prof_epoch_host = hd_profile_clock();
    return 1;
}

void *hd_cuda_prof_begin(hd_ctx *ctx, hd_cuda_dev *d, int device) {
    const hd_cuda_api *a = hd_cuda_api_get();
    if (!hd_profile_on(ctx) || ctx->trace || d->pool || !a->events_ok || !prof_epoch(d, a))
        return NULL;
    cuda_prof_mark *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->device = device;
    if (a->event_create(&k->start, 0) != CUDA_SUCCESS ||
        a->event_create(&k->end, 0) != CUDA_SUCCESS ||
        a->event_record(k->start, d->stream) != CUDA_SUCCESS) {
        prof_release(ctx, k);
        return NULL;
    }
    return k;
}

void hd_cuda_prof_end(hd_ctx *ctx, hd_cuda_dev *d, void *mark, int row) {
    cuda_prof_mark *k = mark;
    if (!k) return;
    if (hd_cuda_api_get()->event_record(k->end, d->stream) != CUDA_SUCCESS) {
        prof_release(ctx, k);
        return;
    }
    hd_profile_device_span(ctx, row, k->device, &cuda_prof_device, k);
}

void hd_cuda_prof_release(hd_cuda_dev *d) {
    if (d->prof_epoch) hd_cuda_api_get()->event_destroy(d->prof_epoch);
    d->prof_epoch = NULL;
}
#endif
