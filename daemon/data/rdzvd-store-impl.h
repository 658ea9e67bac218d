/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-store-impl.h: the store's insides, shared by its files (rdzvd-store.c: the map, values
 * and waits; rdzvd-store-queue.c: the queues) and by nothing else: callers use rdzvd-store.h.
 * Threads: the store's (one at a time). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rdzv-list.h"
#include "daemon/data/rdzvd-store.h"

struct qitem {
    struct qitem *next;
    size_t len;
    uint8_t data[];
};

struct slot {
    struct slot *next; /* hash chain */
    uint64_t hash;
    uint8_t *val;
    size_t vlen;
    bool present;
    struct rdzv_list regs; /* struct wait_reg.slot_node: waiters for this (missing) key */
    struct rdzv_list watches; /* struct watch_reg.slot_node */
    struct qitem *qhead, *qtail;
    uint64_t qlen;
    size_t klen;
    uint8_t key[];
};

struct wait {
    struct rdzv_list node; /* in owner->waits */
    struct rdzvd_waiter *owner;
    uint64_t remaining;
    struct rdzv_list regs; /* struct wait_reg.wait_node */
    uint64_t tag;          /* rdzvd_store_wait_tag's (a front's TAG_WAIT), else 0 */
    bool charged;          /* its cost is held: from its first key registered */
};

struct wait_reg {
    struct rdzv_list slot_node;
    struct rdzv_list wait_node;
    struct wait *wait;
    struct slot *slot;
};

struct watch_reg {
    struct rdzv_list slot_node;
    struct rdzv_list owner_node;
    struct rdzvd_waiter *owner;
    struct slot *slot;
};

struct rdzvd_store {
    const struct rdzv_limits *lim;
    rdzvd_wake_fn wake;
    rdzvd_watch_fn watch;
    rdzvd_change_fn change; /* NULL: nobody records changes */
    void *change_ud;
    /* The changes held (rdzvd_store_change_held) that the hook was not told yet; muted:
     * rdzvd_store_change_as's fn runs, nobody is told. */
    uint64_t gated;
    unsigned muted;
    rdzvd_decision_fn decision; /* NULL: takes no decisions */
    void *decision_ud;
    rdzvd_room_fn room;         /* NULL: every record has room */
    void *room_ud;
    struct slot **buckets;
    size_t nbuckets; /* power of two */
    size_t nslots;
    uint64_t nkeys;  /* slots with a value */
    uint64_t bytes;  /* keys + values + queue items held (their bytes only) */
    uint64_t held;   /* what is charged to the budget: each allocation a client made */
    struct rdzvd_store_budget own;     /* until rdzvd_store_set_budget */
    struct rdzvd_store_budget *budget; /* what bytes are charged to: &own or a shared one */
    uint64_t share;                    /* the most held may be, whatever the budget has left */
    uint64_t seed;
    struct wait *building; /* between wait_begin and wait_end */
    uint64_t woken_tag;    /* the tag of the wait whose wake callback runs */
};

/* Whether held - sub + add fits the budget and the store's share (sub is held now). */
/* Whether a change's record of klen + vlen bytes has room (the room hook): 0 or its error. */
static inline int record_room(const struct rdzvd_store *s, size_t klen, size_t vlen)
{
    return s->room && !s->muted ? s->room(s->room_ud, (uint64_t)klen + vlen) : 0;
}

static inline bool store_fits(const struct rdzvd_store *s, uint64_t add, uint64_t sub)
{
    return add <= s->budget->max && s->budget->used - sub <= s->budget->max - add &&
           add <= s->share && s->held - sub <= s->share - add;
}

/* n bytes of keys or values (0 for a registration) in an allocation that holds cost. */
static inline void store_charge(struct rdzvd_store *s, uint64_t n, uint64_t cost)
{
    s->bytes += n;
    s->held += cost;
    s->budget->used += cost;
}

static inline void store_uncharge(struct rdzvd_store *s, uint64_t n, uint64_t cost)
{
    s->bytes -= n;
    s->held -= cost;
    s->budget->used -= cost;
}

/* The slot of key, or NULL. */
struct slot *store_lookup(struct rdzvd_store *s, const void *key, size_t klen);
/* Find or create the slot for key. Returns NULL on -ENOMEM/-ENOSPC (in *err). */
struct slot *store_slot_get(struct rdzvd_store *s, const void *key, size_t klen, int *err);
/* Free the slot if nothing holds it any more. */
void store_slot_gc(struct rdzvd_store *s, struct slot *sl);
/* Satisfy one registration; fire the wake callback when its wait has nothing left. */
void store_reg_fire(struct rdzvd_store *s, struct wait_reg *reg);
