/* The part of the CUDA driver, NVRTC and cuBLAS interfaces the backend
 * calls, declared here so that the backend builds without the toolkit: the
 * libraries are opened with dlopen (cuda_loader.c), so only these types
 * and values are needed, and they are part of NVIDIA's stable ABI (the
 * handles are opaque pointers, the enums int-sized). Where the toolkit's
 * headers are found at build time, test_cuda_abi checks every value and
 * size here against them. */
#ifndef HD_CUDA_ABI_H
#define HD_CUDA_ABI_H

/* (name, value) of each constant the backend uses: cuda.h, nvrtc.h,
 * library_types.h, cublas_api.h, cusolver_common.h; NCCL's in
 * HD_CUDA_ABI_NCCL (nccl.h, which some toolkits lack). */
#define HD_CUDA_ABI_VALUES(X)                                                                      \
    X(CUDA_SUCCESS, 0)                                                                             \
    X(CUDA_ERROR_OUT_OF_MEMORY, 2)                                                                 \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 75)                                            \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 76)                                            \
    X(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 16)                                                \
    X(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 39)                                      \
    X(CU_STREAM_NON_BLOCKING, 1)                                                                   \
    X(CU_STREAM_CAPTURE_MODE_RELAXED, 2)                                                           \
    X(CU_EVENT_DEFAULT, 0)                                                                         \
    X(CU_EVENT_DISABLE_TIMING, 2)                                                                  \
    X(NVRTC_SUCCESS, 0)                                                                            \
    X(CUBLAS_STATUS_SUCCESS, 0)                                                                    \
    X(CUBLAS_OP_N, 0)                                                                              \
    X(CUDA_R_32F, 0)                                                                               \
    X(CUDA_R_64F, 1)                                                                               \
    X(CUDA_R_16F, 2)                                                                               \
    X(CUDA_R_16BF, 14)                                                                             \
    X(CUBLAS_COMPUTE_32F, 68)                                                                      \
    X(CUBLAS_COMPUTE_64F, 70)                                                                      \
    X(CUBLAS_GEMM_DEFAULT, -1)                                                                     \
    X(CUBLAS_OP_T, 1)                                                                              \
    X(CUBLAS_FILL_MODE_UPPER, 1)                                                                   \
    X(CUSOLVER_STATUS_SUCCESS, 0)                                                                  \
    X(CUSOLVER_EIG_MODE_VECTOR, 1)

#define HD_CUDA_ABI_NCCL(X)                                                                        \
    X(ncclSuccess, 0)                                                                              \
    X(ncclInProgress, 7)                                                                           \
    X(ncclInt8, 0)                                                                                 \
    X(ncclUint8, 1)                                                                                \
    X(ncclInt32, 2)                                                                                \
    X(ncclInt64, 4)                                                                                \
    X(ncclFloat32, 7)                                                                              \
    X(ncclFloat64, 8)                                                                              \
    X(ncclSum, 0)                                                                                  \
    X(ncclProd, 1)                                                                                 \
    X(ncclMax, 2)                                                                                  \
    X(ncclMin, 3)                                                                                  \
    X(NCCL_UNIQUE_ID_BYTES, 128)

#ifndef HD_CUDA_ABI_VALUES_ONLY
#define HD_CUDA_ABI_ENUM(name, value) name = (value),
enum { HD_CUDA_ABI_VALUES(HD_CUDA_ABI_ENUM) HD_CUDA_ABI_NCCL(HD_CUDA_ABI_ENUM) };
#undef HD_CUDA_ABI_ENUM

typedef int CUresult;
typedef int CUdevice;
typedef int CUdevice_attribute;
typedef int CUstreamCaptureMode;
typedef unsigned long long CUdeviceptr; /* 64-bit hosts */
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUevent_st *CUevent;

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

typedef struct cublasContext *cublasHandle_t;
typedef int cublasStatus_t;
typedef int cublasOperation_t;
typedef int cudaDataType;
typedef int cublasComputeType_t;
typedef int cublasGemmAlgo_t;
typedef int cublasFillMode_t;
typedef struct cusolverDnContext *cusolverDnHandle_t;
typedef int cusolverStatus_t;
typedef int cusolverEigMode_t;

typedef int ncclResult_t;
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef struct ncclComm *ncclComm_t;
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;
#endif

#endif
