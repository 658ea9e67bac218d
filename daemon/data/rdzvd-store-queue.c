/* SPDX-License-Identifier: Apache-2.0 */
/* rdzvd-store-queue.c: the store's queues (QUEUE_PUSH, QUEUE_POP, QUEUE_LEN): a FIFO of items
 * per key, apart from its value; a push wakes one waiter of the key (rdzvd-store.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/data/rdzvd-store-impl.h"

int rdzvd_store_queue_push(struct rdzvd_store *s, const void *key, size_t klen, const void *val,
                           size_t vlen)
{
    struct qitem *q;
    struct slot *sl;
    int r = 0;

    sl = store_slot_get(s, key, klen, &r);
    if (!sl)
        return r;
    if (sl->qlen >= s->lim->max_queue_items || !store_fits(s, rdzvd_store_item_cost(vlen), 0)) {
        r = -ENOSPC;
        goto out_gc;
    }
    r = record_room(s, sl->klen, vlen);
    if (r < 0)
        goto out_gc;
    q = malloc(sizeof(*q) + vlen);
    if (!q) {
        r = -ENOMEM;
        goto out_gc;
    }
    q->next = NULL;
    q->len = vlen;
    memcpy(q->data, val, vlen);
    if (sl->qtail)
        sl->qtail->next = q;
    else
        sl->qhead = q;
    sl->qtail = q;
    sl->qlen++;
    store_charge(s, vlen, rdzvd_store_item_cost(vlen));
    if (s->change)
        s->change(s->change_ud, RDZVD_CHANGE_QPUSH, sl->key, sl->klen, q->data, vlen);
    /* One item can satisfy one popper: wake a single registration, oldest first. */
    if (!rdzv_list_empty(&sl->regs))
        store_reg_fire(s, rdzv_container_of(sl->regs.next, struct wait_reg, slot_node));
out_gc:
    store_slot_gc(s, sl);
    return r;
}

int rdzvd_store_queue_pop(struct rdzvd_store *s, const void *key, size_t klen,
                          uint64_t *len_before, uint8_t **ret, size_t *retlen)
{
    struct slot *sl = store_lookup(s, key, klen);
    struct qitem *q;
    uint8_t *out;

    *len_before = sl ? sl->qlen : 0;
    if (!sl || sl->qlen == 0)
        return 0;
    q = sl->qhead;
    out = malloc(q->len ? q->len : 1);
    if (!out)
        return -ENOMEM;
    memcpy(out, q->data, q->len);
    *ret = out;
    *retlen = q->len;
    sl->qhead = q->next;
    if (!sl->qhead)
        sl->qtail = NULL;
    sl->qlen--;
    store_uncharge(s, q->len, rdzvd_store_item_cost(q->len));
    free(q);
    if (s->change)
        s->change(s->change_ud, RDZVD_CHANGE_QPOP, sl->key, sl->klen, NULL, 0);
    store_slot_gc(s, sl);
    return 0;
}

uint64_t rdzvd_store_queue_len(struct rdzvd_store *s, const void *key, size_t klen)
{
    struct slot *sl = store_lookup(s, key, klen);

    return sl ? sl->qlen : 0;
}
