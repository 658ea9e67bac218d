/* SPDX-License-Identifier: Apache-2.0 */
/* agent-identity.c: a new node id for an agent that never got its secret (agent-identity.h). */
#include "agent/session/agent-identity.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"

bool agent_identity_renew(struct rdzv_join *jn, bool may_renew, const char *msg)
{
    static unsigned renewed;
    char old[sizeof(jn->node_id)];
    char *tail;

    if (!may_renew || jn->secret[0] || !strstr(msg, RDZV_ERROR_NODE_ID_KNOWN) ||
        renewed >= AGENT_IDENTITY_RENEWALS)
        return false;
    renewed++;
    memcpy(old, jn->node_id, sizeof(old));
    /* "<host>:<pid>:<8 hex digits>" (rdzv-agent.c): a new random tail. */
    tail = strrchr(jn->node_id, ':');
    if (tail && strlen(tail + 1) == 8)
        snprintf(tail + 1, 9, "%08" PRIx64, rdzv_random_u64() & 0xffffffffu);
    else
        snprintf(jn->node_id, sizeof(jn->node_id), "%.64s:%08" PRIx64, old,
                 rdzv_random_u64() & 0xffffffffu);
    log_warn("node id %s is known to the job but this agent never got its secret (its JOINED "
             "was lost): joining again as node id %s",
             old, jn->node_id);
    return true;
}
