/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-record.c: a job's identity, generation and restart count kept in --state-dir. */
#include "rdzvd-job-record.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/rdzv-util.h"

#define RECORD_MAX 4096

void rdzvd_job_record_name(const char *run_id, char *buf, size_t len)
{
    snprintf(buf, len, "job-%016" PRIx64 ".state", rdzv_hash64(0x72647a76, run_id, strlen(run_id)));
}

int rdzvd_job_record_save(int dirfd, const struct rdzvd_job_record *rec, bool sync)
{
    char name[48], tmp[56];
    json_t *o;
    char *text = NULL;
    int fd = -1, r;
    ssize_t w;

    rdzvd_job_record_name(rec->run_id, name, sizeof(name));
    snprintf(tmp, sizeof(tmp), "%s.tmp", name);
    o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:b, s:I, s:I, s:i}", "run_id", rec->run_id,
                  "min", (json_int_t)rec->min, "max", (json_int_t)rec->max, "max_restarts",
                  (json_int_t)rec->max_restarts, "generation", (json_int_t)rec->generation,
                  "restart_count", (json_int_t)rec->restart_count, "running", rec->running,
                  "nnodes", (json_int_t)rec->nnodes, "world_size", (json_int_t)rec->world_size,
                  "store_port", (int)rec->store_port);
    if (!o || !(text = json_dumps(o, JSON_COMPACT))) {
        r = -ENOMEM;
        goto out_free;
    }
    fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        r = -errno;
        goto out_free;
    }
    /* A small regular file: one write(2) writes it all, or it failed. */
    w = write(fd, text, strlen(text));
    r = w < 0 ? -errno : (size_t)w != strlen(text) ? -EIO : 0;
    if (r == 0 && sync && fsync(fd) < 0)
        r = -errno;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
        r = -errno;
    if (r < 0) {
        (void)unlinkat(dirfd, tmp, 0);
        goto out_free;
    }
    if (sync && fsync(dirfd) < 0)
        r = -errno;
out_free:
    free(text);
    json_decref(o);
    return r;
}

int rdzvd_job_record_load(int dirfd, const char *run_id, struct rdzvd_job_record *rec)
{
    char name[48], buf[RECORD_MAX];
    const char *id;
    json_int_t min, max, mr, gen, rc, nn, ws;
    int running, port, fd, r = 0;
    size_t n = 0;
    json_t *o;

    rdzvd_job_record_name(run_id, name, sizeof(name));
    fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    while (n < sizeof(buf) - 1) {
        ssize_t got = read(fd, buf + n, sizeof(buf) - 1 - n);

        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            r = -errno;
            break;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    if (r < 0)
        return r;
    o = json_loadb(buf, n, 0, NULL);
    if (!o || json_unpack(o, "{s:s, s:I, s:I, s:I, s:I, s:I, s:b, s:I, s:I, s:i}", "run_id", &id,
                          "min", &min, "max", &max, "max_restarts", &mr, "generation", &gen,
                          "restart_count", &rc, "running", &running, "nnodes", &nn, "world_size",
                          &ws, "store_port", &port) < 0) {
        r = -EBADMSG;
        goto out_free;
    }
    if (strcmp(id, run_id) != 0) {
        r = -ENOENT;
        goto out_free;
    }
    if (min < 1 || max < min || mr < 0 || gen < 0 || rc < 0 || nn < 0 || ws < 0 || port < 0 ||
        port > 65535) {
        r = -EBADMSG;
        goto out_free;
    }
    memset(rec, 0, sizeof(*rec));
    snprintf(rec->run_id, sizeof(rec->run_id), "%s", run_id);
    rec->min = min;
    rec->max = max;
    rec->max_restarts = mr;
    rec->generation = (uint64_t)gen;
    rec->restart_count = rc;
    rec->running = running != 0;
    rec->nnodes = nn;
    rec->world_size = ws;
    rec->store_port = (uint16_t)port;
out_free:
    json_decref(o);
    return r;
}

int rdzvd_job_record_drop(int dirfd, const char *run_id)
{
    char name[48];

    rdzvd_job_record_name(run_id, name, sizeof(name));
    if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

int rdzvd_job_record_drop_journal(int dirfd, const char *state_name)
{
    char name[256];

    snprintf(name, sizeof(name), "%s.journal", state_name);
    if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}
