/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-ends.h: how ended jobs ended, kept in the job table, so that a restarted rdzvd or
 * a new leader tells a job's returning agents its outcome (P6, docs/design/job-policy.md).
 * Below the job state machine, beside the record (rdzvd-job-record.h): only an ENDED
 * decision's apply writes them. Loop thread only. */
#pragma once
#include <jansson.h>
#include <stdint.h>

#include "proto/rdzv-msg.h"
#include "daemon/data/rdzvd-store.h"

/* How a job ended, kept in the job table after its record goes (ENDED with has_end), so that
 * its agents that come back to a restarted rdzvd or a new leader are told it (P6 of
 * docs/design/job-policy.md) for --keep-ended: under "end/" run_id, a JSON object; the run ids
 * under "ends", NUL-terminated, oldest first, at most RDZVD_JOB_ENDS_KEPT (the oldest dropped by
 * the ENDED that makes room: the same on every replica). */
#define RDZVD_JOB_ENDS_KEPT 256
struct rdzvd_job_end {
    char run_id[RDZV_ID_MAX + 1];
    char type[16]; /* "succeeded", "failed", "cancelled", "abandoned" (--abandon-after) */
    int64_t exit_code;
    double ended_s; /* unix seconds */
    uint64_t generation;
    int64_t restart_count;
    char summary[RDZV_SUMMARY_MAX + 1];
};

/* *e := run_id's end as type (with exit_code and summary, cut to fit), at ended_s (unix
 * seconds), in generation gen after restarts restarts. */
void rdzvd_job_end_set(struct rdzvd_job_end *e, const char *run_id, const char *type,
                       int64_t exit_code, const char *summary, double ended_s, uint64_t gen,
                       int64_t restarts);

/* e as the JSON object an ENDED decision carries ("outcome"), and back: NULL when out of
 * memory; 0 or -EBADMSG (not an outcome of run_id, e cleared). */
json_t *rdzvd_job_end_json(const struct rdzvd_job_end *e);
int rdzvd_job_end_from_json(json_t *o, const char *run_id, struct rdzvd_job_end *e);

/* Keep e in t, as the newest (replacing what its run id had); past kept (the job table's
 * ends_kept: RDZVD_JOB_ENDS_KEPT, or a test's) the oldest go. From inside an ENDED decision's
 * apply only. 0, -ENOMEM or the store's error. */
int rdzvd_job_end_keep(struct rdzvd_store *t, const struct rdzvd_job_end *e, unsigned kept);

/* Call fn for each ended job t keeps, oldest first, until fn returns non-zero (returned). 0,
 * -ENOMEM, or fn's. */
int rdzvd_job_ends_foreach(struct rdzvd_store *t,
                           int (*fn)(const struct rdzvd_job_end *e, void *ud), void *ud);
