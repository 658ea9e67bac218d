/* SPDX-License-Identifier: Apache-2.0 */
/* rdzv-list.h: intrusive doubly linked list (O(1) unlink, no allocation). */
#pragma once
#include <stdbool.h>
#include <stddef.h>

struct rdzv_list {
    struct rdzv_list *next, *prev;
};

#define rdzv_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

static inline void rdzv_list_init(struct rdzv_list *h)
{
    h->next = h->prev = h;
}

static inline bool rdzv_list_empty(const struct rdzv_list *h)
{
    return h->next == h;
}

/* Insert n before h, i.e. at the tail when h is the list head. */
static inline void rdzv_list_add_tail(struct rdzv_list *h, struct rdzv_list *n)
{
    n->prev = h->prev;
    n->next = h;
    h->prev->next = n;
    h->prev = n;
}

/* Unlink n and make it a self-linked (empty) node, so a second del is harmless. */
static inline void rdzv_list_del(struct rdzv_list *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->next = n->prev = n;
}

#define rdzv_list_for_each_safe(pos, tmp, head)                                                    \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head);                               \
         (pos) = (tmp), (tmp) = (pos)->next)
