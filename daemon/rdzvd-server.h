/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-server.h: the listening socket, the registry of connections, orderly shutdown. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "../common/rdzv-list.h"
#include "../proto/rdzv-proto.h"
#include "rdzvd-journal.h"
#include "rdzvd-acl.h"

struct rdzvd_store;

struct rdzvd_config {
    const char *bind;          /* address to bind, NULL for dual-stack "::" then "0.0.0.0" */
    uint16_t port;             /* 0 picks a free port */
    enum rdzv_dialect legacy;  /* numbering for connections that do not open with VALIDATE */
    bool legacy_allowed;       /* false: such connections are closed */
    struct rdzv_limits lim;
    const char *state_dir;     /* journal directory (--state-dir); NULL: nothing persisted */
    enum rdzvd_fsync fsync;    /* when journal writes are fsynced (--fsync) */
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
    struct rdzvd_journal *journal; /* its persistence, or NULL */
    struct rdzv_list persist_node; /* in srv->persist_list while its journal holds records */
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
    uint64_t start_ms;            /* rdzv_now_ms() at init, for uptime */
    int state_dirfd;              /* cfg.state_dir opened O_DIRECTORY, or -1 */
    /* Journal records are buffered and written once per loop iteration, before the replies of
     * that iteration go out (those replies wait in flush_list). With --state-dir only. */
    struct rdzv_list persist_list; /* listeners whose journal holds buffered records */
    uv_prepare_t persist_prepare;  /* both active only while persist_list is non-empty */
    uv_check_t persist_check;
    bool persist_handles;          /* the two are initialised and not closed */
    struct rdzvd_stats stats;
    struct rdzvd_guard guard;     /* handshake deadlines, refusal log limit (rdzvd-acl.c) */
};

/* Set up srv on loop with cfg (copied): with cfg->state_dir, create that directory (0700) if
 * missing and replay the main store's journal "main". Logs its own errors. Returns 0 or a
 * negative errno. */
int rdzvd_server_init(struct rdzvd_server *srv, uv_loop_t *loop, const struct rdzvd_config *cfg);
/* Bind and listen; on success srv->bound_addr / bound_port say where. Logs its own errors. */
int rdzvd_server_listen(struct rdzvd_server *srv);
/* Stop accepting and close every connection. Asynchronous: the loop ends when all are closed. */
void rdzvd_server_stop(struct rdzvd_server *srv);
/* Write every journal's buffered records, then send the replies that waited for them. */
void rdzvd_server_persist(struct rdzvd_server *srv);
/* True while replies must wait for rdzvd_server_persist() (it runs in this loop iteration). */
static inline bool rdzvd_server_persist_pending(const struct rdzvd_server *srv)
{
    return !rdzv_list_empty(&srv->persist_list);
}

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
/* Called by the connection code when one of l's connections finished closing. */
void rdzvd_listener_conn_gone(struct rdzvd_listener *l);
