/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-store.c: chained hash map of slots. A slot exists while it has a value, a queue or a
 * waiter; waits are indexed both by slot and by owner, so a write costs O(its waiters) and a
 * disconnect O(that connection's registrations). */
#include "daemon/data/rdzvd-store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-util.h"
#include "daemon/data/rdzvd-store-impl.h"

/* What an allocation of n bytes holds of the heap: glibc's chunk on 64 bits, n and its 8-byte
 * header rounded up to 16, 32 at least. An empty queue item or value costs this much too. */
static uint64_t heap_cost(uint64_t n)
{
    return n + 8 <= 32 ? 32 : (n + 8 + 15) & ~(uint64_t)15;
}

uint64_t rdzvd_store_key_cost(size_t klen)
{
    return heap_cost(sizeof(struct slot) + klen);
}

uint64_t rdzvd_store_value_cost(size_t vlen)
{
    return heap_cost(vlen ? vlen : 1);
}

uint64_t rdzvd_store_item_cost(size_t vlen)
{
    return heap_cost(sizeof(struct qitem) + vlen);
}

uint64_t rdzvd_store_reg_cost(void)
{
    _Static_assert(sizeof(struct watch_reg) <= sizeof(struct wait_reg), "one cost for both");
    return heap_cost(sizeof(struct wait_reg));
}

uint64_t rdzvd_store_wait_cost(void)
{
    return heap_cost(sizeof(struct wait));
}

void rdzvd_store_set_budget(struct rdzvd_store *s, struct rdzvd_store_budget *b, uint64_t share)
{
    b = b ? b : s->budget;
    s->budget->used -= s->held;
    s->budget = b;
    b->used += s->held;
    s->share = share;
}

struct rdzvd_store_room rdzvd_store_room(const struct rdzvd_store *s)
{
    return (struct rdzvd_store_room){s->held, s->share, s->budget->used, s->budget->max};
}

void rdzvd_waiter_init(struct rdzvd_waiter *w, void *ud)
{
    rdzv_list_init(&w->waits);
    rdzv_list_init(&w->watches);
    w->nregs = 0;
    w->ud = ud;
}

int rdzvd_store_new(const struct rdzv_limits *lim, rdzvd_wake_fn wake, struct rdzvd_store **ret)
{
    struct rdzvd_store *s = calloc(1, sizeof(*s));

    if (!s)
        return -ENOMEM;
    s->nbuckets = 1024;
    s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
    if (!s->buckets) {
        free(s);
        return -ENOMEM;
    }
    s->lim = lim;
    s->own.max = lim->max_store_bytes;
    s->budget = &s->own;
    s->share = UINT64_MAX;
    s->wake = wake;
    s->seed = rdzv_random_u64();
    *ret = s;
    return 0;
}

static void queue_clear(struct slot *sl)
{
    while (sl->qhead) {
        struct qitem *q = sl->qhead;

        sl->qhead = q->next;
        free(q);
    }
    sl->qtail = NULL;
    sl->qlen = 0;
}

static void wait_free(struct wait *w)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &w->regs)
    {
        struct wait_reg *reg = rdzv_container_of(pos, struct wait_reg, wait_node);

        rdzv_list_del(&reg->slot_node);
        w->owner->nregs--;
        free(reg);
    }
    rdzv_list_del(&w->node);
    free(w);
}

static void wait_abort_building(struct rdzvd_store *s);

void rdzvd_store_set_watch_cb(struct rdzvd_store *s, rdzvd_watch_fn watch)
{
    s->watch = watch;
}

void rdzvd_store_set_change_cb(struct rdzvd_store *s, rdzvd_change_fn fn, void *ud)
{
    s->change = fn;
    s->change_ud = ud;
}

void rdzvd_store_set_room_cb(struct rdzvd_store *s, rdzvd_room_fn fn, void *ud)
{
    s->room = fn;
    s->room_ud = ud;
}

void rdzvd_store_set_decision_fn(struct rdzvd_store *s, rdzvd_decision_fn fn, void *ud)
{
    s->decision = fn;
    s->decision_ud = fn ? ud : NULL;
}

void *rdzvd_store_decision_ud(const struct rdzvd_store *s)
{
    return s->decision_ud;
}

int rdzvd_store_apply_decision(struct rdzvd_store *s, const uint8_t *key, size_t klen,
                               const uint8_t *val, size_t vlen)
{
    return s->decision ? s->decision(s->decision_ud, s, key, klen, val, vlen) : -EINVAL;
}

void rdzvd_store_pass_change(struct rdzvd_store *s, enum rdzvd_change what, const uint8_t *key,
                             size_t klen, const uint8_t *val, size_t vlen)
{
    if (s->gated)
        s->gated--;
    if (s->change)
        s->change(s->change_ud, what, key, klen, val, vlen);
}

uint64_t rdzvd_store_changes_held(const struct rdzvd_store *s)
{
    return s->gated;
}

/* A change made: to the hook (none while muted). */
static void tell(struct rdzvd_store *s, enum rdzvd_change what, const uint8_t *key, size_t klen,
                 const uint8_t *val, size_t vlen)
{
    if (!s->muted && s->change)
        s->change(s->change_ud, what, key, klen, val, vlen);
}

int rdzvd_store_change_as(struct rdzvd_store *s, enum rdzvd_change what, const void *key,
                          size_t klen, const void *val, size_t vlen,
                          int (*fn)(struct rdzvd_store *s, void *ud), void *ud)
{
    int r;

    s->muted++;
    r = fn(s, ud);
    s->muted--;
    if (r == 0)
        tell(s, what, key, klen, val, vlen);
    return r;
}

int rdzvd_store_change_held(struct rdzvd_store *s, int (*fn)(struct rdzvd_store *s, void *ud),
                            void *ud)
{
    int r;

    s->muted++;
    r = fn(s, ud);
    s->muted--;
    if (r == 0)
        s->gated++;
    return r;
}

static void watch_reg_free(struct rdzvd_store *s, struct watch_reg *wr)
{
    rdzv_list_del(&wr->slot_node);
    rdzv_list_del(&wr->owner_node);
    wr->owner->nregs--;
    free(wr);
    store_uncharge(s, 0, rdzvd_store_reg_cost());
}

struct rdzvd_store *rdzvd_store_free(struct rdzvd_store *s)
{
    if (!s)
        return NULL;
    wait_abort_building(s);
    for (size_t i = 0; i < s->nbuckets; i++)
        while (s->buckets[i]) {
            struct slot *sl = s->buckets[i];

            s->buckets[i] = sl->next;
            /* Any waits still registered belong to owners that outlive us: unhook them. */
            while (!rdzv_list_empty(&sl->regs)) {
                struct wait_reg *reg =
                    rdzv_container_of(sl->regs.next, struct wait_reg, slot_node);
                wait_free(reg->wait);
            }
            while (!rdzv_list_empty(&sl->watches))
                watch_reg_free(s, rdzv_container_of(sl->watches.next, struct watch_reg,
                                                    slot_node));
            queue_clear(sl);
            free(sl->val);
            free(sl);
        }
    free(s->buckets);
    s->budget->used -= s->held;
    free(s);
    return NULL;
}

static struct slot *slot_find(struct rdzvd_store *s, const void *key, size_t klen, uint64_t h)
{
    for (struct slot *sl = s->buckets[h & (s->nbuckets - 1)]; sl; sl = sl->next)
        if (sl->hash == h && sl->klen == klen && memcmp(sl->key, key, klen) == 0)
            return sl;
    return NULL;
}

struct slot *store_lookup(struct rdzvd_store *s, const void *key, size_t klen)
{
    return slot_find(s, key, klen, rdzv_hash64(s->seed, key, klen));
}

static void grow(struct rdzvd_store *s)
{
    size_t nb = s->nbuckets * 2;
    struct slot **b = calloc(nb, sizeof(*b));

    if (!b)
        return; /* keep working with longer chains */
    for (size_t i = 0; i < s->nbuckets; i++)
        while (s->buckets[i]) {
            struct slot *sl = s->buckets[i];

            s->buckets[i] = sl->next;
            sl->next = b[sl->hash & (nb - 1)];
            b[sl->hash & (nb - 1)] = sl;
        }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
}

/* Find or create the slot for key. Returns NULL on -ENOMEM/-ENOSPC (in *err). */
struct slot *store_slot_get(struct rdzvd_store *s, const void *key, size_t klen, int *err)
{
    uint64_t h = rdzv_hash64(s->seed, key, klen);
    struct slot *sl = slot_find(s, key, klen, h);

    if (sl)
        return sl;
    if (!store_fits(s, rdzvd_store_key_cost(klen), 0)) {
        *err = -ENOSPC;
        return NULL;
    }
    sl = calloc(1, sizeof(*sl) + klen);
    if (!sl) {
        *err = -ENOMEM;
        return NULL;
    }
    sl->hash = h;
    sl->klen = klen;
    memcpy(sl->key, key, klen);
    rdzv_list_init(&sl->regs);
    rdzv_list_init(&sl->watches);
    if (s->nslots >= s->nbuckets)
        grow(s);
    sl->next = s->buckets[h & (s->nbuckets - 1)];
    s->buckets[h & (s->nbuckets - 1)] = sl;
    s->nslots++;
    store_charge(s, klen, rdzvd_store_key_cost(klen));
    return sl;
}

/* Free the slot if nothing holds it any more. */
void store_slot_gc(struct rdzvd_store *s, struct slot *sl)
{
    struct slot **pp;

    if (sl->present || sl->qlen || !rdzv_list_empty(&sl->regs) || !rdzv_list_empty(&sl->watches))
        return;
    for (pp = &s->buckets[sl->hash & (s->nbuckets - 1)]; *pp != sl; pp = &(*pp)->next)
        ;
    *pp = sl->next;
    s->nslots--;
    store_uncharge(s, sl->klen, rdzvd_store_key_cost(sl->klen));
    free(sl);
}

/* One registration off its slot and its wait, its cost given back. */
static void reg_release(struct rdzvd_store *s, struct wait_reg *reg)
{
    rdzv_list_del(&reg->slot_node);
    rdzv_list_del(&reg->wait_node);
    reg->wait->owner->nregs--;
    free(reg);
    store_uncharge(s, 0, rdzvd_store_reg_cost());
}

/* Satisfy one registration; fire the wake callback when its wait has nothing left. */
void store_reg_fire(struct rdzvd_store *s, struct wait_reg *reg)
{
    struct wait *w = reg->wait;
    struct rdzvd_waiter *owner = w->owner;

    reg_release(s, reg);
    if (--w->remaining == 0) {
        s->woken_tag = w->tag;
        rdzv_list_del(&w->node);
        free(w);
        store_uncharge(s, 0, rdzvd_store_wait_cost());
        s->wake(owner, owner->ud);
    }
}

static void wake_all(struct rdzvd_store *s, struct slot *sl)
{
    while (!rdzv_list_empty(&sl->regs))
        store_reg_fire(s, rdzv_container_of(sl->regs.next, struct wait_reg, slot_node));
}

static void notify_watchers(struct rdzvd_store *s, struct slot *sl, uint8_t type,
                            const uint8_t *old, size_t oldlen, const uint8_t *nv, size_t nlen)
{
    struct rdzv_list *pos, *tmp;

    if (!s->watch)
        return;
    rdzv_list_for_each_safe(pos, tmp, &sl->watches)
    {
        struct watch_reg *wr = rdzv_container_of(pos, struct watch_reg, slot_node);

        s->watch(wr->owner, wr->owner->ud, type, sl->key, sl->klen, old, oldlen, nv, nlen);
    }
}

/* Tell the change hook what happened to sl (val: what its record carries), then wake its
 * waiters: the hook runs before any waiter, as rdzvd_change_fn promises. */
static void slot_changed(struct rdzvd_store *s, struct slot *sl, enum rdzvd_change what,
                         const uint8_t *val, size_t vlen)
{
    tell(s, what, sl->key, sl->klen, val, vlen);
    wake_all(s, sl);
}

/* Replace the value of sl (taking ownership of nv); its watchers are told, the hook and the
 * waiters are not (slot_changed). */
static void slot_assign(struct rdzvd_store *s, struct slot *sl, uint8_t *nv, size_t nlen)
{
    if (!rdzv_list_empty(&sl->watches))
        notify_watchers(s, sl, sl->present ? RDZV_WATCH_KEY_UPDATED : RDZV_WATCH_KEY_CREATED,
                        sl->present ? sl->val : NULL, sl->present ? sl->vlen : 0, nv, nlen);
    if (sl->present) {
        store_uncharge(s, sl->vlen, rdzvd_store_value_cost(sl->vlen));
        free(sl->val);
    } else {
        sl->present = true;
        s->nkeys++;
    }
    sl->val = nv;
    sl->vlen = nlen;
    store_charge(s, nlen, rdzvd_store_value_cost(nlen));
}

/* The limits a value of nlen bytes replacing old ones (present: whether there are) must pass:
 * 0, -EMSGSIZE or -ENOSPC. */
static int value_fits(const struct rdzvd_store *s, uint64_t nlen, uint64_t old, bool present)
{
    if (nlen > s->lim->max_value_len)
        return -EMSGSIZE;
    if (!store_fits(s, rdzvd_store_value_cost(nlen), present ? rdzvd_store_value_cost(old) : 0))
        return -ENOSPC;
    return 0;
}

/* sl's value becomes a copy of val, recorded as a SET. */
static int store_value(struct rdzvd_store *s, struct slot *sl, const void *val, size_t vlen)
{
    int r = value_fits(s, vlen, sl->vlen, sl->present);
    uint8_t *nv;

    if (r == 0)
        r = record_room(s, sl->klen, vlen);
    if (r < 0)
        return r;
    nv = malloc(vlen ? vlen : 1);
    if (!nv)
        return -ENOMEM;
    if (vlen)
        memcpy(nv, val, vlen);
    slot_assign(s, sl, nv, vlen);
    slot_changed(s, sl, RDZVD_CHANGE_SET, nv, vlen);
    return 0;
}

int rdzvd_store_set(struct rdzvd_store *s, const void *key, size_t klen, const void *val,
                    size_t vlen)
{
    int r = 0;
    struct slot *sl = store_slot_get(s, key, klen, &r);

    if (!sl)
        return r;
    r = store_value(s, sl, val, vlen);
    store_slot_gc(s, sl);
    return r;
}

int rdzvd_store_get(struct rdzvd_store *s, const void *key, size_t klen, const uint8_t **val,
                    size_t *vlen)
{
    struct slot *sl = store_lookup(s, key, klen);

    if (!sl || !sl->present)
        return -ENOENT;
    *val = sl->val;
    *vlen = sl->vlen;
    return 0;
}

int rdzvd_store_add(struct rdzvd_store *s, const void *key, size_t klen, int64_t delta,
                    int64_t *ret)
{
    int64_t cur = 0, sum;
    char text[24];
    struct slot *sl;
    int r = 0, n;

    sl = store_slot_get(s, key, klen, &r);
    if (!sl)
        return r;
    if (sl->present)
        r = rdzv_parse_i64n(sl->val, sl->vlen, &cur);
    if (r == 0 && __builtin_add_overflow(cur, delta, &sum))
        r = -ERANGE;
    if (r == 0) {
        n = snprintf(text, sizeof(text), "%" PRId64, sum);
        r = store_value(s, sl, text, (size_t)n);
    }
    if (r == 0)
        *ret = sum;
    store_slot_gc(s, sl);
    return r;
}

int rdzvd_store_compare_set(struct rdzvd_store *s, const void *key, size_t klen, const void *exp,
                            size_t explen, const void *des, size_t deslen, const uint8_t **cur,
                            size_t *curlen)
{
    struct slot *sl = store_lookup(s, key, klen);
    int r = 0;

    if (!sl || !sl->present) {
        if (explen != 0) {
            /* PyTorch answers with the caller's own expected value: the "lie" clients rely on. */
            *cur = exp;
            *curlen = explen;
            return 0;
        }
        sl = store_slot_get(s, key, klen, &r);
        if (!sl)
            return r;
        r = store_value(s, sl, des, deslen);
        store_slot_gc(s, sl);
        if (r < 0)
            return r;
    } else if (sl->vlen == explen && memcmp(sl->val, exp, explen) == 0) {
        r = store_value(s, sl, des, deslen);
        if (r < 0)
            return r;
    }
    *cur = sl->val;
    *curlen = sl->vlen;
    return 0;
}

/* The value grows in place (realloc: no copy of what it held, unless watchers need the old value
 * too), and the change is recorded as the appended bytes, so an APPEND costs what it sent. */
int rdzvd_store_append(struct rdzvd_store *s, const void *key, size_t klen, const void *val,
                       size_t vlen)
{
    int r = 0;
    struct slot *sl = store_slot_get(s, key, klen, &r);
    size_t old;
    uint8_t *nv;

    if (!sl)
        return r;
    old = sl->present ? sl->vlen : 0;
    r = value_fits(s, (uint64_t)old + vlen, old, sl->present);
    if (r == 0)
        r = record_room(s, sl->klen, vlen);
    if (r < 0)
        goto out_gc;
    if (!sl->present || !rdzv_list_empty(&sl->watches)) {
        nv = malloc(old + vlen ? old + vlen : 1);
        if (!nv) {
            r = -ENOMEM;
            goto out_gc;
        }
        if (old)
            memcpy(nv, sl->val, old);
        if (vlen)
            memcpy(nv + old, val, vlen);
        slot_assign(s, sl, nv, old + vlen);
    } else {
        nv = realloc(sl->val, old + vlen ? old + vlen : 1);
        if (!nv) {
            r = -ENOMEM;
            goto out_gc;
        }
        if (vlen)
            memcpy(nv + old, val, vlen);
        store_uncharge(s, 0, rdzvd_store_value_cost(old));
        sl->val = nv;
        sl->vlen = old + vlen;
        store_charge(s, vlen, rdzvd_store_value_cost(sl->vlen));
    }
    slot_changed(s, sl, RDZVD_CHANGE_APPEND, sl->val + old, vlen);
out_gc:
    store_slot_gc(s, sl);
    return r;
}

int rdzvd_store_delete(struct rdzvd_store *s, const void *key, size_t klen)
{
    struct slot *sl = store_lookup(s, key, klen);

    if (!sl || !sl->present)
        return 0;
    if (!rdzv_list_empty(&sl->watches))
        notify_watchers(s, sl, RDZV_WATCH_KEY_DELETED, sl->val, sl->vlen, NULL, 0);
    store_uncharge(s, sl->vlen, rdzvd_store_value_cost(sl->vlen));
    free(sl->val);
    sl->val = NULL;
    sl->vlen = 0;
    sl->present = false;
    s->nkeys--;
    tell(s, RDZVD_CHANGE_DELETE, sl->key, sl->klen, NULL, 0);
    store_slot_gc(s, sl);
    return 1;
}

uint64_t rdzvd_store_num_keys(const struct rdzvd_store *s)
{
    return s->nkeys;
}

uint64_t rdzvd_store_bytes(const struct rdzvd_store *s)
{
    return s->bytes;
}

uint64_t rdzvd_store_held(const struct rdzvd_store *s)
{
    return s->held;
}

bool rdzvd_store_exists(struct rdzvd_store *s, const void *key, size_t klen)
{
    struct slot *sl = store_lookup(s, key, klen);

    return sl && (sl->present || sl->qlen > 0);
}

int rdzvd_store_foreach(struct rdzvd_store *s,
                        int (*fn)(const uint8_t *key, size_t klen, void *ud), void *ud)
{
    for (size_t i = 0; i < s->nbuckets; i++)
        for (struct slot *sl = s->buckets[i]; sl; sl = sl->next)
            if (sl->present) {
                int r = fn(sl->key, sl->klen, ud);

                if (r)
                    return r;
            }
    return 0;
}

int rdzvd_store_dump(struct rdzvd_store *s,
                     int (*fn)(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                               const uint8_t *val, size_t vlen),
                     void *ud)
{
    int r;

    for (size_t i = 0; i < s->nbuckets; i++)
        for (struct slot *sl = s->buckets[i]; sl; sl = sl->next)
            if (sl->present && (r = fn(ud, RDZVD_CHANGE_SET, sl->key, sl->klen, sl->val,
                                       sl->vlen)) != 0)
                return r;
    for (size_t i = 0; i < s->nbuckets; i++)
        for (struct slot *sl = s->buckets[i]; sl; sl = sl->next)
            for (struct qitem *q = sl->qhead; q; q = q->next)
                if ((r = fn(ud, RDZVD_CHANGE_QPUSH, sl->key, sl->klen, q->data, q->len)) != 0)
                    return r;
    return 0;
}

int rdzvd_store_wait_begin(struct rdzvd_store *s, struct rdzvd_waiter *w)
{
    /* Charged with its first key registered: a WAIT on keys that all exist (a TCPStore get's)
     * holds nothing, and is answered on a full store too. */
    struct wait *wt = calloc(1, sizeof(*wt));

    if (!wt)
        return -ENOMEM;
    wt->owner = w;
    rdzv_list_init(&wt->regs);
    rdzv_list_init(&wt->node);
    s->building = wt;
    return 0;
}

int rdzvd_store_wait_key(struct rdzvd_store *s, struct rdzvd_waiter *w, const void *key,
                         size_t klen)
{
    struct wait *wt = s->building;
    struct wait_reg *reg;
    struct slot *sl;
    uint64_t cost;
    int r = 0;

    if (!wt || wt->owner != w)
        return -EINVAL;
    if (rdzvd_store_exists(s, key, klen))
        return 0;
    /* On any failure the whole WAIT is dropped: nothing of it stays registered. */
    if (w->nregs >= s->lim->max_wait_keys) {
        wait_abort_building(s);
        return -EMSGSIZE;
    }
    sl = store_slot_get(s, key, klen, &r);
    if (!sl) {
        wait_abort_building(s);
        return r;
    }
    cost = rdzvd_store_reg_cost() + (wt->charged ? 0 : rdzvd_store_wait_cost());
    reg = store_fits(s, cost, 0) ? malloc(sizeof(*reg)) : NULL;
    if (!reg) {
        r = store_fits(s, cost, 0) ? -ENOMEM : -ENOSPC;
        store_slot_gc(s, sl);
        wait_abort_building(s);
        return r;
    }
    store_charge(s, 0, cost);
    wt->charged = true;
    reg->wait = wt;
    reg->slot = sl;
    rdzv_list_add_tail(&sl->regs, &reg->slot_node);
    rdzv_list_add_tail(&wt->regs, &reg->wait_node);
    w->nregs++;
    wt->remaining++;
    return 0;
}

uint64_t rdzvd_store_woken_tag(const struct rdzvd_store *s)
{
    return s->woken_tag;
}

void rdzvd_store_wait_tag(struct rdzvd_store *s, uint64_t tag)
{
    if (s->building)
        s->building->tag = tag;
}

int rdzvd_store_wait_end(struct rdzvd_store *s, struct rdzvd_waiter *w)
{
    struct wait *wt = s->building;

    if (!wt)
        return -EINVAL; /* a failed wait_key already dropped it */
    if (wt->owner != w)
        return -EINVAL;
    s->building = NULL;
    if (wt->remaining == 0) { /* every key was there: nothing was charged */
        free(wt);
        return 1;
    }
    rdzv_list_add_tail(&w->waits, &wt->node);
    return 0;
}

/* Abort a wait that wait_begin started but that will not be ended (a key failed). */
static void wait_abort_building(struct rdzvd_store *s)
{
    struct wait *wt = s->building;
    struct rdzv_list *pos, *tmp;

    if (!wt)
        return;
    s->building = NULL;
    rdzv_list_for_each_safe(pos, tmp, &wt->regs)
    {
        struct wait_reg *reg = rdzv_container_of(pos, struct wait_reg, wait_node);
        struct slot *sl = reg->slot;

        rdzv_list_del(&reg->slot_node);
        wt->owner->nregs--;
        free(reg);
        store_uncharge(s, 0, rdzvd_store_reg_cost());
        store_slot_gc(s, sl);
    }
    if (wt->charged)
        store_uncharge(s, 0, rdzvd_store_wait_cost());
    free(wt);
}

/* A pending wait of its owner dropped, its registrations and cost with it. */
static void wait_drop(struct rdzvd_store *s, struct wait *wt)
{
    struct rdzv_list *pos, *tmp;

    rdzv_list_for_each_safe(pos, tmp, &wt->regs)
    {
        struct wait_reg *reg = rdzv_container_of(pos, struct wait_reg, wait_node);
        struct slot *sl = reg->slot;

        reg_release(s, reg);
        store_slot_gc(s, sl);
    }
    rdzv_list_del(&wt->node);
    if (wt->charged)
        store_uncharge(s, 0, rdzvd_store_wait_cost());
    free(wt);
}

unsigned rdzvd_store_cancel_waits(struct rdzvd_store *s, struct rdzvd_waiter *w)
{
    unsigned n = 0;

    if (s->building && s->building->owner == w)
        wait_abort_building(s);
    while (!rdzv_list_empty(&w->waits)) {
        wait_drop(s, rdzv_container_of(w->waits.next, struct wait, node));
        n++;
    }
    return n;
}

unsigned rdzvd_store_cancel_tag(struct rdzvd_store *s, struct rdzvd_waiter *w, uint64_t tag)
{
    struct rdzv_list *pos, *tmp;
    unsigned n = 0;

    rdzv_list_for_each_safe(pos, tmp, &w->waits)
    {
        struct wait *wt = rdzv_container_of(pos, struct wait, node);

        if (wt->tag == tag) {
            wait_drop(s, wt);
            n++;
        }
    }
    return n;
}

/* Whether w watches sl already. Both lists are walked together, so the cost is the shorter
 * one's: the key's watchers, or w's watches. */
static bool watched_by(const struct slot *sl, const struct rdzvd_waiter *w)
{
    const struct rdzv_list *a = sl->watches.next, *b = w->watches.next;

    for (; a != &sl->watches && b != &w->watches; a = a->next, b = b->next)
        if (rdzv_container_of(a, struct watch_reg, slot_node)->owner == w ||
            rdzv_container_of(b, struct watch_reg, owner_node)->slot == sl)
            return true;
    return false;
}

int rdzvd_store_watch(struct rdzvd_store *s, struct rdzvd_waiter *w, const void *key, size_t klen)
{
    struct watch_reg *wr;
    struct slot *sl = store_lookup(s, key, klen);
    int r = 0;

    /* One registration a connection and key: PyTorch's client keeps one callback a key, and
     * each registration more would copy every change once more into w's output. */
    if (sl && watched_by(sl, w))
        return 0;
    if (w->nregs >= s->lim->max_wait_keys)
        return -EMSGSIZE;
    sl = store_slot_get(s, key, klen, &r);
    if (!sl)
        return r;
    wr = store_fits(s, rdzvd_store_reg_cost(), 0) ? malloc(sizeof(*wr)) : NULL;
    if (!wr) {
        store_slot_gc(s, sl);
        return store_fits(s, rdzvd_store_reg_cost(), 0) ? -ENOMEM : -ENOSPC;
    }
    store_charge(s, 0, rdzvd_store_reg_cost());
    wr->owner = w;
    wr->slot = sl;
    rdzv_list_add_tail(&sl->watches, &wr->slot_node);
    rdzv_list_add_tail(&w->watches, &wr->owner_node);
    w->nregs++;
    return 0;
}

void rdzvd_store_drop_watches(struct rdzvd_store *s, struct rdzvd_waiter *w)
{
    while (!rdzv_list_empty(&w->watches)) {
        struct watch_reg *wr = rdzv_container_of(w->watches.next, struct watch_reg, owner_node);
        struct slot *sl = wr->slot;

        watch_reg_free(s, wr);
        store_slot_gc(s, sl);
    }
}
