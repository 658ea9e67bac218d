/* SPDX-License-Identifier: Apache-2.0 */
/* agent-identity.h: the agent's node id when rdzvd says another agent holds it. rdzvd keeps the
 * hash of a node id's secret from its first JOIN on (RENDEZVOUS.md, "Secrets"); an agent whose
 * JOINED was lost (the connection, or the leader, went between the two) has no secret to prove
 * the node id with, and is refused. Such an agent has no workers yet: it joins again under a new
 * node id. Loop thread only. */
#pragma once
#include <stdbool.h>

#include "proto/rdzv-msg.h"

/* The refusal msg (on_error's) says jn's node id is known to the job, jn carries no secret (it
 * never got one), and may_renew (the caller has no workers): give jn a new node id (its random
 * tail replaced) and return true, at most AGENT_IDENTITY_RENEWALS times per process. Else
 * false, jn unchanged. */
#define AGENT_IDENTITY_RENEWALS 3
bool agent_identity_renew(struct rdzv_join *jn, bool may_renew, const char *msg);
