/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-sm.c: the job state machine (rdzvd-job-sm.h): rounds, node ranks, spares, NCCL ids,
 * restarts, heartbeat loss, the outcome; what it sends goes to the outbox (rdzvd-job-effects.c). */
#include "daemon/job/rdzvd-job-sm.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-auth.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/job/rdzvd-job-impl.h"

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

static void job_freed(struct rdzvd_job *j)
{
    rdzvd_job_index_free(j);
    free(j->by_req);
    free(j->by_rank);
    free(j->rebuilt_nodes);
    free(j->hist);
    free(j);
}

/* Remove a job with no members left. */
void rdzvd_job_free(struct rdzvd_job *j)
{
    rdzvd_job_note(j, false, "removed (generation %" PRIu64 ")", j->generation);
    if (j->state == JOB_ENDED && !j->shutting_down && j->host.keep_ended)
        j->host.keep_ended(j->host.ended, j);
    /* A job's record lives until the job ends (rdzvd_job_end forgot it): one that formed a
     * generation waits for its nodes' agents, which may be in their reconnect backoff. One
     * that never formed has nothing running that could come back. */
    if (!j->shutting_down && !j->unloaded && j->state != JOB_ENDED &&
        (j->generation == 0 || !j->host.record_table))
        rdzvd_job_forget(j); /* without a record, its nodes' secrets in memory go */
    else if (!j->shutting_down && j->state != JOB_ENDED && j->host.keep_waiting &&
             j->host.record_table) {
        /* Waiting from now, recorded, unless no agent of it came since it left its record (a
         * rebuild nobody came back to, a JOIN refused): --abandon-after runs from then. */
        if (j->had_member)
            rdzvd_job_save_leaving(j);
        j->host.keep_waiting(j->host.ended, j->run_id,
                             j->had_member || !j->waiting_since_ms ? rdzvd_job_now_ms()
                                                                   : j->waiting_since_ms,
                             j->state == JOB_RUNNING && !j->store_addr[0] ? j->store_port : 0);
    }
    rdzv_list_del(&j->node);
    rdzvd_job_close_store(j);
    rdzvd_job_timer_close(j);
}

/* The job is over: tell every member how it ended. */
void rdzvd_job_end(struct rdzvd_job *j, const char *type, int64_t exit_code, const char *summary)
{
    double now_s = rdzvd_job_wall_s();
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

/* ---- heartbeats ---- */

static void member_lost(struct rdzvd_member *m, const char *why);

static void member_deadline(struct rdzvd_member *m, size_t unread)
{
    char why[RDZV_HOST_MAX + 128];

    /* libuv runs due timers before it polls: after a stall of rdzvd the heartbeat that keeps m
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
    m->lost_since_s = rdzvd_job_wall_s() - (double)m->job->hb_timeout_ms / 1000;
    member_lost(m, why);
}

void rdzvd_member_hb_arm(struct rdzvd_member *m, uint64_t ms)
{
    m->hb_rechecked = false;
    rdzvd_member_deadline_set(m, ms);
}

/* ---- rounds ---- */

/* The move that a generation formed or stopped was refused (-errno r): nothing of it goes out.
 * Its decision refused by the job table, the job ends, naming why, so that what its agents are
 * told and what its record holds cannot differ; -EPERM (its state allows no such move) is all. */
static void job_not_recorded(struct rdzvd_job *j, const char *what, int r)
{
    char why[256];

    if (r == -EPERM) /* a move its state does not allow: refused (logged), nothing recorded */
        return;

    snprintf(why, sizeof(why),
             "rdzvd could not record that generation %" PRIu64 " %s in its job table (%s); "
             "nothing of it was sent",
             j->generation, what, strerror(-r));
    rdzvd_job_end(j, "failed", 1, why);
}

void rdzvd_job_send_rounds(struct rdzvd_job *j)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;
    int r;

    /* Recorded first (the move's decision), then applied, then sent: a generation that its
     * record does not have is never run. */
    r = rdzvd_job_move(j, &(struct rdzvd_job_move){.kind = JOB_MOVE_FORM});
    if (r < 0) {
        job_not_recorded(j, "formed", r);
        return;
    }
    j->formed_ms = rdzvd_job_now_ms();
    rdzvd_job_note(j, false,
                   "generation %" PRIu64 " formed: %" PRId64 " nodes, world size %" PRId64
                   ", store on %s%s%s%u%s%.0u%s, restart %" PRId64 " of %" PRId64,
                   j->generation, j->round.nnodes, j->round.world_size,
                   j->store_addr[0] ? "node rank 0's agent at " : "port ", j->store_addr,
                   j->store_addr[0] ? ":" : "", j->store_port, j->round.n_ids ? ", " : "",
                   j->round.n_ids, !j->round.n_ids ? "" : j->round.n_ids == 1 ? " NCCL id"
                                                                             : " NCCL ids",
                   j->restart_count, j->max_restarts);
    for_each_member(j, m, pos, tmp)
    {
        struct rdzv_round *rd = &j->round;

        if (m->node_rank < 0 || !m->peer)
            continue;
        rd->node_rank = m->node_rank;
        rd->rank_offset = m->rank_offset;
        /* Node rank 0's agent's, or "": the op puts rdzvd's address as this agent reached it. */
        memcpy(rd->master_addr, j->store_addr, sizeof(j->store_addr));
        rd->master_port = j->store_port;
        rdzvd_member_send_round(m, rd);
        /* Workers are starting: a longer heartbeat grace until the next heartbeat. */
        rdzvd_member_hb_arm(m, (uint64_t)j->hb_timeout_ms * RDZVD_JOB_INIT_GRACE_FACTOR);
    }
    rdzvd_job_flush(j);
}

static struct rdzvd_member *rank0_member(struct rdzvd_job *j)
{
    return rdzvd_member_by_rank(j, 0);
}

/* Every change of m->ready goes through here: j->nready is kept exact (O(1) per join). */
void rdzvd_member_set_ready(struct rdzvd_member *m, bool ready)
{
    if (m->ready != ready)
        m->job->nready += ready ? 1 : -1;
    m->ready = ready;
}

static void job_fail_nodes(struct rdzvd_job *j, int64_t have)
{
    char why[RDZV_SUMMARY_MAX + 256];

    snprintf(why, sizeof(why),
             "only %" PRId64 " of the %" PRId64 " nodes the job needs (--nnodes "
             "%" PRId64 ":%" PRId64 ") were there within the join timeout (%.0f s)%s%s",
             have, j->min, j->min, j->max, (double)j->join_timeout_ms / 1000,
             j->last_cause[0] ? "; " : "", j->last_cause);
    rdzvd_job_end(j, "failed", 1, why);
}

void rdzvd_job_store_failed(struct rdzvd_job *j, int err)
{
    char why[128];

    snprintf(why, sizeof(why), "rdzvd could not open the job's store: %s", rdzvd_job_strerror(err));
    rdzvd_job_end(j, "failed", 1, why);
}

/* Close the round over the ready members: previous node ranks kept where possible, then
 * requested ranks, then join order; compacted to 0..n-1; spares beyond max wait. Opens the
 * generation's store and asks for NCCL ids. */
static void close_round(struct rdzvd_job *j)
{
    struct rdzvd_member **slots = calloc((size_t)j->max, sizeof(*slots));
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m, *m0;
    int64_t next = 0, rank = 0, offset = 0, want_ids = 0, taken = 0, promoted = 0;
    char spares[RDZV_STATUS_TEXT_MAX + 1] = "";
    int r;

    rdzvd_job_timer_stop(j);
    if (!slots || rdzvd_job_ranks_reserve(j, j->nready < j->max ? j->nready : j->max) < 0) {
        free(slots);
        rdzvd_job_end(j, "failed", 1, "rdzvd ran out of memory forming the round");
        return;
    }
    /* Previous ranks first, then asked-for ranks, then free slots in join order. */
    for (int pass = 0; pass < 3; pass++)
        for_each_member(j, m, pos, tmp)
        {
            int64_t want = pass == 0 ? m->prev_rank : pass == 1 ? m->join.node_rank : -1;

            if (!m->ready || m->placed || taken >= j->max)
                continue;
            if (pass < 2 && (want < 0 || want >= j->max || slots[want]))
                continue;
            if (pass == 2) {
                while (slots[next])
                    next++;
                want = next;
            }
            slots[want] = m;
            m->placed = true;
            taken++;
        }
    for (int64_t i = 0; i < j->max; i++) {
        if (!(m = slots[i]))
            continue;
        if (m->prev_rank < 0 && j->generation > 0) { /* a spare (or a new node) takes a place */
            size_t len = strlen(spares), add = strlen(m->join.host) + 2;

            if (len + add < sizeof(spares)) { /* the first few named */
                memcpy(spares + len, promoted ? ", " : "", promoted ? 2 : 0);
                memcpy(spares + len + (promoted ? 2 : 0), m->join.host, add - 1);
            }
            promoted++;
        }
        m->placed = false;
        rdzvd_member_set_rank(m, rank++);
        m->prev_rank = m->node_rank;
        m->rank_offset = offset;
        rdzvd_member_set_ready(m, false);
        m->left_ok = false;
        offset += m->join.nproc;
        if (m->join.nccl != RDZV_NCCL_OFF && m->join.nccl_ids > want_ids)
            want_ids = m->join.nccl_ids;
    }
    free(slots);

    if (rdzvd_job_move(j, &(struct rdzvd_job_move){.kind = JOB_MOVE_CLOSE}) < 0)
        return; /* cannot be: its callers checked FORMING (logged) */
    free(j->rebuilt_nodes);
    j->rebuilt_nodes = NULL;
    j->round.nnodes = rank; /* the move cleared the round, and gave it its generation */
    j->round.world_size = offset;
    if (j->nmembers > rank)
        rdzvd_job_note(j, false, "%" PRId64 " spare node(s) wait for a place", j->nmembers - rank);
    if (promoted > 0)
        rdzvd_job_mark(j, RDZV_MARK_SPARE, "%" PRId64 " node(s) taken in from the spares: %s",
                       promoted, spares);

    rdzvd_job_close_store(j);
    m0 = rank0_member(j);
    r = rdzvd_job_choose_store(j, m0);
    if (r < 0) {
        rdzvd_job_store_failed(j, r);
        return;
    }
    if (want_ids > 0 || r > 0) {
        j->nccl_want = want_ids, j->nccl_store = r > 0; /* asked again of a node back */
        if (!m0 || !m0->peer || rdzvd_member_send_nccl_request(m0, want_ids, r > 0) < 0) {
            rdzvd_job_end(j, "failed", 1, "could not ask node rank 0 for the NCCL id");
            return;
        }
        rdzvd_job_timer_start(j, T_NCCL, RDZVD_JOB_NCCL_ID_TIMEOUT_MS);
        rdzvd_job_flush(j);
        return;
    }
    rdzvd_job_send_rounds(j);
}

/* In FORMING: close the round if it is time, else make sure the right timer runs. After a
 * restart (generation > 0) the round closes as soon as every member is ready and there are
 * enough of them; the first round waits for max, or last call after min. */
void rdzvd_job_try_close(struct rdzvd_job *j)
{
    int64_t ready = j->nready;
    uint64_t wait;

    if (j->state != JOB_FORMING)
        return;
    if ((wait = rdzvd_job_backoff_left(j)) > 0) { /* a restart's backoff: then the round */
        if (!j->timer_armed || j->timer_kind != T_BACKOFF)
            rdzvd_job_timer_start(j, T_BACKOFF, wait);
        return;
    }
    if (ready >= j->max || (j->generation > 0 && ready == j->nmembers && ready >= j->min)) {
        close_round(j);
        return;
    }
    if (ready >= j->min) {
        if (!j->timer_armed || j->timer_kind != T_LAST_CALL)
            rdzvd_job_timer_start(j, T_LAST_CALL, (uint64_t)j->last_call_ms);
        return;
    }
    /* Below min: the join timeout runs (from when the job was created or fell below min). */
    if ((!j->timer_armed || j->timer_kind != T_JOIN) && j->join_timeout_ms > 0)
        rdzvd_job_timer_start(j, T_JOIN, (uint64_t)j->join_timeout_ms);
    else if (j->timer_armed && j->timer_kind != T_JOIN)
        rdzvd_job_timer_stop(j);
}

void rdzvd_member_dismiss(struct rdzvd_member *m)
{
    struct rdzvd_job *j = m->job;
    const struct rdzvd_job_record_hist *h = rdzvd_job_hist_find(j, m->join.node_id);
    struct rdzv_event e = {
        .type = "put_aside", .generation = j->generation, .exit_code = RDZV_EXIT_PUT_ASIDE};
    void *peer = m->peer;

    snprintf(e.summary, sizeof(e.summary), "node %s (node id %s) is put aside by job %s: %s",
             m->join.host, m->join.node_id, j->run_id, h ? h->reason : "?");
    rdzvd_job_note(j, true, "node=%s put aside (node id %s): %s", m->join.host, m->join.node_id,
                   h ? h->reason : "?");
    rdzvd_job_mark(j, RDZV_MARK_PUT_ASIDE, "node %s put aside: %s", m->join.host,
                   h ? h->reason : "?");
    j->aside_cause = true;
    rdzvd_member_remove(m);
    if (peer)
        rdzvd_job_peer_dismiss(j, peer, &e);
}

void rdzvd_member_send_outcome(struct rdzvd_member *m)
{
    struct rdzv_event own = m->job->outcome;

    if (own.exit_code == 0 && !rdzvd_member_held_place(m)) /* it ran nothing: no success */
        snprintf(own.summary, sizeof(own.summary),
                 "this node ran nothing: it waited as a spare, and job %s succeeded on its other "
                 "nodes", m->job->run_id);
    rdzvd_member_send_event(m, &own);
}

bool rdzvd_job_dismiss_pending(struct rdzvd_job *j)
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
        rdzvd_member_dismiss(m);
        if (last)
            return true;
    }
    return false;
}

/* Every member of the stopped generation is ready: form the next one. */
void rdzvd_job_check_stopped(struct rdzvd_job *j)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;

    if (j->state != JOB_STOPPING)
        return;
    /* A member away without a place (a spare whose connection closed after rdzvd stalled) has
     * no worker to stop: waiting for it would let its return decide when the job moves. */
    if (j->nready + j->naway < j->nmembers)
        return;
    if (rdzvd_job_dismiss_pending(j))
        return; /* the job went with its last member */
    rdzvd_job_close_store(j);
    for_each_member(j, m, pos, tmp) rdzvd_member_unrank(m);
    if (rdzvd_job_move(j, &(struct rdzvd_job_move){.kind = JOB_MOVE_STOPPED}) < 0)
        return; /* cannot be: STOPPING was checked (logged) */
    rdzvd_job_timer_stop(j);
    if (j->cancelled) {
        rdzvd_job_end(j, "cancelled", j->cancelled, j->cancel_why);
        return;
    }
    rdzvd_job_try_close(j);
}

/* j was cancelled while it stops (the operator, or an agent's signal that leaves too few): it
 * ends now, not once its members stopped, so that its end is recorded before anyone hears of
 * it (an rdzvd restart in between rebuilt it from a record that never heard the cancel, and it
 * formed again). Its members stop their workers on the outcome as they did for the restart;
 * their READYs find it ended. */
void rdzvd_job_stop_now(struct rdzvd_job *j)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;

    for_each_member(j, m, pos, tmp) if (!m->away) rdzvd_member_set_ready(m, true);
    rdzvd_job_check_stopped(j);
}

/* Stop the current generation everywhere and form a new one. uncounted: NULL for a failure (uses
 * the restart budget), else why it is not one ("scale-up"). exit_code/summary: the root cause. */
void rdzvd_job_restart(struct rdzvd_job *j, enum rdzv_mark_kind kind, const char *uncounted,
                       int64_t exit_code, const char *summary)
{
    bool counted = !uncounted, aside = j->aside_cause, slow = j->straggler_cause;
    double cause_s = j->cause_s;
    struct rdzv_event e = {.type = "restart", .startup_grace_ms = j->startup_grace_ms};
    char delay[96];
    uint64_t backoff;
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;
    int r;

    j->aside_cause = j->straggler_cause = false;
    j->cause_s = 0;
    j->startup_grace_ms = 0;
    if (j->state != JOB_RUNNING) /* ended, already stopping, or no worker started yet */
        return;
    if (counted && j->restart_count >= j->max_restarts) {
        char why[RDZV_SUMMARY_MAX + 1];

        snprintf(why, sizeof(why),
                 "%s; restart budget exhausted (%" PRId64 " of %" PRId64 " restarts used)", summary,
                 j->restart_count, j->max_restarts);
        rdzvd_timeline_failed(&j->timeline, rdzvd_job_wall_s(), cause_s);
        rdzvd_job_end(j, "failed", exit_code ? exit_code : 1, why);
        return;
    }
    /* Recorded first (the restart charged: the move's decision), then applied, then sent. */
    r = rdzvd_job_move(j, &(struct rdzvd_job_move){.kind = JOB_MOVE_STOP, .counted = counted});
    if (r < 0) {
        job_not_recorded(j, "stopped", r);
        return;
    }
    snprintf(j->last_cause, sizeof(j->last_cause), "%s", summary);
    j->stopping_grace_ms = e.startup_grace_ms;
    rdzvd_job_timer_stop(j);
    backoff = rdzvd_job_backoff_start(j, counted);
    e.generation = j->generation;
    e.exit_code = exit_code;
    snprintf(e.summary, sizeof(e.summary), "%s", summary);
    snprintf(delay, sizeof(delay), "; the next generation forms in %.0f s (restart backoff)",
             (double)backoff / 1000);
    rdzvd_job_note(
        j, true, "%s generation %" PRIu64 " (restart %" PRId64 " of %" PRId64 "%s%s): %s%s",
        j->inplace ? "re-forming in place" : "restarting", j->generation, j->restart_count,
        j->max_restarts, counted ? "" : ", not counted: ", counted ? "" : uncounted, summary,
        backoff ? delay : "");
    rdzvd_timeline_mark(&j->timeline, rdzvd_job_wall_s(), j->generation, kind, summary);
    rdzvd_timeline_recovery_start(&j->timeline, rdzvd_job_wall_s(), j->generation,
                                  slow    ? RDZV_MARK_STRAGGLER
                                  : aside ? RDZV_MARK_PUT_ASIDE
                                          : kind,
                                  j->inplace, cause_s);
    for_each_member(j, m, pos, tmp)
    {
        if (m->node_rank < 0)
            continue;
        m->stopping_gen = j->generation;
        rdzvd_member_send_event(m, &e);
    }
    rdzvd_job_flush(j);
    rdzvd_job_check_stopped(j);
}

/* Append to why the nodes of a rebuilt generation that did not come back, as its record names
 * them ("node rank 2 (node id n2)", the first few), when it does. */
static void rebuild_missing_names(const struct rdzvd_job *j, char *why, size_t len)
{
    enum { NAMED_MAX = 4 };
    int named = 0;

    if (!j->rebuilt_nodes)
        return;
    for (int64_t i = 0; i < j->round.nnodes && i < j->rank_cap; i++) {
        size_t used = strlen(why);

        if (j->by_rank[i])
            continue;
        if (named == NAMED_MAX) {
            snprintf(why + used, len - used, ", ...");
            break;
        }
        snprintf(why + used, len - used, "%s node rank %" PRId64 " (node id %s)",
                 named ? "," : ":", i, j->rebuilt_nodes[i].node_id);
        named++;
    }
}

static void job_timer_fired(struct rdzvd_job *j)
{
    j->timer_armed = false;
    if (j->state == JOB_FORMING && (j->timer_kind == T_LAST_CALL || j->timer_kind == T_JOIN)) {
        int64_t ready = j->nready;

        if (ready >= j->min) {
            rdzvd_job_note(j, false,
                           "last call over with %" PRId64 " of %" PRId64 "..%" PRId64 " nodes",
                           ready, j->min, j->max);
            close_round(j);
        } else {
            job_fail_nodes(j, ready);
        }
    } else if (j->state == JOB_FORMING && j->timer_kind == T_BACKOFF) {
        rdzvd_job_try_close(j);
    } else if (j->state == JOB_NCCL && j->timer_kind == T_NCCL) {
        struct rdzvd_member *m0 = rank0_member(j);
        char why[RDZV_HOST_MAX + 128];

        snprintf(why, sizeof(why), "node rank 0 (%s) sent no NCCL id within %d s",
                 m0 ? m0->join.host : "?", RDZVD_JOB_NCCL_ID_TIMEOUT_MS / 1000);
        rdzvd_job_end(j, "failed", 1, why);
    } else if (j->state == JOB_RUNNING && j->timer_kind == T_REBUILD && j->nmembers == 0) {
        /* Rebuilt at rdzvd's start or election and no agent came: back to its record. */
        rdzvd_job_note(j, false, "no agent of generation %" PRIu64 " came back: its record "
                       "waits for them", j->generation);
        j->unloaded = true;
        rdzvd_job_free(j);
    } else if (j->state == JOB_RUNNING && j->timer_kind == T_REBUILD &&
               j->nin_round < j->round.nnodes) {
        char why[RDZV_SUMMARY_MAX + 1];

        snprintf(why, sizeof(why),
                 "root cause: %" PRId64 " of %" PRId64 " nodes of generation %" PRIu64
                 " did not come back after rdzvd restarted (or its leader changed)",
                 j->round.nnodes - j->nin_round, j->round.nnodes, j->generation);
        rebuild_missing_names(j, why, sizeof(why));
        /* Nobody of a generation rebuilt from its record came back: its agents went with the
         * old rdzvd, and these are a new launch under the same run_id. Not a failure of the
         * job's nodes: numbering goes on, the budget is not charged. */
        rdzvd_job_restart(j, RDZV_MARK_NODE_LOST,
                          j->nin_round == 0 ? "no node of it came back" : NULL, 1, why);
        if (j->host.lost)
            j->host.lost(j->host.lost_ud); /* their hosts may have held replicas */
    }
}

/* close_round's NCCL_REQUEST not queued on peer: as if not asked, if still due (the outbox's). */
static void nccl_unsent(struct rdzvd_member *m, uint64_t gen, void *peer)
{
    if (m->job->state == JOB_NCCL && gen == m->job->generation && !m->node_rank && m->peer == peer)
        rdzvd_job_end(m->job, "failed", 1, "could not ask node rank 0 for the NCCL id");
}

static const struct rdzvd_job_handlers job_handlers = {
    .fired = job_timer_fired,
    .deadline = member_deadline,
    .freed = job_freed,
    .nccl_unsent = nccl_unsent,
};

struct rdzvd_job *rdzvd_job_new(const struct rdzvd_job_host *h, const struct rdzv_join *jn,
                               const struct rdzvd_job_settings *st)
{
    struct rdzvd_job *j = calloc(1, sizeof(*j));
    int r;

    if (!j)
        return NULL;
    if (rdzvd_job_index_init(j) < 0)
        goto out_free;
    rdzvd_timeline_init(&j->timeline, rdzvd_job_wall_s());
    r = rdzvd_job_timer_init(j, h->loop);
    if (r < 0) {
        log_error_errno(r, "job=%s: cannot create its timer", jn->run_id);
        goto out_free;
    }
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
    j->created_ms = rdzvd_job_now_ms();
    if (h->take_waiting && h->ended)
        j->waiting_since_ms = h->take_waiting(h->ended, jn->run_id);
    rdzv_list_init(&j->members);
    j->handlers = &job_handlers;
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
    free(j->rebuilt_nodes);
    free(j);
    return NULL;
}

static void member_freed(struct rdzvd_member *m)
{
    rdzvd_member_progress_free(m);
    free(m);
}

/* Unlink m (and free the job with its last member). The caller deals with the consequences. */
void rdzvd_member_remove(struct rdzvd_member *m)
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

/* m, its job's last member, goes (why, for people; dismissed: put aside). A job cancelled while
 * it stopped ends now, not freed as if it might go on. Without a record that waits for its
 * nodes (no --state-dir, no replicas), a job that formed a generation ends "failed" with its last
 * node, which is told so; its end is kept as any, told to a late agent of it, which this rdzvd
 * never rebuilds the job from: only another rdzvd (one restarted, a new leader) may. */
static void end_with_last(struct rdzvd_member *m, const char *why, bool dismissed)
{
    struct rdzvd_job *j = m->job;
    char what[RDZV_SUMMARY_MAX + 1], rank[32] = "a spare";

    if (j->state == JOB_ENDED || j->shutting_down || (j->cancelled && j->state != JOB_STOPPING) ||
        (!j->cancelled && (dismissed || !j->generation || j->host.record_table)))
        return;
    m->aside_pending = false;        /* it goes anyway: not dismissed first */
    rdzvd_member_set_ready(m, true); /* nothing of it runs any more */
    if (j->cancelled) {
        rdzvd_job_check_stopped(j);
        return;
    }
    if (m->node_rank >= 0)
        snprintf(rank, sizeof(rank), "node rank %" PRId64, m->node_rank);
    snprintf(what, sizeof(what),
             "root cause: the agent of %s (%s) %s; it was the job's last node, and without "
             "--state-dir rdzvd keeps no job whose nodes are all gone",
             rank, m->join.host, why);
    if (j->state == JOB_STOPPING) {
        rdzvd_job_close_store(j);
        if (rdzvd_job_move(j, &(struct rdzvd_job_move){.kind = JOB_MOVE_STOPPED}) < 0)
            return; /* cannot be: STOPPING was checked (logged) */
        rdzvd_job_timer_stop(j);
    }
    rdzvd_job_end(j, "failed", 1, what);
}

/* m is gone (its connection closed, or it fell silent; or, with dismiss, it is put aside and
 * its agent told so by dismiss): drop it, and move the job on. */
void rdzvd_member_drop(struct rdzvd_member *m, const char *why, const struct rdzv_event *dismiss)
{
    struct rdzvd_job *j = m->job;
    void *peer = m->peer;
    enum job_state st = j->state;
    bool in_round = m->node_rank >= 0, left = m->left_ok, last = j->nmembers == 1, unran;
    bool signalled = m->signalled; /* it left on a signal from outside: nothing is charged */
    void (*lost)(void *) = j->host.lost, *lost_ud = j->host.lost_ud;
    int64_t rank = m->node_rank;
    double lost_since_s = m->lost_since_s;
    char cause[RDZV_SUMMARY_MAX + 1];

    snprintf(cause, sizeof(cause), "root cause: the agent of node rank %" PRId64 " (%s) %s", rank,
             m->join.host, why);
    if (in_round && (st == JOB_RUNNING || st == JOB_NCCL) && !left)
        rdzvd_job_note(j, true, "%s", cause + 12);
    else
        rdzvd_job_note(j, false, "node=%s left (node id %s): %s", m->join.host, m->join.node_id,
                       why);
    unran = rdzvd_member_lost_unran(m); /* charged to its host: never the job's failure */
    /* With its last member gone, the job may end now, not go as if it might go on. */
    if (last) {
        end_with_last(m, why, dismiss != NULL);
        st = j->state;
    }
    rdzvd_member_forget(m);
    rdzvd_member_remove(m);
    if (peer && dismiss)
        rdzvd_job_peer_dismiss(j, peer, dismiss);
    else if (peer)
        rdzvd_job_peer_close(j, peer, why); /* its member is detached: no second report */
    if (lost && !left && st != JOB_ENDED)
        lost(lost_ud); /* a failure, not a member that was done */
    if (last)
        return; /* the job went with its last member */
    switch (st) {
    case JOB_RUNNING:
        if (in_round && !left)
            j->cause_s = lost_since_s; /* its silence began then (a connection lost: now) */
        if (in_round && !left)
            rdzvd_job_restart(j, RDZV_MARK_NODE_LOST,
                              signalled            ? "a node left on a signal from outside"
                              : j->straggler_cause ? "a straggler put aside"
                                                   : unran ? "a node lost before it ran" : NULL,
                              1, cause);
        else if (in_round)
            rdzvd_job_check_all_left(j); /* its workers were done: the others may finish too */
        break;
    case JOB_NCCL:
        if (in_round) {
            /* No worker started yet: form the round again, nothing to stop. */
            struct rdzv_list *pos, *tmp;
            struct rdzvd_member *o;

            rdzvd_job_timer_stop(j);
            rdzvd_job_close_store(j);
            for_each_member(j, o, pos, tmp)
            {
                rdzvd_member_unrank(o);
                rdzvd_member_set_ready(o, true);
            }
            snprintf(j->last_cause, sizeof(j->last_cause), "%s", cause);
            if (rdzvd_job_move(j, &(struct rdzvd_job_move){.kind = JOB_MOVE_UNDO}) == 0)
                rdzvd_job_try_close(j);
        }
        break;
    case JOB_STOPPING:
        rdzvd_job_check_stopped(j);
        break;
    case JOB_FORMING:
        rdzvd_job_try_close(j);
        break;
    default:
        break;
    }
}

static void member_lost(struct rdzvd_member *m, const char *why)
{
    rdzvd_member_drop(m, why, NULL);
}

struct rdzvd_member *rdzvd_member_add(struct rdzvd_job *j, void *peer, const struct rdzv_join *jn,
                                      const char *secret)
{
    struct rdzvd_member *m = calloc(1, sizeof(*m));
    int r;

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
    m->joined_ms = m->last_seen_ms = rdzvd_job_now_ms();
    r = rdzvd_member_timer_init(m, j->host.loop);
    if (r < 0) {
        log_error_errno(r, "job=%s: cannot create a heartbeat timer", j->run_id);
        free(m);
        return NULL;
    }
    if (rdzvd_member_index(m) < 0) {
        /* The handle is initialised: it must be closed before its memory goes. */
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

/* The job succeeded when every node of the running generation has sent LEAVE succeeded. */
void rdzvd_job_check_all_left(struct rdzvd_job *j)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *o;

    if (j->state != JOB_RUNNING || (j->rebuilt && j->nin_round < j->round.nnodes))
        return;
    for_each_member(j, o, pos, tmp) if (o->node_rank >= 0 && !o->left_ok) return;
    rdzvd_job_end(j, "succeeded", 0, "every worker of every node exited 0");
}

void rdzvd_member_gone(struct rdzvd_member *m)
{
    RDZVD_JOB_STEP;
    struct rdzvd_job *j = m->job;

    m->peer = NULL;
    if (j->state == JOB_ENDED || !rdzvd_member_stalled(m)) {
        member_lost(m, "disconnected");
        return;
    }
    /* rdzvd was stalled: its agent found it silent and is most likely reconnecting (a resume,
     * or a spare's JOIN), maybe on a connection already waiting to be read. Keep the member
     * (not placed meanwhile) until then, or lost at its heartbeat deadline. */
    if (m->node_rank < 0 && m->ready) {
        rdzvd_member_set_ready(m, false);
        m->away = true;
        j->naway++;
    }
    rdzvd_member_hb_arm(m, (uint64_t)j->hb_timeout_ms);
    rdzvd_job_note(
        j, false,
        "node=%s disconnected right after rdzvd stalled: waiting %.1f s for its agent to "
        "reconnect",
        m->join.host, (double)j->hb_timeout_ms / 1000);
    if (j->state == JOB_FORMING)
        rdzvd_job_try_close(j);
}

void rdzvd_jobs_drop_all(struct rdzv_list *jobs)
{
    RDZVD_JOB_STEP;
    while (!rdzv_list_empty(jobs)) {
        struct rdzvd_job *j = rdzv_container_of(jobs->next, struct rdzvd_job, node);
        bool last = false;

        j->shutting_down = true;
        if (j->nmembers == 0) { /* rebuilt at start or election, nobody back yet */
            rdzvd_job_free(j);
            continue;
        }
        /* rdzvd_member_remove() frees the job together with its last member. */
        while (!last) {
            struct rdzvd_member *m = rdzv_container_of(j->members.next, struct rdzvd_member, node);

            last = j->nmembers == 1;
            rdzvd_member_remove(m);
        }
    }
}
