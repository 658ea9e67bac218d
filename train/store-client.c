/* SPDX-License-Identifier: Apache-2.0 */
/* store-client.c: blocking TCPStore client over one TCP connection. */
#include "store-client.h"

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

#include "../common/rdzv-buf.h"
#include "../common/rdzv-util.h"
#include "../proto/rdzv-proto.h"
#include "../proto/rdzv-tcpstore.h"

#define STORE_MAX_VALUE (64u << 20)

struct train_store {
    int fd;
    int err; /* sticky: the first error; every later call returns it */
    uint64_t timeout_ms;
};

static int connect_once(const char *host, uint16_t port, uint64_t deadline_ms, int *ret_fd)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC};
    struct addrinfo *res, *ai;
    char portstr[8];
    int r = -EHOSTUNREACH, one = 1;

    snprintf(portstr, sizeof(portstr), "%u", port);
    if (getaddrinfo(host, portstr, &hints, &res) != 0)
        return -EHOSTUNREACH;
    for (ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        struct pollfd pfd;
        uint64_t now;
        socklen_t sl = sizeof(r);

        if (fd < 0) {
            r = -errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
            r = -errno;
            close(fd);
            continue;
        }
        pfd = (struct pollfd){.fd = fd, .events = POLLOUT};
        now = rdzv_now_ms();
        if (poll(&pfd, 1, now < deadline_ms ? (int)(deadline_ms - now) : 0) <= 0) {
            r = -ETIMEDOUT;
            close(fd);
            continue;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &r, &sl) < 0 || r != 0) {
            r = r > 0 ? -r : -ECONNREFUSED;
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

static int send_all(struct train_store *s, const void *p, size_t n, uint64_t deadline_ms)
{
    const uint8_t *b = p;

    while (n > 0) {
        ssize_t w = send(s->fd, b, n, MSG_NOSIGNAL);

        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            struct pollfd pfd = {.fd = s->fd, .events = POLLOUT};
            uint64_t now = rdzv_now_ms();

            if (now >= deadline_ms)
                return -ETIMEDOUT;
            (void)poll(&pfd, 1, (int)(deadline_ms - now));
            continue;
        }
        if (w < 0)
            return errno == EPIPE ? -ECONNRESET : -errno;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int recv_all(struct train_store *s, void *p, size_t n, uint64_t deadline_ms)
{
    uint8_t *b = p;

    while (n > 0) {
        ssize_t got = recv(s->fd, b, n, 0);

        if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
            struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
            uint64_t now = rdzv_now_ms();

            if (now >= deadline_ms)
                return -ETIMEDOUT;
            (void)poll(&pfd, 1, (int)(deadline_ms - now));
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

/* Send the request in b (freed here); a sticky error makes every later call fail fast. */
static int store_send(struct train_store *s, struct rdzv_buf *b, int enc_r, uint64_t deadline)
{
    int r = s->err;

    if (r == 0)
        r = enc_r < 0 ? enc_r : send_all(s, rdzv_buf_head(b), rdzv_buf_avail(b), deadline);
    rdzv_buf_free(b);
    if (r < 0 && s->err == 0)
        s->err = r;
    return r;
}

static int store_recv(struct train_store *s, void *p, size_t n, uint64_t deadline)
{
    int r = s->err ? s->err : recv_all(s, p, n, deadline);

    if (r < 0 && s->err == 0)
        s->err = r;
    return r;
}

int train_store_connect(const char *host, uint16_t port, uint64_t timeout_ms,
                        struct train_store **ret)
{
    uint64_t deadline = rdzv_now_ms() + timeout_ms;
    struct train_store *s;
    struct rdzv_buf b = {0};
    int fd = -1, r;

    for (;;) {
        r = connect_once(host, port, deadline, &fd);
        if (r == 0 || (r != -ECONNREFUSED && r != -ETIMEDOUT) || rdzv_now_ms() >= deadline)
            break;
        usleep(100 * 1000);
    }
    if (r < 0)
        return r;
    s = calloc(1, sizeof(*s));
    if (!s) {
        close(fd);
        return -ENOMEM;
    }
    s->fd = fd;
    s->timeout_ms = timeout_ms;
    r = store_send(s, &b, rdzv_enc_validate(&b), rdzv_now_ms() + timeout_ms);
    if (r < 0) {
        train_store_free(s);
        return r;
    }
    *ret = s;
    return 0;
}

struct train_store *train_store_free(struct train_store *s)
{
    if (s) {
        close(s->fd);
        free(s);
    }
    return NULL;
}

int train_store_set(struct train_store *s, const char *key, const void *val, size_t len)
{
    struct rdzv_buf b = {0};

    return store_send(s, &b, rdzv_enc_set(&b, RDZV_DIALECT_MODERN, key, strlen(key), val, len),
                      rdzv_now_ms() + s->timeout_ms);
}

int train_store_wait(struct train_store *s, const char *const *keys, size_t n,
                     uint64_t timeout_ms)
{
    uint64_t deadline = rdzv_now_ms() + timeout_ms;
    struct rdzv_buf b = {0};
    uint8_t reply;
    int r;

    r = store_send(s, &b, rdzv_enc_keys(&b, RDZV_DIALECT_MODERN, RDZV_OP_WAIT, keys, n),
                   deadline);
    if (r == 0)
        r = store_recv(s, &reply, 1, deadline);
    if (r == 0 && reply != RDZV_WAIT_STOP_WAITING)
        r = s->err = -EPROTO;
    return r;
}

int train_store_get(struct train_store *s, const char *key, uint64_t timeout_ms, void **ret_val,
                    size_t *ret_len)
{
    uint64_t deadline = rdzv_now_ms() + timeout_ms;
    struct rdzv_buf b = {0};
    uint8_t lenb[8];
    uint64_t len;
    char *val;
    int r;

    r = train_store_wait(s, &key, 1, timeout_ms);
    if (r == 0)
        r = store_send(s, &b, rdzv_enc_key(&b, RDZV_DIALECT_MODERN, RDZV_OP_GET, key, strlen(key)),
                       deadline);
    if (r == 0)
        r = store_recv(s, lenb, 8, deadline);
    if (r < 0)
        return r;
    len = rdzv_get_u64(lenb);
    if (len > STORE_MAX_VALUE)
        return s->err = -EPROTO;
    val = malloc(len + 1);
    if (!val)
        return s->err = -ENOMEM;
    r = store_recv(s, val, len, deadline);
    if (r < 0) {
        free(val);
        return r;
    }
    val[len] = '\0';
    *ret_val = val;
    *ret_len = len;
    return 0;
}

int train_store_add(struct train_store *s, const char *key, int64_t delta, int64_t *ret)
{
    uint64_t deadline = rdzv_now_ms() + s->timeout_ms;
    struct rdzv_buf b = {0};
    uint8_t v[8];
    int r;

    r = store_send(s, &b, rdzv_enc_add(&b, RDZV_DIALECT_MODERN, key, strlen(key), delta),
                   deadline);
    if (r == 0)
        r = store_recv(s, v, 8, deadline);
    if (r == 0)
        *ret = (int64_t)rdzv_get_u64(v);
    return r;
}
