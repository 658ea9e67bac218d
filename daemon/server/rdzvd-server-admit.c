/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-server-admit.c: accepting a listener's connections (--max-conns, --allow-store-from, a
 * replica that does not lead refusing with the leader's address) and the first-bytes session that
 * picks TCPStore or rdzv peer. It calls nothing of the other server files. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg.h"
#include "proto/rdzv-tcpstore.h"
#include "daemon/data/rdzvd-acl.h"
#include "daemon/net/rdzvd-peer.h"
#include "daemon/server/rdzvd-server-impl.h"
#include "daemon/net/rdzvd-tcpstore.h"
#include "daemon/net/rdzvd-transport.h"

/* ---- accept, and the first bytes pick the session ---- */

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
        /* VALIDATE (00 CE F7 85 3C; 00 72 64 7A 46 from a store front) or, from a pre-2.2
         * client, SET whose key length starts with 4 bytes that can't be the magic for any key
         * we would accept. */
        if (n < 5) {
            rdzvd_conn_set_need(c, 5, false);
            return 0;
        }
        if (rdzv_get_u32(p + 1) == RDZV_VALIDATE_MAGIC) {
            rdzvd_conn_handshake_done(c);
            log_debug("conn %" PRIu64 " (%s): VALIDATE ok, modern numbering", rdzvd_conn_id(c),
                      rdzvd_conn_peer(c));
            rdzvd_tcpstore_begin(c, &srv->env, l->store, RDZV_DIALECT_MODERN);
            return 5;
        }
        if (rdzv_get_u32(p + 1) == RDZV_FRONT_MAGIC) {
            rdzvd_conn_handshake_done(c);
            log_debug("conn %" PRIu64 " (%s): VALIDATE ok, a store front's numbering",
                      rdzvd_conn_id(c), rdzvd_conn_peer(c));
            rdzvd_tcpstore_begin(c, &srv->env, l->store, RDZV_DIALECT_FRONT);
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

const struct rdzvd_session_ops rdzvd_first_bytes_ops = {
    .name = "first bytes",
    .serve = first_bytes_serve,
    .pause_at_cap = true,
};

/* Whether c, just accepted (and counted), may keep its slot under --max-conns: the descriptors in
 * use stay within it, and c takes one of the last slots (server_spare) only if its address held
 * fewer connections before their handshake than slots were left (rdzvd-config.h). One address
 * that fills the rest with young idle connections, which nothing closes before they are stale,
 * gets none of them; a new address always gets one while one is left; k addresses that try to
 * share them get half of what is left each, the next half of the rest, and so on. */
static uint64_t server_spare(const struct rdzvd_server *srv)
{
    uint64_t n = srv->cfg.lim.max_conns / 2;

    if (srv->cfg.lim.max_handshaking && srv->cfg.lim.max_handshaking < n)
        n = srv->cfg.lim.max_handshaking;
    return (n < RDZVD_HS_SPARE_BASE ? n : RDZVD_HS_SPARE_BASE) / RDZVD_HS_SPARE_DIV;
}

static bool server_has_room(const struct rdzvd_server *srv, const struct rdzvd_conn *c)
{
    uint64_t used = server_fds_used(srv), max = srv->cfg.lim.max_conns, left;

    if (used > max)
        return false;
    left = max - used + 1; /* before c took one */
    if (left > server_spare(srv)) /* a quota under RDZVD_HS_SPARE_DIV keeps none apart */
        return true;
    return rdzvd_conn_hs_from_addr(c) <= left; /* c's address held fewer than left before c */
}

/* Let c (from l, its peer at ss) in, or refuse it. Returns 0 or a negative errno. */
static int server_admit(struct rdzvd_listener *l, struct rdzvd_conn *c,
                        const struct sockaddr_storage *ssp)
{
    struct rdzvd_server *srv = l->srv;
    struct sockaddr_storage ss = *ssp;
    struct first_bytes_session *s;
    bool store_ok;

    store_ok = !srv->cfg.store_acl ||
               (ss.ss_family && rdzvd_acl_allows(srv->cfg.store_acl, (struct sockaddr *)&ss));
    /* At the limit, a stale connection that has not finished its handshake gives its slot up to
     * the new one, so that clients without the token cannot keep the others out; none younger
     * (rdzvd_transport_shed_handshaking): the new one is refused instead. */
    if (!srv->stopping && !l->closing && !server_has_room(srv, c))
        (void)rdzvd_transport_shed_handshaking(&srv->net, c,
                                               "too many connections before their "
                                               "handshake (--max-conns reached)");
    if (srv->stopping || l->closing || !server_has_room(srv, c)) {
        uint64_t now = rdzv_now_ms();

        srv->stats.rejected++;
        if (now - srv->last_reject_log_ms >= 1000) {
            srv->last_reject_log_ms = now;
            char jobs[80] = "", crowd[160] = "";

            if (srv->job_fds)
                snprintf(jobs, sizeof(jobs),
                         ", counting %" PRIu64 " descriptors of job generations", srv->job_fds);
            if (server_fds_used(srv) <= srv->cfg.lim.max_conns)
                snprintf(crowd, sizeof(crowd),
                         "; too many connections before their handshake from its address (%" PRIu64
                         ") for the last %" PRIu64 " slots",
                         rdzvd_conn_hs_from_addr(c), server_spare(srv));
            log_warn("conn %" PRIu64 " (%s): refused: %" PRIu64 " connections open (limit %" PRIu64
                     "%s, see --max-conns)%s",
                     rdzvd_conn_id(c), rdzvd_conn_peer(c), srv->nconns - 1,
                     srv->cfg.lim.max_conns, jobs, crowd);
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
    return rdzvd_conn_start(c, &rdzvd_first_bytes_ops);
}

static int server_accept(struct rdzvd_listener *l)
{
    struct rdzvd_server *srv = l->srv;
    struct sockaddr_storage ss;
    struct rdzvd_conn *c;
    int r;

    r = rdzvd_transport_accept(&srv->net, &l->group, &c, &ss);
    srv->nconns = srv->net.nconns;
    if (r == -EAGAIN)
        return 0; /* accepted next turn */
    if (r < 0)
        return r;
    return server_admit(l, c, &ss);
}

/* --accept-thread: descriptors the acceptor took wait; make connections of a turn's worth. */
void rdzvd_server_accepted(struct rdzvd_acceptor *a)
{
    struct rdzvd_server *srv = a->async.data;
    struct rdzvd_accepted got[RDZVD_TURN_ACCEPTS];
    size_t n = rdzvd_acceptor_take(a, got, RDZVD_TURN_ACCEPTS);
    uint64_t dropped = rdzvd_acceptor_dropped(a);

    for (size_t i = 0; i < n; i++) {
        struct rdzvd_listener *l = got[i].key;
        struct rdzvd_conn *c;
        int r;

        r = rdzvd_transport_adopt(&srv->net, &l->group, got[i].fd, &got[i].addr, &c);
        srv->nconns = srv->net.nconns;
        if (r == 0)
            r = server_admit(l, c, &got[i].addr);
        if (r < 0)
            log_warn("%s listener: accept: %s, continuing", l->desc, uv_strerror(r));
    }
    if (dropped > srv->accept_dropped) {
        srv->stats.rejected += dropped - srv->accept_dropped;
        log_warn("accept: %" PRIu64 " connections closed at once: out of file descriptors "
                 "(see --max-conns and the open-file limit)",
                 dropped - srv->accept_dropped);
        srv->accept_dropped = dropped;
    }
}

void rdzvd_listener_connection_cb(uv_stream_t *s, int status)
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
