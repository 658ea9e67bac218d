/* SPDX-License-Identifier: Apache-2.0 */
/* agent-front-wait.c: the store front's WAITs, a TAG_WAIT on the front's connection per key list
 * waited on (agent-front-wait.h). */
#include "agent/front/agent-front-wait.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-buf.h"
#include "common/rdzv-util.h"
#include "proto/rdzv-proto.h"
#include "proto/rdzv-tcpstore.h"

struct agent_front_wait {
    struct rdzv_list node; /* ws->list */
    struct agent_front_waits *ws;
    uint64_t tag;
    struct rdzv_list waiters;
    bool counting; /* a QUEUE_LEN of its key asked, not answered: kept until it is */
    bool solo;     /* one waiter's own (a queue's key): never shared */
    bool answered; /* woken (or cancelled): no longer on the store */
    bool telling;  /* its waiters being told: freed by the teller, not by the last one's drop */
    size_t n;
    uint8_t body[]; /* the key list: u64 count, then the keys (a WAIT's body) */
};

/* A key seen holding a queue (QUEUE_* through this front, or a shared wait's QUEUE_LEN): its
 * WAITs are not shared (QUEUE_KEYS at most, the oldest forgotten first). */
#define QUEUE_KEYS 256
struct queue_key {
    struct rdzv_list node; /* ws->queue_keys */
    size_t len;
    uint8_t key[];
};

static struct queue_key *queue_key_find(struct agent_front_waits *ws, const uint8_t *key,
                                        size_t len)
{
    for (struct rdzv_list *pos = ws->queue_keys.next; pos != &ws->queue_keys; pos = pos->next) {
        struct queue_key *q = rdzv_container_of(pos, struct queue_key, node);

        if (q->len == len && (len == 0 || memcmp(q->key, key, len) == 0))
            return q;
    }
    return NULL;
}

void agent_front_waits_queue_seen(struct agent_front_waits *ws, const uint8_t *key, size_t len)
{
    struct queue_key *q;

    if (queue_key_find(ws, key, len))
        return;
    if (ws->nqueue_keys >= QUEUE_KEYS) {
        q = rdzv_container_of(ws->queue_keys.next, struct queue_key, node);
        rdzv_list_del(&q->node);
        free(q);
        ws->nqueue_keys--;
    }
    q = malloc(sizeof(*q) + len);
    if (!q)
        return; /* not known: its waits shared, as before */
    q->len = len;
    memcpy(q->key, key, len);
    rdzv_list_add_tail(&ws->queue_keys, &q->node);
    ws->nqueue_keys++;
}

/* Whether a WAIT of body[0..n) may share: not the one key of a queue. */
static bool may_share(struct agent_front_waits *ws, const uint8_t *body, size_t n)
{
    if (n < 16 || rdzv_get_u64(body) != 1 || rdzv_get_u64(body + 8) != n - 16)
        return true;
    return !queue_key_find(ws, body + 16, n - 16);
}

static void wait_free(struct agent_front_wait *w)
{
    rdzv_list_del(&w->node);
    w->ws->n--;
    free(w);
}

/* Nobody waits on w: cancelled on the store unless it was answered, and freed unless its count
 * is still to come. */
static void wait_left(struct agent_front_wait *w)
{
    struct agent_front_waits *ws = w->ws;

    if (!w->answered) {
        uint8_t frame[1 + 8 + 8];

        frame[0] = (uint8_t)rdzv_op_to_wire(RDZV_DIALECT_FRONT, RDZV_OP_TAG_CANCEL);
        rdzv_set_u64(frame + 1, 8);
        rdzv_set_u64(frame + 9, w->tag);
        ws->send(frame, sizeof(frame), ws->ud);
        ws->cancels++;
        w->answered = true; /* a woken frame that crosses the cancel finds no tag */
    }
    if (!w->counting && !w->telling)
        wait_free(w);
}

/* The first n waiters are told (all when n is 0). */
static void wake(struct agent_front_wait *w, uint64_t n)
{
    /* The first each time: telling one may drop others (its connection closed). */
    for (uint64_t i = 0; (!n || i < n) && !rdzv_list_empty(&w->waiters); i++) {
        struct agent_front_waiter *wt =
            rdzv_container_of(w->waiters.next, struct agent_front_waiter, wnode);

        rdzv_list_del(&wt->wnode);
        wt->w = NULL;
        w->ws->woken(wt, w->ws->ud);
    }
}

/* A new wait on the key list body[0..n), sent: 0 (*ret set) or a negative errno. */
static int wait_open(struct agent_front_waits *ws, const uint8_t *body, size_t n,
                     struct agent_front_wait **ret)
{
    struct agent_front_wait *w;
    struct rdzv_buf frame = {0};
    uint8_t tag[8];
    int r;

    if (ws->n >= ws->max)
        return -EMLINK;
    if (n < 8 || !(w = calloc(1, sizeof(*w) + n)))
        return n < 8 ? -EINVAL : -ENOMEM;
    w->ws = ws;
    w->tag = ws->next_tag++;
    w->n = n;
    memcpy(w->body, body, n);
    rdzv_list_init(&w->waiters);
    /* TAG_WAIT: its count one more than the WAIT's, the tag first, then the WAIT's keys. */
    rdzv_set_u64(tag, w->tag);
    r = rdzv_enc_op(&frame, RDZV_DIALECT_FRONT, RDZV_OP_TAG_WAIT);
    if (r == 0)
        r = rdzv_buf_put_u64(&frame, rdzv_get_u64(body) + 1);
    if (r == 0)
        r = rdzv_buf_put_str(&frame, tag, sizeof(tag));
    if (r == 0)
        r = rdzv_buf_put(&frame, body + 8, n - 8);
    if (r < 0) {
        rdzv_buf_free(&frame);
        free(w);
        return r;
    }
    ws->send(rdzv_buf_head(&frame), rdzv_buf_avail(&frame), ws->ud);
    rdzv_buf_free(&frame);
    rdzv_list_add_tail(&ws->list, &w->node);
    ws->n++;
    ws->sent++;
    *ret = w;
    return 0;
}

void agent_front_waits_init(struct agent_front_waits *ws)
{
    rdzv_list_init(&ws->list);
    rdzv_list_init(&ws->queue_keys);
    ws->n = ws->nqueue_keys = 0;
    ws->next_tag = 1;
    ws->sent = ws->cancels = 0;
}

/* wt on the open wait of body[0..n) (with share), or on a new one. */
static int wait_add(struct agent_front_waits *ws, struct agent_front_waiter *wt,
                    const uint8_t *body, size_t n, bool share)
{
    struct agent_front_wait *w = NULL;
    struct rdzv_list *pos;
    int r;

    for (pos = ws->list.next; share && pos != &ws->list && !w; pos = pos->next) {
        struct agent_front_wait *x = rdzv_container_of(pos, struct agent_front_wait, node);

        if (!x->answered && !x->solo && x->n == n && memcmp(x->body, body, n) == 0)
            w = x;
    }
    if (!w && (r = wait_open(ws, body, n, &w)) < 0)
        return r;
    w->solo = !share;
    wt->w = w;
    rdzv_list_add_tail(&w->waiters, &wt->wnode);
    return 0;
}

int agent_front_wait_add(struct agent_front_waits *ws, struct agent_front_waiter *wt,
                         const uint8_t *body, size_t n)
{
    return wait_add(ws, wt, body, n, may_share(ws, body, n));
}

void agent_front_waiter_drop(struct agent_front_waiter *wt)
{
    struct agent_front_wait *w = wt->w;

    rdzv_list_del(&wt->wnode);
    wt->w = NULL;
    if (w && rdzv_list_empty(&w->waiters))
        wait_left(w);
}

/* The store answered: the keys are there. Several workers waiting on one key may be popping a
 * queue, whose every item wakes one waiter on rdzvd (rdzvd-store.c): before telling them, the
 * front asks the queue's length, before any of their QUEUE_POPs can come; a key with no queue
 * (0) tells them all, n items tell n, and the rest wait again. */
void agent_front_waits_woken(struct agent_front_waits *ws, uint64_t tag)
{
    struct agent_front_wait *w = NULL;

    for (struct rdzv_list *pos = ws->list.next; pos != &ws->list && !w; pos = pos->next) {
        struct agent_front_wait *x = rdzv_container_of(pos, struct agent_front_wait, node);

        if (x->tag == tag && !x->answered)
            w = x;
    }
    if (!w)
        return; /* a tag cancelled since: the frame crossed its TAG_CANCEL */
    w->answered = true;
    /* one waiter, or a list of several keys (a queue is popped after a WAIT of its key) */
    if (w->waiters.next == w->waiters.prev || rdzv_get_u64(w->body) != 1) {
        w->telling = true;
        wake(w, 0);
        wait_free(w);
        return;
    }
    w->counting = true;
    ws->count(w, w->body + 16, w->n - 16, ws->ud);
}

void agent_front_wait_counted(struct agent_front_wait *w, int64_t n)
{
    struct agent_front_waits *ws = w->ws;

    w->counting = false;
    w->telling = true;
    if (n <= 0) { /* no queue (or the store lost): the key is there for all */
        if (n == 0)
            wake(w, 0);
        wait_free(w);
        return;
    }
    /* A queue: its n items wake n waiters; the others wait each on its own from now on (their
     * TAG_WAITs come to the store after this push: one that finds an item not yet popped by
     * those woken is answered at once, which rdzvd would not do: docs/design/store-front.md). */
    agent_front_waits_queue_seen(ws, w->body + 16, w->n - 16);
    wake(w, (uint64_t)n);
    while (!rdzv_list_empty(&w->waiters)) {
        struct agent_front_waiter *wt =
            rdzv_container_of(w->waiters.next, struct agent_front_waiter, wnode);

        rdzv_list_del(&wt->wnode);
        wt->w = NULL;
        if (wait_add(ws, wt, w->body, w->n, false) < 0)
            ws->woken(wt, ws->ud); /* no room for its own: told, as the others */
    }
    wait_free(w);
}

void agent_front_waits_free(struct agent_front_waits *ws)
{
    while (!rdzv_list_empty(&ws->list)) {
        struct agent_front_wait *w =
            rdzv_container_of(ws->list.next, struct agent_front_wait, node);
        struct rdzv_list *pos, *tmp;

        rdzv_list_for_each_safe(pos, tmp, &w->waiters)
        {
            struct agent_front_waiter *wt =
                rdzv_container_of(pos, struct agent_front_waiter, wnode);

            rdzv_list_del(&wt->wnode);
            wt->w = NULL;
        }
        wait_free(w);
    }
    while (!rdzv_list_empty(&ws->queue_keys)) {
        struct queue_key *q = rdzv_container_of(ws->queue_keys.next, struct queue_key, node);

        rdzv_list_del(&q->node);
        free(q);
    }
    ws->nqueue_keys = 0;
}

bool agent_front_wait_over(unsigned nlists, uint64_t keys_held, uint64_t keys,
                           uint64_t max_wait_keys, unsigned max_conns, char *why, size_t len)
{
    uint64_t share = max_wait_keys / (max_conns ? max_conns : 1);

    share = share < 64 ? 64 : share;
    if (nlists >= AGENT_FRONT_MAX_WAITS)
        snprintf(why, len, "more than %u key lists waited on at once on one connection",
                 AGENT_FRONT_MAX_WAITS);
    else if (keys > share || keys_held > share - keys)
        snprintf(why, len, "more than %" PRIu64 " keys waited on at once on one connection (its "
                 "share of the node's)", share);
    else
        return false;
    return true;
}
