/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-record.c: a job's identity, generation and restart count, kept in the job table. */
#include "rdzvd-job-record.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/rdzv-auth.h"
#include "../common/rdzv-util.h"
#include "rdzvd-journal.h"


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

int rdzvd_job_record_drop_journal(int dirfd, const char *state_name)
{
    return rdzvd_journal_unlink(dirfd, state_name);
}

/* ---- the job table ---- */

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
