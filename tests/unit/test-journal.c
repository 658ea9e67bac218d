/* SPDX-License-Identifier: Apache-2.0 */
/* test-journal.c: the store's change hook and the journal: round trips of every record type,
 * APPEND journaled as its own bytes, torn tails at every byte, mid-file corruption refused with
 * the file untouched, compaction, fsync scheduling, write errors. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "common/rdzv-log.h"
#include "common/rdzv-util.h"
#include "daemon/data/rdzvd-journal.h"
#include "daemon/data/rdzvd-record.h"
#include "daemon/data/rdzvd-store.h"
#include "../tap.h"

static const struct rdzv_limits lim = RDZV_LIMITS_DEFAULT;
static char dir[256];
static int dirfd_;

static void no_wake(struct rdzvd_waiter *w, void *ud)
{
    (void)w;
    (void)ud;
}

static struct rdzvd_store *new_store(void)
{
    struct rdzvd_store *s = NULL;

    ASSERT_OK(rdzvd_store_new(&lim, no_wake, &s));
    return s;
}

/* The length of a version 2 header naming name. */
static size_t hdr_len(const char *name)
{
    return 16 + strlen(name) + 4;
}

static struct rdzvd_journal *jopen(const char *name, struct rdzvd_store *s)
{
    struct rdzvd_journal *j = NULL;

    ASSERT_OK(rdzvd_journal_open(NULL, dirfd_, dir, name, RDZVD_FSYNC_EVERYSEC, s, &j));
    ASSERT_NOT_NULL(j);
    return j;
}

static void path_of(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s.journal", dir, name);
}

static off_t file_size(const char *name)
{
    char p[512];
    struct stat st;

    path_of(name, p, sizeof(p));
    ASSERT_OK(stat(p, &st));
    return st.st_size;
}

static uint8_t *read_file(const char *name, size_t *len)
{
    char p[512];
    FILE *f;
    uint8_t *buf;
    long n;

    path_of(name, p, sizeof(p));
    f = fopen(p, "rb");
    ASSERT_NOT_NULL(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    ASSERT_NOT_NULL(buf);
    ASSERT_EQ(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void write_file(const char *name, const uint8_t *p, size_t n)
{
    char path[512];
    FILE *f;

    path_of(name, path, sizeof(path));
    f = fopen(path, "wb");
    ASSERT_NOT_NULL(f);
    ASSERT_EQ(fwrite(p, 1, n, f), n);
    ASSERT_OK(fclose(f));
}

static void remove_journal(const char *name)
{
    char p[512];

    path_of(name, p, sizeof(p));
    (void)unlink(p);
}

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
    const uint8_t *val;
    size_t vlen;

    ASSERT_EQ(rdzvd_store_get(s, k, strlen(k), &val, &vlen), -ENOENT);
}

static void expect_pop(struct rdzvd_store *s, const char *k, const char *v)
{
    uint8_t *item = NULL;
    size_t ilen = 0;
    uint64_t before = 0;

    ASSERT_OK(rdzvd_store_queue_pop(s, k, strlen(k), &before, &item, &ilen));
    if (!v) {
        ASSERT_EQ(before, 0);
        return;
    }
    ASSERT_TRUE(before > 0);
    ASSERT_BYTES_STR(item, ilen, v);
    free(item);
}

/* Every key of a has the same value in b, and both hold the same number of keys and bytes. */
struct cmp_ctx {
    struct rdzvd_store *a, *b;
};

static int cmp_key_cb(const uint8_t *key, size_t klen, void *ud)
{
    struct cmp_ctx *c = ud;
    const uint8_t *va, *vb;
    size_t la, lb;

    ASSERT_OK(rdzvd_store_get(c->a, key, klen, &va, &la));
    if (rdzvd_store_get(c->b, key, klen, &vb, &lb) < 0)
        tap_fail(__FILE__, __LINE__, "key '%.*s' missing after replay", (int)klen, key);
    ASSERT_EQ(la, lb);
    ASSERT_MEMEQ(va, vb, la);
    return 0;
}

static void expect_same(struct rdzvd_store *a, struct rdzvd_store *b)
{
    struct cmp_ctx c = {a, b};

    ASSERT_EQ(rdzvd_store_num_keys(a), rdzvd_store_num_keys(b));
    ASSERT_EQ(rdzvd_store_bytes(a), rdzvd_store_bytes(b));
    ASSERT_OK(rdzvd_store_foreach(a, cmp_key_cb, &c));
}

/* ---- the change hook ---- */

struct event_log {
    char text[4096];
};

static void log_change(void *ud, enum rdzvd_change what, const uint8_t *key, size_t klen,
                       const uint8_t *val, size_t vlen)
{
    static const char *const names[] = {"SET", "DEL", "QPUSH", "QPOP", "DECISION", "APPEND"};
    struct event_log *l = ud;
    size_t n = strlen(l->text);

    snprintf(l->text + n, sizeof(l->text) - n, "%s %.*s%s%.*s;", names[what], (int)klen,
             (const char *)key, val ? "=" : "", (int)vlen, val ? (const char *)val : "");
}

static void test_change_hook_events(void)
{
    struct rdzvd_store *s = new_store();
    struct event_log l = {{0}};
    const uint8_t *cur;
    size_t curlen;
    int64_t n;

    rdzvd_store_set_change_cb(s, log_change, &l);
    ASSERT_OK(set_str(s, "a", "1"));
    ASSERT_OK(rdzvd_store_add(s, "n", 1, 41, &n));
    ASSERT_OK(rdzvd_store_add(s, "n", 1, 1, &n));
    /* A failed compare: no change, no event. Missing key with an expectation: none either. */
    ASSERT_OK(rdzvd_store_compare_set(s, "a", 1, "x", 1, "y", 1, &cur, &curlen));
    ASSERT_OK(rdzvd_store_compare_set(s, "m", 1, "x", 1, "y", 1, &cur, &curlen));
    ASSERT_OK(rdzvd_store_compare_set(s, "a", 1, "1", 1, "2", 1, &cur, &curlen));
    ASSERT_OK(rdzvd_store_append(s, "a", 1, "34", 2)); /* the appended bytes only */
    ASSERT_OK(rdzvd_store_append(s, "new", 3, "x", 1)); /* a missing key starts empty */
    ASSERT_EQ(rdzvd_store_delete(s, "a", 1), 1);
    ASSERT_EQ(rdzvd_store_delete(s, "a", 1), 0); /* nothing removed: no event */
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "i1", 2));
    expect_pop(s, "q", "i1");
    expect_pop(s, "q", NULL); /* empty: no event */
    ASSERT_BYTES_STR(l.text, strlen(l.text),
                     "SET a=1;SET n=41;SET n=42;SET a=2;APPEND a=34;APPEND new=x;DEL a;"
                     "QPUSH q=i1;QPOP q;");
    rdzvd_store_set_change_cb(s, NULL, NULL);
    ASSERT_OK(set_str(s, "b", "1"));
    ASSERT_EQ(strlen(l.text), strlen("SET a=1;SET n=41;SET n=42;SET a=2;APPEND a=34;"
                                     "APPEND new=x;DEL a;QPUSH q=i1;QPOP q;"));
    rdzvd_store_free(s);
}

/* ---- round trips ---- */

static void test_round_trip_every_type(void)
{
    struct rdzvd_store *s = new_store(), *r;
    struct rdzvd_journal *j = jopen("rt", s);
    const uint8_t *cur;
    size_t curlen;
    int64_t n;

    ASSERT_EQ(rdzvd_journal_stats(j)->size, hdr_len("rt"));
    ASSERT_OK(set_str(s, "k1", "v1"));
    ASSERT_OK(set_str(s, "k2", "v2"));
    ASSERT_OK(set_str(s, "empty", ""));
    ASSERT_OK(rdzvd_store_set(s, "bin\0key", 7, "\0\xff\x01", 3));
    ASSERT_OK(set_str(s, "k1", "v1b"));
    ASSERT_OK(rdzvd_store_add(s, "cnt", 3, 5, &n));
    ASSERT_OK(rdzvd_store_add(s, "cnt", 3, -7, &n));
    ASSERT_OK(rdzvd_store_compare_set(s, "cas", 3, "", 0, "first", 5, &cur, &curlen));
    ASSERT_OK(rdzvd_store_compare_set(s, "cas", 3, "first", 5, "second", 6, &cur, &curlen));
    ASSERT_OK(rdzvd_store_append(s, "log", 3, "ab", 2));
    ASSERT_OK(rdzvd_store_append(s, "log", 3, "cd", 2));
    ASSERT_EQ(rdzvd_store_delete(s, "k2", 2), 1);
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "x", 1));
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "y", 1));
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "", 0));
    expect_pop(s, "q", "x");
    ASSERT_EQ(rdzvd_journal_stats(j)->records, 16);
    rdzvd_journal_close(j, false);

    r = new_store();
    j = jopen("rt", r);
    ASSERT_EQ(rdzvd_journal_stats(j)->replayed, 16);
    ASSERT_EQ(rdzvd_journal_stats(j)->dropped, 0);
    expect_same(s, r);
    expect_value(r, "k1", "v1b");
    expect_missing(r, "k2");
    expect_value(r, "cnt", "-2");
    expect_value(r, "cas", "second");
    expect_value(r, "log", "abcd");
    expect_value(r, "empty", "");
    ASSERT_EQ(rdzvd_store_queue_len(r, "q", 1), 2);
    /* The counter goes on from its saved value. */
    ASSERT_OK(rdzvd_store_add(r, "cnt", 3, 3, &n));
    ASSERT_EQ(n, 1);
    rdzvd_journal_close(j, false);
    expect_pop(r, "q", "y");
    expect_pop(r, "q", "");
    expect_pop(r, "q", NULL);
    rdzvd_store_free(r);
    rdzvd_store_free(s);
    remove_journal("rt");
}

/* Random ops over a few keys; replay (before and after a forced compaction) equals the store. */
static void test_replay_equals_original_random(void)
{
    struct rdzvd_store *s = new_store(), *r;
    struct rdzvd_journal *j = jopen("rand", s);
    unsigned seed = 12345;

    snprintf(tap_note, sizeof(tap_note), "seed %u", seed);
    srand(seed);
    for (int i = 0; i < 5000; i++) {
        char key[16], val[64];
        int op = rand() % 8, vl = rand() % 40;
        const uint8_t *cur;
        size_t curlen;
        int64_t n;

        snprintf(key, sizeof(key), "k%d", rand() % 50);
        for (int k = 0; k < vl; k++)
            val[k] = (char)('a' + rand() % 26);
        val[vl] = 0;
        switch (op) {
        case 0:
        case 1:
            ASSERT_OK(set_str(s, key, val));
            break;
        case 2:
            if (rdzvd_store_add(s, key, strlen(key), rand() % 100 - 50, &n) == -EINVAL)
                ASSERT_OK(set_str(s, key, "7"));
            break;
        case 3:
            ASSERT_OK(rdzvd_store_delete(s, key, strlen(key)));
            break;
        case 4:
            ASSERT_OK(rdzvd_store_append(s, key, strlen(key), val, strlen(val) % 8));
            break;
        case 5:
            ASSERT_OK(rdzvd_store_compare_set(s, key, strlen(key), "", 0, val, strlen(val), &cur,
                                              &curlen));
            break;
        case 6:
            ASSERT_OK(rdzvd_store_queue_push(s, key, strlen(key), val, strlen(val)));
            break;
        default: {
            uint8_t *item = NULL;
            size_t ilen;
            uint64_t before;

            ASSERT_OK(rdzvd_store_queue_pop(s, key, strlen(key), &before, &item, &ilen));
            free(item);
        }
        }
    }
    rdzvd_journal_close(j, false);
    for (int round = 0; round < 2; round++) {
        r = new_store();
        j = jopen("rand", r);
        expect_same(s, r);
        for (int q = 0; q < 50; q++) {
            char key[16];

            snprintf(key, sizeof(key), "k%d", q);
            ASSERT_EQ(rdzvd_store_queue_len(s, key, strlen(key)),
                      rdzvd_store_queue_len(r, key, strlen(key)));
        }
        if (round == 0)
            ASSERT_OK(rdzvd_journal_compact(j)); /* round 1 replays the snapshot */
        else
            ASSERT_LE(rdzvd_journal_stats(j)->replayed, 50 + 5000);
        rdzvd_journal_close(j, false);
        if (round == 1) {
            /* Queues in the same order: pop everything from both. */
            for (int q = 0; q < 50; q++) {
                char key[16];
                uint8_t *a = NULL, *b = NULL;
                size_t al = 0, bl = 0;
                uint64_t ba, bb;

                snprintf(key, sizeof(key), "k%d", q);
                do {
                    ASSERT_OK(rdzvd_store_queue_pop(s, key, strlen(key), &ba, &a, &al));
                    ASSERT_OK(rdzvd_store_queue_pop(r, key, strlen(key), &bb, &b, &bl));
                    ASSERT_EQ(ba, bb);
                    if (ba) {
                        ASSERT_EQ(al, bl);
                        ASSERT_MEMEQ(a, b, al);
                    }
                    free(a);
                    free(b);
                    a = b = NULL;
                } while (ba);
            }
        }
        rdzvd_store_free(r);
    }
    tap_note[0] = 0;
    rdzvd_store_free(s);
    remove_journal("rand");
}

/* ---- recovery ---- */

/* A crash can cut the last record anywhere: every cut keeps all the records before it. */
static void test_torn_tail_every_offset(void)
{
    struct rdzvd_store *s = new_store(), *expect = new_store();
    struct rdzvd_journal *j = jopen("torn", s);
    uint64_t last_start, full;
    uint8_t *img;
    size_t len;
    char big[100];
    int64_t n;

    ASSERT_OK(set_str(s, "a", "1"));
    ASSERT_OK(rdzvd_store_add(s, "n", 1, 9, &n));
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "item", 4));
    ASSERT_OK(set_str(expect, "a", "1"));
    ASSERT_OK(rdzvd_store_add(expect, "n", 1, 9, &n));
    ASSERT_OK(rdzvd_store_queue_push(expect, "q", 1, "item", 4));
    last_start = rdzvd_journal_stats(j)->size;
    memset(big, 'z', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    ASSERT_OK(set_str(s, "last", big));
    full = rdzvd_journal_stats(j)->size;
    ASSERT_EQ(full, last_start + 13 + 4 + 99);
    rdzvd_journal_close(j, false);
    img = read_file("torn", &len);
    ASSERT_EQ(len, full);

    for (uint64_t cut = last_start; cut <= full; cut++) {
        struct rdzvd_store *r = new_store();

        snprintf(tap_note, sizeof(tap_note), "cut at %" PRIu64 " of %" PRIu64, cut, full);
        write_file("torn", img, (size_t)cut);
        j = jopen("torn", r);
        if (cut == full) {
            ASSERT_EQ(rdzvd_journal_stats(j)->replayed, 4);
            expect_same(s, r);
        } else {
            ASSERT_EQ(rdzvd_journal_stats(j)->replayed, 3);
            ASSERT_EQ(rdzvd_journal_stats(j)->dropped, cut - last_start);
            ASSERT_EQ(file_size("torn"), last_start);
            expect_same(expect, r);
            ASSERT_EQ(rdzvd_store_queue_len(r, "q", 1), 1);
            /* Appends continue after the cut and are replayed next time. */
            ASSERT_OK(set_str(r, "after", "x"));
            rdzvd_journal_close(j, false);
            rdzvd_store_free(r);
            r = new_store();
            j = jopen("torn", r);
            ASSERT_EQ(rdzvd_journal_stats(j)->replayed, 4);
            ASSERT_EQ(rdzvd_journal_stats(j)->dropped, 0);
            expect_value(r, "after", "x");
        }
        rdzvd_journal_close(j, false);
        rdzvd_store_free(r);
    }
    tap_note[0] = 0;
    free(img);
    rdzvd_store_free(s);
    rdzvd_store_free(expect);
    remove_journal("torn");
}

/* A journal of ten records k0..k9 = "value"; off[i] is where record i starts. Returns the
 * file's bytes (*len of them). */
static uint8_t *ten_records(const char *name, uint64_t off[10], size_t *len)
{
    struct rdzvd_store *s = new_store();
    struct rdzvd_journal *j = jopen(name, s);

    for (int i = 0; i < 10; i++) {
        char k[8];

        off[i] = rdzvd_journal_stats(j)->size;
        snprintf(k, sizeof(k), "k%d", i);
        ASSERT_OK(set_str(s, k, "value"));
    }
    rdzvd_journal_close(j, false);
    rdzvd_store_free(s);
    return read_file(name, len);
}

/* Opening name must fail -EBADMSG, with nothing replayed into the store and the file exactly as
 * it was (img, len bytes). */
static void expect_refused_untouched(const char *name, const uint8_t *img, size_t len)
{
    struct rdzvd_store *r = new_store();
    struct rdzvd_journal *j = NULL;
    uint8_t *after;
    size_t len2;

    ASSERT_EQ(rdzvd_journal_open(NULL, dirfd_, dir, name, RDZVD_FSYNC_NO, r, &j), -EBADMSG);
    ASSERT_NULL(j);
    after = read_file(name, &len2);
    ASSERT_EQ(len2, len);
    ASSERT_MEMEQ(after, img, len);
    free(after);
    rdzvd_store_free(r);
}

/* One corrupt byte in the middle of the file, anywhere in a record (its CRC, type, lengths, key
 * or value), with intact records after it: open refuses, and the file is left as it is, not cut
 * there (that dropped every later record). */
static void test_corrupt_byte_in_middle_refused(void)
{
    uint64_t off[10];
    size_t len;
    uint8_t *img = ten_records("mid", off, &len);

    for (uint64_t at = off[5]; at < off[6]; at++) {
        snprintf(tap_note, sizeof(tap_note), "byte %" PRIu64 " (record 5 at %" PRIu64 ")", at,
                 off[5]);
        img[at] ^= 0x40;
        write_file("mid", img, len);
        expect_refused_untouched("mid", img, len);
        img[at] ^= 0x40;
    }
    /* A length that claims past the end of the file hides the records after it too. */
    rdzv_set_u32(img + off[5] + 9, 1u << 30);
    write_file("mid", img, len);
    expect_refused_untouched("mid", img, len);
    tap_note[0] = 0;
    free(img);
    remove_journal("mid");
}

/* The last record bad (its CRC, nothing intact after it) is a torn tail, as a crash leaves it:
 * it is dropped and the rest kept, as before. */
static void test_corrupt_last_record_is_a_tail(void)
{
    struct rdzvd_store *r = new_store();
    struct rdzvd_journal *j;
    uint64_t off[10];
    size_t len;
    uint8_t *img = ten_records("tail", off, &len);

    img[len - 1] ^= 0x40; /* a byte of record 9's value */
    write_file("tail", img, len);
    j = jopen("tail", r);
    ASSERT_EQ(rdzvd_journal_stats(j)->replayed, 9);
    ASSERT_EQ(rdzvd_journal_stats(j)->dropped, len - off[9]);
    ASSERT_EQ(file_size("tail"), off[9]);
    expect_value(r, "k8", "value");
    expect_missing(r, "k9");
    rdzvd_journal_close(j, false);
    free(img);
    rdzvd_store_free(r);
    remove_journal("tail");
}

/* A record of the replicas' job table (intact, CRC and all) has no place in a journal: nothing
 * of it reaches the clients' store. Followed by intact records it is corruption in the middle
 * (refused, file untouched); as the last record, a tail (dropped). */
static void test_job_table_record_refused(void)
{
    struct rdzvd_store *r = new_store();
    struct rdzvd_journal *j;
    uint64_t off[10];
    size_t len;
    uint8_t *img = ten_records("jobrec", off, &len);

    ASSERT_OK(rdzvd_record_header_in(img + off[5], RDZVD_TABLE_JOBS, RDZVD_CHANGE_SET,
                                     (const uint8_t *)"k5", 2, (const uint8_t *)"value", 5));
    write_file("jobrec", img, len);
    expect_refused_untouched("jobrec", img, len);
    /* Only records 0..5: the job table's is the last. */
    write_file("jobrec", img, off[6]);
    j = jopen("jobrec", r);
    ASSERT_EQ(rdzvd_journal_stats(j)->replayed, 5);
    ASSERT_EQ(file_size("jobrec"), off[5]);
    expect_value(r, "k4", "value");
    expect_missing(r, "k5");
    rdzvd_journal_close(j, false);
    free(img);
    rdzvd_store_free(r);
    remove_journal("jobrec");
}

/* An APPEND is journaled as the bytes it appended (256 one-byte APPENDs to
 * an 8 MiB value wrote 3 GiB), replays to the same value, and one past the value limit is
 * refused with nothing changed or journaled. */
static void test_append_journals_its_own_bytes(void)
{
    const size_t base = lim.max_value_len - 256;
    struct rdzvd_store *s = new_store(), *r = new_store();
    struct rdzvd_journal *j = jopen("app", s);
    uint8_t *big = malloc(base);
    const uint8_t *val;
    uint64_t before;
    size_t vlen;

    ASSERT_NOT_NULL(big);
    memset(big, 'b', base);
    ASSERT_OK(rdzvd_store_set(s, "big", 3, big, base));
    before = rdzvd_journal_stats(j)->size;
    for (int i = 0; i < 256; i++) {
        char c = (char)('0' + i % 10);

        ASSERT_OK(rdzvd_store_append(s, "big", 3, &c, 1));
    }
    /* 256 records of a 13-byte header, the key and one byte. */
    ASSERT_EQ(rdzvd_journal_stats(j)->size - before, 256 * (13 + 3 + 1));
    ASSERT_EQ(rdzvd_journal_stats(j)->compactions, 0);
    before = rdzvd_journal_stats(j)->size;
    ASSERT_EQ(rdzvd_store_append(s, "big", 3, "x", 1), -EMSGSIZE);
    ASSERT_EQ(rdzvd_journal_stats(j)->size, before);
    ASSERT_OK(rdzvd_store_get(s, "big", 3, &val, &vlen));
    ASSERT_EQ(vlen, lim.max_value_len);
    rdzvd_journal_close(j, false);

    j = jopen("app", r);
    ASSERT_EQ(rdzvd_journal_stats(j)->replayed, 257);
    expect_same(s, r);
    ASSERT_OK(rdzvd_store_get(r, "big", 3, &val, &vlen));
    ASSERT_TRUE(memcmp(val, big, base) == 0);
    ASSERT_TRUE(memcmp(val + base, "0123456789", 10) == 0);
    ASSERT_EQ(val[vlen - 1], '0' + 255 % 10);
    rdzvd_journal_close(j, false);
    free(big);
    rdzvd_store_free(s);
    rdzvd_store_free(r);
    remove_journal("app");
}

static int try_open(const char *name)
{
    struct rdzvd_store *s = new_store();
    struct rdzvd_journal *j = NULL;
    int r = rdzvd_journal_open(NULL, dirfd_, dir, name, RDZVD_FSYNC_NO, s, &j);

    if (r == 0)
        rdzvd_journal_close(j, false);
    rdzvd_store_free(s);
    return r;
}

static void test_bad_header_and_unreadable(void)
{
    static const uint8_t junk[] = "this is not a journal at all";
    char p[512];
    uint8_t *img;
    size_t len;

    write_file("hdr", junk, sizeof(junk));
    ASSERT_EQ(try_open("hdr"), -EBADMSG);
    write_file("hdr", junk, 5); /* shorter than a header */
    ASSERT_EQ(try_open("hdr"), -EBADMSG);
    /* An intact header of another version. */
    remove_journal("hdr");
    ASSERT_OK(try_open("hdr"));
    img = read_file("hdr", &len);
    ASSERT_EQ(len, hdr_len("hdr"));
    img[8] = 4;
    write_file("hdr", img, len);
    ASSERT_EQ(try_open("hdr"), -EPROTONOSUPPORT);
    img[8] = 3;
    img[16] ^= 1; /* the header CRC covers the name */
    write_file("hdr", img, len);
    ASSERT_EQ(try_open("hdr"), -EBADMSG);
    img[16] ^= 1;
    img[12] = 200; /* a name longer than the file */
    write_file("hdr", img, len);
    ASSERT_EQ(try_open("hdr"), -EBADMSG);
    free(img);
    /* An empty file (created, never written) starts afresh. */
    write_file("hdr", junk, 0);
    ASSERT_OK(try_open("hdr"));
    ASSERT_EQ(file_size("hdr"), hdr_len("hdr"));
    remove_journal("hdr");
    /* A directory where the file should be. */
    path_of("isdir", p, sizeof(p));
    ASSERT_OK(mkdir(p, 0700));
    ASSERT_EQ(try_open("isdir"), -EISDIR);
    ASSERT_OK(rmdir(p));
}

/* The header names its owner: a journal moved under another name is refused (never replayed,
 * rewritten or deleted), and rdzvd_journal_unlink() leaves it too. */
static void test_owner_in_header(void)
{
    struct rdzvd_store *s = new_store(), *r = new_store();
    struct rdzvd_journal *j = jopen("owner-a", s);
    char pa[512], pb[512];
    uint8_t *img, *after;
    size_t len, len2;

    ASSERT_OK(set_str(s, "secret", "of a"));
    rdzvd_journal_close(j, false);
    path_of("owner-a", pa, sizeof(pa));
    path_of("owner-b", pb, sizeof(pb));
    ASSERT_OK(rename(pa, pb));
    img = read_file("owner-b", &len);
    ASSERT_EQ(rdzvd_journal_open(NULL, dirfd_, dir, "owner-b", RDZVD_FSYNC_NO, r, &j), -EEXIST);
    ASSERT_EQ(rdzvd_store_num_keys(r), 0);
    ASSERT_EQ(rdzvd_journal_unlink(dirfd_, "owner-b"), -EEXIST);
    after = read_file("owner-b", &len2);
    ASSERT_EQ(len2, len);
    ASSERT_TRUE(memcmp(img, after, len) == 0);
    free(after);
    /* Under its own name it is replayed, and unlink deletes it. */
    ASSERT_OK(rename(pb, pa));
    j = jopen("owner-a", r);
    expect_value(r, "secret", "of a");
    rdzvd_journal_close(j, false);
    ASSERT_OK(rdzvd_journal_unlink(dirfd_, "owner-a"));
    ASSERT_TRUE(access(pa, F_OK) < 0 && errno == ENOENT);
    ASSERT_OK(rdzvd_journal_unlink(dirfd_, "owner-a")); /* none: fine */
    free(img);
    rdzvd_store_free(s);
    rdzvd_store_free(r);
}

/* CRC-32 (zlib's), bit by bit: the journal's header checksum. */
static uint32_t crc32_of(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;

    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return c ^ 0xffffffffu;
}

/* A version 1 journal (no owner in its header) is replayed and rewritten as version 3. So is a
 * version 2 one, whose APPENDs were recorded as the key's whole new value: journals written before
 * APPEND records replay as they did. */
static void test_version_1_upgraded(void)
{
    struct rdzvd_store *s = new_store(), *r = new_store();
    struct rdzvd_journal *j = jopen("v1", s);
    size_t len, len2, h = hdr_len("v1");
    uint8_t *img, *v1;

    ASSERT_OK(set_str(s, "k", "v"));
    rdzvd_journal_close(j, false);
    img = read_file("v1", &len);
    /* The same records behind the 16-byte header of version 1. */
    v1 = malloc(16 + len - h);
    ASSERT_NOT_NULL(v1);
    memcpy(v1, "RDZVJRN1\x01\0\0\0", 12);
    rdzv_set_u32(v1 + 12, crc32_of(v1, 12));
    memcpy(v1 + 16, img + h, len - h);
    write_file("v1", v1, 16 + len - h);
    j = jopen("v1", r);
    expect_value(r, "k", "v");
    rdzvd_journal_close(j, false);
    free(img);
    img = read_file("v1", &len2);
    ASSERT_EQ(len2, len); /* the version 3 header again, the same records */
    ASSERT_EQ(rdzv_get_u32(img + 8), 3);
    /* Version 2: the same header, and an APPEND as a SET of the whole value. */
    rdzvd_store_free(r);
    r = new_store();
    rdzv_set_u32(img + 8, 2);
    rdzv_set_u32(img + h - 4, crc32_of(img, h - 4));
    ASSERT_OK(rdzvd_record_header(img + h, RDZVD_CHANGE_SET, (const uint8_t *)"k", 1,
                                  (const uint8_t *)"v", 1));
    write_file("v1", img, len);
    j = jopen("v1", r);
    ASSERT_EQ(rdzvd_journal_stats(j)->replayed, 1);
    expect_value(r, "k", "v");
    ASSERT_OK(rdzvd_store_append(r, "k", 1, "w", 1));
    rdzvd_journal_close(j, false);
    free(img);
    img = read_file("v1", &len2);
    ASSERT_EQ(rdzv_get_u32(img + 8), 3);
    ASSERT_EQ(len2, len + 13 + 1 + 1);
    rdzvd_store_free(r);
    r = new_store();
    j = jopen("v1", r);
    expect_value(r, "k", "vw");
    rdzvd_journal_close(j, false);
    free(img);
    free(v1);
    rdzvd_store_free(s);
    rdzvd_store_free(r);
    remove_journal("v1");
}

static void test_names_and_lock(void)
{
    struct rdzvd_store *s = new_store();
    struct rdzvd_journal *j;
    char p[512];

    ASSERT_TRUE(rdzvd_state_name_valid("main"));
    ASSERT_TRUE(rdzvd_state_name_valid("job-0123456789abcdef-gen-7"));
    ASSERT_TRUE(rdzvd_state_name_valid("A.b_c-9"));
    ASSERT_FALSE(rdzvd_state_name_valid(""));
    ASSERT_FALSE(rdzvd_state_name_valid(NULL));
    ASSERT_FALSE(rdzvd_state_name_valid("../etc/x"));
    ASSERT_FALSE(rdzvd_state_name_valid("a/b"));
    ASSERT_FALSE(rdzvd_state_name_valid("a b"));
    ASSERT_FALSE(rdzvd_state_name_valid("caf\xc3\xa9"));
    ASSERT_EQ(try_open("a/b"), -EINVAL);
    /* A store that is not empty can't be replayed into. */
    ASSERT_OK(set_str(s, "x", "1"));
    ASSERT_EQ(rdzvd_journal_open(NULL, dirfd_, dir, "lock", RDZVD_FSYNC_NO, s, &j), -EINVAL);
    rdzvd_store_free(s);
    /* One owner at a time. */
    s = new_store();
    j = jopen("lock", s);
    ASSERT_EQ(try_open("lock"), -EBUSY);
    /* drop deletes the file. */
    rdzvd_journal_close(j, true);
    path_of("lock", p, sizeof(p));
    ASSERT_EQ(access(p, F_OK), -1);
    rdzvd_store_free(s);
}

/* ---- compaction ---- */

static void test_compaction_bounded(void)
{
    struct rdzvd_store *s = new_store(), *r = new_store();
    struct rdzvd_journal *j = jopen("compact", s);
    char val[1024];
    uint64_t max_size = 0;

    ASSERT_OK(set_str(s, "other", "kept"));
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "first", 5));
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "second", 6));
    for (int i = 0; i < 10000; i++) {
        memset(val, 'a' + i % 26, sizeof(val) - 1);
        snprintf(val, sizeof(val), "%d", i);
        val[strlen(val)] = '-';
        val[sizeof(val) - 1] = 0;
        ASSERT_OK(set_str(s, "hot", val));
        if (rdzvd_journal_stats(j)->size > max_size)
            max_size = rdzvd_journal_stats(j)->size;
    }
    /* ~10 MiB were written; the file never grew past the threshold plus one record. */
    ASSERT_LE(max_size, RDZVD_JOURNAL_COMPACT_MIN + 13 + 3 + sizeof(val));
    ASSERT_TRUE(rdzvd_journal_stats(j)->compactions >= 9);
    ASSERT_FALSE(rdzvd_journal_failed(j));
    ASSERT_LE(file_size("compact"), RDZVD_JOURNAL_COMPACT_MIN);
    ASSERT_EQ((uint64_t)file_size("compact"), rdzvd_journal_stats(j)->size);
    /* Buffered, as rdzvd runs it: a compaction also covers what was still buffered. */
    rdzvd_journal_set_buffered(j, NULL, NULL);
    for (int i = 0; i < 3000; i++) {
        snprintf(val, sizeof(val), "buffered-%d-", i);
        memset(val + strlen(val), 'b', sizeof(val) - 1 - strlen(val));
        ASSERT_OK(set_str(s, "hot", val));
        if (i % 7 == 0)
            ASSERT_OK(rdzvd_journal_flush(j));
        ASSERT_LE(rdzvd_journal_stats(j)->size, RDZVD_JOURNAL_COMPACT_MIN + 13 + 3 + sizeof(val));
    }
    ASSERT_FALSE(rdzvd_journal_failed(j));
    rdzvd_journal_close(j, false);
    j = jopen("compact", r);
    expect_same(s, r);
    expect_value(r, "hot", val);
    expect_value(r, "other", "kept");
    rdzvd_journal_close(j, false);
    expect_pop(r, "q", "first");
    expect_pop(r, "q", "second");
    expect_pop(r, "q", NULL);
    rdzvd_store_free(s);
    rdzvd_store_free(r);
    remove_journal("compact");
}

static void test_queue_ops(void)
{
    struct rdzvd_store *s = new_store(), *r = new_store();
    struct rdzvd_journal *j = jopen("queue", s);

    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "a", 1));
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "b", 1));
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "c", 1));
    expect_pop(s, "q", "a");
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "d", 1));
    ASSERT_OK(rdzvd_store_queue_push(s, "other", 5, "o", 1));
    expect_pop(s, "other", "o"); /* emptied queue: gone after replay too */
    rdzvd_journal_close(j, false);
    j = jopen("queue", r);
    ASSERT_EQ(rdzvd_store_queue_len(r, "q", 1), 3);
    ASSERT_EQ(rdzvd_store_queue_len(r, "other", 5), 0);
    ASSERT_FALSE(rdzvd_store_exists(r, "other", 5));
    ASSERT_EQ(rdzvd_store_bytes(r), rdzvd_store_bytes(s));
    /* Pops after replay are journaled too. */
    expect_pop(r, "q", "b");
    rdzvd_journal_close(j, false);
    rdzvd_store_free(r);
    r = new_store();
    j = jopen("queue", r);
    expect_pop(r, "q", "c");
    expect_pop(r, "q", "d");
    expect_pop(r, "q", NULL);
    rdzvd_journal_close(j, false);
    rdzvd_store_free(r);
    rdzvd_store_free(s);
    remove_journal("queue");
}

/* ---- fsync scheduling (with a loop) ---- */

static void count_pending(void *ud)
{
    (*(unsigned *)ud)++;
}

static void test_fsync_everysec_and_always(void)
{
    struct rdzvd_store *s = new_store();
    struct rdzvd_journal *j = NULL;
    unsigned pending_calls = 0;
    uv_loop_t loop;
    off_t size0;
    uint64_t t0;

    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(rdzvd_journal_open(&loop, dirfd_, dir, "sync", RDZVD_FSYNC_EVERYSEC, s, &j));
    /* Nothing dirty: nothing runs, the loop has nothing to wait for. */
    ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ASSERT_EQ(rdzvd_journal_stats(j)->fsyncs, 0);
    t0 = uv_now(&loop);
    ASSERT_OK(set_str(s, "a", "1"));
    ASSERT_OK(set_str(s, "b", "2"));
    /* The one-shot timer fires once, about a second later, then the loop is idle again. */
    ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ASSERT_EQ(rdzvd_journal_stats(j)->fsyncs, 1);
    uv_update_time(&loop);
    ASSERT_TRUE(uv_now(&loop) - t0 >= 990);
    rdzvd_journal_close(j, false);
    ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    rdzvd_store_free(s);

    s = new_store();
    ASSERT_OK(rdzvd_journal_open(&loop, dirfd_, dir, "sync", RDZVD_FSYNC_ALWAYS, s, &j));
    expect_value(s, "b", "2");
    /* Unbuffered ALWAYS: every record is written and synced at once. */
    ASSERT_OK(set_str(s, "c", "3"));
    ASSERT_EQ(rdzvd_journal_stats(j)->fsyncs, 1);
    /* Buffered (as rdzvd runs it): nothing reaches the file until the owner's flush, which
     * writes and syncs the whole batch once. */
    rdzvd_journal_set_buffered(j, count_pending, &pending_calls);
    size0 = file_size("sync");
    ASSERT_OK(set_str(s, "d", "4"));
    ASSERT_OK(set_str(s, "e", "5"));
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "x", 1));
    ASSERT_EQ(pending_calls, 1);
    ASSERT_TRUE(rdzvd_journal_pending(j));
    ASSERT_EQ(file_size("sync"), size0);
    ASSERT_EQ(rdzvd_journal_stats(j)->size, size0 + 3 * (13 + 1 + 1));
    ASSERT_OK(rdzvd_journal_flush(j));
    ASSERT_FALSE(rdzvd_journal_pending(j));
    ASSERT_EQ(rdzvd_journal_stats(j)->fsyncs, 2);
    ASSERT_EQ((uint64_t)file_size("sync"), rdzvd_journal_stats(j)->size);
    ASSERT_OK(rdzvd_journal_flush(j)); /* nothing new: no fsync */
    ASSERT_EQ(rdzvd_journal_stats(j)->fsyncs, 2);
    /* Close writes what is still buffered. */
    ASSERT_OK(set_str(s, "f", "6"));
    ASSERT_EQ(pending_calls, 2);
    rdzvd_journal_close(j, false);
    ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    rdzvd_store_free(s);
    s = new_store();
    ASSERT_OK(rdzvd_journal_open(&loop, dirfd_, dir, "sync", RDZVD_FSYNC_NO, s, &j));
    expect_value(s, "f", "6");
    ASSERT_EQ(rdzvd_store_queue_len(s, "q", 1), 1);
    rdzvd_journal_close(j, true);
    ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ASSERT_EQ(uv_loop_close(&loop), 0);
    rdzvd_store_free(s);
}

/* A write error turns persistence off for that store; the store keeps working. */
static void test_write_error_disables(void)
{
    struct rdzvd_store *s = new_store(), *r = new_store();
    struct rdzvd_journal *j = jopen("err", s);
    struct rlimit old, small;
    char big[8192];

    ASSERT_OK(set_str(s, "before", "1"));
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    /* RLIMIT_FSIZE makes the next large append fail with EFBIG (SIGXFSZ ignored). */
    signal(SIGXFSZ, SIG_IGN);
    ASSERT_OK(getrlimit(RLIMIT_FSIZE, &old));
    small = old;
    small.rlim_cur = 4096;
    ASSERT_OK(setrlimit(RLIMIT_FSIZE, &small));
    ASSERT_OK(set_str(s, "big", big));
    ASSERT_OK(setrlimit(RLIMIT_FSIZE, &old));
    ASSERT_TRUE(rdzvd_journal_failed(j));
    ASSERT_OK(set_str(s, "after", "2")); /* still served, not journaled */
    expect_value(s, "big", big);
    ASSERT_EQ(rdzvd_journal_sync(j), -EIO);
    rdzvd_journal_close(j, false);
    /* What made it before the error is there; the torn big record was dropped. */
    j = jopen("err", r);
    expect_value(r, "before", "1");
    expect_missing(r, "big");
    expect_missing(r, "after");
    rdzvd_journal_close(j, true);
    rdzvd_store_free(s);
    rdzvd_store_free(r);
}

/* ---- modes, limits, headers ---- */

/* The three fsync modes parse from and print as their names; anything else is refused and
 * leaves the result alone. */
static void test_fsync_mode_names(void)
{
    static const char *const names[] = {"everysec", "always", "no"};
    static const char *const bad[] = {"", "Always", "every", "nope", "always "};
    enum rdzvd_fsync m;

    for (size_t i = 0; i < 3; i++) {
        m = (enum rdzvd_fsync)99;
        ASSERT_OK(rdzvd_fsync_parse(names[i], &m));
        ASSERT_EQ(m, i == 0 ? RDZVD_FSYNC_EVERYSEC : i == 1 ? RDZVD_FSYNC_ALWAYS : RDZVD_FSYNC_NO);
        ASSERT_BYTES_STR(rdzvd_fsync_name(m), strlen(rdzvd_fsync_name(m)), names[i]);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        m = RDZVD_FSYNC_NO;
        ASSERT_EQ(rdzvd_fsync_parse(bad[i], &m), -EINVAL);
        ASSERT_EQ(m, RDZVD_FSYNC_NO);
    }
    ASSERT_BYTES_STR(rdzvd_fsync_name((enum rdzvd_fsync)7), 1, "?");
}

/* A journal holding more than the store's limits allow is refused (-EMSGSIZE for a value too
 * long, -ENOSPC for too many bytes) and left as it is for an rdzvd with larger limits. */
static void test_open_refuses_journal_over_limits(void)
{
    struct rdzv_limits small = lim;
    struct rdzvd_store *s = new_store(), *r;
    struct rdzvd_journal *j = jopen("lim", s);
    struct rdzvd_journal *j2 = NULL;
    char val[200];
    off_t size;

    memset(val, 'v', sizeof(val) - 1);
    val[sizeof(val) - 1] = '\0';
    ASSERT_OK(set_str(s, "k1", val));
    ASSERT_OK(set_str(s, "k2", val));
    rdzvd_journal_close(j, false);
    size = file_size("lim");
    small.max_value_len = 100;
    ASSERT_OK(rdzvd_store_new(&small, no_wake, &r));
    ASSERT_EQ(rdzvd_journal_open(NULL, dirfd_, dir, "lim", RDZVD_FSYNC_NO, r, &j2), -EMSGSIZE);
    ASSERT_NULL(j2);
    rdzvd_store_free(r);
    small = lim;
    small.max_store_bytes = 300; /* one key fits, two don't */
    ASSERT_OK(rdzvd_store_new(&small, no_wake, &r));
    ASSERT_EQ(rdzvd_journal_open(NULL, dirfd_, dir, "lim", RDZVD_FSYNC_NO, r, &j2), -ENOSPC);
    rdzvd_store_free(r);
    ASSERT_EQ(file_size("lim"), size);
    /* With the limits it was written under, it replays whole. */
    r = new_store();
    j = jopen("lim", r);
    expect_same(s, r);
    rdzvd_journal_close(j, true);
    ASSERT_EQ(try_open(NULL), -EINVAL);
    rdzvd_store_free(r);
    rdzvd_store_free(s);
}

/* More headers that are refused: a version 1 header with a bad CRC, a name length past the
 * longest state name, another owner whose name has another length; and a FIFO in place of
 * the file. */
static void test_more_bad_headers(void)
{
    struct rdzvd_store *s = new_store();
    struct rdzvd_journal *j = jopen("hdr2", s);
    uint8_t v1[16], *img;
    char p[512];
    size_t len;

    rdzvd_journal_close(j, false);
    img = read_file("hdr2", &len);
    rdzv_set_u32(img + 12, 0xffffffffu);
    write_file("hdr2", img, len);
    ASSERT_EQ(try_open("hdr2"), -EBADMSG);
    free(img);
    memcpy(v1, "RDZVJRN1\x01\0\0\0", 12);
    rdzv_set_u32(v1 + 12, crc32_of(v1, 12) ^ 1);
    write_file("hdr2", v1, sizeof(v1));
    ASSERT_EQ(try_open("hdr2"), -EBADMSG);
    remove_journal("hdr2");
    /* A journal of "hdr2" under the longer name "hdr2-longer". */
    j = jopen("hdr2", s);
    rdzvd_journal_close(j, false);
    img = read_file("hdr2", &len);
    write_file("hdr2-longer", img, len);
    ASSERT_EQ(try_open("hdr2-longer"), -EEXIST);
    ASSERT_EQ(rdzvd_journal_unlink(dirfd_, "hdr2-longer"), -EEXIST);
    free(img);
    remove_journal("hdr2-longer");
    remove_journal("hdr2");
    path_of("fifo", p, sizeof(p));
    ASSERT_OK(mkfifo(p, 0600));
    ASSERT_EQ(try_open("fifo"), -EINVAL);
    ASSERT_OK(unlink(p));
    rdzvd_store_free(s);
}

/* ---- snapshot failures ---- */

static bool tmp_exists(const char *name)
{
    char p[512];

    snprintf(p, sizeof(p), "%s/%s.journal.tmp", dir, name);
    return access(p, F_OK) == 0;
}

/* A new journal whose first (header-only) snapshot can't be written: open fails and leaves no
 * journal behind. A directory handle that can't be fsynced (O_PATH): the rename of the first
 * snapshot is not durable, so open fails too. */
static void test_create_fails_cleanly(void)
{
    struct rdzvd_store *s = new_store();
    struct rdzvd_journal *j = NULL;
    char p[512], tp[520];
    int pfd;

    path_of("mk", p, sizeof(p));
    snprintf(tp, sizeof(tp), "%s.tmp", p);
    ASSERT_OK(mkdir(tp, 0700));
    ASSERT_EQ(rdzvd_journal_open(NULL, dirfd_, dir, "mk", RDZVD_FSYNC_NO, s, &j), -EISDIR);
    ASSERT_NULL(j);
    ASSERT_TRUE(access(p, F_OK) < 0 && errno == ENOENT);
    ASSERT_OK(rmdir(tp));
    pfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    ASSERT_TRUE(pfd >= 0);
    ASSERT_EQ(rdzvd_journal_open(NULL, pfd, dir, "mk", RDZVD_FSYNC_NO, s, &j), -EBADF);
    ASSERT_NULL(j);
    close(pfd);
    ASSERT_FALSE(tmp_exists("mk"));
    ASSERT_OK(set_str(s, "still", "served")); /* no hook left behind on the store */
    remove_journal("mk");
    rdzvd_store_free(s);
}

/* A compaction that fails (its temporary file locked by someone else, or a directory where the
 * journal's name is) turns persistence off, removes its temporary file, and never damages the
 * journal: it still replays what was written before. */
static void test_compaction_failure_keeps_journal(void)
{
    struct rdzvd_store *s = new_store(), *r = new_store();
    struct rdzvd_journal *j = jopen("cf", s);
    char p[512], tp[520];
    int fd;

    ASSERT_OK(set_str(s, "k", "v"));
    path_of("cf", p, sizeof(p));
    snprintf(tp, sizeof(tp), "%s.tmp", p);
    fd = open(tp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_TRUE(fd >= 0);
    ASSERT_OK(flock(fd, LOCK_EX | LOCK_NB));
    ASSERT_EQ(rdzvd_journal_compact(j), -EWOULDBLOCK);
    close(fd);
    ASSERT_TRUE(rdzvd_journal_failed(j));
    ASSERT_FALSE(tmp_exists("cf"));
    ASSERT_EQ(rdzvd_journal_compact(j), -EIO); /* off stays off */
    /* Buffering a failed journal buffers nothing: its writes are not journaled at all. */
    rdzvd_journal_set_buffered(j, NULL, NULL);
    ASSERT_OK(set_str(s, "lost", "1"));
    ASSERT_FALSE(rdzvd_journal_pending(j));
    ASSERT_EQ(rdzvd_journal_flush(j), -EIO);
    rdzvd_journal_close(j, false);
    j = jopen("cf", r);
    expect_value(r, "k", "v");
    expect_missing(r, "lost");
    rdzvd_journal_close(j, false);
    rdzvd_store_free(r);
    /* The journal's name taken by a directory: the snapshot can't be renamed over it. */
    r = new_store();
    j = jopen("cf", r);
    ASSERT_OK(unlink(p));
    ASSERT_OK(mkdir(p, 0700));
    ASSERT_EQ(rdzvd_journal_compact(j), -EISDIR);
    ASSERT_TRUE(rdzvd_journal_failed(j));
    ASSERT_FALSE(tmp_exists("cf"));
    rdzvd_journal_close(j, true); /* the directory can't be deleted as a file: left, no crash */
    ASSERT_OK(rmdir(p));
    rdzvd_store_free(r);
    rdzvd_store_free(s);
}

/* A snapshot write that fails (EFBIG) wherever the snapshot writes: the journal is intact and
 * replays everything. */
static void test_snapshot_write_error_keeps_journal(void)
{
    /* One value the snapshot buffers, one it writes directly, and two that together overflow
     * its buffer (the first is written when the second doesn't fit). */
    static const size_t sizes[] = {8u << 10, 100u << 10, 40u << 10};
    struct rlimit old, small;

    signal(SIGXFSZ, SIG_IGN);
    ASSERT_OK(getrlimit(RLIMIT_FSIZE, &old));
    for (size_t i = 0; i < 3; i++) {
        struct rdzvd_store *s = new_store(), *r = new_store();
        struct rdzvd_journal *j = jopen("swe", s);
        char *val = malloc(sizes[i]);
        int rc;

        ASSERT_NOT_NULL(val);
        memset(val, 'a' + (int)i, sizes[i] - 1);
        val[sizes[i] - 1] = '\0';
        ASSERT_OK(set_str(s, "big", val));
        if (i == 2)
            ASSERT_OK(set_str(s, "big2", val));
        small = old;
        small.rlim_cur = 4096;
        ASSERT_OK(setrlimit(RLIMIT_FSIZE, &small));
        rc = rdzvd_journal_compact(j);
        ASSERT_OK(setrlimit(RLIMIT_FSIZE, &old));
        ASSERT_EQ(rc, -EFBIG);
        ASSERT_TRUE(rdzvd_journal_failed(j));
        ASSERT_FALSE(tmp_exists("swe"));
        rdzvd_journal_close(j, false);
        j = jopen("swe", r);
        expect_same(s, r);
        expect_value(r, "big", val);
        /* Without the limit the same snapshot is written, and replays the same. */
        ASSERT_OK(rdzvd_journal_compact(j));
        rdzvd_journal_close(j, false);
        rdzvd_store_free(r);
        r = new_store();
        j = jopen("swe", r);
        expect_same(s, r);
        rdzvd_journal_close(j, true);
        free(val);
        rdzvd_store_free(s);
        rdzvd_store_free(r);
    }
}

/* A journal larger than its compaction threshold when opened (the content it was sized for
 * was deleted) is compacted at once; if that compaction fails, open fails and the file stays. */
static void test_oversized_journal_compacted_at_open(void)
{
    struct rdzvd_store *s = new_store(), *r = new_store();
    struct rdzvd_journal *j = jopen("over", s);
    char *bulk = malloc(600u << 10), val[1024], p[512], tp[520];
    uint64_t size;

    ASSERT_NOT_NULL(bulk);
    memset(bulk, 'b', (600u << 10) - 1);
    bulk[(600u << 10) - 1] = '\0';
    ASSERT_OK(set_str(s, "bulk", bulk));
    ASSERT_OK(rdzvd_journal_compact(j)); /* threshold now 2 x 600 KiB */
    ASSERT_EQ(rdzvd_store_delete(s, "bulk", 4), 1);
    memset(val, 'h', sizeof(val) - 1);
    val[sizeof(val) - 1] = '\0';
    while (rdzvd_journal_stats(j)->size < RDZVD_JOURNAL_COMPACT_MIN + (16u << 10))
        ASSERT_OK(set_str(s, "hot", val));
    ASSERT_EQ(rdzvd_journal_stats(j)->compactions, 1); /* not yet: under 1.2 MiB */
    size = rdzvd_journal_stats(j)->size;
    rdzvd_journal_close(j, false);
    /* Its compaction at open can't write its snapshot: open fails, the journal is untouched. */
    path_of("over", p, sizeof(p));
    snprintf(tp, sizeof(tp), "%s.tmp", p);
    ASSERT_OK(mkdir(tp, 0700));
    ASSERT_EQ(rdzvd_journal_open(NULL, dirfd_, dir, "over", RDZVD_FSYNC_NO, r, &j), -EIO);
    ASSERT_OK(rmdir(tp));
    ASSERT_EQ((uint64_t)file_size("over"), size);
    rdzvd_store_free(r);
    r = new_store();
    j = jopen("over", r);
    ASSERT_EQ(rdzvd_journal_stats(j)->compactions, 1);
    ASSERT_LE(file_size("over"), hdr_len("over") + 13 + 3 + sizeof(val));
    expect_same(s, r);
    rdzvd_journal_close(j, true);
    free(bulk);
    rdzvd_store_free(s);
    rdzvd_store_free(r);
}

/* ---- buffering ---- */

/* Buffered records keep their order with a record too large for the buffer (written at once,
 * after what was buffered) and with a full buffer (written without waiting for a flush); empty
 * keys and values, DEL and QPOP records buffer too. Snapshots of values larger than their own
 * buffer, and of empty values, replay the same. */
static void test_buffered_order_and_large_records(void)
{
    struct rdzvd_store *s = new_store(), *r = new_store(), *r2 = new_store();
    struct rdzvd_journal *j = jopen("buf", s);
    unsigned pending_calls = 0;
    char *large = malloc(100u << 10), val[1024];
    off_t size0;

    ASSERT_NOT_NULL(large);
    memset(large, 'L', (100u << 10) - 1);
    large[(100u << 10) - 1] = '\0';
    rdzvd_journal_set_buffered(j, count_pending, &pending_calls);
    size0 = file_size("buf");
    ASSERT_OK(set_str(s, "big", "small first"));
    ASSERT_TRUE(rdzvd_journal_pending(j));
    ASSERT_EQ(file_size("buf"), size0);
    ASSERT_OK(set_str(s, "big", large)); /* the small one goes first: the large one wins */
    ASSERT_FALSE(rdzvd_journal_pending(j));
    ASSERT_EQ((uint64_t)file_size("buf"), rdzvd_journal_stats(j)->size);
    ASSERT_EQ(pending_calls, 1);
    /* Set again (a buffer is there): the same buffer, the new callback. */
    rdzvd_journal_set_buffered(j, NULL, NULL);
    ASSERT_OK(rdzvd_store_set(s, "", 0, "empty key", 9));
    ASSERT_OK(set_str(s, "empty", ""));
    ASSERT_OK(set_str(s, "gone", "x"));
    ASSERT_EQ(rdzvd_store_delete(s, "gone", 4), 1);
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "i1", 2));
    ASSERT_OK(rdzvd_store_queue_push(s, "q", 1, "i2", 2));
    expect_pop(s, "q", "i1");
    ASSERT_EQ(pending_calls, 1);
    size0 = file_size("buf");
    memset(val, 'f', sizeof(val) - 1);
    val[sizeof(val) - 1] = '\0';
    for (int i = 0; i < 100; i++) { /* ~100 KiB: more than the 64 KiB buffer */
        char k[16];

        snprintf(k, sizeof(k), "fill%d", i);
        ASSERT_OK(set_str(s, k, val));
    }
    ASSERT_TRUE(file_size("buf") > size0 + (32 << 10));
    ASSERT_TRUE(rdzvd_journal_pending(j));
    ASSERT_OK(rdzvd_journal_flush(j)); /* EVERYSEC: written, not synced */
    ASSERT_EQ(rdzvd_journal_stats(j)->fsyncs, 0);
    ASSERT_EQ((uint64_t)file_size("buf"), rdzvd_journal_stats(j)->size);
    rdzvd_journal_close(j, false);
    j = jopen("buf", r);
    expect_same(s, r);
    expect_value(r, "", "empty key");
    expect_value(r, "empty", "");
    ASSERT_OK(rdzvd_journal_compact(j));
    rdzvd_journal_close(j, false);
    j = jopen("buf", r2);
    expect_same(s, r2);
    expect_value(r2, "big", large);
    expect_pop(r2, "q", "i2");
    rdzvd_journal_close(j, true);
    free(large);
    rdzvd_store_free(s);
    rdzvd_store_free(r);
    rdzvd_store_free(r2);
}

/* fsync "no": writes are journaled but never fsynced, not by sync, flush or close. */
static void test_fsync_no_never_syncs(void)
{
    struct rdzvd_store *s = new_store(), *r = new_store();
    struct rdzvd_journal *j = NULL;

    ASSERT_OK(rdzvd_journal_open(NULL, dirfd_, dir, "nosync", RDZVD_FSYNC_NO, s, &j));
    ASSERT_OK(set_str(s, "a", "1"));
    ASSERT_OK(rdzvd_store_set(s, "", 0, "empty key", 9)); /* unbuffered: no key bytes */
    ASSERT_OK(rdzvd_journal_sync(j));
    ASSERT_OK(rdzvd_journal_flush(j));
    ASSERT_EQ(rdzvd_journal_stats(j)->fsyncs, 0);
    ASSERT_EQ(rdzvd_journal_stats(j)->records, 2);
    rdzvd_journal_close(j, false);
    j = jopen("nosync", r);
    expect_value(r, "a", "1");
    expect_value(r, "", "empty key");
    rdzvd_journal_close(j, true);
    rdzvd_store_free(s);
    rdzvd_store_free(r);
}

/* Buffered records that can't be written: flush reports it, nothing stays pending, the fsync
 * timer is stopped (the loop has nothing left to wait for), and a record too large to buffer
 * that follows is not written after the lost ones. */
static void test_buffered_write_error(void)
{
    struct rdzvd_store *s = new_store(), *r = new_store();
    struct rdzvd_journal *j = NULL;
    struct rlimit old, small;
    char *large = malloc(100u << 10);
    uv_loop_t loop;
    uint64_t t0;
    int rc;

    ASSERT_NOT_NULL(large);
    memset(large, 'L', (100u << 10) - 1);
    large[(100u << 10) - 1] = '\0';
    signal(SIGXFSZ, SIG_IGN);
    ASSERT_OK(getrlimit(RLIMIT_FSIZE, &old));
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(rdzvd_journal_open(&loop, dirfd_, dir, "bwe", RDZVD_FSYNC_EVERYSEC, s, &j));
    ASSERT_OK(set_str(s, "kept", "1"));
    rdzvd_journal_set_buffered(j, NULL, NULL);
    ASSERT_OK(set_str(s, "lost", "2"));
    small = old;
    small.rlim_cur = (rlim_t)file_size("bwe"); /* not one byte more */
    ASSERT_OK(setrlimit(RLIMIT_FSIZE, &small));
    rc = rdzvd_journal_flush(j);
    ASSERT_OK(setrlimit(RLIMIT_FSIZE, &old));
    ASSERT_EQ(rc, -EFBIG);
    ASSERT_TRUE(rdzvd_journal_failed(j));
    ASSERT_FALSE(rdzvd_journal_pending(j));
    uv_update_time(&loop);
    t0 = uv_now(&loop);
    ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    uv_update_time(&loop);
    ASSERT_TRUE(uv_now(&loop) - t0 < 900); /* the one-second timer was stopped */
    ASSERT_EQ(rdzvd_journal_stats(j)->fsyncs, 0);
    rdzvd_journal_close(j, false);
    ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
    /* The large record behind buffered ones that fail to write is dropped with them. */
    rdzvd_store_free(s);
    s = new_store();
    j = jopen("bwe", s);
    expect_value(s, "kept", "1");
    expect_missing(s, "lost");
    rdzvd_journal_set_buffered(j, NULL, NULL);
    ASSERT_OK(set_str(s, "lost", "3"));
    small.rlim_cur = (rlim_t)file_size("bwe");
    ASSERT_OK(setrlimit(RLIMIT_FSIZE, &small));
    rc = set_str(s, "large", large);
    ASSERT_OK(setrlimit(RLIMIT_FSIZE, &old));
    ASSERT_OK(rc); /* the store still serves */
    ASSERT_TRUE(rdzvd_journal_failed(j));
    rdzvd_journal_close(j, false);
    /* A full buffer that can't be written when the next record needs its room. */
    rdzvd_store_free(s);
    s = new_store();
    j = jopen("bwe", s);
    rdzvd_journal_set_buffered(j, NULL, NULL);
    small.rlim_cur = (rlim_t)file_size("bwe");
    ASSERT_OK(setrlimit(RLIMIT_FSIZE, &small));
    for (int i = 0; i < 200 && !rdzvd_journal_failed(j); i++) {
        char k[16];

        snprintf(k, sizeof(k), "fill%d", i);
        rc = set_str(s, k, "0123456789012345678901234567890123456789012345678901234567890123"
                           "4567890123456789012345678901234567890123456789012345678901234567"
                           "8901234567890123456789012345678901234567890123456789012345678901"
                           "2345678901234567890123456789012345678901234567890123456789012345"
                           "6789012345678901234567890123456789012345678901234567890123456789"
                           "0123456789012345678901234567890123456789012345678901234567890123"
                           "4567890123456789012345678901234567890123456789012345678901234567"
                           "8901234567890123456789012345678901234567890123456789012345678901");
        if (rc < 0)
            break;
    }
    ASSERT_OK(setrlimit(RLIMIT_FSIZE, &old));
    ASSERT_OK(rc);
    ASSERT_TRUE(rdzvd_journal_failed(j)); /* within 200 records of 512+ bytes: > 64 KiB */
    ASSERT_FALSE(rdzvd_journal_pending(j));
    rdzvd_journal_close(j, false);
    j = jopen("bwe", r);
    expect_value(r, "kept", "1");
    expect_missing(r, "lost");
    expect_missing(r, "large");
    expect_missing(r, "fill0");
    rdzvd_journal_close(j, true);
    ASSERT_EQ(uv_loop_close(&loop), 0);
    free(large);
    rdzvd_store_free(s);
    rdzvd_store_free(r);
}

/* ---- unlink and close ---- */

/* rdzvd_journal_unlink: a bad name is refused; a symlink is never followed nor removed; a
 * directory is reported; junk, an empty file and a version 1 journal (no owner) are deleted. */
static void test_unlink_edge_cases(void)
{
    static const uint8_t junk[] = "junk";
    uint8_t v1[16];
    char p[512];

    ASSERT_EQ(rdzvd_journal_unlink(dirfd_, "../x"), -EINVAL);
    ASSERT_EQ(rdzvd_journal_unlink(dirfd_, NULL), -EINVAL);
    path_of("lnk", p, sizeof(p));
    ASSERT_OK(symlink("target", p));
    ASSERT_EQ(rdzvd_journal_unlink(dirfd_, "lnk"), -ELOOP);
    ASSERT_OK(unlink(p)); /* still there */
    path_of("dj", p, sizeof(p));
    ASSERT_OK(mkdir(p, 0700));
    ASSERT_EQ(rdzvd_journal_unlink(dirfd_, "dj"), -EISDIR);
    ASSERT_OK(rmdir(p));
    write_file("uj", junk, sizeof(junk));
    ASSERT_OK(rdzvd_journal_unlink(dirfd_, "uj"));
    write_file("uj", junk, 0);
    ASSERT_OK(rdzvd_journal_unlink(dirfd_, "uj"));
    memcpy(v1, "RDZVJRN1\x01\0\0\0", 12);
    rdzv_set_u32(v1 + 12, crc32_of(v1, 12));
    write_file("uj", v1, sizeof(v1));
    ASSERT_OK(rdzvd_journal_unlink(dirfd_, "uj"));
    path_of("uj", p, sizeof(p));
    ASSERT_TRUE(access(p, F_OK) < 0 && errno == ENOENT);
}

/* close(NULL) is a no-op; a drop whose file is already gone is fine. */
static void test_close_edge_cases(void)
{
    struct rdzvd_store *s = new_store();
    struct rdzvd_journal *j = jopen("cl", s);

    rdzvd_journal_close(NULL, false);
    rdzvd_journal_close(NULL, true);
    remove_journal("cl");
    rdzvd_journal_close(j, true);
    ASSERT_OK(set_str(s, "after", "close")); /* the hook is gone with it */
    rdzvd_store_free(s);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");

    rdzv_log_setup("test-journal", RDZV_LOG_ERROR);
    snprintf(dir, sizeof(dir), "%s/test-journal.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ASSERT_NOT_NULL(mkdtemp(dir));
    dirfd_ = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_OK(dirfd_);

    TEST(test_change_hook_events);
    TEST(test_round_trip_every_type);
    TEST(test_replay_equals_original_random);
    TEST(test_torn_tail_every_offset);
    TEST(test_corrupt_byte_in_middle_refused);
    TEST(test_corrupt_last_record_is_a_tail);
    TEST(test_job_table_record_refused);
    TEST(test_append_journals_its_own_bytes);
    TEST(test_bad_header_and_unreadable);
    TEST(test_owner_in_header);
    TEST(test_version_1_upgraded);
    TEST(test_names_and_lock);
    TEST(test_compaction_bounded);
    TEST(test_queue_ops);
    TEST(test_fsync_everysec_and_always);
    TEST(test_write_error_disables);
    TEST(test_fsync_mode_names);
    TEST(test_open_refuses_journal_over_limits);
    TEST(test_more_bad_headers);
    TEST(test_create_fails_cleanly);
    TEST(test_compaction_failure_keeps_journal);
    TEST(test_snapshot_write_error_keeps_journal);
    TEST(test_oversized_journal_compacted_at_open);
    TEST(test_buffered_order_and_large_records);
    TEST(test_fsync_no_never_syncs);
    TEST(test_buffered_write_error);
    TEST(test_unlink_edge_cases);
    TEST(test_close_edge_cases);

    close(dirfd_);
    ASSERT_OK(rmdir(dir)); /* every test cleaned up after itself */
    return tap_done();
}
