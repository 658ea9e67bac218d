/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-server-listen.c: binding the listeners (the main one dual-stack with IPv4 fallback, a job
 * generation's on the main one's address), opening and closing a job generation's listener with
 * its store and journal. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/rdzv-log.h"
#include "daemon/data/rdzvd-journal.h"
#include "daemon/server/rdzvd-server-impl.h"
#include "daemon/data/rdzvd-store.h"
#include "daemon/net/rdzvd-tcpstore.h"
#include "daemon/net/rdzvd-transport.h"

#define SOMAXCONN_WARN 4096

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
    /* --accept-thread: the acceptor accepts on the socket (it listens already); libuv only
     * holds it, to close it. Past the acceptor's listeners, libuv accepts as without it. */
    if (l->srv->acceptor.started && rdzvd_acceptor_add(&l->srv->acceptor, fd, l) == 0) {
        l->accept_fd = fd;
        return 0;
    }
    r = uv_listen((uv_stream_t *)&l->tcp, backlog, rdzvd_listener_connection_cb);
    if (r < 0)
        goto out_close_handle;
    return 0;

out_close_handle:
    /* Rare (the socket already listens): the listener goes away with its handle's close. */
    l->closing = true;
    rdzvd_listener_close_handle(l);
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

    if (srv->cfg.accept_thread && !srv->acceptor.async_open) {
        r = rdzvd_acceptor_start(&srv->acceptor, srv->loop, rdzvd_server_accepted);
        srv->acceptor.async.data = srv; /* its close callback's, started or not */
        if (r < 0)
            log_warn_errno(r, "--accept-thread: cannot start the thread; accepting on the loop");
    }
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
    unsigned need = 1 + (state_name && srv->state_dirfd >= 0);
    struct rdzvd_listener *l;
    int r;

    if (srv->stopping)
        return -ESHUTDOWN;
    if (state_name && !rdzvd_state_name_valid(state_name))
        return -EINVAL;
    if (server_fds_used(srv) + need > srv->cfg.lim.max_conns) {
        log_warn("%s: no store opened: %" PRIu64 " connections and %" PRIu64 " descriptors of "
                 "job generations are open (limit %" PRIu64 ", see --max-conns)",
                 desc, srv->net.nconns - srv->net.nclosing, srv->job_fds,
                 srv->cfg.lim.max_conns);
        return -EMFILE;
    }
    l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->srv = srv;
    l->handle_closed = true;
    rdzvd_listener_group_init(l);
    rdzv_list_init(&l->persist_node);
    snprintf(l->desc, sizeof(l->desc), "%s", desc);
    r = rdzvd_store_new(&srv->cfg.lim, rdzvd_tcpstore_wake, &l->store);
    if (r < 0)
        goto out_free;
    rdzvd_store_set_budget(l->store, &srv->store_budget, UINT64_MAX);
    rdzvd_store_set_watch_cb(l->store, rdzvd_tcpstore_watch);
    if (state_name && srv->state_dirfd >= 0) {
        r = rdzvd_journal_open(srv->loop, srv->state_dirfd, srv->cfg.state_dir, state_name,
                               srv->cfg.fsync, l->store, &l->journal);
        if (r < 0)
            goto out_free;
        rdzvd_journal_set_buffered(l->journal, rdzvd_listener_journal_pending_cb, l);
        rdzvd_journal_bound(l->journal, &srv->disk);
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
    l->fds = need;
    srv->job_fds += need;
    *ret = l;
    return 0;

out_free:
    rdzvd_listener_free(l);
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
        rdzvd_listener_close_handle(l);
    else if (l->group.n == 0 && l != &l->srv->main)
        rdzvd_listener_free(l);
}

uint16_t rdzvd_listener_port(const struct rdzvd_listener *l)
{
    return l->port;
}
