/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-persist.c: what else of a job outlives memory: its node ids and their secrets'
 * hashes (rdzvd-job-ids.h), its members' identities (rdzvd-job-identity.h), how ended jobs
 * ended (rdzvd-job-ends.h), and the generation stores with their journals
 * (rdzvd-job-journals.h). */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "daemon/job/rdzvd-job-record.h"
#include "daemon/job/rdzvd-job-ids.h"
#include "daemon/job/rdzvd-job-identity.h"
#include "common/rdzv-auth.h"
#include "daemon/job/rdzvd-job-ends.h"
#include "daemon/job/rdzvd-job-journals.h"

/* The generation's store goes; its journal (--state-dir) too, unless rdzvd is shutting down or
 * the job goes back to its record: then the agents come back to the next rdzvd, or to this one,
 * which reopens it with its keys. An open under way is let go: its store closes when it comes
 * (rdzvd_job_store_opened), its journal too. The journal goes as an effect of the Ready. */
void rdzvd_job_drop_journal(struct rdzvd_job *j, uint64_t gen)
{
    char sname[RDZVD_JOB_NAME_MAX] = "";

    if (j->shutting_down || j->unloaded || j->host.state_dirfd < 0)
        return;
    rdzvd_job_store_journal_name(j, gen, sname, sizeof(sname));
    if (sname[0])
        rdzvd_job_journal_drop(j, gen, sname, false);
}

void rdzvd_job_close_store(struct rdzvd_job *j)
{
    if (j->store) {
        rdzvd_job_store_drop(j, j->store, !j->shutting_down && !j->unloaded);
        j->store = NULL;
    } else if (j->store_deferred_gen && !j->store_ask) {
        /* Never reopened, and its generation is over: its journal goes as its store's would. */
        rdzvd_job_drop_journal(j, j->store_deferred_gen);
    }
    j->store_ask = 0;
    j->store_deferred_gen = 0;
    j->store_addr[0] = '\0';
}

bool rdzvd_jobs_port_deferred(struct rdzv_list *jobs, uint16_t port)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, jobs)
    {
        const struct rdzvd_job *j = rdzv_container_of(pos, struct rdzvd_job, node);

        if (j->store_deferred_gen && j->store_port == port)
            return true;
    }
    return false;
}

int rdzvd_job_choose_store(struct rdzvd_job *j, const struct rdzvd_member *m0,
                           enum rdzvd_store_then then)
{
    if (j->host.agent_stores && m0 && m0->peer && m0->join.host_store)
        return 1;
    return rdzvd_job_open_store(j, 0, true, then);
}

int rdzvd_job_store_fallback(struct rdzvd_job *j)
{
    int r;

    if (j->store || j->store_addr[0])
        return 0;
    r = rdzvd_job_open_store(j, 0, true, STORE_THEN_ROUNDS);
    return r < 0 ? r : 1;
}

/* The journal name of generation gen's store: "job-<SHA-256 of run_id>-gen-<gen>"
 * (rdzvd_job_state_name), or "" when it cannot be computed (libcrypto missing). */
void rdzvd_job_store_journal_name(const struct rdzvd_job *j, uint64_t gen, char *buf, size_t len)
{
    (void)rdzvd_job_state_name(j->run_id, gen, buf, len);
}

/* The description and journal name (sname, "": none) of generation j->generation's store. fresh:
 * a new generation's store, which never replays what an earlier use of its journal name left on
 * disk (a round formed but never sent before rdzvd died, or an earlier job of the same run_id):
 * that journal goes, an effect queued before the store's open; otherwise the journal of the
 * generation is replayed (a rebuild after an rdzvd restart). 0, or -ENOMEM: no deletion queued
 * (the store is not asked for). */
static int store_names(struct rdzvd_job *j, bool fresh, char *desc, size_t dlen, char *sname,
                       size_t slen)
{
    snprintf(desc, dlen, "job %.24s gen %" PRIu64, j->run_id, j->generation);
    /* Without --state-dir there is no journal, and no name to hash (libcrypto stays unloaded). */
    if (j->host.state_dirfd >= 0) {
        rdzvd_job_store_journal_name(j, j->generation, sname, slen);
        if (!sname[0])
            log_warn("job=%s gen=%" PRIu64 " no journal for its store: cannot name it "
                     "(libcrypto missing?)",
                     j->run_id, j->generation);
    }
    return fresh && sname[0] ? rdzvd_job_journal_drop(j, j->generation, sname, true) : 0;
}

/* Generation j->generation's store on port (0: any), asked of the outbox: its answer comes back
 * as an input (rdzvd_job_store_opened), which goes on with then. 0 or a negative errno. */
int rdzvd_job_open_store(struct rdzvd_job *j, uint16_t port, bool fresh,
                         enum rdzvd_store_then then)
{
    char desc[64], sname[RDZVD_JOB_NAME_MAX] = "";
    uint64_t ask = j->store_asks + 1;
    int r;

    if ((r = store_names(j, fresh, desc, sizeof(desc), sname, sizeof(sname))) < 0 ||
        (r = rdzvd_job_store_ask(j, ask, desc, sname, port, fresh)) < 0)
        return r;
    j->store_asks = ask;
    j->store_ask = ask;
    j->store_then = then;
    return 0;
}

/* The same, within the step (a JOIN that rebuilds j waits for it: rdzvd_job_store_open_now). */
int rdzvd_job_open_store_now(struct rdzvd_job *j, uint16_t port)
{
    char desc[64], sname[RDZVD_JOB_NAME_MAX] = "";

    (void)store_names(j, false, desc, sizeof(desc), sname, sizeof(sname)); /* drops nothing */
    return rdzvd_job_store_open_now(j, desc, sname[0] ? sname : NULL, port, &j->store,
                                    &j->store_port);
}

/* -------------------------------------------------------------------------------------------- */
/* A job's node ids and their secrets' hashes in the job table
 * (rdzvd-job-ids.h). */

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

int rdzvd_job_ids_admit(struct rdzvd_store *t, const char *run_id,
                        const struct rdzvd_job_record_admitted *a, size_t ids_max)
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
    if (vlen + strlen(a->node_id) + 1 > ids_max)
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

/* -------------------------------------------------------------------------------------------- */
/* A member's identity (rdzvd-job-identity.h): its secret, and a job's
 * members by node id (chained hash, doubling). */

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
    struct rdzvd_member *o;

    if (!(o = m->twin))
        return false;
    m->twin = NULL;
    rdzvd_member_twin_text(m, o, buf, len);
    return true;
}

/* -------------------------------------------------------------------------------------------- */
/* How ended jobs ended, kept in the job table (rdzvd-job-ends.h, struct
 * rdzvd_job_end): written only from inside an ENDED decision's apply
 * (rdzvd-job-records.c), so the deciding rdzvd, a journal's replay and every replica's Raft apply
 * keep the same ones, and read when rdzvd starts or a replica leads (rdzvd_jobs_rebuild_one). */

#define END_KEY_PREFIX "end/"
#define ENDS_KEY "ends"
#define END_KEY_MAX (sizeof(END_KEY_PREFIX) + RDZV_ID_MAX + 1)

static size_t end_key(const char *run_id, char key[END_KEY_MAX])
{
    return (size_t)snprintf(key, END_KEY_MAX, END_KEY_PREFIX "%s", run_id);
}

void rdzvd_job_end_set(struct rdzvd_job_end *e, const char *run_id, const char *type,
                       int64_t exit_code, const char *summary, double ended_s, uint64_t gen,
                       int64_t restarts)
{
    memset(e, 0, sizeof(*e));
    snprintf(e->run_id, sizeof(e->run_id), "%s", run_id);
    snprintf(e->type, sizeof(e->type), "%s", type);
    snprintf(e->summary, sizeof(e->summary), "%s", summary);
    e->exit_code = exit_code;
    e->ended_s = ended_s;
    e->generation = gen;
    e->restart_count = restarts;
}

json_t *rdzvd_job_end_json(const struct rdzvd_job_end *e)
{
    return json_pack("{s:s, s:I, s:f, s:I, s:I, s:s}", "type", e->type, "exit_code",
                     (json_int_t)e->exit_code, "ended_s", e->ended_s, "generation",
                     (json_int_t)e->generation, "restarts", (json_int_t)e->restart_count,
                     "summary", e->summary);
}

int rdzvd_job_end_from_json(json_t *o, const char *run_id, struct rdzvd_job_end *e)
{
    const char *type, *summary;
    json_int_t code, gen, restarts;
    double ended_s;

    memset(e, 0, sizeof(*e));
    if (!o || json_unpack(o, "{s:s, s:I, s:F, s:I, s:I, s:s}", "type", &type, "exit_code", &code,
                          "ended_s", &ended_s, "generation", &gen, "restarts", &restarts,
                          "summary", &summary) < 0 ||
        (strcmp(type, "succeeded") && strcmp(type, "failed") && strcmp(type, "cancelled") &&
         strcmp(type, "abandoned")) ||
        strlen(summary) > RDZV_SUMMARY_MAX || strlen(run_id) > RDZV_ID_MAX || gen < 0 ||
        restarts < 0 || !(ended_s >= 0))
        return -EBADMSG;
    rdzvd_job_end_set(e, run_id, type, code, summary, ended_s, (uint64_t)gen, restarts);
    return 0;
}

/* The run ids listed under "ends" (NUL-terminated, oldest first) into a malloc'd copy (*ids,
 * *len; NULL and 0 when none). 0 or -ENOMEM. */
static int ends_list(struct rdzvd_store *t, char **ids, size_t *len)
{
    const uint8_t *val;
    size_t vlen;

    *ids = NULL;
    *len = 0;
    if (rdzvd_store_get(t, ENDS_KEY, strlen(ENDS_KEY), &val, &vlen) < 0 || vlen == 0)
        return 0;
    if (!(*ids = malloc(vlen + 1)))
        return -ENOMEM;
    memcpy(*ids, val, vlen);
    (*ids)[vlen] = '\0'; /* a last id cut short still ends */
    *len = vlen;
    return 0;
}

int rdzvd_job_end_keep(struct rdzvd_store *t, const struct rdzvd_job_end *e, unsigned kept)
{
    char key[END_KEY_MAX], *ids, *out = NULL, *text = NULL;
    json_t *o = rdzvd_job_end_json(e);
    size_t len, off, olen = 0, n = 0, drop;
    int r = -ENOMEM;

    if (!o || !(text = json_dumps(o, JSON_COMPACT)) || ends_list(t, &ids, &len) < 0)
        goto out;
    if (!(out = malloc(len + strlen(e->run_id) + 1))) {
        free(ids);
        goto out;
    }
    for (off = 0; off < len; off += strlen(ids + off) + 1) /* the others, in their order */
        if (strcmp(ids + off, e->run_id)) {
            memcpy(out + olen, ids + off, strlen(ids + off) + 1);
            olen += strlen(ids + off) + 1;
            n++;
        }
    memcpy(out + olen, e->run_id, strlen(e->run_id) + 1);
    olen += strlen(e->run_id) + 1;
    n++;
    /* Past the bound the oldest go, with their outcomes. */
    for (drop = 0; n > kept; n--) {
        (void)rdzvd_store_delete(t, key, end_key(out + drop, key));
        drop += strlen(out + drop) + 1;
    }
    free(ids);
    r = rdzvd_store_set(t, key, end_key(e->run_id, key), text, strlen(text));
    if (r >= 0)
        r = rdzvd_store_set(t, ENDS_KEY, strlen(ENDS_KEY), out + drop, olen - drop);
out:
    free(out);
    free(text);
    json_decref(o);
    return r < 0 ? r : 0;
}

int rdzvd_job_ends_foreach(struct rdzvd_store *t,
                           int (*fn)(const struct rdzvd_job_end *e, void *ud), void *ud)
{
    struct rdzvd_job_end e;
    char key[END_KEY_MAX], *ids;
    size_t len, off;
    int r = ends_list(t, &ids, &len);

    for (off = 0; r == 0 && off < len; off += strlen(ids + off) + 1) {
        const uint8_t *val;
        size_t vlen;
        json_t *o;

        if (strlen(ids + off) > RDZV_ID_MAX ||
            rdzvd_store_get(t, key, end_key(ids + off, key), &val, &vlen) < 0)
            continue;
        o = json_loadb((const char *)val, vlen, 0, NULL);
        if (rdzvd_job_end_from_json(o, ids + off, &e) == 0)
            r = fn(&e, ud);
        json_decref(o);
    }
    free(ids);
    return r;
}

/* -------------------------------------------------------------------------------------------- */
/* The generation stores' journal names (rdzvd-job-journals.h). */

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
