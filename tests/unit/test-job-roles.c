/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-roles.c: what one node's agent may do to a job, and no more (proto/SECURITY.md),
 * driven with fake agents (jobtest.h): a signal to one agent (CANCEL) is that node leaving, not the
 * job cancelled; a node put aside is put aside by its host, so the same host's next agent is
 * refused too. */
#include <inttypes.h>
#include <signal.h>

#include "common/rdzv-log.h"
#include "jobtest.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/job/rdzvd-job-impl.h"

/* The job heard nothing: no event, no new generation. */
static void assert_untouched(const struct fake *f, int nrounds)
{
    ASSERT_EQ(f->nevents, 0);
    ASSERT_EQ(f->nrounds, nrounds);
    ASSERT_FALSE(f->closed);
}

/* A spare's agent signalled: the spare goes (EVENT left, 128 + the signal), the running job
 * hears nothing. A member's agent signalled with a spare waiting: the node leaves, the spare
 * takes its ranks in the next generation, and nothing is charged (the job has no restart budget
 * at all). Signalled when the rest would be under --nnodes MIN: the job is cancelled. */
static void test_signal_is_one_node_leaving(void)
{
    struct fake f[4] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 0);
    struct env e;

    env_init(&e, -1);
    join_n(&e, f, 3, jn); /* node 2 waits as the spare */
    ASSERT_TRUE(f[2].spare);
    jt_member_cancel(f[2].m, 15, "Slurm job 7: a preemption", "");
    ASSERT_TRUE(event_is(&f[2], "left"));
    ASSERT_EQ(f[2].event.exit_code, 143);
    ASSERT_TRUE(f[2].closed);
    ASSERT_NULL(f[2].m);
    ASSERT_TRUE(strstr(f[2].event.summary, "the job goes on without it") != NULL);
    assert_untouched(&f[0], 1);
    assert_untouched(&f[1], 1);

    jn = join_of(3, 2, 2, 0); /* a new spare */
    ASSERT_OK(join(&e, &f[3], &jn));
    ASSERT_TRUE(f[3].spare);
    jt_member_cancel(f[0].m, 15, "", "");
    ASSERT_TRUE(event_is(&f[0], "left"));
    ASSERT_EQ(f[0].event.exit_code, 143);
    ASSERT_NULL(f[0].m);
    ASSERT_TRUE(event_is(&f[1], "restart"));
    ASSERT_TRUE(strstr(f[1].event.summary, "received SIGTERM from outside") != NULL);
    all_ready(f, 4, 1);
    ASSERT_EQ(f[1].nrounds, 2);
    ASSERT_EQ(f[3].nrounds, 1); /* the spare took the place */
    ASSERT_EQ(f[3].round.generation, 2);
    ASSERT_EQ(f[3].round.restart_count, 0); /* charged nothing: the budget is 0 */

    /* Now no spare: one more node leaving leaves 1 of MIN 2: the job is cancelled. */
    jt_member_cancel(f[1].m, 2, "", "");
    for (int i = 1; i < 4; i += 2) {
        ASSERT_TRUE(event_is(&f[i], "cancelled"));
        ASSERT_EQ(f[i].event.exit_code, 130);
        ASSERT_TRUE(strstr(f[i].event.summary, "cancelled: the agent of node host1 received "
                                               "SIGINT from outside") != NULL);
    }
    env_done(&e);
}

/* An elastic job (--nnodes 1:2) goes on with the node that is left; when that one is signalled
 * too (scancel signals every agent), it is cancelled. */
static void test_elastic_job_goes_on(void)
{
    struct fake f[2] = {0};
    struct rdzv_join jn = join_of(0, 1, 2, 0);
    struct env e;

    env_init(&e, -1);
    jn.last_call_ms = 10;
    join_n(&e, f, 2, jn);
    ASSERT_EQ(f[0].nrounds, 1);
    ASSERT_EQ(f[0].round.nnodes, 2);
    jt_member_cancel(f[1].m, 15, "", "");
    ASSERT_TRUE(event_is(&f[1], "left"));
    ASSERT_TRUE(event_is(&f[0], "restart"));
    all_ready(f, 2, 1);
    run_ms(&e, 100); /* the last call for a second node */
    ASSERT_EQ(f[0].nrounds, 2);
    ASSERT_EQ(f[0].round.nnodes, 1);
    ASSERT_EQ(f[0].round.restart_count, 0);
    jt_member_cancel(f[0].m, 15, "scancel", "");
    ASSERT_TRUE(event_is(&f[0], "cancelled"));
    ASSERT_EQ(f[0].event.exit_code, 143);
    env_done(&e);
}

/* R15a: the scheduler ends the whole job (scancel: every agent of it is signalled). An elastic
 * job (--nnodes 1:3) that could go on without one node is cancelled at the first CANCEL naming
 * the scheduler's job, on every member, with the scheduler's reason: not "left" for the first
 * nodes signalled and "cancelled" for the last. A spare's CANCEL naming it just goes (R16).
 * While the first round forms (F8b), the first such CANCEL cancels it too. Before, node 1 was
 * told it left and nodes 0 and 2 restarted without it; a forming job kept waiting. */
static void test_scheduler_ending_the_job_cancels_it_at_once(void)
{
    struct fake f[4] = {0};
    struct rdzv_join jn = join_of(0, 1, 3, 0);
    struct env e;

    env_init(&e, -1);
    join_n(&e, f, 3, jn);
    ASSERT_EQ(f[0].nrounds, 1);
    ASSERT_EQ(f[0].round.nnodes, 3);
    jn = join_of(3, 1, 3, 0);
    ASSERT_OK(join(&e, &f[3], &jn));
    ASSERT_TRUE(f[3].spare);
    jt_member_cancel(f[3].m, 15, "Slurm job 9: scancel", "9");
    ASSERT_TRUE(event_is(&f[3], "left"));
    ASSERT_EQ(f[0].nevents, 0);
    jt_member_cancel(f[1].m, 15, "Slurm job 42: scancel", "42");
    for (int i = 0; i < 3; i++) {
        ASSERT_TRUE(event_is(&f[i], "cancelled"));
        ASSERT_EQ(f[i].event.exit_code, 143);
        ASSERT_TRUE(strstr(f[i].event.summary, "cancelled: the agent of node host1 received "
                                               "SIGTERM from outside (Slurm job 42: scancel)"));
    }
    ASSERT_EQ(f[0].nrounds, 1);
    env_done(&e);

    memset(f, 0, sizeof(f));
    env_init(&e, -1);
    join_n(&e, f, 2, join_of(0, 3, 3, 0));
    ASSERT_EQ(f[0].nrounds, 0);
    jt_member_cancel(f[0].m, 15, "PBS job 7.pbs", "7.pbs");
    for (int i = 0; i < 2; i++)
        ASSERT_TRUE(event_is(&f[i], "cancelled"));
    env_done(&e);
}

/* While the job forms, a signalled agent just leaves: the others keep waiting for their peers;
 * the last one signalled cancels it. */
static void test_forming_job_keeps_waiting(void)
{
    struct fake f[2] = {0};
    struct rdzv_join jn = join_of(0, 3, 3, 0);
    struct env e;

    env_init(&e, -1);
    join_n(&e, f, 2, jn);
    ASSERT_EQ(f[0].nrounds, 0);
    jt_member_cancel(f[0].m, 15, "", "");
    ASSERT_TRUE(event_is(&f[0], "left"));
    assert_untouched(&f[1], 0);
    jt_member_cancel(f[1].m, 15, "", "");
    ASSERT_TRUE(event_is(&f[1], "cancelled"));
    env_done(&e);
}

/* scancel's SIGTERM reaches a worker before its agent: the worker's exit starts a restart, and
 * the agent's CANCEL comes while the job stops. That agent stops its own workers and answers no
 * more rounds: the job ends "cancelled" at once, both agents told. Before, the job waited for
 * that agent's READY, which never came; the agent gave up waiting after its grace and said "left
 * job, stopped from outside" instead of the job's end. */
static void test_cancel_while_stopping_ends_at_once(void)
{
    for (int other_signalled = 0; other_signalled < 2; other_signalled++) {
        struct rdzv_worker_exit w = {.generation = 1, .exit_code = 143, .signal = 15};
        struct fake f[2] = {0};
        struct env e;
        char err[512];

        env_init(&e, -1);
        join_n(&e, f, 2, join_of(0, 2, 2, 3));
        w.rank = f[0].round.rank_offset;
        ASSERT_OK(jt_member_worker_exit(f[0].m, &w, err, sizeof(err)));
        ASSERT_TRUE(event_is(&f[1], "restart"));
        if (!other_signalled)
            jt_ready(f[1].m, 1); /* the other node's workers stopped */
        jt_member_cancel(f[0].m, 15, "Slurm job 4: scancel", "");
        if (other_signalled) { /* its agent's SIGTERM came before its READY: the job ended */
            ASSERT_TRUE(event_is(&f[1], "cancelled"));
            jt_member_cancel(f[1].m, 15, "Slurm job 4: scancel", ""); /* changes nothing */
        }
        for (int i = 0; i < 2; i++) {
            ASSERT_TRUE(event_is(&f[i], "cancelled"));
            ASSERT_EQ(f[i].event.exit_code, 143);
            ASSERT_TRUE(strstr(f[i].event.summary, "(Slurm job 4: scancel)") != NULL);
        }
        env_done(&e);
    }
}

/* P1, P2: a job (--nnodes 2) runs on nodes 0 and 1; node 0's connection drops and the
 * job stops to form again. A stranger with the agents' token JOINs (a spare) and sends CANCEL, as
 * a spare that the scheduler preempts at that moment would: it leaves, and nothing else changes.
 * Before, the job counted node 1 alone left, fewer than MIN, and ended it "cancelled". Node 0's
 * agent comes back and the job forms its next generation on both. */
static void test_outsider_cancel_during_a_blip_changes_nothing(void)
{
    struct fake f[2] = {0}, stranger = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    struct env e;

    env_init(&e, -1);
    join_n(&e, f, 2, jn);
    ASSERT_EQ(f[1].nrounds, 1);
    jt_gone(f[0].m); /* its connection blips */
    ASSERT_TRUE(event_is(&f[1], "restart"));
    jn = join_of(5, 2, 2, 3);
    ASSERT_OK(join(&e, &stranger, &jn));
    ASSERT_TRUE(stranger.spare);
    jt_member_cancel(stranger.m, 15, "", "");
    ASSERT_TRUE(event_is(&stranger, "left"));
    ASSERT_TRUE(stranger.closed);
    ASSERT_TRUE(event_is(&f[1], "restart")); /* not cancelled */
    ASSERT_FALSE(f[1].closed);
    jt_ready(f[1].m, 1);
    memset(&f[0], 0, sizeof(f[0]));
    jn = resume_of(0, 1, 0, 3);
    ASSERT_OK(join(&e, &f[0], &jn));
    ASSERT_TRUE(event_is(&f[0], "restart")); /* stop the old workers, then rejoin */
    jt_ready(f[0].m, 1);
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(f[i].round.generation, 2);
        ASSERT_FALSE(event_is(&f[i], "cancelled"));
    }
    env_done(&e);
}

/* Found by the explorer (depth 8): a spare's connection blips (rdzvd stalled, then it closed)
 * while the job runs; node 0 goes and the job stops; node 1 is signalled, which leaves too few
 * nodes: the job is cancelled once stopped. The spare, away, has no worker to stop: the job ends
 * then and there. Before, the away spare held the stop until it came back, and its own UNHEALTHY
 * (a node that never ran) was what ended the job. */
static void test_away_spare_holds_no_stop(void)
{
    struct fake f[3] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    struct env e;

    env_init(&e, -1);
    join_n(&e, f, 3, jn);
    ASSERT_TRUE(f[2].spare);
    jt_gone(f[0].m); /* node 0's connection closes: the job stops */
    ASSERT_TRUE(event_is(&f[1], "restart"));
    rdzvd_member_mark_stall(f[2].m);
    jt_gone(f[2].m); /* the spare blips: kept for its agent */
    f[2].m = NULL;
    jt_member_cancel(f[1].m, 15, "scancel", "");
    ASSERT_TRUE(event_is(&f[1], "cancelled"));
    ASSERT_TRUE(strstr(f[1].event.summary, "host1 received SIGTERM") != NULL);
    env_done(&e);
}

/* P1, P3: a stranger JOINs naming member 0's host and says it is unhealthy. Only the
 * stranger's node id is put aside: member 0 hears nothing, and its host's next agent (a new node
 * id: a crashed agent started again, a requeue) joins as before, in memory and after a restart.
 * Before, the host was put aside and that agent got "put_aside" until an operator released it. */
static void test_outsider_unhealthy_does_not_put_a_host_aside(void)
{
    struct fake f[2] = {0}, stranger = {0}, next = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    char path[64], err[512];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    env_init(&e, fd);
    join_n(&e, f, 2, jn);
    jn = join_of(5, 2, 2, 3);
    snprintf(jn.host, sizeof(jn.host), "host0");
    ASSERT_OK(join(&e, &stranger, &jn));
    jt_unhealthy(stranger.m, "forged");
    ASSERT_TRUE(event_is(&stranger, "put_aside"));
    ASSERT_TRUE(strstr(stranger.event.summary, "put aside by its node id, not its host") != NULL);
    assert_untouched(&f[0], 1);
    assert_untouched(&f[1], 1);
    jn = join_of(6, 2, 2, 3); /* host0's next agent */
    snprintf(jn.host, sizeof(jn.host), "host0");
    ASSERT_OK(join_err(&e, &next, &jn, err, sizeof(err)));
    ASSERT_TRUE(next.spare);
    jn = join_of(5, 2, 2, 3); /* the stranger's own node id stays out */
    memset(&stranger, 0, sizeof(stranger));
    ASSERT_EQ(join_err(&e, &stranger, &jn, err, sizeof(err)), -EACCES);
    env_done(&e);
    env_init(&e, fd);
    memset(&next, 0, sizeof(next));
    jn = join_of(7, 2, 2, 3);
    snprintf(jn.host, sizeof(jn.host), "host0");
    ASSERT_OK(join_err(&e, &next, &jn, err, sizeof(err)));
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* e with no job table, keeping ended jobs for status as rdzvd does (an hour, 16). */
/* e keeps the jobs that end for an hour (rdzvd's --keep-ended). */
static void keep_ends_of(struct env *e)
{
    e->h.ended = &e->ended;
    e->h.keep_ended = rdzvd_ended_jobs_add;
    rdzvd_ended_jobs_free(&e->ended);
    rdzvd_ended_jobs_init(&e->ended, 3600 * 1000, 16);
}

static void env_init_keeping_ends(struct env *e)
{
    env_init(e, -1);
    keep_ends_of(e);
}

/* P6: a job (--nnodes 2) on nodes 0 and 1 restarts (node 0's worker failed);
 * node 1's agent is frozen (a paused VM) and sends no READY. scancel reaches node 0's agent: too
 * few nodes are left, and the job ends "cancelled" at once (its end recorded first; before
 * this explorer, once stopped), and node 0's agent exits. Then node 1's heartbeat
 * lapses. The job stays ended: node 1's agent, resumed later, is told that outcome. Before,
 * the job went with its last member, no outcome told to anyone, and node 1's resume rebuilt
 * it from its own word ("1 of 2 nodes of generation 1 did not come back after rdzvd
 * restarted"), though rdzvd never had. */
static void test_cancelled_job_losing_its_last_member_stays_ended(void)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 1};
    struct fake f[2] = {0}, back = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 4);
    char err[512];
    struct env e;

    env_init_keeping_ends(&e);
    jn.heartbeat_timeout_ms = 5000;
    join_n(&e, f, 2, jn);
    jt_worker_exit(&f[0], &w);
    ASSERT_TRUE(event_is(&f[1], "restart")); /* node 1 frozen: no READY */
    jt_member_cancel(f[0].m, 15, "scancel", "");
    ASSERT_TRUE(event_is(&f[1], "cancelled")); /* queued to node 1, frozen */
    ASSERT_EQ(f[1].nevents, 2);                 /* restart, cancelled */
    jt_gone(f[0].m); /* its agent stopped its workers and exits */
    run_ms(&e, 5000 * RDZVD_JOB_INIT_GRACE_FACTOR + 1000); /* node 1's heartbeat lapses */
    ASSERT_EQ(f[1].nevents, 2);
    ASSERT_TRUE(strstr(f[1].event.summary, "received SIGTERM from outside (scancel)") != NULL);
    ASSERT_EQ(njobs(&e), 1); /* listed as ended */
    jn = resume_of(1, 1, 0, 4);
    jn.age_ms = 60000; /* started before the end */
    ASSERT_TRUE(join_err(&e, &back, &jn, err, sizeof(err)) < 0);
    ASSERT_TRUE(strstr(err, "cancelled") != NULL);
    ASSERT_EQ(back.nrounds, 0);
    /* An agent started after that end runs a later job of the same id (a requeue): its resume
     * is no agent of the job that ended. */
    run_ms(&e, 2000);
    jn = resume_of(0, 1, 0, 4);
    jn.age_ms = 1000;
    memset(&back, 0, sizeof(back));
    ASSERT_OK(join(&e, &back, &jn));
    env_done(&e);
}

/* Case 5 of issue 71 (X5 with a new run in memory): job J (--nnodes 2) runs on nodes 0 and 1,
 * with a job table (--state-dir). Their connections drop (the job waits for its nodes), and the
 * operator cancels J. A new run of J starts on nodes 2 and 3 (a requeue: agents started after
 * the cancel). Node 0's agent, started before the cancel, comes back with its secret and
 * resumes generation 1: it is told J was cancelled, and the new run hears nothing. Before, it
 * was JOINED as a spare of the new run, then told to restart: the ended jobs were read only
 * when no job of that id was in memory. */
static void test_late_agent_of_a_cancelled_run_is_told_beside_a_new_run(void)
{
    struct fake f[2] = {0}, again[2] = {0}, back = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    char path[64], err[512];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    env_init(&e, fd);
    keep_ends_of(&e);
    e.h.keep_end = rdzvd_ended_jobs_add_recorded; /* the job table's ends, as rdzvd keeps them */
    join_n(&e, f, 2, jn);
    all_ready(f, 2, 1);
    jt_gone(f[0].m);
    jt_gone(f[1].m); /* the job waits for its nodes, not in memory */
    ASSERT_NULL(rdzvd_job_view(&e.jobs, "job"));
    ASSERT_OK(jt_jobs_cancel(&e.h, "job", "requeued", err, sizeof(err)));
    run_ms(&e, 1000);
    for (int i = 0; i < 2; i++) {
        jn = join_of(2 + i, 2, 2, 3);
        jn.age_ms = 500; /* started after the cancel */
        ASSERT_OK(join(&e, &again[i], &jn));
    }
    all_ready(again, 2, 1);
    ASSERT_EQ(again[0].round.generation, 1u); /* a new run */
    jn = resume_of(0, 1, 0, 3);
    jn.age_ms = 60000; /* started before the cancel */
    snprintf(jn.secret, sizeof(jn.secret), "%s", f[0].secret);
    ASSERT_TRUE(join_err(&e, &back, &jn, err, sizeof(err)) < 0);
    ASSERT_TRUE(strstr(err, "has ended: it cancelled") != NULL);
    ASSERT_TRUE(strstr(err, "requeued") != NULL);
    ASSERT_EQ(back.njoined, 0);
    ASSERT_EQ(back.nevents, 1); /* told the run's outcome, as an EVENT */
    ASSERT_TRUE(event_is(&back, "cancelled"));
    for (int i = 0; i < 2; i++)
        assert_untouched(&again[i], 1);
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* A job with no record to wait for ends with its last node (the test above runs a cancelled job).
 * --nnodes 2 on nodes 0 and 1, node 2 a spare, no job table (no --state-dir). Node 1's agent is
 * frozen; node 0's and then the spare's agents are signalled (each leaves: the job goes on
 * without it, its generation stopping); node 1's heartbeat lapses. The job ends "failed" with
 * its last node, told to it, and its end is kept: node 1's agent, woken later, resumes and is
 * told that end, and nothing is rebuilt. Before, the job went with its last member, told to
 * nobody, and node 1's resume rebuilt generation 1 from its own word ("rebuilding generation 1
 * (2 nodes) from reconnecting agents"), to fail it again a rebuild window later ("1 of 2 nodes
 * of generation 1 did not come back after rdzvd restarted"), though rdzvd never had. */
static void test_last_node_lost_ends_the_job_and_its_resume_is_told(void)
{
    struct fake f[3] = {0}, back = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 4);
    char err[512];
    struct env e;

    env_init_keeping_ends(&e);
    jn.heartbeat_timeout_ms = 5000;
    join_n(&e, f, 3, jn); /* node 2 waits as a spare */
    ASSERT_EQ(f[2].nrounds, 0);
    jt_member_cancel(f[0].m, 15, "", ""); /* it leaves (EVENT left): the job goes on */
    ASSERT_TRUE(event_is(&f[0], "left"));
    ASSERT_TRUE(event_is(&f[1], "restart")); /* queued to node 1, frozen: no READY */
    jt_member_cancel(f[2].m, 15, "", "");
    ASSERT_TRUE(event_is(&f[2], "left"));
    ASSERT_EQ((int)rdzv_container_of(e.jobs.next, struct rdzvd_job, node)->state, JOB_STOPPING);
    run_ms(&e, 5000 * RDZVD_JOB_INIT_GRACE_FACTOR + 1000); /* node 1's heartbeat lapses */
    ASSERT_TRUE(rdzv_list_empty(&e.jobs));
    ASSERT_EQ(f[1].nevents, 2); /* the restart, then the end, ahead of the close */
    ASSERT_TRUE(event_is(&f[1], "failed"));
    ASSERT_EQ(f[1].event.exit_code, 1);
    ASSERT_TRUE(strstr(f[1].event.summary, "(host1) sent no heartbeat for 5.0 s; it was the "
                                           "job's last node") != NULL);
    ASSERT_EQ(njobs(&e), 1); /* listed ended */
    run_ms(&e, 15000);       /* the agent resumed 15 s later */
    jn = resume_of(1, 1, 0, 4);
    jn.age_ms = 60000; /* it started before the end */
    ASSERT_EQ(join_err(&e, &back, &jn, err, sizeof(err)), -EBUSY);
    ASSERT_TRUE(strstr(err, "job 'job' has ended: it failed at ") != NULL);
    ASSERT_TRUE(strstr(err, "sent no heartbeat for 5.0 s") != NULL);
    ASSERT_EQ(back.nrounds, 0);
    ASSERT_TRUE(rdzv_list_empty(&e.jobs)); /* not rebuilt */
    env_done(&e);
}

/* The same, when the end is no longer kept (--keep-ended 0 here; past --keep-ended or
 * --keep-ended-max on a busy rdzvd): a resume names the incarnation of the rdzvd that JOINED it
 * (1.18). This very incarnation, holding no job and no record of it, has not restarted since
 * the agent's generation formed: the job ended here, and the agent is told so, not rebuilt
 * from its word. Another incarnation (rdzvd restarted, or a new leader), or none (an older
 * agent, or an older rdzvd's JOINED), rebuilds it from the resume as before. */
static void test_resume_naming_this_incarnation_is_not_rebuilt(void)
{
    struct fake f[2] = {0}, back = {0}, other = {0}, older = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 4);
    char err[512];
    struct env e;

    env_init(&e, -1); /* no job table; ends kept for no time */
    e.h.incarnation = 77;
    join_n(&e, f, 2, jn);
    ASSERT_EQ(f[0].nrounds, 1);
    jt_gone(f[0].m);
    jt_gone(f[1].m); /* both gone: the job ends with the last, its end not kept */
    ASSERT_TRUE(rdzv_list_empty(&e.jobs));
    ASSERT_EQ(njobs(&e), 0);
    jn = resume_of(1, 1, 0, 4);
    jn.age_ms = 60000;
    jn.resume.incarnation = 77;
    ASSERT_EQ(join_err(&e, &back, &jn, err, sizeof(err)), -ESTALE);
    ASSERT_TRUE(strstr(err, "job 'job' is over: this rdzvd ran its generation 1 and has not "
                            "restarted since") != NULL);
    ASSERT_EQ(back.nrounds, 0);
    ASSERT_TRUE(rdzv_list_empty(&e.jobs));
    jn.resume.incarnation = 78; /* another rdzvd formed it: rebuilt from the claim */
    ASSERT_OK(join(&e, &other, &jn));
    ASSERT_EQ((int)rdzv_container_of(e.jobs.next, struct rdzvd_job, node)->state, JOB_RUNNING);
    env_done(&e);
    env_init(&e, -1);
    e.h.incarnation = 77;
    jn.resume.incarnation = 0; /* an agent or rdzvd before 1.18 */
    ASSERT_OK(join(&e, &older, &jn));
    ASSERT_EQ((int)rdzv_container_of(e.jobs.next, struct rdzvd_job, node)->state, JOB_RUNNING);
    env_done(&e);
}

/* The same for a plain JOIN (1.20): an agent whose workers ran a generation, stopped since (its
 * READY went: it resumes nothing), says which rdzvd sent its last ROUND. This very incarnation,
 * holding no job and no record of it, ran that generation: the job ended here, and the agent is
 * told so, not made a new job of (found by test-job-sim: case7-plain-join-after-the-end-falls-out).
 * Another incarnation, or none (an older agent, or one whose workers never ran): a new job. */
static void test_plain_join_naming_this_incarnation_is_refused(void)
{
    struct fake f[2] = {0}, back = {0}, other = {0}, older = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 4);
    char err[512];
    struct env e;

    env_init(&e, -1); /* no job table; ends kept for no time */
    e.h.incarnation = 77;
    join_n(&e, f, 2, jn);
    jt_gone(f[1].m); /* a restart: node 0's agent stops its workers, says so, and waits */
    ASSERT_TRUE(event_is(&f[0], "restart"));
    jt_ready(f[0].m, 1);
    ASSERT_EQ(f[0].nrounds, 1);
    jt_gone(f[0].m); /* its connection closes: the job ends with its last node, its end not kept */
    ASSERT_EQ(njobs(&e), 0);
    jn.age_ms = 60000;
    jn.ran_incarnation = 77;
    ASSERT_EQ(join_err(&e, &back, &jn, err, sizeof(err)), -ESTALE);
    ASSERT_TRUE(strstr(err, "job 'job' is over: this rdzvd ran a generation of it and has not "
                            "restarted since") != NULL);
    ASSERT_EQ(njobs(&e), 0);
    jn.ran_incarnation = 78; /* another rdzvd ran it: a new job */
    ASSERT_OK(join(&e, &other, &jn));
    ASSERT_EQ(njobs(&e), 1);
    env_done(&e);
    env_init(&e, -1);
    e.h.incarnation = 77;
    jn.ran_incarnation = 0; /* an agent before 1.20 */
    ASSERT_OK(join(&e, &older, &jn));
    ASSERT_EQ(njobs(&e), 1);
    env_done(&e);
}

/* Found by test-job-explore (I4): node 0's worker fails at start-up (--bad-node-failures 1: it
 * is to be put aside once the generation stopped), scancel reaches node 0's agent, and node 1's
 * connection closes. The job ends "cancelled", told to node 0, rather than node 0 being put
 * aside and the job going with it, its cancel lost. */
static void test_cancel_wins_over_a_pending_put_aside(void)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 1};
    struct fake f[2] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    struct env e;

    env_init(&e, -1);
    jn.bad_node_failures = 1;
    join_n(&e, f, 2, jn);
    jt_worker_exit(&f[0], &w);
    jt_member_cancel(f[0].m, 15, "", "");
    jt_gone(f[1].m);
    ASSERT_TRUE(event_is(&f[0], "cancelled"));
    ASSERT_EQ(f[0].event.exit_code, 143);
    env_done(&e);
}

/* A node to be put aside (its start-up failure, pending until the generation stopped) does not
 * count toward MIN: with it, node 1 and a spare, node 1's agent signalled leaves too few nodes,
 * and the job ends "cancelled" (the spare then waited --join-timeout for a node, and the job
 * failed). */
static void test_pending_put_aside_does_not_count_toward_min(void)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 1};
    struct fake f[3] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    struct env e;

    env_init(&e, -1);
    jn.bad_node_failures = 1;
    join_n(&e, f, 3, jn); /* node 2 waits as the spare */
    jt_worker_exit(&f[0], &w);
    jt_member_cancel(f[1].m, 15, "drained", "");
    jt_ready(f[0].m, 1);
    for (int i = 0; i < 3; i++)
        ASSERT_TRUE(event_is(&f[i], "cancelled"));
    env_done(&e);
}

/* A node whose agent proved, with its recorded secret, that its workers ran a generation that is
 * over (a resume after rdzvd restarted while the job stopped) held a place: scancel reaching
 * every agent ends the job "cancelled" and its record goes. Before, such nodes counted as
 * spares: each just left, and the job's record waited for nodes that would never come. */
static void test_resumed_nodes_of_a_generation_over_end_it(void)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 1};
    struct rdzvd_job_record rec;
    struct fake f[2] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    char path[64], secrets[JT_NODES][RDZV_SECRET_HEX + 1];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    env_init(&e, fd);
    join_n(&e, f, 2, jn);
    jt_worker_exit(&f[0], &w); /* the generation stops; rdzvd restarts meanwhile */
    memcpy(secrets, e.secrets, sizeof(secrets)); /* what the agents hold */
    env_done(&e);
    env_init(&e, fd);
    memcpy(e.secrets, secrets, sizeof(secrets));
    for (int i = 0; i < 2; i++) {
        memset(&f[i], 0, sizeof(f[i]));
        jn = resume_of(i, 1, 0, 3);
        ASSERT_OK(join(&e, &f[i], &jn));
        ASSERT_TRUE(event_is(&f[i], "restart")); /* its generation is over */
    }
    jt_member_cancel(f[0].m, 15, "scancel", "");
    jt_member_cancel(f[1].m, 15, "scancel", "");
    ASSERT_TRUE(event_is(&f[1], "cancelled"));
    ASSERT_EQ(rdzvd_job_record_get(e.table, "job", &rec), -ENOENT);
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* P5: a second agent started with the job's --rdzv-id and another command (a
 * second job under the same id, by mistake) is refused at once, naming both fingerprints, in
 * memory and from the record after a restart; the same command, or an agent that sends none (an
 * older one), joins. A spare that ran nothing is not told the job succeeded: its outcome says it
 * ran nothing. Before, the second agent waited as a spare, never ran its command, and was told
 * "every worker of every node exited 0". */
static void test_other_command_is_refused_and_a_spare_ran_nothing(void)
{
    struct fake f[3] = {0}, other = {0}, old = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    char path[64], err[512];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    env_init(&e, fd);
    snprintf(jn.command, sizeof(jn.command), "00000000000000aa");
    join_n(&e, f, 3, jn); /* node 2 waits as the spare */
    ASSERT_TRUE(f[2].spare);
    jn = join_of(5, 2, 2, 3);
    snprintf(jn.command, sizeof(jn.command), "00000000000000bb");
    ASSERT_EQ(join_err(&e, &other, &jn, err, sizeof(err)), -EINVAL);
    ASSERT_TRUE(strstr(err, "runs another command than this agent's (command fingerprint "
                            "00000000000000aa, this agent's 00000000000000bb)") != NULL);
    jn.command[0] = '\0'; /* an older agent: not compared */
    ASSERT_OK(join(&e, &old, &jn));
    jt_leave(f[0].m, 1, true);
    jt_leave(f[1].m, 1, true);
    ASSERT_TRUE(event_is(&f[0], "succeeded"));
    ASSERT_TRUE(strstr(f[0].event.summary, "ran nothing") == NULL);
    for (struct fake *s = &f[2]; s; s = s == &f[2] ? &old : NULL) {
        ASSERT_TRUE(event_is(s, "succeeded"));
        ASSERT_EQ(s->event.exit_code, 0);
        ASSERT_TRUE(strstr(s->event.summary, "this node ran nothing: it waited as a spare") !=
                    NULL);
    }
    env_done(&e);
    /* The record keeps the job's command: a job rebuilt after a restart compares the same. */
    env_init(&e, fd);
    jn = join_of(0, 2, 2, 3);
    snprintf(jn.command, sizeof(jn.command), "00000000000000aa");
    memset(f, 0, sizeof(f));
    join_n(&e, f, 2, jn);
    env_done(&e);
    env_init(&e, fd);
    jt_rebuild(&e.h);
    jn = join_of(6, 2, 2, 3);
    snprintf(jn.command, sizeof(jn.command), "00000000000000bb");
    memset(&other, 0, sizeof(other));
    ASSERT_EQ(join_err(&e, &other, &jn, err, sizeof(err)), -EINVAL);
    ASSERT_TRUE(strstr(err, "command fingerprint 00000000000000aa") != NULL);
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* A node put aside is put aside by its host: the same host's next agent (a new process, a new
 * node id) is refused, in memory and from the record after a restart; another host's is not,
 * and a member's own resume is judged by its node id only. */
static void test_put_aside_by_host(void)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 3};
    struct fake f[3] = {0}, again = {0}, other = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 4);
    char path[64], err[512];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;
    int bad;

    env_init(&e, fd);
    jn.bad_node_failures = 1;
    join_n(&e, f, 3, jn); /* node-2 waits as the spare */
    bad = f[0].round.node_rank == 0 ? 0 : 1;
    w.rank = f[bad].round.rank_offset;
    ASSERT_OK(jt_member_worker_exit(f[bad].m, &w, err, sizeof(err)));
    all_ready(f, 3, 1); /* a start-up failure: it goes once the generation stopped */
    ASSERT_TRUE(event_is(&f[bad], "put_aside"));
    /* The same host, a new node id. */
    jn = join_of(9, 2, 2, 4);
    snprintf(jn.host, sizeof(jn.host), "host%d", bad);
    jn.bad_node_failures = 1;
    ASSERT_EQ(join_err(&e, &again, &jn, err, sizeof(err)), -EACCES);
    ASSERT_TRUE(strstr(err, "was put aside by job job (as node id node-") != NULL);
    /* Another host: a spare as usual. */
    jn = join_of(8, 2, 2, 4);
    jn.bad_node_failures = 1;
    ASSERT_OK(join(&e, &other, &jn));
    ASSERT_TRUE(other.spare);
    /* After a restart, from the record alone. */
    env_done(&e);
    env_init(&e, fd);
    memset(&again, 0, sizeof(again));
    jn = join_of(10, 2, 2, 4);
    snprintf(jn.host, sizeof(jn.host), "host%d", bad);
    ASSERT_EQ(join_err(&e, &again, &jn, err, sizeof(err)), -EACCES);
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* Nodes that put themselves aside (UNHEALTHY, each a new node id and host) cannot fill the
 * job's failure history: past RDZVD_JOB_ASIDE_CHECK_MAX the oldest is forgotten, and a member
 * whose workers fail is still counted and put aside. Before, 256 of them filled the history and
 * the job stopped counting failures (and rewrote all of it with each one). */
static void test_own_word_cannot_fill_the_history(void)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 3};
    struct fake f[2] = {0}, s = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 4);
    struct rdzvd_job_record rec;
    char path[64], err[512];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;
    unsigned aside = 0;

    env_init(&e, fd);
    jn.bad_node_failures = 1;
    join_n(&e, f, 2, jn);
    for (int i = 0; i < RDZVD_JOB_HISTORY_MAX + 4; i++) {
        struct fake forged = {0};

        jn = join_of(100 + i, 2, 2, 4);
        jn.bad_node_failures = 1;
        ASSERT_OK(join(&e, &forged, &jn));
        ASSERT_TRUE(forged.spare);
        jt_unhealthy(forged.m, "forged");
        ASSERT_TRUE(event_is(&forged, "put_aside"));
    }
    ASSERT_OK(rdzvd_job_record_get(e.table, "job", &rec));
    for (unsigned i = 0; i < rec.n_hist; i++)
        aside += rec.hist[i].aside;
    ASSERT_EQ(aside, RDZVD_JOB_ASIDE_CHECK_MAX);
    /* The newest are kept, by node id only: none of them held a place, so none proves
     * anything of the host it named. */
    ASSERT_TRUE(strcmp(rec.hist[rec.n_hist - 1].node_id, "node-359") == 0);
    ASSERT_TRUE(strcmp(rec.hist[rec.n_hist - 1].host, "") == 0);
    rdzvd_job_record_clear(&rec);
    /* A spare waits; member 0's workers fail: it is counted and put aside. */
    jn = join_of(9, 2, 2, 4);
    jn.bad_node_failures = 1;
    ASSERT_OK(join(&e, &s, &jn));
    w.rank = f[0].round.rank_offset;
    ASSERT_OK(jt_member_worker_exit(f[0].m, &w, err, sizeof(err)));
    all_ready(f, 2, 1); /* a start-up failure: it goes once the generation stopped */
    ASSERT_TRUE(event_is(&f[0], "put_aside"));
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* A worker killed from outside (SIGKILL: the scheduler, an operator, the OOM killer) is the
 * job's failure, charged to the restart budget, not its node's: random kills of a healthy node
 * never put it aside. A crash (SIGSEGV) and an exit code count against the node as before. */
static void test_kill_from_outside_is_not_the_nodes(void)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 137, .signal = 9};
    struct fake f[3] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 8);
    char err[512];
    struct env e;
    int n0;

    env_init(&e, -1);
    jn.bad_node_failures = 2;
    join_n(&e, f, 3, jn); /* node 2 waits as the spare */
    n0 = f[0].round.node_rank == 0 ? 0 : 1;
    for (uint64_t gen = 1; gen <= 3; gen++) {
        /* killed itself, or a shell wrapper's child was: exit code 128 + 9 */
        w.signal = gen == 2 ? 0 : SIGKILL;
        w.generation = gen;
        w.rank = f[n0].round.rank_offset;
        ASSERT_OK(jt_member_worker_exit(f[n0].m, &w, err, sizeof(err)));
        ASSERT_TRUE(event_is(&f[n0], "restart"));
        ASSERT_TRUE(strstr(f[n0].event.summary, "a signal from outside, not counted against "
                                                "the node") != NULL);
        all_ready(f, 3, gen);
        ASSERT_EQ(f[n0].round.generation, gen + 1); /* still in: three kills, not put aside */
        ASSERT_EQ(f[n0].round.restart_count, (int64_t)gen); /* the job's budget pays */
    }
    ASSERT_EQ(f[2].nrounds, 0);
    /* Two crashes of its own: put aside, the spare takes its place. */
    w.signal = SIGSEGV;
    w.exit_code = 128 + SIGSEGV;
    for (uint64_t gen = 4; gen <= 5; gen++) {
        w.generation = gen;
        w.rank = f[n0].round.rank_offset;
        ASSERT_OK(jt_member_worker_exit(f[n0].m, &w, err, sizeof(err)));
        all_ready(f, 3, gen); /* start-up failures: it goes once the generation stopped */
    }
    ASSERT_TRUE(event_is(&f[n0], "put_aside"));
    env_done(&e);
}

/* Two agents of one job under one host name (two on one machine, no --host)
 * are each told, with the --host to give: the second in its JOINED, the first in its next
 * HEARTBEAT answer, once. A member under another name hears nothing, and a twin that left
 * before the first heard of it leaves nothing behind. */
static void test_two_agents_under_one_host_name_are_told(void)
{
    struct fake f[4] = {0};
    struct rdzv_join jn;
    char text[RDZV_WARNING_MAX + 1];
    struct env e;

    env_init(&e, -1);
    for (int i = 0; i < 4; i++) {
        jn = join_of(i, 8, 8, 0); /* forming all along */
        snprintf(jn.host, sizeof(jn.host), "%s", i == 2 ? "other" : "vm");
        ASSERT_OK(join(&e, &f[i], &jn));
    }
    ASSERT_EQ(f[0].warning[0], 0);
    ASSERT_EQ(f[2].warning[0], 0);
    ASSERT_TRUE(strstr(f[1].warning, "another agent of job job runs on this host under the same "
                                     "name, vm (node id node-0)") != NULL);
    ASSERT_TRUE(strstr(f[1].warning, "--host vm-0, --host vm-1") != NULL);
    ASSERT_TRUE(strstr(f[3].warning, "(node id node-0)") != NULL);
    /* The first is told of the newest, once. */
    ASSERT_TRUE(jt_twin_warning(f[0].m, text, sizeof(text)));
    ASSERT_TRUE(strstr(text, "same name, vm (node id node-3)") != NULL);
    ASSERT_FALSE(jt_twin_warning(f[0].m, text, sizeof(text)));
    ASSERT_FALSE(jt_twin_warning(f[2].m, text, sizeof(text)));
    ASSERT_FALSE(jt_twin_warning(f[1].m, text, sizeof(text)));
    /* Another under vm, gone before the first heard: nothing left to say (nor freed memory). */
    jn = join_of(5, 8, 8, 0);
    snprintf(jn.host, sizeof(jn.host), "vm");
    {
        struct fake late = {0};

        ASSERT_OK(join(&e, &late, &jn));
        jt_gone(late.m);
    }
    ASSERT_FALSE(jt_twin_warning(f[0].m, text, sizeof(text)));
    /* The first under vm gone, the next takes its place: a later one is told of it. */
    jt_gone(f[0].m);
    jn = join_of(6, 8, 8, 0);
    snprintf(jn.host, sizeof(jn.host), "vm");
    {
        struct fake later = {0};

        ASSERT_OK(join(&e, &later, &jn));
        ASSERT_TRUE(strstr(later.warning, "(node id node-1)") != NULL);
        ASSERT_TRUE(jt_twin_warning(f[1].m, text, sizeof(text)));
        ASSERT_TRUE(strstr(text, "(node id node-6)") != NULL);
        jt_gone(later.m);
    }
    env_done(&e);
}

int main(void)
{
    rdzv_log_setup("test-job-roles", RDZV_LOG_ERROR);
    TEST(test_signal_is_one_node_leaving);
    TEST(test_elastic_job_goes_on);
    TEST(test_scheduler_ending_the_job_cancels_it_at_once);
    TEST(test_forming_job_keeps_waiting);
    TEST(test_cancel_while_stopping_ends_at_once);
    TEST(test_outsider_cancel_during_a_blip_changes_nothing);
    TEST(test_away_spare_holds_no_stop);
    TEST(test_outsider_unhealthy_does_not_put_a_host_aside);
    TEST(test_cancelled_job_losing_its_last_member_stays_ended);
    TEST(test_late_agent_of_a_cancelled_run_is_told_beside_a_new_run);
    TEST(test_last_node_lost_ends_the_job_and_its_resume_is_told);
    TEST(test_resume_naming_this_incarnation_is_not_rebuilt);
    TEST(test_plain_join_naming_this_incarnation_is_refused);
    TEST(test_other_command_is_refused_and_a_spare_ran_nothing);
    TEST(test_cancel_wins_over_a_pending_put_aside);
    TEST(test_pending_put_aside_does_not_count_toward_min);
    TEST(test_resumed_nodes_of_a_generation_over_end_it);
    TEST(test_put_aside_by_host);
    TEST(test_own_word_cannot_fill_the_history);
    TEST(test_kill_from_outside_is_not_the_nodes);
    TEST(test_two_agents_under_one_host_name_are_told);
    return tap_done();
}
