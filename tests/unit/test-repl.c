/* SPDX-License-Identifier: Apache-2.0 */
/* test-repl.c: the store replicated through Raft (daemon/rdzvd-repl.h), on libraft's in-memory
 * fixture (raft/fixture.h: a whole cluster, a controllable clock, crashes and partitions, no
 * sockets, deterministic). Each replica's state machine is a real rdzvd store.
 *   - writes acknowledged by a leader survive its crash: the new leader has every one, and after
 *     the old one is revived all stores are equal (a lagging replica gets a snapshot);
 *   - a leader cut off from the majority commits nothing: its writes are never acknowledged, the
 *     majority goes on, and after the partition heals there is one history;
 *   - the job table (a replica's jobs' records) goes through the same log and snapshots, apart
 *     from the clients' keys: a new leader reads the record the old one committed. */
#include <errno.h>
#include <raft.h>
#include <raft/fixture.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tap.h"
#include "../../common/rdzv-buf.h"
#include "rdzvd-job-record.h"
#include "rdzvd-record.h"
#include "rdzvd-repl.h"
#include "rdzvd-store.h"

#define N 3
#define T_STEP 10000 /* ms of fixture time any one wait may take */

static const struct rdzv_limits lim = {
    .max_key_len = 256,
    .max_value_len = 4096,
    .max_keys_per_req = 16,
    .max_frame = 1 << 20,
    .max_outbuf = 1 << 20,
    .max_conns = 16,
    .max_store_bytes = 1 << 24,
    .max_wait_keys = 64,
    .max_queue_items = 1024,
};

struct cluster {
    struct raft_fixture f;
    struct rdzvd_store *store[N];
    struct rdzvd_store *jobs[N]; /* each replica's job table */
    struct rdzvd_repl_fsm fsm[N];
};

/* One write through the leader, and what its callback said. */
struct write {
    struct raft_apply req;
    int status; /* raft's: 0 once committed and applied on the leader */
    int result; /* the store's, on the leader */
    bool done;
};

static void wake(struct rdzvd_waiter *w, void *ud)
{
    (void)w;
    (void)ud;
}

static void cluster_start(struct cluster *c, unsigned snapshot_threshold)
{
    struct raft_configuration conf;

    memset(c, 0, sizeof(*c));
    ASSERT_OK(raft_fixture_initialize(&c->f));
    for (unsigned i = 0; i < N; i++) {
        ASSERT_OK(rdzvd_store_new(&lim, wake, &c->store[i]));
        ASSERT_OK(rdzvd_store_new(&lim, wake, &c->jobs[i]));
        rdzvd_repl_fsm_init(&c->fsm[i], c->store[i], c->jobs[i]);
        ASSERT_OK(raft_fixture_grow(&c->f, &c->fsm[i].fsm));
        if (snapshot_threshold) {
            raft_set_snapshot_threshold(raft_fixture_get(&c->f, i), snapshot_threshold);
            raft_set_snapshot_trailing(raft_fixture_get(&c->f, i), 2);
        }
    }
    ASSERT_OK(raft_fixture_configuration(&c->f, N, &conf));
    ASSERT_OK(raft_fixture_bootstrap(&c->f, &conf));
    raft_configuration_close(&conf);
    ASSERT_OK(raft_fixture_start(&c->f));
    ASSERT_TRUE(raft_fixture_step_until_has_leader(&c->f, T_STEP));
}

static void cluster_stop(struct cluster *c)
{
    raft_fixture_close(&c->f);
    for (unsigned i = 0; i < N; i++) {
        rdzvd_store_free(c->store[i]);
        rdzvd_store_free(c->jobs[i]);
    }
}

static void write_cb(struct raft_apply *req, int status, void *result)
{
    struct write *w = req->data;

    w->status = status;
    w->result = status == 0 ? rdzvd_repl_result(result) : 0;
    w->done = true;
}

/* Submit one record on server i (which believes it leads). */
static void submit(struct cluster *c, unsigned i, struct write *w, enum rdzvd_change what,
                   const char *key, const char *val)
{
    struct raft_buffer buf;

    memset(w, 0, sizeof(*w));
    w->req.data = w;
    ASSERT_OK(rdzvd_repl_entry(&buf, what, key, strlen(key), val, val ? strlen(val) : 0));
    if (raft_apply(raft_fixture_get(&c->f, i), &w->req, &buf, 1, write_cb) != 0) {
        raft_free(buf.base);
        w->status = RAFT_NOTLEADER;
        w->done = true;
    }
}

static void barrier_cb(struct raft_barrier *req, int status)
{
    *(int *)req->data = status == 0 ? 1 : -1;
}

/* A new leader serves reads only after a barrier: until an entry of its own term commits, it may
 * not have applied entries the old leader acknowledged (Raft, section 8). */
static bool barrier_done(struct raft_fixture *f, void *arg)
{
    (void)f;
    return *(int *)arg != 0;
}

static void barrier(struct cluster *c, unsigned i)
{
    struct raft_barrier req = {0};
    int done = 0;

    req.data = &done;
    ASSERT_OK(raft_barrier(raft_fixture_get(&c->f, i), &req, barrier_cb));
    ASSERT_TRUE(raft_fixture_step_until(&c->f, barrier_done, &done, T_STEP));
    ASSERT_EQ(done, 1);
}

static bool all_done(struct raft_fixture *f, void *arg)
{
    struct write *w = arg;

    (void)f;
    for (; w->req.data; w++)
        if (!w->done)
            return false;
    return true;
}

/* A store's content in a canonical order (the dump follows its hash table, whose order depends
 * on history): one entry per record, sorted by type and key, a queue's items in queue order. */
struct entry {
    uint8_t what;
    char *key, *val;
    size_t klen, vlen, seq;
};

struct content {
    struct entry *e;
    size_t n, cap;
};

static char *dup_bytes(const uint8_t *p, size_t n)
{
    char *d = malloc(n + 1);

    ASSERT_NOT_NULL(d);
    if (n)
        memcpy(d, p, n);
    d[n] = '\0';
    return d;
}

static int collect_cb(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                      const uint8_t *val, size_t vlen)
{
    struct content *c = ud;

    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->e = realloc(c->e, c->cap * sizeof(*c->e));
        ASSERT_NOT_NULL(c->e);
    }
    c->e[c->n] = (struct entry){.what = (uint8_t)what, .key = dup_bytes(key, klen),
                                .klen = klen, .val = dup_bytes(val, vlen), .vlen = vlen,
                                .seq = c->n};
    c->n++;
    return 0;
}

static int entry_cmp(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    size_t m = x->klen < y->klen ? x->klen : y->klen;
    int r;

    if (x->what != y->what)
        return x->what < y->what ? -1 : 1;
    if ((r = memcmp(x->key, y->key, m)) != 0)
        return r;
    if (x->klen != y->klen)
        return x->klen < y->klen ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void content_of(struct rdzvd_store *s, struct content *c)
{
    memset(c, 0, sizeof(*c));
    ASSERT_OK(rdzvd_store_dump(s, collect_cb, c));
    qsort(c->e, c->n, sizeof(*c->e), entry_cmp);
}

static void content_free(struct content *c)
{
    for (size_t i = 0; i < c->n; i++) {
        free(c->e[i].key);
        free(c->e[i].val);
    }
    free(c->e);
}

static void assert_equal_stores(struct cluster *c)
{
    struct content d[N];

    for (unsigned i = 0; i < N; i++)
        content_of(c->store[i], &d[i]);
    for (unsigned i = 1; i < N; i++) {
        ASSERT_EQ(rdzvd_store_num_keys(c->store[i]), rdzvd_store_num_keys(c->store[0]));
        ASSERT_EQ(d[i].n, d[0].n);
        for (size_t k = 0; k < d[0].n; k++) {
            ASSERT_EQ(d[i].e[k].what, d[0].e[k].what);
            ASSERT_TRUE(d[i].e[k].klen == d[0].e[k].klen && d[i].e[k].vlen == d[0].e[k].vlen);
            ASSERT_MEMEQ(d[i].e[k].key, d[0].e[k].key, d[0].e[k].klen);
            ASSERT_MEMEQ(d[i].e[k].val, d[0].e[k].val, d[0].e[k].vlen);
        }
    }
    for (unsigned i = 0; i < N; i++)
        content_free(&d[i]);
}

static bool has(struct rdzvd_store *s, const char *key, const char *val)
{
    const uint8_t *v;
    size_t vlen;

    return rdzvd_store_get(s, key, strlen(key), &v, &vlen) == 0 && vlen == strlen(val) &&
           memcmp(v, val, vlen) == 0;
}

/* Acknowledged writes survive the leader's crash; the revived one catches up (by snapshot). */
static void test_leader_crash(void)
{
    enum { W1 = 40, W2 = 40 };
    struct cluster c;
    struct write *w = calloc(W1 + W2 + 1, sizeof(*w));
    char key[32], val[32];
    unsigned old, now;

    ASSERT_NOT_NULL(w);
    cluster_start(&c, 16);
    old = raft_fixture_leader_index(&c.f);
    for (unsigned k = 0; k < W1; k++) {
        snprintf(key, sizeof(key), "k%u", k);
        snprintf(val, sizeof(val), "v%u", k);
        submit(&c, old, &w[k], RDZVD_CHANGE_SET, key, val);
    }
    ASSERT_TRUE(raft_fixture_step_until(&c.f, all_done, w, T_STEP));
    for (unsigned k = 0; k < W1; k++)
        ASSERT_TRUE(w[k].status == 0 && w[k].result == 0);
    raft_fixture_kill(&c.f, old);
    ASSERT_TRUE(raft_fixture_step_until_has_no_leader(&c.f, T_STEP));
    ASSERT_TRUE(raft_fixture_step_until_has_leader(&c.f, T_STEP));
    now = raft_fixture_leader_index(&c.f);
    ASSERT_NE(now, old);
    barrier(&c, now);
    /* Every write the old leader acknowledged is on the new one. */
    for (unsigned k = 0; k < W1; k++) {
        snprintf(key, sizeof(key), "k%u", k);
        snprintf(val, sizeof(val), "v%u", k);
        ASSERT_TRUE(has(c.store[now], key, val));
    }
    /* More writes of every kind while the old leader is down (past the snapshot threshold). */
    for (unsigned k = 0; k < W2; k++) {
        snprintf(key, sizeof(key), "k%u", k);
        snprintf(val, sizeof(val), "w%u", k);
        if (k % 4 == 0)
            submit(&c, now, &w[W1 + k], RDZVD_CHANGE_DELETE, key, NULL);
        else if (k % 4 == 1)
            submit(&c, now, &w[W1 + k], RDZVD_CHANGE_QPUSH, "q", val);
        else if (k % 4 == 2)
            submit(&c, now, &w[W1 + k], RDZVD_CHANGE_QPOP, "q", NULL);
        else
            submit(&c, now, &w[W1 + k], RDZVD_CHANGE_SET, key, val);
    }
    ASSERT_TRUE(raft_fixture_step_until(&c.f, all_done, w, T_STEP));
    for (unsigned k = 0; k < W2; k++)
        ASSERT_EQ(w[W1 + k].status, 0);
    raft_fixture_revive(&c.f, old);
    ASSERT_TRUE(raft_fixture_step_until_applied(&c.f, N, raft_last_index(raft_fixture_get(&c.f, now)),
                                                T_STEP));
    assert_equal_stores(&c);
    ASSERT_TRUE(!has(c.store[old], "k0", "v0") && has(c.store[old], "k3", "w3") &&
                has(c.store[old], "k5", "v5"));
    /* The old leader missed more than the snapshot threshold: it was sent a snapshot. */
    ASSERT_TRUE(c.fsm[old].restores >= 1);
    cluster_stop(&c);
    free(w);
}

struct other_leader {
    unsigned not; /* the server cut off */
    unsigned found;
};

/* A server other than o->not leads (the fixture's own leader detection waits for the cut-off
 * one too, which never hears of it). */
static bool other_leads(struct raft_fixture *f, void *arg)
{
    struct other_leader *o = arg;

    for (unsigned i = 0; i < N; i++)
        if (i != o->not && raft_state(raft_fixture_get(f, i)) == RAFT_LEADER) {
            o->found = i;
            return true;
        }
    return false;
}

/* A leader cut off from both followers acknowledges nothing; the majority elects another and
 * goes on; healed, the cut-off one drops what it alone had and holds the majority's history. */
static void test_partition(void)
{
    struct cluster c;
    struct write lone[2], maj[2];
    unsigned old, now;

    memset(lone, 0, sizeof(lone));
    memset(maj, 0, sizeof(maj));

    cluster_start(&c, 0);
    old = raft_fixture_leader_index(&c.f);
    for (unsigned i = 0; i < N; i++)
        if (i != old) {
            raft_fixture_disconnect(&c.f, old, i);
            raft_fixture_disconnect(&c.f, i, old);
        }
    submit(&c, old, &lone[0], RDZVD_CHANGE_SET, "split", "minority");
    /* The majority side elects a leader of its own. */
    struct other_leader o = {.not = old};
    ASSERT_TRUE(raft_fixture_step_until(&c.f, other_leads, &o, T_STEP));
    now = o.found;
    ASSERT_NE(now, old);
    submit(&c, now, &maj[0], RDZVD_CHANGE_SET, "split", "majority");
    ASSERT_TRUE(raft_fixture_step_until(&c.f, all_done, maj, T_STEP));
    ASSERT_EQ(maj[0].status, 0);
    /* Never acknowledged as committed on the minority side. */
    ASSERT_TRUE(!lone[0].done || lone[0].status != 0);
    ASSERT_FALSE(has(c.store[old], "split", "minority"));
    for (unsigned i = 0; i < N; i++)
        if (i != old) {
            raft_fixture_reconnect(&c.f, old, i);
            raft_fixture_reconnect(&c.f, i, old);
        }
    ASSERT_TRUE(raft_fixture_step_until_applied(&c.f, N, raft_last_index(raft_fixture_get(&c.f, now)),
                                                T_STEP));
    assert_equal_stores(&c);
    ASSERT_TRUE(has(c.store[old], "split", "majority"));
    ASSERT_TRUE(!lone[0].done || lone[0].status != 0);
    cluster_stop(&c);
}

/* What the store refuses (past its limits) is refused on every replica alike, and the leader's
 * writer is told. */
static void test_refusal_is_replicated(void)
{
    struct cluster c;
    struct write w[2];
    char big[5000];
    unsigned l;

    memset(w, 0, sizeof(w));
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    cluster_start(&c, 0);
    l = raft_fixture_leader_index(&c.f);
    submit(&c, l, &w[0], RDZVD_CHANGE_SET, "big", big);
    ASSERT_TRUE(raft_fixture_step_until(&c.f, all_done, w, T_STEP));
    ASSERT_EQ(w[0].status, 0);
    ASSERT_TRUE(w[0].result < 0);
    ASSERT_TRUE(raft_fixture_step_until_applied(&c.f, N, raft_last_index(raft_fixture_get(&c.f, l)),
                                                T_STEP));
    for (unsigned i = 0; i < N; i++) {
        ASSERT_EQ(c.fsm[i].refused, 1);
        ASSERT_FALSE(rdzvd_store_exists(c.store[i], "big", 3));
    }
    cluster_stop(&c);
}

/* The records a leader's job table change makes (as rdzvd-replica.c captures them). */
static void jobs_change_cb(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                           const uint8_t *val, size_t vlen)
{
    struct rdzv_buf *b = ud;
    uint8_t h[RDZVD_RECORD_HDR_LEN];

    ASSERT_OK(rdzvd_record_header_in(h, RDZVD_TABLE_JOBS, what, key, klen, val, vlen));
    ASSERT_OK(rdzv_buf_put(b, h, sizeof(h)));
    ASSERT_OK(rdzv_buf_put(b, key, klen));
    if (vlen)
        ASSERT_OK(rdzv_buf_put(b, val, vlen));
}

/* Submit rec (put; or del when gen is 0) of the job table on server i, as one entry with a
 * clients' SET of the same key: the two tables must not mix. */
static void submit_job(struct cluster *c, unsigned i, struct write *w, const char *run_id,
                       uint64_t gen, int64_t restarts)
{
    struct rdzvd_job_record rec = {.min = 1, .max = 2, .max_restarts = 3, .generation = gen,
                                   .restart_count = restarts, .running = true, .nnodes = 2,
                                   .world_size = 4, .store_port = 29500};
    struct rdzvd_store *scratch;
    struct rdzv_buf b = {0};
    struct raft_buffer buf;
    char key[64];
    uint8_t h[RDZVD_RECORD_HDR_LEN];

    snprintf(rec.run_id, sizeof(rec.run_id), "%s", run_id);
    ASSERT_OK(rdzvd_store_new(&lim, wake, &scratch));
    if (!gen) {
        ASSERT_OK(rdzvd_job_record_put(scratch, &rec)); /* so that the del below changes it */
        rdzvd_store_set_change_cb(scratch, jobs_change_cb, &b);
        ASSERT_OK(rdzvd_job_record_del(scratch, run_id));
    } else {
        rdzvd_store_set_change_cb(scratch, jobs_change_cb, &b);
        ASSERT_OK(rdzvd_job_record_put(scratch, &rec));
    }
    snprintf(key, sizeof(key), "job/%s", run_id);
    ASSERT_OK(rdzvd_record_header(h, RDZVD_CHANGE_SET, (const uint8_t *)key, strlen(key),
                                  (const uint8_t *)"client", 6));
    ASSERT_OK(rdzv_buf_put(&b, h, sizeof(h)));
    ASSERT_OK(rdzv_buf_put(&b, key, strlen(key)));
    ASSERT_OK(rdzv_buf_put(&b, "client", 6));
    memset(w, 0, sizeof(*w));
    w->req.data = w;
    ASSERT_OK(rdzvd_repl_batch(&buf, 0, rdzv_buf_head(&b), rdzv_buf_avail(&b)));
    rdzv_buf_free(&b);
    rdzvd_store_free(scratch);
    if (raft_apply(raft_fixture_get(&c->f, i), &w->req, &buf, 1, write_cb) != 0) {
        raft_free(buf.base);
        w->status = RAFT_NOTLEADER;
        w->done = true;
    }
}

/* The job table goes through the log and through snapshots, apart from the clients' keys: the
 * next leader reads the generation and restart count the old one committed. */
static void test_job_table(void)
{
    enum { W = 24 };
    struct cluster c;
    struct write *w = calloc(W + 1, sizeof(*w));
    struct rdzvd_job_record rec;
    char id[32];
    unsigned old, now;

    ASSERT_NOT_NULL(w);
    cluster_start(&c, 8);
    old = raft_fixture_leader_index(&c.f);
    submit_job(&c, old, &w[0], "train-a", 3, 2);
    ASSERT_TRUE(raft_fixture_step_until(&c.f, all_done, w, T_STEP));
    ASSERT_TRUE(w[0].status == 0 && w[0].result == 0);
    raft_fixture_kill(&c.f, old);
    ASSERT_TRUE(raft_fixture_step_until_has_no_leader(&c.f, T_STEP));
    ASSERT_TRUE(raft_fixture_step_until_has_leader(&c.f, T_STEP));
    now = raft_fixture_leader_index(&c.f);
    barrier(&c, now);
    ASSERT_OK(rdzvd_job_record_get(c.jobs[now], "train-a", &rec));
    ASSERT_TRUE(rec.generation == 3 && rec.restart_count == 2 && rec.running);
    ASSERT_EQ(rdzvd_store_num_keys(c.jobs[now]), 1);
    /* The clients' key of the same name is the clients' alone. */
    ASSERT_TRUE(has(c.store[now], "job/train-a", "client"));
    /* Past the snapshot threshold while the old leader is down: jobs come and go. */
    for (unsigned k = 1; k < W; k++) {
        snprintf(id, sizeof(id), "job-%u", k % 5);
        submit_job(&c, now, &w[k], k % 3 == 0 ? "train-a" : id, k % 4 == 0 ? 0 : k + 3, 2);
    }
    ASSERT_TRUE(raft_fixture_step_until(&c.f, all_done, w, T_STEP));
    raft_fixture_revive(&c.f, old);
    ASSERT_TRUE(raft_fixture_step_until_applied(&c.f, N, raft_last_index(raft_fixture_get(&c.f, now)),
                                                T_STEP));
    ASSERT_TRUE(c.fsm[old].restores >= 1);
    assert_equal_stores(&c);
    for (unsigned i = 0; i < N; i++) {
        ASSERT_EQ(rdzvd_store_num_keys(c.jobs[i]), rdzvd_store_num_keys(c.jobs[now]));
        ASSERT_OK(rdzvd_job_record_get(c.jobs[i], "train-a", &rec));
        ASSERT_EQ(rec.generation, 21 + 3); /* its last put: k = 21 */
    }
    ASSERT_EQ(rdzvd_job_record_get(c.jobs[old], "job-0", &rec), -ENOENT); /* k = 20: a del */
    cluster_stop(&c);
    free(w);
}

int main(void)
{
    TEST(test_leader_crash);
    TEST(test_partition);
    TEST(test_refusal_is_replicated);
    TEST(test_job_table);
    return tap_done();
}
