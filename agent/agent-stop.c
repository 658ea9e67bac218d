/* SPDX-License-Identifier: Apache-2.0 */
/* agent-stop.c: signals to the workers' process groups, stop escalation (signal, grace period,
 * SIGKILL), the drain of output that descendants keep open after the last exit, and the end of a
 * start's leftover processes. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>

#include "../common/rdzv-log.h"
#include "agent-workers-int.h"

static bool group_gone(int pgid)
{
    return kill(-pgid, 0) < 0 && errno == ESRCH;
}

/* Unlist w's group ("-pid") once it is known gone: its worker reaped and no process left in it,
 * or SIGKILL sent to it (its processes are doomed, and the id cannot be reused before the last of
 * them is gone). An exited worker's group that still has processes (a lingering descendant)
 * stays listed: it is checked again when the worker's pipes close and at the end of the start. */
void agent_stop_unlist_if_gone(struct agent_worker *w)
{
    if (!w->listed || w->running)
        return;
    if (!w->group_killed && !group_gone(w->pid))
        return;
    w->listed = false;
    agent_reaper_link_send_pgid(w->g, '-', w->pid);
}

/* The end of a start (or free): processes left in the groups of exited workers are SIGKILLed,
 * as torchrun ends each worker's process group. The workers' slots are then free for the next
 * start. */
void agent_stop_kill_leftover(struct agent_worker *w)
{
    if (!w->listed || w->running)
        return;
    if (!w->group_killed && !group_gone(w->pid)) {
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

static void drain_timer_cb(uv_timer_t *t)
{
    struct agent_group *g = t->data;

    /* A stalled reader of our own output is not the workers' fault: wait for it, unless we are
     * stopping (then the deadline holds). */
    if (g->paused && g->state != GROUP_STOPPING) {
        (void)uv_timer_again(t);
        return;
    }
    for (unsigned i = 0; i < g->cfg.nproc; i++)
        for (unsigned k = 0; k < _OUT_MAX; k++) {
            struct worker_out *o = &g->workers[i].out[k];

            /* a worker started by agent_group_start_ranks() meanwhile keeps its pipes */
            if (!o->open || g->workers[i].running)
                continue;
            if (g->paused)
                log_warn("worker rank %u: stopping, dropping its %s that nobody reads from "
                         "the agent",
                         g->workers[i].rank, agent_out_name(k));
            else
                log_warn("worker rank %u exited but its %s is still open after %d ms of "
                         "silence (a child process holds it), closing it",
                         g->workers[i].rank, agent_out_name(k), AGENT_DRAIN_MS);
            agent_relay_out_close(o);
        }
}

void agent_stop_drain_start(struct agent_group *g)
{
    /* AGENT_DRAIN_MS from now, not from the start of this loop iteration. */
    uv_update_time(g->cfg.loop);
    (void)uv_timer_start(&g->drain_timer, drain_timer_cb, AGENT_DRAIN_MS, AGENT_DRAIN_MS);
}

void agent_stop_drain_touch(struct agent_group *g)
{
    /* After the last exit the drain deadline counts silence, not total time; when stopping it is
     * firm, or a descendant outside the process groups could keep the stop from completing. */
    if (g->state == GROUP_ACTIVE && g->running == 0 && uv_is_active((uv_handle_t *)&g->drain_timer))
        (void)uv_timer_again(&g->drain_timer);
}

/* ---- public API (agent-workers.h) ---- */

void agent_group_signal(struct agent_group *g, int signum)
{
    if (!agent_group_active(g))
        return;
    log_info("forwarding signal %d to %u workers", signum, g->running);
    agent_stop_kill(g, signum);
}

void agent_group_stop(struct agent_group *g, int signum)
{
    switch (g->state) {
    case GROUP_IDLE:
        agent_group_notify_soon(g);
        return;
    case GROUP_ACTIVE:
        agent_group_set_state(g, GROUP_STOPPING);
        g->stop_signal = signum;
        /* The grace period counts from now, not from the start of this loop iteration. */
        uv_update_time(g->cfg.loop);
        (void)uv_timer_start(&g->kill_timer, kill_timer_cb, g->cfg.grace_ms, 0);
        /* Workers all gone, only waiting for a slow reader of their output: end now. */
        if (g->worker_handles == 0)
            agent_group_notify_soon(g);
        log_info("stopping %u workers with signal %d, SIGKILL in %" PRIu64 " ms", g->running,
                 signum, g->cfg.grace_ms);
        break;
    case GROUP_STOPPING:
        log_info("stopping %u workers with signal %d", g->running, signum);
        break;
    case GROUP_FREEING:
    case _GROUP_STATE_MAX:
        return;
    }
    agent_stop_kill(g, signum);
}
