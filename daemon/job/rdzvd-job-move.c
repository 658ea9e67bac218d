/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-move.c: the one function that changes a job's state, generation and restart count
 * (rdzvd-job-impl.h, struct rdzvd_job_move), and its table of legal moves, each with the
 * decision (rdzvd-job-record.h) that must be recorded before it is made; and a recovery's
 * points, which the moves mark. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/job/rdzvd-job-sm.h"
#include "common/rdzv-log.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "proto/rdzv-status.h"

const char *const rdzvd_job_state_names[_JOB_STATE_MAX] = {"forming", "nccl", "running", "stopping",
                                                           "ended"};

#define S(st) (1u << (st))

#define NONE (-1) /* a move that needs no decision: memory only, nothing a restart must know */

/* Each kind of move: the states it may start from, the state it leads to (RESTORE leads to
 * RUNNING or FORMING, as its record says), and the decision recorded before it (NONE: none; a
 * generation closed or undone before any ROUND went out, or stopped as its record says already,
 * is rebuilt from the record as it stands). */
static const struct {
    const char *name;
    unsigned from;
    enum job_state to;
    int decision; /* enum rdzvd_decision_kind, or NONE */
} moves[_JOB_MOVE_MAX] = {
    [JOB_MOVE_CLOSE] = {"close", S(JOB_FORMING), JOB_NCCL, NONE},
    [JOB_MOVE_FORM] = {"form", S(JOB_NCCL), JOB_RUNNING, RDZVD_DECIDE_FORMED},
    [JOB_MOVE_UNDO] = {"undo", S(JOB_NCCL), JOB_FORMING, NONE},
    [JOB_MOVE_STOP] = {"stop", S(JOB_RUNNING), JOB_STOPPING, RDZVD_DECIDE_STOPPED},
    [JOB_MOVE_STOPPED] = {"stopped", S(JOB_STOPPING), JOB_FORMING, NONE},
    [JOB_MOVE_RESTORE] = {"restore", S(JOB_FORMING), JOB_RUNNING, NONE},
    [JOB_MOVE_END] = {"end", S(JOB_FORMING) | S(JOB_NCCL) | S(JOB_RUNNING), JOB_ENDED,
                      RDZVD_DECIDE_ENDED},
};

const char *rdzvd_job_move_name(enum rdzvd_job_move_kind kind)
{
    return (unsigned)kind < _JOB_MOVE_MAX ? moves[kind].name : "?";
}

int rdzvd_job_move_decision(enum rdzvd_job_move_kind kind)
{
    return (unsigned)kind < _JOB_MOVE_MAX ? moves[kind].decision : NONE;
}

bool rdzvd_job_move_legal(enum job_state from, const struct rdzvd_job_move *mv)
{
    if ((unsigned)mv->kind >= _JOB_MOVE_MAX || (unsigned)from >= _JOB_STATE_MAX)
        return false;
    if (!(moves[mv->kind].from & S(from)))
        return false;
    return true;
}

int rdzvd_job_move(struct rdzvd_job *j, const struct rdzvd_job_move *mv)
{
    enum job_state to;
    int r;

    if (!rdzvd_job_move_legal(j->state, mv) ||
        (mv->kind == JOB_MOVE_RESTORE && j->generation != 0 &&
         !(j->generation == j->claim_gen && mv->generation > j->generation)) ||
        (mv->kind == JOB_MOVE_UNDO && j->generation == 0)) {
        log_error("job=%s: move '%s' refused in state %s (generation %" PRIu64 "); nothing changed",
                  j->run_id, rdzvd_job_move_name(mv->kind), rdzvd_job_state_names[j->state],
                  j->generation);
        return -EPERM;
    }
    /* Recorded first (logged when refused): what a restarted rdzvd or the next leader rebuilds
     * is never behind what this one did, or sent. */
    if (moves[mv->kind].decision != NONE &&
        (r = rdzvd_job_record_move(j, (enum rdzvd_decision_kind)moves[mv->kind].decision,
                                   mv)) < 0)
        return r;
    to = moves[mv->kind].to;
    switch (mv->kind) {
    case JOB_MOVE_CLOSE: /* a new round, of the next generation, under the job's budget */
        j->generation++;
        memset(&j->round, 0, sizeof(j->round));
        j->round.generation = j->generation;
        j->round.restart_count = j->restart_count;
        j->round.max_restarts = j->max_restarts;
        break;
    case JOB_MOVE_UNDO:
        j->generation--;
        break;
    case JOB_MOVE_STOP:
        if (mv->counted)
            j->restart_count++;
        break;
    case JOB_MOVE_RESTORE:
        j->generation = mv->generation;
        j->restart_count = mv->restart_count;
        if (!mv->running) {
            to = JOB_FORMING;
            break;
        }
        j->round.generation = j->generation; /* the running round's: its sizes, the caller's */
        j->round.restart_count = j->restart_count;
        j->round.max_restarts = j->max_restarts;
        break;
    case JOB_MOVE_END:
        j->outcome.generation = j->generation;
        break;
    default:
        break;
    }
    switch (mv->kind) { /* a recovery's points (rdzvd_job_restart begins it, at STOP) */
    case JOB_MOVE_STOPPED:
        rdzvd_job_recovery_point(j, RDZV_RECOVERY_STOPPED, rdzvd_job_wall_s(&j->host));
        break;
    case JOB_MOVE_CLOSE:
        rdzvd_job_recovery_point(j, RDZV_RECOVERY_RENDEZVOUS, rdzvd_job_wall_s(&j->host));
        break;
    case JOB_MOVE_FORM:
        rdzvd_job_recovery_point(j, RDZV_RECOVERY_SENT, rdzvd_job_wall_s(&j->host));
        j->aside_cause = j->straggler_cause = false;
        break;
    default:
        break;
    }
    switch (mv->kind) { /* the timeline's bands: a generation runs from FORM to STOP or END */
    case JOB_MOVE_FORM:
        rdzvd_timeline_band_start(&j->timeline, rdzvd_job_wall_s(&j->host), j->generation,
                                  j->round.world_size, j->round.nnodes);
        break;
    case JOB_MOVE_RESTORE:
        rdzvd_timeline_mark(&j->timeline, rdzvd_job_wall_s(&j->host), mv->generation,
                            RDZV_MARK_LEADER,
                            "rebuilt from its record by this rdzvd (a leader change, or rdzvd "
                            "restarted)");
        if (to == JOB_RUNNING) /* its sizes are the record's */
            rdzvd_timeline_band_start(&j->timeline, rdzvd_job_wall_s(&j->host), mv->generation,
                                      mv->world_size, mv->nnodes);
        break;
    case JOB_MOVE_STOP:
    case JOB_MOVE_END:
        rdzvd_timeline_band_end(&j->timeline, rdzvd_job_wall_s(&j->host));
        break;
    default:
        break;
    }
    j->host.steps->counts.moves_taken[mv->kind][j->state]++;
    log_debug("job %s: %s -> %s (%s, generation %" PRIu64 ", restart %" PRId64 ")", j->run_id,
              rdzvd_job_state_names[j->state], rdzvd_job_state_names[to],
              rdzvd_job_move_name(mv->kind), j->generation, j->restart_count);
    j->state = to;
    return 0;
}

void rdzvd_job_recovery_point(struct rdzvd_job *j, enum rdzv_recovery_point p, double t_now)
{
    const struct rdzv_status_recovery *rc;
    double s[_RDZV_RECOVERY_PHASES];
    struct rdzv_hist *h;
    unsigned k;

    rc = rdzvd_timeline_recovery_point(&j->timeline, t_now, p);
    if (!rc || (p != RDZV_RECOVERY_SENT && p != RDZV_RECOVERY_FIRST_STEP))
        return;
    k = (unsigned)rc->kind < _RDZV_MARK_MAX ? (unsigned)rc->kind : RDZV_MARK_FAILURE;
    h = j->host.steps->counts.recovery[k];
    for (unsigned ph = 0; ph < _RDZV_RECOVERY_PHASES; ph++)
        s[ph] = rdzv_recovery_phase_s(rc, ph);
    if (p == RDZV_RECOVERY_SENT) { /* its first phases are final (a new STOP begins anew) */
        for (unsigned ph = 0; ph < RDZV_RECOVERY_SENT; ph++)
            rdzv_hist_add(&h[ph], s[ph]);
        return;
    }
    rdzv_hist_add(&h[RDZV_RECOVERY_SENT], s[RDZV_RECOVERY_SENT]);
    rdzv_hist_add(&h[RDZV_RECOVERY_TOTAL], s[RDZV_RECOVERY_TOTAL]);
    log_info("job=%s: recovered from generation %" PRIu64 " (%s%s) in %.3f s: stop %.3f s, "
             "rendezvous %.3f s, ranks and NCCL ids %.3f s, first step %.3f s",
             j->run_id, rc->generation, rdzv_mark_names[k], rc->inplace ? ", in place" : "",
             s[RDZV_RECOVERY_TOTAL], s[0], s[1], s[2], s[3]);
}
