/* SPDX-License-Identifier: Apache-2.0 */
/* test-job.c: the job state machine (daemon/job/rdzvd-job-sm.h) driven with fake members
 * (jobtest.h): a real uv loop for its timers, no sockets. Covers what
 * tests/rendezvous/test_agents.py and tests/integration/test_protocol.py check for rounds and
 * restarts, a stall of rdzvd, progress and the timeline. A job rebuilt after an rdzvd restart:
 * test-job-rebuild.c. */
#include <errno.h>
#include <malloc.h>
#include <inttypes.h>

#include "common/rdzv-log.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "jobtest.h"

static void test_round_closes_at_max(void)
{
    struct env e;
    struct fake f[2] = {0};
    struct rdzv_join jn;

    env_init(&e, -1);
    jn = join_of(0, 1, 2, 0);
    ASSERT_OK(join(&e, &f[0], &jn));
    ASSERT_EQ(f[0].njoined, 1);
    ASSERT_FALSE(f[0].spare);
    ASSERT_EQ(f[0].nrounds, 0); /* min reached, max not: last call runs */
    jn = join_of(1, 1, 2, 0);
    ASSERT_OK(join(&e, &f[1], &jn));
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(f[i].nrounds, 1);
        ASSERT_EQ(f[i].round.generation, 1);
        ASSERT_EQ(f[i].round.nnodes, 2);
        ASSERT_EQ(f[i].round.world_size, 4);
        ASSERT_EQ(f[i].round.master_port, e.last_port);
        ASSERT_EQ(f[i].round.restart_count, 0);
    }
    ASSERT_EQ(f[0].round.node_rank + f[1].round.node_rank, 1); /* 0 and 1 */
    ASSERT_EQ(f[0].round.rank_offset + f[1].round.rank_offset, 2);
    env_done(&e);
}

static void test_round_closes_at_min_after_last_call(void)
{
    struct env e;
    struct fake f[2] = {0};

    env_init(&e, -1);
    for (int i = 0; i < 2; i++) {
        struct rdzv_join jn = join_of(i, 2, 4, 0);

        jn.last_call_ms = 50;
        ASSERT_OK(join(&e, &f[i], &jn));
    }
    ASSERT_EQ(f[0].nrounds, 0);
    run_ms(&e, 20);
    ASSERT_EQ(f[0].nrounds, 0);
    run_ms(&e, 200);
    ASSERT_EQ(f[0].nrounds, 1);
    ASSERT_EQ(f[1].nrounds, 1);
    ASSERT_EQ(f[0].round.nnodes, 2);
    env_done(&e);
}

static void test_below_min_fails_at_join_timeout(void)
{
    struct env e;
    struct fake f = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 0);

    env_init(&e, -1);
    jn.join_timeout_ms = 30;
    ASSERT_OK(join(&e, &f, &jn));
    run_ms(&e, 200);
    ASSERT_EQ(f.nrounds, 0);
    ASSERT_EQ(f.nevents, 1);
    ASSERT_BYTES_STR(f.event.type, strlen(f.event.type), "failed");
    env_done(&e);
}

/* What a member's HEARTBEAT answer says the job waits for (no wait is silent): its nodes
 * while it forms, with the join timeout's time left; nothing once it runs. */
static void test_member_wait_while_forming(void)
{
    struct env e;
    struct fake f[2] = {{0}};
    struct rdzv_join jn = join_of(0, 2, 3, 0);
    struct rdzv_wait w;

    env_init(&e, -1);
    jn.join_timeout_ms = 30000;
    ASSERT_OK(join(&e, &f[0], &jn));
    run_ms(&e, 1000);
    jt_wait(f[0].m, &w);
    ASSERT_EQ(w.what, RDZV_WAIT_NODES);
    ASSERT_EQ(w.nodes, 1);
    ASSERT_EQ(w.need, 2);
    ASSERT_EQ(w.max, 3);
    ASSERT_EQ(w.left_ms, 29000);
    jn = join_of(1, 2, 3, 0);
    jn.join_timeout_ms = 30000;
    ASSERT_OK(join(&e, &f[1], &jn));
    jt_wait(f[1].m, &w);
    ASSERT_EQ(w.what, RDZV_WAIT_NODES); /* 2 of 2..3: the last call for a third */
    ASSERT_EQ(w.nodes, 2);
    ASSERT_EQ(w.left_ms, -1); /* no join timeout once MIN joined */
    for (int k = 0; k < 2; k++) { /* the agents heartbeat meanwhile */
        jt_heartbeat(f[0].m);
        jt_heartbeat(f[1].m);
        run_ms(&e, 30500);
    }
    /* The last call (60 s) over: the round closed at 2. */
    ASSERT_EQ(f[0].nrounds, 1);
    jt_wait(f[0].m, &w);
    ASSERT_EQ(w.what, RDZV_WAIT_NONE);
    env_done(&e);
}

static void test_node_ranks_hints_honoured_and_unique(void)
{
    struct env e;
    struct fake f[4] = {0}, dup = {0};
    struct rdzv_join jn;

    env_init(&e, -1);
    jn = join_of(0, 4, 4, 0);
    jn.node_rank = 3;
    ASSERT_OK(join(&e, &f[0], &jn));
    jn = join_of(1, 4, 4, 0);
    jn.node_rank = 0;
    ASSERT_OK(join(&e, &f[1], &jn));
    /* A demanded rank that is taken is refused; a hinted one takes any free rank. */
    jn = join_of(9, 4, 4, 0);
    jn.node_rank = 3;
    ASSERT_EQ(join(&e, &dup, &jn), -EEXIST);
    ASSERT_NULL(dup.m);
    jn = join_of(2, 4, 4, 0);
    jn.node_rank = 3;
    jn.rank_hint = true;
    ASSERT_OK(join(&e, &f[2], &jn));
    /* Out of range without a hint: refused. */
    jn = join_of(8, 4, 4, 0);
    jn.node_rank = 4;
    ASSERT_EQ(join(&e, &dup, &jn), -ERANGE);
    /* The same node id twice, from another agent (another secret): refused. Its own agent's
     * would take its place over (job-policy R4b). */
    jn = join_of(1, 4, 4, 0);
    memset(jn.secret, 'a', RDZV_SECRET_HEX);
    jn.secret[RDZV_SECRET_HEX] = '\0';
    ASSERT_EQ(join(&e, &dup, &jn), -EPERM);
    /* Different --nnodes: refused. */
    jn = join_of(7, 4, 5, 0);
    ASSERT_EQ(join(&e, &dup, &jn), -EINVAL);
    jn = join_of(3, 4, 4, 0);
    ASSERT_OK(join(&e, &f[3], &jn));
    ASSERT_EQ(f[0].round.node_rank, 3);
    ASSERT_EQ(f[1].round.node_rank, 0);
    {
        bool seen[4] = {false};

        for (int i = 0; i < 4; i++) {
            ASSERT_EQ(f[i].nrounds, 1);
            ASSERT_TRUE(f[i].round.node_rank >= 0 && f[i].round.node_rank < 4);
            ASSERT_FALSE(seen[f[i].round.node_rank]);
            seen[f[i].round.node_rank] = true;
            ASSERT_EQ(f[i].round.rank_offset, f[i].round.node_rank * 2);
        }
    }
    env_done(&e);
}

static void test_spare_waits_and_is_promoted(void)
{
    struct env e;
    struct fake f[3] = {0};
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 3};

    env_init(&e, -1);
    for (int i = 0; i < 3; i++) {
        struct rdzv_join jn = join_of(i, 2, 2, 3);

        ASSERT_OK(join(&e, &f[i], &jn));
    }
    ASSERT_EQ(f[0].nrounds, 1);
    ASSERT_EQ(f[1].nrounds, 1);
    ASSERT_TRUE(f[2].spare);
    ASSERT_EQ(f[2].nrounds, 0);
    /* A worker failure: the members stop, the round re-forms with the same nodes. */
    jt_worker_exit(&f[0], &w);
    ASSERT_EQ(f[0].nevents, 1);
    ASSERT_BYTES_STR(f[0].event.type, strlen(f[0].event.type), "restart");
    ASSERT_EQ(f[2].nevents, 0); /* the spare runs nothing */
    all_ready(f, 2, 1);
    ASSERT_EQ(f[0].round.generation, 2);
    ASSERT_EQ(f[0].round.restart_count, 1);
    ASSERT_EQ(f[0].round.node_rank, 0); /* previous ranks kept */
    ASSERT_EQ(f[1].round.node_rank, 1);
    ASSERT_EQ(f[2].nrounds, 0);
    /* Node rank 1's agent is gone after its workers ran past the start-up window (it ran, as
     * rdzvd's clock says: a counted restart): the spare takes its place. */
    jt_advance((uint64_t)rdzvd_job_startup_fail_ms(&jt_steps));
    jt_gone(f[1].m);
    f[1].m = NULL; /* freed with it */
    ASSERT_EQ(f[0].event.generation, 2);
    all_ready(f, 1, 2);
    ASSERT_EQ(f[2].nrounds, 1);
    ASSERT_EQ(f[2].round.generation, 3);
    ASSERT_EQ(f[2].round.node_rank, 1);
    ASSERT_EQ(f[2].round.restart_count, 2);
    ASSERT_EQ(f[0].round.generation, 3);
    env_done(&e);
}

/* A WORKER_EXIT speaks only for its sender's node: a rank of another node,
 * or a local rank past the node's, is refused and restarts nothing. */
static void test_worker_exit_for_another_node_is_refused(void)
{
    struct env e;
    struct fake f[2] = {0};
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 9};
    char err[256] = "";

    env_init(&e, -1);
    for (int i = 0; i < 2; i++) {
        struct rdzv_join jn = join_of(i, 2, 2, 1);

        ASSERT_OK(join(&e, &f[i], &jn));
    }
    ASSERT_EQ(f[0].nrounds, 1);
    w.rank = f[0].round.rank_offset; /* node 0's rank, reported by node 1 */
    w.local_rank = 0;
    ASSERT_EQ(jt_member_worker_exit(f[1].m, &w, err, sizeof(err)), -EINVAL);
    ASSERT_TRUE(strstr(err, "is not one of this node's ranks") != NULL);
    w.rank = f[1].round.rank_offset + 2; /* past node 1's two workers */
    w.local_rank = 2;
    ASSERT_EQ(jt_member_worker_exit(f[1].m, &w, err, sizeof(err)), -EINVAL);
    for (int i = 0; i < 2; i++)
        ASSERT_EQ(f[i].nevents, 0);
    jt_worker_exit(&f[1], &w); /* its own: the job restarts */
    ASSERT_BYTES_STR(f[0].event.type, strlen(f[0].event.type), "restart");
    env_done(&e);
}

static void test_restart_budget_exhausted_fails_the_job(void)
{
    struct env e;
    struct fake f[2] = {0};
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 7};

    env_init(&e, -1);
    for (int i = 0; i < 2; i++) {
        struct rdzv_join jn = join_of(i, 2, 2, 1);

        ASSERT_OK(join(&e, &f[i], &jn));
    }
    jt_worker_exit(&f[1], &w);
    all_ready(f, 2, 1);
    ASSERT_EQ(f[0].round.generation, 2);
    w.generation = 2;
    jt_worker_exit(&f[1], &w);
    for (int i = 0; i < 2; i++) {
        ASSERT_BYTES_STR(f[i].event.type, strlen(f[i].event.type), "failed");
        ASSERT_EQ(f[i].event.exit_code, 7);
        ASSERT_TRUE(strstr(f[i].event.summary, "restart budget exhausted") != NULL);
    }
    ASSERT_EQ(f[0].nrounds, 2);
    env_done(&e);
}

/* A READY replayed by a member of the running generation (its last stop's, or generation 0) is
 * ignored: counted, it would let the next round form before that node's workers stopped. */
static void test_stale_ready_while_running_is_ignored(void)
{
    struct env e;
    struct fake f[2] = {0};
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 7};

    env_init(&e, -1);
    for (int i = 0; i < 2; i++) {
        struct rdzv_join jn = join_of(i, 2, 2, 3);

        ASSERT_OK(join(&e, &f[i], &jn));
    }
    jt_worker_exit(&f[1], &w);
    all_ready(f, 2, 1);
    ASSERT_EQ(f[0].round.generation, 2);
    jt_ready(f[0].m, 1); /* generation 1's READY again, while 2 runs */
    jt_ready(f[0].m, 0);
    w.generation = 2;
    jt_worker_exit(&f[1], &w);
    ASSERT_BYTES_STR(f[0].event.type, strlen(f[0].event.type), "restart");
    jt_ready(f[1].m, 2);
    run_ms(&e, 50);
    ASSERT_EQ(f[1].nrounds, 2); /* node 0 has not stopped: no round yet */
    jt_ready(f[0].m, 2);
    ASSERT_EQ(f[1].nrounds, 3);
    ASSERT_EQ(f[1].round.generation, 3);
    env_done(&e);
}

static void test_job_succeeds_when_every_node_left(void)
{
    struct env e;
    struct fake f[2] = {0};

    env_init(&e, -1);
    for (int i = 0; i < 2; i++) {
        struct rdzv_join jn = join_of(i, 2, 2, 0);

        ASSERT_OK(join(&e, &f[i], &jn));
    }
    jt_leave(f[0].m, 1, true);
    ASSERT_EQ(f[0].nevents, 0);
    jt_leave(f[1].m, 1, true);
    ASSERT_BYTES_STR(f[0].event.type, strlen(f[0].event.type), "succeeded");
    ASSERT_BYTES_STR(f[1].event.type, strlen(f[1].event.type), "succeeded");
    env_done(&e);
}

static void test_heartbeat_loss_restarts(void)
{
    struct env e;
    struct fake f[2] = {0};

    env_init(&e, -1);
    for (int i = 0; i < 2; i++) {
        struct rdzv_join jn = join_of(i, 2, 2, 1);

        jn.heartbeat_timeout_ms = 40;
        ASSERT_OK(join(&e, &f[i], &jn));
    }
    ASSERT_EQ(f[0].nrounds, 1);
    /* Node 0 beats, node 1 is silent past 3 x the timeout (the grace while workers start). */
    for (int t = 0; t < 25 && !f[1].closed; t++) {
        ASSERT_EQ(jt_heartbeat(f[0].m), 1);
        run_ms(&e, 10);
    }
    ASSERT_TRUE(f[1].closed);
    ASSERT_TRUE(strstr(f[1].close_reason, "heartbeat") != NULL);
    ASSERT_FALSE(f[0].closed);
    ASSERT_EQ(f[0].nevents, 1);
    ASSERT_BYTES_STR(f[0].event.type, strlen(f[0].event.type), "restart");
    ASSERT_TRUE(strstr(f[0].event.summary, "sent no heartbeat") != NULL);
    env_done(&e);
}

/* rdzvd stalled (SIGSTOP) past the heartbeat timeout: 3 members (--nnodes 2:2, so one spare)
 * whose heartbeats it reads only after their deadlines passed. Returns after the stall. */
static void stalled_job(struct env *e, struct fake *f)
{
    for (int i = 0; i < 3; i++) {
        struct rdzv_join jn = join_of(i, 2, 2, 1);

        jn.heartbeat_timeout_ms = 40;
        ASSERT_OK(join(e, &f[i], &jn));
    }
    ASSERT_EQ(f[0].nrounds, 1);
    ASSERT_TRUE(f[2].spare);
    jt_stall_ms(e, 200); /* past the 3 x 40 ms grace after the ROUND */
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(jt_heartbeat(f[i].m), 1); /* read late, after the stall */
}

/* The agents found rdzvd silent and reconnected during the stall: their old connections close
 * when rdzvd reads them, the spare's plain JOIN may come before the members' resumes. The job
 * stays as it is: no restart, the same generation and store, the spare no duplicate. */
static void test_stall_agents_reconnect_job_goes_on(void)
{
    struct fake f[3] = {0}, g[3] = {0};
    struct rdzv_join jn;
    struct env e;

    env_init(&e, -1);
    stalled_job(&e, f);
    for (int i = 0; i < 3; i++)
        jt_gone(f[i].m);
    jn = join_of(2, 2, 2, 1);
    jn.heartbeat_timeout_ms = 40;
    ASSERT_OK(join(&e, &g[2], &jn)); /* was: "node id 'node-2' has already joined" */
    ASSERT_TRUE(g[2].spare);
    ASSERT_EQ(g[2].joined_gen, 1);
    for (int i = 0; i < 2; i++) {
        jn = resume_of(i, 1, 0, 1);
        jn.resume.node_rank = f[i].round.node_rank;
        jn.resume.rank_offset = f[i].round.rank_offset;
        jn.resume.master_port = f[i].round.master_port;
        jn.heartbeat_timeout_ms = 40;
        ASSERT_OK(join(&e, &g[i], &jn));
        ASSERT_TRUE(g[i].resumed);
        ASSERT_FALSE(g[i].spare);
        ASSERT_EQ(g[i].joined_gen, 1);
    }
    for (int t = 0; t < 10; t++) {
        for (int i = 0; i < 3; i++)
            ASSERT_EQ(jt_heartbeat(g[i].m), 1);
        run_ms(&e, 10);
    }
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(f[i].nevents + g[i].nevents, 0); /* no restart, no outcome */
        ASSERT_FALSE(g[i].closed);
        ASSERT_EQ(g[i].nrounds, 0);
    }
    ASSERT_EQ(e.stores_open, 1);
    jt_leave(g[0].m, 1, true);
    jt_leave(g[1].m, 1, true);
    ASSERT_BYTES_STR(g[2].event.type, strlen(g[2].event.type), "succeeded");
    env_done(&e);
}

/* After the stall a member's connection closed and its agent does not come back: lost at its
 * heartbeat deadline (one restart, the spare takes its place), not kept for ever. */
static void test_stall_member_not_back_is_lost(void)
{
    struct fake f[3] = {0};
    struct env e;

    env_init(&e, -1);
    stalled_job(&e, f);
    /* stalled on past the window */
    jt_stall_ms(&e, (uint64_t)rdzvd_job_startup_fail_ms(&jt_steps));
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(jt_heartbeat(f[i].m), 1); /* its workers ran: its loss counts */
    jt_gone(f[1].m);
    ASSERT_EQ(f[0].nevents, 0);
    for (int t = 0; t < 20 && !f[0].nevents; t++) {
        ASSERT_EQ(jt_heartbeat(f[0].m), 1);
        ASSERT_EQ(jt_heartbeat(f[2].m), 1);
        run_ms(&e, 10);
    }
    ASSERT_EQ(f[0].nevents, 1);
    ASSERT_BYTES_STR(f[0].event.type, strlen(f[0].event.type), "restart");
    ASSERT_TRUE(strstr(f[0].event.summary, "did not reconnect") != NULL);
    jt_ready(f[0].m, 1);
    ASSERT_EQ(f[2].nrounds, 1);
    ASSERT_EQ(f[2].round.generation, 2);
    ASSERT_EQ(f[2].round.restart_count, 1);
    env_done(&e);
}

/* rdzvd stalled within the start-up window, and a member's connection closed then: it is kept
 * for its agent, and its deadline passes after the window. What rdzvd saw of it ended at the
 * close, inside the window: its loss is not counted (P7), and the spare takes its place. */
static void test_close_in_a_stall_within_the_window_is_not_counted(void)
{
    struct fake f[3] = {0};
    struct env e;
    int64_t window = jt_steps.startup_fail_ms;

    env_init(&e, -1);
    jt_steps.startup_fail_ms = 220; /* the close at 200 ms is in it, the deadline at 240 past */
    stalled_job(&e, f);
    jt_gone(f[1].m);
    for (int t = 0; t < 20 && !f[0].nevents; t++) {
        ASSERT_EQ(jt_heartbeat(f[0].m), 1);
        ASSERT_EQ(jt_heartbeat(f[2].m), 1);
        run_ms(&e, 10);
    }
    ASSERT_TRUE(event_is(&f[0], "restart"));
    ASSERT_TRUE(strstr(f[0].event.summary, "did not reconnect") != NULL);
    jt_ready(f[0].m, 1);
    ASSERT_EQ(f[2].nrounds, 1); /* the spare took its place */
    ASSERT_EQ(f[2].round.restart_count, 0);
    jt_steps.startup_fail_ms = window;
    env_done(&e);
}

/* rdzvd stalled right after the ROUND: the members' deadlines, still under the ROUND's longer
 * grace, are not due on resume, but the spare's (the plain timeout since its JOIN) is: rdzvd
 * ran late. A member's close found on resume is its agent that gave up on the silent rdzvd
 * (the agent's deadline is the plain timeout), whether rdzvd meets it before or after it has
 * read the spare's late heartbeat (which re-arms the spare's deadline). */
static void stall_in_grace(bool spare_read_first)
{
    struct fake f[3] = {0};
    struct env e;

    env_init(&e, -1);
    for (int i = 0; i < 3; i++) {
        struct rdzv_join jn = join_of(i, 2, 2, 1);

        jn.heartbeat_timeout_ms = 400; /* the ROUND's grace: 3 x 400 ms */
        ASSERT_OK(join(&e, &f[i], &jn));
    }
    ASSERT_EQ(f[0].nrounds, 1);
    ASSERT_TRUE(f[2].spare);
    jt_stall_ms(&e, 600); /* past the spare's 400 ms, well within the members' 1200 ms */
    if (spare_read_first)
        ASSERT_EQ(jt_heartbeat(f[2].m), 1); /* read late, after the stall */
    jt_gone(f[1].m);
    ASSERT_EQ(f[0].nevents, 0); /* was: restart, "the agent of node rank 1 disconnected" */
    ASSERT_EQ(f[2].nrounds, 0);
    ASSERT_EQ(jt_heartbeat(f[0].m), 1);
    jt_gone(f[0].m); /* the second close, too */
    ASSERT_EQ(f[2].nevents, 0);
    env_done(&e);
}

static void test_stall_in_grace_close_first(void)
{
    stall_in_grace(false);
}

static void test_stall_in_grace_spare_read_first(void)
{
    stall_in_grace(true);
}

/* As above with no spare: no deadline of rdzvd passes during the stall, but nothing was read
 * from the member for a heartbeat timeout, so rdzvd echoed it nothing either and its agent may
 * have given up on it: the close that follows the late read is not a loss. A close with nothing
 * read late (an agent killed on a healthy rdzvd) still is. */
static void test_stall_in_grace_no_spare(void)
{
    struct fake f[3] = {0};
    struct env e;

    env_init(&e, -1);
    for (int i = 0; i < 3; i++) {
        struct rdzv_join jn = join_of(i, 3, 3, 1);

        jn.heartbeat_timeout_ms = 400;
        ASSERT_OK(join(&e, &f[i], &jn));
    }
    ASSERT_EQ(f[0].nrounds, 1);
    jt_stall_ms(&e, 600); /* past the agents' 400 ms, within rdzvd's 1200 ms */
    jt_seen(f[1].m); /* its queued heartbeat, read late */
    ASSERT_EQ(jt_heartbeat(f[1].m), 1);
    jt_gone(f[1].m);
    ASSERT_EQ(f[0].nevents, 0); /* was: restart, "the agent of node rank 1 disconnected" */
    jt_gone(f[2].m); /* nothing read from it: lost at once */
    ASSERT_EQ(f[0].nevents, 1);
    ASSERT_BYTES_STR(f[0].event.type, strlen(f[0].event.type), "restart");
    env_done(&e);
}

/* HEARTBEAT progress: kept per rank of the generation (rank_offset + local rank), aged on
 * rdzvd's clock between heartbeats; stale generations and local ranks >= nproc ignored; a new
 * generation starts with none. */
static void test_progress_in_status(void)
{
    struct rdzv_heartbeat *hb = calloc(1, sizeof(*hb));
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 1};
    const struct rdzv_status_job *j;
    struct fake f[2] = {0};
    struct rdzv_status st;
    struct env e;
    int a;

    ASSERT_NOT_NULL(hb);
    env_init(&e, -1);
    for (int i = 0; i < 2; i++) {
        struct rdzv_join jn = join_of(i, 2, 2, 1);
        ASSERT_OK(join(&e, &f[i], &jn));
    }
    a = f[0].round.node_rank == 1 ? 0 : 1; /* node rank 1: ranks 2 and 3 */
    *hb = (struct rdzv_heartbeat){.generation = 1, .n_progress = 3};
    hb->progress[0] = (struct rdzv_rank_progress){.local_rank = 1, .step = 6, .age_ms = 1000};
    hb->progress[1] = (struct rdzv_rank_progress){.local_rank = 0, .step = 5, .age_ms = 0};
    hb->progress[2] = (struct rdzv_rank_progress){.local_rank = 2, .step = 9, .age_ms = 0};
    jt_progress(f[a].m, hb);
    hb->generation = 0;
    jt_progress(f[1 - a].m, hb);
    jt_advance(100); /* what rdzvd_job_now_ms() reads: the tests' clock */
    j = status_of(&e, &st);
    ASSERT_EQ(j->n_ranks, 2);
    ASSERT_TRUE(j->ranks[0].rank == 2 && j->ranks[0].step == 5 && j->ranks[0].node_rank == 1);
    ASSERT_TRUE(j->ranks[0].age_s >= 0.1); /* aged on rdzvd's clock since the heartbeat */
    ASSERT_TRUE(j->ranks[1].rank == 3 && j->ranks[1].step == 6);
    /* Made age_ms before the heartbeat: exactly 1 s older (both read at one instant). */
    ASSERT_TRUE(j->ranks[1].age_s - j->ranks[0].age_s > 0.998 &&
                j->ranks[1].age_s - j->ranks[0].age_s < 1.002);
    rdzv_status_free(&st);
    jt_worker_exit(&f[0], &w);
    all_ready(f, 2, 1);
    ASSERT_EQ(f[0].round.generation, 2);
    ASSERT_EQ(status_of(&e, &st)->n_ranks, 0);
    rdzv_status_free(&st);
    hb->generation = 2;
    jt_progress(f[a].m, hb);
    ASSERT_EQ(status_of(&e, &st)->n_ranks, 2);
    rdzv_status_free(&st);
    free(hb);
    env_done(&e);
}

/* A recovery's first step is the job's: reached when every node of the new generation has
 * reported a step since its ranks went out, not at the first report of any one node (a rank
 * kept in place finishes its step while the others' workers still start). */
static void test_recovery_first_step_waits_for_every_node(void)
{
    struct rdzv_heartbeat *hb = calloc(1, sizeof(*hb));
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 1};
    const struct rdzv_status_recovery *rc;
    const struct rdzv_status_job *j;
    struct fake f[2] = {0};
    struct rdzv_status st;
    struct env e;
    double first;

    ASSERT_NOT_NULL(hb);
    env_init(&e, -1);
    for (int i = 0; i < 2; i++) {
        struct rdzv_join jn = join_of(i, 2, 2, 1);
        ASSERT_OK(join(&e, &f[i], &jn));
    }
    jt_worker_exit(&f[0], &w);
    all_ready(f, 2, 1);
    ASSERT_EQ(f[0].round.generation, 2);
    jt_advance(20);
    *hb = (struct rdzv_heartbeat){.generation = 2, .n_progress = 1};
    hb->progress[0] = (struct rdzv_rank_progress){.local_rank = 0, .step = 1, .age_ms = 0};
    jt_progress(f[0].m, hb);
    j = status_of(&e, &st);
    ASSERT_NOT_NULL(j->timeline);
    ASSERT_EQ(j->timeline->n_recoveries, 1);
    rc = &j->timeline->recoveries[0];
    ASSERT_TRUE(rc->t[RDZV_RECOVERY_SENT] > 0);
    ASSERT_TRUE(rc->t[RDZV_RECOVERY_FIRST_STEP] == 0); /* one node of two has stepped */
    rdzv_status_free(&st);
    jt_advance(50);
    jt_progress(f[0].m, hb); /* again: still one node */
    j = status_of(&e, &st);
    ASSERT_TRUE(j->timeline->recoveries[0].t[RDZV_RECOVERY_FIRST_STEP] == 0);
    rdzv_status_free(&st);
    jt_progress(f[1].m, hb);
    j = status_of(&e, &st);
    rc = &j->timeline->recoveries[0];
    first = rc->t[RDZV_RECOVERY_FIRST_STEP];
    /* The later node's step, 50 ms after the first node's */
    ASSERT_TRUE(first - rc->t[RDZV_RECOVERY_SENT] >= 0.065);
    rdzv_status_free(&st);
    free(hb);
    env_done(&e);
}

/* The job's steps per second from rank 0's progress, fed directly as HEARTBEATs: a
 * 100,000-step job at 10 steps/s (10,000 s, its reports' ages making the times) keeps at most
 * RDZV_STATUS_RATES samples at every point, allocates nothing per report (the heap in use is the
 * same after the 10,000th report and the 100,000th), covers the whole job (the samples' interval
 * doubled) and reads 10 steps/s in every whole sample; a new generation is a new band, the
 * failure a mark with its root cause. */
static void test_timeline_of_a_long_job(void)
{
    enum { STEPS = 100000, MS_PER_STEP = 100 };
    struct rdzv_heartbeat *hb = calloc(1, sizeof(*hb));
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 3};
    const struct rdzv_status_timeline *tl;
    const struct rdzv_status_job *j;
    struct fake f[2] = {0};
    struct rdzv_status st;
    size_t heap_at_10k = 0;
    struct env e;
    int a;

    ASSERT_NOT_NULL(hb);
    env_init(&e, -1);
    for (int i = 0; i < 2; i++) {
        struct rdzv_join jn = join_of(i, 2, 2, 1);
        ASSERT_OK(join(&e, &f[i], &jn));
    }
    a = f[0].round.node_rank == 0 ? 0 : 1; /* node rank 0: rank 0 */
    for (int64_t k = 1; k <= STEPS; k++) {
        *hb = (struct rdzv_heartbeat){.generation = 1, .n_progress = 1};
        hb->progress[0] = (struct rdzv_rank_progress){
            .local_rank = 0, .step = k, .age_ms = (int64_t)(STEPS - k) * MS_PER_STEP};
        jt_progress(f[a].m, hb);
        if (k % 1000 == 0) {
            j = status_of(&e, &st);
            ASSERT_NOT_NULL(j->timeline);
            ASSERT_LE(j->timeline->n_rates, RDZV_STATUS_RATES);
            rdzv_status_free(&st);
        }
        if (k == STEPS / 10)
            heap_at_10k = mallinfo2().uordblks;
    }
    ASSERT_EQ(mallinfo2().uordblks, heap_at_10k);
    j = status_of(&e, &st);
    tl = j->timeline;
    ASSERT_TRUE(tl->rate_interval_s >= 10000.0 / RDZV_STATUS_RATES); /* covers the whole job */
    ASSERT_TRUE(tl->n_rates >= RDZV_STATUS_RATES / 2 - 1);
    for (unsigned i = 0; i + 1 < tl->n_rates; i++)
        ASSERT_TRUE(tl->rates[i] > 9.9 && tl->rates[i] < 10.1);
    ASSERT_TRUE(j->rate_known && j->steps_per_second > 9.9 && j->steps_per_second < 10.1);
    ASSERT_EQ(tl->n_bands, 1);
    ASSERT_EQ(tl->bands[0].generation, 1);
    ASSERT_EQ(tl->bands[0].world_size, 4);
    rdzv_status_free(&st);
    jt_worker_exit(&f[a], &w);
    all_ready(f, 2, 1);
    j = status_of(&e, &st);
    tl = j->timeline;
    ASSERT_EQ(tl->n_bands, 2);
    ASSERT_TRUE(tl->bands[0].end > 0 && tl->bands[1].generation == 2 && tl->bands[1].end == 0);
    ASSERT_EQ(tl->n_marks, 1);
    ASSERT_EQ(tl->marks[0].kind, RDZV_MARK_FAILURE);
    ASSERT_TRUE(strstr(tl->marks[0].text, "exited with code 3") != NULL);
    rdzv_status_free(&st);
    free(hb);
    env_done(&e);
}

/* The JOIN that closes a round: its Ready lists the JOINED and the generation's store to open,
 * before any op runs; advance opens it, and the store's answer sends each member's ROUND with
 * its node rank and the store's port. The Ready is empty after. */
static void test_ready_lists_what_the_step_sends(void)
{
    struct fake f[2] = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 0);
    struct rdzvd_job_input in = {.kind = RDZVD_IN_JOIN, .peer = &f[1], .u.join = &jn};
    struct rdzvd_job_ready rd;
    struct rdzvd_job_send s;
    const void *at = NULL;
    struct env e;

    env_init(&e, -1);
    ASSERT_OK(join(&e, &f[0], &jn));
    jn = join_of(1, 2, 2, 0);
    ASSERT_OK(rdzvd_job_step(&e.h, &in, jt_clock(), &rd));
    ASSERT_EQ(jt_sends(&rd, RDZVD_SEND_JOINED, &f[1]), 1);
    ASSERT_EQ(jt_sends(&rd, RDZVD_SEND_JOINED, &f[0]), 0);
    ASSERT_EQ(jt_sends(&rd, RDZVD_SEND_STORE_OPEN, NULL), 1);
    ASSERT_EQ(jt_sends(&rd, RDZVD_SEND_ROUND, NULL), 0); /* they wait for the store's port */
    while (rdzvd_job_ready_next(&rd, &at, &s)) {
        if (s.kind != RDZVD_SEND_STORE_OPEN)
            continue;
        ASSERT_EQ(s.generation, 1);
        ASSERT_EQ(s.port, 0);
        ASSERT_TRUE(s.fresh);
    }
    ASSERT_EQ(f[1].njoined + f[0].nrounds + f[1].nrounds + e.stores_open, 0); /* nothing yet */
    rdzvd_job_advance(&rd);
    ASSERT_EQ(e.stores_open, 1);
    ASSERT_EQ(f[1].njoined, 1);
    ASSERT_EQ(f[0].nrounds, 1);
    ASSERT_EQ(f[1].nrounds, 1);
    ASSERT_EQ(f[0].round.node_rank, 0);
    ASSERT_EQ(f[1].round.node_rank, 1);
    ASSERT_EQ(f[1].round.master_port, e.last_port);
    at = NULL;
    ASSERT_FALSE(rdzvd_job_ready_next(&rd, &at, &s));
    env_done(&e);
}

/* A member's connection closes while the store of its round opens (a step of its own, as the
 * outbox is carried out): the round is undone, and the store that comes for it is closed, not
 * used. The job forms again with a new node, and its ROUNDs name the new store. */
static struct fake *gone_on_open;

static void gone_while_store_opens(struct env *e)
{
    struct rdzvd_member *m = gone_on_open ? gone_on_open->m : NULL;

    (void)e;
    gone_on_open = NULL;
    if (m)
        jt_gone(m);
}

static void test_store_of_an_undone_round_is_closed(void)
{
    struct fake f[2] = {0}, late = {0};
    struct rdzv_join jn = join_of(0, 2, 2, 0);
    struct env e;

    env_init(&e, -1);
    e.store_opening = gone_while_store_opens;
    gone_on_open = &f[0];
    join_n(&e, f, 2, jn);
    ASSERT_EQ(e.stores_open, 1);
    ASSERT_EQ(e.stores_closed, 1);
    ASSERT_TRUE(e.last_drop);
    ASSERT_EQ(f[0].nrounds + f[1].nrounds + f[1].nevents, 0);
    jn = join_of(2, 2, 2, 0);
    ASSERT_OK(join(&e, &late, &jn));
    ASSERT_EQ(e.stores_open, 2);
    ASSERT_EQ(e.stores_closed, 1);
    ASSERT_EQ(f[1].nrounds, 1);
    ASSERT_EQ(late.nrounds, 1);
    ASSERT_EQ(f[1].round.generation, 1);
    ASSERT_EQ(f[1].round.master_port, e.last_port);
    env_done(&e);
}

int main(void)
{
    rdzv_log_setup("test-job", RDZV_LOG_ERROR);
    TEST(test_round_closes_at_max);
    TEST(test_round_closes_at_min_after_last_call);
    TEST(test_below_min_fails_at_join_timeout);
    TEST(test_member_wait_while_forming);
    TEST(test_node_ranks_hints_honoured_and_unique);
    TEST(test_spare_waits_and_is_promoted);
    TEST(test_worker_exit_for_another_node_is_refused);
    TEST(test_restart_budget_exhausted_fails_the_job);
    TEST(test_stale_ready_while_running_is_ignored);
    TEST(test_job_succeeds_when_every_node_left);
    TEST(test_heartbeat_loss_restarts);
    TEST(test_stall_agents_reconnect_job_goes_on);
    TEST(test_stall_member_not_back_is_lost);
    TEST(test_close_in_a_stall_within_the_window_is_not_counted);
    TEST(test_stall_in_grace_close_first);
    TEST(test_stall_in_grace_spare_read_first);
    TEST(test_stall_in_grace_no_spare);
    TEST(test_progress_in_status);
    TEST(test_recovery_first_step_waits_for_every_node);
    TEST(test_timeline_of_a_long_job);
    TEST(test_ready_lists_what_the_step_sends);
    TEST(test_store_of_an_undone_round_is_closed);
    return tap_done();
}
