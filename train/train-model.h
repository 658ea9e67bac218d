/* SPDX-License-Identifier: Apache-2.0 */
/* train-model.h: the MLP: its layer widths, the flat parameter layout, forward and backward
 * through a struct train_math. No I/O. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "train-math.h"

#define TRAIN_MAX_LAYERS 32     /* linear layers */
#define TRAIN_MAX_WIDTH 65536u  /* features in one layer */
#define TRAIN_MAX_PARAMS (1ull << 30)

/*
 * Linear layer l maps width[l] -> width[l+1]: y = x W^T + b with W stored [width[l+1],
 * width[l]] row-major (PyTorch's nn.Linear layout). The flat parameter vector holds W0, b0, W1,
 * b1, ... in that order; the activation follows every layer but the last.
 */
struct train_layout {
    unsigned nlayers;
    unsigned width[TRAIN_MAX_LAYERS + 1];
    size_t w_off[TRAIN_MAX_LAYERS];
    size_t b_off[TRAIN_MAX_LAYERS];
    size_t nparams;
    unsigned max_width;
};

/* Parse "784,128,784" (2 .. TRAIN_MAX_LAYERS+1 widths, each 1 .. TRAIN_MAX_WIDTH). Returns 0,
 * or -EINVAL for anything else (-E2BIG past TRAIN_MAX_PARAMS). *ret untouched on failure. */
int train_layout_parse(const char *s, struct train_layout *ret);
/* Fill the offsets from nlayers and width[]. Returns 0 or -E2BIG. */
int train_layout_init(struct train_layout *L);
/* "784,128,784" into buf. */
void train_layout_format(const struct train_layout *L, char *buf, size_t len);

/* PyTorch's nn.Linear default init (kaiming_uniform(a=sqrt(5)) = U(+-1/sqrt(fan_in)) for W,
 * U(+-1/sqrt(fan_in)) for b), drawn in PyTorch's order from an mt19937 seeded with seed, as
 * torch.manual_seed(seed) would: the same numbers as PyTorch 1.13's CPU init. Host memory. */
void train_layout_init_params(const struct train_layout *L, uint64_t seed, float *params);

/* One model replica's buffers in math memory, for a fixed per-rank batch size. */
struct train_model {
    const struct train_layout *L;
    struct train_math *m;
    enum train_act act;
    int batch;
    float *params; /* nparams */
    float *grads;  /* nparams + 1: the loss rides in grads[nparams] through the all-reduce */
    float *mom, *var;
    float *acts[TRAIN_MAX_LAYERS + 1]; /* acts[0]: the input (and the target), [batch, width] */
    float *dbuf[2];                    /* gradients w.r.t. activations, ping-pong */
};

/* Allocate a model's buffers (zeroed). L must outlive the model. Returns 0 or -ENOMEM. */
int train_model_new(struct train_math *m, const struct train_layout *L, enum train_act act,
                    int batch, struct train_model **ret);
struct train_model *train_model_free(struct train_model *md);

/* acts[1..] from acts[0]. */
void train_model_forward(struct train_model *md);

/* Called during backward each time a contiguous range of grads [first, first+count) is final
 * (ranges arrive from the end of the vector towards its start, and cover it exactly once).
 * Return 0 or a negative errno to stop the backward pass. */
typedef int (*train_grads_ready_fn)(void *ud, size_t first, size_t count);

/* Loss of acts[L] against the target acts[0] into grads[nparams], then every gradient.
 * bucket_floats: how many gradient floats to collect before calling ready (0: one call).
 * Returns 0 or ready()'s error. */
int train_model_backward(struct train_model *md, enum train_loss loss, size_t bucket_floats,
                         train_grads_ready_fn ready, void *ud);
