/* SPDX-License-Identifier: Apache-2.0 */
/* test-timeline.c: a job's timeline (daemon/data/rdzvd-timeline.h): bands and marks keep the
 * newest, the rate samples spread steps over the time between reports, halve when full, take a
 * step back (a restart from a checkpoint) as a new base, ignore a report older than the last,
 * the current rate falls to 0 when the reports stop, and the peak a reader shows holds the rate
 * now. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/data/rdzvd-config.h"
#include "daemon/data/rdzvd-timeline.h"
#include "../tap.h"

#define NEAR(a, b) ((a) - (b) < 1e-9 && (b) - (a) < 1e-9)

static void test_bands_and_marks_keep_the_newest(void)
{
    struct rdzvd_timeline t;
    char long_text[400];

    rdzvd_timeline_init(&t, 0);
    for (unsigned g = 1; g <= RDZV_STATUS_BANDS + 5; g++)
        rdzvd_timeline_band_start(&t, 1000.0 + g, g, 4, 2);
    ASSERT_EQ(t.tl.n_bands, RDZV_STATUS_BANDS);
    ASSERT_EQ(t.tl.bands[0].generation, 6);
    ASSERT_TRUE(NEAR(t.tl.bands[0].end, t.tl.bands[1].start)); /* the next one ended it */
    ASSERT_TRUE(t.tl.bands[RDZV_STATUS_BANDS - 1].end == 0);
    rdzvd_timeline_band_end(&t, 2000.0);
    ASSERT_TRUE(NEAR(t.tl.bands[RDZV_STATUS_BANDS - 1].end, 2000.0));
    rdzvd_timeline_band_end(&t, 3000.0); /* ended already: unchanged */
    ASSERT_TRUE(NEAR(t.tl.bands[RDZV_STATUS_BANDS - 1].end, 2000.0));
    memset(long_text, 'x', sizeof(long_text) - 1);
    long_text[sizeof(long_text) - 1] = '\0';
    memcpy(long_text + RDZV_STATUS_TEXT_MAX - 1, "\xc3\xa9", 2); /* an é cut in half */
    for (unsigned i = 0; i < RDZV_STATUS_MARKS + 3; i++)
        rdzvd_timeline_mark(&t, 1000.0 + i, i, RDZV_MARK_FAILURE,
                            i == RDZV_STATUS_MARKS + 2 ? long_text : "f");
    ASSERT_EQ(t.tl.n_marks, RDZV_STATUS_MARKS);
    ASSERT_EQ(t.tl.marks[0].generation, 3);
    ASSERT_EQ(strlen(t.tl.marks[RDZV_STATUS_MARKS - 1].text), RDZV_STATUS_TEXT_MAX - 1);
}

static void test_rates(void)
{
    struct rdzvd_timeline t;
    struct rdzv_status_timeline out;
    double now;

    rdzvd_timeline_init(&t, 0);
    ASSERT_TRUE(rdzvd_timeline_status(&t, 100.0, &out) == -1); /* nothing reported */
    ASSERT_EQ(out.n_rates, 0);
    /* 20 steps/s reported every 2.5 s: spread over the 1 s samples between. */
    for (int k = 0; k <= 8; k++)
        rdzvd_timeline_step(&t, 100.0 + 2.5 * k, 50 * k);
    now = 120.0;
    ASSERT_TRUE(NEAR(rdzvd_timeline_status(&t, now, &out), 20.0));
    ASSERT_EQ(out.n_rates, 20);
    for (unsigned i = 0; i < out.n_rates; i++)
        ASSERT_TRUE(NEAR(out.rates[i], 20.0));
    /* older than the last report: ignored */
    rdzvd_timeline_step(&t, 110.0, 10000);
    ASSERT_EQ(t.last_step, 400);
    /* back to step 100 (a restart from its checkpoint): no steps counted, the new base */
    rdzvd_timeline_step(&t, 121.0, 100);
    rdzvd_timeline_step(&t, 122.0, 110);
    ASSERT_TRUE(NEAR(t.tl.rates[21], 10.0));
    ASSERT_TRUE(NEAR(t.tl.rates[20], 0.0));
    /* silent for two windows: not training now */
    ASSERT_TRUE(rdzvd_timeline_status(&t, 122.0 + 2 * RDZVD_TIMELINE_RATE_WINDOW_S, &out) == 0);
    /* past the last sample: halved (pairs merged), steps kept */
    rdzvd_timeline_step(&t, 100.0 + RDZV_STATUS_RATES + 0.5, 110 + 5);
    ASSERT_TRUE(NEAR(t.tl.rate_interval_s, 2.0));
    ASSERT_EQ(t.tl.n_rates, RDZV_STATUS_RATES / 2 + 1);
    ASSERT_TRUE(NEAR(t.tl.rates[0], 40.0)); /* 2 s of 20 steps/s */
    /* a clock far off: ignored */
    rdzvd_timeline_step(&t, 100.0 + RDZVD_TIMELINE_SPAN_MAX_S + 1, 200);
    ASSERT_EQ(t.last_step, 115);
}

/* The peak shown beside the rate now is never below it: rank 0 ran at 1.13 steps/s for 40
 * minutes (the samples grew to 32 s), then at 4.44 after a restart, in a sample under way that
 * is not shown yet (the story of "4.44 now, peak 1.13"). Then the newest n samples only, and
 * the samples alone when the rate now is not known. */
static void test_peak_holds_the_rate_now(void)
{
    struct rdzv_status_job j = {0};
    struct rdzvd_timeline t;
    struct rdzv_status_timeline out;
    double x, now;

    rdzvd_timeline_init(&t, 0);
    for (x = 100.0; x < 100.0 + 2400; x += 2.5)
        rdzvd_timeline_step(&t, x, (int64_t)(1.13 * (x - 100.0)));
    ASSERT_TRUE(NEAR(t.tl.rate_interval_s, 32.0));
    x = t.tl.rate_start + t.tl.n_rates * t.tl.rate_interval_s + 0.5; /* a new sample */
    rdzvd_timeline_step(&t, x, 0); /* back to its checkpoint: a new base */
    for (int k = 1; k <= 4; k++) /* 11 steps every 2.5 s */
        rdzvd_timeline_step(&t, x + 2.5 * k, 11 * k);
    now = x + 10.0;
    j.steps_per_second = rdzvd_timeline_status(&t, now, &out);
    j.rate_known = true;
    j.timeline = &out;
    ASSERT_TRUE(NEAR(j.steps_per_second, 4.4));
    for (unsigned i = 0; i < out.n_rates; i++)
        ASSERT_TRUE(out.rates[i] < 1.2); /* every sample shown is slower */
    ASSERT_TRUE(NEAR(rdzv_status_rate_peak(&j, 60), j.steps_per_second));
    /* the newest n samples only; without a rate now, theirs */
    out.rates[0] = 9.0;
    j.rate_known = false;
    j.steps_per_second = 0;
    ASSERT_TRUE(rdzv_status_rate_peak(&j, out.n_rates - 1) < 1.2);
    ASSERT_TRUE(NEAR(rdzv_status_rate_peak(&j, out.n_rates), 9.0));
    j.timeline = NULL;
    ASSERT_TRUE(rdzv_status_rate_peak(&j, 60) == 0);
}

/* A recovery's points come in order, once each (a point taken again replaces its time and its
 * phase's share of the sums); the first step ends it; the newest RDZV_STATUS_RECOVERIES kept. */
static void test_recovery_points(void)
{
    const struct rdzv_status_recovery *rc;
    struct rdzvd_timeline t;

    rdzvd_timeline_init(&t, 0);
    ASSERT_NULL(rdzvd_timeline_recovery_point(&t, 10, RDZV_RECOVERY_STOPPED)); /* none begun */
    rdzvd_timeline_recovery_start(&t, 100, 3, RDZV_MARK_NODE_LOST, true, 0);
    ASSERT_TRUE(t.recovering && t.tl.recoveries_total == 1);
    ASSERT_NULL(rdzvd_timeline_recovery_point(&t, 101, RDZV_RECOVERY_RENDEZVOUS)); /* too soon */
    ASSERT_NULL(rdzvd_timeline_recovery_point(&t, 101, RDZV_RECOVERY_DETECTED));
    ASSERT_NOT_NULL(rdzvd_timeline_recovery_point(&t, 100.5, RDZV_RECOVERY_STOPPED));
    ASSERT_TRUE(NEAR(rdzvd_timeline_recovery_since(&t), 100.5));
    ASSERT_NOT_NULL(rdzvd_timeline_recovery_point(&t, 101, RDZV_RECOVERY_RENDEZVOUS));
    /* The round undone and closed again: the newest time, counted once. */
    ASSERT_NOT_NULL(rdzvd_timeline_recovery_point(&t, 102, RDZV_RECOVERY_RENDEZVOUS));
    ASSERT_TRUE(NEAR(t.tl.phase_sum_s[1], 1.5));
    ASSERT_NOT_NULL(rdzvd_timeline_recovery_point(&t, 102.25, RDZV_RECOVERY_SENT));
    ASSERT_NULL(rdzvd_timeline_recovery_point(&t, 103, RDZV_RECOVERY_STOPPED)); /* after SENT */
    /* A first step reported before the ranks went out counts from when they did. */
    rc = rdzvd_timeline_recovery_point(&t, 102, RDZV_RECOVERY_FIRST_STEP);
    ASSERT_NOT_NULL(rc);
    ASSERT_TRUE(NEAR(rc->t[RDZV_RECOVERY_FIRST_STEP], 102.25) && !t.recovering);
    ASSERT_TRUE(NEAR(rdzv_recovery_phase_s(rc, RDZV_RECOVERY_TOTAL), 2.25));
    ASSERT_TRUE(NEAR(t.tl.phase_sum_s[RDZV_RECOVERY_TOTAL], 2.25));
    ASSERT_TRUE(NEAR(t.tl.phase_sum_s[0] + t.tl.phase_sum_s[1] + t.tl.phase_sum_s[2] +
                         t.tl.phase_sum_s[3], 2.25));
    ASSERT_NULL(rdzvd_timeline_recovery_point(&t, 104, RDZV_RECOVERY_FIRST_STEP)); /* ended */
    ASSERT_TRUE(NEAR(rdzvd_timeline_recovery_since(&t), 0));
    /* A recovery interrupted by the next: left unfinished, the next one under way. */
    rdzvd_timeline_recovery_start(&t, 200, 4, RDZV_MARK_FAILURE, false, 0);
    rdzvd_timeline_recovery_point(&t, 201, RDZV_RECOVERY_STOPPED);
    rdzvd_timeline_recovery_start(&t, 202, 4, RDZV_MARK_PUT_ASIDE, false, 0);
    ASSERT_EQ(t.tl.n_recoveries, 3);
    ASSERT_TRUE(rdzv_recovery_phase_s(&t.tl.recoveries[1], 1) == -1);
    ASSERT_NULL(rdzvd_timeline_recovery_point(&t, 203, RDZV_RECOVERY_RENDEZVOUS));
    for (unsigned i = 0; i < RDZV_STATUS_RECOVERIES + 2; i++)
        rdzvd_timeline_recovery_start(&t, 300 + i, 10 + i, RDZV_MARK_FAILURE, false, 0);
    ASSERT_EQ(t.tl.n_recoveries, RDZV_STATUS_RECOVERIES);
    ASSERT_EQ(t.tl.recoveries_total, 3 + RDZV_STATUS_RECOVERIES + 2);
    ASSERT_EQ(t.tl.recoveries[0].generation, 12);
}

/* The histogram's buckets: at most each bound, the rest above the last. */
static void test_histogram(void)
{
    struct rdzv_hist h;

    memset(&h, 0, sizeof(h));
    rdzv_hist_add(&h, -1);    /* 0 */
    rdzv_hist_add(&h, 0.05);  /* at the first bound */
    rdzv_hist_add(&h, 0.051); /* above it */
    rdzv_hist_add(&h, 1000);
    ASSERT_EQ(h.in[0], 2);
    ASSERT_EQ(h.in[1], 1);
    ASSERT_EQ(h.in[RDZV_HIST_BUCKETS], 1);
    ASSERT_EQ(h.count, 4);
    ASSERT_TRUE(NEAR(h.sum, 1000.101));
}

/* What failures cost a job: the start-up to rank 0's first step, each
 * recovery from its failure (detection, not before its generation began) to the next first step,
 * the time spent on steps done before a restart from a checkpoint, and the rest training; the
 * parts add up to the wall time. */
static void test_cost(void)
{
    struct rdzvd_timeline t;
    struct rdzv_cost c;
    char line[512];

    rdzvd_timeline_init(&t, 0);
    ASSERT_EQ(rdzv_cost_of(&t.tl, 10, &c), -ENODATA); /* no start known */
    rdzvd_timeline_init(&t, 1000);
    rdzvd_timeline_band_start(&t, 1001, 1, 4, 2);
    ASSERT_OK(rdzv_cost_of(&t.tl, 1002, &c)); /* no step yet: start-up to the generation */
    ASSERT_TRUE(NEAR(c.startup_s, 1) && NEAR(c.trained_s, 1) && NEAR(c.lost_s, 0));
    rdzvd_timeline_step(&t, 1003, 0);
    rdzvd_timeline_step(&t, 1013, 100);
    /* A worker died at 1014 (its report), rdzvd decided at 1014.5; a cause dated before the
     * generation began counts from its start. */
    rdzvd_timeline_recovery_start(&t, 1014.5, 1, RDZV_MARK_FAILURE, false, 1014);
    ASSERT_TRUE(NEAR(t.tl.detect_sum_s, 0.5));
    rdzvd_timeline_recovery_point(&t, 1015, RDZV_RECOVERY_STOPPED);
    rdzvd_timeline_recovery_point(&t, 1016, RDZV_RECOVERY_RENDEZVOUS);
    rdzvd_timeline_recovery_point(&t, 1016, RDZV_RECOVERY_SENT);
    rdzvd_timeline_band_start(&t, 1016, 2, 4, 2);
    rdzvd_timeline_step(&t, 1017, 50); /* from the checkpoint at 50: the new base */
    rdzvd_timeline_recovery_point(&t, 1017, RDZV_RECOVERY_FIRST_STEP);
    rdzvd_timeline_step(&t, 1022, 90); /* 40 steps done before, in 5 s */
    ASSERT_TRUE(NEAR(t.tl.redo_s, 5));
    rdzvd_timeline_step(&t, 1024, 110); /* passes the highest (100): its share, half of 2 s */
    ASSERT_TRUE(NEAR(t.tl.redo_s, 6));
    rdzvd_timeline_step(&t, 1026, 160); /* past it: none */
    ASSERT_TRUE(NEAR(t.tl.redo_s, 6));
    /* A cause dated before its generation began (another host's clock, behind): not believed.
     * The recovery it begins is under way at the end: lost up to it. */
    rdzvd_timeline_recovery_start(&t, 1030, 2, RDZV_MARK_NODE_LOST, true, 900);
    ASSERT_TRUE(NEAR(t.tl.detect_sum_s, 0.5));
    ASSERT_OK(rdzv_cost_of(&t.tl, 1040, &c));
    ASSERT_TRUE(NEAR(c.wall_s, 40) && NEAR(c.startup_s, 3) && NEAR(c.detect_s, 0.5));
    ASSERT_TRUE(NEAR(c.phase_s[0], 0.5) && NEAR(c.phase_s[1], 1) && NEAR(c.phase_s[2], 0) &&
                NEAR(c.phase_s[3], 1) && NEAR(c.cut_s, 10));
    ASSERT_TRUE(NEAR(c.lost_s, 13) && NEAR(c.trained_s, 24) && NEAR(c.redo_s, 6));
    ASSERT_TRUE(NEAR(c.startup_s + c.trained_s + c.lost_s, c.wall_s));
    ASSERT_EQ(c.recoveries, 2);
    ASSERT_TRUE(rdzv_cost_format(&c, line, sizeof(line)) > 0);
    ASSERT_BYTES_STR(line, strlen(line),
                     "wall 40.0 s: start-up 3.0 s (8%), training 24.0 s (60%; 6.0 s of it "
                     "redoing steps done before), 2 recoveries 13.0 s (32%: detect 0.5, stop "
                     "0.5, rendezvous 1.0, nccl 0.0, first step 1.0, cut short 10.0)");
    ASSERT_EQ(rdzv_cost_format(&c, line, 40), -ENOSPC);
}

/* Failures before the first step: the start-up ends at the first; a recovery cut short by the
 * next failure is lost up to it; the report after a recovery is a new base (the time between is
 * not steps'); a job rebuilt from its record says its figures count from then. Without progress
 * reports a recovery ends when its ranks went out. */
static void test_cost_cut_short(void)
{
    struct rdzvd_timeline t;
    struct rdzv_cost c;
    char line[512];

    rdzvd_timeline_init(&t, 100);
    rdzvd_timeline_band_start(&t, 101, 1, 4, 2);
    rdzvd_timeline_recovery_start(&t, 105, 1, RDZV_MARK_FAILURE, false, 104);
    ASSERT_TRUE(NEAR(t.tl.first_failure_s, 104));
    rdzvd_timeline_recovery_point(&t, 106, RDZV_RECOVERY_STOPPED);
    rdzvd_timeline_recovery_start(&t, 110, 1, RDZV_MARK_FAILURE, false, 109); /* cut short */
    ASSERT_TRUE(NEAR(t.tl.cut_s, 3) && NEAR(t.tl.detect_sum_s, 2));
    ASSERT_OK(rdzv_cost_of(&t.tl, 110, &c)); /* no step yet: to the first generation */
    ASSERT_TRUE(NEAR(c.startup_s, 1) && NEAR(c.lost_s, 1 + 1 + 3 + 1 + 0));
    rdzvd_timeline_recovery_point(&t, 111, RDZV_RECOVERY_STOPPED);
    rdzvd_timeline_recovery_point(&t, 111, RDZV_RECOVERY_RENDEZVOUS);
    rdzvd_timeline_recovery_point(&t, 112, RDZV_RECOVERY_SENT);
    rdzvd_timeline_band_start(&t, 112, 2, 4, 2);
    /* No progress report ever: the recovery ended with its ranks sent. */
    ASSERT_OK(rdzv_cost_of(&t.tl, 130, &c));
    ASSERT_TRUE(NEAR(c.cut_s, 3) && NEAR(c.lost_s, 2 + 3 + 2 + 0 + 1 + 0));
    ASSERT_TRUE(NEAR(c.trained_s, 30 - 1 - 8));
    /* Steps then: the first is a new base; after the next recovery, the first again. */
    rdzvd_timeline_step(&t, 113, 0);
    rdzvd_timeline_recovery_point(&t, 113, RDZV_RECOVERY_FIRST_STEP);
    rdzvd_timeline_step(&t, 120, 70);
    rdzvd_timeline_recovery_start(&t, 121, 2, RDZV_MARK_FAILURE, true, 0);
    rdzvd_timeline_step(&t, 125, 60); /* below: but the new base, not a restart's redo yet */
    ASSERT_TRUE(NEAR(t.tl.redo_s, 0));
    rdzvd_timeline_step(&t, 126, 70);
    ASSERT_TRUE(NEAR(t.tl.redo_s, 1));
    /* Steps came: the start-up ends at the failure before the first of them. */
    ASSERT_OK(rdzv_cost_of(&t.tl, 126, &c));
    ASSERT_TRUE(NEAR(c.startup_s, 4));
    /* A recovery whose last point never comes (a node that never reports): over, for the
     * cost, once rank 0 steps after its ranks went out. */
    rdzvd_timeline_recovery_start(&t, 126.5, 2, RDZV_MARK_FAILURE, false, 0);
    rdzvd_timeline_recovery_point(&t, 126.5, RDZV_RECOVERY_STOPPED);
    rdzvd_timeline_recovery_point(&t, 126.5, RDZV_RECOVERY_RENDEZVOUS);
    rdzvd_timeline_recovery_point(&t, 126.5, RDZV_RECOVERY_SENT);
    rdzvd_timeline_step(&t, 127, 0);
    ASSERT_TRUE(NEAR(t.tl.open_since_s, 0) && t.recovering);
    rdzvd_timeline_mark(&t, 127, 2, RDZV_MARK_LEADER, "rebuilt");
    ASSERT_OK(rdzv_cost_of(&t.tl, 130, &c));
    ASSERT_TRUE(c.rebuilt && rdzv_cost_format(&c, line, sizeof(line)) > 0);
    ASSERT_TRUE(strncmp(line, "since rdzvd took the job over: wall 30.0 s", 42) == 0);
}

/* No step reported (a worker that never writes its progress): the start-up's end and the
 * recoveries' first steps were not seen, and the line says so ("?") instead of 0.0; the time
 * they share is given whole. Once a step came, they are figures again. */
static void test_cost_unknown(void)
{
    struct rdzvd_timeline t;
    struct rdzv_cost c;
    char line[512];

    rdzvd_timeline_init(&t, 100);
    rdzvd_timeline_band_start(&t, 100.1, 1, 2, 2);
    ASSERT_OK(rdzv_cost_of(&t.tl, 104, &c));
    ASSERT_TRUE(c.no_steps && rdzv_cost_format(&c, line, sizeof(line)) > 0);
    ASSERT_BYTES_STR(line, strlen(line),
                     "wall 4.0 s: start-up ?, training ? (no step reported: 4.0 s, 100%, between "
                     "them), 0 recoveries 0.0 s (0%: detect 0.0, stop 0.0, rendezvous 0.0, nccl "
                     "0.0, first step 0.0)");
    rdzvd_timeline_recovery_start(&t, 104, 1, RDZV_MARK_FAILURE, false, 104);
    rdzvd_timeline_recovery_point(&t, 104.1, RDZV_RECOVERY_STOPPED);
    rdzvd_timeline_recovery_point(&t, 104.1, RDZV_RECOVERY_RENDEZVOUS);
    rdzvd_timeline_recovery_point(&t, 104.1, RDZV_RECOVERY_SENT);
    rdzvd_timeline_band_start(&t, 104.1, 2, 2, 2);
    ASSERT_OK(rdzv_cost_of(&t.tl, 110, &c));
    ASSERT_TRUE(rdzv_cost_format(&c, line, sizeof(line)) > 0);
    ASSERT_BYTES_STR(line, strlen(line),
                     "wall 10.0 s: start-up ?, training ? (no step reported: 9.9 s, 99%, between "
                     "them), 1 recovery 0.1 s (1%: detect 0.0, stop 0.1, rendezvous 0.0, nccl "
                     "0.0, first step ?)");
    rdzvd_timeline_step(&t, 107, 1);
    rdzvd_timeline_recovery_point(&t, 107, RDZV_RECOVERY_FIRST_STEP);
    ASSERT_OK(rdzv_cost_of(&t.tl, 110, &c));
    ASSERT_TRUE(!c.no_steps && NEAR(c.phase_s[3], 2.9));
}

/* The failure that ends a job (no restart left): from it, as its report dates it, to the end is
 * detection, not training; a date before the generation began, or after the end, is not
 * believed; during a recovery nothing (its time to the end is cut short already). */
static void test_cost_of_the_last_failure(void)
{
    struct rdzvd_timeline t;
    struct rdzv_cost c;

    rdzvd_timeline_init(&t, 100);
    rdzvd_timeline_band_start(&t, 100, 1, 2, 2);
    rdzvd_timeline_step(&t, 102, 1);
    rdzvd_timeline_step(&t, 104, 9);
    rdzvd_timeline_failed(&t, 105.5, 104); /* said at 104, its interpreter exited at 105.5 */
    ASSERT_OK(rdzv_cost_of(&t.tl, 105.5, &c));
    ASSERT_TRUE(NEAR(c.startup_s, 2) && NEAR(c.trained_s, 2) && NEAR(c.detect_s, 1.5));
    rdzvd_timeline_init(&t, 100);
    rdzvd_timeline_band_start(&t, 101, 1, 2, 2);
    rdzvd_timeline_failed(&t, 105, 99); /* before its generation: not believed */
    rdzvd_timeline_failed(&t, 105, 106); /* after the decision: not believed */
    ASSERT_TRUE(NEAR(t.tl.detect_sum_s, 0) && !(t.tl.first_failure_s > 0));
    rdzvd_timeline_failed(&t, 105, 103); /* before any step: it ends the start-up */
    ASSERT_OK(rdzv_cost_of(&t.tl, 105, &c));
    ASSERT_TRUE(NEAR(t.tl.first_failure_s, 103) && NEAR(c.detect_s, 2));
}

int main(void)
{
    TEST(test_cost);
    TEST(test_cost_unknown);
    TEST(test_cost_of_the_last_failure);
    TEST(test_cost_cut_short);
    TEST(test_recovery_points);
    TEST(test_histogram);
    TEST(test_bands_and_marks_keep_the_newest);
    TEST(test_rates);
    TEST(test_peak_holds_the_rate_now);
    return tap_done();
}
