// Reference numbers for bench_cuda.sh: device-to-device copy bandwidth over
// 256M f32 and cuBLAS GEMM (f32 without TF32, bf16 with f32 accumulation)
// at 4096 and 8192, timed with events after a warm-up. The GEMM operands are
// random normals, as in bench.hodu and peers_cuda.py: on zeros the GPU draws
// less power, holds higher clocks and reports more TFLOP/s than real data gets.
#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

// Normal-ish values (sum of 4 uniforms, centred) from a hash of the index.
__global__ void fill(void *p, size_t n, int bf) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u + 12345u;
        float v = 0;
        for (int k = 0; k < 4; k++) {
            h ^= h >> 15;
            h *= 2246822519u;
            h ^= h >> 13;
            v += (h & 0xffffff) / 16777216.0f;
        }
        v = (v - 2.0f) * 1.7f;
        if (bf)
            ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
        else
            ((float *)p)[i] = v;
    }
}

// Stop at the first failed call: without a GPU every timing would read 0
// and print infinities.
#define CHECK(call)                                                                            \
    do {                                                                                       \
        cudaError_t err_ = (call);                                                             \
        if (err_ != cudaSuccess) {                                                             \
            fprintf(stderr, "ref: %s: %s\n", #call, cudaGetErrorString(err_));                  \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static float time_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

int main() {
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    size_t n = (size_t)256 << 20;
    float *a, *b;
    CHECK(cudaMalloc(&a, n * 4));
    CHECK(cudaMalloc(&b, n * 4));
    CHECK(cudaMemset(a, 0, n * 4));
    cudaMemcpy(b, a, n * 4, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e0);
    for (int i = 0; i < 10; i++) cudaMemcpy(b, a, n * 4, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    CHECK(cudaEventSynchronize(e1));
    double s = time_ms(e0, e1) / 10 / 1e3;
    printf("d2d copy 256M f32: %.1f GB/s (read + write)\n", 2.0 * n * 4 / s / 1e9);
    cudaFree(a);
    cudaFree(b);
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "ref: cublasCreate failed\n");
        return 1;
    }
    for (int bf = 0; bf < 2; bf++)
        for (int m : {4096, 8192}) {
            size_t es = bf ? 2 : 4;
            void *x, *y, *z;
            CHECK(cudaMalloc(&x, (size_t)m * m * es));
            CHECK(cudaMalloc(&y, (size_t)m * m * es));
            CHECK(cudaMalloc(&z, (size_t)m * m * es));
            fill<<<4096, 256>>>(x, (size_t)m * m, bf);
            fill<<<4096, 256>>>(y, (size_t)m * m, bf);
            float one = 1, zero = 0;
            cudaDataType t = bf ? CUDA_R_16BF : CUDA_R_32F;
            auto run = [&] {
                return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &one, y, t, m, x, t, m, &zero,
                             z, t, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            };
            if (run() != CUBLAS_STATUS_SUCCESS) {
                fprintf(stderr, "ref: cublasGemmEx failed\n");
                return 1;
            }
            cudaEventRecord(e0);
            for (int i = 0; i < 10; i++) run();
            cudaEventRecord(e1);
            CHECK(cudaEventSynchronize(e1));
            double sec = time_ms(e0, e1) / 10 / 1e3;
            printf("cuBLAS %s %d: %.1f TFLOP/s\n", bf ? "bf16" : "f32", m,
                   2.0 * m * m * (double)m / sec / 1e12);
            cudaFree(x);
            cudaFree(y);
            cudaFree(z);
        }
    cublasDestroy(h);
    return 0;
}
