/* SPDX-License-Identifier: Apache-2.0 */
/* agent-session-hosting.c: what rdzvd asks an agent to host (agent-session-impl.h): the
 * generation's NCCL ids and store (NCCL_REQUEST, answered with NCCL_ID) and replicas of rdzvd
 * itself (REPLICA, REPLICAS). Calls go one way: agent-session.c's client callbacks -> here. */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "agent/session/agent-client.h"
#include "agent/session/agent-host.h"
#include "agent/session/agent-nccl.h"
#include "agent/session/agent-replica.h"
#include "agent/session/agent-session-impl.h"
#include "agent/session/agent-store.h"

static void on_nccl_ids(struct agent_nccl_root *root, int err, unsigned n,
                        char (*ids)[RDZV_NCCL_HEX_LEN + 1], const char *msg, void *ud)
{
    struct agent_session *a = ud;
    /* ~16 KiB: from the heap, where only the n ids written are faulted in. */
    struct rdzv_nccl_id *m = malloc(sizeof(*m));

    (void)root;
    if (!m) {
        log_error("out of memory answering NCCL_REQUEST");
        return;
    }
    memset(m, 0, offsetof(struct rdzv_nccl_id, ids));
    m->generation = a->nccl_generation;
    if (a->store_port) {
        snprintf(m->store_addr, sizeof(m->store_addr), "%s", a->store_addr);
        m->store_port = a->store_port;
    }
    if (err < 0) {
        if (a->cfg.nccl == RDZV_NCCL_REQUIRED)
            log_error("this job needs NCCL: %s", msg);
        else
            log_info("no NCCL id for the workers: %s", msg);
        m->failed = true;
        snprintf(m->error, sizeof(m->error), "%s", msg);
        rdzv_utf8_trim(m->error);
    } else {
        m->n_ids = n < RDZV_MAX_NCCL_IDS ? n : RDZV_MAX_NCCL_IDS;
        if (m->n_ids)
            memcpy(m->ids, ids, m->n_ids * sizeof(m->ids[0]));
    }
    (void)agent_client_send_nccl_id(a->client, m);
    free(m);
}

/* NCCL_REQUEST "store": open the generation's store here. Its address and port go in the answer;
 * none when it cannot be opened (rdzvd then hosts it itself). */
static void open_store(struct agent_session *a, uint64_t gen, const char *allow)
{
    char local[64];
    int r;

    r = agent_client_local_addr(a->client, local, sizeof(local));
    if (r == 0 && !a->store)
        r = agent_store_new(a->loop, &a->store);
    if (r == 0)
        r = agent_store_open(a->store, gen, local, allow, a->store_addr, &a->store_port);
    if (r < 0)
        log_warn_errno(r, "cannot host generation %" PRIu64 "'s store; rdzvd hosts it", gen);
}

void agent_session_on_nccl_request(struct agent_client *c, const struct rdzv_nccl_request *q,
                                   void *ud)
{
    struct agent_session *a = ud;
    int r;

    /* A new generation: the previous one's roots are of no use any more. */
    agent_nccl_root_stop(a->nccl, false);
    a->nccl = NULL;
    a->nccl_generation = q->generation;
    a->store_port = 0;
    if (q->store)
        open_store(a, q->generation, q->store_allow);
    if (q->count == 0) {
        on_nccl_ids(NULL, 0, 0, NULL, NULL, a);
        return;
    }
    r = agent_nccl_root_start(a->loop, a->cfg.self_exe, q->count, on_nccl_ids, a, &a->nccl);
    if (r < 0) {
        char msg[128];

        snprintf(msg, sizeof(msg), "cannot start the NCCL root holder: %s", uv_strerror(r));
        on_nccl_ids(NULL, r, 0, NULL, msg, a);
    }
    (void)c;
}

/* ---- hosted replicas of rdzvd (REPLICA, REPLICAS) ---- */

/* Where the answer to a REPLICA goes: the connection of the moment (it may have changed). */
void agent_session_replica_send(void *ud, const struct rdzv_replica *ans)
{
    struct agent_session *a = ud;

    if (a->client)
        (void)agent_client_send_replica(a->client, ans);
}

void agent_session_on_replica(struct agent_client *c, const struct rdzv_replica *q, void *ud)
{
    struct agent_session *a = ud;
    char local[64] = "";

    if (agent_client_local_addr(c, local, sizeof(local)) < 0)
        local[0] = '\0';
    agent_replica_request(&a->rhost, local, q);
}

void agent_session_on_replicas(struct agent_client *c, const struct rdzv_replicas *rs, void *ud)
{
    struct agent_session *a = ud;
    unsigned before = a->eps.n;

    (void)c;
    for (unsigned i = 0; i < rs->n; i++)
        (void)agent_endpoints_add(&a->eps, rs->endpoint[i]);
    if (a->eps.n != before && rs->n > 1) /* one is no replica: no word of them */
        log_info("rdzvd runs %u replicas so far (the others start as their hosts join); %u "
                 "endpoints to reconnect to", rs->n, a->eps.n);
}


bool agent_session_on_refused(struct agent_client *c, void *ud)
{
    struct agent_session *a = ud;

    (void)c;
    /* Once joined, a refused connection is an rdzvd lost mid-job: one started afresh here would
     * know nothing of it. */
    if (!a->may_rehost || a->join.secret[0])
        return false;
    return agent_host_maybe_start(&a->rehost) == 1;
}
