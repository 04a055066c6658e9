/* A CUDA device emulated on the CPU, for the test suite: one shared library
 * that stands in for the driver (libcuda), NVRTC and cuBLAS, loaded by the
 * CUDA backend through HODU_CUDA_DRIVER, HODU_CUDA_NVRTC and
 * HODU_CUDA_BLAS. It lets every CUDA code path run (and be checked against
 * the cpu backend) on machines without a GPU.
 *
 * - Device memory is out of host code's reach, as on a GPU: the pointers
 *   Hodu gets lie in a PROT_NONE mapping, the emulator works through a
 *   second, read-write mapping of the same pages (see "memory" below).
 *   Copies and kernels run synchronously, in stream order. Copies are
 *   checked against the allocations they touch.
 * - "NVRTC" (emu_nvrtc.c) compiles the generated CUDA C as host C++ (emu_device.h is
 *   force-included) into a shared object: that is the module image.
 * - A launch runs the grid block by block; a block's threads are fibers
 *   (ucontext) that switch at __syncthreads. A barrier that some threads of
 *   a block never reach fails the launch (it would hang or misbehave on a
 *   GPU).
 * - Stream capture records launches, copies, memsets and GEMMs as a graph
 *   that cuGraphLaunch replays with the arguments captured by value.
 *   Synchronizing a capturing stream, or a copy from or to host memory in
 *   one, invalidates the capture, as the driver does.
 * - cuBLAS (emu_blas.c): cublasGemmEx and cublasGemmStridedBatchedEx,
 *   column-major, from their documented definitions (sums in double).
 * - cuSOLVER (emu_solver.c): the dense routines the backend calls, through
 *   OpenBLAS's LAPACK (their documented definitions), arguments checked.
 * - NCCL (emu_nccl.c): the collectives the backend calls, between the
 *   processes of an mpirun job, through Open MPI on the host view.
 *
 * Only the entry points the backend uses exist; the types are spelled out
 * here (plain integers and pointers at the ABI), so no CUDA header is
 * needed. HODU_CUDA_EMU_DEVICES (1 to 8) is the number of devices (see
 * "devices" below). HODU_EMU_MEM_LIMIT (bytes) caps the device memory, to reach the
 * out-of-memory paths; HODU_EMU_KEEP keeps each compiled source (its path
 * goes to stderr); HODU_EMU_CXX and HODU_EMU_OPT choose the compiler and
 * its optimization flag. HODU_EMU_NOLAUNCH=1 makes launches (and the
 * kernels of graph replays) do nothing, for measuring the host's time per
 * op. hodu_emu_calls(name) counts the calls of each driver entry point
 * (hodu_emu_calls_reset zeroes them), for tests that count driver calls. */
#define _GNU_SOURCE
#include "emu_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#define EMU_COUNT_NAME(name) #name,
static const char *const emu_count_names[EMU_N_COUNT] = {EMU_COUNTED(EMU_COUNT_NAME)};
unsigned long long emu_counts[EMU_N_COUNT];

/* Calls of the entry point `name` (as exported, e.g. "cuLaunchKernel")
 * since the last reset; NULL: all of them. */
EMU_EXPORT unsigned long long hodu_emu_calls(const char *name) {
    unsigned long long n = 0;
    for (int i = 0; i < EMU_N_COUNT; i++)
        if (!name || !strcmp(name, emu_count_names[i])) n += emu_counts[i];
    return n;
}

EMU_EXPORT void hodu_emu_calls_reset(void) {
    memset(emu_counts, 0, sizeof emu_counts);
}

/* HODU_EMU_CALLS_AT_EXIT=1: the counts that are not 0, on stderr at exit
 * (for tests that run hodu as a program). */
static void emu_calls_report(void) {
    char buf[4096]; /* one write: the line stays whole beside other processes' */
    size_t n = (size_t)snprintf(buf, sizeof buf, "cuda emulator calls:");
    for (int i = 0; i < EMU_N_COUNT && n < sizeof buf; i++)
        if (emu_counts[i])
            n += (size_t)snprintf(buf + n, sizeof buf - n, " %s=%llu", emu_count_names[i],
                                  emu_counts[i]);
    if (n < sizeof buf - 1) buf[n++] = '\n';
    fflush(stderr);
    if (write(2, buf, n < sizeof buf ? n : sizeof buf - 1) < 0) return;
}

__attribute__((constructor)) static void emu_calls_at_exit(void) {
    const char *s = getenv("HODU_EMU_CALLS_AT_EXIT");
    if (s && *s == '1') atexit(emu_calls_report);
}

/* HODU_EMU_NOLAUNCH: launches are checked, counted and then dropped. */
static int emu_nolaunch(void) {
    static int v = -1;
    if (v < 0) {
        const char *s = getenv("HODU_EMU_NOLAUNCH");
        v = s && *s && strcmp(s, "0") != 0;
    }
    return v;
}

/* ---- memory: one file mapped twice ----
 *
 * Device memory is not addressable from host code, as on a GPU: every
 * allocation lies in one memfd mapped twice. The device view, whose
 * addresses are the CUdeviceptrs Hodu gets, is PROT_NONE, so a host load
 * or store through a device pointer faults at once (under AddressSanitizer
 * too: its shadow says "addressable" and the page says no, so it reports a
 * SEGV with the host code's stack). The host view, read-write, is the
 * emulator's own: copies, memsets, kernels and GEMMs reach the same pages
 * there. Both views have the same size, so a device address translates by
 * one subtraction and one addition (emu_mem_host), whatever allocation or
 * offset it points at. Allocations are page-aligned offsets into the file,
 * first fit; freeing punches the pages out of the file. */

typedef struct emu_alloc {
    size_t off, n; /* in the file; the list is sorted by off */
    int dev;       /* the device whose context allocated it */
} emu_alloc;

static struct {
    char *dev, *host; /* the two views */
    size_t size;
    int fd;
    int failed; /* the views could not be made: every allocation fails */
} arena = {NULL, NULL, 0, -1, 0};

static emu_alloc *mem_list;
static size_t mem_count, mem_cap, mem_used;

#define MEM_PAGE ((size_t)4096)

static size_t mem_limit(void) {
    const char *s = getenv("HODU_EMU_MEM_LIMIT");
    return s && *s ? (size_t)strtoull(s, NULL, 10) : (size_t)4 << 30;
}

/* The views, made on the first allocation: twice the limit of address
 * space (room for fragmentation), at least 16 GiB, at most 1 TiB; the file
 * is sparse, so only what is written takes memory. */
static int arena_open(void) {
    if (arena.dev || arena.failed) return arena.dev != NULL;
    size_t lim = mem_limit(), size = (size_t)16 << 30;
    if (lim < ((size_t)1 << 40) / 2 && lim * 2 > size)
        size = (lim * 2 + MEM_PAGE - 1) & ~(MEM_PAGE - 1);
    if (lim >= ((size_t)1 << 40) / 2) size = (size_t)1 << 40;
    int fd = memfd_create("hodu-cuda-emu", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) goto fail;
    void *d = mmap(NULL, size, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (d == MAP_FAILED) goto fail;
    void *h = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (h == MAP_FAILED) {
        munmap(d, size);
        goto fail;
    }
    arena.dev = d, arena.host = h, arena.size = size, arena.fd = fd;
    return 1;
fail:
    fprintf(stderr, "cuda emulator: cannot map device memory: %s\n", strerror(errno));
    if (fd >= 0) close(fd);
    arena.failed = 1;
    return 0;
}

/* Is p a device address (in the device view, allocated or not)? */
static int mem_is_device(uintptr_t p) {
    return arena.dev && p >= (uintptr_t)arena.dev && p - (uintptr_t)arena.dev < arena.size;
}

/* The host view's address of device address p (p must be one). */
void *emu_mem_host(CUdeviceptr p) {
    return arena.host + ((uintptr_t)p - (uintptr_t)arena.dev);
}

/* The index of the last allocation starting at or before off, or -1. */
static long mem_find(size_t off) {
    size_t lo = 0, hi = mem_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (mem_list[mid].off <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (long)lo - 1;
}

/* Does [p, p + n) lie inside one allocation? */
int emu_mem_valid(CUdeviceptr p, size_t n) {
    if (!mem_is_device((uintptr_t)p)) return 0;
    size_t off = (uintptr_t)p - (uintptr_t)arena.dev;
    long i = mem_find(off);
    return i >= 0 && off + n >= off && off + n <= mem_list[i].off + mem_list[i].n;
}

/* The device of the allocation holding p (its end included: an empty
 * view may point there), or -1 where p is in none. */
static int mem_dev(uintptr_t p) {
    if (!mem_is_device(p)) return -1;
    size_t off = p - (uintptr_t)arena.dev;
    long i = mem_find(off);
    return i >= 0 && off <= mem_list[i].off + mem_list[i].n ? mem_list[i].dev : -1;
}

/* [p, p + n) inside one allocation of device dev. */
int emu_mem_valid_on(CUdeviceptr p, size_t n, int dev) {
    return emu_mem_valid(p, n) && mem_dev((uintptr_t)p) == dev;
}

/* A host pointer the caller passed that is really device memory: the
 * call fails (a GPU's driver would not read it as host memory either). */
int emu_mem_host_arg_bad(const void *p, const char *what) {
    if (!mem_is_device((uintptr_t)p)) return 0;
    fprintf(stderr, "cuda emulator: %s: host pointer %p is device memory\n", what, p);
    return 1;
}

/* The first page-aligned gap of n bytes: its offset and the index the
 * allocation goes to. */
static int mem_gap(size_t n, size_t *off, size_t *at) {
    size_t prev_end = 0;
    for (size_t i = 0; i <= mem_count; i++) {
        size_t next = i < mem_count ? mem_list[i].off : arena.size;
        if (next >= prev_end && next - prev_end >= n) {
            *off = prev_end;
            *at = i;
            return 1;
        }
        if (i < mem_count)
            prev_end = (mem_list[i].off + mem_list[i].n + MEM_PAGE - 1) & ~(MEM_PAGE - 1);
    }
    return 0;
}

/* ---- devices: HODU_CUDA_EMU_DEVICES of them (1 to 8, default 1), each
 * with its primary context. Memory belongs to the device whose context was
 * current when it was allocated; a kernel, copy or GEMM on one device's
 * stream that reaches another device's memory fails, as it faults on
 * GPUs without peer access (cuMemcpyPeerAsync is the way across). */

#define EMU_MAX_DEVICES 8
enum { CUDA_ERROR_INVALID_CONTEXT = 201 };

static int emu_ndev(void) {
    static int n = 0;
    if (!n) {
        const char *s = getenv("HODU_CUDA_EMU_DEVICES");
        long v = s && *s ? strtol(s, NULL, 10) : 1;
        n = v < 1 ? 1 : v > EMU_MAX_DEVICES ? EMU_MAX_DEVICES : (int)v;
    }
    return n;
}

static int ctx_markers[EMU_MAX_DEVICES];
static _Thread_local int emu_cur = -1; /* the current context's device */

int emu_current_dev(void) {
    return emu_cur;
}

static int emu_dev_ok(int dev) {
    return dev >= 0 && dev < emu_ndev();
}

/* The device of a primary context handle, or -1. */
static int emu_ctx_dev(const void *ctx) {
    for (int i = 0; i < emu_ndev(); i++)
        if (ctx == &ctx_markers[i]) return i;
    return -1;
}

EMU_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *out, size_t n) {
    EMU_COUNT(cuMemAlloc_v2);
    if (!out || n == 0) return CUDA_ERROR_INVALID_VALUE;
    if (emu_cur < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (mem_used + n < n || mem_used + n > mem_limit() || !arena_open())
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (mem_count == mem_cap) {
        size_t cap = mem_cap ? mem_cap * 2 : 64;
        emu_alloc *l = realloc(mem_list, cap * sizeof *l);
        if (!l) return CUDA_ERROR_OUT_OF_MEMORY;
        mem_list = l;
        mem_cap = cap;
    }
    size_t off, at;
    if (n > arena.size || !mem_gap(n, &off, &at)) return CUDA_ERROR_OUT_OF_MEMORY;
    memmove(mem_list + at + 1, mem_list + at, (mem_count - at) * sizeof *mem_list);
    mem_list[at] = (emu_alloc){off, n, emu_cur};
    mem_count++;
    mem_used += n;
    memset(arena.host + off, 0xA5, n); /* device memory starts as garbage, not zeros */
    *out = (CUdeviceptr)(uintptr_t)(arena.dev + off);
    return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    EMU_COUNT(cuMemFree_v2);
    if (!mem_is_device((uintptr_t)p)) return CUDA_ERROR_INVALID_VALUE;
    size_t off = (uintptr_t)p - (uintptr_t)arena.dev;
    long i = mem_find(off);
    if (i < 0 || mem_list[i].off != off) return CUDA_ERROR_INVALID_VALUE;
    size_t len = (mem_list[i].n + MEM_PAGE - 1) & ~(MEM_PAGE - 1);
    fallocate(arena.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
    mem_used -= mem_list[i].n;
    memmove(mem_list + i, mem_list + i + 1, (mem_count - (size_t)i - 1) * sizeof *mem_list);
    mem_count--;
    return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuInit(unsigned flags) {
    return flags ? CUDA_ERROR_INVALID_VALUE : 0;
}
EMU_EXPORT CUresult cuDeviceGetCount(int *n) {
    *n = emu_ndev();
    return CUDA_SUCCESS;
}
EMU_EXPORT CUresult cuDeviceGet(int *dev, int i) {
    if (!emu_dev_ok(i)) return CUDA_ERROR_INVALID_VALUE;
    *dev = i;
    return CUDA_SUCCESS;
}
/* The SMs the device reports: an H100's 132, or HODU_CUDA_EMU_SMS (the
 * grids sized from it must be right for any count). */
static int emu_sms(void) {
    const char *s = getenv("HODU_CUDA_EMU_SMS");
    long v = s && *s ? strtol(s, NULL, 10) : 132;
    return v < 1 ? 1 : v > 4096 ? 4096 : (int)v;
}

EMU_EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
    if (!emu_dev_ok(dev)) return CUDA_ERROR_INVALID_VALUE;
    *v = attr == ATTR_CC_MAJOR     ? 8
         : attr == ATTR_SMS        ? emu_sms()
         : attr == ATTR_SM_THREADS ? 2048
                                   : 0;
    return CUDA_SUCCESS;
}
EMU_EXPORT CUresult cuDeviceGetName(char *buf, int n, int dev) {
    if (!emu_dev_ok(dev) || n <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(buf, (size_t)n, "Hodu CUDA emulator");
    return CUDA_SUCCESS;
}
EMU_EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    if (!emu_dev_ok(dev)) return CUDA_ERROR_INVALID_VALUE;
    *ctx = &ctx_markers[dev];
    return CUDA_SUCCESS;
}
EMU_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
    return emu_dev_ok(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EMU_EXPORT CUresult cuCtxSetCurrent(void *ctx) {
    EMU_COUNT(cuCtxSetCurrent);
    int dev = emu_ctx_dev(ctx);
    if (dev < 0) return CUDA_ERROR_INVALID_VALUE;
    emu_cur = dev;
    return CUDA_SUCCESS;
}
EMU_EXPORT CUresult cuStreamCreate(emu_stream **s, unsigned flags) {
    (void)flags;
    if (emu_cur < 0) return CUDA_ERROR_INVALID_CONTEXT;
    *s = calloc(1, sizeof **s);
    if (*s) (*s)->dev = emu_cur;
    return *s ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static void graph_nodes_free(emu_node *n);

EMU_EXPORT CUresult cuStreamDestroy_v2(emu_stream *s) {
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    graph_nodes_free(s->head);
    free(s);
    return CUDA_SUCCESS;
}

/* An operation the stream cannot capture: the capture is invalidated. */
static CUresult stream_unsupported(emu_stream *s) {
    s->invalidated = 1;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

/* The device a stream's work runs on (the legacy stream: the current
 * context's). */
int emu_stream_dev(const emu_stream *s) {
    return s ? s->dev : emu_cur;
}

/* Does every pointer in ptrs[0..n) (0: none) lie in device dev's memory
 * or outside every allocation? what names the call for the message. */
int emu_dev_ptrs_ok(const uintptr_t *ptrs, int n, int dev, const char *what) {
    for (int i = 0; i < n; i++) {
        int d = ptrs[i] ? mem_dev(ptrs[i]) : -1;
        if (d >= 0 && d != dev) {
            fprintf(stderr,
                    "cuda emulator: %s: argument %d (%p) is memory of device %d, the work runs "
                    "on device %d\n",
                    what, i, (void *)ptrs[i], d, dev);
            return 0;
        }
    }
    return 1;
}

/* ---- pinned host memory (cuMemHostAlloc) ----
 * A GPU reads pinned memory for a copy up after cuMemcpyHtoDAsync has
 * returned, while the host goes on; the host must not write those bytes
 * again before it has waited for an event recorded after the copy (or for
 * the stream). The emulator copies at once and cannot see a late write,
 * so it refuses what such a write comes before: a second copy from the
 * same bytes, or their release, while the first copy is not known done.
 * Copies are numbered; an event holds the number reached when recorded,
 * and waiting for it marks every copy up to that number done. */
#define EMU_PINNED      64  /* pinned allocations */
#define EMU_PIN_PENDING 256 /* copies not known done, remembered */

typedef struct emu_pin_copy {
    uintptr_t lo, hi;
    unsigned long long seq;
} emu_pin_copy;

static struct {
    void *base[EMU_PINNED];
    size_t size[EMU_PINNED];
    emu_pin_copy pending[EMU_PIN_PENDING];
    int npending;
    unsigned long long seq, done; /* copies issued; known done up to */
} pin;

static int pin_find(uintptr_t p) {
    for (int i = 0; i < EMU_PINNED; i++)
        if (pin.base[i] && p >= (uintptr_t)pin.base[i] && p < (uintptr_t)pin.base[i] + pin.size[i])
            return i;
    return -1;
}

/* Copies done up to seq: forgotten. */
static void pin_mark_done(unsigned long long seq) {
    if (seq > pin.done) pin.done = seq;
    int k = 0;
    for (int i = 0; i < pin.npending; i++)
        if (pin.pending[i].seq > pin.done) pin.pending[k++] = pin.pending[i];
    pin.npending = k;
}

/* A pending copy reading [lo, hi): the bytes may not be written yet. */
static int pin_busy(uintptr_t lo, uintptr_t hi, const char *what) {
    for (int i = 0; i < pin.npending; i++)
        if (pin.pending[i].lo < hi && lo < pin.pending[i].hi) {
            fprintf(stderr,
                    "cuda emulator: %s: pinned bytes %p..%p are still being copied to the device "
                    "(copy %llu, not waited for): the host wrote them too early\n",
                    what, (void *)lo, (void *)hi, pin.pending[i].seq);
            return 1;
        }
    return 0;
}

/* A copy up from src: refused while its pinned bytes are busy, else
 * remembered (the oldest forgotten when the list is full). */
static int pin_copy_start(const void *src, size_t n) {
    uintptr_t lo = (uintptr_t)src, hi = lo + n;
    if (n == 0 || pin_find(lo) < 0) return 1;
    if (pin_busy(lo, hi, "cuMemcpyHtoDAsync")) return 0;
    if (pin.npending == EMU_PIN_PENDING) {
        memmove(pin.pending, pin.pending + 1, sizeof pin.pending - sizeof pin.pending[0]);
        pin.npending--;
    }
    pin.pending[pin.npending++] = (emu_pin_copy){lo, hi, ++pin.seq};
    return 1;
}

EMU_EXPORT CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) {
    EMU_COUNT(cuMemHostAlloc);
    if (!p || n == 0 || flags) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < EMU_PINNED; i++)
        if (!pin.base[i]) {
            if (!(pin.base[i] = malloc(n))) return CUDA_ERROR_OUT_OF_MEMORY;
            pin.size[i] = n;
            *p = pin.base[i];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_OUT_OF_MEMORY;
}

EMU_EXPORT CUresult cuMemFreeHost(void *p) {
    EMU_COUNT(cuMemFreeHost);
    int i = pin_find((uintptr_t)p);
    if (i < 0 || pin.base[i] != p) return CUDA_ERROR_INVALID_VALUE;
    if (pin_busy((uintptr_t)p, (uintptr_t)p + pin.size[i], "cuMemFreeHost"))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    free(p);
    pin.base[i] = NULL;
    return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuStreamSynchronize(emu_stream *s) {
    EMU_COUNT(cuStreamSynchronize);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    if (s->capturing) return stream_unsupported(s);
    pin_mark_done(pin.seq);
    return CUDA_SUCCESS;
}

/* Events: work runs when it is launched here, so an event's time is the
 * host's clock when it is recorded. */
typedef struct emu_event {
    int recorded;
    double t;               /* seconds */
    unsigned long long seq; /* pinned copies issued when recorded */
} emu_event;

static double emu_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

EMU_EXPORT CUresult cuEventCreate(emu_event **e, unsigned flags) {
    EMU_COUNT(cuEventCreate);
    if (!e || (flags & ~2u)) return CUDA_ERROR_INVALID_VALUE; /* 2: DISABLE_TIMING */
    *e = calloc(1, sizeof **e);
    return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EMU_EXPORT CUresult cuEventRecord(emu_event *e, emu_stream *s) {
    EMU_COUNT(cuEventRecord);
    if (!e || !s) return CUDA_ERROR_INVALID_HANDLE;
    if (s->capturing) return stream_unsupported(s);
    e->recorded = 1;
    e->t = emu_clock();
    e->seq = pin.seq;
    return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuEventSynchronize(emu_event *e) {
    EMU_COUNT(cuEventSynchronize);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    if (e->recorded) pin_mark_done(e->seq);
    return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuEventElapsedTime_v2(float *ms, emu_event *a, emu_event *b) {
    EMU_COUNT(cuEventElapsedTime_v2);
    if (!ms || !a || !b || !a->recorded || !b->recorded) return CUDA_ERROR_INVALID_HANDLE;
    *ms = (float)((b->t - a->t) * 1e3);
    return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuEventDestroy_v2(emu_event *e) {
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    free(e);
    return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuGetErrorString(CUresult r, const char **m) {
    switch (r) {
    case CUDA_SUCCESS: *m = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *m = "invalid argument"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *m = "out of memory"; break;
    case CUDA_ERROR_INVALID_IMAGE: *m = "device kernel image is invalid"; break;
    case CUDA_ERROR_INVALID_HANDLE: *m = "invalid resource handle"; break;
    case CUDA_ERROR_NOT_FOUND: *m = "named symbol not found"; break;
    case CUDA_ERROR_ILLEGAL_ADDRESS: *m = "an illegal memory access was encountered"; break;
    case CUDA_ERROR_LAUNCH_FAILED: *m = "unspecified launch failure"; break;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
        *m = "operation not permitted when stream is capturing";
        break;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
        *m = "operation failed due to a previous error during capture";
        break;
    default: *m = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static void graph_nodes_free(emu_node *n) {
    while (n) {
        emu_node *next = n->next;
        free(n->args);
        free(n->blob);
        free(n);
        n = next;
    }
}

static CUresult node_run(emu_node *n);

/* Run now, or append to the capture. The node is owned either way. */
CUresult emu_stream_submit(emu_stream *s, emu_node *n) {
    if (!s || !s->capturing) {
        CUresult r = node_run(n);
        graph_nodes_free(n);
        return r;
    }
    *s->tail = n;
    s->tail = &n->next;
    return CUDA_SUCCESS;
}

emu_node *emu_node_new(int kind) {
    emu_node *n = calloc(1, sizeof *n);
    if (n) n->kind = kind;
    return n;
}

EMU_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n,
                                         emu_stream *s) {
    EMU_COUNT(cuMemcpyHtoDAsync_v2);
    if (s && s->capturing) return stream_unsupported(s);
    if (!emu_mem_valid(dst, n) || emu_mem_host_arg_bad(src, "cuMemcpyHtoD"))
        return CUDA_ERROR_INVALID_VALUE;
    if (!pin_copy_start(src, n)) return CUDA_ERROR_ILLEGAL_ADDRESS;
    memcpy(emu_mem_host(dst), src, n);
    return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, emu_stream *s) {
    EMU_COUNT(cuMemcpyDtoHAsync_v2);
    if (s && s->capturing) return stream_unsupported(s);
    if (!emu_mem_valid(src, n) || emu_mem_host_arg_bad(dst, "cuMemcpyDtoH"))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(dst, emu_mem_host(src), n);
    return CUDA_SUCCESS;
}

/* A device-to-device copy, run or captured on s (both sides checked). */
static CUresult copy_submit(emu_stream *s, CUdeviceptr dst, CUdeviceptr src, size_t n) {
    emu_node *c = emu_node_new(NODE_COPY);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    c->dst = dst;
    c->src = src;
    c->n = n;
    return emu_stream_submit(s, c);
}

EMU_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n,
                                         emu_stream *s) {
    EMU_COUNT(cuMemcpyDtoDAsync_v2);
    if (!emu_mem_valid_on(dst, n, emu_stream_dev(s)) ||
        !emu_mem_valid_on(src, n, emu_stream_dev(s)))
        return CUDA_ERROR_INVALID_VALUE;
    return copy_submit(s, dst, src, n);
}

EMU_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, emu_stream *s) {
    EMU_COUNT(cuMemsetD8Async);
    if (!emu_mem_valid_on(dst, n, emu_stream_dev(s))) return CUDA_ERROR_INVALID_VALUE;
    emu_node *c = emu_node_new(NODE_SET);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    c->dst = dst;
    c->value = v;
    c->n = n;
    return emu_stream_submit(s, c);
}

/* Across devices: stream-ordered on s (which may be either device's); the
 * contexts say whose memory each pointer must be. */
EMU_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, void *dst_ctx, CUdeviceptr src,
                                      void *src_ctx, size_t n, emu_stream *s) {
    EMU_COUNT(cuMemcpyPeerAsync);
    int dd = emu_ctx_dev(dst_ctx), sd = emu_ctx_dev(src_ctx);
    if (dd < 0 || sd < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (!emu_mem_valid_on(dst, n, dd) || !emu_mem_valid_on(src, n, sd))
        return CUDA_ERROR_INVALID_VALUE;
    if (s && s->capturing) return stream_unsupported(s);
    return copy_submit(s, dst, src, n);
}

/* Work runs when it is submitted, so a stream waiting on an event that
 * was recorded has nothing to wait for; one never recorded is an error
 * here (the driver would let the wait pass: Hodu never does it). */
EMU_EXPORT CUresult cuStreamWaitEvent(emu_stream *s, emu_event *e, unsigned flags) {
    EMU_COUNT(cuStreamWaitEvent);
    if (!e || flags) return CUDA_ERROR_INVALID_VALUE;
    if (s && s->capturing) return stream_unsupported(s);
    return e->recorded ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* ---- modules: shared objects made by the fake NVRTC ---- */

typedef struct emu_dim3 {
    unsigned x, y, z;
} emu_dim3;
typedef struct emu_state { /* hd_emu_state_t of emu_device.h */
    emu_dim3 thread, block, block_dim, grid_dim;
    void (*sync)(void);
} emu_state;

#define EMU_MAX_PARAMS 256

struct emu_fn {
    void (*run)(void **);
    emu_state *state;
    int sync; /* the kernel's source has barriers: run its threads as fibers */
    int nparams;
    size_t sizes[EMU_MAX_PARAMS];
    unsigned short nptr[EMU_MAX_PARAMS]; /* its leading pointers: to the host view */
    char name[128];
    int dev; /* its module's device */
    emu_fn *next;
};

typedef struct emu_module {
    void *so;
    emu_fn *fns;
    int dev; /* loaded in that device's context */
} emu_module;

/* Write n bytes to a new temporary file; its path in path. */
int emu_temp_write(char *path, size_t cap, const char *suffix, const void *p, size_t n) {
    const char *dir = getenv("TMPDIR");
    snprintf(path, cap, "%s/hodu-emu-XXXXXX%s", dir && *dir ? dir : "/tmp", suffix);
    int fd = mkstemps(path, (int)strlen(suffix));
    if (fd < 0) return 0;
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w <= 0) {
            close(fd);
            unlink(path);
            return 0;
        }
        c += w;
        n -= (size_t)w;
    }
    close(fd);
    return 1;
}

EMU_EXPORT CUresult cuModuleLoadData(emu_module **out, const void *img) {
    EMU_COUNT(cuModuleLoadData);
    const char *c = img;
    if (!c || memcmp(c, IMAGE_MAGIC, 8)) return CUDA_ERROR_INVALID_IMAGE;
    uint64_t n;
    memcpy(&n, c + 8, 8);
    char path[4096];
    if (!emu_temp_write(path, sizeof path, ".so", c + 16, (size_t)n))
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    unlink(path);
    if (!so) {
        fprintf(stderr, "cuda emulator: %s\n", dlerror());
        return CUDA_ERROR_INVALID_IMAGE;
    }
    emu_module *m = calloc(1, sizeof *m);
    if (!m) {
        dlclose(so);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->so = so;
    m->dev = emu_cur;
    *out = m;
    return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuModuleUnload(emu_module *m) {
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    for (emu_fn *f = m->fns, *n; f; f = n) {
        n = f->next;
        free(f);
    }
    dlclose(m->so);
    free(m);
    return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuModuleGetFunction(emu_fn **out, emu_module *m, const char *name) {
    EMU_COUNT(cuModuleGetFunction);
    char sym[512];
    snprintf(sym, sizeof sym, "%s__emu_run", name);
    void *run = dlsym(m->so, sym);
    snprintf(sym, sizeof sym, "%s__emu_sig", name);
    int (*sig)(size_t *, unsigned short *, int) =
        (int (*)(size_t *, unsigned short *, int))dlsym(m->so, sym);
    emu_state *st = dlsym(m->so, "hd_emu_state");
    if (!run || !sig || !st) return CUDA_ERROR_NOT_FOUND;
    emu_fn *f = calloc(1, sizeof *f);
    if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
    *(void **)&f->run = run;
    f->state = st;
    snprintf(sym, sizeof sym, "%s__emu_sync", name);
    const int *sync = dlsym(m->so, sym);
    f->sync = sync ? *sync : 1;
    f->nparams = sig(f->sizes, f->nptr, EMU_MAX_PARAMS);
    snprintf(f->name, sizeof f->name, "%s", name);
    f->dev = m->dev;
    if (f->nparams < 0) {
        fprintf(stderr, "cuda emulator: %s: more than %d parameters\n", name, EMU_MAX_PARAMS);
        free(f);
        return CUDA_ERROR_NOT_FOUND;
    }
    f->next = m->fns;
    m->fns = f;
    *out = f;
    return CUDA_SUCCESS;
}

/* ---- launches: blocks one after another, threads as fibers ----
 *
 * A kernel whose source has no barrier runs its threads one after another
 * on this stack. The others run each thread as a fiber that leaves at
 * every __syncthreads; when every thread waits, all go on. Fibers start
 * with setcontext and switch with _setjmp/_longjmp (no signal-mask system
 * call per switch). Under AddressSanitizer each switch is announced to it
 * (__sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber), so
 * it knows which stack is in use. */

enum { FIB_RUN, FIB_BARRIER, FIB_DONE };
#define FIB_STACK (256 << 10)
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define FIB_ASAN 1
#else
#define FIB_ASAN 0
#endif

static struct {
    ucontext_t fib[1024];
    jmp_buf sched_jb, jb[1024];
    char *stack[1024];
    int state[1024], started[1024];
    int cur, direct_sync;
    emu_node *node;
    void **args; /* the node's arguments, device pointers translated */
    /* AddressSanitizer's view: the fake stacks saved at each switch, and
     * the scheduler's stack */
    void *fake[1024], *sched_fake;
    const void *sched_bottom;
    size_t sched_size;
} fib;

/* Leave the running fiber for the scheduler (done: it never comes back). */
static void fib_leave(int done) {
#if FIB_ASAN
    __sanitizer_start_switch_fiber(done ? NULL : &fib.fake[fib.cur], fib.sched_bottom,
                                   fib.sched_size);
#endif
    if (done || !_setjmp(fib.jb[fib.cur])) _longjmp(fib.sched_jb, 1);
#if FIB_ASAN
    __sanitizer_finish_switch_fiber(fib.fake[fib.cur], &fib.sched_bottom, &fib.sched_size);
#endif
}

static void fib_sync(void) {
    fib.state[fib.cur] = FIB_BARRIER;
    fib_leave(0);
}

/* __syncthreads in a kernel run without fibers: its source said it has
 * no barrier (the launch fails). */
static void fib_sync_direct(void) {
    fib.direct_sync = 1;
}

static void fib_entry(void) {
#if FIB_ASAN
    __sanitizer_finish_switch_fiber(NULL, &fib.sched_bottom, &fib.sched_size);
#endif
    fib.node->fn->run(fib.args);
    fib.state[fib.cur] = FIB_DONE;
    fib_leave(1);
}

static void fib_coords(emu_state *st, unsigned t, const unsigned *b) {
    st->thread.x = t % b[0];
    st->thread.y = t / b[0] % b[1];
    st->thread.z = t / (b[0] * b[1]);
}

static int fib_make(unsigned t) {
    if (!fib.stack[t]) {
        void *p = mmap(NULL, FIB_STACK, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) return 0;
        fib.stack[t] = p;
    }
    getcontext(&fib.fib[t]);
    fib.fib[t].uc_stack.ss_sp = fib.stack[t];
    fib.fib[t].uc_stack.ss_size = FIB_STACK;
    fib.fib[t].uc_link = NULL; /* fibers end with fib_leave */
    makecontext(&fib.fib[t], fib_entry, 0);
    fib.state[t] = FIB_RUN;
    fib.started[t] = 0;
    fib.fake[t] = NULL;
    return 1;
}

static void fib_resume(unsigned t) {
    if (_setjmp(fib.sched_jb)) {
#if FIB_ASAN
        __sanitizer_finish_switch_fiber(fib.sched_fake, NULL, NULL);
#endif
        return;
    }
#if FIB_ASAN
    __sanitizer_start_switch_fiber(&fib.sched_fake, fib.stack[t], FIB_STACK);
#endif
    if (fib.started[t]) _longjmp(fib.jb[t], 1);
    fib.started[t] = 1;
    setcontext(&fib.fib[t]);
}

/* One block. 0: every thread ran to its end; -1: a barrier that not all
 * threads reached; -2: no memory for the stacks. */
static int block_run(emu_node *n, unsigned nthreads) {
    emu_state *st = n->fn->state;
    if (!n->fn->sync) {
        for (unsigned t = 0; t < nthreads; t++) {
            fib_coords(st, t, n->block);
            n->fn->run(fib.args);
        }
        return 0;
    }
    for (unsigned t = 0; t < nthreads; t++)
        if (!fib_make(t)) return -2;
    for (;;) {
        unsigned done = 0;
        for (unsigned t = 0; t < nthreads; t++) {
            if (fib.state[t] != FIB_RUN) continue;
            fib.cur = (int)t;
            fib_coords(st, t, n->block);
            fib_resume(t);
        }
        for (unsigned t = 0; t < nthreads; t++) done += fib.state[t] == FIB_DONE;
        if (done == nthreads) return 0;
        if (done) return -1; /* some threads wait at a barrier the others left */
        for (unsigned t = 0; t < nthreads; t++) fib.state[t] = FIB_RUN;
    }
}

/* The bytes of a launch's arguments: each at a 16-byte boundary. */
static size_t kernel_args_bytes(const emu_fn *f) {
    size_t total = 0;
    for (int i = 0; i < f->nparams; i++) total += (f->sizes[i] + 15) & ~(size_t)15;
    return total + 16;
}

/* The arguments of a launch as the kernel's host code needs them: copies
 * in buf (kernel_args_bytes) with each device address they hold (a
 * pointer parameter, or a struct's leading pointers) moved to the host
 * view, and a pointer to each in args. A pointer that is neither null nor
 * a device address fails the launch: on a GPU the kernel would fault on
 * it. */
static int kernel_args(const emu_node *n, void **args, char *buf) {
    const emu_fn *f = n->fn;
    for (int i = 0; i < f->nparams; i++) {
        args[i] = n->args[i];
        if (!f->nptr[i]) continue;
        memcpy(buf, n->args[i], f->sizes[i]);
        args[i] = buf;
        for (int k = 0; k < f->nptr[i]; k++) {
            uintptr_t v;
            memcpy(&v, buf + k * sizeof v, sizeof v);
            if (v && !mem_is_device(v)) {
                fprintf(stderr,
                        "cuda emulator: %s: parameter %d (pointer %d: %p) is not device "
                        "memory\n",
                        f->name, i, k, (void *)v);
                return 0;
            }
            if (v) v = (uintptr_t)emu_mem_host(v);
            memcpy(buf + k * sizeof v, &v, sizeof v);
        }
        buf += (f->sizes[i] + 15) & ~(size_t)15;
    }
    return 1;
}

/* Every block of n's grid, its arguments in fib.args. */
static CUresult kernel_blocks(emu_node *n) {
    emu_state *st = n->fn->state;
    unsigned nthreads = n->block[0] * n->block[1] * n->block[2];
    st->sync = n->fn->sync ? fib_sync : fib_sync_direct;
    st->block_dim = (emu_dim3){n->block[0], n->block[1], n->block[2]};
    st->grid_dim = (emu_dim3){n->grid[0], n->grid[1], n->grid[2]};
    fib.node = n;
    fib.direct_sync = 0;
    for (unsigned z = 0; z < n->grid[2]; z++)
        for (unsigned y = 0; y < n->grid[1]; y++)
            for (unsigned x = 0; x < n->grid[0]; x++) {
                st->block = (emu_dim3){x, y, z};
                int r = block_run(n, nthreads);
                if (r == -2) return CUDA_ERROR_OUT_OF_MEMORY;
                if (r || fib.direct_sync) {
                    fprintf(stderr, "cuda emulator: block (%u,%u,%u): %s\n", x, y, z,
                            r ? "__syncthreads not reached by every thread"
                              : "__syncthreads in a kernel whose source has none");
                    return CUDA_ERROR_LAUNCH_FAILED;
                }
            }
    return CUDA_SUCCESS;
}

static CUresult kernel_run(emu_node *n) {
    if (emu_nolaunch()) return CUDA_SUCCESS;
    void *args[EMU_MAX_PARAMS + 1];
    char *buf = malloc(kernel_args_bytes(n->fn));
    if (!buf) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = CUDA_ERROR_ILLEGAL_ADDRESS;
    if (kernel_args(n, args, buf)) {
        fib.args = args;
        r = kernel_blocks(n);
    }
    free(buf);
    return r;
}

/* Is every device address among a launch's arguments memory of the
 * kernel's device? */
static int launch_ptrs_ok(const emu_fn *f, void **params) {
    uintptr_t ptrs[256];
    for (int i = 0; i < f->nparams; i++) {
        int k = f->nptr[i], bad = 0;
        memcpy(ptrs, params[i], (size_t)k * sizeof *ptrs);
        for (int j = 0; j < k && !bad; j++)
            bad = ptrs[j] && mem_dev(ptrs[j]) >= 0 && mem_dev(ptrs[j]) != f->dev;
        if (!bad) continue;
        char what[160]; /* the message, named */
        snprintf(what, sizeof what, "%s (parameter %d)", f->name, i);
        return emu_dev_ptrs_ok(ptrs, k, f->dev, what);
    }
    return 1;
}

EMU_EXPORT CUresult cuLaunchKernel(emu_fn *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                   unsigned by, unsigned bz, unsigned shmem, emu_stream *s,
                                   void **params, void **extra) {
    EMU_COUNT(cuLaunchKernel);
    if (!f) return CUDA_ERROR_INVALID_HANDLE;
    unsigned long long threads = (unsigned long long)bx * by * bz;
    if (!gx || !gy || !gz || !threads || threads > 1024 || gx > 0x7fffffffu || gy > 65535 ||
        gz > 65535 || shmem > 48 * 1024 || extra || (f->nparams && !params))
        return CUDA_ERROR_INVALID_VALUE;
    if (f->dev != emu_stream_dev(s) || emu_cur != emu_stream_dev(s)) {
        fprintf(stderr,
                "cuda emulator: %s: a kernel of device %d launched on a stream of device %d "
                "(current: device %d)\n",
                f->name, f->dev, emu_stream_dev(s), emu_cur);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (!launch_ptrs_ok(f, params)) return CUDA_ERROR_ILLEGAL_ADDRESS;
    if (emu_nolaunch() && !(s && s->capturing)) return CUDA_SUCCESS;
    emu_node *n = emu_node_new(NODE_KERNEL);
    if (n) {
        n->args = calloc((size_t)f->nparams + 1, sizeof *n->args);
        n->blob = calloc(kernel_args_bytes(f), 1);
    }
    if (!n || !n->args || !n->blob) {
        graph_nodes_free(n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    char *p = n->blob;
    for (int i = 0; i < f->nparams; i++) { /* arguments by value, as the driver takes them */
        memcpy(p, params[i], f->sizes[i]);
        n->args[i] = p;
        p += (f->sizes[i] + 15) & ~(size_t)15;
    }
    n->fn = f;
    n->grid[0] = gx, n->grid[1] = gy, n->grid[2] = gz;
    n->block[0] = bx, n->block[1] = by, n->block[2] = bz;
    return emu_stream_submit(s, n);
}

/* ---- graphs ---- */

static CUresult node_run(emu_node *n) {
    switch (n->kind) {
    case NODE_KERNEL: return kernel_run(n);
    case NODE_COPY: memmove(emu_mem_host(n->dst), emu_mem_host(n->src), n->n); return CUDA_SUCCESS;
    case NODE_SET: memset(emu_mem_host(n->dst), n->value, n->n); return CUDA_SUCCESS;
    default: emu_gemm_run(&n->gemm); return CUDA_SUCCESS;
    }
}

typedef struct emu_graph {
    emu_node *head;
} emu_graph;

EMU_EXPORT CUresult cuStreamBeginCapture_v2(emu_stream *s, int mode) {
    EMU_COUNT(cuStreamBeginCapture_v2);
    (void)mode;
    if (!s) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream */
    if (s->capturing) return CUDA_ERROR_INVALID_VALUE;
    s->capturing = 1;
    s->invalidated = 0;
    s->head = NULL;
    s->tail = &s->head;
    return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuStreamEndCapture(emu_stream *s, emu_graph **out) {
    EMU_COUNT(cuStreamEndCapture);
    if (!s || !s->capturing) return CUDA_ERROR_INVALID_VALUE;
    s->capturing = 0;
    *out = NULL;
    if (s->invalidated) {
        graph_nodes_free(s->head);
        s->head = NULL;
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    emu_graph *g = calloc(1, sizeof *g);
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    g->head = s->head;
    s->head = NULL;
    *out = g;
    return CUDA_SUCCESS;
}

/* An executable graph: a copy of the nodes (a graph may be destroyed once
 * instantiated). */
EMU_EXPORT CUresult cuGraphInstantiateWithFlags(emu_graph **exec, emu_graph *g,
                                                unsigned long long flags) {
    EMU_COUNT(cuGraphInstantiateWithFlags);
    (void)flags;
    emu_graph *e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    emu_node **tail = &e->head;
    for (emu_node *n = g->head; n; n = n->next) {
        emu_node *c = emu_node_new(n->kind);
        if (!c) goto oom;
        *c = *n;
        c->next = NULL;
        c->args = NULL;
        c->blob = NULL;
        *tail = c;
        tail = &c->next;
        if (n->kind != NODE_KERNEL) continue;
        size_t total = kernel_args_bytes(n->fn);
        c->args = calloc((size_t)n->fn->nparams + 1, sizeof *c->args);
        c->blob = malloc(total);
        if (!c->args || !c->blob) goto oom;
        memcpy(c->blob, n->blob, total);
        for (int i = 0; i < n->fn->nparams; i++)
            c->args[i] = c->blob + ((char *)n->args[i] - n->blob);
    }
    *exec = e;
    return CUDA_SUCCESS;
oom:
    graph_nodes_free(e->head);
    free(e);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

EMU_EXPORT CUresult cuGraphLaunch(emu_graph *e, emu_stream *s) {
    EMU_COUNT(cuGraphLaunch);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    if (s && s->capturing) return stream_unsupported(s);
    for (emu_node *n = e->head; n; n = n->next) {
        CUresult r = node_run(n);
        if (r) return r;
    }
    return CUDA_SUCCESS;
}

static CUresult graph_free(emu_graph *g) {
    if (!g) return CUDA_ERROR_INVALID_HANDLE;
    graph_nodes_free(g->head);
    free(g);
    return CUDA_SUCCESS;
}
EMU_EXPORT CUresult cuGraphExecDestroy(emu_graph *e) {
    EMU_COUNT(cuGraphExecDestroy);
    return graph_free(e);
}
EMU_EXPORT CUresult cuGraphDestroy(emu_graph *g) {
    return graph_free(g);
}

/* The whole file at path, NUL-terminated, its size in *n; NULL if unreadable. */
char *emu_file_read(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = sz >= 0 ? malloc((size_t)sz + 1) : NULL;
    if (p && fread(p, 1, (size_t)sz, f) != (size_t)sz) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) p[sz] = 0;
    *n = p ? (size_t)sz : 0;
    return p;
}
