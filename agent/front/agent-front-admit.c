/* SPDX-License-Identifier: Apache-2.0 */
/* agent-front-admit.c: who keeps a slot of the node's store front (agent-front-admit.h). */
#include "agent/front/agent-front-admit.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "common/rdzv-log.h"

static void arm(struct agent_front_admit *ad);

static bool is_worker(struct agent_front_admit *ad, struct agent_front_admittee *a)
{
    if (!ad->is_worker)
        return true;
    if (a->worker < 0)
        a->worker = a->port && ad->is_worker(a->port, ad->server_port, ad->worker_ud);
    return a->worker > 0;
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

    if (ad->is_worker && is_worker(ad, newcomer)) {
        rdzv_list_for_each_safe(pos, tmp, &ad->list)
        {
            struct agent_front_admittee *a =
                rdzv_container_of(pos, struct agent_front_admittee, node);

            if (!is_worker(ad, a)) {
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
    r = uv_timer_init(ad->loop, &ad->timer);
    ad->timer.data = ad->ud;
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
    uv_close((uv_handle_t *)&ad->timer, close_cb);
}
