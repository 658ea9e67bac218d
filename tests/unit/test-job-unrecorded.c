/* SPDX-License-Identifier: Apache-2.0 */
/* test-job-unrecorded.c: a record of the job table not written (its journal failed): when and
 * how the job machine is told (the input UNRECORDED, docs/design/architecture.md "Records"),
 * driven with fake agents (jobtest.h). */
#include "common/rdzv-log.h"
#include "jobtest.h"
#include "daemon/job/rdzvd-job-impl.h"

/* How many decisions FORMED not written were told to unrecorded_outside. */
static int told_outside;

/* The machine's input fn for a record not written, as rdzvd-job-step.c's: it checks that no
 * step is open and no Ready is being carried out when the queued UNRECORDED is stepped, then
 * steps it as rdzvd does. */
static void unrecorded_outside(const struct rdzvd_job_host *h, const struct rdzvd_job_input *in,
                               struct rdzvd_job_now now)
{
    char run_id[RDZV_ID_MAX + 1];
    enum rdzvd_decision_kind kind;
    struct rdzvd_job_ready rd;

    ASSERT_NULL(jt_steps.out);
    ASSERT_FALSE(jt_steps.draining);
    ASSERT_EQ(in->kind, RDZVD_IN_UNRECORDED);
    ASSERT_EQ(in->u.unrecorded.what, RDZVD_CHANGE_DECISION);
    ASSERT_OK(rdzvd_decision_peek(in->u.unrecorded.val, in->u.unrecorded.vlen, run_id, &kind));
    told_outside += kind == RDZVD_DECIDE_FORMED;
    rdzvd_job_step(h, in, now, &rd);
    rdzvd_job_advance(&rd);
}

/* As test-job-sm.c's test_unwritten_decision_sends_nothing: FORMED not written (EFBIG). The job
 * hears of it (UNRECORDED) in a step of its own, once the Ready that held the record is carried
 * out, never from inside it; still no member hears of the generation, and the job fails naming
 * why. */
static void test_unwritten_decision_told_after_the_ready(void)
{
    struct fake f[2] = {0};
    char path[64];
    int fd = jt_state_dir(path, sizeof(path));
    struct env e;

    env_init(&e, fd);
    rdzvd_job_records_keep(&e.h, unrecorded_outside);
    told_outside = 0;
    jt_join_formed_unwritten(&e, path, f);
    ASSERT_EQ(told_outside, 1);
    for (int i = 0; i < 2; i++) {
        ASSERT_EQ(f[i].nrounds, 0);
        ASSERT_TRUE(event_is(&f[i], "failed"));
        ASSERT_TRUE(strstr(f[i].event.summary, "could not record that generation 1 formed") !=
                    NULL);
    }
    env_done(&e);
    jt_state_dir_done(fd, path);
}

int main(void)
{
    rdzv_log_setup("test-job-unrecorded", RDZV_LOG_ERROR);
    TEST(test_unwritten_decision_told_after_the_ready);
    return tap_done();
}
