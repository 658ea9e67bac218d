/* SPDX-License-Identifier: Apache-2.0 */
/* agent-drain.h: rdzv-agent --on-bad-node drain: the scheduler hears of a node its job put aside,
 * so that the next job does not get it either. Under Slurm (SLURMD_NODENAME, or SLURM_JOB_ID and
 * the host name) the node is drained with the reason, `scontrol update NodeName=N State=DRAIN
 * Reason="rdzv: ..."`; under PBS (PBS_JOBID) marked offline, `pbsnodes -o -C "rdzv: ..." HOST`.
 * Elsewhere nothing is done (said once). A drain that fails is logged and changes nothing else:
 * the agent's exit status stays the put-aside one.
 *
 * Runs the command on a loop of its own, at most timeout_s; called once, as the agent exits.
 * Threads: the main thread, after the agent's loop ended. */
#pragma once

/* Tell the scheduler; reason: why the node was put aside. 0 when drained, else a negative errno
 * (logged). */
int agent_drain_node(const char *host, const char *reason, double timeout_s);
