/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-nccl.c: node rank 0's answer to NCCL_REQUEST: the generation's NCCL ids, or why
 * there are none, and (replicas) where its agent opened the generation's store; then the
 * generation's ROUNDs go out. Part of the job state machine (rdzvd-job-impl.h), above
 * rdzvd-job-sm.c: it calls down, nothing calls it but the wire side. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/rdzv-log.h"
#include "daemon/job/rdzvd-job-impl.h"

/* After node rank 0's answer: 0, or -1 once the job ended (no store at all). */
static int store_ready(struct rdzvd_job *j)
{
    int r = rdzvd_job_store_fallback(j);

    if (r > 0)
        rdzvd_job_note(j, true,
                       "node rank 0 named no store for generation %" PRIu64 "; rdzvd hosts it",
                       j->generation);
    else if (r < 0)
        rdzvd_job_store_failed(j, r);
    return r < 0 ? -1 : 0;
}

void rdzvd_member_store_offer(struct rdzvd_member *m, const char *addr, int64_t port)
{
    RDZVD_JOB_STEP;
    struct rdzvd_job *j = m->job;

    /* Only when asked: node rank 0 of a generation whose store rdzvd did not open. */
    if (port <= 0 || port > 65535 || j->store || !j->host.agent_stores || m->node_rank != 0)
        return;
    snprintf(j->store_addr, sizeof(j->store_addr), "%s", addr);
    j->store_port = (uint16_t)port;
}

bool rdzvd_member_nccl_wanted(const struct rdzvd_member *m, uint64_t gen)
{
    const struct rdzvd_job *j = m->job;

    if (j->state != JOB_NCCL || gen != j->generation || m->node_rank != 0) {
        log_debug("job %s: stale NCCL_ID for generation %" PRIu64 " ignored", j->run_id, gen);
        return false;
    }
    return true;
}

void rdzvd_member_nccl_ids(struct rdzvd_member *m, char ids[][RDZV_NCCL_HEX_LEN + 1], unsigned n)
{
    RDZVD_JOB_STEP;
    struct rdzvd_job *j = m->job;

    for (unsigned i = 0; i < n; i++)
        memcpy(j->round.ids[i], ids[i], RDZV_NCCL_HEX_LEN + 1);
    j->round.n_ids = n;
    rdzvd_job_timer_stop(j);
    if (store_ready(j) == 0)
        rdzvd_job_send_rounds(j);
}

void rdzvd_member_nccl_error(struct rdzvd_member *m, const char *error)
{
    RDZVD_JOB_STEP;
    struct rdzvd_job *j = m->job;
    char err[RDZV_HOST_MAX + 512];
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *o;
    bool required = false;

    for_each_member(j, o, pos, tmp) if (o->node_rank >= 0 && o->join.nccl == RDZV_NCCL_REQUIRED)
        required = true;
    if (required) {
        snprintf(err, sizeof(err),
                 "this job needs NCCL, but node rank 0 (%s) cannot make an NCCL id: %s",
                 m->join.host, error);
        rdzvd_job_end(j, "failed", 1, err);
        return;
    }
    rdzvd_job_note(j, false, "no NCCL id (%s); workers get no RDZV_NCCL_UNIQUE_ID", error);
    rdzvd_job_timer_stop(j);
    if (store_ready(j) == 0)
        rdzvd_job_send_rounds(j);
}
