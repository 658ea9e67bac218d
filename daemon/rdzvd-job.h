/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job.h: rendezvous jobs as the connection layer sees them (proto/RENDEZVOUS.md): the
 * wire side (rdzvd-job.c) decodes an agent's frames and drives the job state machine
 * (rdzvd-job-sm.h), which owns jobs and members. The status is in rdzvd-job-status.h.
 *
 * Ownership: jobs live in srv->jobs and are the state machine's; a connection only points at
 * its member (rdzvd_conn_set_member).
 * Threads: the loop thread, from rdzvd_conn's read and close callbacks (and the server's
 * shutdown). Errors: negative errnos; a refusal is also sent to the agent as ERROR. */
#pragma once
#include <stdint.h>

struct rdzvd_server;
struct rdzvd_conn;

/* Serve one rendezvous message (after HELLO) from agent connection c. Returns 0, or a negative
 * errno after which the caller closes c (an ERROR frame may already be queued). */
int rdzvd_job_msg(struct rdzvd_conn *c, uint8_t op, const uint8_t *body, uint32_t len);

/* The agent connection c, which stood for member, is closing. */
void rdzvd_job_conn_closed(struct rdzvd_conn *c, void *member);

/* Daemon shutdown: drop every job and its store listener. */
void rdzvd_jobs_shutdown(struct rdzvd_server *srv);
