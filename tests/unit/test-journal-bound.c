/* SPDX-License-Identifier: Apache-2.0 */
/* test-journal-bound.c: a store's journal bounded on disk (rdzvd_journal_bound): at most its
 * store's share of the budget plus as much again, and never into the state directory's reserve
 * for the job table (rdzvd-disk.h). A change past either is refused with nothing changed, deletes
 * and pops give the room back, and what was kept replays. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/data/rdzvd-disk.h"
#include "daemon/data/rdzvd-journal.h"
#include "daemon/data/rdzvd-store.h"
#include "../tap.h"

#define MIB (1u << 20)

static char dir[256];
static int dirfd_;

static void no_wake(struct rdzvd_waiter *w, void *ud)
{
    (void)w;
    (void)ud;
}

static struct rdzvd_store *new_store(const struct rdzv_limits *lim)
{
    struct rdzvd_store *s = NULL;

    ASSERT_OK(rdzvd_store_new(lim, no_wake, &s));
    return s;
}

static struct rdzvd_journal *jopen(const char *name, struct rdzvd_store *s)
{
    struct rdzvd_journal *j = NULL;

    ASSERT_OK(rdzvd_journal_open(NULL, dirfd_, dir, name, RDZVD_FSYNC_NO, s, &j));
    return j;
}

static uint64_t file_size(const char *name)
{
    char p[512];
    struct stat st;

    snprintf(p, sizeof(p), "%s/%s.journal", dir, name);
    ASSERT_OK(stat(p, &st));
    return (uint64_t)st.st_size;
}

static void remove_journal(const char *name)
{
    ASSERT_OK(rdzvd_journal_unlink(dirfd_, name));
}

/* The bound is the share plus as much again (1 MiB at least); queue items under a long key cost
 * far more journal than memory, so the journal's bound refuses them before the memory does. */
static void test_bound_refuses_and_pops_give_room_back(void)
{
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s, *r;
    struct rdzvd_journal *j;
    static char key[4096];
    uint64_t pushed = 0, len_before;
    uint8_t *item;
    size_t ilen;
    int rc;

    lim.max_store_bytes = 1 * MIB;
    s = new_store(&lim);
    j = jopen("bound", s);
    ASSERT_EQ(rdzvd_journal_max_bytes(j), 2ull * MIB);
    rdzvd_journal_bound(j, NULL);
    memset(key, 'k', sizeof(key));
    while ((rc = rdzvd_store_queue_push(s, key, sizeof(key), "", 0)) == 0) {
        pushed++;
        ASSERT_LE(rdzvd_journal_stats(j)->size, 2ull * MIB);
    }
    ASSERT_EQ(rc, -EDQUOT);
    ASSERT_EQ(rdzvd_store_queue_len(s, key, sizeof(key)), pushed);
    ASSERT_TRUE(pushed > 400 && pushed < 520);
    ASSERT_EQ(file_size("bound"), rdzvd_journal_stats(j)->size);
    /* A SET whose record passes the bound is refused too, nothing changed. */
    ASSERT_EQ(rdzvd_store_set(s, "v", 1, key, sizeof(key)), -EDQUOT);
    ASSERT_EQ(rdzvd_store_num_keys(s), 0);
    /* Pops are never refused; the journal stays within its bound, and has room again. */
    for (uint64_t i = 0; i < pushed / 2; i++) {
        ASSERT_OK(rdzvd_store_queue_pop(s, key, sizeof(key), &len_before, &item, &ilen));
        free(item);
        ASSERT_LE(rdzvd_journal_stats(j)->size, 2ull * MIB);
    }
    ASSERT_OK(rdzvd_store_set(s, "v", 1, key, sizeof(key)));
    ASSERT_FALSE(rdzvd_journal_failed(j));
    rdzvd_journal_close(j, false);
    r = new_store(&lim);
    j = jopen("bound", r);
    ASSERT_EQ(rdzvd_store_queue_len(r, key, sizeof(key)), pushed - pushed / 2);
    ASSERT_EQ(rdzvd_store_num_keys(r), 1);
    rdzvd_journal_close(j, false);
    rdzvd_store_free(s);
    rdzvd_store_free(r);
    remove_journal("bound");
}

/* A share of a shared budget bounds the journal by that share. */
static void test_bound_follows_the_share(void)
{
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store_budget b = {.max = 64ull * MIB};
    struct rdzvd_store *s = new_store(&lim);
    struct rdzvd_journal *j = jopen("share", s);

    rdzvd_store_set_budget(s, &b, 16ull * MIB);
    ASSERT_EQ(rdzvd_journal_max_bytes(j), 32ull * MIB);
    rdzvd_store_set_budget(s, &b, UINT64_MAX);
    ASSERT_EQ(rdzvd_journal_max_bytes(j), 128ull * MIB);
    rdzvd_store_set_budget(s, &b, 256u << 10);
    ASSERT_EQ(rdzvd_journal_max_bytes(j), (256u << 10) + MIB);
    rdzvd_journal_close(j, true);
    rdzvd_store_free(s);
}

/* A --max-store-bytes of 2^63 or more: the share plus as much again saturates instead of
 * wrapping to 0, which refused every record of a job's store. */
static void test_huge_budget_saturates(void)
{
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store_budget b = {.max = UINT64_MAX / 2 + 1};
    struct rdzvd_store *s = new_store(&lim);
    struct rdzvd_journal *j = jopen("huge", s);

    rdzvd_store_set_budget(s, &b, UINT64_MAX);
    ASSERT_EQ(rdzvd_journal_max_bytes(j), UINT64_MAX);
    b.max = UINT64_MAX;
    ASSERT_EQ(rdzvd_journal_max_bytes(j), UINT64_MAX);
    rdzvd_journal_bound(j, NULL);
    ASSERT_OK(rdzvd_store_set(s, "k", 1, "v", 1));
    rdzvd_journal_close(j, true);
    rdzvd_store_free(s);
}

/* The reserve is the larger of its floor and 4 times the job table's journal. */
static void test_reserve_follows_the_job_table(void)
{
    struct rdzvd_disk d;
    uint64_t table = 1 * MIB;

    rdzvd_disk_init(&d, dirfd_, dir, 8 * MIB);
    ASSERT_EQ(rdzvd_disk_reserve(&d), 8ull * MIB);
    d.table_bytes = &table;
    ASSERT_EQ(rdzvd_disk_reserve(&d), 8ull * MIB);
    table = 3 * MIB;
    ASSERT_EQ(rdzvd_disk_reserve(&d), 12ull * MIB);
    ASSERT_OK(rdzvd_disk_take(NULL, UINT64_MAX, 0));
}

#define VAL_LEN (256u << 10)
static char val[VAL_LEN];

/* SET values of VAL_LEN bytes under k0, k1, ... until one is refused (or max of them): how many
 * were stored; *rc the refusal's error. */
static int fill(struct rdzvd_store *s, int max, int *rc)
{
    char k[32];
    int n;

    memset(val, 'v', sizeof(val));
    *rc = 0;
    for (n = 0; n < max; n++) {
        snprintf(k, sizeof(k), "k%d", n);
        *rc = rdzvd_store_set(s, k, strlen(k), val, sizeof(val));
        if (*rc < 0)
            break;
    }
    return n;
}

/* A disk of 16 MiB holding the test directory's files alone (whatever else writes to the real
 * one), its reserve 8 MiB: the stores have 8 MiB. */
static int sim_free(int fd, uint64_t *ret)
{
    uint64_t used = 0;
    struct dirent *de;
    DIR *dp = fdopendir(dup(fd));

    ASSERT_NOT_NULL(dp);
    rewinddir(dp); /* the descriptor shares its offset with fd's */
    while ((de = readdir(dp))) {
        struct stat st;

        if (fstatat(fd, de->d_name, &st, 0) == 0 && S_ISREG(st.st_mode))
            used += (uint64_t)st.st_size;
    }
    closedir(dp);
    *ret = used < 16 * MIB ? 16 * MIB - used : 0;
    return 0;
}

static void disk_with_8mib(struct rdzvd_disk *d)
{
    rdzvd_disk_init(d, dirfd_, dir, 8 * MIB);
    d->free_fn = sim_free;
}

/* Records stop short of the reserve (set here to all but 8 MiB of the free space): refused with
 * nothing changed; deleting the keys gives the room back (the journal compacts). */
static void test_disk_reserve_refuses_and_deletes_give_room_back(void)
{
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *s = new_store(&lim);
    struct rdzvd_journal *j = jopen("disk", s);
    struct rdzvd_disk d;
    int n, rc;
    char k[32];

    disk_with_8mib(&d);
    rdzvd_journal_bound(j, &d);
    n = fill(s, 200, &rc);
    /* 15 records of a value are half of 8 MiB, but for the headers: a journal leaves as much
     * free as it holds. */
    ASSERT_EQ(rc, -EDQUOT);
    ASSERT_EQ(n, 15);
    ASSERT_EQ(rdzvd_store_num_keys(s), (uint64_t)n);
    ASSERT_FALSE(rdzvd_journal_failed(j));
    for (int i = 0; i < n; i++) {
        snprintf(k, sizeof(k), "k%d", i);
        ASSERT_EQ(rdzvd_store_delete(s, k, strlen(k)), 1);
    }
    ASSERT_OK(rdzvd_store_set(s, "again", 5, val, VAL_LEN));
    /* Compacted once half of it was deleted: the journal holds about half of what it did. */
    ASSERT_LE(rdzvd_journal_stats(j)->size, 3 * MIB);
    ASSERT_FALSE(rdzvd_journal_failed(j));
    rdzvd_journal_close(j, true);
    rdzvd_store_free(s);
}

/* Issue 71: a client of job A's store fills its journal; job B's store (its journal bound the
 * same way, as rdzvd binds every store's) still has half of what is left: B's first SET of 200
 * bytes is not refused, and B's store fills its own half. Then the main store, the third, has
 * half of what is left again. A full journal is its own store's problem. */
static void test_a_full_store_leaves_the_others_room(void)
{
    struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
    struct rdzvd_store *a = new_store(&lim), *b = new_store(&lim), *m = new_store(&lim);
    struct rdzvd_journal *ja = jopen("job-a", a), *jb = jopen("job-b", b);
    struct rdzvd_journal *jm = jopen("main-half", m);
    static char small[200];
    struct rdzvd_disk d;
    int na, nb, nm, rc;

    disk_with_8mib(&d);
    rdzvd_journal_bound(ja, &d);
    rdzvd_journal_bound(jb, &d);
    rdzvd_journal_bound(jm, &d);
    na = fill(a, 100, &rc);
    ASSERT_EQ(rc, -EDQUOT);
    ASSERT_OK(rdzvd_store_set(b, "first", 5, small, sizeof(small)));
    nb = fill(b, 100, &rc);
    ASSERT_EQ(rc, -EDQUOT);
    nm = fill(m, 100, &rc);
    ASSERT_EQ(rc, -EDQUOT);
    /* 15 records of a value are half of 8 MiB, but for the headers; then half of the rest, and
     * half again. */
    ASSERT_EQ(na, 15);
    ASSERT_EQ(nb, 8);
    ASSERT_EQ(nm, 4);
    ASSERT_FALSE(rdzvd_journal_failed(ja) || rdzvd_journal_failed(jb));
    rdzvd_journal_close(ja, true);
    rdzvd_journal_close(jb, true);
    rdzvd_journal_close(jm, true);
    rdzvd_store_free(a);
    rdzvd_store_free(b);
    rdzvd_store_free(m);
}

static void write_bytes(const char *name, size_t n)
{
    int fd = openat(dirfd_, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    char buf[4096] = {0};

    ASSERT_OK(fd < 0 ? -1 : 0);
    for (size_t i = 0; i < n; i += sizeof(buf))
        ASSERT_EQ(write(fd, buf, n - i < sizeof(buf) ? n - i : sizeof(buf)) > 0, 1);
    close(fd);
}

/* What filled the disk, as a failure to write says it: the free space and the 3 largest files,
 * largest first. */
static void test_report_names_the_largest_files(void)
{
    static const char *const names[] = {"a.journal", "b.journal", "c.journal", "d.journal"};
    static const size_t sizes[] = {10000, 300000, 20000, 100000};
    char buf[512];

    for (int i = 0; i < 4; i++)
        write_bytes(names[i], sizes[i]);
    rdzvd_disk_report(dirfd_, buf, sizeof(buf));
    ASSERT_NOT_NULL(strstr(buf, " bytes free of "));
    ASSERT_NOT_NULL(strstr(buf, "; largest files: b.journal (300000 bytes), d.journal (100000 "
                                "bytes), c.journal (20000 bytes)"));
    ASSERT_TRUE(strstr(buf, "a.journal") == NULL);
    for (int i = 0; i < 4; i++)
        ASSERT_OK(unlinkat(dirfd_, names[i], 0));
}

int main(void)
{
    snprintf(dir, sizeof(dir), "%s/rdzvd-journal-bound-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ASSERT_NOT_NULL(mkdtemp(dir));
    dirfd_ = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_OK(dirfd_);

    TEST(test_bound_refuses_and_pops_give_room_back);
    TEST(test_bound_follows_the_share);
    TEST(test_huge_budget_saturates);
    TEST(test_reserve_follows_the_job_table);
    TEST(test_disk_reserve_refuses_and_deletes_give_room_back);
    TEST(test_a_full_store_leaves_the_others_room);
    TEST(test_report_names_the_largest_files);

    close(dirfd_);
    rmdir(dir);
    return tap_done();
}
