/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-peer.c: the rdzv-peer session: HELLO, AUTH against the token, STORE, and rendezvous
 * messages handed to the registered handler (the job layer). */
#include "daemon/net/rdzvd-peer.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/rdzv-auth.h"
#include "common/rdzv-buf.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-auth-msg.h"
#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/net/rdzvd-tcpstore.h"
#include "daemon/net/rdzvd-transport.h"

struct peer_session {
    const struct rdzvd_env *env;
    struct rdzvd_store *store;       /* what STORE switches to */
    bool hello_done;                 /* HELLO exchanged */
    bool authed;                     /* proved the token (AUTH) */
    bool admin;                      /* ... the operator's (--admin-token-file) */
    bool store_ok;                   /* its address is in --allow-store-from */
    bool up;                         /* handler->peer_up was called, peer_down not yet */
    void *member;                    /* the job member this agent is, or NULL */
    uint8_t nonce[RDZV_NONCE_BYTES]; /* with a token: our challenge */
};

_Static_assert(sizeof(struct peer_session) <= RDZVD_SESSION_BYTES,
               "rdzv-peer session state does not fit the connection's session area");

static struct peer_session *session_of(const struct rdzvd_conn *c)
{
    return rdzvd_conn_session_data(c);
}

/* The handshake is done (up) or the connection stops being an rdzv peer: tell the handler. */
static void peer_set_up(struct rdzvd_conn *c, bool up)
{
    struct peer_session *s = session_of(c);
    const struct rdzvd_peer_handler *h = s->env->peer;

    if (s->up == up || !h)
        return;
    s->up = up;
    if (up && h->peer_up)
        h->peer_up(s->env->peer_ud, c);
    else if (!up && h->peer_down)
        h->peer_down(s->env->peer_ud, c);
}

/* Refuse an rdzv peer: queue ERROR {"error": msg}, log why (at warn; rate-limited when limited),
 * close once it is written, read nothing more. */
static void peer_refuse(struct rdzvd_conn *c, bool limited, const char *msg, const char *why)
{
    struct peer_session *s = session_of(c);
    struct rdzv_buf *out = rdzvd_conn_reply(c);

    (void)rdzv_msg_put_error(out, "%s", msg);
    if (!limited)
        log_warn("conn %" PRIu64 " (%s): rendezvous: %s, closing connection", rdzvd_conn_id(c),
                 rdzvd_conn_peer(c), why);
    else
        rdzvd_conn_warn_limited(c, s->env->refusals, "%s", why);
    s->env->stats->closed_proto++;
    rdzvd_conn_finish(c);
}

/* A frame from an rdzv peer that has said HELLO but not yet proved the token: only AUTH is
 * accepted. Returns 0, or -1 once the connection is closing. */
static int peer_auth(struct rdzvd_conn *c, uint8_t op, const uint8_t *body, uint32_t blen)
{
    struct peer_session *s = session_of(c);
    const struct rdzv_token *tok = s->env->cfg->token;
    uint8_t cn[RDZV_NONCE_BYTES];
    char err[256], why[320];
    int r;

    if (op != RDZV_MSG_AUTH) {
        snprintf(why, sizeof(why), "authentication failed: %s before AUTH (no token?)",
                 rdzv_msg_name(op));
        peer_refuse(c, true, "authentication required", why);
        return -1;
    }
    r = rdzv_auth_check_auth(body, blen, tok, s->nonce, cn, err, sizeof(err));
    if (r == -EACCES && s->env->cfg->admin_token &&
        rdzv_auth_check_auth(body, blen, s->env->cfg->admin_token, s->nonce, cn, err,
                             sizeof(err)) == 0) {
        tok = s->env->cfg->admin_token; /* the operator: its own proof back */
        s->admin = true;
        r = 0;
    }
    if (r < 0) {
        char msg[300];

        snprintf(msg, sizeof(msg), "authentication failed: %s", err);
        peer_refuse(c, true, msg, msg);
        return -1;
    }
    if (rdzv_auth_put_ok(rdzvd_conn_reply(c), tok, s->nonce, cn) < 0) {
        rdzvd_conn_close(c, "out of memory");
        return -1;
    }
    s->authed = true;
    memset(s->nonce, 0, sizeof(s->nonce));
    rdzvd_conn_handshake_done(c);
    peer_set_up(c, true);
    log_debug("conn %" PRIu64 " (%s): authenticated%s", rdzvd_conn_id(c), rdzvd_conn_peer(c),
              s->admin ? " as the operator" : "");
    return 0;
}

/* STORE: the rest of this rdzv peer's connection speaks TCPStore (modern numbering, no VALIDATE)
 * on the main store; rdzvctl's way in when a token is required. Returns 0 or -1 once closing. */
static int peer_start_store(struct rdzvd_conn *c)
{
    struct peer_session *s = session_of(c);

    if (s->member) {
        peer_refuse(c, false, "STORE on a connection that has joined a job", "STORE after JOIN");
        return -1;
    }
    if (!s->authed && !s->store_ok) {
        peer_refuse(c, true, "TCPStore access from this address is not allowed",
                    "refused STORE: address not in --allow-store-from");
        return -1;
    }
    log_debug("conn %" PRIu64 " (%s): STORE: TCPStore from here on", rdzvd_conn_id(c),
              rdzvd_conn_peer(c));
    peer_set_up(c, false);
    rdzvd_tcpstore_begin(c, s->env, s->store, RDZV_DIALECT_MODERN);
    return 0;
}

/* HELLO, the first frame. Returns 0 or -1 once closing. */
static int peer_hello(struct rdzvd_conn *c, uint8_t op, const uint8_t *body, uint32_t blen)
{
    struct peer_session *s = session_of(c);
    const struct rdzv_token *tok = s->env->cfg->token;
    char err[256];

    if (op != RDZV_MSG_HELLO || rdzv_msg_parse_hello(body, blen, err, sizeof(err)) < 0) {
        if (op != RDZV_MSG_HELLO)
            snprintf(err, sizeof(err), "expected HELLO, got %s", rdzv_msg_name(op));
        peer_refuse(c, false, err, err);
        return -1;
    }
    s->hello_done = true;
    if (tok && rdzv_auth_random(s->nonce, sizeof(s->nonce)) < 0) {
        rdzvd_conn_close(c, "no random bytes for the challenge");
        return -1;
    }
    if (rdzv_auth_put_hello(rdzvd_conn_reply(c), "rdzvd " RDZV_VERSION, tok ? s->nonce : NULL) <
        0) {
        rdzvd_conn_close(c, "out of memory");
        return -1;
    }
    if (!tok) {
        rdzvd_conn_handshake_done(c);
        peer_set_up(c, true);
    }
    return 0;
}

/* One rendezvous frame. Returns bytes consumed, 0 for more, -1 once closing. */
static ssize_t peer_serve(struct rdzvd_conn *c, const uint8_t *p, size_t n)
{
    struct peer_session *s = session_of(c);
    const struct rdzvd_peer_handler *h = s->env->peer;
    const uint8_t *body;
    const char *why = "";
    uint32_t blen;
    uint8_t op;
    ssize_t r;

    /* Each op's own limit: refused from its header, before its body is buffered. */
    r = rdzv_frame_peek(p, n, rdzv_msg_max_body(p[0]), &op, &body, &blen, &why);
    if (r == -EMSGSIZE) {
        rdzvd_conn_protocol_error(c, "rendezvous: %s message too large (%" PRIu32
                                     " bytes, limit %" PRIu32 ")",
                                  rdzv_msg_name(p[0]), rdzv_get_u32(p + 4),
                                  rdzv_msg_max_body(p[0]));
        return -1;
    }
    if (r < 0) {
        rdzvd_conn_protocol_error(c, "rendezvous: %s", why);
        return -1;
    }
    if (r == 0) {
        rdzvd_conn_set_need(c,
                            n >= RDZV_FRAME_HDR ? RDZV_FRAME_HDR + rdzv_get_u32(p + 4)
                                                : RDZV_FRAME_HDR,
                            n >= RDZV_FRAME_HDR);
        return 0;
    }
    s->env->stats->requests++;
    log_debug("conn %" PRIu64 " (%s): %s %.*s", rdzvd_conn_id(c), rdzvd_conn_peer(c),
              rdzv_msg_name(op), (int)(blen > 512 ? 512 : blen), (const char *)body);
    if (!s->hello_done)
        return peer_hello(c, op, body, blen) < 0 ? -1 : r;
    if (s->env->cfg->token && !s->authed)
        return peer_auth(c, op, body, blen) < 0 ? -1 : r;
    if (op == RDZV_MSG_STORE)
        return peer_start_store(c) < 0 ? -1 : r;
    if (!h) {
        peer_refuse(c, false, "this daemon serves no rendezvous", "no job layer");
        return -1;
    }
    if (h->msg(s->env->peer_ud, c, op, body, blen) < 0) {
        /* The job code queued an ERROR frame for the peer: deliver it, read nothing more. */
        if (rdzvd_conn_closing(c))
            return -1;
        if (rdzvd_conn_closes_after_flush(c))
            rdzvd_conn_finish(c);
        else
            rdzvd_conn_close(c, "rendezvous error");
        return -1;
    }
    return rdzvd_conn_closing(c) ? -1 : r;
}

static void peer_closing(struct rdzvd_conn *c)
{
    struct peer_session *s = session_of(c);

    peer_set_up(c, false);
    if (s->member) {
        void *m = s->member;

        s->member = NULL;
        s->env->peer->closed(s->env->peer_ud, c, m);
    }
}

static const struct rdzvd_session_ops peer_ops = {
    .name = "rdzv peer",
    .serve = peer_serve,
    .closing = peer_closing,
    .pause_at_cap = false,
};

void rdzvd_peer_begin(struct rdzvd_conn *c, const struct rdzvd_env *env, struct rdzvd_store *store,
                      bool store_ok)
{
    struct peer_session *s = session_of(c);

    memset(s, 0, sizeof(*s));
    s->env = env;
    s->store = store;
    s->store_ok = store_ok;
    rdzvd_conn_set_session(c, &peer_ops);
}

void rdzvd_conn_set_member(struct rdzvd_conn *c, void *member)
{
    session_of(c)->member = member;
}

void *rdzvd_conn_get_member(const struct rdzvd_conn *c)
{
    return session_of(c)->member;
}

bool rdzvd_conn_is_operator(const struct rdzvd_conn *c)
{
    const struct peer_session *s = session_of(c);

    return s->admin || !s->env->cfg->token;
}
