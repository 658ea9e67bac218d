/* SPDX-License-Identifier: Apache-2.0 */
/* agent-cgroup.h: the workers' cgroup (cgroup v2): a cgroup the agent makes under its own,
 * <the agent's cgroup>/rdzv-agent.<agent pid>, that every worker is forked into, so that what a
 * worker starts stays in it however it detaches (setsid, a cleared environment, a double fork: what
 * neither the process-group kill nor the reaper's token scan finds), and cgroup.kill ends all of it
 * at once, as Slurm's proctrack/cgroup ends a step. The agent can make one where it may write its
 * own cgroup: as root, in a subtree delegated to it (systemd's Delegate=, a container's own
 * namespace) or in Slurm's step cgroup; elsewhere it has none, and says why.
 *
 * A fork lands in its parent's cgroup, and uv_spawn() has no hook between fork and exec: the agent
 * moves itself into the cgroup around the spawns of a start (agent_cgroup_enter/_leave, two writes
 * however many workers), so that each worker is in it from its first instruction. Nothing else may
 * be spawned meanwhile (the reaper, nvidia-smi, gdb, the drain's scontrol: cgroup.kill would end
 * them with the workers).
 *
 * Ownership: struct agent_cgroup is the caller's; its descriptors and directory are made by
 * agent_cgroup_open() and let go by agent_cgroup_close(). Errors: negative errno; nothing here
 * logs (the reaper uses it too, whose stderr is /dev/null): the caller says what failed. Threads:
 * any, one at a time per struct; every call is a few system calls on cgroupfs, and only
 * agent_cgroup_close() and agent_cgroup_remove_dir() may block, for at most wait_ms. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define AGENT_CGROUP_PREFIX "rdzv-agent." /* followed by the agent's pid: see agent_cgroup_open */
#define AGENT_CGROUP_PATH_MAX 512 /* the cgroup's directory, its NUL included; longer: no cgroup */
#define AGENT_CGROUP_WAIT_MS 2000 /* at the end: time for killed processes to leave the cgroup */

struct agent_cgroup {
    int procs_fd; /* the workers' cgroup.procs: -1 when there is no cgroup */
    int home_fd;  /* the agent's own cgroup.procs, to move back to */
    int kill_fd;  /* the workers' cgroup.kill */
    int events_fd; /* the workers' cgroup.events ("populated 0|1") */
    bool inside;   /* moved in by agent_cgroup_enter(), not yet moved back */
    bool killed;   /* agent_cgroup_kill() since the last agent_cgroup_enter(): what is in it dies */
    char path[AGENT_CGROUP_PATH_MAX]; /* the directory */
    const char *name; /* path as the cgroup hierarchy names it ("/rdzv-agent.123"), within path */
};

/* No cgroup: every descriptor -1. Call before anything else (agent_cgroup_close() is a no-op on
 * it). */
void agent_cgroup_init(struct agent_cgroup *cg);

/* Make the workers' cgroup: find the cgroup2 mount (/proc/self/mountinfo) and the agent's own
 * cgroup there (/proc/self/cgroup's "0::" line), remove the empty rdzv-agent.<pid> cgroups beside
 * ours whose agent is gone (an agent SIGKILLed as its workers' processes were still dying), make
 * rdzv-agent.<our pid> and check that the agent can move itself in and back. Returns 0, or -errno
 * with why (len bytes) saying in a few words why there is no cgroup; then nothing is left behind,
 * except -EDEADLK: the agent moved in but not back out, and stays inside (cg has no cgroup: it
 * must never be killed). */
int agent_cgroup_open(struct agent_cgroup *cg, char *why, size_t len);

/* Whether there is a workers' cgroup. */
static inline bool agent_cgroup_on(const struct agent_cgroup *cg)
{
    return cg->procs_fd >= 0;
}

/* Move the calling process (all its threads) into the workers' cgroup, so that what it forks
 * until agent_cgroup_leave() starts there; and back. 0 or -errno (nothing moved). */
int agent_cgroup_enter(struct agent_cgroup *cg);
int agent_cgroup_leave(struct agent_cgroup *cg);

/* 1 if a process is in the workers' cgroup (or below), 0 if none, -errno. */
int agent_cgroup_populated(const struct agent_cgroup *cg);

/* SIGKILL every process in the workers' cgroup and below (cgroup.kill): the kernel sends them the
 * signal before this returns, including to a process forking meanwhile; they leave the cgroup as
 * they exit (a zombie is out). Refused (-EDEADLK) while the agent is inside. 0 or -errno. */
int agent_cgroup_kill(struct agent_cgroup *cg);

/* At the agent's end: kill what is left (unless the agent is inside), wait up to wait_ms for it to
 * leave, remove the cgroup (and any empty cgroup below it: a nested agent's), close the
 * descriptors. Returns 0, -EBUSY if the cgroup could not be removed in time (it is left to the
 * next agent's agent_cgroup_open()), or another -errno. cg has no cgroup afterwards. */
int agent_cgroup_close(struct agent_cgroup *cg, unsigned wait_ms);

/* Let the cgroup go, neither killed nor removed (what runs in it goes on; an empty one is removed
 * by the next agent's agent_cgroup_open()): close the descriptors. cg has no cgroup afterwards. */
void agent_cgroup_forget(struct agent_cgroup *cg);

/* Whether path may name a workers' cgroup: absolute, no "." or ".." component, last component
 * rdzv-agent.<digits>, shorter than AGENT_CGROUP_PATH_MAX. The reaper checks what agents tell
 * it. */
bool agent_cgroup_path_valid(const char *path);

/* The reaper's: kill what is in the cgroup directory path (returns 1 if it held processes, 0 if
 * not, or -errno), without waiting. */
int agent_cgroup_kill_dir(const char *path);

/* ... then, once every such directory of a round is killed: wait up to wait_ms for path to
 * empty, and remove it with any empty cgroup below it. 0 or -errno (-EBUSY: not empty in time). */
int agent_cgroup_remove_dir(const char *path, unsigned wait_ms);
