/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-straggler.c: the node that is merely slow (rdzvd-job-sm.h,
 * rdzvd_member_straggler_check). In synchronous data-parallel training every rank waits for the
 * slowest, so the job's step rate hides who is slow; each rank's compute time (the time it
 * spent not waiting on the step's collectives, HEARTBEAT progress compute_ms) does not. A
 * node's compute time is its slowest rank's (each rank's the median of its last steps, which a
 * checkpoint step or a data loader's hiccup does not move); its score is that over the job's
 * median (the lower median of its nodes', so that with two nodes the faster is the yardstick).
 * All nodes slowing together (a shared filesystem) moves the median with them and scores
 * nobody; the first steps of a generation (a window not full yet) are not scored. Event-driven:
 * a node is scored when its heartbeat brings its progress, no timer. Loop thread only. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/job/rdzvd-job-impl.h"

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
    RDZVD_JOB_STEP;
    struct rdzvd_job *j = m->job;
    uint64_t now = rdzvd_job_now_ms();
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
                       m->join.node_id, text);
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
