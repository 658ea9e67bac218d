/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-round.c: a generation's life. Members get ready; the round closes over the ready ones
 * (the others wait as spares); node rank 0 is asked for the NCCL ids, the generation's store
 * opens, and the ROUNDs go out. A restart stops the generation everywhere, after a backoff,
 * and the next one forms once every member is ready again. What the job waits for, as its
 * agents are told. The job's timer: what each of its deadlines does when it runs out. */
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
#include "common/rdzv-auth.h"
#include "common/rdzv-log.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "proto/rdzv-status.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/job/rdzvd-job-ends.h"
#include "daemon/job/rdzvd-job-status.h"

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
        if (m->node_rank >= 0 && m->peer)
            rdzvd_member_send_own_round(m);
    }
    rdzvd_job_flush(j);
}

void rdzvd_member_send_own_round(struct rdzvd_member *m)
{
    struct rdzvd_job *j = m->job;
    struct rdzv_round *rd = &j->round;

    rd->node_rank = m->node_rank;
    rd->rank_offset = m->rank_offset;
    /* Node rank 0's agent's, or "": the op puts rdzvd's address as this agent reached it. */
    memcpy(rd->master_addr, j->store_addr, sizeof(j->store_addr));
    rd->master_port = j->store_port;
    rdzvd_member_send_round(m, rd);
    /* Workers are starting: a longer heartbeat grace until the next heartbeat. */
    rdzvd_member_hb_arm(m, (uint64_t)j->hb_timeout_ms * RDZVD_JOB_INIT_GRACE_FACTOR);
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

/* The wait for the nodes of the generation stopped is over (W2). */
static void stopped_wait_over(struct rdzvd_job *j)
{
    free(j->stopped_wait);
    j->stopped_wait = NULL;
    j->n_stopped_wait = 0;
}

/* W2: of the *n nodes of the generation stopped that the job restored from its record waits
 * for, how many are back as members ready for the round (their workers stopped); *stopping of
 * the others are back, connected, with their workers still stopping. With blank, the ids of
 * those not back at all are blanked: none is waited for any more. */
static int64_t stopped_back(struct rdzvd_job *j, int64_t *n, int64_t *stopping, bool blank)
{
    const struct rdzvd_member *m;
    int64_t back = 0;

    *n = *stopping = 0;
    for (int64_t i = 0; j->stopped_wait && i < j->n_stopped_wait; i++) {
        if (!j->stopped_wait[i][0])
            continue;
        ++*n;
        m = rdzvd_member_index_find(&j->by_id, j->stopped_wait[i]);
        back += m && m->ready;
        *stopping += m && !m->ready && m->peer && !m->away; /* its agent will answer */
        if (!m && blank)
            j->stopped_wait[i][0] = '\0';
    }
    return back;
}

void rdzvd_member_wait(const struct rdzvd_member *m, struct rdzv_wait *w)
{
    const struct rdzvd_job *j = m->job;
    int64_t left = j->timer_armed ? (int64_t)rdzvd_job_timer_due_in(j) : -1;

    memset(w, 0, sizeof(*w));
    w->left_ms = -1;
    if (j->timer_armed && j->timer_kind == T_BACKOFF) {
        w->what = RDZV_WAIT_BACKOFF;
        w->left_ms = left;
    } else if (j->state == JOB_RUNNING && j->rebuilt && j->timer_armed &&
               j->timer_kind == T_REBUILD) {
        w->what = RDZV_WAIT_REBUILD;
        w->nodes = j->nin_round;
        w->need = j->round.nnodes;
        w->left_ms = left;
    } else if (j->state == JOB_FORMING && j->stopped_wait) {
        /* W2: the stopped generation's nodes coming back, as a rebuilt generation's; once the
         * window is over, those back whose workers still stop (no time left). */
        int64_t stopping;

        w->what = RDZV_WAIT_REBUILD;
        w->nodes = stopped_back((struct rdzvd_job *)j, &w->need, &stopping, false);
        if (j->timer_armed && j->timer_kind == T_REBUILD)
            w->left_ms = left;
    } else if (j->state == JOB_FORMING) {
        w->what = RDZV_WAIT_NODES;
        w->nodes = j->nready;
        w->need = j->min;
        w->max = j->max;
        if (j->timer_armed && j->timer_kind == T_JOIN)
            w->left_ms = left;
    }
    if (w->left_ms > RDZV_WAIT_LEFT_MAX_MS)
        w->left_ms = RDZV_WAIT_LEFT_MAX_MS;
}

/* W2: the restored job waits for them while its rebuild window runs: true while one is not
 * back. One back whose workers still stop is waited for as a stopping generation waits for its
 * READY, past the window too. Once all are back and stopped, or the window is over and none
 * back still stops, the wait is over. */
static bool stopped_waiting(struct rdzvd_job *j)
{
    int64_t n, stopping;

    if (!j->stopped_wait)
        return false;
    if (stopped_back(j, &n, &stopping, false) + stopping < n && j->timer_armed &&
        j->timer_kind == T_REBUILD)
        return true;
    if (stopping > 0)
        return true;
    stopped_wait_over(j);
    if (j->timer_armed && j->timer_kind == T_REBUILD)
        rdzvd_job_timer_stop(j);
    return false;
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
    j->scaling_up = j->scale_done = j->stop_failed = j->restart_lost = false;
    spent = j->generation > 0 && rdzvd_job_uncounted_spent(j);
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
    if (j->rank_cap) /* R17b: no rank of the new round is done */
        memset(j->rank_done, 0, (size_t)j->rank_cap * sizeof(*j->rank_done));
    j->nin_done = 0;
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
        /* A newcomer stays one until its fresh workers report a step (R17a). */
        m->newcomer = (m->prev_rank < 0 && j->generation > 0) ||
                      (m->newcomer && !(m->progress && m->progress_gen == j->generation));
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
    stopped_wait_over(j); /* each took its place, or another did */
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
    if (stopped_waiting(j))
        return; /* the rebuild window's end forms it without those not back */
    /* The bound on restarts not counted spent: nodes that never ran wait as spares. */
    bench = uncounted_bench(j, &ready, &members);
    if (bench)
        uncounted_say(j, "forming without the nodes that never ran in the job");
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
    bool bench = uncounted_bench(j, &ready, &members);

    if (ready >= j->min)
        close_round(j, bench);
    else
        rdzvd_job_try_close(j);
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
    if (rdzvd_job_tell_aside_pending(j))
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
    if (j->scale_done) { /* R17c: a scale-up is worth a restart only while training runs */
        rdzvd_job_end(j, "succeeded", 0,
                      j->restart_lost ? "a node's workers all exited 0 as the restart for a node "
                                        "lost began: training is over"
                                      : "a node's workers all exited 0 as the scale-up restart "
                                        "began: training is over");
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
    bool counted = !uncounted, aside = j->aside_cause, slow = j->straggler_cause, claimed;
    double cause_s = j->cause_s;
    struct rdzv_event e = {.type = "restart", .startup_grace_ms = j->startup_grace_ms};
    char delay[96];
    uint64_t backoff;
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;
    int r;

    j->aside_cause = j->straggler_cause = false;
    j->restart_lost = kind == RDZV_MARK_NODE_LOST;
    j->cause_s = 0;
    j->startup_grace_ms = 0;
    if (j->state != JOB_RUNNING) /* ended, already stopping, or no worker started yet */
        return;
    /* R26a: a generation rebuilt from resumes alone (no --state-dir: W5) whose nodes are not
     * all back may be a job that ended while they were away: it never runs again. */
    claimed = j->claim_gen == j->generation && j->nin_round + j->nin_done < j->round.nnodes;
    if (!counted && !claimed)
        uncounted_keep(j); /* recorded with the decision (STOPPED) */
    if (claimed || (counted && j->restart_count >= j->max_restarts)) {
        char why[RDZV_SUMMARY_MAX + 1];

        if (claimed)
            snprintf(why, sizeof(why),
                     "%s; rdzvd restarted without --state-dir, which alone keeps a job's end, and "
                     "rebuilt generation %" PRIu64 " from %" PRId64 " of its %" PRId64 " nodes: "
                     "the job may have ended while they were away, so it ends here",
                     summary, j->generation, j->nin_round, j->round.nnodes);
        else
            snprintf(why, sizeof(why),
                     "%s; restart budget exhausted (%" PRId64 " of %" PRId64 " restarts used)",
                     summary, j->restart_count, j->max_restarts);
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

        if (j->by_rank[i] || j->rank_done[i]) /* back, or gone once done (R17b) */
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
        bool bench = uncounted_bench(j, &ready, &members);

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
    } else if (j->state == JOB_FORMING && j->timer_kind == T_REBUILD) {
        int64_t n, stopping, back = stopped_back(j, &n, &stopping, true);

        rdzvd_job_note(j, true, "%" PRId64 " of the %" PRId64 " nodes of generation %" PRIu64
                       " were not back within the rebuild window after rdzvd restarted (or its "
                       "leader changed): the next round forms without them%s",
                       n - back - stopping, n, j->generation,
                       stopping ? ", once the workers of those back have stopped" : "");
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
               j->nin_round + j->nin_done < j->round.nnodes) {
        char why[RDZV_SUMMARY_MAX + 1];

        snprintf(why, sizeof(why),
                 "root cause: %" PRId64 " of %" PRId64 " nodes of generation %" PRIu64
                 " did not come back after rdzvd restarted (or its leader changed)",
                 j->round.nnodes - j->nin_round - j->nin_done, j->round.nnodes, j->generation);
        rebuild_missing_names(j, why, sizeof(why));
        /* Nobody of a generation rebuilt from its record came back: its agents went with the
         * old rdzvd, and these are a new launch under the same run_id. Not a failure of the
         * job's nodes: numbering goes on, the budget is not charged. */
        rdzvd_job_restart(j, RDZV_MARK_NODE_LOST,
                          j->nin_round == 0 ? "no node of it came back" : NULL, 1, why);
        rdzvd_job_tell_lost(&j->host); /* their hosts may have held replicas */
    }
}

/* close_round's NCCL_REQUEST not queued on peer: as if not asked, if still due (the outbox's). */
void rdzvd_member_nccl_unsent(struct rdzvd_member *m, uint64_t gen, void *peer)
{
    if (m->job->state == JOB_NCCL && gen == m->job->generation && !m->node_rank && m->peer == peer)
        rdzvd_job_end(m->job, "failed", 1, "could not ask node rank 0 for the NCCL id");
}

/* Restarts back off (the first JOIN's restart_backoff, the cap): when a restart's next
 * generation may form. The backoff asks, and arms the job's timer; it moves no job. */

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

void rdzvd_member_ready(struct rdzvd_member *m, uint64_t gen)
{
    struct rdzvd_job *j = m->job;

    /* Ignored: duplicates, other generations', replays by members of the running one or of the
     * one being formed (a late or repeated READY of the generation before: placed, it stopped
     * already, and its next workers are to start). */
    if (m->ready || gen != m->stopping_gen ||
        ((j->state == JOB_RUNNING || j->state == JOB_NCCL) && m->node_rank >= 0))
        return;
    rdzvd_member_set_ready(m, true);
    log_debug("job %s: %s ready after generation %" PRIu64, j->run_id, m->join.host, gen);
    if (j->state == JOB_STOPPING)
        rdzvd_job_check_stopped(j);
    else if (j->state == JOB_FORMING)
        rdzvd_job_try_close(j);
}

void store_not_reopened(struct rdzvd_job *j, uint16_t port, int err)
{
    rdzvd_job_note(j, true,
                   "cannot reopen the store of generation %" PRIu64 " on port %u (%s); workers "
                   "that reconnect to it will fail",
                   j->generation, port, rdzvd_job_strerror(err));
}

/* After node rank 0's answer: 0 (the store in place), 1 (rdzvd's asked for: its answer sends the
 * ROUNDs), or -1 once the job ended (no store at all). */
static int store_ready(struct rdzvd_job *j)
{
    int r = rdzvd_job_store_fallback(j);

    if (r > 0)
        rdzvd_job_note(j, true,
                       "node rank 0 named no store for generation %" PRIu64 "; rdzvd hosts it",
                       j->generation);
    else if (r < 0)
        rdzvd_job_store_failed(j, r);
    return r < 0 ? -1 : r;
}

void rdzvd_job_store_opened(struct rdzvd_job *j, uint64_t ask, uint64_t gen, void *store,
                            uint16_t port, int err)
{
    enum rdzvd_store_then then = j->store_then;

    /* Another ask since, the job gone or moved on: not wanted (its journal goes as its
     * store's would). */
    if (!ask || ask != j->store_ask || gen != j->generation ||
        (then == STORE_THEN_REOPEN ? j->state != JOB_RUNNING : j->state != JOB_NCCL)) {
        if (!err)
            rdzvd_job_store_drop(j, store, !j->shutting_down && !j->unloaded);
        else if (then == STORE_THEN_REOPEN && ask != j->store_ask && !j->store_deferred_gen)
            rdzvd_job_drop_journal(j, gen); /* let go of by close_store, not reopened */
        return;
    }
    j->store_ask = 0;
    if (!err) {
        j->store = store;
        j->store_port = port;
    }
    if (then == STORE_THEN_REOPEN) {
        if (err < 0 && port) { /* taken: any other */
            store_not_reopened(j, port, err);
            if ((err = rdzvd_job_open_store(j, 0, false, STORE_THEN_REOPEN)) == 0)
                return;
        }
        j->store_deferred_gen = 0;
    } else if (err < 0) {
        rdzvd_job_store_failed(j, err);
    } else if (then == STORE_THEN_NCCL) {
        rdzvd_job_ask_rank0(j, j->nccl_want, false);
    } else {
        rdzvd_job_send_rounds(j);
    }
}

void rdzvd_member_store_offer(struct rdzvd_member *m, const char *addr, int64_t port)
{
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
