/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-progress.c: each rank's last progress report, from its agent's HEARTBEATs, kept per
 * member for the current generation: its step, its compute times, a recovery's first step; and
 * the status's "ranks" made from it. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/job/rdzvd-job-sm.h"
#include "common/rdzv-log.h"
#include "daemon/job/rdzvd-job-impl.h"
#include "proto/rdzv-status.h"

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
