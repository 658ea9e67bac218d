/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-inplace.c: how a job with --recovery inplace ends (job-policy R17a), driven with fake
 * agents (jobtest.h). A restart in place keeps the survivors' workers; a newcomer placed in
 * the new generation starts fresh ones. Once every survivor has left succeeded, training is
 * over: the job ends succeeded, and the newcomer is told so rather than left waiting. */
#include "common/rdzv-log.h"
#include "jobtest.h"

/* The scale-up race (issue 74): node 2 joins as the survivors run their last steps. The
 * survivors, told generation 2 in place, finish generation 1 and leave succeeded; node 2's
 * workers would wait in generation 2 for peers that are done. The job ends succeeded. */
static void survivors_done(bool stepped)
{
    struct fake f[3] = {0};
    struct rdzv_join jn = join_of(0, 2, 3, 0);
    struct env e;

    env_init(&e, -1);
    jn.last_call_ms = 10;
    jn.scale_up_now = true;
    jn.inplace = true;
    join_n(&e, f, 2, jn);
    for (int t = 0; t < 50 && !f[0].nrounds; t++)
        run_ms(&e, 10);
    ASSERT_EQ(f[0].round.nnodes, 2);
    jn = join_of(2, 2, 3, 0);
    jn.scale_up_now = true;
    jn.inplace = true;
    ASSERT_OK(join(&e, &f[2], &jn));
    jt_heartbeat(f[2].m);
    ASSERT_TRUE(event_is(&f[0], "restart"));
    all_ready(f, 2, 1);
    for (int t = 0; t < 50 && !f[2].nrounds; t++)
        run_ms(&e, 10);
    ASSERT_EQ(f[2].round.generation, 2);
    ASSERT_EQ(f[2].round.nnodes, 3);
    if (stepped)
        fake_step(&f[2]); /* it trained beside them: it finishes too */
    jt_leave(f[0].m, 2, true);
    ASSERT_FALSE(event_is(&f[2], "succeeded")); /* node 1's workers may still run */
    jt_leave(f[1].m, 2, true);
    ASSERT_EQ(event_is(&f[2], "succeeded"), !stepped);
    if (stepped)
        jt_leave(f[2].m, 2, true);
    for (int i = 0; i < 3; i++)
        ASSERT_TRUE(event_is(&f[i], "succeeded"));
    env_done(&e);
}

static void test_survivors_done_end_the_job(void)
{
    survivors_done(false);
}

/* A newcomer whose workers reported a step trained beside the survivors: the job waits for its
 * LEAVE (a rank of it may still write the last checkpoint). */
static void test_newcomer_that_stepped_is_waited_for(void)
{
    survivors_done(true);
}

/* Without --recovery inplace, every node of the generation leaves before the job succeeds. */
static void test_restart_waits_for_every_node(void)
{
    struct fake f[3] = {0};
    struct rdzv_join jn = join_of(0, 2, 3, 0);
    struct env e;

    env_init(&e, -1);
    jn.last_call_ms = 10;
    jn.scale_up_now = true;
    join_n(&e, f, 2, jn);
    for (int t = 0; t < 50 && !f[0].nrounds; t++)
        run_ms(&e, 10);
    jn = join_of(2, 2, 3, 0);
    jn.scale_up_now = true;
    ASSERT_OK(join(&e, &f[2], &jn));
    jt_heartbeat(f[2].m);
    all_ready(f, 2, 1);
    for (int t = 0; t < 50 && !f[2].nrounds; t++)
        run_ms(&e, 10);
    ASSERT_EQ(f[2].round.generation, 2);
    jt_leave(f[0].m, 2, true);
    jt_leave(f[1].m, 2, true);
    ASSERT_FALSE(event_is(&f[2], "succeeded"));
    jt_leave(f[2].m, 2, true);
    for (int i = 0; i < 3; i++)
        ASSERT_TRUE(event_is(&f[i], "succeeded"));
    env_done(&e);
}

int main(void)
{
    rdzv_log_setup("test-job-inplace", RDZV_LOG_ERROR);
    TEST(test_survivors_done_end_the_job);
    TEST(test_newcomer_that_stepped_is_waited_for);
    TEST(test_restart_waits_for_every_node);
    return tap_done();
}
