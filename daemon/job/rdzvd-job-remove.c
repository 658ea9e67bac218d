/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-remove.c: a member removed (lost, cancelled, left, or its job cancelled) and what that
 * does to its job: a restart, a round closed without it, or the job's end with its last
 * member; a job that succeeded when every node has left. */
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
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "proto/rdzv-status.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/job/rdzvd-job-ends.h"
#include "daemon/job/rdzvd-job-status.h"

/* m, its job's last member, goes (why, for people; aside: put aside). A job cancelled while
 * it stopped ends now, not freed as if it might go on. Without a record that waits for its
 * nodes (no --state-dir, no replicas), a job that formed a generation ends "failed" with its last
 * node, which is told so; its end is kept as any, told to a late agent of it, which this rdzvd
 * never rebuilds the job from: only another rdzvd (one restarted, a new leader) may. */
static void end_with_last(struct rdzvd_member *m, const char *why, bool aside)
{
    struct rdzvd_job *j = m->job;
    char what[RDZV_SUMMARY_MAX + 1], rank[32] = "a spare";

    if (j->state == JOB_ENDED || j->shutting_down || (j->cancelled && j->state != JOB_STOPPING) ||
        (!j->cancelled && (aside || !j->generation || j->host.record_table)))
        return;
    m->aside_pending = false;        /* it goes anyway: not told aside first */
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

    if (!why || !charge || !rdzvd_job_uncounted_spent(j))
        return why;
    rdzvd_job_note(j, true, "this restart (%s, a node placed past the bound before it ran) is "
                   "charged to the budget: the job took %d restarts not charged to it within %d "
                   "min, the most it takes", why, RDZVD_JOB_UNCOUNTED_RESTARTS,
                   RDZVD_JOB_UNCOUNTED_WINDOW_MS / 60000);
    return NULL;
}

/* m is removed: lost (its connection closed, or it fell silent), or, with aside, put aside and
 * its agent told so by the EVENT aside. Move the job on. */
void rdzvd_member_remove(struct rdzvd_member *m, const char *why, const struct rdzv_event *aside)
{
    struct rdzvd_job *j = m->job;
    void *peer = m->peer;
    enum job_state st = j->state;
    bool in_round = m->node_rank >= 0, left = m->left_ok, last = j->nmembers == 1, unran;
    bool signalled = m->signalled; /* it left on a signal from outside: nothing is charged */
    /* placed only because MIN needed it, past the bound, and not seen running: charged */
    bool charge = m->placed_spent && !member_seen_running(m);
    const struct rdzvd_job_host *jh = &j->host; /* j's memory outlives the step */
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
        end_with_last(m, why, aside != NULL);
        st = j->state;
    }
    if (in_round && left && st == JOB_RUNNING) { /* its workers were done: accounted for (R17b) */
        j->rank_done[rank] = true;
        j->nin_done++;
        (void)rdzvd_job_save_done(j, rank); /* a restart of rdzvd counts it done too */
    }
    rdzvd_member_forget(m);
    rdzvd_member_unlink(m);
    if (peer && aside)
        rdzvd_job_peer_put_aside(j, peer, aside);
    else if (peer)
        rdzvd_job_peer_close(j, peer, why); /* its member is detached: no second report */
    if (!left && st != JOB_ENDED)
        rdzvd_job_tell_lost(jh); /* a failure, not a member that was done */
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

void rdzvd_jobs_drop_all(struct rdzv_list *jobs)
{
    while (!rdzv_list_empty(jobs)) {
        struct rdzvd_job *j = rdzv_container_of(jobs->next, struct rdzvd_job, node);
        bool last = false;

        j->shutting_down = true;
        if (j->nmembers == 0) { /* rebuilt at start or election, nobody back yet */
            rdzvd_job_free(j);
            continue;
        }
        /* rdzvd_member_unlink() frees the job together with its last member. */
        while (!last) {
            struct rdzvd_member *m = rdzv_container_of(j->members.next, struct rdzvd_member, node);

            last = j->nmembers == 1;
            rdzvd_member_unlink(m);
        }
    }
}

int rdzvd_jobs_end_waiting(const struct rdzvd_job_host *h, const char *run_id, const char *type,
                           int64_t exit_code, const char *why, char *err, size_t errlen)
{
    struct rdzvd_job_record rec = {.generation = 0};
    struct rdzvd_job_record end = {.generation = 0, .has_end = true};
    int r;

    if (rdzvd_job_find(h->jobs, run_id) || !h->record_table ||
        rdzvd_job_record_get(h->record_table, run_id, &rec) < 0) {
        snprintf(err, errlen, "job '%s' is not waiting for its nodes on this rdzvd", run_id);
        return -ENOENT;
    }
    /* Nobody to tell now, its record to end, and how it ended kept for its agents that come
     * back (P6). */
    memcpy(end.run_id, rec.run_id, sizeof(end.run_id));
    rdzvd_job_end_set(&end.end, rec.run_id, type, exit_code, why, rdzvd_job_wall_s(h),
                      rec.generation, rec.restart_count);
    rdzvd_job_record_clear(&rec);
    if ((r = rdzvd_job_host_decide(h, h->record_table, RDZVD_DECIDE_ENDED, &end)) < 0) {
        snprintf(err, errlen, "rdzvd could not end job '%s' in its job table (%s)", run_id,
                 strerror(-r));
        return r;
    }
    rdzvd_job_tell_taken(h, run_id);
    rdzvd_job_tell_end(h, &end.end);
    return 0;
}

int rdzvd_jobs_cancel(const struct rdzvd_job_host *h, const char *run_id, const char *reason,
                      char *err, size_t errlen)
{
    struct rdzvd_job *j = rdzvd_job_find(h->jobs, run_id);
    struct rdzvd_job_record rec = {.generation = 0};
    char why[RDZV_SUMMARY_MAX + 1];
    int r;

    if (!j && h->record_table && rdzvd_job_record_get(h->record_table, run_id, &rec) == 0) {
        /* Waiting for its nodes. */
        rdzvd_job_record_clear(&rec);
        snprintf(why, sizeof(why), "cancelled by the operator%s%s", reason[0] ? ": " : "",
                 reason);
        r = rdzvd_jobs_end_waiting(h, run_id, "cancelled", 128 + SIGTERM, why, err, errlen);
        if (r < 0)
            return r;
        log_warn("job=%s cancelled by the operator while it waited for its nodes%s%s", run_id,
                 reason[0] ? ": " : "", reason);
        return 0;
    }
    if (!j || j->state == JOB_ENDED) {
        snprintf(err, errlen, "job '%s' is not running on this rdzvd", run_id);
        return -ENOENT;
    }
    if (j->cancelled)
        return 0; /* already ending so */
    snprintf(j->cancel_why, sizeof(j->cancel_why), "cancelled by the operator%s%s",
             reason[0] ? ": " : "", reason);
    j->cancelled = 128 + SIGTERM;
    rdzvd_job_note(j, true, "%s", j->cancel_why);
    if (j->state == JOB_STOPPING)
        rdzvd_job_stop_now(j); /* and ended, recorded before anyone hears it */
    else
        rdzvd_job_end(j, "cancelled", j->cancelled, j->cancel_why);
    if (j->state == JOB_ENDED && j->nmembers == 0)
        rdzvd_job_free(j); /* rebuilt at start or election, nobody back: no member to free it */
    return 0;
}

/* j ended, and a plain JOIN's agent started age_ms ago. One started after the end runs a new
 * job: j, whose members are all away (kept for their agents to be told the outcome), goes now,
 * kept ended as at their deadlines. Whether it went. */
bool rdzvd_job_started_after_end(const struct rdzvd_job *j, int64_t age_ms)
{
    return j->state == JOB_ENDED && age_ms > 0 &&
           (double)age_ms / 1000 < rdzvd_job_wall_s(&j->host) - j->ended_s;
}

bool rdzvd_job_ended_gives_way(struct rdzvd_job *j, int64_t age_ms)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;

    if (!rdzvd_job_started_after_end(j, age_ms))
        return false;
    for_each_member(j, m, pos, tmp) if (m->peer) return false;
    rdzvd_job_note(j, false, "an agent started after the job ended: a new run");
    for_each_member(j, m, pos, tmp) rdzvd_member_unlink(m); /* the last frees j */
    return true;
}

/* Whether j can go on without the members whose agents were signalled: while it forms, any
 * other member may still see it formed (more can join); once formed, its --nnodes MIN must be
 * left. */
static bool job_goes_on(struct rdzvd_job *j)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *o;
    int64_t left = 0;

    for_each_member(j, o, pos, tmp) left += !o->signalled && !o->aside_pending;
    if (j->state == JOB_FORMING)
        return left > 0;
    return left >= j->min;
}

void rdzvd_member_cancel(struct rdzvd_member *m, int64_t sig, const char *reason,
                         const char *sched_job)
{
    struct rdzvd_job *j = m->job;
    struct rdzv_event e = {.type = "left", .generation = j->generation, .exit_code = 128 + sig};
    char what[RDZV_REASON_MAX + 64], buf[16];

    if (j->state == JOB_ENDED || m->signalled)
        return; /* the job is over: the others follow */
    snprintf(what, sizeof(what), "received %s from outside%s%s%s",
             rdzv_signal_name((int)sig, buf, sizeof(buf)),
             reason[0] ? " (" : "", reason, reason[0] ? ")" : "");
    m->signalled = true;
    if (j->cancelled) /* cancelled, not ended (its end not recorded): as below */
        goto out_stopped;
    /* A signal to one agent is that node leaving, as a scheduler that drains or preempts one
     * node means it: a spare just goes, a member is a node lost (a spare takes its ranks, an
     * elastic job goes on), charging nothing. The job is cancelled only when it cannot go on:
     * every agent signalled (scancel), or fewer than MIN nodes left. Only a node of the job's
     * generations can say so: once one formed, a node outside them (a spare, a stranger) just
     * goes, whoever else is away at that moment (a member's connection blipping, rdzvd just
     * restarted and its agents not back yet). A CANCEL naming the scheduler's job (sched_job)
     * is the scheduler ending the whole job: every node is being signalled, so the job is
     * cancelled now rather than each node told it left while the others still ran (R15a). A
     * node done (its LEAVE succeeded in the running generation) takes nothing from the job by
     * going, while another member of the generation remains to end it (a spare cannot): it is
     * accounted for, and nothing restarts (R17b). */
    if ((j->generation == 0 || rdzvd_member_held_place(m)) &&
        (sched_job[0] ||
         (!job_goes_on(j) && !(j->state == JOB_RUNNING && m->left_ok && j->nin_round > 1)))) {
        snprintf(j->cancel_why, sizeof(j->cancel_why), "cancelled: the agent of node %s %s",
                 m->join.host, what);
        j->cancelled = 128 + sig;
        /* Stopping (a worker the same signal reached first started a restart): it ends now
         * too, recorded first, not once every member stopped: until then only memory knew,
         * and an rdzvd restart in between formed the job again. */
        if (j->state == JOB_STOPPING)
            rdzvd_job_stop_now(j);
        else
            rdzvd_job_end(j, "cancelled", j->cancelled, j->cancel_why);
        return;
    }
    snprintf(e.summary, sizeof(e.summary),
             "node %s left job %s: its agent %s; the job goes on without it", m->join.host,
             j->run_id, what);
    rdzvd_member_remove(m, what, &e);
    return;
out_stopped:
    /* Cancelled, yet stopping (its end could not be recorded): it ends once stopped
     * (rdzvd_job_check_stopped). A signalled agent stops its own workers and sends no READY: it
     * counts as stopped, or the job would wait for it until it gave up. */
    if (j->state != JOB_STOPPING)
        return;
    rdzvd_member_set_ready(m, true);
    rdzvd_job_check_stopped(j);
}

void rdzvd_member_leave(struct rdzvd_member *m, uint64_t gen, bool succeeded)
{
    struct rdzvd_job *j = m->job;

    if (j->state == JOB_RUNNING && gen == j->generation && m->node_rank >= 0 && succeeded)
        m->left_ok = true;
    /* R17c: its workers finished on their own as a scale-up restart, or one for a node lost,
     * stopped them: once the generation has stopped, the job ends succeeded rather than
     * re-forming around them. Not for a worker's failure, here or another node's as it
     * stopped: that is no success. */
    else if (j->state == JOB_STOPPING && (j->scaling_up || j->restart_lost) &&
             gen == j->generation && m->node_rank >= 0 && succeeded && !j->stop_failed)
        j->scale_done = true;
    rdzvd_job_check_all_left(j);
}
