/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-hold.c: the session machine's one rule for a failed worker's report
 * (agent-policy A8, A9, A36 to A39), driven by its step alone: a death by a step-wide signal
 * waits for the agent's own copy of it, any other failure for the end of its stderr, each at
 * most its hold. */
#include <signal.h>

#include "agent-sm-rig.h"

/* A worker killed by SIGTERM (a step-wide signal): its report waits AGENT_SIGNAL_HOLD_MS (a timer
 * at now + the hold), then goes out when the timer is due. */
static void test_signal_hold(void)
{
    struct rig g;
    int t;

    rig_init(&g, false);
    round_of(&g, 2);
    step(&g, (struct agent_input){.kind = AGENT_IN_WORKER_EXIT, .local_rank = 0, .sig = SIGTERM});
    t = find(&g, AGENT_DO_TIMER);
    ASSERT_TRUE(t >= 0);
    ASSERT_EQ(g.r.fx[t].timer, AGENT_TIMER_HOLD);
    ASSERT_EQ(g.r.fx[t].due_ms, g.now + AGENT_SIGNAL_HOLD_MS);
    ASSERT_EQ(find(&g, AGENT_DO_WORKER_EXIT), -1);
    g.now += AGENT_SIGNAL_HOLD_MS;
    step(&g, (struct agent_input){.kind = AGENT_IN_TIMER, .timer = AGENT_TIMER_HOLD});
    ASSERT_TRUE(find(&g, AGENT_DO_WORKER_EXIT) >= 0);
    ASSERT_EQ(g.r.fx[find(&g, AGENT_DO_WORKER_EXIT)].code, 128 + SIGTERM);
}

/* The last Ready's HOLD timer's due time: -2 when it has none. */
static int64_t hold_due(const struct rig *g)
{
    for (unsigned i = 0; i < g->r.n; i++)
        if (g->r.fx[i].kind == AGENT_DO_TIMER && g->r.fx[i].timer == AGENT_TIMER_HOLD)
            return g->r.fx[i].due_ms;
    return -2;
}

/* The hold's rule, one branch each. A failure whose stderr is closed at its exit is reported at
 * once, no timer armed. */
static void test_exit_hold_none_when_closed(void)
{
    struct rig g;

    rig_init(&g, false);
    round_of(&g, 2);
    worker_exit(&g, 0, 1, 0, false);
    ASSERT_EQ(hold_due(&g), -2);
    ASSERT_TRUE(find(&g, AGENT_DO_WORKER_EXIT) >= 0);
}

/* Its stderr still open: held (a timer at now + AGENT_EXIT_HOLD_MS), then reported when its
 * stderr closes, the timer cancelled. */
static void test_exit_hold_until_output_closed(void)
{
    struct rig g;

    rig_init(&g, false);
    round_of(&g, 2);
    worker_exit(&g, 0, 1, 0, true);
    ASSERT_EQ(hold_due(&g), g.now + AGENT_EXIT_HOLD_MS);
    ASSERT_EQ(find(&g, AGENT_DO_WORKER_EXIT), -1);
    g.now += 20;
    output_closed(&g, 0, 1, 0);
    ASSERT_TRUE(find(&g, AGENT_DO_WORKER_EXIT) >= 0);
    ASSERT_EQ(g.r.fx[find(&g, AGENT_DO_WORKER_EXIT)].code, 1);
    ASSERT_EQ(hold_due(&g), -1);
    ASSERT_FALSE(g.sm.held.on);
}

/* Every worker exited while a failure's report was held (its stderr open), then rdzvd's EVENT
 * restart of that generation came: nothing is left to stop, READY goes out at once. Found by the
 * cluster simulator (tests/unit/cluster-traces/held-exit-restart.trace). */
static void test_exit_hold_then_restart(void)
{
    struct rig g;

    rig_init(&g, false);
    round_of(&g, 2);
    worker_exit(&g, 0, 1, 0, true);
    worker_exit(&g, 1, 1, 0, true);
    all_exited(&g);
    ASSERT_EQ(find(&g, AGENT_DO_READY), -1);
    g.now += 10;
    event(&g, "restart", 2, 0);
    ASSERT_TRUE(find(&g, AGENT_DO_READY) >= 0);
    ASSERT_EQ(g.r.fx[find(&g, AGENT_DO_READY)].gen, 2);
    ASSERT_EQ(g.sm.state, AG_JOINING);
}

/* Its stderr never closes: reported when the timer is due, AGENT_EXIT_HOLD_MS after the exit. */
static void test_exit_hold_due(void)
{
    struct rig g;

    rig_init(&g, false);
    round_of(&g, 2);
    worker_exit(&g, 1, 3, 0, true);
    ASSERT_EQ(hold_due(&g), g.now + AGENT_EXIT_HOLD_MS);
    g.now += AGENT_EXIT_HOLD_MS;
    step(&g, (struct agent_input){.kind = AGENT_IN_TIMER, .timer = AGENT_TIMER_HOLD});
    ASSERT_TRUE(find(&g, AGENT_DO_WORKER_EXIT) >= 0);
    ASSERT_EQ(g.r.fx[find(&g, AGENT_DO_WORKER_EXIT)].local_rank, 1);
    ASSERT_EQ(g.sm.state, AG_RESTARTING);
}

/* A second failure while the first is held: reported first when its stderr closes first (it
 * is what the log shows first); the held one is then a consequence. */
static void test_exit_hold_second_closes_first(void)
{
    struct rig g;

    rig_init(&g, false);
    round_of(&g, 2);
    worker_exit(&g, 0, 1, 0, true);
    worker_exit(&g, 1, 2, 0, true);
    ASSERT_EQ(g.r.n, 0);
    output_closed(&g, 1, 2, 0);
    ASSERT_TRUE(find(&g, AGENT_DO_WORKER_EXIT) >= 0);
    ASSERT_EQ(g.r.fx[find(&g, AGENT_DO_WORKER_EXIT)].local_rank, 1);
    output_closed(&g, 0, 1, 0);
    ASSERT_EQ(find(&g, AGENT_DO_WORKER_EXIT), -1);
}

/* A step-wide signal's death waits AGENT_SIGNAL_HOLD_MS from its exit even with its stderr open
 * (the longer hold covers the other), and the end of its stderr does not report it early. */
static void test_signal_hold_outlasts_output(void)
{
    struct rig g;

    rig_init(&g, false);
    round_of(&g, 2);
    worker_exit(&g, 0, 128 + SIGTERM, 0, true);
    ASSERT_EQ(hold_due(&g), g.now + AGENT_SIGNAL_HOLD_MS);
    ASSERT_TRUE(g.sm.held.for_signal);
    g.now += 20;
    output_closed(&g, 0, 128 + SIGTERM, 0);
    ASSERT_EQ(find(&g, AGENT_DO_WORKER_EXIT), -1);
    ASSERT_TRUE(g.sm.held.on);
}

int main(void)
{
    TEST(test_signal_hold);
    TEST(test_exit_hold_none_when_closed);
    TEST(test_exit_hold_until_output_closed);
    TEST(test_exit_hold_due);
    TEST(test_exit_hold_then_restart);
    TEST(test_exit_hold_second_closes_first);
    TEST(test_signal_hold_outlasts_output);
    return tap_done();
}
