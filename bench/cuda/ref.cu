// Reference numbers for bench_cuda.sh: device-to-device copy bandwidth over
// 256M f32 and cuBLAS GEMM (f32 without TF32, bf16 with f32 accumulation)
// at 4096 and 8192, timed with events after a warm-up.
#include <cstdio>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

static float time_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return ms;
}

int main() {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    size_t n = (size_t)256 << 20;
    float *a, *b;
    cudaMalloc(&a, n * 4);
    cudaMalloc(&b, n * 4);
    cudaMemset(a, 0, n * 4);
    cudaMemcpy(b, a, n * 4, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e0);
    for (int i = 0; i < 10; i++) cudaMemcpy(b, a, n * 4, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    double s = time_ms(e0, e1) / 10 / 1e3;
    printf("d2d copy 256M f32: %.1f GB/s (read + write)\n", 2.0 * n * 4 / s / 1e9);
    cudaFree(a);
    cudaFree(b);
    cublasHandle_t h;
    cublasCreate(&h);
    for (int bf = 0; bf < 2; bf++)
        for (int m : {4096, 8192}) {
            size_t es = bf ? 2 : 4;
            void *x, *y, *z;
            cudaMalloc(&x, (size_t)m * m * es);
            cudaMalloc(&y, (size_t)m * m * es);
            cudaMalloc(&z, (size_t)m * m * es);
            cudaMemset(x, 0, (size_t)m * m * es);
            cudaMemset(y, 0, (size_t)m * m * es);
            float one = 1, zero = 0;
            cudaDataType t = bf ? CUDA_R_16BF : CUDA_R_32F;
            auto run = [&] {
                cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &one, y, t, m, x, t, m, &zero,
                             z, t, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            };
            run();
            cudaEventRecord(e0);
            for (int i = 0; i < 10; i++) run();
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
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
