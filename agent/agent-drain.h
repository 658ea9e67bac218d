/* SPDX-License-Identifier: Apache-2.0 */
/* agent-drain.h: rdzv-agent --on-bad-node drain: the scheduler hears of a node its job put aside,
 * so that the next job does not get it either. Under Slurm (SLURMD_NODENAME, or SLURM_JOB_ID and
 * the host name) the node is drained with the reason, `scontrol update NodeName=N State=DRAIN
 * Reason="rdzv: ..."`; under PBS (PBS_JOBID) marked offline, `pbsnodes -o -C "rdzv: ..." HOST`;
 * under Grid Engine (agent_sge_job) every queue instance of the host disabled, `qmod -d
 * all.q@HOST,gpu.q@HOST` (this host's lines of PE_HOSTFILE: one for each queue giving slots).
 * Elsewhere nothing is done (said once). A drain that fails is logged and changes nothing else:
 * the agent's exit status stays the put-aside one.
 *
 * Only a node rdzvd put aside is drained: the caller asks on rdzvd's own word (EVENT put_aside,
 * or a check failed here), never on an exit code, which a worker may give for its own reasons.
 * The node is named as the scheduler names it (agent_sched_node_name), never by --host or
 * --local-addr, which name an address or a log prefix.
 *
 * Runs the command on a loop of its own, at most timeout_s; called once, as the agent exits.
 * Threads: the main thread, after the agent's loop ended. */
#pragma once
#include <stddef.h>

/* This node as the scheduler names it, into name (len bytes): SLURMD_NODENAME under Slurm, else
 * the short host name (up to its first '.'), which is Slurm's and PBS's default node name.
 * 0, or -ENAMETOOLONG / a negative errno of gethostname. */
int agent_sched_node_name(char *name, size_t len);

/* Tell the scheduler; reason: why the node was put aside. 0 when drained, else a negative errno
 * (logged). */
int agent_drain_node(const char *reason, double timeout_s);
