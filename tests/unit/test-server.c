/* SPDX-License-Identifier: Apache-2.0 */
/* test-server.c: the daemon's listeners, driven by a real loop on 127.0.0.1: a generation
 * store's listener that cannot have its old port back fails from inside a callback without
 * running the loop (libuv's loop is not re-entrant), and the retry on a free port works. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "common/rdzv-log.h"
#include "daemon/server/rdzvd-server.h"
#include "../tap.h"

struct reopen_case {
    struct rdzvd_server *srv;
    uint16_t taken;       /* a port some other socket listens on */
    bool inside;          /* in the timer callback that reopens the listener */
    unsigned nested;      /* idle callbacks that ran while inside: a nested uv_run */
    unsigned idle_runs;
    int r_taken, r_free;
    uint16_t free_port;
    struct rdzvd_listener *l;
    uv_idle_t *idle;
    uv_timer_t *timer;
};

static void reopen_idle_cb(uv_idle_t *h)
{
    struct reopen_case *t = h->data;

    t->idle_runs++;
    if (t->inside)
        t->nested++;
}

/* What the job code does for a restarted job: the old port, then any port. */
static void reopen_timer_cb(uv_timer_t *h)
{
    struct reopen_case *t = h->data;
    struct rdzvd_listener *l = NULL;

    t->inside = true;
    t->r_taken = rdzvd_listener_open(t->srv, "job t gen 1", NULL, t->taken, &l);
    t->r_free = rdzvd_listener_open(t->srv, "job t gen 1", NULL, 0, &t->l);
    t->inside = false;
    if (t->r_free == 0)
        t->free_port = rdzvd_listener_port(t->l);
}

static void stop_timer_cb(uv_timer_t *h)
{
    struct reopen_case *t = h->data;

    if (t->l)
        rdzvd_listener_close(t->l, true);
    rdzvd_server_stop(t->srv);
    uv_idle_stop(t->idle);
    uv_close((uv_handle_t *)t->idle, NULL);
    uv_close((uv_handle_t *)t->timer, NULL);
    uv_close((uv_handle_t *)h, NULL);
}

static void test_reopen_on_taken_port_runs_no_nested_loop(void)
{
    struct rdzvd_config cfg = {.bind = "127.0.0.1", .lim = RDZV_LIMITS_DEFAULT,
                               .legacy = RDZV_DIALECT_V20, .legacy_allowed = true};
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    struct rdzvd_server *srv = NULL;
    uv_timer_t timer, stop;
    uv_idle_t idle;
    struct reopen_case t = {.idle = &idle, .timer = &timer};
    uv_loop_t loop;
    int fd;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_OK(fd);
    ASSERT_OK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)));
    ASSERT_OK(listen(fd, 1));
    ASSERT_OK(getsockname(fd, (struct sockaddr *)&sa, &sl));
    t.taken = ntohs(sa.sin_port);

    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(rdzvd_server_new(&loop, &cfg, &srv));
    t.srv = srv;
    ASSERT_OK(rdzvd_server_listen(srv));
    ASSERT_OK(uv_idle_init(&loop, &idle));
    idle.data = &t;
    ASSERT_OK(uv_idle_start(&idle, reopen_idle_cb));
    ASSERT_OK(uv_timer_init(&loop, &timer));
    timer.data = &t;
    ASSERT_OK(uv_timer_start(&timer, reopen_timer_cb, 1, 0));
    ASSERT_OK(uv_timer_init(&loop, &stop));
    stop.data = &t;
    ASSERT_OK(uv_timer_start(&stop, stop_timer_cb, 100, 0));
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));

    ASSERT_EQ(t.r_taken, UV_EADDRINUSE);
    ASSERT_TRUE(t.idle_runs > 0);
    ASSERT_EQ(t.nested, 0);
    ASSERT_OK(t.r_free);
    ASSERT_NE(t.free_port, 0);
    ASSERT_NE(t.free_port, t.taken);
    rdzvd_server_free(srv);
    ASSERT_EQ(uv_loop_close(&loop), 0);
    close(fd);
}

int main(void)
{
    rdzv_log_setup("test-server", RDZV_LOG_ERROR);
    TEST(test_reopen_on_taken_port_runs_no_nested_loop);
    return tap_done();
}
