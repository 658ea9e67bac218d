/* SPDX-License-Identifier: Apache-2.0 */
/* agent-relay.c: the workers' output relay: one pipe per worker stream, split into lines, each
 * line prefixed "[rank<N>]: " and written to the agent's stdout/stderr (queued and polled when
 * that fd can block, so a stalled reader stalls the workers and never the loop), unless the
 * stream is redirected or its rank filtered out (worker_out.console), and teed to the worker's
 * log file when it has one (--log-dir, or a redirected stream: agent-workers.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/rdzv-list.h"
#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "agent/group/agent-workers-int.h"

#define SINK_HIGH (1u << 20)     /* queued relay bytes that pause reading from the workers */
#define SINK_LOW (256u << 10)    /* ... and that resume it */
#define SINK_KEEP_CAP (4u << 20) /* an emptied queue larger than this gives its memory back */

/* Write all of p, waiting in poll() if fd happens to be non-blocking. Returns 0 or -errno. */
int agent_relay_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;

    while (n > 0) {
        ssize_t k = write(fd, c, n);

        if (k < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                struct pollfd pfd = {.fd = fd, .events = POLLOUT};

                (void)poll(&pfd, 1, -1);
                continue;
            }
            return -errno;
        }
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* ---- sinks: relayed lines to the agent's stdout / stderr ---- */

static void sink_fail(struct out_sink *s, int r)
{
    log_warn_errno(r, "cannot write worker output to fd %d, dropping it from now on", s->fd);
    s->failed = true;
    rdzv_buf_free(&s->q);
}

static void sink_poll_cb(uv_poll_t *p, int status, int events);

/* Write what the socket or pipe takes now; poll for the rest. */
static void sink_flush(struct out_sink *s)
{
    bool want;
    int r;

    while (!s->failed && rdzv_buf_avail(&s->q) > 0) {
        ssize_t n;

        if (s->is_socket)
            n = send(s->fd, rdzv_buf_head(&s->q), rdzv_buf_avail(&s->q),
                     MSG_DONTWAIT | MSG_NOSIGNAL);
        else
            n = write(s->fd, rdzv_buf_head(&s->q), rdzv_buf_avail(&s->q));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                sink_fail(s, -errno);
            break;
        }
        rdzv_buf_consume(&s->q, (size_t)n);
    }
    if (rdzv_buf_avail(&s->q) == 0 && s->q.cap > SINK_KEEP_CAP)
        rdzv_buf_free(&s->q);
    want = !s->failed && rdzv_buf_avail(&s->q) > 0;
    if (want && !s->polling) {
        r = uv_poll_start(&s->poll, UV_WRITABLE, sink_poll_cb);
        if (r < 0)
            sink_fail(s, r);
        else
            s->polling = true;
    } else if (!want && s->polling) {
        (void)uv_poll_stop(&s->poll);
        s->polling = false;
    }
    agent_relay_update_pause(s->g);
}

bool agent_relay_queued(const struct agent_group *g)
{
    for (unsigned i = 0; i < _OUT_MAX; i++)
        if (rdzv_buf_avail(&g->sink[i].q) > 0)
            return true;
    return false;
}

static void sink_poll_cb(uv_poll_t *p, int status, int events)
{
    struct out_sink *s = rdzv_container_of(p, struct out_sink, poll);

    if (status < 0)
        sink_fail(s, status);
    sink_flush(s);
    /* The end of a start may have been waiting for this queue to empty. */
    if (!agent_relay_queued(s->g))
        agent_group_settle(s->g);
}

/* At free: write what is still queued, blocking until the deadline (monotonic ms) at most. A
 * synchronous end keeps free() from leaving handles open that a caller's uv_walk() might close. */
static void sink_flush_sync(struct out_sink *s, uint64_t deadline)
{
    while (!s->failed && rdzv_buf_avail(&s->q) > 0) {
        struct pollfd pfd = {.fd = s->fd, .events = POLLOUT};
        uint64_t now = rdzv_now_ms();

        if (now >= deadline) {
            log_warn("dropping %zu bytes of worker output that fd %d did not take in %d ms",
                     rdzv_buf_avail(&s->q), s->fd, AGENT_FLUSH_MS);
            break;
        }
        if (poll(&pfd, 1, (int)(deadline - now)) < 0 && errno != EINTR)
            break;
        sink_flush(s);
    }
}

/* Relay one line: prefix, bytes, newline. */
static void sink_line(struct out_sink *s, const char *prefix, size_t plen, const char *p, size_t n)
{
    struct rdzv_buf *b = s->queued ? &s->q : &s->g->scratch;
    int r;

    if (s->failed)
        return;
    if (!s->queued)
        b->len = b->off = 0;
    r = rdzv_buf_reserve(b, plen + n + 1);
    if (r < 0) {
        log_warn_errno(r, "relaying a worker line of %zu bytes, dropping it", n);
        return;
    }
    (void)rdzv_buf_put(b, prefix, plen);
    (void)rdzv_buf_put(b, p, n);
    (void)rdzv_buf_put_u8(b, '\n');
    if (!s->queued) {
        /* One write per line: concurrent writers interleave by line, not by fragment. */
        r = agent_relay_write_all(s->fd, rdzv_buf_head(b), rdzv_buf_avail(b));
        if (r < 0)
            sink_fail(s, r);
        return;
    }
    if (!s->polling)
        sink_flush(s);
    else if (rdzv_buf_avail(&s->q) > SINK_HIGH)
        agent_relay_update_pause(s->g);
}

/* Pick how to write fd without ever blocking the loop on it; falls back to blocking writes for
 * regular files (they don't stall) and for anything we cannot open or poll privately. Setting
 * O_NONBLOCK on fd itself is not an option: the open file description is shared with stdio, the
 * logger and the agent's parent. */
static void sink_setup(struct agent_group *g, struct out_sink *s, int fd)
{
    char path[64];
    struct stat st;
    int flags = -1, nfd = -1, r;

    s->g = g;
    s->fd = fd;
    if (fstat(fd, &st) < 0 || S_ISREG(st.st_mode) || S_ISBLK(st.st_mode) || S_ISDIR(st.st_mode))
        return;
    if (S_ISSOCK(st.st_mode)) {
        flags = fcntl(fd, F_GETFL);
        if (flags < 0)
            return;
        nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        s->is_socket = true;
    } else {
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        nfd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    }
    if (nfd < 0)
        goto out_blocking;
    r = uv_poll_init(g->cfg.loop, &s->poll, nfd);
    if (r < 0)
        goto out_blocking;
    /* uv_poll_init set O_NONBLOCK on the shared socket description; send() doesn't need it. */
    if (s->is_socket)
        (void)fcntl(nfd, F_SETFL, flags);
    s->poll.data = g;
    g->handles++;
    s->poll_open = true;
    s->fd = nfd;
    s->own_fd = true;
    s->queued = true;
    log_debug("workers: relaying to fd %d through private fd %d", fd, nfd);
    return;

out_blocking:
    if (nfd >= 0)
        close(nfd);
    s->is_socket = false;
    log_debug("workers: relaying to fd %d with blocking writes", fd);
}

/* ---- worker output pipes ---- */

/* ---- the drain of output that descendants keep open after the last exit ---- */

static void drain_timer_cb(uv_timer_t *t)
{
    struct agent_group *g = t->data;

    /* A stalled reader of our own output is not the workers' fault: wait for it, unless we are
     * stopping (then the deadline holds). */
    if (g->paused && g->state != GROUP_STOPPING) {
        (void)uv_timer_again(t);
        return;
    }
    for (unsigned i = 0; i < g->cfg.nproc; i++)
        for (unsigned k = 0; k < _OUT_MAX; k++) {
            struct worker_out *o = &g->workers[i].out[k];

            /* a worker started by agent_group_start_ranks() meanwhile keeps its pipes */
            if (!o->open || g->workers[i].running)
                continue;
            if (g->paused)
                log_warn("worker rank %u: stopping, dropping its %s that nobody reads from "
                         "the agent",
                         g->workers[i].rank, agent_out_name(k));
            else
                log_warn("worker rank %u exited but its %s is still open after %d ms of "
                         "silence (a child process holds it), closing it",
                         g->workers[i].rank, agent_out_name(k), AGENT_DRAIN_MS);
            agent_relay_out_close(o);
        }
}

void agent_relay_drain_start(struct agent_group *g)
{
    /* AGENT_DRAIN_MS from now, not from the start of this loop iteration. */
    uv_update_time(g->cfg.loop);
    (void)uv_timer_start(&g->drain_timer, drain_timer_cb, AGENT_DRAIN_MS, AGENT_DRAIN_MS);
}

static void drain_touch(struct agent_group *g)
{
    /* After the last exit the drain deadline counts silence, not total time; when stopping it is
     * firm, or a descendant outside the process groups could keep the stop from completing. */
    if (g->state == GROUP_ACTIVE && g->running == 0 && uv_is_active((uv_handle_t *)&g->drain_timer))
        (void)uv_timer_again(&g->drain_timer);
}

static void worker_out_read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void worker_out_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct worker_out *o = rdzv_container_of(h, struct worker_out, pipe);

    /* worker_out_lines() never leaves the buffer full, so there is always room. No memory: a
     * zero-length buffer, which libuv reports to the read callback as UV_ENOBUFS. */
    if (!o->line)
        o->line = malloc(AGENT_MAX_LINE);
    buf->base = o->line ? o->line + o->len : NULL;
    buf->len = o->line ? AGENT_MAX_LINE - o->len : 0;
}

/* A non-empty stderr line of w's, blanks around it trimmed, as w->error (the error it died of,
 * when it is its last). */
static void keep_error(struct agent_worker *w, const char *p, size_t n)
{
    while (n > 0 && (p[n - 1] == ' ' || (unsigned char)p[n - 1] < 0x20 || p[n - 1] == 0x7f))
        n--;
    while (n > 0 && (*p == ' ' || (unsigned char)*p < 0x20 || *p == 0x7f)) {
        p++;
        n--;
    }
    if (n == 0)
        return;
    if (n > AGENT_ERROR_MAX)
        n = AGENT_ERROR_MAX;
    for (size_t i = 0; i < n; i++)
        w->error[i] = (unsigned char)p[i] < 0x20 || p[i] == 0x7f ? ' ' : p[i];
    w->error[n] = '\0';
    rdzv_utf8_trim(w->error);
}

void agent_relay_line(struct worker_out *o, const char *p, size_t n)
{
    struct agent_worker *w = o->w;

    if (o->which == OUT_STDERR)
        keep_error(w, p, n);
    if (o->console)
        sink_line(&w->g->sink[o->which], w->prefix, w->prefix_len, p, n);
}

/* ---- a worker's exit, and the end of its stderr after it ---- */

void agent_relay_exit(struct agent_worker *w, int64_t status, int sig)
{
    struct agent_group *g = w->g;

    w->exit_status = status;
    w->exit_sig = sig;
    w->exited_open = w->out[OUT_STDERR].open; /* on_output_closed follows */
    if (g->state != GROUP_FREEING && g->cfg.on_exit)
        g->cfg.on_exit(g, w->local_rank, status, sig, g->cfg.ud);
}

/* Relay every complete line in line[0..len) and keep the tail; scan_from bytes are known to hold
 * no newline. A full buffer without a newline is relayed as one (split) line. */
static void worker_out_lines(struct worker_out *o, size_t scan_from)
{
    char *start = o->line, *end = o->line + o->len, *p = o->line + scan_from, *nl;
    size_t rest;

    while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        agent_relay_line(o, start, (size_t)(nl - start));
        start = p = nl + 1;
    }
    rest = (size_t)(end - start);
    if (rest == AGENT_MAX_LINE) {
        agent_relay_line(o, start, rest);
        rest = 0;
    } else if (start != o->line && rest > 0) {
        memmove(o->line, start, rest);
    }
    o->len = rest;
}

/* Relay an unfinished last line, close the log file and the pipe. */
void agent_relay_out_close(struct worker_out *o)
{
    struct agent_group *g = o->w->g;

    if (!o->open)
        return;
    if (o->len > 0) {
        agent_relay_line(o, o->line, o->len);
        o->len = 0;
    }
    if (o->log_fd >= 0) {
        close(o->log_fd);
        o->log_fd = -1;
    }
    o->open = false;
    g->pipes_open--;
    uv_close((uv_handle_t *)&o->pipe, agent_group_worker_close_cb);
    /* A descendant that held the pipe after the worker's exit may just have gone with it. */
    agent_reaper_link_unlist_if_gone(o->w);
    if (o->which == OUT_STDERR && o->w->exited_open) {
        o->w->exited_open = false; /* its last line is in */
        if (g->state != GROUP_FREEING && g->cfg.on_output_closed)
            g->cfg.on_output_closed(g, o->w->local_rank, o->w->exit_status, o->w->exit_sig,
                                    g->cfg.ud);
    }
}

static void worker_out_read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct worker_out *o = rdzv_container_of(st, struct worker_out, pipe);
    struct agent_worker *w = o->w;
    struct agent_group *g = w->g;
    size_t old;
    int r;

    if (nread < 0) {
        if (nread != UV_EOF)
            log_warn("worker rank %u: reading %s: %s, closing it", w->rank,
                     agent_out_name(o->which), uv_strerror((int)nread));
        agent_relay_out_close(o);
        return;
    }
    if (nread == 0)
        return;
    if (o->log_fd >= 0) {
        r = agent_relay_write_all(o->log_fd, buf->base, (size_t)nread);
        if (r < 0) {
            log_warn_errno(r, "worker rank %u: writing %s.log, no more log file for it", w->rank,
                           agent_out_name(o->which));
            close(o->log_fd);
            o->log_fd = -1;
        }
    }
    old = o->len;
    o->len += (size_t)nread;
    worker_out_lines(o, old);
    drain_touch(g);
}

void agent_relay_update_pause(struct agent_group *g)
{
    size_t queued = 0;
    bool pause;

    for (unsigned i = 0; i < _OUT_MAX; i++)
        if (rdzv_buf_avail(&g->sink[i].q) > queued)
            queued = rdzv_buf_avail(&g->sink[i].q);
    pause = g->paused ? queued > SINK_LOW : queued > SINK_HIGH;
    if (pause == g->paused)
        return;
    g->paused = pause;
    log_debug("workers: %zu relay bytes queued, %s reading worker output", queued,
              pause ? "pausing" : "resuming");
    for (unsigned i = 0; i < g->cfg.nproc; i++)
        for (unsigned k = 0; k < _OUT_MAX; k++) {
            struct worker_out *o = &g->workers[i].out[k];

            if (!o->open)
                continue;
            if (pause)
                (void)uv_read_stop((uv_stream_t *)&o->pipe);
            else
                (void)uv_read_start((uv_stream_t *)&o->pipe, worker_out_alloc_cb,
                                    worker_out_read_cb);
        }
}

int agent_group_pipe_open(struct agent_group *g, uv_pipe_t *pipe, int *ret_child_fd)
{
    uv_file fds[2];
    int r;

    r = uv_pipe(fds, UV_NONBLOCK_PIPE, 0);
    if (r < 0)
        return r;
    r = uv_pipe_init(g->cfg.loop, pipe, 0);
    if (r < 0)
        goto out_close_fds;
    pipe->data = g;
    agent_group_worker_handle_added(g, (uv_handle_t *)pipe);
    r = uv_pipe_open(pipe, fds[0]);
    if (r < 0) {
        uv_close((uv_handle_t *)pipe, agent_group_worker_close_cb);
        goto out_close_fds;
    }
    *ret_child_fd = fds[1];
    return 0;

out_close_fds:
    close(fds[0]);
    close(fds[1]);
    return r;
}

/* Make one output pipe: our end non-blocking in a uv_pipe_t, the worker's end blocking (it is
 * the worker's stdout or stderr). On failure nothing is left open. */
int agent_relay_out_open(struct worker_out *o, int *ret_child_fd)
{
    struct agent_group *g = o->w->g;
    int r = agent_group_pipe_open(g, &o->pipe, ret_child_fd);

    if (r < 0)
        return r;
    o->open = true;
    o->len = 0;
    g->pipes_open++;
    return 0;
}

void agent_relay_out_start(struct worker_out *o)
{
    if (!o->w->g->paused)
        (void)uv_read_start((uv_stream_t *)&o->pipe, worker_out_alloc_cb, worker_out_read_cb);
}

void agent_relay_setup(struct agent_group *g)
{
    sink_setup(g, &g->sink[OUT_STDOUT], g->cfg.out_fd);
    sink_setup(g, &g->sink[OUT_STDERR], g->cfg.err_fd);
}

void agent_relay_close(struct agent_group *g)
{
    uint64_t deadline = rdzv_now_ms() + AGENT_FLUSH_MS;

    for (unsigned i = 0; i < _OUT_MAX; i++) {
        struct out_sink *s = &g->sink[i];

        sink_flush_sync(s, deadline);
        if (s->poll_open) {
            s->poll_open = false;
            s->polling = false;
            uv_close((uv_handle_t *)&s->poll, agent_group_handle_close_cb);
        }
    }
}

void agent_relay_release(struct agent_group *g)
{
    for (unsigned i = 0; i < _OUT_MAX; i++) {
        if (g->sink[i].own_fd)
            close(g->sink[i].fd);
        rdzv_buf_free(&g->sink[i].q);
    }
    rdzv_buf_free(&g->scratch);
}
