/* SPDX-License-Identifier: Apache-2.0 */
/* agent-sm-rig.h: the rig the session machine's tests drive it with (test-agent-sm.c,
 * test-agent-hold.c): a machine of NPROC local ranks, its step at the rig's clock, and the
 * inputs and reads each test repeats. */
#pragma once
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "agent/session/agent-session-sm.h"
#include "../tap.h"

#define NPROC 2

struct rig {
    struct agent_sm sm;
    bool failed[NPROC], late[NPROC], done[NPROC], rank_running[NPROC];
    unsigned running;
    struct agent_ready r;
    int64_t now;
};

static inline void rig_init(struct rig *g, bool inplace)
{
    memset(g, 0, sizeof(*g));
    g->sm.run_id = "job";
    g->sm.nproc = NPROC;
    g->sm.inplace = inplace;
    g->sm.failed = g->failed;
    g->sm.late = g->late;
    g->sm.done = g->done;
    g->now = 1000;
}

static inline void step(struct rig *g, struct agent_input in)
{
    in.facts.running = g->running;
    in.facts.rank_running = g->rank_running;
    ASSERT_OK(agent_session_step(&g->sm, &in, g->now, &g->r));
}

/* The index of the first effect of kind in the last Ready, or -1. */
static inline int find(const struct rig *g, enum agent_effect_kind kind)
{
    for (unsigned i = 0; i < g->r.n; i++)
        if (g->r.fx[i].kind == kind)
            return (int)i;
    return -1;
}

static inline void round_of(struct rig *g, uint64_t gen)
{
    struct rdzv_round rd = {.generation = gen, .node_rank = 0, .nnodes = 2, .rank_offset = 4,
                            .world_size = 4};

    step(g, (struct agent_input){.kind = AGENT_IN_ROUND, .round = &rd});
    g->running = NPROC;
    for (unsigned i = 0; i < NPROC; i++)
        g->rank_running[i] = true;
}

static inline void event(struct rig *g, const char *type, uint64_t gen, int64_t code)
{
    struct rdzv_event e = {.generation = gen, .exit_code = code};

    snprintf(e.type, sizeof(e.type), "%s", type);
    step(g, (struct agent_input){.kind = AGENT_IN_EVENT, .event = &e});
}

static inline void all_exited(struct rig *g)
{
    g->running = 0;
    memset(g->rank_running, 0, sizeof(g->rank_running));
    step(g, (struct agent_input){.kind = AGENT_IN_ALL_EXITED});
}

static inline void worker_exit(struct rig *g, unsigned lr, int64_t status, int sig, bool open)
{
    step(g, (struct agent_input){.kind = AGENT_IN_WORKER_EXIT, .local_rank = lr,
                                 .status = status, .sig = sig, .output_open = open});
}

static inline void output_closed(struct rig *g, unsigned lr, int64_t status, int sig)
{
    step(g, (struct agent_input){.kind = AGENT_IN_OUTPUT_CLOSED, .local_rank = lr,
                                 .status = status, .sig = sig});
}

/* The index of the Ready's first line to log at level that holds needle, or -1. */
static inline int said(const struct rig *g, enum rdzv_log_level level, const char *needle)
{
    for (unsigned i = 0; i < g->r.nlog; i++)
        if (g->r.log[i].level == level && strstr(g->r.log[i].text, needle))
            return (int)i;
    return -1;
}
