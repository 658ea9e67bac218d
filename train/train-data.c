/* SPDX-License-Identifier: Apache-2.0 */
/* train-data.c: synthetic and MNIST samples; the per-step shard of the global stream. */
#include "train-data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "train-rng.h"

#define MNIST_IMAGES "train-images-idx3-ubyte"
#define IDX3_MAGIC 0x00000803u
#define MNIST_MAX_SAMPLES (1u << 24)

static int data_new(size_t n, size_t dim, struct train_data **ret)
{
    struct train_data *d;

    if (n == 0 || dim == 0 || n > SIZE_MAX / sizeof(float) / dim)
        return -EINVAL;
    d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    d->x = malloc(n * dim * sizeof(float));
    if (!d->x) {
        free(d);
        return -ENOMEM;
    }
    d->n = n;
    d->dim = dim;
    *ret = d;
    return 0;
}

struct train_data *train_data_free(struct train_data *d)
{
    if (d) {
        free(d->x);
        free(d);
    }
    return NULL;
}

int train_data_synthetic(size_t n, size_t dim, struct train_data **ret)
{
    struct train_data *d;
    int r = data_new(n, dim, &d);

    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        float *x = d->x + i * dim;
        float end = (float)i, step = dim > 1 ? end / (float)(dim - 1) : 0.0f, mx = 0.0f;

        /* torch.linspace's formula: from the start for the first half, from the end after. */
        for (size_t j = 0; j < dim; j++) {
            x[j] = j < dim / 2 ? step * (float)j : end - step * (float)(dim - 1 - j);
            if (dim == 1)
                x[j] = 0.0f;
            if (fabsf(x[j]) > mx)
                mx = fabsf(x[j]);
        }
        if (mx < 1e-8f)
            mx = 1e-8f;
        for (size_t j = 0; j < dim; j++)
            x[j] /= mx;
    }
    *ret = d;
    return 0;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Read exactly n bytes; -EBADMSG on a short file. */
static int gz_read_all(gzFile f, void *buf, size_t n)
{
    uint8_t *p = buf;

    while (n > 0) {
        unsigned chunk = n > (1u << 30) ? (1u << 30) : (unsigned)n;
        int got = gzread(f, p, chunk);

        if (got < 0)
            return -EIO;
        if (got == 0)
            return -EBADMSG;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

int train_data_mnist(const char *dir, size_t max_n, struct train_data **ret)
{
    static const char *const names[] = {MNIST_IMAGES, MNIST_IMAGES ".gz"};
    char path[4096];
    struct train_data *d = NULL;
    uint8_t hdr[16], *pix = NULL;
    uint32_t n, rows, cols;
    gzFile f = NULL;
    int r = -ENOENT;

    for (size_t i = 0; i < 2 && !f; i++) {
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, names[i]) >= sizeof(path))
            return -ENAMETOOLONG;
        if (access(path, R_OK) < 0) {
            if (errno != ENOENT)
                r = -errno;
            continue;
        }
        f = gzopen(path, "rb");
        if (!f)
            return errno ? -errno : -ENOMEM;
    }
    if (!f)
        return r;
    r = gz_read_all(f, hdr, sizeof(hdr));
    if (r < 0)
        goto out_close;
    n = be32(hdr + 4);
    rows = be32(hdr + 8);
    cols = be32(hdr + 12);
    if (be32(hdr) != IDX3_MAGIC || n == 0 || n > MNIST_MAX_SAMPLES || rows == 0 || cols == 0 ||
        rows > 4096 || cols > 4096) {
        r = -EBADMSG;
        goto out_close;
    }
    if (max_n && max_n < n)
        n = (uint32_t)max_n;
    r = data_new(n, (size_t)rows * cols, &d);
    if (r < 0)
        goto out_close;
    pix = malloc(d->n * d->dim);
    if (!pix) {
        r = -ENOMEM;
        goto out_free;
    }
    r = gz_read_all(f, pix, d->n * d->dim);
    if (r < 0)
        goto out_free;
    for (size_t i = 0; i < d->n * d->dim; i++)
        d->x[i] = (float)pix[i] / 255.0f;
    free(pix);
    gzclose(f);
    *ret = d;
    return 0;

out_free:
    free(pix);
    train_data_free(d);
out_close:
    gzclose(f);
    return r;
}

uint64_t train_steps_per_epoch(size_t n, uint64_t batch)
{
    return batch ? ((uint64_t)n + batch - 1) / batch : 0;
}

void train_epoch_perm(uint64_t seed, uint64_t epoch, uint32_t *perm, size_t n)
{
    train_randperm(seed + epoch, perm, n);
}

void train_shard(const uint32_t *perm, size_t n, uint64_t offset, uint64_t batch, unsigned rank,
                 unsigned world, uint32_t *out)
{
    uint64_t per_rank = batch / world;

    for (uint64_t j = 0; j < per_rank; j++)
        out[j] = perm[(offset + rank + (uint64_t)world * j) % n];
}

void train_data_gather(const struct train_data *d, const uint32_t *idx, size_t k, float *out)
{
    for (size_t i = 0; i < k; i++)
        memcpy(out + i * d->dim, d->x + (size_t)idx[i] * d->dim, d->dim * sizeof(float));
}
