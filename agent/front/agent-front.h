/* SPDX-License-Identifier: Apache-2.0 */
/* agent-front.h: the node's store front (rdzv-agent --store-front; docs/design/store-front.md).
 * It listens on 127.0.0.1 (port 0) for the node's workers' PyTorch TCPStore connections, in any
 * numbering, and serves them through one connection to the generation's store (rdzvd's TCPStore,
 * in rdzv's store-front numbering: proto/TCPSTORE.md section 9): requests are forwarded in order
 * and their replies relayed; a GET of a key already asked for upstream, with no change forwarded
 * since, shares that request's reply; the WAITs of one key list share one TAG_WAIT on that same
 * connection; CANCEL_WAIT is answered here. What a worker sees is what rdzvd answers it
 * directly.
 *
 * Bounds: agent_front_cfg.max_conns worker connections; per connection AGENT_FRONT_MAX_PENDING
 * requests in flight, AGENT_FRONT_MAX_WAITS key lists and its share of lim.max_wait_keys keys
 * (agent_front_wait_keys) waited on at once, its queued output and each request as rdzv_limits
 * says. A worker past one of them is closed, logged; the others go on: the front's wait table
 * holds every connection's share at once, and the keys the node's WAITs hold on the store stay
 * within rdzvd's --max-wait-keys when rdzvd keeps its default. WATCH_KEY (PyTorch <= 2.0's
 * callbacks, which torchrun and c10d never use) closes the connection, logged: run without
 * --store-front for it.
 *
 * A request the store refuses (an ADD on a value that is no number, a full store) makes it close
 * the shared connection: every worker connection of the node closes then, where directly only
 * that worker's would. The caller ignores SIGPIPE (a worker gone mid-reply).
 *
 * Ownership: the front owns its handles and buffers; cfg strings are copied.
 * Errors: agent_front_start returns a negative errno; later failures (the store's connection
 * lost or refused) close every worker connection and are reported once through on_lost.
 * Threads: the loop's only. */
#pragma once
#include <stdint.h>
#include <uv.h>

#include "proto/rdzv-proto.h"

#define AGENT_FRONT_MAX_PENDING 64

struct agent_front;

struct agent_front_cfg {
    uv_loop_t *loop;
    const char *store_addr; /* the generation's store: a numeric address */
    uint16_t store_port;
    enum rdzv_dialect legacy; /* the numbering of a client that opens without VALIDATE */
    struct rdzv_limits lim;   /* a request's and a reply's bounds (RDZV_LIMITS_DEFAULT) */
    unsigned max_conns;       /* worker connections at once */
    /* Whether the client at 127.0.0.1:client_port holds one of the node's workers' connections
     * (agent-front-admit.h: they keep their slots first). NULL: every client is a worker. */
    bool (*is_worker)(uint16_t client_port, uint16_t server_port, void *ud);
    /* The store's connection is lost (why): every worker connection is closed. NULL: logged. */
    void (*on_lost)(const char *why, void *ud);
    void *ud;
};

/* What the front did so far. */
struct agent_front_stats {
    uint64_t conns;          /* worker connections accepted */
    uint64_t requests;       /* worker requests */
    uint64_t forwarded;      /* requests sent upstream on the shared connection */
    uint64_t shared_gets;    /* GETs answered by another's upstream request */
    uint64_t waits;          /* worker WAITs */
    uint64_t upstream_waits; /* TAG_WAITs sent to the store for them */
    uint64_t wait_cancels;   /* of them, cancelled: left by every waiter before an answer */
};

/* Listen on 127.0.0.1:0 and connect to the store. 0 (*ret set) or a negative errno. */
int agent_front_start(const struct agent_front_cfg *cfg, struct agent_front **ret);
/* The port the workers connect to. */
uint16_t agent_front_port(const struct agent_front *f);
void agent_front_stats(const struct agent_front *f, struct agent_front_stats *st);
/* Close everything (worker connections included); f is freed once its handles are closed. */
void agent_front_close(struct agent_front *f);
