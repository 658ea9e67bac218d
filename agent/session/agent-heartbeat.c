/* SPDX-License-Identifier: Apache-2.0 */
/* agent-heartbeat.c: the HEARTBEAT's progress member from the worker group's last reports. */
#include "agent/session/agent-heartbeat.h"

#include <string.h>

#include "agent/group/agent-workers.h"
#include "agent/session/agent-stall.h"

void agent_heartbeat_fill(struct rdzv_heartbeat *h, uint64_t gen, struct agent_group *g,
                          unsigned nproc, const struct agent_stall *stall)
{
    uint64_t stall_ms;

    h->generation = gen;
    h->has_loop_stall = agent_stall_max_ms(stall, &stall_ms) == 0;
    h->loop_stall_ms = !h->has_loop_stall           ? 0
                       : stall_ms > RDZV_LOOP_STALL_MAX_MS ? RDZV_LOOP_STALL_MAX_MS
                                                           : (int64_t)stall_ms;
    h->n_progress = 0;
    memset(&h->wait, 0, sizeof(h->wait)); /* rdzvd's, in its answer */
    h->warning[0] = '\0';
    for (unsigned i = 0; g && i < nproc && i < RDZV_PROGRESS_MAX; i++) {
        struct rdzv_rank_progress *p = &h->progress[h->n_progress];
        uint64_t step, age_ms;
        uint32_t cms;

        if (agent_group_progress(g, i, &step, &age_ms) < 0)
            continue;
        p->local_rank = i;
        p->step = step > INT64_MAX ? INT64_MAX : (int64_t)step;
        p->age_ms = age_ms > (uint64_t)RDZV_PROGRESS_AGE_MAX_MS ? RDZV_PROGRESS_AGE_MAX_MS
                                                                : (int64_t)age_ms;
        p->timeout_ms = (int64_t)agent_group_progress_timeout(g, i);
        if (p->timeout_ms > RDZV_PROGRESS_AGE_MAX_MS)
            p->timeout_ms = RDZV_PROGRESS_AGE_MAX_MS;
        p->has_compute = agent_group_compute_take(g, i, &cms) == 0;
        p->compute_ms = p->has_compute ? cms : 0;
        h->n_progress++;
    }
}
