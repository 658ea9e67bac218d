/* SPDX-License-Identifier: Apache-2.0 */
/* agent-stall.h: the longest the agent's event loop ran without waiting. Everything the agent
 * does is on that one loop, its HEARTBEATs too: a callback that runs for seconds delays them,
 * and rdzvd loses a node silent for --heartbeat-timeout. The agent reports the figure in each
 * HEARTBEAT (loop_stall_ms, proto/RENDEZVOUS.md 1.21), so that rdzvctl status and /metrics show
 * it per node.
 *
 * How: libuv counts the time the loop waits in the kernel (UV_METRICS_IDLE_TIME). A prepare
 * handle runs once per turn, just before the wait; the time since the previous turn less the
 * time waited is what the turn's callbacks took. One clock read per turn, no timer.
 *
 * Ownership: the caller's struct; its handle is closed with the loop's others (uv_walk at the
 * end). Errors: negative errno. Threads: the loop's only. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define AGENT_STALL_WARN_MS 1000 /* a new longest stall past this is logged */

struct agent_stall {
    uv_prepare_t prepare;
    bool on;          /* measuring: the loop counts its idle time */
    uint64_t last_ns; /* the previous turn's prepare (uv_hrtime); 0: none yet */
    uint64_t last_idle_ns;
    uint64_t max_ns; /* the longest turn so far */
};

/* Measure loop's turns from its next on: call before uv_run. 0 or -errno (a libuv without idle
 * time: nothing measured, agent_stall_max_ms says so). */
int agent_stall_start(struct agent_stall *s, uv_loop_t *loop);
/* The longest turn so far, in ms: 0 (*ms set), or -ENOENT when not measured. */
int agent_stall_max_ms(const struct agent_stall *s, uint64_t *ms);
