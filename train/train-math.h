/* SPDX-License-Identifier: Apache-2.0 */
/* train-math.h: the math ops table. The trainer (model, optimizer, data, checkpoints) is one code
 * path; only these kernels differ between the CPU and the CUDA backend. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum train_act { TRAIN_ACT_RELU, TRAIN_ACT_NONE, _TRAIN_ACT_MAX };
enum train_loss { TRAIN_LOSS_MSE, TRAIN_LOSS_RMSE, _TRAIN_LOSS_MAX };
enum train_precision { TRAIN_FP32, TRAIN_BF16, TRAIN_FP16, _TRAIN_PRECISION_MAX };

/* Adam's hyper-parameters (PyTorch's torch.optim.Adam, no weight decay, no amsgrad). Doubles,
 * as Python passes them: 1 - beta is formed in double before rounding to float, as PyTorch
 * does. */
struct train_adam {
    double lr, beta1, beta2, eps;
};

/* Called by sync() while it waits for queued work: return 0 to keep waiting, or a negative errno
 * to give up (a collective reported a dead peer). */
typedef int (*train_poll_fn)(void *ud);

/*
 * All pointers below point into "math memory": host memory for the CPU backend, device memory
 * for CUDA; move bytes in and out only with upload()/download(). Matrices are row-major float32.
 * The kernel ops are asynchronous with respect to the host (queued in order on one stream);
 * download() and sync() wait for everything queued before them.
 */
struct train_math {
    const char *name;               /* "cpu", "cuda" */
    enum train_precision precision; /* what gemm() computes in; fp32 master data everywhere */

    /* Zeroed allocation of n bytes. Returns 0 or -ENOMEM. */
    int (*alloc)(struct train_math *m, size_t n, void **ret);
    void (*free)(struct train_math *m, void *p);
    int (*upload)(struct train_math *m, void *dst, const void *src, size_t n);
    int (*download)(struct train_math *m, void *dst, const void *src, size_t n);
    int (*zero)(struct train_math *m, void *p, size_t n);

    /* C[M,N] = alpha * op(A) op(B) + beta * C, where op(A) is [M,K] (A stored [K,M] if ta) and
     * op(B) is [K,N] (B stored [N,K] if tb). Contiguous rows, no padding. */
    void (*gemm)(struct train_math *m, bool ta, bool tb, int M, int N, int K, float alpha,
                 const float *A, const float *B, float beta, float *C);
    /* Y[rows,cols] += b (broadcast over rows), then the activation in place. */
    void (*bias_act)(struct train_math *m, float *Y, const float *b, int rows, int cols,
                     enum train_act act);
    /* dY *= act'(Y) elementwise, given the activation's output Y. */
    void (*act_backward)(struct train_math *m, float *dY, const float *Y, size_t n,
                         enum train_act act);
    /* db[cols] = sum over rows of dY[rows,cols] (overwrites db). */
    void (*bias_grad)(struct train_math *m, float *db, const float *dY, int rows, int cols);
    /* *loss = L(Y, T) over all rows*cols elements (mean squared error, or its square root), and
     * dY = dL/dY. */
    void (*loss)(struct train_math *m, enum train_loss kind, const float *Y, const float *T,
                 int rows, int cols, float *dY, float *loss);
    /* One Adam step t (>= 1) on n parameters p with gradients g and moments mom, var. */
    void (*adam)(struct train_math *m, float *p, const float *g, float *mom, float *var, size_t n,
                 const struct train_adam *hp, uint64_t t);
    /* x *= s. */
    void (*scale)(struct train_math *m, float *x, float s, size_t n);
    /* Wait until all queued work is done, calling poll (if not NULL) every millisecond or so;
     * gives up after timeout_ms (0: never) with -ETIMEDOUT. Returns 0, or poll's error, or a
     * negative errno for a device error. */
    int (*sync)(struct train_math *m, train_poll_fn poll, void *ud, uint64_t timeout_ms);
    /* Free everything (accepts NULL via train_math_free()). */
    void (*destroy)(struct train_math *m);
    /* A one-line description of the last device error, for the message before exit. */
    char err[256];
};

/* The CPU backend (fp32 only). Returns 0, -ENOMEM, or -ENOTSUP for another precision. */
int train_math_cpu_new(enum train_precision precision, struct train_math **ret);

static inline struct train_math *train_math_free(struct train_math *m)
{
    if (m)
        m->destroy(m);
    return NULL;
}

const char *train_act_name(enum train_act a);
const char *train_loss_name(enum train_loss l);
const char *train_precision_name(enum train_precision p);
/* Parse the names above. Return 0 or -EINVAL. */
int train_act_parse(const char *s, enum train_act *ret);
int train_loss_parse(const char *s, enum train_loss *ret);
int train_precision_parse(const char *s, enum train_precision *ret);
