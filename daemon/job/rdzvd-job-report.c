/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-report.c: what a member reports (decoded by rdzvd-job-wire.c): heartbeats,
 * worker exits (a node put aside after too many), a cancel from outside, a failed health check,
 * LEAVE and READY; and an operator's release of a node put aside. Part of the job state machine
 * (rdzvd-job-impl.h): it moves the job through rdzvd-job-sm.c, never the other way. */
#include "daemon/job/rdzvd-job-sm.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "daemon/job/rdzvd-job-status.h"

int rdzvd_jobs_release(struct rdzv_list *jobs, const char *run_id, const char *node, char *err,
                       size_t errlen)
{
    RDZVD_JOB_STEP;
    struct rdzvd_job *j = rdzvd_job_find(jobs, run_id);

    if (!j || j->state == JOB_ENDED) {
        snprintf(err, errlen, "job '%s' is not running on this rdzvd (its agents rebuild it on "
                              "the leader within a heartbeat timeout of a change)", run_id);
        return -ENOENT;
    }
    return rdzvd_job_release(j, node, err, errlen);
}

uint64_t rdzvd_jobs_held(const struct rdzvd_job_host *h)
{
    uint64_t n = h->ended ? h->ended->n_waiting + h->ended->n_pending : 0;
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, h->jobs)
        n++;
    return n;
}

int rdzvd_jobs_end_waiting(const struct rdzvd_job_host *h, const char *run_id, const char *type,
                           int64_t exit_code, const char *why, char *err, size_t errlen)
{
    RDZVD_JOB_STEP;
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
    rdzvd_job_end_set(&end.end, rec.run_id, type, exit_code, why, rdzvd_job_wall_s(),
                      rec.generation, rec.restart_count);
    rdzvd_job_record_clear(&rec);
    if ((r = rdzvd_job_decide(h->record_table, RDZVD_DECIDE_ENDED, &end)) < 0) {
        snprintf(err, errlen, "rdzvd could not end job '%s' in its job table (%s)", run_id,
                 strerror(-r));
        return r;
    }
    if (h->take_waiting && h->ended)
        (void)h->take_waiting(h->ended, run_id);
    if (h->keep_end && h->ended)
        h->keep_end(h->ended, &end.end);
    return 0;
}

int rdzvd_jobs_cancel(const struct rdzvd_job_host *h, const char *run_id, const char *reason,
                      char *err, size_t errlen)
{
    RDZVD_JOB_STEP;
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

const char *rdzvd_member_run_id(const struct rdzvd_member *m)
{
    return m->job->run_id;
}

uint64_t rdzvd_member_heartbeat(struct rdzvd_member *m)
{
    RDZVD_JOB_STEP;
    rdzvd_member_check_stall(m);
    /* The first HEARTBEAT of its generation comes as its agent takes the ROUND, before its
     * workers start (uv_spawn may hold its loop): the start grace lasts until the next. */
    rdzvd_member_hb_arm(m, (uint64_t)m->job->hb_timeout_ms *
                               (m->ran_now ? RDZVD_JOB_INIT_GRACE_FACTOR : 1));
    m->ran_now = false;
    return m->job->generation;
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

/* Signals that come from outside a worker (a kill, a hang-up, a terminal's, a peer's socket
 * gone), as opposed to the ones a process raises on itself when it crashes (SIGSEGV, SIGBUS,
 * SIGABRT, SIGFPE, SIGILL, ...), which count against its node. */
static bool signal_from_outside(int64_t sig)
{
    return sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT ||
           sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGPIPE;
}

/* Killed from outside (the scheduler, an operator, the kernel's OOM killer: a signal the agent
 * did not send, with no reason of its own). A shell or launcher between the agent and the
 * process reports its child's signal N as exit code 128 + N, as POSIX shells do. */
static bool exit_from_outside(const struct rdzv_worker_exit *w)
{
    return !w->reason[0] &&
           (signal_from_outside(w->signal) ||
            (w->signal <= 0 && w->exit_code > 128 && signal_from_outside(w->exit_code - 128)));
}

/* Whether m's local rank failed at start-up: soon after its generation formed (within
 * extra_ms more: a generation that stops after a start-up failure gave the others' workers its
 * grace, and a second of slack for the report), and before it reported a step. */
static bool failed_at_startup(const struct rdzvd_member *m, int64_t local_rank, int64_t extra_ms)
{
    const struct rdzvd_job *j = m->job;

    return j->formed_ms &&
           (int64_t)(rdzvd_job_now_ms() - j->formed_ms) < rdzvd_job_startup_fail_ms + extra_ms &&
           !rdzvd_member_rank_progressed(m, local_rank);
}

/* m's start-up failure would put its node aside, but the others' workers may be about to fail
 * alike (a script bug: the job's failure, P4): they are given as long again as it ran, 2 to
 * 5 s, before they are stopped (EVENT restart's startup_grace_ms, 1.17). Only then: a failure
 * that puts nobody aside restarts at once. */
static void startup_grace(struct rdzvd_job *j)
{
    int64_t grace = (int64_t)(rdzvd_job_now_ms() - j->formed_ms);

    if (grace < RDZVD_JOB_STARTUP_GRACE_MIN_MS)
        grace = RDZVD_JOB_STARTUP_GRACE_MIN_MS;
    if (grace > rdzvd_job_startup_fail_ms) /* RDZVD_JOB_STARTUP_GRACE_MAX_MS as set */
        grace = rdzvd_job_startup_fail_ms;
    j->startup_grace_ms = grace;
}

/* Whether two workers' errors (WORKER_EXIT error) say the same, their numbers left out (ranks,
 * ports, addresses, pointers): each run of digits, or of hex digits after "0x", is one '#'. */
static const char *past_number(const char *s)
{
    bool hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');

    for (s += hex ? 2 : 0; (*s >= '0' && *s <= '9') ||
                           (hex && ((*s >= 'a' && *s <= 'f') || (*s >= 'A' && *s <= 'F')));)
        s++;
    return s;
}

static bool errors_alike(const char *a, const char *b)
{
    for (;;) {
        bool na = *a >= '0' && *a <= '9', nb = *b >= '0' && *b <= '9';

        if (na != nb || (!na && *a != *b))
            return false;
        if (!*a)
            return true;
        a = na ? past_number(a) : a + 1;
        b = nb ? past_number(b) : b + 1;
    }
}

/* A worker of m failed in a generation that already stops (another node's failure came first).
 * Every node failing at start-up in the same generation with the same error is the job's own
 * failure (a script bug, a bad input): the start-up failures charged to the others in it are
 * taken back, so that no node is put aside for it and the job fails once its restart budget is
 * spent. A node whose workers die of another error (a connection that the first node's dead
 * worker closed) does not fail alike: the first node keeps its charge. Any other late report
 * changes nothing (the first one made the restart). */
static void worker_exit_late(struct rdzvd_member *m, const struct rdzv_worker_exit *w)
{
    struct rdzvd_job *j = m->job;
    int64_t since =
        (int64_t)(rdzvd_job_wall_s() * 1000) - (int64_t)(rdzvd_job_now_ms() - j->formed_ms);
    struct rdzvd_job_record_hist *before;
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *o;
    int64_t alike = 0, extra = j->stopping_grace_ms ? j->stopping_grace_ms + 1000 : 0;
    int n;

    if (!failed_at_startup(m, w->local_rank, extra) || w->reason[0] || exit_from_outside(w) ||
        m->startup_gen == j->generation)
        return;
    if (j->first_error_gen == j->generation && !errors_alike(j->first_error, w->error)) {
        rdzvd_job_note(j, false,
                       "node=%s: its worker rank %" PRId64 " failed at start-up of another error "
                       "than the first failure's (%s%s%s, not %s%s%s): not the job's failure",
                       m->join.host, w->rank, w->error[0] ? "\"" : "",
                       w->error[0] ? w->error : "none said", w->error[0] ? "\"" : "",
                       j->first_error[0] ? "\"" : "",
                       j->first_error[0] ? j->first_error : "none said",
                       j->first_error[0] ? "\"" : "");
        return;
    }
    m->startup_gen = j->generation;
    /* Every node of the generation, not some: one bad node's start-up failure often makes the
     * others' workers fail at start-up too (their collectives' peer is gone). */
    for_each_member(j, o, pos, tmp) alike += o->node_rank >= 0 && o->startup_gen == j->generation;
    if (alike < j->round.nnodes || !j->n_hist)
        return;
    if (!(before = malloc(j->n_hist * sizeof(*before)))) {
        log_error("job=%s: out of memory; start-up failures of every node left charged",
                  j->run_id);
        return;
    }
    memcpy(before, j->hist, j->n_hist * sizeof(*before));
    if ((n = rdzvd_job_fails_alike(m, since)) > 0 && rdzvd_job_save_aside(j) < 0) {
        memcpy(j->hist, before, j->n_hist * sizeof(*before)); /* as its record has it */
        n = 0;
    }
    free(before);
    if (n > 0)
        rdzvd_job_note(j, true,
                       "every node of generation %" PRIu64 " failed at start-up: the job's "
                       "failure, not a node's (%d charge(s) taken back)", j->generation, n);
}

int rdzvd_member_worker_exit(struct rdzvd_member *m, const struct rdzv_worker_exit *w, char *err,
                             size_t errlen)
{
    RDZVD_JOB_STEP;
    struct rdzvd_job *j = m->job;
    char when[32], summary[RDZV_SUMMARY_MAX + 1], how[2 * RDZV_REASON_MAX + 64];
    struct rdzvd_job_record_fail f;
    time_t secs;
    struct tm tm;

    if ((j->state != JOB_RUNNING && j->state != JOB_STOPPING) ||
        w->generation != j->generation || m->node_rank < 0)
        return 0; /* a late report from an earlier generation, or the job already moved on */
    if (w->local_rank < 0 || w->local_rank >= m->join.nproc ||
        w->rank != m->rank_offset + w->local_rank) {
        snprintf(err, errlen,
                 "WORKER_EXIT: rank %" PRId64 " (local rank %" PRId64 ") is not one of this "
                 "node's ranks %" PRId64 "..%" PRId64,
                 w->rank, w->local_rank, m->rank_offset, m->rank_offset + m->join.nproc - 1);
        return -EINVAL;
    }
    if (j->state == JOB_STOPPING) {
        worker_exit_late(m, w);
        return 0;
    }
    m->failures++;
    secs = (time_t)w->time; /* the parser bounds it */
    if (!gmtime_r(&secs, &tm) || !strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(when, sizeof(when), "?");
    if (w->reason[0]) /* the agent failed it: say why, not how it ended */
        snprintf(how, sizeof(how), "%s", w->reason);
    else if (w->signal > 0)
        snprintf(how, sizeof(how), "was killed by signal %" PRId64 " (%s)%s%s", w->signal,
                 strsignal((int)w->signal), w->error[0] ? ": " : "", w->error);
    else
        snprintf(how, sizeof(how), "exited with code %" PRId64 "%s%s", w->exit_code,
                 w->error[0] ? ": " : "", w->error);
    j->first_error_gen = j->generation; /* the others' start-up failures are compared with it */
    snprintf(j->first_error, sizeof(j->first_error), "%s", w->error);
    snprintf(summary, sizeof(summary),
             "root cause: worker rank %" PRId64 " (local rank %" PRId64 ") on node rank %" PRId64
             " (%s) %s at %s (generation %" PRIu64 ")",
             w->rank, w->local_rank, m->node_rank, m->join.host, how, when, j->generation);
    /* Killed from outside: the job's failure, not the node's. */
    if (exit_from_outside(w)) {
        size_t used = strlen(summary);

        if (used < sizeof(summary))
            snprintf(summary + used, sizeof(summary) - used,
                     "; a signal from outside, not counted against the node");
        j->cause_s = w->time;
        rdzvd_job_restart(j, RDZV_MARK_FAILURE, NULL, w->exit_code ? w->exit_code : 1, summary);
        return 0;
    }
    /* A node put aside leaves before the restart: the next generation forms without it. */
    f = (struct rdzvd_job_record_fail){
        .rank = w->rank, .local_rank = w->local_rank, .world_size = j->round.world_size,
        .startup = failed_at_startup(m, w->local_rank, 0)};
    if (f.startup)
        m->startup_gen = j->generation;
    switch (rdzvd_job_node_failed(m, f, summary, sizeof(summary))) {
    case RDZVD_ASIDE_NOW:
        /* Failed at start-up: the others' reports may still come, and every node failing
         * alike is the job's failure: it goes once the generation stopped, if still aside. */
        if (f.startup) {
            m->aside_pending = true;
            j->aside_cause = true; /* the recovery is a bad node's, as when it goes at once */
            startup_grace(j);
        } else {
            rdzvd_member_dismiss(m);
        }
        break;
    case RDZVD_ASIDE_NO_CHOICE: /* a job whose nodes all fail at start-up comes here too */
        rdzvd_job_note(j, true,
                       "node=%s (node id %s): its workers failed %" PRId64 " times; it is not "
                       "put aside: without a spare the job has only its --nnodes MIN of %" PRId64
                       " nodes, so it restarts on the nodes it has",
                       m->join.host, m->join.node_id,
                       rdzvd_job_hist_find(j, m->join.node_id)->failures, j->min);
        break;
    case RDZVD_ASIDE_NOT:
        break;
    }
    j->cause_s = w->time; /* the agent's clock: its worker's exit */
    rdzvd_job_restart(j, RDZV_MARK_FAILURE, NULL, w->exit_code ? w->exit_code : 1, summary);
    return 0;
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

void rdzvd_member_cancel(struct rdzvd_member *m, int64_t sig, const char *reason)
{
    RDZVD_JOB_STEP;
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
     * restarted and its agents not back yet). */
    if ((j->generation == 0 || rdzvd_member_held_place(m)) && !job_goes_on(j)) {
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
    rdzvd_member_drop(m, what, &e);
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

void rdzvd_member_unhealthy(struct rdzvd_member *m, const char *reason)
{
    RDZVD_JOB_STEP;
    rdzvd_member_put_aside(m, RDZVD_ASIDE_CHECK, reason);
}

void rdzvd_member_put_aside(struct rdzvd_member *m, unsigned reason_kind, const char *reason)
{
    struct rdzvd_job *j = m->job;
    bool restarts = j->state == JOB_RUNNING && m->node_rank >= 0 && !m->left_ok;
    bool slow = reason_kind == RDZVD_ASIDE_STRAGGLER;
    struct rdzv_event e = {
        .type = "put_aside", .generation = j->generation, .exit_code = RDZV_EXIT_PUT_ASIDE};
    char why[RDZV_REASON_MAX + 64], dropped[RDZV_REASON_MAX + 68];
    int r;

    if (j->state == JOB_ENDED)
        return; /* its agent is leaving anyway */
    rdzvd_job_node_aside(m, reason_kind, reason);
    /* Decided and recorded first: with a restart, by the restart's own decision (which carries
     * the history); without one, by its own. */
    if (!restarts && (r = rdzvd_job_save_aside(j)) < 0) {
        char fail[RDZV_SUMMARY_MAX + 1];

        snprintf(fail, sizeof(fail),
                 "rdzvd could not record that node %s was put aside in its job table (%s)",
                 m->join.host, strerror(-r));
        rdzvd_job_end(j, "failed", 1, fail);
        return;
    }
    snprintf(why, sizeof(why), "%s: %s", slow ? "a straggler" : "failed a health check", reason);
    snprintf(e.summary, sizeof(e.summary), "node %s (node id %s) is put aside by job %s: %s%s%s",
             m->join.host, m->join.node_id, j->run_id, slow ? "" : "it ", why,
             rdzvd_member_held_place(m) ? "" : " (it never held a place in the job: this node id "
                                        "only, not its host)");
    rdzvd_job_note(j, true, "node=%s put aside (node id %s): %s", m->join.host, m->join.node_id,
                   why);
    rdzvd_job_mark(j, RDZV_MARK_PUT_ASIDE, "node %s put aside: %s", m->join.host, why);
    j->aside_cause = true;
    if (slow)
        j->straggler_cause = true;
    /* The root cause names the node's agent: "... (host) is a straggler: ...". */
    snprintf(dropped, sizeof(dropped), "%s%s", slow ? "is " : "", why);
    rdzvd_member_drop(m, dropped, &e);
}

void rdzvd_member_leave(struct rdzvd_member *m, uint64_t gen, bool succeeded)
{
    RDZVD_JOB_STEP;
    struct rdzvd_job *j = m->job;

    if (j->state == JOB_RUNNING && gen == j->generation && m->node_rank >= 0 && succeeded)
        m->left_ok = true;
    rdzvd_job_check_all_left(j);
}

void rdzvd_member_ready(struct rdzvd_member *m, uint64_t gen)
{
    RDZVD_JOB_STEP;
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
