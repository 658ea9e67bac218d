/* SPDX-License-Identifier: Apache-2.0 */
/* agent-cgroup.h: the workers' cgroup (cgroup v2): a cgroup the agent makes under its own,
 * <the agent's cgroup>/rdzv-agent.<pid namespace inode>.<agent pid>.<random hex>, that every
 * worker is forked into, so that what a worker starts stays in it however it detaches (setsid, a
 * cleared environment, a double fork: what neither the process-group kill nor the reaper's token
 * scan finds), and cgroup.kill ends all of it at once, as Slurm's proctrack/cgroup ends a step.
 * The agent can make one where it may write its own cgroup: as root, in a subtree delegated to it
 * (systemd's Delegate=, a container's own namespace) or in Slurm's step cgroup; elsewhere it has
 * none, and says why.
 *
 * A fork lands in its parent's cgroup, and uv_spawn() has no hook between fork and exec and takes
 * no clone flags (clone3()'s CLONE_INTO_CGROUP would need a spawn of our own): the agent moves
 * itself into the cgroup around the spawns of a start (agent_cgroup_enter/_leave, two writes
 * however many workers), so that each worker is in it from its first instruction. A write to a
 * cgroup.procs takes cgroup_threadgroup_rwsem for writing, which waits for an RCU grace period
 * unless one just passed: the first write of a pair costs 4 to 30 ms, 11.7 ms on average, the
 * second 0.02 ms (60 pairs 500 ms apart, 2 vCPUs, Linux 6.18, HZ 250, no favordynmods; back to
 * back 0.05 ms a pair), i.e. about 10 ms more from a worker crash to its replacements (NEWS.md).
 * Nothing else may be spawned meanwhile (the reaper, nvidia-smi, gdb, the drain's scontrol:
 * cgroup.kill would end them with the workers).
 *
 * Ownership: struct agent_cgroup is the caller's; its descriptors and directory are made by
 * agent_cgroup_open() and let go by agent_cgroup_close(). Errors: negative errno; nothing here
 * logs (the reaper uses it too, whose stderr is /dev/null): the caller says what failed. Threads:
 * any, one at a time per struct; every call is a few system calls on cgroupfs, and only
 * agent_cgroup_close() may block, for at most wait_ms. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AGENT_CGROUP_PREFIX "rdzv-agent." /* then <pid ns inode>.<pid>.<hex>: agent_cgroup_open */
#define AGENT_CGROUP_PATH_MAX 512 /* the cgroup's directory, its NUL included; longer: no cgroup */
#define AGENT_CGROUP_WAIT_MS 2000 /* at the agent's end: time for killed processes to leave it */

struct agent_cgroup {
    int dir_fd;    /* the workers' cgroup directory (given to the reaper): -1 when none */
    int procs_fd;  /* its cgroup.procs */
    int home_fd;   /* the agent's own cgroup.procs, to move back to */
    int kill_fd;   /* the workers' cgroup.kill */
    int events_fd; /* the workers' cgroup.events ("populated 0|1") */
    bool inside;   /* moved in by agent_cgroup_enter(), not yet moved back */
    bool stuck;    /* a move failed: no more moves (inside: the agent cannot get out) */
    bool killed;   /* agent_cgroup_kill() since the last agent_cgroup_enter(): what is in it dies */
    char path[AGENT_CGROUP_PATH_MAX]; /* the directory */
    const char *name; /* path as the cgroup hierarchy names it ("/rdzv-agent.4026531836.123.9f0c"),
                       * within path */
};

/* No cgroup: every descriptor -1. Call before anything else (agent_cgroup_close() is a no-op on
 * it). */
void agent_cgroup_init(struct agent_cgroup *cg);

/* Make the workers' cgroup: find the cgroup2 mount (/proc/self/mountinfo) and the agent's own
 * cgroup there (/proc/self/cgroup's "0::" line), remove the empty cgroups beside ours that agents
 * gone left (agent_cgroup_remove_stale()), make a new rdzv-agent.<pid ns inode>.<pid>.<random hex>
 * (mkdir, another random part if it exists) and check that the agent can move itself in and back.
 * Returns 0, or -errno with why (len bytes) saying in a few words why there is no cgroup; then
 * nothing is left behind, except -EDEADLK: the agent moved in but not back out, and stays inside
 * (cg has no cgroup: it must never be killed). */
int agent_cgroup_open(struct agent_cgroup *cg, char *why, size_t len);

/* Whether there is a workers' cgroup (to kill at the end of a generation; whether workers still go
 * in: agent_cgroup_movable()). */
static inline bool agent_cgroup_on(const struct agent_cgroup *cg)
{
    return cg->dir_fd >= 0;
}

/* Whether workers are still forked into it: no move has failed. */
static inline bool agent_cgroup_movable(const struct agent_cgroup *cg)
{
    return cg->dir_fd >= 0 && !cg->stuck;
}

/* The cgroup v2 ids (a cgroup directory's inode) that the workers are forked in: the workers'
 * cgroup when there is one, and the caller's own cgroup (from /proc/self/cgroup and mountinfo)
 * when there is none or a move failed (later workers land there). The number of ids (1 or 2), or
 * -errno (no cgroup v2 to be found). A few small files read: call it once, not per question. */
int agent_cgroup_worker_ids(const struct agent_cgroup *cg, uint64_t ids[2]);

/* Move the calling process (all its threads) into the workers' cgroup, so that what it forks
 * until agent_cgroup_leave() starts there; and back. 0 or -errno (nothing moved). A failure of
 * either makes the cgroup unmovable for good (cg->stuck); the cgroup and what is in it stay, to be
 * killed as before, unless the agent is stuck inside (agent_cgroup_kill() refuses then). */
int agent_cgroup_enter(struct agent_cgroup *cg);
int agent_cgroup_leave(struct agent_cgroup *cg);

/* Move process pid (all its threads) into the workers' cgroup: a warm standby that became a
 * worker (agent-standby.c). 0 or -errno (-ENOENT: no cgroup, or not movable). */
int agent_cgroup_move(struct agent_cgroup *cg, int pid);

/* 1 if a process is in the workers' cgroup (or below), 0 if none, -errno. */
int agent_cgroup_populated(const struct agent_cgroup *cg);

/* SIGKILL every process in the workers' cgroup and below (cgroup.kill): the kernel sends them the
 * signal before this returns, including to a process forking meanwhile; they leave the cgroup as
 * they exit (a zombie is out). Refused (-EDEADLK) while the agent is inside. 0 or -errno. */
int agent_cgroup_kill(struct agent_cgroup *cg);

/* At the agent's end: kill what is left (unless the agent is inside), wait up to wait_ms for it to
 * leave, remove the cgroup (and any empty cgroup below it: everything there was killed), close the
 * descriptors. Returns 0, -EBUSY if the cgroup could not be removed in time (it is left to the
 * next agent's agent_cgroup_open() in this PID namespace), -EDEADLK if the agent is stuck inside
 * (left as it is), or another -errno. cg has no cgroup afterwards. */
int agent_cgroup_close(struct agent_cgroup *cg, unsigned wait_ms);

/* Remove, in the directory dir_fd (a cgroup), the cgroups that agents gone left: those named
 * rdzv-agent.<ns>.<pid>.<hex> with ns our PID namespace's inode, pid not ours and no process
 * (kill(pid, 0): ESRCH), and in each the cgroups below it named so, deepest first. Only empty
 * cgroups can go: a populated one stays (EBUSY), and so does one holding another's (a live
 * agent's, or another PID namespace's: its pid says nothing here). */
void agent_cgroup_remove_stale(int dir_fd);

/* ---- the reaper's side: a descriptor an agent passed it (SCM_RIGHTS), nothing it says ---- */

/* 0 if fd is a directory on a cgroup2 file system (fstat, fstatfs), else -ENOTDIR, -EINVAL (not
 * cgroup2) or -errno. */
int agent_cgroup_dir_check(int fd);

/* Open file of the cgroup directory dir (checked with agent_cgroup_dir_check()): openat() with
 * O_NOFOLLOW, and the file opened must be on cgroup2 too (not a mount over it). fd or -errno. */
int agent_cgroup_open_at(int dir, const char *file, int flags);

/* "populated 0|1" of a cgroup.events descriptor: 1, 0 or -errno; reading it re-arms poll(). */
int agent_cgroup_events_populated(int events_fd);

/* 0 if kill_fd is the cgroup.kill of the cgroup directory dir (agent_cgroup_dir_check()), open
 * for writing: the same file as dir's entry cgroup.kill (not followed if a link); else -EINVAL,
 * -EBADF (not open for writing) or -errno. */
int agent_cgroup_kill_check(int dir, int kill_fd);

/* Kill what is in the cgroup directory dir (both checked with agent_cgroup_kill_check()): 1 if
 * it held processes (then "1" was written to kill_fd), 0 if not, or -errno, without waiting. */
int agent_cgroup_kill_at(int dir, int kill_fd);

/* Remove the cgroup directory dir, once empty, with any empty cgroup below it: found in its
 * parent (its ".." on the same cgroup2 file system) by its inode, not by a name anyone gave.
 * 0, -EBUSY (populated still), -ENOENT (gone already) or -errno. */
int agent_cgroup_remove_at(int dir);
