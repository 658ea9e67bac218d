/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-daemon.c: the server wired to the job layer. The only file that includes both. Also
 * --exit-when-idle: the rdzv peers connected, counted through the peer session's peer_up/peer_down
 * hooks, and one timer armed while there are none. */
#include "daemon/front/rdzvd-daemon.h"

#include <errno.h>
#include <stdlib.h>

#include "common/rdzv-log.h"
#include "daemon/data/rdzvd-acl.h"
#include "daemon/data/rdzvd-store.h"
#include "daemon/front/rdzvd-http.h"
#include "daemon/job/rdzvd-job-record.h"
#include "daemon/job/rdzvd-job.h"
#include "daemon/net/rdzvd-peer.h"
#include "daemon/repl/rdzvd-replica.h"
#include "daemon/server/rdzvd-server.h"

/* --exit-when-idle's timer. Its own allocation: it is freed in its close callback, which may run
 * after rdzvd_daemon_free(). */
struct daemon_idle {
    uv_timer_t timer;
    uint64_t idle_ms;  /* armed with this when the last peer goes */
    uint64_t first_ms; /* while none came (and a follower's wait for its leader's decision) */
    uint64_t armed_ms; /* what the timer was last started with (for the log) */
    bool check_over;   /* armed at once as the last peer went: exit now if every job ended */
    struct rdzvd_server *srv;
    struct rdzvd_jobs *jobs;
    rdzvd_daemon_idle_cb cb;
    void *data;
};

struct rdzvd_daemon {
    struct rdzvd_server *srv;
    struct rdzvd_jobs *jobs;
    uint64_t npeers;          /* rdzv peers connected now (past their handshake) */
    struct rdzvd_acl acl;     /* a store host's allowlist (rdzvd_daemon_new_stores) */
    struct daemon_idle *idle; /* --exit-when-idle; NULL: never, or closed */
    struct rdzvd_http *http;  /* rdzvd_daemon_serve_http; NULL: none */
};

static int daemon_msg(void *ud, struct rdzvd_conn *c, uint8_t op, const uint8_t *body, uint32_t len)
{
    struct rdzvd_daemon *d = ud;

    return rdzvd_job_msg(d->jobs, c, op, body, len);
}

static void daemon_conn_closed(void *ud, struct rdzvd_conn *c, void *member)
{
    struct rdzvd_daemon *d = ud;

    rdzvd_job_conn_closed(d->jobs, c, member);
}

static void idle_close_cb(uv_handle_t *h)
{
    free(h->data);
}

/* Stop counting for --exit-when-idle and close its timer. Idempotent. */
static void daemon_idle_close(struct rdzvd_daemon *d)
{
    if (!d->idle)
        return;
    uv_close((uv_handle_t *)&d->idle->timer, idle_close_cb);
    d->idle = NULL;
}

static void daemon_shutdown(void *ud)
{
    struct rdzvd_daemon *d = ud;

    daemon_idle_close(d);
    rdzvd_jobs_shutdown(d->jobs);
}

static void daemon_deposed(void *ud)
{
    struct rdzvd_daemon *d = ud;

    rdzvd_jobs_deposed(d->jobs);
}

static void daemon_leading(void *ud)
{
    struct rdzvd_daemon *d = ud;

    rdzvd_jobs_lead(d->jobs);
}

/* This replica is a voter in its own configuration (one removed, or never made one, hears from
 * no leader again: the leader it knew means nothing). */
static bool self_votes(const struct rdzvd_replica_ops *ops, struct rdzvd_replica *rep)
{
    struct rdzvd_voter vs[RDZVD_REPLICAS_MAX * 2];
    unsigned n = ops->voters(rep, vs, RDZVD_REPLICAS_MAX * 2);

    for (unsigned i = 0; i < n && i < RDZVD_REPLICAS_MAX * 2; i++)
        if (vs[i].self)
            return vs[i].voter;
    return false;
}

static void idle_timer_cb(uv_timer_t *t)
{
    struct daemon_idle *idle = t->data;
    const struct rdzvd_replica_ops *ops = NULL;
    struct rdzvd_replica *rep = rdzvd_server_replica(idle->srv, &ops);

    /* The last agent just left (a loop turn ago, so its member is gone too): if every job this
     * rdzvd held has ended, the job is over now, and the port is not kept for --exit-when-idle's
     * SEC (a torchrun or another rdzvd started on it then must be able to bind it).
     * Otherwise (a job still held, or none ever ran) SEC more. */
    if (idle->check_over) {
        idle->check_over = false;
        if (!rdzvd_jobs_all_ended(idle->jobs)) {
            idle->armed_ms = idle->idle_ms;
            (void)uv_timer_start(&idle->timer, idle_timer_cb, idle->idle_ms, 0);
            return;
        }
        idle->armed_ms = 0;
    }
    /* A replica: the leader decides for the cluster, through the log (every replica ends once it
     * is committed: the server's on_shutdown); a voting follower that knows a leader waits for
     * it. */
    if (rep && ops->role(rep) != RDZVD_ROLE_LEADER && ops->leader(rep) && self_votes(ops, rep)) {
        idle->armed_ms = idle->first_ms;
        (void)uv_timer_start(&idle->timer, idle_timer_cb, idle->first_ms, 0);
        return;
    }
    if (rep && ops->role(rep) == RDZVD_ROLE_LEADER && ops->shutdown(rep) == 0) {
        log_info("no agent connected for %.1f s: the job is over, ending every replica "
                 "(--exit-when-idle)",
                 (double)idle->armed_ms / 1000);
        return;
    }
    if (idle->armed_ms == 0)
        log_info("every job ended and no agent is connected: the job is over, exiting "
                 "(--exit-when-idle)");
    else
        log_info("no agent connected for %.1f s: the job is over, exiting (--exit-when-idle)",
                 (double)idle->armed_ms / 1000);
    idle->cb(idle->data);
}

static void daemon_peer_up(void *ud, struct rdzvd_conn *c)
{
    struct rdzvd_daemon *d = ud;

    (void)c;
    if (d->npeers++ == 0 && d->idle) {
        (void)uv_timer_stop(&d->idle->timer);
        d->idle->check_over = false;
    }
}

static void daemon_peer_down(void *ud, struct rdzvd_conn *c)
{
    struct rdzvd_daemon *d = ud;
    struct daemon_idle *idle = d->idle;

    rdzvd_jobs_peer_down(d->jobs, c);
    if (d->npeers == 0 || --d->npeers > 0 || !idle)
        return;
    log_debug("no agent connected: exiting at once if every job ended, else in %.1f s unless "
              "one comes (--exit-when-idle)",
              (double)idle->idle_ms / 1000);
    idle->check_over = true;
    idle->armed_ms = idle->idle_ms;
    (void)uv_timer_start(&idle->timer, idle_timer_cb, 0, 0);
}

static const struct rdzvd_peer_handler daemon_handler = {
    .msg = daemon_msg,
    .closed = daemon_conn_closed,
    .shutdown = daemon_shutdown,
    .deposed = daemon_deposed,
    .leading = daemon_leading,
    .peer_up = daemon_peer_up,
    .peer_down = daemon_peer_down,
};

int rdzvd_daemon_new(uv_loop_t *loop, const struct rdzvd_config *cfg, struct rdzvd_daemon **ret)
{
    struct rdzvd_config c = *cfg;
    struct rdzvd_daemon *d;
    int r;

    d = calloc(1, sizeof(*d));
    if (!d)
        return log_error_errno(-ENOMEM, "init");
    c.job_decisions = rdzvd_decision_apply; /* the server copies c */
    r = rdzvd_server_new(loop, &c, &d->srv);
    if (r < 0)
        goto out_free;
    r = rdzvd_jobs_new(d->srv, &d->jobs);
    if (r < 0) {
        log_error_errno(r, "init");
        goto out_free;
    }
    rdzvd_server_set_peer_handler(d->srv, &daemon_handler, d);
    *ret = d;
    return 0;

out_free:
    rdzvd_daemon_free(d);
    return r;
}

int rdzvd_daemon_new_stores(uv_loop_t *loop, const struct rdzvd_config *cfg,
                            const char *allow_from, struct rdzvd_daemon **ret)
{
    struct rdzvd_daemon *d = calloc(1, sizeof(*d));
    struct rdzvd_config c = *cfg;
    char err[256];
    int r;

    if (!d)
        return log_error_errno(-ENOMEM, "init");
    if (allow_from && *allow_from) {
        if (rdzvd_acl_parse(allow_from, &d->acl, err, sizeof(err)) < 0) {
            log_error("the store's allowed addresses '%s' (rdzvd's --allow-store-from): %s",
                      allow_from, err);
            free(d);
            return -EINVAL;
        }
        c.store_acl = &d->acl; /* the server keeps the pointer: d outlives it */
    }
    c.job_decisions = rdzvd_decision_apply;
    r = rdzvd_server_new(loop, &c, &d->srv);
    if (r < 0) {
        rdzvd_daemon_free(d);
        return r;
    }
    *ret = d;
    return 0;
}

int rdzvd_daemon_store_open(struct rdzvd_daemon *d, const char *desc, struct rdzvd_listener **ret,
                            uint16_t *port_out)
{
    int r = rdzvd_listener_open(d->srv, desc, NULL, 0, ret);

    if (r == 0)
        *port_out = rdzvd_listener_port(*ret);
    return r;
}

void rdzvd_daemon_store_close(struct rdzvd_listener *l)
{
    rdzvd_listener_close(l, true);
}

int rdzvd_daemon_exit_when_idle(struct rdzvd_daemon *d, uint64_t idle_ms, uint64_t first_ms,
                                rdzvd_daemon_idle_cb cb, void *data)
{
    struct daemon_idle *idle;
    int r;

    if (d->idle)
        return log_error_errno(-EALREADY, "--exit-when-idle: set twice");
    idle = calloc(1, sizeof(*idle));
    if (!idle)
        return log_error_errno(-ENOMEM, "--exit-when-idle");
    *idle = (struct daemon_idle){.idle_ms = idle_ms, .first_ms = first_ms, .armed_ms = first_ms,
                                 .srv = d->srv, .jobs = d->jobs, .cb = cb, .data = data};
    r = uv_timer_init(rdzvd_server_loop(d->srv), &idle->timer);
    if (r < 0) {
        free(idle);
        return log_error_errno(r, "--exit-when-idle: cannot create a timer");
    }
    idle->timer.data = idle;
    d->idle = idle;
    if (d->npeers == 0) {
        r = uv_timer_start(&idle->timer, idle_timer_cb, first_ms, 0);
        if (r < 0) {
            log_error_errno(r, "--exit-when-idle: cannot start its timer");
            daemon_idle_close(d);
            return r;
        }
    }
    log_info("exiting once no agent has been connected for %.1f s (none came: %.1f s)",
             (double)idle_ms / 1000, (double)first_ms / 1000);
    return 0;
}

struct rdzvd_daemon *rdzvd_daemon_free(struct rdzvd_daemon *d)
{
    if (!d)
        return NULL;
    rdzvd_http_stop(d->http); /* still running only if the daemon never stopped */
    daemon_idle_close(d);     /* still open only if the server never stopped */
    d->srv = rdzvd_server_free(d->srv);
    d->jobs = rdzvd_jobs_free(d->jobs);
    free(d);
    return NULL;
}

struct rdzvd_server *rdzvd_daemon_server(const struct rdzvd_daemon *d)
{
    return d->srv;
}

int rdzvd_daemon_listen(struct rdzvd_daemon *d)
{
    const struct rdzvd_replica_ops *ops;
    int r = rdzvd_server_listen(d->srv);

    /* A single rdzvd's job table was replayed from --state-dir: its running jobs are rebuilt now,
     * their stores reopened on the listening address (a replica's once it leads:
     * daemon_leading). */
    if (r == 0 && d->jobs && !rdzvd_server_replica(d->srv, &ops))
        rdzvd_jobs_lead(d->jobs);
    return r;
}

uint16_t rdzvd_daemon_port(const struct rdzvd_daemon *d)
{
    struct rdzvd_server_info info;

    rdzvd_server_info(d->srv, &info);
    return info.port;
}

void rdzvd_daemon_stop(struct rdzvd_daemon *d)
{
    rdzvd_http_stop(d->http);
    d->http = NULL;
    rdzvd_server_stop(d->srv);
}

int rdzvd_daemon_serve_http(struct rdzvd_daemon *d, const char *addr, uint16_t port,
                            uint16_t *ret_port)
{
    return d->http ? -EALREADY : rdzvd_http_start(rdzvd_server_loop(d->srv), d->jobs, addr, port,
                                                  ret_port, &d->http);
}

struct rdzvd_jobs *rdzvd_daemon_jobs(const struct rdzvd_daemon *d)
{
    return d->jobs;
}
