/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-verdicts.c: which failures count against a node (rdzvd-job-history.c), driven with fake
 * agents (jobtest.h) on a real loop and rdzvd's real clock: only those within
 * --bad-node-window; the dates kept in the job's record, which reads records without them. */
#include <inttypes.h>
#include <signal.h>

#include "common/rdzv-log.h"
#include "jobtest.h"
#include "daemon/data/rdzvd-config.h"

/* Worker rank 'rank' of f (2 workers per node) exits with code 3 in generation gen. */
static void fail_rank(struct fake *f, uint64_t gen, int64_t local_rank)
{
    struct rdzv_worker_exit w = {.generation = gen, .exit_code = 3, .local_rank = local_rank};
    char err[512];

    w.rank = f->round.rank_offset + local_rank;
    ASSERT_OK(jt_member_worker_exit(f->m, &w, err, sizeof(err)));
}

/* The index of the fake whose node rank is rank. */
static int at_rank(const struct fake *f, int n, int64_t rank)
{
    for (int i = 0; i < n; i++)
        if (f[i].m && !f[i].closed && f[i].nrounds && f[i].round.node_rank == rank)
            return i;
    ASSERT_TRUE(false);
    return -1;
}

/* --bad-node-window 1, --bad-node-failures 2: two failures more than a second apart leave the
 * node in; the third, within a second of the second, puts it aside (the spare takes it). */
static void test_window_forgets_old_failures(void)
{
    struct fake f[3] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 8);
    struct env e;
    int n0;

    env_init(&e, -1);
    jn.bad_node_failures = 2;
    jn.bad_node_window_s = 1;
    join_n(&e, f, 3, jn); /* node 2 waits as the spare */
    n0 = at_rank(f, 3, 0);
    fail_rank(&f[n0], 1, 0);
    ASSERT_TRUE(event_is(&f[n0], "restart"));
    all_ready(f, 3, 1);
    run_ms(&e, 1100); /* the first failure leaves the window */
    fail_rank(&f[n0], 2, 0);
    ASSERT_TRUE(event_is(&f[n0], "restart")); /* one within the window: not put aside */
    ASSERT_FALSE(f[n0].closed);
    all_ready(f, 3, 2);
    ASSERT_EQ(f[2].nrounds, 0);
    fail_rank(&f[n0], 3, 0);
    all_ready(f, 3, 3); /* a start-up failure: it goes once the generation stopped */
    ASSERT_TRUE(event_is(&f[n0], "put_aside"));
    ASSERT_TRUE(strstr(f[n0].event.summary, "failed 2 times within 1 s (--bad-node-failures 2, "
                                            "--bad-node-window 1)") != NULL);
    all_ready(f, 3, 3);
    ASSERT_EQ(f[2].nrounds, 1); /* the spare took its place */
    env_done(&e);
}

/* A rank that fails on one node, then on another within the window, is the job's failure: the
 * first node's failure is taken back, and the second node is not charged, however often that
 * rank fails again. Its failures of another rank still count: it is put aside after two. */
static void test_failure_that_follows_a_rank_is_the_jobs(void)
{
    struct fake f[4] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 8);
    struct env e;
    int n0, n2;

    env_init(&e, -1);
    jn.bad_node_failures = 2;
    jn.bad_node_window_s = 3600;
    join_n(&e, f, 4, jn); /* nodes 2 and 3 wait as spares */
    n0 = at_rank(f, 4, 0);
    fail_rank(&f[n0], 1, 1); /* rank 1 on n0: n0's first */
    ASSERT_TRUE(strstr(f[n0].event.summary, "the job's failure") == NULL);
    all_ready(f, 4, 1);
    jt_member_cancel(f[n0].m, SIGTERM, "", ""); /* n0 leaves; a spare takes node rank 0 */
    all_ready(f, 4, 2);
    n2 = at_rank(f, 4, 0);
    ASSERT_TRUE(n2 >= 2);
    /* a spare that ran: no newcomer (P7b) */
    jt_advance((uint64_t)rdzvd_job_startup_fail_ms(&jt_steps));
    for (uint64_t gen = 3; gen <= 4; gen++) {
        fail_rank(&f[n2], gen, 1); /* rank 1 again, on another node */
        ASSERT_TRUE(event_is(&f[n2], "restart"));
        ASSERT_TRUE(strstr(f[n2].event.summary, "rank 1 failed on node host0 too within the "
                                                "window: the job's failure, not the node's") !=
                    NULL);
        all_ready(f, 4, gen);
    }
    fail_rank(&f[n2], 5, 0); /* rank 0: its own */
    ASSERT_TRUE(event_is(&f[n2], "restart"));
    all_ready(f, 4, 5);
    fail_rank(&f[n2], 6, 0);
    all_ready(f, 4, 6); /* a start-up failure: it goes once the generation stopped */
    ASSERT_TRUE(event_is(&f[n2], "put_aside"));
    env_done(&e);
}

/* A script that fails at start-up on every rank (a bug in it, a bad input) is
 * the job's failure, not a node's. Each generation both nodes report; only the first report
 * restarts the job, the other comes while it stops and takes back the first node's charge. The
 * job restarts until its budget is spent and fails with the first rank's error; nobody is put
 * aside and nobody waits for a node. Before, the node that reported first was put aside after
 * two generations and the other waited the whole --join-timeout. */
static void test_every_node_failing_at_startup_is_the_jobs(void)
{
    struct fake f[2] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    struct env e;

    env_init(&e, -1);
    jn.bad_node_failures = 2;
    jn.bad_node_window_s = 3600;
    join_n(&e, f, 2, jn); /* no spare */
    for (uint64_t gen = 1; gen <= 4; gen++) {
        int first = at_rank(f, 2, 1), second = 1 - first;

        fail_rank(&f[first], gen, 0);
        fail_rank(&f[second], gen, 0); /* while the generation stops */
        for (int i = 0; i < 2; i++) {
            ASSERT_FALSE(event_is(&f[i], "put_aside"));
            ASSERT_TRUE(strstr(f[i].event.summary, "put aside") == NULL);
        }
        if (gen < 4) {
            ASSERT_TRUE(event_is(&f[first], "restart"));
            all_ready(f, 2, gen);
            ASSERT_EQ(f[first].round.generation, gen + 1);
            ASSERT_EQ(f[second].round.generation, gen + 1);
        }
    }
    for (int i = 0; i < 2; i++) {
        ASSERT_TRUE(event_is(&f[i], "failed"));
        ASSERT_TRUE(strstr(f[i].event.summary, "root cause: worker rank 2 (local rank 0) on node "
                                               "rank 1") != NULL);
        ASSERT_TRUE(strstr(f[i].event.summary, "restart budget exhausted (3 of 3") != NULL);
    }
    env_done(&e);
}

/* A start-up failure that would put its node aside (--bad-node-failures 1 here) restarts the
 * job with a grace for the others' workers still starting (1.17 startup_grace_ms: as long again
 * as the failed one ran, 2 to 5 s), so that a script bug fails them alike (above) instead of
 * the first node alone. None for a failure past the start-up window, nor where no node is put
 * aside (--bad-node-failures 0): those restart at once. */
static void test_startup_failure_restart_carries_a_grace(void)
{
    const int64_t ran[4] = {200, 3000, RDZVD_JOB_STARTUP_FAIL_MS + 1000, 200};
    const int64_t want[4] = {RDZVD_JOB_STARTUP_GRACE_MIN_MS, 3000, 0, 0};

    for (int c = 0; c < 4; c++) {
        struct fake f[3] = {0};
        struct rdzv_join jn = join_of(0, 2, 2, 8);
        struct env e;
        int first;

        env_init(&e, -1);
        jn.bad_node_failures = c == 3 ? 0 : 1;
        join_n(&e, f, 3, jn); /* node-2 waits as the spare */
        first = at_rank(f, 3, 0);
        jt_advance((uint64_t)ran[c]);
        fail_rank(&f[first], 1, 0);
        for (int i = 0; i < 3; i++) {
            if (!f[i].nrounds || i == first)
                continue; /* the spare; the failed node (put aside at once past the window) */
            ASSERT_TRUE(event_is(&f[i], "restart"));
            ASSERT_EQ(f[i].event.startup_grace_ms, want[c]);
        }
        env_done(&e);
    }
}

/* The others' start-up failures that come in the grace their stop gave them (past the 5 s
 * start-up window) still count: every node failed alike, and nobody is put aside even at
 * --bad-node-failures 1. Before, the second node's report at 5.5 s was no start-up failure, and
 * the first node was put aside alone. */
static void test_startup_failures_in_the_grace_are_alike(void)
{
    struct fake f[2] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    struct env e;
    int first, second;

    env_init(&e, -1);
    jn.bad_node_failures = 1;
    join_n(&e, f, 2, jn);
    first = at_rank(f, 2, 0);
    second = 1 - first;
    jt_advance(3000);
    fail_rank(&f[first], 1, 0);
    ASSERT_EQ(f[second].event.startup_grace_ms, 3000);
    jt_advance(2500);
    fail_rank(&f[second], 1, 0); /* 5.5 s after the round: in the grace */
    all_ready(f, 2, 1);
    for (int i = 0; i < 2; i++) {
        ASSERT_FALSE(event_is(&f[i], "put_aside"));
        ASSERT_FALSE(f[i].closed);
        ASSERT_EQ(f[i].round.generation, 2);
    }
    env_done(&e);
}

/* Found by test-job-explore (I3): the first node to report a start-up failure is not put aside
 * before the others' reports are in, when one failure would be enough (--bad-node-failures 1),
 * or when its earlier failure of its own makes two (an elastic 2..3 job, --bad-node-failures 2):
 * every node then fails alike at start-up, the job's failure, and nobody is put aside. */
static void test_start_up_verdict_waits_for_every_report(void)
{
    struct fake f[3] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    struct env e;
    int first;

    env_init(&e, -1);
    jn.bad_node_failures = 1;
    join_n(&e, f, 2, jn);
    first = at_rank(f, 2, 0);
    fail_rank(&f[first], 1, 0);
    fail_rank(&f[1 - first], 1, 0);
    all_ready(f, 2, 1);
    for (int i = 0; i < 2; i++) {
        ASSERT_FALSE(event_is(&f[i], "put_aside"));
        ASSERT_EQ(f[i].round.generation, 2);
    }
    env_done(&e);

    memset(f, 0, sizeof(f));
    env_init(&e, -1);
    jn = join_of(0, 2, 3, 2);
    jn.bad_node_failures = 2;
    jn.bad_node_window_s = 3600;
    join_n(&e, f, 3, jn);
    first = at_rank(f, 3, 0);
    fail_rank(&f[first], 1, 0); /* its own */
    all_ready(f, 3, 1);
    fail_rank(&f[first], 2, 0); /* then every node's */
    for (int i = 0; i < 3; i++)
        if (i != first)
            fail_rank(&f[i], 2, 0);
    all_ready(f, 3, 2);
    for (int i = 0; i < 3; i++) {
        ASSERT_FALSE(event_is(&f[i], "put_aside"));
        ASSERT_EQ(f[i].round.generation, 3);
    }
    env_done(&e);
}

/* One bad node's start-up failure often makes another node's workers fail at start-up too (their
 * collectives' peer is gone): that is not every node failing alike. Three nodes (2..3,
 * --bad-node-failures 1): node rank 0 fails at start-up, node rank 1 too while the generation
 * stops, node rank 2 does not. Node rank 0 is put aside once the generation stopped; the job
 * goes on with the other two. */
static void test_start_up_failure_of_some_nodes_is_theirs(void)
{
    struct fake f[3] = {0};
    struct rdzv_join jn = join_of(0, 2, 3, 3);
    struct env e;
    int a, b;

    env_init(&e, -1);
    jn.bad_node_failures = 1;
    join_n(&e, f, 3, jn);
    a = at_rank(f, 3, 0);
    b = at_rank(f, 3, 1);
    fail_rank(&f[a], 1, 0);
    fail_rank(&f[b], 1, 0);
    all_ready(f, 3, 1);
    ASSERT_TRUE(event_is(&f[a], "put_aside"));
    for (int i = 0; i < 3; i++)
        if (i != a) {
            ASSERT_FALSE(event_is(&f[i], "put_aside"));
            ASSERT_EQ(f[i].round.generation, 2);
            ASSERT_EQ(f[i].round.nnodes, 2);
        }
    env_done(&e);
}

/* Local rank 0 of f exits with code 3 in generation gen, of error (its last stderr line). */
static void fail_of(struct fake *f, uint64_t gen, const char *error)
{
    struct rdzv_worker_exit w = {.generation = gen, .exit_code = 3};
    char err[512];

    w.rank = f->round.rank_offset;
    snprintf(w.error, sizeof(w.error), "%s", error);
    ASSERT_OK(jt_member_worker_exit(f->m, &w, err, sizeof(err)));
}

/* S5: two nodes and a spare, --bad-node-failures 2. Node rank 0's worker fails at
 * start-up in every generation; the other's fails in the grace of another error (the connection
 * its dead peer closed): not every node failing alike. Node rank 0 keeps its charges, is put
 * aside at its second failure, and the spare takes its place. The root cause names the error.
 * Before, the other node's failure took the charges back each time, and nobody was put aside.
 * With the same error on both nodes (their numbers aside), it is still the job's failure. */
static void test_start_up_errors_tell_a_bad_node(void)
{
    const char *bad = "ValueError: rank 0 cannot read /data/shard-0";
    const char *other[2] = {"RuntimeError: Connection closed by peer [10.0.0.2]:41236",
                            "ValueError: rank 2 cannot read /data/shard-1"};

    for (int same = 0; same < 2; same++) {
        struct fake f[3] = {0};
        struct rdzv_join jn = join_of(0, 2, 2, 8);
        struct env e;
        int a, b;

        env_init(&e, -1);
        jn.bad_node_failures = 2;
        jn.bad_node_window_s = 3600;
        join_n(&e, f, 3, jn); /* node 2 waits as the spare */
        a = at_rank(f, 3, 0);
        b = at_rank(f, 3, 1);
        for (uint64_t gen = 1; gen <= 2; gen++) {
            jt_advance(300);
            fail_of(&f[a], gen, bad);
            ASSERT_TRUE(strstr(f[b].event.summary, "exited with code 3: ValueError: rank 0 "
                                                   "cannot read /data/shard-0 at ") != NULL);
            jt_advance(200);
            fail_of(&f[b], gen, other[same]);
            all_ready(f, 3, gen);
        }
        ASSERT_EQ(event_is(&f[a], "put_aside"), !same);
        ASSERT_FALSE(event_is(&f[b], "put_aside"));
        ASSERT_EQ(f[2].nrounds, same ? 0 : 1); /* the spare is placed */
        ASSERT_EQ(f[b].round.generation, 3);
        env_done(&e);
    }
}

/* A node whose workers fail at start-up (within seconds of the round, before any progress) is
 * put aside after --bad-node-failures of them even with no spare waiting: the job waits for a
 * node (--join-timeout) instead of restarting into it, and forms again when one joins. When
 * every node fails at start-up (the job's own code), nobody is put aside. */
static void test_startup_failures_put_aside_without_spare(void)
{
    struct fake f[3] = {0}, g[2] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 8);
    struct env e;
    int bad, good;

    env_init(&e, -1);
    jn.bad_node_failures = 2;
    jn.bad_node_window_s = 3600;
    join_n(&e, f, 2, jn); /* no spare */
    bad = at_rank(f, 2, 1);
    good = 1 - bad;
    fail_rank(&f[bad], 1, 0);
    ASSERT_TRUE(event_is(&f[bad], "restart"));
    all_ready(f, 2, 1);
    fail_rank(&f[bad], 2, 0);
    ASSERT_TRUE(event_is(&f[good], "restart"));
    ASSERT_TRUE(strstr(f[good].event.summary, "no spare waits: the job waits for a node to take "
                                              "its place (--join-timeout)") != NULL);
    /* It goes once the generation stopped: the other node's report might say that every node
     * failed alike (then it is the job's failure, and nobody is put aside). */
    ASSERT_TRUE(event_is(&f[bad], "restart"));
    all_ready(f, 2, 2);
    ASSERT_TRUE(event_is(&f[bad], "put_aside"));
    ASSERT_TRUE(strstr(f[bad].event.summary, "its workers failed at start-up 2 times within "
                                             "3600 s") != NULL);
    run_ms(&e, 50);
    ASSERT_EQ(f[good].nrounds, 2); /* waits: no generation 3 on one node */
    jn = join_of(2, 2, 2, 8);
    jn.bad_node_failures = 2;
    jn.bad_node_window_s = 3600;
    ASSERT_OK(join(&e, &f[2], &jn));
    ASSERT_EQ(f[2].nrounds, 1);
    ASSERT_EQ(f[good].nrounds, 3);
    ASSERT_EQ(f[2].round.generation, 3);
    env_done(&e);

    /* Both nodes fail at start-up in turn: the job's code, not a node: never put aside. */
    env_init(&e, -1);
    jn = join_of(0, 2, 2, 8);
    jn.bad_node_failures = 2;
    jn.bad_node_window_s = 3600;
    join_n(&e, g, 2, jn);
    for (uint64_t gen = 1; gen <= 4; gen++) {
        int i = at_rank(g, 2, (int64_t)(gen % 2));

        fail_rank(&g[i], gen, 0);
        ASSERT_TRUE(event_is(&g[i], "restart"));
        ASSERT_TRUE(strstr(g[i].event.summary, "put aside") == NULL);
        all_ready(g, 2, gen);
    }
    env_done(&e);
}

/* Restarts back off (--restart-backoff 2): the first restart's generation forms at once, the
 * next one 1 s after its restart, the next ones 2 s (the cap), on the loop's timer, and the
 * agents' HEARTBEAT answers say so; nothing that happens meanwhile (every member ready) closes
 * the round sooner. A one-node job whose
 * workers fail at start-up is not put aside: no other node tells its fault from the job's. */
static void test_restarts_back_off(void)
{
    static const uint64_t wait_ms[] = {0, 1000, 2000, 2000};
    struct fake f[1] = {0};
    struct rdzv_join jn = join_of(0, 1, 1, 8);
    struct env e;

    env_init(&e, -1);
    jn.restart_backoff_s = 2;
    jn.bad_node_failures = 2;
    jn.bad_node_window_s = 3600;
    join_n(&e, f, 1, jn);
    ASSERT_EQ(f[0].nrounds, 1);
    for (uint64_t gen = 1; gen <= 4; gen++) {
        uint64_t t0;

        fail_rank(&f[0], gen, 0);
        ASSERT_TRUE(event_is(&f[0], "restart")); /* never put aside: alone */
        t0 = jt_now_ms();
        all_ready(f, 1, gen);
        if (wait_ms[gen - 1]) {
            struct rdzv_wait w;

            ASSERT_EQ(f[0].nrounds, (int)gen); /* not yet */
            jt_wait(f[0].m, &w); /* what its agent is told it waits for */
            ASSERT_EQ(w.what, RDZV_WAIT_BACKOFF);
            ASSERT_EQ(w.left_ms, (int64_t)wait_ms[gen - 1]);
            run_ms(&e, wait_ms[gen - 1] - 200);
            ASSERT_EQ(f[0].nrounds, (int)gen);
            while (f[0].nrounds == (int)gen && jt_now_ms() - t0 < 10000)
                run_ms(&e, 20);
            ASSERT_TRUE(jt_now_ms() - t0 >= wait_ms[gen - 1]);
        }
        ASSERT_EQ(f[0].nrounds, (int)gen + 1);
        ASSERT_EQ(f[0].round.generation, gen + 1);
    }
    env_done(&e);
}

/* e keeps ended jobs as rdzvd does, keep_ms and max of them. */
static void keep_ended(struct env *e, uint64_t keep_ms, uint64_t max)
{
    rdzvd_ended_jobs_free(&e->ended);
    rdzvd_ended_jobs_init(&e->ended, keep_ms, max);
    e->h.ended = &e->ended;
    e->h.keep_ended = rdzvd_ended_jobs_add;
}

/* A run of one node on f, jn its JOIN: its worker exits 0, its agent goes. */
static void one_run_succeeds(struct env *e, struct fake *f, struct rdzv_join jn)
{
    join_n(e, f, 1, jn);
    all_ready(f, 1, 1);
    jt_leave(f[0].m, 1, true);
    ASSERT_TRUE(event_is(&f[0], "succeeded"));
    jt_gone(f[0].m);
}

/* An agent that joins a job that has ended is refused at once with one line: the run id, its
 * outcome, when, and what to do; while its agents leave, and once they are gone (kept with
 * --keep-ended). A job that was cancelled is not: a scheduler's requeue runs under the same id. */
static void test_join_to_an_ended_job_is_told_its_outcome(void)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 3};
    struct fake f[2] = {0}, late = {0}, later = {0}, g[1] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 0);
    char err[512];
    struct env e;

    env_init(&e, -1);
    keep_ended(&e, 60000, 10);
    join_n(&e, f, 2, jn);
    w.rank = f[0].round.rank_offset;
    ASSERT_OK(jt_member_worker_exit(f[0].m, &w, err, sizeof(err)));
    ASSERT_TRUE(event_is(&f[1], "failed"));
    jn = join_of(2, 2, 2, 0);
    ASSERT_EQ(join_err(&e, &late, &jn, err, sizeof(err)), -EBUSY);
    ASSERT_TRUE(strstr(err, "job 'job' has ended: it failed at 20") != NULL);
    ASSERT_TRUE(strstr(err, "Z (exit code 3), and this agent started before that; to run it "
                            "again, start its agents again (an agent started after the end runs "
                            "a new job). Its outcome: root cause: worker rank ") != NULL);
    /* Told as an EVENT of the outcome, the line its summary: its agent exits as the job did. */
    ASSERT_TRUE(event_is(&late, "failed"));
    ASSERT_EQ(late.event.exit_code, 3);
    ASSERT_TRUE(strcmp(late.event.summary, err) == 0);
    for (int i = 0; i < 2; i++)
        jt_gone(f[i].m);
    ASSERT_EQ(njobs(&e), 1); /* kept as ended */
    jn = join_of(3, 2, 2, 0);
    memset(err, 0, sizeof(err));
    ASSERT_EQ(join_err(&e, &later, &jn, err, sizeof(err)), -EBUSY);
    ASSERT_TRUE(strstr(err, "job 'job' has ended: it failed at ") != NULL);
    ASSERT_TRUE(event_is(&later, "failed"));
    ASSERT_NULL(later.m);

    /* Cancelled: the same id may run again. */
    jn = join_of(0, 1, 1, 0);
    snprintf(jn.run_id, sizeof(jn.run_id), "requeued");
    join_n(&e, g, 1, jn);
    jt_member_cancel(g[0].m, SIGTERM, "scancel", "");
    ASSERT_TRUE(event_is(&g[0], "cancelled"));
    jt_gone(g[0].m);
    memset(g, 0, sizeof(g));
    join_n(&e, g, 1, jn);
    ASSERT_NOT_NULL(g[0].m);
    env_done(&e);
}

/* 300 other jobs end, past the ends kept in memory (--keep-ended-max, 100 here) and in the job
 * table (RDZVD_JOB_ENDS_KEPT). */
static void other_jobs_end(struct env *e)
{
    struct rdzvd_job_record other = {.has_end = true};

    for (int k = 0; k < RDZVD_JOB_ENDS_KEPT + 44; k++) {
        snprintf(other.run_id, sizeof(other.run_id), "other-%d", k);
        rdzvd_job_end_set(&other.end, other.run_id, "succeeded", 0, "", jt_wall_s(), 1,
                          0);
        ASSERT_OK(rdzvd_job_decide(e->h.record_table, RDZVD_DECIDE_ENDED, &other));
        rdzvd_ended_jobs_add_recorded(&e->ended, &other.end, jt_clock());
    }
}

/* A cancelled job never comes back: with --state-dir, job J runs on one node; its agent's
 * connection drops (its
 * workers go on); the operator cancels J; 300 other jobs end, past the ends kept in memory
 * (--keep-ended-max, 100 here) and in the job table (RDZVD_JOB_ENDS_KEPT). The agent's resume
 * is refused: J has no record, so it ended; it was taken ("JOINED resumed") and J ran again. */
static void test_cancelled_job_never_comes_back(void)
{
    struct fake f[1] = {0}, back = {0};
    struct rdzv_join jn = join_of(0, 1, 1, 3);
    char err[512], path[64];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    env_init(&e, fd);
    keep_ended(&e, 3600000, 100);
    join_n(&e, f, 1, jn);
    ASSERT_EQ(f[0].round.generation, 1);
    jt_gone(f[0].m); /* its connection dropped: J waits in its record */
    ASSERT_EQ(njobs(&e), 0);
    ASSERT_OK(jt_jobs_cancel(&e.h, "job", "the operator's", err, sizeof(err)));
    other_jobs_end(&e);
    jn = join_of(0, 1, 1, 3);
    jn.resume = (struct rdzv_resume){.generation = 1, .nnodes = 1, .world_size = 2,
                                     .master_port = 41000};
    jn.age_ms = 600000; /* its agent started before the end */
    ASSERT_EQ(join_err(&e, &back, &jn, err, sizeof(err)), -ESTALE);
    ASSERT_TRUE(strstr(err, "job 'job' has ended, or ran on another rdzvd: it has no record "
                            "here; to run it again, start its line again (a new run)") != NULL);
    ASSERT_EQ(back.njoined, 0);
    ASSERT_NULL(rdzvd_job_view(&e.jobs, "job"));
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* The same for an agent that stopped its workers for a restart (its READY went): it comes back
 * with a plain JOIN, which says its workers ran a generation (1.20, ran_incarnation: here of an
 * rdzvd since restarted). J has no record in the job table, which keeps one from a job's first
 * ROUND to its end: it ended (found by test-job-sim, case7-restart-after-the-end-falls-out). It
 * made a new job of J. */
static void test_cancelled_job_never_comes_back_to_a_plain_join(void)
{
    struct fake f[2] = {0}, back = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    char err[512], path[64];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    env_init(&e, fd);
    keep_ended(&e, 3600000, 100);
    join_n(&e, f, 2, jn);
    jt_gone(f[1].m); /* a restart: node 0 stops its workers, says so, and waits */
    jt_ready(f[0].m, 1);
    ASSERT_EQ(f[0].nrounds, 1);
    jt_gone(f[0].m); /* its connection dropped: J waits in its record */
    ASSERT_OK(jt_jobs_cancel(&e.h, "job", "the operator's", err, sizeof(err)));
    other_jobs_end(&e);
    jn.age_ms = 600000; /* its agent started before the end */
    jn.ran_incarnation = 5;
    ASSERT_EQ(join_err(&e, &back, &jn, err, sizeof(err)), -ESTALE);
    ASSERT_TRUE(strstr(err, "job 'job' has ended, or ran on another rdzvd: it has no record "
                            "here; to run it again, start its line again (a new run)") != NULL);
    ASSERT_EQ(back.njoined, 0);
    ASSERT_NULL(rdzvd_job_view(&e.jobs, "job"));
    jn.ran_incarnation = 0; /* an agent before 1.20, or one whose workers never ran */
    ASSERT_OK(join(&e, &back, &jn));
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* S4: rdzvd starts a job that ended afresh for an agent that started after it
 * ended (JOIN age_ms): a new run of the same line, whether an agent hosted rdzvd for its job
 * (--exit-when-idle) or it serves many runs. An agent that started before the end (a late node
 * of that run), or one that does not say its age, is told the outcome. Before, only the rdzvd
 * an agent hosted did so; any other refused the same line for --keep-ended (an hour), and every
 * torchrun-style line without an id (the id "none") with it. */
static void test_a_new_run_after_the_end_starts_afresh(void)
{
    struct fake f[1] = {0}, old = {0}, mute = {0}, again[1] = {0}, more[1] = {0};
    struct rdzv_join jn = join_of(0, 1, 1, 0);
    char err[512];
    struct env e;

    env_init(&e, -1);
    keep_ended(&e, 60000, 10);
    one_run_succeeds(&e, f, jn);
    run_ms(&e, 50);
    jn = join_of(1, 1, 1, 0);
    jn.age_ms = 60000; /* started a minute ago: before the job ended */
    ASSERT_EQ(join_err(&e, &old, &jn, err, sizeof(err)), -EBUSY);
    ASSERT_TRUE(strstr(err, "job 'job' has ended: it succeeded at ") != NULL);
    jn.age_ms = 0; /* an older agent: unknown */
    ASSERT_EQ(join_err(&e, &mute, &jn, err, sizeof(err)), -EBUSY);
    jn = join_of(2, 1, 1, 0);
    jn.age_ms = 10; /* started after the end */
    join_n(&e, again, 1, jn);
    ASSERT_NOT_NULL(again[0].m);
    all_ready(again, 1, 1);
    ASSERT_EQ(again[0].round.generation, 1u); /* a job of its own, from generation 1 */
    jt_leave(again[0].m, 1, true);
    ASSERT_TRUE(event_is(&again[0], "succeeded"));
    jt_gone(again[0].m);
    run_ms(&e, 3000); /* the line again 3 s after its run succeeded: a new run again */
    jn = join_of(3, 1, 1, 0);
    jn.age_ms = 100;
    join_n(&e, more, 1, jn);
    ASSERT_NOT_NULL(more[0].m);
    all_ready(more, 1, 1);
    ASSERT_EQ(more[0].round.generation, 1u);
    ASSERT_EQ(more[0].round.restart_count, 0);
    env_done(&e);
}

/* Case 7 (S4): the same line started again while the job that ended is still in memory, its
 * node away (rdzvd stalled, then its connection closed: kept to be told the outcome until its
 * heartbeat deadline), is a new run. Before, it was refused with "this agent started before
 * that", which it had not. */
static void test_a_new_run_while_the_ended_job_keeps_its_away_node(void)
{
    struct env e;
    char err[512];
    struct fake f[1] = {0}, again[1] = {0};

    env_init(&e, -1);
    keep_ended(&e, 60000, 10);
    join_n(&e, f, 1, join_of(0, 1, 1, 0));
    all_ready(f, 1, 1);
    rdzvd_member_mark_stall(f[0].m);
    jt_gone(f[0].m);
    ASSERT_OK(jt_jobs_cancel(&e.h, "job", "op", err, sizeof(err)));
    ASSERT_EQ(rdzvd_job_view(&e.jobs, "job")->state, JOB_ENDED); /* it waits for f's agent */
    run_ms(&e, 5);
    {
        struct rdzv_join jn = join_of(1, 1, 1, 0);

        jn.age_ms = 2; /* started after the end */
        ASSERT_OK(join_err(&e, &again[0], &jn, err, sizeof(err)));
    }
    all_ready(again, 1, 1);
    ASSERT_EQ(again[0].round.generation, 1u); /* a job of its own */
    ASSERT_EQ(rdzvd_job_view(&e.jobs, "job")->state, JOB_RUNNING);
    env_done(&e);
}

/* While the agents of a job that ended are still connected (leaving), an agent started after the
 * end is of a new run: it is refused with why (ERROR), not told the old run's end as its own;
 * one started before the end is told it (an EVENT, X1). */
static void test_a_new_run_while_the_ended_jobs_agents_leave(void)
{
    struct fake f[2] = {0}, late = {0}, next = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 0);
    char err[512];
    struct env e;

    env_init(&e, -1);
    join_n(&e, f, 2, jn);
    all_ready(f, 2, 1);
    for (int i = 0; i < 2; i++)
        jt_leave(f[i].m, 1, true);
    ASSERT_TRUE(event_is(&f[0], "succeeded"));
    run_ms(&e, 2000);
    jn = join_of(3, 2, 2, 0);
    jn.age_ms = 1000; /* started after the end */
    ASSERT_EQ(join_err(&e, &next, &jn, err, sizeof(err)), -EAGAIN);
    ASSERT_EQ(next.nevents, 0);
    ASSERT_TRUE(strstr(err, "its agents are still leaving; this agent started after that end")
                != NULL);
    jn = join_of(4, 2, 2, 0);
    jn.age_ms = 60000; /* started before the end */
    ASSERT_EQ(join_err(&e, &late, &jn, err, sizeof(err)), -EBUSY);
    ASSERT_TRUE(event_is(&late, "succeeded"));
    env_done(&e);
}

/* Case 7 (S4): a new run's end soon after the last run's is kept too. The last run succeeded;
 * the line started again is a new run; its node's connection drops, and the operator cancels the
 * job waiting in its record, a moment after the first end. The agent of that new run (started
 * before the cancel) comes back with a plain JOIN: it is told the cancel. Before, the cancel was
 * taken for the first end read back (within 2 s of it) and not kept, and the agent, started
 * after the first end, ran the job again as a new run. */
static void test_a_new_runs_end_soon_after_the_last_is_told(void)
{
    char err[512], path[64];
    int fd = jt_state_dir(path, sizeof(path));
    struct rdzv_join jn = join_of(0, 1, 1, 1);
    struct fake f[1] = {0}, again[1] = {0}, back = {0};
    struct env e;

    env_init(&e, fd);
    e.h.keep_end = rdzvd_ended_jobs_add_recorded; /* the job table's ends, as rdzvd keeps them */
    keep_ended(&e, 60000, 10);
    one_run_succeeds(&e, f, jn);
    run_ms(&e, 50);
    jn = join_of(1, 1, 1, 1);
    jn.age_ms = 10; /* started after the end: a new run */
    join_n(&e, again, 1, jn);
    all_ready(again, 1, 1);
    ASSERT_EQ(again[0].round.generation, 1u);
    jt_gone(again[0].m); /* its connection dropped: the job waits in its record */
    ASSERT_NULL(rdzvd_job_view(&e.jobs, "job"));
    ASSERT_OK(jt_jobs_cancel(&e.h, "job", "op", err, sizeof(err)));
    jn.age_ms = 20; /* the same agent, its workers stopped: after the first end, before this */
    ASSERT_EQ(join_err(&e, &back, &jn, err, sizeof(err)), -EBUSY);
    ASSERT_TRUE(strstr(err, "job 'job' has ended: it cancelled at ") != NULL);
    ASSERT_EQ(back.njoined, 0);
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* The job's record keeps each node's dated failures ("history_fails", beside "history"), and
 * reads a record without them (an older rdzvd's) with none; a malformed one is no record. */
static void test_record_keeps_failure_dates(void)
{
    static const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    static const char old[] =
        "{\"run_id\":\"o\",\"min\":2,\"max\":2,\"max_restarts\":3,\"generation\":2,"
        "\"restart_count\":1,\"running\":false,\"nnodes\":0,\"world_size\":0,\"store_port\":0,"
        "\"history\":[[\"n-a\",\"ha\",1,false,\"\"]]%s}";
    struct rdzvd_job_record_hist h = {.node_id = "n-a", .host = "ha", .failures = 1};
    struct rdzvd_job_record a = {.run_id = "o", .min = 2, .max = 2, .max_restarts = 3,
                                 .generation = 2, .restart_count = 1, .n_hist = 1, .hist = &h};
    struct rdzvd_job_record got = {.generation = 0};
    struct rdzvd_store *t = NULL;
    char text[512];

    ASSERT_OK(rdzvd_store_new(&lim, NULL, &t));
    h.fails[0] = (struct rdzvd_job_record_fail){1764000000123, 5, 1, 8, true, true};
    h.fails[1] = (struct rdzvd_job_record_fail){1764000000456, 3, 1, 4, false, false};
    h.n_fails = 2;
    ASSERT_OK(rdzvd_job_record_put(t, &a));
    ASSERT_OK(rdzvd_job_record_get(t, "o", &got));
    ASSERT_EQ(got.n_hist, 1);
    ASSERT_EQ(got.hist[0].n_fails, 2);
    ASSERT_MEMEQ(got.hist[0].fails, h.fails, 2 * sizeof(h.fails[0]));
    rdzvd_job_record_clear(&got);

    snprintf(text, sizeof(text), old, "");
    ASSERT_OK(rdzvd_store_set(t, "job/o", 5, text, strlen(text)));
    ASSERT_OK(rdzvd_job_record_get(t, "o", &got));
    ASSERT_EQ(got.hist[0].failures, 1);
    ASSERT_EQ(got.hist[0].n_fails, 0);
    rdzvd_job_record_clear(&got);
    snprintf(text, sizeof(text), old, ",\"history_fails\":[[],[]]"); /* 2 for 1 entry */
    ASSERT_OK(rdzvd_store_set(t, "job/o", 5, text, strlen(text)));
    ASSERT_EQ(rdzvd_job_record_get(t, "o", &got), -EBADMSG);
    snprintf(text, sizeof(text), old, ",\"history_fails\":[[[-5,0,0,2,true,false]]]");
    ASSERT_OK(rdzvd_store_set(t, "job/o", 5, text, strlen(text)));
    ASSERT_EQ(rdzvd_job_record_get(t, "o", &got), -EBADMSG);
    rdzvd_store_free(t);
}

/* f's local rank 0 reports step 'step', computed in compute_ms, age_ms ago (its heartbeat's
 * progress), and rdzvd scores it. */
static void report_step(struct fake *f, int64_t step, int64_t compute_ms, int64_t age_ms)
{
    struct rdzv_heartbeat *hb = calloc(1, sizeof(*hb));

    ASSERT_NOT_NULL(hb);
    *hb = (struct rdzv_heartbeat){.generation = 1, .n_progress = 2};
    for (int i = 0; i < 2; i++)
        hb->progress[i] = (struct rdzv_rank_progress){
            .local_rank = i, .step = step, .age_ms = age_ms, .has_compute = true,
            .compute_ms = i == 0 ? compute_ms : 100};
    jt_progress(f->m, hb);
    free(hb);
}

/* Whether the node of f is a straggler in the status. */
static bool named_straggler(struct env *e, const struct fake *f)
{
    struct rdzv_status st;
    const struct rdzv_status_job *j = status_of(e, &st);
    bool named = false;

    for (size_t i = 0; i < j->n_nodes; i++)
        if (j->nodes[i].node_rank == f->round.node_rank)
            named = j->nodes[i].straggler;
    rdzv_status_free(&st);
    return named;
}

/* --straggler-window counts from when the node slowed, not from when its ranks' medians (each of
 * its last 8 steps) moved, half a window of steps later. Node b's rank 0 computes 100 ms a step,
 * then 300 ms from step 4, reported 6 s ago (its steps 1.5 s apart): once the job's median is
 * made (at most every RDZVD_STRAGGLER_MEDIAN_MS) it is named at the check that first scores it,
 * with a 5 s window. Not named: a node whose last step is fast again, however slow the steps
 * before it; nor one slowing with the others (node a slows too, its median still to turn): its
 * window counts from the check. */
static void test_straggler_window_counts_from_the_slowing(void)
{
    enum { STRAGGLER, FAST_AGAIN, ALL_SLOW } c;
    struct rdzv_join jn = join_of(0, 2, 2, 3);

    jn.straggler_factor = 1.3;
    jn.straggler_window_ms = 5000;
    for (c = STRAGGLER; c <= ALL_SLOW; c++) {
        struct fake f[2] = {0};
        struct env e;

        env_init(&e, -1);
        join_n(&e, f, 2, jn);
        for (int64_t k = 0; k < 8; k++) {
            int64_t age = (7 - k) * 1500;

            report_step(&f[0], k + 1, c == ALL_SLOW && k >= 6 ? 300 : 100, age);
            report_step(&f[1], k + 1, k >= 3 && !(c == FAST_AGAIN && k == 7) ? 300 : 100, age);
            ASSERT_FALSE(named_straggler(&e, &f[1])); /* no median yet: not scored */
        }
        run_ms(&e, RDZVD_STRAGGLER_MEDIAN_MS + 100);
        report_step(&f[0], 9, c == ALL_SLOW ? 300 : 100, 0);
        report_step(&f[1], 9, c == FAST_AGAIN ? 100 : 300, 0);
        ASSERT_FALSE(named_straggler(&e, &f[0]));
        /* slow since step 4, reported 7.1 s ago */
        ASSERT_EQ(named_straggler(&e, &f[1]), c == STRAGGLER);
        env_done(&e);
    }
}

int main(void)
{
    rdzv_log_setup("test-job-verdicts", RDZV_LOG_ERROR);
    TEST(test_window_forgets_old_failures);
    TEST(test_failure_that_follows_a_rank_is_the_jobs);
    TEST(test_startup_failures_put_aside_without_spare);
    TEST(test_every_node_failing_at_startup_is_the_jobs);
    TEST(test_start_up_verdict_waits_for_every_report);
    TEST(test_startup_failure_restart_carries_a_grace);
    TEST(test_startup_failures_in_the_grace_are_alike);
    TEST(test_start_up_failure_of_some_nodes_is_theirs);
    TEST(test_start_up_errors_tell_a_bad_node);
    TEST(test_restarts_back_off);
    TEST(test_join_to_an_ended_job_is_told_its_outcome);
    TEST(test_cancelled_job_never_comes_back);
    TEST(test_cancelled_job_never_comes_back_to_a_plain_join);
    TEST(test_a_new_run_after_the_end_starts_afresh);
    TEST(test_a_new_runs_end_soon_after_the_last_is_told);
    TEST(test_a_new_run_while_the_ended_job_keeps_its_away_node);
    TEST(test_a_new_run_while_the_ended_jobs_agents_leave);
    TEST(test_record_keeps_failure_dates);
    TEST(test_straggler_window_counts_from_the_slowing);
    return tap_done();
}
