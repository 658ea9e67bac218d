/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-sm.c: the job as it moves (rdzvd-job-impl.h): rounds, node ranks, spares, restarts
 * and their backoff, heartbeat loss, a stalled rdzvd, the outcome; each rank's progress; the
 * failure history that charges each failure to its node (and puts a node aside); and the one
 * function that changes a job's state. What it sends goes to the outbox
 * (rdzvd-job-effects.c). Part of the job state machine: no libuv, no clock, no host op. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/job/rdzvd-job-sm.h"
#include "common/rdzv-auth.h"
#include "common/rdzv-assert.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "proto/rdzv-status.h"
#include "daemon/data/rdzvd-config.h"

static bool member_never_ran(const struct rdzvd_member *m);
static bool member_seen_running(const struct rdzvd_member *m);
static bool free_bench(struct rdzvd_job *j, int64_t *ready, int64_t *members);
static void free_say(struct rdzvd_job *j, const char *what);
static void free_keep(struct rdzvd_job *j);
static unsigned free_in_window(struct rdzvd_job *j, int64_t now);

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

void rdzvd_job_freed(struct rdzvd_job *j)
{
    rdzvd_job_pf_free(j);
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
                             j->had_member || !j->waiting_since_ms ? rdzvd_job_now_ms(&j->host)
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

/* ---- heartbeats ---- */

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

void rdzvd_jobs_unrecorded(struct rdzv_list *jobs, const char *run_id, const char *decision,
                           int err)
{
    struct rdzvd_job *j = rdzvd_job_find(jobs, run_id);
    char why[256];

    if (!j || j->state == JOB_ENDED)
        return;
    /* A restart not recorded: it never began (its agents heard nothing of it). */
    if (j->state == JOB_STOPPING)
        (void)rdzvd_job_move(j, &(struct rdzvd_job_move){.kind = JOB_MOVE_STOPPED});
    if (strcmp(decision, "formed") == 0 || strcmp(decision, "stopped") == 0) {
        job_not_recorded(j, decision, err);
        return;
    }
    snprintf(why, sizeof(why),
             "rdzvd could not record its decision '%s' in its job table (%s); nothing decided "
             "after it was sent",
             decision, strerror(-err));
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
    j->formed_ms = rdzvd_job_now_ms(&j->host);
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

/* Close the round over the ready members (bench: but those that never ran in the job):
 * previous node ranks kept where possible, then requested ranks, then join order; compacted to
 * 0..n-1; spares beyond max wait. Asks for the generation's store and NCCL ids. */
static void close_round(struct rdzvd_job *j, bool bench)
{
    struct rdzvd_member **slots;
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m, *m0;
    int64_t next = 0, rank = 0, offset = 0, want_ids = 0, taken = 0, promoted = 0;
    char spares[RDZV_STATUS_TEXT_MAX + 1] = "";
    bool spent;
    int r;

    if (rdzvd_job_pf_hold(j))
        return; /* the network pre-flight first: it closes the round once done */
    slots = calloc((size_t)j->max, sizeof(*slots));
    rdzvd_job_timer_stop(j);
    j->scaling_up = false;
    spent = j->generation > 0 && rdzvd_job_free_spent(j);
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

            if (!m->ready || m->placed || taken >= j->max || (bench && member_never_ran(m)))
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
        m->placed_spent = spent && member_never_ran(m); /* MIN needed it (P8d) */
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
    j->nccl_want = want_ids;
    r = rdzvd_job_choose_store(j, m0, want_ids > 0 ? STORE_THEN_NCCL : STORE_THEN_ROUNDS);
    if (r < 0)
        rdzvd_job_store_failed(j, r);
    else if (r > 0)
        rdzvd_job_ask_rank0(j, want_ids, true);
    /* else rdzvd's own store opens: its answer goes on (rdzvd_job_store_opened) */
}

void rdzvd_job_ask_rank0(struct rdzvd_job *j, int64_t want, bool store)
{
    struct rdzvd_member *m0 = rank0_member(j);

    j->nccl_want = want, j->nccl_store = store; /* asked again of a node back */
    if (!m0 || !m0->peer || rdzvd_member_send_nccl_request(m0, want, store) < 0) {
        rdzvd_job_end(j, "failed", 1, "could not ask node rank 0 for the NCCL id");
        return;
    }
    rdzvd_job_timer_start(j, T_NCCL, RDZVD_JOB_NCCL_ID_TIMEOUT_MS);
    rdzvd_job_flush(j);
}

/* In FORMING: close the round if it is time, else make sure the right timer runs. After a
 * restart (generation > 0) the round closes as soon as every member is ready and there are
 * enough of them; the first round waits for max, or last call after min. */
void rdzvd_job_try_close(struct rdzvd_job *j)
{
    int64_t ready = j->nready, members = j->nmembers;
    bool bench;
    uint64_t wait;

    if (j->state != JOB_FORMING || rdzvd_job_pf_busy(j))
        return; /* the network pre-flight closes the round once done */
    if ((wait = rdzvd_job_backoff_left(j)) > 0) { /* a restart's backoff: then the round */
        if (!j->timer_armed || j->timer_kind != T_BACKOFF)
            rdzvd_job_timer_start(j, T_BACKOFF, wait);
        return;
    }
    /* The bound on restarts not counted spent: nodes that never ran wait as spares. */
    bench = free_bench(j, &ready, &members);
    if (bench)
        free_say(j, "forming without the nodes that never ran in the job");
    if (ready >= j->max || (j->generation > 0 && ready == members && ready >= j->min)) {
        close_round(j, bench);
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

void rdzvd_job_close_checked(struct rdzvd_job *j)
{
    int64_t ready = j->nready, members;
    bool bench = free_bench(j, &ready, &members);

    if (ready >= j->min)
        close_round(j, bench);
    else
        rdzvd_job_try_close(j);
}

void rdzvd_member_dismiss(struct rdzvd_member *m)
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
    if (!counted)
        free_keep(j); /* recorded with the decision (STOPPED) */
    if (counted && j->restart_count >= j->max_restarts) {
        char why[RDZV_SUMMARY_MAX + 1];

        snprintf(why, sizeof(why),
                 "%s; restart budget exhausted (%" PRId64 " of %" PRId64 " restarts used)", summary,
                 j->restart_count, j->max_restarts);
        rdzvd_timeline_failed(&j->timeline, rdzvd_job_wall_s(&j->host), cause_s);
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
    rdzvd_timeline_mark(&j->timeline, rdzvd_job_wall_s(&j->host), j->generation, kind, summary);
    rdzvd_timeline_recovery_start(&j->timeline, rdzvd_job_wall_s(&j->host), j->generation,
                                  slow    ? RDZV_MARK_STRAGGLER
                                  : aside ? RDZV_MARK_PUT_ASIDE
                                          : kind,
                                  j->inplace, cause_s);
    for_each_member(j, m, pos, tmp)
    {
        if (m->node_rank < 0)
            continue;
        m->joined_late &= !member_seen_running(m); /* it ran a generation of its own */
        m->stopping_gen = j->generation;
        rdzvd_member_send_event(m, &e);
    }
    rdzvd_job_flush(j);
    rdzvd_job_check_stopped(j);
}

/* Append to why the nodes of a rebuilt generation that did not come back, as its record names
 * them ("node rank 2 (node id n2)", the first few), when it does. */
static void rebuild_missing_names(struct rdzvd_job *j, char *why, size_t len)
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
                 named ? "," : ":", i, rdzvd_job_named(j, j->rebuilt_nodes[i].node_id));
        named++;
    }
}

void rdzvd_job_fired(struct rdzvd_job *j)
{
    j->timer_armed = false;
    if (j->state == JOB_FORMING && (j->timer_kind == T_LAST_CALL || j->timer_kind == T_JOIN)) {
        int64_t ready = j->nready, members;
        bool bench = free_bench(j, &ready, &members);

        if (ready >= j->min) {
            rdzvd_job_note(j, false,
                           "last call over with %" PRId64 " of %" PRId64 "..%" PRId64 " nodes",
                           ready, j->min, j->max);
            close_round(j, bench);
        } else {
            job_fail_nodes(j, ready);
        }
    } else if (j->state == JOB_FORMING && j->timer_kind == T_PREFLIGHT) {
        rdzvd_job_pf_fired(j);
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
void rdzvd_member_nccl_unsent(struct rdzvd_member *m, uint64_t gen, void *peer)
{
    if (m->job->state == JOB_NCCL && gen == m->job->generation && !m->node_rank && m->peer == peer)
        rdzvd_job_end(m->job, "failed", 1, "could not ask node rank 0 for the NCCL id");
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
    rdzvd_job_pf_settings(j, jn);
    j->median_compute_ms = -1;
    j->created_ms = rdzvd_job_now_ms(h);
    if (h->take_waiting && h->ended)
        j->waiting_since_ms = h->take_waiting(h->ended, jn->run_id);
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

/* Why the restart for a member lost is not counted, or NULL: it is. One caused by a node that
 * was placed only because MIN needed it, past the job's bound (P8), before rdzvd saw it run
 * (charge; a signal, a loss, a straggler, whatever its agent claimed) is charged to the budget
 * (logged). */
static const char *lost_uncounted(struct rdzvd_job *j, bool signalled, bool unran, bool charge)
{
    const char *why = signalled            ? "a node left on a signal from outside"
                      : j->straggler_cause ? "a straggler put aside"
                      : unran              ? "a node lost before it ran"
                                           : NULL;

    if (!why || !charge || !rdzvd_job_free_spent(j))
        return why;
    rdzvd_job_note(j, true, "this restart (%s, a node placed past the bound before it ran) is "
                   "charged to the budget: the job took %d restarts not charged to it within %d "
                   "min, the most it takes", why, RDZVD_JOB_FREE_RESTARTS,
                   RDZVD_JOB_FREE_WINDOW_MS / 60000);
    return NULL;
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
    /* placed only because MIN needed it, past the bound, and not seen running: charged */
    bool charge = m->placed_spent && !member_seen_running(m);
    void (*lost)(void *) = j->host.lost, *lost_ud = j->host.lost_ud;
    int64_t rank = m->node_rank;
    double lost_since_s = m->lost_since_s;
    char cause[RDZV_SUMMARY_MAX + 1];

    snprintf(cause, sizeof(cause), "root cause: the agent of node rank %" PRId64 " (%s) %s", rank,
             m->join.host, why);
    if (in_round && (st == JOB_RUNNING || st == JOB_NCCL) && !left)
        rdzvd_job_note(j, true, "%s", cause + 12);
    else
        rdzvd_job_note(j, false, "node=%s left (node id %s): %s", m->join.host,
                       rdzvd_job_named(j, m->join.node_id), why);
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
            rdzvd_job_restart(j, RDZV_MARK_NODE_LOST, lost_uncounted(j, signalled, unran, charge),
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
    RDZVD_JOB_STEP(&m->job->host);
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

void rdzvd_jobs_drop_all(struct rdzv_list *jobs)
{
    /* The jobs' host, which each job's copy names (none: nothing to drop). */
    RDZVD_JOB_STEP(rdzv_list_empty(jobs)
                       ? NULL
                       : &rdzv_container_of(jobs->next, struct rdzvd_job, node)->host);
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

/* -------------------------------------------------------------------------------------------- */
/* The one function that changes a job's state, generation and restart count
 * (rdzvd-job-impl.h, struct rdzvd_job_move), and its table of legal moves, each with the decision
 * (rdzvd-job-record.h) that must be recorded before it is made. */

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
        (mv->kind == JOB_MOVE_RESTORE && j->generation != 0) ||
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

/* -------------------------------------------------------------------------------------------- */
/* A job's failure history (rdzvd-job-record.h, struct rdzvd_job_record_hist):
 * each node's worker failures within the job, and the nodes it put aside. Part of the job state
 * machine (rdzvd-job-impl.h); every decision records the history as it is in memory. */

/* rdzvd's wall clock in unix ms: failures are dated by it, and the dates are recorded, so that a
 * restarted rdzvd (or the next leader) counts the same window. */
static int64_t wall_ms(const struct rdzvd_job *j)
{
    return (int64_t)(rdzvd_job_wall_s(&j->host) * 1000);
}

const struct rdzvd_job_record_hist *rdzvd_job_hist_find(const struct rdzvd_job *j,
                                                        const char *node_id)
{
    for (unsigned i = 0; i < j->n_hist; i++)
        if (strcmp(j->hist[i].node_id, node_id) == 0)
            return &j->hist[i];
    return NULL;
}

/* The entry of node_id, made (no failure yet) when there is none; when the history is full, the
 * entry of a node not put aside with the fewest failures makes room. NULL when out of memory,
 * or when every entry is of a node put aside (logged). */
static struct rdzvd_job_record_hist *hist_get(struct rdzvd_job *j, const char *node_id)
{
    struct rdzvd_job_record_hist *h =
        (struct rdzvd_job_record_hist *)rdzvd_job_hist_find(j, node_id);
    unsigned victim = j->n_hist;

    if (h)
        return h;
    if (j->n_hist < RDZVD_JOB_HISTORY_MAX) {
        h = realloc(j->hist, (j->n_hist + 1) * sizeof(*h));
        if (!h) {
            log_warn("job=%s out of memory: node id %s's failure is not counted", j->run_id,
                     node_id);
            return NULL;
        }
        j->hist = h;
        victim = j->n_hist++;
    } else {
        for (unsigned i = 0; i < j->n_hist; i++)
            if (!j->hist[i].aside &&
                (victim == j->n_hist || j->hist[i].failures < j->hist[victim].failures))
                victim = i;
        if (victim == j->n_hist) {
            log_warn("job=%s its history holds %u nodes put aside: node id %s's failure is not "
                     "counted", j->run_id, j->n_hist, node_id);
            return NULL;
        }
    }
    h = &j->hist[victim];
    memset(h, 0, sizeof(*h));
    snprintf(h->node_id, sizeof(h->node_id), "%s", node_id);
    return h;
}

/* f as h's newest failure; past RDZVD_JOB_FAILS_KEPT the oldest is forgotten. */
static void fail_keep(struct rdzvd_job_record_hist *h, const struct rdzvd_job_record_fail *f)
{
    if (h->n_fails == RDZVD_JOB_FAILS_KEPT) {
        memmove(&h->fails[0], &h->fails[1], (RDZVD_JOB_FAILS_KEPT - 1) * sizeof(*f));
        h->n_fails--;
    }
    h->fails[h->n_fails++] = *f;
}

void rdzvd_job_hist_take(struct rdzvd_job *j, struct rdzvd_job_record *rec)
{
    int64_t now = wall_ms(j);

    free(j->hist);
    j->hist = rec->hist;
    j->n_hist = rec->n_hist;
    rec->hist = NULL;
    rec->n_hist = 0;
    /* A record of an older rdzvd has no dates: its failures are dated now, so they count within
     * the window from here on (as they counted before), with no rank to follow. */
    for (unsigned i = 0; i < j->n_hist; i++) {
        struct rdzvd_job_record_hist *h = &j->hist[i];
        struct rdzvd_job_record_fail old = {.ms = now, .rank = -1, .local_rank = -1,
                                            .world_size = -1, .node = true};

        if (h->n_fails)
            continue;
        for (int64_t k = 0; k < h->failures && k < RDZVD_JOB_FAILS_KEPT; k++)
            fail_keep(h, &old);
    }
    /* The restarts not counted within the window, as recorded: a restart of rdzvd keeps the
     * bound (a record of an older rdzvd has none). */
    j->n_free = rec->n_free < RDZVD_JOB_FREE_RESTARTS ? rec->n_free : RDZVD_JOB_FREE_RESTARTS;
    memcpy(j->free_ms, rec->free_ms, j->n_free * sizeof(*j->free_ms));
    (void)free_in_window(j, wall_ms(j)); /* one in the future is taken as now */
}

/* ---- the bound on restarts not charged to the budget ----
 * Every restart stops every worker of the job. One not charged to the budget (a scale-up, a
 * re-form around a node that never ran, a signal from outside, a straggler put aside) is caused
 * by a node whose name and node id are only claims, so the bound is the job's: at most
 * RDZVD_JOB_FREE_RESTARTS within RDZVD_JOB_FREE_WINDOW_MS, whoever asked. */

/* The restarts not counted within the window before now (those older dropped). One later than
 * now (a clock set back, a record written by a host whose clock runs ahead) is taken as now: it
 * delays the next scale-up by one window at most, never for as long as the clocks differ. */
static unsigned free_in_window(struct rdzvd_job *j, int64_t now)
{
    unsigned old = 0;

    for (unsigned i = 0; i < j->n_free; i++)
        if (j->free_ms[i] > now)
            j->free_ms[i] = now;

    while (old < j->n_free && now - j->free_ms[old] >= RDZVD_JOB_FREE_WINDOW_MS)
        old++;
    if (old) {
        memmove(&j->free_ms[0], &j->free_ms[old], (j->n_free - old) * sizeof(*j->free_ms));
        j->n_free -= old;
    }
    if (j->n_free < RDZVD_JOB_FREE_RESTARTS)
        j->free_said = false; /* room again: the next refusal is said again */
    return j->n_free;
}

bool rdzvd_job_free_spent(struct rdzvd_job *j)
{
    return free_in_window(j, wall_ms(j)) >= RDZVD_JOB_FREE_RESTARTS;
}

/* The bound's reason, once until there is room again. */
static void free_say(struct rdzvd_job *j, const char *what)
{
    if (j->free_said)
        return;
    j->free_said = true;
    rdzvd_job_note(j, true, "%s: the job took %u restarts not charged to its budget within %d "
                   "min (the most it takes, whoever joins); nodes that never ran in it wait as "
                   "spares", what, j->n_free, RDZVD_JOB_FREE_WINDOW_MS / 60000);
}

bool rdzvd_job_free_scale_up(struct rdzvd_job *j)
{
    int64_t now = wall_ms(j);
    unsigned k = free_in_window(j, now);

    /* Two slots left at least: the scale-up takes one, and a re-form around its joiners (lost
     * at their ROUND, before they ran) the other, never charged to the budget: a token holder
     * cannot make a healthy job fail (P8d). */
    if (k >= RDZVD_JOB_FREE_RESTARTS - 1) {
        free_say(j, "no scale-up now");
        return false;
    }
    /* Spaced, 30 s doubling after the last scale-up: joiners close together come in together.
     * A re-form around a node lost before it ran spaces nothing (the bound counts it): its
     * replacement comes in at once. A gap waited is said nowhere: the joiner asks again at its
     * next HEARTBEAT. */
    return k == 0 || !j->free_last_scale ||
           now - j->free_ms[k - 1] >= (int64_t)RDZVD_JOB_FREE_GAP_MS << (k - 1);
}

/* A restart not counted happens now: kept (the decision that follows records it). */
static void free_keep(struct rdzvd_job *j)
{
    int64_t now = wall_ms(j);

    if (free_in_window(j, now) == RDZVD_JOB_FREE_RESTARTS) { /* a node that ran, past it */
        memmove(&j->free_ms[0], &j->free_ms[1], (j->n_free - 1) * sizeof(*j->free_ms));
        j->n_free--;
    }
    j->free_ms[j->n_free++] = now;
    j->free_last_scale = j->scaling_up;
}

/* Whether rdzvd sees m run now: in the generation's round, it took the ROUND (its HEARTBEAT
 * named the generation), and the generation ran past the start-up window by rdzvd's own clock
 * (or was rebuilt: its nodes came back with its resume). A step claimed does not count. */
static bool member_seen_running(const struct rdzvd_member *m)
{
    const struct rdzvd_job *j = m->job;

    uint64_t at = m->closed_ms ? m->closed_ms : rdzvd_job_now_ms(&j->host);

    if (m->node_rank < 0 || !j->generation || m->ran_gen != j->generation)
        return false;
    /* Kept after its connection closed (rdzvd stalled): seen up to that close, not since. */
    return !j->formed_ms ||
           (int64_t)(at - j->formed_ms) >= rdzvd_job_startup_fail_ms(j->host.steps);
}

/* m never ran in its job, as rdzvd saw it (the bound, P8): this member (this connection, since
 * its JOIN) never took a ROUND of the job. A claim does not count: a resume of an older
 * generation proves an id, not a run; a node that left, was lost or put aside is a new member
 * when it comes back. */
static bool member_never_ran(const struct rdzvd_member *m)
{
    return !m->ran_gen;
}

/* While forming after a restart, with the bound spent: whether the job forms without the nodes
 * that never ran in it (enough of those that ran are there: MIN); then *ready and *members are
 * of those that ran only. O(members), only with the bound spent. */
static bool free_bench(struct rdzvd_job *j, int64_t *ready, int64_t *members)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;
    int64_t r = 0, n = 0;

    if (j->generation == 0 || j->scaling_up || !rdzvd_job_free_spent(j))
        return false; /* a scale-up's round takes in whom it restarted for */
    for_each_member(j, m, pos, tmp)
    {
        if (member_never_ran(m))
            continue;
        n++;
        r += m->ready;
    }
    if (r < j->min || r == *ready)
        return false; /* it cannot form without them, or nobody waits */
    *ready = r;
    *members = n;
    return true;
}

/* m's GPUs into h, m's node put aside: those that no other node of m's job reports. A node
 * that names another's GPUs and gets itself put aside must not lock that node out: a GPU in two
 * nodes at once is a claim of one of them, and not counted against either (logged). */
static void aside_gpus(struct rdzvd_member *m, struct rdzvd_job_record_hist *h)
{
    struct rdzvd_job *j = m->job;
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *o;

    h->gpus = m->join.gpus;
    for_each_member(j, o, pos, tmp) {
        int k;

        while (o != m && (k = rdzv_gpu_set_common(&h->gpus, &o->join.gpus)) >= 0) {
            char text[RDZV_GPU_UUID_LEN + 1];

            rdzv_gpu_uuid_format(&h->gpus.u[k], text);
            log_warn("job=%s node %s (node id %s) is put aside, but not its GPU %s: node %s "
                     "(node id %s) reports it too", j->run_id, m->join.host, m->join.node_id,
                     text, o->join.host, o->join.node_id);
            (void)rdzv_gpu_set_remove(&h->gpus, &h->gpus.u[k]);
        }
    }
}

int rdzvd_job_check_aside(const struct rdzvd_job_record_hist *hist, unsigned n_hist,
                          const char *run_id, const char *node_id, const char *host,
                          const struct rdzv_gpu_set *gpus, char *err, size_t errlen)
{
    for (unsigned i = 0; i < n_hist; i++) {
        int k;

        if (!hist[i].aside)
            continue;
        if (strcmp(hist[i].node_id, node_id) == 0) {
            snprintf(err, errlen, "node id %s was put aside by job %s: %s", node_id, run_id,
                     hist[i].reason);
            return -EACCES;
        }
        if (host && host[0] && strcmp(hist[i].host, host) == 0) {
            snprintf(err, errlen, "node %s was put aside by job %s (as node id %s): %s", host,
                     run_id, hist[i].node_id, hist[i].reason);
            return -EACCES;
        }
        if (gpus && (k = rdzv_gpu_set_common(gpus, &hist[i].gpus)) >= 0) {
            char text[RDZV_GPU_UUID_LEN + 1];

            rdzv_gpu_uuid_format(&gpus->u[k], text);
            snprintf(err, errlen, "this node's GPU %s was put aside by job %s with node %s%s(node "
                     "id %s): %s", text, run_id, hist[i].host, hist[i].host[0] ? " " : "",
                     hist[i].node_id, hist[i].reason);
            return -EACCES;
        }
    }
    return 0;
}

/* f is within j's --bad-node-window at now (no window: every failure is). */
static bool in_window(const struct rdzvd_job *j, const struct rdzvd_job_record_fail *f, int64_t now)
{
    return j->bad_node_window_ms <= 0 || now - f->ms < j->bad_node_window_ms;
}

/* h's failures that count against its node now: within the window, or (none) all of them. */
static int64_t node_failures(const struct rdzvd_job *j, const struct rdzvd_job_record_hist *h,
                             int64_t now)
{
    int64_t n = 0;

    if (j->bad_node_window_ms <= 0)
        return h->failures;
    for (unsigned i = 0; i < h->n_fails; i++)
        n += h->fails[i].node && in_window(j, &h->fails[i], now);
    return n;
}

/* f, a failure of h's node, follows its rank: the same rank failed on another node within the
 * window (or, the ranks renumbered since, the world size another, the same local rank). Those
 * failures become the job's (a node put aside stays so), as f will. The host of such a node
 * (the last in the history), or NULL when none. */
static const char *rank_followed(struct rdzvd_job *j, const struct rdzvd_job_record_hist *h,
                                 const struct rdzvd_job_record_fail *f, int64_t now)
{
    const char *other = NULL;

    for (unsigned i = 0; i < j->n_hist; i++) {
        struct rdzvd_job_record_hist *o = &j->hist[i];

        for (unsigned k = 0; o != h && k < o->n_fails; k++) {
            struct rdzvd_job_record_fail *g = &o->fails[k];

            if (g->rank < 0 || !in_window(j, g, now) ||
                (g->world_size == f->world_size ? g->rank != f->rank
                                                : g->local_rank != f->local_rank))
                continue;
            if (g->node && !o->aside) {
                g->node = false;
                o->failures--;
            }
            other = o->host;
        }
    }
    return other;
}

/* h's node fails at start-up, and no other does: its last --bad-node-failures failures that
 * count were all start-up failures, another node is in the job, and no other node's failure
 * counts within the window (a job whose own code fails at start-up fails on every node: that is
 * not the node's). */
static bool fails_at_startup(const struct rdzvd_job *j, const struct rdzvd_job_record_hist *h,
                             int64_t now)
{
    int64_t n = 0;

    for (unsigned i = h->n_fails; i-- > 0 && n < j->bad_node_failures;) {
        const struct rdzvd_job_record_fail *f = &h->fails[i];

        if (!f->node || !in_window(j, f, now))
            continue;
        if (!f->startup)
            return false;
        n++;
    }
    if (n < j->bad_node_failures || j->nmembers < 2)
        return false; /* some not kept (no window, more than RDZVD_JOB_FAILS_KEPT); or no other
                       * node to tell a node's fault from the job's */
    for (unsigned i = 0; i < j->n_hist; i++)
        for (unsigned k = 0; &j->hist[i] != h && k < j->hist[i].n_fails; k++)
            if (j->hist[i].fails[k].node && in_window(j, &j->hist[i].fails[k], now) &&
                j->hist[i].fails[k].world_size != RDZVD_FAIL_UNRAN) /* no worker's failure */
                return false;
    return true;
}

enum rdzvd_aside rdzvd_job_node_failed(struct rdzvd_member *m, struct rdzvd_job_record_fail f,
                                       char *summary, size_t len)
{
    struct rdzvd_job *j = m->job;
    struct rdzvd_job_record_hist *h = hist_get(j, m->join.node_id);
    size_t used = strlen(summary);
    const char *other;
    int64_t now, counted;
    bool waits;

    if (!h)
        return RDZVD_ASIDE_NOT;
    now = f.ms ? f.ms : wall_ms(j);
    f.ms = now;
    snprintf(h->host, sizeof(h->host), "%s", m->join.host);
    other = rank_followed(j, h, &f, now);
    f.node = !other;
    fail_keep(h, &f);
    if (other) {
        if (used < len)
            snprintf(summary + used, len - used,
                     "; rank %" PRId64 " failed on node %s too%s: the job's failure, not the "
                     "node's",
                     f.rank, other, j->bad_node_window_ms > 0 ? " within the window" : "");
        return RDZVD_ASIDE_NOT;
    }
    h->failures++;
    counted = node_failures(j, h, now);
    if (j->bad_node_failures <= 0 || counted < j->bad_node_failures ||
        j->restart_count >= j->max_restarts)
        return RDZVD_ASIDE_NOT; /* not yet, never, or the job ends on this failure anyway */
    waits = j->nmembers - 1 < j->min;
    if (waits && !fails_at_startup(j, h, now))
        return RDZVD_ASIDE_NO_CHOICE;
    h->aside = true;
    aside_gpus(m, h);
    j->host.steps->counts.put_aside[RDZVD_ASIDE_FAILURES]++;
    if (j->bad_node_window_ms > 0)
        snprintf(h->reason, sizeof(h->reason),
                 "its workers failed%s %" PRId64 " times within %" PRId64 " s (--bad-node-failures "
                 "%" PRId64 ", --bad-node-window %" PRId64 "), the last at generation %" PRIu64,
                 waits ? " at start-up" : "", counted, j->bad_node_window_ms / 1000,
                 j->bad_node_failures, j->bad_node_window_ms / 1000, j->generation);
    else
        snprintf(h->reason, sizeof(h->reason),
                 "its workers failed%s %" PRId64 " times within the job (--bad-node-failures "
                 "%" PRId64 "), the last at generation %" PRIu64,
                 waits ? " at start-up" : "", counted, j->bad_node_failures, j->generation);
    if (used < len)
        snprintf(summary + used, len - used, "; node rank %" PRId64 " (%s) is put aside%s: %s%s",
                 m->node_rank, m->join.host,
                 f.startup ? " once its generation stopped, unless every node failed alike" : "",
                 h->reason,
                 waits ? "; no spare waits: the job waits for a node to take its place "
                         "(--join-timeout)" : "");
    return RDZVD_ASIDE_NOW;
}

/* The failures of host's nodes lost before they ran that count now (within the window). */
static int64_t host_unran(const struct rdzvd_job *j, const char *host, int64_t now)
{
    int64_t n = 0;

    for (unsigned i = 0; host[0] && i < j->n_hist; i++) {
        const struct rdzvd_job_record_hist *h = &j->hist[i];

        for (unsigned k = 0; strcmp(h->host, host) == 0 && k < h->n_fails; k++)
            n += h->fails[k].world_size == RDZVD_FAIL_UNRAN && h->fails[k].node &&
                 in_window(j, &h->fails[k], now); /* not taken back (every node alike) */
    }
    return n;
}

/* m cost the job a restart before it ran (why): charged to its node id and host in the history
 * (P7c), its host put aside at --bad-node-failures such charges. startup: its worker failed at
 * start-up (a charge that every node failing alike takes back, P4). */
static void unran_charge(struct rdzvd_member *m, struct rdzvd_job_record_hist *h, const char *why,
                         bool startup)
{
    struct rdzvd_job *j = m->job;
    struct rdzvd_job_record_fail f = {.ms = wall_ms(j), .rank = -1, .local_rank = -1,
                                      .world_size = RDZVD_FAIL_UNRAN, .node = true,
                                      .startup = startup};
    int64_t n;

    /* Its agent's --host: a new agent on that host is a new node id, and the host is what keeps
     * costing the job (an agent that crashes as it starts, a token holder that closes). */
    snprintf(h->host, sizeof(h->host), "%s", m->join.host);
    fail_keep(h, &f);
    h->failures++;
    n = host_unran(j, m->join.host, f.ms);
    /* Logged as rdzvd_job_note does (rdzvd-job-sm.c calls this file: no call back). */
    log_warn("job=%s gen=%" PRIu64 " node=%s (node id %s) went before it ran (%s): not charged "
             "to the restart budget; its host has lost %" PRId64 " node(s) so",
             j->run_id, j->generation, m->join.host, m->join.node_id, why, n);
    if (j->bad_node_failures > 0 && n >= j->bad_node_failures) {
        h->aside = true;
        aside_gpus(m, h);
        j->host.steps->counts.put_aside[RDZVD_ASIDE_FAILURES]++;
        snprintf(h->reason, sizeof(h->reason),
                 "%" PRId64 " of its nodes went before they ran (placed or taken in by a "
                 "scale-up, their agents gone before their workers started) %s "
                 "(--bad-node-failures %" PRId64 "), the last at generation %" PRIu64,
                 n, j->bad_node_window_ms > 0 ? "within --bad-node-window" : "within the job",
                 j->bad_node_failures, j->generation);
        log_warn("job=%s gen=%" PRIu64 " node=%s put aside (node id %s): %s", j->run_id,
                 j->generation, m->join.host, m->join.node_id, h->reason);
    }
}

bool rdzvd_member_lost_unran(struct rdzvd_member *m)
{
    struct rdzvd_job *j = m->job;
    /* Its workers ran its generation only as rdzvd saw them (past the start-up window by its
     * own clock): an agent lost sooner (a crash loop, an OOM as it starts, a token holder that
     * claims a step and closes) did not run. */
    bool placed = j->state == JOB_RUNNING && m->node_rank >= 0 && !m->left_ok &&
                  !member_seen_running(m);
    struct rdzvd_job_record_hist *h;

    /* One that left on a signal from outside (its scheduler's) is charged nothing, as ever;
     * one put aside on its own word (a health check) was charged already. */
    if (j->state == JOB_ENDED || m->signalled || !(placed || (m->scaled_up && !m->ran_gen)) ||
        !(h = hist_get(j, m->join.node_id)) || h->aside)
        return placed;
    unran_charge(m, h, !placed ? "its JOIN scaled the job up"
                       : m->ran_gen != j->generation
                           ? "its agent never answered its ROUND"
                           : "lost within the start-up window, whatever steps it claimed",
                 false);
    if (!placed && rdzvd_job_save_aside(j) < 0) /* no restart follows to record it */
        log_warn("job=%s the history of node id %s was not recorded", j->run_id,
                 m->join.node_id);
    return placed; /* placed: the restart that follows records it (STOPPED) */
}

bool rdzvd_member_exit_unran(struct rdzvd_member *m, bool outside, bool startup)
{
    struct rdzvd_job *j = m->job;
    struct rdzvd_job_record_hist *h;

    if (!m->joined_late || member_seen_running(m))
        return false; /* a node of the first generation, or one that rdzvd saw run */
    if (rdzvd_job_free_spent(j)) {
        rdzvd_job_note(j, true, "node=%s: its worker failed before rdzvd saw it run, a late "
                       "joiner past the bound: charged to the budget (the job took %d restarts not "
                       "charged to it within %d min, the most it takes)", m->join.host,
                       RDZVD_JOB_FREE_RESTARTS, RDZVD_JOB_FREE_WINDOW_MS / 60000);
        return false;
    }
    if (!outside && (h = hist_get(j, m->join.node_id)) && !h->aside)
        unran_charge(m, h, "a late joiner whose worker failed within the start-up window, "
                     "whatever it reported", startup);
    return true;
}

bool rdzvd_member_scale_up_now(struct rdzvd_member *m)
{
    struct rdzvd_job *j = m->job;
    int64_t n = host_unran(j, m->join.host, wall_ms(j));

    if (n > 0) {
        log_info("job=%s gen=%" PRIu64 " node=%s is not taken in now (--scale-up now): its "
                 "host has lost %" PRId64 " node(s) before they ran; it waits for the next "
                 "restart", j->run_id, j->generation, m->join.host, n);
        return false;
    }
    m->scaled_up = true;
    return true;
}

int rdzvd_job_fails_alike(struct rdzvd_member *m, int64_t since_ms)
{
    struct rdzvd_job *j = m->job;
    int n = 0;

    for (unsigned i = 0; i < j->n_hist; i++) {
        struct rdzvd_job_record_hist *o = &j->hist[i];
        struct rdzvd_member *p = rdzvd_member_index_find(&j->by_id, o->node_id);

        if (strcmp(o->node_id, m->join.node_id) == 0)
            continue;
        if (o->aside && p && p->aside_pending) { /* put aside on this generation's failure */
            o->aside = false;
            o->reason[0] = '\0';
            o->gpus.n = 0;
            j->host.steps->counts.put_aside[RDZVD_ASIDE_FAILURES]--;
            n++;
        } else if (o->aside) {
            continue; /* one put aside stays so (an operator releases it) */
        }
        for (unsigned k = 0; k < o->n_fails; k++) {
            struct rdzvd_job_record_fail *g = &o->fails[k];

            if (!g->node || !g->startup || g->ms < since_ms)
                continue;
            g->node = false;
            o->failures--;
            n++;
        }
    }
    return n;
}

void rdzvd_job_aside_status(const struct rdzvd_job *j, struct rdzv_status_job *sj)
{
    for (unsigned i = 0; i < j->n_hist; i++) {
        const struct rdzvd_job_record_hist *h = &j->hist[i];
        struct rdzv_status_aside *a;

        if (!h->aside)
            continue;
        if (sj->aside_total++ >= RDZV_STATUS_ASIDE)
            continue;
        a = &sj->aside[sj->n_aside++];
        snprintf(a->node_id, sizeof(a->node_id), "%s", h->node_id);
        snprintf(a->host, sizeof(a->host), "%s", h->host);
        snprintf(a->reason, sizeof(a->reason), "%s", h->reason);
        a->failures = h->failures;
        a->n_gpus = h->gpus.n < RDZV_STATUS_ASIDE_GPUS ? h->gpus.n : RDZV_STATUS_ASIDE_GPUS;
        memcpy(a->gpus, h->gpus.u, a->n_gpus * sizeof(a->gpus[0]));
        a->gpus_left_out = h->gpus.n - a->n_gpus;
    }
}

#define CHECK_REASON "it failed a health check: "

/* Make room for one more node put aside on its own word: past RDZVD_JOB_ASIDE_CHECK_MAX of them,
 * the oldest (the first in the history) is forgotten. */
static void check_asides_bound(struct rdzvd_job *j)
{
    unsigned n = 0, oldest = j->n_hist;

    for (unsigned i = 0; i < j->n_hist; i++)
        if (j->hist[i].aside && strncmp(j->hist[i].reason, CHECK_REASON,
                                        strlen(CHECK_REASON)) == 0 && n++ == 0)
            oldest = i;
    if (n < RDZVD_JOB_ASIDE_CHECK_MAX)
        return;
    log_info("job=%s forgets node %s (node id %s), put aside on its own word: it keeps the "
             "newest %d such", j->run_id, j->hist[oldest].host, j->hist[oldest].node_id,
             RDZVD_JOB_ASIDE_CHECK_MAX);
    memmove(&j->hist[oldest], &j->hist[oldest + 1],
            (j->n_hist - oldest - 1) * sizeof(*j->hist));
    j->n_hist--;
}

#define STRAGGLER_REASON "a straggler: "
#define NETWORK_REASON "network: "

void rdzvd_job_node_unhealthy(struct rdzvd_member *m, const char *reason)
{
    rdzvd_job_node_aside(m, RDZVD_ASIDE_CHECK, reason);
}

void rdzvd_job_node_aside(struct rdzvd_member *m, unsigned why, const char *reason)
{
    struct rdzvd_job *j = m->job;
    struct rdzvd_job_record_hist *h;
    bool held;

    if (!rdzvd_job_hist_find(j, m->join.node_id) && why == RDZVD_ASIDE_CHECK)
        check_asides_bound(j);
    h = hist_get(j, m->join.node_id);

    if (!h)
        return; /* not kept (logged): its agent leaves all the same */
    /* A host is put aside only on the word of a node that held a place in the job: anyone with
     * the agents' token may JOIN naming a member's host, and a spare or a new node proves
     * nothing of it. Such a node is put aside by its node id only. */
    held = rdzvd_member_held_place(m);
    snprintf(h->host, sizeof(h->host), "%s", held ? m->join.host : "");
    if (!h->aside && why < RDZVD_ASIDE_REASONS)
        j->host.steps->counts.put_aside[why]++;
    h->aside = true;
    if (held)
        aside_gpus(m, h);
    else
        h->gpus.n = 0; /* nor the GPUs it claims: a token holder could name an away member's */
    snprintf(h->reason, sizeof(h->reason), "%s%s",
             why == RDZVD_ASIDE_STRAGGLER ? STRAGGLER_REASON
             : why == RDZVD_ASIDE_NETWORK ? NETWORK_REASON
                                          : CHECK_REASON,
             reason);
    rdzv_utf8_trim(h->reason);
}

int rdzvd_job_release(struct rdzvd_job *j, const char *node, char *err, size_t errlen)
{
    struct rdzvd_job_record_hist *before;
    struct rdzv_gpu_uuid gpu;
    bool by_gpu = rdzv_gpu_uuid_parse(node, strlen(node), &gpu) == 0;
    int released = 0, r;

    if (!j->n_hist)
        return 0;
    if (!(before = malloc(j->n_hist * sizeof(*before)))) {
        snprintf(err, errlen, "rdzvd is out of memory");
        return -ENOMEM;
    }
    memcpy(before, j->hist, j->n_hist * sizeof(*before));
    for (unsigned i = 0; i < j->n_hist; i++) {
        struct rdzvd_job_record_hist *h = &j->hist[i];

        if (!h->aside)
            continue;
        if (by_gpu) { /* that GPU only: the node stays put aside by its id and host */
            released += rdzv_gpu_set_remove(&h->gpus, &gpu);
            continue;
        }
        if (strcmp(h->node_id, node) && strcmp(h->host, node))
            continue;
        h->aside = false;
        h->failures = 0;
        h->n_fails = 0;
        h->reason[0] = '\0';
        h->gpus.n = 0;
        released++;
    }
    r = released ? rdzvd_job_save_aside(j) : 0;
    if (r < 0) {
        memcpy(j->hist, before, j->n_hist * sizeof(*before)); /* not recorded: not done */
        snprintf(err, errlen, "rdzvd could not record it in its job table: %s", strerror(-r));
    } else if (released && by_gpu) {
        log_warn("job=%s GPU %s released by an operator from %d node(s) put aside: a node with "
                 "it may join", j->run_id, node, released);
    } else if (released) {
        log_warn("job=%s node %s released by an operator (%d entr%s): it may join again",
                 j->run_id, node, released, released == 1 ? "y" : "ies");
    }
    free(before);
    return r < 0 ? r : released;
}

/* -------------------------------------------------------------------------------------------- */
/* Each rank's last progress report, from its agent's HEARTBEATs, kept per
 * member for the current generation, and the status's "ranks" made from it. Loop thread only, as
 * the rest of the job state machine (rdzvd-job-impl.h). */

/* A rank's compute time in the status: the median of its last this many samples. */
#define RDZVD_COMPUTE_WINDOW 8

struct rdzvd_rank_progress {
    bool set; /* the local rank has reported in progress_gen */
    int64_t step;
    uint64_t at_ms;     /* when the report was made, rdzvd_job_now_ms() clock */
    int64_t timeout_ms; /* its agent's progress timeout for it; 0: none */
    /* Its last steps' compute times (ms), one per new step reported with one: a ring of n. */
    uint32_t compute[RDZVD_COMPUTE_WINDOW];
    uint64_t compute_at[RDZVD_COMPUTE_WINDOW]; /* when each was reported, as at_ms */
    unsigned n_compute, compute_pos;
    int64_t compute_step; /* the step of the last sample */
};

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return x < y ? -1 : x > y;
}

/* The median of e's window (the upper one of an even count), or -1 when it is empty. */
static int64_t compute_median(const struct rdzvd_rank_progress *e)
{
    uint32_t sorted[RDZVD_COMPUTE_WINDOW];

    if (e->n_compute == 0)
        return -1;
    memcpy(sorted, e->compute, e->n_compute * sizeof(sorted[0]));
    qsort(sorted, e->n_compute, sizeof(sorted[0]), cmp_u32);
    return sorted[e->n_compute / 2];
}

/* The index of e's k-th newest sample (k = 1: the last written, just before compute_pos). */
static unsigned compute_newest(const struct rdzvd_rank_progress *e, unsigned k)
{
    return (e->compute_pos + RDZVD_COMPUTE_WINDOW - k) % RDZVD_COMPUTE_WINDOW;
}

void rdzvd_member_progress_free(struct rdzvd_member *m)
{
    free(m->progress);
    m->progress = NULL;
}

bool rdzvd_member_rank_progressed(const struct rdzvd_member *m, int64_t local_rank)
{
    return m->progress && m->progress_gen == m->job->generation && local_rank >= 0 &&
           local_rank < m->join.nproc && m->progress[local_rank].set;
}

/* A recovery's last point: the job's first step after the new generation's ranks went out,
 * when every node of it has made one (the latest of their first steps). Not the first report
 * of any rank: one kept in place finishes the step it was in (or reports its steps from
 * before) while a spare's workers still start, and none steps again before they do. */
static void recovery_first_step(struct rdzvd_member *m, double first)
{
    struct rdzvd_job *j = m->job;
    double since = rdzvd_timeline_recovery_since(&j->timeline), last = 0;
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *o;

    if (m->rec_since != since) {
        m->rec_since = since;
        m->rec_first = 0;
    }
    if (!m->rec_first || first < m->rec_first)
        m->rec_first = first;
    for_each_member(j, o, pos, tmp) {
        if (o->node_rank < 0)
            continue;
        if (o->rec_since != since || !o->rec_first)
            return; /* a node of the generation has not stepped yet */
        if (o->rec_first > last)
            last = o->rec_first;
    }
    rdzvd_job_recovery_point(j, RDZV_RECOVERY_FIRST_STEP, last);
}

void rdzvd_member_progress(struct rdzvd_member *m, const struct rdzv_heartbeat *hb)
{
    RDZVD_JOB_STEP(&m->job->host);
    struct rdzvd_job *j = m->job;
    uint64_t now = rdzvd_job_now_ms(&j->host);
    size_t nproc = (size_t)m->join.nproc;
    double wall = rdzvd_job_wall_s(&j->host);
    double first = 0; /* a recovery's first step: its earliest report */

    if (hb->has_loop_stall) {
        m->has_loop_stall = true;
        m->loop_stall_ms = hb->loop_stall_ms;
    }
    if (hb->generation == j->generation && m->node_rank >= 0 && m->ran_gen != hb->generation) {
        m->ran_gen = hb->generation; /* its agent took the ROUND: its workers start */
        m->ran_now = true; /* before they started: the start grace goes on (its deadline) */
    }
    if (hb->n_progress == 0 || hb->generation != j->generation || m->node_rank < 0)
        return;
    if (!m->progress) {
        m->progress = calloc(nproc, sizeof(*m->progress));
        if (!m->progress) {
            log_error("job=%s: out of memory keeping the progress of node rank %" PRId64, j->run_id,
                      m->node_rank);
            return;
        }
        m->progress_gen = hb->generation;
    }
    if (m->progress_gen != hb->generation) {
        memset(m->progress, 0, nproc * sizeof(*m->progress));
        m->progress_gen = hb->generation;
    }
    if (m->progress_gen != m->scored_gen) { /* a new generation is scored anew */
        m->straggler_score = 0;
        m->slow_since_ms = 0;
        m->straggler = m->straggler_kept = false;
        m->scored_gen = m->progress_gen;
    }
    for (unsigned i = 0; i < hb->n_progress; i++) {
        const struct rdzv_rank_progress *p = &hb->progress[i];
        struct rdzvd_rank_progress *e;

        if (p->local_rank >= m->join.nproc)
            continue;
        e = &m->progress[p->local_rank];
        e->at_ms = (uint64_t)p->age_ms < now ? now - (uint64_t)p->age_ms : 0;
        if (p->has_compute && (e->n_compute == 0 || p->step != e->compute_step)) {
            e->compute[e->compute_pos] = (uint32_t)p->compute_ms;
            e->compute_at[e->compute_pos] = e->at_ms;
            e->compute_pos = (e->compute_pos + 1) % RDZVD_COMPUTE_WINDOW;
            if (e->n_compute < RDZVD_COMPUTE_WINDOW)
                e->n_compute++;
            e->compute_step = p->step;
        }
        e->set = true;
        e->step = p->step;
        e->timeout_ms = p->timeout_ms;
        if (j->timeline.recovering) {
            double at = wall - (double)p->age_ms / 1000;

            if (at >= rdzvd_timeline_recovery_since(&j->timeline) && (!first || at < first))
                first = at;
        }
        if (m->node_rank == 0 && p->local_rank == 0) /* rank 0: the job's steps per second */
            rdzvd_timeline_step(&m->job->timeline, wall - (double)p->age_ms / 1000,
                                p->step);
    }
    if (first > 0 && j->state == JOB_RUNNING)
        recovery_first_step(m, first);
}

/* The member's progress entries that belong in the status: of the job's generation. */
static bool member_progress_current(const struct rdzvd_member *m)
{
    return m->progress && m->node_rank >= 0 && m->progress_gen == m->job->generation;
}

int64_t rdzvd_member_compute_ms(const struct rdzvd_member *m, bool full)
{
    int64_t worst = -1;

    if (!member_progress_current(m))
        return -1;
    for (int64_t i = 0; i < m->join.nproc; i++) {
        const struct rdzvd_rank_progress *e = &m->progress[i];
        int64_t c = e->set ? compute_median(e) : -1;

        if (full && (!e->set || e->n_compute < RDZVD_COMPUTE_WINDOW))
            return -1;
        if (c > worst)
            worst = c;
    }
    return worst;
}

uint64_t rdzvd_member_slow_since_ms(const struct rdzvd_member *m, double threshold_ms, uint64_t now)
{
    uint64_t since = now;

    if (!member_progress_current(m))
        return now;
    for (int64_t i = 0; i < m->join.nproc; i++) {
        const struct rdzvd_rank_progress *e = &m->progress[i];
        uint64_t start = now;

        if (!e->set || e->n_compute == 0 || (double)compute_median(e) < threshold_ms)
            continue;
        /* Newest to oldest, back to the first slow report of the run: the node was slow by
         * then, never counted earlier. */
        for (unsigned k = 1; k <= e->n_compute; k++) {
            unsigned at = compute_newest(e, k);

            if ((double)e->compute[at] < threshold_ms)
                break;
            start = e->compute_at[at];
        }
        if (start < since)
            since = start;
    }
    return since;
}

int64_t rdzvd_member_last_compute_ms(const struct rdzvd_member *m)
{
    int64_t worst = -1;

    if (!member_progress_current(m))
        return -1;
    for (int64_t i = 0; i < m->join.nproc; i++) {
        const struct rdzvd_rank_progress *e = &m->progress[i];
        unsigned last = compute_newest(e, 1);

        if (e->set && e->n_compute && (int64_t)e->compute[last] > worst)
            worst = e->compute[last];
    }
    return worst;
}

struct rank_ref {
    int64_t rank;
    uint64_t at_ms;
    const struct rdzvd_member *m;
    int64_t local_rank;
};

static int by_age_desc(const void *a, const void *b)
{
    const struct rank_ref *x = a, *y = b;

    if (x->at_ms != y->at_ms)
        return x->at_ms < y->at_ms ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static int by_rank(const void *a, const void *b)
{
    const struct rank_ref *x = a, *y = b;

    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

int rdzvd_job_progress_status(const struct rdzvd_job *j, uint64_t now, struct rdzv_status_job *sj)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;
    struct rank_ref *refs;
    size_t n = 0, k = 0;
    int r = 0;

    for_each_member(j, m, pos, tmp)
    {
        if (!member_progress_current(m))
            continue;
        for (int64_t i = 0; i < m->join.nproc; i++)
            n += m->progress[i].set;
    }
    sj->ranks_left_out = 0;
    if (n == 0)
        return 0;
    refs = calloc(n, sizeof(*refs));
    if (!refs)
        return -ENOMEM;
    for_each_member(j, m, pos, tmp)
    {
        if (!member_progress_current(m))
            continue;
        for (int64_t i = 0; i < m->join.nproc; i++)
            if (m->progress[i].set)
                refs[k++] = (struct rank_ref){.rank = m->rank_offset + i,
                                              .at_ms = m->progress[i].at_ms,
                                              .m = m,
                                              .local_rank = i};
    }
    if (n > RDZV_STATUS_MAX_RANKS) {
        /* Keep the longest silent: those are what an operator looks for. */
        qsort(refs, n, sizeof(*refs), by_age_desc);
        sj->ranks_left_out = (int64_t)(n - RDZV_STATUS_MAX_RANKS);
        n = RDZV_STATUS_MAX_RANKS;
    }
    qsort(refs, n, sizeof(*refs), by_rank);
    r = rdzv_status_alloc_ranks(sj, n);
    if (r < 0)
        goto out_free;
    for (k = 0; k < n; k++) {
        const struct rdzvd_rank_progress *e = &refs[k].m->progress[refs[k].local_rank];
        struct rdzv_status_rank *s = &sj->ranks[k];

        s->rank = refs[k].rank;
        s->node_rank = refs[k].m->node_rank;
        snprintf(s->host, sizeof(s->host), "%s", refs[k].m->join.host);
        s->step = e->step;
        s->age_s = now > e->at_ms ? (double)(now - e->at_ms) / 1000 : 0;
        s->timeout_s = (double)e->timeout_ms / 1000;
        s->compute_ms = compute_median(e);
    }
out_free:
    free(refs);
    return r;
}

/* -------------------------------------------------------------------------------------------- */
/* Restarts back off (the first JOIN's restart_backoff, the cap): when a
 * restart's next generation may form. Part of the job state machine (rdzvd-job-impl.h), below
 * rdzvd-job-sm.c: it asks, and arms the job's timer; nothing here moves the job. */

uint64_t rdzvd_job_backoff_start(struct rdzvd_job *j, bool counted)
{
    uint64_t now = rdzvd_job_now_ms(&j->host), ms = 0;

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
    now = rdzvd_job_now_ms(&j->host);
    if (now < j->backoff_until_ms)
        return j->backoff_until_ms - now;
    j->backoff_until_ms = 0;
    return 0;
}

/* -------------------------------------------------------------------------------------------- */
/* Whether rdzvd itself was stalled (SIGSTOPped, starved, a VM paused) when it
 * meets a member's late message or closed connection, so that its agents' reconnects after the
 * stall are not charged as node losses. A stall is the job's, not one member's. Part of the job
 * state machine (rdzvd-job-impl.h); it reads members' timers and calls nothing above it. */

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
    RDZVD_JOB_STEP(&m->job->host);
    uint64_t now = rdzvd_job_now_ms(&m->job->host);

    rdzvd_member_check_stall(m);
    /* Nothing read from m for a heartbeat timeout (its agent heartbeats several times in one):
     * rdzvd echoed none either, and the agent may have given up on it as silent. */
    if (now - m->last_seen_ms >= (uint64_t)m->job->hb_timeout_ms)
        m->stall_ms = now;
    m->last_seen_ms = now;
}

/* -------------------------------------------------------------------------------------------- */
/* A job's node ranks: the tables of who asked for and who holds each node rank
 * of the generation (by_req, by_rank), grown on demand up to --nnodes MAX, and a member's place
 * in them. Part of the job state machine (rdzvd-job-impl.h); it calls nothing of the machine. */

int rdzvd_job_ranks_reserve(struct rdzvd_job *j, int64_t n)
{
    struct rdzvd_member **req, **rank;
    int64_t cap = j->rank_cap ? j->rank_cap : 8;

    rdzv_assert(n <= j->max);
    if (n <= j->rank_cap)
        return 0;
    while (cap < n)
        cap *= 2;
    if (cap > j->max)
        cap = j->max;
    req = realloc(j->by_req, (size_t)cap * sizeof(*req));
    if (!req)
        return -ENOMEM;
    j->by_req = req;
    rank = realloc(j->by_rank, (size_t)cap * sizeof(*rank));
    if (!rank)
        return -ENOMEM; /* by_req is larger, rank_cap not: still consistent */
    j->by_rank = rank;
    memset(req + j->rank_cap, 0, (size_t)(cap - j->rank_cap) * sizeof(*req));
    memset(rank + j->rank_cap, 0, (size_t)(cap - j->rank_cap) * sizeof(*rank));
    j->rank_cap = cap;
    return 0;
}

struct rdzvd_member *rdzvd_member_by_rank(struct rdzvd_job *j, int64_t rank)
{
    return rank >= 0 && rank < j->rank_cap ? j->by_rank[rank] : NULL;
}

struct rdzvd_member *rdzvd_member_by_req(struct rdzvd_job *j, int64_t rank)
{
    return rank >= 0 && rank < j->rank_cap ? j->by_req[rank] : NULL;
}

void rdzvd_member_unrank(struct rdzvd_member *m)
{
    struct rdzvd_job *j = m->job;

    if (m->node_rank < 0)
        return;
    if (rdzvd_member_by_rank(j, m->node_rank) == m)
        j->by_rank[m->node_rank] = NULL;
    m->node_rank = -1;
    j->nin_round--;
}

void rdzvd_member_set_rank(struct rdzvd_member *m, int64_t rank)
{
    struct rdzvd_job *j = m->job;

    if (rank < 0 || rank >= j->rank_cap) { /* every caller checked it: never past by_rank */
        log_error("job=%s: node rank %" PRId64 " is out of 0..%" PRId64 "; not set", j->run_id,
                  rank, j->rank_cap - 1);
        return;
    }
    rdzvd_member_unrank(m);
    m->node_rank = rank;
    j->by_rank[rank] = m;
    j->nin_round++;
}
