/* SPDX-License-Identifier: Apache-2.0 */
/* train-rng.h: PyTorch's CPU generator (mt19937) and the two things drawn from it here:
 * torch.randperm() and Tensor.uniform_(), bit for bit as PyTorch 1.13 computes them. */
#pragma once
#include <stddef.h>
#include <stdint.h>

struct train_mt {
    uint32_t s[624];
    unsigned idx;
};

/* torch.manual_seed(seed) / Generator.manual_seed(seed): mt19937 seeded with the low 32 bits. */
void train_mt_seed(struct train_mt *mt, uint64_t seed);
uint32_t train_mt_next(struct train_mt *mt);
/* One float of Tensor.uniform_(from, to). */
float train_mt_uniform(struct train_mt *mt, float from, float to);
/* torch.randperm(n, generator=g) with g.manual_seed(seed): out[0..n) is a permutation. */
void train_randperm(uint64_t seed, uint32_t *out, size_t n);
