/* SPDX-License-Identifier: Apache-2.0 */
/* agent-reaper.h: the reaper, a small process per worker group that SIGKILLs the workers' process
 * groups when the agent is gone, however it went (SIGKILL included). */
#pragma once

/*
 * The agent (agent-workers.c) starts it once per group, in its own session, as
 *     rdzv-agent --reaper <token>
 * with the read end of a pipe on its stdin. The agent holds the write end, close-on-exec, and
 * writes one line per event:
 *     "+<pgid>\n"   a worker was spawned; pgid is its process group (its pid)
 *     "-<pgid>\n"   that group is gone (or was SIGKILLed) and its worker reaped: forget it
 * EOF on stdin means the agent is gone: the reaper then SIGKILLs every group still listed, and
 * every process group holding a process whose environment carries RDZV_AGENT_TOKEN=<token> (the
 * agent gives it to each worker; descendants inherit it). The token closes the window between a
 * worker's fork and the agent's "+" line: a child forked by the agent holds the write end until
 * its exec, so EOF comes only once every such child has exec'd, i.e. carries the token, or died.
 *
 * The reaper ignores SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGUSR1 and SIGUSR2 (signals meant
 * for the agent or the job must not take it down before the workers), uses no libuv and almost no
 * memory. When the agent frees its group cleanly it SIGKILLs the reaper itself.
 */

#define AGENT_TOKEN_ENV "RDZV_AGENT_TOKEN"
#define AGENT_TOKEN_LEN 32 /* lowercase hex characters */

/* Entry point: call it first thing in main() when argv[1] is "--reaper" (uv_spawn has reset the
 * signal dispositions and the mask). Returns the exit code: 0 after EOF (having killed what it
 * had to, and said so on stderr), 2 for bad usage. */
int agent_reaper_main(int argc, char **argv);
