/* SPDX-License-Identifier: Apache-2.0 */
/* agent-probe.c: what answers at an address that is not rdzvd (see agent-probe.h). */
#include "agent/session/agent-probe.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-util.h"

struct agent_probe {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t connect_req;
    uv_write_t wr;
    void (*cb)(enum agent_peer k, const uint8_t *p, size_t n, void *ud);
    void *ud;
    int closes_pending;
    bool done;
    size_t len;
    uint8_t in[AGENT_PROBE_READ];
};

static const char probe_request[] = "GET / HTTP/1.0\r\n\r\n";

enum agent_peer agent_peer_classify(const uint8_t *p, size_t n)
{
    if (n == 0)
        return AGENT_PEER_SILENT;
    if (n >= 5 && memcmp(p, "HTTP/", 5) == 0)
        return AGENT_PEER_HTTP;
    return AGENT_PEER_OTHER;
}

void agent_peer_describe(enum agent_peer k, const uint8_t *p, size_t n, char *buf, size_t len)
{
    char quoted[4 * 16 + 1];
    size_t q = 0;

    switch (k) {
    case AGENT_PEER_SILENT:
        snprintf(buf, len, "accepted the connection but answered nothing");
        return;
    case AGENT_PEER_CLOSED:
        snprintf(buf, len, "closed the connection without answering");
        return;
    case AGENT_PEER_HTTP:
        snprintf(buf, len, "answered like an HTTP server");
        return;
    case AGENT_PEER_OTHER:
        break;
    }
    for (size_t i = 0; i < n && i < 16; i++)
        q += (size_t)snprintf(quoted + q, sizeof(quoted) - q,
                              p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\'' ? "%c" : "\\x%02x",
                              p[i]);
    snprintf(buf, len, "answered '%s%s'", quoted, n > 16 ? "..." : "");
}

static void probe_close_cb(uv_handle_t *h)
{
    struct agent_probe *p = h->data;

    if (--p->closes_pending == 0)
        free(p);
}

/* Report k once (unless cancelled), then close. */
static void probe_end(struct agent_probe *p, enum agent_peer k)
{
    if (p->done)
        return;
    p->done = true;
    if (p->cb)
        p->cb(k, p->in, p->len, p->ud);
    p->closes_pending = 2;
    uv_close((uv_handle_t *)&p->tcp, probe_close_cb);
    uv_close((uv_handle_t *)&p->timer, probe_close_cb);
}

static void probe_timer_cb(uv_timer_t *t)
{
    struct agent_probe *p = t->data;

    probe_end(p, agent_peer_classify(p->in, p->len));
}

static void probe_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct agent_probe *p = h->data;

    (void)suggested;
    *buf = uv_buf_init((char *)p->in + p->len, (unsigned)(sizeof(p->in) - p->len));
}

static void probe_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct agent_probe *p = s->data;

    (void)buf;
    if (nread < 0) {
        probe_end(p, p->len ? agent_peer_classify(p->in, p->len) : AGENT_PEER_CLOSED);
        return;
    }
    p->len += (size_t)nread;
    if (p->len >= 5 || p->len == sizeof(p->in))
        probe_end(p, agent_peer_classify(p->in, p->len));
}

static void probe_write_cb(uv_write_t *req, int status)
{
    (void)req;
    (void)status; /* a failed write shows up as a read error */
}

static void probe_connect_cb(uv_connect_t *req, int status)
{
    struct agent_probe *p = req->data;
    uv_buf_t b = uv_buf_init((char *)probe_request, sizeof(probe_request) - 1);

    uv_os_fd_t fd;

    if (p->done)
        return;
    /* A connection to itself would read its own request back as an HTTP server's. */
    if (status == 0 && uv_fileno((uv_handle_t *)&p->tcp, &fd) == 0 && rdzv_fd_self_connected(fd))
        status = UV_ECONNREFUSED;
    if (status < 0 || uv_write(&p->wr, (uv_stream_t *)&p->tcp, &b, 1, probe_write_cb) < 0 ||
        uv_read_start((uv_stream_t *)&p->tcp, probe_alloc_cb, probe_read_cb) < 0)
        probe_end(p, AGENT_PEER_CLOSED);
}

int agent_probe_start(uv_loop_t *loop, const struct sockaddr *addr,
                      void (*cb)(enum agent_peer k, const uint8_t *p, size_t n, void *ud),
                      void *ud, struct agent_probe **ret)
{
    struct agent_probe *p = calloc(1, sizeof(*p));
    int r;

    if (!p)
        return -ENOMEM;
    p->cb = cb;
    p->ud = ud;
    r = uv_timer_init(loop, &p->timer);
    if (r < 0) {
        free(p);
        return r;
    }
    p->timer.data = p;
    r = uv_tcp_init(loop, &p->tcp);
    if (r < 0) {
        p->closes_pending = 1;
        uv_close((uv_handle_t *)&p->timer, probe_close_cb);
        return r;
    }
    p->tcp.data = p->connect_req.data = p;
    r = uv_tcp_connect(&p->connect_req, &p->tcp, addr, probe_connect_cb);
    if (r == 0)
        r = uv_timer_start(&p->timer, probe_timer_cb, AGENT_PROBE_MS, 0);
    if (r < 0) {
        p->cb = NULL;
        probe_end(p, AGENT_PEER_CLOSED);
        return r;
    }
    *ret = p;
    return 0;
}

void agent_probe_cancel(struct agent_probe *p)
{
    p->cb = NULL;
    probe_end(p, AGENT_PEER_CLOSED);
}
