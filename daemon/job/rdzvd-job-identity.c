/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-identity.c: a member's identity (rdzvd-job-identity.h): its secret, and a job's
 * members by node id (chained hash, doubling). */
#include "daemon/job/rdzvd-job-identity.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-auth.h"
#include "common/rdzv-util.h"
#include "daemon/job/rdzvd-job-impl.h"

/* ---- secrets ---- */

int rdzvd_member_secret_new(char out[RDZV_SECRET_HEX + 1])
{
    uint8_t rnd[RDZV_SECRET_HEX / 2];

    if (rdzv_random_bytes(rnd, sizeof(rnd)) < 0)
        return -EIO;
    rdzv_hex(rnd, sizeof(rnd), out);
    explicit_bzero(rnd, sizeof(rnd));
    return 0;
}

int rdzvd_member_secret_hash(const char *secret, char out[RDZVD_SECRET_HASH_HEX + 1])
{
    uint8_t mac[RDZV_MAC_BYTES];

    if (rdzv_hmac_sha256((const uint8_t *)RDZVD_SECRET_HASH_KEY, strlen(RDZVD_SECRET_HASH_KEY),
                         (const uint8_t *)secret, strlen(secret), mac) < 0)
        return -EIO;
    rdzv_hex(mac, sizeof(mac), out);
    return 0;
}

bool rdzvd_member_secret_proves(const char *given, const char *hash)
{
    char h[RDZVD_SECRET_HASH_HEX + 1];

    if (strlen(given) != RDZV_SECRET_HEX || rdzvd_member_secret_hash(given, h) < 0)
        return false;
    return rdzv_auth_equal((const uint8_t *)h, (const uint8_t *)hash, RDZVD_SECRET_HASH_HEX);
}

bool rdzvd_member_secret_equal(const char *given, const char *secret)
{
    return given[0] &&
           rdzv_auth_equal((const uint8_t *)given, (const uint8_t *)secret, RDZV_SECRET_HEX);
}

/* ---- members by node id ---- */

#define INDEX_BUCKETS_MIN 64

int rdzvd_member_index_init(struct rdzvd_member_index *idx)
{
    idx->nbuckets = INDEX_BUCKETS_MIN;
    idx->n = 0;
    idx->seed = rdzv_random_u64();
    idx->buckets = calloc(idx->nbuckets, sizeof(*idx->buckets));
    return idx->buckets ? 0 : -ENOMEM;
}

void rdzvd_member_index_free(struct rdzvd_member_index *idx)
{
    free(idx->buckets);
    idx->buckets = NULL;
}

static struct rdzvd_member **id_slot(const struct rdzvd_member_index *idx, const char *node_id)
{
    uint64_t h = rdzv_hash64(idx->seed, node_id, strlen(node_id));

    return &idx->buckets[h & (idx->nbuckets - 1)];
}

struct rdzvd_member *rdzvd_member_index_find(const struct rdzvd_member_index *idx,
                                             const char *node_id)
{
    for (struct rdzvd_member *m = *id_slot(idx, node_id); m; m = m->id_next)
        if (strcmp(m->join.node_id, node_id) == 0)
            return m;
    return NULL;
}

/* Index m by node id, doubling the table past one member per bucket. */
int rdzvd_member_index_add(struct rdzvd_member_index *idx, struct rdzvd_member *m)
{
    struct rdzvd_member **pp;

    if (idx->n >= idx->nbuckets) {
        size_t nb = idx->nbuckets * 2;
        struct rdzvd_member **old = idx->buckets, **b = calloc(nb, sizeof(*b));
        size_t ob = idx->nbuckets;

        if (!b)
            return -ENOMEM;
        idx->buckets = b;
        idx->nbuckets = nb;
        for (size_t i = 0; i < ob; i++)
            while (old[i]) {
                struct rdzvd_member *o = old[i];

                old[i] = o->id_next;
                pp = id_slot(idx, o->join.node_id);
                o->id_next = *pp;
                *pp = o;
            }
        free(old);
    }
    pp = id_slot(idx, m->join.node_id);
    m->id_next = *pp;
    *pp = m;
    idx->n++;
    return 0;
}

void rdzvd_member_index_del(struct rdzvd_member_index *idx, struct rdzvd_member *m)
{
    struct rdzvd_member **pp;

    for (pp = id_slot(idx, m->join.node_id); *pp; pp = &(*pp)->id_next)
        if (*pp == m) {
            *pp = m->id_next;
            idx->n--;
            return;
        }
}
