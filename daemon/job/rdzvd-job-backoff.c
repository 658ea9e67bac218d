/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-backoff.c: restarts back off (the first JOIN's restart_backoff, the cap): when a
 * restart's next generation may form. Part of the job state machine (rdzvd-job-impl.h), below
 * rdzvd-job-sm.c: it asks, and arms the job's timer; nothing here moves the job. */
#include <stdbool.h>
#include <stdint.h>

#include "common/rdzv-util.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/job/rdzvd-job-impl.h"

uint64_t rdzvd_job_backoff_start(struct rdzvd_job *j, bool counted)
{
    uint64_t now = rdzvd_job_now_ms(), ms = 0;

    if (j->formed_ms && now - j->formed_ms >= RDZVD_JOB_BACKOFF_RESET_MS)
        j->backoff_step = 0; /* it ran healthy a while */
    if (counted && j->backoff_max_ms > 0 && j->backoff_step++ > 0) {
        ms = RDZVD_JOB_BACKOFF_FIRST_MS;
        for (unsigned i = 2; i < j->backoff_step && ms < (uint64_t)j->backoff_max_ms; i++)
            ms *= 2;
        if (ms > (uint64_t)j->backoff_max_ms)
            ms = (uint64_t)j->backoff_max_ms;
    }
    j->backoff_until_ms = ms ? now + ms : 0;
    return ms;
}

uint64_t rdzvd_job_backoff_left(struct rdzvd_job *j)
{
    uint64_t now;

    if (!j->backoff_until_ms)
        return 0;
    now = rdzvd_job_now_ms();
    if (now < j->backoff_until_ms)
        return j->backoff_until_ms - now;
    j->backoff_until_ms = 0;
    return 0;
}
