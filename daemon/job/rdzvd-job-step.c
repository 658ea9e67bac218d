/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-step.c: the job machine's dispatch. rdzvd_job_step (rdzvd-job-sm.h) is its one
 * entry: it checks what each input assumes of the job, hands the input to the function that
 * serves it, and its answers come back in the Ready. Also the job's handlers, through which
 * what the outbox reports back becomes the input of a step of its own. */
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

#include "daemon/job/rdzvd-job-impl.h"
#include "daemon/job/rdzvd-job-sm.h"
#include "common/rdzv-assert.h"
#include "common/rdzv-log.h"
#include "daemon/job/rdzvd-job-ends.h"
#include "daemon/job/rdzvd-job-status.h"

/* What every input assumes of a job the machine holds: its counters agree. The machine's own
 * invariants, O(1): what a peer sends is refused, never asserted (rdzv-assert.h). */
static void job_holds(const struct rdzvd_job *j)
{
    rdzv_assert(j->state < _JOB_STATE_MAX);
    rdzv_assert(j->nmembers >= 0);
    rdzv_assert(j->naway >= 0 && j->naway <= j->nmembers);
    rdzv_assert(j->nready >= 0 && j->nready <= j->nmembers);
    rdzv_assert(j->nin_round >= 0 && j->nin_round <= j->nmembers);
    rdzv_assert(j->rank_cap >= 0 && j->rank_cap <= j->max);
    rdzv_assert(j->restart_count >= 0 && j->restart_count <= j->max_restarts);
    rdzv_assert(j->store_ask <= j->store_asks);
    rdzv_assert(j->generation > 0 || j->state == JOB_FORMING || j->state == JOB_ENDED);
}

/* A member's input names a member of a job the machine holds: neither removed from its job
 * (its connection is untied then) nor of a job freed. */
static void member_holds(const struct rdzvd_member *m)
{
    rdzv_assert(m && m->job);
    rdzv_assert(!rdzv_list_empty(&m->node));
    rdzv_assert(!rdzv_list_empty(&m->job->node));
    rdzv_assert(m->job->nmembers > 0);
    rdzv_assert(m->node_rank < m->job->rank_cap);
    job_holds(m->job);
}

/* What came back while a Ready was carried out (a store's answer, an NCCL_REQUEST not queued, a
 * record not written, a connection gone), queued by rdzvd-job-effects.c: an input of a step of
 * its own, run by that file's queue once the Ready is carried out. */
static void later_input(const struct rdzvd_job_host *h, const struct rdzvd_job_input *in,
                        struct rdzvd_job_now now)
{
    struct rdzvd_job_ready rd;

    rdzvd_job_step(h, in, now, &rd);
    rdzvd_job_advance(&rd);
}

/* Every job's, handed to what makes one (rdzvd_job_join, rdzvd_jobs_rebuild_one). */
static const struct rdzvd_job_handlers job_handlers = {
    .freed = rdzvd_job_freed,
    .input = later_input,
    .put_aside = rdzvd_member_put_aside,
    .close_checked = rdzvd_job_close_checked,
};

static void step_join(const struct rdzvd_job_host *h, const struct rdzvd_job_input *in,
                      struct rdzvd_job_ready *rd)
{
    if (in->member) { /* refused before the message is read: no join */
        snprintf(rd->err, sizeof(rd->err), "this connection has already joined job '%s'",
                 rdzvd_member_run_id(in->member));
        rd->rc = -EEXIST;
        return;
    }
    rdzv_assert(in->u.join);
    rd->rc = rdzvd_job_join(h, in->peer, in->u.join, rd->err, sizeof(rd->err), &rd->told,
                            &rd->member, &job_handlers);
}

static void step_heartbeat(struct rdzvd_member *m, const struct rdzv_heartbeat *hb,
                           struct rdzvd_job_ready *rd)
{
    rdzv_assert(hb);
    rdzvd_member_progress(m, hb);
    rd->generation = rdzvd_member_heartbeat(m);
    rdzvd_member_wait(m, &rd->wait); /* what its job waits for, if anything (1.15) */
    if (!rdzvd_member_twin_warning(m, rd->warning, sizeof(rd->warning))) /* (1.17) */
        rd->warning[0] = '\0';
    /* Last: it may put m aside (m gone). What it sends goes after the answer, at advance. */
    rdzvd_member_straggler_check(m);
}

/* A stale NCCL_ID is ignored whatever its ids say. */
static void step_nccl_id(struct rdzvd_member *m, const struct rdzvd_job_input *in,
                         struct rdzvd_job_ready *rd)
{
    const struct rdzv_nccl_id *n = in->u.nccl_id.msg;

    if (!rdzvd_member_nccl_wanted(m, in->u.nccl_id.generation))
        return;
    if (!n) {
        rd->rc = -EBADMSG;
        return;
    }
    rdzvd_member_store_offer(m, n->store_addr, n->store_port);
    if (n->failed)
        rdzvd_member_nccl_error(m, n->error);
    else
        rdzvd_member_nccl_ids(m, (char(*)[RDZV_NCCL_HEX_LEN + 1])n->ids, n->n_ids);
}

/* A record of h's job table not written (UNRECORDED, stepped once the Ready that held it was
 * carried out): a decision whose move or JOIN waits on it (rdzvd_decision_holds) fails its job.
 * The others (ENDED, WAITING, FORGOTTEN, DONE) are logged. Given as its bytes, or by run_id. */
static void step_unrecorded(const struct rdzvd_job_host *h, const struct rdzvd_job_input *in)
{
    char run_id[RDZV_ID_MAX + 1];
    enum rdzvd_decision_kind kind;
    int err = in->u.unrecorded.err;

    if (in->u.unrecorded.run_id) {
        rdzvd_jobs_unrecorded(h->jobs, in->u.unrecorded.run_id, in->u.unrecorded.decision, err);
        return;
    }
    if (in->u.unrecorded.what != RDZVD_CHANGE_DECISION ||
        rdzvd_decision_peek(in->u.unrecorded.val, in->u.unrecorded.vlen, run_id, &kind) < 0) {
        log_error_errno(err, "a change of the job table was not written");
        return;
    }
    log_warn_errno(err, "job=%s: its decision '%s' was not written to its job table", run_id,
                   rdzvd_decision_name(kind));
    if (rdzvd_decision_holds(kind))
        rdzvd_jobs_unrecorded(h->jobs, run_id, rdzvd_decision_name(kind), err);
}

/* The operator's and the host's inputs, which name a job by its run id. */
static void step_host(const struct rdzvd_job_host *h, const struct rdzvd_job_input *in,
                      struct rdzvd_job_ready *rd)
{
    int r;

    switch (in->kind) {
    case RDZVD_IN_RELEASE:
        rdzv_assert(in->u.release);
        r = rdzvd_jobs_release(h->jobs, in->u.release->run_id, in->u.release->node, rd->err,
                               sizeof(rd->err));
        rd->count = r < 0 ? 0 : r;
        rd->rc = r < 0 ? r : 0;
        break;
    case RDZVD_IN_CANCEL_JOB:
        rdzv_assert(in->u.cancel_job);
        rd->rc = rdzvd_jobs_cancel(h, in->u.cancel_job->run_id, in->u.cancel_job->reason,
                                   rd->err, sizeof(rd->err));
        break;
    case RDZVD_IN_END_WAITING:
        rd->rc = rdzvd_jobs_end_waiting(h, in->u.end.run_id, in->u.end.type, in->u.end.exit_code,
                                        in->u.end.why, rd->err, sizeof(rd->err));
        break;
    case RDZVD_IN_REBUILD_BEGIN:
        rd->rc = rdzvd_jobs_rebuild_begin(h, &rd->ids, &rd->n_ids);
        break;
    case RDZVD_IN_REBUILD:
        rdzv_assert(in->u.rebuild.ids || !in->u.rebuild.n);
        for (size_t i = 0; i < in->u.rebuild.n; i++)
            rdzvd_jobs_rebuild_one(h, in->u.rebuild.ids[i], &job_handlers);
        break;
    case RDZVD_IN_DROP_ALL:
        rdzvd_jobs_drop_all(h->jobs);
        break;
    case RDZVD_IN_UNRECORDED: /* the host op record refused a decision of ours */
        rdzv_assert(in->u.unrecorded.err < 0);
        step_unrecorded(h, in);
        break;
    default:
        break;
    }
}

/* A member's input: what its agent said, or that its connection closed. */
static void step_member(const struct rdzvd_job_input *in, struct rdzvd_job_ready *rd)
{
    struct rdzvd_member *m = in->member;

    /* The outbox's reports may come after their member or job went (their memory outlives the
     * pass); every other input names one the machine holds. */
    if (in->kind == RDZVD_IN_NCCL_UNSENT)
        rdzv_assert(m && m->job);
    else if (in->kind != RDZVD_IN_STORE_OPENED)
        member_holds(m);
    switch (in->kind) {
    case RDZVD_IN_SEEN:
        rdzvd_member_seen(m);
        break;
    case RDZVD_IN_HEARTBEAT:
        step_heartbeat(m, in->u.heartbeat, rd);
        break;
    case RDZVD_IN_NCCL_ID:
        step_nccl_id(m, in, rd);
        break;
    case RDZVD_IN_WORKER_EXIT:
        rd->rc = rdzvd_member_worker_exit(m, in->u.worker_exit, rd->err, sizeof(rd->err));
        break;
    case RDZVD_IN_LEAVE:
        rdzvd_member_leave(m, in->u.leave->generation, in->u.leave->succeeded);
        break;
    case RDZVD_IN_AGENT_READY:
        rdzvd_member_ready(m, in->u.ready->generation);
        break;
    case RDZVD_IN_CANCEL:
        rdzvd_member_cancel(m, in->u.cancel->signal, in->u.cancel->reason,
                            in->u.cancel->sched_job);
        break;
    case RDZVD_IN_UNHEALTHY:
        rdzvd_member_unhealthy(m, in->u.unhealthy->reason);
        break;
    case RDZVD_IN_PREFLIGHT_REPORT:
        rdzvd_member_pf_report(m, in->u.preflight_report);
        break;
    case RDZVD_IN_CLOSED:
        rdzvd_member_closed(m);
        break;
    case RDZVD_IN_DEADLINE:
        rdzvd_member_deadline(m, in->u.deadline);
        break;
    case RDZVD_IN_NCCL_UNSENT:
        rdzvd_member_nccl_unsent(m, in->u.nccl_unsent.generation, in->u.nccl_unsent.peer);
        break;
    case RDZVD_IN_STORE_OPENED:
        /* The answer to an ask the job made (its number, of store_asks), or a failure. */
        rdzv_assert(in->u.store_opened.job);
        rdzv_assert(in->u.store_opened.ask >= 1 &&
                    in->u.store_opened.ask <= in->u.store_opened.job->store_asks);
        rdzv_assert(in->u.store_opened.err <= 0);
        rdzvd_job_store_opened(in->u.store_opened.job, in->u.store_opened.ask,
                               in->u.store_opened.generation, in->u.store_opened.store,
                               in->u.store_opened.port, in->u.store_opened.err);
        break;
    default:
        break;
    }
}

int rdzvd_job_step(const struct rdzvd_job_host *jobs, const struct rdzvd_job_input *in,
                   struct rdzvd_job_now now, struct rdzvd_job_ready *rd)
{
    struct rdzvd_job_input due;

    rdzv_assert(jobs && jobs->steps && jobs->timers && jobs->jobs && in && rd);
    rdzv_assert(in->kind < RDZVD_IN_KINDS);
    rdzv_assert(now.ms != 0);
    jobs->steps->now = now;
    jobs->steps->in = in;
    rd->rc = 0;
    rd->err[0] = rd->warning[0] = rd->told.type[0] = '\0';
    rd->member = NULL;
    rd->generation = 0;
    rd->count = 0;
    rd->ids = NULL;
    rd->n_ids = 0;
    rd->timers_ = jobs->timers;
    rd->ticked = false;
    if (in->kind == RDZVD_IN_TICK) { /* the first timer due, as its own input */
        rd->ticked = rdzvd_job_timer_due(jobs, in->u.until, &due);
        in = rd->ticked ? &due : NULL;
    } else if (in->kind == RDZVD_IN_REAP) {
        rdzvd_job_timers_reap(jobs);
        in = NULL;
    }
    rdzvd_job_ready_open(jobs, rd);
    switch (in ? in->kind : RDZVD_IN_REAP) {
    case RDZVD_IN_JOIN:
        step_join(jobs, in, rd);
        break;
    case RDZVD_IN_RELEASE:
    case RDZVD_IN_CANCEL_JOB:
    case RDZVD_IN_END_WAITING:
    case RDZVD_IN_REBUILD_BEGIN:
    case RDZVD_IN_REBUILD:
    case RDZVD_IN_DROP_ALL:
    case RDZVD_IN_UNRECORDED:
        step_host(jobs, in, rd);
        break;
    case RDZVD_IN_TIMER: /* a job held, its timer armed and not closed */
        rdzv_assert(in->u.job && in->u.job->timer_armed);
        rdzv_assert(rdzv_list_empty(&in->u.job->timer.closing));
        rdzv_assert(!rdzv_list_empty(&in->u.job->node));
        job_holds(in->u.job);
        rdzvd_job_fired(in->u.job);
        break;
    case RDZVD_IN_TICK:
    case RDZVD_IN_REAP:
        break;
    default:
        step_member(in, rd);
        break;
    }
    /* Its step stays open until advance: nothing of its outbox has gone out. */
    rdzv_assert(rd->rc <= 0 && rd->steps_ == jobs->steps && rd->steps_->out == &rd->out);
    rdzv_assert(!rd->steps_->draining);
    rd->next_deadline_ms = rdzvd_job_timers_first(rd->timers_);
    rd->reap = rdzvd_job_timers_closing(jobs);
    jobs->steps->in = NULL;
    return rd->rc;
}

/* What the step queued is carried out at the step's time; then what came back meanwhile (a
 * connection closing), each input at the time it brought. */
void rdzvd_job_advance(struct rdzvd_job_ready *rd)
{
    rdzv_assert(rd && rd->steps_ && rd->steps_->out == &rd->out); /* its step's, once */
    rdzvd_job_ready_close(rd);
    rd->next_deadline_ms = rdzvd_job_timers_first(rd->timers_);
    rd->reap = !rdzv_list_empty(&rd->timers_->closing);
}

void rdzvd_job_host_keep_records(struct rdzvd_job_host *h)
{
    rdzvd_job_records_keep(h, later_input);
}

const char *rdzvd_member_run_id(const struct rdzvd_member *m)
{
    return m->job->run_id;
}
