/* SPDX-License-Identifier: Apache-2.0 */
/* test-repl-net.c: three replicas of a store on real sockets (127.0.0.1), each a libraft
 * instance with libraft's disk io (raft/uv.h, a directory each) and rdzvd's authenticating
 * transport (daemon/rdzvd-repl-net.h), all on one libuv loop:
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

#include "../../common/rdzv-auth.h"
#include "../../common/rdzv-util.h"
#include "../tap.h"
#include "rdzvd-repl-net.h"
#include "rdzvd-repl.h"
#include "rdzvd-store.h"

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
        ASSERT_OK(rdzvd_repl_net_init(&rp->tr, &T.loop, &T.token, 2000));
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

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as rdzvd: a write to a closed replica link is an error */
    TEST(test_three_replicas);
    return tap_done();
}
