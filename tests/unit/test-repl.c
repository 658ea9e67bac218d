/* SPDX-License-Identifier: Apache-2.0 */
/* test-repl.c: the store replicated through Raft (daemon/repl/rdzvd-repl.h), on libraft's in-memory
 * fixture (raft/fixture.h: a whole cluster, a controllable clock, crashes and partitions, no
 * sockets, deterministic). Each replica's state machine is a real rdzvd store.
 *   - writes acknowledged by a leader survive its crash: the new leader has every one, and after
 *     the old one is revived all stores are equal (a lagging replica gets a snapshot);
 *   - a leader cut off from the majority commits nothing: its writes are never acknowledged, the
 *     majority goes on, and after the partition heals there is one history;
 *   - the job table (a replica's jobs' records) goes through the same log and snapshots, apart
 *     from the clients' keys: a new leader reads the record the old one committed;
 *   - a job's decisions are log entries that every replica applies with the same function: the
 *     same record everywhere, a decision that would take a job back refused everywhere. */
#include <errno.h>
#include <inttypes.h>
#include <raft.h>
#include <raft/fixture.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tap.h"
#include "common/rdzv-buf.h"
#include "daemon/job/rdzvd-job-record.h"
#include "daemon/job/rdzvd-job-journals.h"
#include "daemon/data/rdzvd-record.h"
#include "daemon/repl/rdzvd-repl.h"
#include "daemon/repl/rdzvd-replica.h"
#include "daemon/data/rdzvd-store.h"

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
        rdzvd_store_set_decision_fn(c->jobs[i], rdzvd_decision_apply, NULL); /* as rdzvd's */
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
    ASSERT_TRUE(raft_fixture_step_until_applied(
        &c.f, N, raft_last_index(raft_fixture_get(&c.f, now)), T_STEP));
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
    ASSERT_TRUE(raft_fixture_step_until_applied(
        &c.f, N, raft_last_index(raft_fixture_get(&c.f, now)), T_STEP));
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

/* Submit the records in b (freed) as one entry on server i (which believes it leads). */
static void submit_records(struct cluster *c, unsigned i, struct write *w, struct rdzv_buf *b)
{
    struct raft_buffer buf;

    memset(w, 0, sizeof(*w));
    w->req.data = w;
    ASSERT_OK(rdzvd_repl_batch(&buf, 0, rdzv_buf_head(b), rdzv_buf_avail(b)));
    rdzv_buf_free(b);
    if (raft_apply(raft_fixture_get(&c->f, i), &w->req, &buf, 1, write_cb) != 0) {
        raft_free(buf.base);
        w->status = RAFT_NOTLEADER;
        w->done = true;
    }
}

/* Submit rec (put; or del when gen is 0) of the job table on server i, as one entry with a
 * clients' SET of the same key: the two tables must not mix. */
static void submit_job(struct cluster *c, unsigned i, struct write *w, const char *run_id,
                       uint64_t gen, int64_t restarts)
{
    /* The generation's nodes by node rank, the second one's id naming the generation. */
    struct rdzvd_job_record_node nodes[2] = {{"node-a", 1}, {"", 3}};
    struct rdzvd_job_record rec = {.min = 1, .max = 2, .max_restarts = 3, .generation = gen,
                                   .restart_count = restarts, .running = true, .nnodes = 2,
                                   .world_size = 4, .store_port = 29500, .nodes = nodes};
    struct rdzvd_store *scratch;
    struct rdzv_buf b = {0};
    char key[64];
    uint8_t h[RDZVD_RECORD_HDR_LEN];

    snprintf(rec.run_id, sizeof(rec.run_id), "%s", run_id);
    snprintf(nodes[1].node_id, sizeof(nodes[1].node_id), "node-gen-%" PRIu64, gen);
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
    rdzvd_store_free(scratch);
    submit_records(c, i, w, &b);
}

/* Submit a decision on server i, as rdzvd_job_decide makes it: the one record a table's change
 * hook is told (the decision, not the record it makes). */
static void submit_decision(struct cluster *c, unsigned i, struct write *w,
                            enum rdzvd_decision_kind kind, const struct rdzvd_job_record *rec)
{
    struct rdzvd_store *scratch;
    struct rdzv_buf b = {0};
    struct rdzvd_record r;

    ASSERT_OK(rdzvd_store_new(&lim, wake, &scratch));
    if (kind == RDZVD_DECIDE_ENDED)
        ASSERT_OK(rdzvd_job_record_put(scratch, rec)); /* an end of no record records nothing */
    rdzvd_store_set_change_cb(scratch, jobs_change_cb, &b);
    ASSERT_OK(rdzvd_job_decide(scratch, kind, rec));
    ASSERT_EQ(rdzvd_record_decode(rdzv_buf_head(&b), rdzv_buf_avail(&b), &r, NULL),
              (ssize_t)rdzv_buf_avail(&b));
    ASSERT_TRUE(r.table == RDZVD_TABLE_JOBS && r.what == RDZVD_CHANGE_DECISION);
    rdzvd_store_free(scratch);
    submit_records(c, i, w, &b);
}

/* A job's decisions go through the log, and every replica folds them into the same record with
 * the same function (rdzvd_decision_apply, which the deciding rdzvd runs too): a generation
 * formed, a restart charged, the next generation formed. A decision that would take the job back
 * (generation 1 formed again, a restart count below the record's) is refused by every replica
 * alike and changes nothing, and the leader hears -ESTALE. The next leader holds the fold, and
 * its decision of the job's end removes the record on every replica. */
static void test_job_decisions(void)
{
    struct rdzvd_job_record_node nodes[2] = {{"node-a", 1}, {"node-b", 3}};
    struct rdzvd_job_record rec1 = {.min = 1, .max = 2, .max_restarts = 3, .generation = 1,
                                    .running = true, .nnodes = 2, .world_size = 4,
                                    .store_port = 29500, .nodes = nodes};
    struct rdzvd_job_record stopped = {.min = 1, .max = 2, .max_restarts = 3, .generation = 1,
                                       .restart_count = 1};
    struct rdzvd_job_record rec2 = rec1, back = stopped, got;
    struct write w[6] = {0}, end[2] = {0};
    const int want[5] = {0, 0, -ESTALE, 0, -ESTALE};
    struct cluster c;
    unsigned l, now;

    snprintf(rec1.run_id, sizeof(rec1.run_id), "dj");
    snprintf(stopped.run_id, sizeof(stopped.run_id), "dj");
    rec2 = rec1;
    rec2.generation = 2;
    rec2.restart_count = 1;
    back = stopped;
    back.generation = 2; /* restart count 0 < 1 */
    back.restart_count = 0;
    cluster_start(&c, 0);
    l = raft_fixture_leader_index(&c.f);
    submit_decision(&c, l, &w[0], RDZVD_DECIDE_FORMED, &rec1);
    submit_decision(&c, l, &w[1], RDZVD_DECIDE_STOPPED, &stopped);
    submit_decision(&c, l, &w[2], RDZVD_DECIDE_FORMED, &rec1);
    snprintf(nodes[1].node_id, sizeof(nodes[1].node_id), "node-c"); /* rec2's second node */
    submit_decision(&c, l, &w[3], RDZVD_DECIDE_FORMED, &rec2);
    submit_decision(&c, l, &w[4], RDZVD_DECIDE_STOPPED, &back);
    ASSERT_TRUE(raft_fixture_step_until(&c.f, all_done, w, T_STEP));
    for (int k = 0; k < 5; k++) {
        ASSERT_EQ(w[k].status, 0);
        ASSERT_EQ(w[k].result, want[k]);
    }
    ASSERT_TRUE(raft_fixture_step_until_applied(&c.f, N, raft_last_index(raft_fixture_get(&c.f, l)),
                                                T_STEP));
    for (unsigned i = 0; i < N; i++) {
        ASSERT_EQ(c.fsm[i].refused, 2);
        ASSERT_OK(rdzvd_job_record_get(c.jobs[i], "dj", &got));
        ASSERT_TRUE(got.generation == 2 && got.restart_count == 1 && got.running);
        ASSERT_NOT_NULL(got.nodes);
        ASSERT_BYTES_STR(got.nodes[1].node_id, strlen(got.nodes[1].node_id), "node-c");
        rdzvd_job_record_clear(&got);
    }
    raft_fixture_kill(&c.f, l);
    ASSERT_TRUE(raft_fixture_step_until_has_no_leader(&c.f, T_STEP));
    ASSERT_TRUE(raft_fixture_step_until_has_leader(&c.f, T_STEP));
    now = raft_fixture_leader_index(&c.f);
    barrier(&c, now);
    ASSERT_OK(rdzvd_job_record_get(c.jobs[now], "dj", &got));
    ASSERT_TRUE(got.generation == 2 && got.restart_count == 1 && got.running);
    rdzvd_job_record_clear(&got);
    submit_decision(&c, now, &end[0], RDZVD_DECIDE_ENDED, &rec2);
    ASSERT_TRUE(raft_fixture_step_until(&c.f, all_done, end, T_STEP));
    ASSERT_TRUE(end[0].status == 0 && end[0].result == 0);
    raft_fixture_revive(&c.f, l);
    ASSERT_TRUE(raft_fixture_step_until_applied(
        &c.f, N, raft_last_index(raft_fixture_get(&c.f, now)), T_STEP));
    for (unsigned i = 0; i < N; i++)
        ASSERT_EQ(rdzvd_job_record_get(c.jobs[i], "dj", &got), -ENOENT);
    cluster_stop(&c);
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
    /* The generation's membership is the new leader's too. */
    ASSERT_NOT_NULL(rec.nodes);
    ASSERT_BYTES_STR(rec.nodes[0].node_id, strlen(rec.nodes[0].node_id), "node-a");
    ASSERT_BYTES_STR(rec.nodes[1].node_id, strlen(rec.nodes[1].node_id), "node-gen-3");
    ASSERT_TRUE(rec.nodes[0].nproc == 1 && rec.nodes[1].nproc == 3);
    rdzvd_job_record_clear(&rec);
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
    ASSERT_TRUE(raft_fixture_step_until_applied(
        &c.f, N, raft_last_index(raft_fixture_get(&c.f, now)), T_STEP));
    ASSERT_TRUE(c.fsm[old].restores >= 1);
    assert_equal_stores(&c);
    for (unsigned i = 0; i < N; i++) {
        ASSERT_EQ(rdzvd_store_num_keys(c.jobs[i]), rdzvd_store_num_keys(c.jobs[now]));
        ASSERT_OK(rdzvd_job_record_get(c.jobs[i], "train-a", &rec));
        ASSERT_EQ(rec.generation, 21 + 3); /* its last put: k = 21 */
        ASSERT_NOT_NULL(rec.nodes);
        ASSERT_BYTES_STR(rec.nodes[1].node_id, strlen(rec.nodes[1].node_id), "node-gen-24");
        rdzvd_job_record_clear(&rec);
    }
    ASSERT_EQ(rdzvd_job_record_get(c.jobs[old], "job-0", &rec), -ENOENT); /* k = 20: a del */
    cluster_stop(&c);
    free(w);
}

/* ---- the state machine's callbacks on bad input, called as libraft calls them ---- */

/* A batch entry of origin made of the records of the given changes (table, what, key, val),
 * raft_malloc'd as rdzvd proposes it. */
struct rec {
    enum rdzvd_table table;
    enum rdzvd_change what;
    const char *key, *val;
};

static struct raft_buffer batch_of(uint64_t origin, const struct rec *r, size_t n,
                                   const void *tail, size_t tlen)
{
    struct rdzv_buf b = {0};
    struct raft_buffer buf;

    for (size_t i = 0; i < n; i++) {
        uint8_t h[RDZVD_RECORD_HDR_LEN];
        size_t vlen = r[i].val ? strlen(r[i].val) : 0;

        ASSERT_OK(rdzvd_record_header_in(h, r[i].table, r[i].what, (const uint8_t *)r[i].key,
                                         strlen(r[i].key), (const uint8_t *)r[i].val, vlen));
        ASSERT_OK(rdzv_buf_put(&b, h, sizeof(h)));
        ASSERT_OK(rdzv_buf_put(&b, r[i].key, strlen(r[i].key)));
        if (vlen)
            ASSERT_OK(rdzv_buf_put(&b, r[i].val, vlen));
    }
    if (tlen)
        ASSERT_OK(rdzv_buf_put(&b, tail, tlen));
    ASSERT_OK(rdzvd_repl_batch(&buf, origin, rdzv_buf_head(&b), rdzv_buf_avail(&b)));
    ASSERT_EQ(buf.len % 8, 0);
    rdzv_buf_free(&b);
    return buf;
}

static int fsm_apply(struct rdzvd_repl_fsm *f, struct raft_buffer *buf, int *result)
{
    void *res = (void *)(intptr_t)12345;
    int r = f->fsm.apply(&f->fsm, buf, &res);

    if (r == 0)
        *result = rdzvd_repl_result(res);
    raft_free(buf->base); /* libraft owns an entry's buffer */
    return r;
}

/* Entries that are not whole records are refused (RAFT_MALFORMED), never half-read past their
 * end; an entry of this process's own origin is not applied twice; records of the job table on a
 * replica without one are refused as a limit is, and the rest of the entry still applies. */
static void test_fsm_bad_entries(void)
{
    static const uint8_t junk[] = "not a record, not padding";
    static const uint8_t zeros9[9] = {0};
    struct rdzvd_store *s;
    struct rdzvd_repl_fsm f;
    struct raft_buffer buf;
    int result = 0;

    ASSERT_OK(rdzvd_store_new(&lim, wake, &s));
    rdzvd_repl_fsm_init(&f, s, NULL);
    f.origin = 42;

    /* Shorter than an origin. */
    buf.base = raft_calloc(1, 8);
    buf.len = 4;
    ASSERT_EQ(fsm_apply(&f, &buf, &result), RAFT_MALFORMED);
    ASSERT_EQ(f.applied, 0);

    /* An empty batch: applied, nothing changes. */
    buf = batch_of(7, NULL, 0, NULL, 0);
    ASSERT_EQ(buf.len, 8);
    ASSERT_OK(fsm_apply(&f, &buf, &result));
    ASSERT_EQ(result, 0);
    ASSERT_TRUE(f.applied == 1 && f.records == 0);

    /* Our own origin: skipped, the store is not changed again. */
    {
        const struct rec r[] = {{RDZVD_TABLE_STORE, RDZVD_CHANGE_SET, "mine", "1", }};

        buf = batch_of(42, r, 1, NULL, 0);
        ASSERT_OK(fsm_apply(&f, &buf, &result));
        ASSERT_TRUE(f.skipped == 1 && f.applied == 2 && f.records == 0);
        ASSERT_FALSE(rdzvd_store_exists(s, "mine", 4));
    }
    /* Origin 0 is nobody's: applied even by a process whose origin would be 0. */
    {
        const struct rec r[] = {{RDZVD_TABLE_STORE, RDZVD_CHANGE_SET, "zero", "z"}};
        struct rdzvd_repl_fsm g;

        rdzvd_repl_fsm_init(&g, s, NULL);
        buf = batch_of(0, r, 1, NULL, 0);
        ASSERT_OK(fsm_apply(&g, &buf, &result));
        ASSERT_TRUE(g.skipped == 0 && g.records == 1 && has(s, "zero", "z"));
    }
    /* Junk after a good record: malformed, and applying is over (the change hook is live). */
    {
        const struct rec r[] = {{RDZVD_TABLE_STORE, RDZVD_CHANGE_SET, "a", "1"}};

        buf = batch_of(7, r, 1, junk, sizeof(junk) - 1);
        ASSERT_EQ(fsm_apply(&f, &buf, &result), RAFT_MALFORMED);
        ASSERT_FALSE(f.applying);
        ASSERT_EQ(f.applied, 2);
    }
    /* More than 8 zero bytes are not padding but a torn record. */
    buf = batch_of(7, NULL, 0, zeros9, sizeof(zeros9));
    ASSERT_EQ(fsm_apply(&f, &buf, &result), RAFT_MALFORMED);
    /* A corrupt record (its CRC no longer matches). */
    {
        const struct rec r[] = {{RDZVD_TABLE_STORE, RDZVD_CHANGE_SET, "crc", "x"}};

        buf = batch_of(7, r, 1, NULL, 0);
        ((uint8_t *)buf.base)[RDZVD_REPL_ORIGIN_LEN + RDZVD_RECORD_HDR_LEN] ^= 0xff;
        ASSERT_EQ(fsm_apply(&f, &buf, &result), RAFT_MALFORMED);
        ASSERT_FALSE(rdzvd_store_exists(s, "crc", 3));
    }
    /* A job record on a replica without a job table: refused (-ENOENT, the first error), the
     * SET after it still applies; a value past the store's limit is refused too but is not the
     * first error. */
    {
        static char big[5000];
        const struct rec r[] = {{RDZVD_TABLE_JOBS, RDZVD_CHANGE_SET, "job", "rec"},
                                {RDZVD_TABLE_STORE, RDZVD_CHANGE_SET, "big", big},
                                {RDZVD_TABLE_STORE, RDZVD_CHANGE_SET, "after", "ok"}};
        uint64_t refused = f.refused;

        memset(big, 'x', sizeof(big) - 1);

        buf = batch_of(7, r, 3, NULL, 0);
        ASSERT_OK(fsm_apply(&f, &buf, &result));
        ASSERT_EQ(result, -ENOENT);
        ASSERT_EQ(f.refused, refused + 2);
        ASSERT_TRUE(has(s, "after", "ok"));
        ASSERT_FALSE(rdzvd_store_exists(s, "job", 3));
        ASSERT_FALSE(rdzvd_store_exists(s, "big", 3));
    }
    /* A job's decision is the job table's: one marked as the clients' store's is refused
     * (-EINVAL) and writes no key there; a decision record without a value is malformed. */
    {
        const struct rec r[] = {
            {RDZVD_TABLE_STORE, RDZVD_CHANGE_DECISION, "job/x",
             "{\"decision\":\"ended\",\"run_id\":\"x\"}"},
            {RDZVD_TABLE_STORE, RDZVD_CHANGE_SET, "after2", "ok"}};
        const struct rec empty[] = {{RDZVD_TABLE_JOBS, RDZVD_CHANGE_DECISION, "job/x", NULL}};

        buf = batch_of(7, r, 2, NULL, 0);
        ASSERT_OK(fsm_apply(&f, &buf, &result));
        ASSERT_EQ(result, -EINVAL);
        ASSERT_FALSE(rdzvd_store_exists(s, "job/x", 5));
        ASSERT_TRUE(has(s, "after2", "ok"));
        buf = batch_of(7, empty, 1, NULL, 0);
        ASSERT_EQ(fsm_apply(&f, &buf, &result), RAFT_MALFORMED);
    }
    /* Lengths the record format cannot hold (never read: refused before). */
    ASSERT_EQ(rdzvd_repl_entry(&buf, RDZVD_CHANGE_SET, "k", (size_t)UINT32_MAX + 1, "v", 1),
              -EMSGSIZE);
    ASSERT_EQ(rdzvd_repl_entry(&buf, RDZVD_CHANGE_SET, "k", 1, "v", (size_t)UINT32_MAX + 1),
              -EMSGSIZE);
    /* A DELETE has no value: the entry is the header and key, padded. */
    ASSERT_OK(rdzvd_repl_entry(&buf, RDZVD_CHANGE_DELETE, "after", 5, NULL, 0));
    ASSERT_EQ(buf.len, 8 + 24);
    ASSERT_OK(fsm_apply(&f, &buf, &result));
    ASSERT_FALSE(rdzvd_store_exists(s, "after", 5));
    rdzvd_store_free(s);
}

/* A snapshot is refused while the store is ahead of the log; one taken holds the store (without
 * a job table too) and, restored elsewhere, replaces what was there. A snapshot that is not whole
 * records is refused and its buffer left to libraft, which frees it then (raft/src/replication.c
 * installSnapshotCb, start.c: a restore that fails must not free it too). A snapshot larger than
 * a replica's limits is restored as far as it fits. */
static void test_fsm_snapshot_restore(void)
{
    static const struct rdzv_limits small = {
        .max_key_len = 256, .max_value_len = 4, .max_keys_per_req = 16, .max_frame = 1 << 20,
        .max_outbuf = 1 << 20, .max_conns = 16, .max_store_bytes = 1 << 24, .max_wait_keys = 64,
        .max_queue_items = 1024};
    struct rdzvd_store *a, *b, *c;
    struct rdzvd_repl_fsm fa, fb, fc;
    struct raft_buffer *bufs = NULL, copy;
    unsigned n = 0;

    ASSERT_OK(rdzvd_store_new(&lim, wake, &a));
    ASSERT_OK(rdzvd_store_new(&lim, wake, &b));
    ASSERT_OK(rdzvd_store_new(&small, wake, &c));
    rdzvd_repl_fsm_init(&fa, a, NULL);
    rdzvd_repl_fsm_init(&fb, b, NULL);
    rdzvd_repl_fsm_init(&fc, c, NULL);
    ASSERT_OK(rdzvd_store_set(a, "k", 1, "long value", 10));
    ASSERT_OK(rdzvd_store_set(a, "e", 1, "", 0));
    ASSERT_OK(rdzvd_store_queue_push(a, "q", 1, "i1", 2));
    ASSERT_OK(rdzvd_store_queue_push(a, "q", 1, "i2", 2));
    ASSERT_OK(rdzvd_store_set(b, "old", 3, "gone", 4));
    ASSERT_OK(rdzvd_store_queue_push(b, "oldq", 4, "x", 1));

    fa.local_ahead = true;
    ASSERT_EQ(fa.fsm.snapshot(&fa.fsm, &bufs, &n), RAFT_BUSY);
    ASSERT_EQ(n, 0);
    fa.local_ahead = false;
    ASSERT_OK(fa.fsm.snapshot(&fa.fsm, &bufs, &n));
    ASSERT_TRUE(n == 1 && bufs[0].len % 8 == 0 && bufs[0].len > 0);

    /* Restored on b: b's own keys and queue are gone, a's are there. */
    copy.len = bufs[0].len;
    copy.base = raft_malloc(copy.len);
    ASSERT_NOT_NULL(copy.base);
    memcpy(copy.base, bufs[0].base, copy.len);
    ASSERT_OK(fb.fsm.restore(&fb.fsm, &copy)); /* takes copy.base */
    ASSERT_EQ(fb.restores, 1);
    ASSERT_FALSE(fb.applying);
    ASSERT_TRUE(has(b, "k", "long value") && has(b, "e", ""));
    ASSERT_FALSE(rdzvd_store_exists(b, "old", 3));
    ASSERT_FALSE(rdzvd_store_exists(b, "oldq", 4));
    {
        struct content x, y;

        content_of(a, &x);
        content_of(b, &y);
        ASSERT_EQ(x.n, y.n);
        for (size_t i = 0; i < x.n; i++)
            ASSERT_TRUE(x.e[i].what == y.e[i].what && x.e[i].vlen == y.e[i].vlen &&
                        memcmp(x.e[i].val, y.e[i].val, x.e[i].vlen) == 0);
        content_free(&x);
        content_free(&y);
    }

    /* On a replica whose values may be 4 bytes: the long one is refused, the rest restored. */
    copy.base = raft_malloc(bufs[0].len);
    ASSERT_NOT_NULL(copy.base);
    memcpy(copy.base, bufs[0].base, bufs[0].len);
    ASSERT_OK(fc.fsm.restore(&fc.fsm, &copy));
    ASSERT_TRUE(fc.refused >= 1);
    ASSERT_FALSE(rdzvd_store_exists(c, "k", 1));
    ASSERT_TRUE(has(c, "e", ""));

    /* Corrupt: refused; the buffer is still the caller's (libraft frees it: no double free). */
    copy.len = bufs[0].len;
    copy.base = raft_malloc(copy.len);
    ASSERT_NOT_NULL(copy.base);
    memset(copy.base, 0xa5, copy.len);
    ASSERT_EQ(fb.fsm.restore(&fb.fsm, &copy), RAFT_MALFORMED);
    ASSERT_FALSE(fb.applying);
    raft_free(copy.base); /* as libraft does after a failed restore */

    ASSERT_OK(fa.fsm.snapshot_finalize(&fa.fsm, &bufs, &n));
    ASSERT_TRUE(bufs == NULL && n == 0);
    rdzvd_store_free(a);
    rdzvd_store_free(b);
    rdzvd_store_free(c);
}

/* ---- --peers ---- */

#define ASSERT_STREQ(a, b) ASSERT_TRUE(strcmp((a), (b)) == 0)

static void peers_bad(const char *list, unsigned self_id, uint16_t port, const char *words)
{
    struct rdzvd_peers p;
    char err[256] = "";

    snprintf(tap_note, sizeof(tap_note), "--peers '%.200s'", list);
    ASSERT_EQ(rdzvd_peers_parse(list, self_id, port, &p, err, sizeof(err)), -EINVAL);
    if (!strstr(err, words))
        fprintf(stderr, "# got: %s\n", err);
    ASSERT_NOT_NULL(strstr(err, words));
    ASSERT_NULL(strchr(err, '\n'));
    tap_note[0] = '\0';
}

/* Every mistake in --peers is refused with a one-line reason; good lists give each replica its
 * endpoint and its Raft link (PORT + 1, numeric, IPv6 in brackets) and find this one. */
static void test_peers_parse(void)
{
    struct rdzvd_peers p;
    char err[256], big[RDZVD_REPLICAS_MAX * RDZVD_ENDPOINT_LEN + 8], host[RDZVD_ENDPOINT_LEN + 8];

    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    peers_bad(big, 1, 0, "too long");
    memset(host, 'h', sizeof(host) - 8);
    snprintf(host + sizeof(host) - 8, 8, ":7001");
    peers_bad(host, 1, 0, "is not HOST:PORT");
    peers_bad("127.0.0.1:1,127.0.0.1:3,127.0.0.1:5,127.0.0.1:7,127.0.0.1:9,127.0.0.1:11,"
              "127.0.0.1:13,127.0.0.1:15", 1, 0, "at most 7 replicas");
    peers_bad("", 1, 0, "no replica listed");
    peers_bad(",,,", 1, 0, "no replica listed");
    peers_bad("127.0.0.1", 1, 0, "is not HOST:PORT");
    peers_bad(":7001", 1, 0, "is not HOST:PORT");
    peers_bad("127.0.0.1:", 1, 0, "the port must be 1..65534");
    peers_bad("127.0.0.1:0", 1, 0, "the port must be 1..65534");
    peers_bad("127.0.0.1:65535", 1, 0, "the port must be 1..65534");
    peers_bad("127.0.0.1:70x", 1, 0, "the port must be 1..65534");
    peers_bad("127.0.0.1:99999999999999999999999", 1, 0, "the port must be 1..65534");
    peers_bad("[]:7001", 1, 0, "cannot resolve ''");
    /* An IPv6 address takes brackets, as everywhere else HOST:PORT is read; so does a port given
     * as nothing but digits. */
    peers_bad("::1:7001", 1, 0, "'::1:7001' is not HOST:PORT");
    peers_bad("127.0.0.1:+7001", 1, 0, "the port must be 1..65534");
    peers_bad("127.0.0.1:7001,127.0.0.1:7001", 1, 0, "'127.0.0.1:7001' is listed twice");
    peers_bad("127.0.0.1:7001,127.0.0.1:7003", 3, 0, "--replica-id 3: --peers lists 2");
    peers_bad("127.0.0.1:7001,127.0.0.1:7003", 0, 7999, "no entry is this machine with port 7999");
    peers_bad("127.0.0.1:7001,127.0.0.2:7001", 0, 7001, "more than one entry is this machine");
    /* Not this machine's: documentation addresses (RFC 5737, RFC 3849). */
    peers_bad("192.0.2.1:7001,[2001:db8::1]:7001", 0, 7001, "no entry is this machine");

    ASSERT_OK(rdzvd_peers_parse("192.0.2.1:7001,127.0.0.1:7003,[::1]:7005,[2001:db8::1]:7007", 0,
                                7003, &p, err, sizeof(err)));
    ASSERT_TRUE(p.n == 4 && p.self == 1);
    ASSERT_STREQ(p.endpoint[0], "192.0.2.1:7001");
    ASSERT_STREQ(p.raft[0], "192.0.2.1:7002");
    ASSERT_STREQ(p.raft[1], "127.0.0.1:7004");
    ASSERT_STREQ(p.endpoint[2], "[::1]:7005");
    ASSERT_STREQ(p.raft[2], "[::1]:7006");
    ASSERT_STREQ(p.raft[3], "[2001:db8::1]:7008");
    peers_bad("[::1]:7005,127.0.0.1:7005", 0, 7005, "more than one entry is this machine");
    /* --replica-id picks the entry whatever the host. */
    ASSERT_OK(rdzvd_peers_parse("192.0.2.1:7001,192.0.2.2:7001", 2, 0, &p, err, sizeof(err)));
    ASSERT_TRUE(p.n == 2 && p.self == 1);
}

int main(void)
{
    TEST(test_leader_crash);
    TEST(test_partition);
    TEST(test_refusal_is_replicated);
    TEST(test_job_table);
    TEST(test_job_decisions);
    TEST(test_fsm_bad_entries);
    TEST(test_fsm_snapshot_restore);
    TEST(test_peers_parse);
    return tap_done();
}
