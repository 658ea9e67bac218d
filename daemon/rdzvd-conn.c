/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-conn.c: one client connection. Reads land in the server's shared scratch buffer; only a
 * partial request is copied into the connection, so an idle connection holds no buffers. Replies
 * accumulate in c->out and are written once per batch of requests. */
#include "rdzvd-conn.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "../common/rdzv-buf.h"
#include "../common/rdzv-log.h"
#include "../common/rdzv-util.h"
#include "../common/rdzv-auth.h"
#include "../proto/rdzv-auth-msg.h"
#include "../proto/rdzv-frame.h"
#include "../proto/rdzv-msg.h"
#include "../proto/rdzv-tcpstore.h"
#include "rdzvd-acl.h"
#include "rdzvd-job.h"
#include "rdzvd-server.h"
#include "rdzvd-store.h"

enum conn_state {
    CONN_NEW,     /* nothing parsed yet: the first bytes pick the dialect */
    CONN_OPEN,    /* serving requests */
    CONN_CLOSING, /* uv_close called; waiting for the close callback */
    _CONN_STATE_MAX,
};

static const char *const conn_state_names[_CONN_STATE_MAX] = {"new", "open", "closing"};

struct write_req {
    uv_write_t req;
    struct rdzvd_conn *conn;
    struct rdzv_buf buf;
};

enum conn_kind {
    CONN_KIND_STORE, /* a PyTorch TCPStore client */
    CONN_KIND_RDZV,  /* an rdzv peer (agent, rdzvctl status) speaking RENDEZVOUS.md */
};

struct rdzvd_conn {
    uv_tcp_t tcp; /* first: callbacks recover the connection from the handle */
    struct rdzvd_server *srv;
    struct rdzvd_listener *lst;  /* the listener it came in on: its store is ours */
    struct rdzv_list node;       /* in srv->conns */
    struct rdzv_list lst_node;   /* in lst->conns */
    struct rdzv_list flush_node; /* in srv->flush_list while replies wait to be flushed */
    uint64_t id;
    char peer[64];
    enum conn_state state;
    enum conn_kind kind;
    enum rdzv_dialect dialect;
    bool reading;
    bool close_after_flush;      /* close once every queued reply is written */
    bool hello_done;             /* rdzv peers: HELLO exchanged */
    bool authed;                 /* rdzv peers: proved the token (AUTH) */
    bool store_ok;               /* its address is in --allow-store-from */
    void *member;                /* rdzv peers: the job member this agent is, or NULL */
    struct rdzv_buf in;   /* bytes of a request not complete yet */
    size_t need;          /* don't re-parse until in holds this many bytes */
    struct rdzv_buf out;  /* replies not handed to the kernel yet */
    struct write_req *wr; /* the write in flight, if any */
    struct rdzvd_waiter waiter;
    struct rdzvd_hs_entry hs;    /* in srv->guard.handshaking until the handshake is done */
    uint8_t nonce[RDZV_NONCE_BYTES]; /* rdzv peers with a token: our challenge */
};

/* An idle connection must stay cheap (no buffers held; the handle and this struct only). */
_Static_assert(sizeof(struct rdzvd_conn) <= 1024, "struct rdzvd_conn grew past 1 KiB");

static void conn_set_state(struct rdzvd_conn *c, enum conn_state st)
{
    if ((unsigned)st >= _CONN_STATE_MAX)
        abort();
    log_trace("conn %" PRIu64 " (%s): %s -> %s", c->id, c->peer, conn_state_names[c->state],
              conn_state_names[st]);
    c->state = st;
}

static size_t conn_out_queued(const struct rdzvd_conn *c)
{
    return rdzv_buf_avail(&c->out) + (c->wr ? rdzv_buf_avail(&c->wr->buf) : 0);
}

static void conn_close_cb(uv_handle_t *h)
{
    struct rdzvd_conn *c = (struct rdzvd_conn *)h;

    struct rdzvd_listener *l = c->lst;

    rdzv_list_del(&c->node);
    rdzv_list_del(&c->lst_node);
    c->srv->nconns--;
    l->nconns--;
    rdzv_buf_free(&c->in);
    rdzv_buf_free(&c->out);
    free(c);
    rdzvd_listener_conn_gone(l);
}

void rdzvd_conn_close(struct rdzvd_conn *c, const char *reason)
{
    if (c->state == CONN_CLOSING)
        return;
    log_info("conn %" PRIu64 " (%s): closed: %s", c->id, c->peer, reason);
    conn_set_state(c, CONN_CLOSING);
    rdzvd_guard_untrack(&c->hs);
    rdzvd_store_cancel_waits(c->lst->store, &c->waiter);
    rdzvd_store_drop_watches(c->lst->store, &c->waiter);
    if (c->member) {
        void *m = c->member;

        c->member = NULL;
        rdzvd_job_conn_closed(c, m);
    }
    rdzv_list_del(&c->flush_node);
    uv_close((uv_handle_t *)&c->tcp, conn_close_cb);
}

/* Close c after handing the kernel the replies to the requests before the bad one (the Redis
 * model), as far as it takes them now: a peer that doesn't read gets no grace. */
static void conn_close_flushing(struct rdzvd_conn *c, const char *why)
{
    if (rdzvd_server_persist_pending(c->srv))
        rdzvd_server_persist(c->srv);
    if (!c->wr && rdzv_buf_avail(&c->out) > 0) {
        uv_buf_t b = uv_buf_init((char *)rdzv_buf_head(&c->out), (unsigned)rdzv_buf_avail(&c->out));

        (void)uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    }
    rdzvd_conn_close(c, why);
}

static void conn_protocol_error(struct rdzvd_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void conn_protocol_error(struct rdzvd_conn *c, const char *fmt, ...)
{
    char why[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    c->srv->stats.closed_proto++;
    log_warn("conn %" PRIu64 " (%s): %s, closing connection", c->id, c->peer, why);
    conn_close_flushing(c, why);
}

static void conn_flush(struct rdzvd_conn *c);
static void conn_process(struct rdzvd_conn *c);

/* THE output cap (--max-outbuf), for every kind of connection, checked before another request
 * is served (conn_parse) and wherever output is queued for writing (conn_flush). Past the cap a
 * TCPStore client is paused: none of its requests are read until its replies drain to half the
 * cap (PyTorch clients may pipeline; their requests wait in the kernel meanwhile). Output that
 * still comes while it is paused (woken WAITs, watch notifications) closes it at twice the cap.
 * An rdzv peer (small replies, one request at a time) is closed at the cap: it is not reading.
 * Returns 0, or -ENOBUFS once c is closing. */
static int conn_enforce_cap(struct rdzvd_conn *c)
{
    uint64_t cap = c->srv->cfg.lim.max_outbuf;
    size_t q = conn_out_queued(c);

    if (q <= cap || c->state == CONN_CLOSING)
        return 0;
    if (c->kind == CONN_KIND_STORE && (c->reading || q <= 2 * cap)) {
        if (c->reading) {
            log_debug("conn %" PRIu64 " (%s): %zu reply bytes queued, pausing reads", c->id,
                      c->peer, q);
            uv_read_stop((uv_stream_t *)&c->tcp);
            c->reading = false;
        }
        return 0;
    }
    log_warn("conn %" PRIu64 " (%s): %zu bytes of output queued, over --max-outbuf %" PRIu64
             "%s: the peer is not reading, closing connection",
             c->id, c->peer, q, cap, c->kind == CONN_KIND_STORE ? " twice" : "");
    rdzvd_conn_close(c, "output over --max-outbuf");
    return -ENOBUFS;
}

static void conn_handshake_done(struct rdzvd_conn *c)
{
    rdzvd_guard_untrack(&c->hs);
}

void rdzvd_conn_handshake_expired(struct rdzvd_hs_entry *e)
{
    struct rdzvd_conn *c = rdzv_container_of(e, struct rdzvd_conn, hs);
    uint64_t suppressed = 0;
    char why[96];

    snprintf(why, sizeof(why), "no handshake within %.1f s (--handshake-timeout)",
             (double)c->srv->guard.timeout_ms / 1000);
    c->srv->stats.closed_proto++;
    if (rdzvd_guard_may_log(c->srv, &suppressed))
        log_warn("conn %" PRIu64 " (%s): %s, closing connection%s%.0" PRIu64 "%s", c->id,
                 c->peer, why, suppressed ? " (" : "", (uint64_t)suppressed,
                 suppressed ? " similar lines suppressed)" : "");
    rdzvd_conn_close(c, why);
}

/* A TCPStore client from an address outside --allow-store-from: close at once. */
static void conn_refuse_store(struct rdzvd_conn *c)
{
    uint64_t suppressed = 0;
    const struct rdzvd_acl *acl = c->srv->cfg.store_acl;

    c->srv->stats.rejected++;
    if (rdzvd_guard_may_log(c->srv, &suppressed))
        log_warn("conn %" PRIu64 " (%s): refused TCPStore client on %s listener: address not in "
                 "--allow-store-from %s, closing connection%s%.0" PRIu64 "%s",
                 c->id, c->peer, c->lst->desc, acl ? acl->desc : "", suppressed ? " (" : "",
                 (uint64_t)suppressed, suppressed ? " similar lines suppressed)" : "");
    rdzvd_conn_close(c, "address not allowed for TCPStore clients");
}
static void conn_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void conn_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void conn_write_cb(uv_write_t *req, int status)
{
    struct write_req *wr = (struct write_req *)req;
    struct rdzvd_conn *c = wr->conn;

    rdzv_buf_free(&wr->buf);
    free(wr);
    c->wr = NULL;
    if (c->state == CONN_CLOSING)
        return;
    if (status < 0) {
        char why[96];

        snprintf(why, sizeof(why), "write failed: %s", uv_strerror(status));
        rdzvd_conn_close(c, why);
        return;
    }
    conn_flush(c);
    if (c->state != CONN_CLOSING && c->close_after_flush && !c->wr &&
        rdzv_buf_avail(&c->out) == 0) {
        rdzvd_conn_close(c, "closed after its last reply");
        return;
    }
    /* Backpressure released: read again and serve what was held back. */
    if (!c->reading && conn_out_queued(c) <= c->srv->cfg.lim.max_outbuf / 2)
        conn_process(c);
}

/* Hand queued replies to the kernel: try a direct write, queue the rest with uv_write. */
static void conn_flush(struct rdzvd_conn *c)
{
    uv_buf_t b;
    int r;

    if (c->state == CONN_CLOSING)
        return;
    if (c->wr) {
        (void)conn_enforce_cap(c);
        return;
    }
    if (rdzvd_server_persist_pending(c->srv)) {
        /* Journal records first: rdzvd_server_persist() sends these later in this iteration. */
        if (rdzv_list_empty(&c->flush_node))
            rdzv_list_add_tail(&c->srv->flush_list, &c->flush_node);
        (void)conn_enforce_cap(c);
        return;
    }
    if (rdzv_buf_avail(&c->out) == 0) {
        if (c->close_after_flush)
            rdzvd_conn_close(c, "closed after its last reply");
        return;
    }
    b = uv_buf_init((char *)rdzv_buf_head(&c->out), (unsigned)rdzv_buf_avail(&c->out));
    r = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (r == UV_EAGAIN || r == UV_ENOSYS)
        r = 0;
    if (r < 0) {
        char why[96];

        snprintf(why, sizeof(why), "write failed: %s", uv_strerror(r));
        rdzvd_conn_close(c, why);
        return;
    }
    rdzv_buf_consume(&c->out, (size_t)r);
    if (rdzv_buf_avail(&c->out) == 0) {
        /* Keep small buffers for the next reply; give large ones back. */
        if (c->out.cap > 4096)
            rdzv_buf_free(&c->out);
        if (c->close_after_flush)
            rdzvd_conn_close(c, "closed after its last reply");
        return;
    }
    c->wr = calloc(1, sizeof(*c->wr));
    if (!c->wr) {
        rdzvd_conn_close(c, "out of memory queueing a reply");
        return;
    }
    c->wr->conn = c;
    c->wr->buf = c->out; /* move: the in-flight buffer stays put until write_cb */
    memset(&c->out, 0, sizeof(c->out));
    b = uv_buf_init((char *)rdzv_buf_head(&c->wr->buf), (unsigned)rdzv_buf_avail(&c->wr->buf));
    r = uv_write(&c->wr->req, (uv_stream_t *)&c->tcp, &b, 1, conn_write_cb);
    if (r < 0) {
        char why[96];

        rdzv_buf_free(&c->wr->buf);
        free(c->wr);
        c->wr = NULL;
        snprintf(why, sizeof(why), "write failed: %s", uv_strerror(r));
        rdzvd_conn_close(c, why);
        return;
    }
    (void)conn_enforce_cap(c);
}

void rdzvd_conn_flush_pending(struct rdzvd_server *srv)
{
    if (rdzvd_server_persist_pending(srv))
        return; /* rdzvd_server_persist() calls us again once the journals are written */
    while (!rdzv_list_empty(&srv->flush_list)) {
        struct rdzvd_conn *c = rdzv_container_of(srv->flush_list.next, struct rdzvd_conn, flush_node);

        rdzv_list_del(&c->flush_node);
        conn_flush(c);
    }
}

void rdzvd_conn_wake(struct rdzvd_waiter *w, void *ud)
{
    struct rdzvd_conn *c = ud;

    (void)w;
    if (rdzv_buf_put_u8(&c->out, RDZV_WAIT_STOP_WAITING) < 0) {
        /* Can't close here (the store is iterating): the flush closes it. */
        log_error("conn %" PRIu64 " (%s): out of memory queueing a wait reply, closing "
                  "connection", c->id, c->peer);
        c->close_after_flush = true;
    }
    if (rdzv_list_empty(&c->flush_node))
        rdzv_list_add_tail(&c->srv->flush_list, &c->flush_node);
}

void rdzvd_conn_watch(struct rdzvd_waiter *w, void *ud, uint8_t type, const uint8_t *key,
                      size_t klen, const uint8_t *old, size_t oldlen, const uint8_t *nv,
                      size_t nvlen)
{
    struct rdzvd_conn *c = ud;
    int r;

    (void)w;
    /* PyTorch <= 2.0's notification: type, key, old value, new value. */
    r = rdzv_buf_put_u8(&c->out, type);
    if (r == 0)
        r = rdzv_buf_put_str(&c->out, key, klen);
    if (r == 0)
        r = rdzv_buf_put_str(&c->out, old, oldlen);
    if (r == 0)
        r = rdzv_buf_put_str(&c->out, nv, nvlen);
    if (r < 0) {
        log_error("conn %" PRIu64 " (%s): out of memory queueing a watch notification, closing "
                  "connection", c->id, c->peer);
        c->close_after_flush = true;
    }
    if (rdzv_list_empty(&c->flush_node))
        rdzv_list_add_tail(&c->srv->flush_list, &c->flush_node);
}

static int list_key_cb(const uint8_t *key, size_t klen, void *ud)
{
    return rdzv_buf_put_str(ud, key, klen);
}

/* Serve one decoded request. Returns 0, or a negative errno after which the connection closes
 * (the reason already logged). */
static int conn_dispatch(struct rdzvd_conn *c, const struct rdzv_req *req)
{
    struct rdzvd_store *st = c->lst->store;
    struct rdzv_slice k, v, v2;
    struct rdzv_cursor cur;
    struct rdzv_buf *out = &c->out;
    const uint8_t *val;
    size_t vlen;
    int64_t n64;
    int r = 0;

    c->srv->stats.requests++;
    rdzv_req_cursor(req, &cur);
    if (rdzv_log_enabled(RDZV_LOG_DEBUG)) {
        struct rdzv_cursor peek = cur;
        struct rdzv_slice first = {(const uint8_t *)"", 0};

        if (req->nstrings)
            rdzv_req_next(&peek, &first);
        log_debug("conn %" PRIu64 " (%s): %s %.*s%s", c->id, c->peer, rdzv_op_name(req->op),
                  (int)(first.len > 64 ? 64 : first.len), (const char *)first.p,
                  req->nstrings > 1 ? " ..." : "");
    }

    switch (req->op) {
    case RDZV_OP_VALIDATE:
        conn_protocol_error(c, "VALIDATE after the start of the connection");
        return -EPROTO;
    case RDZV_OP_PING:
        r = rdzv_buf_put_u32(out, req->u32);
        break;
    case RDZV_OP_SET:
        rdzv_req_next(&cur, &k);
        rdzv_req_next(&cur, &v);
        r = rdzvd_store_set(st, k.p, k.len, v.p, v.len);
        break;
    case RDZV_OP_COMPARE_SET:
        rdzv_req_next(&cur, &k);
        rdzv_req_next(&cur, &v);
        rdzv_req_next(&cur, &v2);
        r = rdzvd_store_compare_set(st, k.p, k.len, v.p, v.len, v2.p, v2.len, &val, &vlen);
        if (r == 0)
            r = rdzv_buf_put_str(out, val, vlen);
        break;
    case RDZV_OP_GET:
        rdzv_req_next(&cur, &k);
        /* A missing key reads as empty, like PyTorch's libuv server (clients WAIT first). */
        if (rdzvd_store_get(st, k.p, k.len, &val, &vlen) < 0)
            vlen = 0;
        r = rdzv_buf_put_str(out, val, vlen);
        break;
    case RDZV_OP_ADD:
        rdzv_req_next(&cur, &k);
        r = rdzvd_store_add(st, k.p, k.len, req->delta, &n64);
        if (r == -EINVAL) {
            conn_protocol_error(c, "ADD on key '%.*s' whose value is not a decimal integer",
                                (int)(k.len > 64 ? 64 : k.len), (const char *)k.p);
            return r;
        }
        if (r == -ERANGE) {
            conn_protocol_error(c, "ADD on key '%.*s' overflows a 64-bit integer",
                                (int)(k.len > 64 ? 64 : k.len), (const char *)k.p);
            return r;
        }
        if (r == 0)
            r = rdzv_buf_put_u64(out, (uint64_t)n64);
        break;
    case RDZV_OP_CHECK: {
        bool ready = true;

        for (uint64_t i = 0; i < req->count; i++) {
            rdzv_req_next(&cur, &k);
            if (ready && !rdzvd_store_exists(st, k.p, k.len))
                ready = false;
        }
        r = rdzv_buf_put_u8(out, ready ? RDZV_CHECK_READY : RDZV_CHECK_NOT_READY);
        break;
    }
    case RDZV_OP_WAIT:
        r = rdzvd_store_wait_begin(st, &c->waiter);
        for (uint64_t i = 0; r == 0 && i < req->count; i++) {
            rdzv_req_next(&cur, &k);
            r = rdzvd_store_wait_key(st, &c->waiter, k.p, k.len);
        }
        if (r == -EMSGSIZE) {
            conn_protocol_error(c, "more than %" PRIu64 " keys waited on at once",
                                c->srv->cfg.lim.max_wait_keys);
            return r;
        }
        if (r == 0)
            r = rdzvd_store_wait_end(st, &c->waiter);
        if (r == 1)
            r = rdzv_buf_put_u8(out, RDZV_WAIT_STOP_WAITING);
        break;
    case RDZV_OP_GETNUMKEYS:
        r = rdzv_buf_put_u64(out, rdzvd_store_num_keys(st));
        break;
    case RDZV_OP_DELETE_KEY:
        rdzv_req_next(&cur, &k);
        r = rdzv_buf_put_u64(out, (uint64_t)rdzvd_store_delete(st, k.p, k.len));
        break;
    case RDZV_OP_APPEND:
        rdzv_req_next(&cur, &k);
        rdzv_req_next(&cur, &v);
        r = rdzvd_store_append(st, k.p, k.len, v.p, v.len);
        break;
    case RDZV_OP_MULTI_GET:
        for (uint64_t i = 0; r == 0 && i < req->count; i++) {
            rdzv_req_next(&cur, &k);
            if (rdzvd_store_get(st, k.p, k.len, &val, &vlen) < 0)
                vlen = 0;
            r = rdzv_buf_put_str(out, val, vlen);
        }
        break;
    case RDZV_OP_MULTI_SET:
        for (uint64_t i = 0; r == 0 && i < req->count; i++) {
            rdzv_req_next(&cur, &k);
            rdzv_req_next(&cur, &v);
            r = rdzvd_store_set(st, k.p, k.len, v.p, v.len);
        }
        break;
    case RDZV_OP_CANCEL_WAIT:
        rdzvd_store_cancel_waits(st, &c->waiter);
        r = rdzv_buf_put_u8(out, RDZV_WAIT_CANCELED);
        break;
    case RDZV_OP_QUEUE_PUSH:
        rdzv_req_next(&cur, &k);
        rdzv_req_next(&cur, &v);
        r = rdzvd_store_queue_push(st, k.p, k.len, v.p, v.len);
        break;
    case RDZV_OP_QUEUE_POP: {
        uint64_t before;
        uint8_t *item = NULL;
        size_t ilen = 0;

        rdzv_req_next(&cur, &k);
        r = rdzvd_store_queue_pop(st, k.p, k.len, &before, &item, &ilen);
        if (r == 0)
            r = rdzv_buf_put_u64(out, before);
        if (r == 0 && before > 0)
            r = rdzv_buf_put_str(out, item, ilen);
        free(item);
        break;
    }
    case RDZV_OP_QUEUE_LEN:
        rdzv_req_next(&cur, &k);
        r = rdzv_buf_put_u64(out, rdzvd_store_queue_len(st, k.p, k.len));
        break;
    case RDZV_OP_LIST:
        r = rdzv_buf_put_u64(out, rdzvd_store_num_keys(st));
        if (r == 0)
            r = rdzvd_store_foreach(st, list_key_cb, out);
        break;
    case RDZV_OP_WATCH_KEY:
        rdzv_req_next(&cur, &k);
        r = rdzvd_store_watch(st, &c->waiter, k.p, k.len);
        if (r == -EMSGSIZE) {
            conn_protocol_error(c, "more than %" PRIu64 " keys waited on or watched at once",
                                c->srv->cfg.lim.max_wait_keys);
            return r;
        }
        if (r == 0)
            r = rdzv_buf_put_u8(out, RDZV_WATCH_CALLBACK_REGISTERED);
        break;
    default:
        conn_protocol_error(c, "unexpected operation %d", (int)req->op);
        return -EPROTO;
    }

    if (r == -EMSGSIZE) {
        conn_protocol_error(c, "%s would make a value larger than %" PRIu64 " bytes",
                            rdzv_op_name(req->op), c->srv->cfg.lim.max_value_len);
        return r;
    }
    if (r == -ENOSPC) {
        conn_protocol_error(c, "%s refused: the store is full (%" PRIu64 " bytes, limit %" PRIu64
                               "; see --max-store-bytes)",
                            rdzv_op_name(req->op), rdzvd_store_bytes(st),
                            c->srv->cfg.lim.max_store_bytes);
        return r;
    }
    if (r < 0) {
        log_error("conn %" PRIu64 " (%s): %s failed: %s, closing connection", c->id, c->peer,
                  rdzv_op_name(req->op), strerror(-r));
        rdzvd_conn_close(c, "internal error");
        return r;
    }
    return 0;
}

/* Pick the dialect from the first bytes. Returns bytes consumed (> 0), 0 for more, or < 0 after
 * closing the connection. */
static ssize_t conn_handshake(struct rdzvd_conn *c, const uint8_t *p, size_t n)
{
    if (p[0] == RDZV_MSG_HELLO && c->lst->accepts_rdzv) {
        c->kind = CONN_KIND_RDZV;
        conn_set_state(c, CONN_OPEN);
        log_debug("conn %" PRIu64 " (%s): rdzv peer", c->id, c->peer);
        return 0;
    }
    if (!c->store_ok) {
        conn_refuse_store(c);
        return -EACCES;
    }
    if (p[0] == 0) {
        /* VALIDATE (00 CE F7 85 3C) or, from a pre-2.2 client, SET whose key length starts
         * with 4 bytes that can't be the magic for any key we would accept. */
        if (n < 5)
            return 0;
        if (rdzv_get_u32(p + 1) == RDZV_VALIDATE_MAGIC) {
            c->dialect = RDZV_DIALECT_MODERN;
            conn_set_state(c, CONN_OPEN);
            conn_handshake_done(c);
            log_debug("conn %" PRIu64 " (%s): VALIDATE ok, modern numbering", c->id, c->peer);
            return 5;
        }
    }
    if (!c->srv->cfg.legacy_allowed) {
        conn_protocol_error(c, "first message is not VALIDATE (0x%02x) and legacy clients are "
                               "disabled (--legacy none)",
                            p[0]);
        return -EPROTO;
    }
    c->dialect = c->srv->cfg.legacy;
    conn_set_state(c, CONN_OPEN);
    log_debug("conn %" PRIu64 " (%s): no VALIDATE, PyTorch %s numbering", c->id, c->peer,
              rdzv_dialect_name(c->dialect));
    return 0;
}

/* Refuse an rdzv peer: queue ERROR {"error": msg}, log why (at warn; rate-limited when limited),
 * close once it is written, read nothing more. */
static void conn_rdzv_refuse(struct rdzvd_conn *c, bool limited, const char *msg, const char *why)
{
    uint64_t suppressed = 0;

    (void)rdzv_msg_put_error(&c->out, "%s", msg);
    if (!limited)
        log_warn("conn %" PRIu64 " (%s): rendezvous: %s, closing connection", c->id, c->peer, why);
    else if (rdzvd_guard_may_log(c->srv, &suppressed))
        log_warn("conn %" PRIu64 " (%s): %s, closing connection%s%.0" PRIu64
                 "%s", c->id, c->peer, why, suppressed ? " (" : "", (uint64_t)suppressed,
                 suppressed ? " similar lines suppressed)" : "");
    c->srv->stats.closed_proto++;
    c->close_after_flush = true;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = false;
    conn_flush(c);
}

/* A frame from an rdzv peer that has said HELLO but not yet proved the token: only AUTH is
 * accepted. Returns 0, or -1 once the connection is closing. */
static int conn_auth(struct rdzvd_conn *c, uint8_t op, const uint8_t *body, uint32_t blen)
{
    const struct rdzv_token *tok = c->srv->cfg.token;
    uint8_t cn[RDZV_NONCE_BYTES];
    char err[256], why[320];
    int r;

    if (op != RDZV_MSG_AUTH) {
        snprintf(why, sizeof(why), "authentication failed: %s before AUTH (no token?)",
                 rdzv_msg_name(op));
        conn_rdzv_refuse(c, true, "authentication required", why);
        return -1;
    }
    r = rdzv_auth_check_auth(body, blen, tok, c->nonce, cn, err, sizeof(err));
    if (r < 0) {
        char msg[300];

        snprintf(msg, sizeof(msg), "authentication failed: %s", err);
        conn_rdzv_refuse(c, true, msg, msg);
        return -1;
    }
    if (rdzv_auth_put_ok(&c->out, tok, c->nonce, cn) < 0) {
        rdzvd_conn_close(c, "out of memory");
        return -1;
    }
    c->authed = true;
    memset(c->nonce, 0, sizeof(c->nonce));
    conn_handshake_done(c);
    log_debug("conn %" PRIu64 " (%s): authenticated", c->id, c->peer);
    return 0;
}

/* STORE: the rest of this rdzv peer's connection speaks TCPStore (modern numbering, no VALIDATE)
 * on the main store; rdzvctl's way in when a token is required. Returns 0 or -1 once closing. */
static int conn_start_store(struct rdzvd_conn *c)
{
    if (c->member) {
        conn_rdzv_refuse(c, false, "STORE on a connection that has joined a job",
                         "STORE after JOIN");
        return -1;
    }
    if (!c->authed && !c->store_ok) {
        conn_rdzv_refuse(c, true, "TCPStore access from this address is not allowed",
                         "refused STORE: address not in --allow-store-from");
        return -1;
    }
    c->kind = CONN_KIND_STORE;
    c->dialect = RDZV_DIALECT_MODERN;
    log_debug("conn %" PRIu64 " (%s): STORE: TCPStore from here on", c->id, c->peer);
    return 0;
}

/* One rendezvous frame from an rdzv peer. Returns bytes consumed, 0 for more, -1 once closing. */
static ssize_t conn_parse_rdzv(struct rdzvd_conn *c, const uint8_t *p, size_t n)
{
    const uint8_t *body;
    const char *why = "";
    uint32_t blen;
    uint8_t op;
    char err[256];
    ssize_t r;

    r = rdzv_frame_peek(p, n, RDZV_MAX_MSG, &op, &body, &blen, &why);
    if (r < 0) {
        conn_protocol_error(c, "rendezvous: %s", why);
        return -1;
    }
    if (r == 0) {
        c->need = n >= RDZV_FRAME_HDR ? RDZV_FRAME_HDR + rdzv_get_u32(p + 4) : RDZV_FRAME_HDR;
        return 0;
    }
    c->need = 0;
    c->srv->stats.requests++;
    log_debug("conn %" PRIu64 " (%s): %s %.*s", c->id, c->peer, rdzv_msg_name(op),
              (int)(blen > 512 ? 512 : blen), (const char *)body);
    if (!c->hello_done) {
        const struct rdzv_token *tok = c->srv->cfg.token;

        if (op != RDZV_MSG_HELLO || rdzv_msg_parse_hello(body, blen, err, sizeof(err)) < 0) {
            if (op != RDZV_MSG_HELLO)
                snprintf(err, sizeof(err), "expected HELLO, got %s", rdzv_msg_name(op));
            conn_rdzv_refuse(c, false, err, err);
            return -1;
        }
        c->hello_done = true;
        if (tok && rdzv_auth_random(c->nonce, sizeof(c->nonce)) < 0) {
            rdzvd_conn_close(c, "no random bytes for the challenge");
            return -1;
        }
        if (rdzv_auth_put_hello(&c->out, "rdzvd " RDZV_VERSION, tok ? c->nonce : NULL) < 0) {
            rdzvd_conn_close(c, "out of memory");
            return -1;
        }
        if (!tok)
            conn_handshake_done(c);
        return r;
    }
    if (c->srv->cfg.token && !c->authed)
        return conn_auth(c, op, body, blen) < 0 ? -1 : r;
    if (op == RDZV_MSG_STORE)
        return conn_start_store(c) < 0 ? -1 : r;
    if (rdzvd_job_msg(c, op, body, blen) < 0) {
        /* The job code queued an ERROR frame for the peer: deliver it, read nothing more. */
        if (c->state != CONN_CLOSING && c->close_after_flush) {
            uv_read_stop((uv_stream_t *)&c->tcp);
            c->reading = false;
            conn_flush(c);
        } else if (c->state != CONN_CLOSING) {
            rdzvd_conn_close(c, "rendezvous error");
        }
        return -1;
    }
    return c->state == CONN_CLOSING ? -1 : r;
}

/* Parse and serve complete requests in p[0..n). Returns the bytes consumed, or -1 once the
 * connection is closing. Stops early when replies back up past the output limit. */
static ssize_t conn_parse(struct rdzvd_conn *c, const uint8_t *p, size_t n)
{
    const struct rdzv_limits *lim = &c->srv->cfg.lim;
    size_t off = 0;

    while (off < n) {
        struct rdzv_decode_err err = {0};
        struct rdzv_req req;
        ssize_t r;

        if (c->state == CONN_NEW) {
            r = conn_handshake(c, p + off, n - off);
            if (r < 0)
                return -1;
            if (r == 0 && c->state == CONN_NEW)
                break;
            off += (size_t)r;
            continue;
        }
        if (conn_out_queued(c) > lim->max_outbuf) {
            /* The peer is not reading its replies: serve nothing more until it does. */
            if (conn_enforce_cap(c) < 0)
                return -1;
            break;
        }
        if (c->kind == CONN_KIND_RDZV) {
            r = conn_parse_rdzv(c, p + off, n - off);
            if (r < 0)
                return -1;
            if (r == 0)
                break;
            off += (size_t)r;
            continue;
        }
        r = rdzv_req_decode(p + off, n - off, c->dialect, lim, &req, &err);
        if (r == -EPROTO) {
            conn_protocol_error(c, "%s (0x%02" PRIx64 ") in PyTorch %s numbering", err.what,
                                err.value, rdzv_dialect_name(c->dialect));
            return -1;
        }
        if (r < 0) {
            conn_protocol_error(c, "%s: %" PRIu64 " > limit %" PRIu64, err.what, err.value,
                                err.limit);
            return -1;
        }
        if (r == 0) {
            c->need = req.frame_len;
            break;
        }
        c->need = 0;
        if (conn_dispatch(c, &req) < 0)
            return -1;
        if (!rdzv_list_empty(&c->hs.node))
            conn_handshake_done(c);
        off += (size_t)r;
    }
    return (ssize_t)off;
}

/* Serve what is buffered in c->in and write the replies. A connection paused for backpressure
 * resumes here once its queued replies drained to half the limit, whether they drained at once
 * (uv_try_write took everything) or later (from the write callback). */
static void conn_process(struct rdzvd_conn *c)
{
    for (;;) {
        ssize_t r = 0;

        if (rdzv_buf_avail(&c->in) > 0 && rdzv_buf_avail(&c->in) >= c->need)
            r = conn_parse(c, rdzv_buf_head(&c->in), rdzv_buf_avail(&c->in));
        if (r < 0)
            return;
        rdzv_buf_consume(&c->in, (size_t)r);
        if (rdzv_buf_avail(&c->in) == 0)
            rdzv_buf_free(&c->in);
        conn_flush(c);
        if (c->state == CONN_CLOSING || c->reading ||
            conn_out_queued(c) > c->srv->cfg.lim.max_outbuf / 2)
            break;
        if (uv_read_start((uv_stream_t *)&c->tcp, conn_alloc_cb, conn_read_cb) < 0) {
            rdzvd_conn_close(c, "cannot resume reading");
            return;
        }
        c->reading = true;
        log_debug("conn %" PRIu64 " (%s): replies drained, reading again", c->id, c->peer);
    }
    rdzvd_conn_flush_pending(c->srv);
}

static void conn_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct rdzvd_conn *c = (struct rdzvd_conn *)h;
    struct rdzvd_server *srv = c->srv;
    size_t chunk = srv->scratch_len;

    (void)suggested;
    if (rdzv_buf_avail(&c->in) == 0) {
        *buf = uv_buf_init((char *)srv->scratch, (unsigned)srv->scratch_len);
        return;
    }
    /* A partial request is pending: read straight after it. Its size is already bounded by
     * max_frame (the decoder rejects larger lengths as soon as they arrive). */
    if (c->need > rdzv_buf_avail(&c->in) && c->need - rdzv_buf_avail(&c->in) > chunk)
        chunk = c->need - rdzv_buf_avail(&c->in);
    if (rdzv_buf_reserve(&c->in, chunk) < 0) {
        *buf = uv_buf_init(NULL, 0); /* libuv reports UV_ENOBUFS */
        return;
    }
    *buf = uv_buf_init((char *)c->in.data + c->in.len, (unsigned)(c->in.cap - c->in.len));
}

static void conn_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct rdzvd_conn *c = (struct rdzvd_conn *)s;
    ssize_t r;

    if (nread == 0)
        return; /* EAGAIN, not EOF */
    if (nread < 0) {
        if (nread == UV_EOF) {
            rdzvd_conn_close(c, rdzv_buf_avail(&c->in) ? "peer closed mid-request" : "peer closed");
        } else {
            char why[96];

            snprintf(why, sizeof(why), "read failed: %s", uv_strerror((int)nread));
            rdzvd_conn_close(c, why);
        }
        return;
    }
    if (buf->base == (char *)c->srv->scratch) {
        /* Fast path: serve straight from the shared buffer, keep only an incomplete tail. */
        r = conn_parse(c, c->srv->scratch, (size_t)nread);
        if (r < 0)
            return;
        if ((size_t)r < (size_t)nread &&
            rdzv_buf_put(&c->in, c->srv->scratch + r, (size_t)nread - (size_t)r) < 0) {
            rdzvd_conn_close(c, "out of memory buffering a request");
            return;
        }
        if (c->reading) {
            /* Only an incomplete request can be left: nothing to parse until more arrives. */
            conn_flush(c);
            rdzvd_conn_flush_pending(c->srv);
        } else {
            conn_process(c);
        }
        return;
    }
    c->in.len += (size_t)nread;
    if (rdzv_buf_avail(&c->in) < c->need)
        return;
    conn_process(c);
}

int rdzvd_conn_accept(struct rdzvd_listener *l)
{
    struct rdzvd_server *srv = l->srv;
    struct sockaddr_storage ss;
    int len = sizeof(ss), r;
    struct rdzvd_conn *c = calloc(1, sizeof(*c));

    if (!c)
        return -ENOMEM;
    r = uv_tcp_init(srv->loop, &c->tcp);
    if (r < 0) {
        free(c);
        return r;
    }
    c->srv = srv;
    c->lst = l;
    c->id = ++srv->next_id;
    rdzv_list_init(&c->flush_node);
    rdzvd_waiter_init(&c->waiter, c);
    rdzv_list_add_tail(&srv->conns, &c->node);
    rdzv_list_add_tail(&l->conns, &c->lst_node);
    srv->nconns++;
    l->nconns++;
    c->state = CONN_NEW;
    strcpy(c->peer, "?");
    rdzvd_guard_track(srv, &c->hs);
    c->store_ok = !srv->cfg.store_acl;

    r = uv_accept((uv_stream_t *)&l->tcp, (uv_stream_t *)&c->tcp);
    if (r < 0) {
        rdzvd_conn_close(c, "accept failed");
        return r;
    }
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0) {
        char host[INET6_ADDRSTRLEN] = "?";

        c->store_ok = rdzvd_acl_allows(srv->cfg.store_acl, (struct sockaddr *)&ss);
        int port = 0;

        if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

            uv_ip6_name(s6, host, sizeof(host));
            port = ntohs(s6->sin6_port);
            /* Show v4-mapped peers as plain IPv4. */
            if (strncmp(host, "::ffff:", 7) == 0 && strchr(host + 7, '.'))
                memmove(host, host + 7, strlen(host + 7) + 1);
        } else if (ss.ss_family == AF_INET) {
            struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

            uv_ip4_name(s4, host, sizeof(host));
            port = ntohs(s4->sin_port);
        }
        snprintf(c->peer, sizeof(c->peer), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    }
    (void)uv_tcp_nodelay(&c->tcp, 1);

    if (srv->stopping || l->closing || srv->nconns > srv->cfg.lim.max_conns) {
        uint64_t now = rdzv_now_ms();

        srv->stats.rejected++;
        if (now - srv->last_reject_log_ms >= 1000) {
            srv->last_reject_log_ms = now;
            log_warn("conn %" PRIu64 " (%s): refused: %" PRIu64 " connections open (limit %" PRIu64
                     ", see --max-conns)",
                     c->id, c->peer, srv->nconns - 1, srv->cfg.lim.max_conns);
        }
        c->state = CONN_OPEN;
        rdzvd_conn_close(c, "too many connections");
        return 0;
    }
    if (!c->store_ok && !l->accepts_rdzv) {
        /* A job's store listener serves TCPStore clients only: no need to wait for bytes. */
        c->state = CONN_OPEN;
        conn_refuse_store(c);
        return 0;
    }
    srv->stats.accepted++;
    log_info("conn %" PRIu64 " (%s): accepted on %s listener", c->id, c->peer, l->desc);
    r = uv_read_start((uv_stream_t *)&c->tcp, conn_alloc_cb, conn_read_cb);
    if (r < 0) {
        rdzvd_conn_close(c, "read start failed");
        return r;
    }
    c->reading = true;
    return 0;
}

void rdzvd_conn_close_all(struct rdzvd_server *srv)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &srv->conns)
    {
        struct rdzvd_conn *c = rdzv_container_of(pos, struct rdzvd_conn, node);

        /* Hand over what is already queued before closing (best effort, non-blocking). */
        conn_flush(c);
        rdzvd_conn_close(c, "server shutting down");
    }
}

void rdzvd_conn_close_listener(struct rdzvd_listener *l)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &l->conns)
    {
        struct rdzvd_conn *c = rdzv_container_of(pos, struct rdzvd_conn, lst_node);

        rdzvd_conn_close(c, "its job generation ended");
    }
}

struct rdzv_buf *rdzvd_conn_out(struct rdzvd_conn *c)
{
    if (c->state == CONN_CLOSING)
        return NULL;
    if (rdzv_list_empty(&c->flush_node))
        rdzv_list_add_tail(&c->srv->flush_list, &c->flush_node);
    return &c->out;
}

void rdzvd_conn_close_after_flush(struct rdzvd_conn *c)
{
    if (c->state == CONN_CLOSING)
        return;
    c->close_after_flush = true;
    if (rdzv_list_empty(&c->flush_node))
        rdzv_list_add_tail(&c->srv->flush_list, &c->flush_node);
}

void rdzvd_conn_set_member(struct rdzvd_conn *c, void *member)
{
    c->member = member;
}

void *rdzvd_conn_get_member(const struct rdzvd_conn *c)
{
    return c->member;
}

struct rdzvd_server *rdzvd_conn_server(const struct rdzvd_conn *c)
{
    return c->srv;
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
    uv_os_fd_t fd;
    int n = 0;

    if (uv_fileno((const uv_handle_t *)&c->tcp, &fd) < 0 || ioctl(fd, FIONREAD, &n) < 0 || n < 0)
        return 0;
    return (size_t)n;
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
