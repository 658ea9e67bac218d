/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-server.c: listeners (dual-stack with IPv4 fallback), accept and the first-bytes session
 * that picks TCPStore or rdzv peer, the persist barrier, shut down. */
#include "rdzvd-server.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/rdzv-buf.h"
#include "../common/rdzv-log.h"
#include "../common/rdzv-util.h"
#include "../proto/rdzv-frame.h"
#include "../proto/rdzv-msg.h"
#include "../proto/rdzv-tcpstore.h"
#include "rdzvd-acl.h"
#include "rdzvd-journal.h"
#include "rdzvd-peer.h"
#include "rdzvd-replica.h" /* its types; its functions only through cfg.replica_ops */
#include "rdzvd-store.h"
#include "rdzvd-tcpstore.h"
#include "rdzvd-transport.h"

#define SOMAXCONN_WARN 4096

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
    char desc[48]; /* "main" or "job <run_id> gen <n>" for logs */
};

struct rdzvd_server {
    uv_loop_t *loop;
    struct rdzvd_listener main;
    bool stopping;
    struct rdzvd_config cfg;
    uint64_t nconns; /* open connections (= net.nconns) */
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
    struct rdzvd_transport net;            /* every connection */
    struct rdzvd_ratelimit refusals;       /* log lines about refused peers */
    struct rdzvd_env env;                  /* what the sessions share */
    const struct rdzvd_peer_handler *peer; /* the job layer; NULL: rendezvous refused */
    void *peer_ud;
    /* --peers: this rdzvd is one replica; its main store is replicated instead of journaled. */
    struct rdzvd_replica *replica;
    /* The jobs' records (rdzvd-job-record.h): replicated with the main store (--peers), or
     * journaled in --state-dir ("jobs"); NULL without either. */
    struct rdzvd_store *job_table;
    struct rdzvd_journal *job_journal; /* a single rdzvd's journal of job_table */
    const struct rdzvd_replica_ops *rops; /* cfg.replica_ops */
    bool replica_closing;
    char leader_seen[RDZVD_ENDPOINT_LEN]; /* the leader last logged by this follower */
    bool syncing; /* a new leader applies its predecessors' log: nothing is served meanwhile */
    bool led;     /* this replica served as the leader, and has not seen itself deposed since */
    bool failed;  /* replication failed: stopping (rdzvd_server_failed) */
};

static void rdzvd_server_persist(struct rdzvd_server *srv);
static void server_fail(struct rdzvd_server *srv);
static void persist_prepare_cb(uv_prepare_t *h);
static void persist_check_cb(uv_check_t *h);

/* Free srv (and its replica) once nothing of it is closing any more. */
static void server_free_now(struct rdzvd_server *srv)
{
    if (srv->replica)
        srv->rops->destroy(srv->replica);
    rdzvd_store_free(srv->job_table);
    free(srv);
}

/* One of the handles embedded in srv finished closing. */
static void server_handle_closed(struct rdzvd_server *srv)
{
    srv->handles_closing--;
    if (srv->freed && srv->handles_closing == 0)
        server_free_now(srv);
}

static void server_handle_close_cb(uv_handle_t *h)
{
    server_handle_closed(h->data);
}

static int read_somaxconn(void)
{
    FILE *f = fopen("/proc/sys/net/core/somaxconn", "re");
    int v = 4096;

    if (f) {
        if (fscanf(f, "%d", &v) != 1)
            v = 4096;
        fclose(f);
    }
    return v;
}

/* Create (0700) and open the state directory. Logs its errors. */
static int state_dir_open(struct rdzvd_server *srv)
{
    const char *dir = srv->cfg.state_dir;
    int r;

    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return log_error_errno(-errno, "cannot use --state-dir %s: cannot create it", dir);
    srv->state_dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (srv->state_dirfd < 0)
        return log_error_errno(-errno, "cannot use --state-dir %s", dir);
    if (faccessat(srv->state_dirfd, ".", W_OK | X_OK, AT_EACCESS) < 0) {
        r = -errno;
        close(srv->state_dirfd);
        srv->state_dirfd = -1;
        return log_error_errno(r, "cannot use --state-dir %s: not writable", dir);
    }
    return 0;
}

/* A single rdzvd's job table, journaled in --state-dir as "jobs" (replayed here: the records
 * of the jobs a restarted rdzvd rebuilds) and written through, fsynced unless --fsync no: a
 * record is saved once per generation, before the agents hear of it. Job records of an rdzvd
 * before this journal (files job-*.state) are not read: said once. */
static int job_table_open(struct rdzvd_server *srv)
{
    enum rdzvd_fsync mode = srv->cfg.fsync == RDZVD_FSYNC_NO ? RDZVD_FSYNC_NO : RDZVD_FSYNC_ALWAYS;
    int r, fd;
    DIR *d;

    r = rdzvd_store_new(&srv->cfg.lim, rdzvd_tcpstore_wake, &srv->job_table);
    if (r < 0)
        return log_error_errno(r, "init");
    r = rdzvd_journal_open(srv->loop, srv->state_dirfd, srv->cfg.state_dir, "jobs", mode,
                           srv->job_table, &srv->job_journal);
    if (r < 0)
        return r;
    fd = dup(srv->state_dirfd);
    d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d && fd >= 0)
        close(fd);
    for (struct dirent *de; d && (de = readdir(d));) {
        size_t n = strlen(de->d_name);

        if (strncmp(de->d_name, "job-", 4) == 0 && n > 10 &&
            strcmp(de->d_name + n - 6, ".state") == 0) {
            log_warn("--state-dir %s holds job records of an older rdzvd (%s, ...): they are "
                     "not read, and those jobs start afresh (delete the files)",
                     srv->cfg.state_dir, de->d_name);
            break;
        }
    }
    if (d)
        closedir(d);
    return 0;
}

static void persist_prepare_cb(uv_prepare_t *h)
{
    rdzvd_server_persist(h->data);
}

static void persist_check_cb(uv_check_t *h)
{
    rdzvd_server_persist(h->data);
}

/* A listener's journal started buffering: make sure it is written before this iteration's
 * replies. Mutations happen in read callbacks (then the check handle runs right after the poll
 * phase) or in timers (then the prepare handle runs before the loop sleeps). */
static void listener_journal_pending_cb(void *ud)
{
    struct rdzvd_listener *l = ud;
    struct rdzvd_server *srv = l->srv;

    if (rdzv_list_empty(&l->persist_node))
        rdzv_list_add_tail(&srv->persist_list, &l->persist_node);
    srv->net.hold = true;
    if (srv->persist_handles && !uv_is_active((uv_handle_t *)&srv->persist_check)) {
        (void)uv_prepare_start(&srv->persist_prepare, persist_prepare_cb);
        (void)uv_check_start(&srv->persist_check, persist_check_cb);
    }
}

static void rdzvd_server_persist(struct rdzvd_server *srv)
{
    while (!rdzv_list_empty(&srv->persist_list)) {
        struct rdzvd_listener *l =
            rdzv_container_of(srv->persist_list.next, struct rdzvd_listener, persist_node);

        rdzv_list_del(&l->persist_node);
        if (l->journal)
            (void)rdzvd_journal_flush(l->journal); /* an error turns it off, and is logged */
    }
    if (srv->persist_handles) {
        (void)uv_prepare_stop(&srv->persist_prepare);
        (void)uv_check_stop(&srv->persist_check);
    }
    if (srv->failed)
        return; /* replies to changes that may not commit never go out */
    if (srv->replica) {
        /* This turn's changes go to the log as one entry; until it commits every reply waits
         * and no request is served (replica_settled_cb releases them). */
        if (srv->rops->flush(srv->replica) < 0) {
            server_fail(srv);
            return;
        }
        if (srv->rops->busy(srv->replica)) {
            srv->net.hold = true;
            srv->net.paused = true;
            return;
        }
    }
    srv->net.hold = false;
    rdzvd_transport_flush_pending(&srv->net);
    if (srv->net.paused && !srv->syncing)
        rdzvd_transport_resume(&srv->net);
}

/* ---- replication (--peers) ---- */

/* Replication cannot go on (an entry's fate unknown, or out of memory): stop, so that a restart
 * on the same --state-dir replays the log and follows. */
static void server_fail(struct rdzvd_server *srv)
{
    if (srv->failed)
        return;
    srv->failed = true;
    log_error("replication failed: stopping (exit code 75); restart rdzvd on the same "
              "--state-dir and it follows the log again");
    if (srv->cfg.on_failure)
        srv->cfg.on_failure(srv->cfg.failure_ud);
    else
        rdzvd_server_stop(srv);
}

/* The replica's first change since its last entry: hold replies from now, and propose the
 * changes once this turn's requests are served (as a journal's records are written). */
static void replica_pending_cb(void *ud)
{
    struct rdzvd_server *srv = ud;

    srv->net.hold = true;
    if (srv->persist_handles && !uv_is_active((uv_handle_t *)&srv->persist_check)) {
        (void)uv_prepare_start(&srv->persist_prepare, persist_prepare_cb);
        (void)uv_check_start(&srv->persist_check, persist_check_cb);
    }
}

static void replica_settled_cb(void *ud, int status)
{
    struct rdzvd_server *srv = ud;

    if (status < 0) {
        server_fail(srv);
        return;
    }
    srv->syncing = false;
    if (!srv->stopping)
        rdzvd_server_persist(srv); /* the next entry, or the replies and the paused requests */
}

static void replica_closed_cb(void *ud)
{
    server_handle_closed(ud);
}

/* The cluster decided to end (rdzvd_replica_shutdown): as --exit-when-idle's own end. */
static void replica_shutdown_cb(void *ud)
{
    struct rdzvd_server *srv = ud;

    if (srv->cfg.on_shutdown)
        srv->cfg.on_shutdown(srv->cfg.failure_ud);
    else
        rdzvd_server_stop(srv);
}

static const struct rdzvd_replica_hooks replica_hooks = {
    .pending = replica_pending_cb,
    .settled = replica_settled_cb,
    .closed = replica_closed_cb,
    .shutdown = replica_shutdown_cb,
};

static void replica_close(struct rdzvd_server *srv)
{
    if (srv->replica && !srv->replica_closing) {
        srv->replica_closing = true;
        srv->handles_closing++;
        srv->rops->close(srv->replica);
    }
}

bool rdzvd_server_failed(const struct rdzvd_server *srv)
{
    return srv->failed;
}

/* A connection on a replica's main listener, whose first byte is first: only a leader that has
 * caught up serves. Returns 1 when c may go on now; 0 when it waits (a new leader syncing: c is
 * served once it has); -1 when it was refused: a follower closes a TCPStore client with the
 * leader's address in the log line, and answers an rdzv peer's HELLO with an ERROR that names the
 * leader (protocol 1.3), so that an agent goes there. */
static int replica_admits(struct rdzvd_server *srv, struct rdzvd_conn *c, uint8_t first)
{
    unsigned id = srv->rops->id(srv->replica), n = srv->rops->count(srv->replica);
    struct rdzv_buf *out;
    const char *leader;

    switch (srv->rops->role(srv->replica)) {
    case RDZVD_ROLE_LEADER:
        srv->led = true;
        return 1;
    case RDZVD_ROLE_SYNCING:
        srv->syncing = true;
        srv->net.paused = true;
        return 0;
    default:
        break;
    }
    leader = srv->rops->leader(srv->replica);
    if (leader && strcmp(leader, srv->leader_seen) != 0) {
        /* Once per leader: the refusals below are rate-limited. */
        snprintf(srv->leader_seen, sizeof(srv->leader_seen), "%s", leader);
        log_info("replication: replica %u follows; the leader is %s",
                 srv->rops->id(srv->replica), leader);
    }
    srv->stats.rejected++;
    rdzvd_conn_warn_limited(c, &srv->refusals,
                            "refused: this rdzvd is replica %u of %u and not the leader; %s%s", id,
                            n, leader ? "the leader is " : "no leader is elected yet",
                            leader ? leader : "");
    if (first == RDZV_MSG_HELLO && (out = rdzvd_conn_out(c)) &&
        rdzv_msg_put_redirect(out, leader ? leader : "",
                              "this rdzvd is replica %u of %u and not the leader; %s%s", id, n,
                              leader ? "the leader is " : "no leader is elected yet",
                              leader ? leader : "") == 0) {
        rdzvd_conn_finish(c);
        return -1;
    }
    rdzvd_conn_close(c, "not the leader");
    return -1;
}

/* This replica served as the leader and is not the leader any more (it lost its majority, or
 * another was elected while it was stopped): its store and its jobs may be behind the cluster's.
 * It serves nothing more from them: its jobs are dropped without a word to the job table (they
 * are the next leader's now, rebuilt from their records when the agents resume there), and every
 * connection it took as the leader is closed, so that agents go to their other endpoints. */
static void server_deposed(struct rdzvd_server *srv)
{
    const char *leader = srv->rops->leader(srv->replica);

    srv->led = false;
    log_warn("replication: replica %u is no longer the leader (%s%s): closing the connections it "
             "served as the leader; its jobs go on with the next one",
             srv->rops->id(srv->replica), leader ? "the leader is " : "no leader is elected yet",
             leader ? leader : "");
    if (srv->peer && (srv->peer->deposed || srv->peer->shutdown))
        (srv->peer->deposed ? srv->peer->deposed : srv->peer->shutdown)(srv->peer_ud);
    rdzvd_conn_group_close(&srv->main.group, "this replica is no longer the leader");
}

static const struct rdzvd_session_ops first_bytes_ops;

/* Each turn of a connection's requests: a replica serves them only while it leads. */
static bool server_may_serve_cb(struct rdzvd_transport *t, struct rdzvd_conn *c)
{
    struct rdzvd_server *srv = rdzv_container_of(t, struct rdzvd_server, net);
    enum rdzvd_role role;

    if (!srv->replica || srv->stopping)
        return true;
    role = srv->rops->role(srv->replica);
    if (role == RDZVD_ROLE_LEADER || role == RDZVD_ROLE_SYNCING) {
        srv->led |= role == RDZVD_ROLE_LEADER;
        return true;
    }
    if (srv->led)
        server_deposed(srv);
    if (rdzvd_conn_closing(c))
        return false; /* closed just now, with the connections it served as the leader */
    /* A connection still choosing its session is refused with the leader's address
     * (replica_admits); one on a job's store listener goes with its job. */
    if (rdzvd_conn_group(c) != &srv->main.group || rdzvd_conn_in_session(c, &first_bytes_ops))
        return true;
    rdzvd_conn_close(c, "this replica is no longer the leader");
    return false;
}

void rdzvd_conn_flush_pending(struct rdzvd_server *srv)
{
    rdzvd_transport_flush_pending(&srv->net);
}

/* ---- transport hooks ---- */

static void server_release_cb(struct rdzvd_transport *t)
{
    rdzvd_server_persist(rdzv_container_of(t, struct rdzvd_server, net));
}

static struct rdzvd_listener *listener_of(struct rdzvd_conn *c)
{
    return rdzv_container_of(rdzvd_conn_group(c), struct rdzvd_listener, group);
}

static void server_handshake_expired_cb(struct rdzvd_conn *c)
{
    struct rdzvd_server *srv = listener_of(c)->srv;
    char why[96];

    snprintf(why, sizeof(why), "no handshake within %.1f s (--handshake-timeout)",
             (double)srv->cfg.handshake_timeout_ms / 1000);
    srv->stats.closed_proto++;
    rdzvd_conn_warn_limited(c, &srv->refusals, "%s", why);
    rdzvd_conn_close(c, why);
}

static void server_transport_closed_cb(struct rdzvd_transport *t)
{
    server_handle_closed(rdzv_container_of(t, struct rdzvd_server, net));
}

static void listener_conn_gone(struct rdzvd_conn_group *g);

static const struct rdzvd_transport_hooks server_hooks = {
    .release = server_release_cb,
    .handshake_expired = server_handshake_expired_cb,
    .closed = server_transport_closed_cb,
    .may_serve = server_may_serve_cb,
};

static void persist_close_handles(struct rdzvd_server *srv)
{
    if (!srv->persist_handles)
        return;
    srv->persist_handles = false;
    srv->handles_closing += 2;
    uv_close((uv_handle_t *)&srv->persist_prepare, server_handle_close_cb);
    uv_close((uv_handle_t *)&srv->persist_check, server_handle_close_cb);
}

static void server_transport_done(struct rdzvd_server *srv, bool free_buffers)
{
    srv->handles_closing++;
    if (!rdzvd_transport_done(&srv->net, free_buffers))
        srv->handles_closing--;
}

static void listener_connection_cb(uv_stream_t *s, int status);

/* l's connections: accepted through the transport (paced per turn), counted in l->group. */
static void listener_group_init(struct rdzvd_listener *l)
{
    rdzv_list_init(&l->group.conns);
    l->group.conn_gone = listener_conn_gone;
    rdzvd_paced_init(&l->group.paced, (uv_stream_t *)&l->tcp, listener_connection_cb);
}

int rdzvd_server_new(uv_loop_t *loop, const struct rdzvd_config *cfg, struct rdzvd_server **ret)
{
    struct rdzvd_server *srv;
    int r;

    srv = calloc(1, sizeof(*srv));
    if (!srv)
        return log_error_errno(-ENOMEM, "init");
    srv->start_ms = rdzv_now_ms();
    srv->loop = loop;
    srv->cfg = *cfg;
    listener_group_init(&srv->main);
    rdzv_list_init(&srv->main.persist_node);
    rdzv_list_init(&srv->persist_list);
    srv->main.srv = srv;
    srv->main.accepts_rdzv = true;
    srv->main.handle_closed = true; /* until listen succeeds */
    snprintf(srv->main.desc, sizeof(srv->main.desc), "main");
    srv->backlog = read_somaxconn();
    srv->state_dirfd = -1;
    srv->env.cfg = &srv->cfg;
    srv->env.stats = &srv->stats;
    srv->env.refusals = &srv->refusals;
    srv->persist_prepare.data = srv->persist_check.data = srv;
    r = rdzvd_transport_init(&srv->net, loop, &server_hooks, srv, srv->cfg.lim.max_outbuf,
                             srv->cfg.handshake_timeout_ms);
    if (r < 0) {
        free(srv);
        return log_error_errno(r, "init");
    }
    srv->net.proto_errors = &srv->stats.closed_proto;
    srv->net.refusals = &srv->refusals;
    srv->net.max_handshaking = srv->cfg.lim.max_handshaking;
    srv->net.max_input_bytes = srv->cfg.lim.max_input_bytes;
    srv->net.req_timeout_ms = srv->cfg.request_timeout_ms;
    srv->net.lifecycle_level = srv->cfg.embedded ? RDZV_LOG_DEBUG : RDZV_LOG_INFO;
    srv->store_budget.max = srv->cfg.lim.max_store_bytes;
    r = rdzvd_store_new(&srv->cfg.lim, rdzvd_tcpstore_wake, &srv->main.store);
    if (r < 0) {
        log_error_errno(r, "init");
        goto out_free;
    }
    rdzvd_store_set_budget(srv->main.store, &srv->store_budget);
    rdzvd_store_set_watch_cb(srv->main.store, rdzvd_tcpstore_watch);
    if (srv->cfg.state_dir) {
        r = state_dir_open(srv);
        if (r < 0)
            goto out_free;
        if (!srv->cfg.peers)
            r = rdzvd_journal_open(loop, srv->state_dirfd, srv->cfg.state_dir, "main",
                                   srv->cfg.fsync, srv->main.store, &srv->main.journal);
        if (r == 0 && !srv->cfg.peers)
            r = job_table_open(srv);
        if (r < 0)
            goto out_free;
        r = uv_prepare_init(loop, &srv->persist_prepare);
        if (r < 0) {
            log_error_errno(r, "init");
            goto out_free;
        }
        r = uv_check_init(loop, &srv->persist_check);
        if (r < 0) {
            log_error_errno(r, "init");
            srv->handles_closing++;
            uv_close((uv_handle_t *)&srv->persist_prepare, server_handle_close_cb);
            goto out_free;
        }
        srv->persist_handles = true;
        if (srv->main.journal)
            rdzvd_journal_set_buffered(srv->main.journal, listener_journal_pending_cb,
                                       &srv->main);
    }
    if (srv->cfg.peers) {
        char dir[4096];

        if (!srv->cfg.state_dir || !srv->cfg.replica_ops) {
            r = log_error_errno(-EINVAL, "--peers needs --state-dir (the replica's log)%s",
                                srv->cfg.replica_ops ? "" : " and a program built for replicas");
            goto out_free;
        }
        snprintf(dir, sizeof(dir), "%s/raft", srv->cfg.state_dir);
        srv->rops = srv->cfg.replica_ops;
        r = rdzvd_store_new(&srv->cfg.lim, rdzvd_tcpstore_wake, &srv->job_table);
        if (r < 0) {
            log_error_errno(r, "init");
            goto out_free;
        }
        r = srv->rops->create(loop, srv->cfg.peers, dir, srv->cfg.token, srv->main.store,
                              srv->job_table, &replica_hooks, srv, &srv->replica);
        if (r < 0)
            goto out_free;
    }
    *ret = srv;
    return 0;

out_free:
    rdzvd_server_free(srv); /* its memory goes once the handles it opened have closed */
    return r;
}

void rdzvd_server_set_peer_handler(struct rdzvd_server *srv, const struct rdzvd_peer_handler *h,
                                   void *ud)
{
    srv->peer = h;
    srv->peer_ud = ud;
    srv->env.peer = h;
    srv->env.peer_ud = ud;
}

/* ---- accept, and the first bytes pick the session ---- */

struct first_bytes_session {
    struct rdzvd_listener *l;
    bool store_ok; /* its address is in --allow-store-from */
};

_Static_assert(sizeof(struct first_bytes_session) <= RDZVD_SESSION_BYTES,
               "first-bytes session state does not fit the connection's session area");

/* A TCPStore client from an address outside --allow-store-from: close at once. */
static void refuse_store(struct rdzvd_conn *c, struct rdzvd_listener *l)
{
    struct rdzvd_server *srv = l->srv;
    const struct rdzvd_acl *acl = srv->cfg.store_acl;

    srv->stats.rejected++;
    rdzvd_conn_warn_limited(c, &srv->refusals,
                            "refused TCPStore client on %s listener: address not in "
                            "--allow-store-from %s",
                            l->desc, acl ? acl->desc : "");
    rdzvd_conn_close(c, "address not allowed for TCPStore clients");
}

/* Pick the session from the first bytes: HELLO makes an rdzv peer, VALIDATE a modern TCPStore
 * client, anything else a legacy one. Returns bytes consumed (> 0), 0 for more or after handing
 * c over, or -1 once closing. */
static ssize_t first_bytes_serve(struct rdzvd_conn *c, const uint8_t *p, size_t n)
{
    const struct first_bytes_session *s = rdzvd_conn_session_data(c);
    struct rdzvd_listener *l = s->l;
    struct rdzvd_server *srv = l->srv;

    if (srv->replica && l == &srv->main) {
        int a = replica_admits(srv, c, p[0]);

        if (a <= 0)
            return a;
    }
    if (p[0] == RDZV_MSG_HELLO && l->accepts_rdzv) {
        rdzvd_peer_begin(c, &srv->env, l->store, s->store_ok);
        return 0;
    }
    if (!s->store_ok) {
        refuse_store(c, l);
        return -1;
    }
    if (p[0] == 0) {
        /* VALIDATE (00 CE F7 85 3C) or, from a pre-2.2 client, SET whose key length starts
         * with 4 bytes that can't be the magic for any key we would accept. */
        if (n < 5) {
            rdzvd_conn_set_need(c, 5);
            return 0;
        }
        if (rdzv_get_u32(p + 1) == RDZV_VALIDATE_MAGIC) {
            rdzvd_conn_handshake_done(c);
            log_debug("conn %" PRIu64 " (%s): VALIDATE ok, modern numbering", rdzvd_conn_id(c),
                      rdzvd_conn_peer(c));
            rdzvd_tcpstore_begin(c, &srv->env, l->store, RDZV_DIALECT_MODERN);
            return 5;
        }
    }
    if (!srv->cfg.legacy_allowed) {
        rdzvd_conn_protocol_error(c, "first message is not VALIDATE (0x%02x) and legacy clients "
                                     "are disabled (--legacy none)",
                                  p[0]);
        return -1;
    }
    log_debug("conn %" PRIu64 " (%s): no VALIDATE, PyTorch %s numbering", rdzvd_conn_id(c),
              rdzvd_conn_peer(c), rdzv_dialect_name(srv->cfg.legacy));
    rdzvd_tcpstore_begin(c, &srv->env, l->store, srv->cfg.legacy);
    return 0;
}

static const struct rdzvd_session_ops first_bytes_ops = {
    .name = "first bytes",
    .serve = first_bytes_serve,
    .pause_at_cap = true,
};

static int server_accept(struct rdzvd_listener *l)
{
    struct rdzvd_server *srv = l->srv;
    struct first_bytes_session *s;
    struct sockaddr_storage ss;
    struct rdzvd_conn *c;
    bool store_ok;
    int r;

    r = rdzvd_transport_accept(&srv->net, &l->group, &c, &ss);
    srv->nconns = srv->net.nconns;
    if (r == -EAGAIN)
        return 0; /* accepted next turn */
    if (r < 0)
        return r;
    store_ok = !srv->cfg.store_acl ||
               (ss.ss_family && rdzvd_acl_allows(srv->cfg.store_acl, (struct sockaddr *)&ss));
    /* At the limit, a connection that has not finished its handshake gives its slot up to the
     * new one, so that clients without the token cannot keep the others out. */
    if (!srv->stopping && !l->closing &&
        srv->net.nconns - srv->net.nclosing > srv->cfg.lim.max_conns)
        (void)rdzvd_transport_shed_handshaking(&srv->net, c,
                                               "--max-conns reached, and not through its "
                                               "handshake");
    if (srv->stopping || l->closing ||
        srv->net.nconns - srv->net.nclosing > srv->cfg.lim.max_conns) {
        uint64_t now = rdzv_now_ms();

        srv->stats.rejected++;
        if (now - srv->last_reject_log_ms >= 1000) {
            srv->last_reject_log_ms = now;
            log_warn("conn %" PRIu64 " (%s): refused: %" PRIu64 " connections open (limit %" PRIu64
                     ", see --max-conns)",
                     rdzvd_conn_id(c), rdzvd_conn_peer(c), srv->nconns - 1,
                     srv->cfg.lim.max_conns);
        }
        rdzvd_conn_close(c, "too many connections");
        return 0;
    }
    if (!store_ok && !l->accepts_rdzv) {
        /* A job's store listener serves TCPStore clients only: no need to wait for bytes. */
        refuse_store(c, l);
        return 0;
    }
    srv->stats.accepted++;
    rdzv_log(srv->net.lifecycle_level, "conn %" PRIu64 " (%s): accepted on %s listener",
             rdzvd_conn_id(c), rdzvd_conn_peer(c), l->desc);
    s = rdzvd_conn_session_data(c);
    s->l = l;
    s->store_ok = store_ok;
    return rdzvd_conn_start(c, &first_bytes_ops);
}

static void listener_connection_cb(uv_stream_t *s, int status)
{
    struct rdzvd_listener *l = (struct rdzvd_listener *)s;
    int r;

    if (status < 0) {
        log_warn("%s listener: accept: %s, continuing", l->desc, uv_strerror(status));
        return;
    }
    r = server_accept(l);
    if (r < 0)
        log_warn("%s listener: accept: %s, continuing", l->desc, uv_strerror(r));
}

static void listener_free(struct rdzvd_listener *l)
{
    rdzv_list_del(&l->persist_node);
    rdzvd_journal_close(l->journal, false);
    l->journal = NULL;
    l->store = rdzvd_store_free(l->store);
    if (l != &l->srv->main)
        free(l);
}

static void listener_close_cb(uv_handle_t *h);

/* Close l's handle; the main listener's is embedded in the server, which waits for it. */
static void listener_close_handle(struct rdzvd_listener *l)
{
    if (l == &l->srv->main)
        l->srv->handles_closing++;
    rdzvd_paced_forget(&l->group.paced);
    uv_close((uv_handle_t *)&l->tcp, listener_close_cb);
}

static void listener_close_cb(uv_handle_t *h)
{
    struct rdzvd_listener *l = (struct rdzvd_listener *)h;

    l->handle_closed = true;
    if (l == &l->srv->main)
        server_handle_closed(l->srv);
    else if (l->group.n == 0)
        listener_free(l);
}

/* One of l's connections finished closing. */
static void listener_conn_gone(struct rdzvd_conn_group *g)
{
    struct rdzvd_listener *l = rdzv_container_of(g, struct rdzvd_listener, group);

    l->srv->nconns = l->srv->net.nconns;
    if (l->closing && l->handle_closed && l->group.n == 0 && l != &l->srv->main)
        listener_free(l);
}

/* A socket bound to sa and listening, made with plain system calls so that a failure leaves no
 * libuv handle behind: closing one is asynchronous, and l's handle (or l itself) could not be
 * reused or freed before the loop ran again. Returns the descriptor or a negative errno. */
static int listener_socket(const struct sockaddr *sa, int backlog)
{
    socklen_t len = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                              : sizeof(struct sockaddr_in);
    int fd, on = 1, off = 0, r;

    fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    /* As libuv's bind does: a restarted daemon takes its port back at once; "::" is dual-stack. */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) < 0)
        goto out_errno;
    if (sa->sa_family == AF_INET6 &&
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)) < 0 && errno != EOPNOTSUPP)
        goto out_errno;
    if (bind(fd, sa, len) < 0 || listen(fd, backlog) < 0)
        goto out_errno;
    return fd;

out_errno:
    r = -errno;
    close(fd);
    return r;
}

/* Bind l->tcp to sa and listen. On failure l->tcp is left uninitialised (and l alone), so the
 * caller may retry on another address or free l at once: no loop run is needed. */
static int listener_bind(struct rdzvd_listener *l, const struct sockaddr *sa, bool warn_backlog)
{
    int backlog = l->srv->backlog, fd, r;

    fd = listener_socket(sa, backlog);
    if (fd < 0)
        return fd;
    r = uv_tcp_init(l->srv->loop, &l->tcp);
    if (r < 0) {
        close(fd);
        return r;
    }
    l->handle_closed = false;
    r = uv_tcp_open(&l->tcp, fd);
    if (r < 0) {
        close(fd); /* not the handle's yet */
        goto out_close_handle;
    }
    if (warn_backlog && backlog < SOMAXCONN_WARN)
        log_warn("net.core.somaxconn is %d: connection bursts above it will be dropped and "
                 "retried by clients; raise it with 'sysctl -w net.core.somaxconn=65535'",
                 backlog);
    r = uv_listen((uv_stream_t *)&l->tcp, backlog, listener_connection_cb);
    if (r < 0)
        goto out_close_handle;
    return 0;

out_close_handle:
    /* Rare (the socket already listens): the listener goes away with its handle's close. */
    l->closing = true;
    listener_close_handle(l);
    return r;
}

static void listener_name(struct rdzvd_listener *l, struct sockaddr_storage *ss, char *addr,
                          size_t addrlen)
{
    int len = sizeof(*ss);

    if (uv_tcp_getsockname(&l->tcp, (struct sockaddr *)ss, &len) != 0)
        return;
    if (ss->ss_family == AF_INET6) {
        l->port = ntohs(((struct sockaddr_in6 *)ss)->sin6_port);
        if (addr)
            uv_ip6_name((struct sockaddr_in6 *)ss, addr, addrlen);
    } else {
        l->port = ntohs(((struct sockaddr_in *)ss)->sin_port);
        if (addr)
            uv_ip4_name((struct sockaddr_in *)ss, addr, addrlen);
    }
}

int rdzvd_server_listen(struct rdzvd_server *srv)
{
    struct rdzvd_listener *l = &srv->main;
    const char *host = srv->cfg.bind;
    struct sockaddr_in6 a6;
    struct sockaddr_in a4;
    int r;

    if (!host) {
        /* Dual stack first, so IPv4 and IPv6 clients both reach us; plain IPv4 if the host has
         * no IPv6. */
        uv_ip6_addr("::", srv->cfg.port, &a6);
        r = listener_bind(l, (const struct sockaddr *)&a6, true);
        if ((r == UV_EAFNOSUPPORT || r == UV_EADDRNOTAVAIL || r == UV_EINVAL) &&
            l->handle_closed) {
            log_info("IPv6 unavailable (%s), listening on IPv4 only", uv_strerror(r));
            uv_ip4_addr("0.0.0.0", srv->cfg.port, &a4);
            r = listener_bind(l, (const struct sockaddr *)&a4, true);
        }
        host = "::";
    } else if (uv_ip4_addr(host, srv->cfg.port, &a4) == 0) {
        r = listener_bind(l, (const struct sockaddr *)&a4, true);
    } else if (uv_ip6_addr(host, srv->cfg.port, &a6) == 0) {
        r = listener_bind(l, (const struct sockaddr *)&a6, true);
    } else {
        return log_error_errno(-EINVAL, "--bind %s is not an IPv4 or IPv6 address", host);
    }
    if (r < 0)
        return log_error_errno(r, "cannot listen on %s port %u%s", host, srv->cfg.port,
                               r == UV_EADDRINUSE ? " (is another rdzvd running? use --port 0 "
                                                    "for a free port)"
                                                  : "");
    listener_name(l, &srv->bound_sa, srv->bound_addr, sizeof(srv->bound_addr));
    srv->bound_port = l->port;
    if (srv->replica)
        return srv->rops->start(srv->replica);
    return 0;
}

int rdzvd_listener_open(struct rdzvd_server *srv, const char *desc, const char *state_name,
                        uint16_t port, struct rdzvd_listener **ret)
{
    struct sockaddr_storage ss = srv->bound_sa;
    struct rdzvd_listener *l;
    int r;

    if (srv->stopping)
        return -ESHUTDOWN;
    if (state_name && !rdzvd_state_name_valid(state_name))
        return -EINVAL;
    l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->srv = srv;
    l->handle_closed = true;
    listener_group_init(l);
    rdzv_list_init(&l->persist_node);
    snprintf(l->desc, sizeof(l->desc), "%s", desc);
    r = rdzvd_store_new(&srv->cfg.lim, rdzvd_tcpstore_wake, &l->store);
    if (r < 0)
        goto out_free;
    rdzvd_store_set_budget(l->store, &srv->store_budget);
    rdzvd_store_set_watch_cb(l->store, rdzvd_tcpstore_watch);
    if (state_name && srv->state_dirfd >= 0) {
        r = rdzvd_journal_open(srv->loop, srv->state_dirfd, srv->cfg.state_dir, state_name,
                               srv->cfg.fsync, l->store, &l->journal);
        if (r < 0)
            goto out_free;
        rdzvd_journal_set_buffered(l->journal, listener_journal_pending_cb, l);
    }
    if (ss.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&ss)->sin6_port = htons(port);
    else
        ((struct sockaddr_in *)&ss)->sin_port = htons(port);
    r = listener_bind(l, (const struct sockaddr *)&ss, false);
    if (r < 0 && !l->handle_closed) {
        /* Freed by its handle's close callback; its journal is closed now, so that the caller
         * may reopen the same state at once. */
        rdzv_list_del(&l->persist_node);
        rdzvd_journal_close(l->journal, false);
        l->journal = NULL;
        return r;
    }
    if (r < 0)
        goto out_free;
    listener_name(l, &ss, NULL, 0);
    *ret = l;
    return 0;

out_free:
    listener_free(l);
    return r;
}

void rdzvd_listener_close(struct rdzvd_listener *l, bool drop_state)
{
    if (l->closing)
        return;
    l->closing = true;
    /* Replies held for its records go out with the others at the end of this iteration. */
    rdzv_list_del(&l->persist_node);
    rdzvd_journal_close(l->journal, drop_state);
    l->journal = NULL;
    rdzvd_conn_group_close(&l->group, "its job generation ended");
    if (!l->handle_closed)
        listener_close_handle(l);
    else if (l->group.n == 0 && l != &l->srv->main)
        listener_free(l);
}

void rdzvd_server_stop(struct rdzvd_server *srv)
{
    if (srv->stopping)
        return;
    srv->stopping = true;
    rdzvd_server_persist(srv); /* what was acknowledged reaches the journal; replies go out */
    rdzv_log(srv->net.lifecycle_level, "shutting down: closing %" PRIu64 " connections",
             srv->nconns);
    if (srv->peer && srv->peer->shutdown)
        srv->peer->shutdown(srv->peer_ud);
    server_transport_done(srv, false);
    replica_close(srv);
    srv->main.closing = true;
    rdzvd_journal_close(srv->main.journal, false);
    srv->main.journal = NULL;
    rdzvd_journal_close(srv->job_journal, false);
    srv->job_journal = NULL;
    persist_close_handles(srv);
    if (!srv->main.handle_closed)
        listener_close_handle(&srv->main);
    rdzvd_transport_close_all(&srv->net, "server shutting down");
}

struct rdzvd_server *rdzvd_server_free(struct rdzvd_server *srv)
{
    if (!srv)
        return NULL;
    /* Still open only if we never got to stop (listen failed): the loop runs once more. */
    rdzv_list_del(&srv->main.persist_node);
    rdzvd_journal_close(srv->main.journal, false);
    srv->main.journal = NULL;
    rdzvd_journal_close(srv->job_journal, false);
    srv->job_journal = NULL;
    persist_close_handles(srv);
    if (!srv->main.handle_closed && !uv_is_closing((uv_handle_t *)&srv->main.tcp))
        listener_close_handle(&srv->main);
    if (srv->state_dirfd >= 0)
        close(srv->state_dirfd);
    srv->state_dirfd = -1;
    server_transport_done(srv, true);
    replica_close(srv);
    srv->main.store = rdzvd_store_free(srv->main.store);
    srv->freed = true;
    if (srv->handles_closing == 0)
        server_free_now(srv);
    return NULL;
}

uv_loop_t *rdzvd_server_loop(const struct rdzvd_server *srv)
{
    return srv->loop;
}

const struct rdzvd_config *rdzvd_server_config(const struct rdzvd_server *srv)
{
    return &srv->cfg;
}

int rdzvd_server_state_dirfd(const struct rdzvd_server *srv)
{
    return srv->state_dirfd;
}

struct rdzvd_store *rdzvd_server_job_table(const struct rdzvd_server *srv)
{
    return srv->job_table;
}

struct rdzvd_replica *rdzvd_server_replica(const struct rdzvd_server *srv,
                                           const struct rdzvd_replica_ops **ops)
{
    *ops = srv->rops;
    return srv->replica_closing || srv->failed ? NULL : srv->replica;
}

void rdzvd_server_info(const struct rdzvd_server *srv, struct rdzvd_server_info *ret)
{
    *ret = (struct rdzvd_server_info){.port = srv->bound_port,
                                      .start_ms = srv->start_ms,
                                      .nconns = srv->nconns,
                                      .stats = srv->stats,
                                      .main_store_keys = rdzvd_store_num_keys(srv->main.store)};
    snprintf(ret->addr, sizeof(ret->addr), "%s", srv->bound_addr);
}

uint16_t rdzvd_listener_port(const struct rdzvd_listener *l)
{
    return l->port;
}
