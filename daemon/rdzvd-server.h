/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-server.h: the listening sockets (each with its store and journal), accepting connections
 * into the transport and handing them to a session (TCPStore or rdzv peer, picked from their first
 * bytes), the persist barrier (journal records written before the replies that acknowledge them),
 * and orderly shutdown. The job layer plugs in through rdzvd_server_set_peer_handler(); this layer
 * never includes its headers.
 *
 * Ownership: the caller owns struct rdzvd_server (embedded or allocated; it must not move after
 * rdzvd_server_init). Listeners are owned by the server and freed once closed and empty.
 * Errors: negative errno. Threads: the loop's only (libuv callbacks and what they call). */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "../common/rdzv-list.h"
#include "../proto/rdzv-proto.h"
#include "rdzvd-acl.h"
#include "rdzvd-config.h"
#include "rdzvd-journal.h"
#include "rdzvd-transport.h"

struct rdzvd_store;
struct rdzvd_peer_handler;

/* A listening socket and the key space its TCPStore clients see. The main listener also accepts
 * rendezvous peers; each job generation gets a listener of its own with a fresh store. */
struct rdzvd_listener {
    uv_tcp_t tcp; /* first: callbacks recover the listener from the handle */
    struct rdzvd_server *srv;
    struct rdzvd_store *store;   /* the key space of this listener's TCPStore clients */
    struct rdzvd_journal *journal; /* its persistence, or NULL */
    struct rdzv_list persist_node; /* in srv->persist_list while its journal holds records */
    struct rdzvd_conn_group group; /* the connections that came in on it */
    bool accepts_rdzv;           /* rendezvous peers allowed (main listener only) */
    bool closing;                /* no longer accepting; freed once its connections are gone */
    bool handle_closed;
    uint16_t port;
    char desc[48];               /* "main" or "job <run_id> gen <n>" for logs */
};

/* Read by the job layer and the front ends (status); written by this layer only. */
struct rdzvd_server {
    uv_loop_t *loop;
    struct rdzvd_listener main;
    bool stopping;
    struct rdzvd_config cfg;
    struct rdzv_list jobs;        /* jobs (the job layer's list; this layer only initialises it) */
    uint64_t nconns;              /* open connections (= net.nconns) */
    uint16_t bound_port;
    char bound_addr[64];
    struct sockaddr_storage bound_sa; /* main listener's address; job listeners reuse it, port 0 */
    uint64_t last_reject_log_ms;
    int backlog;                  /* net.core.somaxconn, read once at init */
    uint64_t start_ms;            /* rdzv_now_ms() at init, for uptime */
    int state_dirfd;              /* cfg.state_dir opened O_DIRECTORY, or -1 */
    /* Journal records are buffered and written once per loop iteration, before the replies of
     * that iteration go out (net.hold keeps them back meanwhile). With --state-dir only. */
    struct rdzv_list persist_list; /* listeners whose journal holds buffered records */
    uv_prepare_t persist_prepare;  /* both active only while persist_list is non-empty */
    uv_check_t persist_check;
    bool persist_handles;          /* the two are initialised and not closed */
    struct rdzvd_stats stats;
    struct rdzvd_transport net;    /* every connection */
    struct rdzvd_ratelimit refusals; /* log lines about refused peers */
    struct rdzvd_env env;          /* what the sessions share */
    const struct rdzvd_peer_handler *peer; /* the job layer; NULL: rendezvous refused */
};

/* Set up srv on loop with cfg (copied): with cfg->state_dir, create that directory (0700) if
 * missing and replay the main store's journal "main". Logs its own errors. Returns 0 or a
 * negative errno. */
int rdzvd_server_init(struct rdzvd_server *srv, uv_loop_t *loop, const struct rdzvd_config *cfg);
/* Bind and listen; on success srv->bound_addr / bound_port say where. Logs its own errors. */
int rdzvd_server_listen(struct rdzvd_server *srv);
/* Stop accepting and close every connection. Asynchronous: the loop ends when all are closed. */
void rdzvd_server_stop(struct rdzvd_server *srv);
/* Register the job layer's entry points (NULL: none). Before rdzvd_server_listen. */
void rdzvd_server_set_peer_handler(struct rdzvd_server *srv, const struct rdzvd_peer_handler *h);
/* Write every journal's buffered records, then send the replies that waited for them. */
void rdzvd_server_persist(struct rdzvd_server *srv);
/* Write out output queued outside a connection's own requests (rendezvous frames from timers,
 * woken waits); it waits for rdzvd_server_persist() while journal records are pending. */
void rdzvd_conn_flush_pending(struct rdzvd_server *srv);

/* Release what init allocated. Call after the loop has finished. */
void rdzvd_server_done(struct rdzvd_server *srv);

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
