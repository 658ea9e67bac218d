/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-job-hosted.h: hosted replicas (rdzvd --replicas N). The leader of a
 * replicated rdzvd asks the agents of its jobs to host replicas, one per host, until the
 * configuration has N voters, and replaces the voter of a host whose agents were all lost:
 *   - an agent that joined with host_replica (protocol 1.5) is a candidate; its host is the
 *     address its connection comes from;
 *   - while there are fewer servers than N, the leader sends REPLICA {id, port} to a candidate
 *     on a host that holds no replica yet (id: one past the highest id the configuration has
 *     seen; port: the leader's own); the agent starts `rdzvd --join` there and answers with its
 *     endpoint, which must be on the candidate's own address; the leader then adds it (Raft
 *     add, then assign as voter once caught up). An agent that fails, or does not answer within
 *     RDZVD_VOTERS_ASK_MS, is not asked again; the next candidate is;
 *   - the agent's replica is added to the configuration (not voting), then promoted to a voter
 *     once caught up: one change at a time, each started from the loop, never from inside
 *     libraft's callbacks; a server left not voting (a promotion given up) is removed;
 *   - when a member of a job is declared lost (or nodes do not come back after a change of
 *     leader), a voter (not this one) from whose host no candidate is connected, and that
 *     answered none of the leader's heartbeats at two looks an election timeout apart
 *     (libraft's check-quorum view), is removed, and another host is recruited in its place;
 *   - after each change of the configuration, and to each candidate that joins, the leader
 *     sends REPLICAS: every voter's endpoint, which the agents reconnect to when they lose it.
 *   - an agent whose replica exited (its host and the agent live on) says so, unasked (REPLICA
 *     {id, error}): a voter of that id on that agent's host is then looked at as a lost host's
 *     is (removed once it answers no heartbeat, looked at again up to VOTERS_EXITED_LOOKS
 *     times while libraft still saw it answer), and replaced.
 * Without --replicas (replicas started by hand) nobody is recruited or removed: REPLICAS only.
 *
 * Ownership: struct rdzvd_voters is the job registry's (rdzvd-job-wire.c); it borrows the server.
 * Connections are borrowed between rdzvd_voters_joined and rdzvd_voters_peer_down.
 * Threads: the loop's. Errors: negative errno, logged. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


struct rdzvd_conn;
struct rdzvd_server;
struct rdzvd_voters;

/* A manager for srv (NULL *ret when srv is no replica: every call below is then a no-op). 0 or
 * -ENOMEM. */
int rdzvd_voters_new(struct rdzvd_server *srv, struct rdzvd_voters **ret);
/* Stop: drop the candidates, close the timer; the memory goes once it has closed. NULL: no-op. */
void rdzvd_voters_close(struct rdzvd_voters *v);

/* Agent connection c joined a job; can_host: its JOIN said host_replica. */
void rdzvd_voters_joined(struct rdzvd_voters *v, struct rdzvd_conn *c, bool can_host);
/* Connection c is closing (any rdzv peer: one that is no candidate is ignored). */
void rdzvd_voters_peer_down(struct rdzvd_voters *v, struct rdzvd_conn *c);
/* A member of some job was declared lost. */
void rdzvd_voters_member_lost(struct rdzvd_voters *v);
/* REPLICA from c: the answer to a request, or (an error, unasked) the report that the replica
 * on c's host exited. 0, or a negative errno after which the caller closes c (err says why, to
 * send as ERROR). */
int rdzvd_voters_answer(struct rdzvd_voters *v, struct rdzvd_conn *c, const uint8_t *body,
                        uint32_t len, char *err, size_t errlen);
