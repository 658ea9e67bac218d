/* SPDX-License-Identifier: Apache-2.0 */
/* test-store.c: the key-value store, its queues and its wait index (no sockets); the randomized
 * check against a reference model is test-store-model.c. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/rdzv-util.h"
#include "daemon/data/rdzvd-record.h"
#include "daemon/data/rdzvd-store.h"
#include "../tap.h"

#include "storetest.h"

static int set_str(struct rdzvd_store *s, const char *k, const char *v)
{
    return rdzvd_store_set(s, k, strlen(k), v, strlen(v));
}

static void expect_value(struct rdzvd_store *s, const char *k, const char *v)
{
    const uint8_t *val = NULL;
    size_t vlen = 0;

    ASSERT_OK(rdzvd_store_get(s, k, strlen(k), &val, &vlen));
    ASSERT_BYTES_STR(val, vlen, v);
}

static void expect_missing(struct rdzvd_store *s, const char *k)
{
    const uint8_t *val = NULL;
    size_t vlen = 0;

    ASSERT_EQ(rdzvd_store_get(s, k, strlen(k), &val, &vlen), -ENOENT);
    ASSERT_FALSE(rdzvd_store_exists(s, k, strlen(k)));
}

/* Begin, add each key of a NULL-terminated list, end. Returns wait_end's result. */
static int wait_keys(struct rdzvd_store *s, struct rdzvd_waiter *w, const char *const *keys)
{
    ASSERT_OK(rdzvd_store_wait_begin(s, w));
    for (size_t i = 0; keys[i]; i++)
        ASSERT_OK(rdzvd_store_wait_key(s, w, keys[i], strlen(keys[i])));
    return rdzvd_store_wait_end(s, w);
}

static void test_set_get_overwrite(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s = new_store(&lim);
    const uint8_t *val;
    size_t vlen;

    expect_missing(s, "k");
    ASSERT_OK(set_str(s, "k", "v1"));
    expect_value(s, "k", "v1");
    ASSERT_OK(set_str(s, "k", "second value"));
    expect_value(s, "k", "second value");
    ASSERT_EQ(rdzvd_store_num_keys(s), 1);
    ASSERT_TRUE(rdzvd_store_exists(s, "k", 1));

    /* Empty keys and values are ordinary; keys are bytes, NUL included. */
    ASSERT_OK(rdzvd_store_set(s, "", 0, "", 0));
    ASSERT_OK(rdzvd_store_get(s, "", 0, &val, &vlen));
    ASSERT_EQ(vlen, 0);
    ASSERT_OK(rdzvd_store_set(s, "a\0b", 3, "x\0y", 3));
    ASSERT_OK(rdzvd_store_set(s, "a", 1, "A", 1));
    ASSERT_OK(rdzvd_store_get(s, "a\0b", 3, &val, &vlen));
    ASSERT_EQ(vlen, 3);
    ASSERT_MEMEQ(val, "x\0y", 3);
    expect_value(s, "a", "A");
    ASSERT_EQ(rdzvd_store_num_keys(s), 4);
    ASSERT_EQ(rdzvd_store_bytes(s), 1 + 12 + 0 + 0 + 3 + 3 + 1 + 1);
    ASSERT_NULL(rdzvd_store_free(s));
    ASSERT_NULL(rdzvd_store_free(NULL));
}

static void test_many_keys_survive_growth(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s = new_store(&lim);
    char k[32], v[32];

    for (unsigned i = 0; i < 5000; i++) {
        snprintf(k, sizeof(k), "/key/%u", i);
        snprintf(v, sizeof(v), "%u", i * 7);
        ASSERT_OK(set_str(s, k, v));
    }
    ASSERT_EQ(rdzvd_store_num_keys(s), 5000);
    for (unsigned i = 0; i < 5000; i++) {
        snprintf(k, sizeof(k), "/key/%u", i);
        snprintf(v, sizeof(v), "%u", i * 7);
        expect_value(s, k, v);
    }
    for (unsigned i = 0; i < 5000; i += 2) {
        snprintf(k, sizeof(k), "/key/%u", i);
        ASSERT_EQ(rdzvd_store_delete(s, k, strlen(k)), 1);
    }
    ASSERT_EQ(rdzvd_store_num_keys(s), 2500);
    rdzvd_store_free(s);
}

static void test_add(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s = new_store(&lim);
    int64_t n = 12345;

    /* Missing counts as 0; the value is kept as decimal text. */
    ASSERT_OK(rdzvd_store_add(s, "c", 1, 5, &n));
    ASSERT_EQ(n, 5);
    expect_value(s, "c", "5");
    ASSERT_OK(rdzvd_store_add(s, "c", 1, -7, &n));
    ASSERT_EQ(n, -2);
    expect_value(s, "c", "-2");
    ASSERT_OK(rdzvd_store_add(s, "c", 1, 0, &n));
    ASSERT_EQ(n, -2);
    ASSERT_OK(rdzvd_store_add(s, "z", 1, 0, &n));
    ASSERT_EQ(n, 0);
    expect_value(s, "z", "0");

    /* A value written by SET is parsed the same way. */
    ASSERT_OK(set_str(s, "p", "+41"));
    ASSERT_OK(rdzvd_store_add(s, "p", 1, 1, &n));
    ASSERT_EQ(n, 42);
    expect_value(s, "p", "42");

    /* Not decimal: -EINVAL, value and *ret untouched. */
    n = 777;
    ASSERT_OK(set_str(s, "t", "abc"));
    ASSERT_EQ(rdzvd_store_add(s, "t", 1, 1, &n), -EINVAL);
    ASSERT_EQ(n, 777);
    expect_value(s, "t", "abc");
    ASSERT_OK(set_str(s, "t", ""));
    ASSERT_EQ(rdzvd_store_add(s, "t", 1, 1, &n), -EINVAL);
    ASSERT_OK(set_str(s, "t", "12x"));
    ASSERT_EQ(rdzvd_store_add(s, "t", 1, 1, &n), -EINVAL);
    ASSERT_OK(set_str(s, "t", " 1"));
    ASSERT_EQ(rdzvd_store_add(s, "t", 1, 1, &n), -EINVAL);

    /* Overflow either way: -ERANGE, nothing changes. */
    ASSERT_OK(set_str(s, "m", "9223372036854775807"));
    ASSERT_EQ(rdzvd_store_add(s, "m", 1, 1, &n), -ERANGE);
    expect_value(s, "m", "9223372036854775807");
    ASSERT_OK(rdzvd_store_add(s, "m", 1, -1, &n));
    ASSERT_EQ(n, INT64_MAX - 1);
    ASSERT_OK(set_str(s, "m", "-9223372036854775808"));
    ASSERT_EQ(rdzvd_store_add(s, "m", 1, -1, &n), -ERANGE);
    ASSERT_OK(rdzvd_store_add(s, "m", 1, 0, &n));
    ASSERT_EQ(n, INT64_MIN);
    expect_value(s, "m", "-9223372036854775808");
    ASSERT_OK(rdzvd_store_add(s, "big", 3, INT64_MIN, &n));
    ASSERT_EQ(n, INT64_MIN);
    ASSERT_EQ(rdzvd_store_add(s, "big", 3, -1, &n), -ERANGE);
    /* Stored text out of int64 range. */
    ASSERT_OK(set_str(s, "m", "9223372036854775808"));
    ASSERT_EQ(rdzvd_store_add(s, "m", 1, -1, &n), -ERANGE);

    /* A failed ADD on a missing key creates nothing. */
    ASSERT_EQ(rdzvd_store_num_keys(s), 6);
    rdzvd_store_free(s);
}

static void test_compare_set(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s = new_store(&lim);
    const uint8_t *cur = NULL;
    size_t curlen = 0;

    /* Missing + empty expected: store desired and return it. */
    ASSERT_OK(rdzvd_store_compare_set(s, "k", 1, "", 0, "Y2FuaW1hZGFt", 12, &cur, &curlen));
    ASSERT_BYTES_STR(cur, curlen, "Y2FuaW1hZGFt");
    expect_value(s, "k", "Y2FuaW1hZGFt");

    /* Missing + non-empty expected: return expected, store nothing. */
    ASSERT_OK(rdzvd_store_compare_set(s, "m", 1, "old", 3, "new", 3, &cur, &curlen));
    ASSERT_BYTES_STR(cur, curlen, "old");
    expect_missing(s, "m");
    ASSERT_EQ(rdzvd_store_num_keys(s), 1);
    ASSERT_EQ(rdzvd_store_bytes(s), 1 + 12);

    /* Present and matching: replaced; the reply is the new value. */
    ASSERT_OK(rdzvd_store_compare_set(s, "k", 1, "Y2FuaW1hZGFt", 12, "state-1", 7, &cur, &curlen));
    ASSERT_BYTES_STR(cur, curlen, "state-1");
    expect_value(s, "k", "state-1");

    /* Present and not matching: unchanged; the reply is the current value. */
    ASSERT_OK(rdzvd_store_compare_set(s, "k", 1, "state-0", 7, "state-2", 7, &cur, &curlen));
    ASSERT_BYTES_STR(cur, curlen, "state-1");
    expect_value(s, "k", "state-1");
    ASSERT_OK(rdzvd_store_compare_set(s, "k", 1, "", 0, "state-2", 7, &cur, &curlen));
    ASSERT_BYTES_STR(cur, curlen, "state-1");
    ASSERT_OK(rdzvd_store_compare_set(s, "k", 1, "state-1x", 8, "state-2", 7, &cur, &curlen));
    ASSERT_BYTES_STR(cur, curlen, "state-1");

    /* Present with an empty value: an empty expected matches it. */
    ASSERT_OK(set_str(s, "e", ""));
    ASSERT_OK(rdzvd_store_compare_set(s, "e", 1, "", 0, "filled", 6, &cur, &curlen));
    ASSERT_BYTES_STR(cur, curlen, "filled");
    /* Desired may be empty. */
    ASSERT_OK(rdzvd_store_compare_set(s, "e", 1, "filled", 6, "", 0, &cur, &curlen));
    ASSERT_EQ(curlen, 0);
    expect_value(s, "e", "");
    rdzvd_store_free(s);
}

static void test_append(void)
{
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s;

    lim.max_value_len = 8;
    s = new_store(&lim);
    ASSERT_OK(rdzvd_store_append(s, "k", 1, "12345", 5));
    expect_value(s, "k", "12345");
    ASSERT_OK(rdzvd_store_append(s, "k", 1, "", 0));
    ASSERT_OK(rdzvd_store_append(s, "k", 1, "678", 3));
    expect_value(s, "k", "12345678");
    ASSERT_EQ(rdzvd_store_append(s, "k", 1, "9", 1), -EMSGSIZE);
    expect_value(s, "k", "12345678");
    ASSERT_EQ(rdzvd_store_bytes(s), 1 + 8);

    /* Too long from the start: nothing created. */
    ASSERT_EQ(rdzvd_store_append(s, "n", 1, "123456789", 9), -EMSGSIZE);
    expect_missing(s, "n");
    ASSERT_EQ(set_str(s, "n", "123456789"), -EMSGSIZE);
    expect_missing(s, "n");
    ASSERT_EQ(rdzvd_store_num_keys(s), 1);
    ASSERT_EQ(rdzvd_store_bytes(s), 1 + 8);

    /* APPEND creates an empty-valued key too. */
    ASSERT_OK(rdzvd_store_append(s, "e", 1, "", 0));
    expect_value(s, "e", "");
    ASSERT_EQ(rdzvd_store_num_keys(s), 2);
    rdzvd_store_free(s);
}

/* What a watcher of an appended key was told. */
struct append_watch {
    unsigned calls;
    uint8_t type;
    char old[16], nv[16];
};

static void append_watch_cb(struct rdzvd_waiter *w, void *ud, uint8_t type, const uint8_t *key,
                            size_t klen, const uint8_t *old, size_t oldlen, const uint8_t *nv,
                            size_t nvlen)
{
    struct append_watch *aw = w->ud;

    (void)ud;
    (void)key;
    (void)klen;
    aw->calls++;
    aw->type = type;
    snprintf(aw->old, sizeof(aw->old), "%.*s", (int)oldlen, old ? (const char *)old : "");
    snprintf(aw->nv, sizeof(aw->nv), "%.*s", (int)nvlen, nv ? (const char *)nv : "");
}

/* APPEND grows a value in place (no copy of the whole value per APPEND), except for a
 * watched key, whose watchers get the old and the new value; the bytes are charged either way,
 * and the budget holds for APPEND as for SET. */
static void test_append_in_place_and_watched(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store_budget b = {.max = UINT64_MAX};
    struct append_watch aw = {0};
    struct rdzvd_waiter w;
    struct rdzvd_store *s;

    s = new_store(&lim);
    rdzvd_store_set_budget(s, &b, UINT64_MAX);
    rdzvd_store_set_watch_cb(s, append_watch_cb);
    rdzvd_waiter_init(&w, &aw);
    ASSERT_OK(rdzvd_store_append(s, "k", 1, "ab", 2));
    ASSERT_OK(rdzvd_store_append(s, "k", 1, "cd", 2));
    expect_value(s, "k", "abcd");
    ASSERT_EQ(rdzvd_store_bytes(s), 1 + 4);
    ASSERT_EQ(rdzvd_store_held(s), rdzvd_store_key_cost(1) + rdzvd_store_value_cost(4));
    ASSERT_OK(rdzvd_store_watch(s, &w, "k", 1));
    ASSERT_OK(rdzvd_store_append(s, "k", 1, "ef", 2));
    ASSERT_EQ(aw.calls, 1);
    ASSERT_EQ(aw.type, RDZV_WATCH_KEY_UPDATED);
    ASSERT_BYTES_STR((const uint8_t *)aw.old, strlen(aw.old), "abcd");
    ASSERT_BYTES_STR((const uint8_t *)aw.nv, strlen(aw.nv), "abcdef");
    ASSERT_OK(rdzvd_store_watch(s, &w, "n", 1));
    ASSERT_OK(rdzvd_store_append(s, "n", 1, "x", 1));
    ASSERT_EQ(aw.calls, 2);
    ASSERT_EQ(aw.type, RDZV_WATCH_KEY_CREATED);
    ASSERT_BYTES_STR((const uint8_t *)aw.nv, strlen(aw.nv), "x");
    ASSERT_EQ(rdzvd_store_held(s), 2 * rdzvd_store_key_cost(1) + rdzvd_store_value_cost(6) +
                                       rdzvd_store_value_cost(1) + 2 * rdzvd_store_reg_cost());
    rdzvd_store_drop_watches(s, &w);
    ASSERT_EQ(rdzvd_store_bytes(s), 1 + 6 + 1 + 1);
    /* Room for "abcdef" to grow to 24 bytes (a 32-byte heap chunk, as 6 are): 18 more fit, 19
     * do not, and the refused APPEND changes nothing. */
    b.max = 2 * rdzvd_store_key_cost(1) + rdzvd_store_value_cost(24) + rdzvd_store_value_cost(1);
    ASSERT_EQ(rdzvd_store_held(s), b.max);
    ASSERT_EQ(rdzvd_store_append(s, "k", 1, "1234567890123456789", 19), -ENOSPC);
    expect_value(s, "k", "abcdef");
    ASSERT_OK(rdzvd_store_append(s, "k", 1, "123456789012345678", 18));
    expect_value(s, "k", "abcdef123456789012345678");
    ASSERT_EQ(rdzvd_store_bytes(s), 1 + 24 + 1 + 1);
    ASSERT_EQ(rdzvd_store_held(s), b.max);
    ASSERT_EQ(aw.calls, 2);
    rdzvd_store_free(s);
    ASSERT_EQ(b.used, 0);
}

static void test_delete(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s = new_store(&lim);

    ASSERT_OK(set_str(s, "a", "1"));
    ASSERT_OK(set_str(s, "b", "2"));
    ASSERT_EQ(rdzvd_store_delete(s, "a", 1), 1);
    expect_missing(s, "a");
    ASSERT_EQ(rdzvd_store_delete(s, "a", 1), 0);
    ASSERT_EQ(rdzvd_store_delete(s, "never", 5), 0);
    ASSERT_EQ(rdzvd_store_num_keys(s), 1);
    ASSERT_EQ(rdzvd_store_bytes(s), 2);
    /* Re-creating a deleted key works like a fresh one. */
    ASSERT_OK(set_str(s, "a", "3"));
    expect_value(s, "a", "3");
    ASSERT_EQ(rdzvd_store_num_keys(s), 2);
    rdzvd_store_free(s);
}

struct visit {
    unsigned n;
    unsigned stop_at;
    bool seen[16];
};

static int visit_key(const uint8_t *key, size_t klen, void *ud)
{
    struct visit *v = ud;
    unsigned i;

    ASSERT_EQ(klen, 2);
    ASSERT_EQ(key[0], 'k');
    i = (unsigned)(key[1] - 'a');
    ASSERT_TRUE(i < 16);
    ASSERT_FALSE(v->seen[i]);
    v->seen[i] = true;
    v->n++;
    return v->n == v->stop_at ? 42 : 0;
}

static void test_num_keys_and_foreach(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s = new_store(&lim);
    struct rdzvd_waiter w;
    unsigned wakes = 0;
    struct visit v = {0};
    char k[3] = "ka";

    rdzvd_waiter_init(&w, &wakes);
    ASSERT_EQ(rdzvd_store_num_keys(s), 0);
    ASSERT_EQ(rdzvd_store_foreach(s, visit_key, &v), 0);
    ASSERT_EQ(v.n, 0);
    for (unsigned i = 0; i < 10; i++) {
        k[1] = (char)('a' + i);
        ASSERT_OK(set_str(s, k, "v"));
    }
    ASSERT_EQ(rdzvd_store_delete(s, "kc", 2), 1);
    /* Queues and waited-for keys are not keys. */
    ASSERT_OK(rdzvd_store_queue_push(s, "kq", 2, "x", 1));
    ASSERT_EQ(wait_keys(s, &w, (const char *const[]){"kw", NULL}), 0);
    ASSERT_EQ(rdzvd_store_num_keys(s), 9);
    ASSERT_EQ(rdzvd_store_foreach(s, visit_key, &v), 0);
    ASSERT_EQ(v.n, 9);
    for (unsigned i = 0; i < 10; i++)
        ASSERT_EQ(v.seen[i], i != 2);

    /* A non-zero return stops the walk and is passed through. */
    memset(&v, 0, sizeof(v));
    v.stop_at = 3;
    ASSERT_EQ(rdzvd_store_foreach(s, visit_key, &v), 42);
    ASSERT_EQ(v.n, 3);
    ASSERT_EQ(rdzvd_store_cancel_waits(s, &w), 1);
    rdzvd_store_free(s);
}

static void test_store_bytes_limit(void)
{
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s;
    struct rdzvd_waiter w;
    unsigned wakes = 0;
    int64_t n;
    const uint8_t *cur;
    size_t curlen;
    char big[64];
    const uint64_t k1 = rdzvd_store_key_cost(1);

    memset(big, 'v', sizeof(big));
    /* One one-byte key with a 40-byte value (a 48-byte heap chunk, as 33..40 bytes are). */
    lim.max_store_bytes = k1 + rdzvd_store_value_cost(40);
    s = new_store(&lim);
    rdzvd_waiter_init(&w, &wakes);

    ASSERT_OK(rdzvd_store_set(s, "k", 1, big, 40));
    ASSERT_EQ(rdzvd_store_bytes(s), 41);
    ASSERT_EQ(rdzvd_store_held(s), lim.max_store_bytes);
    /* No room for even a new key: nothing is created. */
    ASSERT_EQ(rdzvd_store_set(s, "k2", 2, "", 0), -ENOSPC);
    expect_missing(s, "k2");
    ASSERT_EQ(rdzvd_store_add(s, "n", 1, 1, &n), -ENOSPC);
    ASSERT_EQ(rdzvd_store_append(s, "n", 1, "", 0), -ENOSPC);
    ASSERT_EQ(rdzvd_store_compare_set(s, "n", 1, "", 0, "x", 1, &cur, &curlen), -ENOSPC);
    ASSERT_EQ(rdzvd_store_queue_push(s, "k", 1, "x", 1), -ENOSPC);
    ASSERT_EQ(rdzvd_store_queue_len(s, "k", 1), 0);
    /* Nor for a WAIT on a missing key (the call and its key are held while it waits)... */
    ASSERT_OK(rdzvd_store_wait_begin(s, &w));
    ASSERT_EQ(rdzvd_store_wait_key(s, &w, "n", 1), -ENOSPC);
    ASSERT_EQ(rdzvd_store_watch(s, &w, "k", 1), -ENOSPC);
    /* ...but a WAIT on keys that exist (each TCPStore get's) holds nothing and is answered. */
    ASSERT_OK(rdzvd_store_wait_begin(s, &w));
    ASSERT_OK(rdzvd_store_wait_key(s, &w, "k", 1));
    ASSERT_EQ(rdzvd_store_wait_end(s, &w), 1);
    ASSERT_EQ(rdzvd_store_cancel_waits(s, &w), 0);
    ASSERT_EQ(w.nregs, 0);
    ASSERT_EQ(rdzvd_store_num_keys(s), 1);
    ASSERT_EQ(rdzvd_store_held(s), lim.max_store_bytes);

    /* Overwrites are charged by the difference: 33..40 bytes cost the same, 41 more. */
    ASSERT_OK(rdzvd_store_set(s, "k", 1, big, 33));
    ASSERT_EQ(rdzvd_store_set(s, "k", 1, big, 41), -ENOSPC);
    ASSERT_EQ(rdzvd_store_append(s, "k", 1, big, 8), -ENOSPC);
    ASSERT_OK(rdzvd_store_append(s, "k", 1, big, 7));
    ASSERT_EQ(rdzvd_store_held(s), lim.max_store_bytes);
    ASSERT_OK(rdzvd_store_set(s, "k", 1, big, 1));
    ASSERT_EQ(rdzvd_store_bytes(s), 2);
    ASSERT_EQ(rdzvd_store_held(s), k1 + rdzvd_store_value_cost(1));
    ASSERT_EQ(rdzvd_store_delete(s, "k", 1), 1);
    ASSERT_EQ(rdzvd_store_bytes(s), 0);
    ASSERT_EQ(rdzvd_store_held(s), 0);

    /* Queue items count too, and are given back when popped. */
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, big, 24));
    ASSERT_EQ(rdzvd_store_held(s), k1 + rdzvd_store_item_cost(24));
    ASSERT_TRUE(rdzvd_store_held(s) + rdzvd_store_item_cost(0) > lim.max_store_bytes);
    ASSERT_EQ(rdzvd_store_queue_push(s, "q", 1, "", 0), -ENOSPC);
    {
        uint64_t before = 0;
        uint8_t *item = NULL;
        size_t ilen = 0;

        ASSERT_OK(rdzvd_store_queue_pop(s, "q", 1, &before, &item, &ilen));
        ASSERT_EQ(before, 1);
        ASSERT_EQ(ilen, 24);
        free(item);
    }
    ASSERT_EQ(rdzvd_store_bytes(s), 0);
    ASSERT_EQ(rdzvd_store_held(s), 0);
    rdzvd_store_free(s);
}

/* What a client can make the store hold costs what it holds of the heap: empty queue items
 * (each a heap chunk) and WAIT registrations (each key waited on, each call) fill the budget
 * as values do, and are given back when popped, woken or cancelled. Before, an empty item and
 * a registration cost nothing: 3,000,000 empty items grew rdzvd by 92 MiB under a 64 KiB
 * --max-store-bytes. */
static void test_items_and_waits_are_charged(void)
{
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s;
    struct rdzvd_waiter w;
    unsigned wakes = 0;
    uint64_t items = 0, keys = 0, left;
    char key[16];
    int r;

    lim.max_store_bytes = 65536;
    s = new_store(&lim);
    rdzvd_waiter_init(&w, &wakes);
    while ((r = rdzvd_store_queue_push(s, "q", 1, "", 0)) == 0)
        items++;
    ASSERT_EQ(r, -ENOSPC);
    ASSERT_TRUE(items > 0);
    ASSERT_EQ(items, (65536 - rdzvd_store_key_cost(1)) / rdzvd_store_item_cost(0));
    ASSERT_TRUE(rdzvd_store_held(s) <= lim.max_store_bytes);
    while (items--) {
        uint64_t before;
        uint8_t *item = NULL;
        size_t ilen;

        ASSERT_OK(rdzvd_store_queue_pop(s, "q", 1, &before, &item, &ilen));
        free(item);
    }
    ASSERT_EQ(rdzvd_store_held(s), 0);

    /* One WAIT on ever more missing keys: refused once the keys and registrations fill it. */
    ASSERT_OK(rdzvd_store_wait_begin(s, &w));
    for (r = 0; r == 0; keys++) {
        snprintf(key, sizeof(key), "k%" PRIu64, keys);
        r = rdzvd_store_wait_key(s, &w, key, strlen(key));
    }
    ASSERT_EQ(r, -ENOSPC);
    left = lim.max_store_bytes - rdzvd_store_wait_cost();
    ASSERT_TRUE(keys - 1 <= left / (rdzvd_store_key_cost(2) + rdzvd_store_reg_cost()));
    ASSERT_TRUE(keys - 1 >= left / (rdzvd_store_key_cost(6) + rdzvd_store_reg_cost()));
    /* The refused WAIT is dropped whole, and what it held given back. */
    ASSERT_EQ(w.nregs, 0);
    ASSERT_EQ(rdzvd_store_held(s), 0);
    /* A WAIT that waits holds its keys until it is woken. */
    ASSERT_OK(rdzvd_store_wait_begin(s, &w));
    ASSERT_OK(rdzvd_store_wait_key(s, &w, "a", 1));
    ASSERT_OK(rdzvd_store_wait_end(s, &w));
    ASSERT_EQ(rdzvd_store_held(s), rdzvd_store_wait_cost() + rdzvd_store_reg_cost() +
                                       rdzvd_store_key_cost(1));
    ASSERT_OK(rdzvd_store_set(s, "a", 1, "", 0));
    ASSERT_EQ(wakes, 1);
    ASSERT_EQ(rdzvd_store_held(s), rdzvd_store_key_cost(1) + rdzvd_store_value_cost(0));
    rdzvd_store_free(s);
}

static void pop_expect(struct rdzvd_store *s, const char *k, uint64_t before, const char *item)
{
    uint64_t b = 999;
    uint8_t *got = (uint8_t *)"untouched";
    size_t glen = 9;

    ASSERT_OK(rdzvd_store_queue_pop(s, k, strlen(k), &b, &got, &glen));
    ASSERT_EQ(b, before);
    if (!item) {
        ASSERT_BYTES_STR(got, glen, "untouched");
        return;
    }
    ASSERT_BYTES_STR(got, glen, item);
    free(got);
}

static void test_queue_fifo(void)
{
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s;

    lim.max_queue_items = 3;
    s = new_store(&lim);
    pop_expect(s, "q", 0, NULL);
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "a", 1));
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "", 0));
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "ccc", 3));
    ASSERT_EQ(rdzvd_store_queue_push(s, "q", 1, "d", 1), -ENOSPC);
    ASSERT_EQ(rdzvd_store_queue_len(s, "q", 1), 3);
    ASSERT_TRUE(rdzvd_store_exists(s, "q", 1));

    /* A separate namespace from the map, but the same key can hold both. */
    ASSERT_EQ(rdzvd_store_num_keys(s), 0);
    ASSERT_OK(set_str(s, "q", "kv"));
    expect_value(s, "q", "kv");
    ASSERT_EQ(rdzvd_store_num_keys(s), 1);
    ASSERT_EQ(rdzvd_store_delete(s, "q", 1), 1);
    ASSERT_TRUE(rdzvd_store_exists(s, "q", 1));

    pop_expect(s, "q", 3, "a");
    pop_expect(s, "q", 2, "");
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "e", 1));
    pop_expect(s, "q", 2, "ccc");
    pop_expect(s, "q", 1, "e");
    pop_expect(s, "q", 0, NULL);
    ASSERT_EQ(rdzvd_store_queue_len(s, "q", 1), 0);
    ASSERT_FALSE(rdzvd_store_exists(s, "q", 1));
    ASSERT_EQ(rdzvd_store_queue_len(s, "other", 5), 0);
    ASSERT_EQ(rdzvd_store_bytes(s), 0);
    rdzvd_store_free(s);
}

static void test_queue_push_wakes_one(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s = new_store(&lim);
    struct rdzvd_waiter w[3];
    unsigned wakes[3] = {0};
    const char *const q[] = {"q", NULL};

    for (int i = 0; i < 3; i++) {
        rdzvd_waiter_init(&w[i], &wakes[i]);
        ASSERT_EQ(wait_keys(s, &w[i], q), 0);
    }
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "1", 1));
    ASSERT_EQ(wakes_total, 1);
    ASSERT_EQ(wakes[0], 1);
    /* The queue is not empty now: a new WAIT on it returns at once. */
    ASSERT_EQ(wait_keys(s, &w[0], q), 1);
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "2", 1));
    ASSERT_EQ(wakes_total, 2);
    ASSERT_EQ(wakes[1], 1);
    ASSERT_EQ(wakes[2], 0);
    ASSERT_EQ(w[2].nregs, 1);
    ASSERT_EQ(rdzvd_store_cancel_waits(s, &w[2]), 1);
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "3", 1));
    ASSERT_EQ(wakes_total, 2);
    ASSERT_EQ(rdzvd_store_queue_len(s, "q", 1), 3);
    rdzvd_store_free(s);
}

static void test_wait_present_keys_not_counted(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s = new_store(&lim);
    struct rdzvd_waiter w;
    unsigned wakes = 0;

    rdzvd_waiter_init(&w, &wakes);
    ASSERT_OK(set_str(s, "a", "1"));
    ASSERT_OK(set_str(s, "b", "2"));
    ASSERT_EQ(wait_keys(s, &w, (const char *const[]){"a", "b", "a", NULL}), 1);
    ASSERT_EQ(w.nregs, 0);
    ASSERT_TRUE(rdzv_list_empty(&w.waits));
    /* An empty key list is trivially satisfied. */
    ASSERT_EQ(wait_keys(s, &w, (const char *const[]){NULL}), 1);
    ASSERT_OK(set_str(s, "a", "3"));
    ASSERT_EQ(wakes_total, 0);
    ASSERT_EQ(rdzvd_store_cancel_waits(s, &w), 0);
    rdzvd_store_free(s);
}

static void test_wait_two_missing_fires_once(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s = new_store(&lim);
    struct rdzvd_waiter w;
    unsigned wakes = 0;
    int64_t n;

    rdzvd_waiter_init(&w, &wakes);
    ASSERT_OK(set_str(s, "present", "x"));
    ASSERT_EQ(wait_keys(s, &w, (const char *const[]){"a", "present", "b", NULL}), 0);
    ASSERT_EQ(w.nregs, 2);
    ASSERT_OK(set_str(s, "a", "1"));
    ASSERT_EQ(wakes, 0);
    ASSERT_OK(set_str(s, "a", "2"));
    ASSERT_EQ(wakes, 0);
    ASSERT_OK(set_str(s, "unrelated", "2"));
    ASSERT_EQ(wakes, 0);
    ASSERT_EQ(w.nregs, 1);
    ASSERT_OK(rdzvd_store_add(s, "b", 1, 1, &n));
    ASSERT_EQ(wakes, 1);
    ASSERT_EQ(wake_nregs_seen, 0); /* released before the callback */
    ASSERT_EQ(w.nregs, 0);
    ASSERT_TRUE(rdzv_list_empty(&w.waits));
    ASSERT_OK(set_str(s, "b", "again"));
    ASSERT_EQ(wakes, 1);
    ASSERT_EQ(wakes_total, 1);
    rdzvd_store_free(s);
}

static void test_wait_duplicate_key(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s = new_store(&lim);
    struct rdzvd_waiter w;
    unsigned wakes = 0;

    rdzvd_waiter_init(&w, &wakes);
    ASSERT_EQ(wait_keys(s, &w, (const char *const[]){"k", "k", NULL}), 0);
    ASSERT_OK(set_str(s, "k", "v"));
    ASSERT_EQ(wakes, 1);
    ASSERT_EQ(w.nregs, 0);
    ASSERT_TRUE(rdzv_list_empty(&w.waits));
    rdzvd_store_free(s);
}

static void test_wait_two_owners_same_key(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s = new_store(&lim);
    struct rdzvd_waiter w1, w2;
    unsigned wakes1 = 0, wakes2 = 0;
    const char *const k[] = {"k", NULL};

    rdzvd_waiter_init(&w1, &wakes1);
    rdzvd_waiter_init(&w2, &wakes2);
    ASSERT_EQ(wait_keys(s, &w1, k), 0);
    ASSERT_EQ(wait_keys(s, &w2, k), 0);
    ASSERT_EQ(wait_keys(s, &w1, k), 0); /* a second WAIT from the same owner */
    ASSERT_OK(rdzvd_store_append(s, "k", 1, "v", 1));
    ASSERT_EQ(wakes1, 2);
    ASSERT_EQ(wakes2, 1);
    ASSERT_EQ(wakes_total, 3);
    ASSERT_EQ(w1.nregs + w2.nregs, 0);
    rdzvd_store_free(s);
}

static void test_wait_woken_by_every_write(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s = new_store(&lim);
    struct rdzvd_waiter w;
    unsigned wakes = 0;
    const uint8_t *cur;
    size_t curlen;
    int64_t n;

    rdzvd_waiter_init(&w, &wakes);
    ASSERT_EQ(wait_keys(s, &w, (const char *const[]){"s", "a", "p", "c", "q", NULL}), 0);
    ASSERT_EQ(w.nregs, 5);
    ASSERT_OK(set_str(s, "s", "1"));
    ASSERT_OK(rdzvd_store_add(s, "a", 1, 1, &n));
    ASSERT_OK(rdzvd_store_append(s, "p", 1, "x", 1));
    ASSERT_OK(rdzvd_store_compare_set(s, "c", 1, "", 0, "x", 1, &cur, &curlen));
    ASSERT_EQ(wakes, 0);
    ASSERT_EQ(w.nregs, 1);
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "x", 1));
    ASSERT_EQ(wakes, 1);
    ASSERT_EQ(w.nregs, 0);
    rdzvd_store_free(s);
}

static void test_wait_not_disturbed_by_delete(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s = new_store(&lim);
    struct rdzvd_waiter w;
    unsigned wakes = 0;

    rdzvd_waiter_init(&w, &wakes);
    ASSERT_OK(set_str(s, "a", "1"));
    ASSERT_EQ(wait_keys(s, &w, (const char *const[]){"a", "b", NULL}), 0);
    /* Deleting a key that was present when the wait began does not make it count again. */
    ASSERT_EQ(rdzvd_store_delete(s, "a", 1), 1);
    ASSERT_EQ(rdzvd_store_delete(s, "b", 1), 0);
    ASSERT_EQ(w.nregs, 1);
    ASSERT_EQ(wakes, 0);
    ASSERT_OK(set_str(s, "b", "2"));
    ASSERT_EQ(wakes, 1);

    /* Delete, then wait, then set again: the new waiter is woken. */
    ASSERT_EQ(rdzvd_store_delete(s, "b", 1), 1);
    ASSERT_EQ(wait_keys(s, &w, (const char *const[]){"b", NULL}), 0);
    ASSERT_OK(set_str(s, "b", "3"));
    ASSERT_EQ(wakes, 2);
    ASSERT_EQ(wakes_total, 2);
    rdzvd_store_free(s);
}

static void test_cancel_waits(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s = new_store(&lim);
    struct rdzvd_waiter w1, w2;
    unsigned wakes1 = 0, wakes2 = 0;

    rdzvd_waiter_init(&w1, &wakes1);
    rdzvd_waiter_init(&w2, &wakes2);
    ASSERT_EQ(rdzvd_store_cancel_waits(s, &w1), 0);
    ASSERT_EQ(wait_keys(s, &w1, (const char *const[]){"a", "b", NULL}), 0);
    ASSERT_EQ(wait_keys(s, &w1, (const char *const[]){"c", NULL}), 0);
    ASSERT_EQ(wait_keys(s, &w2, (const char *const[]){"a", NULL}), 0);
    ASSERT_EQ(rdzvd_store_bytes(s), 3); /* slots held only by waiters */
    ASSERT_EQ(rdzvd_store_cancel_waits(s, &w1), 2);
    ASSERT_EQ(w1.nregs, 0);
    ASSERT_TRUE(rdzv_list_empty(&w1.waits));
    ASSERT_EQ(rdzvd_store_bytes(s), 1);
    ASSERT_EQ(rdzvd_store_cancel_waits(s, &w1), 0);
    ASSERT_OK(set_str(s, "b", "1"));
    ASSERT_OK(set_str(s, "c", "1"));
    ASSERT_EQ(wakes_total, 0);
    ASSERT_OK(set_str(s, "a", "1"));
    ASSERT_EQ(wakes1, 0);
    ASSERT_EQ(wakes2, 1);
    ASSERT_EQ(rdzvd_store_num_keys(s), 3);
    rdzvd_store_free(s);
}

/* Past max_wait_keys the wait fails and nothing of it is kept (the header's contract). */
static void test_wait_max_keys(void)
{
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s;
    struct rdzvd_waiter w;
    unsigned wakes = 0;
    int r;

    lim.max_wait_keys = 2;
    s = new_store(&lim);
    rdzvd_waiter_init(&w, &wakes);

    /* Present keys don't count against the limit. */
    ASSERT_OK(set_str(s, "p1", "1"));
    ASSERT_OK(set_str(s, "p2", "1"));
    ASSERT_OK(set_str(s, "p3", "1"));
    ASSERT_EQ(wait_keys(s, &w, (const char *const[]){"p1", "p2", "p3", NULL}), 1);
    ASSERT_EQ(wait_keys(s, &w, (const char *const[]){"a", "p1", "b", NULL}), 0);
    ASSERT_EQ(w.nregs, 2);

    /* The limit is over all of the owner's pending registrations. */
    ASSERT_OK(rdzvd_store_wait_begin(s, &w));
    r = rdzvd_store_wait_key(s, &w, "c", 1);
    ASSERT_EQ(r, -EMSGSIZE);
    ASSERT_EQ(rdzvd_store_cancel_waits(s, &w), 1);
    ASSERT_EQ(w.nregs, 0);

    /* Within one WAIT, as rdzvd-tcpstore-apply.c does it: the third missing key fails, the
     * connection cancels, and nothing is kept. */
    ASSERT_OK(rdzvd_store_wait_begin(s, &w));
    ASSERT_OK(rdzvd_store_wait_key(s, &w, "x", 1));
    ASSERT_OK(rdzvd_store_wait_key(s, &w, "y", 1));
    ASSERT_EQ(rdzvd_store_wait_key(s, &w, "z", 1), -EMSGSIZE);
    ASSERT_EQ(rdzvd_store_cancel_waits(s, &w), 0);
    ASSERT_EQ(w.nregs, 0);
    ASSERT_EQ(rdzvd_store_bytes(s), 9); /* p1..p3 only: the waiters' slots are gone */
    ASSERT_OK(set_str(s, "x", "1"));
    ASSERT_EQ(wakes_total, 0);
    rdzvd_store_free(s);
}

/* rdzvd-store.h: wait_end returns "a negative errno (-EMSGSIZE past max_wait_keys; nothing
 * kept)". A caller that ends the wait after a key was refused must not be left with a partial
 * registration that fires later. */
static void test_wait_end_after_refused_key_keeps_nothing(void)
{
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s;
    struct rdzvd_waiter w;
    unsigned wakes = 0;
    int r;

    lim.max_wait_keys = 2;
    s = new_store(&lim);
    rdzvd_waiter_init(&w, &wakes);
    ASSERT_OK(rdzvd_store_wait_begin(s, &w));
    ASSERT_OK(rdzvd_store_wait_key(s, &w, "x", 1));
    ASSERT_OK(rdzvd_store_wait_key(s, &w, "y", 1));
    r = rdzvd_store_wait_key(s, &w, "z", 1);
    ASSERT_TRUE(r == 0 || r == -EMSGSIZE);
    if (r == 0)
        r = rdzvd_store_wait_end(s, &w);
    else
        ASSERT_TRUE(rdzvd_store_wait_end(s, &w) < 0);
    ASSERT_EQ(r, -EMSGSIZE);
    ASSERT_EQ(w.nregs, 0);
    ASSERT_TRUE(rdzv_list_empty(&w.waits));
    ASSERT_OK(set_str(s, "x", "1"));
    ASSERT_OK(set_str(s, "y", "1"));
    ASSERT_OK(set_str(s, "z", "1"));
    ASSERT_EQ(wakes_total, 0);
    ASSERT_EQ(rdzvd_store_cancel_waits(s, &w), 0);
    rdzvd_store_free(s);
}

static void test_wait_calls_out_of_order(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s = new_store(&lim);
    struct rdzvd_waiter w1, w2;
    unsigned wakes1 = 0, wakes2 = 0;

    rdzvd_waiter_init(&w1, &wakes1);
    rdzvd_waiter_init(&w2, &wakes2);
    ASSERT_EQ(rdzvd_store_wait_key(s, &w1, "k", 1), -EINVAL);
    ASSERT_EQ(rdzvd_store_wait_end(s, &w1), -EINVAL);
    ASSERT_OK(rdzvd_store_wait_begin(s, &w1));
    ASSERT_EQ(rdzvd_store_wait_key(s, &w2, "k", 1), -EINVAL);
    ASSERT_OK(rdzvd_store_wait_key(s, &w1, "k", 1));
    ASSERT_EQ(rdzvd_store_wait_end(s, &w1), 0);
    ASSERT_EQ(w2.nregs, 0);
    ASSERT_EQ(rdzvd_store_cancel_waits(s, &w1), 1);
    rdzvd_store_free(s);
}

/* Freeing the store unhooks the waits of owners that outlive it. */
static void test_free_with_pending_waits(void)
{
    const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s = new_store(&lim);
    struct rdzvd_waiter w;
    unsigned wakes = 0;

    rdzvd_waiter_init(&w, &wakes);
    ASSERT_EQ(wait_keys(s, &w, (const char *const[]){"a", "b", "c", NULL}), 0);
    ASSERT_EQ(wait_keys(s, &w, (const char *const[]){"b", NULL}), 0);
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "x", 1));
    rdzvd_store_free(s);
    ASSERT_EQ(w.nregs, 0);
    ASSERT_TRUE(rdzv_list_empty(&w.waits));
    ASSERT_EQ(wakes, 0);

    /* The owner is reusable with a new store. */
    s = new_store(&lim);
    ASSERT_EQ(wait_keys(s, &w, (const char *const[]){"a", NULL}), 0);
    ASSERT_OK(set_str(s, "a", "1"));
    ASSERT_EQ(wakes, 1);
    rdzvd_store_free(s);
}

/* Watches (PyTorch <= 2.0 WATCH_KEY) count against max_wait_keys with the owner's waits; a
 * connection that closes cancels only its own wait under construction, never another owner's;
 * and freeing the store unhooks the watches of owners that outlive it. */
static void test_watch_limit_and_foreign_building_wait(void)
{
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s;
    struct rdzvd_waiter w1, w2;
    unsigned wakes1 = 0, wakes2 = 0;

    lim.max_wait_keys = 2;
    s = new_store(&lim);
    rdzvd_waiter_init(&w1, &wakes1);
    rdzvd_waiter_init(&w2, &wakes2);
    ASSERT_OK(rdzvd_store_watch(s, &w1, "a", 1));
    ASSERT_OK(rdzvd_store_watch(s, &w1, "b", 1));
    ASSERT_EQ(w1.nregs, 2);
    ASSERT_EQ(rdzvd_store_watch(s, &w1, "c", 1), -EMSGSIZE);
    ASSERT_FALSE(rdzvd_store_exists(s, "c", 1));
    ASSERT_OK(rdzvd_store_wait_begin(s, &w1));
    ASSERT_EQ(rdzvd_store_wait_key(s, &w1, "d", 1), -EMSGSIZE);
    ASSERT_EQ(rdzvd_store_cancel_waits(s, &w1), 0);
    ASSERT_EQ(w1.nregs, 2);

    /* w2 is building a wait when w1 goes away: w2's wait survives and completes. */
    ASSERT_OK(rdzvd_store_wait_begin(s, &w2));
    ASSERT_OK(rdzvd_store_wait_key(s, &w2, "k", 1));
    ASSERT_EQ(rdzvd_store_cancel_waits(s, &w1), 0);
    rdzvd_store_drop_watches(s, &w1);
    ASSERT_EQ(w1.nregs, 0);
    ASSERT_EQ(rdzvd_store_wait_end(s, &w1), -EINVAL); /* not w1's to end */
    ASSERT_EQ(rdzvd_store_wait_end(s, &w2), 0);
    ASSERT_OK(set_str(s, "k", "1"));
    ASSERT_EQ(wakes2, 1);
    ASSERT_EQ(wakes1, 0);

    /* w2 closes in the middle of building one: nothing of it stays. */
    ASSERT_OK(rdzvd_store_wait_begin(s, &w2));
    ASSERT_OK(rdzvd_store_wait_key(s, &w2, "m", 1));
    ASSERT_EQ(rdzvd_store_cancel_waits(s, &w2), 0);
    ASSERT_EQ(w2.nregs, 0);
    ASSERT_OK(set_str(s, "m", "1"));
    ASSERT_EQ(wakes2, 1);

    /* Watches still registered when the store goes: unhooked from their owner. */
    ASSERT_OK(rdzvd_store_watch(s, &w1, "a", 1));
    ASSERT_OK(rdzvd_store_watch(s, &w1, "zz", 2));
    rdzvd_store_free(s);
    ASSERT_TRUE(rdzv_list_empty(&w1.watches));
    ASSERT_EQ(w1.nregs, 0);
}

/* Stores charging one budget share its limit; freeing a store gives its bytes back. */
static void test_shared_budget(void)
{
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    const uint64_t k1 = rdzvd_store_key_cost(1), v20 = rdzvd_store_value_cost(20);
    struct rdzvd_store_budget b = {.max = 2 * k1 + 2 * v20};
    struct rdzvd_store *a, *c;
    char big[32];

    memset(big, 'v', sizeof(big));
    a = new_store(&lim);
    c = new_store(&lim);
    rdzvd_store_set_budget(a, &b, UINT64_MAX);
    rdzvd_store_set_budget(c, &b, UINT64_MAX);
    ASSERT_OK(rdzvd_store_set(a, "k", 1, big, 20));
    ASSERT_OK(rdzvd_store_set(a, "l", 1, big, 20));
    ASSERT_EQ(b.used, b.max);
    /* c alone is far under the default limit, but the budget is shared. */
    ASSERT_EQ(rdzvd_store_set(c, "k", 1, big, 20), -ENOSPC);
    expect_missing(c, "k");
    ASSERT_EQ(rdzvd_store_queue_push(c, "q", 1, big, 11), -ENOSPC);
    ASSERT_EQ(rdzvd_store_delete(a, "l", 1), 1); /* its value and its key given back */
    ASSERT_EQ(b.used, b.max - v20 - k1);
    ASSERT_OK(rdzvd_store_set(c, "k", 1, big, 10));
    ASSERT_EQ(b.used, b.max - v20 + rdzvd_store_value_cost(10));
    ASSERT_EQ(rdzvd_store_room(a).used, b.used);
    ASSERT_EQ(rdzvd_store_room(c).max, b.max);
    rdzvd_store_free(a);
    ASSERT_EQ(b.used, k1 + rdzvd_store_value_cost(10));
    ASSERT_EQ(b.used, rdzvd_store_held(c));
    rdzvd_store_free(c);
    ASSERT_EQ(b.used, 0);
}

/* A store's share bounds what it holds however much the budget it charges has left (rdzvd's
 * main store: half of --max-store-bytes), so a flood of it leaves the other stores room. */
static void test_store_share(void)
{
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    const uint64_t k1 = rdzvd_store_key_cost(1), v20 = rdzvd_store_value_cost(20);
    struct rdzvd_store_budget b = {.max = 4 * (k1 + v20)};
    struct rdzvd_store *main_store, *job;
    struct rdzvd_waiter w;
    unsigned wakes = 0;
    char big[32];

    memset(big, 'v', sizeof(big));
    main_store = new_store(&lim);
    job = new_store(&lim);
    ASSERT_EQ(rdzvd_store_room(job).share, UINT64_MAX);
    rdzvd_store_set_budget(main_store, &b, b.max / 2);
    rdzvd_store_set_budget(job, &b, UINT64_MAX);
    ASSERT_EQ(rdzvd_store_room(main_store).share, b.max / 2);
    ASSERT_OK(rdzvd_store_set(main_store, "a", 1, big, 20));
    ASSERT_OK(rdzvd_store_set(main_store, "b", 1, big, 20));
    ASSERT_EQ(rdzvd_store_held(main_store), b.max / 2);
    /* The budget has half left; the main store none of its share, whatever the request. */
    ASSERT_EQ(rdzvd_store_set(main_store, "c", 1, "", 0), -ENOSPC);
    expect_missing(main_store, "c");
    ASSERT_EQ(rdzvd_store_queue_push(main_store, "a", 1, "", 0), -ENOSPC);
    ASSERT_EQ(rdzvd_store_append(main_store, "a", 1, big, 20), -ENOSPC);
    rdzvd_waiter_init(&w, &wakes);
    ASSERT_OK(rdzvd_store_wait_begin(main_store, &w));
    ASSERT_EQ(rdzvd_store_wait_key(main_store, &w, "z", 1), -ENOSPC);
    ASSERT_EQ(rdzvd_store_cancel_waits(main_store, &w), 0);
    ASSERT_EQ(rdzvd_store_held(main_store), b.max / 2);
    /* What it holds stays; the other store takes the rest of the budget. */
    ASSERT_OK(rdzvd_store_set(job, "a", 1, big, 20));
    ASSERT_OK(rdzvd_store_set(job, "b", 1, big, 20));
    ASSERT_EQ(b.used, b.max);
    ASSERT_EQ(rdzvd_store_set(job, "c", 1, "", 0), -ENOSPC);
    /* A change made already (a journal's record replayed, a Raft entry applied: what an older
     * rdzvd, or the leader, took) is never refused by the share; the share stays. */
    {
        struct rdzvd_record rec = {.table = RDZVD_TABLE_STORE, .what = RDZVD_CHANGE_SET,
                                   .key = (const uint8_t *)"r", .klen = 1,
                                   .val = (const uint8_t *)big, .vlen = 1};

        ASSERT_EQ(rdzvd_store_delete(job, "b", 1), 1);
        ASSERT_OK(rdzvd_record_apply(main_store, &rec));
        ASSERT_TRUE(rdzvd_store_held(main_store) > b.max / 2);
        ASSERT_EQ(rdzvd_store_room(main_store).share, b.max / 2);
        ASSERT_EQ(rdzvd_store_set(main_store, "s", 1, "", 0), -ENOSPC);
        ASSERT_EQ(rdzvd_store_delete(main_store, "r", 1), 1);
        ASSERT_OK(rdzvd_store_set(job, "b", 1, big, 20));
    }
    /* Smaller values within the share are taken again. */
    ASSERT_OK(rdzvd_store_set(main_store, "a", 1, big, 1));
    ASSERT_EQ(rdzvd_store_set(job, "a", 1, big, 30), -ENOSPC); /* the budget: nothing freed */
    ASSERT_OK(rdzvd_store_set(main_store, "a", 1, big, 20));
    rdzvd_store_free(main_store);
    rdzvd_store_free(job);
    ASSERT_EQ(b.used, 0);
}

int main(void)
{
    TEST(test_set_get_overwrite);
    TEST(test_many_keys_survive_growth);
    TEST(test_add);
    TEST(test_compare_set);
    TEST(test_append);
    TEST(test_append_in_place_and_watched);
    TEST(test_delete);
    TEST(test_num_keys_and_foreach);
    TEST(test_store_bytes_limit);
    TEST(test_items_and_waits_are_charged);
    TEST(test_shared_budget);
    TEST(test_store_share);
    TEST(test_queue_fifo);
    TEST(test_queue_push_wakes_one);
    TEST(test_wait_present_keys_not_counted);
    TEST(test_wait_two_missing_fires_once);
    TEST(test_watch_limit_and_foreign_building_wait);
    TEST(test_wait_duplicate_key);
    TEST(test_wait_two_owners_same_key);
    TEST(test_wait_woken_by_every_write);
    TEST(test_wait_not_disturbed_by_delete);
    TEST(test_cancel_waits);
    TEST(test_wait_max_keys);
    TEST(test_wait_calls_out_of_order);
    TEST(test_free_with_pending_waits);
    /* Last: checks a header contract the implementation may not meet yet. */
    TEST(test_wait_end_after_refused_key_keeps_nothing);
    return tap_done();
}
