/* The emulated CUDA device's internals, shared by its parts: emu.c (the
 * driver: memory, devices, streams, modules, launches, graphs),
 * emu_blas.c (cuBLAS), emu_solver.c (cuSOLVER), emu_nvrtc.c (NVRTC) and
 * emu_nccl.c (NCCL).
 * Not installed; nothing here is exported from the library. */
#ifndef HD_EMU_INT_H
#define HD_EMU_INT_H

#include <stddef.h>
#include <stdint.h>

#define EMU_EXPORT __attribute__((visibility("default")))

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
enum { ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76, ATTR_SMS = 16, ATTR_SM_THREADS = 39 };
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
    X(cuEventSynchronize)                                                                          \
    X(cuMemHostAlloc)                                                                              \
    X(cuMemFreeHost)                                                                               \
    X(cuEventElapsedTime_v2)                                                                       \
    X(cuMemcpyPeerAsync)                                                                           \
    X(cuStreamWaitEvent)                                                                           \
    X(cusolverDn)                                                                                  \
    X(cublasGemmStridedBatchedEx)                                                                  \
    X(cublasGemmEx)                                                                                \
    X(cublasSetWorkspace_v2)                                                                       \
    X(ncclCommInitRank)                                                                            \
    X(ncclAllReduce)                                                                               \
    X(ncclBroadcast)                                                                               \
    X(ncclAllGather)                                                                               \
    X(ncclReduceScatter)

#define EMU_COUNT_ENUM(name) EMU_N_##name,
enum { EMU_COUNTED(EMU_COUNT_ENUM) EMU_N_COUNT };
extern unsigned long long emu_counts[EMU_N_COUNT];
#define EMU_COUNT(name) (emu_counts[EMU_N_##name]++)

/* ---- streams and the work they run ---- */

typedef struct emu_node emu_node;
typedef struct emu_stream {
    int dev; /* the device whose context made it */
    int capturing, invalidated;
    emu_node *head, **tail; /* the graph being captured */
} emu_stream;

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

/* A module image made by emu_nvrtc.c: this magic, the size of the shared
 * object (8 bytes), then the shared object. */
#define IMAGE_MAGIC "HDEMUSO1"

/* memory (emu.c) */
void *emu_mem_host(CUdeviceptr p);
int emu_mem_valid(CUdeviceptr p, size_t n);
int emu_mem_valid_on(CUdeviceptr p, size_t n, int dev);
int emu_mem_host_arg_bad(const void *p, const char *what);

/* devices and streams (emu.c): the current context's device (-1: none) */
int emu_current_dev(void);
int emu_stream_dev(const emu_stream *s);
int emu_dev_ptrs_ok(const uintptr_t *ptrs, int n, int dev, const char *what);
emu_node *emu_node_new(int kind);
CUresult emu_stream_submit(emu_stream *s, emu_node *n);

/* files (emu.c) */
int emu_temp_write(char *path, size_t cap, const char *suffix, const void *p, size_t n);
char *emu_file_read(const char *path, size_t *n);

/* cuBLAS (emu_blas.c): run a GEMM node. */
void emu_gemm_run(const emu_gemm *g);

#endif
