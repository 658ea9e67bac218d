/* SPDX-License-Identifier: Apache-2.0 */
/* agent-front-wait.h: the store front's WAITs (agent-front.h): one TAG_WAIT on the front's own
 * connection to the store per key list waited on (proto/TCPSTORE.md section 9), which every
 * worker WAIT of that list joins; answered (its tag's woken frame), it tells each waiter; left
 * by its last waiter, it is cancelled there (TAG_CANCEL).
 *
 * Ownership: waiters are the caller's (embedded in its own records); the waits are this
 * module's. Errors: a request that cannot be queued for the store is reported through the
 * caller's send and count (out of memory: the caller gives the store's connection up).
 * Threads: the loop's only. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rdzv-list.h"

#define AGENT_FRONT_MAX_WAITS 1024 /* key lists one connection waits on at once */

struct agent_front_wait;

/* One worker WAIT. */
struct agent_front_waiter {
    struct rdzv_list cnode; /* the caller's (its connection's waiters) */
    struct rdzv_list wnode; /* the wait's waiters */
    struct agent_front_wait *w;
    void *conn;    /* the caller's */
    uint64_t keys; /* the caller's: its key list's length */
};

struct agent_front_waits {
    struct rdzv_list list; /* open waits */
    unsigned n, max;       /* open, and at most */
    uint64_t next_tag;     /* never 0, never twice */
    uint64_t sent;         /* TAG_WAITs sent */
    uint64_t cancels;      /* TAG_CANCELs sent */
    struct rdzv_list queue_keys; /* keys seen holding a queue, oldest first */
    unsigned nqueue_keys;
    /* wt's key list was answered: wt is off its wait (cnode still linked, the caller's). */
    void (*woken)(struct agent_front_waiter *wt, void *ud);
    /* Queue a request without a reply (TAG_WAIT, TAG_CANCEL) for the store. */
    void (*send)(const uint8_t *frame, size_t n, void *ud);
    /* Queue QUEUE_LEN of key for the store; its answer to agent_front_wait_counted(w, n). */
    void (*count)(struct agent_front_wait *w, const uint8_t *key, size_t klen, void *ud);
    void *ud;
};

/* Whether a connection that waits on nlists key lists of keys_held keys in all may not wait on
 * one more of keys keys: past AGENT_FRONT_MAX_WAITS lists or its share of max_wait_keys (the
 * store counts the keys of the front's one connection together; max_wait_keys / max_conns, at
 * least 64). True with why filled (for the log). */
bool agent_front_wait_over(unsigned nlists, uint64_t keys_held, uint64_t keys,
                           uint64_t max_wait_keys, unsigned max_conns, char *why, size_t len);
/* ws (its max and callbacks set by the caller) with no wait. */
void agent_front_waits_init(struct agent_front_waits *ws);
/* wt waits on the key list body[0..n) (a WAIT's body: the same in every numbering): on the
 * open wait of that list, or a new one; on one of its own for the one key of a queue (every
 * item wakes one waiter). 0, -EMLINK (max open already) or -ENOMEM. */
int agent_front_wait_add(struct agent_front_waits *ws, struct agent_front_waiter *wt,
                         const uint8_t *body, size_t n);
/* key holds a queue (a QUEUE_* request of a worker, or a QUEUE_LEN > 0): its waits are not
 * shared from now on (the last 256 such keys kept). */
void agent_front_waits_queue_seen(struct agent_front_waits *ws, const uint8_t *key, size_t len);
/* wt leaves its wait (unlinked from it; cnode is the caller's); a wait nobody waits on is
 * cancelled. */
void agent_front_waiter_drop(struct agent_front_waiter *wt);
/* The store's woken frame of tag: its wait's waiters told (a tag cancelled since: ignored). */
void agent_front_waits_woken(struct agent_front_waits *ws, uint64_t tag);
/* The answer to count's QUEUE_LEN (w is kept until it comes); n < 0: the store was lost. */
void agent_front_wait_counted(struct agent_front_wait *w, int64_t n);
/* Every wait (and queue key) freed, none sent (the store's connection is gone; their waiters
 * dropped first). */
void agent_front_waits_free(struct agent_front_waits *ws);
