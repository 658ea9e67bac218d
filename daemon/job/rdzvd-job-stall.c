/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-stall.c: a member's heartbeat deadline armed, and whether rdzvd itself was stalled
 * (SIGSTOPped, starved, a VM paused) when it meets a member's late message or closed connection,
 * so that its agents' reconnects after the stall are not charged as node losses. A stall is the
 * job's, not one member's. It reads members' timers and calls nothing above it. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/job/rdzvd-job-sm.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "proto/rdzv-status.h"

void rdzvd_member_hb_arm(struct rdzvd_member *m, uint64_t ms)
{
    m->hb_rechecked = false;
    rdzvd_member_deadline_set(m, ms);
}

void rdzvd_member_mark_stall(struct rdzvd_member *m)
{
    m->stall_ms = m->job->stall_ms = rdzvd_job_now_ms(&m->job->host);
}

/* A message of m read after its deadline passed: rdzvd, not the agent, was stalled (a silent
 * agent's deadline fires in time). Its agent may have given up on us and be reconnecting. */
void rdzvd_member_check_stall(struct rdzvd_member *m)
{
    if (rdzvd_member_deadline_due(m))
        rdzvd_member_mark_stall(m);
}

/* rdzvd ran late: a heartbeat deadline of one of j's members passed and its timer has not run
 * (it runs in time on a loop that runs). Any member's deadline will do: one still under the
 * ROUND's longer grace is not due when rdzvd resumes, though its agent, whose deadline is the
 * plain timeout, found rdzvd silent. */
static bool job_ran_late(struct rdzvd_job *j)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *o;

    for_each_member(j, o, pos, tmp) if (rdzvd_member_deadline_due(o)) return true;
    return false;
}

bool rdzvd_member_stalled(struct rdzvd_member *m)
{
    struct rdzvd_job *j = m->job;
    uint64_t now = rdzvd_job_now_ms(&j->host), hb = (uint64_t)j->hb_timeout_ms;

    rdzvd_member_check_stall(m);
    if (m->stall_ms && now - m->stall_ms < hb)
        return true;
    if (j->stall_ms && now - j->stall_ms < hb)
        return true;
    if (!job_ran_late(j))
        return false;
    j->stall_ms = now;
    return true;
}

void rdzvd_member_seen(struct rdzvd_member *m)
{
    uint64_t now = rdzvd_job_now_ms(&m->job->host);

    rdzvd_member_check_stall(m);
    /* Nothing read from m for a heartbeat timeout (its agent heartbeats several times in one):
     * rdzvd echoed none either, and the agent may have given up on it as silent. */
    if (now - m->last_seen_ms >= (uint64_t)m->job->hb_timeout_ms)
        m->stall_ms = now;
    m->last_seen_ms = now;
}
