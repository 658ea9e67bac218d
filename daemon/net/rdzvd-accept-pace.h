/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-accept-pace.h: listeners that let the loop turn between bursts of connections.
 *
 * libuv's listener accepts every pending connection in one go, calling the connection callback each
 * time, until accept(2) has nothing left. A client that reconnects as fast as rdzvd closes its
 * connections (no token, a full handshake quota) kept that going: no other socket was read
 * meanwhile, and honest peers' handshakes and heartbeats waited for seconds. Behind a pace, a
 * listener accepts at most RDZVD_TURN_ACCEPTS connections and then leaves the next one in the
 * kernel's backlog until the loop has served one turn of its other events.
 *
 * Use: the owner embeds one struct rdzvd_accept_pace (one idle handle, shared by its listeners)
 * and one struct rdzvd_paced per listener (the transport: the rendezvous and store listeners;
 * the status page and the replicas' links listen with small backlogs, which pace a flood in
 * the kernel instead). A listener's connection callback first asks
 * rdzvd_accept_pace_defer(): true means "do not accept now": libuv stops watching a listener
 * whose callback did not accept, and the pace calls that callback again once the turn is over
 * (its uv_accept() makes libuv watch the listener again). Everything runs on the loop's thread. */
#pragma once
#include <stdbool.h>
#include <uv.h>

#include "common/rdzv-list.h"

struct rdzvd_accept_pace {
    uv_idle_t idle;           /* active only while a listener waits; idle.data is the owner's */
    struct rdzv_list waiting; /* struct rdzvd_paced, oldest first */
    unsigned accepted;        /* since the loop last turned for the pace */
};

struct rdzvd_paced {
    struct rdzv_list node; /* in pace->waiting while its next connection waits */
    uv_stream_t *listener;
    uv_connection_cb on_connection; /* the listener's own callback, called again next turn */
};

/* Set up p on loop (cannot fail on Unix: it only links the idle handle into the loop). */
void rdzvd_accept_pace_init(struct rdzvd_accept_pace *p, uv_loop_t *loop);
/* Close p's handle; cb gets it (its data is whatever the owner set). No listener may wait. */
void rdzvd_accept_pace_close(struct rdzvd_accept_pace *p, uv_close_cb cb);
/* One listener behind a pace. */
void rdzvd_paced_init(struct rdzvd_paced *l, uv_stream_t *listener, uv_connection_cb cb);
/* From l's connection callback, before accepting: true when the pace's budget is spent (do not
 * accept; l->on_connection(l->listener, 0) comes again next turn), false to accept now. */
bool rdzvd_accept_pace_defer(struct rdzvd_accept_pace *p, struct rdzvd_paced *l);
/* l's listener is closing: its waiting connection is not accepted any more. Idempotent. */
void rdzvd_paced_forget(struct rdzvd_paced *l);
