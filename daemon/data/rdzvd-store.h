/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-store.h: the key-value map, per-key queues and the wait index. No sockets, no logging:
 * unit-testable on its own. Semantics follow PyTorch's TCPStore (proto/TCPSTORE.md 3, 5).
 *
 * Ownership: rdzvd_store_new's caller owns the store (rdzvd_store_free), which owns its keys,
 * values and queues; a waiter is embedded by its caller (one per connection), the waits
 * registered on it are the store's until woken or cancelled.
 * Errors: negative errno (-ENOMEM, -ENOENT, -ENOSPC, -EMSGSIZE as each function says).
 * Threads: one at a time (rdzvd: the loop's); callbacks run synchronously from the mutation. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rdzv-list.h"
#include "proto/rdzv-proto.h"

struct rdzvd_store;

/* The side of a connection that owns waits and watches: embed one in each connection. */
struct rdzvd_waiter {
    struct rdzv_list waits;   /* struct wait, oldest first */
    struct rdzv_list watches; /* struct watch_reg: PyTorch <= 2.0 WATCH_KEY registrations */
    uint64_t nregs;           /* pending WAIT keys plus watches: bounded by max_wait_keys */
    void *ud;                 /* handed back to the callbacks */
};

/* Called when one of w's waits is satisfied (all its missing keys written), in wait order
 * per key write. The wait is already released when this runs. */
typedef void (*rdzvd_wake_fn)(struct rdzvd_waiter *w, void *ud);

/* A watched key changed (type is RDZV_WATCH_KEY_CREATED/UPDATED/DELETED); old/new are empty
 * when there was or is no value. Must only queue output, not touch the store. */
typedef void (*rdzvd_watch_fn)(struct rdzvd_waiter *w, void *ud, uint8_t type, const uint8_t *key,
                               size_t klen, const uint8_t *old, size_t oldlen, const uint8_t *nv,
                               size_t nvlen);

/* What a successful mutation did to a key (the change hook, e.g. for the journal). */
enum rdzvd_change {
    RDZVD_CHANGE_SET,    /* the key now holds val (SET, ADD's decimal text, COMPARE_SET) */
    RDZVD_CHANGE_DELETE, /* the key's value was removed; val is NULL */
    RDZVD_CHANGE_QPUSH,  /* val was pushed at the tail of the key's queue */
    RDZVD_CHANGE_QPOP,   /* the head of the key's queue was popped; val is NULL */
    /* A job's decision (rdzvd-job-record.h), made by rdzvd_store_change_as (or held, and passed
     * on): val is the decision, and replaying it runs the function that made the change again
     * (rdzvd_record_apply). */
    RDZVD_CHANGE_DECISION,
    /* val was added at the end of the key's value (APPEND; a missing key's value starts empty):
     * val is only the appended bytes, never the whole new value. */
    RDZVD_CHANGE_APPEND,
};

/* Replays a record of RDZVD_CHANGE_DECISION (what fn of rdzvd_store_change_as made) on s: the
 * layer that makes decisions (the job table's, rdzvd-job-record.h) registers it with its ud (what
 * that layer's decisions read besides s: the same on every replica and replay), so that the
 * store and the record codec need not know what a decision is. 0 or a negative errno. */
typedef int (*rdzvd_decision_fn)(void *ud, struct rdzvd_store *s, const uint8_t *key,
                                 size_t klen, const uint8_t *val, size_t vlen);

/* Called after every successful mutation, before any waiter is woken; for a change held
 * (rdzvd_store_change_held), when its maker passes it on. key/val are valid only during the
 * call. The hook may read the store (the journal compacts from here, when no change is held)
 * but must not change it. */
typedef void (*rdzvd_change_fn)(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                                const uint8_t *val, size_t vlen);

/* Asked before a change that adds a record of bytes bytes of key and value (a SET's, ADD's or
 * COMPARE_SET's key and new value, an APPEND's key and appended bytes, a QUEUE_PUSH's key and
 * item) whether its record has room (the journal's bound on disk): 0, or a negative errno that
 * refuses the change, nothing changed. Deletes and pops, and what rdzvd_store_change_as or a
 * replay makes, are never asked. The hook may read the store (the journal compacts from here). */
typedef int (*rdzvd_room_fn)(void *ud, uint64_t bytes);

/* Bytes of several stores held against one limit (rdzvd: --max-store-bytes counts every store
 * of the daemon together, the main one and each job generation's). Embedded by its owner, which
 * sets max and must keep it until the last store charging it is freed; used starts at 0. */
struct rdzvd_store_budget {
    uint64_t used; /* what every store charging it holds (rdzvd_store_held) */
    uint64_t max;
};

/* What a client can make a store hold, charged to its budget when made and given back when
 * gone, each allocation as the heap holds it (its bytes, its header and rounding, its
 * bookkeeping): a key (with its slot, while it has a value, a queue or a waiter), a value (an
 * empty one too), a queue item (an empty one too), a WAIT (each call, and each key it waits on)
 * and a WATCH_KEY registration. */
uint64_t rdzvd_store_key_cost(size_t klen);
uint64_t rdzvd_store_value_cost(size_t vlen);
uint64_t rdzvd_store_item_cost(size_t vlen);
uint64_t rdzvd_store_wait_cost(void); /* one WAIT call, besides its keys */
uint64_t rdzvd_store_reg_cost(void);  /* one key waited on, or one watch */

/* lim is borrowed and must outlive the store. watch may be NULL. The store charges a budget of
 * its own (max lim->max_store_bytes) until rdzvd_store_set_budget. Returns 0 or -ENOMEM. */
int rdzvd_store_new(const struct rdzv_limits *lim, rdzvd_wake_fn wake, struct rdzvd_store **ret);
void rdzvd_store_set_watch_cb(struct rdzvd_store *s, rdzvd_watch_fn watch);
/* Install (or with fn NULL remove) the change hook. One hook per store. */
void rdzvd_store_set_change_cb(struct rdzvd_store *s, rdzvd_change_fn fn, void *ud);
/* Install (or with fn NULL remove) the room hook. One per store. */
void rdzvd_store_set_room_cb(struct rdzvd_store *s, rdzvd_room_fn fn, void *ud);
/* Tell the hook of a change held (rdzvd_store_change_held), as the hook would have got it:
 * its maker passes its changes on in order, at once or later. */
void rdzvd_store_pass_change(struct rdzvd_store *s, enum rdzvd_change what, const uint8_t *key,
                             size_t klen, const uint8_t *val, size_t vlen);
/* The changes held that the hook was not told yet: the store is ahead of its hook (a journal
 * does not compact then). */
uint64_t rdzvd_store_changes_held(const struct rdzvd_store *s);
/* Install (or with fn NULL remove) the store's decision replayer, called with ud. */
void rdzvd_store_set_decision_fn(struct rdzvd_store *s, rdzvd_decision_fn fn, void *ud);
/* The ud s's decision replayer was installed with; NULL: none. */
void *rdzvd_store_decision_ud(const struct rdzvd_store *s);
/* Replay a decision on s: its decision replayer's result; -EINVAL when it has none (a store
 * that takes no decisions: the record is refused, nothing changed). */
int rdzvd_store_apply_decision(struct rdzvd_store *s, const uint8_t *key, size_t klen,
                               const uint8_t *val, size_t vlen);
/* One change made of several mutations, recorded as one: fn(s, ud) changes s with the change
 * hook muted, then, if it returned 0, the hook is told what, key and val once (a job's decision:
 * whoever replays that record runs fn's code again, rdzvd-job-record.h). fn returns 0 (changed),
 * > 0 (nothing to change: the hook is not told) or a negative errno (fn made no change), and
 * that is returned. */
int rdzvd_store_change_as(struct rdzvd_store *s, enum rdzvd_change what, const void *key,
                          size_t klen, const void *val, size_t vlen,
                          int (*fn)(struct rdzvd_store *s, void *ud), void *ud);
/* rdzvd_store_change_as, but the hook is not told: a change made (0) is held until its maker
 * passes it on (rdzvd_store_pass_change). The job machine keeps a step's records so, until its
 * Ready is carried out. */
int rdzvd_store_change_held(struct rdzvd_store *s, int (*fn)(struct rdzvd_store *s, void *ud),
                            void *ud);
struct rdzvd_store *rdzvd_store_free(struct rdzvd_store *s);
/* Charge b (borrowed; NULL: the budget it charges now) instead of the store's own budget from
 * now on, the store holding at most share of it however much b has left (UINT64_MAX: no share
 * of its own): rdzvd keeps the main store to half of --max-store-bytes, so that no flood of its
 * TCPStore clients leaves the jobs' stores nothing. A change that would take b->used past b->max,
 * or what the store holds past share, fails -ENOSPC, as one past the store's limit; what is held
 * already stays. A record replayed or applied (rdzvd_record_apply: a journal, Raft) is a change
 * made already, never refused by the share. */
void rdzvd_store_set_budget(struct rdzvd_store *s, struct rdzvd_store_budget *b, uint64_t share);
/* What the store holds (rdzvd_store_held) and its share; what its budget (its own, or the
 * shared one) holds in all and its limit. */
struct rdzvd_store_room {
    uint64_t held, share, used, max;
};
struct rdzvd_store_room rdzvd_store_room(const struct rdzvd_store *s);

void rdzvd_waiter_init(struct rdzvd_waiter *w, void *ud);

/* Values returned by lookups point into the store and stay valid until the next change of that
 * key. */
int rdzvd_store_set(struct rdzvd_store *s, const void *key, size_t klen, const void *val,
                    size_t vlen);
/* 0 and the value, or -ENOENT. */
int rdzvd_store_get(struct rdzvd_store *s, const void *key, size_t klen, const uint8_t **val,
                    size_t *vlen);
/* Missing key counts as 0. -EINVAL if the value is not decimal text, -ERANGE on overflow. */
int rdzvd_store_add(struct rdzvd_store *s, const void *key, size_t klen, int64_t delta,
                    int64_t *ret);
/* TCPStore's compare-and-set, odd replies included: *cur is what the client gets back. */
int rdzvd_store_compare_set(struct rdzvd_store *s, const void *key, size_t klen, const void *exp,
                            size_t explen, const void *des, size_t deslen, const uint8_t **cur,
                            size_t *curlen);
/* Add val at the end of the key's value (a missing key's starts empty). -EMSGSIZE when the value
 * would grow past max_value_len, -ENOSPC past the budget, -ENOMEM: nothing changed then. The
 * change hook is told RDZVD_CHANGE_APPEND with val alone. */
int rdzvd_store_append(struct rdzvd_store *s, const void *key, size_t klen, const void *val,
                       size_t vlen);
/* 1 when a key was removed, 0 when there was none. Waiters are not affected. */
int rdzvd_store_delete(struct rdzvd_store *s, const void *key, size_t klen);
uint64_t rdzvd_store_num_keys(const struct rdzvd_store *s);
/* The bytes of the keys and values (queues included) the store holds: what a journal of it
 * keeps. */
uint64_t rdzvd_store_bytes(const struct rdzvd_store *s);
/* What the store charges to its budget: the sum of the costs above of all it holds. */
uint64_t rdzvd_store_held(const struct rdzvd_store *s);
/* True if the key has a value or a non-empty queue (what CHECK and WAIT look at). */
bool rdzvd_store_exists(struct rdzvd_store *s, const void *key, size_t klen);
/* Visit every key that has a value. Stops early when fn returns non-zero, and returns that. */
int rdzvd_store_foreach(struct rdzvd_store *s,
                        int (*fn)(const uint8_t *key, size_t klen, void *ud), void *ud);

/* Visit the whole content as the changes that rebuild it: every value as RDZVD_CHANGE_SET, then
 * every queued item, oldest first, as RDZVD_CHANGE_QPUSH. Stops early when fn returns non-zero,
 * and returns that. fn must not touch the store. */
int rdzvd_store_dump(struct rdzvd_store *s,
                     int (*fn)(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                               const uint8_t *val, size_t vlen),
                     void *ud);

/* Queues: a FIFO per key, apart from the KV map. Push wakes one waiter. -ENOSPC when full. */
int rdzvd_store_queue_push(struct rdzvd_store *s, const void *key, size_t klen, const void *val,
                           size_t vlen);
/* Pops the head into *ret (malloc'd, caller frees) and reports the length before the pop.
 * With an empty queue *retlen_before is 0 and nothing is returned. */
int rdzvd_store_queue_pop(struct rdzvd_store *s, const void *key, size_t klen,
                          uint64_t *len_before, uint8_t **ret, size_t *retlen);
uint64_t rdzvd_store_queue_len(struct rdzvd_store *s, const void *key, size_t klen);

/* WAIT: begin, add each key, then end. Keys present now are not counted. wait_key fails with
 * -EMSGSIZE past max_wait_keys (or -ENOMEM/-ENOSPC) and then drops the whole WAIT: nothing is kept
 * and wait_end must not be called. wait_end returns 1 when nothing is missing (reply now; nothing
 * was kept) or 0 when the wait is pending (the wake callback fires later). */
int rdzvd_store_wait_begin(struct rdzvd_store *s, struct rdzvd_waiter *w);
int rdzvd_store_wait_key(struct rdzvd_store *s, struct rdzvd_waiter *w, const void *key,
                         size_t klen);
int rdzvd_store_wait_end(struct rdzvd_store *s, struct rdzvd_waiter *w);
/* Between wait_begin and wait_end: the wait's tag (0 by default: a store front's TAG_WAIT sets
 * one), which rdzvd_store_woken_tag says while its wake callback runs. */
void rdzvd_store_wait_tag(struct rdzvd_store *s, uint64_t tag);
uint64_t rdzvd_store_woken_tag(const struct rdzvd_store *s);
/* WATCH_KEY (PyTorch <= 2.0): report every later change of key to w until it is dropped. A key
 * w watches already is watched once: 0, nothing added. Returns 0, -EMSGSIZE past max_wait_keys,
 * -ENOMEM or -ENOSPC. */
int rdzvd_store_watch(struct rdzvd_store *s, struct rdzvd_waiter *w, const void *key, size_t klen);
/* Drop every watch of w (the connection closing). */
void rdzvd_store_drop_watches(struct rdzvd_store *s, struct rdzvd_waiter *w);

/* Drop every pending wait of w (CANCEL_WAIT, or the connection closing). Returns how many. */
unsigned rdzvd_store_cancel_waits(struct rdzvd_store *s, struct rdzvd_waiter *w);
/* Drop w's pending waits of that tag (TAG_CANCEL). Returns how many. */
unsigned rdzvd_store_cancel_tag(struct rdzvd_store *s, struct rdzvd_waiter *w, uint64_t tag);
