/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-live.c: liveness. A member's HEARTBEAT (and the progress it brings), its deadline and
 * its loss: it sent no heartbeat in time, or its connection closed and it did not reconnect. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/job/rdzvd-job-sm.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "proto/rdzv-status.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/job/rdzvd-job-ends.h"
#include "daemon/job/rdzvd-job-status.h"

static void member_lost(struct rdzvd_member *m, const char *why);

void rdzvd_member_deadline(struct rdzvd_member *m, size_t unread)
{
    char why[RDZV_HOST_MAX + 128];

    /* rdzvd runs due timers before it polls: after a stall of rdzvd the heartbeat that keeps m
     * may wait in the socket. One more loop turn (its poll reads it, re-arming this timer);
     * input still unread after that (not a heartbeat, reading paused): lost. */
    if (!m->hb_rechecked && unread > 0) {
        m->hb_rechecked = true;
        rdzvd_member_mark_stall(m);
        rdzvd_member_deadline_retry(m);
        return;
    }
    snprintf(why, sizeof(why),
             m->peer ? "sent no heartbeat for %.1f s" : "did not reconnect within %.1f s",
             (double)m->job->hb_timeout_ms / 1000);
    m->lost_since_s = rdzvd_job_wall_s(&m->job->host) - (double)m->job->hb_timeout_ms / 1000;
    member_lost(m, why);
}

static void member_lost(struct rdzvd_member *m, const char *why)
{
    rdzvd_member_remove(m, why, NULL);
}

void rdzvd_member_closed(struct rdzvd_member *m)
{
    struct rdzvd_job *j = m->job;

    m->peer = NULL;
    if (j->state == JOB_ENDED || !rdzvd_member_stalled(m)) {
        member_lost(m, "disconnected");
        return;
    }
    /* rdzvd was stalled: its agent found it silent and is most likely reconnecting (a resume,
     * or a spare's JOIN), maybe on a connection already waiting to be read. Keep the member
     * (not placed meanwhile, nor one whose workers stopped) until then, or lost at its deadline. */
    if ((m->node_rank < 0 || j->state == JOB_STOPPING) && m->ready) {
        rdzvd_member_set_ready(m, false);
        m->away = true;
        j->naway++;
    }
    m->closed_ms = rdzvd_job_now_ms(&j->host); /* what rdzvd saw of it ends here (P7) */
    rdzvd_member_hb_arm(m, (uint64_t)j->hb_timeout_ms);
    rdzvd_job_note(
        j, false,
        "node=%s disconnected right after rdzvd stalled: waiting %.1f s for its agent to "
        "reconnect",
        m->join.host, (double)j->hb_timeout_ms / 1000);
    if (j->state == JOB_FORMING)
        rdzvd_job_try_close(j);
}

/* While a rebuilt generation waits for its agents, nobody else is placed. */
static bool job_rebuilding(const struct rdzvd_job *j)
{
    return j->rebuilt && j->timer_armed && j->timer_kind == T_REBUILD;
}

/* Once a node's workers have all exited 0 (LEAVE succeeded), the job is finishing: a scale-up
 * would start a generation that needs workers that are done. So too once such a node has gone
 * (R17b). Said (for m, the joiner) when so: it waits as a spare, and is told how the job ends. */
static bool job_finishing(struct rdzvd_job *j, const struct rdzvd_member *m)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *o;

    if (j->nin_done > 0) {
        rdzvd_job_note(j, false,
                       "node=%s is not taken in now (--scale-up now): %" PRId64 " node(s) of "
                       "the generation left once their workers had all exited 0, the job is "
                       "finishing; it waits as a spare",
                       m->join.host, j->nin_done);
        return true;
    }
    for_each_member(j, o, pos, tmp) if (o->node_rank >= 0 && o->left_ok)
    {
        rdzvd_job_note(j, false,
                       "node=%s is not taken in now (--scale-up now): the workers of node %s "
                       "have all exited 0, the job is finishing; it waits as a spare",
                       m->join.host, o->join.host);
        return true;
    }
    return false;
}

uint64_t rdzvd_member_heartbeat(struct rdzvd_member *m)
{
    rdzvd_member_check_stall(m);
    /* The first HEARTBEAT of its generation comes as its agent takes the ROUND, before its
     * workers start (uv_spawn may hold its loop): the start grace lasts until the next. */
    rdzvd_member_hb_arm(m, (uint64_t)m->job->hb_timeout_ms *
                               (m->ran_now ? RDZVD_JOB_INIT_GRACE_FACTOR : 1));
    m->ran_now = false;
    /* --scale-up now takes a joiner in at a HEARTBEAT, not at its JOIN: an agent that goes
     * before it speaks again (a crash, a token holder that closes) moved nobody, and costs
     * nothing. A joiner the job cannot take in yet (a rebuilt generation's agents not all back,
     * MAX reached) asks again at its next HEARTBEAT; one placed meanwhile asks no more. */
    if (m->scale_up_wait) {
        struct rdzvd_job *j = m->job;

        if (m->node_rank >= 0 || j->state == JOB_ENDED) {
            m->scale_up_wait = false;
        } else if (j->state == JOB_RUNNING && j->nin_round < j->max && !job_rebuilding(j) &&
                   !job_finishing(j, m) && rdzvd_job_uncounted_scale_up(j)) {
            /* Within the job's bound on restarts not counted, spaced: else it asks again. */
            m->scale_up_wait = false;
            if (rdzvd_member_scale_up_now(m)) {
                j->scaling_up = true;
                rdzvd_job_restart(j, RDZV_MARK_RESTART, "scale-up", 0,
                                  "a node joined below --nnodes MAX: restarting to scale up");
            }
        }
    }
    return m->job->generation;
}
