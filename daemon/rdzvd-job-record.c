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

#include "../common/rdzv-auth.h"
#include "../common/rdzv-log.h"
#include "../common/rdzv-util.h"
#include "rdzvd-journal.h"

#define RECORD_MAX 4096
#define OLD_NAME_SEED 0x72647a76 /* the 64-bit hash of the names before SHA-256 */

/* "job-" and the 64 hex digits of SHA-256 of run_id (keyed: RDZVD_STATE_NAME_KEY) into buf. */
static int name_prefix(const char *run_id, char *buf, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    uint8_t mac[RDZV_MAC_BYTES];
    char digits[2 * RDZV_MAC_BYTES + 1];
    int r;

    r = rdzv_hmac_sha256((const uint8_t *)RDZVD_STATE_NAME_KEY, strlen(RDZVD_STATE_NAME_KEY),
                         (const uint8_t *)run_id, strlen(run_id), mac);
    if (r < 0) {
        if (len)
            buf[0] = '\0';
        return r;
    }
    for (size_t i = 0; i < RDZV_MAC_BYTES; i++) {
        digits[2 * i] = hex[mac[i] >> 4];
        digits[2 * i + 1] = hex[mac[i] & 15];
    }
    digits[2 * RDZV_MAC_BYTES] = '\0';
    snprintf(buf, len, "job-%s", digits);
    return 0;
}

int rdzvd_job_record_name(const char *run_id, char *buf, size_t len)
{
    int r = name_prefix(run_id, buf, len);

    if (r == 0)
        snprintf(buf + strlen(buf), len - strlen(buf), ".state");
    return r;
}

int rdzvd_job_state_name(const char *run_id, uint64_t gen, char *buf, size_t len)
{
    int r = name_prefix(run_id, buf, len);

    if (r == 0)
        snprintf(buf + strlen(buf), len - strlen(buf), "-gen-%" PRIu64, gen);
    return r;
}

/* rec as the JSON text of a record (malloc'd), or NULL when out of memory. */
static char *record_encode(const struct rdzvd_job_record *rec)
{
    json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:b, s:I, s:I, s:i}", "run_id",
                          rec->run_id, "min", (json_int_t)rec->min, "max", (json_int_t)rec->max,
                          "max_restarts", (json_int_t)rec->max_restarts, "generation",
                          (json_int_t)rec->generation, "restart_count",
                          (json_int_t)rec->restart_count, "running", rec->running, "nnodes",
                          (json_int_t)rec->nnodes, "world_size", (json_int_t)rec->world_size,
                          "store_port", (int)rec->store_port);
    char *text;

    if (o && rec->store_addr[0] &&
        json_object_set_new(o, "store_addr", json_string(rec->store_addr)) < 0) {
        json_decref(o);
        o = NULL;
    }
    text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

/* The record o (whose run_id the caller checked) into *rec. 0 or -EBADMSG. */
static int record_decode(json_t *o, struct rdzvd_job_record *rec)
{
    const char *id, *addr = "";
    json_int_t min, max, mr, gen, rc, nn, ws;
    int running, port;

    if (json_unpack(o, "{s:s, s:I, s:I, s:I, s:I, s:I, s:b, s:I, s:I, s:i, s?s}", "run_id", &id,
                    "min", &min, "max", &max, "max_restarts", &mr, "generation", &gen,
                    "restart_count", &rc, "running", &running, "nnodes", &nn, "world_size", &ws,
                    "store_port", &port, "store_addr", &addr) < 0 ||
        strlen(id) >= sizeof(rec->run_id) || strlen(addr) > RDZV_STORE_ADDR_MAX)
        return -EBADMSG;
    if (min < 1 || max < min || mr < 0 || gen < 0 || rc < 0 || nn < 0 || ws < 0 || port < 0 ||
        port > 65535)
        return -EBADMSG;
    memset(rec, 0, sizeof(*rec));
    snprintf(rec->run_id, sizeof(rec->run_id), "%s", id);
    rec->min = min;
    rec->max = max;
    rec->max_restarts = mr;
    rec->generation = (uint64_t)gen;
    rec->restart_count = rc;
    rec->running = running != 0;
    rec->nnodes = nn;
    rec->world_size = ws;
    rec->store_port = (uint16_t)port;
    snprintf(rec->store_addr, sizeof(rec->store_addr), "%s", addr);
    return 0;
}

/* Read DIR/name (at most RECORD_MAX bytes) and parse it. *ret_id points into *ret_o. 0, -ENOENT,
 * -EBADMSG (not a record) or another negative errno. */
static int record_read(int dirfd, const char *name, json_t **ret_o, const char **ret_id)
{
    char buf[RECORD_MAX];
    size_t n = 0;
    int fd, r = 0;
    json_t *o;

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
    if (!o || json_unpack(o, "{s:s}", "run_id", ret_id) < 0) {
        json_decref(o);
        return -EBADMSG;
    }
    *ret_o = o;
    return 0;
}

/* 0 when DIR/name is absent, unreadable as a record, or run_id's; -EEXIST when it holds another
 * run id's record; another negative errno when it cannot be read. */
static int record_check_owner(int dirfd, const char *name, const char *run_id)
{
    const char *id;
    json_t *o;
    int r = record_read(dirfd, name, &o, &id);

    if (r == -ENOENT || r == -EBADMSG)
        return 0;
    if (r < 0)
        return r;
    r = strcmp(id, run_id) == 0 ? 0 : -EEXIST;
    json_decref(o);
    return r;
}

int rdzvd_job_record_save(int dirfd, const struct rdzvd_job_record *rec, bool sync)
{
    char name[RDZVD_JOB_NAME_MAX], tmp[RDZVD_JOB_NAME_MAX + 8];
    char *text = NULL;
    int fd = -1, r;
    ssize_t w;

    r = rdzvd_job_record_name(rec->run_id, name, sizeof(name));
    if (r == 0)
        r = record_check_owner(dirfd, name, rec->run_id);
    if (r < 0)
        return r;
    snprintf(tmp, sizeof(tmp), "%s.tmp", name);
    if (!(text = record_encode(rec))) {
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
    return r;
}

/* A record of run_id under the name rdzvd gave it before SHA-256 names: say that it is ignored. */
static void record_note_old(int dirfd, const char *run_id)
{
    char name[48];
    const char *id;
    json_t *o;

    snprintf(name, sizeof(name), "job-%016" PRIx64 ".state",
             rdzv_hash64(OLD_NAME_SEED, run_id, strlen(run_id)));
    if (record_read(dirfd, name, &o, &id) < 0)
        return;
    if (strcmp(id, run_id) == 0)
        log_info("job=%s: ignoring its record %s in --state-dir, written by an rdzvd before "
                 "collision-free state file names; the job starts afresh",
                 run_id, name);
    json_decref(o);
}

int rdzvd_job_record_load(int dirfd, const char *run_id, struct rdzvd_job_record *rec)
{
    char name[RDZVD_JOB_NAME_MAX];
    const char *id;
    json_t *o;
    int r;

    r = rdzvd_job_record_name(run_id, name, sizeof(name));
    if (r < 0)
        return r;
    r = record_read(dirfd, name, &o, &id);
    if (r == -ENOENT)
        record_note_old(dirfd, run_id);
    if (r < 0)
        return r;
    if (strcmp(id, run_id) != 0) {
        log_warn("job=%s: %s in --state-dir holds the record of another run id (%s); ignored",
                 run_id, name, id);
        r = -ENOENT;
        goto out_free;
    }
    r = record_decode(o, rec);
out_free:
    json_decref(o);
    return r;
}

int rdzvd_job_record_drop(int dirfd, const char *run_id)
{
    char name[RDZVD_JOB_NAME_MAX];
    int r;

    r = rdzvd_job_record_name(run_id, name, sizeof(name));
    if (r == 0)
        r = record_check_owner(dirfd, name, run_id);
    if (r < 0)
        return r;
    if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

int rdzvd_job_record_drop_journal(int dirfd, const char *state_name)
{
    return rdzvd_journal_unlink(dirfd, state_name);
}

/* ---- the job table of a replicated rdzvd ---- */

#define TABLE_KEY_PREFIX "job/"

static size_t table_key(const char *run_id, char *key, size_t len)
{
    return (size_t)snprintf(key, len, TABLE_KEY_PREFIX "%s", run_id);
}

int rdzvd_job_record_put(struct rdzvd_store *t, const struct rdzvd_job_record *rec)
{
    char key[sizeof(TABLE_KEY_PREFIX) + RDZV_ID_MAX + 1];
    char *text = record_encode(rec);
    int r;

    if (!text)
        return -ENOMEM;
    r = rdzvd_store_set(t, key, table_key(rec->run_id, key, sizeof(key)), text, strlen(text));
    free(text);
    return r;
}

int rdzvd_job_record_get(struct rdzvd_store *t, const char *run_id, struct rdzvd_job_record *rec)
{
    char key[sizeof(TABLE_KEY_PREFIX) + RDZV_ID_MAX + 1];
    const uint8_t *val;
    size_t vlen;
    json_t *o;
    int r;

    if (strlen(run_id) > RDZV_ID_MAX)
        return -ENOENT; /* no record holds it, and its key would not fit in key[] */
    r = rdzvd_store_get(t, key, table_key(run_id, key, sizeof(key)), &val, &vlen);
    if (r < 0)
        return r;
    o = json_loadb((const char *)val, vlen, 0, NULL);
    r = o ? record_decode(o, rec) : -EBADMSG;
    if (r == 0 && strcmp(rec->run_id, run_id) != 0)
        r = -EBADMSG;
    json_decref(o);
    return r;
}

int rdzvd_job_record_del(struct rdzvd_store *t, const char *run_id)
{
    char key[sizeof(TABLE_KEY_PREFIX) + RDZV_ID_MAX + 1];
    int r;

    if (strlen(run_id) > RDZV_ID_MAX)
        return 0; /* no record holds it, and its key would not fit in key[] */
    r = rdzvd_store_delete(t, key, table_key(run_id, key, sizeof(key)));
    return r < 0 ? r : 0; /* the store says 1 (deleted) or 0 (none): both are 0 here */
}

#define TABLE_MEMBER_KEY "member-key"
#define TABLE_MEMBER_KEY_BYTES 32

int rdzvd_job_table_member_key(struct rdzvd_store *t, const uint8_t **key, size_t *len)
{
    uint8_t fresh[TABLE_MEMBER_KEY_BYTES];
    int r = rdzvd_store_get(t, TABLE_MEMBER_KEY, strlen(TABLE_MEMBER_KEY), key, len);

    if (r == 0)
        return *len == TABLE_MEMBER_KEY_BYTES ? 0 : -EBADMSG;
    if (r != -ENOENT)
        return r;
    if ((r = rdzv_random_bytes(fresh, sizeof(fresh))) < 0 ||
        (r = rdzvd_store_set(t, TABLE_MEMBER_KEY, strlen(TABLE_MEMBER_KEY), fresh,
                             sizeof(fresh))) < 0)
        return r;
    explicit_bzero(fresh, sizeof(fresh));
    return rdzvd_store_get(t, TABLE_MEMBER_KEY, strlen(TABLE_MEMBER_KEY), key, len);
}
