/* SPDX-License-Identifier: Apache-2.0 */
/* agent-front.c: the node's store front (agent-front.h, docs/design/store-front.md): worker
 * connections in, one shared connection and the WAITs' connections out to the store. */
#include "agent/front/agent-front.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-list.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-tcpstore.h"
#include "agent/front/agent-front-admit.h"
#include "agent/front/agent-front-wait.h"
#include "agent/front/agent-front-wire.h"

/* Requests queued for the store past which the workers are not read until half of it is out. */
#define UP_OUT_MAX (16u << 20)
#define STR_(x) #x
#define STR(x) STR_(x)
struct front_conn;

/* One reply a worker waits for, in its requests' order: filled by the upstream request it
 * hangs on (tnode in that request's targets), or at once. */
struct slot {
    struct rdzv_list node;  /* its connection's slots */
    struct rdzv_list tnode; /* the upstream request's targets (self-linked when none) */
    struct front_conn *c;
    struct rdzv_buf data;
    bool filled;
};

/* A request sent on the shared upstream connection that has a reply (upstream replies come in
 * request order: the FIFO parses them). */
struct up_req {
    struct rdzv_list node; /* f->fifo */
    uint64_t end;          /* f->queued when it was queued: unsent while f->kicked < end */
    enum rdzv_op op;
    uint64_t count; /* MULTI_GET's keys */
    uint64_t seq;   /* f->changes when sent: a GET shared only while it is the same */
    uint8_t *key;   /* GET's key */
    size_t klen;
    struct rdzv_list targets;
    struct agent_front_wait *qlen_of; /* a wait's QUEUE_LEN (agent_front_wait_counted) */
};

struct front_conn {
    struct rdzv_list node; /* f->conns */
    struct agent_front *f;
    uv_tcp_t tcp;
    struct agent_front_out out;
    struct rdzv_buf in;
    struct rdzv_list slots, waiters;
    struct agent_front_admittee adm;
    unsigned pending; /* slots */
    unsigned nwaiters;
    uint64_t wait_keys; /* the keys of its waiters' lists */
    int dialect; /* -1 until the first bytes */
    bool closing, oom;
};

struct agent_front {
    struct agent_front_cfg cfg;
    char store[64];
    struct sockaddr_storage store_sa;
    uv_tcp_t listener;
    uint16_t port;
    uv_tcp_t up;
    uv_connect_t up_creq;
    struct agent_front_out up_out;
    struct rdzv_buf up_in;
    bool up_connected;
    bool up_heard; /* a frame came from the store */
    bool up_oom;   /* a request for the store could not be queued: given up at the next turn */
    struct rdzv_list fifo, conns;
    struct agent_front_admit admit;
    struct agent_front_waits waits;
    uint64_t changes; /* changes forwarded, and STOP_WAITINGs (a change the store made) */
    uint64_t queued;  /* bytes queued for the store, in all */
    uint64_t kicked;  /* of them, handed to the kernel */
    bool paused;      /* UP_OUT_MAX queued: the workers are not read */
    struct agent_front_stats st;
    unsigned handles; /* open: the front is freed when the last closes, after close */
    bool closing, lost, listener_closed;
};

static void front_lost(struct agent_front *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void conn_close(struct front_conn *c, const char *why);
static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void conn_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);
static void conn_serve(struct front_conn *c);
static void pause_workers(struct agent_front *f, bool pause);
static void up_flush(struct agent_front *f);

static void maybe_free(struct agent_front *f)
{
    if (!f->closing || f->handles)
        return;
    rdzv_buf_free(&f->up_in);
    agent_front_out_free(&f->up_out);
    free(f);
}

static void handle_closed(uv_handle_t *h)
{
    struct agent_front *f = h->data;

    f->handles--;
    maybe_free(f);
}

/* Output. */

static void conn_write(struct front_conn *c)
{
    int r;

    if (c->closing)
        return;
    r = agent_front_out_kick(&c->out, (uv_stream_t *)&c->tcp);
    if (r < 0)
        conn_close(c, uv_strerror(r));
}

static void conn_written(struct agent_front_out *o, int status)
{
    struct front_conn *c = o->ud;

    if (c->closing)
        return;
    if (status < 0) {
        conn_close(c, uv_strerror(status));
        up_flush(c->f); /* its waits' cancels */
        return;
    }
    conn_write(c);
}

static void slot_free(struct slot *s)
{
    rdzv_list_del(&s->node);
    rdzv_list_del(&s->tnode);
    rdzv_buf_free(&s->data);
    s->c->pending--;
    free(s);
}

/* The filled replies at the head go out, in order. */
static void conn_flush(struct front_conn *c)
{
    while (!rdzv_list_empty(&c->slots)) {
        struct slot *s = rdzv_container_of(c->slots.next, struct slot, node);

        if (!s->filled)
            break;
        if (rdzv_buf_put(&c->out.next, rdzv_buf_head(&s->data), rdzv_buf_avail(&s->data)) < 0) {
            conn_close(c, "out of memory");
            return;
        }
        slot_free(s);
    }
    if (rdzv_buf_avail(&c->out.next) > c->f->cfg.lim.max_outbuf) {
        conn_close(c, "it does not read its replies (more than --max-outbuf queued)");
        return;
    }
    conn_write(c);
}

/* A slot at the tail of c's replies (filled with p[0..n) when filled), or NULL (c closed). */
static struct slot *slot_add(struct front_conn *c, bool filled, const uint8_t *p, size_t n)
{
    struct slot *s;

    if (c->pending >= AGENT_FRONT_MAX_PENDING) {
        conn_close(c, "more than " STR(AGENT_FRONT_MAX_PENDING) " requests in flight");
        return NULL;
    }
    s = calloc(1, sizeof(*s));
    if (!s || (filled && n && rdzv_buf_put(&s->data, p, n) < 0)) {
        free(s);
        conn_close(c, "out of memory");
        return NULL;
    }
    s->c = c;
    s->filled = filled;
    rdzv_list_init(&s->tnode);
    rdzv_list_add_tail(&c->slots, &s->node);
    c->pending++;
    return s;
}

/* The shared upstream connection. */

static void up_write(struct agent_front *f)
{
    size_t n = rdzv_buf_avail(&f->up_out.next);
    int r;

    if (!f->up_connected || f->lost || f->closing)
        return;
    r = agent_front_out_kick(&f->up_out, (uv_stream_t *)&f->up);
    if (r < 0)
        front_lost(f, "writing to the store at %s: %s", f->store, uv_strerror(r));
    else if (!rdzv_buf_avail(&f->up_out.next))
        f->kicked += n;
}

static void up_written(struct agent_front_out *o, int status)
{
    struct agent_front *f = o->ud;

    if (f->closing || f->lost)
        return;
    if (status < 0) {
        front_lost(f, "writing to the store at %s: %s", f->store, uv_strerror(status));
        return;
    }
    up_write(f);
    if (f->paused &&
        rdzv_buf_avail(&f->up_out.next) + rdzv_buf_avail(&f->up_out.cur) < UP_OUT_MAX / 2) {
        pause_workers(f, false);
        up_flush(f); /* what the requests read on resuming asked of the store */
    }
}

/* A wait's request (TAG_WAIT, TAG_CANCEL, QUEUE_LEN) queued for the store, from deep inside the
 * waits' calls: written, or on no memory the store's connection given up, by up_flush when the
 * callback that led here ends (front_lost frees the waits under their feet). */
static void up_enqueue(struct agent_front *f, const uint8_t *p, size_t n)
{
    if (rdzv_buf_put(&f->up_out.next, p, n) < 0) {
        f->up_oom = true;
        return;
    }
    f->queued += n;
}

static void up_flush(struct agent_front *f)
{
    if (f->up_oom)
        front_lost(f, "out of memory queueing a request for the store at %s", f->store);
    else if (rdzv_buf_avail(&f->up_out.next))
        up_write(f);
}

static void req_free(struct up_req *q)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &q->targets) rdzv_list_del(pos);
    rdzv_list_del(&q->node);
    if (q->qlen_of) /* never answered: the store is lost */
        agent_front_wait_counted(q->qlen_of, -1);
    free(q->key);
    free(q);
}

static void up_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct agent_front *f = h->data;

    (void)suggested;
    agent_front_alloc_in(&f->up_in, buf);
}

/* The store's frames (proto/TCPSTORE.md section 9): replies to the requests at the head of the
 * FIFO, to the slots waiting for them; a woken TAG_WAIT's tag, to its waiters. */
static void up_deliver(struct agent_front *f)
{
    while (!f->lost && rdzv_buf_avail(&f->up_in)) {
        const uint8_t *p = rdzv_buf_head(&f->up_in);
        size_t n = rdzv_buf_avail(&f->up_in);
        struct rdzv_list *pos, *tmp;
        struct agent_front_wait *w;
        struct up_req *q;
        ssize_t size;

        f->up_heard = true;
        if (p[0] == RDZV_FRAME_WOKEN) {
            uint64_t tag;

            if (n < 9)
                break;
            tag = rdzv_get_u64(p + 1);
            rdzv_buf_consume(&f->up_in, 9);
            agent_front_waits_woken(&f->waits, tag);
            continue;
        }
        if (p[0] != RDZV_FRAME_REPLY || rdzv_list_empty(&f->fifo)) {
            front_lost(f, "the store at %s sent %s", f->store,
                       p[0] != RDZV_FRAME_REPLY ? "a frame that is not a store front's"
                                                : "a reply nobody asked for");
            return;
        }
        q = rdzv_container_of(f->fifo.next, struct up_req, node);
        size = agent_front_reply_size(q->op, q->count, p + 1, n - 1);
        if (size == -EAGAIN)
            break;
        if (size < 0) {
            front_lost(f, "the store at %s sent a reply to %s that is not one", f->store,
                       rdzv_op_name(q->op));
            return;
        }
        if ((w = q->qlen_of)) { /* a wait's QUEUE_LEN: its waiters told after it */
            int64_t len = (int64_t)rdzv_get_u64(p + 1);

            q->qlen_of = NULL;
            req_free(q);
            rdzv_buf_consume(&f->up_in, 1 + (size_t)size);
            agent_front_wait_counted(w, len);
            continue;
        }
        /* Filled first, flushed after: a flush may close a connection, and its slots with it,
         * among them other targets of q (a pipelining client's). */
        while (!rdzv_list_empty(&q->targets)) {
            struct slot *s = rdzv_container_of(q->targets.next, struct slot, tnode);

            rdzv_list_del(&s->tnode);
            if (rdzv_buf_put(&s->data, p + 1, (size_t)size) < 0)
                s->c->oom = true;
            else
                s->filled = true;
        }
        req_free(q);
        rdzv_buf_consume(&f->up_in, 1 + (size_t)size);
        rdzv_list_for_each_safe(pos, tmp, &f->conns)
        {
            struct front_conn *c = rdzv_container_of(pos, struct front_conn, node);

            if (c->oom)
                conn_close(c, "out of memory");
            else if (!rdzv_list_empty(&c->slots) &&
                     rdzv_container_of(c->slots.next, struct slot, node)->filled)
                conn_flush(c);
        }
    }
}

static void up_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct agent_front *f = st->data;

    (void)buf;
    if (f->closing || f->lost)
        return;
    if (nread < 0) {
        /* Closed before a frame came: most likely an rdzvd without a front's numbering. */
        front_lost(f, "the store at %s closed the connection (%s)%s", f->store,
                   nread == UV_EOF ? "end of stream" : uv_strerror((int)nread),
                   f->up_heard ? "" : " before answering: is rdzvd older than this rdzv-agent "
                                      "(--store-front needs both of one version)?");
        return;
    }
    if (nread == 0)
        return;
    f->up_in.len += (size_t)nread;
    up_deliver(f);
    up_flush(f); /* what the waits woken asked of the store */
}

static void up_connected(uv_connect_t *req, int status)
{
    struct agent_front *f = req->data;
    int r, fd; /* uv_os_fd_t is an int here */

    if (f->closing || f->lost)
        return;
    if (status == 0 && uv_fileno((uv_handle_t *)&f->up, &fd) == 0 && rdzv_fd_self_connected(fd))
        status = UV_ECONNREFUSED; /* to itself: nothing listens there (rdzv-util.h) */
    if (status < 0) {
        front_lost(f, "cannot connect to the store at %s: %s", f->store, uv_strerror(status));
        return;
    }
    (void)uv_tcp_nodelay(&f->up, 1);
    f->up_connected = true;
    r = uv_read_start((uv_stream_t *)&f->up, up_alloc, up_read);
    if (r < 0) {
        front_lost(f, "reading from the store at %s: %s", f->store, uv_strerror(r));
        return;
    }
    up_write(f);
}

/* A worker's WAIT: off its connection and its wait, freed. */
static void waiter_free(struct agent_front_waiter *wt)
{
    struct front_conn *c = wt->conn;

    rdzv_list_del(&wt->cnode);
    agent_front_waiter_drop(wt);
    c->nwaiters--;
    c->wait_keys -= wt->keys;
    free(wt);
}

/* The key list of wt was set: STOP_WAITING to its worker. */
static void waiter_woken(struct agent_front_waiter *wt, void *ud)
{
    struct front_conn *c = wt->conn;

    c->f->changes++; /* the store has a change that a GET sent before may not show */
    (void)ud;
    waiter_free(wt);
    if (slot_add(c, true, &(const uint8_t){RDZV_WAIT_STOP_WAITING}, 1))
        conn_flush(c);
}

static void waits_send(const uint8_t *frame, size_t n, void *ud)
{
    up_enqueue(ud, frame, n);
}

/* A wait's QUEUE_LEN of its key: a request in the FIFO whose reply goes back to the wait. */
static void waits_count(struct agent_front_wait *w, const uint8_t *key, size_t klen, void *ud)
{
    struct agent_front *f = ud;
    struct up_req *q = calloc(1, sizeof(*q));
    struct rdzv_buf frame = {0};

    if (!q || rdzv_enc_key(&frame, RDZV_DIALECT_FRONT, RDZV_OP_QUEUE_LEN, key, klen) < 0) {
        free(q);
        rdzv_buf_free(&frame);
        f->up_oom = true; /* the store is given up: agent_front_waits_free has w */
        return;
    }
    up_enqueue(f, frame.data, frame.len);
    rdzv_buf_free(&frame);
    q->op = RDZV_OP_QUEUE_LEN;
    q->end = f->queued;
    q->seq = f->changes;
    q->qlen_of = w;
    rdzv_list_init(&q->targets);
    rdzv_list_add_tail(&f->fifo, &q->node);
}

/* WAIT: on the upstream wait of the same key list, or a new one. */
static void conn_wait(struct front_conn *c, const uint8_t *body, size_t n)
{
    struct agent_front_waiter *wt;
    uint64_t keys = n >= 8 ? rdzv_get_u64(body) : 0;
    char why[160];
    int r;

    c->f->st.waits++;
    /* PyTorch <= 2.0 leaves a timed-out WAIT registered, as rdzvd keeps it: many per connection.
     * Each connection has its share, and it is closed past it, never another. */
    if (agent_front_wait_over(c->nwaiters, c->wait_keys, keys, c->f->cfg.lim.max_wait_keys,
                              c->f->cfg.max_conns, why, sizeof(why))) {
        conn_close(c, why);
        return;
    }
    wt = calloc(1, sizeof(*wt));
    if (!wt) {
        conn_close(c, "out of memory");
        return;
    }
    wt->conn = c;
    r = agent_front_wait_add(&c->f->waits, wt, body, n);
    if (r < 0) {
        free(wt);
        conn_close(c, r == -EMLINK ? "the node's waits are full" : uv_strerror(r));
        return;
    }
    rdzv_list_add_tail(&c->waiters, &wt->cnode);
    c->nwaiters++;
    wt->keys = keys;
    c->wait_keys += keys;
}

/* CANCEL_WAIT: the connection's waits go, and WAIT_CANCELED is the answer, always (rdzvd's
 * rule: the client reads one more byte if a STOP_WAITING came first). */
static void conn_cancel_wait(struct front_conn *c)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &c->waiters)
        waiter_free(rdzv_container_of(pos, struct agent_front_waiter, cnode));
    if (slot_add(c, true, &(const uint8_t){RDZV_WAIT_CANCELED}, 1))
        conn_flush(c);
}

/* Requests forwarded on the shared connection. */

/* Stop reading the workers while UP_OUT_MAX waits for the store (requests without a reply,
 * SETs, are in no slot), and read them again once half of it is out. */
static void pause_workers(struct agent_front *f, bool pause)
{
    struct rdzv_list *pos, *tmp;

    f->paused = pause;
    rdzv_list_for_each_safe(pos, tmp, &f->conns)
    {
        struct front_conn *c = rdzv_container_of(pos, struct front_conn, node);

        if (pause)
            (void)uv_read_stop((uv_stream_t *)&c->tcp);
        else if (!f->paused && uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_read) < 0)
            conn_close(c, "cannot read");
        else if (!f->paused)
            conn_serve(c); /* what it sent before the pause */
        if (f->lost || f->closing)
            break; /* every connection closed: tmp with them */
    }
}

static void conn_forward(struct front_conn *c, const struct rdzv_req *req, const uint8_t *p)
{
    struct agent_front *f = c->f;
    struct rdzv_slice k = {NULL, 0};
    struct up_req *q;
    struct slot *s = NULL;
    int r;

    if (req->op == RDZV_OP_GET) {
        struct rdzv_cursor cur;
        struct rdzv_list *pos;

        rdzv_req_cursor(req, &cur);
        rdzv_req_next(&cur, &k);
        /* The same key asked for upstream, not sent yet (so the store reads it after this one
         * came), with no change since (a worker reads its writes, and the value a WAIT of its
         * saw set): its reply. */
        for (pos = f->fifo.prev; pos != &f->fifo; pos = pos->prev) {
            q = rdzv_container_of(pos, struct up_req, node);
            if (q->seq != f->changes || q->end <= f->kicked)
                break;
            if (q->op == RDZV_OP_GET && q->klen == k.len &&
                (k.len == 0 || memcmp(q->key, k.p, k.len) == 0)) {
                if (!(s = slot_add(c, false, NULL, 0)))
                    return;
                rdzv_list_add_tail(&q->targets, &s->tnode);
                f->st.shared_gets++;
                return;
            }
        }
    }
    if (req->op == RDZV_OP_MULTI_GET && req->count == 0) {
        /* Its reply is empty: nothing would come from the store to fill it. */
        if (slot_add(c, true, NULL, 0))
            conn_flush(c);
        return;
    }
    if (req->op == RDZV_OP_QUEUE_PUSH || req->op == RDZV_OP_QUEUE_POP ||
        req->op == RDZV_OP_QUEUE_LEN) {
        struct rdzv_cursor cur;
        struct rdzv_slice qk;

        rdzv_req_cursor(req, &cur);
        rdzv_req_next(&cur, &qk);
        agent_front_waits_queue_seen(&f->waits, qk.p, qk.len);
    }
    if (rdzv_op_has_reply(req->op) && !(s = slot_add(c, false, NULL, 0)))
        return;
    r = rdzv_enc_op(&f->up_out.next, RDZV_DIALECT_FRONT, req->op);
    if (r == 0)
        r = rdzv_buf_put(&f->up_out.next, p + 1, req->frame_len - 1);
    f->queued += req->frame_len;
    q = s ? calloc(1, sizeof(*q)) : NULL;
    if (r < 0 || (s && !q) || (q && k.len && !(q->key = malloc(k.len)))) {
        free(q);
        front_lost(f, "out of memory forwarding a request");
        return;
    }
    f->st.forwarded++;
    if (agent_front_changes_keys(req->op))
        f->changes++;
    if (q) {
        q->op = req->op;
        q->end = f->queued;
        q->count = req->count;
        q->seq = f->changes;
        if (k.len)
            memcpy(q->key, k.p, k.len);
        q->klen = k.len;
        rdzv_list_init(&q->targets);
        rdzv_list_add_tail(&q->targets, &s->tnode);
        rdzv_list_add_tail(&f->fifo, &q->node);
    }
    up_write(f);
    if (rdzv_buf_avail(&f->up_out.next) > UP_OUT_MAX && !f->paused)
        pause_workers(f, true);
}

/* Worker connections. */

static void conn_closed(uv_handle_t *h)
{
    struct front_conn *c = h->data;
    struct agent_front *f = c->f;

    rdzv_buf_free(&c->in);
    agent_front_out_free(&c->out);
    free(c);
    f->handles--;
    maybe_free(f);
}

static void conn_close(struct front_conn *c, const char *why)
{
    struct rdzv_list *pos, *tmp;

    if (c->closing)
        return;
    c->closing = true;
    if (why)
        log_warn("store front: closing a worker's connection: %s", why);
    rdzv_list_for_each_safe(pos, tmp, &c->waiters)
        waiter_free(rdzv_container_of(pos, struct agent_front_waiter, cnode));
    rdzv_list_for_each_safe(pos, tmp, &c->slots)
        slot_free(rdzv_container_of(pos, struct slot, node)); /* replies still due: dropped */
    rdzv_list_del(&c->node);
    agent_front_admit_del(&c->f->admit, &c->adm);
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct front_conn *c = h->data;

    (void)suggested;
    agent_front_alloc_in(&c->in, buf);
}

/* One decoded request. */
static void conn_request(struct front_conn *c, const struct rdzv_req *req, const uint8_t *p)
{
    c->f->st.requests++;
    switch (req->op) {
    case RDZV_OP_VALIDATE:
        conn_close(c, "VALIDATE after the start of the connection");
        return;
    case RDZV_OP_WATCH_KEY:
        conn_close(c, "WATCH_KEY (PyTorch <= 2.0's callbacks) is not served through the store "
                      "front: run without --store-front");
        return;
    case RDZV_OP_WAIT:
        conn_wait(c, p + 1, req->frame_len - 1);
        return;
    case RDZV_OP_CANCEL_WAIT:
        conn_cancel_wait(c);
        return;
    case RDZV_OP_PING: {
        /* Its nonce back, in its turn, as rdzvd answers it: a worker's PING (PyTorch >= 2.5
         * sends one as it connects) checks its way to the server it talks to, and the way on
         * to the store is the front's own connection, whose loss closes every worker's. */
        uint8_t echo[4];

        rdzv_set_u32(echo, req->u32);
        if (slot_add(c, true, echo, sizeof(echo)))
            conn_flush(c);
        return;
    }
    default:
        conn_forward(c, req, p);
    }
}

static void conn_serve(struct front_conn *c)
{
    while (!c->closing && !c->f->paused && rdzv_buf_avail(&c->in)) {
        const uint8_t *p = rdzv_buf_head(&c->in);
        size_t n = rdzv_buf_avail(&c->in);
        struct rdzv_decode_err err = {0};
        struct rdzv_req req;
        ssize_t r;

        if (c->dialect < 0) {
            /* VALIDATE (00, then the magic) opens a modern client; anything else is a legacy
             * one, as rdzvd takes it. */
            if (p[0] == 0 && n < 5)
                return;
            if (p[0] == 0 && rdzv_get_u32(p + 1) == RDZV_VALIDATE_MAGIC) {
                c->dialect = RDZV_DIALECT_MODERN;
                rdzv_buf_consume(&c->in, 5);
                continue;
            }
            c->dialect = (int)c->f->cfg.legacy;
        }
        r = rdzv_req_decode(p, n, (enum rdzv_dialect)c->dialect, &c->f->cfg.lim, &req, &err);
        if (r == 0)
            return;
        if (r < 0) {
            char why[200];

            if (r == -EPROTO)
                snprintf(why, sizeof(why), "%s (0x%02" PRIx64 ") in PyTorch %s numbering", err.what,
                         err.value, rdzv_dialect_name((enum rdzv_dialect)c->dialect));
            else
                snprintf(why, sizeof(why), "%s: %" PRIu64 " > limit %" PRIu64, err.what, err.value,
                         err.limit);
            conn_close(c, why);
            return;
        }
        conn_request(c, &req, p);
        if (!c->closing)
            rdzv_buf_consume(&c->in, (size_t)r);
    }
}

static void conn_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct front_conn *c = st->data;
    struct agent_front *f = c->f;

    (void)buf;
    if (c->closing)
        return;
    if (nread < 0)
        conn_close(c, nread == UV_EOF ? NULL : uv_strerror((int)nread));
    else {
        agent_front_admit_heard(&c->adm);
        c->in.len += (size_t)nread;
        if (f->paused) { /* read before it stopped: served on resume */
            (void)uv_read_stop(st);
            return;
        }
        conn_serve(c);
    }
    up_flush(f); /* what its waits asked of the store: TAG_WAIT, TAG_CANCEL */
}

static void on_connection(uv_stream_t *server, int status)
{
    struct agent_front *f = server->data;
    struct front_conn *c;

    if (status < 0 || f->closing || f->lost ||
        agent_front_admit_defer(&f->admit, server, on_connection)) /* the next turn's */
        return;
    c = calloc(1, sizeof(*c));
    if (!c || uv_tcp_init(f->cfg.loop, &c->tcp) < 0) {
        /* not accepted, libuv would stop listening: refused from now on, said */
        free(c);
        front_lost(f, "out of memory accepting a worker's connection");
        return;
    }
    c->f = f;
    c->tcp.data = c;
    c->out.done = conn_written;
    c->out.ud = c;
    c->dialect = -1;
    rdzv_list_init(&c->slots);
    rdzv_list_init(&c->waiters);
    rdzv_list_init(&c->adm.node);
    rdzv_list_add_tail(&f->conns, &c->node);
    f->handles++;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0 ||
        agent_front_admit_add(&f->admit, &c->adm, &c->tcp) < 0) {
        conn_close(c, NULL);
        return;
    }
    f->st.conns++;
    (void)uv_tcp_nodelay(&c->tcp, 1);
    if (!f->paused && uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_read) < 0)
        conn_close(c, "cannot read");
}

static void admit_evict(struct agent_front_admittee *a, const char *why, void *ud)
{
    (void)ud;
    conn_close(rdzv_container_of(a, struct front_conn, adm), why);
}

/* The front as a whole. */

static void close_all(struct agent_front *f)
{
    struct rdzv_list *pos, *tmp;

    /* their waits with them: a wait nobody waits on closes */
    rdzv_list_for_each_safe(pos, tmp, &f->conns)
        conn_close(rdzv_container_of(pos, struct front_conn, node), NULL);
    rdzv_list_for_each_safe(pos, tmp, &f->fifo)
        req_free(rdzv_container_of(pos, struct up_req, node));
    agent_front_waits_free(&f->waits);
}

static void front_lost(struct agent_front *f, const char *fmt, ...)
{
    char why[400];
    va_list ap;

    if (f->lost || f->closing)
        return;
    f->lost = true;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    close_all(f);
    /* new clients refused at once (ECONNREFUSED), not left in the backlog */
    f->listener_closed = true;
    uv_close((uv_handle_t *)&f->listener, handle_closed);
    if (f->cfg.on_lost)
        f->cfg.on_lost(why, f->cfg.ud);
    else
        log_warn("store front: %s; its workers' connections are closed", why);
}

int agent_front_start(const struct agent_front_cfg *cfg, struct agent_front **ret)
{
    struct agent_front *f = calloc(1, sizeof(*f));
    struct sockaddr_in lo;
    struct sockaddr_storage ss;
    int r, len = sizeof(ss);

    if (!f)
        return -ENOMEM;
    f->cfg = *cfg;
    f->cfg.store_addr = NULL;
    /* The store applies its own limits on keys and values (rdzvd's may be wider than the
     * defaults): here, the frame's. */
    f->cfg.lim.max_key_len = f->cfg.lim.max_value_len = f->cfg.lim.max_frame;
    rdzv_list_init(&f->fifo);
    rdzv_list_init(&f->conns);
    rdzv_format_hostport(f->store, sizeof(f->store), cfg->store_addr, cfg->store_port);
    if (uv_ip4_addr(cfg->store_addr, cfg->store_port, (struct sockaddr_in *)&f->store_sa) < 0 &&
        uv_ip6_addr(cfg->store_addr, cfg->store_port, (struct sockaddr_in6 *)&f->store_sa) < 0) {
        free(f);
        return -EINVAL;
    }
    /* Room for every connection's share at once: one cannot take another's. */
    f->waits = (struct agent_front_waits){.max = AGENT_FRONT_MAX_WAITS * cfg->max_conns,
                                          .woken = waiter_woken,
                                          .send = waits_send,
                                          .count = waits_count, .ud = f};
    agent_front_waits_init(&f->waits);
    r = uv_tcp_init(cfg->loop, &f->listener);
    if (r < 0) {
        free(f);
        return r;
    }
    f->listener.data = f;
    f->handles++;
    r = uv_ip4_addr("127.0.0.1", 0, &lo);
    if (r == 0)
        r = uv_tcp_bind(&f->listener, (struct sockaddr *)&lo, 0);
    if (r == 0)
        r = uv_listen((uv_stream_t *)&f->listener, 1024, on_connection);
    if (r == 0)
        r = uv_tcp_getsockname(&f->listener, (struct sockaddr *)&ss, &len);
    if (r == 0)
        r = uv_tcp_init(cfg->loop, &f->up);
    if (r < 0) {
        f->closing = true;
        uv_close((uv_handle_t *)&f->listener, handle_closed);
        return r;
    }
    f->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    f->up.data = f;
    f->handles++;
    f->admit = (struct agent_front_admit){.loop = cfg->loop, .max = cfg->max_conns,
                                          .server_port = f->port, .is_worker = cfg->is_worker,
                                          .worker_ud = cfg->ud, .evict = admit_evict, .ud = f};
    (void)agent_front_admit_init(&f->admit); /* a timer's and an idle's init cannot fail */
    f->handles += AGENT_FRONT_ADMIT_HANDLES;
    f->up_creq.data = f;
    f->up_out.done = up_written;
    f->up_out.ud = f;
    r = rdzv_enc_validate_magic(&f->up_out.next, RDZV_FRONT_MAGIC);
    f->queued = rdzv_buf_avail(&f->up_out.next); /* kicked counts these bytes too */
    if (r == 0)
        r = uv_tcp_connect(&f->up_creq, &f->up, (struct sockaddr *)&f->store_sa, up_connected);
    if (r < 0) {
        agent_front_close(f);
        return r;
    }
    *ret = f;
    return 0;
}

uint16_t agent_front_port(const struct agent_front *f)
{
    return f->port;
}

void agent_front_stats(const struct agent_front *f, struct agent_front_stats *st)
{
    *st = f->st;
    st->upstream_waits = f->waits.sent;
    st->wait_cancels = f->waits.cancels;
}

void agent_front_close(struct agent_front *f)
{
    if (!f || f->closing)
        return;
    close_all(f);
    f->closing = true;
    if (!f->listener_closed)
        uv_close((uv_handle_t *)&f->listener, handle_closed);
    uv_close((uv_handle_t *)&f->up, handle_closed);
    agent_front_admit_close(&f->admit, handle_closed);
}
