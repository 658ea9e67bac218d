/* SPDX-License-Identifier: Apache-2.0 */
/* test-train-data.c: the synthetic set, MNIST IDX reading (raw and gzipped), and the sharding
 * rule: every step's shards are disjoint and cover the global block, and a resume with another
 * world size continues the global stream exactly. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../tap.h"
#include "train-data.h"

static void test_synthetic_is_normalised_linspace(void)
{
    struct train_data *d;

    ASSERT_OK(train_data_synthetic(10, 784, &d));
    ASSERT_EQ(d->n, 10);
    ASSERT_EQ(d->dim, 784);
    for (size_t j = 0; j < 784; j++)
        ASSERT_TRUE(d->x[j] == 0.0f); /* sample 0: linspace(0, 0) = 0, clamped divisor */
    for (size_t i = 1; i < 10; i++) {
        const float *x = d->x + i * 784;

        ASSERT_TRUE(x[0] == 0.0f);
        ASSERT_TRUE(x[783] == 1.0f);
        for (size_t j = 1; j < 784; j++) {
            ASSERT_TRUE(x[j] > x[j - 1]);
            ASSERT_TRUE(fabsf(x[j] - (float)j / 783.0f) < 1e-6f);
        }
    }
    train_data_free(d);
    ASSERT_EQ(train_data_synthetic(0, 784, &d), -EINVAL);
}

/* Write n images of rows x cols in IDX3 format, pixel (i, k) = (i * 7 + k) % 256. */
static void write_idx(const char *path, bool gz, uint32_t magic, uint32_t n, uint32_t rows,
                      uint32_t cols, size_t truncate_to)
{
    size_t len = 16 + (size_t)n * rows * cols;
    uint8_t *b = malloc(len);
    uint32_t hdr[4] = {magic, n, rows, cols};

    ASSERT_NOT_NULL(b);
    for (int i = 0; i < 4; i++) {
        b[4 * i] = (uint8_t)(hdr[i] >> 24);
        b[4 * i + 1] = (uint8_t)(hdr[i] >> 16);
        b[4 * i + 2] = (uint8_t)(hdr[i] >> 8);
        b[4 * i + 3] = (uint8_t)hdr[i];
    }
    for (size_t i = 0; i < (size_t)n; i++)
        for (size_t k = 0; k < (size_t)rows * cols; k++)
            b[16 + i * rows * cols + k] = (uint8_t)((i * 7 + k) % 256);
    if (truncate_to)
        len = truncate_to;
    if (gz) {
        gzFile f = gzopen(path, "wb");

        ASSERT_NOT_NULL(f);
        ASSERT_EQ(gzwrite(f, b, (unsigned)len), len);
        ASSERT_EQ(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");

        ASSERT_NOT_NULL(f);
        ASSERT_EQ(fwrite(b, 1, len, f), len);
        ASSERT_EQ(fclose(f), 0);
    }
    free(b);
}

static void test_mnist_raw_and_gz(void)
{
    char dir[] = "/tmp/rdzv-train-mnist-XXXXXX", path[256];
    struct train_data *d;

    ASSERT_NOT_NULL(mkdtemp(dir));
    ASSERT_EQ(train_data_mnist(dir, 0, &d), -ENOENT);
    ASSERT_EQ(train_data_mnist("/nonexistent/rdzv", 0, &d), -ENOENT);
    snprintf(path, sizeof(path), "%s/train-images-idx3-ubyte.gz", dir);
    write_idx(path, true, 0x803, 5, 4, 3, 0);
    ASSERT_OK(train_data_mnist(dir, 0, &d));
    ASSERT_EQ(d->n, 5);
    ASSERT_EQ(d->dim, 12);
    ASSERT_TRUE(d->x[2 * 12 + 5] == (float)((2 * 7 + 5) % 256) / 255.0f);
    train_data_free(d);
    ASSERT_OK(train_data_mnist(dir, 3, &d));
    ASSERT_EQ(d->n, 3);
    train_data_free(d);
    /* The uncompressed name wins when both exist; a bad magic is refused. */
    snprintf(path, sizeof(path), "%s/train-images-idx3-ubyte", dir);
    write_idx(path, false, 0x801, 5, 4, 3, 0);
    ASSERT_EQ(train_data_mnist(dir, 0, &d), -EBADMSG);
    write_idx(path, false, 0x803, 2, 28, 28, 0);
    ASSERT_OK(train_data_mnist(dir, 0, &d));
    ASSERT_EQ(d->n, 2);
    ASSERT_EQ(d->dim, 784);
    train_data_free(d);
    write_idx(path, false, 0x803, 2, 28, 28, 16 + 784 + 100); /* truncated */
    ASSERT_EQ(train_data_mnist(dir, 0, &d), -EBADMSG);
    ASSERT_EQ(unlink(path), 0);
    snprintf(path, sizeof(path), "%s/train-images-idx3-ubyte.gz", dir);
    ASSERT_EQ(unlink(path), 0);
    ASSERT_EQ(rmdir(dir), 0);
}

static void test_epoch_perm_is_seeded_permutation(void)
{
    enum { N = 37 };
    uint32_t a[N], b[N], c[N];
    bool seen[N] = {0};

    train_epoch_perm(5, 2, a, N);
    train_epoch_perm(6, 1, b, N); /* seed + epoch, like DistributedSampler */
    train_epoch_perm(5, 3, c, N);
    ASSERT_MEMEQ(a, b, sizeof(a));
    ASSERT_TRUE(memcmp(a, c, sizeof(a)) != 0);
    for (int i = 0; i < N; i++) {
        ASSERT_TRUE(a[i] < N);
        ASSERT_FALSE(seen[a[i]]);
        seen[a[i]] = true;
    }
}

/* Positions (not sample ids) each rank reads, using the identity permutation. */
static void test_shards_partition_the_global_block(void)
{
    enum { N = 50, B = 12 };
    uint32_t ident[N], out[B];
    const unsigned worlds[] = {1, 2, 3, 4, 6, 12};

    for (uint32_t i = 0; i < N; i++)
        ident[i] = i;
    ASSERT_EQ(train_steps_per_epoch(N, B), 5);
    for (size_t w = 0; w < sizeof(worlds) / sizeof(worlds[0]); w++)
        for (uint64_t off = 0; off < N; off += B) {
            unsigned count[N] = {0};
            unsigned world = worlds[w];

            for (unsigned r = 0; r < world; r++) {
                train_shard(ident, N, off, B, r, world, out);
                for (unsigned j = 0; j < B / world; j++) {
                    /* DistributedSampler's rank r list is perm[r::world]; batch k of it. */
                    ASSERT_EQ(out[j], (off + r + world * j) % N);
                    count[out[j]]++;
                }
            }
            /* The union is exactly positions [off, off + B), wrapping into the padding. */
            {
                unsigned want[N] = {0};

                for (uint64_t p = off; p < off + B; p++)
                    want[p % N]++;
                ASSERT_MEMEQ(count, want, sizeof(want));
            }
        }
}

/* Run steps [from, to) of the global stream with world w, appending the sample ids read (all
 * ranks' shards, in rank order) to a per-step sorted multiset. */
static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return x < y ? -1 : x > y;
}

static void stream(uint64_t seed, size_t n, uint64_t batch, unsigned world, uint64_t from,
                   uint64_t to, uint32_t *out)
{
    uint32_t *perm = malloc(n * sizeof(*perm));
    uint64_t spe = train_steps_per_epoch(n, batch);

    ASSERT_NOT_NULL(perm);
    for (uint64_t k = from; k < to; k++) {
        uint64_t epoch = k / spe, off = (k % spe) * batch;
        uint32_t *step_out = out + (k - from) * batch;

        train_epoch_perm(seed, epoch, perm, n);
        for (unsigned r = 0; r < world; r++)
            train_shard(perm, n, off, batch, r, world, step_out + r * (batch / world));
        qsort(step_out, batch, sizeof(uint32_t), cmp_u32);
    }
    free(perm);
}

static void test_resume_with_another_world_size_continues_the_stream(void)
{
    enum { N = 100, B = 24, STEPS = 20, CUT = 7 };
    uint32_t ref[STEPS * B], got[STEPS * B];

    /* Reference: world 1 all the way (the global stream). */
    stream(11, N, B, 1, 0, STEPS, ref);
    /* World 4 up to step CUT, then world 2, then world 3 from 13: the same samples per step. */
    stream(11, N, B, 4, 0, CUT, got);
    stream(11, N, B, 2, CUT, 13, got + CUT * B);
    stream(11, N, B, 3, 13, STEPS, got + 13 * B);
    ASSERT_MEMEQ(got, ref, sizeof(ref));
    /* And a step's data is a multiset of exactly B samples of the epoch's order. */
    ASSERT_EQ(train_steps_per_epoch(N, B), 5);
}

int main(void)
{
    TEST(test_synthetic_is_normalised_linspace);
    TEST(test_mnist_raw_and_gz);
    TEST(test_epoch_perm_is_seeded_permutation);
    TEST(test_shards_partition_the_global_block);
    TEST(test_resume_with_another_world_size_continues_the_stream);
    return tap_done();
}
