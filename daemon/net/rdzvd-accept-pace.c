/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-accept-pace.c: listeners that let the loop turn between bursts of connections. */
#include "daemon/net/rdzvd-accept-pace.h"

#include "daemon/data/rdzvd-config.h"

/* The turn is over: each listener that left a connection waiting accepts it now (which also
 * makes libuv watch it again), oldest first. */
static void pace_idle_cb(uv_idle_t *h)
{
    struct rdzvd_accept_pace *p = rdzv_container_of(h, struct rdzvd_accept_pace, idle);

    (void)uv_idle_stop(h);
    p->accepted = 0;
    while (!rdzv_list_empty(&p->waiting)) {
        struct rdzvd_paced *l = rdzv_container_of(p->waiting.next, struct rdzvd_paced, node);

        rdzv_list_del(&l->node);
        l->on_connection(l->listener, 0);
    }
}

void rdzvd_accept_pace_init(struct rdzvd_accept_pace *p, uv_loop_t *loop)
{
    (void)uv_idle_init(loop, &p->idle);
    rdzv_list_init(&p->waiting);
    p->accepted = 0;
}

void rdzvd_accept_pace_close(struct rdzvd_accept_pace *p, uv_close_cb cb)
{
    while (!rdzv_list_empty(&p->waiting))
        rdzv_list_del(p->waiting.next);
    uv_close((uv_handle_t *)&p->idle, cb);
}

void rdzvd_paced_init(struct rdzvd_paced *l, uv_stream_t *listener, uv_connection_cb cb)
{
    rdzv_list_init(&l->node);
    l->listener = listener;
    l->on_connection = cb;
}

bool rdzvd_accept_pace_defer(struct rdzvd_accept_pace *p, struct rdzvd_paced *l)
{
    if (uv_is_closing((uv_handle_t *)&p->idle))
        return false;
    if (p->accepted < RDZVD_TURN_ACCEPTS) {
        p->accepted++;
        return false;
    }
    if (rdzv_list_empty(&l->node))
        rdzv_list_add_tail(&p->waiting, &l->node);
    (void)uv_idle_start(&p->idle, pace_idle_cb);
    return true;
}

void rdzvd_paced_forget(struct rdzvd_paced *l)
{
    rdzv_list_del(&l->node);
}
