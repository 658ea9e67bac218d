/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-sm.c: the job state machine's edges (daemon/job/rdzvd-job-sm.h, proto/RENDEZVOUS.md)
 * driven with fake agents (jobtest.h): NCCL ids and their failures, a host whose store cannot
 * open, scale-up, out-of-order and stale messages, members lost in each state, decisions the job
 * table refuses. test-job.c has the main paths, test-job-rebuild.c resumes and rebuilds,
 * test-job-status.c what status shows. */
#include <inttypes.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "common/rdzv-log.h"
#include "jobtest.h"
#include "daemon/job/rdzvd-job-journals.h"

/* Node rank 0 alone is asked for the ids (the largest count any member wants); NCCL_IDs of
 * another node or generation are stale; the ids reach every ROUND. */
static void test_nccl_ids_reach_every_round(void)
{
    char ids[2][RDZV_NCCL_HEX_LEN + 1];
    struct fake f[2] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 0);
    struct env e;

    env_init(&e, -1);
    jn.nccl = RDZV_NCCL_AUTO;
    ASSERT_OK(join(&e, &f[0], &jn));
    jn = join_of(1, 2, 2, 0);
    jn.nccl = RDZV_NCCL_AUTO;
    jn.nccl_ids = 2;
    ASSERT_OK(join(&e, &f[1], &jn));
    ASSERT_EQ(f[0].nnccl, 1); /* first in join order: node rank 0 */
    ASSERT_EQ(f[0].nccl_gen, 1);
    ASSERT_EQ(f[0].nccl_count, 2);
    ASSERT_EQ(f[1].nnccl, 0);
    ASSERT_EQ(f[0].nrounds + f[1].nrounds, 0); /* not before the ids */
    ASSERT_FALSE(jt_nccl_wanted(f[1].m, 1));
    ASSERT_FALSE(jt_nccl_wanted(f[0].m, 2));
    ASSERT_TRUE(jt_nccl_wanted(f[0].m, 1));
    fill_id(ids[0], 'a');
    fill_id(ids[1], 'b');
    jt_nccl_ids(f[0].m, ids, 2);
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(f[i].nrounds, 1);
        ASSERT_EQ(f[i].round.n_ids, 2);
        ASSERT_TRUE(strcmp(f[i].round.ids[0], ids[0]) == 0);
        ASSERT_TRUE(strcmp(f[i].round.ids[1], ids[1]) == 0);
    }
    ASSERT_FALSE(jt_nccl_wanted(f[0].m, 1)); /* answered: a repeat is stale */
    env_done(&e);
}

/* A replica (host agent_stores): node rank 0's agent is asked for the generation's store (no id
 * needed: count 0) and rdzvd opens none; ROUND points every member at the agent's store. An agent
 * that names none gets rdzvd's own; an agent that cannot host (no host_store) is not asked. */
static void test_agent_hosted_store(void)
{
    for (int variant = 0; variant < 3; variant++) {
        struct fake f[2] = {0};
        struct rdzv_join jn = join_of(0, 2, 2, 0);
        struct env e;

        env_init(&e, -1);
        e.h.agent_stores = true;
        e.h.store_allow = "10.0.0.0/8";
        jn.host_store = variant != 2;
        ASSERT_OK(join(&e, &f[0], &jn));
        jn = join_of(1, 2, 2, 0);
        jn.host_store = true;
        ASSERT_OK(join(&e, &f[1], &jn));
        if (variant == 2) { /* node rank 0 cannot: rdzvd's store, nobody asked */
            ASSERT_EQ(f[0].nnccl, 0);
            ASSERT_EQ(e.stores_open, 1);
            ASSERT_EQ(f[1].nrounds, 1);
            ASSERT_EQ(f[1].round.master_addr[0], '\0');
            env_done(&e);
            continue;
        }
        ASSERT_EQ(f[0].nnccl, 1);
        ASSERT_TRUE(f[0].nccl_store);
        ASSERT_EQ(f[0].nccl_count, 0);
        ASSERT_EQ(strcmp(f[0].nccl_allow, "10.0.0.0/8"), 0); /* rdzvd's --allow-store-from */
        ASSERT_EQ(f[1].nnccl, 0);
        ASSERT_EQ(e.stores_open, 0);
        ASSERT_EQ(f[0].nrounds + f[1].nrounds, 0); /* not before node rank 0 answers */
        jt_nccl_offer(f[1].m, "10.9.9.9", 999, NULL, 0); /* not node rank 0: ignored */
        jt_nccl_offer(f[0].m, variant ? "" : "10.0.0.5", variant ? 0 : 4321, NULL, 0);
        for (int i = 0; i < 2; i++) {
            ASSERT_EQ(f[i].nrounds, 1);
            ASSERT_EQ(strcmp(f[i].round.master_addr, variant ? "" : "10.0.0.5"), 0);
            if (!variant)
                ASSERT_EQ(f[i].round.master_port, 4321);
        }
        ASSERT_EQ(e.stores_open, variant ? 1 : 0); /* the fallback */
        env_done(&e);
    }
}

/* Node rank 0 cannot make an id: the job runs without one unless a member requires NCCL. */
static void test_nccl_error_optional_or_required(void)
{
    for (int required = 0; required < 2; required++) {
        struct fake f[2] = {0};
        struct rdzv_join jn = join_of(0, 2, 2, 0);
        struct env e;

        env_init(&e, -1);
        jn.nccl = required ? RDZV_NCCL_REQUIRED : RDZV_NCCL_AUTO;
        join_n(&e, f, 2, jn);
        ASSERT_EQ(f[0].nnccl, 1);
        jt_nccl_error(f[0].m, "libnccl.so.2: not found");
        for (int i = 0; i < 2; i++) {
            if (required) {
                ASSERT_EQ(f[i].nrounds, 0);
                ASSERT_TRUE(event_is(&f[i], "failed"));
                ASSERT_EQ(f[i].event.exit_code, 1);
                ASSERT_TRUE(strstr(f[i].event.summary, "needs NCCL") != NULL);
                ASSERT_TRUE(strstr(f[i].event.summary, "libnccl.so.2: not found") != NULL);
            } else {
                ASSERT_EQ(f[i].nevents, 0);
                ASSERT_EQ(f[i].nrounds, 1);
                ASSERT_EQ(f[i].round.n_ids, 0);
            }
        }
        env_done(&e);
    }
}

/* The NCCL_REQUEST cannot be queued to node rank 0: the job fails and says so. */
static void test_nccl_request_not_sent_fails_the_job(void)
{
    struct fake f[2] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 0);
    struct env e;

    env_init(&e, -1);
    jn.nccl = RDZV_NCCL_AUTO;
    f[0].nccl_fail = -EPIPE;
    join_n(&e, f, 2, jn);
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(f[i].nrounds, 0);
        ASSERT_TRUE(event_is(&f[i], "failed"));
        ASSERT_TRUE(strstr(f[i].event.summary, "could not ask node rank 0") != NULL);
    }
    env_done(&e);
}

/* Node rank 0 goes while the ids are awaited: no worker started, so the round forms again under
 * the same generation number, nothing charged, and the new node rank 0 is asked. */
static void test_rank0_lost_while_nccl_reforms_uncounted(void)
{
    struct fake f[3] = {0};
    struct rdzv_join jn = join_of(0, 2, 3, 2);
    struct env e;

    env_init(&e, -1);
    jn.nccl = RDZV_NCCL_AUTO;
    jn.last_call_ms = 20;
    join_n(&e, f, 3, jn);
    ASSERT_EQ(f[0].nnccl, 1);
    jt_gone(f[0].m);
    ASSERT_EQ(f[1].nnccl + f[2].nnccl, 0); /* 2 of 3: last call first */
    for (int t = 0; t < 50 && !f[1].nnccl; t++)
        run_ms(&e, 10);
    ASSERT_EQ(f[1].nnccl, 1);
    ASSERT_EQ(f[1].nccl_gen, 1);
    ASSERT_EQ(f[1].nevents + f[2].nevents, 0);
    jt_nccl_error(f[1].m, "no GPU");
    ASSERT_EQ(f[1].round.generation, 1);
    ASSERT_EQ(f[1].round.nnodes, 2);
    ASSERT_EQ(f[1].round.restart_count, 0);
    ASSERT_EQ(f[2].round.node_rank, 1);
    ASSERT_EQ(e.stores_open, 2);
    ASSERT_EQ(e.stores_closed, 1); /* the abandoned round's store */
    env_done(&e);
}

/* The host cannot open the generation's store: the job fails, naming it; a later JOIN to the
 * ended job is refused while its agents leave. */
static void test_store_open_failure_fails_the_job(void)
{
    struct fake f[2] = {0}, late = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 3);
    char err[512];
    struct env e;

    env_init(&e, -1);
    e.store_fail = -EMFILE;
    join_n(&e, f, 2, jn);
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(f[i].nrounds, 0);
        ASSERT_TRUE(event_is(&f[i], "failed"));
        ASSERT_TRUE(strstr(f[i].event.summary, "could not open the job's store") != NULL);
    }
    jn = join_of(2, 2, 2, 3);
    ASSERT_EQ(join_err(&e, &late, &jn, err, sizeof(err)), -EBUSY);
    ASSERT_TRUE(strstr(err, "has ended: it failed at ") != NULL);
    ASSERT_NULL(late.m);
    env_done(&e);
}

/* --scale-up-now: a node joining a running job below MAX restarts it at its first HEARTBEAT
 * (not at its JOIN), not charged to the budget; without it the node waits as a spare. */
static void test_scale_up_now_restarts_uncounted(void)
{
    for (int now = 0; now < 2; now++) {
        struct fake f[2] = {0};
        struct rdzv_join jn = join_of(0, 1, 2, 0);
        struct env e;

        env_init(&e, -1);
        jn.last_call_ms = 10;
        jn.scale_up_now = now;
        ASSERT_OK(join(&e, &f[0], &jn));
        for (int t = 0; t < 50 && !f[0].nrounds; t++)
            run_ms(&e, 10);
        ASSERT_EQ(f[0].round.nnodes, 1);
        jn = join_of(1, 1, 2, 0);
        jn.scale_up_now = now;
        ASSERT_OK(join(&e, &f[1], &jn));
        ASSERT_TRUE(f[1].spare);
        ASSERT_EQ(f[0].nevents, 0); /* not at the JOIN */
        jt_heartbeat(f[1].m);
        if (!now) {
            ASSERT_EQ(f[0].nevents, 0);
            env_done(&e);
            continue;
        }
        ASSERT_TRUE(event_is(&f[0], "restart"));
        ASSERT_TRUE(strstr(f[0].event.summary, "scale up") != NULL);
        jt_ready(f[0].m, 1);
        for (int i = 0; i < 2; i++) {
            ASSERT_EQ(f[i].round.generation, 2);
            ASSERT_EQ(f[i].round.nnodes, 2);
            ASSERT_EQ(f[i].round.restart_count, 0); /* max_restarts 0, and still going */
        }
        ASSERT_EQ(f[0].round.node_rank, 0);
        env_done(&e);
    }
}

/* --scale-up now, once a node's workers have all exited 0 (LEAVE succeeded): the job is
 * finishing, and a joiner does not restart it (the next generation would need workers that are
 * done). It waits as a spare, and is told how the job ended when the other node's workers are
 * done too. */
static void test_scale_up_waits_while_the_job_finishes(void)
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
    ASSERT_EQ(f[0].round.nnodes, 2);
    jt_leave(f[0].m, 1, true);
    jn = join_of(2, 2, 3, 0);
    jn.scale_up_now = true;
    ASSERT_OK(join(&e, &f[2], &jn));
    ASSERT_TRUE(f[2].spare);
    jt_heartbeat(f[2].m);
    ASSERT_EQ(f[0].nevents + f[1].nevents, 0); /* no restart */
    jt_leave(f[1].m, 1, true);
    for (int i = 0; i < 3; i++)
        ASSERT_TRUE(event_is(&f[i], "succeeded"));
    ASSERT_TRUE(strstr(f[2].event.summary, "this node ran nothing") != NULL);
    ASSERT_EQ(f[2].nrounds, 0);
    env_done(&e);
}

/* LEAVE counts only when it is of the running generation and succeeded; a member that left
 * succeeded may disconnect, and the job succeeds when the others leave. */
static void test_leave_rules(void)
{
    struct fake f[2] = {0};
    struct env e;

    env_init(&e, -1);
    join_n(&e, f, 2, join_of(0, 2, 2, 0));
    jt_leave(f[0].m, 1, false);
    jt_leave(f[1].m, 1, false);
    jt_leave(f[0].m, 2, true);
    jt_leave(f[1].m, 0, true);
    ASSERT_EQ(f[0].nevents + f[1].nevents, 0);
    jt_leave(f[0].m, 1, true);
    jt_gone(f[0].m); /* its workers were done: not a failure */
    ASSERT_EQ(f[1].nevents, 0);
    jt_leave(f[1].m, 1, true);
    ASSERT_TRUE(event_is(&f[1], "succeeded"));
    ASSERT_EQ(f[1].event.exit_code, 0);
    env_done(&e);
}

/* READY before the EVENT restart, or for another generation, and a second report of a failure
 * while the job stops, change nothing: one restart charged, the round waits for every READY. */
static void test_out_of_order_ready_and_worker_exit(void)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 3};
    struct fake f[2] = {0};
    char err[256];
    struct env e;

    env_init(&e, -1);
    join_n(&e, f, 2, join_of(0, 2, 2, 5));
    jt_ready(f[0].m, 1); /* not asked to stop */
    w.generation = 0;               /* stale: ignored */
    ASSERT_OK(jt_member_worker_exit(f[0].m, &w, err, sizeof(err)));
    ASSERT_EQ(f[0].nevents + f[1].nevents, 0);
    w.generation = 1;
    w.rank = f[1].round.rank_offset;
    ASSERT_OK(jt_member_worker_exit(f[1].m, &w, err, sizeof(err)));
    ASSERT_TRUE(event_is(&f[0], "restart"));
    w.rank = 1;
    w.local_rank = 1;
    ASSERT_OK(jt_member_worker_exit(f[0].m, &w, err, sizeof(err))); /* while stopping */
    ASSERT_EQ(f[0].nevents, 1);
    jt_ready(f[1].m, 2); /* a generation it was not asked to stop */
    jt_ready(f[1].m, 1);
    jt_ready(f[1].m, 1); /* duplicate */
    ASSERT_EQ(f[0].nrounds, 1);    /* f[0] has not answered */
    jt_ready(f[0].m, 1);
    ASSERT_EQ(f[0].nrounds, 2);
    ASSERT_EQ(f[0].round.restart_count, 1);
    env_done(&e);
}

/* The restart summary names how the worker ended: the agent's reason, a signal, or its code. */
static void test_worker_exit_summary(void)
{
    struct rdzv_worker_exit ws[3] = {
        {.generation = 1, .exit_code = 137, .signal = 9},
        {.generation = 1, .exit_code = 1, .reason = "made no progress for 60 s"},
        {.generation = 1, .exit_code = 42},
    };
    const char *want[3] = {"was killed by signal 9", "made no progress for 60 s",
                           "exited with code 42"};

    for (int k = 0; k < 3; k++) {
        struct fake f[2] = {0};
        char err[256];
        struct env e;

        env_init(&e, -1);
        join_n(&e, f, 2, join_of(0, 2, 2, 1));
        ws[k].rank = f[1].round.rank_offset;
        ASSERT_OK(jt_member_worker_exit(f[1].m, &ws[k], err, sizeof(err)));
        ASSERT_TRUE(event_is(&f[0], "restart"));
        ASSERT_EQ(f[0].event.exit_code, ws[k].exit_code);
        ASSERT_TRUE(strstr(f[0].event.summary, want[k]) != NULL);
        ASSERT_TRUE(strstr(f[0].event.summary, "node rank 1 (host1)") != NULL);
        env_done(&e);
    }
}

/* A candidate leaves while the round forms and the job falls below MIN: the join timeout runs
 * and fails the job, naming how many nodes it had. */
static void test_forming_below_min_join_timeout(void)
{
    struct fake f[2] = {0};
    struct rdzv_join jn = join_of(0, 2, 3, 0);
    struct env e;

    env_init(&e, -1);
    jn.join_timeout_ms = 40;
    join_n(&e, f, 2, jn); /* MIN: last call (60 s) */
    jt_gone(f[1].m);
    for (int t = 0; t < 50 && !f[0].nevents; t++)
        run_ms(&e, 10);
    ASSERT_TRUE(event_is(&f[0], "failed"));
    ASSERT_TRUE(strstr(f[0].event.summary, "only 1 of the 2 nodes") != NULL);
    ASSERT_EQ(f[0].nrounds, 0);
    env_done(&e);
}

/* A node lost below MIN after a restart: the job waits for a replacement up to the join
 * timeout; one that comes forms the next generation, none fails it with the root cause. */
static void test_lost_below_min_waits_for_replacement(void)
{
    for (int comes = 0; comes < 2; comes++) {
        struct fake f[3] = {0};
        struct rdzv_join jn = join_of(0, 2, 2, 3);
        struct env e;

        env_init(&e, -1);
        jn.join_timeout_ms = 60;
        join_n(&e, f, 2, jn);
        jt_advance((uint64_t)rdzvd_job_startup_fail_ms(&jt_steps)); /* it ran: counted */
        jt_gone(f[1].m);
        ASSERT_TRUE(event_is(&f[0], "restart"));
        jt_ready(f[0].m, 1);
        ASSERT_EQ(f[0].nrounds, 1);
        if (comes) {
            jn = join_of(2, 2, 2, 3);
            ASSERT_OK(join(&e, &f[2], &jn));
            ASSERT_EQ(f[2].round.generation, 2);
            ASSERT_EQ(f[2].round.restart_count, 1);
            ASSERT_EQ(f[0].round.node_rank, 0);
        } else {
            for (int t = 0; t < 50 && f[0].nevents < 2; t++)
                run_ms(&e, 10);
            ASSERT_TRUE(event_is(&f[0], "failed"));
            ASSERT_TRUE(strstr(f[0].event.summary, "only 1 of the 2 nodes") != NULL);
            ASSERT_TRUE(strstr(f[0].event.summary, "; root cause: the agent of node rank 1") !=
                        NULL);
        }
        env_done(&e);
    }
}

/* A member lost while the others stop: the next round does not wait for its READY. */
static void test_lost_while_stopping(void)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 1};
    struct fake f[3] = {0};
    char err[256];
    struct env e;

    env_init(&e, -1);
    join_n(&e, f, 3, join_of(0, 2, 3, 2));
    ASSERT_OK(jt_member_worker_exit(f[0].m, &w, err, sizeof(err)));
    jt_ready(f[0].m, 1);
    jt_ready(f[1].m, 1);
    ASSERT_EQ(f[0].nrounds, 1);
    jt_gone(f[2].m);
    ASSERT_EQ(f[0].nrounds, 2);
    ASSERT_EQ(f[0].round.generation, 2);
    ASSERT_EQ(f[0].round.nnodes, 2);
    ASSERT_EQ(f[0].round.restart_count, 1); /* its loss is not a second restart */
    env_done(&e);
}

/* The last member gone: the job goes with it, its store closed. */
static void test_last_member_gone_removes_the_job(void)
{
    struct fake f = {0};
    struct env e;

    env_init(&e, -1);
    {
        struct rdzv_join jn = join_of(0, 1, 1, 0);

        ASSERT_OK(join(&e, &f, &jn));
    }
    ASSERT_EQ(f.nrounds, 1);
    ASSERT_EQ(njobs(&e), 1);
    jt_gone(f.m);
    ASSERT_EQ(njobs(&e), 0);
    ASSERT_EQ(e.stores_closed, e.stores_open);
    env_done(&e);
}

/* A deadline that passes with the member's input unread gets one more loop turn, no more: a
 * member whose input stays unread is still lost. */
static void test_unread_input_delays_loss_once(void)
{
    struct fake f = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 0);
    struct env e;

    env_init(&e, -1);
    jn.heartbeat_timeout_ms = 30;
    f.unread = 10;
    ASSERT_OK(join(&e, &f, &jn));
    for (int t = 0; t < 30 && !f.closed; t++)
        run_ms(&e, 10);
    ASSERT_TRUE(f.closed);
    ASSERT_TRUE(strstr(f.close_reason, "sent no heartbeat for 0.0 s") != NULL);
    ASSERT_EQ(njobs(&e), 0);
    env_done(&e);
}

/* --recovery must agree with the job's, and a hinted node rank past MAX is a spare's. */
static void test_recovery_mismatch_and_hint_past_max(void)
{
    struct fake f[3] = {0}, x = {0};
    struct rdzv_join jn = join_of(0, 1, 2, 0);
    char err[512];
    struct env e;

    env_init(&e, -1);
    ASSERT_OK(join(&e, &f[0], &jn));
    jn = join_of(1, 1, 2, 0);
    jn.inplace = true;
    ASSERT_EQ(join_err(&e, &x, &jn, err, sizeof(err)), -EINVAL);
    ASSERT_TRUE(strstr(err, "--recovery restart, this agent has --recovery inplace") != NULL);
    jn = resume_of(1, 1, 0, 0);
    jn.min = 1;
    jn.inplace = true;
    ASSERT_EQ(join_err(&e, &x, &jn, err, sizeof(err)), -EINVAL);
    ASSERT_TRUE(strstr(err, "--recovery") != NULL);
    jn = join_of(1, 1, 2, 0);
    jn.node_rank = 7;
    jn.rank_hint = true;
    ASSERT_OK(join(&e, &f[1], &jn));
    ASSERT_EQ(f[1].round.nnodes, 2);
    ASSERT_TRUE(f[0].round.node_rank + f[1].round.node_rank == 1);
    /* A demanded rank that a member holds (it did not ask for it) is taken too. */
    jn = join_of(2, 1, 2, 0);
    jn.node_rank = f[0].round.node_rank;
    ASSERT_EQ(join_err(&e, &x, &jn, err, sizeof(err)), -EEXIST);
    ASSERT_TRUE(strstr(err, "already taken by host0 (node id node-0)") != NULL);
    env_done(&e);
}

/* Rank tables grow past their first size: 20 nodes each demanding a rank get it. */
static void test_many_demanded_ranks(void)
{
    struct fake *f = calloc(20, sizeof(*f));
    struct env e;

    ASSERT_NOT_NULL(f);
    env_init(&e, -1);
    for (int i = 0; i < 20; i++) {
        struct rdzv_join jn = join_of(i, 20, 20, 0);

        jn.node_rank = 19 - i;
        ASSERT_OK(join(&e, &f[i], &jn));
    }
    for (int i = 0; i < 20; i++) {
        ASSERT_EQ(f[i].nrounds, 1);
        ASSERT_EQ(f[i].round.node_rank, 19 - i);
        ASSERT_EQ(f[i].round.rank_offset, 2 * (19 - i));
        ASSERT_EQ(f[i].round.world_size, 40);
    }
    env_done(&e);
    free(f);
}

/* Daemon shutdown drops its jobs but keeps their records and store journals for the next
 * rdzvd, and unties the peers without closing them. */
static void test_shutdown_keeps_records(void)
{
    struct rdzvd_job_record rec;
    struct fake f[2] = {0};
    char path[64];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    env_init(&e, fd);
    join_n(&e, f, 2, join_of(0, 2, 2, 1));
    ASSERT_EQ(f[0].nrounds, 1);
    jt_drop_all(&e.jobs);
    for (int i = 0; i < 2; i++) {
        ASSERT_NULL(f[i].m);
        ASSERT_FALSE(f[i].closed);
    }
    ASSERT_EQ(e.stores_closed, 1);
    ASSERT_EQ(e.stores_dropped, 0);
    ASSERT_OK(rdzvd_job_record_get(e.table, "job", &rec));
    ASSERT_EQ(rec.generation, 1);
    ASSERT_TRUE(rec.running);
    ASSERT_EQ(rec.nnodes, 2);
    /* ... naming who holds each node rank */
    ASSERT_NOT_NULL(rec.nodes);
    for (int i = 0; i < 2; i++) {
        const char *id = rec.nodes[f[i].round.node_rank].node_id;

        ASSERT_EQ(rec.nodes[f[i].round.node_rank].nproc, 2);
        ASSERT_TRUE(strncmp(id, "node-", 5) == 0 && id[5] == '0' + i && !id[6]);
    }
    rdzvd_job_record_clear(&rec);
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* A node whose workers failed --bad-node-failures (2) times is put aside: it is
 * sent EVENT put_aside (exit code 69, the reason) and closed, the restart that follows forms the
 * next generation with the spare, and the history is in the job's record: after an rdzvd
 * restart on the same --state-dir the rebuilt job still refuses the node (-EACCES, saying
 * why), and a JOIN of it to the job not yet in memory is refused from the record alone. */
static void test_bad_node_put_aside_and_recorded(void)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 3};
    struct rdzvd_job_record rec;
    struct fake f[3] = {0}, again = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 4);
    char path[64], err[512];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;
    int bad;

    env_init(&e, fd);
    jn.bad_node_failures = 2;
    join_n(&e, f, 3, jn); /* node-2 waits as the spare */
    ASSERT_TRUE(f[2].spare);
    bad = f[0].round.node_rank == 0 ? 0 : 1;
    for (uint64_t gen = 1; gen <= 2; gen++) {
        w.generation = gen;
        w.rank = f[bad].round.rank_offset;
        ASSERT_OK(jt_member_worker_exit(f[bad].m, &w, err, sizeof(err)));
        if (gen == 1) {
            ASSERT_TRUE(event_is(&f[bad], "restart"));
            all_ready(f, 3, gen);
            ASSERT_EQ(f[bad].round.generation, 2); /* back in, with its first failure */
            ASSERT_EQ(f[2].nrounds, 0);
        }
    }
    ASSERT_TRUE(event_is(&f[1 - bad], "restart"));
    ASSERT_TRUE(strstr(f[1 - bad].event.summary, ") is put aside once its generation stopped, "
                                                 "unless every node failed alike: its workers "
                                                 "failed 2 times") != NULL);
    all_ready(f, 3, 2); /* start-up failures: it goes once the generation stopped */
    ASSERT_TRUE(f[bad].closed);
    ASSERT_NULL(f[bad].m);
    ASSERT_TRUE(event_is(&f[bad], "put_aside"));
    ASSERT_EQ(f[bad].event.exit_code, RDZV_EXIT_PUT_ASIDE);
    ASSERT_TRUE(strstr(f[bad].event.summary, "its workers failed 2 times within the job") != NULL);
    ASSERT_EQ(f[2].nrounds, 1); /* the spare takes the place */
    ASSERT_EQ(f[2].round.generation, 3);
    ASSERT_EQ(f[1 - bad].round.generation, 3);
    ASSERT_EQ(f[2].round.restart_count, 2); /* one restart per re-forming */
    ASSERT_OK(rdzvd_job_record_get(e.table, "job", &rec));
    ASSERT_EQ(rec.n_hist, 1);
    ASSERT_TRUE(rec.hist[0].aside);
    ASSERT_EQ(rec.hist[0].failures, 2);
    ASSERT_TRUE(strcmp(rec.hist[0].node_id, bad ? "node-1" : "node-0") == 0);
    rdzvd_job_record_clear(&rec);
    /* The same node id again, in memory: refused, saying why. */
    jn = join_of(bad, 2, 2, 4);
    ASSERT_EQ(join_err(&e, &again, &jn, err, sizeof(err)), -EACCES);
    ASSERT_TRUE(strstr(err, "was put aside by job job: its workers failed 2 times") != NULL);
    /* rdzvd restarts: the record's history comes back with the job. */
    env_done(&e);
    env_init(&e, fd);
    ASSERT_EQ(join_err(&e, &again, &jn, err, sizeof(err)), -EACCES);
    ASSERT_EQ(njobs(&e), 0); /* refused from the record, nothing made */
    env_done(&e);
    env_forget_table(fd);
    jt_state_dir_done(fd, path);
}

/* CANCEL: an agent stopped from outside ends the job as cancelled, exit code 128 +
 * the signal, nothing charged, every member told; later cancels are ignored. While the job is
 * stopping (a restart under way) it ends at once too, as cancelled, not as the restart, and its
 * end is recorded at once. */
static void test_cancel_is_not_a_failure(void)
{
    for (int stopping = 0; stopping < 2; stopping++) {
        struct rdzv_worker_exit w = {.generation = 1, .exit_code = 3};
        struct fake f[2] = {0};
        char err[256];
        struct env e;

        env_init(&e, -1);
        join_n(&e, f, 2, join_of(0, 2, 2, 3));
        if (stopping) {
            w.rank = f[0].round.rank_offset;
            ASSERT_OK(jt_member_worker_exit(f[0].m, &w, err, sizeof(err)));
            ASSERT_TRUE(event_is(&f[1], "restart"));
        }
        jt_member_cancel(f[1].m, 15, "Slurm job 42", "");
        if (stopping)
            all_ready(f, 2, 1); /* READYs after the end change nothing */
        for (int i = 0; i < 2; i++) {
            ASSERT_TRUE(event_is(&f[i], "cancelled"));
            ASSERT_EQ(f[i].event.exit_code, 143);
            ASSERT_TRUE(strstr(f[i].event.summary,
                               "cancelled: the agent of node host1 received "
                               "SIGTERM from outside (Slurm job 42)") != NULL);
            ASSERT_EQ(f[i].nrounds, 1); /* no generation formed after it */
        }
        jt_member_cancel(f[0].m, 2, "", ""); /* ended: ignored */
        ASSERT_EQ(f[0].event.exit_code, 143);
        env_done(&e);
    }
}

/* Both fakes heard that the job failed, its decision that generation 1 did what (formed,
 * stopped) not recorded, after nrounds ROUNDs (0: the generation never went out); the job table
 * holds no record of it. */
static void assert_unrecorded(struct env *e, struct fake f[2], const char *what, int nrounds)
{
    char want[96];
    struct rdzvd_job_record rec;

    snprintf(want, sizeof(want), "could not record that generation 1 %s in its job table", what);
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(f[i].nrounds, nrounds);
        ASSERT_TRUE(event_is(&f[i], "failed"));
        ASSERT_TRUE(strstr(f[i].event.summary, want) != NULL);
    }
    ASSERT_EQ(rdzvd_job_record_get(e->table, "job", &rec), -ENOENT);
}

/* The job table refuses the decision that generation 1 formed (it is full): no member hears of
 * the generation (no ROUND), the job ends naming why, and its record holds nothing of it: what
 * the agents were told and what the record holds agree. */
/* What the job table holds once two nodes joined a job that waits for a third: their secrets
 * (ADMITTED), at what the table charges for them. */
static uint64_t two_joins_held(void)
{
    struct fake f[2] = {0};
    char path[64];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;
    uint64_t held;

    env_init(&e, fd);
    join_n(&e, f, 2, join_of(0, 3, 3, 3));
    ASSERT_EQ(f[0].nrounds, 0);
    held = rdzvd_store_held(e.table);
    ASSERT_TRUE(held > 0);
    env_done(&e);
    jt_state_dir_done(fd, path);
    return held;
}

static void test_refused_formed_sends_nothing(void)
{
    /* Room for the two nodes' secrets (ADMITTED), not for the record. */
    struct rdzvd_store_budget full = {.max = two_joins_held()};
    struct fake f[2] = {0};
    char path[64];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    env_init(&e, fd);
    rdzvd_store_set_budget(e.table, &full, UINT64_MAX);
    join_n(&e, f, 2, join_of(0, 2, 2, 3));
    assert_unrecorded(&e, f, "formed", 0);
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* A restart whose decision the job table refuses (its record is already past it: restart 2, as
 * another leader decided) sends no restart: the job ends naming why, and its record goes with
 * it. */
static void test_refused_stopped_sends_nothing(void)
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 3};
    struct rdzvd_job_record rec = {.min = 2, .max = 2, .max_restarts = 3, .generation = 1,
                                   .restart_count = 2};
    struct fake f[2] = {0};
    char path[64], err[256];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    env_init(&e, fd);
    join_n(&e, f, 2, join_of(0, 2, 2, 3));
    ASSERT_EQ(f[0].nrounds, 1);
    snprintf(rec.run_id, sizeof(rec.run_id), "job");
    ASSERT_OK(rdzvd_job_decide(e.table, RDZVD_DECIDE_STOPPED, &rec));
    w.rank = f[1].round.rank_offset;
    ASSERT_OK(jt_member_worker_exit(f[1].m, &w, err, sizeof(err)));
    for (int i = 0; i < 2; i++)
        ASSERT_EQ(f[i].nevents, 1); /* the failure, no restart before it */
    assert_unrecorded(&e, f, "stopped", 1);
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* The job table's journal cannot write the decision that generation 1 formed (a file size limit
 * makes the write fail, EFBIG): the decision is not made, no member hears of the generation, and
 * the job fails naming why; an rdzvd restarted on the directory finds no record of it. */
static void test_unwritten_decision_sends_nothing(void)
{
    struct rdzvd_job_record rec;
    struct fake f[2] = {0};
    char path[64];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    env_init(&e, fd);
    jt_join_formed_unwritten(&e, path, f); /* both nodes' secrets are on disk: only FORMED is new */
    ASSERT_TRUE(rdzvd_journal_failed(e.table_journal));
    assert_unrecorded(&e, f, "formed", 0);
    env_done(&e);
    env_init(&e, fd); /* what the disk holds */
    ASSERT_EQ(rdzvd_job_record_get(e.table, "job", &rec), -ENOENT);
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* The job table's journal cannot write a new node's secret (ADMITTED; EFBIG): that node is not
 * told it joined, and its job fails naming why, as when FORMED is not written. */
static void test_unwritten_admitted_fails_job(void)
{
    struct fake f[2] = {0};
    char path[64];
    int fd = jt_state_dir(path, sizeof(path));
    struct rdzv_join jn = join_of(0, 3, 3, 3);
    struct env e;

    env_init(&e, fd);
    ASSERT_OK(join(&e, &f[0], &jn));
    jn = join_of(1, 3, 3, 3);
    (void)jt_join_journal_full(&e, path, &f[1], &jn); /* before: refused with an ERROR */
    ASSERT_EQ(f[1].njoined, 0);
    for (int i = 0; i < 2; i++) {
        ASSERT_TRUE(event_is(&f[i], "failed"));
        ASSERT_NOT_NULL(strstr(f[i].event.summary, "could not record its decision 'admitted'"));
    }
    env_done(&e);
    jt_state_dir_done(fd, path);
}

/* rdzvd stalled while node rank 0's agent made the NCCL id; its agent reconnected (a plain JOIN:
 * it has no round to resume). It is the same member on the new connection, asked again there for
 * what its old connection was asked, and its ids form the round: not "node id 'node-0' has
 * already joined", nor a job failed 60 s later with "sent no NCCL id". */
static void test_rank0_back_during_nccl_is_asked_again(void)
{
    char ids[1][RDZV_NCCL_HEX_LEN + 1];
    struct fake f[2] = {0}, g = {0};
    struct rdzv_join jn;
    struct env e;

    env_init(&e, -1);
    for (int i = 0; i < 2; i++) {
        jn = join_of(i, 2, 2, 1);
        jn.nccl = RDZV_NCCL_AUTO;
        jn.heartbeat_timeout_ms = 40;
        ASSERT_OK(join(&e, &f[i], &jn));
    }
    ASSERT_EQ(f[0].nnccl, 1);
    jt_stall_ms(&e, 200);
    for (int i = 0; i < 2; i++)
        ASSERT_EQ(jt_heartbeat(f[i].m), 1); /* read late, after the stall */
    jt_gone(f[0].m);
    jn = join_of(0, 2, 2, 1);
    jn.nccl = RDZV_NCCL_AUTO;
    jn.heartbeat_timeout_ms = 40;
    ASSERT_OK(join(&e, &g, &jn));
    ASSERT_FALSE(g.spare);
    ASSERT_EQ(g.nnccl, 1);
    ASSERT_EQ(g.nccl_gen, 1);
    ASSERT_EQ(g.nccl_count, 1);
    ASSERT_TRUE(jt_nccl_wanted(g.m, 1));
    fill_id(ids[0], 'c');
    jt_nccl_ids(g.m, ids, 1);
    ASSERT_EQ(g.nrounds, 1);
    ASSERT_EQ(f[1].nrounds, 1);
    ASSERT_EQ(g.round.node_rank, 0);
    ASSERT_EQ(g.round.generation, 1);
    ASSERT_EQ(f[1].nevents + g.nevents, 0);
    env_done(&e);
}

int main(void)
{
    rdzv_log_setup("test-job-sm", RDZV_LOG_ERROR);
    TEST(test_nccl_ids_reach_every_round);
    TEST(test_agent_hosted_store);
    TEST(test_nccl_error_optional_or_required);
    TEST(test_nccl_request_not_sent_fails_the_job);
    TEST(test_rank0_lost_while_nccl_reforms_uncounted);
    TEST(test_rank0_back_during_nccl_is_asked_again);
    TEST(test_store_open_failure_fails_the_job);
    TEST(test_scale_up_now_restarts_uncounted);
    TEST(test_scale_up_waits_while_the_job_finishes);
    TEST(test_leave_rules);
    TEST(test_out_of_order_ready_and_worker_exit);
    TEST(test_worker_exit_summary);
    TEST(test_forming_below_min_join_timeout);
    TEST(test_lost_below_min_waits_for_replacement);
    TEST(test_lost_while_stopping);
    TEST(test_last_member_gone_removes_the_job);
    TEST(test_unread_input_delays_loss_once);
    TEST(test_recovery_mismatch_and_hint_past_max);
    TEST(test_many_demanded_ranks);
    TEST(test_shutdown_keeps_records);
    TEST(test_refused_formed_sends_nothing);
    TEST(test_refused_stopped_sends_nothing);
    TEST(test_unwritten_decision_sends_nothing);
    TEST(test_unwritten_admitted_fails_job);
    TEST(test_bad_node_put_aside_and_recorded);
    TEST(test_cancel_is_not_a_failure);
    return tap_done();
}
