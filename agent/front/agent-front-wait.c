/* SPDX-License-Identifier: Apache-2.0 */
/* agent-front-wait.c: the store front's WAITs, a connection to the store per key list waited on
 * (agent-front-wait.h). */
#include "agent/front/agent-front-wait.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-proto.h"
#include "proto/rdzv-tcpstore.h"

struct agent_front_wait {
    struct rdzv_list node; /* ws->list */
    struct agent_front_waits *ws;
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    /* [VALIDATE (a new connection's)] WAIT keys [QUEUE_LEN key (one key)], in the modern
     * numbering: sent in parts, [from, to) */
    struct rdzv_buf frame;
    size_t body;    /* where WAIT's key list starts: what waiters share */
    size_t qlen_at; /* where the QUEUE_LEN starts (the WAIT's end) */
    size_t from, to;
    struct rdzv_list waiters;
    uint8_t rd[16];
    size_t rdlen;
    bool counting; /* a QUEUE_LEN of its key asked: 8 bytes to come, not STOP_WAITING */
    bool resend;   /* a send to make once the one on its way is written */
    bool closing, failed;
    bool writing; /* frame is on its way: not to be touched */
    bool solo;    /* one waiter's own (a queue's key): never shared */
    bool idle;    /* answered, kept for the next key list (ws->idle) */
};

/* Answered waits kept connected for the next WAITs (a connection a wait is TCP's and
 * VALIDATE's round trips more). */
#define IDLE_MAX 16

static void wait_closed(uv_handle_t *h)
{
    struct agent_front_wait *w = h->data;
    struct agent_front_waits *ws = w->ws;

    rdzv_buf_free(&w->frame);
    free(w);
    ws->handles--;
    ws->closed(ws->ud);
}

static void wait_close(struct agent_front_wait *w)
{
    struct rdzv_list *pos, *tmp;

    if (w->closing)
        return;
    w->closing = true;
    rdzv_list_for_each_safe(pos, tmp, &w->waiters)
    {
        struct agent_front_waiter *wt = rdzv_container_of(pos, struct agent_front_waiter, wnode);

        rdzv_list_del(&wt->wnode);
        wt->w = NULL;
    }
    rdzv_list_del(&w->node);
    if (w->idle)
        w->ws->nidle--;
    else
        w->ws->n--;
    uv_close((uv_handle_t *)&w->tcp, wait_closed);
}

/* Answered: kept for the next key list if it may be (its write done, room in the pool). */
static void wait_done(struct agent_front_wait *w)
{
    struct agent_front_waits *ws = w->ws;

    if (w->closing)
        return;
    if (w->writing || w->failed || ws->nidle >= IDLE_MAX) {
        wait_close(w);
        return;
    }
    rdzv_list_del(&w->node);
    ws->n--;
    w->idle = true;
    rdzv_list_add_tail(&ws->idle, &w->node);
    ws->nidle++;
}

/* The wait failed: said once (the caller closes what it must); it stays for its waiters. */
static void wait_failed(struct agent_front_wait *w, const char *what, int err)
{
    char why[300];

    if (w->closing || w->failed)
        return;
    w->failed = true;
    snprintf(why, sizeof(why), "%s the store at %s for a WAIT%s%s", what, w->ws->store_name,
             err ? ": " : "", err ? uv_strerror(err) : "");
    w->ws->lost(why, w->ws->ud);
}

static void wait_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct agent_front_wait *w = h->data;

    (void)suggested;
    *buf = uv_buf_init((char *)w->rd + w->rdlen, (unsigned)(sizeof(w->rd) - w->rdlen));
}

static int wait_send(struct agent_front_wait *w);

/* The first n waiters are told (all when n is 0). */
static void wake(struct agent_front_wait *w, uint64_t n)
{
    /* The first each time: telling one may drop others (its connection closed). */
    for (uint64_t i = 0; (!n || i < n) && !rdzv_list_empty(&w->waiters); i++) {
        struct agent_front_waiter *wt =
            rdzv_container_of(w->waiters.next, struct agent_front_waiter, wnode);

        rdzv_list_del(&wt->wnode);
        wt->w = NULL;
        w->ws->woken(wt, w->ws->ud);
    }
}

/* Send frame[from, to) now, or once the send on its way is written. */
static void wait_send_from(struct agent_front_wait *w, size_t from, size_t to)
{
    w->from = from;
    w->to = to;
    if (w->writing) {
        w->resend = true;
        return;
    }
    if (wait_send(w) < 0)
        wait_failed(w, "cannot write to", 0);
}

/* The store answered: STOP_WAITING (the keys are there), or the length of the queue of the one
 * key. Several workers waiting on one key may be popping a queue, whose every item wakes one
 * waiter on rdzvd (rdzvd-store.c): before telling them, the front asks the queue's length on
 * this connection, before any of their QUEUE_POPs can come; a key with no queue (0) tells them
 * all, n items tell n, and the rest wait again. */
static void wait_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct agent_front_wait *w = st->data;
    uint64_t n;

    (void)buf;
    if (w->closing || w->failed || nread == 0)
        return;
    if (w->idle) { /* closed by the store, or bytes nobody asked for: no longer kept */
        wait_close(w);
        return;
    }
    if (nread < 0) {
        wait_failed(w, "lost the connection to", nread != UV_EOF ? (int)nread : 0);
        return;
    }
    w->rdlen += (size_t)nread;
    if (!w->counting) {
        if (w->rdlen > 1 || w->rd[0] != RDZV_WAIT_STOP_WAITING) {
            wait_failed(w, "bytes that are not an answer from", 0);
            return;
        }
        w->rdlen = 0;
        /* one waiter, or a list of several keys (a queue is popped after a WAIT of its key) */
        if (w->waiters.next == w->waiters.prev || rdzv_get_u64(w->frame.data + w->body) != 1) {
            wake(w, 0);
            wait_done(w);
            return;
        }
        w->counting = true;
        wait_send_from(w, w->qlen_at, w->frame.len);
        return;
    }
    if (w->rdlen < 8)
        return;
    if (w->rdlen > 8) {
        wait_failed(w, "bytes that are not an answer from", 0);
        return;
    }
    n = rdzv_get_u64(w->rd);
    w->rdlen = 0;
    w->counting = false;
    if ((int64_t)n <= 0) { /* no queue: the key is there for all */
        wake(w, 0);
        wait_done(w);
        return;
    }
    /* A queue: its n items wake n waiters; the others wait each on its own from now on (their
     * WAITs come to the store after this push: one that finds an item not yet popped by those
     * woken is answered at once, which rdzvd would not do: docs/design/store-front.md). */
    w->ws->queue_seen(w->frame.data + w->body + 16,
                      (size_t)rdzv_get_u64(w->frame.data + w->body + 8), w->ws->ud);
    wake(w, n);
    while (!rdzv_list_empty(&w->waiters)) {
        struct agent_front_waiter *wt =
            rdzv_container_of(w->waiters.next, struct agent_front_waiter, wnode);

        rdzv_list_del(&wt->wnode);
        wt->w = NULL;
        if (agent_front_wait_add(w->ws, wt, w->frame.data + w->body, w->qlen_at - w->body, false) <
            0)
            w->ws->woken(wt, w->ws->ud); /* no room for its own: told, as the others */
    }
    wait_done(w);
}

static void wait_written(uv_write_t *req, int status)
{
    struct agent_front_wait *w = req->data;

    w->writing = false;
    if (status < 0) {
        wait_failed(w, "cannot write to", status);
        return;
    }
    if (w->resend && !w->closing && !w->failed) {
        w->resend = false;
        if (wait_send(w) < 0)
            wait_failed(w, "cannot write to", 0);
    }
}

/* Send frame[from, to) (the read side is on). 0 or a negative errno. */
static int wait_send(struct agent_front_wait *w)
{
    uv_buf_t b = uv_buf_init((char *)w->frame.data + w->from, (unsigned)(w->to - w->from));
    int r;

    w->wreq.data = w;
    r = uv_write(&w->wreq, (uv_stream_t *)&w->tcp, &b, 1, wait_written);
    w->writing = r == 0;
    return r;
}

static void wait_connected(uv_connect_t *req, int status)
{
    struct agent_front_wait *w = req->data;
    int r;

    if (w->closing)
        return;
    if (status < 0) {
        wait_failed(w, "cannot connect to", status);
        return;
    }
    (void)uv_tcp_nodelay(&w->tcp, 1);
    r = wait_send(w);
    if (r == 0)
        r = uv_read_start((uv_stream_t *)&w->tcp, wait_alloc, wait_read);
    if (r < 0)
        wait_failed(w, "cannot write to", r);
}

/* w's frame for the key list body[0..n) (VALIDATE first if validate), its first send set:
 * 0 or -ENOMEM. */
static int wait_frame(struct agent_front_wait *w, const uint8_t *body, size_t n, bool validate)
{
    int r = 0;

    rdzv_buf_free(&w->frame);
    if (validate)
        r = rdzv_enc_validate(&w->frame);
    if (r == 0)
        r = rdzv_enc_op(&w->frame, RDZV_DIALECT_MODERN, RDZV_OP_WAIT);
    w->body = w->frame.len;
    if (r == 0)
        r = rdzv_buf_put(&w->frame, body, n);
    w->qlen_at = w->frame.len;
    /* one key: QUEUE_LEN of it (its string follows the count) */
    if (r == 0 && n > 8 && rdzv_get_u64(body) == 1)
        r = rdzv_enc_op(&w->frame, RDZV_DIALECT_MODERN, RDZV_OP_QUEUE_LEN);
    if (r == 0 && n > 8 && rdzv_get_u64(body) == 1)
        r = rdzv_buf_put(&w->frame, body + 8, n - 8);
    w->from = 0;
    w->to = w->qlen_at;
    w->counting = w->resend = false;
    w->rdlen = 0;
    return r;
}

/* A new wait on the key list body[0..n), connecting: 0 (*ret set) or a negative errno. */
static int wait_open(struct agent_front_waits *ws, const uint8_t *body, size_t n,
                     struct agent_front_wait **ret)
{
    struct agent_front_wait *w;
    int r;

    if (ws->n >= ws->max)
        return -EMLINK;
    if (!rdzv_list_empty(&ws->idle)) {
        /* A connection kept: the WAIT alone (VALIDATEd already). */
        w = rdzv_container_of(ws->idle.next, struct agent_front_wait, node);
        r = wait_frame(w, body, n, false);
        if (r == 0)
            r = wait_send(w);
        if (r < 0) {
            wait_close(w);
            return r;
        }
        rdzv_list_del(&w->node);
        ws->nidle--;
        w->idle = false;
        rdzv_list_add_tail(&ws->list, &w->node);
        ws->n++;
        ws->reused++;
        *ret = w;
        return 0;
    }
    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->ws = ws;
    rdzv_list_init(&w->waiters);
    r = wait_frame(w, body, n, true);
    if (r == 0)
        r = uv_tcp_init(ws->loop, &w->tcp);
    if (r < 0) {
        rdzv_buf_free(&w->frame);
        free(w);
        return r;
    }
    w->tcp.data = w;
    ws->handles++;
    rdzv_list_add_tail(&ws->list, &w->node);
    ws->n++;
    ws->opened++;
    w->creq.data = w;
    r = uv_tcp_connect(&w->creq, &w->tcp, (struct sockaddr *)&ws->store, wait_connected);
    if (r < 0) { /* the caller says it (no descriptor left, say): not the store lost */
        wait_close(w);
        return r;
    }
    *ret = w;
    return 0;
}

void agent_front_waits_init(struct agent_front_waits *ws)
{
    rdzv_list_init(&ws->list);
    rdzv_list_init(&ws->idle);
    ws->n = ws->nidle = ws->handles = 0;
    ws->opened = ws->reused = 0;
}

void agent_front_waits_close_idle(struct agent_front_waits *ws)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &ws->idle)
        wait_close(rdzv_container_of(pos, struct agent_front_wait, node));
}

int agent_front_wait_add(struct agent_front_waits *ws, struct agent_front_waiter *wt,
                         const uint8_t *body, size_t n, bool share)
{
    struct agent_front_wait *w = NULL;
    struct rdzv_list *pos;
    int r;

    for (pos = ws->list.next; share && pos != &ws->list && !w; pos = pos->next) {
        struct agent_front_wait *x = rdzv_container_of(pos, struct agent_front_wait, node);

        if (!x->failed && !x->counting && !x->solo && x->qlen_at - x->body == n &&
            memcmp(x->frame.data + x->body, body, n) == 0)
            w = x;
    }
    if (!w && (r = wait_open(ws, body, n, &w)) < 0)
        return r;
    w->solo = !share;
    wt->w = w;
    rdzv_list_add_tail(&w->waiters, &wt->wnode);
    return 0;
}

void agent_front_waiter_drop(struct agent_front_waiter *wt)
{
    struct agent_front_wait *w = wt->w;

    rdzv_list_del(&wt->wnode);
    wt->w = NULL;
    if (w && rdzv_list_empty(&w->waiters))
        wait_close(w); /* nobody waits: closing it cancels it upstream */
}
