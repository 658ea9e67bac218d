/* SPDX-License-Identifier: Apache-2.0 */
/* agent-reaper.h: the reaper, one small process per host (per user and PID namespace) that
 * SIGKILLs an agent's workers when that agent is gone, however it went (SIGKILL included). */
#pragma once

#include <stddef.h>

/*
 * The agents of a job on a host share it, so that an agent costs a connect(), not a process: on a
 * machine running one agent per GPU or, in the benchmark, 256 agents on 2 cores, a process per
 * agent costs as much CPU as the per-worker exec wrapper it replaces. Jobs do not share one: a
 * reaper lives in the job (its cgroup, under Slurm) of the agent that started it.
 *
 * It listens on an abstract unix socket named after the user, the PID namespace and the job
 * (agent_reaper_default_name(); only peers of its own uid are served, and agents check the same of
 * it). A group
 * (agent-workers.c) connects there; if nobody listens it starts one with uv_spawn:
 *     rdzv-agent --reaper <name>
 * with one end of a socket pair on stdin as its first connection (the reaper then daemonizes and
 * tries to own the name; if another has it, it serves its first connection only). The agent's
 * end is close-on-exec. Lines, agent to reaper:
 *     "=<token> <agent pid>\n"  first: who this is; sent with, in one SCM_RIGHTS message, the
 *                               agent's stderr, where the reaper reports what it killed, and
 *                               then, if it has one, its workers' cgroup (agent-cgroup.h): the
 *                               directory (O_RDONLY | O_DIRECTORY) and its cgroup.kill, opened
 *                               for writing by the agent (/dev/null stands for a closed stderr
 *                               then); any other descriptor is closed
 *     "+<pgid>\n"               a worker was spawned; pgid is its process group (its pid)
 *     "-<pgid>\n"               that group is gone (or was SIGKILLed) and its worker reaped
 *     "q\n"                     a clean end: nothing spawned is left unlisted
 * and reaper to agent, once: "ok <reaper pid>\n". EOF (or a reset) on a connection means that agent
 * is gone: the reaper SIGKILLs every group it still had listed and, unless it said "q", every
 * process group holding a process whose environment carries its token in RDZV_AGENT_TOKEN (the
 * agent gives it to each worker; descendants inherit it), and everything in its workers' cgroup:
 * what a worker started with setsid() and a cleared environment escapes the first two. The
 * variable is a comma-separated list: a worker of an agent that is itself another agent's worker
 * carries both tokens. The token closes the window between a worker's fork and the agent's "+"
 * line: a child forked by the agent holds the agent's end until its exec, so EOF comes only once
 * every such child has exec'd, i.e. carries the token, or died. The agent sees EOF when the reaper
 * dies, and connects (or starts one) again.
 *
 * The cgroup is what the agent passed, never a path: the reaper keeps it only if the directory is
 * on a cgroup2 file system (fstatfs) and the file is that directory's cgroup.kill (the same inode,
 * not followed if a link) open for writing, and writes "1" to that descriptor: what the agent
 * could write itself. It then removes the cgroup once its cgroup.events (opened relative to the
 * directory with O_NOFOLLOW, on cgroup2 too) says it is empty: woken by EPOLLPRI (and, in case
 * that notice comes before rmdir can succeed, after 10, 20, 40 ... ms, then every second), the
 * directory found in its parent by its inode, CGROUP_REMOVE_MS at most (else the next agent in
 * that PID namespace removes it).
 *
 * The reaper ignores SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGUSR1 and SIGUSR2 (signals meant
 * for the agents or the job must not take it down before the workers), runs in a session of its
 * own with /dev/null as stdio, uses no libuv, and exits when its last connection is gone and the
 * cgroups it killed are removed (or past their time).
 *
 * Contract of this header: agent_reaper_default_name() is pure (any thread; writes only buf);
 * agent_reaper_main() takes over the process (call it from main() only, before any loop exists).
 * The agents' side of the protocol is agent-reaper-link.c. Errors: negative errno.
 */

#define AGENT_TOKEN_ENV "RDZV_AGENT_TOKEN"
#define AGENT_TOKEN_LEN 32        /* lowercase hex characters */
#define AGENT_REAPER_NAME_MAX 100 /* fits sun_path */

/* The reaper name of this process's agents for job run_id:
 * "rdzv-reaper.1.<euid>.<pid namespace inode>.<hash of run_id>" (the 1 is the protocol's
 * version). Returns 0 or -ENAMETOOLONG. */
int agent_reaper_default_name(const char *run_id, char *buf, size_t len);

/* The reaper's main: call it first thing in main() when argv[1] is "--reaper". Returns the exit
 * code: 0 (the daemonized reaper exits 0 after its last connection), 2 for bad usage. */
int agent_reaper_main(int argc, char **argv);
