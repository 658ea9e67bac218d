/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-inplace.c: how a job with --recovery inplace ends (job-policy R17a), driven with fake
 * agents (jobtest.h). A restart in place keeps the survivors' workers; a newcomer placed in
 * the new generation starts fresh ones. Once every survivor has left succeeded, training is
 * over: the job ends succeeded, and the newcomer is told so rather than left waiting. */
#include "common/rdzv-log.h"
#include "jobtest.h"

/* Nodes 0 and 1 run generation 1 (--scale-up now); node 2 joins, and at its HEARTBEAT rdzvd
 * restarts to scale up: every member is told EVENT restart. */
static void scale_up_restart(struct env *e, struct fake *f, bool inplace)
{
    struct rdzv_join jn = join_of(0, 2, 3, 0);

    env_init(e, -1);
    jn.last_call_ms = 10;
    jn.scale_up_now = true;
    jn.inplace = inplace;
    join_n(e, f, 2, jn);
    for (int t = 0; t < 50 && !f[0].nrounds; t++)
        run_ms(e, 10);
    ASSERT_EQ(f[0].round.nnodes, 2);
    jn = join_of(2, 2, 3, 0);
    jn.scale_up_now = true;
    jn.inplace = inplace;
    ASSERT_OK(join(e, &f[2], &jn));
    jt_heartbeat(f[2].m);
    ASSERT_TRUE(event_is(&f[0], "restart"));
}

/* The scale-up race (issue 74): node 2 joins as the survivors run their last steps. The
 * survivors, told generation 2 in place, finish generation 1 and leave succeeded; node 2's
 * workers would wait in generation 2 for peers that are done. The job ends succeeded. */
static void survivors_done(bool stepped)
{
    struct fake f[3] = {0};
    struct env e;

    scale_up_restart(&e, f, true);
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
    /* The idle newcomer's agent gives its workers a while (A19a); the summary says so. */
    if (!stepped)
        ASSERT_TRUE(strstr(f[2].event.summary, "1 newcomer node, with no step reported, has "
                                               "30 s to end on its own") != NULL);
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

/* Nodes 0 and 1 form generation 1 (--nnodes 2:max, in place, --scale-up now), then nodes 2 to
 * n - 1 join and generation 2 forms with them: newcomers whose workers report no step. */
static void scale_up_idle(struct env *e, struct fake *f, int n, int64_t max)
{
    for (int i = 0; i < n; i++) {
        struct rdzv_join jn = join_of(i, 2, max, 3);

        jn.last_call_ms = 10;
        jn.scale_up_now = true;
        jn.inplace = true;
        ASSERT_OK(join(e, &f[i], &jn));
        for (int t = 0; t < 50 && i == 1 && !f[0].nrounds; t++)
            run_ms(e, 10);
        if (i >= 2)
            jt_heartbeat(f[i].m);
    }
    all_ready(f, 2, 1);
    for (int t = 0; t < 50 && f[n - 1].round.generation != 2; t++)
        run_ms(e, 10);
    ASSERT_EQ(f[n - 1].round.generation, 2);
}

/* A newcomer stays one while its fresh workers report no step: generation 2 (node 2 joined)
 * never stepped, node 0 failed, and generation 3 re-forms in place. The survivors' workers
 * finished and leave succeeded: node 2, whose workers never trained, is not waited for (R17a).
 * Counted as a survivor of generation 3, it kept the job waiting for ever (the cluster
 * simulator's seed=9958 f=2524:join:3:0 f=2454:slow:1:1 f=3356:part:0:17801). */
static void test_idle_newcomer_stays_one(void)
{
    struct fake f[3] = {0};
    struct rdzv_worker_exit w = {.generation = 2, .exit_code = 1};
    struct env e;

    env_init(&e, -1);
    scale_up_idle(&e, f, 3, 3);
    jt_worker_exit(&f[0], &w);
    ASSERT_TRUE(event_is(&f[2], "restart"));
    all_ready(f, 3, 2);
    for (int t = 0; t < 50 && f[2].round.generation != 3; t++)
        run_ms(&e, 10);
    ASSERT_EQ(f[2].round.generation, 3);
    jt_leave(f[0].m, 3, true);
    jt_leave(f[1].m, 3, true);
    ASSERT_TRUE(event_is(&f[2], "succeeded"));
    env_done(&e);
}

/* A newcomer that left succeeded counts as a survivor (R17a): its workers ran to their end.
 * Nodes 2 and 3 join, generation 2 never steps, and nodes 0 and 1 are gone: generation 3 has
 * newcomers only. Node 2 leaves succeeded; node 3's idle workers are not waited for. */
static void test_newcomer_that_left_is_a_survivor(void)
{
    struct fake f[4] = {0};
    struct env e;

    env_init(&e, -1);
    scale_up_idle(&e, f, 4, 4);
    jt_gone(f[0].m);
    jt_gone(f[1].m);
    f[0].closed = f[1].closed = true;
    all_ready(f, 4, 2);
    for (int t = 0; t < 100 && f[3].round.generation != 3; t++)
        run_ms(&e, 10);
    ASSERT_EQ(f[3].round.generation, 3);
    jt_leave(f[2].m, 3, true);
    ASSERT_TRUE(event_is(&f[3], "succeeded"));
    env_done(&e);
}

/* Generation 2 of scale_up_idle (node 2 idle beside the survivors) in state directory fd; rdzvd
 * restarts on it and rebuilds the job from its record, and node i resumes in turn, its resume
 * saying left (its workers done while rdzvd was away) for i < nleft. each(f, i) runs after
 * node i is back (NULL: nothing). */
static void newcomer_across_a_restart(struct env *e, struct fake *f, int fd, int nleft,
                                      void (*each)(struct fake *f, int i))
{
    char secrets[3][RDZV_SECRET_HEX + 1];

    env_init(e, fd);
    scale_up_idle(e, f, 3, 3);
    for (int i = 0; i < 3; i++)
        memcpy(secrets[i], e->secrets[i], sizeof(secrets[i]));
    env_done(e);
    env_init(e, fd); /* rdzvd restarts on its state directory */
    jt_rebuild(&e->h);
    for (int i = 0; i < 3; i++) {
        struct rdzv_join jn = join_of(i, 2, 3, 3);
        const struct rdzv_round *rd = &f[i].round;

        memcpy(e->secrets[i], secrets[i], sizeof(secrets[i]));
        jn.inplace = jn.scale_up_now = true;
        jn.resume = (struct rdzv_resume){.generation = 2, .node_rank = rd->node_rank,
                                         .nnodes = rd->nnodes, .rank_offset = rd->rank_offset,
                                         .world_size = rd->world_size,
                                         .restart_count = rd->restart_count,
                                         .master_port = rd->master_port, .left = i < nleft};
        ASSERT_OK(join(e, &f[i], &jn));
        ASSERT_TRUE(f[i].resumed);
        if (each)
            each(f, i);
    }
}

/* Who is a newcomer outlives an rdzvd restart on its --state-dir: the job's record says it of
 * each node of the generation. Generation 2 (node 2 idle beside the survivors) is rebuilt from
 * the record; its three nodes resume, the survivors leave succeeded, and the job ends without
 * waiting for node 2, whose workers would wait for peers that are done. */
static void test_idle_newcomer_outlives_an_rdzvd_restart(void)
{
    char path[64];
    struct fake f[3] = {0};
    struct env e;
    int fd = jt_state_dir(path, sizeof(path));

    newcomer_across_a_restart(&e, f, fd, 0, NULL);
    jt_leave(f[0].m, 2, true);
    jt_leave(f[1].m, 2, true);
    ASSERT_TRUE(event_is(&f[2], "succeeded"));
    ASSERT_TRUE(strstr(f[2].event.summary, "1 newcomer node") != NULL);
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* The job ends only as the last node of the rebuilt generation comes back. */
static void ends_at_the_last(struct fake *f, int i)
{
    ASSERT_EQ(event_is(&f[0], "succeeded"), i == 2);
}

/* The same when the survivors come back first, their workers done while rdzvd was away (their
 * resumes say left): the job cannot end before the generation is whole again, and it ends as
 * the newcomer comes back, with no LEAVE after it. */
static void test_survivors_back_done_before_the_newcomer(void)
{
    char path[64];
    struct fake f[3] = {0};
    struct env e;
    int fd = jt_state_dir(path, sizeof(path));

    newcomer_across_a_restart(&e, f, fd, 2, ends_at_the_last);
    ASSERT_TRUE(event_is(&f[2], "succeeded"));
    ASSERT_TRUE(strstr(f[2].event.summary, "1 newcomer node") != NULL);
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* The record's newcomers (rdzvd-job-record.h): node ranks of its nodes, each once, beside
 * "nodes"; they come back as put, and a record with any other reads as none (-EBADMSG). */
static void test_newcomers_in_the_record(void)
{
    static const char *const bad[] = {
        "\"nodes\":[[\"x\",8],[\"y\",8],[\"z\",8]],\"newcomers\":[3]",   /* no node rank 3 */
        "\"nodes\":[[\"x\",8],[\"y\",8],[\"z\",8]],\"newcomers\":[1,1]", /* twice */
        "\"nodes\":[[\"x\",8],[\"y\",8],[\"z\",8]],\"newcomers\":[\"1\"]", /* a string */
        "\"nodes\":[[\"x\",8],[\"y\",8],[\"z\",8]],\"newcomers\":1",     /* no array */
        "\"newcomers\":[0]",                                                 /* no nodes */
    };
    static const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_job_record_node nodes[3] = {{"x", 8}, {"y", 8, true}, {"z", 8, true}};
    struct rdzvd_job_record a = {.min = 2, .max = 4, .max_restarts = 3, .generation = 7,
                                 .running = true, .nnodes = 3, .world_size = 24,
                                 .nodes = nodes},
                            got;
    struct rdzvd_store *t = NULL;
    char text[1024];

    ASSERT_OK(rdzvd_store_new(&lim, NULL, &t));
    rdzvd_store_set_decision_fn(t, rdzvd_decision_apply, NULL);
    snprintf(a.run_id, sizeof(a.run_id), "nc");
    ASSERT_OK(rdzvd_job_record_put(t, &a));
    ASSERT_OK(rdzvd_job_record_get(t, "nc", &got));
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(got.nodes[i].newcomer, i > 0);
    rdzvd_job_record_clear(&got);
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        int n = snprintf(text, sizeof(text),
                         "{\"run_id\":\"nc\",\"min\":2,\"max\":4,\"max_restarts\":3,"
                         "\"generation\":7,\"restart_count\":1,\"running\":true,\"nnodes\":3,"
                         "\"world_size\":24,%s}",
                         bad[k]);

        ASSERT_OK(rdzvd_store_set(t, "job/nc", 6, text, (size_t)n));
        memset(&got, 0, sizeof(got));
        ASSERT_EQ(rdzvd_job_record_get(t, "nc", &got), -EBADMSG);
        ASSERT_NULL(got.nodes); /* nothing left allocated */
    }
    rdzvd_store_free(t);
}

/* Without --recovery inplace, every node of the generation leaves before the job succeeds. */
static void test_restart_waits_for_every_node(void)
{
    struct fake f[3] = {0};
    struct env e;

    scale_up_restart(&e, f, false);
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

/* The scale-up restart as the job ends (R17c, cluster-traces/scale-up-at-the-end.trace): node 0's
 * workers all exit 0 as the restart for node 2 begins, and its LEAVE of generation 1 crosses the
 * EVENT restart. Training is over: once generation 1 has stopped, the job ends succeeded rather
 * than re-forming generation 2, whose fresh workers would wait for peers that are done. The
 * same with and without --recovery inplace. */
static void leave_across_scale_up(bool inplace)
{
    struct fake f[3] = {0};
    struct env e;

    scale_up_restart(&e, f, inplace);
    jt_leave(f[0].m, 1, true);
    ASSERT_FALSE(event_is(&f[0], "succeeded")); /* node 1's workers are still stopping */
    all_ready(f, 2, 1);
    for (int t = 0; t < 50 && !f[2].nrounds; t++)
        run_ms(&e, 10);
    ASSERT_EQ(f[2].nrounds, 0);
    for (int i = 0; i < 3; i++)
        ASSERT_TRUE(event_is(&f[i], "succeeded"));
    env_done(&e);
}

static void test_leave_across_scale_up_ends_the_job(void)
{
    leave_across_scale_up(true);
    leave_across_scale_up(false);
}

/* The same for a restart for a node lost (cluster-traces/restart-at-the-end.trace): node 2's
 * agent is lost as the last step runs, and node 0's LEAVE of generation 1 crosses the restart.
 * A LEAVE succeeded means the last collective was done by every rank: the job ends succeeded. */
static void leave_across_lost_node(bool inplace)
{
    struct rdzv_join jn = join_of(0, 2, 3, 3);
    struct fake f[3] = {0};
    struct env e;

    env_init(&e, -1);
    jn.last_call_ms = 10;
    jn.inplace = inplace;
    join_n(&e, f, 3, jn);
    for (int t = 0; t < 50 && !f[0].nrounds; t++)
        run_ms(&e, 10);
    ASSERT_EQ(f[0].round.nnodes, 3);
    jt_gone(f[2].m);
    ASSERT_TRUE(event_is(&f[0], "restart"));
    jt_leave(f[0].m, 1, true);
    all_ready(f, 2, 1);
    for (int t = 0; t < 50 && f[1].nrounds < 2; t++)
        run_ms(&e, 10);
    ASSERT_EQ(f[1].nrounds, 1);
    for (int i = 0; i < 2; i++)
        ASSERT_TRUE(event_is(&f[i], "succeeded"));
    env_done(&e);
}

static void test_leave_across_a_lost_node_restart_ends_the_job(void)
{
    leave_across_lost_node(true);
    leave_across_lost_node(false);
}

/* Not when a worker failed (R17c): node 1's worker exits 1 after a step of generation 1 as the
 * scale-up restart begins (its WORKER_EXIT crosses the EVENT restart), before or after node 0's
 * LEAVE succeeded, or its agent reports it with a reason (hung). That is no success: generation 2
 * forms, as the restart meant. */
static void failure_across_scale_up(bool fail_first, const char *reason)
{
    struct rdzv_worker_exit w = {.generation = 1, .rank = 2, .exit_code = 1};
    struct fake f[3] = {0};
    struct env e;

    snprintf(w.reason, sizeof(w.reason), "%s", reason);
    scale_up_restart(&e, f, false);
    fake_step(&f[1]);
    if (fail_first)
        jt_worker_exit(&f[1], &w);
    jt_leave(f[0].m, 1, true);
    if (!fail_first)
        jt_worker_exit(&f[1], &w);
    all_ready(f, 2, 1);
    for (int t = 0; t < 50 && !f[2].nrounds; t++)
        run_ms(&e, 10);
    ASSERT_EQ(f[2].nrounds, 1);
    ASSERT_EQ(f[2].round.generation, 2);
    for (int i = 0; i < 3; i++)
        ASSERT_FALSE(event_is(&f[i], "succeeded"));
    env_done(&e);
}

static void test_failure_across_scale_up_is_no_success(void)
{
    failure_across_scale_up(true, "");
    failure_across_scale_up(false, "");
    failure_across_scale_up(false, "hung: no progress for 60 s (--progress-timeout)");
}

int main(void)
{
    rdzv_log_setup("test-job-inplace", RDZV_LOG_ERROR);
    TEST(test_survivors_done_end_the_job);
    TEST(test_newcomer_that_stepped_is_waited_for);
    TEST(test_idle_newcomer_stays_one);
    TEST(test_newcomer_that_left_is_a_survivor);
    TEST(test_idle_newcomer_outlives_an_rdzvd_restart);
    TEST(test_survivors_back_done_before_the_newcomer);
    TEST(test_newcomers_in_the_record);
    TEST(test_restart_waits_for_every_node);
    TEST(test_leave_across_scale_up_ends_the_job);
    TEST(test_leave_across_a_lost_node_restart_ends_the_job);
    TEST(test_failure_across_scale_up_is_no_success);
    return tap_done();
}
