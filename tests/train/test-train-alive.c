/* SPDX-License-Identifier: Apache-2.0 */
/* test-train-alive.c: rdzv-train's "wait" lines (train-alive.h) on a real pipe: a span blocked on
 * the peers longer than the period says "wait", not before the period; short spans say nothing;
 * freeing joins the thread. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../tap.h"
#include "train-alive.h"

static uint64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Everything the pipe holds now (non-blocking), NUL-terminated. */
static size_t drain(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    ssize_t r;

    while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    return n;
}

static void test_wait_lines(void)
{
    struct train_alive *a;
    struct pollfd pfd;
    char buf[256];
    uint64_t t0;
    int p[2];

    ASSERT_OK(pipe2(p, O_NONBLOCK | O_CLOEXEC));
    ASSERT_OK(train_alive_new(p[1], 50, &a));
    t0 = mono_ms();
    train_alive_block(a);
    /* The first line comes once the span has lasted the period (the wait is on the pipe, with
     * a bound that only turns a missing line into a failure). */
    pfd = (struct pollfd){.fd = p[0], .events = POLLIN};
    ASSERT_EQ(poll(&pfd, 1, 10000), 1);
    ASSERT_TRUE(mono_ms() - t0 >= 50);
    ASSERT_TRUE(drain(p[0], buf, sizeof(buf)) >= 5);
    ASSERT_EQ(strncmp(buf, "wait\n", 5), 0);
    /* ... and again while it lasts */
    ASSERT_EQ(poll(&pfd, 1, 10000), 1);
    ASSERT_TRUE(drain(p[0], buf, sizeof(buf)) >= 5);
    ASSERT_EQ(strncmp(buf, "wait\n", 5), 0);
    train_alive_unblock(a);
    train_alive_free(a);
    drain(p[0], buf, sizeof(buf)); /* one may have been written just before the unblock */

    /* Spans far shorter than the period: nothing. */
    ASSERT_OK(train_alive_new(p[1], 5000, &a));
    for (int i = 0; i < 200; i++) {
        train_alive_block(a);
        train_alive_unblock(a);
    }
    train_alive_free(a);
    ASSERT_EQ(drain(p[0], buf, sizeof(buf)), 0);
    train_alive_block(NULL); /* no channel: no-ops */
    train_alive_unblock(NULL);
    train_alive_free(NULL);
    close(p[0]);
    close(p[1]);
}

int main(void)
{
    TEST(test_wait_lines);
    return tap_done();
}
