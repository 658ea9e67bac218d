/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-repl-guard.h: an inbound replica link whose messages are checked before libraft reads
 * them.
 *
 * libraft reads a connection handed to it directly, and trusts every field (rdzv-raft-wire.h).
 * So an authenticated inbound connection is not handed over: the guard keeps it, and gives
 * libraft one end of a socketpair instead. It reads the peer's bytes, takes each message apart
 * as it arrives (preamble, header, each entry), checks it with rdzv-raft-wire.h against the
 * receiving replica's state at that moment (hooks->view), and writes what passed to libraft's
 * end. The first message that fails closes the link (both ends: libraft sees EOF and drops its
 * partial message) after hooks->refused, which logs.
 *
 * Memory per link is bounded: one read buffer (RDZVD_REPL_GUARD_READ), one header
 * (RDZV_RAFT_HEADER_MAX), one configuration entry (RDZV_RAFT_CONF_MAX), and the bytes written to
 * libraft not yet taken by it: past RDZVD_REPL_GUARD_QUEUE_MAX the guard stops reading the peer
 * until libraft catches up. Entry and snapshot bytes are passed on as they arrive, never
 * gathered, except a configuration (RAFT_CHANGE) entry, checked whole first. An AppendEntries
 * with entries or an InstallSnapshot of a term older than the receiver's reaches libraft as an
 * AppendEntries of that term with no entries (libraft answers it with its term), and its payload
 * is read and dropped here: libraft would allocate the whole claim first.
 *
 * Ownership: the guard owns the peer's connection from rdzvd_repl_guard_start on, and frees
 * itself after hooks->closed. libraft owns its end (raft_malloc'd, as libraft frees it). Threads:
 * the loop's. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/rdzv-list.h"
#include "proto/rdzv-raft-wire.h"

#define RDZVD_REPL_GUARD_READ (64u << 10)
#define RDZVD_REPL_GUARD_QUEUE_MAX (4u << 20) /* stop reading the peer past this */
#define RDZVD_REPL_GUARD_QUEUE_LOW (1u << 20) /* read again below this */

struct rdzvd_repl_guard;

struct rdzvd_repl_guard_hooks {
    /* The receiving replica's state now, for a message from peer. */
    void (*view)(void *ud, uint64_t peer, struct rdzv_raft_view *v);
    /* A message failed its checks (why: rdzv-raft-wire.h's words); the link closes next. */
    void (*refused)(void *ud, struct rdzvd_repl_guard *g, const char *why);
    /* Both handles are closed; g is freed when this returns. */
    void (*closed)(void *ud, struct rdzvd_repl_guard *g);
};

struct rdzvd_repl_guard {
    struct rdzv_list node; /* the owner's list; the guard does not touch it */
    uint64_t peer;         /* the authenticated replica id */
    char where[64];        /* its socket's address, for logs */
    struct rdzvd_repl_guard_stats {
        uint64_t messages; /* passed to libraft */
        uint64_t bytes;
        uint64_t stale; /* stale-term messages whose payload was dropped (rdzvd-repl-guard.c) */
    } st;
    /* the rest is the guard's */
    const struct rdzvd_repl_guard_hooks *hooks;
    void *ud;
    uv_tcp_t *tcp; /* the peer's connection (raft_malloc'd); NULL once closed */
    uv_pipe_t ours;
    bool started, ours_open, tcp_open, reading, closing;
    size_t queued; /* written to libraft's end, not yet confirmed */
    int state;
    struct rdzv_raft_msg msg;
    uint8_t pre[RDZV_RAFT_PREAMBLE_LEN];
    uint8_t *hdr, *chg; /* the message's header; a RAFT_CHANGE entry being gathered */
    size_t got, need;
    uint32_t entry;      /* the next entry of an AppendEntries */
    uint64_t left;       /* bytes left of the current entry or snapshot */
    struct fwd *pending; /* bytes passed this turn, written at its end */
    char rbuf[RDZVD_REPL_GUARD_READ];
};

/* Take over tcp (raft_malloc'd, handshake done, not reading) from replica peer. On success *ret
 * is the guard (freed by itself after hooks->closed) and *raft_end the stream to hand to libraft
 * (its accept callback). 0, or a negative errno: tcp is then closed and no hook runs. */
int rdzvd_repl_guard_start(uv_loop_t *loop, uv_tcp_t *tcp, uint64_t peer, const char *where,
                           const struct rdzvd_repl_guard_hooks *hooks, void *ud,
                           struct rdzvd_repl_guard **ret, uv_stream_t **raft_end);

/* Close the link now (the transport closes); hooks->closed follows. */
void rdzvd_repl_guard_close(struct rdzvd_repl_guard *g);
