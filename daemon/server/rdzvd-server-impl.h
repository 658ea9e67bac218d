/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-server-impl.h: PRIVATE to the server's files (rdzvd-server.c: the server's lifetime, the
 * persist barrier, the replica's and the transport's hooks, shutdown; rdzvd-server-admit.c:
 * accepting connections and the first-bytes session; rdzvd-server-listen.c: binding listeners):
 * the server and listener structs and the helpers these files share. Nothing else includes it;
 * the rest of rdzvd goes through rdzvd-server.h.
 *
 * Calls go one way: rdzvd-server-listen.c calls rdzvd-server.c and rdzvd-server-admit.c,
 * rdzvd-server.c calls rdzvd-server-admit.c, which calls neither.
 * Threads: the loop's only, as rdzvd-server.h says; with --accept-thread, accept(2) runs on the
 * acceptor's (rdzvd-acceptor.h), which touches nothing here. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "common/rdzv-list.h"
#include "daemon/data/rdzvd-acl.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/data/rdzvd-disk.h"
#include "daemon/repl/rdzvd-replica.h" /* its types; its functions only through cfg.replica_ops */
#include "daemon/server/rdzvd-server.h"
#include "daemon/data/rdzvd-store.h"
#include "daemon/net/rdzvd-acceptor.h"
#include "daemon/net/rdzvd-transport.h"

/* A listening socket and the key space its TCPStore clients see. The main listener also accepts
 * rendezvous peers; each job generation gets a listener of its own with a fresh store. */
struct rdzvd_listener {
    uv_tcp_t tcp; /* first: callbacks recover the listener from the handle */
    struct rdzvd_server *srv;
    struct rdzvd_store *store;     /* the key space of this listener's TCPStore clients */
    struct rdzvd_journal *journal; /* its persistence, or NULL */
    struct rdzv_list persist_node; /* in srv->persist_list while its journal holds records */
    struct rdzvd_conn_group group; /* the connections that came in on it */
    bool accepts_rdzv;             /* rendezvous peers allowed (main listener only) */
    bool closing;                  /* no longer accepting; freed once its connections are gone */
    bool handle_closed;
    uint16_t port;
    unsigned fds;  /* descriptors counted in srv->job_fds for it (its socket, its journal) */
    int accept_fd; /* its socket, while the acceptor accepts on it (--accept-thread); else -1 */
    char desc[48]; /* "main" or "job <run_id> gen <n>" for logs */
};

struct rdzvd_server {
    uv_loop_t *loop;
    struct rdzvd_listener main;
    bool stopping;
    struct rdzvd_config cfg;
    uint64_t nconns; /* open connections (= net.nconns) */
    /* Descriptors that job generations hold (each store's listening socket and journal): they count
     * with the connections against --max-conns (a token holder's jobs and connections together left
     * an honest job with EMFILE, 336 connections under a limit of 1,024, when the generations'
     * descriptors counted nowhere). */
    uint64_t job_fds;
    uint16_t bound_port;
    char bound_addr[64];
    struct sockaddr_storage bound_sa; /* main listener's address; job listeners reuse it, port 0 */
    uint64_t last_reject_log_ms;
    int backlog;       /* net.core.somaxconn, read once at init */
    uint64_t start_ms; /* rdzv_now_ms() at init, for uptime */
    int state_dirfd;   /* cfg.state_dir opened O_DIRECTORY, or -1 */
    /* Journal records are buffered and written once per loop iteration, before the replies of
     * that iteration go out (net.hold keeps them back meanwhile). With --state-dir only. */
    struct rdzv_list persist_list; /* listeners whose journal holds buffered records */
    uv_prepare_t persist_prepare;  /* both active only while persist_list is non-empty */
    uv_check_t persist_check;
    bool persist_handles;     /* the two are initialised and not closed */
    unsigned handles_closing; /* handles embedded in this struct, closing */
    bool freed;               /* rdzvd_server_free() ran: free once handles_closing is 0 */
    struct rdzvd_stats stats;
    struct rdzvd_store_budget store_budget; /* --max-store-bytes: every store together */
    struct rdzvd_disk disk; /* --state-dir's free space: the stores' journals leave a reserve */
    struct rdzvd_transport net;            /* every connection */
    struct rdzvd_ratelimit refusals;       /* log lines about refused peers */
    struct rdzvd_env env;                  /* what the sessions share */
    const struct rdzvd_peer_handler *peer; /* the job layer; NULL: rendezvous refused */
    void *peer_ud;
    /* --peers: this rdzvd is one replica; its main store is replicated instead of journaled. */
    struct rdzvd_replica *replica;
    /* The jobs' records (rdzvd-job-journals.h): replicated with the main store (--peers), or
     * journaled in --state-dir ("jobs"); NULL without either. */
    struct rdzvd_store *job_table;
    struct rdzvd_journal *job_journal; /* a single rdzvd's journal of job_table */
    const struct rdzvd_replica_ops *rops; /* cfg.replica_ops */
    bool replica_closing;
    char leader_seen[RDZVD_ENDPOINT_LEN]; /* the leader last logged by this follower */
    bool syncing; /* a new leader applies its predecessors' log: nothing is served meanwhile */
    bool led;     /* this replica served as the leader, and has not seen itself deposed since */
    bool failed;  /* replication failed: stopping (rdzvd_server_failed) */
    /* --accept-thread: the listeners' accept(2) on a thread (started: acceptor.started). */
    struct rdzvd_acceptor acceptor;
    uint64_t accept_dropped; /* the acceptor's EMFILE drops already logged */
};

/* rdzvd-server-admit.c: accept, and the first bytes pick the session. */
/* The session of a connection that has sent nothing yet: its first bytes pick TCPStore or rdzv
 * peer (rdzvd_conn_in_session tells whether a connection is still there). */
extern const struct rdzvd_session_ops rdzvd_first_bytes_ops;
/* A listener's connection callback (through the transport's accept pace): accept one connection
 * and start its first-bytes session, or refuse it. Logs its errors. */
void rdzvd_listener_connection_cb(uv_stream_t *s, int status);
/* The acceptor's ready callback (async.data is the server): up to RDZVD_TURN_ACCEPTS of its
 * descriptors a turn become connections, each admitted or refused as above. Logs its errors. */
void rdzvd_server_accepted(struct rdzvd_acceptor *a);

/* rdzvd-server.c: the listeners' lifetime and the persist barrier. */
/* l's connections: accepted through the transport (paced per turn), counted in l->group. */
void rdzvd_listener_group_init(struct rdzvd_listener *l);
/* Close l's journal and free its store, and l unless it is the main listener. */
void rdzvd_listener_free(struct rdzvd_listener *l);
/* Descriptors in use against --max-conns: open connections not closing, the jobs', and those
 * the acceptor holds for the loop (--accept-thread). */
static inline uint64_t server_fds_used(const struct rdzvd_server *srv)
{
    return srv->net.nconns - srv->net.nclosing + srv->job_fds +
           rdzvd_acceptor_queued(&srv->acceptor);
}
/* Close l's handle; the main listener's is embedded in the server, which waits for it. A job's
 * listener is freed once its handle and its connections are gone. */
void rdzvd_listener_close_handle(struct rdzvd_listener *l);
/* The journal callback (rdzvd_journal_set_buffered) of a listener (ud): its records are written
 * before this iteration's replies. */
void rdzvd_listener_journal_pending_cb(void *ud);
