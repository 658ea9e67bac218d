/* SPDX-License-Identifier: Apache-2.0 */
/* agent-front-wait.h: the store front's WAITs (agent-front.h): one connection to the store per
 * key list waited on, that WAITs on it for every worker WAIT of that list; answered, it tells
 * each waiter (woken) and is kept, up to 16, for the next key list; left by its last waiter, it
 * closes, which cancels it there.
 *
 * Ownership: waiters are the caller's (embedded in its own records); the waits and their
 * handles are this module's, freed after their close (closed is called then).
 * Errors: a wait that cannot reach the store, or that the store closes or answers with anything
 * but STOP_WAITING, is reported once through lost; its waiters stay for the caller to drop.
 * Threads: the loop's only. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "common/rdzv-list.h"

struct agent_front_wait;

/* One worker WAIT. */
struct agent_front_waiter {
    struct rdzv_list cnode; /* the caller's (its connection's waiters) */
    struct rdzv_list wnode; /* the wait's waiters */
    struct agent_front_wait *w;
    void *conn; /* the caller's */
};

struct agent_front_waits {
    uv_loop_t *loop;
    struct sockaddr_storage store;
    char store_name[64];
    struct rdzv_list list; /* open waits */
    struct rdzv_list idle; /* answered, connected, kept */
    unsigned n, max;       /* open, and at most */
    unsigned nidle;
    unsigned handles; /* not closed yet */
    uint64_t opened;  /* connections made */
    uint64_t reused;  /* waits on a connection kept */
    /* wt's key list was answered: wt is off its wait (cnode still linked, the caller's). */
    void (*woken)(struct agent_front_waiter *wt, void *ud);
    void (*lost)(const char *why, void *ud);
    void (*closed)(void *ud); /* a wait's handle is closed (handles went down) */
    /* The one key waited on holds a queue (QUEUE_LEN > 0): its waits are better not shared. */
    void (*queue_seen)(const uint8_t *key, size_t klen, void *ud);
    void *ud;
};

/* ws (its loop, store, store_name, max and callbacks set by the caller) with no wait. */
void agent_front_waits_init(struct agent_front_waits *ws);
/* wt waits on the key list body[0..n) (a WAIT's body: the same in every numbering): with share,
 * on the open wait of that list, or a new one; else on one of its own (a queue's key: every item
 * wakes one waiter). 0, -EMLINK (max open already) or -ENOMEM. */
int agent_front_wait_add(struct agent_front_waits *ws, struct agent_front_waiter *wt,
                         const uint8_t *body, size_t n, bool share);
/* wt leaves its wait (unlinked from it; cnode is the caller's); a wait nobody waits on closes. */
void agent_front_waiter_drop(struct agent_front_waiter *wt);
/* The connections kept closed (the front closes). */
void agent_front_waits_close_idle(struct agent_front_waits *ws);
