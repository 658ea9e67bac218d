/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-store-client.c: the blocking TCPStore client (see rdzv-store-client.h). */
#include "proto/rdzv-store-client.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-proto.h"
#include "proto/rdzv-tcpstore.h"

#define STORE_MAX_VALUE (64u << 20) /* the largest value get accepts */
#define RETRY_MS 100

struct rdzv_store_client {
    int fd;
    int cancel_fd; /* -1, or: readable means abandon every wait (-ECANCELED) */
    int err; /* sticky: the first error of a request call */
    uint64_t timeout_ms;
};

static uint64_t deadline_after(uint64_t timeout_ms)
{
    return timeout_ms ? rdzv_now_ms() + timeout_ms : 0;
}

/* Wait until fd (-1: none, only the time) is ready for events, cancel_fd (-1: none) is
 * readable, or the deadline (0: none) passes. Returns 1 ready, -ECANCELED, -ETIMEDOUT, or a
 * negative errno. */
static int wait_fd(int fd, short events, uint64_t deadline_ms, int cancel_fd)
{
    for (;;) {
        struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = cancel_fd, .events = POLLIN}};
        uint64_t now = rdzv_now_ms(), left = deadline_ms ? 0 : 60000;
        int r;

        if (deadline_ms) {
            if (now >= deadline_ms)
                return fd < 0 ? 0 : -ETIMEDOUT;
            left = deadline_ms - now;
        }
        r = poll(p, 2, left > 60000 ? 60000 : (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (p[1].revents)
            return -ECANCELED;
        if (r > 0)
            return 1;
    }
}

/* One try at each address host resolves to. */
static int connect_once(const char *host, uint16_t port, uint64_t deadline_ms, int cancel_fd,
                        int *ret_fd)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC};
    struct addrinfo *res, *ai;
    char portstr[8];
    int r = -ENXIO, one = 1;

    snprintf(portstr, sizeof(portstr), "%u", port);
    if (getaddrinfo(host, portstr, &hints, &res) != 0)
        return -ENXIO;
    for (ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), e = 0;
        socklen_t sl = sizeof(e);

        if (fd < 0) {
            r = -errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
            r = -errno;
            close(fd);
            continue;
        }
        r = wait_fd(fd, POLLOUT, deadline_ms, cancel_fd);
        if (r == -ECANCELED) {
            close(fd);
            break;
        }
        if (r < 0) {
            close(fd);
            continue;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &sl) < 0 || e != 0 ||
            rdzv_fd_self_connected(fd)) { /* nothing listens there (rdzv-util.h) */
            r = e > 0 ? -e : -ECONNREFUSED;
            close(fd);
            continue;
        }
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        *ret_fd = fd;
        r = 0;
        break;
    }
    freeaddrinfo(res);
    return r;
}

int rdzv_store_client_send(struct rdzv_store_client *c, const void *p, size_t n,
                           uint64_t deadline_ms)
{
    const uint8_t *b = p;

    while (n > 0) {
        ssize_t w = send(c->fd, b, n, MSG_NOSIGNAL);

        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            int r = errno == EINTR ? 1 : wait_fd(c->fd, POLLOUT, deadline_ms, c->cancel_fd);

            if (r < 0)
                return r;
            continue;
        }
        if (w < 0)
            return errno == EPIPE ? -ECONNRESET : -errno;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

int rdzv_store_client_recv(struct rdzv_store_client *c, void *p, size_t n, uint64_t deadline_ms)
{
    uint8_t *b = p;

    while (n > 0) {
        ssize_t got = recv(c->fd, b, n, 0);

        if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
            int r = errno == EINTR ? 1 : wait_fd(c->fd, POLLIN, deadline_ms, c->cancel_fd);

            if (r < 0)
                return r;
            continue;
        }
        if (got == 0)
            return -ECONNRESET;
        if (got < 0)
            return -errno;
        b += got;
        n -= (size_t)got;
    }
    return 0;
}

int rdzv_store_client_recv_u64(struct rdzv_store_client *c, uint64_t *ret, uint64_t deadline_ms)
{
    uint8_t t[8];
    int r = rdzv_store_client_recv(c, t, sizeof(t), deadline_ms);

    if (r == 0)
        *ret = rdzv_get_u64(t);
    return r;
}

int rdzv_store_client_recv_str(struct rdzv_store_client *c, uint64_t max, uint8_t **ret,
                               size_t *ret_len, uint64_t deadline_ms)
{
    uint64_t n;
    uint8_t *p;
    int r = rdzv_store_client_recv_u64(c, &n, deadline_ms);

    if (r < 0)
        return r;
    if (n > max)
        return -EPROTO;
    p = malloc(n + 1);
    if (!p)
        return -ENOMEM;
    r = rdzv_store_client_recv(c, p, n, deadline_ms);
    if (r < 0) {
        free(p);
        return r;
    }
    p[n] = '\0';
    *ret = p;
    *ret_len = n;
    return 0;
}

/* Send the request in b (freed here), unless an earlier error stuck. */
static int request_send(struct rdzv_store_client *c, struct rdzv_buf *b, int enc_r,
                        uint64_t deadline_ms)
{
    int r = c->err;

    if (r == 0)
        r = enc_r < 0 ? enc_r
                      : rdzv_store_client_send(c, rdzv_buf_head(b), rdzv_buf_avail(b), deadline_ms);
    rdzv_buf_free(b);
    if (r < 0 && c->err == 0)
        c->err = r;
    return r;
}

static int request_recv(struct rdzv_store_client *c, void *p, size_t n, uint64_t deadline_ms)
{
    int r = c->err ? c->err : rdzv_store_client_recv(c, p, n, deadline_ms);

    if (r < 0 && c->err == 0)
        c->err = r;
    return r;
}

int rdzv_store_client_connect(const char *host, uint16_t port, uint64_t timeout_ms,
                              unsigned flags, struct rdzv_store_client **ret)
{
    return rdzv_store_client_connect_cancel(host, port, timeout_ms, flags, -1, ret);
}

int rdzv_store_client_connect_cancel(const char *host, uint16_t port, uint64_t timeout_ms,
                                     unsigned flags, int cancel_fd,
                                     struct rdzv_store_client **ret)
{
    uint64_t deadline = deadline_after(timeout_ms);
    struct rdzv_store_client *c;
    struct rdzv_buf b = {0};
    int fd = -1, r;

    for (;;) {
        r = connect_once(host, port, deadline, cancel_fd, &fd);
        if (r == 0 || !(flags & RDZV_STORE_CLIENT_RETRY) ||
            (r != -ECONNREFUSED && r != -ETIMEDOUT) || (deadline && rdzv_now_ms() >= deadline))
            break;
        /* The pause between tries: a cancellation ends it too. */
        r = wait_fd(-1, 0, rdzv_now_ms() + RETRY_MS, cancel_fd);
        if (r < 0)
            break;
    }
    if (r < 0)
        return r;
    c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return -ENOMEM;
    }
    c->fd = fd;
    c->cancel_fd = cancel_fd;
    c->timeout_ms = timeout_ms;
    if (!(flags & RDZV_STORE_CLIENT_NO_VALIDATE)) {
        r = request_send(c, &b, rdzv_enc_validate(&b), deadline_after(timeout_ms));
        if (r < 0) {
            rdzv_store_client_free(c);
            return r;
        }
    }
    *ret = c;
    return 0;
}

struct rdzv_store_client *rdzv_store_client_free(struct rdzv_store_client *c)
{
    if (c) {
        close(c->fd);
        free(c);
    }
    return NULL;
}

int rdzv_store_client_set(struct rdzv_store_client *c, const char *key, const void *val,
                          size_t len)
{
    struct rdzv_buf b = {0};

    return request_send(c, &b, rdzv_enc_set(&b, RDZV_DIALECT_MODERN, key, strlen(key), val, len),
                        deadline_after(c->timeout_ms));
}

int rdzv_store_client_wait(struct rdzv_store_client *c, const char *const *keys, size_t n,
                           uint64_t timeout_ms)
{
    uint64_t deadline = deadline_after(timeout_ms);
    struct rdzv_buf b = {0};
    uint8_t reply;
    int r;

    r = request_send(c, &b, rdzv_enc_keys(&b, RDZV_DIALECT_MODERN, RDZV_OP_WAIT, keys, n),
                     deadline);
    if (r == 0)
        r = request_recv(c, &reply, 1, deadline);
    if (r == 0 && reply != RDZV_WAIT_STOP_WAITING)
        r = c->err = -EPROTO;
    return r;
}

int rdzv_store_client_get(struct rdzv_store_client *c, const char *key, uint64_t timeout_ms,
                          void **ret_val, size_t *ret_len)
{
    uint64_t deadline = deadline_after(timeout_ms);
    struct rdzv_buf b = {0};
    uint8_t *val;
    size_t len;
    int r;

    r = rdzv_store_client_wait(c, &key, 1, timeout_ms);
    if (r == 0)
        r = request_send(c, &b,
                         rdzv_enc_key(&b, RDZV_DIALECT_MODERN, RDZV_OP_GET, key, strlen(key)),
                         deadline);
    if (r < 0)
        return r;
    r = rdzv_store_client_recv_str(c, STORE_MAX_VALUE, &val, &len, deadline);
    if (r < 0)
        return c->err = r;
    *ret_val = val;
    *ret_len = len;
    return 0;
}

int rdzv_store_client_add(struct rdzv_store_client *c, const char *key, int64_t delta,
                          int64_t *ret)
{
    uint64_t deadline = deadline_after(c->timeout_ms);
    struct rdzv_buf b = {0};
    uint8_t v[8];
    int r;

    r = request_send(c, &b, rdzv_enc_add(&b, RDZV_DIALECT_MODERN, key, strlen(key), delta),
                     deadline);
    if (r == 0)
        r = request_recv(c, v, 8, deadline);
    if (r == 0)
        *ret = (int64_t)rdzv_get_u64(v);
    return r;
}
