/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-transport.c: connections as byte streams. Reads land in the shared scratch buffer; only a
 * partial request is copied into the connection, so an idle connection holds no buffers. Output
 * accumulates in c->out and is written once per batch of requests, under one cap. Accepting
 * connections, the registry and the transport's own lifetime are in rdzvd-transport-registry.c. */
#include "daemon/net/rdzvd-transport.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/data/rdzvd-acl.h"
#include "daemon/data/rdzvd-config.h"
#include "daemon/net/rdzvd-transport-impl.h"

static const char *const conn_state_names[_CONN_STATE_MAX] = {"open", "closing"};

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

static void conn_want_flush(struct rdzvd_conn *c)
{
    if (rdzv_list_empty(&c->flush_node))
        rdzv_list_add_tail(&c->t->flush_list, &c->flush_node);
}

/* ---- handshake deadlines: one list in accept (= deadline) order, one timer ---- */

static void hs_arm(struct rdzvd_transport *t);

static void hs_timer_cb(uv_timer_t *h)
{
    struct rdzvd_transport *t = h->data;
    uint64_t now = uv_now(t->loop);

    while (!rdzv_list_empty(&t->handshaking)) {
        struct rdzvd_conn *c = rdzv_container_of(t->handshaking.next, struct rdzvd_conn, hs_node);

        if (c->hs_deadline_ms > now)
            break;
        rdzvd_conn_handshake_done(c);
        t->hooks->handshake_expired(c);
    }
    hs_arm(t);
}

/* (Re)arm the timer for the oldest connection still handshaking. Entries that finished early
 * leave the timer set for a deadline that is gone: it then fires once for nothing and rearms. */
static void hs_arm(struct rdzvd_transport *t)
{
    struct rdzvd_conn *c;
    uint64_t now = uv_now(t->loop);

    if (!t->hs_timer_open || t->hs_timeout_ms == 0 || rdzv_list_empty(&t->handshaking))
        return;
    c = rdzv_container_of(t->handshaking.next, struct rdzvd_conn, hs_node);
    (void)uv_timer_start(&t->hs_timer, hs_timer_cb,
                         c->hs_deadline_ms > now ? c->hs_deadline_ms - now : 0, 0);
}

/* Log why c is closed to make room (rate-limited with the owner's limiter), and close it. */
static void conn_shed(struct rdzvd_conn *c, const char *why)
{
    if (c->t->refusals)
        rdzvd_conn_warn_limited(c, c->t->refusals, "%s", why);
    else
        log_warn("conn %" PRIu64 " (%s): %s, closing connection", c->id, c->peer, why);
    rdzvd_conn_close(c, why);
}

/* Bytes the kernel holds unread on c's socket (FIONREAD), 0 when unknown. */
size_t rdzvd_conn_kernel_unread(struct rdzvd_conn *c)
{
    uv_os_fd_t fd;
    int n = 0;

    if (uv_fileno((const uv_handle_t *)&c->tcp, &fd) < 0 || ioctl(fd, FIONREAD, &n) < 0 || n < 0)
        return 0;
    return (size_t)n;
}

/* Whose pre-handshake slot a new connection (keep) takes, looking at the oldest HS_SCAN (the
 * contract is rdzvd-transport.h's): only a stale one, silent RDZVD_HS_SHED_AGE_MS; the oldest of
 * keep's own address; none if its address has only busy or younger ones there (a burst of
 * clients, such as the thousands of ranks of one host in init_process_group, that have not all
 * sent their first bytes yet, or that we have not read yet: a burst of connections is accepted
 * before any of them is read, and a turn reads only so many); if its address has none there, the
 * oldest stale one of all. Busy: young, or with bytes waiting in the kernel. So a client that
 * keeps opening idle connections loses its own once they are stale, never those of other
 * addresses while it has any among the oldest, and no burst is cut down, by itself or another
 * (before, a second host's first connections took the slots of the first host's silent ranks,
 * whatever their age: 937 of 1,000 were reset). NULL: none to close. */
#define HS_SCAN 64
static struct rdzvd_conn *hs_victim(struct rdzvd_transport *t, struct rdzvd_conn *keep)
{
    struct rdzvd_conn *oldest = NULL;
    uint64_t now = uv_now(t->loop);
    bool same_busy = false;
    struct rdzv_list *pos;
    unsigned n = 0;

    for (pos = t->handshaking.next; pos != &t->handshaking && n < HS_SCAN; pos = pos->next, n++) {
        struct rdzvd_conn *c = rdzv_container_of(pos, struct rdzvd_conn, hs_node);
        bool same = memcmp(c->addr, keep->addr, sizeof(c->addr)) == 0;
        bool busy;

        if (c == keep)
            continue;
        busy = now - c->hs_since_ms < RDZVD_HS_SHED_AGE_MS || rdzvd_conn_kernel_unread(c) > 0;
        if (same && !busy)
            return c;
        same_busy |= same;
        if (!oldest && !busy)
            oldest = c;
    }
    return same_busy ? NULL : oldest;
}

bool rdzvd_transport_shed_handshaking(struct rdzvd_transport *t, struct rdzvd_conn *keep,
                                      const char *why)
{
    struct rdzvd_conn *c = hs_victim(t, keep);

    if (!c)
        return false;
    conn_shed(c, why);
    return true;
}

/* c's bucket of addresses: its address (an IPv6 one by its /64: one host's, or one subscriber's
 * whole prefix) under a keyed hash. */
static uint32_t hs_bucket(const struct rdzvd_conn *c)
{
    static const uint8_t v4mapped[12] = {[10] = 0xff, [11] = 0xff};
    size_t n = memcmp(c->addr, v4mapped, sizeof(v4mapped)) == 0 ? sizeof(c->addr) : 8;

    return (uint32_t)(rdzv_hash64(c->t->hs_seed, c->addr, n) % RDZVD_HS_ADDR_BUCKETS);
}

void rdzvd_hs_count(struct rdzvd_conn *c)
{
    struct rdzvd_transport *t = c->t;

    if (c->hs_counted || rdzv_list_empty(&c->hs_node) || !t->hs_per_addr)
        return;
    c->hs_bucket = hs_bucket(c);
    c->hs_counted = true;
    t->hs_per_addr[c->hs_bucket]++;
}

uint64_t rdzvd_conn_hs_from_addr(const struct rdzvd_conn *c)
{
    const struct rdzvd_transport *t = c->t;

    return t->hs_per_addr ? t->hs_per_addr[c->hs_counted ? c->hs_bucket : hs_bucket(c)] : 0;
}

uint64_t rdzvd_conn_hs_cost(void)
{
    /* glibc's chunk: the size and a header word, rounded up to 16 bytes */
    return ((sizeof(struct rdzvd_conn) + sizeof(size_t) + 15) & ~(size_t)15) + sizeof(void *);
}

uint64_t rdzvd_transport_hs_bytes(const struct rdzvd_transport *t)
{
    return t->nhandshaking * rdzvd_conn_hs_cost() + t->hs_in_bytes;
}

/* Past the budget, c takes the slot of a stale connection still handshaking (hs_victim), the
 * oldest first, as long as there is one; else the pool runs over the budget (bounded by the
 * owner's --max-conns). */
void rdzvd_hs_make_room(struct rdzvd_conn *c)
{
    struct rdzvd_transport *t = c->t;

    for (;;) {
        const char *why;

        if (t->max_handshaking && t->nhandshaking > t->max_handshaking)
            why = "too many connections before their handshake (--max-handshaking)";
        else if (t->max_hs_bytes && rdzvd_transport_hs_bytes(t) > t->max_hs_bytes)
            why = "too many connections before their handshake (their cost past "
                  "--max-handshaking-bytes)";
        else
            return;
        if (!rdzvd_transport_shed_handshaking(t, c, why))
            return;
    }
}

/* Give c a pre-handshake slot and a deadline. */
void rdzvd_hs_track(struct rdzvd_conn *c)
{
    struct rdzvd_transport *t = c->t;
    bool was_empty = rdzv_list_empty(&t->handshaking);

    c->hs_since_ms = uv_now(t->loop);
    c->hs_deadline_ms = c->hs_since_ms + t->hs_timeout_ms;
    rdzv_list_add_tail(&t->handshaking, &c->hs_node);
    t->nhandshaking++;
    if (t->hs_timeout_ms == 0 || !t->hs_timer_open)
        return;
    /* A running timer already points at an older (or equal) deadline. */
    if (was_empty || !uv_is_active((uv_handle_t *)&t->hs_timer))
        hs_arm(t);
}

void rdzvd_conn_handshake_done(struct rdzvd_conn *c)
{
    if (rdzv_list_empty(&c->hs_node))
        return;
    rdzv_list_del(&c->hs_node);
    c->t->nhandshaking--;
    if (c->hs_counted && c->t->hs_per_addr)
        c->t->hs_per_addr[c->hs_bucket]--;
    c->hs_counted = false;
    c->t->hs_in_bytes -= c->in_charged;
}

/* ---- the input budget and request deadlines ---- */

static void req_arm(struct rdzvd_transport *t);

static void req_timer_cb(uv_timer_t *h)
{
    struct rdzvd_transport *t = h->data;
    uint64_t now = uv_now(t->loop);

    while (!rdzv_list_empty(&t->requests)) {
        struct rdzvd_conn *c = rdzv_container_of(t->requests.next, struct rdzvd_conn, req_node);
        char why[96];

        if (c->req_deadline_ms > now)
            break;
        snprintf(why, sizeof(why), "a request incomplete for %.1f s (--request-timeout)",
                 (double)t->req_timeout_ms / 1000);
        conn_shed(c, why);
    }
    req_arm(t);
}

static void req_arm(struct rdzvd_transport *t)
{
    struct rdzvd_conn *c;
    uint64_t now = uv_now(t->loop);

    if (!t->hs_timer_open || rdzv_list_empty(&t->requests))
        return;
    c = rdzv_container_of(t->requests.next, struct rdzvd_conn, req_node);
    (void)uv_timer_start(&t->req_timer, req_timer_cb,
                         c->req_deadline_ms > now ? c->req_deadline_ms - now : 0, 0);
}

/* c waits for the rest of a request (or not): start its deadline when the request began, keep it
 * while the same request stays incomplete, drop it otherwise. Requests waiting for their turn or
 * for output to drain are ours to serve, not the peer's to finish: no deadline. */
static void conn_req_deadline(struct rdzvd_conn *c)
{
    struct rdzvd_transport *t = c->t;
    bool tracked = !rdzv_list_empty(&c->req_node);

    if (t->req_timeout_ms == 0)
        return;
    if (rdzv_buf_avail(&c->in) == 0 || !c->reading) {
        rdzv_list_del(&c->req_node);
        return;
    }
    if (tracked && c->req_mark == c->nserved)
        return;
    rdzv_list_del(&c->req_node);
    c->req_mark = c->nserved;
    c->req_deadline_ms = uv_now(t->loop) + t->req_timeout_ms;
    rdzv_list_add_tail(&t->requests, &c->req_node);
    if (!uv_is_active((uv_handle_t *)&t->req_timer) || t->requests.next == &c->req_node)
        req_arm(t);
}

/* The connection holding the most input, of all (hs false) or of those before their handshake. */
static struct rdzvd_conn *input_hog(struct rdzvd_transport *t, bool hs)
{
    struct rdzvd_conn *big = NULL;
    struct rdzv_list *pos;

    for (pos = t->holding.next; pos != &t->holding; pos = pos->next) {
        struct rdzvd_conn *c = rdzv_container_of(pos, struct rdzvd_conn, holding_node);

        if ((!hs || rdzvd_conn_handshaking(c)) && (!big || c->in_charged > big->in_charged))
            big = c;
    }
    return big;
}

/* Count c's input buffer (after it changed) and keep every connection's input under the budget:
 * past it the connection holding the most is closed, which may be c. Then (re)set c's request
 * deadline. Returns 0, or -1 once c is closing. */
static int conn_in_account(struct rdzvd_conn *c)
{
    struct rdzvd_transport *t = c->t;
    uint64_t max = t->max_input_bytes;

    if (c->state == CONN_CLOSING)
        return -1;
    if (rdzv_buf_avail(&c->in) == 0 && c->in.cap > 0)
        rdzv_buf_free(&c->in);
    t->in_bytes += c->in.cap - c->in_charged;
    if (rdzvd_conn_handshaking(c))
        t->hs_in_bytes += c->in.cap - c->in_charged;
    c->in_charged = c->in.cap;
    rdzv_list_del(&c->holding_node);
    if (c->in_charged)
        rdzv_list_add_tail(&t->holding, &c->holding_node);
    while (max && (t->in_bytes > max || t->hs_in_bytes > max / 4)) {
        bool hs = t->in_bytes <= max;
        struct rdzvd_conn *big = input_hog(t, hs);
        char why[160];

        if (!big)
            break;
        snprintf(why, sizeof(why),
                 "holds %zu bytes of requests not served, the most while %s hold more than "
                 "%s--max-input-bytes",
                 big->in_charged, hs ? "connections before their handshake" : "all connections",
                 hs ? "a quarter of " : "");
        conn_shed(big, why);
        /* Its input goes now, not in its close callback: that runs after every connection
         * ready in this turn of the loop was read, and what they read meanwhile would come on
         * top of what no longer counts. No caller holds big's input (c's is parsed already). */
        rdzv_buf_free(&big->in);
    }
    if (c->state == CONN_CLOSING)
        return -1;
    conn_req_deadline(c);
    return 0;
}

bool rdzvd_conn_handshaking(const struct rdzvd_conn *c)
{
    return !rdzv_list_empty(&c->hs_node);
}

/* ---- close ---- */

static void conn_close_cb(uv_handle_t *h)
{
    struct rdzvd_conn *c = (struct rdzvd_conn *)h;
    struct rdzvd_conn_group *g = c->group;

    rdzv_list_del(&c->node);
    rdzv_list_del(&c->group_node);
    c->t->nconns--;
    c->t->nclosing--;
    g->n--;
    rdzv_buf_free(&c->in);
    rdzv_buf_free(&c->out);
    free(c);
    if (g->conn_gone)
        g->conn_gone(g);
}

void rdzvd_conn_close(struct rdzvd_conn *c, const char *reason)
{
    if (c->state == CONN_CLOSING)
        return;
    rdzv_log(c->t->lifecycle_level, "conn %" PRIu64 " (%s): closed: %s", c->id, c->peer, reason);
    conn_set_state(c, CONN_CLOSING);
    c->t->nclosing++;
    rdzvd_conn_handshake_done(c);
    if (c->ops && c->ops->closing)
        c->ops->closing(c);
    rdzv_list_del(&c->flush_node);
    rdzv_list_del(&c->backlog_node);
    rdzv_list_del(&c->req_node);
    /* Its buffers go in the close callback; they no longer count. */
    rdzv_list_del(&c->holding_node);
    c->t->in_bytes -= c->in_charged;
    c->in_charged = 0;
    uv_close((uv_handle_t *)&c->tcp, conn_close_cb);
}

bool rdzvd_conn_closing(const struct rdzvd_conn *c)
{
    return c->state == CONN_CLOSING;
}

/* Close c after handing the kernel the replies to the requests before the bad one (the Redis
 * model), as far as it takes them now: a peer that doesn't read gets no grace. */
static void conn_close_flushing(struct rdzvd_conn *c, const char *why)
{
    if (c->t->hold && c->t->hooks->release)
        c->t->hooks->release(c->t);
    if (c->state != CONN_CLOSING && !c->wr && rdzv_buf_avail(&c->out) > 0) {
        uv_buf_t b = uv_buf_init((char *)rdzv_buf_head(&c->out), (unsigned)rdzv_buf_avail(&c->out));

        (void)uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    }
    rdzvd_conn_close(c, why);
}

void rdzvd_conn_protocol_error(struct rdzvd_conn *c, const char *fmt, ...)
{
    char why[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (c->t->proto_errors)
        (*c->t->proto_errors)++;
    log_warn("conn %" PRIu64 " (%s): %s, closing connection", c->id, c->peer, why);
    conn_close_flushing(c, why);
}

void rdzvd_conn_warn_limited(struct rdzvd_conn *c, struct rdzvd_ratelimit *rl, const char *fmt,
                             ...)
{
    uint64_t suppressed = 0;
    char why[384], more[64] = "";
    va_list ap;

    if (!rdzvd_ratelimit_ok(rl, uv_now(c->t->loop), &suppressed))
        return;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (suppressed)
        snprintf(more, sizeof(more), " (%" PRIu64 " similar lines suppressed)", suppressed);
    log_warn("conn %" PRIu64 " (%s): %s, closing connection%s", c->id, c->peer, why, more);
}

/* THE output cap (--max-outbuf), for every kind of connection, checked before another request
 * is served (conn_parse) and wherever output is queued for writing (rdzvd_conn_flush). Past the cap
 * a session that allows it (TCPStore) is paused: none of its requests are read until its output
 * drains to half the cap (PyTorch clients may pipeline; their requests wait in the kernel). Output
 * that still comes while it is paused (woken WAITs) closes it at twice the cap; a watch
 * notification that would take it past twice the cap is not made, and closes it here
 * (rdzvd_conn_out_room). Other sessions (rdzv peers: small replies, one request at a time) are
 * closed at the cap: the peer is not reading. Returns 0, or -ENOBUFS once c is closing. */
static int conn_enforce_cap(struct rdzvd_conn *c)
{
    uint64_t cap = c->t->max_outbuf;
    size_t q = conn_out_queued(c);
    bool pause = c->ops && c->ops->pause_at_cap;

    if ((q <= cap && !c->overdue) || c->state == CONN_CLOSING)
        return 0;
    if (c->overdue) {
        log_warn("conn %" PRIu64 " (%s): %zu bytes of output queued and %zu more due, over "
                 "--max-outbuf %" PRIu64 " twice: the peer is not reading, closing connection",
                 c->id, c->peer, q, c->overdue, cap);
    } else if (pause && (c->reading || q <= 2 * cap)) {
        if (c->reading) {
            log_debug("conn %" PRIu64 " (%s): %zu reply bytes queued, pausing reads", c->id,
                      c->peer, q);
            uv_read_stop((uv_stream_t *)&c->tcp);
            c->reading = false;
        }
        return 0;
    } else {
        log_warn("conn %" PRIu64 " (%s): %zu bytes of output queued, over --max-outbuf %" PRIu64
                 "%s: the peer is not reading, closing connection",
                 c->id, c->peer, q, cap, pause ? " twice" : "");
    }
    if (c->t->outbuf_closes)
        (*c->t->outbuf_closes)++;
    rdzvd_conn_close(c, "output over --max-outbuf");
    return -ENOBUFS;
}

/* ---- write ---- */

static void conn_process(struct rdzvd_conn *c);

static void conn_close_write_failed(struct rdzvd_conn *c, int r)
{
    char why[96];

    snprintf(why, sizeof(why), "write failed: %s", uv_strerror(r));
    rdzvd_conn_close(c, why);
}

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
        conn_close_write_failed(c, status);
        return;
    }
    rdzvd_conn_flush(c);
    if (c->state != CONN_CLOSING && c->close_after_flush && !c->wr &&
        rdzv_buf_avail(&c->out) == 0) {
        rdzvd_conn_close(c, "closed after its last reply");
        return;
    }
    /* Backpressure released: read again and serve what was held back (unless it waits on the
     * backlog for its next turn). */
    if (c->state != CONN_CLOSING && !c->reading && !c->close_after_flush &&
        rdzv_list_empty(&c->backlog_node) && conn_out_queued(c) <= c->t->max_outbuf / 2)
        conn_process(c);
}

/* Hand queued output to the kernel: try a direct write, queue the rest with uv_write. */
void rdzvd_conn_flush(struct rdzvd_conn *c)
{
    uv_buf_t b;
    int r;

    if (c->state == CONN_CLOSING)
        return;
    if (c->wr || c->overdue) {
        (void)conn_enforce_cap(c);
        return;
    }
    if (c->t->hold) {
        /* The owner flushes these once what holds them is written (journal records first). */
        conn_want_flush(c);
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
        conn_close_write_failed(c, r);
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
        rdzv_buf_free(&c->wr->buf);
        free(c->wr);
        c->wr = NULL;
        conn_close_write_failed(c, r);
        return;
    }
    (void)conn_enforce_cap(c);
}

void rdzvd_transport_flush_pending(struct rdzvd_transport *t)
{
    if (t->hold)
        return; /* the owner calls us again once what holds the output is written */
    while (!rdzv_list_empty(&t->flush_list)) {
        struct rdzvd_conn *c = rdzv_container_of(t->flush_list.next, struct rdzvd_conn, flush_node);

        rdzv_list_del(&c->flush_node);
        rdzvd_conn_flush(c);
    }
}

struct rdzv_buf *rdzvd_conn_out(struct rdzvd_conn *c)
{
    if (c->state == CONN_CLOSING)
        return NULL;
    conn_want_flush(c);
    return &c->out;
}

struct rdzv_buf *rdzvd_conn_out_room(struct rdzvd_conn *c, size_t n)
{
    if (c->state == CONN_CLOSING || c->overdue)
        return NULL;
    conn_want_flush(c);
    /* One notification is always made into an empty queue, as a GET of any value is answered. */
    if (conn_out_queued(c) > 0 && conn_out_queued(c) + n > 2 * c->t->max_outbuf) {
        c->overdue = n ? n : 1;
        return NULL;
    }
    return &c->out;
}

struct rdzv_buf *rdzvd_conn_reply(struct rdzvd_conn *c)
{
    return &c->out;
}

void rdzvd_conn_close_after_flush(struct rdzvd_conn *c)
{
    if (c->state == CONN_CLOSING)
        return;
    c->close_after_flush = true;
    conn_want_flush(c);
}

bool rdzvd_conn_closes_after_flush(const struct rdzvd_conn *c)
{
    return c->close_after_flush;
}

void rdzvd_conn_finish(struct rdzvd_conn *c)
{
    if (c->state == CONN_CLOSING)
        return;
    c->close_after_flush = true;
    rdzv_list_del(&c->backlog_node);
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
    rdzvd_conn_flush(c);
}

/* ---- read ---- */

/* Serve complete requests in p[0..n), one session call each. Returns the bytes consumed, or -1
 * once the connection is closing or finishing. Stops early when output backs up past the cap,
 * or when c used its share of this loop turn (c->over_budget: the caller defers the rest). */
static ssize_t conn_parse(struct rdzvd_conn *c, const uint8_t *p, size_t n)
{
    struct rdzvd_transport *t = c->t;
    uint64_t cap = t->max_outbuf;
    size_t off = 0;

    /* Deadlines armed by what is served now (heartbeats) count from now, not from the start of
     * this turn, however long the connections served before took. */
    uv_update_time(t->loop);
    if (c->turn != t->turn) {
        c->turn = t->turn;
        c->turn_bytes = 0;
        c->turn_frames = 0;
    }
    c->over_budget = false;
    if (t->hooks->may_serve && !t->hooks->may_serve(t, c))
        return -1;
    while (off < n) {
        const struct rdzvd_session_ops *ops = c->ops;
        ssize_t r;

        if (t->paused || c->turn_bytes >= RDZVD_TURN_BYTES || c->turn_frames >= RDZVD_TURN_FRAMES) {
            c->over_budget = true;
            break;
        }
        if (conn_out_queued(c) > cap) {
            /* The peer is not reading its replies: serve nothing more until it does. */
            if (conn_enforce_cap(c) < 0)
                return -1;
            break;
        }
        r = ops->serve(c, p + off, n - off);
        if (r < 0)
            return -1;
        if (r == 0) {
            if (c->ops != ops)
                continue; /* handed to another session: let it look at the same bytes */
            if (t->paused)
                c->over_budget = true; /* the session paused the transport: serve it later */
            break;
        }
        c->need = 0;
        c->need_whole = false;
        c->nserved++;
        off += (size_t)r;
        c->turn_bytes += (size_t)r;
        c->turn_frames++;
    }
    return (ssize_t)off;
}

static void backlog_idle_cb(uv_idle_t *h);

/* c used its share of this turn: stop reading it (the kernel holds what follows, and the peer
 * feels the backpressure) and serve what it already sent in a later turn. */
static void conn_defer(struct rdzvd_conn *c)
{
    struct rdzvd_transport *t = c->t;

    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
    if (rdzv_list_empty(&c->backlog_node))
        rdzv_list_add_tail(&t->backlog, &c->backlog_node);
    if (!uv_is_active((uv_handle_t *)&t->backlog_idle))
        (void)uv_idle_start(&t->backlog_idle, backlog_idle_cb);
}

/* Serve what is buffered in c->in and write the replies. A connection paused for backpressure
 * resumes here once its queued output drained to half the cap, whether it drained at once
 * (uv_try_write took everything) or later (from the write callback). */
static void conn_process(struct rdzvd_conn *c)
{
    for (;;) {
        ssize_t r = 0;

        c->over_budget = false;
        if (rdzv_buf_avail(&c->in) > 0 && rdzv_buf_avail(&c->in) >= c->need)
            r = conn_parse(c, rdzv_buf_head(&c->in), rdzv_buf_avail(&c->in));
        if (r < 0)
            return;
        rdzv_buf_consume(&c->in, (size_t)r);
        if (rdzv_buf_avail(&c->in) == 0)
            rdzv_buf_free(&c->in);
        rdzvd_conn_flush(c);
        if (c->state == CONN_CLOSING || c->close_after_flush)
            break;
        if (c->over_budget) {
            conn_defer(c);
            break;
        }
        /* Only a session paused at the cap waits for its output to drain; the others read on
         * (and are closed at the cap). */
        if (c->reading || (c->ops->pause_at_cap && conn_out_queued(c) > c->t->max_outbuf / 2))
            break;
        if (uv_read_start((uv_stream_t *)&c->tcp, rdzvd_conn_alloc_cb, rdzvd_conn_read_cb) < 0) {
            rdzvd_conn_close(c, "cannot resume reading");
            return;
        }
        c->reading = true;
        log_debug("conn %" PRIu64 " (%s): replies drained, reading again", c->id, c->peer);
    }
    (void)conn_in_account(c);
    rdzvd_transport_flush_pending(c->t);
}

void rdzvd_conn_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct rdzvd_conn *c = (struct rdzvd_conn *)h;
    struct rdzvd_transport *t = c->t;
    size_t chunk = t->scratch_len;

    (void)suggested;
    if (rdzv_buf_avail(&c->in) == 0) {
        *buf = uv_buf_init((char *)t->scratch, (unsigned)t->scratch_len);
        return;
    }
    /* A partial request is pending: read straight after it. Its size is already bounded by
     * the session (it rejects larger lengths as soon as they arrive); the buffer grows by at
     * most what it holds (or the scratch size, from a small start) per read, so that what it
     * holds follows what the peer sent, not what it announced: a first read of a request
     * announced at 4 MiB reserved all of it (8 MiB, rounded up). A request whose whole length
     * is known grows by doubling too, but never past that length: past it, a 4 MiB SET held
     * 8 MiB, all charged to --max-input-bytes. */
    size_t held = rdzv_buf_avail(&c->in);
    bool whole = c->need_whole && c->need > held, capped;

    if (c->need > held && c->need - held > chunk)
        chunk = c->need - held < held ? c->need - held : held > chunk ? held : chunk;
    else if (whole && c->in.len + chunk > c->in.cap)
        chunk = c->need - held; /* the request's last bytes, not the next one's */
    capped = whole && c->in.len + chunk > c->in.cap;
    if ((capped ? rdzv_buf_reserve_upto(&c->in, chunk, c->need)
                : rdzv_buf_reserve(&c->in, chunk)) < 0) {
        *buf = uv_buf_init(NULL, 0); /* libuv reports UV_ENOBUFS */
        return;
    }
    *buf = uv_buf_init((char *)c->in.data + c->in.len, (unsigned)(c->in.cap - c->in.len));
}

void rdzvd_conn_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct rdzvd_conn *c = (struct rdzvd_conn *)s;
    struct rdzvd_transport *t = c->t;
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
    if (buf->base == (char *)t->scratch) {
        /* Fast path: serve straight from the shared buffer, keep only an incomplete tail. */
        r = conn_parse(c, t->scratch, (size_t)nread);
        if (r < 0)
            return;
        if ((size_t)r < (size_t)nread &&
            rdzv_buf_put(&c->in, t->scratch + r, (size_t)nread - (size_t)r) < 0) {
            rdzvd_conn_close(c, "out of memory buffering a request");
            return;
        }
        if (c->over_budget) {
            conn_defer(c);
            rdzvd_conn_flush(c);
            if (conn_in_account(c) == 0)
                rdzvd_transport_flush_pending(t);
        } else if (c->reading) {
            /* Only an incomplete request can be left: nothing to parse until more arrives. */
            rdzvd_conn_flush(c);
            if (conn_in_account(c) == 0)
                rdzvd_transport_flush_pending(t);
        } else {
            conn_process(c);
        }
        return;
    }
    c->in.len += (size_t)nread;
    if (rdzv_buf_avail(&c->in) < c->need) {
        (void)conn_in_account(c);
        return;
    }
    conn_process(c);
}

/* Serve the backlog: each connection on it once, oldest first, with a fresh budget. Those that
 * still have more go back at the tail; the others read again. */
static void backlog_idle_cb(uv_idle_t *h)
{
    struct rdzvd_transport *t = h->data;
    struct rdzv_list mark;

    if (t->paused) {
        (void)uv_idle_stop(h); /* rdzvd_transport_resume starts it again */
        return;
    }
    rdzv_list_add_tail(&t->backlog, &mark);
    while (t->backlog.next != &mark) {
        struct rdzvd_conn *c = rdzv_container_of(t->backlog.next, struct rdzvd_conn, backlog_node);

        rdzv_list_del(&c->backlog_node);
        c->turn = t->turn;
        c->turn_bytes = 0;
        c->turn_frames = 0;
        conn_process(c);
    }
    rdzv_list_del(&mark);
    if (rdzv_list_empty(&t->backlog))
        (void)uv_idle_stop(h);
}

void rdzvd_transport_resume(struct rdzvd_transport *t)
{
    t->paused = false;
    if (!rdzv_list_empty(&t->backlog) && !uv_is_closing((uv_handle_t *)&t->backlog_idle))
        (void)uv_idle_start(&t->backlog_idle, backlog_idle_cb);
}
