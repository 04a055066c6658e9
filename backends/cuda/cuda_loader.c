/* The CUDA libraries, opened at run time (dlopen) so that one build runs on
 * machines with and without a GPU. Opened once per process, on the first
 * call, under pthread_once; the handles stay open until exit (the driver
 * is process-wide anyway). HODU_CUDA_DRIVER, HODU_CUDA_NVRTC,
 * HODU_CUDA_BLAS, HODU_CUDA_SOLVER and HODU_CUDA_NCCL name other libraries to open instead (tests
 * use a missing driver to exercise the no-GPU paths, and tests/cuda_emu's emulated device to run
 * the CUDA code on machines without a GPU). */
#if HODU_HAVE_CUDA
#include "cuda_int.h"
#include "hd_dist.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hd_cuda_api cuda_api;
static pthread_once_t cuda_api_once = PTHREAD_ONCE_INIT;

/* First library of names that opens; names[0] is reported when none does.
 * The environment variable env, when set, is the one name tried. */
static void *loader_open(const char *env, const char *const *names, char *err, size_t n,
                         const char *what) {
    const char *e = getenv(env);
    const char *only[] = {e, NULL};
    if (e && *e) names = only;
    for (int i = 0; names[i]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
    }
    snprintf(err, n, "%s not found%s", names[0], what);
    return NULL;
}

/* Resolve each (slot, symbol) pair; 0 and an error naming the first
 * missing symbol. */
typedef struct {
    void **slot;
    const char *name;
} loader_sym;

static int loader_resolve(void *h, const loader_sym *syms, int n, char *err, size_t errn,
                          const char *lib) {
    for (int i = 0; i < n; i++) {
        *syms[i].slot = dlsym(h, syms[i].name);
        if (!*syms[i].slot) {
            snprintf(err, errn, "%s has no %s (too old?)", lib, syms[i].name);
            return 0;
        }
    }
    return 1;
}

/* The event calls that time device work for the profiler: optional (a
 * driver without them runs, its work untimed); with the peer copy and the
 * stream wait they also order copies between two devices (without them,
 * such copies go through the host), and with pinned memory they let
 * copies up return before the device has them (without, copies up wait).
 * cuEventElapsedTime_v2 is the name CUDA 13's header maps
 * cuEventElapsedTime to. */
static void loader_events(void *h, hd_cuda_api *a) {
    *(void **)&a->event_create = dlsym(h, "cuEventCreate");
    *(void **)&a->event_record = dlsym(h, "cuEventRecord");
    *(void **)&a->event_synchronize = dlsym(h, "cuEventSynchronize");
    *(void **)&a->event_destroy = dlsym(h, "cuEventDestroy_v2");
    void *et = dlsym(h, "cuEventElapsedTime_v2");
    *(void **)&a->event_elapsed_time = et ? et : dlsym(h, "cuEventElapsedTime");
    a->events_ok = a->event_create && a->event_record && a->event_synchronize && a->event_destroy &&
                   a->event_elapsed_time;
    *(void **)&a->mem_host_alloc = dlsym(h, "cuMemHostAlloc");
    *(void **)&a->mem_free_host = dlsym(h, "cuMemFreeHost");
    *(void **)&a->memcpy_peer = dlsym(h, "cuMemcpyPeerAsync");
    *(void **)&a->stream_wait_event = dlsym(h, "cuStreamWaitEvent");
    a->peer_ok = a->events_ok && a->memcpy_peer && a->stream_wait_event;
}

#define SYM(field, name)                                                                           \
    { (void **)&a->field, name }

static void loader_driver(hd_cuda_api *a) {
    const char *names[] = {"libcuda.so.1", "libcuda.so", NULL};
    void *h = loader_open("HODU_CUDA_DRIVER", names, a->driver_error, sizeof a->driver_error,
                          " (no NVIDIA driver)");
    if (!h) return;
    const loader_sym syms[] = {
        SYM(init, "cuInit"),
        SYM(device_get_count, "cuDeviceGetCount"),
        SYM(device_get, "cuDeviceGet"),
        SYM(device_get_attribute, "cuDeviceGetAttribute"),
        SYM(device_get_name, "cuDeviceGetName"),
        SYM(primary_ctx_retain, "cuDevicePrimaryCtxRetain"),
        SYM(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2"),
        SYM(ctx_set_current, "cuCtxSetCurrent"),
        SYM(stream_create, "cuStreamCreate"),
        SYM(stream_destroy, "cuStreamDestroy_v2"),
        SYM(stream_synchronize, "cuStreamSynchronize"),
        SYM(mem_alloc, "cuMemAlloc_v2"),
        SYM(mem_free, "cuMemFree_v2"),
        SYM(memcpy_htod, "cuMemcpyHtoDAsync_v2"),
        SYM(memcpy_dtoh, "cuMemcpyDtoHAsync_v2"),
        SYM(memcpy_dtod, "cuMemcpyDtoDAsync_v2"),
        SYM(memset_d8, "cuMemsetD8Async"),
        SYM(module_load_data, "cuModuleLoadData"),
        SYM(module_unload, "cuModuleUnload"),
        SYM(module_get_function, "cuModuleGetFunction"),
        SYM(launch_kernel, "cuLaunchKernel"),
        SYM(get_error_string, "cuGetErrorString"),
        SYM(stream_begin_capture, "cuStreamBeginCapture_v2"),
        SYM(stream_end_capture, "cuStreamEndCapture"),
        SYM(graph_instantiate, "cuGraphInstantiateWithFlags"),
        SYM(graph_launch, "cuGraphLaunch"),
        SYM(graph_exec_destroy, "cuGraphExecDestroy"),
        SYM(graph_destroy, "cuGraphDestroy"),
    };
    const char *env = getenv("HODU_CUDA_DRIVER");
    if (!loader_resolve(h, syms, (int)(sizeof syms / sizeof syms[0]), a->driver_error,
                        sizeof a->driver_error, env && *env ? env : names[0]))
        return;
    loader_events(h, a);
    CUresult r = a->init(0);
    if (r != CUDA_SUCCESS) {
        const char *m = NULL;
        a->get_error_string(r, &m);
        snprintf(a->driver_error, sizeof a->driver_error, "cuInit failed: %s",
                 m ? m : "unknown error");
        return;
    }
    if (a->device_get_count(&a->ndevices) != CUDA_SUCCESS || a->ndevices <= 0) {
        snprintf(a->driver_error, sizeof a->driver_error, "no CUDA device");
        return;
    }
    a->driver_ok = 1;
}

static void loader_nvrtc(hd_cuda_api *a) {
    const char *names[] = {"libnvrtc.so.13",
                           "libnvrtc.so.12",
                           "libnvrtc.so.11.2",
                           "libnvrtc.so",
                           "/usr/local/cuda/lib64/libnvrtc.so",
                           NULL};
    void *h = loader_open("HODU_CUDA_NVRTC", names, a->nvrtc_error, sizeof a->nvrtc_error,
                          " (the CUDA toolkit's NVRTC library)");
    if (!h) return;
    const loader_sym syms[] = {
        SYM(nvrtc_create, "nvrtcCreateProgram"),
        SYM(nvrtc_compile, "nvrtcCompileProgram"),
        SYM(nvrtc_log_size, "nvrtcGetProgramLogSize"),
        SYM(nvrtc_log, "nvrtcGetProgramLog"),
        SYM(nvrtc_cubin_size, "nvrtcGetCUBINSize"),
        SYM(nvrtc_cubin, "nvrtcGetCUBIN"),
        SYM(nvrtc_destroy, "nvrtcDestroyProgram"),
        SYM(nvrtc_error_string, "nvrtcGetErrorString"),
        SYM(nvrtc_version, "nvrtcVersion"),
    };
    a->nvrtc_ok = loader_resolve(h, syms, (int)(sizeof syms / sizeof syms[0]), a->nvrtc_error,
                                 sizeof a->nvrtc_error, "libnvrtc");
}

static void loader_blas(hd_cuda_api *a) {
    const char *names[] = {"libcublas.so.13",
                           "libcublas.so.12",
                           "libcublas.so.11",
                           "libcublas.so",
                           "/usr/local/cuda/lib64/libcublas.so",
                           NULL};
    void *h =
        loader_open("HODU_CUDA_BLAS", names, a->blas_error, sizeof a->blas_error, " (cuBLAS)");
    if (!h) return;
    const loader_sym syms[] = {
        SYM(blas_create, "cublasCreate_v2"),
        SYM(blas_destroy, "cublasDestroy_v2"),
        SYM(blas_set_stream, "cublasSetStream_v2"),
        SYM(blas_gemm_strided, "cublasGemmStridedBatchedEx"),
    };
    a->blas_ok = loader_resolve(h, syms, (int)(sizeof syms / sizeof syms[0]), a->blas_error,
                                sizeof a->blas_error, "libcublas");
    *(void **)&a->blas_set_workspace = dlsym(h, "cublasSetWorkspace_v2");
    *(void **)&a->blas_gemm = dlsym(h, "cublasGemmEx");
}

#define SOL(t, field, name)                                                                        \
    { (void **)&a->sol[t].field, name }
#define SOL_BOTH(field, suffix)                                                                    \
    SOL(0, field, "cusolverDnS" suffix), SOL(1, field, "cusolverDnD" suffix)

static void loader_solver(hd_cuda_api *a) {
    const char *names[] = {"libcusolver.so.12", "libcusolver.so.11", "libcusolver.so",
                           "/usr/local/cuda/lib64/libcusolver.so", NULL};
    void *h =
        loader_open("HODU_CUDA_SOLVER", names, a->sol_error, sizeof a->sol_error, " (cuSOLVER)");
    if (!h) return;
    const loader_sym syms[] = {
        SYM(sol_create, "cusolverDnCreate"),
        SYM(sol_destroy, "cusolverDnDestroy"),
        SYM(sol_set_stream, "cusolverDnSetStream"),
        SOL_BOTH(getrf_bs, "getrf_bufferSize"),
        SOL_BOTH(getrf, "getrf"),
        SOL_BOTH(getrs, "getrs"),
        SOL_BOTH(potrf_bs, "potrf_bufferSize"),
        SOL_BOTH(potrf, "potrf"),
        SOL_BOTH(geqrf_bs, "geqrf_bufferSize"),
        SOL_BOTH(geqrf, "geqrf"),
        SOL_BOTH(orgqr_bs, "orgqr_bufferSize"),
        SOL_BOTH(orgqr, "orgqr"),
        SOL_BOTH(gesvd_bs, "gesvd_bufferSize"),
        SOL_BOTH(gesvd, "gesvd"),
        SOL_BOTH(syevd_bs, "syevd_bufferSize"),
        SOL_BOTH(syevd, "syevd"),
    };
    a->sol_ok = loader_resolve(h, syms, (int)(sizeof syms / sizeof syms[0]), a->sol_error,
                               sizeof a->sol_error, "libcusolver");
}

static void loader_nccl(hd_cuda_api *a) {
    const char *names[] = {"libnccl.so.2", "libnccl.so", "/usr/local/cuda/lib/libnccl.so.2",
                           "/usr/local/cuda/lib64/libnccl.so.2", NULL};
    void *h = loader_open("HODU_CUDA_NCCL", names, a->nccl_error, sizeof a->nccl_error, " (NCCL)");
    if (!h) return;
    const loader_sym syms[] = {
        SYM(nccl_get_unique_id, "ncclGetUniqueId"),    SYM(nccl_comm_init_rank, "ncclCommInitRank"),
        SYM(nccl_comm_destroy, "ncclCommDestroy"),     SYM(nccl_all_reduce, "ncclAllReduce"),
        SYM(nccl_broadcast, "ncclBroadcast"),          SYM(nccl_all_gather, "ncclAllGather"),
        SYM(nccl_reduce_scatter, "ncclReduceScatter"), SYM(nccl_error_string, "ncclGetErrorString"),
    };
    a->nccl_ok = loader_resolve(h, syms, (int)(sizeof syms / sizeof syms[0]), a->nccl_error,
                                sizeof a->nccl_error, "libnccl");
}

/* cuBLAS, cuSOLVER and NCCL are opened only with a driver: they need one
 * to load at all. NCCL is opened only in a process mpirun started (it is
 * large and used by nothing else). */
static void loader_all(void) {
    loader_driver(&cuda_api);
    loader_nvrtc(&cuda_api);
    if (cuda_api.driver_ok) {
        loader_blas(&cuda_api);
        loader_solver(&cuda_api);
        if (hd_dist_launched()) loader_nccl(&cuda_api);
    } else {
        snprintf(cuda_api.blas_error, sizeof cuda_api.blas_error, "no CUDA driver");
        snprintf(cuda_api.sol_error, sizeof cuda_api.sol_error, "no CUDA driver");
    }
}

const hd_cuda_api *hd_cuda_api_get(void) {
    pthread_once(&cuda_api_once, loader_all);
    return &cuda_api;
}

hd_status hd_cuda_check(hd_ctx *ctx, CUresult r, const char *what) {
    if (r == CUDA_SUCCESS) return HD_OK;
    const char *m = NULL;
    if (cuda_api.get_error_string) cuda_api.get_error_string(r, &m);
    hd_status st = r == CUDA_ERROR_OUT_OF_MEMORY ? HD_ERR_MEMORY : HD_ERR_RUNTIME;
    return hd_error(ctx, st, "cuda: %s: %s", what, m ? m : "unknown error");
}
#endif
