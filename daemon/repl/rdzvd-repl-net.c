/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-repl-net.c: the authenticating libraft transport between replicas (rdzvd-repl-net.h). */
#include "daemon/repl/rdzvd-repl-net.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-list.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/repl/rdzvd-repl-guard.h"
#include "daemon/repl/rdzvd-repl-recv.h"

#define MAGIC "RDZVRPL1"
#define MAGIC_LEN 8
#define ADDR_MAX 255
#define HELLO_FIXED (MAGIC_LEN + 8 + 1)                       /* magic, id, address length */
#define HELLO_MAX (HELLO_FIXED + ADDR_MAX + RDZV_NONCE_BYTES) /* ... address, cn */
#define CHALLENGE_LEN (RDZV_NONCE_BYTES + RDZV_MAC_BYTES)     /* sn, the server's MAC */

struct net {
    uv_loop_t *loop;
    struct raft_uv_transport *t;
    const struct rdzv_token *token;
    const struct rdzv_token *key; /* the replicas' own: MACs bound to id and address */
    uint64_t handshake_ms;
    raft_id id;
    char address[ADDR_MAX + 1];
    uv_tcp_t *listener; /* NULL until listen */
    raft_uv_accept_cb accept_cb;
    struct rdzv_list hss; /* struct hs, both ways */
    unsigned inbound;     /* of them, accepted ones from other addresses than members' */
    unsigned handles;     /* listener and hs structs not yet freed */
    bool closing;
    raft_uv_transport_close_cb close_cb;
    uint64_t last_warn_ms; /* refusals are logged at most once a second */
    struct rdzvd_repl_net_stats st;
    const struct raft *raft; /* whose state inbound messages are checked against; NULL: none */
    struct rdzv_list guards; /* struct rdzvd_repl_guard: inbound links after their handshake */
    unsigned nguards;
    struct {
        raft_id peer;
        uint64_t ms;
    } bad_logged[RDZVD_REPL_LINKS_MAX]; /* a bad message is logged once per peer a minute */
    bool wrapped;              /* recv wraps the raft_io of raft (rdzvd-repl-recv.h) */
    struct rdzvd_repl_recv recv;
};

enum hs_state { HS_HELLO, HS_HELLO_REST, HS_CHALLENGE, HS_PROOF, HS_PROOF_SENT, HS_DONE };

/* One connection in its handshake. Freed once its timer is closed and no write is in flight. */
struct hs {
    struct rdzv_list node; /* in net->hss */
    struct net *n;
    uv_tcp_t *tcp;      /* raft_malloc'd: libraft frees it when it is handed over */
    uv_timer_t timer;   /* the deadline */
    uv_connect_t conn;  /* outbound */
    uv_write_t wreq[2]; /* at most two writes of ours on one connection */
    unsigned writes;    /* in flight */
    bool connecting;    /* outbound: uv_tcp_connect's callback not yet run (it holds h) */
    bool timer_open;
    bool outbound;
    bool from_member;              /* inbound from a member's IP address: a slot of its own */
    struct sockaddr_storage from;  /* inbound: the socket's peer */
    struct raft_uv_connect *req; /* outbound: libraft's, answered exactly once */
    enum hs_state state;
    raft_id peer_id;
    char peer[ADDR_MAX + 1]; /* its address as it claims (inbound) or as asked (outbound) */
    char where[64];          /* the socket's peer, for logs */
    uint8_t cn[RDZV_NONCE_BYTES], sn[RDZV_NONCE_BYTES];
    uint8_t in[HELLO_MAX];
    size_t want, got; /* bytes of the current step expected and read into in[] */
    uint8_t out[HELLO_MAX];
    uint8_t proof[RDZV_MAC_BYTES];
};

static void net_maybe_closed(struct net *n)
{
    if (n->closing && n->handles == 0) {
        struct raft_uv_transport *t = n->t;
        raft_uv_transport_close_cb cb = n->close_cb;

        t->impl = NULL;
        if (n->wrapped)
            rdzvd_repl_recv_unwrap(&n->recv);
        free(n);
        if (cb)
            cb(t);
    }
}

static void free_tcp_cb(uv_handle_t *h)
{
    raft_free(h);
}

static void hs_maybe_free(struct hs *h)
{
    struct net *n = h->n;

    if (h->timer_open || h->writes > 0 || h->connecting)
        return;
    free(h);
    n->handles--;
    net_maybe_closed(n);
}

static void hs_timer_closed(uv_handle_t *t)
{
    struct hs *h = t->data;

    h->timer_open = false;
    hs_maybe_free(h);
}

/* The handshake is over: its list entry and timer go; the connection is closed unless keep. */
static void hs_end(struct hs *h, bool keep)
{
    if (h->state == HS_DONE)
        return;
    h->state = HS_DONE;
    rdzv_list_del(&h->node);
    if (!h->outbound && !h->from_member)
        h->n->inbound--;
    if (h->tcp) {
        (void)uv_read_stop((uv_stream_t *)h->tcp);
        if (!keep)
            uv_close((uv_handle_t *)h->tcp, free_tcp_cb);
        h->tcp = NULL;
    }
    (void)uv_timer_stop(&h->timer);
    uv_close((uv_handle_t *)&h->timer, hs_timer_closed);
}

/* Refuse or give up on h, with one log line (refusals of inbound connections at most once a
 * second: a flood must not flood the log). */
static void hs_fail(struct hs *h, const char *why)
{
    struct net *n = h->n;

    if (h->state == HS_DONE)
        return;
    if (h->outbound) {
        struct raft_uv_connect *req = h->req;

        n->st.failed++;
        log_debug("replication: connecting to replica %llu at %s: %s", h->peer_id, h->peer, why);
        h->req = NULL;
        hs_end(h, false);
        req->cb(req, NULL, n->closing ? RAFT_CANCELED : RAFT_NOCONNECTION);
        return;
    }
    n->st.refused++;
    if (rdzv_now_ms() - n->last_warn_ms >= 1000) {
        n->last_warn_ms = rdzv_now_ms();
        log_warn("replication: closing a connection from %s before any Raft message: %s", h->where,
                 why);
    }
    hs_end(h, false);
}

static void hs_timeout_cb(uv_timer_t *t)
{
    hs_fail(t->data, "handshake not finished in time");
}

static struct hs *hs_new(struct net *n, bool outbound)
{
    struct hs *h = calloc(1, sizeof(*h));

    if (!h)
        return NULL;
    h->n = n;
    h->outbound = outbound;
    if (uv_timer_init(n->loop, &h->timer) < 0) {
        free(h);
        return NULL;
    }
    h->timer.data = h;
    h->timer_open = true;
    n->handles++;
    rdzv_list_add_tail(&n->hss, &h->node);
    (void)uv_timer_start(&h->timer, hs_timeout_cb, n->handshake_ms, 0);
    return h;
}

/* Outbound: our proof has been written. The connection is libraft's now, from a write callback
 * as libraft's own transport does it (handing it over from inside our read callback made
 * libraft 0.15 overrun a buffer now and then under ASan). */
static void hand_over(struct hs *h)
{
    struct raft_uv_connect *req = h->req;
    uv_stream_t *stream = (uv_stream_t *)h->tcp;

    h->n->st.connected++;
    h->req = NULL;
    hs_end(h, true);
    req->cb(req, stream, 0);
}

static void write_cb(uv_write_t *w, int status)
{
    struct hs *h = w->data;

    h->writes--;
    if (status < 0 && h->state != HS_DONE)
        hs_fail(h, uv_strerror(status));
    else if (h->state == HS_PROOF_SENT)
        hand_over(h);
    hs_maybe_free(h);
}

static int hs_write(struct hs *h, const uint8_t *p, size_t len)
{
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)len);
    uv_write_t *w = &h->wreq[h->writes ? 1 : 0];
    int r;

    w->data = h;
    r = uv_write(w, (uv_stream_t *)h->tcp, &b, 1, write_cb);
    if (r == 0)
        h->writes++;
    return r;
}

/* Read exactly want more bytes into in[got..]: never one past the handshake. */
static void hs_alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    struct hs *h = handle->data;

    (void)suggested;
    buf->base = (char *)h->in + h->got;
    buf->len = h->want - h->got;
}

#define KEY_LABEL_SERVER "rdzv-replica-v1 server"
#define KEY_LABEL_CLIENT "rdzv-replica-v1 client"

/* The MAC of side server (S) or client (C) of h: with the replica key over that side's id and
 * address (S: ours when we are S, the one asked for when we are C; C: the other way round). */
static void mac(const struct net *n, bool server, const struct hs *h, uint8_t out[RDZV_MAC_BYTES])
{
    uint8_t msg[sizeof(KEY_LABEL_SERVER) - 1 + 2 * RDZV_NONCE_BYTES + 8 + ADDR_MAX];
    bool ours = server != h->outbound; /* the side is this replica */
    const char *addr = ours ? n->address : h->peer;
    size_t at = sizeof(KEY_LABEL_SERVER) - 1, alen = strlen(addr);

    memset(out, 0, RDZV_MAC_BYTES);
    if (!n->key) {
        if (n->token)
            (void)rdzv_auth_mac(n->token, server, h->sn, h->cn, out);
        return;
    }
    memcpy(msg, server ? KEY_LABEL_SERVER : KEY_LABEL_CLIENT, at);
    memcpy(msg + at, h->sn, RDZV_NONCE_BYTES);
    memcpy(msg + at + RDZV_NONCE_BYTES, h->cn, RDZV_NONCE_BYTES);
    at += 2 * RDZV_NONCE_BYTES;
    rdzv_set_u64(msg + at, ours ? n->id : h->peer_id);
    memcpy(msg + at + 8, addr, alen);
    (void)rdzv_hmac_sha256(n->key->key, n->key->len, msg, at + 8 + alen, out);
    explicit_bzero(msg, sizeof(msg));
}

static bool mac_ok(const struct net *n, bool server, const struct hs *h, const uint8_t *got)
{
    uint8_t want[RDZV_MAC_BYTES];

    if (!n->token && !n->key)
        return true;
    mac(n, server, h, want);
    return rdzv_auth_equal(want, got, RDZV_MAC_BYTES);
}

/* Is replica id at address a member of our configuration? Yes while we have none (a transport
 * without Raft, or a replica started with --join before the leader adds it). */
static bool is_member(const struct net *n, raft_id id, const char *address)
{
    const struct raft_configuration *c = n->raft ? &n->raft->configuration : NULL;

    if (!c || c->n == 0)
        return true;
    for (unsigned i = 0; i < c->n; i++)
        if (c->servers[i].id == id)
            return strcmp(c->servers[i].address, address) == 0;
    return false;
}

static void hs_expect(struct hs *h, enum hs_state st, size_t want)
{
    h->state = st;
    h->want = want;
    h->got = 0;
}

/* ---- inbound links after their handshake: libraft reads them through a guard ---- */

static void guard_view(void *ud, uint64_t peer, struct rdzv_raft_view *v)
{
    const struct net *n = ud;
    const struct raft *r = n->raft;

    memset(v, 0, sizeof(*v));
    v->peer = peer;
    v->peer_member = true;
    if (!r)
        return; /* a transport without Raft (its own tests): the messages' form is still checked */
    v->term = r->current_term;
    v->leader = r->state == RAFT_LEADER;
    if (r->state == RAFT_FOLLOWER)
        v->leader_id = r->follower_state.current_leader.id;
    if (r->configuration.n > 0) {
        v->peer_member = false;
        for (unsigned i = 0; i < r->configuration.n; i++)
            if (r->configuration.servers[i].id == peer)
                v->peer_member = true;
    }
}

/* A bad message from peer (at where): counted, logged once a minute per peer. */
static void log_refused(struct net *n, uint64_t peer, const char *where, const char *why)
{
    uint64_t now = rdzv_now_ms();
    unsigned slot = 0;

    n->st.malformed++;
    for (unsigned i = 0; i < RDZVD_REPL_LINKS_MAX; i++) {
        if (n->bad_logged[i].peer == peer) {
            slot = i;
            break;
        }
        if (n->bad_logged[i].ms < n->bad_logged[slot].ms)
            slot = i; /* the oldest, replaced if peer has none */
    }
    if (n->bad_logged[slot].peer == peer && n->bad_logged[slot].ms &&
        now - n->bad_logged[slot].ms < RDZVD_REPL_BAD_LOG_MS)
        return;
    n->bad_logged[slot].peer = peer;
    n->bad_logged[slot].ms = now;
    log_warn("replication: closing the link from replica %llu (%s): a message that fails its "
             "checks: %s (logged once a minute per replica)",
             (unsigned long long)peer, where, why);
}

static void guard_refused(void *ud, struct rdzvd_repl_guard *g, const char *why)
{
    log_refused(ud, g->peer, g->where, why);
}

static void guard_closed(void *ud, struct rdzvd_repl_guard *g)
{
    struct net *n = ud;

    rdzv_list_del(&g->node);
    n->nguards--;
    n->handles--;
    net_maybe_closed(n);
}

static const struct rdzvd_repl_guard_hooks guard_hooks = {
    .view = guard_view,
    .refused = guard_refused,
    .closed = guard_closed,
};

/* A message libraft was about to process failed the state rules (rdzvd-repl-recv.h): every link
 * of its peer closes, since which one carried it is not known there. */
static void recv_refused(void *ud, uint64_t peer, const char *why)
{
    struct net *n = ud;
    struct rdzv_list *pos, *tmp;
    const char *where = "?";

    rdzv_list_for_each_safe(pos, tmp, &n->guards) {
        struct rdzvd_repl_guard *g = rdzv_container_of(pos, struct rdzvd_repl_guard, node);

        if (g->peer == peer) {
            where = g->where;
            break;
        }
    }
    log_refused(n, peer, where, why);
    rdzv_list_for_each_safe(pos, tmp, &n->guards) {
        struct rdzvd_repl_guard *g = rdzv_container_of(pos, struct rdzvd_repl_guard, node);

        if (g->peer == peer)
            rdzvd_repl_guard_close(g);
    }
}

static const struct rdzvd_repl_recv_hooks recv_hooks = {
    .view = guard_view,
    .refused = recv_refused,
};

/* An authenticated inbound connection: to libraft through a guard of its own. */
static void guard_link(struct net *n, uv_tcp_t *tcp, raft_id id, const char *peer,
                       const char *where)
{
    struct rdzvd_repl_guard *g;
    uv_stream_t *raft_end;
    int r;

    if (n->nguards >= RDZVD_REPL_LINKS_MAX) {
        n->st.refused++;
        log_warn("replication: %u inbound links are open; closing the one from replica %llu (%s)",
                 n->nguards, (unsigned long long)id, where);
        uv_close((uv_handle_t *)tcp, free_tcp_cb);
        return;
    }
    r = rdzvd_repl_guard_start(n->loop, tcp, id, where, &guard_hooks, n, &g, &raft_end);
    if (r < 0) {
        n->st.refused++;
        log_warn("replication: cannot take the link from replica %llu (%s): %s",
                 (unsigned long long)id, where, uv_strerror(r));
        return;
    }
    rdzv_list_add_tail(&n->guards, &g->node);
    n->nguards++;
    n->handles++;
    n->accept_cb(n->t, id, peer, raft_end);
}

/* Inbound: a whole step of the handshake is in in[0..want). */
static void inbound_step(struct hs *h)
{
    struct net *n = h->n;
    uv_stream_t *stream;
    uint8_t alen;

    switch (h->state) {
    case HS_HELLO:
        if (memcmp(h->in, MAGIC, MAGIC_LEN) != 0) {
            hs_fail(h, "not a replica (bad magic)");
            return;
        }
        h->peer_id = rdzv_get_u64(h->in + MAGIC_LEN);
        alen = h->in[MAGIC_LEN + 8];
        if (h->peer_id == 0 || alen == 0) {
            hs_fail(h, "malformed replica hello");
            return;
        }
        hs_expect(h, HS_HELLO_REST, (size_t)alen + RDZV_NONCE_BYTES);
        return;
    case HS_HELLO_REST:
        memcpy(h->peer, h->in, h->want - RDZV_NONCE_BYTES);
        h->peer[h->want - RDZV_NONCE_BYTES] = '\0';
        if (!is_member(n, h->peer_id, h->peer)) {
            hs_fail(h, "its replica id and address are not in our configuration");
            return;
        }
        memcpy(h->cn, h->in + h->want - RDZV_NONCE_BYTES, RDZV_NONCE_BYTES);
        if (rdzv_auth_random(h->sn, RDZV_NONCE_BYTES) < 0) {
            hs_fail(h, "no random bytes for a nonce");
            return;
        }
        memcpy(h->out, h->sn, RDZV_NONCE_BYTES);
        mac(n, true, h, h->out + RDZV_NONCE_BYTES);
        if (hs_write(h, h->out, CHALLENGE_LEN) < 0) {
            hs_fail(h, "write failed");
            return;
        }
        hs_expect(h, HS_PROOF, RDZV_MAC_BYTES);
        return;
    case HS_PROOF:
        if (!mac_ok(n, false, h, h->in)) {
            hs_fail(h, n->key ? "wrong replica key (or not the replica it claims to be)"
                              : "wrong token");
            return;
        }
        n->st.accepted++;
        log_debug("replication: replica %llu (%s) connected from %s", h->peer_id, h->peer,
                  h->where);
        stream = (uv_stream_t *)h->tcp;
        {
            raft_id id = h->peer_id;
            char peer[ADDR_MAX + 1], where[sizeof(h->where)];

            snprintf(peer, sizeof(peer), "%s", h->peer);
            snprintf(where, sizeof(where), "%s", h->where);
            hs_end(h, true);
            guard_link(n, (uv_tcp_t *)stream, id, peer, where);
        }
        return;
    case HS_CHALLENGE:
    case HS_PROOF_SENT:
    case HS_DONE:
        break;
    }
}

/* Outbound: the server's challenge (sn and its MAC) is in in[]. */
static void outbound_step(struct hs *h)
{
    struct net *n = h->n;

    memcpy(h->sn, h->in, RDZV_NONCE_BYTES);
    if (!mac_ok(n, true, h, h->in + RDZV_NONCE_BYTES)) {
        hs_fail(h, n->key ? "the replica does not hold our replica key"
                          : "the replica does not hold our token");
        return;
    }
    mac(n, false, h, h->proof);
    (void)uv_read_stop((uv_stream_t *)h->tcp);
    h->state = HS_PROOF_SENT; /* write_cb hands the connection over */
    if (hs_write(h, h->proof, RDZV_MAC_BYTES) < 0)
        hs_fail(h, "write failed");
}

static void hs_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct hs *h = s->data;

    (void)buf;
    if (nread < 0) {
        hs_fail(h, nread == UV_EOF ? "closed by the peer" : uv_strerror((int)nread));
        return;
    }
    h->got += (size_t)nread;
    if (h->got < h->want)
        return;
    if (h->outbound)
        outbound_step(h);
    else
        inbound_step(h);
}

static void peer_name(uv_tcp_t *tcp, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;

    if (uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            uv_ip4_name((struct sockaddr_in *)&ss, host, sizeof(host));
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&ss, host, sizeof(host));
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        }
    }
    snprintf(buf, len, "%s:%d", host, port);
}

static bool same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
    return false;
}

/* Does from have the IP address of a member of our configuration (its Raft address's)? */
static bool from_member_host(const struct net *n, const struct sockaddr_storage *from)
{
    const struct raft_configuration *c = n->raft ? &n->raft->configuration : NULL;
    struct sockaddr_storage ss;

    for (unsigned i = 0; c && i < c->n; i++)
        if (rdzvd_repl_parse_addr(c->servers[i].address, &ss) == 0 && same_ip(&ss, from))
            return true;
    return false;
}

/* A connection from a member's address: it gets a slot whatever strangers hold. At most
 * RDZVD_REPL_MEMBER_HANDSHAKES per address; past that the oldest of them is closed (a member
 * that reconnects has given up on it). */
static void make_room_for_member(struct net *n, const struct sockaddr_storage *from)
{
    struct rdzv_list *pos, *tmp;
    struct hs *oldest = NULL;
    unsigned count = 0;

    rdzv_list_for_each_safe(pos, tmp, &n->hss) {
        struct hs *h = rdzv_container_of(pos, struct hs, node);

        if (!h->outbound && h->from_member && same_ip(&h->from, from)) {
            oldest = oldest ? oldest : h;
            count++;
        }
    }
    if (count >= RDZVD_REPL_MEMBER_HANDSHAKES)
        hs_fail(oldest, "a newer connection from a member's address takes its slot");
}

static void on_connection(uv_stream_t *server, int status)
{
    struct net *n = server->data;
    struct sockaddr_storage from;
    bool member;
    uv_tcp_t *tcp;
    struct hs *h;

    if (status < 0 || n->closing)
        return;
    tcp = raft_malloc(sizeof(*tcp));
    if (!tcp)
        return;
    if (uv_tcp_init(n->loop, tcp) < 0) {
        raft_free(tcp);
        return;
    }
    if (uv_accept(server, (uv_stream_t *)tcp) < 0) {
        uv_close((uv_handle_t *)tcp, free_tcp_cb);
        return;
    }
    memset(&from, 0, sizeof(from));
    {
        int sl = sizeof(from);

        member = uv_tcp_getpeername(tcp, (struct sockaddr *)&from, &sl) == 0 &&
                 from_member_host(n, &from);
    }
    if (member)
        make_room_for_member(n, &from);
    if ((!member && n->inbound >= RDZVD_REPL_HANDSHAKES_MAX) || !(h = hs_new(n, false))) {
        n->st.refused++;
        if (rdzv_now_ms() - n->last_warn_ms >= 1000) {
            n->last_warn_ms = rdzv_now_ms();
            log_warn("replication: %u connections are in their handshake; closing a new one",
                     n->inbound);
        }
        uv_close((uv_handle_t *)tcp, free_tcp_cb);
        return;
    }
    if (!member)
        n->inbound++;
    h->from_member = member;
    h->from = from;
    h->tcp = tcp;
    tcp->data = h;
    peer_name(tcp, h->where, sizeof(h->where));
    hs_expect(h, HS_HELLO, HELLO_FIXED);
    if (uv_read_start((uv_stream_t *)tcp, hs_alloc_cb, hs_read_cb) < 0)
        hs_fail(h, "cannot read");
}

static void on_connect(uv_connect_t *c, int status)
{
    struct hs *h = c->data;
    struct net *n = h->n;
    size_t alen = strlen(n->address);

    h->connecting = false;
    if (h->state == HS_DONE) {
        hs_maybe_free(h); /* given up meanwhile (deadline, close): the connection is closed */
        return;
    }
    if (status < 0) {
        hs_fail(h, uv_strerror(status));
        return;
    }
    memcpy(h->out, MAGIC, MAGIC_LEN);
    rdzv_set_u64(h->out + MAGIC_LEN, n->id);
    h->out[MAGIC_LEN + 8] = (uint8_t)alen;
    memcpy(h->out + HELLO_FIXED, n->address, alen);
    memcpy(h->out + HELLO_FIXED + alen, h->cn, RDZV_NONCE_BYTES);
    if (hs_write(h, h->out, HELLO_FIXED + alen + RDZV_NONCE_BYTES) < 0) {
        hs_fail(h, "write failed");
        return;
    }
    hs_expect(h, HS_CHALLENGE, CHALLENGE_LEN);
    if (uv_read_start((uv_stream_t *)h->tcp, hs_alloc_cb, hs_read_cb) < 0)
        hs_fail(h, "cannot read");
}

int rdzvd_repl_parse_addr(const char *address, struct sockaddr_storage *ss)
{
    char host[ADDR_MAX + 1];
    uint16_t port = 0;

    if (rdzv_parse_hostport(address, host, sizeof(host), &port) < 0 || port == 0)
        return -EINVAL;
    if (address[0] == '[')
        return uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0 ? 0 : -EINVAL;
    return uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0 ? 0 : -EINVAL;
}

/* ---- the transport's methods ---- */

static int t_init(struct raft_uv_transport *t, raft_id id, const char *address)
{
    struct net *n = t->impl;

    if (strlen(address) > ADDR_MAX || strlen(address) == 0) {
        snprintf(t->errmsg, sizeof(t->errmsg), "address too long or empty");
        return RAFT_INVALID;
    }
    n->id = id;
    snprintf(n->address, sizeof(n->address), "%s", address);
    return 0;
}

static int t_listen(struct raft_uv_transport *t, raft_uv_accept_cb cb)
{
    struct net *n = t->impl;
    struct sockaddr_storage ss;
    int r;

    if (rdzvd_repl_parse_addr(n->address, &ss) < 0) {
        snprintf(t->errmsg, sizeof(t->errmsg), "%.200s: not IP:port", n->address);
        return RAFT_INVALID;
    }
    n->listener = malloc(sizeof(*n->listener));
    if (!n->listener)
        return RAFT_NOMEM;
    if ((r = uv_tcp_init(n->loop, n->listener)) < 0) {
        free(n->listener);
        n->listener = NULL;
        snprintf(t->errmsg, sizeof(t->errmsg), "%s", uv_strerror(r));
        return RAFT_IOERR;
    }
    n->listener->data = n;
    n->handles++;
    n->accept_cb = cb;
    r = uv_tcp_bind(n->listener, (struct sockaddr *)&ss, 0);
    if (r == 0)
        r = uv_listen((uv_stream_t *)n->listener, 128, on_connection);
    if (r < 0) {
        snprintf(t->errmsg, sizeof(t->errmsg), "listen on %.200s: %s", n->address, uv_strerror(r));
        return RAFT_IOERR; /* the listener is closed with the transport */
    }
    return 0;
}

static int t_connect(struct raft_uv_transport *t, struct raft_uv_connect *req, raft_id id,
                     const char *address, raft_uv_connect_cb cb)
{
    struct net *n = t->impl;
    struct sockaddr_storage ss;
    struct hs *h;

    /* libraft 0.15 may still connect after it closed us, on its way out (a replica exiting 75
     * did): the transport is gone, nothing is done. */
    if (!n || n->closing)
        return RAFT_NOCONNECTION;
    req->cb = cb;
    if (rdzvd_repl_parse_addr(address, &ss) < 0) {
        snprintf(t->errmsg, sizeof(t->errmsg), "%.200s: not IP:port", address);
        return RAFT_NOCONNECTION;
    }
    if (!(h = hs_new(n, true)))
        return RAFT_NOMEM;
    h->req = req;
    h->peer_id = id;
    snprintf(h->peer, sizeof(h->peer), "%s", address);
    snprintf(h->where, sizeof(h->where), "%s", address);
    h->tcp = raft_malloc(sizeof(*h->tcp));
    if (!h->tcp || uv_tcp_init(n->loop, h->tcp) < 0 ||
        rdzv_auth_random(h->cn, RDZV_NONCE_BYTES) < 0) {
        raft_free(h->tcp);
        h->tcp = NULL;
        h->req = NULL;
        hs_end(h, false);
        return RAFT_NOMEM;
    }
    h->tcp->data = h;
    h->conn.data = h;
    if (uv_tcp_connect(&h->conn, h->tcp, (struct sockaddr *)&ss, on_connect) < 0) {
        h->req = NULL;
        hs_end(h, false);
        return RAFT_NOCONNECTION;
    }
    h->connecting = true;
    return 0;
}

static void listener_closed(uv_handle_t *l)
{
    struct net *n = l->data;

    free(l);
    n->handles--;
    net_maybe_closed(n);
}

static void t_close(struct raft_uv_transport *t, raft_uv_transport_close_cb cb)
{
    struct net *n = t->impl;
    struct rdzv_list *pos, *tmp;

    n->closing = true;
    n->close_cb = cb;
    rdzv_list_for_each_safe(pos, tmp, &n->hss)
        hs_fail(rdzv_container_of(pos, struct hs, node), "the transport is closing");
    rdzv_list_for_each_safe(pos, tmp, &n->guards)
        rdzvd_repl_guard_close(rdzv_container_of(pos, struct rdzvd_repl_guard, node));
    if (n->listener) {
        uv_close((uv_handle_t *)n->listener, listener_closed);
        n->listener = NULL;
    }
    net_maybe_closed(n);
}

int rdzvd_repl_net_init(struct raft_uv_transport *t, uv_loop_t *loop,
                        const struct rdzv_token *token, const struct rdzv_token *key,
                        uint64_t handshake_ms)
{
    struct net *n = calloc(1, sizeof(*n));

    if (!n)
        return -ENOMEM;
    n->loop = loop;
    n->t = t;
    n->token = token;
    n->key = key;
    n->handshake_ms = handshake_ms ? handshake_ms : RDZVD_REPL_HANDSHAKE_MS;
    rdzv_list_init(&n->hss);
    rdzv_list_init(&n->guards);
    memset(t, 0, sizeof(*t));
    t->impl = n;
    t->init = t_init;
    t->listen = t_listen;
    t->connect = t_connect;
    t->close = t_close;
    return 0;
}

void rdzvd_repl_net_check_against(struct raft_uv_transport *t, const struct raft *r)
{
    struct net *n = t->impl;

    n->raft = r;
    if (r && r->io && !n->wrapped) {
        rdzvd_repl_recv_wrap(&n->recv, r->io, &recv_hooks, n);
        n->wrapped = true;
    }
}

const struct rdzvd_repl_net_stats *rdzvd_repl_net_stats(const struct raft_uv_transport *t)
{
    return &((const struct net *)t->impl)->st;
}
