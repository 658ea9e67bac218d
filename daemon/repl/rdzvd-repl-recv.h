/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-repl-recv.h: libraft's receive callback, behind the state rules of rdzv-raft-wire.h once
 * more, at the moment libraft processes each message.
 *
 * The guard (rdzvd-repl-guard.h) checks each message against the receiving replica's state as
 * it arrives. But a peer may batch messages in one write, or spread them over several links, and
 * each message libraft processes may change the state the next one was checked against:
 * AppendEntries(T'), TimeoutNow, RequestVoteResult(T'+1, granted), AppendEntries(T'+1) in one
 * write made a follower lead T'+1, and the last one, checked while it still followed, then
 * reached a leader of its own term (libraft wrote follower fields over its leader state: SEGV in
 * tickLeader). libraft 0.15 reads a message whole and processes it within the same
 * read callback, through the receive callback that raft_start hands to its raft_io's start. That
 * start is wrapped here, so the receive callback runs behind rdzv_raft_check_state with the
 * state of that moment (hooks->view). A message that fails is dropped (freed as libraft would
 * have) and hooks->refused closes its peer's links.
 *
 * Ownership: the caller owns w and io; w must outlive io's use by libraft, or be unwrapped
 * first. Threads: the loop's. */
#pragma once
#include <raft.h>
#include <stdint.h>

#include "common/rdzv-list.h"
#include "proto/rdzv-raft-wire.h"

struct rdzvd_repl_recv_hooks {
    /* The receiving replica's state now, for a message from peer. */
    void (*view)(void *ud, uint64_t peer, struct rdzv_raft_view *v);
    /* A message from peer failed (why: rdzv-raft-wire.h's words) and was dropped. */
    void (*refused)(void *ud, uint64_t peer, const char *why);
};

struct rdzvd_repl_recv {
    struct rdzv_list node; /* in the wrapped ones: the callbacks find theirs by io */
    struct raft_io *io;
    int (*io_start)(struct raft_io *, unsigned, raft_io_tick_cb, raft_io_recv_cb);
    raft_io_recv_cb recv; /* libraft's own */
    const struct rdzvd_repl_recv_hooks *hooks;
    void *ud;
};

/* Wrap io's start (after raft_init, before raft_start). Cannot fail. */
void rdzvd_repl_recv_wrap(struct rdzvd_repl_recv *w, struct raft_io *io,
                          const struct rdzvd_repl_recv_hooks *hooks, void *ud);

/* Forget w (io is done with: its transport is closed). */
void rdzvd_repl_recv_unwrap(struct rdzvd_repl_recv *w);
