/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-timeline.h: a job's history as the status page draws it: its generations
 * (bands: when each ran, its world size), what happened (marks: a failure and its root cause, a
 * node lost or put aside, spares promoted, a leader change, the end) and rank 0's steps per
 * second over time, from the progress reports rdzvd receives.
 *
 * Fixed size (struct rdzv_status_timeline's arrays, proto/rdzv-status.h): the newest bands and
 * marks are kept, and the rate samples cover the whole job. Sample i counts the steps done in
 * [rate_start + i * interval, + interval); when a report falls past the last sample the samples
 * are halved (each pair merged into one of twice the interval), so a week-long job costs what a
 * minute-long one does, at a coarser resolution (about 74 samples of 8,192 s after a week).
 * The limits are in rdzvd-config.h.
 *
 * No I/O, no clock of its own (times are the caller's, unix seconds), no allocation: any thread
 * may use a timeline it owns. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "proto/rdzv-status.h"

struct rdzvd_timeline {
    struct rdzv_status_timeline tl; /* the rates hold steps per sample until read (status) */
    bool have_step;                 /* a progress report was seen: last_t and last_step hold */
    double last_t;
    int64_t last_step;
    /* The current rate: over the last window of RDZVD_TIMELINE_RATE_WINDOW_S or more, from
     * (win_t, win_step); win_rate -1 before the first window closed. */
    double win_t, win_rate;
    int64_t win_step;
    bool recovering; /* the newest recovery is under way (its first step not reported yet) */
    int64_t max_step; /* the highest step rank 0 reported */
    bool rebase;      /* a recovery began: rank 0's next report is the new base, no more */
};

/* Start empty (the rates begin at the first progress report); the job began at t_start (unix
 * seconds: what its cost counts from, rdzv_cost_of). */
void rdzvd_timeline_init(struct rdzvd_timeline *t, double t_start);

/* Generation gen started at time t with world_size workers on nodes nodes (the band before it
 * ends then, if it had not). */
void rdzvd_timeline_band_start(struct rdzvd_timeline *t, double t_now, uint64_t gen,
                               int64_t world_size, int64_t nodes);
/* The band under way (if any) ends at t. */
void rdzvd_timeline_band_end(struct rdzvd_timeline *t, double t_now);

/* Something happened at t in generation gen: text (cut to RDZV_STATUS_TEXT_MAX bytes, at a
 * UTF-8 boundary). The oldest mark makes room. */
void rdzvd_timeline_mark(struct rdzvd_timeline *t, double t_now, uint64_t gen,
                         enum rdzv_mark_kind kind, const char *text);

/* A recovery begins at t: generation gen stops (cause kind; inplace: the job recovers in place).
 * Its point "detected" is t; a recovery still under way is left as it is (unfinished: its time
 * from its last point to this failure is lost, cut short). The oldest recovery makes room.
 * t_cause: when the failure happened, as its report dates it (0: at t); from then to t is its
 * detection. A cause dated before the generation began (another host's clock, behind) or after
 * t is not believed: the detection is then 0. */
void rdzvd_timeline_recovery_start(struct rdzvd_timeline *t, double t_now, uint64_t gen,
                                   enum rdzv_mark_kind kind, bool inplace, double t_cause);
/* The failure that ends the job (no restart left) was decided at t: from the failure, as its
 * report dates it (t_cause, believed as in rdzvd_timeline_recovery_start), to t is its detection,
 * not training (a worker's interpreter may take seconds to exit after the exception that ends
 * it). Before the first step it ends the start-up, as any failure does. Nothing while a recovery
 * is under way (its time to the end is lost, cut short). */
void rdzvd_timeline_failed(struct rdzvd_timeline *t, double t_now, double t_cause);
/* The recovery under way reached point p at t (later than "detected"). Points come in order:
 * p is taken only when the point before it was and none after it; taken again (a round closed
 * anew after it was undone), its time is the newest. Each phase that p completes is added to
 * the sums. Returns the recovery when p was taken, else NULL (no recovery under way, or out of
 * order). */
const struct rdzv_status_recovery *rdzvd_timeline_recovery_point(struct rdzvd_timeline *t,
                                                                 double t_now,
                                                                 enum rdzv_recovery_point p);
/* The time of the newest point the recovery under way reached (0: none under way). */
double rdzvd_timeline_recovery_since(const struct rdzvd_timeline *t);

/* Rank 0 reported step at time t. The steps since the last report are spread over the samples
 * of the time between; a step lower than the last (a restart from a checkpoint) counts none and
 * is the new base; a report older than the last is ignored. The time spent on steps not above
 * the highest reported before is redo (its share of an interval that passes it). */
void rdzvd_timeline_step(struct rdzvd_timeline *t, double t_report, int64_t step);

/* The timeline as the status shows it at time t: out's rates in steps per second (the last
 * sample's over its time so far). Returns rank 0's steps per second over the last whole sample
 * (the one under way when there is none yet), or -1 when no step was reported. */
double rdzvd_timeline_status(const struct rdzvd_timeline *t, double t_now,
                             struct rdzv_status_timeline *out);
