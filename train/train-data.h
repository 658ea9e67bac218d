/* SPDX-License-Identifier: Apache-2.0 */
/* train-data.h: the training samples (synthetic or MNIST) and which of them each rank reads at
 * each step. */
#pragma once
#include <stddef.h>
#include <stdint.h>

/* n samples of dim floats each, row-major, in host memory. */
struct train_data {
    size_t n, dim;
    float *x;
};

/* The seed scripts' synthetic set: sample i is linspace(0, i, dim) divided by its largest
 * absolute value (clamped to >= 1e-8), so sample 0 is all zeros. Returns 0 or -ENOMEM/-EINVAL. */
int train_data_synthetic(size_t n, size_t dim, struct train_data **ret);

/* MNIST's training images from dir: train-images-idx3-ubyte, or the same with .gz (either is
 * read through zlib). Pixels scaled to [0, 1]; at most max_n samples (0: all).
 * Returns 0, -ENOENT when neither file exists, -EBADMSG for a file that is not an IDX3 image
 * set, -ENOMEM, or another negative errno. */
int train_data_mnist(const char *dir, size_t max_n, struct train_data **ret);

struct train_data *train_data_free(struct train_data *d);

/*
 * The global sample stream. Epoch e visits the samples in the order perm_e =
 * torch.randperm(n, generator seeded seed + e) (DistributedSampler's shuffle), padded by wrapping
 * around to a whole number of global batches. Global step k of an epoch consumes positions
 * [k B, (k+1) B) of that order, and rank r of a world of w reads positions k B + r + w j for
 * j < B/w: exactly what DistributedSampler(rank r) + a DataLoader with batch B/w read, and
 * independent of w, so a resume with another world size continues the same stream.
 */

/* Steps in one epoch: ceil(n / batch). */
uint64_t train_steps_per_epoch(size_t n, uint64_t batch);

/* perm[0..n) for epoch. */
void train_epoch_perm(uint64_t seed, uint64_t epoch, uint32_t *perm, size_t n);

/* The batch/world sample indices rank reads at position offset (a multiple of batch) of perm.
 * batch must be a multiple of world (checked by the caller). */
void train_shard(const uint32_t *perm, size_t n, uint64_t offset, uint64_t batch, unsigned rank,
                 unsigned world, uint32_t *out);

/* Copy samples idx[0..k) into out[k, dim]. */
void train_data_gather(const struct train_data *d, const uint32_t *idx, size_t k, float *out);
