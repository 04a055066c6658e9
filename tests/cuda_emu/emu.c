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
 * - "NVRTC" compiles the generated CUDA C as host C++ (emu_device.h is
 *   force-included) into a shared object: that is the module image.
 * - A launch runs the grid block by block; a block's threads are fibers
 *   (ucontext) that switch at __syncthreads. A barrier that some threads of
 *   a block never reach fails the launch (it would hang or misbehave on a
 *   GPU).
 * - Stream capture records launches, copies, memsets and GEMMs as a graph
 *   that cuGraphLaunch replays with the arguments captured by value.
 *   Synchronizing a capturing stream, or a copy from or to host memory in
 *   one, invalidates the capture, as the driver does.
 * - cuBLAS: cublasGemmStridedBatchedEx, column-major, from its documented
 *   definition (sums in double).
 * - cuSOLVER: the dense routines the backend calls, through OpenBLAS's
 *   LAPACK (their documented definitions), arguments checked.
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
#include "hd_dtype.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define EMU_EXPORT __attribute__((visibility("default")))

extern char **environ;

/* ---- the ABI's types and values (cuda.h, nvrtc.h, cublas_api.h) ---- */

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
};
enum { ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76 };
enum {
    NVRTC_SUCCESS = 0,
    NVRTC_ERROR_OUT_OF_MEMORY = 1,
    NVRTC_ERROR_INVALID_OPTION = 5,
    NVRTC_ERROR_COMPILATION = 6
};
enum { BLAS_SUCCESS = 0, BLAS_INVALID_VALUE = 7, BLAS_NOT_SUPPORTED = 15 };
enum { DT_R_32F = 0, DT_R_64F = 1, DT_R_16F = 2, DT_R_16BF = 14 };

/* ---- call counts per entry point, for tests (hodu_emu_calls) ---- */

#define EMU_COUNTED(X)                                                                             \
    X(cuMemAlloc_v2)                                                                               \
    X(cuMemFree_v2)                                                                                \
    X(cuCtxSetCurrent)                                                                             \
    X(cuStreamSynchronize)                                                                         \
    X(cuMemcpyHtoDAsync_v2)                                                                        \
    X(cuMemcpyDtoHAsync_v2)                                                                        \
    X(cuMemcpyDtoDAsync_v2)                                                                        \
    X(cuMemsetD8Async)                                                                             \
    X(cuModuleLoadData)                                                                            \
    X(cuModuleGetFunction)                                                                         \
    X(cuLaunchKernel)                                                                              \
    X(cuStreamBeginCapture_v2)                                                                     \
    X(cuStreamEndCapture)                                                                          \
    X(cuGraphInstantiateWithFlags)                                                                 \
    X(cuGraphLaunch)                                                                               \
    X(cuGraphExecDestroy)                                                                          \
    X(cuEventCreate)                                                                               \
    X(cuEventRecord)                                                                               \
    X(cuEventElapsedTime_v2)                                                                       \
    X(cuMemcpyPeerAsync)                                                                           \
    X(cuStreamWaitEvent)                                                                           \
    X(cusolverDn)                                                                                  \
    X(cublasGemmStridedBatchedEx)                                                                  \
    X(cublasSetWorkspace_v2)

#define EMU_COUNT_ENUM(name) EMU_N_##name,
enum { EMU_COUNTED(EMU_COUNT_ENUM) EMU_N_COUNT };
#define EMU_COUNT_NAME(name) #name,
static const char *const emu_count_names[EMU_N_COUNT] = {EMU_COUNTED(EMU_COUNT_NAME)};
static unsigned long long emu_counts[EMU_N_COUNT];
#define EMU_COUNT(name) (emu_counts[EMU_N_##name]++)

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
 * one subtraction and one addition (mem_host), whatever allocation or
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
static void *mem_host(CUdeviceptr p) {
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
static int mem_valid(CUdeviceptr p, size_t n) {
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
static int mem_valid_on(CUdeviceptr p, size_t n, int dev) {
    return mem_valid(p, n) && mem_dev((uintptr_t)p) == dev;
}

/* A host pointer the caller passed that is really device memory: the
 * call fails (a GPU's driver would not read it as host memory either). */
static int mem_host_arg_bad(const void *p, const char *what) {
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

/* ---- device, context, streams ---- */

typedef struct emu_node emu_node;
typedef struct emu_stream {
    int dev; /* the device whose context made it */
    int capturing, invalidated;
    emu_node *head, **tail; /* the graph being captured */
} emu_stream;

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
EMU_EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
    if (!emu_dev_ok(dev)) return CUDA_ERROR_INVALID_VALUE;
    *v = attr == ATTR_CC_MAJOR ? 8 : attr == ATTR_CC_MINOR ? 0 : 0;
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
static int stream_dev(const emu_stream *s) {
    return s ? s->dev : emu_cur;
}

/* Does every pointer in ptrs[0..n) (0: none) lie in device dev's memory
 * or outside every allocation? what names the call for the message. */
static int dev_ptrs_ok(const uintptr_t *ptrs, int n, int dev, const char *what) {
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

EMU_EXPORT CUresult cuStreamSynchronize(emu_stream *s) {
    EMU_COUNT(cuStreamSynchronize);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    return s->capturing ? stream_unsupported(s) : CUDA_SUCCESS;
}

/* Events: work runs when it is launched here, so an event's time is the
 * host's clock when it is recorded. */
typedef struct emu_event {
    int recorded;
    double t; /* seconds */
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
    return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuEventSynchronize(emu_event *e) {
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
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

/* ---- graph nodes: what a capturing stream records ---- */

enum { NODE_KERNEL, NODE_COPY, NODE_SET, NODE_GEMM };

typedef struct emu_fn emu_fn;
typedef struct emu_gemm {
    int ta, tb, m, n, k, type, compute;
    double alpha, beta;
    const void *a, *b;
    void *c;
    int lda, ldb, ldc, batch;
    long long sa, sb, sc;
} emu_gemm;

struct emu_node {
    int kind;
    emu_fn *fn; /* kernel */
    unsigned grid[3], block[3];
    void **args;          /* kernel: pointers into blob */
    char *blob;           /* kernel: the arguments' values */
    CUdeviceptr dst, src; /* copy, set */
    size_t n;
    unsigned char value;
    emu_gemm gemm;
    emu_node *next;
};

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
static CUresult stream_submit(emu_stream *s, emu_node *n) {
    if (!s || !s->capturing) {
        CUresult r = node_run(n);
        graph_nodes_free(n);
        return r;
    }
    *s->tail = n;
    s->tail = &n->next;
    return CUDA_SUCCESS;
}

static emu_node *node_new(int kind) {
    emu_node *n = calloc(1, sizeof *n);
    if (n) n->kind = kind;
    return n;
}

EMU_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n,
                                         emu_stream *s) {
    EMU_COUNT(cuMemcpyHtoDAsync_v2);
    if (s && s->capturing) return stream_unsupported(s);
    if (!mem_valid(dst, n) || mem_host_arg_bad(src, "cuMemcpyHtoD"))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(mem_host(dst), src, n);
    return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, emu_stream *s) {
    EMU_COUNT(cuMemcpyDtoHAsync_v2);
    if (s && s->capturing) return stream_unsupported(s);
    if (!mem_valid(src, n) || mem_host_arg_bad(dst, "cuMemcpyDtoH"))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(dst, mem_host(src), n);
    return CUDA_SUCCESS;
}

/* A device-to-device copy, run or captured on s (both sides checked). */
static CUresult copy_submit(emu_stream *s, CUdeviceptr dst, CUdeviceptr src, size_t n) {
    emu_node *c = node_new(NODE_COPY);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    c->dst = dst;
    c->src = src;
    c->n = n;
    return stream_submit(s, c);
}

EMU_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n,
                                         emu_stream *s) {
    EMU_COUNT(cuMemcpyDtoDAsync_v2);
    if (!mem_valid_on(dst, n, stream_dev(s)) || !mem_valid_on(src, n, stream_dev(s)))
        return CUDA_ERROR_INVALID_VALUE;
    return copy_submit(s, dst, src, n);
}

EMU_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, emu_stream *s) {
    EMU_COUNT(cuMemsetD8Async);
    if (!mem_valid_on(dst, n, stream_dev(s))) return CUDA_ERROR_INVALID_VALUE;
    emu_node *c = node_new(NODE_SET);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    c->dst = dst;
    c->value = v;
    c->n = n;
    return stream_submit(s, c);
}

/* Across devices: stream-ordered on s (which may be either device's); the
 * contexts say whose memory each pointer must be. */
EMU_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, void *dst_ctx, CUdeviceptr src,
                                      void *src_ctx, size_t n, emu_stream *s) {
    EMU_COUNT(cuMemcpyPeerAsync);
    int dd = emu_ctx_dev(dst_ctx), sd = emu_ctx_dev(src_ctx);
    if (dd < 0 || sd < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (!mem_valid_on(dst, n, dd) || !mem_valid_on(src, n, sd)) return CUDA_ERROR_INVALID_VALUE;
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

#define IMAGE_MAGIC "HDEMUSO1"

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
    unsigned char is_ptr[EMU_MAX_PARAMS]; /* a pointer: translated to the host view */
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
static int temp_write(char *path, size_t cap, const char *suffix, const void *p, size_t n) {
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
    if (!temp_write(path, sizeof path, ".so", c + 16, (size_t)n)) return CUDA_ERROR_OUT_OF_MEMORY;
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
    int (*sig)(size_t *, unsigned char *, int) =
        (int (*)(size_t *, unsigned char *, int))dlsym(m->so, sym);
    emu_state *st = dlsym(m->so, "hd_emu_state");
    if (!run || !sig || !st) return CUDA_ERROR_NOT_FOUND;
    emu_fn *f = calloc(1, sizeof *f);
    if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
    *(void **)&f->run = run;
    f->state = st;
    snprintf(sym, sizeof sym, "%s__emu_sync", name);
    const int *sync = dlsym(m->so, sym);
    f->sync = sync ? *sync : 1;
    f->nparams = sig(f->sizes, f->is_ptr, EMU_MAX_PARAMS);
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

/* The arguments of a launch as the kernel's host code needs them: each
 * pointer parameter that holds a device address moved to the host view
 * (values in vals, pointers to every argument in args). A pointer that is
 * neither null nor a device address fails the launch: on a GPU the kernel
 * would fault on it. */
static int kernel_args(const emu_node *n, void **args, uintptr_t *vals) {
    const emu_fn *f = n->fn;
    for (int i = 0; i < f->nparams; i++) {
        args[i] = n->args[i];
        if (!f->is_ptr[i]) continue;
        memcpy(&vals[i], n->args[i], sizeof vals[i]);
        if (vals[i] && !mem_is_device(vals[i])) {
            fprintf(stderr, "cuda emulator: %s: parameter %d (%p) is not device memory\n", f->name,
                    i, (void *)vals[i]);
            return 0;
        }
        if (vals[i]) vals[i] = (uintptr_t)mem_host(vals[i]);
        args[i] = &vals[i];
    }
    return 1;
}

static CUresult kernel_run(emu_node *n) {
    if (emu_nolaunch()) return CUDA_SUCCESS;
    emu_state *st = n->fn->state;
    void *args[EMU_MAX_PARAMS + 1];
    uintptr_t vals[EMU_MAX_PARAMS];
    if (!kernel_args(n, args, vals)) return CUDA_ERROR_ILLEGAL_ADDRESS;
    fib.args = args;
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

EMU_EXPORT CUresult cuLaunchKernel(emu_fn *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                   unsigned by, unsigned bz, unsigned shmem, emu_stream *s,
                                   void **params, void **extra) {
    EMU_COUNT(cuLaunchKernel);
    if (!f) return CUDA_ERROR_INVALID_HANDLE;
    unsigned long long threads = (unsigned long long)bx * by * bz;
    if (!gx || !gy || !gz || !threads || threads > 1024 || gx > 0x7fffffffu || gy > 65535 ||
        gz > 65535 || shmem > 48 * 1024 || extra || (f->nparams && !params))
        return CUDA_ERROR_INVALID_VALUE;
    if (f->dev != stream_dev(s) || emu_cur != stream_dev(s)) {
        fprintf(stderr,
                "cuda emulator: %s: a kernel of device %d launched on a stream of device %d "
                "(current: device %d)\n",
                f->name, f->dev, stream_dev(s), emu_cur);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    uintptr_t ptrs[EMU_MAX_PARAMS];
    for (int i = 0; i < f->nparams; i++) {
        ptrs[i] = 0;
        if (f->is_ptr[i]) memcpy(&ptrs[i], params[i], sizeof ptrs[i]);
    }
    if (!dev_ptrs_ok(ptrs, f->nparams, f->dev, f->name)) return CUDA_ERROR_ILLEGAL_ADDRESS;
    if (emu_nolaunch() && !(s && s->capturing)) return CUDA_SUCCESS;
    emu_node *n = node_new(NODE_KERNEL);
    size_t total = 0;
    for (int i = 0; i < f->nparams; i++) total += (f->sizes[i] + 15) & ~(size_t)15;
    if (n) {
        n->args = calloc((size_t)f->nparams + 1, sizeof *n->args);
        n->blob = calloc(total + 16, 1);
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
    return stream_submit(s, n);
}

/* ---- cuBLAS ---- */

static double gemm_load(const void *p, int type, long long i) {
    switch (type) {
    case DT_R_32F: return ((const float *)p)[i];
    case DT_R_64F: return ((const double *)p)[i];
    case DT_R_16F: return hd_f16_to_f32(((const uint16_t *)p)[i]);
    default: return hd_bf16_to_f32(((const uint16_t *)p)[i]);
    }
}

static void gemm_store(void *p, int type, long long i, double v) {
    switch (type) {
    case DT_R_32F: ((float *)p)[i] = (float)v; break;
    case DT_R_64F: ((double *)p)[i] = v; break;
    case DT_R_16F: ((uint16_t *)p)[i] = hd_f32_to_f16((float)v); break;
    default: ((uint16_t *)p)[i] = hd_f32_to_bf16((float)v); break;
    }
}

/* C = alpha op(A) op(B) + beta C, column-major, per batch. */
static void gemm_run(const emu_gemm *g) {
    const char *a = mem_host((uintptr_t)g->a), *b = mem_host((uintptr_t)g->b);
    void *c = mem_host((uintptr_t)g->c);
    for (int q = 0; q < g->batch; q++) {
        long long oa = q * g->sa, ob = q * g->sb, oc = q * g->sc;
        for (int j = 0; j < g->n; j++)
            for (int i = 0; i < g->m; i++) {
                double s = 0;
                for (int l = 0; l < g->k; l++) {
                    double x = gemm_load(
                        a, g->type,
                        oa + (g->ta ? l + (long long)i * g->lda : i + (long long)l * g->lda));
                    double y = gemm_load(
                        b, g->type,
                        ob + (g->tb ? j + (long long)l * g->ldb : l + (long long)j * g->ldb));
                    s += x * y;
                }
                long long ci = oc + i + (long long)j * g->ldc;
                double old = g->beta != 0 ? g->beta * gemm_load(c, g->type, ci) : 0;
                gemm_store(c, g->type, ci, g->alpha * s + old);
            }
    }
}

typedef struct emu_blas {
    emu_stream *stream;
    CUdeviceptr ws; /* the workspace set, checked to be device memory */
    size_t ws_size;
} emu_blas;

EMU_EXPORT int cublasCreate_v2(emu_blas **h) {
    *h = calloc(1, sizeof **h);
    return *h ? BLAS_SUCCESS : 3 /* CUBLAS_STATUS_ALLOC_FAILED */;
}
EMU_EXPORT int cublasDestroy_v2(emu_blas *h) {
    free(h);
    return BLAS_SUCCESS;
}
EMU_EXPORT int cublasSetStream_v2(emu_blas *h, emu_stream *s) {
    h->stream = s;
    return BLAS_SUCCESS;
}
EMU_EXPORT int cublasSetWorkspace_v2(emu_blas *h, void *ws, size_t n) {
    EMU_COUNT(cublasSetWorkspace_v2);
    if (!h || (n && !mem_valid((CUdeviceptr)(uintptr_t)ws, n))) return BLAS_INVALID_VALUE;
    h->ws = (CUdeviceptr)(uintptr_t)ws;
    h->ws_size = n;
    return BLAS_SUCCESS;
}

static size_t type_size(int t) {
    return t == DT_R_64F ? 8 : t == DT_R_32F ? 4 : 2;
}

/* Is an operand of rows x cols (leading dimension ld) per batch inside
 * device memory? */
static int gemm_operand_ok(const void *p, int type, int rows, int cols, int ld, long long stride,
                           int batch) {
    if (ld < rows || ld < 1) return 0;
    size_t last = (size_t)((long long)(batch - 1) * stride + (long long)(cols - 1) * ld + rows);
    return mem_valid((CUdeviceptr)(uintptr_t)p, last * type_size(type));
}

EMU_EXPORT int cublasGemmStridedBatchedEx(emu_blas *h, int ta, int tb, int m, int n, int k,
                                          const void *alpha, const void *A, int at, int lda,
                                          long long sa, const void *B, int bt, int ldb,
                                          long long sb, const void *beta, void *C, int ct, int ldc,
                                          long long sc, int batch, int compute, int algo) {
    EMU_COUNT(cublasGemmStridedBatchedEx);
    (void)algo;
    if (!h) return 1;
    if (at != bt || at != ct || m < 0 || n < 0 || k < 0 || batch < 0 || ta > 1 || tb > 1)
        return BLAS_INVALID_VALUE;
    if (at != DT_R_32F && at != DT_R_64F && at != DT_R_16F && at != DT_R_16BF)
        return BLAS_NOT_SUPPORTED;
    if ((compute == 70) != (at == DT_R_64F)) return BLAS_NOT_SUPPORTED; /* 64F with f64 only */
    if (mem_host_arg_bad(alpha, "cublasGemmStridedBatchedEx alpha") ||
        mem_host_arg_bad(beta, "cublasGemmStridedBatchedEx beta"))
        return BLAS_INVALID_VALUE; /* the handle's pointer mode is host */
    if (!m || !n || !batch) return BLAS_SUCCESS;
    if (!gemm_operand_ok(A, at, ta ? k : m, ta ? m : k, lda, sa, batch) ||
        !gemm_operand_ok(B, bt, tb ? n : k, tb ? k : n, ldb, sb, batch) ||
        !gemm_operand_ok(C, ct, m, n, ldc, sc, batch))
        return BLAS_INVALID_VALUE;
    uintptr_t ops[3] = {(uintptr_t)A, (uintptr_t)B, (uintptr_t)C};
    if (!dev_ptrs_ok(ops, 3, stream_dev(h->stream), "cublasGemmStridedBatchedEx"))
        return 14; /* CUBLAS_STATUS_INTERNAL_ERROR */
    emu_node *node = node_new(NODE_GEMM);
    if (!node) return 3;
    emu_gemm *g = &node->gemm;
    *g = (emu_gemm){ta, tb, m, n, k, at, compute, 0, 0, A, B, C, lda, ldb, ldc, batch, sa, sb, sc};
    g->alpha = at == DT_R_64F ? *(const double *)alpha : *(const float *)alpha;
    g->beta = at == DT_R_64F ? *(const double *)beta : *(const float *)beta;
    return stream_submit(h->stream, node) == CUDA_SUCCESS ? BLAS_SUCCESS : 13;
}

/* ---- cuSOLVER ----
 *
 * The dense routines the backend calls (cuda_solver.c), through the
 * LAPACK that OpenBLAS ships: cuSOLVER documents them as LAPACK's, on
 * column-major matrices. Every matrix, pivot array, info word and
 * workspace must lie in the handle's stream's device memory, and a
 * workspace must be at least the size its _bufferSize query answered;
 * gesvd refuses m < n, as cuSOLVER's does. The work runs at once (not in a
 * capture: Hodu never calls cuSOLVER while capturing). */

enum { SOL_OK = 0, SOL_NOT_INIT = 1, SOL_ALLOC = 2, SOL_INVALID = 3, SOL_INTERNAL = 7 };

typedef struct emu_solver {
    emu_stream *stream;
} emu_solver;

/* LAPACK's s<name>_ or d<name>_ from OpenBLAS (NULL without it). */
static void *sol_lapack(int dbl, const char *name) {
    static void *lib;
    static int tried;
    if (!tried) {
        tried = 1;
        lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
        if (!lib) lib = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
    }
    char full[32];
    snprintf(full, sizeof full, "%c%s_", dbl ? 'd' : 's', name);
    return lib ? dlsym(lib, full) : NULL;
}

EMU_EXPORT int cusolverDnCreate(emu_solver **h) {
    if (!h) return SOL_INVALID;
    if (!sol_lapack(0, "getrf")) return SOL_NOT_INIT; /* no LAPACK: no solver */
    *h = calloc(1, sizeof **h);
    return *h ? SOL_OK : SOL_ALLOC;
}
EMU_EXPORT int cusolverDnDestroy(emu_solver *h) {
    free(h);
    return SOL_OK;
}
EMU_EXPORT int cusolverDnSetStream(emu_solver *h, emu_stream *s) {
    if (!h) return SOL_NOT_INIT;
    h->stream = s;
    return SOL_OK;
}

/* The host view of n bytes at p, which must be memory of the handle's
 * stream's device; NULL (and a message) if not. */
static void *sol_mem(emu_solver *h, const void *p, long long n, const char *what) {
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)p;
    if (n < 1) n = 1;
    if (!mem_valid_on(d, (size_t)n, stream_dev(h->stream))) {
        fprintf(stderr, "cuda emulator: cuSOLVER %s: %p (%lld bytes) is not memory of device %d\n",
                what, p, n, stream_dev(h->stream));
        return NULL;
    }
    return mem_host(d);
}

/* A call that may run: a handle, a stream not capturing. */
static int sol_ready(emu_solver *h) {
    EMU_COUNT(cusolverDn);
    return h && !(h->stream && h->stream->capturing);
}

static size_t sol_es(int dbl) {
    return dbl ? 8 : 4;
}

/* Workspace sizes the queries answer (the emulator's LAPACK calls make
 * their own): enough to catch a workspace the backend sized wrongly. */
static int sol_ws(int m, int n) {
    return (m > n ? m : n) + 1;
}

/* LAPACK's own workspace query and call (lwork = -1 first). */
static void *sol_work(int dbl, double q, int *lwork) {
    *lwork = q < 1 ? 1 : (int)q;
    return malloc((size_t)*lwork * sol_es(dbl));
}

static double sol_first(int dbl, const void *w) {
    return dbl ? *(const double *)w : *(const float *)w;
}

typedef void (*sol_getrf_fn)(const int *, const int *, void *, const int *, int *, int *);
typedef void (*sol_getrs_fn)(const char *, const int *, const int *, const void *, const int *,
                             const int *, void *, const int *, int *, size_t);
typedef void (*sol_potrf_fn)(const char *, const int *, void *, const int *, int *, size_t);
typedef void (*sol_geqrf_fn)(const int *, const int *, void *, const int *, void *, void *,
                             const int *, int *);
typedef void (*sol_orgqr_fn)(const int *, const int *, const int *, void *, const int *,
                             const void *, void *, const int *, int *);
typedef void (*sol_gesvd_fn)(const char *, const char *, const int *, const int *, void *,
                             const int *, void *, void *, const int *, void *, const int *, void *,
                             const int *, int *, size_t, size_t);
typedef void (*sol_syevd_fn)(const char *, const char *, const int *, void *, const int *, void *,
                             void *, const int *, int *, const int *, int *, size_t, size_t);

static int sol_getrf_bs(int dbl, emu_solver *h, int m, int n, void *A, int lda, int *lw) {
    (void)dbl, (void)A, (void)lda;
    if (!h || !lw || m < 0 || n < 0) return SOL_INVALID;
    *lw = sol_ws(m, n);
    return SOL_OK;
}

static int sol_getrf(int dbl, emu_solver *h, int m, int n, void *A, int lda, void *W, int *ipiv,
                     int *info) {
    if (!sol_ready(h)) return SOL_INTERNAL;
    if (m < 1 || n < 1 || lda < m) return SOL_INVALID;
    size_t es = sol_es(dbl);
    void *a = sol_mem(h, A, (long long)lda * n * (long long)es, "getrf A");
    void *w = sol_mem(h, W, (long long)sol_ws(m, n) * (long long)es, "getrf workspace");
    int *p = sol_mem(h, ipiv, (long long)(m < n ? m : n) * 4, "getrf ipiv");
    int *i = sol_mem(h, info, 4, "getrf info");
    if (!a || !w || !p || !i) return SOL_INVALID;
    ((sol_getrf_fn)sol_lapack(dbl, "getrf"))(&m, &n, a, &lda, p, i);
    return SOL_OK;
}

static int sol_getrs(int dbl, emu_solver *h, int trans, int n, int nrhs, const void *A, int lda,
                     const int *ipiv, void *B, int ldb, int *info) {
    if (!sol_ready(h)) return SOL_INTERNAL;
    if (n < 1 || nrhs < 0 || lda < n || ldb < n || trans < 0 || trans > 1) return SOL_INVALID;
    size_t es = sol_es(dbl);
    void *a = sol_mem(h, A, (long long)lda * n * (long long)es, "getrs A");
    int *p = sol_mem(h, ipiv, (long long)n * 4, "getrs ipiv");
    void *b = sol_mem(h, B, (long long)ldb * nrhs * (long long)es, "getrs B");
    int *i = sol_mem(h, info, 4, "getrs info");
    if (!a || !p || !b || !i) return SOL_INVALID;
    ((sol_getrs_fn)sol_lapack(dbl, "getrs"))(trans ? "T" : "N", &n, &nrhs, a, &lda, p, b, &ldb, i,
                                             1);
    return SOL_OK;
}

static int sol_potrf_bs(int dbl, emu_solver *h, int uplo, int n, void *A, int lda, int *lw) {
    (void)dbl, (void)uplo, (void)A, (void)lda;
    if (!h || !lw || n < 0) return SOL_INVALID;
    *lw = sol_ws(n, n);
    return SOL_OK;
}

static int sol_potrf(int dbl, emu_solver *h, int uplo, int n, void *A, int lda, void *W, int lw,
                     int *info) {
    if (!sol_ready(h)) return SOL_INTERNAL;
    if (n < 1 || lda < n || lw < sol_ws(n, n) || uplo < 0 || uplo > 1) return SOL_INVALID;
    size_t es = sol_es(dbl);
    void *a = sol_mem(h, A, (long long)lda * n * (long long)es, "potrf A");
    void *w = sol_mem(h, W, (long long)lw * (long long)es, "potrf workspace");
    int *i = sol_mem(h, info, 4, "potrf info");
    if (!a || !w || !i) return SOL_INVALID;
    ((sol_potrf_fn)sol_lapack(dbl, "potrf"))(uplo ? "U" : "L", &n, a, &lda, i, 1);
    return SOL_OK;
}

static int sol_geqrf_bs(int dbl, emu_solver *h, int m, int n, void *A, int lda, int *lw) {
    return sol_getrf_bs(dbl, h, m, n, A, lda, lw);
}

/* geqrf (gen 0: the reflectors of A's QR) or orgqr (gen 1: Q's first n
 * columns from k of them), with LAPACK's own workspace. */
static int sol_householder(int dbl, int gen, emu_solver *h, int m, int n, int k, void *A, int lda,
                           const void *tau, void *W, int lw, int *info) {
    const char *name = gen ? "orgqr" : "geqrf";
    if (!sol_ready(h)) return SOL_INTERNAL;
    if (m < 1 || n < 1 || lda < m || lw < sol_ws(m, n) || (gen && (n > m || k < 0 || k > n)))
        return SOL_INVALID;
    size_t es = sol_es(dbl);
    int lwork = -1;
    void *a = sol_mem(h, A, (long long)lda * n * (long long)es, name);
    void *t = sol_mem(h, tau, (long long)k * (long long)es, name);
    void *w = sol_mem(h, W, (long long)lw * (long long)es, name);
    int *i = sol_mem(h, info, 4, name);
    if (!a || !t || !w || !i) return SOL_INVALID;
    void *f = sol_lapack(dbl, name), *work = NULL;
    double q[1];
    for (int pass = 0; pass < 2; pass++) { /* the query, then the call */
        void *wk = pass ? work : (void *)q;
        if (gen)
            ((sol_orgqr_fn)f)(&m, &n, &k, a, &lda, t, wk, &lwork, i);
        else
            ((sol_geqrf_fn)f)(&m, &n, a, &lda, (void *)t, wk, &lwork, i);
        if (!pass && !(work = sol_work(dbl, sol_first(dbl, q), &lwork))) return SOL_ALLOC;
    }
    free(work);
    return SOL_OK;
}

static int sol_geqrf(int dbl, emu_solver *h, int m, int n, void *A, int lda, void *tau, void *W,
                     int lw, int *info) {
    return sol_householder(dbl, 0, h, m, n, m < n ? m : n, A, lda, tau, W, lw, info);
}

static int sol_orgqr_bs(int dbl, emu_solver *h, int m, int n, int k, const void *A, int lda,
                        const void *tau, int *lw) {
    (void)dbl, (void)k, (void)A, (void)lda, (void)tau;
    if (!h || !lw || m < 0 || n < 0) return SOL_INVALID;
    *lw = sol_ws(m, n);
    return SOL_OK;
}

static int sol_orgqr(int dbl, emu_solver *h, int m, int n, int k, void *A, int lda, const void *tau,
                     void *W, int lw, int *info) {
    return sol_householder(dbl, 1, h, m, n, k, A, lda, tau, W, lw, info);
}

static int sol_gesvd_bs(int dbl, emu_solver *h, int m, int n, int *lw) {
    (void)dbl;
    if (!h || !lw || m < 0 || n < 0) return SOL_INVALID;
    *lw = sol_ws(m, n);
    return SOL_OK;
}

static int sol_gesvd(int dbl, emu_solver *h, signed char ju, signed char jv, int m, int n, void *A,
                     int lda, void *S, void *U, int ldu, void *VT, int ldvt, void *W, int lw,
                     void *rwork, int *info) {
    if (!sol_ready(h)) return SOL_INTERNAL;
    int k = n, lwork = -1;
    if (m < n || n < 1 || lda < m || ldu < m || lw < sol_ws(m, n) || (ju != 'A' && ju != 'S') ||
        (jv != 'A' && jv != 'S') || ldvt < (jv == 'A' ? n : k))
        return SOL_INVALID;
    size_t es = sol_es(dbl);
    char jobu[2] = {(char)ju, 0}, jobvt[2] = {(char)jv, 0};
    void *a = sol_mem(h, A, (long long)lda * n * (long long)es, "gesvd A");
    void *s = sol_mem(h, S, (long long)k * (long long)es, "gesvd S");
    void *u = sol_mem(h, U, (long long)ldu * (ju == 'A' ? m : k) * (long long)es, "gesvd U");
    void *vt = sol_mem(h, VT, (long long)ldvt * n * (long long)es, "gesvd VT");
    void *w = sol_mem(h, W, (long long)lw * (long long)es, "gesvd workspace");
    void *rw = sol_mem(h, rwork, (long long)(k - 1) * (long long)es, "gesvd rwork");
    int *i = sol_mem(h, info, 4, "gesvd info");
    if (!a || !s || !u || !vt || !w || !rw || !i) return SOL_INVALID;
    sol_gesvd_fn f = (sol_gesvd_fn)sol_lapack(dbl, "gesvd");
    double q[1];
    f(jobu, jobvt, &m, &n, a, &lda, s, u, &ldu, vt, &ldvt, q, &lwork, i, 1, 1);
    void *work = sol_work(dbl, sol_first(dbl, q), &lwork);
    if (!work) return SOL_ALLOC;
    f(jobu, jobvt, &m, &n, a, &lda, s, u, &ldu, vt, &ldvt, work, &lwork, i, 1, 1);
    free(work);
    return SOL_OK;
}

static int sol_syevd_bs(int dbl, emu_solver *h, int jobz, int uplo, int n, const void *A, int lda,
                        const void *W, int *lw) {
    (void)dbl, (void)jobz, (void)uplo, (void)A, (void)lda, (void)W;
    if (!h || !lw || n < 0) return SOL_INVALID;
    *lw = sol_ws(2 * n, n);
    return SOL_OK;
}

static int sol_syevd(int dbl, emu_solver *h, int jobz, int uplo, int n, void *A, int lda, void *Wv,
                     void *W, int lw, int *info) {
    if (!sol_ready(h)) return SOL_INTERNAL;
    if (n < 1 || lda < n || lw < sol_ws(2 * n, n) || jobz < 0 || jobz > 1 || uplo < 0 || uplo > 1)
        return SOL_INVALID;
    size_t es = sol_es(dbl);
    int lwork = -1, liwork = -1, iq = 0;
    void *a = sol_mem(h, A, (long long)lda * n * (long long)es, "syevd A");
    void *wv = sol_mem(h, Wv, (long long)n * (long long)es, "syevd W");
    void *w = sol_mem(h, W, (long long)lw * (long long)es, "syevd workspace");
    int *i = sol_mem(h, info, 4, "syevd info");
    if (!a || !wv || !w || !i) return SOL_INVALID;
    sol_syevd_fn f = (sol_syevd_fn)sol_lapack(dbl, "syevd");
    const char *jz = jobz ? "V" : "N", *ul = uplo ? "U" : "L";
    double q[1];
    f(jz, ul, &n, a, &lda, wv, q, &lwork, &iq, &liwork, i, 1, 1);
    void *work = sol_work(dbl, sol_first(dbl, q), &lwork);
    liwork = iq < 1 ? 1 : iq;
    int *iwork = malloc((size_t)liwork * sizeof *iwork);
    if (work && iwork) f(jz, ul, &n, a, &lda, wv, work, &lwork, iwork, &liwork, i, 1, 1);
    free(work);
    free(iwork);
    return work && iwork ? SOL_OK : SOL_ALLOC;
}

/* cusolverDnS<name> and cusolverDnD<name>: float * and double * are the
 * same at the ABI, so both take void *. */
#define SOL_PAIR(name, params, ...)                                                                \
    EMU_EXPORT int cusolverDnS##name params {                                                      \
        return sol_##name(0, __VA_ARGS__);                                                         \
    }                                                                                              \
    EMU_EXPORT int cusolverDnD##name params {                                                      \
        return sol_##name(1, __VA_ARGS__);                                                         \
    }
#define sol_getrf_bufferSize sol_getrf_bs
#define sol_potrf_bufferSize sol_potrf_bs
#define sol_geqrf_bufferSize sol_geqrf_bs
#define sol_orgqr_bufferSize sol_orgqr_bs
#define sol_gesvd_bufferSize sol_gesvd_bs
#define sol_syevd_bufferSize sol_syevd_bs

SOL_PAIR(getrf_bufferSize, (emu_solver * h, int m, int n, void *A, int lda, int *lw), h, m, n, A,
         lda, lw)
SOL_PAIR(getrf, (emu_solver * h, int m, int n, void *A, int lda, void *W, int *ipiv, int *info), h,
         m, n, A, lda, W, ipiv, info)
SOL_PAIR(getrs,
         (emu_solver * h, int t, int n, int nrhs, const void *A, int lda, const int *ipiv, void *B,
          int ldb, int *info),
         h, t, n, nrhs, A, lda, ipiv, B, ldb, info)
SOL_PAIR(potrf_bufferSize, (emu_solver * h, int uplo, int n, void *A, int lda, int *lw), h, uplo, n,
         A, lda, lw)
SOL_PAIR(potrf, (emu_solver * h, int uplo, int n, void *A, int lda, void *W, int lw, int *info), h,
         uplo, n, A, lda, W, lw, info)
SOL_PAIR(geqrf_bufferSize, (emu_solver * h, int m, int n, void *A, int lda, int *lw), h, m, n, A,
         lda, lw)
SOL_PAIR(geqrf,
         (emu_solver * h, int m, int n, void *A, int lda, void *tau, void *W, int lw, int *info), h,
         m, n, A, lda, tau, W, lw, info)
SOL_PAIR(orgqr_bufferSize,
         (emu_solver * h, int m, int n, int k, const void *A, int lda, const void *tau, int *lw), h,
         m, n, k, A, lda, tau, lw)
SOL_PAIR(orgqr,
         (emu_solver * h, int m, int n, int k, void *A, int lda, const void *tau, void *W, int lw,
          int *info),
         h, m, n, k, A, lda, tau, W, lw, info)
SOL_PAIR(gesvd_bufferSize, (emu_solver * h, int m, int n, int *lw), h, m, n, lw)
SOL_PAIR(gesvd,
         (emu_solver * h, signed char ju, signed char jv, int m, int n, void *A, int lda, void *S,
          void *U, int ldu, void *VT, int ldvt, void *W, int lw, void *rwork, int *info),
         h, ju, jv, m, n, A, lda, S, U, ldu, VT, ldvt, W, lw, rwork, info)
SOL_PAIR(syevd_bufferSize,
         (emu_solver * h, int jobz, int uplo, int n, const void *A, int lda, const void *W,
          int *lw),
         h, jobz, uplo, n, A, lda, W, lw)
SOL_PAIR(syevd,
         (emu_solver * h, int jobz, int uplo, int n, void *A, int lda, void *Wv, void *W, int lw,
          int *info),
         h, jobz, uplo, n, A, lda, Wv, W, lw, info)

/* ---- graphs ---- */

static CUresult node_run(emu_node *n) {
    switch (n->kind) {
    case NODE_KERNEL: return kernel_run(n);
    case NODE_COPY: memmove(mem_host(n->dst), mem_host(n->src), n->n); return CUDA_SUCCESS;
    case NODE_SET: memset(mem_host(n->dst), n->value, n->n); return CUDA_SUCCESS;
    default: gemm_run(&n->gemm); return CUDA_SUCCESS;
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
        emu_node *c = node_new(n->kind);
        if (!c) goto oom;
        *c = *n;
        c->next = NULL;
        c->args = NULL;
        c->blob = NULL;
        *tail = c;
        tail = &c->next;
        if (n->kind != NODE_KERNEL) continue;
        size_t total = 0;
        for (int i = 0; i < n->fn->nparams; i++) total += (n->fn->sizes[i] + 15) & ~(size_t)15;
        c->args = calloc((size_t)n->fn->nparams + 1, sizeof *c->args);
        c->blob = malloc(total + 16);
        if (!c->args || !c->blob) goto oom;
        memcpy(c->blob, n->blob, total + 16);
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

/* ---- NVRTC: CUDA C as host C++ ---- */

typedef struct emu_prog {
    char *src;
    char *log;
    char *image;
    size_t image_n;
} emu_prog;

EMU_EXPORT const char *nvrtcGetErrorString(int r) {
    return r == NVRTC_SUCCESS                ? "NVRTC_SUCCESS"
           : r == NVRTC_ERROR_COMPILATION    ? "NVRTC_ERROR_COMPILATION"
           : r == NVRTC_ERROR_OUT_OF_MEMORY  ? "NVRTC_ERROR_OUT_OF_MEMORY"
           : r == NVRTC_ERROR_INVALID_OPTION ? "NVRTC_ERROR_INVALID_OPTION"
                                             : "NVRTC_ERROR";
}

static char *file_read(const char *path, size_t *n);

/* Not a real NVRTC: the version keys the disk cache, so it is 99 and a
 * hash of what shapes the images (the device header, this format). */
EMU_EXPORT int nvrtcVersion(int *major, int *minor) {
    static int hash = -1;
    if (hash < 0) {
        size_t n = 0;
        char *h = file_read(HD_EMU_HEADER, &n);
        uint32_t x = 2166136261u ^ 3u; /* 3: the entry points' format */
        for (size_t i = 0; h && i < n; i++) x = (x ^ (unsigned char)h[i]) * 16777619u;
        free(h);
        hash = (int)(x & 0x7fffffff);
    }
    *major = 99;
    *minor = hash;
    return NVRTC_SUCCESS;
}

EMU_EXPORT int nvrtcCreateProgram(emu_prog **out, const char *src, const char *name, int nh,
                                  const char *const *h, const char *const *hn) {
    (void)name, (void)h, (void)hn;
    if (nh != 0) return 3; /* no headers: the generated code uses none */
    emu_prog *p = calloc(1, sizeof *p);
    if (!p || !(p->src = strdup(src))) {
        free(p);
        return NVRTC_ERROR_OUT_OF_MEMORY;
    }
    *out = p;
    return NVRTC_SUCCESS;
}

EMU_EXPORT int nvrtcDestroyProgram(emu_prog **p) {
    if (!p || !*p) return 4;
    free((*p)->src);
    free((*p)->log);
    free((*p)->image);
    free(*p);
    *p = NULL;
    return NVRTC_SUCCESS;
}

static int mem_has(const char *p, size_t n, const char *what) {
    size_t w = strlen(what);
    for (size_t i = 0; i + w <= n; i++)
        if (!memcmp(p + i, what, w)) return 1;
    return 0;
}

/* The names that reach a barrier: __syncthreads and every __device__
 * function whose text mentions one of them (found until none is added;
 * a name that only looks like one costs speed, not results). */
typedef struct sync_names {
    char name[64][64];
    int n;
} sync_names;

static int sync_mentions(const sync_names *sn, const char *p, size_t n) {
    for (int i = 0; i < sn->n; i++)
        if (mem_has(p, n, sn->name[i])) return 1;
    return 0;
}

/* The function name after a __device__ at p (the identifier before the
 * first '('), in out. */
static int sync_def_name(const char *p, char *out, size_t cap) {
    const char *paren = strchr(p, '(');
    if (!paren) return 0;
    const char *e = paren;
    while (e > p && e[-1] == ' ') e--;
    const char *b = e;
    while (b > p && (b[-1] == '_' || (b[-1] >= 'a' && b[-1] <= 'z') ||
                     (b[-1] >= 'A' && b[-1] <= 'Z') || (b[-1] >= '0' && b[-1] <= '9')))
        b--;
    if (b == e || (size_t)(e - b) >= cap) return 0;
    memcpy(out, b, (size_t)(e - b));
    out[e - b] = 0;
    return 1;
}

/* The text from p to the next definition. */
static size_t sync_def_len(const char *p) {
    const char *d = strstr(p + 1, "__device__"), *g = strstr(p + 1, "__global__");
    const char *e = !d ? g : !g ? d : d < g ? d : g;
    return e ? (size_t)(e - p) : strlen(p);
}

static void sync_collect(const char *src, sync_names *sn) {
    snprintf(sn->name[0], sizeof sn->name[0], "__syncthreads");
    sn->n = 1;
    for (int added = 1; added && sn->n < 64;) {
        added = 0;
        for (const char *p = strstr(src, "__device__"); p && sn->n < 64;
             p = strstr(p + 1, "__device__")) {
            char name[64];
            size_t len = sync_def_len(p);
            if (!sync_def_name(p, name, sizeof name) || !sync_mentions(sn, p, len)) continue;
            int known = 0;
            for (int i = 0; i < sn->n; i++) known |= !strcmp(sn->name[i], name);
            if (known) continue;
            snprintf(sn->name[sn->n++], sizeof sn->name[0], "%s", name);
            added = 1;
        }
    }
}

/* The source with the entry points of every kernel appended. */
static char *prog_source(const char *src) {
    size_t n = strlen(src), cap = n * 2 + 4096, len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    memcpy(out, src, n);
    len = n;
    sync_names sn;
    sync_collect(src, &sn);
    for (const char *p = strstr(src, "__global__"); p; p = strstr(p + 1, "__global__")) {
        const char *q = p + 10;
        while (*q == ' ') q++;
        if (!strncmp(q, "void", 4)) q += 4;
        while (*q == ' ') q++;
        if (!strncmp(q, "__launch_bounds__", 17)) {
            q = strchr(q, ')');
            if (!q) break;
            q++;
            while (*q == ' ') q++;
        }
        size_t k = 0;
        while (q[k] == '_' || (q[k] >= 'a' && q[k] <= 'z') || (q[k] >= 'A' && q[k] <= 'Z') ||
               (q[k] >= '0' && q[k] <= '9'))
            k++;
        if (!k) continue;
        int sync = sync_mentions(&sn, q, sync_def_len(q));
        if (len + 5 * k + 400 > cap) {
            cap = cap * 2 + 5 * k + 400;
            char *m = realloc(out, cap);
            if (!m) {
                free(out);
                return NULL;
            }
            out = m;
        }
        len +=
            (size_t)snprintf(out + len, cap - len,
                             "\nextern \"C\" int %.*s__emu_sig(size_t *s, unsigned char *p, "
                             "int cap) { return hd_emu_sig(%.*s, s, p, cap); }\n"
                             "extern \"C\" void %.*s__emu_run(void **a) { hd_emu_run(%.*s, a); }\n"
                             "extern \"C\" const int %.*s__emu_sync = %d;\n",
                             (int)k, q, (int)k, q, (int)k, q, (int)k, q, (int)k, q, sync);
    }
    out[len] = 0;
    return out;
}

static char *file_read(const char *path, size_t *n) {
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

/* cxx -o so src, its messages into log; the exit status. */
static int prog_cxx(const char *src, const char *so, const char *log) {
    const char *cxx = getenv("HODU_EMU_CXX");
    const char *opt = getenv("HODU_EMU_OPT");
    char *argv[] = {(char *)(cxx && *cxx ? cxx : HD_EMU_CXX),
                    "-std=c++17",
                    (char *)(opt && *opt ? opt : "-O1"),
                    "-fPIC",
                    "-ffp-contract=off", /* as NVRTC's --fmad=false */
                    "-shared",
                    "-w",
                    "-I",
                    HD_EMU_INCLUDE,
                    "-include",
                    HD_EMU_HEADER,
                    "-x",
                    "c++",
                    (char *)src,
                    "-o",
                    (char *)so,
                    NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (r) return -1;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Modules are compiled as host C++ with -ffp-contract=off: the model of
 * NVRTC's --fmad=false only, so a compile without it is refused (on a GPU
 * contracted FMAs would round otherwise than the emulator does). */
static int prog_fmad_off(int nopt, const char *const *opts) {
    for (int i = 0; i < nopt; i++)
        if (opts[i] && !strcmp(opts[i], "--fmad=false")) return 1;
    return 0;
}

EMU_EXPORT int nvrtcCompileProgram(emu_prog *p, int nopt, const char *const *opts) {
    if (!prog_fmad_off(nopt, opts)) {
        free(p->log);
        p->log = strdup("cuda emulator: compile with --fmad=false (the only rounding it models)");
        return NVRTC_ERROR_INVALID_OPTION;
    }
    char *text = prog_source(p->src);
    char src[4096], so[4200], log[4200];
    if (!text || !temp_write(src, sizeof src, ".cu", text, strlen(text))) {
        free(text);
        return NVRTC_ERROR_OUT_OF_MEMORY;
    }
    free(text);
    snprintf(so, sizeof so, "%s.so", src);
    snprintf(log, sizeof log, "%s.log", src);
    int r = prog_cxx(src, so, log);
    size_t n = 0;
    free(p->log);
    p->log = file_read(log, &n);
    char *img = r == 0 ? file_read(so, &n) : NULL;
    if (getenv("HODU_EMU_KEEP")) /* debugging: keep the source */
        fprintf(stderr, "cuda emulator: %s\n", src);
    else
        unlink(src);
    unlink(so);
    unlink(log);
    if (!img) return NVRTC_ERROR_COMPILATION;
    p->image = malloc(n + 16);
    if (!p->image) {
        free(img);
        return NVRTC_ERROR_OUT_OF_MEMORY;
    }
    uint64_t n64 = n;
    memcpy(p->image, IMAGE_MAGIC, 8);
    memcpy(p->image + 8, &n64, 8);
    memcpy(p->image + 16, img, n);
    p->image_n = n + 16;
    free(img);
    return NVRTC_SUCCESS;
}

EMU_EXPORT int nvrtcGetProgramLogSize(emu_prog *p, size_t *n) {
    *n = (p->log ? strlen(p->log) : 0) + 1;
    return NVRTC_SUCCESS;
}
EMU_EXPORT int nvrtcGetProgramLog(emu_prog *p, char *out) {
    strcpy(out, p->log ? p->log : "");
    return NVRTC_SUCCESS;
}
EMU_EXPORT int nvrtcGetCUBINSize(emu_prog *p, size_t *n) {
    *n = p->image_n;
    return NVRTC_SUCCESS;
}
EMU_EXPORT int nvrtcGetCUBIN(emu_prog *p, char *out) {
    if (!p->image) return 4;
    memcpy(out, p->image, p->image_n);
    return NVRTC_SUCCESS;
}
