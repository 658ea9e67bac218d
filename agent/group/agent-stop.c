/* SPDX-License-Identifier: Apache-2.0 */
/* agent-stop.c: signals to the workers' process groups, stop escalation (signal, grace period,
 * SIGKILL) and the end of a start's leftover processes. The group's state changes in
 * agent-workers.c (agent_group_stop), which calls these. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>

#include "common/rdzv-log.h"
#include "agent/group/agent-workers-int.h"

/* The end of a start (or free): processes left in the groups of exited workers are SIGKILLed,
 * as torchrun ends each worker's process group. The workers' slots are then free for the next
 * start. */
void agent_stop_kill_leftover(struct agent_worker *w)
{
    if (!w->listed || w->running)
        return;
    if (!w->group_killed && !agent_reaper_link_pgroup_gone(w->pid)) {
        log_info("worker rank %u (pid %d) exited, but its process group still has "
                 "processes: killing them",
                 w->rank, w->pid);
        (void)kill(-w->pid, SIGKILL);
    }
    w->listed = false;
    agent_reaper_link_send_pgid(w->g, '-', w->pid);
}

void agent_stop_kill_leftovers(struct agent_group *g)
{
    for (unsigned i = 0; i < g->cfg.nproc; i++)
        agent_stop_kill_leftover(&g->workers[i]);
}

/* ---- timers ---- */

/* Signal the process group of each worker that may still have one: running, or exited with
 * processes left in its group (listed). */
void agent_stop_kill(struct agent_group *g, int signum)
{
    for (unsigned i = 0; i < g->cfg.nproc; i++)
        agent_group_signal_rank(g, i, signum);
}

void agent_group_signal_rank(struct agent_group *g, unsigned local_rank, int signum)
{
    struct agent_worker *w;

    if (local_rank >= g->cfg.nproc)
        return;
    w = &g->workers[local_rank];
    if (!w->listed)
        return;
    if (kill(-w->pid, signum) < 0 && errno != ESRCH)
        log_warn_errno(-errno, "worker rank %u: kill(-%d, %d)", w->rank, w->pid, signum);
    else if (signum == SIGKILL)
        w->group_killed = true;
}

static void kill_timer_cb(uv_timer_t *t)
{
    struct agent_group *g = t->data;

    for (unsigned i = 0; i < g->cfg.nproc; i++) {
        struct agent_worker *w = &g->workers[i];

        if (w->running)
            log_warn("worker rank %u (pid %d) still running %" PRIu64
                     " ms after signal %d, sending SIGKILL to its process group",
                     w->rank, w->pid, g->cfg.grace_ms, g->stop_signal);
    }
    agent_stop_kill(g, SIGKILL);
}

void agent_stop_arm_kill(struct agent_group *g)
{
    /* The grace period counts from now, not from the start of this loop iteration. */
    uv_update_time(g->cfg.loop);
    (void)uv_timer_start(&g->kill_timer, kill_timer_cb, g->cfg.grace_ms, 0);
}

/* ---- public API (agent-workers.h) ---- */

void agent_group_signal(struct agent_group *g, int signum)
{
    if (!agent_group_active(g))
        return;
    log_info("forwarding signal %d to %u workers", signum, g->running);
    agent_stop_kill(g, signum);
}
