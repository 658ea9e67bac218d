/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-move.c: the one function that changes a job's state, generation and restart count
 * (daemon/job/rdzvd-job-move.c): its table of legal moves and of the decision each needs, each
 * move's effect, and a refused move (not legal, or its decision refused) that changes nothing. */
#include <errno.h>
#include <string.h>

#include "../tap.h"
#include "common/rdzv-log.h"
#include "daemon/data/rdzvd-store.h"
#include "daemon/job/rdzvd-job-impl.h"

/* The table, written out: which kind is legal from which state (F N R S E). */
static void test_legal_moves(void)
{
    static const char *const legal[_JOB_MOVE_MAX] = {
        [JOB_MOVE_CLOSE] = "F....",   [JOB_MOVE_FORM] = ".N...",    [JOB_MOVE_UNDO] = ".N...",
        [JOB_MOVE_STOP] = "..R..",    [JOB_MOVE_STOPPED] = "...S.", [JOB_MOVE_RESTORE] = "F....",
        [JOB_MOVE_END] = "FNR..",
    };

    for (int k = 0; k < _JOB_MOVE_MAX; k++)
        for (int s = 0; s < _JOB_STATE_MAX; s++) {
            struct rdzvd_job_move mv = {.kind = (enum rdzvd_job_move_kind)k};

            ASSERT_EQ(rdzvd_job_move_legal((enum job_state)s, &mv), legal[k][s] != '.');
        }
    ASSERT_FALSE(
        rdzvd_job_move_legal(JOB_FORMING, &(struct rdzvd_job_move){.kind = _JOB_MOVE_MAX}));
}

/* The decision each kind needs, written out: the move and its decision are one row. */
static void test_move_decisions(void)
{
    static const int need[_JOB_MOVE_MAX] = {
        [JOB_MOVE_CLOSE] = -1,   [JOB_MOVE_FORM] = RDZVD_DECIDE_FORMED,
        [JOB_MOVE_UNDO] = -1,    [JOB_MOVE_STOP] = RDZVD_DECIDE_STOPPED,
        [JOB_MOVE_STOPPED] = -1, [JOB_MOVE_RESTORE] = -1,
        [JOB_MOVE_END] = RDZVD_DECIDE_ENDED,
    };

    for (int k = 0; k < _JOB_MOVE_MAX; k++)
        ASSERT_EQ(rdzvd_job_move_decision((enum rdzvd_job_move_kind)k), need[k]);
    ASSERT_EQ(rdzvd_job_move_decision(_JOB_MOVE_MAX), -1);
}

static void expect(const struct rdzvd_job *j, enum job_state st, uint64_t gen, int64_t restarts)
{
    ASSERT_EQ(j->state, st);
    ASSERT_EQ(j->generation, gen);
    ASSERT_EQ(j->restart_count, restarts);
}

/* A job's life through every kind of move, with a refused move at each step changing nothing. */
/* The time a move reads (its host's steps'), as a host sets it. */
static struct rdzvd_job_steps steps = {.now = {.ms = 1000000, .wall_s = 1800000000.0}};

static void test_moves_and_refusals(void)
{
    static struct rdzvd_job j; /* only state, generation, restart count, run_id and time used */
    const struct rdzvd_job_move close = {.kind = JOB_MOVE_CLOSE}, form = {.kind = JOB_MOVE_FORM},
                                undo = {.kind = JOB_MOVE_UNDO},
                                stopped = {.kind = JOB_MOVE_STOPPED}, end = {.kind = JOB_MOVE_END};

    memset(&j, 0, sizeof(j));
    strcpy(j.run_id, "job");
    j.host.steps = &steps;
    ASSERT_EQ(rdzvd_job_move(&j, &form), -EPERM);
    expect(&j, JOB_FORMING, 0, 0);
    ASSERT_OK(rdzvd_job_move(&j, &close));
    expect(&j, JOB_NCCL, 1, 0);
    ASSERT_OK(rdzvd_job_move(&j, &undo));
    expect(&j, JOB_FORMING, 0, 0);
    ASSERT_EQ(rdzvd_job_move(&j, &undo), -EPERM);
    ASSERT_OK(rdzvd_job_move(&j, &close));
    ASSERT_OK(rdzvd_job_move(&j, &form));
    expect(&j, JOB_RUNNING, 1, 0);
    ASSERT_EQ(rdzvd_job_move(&j, &close), -EPERM);
    ASSERT_EQ(rdzvd_job_move(&j, &stopped), -EPERM);
    ASSERT_EQ(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_RESTORE,
                                                           .generation = 7, .running = true}),
              -EPERM);
    expect(&j, JOB_RUNNING, 1, 0);
    ASSERT_OK(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_STOP, .counted = true}));
    expect(&j, JOB_STOPPING, 1, 1);
    ASSERT_EQ(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_STOP}), -EPERM);
    ASSERT_EQ(rdzvd_job_move(&j, &end), -EPERM); /* a stopping job forms next */
    ASSERT_OK(rdzvd_job_move(&j, &stopped));
    expect(&j, JOB_FORMING, 1, 1);
    ASSERT_EQ(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_STOP}), -EPERM);
    ASSERT_OK(rdzvd_job_move(&j, &close));
    ASSERT_OK(rdzvd_job_move(&j, &form));
    ASSERT_OK(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_STOP}));
    expect(&j, JOB_STOPPING, 2, 1); /* not counted: no restart charged */
    ASSERT_OK(rdzvd_job_move(&j, &stopped));
    ASSERT_OK(rdzvd_job_move(&j, &end));
    expect(&j, JOB_ENDED, 2, 1);
    ASSERT_EQ(rdzvd_job_move(&j, &end), -EPERM);
    ASSERT_EQ(rdzvd_job_move(&j, &close), -EPERM);
    expect(&j, JOB_ENDED, 2, 1);

    /* A new job rebuilt from its record: running or not. */
    memset(&j, 0, sizeof(j));
    strcpy(j.run_id, "job");
    j.host.steps = &steps;
    ASSERT_OK(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_RESTORE, .generation = 4,
                                                          .restart_count = 2, .running = true}));
    expect(&j, JOB_RUNNING, 4, 2);
    memset(&j, 0, sizeof(j));
    strcpy(j.run_id, "job");
    j.host.steps = &steps;
    ASSERT_OK(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_RESTORE, .generation = 4,
                                                          .restart_count = 2}));
    expect(&j, JOB_FORMING, 4, 2);
    ASSERT_EQ(
        rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_RESTORE, .generation = 5}),
        -EPERM); /* only a new job, at generation 0 */
    expect(&j, JOB_FORMING, 4, 2);
}

static void no_wake(struct rdzvd_waiter *w, void *ud)
{
    (void)w;
    (void)ud;
}

/* A move records its decision first, in a real job table: one the table refuses (it would take
 * the record back: -ESTALE) is not made, and nothing of the job changes; one it takes is in the
 * record before the move returns. */
static void test_recorded_first(void)
{
    static const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    static struct rdzvd_job j; /* state, generation, restart count, identity and host */
    struct rdzvd_job_record ahead = {.min = 1, .max = 2, .max_restarts = 5, .generation = 5,
                                     .restart_count = 3},
                            got = {.generation = 0};
    struct rdzvd_store *t = NULL;

    ASSERT_OK(rdzvd_store_new(&lim, no_wake, &t));
    rdzvd_store_set_decision_fn(t, rdzvd_decision_apply, NULL); /* a job table, as rdzvd's */
    memset(&j, 0, sizeof(j));
    strcpy(j.run_id, "job");
    j.host.steps = &steps;
    strcpy(ahead.run_id, "job");
    j.min = 1, j.max = 2, j.max_restarts = 5;
    j.host.record_table = t;
    j.host.state_dirfd = -1;
    ASSERT_OK(rdzvd_job_decide(t, RDZVD_DECIDE_STOPPED, &ahead));

    ASSERT_OK(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_CLOSE})); /* none */
    expect(&j, JOB_NCCL, 1, 0);
    j.round.nnodes = j.round.world_size = 1; /* as the round's closing sets them */
    ASSERT_EQ(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_FORM}), -ESTALE);
    expect(&j, JOB_NCCL, 1, 0);
    ASSERT_EQ(j.round.generation, 1u);
    ASSERT_OK(rdzvd_job_record_get(t, "job", &got)); /* the record as it was */
    ASSERT_EQ(got.generation, 5u);
    ASSERT_FALSE(got.running);
    rdzvd_job_record_clear(&got);

    /* Past the record: FORM records "formed", STOP "stopped" with the restart charged. */
    j.generation = 6; /* UNDO, then CLOSE again: generation 6 */
    ASSERT_OK(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_UNDO}));
    j.restart_count = 3;
    ASSERT_OK(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_CLOSE}));
    ASSERT_EQ(j.round.nnodes, 0); /* cleared: the round of generation 6, under restart 3 */
    ASSERT_EQ(j.round.generation, 6u);
    ASSERT_EQ(j.round.restart_count, 3);
    j.round.nnodes = j.round.world_size = 1;
    ASSERT_OK(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_FORM}));
    expect(&j, JOB_RUNNING, 6, 3);
    ASSERT_OK(rdzvd_job_record_get(t, "job", &got));
    ASSERT_EQ(got.generation, 6u);
    ASSERT_TRUE(got.running);
    rdzvd_job_record_clear(&got);
    j.restart_count = 2; /* behind the record's 3: STOPPED would take it back */
    ASSERT_EQ(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_STOP}), -ESTALE);
    expect(&j, JOB_RUNNING, 6, 2);
    j.restart_count = 3;
    ASSERT_OK(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_STOP, .counted = true}));
    expect(&j, JOB_STOPPING, 6, 4);
    ASSERT_OK(rdzvd_job_record_get(t, "job", &got));
    ASSERT_EQ(got.restart_count, 4);
    ASSERT_FALSE(got.running);
    rdzvd_job_record_clear(&got);

    /* END records "ended" first: the record is gone when the job is ENDED. */
    ASSERT_OK(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_STOPPED}));
    ASSERT_OK(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_END}));
    expect(&j, JOB_ENDED, 6, 4);
    ASSERT_EQ(j.outcome.generation, 6u);
    ASSERT_EQ(rdzvd_job_record_get(t, "job", &got), -ENOENT);
    rdzvd_store_free(t);
}

int main(void)
{
    rdzv_log_setup("test-job-move", RDZV_LOG_ERROR);
    TEST(test_legal_moves);
    TEST(test_move_decisions);
    TEST(test_moves_and_refusals);
    TEST(test_recorded_first);
    return tap_done();
}
