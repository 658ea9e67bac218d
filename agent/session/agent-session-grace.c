/* SPDX-License-Identifier: Apache-2.0 */
/* agent-session-grace.c: another node's worker failed at start-up, and this node's workers have
 * not made a first step either. Stopped at once, they could never show that they fail alike
 * (a script bug fails on every node, a few milliseconds apart): the faster node would be judged
 * a bad node and put aside, and the job would wait for a node that never comes. So
 * the stop waits up to rdzvd's startup_grace_ms (EVENT restart, 1.17): a worker that fails
 * meanwhile is reported as any failure (rdzvd then sees every node failing alike: the job's
 * failure, nobody put aside), all exiting means READY, and at the end the rest are stopped.
 * Calls into agent-session.c (agent-session-impl.h), never the other way. */
#include <inttypes.h>

#include "common/rdzv-log.h"
#include "agent/group/agent-workers.h"
#include "agent/session/agent-session-impl.h"

static void grace_cb(uv_timer_t *t)
{
    struct agent_session *a = t->data;

    if (!a->grace_on)
        return;
    a->grace_on = false;
    /* Leaving RUNNING ends the hold (agent-session.c): a generation of its own, all the same. */
    if (a->state != AG_RUNNING || a->round.generation != a->stopping_gen)
        return;
    log_info("workers still starting after the grace: stopping them for the restart");
    a->grace_over(a);
}

/* Whether a worker here reported a step (it is past its start). */
static bool any_step(struct agent_session *a)
{
    for (unsigned i = 0; i < (unsigned)a->cfg.nproc; i++) {
        uint64_t step, age_ms;

        if (agent_group_progress(a->group, i, &step, &age_ms) == 0)
            return true;
    }
    return false;
}

bool agent_session_grace_begin(struct agent_session *a, const struct rdzv_event *e,
                               void (*over)(struct agent_session *a))
{
    if (e->startup_grace_ms <= 0 || a->grace_on || a->state != AG_RUNNING ||
        agent_group_running(a->group) == 0 || any_step(a))
        return false;
    if (!a->grace_timer.data) {
        if (uv_timer_init(a->loop, &a->grace_timer) < 0)
            return false;
        a->grace_timer.data = a;
    }
    if (uv_timer_start(&a->grace_timer, grace_cb, (uint64_t)e->startup_grace_ms, 0) < 0)
        return false;
    a->grace_on = true;
    a->grace_over = over;
    a->stopping_gen = e->generation;
    a->restart_pending = true;
    log_warn("restarting: %s; the workers here have not made a first step either: they get "
             "%.1f s to show whether they fail the same way (the job's own failure, as a script "
             "bug, puts no node aside)",
             e->summary, (double)e->startup_grace_ms / 1000);
    return true;
}

bool agent_session_grace_end(struct agent_session *a)
{
    bool was = a->grace_on;

    a->grace_on = false;
    if (was)
        (void)uv_timer_stop(&a->grace_timer);
    return was;
}
