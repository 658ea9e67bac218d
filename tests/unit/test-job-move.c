/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-move.c: the one function that changes a job's state, generation and restart count
 * (daemon/job/rdzvd-job-move.c): its table of legal moves, each move's effect, and a refused
 * move that changes nothing. */
#include <errno.h>
#include <string.h>

#include "../tap.h"
#include "common/rdzv-log.h"
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

static void expect(const struct rdzvd_job *j, enum job_state st, uint64_t gen, int64_t restarts)
{
    ASSERT_EQ(j->state, st);
    ASSERT_EQ(j->generation, gen);
    ASSERT_EQ(j->restart_count, restarts);
}

/* A job's life through every kind of move, with a refused move at each step changing nothing. */
static void test_moves_and_refusals(void)
{
    static struct rdzvd_job j; /* only state, generation, restart count and run_id are used */
    const struct rdzvd_job_move close = {.kind = JOB_MOVE_CLOSE}, form = {.kind = JOB_MOVE_FORM},
                                undo = {.kind = JOB_MOVE_UNDO},
                                stopped = {.kind = JOB_MOVE_STOPPED}, end = {.kind = JOB_MOVE_END};

    memset(&j, 0, sizeof(j));
    strcpy(j.run_id, "job");
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
    ASSERT_OK(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_RESTORE, .generation = 4,
                                                          .restart_count = 2, .running = true}));
    expect(&j, JOB_RUNNING, 4, 2);
    memset(&j, 0, sizeof(j));
    strcpy(j.run_id, "job");
    ASSERT_OK(rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_RESTORE, .generation = 4,
                                                          .restart_count = 2}));
    expect(&j, JOB_FORMING, 4, 2);
    ASSERT_EQ(
        rdzvd_job_move(&j, &(struct rdzvd_job_move){.kind = JOB_MOVE_RESTORE, .generation = 5}),
        -EPERM); /* only a new job, at generation 0 */
    expect(&j, JOB_FORMING, 4, 2);
}

int main(void)
{
    rdzv_log_setup("test-job-move", RDZV_LOG_ERROR);
    TEST(test_legal_moves);
    TEST(test_moves_and_refusals);
    return tap_done();
}
