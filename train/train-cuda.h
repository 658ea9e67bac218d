/* SPDX-License-Identifier: Apache-2.0 */
/* train-cuda.h: the GPU backend (math-cuda.cu, comm-nccl.cu), compiled in only when meson found
 * nvcc (RDZV_TRAIN_HAVE_CUDA). Nothing outside train/ includes this. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "train-comm.h"
#include "train-math.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices (>= 0), or -ENODEV with cudaGetErrorString() in err. */
int train_cuda_device_count(char *err, size_t errlen);

/* The CUDA math backend on device (cuBLAS GEMMs, fused kernels), computing GEMMs in precision
 * (bf16/fp16 inputs with fp32 accumulation and fp32 master data) . Returns 0 or a negative
 * errno with err filled. */
int train_math_cuda_new(int device, enum train_precision precision, struct train_math **ret,
                        char *err, size_t errlen);

/* The cudaStream_t the math backend queues its work on. */
void *train_math_cuda_stream(struct train_math *m);

struct train_nccl_opts {
    unsigned rank, world;
    const char *unique_id_hex; /* 256 lower-case hex digits (RDZV_NCCL_UNIQUE_ID) */
    uint64_t timeout_ms;       /* for the non-blocking init and every wait on a collective */
};

/* NCCL data parallelism on m's device: ncclCommInitRankConfig (non-blocking) with a timeout,
 * collectives on a separate stream ordered against m's stream with events, async errors
 * polled so that a dead peer aborts the communicator. Returns 0 or a negative errno with err
 * filled. */
int train_comm_nccl_new(const struct train_nccl_opts *o, struct train_math *m,
                        struct train_comm **ret, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
