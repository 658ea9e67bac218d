/* SPDX-License-Identifier: Apache-2.0 */
/* agent-sched.h: what the agent asks of the scheduler that runs it. Under Slurm, why a job is
 * being ended when its agent receives SIGTERM: slurmctld has it as the job's reason
 * while the job completes (squeue -o "%T|%r": "COMPLETING|TimeLimit" for a time limit,
 * "COMPLETING|None" after scancel), so a cancelled job can say which it was.
 *
 * The command runs for at most its timeout, the agent's loop waiting (at most that long, once,
 * as the agent stops). Threads: the main thread. */
#pragma once
#include <stddef.h>

/* How long the agent waits for squeue when it is cancelled. */
#define AGENT_SLURM_WHY_TIMEOUT_S 2.0

/* Why this agent is stopped from outside, for CANCEL's reason: "Slurm job N: <agent_slurm_why>"
 * (or "Slurm job N" when squeue does not answer), "PBS job N", or "" outside a scheduler. Cut
 * to len at a UTF-8 boundary. */
void agent_sched_cancel_reason(char *reason, size_t len);

/* Why Slurm ends job job_id, in a few words ("its time limit", "scancel", "preemption", "a
 * signal from outside Slurm: the job still runs", or Slurm's own state and reason), into why.
 * 0, or a negative errno (squeue missing, failing or too slow: why is then empty; logged). */
int agent_slurm_why(const char *job_id, double timeout_s, char *why, size_t len);
