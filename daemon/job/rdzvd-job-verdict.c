/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-verdict.c: verdicts on nodes. A worker's exit is charged to its node (or not: a
 * signal from outside, a failure at start-up); a failed health check, the network pre-flight or
 * the straggler check puts a node aside; the operator's RELEASE lets it back. */
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
#include "common/rdzv-auth.h"
#include "common/rdzv-log.h"
#include "daemon/job/rdzvd-job-ends.h"
#include "daemon/job/rdzvd-job-status.h"
#include "proto/rdzv-status.h"
#include "daemon/data/rdzvd-config.h"

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
           (int64_t)(rdzvd_job_now_ms(&j->host) - j->formed_ms) <
               rdzvd_job_startup_fail_ms(j->host.steps) + extra_ms &&
           !rdzvd_member_rank_progressed(m, local_rank);
}

/* m's start-up failure would put its node aside, but the others' workers may be about to fail
 * alike (a script bug: the job's failure, P4): they are given as long again as it ran, 2 to
 * 5 s, before they are stopped (EVENT restart's startup_grace_ms, 1.17). Only then: a failure
 * that puts nobody aside restarts at once. */
static void startup_grace(struct rdzvd_job *j)
{
    int64_t grace = (int64_t)(rdzvd_job_now_ms(&j->host) - j->formed_ms);

    if (grace < RDZVD_JOB_STARTUP_GRACE_MIN_MS)
        grace = RDZVD_JOB_STARTUP_GRACE_MIN_MS;
    if (grace > rdzvd_job_startup_fail_ms(j->host.steps)) /* GRACE_MAX_MS as set */
        grace = rdzvd_job_startup_fail_ms(j->host.steps);
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
    int64_t since = (int64_t)(rdzvd_job_wall_s(&j->host) * 1000) -
                    (int64_t)(rdzvd_job_now_ms(&j->host) - j->formed_ms);
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
    struct rdzvd_job *j = m->job;
    char when[32], summary[RDZV_SUMMARY_MAX + 1], how[2 * RDZV_REASON_MAX + 64];
    const char *uncounted = NULL; /* counted */
    enum rdzvd_aside aside = RDZVD_ASIDE_NOT;
    struct rdzvd_job_record_fail f;
    bool startup, outside = exit_from_outside(w);
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
        /* A failure as the generation stops: training did not end well, whatever LEAVE crosses
         * the restart (R17c). A signal from outside is no failure of the workers'. One its
         * agent reports with a reason (a hang, its node cut off from rdzvd) is not known to be
         * a success either. */
        if (!outside && !j->stop_failed) {
            j->stop_failed = true;
            if (j->scale_done)
                rdzvd_job_note(j, true, "node=%s: its worker rank %" PRId64 " failed as the "
                                        "restart stopped generation %" PRIu64 ": no success",
                               m->join.host, w->rank, j->generation);
            j->scale_done = false;
        }
        worker_exit_late(m, w);
        return 0;
    }
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
    startup = failed_at_startup(m, w->local_rank, 0);
    /* A late joiner that rdzvd has not seen run: what it reports is a claim, whatever signal or
     * code it names (P7d). Not counted, within the job's bound; its host charged, unless a
     * signal from outside killed it (P1). */
    if (rdzvd_member_exit_unran(m, outside, startup)) {
        const struct rdzvd_job_record_hist *h = rdzvd_job_hist_find(j, m->join.node_id);

        uncounted = "a late joiner's worker failed before rdzvd saw it run";
        startup &= !outside; /* a kill from outside is no start-up failure of its own */
        if (h && h->aside) { /* its host put aside: it goes once the generation stopped */
            m->aside_pending = true;
            j->aside_cause = true;
            if (startup)
                startup_grace(j); /* the others may fail alike: then it is the job's (P4) */
        }
    } else if (outside) { /* killed from outside: the job's failure, not the node's */
        size_t used = strlen(summary);

        if (used < sizeof(summary))
            snprintf(summary + used, sizeof(summary) - used,
                     "; a signal from outside, not counted against the node");
        j->cause_s = w->time;
        rdzvd_job_restart(j, RDZV_MARK_FAILURE, NULL, w->exit_code ? w->exit_code : 1, summary);
        return 0;
    } else { /* a node put aside leaves before the restart: the next generation forms without it */
        f = (struct rdzvd_job_record_fail){
            .rank = w->rank, .local_rank = w->local_rank, .world_size = j->round.world_size,
            .startup = startup};
        aside = rdzvd_job_node_failed(m, f, summary, sizeof(summary));
    }
    if (startup)
        m->startup_gen = j->generation;
    switch (aside) {
    case RDZVD_ASIDE_NOW:
        /* Failed at start-up: the others' reports may still come, and every node failing
         * alike is the job's failure: it goes once the generation stopped, if still aside. */
        if (startup) {
            m->aside_pending = true;
            j->aside_cause = true; /* the recovery is a bad node's, as when it goes at once */
            startup_grace(j);
        } else {
            rdzvd_member_tell_aside(m);
        }
        break;
    case RDZVD_ASIDE_NO_CHOICE: /* a job whose nodes all fail at start-up comes here too */
        rdzvd_job_note(j, true,
                       "node=%s (node id %s): its workers failed %" PRId64 " times; it is not "
                       "put aside: without a spare the job has only its --nnodes MIN of %" PRId64
                       " nodes, so it restarts on the nodes it has",
                       m->join.host, rdzvd_job_named(j, m->join.node_id),
                       rdzvd_job_hist_find(j, m->join.node_id)->failures, j->min);
        break;
    case RDZVD_ASIDE_NOT:
        break;
    }
    j->cause_s = w->time; /* the agent's clock: its worker's exit */
    rdzvd_job_restart(j, RDZV_MARK_FAILURE, uncounted, w->exit_code ? w->exit_code : 1, summary);
    return 0;
}

void rdzvd_job_node_unhealthy(struct rdzvd_member *m, const char *reason)
{
    rdzvd_job_node_aside(m, RDZVD_ASIDE_CHECK, reason);
}

void rdzvd_member_unhealthy(struct rdzvd_member *m, const char *reason)
{
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
    snprintf(why, sizeof(why), "%s: %s",
             slow ? "a straggler"
             : reason_kind == RDZVD_ASIDE_NETWORK ? "failed the network pre-flight"
                                                  : "failed a health check",
             reason);
    snprintf(e.summary, sizeof(e.summary), "node %s (node id %s) is put aside by job %s: %s%s%s",
             m->join.host, rdzvd_job_named(j, m->join.node_id), j->run_id, slow ? "" : "it ",
             why,
             rdzvd_member_held_place(m) ? "" : " (it never held a place in the job: put aside by "
                                        "its node id, not its host)");
    rdzvd_job_note(j, true, "node=%s put aside (node id %s): %s", m->join.host,
                   rdzvd_job_named(j, m->join.node_id), why);
    rdzvd_job_mark(j, RDZV_MARK_PUT_ASIDE, "node %s put aside: %s", m->join.host, why);
    j->aside_cause = true;
    if (slow)
        j->straggler_cause = true;
    /* The root cause names the node's agent: "... (host) is a straggler: ...". */
    snprintf(dropped, sizeof(dropped), "%s%s", slow ? "is " : "", why);
    rdzvd_member_remove(m, dropped, &e);
}

int rdzvd_jobs_release(struct rdzv_list *jobs, const char *run_id, const char *node, char *err,
                       size_t errlen)
{
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

/* The node that is merely slow (rdzvd-job-sm.h,
 * rdzvd_member_straggler_check). In synchronous data-parallel training every rank waits for the
 * slowest, so the job's step rate hides who is slow; each rank's compute time (the time it
 * spent not waiting on the step's collectives, HEARTBEAT progress compute_ms) does not. A
 * node's compute time is its slowest rank's (each rank's the median of its last steps, which a
 * checkpoint step or a data loader's hiccup does not move); its score is that over the job's
 * median (the lower median of its nodes', so that with two nodes the faster is the yardstick).
 * All nodes slowing together (a shared filesystem) moves the median with them and scores
 * nobody; the first steps of a generation (a window not full yet) are not scored. Event-driven:
 * a node is scored when its heartbeat brings its progress, no timer. Loop thread only. */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

/* The lower median of the compute times of j's nodes in the generation whose windows are full,
 * or -1 when fewer than two have one. */
static int64_t job_median(struct rdzvd_job *j)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;
    int64_t *v, med = -1;
    size_t n = 0;

    if (j->nin_round < 2 || !(v = malloc((size_t)j->nin_round * sizeof(*v))))
        return -1;
    for_each_member(j, m, pos, tmp)
    {
        int64_t c = m->node_rank >= 0 ? rdzvd_member_compute_ms(m, true) : -1;

        if (c >= 0 && n < (size_t)j->nin_round)
            v[n++] = c;
    }
    if (n >= 2) {
        qsort(v, n, sizeof(*v), cmp_i64);
        med = v[(n - 1) / 2];
    }
    free(v);
    return med;
}

/* Whether at least half of the job's other nodes in the generation are at threshold_ms too at
 * their last step: every node slowing together (a shared filesystem), their medians turning
 * some steps apart, m's first. */
static bool others_slow_too(struct rdzvd_job *j, const struct rdzvd_member *m, double threshold_ms)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *o;
    int64_t n = 0, slow = 0, c;

    for_each_member(j, o, pos, tmp)
    {
        if (o == m || o->node_rank < 0 || (c = rdzvd_member_last_compute_ms(o)) < 0)
            continue;
        n++;
        slow += (double)c >= threshold_ms;
    }
    return n > 0 && 2 * slow >= n;
}

/* A spare waiting to take a place: a connected member outside the generation. */
static bool spare_waiting(struct rdzvd_job *j)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;

    for_each_member(j, m, pos, tmp) if (m->node_rank < 0 && m->peer && !m->away && !m->signalled)
        return true;
    return false;
}

/* Whether j may put its straggler m aside, and if not why (into why). With a spare, yes; an
 * elastic job above its minimum, when the job without m is faster: with n nodes the job now
 * goes at n / slow, without m at (n - 1) / median, so when the score is above n / (n - 1). */
static bool may_put_aside(struct rdzvd_job *j, const struct rdzvd_member *m, char *why, size_t len)
{
    int64_t n = j->nin_round;

    if (spare_waiting(j))
        return true;
    if (n - 1 < j->min) {
        snprintf(why, len, "no spare is waiting and the job has only its --nnodes MIN of %" PRId64
                 " nodes", j->min);
        return false;
    }
    if (m->straggler_score * (double)(n - 1) <= (double)n) {
        snprintf(why, len, "no spare is waiting, and %" PRId64 " nodes at the others' pace would "
                 "train no faster than %" PRId64 " at its pace", n - 1, n);
        return false;
    }
    return true;
}

void rdzvd_member_straggler_check(struct rdzvd_member *m)
{
    struct rdzvd_job *j = m->job;
    uint64_t now = rdzvd_job_now_ms(&j->host);
    char text[RDZV_REASON_MAX + 1], why[200];
    int64_t mine;

    if (j->straggler_factor <= 0 || j->state != JOB_RUNNING || m->node_rank < 0 ||
        (mine = rdzvd_member_compute_ms(m, true)) < 0)
        return;
    for (int fresh = 0; fresh < 2; fresh++) {
        if (j->median_gen != j->generation || now - j->median_at_ms >= RDZVD_STRAGGLER_MEDIAN_MS ||
            fresh) {
            j->median_compute_ms = job_median(j);
            j->median_at_ms = now;
            j->median_gen = j->generation;
        }
        if (j->median_compute_ms < RDZVD_STRAGGLER_MEDIAN_MIN_MS) {
            m->straggler_score = 0;
            m->slow_since_ms = 0;
            return;
        }
        m->straggler_score = (double)mine / (double)j->median_compute_ms;
        /* At the factor against a median made earlier: made again, once, before it counts
         * (every node slowing together would otherwise score high until the next one). */
        if (m->straggler_score < j->straggler_factor || j->median_at_ms == now)
            break;
    }
    if (m->straggler_score < j->straggler_factor) {
        m->slow_since_ms = 0;
        return;
    }
    if (!m->slow_since_ms) {
        /* From the slowing, not from the median's move some steps later; but from now when
         * the others slow too, their medians still to turn (no node is slow against them). */
        double threshold = j->straggler_factor * (double)j->median_compute_ms;

        m->slow_since_ms = others_slow_too(j, m, threshold)
                               ? now
                               : rdzvd_member_slow_since_ms(m, threshold, now);
    }
    if (now - m->slow_since_ms < (uint64_t)j->straggler_window_ms)
        return;
    snprintf(text, sizeof(text),
             "node rank %" PRId64 "'s slowest rank computes %" PRId64 " ms a step, %.2fx the "
             "job's median of %" PRId64 " ms, for %.0f s (--straggler-factor %.2f)",
             m->node_rank, mine, m->straggler_score, j->median_compute_ms,
             (double)(now - m->slow_since_ms) / 1000, j->straggler_factor);
    if (!m->straggler) {
        m->straggler = true;
        rdzvd_job_note(j, true, "node=%s (node id %s) is a straggler: %s", m->join.host,
                       rdzvd_job_named(j, m->join.node_id), text);
        rdzvd_job_mark(j, RDZV_MARK_STRAGGLER, "node %s is a straggler: %s", m->join.host, text);
    }
    if (!j->straggler_aside)
        return;
    if (!may_put_aside(j, m, why, sizeof(why))) { /* asked again at its next heartbeat */
        if (!m->straggler_kept)
            rdzvd_job_note(j, false, "node=%s, a straggler, is not put aside (--on-straggler "
                                     "aside) while %s", m->join.host, why);
        m->straggler_kept = true; /* said once per generation */
        return;
    }
    rdzvd_member_put_aside(m, RDZVD_ASIDE_STRAGGLER, text);
}
