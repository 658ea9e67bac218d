/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job.h: rendezvous jobs as the connection layer sees them (proto/RENDEZVOUS.md): the
 * wire side (rdzvd-job.c) decodes an agent's frames and drives the job state machine
 * (rdzvd-job-sm.h), which owns jobs and members; the status document (rdzvd-job-status.c).
 *
 * Ownership: jobs live in srv->jobs and are the state machine's; a connection only points at
 * its member (rdzvd_conn_set_member). rdzvd_status_json returns a new reference.
 * Threads: the loop thread, from rdzvd_conn's read and close callbacks (and the server's
 * shutdown). Errors: negative errnos; a refusal is also sent to the agent as ERROR. */
#pragma once
#include <jansson.h>
#include <stdint.h>

struct rdzvd_server;
struct rdzvd_conn;
struct rdzv_status;

/* Serve one rendezvous message (after HELLO) from agent connection c. Returns 0, or a negative
 * errno after which the caller closes c (an ERROR frame may already be queued). */
int rdzvd_job_msg(struct rdzvd_conn *c, uint8_t op, const uint8_t *body, uint32_t len);

/* The agent connection c, which stood for member, is closing. */
void rdzvd_job_conn_closed(struct rdzvd_conn *c, void *member);

/* Daemon shutdown: drop every job and its store listener. */
void rdzvd_jobs_shutdown(struct rdzvd_server *srv);

/* Everything rdzvctl status, the status page and /metrics show: the daemon's counters, and per
 * job its state, generation, restarts, nodes (host, node rank, heartbeat age, workers, failures)
 * and recent events. On success *ret owns its arrays (rdzv_status_free); -ENOMEM leaves it
 * untouched. */
int rdzvd_status_fill(struct rdzvd_server *srv, struct rdzv_status *ret);

/* The same as the status document (rdzv_status_to_json): a new reference, or NULL when out of
 * memory. */
json_t *rdzvd_status_json(struct rdzvd_server *srv);
