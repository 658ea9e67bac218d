/* SPDX-License-Identifier: Apache-2.0 */
/* test-journal-gate.c: a store whose changes are held a while (rdzvd_store_change_held: the job
 * machine's step keeps the job table's records until its Ready is carried out), journaled. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rdzv-util.h"
#include "daemon/data/rdzvd-journal.h"
#include "daemon/data/rdzvd-store.h"
#include "../tap.h"

static const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;

/* The changes held: up to 4, as a step holds them, until passed on. */
struct held {
    struct rdzvd_store *s;
    unsigned n;
    struct {
        enum rdzvd_change what;
        char key[8], *val;
        size_t klen, vlen;
    } c[4];
};

static void hold(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                 const uint8_t *val, size_t vlen)
{
    struct held *h = ud;

    ASSERT_TRUE(h->n < 4 && klen <= 8);
    h->c[h->n].what = what;
    memcpy(h->c[h->n].key, key, h->c[h->n].klen = klen);
    ASSERT_NOT_NULL(h->c[h->n].val = malloc(vlen + 1));
    memcpy(h->c[h->n].val, val, h->c[h->n].vlen = vlen);
    h->n++;
}

/* One change, a SET or an APPEND of key, made held and noted in h. */
struct change {
    enum rdzvd_change what;
    const char *key;
    const void *val;
    size_t vlen;
};

static int make(struct rdzvd_store *s, void *ud)
{
    const struct change *c = ud;
    size_t klen = strlen(c->key);
    int r = c->what == RDZVD_CHANGE_SET ? rdzvd_store_set(s, c->key, klen, c->val, c->vlen)
                                        : rdzvd_store_append(s, c->key, klen, c->val, c->vlen);

    return r < 0 ? r : 0;
}

static int change_held(struct held *h, enum rdzvd_change what, const char *key, const void *val,
                       size_t vlen)
{
    struct change c = {what, key, val, vlen};
    int r = rdzvd_store_change_held(h->s, make, &c);

    if (r == 0)
        hold(h, what, (const uint8_t *)key, strlen(key), val, vlen);
    return r;
}

static void pass_all(struct held *h)
{
    for (unsigned i = 0; i < h->n; i++)
        rdzvd_store_pass_change(h->s, h->c[i].what, (const uint8_t *)h->c[i].key, h->c[i].klen,
                                (const uint8_t *)h->c[i].val, h->c[i].vlen);
    for (unsigned i = 0; i < h->n; i++)
        free(h->c[i].val);
    h->n = 0;
}

/* The journal is due to compact when the first of two held APPENDs is passed on: the store is
 * ahead of it then (it holds the second), so it waits. A snapshot taken there would hold the
 * second APPEND, and the record that follows it would add it again at replay ("abb"). */
static void test_no_snapshot_while_changes_held(void)
{
    char dir[] = "/tmp/rdzv-gate-XXXXXX";
    static char big[8192];
    struct rdzvd_journal *j;
    struct rdzvd_store *s;
    struct held h = {0};
    const uint8_t *v;
    size_t vlen;
    int fd;

    ASSERT_NOT_NULL(mkdtemp(dir));
    ASSERT_TRUE((fd = open(dir, O_RDONLY | O_DIRECTORY)) >= 0);
    ASSERT_OK(rdzvd_store_new(&lim, NULL, &s));
    ASSERT_OK(rdzvd_journal_open(NULL, fd, dir, "gate", RDZVD_FSYNC_NO, s, &j));
    memset(big, 'x', sizeof(big));
    ASSERT_OK(rdzvd_store_append(s, "k", 1, "a", 1));
    /* Just under the size that compacts: one key rewritten, so its live size stays small. */
    while (rdzvd_journal_stats(j)->size + sizeof(big) / 2 + 64 < RDZVD_JOURNAL_COMPACT_MIN)
        ASSERT_OK(rdzvd_store_set(s, "big", 3, big, sizeof(big) / 2));
    h.s = s;
    ASSERT_OK(change_held(&h, RDZVD_CHANGE_SET, "big", big, sizeof(big))); /* past the size */
    ASSERT_OK(change_held(&h, RDZVD_CHANGE_APPEND, "k", "b", 1));
    ASSERT_EQ(rdzvd_store_changes_held(s), 2);
    pass_all(&h);
    ASSERT_EQ(rdzvd_store_changes_held(s), 0);
    ASSERT_EQ(rdzvd_journal_stats(j)->compactions, 1); /* once both were written */
    ASSERT_FALSE(rdzvd_journal_failed(j));
    rdzvd_journal_close(j, false);
    rdzvd_store_free(s);
    /* What the disk holds. */
    ASSERT_OK(rdzvd_store_new(&lim, NULL, &s));
    ASSERT_OK(rdzvd_journal_open(NULL, fd, dir, "gate", RDZVD_FSYNC_NO, s, &j));
    ASSERT_OK(rdzvd_store_get(s, "k", 1, &v, &vlen));
    ASSERT_BYTES_STR(v, vlen, "ab");
    rdzvd_journal_close(j, true);
    rdzvd_store_free(s);
    close(fd);
    ASSERT_OK(rmdir(dir));
}

int main(void)
{
    TEST(test_no_snapshot_while_changes_held);
    return tap_done();
}
