/* SPDX-License-Identifier: Apache-2.0 */
/* agent-heartbeat.h: the HEARTBEAT an agent sends rdzvd, with its workers' progress (what rdzvctl
 * status, the status page and /metrics show per rank).
 *
 * Ownership: fills the caller's struct; of the group, only its compute counts change. Threads:
 * the loop thread (the group's). Cannot fail. */
#pragma once
#include <stdint.h>

#include "proto/rdzv-msg.h"

struct agent_group;
struct agent_stall;

/* *h := generation gen and, when g is not NULL, the last progress report (step, age) of each of
 * g's local ranks 0..nproc that has reported (agent_group_progress), at most RDZV_PROGRESS_MAX,
 * with the mean compute time of its steps since the last HEARTBEAT (agent_group_compute_take:
 * the count begins anew, so fill only what is sent). Pass g NULL when the workers are not gen's
 * (stopping, between rounds): no progress then. With stall (may be NULL), the loop's longest
 * stall so far (loop_stall_ms, 1.21). */
void agent_heartbeat_fill(struct rdzv_heartbeat *h, uint64_t gen, struct agent_group *g,
                          unsigned nproc, const struct agent_stall *stall);
