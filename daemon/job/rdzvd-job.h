/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job.h: rendezvous jobs as the connection layer sees them (proto/RENDEZVOUS.md): the
 * wire side (rdzvd-job-wire.c) decodes an agent's frames and drives the job state machine
 * (rdzvd-job-sm.h), which owns jobs and members. The job layer keeps its jobs in a registry of
 * its own (struct rdzvd_jobs, one per server); the status is made in rdzvd-job-status.c.
 *
 * Ownership: the caller of rdzvd_jobs_new() owns the registry (rdzvd_jobs_free); the jobs in it
 * are the state machine's; a connection only points at its member (rdzvd_conn_set_member). The
 * server is borrowed and must outlive the registry's use (its connections and timers).
 * Threads: the loop thread, from the peer handler callbacks (rdzvd-peer.h: rdzvd_conn's read
 * and close callbacks, the server's shutdown) and the front ends' requests.
 * Errors: negative errnos; a refusal is also sent to the agent as ERROR. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

struct rdzvd_conn;
struct rdzvd_status_sel;
struct rdzvd_jobs; /* opaque: fields live in rdzvd-job-wire.c */
struct rdzvd_server;
struct rdzv_status;

/* A registry of jobs on srv's loop, opening their stores as srv's listeners (with srv's
 * --state-dir and --fsync). 0 with *ret set, or -ENOMEM. */
int rdzvd_jobs_new(struct rdzvd_server *srv, struct rdzvd_jobs **ret);
/* Free the registry (NULL: no-op); returns NULL. Only once it is empty: after
 * rdzvd_jobs_shutdown() and the loop has run, or if no job was ever made. */
struct rdzvd_jobs *rdzvd_jobs_free(struct rdzvd_jobs *jobs);

/* The peer handler's callbacks (struct rdzvd_peer_handler), ud being the struct rdzvd_jobs. */
/* Serve one rendezvous message (after HELLO) from agent connection c. Returns 0, or a negative
 * errno after which the caller closes c (an ERROR frame may already be queued). */
int rdzvd_job_msg(void *ud, struct rdzvd_conn *c, uint8_t op, const uint8_t *body, uint32_t len);
/* The agent connection c, which stood for member, is closing. */
void rdzvd_job_conn_closed(void *ud, struct rdzvd_conn *c, void *member);
/* The rdzv peer c (past its handshake) is closing, member or not. */
void rdzvd_jobs_peer_down(struct rdzvd_jobs *jobs, struct rdzvd_conn *c);
/* A replica that led was deposed: drop every job (the next leader's now); the hosted replicas'
 * manager stays, for when it leads again. */
void rdzvd_jobs_deposed(struct rdzvd_jobs *jobs);
/* rdzvd started with a job table (--state-dir), or a replica began to lead (its log applied):
 * every job whose record says a generation runs is rebuilt in memory now, its agents given a
 * window to come back (RDZVD_IN_REBUILD, rdzvd-job-sm.h). */
void rdzvd_jobs_lead(struct rdzvd_jobs *jobs);
/* A job ended here and none is held now (running, or waiting in its record): what a job-scoped
 * rdzvd (--exit-when-idle) was for is over. NULL: false. */
bool rdzvd_jobs_all_ended(const struct rdzvd_jobs *jobs);
/* Daemon shutdown: drop every job and its store listener. */
void rdzvd_jobs_shutdown(void *ud);

/* The daemon's status: the server's counters and every job (rdzvd-job-status.h). On success
 * *ret owns its arrays (rdzv_status_free); -ENOMEM leaves it untouched. */
int rdzvd_jobs_status(const struct rdzvd_jobs *jobs, struct rdzv_status *ret);
/* The same, of only what sel selects (struct rdzvd_status_sel, rdzvd-job-status.h; NULL: all). */
int rdzvd_jobs_status_sel(const struct rdzvd_jobs *jobs, struct rdzvd_status_sel *sel,
                          struct rdzv_status *ret);
