/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-members.c: a job and its members in memory: a job made (from a JOIN, or rebuilt
 * from its record) and found by its run id; a member added, and removed; a job with no members
 * left freed. */
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

struct rdzvd_job *rdzvd_job_find(struct rdzv_list *jobs, const char *run_id)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, jobs)
    {
        struct rdzvd_job *j = rdzv_container_of(pos, struct rdzvd_job, node);

        if (strcmp(j->run_id, run_id) == 0)
            return j;
    }
    return NULL;
}

const struct rdzvd_job *rdzvd_job_view(struct rdzv_list *jobs, const char *run_id)
{
    return rdzvd_job_find(jobs, run_id);
}

struct rdzvd_job *rdzvd_job_new(const struct rdzvd_job_host *h, const struct rdzv_join *jn,
                               const struct rdzvd_job_settings *st,
                               const struct rdzvd_job_handlers *handlers)
{
    struct rdzvd_job *j = calloc(1, sizeof(*j));

    if (!j)
        return NULL;
    if (rdzvd_job_index_init(j) < 0)
        goto out_free;
    rdzvd_timeline_init(&j->timeline, rdzvd_job_wall_s(h));
    rdzvd_job_timer_init(j);
    j->host = *h;
    memcpy(j->run_id, jn->run_id, sizeof(j->run_id));
    j->min = jn->min;
    j->max = jn->max;
    j->max_restarts = jn->max_restarts;
    if (st) {
        rdzvd_job_settings_set(j, st);
    } else {
        struct rdzvd_job_settings own;

        rdzvd_job_settings_of_join(jn, &own);
        rdzvd_job_settings_set(j, &own);
    }
    j->median_compute_ms = -1;
    j->created_ms = rdzvd_job_now_ms(h);
    if (h->take_waiting && h->ended) { /* the note its input carries goes to the job */
        j->waiting_since_ms = rdzvd_job_input_waiting(h, jn->run_id);
        rdzvd_job_tell_taken(h, jn->run_id);
    }
    rdzv_list_init(&j->members);
    j->handlers = handlers;
    rdzv_list_add_tail(h->jobs, &j->node);
    rdzvd_job_note(j, false,
                   "created (nodes %" PRId64 "..%" PRId64 ", last call %" PRId64
                   " ms, max restarts %" PRId64 ", heartbeat timeout %" PRId64 " ms, recovery %s)",
                   j->min, j->max, j->last_call_ms, j->max_restarts, j->hb_timeout_ms,
                   j->inplace ? "inplace" : "restart");
    return j;

out_free:
    rdzvd_job_index_free(j);
    free(j->by_req);
    free(j->by_rank);
    free(j->rank_done);
    free(j->rebuilt_nodes);
    free(j->stopped_wait);
    free(j);
    return NULL;
}

void rdzvd_job_freed(struct rdzvd_job *j)
{
    rdzvd_job_pf_free(j);
    rdzvd_job_index_free(j);
    free(j->by_req);
    free(j->by_rank);
    free(j->rank_done);
    free(j->rebuilt_nodes);
    free(j->stopped_wait);
    free(j->hist);
    free(j);
}

/* Remove a job with no members left. */
void rdzvd_job_free(struct rdzvd_job *j)
{
    rdzvd_job_note(j, false, "removed (generation %" PRIu64 ")", j->generation);
    if (j->state == JOB_ENDED && !j->shutting_down)
        rdzvd_job_tell_ended(j);
    /* A job's record lives until the job ends (rdzvd_job_end forgot it): one that formed a
     * generation waits for its nodes' agents, which may be in their reconnect backoff. One
     * that never formed has nothing running that could come back. */
    if (!j->shutting_down && !j->unloaded && j->state != JOB_ENDED &&
        (j->generation == 0 || !j->host.record_table))
        rdzvd_job_decide_ended(j); /* without a record, its nodes' secrets in memory go */
    else if (!j->shutting_down && j->state != JOB_ENDED && j->host.keep_waiting &&
             j->host.record_table) {
        /* Waiting from now, recorded, unless no agent of it came since it left its record (a
         * rebuild nobody came back to, a JOIN refused): --abandon-after runs from then. */
        if (j->had_member)
            rdzvd_job_save_leaving(j);
        uint64_t now = rdzvd_job_now_ms(&j->host);
        uint64_t since = j->had_member || !j->waiting_since_ms ? now : j->waiting_since_ms;

        since = rdzvd_jobs_waiting_since(&j->host, j->run_id, since, now,
                                         (int64_t)(rdzvd_job_wall_s(&j->host) * 1000));
        rdzvd_job_tell_waiting(&j->host, j->run_id, since,
                               j->state == JOB_RUNNING && !j->store_addr[0] ? j->store_port : 0);
    }
    rdzv_list_del(&j->node);
    rdzvd_job_close_store(j);
    rdzvd_job_timer_close(j);
}

static void member_freed(struct rdzvd_member *m)
{
    rdzvd_member_progress_free(m);
    free(m);
}

struct rdzvd_member *rdzvd_member_add(struct rdzvd_job *j, void *peer, const struct rdzv_join *jn,
                                      const char *secret)
{
    struct rdzvd_member *m = calloc(1, sizeof(*m));

    if (!m)
        return NULL;
    if (jn->node_rank >= 0 && jn->node_rank < j->max &&
        rdzvd_job_ranks_reserve(j, jn->node_rank + 1) < 0) {
        free(m);
        return NULL;
    }
    m->job = j;
    m->peer = peer;
    m->join = *jn;
    snprintf(m->secret, sizeof(m->secret), "%s", secret);
    m->node_rank = -1;
    m->prev_rank = -1;
    m->joined_ms = m->last_seen_ms = rdzvd_job_now_ms(&j->host);
    m->joined_late = j->formed_ms || j->rebuilt; /* a generation formed here without it (P7d) */
    rdzvd_member_timer_init(m);
    if (rdzvd_member_index(m) < 0) {
        rdzvd_member_timer_close(m, member_freed);
        return NULL;
    }
    m->ready = true;
    j->nready++;
    rdzvd_member_hb_arm(m, (uint64_t)j->hb_timeout_ms);
    rdzv_list_add_tail(&j->members, &m->node);
    j->nmembers++;
    if (!j->had_member)
        rdzvd_job_save_back(j);
    j->had_member = true;
    if (jn->node_rank >= 0 && jn->node_rank < j->max && !rdzvd_member_by_req(j, jn->node_rank))
        j->by_req[jn->node_rank] = m;
    rdzvd_job_peer_bind(j, peer, m);
    return m;
}

/* Unlink m (and free the job with its last member). The caller deals with the consequences. */
void rdzvd_member_unlink(struct rdzvd_member *m)
{
    struct rdzvd_job *j = m->job;

    rdzvd_member_unindex(m);
    rdzv_list_del(&m->node);
    j->nmembers--;
    j->nready -= m->ready;
    j->naway -= m->away;
    rdzvd_member_unrank(m);
    if (rdzvd_member_by_req(j, m->join.node_rank) == m)
        j->by_req[m->join.node_rank] = NULL;
    if (m->peer)
        rdzvd_job_peer_bind(j, m->peer, NULL);
    rdzvd_member_timer_close(m, member_freed);
    if (j->nmembers == 0)
        rdzvd_job_free(j);
}
