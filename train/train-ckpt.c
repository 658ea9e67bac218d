/* SPDX-License-Identifier: Apache-2.0 */
/* train-ckpt.c: checkpoint files.
 *
 * Layout (little-endian): magic "RDZVCKPT", u32 version, u32 nwidths, u64 step, epoch, offset,
 * adam_t, seed, samples, u32 activation, u32 0, u64 nparams, u32 widths[nwidths], then
 * float params[nparams], mom[nparams], var[nparams], and last a u64 hash of every byte before
 * it. */
#include "train-ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/rdzv-buf.h"
#include "../common/rdzv-util.h"

#define CKPT_HASH_SEED 0x72647a76636b7074ull /* "rdzvckpt" */
#define CKPT_FIXED 80u                       /* bytes before widths[] */
#define CKPT_MAX_STEPS_LISTED 4096u

static size_t ckpt_size(unsigned nwidths, size_t nparams)
{
    return CKPT_FIXED + 4u * nwidths + 3u * sizeof(float) * nparams + 8u;
}

static int write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;

    while (n > 0) {
        ssize_t w = write(fd, b, n);

        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int ckpt_encode(const struct train_ckpt *c, uint8_t **ret, size_t *ret_len)
{
    const struct train_layout *L = &c->layout;
    unsigned nw = L->nlayers + 1;
    size_t n = ckpt_size(nw, L->nparams), np = L->nparams * sizeof(float);
    uint8_t *b = malloc(n), *p;

    if (!b)
        return -ENOMEM;
    memcpy(b, TRAIN_CKPT_MAGIC, 8);
    rdzv_set_u32(b + 8, TRAIN_CKPT_VERSION);
    rdzv_set_u32(b + 12, nw);
    rdzv_set_u64(b + 16, c->step);
    rdzv_set_u64(b + 24, c->epoch);
    rdzv_set_u64(b + 32, c->offset);
    rdzv_set_u64(b + 40, c->adam_t);
    rdzv_set_u64(b + 48, c->seed);
    rdzv_set_u64(b + 56, c->samples);
    rdzv_set_u32(b + 64, (uint32_t)c->act);
    rdzv_set_u32(b + 68, 0);
    rdzv_set_u64(b + 72, L->nparams);
    p = b + CKPT_FIXED;
    for (unsigned i = 0; i < nw; i++, p += 4)
        rdzv_set_u32(p, L->width[i]);
    memcpy(p, c->params, np);
    memcpy(p + np, c->mom, np);
    memcpy(p + 2 * np, c->var, np);
    p += 3 * np;
    rdzv_set_u64(p, rdzv_hash64(CKPT_HASH_SEED, b, (size_t)(p - b)));
    *ret = b;
    *ret_len = n;
    return 0;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r = 0;

    if (fd < 0)
        return -errno;
    if (fsync(fd) < 0)
        r = -errno;
    close(fd);
    return r;
}

/* The step in a name "ckpt-<digits>.bin", or -EINVAL. */
static int parse_ckpt_name(const char *name, uint64_t *ret)
{
    size_t len = strlen(name);
    char digits[32];

    if (len < 10 || len - 9 >= sizeof(digits) || strncmp(name, "ckpt-", 5) != 0 ||
        strcmp(name + len - 4, ".bin") != 0)
        return -EINVAL;
    memcpy(digits, name + 5, len - 9);
    digits[len - 9] = '\0';
    return rdzv_parse_u64(digits, ret);
}

static int cmp_u64_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? 1 : x > y ? -1 : 0;
}

/* Steps of the ckpt-*.bin files in dir, newest first (at most CKPT_MAX_STEPS_LISTED). */
static int list_steps(const char *dir, uint64_t **ret, size_t *ret_n)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    uint64_t *steps, step;
    size_t n = 0;

    if (!d)
        return -errno;
    steps = malloc(CKPT_MAX_STEPS_LISTED * sizeof(*steps));
    if (!steps) {
        closedir(d);
        return -ENOMEM;
    }
    while ((de = readdir(d)) && n < CKPT_MAX_STEPS_LISTED)
        if (parse_ckpt_name(de->d_name, &step) == 0)
            steps[n++] = step;
    closedir(d);
    qsort(steps, n, sizeof(*steps), cmp_u64_desc);
    *ret = steps;
    *ret_n = n;
    return 0;
}

static void ckpt_path(char *buf, size_t len, const char *dir, uint64_t step)
{
    snprintf(buf, len, "%s/ckpt-%012" PRIu64 ".bin", dir, step);
}

int train_ckpt_write(const char *dir, const struct train_ckpt *c, unsigned keep)
{
    char tmp[4096], final[4096];
    uint8_t *buf;
    size_t len;
    uint64_t *steps = NULL;
    size_t nsteps = 0;
    int fd, r;

    if (strlen(dir) > sizeof(final) - 64)
        return -ENAMETOOLONG;
    if (mkdir(dir, 0777) < 0 && errno != EEXIST)
        return -errno;
    r = ckpt_encode(c, &buf, &len);
    if (r < 0)
        return r;
    ckpt_path(final, sizeof(final), dir, c->step);
    snprintf(tmp, sizeof(tmp), "%s/.ckpt-%012" PRIu64 ".tmp.%ld", dir, c->step, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        r = -errno;
        goto out_free;
    }
    r = write_all(fd, buf, len);
    if (r == 0 && fsync(fd) < 0)
        r = -errno;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r < 0)
        goto out_unlink;
    if (rename(tmp, final) < 0) {
        r = -errno;
        goto out_unlink;
    }
    r = fsync_dir(dir);
    if (r < 0)
        goto out_free;
    if (keep && list_steps(dir, &steps, &nsteps) == 0) {
        for (size_t i = keep; i < nsteps; i++) {
            ckpt_path(final, sizeof(final), dir, steps[i]);
            (void)unlink(final);
        }
        free(steps);
    }
    free(buf);
    return 0;

out_unlink:
    (void)unlink(tmp);
out_free:
    free(buf);
    return r;
}

static int read_file(const char *path, uint8_t **ret, size_t *ret_len)
{
    struct stat st;
    uint8_t *b;
    size_t got = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC), r;

    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0) {
        r = -errno;
        goto out_close;
    }
    if (st.st_size < (off_t)ckpt_size(2, 0) ||
        (uint64_t)st.st_size > ckpt_size(TRAIN_MAX_LAYERS + 1, TRAIN_MAX_PARAMS)) {
        r = -EBADMSG;
        goto out_close;
    }
    b = malloc((size_t)st.st_size);
    if (!b) {
        r = -ENOMEM;
        goto out_close;
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, b + got, (size_t)st.st_size - got);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            r = n < 0 ? -errno : -EBADMSG;
            free(b);
            goto out_close;
        }
        got += (size_t)n;
    }
    close(fd);
    *ret = b;
    *ret_len = got;
    return 0;

out_close:
    close(fd);
    return r;
}

int train_ckpt_read(const char *path, struct train_ckpt *ret)
{
    struct train_ckpt c = {0};
    uint8_t *b = NULL, *p;
    size_t len = 0, np;
    unsigned nw;
    int r = read_file(path, &b, &len);

    if (r < 0)
        return r;
    r = -EBADMSG;
    if (len < ckpt_size(2, 0) || memcmp(b, TRAIN_CKPT_MAGIC, 8) != 0 ||
        rdzv_get_u32(b + 8) != TRAIN_CKPT_VERSION)
        goto out_free;
    if (rdzv_get_u64(b + len - 8) != rdzv_hash64(CKPT_HASH_SEED, b, len - 8))
        goto out_free;
    nw = rdzv_get_u32(b + 12);
    if (nw < 2 || nw > TRAIN_MAX_LAYERS + 1 || len < CKPT_FIXED + 4u * nw)
        goto out_free;
    c.step = rdzv_get_u64(b + 16);
    c.epoch = rdzv_get_u64(b + 24);
    c.offset = rdzv_get_u64(b + 32);
    c.adam_t = rdzv_get_u64(b + 40);
    c.seed = rdzv_get_u64(b + 48);
    c.samples = rdzv_get_u64(b + 56);
    if (rdzv_get_u32(b + 64) >= _TRAIN_ACT_MAX)
        goto out_free;
    c.act = (enum train_act)rdzv_get_u32(b + 64);
    c.layout.nlayers = nw - 1;
    p = b + CKPT_FIXED;
    for (unsigned i = 0; i < nw; i++, p += 4)
        c.layout.width[i] = rdzv_get_u32(p);
    if (train_layout_init(&c.layout) < 0 || c.layout.nparams != rdzv_get_u64(b + 72) ||
        len != ckpt_size(nw, c.layout.nparams))
        goto out_free;
    np = c.layout.nparams * sizeof(float);
    c.params = malloc(np);
    c.mom = malloc(np);
    c.var = malloc(np);
    if (!c.params || !c.mom || !c.var) {
        r = -ENOMEM;
        train_ckpt_release(&c);
        goto out_free;
    }
    memcpy(c.params, p, np);
    memcpy(c.mom, p + np, np);
    memcpy(c.var, p + 2 * np, np);
    free(b);
    *ret = c;
    return 0;

out_free:
    free(b);
    return r;
}

int train_ckpt_load_latest(const char *dir, struct train_ckpt *ret, char *path_out, size_t len,
                           unsigned *ret_skipped)
{
    uint64_t *steps;
    size_t n;
    unsigned skipped = 0;
    char path[4096];
    int r = list_steps(dir, &steps, &n);

    if (r < 0)
        return r == -ENOENT ? -ENOENT : r;
    r = -ENOENT;
    for (size_t i = 0; i < n; i++) {
        ckpt_path(path, sizeof(path), dir, steps[i]);
        r = train_ckpt_read(path, ret);
        if (r == 0) {
            if (path_out)
                snprintf(path_out, len, "%s", path);
            break;
        }
        if (r == -ENOMEM)
            break;
        skipped++;
        r = -ENOENT;
    }
    free(steps);
    if (ret_skipped)
        *ret_skipped = skipped;
    return r;
}

void train_ckpt_release(struct train_ckpt *c)
{
    free(c->params);
    free(c->mom);
    free(c->var);
    c->params = c->mom = c->var = NULL;
}
