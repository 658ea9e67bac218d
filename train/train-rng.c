/* SPDX-License-Identifier: Apache-2.0 */
/* train-rng.c: mt19937 as PyTorch's CPUGeneratorImpl uses it. */
#include "train-rng.h"

void train_mt_seed(struct train_mt *mt, uint64_t seed)
{
    mt->s[0] = (uint32_t)seed;
    for (unsigned i = 1; i < 624; i++)
        mt->s[i] = 1812433253u * (mt->s[i - 1] ^ (mt->s[i - 1] >> 30)) + i;
    mt->idx = 624;
}

uint32_t train_mt_next(struct train_mt *mt)
{
    uint32_t y;

    if (mt->idx >= 624) {
        for (unsigned i = 0; i < 624; i++) {
            y = (mt->s[i] & 0x80000000u) | (mt->s[(i + 1) % 624] & 0x7fffffffu);
            mt->s[i] = mt->s[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        mt->idx = 0;
    }
    y = mt->s[mt->idx++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/* at::uniform_real_distribution<float>: 24 random bits scaled in double, rounded once. */
float train_mt_uniform(struct train_mt *mt, float from, float to)
{
    double x = (double)(train_mt_next(mt) & 0xffffffu) / 16777216.0;

    return (float)(x * (double)(to - from) + (double)from);
}

/* randperm_cpu: Fisher-Yates from the front with random() % (n - i). */
void train_randperm(uint64_t seed, uint32_t *out, size_t n)
{
    struct train_mt mt;

    train_mt_seed(&mt, seed);
    for (size_t i = 0; i < n; i++)
        out[i] = (uint32_t)i;
    for (size_t i = 0; i + 1 < n; i++) {
        size_t z = train_mt_next(&mt) % (n - i);
        uint32_t t = out[i];

        out[i] = out[z + i];
        out[z + i] = t;
    }
}
