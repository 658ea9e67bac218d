/* SPDX-License-Identifier: Apache-2.0 */
/* agent-preflight.c: the link check's listener and probe (agent-preflight.h). */
#include "agent/preflight/agent-preflight.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-preflight.h"

#define READ_BUF (64u << 10)
#define REPORT_LEN 16
/* The sender's bound: the receiver counts its bytes (cap_of) after its first read. */
#define SEND_SLACK (4 * (uint64_t)AGENT_PF_CHUNK)

/* What both sides send: zeros (the link, not the data, is measured). Read only. */
static char zeros[AGENT_PF_CHUNK];

/* Up to two writes in flight, a chunk each, up to max bytes. */
struct pump {
    uv_write_t wr[2];
    bool busy[2];
    uint64_t sent, max;
};

/* The receiving side's measure of one way: up to cap bytes. */
struct meter {
    bool started;
    uint64_t t0_ns, bytes, cap;
};

/* The bytes a way measures: 'D' and 'U' AGENT_PF_BYTES, a full probe's 'd' and 'u' more. */
static uint64_t cap_of(char dir)
{
    return dir == 'd' || dir == 'u' ? AGENT_PF_FULL_BYTES : AGENT_PF_BYTES;
}

/* 'U' or 'u': the probe sends, the listener measures. */
static bool is_up(char dir)
{
    return dir == 'U' || dir == 'u';
}

static bool token_equal(const uint8_t *a, const uint8_t *b)
{
    uint8_t d = 0;

    for (size_t i = 0; i < AGENT_PF_TOKEN_LEN; i++)
        d |= (uint8_t)(a[i] ^ b[i]);
    return d == 0;
}

/* Data arrived: the first read starts the clock (its bytes came before it), the others count.
 * Returns whether the measure is whole by bytes. */
static bool meter_add(struct meter *m, size_t n)
{
    if (!m->started) {
        m->started = true;
        m->t0_ns = uv_hrtime();
        return false;
    }
    m->bytes += n;
    return m->bytes >= m->cap;
}

static uint64_t meter_us(const struct meter *m)
{
    uint64_t us = (uv_hrtime() - m->t0_ns) / 1000;

    return us ? us : 1;
}

/* Bytes per microsecond: MB/s. */
static double mbps(uint64_t bytes, uint64_t us)
{
    return (double)bytes / (double)(us ? us : 1);
}

/* Start writes until two are in flight or max is queued. */
static int pump_fill(struct pump *p, uv_stream_t *s, uv_write_cb cb)
{
    for (int i = 0; i < 2 && p->sent < p->max; i++) {
        uv_buf_t b = uv_buf_init(zeros, AGENT_PF_CHUNK);
        int r;

        if (p->busy[i])
            continue;
        if ((r = uv_write(&p->wr[i], s, &b, 1, cb)) < 0)
            return r;
        p->busy[i] = true;
        p->sent += AGENT_PF_CHUNK;
    }
    return 0;
}

static void pump_done(struct pump *p, uv_write_t *w)
{
    p->busy[w == &p->wr[1]] = false;
}

/* ---- The listener ---- */

struct pf_conn {
    struct agent_pf_server *srv;
    uv_tcp_t tcp;
    uv_timer_t timer;
    unsigned open; /* handles not yet closed */
    bool closing;
    uint64_t seq; /* in the order accepted */
    uint8_t hello[AGENT_PF_HELLO_LEN];
    size_t have;
    char dir; /* 0 until the hello is whole: 'D', 'U', 'd' or 'u' */
    struct meter m;
    struct pump pump;
    bool reported;
    uint64_t hello_ms; /* the loop's time at the hello: its life ends AGENT_PF_BOUND_MS later */
    uv_write_t report_wr;
    uint8_t report[REPORT_LEN];
    char buf[READ_BUF];
};

struct agent_pf_server {
    uv_loop_t *loop;
    uv_tcp_t tcp;
    uint8_t token[AGENT_PF_TOKEN_LEN];
    struct pf_conn *conns[AGENT_PF_CONNS_MAX];
    bool closing;
    uint64_t seq;
    unsigned open; /* its own handle and its connections */
};

static void server_release(struct agent_pf_server *s)
{
    if (--s->open == 0)
        free(s);
}

static void conn_closed(uv_handle_t *h)
{
    struct pf_conn *c = h->data;

    if (--c->open)
        return;
    server_release(c->srv);
    free(c);
}

static void conn_close(struct pf_conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    for (unsigned i = 0; i < AGENT_PF_CONNS_MAX; i++)
        if (c->srv->conns[i] == c)
            c->srv->conns[i] = NULL;
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
    uv_close((uv_handle_t *)&c->timer, conn_closed);
}

static void conn_timeout(uv_timer_t *t)
{
    conn_close(t->data);
}

static void conn_wrote(uv_write_t *w, int status)
{
    struct pf_conn *c = w->data;

    pump_done(&c->pump, w);
    if (c->closing)
        return;
    if (status < 0 || pump_fill(&c->pump, (uv_stream_t *)&c->tcp, conn_wrote) < 0)
        conn_close(c);
}

static void report_wrote(uv_write_t *w, int status)
{
    struct pf_conn *c = w->data;

    if (status < 0 && !c->closing)
        conn_close(c);
}

/* The 'U' way's figure, back to the probe; then the connection waits for the probe to close. */
static void conn_report(struct pf_conn *c)
{
    uv_buf_t b = uv_buf_init((char *)c->report, REPORT_LEN);
    uint64_t now = uv_now(c->srv->loop), end = c->hello_ms + AGENT_PF_BOUND_MS;

    c->reported = true;
    rdzv_set_u64(c->report, c->m.bytes);
    rdzv_set_u64(c->report + 8, meter_us(&c->m));
    c->report_wr.data = c;
    if (now >= end || uv_write(&c->report_wr, (uv_stream_t *)&c->tcp, &b, 1, report_wrote) < 0)
        conn_close(c);
    else
        uv_timer_start(&c->timer, conn_timeout, end - now, 0);
}

static void window_end(uv_timer_t *t)
{
    struct pf_conn *c = t->data;

    if (!c->reported)
        conn_report(c);
}

/* Data after the hello: counted on a 'U' connection, not expected on a 'D' one. */
static void conn_data(struct pf_conn *c, size_t n)
{
    if (!is_up(c->dir) || c->reported)
        return;
    if (!c->m.started) {
        meter_add(&c->m, n);
        uv_timer_start(&c->timer, window_end, AGENT_PF_WINDOW_MS, 0);
    } else if (meter_add(&c->m, n)) {
        conn_report(c);
    }
}

/* The hello's bytes: a wrong one closes the connection; a right one starts its way. */
static void conn_hello(struct pf_conn *c, const char *p, size_t n)
{
    size_t take = AGENT_PF_HELLO_LEN - c->have;

    if (take > n)
        take = n;
    memcpy(c->hello + c->have, p, take);
    c->have += take;
    if (c->have < AGENT_PF_HELLO_LEN)
        return;
    c->dir = (char)c->hello[AGENT_PF_HELLO_LEN - 1];
    if (memcmp(c->hello, AGENT_PF_MAGIC, 8) != 0 || !token_equal(c->hello + 8, c->srv->token) ||
        c->dir == 0 || !strchr("DUdu", c->dir)) {
        conn_close(c);
        return;
    }
    c->hello_ms = uv_now(c->srv->loop);
    c->m.cap = cap_of(c->dir);
    c->pump.max = c->m.cap + SEND_SLACK;
    uv_timer_start(&c->timer, conn_timeout, AGENT_PF_BOUND_MS, 0);
    if (!is_up(c->dir)) {
        if (pump_fill(&c->pump, (uv_stream_t *)&c->tcp, conn_wrote) < 0)
            conn_close(c);
    } else if (n > take) {
        conn_data(c, n - take);
    }
}

static void conn_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    struct pf_conn *c = h->data;

    (void)hint;
    *b = uv_buf_init(c->buf, sizeof(c->buf));
}

static void conn_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    struct pf_conn *c = st->data;

    if (c->closing || nread == 0)
        return;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (!c->dir)
        conn_hello(c, b->base, (size_t)nread);
    else
        conn_data(c, (size_t)nread);
}

/* A free slot; when there is none, the oldest connection still without its hello is closed
 * for the new one (a stranger's connections cannot keep a probe out). AGENT_PF_CONNS_MAX: all
 * are probes past their hello. */
static unsigned free_slot(struct agent_pf_server *s)
{
    unsigned oldest = AGENT_PF_CONNS_MAX;

    for (unsigned i = 0; i < AGENT_PF_CONNS_MAX; i++) {
        if (!s->conns[i])
            return i;
        if (!s->conns[i]->dir &&
            (oldest == AGENT_PF_CONNS_MAX || s->conns[i]->seq < s->conns[oldest]->seq))
            oldest = i;
    }
    if (oldest < AGENT_PF_CONNS_MAX)
        conn_close(s->conns[oldest]);
    return oldest;
}

static void server_accept(uv_stream_t *st, int status)
{
    struct agent_pf_server *s = st->data;
    struct pf_conn *c;
    unsigned slot;

    if (status < 0 || s->closing)
        return;
    slot = free_slot(s);
    c = slot < AGENT_PF_CONNS_MAX ? calloc(1, sizeof(*c)) : NULL;
    if (!c) { /* full (or out of memory): accept and close at once */
        uv_tcp_t *t = malloc(sizeof(*t));

        if (!t || uv_tcp_init(s->loop, t) < 0) {
            free(t);
            return;
        }
        uv_accept(st, (uv_stream_t *)t);
        uv_close((uv_handle_t *)t, (uv_close_cb)free);
        return;
    }
    c->srv = s;
    c->seq = ++s->seq;
    c->tcp.data = c->timer.data = c;
    c->pump.wr[0].data = c->pump.wr[1].data = c;
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->timer);
    c->open = 2;
    s->open++;
    s->conns[slot] = c;
    if (uv_accept(st, (uv_stream_t *)&c->tcp) < 0 ||
        uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_read) < 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_timer_start(&c->timer, conn_timeout, AGENT_PF_HELLO_MS, 0);
}

static void server_closed(uv_handle_t *h)
{
    server_release(h->data);
}

int agent_pf_server_start(uv_loop_t *loop, const struct sockaddr *addr,
                          const uint8_t token[AGENT_PF_TOKEN_LEN], struct agent_pf_server **ret)
{
    struct agent_pf_server *s = calloc(1, sizeof(*s));
    int r;

    if (!s)
        return -ENOMEM;
    s->loop = loop;
    memcpy(s->token, token, AGENT_PF_TOKEN_LEN);
    if ((r = uv_tcp_init(loop, &s->tcp)) < 0)
        goto out_free;
    s->tcp.data = s;
    s->open = 1;
    if ((r = uv_tcp_bind(&s->tcp, addr, 0)) < 0 ||
        (r = uv_listen((uv_stream_t *)&s->tcp, AGENT_PF_CONNS_MAX, server_accept)) < 0)
        goto out_close;
    *ret = s;
    return 0;
out_close:
    uv_close((uv_handle_t *)&s->tcp, server_closed);
    return r;
out_free:
    free(s);
    return r;
}

int agent_pf_server_port(struct agent_pf_server *s)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss), r;

    if ((r = uv_tcp_getsockname(&s->tcp, (struct sockaddr *)&ss, &len)) < 0)
        return r;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

void agent_pf_server_close(struct agent_pf_server *s)
{
    s->closing = true;
    for (unsigned i = 0; i < AGENT_PF_CONNS_MAX; i++)
        if (s->conns[i])
            conn_close(s->conns[i]);
    uv_close((uv_handle_t *)&s->tcp, server_closed);
}

/* ---- The probe: 'D' on one connection, then 'U' on another ('d', 'u': full) ---- */

struct agent_pf_probe {
    uv_loop_t *loop;
    struct sockaddr_storage peer;
    uint8_t hello[AGENT_PF_HELLO_LEN];
    unsigned bound_ms;
    void (*cb)(const struct agent_pf_result *r, void *ud);
    void *ud;
    struct agent_pf_result res;
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t connect;
    uv_write_t hello_wr;
    uint64_t deadline; /* the loop's time when the way being measured ends: its bound */
    bool connecting;   /* the current connection's connect is under way */
    bool refused;      /* its connect failed (refused): the next after AGENT_PF_RETRY_MS */
    bool done;         /* the callback fired, or the probe was cancelled */
    bool tcp_open;     /* the current connection's handle */
    unsigned open;     /* handles not yet closed */
    char dir;          /* the way being measured: 'D' then 'U' ('d' then 'u': full) */
    struct meter m;
    struct pump pump;
    uint8_t report[REPORT_LEN];
    size_t have;
    char buf[READ_BUF];
};

static void probe_way(struct agent_pf_probe *p);
static void probe_attempt(struct agent_pf_probe *p);

static void probe_retry_fired(uv_timer_t *t)
{
    probe_attempt(t->data);
}

static void probe_release(uv_handle_t *h)
{
    struct agent_pf_probe *p = h->data;

    if (h == (uv_handle_t *)&p->tcp)
        p->tcp_open = false;
    if (--p->open == 0)
        free(p);
}

static void probe_finish(struct agent_pf_probe *p, bool fire)
{
    if (p->done)
        return;
    p->done = true;
    if (fire)
        p->cb(&p->res, p->ud);
    if (p->tcp_open && !uv_is_closing((uv_handle_t *)&p->tcp))
        uv_close((uv_handle_t *)&p->tcp, probe_release);
    uv_close((uv_handle_t *)&p->timer, probe_release);
}

/* The 'D' connection is closed: the 'U' way on a new one. */
static void probe_next(uv_handle_t *h)
{
    struct agent_pf_probe *p = h->data;

    if (p->done) {
        probe_release(h);
        return;
    }
    p->tcp_open = false;
    p->open--;
    probe_way(p);
}

/* One way is measured (mbps >= 0) or unreachable: record it, go on or finish. */
static void probe_way_done(struct agent_pf_probe *p, double figure)
{
    if (!is_up(p->dir)) {
        p->res.down = figure;
        if (figure < 0) { /* not even the first way: the other is not tried */
            probe_finish(p, true);
            return;
        }
        p->dir = p->dir == 'd' ? 'u' : 'U';
        uv_timer_stop(&p->timer);
        uv_close((uv_handle_t *)&p->tcp, probe_next);
        return;
    }
    p->res.up = figure;
    probe_finish(p, true);
}

/* The failed connection is closed: the next attempt, at once or after AGENT_PF_RETRY_MS. */
static void probe_retry_closed(uv_handle_t *h)
{
    struct agent_pf_probe *p = h->data;
    uint64_t now, wait;

    if (p->done) {
        probe_release(h);
        return;
    }
    p->tcp_open = false;
    p->open--;
    now = uv_now(p->loop);
    wait = p->refused ? AGENT_PF_RETRY_MS : 0;
    if (now + wait >= p->deadline)
        probe_way_done(p, RDZV_PF_UNREACHABLE);
    else if (wait)
        uv_timer_start(&p->timer, probe_retry_fired, wait, 0);
    else
        probe_attempt(p);
}

/* The connect failed (refused: nobody listens yet) or took its attempt's time: a new
 * connection, while the way's bound allows (a busy peer may accept late). */
static void probe_retry(struct agent_pf_probe *p, bool refused)
{
    p->connecting = false;
    p->refused = refused;
    uv_timer_stop(&p->timer);
    uv_close((uv_handle_t *)&p->tcp, probe_retry_closed);
}

static void probe_timeout(uv_timer_t *t)
{
    struct agent_pf_probe *p = t->data;

    if (p->connecting && uv_now(p->loop) < p->deadline)
        probe_retry(p, false);
    else if (!is_up(p->dir) && p->m.started) /* the window's end */
        probe_way_done(p, mbps(p->m.bytes, meter_us(&p->m)));
    else
        probe_way_done(p, RDZV_PF_UNREACHABLE);
}

static void probe_wrote(uv_write_t *w, int status)
{
    struct agent_pf_probe *p = w->data;

    if (w != &p->hello_wr)
        pump_done(&p->pump, w);
    if (p->done || w->handle != (uv_stream_t *)&p->tcp || uv_is_closing((uv_handle_t *)&p->tcp))
        return;
    if (status < 0)
        probe_way_done(p, RDZV_PF_UNREACHABLE);
    else if (is_up(p->dir) && pump_fill(&p->pump, (uv_stream_t *)&p->tcp, probe_wrote) < 0)
        probe_way_done(p, RDZV_PF_UNREACHABLE);
}

static void probe_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    struct agent_pf_probe *p = h->data;

    (void)hint;
    *b = uv_buf_init(p->buf, sizeof(p->buf));
}

/* 'U': the listener's report, 16 bytes, then nothing. */
static void probe_report(struct agent_pf_probe *p, const char *d, size_t n)
{
    if (n > REPORT_LEN - p->have) {
        probe_way_done(p, RDZV_PF_UNREACHABLE);
        return;
    }
    memcpy(p->report + p->have, d, n);
    p->have += n;
    if (p->have < REPORT_LEN)
        return;
    uint64_t bytes = rdzv_get_u64(p->report), us = rdzv_get_u64(p->report + 8);
    double figure = mbps(bytes, us);

    /* The peer's claim: no more bytes than this probe sent, no figure past the wire's bound. */
    if (bytes > p->pump.sent || !(figure <= RDZV_PF_MBPS_MAX)) {
        log_warn("network pre-flight: the peer's listener claims %" PRIu64 " bytes in %" PRIu64
                 " us (this probe sent %" PRIu64 "): the way counts as unreachable",
                 bytes, us, p->pump.sent);
        figure = RDZV_PF_UNREACHABLE;
    }
    probe_way_done(p, figure);
}

static void probe_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    struct agent_pf_probe *p = st->data;

    if (p->done || uv_is_closing((uv_handle_t *)st) || nread == 0)
        return;
    if (nread < 0) {
        probe_way_done(p, RDZV_PF_UNREACHABLE);
        return;
    }
    if (is_up(p->dir)) {
        probe_report(p, b->base, (size_t)nread);
        return;
    }
    if (!p->m.started) {
        meter_add(&p->m, (size_t)nread);
        uv_timer_start(&p->timer, probe_timeout, AGENT_PF_WINDOW_MS, 0);
    } else if (meter_add(&p->m, (size_t)nread)) {
        probe_way_done(p, mbps(p->m.bytes, meter_us(&p->m)));
    }
}

static void probe_connected(uv_connect_t *req, int status)
{
    struct agent_pf_probe *p = req->data;
    uv_buf_t b = uv_buf_init((char *)p->hello, AGENT_PF_HELLO_LEN);

    if (p->done || uv_is_closing((uv_handle_t *)&p->tcp))
        return;
    if (status < 0) {
        probe_retry(p, true);
        return;
    }
    p->connecting = false;
    if (uv_now(p->loop) >= p->deadline) { /* connected as its bound ended */
        probe_way_done(p, RDZV_PF_UNREACHABLE);
        return;
    }
    uv_timer_start(&p->timer, probe_timeout, p->deadline - uv_now(p->loop), 0);
    p->hello[AGENT_PF_HELLO_LEN - 1] = (uint8_t)p->dir;
    if (uv_write(&p->hello_wr, (uv_stream_t *)&p->tcp, &b, 1, probe_wrote) < 0 ||
        uv_read_start((uv_stream_t *)&p->tcp, probe_alloc, probe_read) < 0 ||
        (is_up(p->dir) && pump_fill(&p->pump, (uv_stream_t *)&p->tcp, probe_wrote) < 0)) {
        probe_way_done(p, RDZV_PF_UNREACHABLE);
        return;
    }
    uv_tcp_nodelay(&p->tcp, 1);
}

/* The way p->dir: connected within bound_ms, measured within what is left of it. */
static void probe_way(struct agent_pf_probe *p)
{
    p->deadline = uv_now(p->loop) + p->bound_ms;
    probe_attempt(p);
}

/* One connection for the way p->dir: its connect within AGENT_PF_ATTEMPT_MS, or a new one. */
static void probe_attempt(struct agent_pf_probe *p)
{
    uint64_t left, now = uv_now(p->loop);

    memset(&p->m, 0, sizeof(p->m));
    memset(&p->pump, 0, sizeof(p->pump));
    p->m.cap = cap_of(p->dir);
    p->pump.max = p->m.cap + SEND_SLACK;
    p->pump.wr[0].data = p->pump.wr[1].data = p->hello_wr.data = p;
    p->connect.data = p;
    p->have = 0;
    if (now >= p->deadline || uv_tcp_init(p->loop, &p->tcp) < 0) {
        probe_way_done(p, RDZV_PF_UNREACHABLE);
        return;
    }
    left = p->deadline - now;
    p->tcp.data = p;
    p->tcp_open = true;
    p->open++;
    p->connecting = true;
    uv_timer_start(&p->timer, probe_timeout,
                   left < AGENT_PF_ATTEMPT_MS ? left : AGENT_PF_ATTEMPT_MS, 0);
    if (uv_tcp_connect(&p->connect, &p->tcp, (struct sockaddr *)&p->peer, probe_connected) < 0)
        probe_retry(p, true);
}

int agent_pf_probe_start(uv_loop_t *loop, const struct sockaddr *peer,
                         const uint8_t token[AGENT_PF_TOKEN_LEN], unsigned bound_ms, bool full,
                         void (*cb)(const struct agent_pf_result *r, void *ud), void *ud,
                         struct agent_pf_probe **ret)
{
    struct agent_pf_probe *p;
    int r;

    if (peer->sa_family != AF_INET && peer->sa_family != AF_INET6)
        return -EAFNOSUPPORT;
    if (!(p = calloc(1, sizeof(*p))))
        return -ENOMEM;
    p->loop = loop;
    memcpy(&p->peer, peer,
           peer->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
    memcpy(p->hello, AGENT_PF_MAGIC, 8);
    memcpy(p->hello + 8, token, AGENT_PF_TOKEN_LEN);
    p->bound_ms = bound_ms ? bound_ms : AGENT_PF_BOUND_MS;
    p->cb = cb;
    p->ud = ud;
    p->res.up = p->res.down = RDZV_PF_UNREACHABLE;
    p->dir = full ? 'd' : 'D';
    if ((r = uv_timer_init(loop, &p->timer)) < 0) {
        free(p);
        return r;
    }
    p->timer.data = p;
    p->open = 1;
    *ret = p;
    probe_way(p);
    return 0;
}

void agent_pf_probe_cancel(struct agent_pf_probe *p)
{
    probe_finish(p, false);
}
