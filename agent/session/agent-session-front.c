/* SPDX-License-Identifier: Apache-2.0 */
/* agent-session-front.c: --store-front (agent-session-impl.h): a store front a generation
 * (agent/front/agent-front.h), to the store its ROUND named, and its address for the workers.
 * Calls go one way: agent-session.c -> here -> the front. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/rdzv-log.h"
#include "agent/front/agent-front.h"
#include "agent/group/agent-assignment.h"
#include "agent/group/agent-cgroup.h"
#include "agent/group/agent-peer.h"
#include "agent/group/agent-workers.h"
#include "agent/session/agent-session-impl.h"

/* Whether the client at 127.0.0.1:client_port is one of this node's workers, or what they forked:
 * the kernel's word on its socket (agent-peer.h), made by the workers' user in the workers' cgroup
 * (agent_group_worker_cgroups: the agent's own without one), while a worker runs. One question to
 * the kernel; the cgroups are found once a generation. */
static bool front_is_worker(uint16_t client_port, uint16_t server_port, void *ud)
{
    struct agent_session *a = ud;
    struct agent_peer_sock ps;
    int n = a->front_n_cgroups;

    if (!a->group || agent_peer_sock(client_port, server_port, &ps) < 0 || ps.uid != geteuid())
        return false;
    if (n == 0) {
        n = agent_group_worker_cgroups(a->group, a->front_cgroups);
        if (n == 0)
            return false; /* no worker runs: none of its clients is one */
        a->front_n_cgroups = n = n < 0 ? -1 : n;
    }
    if (n < 0 || !ps.has_cgroup || a->front_diag < 0)
        return true; /* no cgroup v2 here, a kernel before 5.8, or a wrong id: the user alone */
    for (int i = 0; i < n; i++)
        if (ps.cgroup_id == a->front_cgroups[i])
            return true;
    return false;
}

/* Whether the kernel's lookups work here, found once, with the agent's own loopback connection:
 * said once when they do not, with what the front does then (docs/design/store-front.md). */
static void front_probe(struct agent_session *a)
{
    struct agent_cgroup none = {.dir_fd = -1};
    struct agent_peer_sock ps;
    uint64_t own[2];
    int r;

    if (a->front_diag)
        return;
    a->front_diag = 1;
    r = agent_peer_probe(&ps);
    if (r < 0) {
        a->front_diag = -2;
        log_warn_errno(r, "store front: the kernel does not say who holds a loopback connection "
                          "(sock_diag); a full front cannot tell the workers' connections from "
                          "others': it sheds only the silent ones, the workers' as another's "
                          "(said once)");
    } else if (ps.uid != geteuid()) {
        a->front_diag = -2;
        log_warn("store front: the kernel names user %u, not this agent's %u, as the owner of "
                 "the agent's own connection; a full front sheds only silent connections, the "
                 "workers' as another's (said once)",
                 (unsigned)ps.uid, (unsigned)geteuid());
    } else if (ps.has_cgroup && agent_cgroup_worker_ids(&none, own) == 1 &&
               ps.cgroup_id != own[0]) {
        a->front_diag = -1;
        log_warn("store front: the kernel names cgroup %" PRIu64 ", not the agent's %" PRIu64
                 ", for the agent's own connection (cgroup v1's net_cls or net_prio attached, "
                 "Linux 5.8-5.14?); a worker is told by its user alone: any process of the "
                 "workers' user counts as one (said once)",
                 ps.cgroup_id, own[0]);
    }
}

/* The front's store connection is lost: the workers' store connections are closed with it. In
 * the generation it serves, that is the store lost (its workers fail, and the job's recovery
 * takes over); after it, the end of a store no longer used. */
static void front_lost(const char *why, void *ud)
{
    struct agent_session *a = ud;

    if (a->sm.state == AG_RUNNING)
        log_warn("store front of generation %" PRIu64 ": %s; its workers' store connections are "
                 "closed",
                 a->sm.round.generation, why);
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
    a->front_n_cgroups = 0;
    front_probe(a);
    r = agent_front_start(&(struct agent_front_cfg){.loop = a->loop,
                                                    .store_addr = a->sm.round.master_addr,
                                                    .store_port = (uint16_t)a->sm.round.master_port,
                                                    .legacy = RDZV_DIALECT_V20,
                                                    .lim = RDZV_LIMITS_DEFAULT,
                                                    .max_conns = 4 * (unsigned)a->cfg.nproc + 16,
                                                    .is_worker = a->front_diag > -2
                                                                     ? front_is_worker
                                                                     : NULL,
                                                    .on_lost = front_lost,
                                                    .ud = a},
                          &a->front);
    if (r < 0) {
        log_warn("--store-front: no front for generation %" PRIu64 " (store %s:%" PRId64
                 ": %s): the workers connect to the store directly",
                 a->sm.round.generation, a->sm.round.master_addr, a->sm.round.master_port,
                 uv_strerror(r));
        a->front = NULL;
        return;
    }
    agent_session_front_assign(a, as);
    log_info("store front for generation %" PRIu64 " on 127.0.0.1:%u (the workers' store "
             "connections, one to %s:%" PRId64 ")",
             a->sm.round.generation, (unsigned)as->master_port, a->sm.round.master_addr,
             a->sm.round.master_port);
}
