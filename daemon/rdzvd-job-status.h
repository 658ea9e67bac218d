/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-status.h: the daemon's status (struct rdzv_status, proto/rdzv-status.h) made from the
 * server's counters and the job state machine's jobs: what rdzvctl status, the STATUS reply,
 * /status.json, the status page and /metrics show (through rdzvd_jobs_status(), rdzvd-job.h).
 * Reads the job state machine's structs; changes nothing.
 *
 * Ownership: the caller owns what it gets (rdzv_status_free). Threads: the loop thread (a
 * connection's read callback, an HTTP request). Errors: -ENOMEM. */
#pragma once
#include "../common/rdzv-list.h"

struct rdzvd_server_info;
struct rdzv_status;

/* The server's counters (info), and per job of jobs (struct rdzvd_job nodes) its state,
 * generation, restarts, nodes (host, node rank, heartbeat age, workers, failures) and recent
 * events. On success *ret owns its arrays (rdzv_status_free); -ENOMEM leaves it untouched. */
int rdzvd_status_fill(const struct rdzvd_server_info *info, const struct rdzv_list *jobs,
                      struct rdzv_status *ret);
