/* backends/cuda/cuda_abi.h against the CUDA toolkit's own headers: every
 * constant the backend passes to or compares from the libraries, and the
 * sizes of the types it passes by value. Built with the headers where the
 * build found them (HD_CUDA_HEADERS); elsewhere it reports SKIPPED (77). */
#include "hd_test.h"

#if HD_CUDA_HEADERS
#include <cublas_api.h>
#include <cuda.h>
#include <cusolverDn.h>
#include <nvrtc.h>
#if __has_include(<nccl.h>)
#include <nccl.h>
#define HD_HAVE_NCCL_H 1
#endif

#define HD_CUDA_ABI_VALUES_ONLY
#include "cuda_abi.h"

#define ABI_CHECK(name, value)                                                                     \
    _Static_assert((long long)(name) == (long long)(value), #name);                                \
    CHECK_MSG((long long)(name) == (long long)(value), "%s", #name);

int main(void) {
    HD_CUDA_ABI_VALUES(ABI_CHECK)
#if HD_HAVE_NCCL_H
    HD_CUDA_ABI_NCCL(ABI_CHECK)
    _Static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES, "ncclUniqueId");
    _Static_assert(sizeof(ncclResult_t) == sizeof(int) && sizeof(ncclDataType_t) == sizeof(int) &&
                       sizeof(ncclRedOp_t) == sizeof(int),
                   "enum");
#else
    printf("no nccl.h: NCCL's values not checked\n");
#endif
    _Static_assert(sizeof(CUdeviceptr) == sizeof(unsigned long long), "CUdeviceptr");
    _Static_assert(sizeof(CUresult) == sizeof(int) && sizeof(CUdevice) == sizeof(int), "ints");
    _Static_assert(sizeof(CUdevice_attribute) == sizeof(int), "enum");
    _Static_assert(sizeof(CUstreamCaptureMode) == sizeof(int), "enum");
    _Static_assert(sizeof(nvrtcResult) == sizeof(int) && sizeof(cublasStatus_t) == sizeof(int),
                   "enum");
    _Static_assert(
        sizeof(cudaDataType) == sizeof(int) && sizeof(cublasComputeType_t) == sizeof(int), "enum");
    _Static_assert(sizeof(cublasOperation_t) == sizeof(int) &&
                       sizeof(cublasGemmAlgo_t) == sizeof(int),
                   "enum");
    _Static_assert(sizeof(cusolverStatus_t) == sizeof(int) &&
                       sizeof(cublasFillMode_t) == sizeof(int) &&
                       sizeof(cusolverEigMode_t) == sizeof(int),
                   "enum");
    TEST_END();
}
#else
int main(void) {
    (void)hd_test_pass;
    (void)hd_test_fail;
    printf("SKIPPED: the CUDA toolkit headers were not found by this build\n");
    return 77;
}
#endif
