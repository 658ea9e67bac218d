/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-record.c: a job's record (daemon/job/rdzvd-job-journals.h) in --state-dir and in a
 * replica's job table, and how the job state machine keeps it (daemon/job/rdzvd-job-records.c):
 * file names, round trips, malformed and planted records, file system errors, table errors. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "common/rdzv-list.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "../tap.h"
#include "daemon/job/rdzvd-job-record.h"
#include "daemon/job/rdzvd-job-journals.h"
#include "daemon/job/rdzvd-job-identity.h"
#include "daemon/job/rdzvd-job-sm.h"
#include "daemon/data/rdzvd-journal.h"
#include "daemon/data/rdzvd-record.h"
#include "daemon/data/rdzvd-store.h"
#include "jobtest.h"

static const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
#define HASH64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
static char dir[256];
static int dirfd_;

static void no_wake(struct rdzvd_waiter *w, void *ud)
{
    (void)w;
    (void)ud;
}

static struct rdzvd_store *new_store(const struct rdzv_limits *l)
{
    struct rdzvd_store *s = NULL;

    ASSERT_OK(rdzvd_store_new(l, no_wake, &s));
    rdzvd_store_set_decision_fn(s, rdzvd_decision_apply, NULL); /* a job table, as rdzvd's */
    return s;
}

static struct rdzvd_job_record rec_of(const char *run_id)
{
    struct rdzvd_job_record rec = {.min = 2,
                                   .max = 4,
                                   .max_restarts = 3,
                                   .generation = 7,
                                   .restart_count = 1,
                                   .running = true,
                                   .nnodes = 3,
                                   .world_size = 24,
                                   .store_port = 29500};

    snprintf(rec.run_id, sizeof(rec.run_id), "%s", run_id);
    return rec;
}

static void expect_same_record(const struct rdzvd_job_record *a, const struct rdzvd_job_record *b)
{
    ASSERT_BYTES_STR(a->run_id, strlen(a->run_id), b->run_id);
    ASSERT_EQ(a->min, b->min);
    ASSERT_EQ(a->max, b->max);
    ASSERT_EQ(a->max_restarts, b->max_restarts);
    ASSERT_EQ(a->generation, b->generation);
    ASSERT_EQ(a->restart_count, b->restart_count);
    ASSERT_EQ(a->running, b->running);
    ASSERT_EQ(a->nnodes, b->nnodes);
    ASSERT_EQ(a->world_size, b->world_size);
    ASSERT_EQ(a->store_port, b->store_port);
}

static bool exists(const char *name)
{
    return faccessat(dirfd_, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

/* ---- names ---- */

/* The generation stores' journal names are the keyed SHA-256 of the run id, in lower-case hex:
 * a value computed outside rdzvd (Python's hmac) pins the scheme, so a change of key or
 * encoding, which would make a restarted rdzvd lose the stores of an existing --state-dir,
 * fails here. */
static void test_names_pinned_and_distinct(void)
{
    static const char job_mac[] =
        "48085ab38835f5d554c3b1bb9875b74c2a34fcf90725cd3aa08a5d7f930fdfca";
    char sname[RDZVD_JOB_NAME_MAX], want[RDZVD_JOB_NAME_MAX], other[RDZVD_JOB_NAME_MAX];

    ASSERT_OK(rdzvd_job_state_name("job", 12, sname, sizeof(sname)));
    snprintf(want, sizeof(want), "job-%s-gen-12", job_mac);
    ASSERT_BYTES_STR(sname, strlen(sname), want);
    ASSERT_TRUE(rdzvd_state_name_valid(sname)); /* usable as a journal's name */
    /* Run ids that differ by one character, or by case, get different names. */
    ASSERT_OK(rdzvd_job_state_name("joc", 12, other, sizeof(other)));
    ASSERT_TRUE(strcmp(sname, other) != 0);
    ASSERT_OK(rdzvd_job_state_name("JOB", 12, other, sizeof(other)));
    ASSERT_TRUE(strcmp(sname, other) != 0);
    /* The longest generation still fits the documented buffer. */
    ASSERT_OK(rdzvd_job_state_name("job", UINT64_MAX, sname, sizeof(sname)));
    snprintf(want, sizeof(want), "job-%s-gen-%" PRIu64, job_mac, UINT64_MAX);
    ASSERT_BYTES_STR(sname, strlen(sname), want);
    ASSERT_TRUE(strlen(sname) < RDZVD_JOB_NAME_MAX);
}

/* ---- generation stores' journals in --state-dir ---- */

/* drop_journal is rdzvd_journal_unlink: a bad name is refused, a missing journal is fine, one
 * of this name goes, one naming another store stays. */
static void test_drop_journal(void)
{
    struct rdzvd_store *s = new_store(&lim);
    struct rdzvd_journal *j = NULL;
    char sname[RDZVD_JOB_NAME_MAX], file[RDZVD_JOB_NAME_MAX + 16];

    ASSERT_OK(rdzvd_job_state_name("dj", 3, sname, sizeof(sname)));
    snprintf(file, sizeof(file), "%s.journal", sname);
    ASSERT_EQ(rdzvd_job_record_drop_journal(dirfd_, "../escape"), -EINVAL);
    ASSERT_OK(rdzvd_job_record_drop_journal(dirfd_, sname));
    ASSERT_OK(rdzvd_journal_open(NULL, dirfd_, dir, sname, RDZVD_FSYNC_NO, s, &j));
    rdzvd_journal_close(j, false);
    ASSERT_TRUE(exists(file));
    ASSERT_OK(rdzvd_job_record_drop_journal(dirfd_, sname));
    ASSERT_FALSE(exists(file));
    rdzvd_store_free(s);
    s = new_store(&lim);
    ASSERT_OK(rdzvd_journal_open(NULL, dirfd_, dir, "someone-else", RDZVD_FSYNC_NO, s, &j));
    rdzvd_journal_close(j, false);
    ASSERT_OK(renameat(dirfd_, "someone-else.journal", dirfd_, file));
    ASSERT_EQ(rdzvd_job_record_drop_journal(dirfd_, sname), -EEXIST);
    ASSERT_TRUE(exists(file));
    ASSERT_OK(unlinkat(dirfd_, file, 0));
    rdzvd_store_free(s);
}

/* ---- the replicas' job table ---- */

/* put, get and del by run id, each record under its own key; absent ones are -ENOENT / 0. */
static void test_table_round_trip(void)
{
    struct rdzvd_store *t = new_store(&lim);
    struct rdzvd_job_record a = rec_of("ta"), b = rec_of("tb"), got;

    b.running = false;
    b.generation = 1;
    ASSERT_EQ(rdzvd_job_record_get(t, "ta", &got), -ENOENT);
    ASSERT_OK(rdzvd_job_record_put(t, &a));
    ASSERT_OK(rdzvd_job_record_put(t, &b));
    ASSERT_TRUE(rdzvd_store_exists(t, "job/ta", 6));
    ASSERT_OK(rdzvd_job_record_get(t, "ta", &got));
    expect_same_record(&got, &a);
    ASSERT_OK(rdzvd_job_record_get(t, "tb", &got));
    expect_same_record(&got, &b);
    a.generation = 9;
    ASSERT_OK(rdzvd_job_record_put(t, &a));
    ASSERT_OK(rdzvd_job_record_get(t, "ta", &got));
    ASSERT_EQ(got.generation, 9);
    ASSERT_EQ(rdzvd_job_record_del(t, "ta"), 0); /* exactly 0, as the header says */
    ASSERT_EQ(rdzvd_job_record_get(t, "ta", &got), -ENOENT);
    ASSERT_EQ(rdzvd_job_record_del(t, "ta"), 0); /* none: 0 too */
    ASSERT_OK(rdzvd_job_record_get(t, "tb", &got));
    rdzvd_store_free(t);
}

/* A record keeps the job's settings as put; one without them (an older rdzvd's) reads with
 * none; so does one whose settings this rdzvd does not take (out of a JOIN's bounds, or a value
 * it does not know): the rest of the record still counts. */
static void test_table_settings_round_trip(void)
{
    struct rdzvd_store *t = new_store(&lim);
    struct rdzvd_job_record a = rec_of("sa"), b = rec_of("sb"), got;
    static const char bad[] =
        "{\"run_id\":\"sx\",\"min\":1,\"max\":1,\"max_restarts\":0,\"generation\":1,"
        "\"restart_count\":0,\"running\":false,\"nnodes\":0,\"world_size\":0,"
        "\"store_port\":0,\"settings\":{\"last_call_ms\":0,\"heartbeat_timeout_ms\":5000,"
        "\"join_timeout_ms\":0,\"scale_up_now\":false,\"recovery\":\"sideways\","
        "\"bad_node_failures\":0,\"bad_node_window\":0,\"restart_backoff\":0,"
        "\"straggler_factor\":0,\"straggler_window_ms\":0,\"straggler_aside\":false}}";

    a.has_settings = true;
    a.settings = (struct rdzvd_job_settings){
        .last_call_ms = 2500, .heartbeat_timeout_ms = 8000, .join_timeout_ms = 120000,
        .scale_up_now = true, .inplace = true, .bad_node_failures = 3, .bad_node_window_s = 900,
        .restart_backoff_s = 30, .straggler_factor = 1.5, .straggler_window_ms = 60000,
        .straggler_aside = true};
    ASSERT_OK(rdzvd_job_record_put(t, &a));
    ASSERT_OK(rdzvd_job_record_put(t, &b));
    ASSERT_OK(rdzvd_job_record_get(t, "sa", &got));
    expect_same_record(&got, &a);
    ASSERT_TRUE(got.has_settings);
    ASSERT_EQ(got.settings.last_call_ms, 2500);
    ASSERT_EQ(got.settings.heartbeat_timeout_ms, 8000);
    ASSERT_EQ(got.settings.join_timeout_ms, 120000);
    ASSERT_TRUE(got.settings.scale_up_now && got.settings.inplace);
    ASSERT_EQ(got.settings.bad_node_failures, 3);
    ASSERT_EQ(got.settings.bad_node_window_s, 900);
    ASSERT_EQ(got.settings.restart_backoff_s, 30);
    ASSERT_TRUE(got.settings.straggler_factor == 1.5);
    ASSERT_EQ(got.settings.straggler_window_ms, 60000);
    ASSERT_TRUE(got.settings.straggler_aside);
    ASSERT_OK(rdzvd_job_record_get(t, "sb", &got));
    ASSERT_FALSE(got.has_settings);
    /* A decision that keeps the record (ASIDE: the history only) gives an older rdzvd's record
     * the job's settings, and never replaces those it has. */
    b.has_settings = true;
    b.settings = a.settings;
    b.running = false; /* as an ASIDE decision is made: of a generation's record, not running */
    b.nnodes = b.world_size = b.store_port = 0;
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_ASIDE, &b));
    ASSERT_OK(rdzvd_job_record_get(t, "sb", &got));
    ASSERT_TRUE(got.has_settings);
    ASSERT_EQ(got.settings.restart_backoff_s, 30);
    b.settings.restart_backoff_s = 7;
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_ASIDE, &b));
    ASSERT_OK(rdzvd_job_record_get(t, "sb", &got));
    ASSERT_EQ(got.settings.restart_backoff_s, 30);
    ASSERT_OK(rdzvd_store_set(t, "job/sx", 6, bad, strlen(bad)));
    ASSERT_OK(rdzvd_job_record_get(t, "sx", &got));
    ASSERT_FALSE(got.has_settings);
    ASSERT_EQ(got.generation, 1);
    a.settings.restart_backoff_s = RDZV_RESTART_BACKOFF_MAX + 1; /* past a JOIN's bound */
    ASSERT_OK(rdzvd_job_record_put(t, &a));
    ASSERT_OK(rdzvd_job_record_get(t, "sa", &got));
    ASSERT_FALSE(got.has_settings);
    ASSERT_EQ(got.generation, a.generation);
    rdzvd_job_record_clear(&got);
    rdzvd_store_free(t);
}

/* What is under job/<id> but is no record of <id>: not JSON, out of range, or another run id's
 * record, is -EBADMSG. */
static void test_table_rejects_bad_values(void)
{
    struct rdzvd_store *t = new_store(&lim);
    struct rdzvd_job_record other = rec_of("other"), got;
    static const char badrange[] =
        "{\"run_id\":\"tx\",\"min\":2,\"max\":1,\"max_restarts\":0,\"generation\":1,"
        "\"restart_count\":0,\"running\":false,\"nnodes\":0,\"world_size\":0,\"store_port\":0}";
    const uint8_t *val;
    size_t vlen;

    ASSERT_OK(rdzvd_store_set(t, "job/tx", 6, "{oops", 5));
    ASSERT_EQ(rdzvd_job_record_get(t, "tx", &got), -EBADMSG);
    ASSERT_OK(rdzvd_store_set(t, "job/tx", 6, badrange, strlen(badrange)));
    ASSERT_EQ(rdzvd_job_record_get(t, "tx", &got), -EBADMSG);
    ASSERT_OK(rdzvd_job_record_put(t, &other));
    ASSERT_OK(rdzvd_store_get(t, "job/other", 9, &val, &vlen));
    ASSERT_OK(rdzvd_store_set(t, "job/tx", 6, val, vlen));
    ASSERT_EQ(rdzvd_job_record_get(t, "tx", &got), -EBADMSG);
    rdzvd_store_free(t);
}

/* A running generation's record names its nodes by node rank and keeps its NCCL ids: they come
 * back as put; a record without them (an older rdzvd's) reads with none. */
static void test_table_nodes_and_ids_round_trip(void)
{
    struct rdzvd_store *t = new_store(&lim);
    struct rdzvd_job_record_node nodes[3] = {{"n-a", 8}, {"n-b", 8}, {"n-c", 8}};
    char ids[2][RDZV_NCCL_HEX_LEN + 1];
    struct rdzvd_job_record a = rec_of("ni"), got;

    memset(ids[0], 'a', RDZV_NCCL_HEX_LEN);
    memset(ids[1], '7', RDZV_NCCL_HEX_LEN);
    ids[0][RDZV_NCCL_HEX_LEN] = ids[1][RDZV_NCCL_HEX_LEN] = '\0';
    a.nodes = nodes;
    a.n_ids = 2;
    a.ids = ids;
    ASSERT_OK(rdzvd_job_record_put(t, &a));
    ASSERT_OK(rdzvd_job_record_get(t, "ni", &got));
    expect_same_record(&got, &a);
    ASSERT_NOT_NULL(got.nodes);
    for (int i = 0; i < 3; i++) {
        ASSERT_BYTES_STR(got.nodes[i].node_id, strlen(got.nodes[i].node_id), nodes[i].node_id);
        ASSERT_EQ(got.nodes[i].nproc, 8);
    }
    ASSERT_EQ(got.n_ids, 2);
    ASSERT_MEMEQ(got.ids[0], ids[0], RDZV_NCCL_HEX_LEN + 1);
    ASSERT_MEMEQ(got.ids[1], ids[1], RDZV_NCCL_HEX_LEN + 1);
    rdzvd_job_record_clear(&got);
    ASSERT_NULL(got.nodes);
    ASSERT_NULL(got.ids);
    ASSERT_EQ(got.n_ids, 0);
    a.nodes = NULL;
    a.n_ids = 0;
    ASSERT_OK(rdzvd_job_record_put(t, &a));
    ASSERT_OK(rdzvd_job_record_get(t, "ni", &got));
    ASSERT_NULL(got.nodes);
    ASSERT_NULL(got.ids);
    rdzvd_store_free(t);
}

/* put takes only nodes and ids that fit the record (one node per node rank, their workers the
 * world, ids of RDZV_NCCL_HEX_LEN hex digits, none of a generation that does not run), and get
 * reads anything else under the key as no record: -EINVAL, -EBADMSG, nothing kept. */
static void test_table_nodes_and_ids_checked(void)
{
    static const char *const bad[] = {
        "\"nodes\":[[\"x\",8],[\"y\",8]]",              /* 2 nodes for nnodes 3 */
        "\"nodes\":[[\"x\",8],[\"y\",8],[\"z\",9]]",  /* 25 workers for world 24 */
        "\"nodes\":[[\"x\",8],[\"y\",8],[\"z\",8,1]]", /* a third field */
        "\"nodes\":[[\"x\",8],[\"\",8],[\"z\",8]]",    /* an empty node id */
        "\"nodes\":{\"x\":8}",                           /* not an array */
        "\"ids\":[\"abc\"]",                             /* too short */
        "\"ids\":[7]",                                   /* not a string */
    };
    struct rdzvd_store *t = new_store(&lim);
    struct rdzvd_job_record_node nodes[3] = {{"x", 8}, {"y", 8}, {"z", 8}};
    char ids[1][RDZV_NCCL_HEX_LEN + 1];
    struct rdzvd_job_record a = rec_of("nc"), got;
    char text[1024];

    a.nodes = nodes;
    nodes[2].nproc = 7; /* 23 workers, world 24 */
    ASSERT_EQ(rdzvd_job_record_put(t, &a), -EINVAL);
    nodes[2].nproc = 8;
    a.running = false; /* nodes of a generation that does not run */
    ASSERT_EQ(rdzvd_job_record_put(t, &a), -EINVAL);
    a.running = true;
    memset(ids[0], 'g', RDZV_NCCL_HEX_LEN); /* not hex */
    ids[0][RDZV_NCCL_HEX_LEN] = '\0';
    a.ids = ids;
    a.n_ids = 1;
    ASSERT_EQ(rdzvd_job_record_put(t, &a), -EINVAL);
    a.n_ids = RDZV_MAX_NCCL_IDS + 1;
    ASSERT_EQ(rdzvd_job_record_put(t, &a), -EINVAL);
    ASSERT_EQ(rdzvd_job_record_get(t, "nc", &got), -ENOENT); /* nothing kept */
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        int n = snprintf(text, sizeof(text),
                         "{\"run_id\":\"nc\",\"min\":2,\"max\":4,\"max_restarts\":3,"
                         "\"generation\":7,\"restart_count\":1,\"running\":true,\"nnodes\":3,"
                         "\"world_size\":24,\"store_port\":29500,%s}",
                         bad[k]);

        ASSERT_OK(rdzvd_store_set(t, "job/nc", 6, text, (size_t)n));
        memset(&got, 0, sizeof(got));
        ASSERT_EQ(rdzvd_job_record_get(t, "nc", &got), -EBADMSG);
        ASSERT_NULL(got.nodes); /* nothing left allocated */
        ASSERT_NULL(got.ids);
    }
    rdzvd_store_free(t);
}

/* ---- decisions (rdzvd-job-record.h) ---- */

/* What a table's change hook was told: how many records, the last one's kind and value. */
struct told {
    int n;
    enum rdzvd_change what;
    char val[2048];
};

static void told_cb(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                    const uint8_t *val, size_t vlen)
{
    struct told *t = ud;

    (void)key;
    (void)klen;
    t->n++;
    t->what = what;
    snprintf(t->val, sizeof(t->val), "%.*s", (int)vlen, (const char *)val);
}

/* The decisions of one job in order, as the state machine makes them: a generation formed, a
 * restart charged (stopped), the next generation formed, the end. */
static struct rdzvd_job_record dec_rec(const char *run_id, uint64_t gen, int64_t restarts,
                                       bool running, struct rdzvd_job_record_node *nodes)
{
    struct rdzvd_job_record rec = rec_of(run_id);

    rec.generation = gen;
    rec.restart_count = restarts;
    rec.running = running;
    rec.nodes = running ? nodes : NULL;
    if (!running)
        rec.nnodes = rec.world_size = rec.store_port = 0;
    return rec;
}

/* A decision is one record for the change hook (the decision, not the record it makes), and
 * rdzvd_decision_apply folds decisions into the record: formed, stopped (a restart charged),
 * formed again, ended. A decision that would take the job back (its generation formed again, a
 * restart count below the record's, other --nnodes) is -ESTALE, changes nothing and is told
 * nobody; an end of no record is nothing. */
static void test_decisions_fold_into_the_record(void)
{
    struct rdzvd_job_record_node nodes[3] = {{"a", 8}, {"b", 8}, {"c", 8}};
    struct rdzvd_store *t = new_store(&lim);
    struct rdzvd_job_record rec, got;
    struct told told = {0};

    rdzvd_store_set_change_cb(t, told_cb, &told);
    rec = dec_rec("fold", 1, 0, true, nodes);
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_FORMED, &rec));
    ASSERT_EQ(told.n, 1);
    ASSERT_EQ(told.what, RDZVD_CHANGE_DECISION);
    ASSERT_TRUE(strstr(told.val, "\"decision\":\"formed\"") != NULL);
    ASSERT_OK(rdzvd_job_record_get(t, "fold", &got));
    expect_same_record(&got, &rec);
    ASSERT_BYTES_STR(got.nodes[2].node_id, 1, "c");
    rdzvd_job_record_clear(&got);
    ASSERT_EQ(rdzvd_job_decide(t, RDZVD_DECIDE_FORMED, &rec), -ESTALE); /* gen 1 again */
    rec = dec_rec("fold", 1, 1, false, NULL);
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_STOPPED, &rec));
    ASSERT_EQ(told.n, 2);
    ASSERT_TRUE(strstr(told.val, "\"decision\":\"stopped\"") != NULL);
    ASSERT_OK(rdzvd_job_record_get(t, "fold", &got));
    ASSERT_TRUE(!got.running && got.generation == 1 && got.restart_count == 1 && !got.nodes);
    rec = dec_rec("fold", 1, 0, false, NULL); /* restart count back to 0 */
    ASSERT_EQ(rdzvd_job_decide(t, RDZVD_DECIDE_STOPPED, &rec), -ESTALE);
    rec = dec_rec("fold", 2, 1, true, nodes);
    rec.max = 5; /* another --nnodes */
    ASSERT_EQ(rdzvd_job_decide(t, RDZVD_DECIDE_FORMED, &rec), -ESTALE);
    ASSERT_EQ(told.n, 2); /* refusals are told nobody */
    ASSERT_OK(rdzvd_job_record_get(t, "fold", &got));
    ASSERT_TRUE(!got.running && got.generation == 1 && got.restart_count == 1);
    rec = dec_rec("fold", 2, 1, true, nodes);
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_FORMED, &rec));
    ASSERT_OK(rdzvd_job_record_get(t, "fold", &got));
    ASSERT_TRUE(got.running && got.generation == 2 && got.restart_count == 1 && got.nodes);
    rdzvd_job_record_clear(&got);
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_ENDED, &rec));
    ASSERT_EQ(told.n, 4);
    ASSERT_TRUE(strstr(told.val, "\"decision\":\"ended\"") != NULL);
    ASSERT_EQ(rdzvd_job_record_get(t, "fold", &got), -ENOENT);
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_ENDED, &rec)); /* no record: nothing to end */
    ASSERT_EQ(told.n, 4);
    rdzvd_store_free(t);
}

/* What is not a decision, or not of the key's job, is refused and changes nothing: -EINVAL from
 * rdzvd_job_decide (a formed generation that does not run, a stopped one with nodes, no run
 * id), -EBADMSG from rdzvd_decision_apply (not JSON, an unknown decision, another job's). */
static void test_decisions_checked(void)
{
    static const char *const bad[] = {
        "{oops",
        "{\"decision\":\"exploded\",\"run_id\":\"chk\"}",
        "{\"decision\":\"ended\",\"run_id\":\"other\"}",
        "{\"decision\":\"formed\",\"run_id\":\"chk\"}", /* no record in it */
    };
    struct rdzvd_job_record_node nodes[3] = {{"a", 8}, {"b", 8}, {"c", 8}};
    struct rdzvd_store *t = new_store(&lim);
    struct rdzvd_job_record rec, got;
    struct told told = {0};

    rdzvd_store_set_change_cb(t, told_cb, &told);
    rec = dec_rec("chk", 1, 0, false, NULL);
    ASSERT_EQ(rdzvd_job_decide(t, RDZVD_DECIDE_FORMED, &rec), -EINVAL);
    rec = dec_rec("chk", 1, 0, true, nodes);
    ASSERT_EQ(rdzvd_job_decide(t, RDZVD_DECIDE_STOPPED, &rec), -EINVAL);
    rec.run_id[0] = '\0';
    ASSERT_EQ(rdzvd_job_decide(t, RDZVD_DECIDE_FORMED, &rec), -EINVAL);
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
        ASSERT_EQ(rdzvd_decision_apply(NULL, t, (const uint8_t *)"job/chk", 7,
                                       (const uint8_t *)bad[k], strlen(bad[k])),
                  -EBADMSG);
    ASSERT_EQ(told.n, 0);
    ASSERT_EQ(rdzvd_job_record_get(t, "chk", &got), -ENOENT);
    ASSERT_BYTES_STR(rdzvd_decision_name(RDZVD_DECIDE_STOPPED), 7, "stopped");
    ASSERT_BYTES_STR(rdzvd_decision_name(RDZVD_DECIDE_DONE + 1), 1, "?");
    rdzvd_store_free(t);
}

/* A single rdzvd's journal of the job table holds the decisions themselves, and its replay runs
 * them through the same function: the next rdzvd on the directory has the same record. */
/* The change hook's copy of the last decision recorded. */
struct kept_change {
    enum rdzvd_change what;
    uint8_t key[64], val[4096];
    size_t klen, vlen;
};

static void keep_change(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                        const uint8_t *val, size_t vlen)
{
    struct kept_change *k = ud;

    ASSERT_TRUE(klen <= sizeof(k->key) && vlen <= sizeof(k->val));
    k->what = what;
    memcpy(k->key, key, klen);
    memcpy(k->val, val, vlen);
    k->klen = klen;
    k->vlen = vlen;
}

/* A DECISION record is replayed by the store's decision replayer, the job table's: a store
 * without one (a clients' store) refuses it -EINVAL and keeps nothing, the same record given to a
 * job table folds into its record. */
static void test_decision_needs_the_job_tables_replayer(void)
{
    struct rdzvd_job_record_node nodes[3] = {{"x", 8}, {"y", 8}, {"z", 8}};
    struct rdzvd_job_record rec = dec_rec("hook", 1, 0, true, nodes), got;
    struct rdzvd_store *t = new_store(&lim), *plain = NULL, *u = new_store(&lim);
    struct kept_change k = {0};
    struct rdzvd_record r;

    rdzvd_store_set_change_cb(t, keep_change, &k);
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_FORMED, &rec));
    ASSERT_EQ(k.what, RDZVD_CHANGE_DECISION);
    r = (struct rdzvd_record){.table = RDZVD_TABLE_JOBS, .what = RDZVD_CHANGE_DECISION,
                              .key = k.key, .klen = k.klen, .val = k.val, .vlen = k.vlen};
    ASSERT_OK(rdzvd_store_new(&lim, no_wake, &plain));
    ASSERT_EQ(rdzvd_record_apply(plain, &r), -EINVAL);
    ASSERT_EQ(rdzvd_store_num_keys(plain), 0);
    ASSERT_OK(rdzvd_record_apply(u, &r));
    ASSERT_OK(rdzvd_job_record_get(u, "hook", &got));
    ASSERT_TRUE(got.running && got.generation == 1 && got.nodes);
    rdzvd_job_record_clear(&got);
    rdzvd_store_free(plain);
    rdzvd_store_free(u);
    rdzvd_store_free(t);
}

static void test_decisions_replayed_from_the_journal(void)
{
    struct rdzvd_job_record_node nodes[3] = {{"a", 8}, {"b", 8}, {"c", 8}};
    struct rdzvd_store *t = new_store(&lim), *u;
    struct rdzvd_journal *j = NULL;
    struct rdzvd_job_record rec, got;

    ASSERT_OK(rdzvd_journal_open(NULL, dirfd_, dir, "jobs", RDZVD_FSYNC_NO, t, &j));
    rec = dec_rec("jr", 1, 0, true, nodes);
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_FORMED, &rec));
    rec = dec_rec("jr", 1, 1, false, NULL);
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_STOPPED, &rec));
    rec = dec_rec("jr", 2, 1, true, nodes);
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_FORMED, &rec));
    rec = dec_rec("ended", 1, 0, true, nodes);
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_FORMED, &rec));
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_ENDED, &rec));
    ASSERT_EQ(rdzvd_journal_stats(j)->records, 5); /* the decisions, one record each */
    rdzvd_journal_close(j, false);
    u = new_store(&lim);
    ASSERT_OK(rdzvd_journal_open(NULL, dirfd_, dir, "jobs", RDZVD_FSYNC_NO, u, &j));
    ASSERT_EQ(rdzvd_journal_stats(j)->replayed, 5);
    ASSERT_OK(rdzvd_job_record_get(u, "jr", &got));
    ASSERT_TRUE(got.running && got.generation == 2 && got.restart_count == 1 && got.nodes);
    ASSERT_BYTES_STR(got.nodes[1].node_id, 1, "b");
    rdzvd_job_record_clear(&got);
    ASSERT_EQ(rdzvd_job_record_get(u, "ended", &got), -ENOENT);
    rdzvd_journal_close(j, false);
    env_forget_table(dirfd_);
    rdzvd_store_free(t);
    rdzvd_store_free(u);
}

/* WAITING keeps since when a job's agents all left beside its record (which it leaves as it
 * is), is journaled and replayed like any decision; a WAITING of 0 (an agent back) clears it,
 * journaling nothing when there was none, and so does a generation formed; a job with no record
 * keeps none; ENDED deletes it with the record. */
static void test_waiting_since(void)
{
    struct rdzvd_job_record_node nodes[3] = {{"a", 8}, {"b", 8}, {"c", 8}};
    struct rdzvd_store *t = new_store(&lim), *u;
    struct rdzvd_journal *j = NULL;
    struct rdzvd_job_record rec, w = {.generation = 0}, got;

    ASSERT_OK(rdzvd_journal_open(NULL, dirfd_, dir, "jobs", RDZVD_FSYNC_NO, t, &j));
    rec = dec_rec("w", 1, 0, true, nodes);
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_FORMED, &rec));
    ASSERT_EQ(rdzvd_job_waiting_since(t, "w"), 0);
    snprintf(w.run_id, sizeof(w.run_id), "w");
    w.waiting_since_ms = 1795000000123;
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_WAITING, &w));
    ASSERT_EQ(rdzvd_job_waiting_since(t, "w"), 1795000000123);
    ASSERT_OK(rdzvd_job_record_get(t, "w", &got));
    ASSERT_TRUE(got.running && got.generation == 1 && got.nodes);
    rdzvd_job_record_clear(&got);
    w.waiting_since_ms = -1;
    ASSERT_EQ(rdzvd_job_decide(t, RDZVD_DECIDE_WAITING, &w), -EINVAL);
    w.waiting_since_ms = 0;
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_WAITING, &w));
    ASSERT_EQ(rdzvd_job_waiting_since(t, "w"), 0);
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_WAITING, &w)); /* none: nothing written */
    ASSERT_EQ(rdzvd_journal_stats(j)->records, 3);
    w.waiting_since_ms = 1795000000456;
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_WAITING, &w));
    rdzvd_journal_close(j, false);
    u = new_store(&lim);
    ASSERT_OK(rdzvd_journal_open(NULL, dirfd_, dir, "jobs", RDZVD_FSYNC_NO, u, &j));
    ASSERT_EQ(rdzvd_journal_stats(j)->replayed, 4);
    ASSERT_EQ(rdzvd_job_waiting_since(u, "w"), 1795000000456);
    ASSERT_EQ(rdzvd_job_waiting_since(u, "v"), 0);
    /* A job with no record keeps no leaving; a generation formed (its agents back) clears it. */
    snprintf(w.run_id, sizeof(w.run_id), "v");
    ASSERT_OK(rdzvd_job_decide(u, RDZVD_DECIDE_WAITING, &w));
    ASSERT_EQ(rdzvd_job_waiting_since(u, "v"), 0);
    rec = dec_rec("w", 2, 0, true, nodes);
    ASSERT_OK(rdzvd_job_decide(u, RDZVD_DECIDE_FORMED, &rec));
    ASSERT_EQ(rdzvd_job_waiting_since(u, "w"), 0);
    snprintf(w.run_id, sizeof(w.run_id), "w");
    ASSERT_OK(rdzvd_job_decide(u, RDZVD_DECIDE_WAITING, &w));
    ASSERT_EQ(rdzvd_job_waiting_since(u, "w"), 1795000000456);
    ASSERT_OK(rdzvd_job_decide(u, RDZVD_DECIDE_ENDED, &rec));
    ASSERT_EQ(rdzvd_job_waiting_since(u, "w"), 0);
    ASSERT_EQ(rdzvd_job_record_get(u, "w", &got), -ENOENT);
    rdzvd_journal_close(j, false);
    env_forget_table(dirfd_);
    rdzvd_store_free(t);
    rdzvd_store_free(u);
}

/* The table's errors come back: a record too large for its values is refused, nothing kept. */
static void test_table_put_store_error(void)
{
    struct rdzv_limits small = lim;
    struct rdzvd_store *t;
    struct rdzvd_job_record a = rec_of("big"), got;

    small.max_value_len = 32;
    t = new_store(&small);
    ASSERT_EQ(rdzvd_job_record_put(t, &a), -EMSGSIZE);
    ASSERT_EQ(rdzvd_job_record_get(t, "big", &got), -ENOENT);
    rdzvd_store_free(t);
}

/* A run id longer than any record can hold has no record: get says -ENOENT and del 0, and
 * neither reads past its key buffer (ASan) nor reaches a record of its truncated prefix. */
static void test_table_run_id_too_long(void)
{
    struct rdzvd_store *t = new_store(&lim);
    struct rdzvd_job_record a, got;
    char id[RDZV_ID_MAX + 40];

    a = rec_of("");
    memset(a.run_id, 'i', RDZV_ID_MAX); /* the longest a record holds */
    a.run_id[RDZV_ID_MAX] = '\0';
    ASSERT_OK(rdzvd_job_record_put(t, &a));
    ASSERT_OK(rdzvd_job_record_get(t, a.run_id, &got));
    expect_same_record(&got, &a);
    memset(id, 'i', sizeof(id) - 1);
    id[sizeof(id) - 1] = '\0';
    ASSERT_EQ(rdzvd_job_record_get(t, id, &got), -ENOENT);
    ASSERT_EQ(rdzvd_job_record_del(t, id), 0);
    ASSERT_OK(rdzvd_job_record_get(t, a.run_id, &got)); /* the other record is untouched */
    rdzvd_store_free(t);
}

/* ADMITTED keeps a node's secret's hash beside the job's record, never replaces it, is
 * journaled and replayed like any decision, and goes with the job (ENDED); the record itself is
 * untouched. A job's node ids are bounded (-ENOSPC), and a decision of another form ("v") or
 * with a malformed hash is refused. */
static void test_admitted_secrets(void)
{
    struct rdzvd_job_record_node nodes[3] = {{"a", 8}, {"b", 8}, {"c", 8}};
    struct rdzvd_store *t = new_store(&lim), *u;
    struct rdzvd_journal *j = NULL;
    struct rdzvd_job_record rec = {.generation = 0}, adm = {.generation = 0}, got;
    char secret[RDZV_SECRET_HEX + 1], hash[RDZVD_SECRET_HASH_HEX + 1];
    int n = 0;

    ASSERT_OK(rdzvd_journal_open(NULL, dirfd_, dir, "jobs", RDZVD_FSYNC_NO, t, &j));
    rec = dec_rec("adm", 1, 0, true, nodes);
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_FORMED, &rec));
    snprintf(adm.run_id, sizeof(adm.run_id), "adm");
    snprintf(adm.admitted.node_id, sizeof(adm.admitted.node_id), "a");
    ASSERT_OK(rdzvd_member_secret_new(secret));
    ASSERT_OK(rdzvd_member_secret_hash(secret, adm.admitted.hash));
    ASSERT_EQ(rdzvd_job_secret_hash_get(t, "adm", "a", hash), -ENOENT);
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_ADMITTED, &adm));
    ASSERT_OK(rdzvd_job_secret_hash_get(t, "adm", "a", hash));
    ASSERT_TRUE(rdzvd_member_secret_proves(secret, hash));
    ASSERT_FALSE(rdzvd_member_secret_proves("", hash));
    secret[0] = secret[0] == '0' ? '1' : '0';
    ASSERT_FALSE(rdzvd_member_secret_proves(secret, hash));
    ASSERT_EQ(rdzvd_job_decide(t, RDZVD_DECIDE_ADMITTED, &adm), -EEXIST); /* never replaced */
    ASSERT_OK(rdzvd_job_record_get(t, "adm", &got)); /* the record is the formed one */
    ASSERT_TRUE(got.running && got.generation == 1 && got.nodes);
    rdzvd_job_record_clear(&got);
    ASSERT_EQ(rdzvd_journal_stats(j)->records, 2);
    rdzvd_journal_close(j, false);
    u = new_store(&lim);
    ASSERT_OK(rdzvd_journal_open(NULL, dirfd_, dir, "jobs", RDZVD_FSYNC_NO, u, &j));
    ASSERT_EQ(rdzvd_journal_stats(j)->replayed, 2);
    ASSERT_OK(rdzvd_job_secret_hash_get(u, "adm", "a", hash));
    ASSERT_BYTES_STR(hash, RDZVD_SECRET_HASH_HEX, adm.admitted.hash);
    ASSERT_OK(rdzvd_job_decide(u, RDZVD_DECIDE_ENDED, &adm));
    ASSERT_EQ(rdzvd_job_secret_hash_get(u, "adm", "a", hash), -ENOENT);
    ASSERT_EQ(rdzvd_store_num_keys(u), 0);
    rdzvd_journal_close(j, false);
    env_forget_table(dirfd_);
    /* Bounded: node ids of 100 bytes fill RDZVD_JOB_IDS_BYTES_MAX. */
    for (int r = 0; r == 0; n++) {
        snprintf(adm.admitted.node_id, sizeof(adm.admitted.node_id), "%0100d", n);
        r = rdzvd_job_decide(t, RDZVD_DECIDE_ADMITTED, &adm);
        ASSERT_TRUE(r == 0 || r == -ENOSPC);
    }
    ASSERT_EQ(n - 1, RDZVD_JOB_IDS_BYTES_MAX / 101);
    /* Another form of the hash, or none that is one, is not applied. */
    ASSERT_EQ(rdzvd_decision_apply(NULL, t, (const uint8_t *)"job/adm", 7,
                                   (const uint8_t *)"{\"decision\":\"admitted\",\"run_id\":"
                                                    "\"adm\",\"node_id\":\"z\",\"v\":2,"
                                                    "\"hash\":\"" HASH64 "\"}",
                                   strlen("{\"decision\":\"admitted\",\"run_id\":\"adm\","
                                          "\"node_id\":\"z\",\"v\":2,\"hash\":\"" HASH64 "\"}")),
              -EBADMSG);
    memset(adm.admitted.hash, 'g', RDZVD_SECRET_HASH_HEX);
    ASSERT_EQ(rdzvd_job_decide(t, RDZVD_DECIDE_ADMITTED, &adm), -EINVAL);
    rdzvd_store_free(t);
    rdzvd_store_free(u);
}

/* ---- the job state machine keeps its record (rdzvd-job-records.c) ---- */

/* The fake host of jobtest.h with one-node jobs, its stores numbered from 41001, the records in
 * table when there is one, else in the --state-dir's own table (jobtest.h) when there is a
 * directory. */
static void rec_env_init(struct env *e, int state_dirfd, struct rdzvd_store *table)
{
    env_init(e, state_dirfd);
    e->base_port = 41000;
    if (table)
        e->h.record_table = e->h.secret_table = table; /* as rdzvd-job-wire.c sets them */
}

/* JOIN of the only node of a one-node job run_id: its round forms at once (generation 1 of a
 * new job), with 2 workers. */
static void join_one(struct env *e, struct fake *p, const char *run_id)
{
    struct rdzv_join jn = join_of(0, 1, 1, 2);

    snprintf(jn.run_id, sizeof(jn.run_id), "%s", run_id);
    ASSERT_OK(join(e, p, &jn));
}

/* With a job table (a replicated rdzvd) the record lives there, not in --state-dir: a value
 * under the job's key that is no record is ignored (the job starts at generation 1), the round
 * records generation 1 as running with its sizes and store port, and the job's end deletes it. */
static void test_job_record_in_table(void)
{
    struct rdzvd_store *t = new_store(&lim);
    struct rdzvd_job_record got;
    struct fake p = {0};
    struct env e;

    ASSERT_OK(rdzvd_store_set(t, "job/tj", 6, "{broken", 7));
    rec_env_init(&e, dirfd_, t);
    join_one(&e, &p, "tj");
    ASSERT_EQ(p.nrounds, 1);
    ASSERT_EQ(p.round.generation, 1);
    ASSERT_OK(rdzvd_job_record_get(t, "tj", &got));
    ASSERT_EQ(got.generation, 1);
    ASSERT_TRUE(got.running);
    ASSERT_EQ(got.min, 1);
    ASSERT_EQ(got.max, 1);
    ASSERT_EQ(got.max_restarts, 2);
    ASSERT_EQ(got.nnodes, 1);
    ASSERT_EQ(got.world_size, 2);
    ASSERT_EQ(got.store_port, 41001);
    /* the generation's one node, at node rank 0, with its 2 workers */
    ASSERT_NOT_NULL(got.nodes);
    ASSERT_BYTES_STR(got.nodes[0].node_id, strlen(got.nodes[0].node_id), "node-0");
    ASSERT_EQ(got.nodes[0].nproc, 2);
    rdzvd_job_record_clear(&got);
    ASSERT_NULL(got.nodes);
    /* ... and not in the --state-dir's own table (rec_env_init put t in its place) */
    ASSERT_EQ(rdzvd_job_record_get(e.table, "tj", &got), -ENOENT);
    jt_leave(p.m, 1, true);
    ASSERT_BYTES_STR(p.event.type, strlen(p.event.type), "succeeded");
    ASSERT_EQ(rdzvd_job_record_get(t, "tj", &got), -ENOENT);
    env_done(&e);
    env_forget_table(dirfd_);
    rdzvd_store_free(t);
}

/* A job table that can't take the record: the generation is not sent (its agents would run what
 * the record does not hold); the job fails, naming why. */
static void test_job_table_full_job_fails(void)
{
    struct rdzv_limits small = lim;
    struct rdzvd_store *t;
    struct rdzvd_job_record got;
    struct fake p = {0};
    struct env e;

    small.max_value_len = 80; /* a node's secret's hash fits, a record doesn't */
    t = new_store(&small);
    rec_env_init(&e, -1, t);
    join_one(&e, &p, "full");
    ASSERT_EQ(p.nrounds, 0);
    ASSERT_BYTES_STR(p.event.type, strlen(p.event.type), "failed");
    ASSERT_NOT_NULL(strstr(p.event.summary, "could not record that generation 1 formed"));
    ASSERT_EQ(rdzvd_job_record_get(t, "full", &got), -ENOENT);
    env_done(&e);
    rdzvd_store_free(t);
}

/* A new generation's journal name is taken by another store's journal: the store opens under
 * its name all the same (its journal refuses that file itself), and the file is left as it is. */
static void test_job_stale_journal_of_other_store_left(void)
{
    struct rdzvd_store *s = new_store(&lim);
    struct rdzvd_journal *j = NULL;
    char sname[RDZVD_JOB_NAME_MAX], file[RDZVD_JOB_NAME_MAX + 16];
    struct fake p = {0};
    struct env e;

    ASSERT_OK(rdzvd_job_state_name("sj", 1, sname, sizeof(sname)));
    snprintf(file, sizeof(file), "%s.journal", sname);
    ASSERT_OK(rdzvd_journal_open(NULL, dirfd_, dir, "intruder", RDZVD_FSYNC_NO, s, &j));
    rdzvd_journal_close(j, false);
    ASSERT_OK(renameat(dirfd_, "intruder.journal", dirfd_, file));
    rec_env_init(&e, dirfd_, NULL);
    join_one(&e, &p, "sj");
    ASSERT_EQ(e.stores_open, 1);
    ASSERT_BYTES_STR(e.state_name, strlen(e.state_name), sname);
    ASSERT_TRUE(exists(file));
    ASSERT_EQ(rdzvd_journal_unlink(dirfd_, sname), -EEXIST); /* still the intruder's */
    env_done(&e);
    ASSERT_OK(unlinkat(dirfd_, file, 0));
    env_forget_table(dirfd_);
    rdzvd_store_free(s);
}

/* Shutdown keeps what a restarted rdzvd needs: the record (running), in the job table's
 * journal in --state-dir, which the next rdzvd replays (the same records, applied the same way,
 * as a replica applies its log), and the store's journal (closed without drop); without
 * --state-dir or a table no store has a journal name. */
static void test_job_shutdown_keeps_record_and_journal(void)
{
    struct rdzvd_job_record got;
    struct fake p = {0};
    struct env e;

    rec_env_init(&e, dirfd_, NULL);
    join_one(&e, &p, "keep");
    ASSERT_TRUE(e.state_name[0] != '\0');
    env_done(&e);
    ASSERT_EQ(e.stores_closed, 1);
    ASSERT_FALSE(e.last_drop);
    ASSERT_TRUE(exists("jobs.journal"));
    /* The next rdzvd on the directory: its table replayed from the journal. */
    rec_env_init(&e, dirfd_, NULL);
    ASSERT_OK(rdzvd_job_record_get(e.table, "keep", &got));
    ASSERT_EQ(got.generation, 1);
    ASSERT_TRUE(got.running);
    ASSERT_EQ(got.nnodes, 1);
    ASSERT_EQ(got.world_size, 2);
    ASSERT_EQ(got.store_port, 41001);
    ASSERT_NOT_NULL(got.nodes);
    rdzvd_job_record_clear(&got);
    env_done(&e);
    env_forget_table(dirfd_);
    /* A job that ends (here without --state-dir) drops its store's journal. */
    memset(&p, 0, sizeof(p));
    rec_env_init(&e, -1, NULL);
    join_one(&e, &p, "nodir");
    ASSERT_BYTES_STR(e.state_name, strlen(e.state_name), "");
    jt_leave(p.m, 1, true);
    jt_gone(p.m); /* its last member gone: the ended job goes */
    ASSERT_TRUE(rdzv_list_empty(&e.jobs));
    ASSERT_EQ(e.stores_closed, 1);
    ASSERT_TRUE(e.last_drop);
    env_done(&e);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");

    rdzv_log_setup("test-job-record", RDZV_LOG_ERROR);
    snprintf(dir, sizeof(dir), "%s/test-job-record.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ASSERT_NOT_NULL(mkdtemp(dir));
    dirfd_ = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_OK(dirfd_);

    TEST(test_names_pinned_and_distinct);
    TEST(test_drop_journal);
    TEST(test_table_round_trip);
    TEST(test_table_settings_round_trip);
    TEST(test_table_rejects_bad_values);
    TEST(test_table_nodes_and_ids_round_trip);
    TEST(test_table_nodes_and_ids_checked);
    TEST(test_decisions_fold_into_the_record);
    TEST(test_decisions_checked);
    TEST(test_decisions_replayed_from_the_journal);
    TEST(test_waiting_since);
    TEST(test_decision_needs_the_job_tables_replayer);
    TEST(test_table_put_store_error);
    TEST(test_table_run_id_too_long);
    TEST(test_admitted_secrets);
    TEST(test_job_record_in_table);
    TEST(test_job_table_full_job_fails);
    TEST(test_job_stale_journal_of_other_store_left);
    TEST(test_job_shutdown_keeps_record_and_journal);

    close(dirfd_);
    ASSERT_OK(rmdir(dir)); /* every test cleaned up after itself */
    return tap_done();
}
