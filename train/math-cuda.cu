/* SPDX-License-Identifier: Apache-2.0 */
/* math-cuda.cu: the CUDA math backend: cuBLAS GEMMs (row-major callers, column-major cuBLAS:
 * C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T) and small fused kernels that mirror
 * math-cpu.c operation for operation. bf16/fp16 precision casts the GEMM inputs and keeps fp32
 * outputs, accumulation and master data. Everything is queued on one stream. */
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "train-cuda.h"

namespace {

constexpr int kThreads = 256;

struct cuda_math {
    struct train_math m; /* first: callers hold a pointer to it */
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cudaEvent_t done;
    void *half_a, *half_b; /* GEMM input casts (bf16/fp16 precision) */
    size_t half_cap;       /* elements in each */
    double *loss_sum;      /* device scratch for the loss reduction */
    int failed;            /* sticky: the first CUDA error */
};

cuda_math *to_cuda(struct train_math *m)
{
    return reinterpret_cast<cuda_math *>(m);
}

unsigned blocks_for(size_t n)
{
    size_t b = (n + kThreads - 1) / kThreads;

    return static_cast<unsigned>(b < 65535 ? (b ? b : 1) : 65535);
}

/* Remember the first error (kernel launches are checked with cudaGetLastError()). */
int check(cuda_math *cm, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    if (!cm->failed) {
        snprintf(cm->m.err, sizeof(cm->m.err), "%s: %s", what, cudaGetErrorString(e));
        cm->failed = -EIO;
    }
    return cm->failed;
}

int check_blas(cuda_math *cm, cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    if (!cm->failed) {
        snprintf(cm->m.err, sizeof(cm->m.err), "%s: cuBLAS status %d", what, (int)s);
        cm->failed = -EIO;
    }
    return cm->failed;
}

template <typename T> __device__ T from_float(float x);
template <> __device__ __nv_bfloat16 from_float<__nv_bfloat16>(float x)
{
    return __float2bfloat16(x);
}
template <> __device__ __half from_float<__half>(float x)
{
    return __float2half(x);
}

template <typename T> __global__ void cast_kernel(const float *in, T *out, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = from_float<T>(in[i]);
}

__global__ void bias_act_kernel(float *Y, const float *b, int rows, int cols, int relu)
{
    size_t n = (size_t)rows * cols;

    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float y = Y[i] + b[i % cols];

        Y[i] = relu ? (y > 0.0f ? y : 0.0f) : y;
    }
}

__global__ void relu_backward_kernel(float *dY, const float *Y, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        if (!(Y[i] > 0.0f))
            dY[i] = 0.0f;
}

/* One thread per column, rows summed in order: the CPU's order, so results agree bit for bit
 * for the small batches this trainer uses. */
__global__ void bias_grad_kernel(float *db, const float *dY, int rows, int cols)
{
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += gridDim.x * blockDim.x) {
        float s = 0.0f;

        for (int i = 0; i < rows; i++)
            s += dY[(size_t)i * cols + j];
        db[j] = s;
    }
}

__global__ void sq_diff_sum_kernel(const float *Y, const float *T, size_t n, double *sum)
{
    __shared__ double part[kThreads];
    double s = 0.0;

    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        double d = (double)Y[i] - (double)T[i];

        s += d * d;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w)
            part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(sum, part[0]);
}

__global__ void loss_grad_kernel(const float *Y, const float *T, size_t n, const double *sum,
                                 int rmse, float *dY, float *loss)
{
    double mse = *sum / (double)n, coef;

    if (rmse) {
        double r = sqrt(mse);

        coef = r > 0.0 ? 1.0 / ((double)n * r) : 0.0;
        if (blockIdx.x == 0 && threadIdx.x == 0)
            *loss = (float)r;
    } else {
        coef = 2.0 / (double)n;
        if (blockIdx.x == 0 && threadIdx.x == 0)
            *loss = (float)mse;
    }
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dY[i] = (float)(coef * ((double)Y[i] - (double)T[i]));
}

__global__ void adam_kernel(float *p, const float *g, float *mom, float *var, size_t n, float b1,
                            float b2, float omb1, float omb2, float step, float bc2_sqrt,
                            float eps)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float m = b1 * mom[i] + omb1 * g[i];
        float v = b2 * var[i] + omb2 * g[i] * g[i];

        mom[i] = m;
        var[i] = v;
        p[i] -= step * m / (sqrtf(v) / bc2_sqrt + eps);
    }
}

__global__ void scale_kernel(float *x, float s, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

int cu_alloc(struct train_math *m, size_t n, void **ret)
{
    cuda_math *cm = to_cuda(m);
    void *p = nullptr;

    if (cudaMalloc(&p, n ? n : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(m->err, sizeof(m->err), "cudaMalloc(%zu bytes) failed", n);
        return -ENOMEM;
    }
    if (check(cm, cudaMemsetAsync(p, 0, n, cm->stream), "cudaMemsetAsync") < 0) {
        cudaFree(p);
        return cm->failed;
    }
    *ret = p;
    return 0;
}

void cu_free(struct train_math *m, void *p)
{
    if (p)
        cudaFree(p);
}

int cu_upload(struct train_math *m, void *dst, const void *src, size_t n)
{
    cuda_math *cm = to_cuda(m);

    /* Pageable source: the copy is staged before this returns, so src may be reused. */
    return check(cm, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, cm->stream),
                 "upload");
}

int cu_download(struct train_math *m, void *dst, const void *src, size_t n)
{
    cuda_math *cm = to_cuda(m);
    int r = check(cm, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, cm->stream),
                  "download");

    return r < 0 ? r : check(cm, cudaStreamSynchronize(cm->stream), "download");
}

int cu_zero(struct train_math *m, void *p, size_t n)
{
    cuda_math *cm = to_cuda(m);

    return check(cm, cudaMemsetAsync(p, 0, n, cm->stream), "memset");
}

/* Grow the half-precision GEMM input scratch to n elements each. */
int half_reserve(cuda_math *cm, size_t n)
{
    if (n <= cm->half_cap)
        return 0;
    cudaFree(cm->half_a);
    cudaFree(cm->half_b);
    cm->half_a = cm->half_b = nullptr;
    cm->half_cap = 0;
    if (check(cm, cudaMalloc(&cm->half_a, n * 2), "cudaMalloc") < 0 ||
        check(cm, cudaMalloc(&cm->half_b, n * 2), "cudaMalloc") < 0)
        return cm->failed;
    cm->half_cap = n;
    return 0;
}

template <typename T> void cast_to(cuda_math *cm, const float *in, void *out, size_t n)
{
    cast_kernel<T><<<blocks_for(n), kThreads, 0, cm->stream>>>(in, static_cast<T *>(out), n);
}

void cu_gemm(struct train_math *m, bool ta, bool tb, int M, int N, int K, float alpha,
             const float *A, const float *B, float beta, float *C)
{
    cuda_math *cm = to_cuda(m);
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    int lda = ta ? M : K, ldb = tb ? K : N;
    size_t na = (size_t)M * K, nb = (size_t)K * N;

    if (cm->failed)
        return;
    if (m->precision == TRAIN_FP32) {
        /* Row-major C[M,N] is column-major C^T[N,M] = op(B)^T op(A)^T. */
        check_blas(cm, cublasSgemm(cm->blas, opb, opa, N, M, K, &alpha, B, ldb, A, lda, &beta,
                                   C, N),
                   "cublasSgemm");
        return;
    }
    if (half_reserve(cm, na > nb ? na : nb) < 0)
        return;
    cudaDataType_t dt = m->precision == TRAIN_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    if (m->precision == TRAIN_BF16) {
        cast_to<__nv_bfloat16>(cm, A, cm->half_a, na);
        cast_to<__nv_bfloat16>(cm, B, cm->half_b, nb);
    } else {
        cast_to<__half>(cm, A, cm->half_a, na);
        cast_to<__half>(cm, B, cm->half_b, nb);
    }
    if (check(cm, cudaGetLastError(), "cast kernel") < 0)
        return;
    check_blas(cm, cublasGemmEx(cm->blas, opb, opa, N, M, K, &alpha, cm->half_b, dt, ldb,
                                cm->half_a, dt, lda, &beta, C, CUDA_R_32F, N,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

void cu_bias_act(struct train_math *m, float *Y, const float *b, int rows, int cols,
                 enum train_act act)
{
    cuda_math *cm = to_cuda(m);

    bias_act_kernel<<<blocks_for((size_t)rows * cols), kThreads, 0, cm->stream>>>(
        Y, b, rows, cols, act == TRAIN_ACT_RELU);
    check(cm, cudaGetLastError(), "bias_act kernel");
}

void cu_act_backward(struct train_math *m, float *dY, const float *Y, size_t n,
                     enum train_act act)
{
    cuda_math *cm = to_cuda(m);

    if (act != TRAIN_ACT_RELU)
        return;
    relu_backward_kernel<<<blocks_for(n), kThreads, 0, cm->stream>>>(dY, Y, n);
    check(cm, cudaGetLastError(), "relu_backward kernel");
}

void cu_bias_grad(struct train_math *m, float *db, const float *dY, int rows, int cols)
{
    cuda_math *cm = to_cuda(m);

    bias_grad_kernel<<<blocks_for((size_t)cols), kThreads, 0, cm->stream>>>(db, dY, rows, cols);
    check(cm, cudaGetLastError(), "bias_grad kernel");
}

void cu_loss(struct train_math *m, enum train_loss kind, const float *Y, const float *T,
             int rows, int cols, float *dY, float *loss)
{
    cuda_math *cm = to_cuda(m);
    size_t n = (size_t)rows * cols;

    if (check(cm, cudaMemsetAsync(cm->loss_sum, 0, sizeof(double), cm->stream), "memset") < 0)
        return;
    sq_diff_sum_kernel<<<blocks_for(n), kThreads, 0, cm->stream>>>(Y, T, n, cm->loss_sum);
    loss_grad_kernel<<<blocks_for(n), kThreads, 0, cm->stream>>>(
        Y, T, n, cm->loss_sum, kind == TRAIN_LOSS_RMSE, dY, loss);
    check(cm, cudaGetLastError(), "loss kernel");
}

void cu_adam(struct train_math *m, float *p, const float *g, float *mom, float *var, size_t n,
             const struct train_adam *hp, uint64_t t)
{
    cuda_math *cm = to_cuda(m);
    /* The same host-side scalars as math-cpu.c. */
    float step = (float)(hp->lr / (1.0 - pow(hp->beta1, (double)t)));
    float bc2_sqrt = (float)sqrt(1.0 - pow(hp->beta2, (double)t));

    adam_kernel<<<blocks_for(n), kThreads, 0, cm->stream>>>(
        p, g, mom, var, n, (float)hp->beta1, (float)hp->beta2, (float)(1.0 - hp->beta1),
        (float)(1.0 - hp->beta2), step, bc2_sqrt, (float)hp->eps);
    check(cm, cudaGetLastError(), "adam kernel");
}

void cu_scale(struct train_math *m, float *x, float s, size_t n)
{
    cuda_math *cm = to_cuda(m);

    scale_kernel<<<blocks_for(n), kThreads, 0, cm->stream>>>(x, s, n);
    check(cm, cudaGetLastError(), "scale kernel");
}

uint64_t now_ms()
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Poll the stream's progress instead of blocking in cudaStreamSynchronize(): a collective whose
 * peer died never completes, and only the host can notice and abort it. */
int cu_sync(struct train_math *m, train_poll_fn poll, void *ud, uint64_t timeout_ms)
{
    cuda_math *cm = to_cuda(m);
    uint64_t start = now_ms();
    struct timespec nap = {0, 200 * 1000};
    int r;

    if (cm->failed)
        return cm->failed;
    r = check(cm, cudaEventRecord(cm->done, cm->stream), "cudaEventRecord");
    while (r == 0) {
        cudaError_t e = cudaEventQuery(cm->done);

        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return check(cm, e, "stream");
        if (poll && (r = poll(ud)) < 0)
            return r;
        if (timeout_ms && now_ms() - start > timeout_ms) {
            snprintf(m->err, sizeof(m->err), "GPU work did not finish within %llu ms",
                     (unsigned long long)timeout_ms);
            return -ETIMEDOUT;
        }
        nanosleep(&nap, nullptr);
    }
    return r;
}

void cu_destroy(struct train_math *m)
{
    cuda_math *cm = to_cuda(m);

    if (cm->stream)
        cudaStreamSynchronize(cm->stream);
    cudaFree(cm->half_a);
    cudaFree(cm->half_b);
    cudaFree(cm->loss_sum);
    if (cm->done)
        cudaEventDestroy(cm->done);
    if (cm->blas)
        cublasDestroy(cm->blas);
    if (cm->stream)
        cudaStreamDestroy(cm->stream);
    free(cm);
}

} // namespace

extern "C" int train_cuda_device_count(char *err, size_t errlen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);

    if (e != cudaSuccess) {
        snprintf(err, errlen, "%s", cudaGetErrorString(e));
        return -ENODEV;
    }
    return n;
}

extern "C" void *train_math_cuda_stream(struct train_math *m)
{
    return to_cuda(m)->stream;
}

extern "C" int train_math_cuda_new(int device, enum train_precision precision,
                                   struct train_math **ret, char *err, size_t errlen)
{
    cuda_math *cm = static_cast<cuda_math *>(calloc(1, sizeof(cuda_math)));
    cudaError_t e;

    if (!cm)
        return -ENOMEM;
    cm->m.name = "cuda";
    cm->m.precision = precision;
    cm->m.alloc = cu_alloc;
    cm->m.free = cu_free;
    cm->m.upload = cu_upload;
    cm->m.download = cu_download;
    cm->m.zero = cu_zero;
    cm->m.gemm = cu_gemm;
    cm->m.bias_act = cu_bias_act;
    cm->m.act_backward = cu_act_backward;
    cm->m.bias_grad = cu_bias_grad;
    cm->m.loss = cu_loss;
    cm->m.adam = cu_adam;
    cm->m.scale = cu_scale;
    cm->m.sync = cu_sync;
    cm->m.destroy = cu_destroy;
    cm->device = device;

    e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&cm->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&cm->done, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaMalloc(reinterpret_cast<void **>(&cm->loss_sum), sizeof(double));
    if (e != cudaSuccess) {
        snprintf(err, errlen, "device %d: %s", device, cudaGetErrorString(e));
        cu_destroy(&cm->m);
        return -ENODEV;
    }
    if (cublasCreate(&cm->blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(cm->blas, cm->stream) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "device %d: cuBLAS initialisation failed", device);
        cu_destroy(&cm->m);
        return -ENODEV;
    }
    /* fp32 GEMMs stay fp32 (no TF32): the CPU backend is the reference. */
    (void)cublasSetMathMode(cm->blas, CUBLAS_DEFAULT_MATH);
    *ret = &cm->m;
    return 0;
}
