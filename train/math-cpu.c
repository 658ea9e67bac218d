/* SPDX-License-Identifier: Apache-2.0 */
/* math-cpu.c: the CPU math backend: plain loops in fp32 (sums of losses in double). Built with
 * optimisation even in debug builds (train/meson.build): a debug trainer still has to train. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train-math.h"

struct cpu_math {
    struct train_math m; /* first: the ops table callers hold */
    float *pack;         /* scratch for transposed gemm operands */
    size_t pack_cap;     /* floats */
};

static int cpu_alloc(struct train_math *m, size_t n, void **ret)
{
    void *p = calloc(1, n ? n : 1);

    if (!p)
        return -ENOMEM;
    *ret = p;
    return 0;
}

static void cpu_free(struct train_math *m, void *p)
{
    free(p);
}

static int cpu_copy(struct train_math *m, void *dst, const void *src, size_t n)
{
    if (n)
        memmove(dst, src, n);
    return 0;
}

static int cpu_zero(struct train_math *m, void *p, size_t n)
{
    if (n)
        memset(p, 0, n);
    return 0;
}

/* Scratch of at least n floats; the old contents are not kept. NULL when out of memory. */
static float *cpu_scratch(struct cpu_math *cm, size_t n)
{
    if (n > cm->pack_cap) {
        float *p = malloc(n * sizeof(float));

        if (!p)
            return NULL;
        free(cm->pack);
        cm->pack = p;
        cm->pack_cap = n;
    }
    return cm->pack;
}

/* dst[c,r] = src[r,c] for a rows x cols src. */
static void transpose(float *restrict dst, const float *restrict src, int rows, int cols)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
}

/*
 * Row-major C = alpha op(A) op(B) + beta C as C[i,:] += (alpha A[i,k]) B[k,:]: the inner loop is
 * a contiguous axpy the compiler vectorises. Transposed operands are packed first; packing
 * costs O(MK + KN) against the product's O(MKN).
 */
static void cpu_gemm(struct train_math *m, bool ta, bool tb, int M, int N, int K, float alpha,
                     const float *A, const float *B, float beta, float *C)
{
    struct cpu_math *cm = (struct cpu_math *)m;
    size_t need = (ta ? (size_t)M * K : 0) + (tb ? (size_t)K * N : 0);
    const float *a = A, *b = B;

    if (need) {
        float *s = cpu_scratch(cm, need);

        if (!s) {
            /* Out of memory for a few MB of scratch: nothing sensible is left to do. */
            abort();
        }
        if (ta) {
            transpose(s, A, K, M);
            a = s;
            s += (size_t)M * K;
        }
        if (tb) {
            transpose(s, B, N, K);
            b = s;
        }
    }
    for (int i = 0; i < M; i++) {
        float *restrict c = C + (size_t)i * N;

        if (beta == 0.0f)
            memset(c, 0, (size_t)N * sizeof(float));
        else if (beta != 1.0f)
            for (int j = 0; j < N; j++)
                c[j] *= beta;
        for (int k = 0; k < K; k++) {
            const float aik = alpha * a[(size_t)i * K + k];
            const float *restrict bk = b + (size_t)k * N;

            if (aik == 0.0f)
                continue;
            for (int j = 0; j < N; j++)
                c[j] += aik * bk[j];
        }
    }
}

static void cpu_bias_act(struct train_math *m, float *Y, const float *b, int rows, int cols,
                         enum train_act act)
{
    for (int i = 0; i < rows; i++) {
        float *restrict y = Y + (size_t)i * cols;

        for (int j = 0; j < cols; j++)
            y[j] += b[j];
        if (act == TRAIN_ACT_RELU)
            for (int j = 0; j < cols; j++)
                y[j] = y[j] > 0.0f ? y[j] : 0.0f;
    }
}

static void cpu_act_backward(struct train_math *m, float *dY, const float *Y, size_t n,
                             enum train_act act)
{
    if (act != TRAIN_ACT_RELU)
        return;
    for (size_t i = 0; i < n; i++)
        if (!(Y[i] > 0.0f))
            dY[i] = 0.0f;
}

static void cpu_bias_grad(struct train_math *m, float *db, const float *dY, int rows, int cols)
{
    memset(db, 0, (size_t)cols * sizeof(float));
    for (int i = 0; i < rows; i++) {
        const float *restrict d = dY + (size_t)i * cols;

        for (int j = 0; j < cols; j++)
            db[j] += d[j];
    }
}

static void cpu_loss(struct train_math *m, enum train_loss kind, const float *Y, const float *T,
                     int rows, int cols, float *dY, float *loss)
{
    size_t n = (size_t)rows * cols;
    double sum = 0.0, mse, coef;

    for (size_t i = 0; i < n; i++) {
        double d = (double)Y[i] - (double)T[i];

        sum += d * d;
    }
    mse = sum / (double)n;
    if (kind == TRAIN_LOSS_RMSE) {
        double rmse = sqrt(mse);

        *loss = (float)rmse;
        /* d sqrt(mse) = d mse / (2 sqrt(mse)); at an exact fit the subgradient 0 is used. */
        coef = rmse > 0.0 ? 1.0 / ((double)n * rmse) : 0.0;
    } else {
        *loss = (float)mse;
        coef = 2.0 / (double)n;
    }
    for (size_t i = 0; i < n; i++)
        dY[i] = (float)(coef * ((double)Y[i] - (double)T[i]));
}

static void cpu_adam(struct train_math *m, float *p, const float *g, float *mom, float *var,
                     size_t n, const struct train_adam *hp, uint64_t t)
{
    const float b1 = (float)hp->beta1, b2 = (float)hp->beta2, eps = (float)hp->eps;
    const float omb1 = (float)(1.0 - hp->beta1), omb2 = (float)(1.0 - hp->beta2);
    /* The scalars in double, as torch.optim.Adam computes them in Python. */
    const float step = (float)(hp->lr / (1.0 - pow(hp->beta1, (double)t)));
    const float bc2_sqrt = (float)sqrt(1.0 - pow(hp->beta2, (double)t));

    for (size_t i = 0; i < n; i++) {
        mom[i] = b1 * mom[i] + omb1 * g[i];
        var[i] = b2 * var[i] + omb2 * g[i] * g[i];
        p[i] -= step * mom[i] / (sqrtf(var[i]) / bc2_sqrt + eps);
    }
}

static void cpu_scale(struct train_math *m, float *x, float s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

static int cpu_sync(struct train_math *m, train_poll_fn poll, void *ud, uint64_t timeout_ms)
{
    return poll ? poll(ud) : 0;
}

static void cpu_destroy(struct train_math *m)
{
    struct cpu_math *cm = (struct cpu_math *)m;

    free(cm->pack);
    free(cm);
}

int train_math_cpu_new(enum train_precision precision, struct train_math **ret)
{
    struct cpu_math *cm;

    if (precision != TRAIN_FP32)
        return -ENOTSUP;
    cm = calloc(1, sizeof(*cm));
    if (!cm)
        return -ENOMEM;
    cm->m = (struct train_math){
        .name = "cpu",
        .precision = TRAIN_FP32,
        .alloc = cpu_alloc,
        .free = cpu_free,
        .upload = cpu_copy,
        .download = cpu_copy,
        .zero = cpu_zero,
        .gemm = cpu_gemm,
        .bias_act = cpu_bias_act,
        .act_backward = cpu_act_backward,
        .bias_grad = cpu_bias_grad,
        .loss = cpu_loss,
        .adam = cpu_adam,
        .scale = cpu_scale,
        .sync = cpu_sync,
        .destroy = cpu_destroy,
    };
    *ret = &cm->m;
    return 0;
}
