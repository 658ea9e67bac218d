/* SPDX-License-Identifier: Apache-2.0 */
/* agent-front-admit.c: who keeps a slot of the node's store front (agent-front-admit.h). */
#include "agent/front/agent-front-admit.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "common/rdzv-log.h"

static void arm(struct agent_front_admit *ad);

/* The turn is over: its counts start again, and a listener left waiting accepts now. */
static void idle_cb(uv_idle_t *h)
{
    struct agent_front_admit *ad = rdzv_container_of(h, struct agent_front_admit, idle);
    uv_stream_t *l = ad->deferred;

    (void)uv_idle_stop(h);
    ad->turn_accepts = ad->turn_lookups = 0;
    ad->deferred = NULL;
    if (l)
        ad->deferred_cb(l, 0);
}

static void turn_counts(struct agent_front_admit *ad)
{
    if (!uv_is_closing((uv_handle_t *)&ad->idle))
        (void)uv_idle_start(&ad->idle, idle_cb); /* no-op when started */
}

bool agent_front_admit_defer(struct agent_front_admit *ad, uv_stream_t *listener,
                             uv_connection_cb cb)
{
    if (uv_is_closing((uv_handle_t *)&ad->idle))
        return false;
    turn_counts(ad);
    if (ad->turn_accepts < AGENT_FRONT_TURN_ACCEPTS) {
        ad->turn_accepts++;
        return false;
    }
    ad->deferred = listener; /* libuv watches it again once the next accept is made */
    ad->deferred_cb = cb;
    return true;
}

/* Whether a lookup may be made now (agent-front-admit.h's budget); said once when not. */
static bool may_look_up(struct agent_front_admit *ad)
{
    uint64_t now = uv_now(ad->loop);

    if (now > ad->lookup_at_ms) {
        int64_t fill = (int64_t)(now - ad->lookup_at_ms) * (AGENT_FRONT_LOOKUP_US_S / 1000);

        ad->lookup_us = ad->lookup_us + fill > AGENT_FRONT_LOOKUP_BURST_US
                            ? AGENT_FRONT_LOOKUP_BURST_US
                            : ad->lookup_us + fill;
        ad->lookup_at_ms = now;
    }
    if (ad->turn_lookups < AGENT_FRONT_TURN_LOOKUPS && ad->lookup_us > 0)
        return true;
    ad->capped++;
    if (!ad->capped_said)
        log_warn("store front: more newcomers to a full front than the loop can ask the kernel "
                 "about (%d a turn, %d ms of a second): those past it are taken as strangers "
                 "(said once)",
                 AGENT_FRONT_TURN_LOOKUPS, AGENT_FRONT_LOOKUP_US_S / 1000);
    ad->capped_said = true;
    return false;
}

/* is_worker, its time on the loop counted (at least 1 us) and a slow one said once. */
static bool look_up(struct agent_front_admit *ad, uint16_t port)
{
    uint64_t t0 = uv_hrtime(), us;
    bool w;

    turn_counts(ad);
    ad->turn_lookups++;
    ad->lookups++;
    w = ad->is_worker(port, ad->server_port, ad->worker_ud);
    us = (uv_hrtime() - t0) / 1000;
    ad->lookup_us -= (int64_t)(us ? us : 1);
    if (us >= AGENT_FRONT_LOOKUP_SLOW_MS * 1000 && !ad->slow_said) {
        log_warn("store front: the kernel took %" PRIu64 " ms to say who holds a client's "
                 "connection (sock_diag; another user's dumps may hold its lock); the loop spends "
                 "at most %d ms a second on such lookups (said once)",
                 us / 1000, AGENT_FRONT_LOOKUP_US_S / 1000);
        ad->slow_said = true;
    }
    return w;
}

/* 1: a worker's, 0: not, -1: not known (not asked of: the budget is spent). */
static int is_worker(struct agent_front_admit *ad, struct agent_front_admittee *a)
{
    if (!ad->is_worker)
        return 1;
    if (a->worker < 0 && !a->port)
        a->worker = 0;
    if (a->worker < 0 && may_look_up(ad))
        a->worker = look_up(ad, a->port);
    return a->worker;
}

/* The silent clients past AGENT_FRONT_SILENT_MS go; the timer is armed for the next. */
static void timer_cb(uv_timer_t *t)
{
    struct agent_front_admit *ad = rdzv_container_of(t, struct agent_front_admit, timer);
    uint64_t now = uv_now(ad->loop);
    struct rdzv_list *pos, *tmp;

    ad->armed = false;
    rdzv_list_for_each_safe(pos, tmp, &ad->list)
    {
        struct agent_front_admittee *a = rdzv_container_of(pos, struct agent_front_admittee, node);

        if (!a->heard && now - a->since_ms >= AGENT_FRONT_SILENT_MS)
            ad->evict(a, "it sent nothing for 10 s", ad->ud);
    }
    arm(ad);
}

/* For the oldest client still silent (the list is in arrival order). */
static void arm(struct agent_front_admit *ad)
{
    struct rdzv_list *pos, *tmp;
    uint64_t now = uv_now(ad->loop);

    if (ad->armed)
        return;
    rdzv_list_for_each_safe(pos, tmp, &ad->list)
    {
        struct agent_front_admittee *a = rdzv_container_of(pos, struct agent_front_admittee, node);
        uint64_t due = a->since_ms + AGENT_FRONT_SILENT_MS;

        if (a->heard)
            continue;
        if (uv_timer_start(&ad->timer, timer_cb, due > now ? due - now : 0, 0) == 0)
            ad->armed = true;
        return;
    }
}

/* The client whose slot a newcomer takes: one outside the workers when it is a worker's (the
 * oldest), else one silent for AGENT_FRONT_SHED_MS (the oldest); NULL: none. */
static struct agent_front_admittee *victim(struct agent_front_admit *ad,
                                           struct agent_front_admittee *newcomer, const char **why)
{
    uint64_t now = uv_now(ad->loop);
    struct rdzv_list *pos, *tmp;

    if (ad->is_worker && is_worker(ad, newcomer) > 0) {
        rdzv_list_for_each_safe(pos, tmp, &ad->list)
        {
            struct agent_front_admittee *a =
                rdzv_container_of(pos, struct agent_front_admittee, node);

            if (is_worker(ad, a) == 0) {
                *why = "the front is full and a worker needs the slot of this client, which is "
                       "none of the node's workers";
                return a;
            }
        }
    }
    rdzv_list_for_each_safe(pos, tmp, &ad->list)
    {
        struct agent_front_admittee *a = rdzv_container_of(pos, struct agent_front_admittee, node);

        if (!a->heard && now - a->since_ms >= AGENT_FRONT_SHED_MS) {
            *why = "the front is full and this client has sent nothing for 3 s";
            return a;
        }
    }
    return NULL;
}

/* A newcomer refused: said at once, then at most every AGENT_FRONT_REFUSED_LOG_MS with the
 * count since, so that a flood of them does not flood the log. */
static void refused(struct agent_front_admit *ad)
{
    uint64_t now = uv_now(ad->loop);

    if (ad->refused_logged_ms && now - ad->refused_logged_ms < AGENT_FRONT_REFUSED_LOG_MS) {
        ad->refused++;
        return;
    }
    log_warn("store front: more than %u connections: refusing one (a worker opens one or a "
             "few; the others hold theirs and are %s; %" PRIu64 " more refused since this was "
             "last said, which is at most every %d s)",
             ad->max, ad->is_worker ? "the workers' or speaking" : "speaking", ad->refused,
             AGENT_FRONT_REFUSED_LOG_MS / 1000);
    ad->refused = 0;
    ad->refused_logged_ms = now ? now : 1;
}

int agent_front_admit_init(struct agent_front_admit *ad)
{
    int r;

    rdzv_list_init(&ad->list);
    ad->n = 0;
    ad->armed = false;
    ad->refused = 0;
    ad->refused_logged_ms = 0;
    ad->turn_accepts = ad->turn_lookups = 0;
    ad->deferred = NULL;
    ad->lookup_us = AGENT_FRONT_LOOKUP_BURST_US;
    ad->lookup_at_ms = uv_now(ad->loop);
    ad->lookups = ad->capped = 0;
    ad->capped_said = ad->slow_said = false;
    r = uv_timer_init(ad->loop, &ad->timer);
    ad->timer.data = ad->ud;
    if (r == 0)
        r = uv_idle_init(ad->loop, &ad->idle);
    ad->idle.data = ad->ud;
    return r;
}

int agent_front_admit_add(struct agent_front_admit *ad, struct agent_front_admittee *a,
                          const uv_tcp_t *tcp)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    const char *why = NULL;
    struct agent_front_admittee *v;

    a->since_ms = uv_now(ad->loop);
    /* A worker's comes from 127.0.0.1 (its MASTER_ADDR). One from another loopback address is
     * nobody's to ask of: is_worker looks up 127.0.0.1's end of the port, which a worker's
     * connection may hold while this one shares its port number. */
    a->port = uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &len) == 0 &&
                      ss.ss_family == AF_INET &&
                      ((struct sockaddr_in *)&ss)->sin_addr.s_addr == htonl(INADDR_LOOPBACK)
                  ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
                  : 0;
    a->heard = false;
    a->worker = -1;
    rdzv_list_init(&a->node);
    if (ad->n >= ad->max) {
        if (!(v = victim(ad, a, &why))) {
            refused(ad);
            return -EUSERS;
        }
        ad->evict(v, why, ad->ud);
    }
    rdzv_list_add_tail(&ad->list, &a->node);
    ad->n++;
    arm(ad);
    return 0;
}

void agent_front_admit_heard(struct agent_front_admittee *a)
{
    a->heard = true; /* the timer passes it over when it fires */
}

void agent_front_admit_del(struct agent_front_admit *ad, struct agent_front_admittee *a)
{
    if (rdzv_list_empty(&a->node))
        return;
    rdzv_list_del(&a->node);
    rdzv_list_init(&a->node);
    ad->n--;
}

void agent_front_admit_close(struct agent_front_admit *ad, uv_close_cb close_cb)
{
    ad->deferred = NULL;
    uv_close((uv_handle_t *)&ad->timer, close_cb);
    uv_close((uv_handle_t *)&ad->idle, close_cb);
}
