/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-preflight.c: the network pre-flight's link check (agent/preflight/) on loopback:
 * a probe's figures, a wrong token, a closed port and a silent peer (unreachable, each within
 * its bound), a listener that starts late (measured: the probe connects again), a listener's
 * impossible claim (unreachable), a stranger
 * closed within the hello's bound, a connection's life after its hello, a probe cancelled and a
 * listener closed with connections open (every handle closed after). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/preflight/agent-preflight.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-preflight.h"
#include "tests/tap.h"

static uv_loop_t loop;
static struct agent_pf_result got;
static int fired;
static const uint8_t token[AGENT_PF_TOKEN_LEN] = "0123456789abcdef";

static void on_result(const struct agent_pf_result *r, void *ud)
{
    (void)ud;
    got = *r;
    fired++;
}

static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in sa;

    ASSERT_OK(uv_ip4_addr("127.0.0.1", port, &sa));
    return sa;
}

static struct agent_pf_server *listener(void)
{
    struct sockaddr_in sa = loopback(0);
    struct agent_pf_server *s;

    ASSERT_OK(agent_pf_server_start(&loop, (struct sockaddr *)&sa, token, &s));
    ASSERT_TRUE(agent_pf_server_port(s) > 0);
    return s;
}

static bool full; /* the next probe is a full one */

/* Probe port with tok; returns the seconds until the result. */
static double probe(int port, const uint8_t *tok, unsigned bound_ms)
{
    struct sockaddr_in sa = loopback(port);
    struct agent_pf_probe *p;
    uint64_t t0 = uv_hrtime();

    fired = 0;
    ASSERT_OK(agent_pf_probe_start(&loop, (struct sockaddr *)&sa, tok, bound_ms, full, on_result,
                                   NULL, &p));
    while (!fired)
        uv_run(&loop, UV_RUN_ONCE);
    ASSERT_EQ(fired, 1);
    return (double)(uv_hrtime() - t0) / 1e9;
}

/* Close what is left and check that every handle closed. */
static void drain(struct agent_pf_server *s)
{
    if (s)
        agent_pf_server_close(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_FALSE(uv_loop_alive(&loop));
}

static void test_a_probe_measures_both_ways(void)
{
    struct agent_pf_server *s = listener();
    double dt = probe(agent_pf_server_port(s), token, 0);

    printf("# loopback: up %.0f MB/s, down %.0f MB/s in %.2f s\n", got.up, got.down, dt);
    ASSERT_TRUE(got.up > 10 && got.down > 10);
    ASSERT_TRUE(dt < 2 * AGENT_PF_BOUND_MS / 1000.0);
    drain(s);
}

/* The seconds a way of a full probe lasts at mbps: its window, or AGENT_PF_FULL_BYTES. */
static double full_way_s(double mbps)
{
    double s = AGENT_PF_FULL_BYTES / (mbps * 1e6);

    return s < AGENT_PF_WINDOW_MS / 1000.0 ? s : AGENT_PF_WINDOW_MS / 1000.0;
}

/* A full probe runs each way's whole window (AGENT_PF_WINDOW_MS) or AGENT_PF_FULL_BYTES: on
 * loopback, far longer than AGENT_PF_BYTES takes. */
static void test_a_full_probe_runs_the_whole_window(void)
{
    struct agent_pf_server *s = listener();
    double dt;

    full = true;
    dt = probe(agent_pf_server_port(s), token, 0);
    full = false;
    printf("# full: up %.0f MB/s, down %.0f MB/s in %.2f s\n", got.up, got.down, dt);
    ASSERT_TRUE(got.up > 10 && got.down > 10);
    ASSERT_TRUE(dt >= 0.9 * (full_way_s(got.up) + full_way_s(got.down)));
    ASSERT_TRUE(dt < 2 * AGENT_PF_BOUND_MS / 1000.0);
    drain(s);
}

static void test_a_wrong_token_is_unreachable_at_once(void)
{
    struct agent_pf_server *s = listener();
    uint8_t wrong[AGENT_PF_TOKEN_LEN];
    double dt;

    memcpy(wrong, token, sizeof(wrong));
    wrong[5] ^= 1;
    dt = probe(agent_pf_server_port(s), wrong, 0);
    ASSERT_TRUE(got.up == RDZV_PF_UNREACHABLE);
    ASSERT_TRUE(got.down == RDZV_PF_UNREACHABLE);
    ASSERT_TRUE(dt < 1.0);
    drain(s);
}

/* Accepts nothing: the kernel completes the connection, nobody sends on it. */
static void never_accept(uv_stream_t *st, int status)
{
    (void)st;
    (void)status;
}

static void test_a_closed_port_and_a_silent_peer_are_unreachable(void)
{
    struct agent_pf_server *s = listener();
    int port = agent_pf_server_port(s);
    uv_tcp_t silent;
    struct sockaddr_in sa = loopback(0);
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    double dt;

    drain(s); /* nothing listens on port now: refused, tried again till the bound */
    dt = probe(port, token, 500);
    ASSERT_TRUE(got.down == RDZV_PF_UNREACHABLE);
    ASSERT_TRUE(dt >= 0.45 && dt < 1.5);
    /* A listener that accepts (the kernel does) and never sends: the probe's bound. */
    ASSERT_OK(uv_tcp_init(&loop, &silent));
    ASSERT_OK(uv_tcp_bind(&silent, (struct sockaddr *)&sa, 0));
    ASSERT_OK(uv_listen((uv_stream_t *)&silent, 8, never_accept));
    ASSERT_OK(uv_tcp_getsockname(&silent, (struct sockaddr *)&ss, &len));
    dt = probe(ntohs(((struct sockaddr_in *)&ss)->sin_port), token, 300);
    ASSERT_TRUE(got.down == RDZV_PF_UNREACHABLE);
    ASSERT_TRUE(dt >= 0.29 && dt < 2.0);
    uv_close((uv_handle_t *)&silent, NULL);
    drain(NULL);
}

/* A lying peer's listener, on blocking sockets in a thread: it holds the token, sends the 'D'
 * way's bytes, and on the 'U' way claims UINT64_MAX bytes in 1 us after the first chunk. */
static void *liar(void *arg)
{
    static char buf[AGENT_PF_CHUNK];
    int ls = *(int *)arg;

    for (int k = 0; k < 2; k++) {
        uint8_t hello[AGENT_PF_HELLO_LEN], report[16];
        size_t have = 0;
        int c = accept(ls, NULL, NULL);
        ssize_t n;

        ASSERT_TRUE(c >= 0);
        while (have < sizeof(hello) && (n = read(c, hello + have, sizeof(hello) - have)) > 0)
            have += (size_t)n;
        ASSERT_EQ(have, sizeof(hello));
        if (hello[AGENT_PF_HELLO_LEN - 1] == 'D') {
            for (size_t sent = 0; sent <= AGENT_PF_BYTES; sent += sizeof(buf))
                if (write(c, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
                    break;
            while (read(c, buf, sizeof(buf)) > 0) /* till the probe closes */
                ;
        } else {
            ASSERT_TRUE(read(c, buf, sizeof(buf)) > 0);
            rdzv_set_u64(report, UINT64_MAX);
            rdzv_set_u64(report + 8, 1);
            ASSERT_EQ(write(c, report, sizeof(report)), (ssize_t)sizeof(report));
            while (read(c, buf, sizeof(buf)) > 0) /* till the probe closes */
                ;
        }
        close(c);
    }
    return NULL;
}

/* A peer's listener that claims more bytes than the probe sent, faster than any figure may be:
 * that way counts as unreachable (rdzvd would refuse the figure, and the agent with it). */
static void test_a_listeners_impossible_claim_is_unreachable(void)
{
    struct sockaddr_in sa = loopback(0);
    socklen_t len = sizeof(sa);
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    pthread_t t;

    ASSERT_TRUE(ls >= 0);
    ASSERT_OK(bind(ls, (struct sockaddr *)&sa, sizeof(sa)));
    ASSERT_OK(listen(ls, 4));
    ASSERT_OK(getsockname(ls, (struct sockaddr *)&sa, &len));
    ASSERT_OK(pthread_create(&t, NULL, liar, &ls));
    probe(ntohs(sa.sin_port), token, 0);
    ASSERT_TRUE(got.down > 10);
    ASSERT_TRUE(got.up == RDZV_PF_UNREACHABLE);
    ASSERT_OK(pthread_join(t, NULL));
    close(ls);
    drain(NULL);
}

static struct agent_pf_server *late_server;
static int late_port;

static void late_listen(uv_timer_t *t)
{
    struct sockaddr_in sa = loopback(late_port);

    ASSERT_OK(agent_pf_server_start(&loop, (struct sockaddr *)&sa, token, &late_server));
    uv_close((uv_handle_t *)t, NULL);
}

/* A peer that starts listening 400 ms after the probe (a busy agent): its connects are refused
 * till then, and tried again within the bound, so the link is measured, not unreachable. */
static void test_a_listener_that_starts_late_is_measured(void)
{
    struct agent_pf_server *s = listener();
    uv_timer_t later;
    double dt;

    late_port = agent_pf_server_port(s);
    drain(s);
    late_server = NULL;
    ASSERT_OK(uv_timer_init(&loop, &later));
    ASSERT_OK(uv_timer_start(&later, late_listen, 400, 0));
    dt = probe(late_port, token, 2000);
    printf("# a listener 0.4 s late: up %.0f MB/s, down %.0f MB/s in %.2f s\n", got.up, got.down,
           dt);
    ASSERT_TRUE(got.up > 10 && got.down > 10);
    ASSERT_TRUE(late_server != NULL);
    ASSERT_TRUE(dt >= 0.35 && dt < 2 * 2.0);
    drain(late_server);
}

static uint64_t stranger_t0, stranger_closed_ns;

static void stranger_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    static char buf[64];

    (void)h;
    (void)hint;
    *b = uv_buf_init(buf, sizeof(buf));
}

static void stranger_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    if (n < 0) {
        stranger_closed_ns = uv_hrtime() - stranger_t0;
        uv_close((uv_handle_t *)st, NULL);
    }
}

static void stranger_connected(uv_connect_t *req, int status)
{
    ASSERT_OK(status);
    ASSERT_OK(uv_read_start(req->handle, stranger_alloc, stranger_read));
}

/* A stranger that connects and says nothing is closed after the hello's bound. */
static void test_a_silent_stranger_is_closed_within_the_hello_bound(void)
{
    struct agent_pf_server *s = listener();
    struct sockaddr_in sa = loopback(agent_pf_server_port(s));
    uv_tcp_t t;
    uv_connect_t req;

    ASSERT_OK(uv_tcp_init(&loop, &t));
    stranger_t0 = uv_hrtime();
    stranger_closed_ns = 0;
    ASSERT_OK(uv_tcp_connect(&req, &t, (struct sockaddr *)&sa, stranger_connected));
    while (!stranger_closed_ns)
        uv_run(&loop, UV_RUN_ONCE);
    ASSERT_TRUE(stranger_closed_ns >= (AGENT_PF_HELLO_MS - 50) * 1000000ull);
    ASSERT_TRUE(stranger_closed_ns < (AGENT_PF_HELLO_MS + 1500) * 1000000ull);
    drain(s);
}

static uint8_t late_hello[AGENT_PF_HELLO_LEN], late_data[1024];
static uv_write_t late_wr[2];

static void late_wrote(uv_write_t *w, int status)
{
    (void)w;
    (void)status;
}

static void late_hello_connected(uv_connect_t *req, int status)
{
    uv_buf_t b = uv_buf_init((char *)late_hello, sizeof(late_hello));

    ASSERT_OK(status);
    ASSERT_OK(uv_write(&late_wr[0], req->handle, &b, 1, late_wrote));
    ASSERT_OK(uv_read_start(req->handle, stranger_alloc, stranger_read));
}

static void late_send(uv_timer_t *t)
{
    uv_buf_t b = uv_buf_init((char *)late_data, sizeof(late_data));

    uv_write(&late_wr[1], t->data, &b, 1, late_wrote);
    uv_close((uv_handle_t *)t, NULL);
}

/* A probe past its hello ('U') that sends its first bytes late and never closes: the listener
 * reports, then closes the connection at the bound after the hello (3 s), not a bound later. */
static void test_a_connection_lives_at_most_the_bound_after_its_hello(void)
{
    struct agent_pf_server *s = listener();
    struct sockaddr_in sa = loopback(agent_pf_server_port(s));
    uv_tcp_t t;
    uv_timer_t late;
    uv_connect_t req;

    memcpy(late_hello, AGENT_PF_MAGIC, 8);
    memcpy(late_hello + 8, token, AGENT_PF_TOKEN_LEN);
    late_hello[AGENT_PF_HELLO_LEN - 1] = 'U';
    ASSERT_OK(uv_tcp_init(&loop, &t));
    ASSERT_OK(uv_timer_init(&loop, &late));
    late.data = &t;
    stranger_t0 = uv_hrtime();
    stranger_closed_ns = 0;
    ASSERT_OK(uv_tcp_connect(&req, &t, (struct sockaddr *)&sa, late_hello_connected));
    ASSERT_OK(uv_timer_start(&late, late_send, AGENT_PF_BOUND_MS - 500, 0));
    while (!stranger_closed_ns)
        uv_run(&loop, UV_RUN_ONCE);
    ASSERT_TRUE(stranger_closed_ns >= (AGENT_PF_BOUND_MS - 100) * 1000000ull);
    ASSERT_TRUE(stranger_closed_ns < (AGENT_PF_BOUND_MS + 700) * 1000000ull);
    drain(s);
}

/* A probe cancelled mid-way fires nothing; a listener closed with a connection open closes it. */
static void test_cancel_and_close_mid_way(void)
{
    for (int turns = 0; turns < 12; turns++) {
        struct agent_pf_server *s = listener();
        struct sockaddr_in sa = loopback(agent_pf_server_port(s));
        struct agent_pf_probe *p;

        fired = 0;
        ASSERT_OK(
            agent_pf_probe_start(&loop, (struct sockaddr *)&sa, token, 0, false, on_result, NULL,
                                 &p));
        for (int i = 0; i < turns && !fired; i++)
            uv_run(&loop, UV_RUN_ONCE);
        if (!fired)
            agent_pf_probe_cancel(p);
        agent_pf_server_close(s);
        uv_run(&loop, UV_RUN_DEFAULT);
        ASSERT_FALSE(uv_loop_alive(&loop));
        ASSERT_EQ(fired, 0);
    }
}

int main(void)
{
    ASSERT_OK(uv_loop_init(&loop));
    TEST(test_a_probe_measures_both_ways);
    TEST(test_a_full_probe_runs_the_whole_window);
    TEST(test_a_wrong_token_is_unreachable_at_once);
    TEST(test_a_listener_that_starts_late_is_measured);
    TEST(test_a_closed_port_and_a_silent_peer_are_unreachable);
    TEST(test_a_listeners_impossible_claim_is_unreachable);
    TEST(test_a_silent_stranger_is_closed_within_the_hello_bound);
    TEST(test_a_connection_lives_at_most_the_bound_after_its_hello);
    TEST(test_cancel_and_close_mid_way);
    ASSERT_OK(uv_loop_close(&loop));
    return tap_done();
}
