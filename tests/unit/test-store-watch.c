/* SPDX-License-Identifier: Apache-2.0 */
/* test-store-watch.c: the store's WATCH_KEY registrations (PyTorch <= 2.0): one a connection
 * and key, whatever the two lists' lengths. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "daemon/data/rdzvd-store.h"
#include "../tap.h"

#include "storetest.h"

static int set_str(struct rdzvd_store *s, const char *k, const char *v)
{
    return rdzvd_store_set(s, k, strlen(k), v, strlen(v));
}

/* Each watcher's ud counts its notifications. */
static void count_watch(struct rdzvd_waiter *w, void *ud, uint8_t type, const uint8_t *key,
                        size_t klen, const uint8_t *old, size_t oldlen, const uint8_t *nv,
                        size_t nvlen)
{
    (void)ud, (void)type, (void)key, (void)klen, (void)old, (void)oldlen, (void)nv, (void)nvlen;
    (*(unsigned *)w->ud)++;
}

/* A key watched again on one connection is watched once: one notification a change, one
 * registration charged and counted against max_wait_keys, whichever list is the longer (the
 * key's watchers or the connection's watches). */
static void test_watch_once_a_connection_and_key(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store_budget b = {.max = UINT64_MAX};
    unsigned aw = 0, other = 0;
    struct rdzvd_waiter w, w2;
    struct rdzvd_store *s;
    char key[16];

    s = new_store(&lim);
    rdzvd_store_set_budget(s, &b, UINT64_MAX);
    rdzvd_store_set_watch_cb(s, count_watch);
    rdzvd_waiter_init(&w, &aw);
    rdzvd_waiter_init(&w2, &other);
    for (int i = 0; i < 50; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        ASSERT_OK(rdzvd_store_watch(s, &w, key, strlen(key)));
    }
    ASSERT_OK(rdzvd_store_watch(s, &w2, "k7", 2));
    for (int i = 0; i < 2000; i++)
        ASSERT_OK(rdzvd_store_watch(s, &w, "k7", 2));
    ASSERT_EQ(w.nregs, 50);
    ASSERT_EQ(w2.nregs, 1);
    /* k0..k9 and k10..k49, no value yet; 51 registrations */
    ASSERT_EQ(rdzvd_store_held(s), 10 * rdzvd_store_key_cost(2) + 40 * rdzvd_store_key_cost(3) +
                                       51 * rdzvd_store_reg_cost());
    ASSERT_OK(set_str(s, "k7", "v"));
    ASSERT_EQ(aw, 1);
    ASSERT_EQ(other, 1);
    rdzvd_store_drop_watches(s, &w);
    ASSERT_OK(set_str(s, "k7", "w"));
    ASSERT_EQ(aw, 1);
    ASSERT_EQ(other, 2);
    rdzvd_store_drop_watches(s, &w2);
    rdzvd_store_free(s);
    ASSERT_EQ(b.used, 0);
}

int main(void)
{
    TEST(test_watch_once_a_connection_and_key);
    return tap_done();
}
