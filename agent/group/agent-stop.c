/* SPDX-License-Identifier: Apache-2.0 */
/* agent-stop.c: signals to the workers' process groups, stop escalation (signal, grace period,
 * SIGKILL), the end of a start's leftover processes and the workers' cgroup that holds them all
 * (agent-cgroup.h). The group's state changes in agent-workers.c (agent_group_stop), which calls
 * these. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
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

/* What a worker started and detached from its process group (setsid, a double fork) is still in
 * the workers' cgroup: it goes as soon as the last worker has exited (its output pipes then end,
 * however chatty it was), or with the workers' process groups when the stop's grace period is
 * over, and at the end of the start. */
void agent_stop_kill_cgroup(struct agent_group *g)
{
    int r;

    if (g->cgroup.inside)
        return; /* stuck in it (agent_stop_cgroup_leave): it would kill the agent */
    r = agent_cgroup_populated(&g->cgroup);

    /* Killed at the end of the start, and dying still (no worker forked since). */
    if (r > 0 && g->cgroup.killed)
        return;
    if (r > 0) {
        if (g->running == 0)
            log_info("processes left in the workers' cgroup %s after they exited: killing them",
                     g->cgroup.name);
        r = agent_cgroup_kill(&g->cgroup);
    }
    if (r < 0 && r != -ENOENT)
        log_warn_errno(r, "cannot kill what is left in the workers' cgroup %s", g->cgroup.name);
}

void agent_stop_kill_leftovers(struct agent_group *g)
{
    for (unsigned i = 0; i < g->cfg.nproc; i++)
        agent_stop_kill_leftover(&g->workers[i]);
    agent_stop_kill_cgroup(g);
}

/* ---- the workers' cgroup ---- */

void agent_stop_cgroup_open(struct agent_group *g)
{
    char why[AGENT_CGROUP_PATH_MAX + 128];
    int r = 0;

    if (g->cfg.no_cgroup)
        snprintf(why, sizeof(why), "--no-cgroup");
    else
        r = agent_cgroup_open(&g->cgroup, why, sizeof(why));
    if (!g->cfg.no_cgroup && r == 0) {
        log_info("workers run in cgroup %s (cgroup v2): everything they start is killed at the "
                 "end of each generation",
                 g->cgroup.name);
        return;
    }
    if (r == -EDEADLK)
        log_error("the workers' cgroup: %s", why);
    log_info("workers are tracked by their process groups and the token scan: no cgroup (%s)",
             why);
}

int agent_group_worker_cgroups(const struct agent_group *g, uint64_t ids[2])
{
    bool running = false;

    for (unsigned i = 0; i < g->cfg.nproc && !running; i++)
        running = g->workers[i].running && g->workers[i].pid > 0;
    return running ? agent_cgroup_worker_ids(&g->cgroup, ids) : 0;
}

void agent_stop_cgroup_enter(struct agent_group *g)
{
    int r;

    if (!agent_cgroup_movable(&g->cgroup))
        return;
    r = agent_cgroup_enter(&g->cgroup);
    if (r < 0)
        log_warn_errno(r, "cannot move into the workers' cgroup %s: workers start outside it from "
                          "now on, tracked by their process groups and the token scan (what is "
                          "in it is still killed)",
                       g->cgroup.name);
}

void agent_stop_cgroup_leave(struct agent_group *g)
{
    int r;

    if (!g->cgroup.inside)
        return;
    r = agent_cgroup_leave(&g->cgroup);
    if (r < 0)
        /* Stuck in it: a cgroup.kill would kill the agent, and whatever it spawns next. */
        log_error_errno(r, "cannot move out of the workers' cgroup %s: the agent stays in it, and "
                           "only the reaper kills it, once the agent is gone; workers are tracked "
                           "by their process groups and the token scan",
                        g->cgroup.name);
}

void agent_stop_cgroup_close(struct agent_group *g)
{
    char name[AGENT_CGROUP_PATH_MAX];
    int r;

    if (!agent_cgroup_on(&g->cgroup))
        return;
    snprintf(name, sizeof(name), "%s", g->cgroup.name);
    r = agent_cgroup_close(&g->cgroup, AGENT_CGROUP_WAIT_MS);
    if (r == -EBUSY)
        log_warn("the workers' cgroup %s still has processes %d ms after they were killed: left "
                 "for the next agent on this host to remove",
                 name, AGENT_CGROUP_WAIT_MS);
    else if (r == -EDEADLK)
        log_warn("the workers' cgroup %s is left as it is: the agent is in it", name);
    else if (r < 0)
        log_warn_errno(r, "cannot remove the workers' cgroup %s", name);
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
    /* And what left their process groups: nothing of this start may keep the stop waiting. */
    agent_stop_kill_cgroup(g);
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
    log_info("forwarding signal %d to %u worker%s", signum, g->running, rdzv_plural(g->running));
    agent_stop_kill(g, signum);
}
