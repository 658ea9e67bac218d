/* SPDX-License-Identifier: Apache-2.0 */
/* test-store-client.c: the blocking TCPStore client's cancel descriptor
 * (rdzv_store_client_connect_cancel): a store the job has left is abandoned at once, in the
 * connect's retries, in its pauses and in a later wait, and never for the whole timeout;
 * without a cancellation the same calls end as before (their own error, at their timeout). */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/rdzv-util.h"
#include "proto/rdzv-store-client.h"
#include "../tap.h"

/* A loopback port: listening (backlog only, never accepted: connects complete, replies never
 * come) when listen_too, else closed again (nobody listens: connects are refused). */
static uint16_t loopback_port(bool listen_too, int *ret_fd)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    ASSERT_TRUE(fd >= 0);
    ASSERT_OK(bind(fd, (struct sockaddr *)&a, sizeof(a)));
    ASSERT_OK(getsockname(fd, (struct sockaddr *)&a, &len));
    if (listen_too) {
        ASSERT_OK(listen(fd, 8));
        *ret_fd = fd;
    } else {
        close(fd);
        *ret_fd = -1;
    }
    return ntohs(a.sin_port);
}

struct later {
    int fd;
    unsigned ms;
};

static void *write_later(void *arg)
{
    struct later *l = arg;

    usleep(l->ms * 1000u);
    ASSERT_EQ(write(l->fd, "x", 1), 1);
    return NULL;
}

/* Connect retries to a port nobody listens on: the cancellation ends them, long before the
 * 30 s timeout; without one they end at the timeout with the last try's error. */
static void test_connect_retries_cancelled(void)
{
    struct rdzv_store_client *c = NULL;
    int p[2], none;
    uint16_t port = loopback_port(false, &none);
    struct later l;
    pthread_t th;
    uint64_t t0;

    ASSERT_OK(pipe(p));
    l = (struct later){.fd = p[1], .ms = 300};
    ASSERT_OK(pthread_create(&th, NULL, write_later, &l));
    t0 = rdzv_now_ms();
    ASSERT_EQ(rdzv_store_client_connect_cancel("127.0.0.1", port, 30000, RDZV_STORE_CLIENT_RETRY,
                                               p[0], &c),
              -ECANCELED);
    ASSERT_LE(rdzv_now_ms() - t0, 10000);
    ASSERT_NULL(c);
    pthread_join(th, NULL);

    /* Already readable: no try is made at all, even to a port that listens. */
    {
        int lfd;
        uint16_t up = loopback_port(true, &lfd);

        ASSERT_EQ(rdzv_store_client_connect_cancel("127.0.0.1", up, 5000, 0, p[0], &c),
                  -ECANCELED);
        close(lfd);
    }
    close(p[0]);
    close(p[1]);

    /* No cancellation: the retries run to the timeout and report the last try's error. */
    {
        int r;

        t0 = rdzv_now_ms();
        r = rdzv_store_client_connect_cancel("127.0.0.1", port, 400, RDZV_STORE_CLIENT_RETRY, -1,
                                             &c);
        ASSERT_TRUE(r == -ECONNREFUSED || r == -ETIMEDOUT);
        ASSERT_TRUE(rdzv_now_ms() - t0 >= 300);
    }
}

/* A get on a store that never answers (a listener nobody accepts from): the cancellation ends
 * the wait, and the error sticks (the next request returns it at once). */
static void test_wait_cancelled_and_sticky(void)
{
    struct rdzv_store_client *c = NULL;
    int lfd, p[2];
    uint16_t port = loopback_port(true, &lfd);
    struct later l;
    pthread_t th;
    void *val = NULL;
    size_t len = 0;
    int64_t n = 0;
    uint64_t t0;

    ASSERT_OK(pipe(p));
    ASSERT_OK(rdzv_store_client_connect_cancel("127.0.0.1", port, 30000, 0, p[0], &c));
    l = (struct later){.fd = p[1], .ms = 300};
    ASSERT_OK(pthread_create(&th, NULL, write_later, &l));
    t0 = rdzv_now_ms();
    ASSERT_EQ(rdzv_store_client_get(c, "rank_0", 30000, &val, &len), -ECANCELED);
    ASSERT_LE(rdzv_now_ms() - t0, 10000);
    ASSERT_TRUE(rdzv_now_ms() - t0 >= 250);
    ASSERT_NULL(val);
    pthread_join(th, NULL);
    ASSERT_EQ(rdzv_store_client_add(c, "k", 1, &n), -ECANCELED);
    rdzv_store_client_free(c);

    /* The same wait without a cancel descriptor ends at its own timeout. */
    ASSERT_OK(rdzv_store_client_connect("127.0.0.1", port, 30000, 0, &c));
    t0 = rdzv_now_ms();
    ASSERT_EQ(rdzv_store_client_get(c, "rank_0", 300, &val, &len), -ETIMEDOUT);
    ASSERT_TRUE(rdzv_now_ms() - t0 >= 250);
    rdzv_store_client_free(c);
    close(p[0]);
    close(p[1]);
    close(lfd);
}

int main(void)
{
    TEST(test_connect_retries_cancelled);
    TEST(test_wait_cancelled_and_sticky);
    return tap_done();
}
