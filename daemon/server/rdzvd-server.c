/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-server.c: the server's lifetime (--state-dir, the job table, the replica), the listeners'
 * lifetime, the persist barrier, the replica's and the transport's hooks, shut down. Binding the
 * listeners is in rdzvd-server-listen.c, accepting connections in rdzvd-server-admit.c. */
#include "daemon/server/rdzvd-server.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/data/rdzvd-journal.h"
#include "daemon/net/rdzvd-peer.h"
#include "daemon/server/rdzvd-server-impl.h"
#include "daemon/data/rdzvd-store.h"
#include "daemon/net/rdzvd-tcpstore.h"
#include "daemon/net/rdzvd-transport.h"

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
    rdzvd_store_set_decision_fn(srv->job_table, srv->cfg.job_decisions, NULL);
    r = rdzvd_journal_open(srv->loop, srv->state_dirfd, srv->cfg.state_dir, "jobs", mode,
                           srv->job_table, &srv->job_journal);
    if (r < 0)
        return r;
    /* The job table's records always have room: the stores' journals leave it a reserve. */
    srv->disk.table_bytes = &rdzvd_journal_stats(srv->job_journal)->size;
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
void rdzvd_listener_journal_pending_cb(void *ud)
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

/* This replica leads (its barrier done): the first time since it was elected, its jobs are
 * taken over from the job table. */
static void server_leads(struct rdzvd_server *srv)
{
    if (srv->led)
        return;
    srv->led = true;
    if (srv->peer && srv->peer->leading)
        srv->peer->leading(srv->peer_ud);
}

static void replica_leading_cb(void *ud)
{
    struct rdzvd_server *srv = ud;

    if (!srv->stopping && !srv->failed)
        server_leads(srv);
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
    .leading = replica_leading_cb,
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

/* Each turn of a connection's requests: a replica serves them only while it leads. */
static bool server_may_serve_cb(struct rdzvd_transport *t, struct rdzvd_conn *c)
{
    struct rdzvd_server *srv = rdzv_container_of(t, struct rdzvd_server, net);
    enum rdzvd_role role;

    if (!srv->replica || srv->stopping)
        return true;
    role = srv->rops->role(srv->replica);
    if (role == RDZVD_ROLE_LEADER || role == RDZVD_ROLE_SYNCING) {
        if (role == RDZVD_ROLE_LEADER)
            server_leads(srv);
        return true;
    }
    if (srv->led)
        server_deposed(srv);
    if (rdzvd_conn_closing(c))
        return false; /* closed just now, with the connections it served as the leader */
    /* A connection still choosing its session is refused with the leader's address
     * (replica_admits, rdzvd-server-admit.c); one on a job's store listener goes with its job. */
    if (rdzvd_conn_group(c) != &srv->main.group || rdzvd_conn_in_session(c, &rdzvd_first_bytes_ops))
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

/* l's connections: accepted through the transport (paced per turn), counted in l->group. */
void rdzvd_listener_group_init(struct rdzvd_listener *l)
{
    rdzv_list_init(&l->group.conns);
    l->accept_fd = -1;
    l->group.conn_gone = listener_conn_gone;
    rdzvd_paced_init(&l->group.paced, (uv_stream_t *)&l->tcp, rdzvd_listener_connection_cb);
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
    rdzvd_listener_group_init(&srv->main);
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
    srv->net.outbuf_closes = &srv->stats.closed_outbuf;
    srv->net.refusals = &srv->refusals;
    srv->net.max_handshaking = srv->cfg.lim.max_handshaking;
    srv->net.max_hs_bytes = srv->cfg.lim.max_handshaking_bytes;
    srv->net.max_input_bytes = srv->cfg.lim.max_input_bytes;
    srv->net.req_timeout_ms = srv->cfg.request_timeout_ms;
    srv->net.lifecycle_level = srv->cfg.embedded ? RDZV_LOG_DEBUG : RDZV_LOG_INFO;
    srv->store_budget.max = srv->cfg.lim.max_store_bytes;
    r = rdzvd_store_new(&srv->cfg.lim, rdzvd_tcpstore_wake, &srv->main.store);
    if (r < 0) {
        log_error_errno(r, "init");
        goto out_free;
    }
    /* The main port's clients (any TCPStore client) hold at most half of it: the jobs'
     * generation stores always have the other half. */
    rdzvd_store_set_budget(srv->main.store, &srv->store_budget, srv->store_budget.max / 2);
    rdzvd_store_set_watch_cb(srv->main.store, rdzvd_tcpstore_watch);
    if (srv->cfg.state_dir) {
        r = state_dir_open(srv);
        if (r < 0)
            goto out_free;
        rdzvd_disk_init(&srv->disk, srv->state_dirfd, srv->cfg.state_dir, RDZVD_STATE_RESERVE);
        if (!srv->cfg.peers)
            r = rdzvd_journal_open(loop, srv->state_dirfd, srv->cfg.state_dir, "main",
                                   srv->cfg.fsync, srv->main.store, &srv->main.journal);
        if (r == 0 && srv->main.journal)
            rdzvd_journal_bound(srv->main.journal, &srv->disk);
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
            rdzvd_journal_set_buffered(srv->main.journal, rdzvd_listener_journal_pending_cb,
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
        rdzvd_store_set_decision_fn(srv->job_table, srv->cfg.job_decisions, NULL);
        r = srv->rops->create(loop, srv->cfg.peers, dir, srv->cfg.token, srv->main.store,
                              srv->job_table, &replica_hooks, srv, &srv->replica);
        if (r < 0)
            goto out_free;
        /* The job table's entries go to the same log: its reserve also holds the next segment
         * libraft allocates for them. */
        srv->disk.reserve += RDZVD_REPL_SEGMENT_RESERVE;
        srv->rops->bound(srv->replica, &srv->disk);
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

void rdzvd_listener_free(struct rdzvd_listener *l)
{
    l->srv->job_fds -= l->fds;
    l->fds = 0;
    rdzv_list_del(&l->persist_node);
    rdzvd_journal_close(l->journal, false);
    l->journal = NULL;
    l->store = rdzvd_store_free(l->store);
    if (l != &l->srv->main)
        free(l);
}

static void listener_close_cb(uv_handle_t *h);

/* Close l's handle; the main listener's is embedded in the server, which waits for it. */
void rdzvd_listener_close_handle(struct rdzvd_listener *l)
{
    if (l == &l->srv->main)
        l->srv->handles_closing++;
    rdzvd_paced_forget(&l->group.paced);
    if (l->accept_fd >= 0) /* the acceptor lets go of the socket before its handle closes it */
        rdzvd_acceptor_remove(&l->srv->acceptor, l->accept_fd);
    l->accept_fd = -1;
    uv_close((uv_handle_t *)&l->tcp, listener_close_cb);
}

static void listener_close_cb(uv_handle_t *h)
{
    struct rdzvd_listener *l = (struct rdzvd_listener *)h;

    l->handle_closed = true;
    if (l == &l->srv->main)
        server_handle_closed(l->srv);
    else if (l->group.n == 0)
        rdzvd_listener_free(l);
}

/* One of l's connections finished closing. */
static void listener_conn_gone(struct rdzvd_conn_group *g)
{
    struct rdzvd_listener *l = rdzv_container_of(g, struct rdzvd_listener, group);

    l->srv->nconns = l->srv->net.nconns;
    if (l->closing && l->handle_closed && l->group.n == 0 && l != &l->srv->main)
        rdzvd_listener_free(l);
}

/* --accept-thread: the thread joined, its queued descriptors closed, its async handle closing
 * (the server waits for it). Job listeners still open let go of their sockets themselves. */
static void server_acceptor_stop(struct rdzvd_server *srv)
{
    if (rdzvd_acceptor_stop(&srv->acceptor, server_handle_close_cb))
        srv->handles_closing++;
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
    srv->disk.table_bytes = NULL; /* points into the job table's journal */
    rdzvd_journal_close(srv->job_journal, false);
    srv->job_journal = NULL;
    persist_close_handles(srv);
    if (!srv->main.handle_closed)
        rdzvd_listener_close_handle(&srv->main);
    server_acceptor_stop(srv);
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
    srv->disk.table_bytes = NULL; /* points into the job table's journal */
    rdzvd_journal_close(srv->job_journal, false);
    srv->job_journal = NULL;
    persist_close_handles(srv);
    if (!srv->main.handle_closed && !uv_is_closing((uv_handle_t *)&srv->main.tcp))
        rdzvd_listener_close_handle(&srv->main);
    server_acceptor_stop(srv);
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

struct rdzvd_journal *rdzvd_server_job_journal(const struct rdzvd_server *srv)
{
    return srv->job_journal;
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
                                      .main_store_keys = rdzvd_store_num_keys(srv->main.store),
                                      .store_held = srv->store_budget.used,
                                      .store_limit = srv->store_budget.max,
                                      .fds_held = server_fds_used(srv),
                                      .fds_limit = srv->cfg.lim.max_conns,
                                      .input_held = srv->net.in_bytes,
                                      .input_limit = srv->net.max_input_bytes};
    snprintf(ret->addr, sizeof(ret->addr), "%s", srv->bound_addr);
}
