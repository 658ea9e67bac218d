/* SPDX-License-Identifier: Apache-2.0 */
/* agent-sched.h: what the agent asks of the scheduler that runs it. Under Slurm, why a job is
 * being ended when its agent receives SIGTERM: slurmctld has it as the job's reason
 * while the job completes (squeue -o "%T|%r": "COMPLETING|TimeLimit" for a time limit,
 * "COMPLETING|None" after scancel), so a cancelled job can say which it was.
 *
 * The command runs for at most its timeout, the agent's loop waiting (at most that long, once,
 * as the agent stops). Threads: the main thread. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/rdzv-msg.h"

/* How long the agent waits for squeue when it is cancelled. */
#define AGENT_SLURM_WHY_TIMEOUT_S 2.0

/* Why this agent is stopped from outside, into cn's reason: "Slurm job N: <agent_slurm_why>"
 * (or "Slurm job N" when squeue does not answer), "PBS job N", "Grid Engine job N", or ""
 * outside a scheduler; cut at a UTF-8 boundary. Whether the scheduler is ending the whole job:
 * then cn's sched_job is its job id (every node of it gets the signal) and it returns true.
 * Under Slurm, unless squeue says the job still runs (a signal from outside Slurm); under Grid
 * Engine and PBS, always: they signal a job's processes only to end it (qdel, a time limit). */
bool agent_sched_cancel(struct rdzv_cancel *cn);

/* Why Slurm ends job job_id, in a few words ("its time limit", "scancel", "preemption", "a
 * signal from outside Slurm: the job still runs", or Slurm's own state and reason), into why.
 * 0, or a negative errno (squeue missing, failing or too slow: why is then empty; logged). */
int agent_slurm_why(const char *job_id, double timeout_s, char *why, size_t len);

/* Grid Engine (Son of Grid Engine, as Debian ships it; Univa and Altair keep its variables) runs
 * this process in its job: JOB_ID, with PE_HOSTFILE, SGE_JOB_SPOOL_DIR or SGE_O_WORKDIR beside it,
 * which only a job has (JOB_ID alone is too common a name to mean it; SGE_ROOT is in every login
 * shell of such a cluster). */
bool agent_sge_job(void);

/* The scheduler's job id, the same on every node of the job: SLURM_JOB_ID, PBS_JOBID, or Grid
 * Engine's JOB_ID ("JOB_ID.TASK" in an array job: SGE_TASK_ID is "undefined" outside one).
 * NULL outside a scheduler. The string lives until the next call. */
const char *agent_sched_job_id(void);

/* Grid Engine's parallel environment: host's line of the PE_HOSTFILE at path ("HOST SLOTS
 * QUEUE@HOST PROCESSORS", in the allocation's order, a host once a queue it gives slots from;
 * host names compared up to their first '.', without case): its index among the distinct hosts
 * into *rank, their number into *nhosts, its queue instances into queue, comma-separated as
 * qmod takes them ("all.q@node1,gpu.q@node1"). 0, -ENOENT (host not in it), -EBADMSG (a line
 * that is not one), -ENAMETOOLONG (its queue instances do not fit in qlen), -ENOMEM, or the
 * errno of reading it. */
int agent_sge_host(const char *path, const char *host, int64_t *rank, int64_t *nhosts,
                   char *queue, size_t qlen);
/* This host's index in the allocation's PE_HOSTFILE at path (agent_sge_host, by gethostname),
 * into *rank: 0, or a negative errno said on stderr in one line (node ranks then go by the
 * order of arrival, as with no scheduler). */
int agent_sge_node_rank(const char *path, int64_t *rank);
