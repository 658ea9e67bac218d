/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-transport-registry.c: accepting a connection into the transport (named, registered, its
 * handshake deadline running), the sessions' accessors, closing a group or every connection, and
 * the transport's own setup and teardown. It calls into rdzvd-transport.c, never the reverse. */
#include "daemon/net/rdzvd-transport.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/net/rdzvd-transport-impl.h"

#define SCRATCH_LEN (64u << 10)

/* ---- accept, sessions, registry ---- */

static void sockaddr_name(const struct sockaddr_storage *ss, char *out, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;

    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;

        uv_ip6_name(s6, host, sizeof(host));
        port = ntohs(s6->sin6_port);
        /* Show v4-mapped peers as plain IPv4. */
        if (strncmp(host, "::ffff:", 7) == 0 && strchr(host + 7, '.'))
            memmove(host, host + 7, strlen(host + 7) + 1);
    } else if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;

        uv_ip4_name(s4, host, sizeof(host));
        port = ntohs(s4->sin_port);
    }
    rdzv_format_hostport(out, len, host, (unsigned)port);
}

/* A new connection of group g, its handle initialised, not yet on a socket. */
static struct rdzvd_conn *conn_new(struct rdzvd_transport *t, struct rdzvd_conn_group *g,
                                   int *ret)
{
    struct rdzvd_conn *c = calloc(1, sizeof(*c));

    *ret = -ENOMEM;
    if (!c)
        return NULL;
    *ret = uv_tcp_init(t->loop, &c->tcp);
    if (*ret < 0) {
        free(c);
        return NULL;
    }
    c->t = t;
    c->group = g;
    c->id = ++t->next_id;
    rdzv_list_init(&c->flush_node);
    rdzv_list_init(&c->hs_node);
    rdzv_list_init(&c->backlog_node);
    rdzv_list_init(&c->holding_node);
    rdzv_list_init(&c->req_node);
    rdzv_list_add_tail(&t->conns, &c->node);
    rdzv_list_add_tail(&g->conns, &c->group_node);
    t->nconns++;
    g->n++;
    c->state = CONN_OPEN;
    strcpy(c->peer, "?");
    rdzvd_hs_track(c);
    return c;
}

/* c is on its socket: its peer's name and address, its pre-handshake slot counted. */
static void conn_named(struct rdzvd_conn *c, const struct sockaddr_storage *ss)
{
    if (ss->ss_family) {
        sockaddr_name(ss, c->peer, sizeof(c->peer));
        if (ss->ss_family == AF_INET6) {
            memcpy(c->addr, &((const struct sockaddr_in6 *)ss)->sin6_addr, sizeof(c->addr));
        } else if (ss->ss_family == AF_INET) {
            c->addr[10] = c->addr[11] = 0xff;
            memcpy(c->addr + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
        }
    }
    rdzvd_hs_count(c);
    rdzvd_hs_make_room(c);
}

int rdzvd_transport_accept(struct rdzvd_transport *t, struct rdzvd_conn_group *g,
                           struct rdzvd_conn **ret, struct sockaddr_storage *ret_addr)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss), r;
    struct rdzvd_conn *c;

    memset(ret_addr, 0, sizeof(*ret_addr));
    if (rdzvd_accept_pace_defer(&t->accept_pace, &g->paced))
        return -EAGAIN;
    c = conn_new(t, g, &r);
    if (!c)
        return r;
    r = uv_accept(g->paced.listener, (uv_stream_t *)&c->tcp);
    if (r < 0) {
        rdzvd_conn_close(c, "accept failed");
        return r;
    }
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0)
        *ret_addr = ss;
    conn_named(c, ret_addr);
    (void)uv_tcp_nodelay(&c->tcp, 1);
    *ret = c;
    return 0;
}

int rdzvd_transport_adopt(struct rdzvd_transport *t, struct rdzvd_conn_group *g, int fd,
                          const struct sockaddr_storage *addr, struct rdzvd_conn **ret)
{
    struct rdzvd_conn *c;
    int r;

    c = conn_new(t, g, &r);
    if (!c) {
        (void)close(fd);
        return r;
    }
    r = uv_tcp_open(&c->tcp, fd);
    if (r < 0) {
        (void)close(fd); /* not the handle's */
        rdzvd_conn_close(c, "accept failed");
        return r;
    }
    conn_named(c, addr);
    *ret = c;
    return 0;
}

int rdzvd_conn_start(struct rdzvd_conn *c, const struct rdzvd_session_ops *ops)
{
    int r;

    c->ops = ops;
    r = uv_read_start((uv_stream_t *)&c->tcp, rdzvd_conn_alloc_cb, rdzvd_conn_read_cb);
    if (r < 0) {
        rdzvd_conn_close(c, "read start failed");
        return r;
    }
    c->reading = true;
    return 0;
}

void rdzvd_conn_set_session(struct rdzvd_conn *c, const struct rdzvd_session_ops *ops)
{
    log_debug("conn %" PRIu64 " (%s): %s session", c->id, c->peer, ops->name);
    c->ops = ops;
}

void *rdzvd_conn_session_data(const struct rdzvd_conn *c)
{
    return (void *)c->session.bytes;
}

void rdzvd_conn_set_need(struct rdzvd_conn *c, size_t bytes, bool whole)
{
    c->need = bytes;
    c->need_whole = whole;
}

bool rdzvd_conn_in_session(const struct rdzvd_conn *c, const struct rdzvd_session_ops *ops)
{
    return c->ops == ops;
}

struct rdzvd_conn_group *rdzvd_conn_group(const struct rdzvd_conn *c)
{
    return c->group;
}

void rdzvd_conn_group_close(struct rdzvd_conn_group *g, const char *reason)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &g->conns)
        rdzvd_conn_close(rdzv_container_of(pos, struct rdzvd_conn, group_node), reason);
}

void rdzvd_transport_close_all(struct rdzvd_transport *t, const char *reason)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &t->conns)
    {
        struct rdzvd_conn *c = rdzv_container_of(pos, struct rdzvd_conn, node);

        /* Hand over what is already queued before closing (best effort, non-blocking). */
        rdzvd_conn_flush(c);
        rdzvd_conn_close(c, reason);
    }
}

const char *rdzvd_conn_peer(const struct rdzvd_conn *c)
{
    return c->peer;
}

uint64_t rdzvd_conn_id(const struct rdzvd_conn *c)
{
    return c->id;
}

size_t rdzvd_conn_unread(struct rdzvd_conn *c)
{
    return rdzvd_conn_kernel_unread(c) + rdzv_buf_avail(&c->in);
}

int rdzvd_conn_local_addr(struct rdzvd_conn *c, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    int sl = sizeof(ss), r;

    r = uv_tcp_getsockname(&c->tcp, (struct sockaddr *)&ss, &sl);
    if (r < 0)
        return r;
    if (ss.ss_family == AF_INET6) {
        r = uv_ip6_name((struct sockaddr_in6 *)&ss, buf, len);
        /* A v4 client on the dual-stack socket: hand out plain IPv4. */
        if (r == 0 && strncmp(buf, "::ffff:", 7) == 0 && strchr(buf + 7, '.'))
            memmove(buf, buf + 7, strlen(buf + 7) + 1);
        return r;
    }
    return uv_ip4_name((struct sockaddr_in *)&ss, buf, len);
}
/* ---- lifetime ---- */

static void turn_prepare_cb(uv_prepare_t *h)
{
    struct rdzvd_transport *t = h->data;

    t->turn++;
}

int rdzvd_transport_init(struct rdzvd_transport *t, uv_loop_t *loop,
                         const struct rdzvd_transport_hooks *hooks, void *ud, uint64_t max_outbuf,
                         uint64_t handshake_timeout_ms)
{
    int r;

    memset(t, 0, sizeof(*t));
    t->loop = loop;
    t->hooks = hooks;
    t->ud = ud;
    t->max_outbuf = max_outbuf;
    t->lifecycle_level = RDZV_LOG_INFO;
    t->hs_timeout_ms = handshake_timeout_ms;
    rdzv_list_init(&t->conns);
    rdzv_list_init(&t->flush_list);
    rdzv_list_init(&t->handshaking);
    rdzv_list_init(&t->backlog);
    rdzv_list_init(&t->holding);
    rdzv_list_init(&t->requests);
    t->scratch_len = SCRATCH_LEN;
    t->scratch = malloc(t->scratch_len);
    t->hs_per_addr = calloc(RDZVD_HS_ADDR_BUCKETS, sizeof(*t->hs_per_addr));
    t->hs_seed = rdzv_random_u64();
    r = t->scratch && t->hs_per_addr ? uv_timer_init(loop, &t->hs_timer) : -ENOMEM;
    if (r < 0) {
        free(t->scratch);
        free(t->hs_per_addr);
        t->scratch = NULL;
        t->hs_per_addr = NULL;
        return r;
    }
    /* Neither can fail on Unix (they only link the handle into the loop). */
    (void)uv_idle_init(loop, &t->backlog_idle);
    (void)uv_prepare_init(loop, &t->turn_prepare);
    (void)uv_timer_init(loop, &t->req_timer);
    rdzvd_accept_pace_init(&t->accept_pace, loop);
    t->hs_timer.data = t->backlog_idle.data = t->turn_prepare.data = t->req_timer.data = t;
    t->accept_pace.idle.data = t;
    (void)uv_prepare_start(&t->turn_prepare, turn_prepare_cb);
    uv_unref((uv_handle_t *)&t->turn_prepare);
    t->hs_timer_open = true;
    return 0;
}

static void transport_handle_close_cb(uv_handle_t *h)
{
    struct rdzvd_transport *t = h->data;

    if (--t->handles_closing == 0 && t->hooks->closed)
        t->hooks->closed(t);
}

bool rdzvd_transport_done(struct rdzvd_transport *t, bool free_buffers)
{
    bool closing = t->hs_timer_open;

    if (t->hs_timer_open) {
        t->hs_timer_open = false;
        t->handles_closing = 5;
        uv_close((uv_handle_t *)&t->hs_timer, transport_handle_close_cb);
        rdzvd_accept_pace_close(&t->accept_pace, transport_handle_close_cb);
        uv_close((uv_handle_t *)&t->req_timer, transport_handle_close_cb);
        uv_close((uv_handle_t *)&t->backlog_idle, transport_handle_close_cb);
        uv_close((uv_handle_t *)&t->turn_prepare, transport_handle_close_cb);
    }
    if (free_buffers) {
        free(t->scratch);
        free(t->hs_per_addr);
        t->scratch = NULL;
        t->hs_per_addr = NULL;
    }
    return closing;
}
