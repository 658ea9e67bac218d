/* SPDX-License-Identifier: Apache-2.0 */
/* test-agent-front-admit.c: a full store front's newcomers decide how many kernel lookups its
 * loop makes no more (agent-front-admit.h; issue 71, case 3). 60 strangers that come in one loop
 * turn get at most a few lookups in that turn, not 60; the next turn a worker still takes a
 * stranger's slot; and when the kernel is slow (100 ms a lookup, as when another user's dumps hold
 * sock_diag's lock), a turn's newcomers cost one lookup's time, not one each. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "agent/front/agent-front-admit.h"
#include "../tap.h"

#define FULL 4      /* the front's slots */
#define CROWD 60    /* strangers in one turn */
#define TURN_MAX 16 /* lookups one turn may make at most (the front's own cap is lower) */

struct conn {
    uv_tcp_t tcp;
    struct agent_front_admittee adm;
    int client;
    bool evicted;
};

static struct conn conns[FULL + 2 * CROWD + 2];
static unsigned n_conns, lookups, worker_port;
static long lookup_ms; /* what one lookup costs: the kernel's time on the loop */

static bool fake_is_worker(uint16_t client_port, uint16_t server_port, void *ud)
{
    struct timespec ts = {.tv_sec = lookup_ms / 1000, .tv_nsec = lookup_ms % 1000 * 1000000};

    (void)server_port;
    (void)ud;
    lookups++;
    if (lookup_ms)
        nanosleep(&ts, NULL);
    return client_port == worker_port;
}

static void evict(struct agent_front_admittee *a, const char *why, void *ud)
{
    struct agent_front_admit *ad = ud;
    struct conn *c = rdzv_container_of(a, struct conn, adm);

    (void)why;
    c->evicted = true;
    agent_front_admit_del(ad, a);
}

static int listen_fd(uint16_t *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof(a);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    ASSERT_TRUE(l >= 0);
    ASSERT_OK(bind(l, (struct sockaddr *)&a, n));
    ASSERT_OK(listen(l, 256));
    ASSERT_OK(getsockname(l, (struct sockaddr *)&a, &n));
    *port = ntohs(a.sin_port);
    return l;
}

/* A connection from 127.0.0.1 to the listener, accepted and opened on the loop; its port. */
static struct conn *connect_one(uv_loop_t *loop, int l, uint16_t port, uint16_t *client_port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof(a);
    struct conn *c = &conns[n_conns++];
    int s;

    c->client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_TRUE(c->client >= 0);
    ASSERT_OK(connect(c->client, (struct sockaddr *)&a, sizeof(a)));
    s = accept(l, (struct sockaddr *)&a, &n);
    ASSERT_TRUE(s >= 0);
    *client_port = ntohs(a.sin_port);
    ASSERT_OK(uv_tcp_init(loop, &c->tcp));
    ASSERT_OK(uv_tcp_open(&c->tcp, s));
    return c;
}

/* n newcomers in this turn; how many were admitted. */
static unsigned crowd(uv_loop_t *loop, struct agent_front_admit *ad, int l, uint16_t port,
                      unsigned n)
{
    unsigned in = 0;
    uint16_t p;

    for (unsigned i = 0; i < n; i++) {
        struct conn *c = connect_one(loop, l, port, &p);

        in += agent_front_admit_add(ad, &c->adm, &c->tcp) == 0;
    }
    return in;
}

static void one_turn(uv_loop_t *loop)
{
    struct timespec ts = {.tv_nsec = 2000000};

    nanosleep(&ts, NULL); /* uv_now moves on */
    (void)uv_run(loop, UV_RUN_NOWAIT);
}

static uv_loop_t loop;
static struct agent_front_admit ad;
static uint16_t port;
static int lfd;

static void test_a_crowd_in_one_turn_makes_few_lookups(void)
{
    lookups = 0;
    ASSERT_EQ(crowd(&loop, &ad, lfd, port, CROWD), 0); /* strangers of a full front: refused */
    snprintf(tap_note, sizeof(tap_note), "%d newcomers in one turn made %u kernel lookups",
             CROWD, lookups);
    ASSERT_LE(lookups, TURN_MAX);
    tap_note[0] = '\0';
}

static void test_the_next_turn_a_worker_takes_a_strangers_slot(void)
{
    uint16_t p;
    struct conn *w;

    one_turn(&loop);
    w = connect_one(&loop, lfd, port, &p);
    worker_port = p;
    ASSERT_OK(agent_front_admit_add(&ad, &w->adm, &w->tcp));
    ASSERT_TRUE(conns[0].evicted); /* the oldest stranger's */
}

/* 100 ms a lookup: the first spends the budget (and more), the others of its turn and of the
 * next are not asked of. */
static void test_a_slow_kernel_costs_one_lookup_a_turn(void)
{
    one_turn(&loop);
    lookup_ms = 100;
    lookups = 0;
    (void)crowd(&loop, &ad, lfd, port, 8);
    snprintf(tap_note, sizeof(tap_note), "8 newcomers, 100 ms lookups: %u lookups", lookups);
    ASSERT_LE(lookups, 1);
    one_turn(&loop);
    lookups = 0;
    (void)crowd(&loop, &ad, lfd, port, 8);
    snprintf(tap_note, sizeof(tap_note), "the next turn: %u lookups", lookups);
    ASSERT_EQ(lookups, 0);
    tap_note[0] = '\0';
}

int main(void)
{
    uint16_t p;

    lfd = listen_fd(&port);
    ASSERT_OK(uv_loop_init(&loop));
    ad = (struct agent_front_admit){.loop = &loop, .max = FULL, .server_port = port,
                                    .is_worker = fake_is_worker, .evict = evict, .ud = &ad};
    ASSERT_OK(agent_front_admit_init(&ad));
    /* FULL strangers hold the slots and spoke: none is silent, none to shed */
    for (int i = 0; i < FULL; i++) {
        struct conn *c = connect_one(&loop, lfd, port, &p);

        ASSERT_OK(agent_front_admit_add(&ad, &c->adm, &c->tcp));
        agent_front_admit_heard(&c->adm);
    }
    ASSERT_EQ(lookups, 0); /* a front with room asks the kernel nothing */
    TEST(test_a_crowd_in_one_turn_makes_few_lookups);
    TEST(test_the_next_turn_a_worker_takes_a_strangers_slot);
    TEST(test_a_slow_kernel_costs_one_lookup_a_turn);
    for (unsigned i = 0; i < n_conns; i++) {
        uv_close((uv_handle_t *)&conns[i].tcp, NULL);
        close(conns[i].client);
    }
    agent_front_admit_close(&ad, NULL);
    (void)uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_OK(uv_loop_close(&loop));
    close(lfd);
    return tap_done();
}
