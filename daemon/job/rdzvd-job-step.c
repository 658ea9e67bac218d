/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-step.c: the job machine's one entry (rdzvd_job_step, rdzvd-job-sm.h): each input
 * goes to the part of the machine that decides it, and its answers come back in the Ready. Part
 * of the job state machine (rdzvd-job-impl.h): no libuv, no clock, no host op. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "daemon/job/rdzvd-job-impl.h"

static void step_join(const struct rdzvd_job_host *h, const struct rdzvd_job_input *in,
                      struct rdzvd_job_ready *rd)
{
    if (in->member) {
        snprintf(rd->err, sizeof(rd->err), "this connection has already joined job '%s'",
                 rdzvd_member_run_id(in->member));
        rd->rc = -EEXIST;
        return;
    }
    rd->rc = rdzvd_job_join(h, in->peer, in->u.join, rd->err, sizeof(rd->err), &rd->member);
}

static void step_heartbeat(struct rdzvd_member *m, const struct rdzv_heartbeat *hb,
                           struct rdzvd_job_ready *rd)
{
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

/* The operator's and the host's inputs, which name a job by its run id. */
static void step_host(const struct rdzvd_job_host *h, const struct rdzvd_job_input *in,
                      struct rdzvd_job_ready *rd)
{
    int r;

    switch (in->kind) {
    case RDZVD_IN_RELEASE:
        r = rdzvd_jobs_release(h->jobs, in->u.release->run_id, in->u.release->node, rd->err,
                               sizeof(rd->err));
        rd->count = r < 0 ? 0 : r;
        rd->rc = r < 0 ? r : 0;
        break;
    case RDZVD_IN_CANCEL_JOB:
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
        for (size_t i = 0; i < in->u.rebuild.n; i++)
            rdzvd_jobs_rebuild_one(h, in->u.rebuild.ids[i]);
        break;
    case RDZVD_IN_DROP_ALL:
        rdzvd_jobs_drop_all(h->jobs);
        break;
    default:
        break;
    }
}

/* A member's input: what its agent said, or that its connection closed. */
static void step_member(const struct rdzvd_job_input *in, struct rdzvd_job_ready *rd)
{
    struct rdzvd_member *m = in->member;

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
    case RDZVD_IN_READY:
        rdzvd_member_ready(m, in->u.ready->generation);
        break;
    case RDZVD_IN_CANCEL:
        rdzvd_member_cancel(m, in->u.cancel->signal, in->u.cancel->reason);
        break;
    case RDZVD_IN_UNHEALTHY:
        rdzvd_member_unhealthy(m, in->u.unhealthy->reason);
        break;
    case RDZVD_IN_GONE:
        rdzvd_member_gone(m);
        break;
    default:
        break;
    }
}

int rdzvd_job_step(const struct rdzvd_job_host *jobs, const struct rdzvd_job_input *in,
                   uint64_t now_ms, struct rdzvd_job_ready *rd)
{
    rd->now_prev_ = rdzvd_job_time_enter(now_ms);
    rd->rc = 0;
    rd->err[0] = rd->warning[0] = '\0';
    rd->member = NULL;
    rd->generation = 0;
    rd->count = 0;
    rd->ids = NULL;
    rd->n_ids = 0;
    rd->step_ = rdzvd_job_step_begin();
    switch (in->kind) {
    case RDZVD_IN_JOIN:
        step_join(jobs, in, rd);
        break;
    case RDZVD_IN_RELEASE:
    case RDZVD_IN_CANCEL_JOB:
    case RDZVD_IN_END_WAITING:
    case RDZVD_IN_REBUILD_BEGIN:
    case RDZVD_IN_REBUILD:
    case RDZVD_IN_DROP_ALL:
        step_host(jobs, in, rd);
        break;
    default:
        step_member(in, rd);
        break;
    }
    return rd->rc;
}

/* What the step queued is carried out on the world's clock: a step begun meanwhile (a connection
 * closing) has a time of its own. */
void rdzvd_job_advance(struct rdzvd_job_ready *rd)
{
    rdzvd_job_time_leave(rd->now_prev_);
    rdzvd_job_step_end(&rd->step_);
}
