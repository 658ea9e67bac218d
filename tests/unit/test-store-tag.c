/* SPDX-License-Identifier: Apache-2.0 */
/* test-store-tag.c: the store's tagged waits (a store front's TAG_WAIT and TAG_CANCEL). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-util.h"
#include "daemon/data/rdzvd-store.h"
#include "../tap.h"

static int set_str(struct rdzvd_store *s, const char *k, const char *v)
{
    return rdzvd_store_set(s, k, strlen(k), v, strlen(v));
}

static int wait_keys(struct rdzvd_store *s, struct rdzvd_waiter *w, const char *const *keys)
{
    ASSERT_OK(rdzvd_store_wait_begin(s, w));
    for (size_t i = 0; keys[i]; i++)
        ASSERT_OK(rdzvd_store_wait_key(s, w, keys[i], strlen(keys[i])));
    return rdzvd_store_wait_end(s, w);
}

/* A store front's TAG_WAIT: each wait's tag is what rdzvd_store_woken_tag says during its wake;
 * rdzvd_store_cancel_tag drops that tag's waits only, their cost with them. */
static struct rdzvd_store *tag_store;
static uint64_t tags_woken[4];
static unsigned ntags_woken;

static void record_tag(struct rdzvd_waiter *w, void *ud)
{
    (void)w;
    (void)ud;
    if (ntags_woken < 4)
        tags_woken[ntags_woken] = rdzvd_store_woken_tag(tag_store);
    ntags_woken++;
}

static int tag_wait(struct rdzvd_store *s, struct rdzvd_waiter *w, uint64_t tag, const char *key)
{
    ASSERT_OK(rdzvd_store_wait_begin(s, w));
    rdzvd_store_wait_tag(s, tag);
    ASSERT_OK(rdzvd_store_wait_key(s, w, key, strlen(key)));
    return rdzvd_store_wait_end(s, w);
}

static void test_tagged_waits(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_waiter w;
    uint64_t empty;

    ASSERT_OK(rdzvd_store_new(&lim, record_tag, &tag_store));
    empty = rdzvd_store_held(tag_store);
    rdzvd_waiter_init(&w, NULL);
    ASSERT_EQ(tag_wait(tag_store, &w, 7, "a"), 0);
    ASSERT_EQ(tag_wait(tag_store, &w, 9, "b"), 0);
    ASSERT_EQ(tag_wait(tag_store, &w, 8, "a"), 0);
    ASSERT_EQ(wait_keys(tag_store, &w, (const char *const[]){"b", NULL}), 0); /* untagged */
    ASSERT_EQ(w.nregs, 4);
    ASSERT_EQ(rdzvd_store_cancel_tag(tag_store, &w, 8), 1);
    ASSERT_EQ(rdzvd_store_cancel_tag(tag_store, &w, 8), 0);
    ASSERT_EQ(rdzvd_store_cancel_tag(tag_store, &w, 5), 0);
    ASSERT_EQ(w.nregs, 3);
    ASSERT_OK(set_str(tag_store, "a", "1"));
    ASSERT_EQ(ntags_woken, 1);
    ASSERT_EQ(tags_woken[0], 7);
    ASSERT_OK(set_str(tag_store, "b", "1"));
    ASSERT_EQ(ntags_woken, 3);
    ASSERT_EQ(tags_woken[1], 9); /* in wait order: the tagged one first */
    ASSERT_EQ(tags_woken[2], 0);
    ASSERT_EQ(w.nregs, 0);
    /* A present key: answered at once, nothing kept, no wake. */
    ASSERT_EQ(tag_wait(tag_store, &w, 3, "a"), 1);
    ASSERT_EQ(ntags_woken, 3);
    /* A cancelled tag's cost is given back with it. */
    ASSERT_EQ(rdzvd_store_delete(tag_store, "a", 1), 1);
    ASSERT_EQ(rdzvd_store_delete(tag_store, "b", 1), 1);
    ASSERT_EQ(rdzvd_store_held(tag_store), empty);
    ASSERT_EQ(tag_wait(tag_store, &w, 4, "c"), 0);
    ASSERT_TRUE(rdzvd_store_held(tag_store) > empty);
    ASSERT_EQ(rdzvd_store_cancel_tag(tag_store, &w, 4), 1);
    ASSERT_EQ(rdzvd_store_held(tag_store), empty);
    rdzvd_store_free(tag_store);
}

int main(void)
{
    TEST(test_tagged_waits);
    return tap_done();
}
