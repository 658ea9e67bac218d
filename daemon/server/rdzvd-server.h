/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-server.h: the listening sockets (each with its store and journal), accepting connections
 * into the transport and handing them to a session (TCPStore or rdzv peer, picked from their first
 * bytes), the persist barrier (journal records written before the replies that acknowledge them),
 * and orderly shutdown. The job layer plugs in through rdzvd_server_set_peer_handler(); this layer
 * never includes its headers.
 *
 * Ownership: struct rdzvd_server and struct rdzvd_listener are opaque (their fields live in
 * rdzvd-server-impl.h). rdzvd_server_new() allocates the server; rdzvd_server_free() releases it.
 * Listeners are owned by the server and freed once closed and empty.
 * Errors: negative errno. Threads: the loop's only (libuv callbacks and what they call). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/data/rdzvd-config.h"

struct rdzvd_peer_handler;

struct rdzvd_server;   /* opaque */
struct rdzvd_listener; /* opaque: a listening socket and the key space its TCPStore clients see */

/* What the server tells about itself (status, logs). */
struct rdzvd_server_info {
    char addr[64];     /* the main listener's address, once listening */
    uint16_t port;     /* its port, once listening */
    uint64_t start_ms; /* rdzv_now_ms() at rdzvd_server_new, for uptime */
    uint64_t nconns;   /* open connections */
    struct rdzvd_stats stats;
    uint64_t main_store_keys; /* keys in the main listener's store */
    /* What all stores hold for clients (rdzvd_store_held) and --max-store-bytes. */
    uint64_t store_held, store_limit;
    /* Descriptors held for clients (connections and job generations' stores and journals)
     * and --max-conns; input buffered for requests not served yet and --max-input-bytes. */
    uint64_t fds_held, fds_limit, input_held, input_limit;
};

/* A server on loop with cfg (copied; what it points to must outlive the server): with
 * cfg->state_dir, create that directory (0700) if missing and replay the main store's journal
 * "main". Logs its own errors. Returns 0 with *ret the caller's (rdzvd_server_free), or a
 * negative errno; either way the loop must run once more before uv_loop_close (handles that
 * were opened close through it). */
int rdzvd_server_new(uv_loop_t *loop, const struct rdzvd_config *cfg, struct rdzvd_server **ret);
/* Bind and listen; on success rdzvd_server_info() says where. Logs its own errors. */
int rdzvd_server_listen(struct rdzvd_server *srv);
/* Stop accepting and close every connection. Asynchronous: the loop ends when all are closed. */
void rdzvd_server_stop(struct rdzvd_server *srv);
/* Register the job layer's entry points (NULL: none) and the ud they are called with (borrowed:
 * it must outlive the server's connections). Before rdzvd_server_listen. */
void rdzvd_server_set_peer_handler(struct rdzvd_server *srv, const struct rdzvd_peer_handler *h,
                                   void *ud);
/* Write out output queued outside a connection's own requests (rendezvous frames from timers,
 * woken waits); it waits for rdzvd_server_persist() while journal records are pending. */
void rdzvd_conn_flush_pending(struct rdzvd_server *srv);

/* Release srv (NULL: no-op); returns NULL. Call after rdzvd_server_stop() and the loop has
 * finished; a server that never listened (or whose listen failed) may be freed at once, and the
 * loop must then run once more: its memory goes when its handles have closed. */
struct rdzvd_server *rdzvd_server_free(struct rdzvd_server *srv);

/* For the layers above, read once at their init (not on the hot path). */
uv_loop_t *rdzvd_server_loop(const struct rdzvd_server *srv);
const struct rdzvd_config *rdzvd_server_config(const struct rdzvd_server *srv);
/* --state-dir opened O_DIRECTORY, or -1 without it. Owned by the server. */
int rdzvd_server_state_dirfd(const struct rdzvd_server *srv);
/* The job table: the jobs' records (rdzvd-job-journals.h). A replica's (--peers) is replicated
 * with the main store (changes made by the leader go to the log with the turn's other changes,
 * and replies wait for them); a single rdzvd's with --state-dir is journaled there ("jobs",
 * written and fsynced as each change is made). NULL for a single rdzvd without --state-dir.
 * Owned by the server. */
struct rdzvd_store *rdzvd_server_job_table(const struct rdzvd_server *srv);
/* The job table's journal (a single rdzvd's with --state-dir), or NULL. Owned by the server. */
struct rdzvd_journal *rdzvd_server_job_journal(const struct rdzvd_server *srv);
/* The replica (--peers) and the table of functions to call it through (rdzvd-replica.h), or NULL
 * for a single rdzvd and once the replica closes. Owned by the server. */
struct rdzvd_replica;
struct rdzvd_replica_ops;
struct rdzvd_replica *rdzvd_server_replica(const struct rdzvd_server *srv,
                                           const struct rdzvd_replica_ops **ops);
/* Fill *ret with the server's address, counters and uptime base. Cannot fail. */
void rdzvd_server_info(const struct rdzvd_server *srv, struct rdzvd_server_info *ret);
/* Replication failed (--peers): the server stopped or is stopping, and rdzvd exits 75. */
bool rdzvd_server_failed(const struct rdzvd_server *srv);

/* Open a listener with a store of its own on the main listener's address. desc names it in logs.
 * state_name: NULL, or 1..200 characters of [A-Za-z0-9._-] (else -EINVAL): with --state-dir the
 * store is journaled to DIR/<state_name>.journal, and what an earlier listener (or an earlier
 * rdzvd) of that name left there is replayed into it first; without --state-dir it is ignored.
 * port: 0 lets the kernel pick; otherwise exactly that port, -EADDRINUSE if it is taken.
 * Logs journal errors (not bind errors). Returns 0 or a negative errno. */
int rdzvd_listener_open(struct rdzvd_server *srv, const char *desc, const char *state_name,
                        uint16_t port, struct rdzvd_listener **ret);
/* Stop accepting, close its connections, free it and its store once they are gone. Its journal
 * is closed at once (its store is no longer persisted from here on): fsynced and kept, or with
 * drop_state deleted. */
void rdzvd_listener_close(struct rdzvd_listener *l, bool drop_state);
/* The port l listens on. */
uint16_t rdzvd_listener_port(const struct rdzvd_listener *l);
