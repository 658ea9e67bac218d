/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-status-recovery.c: the timeline's mark kinds, a recovery's phases and their histograms,
 * the timeline's "recoveries" as JSON (rdzv-status.h), and the peak of its rates; decoded with
 * the rest of the status (rdzv-status.c). */
#include "proto/rdzv-status.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>

const char *const rdzv_mark_names[_RDZV_MARK_MAX] = {
    [RDZV_MARK_FAILURE] = "failure", [RDZV_MARK_RESTART] = "restart",
    [RDZV_MARK_NODE_LOST] = "node_lost", [RDZV_MARK_PUT_ASIDE] = "put_aside",
    [RDZV_MARK_SPARE] = "spare", [RDZV_MARK_LEADER] = "leader", [RDZV_MARK_END] = "end",
    [RDZV_MARK_STRAGGLER] = "straggler"};

const char *const rdzv_recovery_point_names[_RDZV_RECOVERY_POINTS] = {
    "detected", "stopped", "rendezvous", "sent", "first_step"};
const char *const rdzv_recovery_phase_names[_RDZV_RECOVERY_PHASES] = {
    "stop", "rendezvous", "nccl", "first_step", "total"};
const double rdzv_hist_bounds_s[RDZV_HIST_BUCKETS] = {0.05, 0.1, 0.25, 0.5, 1,  2.5,
                                                      5,    10,  20,   30,  60, 120};

double rdzv_recovery_phase_s(const struct rdzv_status_recovery *rc, unsigned ph)
{
    unsigned from = ph == RDZV_RECOVERY_TOTAL ? 0 : ph;
    unsigned to = ph == RDZV_RECOVERY_TOTAL ? RDZV_RECOVERY_FIRST_STEP : ph + 1;

    if (ph >= _RDZV_RECOVERY_PHASES || !(rc->t[from] > 0) || !(rc->t[to] > 0))
        return -1;
    return rc->t[to] > rc->t[from] ? rc->t[to] - rc->t[from] : 0;
}

double rdzv_status_rate_peak(const struct rdzv_status_job *j, unsigned n)
{
    const struct rdzv_status_timeline *tl = j->timeline;
    double peak = j->rate_known && j->steps_per_second > 0 ? j->steps_per_second : 0;
    unsigned first = tl && n < tl->n_rates ? tl->n_rates - n : 0;

    for (unsigned i = first; tl && i < tl->n_rates; i++)
        peak = tl->rates[i] > peak ? tl->rates[i] : peak;
    return peak;
}

void rdzv_hist_add(struct rdzv_hist *h, double x)
{
    unsigned i = 0;

    if (!(x > 0))
        x = 0;
    while (i < RDZV_HIST_BUCKETS && x > rdzv_hist_bounds_s[i])
        i++;
    h->in[i]++;
    h->count++;
    h->sum += x;
}

/* The recoveries as JSON: {"total", "phase_sum_s": {phase: s}, "list": [{"generation", "kind",
 * "inplace", point: t, ...}]}. */
json_t *rdzv_status_recoveries_to_json(const struct rdzv_status_timeline *tl)
{
    json_t *list = json_array(), *sums = json_object();

    for (unsigned i = 0; i < tl->n_recoveries && i < RDZV_STATUS_RECOVERIES; i++) {
        const struct rdzv_status_recovery *rc = &tl->recoveries[i];
        json_t *e = json_pack("{s:I, s:s, s:b}", "generation", (json_int_t)rc->generation,
                              "kind",
                              (unsigned)rc->kind < _RDZV_MARK_MAX ? rdzv_mark_names[rc->kind] : "?",
                              "inplace", rc->inplace);

        for (unsigned p = 0; e && p < _RDZV_RECOVERY_POINTS; p++)
            json_object_set_new(e, rdzv_recovery_point_names[p], json_real(rc->t[p]));
        json_array_append_new(list, e);
    }
    for (unsigned p = 0; p < _RDZV_RECOVERY_PHASES; p++)
        json_object_set_new(sums, rdzv_recovery_phase_names[p], json_real(tl->phase_sum_s[p]));
    return json_pack("{s:I, s:o, s:o}", "total", (json_int_t)tl->recoveries_total, "phase_sum_s",
                     sums, "list", list);
}


int rdzv_cost_of(const struct rdzv_status_timeline *tl, double t_end, struct rdzv_cost *c)
{
    const struct rdzv_status_recovery *last =
        tl->n_recoveries > 0 ? &tl->recoveries[tl->n_recoveries - 1] : NULL;
    double first;

    *c = (struct rdzv_cost){.recoveries = tl->recoveries_total, .rebuilt = tl->rebuilt,
                            .no_steps = !(tl->first_step_s > 0)};
    if (!(tl->start_s > 0) || t_end < tl->start_s)
        return -ENODATA;
    c->wall_s = t_end - tl->start_s;
    /* Rank 0's first step (the first failure when it came before), else without progress
     * reports the first generation's start. */
    if (tl->first_step_s > 0)
        first = tl->first_failure_s > 0 && tl->first_failure_s < tl->first_step_s
                    ? tl->first_failure_s
                    : tl->first_step_s;
    else if (tl->first_failure_s > 0 && !(tl->first_band_s > 0))
        first = tl->first_failure_s;
    else
        first = tl->first_band_s > 0 ? tl->first_band_s : t_end;
    c->startup_s = first > tl->start_s ? (first < t_end ? first : t_end) - tl->start_s : 0;
    c->detect_s = tl->detect_sum_s;
    c->cut_s = tl->cut_s;
    /* The recovery under way at the end: lost up to it, unless it ended as far as can be known
     * (no progress reports: its ranks went out). */
    if (tl->open_since_s > 0 && t_end > tl->open_since_s &&
        (tl->first_step_s > 0 || !last || !(last->t[RDZV_RECOVERY_SENT] > 0)))
        c->cut_s += t_end - tl->open_since_s;
    c->lost_s = c->detect_s + c->cut_s;
    for (unsigned ph = 0; ph < RDZV_RECOVERY_TOTAL; ph++) {
        c->phase_s[ph] = tl->phase_sum_s[ph];
        c->lost_s += c->phase_s[ph];
    }
    if (c->lost_s > c->wall_s - c->startup_s)
        c->lost_s = c->wall_s - c->startup_s;
    c->trained_s = c->wall_s - c->startup_s - c->lost_s;
    c->redo_s = tl->redo_s < c->trained_s ? tl->redo_s : c->trained_s;
    return 0;
}

static double pct(double x, double wall)
{
    return wall > 0 ? 100 * x / wall : 0;
}

int rdzv_cost_format(const struct rdzv_cost *c, char *buf, size_t len)
{
    char redo[64] = "", cut[32] = "", run[160], first[16] = "?";
    double both = c->startup_s + c->trained_s;
    int n;

    if (c->redo_s >= 0.05)
        snprintf(redo, sizeof(redo), "; %.1f s of it redoing steps done before", c->redo_s);
    if (c->cut_s >= 0.05)
        snprintf(cut, sizeof(cut), ", cut short %.1f", c->cut_s);
    if (!c->no_steps || c->recoveries == 0)
        snprintf(first, sizeof(first), "%.1f", c->phase_s[3]);
    if (c->no_steps) /* the start-up's end was not seen: only the two together are known */
        snprintf(run, sizeof(run), "start-up ?, training ? (no step reported: %.1f s, %.0f%%, "
                 "between them)", both, pct(both, c->wall_s));
    else
        snprintf(run, sizeof(run), "start-up %.1f s (%.0f%%), training %.1f s (%.0f%%%s)",
                 c->startup_s, pct(c->startup_s, c->wall_s), c->trained_s,
                 pct(c->trained_s, c->wall_s), redo);
    n = snprintf(buf, len,
                 "%swall %.1f s: %s, %" PRId64 " recover%s %.1f s (%.0f%%: detect %.1f, stop %.1f, "
                 "rendezvous %.1f, nccl %.1f, first step %s%s)",
                 c->rebuilt ? "since rdzvd took the job over: " : "", c->wall_s, run,
                 c->recoveries, c->recoveries == 1 ? "y" : "ies", c->lost_s,
                 pct(c->lost_s, c->wall_s), c->detect_s, c->phase_s[0], c->phase_s[1],
                 c->phase_s[2], first, cut);
    return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}
