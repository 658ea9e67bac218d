/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-claims.c: a job that rdzvd, restarted without --state-dir, rebuilds from its agents'
 * resumes alone (job-policy W5), driven with fake agents (jobtest.h). Nothing on rdzvd tells a
 * stale claim from a true one: the first resume rebuilds the job. The newest resume wins
 * (W5a): a resume of a newer generation rebuilds the job again from it, and the nodes back in
 * the older generation are told it is over. Nor does rdzvd know whether the job ended while
 * the nodes back were away: one short of nodes when its rebuild window ends ends (R26a). A claim
 * of its generation or an older one that differs is another history: it rejoins (W5b). */
#include <errno.h>
#include <inttypes.h>

#include "common/rdzv-log.h"
#include "jobtest.h"

/* A resume of node i, at node rank rank of generation gen of nnodes nodes (2 workers each, no
 * restart), to a job of --nnodes 1:3; each generation's store on port 41000 + gen. */
static struct rdzv_join claim_of(int i, uint64_t gen, int64_t rank, int64_t nnodes)
{
    struct rdzv_join jn = join_of(i, 1, 3, 3);

    jn.resume = (struct rdzv_resume){.generation = gen,
                                     .node_rank = rank,
                                     .nnodes = nnodes,
                                     .rank_offset = 2 * rank,
                                     .world_size = 2 * nnodes,
                                     .master_port = 41000 + (int64_t)gen};
    return jn;
}

/* The stale resume of the cluster simulator's trace (stale-resume-rebuild.trace): node 2 lost
 * its connection in generation 2 (3 nodes) and never heard of generation 3, which nodes 0 and 1
 * run. rdzvd restarts without --state-dir, and node 2's resume comes first. */
static void test_newest_resume_wins_the_rebuild(void)
{
    struct fake f[3] = {0}, late = {0};
    struct rdzv_join jn = claim_of(2, 2, 2, 3);
    struct rdzv_worker_exit w = {.generation = 3, .exit_code = 1};
    char err[512];
    struct env e;

    env_init(&e, -1);
    ASSERT_OK(join(&e, &f[2], &jn));
    ASSERT_TRUE(f[2].resumed);
    ASSERT_EQ(f[2].joined_gen, 2);
    ASSERT_EQ(e.asked_port, 41002);
    jn = claim_of(0, 3, 0, 2);
    ASSERT_EQ(join_err(&e, &f[0], &jn, err, sizeof(err)), 0);
    ASSERT_TRUE(f[0].resumed);
    ASSERT_EQ(f[0].joined_gen, 3);
    ASSERT_EQ(e.asked_port, 41003); /* generation 3's store, where its workers look */
    ASSERT_EQ(e.stores_closed, 1);
    ASSERT_TRUE(event_is(&f[2], "restart"));
    ASSERT_EQ(f[2].event.generation, 2);
    ASSERT_TRUE(strstr(f[2].event.summary, "generation 2 is over (the job is at generation 3)"));
    jn = claim_of(1, 3, 1, 2);
    ASSERT_OK(join(&e, &f[1], &jn));
    ASSERT_TRUE(f[1].resumed);
    ASSERT_EQ(f[0].nevents + f[1].nevents, 0); /* generation 3's workers never stop */
    /* A resume of generation 2 now is one of a generation that is over (R3). */
    jn = claim_of(3, 2, 0, 3);
    ASSERT_OK(join(&e, &late, &jn));
    ASSERT_TRUE(late.spare);
    ASSERT_TRUE(strstr(late.event.summary, "generation 2 is over (the job is at generation 3)"));
    jt_ready(f[2].m, 2);
    jt_ready(late.m, 2);
    /* The next generation numbers on from the newest: 4, of 3 nodes. */
    jt_worker_exit(&f[0], &w);
    all_ready(f, 2, 3);
    for (int t = 0; t < 100 && !f[0].nrounds; t++)
        run_ms(&e, 100);
    ASSERT_EQ(f[0].round.generation, 4);
    ASSERT_EQ(f[0].round.nnodes, 3);
    ASSERT_EQ(f[0].round.restart_count, 1);
    env_done(&e);
}

/* The node the newest resume put out of its generation waits as a spare; the job succeeds on
 * the nodes of the newest. It is told it ran nothing since its generation was over (it ran
 * that one), not that it never ran. */
static void test_node_put_out_by_a_newer_resume_is_told_what_it_ran(void)
{
    struct fake f[3] = {0};
    struct rdzv_join jn = claim_of(2, 2, 2, 3);
    struct env e;

    env_init(&e, -1);
    ASSERT_OK(join(&e, &f[2], &jn));
    for (int i = 0; i < 2; i++) {
        jn = claim_of(i, 3, i, 2);
        ASSERT_OK(join(&e, &f[i], &jn));
        ASSERT_TRUE(f[i].resumed);
    }
    ASSERT_TRUE(event_is(&f[2], "restart"));
    jt_ready(f[2].m, 2);
    jt_leave(f[0].m, 3, true);
    jt_leave(f[1].m, 3, true);
    ASSERT_TRUE(event_is(&f[0], "succeeded"));
    ASSERT_TRUE(event_is(&f[2], "succeeded"));
    ASSERT_TRUE(strstr(f[2].event.summary, "this node ran nothing since its generation 2 was "
                                           "over: it waited as a spare, and job job succeeded "
                                           "on its other nodes") != NULL);
    env_done(&e);
}

/* The straggler of ended-job-runs-again.trace: the job ended while node 1's agent was cut off,
 * and rdzvd restarted without --state-dir. Node 1's resume rebuilds generation 1 of 2 nodes;
 * node 0's agent exited with the end and never comes back. The rebuilt generation, short of a
 * node, never forms another (R26a): once its rebuild window ends, or at a failure before that
 * (its hung worker's), the job ends failed, saying --state-dir. The budget (3) is not used. */
static void test_rebuilt_job_short_of_nodes_ends(void)
{
    for (int fail = 0; fail < 2; fail++) {
        struct fake f = {0};
        struct rdzv_join jn = claim_of(1, 1, 1, 2);
        struct rdzv_worker_exit w = {.generation = 1, .exit_code = 137};
        struct env e;

        env_init(&e, -1);
        jn.heartbeat_timeout_ms = 30;
        ASSERT_OK(join(&e, &f, &jn));
        ASSERT_TRUE(f.resumed);
        f.round.rank_offset = 2; /* its ranks, as its ROUND said */
        if (fail)
            jt_worker_exit(&f, &w);
        for (int t = 0; t < 50 && !f.nevents; t++) {
            jt_heartbeat(f.m);
            run_ms(&e, 10);
        }
        ASSERT_TRUE(event_is(&f, "failed"));
        ASSERT_EQ(f.event.exit_code, fail ? 137 : 1);
        ASSERT_TRUE(strstr(f.event.summary, fail ? "exited with code 137"
                                                 : "1 of 2 nodes of generation 1 did not "
                                                   "come back after rdzvd restarted"));
        ASSERT_TRUE(strstr(f.event.summary, "rdzvd restarted without --state-dir, which alone "
                                            "keeps a job's end, and rebuilt generation 1 from 1 "
                                            "of its 2 nodes"));
        ASSERT_EQ(f.nrounds, 0);
        env_done(&e);
    }
}

/* Once every node of a generation rebuilt from resumes is back, it is whole, and runs as any:
 * a node lost then is a restart (integration-ended-jobs's rebuild). */
static void test_whole_rebuild_restarts_as_any(void)
{
    struct fake f[2] = {0};
    struct env e;

    env_init(&e, -1);
    for (int i = 0; i < 2; i++) {
        struct rdzv_join jn = claim_of(i, 1, i, 2);

        ASSERT_OK(join(&e, &f[i], &jn));
        ASSERT_TRUE(f[i].resumed);
    }
    jt_gone(f[1].m);
    ASSERT_TRUE(event_is(&f[0], "restart"));
    env_done(&e);
}

/* Two histories under one job id (seed 23232 of the cluster simulator): rdzvd restarted without
 * --state-dir before nodes 0 and 1 were back, and node 2's plain JOIN made the job anew: its
 * generation 1 of 1 node. rdzvd restarted again, and node 0's resume of the first history's
 * generation 1 (2 nodes) came first. Node 2's claim of a generation 1 of 1 node is then another
 * history: there is no record to refuse it by, and it is told its generation is over, and
 * rejoins as a new member (W5b). */
static void test_a_claim_of_another_history_rejoins(void)
{
    struct fake f[3] = {0}, late = {0};
    struct rdzv_join jn = claim_of(0, 1, 0, 2);
    char err[512];
    struct env e;

    env_init(&e, -1);
    ASSERT_OK(join(&e, &f[0], &jn));
    ASSERT_TRUE(f[0].resumed);
    jn = claim_of(2, 1, 0, 1);
    ASSERT_EQ(join_err(&e, &f[2], &jn, err, sizeof(err)), 0);
    ASSERT_TRUE(f[2].spare);
    ASSERT_TRUE(event_is(&f[2], "restart"));
    ASSERT_TRUE(strstr(f[2].event.summary, "generation 1 of 1 nodes (restart 0) is not the job's "
                                           "(2 nodes, restart 0)"));
    ASSERT_EQ(f[0].nevents, 0); /* the first history's workers go on */
    /* A claim past the job's generation, once it is whole, is still refused (E0-11). */
    jn = claim_of(1, 1, 1, 2);
    ASSERT_OK(join(&e, &f[1], &jn));
    jn = claim_of(3, 5, 0, 1);
    ASSERT_TRUE(join_err(&e, &late, &jn, err, sizeof(err)) < 0);
    ASSERT_TRUE(strstr(err, "generation 5 (restart 0, 1 nodes) is not job 'job' as its record"));
    env_done(&e);
}

int main(void)
{
    rdzv_log_setup("test-job-claims", RDZV_LOG_ERROR);
    TEST(test_newest_resume_wins_the_rebuild);
    TEST(test_node_put_out_by_a_newer_resume_is_told_what_it_ran);
    TEST(test_rebuilt_job_short_of_nodes_ends);
    TEST(test_whole_rebuild_restarts_as_any);
    TEST(test_a_claim_of_another_history_rejoins);
    return tap_done();
}
