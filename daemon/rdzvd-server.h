/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-server.h: the listening socket, the registry of connections, orderly shutdown. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "../common/rdzv-list.h"
#include "../proto/rdzv-proto.h"
#include "rdzvd-acl.h"

struct rdzvd_store;

struct rdzvd_config {
    const char *bind;          /* address to bind, NULL for dual-stack "::" then "0.0.0.0" */
    uint16_t port;             /* 0 picks a free port */
    enum rdzv_dialect legacy;  /* numbering for connections that do not open with VALIDATE */
    bool legacy_allowed;       /* false: such connections are closed */
    struct rdzv_limits lim;
    const struct rdzv_token *token;     /* rdzv peers must prove it (HELLO+AUTH); NULL: no auth */
    const struct rdzvd_acl *store_acl;  /* TCPStore clients' addresses; NULL: anyone */
    uint64_t handshake_timeout_ms;      /* close connections not through their handshake; 0: never */
};

/* A listening socket and the key space its TCPStore clients see. The main listener also accepts
 * rendezvous peers; each job generation gets a listener of its own with a fresh store. */
struct rdzvd_listener {
    uv_tcp_t tcp; /* first: callbacks recover the listener from the handle */
    struct rdzvd_server *srv;
    struct rdzvd_store *store;   /* the key space of this listener's TCPStore clients */
    struct rdzv_list conns;      /* struct rdzvd_conn.lst_node */
    uint64_t nconns;
    bool accepts_rdzv;           /* rendezvous peers allowed (main listener only) */
    bool closing;                /* no longer accepting; freed once its connections are gone */
    bool handle_closed;
    uint16_t port;
    char desc[48];               /* "main" or "job <run_id> gen <n>" for logs */
};

struct rdzvd_stats {
    uint64_t accepted, rejected, closed_proto, requests;
};

/* Shared with rdzvd-conn.c; everything else treats it as opaque. */
struct rdzvd_server {
    uv_loop_t *loop;
    struct rdzvd_listener main;
    bool stopping;
    struct rdzvd_config cfg;
    struct rdzv_list jobs;        /* jobs (rdzvd-job.c) */
    struct rdzv_list conns;       /* struct rdzvd_conn.node */
    struct rdzv_list flush_list;  /* connections with replies queued by another's request */
    uint64_t nconns;
    uint64_t next_id;
    uint16_t bound_port;
    char bound_addr[64];
    struct sockaddr_storage bound_sa; /* main listener's address; job listeners reuse it, port 0 */
    uint8_t *scratch;             /* one read buffer shared by all connections (one thread) */
    size_t scratch_len;
    uint64_t last_reject_log_ms;
    int backlog;                  /* net.core.somaxconn, read once at init */
    struct rdzvd_stats stats;
    struct rdzvd_guard guard;     /* handshake deadlines, refusal log limit (rdzvd-acl.c) */
};

/* Set up srv on loop with cfg (copied). Returns 0 or a negative errno. */
int rdzvd_server_init(struct rdzvd_server *srv, uv_loop_t *loop, const struct rdzvd_config *cfg);
/* Bind and listen; on success srv->bound_addr / bound_port say where. Logs its own errors. */
int rdzvd_server_listen(struct rdzvd_server *srv);
/* Stop accepting and close every connection. Asynchronous: the loop ends when all are closed. */
void rdzvd_server_stop(struct rdzvd_server *srv);
/* Release what init allocated. Call after the loop has finished. */
void rdzvd_server_done(struct rdzvd_server *srv);

/* Open a listener with a fresh, empty store on the main listener's address and a kernel-chosen
 * port. desc names it in logs. Returns 0 or a negative errno. */
int rdzvd_listener_open(struct rdzvd_server *srv, const char *desc, struct rdzvd_listener **ret);
/* The same on a given port (0: kernel-chosen): -EADDRINUSE when it is taken. */
int rdzvd_listener_open_port(struct rdzvd_server *srv, const char *desc, uint16_t port,
                             struct rdzvd_listener **ret);
/* Stop accepting, close its connections, free it and its store once they are gone. */
void rdzvd_listener_close(struct rdzvd_listener *l);
/* Called by the connection code when one of l's connections finished closing. */
void rdzvd_listener_conn_gone(struct rdzvd_listener *l);
