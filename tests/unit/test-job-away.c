/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-away.c: a member whose agent is cut off as its generation forms (job-policy R4a),
 * driven with fake agents (jobtest.h). Its ROUND goes nowhere. When the partition heals, what
 * its agent sent arrives at once, then its connection's end: rdzvd cannot tell this from its
 * own stall, and keeps the member for its agent. The agent, with no workers, comes back with a
 * plain JOIN and its secret: it takes its place, and is sent its ROUND again. */
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

/* A member with a live connection (rdzvd not stalled) is not taken over, even with its secret:
 * a second agent under its node id is refused, and the member keeps its connection. */
static void test_live_member_stays_refused(void)
{
    struct fake f[3] = {0}, second = {0};
    struct rdzv_join jn = join_of(1, 3, 3, 3);
    char err[512];
    struct env e;

    round_lost(&e, f);
    ASSERT_EQ(jt_heartbeat(f[1].m), 2); /* its connection is live */
    ASSERT_EQ(join_err(&e, &second, &jn, err, sizeof(err)), -EEXIST);
    ASSERT_TRUE(strstr(err, "node id 'node-1' has already joined") != NULL);
    ASSERT_FALSE(f[1].closed);
    ASSERT_EQ(second.nrounds, 0);
    env_done(&e);
}

int main(void)
{
    rdzv_log_setup("test-job-away", RDZV_LOG_ERROR);
    TEST(test_away_member_takes_its_place_back);
    TEST(test_away_member_needs_its_secret);
    TEST(test_live_member_stays_refused);
    return tap_done();
}
