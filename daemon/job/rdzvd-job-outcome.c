/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-outcome.c: a job's outcome. The job ends and every member is told how; it
 * succeeds once every node of its generation has left succeeded (R17, R17a, R17b); a member
 * put aside is told so (its agent told why) once its generation has stopped. */
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
#include "daemon/data/rdzvd-config.h"
#include "common/rdzv-util.h"

/* The job is over: tell every member how it ended. */
void rdzvd_job_end(struct rdzvd_job *j, const char *type, int64_t exit_code, const char *summary)
{
    double now_s = rdzvd_job_wall_s(&j->host);
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;
    struct rdzv_cost cost;

    /* Its end recorded first (with how it ended: told to its agents that come back to a
     * restarted rdzvd); one the job table refused (logged) is not made. */
    if (j->state == JOB_ENDED ||
        rdzvd_job_move(j, &(struct rdzvd_job_move){.kind = JOB_MOVE_END,
                                                    .end_type = type,
                                                    .end_summary = summary,
                                                    .end_exit_code = exit_code,
                                                    .end_s = now_s}) < 0)
        return;
    rdzvd_job_timer_stop(j);
    j->ended_s = now_s;
    snprintf(j->outcome.type, sizeof(j->outcome.type), "%s", type);
    j->outcome.exit_code = exit_code;
    snprintf(j->outcome.summary, sizeof(j->outcome.summary), "%s", summary);
    j->outcome.cost[0] = '\0';
    if (rdzv_cost_of(&j->timeline.tl, now_s, &cost) == 0 &&
        rdzv_cost_format(&cost, j->outcome.cost, sizeof(j->outcome.cost)) > 0)
        rdzvd_job_note(j, false, "what failures cost: %s", j->outcome.cost);
    else
        j->outcome.cost[0] = '\0'; /* not cut: said whole or not at all */
    if (exit_code == 0)
        rdzvd_job_note(j, false, "generation %" PRIu64 " succeeded", j->generation);
    else
        rdzvd_job_note(j, true, "generation %" PRIu64 " %s (exit code %" PRId64 "): %s",
                       j->generation, type, exit_code, summary);
    rdzvd_job_mark(j, RDZV_MARK_END, "%s (exit code %" PRId64 "): %s", type, exit_code, summary);
    for_each_member(j, m, pos, tmp) rdzvd_member_send_outcome(m);
    rdzvd_job_flush(j);
}

/* A newcomer of the running generation whose workers reported no step in it (HEARTBEAT
 * progress, rdzvd-job-progress.c): with --recovery inplace they wait for the survivors (R17a). */
static bool member_fresh_idle(const struct rdzvd_member *m)
{
    return m->newcomer && !(m->progress && m->progress_gen == m->job->generation);
}

/* The job succeeded when every node of the running generation has sent LEAVE succeeded (R17).
 * A rebuilt one waits for its nodes not back: they may still run, or have failed (the rebuild
 * window says); a node gone after its LEAVE succeeded is back and done (R17b). */
void rdzvd_job_check_all_left(struct rdzvd_job *j)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *o;
    int64_t survivors = 0, idle = 0;

    if (j->state != JOB_RUNNING || (j->rebuilt && j->nin_round + j->nin_done < j->round.nnodes))
        return;
    /* R17a: with --recovery inplace, training is over once every survivor (its workers went on
     * from the generation before) has left succeeded: a newcomer's fresh workers, with no step
     * reported, may wait for peers that are done. The job ends then; their agent gives them
     * RDZV_NEWCOMER_WAIT_MS to end on their own (an honest one ends about when the survivors
     * do), then stops them (A19a). The wait is the agent's: nothing of it is left for an rdzvd
     * restart to forget. A newcomer that left succeeded counts as a survivor: its workers ran to
     * their end. With no survivor, every node leaves. */
    for_each_member(j, o, pos, tmp) if (o->node_rank >= 0 && (!o->newcomer || o->left_ok))
        survivors++;
    for_each_member(j, o, pos, tmp)
    {
        if (o->node_rank >= 0 && !o->left_ok && !(j->inplace && survivors && member_fresh_idle(o)))
            return;
        if (o->node_rank >= 0 && !o->left_ok)
            idle++;
    }
    if (idle) {
        char why[RDZV_SUMMARY_MAX + 1];

        snprintf(why, sizeof(why),
                 "every survivor's workers exited 0; %" PRId64 " newcomer node%s, with no step "
                 "reported, %s %d s to end on %s own", idle, rdzv_plural((uint64_t)idle),
                 idle == 1 ? "has" : "have", RDZV_NEWCOMER_WAIT_MS / 1000,
                 idle == 1 ? "its" : "their");
        rdzvd_job_end(j, "succeeded", 0, why);
        return;
    }
    rdzvd_job_end(j, "succeeded", 0, "every worker of every node exited 0");
}

void rdzvd_member_send_outcome(struct rdzvd_member *m)
{
    struct rdzv_event own = m->job->outcome;

    /* It ran nothing here: no success. One that came back from a generation that was over
     * (its resume's, R3 and W5a) ran that one, and says so. */
    if (own.exit_code == 0 && !rdzvd_member_held_place(m)) {
        char since[64] = "";

        if (m->join.resume.generation)
            snprintf(since, sizeof(since), " since its generation %" PRIu64 " was over",
                     m->join.resume.generation);
        snprintf(own.summary, sizeof(own.summary),
                 "this node ran nothing%s: it waited as a spare, and job %s succeeded on its "
                 "other nodes", since, m->job->run_id);
    }
    rdzvd_member_send_event(m, &own);
}

void rdzvd_member_tell_aside(struct rdzvd_member *m)
{
    struct rdzvd_job *j = m->job;
    const struct rdzvd_job_record_hist *h = rdzvd_job_hist_find(j, m->join.node_id);
    struct rdzv_event e = {
        .type = "put_aside", .generation = j->generation, .exit_code = RDZV_EXIT_PUT_ASIDE};
    void *peer = m->peer;

    snprintf(e.summary, sizeof(e.summary), "node %s (node id %s) is put aside by job %s: %s",
             m->join.host, rdzvd_job_named(j, m->join.node_id), j->run_id, h ? h->reason : "?");
    rdzvd_job_note(j, true, "node=%s put aside (node id %s): %s", m->join.host,
                   rdzvd_job_named(j, m->join.node_id), h ? h->reason : "?");
    rdzvd_job_mark(j, RDZV_MARK_PUT_ASIDE, "node %s put aside: %s", m->join.host,
                   h ? h->reason : "?");
    j->aside_cause = true;
    rdzvd_member_unlink(m);
    if (peer)
        rdzvd_job_peer_put_aside(j, peer, &e);
}

bool rdzvd_job_tell_aside_pending(struct rdzvd_job *j)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;

    for_each_member(j, m, pos, tmp)
    {
        const struct rdzvd_job_record_hist *h = rdzvd_job_hist_find(j, m->join.node_id);
        bool last = j->nmembers == 1;

        if (!m->aside_pending)
            continue;
        m->aside_pending = false;
        if (!h || !h->aside || j->cancelled) /* cancelled: it ends, nobody goes first */
            continue;
        rdzvd_member_tell_aside(m);
        if (last)
            return true;
    }
    return false;
}
