/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-bench.c: TCPStore load generator in every PyTorch dialect (--dialect: 1.x/2.0, 2.1, or
 * modern, which opens each connection with VALIDATE and a PING as PyTorch >= 2.5 does):
 * throughput, barrier, memory.
 * A barrier may come from several hosts (--hosts: source addresses 127.0.0.2, .3, ...), host
 * after host (--stagger) or interleaved, each rank silent a while after its connect (--silence),
 * as PyTorch's ranks are while they import: a storm of several hosts. Its options are in
 * rdzv-bench-opts.c, its readings of the server process in rdzv-bench-proc.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/rdzv-buf.h"
#include "proto/rdzv-proto.h"
#include "proto/rdzv-tcpstore.h"
#include "common/rdzv-util.h"

#include "tests/bench/rdzv-bench.h"

static const char *const tp_op_names[] = {"addget", "get", "add"};

static uint64_t rng_next(struct bench *b)
{
    /* xorshift64*: jitter for connect backoff only. */
    b->rng ^= b->rng >> 12;
    b->rng ^= b->rng << 25;
    b->rng ^= b->rng >> 27;
    return b->rng * 2685821657736338717ull;
}

/* ---- requests: proto's encoders, the bytes rdzvctl and rdzv-train send too ---- */

/* Encode one request with proto/rdzv-tcpstore.h into b->enc (reused: no allocation once grown)
 * and copy it to p (OUT_CAP bytes). Returns its size; exits on -ENOMEM (a tool, not a server). */
static size_t enc_done(struct bench *b, uint8_t *p, int r)
{
    if (r < 0 || b->enc.len > OUT_CAP) {
        fprintf(stderr, "rdzv-bench: cannot encode a request: %s\n", strerror(r < 0 ? -r : E2BIG));
        exit(1);
    }
    memcpy(p, b->enc.data, b->enc.len);
    return b->enc.len;
}

static size_t enc_add(struct bench *b, uint8_t *p, const char *key, size_t klen)
{
    b->enc.len = b->enc.off = 0;
    return enc_done(b, p, rdzv_enc_add(&b->enc, b->dialect, key, klen, 1));
}

static size_t enc_get(struct bench *b, uint8_t *p, const char *key, size_t klen)
{
    b->enc.len = b->enc.off = 0;
    return enc_done(b, p, rdzv_enc_key(&b->enc, b->dialect, RDZV_OP_GET, key, klen));
}

static size_t enc_set(struct bench *b, uint8_t *p, const char *key, size_t klen,
                      const char *val, size_t vlen)
{
    b->enc.len = b->enc.off = 0;
    return enc_done(b, p, rdzv_enc_set(&b->enc, b->dialect, key, klen, val, vlen));
}

/* WAIT on one NUL-terminated key. */
static size_t enc_wait1(struct bench *b, uint8_t *p, const char *key)
{
    const char *keys[1] = {key};

    b->enc.len = b->enc.off = 0;
    return enc_done(b, p, rdzv_enc_keys(&b->enc, b->dialect, RDZV_OP_WAIT, keys, 1));
}

/* The modern opening: VALIDATE, then a PING of nonce (the connection's index). */
static size_t enc_hello(struct bench *b, uint8_t *p, uint32_t nonce)
{
    int r;

    b->enc.len = b->enc.off = 0;
    r = rdzv_enc_validate(&b->enc);
    return enc_done(b, p, r < 0 ? r : rdzv_enc_ping(&b->enc, nonce));
}

/* ---- connection life cycle ---- */

/* The host (0 .. hosts-1) of connection i: consecutive ranks when staggered, else in turn. */
static uint32_t conn_host(const struct bench *b, uint32_t i)
{
    uint32_t per = (b->total + b->hosts - 1) / b->hosts;

    i += b->first;
    return b->stagger_s > 0 ? i / per : i % b->hosts;
}

static bool connect_retryable(int err)
{
    return err == ECONNREFUSED || err == ECONNRESET || err == EAGAIN || err == ETIMEDOUT ||
           err == EADDRNOTAVAIL || err == ECONNABORTED || err == EINTR;
}

static void conn_lost(struct bench *b, struct conn *c, const char *what, int err)
{
    if (c->state == CS_WAIT)
        b->nwaiting--;
    if (c->fd >= 0)
        (void)close(c->fd);
    c->fd = -1;
    c->state = CS_LOST;
    b->nlost++;
    if (!b->first_lost_what) {
        b->first_lost_what = what;
        b->first_lost_err = err;
    }
}

static void conn_backoff(struct bench *b, struct conn *c)
{
    uint64_t d = BACKOFF_MIN_NS << (c->attempts < 8 ? c->attempts : 8);

    if (d > BACKOFF_MAX_NS)
        d = BACKOFF_MAX_NS;
    d = d / 2 + rng_next(b) % (d / 2 + 1);
    if (c->fd >= 0)
        (void)close(c->fd);
    c->fd = -1;
    if (c->attempts < UINT8_MAX)
        c->attempts++;
    c->state = CS_BACKOFF;
    c->due_ns = rdzv_now_ns() + d;
    if (c->due_ns < b->next_due_ns)
        b->next_due_ns = c->due_ns;
    b->nbackoff++;
    b->retries++;
}

/* Send one request. A short send keeps the rest for EPOLLOUT. Returns 0, or -errno after
 * marking the connection lost. */
static int conn_send(struct bench *b, struct conn *c, const uint8_t *p, size_t len)
{
    ssize_t w;

    c->inlen = 0;
    w = send(c->fd, p, len, MSG_NOSIGNAL);
    if (w < 0) {
        int err = errno;

        if (err != EAGAIN && err != EINTR) {
            conn_lost(b, c, "send", err);
            return -err;
        }
        w = 0;
    }
    if ((size_t)w < len) {
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT,
                                 .data.u32 = (uint32_t)(c - b->conns)};

        memcpy(c->out, p + w, len - (size_t)w);
        c->outlen = (uint8_t)(len - (size_t)w);
        if (epoll_ctl(b->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0) {
            conn_lost(b, c, "epoll_ctl", errno);
            return -EIO;
        }
    }
    return 0;
}

static void send_add(struct bench *b, struct conn *c, const char *key, size_t klen)
{
    uint8_t req[OUT_CAP];

    if (conn_send(b, c, req, enc_add(b, req, key, klen)) == 0)
        c->state = CS_ADD;
}

static void send_get(struct bench *b, struct conn *c)
{
    uint8_t req[OUT_CAP];

    if (conn_send(b, c, req, enc_get(b, req, c->key, c->klen)) == 0)
        c->state = CS_GET;
}

/* The connection is open (for modern, its PING answered): do what the mode does first (a
 * barrier's rank after its silence). */
static void conn_opened(struct bench *b, struct conn *c)
{
    b->nconnected++;
    b->t_opened_ns = rdzv_now_ns();
    c->state = CS_IDLE;
    if (b->mode == MODE_BARRIER && b->silence_s > 0) {
        c->state = CS_SILENT;
        c->due_ns = rdzv_now_ns() + secs_to_ns(b->silence_s);
        if (c->due_ns < b->next_due_ns)
            b->next_due_ns = c->due_ns;
        b->nsilent++;
    } else if (b->mode == MODE_BARRIER)
        send_add(b, c, b->cnt_key, b->cnt_len);
    else if (b->mode == MODE_MEMORY)
        send_add(b, c, b->idle_key, b->idle_len);
}

/* The TCP connection is up: open it as the dialect's clients do. */
static void conn_connected(struct bench *b, struct conn *c)
{
    uint8_t req[OUT_CAP];

    if (b->dialect != RDZV_DIALECT_MODERN) {
        conn_opened(b, c);
        return;
    }
    if (conn_send(b, c, req, enc_hello(b, req, (uint32_t)(c - b->conns))) == 0)
        c->state = CS_PING;
}

/* Open a socket and start a non-blocking connect. Returns 0 (the connection may already be in
 * CS_BACKOFF or connected), or a negative errno that ends the run (out of file descriptors). */
static int conn_connect(struct bench *b, struct conn *c)
{
    struct epoll_event ev = {.data.u32 = (uint32_t)(c - b->conns)};
    struct sockaddr_in dst;
    int fd, one = 1, r;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    c->fd = fd;
    /* PyTorch's client sets TCP_NODELAY too. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (b->hosts > 0) {
        struct sockaddr_in src = {.sin_family = AF_INET};

        /* The port is picked at connect(), for this destination: bind() would pick one unused
         * on every destination, a search that slows down as thousands (and the TIME_WAIT ones
         * of the run before) hold them, while the ranks due to send wait for it. */
        (void)setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
        src.sin_addr.s_addr = htonl(0x7f000002u + conn_host(b, (uint32_t)(c - b->conns)));
        if (bind(fd, (const struct sockaddr *)&src, sizeof(src)) < 0) {
            r = -errno;
            (void)close(fd);
            c->fd = -1;
            return r;
        }
    }
    r = connect(fd, (const struct sockaddr *)bench_dest(b, (uint32_t)(c - b->conns), &dst),
                sizeof(dst));
    if (r < 0 && errno != EINPROGRESS) {
        int err = errno;

        if (!connect_retryable(err)) {
            conn_lost(b, c, "connect", err);
            return 0;
        }
        conn_backoff(b, c);
        return 0;
    }
    ev.events = r == 0 ? EPOLLIN : EPOLLOUT;
    if (epoll_ctl(b->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        r = -errno;
        (void)close(fd);
        c->fd = -1;
        return r;
    }
    c->state = CS_CONNECTING;
    if (r == 0)
        conn_connected(b, c);
    return 0;
}

static int conn_writable(struct bench *b, struct conn *c)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)(c - b->conns)};

    if (c->state == CS_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof(err);

        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        if (err != 0) {
            if (connect_retryable(err))
                conn_backoff(b, c);
            else
                conn_lost(b, c, "connect", err);
            return 0;
        }
        if (epoll_ctl(b->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
            return -errno;
        conn_connected(b, c);
        return 0;
    }
    if (c->outlen > 0) {
        ssize_t w = send(c->fd, c->out, c->outlen, MSG_NOSIGNAL);

        if (w < 0) {
            if (errno != EAGAIN && errno != EINTR)
                conn_lost(b, c, "send", errno);
            return 0;
        }
        memmove(c->out, c->out + w, c->outlen - (size_t)w);
        c->outlen = (uint8_t)(c->outlen - (size_t)w);
    }
    if (c->outlen == 0 && epoll_ctl(b->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        return -errno;
    return 0;
}

/* One whole reply is in c->in; act on it. */
static void conn_reply(struct bench *b, struct conn *c, uint64_t now)
{
    uint8_t req[OUT_CAP];
    size_t n;
    int64_t v;

    if (c->state == CS_PING) {
        if (rdzv_get_u32(c->in) != (uint32_t)(c - b->conns)) {
            conn_lost(b, c, "PING echo", EPROTO);
            return;
        }
        conn_opened(b, c);
        return;
    }
    switch (b->mode) {
    case MODE_THROUGHPUT:
        if (b->counting)
            b->replies++;
        if (b->op == OP_GET || (b->op == OP_ADDGET && c->state == CS_ADD))
            send_get(b, c);
        else
            send_add(b, c, c->key, c->klen);
        return;
    case MODE_BARRIER:
        if (c->state == CS_WAIT) {
            if (c->in[0] != RDZV_WAIT_STOP_WAITING) {
                conn_lost(b, c, "WAIT reply", EPROTO);
                return;
            }
            c->state = CS_DONE;
            b->nwaiting--;
            b->ndone++;
            b->t_last_ns = now;
            return;
        }
        v = (int64_t)rdzv_get_u64(c->in);
        n = 0;
        if (v == (int64_t)b->total) {
            n = enc_set(b, req, b->go_key, b->go_len, "1", 1);
            b->go_sent = true;
            b->t_go_ns = now;
        } else if (v > (int64_t)b->total)
            b->overshoot = true;
        n += enc_wait1(b, req + n, b->go_key);
        if (conn_send(b, c, req, n) == 0) {
            c->state = CS_WAIT;
            b->nwaiting++;
        }
        return;
    case MODE_MEMORY:
        c->state = CS_DONE;
        b->ndone++;
        b->t_last_ns = now;
        return;
    }
}

/* Bytes of the reply the connection waits for, given what arrived; 0 while unknown. */
static size_t reply_len(const struct conn *c)
{
    switch (c->state) {
    case CS_PING:
        return 4;
    case CS_ADD:
        return 8;
    case CS_WAIT:
        return 1;
    case CS_GET:
        if (c->inlen < 8)
            return 0;
        return 8 + rdzv_get_u64(c->in) > IN_CAP ? SIZE_MAX : 8 + (size_t)rdzv_get_u64(c->in);
    default:
        return SIZE_MAX;
    }
}

static void conn_readable(struct bench *b, struct conn *c, uint64_t now)
{
    ssize_t r;
    size_t need;

    if (c->inlen >= IN_CAP) {
        conn_lost(b, c, "reply too long", EPROTO);
        return;
    }
    r = recv(c->fd, c->in + c->inlen, IN_CAP - c->inlen, 0);
    if (r == 0) {
        conn_lost(b, c, "closed by server", 0);
        return;
    }
    if (r < 0) {
        if (errno != EAGAIN && errno != EINTR)
            conn_lost(b, c, "recv", errno);
        return;
    }
    c->inlen = (uint8_t)(c->inlen + r);
    need = reply_len(c);
    if (need == 0 || (need != SIZE_MAX && c->inlen < need))
        return;
    if (need != c->inlen) {
        conn_lost(b, c, need == SIZE_MAX ? "unexpected bytes" : "more bytes than one reply",
                  EPROTO);
        return;
    }
    conn_reply(b, c, now);
}

/* Retry the connections whose backoff has expired; send the first request of those whose
 * silence has. */
static int run_due(struct bench *b, uint64_t now)
{
    uint64_t next = UINT64_MAX;
    int r;

    if (b->nbackoff + b->nsilent == 0 || now < b->next_due_ns)
        return 0;
    for (uint32_t i = 0; i < b->n && b->nbackoff + b->nsilent > 0; i++) {
        struct conn *c = &b->conns[i];

        if (c->state != CS_BACKOFF && c->state != CS_SILENT)
            continue;
        if (c->due_ns > now) {
            if (c->due_ns < next)
                next = c->due_ns;
            continue;
        }
        if (c->state == CS_SILENT) {
            b->nsilent--;
            send_add(b, c, b->cnt_key, b->cnt_len);
            continue;
        }
        b->nbackoff--;
        c->state = CS_NEW;
        r = conn_connect(b, c);
        if (r < 0)
            return r;
        if (c->state == CS_BACKOFF && c->due_ns < next)
            next = c->due_ns;
    }
    b->next_due_ns = next;
    return 0;
}

/* Wait for events until deadline_ns at the latest (0 = just poll) and handle them. */
static int poll_once(struct bench *b, uint64_t deadline_ns)
{
    struct epoll_event evs[MAX_EVENTS];
    uint64_t now = rdzv_now_ns(), until = deadline_ns;
    int timeout_ms = 0, nev, r;

    if (b->nbackoff + b->nsilent > 0 && b->next_due_ns < until)
        until = b->next_due_ns;
    if (until > now)
        timeout_ms = (int)((until - now + 999999) / 1000000);
    nev = epoll_wait(b->epfd, evs, MAX_EVENTS, timeout_ms);
    if (nev < 0)
        return errno == EINTR ? 0 : -errno;
    now = rdzv_now_ns();
    for (int i = 0; i < nev; i++) {
        struct conn *c = &b->conns[evs[i].data.u32];

        if (c->fd < 0)
            continue;
        if (evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP) && c->state == CS_CONNECTING) {
            r = conn_writable(b, c);
            if (r < 0)
                return r;
            continue;
        }
        if (evs[i].events & EPOLLOUT) {
            r = conn_writable(b, c);
            if (r < 0)
                return r;
            if (c->fd < 0)
                continue;
        }
        if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
            conn_readable(b, c, now);
    }
    return run_due(b, rdzv_now_ns());
}

/* Start connecting conns[0..n), CONNECT_BATCH at a time with a non-blocking poll in between so
 * replies flow while the rest are opened. */
static int connect_all(struct bench *b)
{
    uint64_t t0 = rdzv_now_ns();
    int r;

    for (uint32_t i = 0; i < b->n; i++) {
        uint64_t start = t0 + (b->hosts ? conn_host(b, i) : 0) * secs_to_ns(b->stagger_s);

        while (rdzv_now_ns() < start) {
            r = poll_once(b, start); /* a host's turn to start connecting */
            if (r < 0)
                return r;
        }
        r = conn_connect(b, &b->conns[i]);
        if (r < 0) {
            fprintf(stderr, "rdzv-bench: connection %" PRIu32 ": %s\n", i, strerror(-r));
            return r;
        }
        if ((i + 1) % CONNECT_BATCH == 0) {
            r = poll_once(b, 0);
            if (r < 0)
                return r;
        }
    }
    return 0;
}

static void print_lost(const struct bench *b)
{
    if (b->first_lost_what)
        fprintf(stderr, "rdzv-bench: %" PRIu32 " connections lost; first: %s%s%s\n", b->nlost,
                b->first_lost_what, b->first_lost_err ? ": " : "",
                b->first_lost_err ? strerror(b->first_lost_err) : "");
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;

    return a < b ? -1 : a > b;
}

/* ---- modes ---- */

static int run_throughput(struct bench *b)
{
    static double win[MAX_WINDOWS];
    uint64_t t0, deadline, t_meas, now, w_start, w_len, w_replies, cpu0 = UINT64_MAX, cpu1;
    bool cpu_precise = false;
    char cpu[160] = "";
    size_t nwin = 0, want;
    int r;

    for (uint32_t i = 0; i < b->n; i++) {
        struct conn *c = &b->conns[i];

        c->klen = (uint8_t)snprintf(c->key, sizeof(c->key), "%s/k%" PRIu32, b->prefix, i);
    }
    t0 = rdzv_now_ns();
    deadline = t0 + secs_to_ns(b->timeout_s);
    r = connect_all(b);
    while (r == 0 && b->nconnected + b->nlost < b->n && rdzv_now_ns() < deadline)
        r = poll_once(b, deadline);
    if (r < 0)
        return r;
    if (b->nconnected < b->n || b->nlost > 0) {
        print_lost(b);
        fprintf(stderr, "rdzv-bench: only %" PRIu32 " of %" PRIu32 " connections came up\n",
                b->nconnected - b->nlost, b->n);
        return 1;
    }
    for (uint32_t i = 0; i < b->n; i++)
        if (b->conns[i].state == CS_IDLE)
            send_add(b, &b->conns[i], b->conns[i].key, b->conns[i].klen);
    t_meas = rdzv_now_ns() + secs_to_ns(b->warmup_s);
    while (r == 0 && (now = rdzv_now_ns()) < t_meas)
        r = poll_once(b, t_meas);
    /* The measured time is cut into consecutive windows of w_len; it ends with the last one.
     * The server's own CPU time is read at both ends of it. */
    if (b->server_pid > 0 && bench_proc_cpu_ns(b->server_pid, &cpu0, &cpu_precise) < 0)
        cpu0 = UINT64_MAX;
    b->counting = true;
    t_meas = rdzv_now_ns();
    w_len = secs_to_ns(b->window_s);
    if (w_len == 0 || w_len > secs_to_ns(b->duration_s))
        w_len = secs_to_ns(b->duration_s);
    if (w_len == 0)
        w_len = 1;
    want = (size_t)(secs_to_ns(b->duration_s) / w_len);
    if (want == 0)
        want = 1;
    if (want > MAX_WINDOWS)
        want = MAX_WINDOWS;
    w_start = t_meas;
    w_replies = 0;
    while (r == 0 && nwin < want) {
        r = poll_once(b, w_start + w_len);
        now = rdzv_now_ns();
        if (now - w_start >= w_len) {
            win[nwin++] = (double)(b->replies - w_replies) * 1e9 / (double)(now - w_start);
            w_start = now;
            w_replies = b->replies;
        }
    }
    if (r < 0)
        return r;
    now = rdzv_now_ns();
    b->counting = false;
    if (cpu0 != UINT64_MAX && bench_proc_cpu_ns(b->server_pid, &cpu1, &cpu_precise) == 0 &&
        cpu1 >= cpu0)
        snprintf(cpu, sizeof(cpu), " server_cpu_s=%.3f server_cpu_util=%.2f "
                 "server_cpu_ns_per_reply=%.1f server_cpu_clock=%s",
                 (double)(cpu1 - cpu0) / 1e9, (double)(cpu1 - cpu0) / (double)(now - t_meas),
                 b->replies ? (double)(cpu1 - cpu0) / (double)b->replies : 0.0,
                 cpu_precise ? "schedstat" : "ticks");
    qsort(win, nwin, sizeof(win[0]), cmp_double);
    printf("mode=throughput dialect=%s op=%s conns=%" PRIu32 " replies=%" PRIu64 " seconds=%.3f "
           "replies_per_s=%.0f best_window_per_s=%.0f median_window_per_s=%.0f windows=%zu "
           "lost=%" PRIu32 " retries=%" PRIu64 "%s\n",
           rdzv_dialect_name(b->dialect), tp_op_names[b->op], b->n, b->replies,
           (double)(now - t_meas) / 1e9,
           (double)b->replies * 1e9 / (double)(now - t_meas), win[nwin - 1], win[nwin / 2], nwin,
           b->nlost, b->retries, cpu);
    print_lost(b);
    return b->replies > 0 && b->nlost == 0 ? 0 : 1;
}

static int setup_conns(struct bench *b);

/* What one process of a barrier saw (--procs: each child sends its own to the parent). */
struct barrier_res {
    uint64_t t_last_ns, t_opened_ns, t_go_ns, retries;
    uint32_t ndone, nlost, nwaiting;
    int32_t err;
    uint8_t go_sent, overshoot;
};

/* Run this process's part of a barrier: its connections connect, ADD, WAIT. With other
 * processes (--procs) a lost rank ends the part at once: the total can no longer be reached. */
static void barrier_part(struct bench *b, uint64_t deadline, struct barrier_res *res)
{
    int r;

    r = connect_all(b);
    /* Lost ranks never ADD: once every other one waits and none read the total, it is over. */
    while (r == 0 && b->ndone + b->nlost < b->n && rdzv_now_ns() < deadline &&
           !(b->nlost > 0 && (b->procs > 1 || (!b->go_sent && b->nwaiting + b->nlost == b->n))))
        r = poll_once(b, deadline);
    *res = (struct barrier_res){.t_last_ns = b->t_last_ns, .t_opened_ns = b->t_opened_ns,
                                .t_go_ns = b->t_go_ns, .retries = b->retries,
                                .ndone = b->ndone, .nlost = b->nlost, .nwaiting = b->nwaiting,
                                .err = r < 0 ? r : 0, .go_sent = b->go_sent,
                                .overshoot = b->overshoot};
}

/* Fork b->procs children, each with its share of the ranks, start them together, and sum what
 * they saw into *sum (t_last_ns: the latest). Returns 0 or a negative errno. */
static int barrier_procs(struct bench *b, uint64_t *t0, uint64_t deadline,
                         struct barrier_res *sum)
{
    int go[2], out[2], status;
    pid_t *pids = calloc(b->procs, sizeof(*pids));
    uint32_t share = b->total / b->procs, extra = b->total % b->procs;
    struct barrier_res one;
    char c = 0;
    ssize_t n;

    if (!pids)
        return -ENOMEM;
    if (pipe2(go, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
        return -errno;
    for (uint32_t p = 0; p < b->procs; p++) {
        pid_t pid = fork();

        if (pid < 0)
            return -errno;
        pids[p] = pid;
        if (pid > 0)
            continue;
        (void)close(go[1]);
        (void)close(out[0]);
        b->first = p * share + (p < extra ? p : extra);
        b->n = share + (p < extra ? 1 : 0);
        if (setup_conns(b) < 0)
            _exit(3);
        while ((n = read(go[0], &c, 1)) < 0 && errno == EINTR)
            ;
        barrier_part(b, deadline, &one);
        /* One record is smaller than PIPE_BUF: the children's writes do not interleave. */
        _exit(write(out[1], &one, sizeof(one)) == (ssize_t)sizeof(one) ? 0 : 3);
    }
    (void)close(go[0]);
    (void)close(out[1]);
    *t0 = rdzv_now_ns();
    (void)close(go[1]); /* every child reads EOF: go */
    *sum = (struct barrier_res){0};
    while ((n = read(out[0], &one, sizeof(one))) == (ssize_t)sizeof(one) ||
           (n < 0 && errno == EINTR)) {
        if (n < 0)
            continue;
        if (one.t_last_ns > sum->t_last_ns)
            sum->t_last_ns = one.t_last_ns;
        if (one.t_opened_ns > sum->t_opened_ns)
            sum->t_opened_ns = one.t_opened_ns;
        if (one.t_go_ns > sum->t_go_ns)
            sum->t_go_ns = one.t_go_ns;
        sum->retries += one.retries;
        sum->ndone += one.ndone;
        sum->nlost += one.nlost;
        sum->nwaiting += one.nwaiting;
        sum->go_sent |= one.go_sent;
        sum->overshoot |= one.overshoot;
        if (one.err && !sum->err)
            sum->err = one.err;
        if (one.nlost > 0) /* the rest cannot finish */
            for (uint32_t p = 0; p < b->procs; p++)
                (void)kill(pids[p], SIGKILL);
    }
    (void)close(out[0]);
    for (uint32_t p = 0; p < b->procs; p++)
        while (waitpid(pids[p], &status, 0) < 0 && errno == EINTR)
            ;
    free(pids);
    return 0;
}

static int run_barrier(struct bench *b)
{
    struct barrier_res res;
    uint64_t t0, deadline, cpu0 = 0, cpu1 = 0;
    bool ok, stuck, precise, cpu = false;
    int r;

    /* The server's CPU time over the barrier (--pid), set-up and waiting included. */
    if (b->server_pid > 0)
        cpu = bench_proc_cpu_ns(b->server_pid, &cpu0, &precise) == 0;
    t0 = rdzv_now_ns();
    deadline = t0 + secs_to_ns(b->timeout_s);
    if (b->procs > 1) {
        r = barrier_procs(b, &t0, deadline, &res);
        if (r < 0)
            return r;
    } else
        barrier_part(b, deadline, &res);
    if (res.err < 0)
        return res.err;
    cpu = cpu && bench_proc_cpu_ns(b->server_pid, &cpu1, &precise) == 0;
    ok = res.ndone == b->total;
    stuck = res.nlost > 0 && !res.go_sent && res.nwaiting + res.nlost == b->total;
    printf("mode=barrier dialect=%s conns=%" PRIu32 " ok=%d seconds=%.4f done=%" PRIu32
           " lost=%" PRIu32 " retries=%" PRIu64 " timedout=%d stuck=%d hosts=%" PRIu32
           " stagger=%.3f silence=%.3f procs=%" PRIu32 " opened_s=%.4f go_s=%.4f",
           rdzv_dialect_name(b->dialect), b->total, ok,
           (double)((ok ? res.t_last_ns : rdzv_now_ns()) - t0) / 1e9, res.ndone, res.nlost,
           res.retries, !ok && !stuck && res.ndone + res.nlost < b->total, stuck, b->hosts,
           b->stagger_s, b->silence_s, b->procs,
           res.t_opened_ns > t0 ? (double)(res.t_opened_ns - t0) / 1e9 : 0.0,
           res.t_go_ns > t0 ? (double)(res.t_go_ns - t0) / 1e9 : 0.0);
    if (cpu)
        printf(" server_cpu_s=%.4f", (double)(cpu1 - cpu0) / 1e9);
    if (b->node_ports)
        printf(" nodes=%" PRIu32 " per_node=%" PRIu32, b->nnodes, b->per_node);
    printf("\n");
    if (b->procs <= 1)
        print_lost(b);
    if (res.overshoot)
        fprintf(stderr, "rdzv-bench: the counter went past %" PRIu32 ": key namespace reused?\n",
                b->n);
    return ok ? 0 : 1;
}

static int run_memory(struct bench *b)
{
    uint64_t before, after, deadline;
    int r;

    if (b->server_pid <= 0) {
        fprintf(stderr, "rdzv-bench: memory needs --pid\n");
        return 2;
    }
    r = bench_proc_rss_kb(b->server_pid, &before);
    if (r < 0) {
        fprintf(stderr, "rdzv-bench: VmRSS of pid %d: %s\n", b->server_pid, strerror(-r));
        return 2;
    }
    deadline = rdzv_now_ns() + secs_to_ns(b->timeout_s);
    r = connect_all(b);
    while (r == 0 && b->ndone + b->nlost < b->n && rdzv_now_ns() < deadline)
        r = poll_once(b, deadline);
    if (r < 0)
        return r;
    if (b->ndone < b->n) {
        print_lost(b);
        fprintf(stderr, "rdzv-bench: only %" PRIu32 " of %" PRIu32 " connections came up\n",
                b->ndone, b->n);
        return 1;
    }
    sleep_ns(secs_to_ns(b->settle_s));
    r = bench_proc_rss_kb(b->server_pid, &after);
    if (r < 0) {
        fprintf(stderr, "rdzv-bench: VmRSS of pid %d: %s\n", b->server_pid, strerror(-r));
        return 1;
    }
    printf("mode=memory dialect=%s conns=%" PRIu32 " rss_before_kb=%" PRIu64
           " rss_after_kb=%" PRIu64 " bytes_per_conn=%.0f retries=%" PRIu64 "\n",
           rdzv_dialect_name(b->dialect), b->n, before, after,
           ((double)after - (double)before) * 1024.0 / b->n, b->retries);
    return 0;
}

/* This process's connections and epoll (each --procs child makes its own). */
static int setup_conns(struct bench *b)
{
    b->rng = rdzv_random_u64() | 1;
    b->next_due_ns = UINT64_MAX;
    b->conns = calloc(b->n, sizeof(*b->conns));
    if (!b->conns)
        return -ENOMEM;
    for (uint32_t i = 0; i < b->n; i++)
        b->conns[i].fd = -1;
    b->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (b->epfd < 0)
        return -errno;
    return 0;
}

int main(int argc, char **argv)
{
    struct bench b = {
        .n = 0,
        .duration_s = 3,
        .warmup_s = 0.5,
        .window_s = 0.5,
        .timeout_s = 60,
        .settle_s = 1,
        .epfd = -1,
        .procs = 1,
    };
    int r;

    r = bench_parse_args(argc, argv, &b);
    if (r != 0)
        return r > 0 ? 0 : 2;
    if (b.n == 0)
        b.n = b.mode == MODE_THROUGHPUT ? 50 : b.mode == MODE_BARRIER ? 1000 : 10000;
    /* A barrier's ranks are spread over its processes: each holds its share. */
    r = bench_raise_nofile(b.mode == MODE_BARRIER ? (b.n + b.procs - 1) / b.procs : b.n);
    if (r < 0)
        return 2;
    b.total = b.n;
    if (b.mode != MODE_BARRIER)
        b.procs = 1;
    if (b.procs > b.n)
        b.procs = b.n;
    r = bench_setup(&b);
    if (r == 0 && b.procs <= 1)
        r = setup_conns(&b);
    if (r < 0) {
        fprintf(stderr, "rdzv-bench: set-up: %s\n", strerror(-r));
        return 2;
    }
    if (b.server_pid > 0)
        b.idle_pids[b.nidle_pids++] = b.server_pid;
    if (b.nidle_pids > 0)
        bench_wait_idle(b.idle_pids, b.nidle_pids);

    if (b.mode == MODE_THROUGHPUT)
        r = run_throughput(&b);
    else if (b.mode == MODE_BARRIER)
        r = run_barrier(&b);
    else
        r = run_memory(&b);
    if (r < 0) {
        fprintf(stderr, "rdzv-bench: %s\n", strerror(-r));
        r = 2;
    }
    fflush(stdout);

    for (uint32_t i = 0; b.conns && i < b.n; i++) {
        /* A storm's ports are closed with a reset: thousands left in TIME_WAIT on one source
         * address would slow the next run's connects down (each one's port search), and its
         * ranks due to send with them. */
        struct linger lg = {.l_onoff = 1, .l_linger = 0};

        if (b.conns[i].fd < 0)
            continue;
        if (b.hosts > 0)
            (void)setsockopt(b.conns[i].fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        (void)close(b.conns[i].fd);
    }
    free(b.conns);
    free(b.node_ports);
    rdzv_buf_free(&b.enc);
    (void)close(b.epfd);
    return r;
}
