/* SPDX-License-Identifier: Apache-2.0 */
/* agent-front-admit.h: who keeps a slot of the node's store front (agent-front.h). The front has
 * max connections; a client that sends nothing gets AGENT_FRONT_SILENT_MS, as rdzvd's handshake
 * timeout gives it, then it is closed. When the front is full, a newcomer from the node's workers
 * (asked of the caller's is_worker, once per connection) takes the slot of a client that is not
 * one, the oldest first; else any newcomer takes the slot of a client silent for
 * AGENT_FRONT_SHED_MS; else it is refused. So clients outside the workers, or silent ones, never
 * lock the workers out. is_worker runs on the loop, for each newcomer of a full front: it must cost
 * no more than a system call or two (agent-peer.h), never a scan. As a kernel may still make one
 * wait (sock_diag's lock, held by another user's dumps), a newcomer decides no more of them than
 * the loop can spare: at most AGENT_FRONT_TURN_LOOKUPS a loop turn, and AGENT_FRONT_LOOKUP_US_S of
 * the loop's time a second (AGENT_FRONT_LOOKUP_BURST_US at once). A newcomer past them is not
 * asked of: it is a stranger (it takes a silent slot or is refused), and a client not asked of is
 * not evicted. A lookup slower than AGENT_FRONT_LOOKUP_SLOW_MS is said, once. The front also
 * accepts at most AGENT_FRONT_TURN_ACCEPTS connections a turn (agent_front_admit_defer).
 *
 * Ownership: each entry is embedded in the caller's connection; the caller closes the ones this
 * module gives up (through evict) and then calls agent_front_admit_del. The timer is this
 * module's, with an idle handle: agent_front_admit_close closes them (AGENT_FRONT_ADMIT_HANDLES
 * handles, counted by the caller's closed callback). Threads: the loop's only. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/rdzv-list.h"

#define AGENT_FRONT_SILENT_MS 10000 /* a client that sent nothing this long is closed */
#define AGENT_FRONT_SHED_MS 3000    /* a full front's newcomer may take a slot silent this long */
#define AGENT_FRONT_REFUSED_LOG_MS 10000 /* refusals are said at most this often (with a count) */
#define AGENT_FRONT_TURN_ACCEPTS 16    /* connections accepted a loop turn; the others wait */
#define AGENT_FRONT_TURN_LOOKUPS 8     /* is_worker's lookups a loop turn */
#define AGENT_FRONT_LOOKUP_US_S 100000 /* the loop's time they may take a second, in us (10%) */
#define AGENT_FRONT_LOOKUP_BURST_US 20000 /* and at once, after a quiet while */
#define AGENT_FRONT_LOOKUP_SLOW_MS 10     /* a lookup this slow is said (once) */
#define AGENT_FRONT_ADMIT_HANDLES 2       /* the timer and the idle */

struct agent_front_admittee {
    struct rdzv_list node; /* the admission's, oldest first */
    uint64_t since_ms;     /* admitted at (uv_now) */
    uint16_t port;         /* the client's own, 0: unknown */
    bool heard;            /* it sent a byte */
    signed char worker;    /* one of the workers': 1, 0; -1: not asked yet */
};

struct agent_front_admit {
    uv_loop_t *loop;
    unsigned max, n;
    uint16_t server_port; /* the front's */
    /* Whether the client at 127.0.0.1:port is one of the node's workers; NULL: all are. */
    bool (*is_worker)(uint16_t client_port, uint16_t server_port, void *ud);
    void *worker_ud;
    /* Close a's connection (why: for the log); the caller calls agent_front_admit_del. */
    void (*evict)(struct agent_front_admittee *a, const char *why, void *ud);
    void *ud;
    struct rdzv_list list;
    uv_timer_t timer;
    bool armed;
    uint64_t refused;           /* newcomers refused since the last said */
    uint64_t refused_logged_ms; /* when the last was said (uv_now); 0: never */
    uv_idle_t idle;             /* the turn's end: its counts start again */
    unsigned turn_accepts, turn_lookups;
    uv_stream_t *deferred;     /* a listener that left a connection for the next turn */
    uv_connection_cb deferred_cb;
    int64_t lookup_us;         /* the lookups' budget of the loop's time (may go below 0) */
    uint64_t lookup_at_ms;     /* when it was last filled (uv_now) */
    uint64_t lookups, capped;  /* lookups made; newcomers not asked of as the budget was spent */
    bool capped_said, slow_said;
};

/* ad (its fields above set by the caller) with no client, its timer on ad->loop. 0 or -errno. */
int agent_front_admit_init(struct agent_front_admit *ad);
/* Whether the listener's on_connection should leave its connection for the next turn: true
 * (AGENT_FRONT_TURN_ACCEPTS were accepted in this one; cb(listener, 0) is called then), false
 * (accept it now). */
bool agent_front_admit_defer(struct agent_front_admit *ad, uv_stream_t *listener,
                             uv_connection_cb cb);
/* a came on tcp (accepted): 0, admitted; -EUSERS: the front is full and no slot could be taken
 * for it (a is not added, its node self-linked). May evict another first. */
int agent_front_admit_add(struct agent_front_admit *ad, struct agent_front_admittee *a,
                          const uv_tcp_t *tcp);
/* a's client sent its first bytes. */
void agent_front_admit_heard(struct agent_front_admittee *a);
/* a's connection closed (no-op when it was never added). */
void agent_front_admit_del(struct agent_front_admit *ad, struct agent_front_admittee *a);
/* Close the timer and the idle; close_cb when each is closed (the handle's data is ad->ud). */
void agent_front_admit_close(struct agent_front_admit *ad, uv_close_cb close_cb);
