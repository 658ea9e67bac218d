/* SPDX-License-Identifier: Apache-2.0 */
/* storetest.h: what the store's tests share: a store whose waiters count their wakes. */
#pragma once
#include <stdlib.h>

#include "daemon/data/rdzvd-store.h"
#include "../tap.h"

/* Each waiter's ud points at its wake counter. */
static unsigned wakes_total;
static unsigned wake_nregs_seen; /* owner->nregs as the callback saw it */

static inline void count_wake(struct rdzvd_waiter *w, void *ud)
{
    unsigned *n = ud;

    ASSERT_TRUE(w->ud == ud);
    (*n)++;
    wakes_total++;
    wake_nregs_seen = (unsigned)w->nregs;
}

static inline struct rdzvd_store *new_store(const struct rdzv_limits *lim)
{
    struct rdzvd_store *s = NULL;

    wakes_total = 0;
    ASSERT_OK(rdzvd_store_new(lim, count_wake, &s));
    ASSERT_NOT_NULL(s);
    return s;
}
