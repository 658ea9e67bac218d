/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-repl-net.h: the links between rdzvd replicas, as a libraft transport (struct
 * raft_uv_transport, raft/uv.h) that authenticates every connection before libraft reads a byte of
 * it. libraft's own TCP transport checks nothing: anyone who can reach the port could append to the
 * log.
 *
 * Handshake on each new connection (the connecting replica is C, the accepting one S):
 *   C -> S  "RDZVRPL1", u64 C's raft id, u8 n, C's address (n bytes), C's nonce cn (32 bytes)
 *   S -> C  S's nonce sn (32), S's MAC (32)
 *   C -> S  C's MAC (32)
 * With a replica key (rdzvd --replica-key-file, held by the replicas alone), a side's MAC is
 * HMAC-SHA256(key, "rdzv-replica-v1 server|client" sn cn u64 id address) over its own Raft id
 * and address: S's as C asked for it, C's as its hello claims. Without a key
 * it is the agents' MAC with the token, rdzv_auth_mac(token, server|client, sn, cn) (RENDEZVOUS.md
 * "Authentication"): every agent-token holder passes. Either way S first checks that C's id and
 * address are a member of its Raft configuration (when it has one: a replica started with --join
 * has none until the leader adds it).
 * then the connection carries libraft's messages (C sends on it, S receives). Each side reads
 * exactly the handshake's bytes, never one of libraft's. S does not hand the connection itself to
 * libraft: a guard reads it and passes on only messages that pass rdzv-raft-wire.h's checks,
 * against the state of the struct raft given to rdzvd_repl_net_check_against
 * (rdzvd-repl-guard.h); a bad one closes the link, logged once a minute per peer. Without a token
 * the MACs are zeros and not checked (a replica set on a trusted network; rdzvd says so at start).
 *
 * Bounds: at most RDZVD_REPL_HANDSHAKES_MAX connections in their handshake at once from
 * addresses that are no member's (more are closed at accept), each given handshake_ms to finish; a
 * handshake is under 400 bytes, read into a fixed buffer. A connection from the IP address of a
 * member of the configuration does not count among them: it always gets a slot, one of
 * RDZVD_REPL_MEMBER_HANDSHAKES per such address, the oldest of which is closed to make room
 * (else 32 silent connections could keep a restarted replica out). Strangers elsewhere cannot hold
 * a member's slots; a stranger on a member's own IP address competes with it (a new connection
 * there closes the oldest from that address, its own or the member's). A failed handshake
 * closes that connection with one log line naming the peer.
 *
 * Addresses are numeric "IPv4:port" or "[IPv6]:port".
 *
 * Ownership: the caller owns the struct raft_uv_transport and passes it to raft_uv_init; the
 * state behind it (t->impl) is freed by the transport's close (libraft calls it). The token must
 * outlive the transport. Threads: the loop's. Errors: libraft's RAFT_* codes where libraft calls
 * in, negative errno from rdzvd_repl_net_init. */
#pragma once
#include <raft.h>
#include <raft/uv.h>
#include <stdint.h>
#include <uv.h>

#include "common/rdzv-auth.h"

#define RDZVD_REPL_HANDSHAKES_MAX 32
#define RDZVD_REPL_MEMBER_HANDSHAKES 8 /* per member IP address, beside those */
#define RDZVD_REPL_HANDSHAKE_MS 5000
#define RDZVD_REPL_LINKS_MAX 64       /* inbound links past their handshake */
#define RDZVD_REPL_BAD_LOG_MS 60000   /* a peer's bad messages: one log line a minute */

struct rdzvd_repl_net_stats {
    uint64_t accepted;  /* inbound handshakes that passed */
    uint64_t refused;   /* inbound connections closed: bad handshake, deadline, too many */
    uint64_t connected; /* outbound handshakes that passed */
    uint64_t failed;    /* outbound attempts that failed */
    uint64_t malformed; /* inbound links closed on a message that failed its checks */
};

/* Set t up as an authenticating transport on loop. key: the replicas' own secret, or NULL to
 * prove token (NULL: nothing; both borrowed, must outlive t). handshake_ms: 0 for
 * RDZVD_REPL_HANDSHAKE_MS. 0 or -ENOMEM. */
int rdzvd_repl_net_init(struct raft_uv_transport *t, uv_loop_t *loop,
                        const struct rdzv_token *token, const struct rdzv_token *key,
                        uint64_t handshake_ms);

/* Check inbound messages against r's state from now on (its term, leader, configuration).
 * Until then, and for a transport used without Raft, only their form is checked. Call it after
 * raft_init and before raft_start: it wraps r->io's start, so that libraft's receive callback runs
 * behind the state rules again (rdzv_raft_check_state) as libraft processes each message; a
 * message that fails them then is dropped and its peer's links close. */
void rdzvd_repl_net_check_against(struct raft_uv_transport *t, const struct raft *r);

/* The counters of t (valid until its close). */
const struct rdzvd_repl_net_stats *rdzvd_repl_net_stats(const struct raft_uv_transport *t);

/* "host:port" into *ss (numeric addresses only). 0 or -EINVAL. */
int rdzvd_repl_parse_addr(const char *address, struct sockaddr_storage *ss);
