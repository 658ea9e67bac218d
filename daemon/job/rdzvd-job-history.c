/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-history.c: a job's failure history (rdzvd-job-record.h, struct
 * rdzvd_job_record_hist): each node's worker failures within the job, charged to its node; the
 * nodes put aside, and released; the nodes lost before they ran; and the restarts not charged
 * to the budget, with their bound. Every decision records the history as it is in memory. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/job/rdzvd-job-sm.h"
#include "common/rdzv-auth.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "proto/rdzv-status.h"
#include "daemon/data/rdzvd-config.h"

static unsigned uncounted_in_window(struct rdzvd_job *j, int64_t now);

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
    j->n_uncounted = rec->n_uncounted < RDZVD_JOB_UNCOUNTED_RESTARTS ? rec->n_uncounted
                                                                     : RDZVD_JOB_UNCOUNTED_RESTARTS;
    memcpy(j->uncounted_ms, rec->uncounted_ms, j->n_uncounted * sizeof(*j->uncounted_ms));
    (void)uncounted_in_window(j, wall_ms(j)); /* one in the future is taken as now */
}

/* ---- the bound on restarts not charged to the budget ----
 * Every restart stops every worker of the job. One not charged to the budget (a scale-up, a
 * re-form around a node that never ran, a signal from outside, a straggler put aside) is caused
 * by a node whose name and node id are only claims, so the bound is the job's: at most
 * RDZVD_JOB_UNCOUNTED_RESTARTS within RDZVD_JOB_UNCOUNTED_WINDOW_MS, whoever asked. */

/* The restarts not counted within the window before now (those older dropped). One later than
 * now (a clock set back, a record written by a host whose clock runs ahead) is taken as now: it
 * delays the next scale-up by one window at most, never for as long as the clocks differ. */
static unsigned uncounted_in_window(struct rdzvd_job *j, int64_t now)
{
    unsigned old = 0;

    for (unsigned i = 0; i < j->n_uncounted; i++)
        if (j->uncounted_ms[i] > now)
            j->uncounted_ms[i] = now;

    while (old < j->n_uncounted && now - j->uncounted_ms[old] >= RDZVD_JOB_UNCOUNTED_WINDOW_MS)
        old++;
    if (old) {
        memmove(&j->uncounted_ms[0], &j->uncounted_ms[old],
                (j->n_uncounted - old) * sizeof(*j->uncounted_ms));
        j->n_uncounted -= old;
    }
    if (j->n_uncounted < RDZVD_JOB_UNCOUNTED_RESTARTS)
        j->uncounted_said = false; /* room again: the next refusal is said again */
    return j->n_uncounted;
}

bool rdzvd_job_uncounted_spent(struct rdzvd_job *j)
{
    return uncounted_in_window(j, wall_ms(j)) >= RDZVD_JOB_UNCOUNTED_RESTARTS;
}

/* The bound's reason, once until there is room again. */
void uncounted_say(struct rdzvd_job *j, const char *what)
{
    if (j->uncounted_said)
        return;
    j->uncounted_said = true;
    rdzvd_job_note(j, true, "%s: the job took %u restarts not charged to its budget within %d "
                   "min (the most it takes, whoever joins); nodes that never ran in it wait as "
                   "spares", what, j->n_uncounted, RDZVD_JOB_UNCOUNTED_WINDOW_MS / 60000);
}

bool rdzvd_job_uncounted_scale_up(struct rdzvd_job *j)
{
    int64_t now = wall_ms(j);
    unsigned k = uncounted_in_window(j, now);

    /* Two slots left at least: the scale-up takes one, and a re-form around its joiners (lost
     * at their ROUND, before they ran) the other, never charged to the budget: a token holder
     * cannot make a healthy job fail (P8d). */
    if (k >= RDZVD_JOB_UNCOUNTED_RESTARTS - 1) {
        uncounted_say(j, "no scale-up now");
        return false;
    }
    /* Spaced, 30 s doubling after the last scale-up: joiners close together come in together.
     * A re-form around a node lost before it ran spaces nothing (the bound counts it): its
     * replacement comes in at once. A gap waited is said nowhere: the joiner asks again at its
     * next HEARTBEAT. */
    return k == 0 || !j->uncounted_last_scale ||
           now - j->uncounted_ms[k - 1] >= (int64_t)RDZVD_JOB_UNCOUNTED_GAP_MS << (k - 1);
}

/* A restart not counted happens now: kept (the decision that follows records it). */
void uncounted_keep(struct rdzvd_job *j)
{
    int64_t now = wall_ms(j);

    if (uncounted_in_window(j, now) ==
        RDZVD_JOB_UNCOUNTED_RESTARTS) { /* a node that ran, past it */
        memmove(&j->uncounted_ms[0], &j->uncounted_ms[1],
                (j->n_uncounted - 1) * sizeof(*j->uncounted_ms));
        j->n_uncounted--;
    }
    j->uncounted_ms[j->n_uncounted++] = now;
    j->uncounted_last_scale = j->scaling_up;
}

/* Whether rdzvd sees m run now: in the generation's round, it took the ROUND (its HEARTBEAT
 * named the generation), and the generation ran past the start-up window by rdzvd's own clock
 * (or was rebuilt: its nodes came back with its resume). A step claimed does not count. */
bool member_seen_running(const struct rdzvd_member *m)
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
bool member_never_ran(const struct rdzvd_member *m)
{
    return !m->ran_gen;
}

/* While forming after a restart, with the bound spent: whether the job forms without the nodes
 * that never ran in it (enough of those that ran are there: MIN); then *ready and *members are
 * of those that ran only. O(members), only with the bound spent. */
bool uncounted_bench(struct rdzvd_job *j, int64_t *ready, int64_t *members)
{
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;
    int64_t r = 0, n = 0;

    if (j->generation == 0 || j->scaling_up || !rdzvd_job_uncounted_spent(j))
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
    /* Logged as rdzvd_job_note does. */
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
    if (rdzvd_job_uncounted_spent(j)) {
        rdzvd_job_note(j, true, "node=%s: its worker failed before rdzvd saw it run, a late "
                       "joiner past the bound: charged to the budget (the job took %d restarts not "
                       "charged to it within %d min, the most it takes)", m->join.host,
                       RDZVD_JOB_UNCOUNTED_RESTARTS, RDZVD_JOB_UNCOUNTED_WINDOW_MS / 60000);
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
