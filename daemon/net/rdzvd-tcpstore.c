/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-tcpstore.c: the TCPStore session: decode PyTorch TCPStore requests (in the connection's
 * numbering), apply them to the listener's store (rdzvd-tcpstore-apply.c), queue the replies;
 * WAITs and watches through the store's waiter, woken into the connection's output. */
#include "daemon/net/rdzvd-tcpstore.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-tcpstore.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/net/rdzvd-tcpstore-apply.h"
#include "daemon/net/rdzvd-transport.h"

struct tcpstore_session {
    const struct rdzvd_env *env;
    struct rdzvd_store *store;   /* the key space of the listener the connection came in on */
    enum rdzv_dialect dialect;
    bool hs_pending;             /* no VALIDATE: the first request completes the handshake */
    bool framed;                 /* a store front's (RDZV_DIALECT_FRONT): every reply framed */
    bool applying;               /* in its own request: its woken tags wait in deferred */
    struct rdzvd_waiter waiter;
    struct rdzv_buf *deferred;   /* framed, during a request: the frames of the tags it woke */
};

_Static_assert(sizeof(struct tcpstore_session) <= RDZVD_SESSION_BYTES,
               "TCPStore session state does not fit the connection's session area");

static struct tcpstore_session *session_of(struct rdzvd_conn *c)
{
    return rdzvd_conn_session_data(c);
}

/* Queued from the store's callbacks, outside this connection's serve(). The store is iterating
 * then, so c is not closed here: on failure it closes after its flush. */
static void tcpstore_queue_failed(struct rdzvd_conn *c, struct rdzv_buf *out, const char *what)
{
    log_error("conn %" PRIu64 " (%s): out of memory queueing %s, closing connection",
              rdzvd_conn_id(c), rdzvd_conn_peer(c), what);
    if (out)
        rdzvd_conn_close_after_flush(c);
}

static void tcpstore_deferred_free(struct tcpstore_session *s)
{
    if (s->deferred) {
        rdzv_buf_free(s->deferred);
        free(s->deferred);
        s->deferred = NULL;
    }
}

/* A woken TAG_WAIT's frame on a front's connection: after the reply being made, when its own
 * request woke it (the front reads whole frames). */
static int tcpstore_woken(struct tcpstore_session *s, struct rdzv_buf *out)
{
    uint8_t frame[9] = {RDZV_FRAME_WOKEN};

    rdzv_set_u64(frame + 1, rdzvd_store_woken_tag(s->store));
    if (!s->applying)
        return rdzv_buf_put(out, frame, sizeof(frame));
    if (!s->deferred && !(s->deferred = calloc(1, sizeof(*s->deferred))))
        return -ENOMEM;
    return rdzv_buf_put(s->deferred, frame, sizeof(frame));
}

void rdzvd_tcpstore_wake(struct rdzvd_waiter *w, void *ud)
{
    struct rdzvd_conn *c = ud;
    struct tcpstore_session *s = session_of(c);
    struct rdzv_buf *out = rdzvd_conn_out(c);
    int r;

    (void)w;
    r = !out ? -ENOMEM
        : s->framed ? tcpstore_woken(s, out)
                    : rdzv_buf_put_u8(out, RDZV_WAIT_STOP_WAITING);
    if (r < 0)
        tcpstore_queue_failed(c, out, "a wait reply");
}

void rdzvd_tcpstore_watch(struct rdzvd_waiter *w, void *ud, uint8_t type, const uint8_t *key,
                          size_t klen, const uint8_t *old, size_t oldlen, const uint8_t *nv,
                          size_t nvlen)
{
    struct rdzvd_conn *c = ud;
    struct rdzv_buf *out = rdzvd_conn_out_room(c, 1 + 24 + klen + oldlen + nvlen);
    int r = 0;

    (void)w;
    if (!out)
        return; /* c is closing, or closes at its flush: it would hold more than its cap */
    /* PyTorch <= 2.0's notification: type, key, old value, new value. */
    if (r == 0)
        r = rdzv_buf_put_u8(out, type);
    if (r == 0)
        r = rdzv_buf_put_str(out, key, klen);
    if (r == 0)
        r = rdzv_buf_put_str(out, old, oldlen);
    if (r == 0)
        r = rdzv_buf_put_str(out, nv, nvlen);
    if (r < 0)
        tcpstore_queue_failed(c, out, "a watch notification");
}

/* Serve one decoded request through rdzvd_tcpstore_apply. Returns 0, or a negative errno after
 * which the connection closes (the reason already logged). */
static int tcpstore_dispatch(struct rdzvd_conn *c, struct tcpstore_session *s,
                             const struct rdzv_req *req)
{
    struct rdzvd_tcpstore_res res = {0};
    struct rdzv_buf *out;
    int r;

    s->env->stats->requests++;
    if (rdzv_log_enabled(RDZV_LOG_DEBUG)) {
        struct rdzv_cursor peek;
        struct rdzv_slice first = {(const uint8_t *)"", 0};

        rdzv_req_cursor(req, &peek);
        if (req->nstrings)
            rdzv_req_next(&peek, &first);
        log_debug("conn %" PRIu64 " (%s): %s %.*s%s", rdzvd_conn_id(c), rdzvd_conn_peer(c),
                  rdzv_op_name(req->op), (int)(first.len > 64 ? 64 : first.len),
                  (const char *)first.p, req->nstrings > 1 ? " ..." : "");
    }
    out = rdzvd_conn_reply(c);
    /* A front's: the reply behind its frame's byte, the tags its request woke after it. */
    if (s->framed && rdzv_op_has_reply(req->op) && rdzv_buf_put_u8(out, RDZV_FRAME_REPLY) < 0)
        r = -ENOMEM;
    else {
        s->applying = s->framed;
        r = rdzvd_tcpstore_apply(s->store, &s->waiter, &s->env->cfg->lim, req, out, &res);
        s->applying = false;
    }
    if (s->deferred) { /* kept for this request only: what it woke goes out behind its reply */
        if (r == 0)
            r = rdzv_buf_put(out, rdzv_buf_head(s->deferred), rdzv_buf_avail(s->deferred));
        tcpstore_deferred_free(s);
    }
    if (r < 0 && res.error[0]) {
        rdzvd_conn_protocol_error(c, "%s", res.error);
        return r;
    }
    if (r < 0) {
        log_error("conn %" PRIu64 " (%s): %s failed: %s, closing connection", rdzvd_conn_id(c),
                  rdzvd_conn_peer(c), rdzv_op_name(req->op), strerror(-r));
        rdzvd_conn_close(c, "internal error");
    }
    return r;
}

/* One request. Returns its size, 0 for more bytes, -1 once the connection is closing. */
static ssize_t tcpstore_serve(struct rdzvd_conn *c, const uint8_t *p, size_t n)
{
    struct tcpstore_session *s = session_of(c);
    struct rdzv_decode_err err = {0};
    struct rdzv_req req;
    ssize_t r;

    r = rdzv_req_decode(p, n, s->dialect, &s->env->cfg->lim, &req, &err);
    if (r == -EPROTO) {
        rdzvd_conn_protocol_error(c, "%s (0x%02" PRIx64 ") in PyTorch %s numbering", err.what,
                                  err.value, rdzv_dialect_name(s->dialect));
        return -1;
    }
    if (r < 0) {
        rdzvd_conn_protocol_error(c, "%s: %" PRIu64 " > limit %" PRIu64, err.what, err.value,
                                  err.limit);
        return -1;
    }
    if (r == 0) {
        rdzvd_conn_set_need(c, req.frame_len, req.frame_whole);
        return 0;
    }
    if (tcpstore_dispatch(c, s, &req) < 0)
        return -1;
    if (s->hs_pending) {
        s->hs_pending = false;
        rdzvd_conn_handshake_done(c);
    }
    return r;
}

static void tcpstore_closing(struct rdzvd_conn *c)
{
    struct tcpstore_session *s = session_of(c);

    rdzvd_store_cancel_waits(s->store, &s->waiter);
    rdzvd_store_drop_watches(s->store, &s->waiter);
    tcpstore_deferred_free(s);
}

static const struct rdzvd_session_ops tcpstore_ops = {
    .name = "TCPStore",
    .serve = tcpstore_serve,
    .closing = tcpstore_closing,
    .pause_at_cap = true,
};

void rdzvd_tcpstore_begin(struct rdzvd_conn *c, const struct rdzvd_env *env,
                          struct rdzvd_store *st, enum rdzv_dialect dialect)
{
    struct tcpstore_session *s = session_of(c);

    memset(s, 0, sizeof(*s));
    s->env = env;
    s->store = st;
    s->dialect = dialect;
    s->framed = dialect == RDZV_DIALECT_FRONT;
    s->hs_pending = rdzvd_conn_handshaking(c);
    rdzvd_waiter_init(&s->waiter, c);
    rdzvd_conn_set_session(c, &tcpstore_ops);
}
