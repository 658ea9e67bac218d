/* SPDX-License-Identifier: Apache-2.0 */
/* null-responder.c: the benchmark ceiling: a do-nothing epoll TCPStore responder (no store). */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/rdzv-buf.h"
#include "proto/rdzv-proto.h"
#include "common/rdzv-util.h"

/*
 * It parses just enough of PyTorch's numbering to answer a load generator: the <= 2.0 one, or
 * the modern one on a connection that opens with VALIDATE (its PING is echoed):
 *   ADD  on a key ending in "/cnt": the barrier counter (reset when a new such key shows up);
 *        on any other key: a fixed 1.
 *   GET  any key: the fixed value "1".
 *   SET  on a key ending in "/go": raise the flag and answer every queued WAIT; others ignored.
 *   WAIT answered at once when the flag is up, else the connection is queued.
 * Any other operation, or a key longer than KEY_MAX, closes the connection.
 */

/* Small buffers: the idle-memory figure of the ceiling should be close to what a lean server
 * needs. */
#define IN_CAP 512
#define OUT_CAP 128
#define KEY_MAX 256
#define MAX_EVENTS 1024
#define BACKLOG 65535 /* the kernel caps it at net.core.somaxconn */

struct nconn {
    int fd;
    bool waiting;
    uint8_t dialect; /* D_UNKNOWN until its first bytes show whether it opened with VALIDATE */
    bool pollout; /* EPOLLOUT is armed */
    struct nconn *wprev, *wnext; /* on the waiter list while waiting */
    size_t inlen, outlen;
    uint8_t in[IN_CAP];
    uint8_t out[OUT_CAP];
};

enum { D_LEGACY, D_MODERN, D_UNKNOWN };

struct responder {
    int lfd, epfd;
    struct nconn **by_fd;
    size_t nfds;
    uint8_t op_set[2], op_get[2], op_add[2], op_wait[2], op_ping; /* by D_LEGACY, D_MODERN */
    int64_t counter;
    bool flag;
    char cnt_key[KEY_MAX];
    size_t cnt_len;
    struct nconn waiters; /* list head */
};

static bool ends_with(const uint8_t *k, size_t klen, const char *suffix)
{
    size_t n = strlen(suffix);

    return klen >= n && memcmp(k + klen - n, suffix, n) == 0;
}

static void conn_close(struct responder *s, struct nconn *c)
{
    if (c->waiting) {
        c->wprev->wnext = c->wnext;
        c->wnext->wprev = c->wprev;
    }
    s->by_fd[c->fd] = NULL;
    (void)close(c->fd);
    free(c);
}

/* Send what is queued. Returns 0, or -EPIPE after closing c. */
static int conn_flush(struct responder *s, struct nconn *c)
{
    struct epoll_event ev = {.data.fd = c->fd};
    ssize_t w;

    if (c->outlen == 0)
        return 0;
    w = send(c->fd, c->out, c->outlen, MSG_NOSIGNAL);
    if (w < 0) {
        if (errno != EAGAIN && errno != EINTR) {
            conn_close(s, c);
            return -EPIPE;
        }
        w = 0;
    }
    memmove(c->out, c->out + w, c->outlen - (size_t)w);
    c->outlen -= (size_t)w;
    if ((c->outlen > 0) != c->pollout) {
        c->pollout = c->outlen > 0;
        ev.events = c->pollout ? EPOLLIN | EPOLLOUT : EPOLLIN;
        (void)epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &ev);
    }
    return 0;
}

/* Queue a reply; flush first when the buffer is full. Returns 0 or -EPIPE (c is gone). */
static int conn_put(struct responder *s, struct nconn *c, const void *p, size_t n)
{
    if (c->outlen + n > OUT_CAP) {
        if (conn_flush(s, c) < 0)
            return -EPIPE;
        if (c->outlen + n > OUT_CAP) {
            conn_close(s, c); /* a reader this slow is not a benchmark client */
            return -EPIPE;
        }
    }
    memcpy(c->out + c->outlen, p, n);
    c->outlen += n;
    return 0;
}

static void wake_all(struct responder *s)
{
    static const uint8_t stop = RDZV_WAIT_STOP_WAITING;

    while (s->waiters.wnext != &s->waiters) {
        struct nconn *w = s->waiters.wnext;

        w->wprev->wnext = w->wnext;
        w->wnext->wprev = w->wprev;
        w->waiting = false;
        if (conn_put(s, w, &stop, 1) == 0)
            (void)conn_flush(s, w);
    }
}

/* A string at p[0..n): returns its total size (8 + length), 0 if incomplete, -1 if too long. */
static ssize_t str_at(const uint8_t *p, size_t n)
{
    uint64_t len;

    if (n < 8)
        return 0;
    len = rdzv_get_u64(p);
    if (len > KEY_MAX)
        return -1;
    return n < 8 + len ? 0 : (ssize_t)(8 + len);
}

/* Handle one request at p[0..n). Returns its size, 0 if incomplete, -1 to close the connection
 * (c may already be gone when a reply could not be queued). */
static ssize_t handle_one(struct responder *s, struct nconn *c, const uint8_t *p, size_t n)
{
    static const uint8_t validate[5] = {0x00, 0xCE, 0xF7, 0x85, 0x3C};
    uint8_t reply[16];
    ssize_t k, v;
    uint8_t op = p[0];
    int d = c->dialect;

    if (d == D_UNKNOWN) {
        if (memcmp(p, validate, n < 5 ? n : 5) != 0)
            c->dialect = D_LEGACY;
        else if (n < 5)
            return 0;
        else {
            c->dialect = D_MODERN;
            return 5;
        }
        d = c->dialect;
    }
    if (d == D_MODERN && op == s->op_ping) {
        if (n < 5)
            return 0;
        return conn_put(s, c, p + 1, 4) < 0 ? -1 : 5;
    }
    if (op == s->op_add[d]) {
        int64_t val = 1;

        k = str_at(p + 1, n - 1);
        if (k <= 0)
            return k;
        if (n < 1 + (size_t)k + 8)
            return 0;
        if (ends_with(p + 9, (size_t)k - 8, "/cnt")) {
            if ((size_t)k - 8 != s->cnt_len || memcmp(p + 9, s->cnt_key, s->cnt_len) != 0) {
                s->cnt_len = (size_t)k - 8;
                memcpy(s->cnt_key, p + 9, s->cnt_len);
                s->counter = 0;
                s->flag = false;
            }
            s->counter += (int64_t)rdzv_get_u64(p + 1 + k);
            val = s->counter;
        }
        rdzv_set_u64(reply, (uint64_t)val);
        return conn_put(s, c, reply, 8) < 0 ? -1 : 1 + k + 8;
    }
    if (op == s->op_get[d]) {
        k = str_at(p + 1, n - 1);
        if (k <= 0)
            return k;
        rdzv_set_u64(reply, 1);
        reply[8] = '1';
        return conn_put(s, c, reply, 9) < 0 ? -1 : 1 + k;
    }
    if (op == s->op_set[d]) {
        k = str_at(p + 1, n - 1);
        if (k <= 0)
            return k;
        v = str_at(p + 1 + k, n - 1 - (size_t)k);
        if (v <= 0)
            return v;
        if (ends_with(p + 9, (size_t)k - 8, "/go")) {
            s->flag = true;
            wake_all(s);
        }
        return 1 + k + v;
    }
    if (op == s->op_wait[d]) {
        uint64_t nkeys;
        size_t off = 9;

        if (n < 9)
            return 0;
        nkeys = rdzv_get_u64(p + 1);
        if (nkeys > 3)
            return -1;
        for (uint64_t i = 0; i < nkeys; i++) {
            k = str_at(p + off, n - off);
            if (k <= 0)
                return k;
            off += (size_t)k;
        }
        if (s->flag) {
            reply[0] = RDZV_WAIT_STOP_WAITING;
            return conn_put(s, c, reply, 1) < 0 ? -1 : (ssize_t)off;
        }
        if (!c->waiting) {
            c->waiting = true;
            c->wnext = &s->waiters;
            c->wprev = s->waiters.wprev;
            s->waiters.wprev->wnext = c;
            s->waiters.wprev = c;
        }
        return (ssize_t)off;
    }
    return -1;
}

static void conn_readable(struct responder *s, struct nconn *c)
{
    int fd = c->fd;
    size_t off = 0;
    ssize_t r;

    r = recv(fd, c->in + c->inlen, IN_CAP - c->inlen, 0);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        conn_close(s, c);
        return;
    }
    if (r < 0)
        return;
    c->inlen += (size_t)r;
    while (off < c->inlen) {
        r = handle_one(s, c, c->in + off, c->inlen - off);
        /* A reply that could not be queued closed c (its own or, via SET, a wake-up). */
        if (s->by_fd[fd] != c)
            return;
        if (r == 0)
            break;
        if (r < 0) {
            conn_close(s, c);
            return;
        }
        off += (size_t)r;
    }
    if (off == 0 && c->inlen == IN_CAP) {
        conn_close(s, c);
        return;
    }
    memmove(c->in, c->in + off, c->inlen - off);
    c->inlen -= off;
    (void)conn_flush(s, c);
}

static void accept_all(struct responder *s)
{
    for (;;) {
        struct epoll_event ev = {.events = EPOLLIN};
        struct nconn *c;
        int fd, one = 1;

        fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE)
                fprintf(stderr, "null-responder: accept: %s\n", strerror(errno));
            return;
        }
        c = (size_t)fd < s->nfds ? malloc(sizeof(*c)) : NULL;
        if (!c) {
            (void)close(fd);
            continue;
        }
        c->fd = fd;
        c->waiting = false;
        c->pollout = false;
        c->dialect = D_UNKNOWN;
        c->inlen = c->outlen = 0;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        ev.data.fd = fd;
        if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            (void)close(fd);
            free(c);
            continue;
        }
        s->by_fd[fd] = c;
    }
}

static int write_port_file(const char *path, unsigned port)
{
    char tmp[4096];
    FILE *f;

    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    f = fopen(tmp, "we");
    if (!f)
        return -errno;
    fprintf(f, "%u\n", port);
    if (fclose(f) != 0 || rename(tmp, path) < 0) {
        int r = -errno;

        (void)unlink(tmp);
        return r;
    }
    return 0;
}

/* Listen on host:port (0 = any free port). Returns 0 or a negative errno. */
static int listen_on(struct responder *s, const char *host, uint16_t port, uint16_t *bound)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    socklen_t len = sizeof(a);
    int one = 1, r;

    if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
        return -EINVAL;
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->lfd < 0)
        return -errno;
    (void)setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(s->lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s->lfd, BACKLOG) < 0 ||
        getsockname(s->lfd, (struct sockaddr *)&a, &len) < 0) {
        r = -errno;
        (void)close(s->lfd);
        return r;
    }
    *bound = ntohs(a.sin_port);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "Usage: null-responder [-b ADDR] [-p PORT] [--port-file FILE]\n"
               "A do-nothing TCPStore responder (PyTorch <= 2.0 numbering) for rdzv-bench.\n"
               "  -b, --bind ADDR        IPv4 address (default 127.0.0.1)\n"
               "  -p, --port N           port (default 0: a free one, printed on stdout)\n"
               "      --port-file FILE   also write the bound port to FILE\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"bind", required_argument, NULL, 'b'},
        {"port", required_argument, NULL, 'p'},
        {"port-file", required_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    struct responder s = {.lfd = -1, .epfd = -1};
    struct epoll_event evs[MAX_EVENTS], ev = {.events = EPOLLIN};
    const char *host = "127.0.0.1", *port_file = NULL;
    uint16_t port = 0, bound = 0;
    struct rlimit rl;
    int c, r;

    while ((c = getopt_long(argc, argv, "b:p:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b':
            host = optarg;
            break;
        case 'p':
            if (rdzv_parse_port(optarg, &port) < 0) {
                fprintf(stderr, "null-responder: invalid --port '%s'\n", optarg);
                return 2;
            }
            break;
        case 'f':
            port_file = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    for (int d = D_LEGACY; d <= D_MODERN; d++) {
        enum rdzv_dialect pd = d == D_LEGACY ? RDZV_DIALECT_V20 : RDZV_DIALECT_MODERN;

        s.op_set[d] = (uint8_t)rdzv_op_to_wire(pd, RDZV_OP_SET);
        s.op_get[d] = (uint8_t)rdzv_op_to_wire(pd, RDZV_OP_GET);
        s.op_add[d] = (uint8_t)rdzv_op_to_wire(pd, RDZV_OP_ADD);
        s.op_wait[d] = (uint8_t)rdzv_op_to_wire(pd, RDZV_OP_WAIT);
    }
    s.op_ping = (uint8_t)rdzv_op_to_wire(RDZV_DIALECT_MODERN, RDZV_OP_PING);
    s.waiters.wnext = s.waiters.wprev = &s.waiters;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 1u << 20)
        rl.rlim_cur = 1u << 20;
    s.nfds = (size_t)rl.rlim_cur;
    s.by_fd = calloc(s.nfds, sizeof(*s.by_fd));
    if (!s.by_fd)
        return 1;

    r = listen_on(&s, host, port, &bound);
    if (r < 0) {
        fprintf(stderr, "null-responder: cannot listen on %s:%u: %s\n", host, port, strerror(-r));
        return 1;
    }
    s.epfd = epoll_create1(EPOLL_CLOEXEC);
    ev.data.fd = s.lfd;
    if (s.epfd < 0 || epoll_ctl(s.epfd, EPOLL_CTL_ADD, s.lfd, &ev) < 0) {
        fprintf(stderr, "null-responder: epoll: %s\n", strerror(errno));
        return 1;
    }
    printf("%u\n", bound);
    fflush(stdout);
    if (port_file) {
        r = write_port_file(port_file, bound);
        if (r < 0) {
            fprintf(stderr, "null-responder: %s: %s\n", port_file, strerror(-r));
            return 1;
        }
    }

    for (;;) {
        int n = epoll_wait(s.epfd, evs, MAX_EVENTS, -1);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "null-responder: epoll_wait: %s\n", strerror(errno));
            return 1;
        }
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            struct nconn *nc;

            if (fd == s.lfd) {
                accept_all(&s);
                continue;
            }
            nc = s.by_fd[fd];
            if (!nc)
                continue; /* closed earlier in this batch */
            if (evs[i].events & EPOLLOUT && conn_flush(&s, nc) < 0)
                continue;
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                conn_readable(&s, nc);
        }
    }
}
