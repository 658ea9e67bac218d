/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-claims.c: a job that rdzvd, restarted without --state-dir, rebuilds from its agents'
 * resumes alone (job-policy W5), driven with fake agents (jobtest.h). Nothing on rdzvd tells a
 * stale claim from a true one: the first resume rebuilds the job. The newest resume wins
 * (W5a): a resume of a newer generation rebuilds the job again from it, and the nodes back in
 * the older generation are told it is over. */
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

int main(void)
{
    rdzv_log_setup("test-job-claims", RDZV_LOG_ERROR);
    TEST(test_newest_resume_wins_the_rebuild);
    return tap_done();
}
