/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-sm.c: the agent's session machine (agent/session/agent-session-sm.h) driven by its
 * step alone, no loop and no process: each test feeds inputs and reads the Ready. A round starts
 * the workers; a worker's failure sends WORKER_EXIT and stops the others; an EVENT restart stops
 * them and READY follows once they exited; the job's outcome gives the exit code. A failure's
 * hold is test-agent-hold.c's; the rig is agent-sm-rig.h. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "agent-sm-rig.h"

/* ROUND: acknowledged, then every worker started, then a heartbeat; RUNNING. A second ROUND
 * while they run starts nothing. */
static void test_round_starts_workers(void)
{
    struct rig g;
    int ack, start;

    rig_init(&g, false);
    round_of(&g, 3);
    ack = find(&g, AGENT_DO_ROUND_ACK);
    start = find(&g, AGENT_DO_START);
    ASSERT_TRUE(ack >= 0 && start > ack);
    ASSERT_EQ(g.r.fx[start].mode, AGENT_START_ALL);
    ASSERT_EQ(g.r.fx[ack].gen, 3);
    ASSERT_TRUE(find(&g, AGENT_DO_BARE_BEAT) > start);
    ASSERT_EQ(g.sm.state, AG_RUNNING);
    round_of(&g, 4);
    ASSERT_EQ(g.r.n, 0);
    ASSERT_EQ(g.sm.round.generation, 3);
}

/* A worker exits 1: WORKER_EXIT (after the heartbeat with the last steps of its generation:
 * the Ready says which, as the state has left RUNNING when it goes), then the others are
 * stopped; the restart's READY waits for them all to exit. */
static void test_worker_failure_reported(void)
{
    struct rig g;
    int hb, ex, stop;

    rig_init(&g, false);
    round_of(&g, 1);
    step(&g, (struct agent_input){.kind = AGENT_IN_WORKER_EXIT, .local_rank = 1, .status = 1});
    hb = find(&g, AGENT_DO_HEARTBEAT);
    ex = find(&g, AGENT_DO_WORKER_EXIT);
    stop = find(&g, AGENT_DO_STOP);
    ASSERT_TRUE(hb >= 0 && ex > hb && stop > ex);
    ASSERT_EQ(g.r.fx[hb].gen, 1);
    ASSERT_EQ(g.r.fx[ex].local_rank, 1);
    ASSERT_EQ(g.r.fx[ex].code, 1);
    ASSERT_EQ(g.r.fx[stop].sig, SIGTERM);
    ASSERT_EQ(g.sm.state, AG_RESTARTING);
    /* Another worker's exit now is a consequence: nothing more is reported. */
    step(&g, (struct agent_input){.kind = AGENT_IN_WORKER_EXIT, .local_rank = 0, .sig = SIGTERM});
    ASSERT_EQ(find(&g, AGENT_DO_WORKER_EXIT), -1);
    event(&g, "restart", 1, 0);
    ASSERT_EQ(find(&g, AGENT_DO_READY), -1); /* not while a worker runs */
    all_exited(&g);
    ASSERT_TRUE(find(&g, AGENT_DO_READY) >= 0);
    ASSERT_EQ(g.r.fx[find(&g, AGENT_DO_READY)].gen, 1);
    ASSERT_EQ(g.sm.state, AG_JOINING);
}

/* With a health check, a worker's failure here checks the node before its READY: the same
 * EVENT restart again while the check runs (rdzvd repeats it to an agent back on a new
 * connection) sends no READY; HEALTH_OK does. A failed check's UNHEALTHY is said again on a
 * new connection. */
static void failed_then_checked(struct rig *g)
{
    rig_init(g, false);
    g->sm.has_health = true;
    round_of(g, 1);
    step(g, (struct agent_input){.kind = AGENT_IN_WORKER_EXIT, .local_rank = 0, .status = 1});
    event(g, "restart", 1, 0);
    all_exited(g);
}

static void test_health_check_holds_ready_through_a_repeated_restart(void)
{
    struct rig g;

    failed_then_checked(&g);
    ASSERT_TRUE(find(&g, AGENT_DO_HEALTH) >= 0);
    ASSERT_EQ(find(&g, AGENT_DO_READY), -1);
    event(&g, "restart", 1, 0);
    ASSERT_EQ(find(&g, AGENT_DO_READY), -1);
    ASSERT_EQ(find(&g, AGENT_DO_HEALTH), -1);
    step(&g, (struct agent_input){.kind = AGENT_IN_HEALTH_OK});
    ASSERT_TRUE(find(&g, AGENT_DO_READY) >= 0);
    ASSERT_EQ(g.r.fx[find(&g, AGENT_DO_READY)].gen, 1);

    /* The check failed, and the UNHEALTHY went with a connection lost: the agent back on a new
     * one says it again before anything else can place the node. */
    failed_then_checked(&g);
    step(&g, (struct agent_input){.kind = AGENT_IN_UNHEALTHY, .text = "bad GPU",
                                  .facts.connected = true});
    ASSERT_TRUE(find(&g, AGENT_DO_UNHEALTHY) >= 0);
    step(&g, (struct agent_input){.kind = AGENT_IN_JOINED, .resumed = true});
    ASSERT_TRUE(find(&g, AGENT_DO_UNHEALTHY) >= 0);
    ASSERT_EQ(strcmp(g.r.fx[find(&g, AGENT_DO_UNHEALTHY)].text, "bad GPU"), 0);
}

/* EVENT restart while the workers run: stop them, READY once they all exited (not before); the
 * next ROUND starts them again. A restart of another generation is ignored. */
static void test_restart_then_ready(void)
{
    struct rig g;

    rig_init(&g, false);
    round_of(&g, 5);
    event(&g, "restart", 4, 0);
    ASSERT_EQ(find(&g, AGENT_DO_STOP), -1);
    event(&g, "restart", 5, 0);
    ASSERT_TRUE(find(&g, AGENT_DO_STOP) >= 0);
    ASSERT_EQ(g.r.fx[find(&g, AGENT_DO_HEARTBEAT)].gen, 5); /* the last steps, of generation 5 */
    ASSERT_EQ(find(&g, AGENT_DO_READY), -1);
    ASSERT_EQ(g.sm.state, AG_RESTARTING);
    all_exited(&g);
    ASSERT_EQ(g.r.n, 1);
    ASSERT_EQ(g.r.fx[0].kind, AGENT_DO_READY);
    ASSERT_EQ(g.r.fx[0].gen, 5);
    round_of(&g, 6);
    ASSERT_TRUE(find(&g, AGENT_DO_START) >= 0);
}

/* rdzvd places the node while its last workers stop (a ROUND in RESTARTING): the ROUND is kept,
 * and taken once they are all gone: the workers of the new generation start, and no READY for the
 * stopped one goes out (the cluster simulator's round-while-stopping.trace). */
static void test_round_while_stopping(void)
{
    struct rig g;

    rig_init(&g, false);
    round_of(&g, 5);
    event(&g, "restart", 5, 0);
    ASSERT_EQ(g.sm.state, AG_RESTARTING);
    round_of(&g, 6);
    g.running = 2; /* still stopping */
    ASSERT_EQ(find(&g, AGENT_DO_START), -1);
    ASSERT_EQ(g.sm.state, AG_RESTARTING);
    all_exited(&g);
    ASSERT_EQ(find(&g, AGENT_DO_READY), -1);
    ASSERT_TRUE(find(&g, AGENT_DO_START) >= 0);
    ASSERT_TRUE(find(&g, AGENT_DO_ROUND_ACK) >= 0);
    ASSERT_EQ(g.r.fx[find(&g, AGENT_DO_ROUND_ACK)].gen, 6);
    ASSERT_EQ(g.sm.state, AG_RUNNING);
    ASSERT_EQ(g.sm.round.generation, 6);
}

/* A ROUND kept while the workers stop belongs to its connection: lost, it is dropped, and the
 * workers' end asks again with a READY. */
static void test_round_while_stopping_then_lost(void)
{
    struct rig g;

    rig_init(&g, false);
    round_of(&g, 5);
    event(&g, "restart", 5, 0);
    round_of(&g, 6);
    g.running = 2;
    step(&g, (struct agent_input){.kind = AGENT_IN_LOST, .text = "connection lost"});
    all_exited(&g);
    ASSERT_EQ(find(&g, AGENT_DO_START), -1);
    ASSERT_TRUE(find(&g, AGENT_DO_READY) >= 0);
    ASSERT_EQ(g.r.fx[find(&g, AGENT_DO_READY)].gen, 5);
}

/* The lines to log are the Ready's, in order, each with its level: the machine writes none. A
 * second ROUND while the workers run is refused with a warning; a held report that goes says
 * why first; a step that says nothing has no line. */
static void test_log_lines_in_the_ready(void)
{
    struct rig g;
    struct rdzv_round rd = {.generation = 9};

    rig_init(&g, false);
    round_of(&g, 2);
    ASSERT_TRUE(said(&g, RDZV_LOG_DEBUG, "session: JOINING -> RUNNING") >= 0);
    step(&g, (struct agent_input){.kind = AGENT_IN_ROUND, .round = &rd});
    ASSERT_EQ(g.r.nlog, 1);
    ASSERT_EQ(said(&g, RDZV_LOG_WARN, "ROUND for generation 9 while workers still run"), 0);
    worker_exit(&g, 0, 128 + SIGTERM, 0, false);
    ASSERT_EQ(g.r.nlog, 0);
    g.now += AGENT_SIGNAL_HOLD_MS;
    step(&g, (struct agent_input){.kind = AGENT_IN_TIMER, .timer = AGENT_TIMER_HOLD});
    ASSERT_EQ(said(&g, RDZV_LOG_INFO, "did not reach this agent within 500 ms"), 0);
    ASSERT_TRUE(said(&g, RDZV_LOG_DEBUG, "session: RUNNING -> RESTARTING") > 0);
    ASSERT_EQ(g.r.lost, 0);
}

/* The job's outcome: failed elsewhere stops the running workers and takes the event's exit code;
 * once they are gone the session ends. Succeeded after LEAVE ends it with 0 at once. */
static void test_outcome_exit_code(void)
{
    struct rig g;

    rig_init(&g, false);
    round_of(&g, 1);
    event(&g, "failed", 1, 3);
    ASSERT_EQ(g.sm.exit_code, 3);
    ASSERT_TRUE(find(&g, AGENT_DO_STOP) >= 0);
    ASSERT_EQ(find(&g, AGENT_DO_FINISH), -1);
    ASSERT_EQ(g.sm.state, AG_STOPPING);
    all_exited(&g);
    ASSERT_TRUE(find(&g, AGENT_DO_FINISH) >= 0);

    rig_init(&g, false);
    round_of(&g, 1);
    all_exited(&g); /* all exited 0 */
    ASSERT_TRUE(find(&g, AGENT_DO_LEAVE) >= 0);
    ASSERT_EQ(g.sm.state, AG_LEFT);
    event(&g, "succeeded", 1, 0);
    ASSERT_EQ(g.sm.exit_code, 0);
    ASSERT_TRUE(find(&g, AGENT_DO_FINISH) >= 0);

    rig_init(&g, false);
    event(&g, "put_aside", 0, 1);
    ASSERT_EQ(g.sm.exit_code, RDZV_EXIT_PUT_ASIDE);
    ASSERT_TRUE(g.sm.put_aside);
}

/* The EVENT rdzvd answers a JOIN or a resume with when the job ended (job-policy X1, X5): the
 * agent exits as the job did. Its workers done and LEAVE sent, its connection lost, the EVENT
 * succeeded that answers its resume ends it with 0 (an ERROR, before, ended it with 1); a late
 * agent that ran nothing of a job that failed takes the job's exit code. */
static void test_outcome_told_to_a_refused_agent(void)
{
    struct rig g;

    rig_init(&g, false);
    round_of(&g, 1);
    all_exited(&g);
    ASSERT_EQ(g.sm.state, AG_LEFT);
    step(&g, (struct agent_input){.kind = AGENT_IN_LOST, .text = "connection lost"});
    ASSERT_TRUE(find(&g, AGENT_DO_CONNECT) >= 0);
    ASSERT_EQ(find(&g, AGENT_DO_FINISH), -1);
    event(&g, "succeeded", 0, 0);
    ASSERT_EQ(g.sm.exit_code, 0);
    ASSERT_TRUE(find(&g, AGENT_DO_FINISH) >= 0);

    rig_init(&g, false);
    event(&g, "failed", 0, 3);
    ASSERT_EQ(g.sm.exit_code, 3);
    ASSERT_TRUE(find(&g, AGENT_DO_FINISH) >= 0);
}

/* Told the job succeeded while its workers run (a newcomer beside in-place survivors that are
 * done, job-policy R17a): they have RDZV_NEWCOMER_WAIT_MS to end on their own (A19a). Past it
 * they wait for peers that are gone, and are stopped; exit code 0 either way. */
static void test_succeeded_while_running_stops_the_workers(void)
{
    struct rig g;
    int t;

    rig_init(&g, true);
    round_of(&g, 2);
    event(&g, "succeeded", 2, 0);
    ASSERT_EQ(g.sm.exit_code, 0);
    ASSERT_EQ(find(&g, AGENT_DO_STOP), -1);
    ASSERT_EQ(find(&g, AGENT_DO_WORKER_EXIT), -1);
    t = find(&g, AGENT_DO_TIMER);
    ASSERT_TRUE(t >= 0);
    ASSERT_EQ(g.r.fx[t].timer, AGENT_TIMER_OWN_END);
    ASSERT_EQ(g.r.fx[t].due_ms, g.now + RDZV_NEWCOMER_WAIT_MS);
    ASSERT_EQ(g.sm.state, AG_STOPPING);
    ASSERT_TRUE(said(&g, RDZV_LOG_WARN, "workers have 30 s to end on their own") >= 0);
    /* A failure meanwhile is no report: the job is over. */
    worker_exit(&g, 0, 1, 0, false);
    ASSERT_EQ(find(&g, AGENT_DO_WORKER_EXIT), -1);
    ASSERT_EQ(find(&g, AGENT_DO_STOP), -1);
    g.now += RDZV_NEWCOMER_WAIT_MS;
    step(&g, (struct agent_input){.kind = AGENT_IN_TIMER, .timer = AGENT_TIMER_OWN_END});
    ASSERT_TRUE(find(&g, AGENT_DO_STOP) >= 0);
    ASSERT_TRUE(said(&g, RDZV_LOG_WARN, "did not end within 30 s") >= 0);
    all_exited(&g);
    ASSERT_TRUE(find(&g, AGENT_DO_FINISH) >= 0);
    ASSERT_EQ(g.sm.exit_code, 0);

    /* Workers that end within the wait: the session is over, the timer cancelled, none
     * stopped. */
    rig_init(&g, true);
    round_of(&g, 2);
    event(&g, "succeeded", 2, 0);
    g.now += 5000;
    all_exited(&g);
    ASSERT_TRUE(find(&g, AGENT_DO_FINISH) >= 0);
    ASSERT_EQ(find(&g, AGENT_DO_STOP), -1);
    t = find(&g, AGENT_DO_TIMER);
    ASSERT_TRUE(t >= 0 && g.r.fx[t].timer == AGENT_TIMER_OWN_END && g.r.fx[t].due_ms < 0);
    ASSERT_EQ(g.sm.exit_code, 0);

    /* In place, one rank failed (the others kept for the re-form: RESTARTING), then the
     * outcome: the workers kept wait for a generation that never comes. The same wait, then
     * they stop. */
    rig_init(&g, true);
    round_of(&g, 2);
    step(&g, (struct agent_input){.kind = AGENT_IN_WORKER_EXIT, .local_rank = 0, .status = 1,
                                  .facts.following = 1});
    ASSERT_EQ(g.sm.state, AG_RESTARTING);
    g.rank_running[0] = false;
    g.running = 1;
    event(&g, "succeeded", 2, 0);
    ASSERT_EQ(g.sm.state, AG_STOPPING);
    t = find(&g, AGENT_DO_TIMER);
    ASSERT_TRUE(t >= 0 && g.r.fx[t].timer == AGENT_TIMER_OWN_END);
    g.now += RDZV_NEWCOMER_WAIT_MS;
    step(&g, (struct agent_input){.kind = AGENT_IN_TIMER, .timer = AGENT_TIMER_OWN_END});
    ASSERT_TRUE(find(&g, AGENT_DO_STOP) >= 0);
    all_exited(&g);
    ASSERT_TRUE(find(&g, AGENT_DO_FINISH) >= 0);
    ASSERT_EQ(g.sm.exit_code, 0);

    /* A rank failed here, not in place: the others are being stopped already. No wait is said
     * or armed; the session ends once they are gone. */
    rig_init(&g, false);
    round_of(&g, 2);
    step(&g, (struct agent_input){.kind = AGENT_IN_WORKER_EXIT, .local_rank = 0, .status = 1});
    ASSERT_TRUE(find(&g, AGENT_DO_STOP) >= 0);
    g.running = 1;
    event(&g, "succeeded", 2, 0);
    ASSERT_EQ(g.sm.state, AG_STOPPING);
    ASSERT_EQ(find(&g, AGENT_DO_TIMER), -1);
    ASSERT_EQ(said(&g, RDZV_LOG_WARN, "to end on their own"), -1);
    all_exited(&g);
    ASSERT_TRUE(find(&g, AGENT_DO_FINISH) >= 0);
    ASSERT_EQ(g.sm.exit_code, 0);
}

/* The workers could not start: exit code 127 is reported for the node's first rank, and the
 * session stops for the restart. An EVENT restart after all exited 0 (LEFT) gets READY at once. */
static void test_start_failed_and_restart_after_leave(void)
{
    struct rig g;
    int ex;

    rig_init(&g, false);
    round_of(&g, 1);
    step(&g, (struct agent_input){.kind = AGENT_IN_START_FAILED, .err = -ENOENT});
    ex = find(&g, AGENT_DO_WORKER_EXIT);
    ASSERT_TRUE(ex >= 0);
    ASSERT_EQ(g.r.fx[ex].code, 127);
    ASSERT_EQ(g.r.fx[ex].local_rank, 0);
    ASSERT_EQ(g.sm.state, AG_RESTARTING);

    rig_init(&g, false);
    round_of(&g, 2);
    all_exited(&g);
    ASSERT_EQ(g.sm.state, AG_LEFT);
    event(&g, "restart", 2, 0);
    ASSERT_TRUE(find(&g, AGENT_DO_READY) >= 0);
    ASSERT_EQ(g.sm.state, AG_JOINING);
}

/* --recovery inplace with a worker that follows the control channel: its failure stops no other
 * worker, and READY goes out once the restart came and the failed rank is reaped. */
static void test_inplace_keeps_survivors(void)
{
    struct rig g;
    struct agent_input in = {.kind = AGENT_IN_WORKER_EXIT, .local_rank = 0, .status = 1};

    rig_init(&g, true);
    round_of(&g, 1);
    in.facts.following = 1;
    g.running = NPROC;
    in.facts.running = g.running;
    in.facts.rank_running = g.rank_running;
    ASSERT_OK(agent_session_step(&g.sm, &in, g.now, &g.r));
    ASSERT_TRUE(find(&g, AGENT_DO_WORKER_EXIT) >= 0);
    ASSERT_EQ(find(&g, AGENT_DO_STOP), -1);
    ASSERT_TRUE(g.failed[0]);
    g.rank_running[0] = false;
    g.running = 1;
    event(&g, "restart", 1, 0);
    ASSERT_TRUE(find(&g, AGENT_DO_READY) >= 0);
    round_of(&g, 2);
    ASSERT_EQ(g.r.fx[find(&g, AGENT_DO_START)].mode, AGENT_START_IN_PLACE);
}

/* In place, exit 0 is done (A3a): a worker that exited 0 is never started again, whether it
 * exited before its agent took the in-place ROUND (it is not a missing rank) or after it, too
 * late to be told (late: not replaced; one that failed is). A node whose every worker is done
 * leaves, whatever generation it was told (cluster-traces/inplace-late-exit-done.trace: started
 * again, a worker waited for peers that were done). */
static void test_inplace_exit_0_is_done(void)
{
    struct rig g;
    struct rdzv_round rd = {.generation = 2, .nnodes = 2, .rank_offset = 4, .world_size = 4};
    struct agent_input exit0 = {.kind = AGENT_IN_WORKER_EXIT, .local_rank = 1};

    rig_init(&g, true);
    round_of(&g, 1);
    g.sm.follows = true; /* a worker said it follows the control channel */
    event(&g, "restart", 1, 0); /* a scale-up: every worker keeps running */
    g.rank_running[1] = false; /* local rank 1 ends its last step before the ROUND */
    g.running = 1;
    step(&g, exit0);
    round_of(&g, 2);
    ASSERT_EQ(g.r.fx[find(&g, AGENT_DO_START)].mode, AGENT_START_IN_PLACE);
    g.late[0] = true; /* the adapter could not tell local rank 0: it was exiting */
    memset(g.rank_running, 0, sizeof(g.rank_running));
    g.running = 0;
    exit0.local_rank = 0;
    step(&g, exit0);
    ASSERT_EQ(find(&g, AGENT_DO_REPLACE), -1);
    ASSERT_EQ(find(&g, AGENT_DO_WORKER_EXIT), -1);
    ASSERT_TRUE(g.done[0] && g.done[1]); /* the adapter did not start 1 as a missing rank */
    all_exited(&g);
    ASSERT_TRUE(find(&g, AGENT_DO_LEAVE) >= 0);
    ASSERT_EQ(g.r.fx[find(&g, AGENT_DO_LEAVE)].gen, 2);

    /* Every worker done before the ROUND: it is taken (ROUND_ACK), nothing starts, LEAVE. */
    rig_init(&g, true);
    round_of(&g, 1);
    g.sm.follows = true;
    event(&g, "restart", 1, 0);
    for (unsigned i = 0; i < NPROC; i++) {
        g.rank_running[i] = false;
        g.running--;
        step(&g, (struct agent_input){.kind = AGENT_IN_WORKER_EXIT, .local_rank = i});
    }
    all_exited(&g);
    step(&g, (struct agent_input){.kind = AGENT_IN_ROUND, .round = &rd});
    ASSERT_TRUE(find(&g, AGENT_DO_ROUND_ACK) >= 0);
    ASSERT_EQ(find(&g, AGENT_DO_START), -1);
    ASSERT_TRUE(find(&g, AGENT_DO_LEAVE) > find(&g, AGENT_DO_ROUND_ACK));
    event(&g, "succeeded", 2, 0);
    ASSERT_TRUE(find(&g, AGENT_DO_FINISH) >= 0);

    /* A late worker that failed is started again in the generation. */
    rig_init(&g, true);
    round_of(&g, 1);
    g.sm.follows = true;
    event(&g, "restart", 1, 0);
    round_of(&g, 2);
    g.late[1] = true;
    g.rank_running[1] = false;
    g.running = 1;
    step(&g, (struct agent_input){.kind = AGENT_IN_WORKER_EXIT, .local_rank = 1, .status = 1});
    ASSERT_EQ(g.r.fx[find(&g, AGENT_DO_REPLACE)].local_rank, 1);
    ASSERT_FALSE(g.done[1]);
}

/* An exit 0 the agent asked for is not done (A3a): workers stopped (here: no rdzvd leader)
 * that exit 0 on SIGTERM all start again at the next in-place ROUND. So does a rank done
 * before a ROUND of no later generation (a job that rdzvd, restarted without --state-dir,
 * made anew: cluster-traces/inplace-rejoin-fresh.trace), or JOINED as a spare. */
static void test_inplace_stopped_exit_0_starts_again(void)
{
    struct rig g;

    rig_init(&g, true);
    g.sm.heartbeat_timeout_s = 5;
    round_of(&g, 1);
    g.sm.follows = true;
    step(&g, (struct agent_input){.kind = AGENT_IN_LOST, .text = "lost", .facts.endpoints = 3});
    g.now += 5000;
    step(&g, (struct agent_input){.kind = AGENT_IN_TIMER, .timer = AGENT_TIMER_LEADERLESS,
                                  .facts.endpoints = 3});
    ASSERT_TRUE(find(&g, AGENT_DO_STOP) >= 0);
    step(&g, (struct agent_input){.kind = AGENT_IN_WORKER_EXIT, .local_rank = 0});
    ASSERT_FALSE(g.done[0]);
    all_exited(&g);
    event(&g, "restart", 1, 0);
    round_of(&g, 2);
    ASSERT_EQ(g.r.fx[find(&g, AGENT_DO_START)].mode, AGENT_START_RANKS);

    /* Both done, then a ROUND of no later generation: a job a restarted rdzvd made anew. */
    rig_init(&g, true);
    round_of(&g, 3);
    g.sm.follows = true;
    event(&g, "restart", 3, 0);
    g.done[0] = g.done[1] = true;
    all_exited(&g);
    round_of(&g, 1);
    ASSERT_EQ(find(&g, AGENT_DO_LEAVE), -1);
    ASSERT_EQ(g.r.fx[find(&g, AGENT_DO_START)].mode, AGENT_START_RANKS);
    ASSERT_FALSE(g.done[0] || g.done[1]);
    g.done[0] = true; /* and JOINED as a spare: the job goes on with it as a new member */
    step(&g, (struct agent_input){.kind = AGENT_IN_JOINED, .spare = true});
    ASSERT_FALSE(g.done[0]);
}

/* SIGTERM from outside while the workers run and rdzvd is connected: once the scheduler said
 * it does not end the whole job (the node leaves), CANCEL goes out, and the
 * workers stop with that signal once it went; their end waits AGENT_VERDICT_MS for rdzvd's word,
 * which ends the session when it comes. Exit code 128 + 15. */
static void test_signal_cancels_and_waits_for_the_verdict(void)
{
    struct rig g;
    int stop, t;

    rig_init(&g, false);
    round_of(&g, 1);
    step(&g, (struct agent_input){.kind = AGENT_IN_SIGNAL, .sig = SIGTERM,
                                  .facts.connected = true});
    ASSERT_TRUE(find(&g, AGENT_DO_ASK_SCHEDULER) >= 0);
    ASSERT_FALSE(g.sm.have_outcome);
    step(&g, (struct agent_input){.kind = AGENT_IN_SCHEDULER, .facts.connected = true});
    ASSERT_TRUE(find(&g, AGENT_DO_CANCEL) >= 0);
    ASSERT_TRUE(strcmp(g.sm.outcome.type, "left") == 0);
    ASSERT_EQ(find(&g, AGENT_DO_STOP), -1); /* not before the CANCEL went */
    ASSERT_EQ(g.sm.exit_code, 128 + SIGTERM);
    step(&g, (struct agent_input){.kind = AGENT_IN_CANCEL_SENT, .ok = true});
    stop = find(&g, AGENT_DO_STOP);
    ASSERT_TRUE(stop >= 0);
    ASSERT_EQ(g.r.fx[stop].sig, SIGTERM);
    ASSERT_EQ(g.sm.state, AG_STOPPING);
    all_exited(&g);
    t = find(&g, AGENT_DO_TIMER);
    ASSERT_TRUE(t >= 0);
    ASSERT_EQ(g.r.fx[t].timer, AGENT_TIMER_VERDICT);
    ASSERT_EQ(g.r.fx[t].due_ms, g.now + AGENT_VERDICT_MS);
    ASSERT_EQ(find(&g, AGENT_DO_FINISH), -1);
    event(&g, "left", 1, 143);
    ASSERT_TRUE(find(&g, AGENT_DO_FINISH) >= 0);
    ASSERT_EQ(g.sm.exit_code, 143);
    ASSERT_EQ(g.sm.state, AG_DONE);
}

/* With replicas, a lost connection arms the leaderless timer and reconnects; when it is due the
 * workers stop and the failure is reported with the reason; the next JOINED cancels the timer
 * and sends that report again if it was not sent. */
static void test_leaderless_stops_the_workers(void)
{
    struct rig g;
    int t, ex;

    rig_init(&g, false);
    g.sm.heartbeat_timeout_s = 5;
    round_of(&g, 1);
    step(&g, (struct agent_input){.kind = AGENT_IN_LOST, .text = "lost",
                                  .facts.endpoints = 3});
    t = find(&g, AGENT_DO_TIMER);
    ASSERT_TRUE(t >= 0 && find(&g, AGENT_DO_CONNECT) > t);
    ASSERT_EQ(g.r.fx[t].timer, AGENT_TIMER_LEADERLESS);
    ASSERT_EQ(g.r.fx[t].due_ms, g.now + 5000);
    g.now += 5000;
    step(&g, (struct agent_input){.kind = AGENT_IN_TIMER, .timer = AGENT_TIMER_LEADERLESS,
                                  .facts.endpoints = 3});
    ex = find(&g, AGENT_DO_WORKER_EXIT);
    ASSERT_TRUE(ex >= 0 && find(&g, AGENT_DO_STOP) > ex);
    ASSERT_TRUE(g.r.fx[ex].text && strstr(g.r.fx[ex].text, "no rdzvd leader"));
    ASSERT_EQ(g.sm.state, AG_RESTARTING);
    step(&g, (struct agent_input){.kind = AGENT_IN_JOINED, .facts.pending_exit = true});
    ASSERT_TRUE(find(&g, AGENT_DO_RESEND_EXIT) >= 0);
    ASSERT_EQ(find(&g, AGENT_DO_TIMER), -1); /* it ran out: nothing to cancel */
}

/* With one rdzvd, a lost connection keeps the workers for rdzvd's rebuild window: two heartbeat
 * timeouts and an agent's longest reconnect wait (A30). A JOINED within it cancels the timer
 * (a restart of rdzvd keeps the workers); past it rdzvd went on without this node, or lost it:
 * the workers stop and their failure is reported (A32), so a node rdzvd lost trains beside a
 * newer generation at most that long (the cluster simulator's lost-node-trains-on). */
static void test_lost_rdzvd_stops_the_workers_after_its_window(void)
{
    const int64_t window = 2 * 5000 + RDZV_RECONNECT_WAIT_MAX_MS;
    struct rig g;
    int t, ex;

    rig_init(&g, true);
    g.sm.heartbeat_timeout_s = 5;
    round_of(&g, 1);
    step(&g, (struct agent_input){.kind = AGENT_IN_LOST, .text = "lost", .facts.endpoints = 1});
    t = find(&g, AGENT_DO_TIMER);
    ASSERT_TRUE(t >= 0 && find(&g, AGENT_DO_CONNECT) > t);
    ASSERT_EQ(find(&g, AGENT_DO_NEXT_ENDPOINT), -1);
    ASSERT_EQ(g.r.fx[t].timer, AGENT_TIMER_LEADERLESS);
    ASSERT_EQ(g.r.fx[t].due_ms, g.now + window);
    ASSERT_EQ(find(&g, AGENT_DO_STOP), -1); /* the workers keep running meanwhile */
    g.now += window - 1000; /* rdzvd restarted: back within its window, the workers go on */
    step(&g, (struct agent_input){.kind = AGENT_IN_JOINED, .resumed = true,
                                  .facts.endpoints = 1});
    t = find(&g, AGENT_DO_TIMER);
    ASSERT_TRUE(t >= 0 && g.r.fx[t].due_ms < 0);
    ASSERT_EQ(find(&g, AGENT_DO_STOP), -1);
    ASSERT_EQ(g.sm.state, AG_RUNNING);
    step(&g, (struct agent_input){.kind = AGENT_IN_LOST, .text = "lost", .facts.endpoints = 1});
    g.now += window;
    step(&g, (struct agent_input){.kind = AGENT_IN_TIMER, .timer = AGENT_TIMER_LEADERLESS,
                                  .facts.endpoints = 1});
    ex = find(&g, AGENT_DO_WORKER_EXIT);
    ASSERT_TRUE(ex >= 0 && find(&g, AGENT_DO_STOP) > ex);
    ASSERT_TRUE(g.r.fx[ex].text && strstr(g.r.fx[ex].text, "reached no rdzvd for 13.0 s (2 x"));
    ASSERT_EQ(g.sm.state, AG_RESTARTING);
    step(&g, (struct agent_input){.kind = AGENT_IN_JOINED, .facts.pending_exit = true,
                                  .facts.endpoints = 1});
    ASSERT_TRUE(find(&g, AGENT_DO_RESEND_EXIT) >= 0);
}

/* A health check fails while the node runs: UNHEALTHY goes to rdzvd; not sent, the node puts
 * itself aside (exit 69) and stops its workers. */
static void test_unhealthy_puts_aside_here_when_unsent(void)
{
    struct rig g;

    rig_init(&g, false);
    round_of(&g, 1);
    step(&g, (struct agent_input){.kind = AGENT_IN_UNHEALTHY, .text = "xid 79",
                                  .facts.connected = true});
    ASSERT_TRUE(find(&g, AGENT_DO_UNHEALTHY) >= 0);
    ASSERT_FALSE(g.sm.have_outcome);
    step(&g, (struct agent_input){.kind = AGENT_IN_UNHEALTHY_UNSENT});
    ASSERT_TRUE(find(&g, AGENT_DO_STOP) >= 0);
    ASSERT_EQ(g.sm.exit_code, RDZV_EXIT_PUT_ASIDE);
    ASSERT_TRUE(g.sm.put_aside);
    ASSERT_TRUE(strstr(g.sm.outcome.summary, "xid 79") != NULL);
}

/* USR1 is passed on to the workers, which keep running. SIGHUP drops a held report (the agent's
 * signal is what happened), stops the workers with SIGHUP, and ends the session failed with
 * 128 + 1, no CANCEL sent. */
static void test_signals_from_outside(void)
{
    struct rig g;
    int stop;

    rig_init(&g, false);
    round_of(&g, 1);
    step(&g, (struct agent_input){.kind = AGENT_IN_SIGNAL, .sig = SIGUSR1,
                                  .facts.connected = true});
    ASSERT_EQ(g.r.n, 1);
    ASSERT_EQ(g.r.fx[0].kind, AGENT_DO_SIGNAL);
    ASSERT_EQ(g.r.fx[0].sig, SIGUSR1);
    ASSERT_EQ(g.sm.state, AG_RUNNING);
    step(&g, (struct agent_input){.kind = AGENT_IN_WORKER_EXIT, .local_rank = 1, .sig = SIGHUP});
    ASSERT_TRUE(g.sm.held.on);
    step(&g, (struct agent_input){.kind = AGENT_IN_SIGNAL, .sig = SIGHUP,
                                  .facts.connected = true});
    ASSERT_FALSE(g.sm.held.on);
    ASSERT_EQ(find(&g, AGENT_DO_CANCEL), -1);
    ASSERT_EQ(find(&g, AGENT_DO_WORKER_EXIT), -1);
    stop = find(&g, AGENT_DO_STOP);
    ASSERT_TRUE(stop >= 0);
    ASSERT_EQ(g.r.fx[stop].sig, SIGHUP);
    ASSERT_EQ(g.sm.exit_code, 128 + SIGHUP);
    ASSERT_TRUE(strcmp(g.sm.outcome.type, "failed") == 0);
    all_exited(&g);
    ASSERT_TRUE(find(&g, AGENT_DO_FINISH) >= 0);

    /* SIGINT, the scheduler ending the job, rdzvd away: cancelled, stopped at once. */
    rig_init(&g, false);
    g.sm.host = "n1";
    round_of(&g, 1);
    step(&g, (struct agent_input){.kind = AGENT_IN_SIGNAL, .sig = SIGINT});
    step(&g, (struct agent_input){.kind = AGENT_IN_SCHEDULER, .ended = true,
                                  .text = "scancel by alice"});
    ASSERT_TRUE(strcmp(g.sm.outcome.type, "cancelled") == 0);
    ASSERT_TRUE(strstr(g.sm.outcome.summary, "node n1") &&
                strstr(g.sm.outcome.summary, "scancel by alice"));
    ASSERT_EQ(find(&g, AGENT_DO_CANCEL), -1);
    ASSERT_EQ(g.r.fx[find(&g, AGENT_DO_STOP)].sig, SIGINT);
}

/* A hung worker: its process group is killed, then WORKER_EXIT with where it was stuck, then
 * the others stop. */
static void test_hung_worker_is_failed(void)
{
    struct rig g;
    int kill, ex;

    rig_init(&g, false);
    round_of(&g, 1);
    step(&g, (struct agent_input){.kind = AGENT_IN_HUNG, .local_rank = 1, .gen = 1,
                                  .text = "made no progress for 9.0 s after step 3"});
    kill = find(&g, AGENT_DO_KILL);
    ex = find(&g, AGENT_DO_WORKER_EXIT);
    ASSERT_TRUE(kill >= 0 && ex > kill && find(&g, AGENT_DO_STOP) > ex);
    ASSERT_EQ(g.r.fx[kill].local_rank, 1);
    ASSERT_EQ(g.r.fx[ex].code, 128 + SIGKILL);
    ASSERT_TRUE(strstr(g.r.fx[ex].text, "after step 3") != NULL);
    ASSERT_EQ(g.sm.state, AG_RESTARTING);
}

/* The adapter's three guards are the machine's. A silent worker's stacks are asked for only
 * while its generation runs; its failure once they are in only if that generation still runs
 * it. The periodic health check runs only while the node takes part, connected, no check failed
 * and no outcome known. A refused JOIN is answered by a new node id only while the node waits
 * for its first ROUND with no survivors; else it is fatal. */
static void test_guards_are_the_machines(void)
{
    struct rig g;
    int st;

    rig_init(&g, false);
    step(&g, (struct agent_input){.kind = AGENT_IN_HEALTH_DUE, .facts.connected = true});
    ASSERT_TRUE(find(&g, AGENT_DO_CHECK) >= 0);
    step(&g, (struct agent_input){.kind = AGENT_IN_HEALTH_DUE});
    ASSERT_EQ(find(&g, AGENT_DO_CHECK), -1); /* not connected */
    step(&g, (struct agent_input){.kind = AGENT_IN_SILENT, .local_rank = 0});
    ASSERT_EQ(find(&g, AGENT_DO_STACKS), -1); /* JOINING: no generation runs */
    step(&g, (struct agent_input){.kind = AGENT_IN_ERROR, .text = "node id known", .status = 1,
                                  .renewable = true});
    ASSERT_EQ(g.r.n, 1);
    ASSERT_EQ(g.r.fx[0].kind, AGENT_DO_RENEW);
    ASSERT_EQ(strcmp(g.r.fx[0].text, "node id known"), 0);
    ASSERT_FALSE(g.sm.have_outcome);

    round_of(&g, 3);
    step(&g, (struct agent_input){.kind = AGENT_IN_SILENT, .local_rank = 1});
    st = find(&g, AGENT_DO_STACKS);
    ASSERT_TRUE(st >= 0);
    ASSERT_EQ(g.r.fx[st].local_rank, 1);
    ASSERT_EQ(g.r.fx[st].gen, 3);
    g.rank_running[1] = false; /* it exited meanwhile */
    step(&g, (struct agent_input){.kind = AGENT_IN_HUNG, .local_rank = 1, .gen = 3, .text = "x"});
    ASSERT_EQ(g.r.n, 0);
    g.rank_running[1] = true;
    step(&g, (struct agent_input){.kind = AGENT_IN_HUNG, .local_rank = 1, .gen = 2, .text = "x"});
    ASSERT_EQ(g.r.n, 0); /* an older generation's */
    step(&g, (struct agent_input){.kind = AGENT_IN_HEALTH_DUE, .facts.connected = true});
    ASSERT_TRUE(find(&g, AGENT_DO_CHECK) >= 0);
    step(&g, (struct agent_input){.kind = AGENT_IN_UNHEALTHY, .text = "bad GPU",
                                  .facts.connected = true});
    step(&g, (struct agent_input){.kind = AGENT_IN_HEALTH_DUE, .facts.connected = true});
    ASSERT_EQ(find(&g, AGENT_DO_CHECK), -1); /* a check failed already */
    step(&g, (struct agent_input){.kind = AGENT_IN_ERROR, .text = "node id known", .status = 1,
                                  .renewable = true});
    ASSERT_EQ(find(&g, AGENT_DO_RENEW), -1); /* RUNNING: fatal */
    ASSERT_TRUE(find(&g, AGENT_DO_STOP) >= 0);
    step(&g, (struct agent_input){.kind = AGENT_IN_SILENT, .local_rank = 0});
    ASSERT_EQ(find(&g, AGENT_DO_STACKS), -1); /* STOPPING */
}

/* The check before the first JOIN: passed, the agent joins; failed, it never does (put aside,
 * 69). rdzvd unreachable: failed with the agent's own code, the workers stopped first. */
static void test_start_check_and_fatal_error(void)
{
    struct rig g;

    rig_init(&g, false);
    step(&g, (struct agent_input){.kind = AGENT_IN_START_CHECKED, .ok = true});
    ASSERT_EQ(g.r.n, 1);
    ASSERT_EQ(g.r.fx[0].kind, AGENT_DO_JOIN);
    rig_init(&g, false);
    step(&g, (struct agent_input){.kind = AGENT_IN_START_CHECKED, .text = "rdma port down"});
    ASSERT_EQ(find(&g, AGENT_DO_JOIN), -1);
    ASSERT_TRUE(find(&g, AGENT_DO_FINISH) >= 0);
    ASSERT_EQ(g.sm.exit_code, RDZV_EXIT_PUT_ASIDE);

    rig_init(&g, false);
    round_of(&g, 1);
    step(&g, (struct agent_input){.kind = AGENT_IN_ERROR, .text = "no rdzvd", .status = 75});
    ASSERT_TRUE(find(&g, AGENT_DO_STOP) >= 0);
    ASSERT_EQ(find(&g, AGENT_DO_FINISH), -1);
    ASSERT_EQ(g.sm.exit_code, 75);
    all_exited(&g);
    ASSERT_TRUE(find(&g, AGENT_DO_FINISH) >= 0);
}

/* JOINED as a spare while the workers run: the job went on without this node, so even in place
 * the next restart stops them all, once: the same EVENT again sends no second signal. A
 * connection lost once the outcome is known: no reconnect, the session ends once the workers
 * are gone. */
static void test_dropped_spare_and_lost_after_the_outcome(void)
{
    struct rig g;

    rig_init(&g, true);
    round_of(&g, 1);
    step(&g, (struct agent_input){.kind = AGENT_IN_JOINED, .spare = true});
    ASSERT_TRUE(g.sm.dropped);
    ASSERT_TRUE(find(&g, AGENT_DO_HEARTBEAT) >= 0);
    event(&g, "restart", 1, 0);
    ASSERT_TRUE(find(&g, AGENT_DO_STOP) >= 0);
    event(&g, "restart", 1, 0); /* again, as to an agent back on a new connection */
    ASSERT_EQ(find(&g, AGENT_DO_STOP), -1);

    rig_init(&g, false);
    round_of(&g, 1);
    event(&g, "failed", 1, 1);
    step(&g, (struct agent_input){.kind = AGENT_IN_LOST, .text = "lost"});
    ASSERT_EQ(find(&g, AGENT_DO_CONNECT), -1);
    ASSERT_EQ(find(&g, AGENT_DO_FINISH), -1); /* STOPPING, workers still run */
    all_exited(&g);
    ASSERT_TRUE(find(&g, AGENT_DO_FINISH) >= 0);
}

int main(void)
{
    TEST(test_round_starts_workers);
    TEST(test_worker_failure_reported);
    TEST(test_restart_then_ready);
    TEST(test_health_check_holds_ready_through_a_repeated_restart);
    TEST(test_round_while_stopping);
    TEST(test_round_while_stopping_then_lost);
    TEST(test_log_lines_in_the_ready);
    TEST(test_outcome_exit_code);
    TEST(test_outcome_told_to_a_refused_agent);
    TEST(test_succeeded_while_running_stops_the_workers);
    TEST(test_start_failed_and_restart_after_leave);
    TEST(test_inplace_keeps_survivors);
    TEST(test_inplace_exit_0_is_done);
    TEST(test_inplace_stopped_exit_0_starts_again);
    TEST(test_signal_cancels_and_waits_for_the_verdict);
    TEST(test_leaderless_stops_the_workers);
    TEST(test_lost_rdzvd_stops_the_workers_after_its_window);
    TEST(test_unhealthy_puts_aside_here_when_unsent);
    TEST(test_signals_from_outside);
    TEST(test_hung_worker_is_failed);
    TEST(test_guards_are_the_machines);
    TEST(test_start_check_and_fatal_error);
    TEST(test_dropped_spare_and_lost_after_the_outcome);
    return tap_done();
}
