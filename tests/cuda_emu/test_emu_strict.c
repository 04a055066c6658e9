/* The emulated device keeps device memory out of host code's reach, as a
 * GPU does: a host load or store through a CUdeviceptr faults, a kernel
 * given a host pointer fails its launch, and a copy given device memory
 * as its host side fails; while copies, memsets, kernels (pointer
 * parameters at any offset into an allocation), captured graphs and GEMMs
 * see the same bytes. Made with two devices, memory belongs to the device
 * whose context allocated it: work on one device's stream that reaches
 * the other's memory is refused, a peer copy goes across. Pinned host
 * memory a copy up reads is not copied or freed again before that copy
 * is waited for. Runs on the
 * emulator library alone (its path in argv[1]), no Hodu. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static int failures;
#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);                  \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static void *emu;
static void *sym(const char *name) {
    void *p = dlsym(emu, name);
    if (!p) {
        fprintf(stderr, "emulator lacks %s\n", name);
        exit(1);
    }
    return p;
}
#define FN(ret, name, ...) ret (*name)(__VA_ARGS__) = (ret(*)(__VA_ARGS__))sym(#name)

/* Does a child that touches p (writing when write is set) die before it
 * can exit 0? The child's stderr is closed (a sanitizer reports there). */
static int host_access_faults(CUdeviceptr p, int write) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) dup2(fd, 2);
        volatile char *c = (volatile char *)(uintptr_t)p;
        if (write)
            c[1] = 7;
        else
            (void)c[1];
        _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return 0;
    return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static const char kernel_src[] =
    "extern \"C\" __global__ void twice(float *o, const float *a, long long n) {\n"
    "  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "  if (i < n) o[i] = 2 * a[i]; }\n";

/* The kernel twice(o, a, n) from the emulator's NVRTC; its module in *mod. */
static void *kernel_load(void **mod) {
    FN(int, nvrtcCreateProgram, void **, const char *, const char *, int, const char *const *,
       const char *const *);
    FN(int, nvrtcCompileProgram, void *, int, const char *const *);
    FN(int, nvrtcGetCUBINSize, void *, size_t *);
    FN(int, nvrtcGetCUBIN, void *, char *);
    FN(int, nvrtcDestroyProgram, void **);
    FN(CUresult, cuModuleLoadData, void **, const void *);
    FN(CUresult, cuModuleGetFunction, void **, void *, const char *);
    void *prog = NULL, *fn = NULL;
    size_t n = 0;
    static const char *const opts[] = {"--fmad=false"};
    if (nvrtcCreateProgram(&prog, kernel_src, "t.cu", 0, NULL, NULL)) return NULL;
    /* the emulator rounds as --fmad=false does: other compiles are refused */
    CHECK(nvrtcCompileProgram(prog, 0, NULL) != 0);
    if (nvrtcCompileProgram(prog, 1, opts) || nvrtcGetCUBINSize(prog, &n)) return NULL;
    char *img = malloc(n);
    if (img && !nvrtcGetCUBIN(prog, img) && !cuModuleLoadData(mod, img))
        cuModuleGetFunction(&fn, *mod, "twice");
    free(img);
    nvrtcDestroyProgram(&prog);
    return fn;
}

static void check_host_access(CUdeviceptr p) {
    CHECK(host_access_faults(p, 0));
    CHECK(host_access_faults(p, 1));
    CHECK(host_access_faults(p + 4096, 0)); /* anywhere in the allocation */
}

static void check_copies(CUdeviceptr p, CUdeviceptr q) {
    FN(CUresult, cuMemcpyHtoDAsync_v2, CUdeviceptr, const void *, size_t, void *);
    FN(CUresult, cuMemcpyDtoHAsync_v2, void *, CUdeviceptr, size_t, void *);
    FN(CUresult, cuMemcpyDtoDAsync_v2, CUdeviceptr, CUdeviceptr, size_t, void *);
    FN(CUresult, cuMemsetD8Async, CUdeviceptr, unsigned char, size_t, void *);
    float in[4] = {1, 2, 3, 4}, out[4] = {0};
    CHECK(cuMemcpyHtoDAsync_v2(p, in, sizeof in, NULL) == 0);
    CHECK(cuMemcpyDtoDAsync_v2(q + 8, p, sizeof in, NULL) == 0);
    CHECK(cuMemcpyDtoHAsync_v2(out, q + 8, sizeof out, NULL) == 0);
    CHECK(memcmp(in, out, sizeof in) == 0);
    CHECK(cuMemsetD8Async(q, 0, 8, NULL) == 0);
    unsigned char z[12];
    CHECK(cuMemcpyDtoHAsync_v2(z, q, sizeof z, NULL) == 0);
    CHECK(z[0] == 0 && z[7] == 0 && z[11] == 0x3f); /* then 1.0f: 00 00 80 3f */
    /* device memory as a copy's host side: refused, not read */
    CHECK(cuMemcpyHtoDAsync_v2(p, (const void *)(uintptr_t)q, 4, NULL) != 0);
    CHECK(cuMemcpyDtoHAsync_v2((void *)(uintptr_t)q, p, 4, NULL) != 0);
    /* past the end of an allocation */
    CHECK(cuMemcpyDtoHAsync_v2(out, p + (1 << 20) - 2, 4, NULL) != 0);
}

/* Pinned host memory: a copy up from bytes an earlier copy read, or their
 * release, is refused until an event recorded after that copy (or the
 * stream) was waited for; other bytes of the buffer are free. */
static void check_pinned(CUdeviceptr p) {
    FN(CUresult, cuMemHostAlloc, void **, size_t, unsigned);
    FN(CUresult, cuMemFreeHost, void *);
    FN(CUresult, cuMemcpyHtoDAsync_v2, CUdeviceptr, const void *, size_t, void *);
    FN(CUresult, cuMemcpyDtoHAsync_v2, void *, CUdeviceptr, size_t, void *);
    FN(CUresult, cuStreamCreate, void **, unsigned);
    FN(CUresult, cuStreamSynchronize, void *);
    FN(CUresult, cuStreamDestroy_v2, void *);
    FN(CUresult, cuEventCreate, void **, unsigned);
    FN(CUresult, cuEventRecord, void *, void *);
    FN(CUresult, cuEventSynchronize, void *);
    FN(CUresult, cuEventDestroy_v2, void *);
    void *s = NULL, *e = NULL, *e2 = NULL;
    float *h = NULL, out[4] = {0};
    CHECK(cuStreamCreate(&s, 0) == 0 && cuEventCreate(&e, 2) == 0 && cuEventCreate(&e2, 2) == 0);
    CHECK(cuMemHostAlloc((void **)&h, 64, 0) == 0 && h);
    if (!h) return;
    h[0] = 1, h[1] = 2, h[8] = 3;
    CHECK(cuEventRecord(e, s) == 0); /* before the copy: does not cover it */
    CHECK(cuMemcpyHtoDAsync_v2(p, h, 8, s) == 0);
    CHECK(cuMemcpyHtoDAsync_v2(p + 8, h + 8, 4, s) == 0); /* other bytes */
    CHECK(cuMemcpyHtoDAsync_v2(p, h + 1, 4, s) != 0);     /* busy */
    CHECK(cuEventSynchronize(e) == 0 && cuMemcpyHtoDAsync_v2(p, h, 4, s) != 0);
    CHECK(cuMemFreeHost(h) != 0);
    CHECK(cuEventRecord(e2, s) == 0 && cuEventSynchronize(e2) == 0);
    CHECK(cuMemcpyHtoDAsync_v2(p + 4, h, 4, s) == 0); /* done: free again */
    CHECK(cuMemFreeHost(h) != 0 && cuStreamSynchronize(s) == 0 && cuMemFreeHost(h) == 0);
    CHECK(cuMemcpyDtoHAsync_v2(out, p, sizeof out, s) == 0);
    CHECK(out[0] == 1 && out[1] == 1 && out[2] == 3);
    CHECK(cuEventDestroy_v2(e) == 0 && cuEventDestroy_v2(e2) == 0 && cuStreamDestroy_v2(s) == 0);
}

static void check_kernel(void *fn, CUdeviceptr p, CUdeviceptr q) {
    FN(CUresult, cuLaunchKernel, void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
       unsigned, void *, void **, void **);
    FN(CUresult, cuMemcpyHtoDAsync_v2, CUdeviceptr, const void *, size_t, void *);
    FN(CUresult, cuMemcpyDtoHAsync_v2, void *, CUdeviceptr, size_t, void *);
    float in[4] = {1, 2, 3, 4}, out[3] = {0};
    CHECK(cuMemcpyHtoDAsync_v2(p, in, sizeof in, NULL) == 0);
    CUdeviceptr o = q + 4, a = p + 4; /* offsets into allocations */
    long long n = 3;
    void *args[] = {&o, &a, &n};
    CHECK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL) == 0);
    CHECK(cuMemcpyDtoHAsync_v2(out, q + 4, sizeof out, NULL) == 0);
    CHECK(out[0] == 4 && out[1] == 6 && out[2] == 8);
    /* a host pointer as a kernel's pointer: the launch fails (700) */
    float host[4] = {0};
    void *hp = host;
    void *bad[] = {&hp, &a, &n};
    CHECK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, NULL, bad, NULL) == 700);
    CHECK(host[0] == 0);
}

static void check_graph(void *fn, CUdeviceptr p, CUdeviceptr q) {
    FN(CUresult, cuStreamCreate, void **, unsigned);
    FN(CUresult, cuStreamBeginCapture_v2, void *, int);
    FN(CUresult, cuStreamEndCapture, void *, void **);
    FN(CUresult, cuGraphInstantiateWithFlags, void **, void *, unsigned long long);
    FN(CUresult, cuGraphLaunch, void *, void *);
    FN(CUresult, cuGraphExecDestroy, void *);
    FN(CUresult, cuGraphDestroy, void *);
    FN(CUresult, cuStreamDestroy_v2, void *);
    FN(CUresult, cuLaunchKernel, void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
       unsigned, void *, void **, void **);
    FN(CUresult, cuMemcpyDtoDAsync_v2, CUdeviceptr, CUdeviceptr, size_t, void *);
    FN(CUresult, cuMemcpyHtoDAsync_v2, CUdeviceptr, const void *, size_t, void *);
    FN(CUresult, cuMemcpyDtoHAsync_v2, void *, CUdeviceptr, size_t, void *);
    void *s = NULL, *g = NULL, *e = NULL;
    float in[2] = {5, 6}, out[2] = {0};
    long long n = 2;
    void *args[] = {&q, &p, &n};
    CHECK(cuStreamCreate(&s, 0) == 0 && cuStreamBeginCapture_v2(s, 2) == 0);
    CHECK(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s, args, NULL) == 0);
    CHECK(cuMemcpyDtoDAsync_v2(p + 64, q, 8, s) == 0);
    CHECK(cuStreamEndCapture(s, &g) == 0 && cuGraphInstantiateWithFlags(&e, g, 0) == 0);
    CHECK(cuMemcpyHtoDAsync_v2(p, in, sizeof in, NULL) == 0);
    CHECK(cuGraphLaunch(e, s) == 0);
    CHECK(cuMemcpyDtoHAsync_v2(out, p + 64, sizeof out, NULL) == 0);
    CHECK(out[0] == 10 && out[1] == 12);
    cuGraphExecDestroy(e);
    cuGraphDestroy(g);
    cuStreamDestroy_v2(s);
}

/* C = A B with A 2x3, B 3x2, column-major, through device pointers. */
static void check_gemm(CUdeviceptr p, CUdeviceptr q) {
    FN(int, cublasCreate_v2, void **);
    FN(int, cublasDestroy_v2, void *);
    FN(int, cublasGemmStridedBatchedEx, void *, int, int, int, int, int, const void *, const void *,
       int, int, long long, const void *, int, int, long long, const void *, void *, int, int,
       long long, int, int, int);
    FN(CUresult, cuMemcpyHtoDAsync_v2, CUdeviceptr, const void *, size_t, void *);
    FN(CUresult, cuMemcpyDtoHAsync_v2, void *, CUdeviceptr, size_t, void *);
    void *h = NULL;
    double a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 1, 0, 1, 1}, c[4] = {0};
    double one = 1, zero = 0;
    CHECK(cublasCreate_v2(&h) == 0);
    CHECK(cuMemcpyHtoDAsync_v2(p, a, sizeof a, NULL) == 0);
    CHECK(cuMemcpyHtoDAsync_v2(p + 64, b, sizeof b, NULL) == 0);
    CHECK(cublasGemmStridedBatchedEx(h, 0, 0, 2, 2, 3, &one, (void *)(uintptr_t)p, 1, 2, 0,
                                     (void *)(uintptr_t)(p + 64), 1, 3, 0, &zero,
                                     (void *)(uintptr_t)q, 1, 2, 0, 1, 70, 0) == 0);
    CHECK(cuMemcpyDtoHAsync_v2(c, q, sizeof c, NULL) == 0);
    /* columns of A: (1,2) (3,4) (5,6); B's columns (1,0,1) and (0,1,1) */
    CHECK(c[0] == 6 && c[1] == 8 && c[2] == 8 && c[3] == 10);
    /* alpha in device memory (the pointer mode is host): refused */
    CHECK(cublasGemmStridedBatchedEx(h, 0, 0, 2, 2, 3, (void *)(uintptr_t)p, (void *)(uintptr_t)p,
                                     1, 2, 0, (void *)(uintptr_t)(p + 64), 1, 3, 0, &zero,
                                     (void *)(uintptr_t)q, 1, 2, 0, 1, 70, 0) != 0);
    cublasDestroy_v2(h);
}

/* Freed memory is reused, and still unreachable from the host. */
static void check_reuse(void) {
    FN(CUresult, cuMemAlloc_v2, CUdeviceptr *, size_t);
    FN(CUresult, cuMemFree_v2, CUdeviceptr);
    CUdeviceptr a = 0, b = 0;
    CHECK(cuMemAlloc_v2(&a, 3 << 20) == 0);
    CHECK(cuMemFree_v2(a) == 0);
    CHECK(cuMemFree_v2(a) != 0); /* twice */
    CHECK(cuMemAlloc_v2(&b, 1 << 20) == 0 && b == a);
    CHECK(host_access_faults(b, 0));
    CHECK(cuMemFree_v2(b) == 0);
}

static void *ctx_of(int dev) {
    FN(CUresult, cuDevicePrimaryCtxRetain, void **, int);
    void *c = NULL;
    CHECK(cuDevicePrimaryCtxRetain(&c, dev) == 0 && c);
    return c;
}

/* Two devices: each allocation is its context's; a copy, memset or
 * kernel (fn, loaded in device 0's context) on one device's stream that
 * reaches the other's memory fails, a peer copy does not. */
static void check_devices(void *fn) {
    FN(CUresult, cuLaunchKernel, void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
       unsigned, void *, void **, void **);
    FN(CUresult, cuMemAlloc_v2, CUdeviceptr *, size_t);
    FN(CUresult, cuMemFree_v2, CUdeviceptr);
    FN(CUresult, cuCtxSetCurrent, void *);
    FN(CUresult, cuStreamCreate, void **, unsigned);
    FN(CUresult, cuStreamDestroy_v2, void *);
    FN(CUresult, cuDeviceGetCount, int *);
    FN(CUresult, cuMemcpyDtoDAsync_v2, CUdeviceptr, CUdeviceptr, size_t, void *);
    FN(CUresult, cuMemsetD8Async, CUdeviceptr, unsigned char, size_t, void *);
    FN(CUresult, cuMemcpyPeerAsync, CUdeviceptr, void *, CUdeviceptr, void *, size_t, void *);
    FN(CUresult, cuMemcpyHtoDAsync_v2, CUdeviceptr, const void *, size_t, void *);
    FN(CUresult, cuMemcpyDtoHAsync_v2, void *, CUdeviceptr, size_t, void *);
    int n = 0;
    CHECK(cuDeviceGetCount(&n) == 0 && n == 2);
    void *c0 = ctx_of(0), *c1 = ctx_of(1), *s0 = NULL, *s1 = NULL;
    CUdeviceptr a = 0, b = 0;
    CHECK(cuCtxSetCurrent(c0) == 0 && cuMemAlloc_v2(&a, 64) == 0 && cuStreamCreate(&s0, 1) == 0);
    CHECK(cuCtxSetCurrent(c1) == 0 && cuMemAlloc_v2(&b, 64) == 0 && cuStreamCreate(&s1, 1) == 0);
    char v[64], w[64];
    for (int i = 0; i < 64; i++) v[i] = (char)i;
    CHECK(cuMemcpyHtoDAsync_v2(a, v, 64, s0) == 0);
    CHECK(cuMemcpyDtoDAsync_v2(b, a, 64, s1) != 0); /* a is device 0's */
    CHECK(cuMemsetD8Async(a, 0, 64, s1) != 0);
    CHECK(cuMemcpyPeerAsync(b, c1, a, c0, 64, s0) == 0);
    CHECK(cuMemcpyPeerAsync(b, c0, a, c0, 64, s0) != 0); /* b is not device 0's */
    CHECK(cuMemcpyDtoHAsync_v2(w, b, 64, s1) == 0 && memcmp(v, w, 64) == 0);
    long long k = 3;
    void *args[] = {&b, &a, &k};
    CHECK(!fn || cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s1, args, NULL) == 400); /* ctx 1 */
    CHECK(cuCtxSetCurrent(c0) == 0);
    CHECK(!fn || cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s0, args, NULL) == 700); /* b */
    void *ok[] = {&a, &a, &k};
    CHECK(!fn || cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s0, ok, NULL) == 0);
    CHECK(cuStreamDestroy_v2(s0) == 0 && cuStreamDestroy_v2(s1) == 0);
    CHECK(cuMemFree_v2(a) == 0 && cuMemFree_v2(b) == 0);
    CHECK(cuCtxSetCurrent(c0) == 0);
}

int main(int argc, char **argv) {
    setenv("HODU_CUDA_EMU_DEVICES", "2", 1);
    if (argc != 2 || !(emu = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL))) {
        fprintf(stderr, "usage: test_emu_strict LIBHODU_CUDA_EMU (%s)\n", dlerror());
        return 1;
    }
    FN(CUresult, cuMemAlloc_v2, CUdeviceptr *, size_t);
    FN(CUresult, cuCtxSetCurrent, void *);
    CUdeviceptr p = 0;
    CHECK(cuMemAlloc_v2(&p, 64) != 0); /* no current context */
    CHECK(cuCtxSetCurrent(ctx_of(0)) == 0);
    CUdeviceptr q = 0;
    CHECK(cuMemAlloc_v2(&p, 1 << 20) == 0 && cuMemAlloc_v2(&q, 1 << 20) == 0);
    check_host_access(p);
    check_copies(p, q);
    check_pinned(p);
    FN(CUresult, cuModuleUnload, void *);
    FN(CUresult, cuMemFree_v2, CUdeviceptr);
    void *mod = NULL, *fn = kernel_load(&mod);
    CHECK(fn != NULL);
    if (fn) {
        check_kernel(fn, p, q);
        check_graph(fn, p, q);
    }
    check_gemm(p, q);
    check_devices(fn);
    if (mod) cuModuleUnload(mod);
    CHECK(cuMemFree_v2(p) == 0 && cuMemFree_v2(q) == 0);
    check_reuse();
    if (failures) fprintf(stderr, "%d checks failed\n", failures);
    return failures != 0;
}
