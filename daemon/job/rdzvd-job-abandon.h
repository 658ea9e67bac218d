/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-abandon.h: jobs nobody comes back to end (--abandon-after). A job whose agents are
 * all gone keeps its record, waiting for its nodes (rdzvd-job-status.h, the ended jobs' waiting
 * notes); one that waited abandon_after_ms ends as "abandoned" (rdzvd_jobs_end_waiting): its
 * record goes, and how it ended is kept and told to any of its agents that comes back (P6,
 * docs/design/job-policy.md row W7). One timer, due when the oldest note is; no scan.
 *
 * An adapter of the job machine (libuv's timer, the clock), beside rdzvd-job-wire.c, which owns
 * it. Loop thread only. */
#pragma once
#include <stdint.h>
#include <uv.h>

struct rdzvd_job_host;
struct rdzvd_job_ready;
struct rdzvd_abandon;

/* The timer of h's waiting notes (h->ended), ending a job after_ms after its note (0: never;
 * *ret is then NULL). h is borrowed and outlives it. Each step it takes is handed to
 * stepped(ud, ready) once carried out. 0 or -ENOMEM. */
int rdzvd_abandon_new(uv_loop_t *loop, const struct rdzvd_job_host *h, uint64_t after_ms,
                      void (*stepped)(void *ud, const struct rdzvd_job_ready *rd), void *ud,
                      struct rdzvd_abandon **ret);
/* The notes changed (one added): the timer follows the oldest. NULL: nothing. */
void rdzvd_abandon_arm(struct rdzvd_abandon *a);
/* Stop and close (freed once libuv closed it). NULL: nothing. */
void rdzvd_abandon_close(struct rdzvd_abandon *a);
