/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-timeline.c: a job's bands, marks and steps per second (rdzvd-timeline.h). */
#include "daemon/data/rdzvd-timeline.h"

#include <stdio.h>
#include <string.h>

#include "common/rdzv-util.h"
#include "daemon/data/rdzvd-config.h"

/* Without libm: x >= 0 only (the sample index of a time not before rate_start). */
static double floor_pos(double x)
{
    return x >= 0 && x < 1e15 ? (double)(uint64_t)x : x;
}

static double dmin(double a, double b)
{
    return a < b ? a : b;
}

static double dmax(double a, double b)
{
    return a > b ? a : b;
}

void rdzvd_timeline_init(struct rdzvd_timeline *t, double t_start)
{
    memset(t, 0, sizeof(*t));
    t->win_rate = -1;
    t->tl.start_s = t_start > 0 ? t_start : 0;
}

void rdzvd_timeline_band_end(struct rdzvd_timeline *t, double t_now)
{
    struct rdzv_status_timeline *tl = &t->tl;

    if (tl->n_bands > 0 && tl->bands[tl->n_bands - 1].end == 0)
        tl->bands[tl->n_bands - 1].end = t_now > 0 ? t_now : 1e-3;
}

void rdzvd_timeline_band_start(struct rdzvd_timeline *t, double t_now, uint64_t gen,
                               int64_t world_size, int64_t nodes)
{
    struct rdzv_status_timeline *tl = &t->tl;

    rdzvd_timeline_band_end(t, t_now);
    if (!(tl->first_band_s > 0))
        tl->first_band_s = t_now > 0 ? t_now : 1e-3;
    t->rebase = t->have_step; /* a new generation: its first report is a base, not steps */
    if (tl->n_bands == RDZV_STATUS_BANDS) {
        memmove(&tl->bands[0], &tl->bands[1], (RDZV_STATUS_BANDS - 1) * sizeof(tl->bands[0]));
        tl->n_bands--;
    }
    tl->bands[tl->n_bands++] = (struct rdzv_status_band){
        .generation = gen, .start = t_now, .end = 0, .world_size = world_size, .nodes = nodes};
}

void rdzvd_timeline_mark(struct rdzvd_timeline *t, double t_now, uint64_t gen,
                         enum rdzv_mark_kind kind, const char *text)
{
    struct rdzv_status_timeline *tl = &t->tl;
    struct rdzv_status_mark *m;

    if (tl->n_marks == RDZV_STATUS_MARKS) {
        memmove(&tl->marks[0], &tl->marks[1], (RDZV_STATUS_MARKS - 1) * sizeof(tl->marks[0]));
        tl->n_marks--;
    }
    m = &tl->marks[tl->n_marks++];
    if (kind == RDZV_MARK_LEADER)
        tl->rebuilt = true; /* rebuilt from its record: what came before is not here */
    m->time = t_now;
    m->generation = gen;
    m->kind = kind;
    snprintf(m->text, sizeof(m->text), "%s", text);
    rdzv_utf8_trim(m->text);
}

void rdzvd_timeline_recovery_start(struct rdzvd_timeline *t, double t_now, uint64_t gen,
                                   enum rdzv_mark_kind kind, bool inplace, double t_cause)
{
    struct rdzv_status_timeline *tl = &t->tl;
    struct rdzv_status_recovery *rc;
    double since = tl->n_bands > 0 ? tl->bands[tl->n_bands - 1].start : 0, at = t_now;

    /* Its detection: from the failure, as dated, to now. */
    if (t_cause > 0 && t_cause >= since && t_cause < t_now)
        at = t_cause;
    tl->detect_sum_s += t_now - at;
    if (!(tl->first_failure_s > 0))
        tl->first_failure_s = at; /* one before the first step ends the start-up */
    /* The one under way, cut short (as far as can be known: without progress reports a
     * recovery ends when its ranks went out). */
    if (t->recovering && tl->n_recoveries > 0 && tl->open_since_s > 0 && at > tl->open_since_s &&
        (tl->first_step_s > 0 ||
         !(tl->recoveries[tl->n_recoveries - 1].t[RDZV_RECOVERY_SENT] > 0)))
        tl->cut_s += at - tl->open_since_s;
    t->rebase = true;

    if (tl->n_recoveries == RDZV_STATUS_RECOVERIES) {
        memmove(&tl->recoveries[0], &tl->recoveries[1],
                (RDZV_STATUS_RECOVERIES - 1) * sizeof(tl->recoveries[0]));
        tl->n_recoveries--;
    }
    rc = &tl->recoveries[tl->n_recoveries++];
    memset(rc, 0, sizeof(*rc));
    rc->generation = gen;
    rc->kind = kind;
    rc->inplace = inplace;
    rc->t[RDZV_RECOVERY_DETECTED] = t_now > 0 ? t_now : 1e-3;
    tl->open_since_s = rc->t[RDZV_RECOVERY_DETECTED];
    tl->recoveries_total++;
    t->recovering = true;
}

void rdzvd_timeline_failed(struct rdzvd_timeline *t, double t_now, double t_cause)
{
    struct rdzv_status_timeline *tl = &t->tl;
    double since = tl->n_bands > 0 ? tl->bands[tl->n_bands - 1].start : 0;

    if ((t->recovering && tl->open_since_s > 0) || !(t_cause > 0) || t_cause < since ||
        t_cause >= t_now)
        return;
    tl->detect_sum_s += t_now - t_cause;
    if (!(tl->first_failure_s > 0))
        tl->first_failure_s = t_cause;
}

double rdzvd_timeline_recovery_since(const struct rdzvd_timeline *t)
{
    const struct rdzv_status_recovery *rc;
    double since = 0;

    if (!t->recovering || t->tl.n_recoveries == 0)
        return 0;
    rc = &t->tl.recoveries[t->tl.n_recoveries - 1];
    for (unsigned p = 0; p < _RDZV_RECOVERY_POINTS; p++)
        since = rc->t[p] > since ? rc->t[p] : since;
    return since;
}

const struct rdzv_status_recovery *rdzvd_timeline_recovery_point(struct rdzvd_timeline *t,
                                                                 double t_now,
                                                                 enum rdzv_recovery_point p)
{
    struct rdzv_status_timeline *tl = &t->tl;
    struct rdzv_status_recovery *rc;

    if (!t->recovering || tl->n_recoveries == 0 || p == RDZV_RECOVERY_DETECTED ||
        (unsigned)p >= _RDZV_RECOVERY_POINTS)
        return NULL;
    rc = &tl->recoveries[tl->n_recoveries - 1];
    if (!rc->t[p - 1] || (p + 1 < _RDZV_RECOVERY_POINTS && rc->t[p + 1]))
        return NULL;
    if (rc->t[p]) /* taken again: the sums had it */
        tl->phase_sum_s[p - 1] -= rdzv_recovery_phase_s(rc, p - 1);
    rc->t[p] = dmax(t_now, rc->t[p - 1]);
    tl->phase_sum_s[p - 1] += rdzv_recovery_phase_s(rc, p - 1);
    tl->open_since_s = rc->t[p];
    if (p == RDZV_RECOVERY_FIRST_STEP) {
        tl->open_since_s = 0;
        tl->phase_sum_s[RDZV_RECOVERY_TOTAL] += rdzv_recovery_phase_s(rc, RDZV_RECOVERY_TOTAL);
        t->recovering = false;
    }
    return rc;
}

/* Merge each pair of samples into one of twice the interval. */
static void halve(struct rdzv_status_timeline *tl)
{
    unsigned n = (tl->n_rates + 1) / 2;

    for (unsigned i = 0; i < n; i++)
        tl->rates[i] = tl->rates[2 * i] + (2 * i + 1 < tl->n_rates ? tl->rates[2 * i + 1] : 0);
    for (unsigned i = n; i < RDZV_STATUS_RATES; i++)
        tl->rates[i] = 0;
    tl->n_rates = n;
    tl->rate_interval_s *= 2;
}

/* The sample that holds time x (>= rate_start), the samples halved and extended (with zeros) as
 * needed. */
static unsigned sample_at(struct rdzv_status_timeline *tl, double x)
{
    double k = floor_pos((x - tl->rate_start) / tl->rate_interval_s);

    while (k >= RDZV_STATUS_RATES) {
        halve(tl);
        k = floor_pos((x - tl->rate_start) / tl->rate_interval_s);
    }
    if (!(k >= 0))
        k = 0;
    while (tl->n_rates <= (unsigned)k)
        tl->rates[tl->n_rates++] = 0;
    return (unsigned)k;
}

void rdzvd_timeline_step(struct rdzvd_timeline *t, double x, int64_t step)
{
    struct rdzv_status_timeline *tl = &t->tl;
    double a, delta, iv;
    unsigned ka, kb;

    if (!(x > 0 && x < 1e12) || step < 0)
        return;
    /* Rank 0 steps again after the next generation's ranks went out: as far as the cost goes,
     * the recovery is over (its last point waits for every node's first step, and a node
     * whose workers never report would keep it open). */
    if (t->recovering && tl->open_since_s > 0 && tl->n_recoveries > 0 &&
        tl->recoveries[tl->n_recoveries - 1].t[RDZV_RECOVERY_SENT] > 0 &&
        x >= tl->recoveries[tl->n_recoveries - 1].t[RDZV_RECOVERY_SENT])
        tl->open_since_s = 0;
    if (!t->have_step) {
        t->have_step = true;
        tl->first_step_s = x;
        t->rebase = false;
        t->max_step = step;
        tl->rate_start = x;
        tl->rate_interval_s = RDZVD_TIMELINE_FIRST_INTERVAL_S;
        tl->n_rates = 1;
        tl->rates[0] = 0;
        t->win_t = t->last_t = x;
        t->win_step = t->last_step = step;
        return;
    }
    if (x < t->last_t || x - tl->rate_start > RDZVD_TIMELINE_SPAN_MAX_S)
        return; /* older than the last report, or a clock far off */
    kb = sample_at(tl, x);
    /* A restart from a checkpoint, or the first report since a recovery began: the new base
     * (the time between is the recovery's, not steps'). */
    if (step < t->last_step || t->rebase) {
        t->rebase = false;
        if (step > t->max_step)
            t->max_step = step;
        t->last_t = t->win_t = x;
        t->last_step = t->win_step = step;
        return;
    }
    delta = (double)(step - t->last_step);
    a = t->last_t;
    /* Steps not above the highest before were done once already: their time is redo. */
    if (t->last_step < t->max_step && x > a && delta > 0)
        tl->redo_s += (x - a) * dmin(1, (double)(t->max_step - t->last_step) / delta);
    if (step > t->max_step)
        t->max_step = step;
    iv = tl->rate_interval_s;
    if (x <= a) {
        tl->rates[kb] += delta;
    } else {
        ka = (unsigned)floor_pos((a - tl->rate_start) / iv);
        for (unsigned k = ka; k <= kb; k++) {
            double lo = dmax(a, tl->rate_start + k * iv),
                   hi = dmin(x, tl->rate_start + (k + 1) * iv);

            if (hi > lo)
                tl->rates[k] += delta * (hi - lo) / (x - a);
        }
    }
    t->last_t = x;
    t->last_step = step;
    if (x - t->win_t >= RDZVD_TIMELINE_RATE_WINDOW_S) {
        t->win_rate = (double)(step - t->win_step) / (x - t->win_t);
        t->win_t = x;
        t->win_step = step;
    }
}

double rdzvd_timeline_status(const struct rdzvd_timeline *t, double t_now,
                             struct rdzv_status_timeline *out)
{
    const struct rdzv_status_timeline *tl = &t->tl;
    double iv = tl->rate_interval_s;

    *out = *tl;
    for (unsigned i = 0; i < out->n_rates; i++) {
        double from = tl->rate_start + i * iv, to = dmin(from + iv, dmax(t_now, t->last_t));

        out->rates[i] = to > from ? tl->rates[i] / (i + 1 < out->n_rates ? iv : to - from) : 0;
    }
    /* The sample under way is shown once half of it has passed (its rate is noise before). */
    if (out->n_rates > 0 &&
        t_now - (tl->rate_start + (out->n_rates - 1) * iv) < iv / 2)
        out->n_rates--;
    if (!t->have_step)
        return -1;
    /* Silent for two windows: the job is not training now. */
    if (t_now - t->last_t >= 2 * RDZVD_TIMELINE_RATE_WINDOW_S)
        return 0;
    if (t->win_rate >= 0)
        return t->win_rate;
    return t->last_t > t->win_t ? (double)(t->last_step - t->win_step) / (t->last_t - t->win_t)
                                : -1;
}
