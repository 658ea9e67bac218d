/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-status.h: the daemon's status (struct rdzv_status, proto/rdzv-status.h) made from its
 * counters and jobs: what rdzvctl status, the STATUS reply, /status.json, the status page and
 * /metrics show. Reads the server's counters and the job state machine's structs; changes
 * nothing.
 *
 * Ownership: the caller owns what it gets (rdzv_status_free, json_decref). Threads: the loop
 * thread (a connection's read callback, an HTTP request). Errors: -ENOMEM. */
#pragma once
#include <jansson.h>

struct rdzvd_server;
struct rdzv_status;

/* The daemon's counters, and per job its state, generation, restarts, nodes (host, node rank,
 * heartbeat age, workers, failures) and recent events. On success *ret owns its arrays
 * (rdzv_status_free); -ENOMEM leaves it untouched. */
int rdzvd_status_fill(struct rdzvd_server *srv, struct rdzv_status *ret);

/* The same as the status document (rdzv_status_to_json): a new reference, or NULL when out of
 * memory. */
json_t *rdzvd_status_json(struct rdzvd_server *srv);
