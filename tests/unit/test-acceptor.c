/* SPDX-License-Identifier: Apache-2.0 */
/* test-acceptor.c: rdzvd's accept thread (daemon/net/rdzvd-acceptor.c) with real sockets on
 * 127.0.0.1 and the loop not run, so that nothing takes the queue unless the test does: the
 * queue's bound, a listener parked while the queue was full and watched again when another
 * listener is removed (a job's store closing during a burst), a removed listener's queued and
 * pending connections ended in order (EOF, not a reset), the keys, and a stop with a queue. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/net/rdzvd-acceptor.h"
#include "../tap.h"

static unsigned ready_calls;

static void ready(struct rdzvd_acceptor *a)
{
    (void)a;
    ready_calls++;
}

static int listener(uint16_t *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    ASSERT_TRUE(fd >= 0);
    ASSERT_OK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0);
    ASSERT_OK(listen(fd, 1024) < 0 ? -errno : 0);
    ASSERT_OK(getsockname(fd, (struct sockaddr *)&sa, &len) < 0 ? -errno : 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

static int client(uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    ASSERT_TRUE(fd >= 0);
    ASSERT_OK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0);
    return fd;
}

/* Wait up to 5 s for the queue to hold want, then a further 0.2 s to see that it stays. */
static unsigned settle(struct rdzvd_acceptor *a, unsigned want)
{
    struct timespec ts = {0, 10 * 1000 * 1000};

    for (int i = 0; i < 500 && rdzvd_acceptor_queued(a) != want; i++)
        nanosleep(&ts, NULL);
    for (int i = 0; i < 20; i++)
        nanosleep(&ts, NULL);
    return rdzvd_acceptor_queued(a);
}

/* The peer's end of fd: 0 for EOF, 1 for a reset, -1 for neither within 2 s. */
static int peer_end(int fd)
{
    struct timeval tv = {2, 0};
    char c;
    ssize_t r;

    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    r = recv(fd, &c, 1, 0);
    return r == 0 ? 0 : r < 0 && errno == ECONNRESET ? 1 : -1;
}

static void test_a_parked_listener_is_watched_again_when_another_is_removed(void)
{
    struct rdzvd_accepted got[RDZVD_ACCEPT_QUEUE];
    struct rdzvd_acceptor a;
    int ka = 1, kb = 2, cb[40], ca[40 + RDZVD_ACCEPT_QUEUE], fa, fb;
    uint16_t pa, pb;
    uv_loop_t loop;
    size_t n;

    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(rdzvd_acceptor_start(&a, &loop, ready));
    fa = listener(&pa);
    fb = listener(&pb);
    ASSERT_OK(rdzvd_acceptor_add(&a, fb, &kb));
    ASSERT_OK(rdzvd_acceptor_add(&a, fa, &ka));
    for (int i = 0; i < 40; i++)
        cb[i] = client(pb);
    ASSERT_EQ(settle(&a, 40), 40);
    ASSERT_OK(uv_run(&loop, UV_RUN_NOWAIT)); /* the thread woke the loop: ready ran */
    ASSERT_TRUE(ready_calls > 0);
    /* A fills the queue and is parked with the rest of its connections in the backlog. */
    for (int i = 0; i < 40 + (int)RDZVD_ACCEPT_QUEUE; i++)
        ca[i] = client(pa);
    ASSERT_EQ(settle(&a, RDZVD_ACCEPT_QUEUE), RDZVD_ACCEPT_QUEUE);
    /* B's store closes: its 40 queued go, and A is watched again: the queue fills again. */
    rdzvd_acceptor_remove(&a, fb);
    ASSERT_EQ(settle(&a, RDZVD_ACCEPT_QUEUE), RDZVD_ACCEPT_QUEUE);
    for (int i = 0; i < 40; i++) {
        ASSERT_EQ(peer_end(cb[i]), 0); /* ended in order: EOF, not a reset */
        close(cb[i]);
    }
    /* Every connection of A comes out, with A's key, as the loop takes them. */
    n = rdzvd_acceptor_take(&a, got, RDZVD_ACCEPT_QUEUE);
    ASSERT_EQ(n, RDZVD_ACCEPT_QUEUE);
    for (size_t i = 0; i < n; i++) {
        ASSERT_TRUE(got[i].key == &ka);
        ASSERT_EQ(got[i].addr.ss_family, AF_INET);
        close(got[i].fd);
    }
    ASSERT_EQ(settle(&a, 40), 40);
    n = rdzvd_acceptor_take(&a, got, RDZVD_ACCEPT_QUEUE);
    ASSERT_EQ(n, 40);
    for (size_t i = 0; i < n; i++)
        close(got[i].fd);
    ASSERT_EQ(rdzvd_acceptor_dropped(&a), 0);
    ASSERT_TRUE(rdzvd_acceptor_stop(&a, NULL));
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    for (int i = 0; i < 40 + (int)RDZVD_ACCEPT_QUEUE; i++)
        close(ca[i]);
    close(fa);
    close(fb);
    ASSERT_EQ(uv_loop_close(&loop), 0);
}

static void test_removed_listener_ends_its_backlog_in_order(void)
{
    struct rdzvd_acceptor a;
    int k = 1, c[RDZVD_ACCEPT_QUEUE + 20], fd;
    uv_loop_t loop;
    uint16_t port;

    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(rdzvd_acceptor_start(&a, &loop, ready));
    fd = listener(&port);
    ASSERT_OK(rdzvd_acceptor_add(&a, fd, &k));
    /* Past the queue: 20 stay in the kernel's backlog. Each has sent bytes nobody read. */
    for (int i = 0; i < (int)RDZVD_ACCEPT_QUEUE + 20; i++) {
        c[i] = client(port);
        ASSERT_EQ(send(c[i], "x", 1, 0), 1);
    }
    ASSERT_EQ(settle(&a, RDZVD_ACCEPT_QUEUE), RDZVD_ACCEPT_QUEUE);
    rdzvd_acceptor_remove(&a, fd);
    ASSERT_EQ(rdzvd_acceptor_queued(&a), 0);
    close(fd);
    for (int i = 0; i < (int)RDZVD_ACCEPT_QUEUE + 20; i++) {
        ASSERT_EQ(peer_end(c[i]), 0);
        close(c[i]);
    }
    /* Removing it again, or an fd it never had, does nothing. */
    rdzvd_acceptor_remove(&a, fd);
    ASSERT_TRUE(rdzvd_acceptor_stop(&a, NULL));
    ASSERT_FALSE(rdzvd_acceptor_stop(&a, NULL));
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(uv_loop_close(&loop), 0);
}

static void test_stop_with_a_queue_ends_it_in_order(void)
{
    struct rdzvd_acceptor a;
    int k = 1, c[10], fd;
    uv_loop_t loop;
    uint16_t port;

    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(rdzvd_acceptor_start(&a, &loop, ready));
    fd = listener(&port);
    ASSERT_OK(rdzvd_acceptor_add(&a, fd, &k));
    for (int i = 0; i < 10; i++)
        c[i] = client(port);
    ASSERT_EQ(settle(&a, 10), 10);
    ASSERT_TRUE(rdzvd_acceptor_stop(&a, NULL));
    ASSERT_EQ(rdzvd_acceptor_queued(&a), 0);
    ASSERT_EQ(rdzvd_acceptor_add(&a, fd, &k), -ESHUTDOWN);
    for (int i = 0; i < 10; i++) {
        ASSERT_EQ(peer_end(c[i]), 0);
        close(c[i]);
    }
    /* A listener still registered after the stop is removed as before (its backlog ended). */
    c[0] = client(port);
    rdzvd_acceptor_remove(&a, fd);
    ASSERT_EQ(peer_end(c[0]), 0);
    close(c[0]);
    close(fd);
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(uv_loop_close(&loop), 0);
}

int main(void)
{
    TEST(test_a_parked_listener_is_watched_again_when_another_is_removed);
    TEST(test_removed_listener_ends_its_backlog_in_order);
    TEST(test_stop_with_a_queue_ends_it_in_order);
    return tap_done();
}
