/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-rebuilt-end.c: how a generation ends when some of its nodes are done and gone (job-
 * policy R17b), as it ran or rebuilt after an rdzvd restart or a change of leader, driven with
 * fake agents (jobtest.h). It succeeds once every node of it is accounted for and done: back and
 * left succeeded, or gone after its LEAVE succeeded (a node that left the job on a signal once
 * its workers had exited 0). A node that has not come back may still run, or may have failed:
 * the job waits for it, until the rebuild window ends. */
#include <signal.h>
#include <string.h>

#include "common/rdzv-log.h"
#include "jobtest.h"

/* A resume of node i of a 4-node generation 1, restart 0 (--nnodes 2:4, 2 workers per node). */
static struct rdzv_join resume4(int i, int64_t hb_ms, int64_t max_restarts)
{
    struct rdzv_join jn = resume_of(i, 1, 0, max_restarts);

    jn.max = 4;
    jn.heartbeat_timeout_ms = hb_ms;
    jn.resume.nnodes = 4;
    jn.resume.world_size = 8;
    return jn;
}

/* Nodes 0..n-1 of the rebuilt generation back (the first rebuilds it from its claim). */
static void back(struct env *e, struct fake *f, int n, int64_t hb_ms, int64_t max_restarts)
{
    for (int i = 0; i < n; i++) {
        struct rdzv_join jn = resume4(i, hb_ms, max_restarts);

        ASSERT_OK(join(e, &f[i], &jn));
        ASSERT_TRUE(f[i].resumed);
    }
}

/* Node 0's workers all exit 0 (LEAVE succeeded); then its agent gets SIGTERM (CANCEL): it
 * leaves the job, which goes on without it. */
static void first_done_then_gone(struct fake *f)
{
    jt_leave(f[0].m, 1, true);
    jt_cancel(f[0].m, SIGTERM, "");
    ASSERT_TRUE(event_is(&f[0], "left"));
}

/* The race the cluster simulator found (cluster-traces/rebuilt-short-never-ends.trace): its 4
 * nodes back, node 0 done and gone, the last LEAVE ends the job succeeded. */
static void test_node_gone_after_its_leave_is_accounted_for(void)
{
    struct fake f[4] = {0};
    struct env e;

    env_init(&e, -1);
    back(&e, f, 4, 60000, 0);
    first_done_then_gone(f);
    jt_leave(f[1].m, 1, true);
    jt_leave(f[3].m, 1, true);
    ASSERT_FALSE(event_is(&f[2], "succeeded")); /* node 2's workers may still run */
    jt_leave(f[2].m, 1, true);
    for (int i = 1; i < 4; i++)
        ASSERT_TRUE(event_is(&f[i], "succeeded"));
    ASSERT_TRUE(event_is(&f[0], "left"));
    env_done(&e);
}

/* Why a rebuilt generation waits for its nodes: one not back may still run, or may have failed.
 * The nodes back all left succeeded, node 0 gone since; the job waits for node 3, which comes
 * back done. */
static void test_node_not_back_is_waited_for(void)
{
    struct fake f[4] = {0};
    struct rdzv_join jn = resume4(3, 60000, 0);
    struct env e;

    env_init(&e, -1);
    back(&e, f, 3, 60000, 0);
    first_done_then_gone(f);
    jt_leave(f[1].m, 1, true);
    jt_leave(f[2].m, 1, true);
    for (int i = 1; i < 3; i++)
        ASSERT_FALSE(event_is(&f[i], "succeeded"));
    jn.resume.left = true; /* its LEAVE went with the old rdzvd */
    ASSERT_OK(join(&e, &f[3], &jn));
    for (int i = 1; i < 4; i++)
        ASSERT_TRUE(event_is(&f[i], "succeeded"));
    env_done(&e);
}

/* The rebuild window: a node gone after its LEAVE counts as back. With nodes 1 and 2 back too,
 * the window ends with only node 3 missing, the one its record names as not back. */
static void test_window_counts_a_node_gone_after_its_leave(void)
{
    struct rdzvd_job_record_node nodes[4] = {{"node-0", 2}, {"node-1", 2}, {"node-2", 2},
                                             {"node-3", 2}};
    struct rdzvd_job_record rec = {.min = 2, .max = 4, .max_restarts = 3, .generation = 1,
                                   .running = true, .nnodes = 4, .world_size = 8,
                                   .store_port = 41000, .nodes = nodes};
    struct fake f[4] = {0};
    char path[64];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    snprintf(rec.run_id, sizeof(rec.run_id), "job");
    jt_record_save(fd, &rec);
    env_init(&e, fd);
    jt_remember_secrets(&e, "job");
    back(&e, f, 3, 40, 3);
    first_done_then_gone(f);
    for (int t = 0; t < 50 && !f[1].nevents; t++) {
        jt_heartbeat(f[1].m);
        jt_heartbeat(f[2].m);
        run_ms(&e, 10);
    }
    ASSERT_TRUE(event_is(&f[1], "restart"));
    ASSERT_TRUE(strstr(f[1].event.summary, "1 of 4 nodes of generation 1 did not come back") !=
                NULL);
    ASSERT_TRUE(strstr(f[1].event.summary, "changed): node rank 3 (node id node-3)") != NULL);
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* Its other nodes all back, node 0 gone after its LEAVE: the generation is rebuilt, and the
 * window's end restarts nothing. */
static void test_all_accounted_for_ends_the_window(void)
{
    struct fake f[4] = {0};
    struct rdzv_join jn = resume4(3, 40, 0);
    struct env e;

    env_init(&e, -1);
    back(&e, f, 3, 40, 0);
    first_done_then_gone(f);
    ASSERT_OK(join(&e, &f[3], &jn));
    for (int t = 0; t < 30; t++) {
        for (int i = 1; i < 4; i++)
            jt_heartbeat(f[i].m);
        run_ms(&e, 10);
    }
    for (int i = 1; i < 4; i++)
        ASSERT_EQ(f[i].nevents, 0);
    for (int i = 1; i < 4; i++)
        jt_leave(f[i].m, 1, true);
    for (int i = 1; i < 4; i++)
        ASSERT_TRUE(event_is(&f[i], "succeeded"));
    env_done(&e);
}

/* A node gone after its LEAVE succeeded stays accounted for across an rdzvd restart on its
 * --state-dir: the job's record marks its node rank done. Node 0 of three, done and gone; a
 * spare's LEAVE and going mark nothing (it holds no rank). rdzvd restarts and rebuilds
 * generation 1 from the record. Nodes 1 and 2 come back, the window's end restarts nothing, and
 * their LEAVEs end the job succeeded. */
static void test_node_done_and_gone_outlives_an_rdzvd_restart(void)
{
    char path[64], secrets[3][RDZV_SECRET_HEX + 1];
    struct rdzv_join jn = join_of(0, 3, 3, 3);
    struct rdzvd_job_record rec;
    struct fake f[4] = {0};
    struct env e;
    int fd = jt_state_dir(path, sizeof(path));

    jn.heartbeat_timeout_ms = 40;
    env_init(&e, fd);
    join_n(&e, f, 3, jn);
    ASSERT_EQ(f[2].round.nnodes, 3);
    jn = join_of(3, 3, 3, 3); /* a spare: its LEAVE and its going mark nothing done */
    jn.heartbeat_timeout_ms = 40;
    ASSERT_OK(join(&e, &f[3], &jn));
    ASSERT_TRUE(f[3].spare);
    jt_leave(f[3].m, 1, true);
    jt_cancel(f[3].m, SIGTERM, "");
    first_done_then_gone(f);
    for (int i = 0; i < 3; i++)
        memcpy(secrets[i], e.secrets[i], sizeof(secrets[i]));
    env_done(&e);
    env_init(&e, fd); /* rdzvd restarts on its state directory */
    jt_rebuild(&e.h);
    for (int i = 1; i < 3; i++) {
        const struct rdzv_round *rd = &f[i].round;

        jn = join_of(i, 3, 3, 3);
        jn.heartbeat_timeout_ms = 40;
        memcpy(e.secrets[i], secrets[i], sizeof(secrets[i]));
        jn.resume = (struct rdzv_resume){.generation = 1, .node_rank = rd->node_rank,
                                         .nnodes = rd->nnodes, .rank_offset = rd->rank_offset,
                                         .world_size = rd->world_size,
                                         .restart_count = rd->restart_count,
                                         .master_port = rd->master_port};
        ASSERT_OK(join(&e, &f[i], &jn));
        ASSERT_TRUE(f[i].resumed);
    }
    for (int t = 0; t < 30; t++) {
        jt_heartbeat(f[1].m);
        jt_heartbeat(f[2].m);
        run_ms(&e, 10);
    }
    ASSERT_EQ(f[1].nevents, 0); /* no restart for node 0, which was done */
    ASSERT_OK(rdzvd_job_record_get(e.table, "job", &rec)); /* only node 0 is */
    ASSERT_TRUE(rec.nodes && rec.nodes[0].done && !rec.nodes[1].done && !rec.nodes[2].done);
    rdzvd_job_record_clear(&rec);
    jt_leave(f[1].m, 1, true);
    ASSERT_EQ(f[2].nevents, 0);
    jt_leave(f[2].m, 1, true);
    ASSERT_TRUE(event_is(&f[1], "succeeded"));
    ASSERT_TRUE(event_is(&f[2], "succeeded"));
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* The record's part of it: DONE marks the node rank done in the running generation's record,
 * once; it changes nothing of another generation, of one stopped, or past the record's nodes.
 * A record's "done" list names each node rank once, within its nodes. */
static void test_done_decision_marks_the_running_record(void)
{
    static const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_job_record_node nodes[3] = {{"a", 2}, {"b", 2}, {"c", 2}};
    struct rdzvd_job_record rec = {.min = 3, .max = 3, .generation = 1, .running = true,
                                   .nnodes = 3, .world_size = 6, .nodes = nodes};
    struct rdzvd_job_record done = {.generation = 1, .done_rank = 1}, got;
    struct rdzvd_store *t = NULL;
    const uint8_t *val;
    size_t vlen;
    char text[1024], *at;

    ASSERT_OK(rdzvd_store_new(&lim, NULL, &t));
    rdzvd_store_set_decision_fn(t, rdzvd_decision_apply, NULL);
    snprintf(rec.run_id, sizeof(rec.run_id), "d");
    snprintf(done.run_id, sizeof(done.run_id), "d");
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_FORMED, &rec));
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_DONE, &done));
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_DONE, &done)); /* once: nothing more */
    done.generation = 2; /* another generation's: nothing */
    done.done_rank = 0;
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_DONE, &done));
    done.generation = 1; /* past its nodes: nothing */
    done.done_rank = 3;
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_DONE, &done));
    done.done_rank = -1;
    ASSERT_EQ(rdzvd_job_decide(t, RDZVD_DECIDE_DONE, &done), -EINVAL);
    ASSERT_OK(rdzvd_job_record_get(t, "d", &got));
    ASSERT_TRUE(!got.nodes[0].done && got.nodes[1].done && !got.nodes[2].done);
    rdzvd_job_record_clear(&got);
    ASSERT_OK(rdzvd_store_get(t, "job/d", 5, &val, &vlen));
    ASSERT_TRUE(vlen < sizeof(text));
    memcpy(text, val, vlen);
    text[vlen] = '\0';
    ASSERT_NOT_NULL(at = strstr(text, "\"done\":[1]"));
    at[8] = '3'; /* past its nodes */
    ASSERT_OK(rdzvd_store_set(t, "job/d", 5, text, vlen));
    ASSERT_EQ(rdzvd_job_record_get(t, "d", &got), -EBADMSG);
    rec.running = false; /* stopped: a DONE of generation 1 changes nothing */
    rec.nnodes = rec.world_size = 0;
    rec.nodes = NULL;
    rec.restart_count = 1;
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_STOPPED, &rec));
    done.done_rank = 0;
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_DONE, &done));
    ASSERT_OK(rdzvd_job_record_get(t, "d", &got));
    ASSERT_TRUE(!got.running && !got.nodes);
    rdzvd_store_free(t);
}

/* Generation 1 of three nodes, --nnodes min:3, formed; node 0 done (LEAVE succeeded), then its
 * agent signalled (SIGTERM, no scheduler's job named): it goes, told so. */
static void three_formed_first_done_and_signalled(struct env *e, struct fake *f, int64_t min)
{
    struct rdzv_join jn = join_of(0, min, 3, 0);

    env_init(e, -1);
    jn.last_call_ms = 10;
    join_n(e, f, 3, jn);
    for (int t = 0; t < 50 && !f[0].nrounds; t++)
        run_ms(e, 10);
    ASSERT_EQ(f[0].round.nnodes, 3);
    jt_leave(f[0].m, 1, true);
    jt_cancel(f[0].m, SIGTERM, "");
    ASSERT_TRUE(event_is(&f[0], "left"));
}

/* A node done takes nothing from the job when its agent is signalled: node 0's CANCEL is that
 * node leaving done, not the job cancelled for want of nodes. Then node 1, done and signalled
 * too. The job waits for the last node, and succeeds at its LEAVE. */
static void test_signal_after_a_leave_cancels_nothing(void)
{
    struct fake f[3] = {0};
    struct env e;

    three_formed_first_done_and_signalled(&e, f, 3);
    ASSERT_EQ(f[2].nevents, 0); /* its workers may still run */
    jt_leave(f[1].m, 1, true);
    jt_cancel(f[1].m, SIGTERM, "");
    ASSERT_TRUE(event_is(&f[1], "left"));
    ASSERT_EQ(f[2].nevents, 0);
    jt_leave(f[2].m, 1, true);
    ASSERT_TRUE(event_is(&f[2], "succeeded"));
    env_done(&e);
}

/* Only a node done goes so: with node 0 done and gone, node 1, whose workers still run,
 * signalled leaves one node of MIN 2: the job is cancelled (R15). Node 0, gone once done, does
 * not count toward MIN: a restart could not use it. */
static void test_signal_of_a_node_not_done_still_cancels(void)
{
    struct fake f[3] = {0};
    struct env e;

    three_formed_first_done_and_signalled(&e, f, 2);
    jt_cancel(f[1].m, SIGTERM, "");
    ASSERT_TRUE(event_is(&f[2], "cancelled"));
    env_done(&e);
}

/* The last member of its generation is judged as any: a rebuilt generation with only node 0
 * back, done, then signalled, leaves no node to end the job, whatever spare waits: it is
 * cancelled (R15), not dropped from memory with no end while its other nodes may come back. */
static void test_last_member_done_and_signalled_is_cancelled(void)
{
    struct rdzv_join jn = join_of(5, 2, 4, 0);
    struct fake f[1] = {0}, spare = {0};
    struct env e;

    env_init(&e, -1);
    back(&e, f, 1, 60000, 0);
    ASSERT_OK(join(&e, &spare, &jn));
    ASSERT_TRUE(spare.spare);
    jt_leave(f[0].m, 1, true);
    jt_cancel(f[0].m, SIGTERM, "");
    ASSERT_TRUE(event_is(&f[0], "cancelled"));
    env_done(&e);
}

/* A job with a node done is finishing (R1a), the node gone since too: with node 0 of three done
 * and signalled, a fourth node that joins with --scale-up now waits as a spare, and nothing
 * restarts. The others' LEAVEs end the job succeeded, the spare's too. */
static void test_scale_up_waits_for_a_node_done_and_gone(void)
{
    struct rdzv_join jn = join_of(0, 2, 3, 0);
    struct fake f[4] = {0};
    struct env e;

    env_init(&e, -1);
    jn.scale_up_now = true;
    join_n(&e, f, 3, jn);
    ASSERT_EQ(f[0].round.nnodes, 3);
    jt_leave(f[0].m, 1, true);
    jt_cancel(f[0].m, SIGTERM, "");
    ASSERT_TRUE(event_is(&f[0], "left"));
    jn = join_of(3, 2, 3, 0);
    jn.scale_up_now = true;
    ASSERT_OK(join(&e, &f[3], &jn));
    for (int t = 0; t < 5; t++) {
        for (int i = 1; i < 4; i++)
            jt_heartbeat(f[i].m);
        run_ms(&e, 10);
    }
    ASSERT_EQ(f[1].nevents, 0); /* no restart */
    ASSERT_EQ(f[3].nrounds, 0);
    jt_leave(f[1].m, 1, true);
    jt_leave(f[2].m, 1, true);
    ASSERT_TRUE(event_is(&f[1], "succeeded"));
    ASSERT_TRUE(event_is(&f[3], "succeeded"));
    env_done(&e);
}

int main(void)
{
    rdzv_log_setup("test-job-rebuilt-end", RDZV_LOG_ERROR);
    TEST(test_node_gone_after_its_leave_is_accounted_for);
    TEST(test_node_not_back_is_waited_for);
    TEST(test_window_counts_a_node_gone_after_its_leave);
    TEST(test_all_accounted_for_ends_the_window);
    TEST(test_node_done_and_gone_outlives_an_rdzvd_restart);
    TEST(test_done_decision_marks_the_running_record);
    TEST(test_signal_after_a_leave_cancels_nothing);
    TEST(test_signal_of_a_node_not_done_still_cancels);
    TEST(test_last_member_done_and_signalled_is_cancelled);
    TEST(test_scale_up_waits_for_a_node_done_and_gone);
    return tap_done();
}
