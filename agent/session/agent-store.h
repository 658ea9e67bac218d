/* SPDX-License-Identifier: Apache-2.0 */
/* agent-store.h: the generation's TCPStore, hosted by node rank 0's agent for a replicated rdzvd
 * (proto/RENDEZVOUS.md, "The generation's store"). A replicated rdzvd asks node rank 0 for it
 * (NCCL_REQUEST "store") instead of opening it itself, so losing a replica's host that runs none of
 * the job's workers leaves every worker's store where it was.
 *
 * The store is rdzvd's own code (librdzvd: the same TCPStore server, limits and dialects as a
 * generation store on rdzvd), run on the agent's loop: one server bound to the address the agent
 * reaches rdzvd from, port chosen by the kernel, and one listener with an empty key space per
 * generation. A generation's listener closes when a ROUND of a later generation comes (as rdzvd
 * closes its own when the next generation forms), so workers kept in place are told the new
 * store before the old one goes away.
 *
 * Ownership: the caller owns struct agent_store (agent_store_free, after agent_store_stop and
 * the loop's last run). Errors: negative errno, logged here. Threads: the loop's only. */
#pragma once
#include <stdint.h>
#include <uv.h>

#include "proto/rdzv-msg.h"

struct agent_store;

/* An agent_store on loop, hosting nothing yet. 0 or -ENOMEM. */
int agent_store_new(uv_loop_t *loop, struct agent_store **ret);

/* Open generation gen's store, starting the server on the first call, on addr (a numeric
 * address: the local side of the agent's connection to rdzvd; later calls keep the first),
 * its TCPStore clients allowed from allow (rdzvd's --allow-store-from, NCCL_REQUEST
 * store_allow; "": anywhere; the first call's is kept);
 * a store opened for an earlier request that no ROUND used is closed. On success addr_out and
 * *port_out say where it listens. 0 or a negative errno. */
int agent_store_open(struct agent_store *s, uint64_t gen, const char *addr, const char *allow,
                     char addr_out[RDZV_STORE_ADDR_MAX + 1], uint16_t *port_out);

/* A ROUND of generation gen came: every store of an earlier generation closes (its connections
 * too); gen's own, if this agent opened one, stays. */
void agent_store_round(struct agent_store *s, uint64_t gen);

/* Stop serving (asynchronous: the loop closes the handles). NULL: no-op. */
void agent_store_stop(struct agent_store *s);
/* Release s once stopped and the loop has run; NULL: no-op. Returns NULL. */
struct agent_store *agent_store_free(struct agent_store *s);
