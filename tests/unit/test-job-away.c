/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-away.c: a member whose agent is cut off as its generation forms (job-policy R4a),
 * driven with fake agents (jobtest.h). Its ROUND goes nowhere. When the partition heals, what
 * its agent sent arrives at once, then its connection's end: rdzvd cannot tell this from its
 * own stall, and keeps the member for its agent. The agent, with no workers, comes back with a
 * plain JOIN and its secret: it takes its place, and is sent its ROUND again. Its JOIN may come
 * before rdzvd sees the old connection close (R4b): the newer connection supersedes it. */
#include "common/rdzv-log.h"
#include "jobtest.h"

#define HB_MS 400 /* the heartbeat timeout; the ROUND's start grace is 3 x 400 ms */

/* 3 nodes of 3..3 run generation 1; node-0's worker fails. node-1's READY is in, then node-1 is
 * cut off: generation 2 forms with it, and its ROUND never reaches its agent. */
static void round_lost(struct env *e, struct fake f[3])
{
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 1};

    env_init(e, -1);
    for (int i = 0; i < 3; i++) {
        struct rdzv_join jn = join_of(i, 3, 3, 3);

        jn.heartbeat_timeout_ms = HB_MS;
        ASSERT_OK(join(e, &f[i], &jn));
    }
    ASSERT_EQ(f[1].nrounds, 1);
    jt_worker_exit(&f[0], &w);
    ASSERT_TRUE(event_is(&f[1], "restart"));
    f[1].silent = true; /* cut off: it answers no ROUND */
    all_ready(f, 3, 1);
    ASSERT_EQ(f[0].nrounds, 2);
    ASSERT_EQ(f[1].round.generation, 2); /* sent; it went nowhere */
}

/* 500 ms on (past its agent's heartbeat timeout, within the ROUND's grace) the partition heals:
 * node-1's held heartbeats (of generation 1) arrive at once, then its connection's end. */
static void partition_heals(struct env *e, struct fake f[3])
{
    struct rdzv_heartbeat hb = {.generation = 1};

    for (int t = 0; t < 5; t++) {
        ASSERT_EQ(jt_heartbeat(f[0].m), 2);
        ASSERT_EQ(jt_heartbeat(f[2].m), 2);
        run_ms(e, 100);
    }
    jt_seen(f[1].m);
    jt_progress(f[1].m, &hb);
    jt_gone(f[1].m);
}

/* node-1's agent (no workers: it never took the ROUND) JOINs again with its secret: it takes its
 * place in generation 2, its ROUND again. Nobody restarts, and the job ends as any. */
static void test_away_member_takes_its_place_back(void)
{
    struct fake f[3] = {0}, back = {0};
    struct rdzv_join jn = join_of(1, 3, 3, 3);
    char err[512];
    struct env e;

    round_lost(&e, f);
    partition_heals(&e, f);
    jn.heartbeat_timeout_ms = HB_MS;
    if (join_err(&e, &back, &jn, err, sizeof(err)) < 0)
        fprintf(stderr, "refused: %s\n", err); /* was: "node id 'node-1' has already joined" */
    ASSERT_EQ(err[0], '\0');
    ASSERT_FALSE(back.spare);
    ASSERT_FALSE(back.resumed);
    ASSERT_EQ(back.nrounds, 1);
    ASSERT_EQ(back.round.generation, 2);
    ASSERT_EQ(back.round.node_rank, f[1].round.node_rank);
    ASSERT_EQ(back.round.rank_offset, f[1].round.rank_offset);
    ASSERT_EQ(back.round.master_port, f[0].round.master_port);
    for (int t = 0; t < 3 * HB_MS / 100; t++) { /* past the deadline it was kept until */
        ASSERT_EQ(jt_heartbeat(f[0].m), 2);
        ASSERT_EQ(jt_heartbeat(back.m), 2);
        ASSERT_EQ(jt_heartbeat(f[2].m), 2);
        run_ms(&e, 100);
    }
    ASSERT_EQ(f[0].nevents, 1); /* generation 1's restart, and nothing since */
    ASSERT_EQ(f[2].nevents, 1);
    ASSERT_EQ(back.nevents, 0);
    jt_leave(f[0].m, 2, true);
    jt_leave(back.m, 2, true);
    jt_leave(f[2].m, 2, true);
    ASSERT_TRUE(event_is(&back, "succeeded"));
    env_done(&e);
}

/* Taking over a member needs its secret: a JOIN with node-1's id and another secret is refused,
 * and the place stays node-1's agent's. */
static void test_away_member_needs_its_secret(void)
{
    struct fake f[3] = {0}, stranger = {0}, back = {0};
    struct rdzv_join jn = join_of(1, 3, 3, 3);
    struct env e;

    round_lost(&e, f);
    partition_heals(&e, f);
    memset(jn.secret, 'a', RDZV_SECRET_HEX);
    jn.secret[RDZV_SECRET_HEX] = '\0';
    ASSERT_TRUE(join(&e, &stranger, &jn) < 0);
    ASSERT_EQ(stranger.nrounds, 0);
    jn.secret[0] = '\0'; /* node-1's agent: its own */
    ASSERT_OK(join(&e, &back, &jn));
    ASSERT_EQ(back.round.generation, 2);
    ASSERT_EQ(f[0].nevents, 1);
    env_done(&e);
}

/* A lost connection's end reaches the agent first (job-policy R4b): its JOIN back, with its
 * secret, comes while rdzvd still holds the old connection (live, rdzvd not stalled). The
 * newer connection supersedes the old one: closed, and the member taken over. Here node-1's
 * ROUND of generation 2 went nowhere: it is sent again, and nobody restarts. */
static void test_live_member_taken_over_by_its_agent(void)
{
    struct fake f[3] = {0}, back = {0};
    struct rdzv_join jn = join_of(1, 3, 3, 3);
    char err[512];
    struct env e;

    round_lost(&e, f);
    ASSERT_EQ(jt_heartbeat(f[1].m), 2); /* its connection is live */
    if (join_err(&e, &back, &jn, err, sizeof(err)) < 0)
        fprintf(stderr, "refused: %s\n", err); /* was: "node id 'node-1' has already joined" */
    ASSERT_EQ(err[0], '\0');
    ASSERT_TRUE(f[1].closed);
    ASSERT_FALSE(back.spare);
    ASSERT_EQ(back.round.generation, 2);
    ASSERT_EQ(back.round.node_rank, f[1].round.node_rank);
    ASSERT_EQ(f[0].nevents, 1); /* generation 1's restart, and nothing since */
    ASSERT_EQ(f[2].nevents, 1);
    env_done(&e);
}

/* 3 nodes of 3..3 run generation 1, each agent took its ROUND (a HEARTBEAT of it came), past
 * the start-up window. */
static void all_ran(struct env *e, struct fake f[3])
{
    struct rdzv_heartbeat hb = {.generation = 1};

    env_init(e, -1);
    for (int i = 0; i < 3; i++) {
        struct rdzv_join jn = join_of(i, 3, 3, 3);

        ASSERT_OK(join(e, &f[i], &jn));
    }
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(f[i].round.generation, 1);
        jt_progress(f[i].m, &hb);
    }
    run_ms(e, RDZVD_JOB_STARTUP_FAIL_MS); /* they ran, by rdzvd's clock */
}

/* The trace join-before-close: generation 1 stops (node-0's worker failed). node-1's READY is
 * in, then its connection is lost; its agent, waiting for the next ROUND, JOINs without a
 * resume while rdzvd holds the old connection. It is the same member, ready: generation 2
 * forms with it, and the restart is the one of node-0's failure. */
static void test_ready_member_back_before_its_close(void)
{
    struct fake f[3] = {0}, back = {0};
    struct rdzv_join jn = join_of(1, 3, 3, 3);
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 1};
    char err[512];
    struct env e;

    all_ran(&e, f);
    jt_worker_exit(&f[0], &w);
    ASSERT_TRUE(event_is(&f[1], "restart"));
    jt_ready(f[1].m, 1);
    if (join_err(&e, &back, &jn, err, sizeof(err)) < 0)
        fprintf(stderr, "refused: %s\n", err); /* was: "node id 'node-1' has already joined" */
    ASSERT_EQ(err[0], '\0');
    ASSERT_TRUE(f[1].closed);
    ASSERT_FALSE(back.spare);
    jt_ready(f[0].m, 1);
    jt_ready(f[2].m, 1);
    ASSERT_EQ(back.nrounds, 1);
    ASSERT_EQ(back.round.generation, 2);
    ASSERT_EQ(f[0].round.restart_count, 1);
    ASSERT_EQ(f[0].nevents, 1);
    env_done(&e);
}

/* A member whose agent took the ROUND of the running generation: a JOIN without a resume, with
 * its secret, says the agent holds no generation, so its workers are gone. The node is lost at
 * once (R23: a restart, counted), as if its old connection had closed first, and the agent
 * comes back as a node the job knows: in the next generation. */
static void test_member_that_ran_is_lost_at_its_join(void)
{
    struct fake f[3] = {0}, back = {0};
    struct rdzv_join jn = join_of(1, 3, 3, 3);
    char err[512];
    struct env e;

    all_ran(&e, f);
    if (join_err(&e, &back, &jn, err, sizeof(err)) < 0)
        fprintf(stderr, "refused: %s\n", err); /* was: "node id 'node-1' has already joined" */
    ASSERT_EQ(err[0], '\0');
    ASSERT_TRUE(f[1].closed);
    ASSERT_TRUE(event_is(&f[0], "restart"));
    ASSERT_TRUE(strstr(f[0].event.summary, "without its workers") != NULL);
    jt_ready(f[0].m, 1);
    jt_ready(f[2].m, 1);
    ASSERT_EQ(back.round.generation, 2);
    ASSERT_EQ(f[0].round.restart_count, 1);
    env_done(&e);
}

/* Node i's id JOINs without a resume and without its secret, then with another one: both are
 * refused, node i's member keeps its live connection, and nobody hears of it. */
static void strangers_refused(struct env *e, struct fake f[3], int i)
{
    struct rdzv_join jn = join_of(i, 3, 3, 3);
    char saved[RDZV_SECRET_HEX + 1];
    struct fake none = {0}, wrong = {0};
    int events = 0;

    for (int k = 0; k < 3; k++)
        events += f[k].nevents;
    memcpy(saved, e->secrets[i], sizeof(saved));
    e->secrets[i][0] = '\0'; /* join sends none */
    ASSERT_TRUE(join(e, &none, &jn) < 0);
    memcpy(e->secrets[i], saved, sizeof(saved));
    memset(jn.secret, 'a', RDZV_SECRET_HEX);
    jn.secret[RDZV_SECRET_HEX] = '\0';
    ASSERT_TRUE(join(e, &wrong, &jn) < 0);
    ASSERT_FALSE(f[i].closed);
    ASSERT_EQ(none.nrounds + wrong.nrounds, 0);
    for (int k = 0; k < 3; k++)
        events -= f[k].nevents;
    ASSERT_EQ(events, 0);
}

/* R4b needs the member's secret, whatever the member's role: one whose agent took its ROUND,
 * one whose ROUND went nowhere, and one ready in a generation stopping. */
static void test_live_member_needs_its_secret(void)
{
    struct fake f[3] = {0};
    struct rdzv_worker_exit w = {.generation = 1, .exit_code = 1};
    struct env e;

    all_ran(&e, f);
    strangers_refused(&e, f, 1);
    env_done(&e);
    memset(f, 0, sizeof(f));
    round_lost(&e, f);
    ASSERT_EQ(jt_heartbeat(f[1].m), 2);
    strangers_refused(&e, f, 1);
    env_done(&e);
    memset(f, 0, sizeof(f));
    all_ran(&e, f);
    jt_worker_exit(&f[0], &w);
    jt_ready(f[1].m, 1);
    strangers_refused(&e, f, 1);
    env_done(&e);
}

int main(void)
{
    rdzv_log_setup("test-job-away", RDZV_LOG_ERROR);
    TEST(test_away_member_takes_its_place_back);
    TEST(test_away_member_needs_its_secret);
    TEST(test_live_member_taken_over_by_its_agent);
    TEST(test_ready_member_back_before_its_close);
    TEST(test_member_that_ran_is_lost_at_its_join);
    TEST(test_live_member_needs_its_secret);
    return tap_done();
}
