/* SPDX-License-Identifier: Apache-2.0 */
/* agent-session-front.c: --store-front (agent-session-impl.h): a store front a generation
 * (agent/front/agent-front.h), to the store its ROUND named, and its address for the workers.
 * Calls go one way: agent-session.c -> here -> the front. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/rdzv-log.h"
#include "agent/front/agent-front.h"
#include "agent/group/agent-assignment.h"
#include "agent/group/agent-peer.h"
#include "agent/group/agent-workers.h"
#include "agent/session/agent-session-impl.h"

/* Whether the client at 127.0.0.1:client_port is one of this node's workers, or what they forked:
 * a process in the process group of a running worker (each leads its own). */
static bool front_is_worker(uint16_t client_port, uint16_t server_port, void *ud)
{
    struct agent_session *a = ud;
    pid_t *pgids = calloc((size_t)a->cfg.nproc, sizeof(*pgids));
    size_t n = 0;
    bool yes;

    for (unsigned r = 0; pgids && a->group && r < (unsigned)a->cfg.nproc; r++) {
        int pid;
        bool stacks;

        if (agent_group_hang_info(a->group, r, &pid, &stacks) == 0 && pid > 0)
            pgids[n++] = pid;
    }
    yes = agent_peer_in_pgroups(client_port, server_port, pgids, n);
    free(pgids);
    return yes;
}

/* The front's store connection is lost: the workers' store connections are closed with it. In
 * the generation it serves, that is the store lost (its workers fail, and the job's recovery
 * takes over); after it, the end of a store no longer used. */
static void front_lost(const char *why, void *ud)
{
    struct agent_session *a = ud;

    if (a->state == AG_RUNNING)
        log_warn("store front of generation %" PRIu64 ": %s; its workers' store connections are "
                 "closed",
                 a->round.generation, why);
    else
        log_debug("store front: %s", why);
}

void agent_session_front_close(struct agent_session *a)
{
    struct agent_front_stats st;

    if (!a->front)
        return;
    /* What it saved the store: its requests and waits against what went there. */
    agent_front_stats(a->front, &st);
    log_info("store front: %" PRIu64 " worker connections, %" PRIu64 " requests (%" PRIu64
             " sent to the store, %" PRIu64 " GETs answered with another's reply), %" PRIu64
             " WAITs (%" PRIu64 " sent to the store, %" PRIu64 " of them cancelled)",
             st.conns, st.requests, st.forwarded, st.shared_gets, st.waits, st.upstream_waits,
             st.wait_cancels);
    agent_front_close(a->front);
    a->front = NULL;
}

void agent_session_front_assign(const struct agent_session *a, struct agent_assignment *as)
{
    if (!a->front)
        return;
    as->master_addr = "127.0.0.1";
    as->master_port = agent_front_port(a->front);
}

void agent_session_front_round(struct agent_session *a, struct agent_assignment *as)
{
    int r;

    if (!a->cfg.store_front)
        return;
    agent_session_front_close(a);
    r = agent_front_start(&(struct agent_front_cfg){.loop = a->loop,
                                                    .store_addr = a->round.master_addr,
                                                    .store_port = (uint16_t)a->round.master_port,
                                                    .legacy = RDZV_DIALECT_V20,
                                                    .lim = RDZV_LIMITS_DEFAULT,
                                                    .max_conns = 4 * (unsigned)a->cfg.nproc + 16,
                                                    .is_worker = front_is_worker,
                                                    .on_lost = front_lost,
                                                    .ud = a},
                          &a->front);
    if (r < 0) {
        log_warn("--store-front: no front for generation %" PRIu64 " (store %s:%" PRId64
                 ": %s): the workers connect to the store directly",
                 a->round.generation, a->round.master_addr, a->round.master_port, uv_strerror(r));
        a->front = NULL;
        return;
    }
    agent_session_front_assign(a, as);
    log_info("store front for generation %" PRIu64 " on 127.0.0.1:%u (the workers' store "
             "connections, one to %s:%" PRId64 ")",
             a->round.generation, (unsigned)as->master_port, a->round.master_addr,
             a->round.master_port);
}
