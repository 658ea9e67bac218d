/* SPDX-License-Identifier: Apache-2.0 */
/* test-repl-net.c: three replicas of a store on real sockets (127.0.0.1), each a libraft
 * instance with libraft's disk io (raft/uv.h, a directory each) and rdzvd's authenticating
 * transport (daemon/repl/rdzvd-repl-net.h), all on one libuv loop:
 *   - they elect a leader; writes through it reach every store;
 *   - connections that do not prove the token (garbage, a wrong MAC, silence) are closed before
 *     libraft reads a byte, and the cluster goes on;
 *   - the leader is closed: another is elected, and every write the old one acknowledged is
 *     there (after a barrier).
 * libraft 0.15 has no leader-change callback: the test looks at raft_state() on a 10 ms timer
 * (a test harness; rdzvd itself will learn of leadership from its own apply path). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <raft.h>
#include <raft/uv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <uv.h>

#include "common/rdzv-auth.h"
#include "common/rdzv-util.h"
#include "../tap.h"
#include "daemon/repl/rdzvd-repl-net.h"
#include "daemon/repl/rdzvd-repl.h"
#include "daemon/repl/rdzvd-replica.h"
#include "daemon/data/rdzvd-store.h"

#define N 3
#define WRITES 20
#define T_TEST_MS 30000

static const struct rdzv_limits lim = {
    .max_key_len = 256,
    .max_value_len = 4096,
    .max_keys_per_req = 16,
    .max_frame = 1 << 20,
    .max_outbuf = 1 << 20,
    .max_conns = 16,
    .max_store_bytes = 1 << 24,
    .max_wait_keys = 64,
    .max_queue_items = 1024,
};

struct replica {
    struct raft raft;
    struct raft_io io;
    struct raft_uv_transport tr;
    struct rdzvd_store *store;
    struct rdzvd_repl_fsm fsm;
    char dir[64];
    char addr[32];
    bool open, closed;
};

struct write {
    struct raft_apply req;
    int status;
    bool done;
};

enum phase { P_ELECT, P_WRITE, P_ROGUE, P_KILL, P_BARRIER, P_DONE };

static struct {
    uv_loop_t loop;
    uv_timer_t tick, guard;
    uv_async_t rogue_done;
    struct rdzv_token token;
    struct replica r[N];
    struct write w[WRITES];
    struct raft_barrier barrier;
    int barrier_status;
    bool barrier_done;
    enum phase phase;
    unsigned leader, old_leader;
    uint64_t t0, t_elected, t_killed, t_reelected;
    int rogue_result; /* 0: every rogue connection was closed on it */
    pthread_t rogue;
} T;

static void wake(struct rdzvd_waiter *w, void *ud)
{
    (void)w;
    (void)ud;
}

static int free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    ASSERT_TRUE(fd >= 0);
    ASSERT_OK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)));
    ASSERT_OK(getsockname(fd, (struct sockaddr *)&sa, &sl));
    port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

static int leader_index(unsigned skip)
{
    for (unsigned i = 0; i < N; i++)
        if (i != skip && T.r[i].open && raft_state(&T.r[i].raft) == RAFT_LEADER)
            return (int)i;
    return -1;
}

static void write_cb(struct raft_apply *req, int status, void *result)
{
    struct write *w = req->data;

    (void)result;
    w->status = status;
    w->done = true;
}

static void barrier_cb(struct raft_barrier *req, int status)
{
    (void)req;
    T.barrier_status = status;
    T.barrier_done = true;
}

/* ---- a client without the token, on a thread of its own (blocking sockets) ---- */

/* Connect to port, send p[0..n), then read: 0 when the replica closed the connection (EOF or
 * reset) within 3 s, having sent at most max_reply bytes; -1 otherwise. */
static int rogue_try(int port, const void *p, size_t n, size_t reply, const void *p2, size_t n2)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {.tv_sec = 3};
    uint8_t buf[256];
    size_t got = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0), r = -1;
    ssize_t k;

    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        goto out;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (n && write(fd, p, n) != (ssize_t)n)
        goto out;
    while (got < reply && (k = read(fd, buf + got, reply - got)) > 0)
        got += (size_t)k;
    if (got != reply)
        goto out;
    if (n2 && write(fd, p2, n2) != (ssize_t)n2)
        goto out;
    k = read(fd, buf, sizeof(buf));
    r = k == 0 || (k < 0 && errno == ECONNRESET) ? 0 : -1;
out:
    if (fd >= 0)
        close(fd);
    return r;
}

static void *rogue_main(void *arg)
{
    int port = atoi(strrchr(T.r[*(unsigned *)arg].addr, ':') + 1);
    uint8_t hello[8 + 8 + 1 + 9 + RDZV_NONCE_BYTES] = "RDZVRPL1";
    uint8_t zeros[RDZV_MAC_BYTES] = {0};
    int r = 0;

    /* Garbage: not a replica. */
    r |= rogue_try(port, "GET / HTTP/1.1\r\n\r\n", 18, 0, NULL, 0);
    /* A well-formed hello, then a proof made without the token. */
    rdzv_set_u64(hello + 8, 99);
    hello[16] = 9;
    memcpy(hello + 17, "127.0.0.1", 9);
    r |= rogue_try(port, hello, sizeof(hello), RDZV_NONCE_BYTES + RDZV_MAC_BYTES, zeros,
                   sizeof(zeros));
    T.rogue_result = r;
    uv_async_send(&T.rogue_done);
    return NULL;
}

/* ---- the phases, driven by the 10 ms tick ---- */

static void submit_writes(void)
{
    char key[16], val[16];

    for (unsigned k = 0; k < WRITES; k++) {
        struct raft_buffer buf;

        snprintf(key, sizeof(key), "k%u", k);
        snprintf(val, sizeof(val), "v%u", k);
        memset(&T.w[k], 0, sizeof(T.w[k]));
        T.w[k].req.data = &T.w[k];
        ASSERT_OK(rdzvd_repl_entry(&buf, RDZVD_CHANGE_SET, key, strlen(key), val, strlen(val)));
        ASSERT_OK(raft_apply(&T.r[T.leader].raft, &T.w[k].req, &buf, 1, write_cb));
    }
}

static bool writes_done(void)
{
    for (unsigned k = 0; k < WRITES; k++)
        if (!T.w[k].done)
            return false;
    return true;
}

static void closed_cb(struct raft *raft)
{
    struct replica *rp = rdzv_container_of(raft, struct replica, raft);

    raft_uv_close(&rp->io);
    rp->closed = true;
}

static void close_replica(unsigned i)
{
    T.r[i].open = false;
    raft_close(&T.r[i].raft, closed_cb);
}

static bool has(struct rdzvd_store *s, const char *key, const char *val)
{
    const uint8_t *v;
    size_t vlen;

    return rdzvd_store_get(s, key, strlen(key), &v, &vlen) == 0 && vlen == strlen(val) &&
           memcmp(v, val, vlen) == 0;
}

static void tick_cb(uv_timer_t *t)
{
    int l;

    (void)t;
    switch (T.phase) {
    case P_ELECT:
        if ((l = leader_index(N)) < 0)
            return;
        T.leader = (unsigned)l;
        T.t_elected = uv_hrtime();
        submit_writes();
        T.phase = P_WRITE;
        return;
    case P_WRITE:
        if (!writes_done())
            return;
        for (unsigned k = 0; k < WRITES; k++)
            ASSERT_EQ(T.w[k].status, 0);
        for (unsigned i = 0; i < N; i++)
            if (raft_last_applied(&T.r[i].raft) < raft_last_applied(&T.r[T.leader].raft))
                return; /* a follower applies on the next heartbeat */
        for (unsigned i = 0; i < N; i++)
            ASSERT_TRUE(has(T.r[i].store, "k19", "v19"));
        T.phase = P_ROGUE;
        ASSERT_OK(pthread_create(&T.rogue, NULL, rogue_main, &T.leader));
        return;
    case P_ROGUE: /* rogue_done_cb moves on */
        return;
    case P_KILL:
        if ((l = leader_index(T.old_leader)) < 0)
            return;
        T.leader = (unsigned)l;
        T.t_reelected = uv_hrtime();
        ASSERT_OK(raft_barrier(&T.r[T.leader].raft, &T.barrier, barrier_cb));
        T.phase = P_BARRIER;
        return;
    case P_BARRIER:
        if (!T.barrier_done)
            return;
        ASSERT_EQ(T.barrier_status, 0);
        for (unsigned k = 0; k < WRITES; k++) {
            char key[16], val[16];

            snprintf(key, sizeof(key), "k%u", k);
            snprintf(val, sizeof(val), "v%u", k);
            ASSERT_TRUE(has(T.r[T.leader].store, key, val));
        }
        T.phase = P_DONE;
        for (unsigned i = 0; i < N; i++)
            if (T.r[i].open)
                close_replica(i);
        uv_close((uv_handle_t *)&T.tick, NULL);
        uv_close((uv_handle_t *)&T.guard, NULL);
        uv_close((uv_handle_t *)&T.rogue_done, NULL);
        return;
    case P_DONE:
        return;
    }
}

static void rogue_done_cb(uv_async_t *a)
{
    const struct rdzvd_repl_net_stats *st = rdzvd_repl_net_stats(&T.r[T.leader].tr);

    (void)a;
    pthread_join(T.rogue, NULL);
    ASSERT_EQ(T.rogue_result, 0);
    ASSERT_TRUE(st->refused >= 2);
    /* The cluster still works: the kill phase needs a quorum of the two others. */
    T.old_leader = T.leader;
    T.t_killed = uv_hrtime();
    close_replica(T.old_leader);
    T.phase = P_KILL;
}

static void guard_cb(uv_timer_t *t)
{
    (void)t;
    fprintf(stderr, "test-repl-net: stuck in phase %d\n", T.phase);
    abort();
}

static void test_three_replicas(void)
{
    struct raft_configuration conf;
    char err[200];

    ASSERT_OK(rdzv_auth_crypto_load(err, sizeof(err)));
    ASSERT_OK(rdzv_token_parse((const uint8_t *)"0123456789abcdef-replica-token", 30, &T.token,
                               err, sizeof(err)));
    ASSERT_OK(uv_loop_init(&T.loop));
    raft_configuration_init(&conf);
    for (unsigned i = 0; i < N; i++) {
        snprintf(T.r[i].addr, sizeof(T.r[i].addr), "127.0.0.1:%d", free_port());
        ASSERT_OK(raft_configuration_add(&conf, i + 1, T.r[i].addr, RAFT_VOTER));
    }
    for (unsigned i = 0; i < N; i++) {
        struct replica *rp = &T.r[i];

        snprintf(rp->dir, sizeof(rp->dir), "/tmp/rdzv-repl-XXXXXX");
        ASSERT_NOT_NULL(mkdtemp(rp->dir));
        ASSERT_OK(rdzvd_store_new(&lim, wake, &rp->store));
        rdzvd_repl_fsm_init(&rp->fsm, rp->store, NULL);
        ASSERT_OK(rdzvd_repl_net_init(&rp->tr, &T.loop, &T.token, NULL, 2000));
        ASSERT_OK(raft_uv_init(&rp->io, &T.loop, rp->dir, &rp->tr));
        ASSERT_OK(raft_init(&rp->raft, &rp->io, &rp->fsm.fsm, i + 1, rp->addr));
        raft_set_election_timeout(&rp->raft, 300);
        raft_set_heartbeat_timeout(&rp->raft, 50);
        ASSERT_OK(raft_bootstrap(&rp->raft, &conf));
        ASSERT_OK(raft_start(&rp->raft));
        rp->open = true;
    }
    raft_configuration_close(&conf);
    ASSERT_OK(uv_timer_init(&T.loop, &T.tick));
    ASSERT_OK(uv_timer_init(&T.loop, &T.guard));
    ASSERT_OK(uv_async_init(&T.loop, &T.rogue_done, rogue_done_cb));
    ASSERT_OK(uv_timer_start(&T.tick, tick_cb, 10, 10));
    ASSERT_OK(uv_timer_start(&T.guard, guard_cb, T_TEST_MS, 0));
    T.t0 = uv_hrtime();
    ASSERT_OK(uv_run(&T.loop, UV_RUN_DEFAULT));
    ASSERT_EQ(T.phase, P_DONE);
    for (unsigned i = 0; i < N; i++) {
        char cmd[128];

        ASSERT_TRUE(T.r[i].closed);
        rdzvd_store_free(T.r[i].store);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", T.r[i].dir);
        ASSERT_OK(system(cmd));
    }
    ASSERT_OK(uv_loop_close(&T.loop));
    printf("# first leader after %.0f ms; a new leader %.0f ms after the old one was closed\n",
           (double)(T.t_elected - T.t0) / 1e6, (double)(T.t_reelected - T.t_killed) / 1e6);
}

/* ---- the transport alone: its bounds and refusals, one case at a time ---- */

#define T_WAIT_MS 20000 /* any one wait (generous: a loaded machine) */

static uv_loop_t L;

/* Run L until *flag (set by a callback or by a client thread) or fail after T_WAIT_MS. */
static void spin(const int *flag)
{
    uint64_t t0 = rdzv_now_ms();

    while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE)) {
        ASSERT_TRUE(rdzv_now_ms() - t0 < T_WAIT_MS);
        uv_run(&L, UV_RUN_NOWAIT);
        usleep(1000);
    }
}

struct tr {
    struct raft_uv_transport t;
    char addr[32];
    int closed;
    /* accepted connections */
    int accepts;
    raft_id peer_id;
    char peer[64];
    uint8_t first[16]; /* the first bytes read on an accepted stream (libraft's, not ours) */
    size_t nfirst;
    int first_done;
};

static void tr_closed(struct raft_uv_transport *t)
{
    __atomic_store_n(&rdzv_container_of(t, struct tr, t)->closed, 1, __ATOMIC_RELEASE);
}

static void free_stream(uv_handle_t *h)
{
    raft_free(h);
}

static void first_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct tr *x = h->data;

    (void)suggested;
    buf->base = (char *)x->first + x->nfirst;
    buf->len = sizeof(x->first) - x->nfirst;
}

static void first_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct tr *x = s->data;

    (void)buf;
    if (nread > 0)
        x->nfirst += (size_t)nread;
    if (nread < 0 || x->nfirst == sizeof(x->first)) {
        uv_close((uv_handle_t *)s, free_stream);
        x->first_done = 1;
    }
}

/* libraft's accept callback: note who, then read what follows the handshake. */
static void tr_accept(struct raft_uv_transport *t, raft_id id, const char *address,
                      struct uv_stream_s *stream)
{
    struct tr *x = rdzv_container_of(t, struct tr, t);

    x->accepts++;
    x->peer_id = id;
    snprintf(x->peer, sizeof(x->peer), "%s", address);
    stream->data = x;
    ASSERT_OK(uv_read_start(stream, first_alloc, first_read));
}

static void tr_open(struct tr *x, const struct rdzv_token *tok, uint64_t ms, raft_id id,
                    bool listen)
{
    memset(x, 0, sizeof(*x));
    snprintf(x->addr, sizeof(x->addr), "127.0.0.1:%d", free_port());
    ASSERT_OK(rdzvd_repl_net_init(&x->t, &L, tok, NULL, ms));
    ASSERT_OK(x->t.init(&x->t, id, x->addr));
    if (listen)
        ASSERT_OK(x->t.listen(&x->t, tr_accept));
}

static void never_cb(struct raft_uv_connect *req, struct uv_stream_s *stream, int status)
{
    (void)req, (void)stream, (void)status;
    ASSERT_TRUE(!"a connect after the transport's close was answered");
}

static void tr_close(struct tr *x)
{
    struct raft_uv_connect req;

    x->t.close(&x->t, tr_closed);
    spin(&x->closed);
    ASSERT_NULL(x->t.impl);
    /* libraft 0.15 may still connect on its way out: refused, no crash. */
    ASSERT_EQ(x->t.connect(&x->t, &req, 2, "127.0.0.1:1", never_cb), RAFT_NOCONNECTION);
}

struct conn {
    struct raft_uv_connect req;
    int status;
    int done;
};

static void conn_cb(struct raft_uv_connect *req, struct uv_stream_s *stream, int status)
{
    struct conn *c = rdzv_container_of(req, struct conn, req);

    ASSERT_TRUE((status == 0) == (stream != NULL));
    if (stream)
        uv_close((uv_handle_t *)stream, free_stream);
    c->status = status;
    c->done = 1;
}

static int connect_to(struct tr *from, const char *addr, raft_id id)
{
    struct conn c = {0};
    int r = from->t.connect(&from->t, &c.req, id, addr, conn_cb);

    if (r != 0)
        return r;
    spin(&c.done);
    return c.status;
}

static int port_of(const struct tr *x)
{
    return atoi(strrchr(x->addr, ':') + 1);
}

/* Addresses are numeric IP:port; the transport's own address is checked at init and listen. */
static void test_addresses(void)
{
    static const char *bad[] = {"", "127.0.0.1", ":80", "127.0.0.1:", "127.0.0.1:0",
                                "127.0.0.1:65536", "127.0.0.1:8x", "[::1:80", "[]:80", "[zz]:80",
                                "localhost:80", "1.2.3:80", "::1:80"};
    struct sockaddr_storage ss;
    char longhost[300];
    struct tr x, y;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(tap_note, sizeof(tap_note), "'%s'", bad[i]);
        ASSERT_EQ(rdzvd_repl_parse_addr(bad[i], &ss), -EINVAL);
    }
    tap_note[0] = '\0';
    memset(longhost, '1', sizeof(longhost));
    snprintf(longhost + 280, 20, ":80");
    ASSERT_EQ(rdzvd_repl_parse_addr(longhost, &ss), -EINVAL);
    ASSERT_OK(rdzvd_repl_parse_addr("127.0.0.1:65535", &ss));
    ASSERT_TRUE(ss.ss_family == AF_INET && ntohs(((struct sockaddr_in *)&ss)->sin_port) == 65535);
    ASSERT_OK(rdzvd_repl_parse_addr("[::1]:1", &ss));
    ASSERT_EQ(ss.ss_family, AF_INET6);

    ASSERT_OK(uv_loop_init(&L));
    memset(&x, 0, sizeof(x));
    ASSERT_OK(rdzvd_repl_net_init(&x.t, &L, NULL, NULL, 0));
    ASSERT_EQ(x.t.init(&x.t, 1, ""), RAFT_INVALID);
    ASSERT_EQ(x.t.init(&x.t, 1, longhost), RAFT_INVALID);
    ASSERT_OK(x.t.init(&x.t, 1, "nonsense"));
    ASSERT_EQ(x.t.listen(&x.t, tr_accept), RAFT_INVALID);
    ASSERT_NOT_NULL(strstr(x.t.errmsg, "not IP:port"));
    tr_close(&x);
    /* A port already taken: an I/O error naming it; the listener goes with the transport. */
    tr_open(&x, NULL, 0, 1, true);
    memset(&y, 0, sizeof(y));
    ASSERT_OK(rdzvd_repl_net_init(&y.t, &L, NULL, NULL, 0));
    ASSERT_OK(y.t.init(&y.t, 2, x.addr));
    ASSERT_EQ(y.t.listen(&y.t, tr_accept), RAFT_IOERR);
    ASSERT_NOT_NULL(strstr(y.t.errmsg, x.addr));
    /* Connecting to something that is not an address fails at once. */
    {
        struct conn c = {0};

        ASSERT_EQ(y.t.connect(&y.t, &c.req, 1, "nowhere", conn_cb), RAFT_NOCONNECTION);
        ASSERT_FALSE(c.done);
    }
    tr_close(&y);
    tr_close(&x);
    ASSERT_OK(uv_loop_close(&L));
}

/* Both sides must hold the token: each outcome of a handshake between two transports. */
static void test_handshakes(void)
{
    struct rdzv_token other;
    char err[200];
    struct tr s, c;
    const struct rdzvd_repl_net_stats *ss, *cs;

    ASSERT_OK(rdzv_auth_crypto_load(err, sizeof(err)));
    ASSERT_OK(rdzv_token_parse((const uint8_t *)"0123456789abcdef-replica-token", 30, &T.token,
                               err, sizeof(err)));
    ASSERT_OK(rdzv_token_parse((const uint8_t *)"0123456789abcdef-another-token", 30, &other, err,
                               sizeof(err)));
    ASSERT_OK(uv_loop_init(&L));

    /* The same token: connected; the server hands libraft the client's id and address. */
    tr_open(&s, &T.token, 0, 1, true);
    tr_open(&c, &T.token, 0, 7, false);
    ss = rdzvd_repl_net_stats(&s.t);
    cs = rdzvd_repl_net_stats(&c.t);
    ASSERT_EQ(connect_to(&c, s.addr, 1), 0);
    ASSERT_EQ(cs->connected, 1);
    while (s.accepts == 0)
        uv_run(&L, UV_RUN_ONCE);
    ASSERT_TRUE(s.peer_id == 7 && strcmp(s.peer, c.addr) == 0 && ss->accepted == 1);
    /* A different token: the client sees the server cannot prove it and gives up; the server
     * sees the client go before its proof. */
    tr_close(&c);
    tr_open(&c, &other, 0, 7, false);
    cs = rdzvd_repl_net_stats(&c.t);
    ASSERT_EQ(connect_to(&c, s.addr, 1), RAFT_NOCONNECTION);
    ASSERT_EQ(cs->failed, 1);
    while (ss->refused < 1)
        uv_run(&L, UV_RUN_ONCE);
    /* A client without a token proves nothing (zeros): refused, never given to libraft. */
    tr_close(&c);
    tr_open(&c, NULL, 0, 7, false);
    connect_to(&c, s.addr, 1); /* its side cannot tell: the server's answer is to close */
    while (ss->refused < 2)
        uv_run(&L, UV_RUN_ONCE);
    ASSERT_EQ(s.accepts, 1);
    ASSERT_EQ(ss->accepted, 1);
    tr_close(&c);
    tr_close(&s);
    /* A server without a token cannot prove one to a client that holds it. */
    tr_open(&s, NULL, 0, 1, true);
    tr_open(&c, &T.token, 0, 7, false);
    ASSERT_EQ(connect_to(&c, s.addr, 1), RAFT_NOCONNECTION);
    /* Nobody listening: refused by the kernel. */
    tr_close(&s);
    ASSERT_EQ(connect_to(&c, s.addr, 1), RAFT_NOCONNECTION);
    tr_close(&c);
    /* Neither has a token (a trusted network): connected. */
    tr_open(&s, NULL, 0, 1, true);
    tr_open(&c, NULL, 0, 7, false);
    ASSERT_EQ(connect_to(&c, s.addr, 1), 0);
    while (s.accepts == 0)
        uv_run(&L, UV_RUN_ONCE);
    tr_close(&c);
    tr_close(&s);
    rdzv_token_wipe(&other);
    uv_run(&L, UV_RUN_DEFAULT);
    ASSERT_OK(uv_loop_close(&L));
}

/* An outbound handshake to a peer that accepts but never answers ends at the deadline; one still
 * in progress when the transport closes is answered RAFT_CANCELED, exactly once. */
static void test_outbound_deadline_and_close(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    char addr[32];
    struct tr c;
    struct conn k = {0};
    uint64_t t0;

    ASSERT_TRUE(fd >= 0);
    ASSERT_OK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)));
    ASSERT_OK(listen(fd, 8)); /* the kernel completes connections; nobody reads them */
    ASSERT_OK(getsockname(fd, (struct sockaddr *)&sa, &sl));
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(sa.sin_port));
    ASSERT_OK(uv_loop_init(&L));
    tr_open(&c, &T.token, 200, 7, false);
    t0 = rdzv_now_ms();
    ASSERT_EQ(connect_to(&c, addr, 1), RAFT_NOCONNECTION);
    ASSERT_TRUE(rdzv_now_ms() - t0 >= 150);
    /* Closed while connecting and while waiting for the challenge. */
    ASSERT_OK(c.t.connect(&c.t, &k.req, 1, addr, conn_cb));
    c.t.close(&c.t, tr_closed);
    ASSERT_TRUE(k.done && k.status == RAFT_CANCELED);
    spin(&c.closed);
    tr_open(&c, &T.token, 0, 7, false);
    memset(&k, 0, sizeof(k));
    ASSERT_OK(c.t.connect(&c.t, &k.req, 1, addr, conn_cb));
    for (int i = 0; i < 50; i++)
        uv_run(&L, UV_RUN_NOWAIT), usleep(1000);
    ASSERT_FALSE(k.done);
    c.t.close(&c.t, tr_closed);
    ASSERT_TRUE(k.done && k.status == RAFT_CANCELED);
    spin(&c.closed);
    uv_run(&L, UV_RUN_DEFAULT);
    ASSERT_OK(uv_loop_close(&L));
    close(fd);
}

/* ---- inbound: a raw client on a thread of its own (blocking sockets) ---- */

struct raw {
    int port;
    int (*fn)(struct raw *);
    int result, done;
    pthread_t th;
};

static int raw_connect(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {.tv_sec = 10};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* 0 when the other side closes fd (EOF or reset) before sending anything more. */
static int raw_closed(int fd)
{
    uint8_t b[64];
    ssize_t k = read(fd, b, sizeof(b));

    return k == 0 || (k < 0 && errno == ECONNRESET) ? 0 : -1;
}

static int raw_read_all(int fd, uint8_t *p, size_t n)
{
    size_t got = 0;
    ssize_t k;

    while (got < n && (k = read(fd, p + got, n - got)) > 0)
        got += (size_t)k;
    return got == n ? 0 : -1;
}

static size_t hello(uint8_t *p, uint64_t id, const char *addr, const uint8_t *cn)
{
    size_t n = strlen(addr);

    memcpy(p, "RDZVRPL1", 8);
    rdzv_set_u64(p + 8, id);
    p[16] = (uint8_t)n;
    memcpy(p + 17, addr, n);
    memcpy(p + 17 + n, cn, RDZV_NONCE_BYTES);
    return 17 + n + RDZV_NONCE_BYTES;
}

static void *raw_main(void *arg)
{
    struct raw *r = arg;

    r->result = r->fn(r);
    __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int raw_run(int port, int (*fn)(struct raw *))
{
    struct raw r = {.port = port, .fn = fn};

    ASSERT_OK(pthread_create(&r.th, NULL, raw_main, &r));
    spin(&r.done);
    pthread_join(r.th, NULL);
    return r.result;
}

static int bad_magic(struct raw *r)
{
    int fd = raw_connect(r->port), rc;

    rc = fd < 0 || write(fd, "RDZVRPL0\0\0\0\0\0\0\0\1\11", 17) != 17 ? -1 : raw_closed(fd);
    close(fd);
    return rc;
}

static int id_zero(struct raw *r)
{
    uint8_t p[400], cn[RDZV_NONCE_BYTES] = {1};
    size_t n = hello(p, 0, "127.0.0.1:1", cn);
    int fd = raw_connect(r->port), rc;

    rc = fd < 0 || write(fd, p, n) != (ssize_t)n ? -1 : raw_closed(fd);
    close(fd);
    return rc;
}

static int no_address(struct raw *r)
{
    uint8_t p[400], cn[RDZV_NONCE_BYTES] = {1};
    int fd = raw_connect(r->port), rc;

    hello(p, 5, "", cn);
    rc = fd < 0 || write(fd, p, 17) != 17 ? -1 : raw_closed(fd);
    close(fd);
    return rc;
}

/* Half a hello, then EOF. */
static int half_hello(struct raw *r)
{
    int fd = raw_connect(r->port), rc;

    rc = fd < 0 || write(fd, "RDZVR", 5) != 5 || shutdown(fd, SHUT_WR) < 0 ? -1 : raw_closed(fd);
    close(fd);
    return rc;
}

/* Connected, then silent: closed at the deadline. */
static int silent(struct raw *r)
{
    int fd = raw_connect(r->port), rc = fd < 0 ? -1 : raw_closed(fd);

    close(fd);
    return rc;
}

/* The longest address a hello may claim (255 bytes), a challenge, then a wrong proof. */
static int wrong_proof(struct raw *r)
{
    uint8_t p[400], ch[64], cn[RDZV_NONCE_BYTES] = {2}, bad[RDZV_MAC_BYTES];
    char addr[256];
    size_t n;
    int fd = raw_connect(r->port), rc = -1;

    memset(addr, '9', 255);
    addr[255] = '\0';
    n = hello(p, 5, addr, cn);
    if (fd < 0 || write(fd, p, n) != (ssize_t)n || raw_read_all(fd, ch, sizeof(ch)) < 0)
        goto out;
    /* The server's MAC is right for our token... */
    ASSERT_OK(rdzv_auth_mac(&T.token, true, ch, cn, bad));
    if (memcmp(bad, ch + RDZV_NONCE_BYTES, RDZV_MAC_BYTES) != 0)
        goto out;
    /* ... and ours is its own: a replay of it does not prove the token. */
    if (write(fd, ch + RDZV_NONCE_BYTES, RDZV_MAC_BYTES) != RDZV_MAC_BYTES)
        goto out;
    rc = raw_closed(fd);
out:
    close(fd);
    return rc;
}

/* A RequestVoteResult as libraft 0.15 writes it: preamble (type 4, 24 bytes), term 1, granted. */
static const uint8_t VOTE_RESULT[40] = {4, 0, 0, 0, 0, 0, 0, 0, 24, 0, 0, 0, 0, 0, 0, 0,
                                        1, 0, 0, 0, 0, 0, 0, 0, 1};
/* An InstallSnapshot of 73 bytes whose configuration claims 2^62 bytes. */
static const uint8_t HUGE_CONF[73] = {5, 0, 0, 0, 0, 0, 0, 0, 57, 0, 0, 0, 0, 0, 0, 0,
                                      1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
                                      1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
                                      0, 0, 0, 0, 0, 0, 0, 0x40, 1};

/* The right proof, then msg in the same write: the guard checks it, passes it to libraft's end
 * when it is good, and closes the link when it is not. */
static int proof_then(struct raw *r, const uint8_t *msg, size_t len)
{
    uint8_t p[400], ch[64], cn[RDZV_NONCE_BYTES] = {3}, mac[RDZV_MAC_BYTES + 128];
    size_t n = hello(p, 9, "127.0.0.1:4242", cn);
    int fd = raw_connect(r->port), rc = -1;

    ASSERT_TRUE(len <= 128);
    if (fd < 0 || write(fd, p, n) != (ssize_t)n || raw_read_all(fd, ch, sizeof(ch)) < 0)
        goto out;
    ASSERT_OK(rdzv_auth_mac(&T.token, false, ch, cn, mac));
    memcpy(mac + RDZV_MAC_BYTES, msg, len);
    if (write(fd, mac, RDZV_MAC_BYTES + len) != (ssize_t)(RDZV_MAC_BYTES + len))
        goto out;
    rc = raw_closed(fd);
out:
    close(fd);
    return rc;
}

static int huge_conf(struct raw *r)
{
    return proof_then(r, HUGE_CONF, sizeof(HUGE_CONF)); /* the guard closes it */
}

static int right_proof(struct raw *r)
{
    return proof_then(r, VOTE_RESULT, sizeof(VOTE_RESULT)); /* the test closes it after 16 */
}

/* The right proof, then 16 bytes that are no Raft message. */
static int right_proof_raw(struct raw *r)
{
    return proof_then(r, (const uint8_t *)"LIBRAFT-MESSAGE!", 16);
}

/* 32 connections in their handshake at once: the 33rd is closed at accept, the others not. */
static int too_many(struct raw *r)
{
    int fds[RDZVD_REPL_HANDSHAKES_MAX + 1], rc = -1;
    unsigned n = 0;

    for (; n < RDZVD_REPL_HANDSHAKES_MAX; n++)
        if ((fds[n] = raw_connect(r->port)) < 0)
            goto out;
    usleep(200 * 1000); /* let the server accept them all first */
    if ((fds[n] = raw_connect(r->port)) < 0)
        goto out;
    n++;
    if (raw_closed(fds[n - 1]) < 0)
        goto out;
    {
        struct pollfd pf = {.fd = fds[0], .events = POLLIN};

        rc = poll(&pf, 1, 0) == 0 ? 0 : -1; /* the first one is still open, nothing to read */
    }
out:
    while (n > 0)
        close(fds[--n]);
    return rc;
}

/* Whatever a connection sends that is not a replica proving the token, the server closes it
 * before libraft reads a byte, counts it, and goes on; a replica that proves it is handed over
 * with exactly the handshake read. */
static void test_inbound_refusals(void)
{
    struct tr s;
    const struct rdzvd_repl_net_stats *st;
    uint64_t refused = 0;
    static const struct {
        const char *what;
        int (*fn)(struct raw *);
    } cases[] = {{"bad magic", bad_magic},   {"id 0", id_zero},     {"no address", no_address},
                 {"half a hello", half_hello}, {"silent", silent}, {"wrong proof", wrong_proof}};

    ASSERT_OK(uv_loop_init(&L));
    tr_open(&s, &T.token, 300, 1, true);
    st = rdzvd_repl_net_stats(&s.t);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(tap_note, sizeof(tap_note), "%s", cases[i].what);
        ASSERT_OK(raw_run(port_of(&s), cases[i].fn));
        while (st->refused < ++refused)
            uv_run(&L, UV_RUN_ONCE);
        ASSERT_EQ(st->refused, refused);
        ASSERT_EQ(s.accepts, 0);
    }
    tap_note[0] = '\0';
    ASSERT_OK(raw_run(port_of(&s), right_proof));
    ASSERT_TRUE(s.accepts == 1 && st->accepted == 1 && s.peer_id == 9);
    ASSERT_EQ(strcmp(s.peer, "127.0.0.1:4242"), 0);
    ASSERT_TRUE(s.first_done && s.nfirst == 16);
    ASSERT_MEMEQ(s.first, VOTE_RESULT, 16); /* libraft reads the message the guard passed */
    ASSERT_EQ(st->malformed, 0);
    /* What is not a Raft message never reaches libraft: the link closes, counted and logged. */
    for (int k = 0; k < 2; k++) {
        s.first_done = 0;
        s.nfirst = 0;
        ASSERT_OK(raw_run(port_of(&s), k ? huge_conf : right_proof_raw));
        ASSERT_EQ(st->malformed, (uint64_t)k + 1);
        while (!s.first_done)
            uv_run(&L, UV_RUN_ONCE); /* libraft's end sees EOF, with nothing before it */
        ASSERT_TRUE(s.accepts == k + 2 && s.nfirst == 0);
    }
    tr_close(&s);

    /* The bound on handshakes at once (a deadline long enough that none ends meanwhile); the
     * transport closes with 32 still in their handshake. */
    tr_open(&s, &T.token, 60000, 1, true);
    st = rdzvd_repl_net_stats(&s.t);
    ASSERT_OK(raw_run(port_of(&s), too_many));
    ASSERT_TRUE(st->refused >= 1);
    ASSERT_EQ(st->accepted, 0);
    tr_close(&s);
    uv_run(&L, UV_RUN_DEFAULT);
    ASSERT_OK(uv_loop_close(&L));
}

/* ---- rdzvd_replica: one member's life on the same transport ---- */

struct hooks_seen {
    int pending, settled, closed;
    int last_status;
};

static void h_pending(void *ud)
{
    ((struct hooks_seen *)ud)->pending++;
}

static void h_settled(void *ud, int status)
{
    struct hooks_seen *h = ud;

    h->settled++;
    h->last_status = status;
}

static void h_closed(void *ud)
{
    ((struct hooks_seen *)ud)->closed = 1;
}

static const struct rdzvd_replica_hooks hooks = {h_pending, h_settled, h_closed};

/* A port p with p + 1 free: p is never bound, only p + 1 (its Raft link) is. */
static int port_pair(void)
{
    int q = free_port();

    ASSERT_TRUE(q > 1);
    return q - 1;
}

static void until_role(struct rdzvd_replica *r, enum rdzvd_role want)
{
    uint64_t t0 = rdzv_now_ms();

    while (rdzvd_replica_role(r) != want) {
        ASSERT_TRUE(rdzv_now_ms() - t0 < T_WAIT_MS);
        uv_run(&L, UV_RUN_NOWAIT);
        usleep(1000);
    }
}

static void replica_close(struct rdzvd_replica *r, struct hooks_seen *h)
{
    rdzvd_replica_close(r);
    rdzvd_replica_close(r); /* safe twice */
    ASSERT_EQ(rdzvd_replica_role(r), RDZVD_ROLE_STOPPED);
    spin(&h->closed);
    uv_run(&L, UV_RUN_DEFAULT);
    rdzvd_replica_free(r);
}

/* A replica of one leads, serves after its barrier, and commits what changes its store (and its
 * job table) in entries; restarted on its directory, it replays them into a new store. A replica
 * of two alone never leads, and a change it cannot propose fails it (-ESTALE) for good. Bad
 * directories are refused. */
static void test_replica_life(void)
{
    struct rdzvd_peers peers;
    struct rdzvd_store *store, *jobs;
    struct rdzvd_replica *r;
    struct hooks_seen h = {0};
    char list[128], err[200], dir[64] = "/tmp/rdzv-replica-XXXXXX", sub[128], cmd[160];
    int port = port_pair();
    FILE *f;

    ASSERT_NOT_NULL(mkdtemp(dir));
    snprintf(sub, sizeof(sub), "%s/raft", dir);
    snprintf(list, sizeof(list), "127.0.0.1:%d", port);
    ASSERT_OK(rdzvd_peers_parse(list, 1, 0, &peers, err, sizeof(err)));
    ASSERT_OK(uv_loop_init(&L));
    ASSERT_OK(rdzvd_store_new(&lim, wake, &store));
    ASSERT_OK(rdzvd_store_new(&lim, wake, &jobs));

    /* Its directory under a file: cannot be created. A file where it should be: no log. */
    snprintf(cmd, sizeof(cmd), "%s/file", dir);
    ASSERT_NOT_NULL(f = fopen(cmd, "w"));
    fclose(f);
    snprintf(cmd, sizeof(cmd), "%s/file/raft", dir);
    ASSERT_EQ(rdzvd_replica_new(&L, &peers, cmd, &T.token, store, jobs, &hooks, &h, &r),
              -ENOTDIR);
    snprintf(cmd, sizeof(cmd), "%s/file", dir);
    ASSERT_EQ(rdzvd_replica_new(&L, &peers, cmd, &T.token, store, jobs, &hooks, &h, &r), -EIO);
    uv_run(&L, UV_RUN_DEFAULT);

    ASSERT_OK(rdzvd_replica_new(&L, &peers, sub, &T.token, store, jobs, &hooks, &h, &r));
    ASSERT_TRUE(rdzvd_replica_id(r) == 1 && rdzvd_replica_count(r) == 1);
    ASSERT_OK(rdzvd_replica_start(r));
    until_role(r, RDZVD_ROLE_LEADER);
    ASSERT_EQ(h.settled, 1); /* the barrier */
    ASSERT_EQ(strcmp(rdzvd_replica_leader(r), list), 0);
    ASSERT_FALSE(rdzvd_replica_busy(r));
    ASSERT_OK(rdzvd_replica_flush(r)); /* nothing to flush */
    ASSERT_OK(rdzvd_store_set(store, "k", 1, "v1", 2));
    ASSERT_OK(rdzvd_store_set(store, "k2", 2, "v2", 2));
    ASSERT_OK(rdzvd_store_set(jobs, "job", 3, "rec", 3));
    ASSERT_EQ(h.pending, 1); /* the first change only */
    ASSERT_TRUE(rdzvd_replica_busy(r));
    ASSERT_OK(rdzvd_replica_flush(r));
    ASSERT_TRUE(rdzvd_replica_busy(r));
    ASSERT_OK(rdzvd_store_delete(store, "k2", 2)); /* while in flight: no new pending */
    ASSERT_OK(rdzvd_replica_flush(r));              /* waits for the one in flight */
    ASSERT_EQ(h.pending, 1);
    while (h.settled < 2)
        uv_run(&L, UV_RUN_ONCE);
    ASSERT_EQ(h.last_status, 0);
    ASSERT_TRUE(rdzvd_replica_busy(r)); /* the delete is still to go */
    ASSERT_OK(rdzvd_replica_flush(r));
    while (h.settled < 3)
        uv_run(&L, UV_RUN_ONCE);
    ASSERT_EQ(h.last_status, 0);
    ASSERT_FALSE(rdzvd_replica_busy(r));
    replica_close(r, &h);
    ASSERT_OK(rdzvd_store_set(store, "after", 5, "close", 5)); /* no longer recorded */
    rdzvd_store_free(store);
    rdzvd_store_free(jobs);

    /* Restarted on the same directory (no bootstrap again, no token: a warning): it replays the
     * log into empty stores. */
    memset(&h, 0, sizeof(h));
    ASSERT_OK(rdzvd_store_new(&lim, wake, &store));
    ASSERT_OK(rdzvd_store_new(&lim, wake, &jobs));
    ASSERT_OK(rdzvd_replica_new(&L, &peers, sub, NULL, store, jobs, &hooks, &h, &r));
    ASSERT_OK(rdzvd_replica_start(r));
    until_role(r, RDZVD_ROLE_LEADER);
    ASSERT_TRUE(has(store, "k", "v1") && has(jobs, "job", "rec"));
    ASSERT_FALSE(rdzvd_store_exists(store, "k2", 2));
    ASSERT_EQ(h.pending, 0); /* replaying is not a change of its own */
    replica_close(r, &h);
    rdzvd_store_free(store);
    rdzvd_store_free(jobs);

    /* One of two, the other never up: no leader; its own change cannot be proposed. */
    memset(&h, 0, sizeof(h));
    snprintf(list, sizeof(list), "127.0.0.1:%d,127.0.0.1:%d", port, port_pair());
    ASSERT_OK(rdzvd_peers_parse(list, 1, 0, &peers, err, sizeof(err)));
    snprintf(sub, sizeof(sub), "%s/raft2", dir);
    ASSERT_OK(rdzvd_store_new(&lim, wake, &store));
    ASSERT_OK(rdzvd_replica_new(&L, &peers, sub, &T.token, store, NULL, &hooks, &h, &r));
    ASSERT_EQ(rdzvd_replica_count(r), 2);
    ASSERT_OK(rdzvd_replica_start(r));
    for (int i = 0; i < 100; i++)
        uv_run(&L, UV_RUN_NOWAIT), usleep(1000);
    ASSERT_EQ(rdzvd_replica_role(r), RDZVD_ROLE_FOLLOWER);
    ASSERT_NULL(rdzvd_replica_leader(r));
    ASSERT_OK(rdzvd_store_set(store, "k", 1, "v", 1));
    ASSERT_EQ(h.pending, 1);
    ASSERT_EQ(rdzvd_replica_flush(r), -ESTALE);
    ASSERT_EQ(rdzvd_replica_role(r), RDZVD_ROLE_STOPPED);
    ASSERT_EQ(rdzvd_replica_flush(r), -ESTALE);
    replica_close(r, &h);
    rdzvd_store_free(store);

    ASSERT_OK(uv_loop_close(&L));
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ASSERT_OK(system(cmd));
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as rdzvd: a write to a closed replica link is an error */
    TEST(test_three_replicas);
    TEST(test_addresses);
    TEST(test_handshakes);
    TEST(test_outbound_deadline_and_close);
    TEST(test_inbound_refusals);
    TEST(test_replica_life);
    return tap_done();
}
