/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-status.c: the daemon's status (rdzvd-job-status.h) as a struct
 * rdzv_status (proto/rdzv-status.h): its counters and, per job, its state, generation,
 * restarts, nodes, ranks' progress and recent events. Reads the job state machine's structs;
 * changes nothing. */
#include "daemon/job/rdzvd-job-world.h"
#include "daemon/job/rdzvd-job-status.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-status.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "daemon/server/rdzvd-server.h"

_Static_assert(RDZVD_JOB_EVENTS <= RDZV_STATUS_EVENTS, "status holds every recent event");
_Static_assert(sizeof(((struct rdzvd_job *)0)->events[0].text) <= RDZV_STATUS_TEXT_MAX + 1,
               "status holds a whole event text");

static void member_status(const struct rdzvd_member *m, uint64_t now, struct rdzv_status_node *n)
{
    /* The failures charged to the node (its history's, as --bad-node-failures counts them): not
     * a signal from outside, a rank that failed on another node first, a start-up failure taken
     * back. */
    const struct rdzvd_job_record_hist *h = rdzvd_job_hist_find(m->job, m->join.node_id);

    snprintf(n->host, sizeof(n->host), "%s", m->join.host);
    snprintf(n->node_id, sizeof(n->node_id), "%s", m->join.node_id);
    n->node_rank = m->node_rank;
    n->workers = m->join.nproc;
    n->last_heartbeat_age_s = (double)(now - m->last_seen_ms) / 1000;
    n->age_s = (double)(now - m->joined_ms) / 1000;
    n->failures = h ? h->failures : 0;
    /* Without a rank while the job forms, a member waits for its peers (no generation runs
     * without it yet); only beside a running generation is it a spare. */
    bool forming = m->job->state == JOB_FORMING;

    n->spare = m->node_rank < 0 && m->ready && !forming;
    n->connected = m->peer != NULL;
    n->compute_ms = rdzvd_member_compute_ms(m, false);
    n->loop_stall_max_s = m->has_loop_stall ? (double)m->loop_stall_ms / 1000 : -1;
    n->straggler_score = m->straggler_score;
    n->preflight_mbps = m->pf_checked ? m->pf_best : -1;
    n->straggler = m->straggler;
    snprintf(n->state, sizeof(n->state), "%s",
             m->node_rank >= 0 ? (m->ready ? "stopped" : "running")
             : !m->ready       ? "stopping"
             : forming         ? "waiting"
                               : "spare");
}

/* At most RDZV_STATUS_SHOW_MEMBERS of j's members into sj->nodes, the generation's first, in
 * join order; the rest counted in sj->members_left_out (anyone may add spares). */
static int job_members_status(const struct rdzvd_job *j, uint64_t now, struct rdzv_status_job *sj)
{
    size_t n = (size_t)j->nmembers, k = 0;
    struct rdzv_list *pos, *tmp;
    struct rdzvd_member *m;
    int r;

    if (n > RDZV_STATUS_SHOW_MEMBERS)
        n = RDZV_STATUS_SHOW_MEMBERS;
    r = rdzv_status_alloc_nodes(sj, n);
    if (r < 0)
        return r;
    for (int ranked = 1; ranked >= 0; ranked--)
        for_each_member(j, m, pos, tmp)
        {
            if ((m->node_rank >= 0) != ranked)
                continue;
            if (k < n)
                member_status(m, now, &sj->nodes[k++]);
            else
                sj->members_left_out++;
        }
    return 0;
}

/* j's status into sj at now (wall_s: the wall clock's now); with_timeline: with its timeline
 * too; brief: without its nodes and ranks (a line of a list). */
static int job_status(const struct rdzvd_job *j, uint64_t now, double wall_s,
                      struct rdzv_status_job *sj, bool with_timeline, bool brief)
{
    struct rdzv_status_timeline tl;
    struct rdzv_cost c;
    unsigned first = j->nevents > RDZVD_JOB_EVENTS ? j->nevents - RDZVD_JOB_EVENTS : 0;
    int r;

    r = brief ? 0 : job_members_status(j, now, sj);
    if (r < 0)
        return r;
    for (unsigned i = first; i < j->nevents; i++) {
        struct rdzv_status_event *e = &sj->events[sj->n_events++];

        e->time = j->events[i % RDZVD_JOB_EVENTS].time;
        snprintf(e->text, sizeof(e->text), "%s", j->events[i % RDZVD_JOB_EVENTS].text);
    }
    snprintf(sj->run_id, sizeof(sj->run_id), "%s", j->run_id);
    snprintf(sj->state, sizeof(sj->state), "%s", rdzvd_job_state_names[j->state]);
    sj->generation = j->generation;
    sj->restart_count = j->restart_count;
    sj->max_restarts = j->max_restarts;
    sj->min_nodes = j->min;
    sj->max_nodes = j->max;
    sj->nodes_in_generation = j->nin_round;
    sj->world_size = j->round.world_size;
    sj->age_s = (double)(now - j->created_ms) / 1000;
    sj->store_port = j->store ? (int)j->store_port : 0;
    rdzvd_job_aside_status(j, sj);
    r = brief ? 0 : rdzvd_job_progress_status(j, now, sj);
    if (r < 0)
        return r;
    sj->steps_per_second = rdzvd_timeline_status(&j->timeline, wall_s, &tl);
    sj->rate_known = sj->steps_per_second >= 0;
    if (!sj->rate_known)
        sj->steps_per_second = 0;
    if (with_timeline) {
        r = rdzv_status_alloc_timeline(sj);
        if (r < 0)
            return r;
        *sj->timeline = tl;
        sj->timeline->cost[0] = '\0';
        if (rdzv_cost_of(&tl, j->state == JOB_ENDED ? j->ended_s : wall_s, &c) == 0 &&
            rdzv_cost_format(&c, sj->timeline->cost, sizeof(sj->timeline->cost)) < 0)
            sj->timeline->cost[0] = '\0';
    }
    if (j->state == JOB_ENDED) {
        sj->ended = true;
        sj->duration_s = sj->ended_age_s = -1; /* known once its last member is gone */
        snprintf(sj->outcome_type, sizeof(sj->outcome_type), "%s", j->outcome.type);
        sj->outcome_exit_code = j->outcome.exit_code;
        snprintf(sj->outcome_summary, sizeof(sj->outcome_summary), "%s", j->outcome.summary);
    }
    return 0;
}

/* ---- ended jobs ---- */

struct ended_job {
    struct rdzv_list node;
    uint64_t ended_ms;
    double ended_s; /* as its end was recorded (unix s): the same end read back matches it */
    struct rdzv_status_job st; /* no nodes, no ranks; a timeline (owned) in the newest few */
};

void rdzvd_ended_jobs_init(struct rdzvd_ended_jobs *e, uint64_t keep_ms, uint64_t max)
{
    rdzv_list_init(&e->list);
    rdzv_list_init(&e->waiting);
    e->n = e->n_waiting = e->n_ended = 0;
    e->max = max;
    e->keep_ms = keep_ms;
}

static void ended_drop_oldest(struct rdzvd_ended_jobs *e)
{
    struct ended_job *x = rdzv_container_of(e->list.next, struct ended_job, node);

    rdzv_list_del(&x->node);
    rdzv_status_job_free_arrays(&x->st);
    free(x);
    e->n--;
}

struct waiting_job {
    struct rdzv_list node;
    uint64_t since_ms;
    uint16_t port;
    char run_id[RDZV_ID_MAX + 1];
};

static void waiting_drop_oldest(struct rdzvd_ended_jobs *e)
{
    struct waiting_job *x = rdzv_container_of(e->waiting.next, struct waiting_job, node);

    rdzv_list_del(&x->node);
    free(x);
    e->n_waiting--;
}

void rdzvd_ended_jobs_free(struct rdzvd_ended_jobs *e)
{
    while (e->n > 0)
        ended_drop_oldest(e);
    rdzvd_waiting_jobs_clear(e);
}

void rdzvd_waiting_jobs_clear(struct rdzvd_ended_jobs *e)
{
    while (e->n_waiting > 0)
        waiting_drop_oldest(e);
}

static struct waiting_job *waiting_find(const struct rdzvd_ended_jobs *e, const char *run_id)
{
    struct rdzv_list *pos;

    for (pos = e->waiting.prev; pos != &e->waiting; pos = pos->prev) {
        struct waiting_job *x = rdzv_container_of(pos, struct waiting_job, node);

        if (strcmp(x->run_id, run_id) == 0)
            return x;
    }
    return NULL;
}

uint64_t rdzvd_waiting_jobs_peek(const struct rdzvd_ended_jobs *e, const char *run_id)
{
    const struct waiting_job *x = waiting_find((struct rdzvd_ended_jobs *)e, run_id);

    return x ? x->since_ms : 0;
}

uint64_t rdzvd_waiting_jobs_take(struct rdzvd_ended_jobs *e, const char *run_id)
{
    struct waiting_job *x = waiting_find(e, run_id);
    uint64_t since;

    if (!x)
        return 0;
    since = x->since_ms;
    rdzv_list_del(&x->node);
    free(x);
    e->n_waiting--;
    return since;
}

bool rdzvd_waiting_jobs_port(const struct rdzvd_ended_jobs *e, uint16_t port)
{
    struct rdzv_list *pos;

    for (pos = e->waiting.next; pos != &e->waiting; pos = pos->next)
        if (rdzv_container_of(pos, struct waiting_job, node)->port == port)
            return true;
    return false;
}

void rdzvd_waiting_jobs_add(struct rdzvd_ended_jobs *e, const char *run_id, uint64_t since_ms,
                            uint16_t port)
{
    struct waiting_job *x;
    struct rdzv_list *pos;

    (void)rdzvd_waiting_jobs_take(e, run_id);
    if (!(x = calloc(1, sizeof(*x)))) {
        log_error("job=%s: out of memory: listed as waiting since rdzvd started, and not "
                  "abandoned", run_id);
        return;
    }
    x->since_ms = since_ms;
    x->port = port;
    snprintf(x->run_id, sizeof(x->run_id), "%s", run_id);
    /* In since order (a note of the rebuild window's end may come after a later one's). */
    for (pos = e->waiting.prev; pos != &e->waiting; pos = pos->prev)
        if (rdzv_container_of(pos, struct waiting_job, node)->since_ms <= since_ms)
            break;
    rdzv_list_add_tail(pos->next, &x->node);
    e->n_waiting++;
}

bool rdzvd_waiting_jobs_first(const struct rdzvd_ended_jobs *e, char run_id[RDZV_ID_MAX + 1],
                              uint64_t *since_ms)
{
    const struct waiting_job *x;

    if (e->n_waiting == 0)
        return false;
    x = rdzv_container_of(e->waiting.next, struct waiting_job, node);
    memcpy(run_id, x->run_id, RDZV_ID_MAX + 1);
    *since_ms = x->since_ms;
    return true;
}

/* Since when run_id waits for its nodes (the monotonic clock): its note (*noted), else start
 * (a record this rdzvd found and has not noted: a follower's, or rebuilt and in memory). */
static uint64_t waiting_since(const struct rdzvd_ended_jobs *e, const char *run_id,
                              uint64_t start_ms, bool *noted)
{
    const struct waiting_job *x = e ? waiting_find(e, run_id) : NULL;

    *noted = x != NULL;
    return x ? x->since_ms : start_ms;
}

/* For rdzvd_store_foreach: the run ids of the job table's records not in memory. */
struct waiting_scan {
    const struct rdzv_list *jobs;
    char (*ids)[RDZV_ID_MAX + 1];
    size_t n, cap;
};

#define JOB_RECORD_PREFIX "job/" /* rdzvd-job-records.c's keys */

static int waiting_scan_one(const uint8_t *key, size_t klen, void *ud)
{
    struct waiting_scan *w = ud;
    size_t plen = strlen(JOB_RECORD_PREFIX);
    char id[RDZV_ID_MAX + 1];

    if (klen <= plen || klen - plen > RDZV_ID_MAX || memcmp(key, JOB_RECORD_PREFIX, plen) != 0)
        return 0;
    memcpy(id, key + plen, klen - plen);
    id[klen - plen] = '\0';
    if (strlen(id) != klen - plen || rdzvd_job_find((struct rdzv_list *)w->jobs, id))
        return 0;
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        void *p = realloc(w->ids, cap * sizeof(*w->ids));

        if (!p)
            return -ENOMEM;
        w->ids = p;
        w->cap = cap;
    }
    memcpy(w->ids[w->n++], id, sizeof(id));
    return 0;
}

/* The waiting job run_id as its record in t has it, into sj, at now. */
static void waiting_status(struct rdzvd_store *t, const char *run_id, uint64_t since_ms,
                           struct rdzvd_job_now now, uint64_t abandon_ms,
                           struct rdzv_status_job *sj)
{
    char until[80] = "";
    struct rdzvd_job_record rec = {.generation = 0};
    struct rdzv_status_event *ev = &sj->events[0];
    double ago = now.ms > since_ms ? (double)(now.ms - since_ms) / 1000 : 0;
    time_t since = (time_t)(now.wall_s - ago);
    char when[32] = "?";
    struct tm tm;

    snprintf(sj->run_id, sizeof(sj->run_id), "%s", run_id);
    snprintf(sj->state, sizeof(sj->state), "waiting");
    if (rdzvd_job_record_get(t, run_id, &rec) == 0) {
        sj->generation = rec.generation;
        sj->restart_count = rec.restart_count;
        sj->max_restarts = rec.max_restarts;
        sj->min_nodes = rec.min;
        sj->max_nodes = rec.max;
        sj->world_size = rec.running ? rec.world_size : 0;
        rdzvd_job_record_clear(&rec);
    }
    sj->age_s = ago;
    sj->duration_s = sj->ended_age_s = -1;
    sj->n_events = 1;
    ev->time = now.wall_s - ago;
    if (gmtime_r(&since, &tm))
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
    if (abandon_ms) {
        time_t end = since + (time_t)(abandon_ms / 1000);

        if (gmtime_r(&end, &tm))
            strftime(until, sizeof(until),
                     ", or it ends as abandoned at %Y-%m-%d %H:%M:%S UTC (--abandon-after)", &tm);
    }
    snprintf(ev->text, sizeof(ev->text),
             "waiting for its nodes since %s (no agent connected; its record is kept until the "
             "job ends%s)",
             when, until);
}

int rdzvd_status_add_waiting(struct rdzv_status *st, struct rdzvd_store *t,
                             const struct rdzv_list *jobs, const struct rdzvd_ended_jobs *e,
                             uint64_t start_ms, struct rdzvd_job_now now)
{
    struct waiting_scan w = {.jobs = jobs};
    struct rdzv_status_job *sj;
    int r = 0;

    if (!t || (r = rdzvd_store_foreach(t, waiting_scan_one, &w)) < 0 || w.n == 0)
        goto out;
    if (!(sj = realloc(st->jobs, (st->n_jobs + w.n) * sizeof(*sj)))) {
        r = -ENOMEM;
        goto out;
    }
    st->jobs = sj;
    memset(&sj[st->n_jobs], 0, w.n * sizeof(*sj));
    for (size_t i = 0; i < w.n; i++) {
        bool noted;
        uint64_t since = waiting_since(e, w.ids[i], start_ms, &noted);

        /* Only a noted one has a time to end at (a note is what the abandonment timer ends). */
        waiting_status(t, w.ids[i], since, now, noted && e ? e->abandon_after_ms : 0,
                       &sj[st->n_jobs + i]);
    }
    st->n_jobs += w.n;
out:
    free(w.ids);
    return r;
}

int rdzvd_job_records_unloaded(struct rdzvd_store *t, const struct rdzv_list *jobs,
                               char (**ids)[RDZV_ID_MAX + 1], size_t *n)
{
    struct waiting_scan w = {.jobs = jobs};
    int r = rdzvd_store_foreach(t, waiting_scan_one, &w);

    if (r < 0) {
        free(w.ids);
        return r;
    }
    *ids = w.ids;
    *n = w.n;
    return 0;
}

/* Those kept past keep_ms go (the list is in end order). */
static void ended_expire(struct rdzvd_ended_jobs *e, uint64_t now)
{
    while (e->n > 0 && now - rdzv_container_of(e->list.next, struct ended_job, node)->ended_ms >=
                           e->keep_ms)
        ended_drop_oldest(e);
}

/* Only the newest RDZVD_ENDED_TIMELINES keep their timelines (up to 10,000 ended jobs may be
 * kept). */
static void ended_trim_timelines(struct rdzvd_ended_jobs *e)
{
    struct rdzv_list *pos, *tmp;
    uint64_t with = 0;

    rdzv_list_for_each_safe(pos, tmp, &e->list)
        with += rdzv_container_of(pos, struct ended_job, node)->st.timeline != NULL;
    rdzv_list_for_each_safe(pos, tmp, &e->list)
    {
        struct ended_job *x = rdzv_container_of(pos, struct ended_job, node);

        if (with <= RDZVD_ENDED_TIMELINES)
            break;
        if (x->st.timeline) {
            free(x->st.timeline);
            x->st.timeline = NULL;
            with--;
        }
    }
}

void rdzvd_ended_jobs_add(struct rdzvd_ended_jobs *e, const struct rdzvd_job *j)
{
    uint64_t now = rdzvd_job_now_ms(&j->host);
    struct ended_job *x;
    double ago_s;

    e->n_ended++;
    ended_expire(e, now);
    if (e->max == 0 || e->keep_ms == 0)
        return;
    x = calloc(1, sizeof(*x));
    if (!x || job_status(j, now, rdzvd_job_wall_s(&j->host), &x->st, true, false) < 0) {
        if (x)
            rdzv_status_job_free_arrays(&x->st);
        free(x);
        log_warn("job=%s out of memory keeping its outcome for status", j->run_id);
        return;
    }
    /* Its members are gone; what is left of them is in its events and its timeline. */
    free(x->st.nodes);
    free(x->st.ranks);
    x->st.nodes = NULL;
    x->st.ranks = NULL;
    x->st.n_nodes = x->st.n_ranks = 0;
    ago_s = rdzvd_job_wall_s(&j->host) - j->ended_s; /* it ended before its last member went */
    x->ended_ms = ago_s > 0 && ago_s * 1000 < (double)now ? now - (uint64_t)(ago_s * 1000) : now;
    x->ended_s = j->ended_s;
    x->st.duration_s = (double)(now - j->created_ms) / 1000;
    while (e->n >= e->max)
        ended_drop_oldest(e);
    rdzv_list_add_tail(&e->list, &x->node);
    e->n++;
    ended_trim_timelines(e);
}

void rdzvd_ended_jobs_add_recorded(struct rdzvd_ended_jobs *e, const struct rdzvd_job_end *end,
                                   struct rdzvd_job_now at)
{
    uint64_t now = at.ms, ago_ms;
    double ago_s = at.wall_s - end->ended_s;
    struct rdzv_list *pos;
    struct ended_job *x;

    ended_expire(e, now);
    ago_ms = ago_s <= 0 ? 0 : ago_s >= (double)now ? now : (uint64_t)(ago_s * 1000);
    if (e->max == 0 || ago_ms >= e->keep_ms)
        return;
    for (pos = e->list.next; pos != &e->list; pos = pos->next) { /* held in memory already? */
        x = rdzv_container_of(pos, struct ended_job, node);
        /* This rdzvd saw it end (a leader again): the very time recorded. Another end of the
         * same id (a new run's, ended soon after) is kept too: its agents are told it. */
        if (!strcmp(x->st.run_id, end->run_id) && x->ended_s == end->ended_s)
            return;
    }
    if (!(x = calloc(1, sizeof(*x)))) {
        log_warn("job=%s out of memory keeping its recorded outcome for status", end->run_id);
        return;
    }
    memcpy(x->st.run_id, end->run_id, sizeof(x->st.run_id));
    snprintf(x->st.state, sizeof(x->st.state), "ended");
    x->st.generation = end->generation;
    x->st.restart_count = end->restart_count;
    x->st.ended = true;
    snprintf(x->st.outcome_type, sizeof(x->st.outcome_type), "%s", end->type);
    x->st.outcome_exit_code = end->exit_code;
    snprintf(x->st.outcome_summary, sizeof(x->st.outcome_summary), "%s", end->summary);
    x->ended_ms = now - ago_ms;
    x->ended_s = end->ended_s;
    while (e->n >= e->max)
        ended_drop_oldest(e);
    /* In the list's order (oldest first): after the last one that ended before it. */
    for (pos = e->list.prev; pos != &e->list; pos = pos->prev)
        if (rdzv_container_of(pos, struct ended_job, node)->ended_ms <= x->ended_ms)
            break;
    rdzv_list_add_tail(pos->next, &x->node);
    e->n++;
}

static bool ended_expired(const struct rdzvd_ended_jobs *e, const struct ended_job *x, uint64_t now)
{
    return now - x->ended_ms >= e->keep_ms;
}

void rdzvd_job_ended_line(char *err, size_t errlen, const char *run_id, const char *type,
                          int64_t exit_code, double ended_s, const char *summary,
                          struct rdzv_event *told)
{
    time_t secs = (time_t)ended_s;
    char when[32];
    struct tm tm;

    if (!gmtime_r(&secs, &tm) || !strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(when, sizeof(when), "?");
    snprintf(err, errlen,
             "job '%s' has ended: it %s%s at %s (exit code %" PRId64 "), and this agent started "
             "before that; to run it again, start its agents again (an agent started after the "
             "end runs a new job). Its outcome: %s",
             run_id, strcmp(type, "abandoned") ? "" : "was ", type, when, exit_code,
             summary[0] ? summary : "-");
    if (told) {
        *told = (struct rdzv_event){.exit_code = exit_code};
        snprintf(told->type, sizeof(told->type), "%s", type);
        snprintf(told->summary, sizeof(told->summary), "%s", err);
    }
}

int rdzvd_job_gone_line(char *err, size_t errlen, const char *run_id, uint64_t gen)
{
    char which[48] = "a generation of it"; /* a plain JOIN does not say which */

    if (gen)
        snprintf(which, sizeof(which), "its generation %" PRIu64, gen);
    snprintf(err, errlen,
             "job '%s' is over: this rdzvd ran %s and has not restarted since, and the "
             "job has ended (how is no longer kept: rdzvd --keep-ended); this agent's workers "
             "stop. To run it again, start its agents again",
             run_id, which);
    return -ESTALE;
}

int rdzvd_ended_jobs_refuse(const struct rdzvd_ended_jobs *e, const char *run_id, int64_t age_ms,
                            bool resume, struct rdzvd_job_now at, char *err, size_t errlen,
                            struct rdzv_event *told)
{
    uint64_t now = at.ms;
    struct rdzv_list *pos;

    if (!e)
        return 0;
    for (pos = e->list.prev; pos != &e->list; pos = pos->prev) { /* the newest first */
        const struct ended_job *x = rdzv_container_of(pos, struct ended_job, node);

        if (ended_expired(e, x, now))
            break; /* the older ones too */
        if (strcmp(x->st.run_id, run_id))
            continue;
        bool stopped = !strcmp(x->st.outcome_type, "cancelled") ||
                       !strcmp(x->st.outcome_type, "abandoned");

        if (strcmp(x->st.outcome_type, "failed") && strcmp(x->st.outcome_type, "succeeded") &&
            !stopped)
            return 0;
        /* A cancelled or abandoned job: an agent that says when it started is told the outcome
         * when it started before the end (a node of that run, away when it ended), as for any
         * end; one that does not say (before 1.12) starts a new run, unless it resumes. */
        if (stopped && !resume && age_ms <= 0)
            return 0;
        if (age_ms > 0 && (uint64_t)age_ms < now - x->ended_ms) {
            snprintf(err, errlen, "job '%s' %s %.1f s before this agent started: a new run",
                     run_id, x->st.outcome_type, (double)(now - x->ended_ms) / 1000);
            return 0;
        }
        rdzvd_job_ended_line(err, errlen, run_id, x->st.outcome_type, x->st.outcome_exit_code,
                             at.wall_s - (double)(now - x->ended_ms) / 1000,
                             x->st.outcome_summary, told);
        return -EBUSY;
    }
    return 0;
}

static bool sel_match(const struct rdzvd_status_sel *sel, const char *run_id)
{
    return !sel || !sel->run_id || strcmp(sel->run_id, run_id) == 0;
}

/* Ended job x into sj: a copy, with its timeline unless brief. */
static void ended_status(const struct ended_job *x, uint64_t now, bool brief,
                         struct rdzv_status_job *sj)
{
    *sj = x->st;
    sj->timeline = NULL;
    if (!brief && x->st.timeline && rdzv_status_alloc_timeline(sj) == 0)
        *sj->timeline = *x->st.timeline;
    sj->age_s += (double)(now - x->ended_ms) / 1000;
    sj->ended_age_s = (double)(now - x->ended_ms) / 1000;
}

int rdzvd_status_fill(const struct rdzvd_server_info *info, const struct rdzv_list *jobs,
                      const struct rdzvd_job_counts *counts,
                      const struct rdzvd_ended_jobs *ended, struct rdzvd_status_sel *sel,
                      struct rdzvd_job_now at, struct rdzv_status *ret)
{
    uint64_t now = at.ms;
    struct rdzv_status st = {.port = info->port,
                             .uptime_s = (double)(now - info->start_ms) / 1000,
                             .connections = info->nconns,
                             .accepted = info->stats.accepted,
                             .rejected = info->stats.rejected,
                             .protocol_errors = info->stats.closed_proto,
                             .outbuf_closes = info->stats.closed_outbuf,
                             .requests = info->stats.requests,
                             .main_store_keys = info->main_store_keys,
                             .store_held = (int64_t)info->store_held,
                             .store_limit = (int64_t)info->store_limit,
                             .fds_held = (int64_t)info->fds_held,
                             .fds_limit = (int64_t)info->fds_limit,
                             .input_held = (int64_t)info->input_held,
                             .input_limit = (int64_t)info->input_limit,
                             .put_aside_failures =
                                 counts ? (int64_t)counts->put_aside[RDZVD_ASIDE_FAILURES] : 0,
                             .put_aside_check =
                                 counts ? (int64_t)counts->put_aside[RDZVD_ASIDE_CHECK] : 0,
                             .put_aside_straggler =
                                 counts ? (int64_t)counts->put_aside[RDZVD_ASIDE_STRAGGLER] : 0,
                             .put_aside_network =
                                 counts ? (int64_t)counts->put_aside[RDZVD_ASIDE_NETWORK] : 0};
    size_t n_live = 0, n_ended = 0, max_live = SIZE_MAX, max_ended = SIZE_MAX, n = 0;
    struct rdzv_list *pos, *tmp;
    int r;

    if (counts)
        memcpy(st.recovery, counts->recovery, sizeof(st.recovery));
    snprintf(st.daemon, sizeof(st.daemon), "rdzvd");
    snprintf(st.version, sizeof(st.version), "%s", RDZV_VERSION);
    rdzv_list_for_each_safe(pos, tmp, jobs)
        n_live += sel_match(sel, rdzv_container_of(pos, struct rdzvd_job, node)->run_id);
    if (ended)
        rdzv_list_for_each_safe(pos, tmp, &ended->list)
        {
            const struct ended_job *x = rdzv_container_of(pos, struct ended_job, node);

            n_ended += !ended_expired(ended, x, now) && sel_match(sel, x->st.run_id);
        }
    if (sel) {
        sel->n_live = n_live;
        sel->n_ended = n_ended;
        max_live = sel->max_live;
        max_ended = sel->max_ended;
    }
    r = rdzv_status_alloc_jobs(&st, (n_live < max_live ? n_live : max_live) +
                                       (n_ended < max_ended ? n_ended : max_ended));
    if (r < 0)
        goto out_free;
    rdzv_list_for_each_safe(pos, tmp, jobs)
    {
        const struct rdzvd_job *j = rdzv_container_of(pos, struct rdzvd_job, node);
        bool brief = sel && n >= sel->full;

        if (n >= max_live)
            break;
        if (!sel_match(sel, j->run_id))
            continue;
        r = job_status(j, now, at.wall_s, &st.jobs[n], n < RDZV_STATUS_TIMELINES && !brief,
                       brief);
        n++;
        if (r < 0)
            goto out_free;
    }
    if (ended && max_ended > 0) {
        /* All of them oldest first; a selection the newest first (those it shows). */
        size_t k = 0;

        for (pos = sel ? ended->list.prev : ended->list.next; pos != &ended->list;
             pos = sel ? pos->prev : pos->next) {
            const struct ended_job *x = rdzv_container_of(pos, struct ended_job, node);

            if (ended_expired(ended, x, now) || !sel_match(sel, x->st.run_id))
                continue;
            if (k++ >= max_ended)
                break;
            ended_status(x, now, sel && !sel->run_id, &st.jobs[n++]);
        }
    }
    *ret = st;
    return 0;

out_free:
    rdzv_status_free(&st);
    return r;
}
