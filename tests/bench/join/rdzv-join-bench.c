/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-join-bench.c: N simulated agents join one job on rdzvd; time the round, check ROUNDs
 * (the check, rdzvd's memory and the report are in rdzv-join-bench-report.c); with --lose K,
 * K of them then drop their connections and the rest re-form (EVENT restart, READY, the next
 * ROUND): the recovery's time. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
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
#include "proto/rdzv-frame.h"
#include "proto/rdzv-msg.h"
#include "common/rdzv-util.h"
#include "tests/bench/join/rdzv-join-bench.h"

static const char *const cs_names[_CS_MAX] = {"new",  "connecting", "hello",   "ready",
                                              "join", "joined",     "done",    "restart",
                                              "again"};

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: rdzv-join-bench --endpoint HOST:PORT [-n N] [--lose K] [--pid PID] [--json]\n"
            "Simulate N agents, one TCP connection each, joining one job (min = max = N) on a\n"
            "running rdzvd. Reports the time to connect all N (TCP + HELLO), first -> last JOIN\n"
            "written, last JOIN written -> last ROUND received, and checks the ROUNDs.\n"
            "\n"
            "  -e, --endpoint HOST:PORT  rdzvd's address (IPv4)\n"
            "  -n, --agents N            simulated agents (default 1000)\n"
            "  -p, --pid PID             rdzvd's pid: report its VmRSS before connecting, once\n"
            "                            connected, after all JOINed and after the round\n"
            "  -t, --timeout S           give up after S seconds (default 120)\n"
            "  -l, --lose K              then K agents drop their connections (nodes lost; the\n"
            "                            job's min is N - K): the time from the first EVENT\n"
            "                            restart (the loss detected) to the last ROUND of the\n"
            "                            next generation, each agent answering READY at once\n"
            "  -j, --json                one JSON object on stdout\n"
            "  -h, --help                this help\n"
            "Exit status: 0 ok, 1 any error (said on stderr), 2 bad usage.\n");
}

int bench_fail(struct bench *b, int err, const char *fmt, ...)
{
    va_list ap;

    if (b->error[0] == '\0') {
        va_start(ap, fmt);
        vsnprintf(b->error, sizeof(b->error), fmt, ap);
        va_end(ap);
    }
    return err > 0 ? -err : err;
}

static uint32_t conn_index(const struct bench *b, const struct conn *c)
{
    return (uint32_t)(c - b->conns);
}

static int conn_epoll(struct bench *b, struct conn *c, int op, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.u32 = conn_index(b, c)};

    if (epoll_ctl(b->epfd, op, c->fd, &ev) < 0)
        return bench_fail(b, errno, "epoll_ctl on connection %u: %s", conn_index(b, c),
                          strerror(errno));
    return 0;
}

/* Write what is left of c->tx. A short write waits for EPOLLOUT. Returns 0 or a negative errno. */
static int conn_write(struct bench *b, struct conn *c)
{
    while (c->txoff < c->txlen) {
        ssize_t w = send(c->fd, c->tx + c->txoff, c->txlen - c->txoff, MSG_NOSIGNAL);

        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            return conn_epoll(b, c, EPOLL_CTL_MOD, EPOLLIN | EPOLLOUT);
        if (w < 0)
            return bench_fail(b, errno, "connection %u (%s): send failed: %s", conn_index(b, c),
                              cs_names[c->state], strerror(errno));
        c->txoff += (uint32_t)w;
    }
    c->tx = NULL;
    c->txlen = c->txoff = 0;
    if (c->tx_join) {
        c->tx_join = false;
        if (++b->njoin_written == b->n)
            b->t_last_join = rdzv_now_ns();
    }
    return 0;
}

static int conn_start_tx(struct bench *b, struct conn *c, const uint8_t *p, uint32_t len)
{
    c->tx = p;
    c->txlen = len;
    c->txoff = 0;
    return conn_write(b, c);
}

static bool connect_retryable(int err)
{
    return err == EAGAIN || err == EADDRNOTAVAIL || err == ETIMEDOUT || err == ECONNRESET ||
           err == ECONNREFUSED || err == EINTR;
}

/* A connect failed with err: queue another try, or end the run. */
static int conn_connect_failed(struct bench *b, struct conn *c, int err)
{
    if (c->fd >= 0)
        (void)close(c->fd);
    c->fd = -1;
    c->state = CS_NEW;
    if (!connect_retryable(err) || ++c->attempts >= CONNECT_ATTEMPTS)
        return bench_fail(b, err, "connection %u: connect to %s failed %s%s", conn_index(b, c),
                          b->endpoint, c->attempts > 1 ? "every time: " : "", strerror(err));
    b->retries++;
    b->retry[b->nretry++] = conn_index(b, c);
    return 0;
}

/* TCP is up: send HELLO. */
static int conn_connected(struct bench *b, struct conn *c)
{
    b->inflight--;
    if (++b->nconnected == b->n)
        b->t_connected = rdzv_now_ns();
    c->state = CS_HELLO;
    if (conn_epoll(b, c, EPOLL_CTL_MOD, EPOLLIN) < 0)
        return -EIO;
    return conn_start_tx(b, c, b->hello.data, (uint32_t)b->hello.len);
}

static int conn_connect(struct bench *b, struct conn *c)
{
    int fd, one = 1, r;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return bench_fail(b, errno, "socket() for connection %u: %s", conn_index(b, c),
                          strerror(errno));
    c->fd = fd;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    r = connect(fd, (const struct sockaddr *)&b->addr, sizeof(b->addr));
    if (r < 0 && errno != EINPROGRESS)
        return conn_connect_failed(b, c, errno);
    c->state = CS_CONNECTING;
    b->inflight++;
    if (conn_epoll(b, c, EPOLL_CTL_ADD, EPOLLOUT) < 0)
        return -EIO;
    return r == 0 ? conn_connected(b, c) : 0;
}

/* Keep up to CONNECT_INFLIGHT connects going: retries first, then new connections. */
static int start_connects(struct bench *b)
{
    int r;

    while (b->inflight < CONNECT_INFLIGHT && (b->nretry > 0 || b->next_new < b->n)) {
        uint32_t i = b->nretry > 0 ? b->retry[--b->nretry] : b->next_new++;

        r = conn_connect(b, &b->conns[i]);
        if (r < 0)
            return r;
    }
    return 0;
}

static int unexpected_frame(struct bench *b, struct conn *c, uint8_t op, const uint8_t *body,
                            uint32_t len)
{
    const char *text = "";
    char err[256];
    json_t *root = NULL;
    int r;

    if (op == RDZV_MSG_ERROR && (root = rdzv_msg_load(body, len, err, sizeof(err))))
        (void)json_unpack(root, "{s:s}", "error", &text);
    r = bench_fail(b, EPROTO, "connection %u (node id sim-%u, state %s): rdzvd sent %s%s%s",
                   conn_index(b, c), conn_index(b, c), cs_names[c->state], rdzv_msg_name(op),
                   *text ? ": " : "", text);
    json_decref(root);
    return r;
}

/* --lose: EVENT restart for the generation that lost its nodes: answer READY at once. */
static int conn_restart(struct bench *b, struct conn *c, const uint8_t *body, uint32_t len)
{
    struct rdzv_event *ev = malloc(sizeof(*ev));
    struct rdzv_ready rd = {0};
    char err[256];
    int r;

    if (!ev)
        return bench_fail(b, ENOMEM, "out of memory parsing an EVENT");
    r = rdzv_msg_parse_event(body, len, ev, err, sizeof(err));
    if (r == 0 && strcmp(ev->type, "restart") != 0)
        snprintf(err, sizeof(err), "EVENT %s, not restart", ev->type);
    rd.generation = ev->generation;
    r = r < 0 ? r : strcmp(ev->type, "restart") != 0 ? -EPROTO : 0;
    free(ev);
    if (r < 0)
        return bench_fail(b, r, "connection %u: after the loss: %s", conn_index(b, c), err);
    if (b->nevent++ == 0) {
        b->t_first_event = rdzv_now_ns();
        b->generation2 = rd.generation;
        r = rdzv_msg_put_ready(&b->ready, &rd);
        if (r < 0)
            return bench_fail(b, r, "cannot build READY: %s", strerror(-r));
    } else if (rd.generation != b->generation2) {
        return bench_fail(b, EPROTO, "connection %u: EVENT restart for generation %" PRIu64
                    ", another for %" PRIu64, conn_index(b, c), rd.generation, b->generation2);
    }
    b->t_last_event = rdzv_now_ns();
    c->state = CS_RESTART;
    return conn_start_tx(b, c, b->ready.data, (uint32_t)b->ready.len);
}

/* One whole frame from rdzvd. Returns 0 or a negative errno. */
static int conn_frame(struct bench *b, struct conn *c, uint8_t op, const uint8_t *body,
                      uint32_t len)
{
    char err[256];
    int r;

    switch (c->state) {
    case CS_HELLO:
        if (op != RDZV_MSG_HELLO)
            break;
        r = rdzv_msg_parse_hello(body, len, err, sizeof(err));
        if (r < 0)
            return bench_fail(b, r, "connection %u: bad HELLO from rdzvd: %s", conn_index(b, c),
                              err);
        c->state = CS_READY;
        if (++b->nhello == b->n)
            b->t_hello = rdzv_now_ns();
        return 0;
    case CS_JOIN:
        if (op != RDZV_MSG_JOINED)
            break;
        c->state = CS_JOINED;
        if (++b->njoined == b->n) {
            b->t_joined = rdzv_now_ns();
            /* The round closes together with the last JOIN: this is also its peak. */
            return bench_sample_rss(b, &b->rss.joined, NULL, "after all JOINed");
        }
        return 0;
    case CS_JOINED:
        if (op != RDZV_MSG_ROUND)
            break;
        /* Parse later: jansson here would compete with rdzvd for the CPU being measured. */
        c->round = malloc(len ? len : 1);
        if (!c->round)
            return bench_fail(b, ENOMEM, "out of memory keeping a ROUND");
        memcpy(c->round, body, len);
        c->round_len = len;
        c->state = CS_DONE;
        b->t_last_round = rdzv_now_ns();
        if (b->nround++ == 0)
            b->t_first_round = b->t_last_round;
        return 0;
    case CS_DONE:
        if (op == RDZV_MSG_EVENT && b->t_lost)
            return conn_restart(b, c, body, len);
        break;
    case CS_RESTART:
        if (op != RDZV_MSG_ROUND)
            break;
        c->state = CS_AGAIN;
        b->t_last_round2 = rdzv_now_ns();
        b->nround2++;
        return 0;
    default:
        break;
    }
    return unexpected_frame(b, c, op, body, len);
}

/* Parse the frames at the start of p[0..n). Returns the bytes consumed or a negative errno. */
static ssize_t conn_parse(struct bench *b, struct conn *c, const uint8_t *p, size_t n)
{
    size_t off = 0;

    while (off < n) {
        const uint8_t *body;
        const char *why = "";
        uint32_t blen;
        uint8_t op;
        ssize_t size;
        int r;

        size = rdzv_frame_peek(p + off, n - off, RDZV_MAX_MSG, &op, &body, &blen, &why);
        if (size < 0)
            return bench_fail(b, (int)size, "connection %u (%s): bad frame from rdzvd: %s",
                              conn_index(b, c), cs_names[c->state], why);
        if (size == 0)
            break;
        r = conn_frame(b, c, op, body, blen);
        if (r < 0)
            return r;
        off += (size_t)size;
    }
    return (ssize_t)off;
}

static int conn_readable(struct bench *b, struct conn *c)
{
    for (int i = 0; i < READS_PER_EVENT; i++) {
        ssize_t nr = recv(c->fd, b->scratch, READ_CHUNK, 0), used;
        const uint8_t *p = b->scratch;
        size_t avail = (size_t)nr;

        if (nr < 0 && errno == EINTR)
            continue;
        if (nr < 0 && errno == EAGAIN)
            return 0;
        if (nr < 0)
            return bench_fail(b, errno, "connection %u (state %s): recv failed: %s",
                              conn_index(b, c), cs_names[c->state], strerror(errno));
        if (nr == 0)
            return bench_fail(b, ECONNRESET, "connection %u (state %s): rdzvd closed it",
                              conn_index(b, c), cs_names[c->state]);
        if (rdzv_buf_avail(&c->in) > 0) {
            if (rdzv_buf_put(&c->in, b->scratch, avail) < 0)
                return bench_fail(b, ENOMEM, "out of memory buffering a frame");
            p = rdzv_buf_head(&c->in);
            avail = rdzv_buf_avail(&c->in);
        }
        used = conn_parse(b, c, p, avail);
        if (used < 0)
            return (int)used;
        if (rdzv_buf_avail(&c->in) > 0) {
            rdzv_buf_consume(&c->in, (size_t)used);
            if (rdzv_buf_avail(&c->in) == 0)
                rdzv_buf_free(&c->in);
        } else if ((size_t)used < avail &&
                   rdzv_buf_put(&c->in, p + used, avail - (size_t)used) < 0) {
            return bench_fail(b, ENOMEM, "out of memory buffering a frame");
        }
        if (nr < READ_CHUNK)
            return 0;
    }
    return 0;
}

static int conn_event(struct bench *b, struct conn *c, uint32_t events)
{
    if (c->state == CS_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof(err);

        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return 0;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        if (err != 0) {
            b->inflight--;
            return conn_connect_failed(b, c, err);
        }
        return conn_connected(b, c);
    }
    if ((events & EPOLLOUT) && c->tx) {
        int r = conn_write(b, c);

        if (r < 0)
            return r;
        if (!c->tx && conn_epoll(b, c, EPOLL_CTL_MOD, EPOLLIN) < 0)
            return -EIO;
    }
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
        return conn_readable(b, c);
    return 0;
}

/* Serve events until *count reaches b->n, an error, or the deadline. Returns 0 or -errno. */
static int run_until(struct bench *b, const uint32_t *count, const char *what)
{
    struct epoll_event evs[MAX_EVENTS];
    int r;

    while (*count < b->target) {
        int ne;

        r = start_connects(b);
        if (r < 0)
            return r;
        if (rdzv_now_ns() > b->deadline)
            return bench_fail(
                b, ETIMEDOUT,
                "timed out after %.0f s waiting for %s: %u of %u (connected %u, HELLO "
                "%u, JOIN written %u, JOINED %u, ROUND %u)",
                b->timeout_s, what, *count, b->target, b->nconnected, b->nhello, b->njoin_written,
                b->njoined, b->nround);
        ne = epoll_wait(b->epfd, evs, MAX_EVENTS, 100);
        if (ne < 0 && errno == EINTR)
            continue;
        if (ne < 0)
            return bench_fail(b, errno, "epoll_wait: %s", strerror(errno));
        for (int i = 0; i < ne; i++) {
            struct conn *c = &b->conns[evs[i].data.u32];

            r = conn_event(b, c, evs[i].events);
            if (r < 0)
                return r;
        }
    }
    return 0;
}

/* Build the HELLO frame and every connection's JOIN frame before anything is timed. */
static int build_frames(struct bench *b)
{
    struct rdzv_join jn = {
        .nproc = 1,
        .node_rank = -1,
        .min = b->n - b->lose,
        .max = b->n,
        .last_call_ms = 1000,
        .max_restarts = b->lose ? 1 : 0,
        .nccl = RDZV_NCCL_OFF,
        .nccl_ids = 1,
        /* Simulated agents send no heartbeats: the longest timeout keeps them members. */
        .heartbeat_timeout_ms = 3600000,
        .join_timeout_ms = RDZV_JOIN_TIMEOUT_MS,
    };
    int r;

    r = rdzv_msg_put_hello(&b->hello, "join-bench");
    if (r < 0)
        return bench_fail(b, r, "cannot build HELLO: %s", strerror(-r));
    snprintf(jn.run_id, sizeof(jn.run_id), "%s", b->run_id);
    for (uint32_t i = 0; i < b->n; i++) {
        size_t before = b->joins.len;

        /* Each a node of its own, as on a cluster (one name would be told it shares a host). */
        snprintf(jn.node_id, sizeof(jn.node_id), "sim-%u", i);
        snprintf(jn.host, sizeof(jn.host), "sim-%u", i);
        r = rdzv_msg_put_join(&b->joins, &jn);
        if (r < 0)
            return bench_fail(b, r, "cannot build JOIN: %s", strerror(-r));
        b->conns[i].join_off = (uint32_t)before;
        b->conns[i].join_len = (uint32_t)(b->joins.len - before);
    }
    return 0;
}

/* Write every JOIN back to back: the daemon sees them as fast as one client can send. */
static int send_joins(struct bench *b)
{
    int r;

    b->t_first_join = rdzv_now_ns();
    for (uint32_t i = 0; i < b->n; i++) {
        struct conn *c = &b->conns[i];

        c->state = CS_JOIN;
        c->tx_join = true;
        r = conn_start_tx(b, c, b->joins.data + c->join_off, c->join_len);
        if (r < 0)
            return r;
    }
    return 0;
}

static int raise_nofile(struct bench *b)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return bench_fail(b, errno, "getrlimit: %s", strerror(errno));
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            return bench_fail(b, errno, "setrlimit(RLIMIT_NOFILE, %llu): %s",
                              (unsigned long long)rl.rlim_max, strerror(errno));
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)b->n + FD_SPARE)
        return bench_fail(b, EMFILE, "%u agents need %u file descriptors; the hard limit is %llu",
                          b->n, b->n + FD_SPARE, (unsigned long long)rl.rlim_cur);
    return 0;
}

/* --lose: the last K agents drop their connections with a reset, as a host that died; the
 * others answer EVENT restart with READY and wait for the next ROUND. */
static int lose_nodes(struct bench *b)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};

    for (uint32_t i = b->n - b->lose; i < b->n; i++) {
        struct conn *c = &b->conns[i];

        (void)setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        (void)close(c->fd);
        c->fd = -1;
        c->state = CS_AGAIN;
    }
    b->t_lost = rdzv_now_ns();
    b->target = b->n - b->lose;
    return run_until(b, &b->nround2, "the next ROUND");
}

static int bench_run(struct bench *b)
{
    int r;

    r = raise_nofile(b);
    if (r < 0)
        return r;
    b->conns = calloc(b->n, sizeof(*b->conns));
    b->retry = calloc(b->n, sizeof(*b->retry));
    b->scratch = malloc(READ_CHUNK);
    if (!b->conns || !b->retry || !b->scratch)
        return bench_fail(b, ENOMEM, "out of memory for %u connections", b->n);
    for (uint32_t i = 0; i < b->n; i++)
        b->conns[i].fd = -1;
    b->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (b->epfd < 0)
        return bench_fail(b, errno, "epoll_create1: %s", strerror(errno));
    snprintf(b->run_id, sizeof(b->run_id), "join-bench-%d-%" PRIx64, (int)getpid(),
             (uint64_t)(rdzv_random_u64() & 0xffffffffffffu));
    r = build_frames(b);
    if (r < 0)
        return r;

    r = bench_sample_rss(b, &b->rss.before, NULL, "before connecting");
    if (r < 0)
        return r;
    b->target = b->n;
    b->t_start = rdzv_now_ns();
    b->deadline = b->t_start + (uint64_t)(b->timeout_s * NS_PER_S);
    r = run_until(b, &b->nhello, "HELLO");
    if (r < 0)
        return r;
    r = bench_sample_rss(b, &b->rss.connected, NULL, "once connected");
    if (r < 0)
        return r;

    r = send_joins(b);
    if (r < 0)
        return r;
    r = run_until(b, &b->nround, "ROUND");
    if (r < 0)
        return r;
    r = bench_sample_rss(b, &b->rss.round, &b->rss.peak, "after the round");
    if (r < 0)
        return r;
    r = bench_verify_rounds(b);
    return r < 0 || !b->lose ? r : lose_nodes(b);
}

static void bench_free(struct bench *b)
{
    for (uint32_t i = 0; b->conns && i < b->n; i++) {
        if (b->conns[i].fd >= 0)
            (void)close(b->conns[i].fd);
        rdzv_buf_free(&b->conns[i].in);
        free(b->conns[i].round);
    }
    if (b->epfd >= 0)
        (void)close(b->epfd);
    free(b->conns);
    free(b->retry);
    free(b->scratch);
    rdzv_buf_free(&b->hello);
    rdzv_buf_free(&b->joins);
    rdzv_buf_free(&b->ready);
}

static int parse_args(struct bench *b, int argc, char **argv)
{
    static const struct option opts[] = {
        {"endpoint", required_argument, NULL, 'e'},
        {"agents", required_argument, NULL, 'n'},
        {"pid", required_argument, NULL, 'p'},
        {"timeout", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},
        {"lose", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char host[64];
    uint16_t port = 0;
    uint64_t v;
    char *end;
    int o;

    while ((o = getopt_long(argc, argv, "e:n:p:t:l:jh", opts, NULL)) != -1) {
        switch (o) {
        case 'e':
            b->endpoint = optarg;
            break;
        case 'n':
            if (rdzv_parse_u64(optarg, &v) < 0 || v < 1 || v > MAX_AGENTS) {
                fprintf(stderr, "rdzv-join-bench: -n wants 1..%d, not '%s'\n", MAX_AGENTS, optarg);
                return -EINVAL;
            }
            b->n = (uint32_t)v;
            break;
        case 'p':
            if (rdzv_parse_u64(optarg, &v) < 0 || v < 1 || v > INT32_MAX) {
                fprintf(stderr, "rdzv-join-bench: bad --pid '%s'\n", optarg);
                return -EINVAL;
            }
            b->pid = (int)v;
            break;
        case 't':
            b->timeout_s = strtod(optarg, &end);
            if (*end || !(b->timeout_s > 0)) {
                fprintf(stderr, "rdzv-join-bench: bad --timeout '%s'\n", optarg);
                return -EINVAL;
            }
            break;
        case 'j':
            b->json = true;
            break;
        case 'l':
            if (rdzv_parse_u64(optarg, &v) < 0 || v > MAX_AGENTS) {
                fprintf(stderr, "rdzv-join-bench: bad --lose '%s'\n", optarg);
                return -EINVAL;
            }
            b->lose = (uint32_t)v;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -EINVAL;
        }
    }
    if (optind < argc || !b->endpoint) {
        fprintf(stderr, "rdzv-join-bench: %s\n",
                optind < argc ? "unexpected arguments" : "--endpoint HOST:PORT is required");
        usage(stderr);
        return -EINVAL;
    }
    if (b->lose >= b->n) {
        fprintf(stderr, "rdzv-join-bench: --lose %u leaves none of the %u agents\n", b->lose,
                b->n);
        return -EINVAL;
    }
    if (rdzv_parse_hostport(b->endpoint, host, sizeof(host), &port) < 0 || port == 0 ||
        inet_pton(AF_INET, host, &b->addr.sin_addr) != 1) {
        fprintf(stderr, "rdzv-join-bench: --endpoint wants IPv4:PORT, not '%s'\n", b->endpoint);
        return -EINVAL;
    }
    b->addr.sin_family = AF_INET;
    b->addr.sin_port = htons(port);
    return 0;
}

int main(int argc, char **argv)
{
    struct bench b = {
        .n = 1000,
        .timeout_s = 120,
        .epfd = -1,
        .rss = {-1, -1, -1, -1, -1},
        .master_port = -1,
    };
    int r;

    if (parse_args(&b, argc, argv) < 0)
        return 2;
    r = bench_run(&b);
    if (r < 0)
        fprintf(stderr, "rdzv-join-bench: %u agents: %s\n", b.n,
                b.error[0] ? b.error : strerror(-r));
    if (b.json)
        bench_report_json(&b, r == 0);
    else if (r == 0)
        bench_report_text(&b);
    bench_free(&b);
    return r < 0 ? 1 : 0;
}
