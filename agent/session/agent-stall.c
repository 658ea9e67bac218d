/* SPDX-License-Identifier: Apache-2.0 */
/* agent-stall.c: the event loop's longest turn (agent-stall.h). */
#include "agent/session/agent-stall.h"

#include <errno.h>

#include "common/rdzv-list.h"
#include "common/rdzv-log.h"

static void prepare_cb(uv_prepare_t *p)
{
    struct agent_stall *s = rdzv_container_of(p, struct agent_stall, prepare);
    uint64_t now = uv_hrtime(), idle = uv_metrics_idle_time(p->loop), busy;

    if (s->last_ns) {
        busy = now - s->last_ns;
        busy = busy > idle - s->last_idle_ns ? busy - (idle - s->last_idle_ns) : 0;
        if (busy > s->max_ns) {
            s->max_ns = busy;
            if (busy >= (uint64_t)AGENT_STALL_WARN_MS * 1000000)
                log_warn("the agent's event loop ran %.1f s without waiting: its HEARTBEATs "
                         "waited behind it (rdzvd loses a node silent for --heartbeat-timeout)",
                         (double)busy / 1e9);
        }
    }
    s->last_ns = now;
    s->last_idle_ns = idle;
}

int agent_stall_start(struct agent_stall *s, uv_loop_t *loop)
{
    int r;

    *s = (struct agent_stall){.on = false};
    r = uv_loop_configure(loop, UV_METRICS_IDLE_TIME);
    if (r == 0)
        r = uv_prepare_init(loop, &s->prepare);
    if (r < 0)
        return r;
    r = uv_prepare_start(&s->prepare, prepare_cb);
    if (r < 0) {
        uv_close((uv_handle_t *)&s->prepare, NULL);
        return r;
    }
    uv_unref((uv_handle_t *)&s->prepare); /* it keeps the loop alive for nothing */
    s->on = true;
    return 0;
}

int agent_stall_max_ms(const struct agent_stall *s, uint64_t *ms)
{
    if (!s || !s->on)
        return -ENOENT;
    *ms = s->max_ns / 1000000;
    return 0;
}
