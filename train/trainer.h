/* SPDX-License-Identifier: Apache-2.0 */
/* trainer.h: one training run: data, model, Adam, collectives, checkpoints, progress lines.
 * The same code drives the CPU (gloo) and the GPU (NCCL) backend. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "train-math.h"
#include "train-model.h"

enum train_backend { TRAIN_BACKEND_AUTO, TRAIN_BACKEND_GLOO, TRAIN_BACKEND_NCCL };

struct trainer_opts {
    struct train_layout layout;
    enum train_act act;
    enum train_loss loss;
    enum train_precision precision;
    enum train_backend backend;
    struct train_adam adam;
    const char *data;        /* "synthetic" or "mnist:DIR" */
    uint64_t samples;        /* 0: the default (synthetic 512, MNIST all) */
    uint64_t batch;          /* global batch, split across ranks */
    uint64_t steps;          /* stop after this many global steps (0: no step limit) */
    uint64_t epochs;         /* stop at the end of this epoch (0: no epoch limit) */
    uint64_t seed;
    uint64_t log_every;
    const char *ckpt_dir;    /* NULL: no checkpoints */
    uint64_t ckpt_every;     /* 0: only at the end */
    unsigned ckpt_keep;
    const char *plot;        /* PNG of the loss curve, or NULL */
    uint64_t fail_at_step;   /* 0: no drill */
    unsigned fail_rank;
    uint64_t timeout_ms;     /* rendezvous and collectives */
    uint64_t bucket_bytes;   /* gradient all-reduce bucket */
    /* From the environment (torchrun's contract). */
    unsigned rank, world, local_rank;
    const char *master_addr; /* NULL if unset */
    uint16_t master_port;
    const char *local_addr;  /* RDZV_LOCAL_ADDR */
    const char *nccl_id;     /* RDZV_NCCL_UNIQUE_ID */
    bool first_attempt;      /* TORCHELASTIC_RESTART_COUNT unset or 0 */
    int progress_fd;         /* RDZV_PROGRESS_FD: "step N\n" per step, or -1 */
    uint64_t progress_wait_ms; /* RDZV_PROGRESS_WAIT_MS: "wait\n" this often while blocked on
                                * the peers (train-alive.h), or 0: never */
    int control_fd;          /* RDZV_CONTROL_FD: recovery in place (train/INPLACE.md), or -1 */
    uint64_t generation;     /* RDZV_GENERATION (0 if unset) */
};

/* Run the job. Progress goes to out (rank 0 only), one JSON object per line; errors go to
 * stderr as one line each. Returns 0 or a negative errno (already reported). */
int trainer_run(const struct trainer_opts *o, FILE *out);
