/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-identity.c: a member's identity (rdzvd-job-identity.h): its secret, and a job's
 * members by node id (chained hash, doubling). */
#include "daemon/job/rdzvd-job-identity.h"

#include <errno.h>
#include <stdio.h>
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

/* ---- members by node id, or by host ---- */

#define INDEX_BUCKETS_MIN 64

int rdzvd_member_index_init(struct rdzvd_member_index *idx, bool by_host)
{
    idx->nbuckets = INDEX_BUCKETS_MIN;
    idx->n = 0;
    idx->seed = rdzv_random_u64();
    idx->by_host = by_host;
    idx->buckets = calloc(idx->nbuckets, sizeof(*idx->buckets));
    return idx->buckets ? 0 : -ENOMEM;
}

void rdzvd_member_index_free(struct rdzvd_member_index *idx)
{
    free(idx->buckets);
    idx->buckets = NULL;
}

static const char *key_of(const struct rdzvd_member_index *idx, const struct rdzvd_member *m)
{
    return idx->by_host ? m->join.host : m->join.node_id;
}

static struct rdzvd_member **next_of(const struct rdzvd_member_index *idx, struct rdzvd_member *m)
{
    return idx->by_host ? &m->host_next : &m->id_next;
}

static struct rdzvd_member **slot(const struct rdzvd_member_index *idx, const char *key)
{
    uint64_t h = rdzv_hash64(idx->seed, key, strlen(key));

    return &idx->buckets[h & (idx->nbuckets - 1)];
}

struct rdzvd_member *rdzvd_member_index_find(const struct rdzvd_member_index *idx,
                                             const char *key)
{
    for (struct rdzvd_member *m = *slot(idx, key); m; m = *next_of(idx, m))
        if (strcmp(key_of(idx, m), key) == 0)
            return m;
    return NULL;
}

/* Index m, doubling the table past one member per bucket. */
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

                old[i] = *next_of(idx, o);
                pp = slot(idx, key_of(idx, o));
                *next_of(idx, o) = *pp;
                *pp = o;
            }
        free(old);
    }
    pp = slot(idx, key_of(idx, m));
    *next_of(idx, m) = *pp;
    *pp = m;
    idx->n++;
    return 0;
}

void rdzvd_member_index_del(struct rdzvd_member_index *idx, struct rdzvd_member *m)
{
    struct rdzvd_member **pp;

    for (pp = slot(idx, key_of(idx, m)); *pp; pp = next_of(idx, *pp))
        if (*pp == m) {
            *pp = *next_of(idx, m);
            idx->n--;
            return;
        }
}

int rdzvd_job_index_init(struct rdzvd_job *j)
{
    int r = rdzvd_member_index_init(&j->by_id, false);

    return r < 0 ? r : rdzvd_member_index_init(&j->by_host, true);
}

void rdzvd_job_index_free(struct rdzvd_job *j)
{
    rdzvd_member_index_free(&j->by_id);
    rdzvd_member_index_free(&j->by_host);
}

int rdzvd_member_index(struct rdzvd_member *m)
{
    struct rdzvd_job *j = m->job;
    int r = rdzvd_member_index_add(&j->by_id, m);

    struct rdzvd_member *first;

    /* Not the first of its name: counted by the first, and its twin once the JOIN is taken
     * (rdzvd-job-join.c). */
    if (r < 0)
        return r;
    rdzv_list_init(&m->same_host);
    if ((first = rdzvd_member_index_find(&j->by_host, m->join.host))) {
        rdzv_list_add_tail(&first->same_host, &m->same_host);
        return 0;
    }
    if ((r = rdzvd_member_index_add(&j->by_host, m)) < 0)
        rdzvd_member_index_del(&j->by_id, m);
    m->host_indexed = r == 0;
    return r;
}

void rdzvd_member_unindex(struct rdzvd_member *m)
{
    struct rdzvd_job *j = m->job;
    struct rdzvd_member *first, *o;

    rdzvd_member_index_del(&j->by_id, m);
    if (!m->host_indexed) {
        first = rdzvd_member_index_find(&j->by_host, m->join.host);
        if (first && first->twin == m)
            first->twin = NULL;
    } else {
        rdzvd_member_index_del(&j->by_host, m);
        m->host_indexed = false;
        /* The next member under its name takes its place (the index has room: m's went). */
        if (!rdzv_list_empty(&m->same_host)) {
            o = rdzv_container_of(m->same_host.next, struct rdzvd_member, same_host);
            o->host_indexed = rdzvd_member_index_add(&j->by_host, o) == 0;
        }
    }
    rdzv_list_del(&m->same_host);
}

void rdzvd_member_twin_text(const struct rdzvd_member *m, const struct rdzvd_member *o, char *buf,
                            size_t len)
{
    /* Cut at the end only, on a character: each name is whole JSON text (UTF-8). */
    snprintf(buf, len,
             "another agent of job %s runs on this host under the same name, %s (node id %s): "
             "logs and verdicts cannot tell the two apart, and putting one aside puts both "
             "aside. If that is meant, give each agent its own --host (--host %s-0, --host "
             "%s-1, ...); if not, another run uses --rdzv-id %s here",
             m->job->run_id, m->join.host, o->join.node_id, m->join.host, m->join.host,
             m->job->run_id);
    rdzv_utf8_trim(buf);
}

bool rdzvd_member_twin_warning(struct rdzvd_member *m, char *buf, size_t len)
{
    RDZVD_JOB_STEP;
    struct rdzvd_member *o;

    if (!(o = m->twin))
        return false;
    m->twin = NULL;
    rdzvd_member_twin_text(m, o, buf, len);
    return true;
}
