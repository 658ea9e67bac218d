/* SPDX-License-Identifier: Apache-2.0 */
/* agent-group-handles.c: the bottom of the worker group: the count of its open handles (every
 * handle, and each worker's process and pipe handles), their close callbacks, and "settled":
 * when a count falls it calls the callbacks the group registered (g->settle, g->slot_free), never
 * a function of the files above it (agent-workers.c, agent-relay.c, agent-stop.c,
 * agent-progress.c, agent-reaper-link.c), which all call down to it. */
#include <assert.h>

#include "agent/group/agent-workers-int.h"

void agent_group_settle(struct agent_group *g)
{
    g->settle(g);
}

void agent_group_handle_close_cb(uv_handle_t *h)
{
    struct agent_group *g = h->data;

    assert(g->handles > 0);
    g->handles--;
    agent_group_settle(g);
}

struct agent_worker *agent_group_worker_of(struct agent_group *g, const uv_handle_t *h)
{
    size_t off = (size_t)((const char *)h - (const char *)g->workers);

    assert((const char *)h >= (const char *)g->workers && off / sizeof(*g->workers) < g->cfg.nproc);
    return &g->workers[off / sizeof(*g->workers)];
}

void agent_group_worker_handle_added(struct agent_group *g, uv_handle_t *h)
{
    g->worker_handles++;
    g->handles++;
    agent_group_worker_of(g, h)->handles++;
}

void agent_group_worker_handle_adopt(struct agent_group *g, uv_handle_t *h)
{
    g->worker_handles++;
    agent_group_worker_of(g, h)->handles++;
}

void agent_group_worker_handle_gone(struct agent_group *g, uv_handle_t *h)
{
    struct agent_worker *w = agent_group_worker_of(g, h);

    assert(g->worker_handles > 0 && g->handles > 0 && w->handles > 0);
    g->worker_handles--;
    g->handles--;
    w->handles--;
    if (w->handles == 0 && w->respawn)
        g->slot_free(w);
}

void agent_group_worker_close_cb(uv_handle_t *h)
{
    struct agent_group *g = h->data;

    agent_group_worker_handle_gone(g, h);
    agent_group_settle(g);
}
