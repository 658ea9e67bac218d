/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-ids.c: a job's node ids and their secrets' hashes in the job table
 * (rdzvd-job-ids.h). */
#include "daemon/job/rdzvd-job-ids.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SECRET_KEY_PREFIX "sec/"
#define IDS_KEY_PREFIX "ids/"
#define SECRET_KEY_MAX (sizeof(SECRET_KEY_PREFIX) + 2 * (RDZV_ID_MAX + 1))

/* "sec/" run_id NUL node_id into key: its length. */
static size_t secret_key(const char *run_id, const char *node_id, char key[SECRET_KEY_MAX])
{
    size_t a = strlen(SECRET_KEY_PREFIX), b = strlen(run_id), c = strlen(node_id);

    memcpy(key, SECRET_KEY_PREFIX, a);
    memcpy(key + a, run_id, b + 1);
    memcpy(key + a + b + 1, node_id, c);
    return a + b + 1 + c;
}

static size_t ids_key(const char *run_id, char *key, size_t len)
{
    return (size_t)snprintf(key, len, IDS_KEY_PREFIX "%s", run_id);
}

int rdzvd_job_secret_hash_get(struct rdzvd_store *t, const char *run_id, const char *node_id,
                              char hash[RDZVD_SECRET_HASH_HEX + 1])
{
    char key[SECRET_KEY_MAX];
    const uint8_t *val;
    size_t vlen;

    if (strlen(run_id) > RDZV_ID_MAX || strlen(node_id) > RDZV_ID_MAX ||
        rdzvd_store_get(t, key, secret_key(run_id, node_id, key), &val, &vlen) < 0 ||
        vlen != RDZVD_SECRET_HASH_HEX)
        return -ENOENT;
    memcpy(hash, val, RDZVD_SECRET_HASH_HEX);
    hash[RDZVD_SECRET_HASH_HEX] = '\0';
    return 0;
}

size_t rdzvd_job_ids_bytes_max = RDZVD_JOB_IDS_BYTES_MAX;

int rdzvd_job_ids_admit(struct rdzvd_store *t, const char *run_id,
                        const struct rdzvd_job_record_admitted *a)
{
    char key[SECRET_KEY_MAX], ikey[sizeof(IDS_KEY_PREFIX) + RDZV_ID_MAX + 1];
    size_t klen = secret_key(run_id, a->node_id, key), iklen = ids_key(run_id, ikey, sizeof(ikey));
    const uint8_t *val;
    size_t vlen = 0;
    int r;

    if (rdzvd_store_get(t, key, klen, &val, &vlen) == 0)
        return -EEXIST; /* a node's secret is never replaced */
    if (rdzvd_store_get(t, ikey, iklen, &val, &vlen) < 0)
        vlen = 0;
    if (vlen + strlen(a->node_id) + 1 > rdzvd_job_ids_bytes_max)
        return -ENOSPC;
    r = rdzvd_store_append(t, ikey, iklen, a->node_id, strlen(a->node_id) + 1);
    /* A failure here leaves a node id listed without a hash: unknown, as if never admitted. */
    return r < 0 ? r : rdzvd_store_set(t, key, klen, a->hash, RDZVD_SECRET_HASH_HEX);
}

int rdzvd_job_ids_forget(struct rdzvd_store *t, const char *run_id, const char *only)
{
    char key[SECRET_KEY_MAX], ikey[sizeof(IDS_KEY_PREFIX) + RDZV_ID_MAX + 1];
    size_t iklen = ids_key(run_id, ikey, sizeof(ikey));
    const uint8_t *val;
    size_t vlen, off = 0;
    bool found = false;
    char *ids;
    int r;

    if (rdzvd_store_get(t, ikey, iklen, &val, &vlen) < 0)
        return 1;
    if (!(ids = malloc(vlen + 1)))
        return -ENOMEM;
    memcpy(ids, val, vlen);
    ids[vlen] = '\0';
    while (off < vlen && !found) {
        size_t n = strnlen(ids + off, vlen - off);

        if (n <= RDZV_ID_MAX && (!only || strcmp(ids + off, only) == 0)) {
            size_t len = n + (off + n < vlen); /* with its NUL, unless cut short at the end */

            ids[off + n] = '\0';
            (void)rdzvd_store_delete(t, key, secret_key(run_id, ids + off, key));
            if ((found = only != NULL)) { /* the others stay, in their order */
                memmove(ids + off, ids + off + len, vlen - off - len);
                vlen -= len;
            }
        }
        off += found ? 0 : n + 1;
    }
    r = only && !found ? 1
        : only && vlen ? rdzvd_store_set(t, ikey, iklen, ids, vlen)
                       : (rdzvd_store_delete(t, ikey, iklen) < 0 ? -EIO : 0);
    free(ids);
    return r < 0 ? r : r > 0;
}

/* The stored list of run_id's node ids: 0, or -ENOENT (none). */
static int ids_val(struct rdzvd_store *t, const char *run_id, const uint8_t **val, size_t *vlen)
{
    char ikey[sizeof(IDS_KEY_PREFIX) + RDZV_ID_MAX + 1];

    if (strlen(run_id) > RDZV_ID_MAX ||
        rdzvd_store_get(t, ikey, ids_key(run_id, ikey, sizeof(ikey)), val, vlen) < 0)
        return -ENOENT;
    return 0;
}

int rdzvd_job_ids_get(struct rdzvd_store *t, const char *run_id, char **ids, size_t *len)
{
    const uint8_t *val;
    size_t vlen;

    *ids = NULL;
    *len = 0;
    if (ids_val(t, run_id, &val, &vlen) < 0)
        return 0;
    if (!(*ids = malloc(vlen + 1)))
        return -ENOMEM;
    memcpy(*ids, val, vlen);
    (*ids)[vlen] = '\0';
    *len = vlen;
    return 0;
}

size_t rdzvd_job_ids_len(struct rdzvd_store *t, const char *run_id)
{
    const uint8_t *val;
    size_t vlen;

    return ids_val(t, run_id, &val, &vlen) < 0 ? 0 : vlen;
}

bool rdzvd_job_admitted_valid(const struct rdzvd_job_record_admitted *a, bool admitted)
{
    return a->node_id[0] && strnlen(a->node_id, sizeof(a->node_id)) <= RDZV_ID_MAX &&
           (!admitted || (strnlen(a->hash, sizeof(a->hash)) == RDZVD_SECRET_HASH_HEX &&
                          strspn(a->hash, "0123456789abcdef") == RDZVD_SECRET_HASH_HEX));
}

json_t *rdzvd_job_admitted_json(const char *run_id, const struct rdzvd_job_record_admitted *a,
                                bool admitted)
{
    return admitted ? json_pack("{s:s, s:s, s:s, s:i}", "run_id", run_id, "node_id", a->node_id,
                                "hash", a->hash, "v", 1)
                    : json_pack("{s:s, s:s}", "run_id", run_id, "node_id", a->node_id);
}

int rdzvd_job_admitted_from_json(json_t *o, bool admitted, struct rdzvd_job_record_admitted *a)
{
    const char *node, *hash = "";
    int v = 1;

    /* "v": the form of the hash (1: HMAC-SHA256 of the hex secret, rdzvd-job-identity.h); a
     * later form is not this rdzvd's to apply. FORGOTTEN names the node id only. */
    if (json_unpack(o, admitted ? "{s:s, s:s, s:i}" : "{s:s}", "node_id", &node, "hash", &hash,
                    "v", &v) < 0 ||
        v != 1 || strlen(node) > RDZV_ID_MAX ||
        strlen(hash) != (admitted ? RDZVD_SECRET_HASH_HEX : 0))
        return -EBADMSG;
    snprintf(a->node_id, sizeof(a->node_id), "%s", node);
    memcpy(a->hash, hash, strlen(hash) + 1);
    return rdzvd_job_admitted_valid(a, admitted) ? 0 : -EBADMSG;
}
