/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-timers.c: the job machine's timers (daemon/job/rdzvd-job-effects.c): a due time each
 * in its host's set. Many timers armed, re-armed, stopped and closed at random come back due
 * first, equal dues in the order they were armed, each once; the set's first due is the least
 * of those armed; a closed timer's memory is handed back once. */
#include <stdlib.h>

#include "../tap.h"
#include "common/rdzv-log.h"
#include "daemon/job/rdzvd-job-impl.h"

#define N_JOBS 64
#define N_MEMBERS 2048

static unsigned freed_jobs, freed_members;

static void job_freed(struct rdzvd_job *j)
{
    (void)j;
    freed_jobs++;
}

static void member_freed(struct rdzvd_member *m)
{
    (void)m;
    freed_members++;
}

static const struct rdzvd_job_handlers handlers = {.freed = job_freed};

static struct rdzvd_job_timers ts;
/* The time the machine reads (its steps'): the test's clock, moved only by the test. */
static struct rdzvd_job_steps steps = {.now = {.ms = 1000, .wall_s = 1}};
static struct rdzvd_job_host host = {.timers = &ts, .steps = &steps};
static struct rdzvd_job *jobs;
static struct rdzvd_member *members;
static bool closed[N_MEMBERS];

static uint32_t draw(uint32_t n)
{
    static uint64_t x = 88172645463325252ull;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return (uint32_t)(x % n);
}

static bool before(const struct rdzvd_job_timer *a, const struct rdzvd_job_timer *b)
{
    return a->due_ms < b->due_ms || (a->due_ms == b->due_ms && a->seq < b->seq);
}

/* The armed timer due first, by looking at every one; NULL: none. */
static const struct rdzvd_job_timer *first_armed(void)
{
    const struct rdzvd_job_timer *best = NULL;

    for (int i = 0; i < N_JOBS + N_MEMBERS; i++) {
        const struct rdzvd_job_timer *t =
            i < N_JOBS ? &jobs[i].timer : &members[i - N_JOBS].hb_timer;

        if (t->due_ms && (!best || before(t, best)))
            best = t;
    }
    return best;
}

static const struct rdzvd_job_timer *timer_of_input(const struct rdzvd_job_input *in)
{
    if (in->kind == RDZVD_IN_TIMER)
        return &in->u.job->timer;
    ASSERT_EQ(in->kind, RDZVD_IN_DEADLINE);
    ASSERT_EQ(in->u.deadline, 0u); /* no connection: nothing unread */
    return &in->member->hb_timer;
}

/* Take every timer due by now: in order, each the one due first. */
static void take_due(void)
{
    const struct rdzvd_job_timer *want;
    struct rdzvd_job_input in;

    while ((want = first_armed()) && want->due_ms <= steps.now.ms) {
        uint64_t due = want->due_ms;

        ASSERT_EQ(rdzvd_job_next_deadline(&host), due);
        ASSERT_TRUE(rdzvd_job_timer_due(&host, steps.now.ms, &in));
        ASSERT_TRUE(timer_of_input(&in) == want);
        ASSERT_EQ(want->due_ms, 0u); /* disarmed */
    }
    ASSERT_FALSE(rdzvd_job_timer_due(&host, steps.now.ms, &in));
    ASSERT_EQ(rdzvd_job_next_deadline(&host), want ? want->due_ms : 0);
}

static void test_timers_come_back_in_order(void)
{
    unsigned n_closed = 0;

    rdzvd_job_timers_init(&ts);
    jobs = calloc(N_JOBS, sizeof(*jobs));
    members = calloc(N_MEMBERS, sizeof(*members));
    ASSERT_TRUE(jobs && members);
    for (int i = 0; i < N_JOBS; i++) {
        jobs[i].host = host;
        jobs[i].handlers = &handlers;
        rdzvd_job_timer_init(&jobs[i]);
    }
    for (int i = 0; i < N_MEMBERS; i++) {
        members[i].job = &jobs[i % N_JOBS];
        rdzvd_member_timer_init(&members[i]);
    }
    for (int op = 0; op < 60000; op++) {
        uint32_t k = draw(100), i = draw(N_MEMBERS);

        if (k < 50 && !closed[i]) /* few distinct dues: many equal ones */
            rdzvd_member_deadline_set(&members[i], draw(40));
        else if (k < 55 && !closed[i])
            rdzvd_member_deadline_retry(&members[i]);
        else if (k < 65)
            rdzvd_job_timer_start(&jobs[i % N_JOBS], T_JOIN, draw(40));
        else if (k < 70)
            rdzvd_job_timer_stop(&jobs[i % N_JOBS]);
        else if (k < 71 && !closed[i]) {
            rdzvd_member_timer_close(&members[i], member_freed);
            closed[i] = true;
            n_closed++;
        } else if (k < 80) {
            steps.now.ms += draw(5);
            take_due();
        }
        ASSERT_EQ(rdzvd_job_next_deadline(&host), first_armed() ? first_armed()->due_ms : 0);
    }
    steps.now.ms += 100;
    take_due();
    ASSERT_EQ(rdzvd_job_next_deadline(&host), 0u);
    ASSERT_EQ(freed_members, 0u); /* until reaped */
    ASSERT_EQ(rdzvd_job_timers_closing(&host), n_closed > 0);
    rdzvd_job_timers_reap(&host);
    ASSERT_EQ(freed_members, n_closed);
    for (int i = 0; i < N_JOBS; i++)
        rdzvd_job_timer_close(&jobs[i]);
    rdzvd_job_timers_reap(&host);
    ASSERT_EQ(freed_jobs, (unsigned)N_JOBS);
    ASSERT_FALSE(rdzvd_job_timers_closing(&host));
    free(jobs);
    free(members);
}

int main(void)
{
    rdzv_log_setup("test-job-timers", RDZV_LOG_ERROR);
    TEST(test_timers_come_back_in_order);
    return tap_done();
}
